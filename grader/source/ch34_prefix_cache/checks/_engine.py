"""Part five's helpers (TODO 20-24, the engine): a reference for each TODO, the isolation that
swaps every other TODO for its reference, a scheduling driver without a model, a dense attention
oracle and a greedy decoder.

Isolation: the notebook's given code finds `BlockPool`, `KVCacheManager`, `EngineScheduler`,
`paged_attention` and `LLMEngine` by name in the notebook's namespace when it runs, so
`_Isolated(ns, todo)` puts subclasses there whose TODO methods are the references below, except
the TODO under test, for as long as the check runs. Part four's `_num_new_tokens` (TODO 16) and
`update_from_output` (TODO 19), which the engine's scheduler inherits, are references too.
"""

import random
import warnings

import torch

# ---- references of TODO 20-24 (and of the two part-four methods the engine inherits) ----


def _r_get_new_blocks(self, num_blocks):
    if num_blocks > len(self.free_block_queue):
        raise ValueError(f"only {len(self.free_block_queue)} free blocks")
    taken = [self.free_block_queue.popitem(last=False)[1] for _ in range(num_blocks)]
    for block in taken:
        self._maybe_evict_cached_block(block)
        block.ref_cnt = 1
    return taken


def _r_allocate_slots(self, request, num_new_tokens, new_computed_blocks=()):
    hits = list(new_computed_blocks)
    owned = self.req_to_blocks.get(request.request_id, [])
    computed = request.num_computed_tokens + len(hits) * self.block_size
    needed = (computed + num_new_tokens + self.block_size - 1) // self.block_size
    extra = max(0, needed - len(owned) - len(hits))
    if extra + len([b for b in hits if b.ref_cnt == 0]) > self.block_pool.get_num_free_blocks():
        return None
    self.block_pool.touch(hits)
    fresh = self.block_pool.get_new_blocks(extra)
    self.req_to_blocks[request.request_id] = owned + hits + fresh
    self.cache_blocks(request, min(computed + num_new_tokens, request.num_tokens))
    return fresh


def _r_allocate_or_preempt(self, request, num_new_tokens, out):
    while True:
        if self.kv_cache_manager.allocate_slots(request, num_new_tokens) is not None:
            return True
        victim = self.running[-1]
        del self.running[-1]
        self.kv_cache_manager.free(victim)
        victim.num_computed_tokens = 0
        self.waiting.appendleft(victim)
        out.preempted_req_ids.append(victim.request_id)
        if victim is request:
            return False


def _quietly(where, function, *args):
    """`_call` with warnings silenced: torch 1.11 warns about `//` on tensors (deprecated, not
    wrong), and nbgrader gives 0 to a grade cell that writes to stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _call(where, function, *args)


def _r_paged_attention(q, k_cache, v_cache, meta):
    """Request by request, in float64: what the batched read must equal."""
    block_size = k_cache.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for r in range(meta.block_table.shape[0]):
        rows = (meta.token_request == r).nonzero().flatten().tolist()
        length = int(meta.seq_lens[r])
        slots = [int(meta.block_table[r, p // block_size]) * block_size + p % block_size for p in range(length)]
        keys = _dense_rows(k_cache, slots)
        values = _dense_rows(v_cache, slots)
        start = length - int(meta.query_lens[r])
        for row in rows:
            position = start + int(meta.token_index[row])
            out[row] = _dense_attention(q[row].double(), keys[: position + 1], values[: position + 1])
    return out.to(q.dtype)


def _dense_rows(cache, slots):
    flat = cache.reshape(-1, cache.shape[2], cache.shape[3])
    return flat[torch.tensor(slots, dtype=torch.long)].double()


def _dense_attention(query, keys, values):
    """query [H, D], keys / values [S, KVH, D]: every key visible."""
    group = query.shape[0] // keys.shape[1]
    keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,shd->hs", query, keys) / query.shape[-1] ** 0.5
    return torch.einsum("hs,shd->hd", scores.softmax(dim=-1), values)


def _r_step(self):
    out = self.scheduler.schedule()
    if not out.num_scheduled_tokens:
        return {}
    requests = {rid: self.scheduler.requests[rid] for rid in out.num_scheduled_tokens}
    sampled = self.model_runner.execute_model(out, requests, self.kv_cache_manager)
    self.scheduler.update_from_output(out, sampled)
    for rid in sampled:
        if requests[rid].is_finished:
            self.kv_cache_manager.free(requests[rid])
    return sampled


def _r_num_new_tokens(self, request, num_computed_tokens, token_budget):
    owed = request.num_tokens - num_computed_tokens
    if self.long_prefill_token_threshold > 0:
        owed = min(owed, self.long_prefill_token_threshold)
    return max(0, min(owed, token_budget))


def _r_update_from_output(self, out, sampled_token_ids):
    for rid in list(out.num_scheduled_tokens):
        request = self.requests[rid]
        if request.num_computed_tokens != request.num_tokens:
            continue
        request.output_token_ids.append(sampled_token_ids[rid])
        if len(request.output_token_ids) >= request.max_tokens:
            self.running = [r for r in self.running if r is not request]
            self.requests.pop(rid)


_REFERENCE = {
    20: ("BlockPool", "get_new_blocks", _r_get_new_blocks),
    21: ("KVCacheManager", "allocate_slots", _r_allocate_slots),
    22: ("EngineScheduler", "_allocate_or_preempt", _r_allocate_or_preempt),
    24: ("LLMEngine", "step", _r_step),
}
_PART_FOUR = {"_num_new_tokens": _r_num_new_tokens, "update_from_output": _r_update_from_output}


class _Isolated:
    """`with _Isolated(ns, todo):` every part-five TODO but `todo` (None: all) is the reference's,
    and so are the part-four methods the engine's scheduler inherits; the names come back after."""

    def __init__(self, ns, todo):
        self.ns, self.todo = ns, todo

    def __enter__(self):
        names = ["BlockPool", "KVCacheManager", "EngineScheduler", "LLMEngine", "paged_attention"]
        self.saved = {name: self.ns[name] for name in names}
        for todo, (cls_name, method, function) in _REFERENCE.items():
            methods = dict(_PART_FOUR) if cls_name == "EngineScheduler" else {}
            if todo != self.todo:
                methods[method] = function
            if methods:
                self.ns[cls_name] = type(cls_name, (self.saved[cls_name],), methods)
        if self.todo != 23:
            self.ns["paged_attention"] = _r_paged_attention
        return self.ns

    def __exit__(self, *exc_info):
        self.ns.update(self.saved)
        return False


# ---- a scheduling driver (no model) and its record ----


def _engine_parts(ns, num_blocks, block_size, budget, max_num_seqs, caching=True):
    manager = ns["KVCacheManager"](num_blocks, block_size, caching)
    return manager, ns["EngineScheduler"](manager, budget, max_num_seqs)


def _random_workload(rng):
    """(settings, [(arrival step, id, prompt, max_tokens)]): shared prefixes and a small pool."""
    block = rng.choice([1, 2, 4, 8])
    system = [rng.randrange(30) for _ in range(rng.randint(block, 5 * block))]
    requests, step = [], 0
    for number in range(rng.randint(2, 7)):
        step += rng.choice([0, 0, 1, 3])
        head = system[: rng.randint(0, len(system))] if rng.random() < 0.7 else []
        prompt = head + [rng.randrange(30) for _ in range(rng.randint(1, 4 * block))]
        requests.append((step, f"r{number}", prompt, rng.randint(1, 2 * block + 2)))
    need = max((len(p) + m - 1 + block - 1) // block for _, _, p, m in requests)
    settings = {
        "num_blocks": need + rng.randint(0, 6),
        "block_size": block,
        "budget": rng.choice([1, 3, block, 2 * block + 1, 64]),
        "max_num_seqs": rng.randint(1, 4),
        "caching": rng.random() < 0.8,
    }
    return settings, requests


def _drive(ns, settings, requests, max_steps=600):
    """Run a workload through the scheduler and the KV manager, a fake sampler standing in for
    the model; return one record a step: (scheduled, preempted, waiting ids, block tables, free
    block ids in queue order, cached block ids, each request's (computed, outputs))."""
    manager, sched = _engine_parts(ns, settings["num_blocks"], settings["block_size"],
                                   settings["budget"], settings["max_num_seqs"], settings["caching"])
    made, record, pending = {}, [], list(requests)
    for step in range(max_steps):
        while pending and pending[0][0] <= step:
            _, rid, prompt, max_tokens = pending.pop(0)
            made[rid] = ns["Request"](rid, list(prompt), max_tokens)
            sched.add_request(made[rid])
        if not pending and not sched.has_unfinished_requests():
            break
        out = sched.schedule()
        scheduled = dict(out.num_scheduled_tokens)
        sampled = {rid: (step * 5 + int(rid[1:]) * 3) % 30 for rid in scheduled}
        owners = {rid: made[rid] for rid in scheduled}
        sched.update_from_output(out, sampled)
        for rid, request in owners.items():
            if request.is_finished and rid not in sched.requests:
                manager.free(request)
        record.append(_state(manager, sched, made, scheduled, out))
    return record, manager


def _state(manager, sched, made, scheduled, out):
    pool = manager.block_pool
    return (
        scheduled,
        list(getattr(out, "preempted_req_ids", [])),
        [r.request_id for r in sched.waiting],
        {rid: manager.get_block_ids(rid) for rid in sorted(manager.req_to_blocks)},
        list(pool.free_block_queue),
        sorted(b.block_id for b in pool.cached_block_hash_to_block.cached_blocks()),
        [(rid, r.num_computed_tokens, list(r.output_token_ids)) for rid, r in made.items()],
    )


_FIELDS = ("调度", "被抢占的请求", "waiting 队列", "块表", "空闲队列（按淘汰顺序）", "登记在缓存里的块", "请求状态 (id, num_computed_tokens, 输出)")


def _compare_runs(ns, todo, seed, workloads=30):
    """The learner's TODO (the others: references) against all references, step by step."""
    rng = random.Random(seed)
    for _ in range(workloads):
        settings, requests = _random_workload(rng)
        with _Isolated(ns, None):
            expected, _ = _drive(ns, settings, requests)
        shown = [(step, rid, len(p), m) for step, rid, p, m in requests]
        with _Isolated(ns, todo):
            try:
                got, manager = _drive(ns, settings, requests)
            except Exception as error:  # noqa: BLE001  (the learner's code may fail in any way)
                raise AssertionError(
                    f"TODO {todo}: 设置 {settings}，请求 (到达的步, id, prompt 长度, max_tokens) = {shown}\n"
                    f"跑到一半抛出 {type(error).__name__}: {error}"
                ) from None
        for index, (want, have) in enumerate(zip(expected, got)):
            for field, w, h in zip(_FIELDS, want, have):
                assert w == h, (
                    f"TODO {todo}: 设置 {settings}，请求 (到达的步, id, prompt 长度, max_tokens) = {shown}\n"
                    f"第 {index} 步之后{field}应为 {w}，得到 {h}"
                )
        assert len(got) == len(expected), f"TODO {todo}: 设置 {settings}：参考实现 {len(expected)} 步跑完，你的跑了 {len(got)} 步"
        manager.block_pool.check_integrity()


# ---- a tiny model, the greedy reference and an engine run ----


def _tiny_model(ns, seed=34):
    config = ns["tiny_qwen2_config"](vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2)
    return ns["random_model"](config, seed=seed, dtype=torch.float64)


def _greedy(model, prompt, max_tokens):
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(max_tokens):
            tokens.append(int(model(torch.tensor(tokens)).argmax(dim=-1)[-1]))
    return tokens[len(prompt):]


def _chat_prompts(seed, count=5):
    rng = random.Random(seed)
    system = [rng.randrange(61) for _ in range(21)]
    prompts = [system + [rng.randrange(61) for _ in range(rng.randint(1, 12))] for _ in range(count - 1)]
    return prompts + [[rng.randrange(61) for _ in range(9)]]
