"""Compare two step logs (`traces.step_record` lists): the first difference, in words."""

from __future__ import annotations

FIELDS = (
    ("scheduled", "scheduled (id, tokens) in order"),
    ("new_hits", "prefix-cache hits of the requests admitted"),
    ("finished", "finished"),
    ("preempted", "preempted"),
)


def first_difference(kit: list[dict], vllm: list[dict], names=("kit", "vLLM")) -> str | None:
    """None when the logs agree step for step; otherwise what differs at the first step that does."""
    first, second = names
    for index, (mine, theirs) in enumerate(zip(kit, vllm)):
        for key, label in FIELDS:
            if mine[key] != theirs[key]:
                return f"step {index}: {label}: {first} {mine[key]}, {second} {theirs[key]}"
    if len(kit) != len(vllm):
        agreeing = min(len(kit), len(vllm))
        return f"{first} took {len(kit)} steps, {second} {len(vllm)} (the first {agreeing} agree)"
    return None


def summary(traces, kit_logs, vllm_logs) -> dict:
    """Counts and the differing traces: {"traces", "steps", "agree", "differ": [(seed, text)]}."""
    differ = []
    for trace, kit, vllm in zip(traces, kit_logs, vllm_logs, strict=True):
        difference = first_difference(kit, vllm)
        if difference:
            differ.append((trace.seed, difference))
    steps = sum(len(log) for log in kit_logs)
    return {
        "traces": len(traces),
        "steps": steps,
        "agree": len(traces) - len(differ),
        "differ": differ,
    }


def exercised(traces, logs) -> dict:
    """How often the traces reach each rule (read off the kit's logs): a count of 0 would mean
    the agreement says nothing about that rule."""
    counts = dict.fromkeys(
        (
            "hits",
            "full_hits",
            "capped",
            "lone_uncapped",
            "budget_full",
            "seqs_full",
            "idle",
            "preempted",
        ),
        0,
    )
    for trace, log in zip(traces, logs, strict=True):
        prompts = {rid: (step, prompt) for step, rid, prompt, _ in trace.requests}
        threshold, running, admitted = trace.long_prefill_token_threshold, set(), set()
        for index, record in enumerate(log):
            scheduled = dict(record["scheduled"])
            waiting = [r for r, (s, _) in prompts.items() if s <= index and r not in admitted]
            counts["seqs_full"] += bool(waiting) and len(running) == trace.max_num_seqs
            counts["idle"] += not scheduled
            counts["preempted"] += len(record["preempted"])
            counts["budget_full"] += sum(scheduled.values()) == trace.max_num_batched_tokens
            counts["capped"] += sum(threshold > 1 and n == threshold for n in scheduled.values())
            counts["lone_uncapped"] += sum(0 < threshold < n for n in scheduled.values())
            for rid, hit in record["new_hits"].items():
                counts["hits"] += hit > 0
                counts["full_hits"] += prompts[rid][1] in trace.warm_prefixes
            admitted |= set(record["new_hits"])
            running = (running | set(record["new_hits"])) - set(record["finished"])
    return counts
