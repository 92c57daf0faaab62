"""The kit's side of the engine diff: traces through the chapter's reference scheduler.

The code is the chapter source's own (`solution_namespace()`: every cell of the solutions
notebook, measurements left out), so what is compared is exactly what the solutions notebook
runs. Part four: `Scheduler` (TODO 15-19 solved, the given `schedule()`) reading part three's
`BlockPrefixCache` through `BlockCacheAdapter`, warmed with the trace's prefixes.
"""

from __future__ import annotations

from .traces import Trace, sampled_token, step_record

MAX_STEPS = 50_000


def part4_scheduler(ns: dict, trace: Trace):
    """Part four's Scheduler with the trace's settings and a warm block cache (no KV capacity)."""
    cache = ns["BlockPrefixCache"](trace.block_size, trace.num_kv_blocks)
    for prefix in trace.warm_prefixes:  # computed once and finished: cached, evictable, unused
        cache.release(cache.acquire(prefix))
    return ns["Scheduler"](
        **trace.scheduler_settings(), prefix_cache=ns["BlockCacheAdapter"](cache)
    )


def run_trace(ns: dict, scheduler, trace: Trace) -> list[dict]:
    """Drive `scheduler` through `trace` step by step; one `step_record` a step.

    A step adds the requests arriving at it, schedules, then hands every scheduled request the
    fake sampler's token (`update_from_output` keeps it only for those that caught up). A
    request's hit is its `num_computed_tokens` after the step less what it was scheduled, for
    every request that left the waiting queue this step.
    """
    pending, made, log = list(trace.requests), {}, []
    for step in range(MAX_STEPS):
        while pending and pending[0][0] <= step:
            _, rid, prompt, max_tokens = pending.pop(0)
            made[rid] = ns["Request"](rid, list(prompt), max_tokens)
            scheduler.add_request(made[rid])
        if not pending and all(r.is_finished for r in made.values()):
            return log
        waiting = {r.request_id for r in scheduler.waiting}
        out = scheduler.schedule()
        scheduled = list(out.num_scheduled_tokens.items())
        hits = {rid: made[rid].num_computed_tokens - n for rid, n in scheduled if rid in waiting}
        scheduler.update_from_output(out, {rid: sampled_token(step, rid) for rid, _ in scheduled})
        finished = [rid for rid, _ in scheduled if made[rid].is_finished]
        preempted = list(getattr(out, "preempted_req_ids", ()))
        log.append(step_record(scheduled, hits, finished, preempted))
    raise RuntimeError(
        f"the kit's scheduler did not finish in {MAX_STEPS} steps: {trace.describe()}"
    )


def run_part4(ns: dict, traces: list[Trace]) -> list[list[dict]]:
    return [run_trace(ns, part4_scheduler(ns, trace), trace) for trace in traces]
