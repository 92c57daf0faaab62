"""Benchmark (not a test): the cost of one prefix lookup as the cache grows.

For 100, 1,000 and 10,000 cached sequences of 1,000 tokens (8 system prompts of 768 tokens,
each sequence one of them plus its own 232-token tail), in the same run:

- list scan: the core's `PrefixCacheManager.match_prefix`, which compares the query with every
  cached prefix;
- block cache: `BlockPrefixCache.match`, one hash and one dict lookup per block;
- floor: hashing the query's full blocks with the same `_full_blocks` / `_hash_block`, and
  nothing else; no lookup can be cheaper than this.

Each query is a cached sequence (a full hit: 62 blocks, the longest walk). Prints a Markdown
report with the machine, the command, the timings and three goals marked met or missed.
Exits 0 either way; a wrong lookup result is an error (exit 1).

    python bench/bench_block_cache.py            # about 10 s on 2 cores
    python bench/bench_block_cache.py --sizes 100,1000
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grader.kit.authoring.nbsource import SOURCE_PATH, read_source, solution_namespace

BLOCK_SIZE = 16
NUM_SYSTEM_PROMPTS = 8
SYSTEM_LEN = 768
TAIL_LEN = 232  # 768 + 232 = 1,000 tokens a sequence
GOAL_FLAT = 1.5  # match at the largest size within 1.5x of the smallest
GOAL_SPEEDUP = 300.0  # at least 300x faster than the list scan at the largest size
GOAL_FLOOR = 2.0  # within 2x of hashing alone at the largest size


def per_query_seconds(fns, queries, number, repeat) -> list:
    """Seconds per call of each fn: median over queries of the best of `repeat` timings.

    The fns are timed in turn on each query and each repeat, so a busy moment on a shared
    machine hits all of them alike; the best of several repeats drops the interrupted ones.
    """
    best = [[float("inf")] * len(queries) for _ in fns]
    for _ in range(repeat):
        for qi, q in enumerate(queries):
            for fi, fn in enumerate(fns):
                seconds = timeit.timeit(lambda fn=fn, q=q: fn(q), number=number) / number
                best[fi][qi] = min(best[fi][qi], seconds)
    return [statistics.median(per_query) for per_query in best]


def hash_only(cache):
    """The floor: walk the query's full blocks and chain their hashes, nothing else."""
    full_blocks, hash_block = cache._full_blocks, cache._hash_block

    def floor(tokens):
        key = None
        for block in full_blocks(tokens):
            key = hash_block(key, block)
        return key

    return floor


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-2 else f"{seconds * 1e3:,.1f} ms"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="100,1000,10000", help="cached sequence counts, comma-separated"
    )
    parser.add_argument(
        "--source", type=Path, default=SOURCE_PATH, help="the percent-format source"
    )
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    started = time.perf_counter()

    ns = solution_namespace(read_source(args.source))
    BlockPrefixCache, PrefixCacheManager = ns["BlockPrefixCache"], ns["PrefixCacheManager"]

    rng = random.Random(34)
    sequences = ns["system_prompt_trace"](
        rng,
        num_requests=sizes[-1],
        num_system_prompts=NUM_SYSTEM_PROMPTS,
        system_len=SYSTEM_LEN,
        tail_len=(TAIL_LEN, TAIL_LEN),
        skew=0.0,
    )
    blocks_per_seq = (SYSTEM_LEN + TAIL_LEN) // BLOCK_SIZE
    num_blocks = NUM_SYSTEM_PROMPTS * SYSTEM_LEN // BLOCK_SIZE + sizes[-1] * (
        blocks_per_seq - SYSTEM_LEN // BLOCK_SIZE
    )
    cache = BlockPrefixCache(BLOCK_SIZE, num_blocks)  # room for every block: nothing is evicted
    manager = PrefixCacheManager(block_size=BLOCK_SIZE)
    floor = hash_only(cache)

    rows, filled = [], 0
    for n in sizes:
        for tokens in sequences[filled:n]:
            cache.release(cache.acquire(tokens))
            # add_prefix's own duplicate check scans the list (O(N) per insert); fill it directly
            manager.cached_prefixes.append(tuple(tokens))
        filled = n
        queries = rng.sample(sequences[:n], 20)
        scan_queries = queries[: 5 if n <= 1000 else 3]
        for q in queries:
            if len(cache.match(q)) != blocks_per_seq:
                raise SystemExit(f"block cache missed a cached sequence at n={n}")
        for q in scan_queries:
            if manager.match_prefix(q) != len(q):
                raise SystemExit(f"list scan missed a cached sequence at n={n}")
        t_match, t_floor = per_query_seconds([cache.match, floor], queries, number=100, repeat=7)
        (t_scan,) = per_query_seconds([manager.match_prefix], scan_queries, number=1, repeat=3)
        rows.append((n, t_scan, t_match, t_floor))
    elapsed = time.perf_counter() - started

    command = (
        "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
        if argv is None
        else f"main({argv!r})"
    )
    print("# BlockPrefixCache: lookup cost as the cache grows\n")
    print(
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(f"- command: `{command}` (total {elapsed:.0f} s)")
    print(
        f"- cache: N sequences of {SYSTEM_LEN + TAIL_LEN} tokens ({NUM_SYSTEM_PROMPTS} system prompts of {SYSTEM_LEN} "
        f"tokens, each sequence one of them + its own {TAIL_LEN}-token tail), block_size {BLOCK_SIZE}"
    )
    print(
        f"- query: a cached sequence (full hit, {blocks_per_seq} blocks); time per query = median over queries "
        "(20; list scan 5, or 3 at 10,000) of the best of 7 repeats of 100 calls (list scan: 3 repeats of 1 call)\n"
    )
    print(
        "| cached sequences | list scan (`match_prefix`) | block cache (`match`) | floor (hash only) | scan / match | match / floor |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n, t_scan, t_match, t_floor in rows:
        print(
            f"| {n:,} | {fmt_us(t_scan)} | {fmt_us(t_match)} | {fmt_us(t_floor)} | {t_scan / t_match:,.0f}× | {t_match / t_floor:.2f}× |"
        )

    (n0, _, m0, _), (n1, s1, m1, f1) = rows[0], rows[-1]
    goals = [
        (
            f"block cache flat: `match` at {n1:,} within {GOAL_FLAT}× of at {n0:,}",
            f"{m1 / m0:.2f}×",
            m1 / m0 <= GOAL_FLAT,
        ),
        (
            f"≥ {GOAL_SPEEDUP:.0f}× faster than the list scan at {n1:,}",
            f"{s1 / m1:,.0f}×",
            s1 / m1 >= GOAL_SPEEDUP,
        ),
        (f"within {GOAL_FLOOR}× of the floor at {n1:,}", f"{m1 / f1:.2f}×", m1 / f1 <= GOAL_FLOOR),
    ]
    print("\n| goal | measured | status |\n|---|---:|---|")
    for goal, measured, met in goals:
        print(f"| {goal} | {measured} | {'met' if met else 'missed'} |")
    print(f"\n{sum(met for _, _, met in goals)} of {len(goals)} goals met.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
