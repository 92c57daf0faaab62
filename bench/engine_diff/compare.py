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
