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
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import nbformat

from .. import paths
from ..errors import GraderFault, NoGradingCourse
from ..intake.inventory import Submission
from ..report import scores
from ..report.feedback import scrub_paths
from ..report.writer import ReportWriter
from .child import warm_up
from .limits import Limits
from .outcome import Outcome
from .pool import GraderPool
from .preflight import REFERENCE_ID, judge_preflight
from .workcopy import collect, internal_id, prepare

# Statuses that may be the grader's fault rather than the notebook's.
FAULT_STATUSES = ("kernel_died", "grader_crash", "grader_error")
FAULT_AFTER = 6  # submissions run in a kernel before a batch judges its own health
FAULT_SHARE = 0.75  # this share of them failing the same way stops the batch


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
) -> list[Outcome]:
    """Grade `submissions` (from `intake.inventory.discover`) into `report_dir`; one outcome each,
    by id.

    `reference` is the preflight's notebook (`preflight.write_reference`): graded first, in the
    same pool, judged by `preflight.judge_preflight`. It is no student: it gets no row, no page,
    and counts in no fault share. `replaced` are ids an earlier run into `report_dir` graded
    files of this export under (`writer.stale_ids`): their rows, pages and nbgrader submissions
    go. `intake` (the `Intake`) adds its files and roster to summary.html and the LMS files.
    Raises `GraderFault`, having written nothing into `report_dir`.
    """
    course = settings.course.resolve()
    if not (course / "gradebook.db").exists():
        raise NoGradingCourse(f"no grading course at {course}: run `make notebooks` first")
    release = nbformat.read(course / paths.STUDENT_RELEASE, as_version=4)
    # Everything the instructor wrote is checked before anything is graded.
    students = {s.student_id for s in submissions}
    writer = ReportWriter.open(report_dir, release, students, intake, settings.lms_files)
    batch = Batch(submissions, report_dir, settings, release, writer, reference)
    warm_up(release)
    batch.run(course)
    outcomes = sorted(batch.outcomes, key=lambda o: o.student_id)
    # Written only now: a stopped batch leaves no page, no row and no notebook in REPORT.
    writer.write(outcomes, course, settings.progress, replaced)
    return outcomes


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
        self.has_reference = reference is not None
        # Progress lines waiting for the preflight's verdict; None once there is none to wait for.
        self.held = [] if reference is not None else None
        self.outcomes: list[Outcome] = []
        self.start = time.monotonic()

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
        with pool:
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
            return
        self.writer.add(outcome)
        shutil.rmtree(workdir, ignore_errors=True)
        self.outcomes.append(outcome)
        line = progress_line(outcome, len(self.outcomes), len(self.submissions), self.start)
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


def fault_in(outcomes: list[Outcome]) -> str | None:
    """What most submissions graded so far failed of, when that looks like the grader's fault.

    Counted among the submissions that reached a kernel (a file rejected before grading says
    nothing about the grader): once there are FAULT_AFTER of them, and FAULT_SHARE of them
    ended with the same grader-side status and reason.
    """
    ran = [o for o in outcomes if o.status in FAULT_STATUSES + ("graded", "flagged", "timeout")]
    if len(ran) < FAULT_AFTER:
        return None
    same = Counter(
        (o.status, scrub_paths(o.reason)) for o in ran if o.status in FAULT_STATUSES
    ).most_common(1)
    if not same or same[0][1] < FAULT_SHARE * len(ran):
        return None
    (status, reason), count = same[0]
    return f"{count} of the {len(ran)} submissions run so far ended {status}: {reason}"


def progress_line(outcome: Outcome, count: int, total: int, start: float) -> str:
    """`[ 12/40] student  status  score/max  seconds  ETA` (counted parts, as in grades.csv)."""
    eta = (time.monotonic() - start) / count * (total - count)
    score = scores.counted_score(outcome.scores)
    maximum = scores.max_score([(g, m) for g, (_, m) in outcome.scores.items()])
    return (
        f"[{count:>3}/{total}] {outcome.student_id:<24} {outcome.status:<14} "
        f"{score:>6g}/{maximum:<6g} {outcome.seconds:5.1f} s   ETA {eta:4.0f} s"
    )
