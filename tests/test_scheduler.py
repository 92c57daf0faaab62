"""Part four's reference scheduler: invariants on generated traces, fixed vectors, and the
end-to-end run on the tiny model (each request's logits equal its one-shot prefill).

The reference comes from the source (`solution_namespace`), not from the generated notebooks.
The hidden checks compare learners' code with their own oracle; these tests hold the reference
itself to vLLM v1's rules, so the oracle and the reference cannot drift together unnoticed.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.kit.authoring.nbsource import read_source, solution_namespace

NS = solution_namespace(read_source())
Request, Scheduler, ListPrefixCache = NS["Request"], NS["Scheduler"], NS["ListPrefixCache"]


def run_steps(scheduler, num_steps, sampled=1):
    """Each step's num_scheduled_tokens, every scheduled request sampling `sampled`."""
    steps = []
    for _ in range(num_steps):
        out = scheduler.schedule()
        steps.append(dict(out.num_scheduled_tokens))
        scheduler.update_from_output(out, {rid: sampled for rid in out.num_scheduled_tokens})
    return steps


@st.composite
def traces(draw):
    """Scheduler settings, cached prefixes and requests (arrival step, prompt, max_tokens)."""
    block = draw(st.sampled_from([1, 2, 4, 16]))
    config = {
        "max_num_batched_tokens": draw(st.integers(1, 80)),
        "max_num_seqs": draw(st.integers(1, 4)),
        "block_size": block,
        "long_prefill_token_threshold": draw(st.sampled_from([0, 0, 1, 3, 20])),
    }
    systems = draw(
        st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=40), min_size=1, max_size=3)
    )
    requests, step = [], 0
    for _ in range(draw(st.integers(1, 7))):
        step += draw(st.integers(0, 3))
        head = draw(st.sampled_from(systems + [[]]))
        tail = draw(st.lists(st.integers(0, 9), min_size=0 if head else 1, max_size=30))
        requests.append((step, head + tail, draw(st.integers(1, 4))))
    return config, systems, requests


def run(config, systems, requests, max_steps=2000):
    """[(scheduled, {id: (computed before, computed after, outputs before, outputs after)})]."""
    cache = ListPrefixCache(systems)
    sched = Scheduler(**config, prefix_cache=cache)
    made, steps, pending = {}, [], list(enumerate(requests))
    for step in range(max_steps):
        while pending and pending[0][1][0] <= step:
            number, (_, prompt, max_tokens) = pending.pop(0)
            made[f"r{number}"] = Request(f"r{number}", prompt, max_tokens)
            sched.add_request(made[f"r{number}"])
        if not pending and all(r.is_finished for r in made.values()):
            return steps, made, cache
        before = {rid: (r.num_computed_tokens, len(r.output_token_ids)) for rid, r in made.items()}
        out = sched.schedule()
        scheduled = dict(out.num_scheduled_tokens)
        sched.update_from_output(out, {rid: 5 for rid in scheduled})
        after = {rid: (r.num_computed_tokens, len(r.output_token_ids)) for rid, r in made.items()}
        steps.append((scheduled, {rid: before[rid] + after[rid] for rid in before}))
    raise AssertionError("the trace did not finish")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(traces())
def test_every_step_keeps_vllms_invariants(trace):
    config, systems, requests = trace
    steps, made, cache = run(*trace)
    budget, threshold = config["max_num_batched_tokens"], config["long_prefill_token_threshold"]
    admitted = []
    for scheduled, states in steps:
        assert sum(scheduled.values()) <= budget
        assert all(type(n) is int and n > 0 for n in scheduled.values())
        eligible = [rid for rid, s in states.items() if s[1] < made[rid].max_tokens]
        if threshold and len(eligible) > 1:  # vLLM 0.33: a lone request is not capped
            assert all(n <= threshold for n in scheduled.values())
        running = [
            rid for rid, s in states.items() if rid in admitted and s[2] < made[rid].max_tokens
        ]
        new = [rid for rid in scheduled if rid not in admitted]
        assert len(running) + len(new) <= config["max_num_seqs"]
        # running before waiting: every new request comes after every running one in the dict
        order = list(scheduled)
        assert all(order.index(n) > order.index(r) for n in new for r in order if r in running)
        for (
            rid
        ) in new:  # a new request starts at its block-aligned hit: cached tokens never scheduled
            prompt = made[rid].prompt_token_ids
            hit = (
                min(cache.match_prefix(prompt), len(prompt) - 1)
                // config["block_size"]
                * config["block_size"]
            )
            assert states[rid][2] - scheduled[rid] == hit
        for rid, (computed0, outputs0, computed1, outputs1) in states.items():
            caught_up = computed1 == len(made[rid].prompt_token_ids) + outputs0
            assert outputs1 - outputs0 == (1 if rid in scheduled and caught_up else 0)
        admitted += new
    arrival = [f"r{n}" for n in range(len(requests))]
    assert admitted == arrival, "admitted in arrival order (first come, first served)"
    assert all(len(r.output_token_ids) == r.max_tokens for r in made.values())


@settings(max_examples=40, deadline=None, derandomize=True)
@given(traces())
def test_the_same_trace_gives_the_same_schedule(trace):
    assert [s for s, _ in run(*trace)[0]] == [s for s, _ in run(*trace)[0]]


def test_a_budget_of_1024_and_three_800_token_prompts_schedule_800_224_and_nothing():
    sched = Scheduler(max_num_batched_tokens=1024, max_num_seqs=8)
    for rid in "abc":
        sched.add_request(Request(rid, list(range(800)), 2))
    assert run_steps(sched, 2) == [{"a": 800, "b": 224}, {"a": 1, "b": 576, "c": 447}]


def test_a_fully_cached_prompt_recomputes_its_last_block_not_one_token():
    system = list(range(64))
    sched = Scheduler(64, 4, block_size=16, prefix_cache=ListPrefixCache([system]))
    sched.add_request(Request("again", system, 1))
    assert run_steps(sched, 1) == [{"again": 16}]
    assert NS["num_cached_tokens"](ListPrefixCache([system[:10]]), system, 16) == 0


def test_the_threshold_caps_a_prefill_only_while_another_request_is_eligible():
    sched = Scheduler(max_num_batched_tokens=64, max_num_seqs=4, long_prefill_token_threshold=8)
    sched.add_request(Request("alone", list(range(40)), 3))
    assert run_steps(sched, 1) == [{"alone": 40}]  # nobody to starve: the whole budget
    sched.add_request(Request("long", list(range(30)), 2))
    assert run_steps(sched, 2) == [{"alone": 1, "long": 8}, {"alone": 1, "long": 8}]
    assert run_steps(sched, 1) == [{"long": 14}]  # alone finished: long is the only one left
    assert sched.configured_long_prefill_token_threshold == 8


def test_the_scheduler_refuses_bad_settings_with_a_message_naming_them():
    for bad in ({"max_num_batched_tokens": 0}, {"max_num_seqs": -1}, {"block_size": 1.5}):
        settings_ = {"max_num_batched_tokens": 8, "max_num_seqs": 2, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            Scheduler(**settings_)
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        Scheduler(8, 2, long_prefill_token_threshold=-1)
    with pytest.raises(ValueError, match="max_tokens"):
        Request("x", [1], 0)


def test_the_tiny_model_served_by_the_schedule_gives_one_shot_logits_and_greedy_tokens(capsys):
    NS["demo_end_to_end"]()
    assert "✅ 每个请求的 logits 都与一次完整前向相同" in capsys.readouterr().out


def test_the_end_to_end_run_catches_a_scheduler_that_samples_mid_prefill():
    class SamplesEarly(Scheduler):
        def update_from_output(self, out, sampled_token_ids):
            for request_id in out.num_scheduled_tokens:
                request = self.requests[request_id]
                request.output_token_ids.append(sampled_token_ids[request_id])
                if request.is_finished:
                    self.running.remove(request)
                    del self.requests[request_id]

    torch = NS["torch"]
    model = NS["TinyCausalLM"](NS["TinyConfig"](max_positions=256), seed=4)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 5
    logits, outputs, _, _ = NS["serve_on_tiny_model"](model, SamplesEarly(8, 2), {"p": prompt}, 3)
    full_logits, expected = NS["greedy_one_shot"](model, prompt, 3)
    assert outputs["p"] != expected or not torch.allclose(logits["p"], full_logits, atol=1e-4)
    right, right_outputs, _, _ = NS["serve_on_tiny_model"](model, Scheduler(8, 2), {"p": prompt}, 3)
    assert right_outputs["p"] == expected and torch.allclose(right["p"], full_logits, atol=1e-4)
