"""Benchmark (not a test): section 4.6's serving simulation, swept over seeds, and how long it takes.

Runs the reference code from the one source (`solution_namespace()`: the learner's Scheduler as
the reference solves it, and the section's helpers) on the notebook's configuration: the seeded
Poisson workload (180 requests, 10 per second), an 8B Llama-like model on one A100 from its
spec-sheet roofline plus 5 ms a step, the budgets 256 to 8192, no chunking, prefill-first
(SGLang's default) and the prefix cache off. For every configuration it prints the notebook's
seed (34) and the range over `--seeds` seeds, so the text's conclusions can be checked against
the spread a different workload sample gives; then the seconds the sweep took and the machine.

Exits 0 when every conclusion the notebook's text states holds for every seed, 1 otherwise
(each broken one is printed), 2 when the simulation itself fails.

    python bench/bench_scheduler.py               # 30 to 40 s on 2 busy cores
    python bench/bench_scheduler.py --seeds 34,35
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grader.kit.authoring.nbsource import SOURCE_PATH, solution_namespace

BUDGETS = (256, 512, 1024, 2048, 4096, 8192)
METRICS = (
    ("ttft_p50", "TTFT p50"),
    ("ttft_p99", "TTFT p99"),
    ("tbt_p50", "TBT p50"),
    ("tbt_p99", "TBT p99"),
    ("tbt_max", "TBT max"),
    ("makespan_ms", "all done"),
)


def sweep(ns: dict, seed: int) -> dict:
    """{configuration: summarize_run row} for one seed, as the notebook's budget cell runs it."""
    workload = ns["poisson_workload"](seed=seed, num_requests=180, rate=10.0)
    step = ns["roofline_step_model"]("A100", "Llama-3-8B", step_overhead=0.005)
    cache = ns["HashPrefixCache"]
    run, summarize = ns["simulate_serving"], ns["summarize_run"]
    rows = {}
    for budget in BUDGETS:
        rows[f"decode-first {budget}"] = summarize(
            str(budget), run(workload, step, budget, cache=cache())
        )
    no_chunk = max(len(p) for _, p, _ in workload) + 64
    rows["no chunking"] = summarize("no chunking", run(workload, step, no_chunk, cache=cache()))
    for budget in (512, 2048):
        rows[f"prefill-first {budget}"] = summarize(
            str(budget),
            run(workload, step, budget, cache=cache(), scheduler_class=ns["PrefillFirstScheduler"]),
        )
        rows[f"decode-first {budget}, no cache"] = summarize(
            str(budget), run(workload, step, budget, cache=None)
        )
    offline = [(0.0, prompt, max_tokens) for _, prompt, max_tokens in workload]
    for budget in (128, 512, 8192):
        rows[f"offline {budget}"] = summarize(
            str(budget), run(offline, step, budget, cache=cache())
        )
    for shared in (32, 128, None):
        variant = ns["poisson_workload"](
            seed=seed, num_requests=180, rate=10.0, num_system_prompts=shared
        )
        rows[f"2048, {shared or 'distinct'} system prompts"] = summarize(
            str(shared), run(variant, step, 2048, cache=cache())
        )
    warm = cache()
    run(workload, step, 2048, cache=warm)
    rows["2048, warm cache"] = summarize("warm", run(workload, step, 2048, cache=warm))
    return rows


def conclusions(rows: dict) -> list:
    """(claim, holds) for each comparison the notebook's text draws from the table."""
    df = {b: rows[f"decode-first {b}"] for b in BUDGETS}
    tbt = [df[b]["tbt_p99"] for b in BUDGETS]
    return [
        (
            "TBT p99 rises with the budget (256 < 512 < ... < 8192)",
            all(x < y for x, y in zip(tbt, tbt[1:])),
        ),
        (
            "TTFT p50 at 256 > 1.5x at 2048, and at 512 >= 0.95x at 2048",
            df[256]["ttft_p50"] > 1.5 * df[2048]["ttft_p50"]
            and df[512]["ttft_p50"] >= 0.95 * df[2048]["ttft_p50"],
        ),
        (
            "TTFT p50 at 4096 and 8192 within 30% of 2048",
            all(abs(df[b]["ttft_p50"] / df[2048]["ttft_p50"] - 1) < 0.3 for b in (4096, 8192)),
        ),
        (
            "prefill-first TBT p99 > 3x decode-first at 512, > 2x at 2048",
            rows["prefill-first 512"]["tbt_p99"] > 3 * df[512]["tbt_p99"]
            and rows["prefill-first 2048"]["tbt_p99"] > 2 * df[2048]["tbt_p99"],
        ),
        (
            "prefill-first TTFT p50 at most 15% lower than decode-first (512, 2048)",
            all(
                rows[f"prefill-first {b}"]["ttft_p50"] >= 0.85 * df[b]["ttft_p50"]
                for b in (512, 2048)
            ),
        ),
        (
            "no chunking: TBT max > 5x decode-first 512",
            rows["no chunking"]["tbt_max"] > 5 * df[512]["tbt_max"],
        ),
        (
            "cache off: TTFT p50 > 2.5x cache on at 512, > 5x at 2048",
            rows["decode-first 512, no cache"]["ttft_p50"] > 2.5 * df[512]["ttft_p50"]
            and rows["decode-first 2048, no cache"]["ttft_p50"] > 5 * df[2048]["ttft_p50"],
        ),
        (
            "cache off: about twice the prefill tokens",
            all(
                1.5
                < rows[f"decode-first {b}, no cache"]["prefill_tokens"] / df[b]["prefill_tokens"]
                < 3
                for b in (512, 2048)
            ),
        ),
        (
            "offline: budget 128 takes > 1.3x as long as 512",
            rows["offline 128"]["makespan"] > 1.3 * rows["offline 512"]["makespan"],
        ),
        (
            "offline: budget 512 finishes before 8192",
            rows["offline 512"]["makespan"] < rows["offline 8192"]["makespan"],
        ),
        (
            "TTFT p50 falls as the hit share rises (distinct > 128 > 32 > 4 shared > warm)",
            rows["2048, distinct system prompts"]["ttft_p50"]
            > rows["2048, 128 system prompts"]["ttft_p50"]
            > rows["2048, 32 system prompts"]["ttft_p50"]
            > df[2048]["ttft_p50"]
            > rows["2048, warm cache"]["ttft_p50"],
        ),
        (
            "distinct system prompts with the cache on == cache off",
            rows["2048, distinct system prompts"]["ttft_p50"]
            == rows["decode-first 2048, no cache"]["ttft_p50"],
        ),
        (
            "the hit share barely moves TBT p99 (within 5%)",
            abs(rows["2048, distinct system prompts"]["tbt_p99"] / df[2048]["tbt_p99"] - 1) < 0.05,
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds",
        default="34,35,36,37,38",
        help="comma-separated workload seeds (the notebook uses 34)",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    ns = solution_namespace()
    started = time.perf_counter()
    try:
        per_seed = {}
        for seed in seeds:
            seed_started = time.perf_counter()
            per_seed[seed] = sweep(ns, seed)
            per_seed[seed]["_seconds"] = time.perf_counter() - seed_started
    except Exception as error:  # noqa: BLE001  (the command line turns any failure into exit 2)
        print(f"error: the simulation failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    first = seeds[0]
    configurations = [k for k in per_seed[first] if not k.startswith("_")]
    print(
        "# Section 4.6: serving simulation, A100 + Llama-3-8B roofline + 5 ms a step (simulated, not measured)\n"
    )
    print(f"- command: python bench/{Path(__file__).name} --seeds {args.seeds}")
    print(f"- source: {SOURCE_PATH.relative_to(Path(__file__).resolve().parents[1])}")
    print(
        f"- machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(
        f"- sweep: {len(configurations)} simulations a seed, {len(seeds)} seeds, {elapsed:.1f} s in all "
        f"({statistics.median(per_seed[s]['_seconds'] for s in seeds):.1f} s a seed, median)\n"
    )
    header = (
        "| configuration | "
        + " | ".join(f"{title} (ms): seed {first} [min, max]" for _, title in METRICS)
        + " | hit share |"
    )
    print(header)
    print("|" + "---|" * (len(METRICS) + 2))
    for name in configurations:
        cells = []
        for key, _ in METRICS:
            values = [
                per_seed[s][name][key]
                if key != "makespan_ms"
                else 1e3 * per_seed[s][name]["makespan"]
                for s in seeds
            ]
            cells.append(f"{values[0]:.1f} [{min(values):.1f}, {max(values):.1f}]")
        print(f"| {name} | " + " | ".join(cells) + f" | {per_seed[first][name]['hit_share']:.0%} |")
    print("\n## The text's conclusions, seed by seed\n")
    broken = 0
    for index, (claim, _) in enumerate(conclusions(per_seed[first])):
        holds = [conclusions(per_seed[s])[index][1] for s in seeds]
        broken += not all(holds)
        print(f"- {'holds' if all(holds) else 'BROKEN'}: {claim} ({sum(holds)}/{len(seeds)} seeds)")
    print(
        f"\n{'all conclusions hold' if not broken else f'{broken} conclusion(s) broken'} for seeds {args.seeds}; sweep {elapsed:.1f} s"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
