"""Benchmark: each check's time box against the time its reference takes on this machine.

    .venv/bin/python bench/bench_timeboxes.py [--repeats 5]

Runs every hidden check (as its grade cell builds it, `load_checks`) and every visible check
(the notebook's own functions) on the reference solution, in one process on one thread, each
`--repeats` times, and reports for each: the slowest run (counted as the box counts: time run
or slept, not time spent waiting for a CPU), its box (`BOX_SECONDS` or the check's `seconds=`)
and box / slowest. Goal: every ratio at least RATIO_GOAL, so that a check's verdict
never depends on how busy the machine is; a check below it should say `seconds=` in its
@check. Prints a Markdown report; exits 1 when a ratio misses the goal.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from grader.kit.authoring.checkcells import box_seconds, declarations, time_boxes  # noqa: E402
from grader.kit.authoring.nbsource import CHECKS_DIR, load_checks, solution_namespace  # noqa: E402

RATIO_GOAL = 20


def waited() -> float:
    """Seconds this thread has waited for a CPU (Linux's schedstat), as the box reads it."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def slowest(run, repeats: int) -> float:
    """The slowest of `repeats` runs of `run()`, in seconds as the box counts them: run or slept,
    not waiting for a CPU."""
    times = []
    for _ in range(repeats):
        began, queued = time.perf_counter(), waited()
        run()
        times.append(time.perf_counter() - began - (waited() - queued))
    return max(times)


def hidden_rows(namespace: dict, repeats: int) -> list[tuple[str, float, float]]:
    """(grade id, slowest seconds, box) for every hidden check."""
    rows = []
    for path in sorted(CHECKS_DIR.glob("[!_]*.py")):
        checks = load_checks(path.name)
        for declared in declarations(path.name):
            check = checks[declared.name]
            rows.append((declared.grade_id, slowest(lambda: check(namespace), repeats), declared.box))
    return rows


def visible_rows(namespace: dict, repeats: int) -> list[tuple[str, float, float]]:
    """(visible check, slowest seconds, box) for every visible check of the notebook."""
    names = sorted(
        n for n in namespace if n.startswith(("check_todo", "visible_check_todo")) and callable(namespace[n])
    )
    return [(name, slowest(namespace[name], repeats), box_seconds()) for name in names]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    namespace = solution_namespace()
    rows = hidden_rows(namespace, args.repeats) + visible_rows(namespace, args.repeats)
    worst = min(rows, key=lambda row: row[2] / max(row[1], 1e-9))
    print(f"# Time boxes against their references ({time.strftime('%Y-%m-%d %H:%M %Z')})\n")
    print(f"Machine: {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"one torch thread; `{' '.join(['python', 'bench/bench_timeboxes.py', *(argv or sys.argv[1:])])}`\n")
    print("| check | slowest of {} (ms) | box (s) | box / slowest |".format(args.repeats))
    print("|---|---:|---:|---:|")
    for name, seconds, box in rows:
        print(f"| {name} | {seconds * 1000:.1f} | {box:g} | {box / max(seconds, 1e-9):,.0f}× |")
    boxes = time_boxes()
    ratio = worst[2] / max(worst[1], 1e-9)
    print(
        f"\n{len(rows)} checks; the smallest ratio is {ratio:,.0f}× ({worst[0]}, goal {RATIO_GOAL}×); "
        f"all boxes of the notebook run out: {boxes.total:g} s."
    )
    return 0 if ratio >= RATIO_GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
