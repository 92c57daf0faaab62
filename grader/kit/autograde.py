"""Grade every downloaded submission with the real nbgrader, each in its own sandboxed course.

    python -m grader.kit.autograde SUBMISSIONS [--report DIR] [--jobs N] [--roster CSV]
                                   [--name-pattern REGEX]

SUBMISSIONS is a folder or a .zip: an LMS export (Moodle, Canvas, Blackboard), nbgrader's
submitted/ tree or plain `<student_id>.ipynb` files (`intake/inventory.py` finds them, names the
students and lists every file it does not grade, with why). For each submission the grader
normalises the notebook against the release (`intake/normalize.py`), copies the grading course
(`build/grading-course`: config, source, gradebook) into a fresh working directory
(`grading/workcopy.py`), and runs nbgrader's own `autograde` there, in a forked process
(`grading/pool.py`, `grading/child.py`), with the kernel in a sandbox: forked from one process
that imported torch and ipykernel once for the batch, into namespaces of its own
(`sandbox/zygote_server.py`), or, where that cannot be made or with --no-zygote, started afresh
inside bubblewrap (`sandbox/launcher.py`). Nothing a submission does reaches the template
course, the report, the repository or another submission; a kernel that dies, hangs or floods
becomes a row with its status, never a crash and never a stale grade.

Set CH34_GRADING_PHASES=1 to print how long nbgrader itself took for each submission.
With --intake-only (`make intake`) it prints who would be graded, under which id, from which
file and why, writes REPORT/intake.csv and grades nothing; exit status 4 when no file could be
tied to a known student. A grading run prints the same table first. With --shard K/N it grades only shard K of the class
into REPORT, for `cluster/merge.py` (`cluster/shard.py`, docs/cluster.md).

Writes REPORT/grades.csv (one row per student, merged with rows already there for students
not in this batch; REPORT/overrides.csv applied), REPORT/feedback/<student_id>.html (hidden
tests never shown), REPORT/intake.csv (every input file: graded, or why not),
REPORT/summary.html, REPORT/canvas.csv and moodle.csv, and for a Moodle export Moodle's offline
grading worksheet (`report/lms.py`), and the nbgrader course REPORT/nbgrader/ that formgrader
and `nbgrader export` read (`report/gradebook.py`); `report/writer.py` writes them all.

A grader fault never becomes a student's grade. Before the batch, the kernel's interpreter is
started in the sandbox (`sandbox/probes.py`). The reference solution is then graded through
exactly the batch's path (`grading/preflight.py`), and during the batch a fault stops it
(`grading/batch.py`). Either way the run exits with status 3 and an error for the instructor,
and nothing is written into REPORT: no row, no page.

This module is the command line only: it parses the arguments, announces the sandbox, calls the
batch, and turns the kit's errors (`errors.py`) into exit statuses: 2 for input that cannot be
read, 3 for a grader fault or a failed preflight, 4 (`--intake-only`) when no file has a known
student, 1 for the rest.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

from .errors import GraderFault, KitError, exit_with
from .grading.limits import Limits
from .paths import GRADES, GRADING_COURSE, INTAKE, REPO_ROOT, require_grading_course
from .sandbox import cgroups
from .sandbox.kernel_setup import kernel_threads
from .sandbox.probes import kernel_start_problem, sandbox_available
from .sandbox.zygote_client import Zygote

# The intake, the batch and the report import nbgrader and its kin: about 2 s, which `main`
# spends after it has started the zygote, whose own imports (torch, ipykernel: about 3.5 s) then
# run on the other core. Those modules are therefore imported in the functions that use them.


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    # A killed job ends like Ctrl-C: what was graded is kept (`grading/resumable.py`).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # `make autograde ... | tee log`: Ctrl-C ends tee too, and the next line printed meets a
    # closed pipe. The run must still write what it graded and its record for the resume.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ClosedPipeSafe(sys.stdout), ClosedPipeSafe(sys.stderr)
    try:
        return run(args)
    finally:
        sys.stdout, sys.stderr = streams


def run(args) -> int:
    """`main` once the signals and the console streams are set up."""
    limits = Limits(args.cell_timeout, args.notebook_timeout, int(args.memory_gb * 2**30))
    sandbox = not args.intake_only and not args.no_sandbox and sandbox_available()
    zygote = Zygote(kernel_threads(max(1, args.jobs))) if sandbox and not args.no_zygote else None
    try:
        from .intake.inventory import discover  # once the zygote has started: see the imports

        found = discover(
            args.submissions, roster=args.roster, pattern=args.name_pattern, choices=args.choices
        )
        with found as intake:
            if args.shard:  # the whole export read, then this shard's part kept (cluster/shard.py)
                intake = shard_part(intake, args)
            if args.intake_only:
                return intake_only(intake, args)
            return grade_intake(intake, args, limits, sandbox, zygote)
    except KitError as error:
        return exit_with(error)
    except KeyboardInterrupt:  # before or after the batch: nothing was written by this run
        print("interrupted: nothing was written by this run", file=sys.stderr)
        return 130
    finally:
        if zygote is not None:
            zygote.stop()


class ClosedPipeSafe:
    """A console stream whose reader may go away (`| tee`, `| head`): once a write or flush
    meets a closed pipe, the stream's descriptor is pointed at /dev/null and the run goes on,
    silent, instead of dying of a BrokenPipeError half-way through writing REPORT."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())  # what is still buffered goes there too
        os.close(devnull)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def parser() -> argparse.ArgumentParser:
    """The command line; the limits' defaults are `Limits`'s."""
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
        "--choices",
        type=Path,
        help="CSV 学号,文件: which notebook to grade of a student who handed in several "
        "(REPORT/choices.csv, written by every intake, is ready to edit)",
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
        "--lms",
        choices=("auto", "all", "canvas", "moodle", "none"),
        default="auto",
        help="which LMS gradebook files to write: auto (those of the LMS the export came from; "
        "all for an export of no LMS), all, canvas, moodle or none",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="grade every submission even when most fail the same way on the grader's side, "
        "and write the report even when most files are not this assignment's notebooks",
    )
    parser.add_argument(
        "--replace-graded",
        action="store_true",
        help="let a status that is no grade (timeout, wrong file...) replace a grade an "
        "earlier run wrote for the same student",
    )
    parser.add_argument(
        "--shard",
        help="K/N: grade only shard K (0..N-1) of the class into REPORT, for `make merge` "
        "(docs/cluster.md)",
    )
    return parser


def shard_part(intake, args):
    """The part of `intake` that `--shard K/N` grades; its shard.json written when grading."""
    from .cluster import shard

    k, n = shard.parse(args.shard)
    if not args.intake_only:
        shard.write_manifest(args.report, intake, args, k, n)
    return shard.part_of(intake, k, n)


def intake_only(intake, args) -> int:
    """`make intake`: the intake table and REPORT/intake.csv; 4 when no file has a known student."""
    print(intake.table())
    for text in (intake.not_graded() if intake.skipped else "", intake.warnings()):
        if text:
            print(text)
    intake.write_csv(args.report / INTAKE)
    print(f"wrote {args.report / INTAKE}; nothing was graded")
    if not intake.submissions:
        print(
            f"error: no file in {args.submissions} could be tied to a known student: see the "
            "why of each file above (pass ROSTER=, NAME_PATTERN=, or rename the files)",
            file=sys.stderr,
        )
        return 4
    return 0


def grade_intake(intake, args, limits: Limits, sandbox: bool, zygote: Zygote | None) -> int:
    """Grade what `discover` found; print the table and the "not graded" list.

    `sandbox` says whether bubblewrap works here (and was not refused); `zygote` is the
    batch's, started and perhaps not yet serving, or None.
    """
    from .grading.batch import BatchSettings  # see the imports

    print(intake.table(), file=sys.stderr)
    if intake.skipped:
        print(intake.not_graded(), file=sys.stderr)
    if intake.warnings():
        print(intake.warnings(), file=sys.stderr)
    if not intake.submissions and args.shard:  # a small class: this shard has nobody
        intake.write_csv(args.report / INTAKE)
        print(f"shard {args.shard}: no student of this export falls to it; nothing to grade")
        return 0
    if not intake.submissions:
        intake.write_csv(args.report / INTAKE)
        what = "could be tied to a known student" if intake.unknown() else "is a notebook"
        print(f"error: no file in {args.submissions} {what}", file=sys.stderr)
        return 2
    require_grading_course(args.course)
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
    problem = kernel_start_problem(limits, sandbox)  # while the zygote imports
    if problem:
        raise GraderFault(
            f"{problem}. Nobody was graded. Check that this Python's packages live "
            "inside its own installation (not on PYTHONPATH or a symlink the sandbox does not "
            "show), or run with --no-sandbox to see whether the sandbox is the cause."
        )
    cgroup_bases = cgroups.available()
    caps = cgroups.describe(cgroup_bases, pids=limits.processes, memory_bytes=limits.memory_bytes)
    print(
        f"grading {len(intake.submissions)} submissions ({len(intake.skipped)} other files "
        f"not graded), {args.jobs} at a time, sandbox: {sandbox_kind(sandbox, zygote)}, "
        f"cgroup limits: {caps}",
        file=sys.stderr,
    )
    serving = zygote if zygote is not None and zygote.serving else None
    settings = BatchSettings(
        course=args.course,
        jobs=max(1, args.jobs),
        limits=limits,
        sandbox=sandbox,
        cgroup_bases=cgroup_bases,
        zygote=serving,
        sandbox_kind=sandbox_kind(sandbox, serving),
        stop_on_fault=not args.keep_going,
        replace_graded=args.replace_graded,
        lms_files=args.lms,
        progress=sys.stderr,
    )
    return grade_sandboxed(intake, args, settings)


def sandbox_kind(sandbox: bool, zygote: Zygote | None) -> str:
    """What the start line says about how the kernels are isolated."""
    if not sandbox:
        return "NONE"
    if zygote is not None and zygote.serving:
        return "namespaces (bubblewrap's, each kernel forked from one that imported torch once)"
    if zygote is not None:
        return f"bubblewrap (each kernel started afresh: no pre-imported kernel, {zygote.problem})"
    return "bubblewrap (each kernel started afresh)"


def grade_sandboxed(intake, args, settings) -> int:
    """The rest of `grade_intake`, once the sandbox is chosen, tried and announced."""
    from .faults.lines import console_lines
    from .grading.batch import grade_all  # see the imports
    from .grading.preflight import write_reference
    from .grading.resumable import left_to_grade
    from .report import grades
    from .report.writer import stale_ids

    stale = stale_ids(intake, args.report)
    if stale:
        print(
            f"replacing what the previous run into {args.report} wrote for {len(stale)} id(s) "
            "whose files are now read otherwise (their rows, feedback pages and nbgrader "
            "submissions go):\n" + "\n".join(f"  {sid}: {now}" for sid, now in stale.items()),
            file=sys.stderr,
        )
    submissions, resumed = left_to_grade(intake.submissions, args.report)
    if resumed:
        print(
            f"{len(resumed)} submissions were graded by an interrupted run into {args.report} and "
            f"are kept; grading the {len(submissions)} left",
            file=sys.stderr,
        )
    with tempfile.TemporaryDirectory(prefix="ch34-preflight-") as scratch:
        reference = write_reference(args.course, Path(scratch))
        outcomes = grade_all(
            submissions,
            args.report,
            settings,
            reference=reference,
            replaced=frozenset(stale),
            intake=intake,
            resumed=resumed,
        )
    print(grades.summary_table(outcomes, grades.read_grades(args.report / GRADES)[1]))
    faults = console_lines(outcomes)
    if faults:
        print(faults)
    if intake.skipped:
        print(intake.not_graded())
    print(
        f"wrote {args.report / GRADES} and {len(outcomes)} feedback files in {args.report / 'feedback'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
