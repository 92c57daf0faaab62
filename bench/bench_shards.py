"""Shards against one run on the same export: N shards on N processes (`--shard K/N --jobs 1`
each, at the same time, then `cluster/merge.py`) against one run with `--jobs N`.

    .venv/bin/python bench/bench_shards.py [--count 12] [--shards 2] [--rounds 1]

On one machine the shards compete for the same cores as the single run's N jobs: the figure is
what sharding costs (each shard's own zygote, intake and preflight), not what a cluster gains;
on a cluster each shard has its own machine. The merge is timed apart. Both reports are checked
to hold the same grades.csv.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.bench_grading import make_moodle_zip, make_submissions  # noqa: E402
from grader.kit.paths import GRADING_COURSE  # noqa: E402
from grader.kit.sandbox.kernel_setup import kernel_tempdir  # noqa: E402


def kit(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", *args], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def waited(*processes: subprocess.Popen) -> None:
    for process in processes:
        _, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(process.args)} failed:\n{err[-3000:]}")


def one_round(export: Path, work: Path, shards: int) -> dict:
    for name in ("single", "merged", *(f"shard{k}" for k in range(shards))):
        shutil.rmtree(work / name, ignore_errors=True)
    start = time.perf_counter()
    waited(kit("grader.kit.autograde", str(export), "--report", str(work / "single"),
               "--jobs", str(shards)))  # fmt: skip
    single = time.perf_counter() - start
    start = time.perf_counter()
    waited(*(kit("grader.kit.autograde", str(export), "--report", str(work / f"shard{k}"),
                 "--jobs", "1", "--shard", f"{k}/{shards}") for k in range(shards)))  # fmt: skip
    sharded = time.perf_counter() - start
    start = time.perf_counter()
    folders = [str(work / f"shard{k}") for k in range(shards)]
    waited(kit("grader.kit.cluster.merge", "--report", str(work / "merged"), *folders))
    merge = time.perf_counter() - start
    same = (work / "single/grades.csv").read_bytes() == (work / "merged/grades.csv").read_bytes()
    if not same:
        raise SystemExit("the merged grades.csv differs from the single run's")
    return {"single": single, "shards": sharded, "merge": merge}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if not (REPO_ROOT / GRADING_COURSE / "gradebook.db").exists():
        raise SystemExit("run `make notebooks` first")
    work = kernel_tempdir("ch34-bench-shards-")
    load = os.getloadavg()[0]
    try:
        (work / "subs").mkdir()
        export = make_moodle_zip(make_submissions(work / "subs", args.count), work / "moodle.zip")
        rounds = [one_round(export, work, args.shards) for _ in range(args.rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; load "
        f"average {load:.2f} before, {os.getloadavg()[0]:.2f} after; {time.strftime('%Y-%m-%d %H:%M %Z')}"
    )
    print(f"- command: `{' '.join([Path(sys.executable).name] + sys.argv)}` ({args.count} "
          f"submissions in a Moodle zip, {args.rounds} round(s), medians)\n")  # fmt: skip
    print("| what | wall time (s) |\n|---|---:|")
    print(f"| one run, --jobs {args.shards} | {median['single']:.1f} |")
    print(f"| {args.shards} shards at once, --jobs 1 each | {median['shards']:.1f} |")
    print(f"| the merge | {median['merge']:.1f} |")
    ratio = (median["shards"] + median["merge"]) / median["single"]
    print(f"\nshards + merge / one run: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
