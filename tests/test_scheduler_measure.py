"""Part four's measurement (section 4.6): the step-time fit, the workload and the simulation.

Everything runs on the reference code from the one source (`solution_namespace()`, which runs
the `learner-only` helper cell but not the `measurement` cells). No test reads a clock: the
simulation's step times come from step-time models with fixed coefficients. The measurement
cells themselves are executed only with schedulers that must make them stop, or not start.
"""

from functools import lru_cache

import pytest

from grader.kit.authoring.nbsource import nbgrader_meta, read_source, solution_namespace

LINEAR = (
    1e-2,
    5e-5,
    2e-9,
)  # a (s), b (s/token), c (s per query-key pair): fixed, about an 8B model on one A100


@lru_cache(maxsize=1)
def _namespace() -> dict:
    return solution_namespace()


@lru_cache(maxsize=1)
def _cells() -> dict:
    return {nbgrader_meta(cell).get("grade_id"): cell.source for cell in read_source().cells}


NS = _namespace()
Scheduler = NS["Scheduler"]
SchedulerOutput = NS["SchedulerOutput"]
SchedulerCheckError = NS["SchedulerCheckError"]
HashPrefixCache = NS["HashPrefixCache"]
PrefillFirstScheduler = NS["PrefillFirstScheduler"]
simulate_serving = NS["simulate_serving"]
poisson_workload = NS["poisson_workload"]
percentile = NS["percentile"]


def _workload(**kwargs):
    params = {"seed": 34, "num_requests": 60, "rate": 10.0}
    params.update(kwargs)
    return poisson_workload(**params)


def _roofline():
    return NS["roofline_step_model"]("A100", "Llama-3-8B", step_overhead=0.005)


@lru_cache(maxsize=None)
def _run(budget, cache=True, policy="decode-first", model="roofline", num_requests=60):
    step = _roofline() if model == "roofline" else NS["linear_step_model"](*LINEAR)
    scheduler_class = PrefillFirstScheduler if policy == "prefill-first" else None
    return simulate_serving(
        _workload(num_requests=num_requests),
        step,
        budget,
        cache=HashPrefixCache() if cache else None,
        scheduler_class=scheduler_class,
        record_steps=True,
    )


# ---------------------------------------------------------------- invariants of the simulation
@pytest.mark.parametrize("policy", ["decode-first", "prefill-first"])
@pytest.mark.parametrize("budget", [256, 2048])
def test_every_request_finishes_with_all_its_tokens(budget, policy):
    workload = _workload()
    result = _run(budget, policy=policy)
    assert len(result["ttft"]) == len(workload)
    for i, (_, _, max_tokens) in enumerate(workload):
        assert len(result["token_times"][f"r{i}"]) == max_tokens
    assert len(result["tbt"]) == sum(n - 1 for _, _, n in workload)
    assert all(gap > 0 for gap in result["tbt"])


@pytest.mark.parametrize("budget", [256, 1024, 8192])
def test_ttft_is_at_least_the_prefill_s_own_time(budget):
    a, b, _ = LINEAR
    result = _run(budget, model="linear")
    for ttft, busy, uncached in zip(result["ttft"], result["prefill_busy"], result["uncached"]):
        assert ttft >= busy - 1e-12
        # every step of its prefill costs at least a, and its own uncached tokens cost b each
        assert busy >= a + b * uncached - 1e-12


def test_steps_never_exceed_the_budget_and_account_for_every_token():
    workload = _workload()
    result = _run(512)
    assert all(decode + prefill <= 512 for _, _, decode, prefill in result["steps"])
    computed = sum(decode + prefill for _, _, decode, prefill in result["steps"])
    prompt_tokens = sum(len(prompt) for _, prompt, _ in workload)
    outputs = sum(n for _, _, n in workload)
    # each output but the last is fed back as a decode token; hits are never scheduled
    assert computed == prompt_tokens - result["hit_tokens"] + outputs - len(workload)
    assert result["prefill_tokens"] == prompt_tokens - result["hit_tokens"]


def test_clock_runs_forward_and_steps_do_not_overlap():
    steps = _run(1024)["steps"]
    for (start, length, _, _), (next_start, _, _, _) in zip(steps, steps[1:]):
        assert length > 0
        assert next_start >= start + length - 1e-12


# ---------------------------------------------------------------- what the section concludes
@pytest.mark.parametrize("model", ["roofline", "linear"])
def test_smaller_budget_lowers_tbt_p99(model):
    p99 = [percentile(_run(budget, model=model)["tbt"], 99) for budget in (256, 512, 2048, 8192)]
    assert p99 == sorted(p99) and len(set(p99)) == len(p99), p99


@pytest.mark.parametrize("model", ["roofline", "linear"])
def test_larger_budget_lowers_ttft(model):
    small = percentile(_run(256, model=model)["ttft"], 50)
    large = percentile(_run(2048, model=model)["ttft"], 50)
    assert large < small


def test_prefix_cache_means_less_prefill_work_and_lower_ttft():
    on, off = _run(2048, cache=True), _run(2048, cache=False)
    assert off["hit_tokens"] == 0
    assert on["hit_tokens"] > 0.3 * on["prompt_tokens"]
    assert on["prefill_tokens"] == off["prefill_tokens"] - on["hit_tokens"]
    assert percentile(on["ttft"], 50) < percentile(off["ttft"], 50)


def test_no_shared_prefix_is_the_same_as_no_cache():
    distinct = _workload(num_system_prompts=None)
    step = _roofline()
    with_cache = simulate_serving(distinct, step, 2048, cache=HashPrefixCache())
    without = simulate_serving(distinct, step, 2048, cache=None)
    assert with_cache["hit_tokens"] == 0
    assert with_cache["ttft"] == without["ttft"] and with_cache["tbt"] == without["tbt"]


def test_warm_cache_hits_all_but_the_last_block():
    workload = _workload(num_requests=30)
    warm = HashPrefixCache()
    simulate_serving(workload, _roofline(), 2048, cache=warm)
    second = simulate_serving(workload, _roofline(), 2048, cache=warm)
    for (_, prompt, _), uncached in zip(workload, second["uncached"]):
        assert 1 <= uncached <= 16
        assert (len(prompt) - uncached) % 16 == 0


def test_prefill_first_stalls_decodes():
    decode_first, prefill_first = _run(512), _run(512, policy="prefill-first")
    # a prefill-first step never mixes: prefill only, or decode only
    assert all(decode == 0 or prefill == 0 for _, _, decode, prefill in prefill_first["steps"])
    assert any(decode > 0 and prefill > 0 for _, _, decode, prefill in decode_first["steps"])
    assert max(prefill_first["tbt"]) > 5 * max(decode_first["tbt"])
    assert percentile(prefill_first["tbt"], 99) > 3 * percentile(decode_first["tbt"], 99)


def test_no_chunking_stalls_decodes():
    workload = _workload()
    whole = simulate_serving(
        workload, _roofline(), max(len(p) for _, p, _ in workload) + 64, cache=HashPrefixCache()
    )
    assert max(whole["tbt"]) > 5 * max(_run(512)["tbt"])


# ---------------------------------------------------------------- the step-time models
def test_fit_recovers_known_coefficients():
    a, b, c = 1.2e-3, 7e-6, 5e-8
    points = [(n, n * (p + n)) for n in (1, 32, 128, 384) for p in (0, 384, 1152)]
    exact = [(t, w, a + b * t + c * w) for t, w in points]
    fitted = NS["fit_step_model"](exact)
    for got, want in zip(fitted, (a, b, c)):
        assert got == pytest.approx(want, rel=1e-6)
    wobble = [1.02, 0.98, 1.01, 0.99]  # deterministic +-2 % "noise"
    noisy = [(t, w, s * wobble[i % 4]) for i, (t, w, s) in enumerate(exact)]
    for got, want in zip(NS["fit_step_model"](noisy), (a, b, c)):
        assert got == pytest.approx(want, rel=0.15)
    unweighted = NS["fit_step_model"](exact, relative=False)
    assert unweighted[1] == pytest.approx(b, rel=1e-6)


def test_fit_needs_three_samples():
    with pytest.raises(ValueError):
        NS["fit_step_model"]([(1, 1, 1.0), (2, 4, 2.0)])


def test_roofline_has_a_ridge_where_the_two_terms_meet():
    step = NS["roofline_step_model"]("A100", "Llama-3-8B")
    ridge = NS["roofline_ridge_tokens"]("A100", "Llama-3-8B")
    assert 150 < ridge < 180  # about peak / bandwidth for 2-byte weights
    # below the ridge the step is bandwidth-bound: flat in the token count
    assert step([(1, 0)]) == pytest.approx(step([(64, 0)]), rel=1e-3)  # only the new KV is extra
    # well above it, compute-bound: linear in the token count
    assert step([(8192, 0)]) / step([(4096, 0)]) > 1.9
    assert NS["roofline_ridge_tokens"]("T4", "Qwen2.5-1.5B") == pytest.approx(
        65e12 / 320e9, rel=0.01
    )


def test_time_model_steps_reports_median_and_spread():
    model = NS["TinyCausalLM"](NS["TinyConfig"](max_positions=64), seed=0)
    rows = NS["time_model_steps"](model, [(1, 0), (8, 16)], repeats=3)
    assert [(r["n"], r["P"], r["work"]) for r in rows] == [(1, 0, 1), (8, 16, 192)]
    assert all(0 < r["low"] <= r["median"] <= r["high"] for r in rows)
    with pytest.raises(ValueError):
        NS["time_model_steps"](model, [(60, 10)])


# ---------------------------------------------------------------- workload and cache stand-in
def test_workload_is_seeded_and_sharing_changes_only_the_system_prompts():
    assert _workload() == _workload()
    shared, distinct = _workload(num_system_prompts=4), _workload(num_system_prompts=None)
    assert [(t, len(p), n) for t, p, n in shared] == [(t, len(p), n) for t, p, n in distinct]
    assert [p[-16:] for _, p, _ in shared] == [p[-16:] for _, p, _ in distinct]
    arrivals = [t for t, _, _ in shared]
    assert arrivals == sorted(arrivals)
    assert len({tuple(p[:1024]) for _, p, _ in shared if len(p) < 3000}) == 4


def test_hash_prefix_cache_hits_whole_blocks_only():
    cache = HashPrefixCache(block_size=4)
    cache.insert([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) == 8
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 0]) == 4
    assert cache.match_prefix([1, 2, 3]) == 0
    assert cache.match_prefix([0, 2, 3, 4, 5, 6, 7, 8]) == 0  # a block's key covers its parents


# ---------------------------------------------------------------- a wrong scheduler stops the cells
class IgnoresBudget(Scheduler):
    def _num_new_tokens(self, request, num_computed_tokens, token_budget):
        return request.num_tokens - num_computed_tokens


class NeverSamples(Scheduler):
    def update_from_output(self, out, sampled_token_ids):
        return None


class SchedulesNothing(Scheduler):
    def schedule(self):
        return SchedulerOutput()


class ChargesCachedTokens(Scheduler):
    def _schedule_waiting(self, out, token_budget):
        cache, self.prefix_cache = self.prefix_cache, None
        try:
            super()._schedule_waiting(out, token_budget)
        finally:
            self.prefix_cache = cache


class PrefillBeforeDecodes(Scheduler):
    def schedule(self):
        out = SchedulerOutput()
        self._schedule_waiting(out, self.max_num_batched_tokens)
        for request_id, n in out.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += n
        return out


class NeverFinishes(Scheduler):
    def update_from_output(self, out, sampled_token_ids):
        for request_id in out.num_scheduled_tokens:
            request = self.requests[request_id]
            if request.num_computed_tokens == request.num_tokens:
                request.output_token_ids.append(sampled_token_ids[request_id])


class Unfinished(Scheduler):
    def _schedule_running(self, out, token_budget):
        raise NotImplementedError()


WRONG = [
    (IgnoresBudget, "TODO 16"),
    (NeverSamples, "TODO 19"),
    (SchedulesNothing, "TODO 17"),
    (ChargesCachedTokens, "TODO 15"),
    (PrefillBeforeDecodes, "TODO 17"),
    (NeverFinishes, "TODO 19"),
]


@pytest.mark.parametrize("wrong, todo", WRONG, ids=[w.__name__ for w, _ in WRONG])
def test_simulation_names_the_todo_a_wrong_scheduler_breaks(wrong, todo):
    with pytest.raises(SchedulerCheckError, match=todo):
        simulate_serving(
            _workload(num_requests=20),
            _roofline(),
            512,
            cache=HashPrefixCache(),
            scheduler_class=wrong,
        )


def test_the_correct_scheduler_passes_every_check():
    result = simulate_serving(
        _workload(num_requests=20),
        _roofline(),
        512,
        cache=HashPrefixCache(),
        scheduler_class=Scheduler,
    )
    assert len(result["ttft"]) == 20


@pytest.mark.parametrize("cell", ["sched_measure_budget", "sched_measure_cache"])
@pytest.mark.parametrize("wrong, todo", [(IgnoresBudget, "TODO 16"), (NeverSamples, "TODO 19")])
def test_measurement_cell_stops_on_a_wrong_scheduler(monkeypatch, cell, wrong, todo):
    monkeypatch.setitem(
        NS, "Scheduler", wrong
    )  # the cell and simulate_serving read the name at run time
    with pytest.raises(SchedulerCheckError, match=todo):
        exec(compile(_cells()[cell], cell, "exec"), NS)


@pytest.mark.parametrize("cell", ["sched_measure_budget", "sched_measure_cache"])
def test_measurement_cell_asks_to_finish_the_todos_first(monkeypatch, capsys, cell):
    monkeypatch.setitem(NS, "Scheduler", Unfinished)
    exec(compile(_cells()[cell], cell, "exec"), NS)
    assert "请先完成 TODO 15–19" in capsys.readouterr().out


# ---------------------------------------------------------------- section 4.7: routing across replicas
def _conversations(**kwargs):
    params = {"seed": 34, "num_conversations": 16, "turns": 3, "rate": 2.0}
    params.update(kwargs)
    return NS["conversation_workload"](**params)


def test_one_replica_behind_a_router_is_the_single_engine_simulation():
    workload = _conversations()
    routed, per_replica = NS["simulate_replicas"](workload, _roofline(), NS["RoundRobinRouter"](1), 1)
    alone = simulate_serving(workload, _roofline(), 2048, cache=HashPrefixCache())
    assert per_replica == [len(workload)]
    for key in ("ttft", "tbt", "hit_tokens", "prefill_tokens", "num_steps", "makespan"):
        assert routed[key] == alone[key], key


def test_a_later_turn_extends_its_conversation_s_prompt():
    workload = _conversations(num_conversations=1, turns=3)
    prompts = [prompt for _, prompt, _ in workload]
    assert [p[: len(prompts[0])] for p in prompts] == [prompts[0]] * 3
    assert len(prompts[0]) < len(prompts[1]) < len(prompts[2])
    assert [when for when, _, _ in workload] == sorted(when for when, _, _ in workload)


def test_cache_aware_router_follows_sglang_s_three_rules():
    router = NS["CacheAwareRouter"](3)
    first = list(range(100))
    assert router.choose(first, [0, 0, 0]) == 0  # nothing matches: the smallest tree (ties: first)
    assert router.choose(list(range(200, 300)), [1, 0, 0]) == 1  # the next smallest tree
    assert router.choose(first + [7] * 40, [1, 1, 0]) == 0  # 96 of 140 tokens match: > 0.5
    assert router.choose(first[:32] + [5] * 90, [2, 1, 0]) == 2  # 32 of 122 match: smallest tree
    assert router.choose(first, [40, 1, 5]) == 1  # 40 - 1 > 32 and 40 > 1.1: least loaded
    assert router.decisions == {"负载均衡": 1, "前缀匹配": 1, "最小的树": 3}


def test_cache_aware_routing_hits_more_than_round_robin_on_conversations():
    workload = _conversations()
    rows = {}
    for name in ("RoundRobinRouter", "CacheAwareRouter"):
        result, per_replica = NS["simulate_replicas"](workload, _roofline(), NS[name](4), 4)
        assert sum(per_replica) == len(workload) and len(result["ttft"]) == len(workload)
        rows[name] = NS["summarize_run"](name, result)
    assert rows["CacheAwareRouter"]["hit_share"] > rows["RoundRobinRouter"]["hit_share"]
    assert rows["CacheAwareRouter"]["prefill_tokens"] < rows["RoundRobinRouter"]["prefill_tokens"]
