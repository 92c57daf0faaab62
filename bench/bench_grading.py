"""Benchmark: the kit's autograder against plain sequential `nbgrader autograde`, on the same files.

    .venv/bin/python bench/bench_grading.py [--count 40] [--jobs N]

Makes COUNT submissions (a third correct, a third with one catalogued mistake, a third
untouched), then, in one run on this machine:
  1. kit:    python -m grader.kit.autograde (normalise, sandbox, parallel, grades + feedback)
  2. plain:  nbgrader autograde --create --force, one process, sequential (grades only),
             then nbgrader generate_feedback (so the same outputs exist)
  3. floor:  each notebook, as the grader runs it (hidden tests in), merely executed in a
             fresh kernel (nbclient), one after another; the kernel is killed after its last
             cell, as the kit does (a graceful shutdown would add ~0.9 s of waiting to each)
Both graders use the same grading course (build/grading-course). Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from grader.kit.build import GRADING_COURSE, execute, kernel_tempdir  # noqa: E402
from grader.kit.nbsource import ASSIGNMENT, NOTEBOOK_NAME  # noqa: E402
from grader.kit.submissions import filled_submission  # noqa: E402
from tests.fixtures.mistakes_core import MISTAKES  # noqa: E402


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


def timed(command: list[str], cwd: Path) -> float:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    start = time.perf_counter()
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stderr[-3000:]}")
    return elapsed


def run_kit(submissions: Path, work: Path, jobs: int) -> float:
    return timed(
        [
            sys.executable,
            "-m",
            "grader.kit.autograde",
            str(submissions),
            "--report",
            str(work / "kit-report"),
            "--jobs",
            str(jobs),
        ],
        REPO_ROOT,
    )


def run_plain(paths: list[Path], work: Path) -> tuple[float, float]:
    course = work / "plain-course"
    shutil.copytree(REPO_ROOT / GRADING_COURSE, course)
    for path in paths:
        target = course / "submitted" / path.stem / ASSIGNMENT
        target.mkdir(parents=True)
        shutil.copy(path, target / NOTEBOOK_NAME)
    nbgrader = [sys.executable, "-m", "nbgrader"]
    grading = timed(nbgrader + ["autograde", ASSIGNMENT, "--create", "--force"], course)
    feedback = timed(nbgrader + ["generate_feedback", ASSIGNMENT, "--force"], course)
    return grading, feedback


def run_floor(paths: list[Path], work: Path) -> float:
    """Seconds to merely execute, one after another, each notebook as the grader runs it.

    That is the submission with its locked cells replaced by the grading course's source:
    hidden tests included, measurement cells empty (what nbgrader's OverwriteCells does).
    """
    source = REPO_ROOT / GRADING_COURSE / "source" / ASSIGNMENT / NOTEBOOK_NAME
    locked = {
        cell.metadata["nbgrader"]["grade_id"]: cell.source
        for cell in nbformat.read(source, as_version=4).cells
        if cell.metadata.get("nbgrader", {}).get("locked")
    }
    total = 0.0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            cell.source = locked.get(cell.metadata.get("nbgrader", {}).get("grade_id"), cell.source)
        start = time.perf_counter()
        execute(nb, work, allow_errors=True)
        total += time.perf_counter() - start
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if not (REPO_ROOT / GRADING_COURSE / "gradebook.db").exists():
        raise SystemExit("run `make notebooks` first")
    work = kernel_tempdir("ch34-bench-", below="/kernel-99999")
    try:
        (work / "subs").mkdir()
        paths = make_submissions(work / "subs", args.count)
        kit = run_kit(work / "subs", work, args.jobs)
        plain, plain_feedback = run_plain(paths, work)
        floor = run_floor(paths, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n, cores = args.count, os.cpu_count() or 1
    floor_per_core = floor / cores
    print("## Grading benchmark\n")
    print(
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}"
    )
    print(
        f"- command: `{' '.join([Path(sys.executable).name] + sys.argv)}` ({n} submissions: correct, wrong, untouched)\n"
    )
    print("| what | wall time (s) | s / submission |")
    print("|---|---:|---:|")
    print(
        f"| kit: normalise + sandbox + {cores} jobs, grades and feedback | {kit:.1f} | {kit / n:.2f} |"
    )
    print(
        f"| plain `nbgrader autograde`, sequential, grades only | {plain:.1f} | {plain / n:.2f} |"
    )
    print(
        f"| plain `nbgrader generate_feedback` afterwards | {plain_feedback:.1f} | {plain_feedback / n:.2f} |"
    )
    print(
        f"| floor: execute each notebook in a fresh kernel, sequential | {floor:.1f} | {floor / n:.2f} |"
    )
    print(f"| floor / {cores} cores | {floor_per_core:.1f} | {floor_per_core / n:.2f} |\n")
    speedup = plain / kit
    speedup_same_outputs = (plain + plain_feedback) / kit
    over_floor = kit / floor_per_core
    print(
        f"- kit vs plain autograde: **{speedup:.2f}×** faster (goal ≥ 1.6×: {'met' if speedup >= 1.6 else 'MISSED'})"
    )
    print(
        f"- kit vs plain autograde + feedback (the same outputs): **{speedup_same_outputs:.2f}×**"
    )
    print(
        f"- kit vs floor / cores: **{over_floor:.2f}×** (goal ≤ 1.3×: {'met' if over_floor <= 1.3 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
