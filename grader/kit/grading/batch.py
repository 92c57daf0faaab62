"""One batch: every submission graded through the pool, behind the preflight gate, stopped on
a grader fault, with a progress line each; REPORT/ is written only once all have passed.

A grader fault never becomes a student's grade. The reference solution (`preflight.py`) is
graded first, in the batch's own queue, so the other job slots do not sit idle while it runs;
it must earn full marks, and until it has, no student's progress line is printed. During the
batch, when most submissions so far failed the same way on the grader's side (`fault_in`), the
batch stops. Either way `GraderFault` is raised and nothing is written into REPORT.
"""

from __future__ import annotations

import shutil
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import nbformat

from .. import paths
from ..errors import GraderFault, WrongExport
from ..intake.inventory import Submission
from ..report import scores
from ..report.feedback import scrub_paths
from ..report.writer import ReportWriter
from .child import warm_up
from .limits import Limits
from .outcome import Outcome
from .pool import GraderPool
from .preflight import REFERENCE_ID, judge_preflight
from .resumable import NOT_GRADED_YET, Interrupted, finished, forget, keep
from .workcopy import collect, internal_id, prepare

# Statuses that may be the grader's fault rather than the notebook's.
FAULT_STATUSES = ("kernel_died", "grader_crash", "grader_error")
FAULT_AFTER = 6  # submissions run in a kernel before a batch judges its own health
FAULT_SHARE = 0.75  # this share of them failing the same way stops the batch
# Files that say the input is another assignment's export, not this class's accidents.
WRONG_EXPORT_STATUSES = ("wrong_assignment", "not_a_notebook")


@dataclass(frozen=True)
class BatchSettings:
    """How a batch grades: the grading course, the pool's size, limits and sandbox.

    `cgroup_bases` is what `cgroups.available()` found (the caller that announced the limits
    passes what it announced); `zygote` a serving `Zygote`, None for kernels started afresh;
    `sandbox_kind` what the start line said (the preflight's error repeats it).
    """

    course: Path
    jobs: int
    limits: Limits = field(default_factory=Limits)
    sandbox: bool = True
    cgroup_bases: dict | None = None  # None: looked up (`cgroups.available()`) by the pool
    zygote: object = None
    sandbox_kind: str = ""
    stop_on_fault: bool = True
    replace_graded: bool = False  # a non-grade status may replace an earlier run's grade
    progress: TextIO = sys.stderr
    lms_files: str = "auto"  # which LMS files REPORT gets (`report.lms.CHOICES`, --lms)


def grade_all(
    submissions: list[Submission],
    report_dir: Path,
    settings: BatchSettings,
    *,
    reference: Path | None = None,
    replaced=frozenset(),
    intake=None,
    resumed=(),
) -> list[Outcome]:
    """Grade `submissions` (from `intake.inventory.discover`) into `report_dir`; one outcome each,
    by id, with `resumed` (the outcomes an interrupted run kept: `resumable.left_to_grade`).

    `reference` is the preflight's notebook (`preflight.write_reference`): graded first, in the
    same pool, judged by `preflight.judge_preflight`. It is no student: it gets no row, no page,
    and counts in no fault share. `replaced` are ids an earlier run into `report_dir` graded
    files of this export under (`writer.stale_ids`): their rows, pages and nbgrader submissions
    go. `intake` (the `Intake`) adds its files and roster to summary.html and the LMS files,
    and gets its intake.csv written with each file's status.
    Raises `GraderFault`, having written nothing into `report_dir` (and kept nothing of this
    run for a resume); `Interrupted`, having written the report marked unfinished.
    """
    course = paths.require_grading_course(settings.course)
    release = nbformat.read(course / paths.STUDENT_RELEASE, as_version=4)
    # Everything the instructor wrote is checked before anything is graded.
    students = {s.student_id for s in submissions} | {o.student_id for o in resumed}
    writer = ReportWriter.open(report_dir, release, students, intake, settings.lms_files)
    for outcome in resumed:
        writer.add(outcome)
    batch = Batch(submissions, report_dir, settings, release, writer, reference)
    warm_up(release)
    try:
        batch.run(course)
        if batch.interrupted and batch.held is not None:
            raise Interrupted(
                "before the preflight had passed: nobody was graded by this run and nothing was "
                f"written into {report_dir}. Run the same command again."
            )
        outcomes = sorted([*resumed, *batch.outcomes], key=lambda o: o.student_id)
        if settings.stop_on_fault:
            check_export(outcomes, intake, report_dir)
    except (GraderFault, WrongExport):
        forget(report_dir, batch.saved)  # a stopped batch's outcomes resume nothing
        raise
    pending = batch.not_reached()
    # Written only now: a stopped batch leaves no page, no row and no notebook in REPORT.
    with signals_deferred():
        writer.write(
            outcomes, course, settings.progress, replaced, settings.replace_graded, pending
        )
        if intake is not None:
            statuses = {o.student_id: o.status for o in [*outcomes, *pending]}
            intake.write_csv(report_dir / paths.INTAKE, statuses)
        if batch.interrupted:
            batch.save_all()  # an outcome taken as the signal came may not be saved yet
        else:
            finished(report_dir)
    if batch.interrupted:
        raise Interrupted(
            f"{len(outcomes)} of {len(submissions) + len(resumed)} submissions were graded and "
            f"are kept in {report_dir}; the report is marked unfinished (summary.html, "
            f"grades.csv: status {NOT_GRADED_YET} for the {len(pending)} left; no LMS file is "
            "written). Run the same command again to grade the rest: the files already graded "
            "are skipped unless their content changed."
        )
    return outcomes


def check_export(outcomes: list[Outcome], intake, report_dir: Path) -> None:
    """Raise `WrongExport` when most files are not this assignment's notebooks (another
    assignment's, not notebooks at all) or belong to no known student."""
    unknown = len(intake.unknown()) if intake is not None else 0
    wrong = Counter(o.status for o in outcomes if o.status in WRONG_EXPORT_STATUSES)
    total = len(outcomes) + unknown
    bad = sum(wrong.values()) + unknown
    if not total or bad * 2 <= total:
        return
    seen = [f"{n} {status}" for status, n in wrong.most_common()]
    seen += [f"{unknown} of no known student"] if unknown else []
    raise WrongExport(
        f"{bad} of the {total} files are not this assignment's notebooks of known students "
        f"({', '.join(seen)}): is this the right export? Nothing was written into "
        f"{report_dir}. Check the file (intake.csv is written by `make intake`), or, if these "
        "files really are this assignment's, pass --keep-going."
    )


class signals_deferred:
    """SIGINT and SIGTERM wait while REPORT is written: an interrupt lands after it, and is then
    ignored (the run has nothing left to stop)."""

    def __enter__(self):
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})

    def __exit__(self, *exc):
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        except KeyboardInterrupt:
            pass


class Batch:
    """The state of one batch while it runs: its queue, outcomes and held-back progress lines."""

    def __init__(self, submissions, report_dir, settings, release, writer, reference):
        self.submissions, self.report_dir, self.settings = submissions, report_dir, settings
        self.release, self.writer = release, writer
        self.queue = list(enumerate(submissions))
        self.reference_index = len(submissions)  # after every student's
        if reference is not None:
            queue_entry = Submission(REFERENCE_ID, reference, reference.name)
            self.queue.insert(0, (self.reference_index, queue_entry))
        self.by_index = dict(self.queue)
        self.by_id = {s.student_id: s for s in submissions}
        self.saved: list[str] = []  # the files whose outcome is kept for a resume (`resumable`)
        self.has_reference = reference is not None
        # Progress lines waiting for the preflight's verdict; None once there is none to wait for.
        self.held = [] if reference is not None else None
        self.outcomes: list[Outcome] = []
        self.interrupted = False
        self.columns = scores.grade_columns(release)

    def run(self, course: Path) -> None:
        """Grade the queue through a pool of `settings.jobs` forked graders."""
        settings = self.settings
        pool = GraderPool(
            jobs=settings.jobs,
            limits=settings.limits,
            sandbox=settings.sandbox,
            cgroup_bases=settings.cgroup_bases,
            zygote=settings.zygote,
        )
        try:
            with pool:
                self.run_pool(pool, course)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (`autograde.main`): keep what was graded
            self.interrupted = True

    def run_pool(self, pool: GraderPool, course: Path) -> None:
        """Start graders while there is room, and take each one's outcome as it ends."""
        settings = self.settings
        while self.queue or pool.busy:
            while self.queue and pool.has_room:
                index, submission = self.queue.pop(0)
                workdir = pool.workdir(index)
                outcome = prepare(submission, internal_id(index), self.release, course, workdir)
                if outcome is not None:  # could not even be normalised: no kernel needed
                    self.record(outcome, workdir, index)
                    continue
                pool.start(index, workdir, internal_id(index))
            for ended in pool.ended():
                submission = self.by_index[ended.index]
                outcome = collect(
                    ended.workdir, submission, internal_id(ended.index), ended, settings.limits
                )
                outcome.seconds = ended.seconds
                self.record(outcome, ended.workdir, ended.index)

    def record(self, outcome: Outcome, workdir: Path, index: int) -> None:
        """Take one outcome: the preflight's verdict, or a student's page, progress and health."""
        if self.has_reference and index == self.reference_index:
            judge_preflight(outcome, self.release, self.settings.sandbox_kind)
            shutil.rmtree(workdir, ignore_errors=True)
            passed = (
                f"preflight: the reference solution earned full marks ({outcome.seconds:.1f} s)"
            )
            print("\n".join([passed, *self.held]), file=self.settings.progress, flush=True)
            self.held = None
            self.save_all()
            return
        self.writer.add(outcome)
        shutil.rmtree(workdir, ignore_errors=True)
        self.outcomes.append(outcome)
        if self.held is None:  # once the preflight has passed, each outcome is kept at once
            self.save(outcome)
        line = progress_line(
            outcome, self.outcomes, len(self.submissions), self.columns, self.settings.jobs
        )
        if self.held is not None:
            self.held.append(line)
        else:
            print(line, file=self.settings.progress, flush=True)
        fault = fault_in(self.outcomes) if self.settings.stop_on_fault else None
        if fault:
            raise GraderFault(
                f"stopped after {len(self.outcomes)} of {len(self.submissions)} submissions: "
                f"{fault}. Nothing was written into {self.report_dir}: no grades.csv row and no "
                "feedback page for anyone in this batch. Check the reason above (the sandbox, "
                "the memory limit --memory-gb, free disk space), then run the batch again; if "
                "these notebooks really do fail this way, pass --keep-going."
            )

    def save(self, outcome: Outcome) -> None:
        """Keep `outcome` in REPORT for a resume, whatever ends this run (`resumable.keep`)."""
        submission = self.by_id[outcome.student_id]
        if submission.source in self.saved:
            return
        keep(self.report_dir, submission, outcome, self.writer.kept.get(outcome.student_id))
        self.saved.append(submission.source)

    def save_all(self) -> None:
        for outcome in self.outcomes:
            self.save(outcome)

    def not_reached(self) -> list[Outcome]:
        """Rows for the submissions an interrupted batch did not grade: a status, no grade."""
        if not self.interrupted:
            return []
        graded = {o.student_id for o in self.outcomes}
        reason = "the run was interrupted before grading it: run the same command again"
        return [
            Outcome.of(s, NOT_GRADED_YET, reason)
            for s in self.submissions
            if s.student_id not in graded
        ]


def fault_in(outcomes: list[Outcome]) -> str | None:
    """What most submissions graded so far failed of, when that looks like the grader's fault.

    Counted among the submissions that reached a kernel (a file rejected before grading says
    nothing about the grader): once there are FAULT_AFTER of them, and FAULT_SHARE of them
    ended with the same grader-side status and reason, or had their kernel end in the same
    cell the same way (graded around it by `faults/resume.py`, but the same death everywhere is more
    likely the grader's limits than every learner's code).
    """
    ran = [o for o in outcomes if o.status in FAULT_STATUSES + ("graded", "flagged", "timeout")]
    if len(ran) < FAULT_AFTER:
        return None
    same = Counter(key for key in map(fault_key, ran) if key).most_common(1)
    if not same or same[0][1] < FAULT_SHARE * len(ran):
        return None
    (status, reason), count = same[0]
    return f"{count} of the {len(ran)} submissions run so far ended {status}: {reason}"


def fault_key(outcome: Outcome) -> tuple[str, str] | None:
    """(status, reason) of a failure that may be the grader's, or None."""
    if outcome.status in FAULT_STATUSES:
        return outcome.status, scrub_paths(outcome.reason)
    if outcome.faults:
        status = "timeout" if "(interrupted)" in outcome.faults[0] else "kernel_died"
        return status, scrub_paths(outcome.faults[0])
    return None


def progress_line(outcome: Outcome, outcomes: list, total: int, columns, jobs: int) -> str:
    """`[ 12/40] student  status  score/max  seconds  ETA` (counted parts, as in grades.csv).

    The maximum is the release's (`columns`), whatever the submission reached; the ETA is the
    submissions left, `jobs` at a time, at the mean time of those that ran a kernel so far.
    """
    count = len(outcomes)
    ran = [o.seconds for o in outcomes if o.seconds > 0] or [0.0]
    eta = sum(ran) / len(ran) * -(-(total - count) // max(1, jobs))
    score = scores.counted_score(outcome.scores)
    maximum = scores.max_score(columns)
    return (
        f"[{count:>3}/{total}] {outcome.student_id:<24} {outcome.status:<14} "
        f"{score:>6g}/{maximum:<6g} {outcome.seconds:5.1f} s   ETA {eta:4.0f} s"
    )
