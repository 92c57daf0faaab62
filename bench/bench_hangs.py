"""Benchmark: what a TODO that never returns costs the grader, against a correct submission.

    .venv/bin/python bench/bench_hangs.py [--jobs 2]

Grades, with the kit's autograder (sandbox, the default limits), two batches made from the same
release: every fault of the hang catalogue (`tests/fixtures/faults_hang.py`, one fault a
submission), then as many copies of the reference solution. Reports the seconds each submission
took (the console's per-submission time), the median of each batch, and for each fault what the
time boxes allow it: the reference's median plus, for each box its TODO's checks run out, the
box times the load factor of the limits and the grace of a swallowed box. Goal: every fault is
`graded` within that, and none comes near the notebook limit. Prints a Markdown report; exits 1
when a fault misses the goal.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from grader.kit.authoring.checkcells import time_boxes  # noqa: E402
from grader.kit.authoring.examples import filled_submission  # noqa: E402
from grader.kit.authoring.nbsource import NOTEBOOK_NAME  # noqa: E402
from grader.kit.grading.limits import LOAD_FACTOR, Limits  # noqa: E402
from tests.fixtures.faults_hang import FAULTS  # noqa: E402

# "[  3/16] endless-loop-todo17      graded   148/160     31.2 s   ETA ..."
CONSOLE_ROW = re.compile(r"^\[\s*\d+/\d+\]\s+(\S+)\s+(\S+)\s+.*?([\d.]+) s\b", re.M)
# Boxes a fault's TODO runs out in the visible cells (its own check, and the checks that use it).
VISIBLE_BOXES = 3


def grade(folder: Path, jobs: int) -> tuple[float, dict[str, tuple[str, float]]]:
    """Grade `folder` with the kit: (wall seconds, {submission: (status, seconds)})."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = [sys.executable, "-m", "grader.kit.autograde", str(folder), "--jobs", str(jobs)]
    command += ["--report", str(folder.parent / f"{folder.name}-report")]
    began = time.perf_counter()
    run = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if run.returncode != 0:
        sys.exit(f"autograde failed on {folder}:\n{run.stderr[-3000:]}")
    rows = {name: (status, float(s)) for name, status, s in CONSOLE_ROW.findall(run.stdout + run.stderr)}
    return wall, rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    release = nbformat.read(REPO_ROOT / "notebooks" / NOTEBOOK_NAME, as_version=4)
    solutions = nbformat.read(REPO_ROOT / "solutions" / NOTEBOOK_NAME, as_version=4)
    with tempfile.TemporaryDirectory(prefix="bench-hangs-") as scratch:
        faulty, correct = Path(scratch) / "faulty", Path(scratch) / "correct"
        faulty.mkdir()
        correct.mkdir()
        for n, fault in enumerate(FAULTS):
            nbformat.write(filled_submission(release, solutions, fault.edits), faulty / f"{fault.name}.ipynb")
            nbformat.write(filled_submission(release, solutions), correct / f"correct-{n:02d}.ipynb")
        faulty_wall, faulty_rows = grade(faulty, args.jobs)
        correct_wall, correct_rows = grade(correct, args.jobs)
    boxes, limit = time_boxes(), Limits.notebook_timeout_s
    reference = statistics.median(s for _, s in correct_rows.values())
    print(f"# Hangs against correct submissions ({time.strftime('%Y-%m-%d %H:%M %Z')})\n")
    print(f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end; `python bench/bench_hangs.py --jobs {args.jobs}`; "
          f"box {boxes.box:g} s, notebook limit {limit} s\n")
    print("| submission | status | seconds | allowed (reference + boxes) |")
    print("|---|---|---:|---:|")
    missed = []
    for fault in FAULTS:
        status, seconds = faulty_rows.get(fault.name, ("missing", float("nan")))
        runs_out = len(fault.loses) + VISIBLE_BOXES
        allowed = reference + runs_out * (LOAD_FACTOR * boxes.box + boxes.grace)
        if status != "graded" or not seconds <= allowed:
            missed.append(fault.name)
        print(f"| {fault.name} | {status} | {seconds:.1f} | {allowed:.0f} |")
    faulty_median = statistics.median(s for _, s in faulty_rows.values())
    print(
        f"\n{len(FAULTS)} faulty submissions: median {faulty_median:.1f} s each, the batch "
        f"{faulty_wall:.0f} s ({faulty_wall / len(FAULTS):.1f} s a submission); {len(correct_rows)} "
        f"correct: median {reference:.1f} s each, the batch {correct_wall:.0f} s "
        f"({correct_wall / len(correct_rows):.1f} s a submission). Slowest fault "
        f"{max(s for _, s in faulty_rows.values()):.1f} s against the {limit} s notebook limit."
    )
    print("Every fault graded within its allowance." if not missed else f"Missed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
