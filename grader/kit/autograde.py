"""Grade every downloaded submission with the real nbgrader, each in its own sandboxed course.

    python -m grader.kit.autograde SUBMISSIONS [--report DIR] [--jobs N] [--roster CSV]
                                   [--name-pattern REGEX]

SUBMISSIONS is a folder or a .zip: an LMS export (Moodle, Canvas, Blackboard), nbgrader's
submitted/ tree or plain `<student_id>.ipynb` files (`intake/inventory.py` finds them, names the
students and lists every file it does not grade, with why). For each submission the
grader normalises the notebook against the release (`normalize.py`), copies the grading
course (`build/grading-course`: config, source, gradebook) into a fresh working directory,
and runs nbgrader's own `autograde` there, in a forked process (`grading/child.py`), with
the kernel in a sandbox: forked from one process that imported torch and ipykernel once for
the batch, into namespaces of its own (`zygote_server.py`), or, where that cannot be made or with
--no-zygote, started afresh inside bubblewrap (`launcher.py`). Nothing a submission does reaches the template
course, the report, the repository or another submission; a kernel that dies, hangs or
floods becomes a row with its status, never a crash and never a stale grade.

Set CH34_GRADING_PHASES=1 to print how long nbgrader itself took for each submission.
With --intake-only (`make intake`) it prints who would be graded, under which id, from which
file and why, writes REPORT/intake.csv and grades nothing; exit status 4 when no file could be
tied to a known student. A grading run prints the same table first.

Writes REPORT/grades.csv (one row per student, merged with rows already there for students
not in this batch; REPORT/overrides.csv applied), REPORT/feedback/<student_id>.html (hidden
tests never shown), REPORT/intake.csv (every input file: graded, or why not),
REPORT/summary.html, REPORT/canvas.csv and moodle.csv, and for a Moodle export Moodle's offline
grading worksheet (`lms.py`), and the nbgrader course
REPORT/nbgrader/ that formgrader and `nbgrader export` read (`report/gradebook.py`).

A grader fault never becomes a student's grade. Before the batch, the kernel's interpreter is
started in the sandbox (`kernel_start_problem`). The reference solution is then graded through
exactly the batch's path (the preflight: same interpreter, sandbox, limits and forked grader),
first in the batch's own queue, so the other job slots do not sit idle while it runs; it must
earn full marks (`judge_preflight`), and until it has, no student's progress line is printed.
During the batch, when most submissions so far failed the same way on the grader's side
(`fault_in`), the batch stops. Either way the run exits with status 3 and an error for the
instructor, and nothing is written into REPORT: no row, no page.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for_exit
from pathlib import Path

import nbformat

from .authoring.build import GRADING_COURSE, STUDENT_RELEASE, kernel_tempdir
from .authoring.examples import filled_submission
from .authoring.nbsource import (
    ASSIGNMENT,
    NOTEBOOK_NAME,
    REPO_ROOT,
    nbgrader_meta,
    strip_solution_markers,
)
from .grading.child import (
    Limits,
    Zygote,
    grade_in_child,
    kernel_start_problem,
    sandbox_available,
    warm_up,
)
from .intake import integrity
from .intake.inventory import IntakeError, Submission, discover
from .intake.normalize import Ungradable, normalize_submission
from .report import feedback, lms, summary
from .report import gradebook as formgrader
from .report import grades as report
from .sandbox import cgroups, reaper

# Statuses that may be the grader's fault rather than the notebook's.
FAULT_STATUSES = ("kernel_died", "grader_crash", "grader_error")
FAULT_AFTER = 6  # submissions run in a kernel before a batch judges its own health
FAULT_SHARE = 0.75  # this share of them failing the same way stops the batch


class GraderFault(Exception):
    """The grader, not a submission, is broken: the message is for the instructor."""


@dataclass
class Outcome:
    """The grade of one submission, as it goes into grades.csv."""

    student_id: str
    status: str
    reason: str = ""
    scores: dict = field(default_factory=dict)  # grade_id -> (score, max_score)
    repairs: list = field(default_factory=list)
    seconds: float = 0.0
    autograded: str = ""  # nbgrader's autograded notebook, while it is still in the working copy
    late: bool = False  # the export marks the submission late (Canvas's LATE, a NAME_PATTERN)
    source: str = ""  # the input file as named in the export
    superseded: list = field(default_factory=list)  # the student's other notebooks, not graded
    choice: str = ""  # with several notebooks: the rule that chose the one graded


def grade_all(
    submissions: list[Submission],
    report_dir: Path,
    *,
    course: Path,
    jobs: int,
    limits: Limits = Limits(),
    sandbox: bool = True,
    cgroup_bases: dict | None = None,
    progress=sys.stderr,
    roster: Path | None = None,
    stop_on_fault: bool = True,
    reference: Path | None = None,
    zygote: Zygote | None = None,
    replaced=frozenset(),
    intake=None,
) -> list[Outcome]:
    """Grade `submissions` (from `intake.discover`) into `report_dir`; one outcome each, by id.

    nbgrader never sees a student's id (it reads `[...]` in one as a glob): each submission is
    graded as `s<index>` in its own working copy, and its Outcome carries the real id.

    `cgroup_bases` is what `cgroups.available()` found (looked up here when None): the caller
    that announced the limits passes what it announced. Raises `GraderFault`, having written
    nothing into `report_dir`, when most submissions fail the same way (`fault_in`) and
    `stop_on_fault` holds.

    `reference` is the preflight's notebook (`write_reference`): graded first, in the same
    pool, and judged by `judge_preflight` (GraderFault, nothing written, unless full marks).
    It is no student: it gets no row, no page, and counts in no fault share. Students graded
    while it runs have their progress lines held back until it has passed.

    `zygote` is a serving `Zygote` (kernels forked from it), None for kernels started afresh.

    `replaced` are ids an earlier run into `report_dir` graded files of this export under, that
    are now read under another id or none (`stale_ids`): their rows, pages and nbgrader
    submissions go. `intake` (the `Intake`) adds its files and roster to summary.html.
    """
    course = course.resolve()
    if not (course / "gradebook.db").exists():
        raise SystemExit(f"no grading course at {course}: run `make notebooks` first")
    release = nbformat.read(course / STUDENT_RELEASE, as_version=4)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "feedback").mkdir(exist_ok=True)
    # Everything the instructor wrote is checked before anything is graded.
    columns = report.grade_columns(release)
    header, previous = report.read_grades(report_dir / "grades.csv")
    overrides = report.read_overrides(
        report_dir / "overrides.csv",
        set(previous) | {s.student_id for s in submissions},
        report.kit_columns(columns) + header,
        report.column_maxima(columns),
    )
    people = lms.read_roster(roster)
    work_root = kernel_tempdir("ch34-grading-", below="/0000/runtime/kernel-99999")
    outcomes, running, queue = [], {}, list(enumerate(submissions))
    reference_index = len(submissions)  # after every student's
    if reference is not None:
        queue.insert(
            0, (reference_index, Submission("reference-solution", reference, reference.name))
        )
    # Progress lines waiting for the preflight's verdict; None once there is none to wait for.
    held = [] if reference is not None else None
    pages, kept = {}, {}  # by student: the feedback page, the autograded notebook
    start = time.monotonic()
    context = multiprocessing.get_context("fork")
    warm_up(release)
    # Whatever a grader leaves running (a kernel in its own session, a detached process) is
    # re-parented here when the grader ends, and killed.
    reaper.adopt_orphans()
    threads = kernel_threads(jobs)
    bases = cgroups.available() if cgroup_bases is None else cgroup_bases
    # The zygote is this process's child too: it serves the whole batch, so it is spared.
    zygote_pid, zygote_socket = (zygote.process.pid, zygote.socket) if zygote else (None, None)
    caps = {"pids": limits.processes, "memory": limits.memory_bytes}

    def record(outcome: Outcome, workdir: Path, submission: Submission, index: int) -> None:
        nonlocal held
        if reference is not None and index == reference_index:
            judge_preflight(outcome, release, sandbox_kind(sandbox, zygote))
            shutil.rmtree(workdir, ignore_errors=True)
            passed = (
                f"preflight: the reference solution earned full marks ({outcome.seconds:.1f} s)"
            )
            print("\n".join([passed, *held]), file=progress, flush=True)
            held = None
            return
        outcome.student_id, outcome.late = submission.student_id, submission.late
        outcome.source, outcome.superseded = submission.source, list(submission.superseded)
        outcome.choice = submission.choice
        kept[outcome.student_id] = formgrader.read_autograded(outcome.autograded)
        pages[outcome.student_id] = finish(outcome, workdir, overrides.get(outcome.student_id, ()))
        outcomes.append(outcome)
        line = progress_line(outcome, len(outcomes), len(submissions), start)
        if held is not None:
            held.append(line)
        else:
            print(line, file=progress, flush=True)
        fault = fault_in(outcomes) if stop_on_fault else None
        if fault:
            raise GraderFault(
                f"stopped after {len(outcomes)} of {len(submissions)} submissions: {fault}. "
                f"Nothing was written into {report_dir}: no grades.csv row and no feedback "
                "page for anyone in this batch. Check the reason above (the sandbox, the memory "
                "limit --memory-gb, free disk space), then run the batch again; if these "
                "notebooks really do fail this way, pass --keep-going."
            )

    try:
        while queue or running:
            while queue and len(running) < jobs:
                index, submission = queue.pop(0)
                student_id = internal_id(index)
                workdir = work_root / f"{index:04d}"
                outcome = prepare(submission.path, student_id, release, course, workdir)
                if outcome is not None:  # could not even be normalised: no kernel needed
                    record(outcome, workdir, submission, index)
                    continue
                groups = cgroups.make_groups(bases, f"{work_root.name}-{index:04d}", caps)
                proc = context.Process(
                    target=grade_in_child,
                    args=(workdir, student_id, limits, sandbox, threads, groups, zygote_socket),
                )
                proc.start()
                running[proc] = (index, submission, workdir, time.monotonic(), groups)
            # Wake as soon as a grader exits (its slot refills at once), or at the next deadline.
            deadlines = [began + limits.notebook_timeout_s for *_, began, _ in running.values()]
            if deadlines:
                wait_for_exit(
                    [proc.sentinel for proc in running],
                    timeout=max(0.0, min(deadlines) - time.monotonic()),
                )
            for proc, (index, submission, workdir, began, groups) in list(running.items()):
                overdue = time.monotonic() - began > limits.notebook_timeout_s
                if proc.is_alive() and not overdue:
                    continue
                if proc.is_alive():
                    reaper.kill_group(proc.pid)
                proc.join()
                del running[proc]
                reaper.kill_descendants(spare=[other.pid for other in running] + [zygote_pid])
                cgroups.remove(groups)
                outcome = collect(workdir, internal_id(index), proc.exitcode, overdue, limits)
                outcome.seconds = time.monotonic() - began
                record(outcome, workdir, submission, index)
    finally:
        for proc in running:
            reaper.kill_group(proc.pid)
        reaper.kill_descendants()
        for *_, groups in running.values():
            cgroups.remove(groups)
        reaper.adopt_orphans(False)
        shutil.rmtree(work_root, ignore_errors=True)
    outcomes.sort(key=lambda o: o.student_id)
    # Written only now: a stopped batch leaves no page, no row and no notebook in REPORT.
    formgrader.ensure_course(report_dir, course, progress)
    for student_id, text in pages.items():
        (report_dir / "feedback" / page_name(student_id)).write_text(text, encoding="utf-8")
        formgrader.keep_notebook(report_dir, student_id, kept[student_id])
    for student_id in replaced:
        (report_dir / "feedback" / page_name(student_id)).unlink(missing_ok=True)
        formgrader.keep_notebook(report_dir, student_id, None)
    rows = report.write_grades(
        report_dir / "grades.csv", outcomes, columns, overrides, drop=replaced
    )
    gone = [Outcome(student_id, "replaced") for student_id in sorted(replaced)]
    write_reports(report_dir, outcomes, rows, columns, overrides, people, progress, gone, intake)
    return outcomes


def stale_ids(intake, report_dir: Path) -> dict[str, str]:
    """{id an earlier run graded a file of this export under: what that file is now}.

    A file is matched by its path in the export (grades.csv's `source`); an id graded again in
    this batch is not stale.
    """
    now = {s.source: f"graded as {s.student_id}" for s in intake.submissions}
    now |= {s.source: f"{s.outcome} ({s.why})" for s in intake.skipped}
    ids = {s.student_id for s in intake.submissions}
    _, previous = report.read_grades(report_dir / "grades.csv")
    return {
        student_id: f"{row['source']}: {now[row['source']]}"
        for student_id, row in previous.items()
        if row.get("source") in now and student_id not in ids
    }


def write_reports(
    report_dir: Path, outcomes, rows, columns, overrides, people, progress, gone=(), intake=None
) -> None:
    """After grades.csv: the class summary, the LMS files and the nbgrader course's gradebook.

    `gone` are Outcomes of replaced ids (no reviewable notebook): their nbgrader submissions go.
    """
    warning = report.max_score_warning(rows)
    report.warn(warning, progress)
    summary.write_summary(
        report_dir / "summary.html", rows, columns, [warning] if warning else [], intake=intake
    )
    for line in lms.write_lms_files(report_dir, rows, people):
        print(line, file=progress)
    held = formgrader.record(report_dir, [*outcomes, *gone], overrides)
    print(
        f"nbgrader course {formgrader.course_dir(report_dir)}: {held} graded submissions "
        "(`nbgrader formgrader` / `nbgrader export` there)",
        file=progress,
    )


def internal_id(index: int) -> str:
    """The id nbgrader grades a submission under: safe in its globs and paths, unlike a learner's."""
    return f"s{index:04d}"


def prepare(path: Path, student_id: str, release, course: Path, workdir: Path) -> Outcome | None:
    """Normalise one submission into its own copy of the course; an Outcome if it cannot be graded.

    `student_id` is the internal id (`internal_id`), never the learner's own.
    """
    workdir.mkdir(parents=True)
    try:
        normalized = normalize_submission(path.read_bytes(), release)
    except Ungradable as error:
        return Outcome(student_id, error.status, error.reason)
    except OSError as error:
        return Outcome(student_id, "unreadable", f"could not read the file: {error.strerror}")
    target = workdir / "course"
    shutil.copytree(
        course,
        target,
        ignore=shutil.ignore_patterns("release", "autograded", "feedback", "submitted"),
    )
    submitted = target / "submitted" / student_id / ASSIGNMENT
    submitted.mkdir(parents=True)
    nbformat.write(normalized.notebook, submitted / NOTEBOOK_NAME)
    (workdir / "repairs.json").write_text(json.dumps(normalized.repairs, ensure_ascii=False))
    findings = integrity.scan(integrity.learner_cells(normalized.notebook))
    (workdir / "findings.json").write_text(json.dumps(findings, ensure_ascii=False))
    return None


def collect(workdir: Path, student_id: str, exitcode, overdue: bool, limits: Limits) -> Outcome:
    """Turn what the child left behind into an Outcome."""
    repairs = (
        json.loads((workdir / "repairs.json").read_text())
        if (workdir / "repairs.json").exists()
        else []
    )
    result_file = workdir / "result.json"
    if overdue:
        return Outcome(
            student_id,
            "timeout",
            f"the notebook ran past the {limits.notebook_timeout_s} s limit "
            "(an endless loop, or one that ignores interrupts?)",
            repairs=repairs,
        )
    if not result_file.exists():
        return Outcome(
            student_id,
            "grader_crash",
            f"the grading process ended with code {exitcode} (memory limit or a signal)",
            repairs=repairs,
        )
    result = json.loads(result_file.read_text())
    if os.environ.get("CH34_GRADING_PHASES"):
        print(f"{student_id}: {result.get('seconds')}", file=sys.stderr)
    if result["status"] != "graded":
        return Outcome(student_id, *explain_failure(result.get("log", ""), limits), repairs=repairs)
    scores = {k: tuple(v) for k, v in result["scores"].items()}
    findings = json.loads((workdir / "findings.json").read_text())
    if findings:
        earned = sum(score for score, _ in scores.values())
        reason = f"suspicious code, would have scored {earned:g}: " + "; ".join(findings)
        zeroed = {k: (0.0, maximum) for k, (_, maximum) in scores.items()}
        return Outcome(
            student_id, "flagged", reason, zeroed, repairs, autograded=result["autograded"]
        )
    return Outcome(
        student_id, "graded", scores=scores, repairs=repairs, autograded=result["autograded"]
    )


def explain_failure(log: str, limits: Limits) -> tuple[str, str]:
    """Status and reason for a notebook nbgrader gave up on."""
    if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log:
        return (
            "kernel_died",
            "the kernel died while running the notebook (os._exit, a crash or the memory limit)",
        )
    if "Timeout" in log or "timed out" in log:
        return (
            "timeout",
            f"a cell did not finish within {limits.cell_timeout_s} s and could not be interrupted",
        )
    last = [line for line in log.splitlines() if line.strip()][-1:] or ["no log"]
    return "grader_error", f"nbgrader could not grade this notebook: {last[0][:200]}"


def finish(outcome: Outcome, workdir: Path, overrides=()) -> str:
    """The submission's feedback page (with the instructor's `overrides`); its working copy is removed.

    The page shows the final numbers (after `overrides`) beside the graded ones, and names the
    file graded and the student's files that were not.
    """
    final = None
    if overrides:  # the row grades.csv will hold, as `report.write_grades` computes it
        columns = [(g, m) for g, (_, m) in outcome.scores.items()]
        final = report.apply_overrides(report.outcome_row(outcome, columns), list(overrides))
    files = (outcome.source, outcome.superseded, outcome.choice) if outcome.source else None
    if outcome.autograded and Path(outcome.autograded).exists():
        autograded = nbformat.read(outcome.autograded, as_version=4)
        text = feedback.render(
            outcome.student_id,
            autograded,
            outcome.scores,
            status=outcome.status,
            reason=outcome.reason,
            repairs=outcome.repairs,
            overrides=overrides,
            final=final,
            files=files,
        )
    else:
        text = feedback.failure_page(
            outcome.student_id,
            outcome.status,
            outcome.reason,
            outcome.repairs,
            overrides=overrides,
            final=final,
            files=files,
        )
    shutil.rmtree(workdir, ignore_errors=True)
    return text


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
        (o.status, feedback.scrub_paths(o.reason)) for o in ran if o.status in FAULT_STATUSES
    ).most_common(1)
    if not same or same[0][1] < FAULT_SHARE * len(ran):
        return None
    (status, reason), count = same[0]
    return f"{count} of the {len(ran)} submissions run so far ended {status}: {reason}"


def reference_submission(course: Path):
    """The release with every answer cell holding the reference code of the course's source."""
    source = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK_NAME, as_version=4)
    for cell in source.cells:
        if nbgrader_meta(cell).get("solution"):
            cell.source = strip_solution_markers(cell.source)
    release = nbformat.read(course / STUDENT_RELEASE, as_version=4)
    return filled_submission(release, source)


def write_reference(course: Path, folder: Path) -> Path:
    """The preflight's notebook (`reference_submission`) written into `folder`; its path."""
    path = folder / "reference-solution.ipynb"
    nbformat.write(reference_submission(course.resolve()), path)
    return path


def judge_preflight(outcome: Outcome, release, sandbox: str) -> None:
    """Raise `GraderFault` unless the reference solution's `outcome` earned full marks on
    every grade cell: graded exactly as the students are, anything less is the grader's fault.
    `sandbox` is the start line's `sandbox_kind`."""
    points = dict(report.grade_columns(release))
    lost = {
        grade_id: outcome.scores.get(grade_id, (0.0, p))[0]
        for grade_id, p in points.items()
        if outcome.scores.get(grade_id, (0.0, p))[0] < p
    }
    if outcome.status == "graded" and not lost:
        return
    earned = sum(score for score, _ in outcome.scores.values())
    what = f"ended {outcome.status}" + (f": {outcome.reason}" if outcome.reason else "")
    if outcome.status == "graded":
        what = "lost points on " + ", ".join(f"{g} ({s:g}/{points[g]:g})" for g, s in lost.items())
    check = {
        "kernel_died": "can the kernel start in the sandbox (the Python installation it binds; "
        "--no-zygote tries bubblewrap), is --memory-gb high enough",
        "grader_crash": "the memory limit (--memory-gb), the cgroup limits, free disk space",
        "grader_error": "the nbgrader log above; rebuild the grading course with `make notebooks`",
        "timeout": "--cell-timeout and --notebook-timeout, and how busy this machine is",
        "graded": "that the grading course matches the source (`make notebooks`), and the "
        "limits: --memory-gb (torch alone maps about 1.5 GiB), --cell-timeout if a test is slow "
        "on this machine",
    }.get(outcome.status, "the reason above")
    raise GraderFault(
        f"preflight failed: the reference solution, graded exactly as the students' notebooks "
        f"would be (this Python, sandbox {sandbox}, the same limits), "
        f"scored {earned:g}/{sum(points.values()):g} and {what}. Nobody was graded and nothing "
        f"was written into the report. Check: {check}."
    )


def page_name(student_id: str) -> str:
    """`<student_id>.html`, with path separators (and a leading dot) made harmless."""
    name = student_id.replace("/", "_").replace("\\", "_").replace("\0", "_")
    return ("_" + name if name.startswith(".") or not name else name) + ".html"


def progress_line(outcome: Outcome, count: int, total: int, start: float) -> str:
    """`[ 12/40] student  status  score/max  seconds  ETA` (counted parts, as in grades.csv)."""
    eta = (time.monotonic() - start) / count * (total - count)
    score = report.counted_score(outcome.scores)
    maximum = report.max_score([(g, m) for g, (_, m) in outcome.scores.items()])
    return (
        f"[{count:>3}/{total}] {outcome.student_id:<24} {outcome.status:<14} "
        f"{score:>6g}/{maximum:<6g} {outcome.seconds:5.1f} s   ETA {eta:4.0f} s"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Grade every submission in a folder or .zip (Moodle, Canvas, Blackboard, "
        "nbgrader or plain <student_id>.ipynb) with nbgrader."
    )
    parser.add_argument(
        "submissions", type=Path, help="folder or .zip of the downloaded submissions"
    )
    parser.add_argument(
        "--roster",
        type=Path,
        help="CSV: student_id[,name,lms_user_id,email]: maps names to ids, keys the LMS files",
    )
    parser.add_argument(
        "--name-pattern",
        help="regex for file names with a (?P<student_id>...) group, optional late/timestamp",
    )
    parser.add_argument(
        "--report", type=Path, default=Path("report"), help="where grades.csv and feedback/ go"
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="submissions graded at once"
    )
    parser.add_argument("--course", type=Path, default=REPO_ROOT / GRADING_COURSE)
    parser.add_argument("--no-sandbox", action="store_true", help="run kernels without bubblewrap")
    parser.add_argument(
        "--no-zygote",
        action="store_true",
        help="start every kernel afresh in bubblewrap, not forked from a pre-imported one",
    )
    parser.add_argument(
        "--cell-timeout", type=int, default=Limits.cell_timeout_s, help="seconds per cell"
    )
    parser.add_argument(
        "--notebook-timeout",
        type=int,
        default=Limits.notebook_timeout_s,
        help="seconds per notebook",
    )
    parser.add_argument(
        "--memory-gb", type=float, default=Limits.memory_bytes / 2**30, help="kernel memory cap"
    )
    parser.add_argument(
        "--intake-only",
        action="store_true",
        help="print who would be graded, under which id, from which file and why; write "
        "REPORT/intake.csv; grade nothing (`make intake`)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="grade every submission even when most fail the same way on the grader's side",
    )
    args = parser.parse_args(argv)
    limits = Limits(args.cell_timeout, args.notebook_timeout, int(args.memory_gb * 2**30))
    try:
        intake = discover(args.submissions, roster=args.roster, pattern=args.name_pattern)
    except IntakeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    with intake:
        if args.intake_only:
            return intake_only(intake, args)
        return grade_intake(intake, args, limits)


def intake_only(intake, args) -> int:
    """`make intake`: the intake table and REPORT/intake.csv; 4 when no file has a known student."""
    print(intake.table())
    for text in (intake.not_graded() if intake.skipped else "", intake.warnings()):
        if text:
            print(text)
    intake.write_csv(args.report / "intake.csv")
    print(f"wrote {args.report / 'intake.csv'}; nothing was graded")
    if not intake.submissions:
        print(
            f"error: no file in {args.submissions} could be tied to a known student: see the "
            "why of each file above (pass ROSTER=, NAME_PATTERN=, or rename the files)",
            file=sys.stderr,
        )
        return 4
    return 0


def kernel_threads(jobs: int) -> int:
    """BLAS/torch threads a kernel gets: the cores shared among the jobs, no oversubscription."""
    return max(1, (os.cpu_count() or 1) // jobs)


def grade_intake(intake, args, limits: Limits) -> int:
    """Grade what `discover` found; print the table and the "not graded" list."""
    submissions = intake.submissions
    print(intake.table(), file=sys.stderr)
    if intake.skipped:
        print(intake.not_graded(), file=sys.stderr)
    if intake.warnings():
        print(intake.warnings(), file=sys.stderr)
    if not submissions:
        intake.write_csv(args.report / "intake.csv")
        what = "could be tied to a known student" if intake.unknown() else "is a notebook"
        print(f"error: no file in {args.submissions} {what}", file=sys.stderr)
        return 2
    sandbox = not args.no_sandbox and sandbox_available()
    if not sandbox:
        print(
            "WARNING: grading WITHOUT a sandbox: student code runs with your permissions"
            + (
                ""
                if args.no_sandbox
                else " (bubblewrap is missing or cannot create namespaces: apt-get install bubblewrap)"
            ),
            file=sys.stderr,
        )
    cgroup_bases = cgroups.available()
    caps = cgroups.describe(cgroup_bases, pids=limits.processes, memory_bytes=limits.memory_bytes)
    zygote = Zygote(kernel_threads(max(1, args.jobs))) if sandbox and not args.no_zygote else None
    try:
        print(
            f"grading {len(submissions)} submissions ({len(intake.skipped)} other files not "
            f"graded), {args.jobs} at a time, sandbox: {sandbox_kind(sandbox, zygote)}, "
            f"cgroup limits: {caps}",
            file=sys.stderr,
        )
        return grade_sandboxed(intake, args, limits, sandbox, cgroup_bases, zygote)
    finally:
        if zygote is not None:
            zygote.stop()


def sandbox_kind(sandbox: bool, zygote: Zygote | None) -> str:
    """What the start line says about how the kernels are isolated."""
    if not sandbox:
        return "NONE"
    if zygote is not None and zygote.serving:
        return "namespaces (bubblewrap's, each kernel forked from one that imported torch once)"
    if zygote is not None:
        return f"bubblewrap (each kernel started afresh: no pre-imported kernel, {zygote.problem})"
    return "bubblewrap (each kernel started afresh)"


def grade_sandboxed(intake, args, limits, sandbox, cgroup_bases, zygote) -> int:
    """The rest of `grade_intake`, once the sandbox is chosen and announced."""
    submissions = intake.submissions
    problem = kernel_start_problem(limits, sandbox)
    if problem:
        print(
            f"error: {problem}. Nobody was graded. Check that this Python's packages live "
            "inside its own installation (not on PYTHONPATH or a symlink the sandbox does not "
            "show), or run with --no-sandbox to see whether the sandbox is the cause.",
            file=sys.stderr,
        )
        return 3
    stale = stale_ids(intake, args.report)
    if stale:
        print(
            f"replacing what the previous run into {args.report} wrote for {len(stale)} id(s) "
            "whose files are now read otherwise (their rows, feedback pages and nbgrader "
            "submissions go):\n" + "\n".join(f"  {sid}: {now}" for sid, now in stale.items()),
            file=sys.stderr,
        )
    try:
        with tempfile.TemporaryDirectory(prefix="ch34-preflight-") as scratch:
            outcomes = grade_all(
                submissions,
                args.report,
                course=args.course,
                jobs=max(1, args.jobs),
                limits=limits,
                sandbox=sandbox,
                cgroup_bases=cgroup_bases,
                stop_on_fault=not args.keep_going,
                roster=args.roster,
                reference=write_reference(args.course, Path(scratch)),
                zygote=zygote if zygote is not None and zygote.serving else None,
                replaced=frozenset(stale),
                intake=intake,
            )
    except GraderFault as fault:
        print(f"error: {fault}", file=sys.stderr)
        return 3
    print(report.summary_table(outcomes, report.read_grades(args.report / "grades.csv")[1]))
    intake.write_csv(args.report / "intake.csv", {o.student_id: o.status for o in outcomes})
    if intake.skipped:
        print(intake.not_graded())
    print(
        f"wrote {args.report / 'grades.csv'} and {len(outcomes)} feedback files in {args.report / 'feedback'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
