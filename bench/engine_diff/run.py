"""`make engine-diff`: the kit's reference scheduler against vLLM's, on seeded traces.

    python -m bench.engine_diff.run                  # every comparison, 240 traces each (`make engine-diff`)
    python -m bench.engine_diff.run --comparison part4 --traces 40 --first-seed 1000
    python -m bench.engine_diff.run --kit-only       # the kit's side alone, no vLLM

Builds (once) a throwaway venv under build/engine-diff/ with `pip install vllm==VERSION` (several
GB: vLLM pulls a CUDA torch; it runs on the CPU), runs the kit's side here and vLLM's side in
that venv, and compares the step logs. Prints one line per differing trace (its seed, settings
and first difference), then the counts of each comparison; writes
build/engine-diff/result-COMPARISON-VERSION.json. A comparison whose kit side is not in the
source (part five before it is merged) is skipped and says so. Exits 0 when every trace agrees,
1 when one differs, 2 when a side fails to run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .compare import exercised, summary
from .kit_side import run_part4, run_part5
from .traces import Trace, preempting_trace, random_trace, read, to_json, write

REPO_ROOT = Path(__file__).resolve().parents[2]
WORK = REPO_ROOT / "build" / "engine-diff"
VLLM_VERSION = "0.33.0"


@dataclass(frozen=True)
class Comparison:
    """What one comparison runs: traces from seeds, and the kit's side of them.

    vLLM's side is the same for every comparison: the trace says its pool (`num_kv_blocks`).
    """

    description: str
    make_trace: Callable[[int], Trace]
    run_kit: Callable[[dict, list], list]


COMPARISONS = {
    "part4": Comparison(
        "part four's Scheduler and part three's warm block cache; a pool vLLM never preempts in",
        random_trace,
        run_part4,
    ),
    "part5": Comparison(
        "part five's EngineScheduler and paged KVCacheManager; a pool small enough to preempt, "
        "prefixes shared without being warm, no threshold (the engine has none)",
        preempting_trace,
        run_part5,
    ),
}


def ensure_vllm(venv: Path, version: str) -> Path:
    """The venv's Python, after `pip install vllm==version` there if it lacks that version."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        capture_output=True,
        text=True,
    )
    if probe.stdout.strip() != version:
        print(f"installing vllm=={version} into {venv} (several GB, once)", flush=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"vllm=={version}"], check=True
        )
    return python


def run_vllm_side(python: Path, traces: list[Trace], name: str) -> dict:
    """vLLM's step logs for `traces`, from `vllm_side` in the venv; its output goes to a log file."""
    traces_path = WORK / f"{name}-traces.json"
    logs_path, log_path = WORK / f"{name}-vllm-logs.json", WORK / f"{name}-vllm.log"
    write(traces_path, {"traces": to_json(traces)})
    with open(log_path, "w", encoding="utf-8") as log:
        done = subprocess.run(
            [str(python), "-m", "bench.engine_diff.vllm_side", str(traces_path), str(logs_path)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(REPO_ROOT)},
        )
    if done.returncode:
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(
            f"vLLM's side failed (exit {done.returncode}); the end of {log_path}:\n{tail}"
        )
    return read(logs_path)


def compare(name: str, ns: dict, seeds: range, python: Path | None) -> int:
    """One comparison: 0 when every trace agrees (or, without `python`, the kit's side ran),
    1 when one differs, 2 when a side cannot run."""
    comparison = COMPARISONS[name]
    traces = [comparison.make_trace(seed) for seed in seeds]
    try:
        kit_logs = comparison.run_kit(ns, traces)
        steps = sum(len(log) for log in kit_logs)
        if python is None:
            print(f"{name}: the kit's side ran {len(traces)} traces, {steps} steps")
            return 0
        vllm = run_vllm_side(python, traces, name)
    except RuntimeError as error:
        print(f"engine-diff ({name}): {error}", file=sys.stderr)
        return 2
    result = summary(traces, kit_logs, vllm["logs"])
    by_seed = {t.seed: t for t in traces}
    for seed, difference in result["differ"]:
        print(f"DIFFERS {by_seed[seed].describe()}\n  {difference}")
    result.update(
        comparison=name,
        description=comparison.description,
        vllm_version=vllm["vllm_version"],
        seeds=[seeds.start, seeds.stop - 1],
        vllm_steps=sum(len(log) for log in vllm["logs"]),
        exercised=exercised(traces, kit_logs),
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    )
    write(WORK / f"result-{name}-{result['vllm_version']}.json", result)
    print(
        f"engine-diff ({name}): vLLM {result['vllm_version']}, {result['traces']} traces "
        f"(seeds {seeds.start}-{seeds.stop - 1}), {steps} steps compared, "
        f"{result['agree']}/{result['traces']} traces agree step for step; "
        f"{result['date']}, {result['machine']}"
    )
    reached = ", ".join(f"{k} {v}" for k, v in result["exercised"].items())
    print(f"  rules reached (kit's logs): {reached}")
    return 0 if not result["differ"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--comparison", choices=["all", *COMPARISONS], default="all")
    parser.add_argument("--traces", type=int, default=240)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--vllm", default=VLLM_VERSION, help="the vLLM version to compare with")
    parser.add_argument("--venv", type=Path, default=WORK / "venv")
    parser.add_argument("--kit-only", action="store_true", help="the kit's side only (no vLLM)")
    args = parser.parse_args(argv)

    from grader.kit.authoring.nbsource import solution_namespace

    ns = solution_namespace()
    names = list(COMPARISONS) if args.comparison == "all" else [args.comparison]
    if args.comparison == "all" and "EngineScheduler" not in ns:
        print("part5: skipped, part five's engine (EngineScheduler) is not in this source")
        names.remove("part5")
    python = None
    if not args.kit_only:
        WORK.mkdir(parents=True, exist_ok=True)
        try:
            python = ensure_vllm(args.venv, args.vllm)
        except subprocess.CalledProcessError as error:
            print(f"engine-diff: installing vLLM {args.vllm} failed: {error}", file=sys.stderr)
            return 2
    seeds = range(args.first_seed, args.first_seed + args.traces)
    return max(compare(name, ns, seeds, python) for name in names)


if __name__ == "__main__":
    sys.exit(main())
