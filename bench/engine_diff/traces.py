"""Seeded traces for the engine diff, and the step log both sides write. Standard library only.

A trace is one scheduler configuration (token budget, `max_num_seqs`, block size,
`long_prefill_token_threshold`, KV blocks), a warm prefix cache (prompts run to completion
before the trace starts) and requests arriving at given steps. Prompts share full blocks only
through the warm prefixes: every request's own tail starts with a token no other request has.
Part four's prefix cache is a fixed index that the scheduler only reads; vLLM also registers
the blocks each request computes (`allocate_slots` -> `cache_blocks`), so a prefix that two
requests share without it being warm would be reused by vLLM and not by part four. That is a
difference of scope (the chapter's "beyond" section), not a scheduling rule, so part four's
traces leave it out; a comparison whose kit side has a paged pool can set `cold_sharing`.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field

PROMPT_VOCAB = 50  # ordinary prompt tokens
TAIL_MARK = 1_000  # a request's tail starts with TAIL_MARK + its number: unique to it
SAMPLED_BASE = 5_000  # sampled tokens lie above every prompt token: they never form a prompt block
MAX_MODEL_LEN = 4_096


@dataclass
class Trace:
    """One seeded scenario; `requests` is [(arrival step, request id, prompt, max_tokens)]."""

    seed: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    long_prefill_token_threshold: int
    num_kv_blocks: int
    warm_prefixes: list = field(default_factory=list)
    requests: list = field(default_factory=list)

    def scheduler_settings(self) -> dict:
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "block_size": self.block_size,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
        }

    def describe(self) -> str:
        shown = [
            (step, rid, len(prompt), max_tokens) for step, rid, prompt, max_tokens in self.requests
        ]
        return (
            f"seed {self.seed}: {self.scheduler_settings()}, {self.num_kv_blocks} KV blocks, "
            f"warm prefixes of {[len(p) for p in self.warm_prefixes]} tokens, "
            f"requests (arrival step, id, prompt length, max_tokens) {shown}"
        )


def sampled_token(step: int, request_id: str) -> int:
    """The fake sampler of both sides: a token that depends on the step and the request only."""
    return SAMPLED_BASE + (step * 31 + sum(map(ord, request_id))) % 1_000


def blocks_needed(trace: Trace) -> int:
    """KV blocks that hold every request and warm prefix at once, plus slack: vLLM never preempts."""
    tokens = [len(p) + 1 for p in trace.warm_prefixes]
    tokens += [len(prompt) + max_tokens for _, _, prompt, max_tokens in trace.requests]
    return sum(-(-n // trace.block_size) + 1 for n in tokens) + 8


def random_trace(seed: int, cold_sharing: bool = False) -> Trace:
    """A trace drawn from `seed`: the settings, 0-3 warm prefixes, 1-12 requests over time.

    A request's prompt is a warm prefix (60 %), its own tail, or both; 15 % of those with a
    prefix have no tail (a full hit). With `cold_sharing`, prefixes that are not warm are drawn
    too and 30 % of requests repeat another request's prompt start without a tail mark.
    """
    rng = random.Random(seed)
    budget = rng.choice([1, 2, 3, 7, 16, 33, 64, 100, 256])
    trace = Trace(
        seed=seed,
        max_num_batched_tokens=budget,
        max_num_seqs=min(rng.randint(1, 6), budget),  # vLLM: max_num_seqs <= the budget
        block_size=rng.choice([1, 2, 4, 8, 16, 32]),
        long_prefill_token_threshold=rng.choice([0, 0, 1, 5, 24, 100]),
        num_kv_blocks=0,
    )
    systems = [[rng.randrange(PROMPT_VOCAB) for _ in range(rng.randint(1, 90))] for _ in range(3)]
    trace.warm_prefixes = [s for s in systems if rng.random() < 0.7]
    heads = systems if cold_sharing else trace.warm_prefixes
    step = 0
    for number in range(rng.randint(1, 12)):
        step += rng.choice([0, 0, 0, 1, 2, 5, 20])
        head = rng.choice(heads) if heads and rng.random() < 0.6 else []
        mark = [] if cold_sharing and rng.random() < 0.3 else [TAIL_MARK + number]
        tail = [] if head and rng.random() < 0.15 else mark
        tail += [rng.randrange(PROMPT_VOCAB) for _ in range(rng.randint(0, 120) if tail else 0)]
        prompt = head + tail or [TAIL_MARK + number]
        trace.requests.append((step, f"r{number}", prompt, rng.randint(1, 8)))
    trace.num_kv_blocks = blocks_needed(trace)
    return trace


def to_json(traces: list[Trace]) -> list[dict]:
    return [asdict(t) for t in traces]


def from_json(items: list[dict]) -> list[Trace]:
    return [Trace(**{**item, "requests": [tuple(r) for r in item["requests"]]}) for item in items]


def step_record(scheduled: list, new_hits: dict, finished: list, preempted: list) -> dict:
    """One step of a log: [[id, tokens], ...] in the scheduler's order, the prefix-cache hit of
    each request looked up this step, the ids that finished, the ids preempted."""
    return {
        "scheduled": [[rid, n] for rid, n in scheduled],
        "new_hits": dict(sorted(new_hits.items())),
        "finished": sorted(finished),
        "preempted": sorted(preempted),
    }


def write(path, payload: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f)


def read(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
