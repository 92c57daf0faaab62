"""Part five's measurement helpers (part5_measure.py): what they count, never how fast anything is.

Runs the reference cells of the one source (`solution_namespace()`: the learner-only helper cells
run, the measurement cells do not) on the tiny random Qwen2. No assertion reads a clock: the
timestamps feed TTFT and TBT lists whose lengths, signs and orders are checked, and the counts
(hits, steps, ops, blocks) are compared with what the workload implies.
"""

import pytest
import torch

from grader.kit.authoring.nbsource import solution_namespace


@pytest.fixture(scope="module")
def ns():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield solution_namespace()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model(ns):
    return ns["random_model"](ns["tiny_qwen2_config"](num_hidden_layers=2), seed=0)


def small_workload(ns, vocab_size):
    """Six requests, two shared 64-token system prompts, all arriving at 0 s: the schedule does not depend on the clock."""
    workload = ns["poisson_workload"](seed=34, num_requests=6, rate=1.0, num_system_prompts=2, system_len=64, user_len=(4, 20),
                                      long_share=0.0, output_len=(3, 6), vocab_size=vocab_size)
    return [(0.0, prompt, max_tokens) for _, prompt, max_tokens in workload]


@pytest.mark.parametrize("caching", [True, False])
def test_serving_a_workload_stamps_every_token_once(ns, model, caching):
    workload = small_workload(ns, model.config.vocab_size)
    engine = ns["LLMEngine"](model, ns["pool_blocks_for"](workload, 16), 16, 32, 4, enable_prefix_caching=caching)
    result = ns["serve_workload"](engine, workload)
    assert len(result["ttft"]) == len(workload) and min(result["ttft"]) > 0
    assert len(result["tbt"]) == sum(m - 1 for _, _, m in workload) and min(result["tbt"]) >= 0
    assert result["num_steps"] == len(result["steps"]) == engine.stats["num_steps"]
    scheduled = sum(tokens for tokens, _, _ in result["steps"])
    prompts = sum(len(p) for _, p, _ in workload)
    # every prompt token not hit, plus every output token but the last of each request, was computed once
    assert scheduled == prompts - result["hit_tokens"] + sum(m - 1 for _, _, m in workload)
    if caching:  # at least three of the six share a system prompt; hits are whole blocks
        assert result["hit_tokens"] > 0 and result["hit_tokens"] % 16 == 0
    else:
        assert result["hit_tokens"] == 0
    assert "schedule" not in vars(engine.scheduler)  # the recording wrapper is gone
    summary = ns["summarize_run"]("x", result)
    assert summary["ttft_p50"] <= summary["ttft_p99"]


def test_calibrated_workload_keeps_the_order_and_scales_arrivals(ns, model):
    workload, rate, offline = ns["calibrated_chat_workload"](model, 6, 64, (4, 20), (3, 6), 2, 64, load=0.5)
    unit = ns["poisson_workload"](seed=34, num_requests=6, rate=1.0, num_system_prompts=2, system_len=64, user_len=(4, 20),
                                  long_share=0.0, output_len=(3, 6), vocab_size=model.config.vocab_size)
    assert [(p, m) for _, p, m in workload] == [(p, m) for _, p, m in unit]
    assert rate > 0 and offline["num_steps"] > 0
    assert [w for w, _, _ in workload] == pytest.approx([w / rate for w, _, _ in unit])


def test_cached_prefill_hits_whole_blocks_of_the_shared_share(ns, model):
    rows = ns["time_cached_prefill"](model, [40, 100], share=0.9, repeats=1)
    assert [(r["length"], r["hit"], len(r["cold"]), len(r["warm"])) for r in rows] == [(40, 32, 1, 1), (100, 80, 1, 1)]


def test_op_counter_counts_compute_not_views(ns):
    x = torch.ones(4, 4)
    counted = ns["count_kernel_ops"](lambda: (x + 1).view(2, 8).transpose(0, 1).sum())
    assert counted == 2  # add and sum; view and transpose launch nothing


def test_decode_step_leaves_one_step_to_count(ns, model):
    times, engine = ns["decode_step_seconds"](model, 2, 20, steps=3)
    assert len(times) == 3 and engine.has_unfinished_requests()
    assert len(engine.step()) == 2 and not engine.has_unfinished_requests()


def test_verdict_on_overlapping_spreads_says_the_run_cannot_tell(ns):
    for a, b in (([0.010, 0.012, 0.030], [0.011, 0.013, 0.014]), ([0.028, 0.031], [0.030, 0.169]), ([1.0, 1.0], [1.0, 1.0])):
        text = ns["compare_verdict"]("缓存开", a, "缓存关", b, "TBT p50")
        assert "分不出差别" in text and "太吵" in text, text
        assert "低，每一次" not in text


def test_verdict_on_separated_spreads_names_the_lower_one_whichever_side_it_is(ns):
    on, off = [0.028, 0.029, 0.031], [0.093, 0.120, 0.169]
    first = ns["compare_verdict"]("缓存开", on, "缓存关", off, "TBT p50")
    second = ns["compare_verdict"]("缓存关", off, "缓存开", on, "TBT p50")
    for text in (first, second):
        assert "「缓存开」低，每一次都比「缓存关」的每一次低" in text, text
        assert "分不出" not in text
        assert "4.14×" in text  # median 120 ms / 29 ms, from these numbers
    # the spreads it was built from are in the sentence: median [min, max] in ms
    assert "29.0 [28.0, 31.0] ms" in first and "120.0 [93.0, 169.0] ms" in first


def test_verdict_prints_seconds_when_asked(ns):
    text = ns["compare_verdict"]("引擎", [2.0, 2.5], "一次一个", [9.0, 11.0], "总耗时", scale=1, unit="s")
    assert "「引擎」2.2 [2.0, 2.5] s" in text and "「引擎」低" in text


@pytest.mark.parametrize("a, b, order", [([1, 2], [3, 4], -1), ([5, 6], [3, 4], 1), ([1, 3.5], [3, 4], 0), ([1, 3], [3, 4], 0)],
                         ids=["a-lower", "b-lower", "overlap", "touching-ends-overlap"])
def test_range_order_decides_only_on_disjoint_ranges(ns, a, b, order):
    assert ns["range_order"](a, b) == order
