"""`make engine-diff`: the kit's reference scheduler against vLLM's, on seeded traces.

    python -m bench.engine_diff.run                      # 240 traces, vLLM 0.33.0 (`make engine-diff`)
    python -m bench.engine_diff.run --traces 40 --first-seed 1000
    python -m bench.engine_diff.run --kit-only           # the kit's side alone, no vLLM

Builds (once) a throwaway venv under build/engine-diff/ with `pip install vllm==VERSION` (several
GB: vLLM pulls a CUDA torch; it runs on the CPU), runs the kit's side here and vLLM's side in
that venv, and compares the step logs. Prints one line per differing trace (its seed, settings
and first difference), then the counts; writes build/engine-diff/result.json. Exits 0 when every
trace agrees, 1 when one differs, 2 when a side fails to run.
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

from .compare import summary
from .kit_side import run_part4
from .traces import Trace, random_trace, read, to_json, write

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
    # A paged pool with preemption (part five) plugs in here: traces with a pool small enough
    # to preempt, and a kit side that runs the chapter's engine scheduler on them.
}


def ensure_vllm(venv: Path, version: str) -> Path:
    """The venv's Python, after `pip install vllm==version` there if it lacks that version."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "ensurepip", "--upgrade"], check=True, capture_output=True
        )
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


def run_vllm_side(python: Path, traces: list[Trace], work: Path) -> dict:
    """vLLM's step logs for `traces`, from `vllm_side` in the venv; its output goes to a log file."""
    traces_path, logs_path, log_path = (
        work / "traces.json",
        work / "vllm-logs.json",
        work / "vllm.log",
    )
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--comparison", choices=sorted(COMPARISONS), default="part4")
    parser.add_argument("--traces", type=int, default=240)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--vllm", default=VLLM_VERSION, help="the vLLM version to install and compare with"
    )
    parser.add_argument("--venv", type=Path, default=WORK / "venv")
    parser.add_argument("--kit-only", action="store_true", help="run the kit's side only (no vLLM)")
    args = parser.parse_args(argv)

    from grader.kit.authoring.nbsource import solution_namespace

    comparison = COMPARISONS[args.comparison]
    traces = [
        comparison.make_trace(seed)
        for seed in range(args.first_seed, args.first_seed + args.traces)
    ]
    kit_logs = comparison.run_kit(solution_namespace(), traces)
    steps = sum(len(log) for log in kit_logs)
    if args.kit_only:
        print(f"kit side: {len(traces)} traces, {steps} steps ({comparison.description})")
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    try:
        vllm = run_vllm_side(ensure_vllm(args.venv, args.vllm), traces, WORK)
    except (RuntimeError, subprocess.CalledProcessError) as error:
        print(f"engine-diff: {error}", file=sys.stderr)
        return 2
    result = summary(traces, kit_logs, vllm["logs"])
    by_seed = {t.seed: t for t in traces}
    for seed, difference in result["differ"]:
        print(f"DIFFERS {by_seed[seed].describe()}\n  {difference}")
    vllm_steps = sum(len(log) for log in vllm["logs"])
    result.update(
        comparison=args.comparison,
        vllm_version=vllm["vllm_version"],
        seeds=[args.first_seed, args.first_seed + args.traces - 1],
        vllm_steps=vllm_steps,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    )
    write(WORK / "result.json", result)
    print(
        f"engine-diff ({args.comparison}): vLLM {result['vllm_version']}, {result['traces']} traces "
        f"(seeds {result['seeds'][0]}-{result['seeds'][1]}), {steps} steps compared, "
        f"{result['agree']}/{result['traces']} traces agree step for step; {result['date']}, {result['machine']}"
    )
    return 0 if not result["differ"] else 1


if __name__ == "__main__":
    sys.exit(main())
