"""Benchmark: the kit's autograder against plain sequential `nbgrader autograde`, on the same files.

    .venv/bin/python bench/bench_grading.py [--count 40] [--jobs N] [--rounds 3] [--moodle-zip]
                                            [--methods kit,plain,floor] [--before CHECKOUT]

Makes COUNT submissions (a third correct, a third with one catalogued mistake, a third
untouched), then, in one run on this machine:
  1. kit:    python -m grader.kit.autograde (normalise, sandbox, parallel, grades + feedback)
  2. plain:  nbgrader autograde --create --force, one process, sequential (grades only),
             then nbgrader generate_feedback (so the same outputs exist)
  3. floor:  each notebook, as the grader runs it (hidden tests in), merely executed in a
             fresh kernel (nbclient), one after another; the kernel is killed after its last
             cell, as the kit does (a graceful shutdown would add ~0.9 s of waiting to each)
With --moodle-zip the kit is handed the same notebooks as one Moodle export (a zip of
`Student N_<id>_assignsubmission_file_/ch34_prefix_cache.ipynb` folders), as an instructor
downloads it: reading and extracting the zip counts in the kit's time.
With --before CHECKOUT (another checkout of this kit, `make notebooks` run there) a fourth
method, `before`, runs that checkout's kit the same way as `kit`, with its own grading course:
the single-machine path before a change against after it, in the same run, on the same files.
--methods picks which of kit, plain and floor run (kit and before alone: `--methods kit`).
Both graders use the same grading course (build/grading-course). Each round runs the three
once, on the same files, starting one method later than the round before (two shared cores
were measured to drift by 15% within minutes); the report gives the medians and every round's
ratio. Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from grader.kit.authoring.build import GRADING_COURSE, execute  # noqa: E402
from grader.kit.authoring.examples import filled_submission  # noqa: E402
from grader.kit.authoring.nbsource import ASSIGNMENT, NOTEBOOK_NAME  # noqa: E402
from grader.kit.sandbox.kernel_setup import KERNEL_IPYTHON_CONFIG, kernel_tempdir  # noqa: E402
from tests.fixtures.mistakes_core import MISTAKES  # noqa: E402

# The kit grades a class at least this many times faster than plain sequential nbgrader.
SPEEDUP_GOAL = 3.0


def make_submissions(folder: Path, count: int) -> list[Path]:
    release = nbformat.read(REPO_ROOT / "notebooks" / NOTEBOOK_NAME, as_version=4)
    solutions = nbformat.read(REPO_ROOT / "solutions" / NOTEBOOK_NAME, as_version=4)
    paths = []
    for n in range(count):
        kind = ("correct", "wrong", "untouched")[n % 3]
        if kind == "correct":
            nb = filled_submission(release, solutions)
        elif kind == "wrong":
            nb = filled_submission(release, solutions, MISTAKES[n % len(MISTAKES)].edits)
        else:
            nb = release
        paths.append(folder / f"s{n:03d}-{kind}.ipynb")
        nbformat.write(nb, paths[-1])
    return paths


def make_moodle_zip(paths: list[Path], archive: Path) -> Path:
    """The notebooks of `paths` as one Moodle "download all submissions" zip, in folders."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for n, path in enumerate(paths):
            folder = f"Student {n:03d}_{20000 + n}_assignsubmission_file_"
            zipped.write(path, f"{folder}/{NOTEBOOK_NAME}")
    return archive


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """Wall seconds of `command`, and what it wrote to stderr."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    start = time.perf_counter()
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stderr[-3000:]}")
    return elapsed, run.stderr


def run_kit(
    submissions: Path, work: Path, jobs: int, checkout: Path = REPO_ROOT
) -> tuple[float, str]:
    """Wall seconds of the batch of `checkout`'s kit, and the sandbox its start line names: a
    class is graded on the zygote path (`namespaces`), so a figure taken on another path says so."""
    seconds, said = timed(
        [
            sys.executable,
            "-m",
            "grader.kit.autograde",
            str(submissions),
            "--report",
            str(work / f"kit-report-{checkout.name}"),
            "--jobs",
            str(jobs),
        ],
        checkout,
    )
    sandbox = re.search(r"sandbox: ([^,(]+)", said)
    return seconds, sandbox.group(1).strip() if sandbox else "not said"


def run_plain(paths: list[Path], work: Path) -> tuple[float, float]:
    course = work / "plain-course"
    shutil.copytree(REPO_ROOT / GRADING_COURSE, course)
    for path in paths:
        target = course / "submitted" / path.stem / ASSIGNMENT
        target.mkdir(parents=True)
        shutil.copy(path, target / NOTEBOOK_NAME)
    nbgrader = [sys.executable, "-m", "nbgrader"]
    grading, _ = timed(nbgrader + ["autograde", ASSIGNMENT, "--create", "--force"], course)
    feedback, _ = timed(nbgrader + ["generate_feedback", ASSIGNMENT, "--force"], course)
    return grading, feedback


def run_floor(paths: list[Path], work: Path) -> float:
    """Seconds to merely execute, one after another, each notebook as the grader runs it.

    That is the submission with its locked cells replaced by the grading course's source:
    hidden tests included, measurement and learner-only cells empty (what nbgrader's
    OverwriteCells does), in a kernel with the graded kernels' IPython settings (plain
    tracebacks, no input history), so the floor is the same work without the grading.
    """
    profile = work / "floor-ipython" / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_config.py").write_text(KERNEL_IPYTHON_CONFIG)
    before = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(profile.parent)  # the floor's kernels inherit it
    source = REPO_ROOT / GRADING_COURSE / "source" / ASSIGNMENT / NOTEBOOK_NAME
    locked = {
        cell.metadata["nbgrader"]["grade_id"]: cell.source
        for cell in nbformat.read(source, as_version=4).cells
        if cell.metadata.get("nbgrader", {}).get("locked")
    }
    total = 0.0
    try:
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                cell.source = locked.get(grade_id, cell.source)
            start = time.perf_counter()
            execute(nb, work, allow_errors=True)
            total += time.perf_counter() - start
    finally:
        if before is None:
            os.environ.pop("IPYTHONDIR", None)
        else:
            os.environ["IPYTHONDIR"] = before
    return total


def one_round(
    number: int, methods: list[str], paths: list[Path], work: Path, args, kit_input: Path,
    sandboxes: set[str],
) -> dict[str, float]:  # fmt: skip
    """Wall seconds of every method on the same files; each round starts one method later, so
    a machine that slows down (shared cores do) does not weigh on one method only."""
    methods = methods[number % len(methods) :] + methods[: number % len(methods)]
    here = work / f"round-{number}"
    here.mkdir()
    seconds = {}
    for method in methods:
        if method in ("kit", "before"):
            checkout = REPO_ROOT if method == "kit" else args.before
            seconds[method], sandbox = run_kit(kit_input, here, args.jobs, checkout)
            sandboxes.add(sandbox)
        elif method == "plain":
            seconds["plain"], seconds["feedback"] = run_plain(paths, here)
        else:
            seconds["floor"] = run_floor(paths, here)
    return seconds


def ratios(seconds: dict[str, float], cores: int) -> dict[str, float]:
    """The round's ratios, of the methods it ran."""
    found = {}
    if "plain" in seconds:
        found["speedup"] = seconds["plain"] / seconds["kit"]
        found["same_outputs"] = (seconds["plain"] + seconds["feedback"]) / seconds["kit"]
    if "floor" in seconds:
        found["over_floor"] = seconds["kit"] / (seconds["floor"] / cores)
    if "before" in seconds:
        found["after_over_before"] = seconds["kit"] / seconds["before"]
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--rounds", type=int, default=3, help="every method once a round; medians reported"
    )
    parser.add_argument(
        "--moodle-zip",
        action="store_true",
        help="hand the kit the submissions as one Moodle export zip instead of a folder",
    )
    parser.add_argument(
        "--methods", default="kit,plain,floor", help="which of kit, plain and floor run (kit always)"
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="another checkout of the kit: its kit runs too, as `before` (its build/ made)",
    )
    args = parser.parse_args()
    asked = set(args.methods.split(","))
    methods = ["kit"] + [m for m in ("plain", "floor") if m in asked]
    unknown = asked - {"kit", "plain", "floor"}
    if unknown:
        raise SystemExit(f"--methods: {', '.join(sorted(unknown))}? Pick from kit, plain, floor.")
    for checkout in (REPO_ROOT, args.before):
        if checkout and not (checkout / GRADING_COURSE / "gradebook.db").exists():
            raise SystemExit(f"no grading course in {checkout}: run `make notebooks` there first")
    if args.before:
        args.before = args.before.resolve()
        methods.insert(1, "before")
    n, cores = args.count, os.cpu_count() or 1
    work = kernel_tempdir("ch34-bench-")  # the floor runs execute() with this as its folder
    try:
        (work / "subs").mkdir()
        paths = make_submissions(work / "subs", n)
        kit_input = (
            make_moodle_zip(paths, work / "moodle.zip") if args.moodle_zip else work / "subs"
        )
        rounds, sandboxes, load_before = [], set(), os.getloadavg()[0]
        for number in range(args.rounds):
            rounds.append(one_round(number, methods, paths, work, args, kit_input, sandboxes))
            print(f"round {number + 1}/{args.rounds}: {rounds[-1]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    per_round = [ratios(r, cores) for r in rounds]
    ratio = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}

    def listed(key):
        return ", ".join(f"{r[key]:.2f}" for r in per_round)

    print("## Grading benchmark\n")
    print(
        f"- machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}, "
        f"{platform.platform()}; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after (other work on the cores slows the parallel kit more "
        "than the sequential baselines)"
    )
    path = ", ".join(sorted(sandboxes))
    print(
        f"- the kit's sandbox: {path}"
        + (
            ""
            if path == "namespaces"
            else " (NOT the zygote path a class is graded on: install "
            "bubblewrap, `make sandbox`, and measure again)"
        )
    )
    print(
        f"- command: `{' '.join([Path(sys.executable).name] + sys.argv)}` ({n} submissions: "
        f"correct, wrong, untouched; {args.rounds} rounds, each method once a round, the order "
        "rotated; medians)\n"
    )
    print("| what | wall time (s) | s / submission |")
    print("|---|---:|---:|")
    source = " from a Moodle zip" if args.moodle_zip else ""
    rows = [(f"kit{source}: normalise + sandbox + {args.jobs} jobs, grades and feedback", "kit")]
    if args.before:
        rows.append((f"the same, by the kit of {args.before} ({commit_of(args.before)})", "before"))
    rows += [
        ("plain `nbgrader autograde`, sequential, grades only", "plain"),
        ("plain `nbgrader generate_feedback` afterwards", "feedback"),
        ("floor: execute each notebook in a fresh kernel, sequential", "floor"),
    ]
    for what, key in rows:
        if key in seconds:
            print(f"| {what} | {seconds[key]:.1f} | {seconds[key] / n:.2f} |")
    if "floor" in seconds:
        print(f"| floor / {cores} cores | {seconds['floor'] / cores:.1f} | "
              f"{seconds['floor'] / cores / n:.2f} |")  # fmt: skip
    print()
    if "speedup" in ratio:
        print(
            f"- kit vs plain autograde: **{ratio['speedup']:.2f}×** faster (rounds: "
            f"{listed('speedup')}; goal ≥ {SPEEDUP_GOAL:g}×: "
            f"{'met' if ratio['speedup'] >= SPEEDUP_GOAL else 'MISSED'})"
        )
        print(
            "- kit vs plain autograde + feedback (the same outputs): "
            f"**{ratio['same_outputs']:.2f}×** (rounds: {listed('same_outputs')})"
        )
    if "over_floor" in ratio:
        print(
            f"- kit vs floor / cores: **{ratio['over_floor']:.2f}×** (rounds: "
            f"{listed('over_floor')}; goal ≤ 1.3×: {'met' if ratio['over_floor'] <= 1.3 else 'MISSED'})"
        )
    if "after_over_before" in ratio:
        print(f"- this kit's time over the `before` kit's: **{ratio['after_over_before']:.3f}×** "
              f"(rounds: {listed('after_over_before')}; {before_verdict(per_round)})")  # fmt: skip
    return 0


def commit_of(checkout: Path) -> str:
    run = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)  # fmt: skip
    return run.stdout.strip() or "not a git checkout"


# Within this much of 1.0 either way, after against before is "the same" (two shared cores were
# measured to drift by 15 % within minutes; each round's two kits run back to back).
SAME_WITHIN = 0.05


def before_verdict(per_round: list[dict]) -> str:
    """Slower or faster only when every round says so beyond SAME_WITHIN; the same when every
    round is within it; otherwise too noisy to conclude."""
    found = [r["after_over_before"] for r in per_round]
    if all(x > 1 + SAME_WITHIN for x in found):
        return "SLOWER in every round"
    if all(x < 1 - SAME_WITHIN for x in found):
        return "faster in every round"
    if all(abs(x - 1) <= SAME_WITHIN for x in found):
        return f"the same within {SAME_WITHIN:.0%} in every round"
    return "too noisy to conclude"


if __name__ == "__main__":
    sys.exit(main())
