"""The reference KV code of chapter 34, part 2: cached and chunked prefill equal a full forward pass.

Runs the reference cells of the one source (`solution_namespace()`) and checks, on
hypothesis-generated prompts, chunk sizes and prefix sets, that
- chunked prefill gives the logits and KV of one uncached forward pass;
- `KVPrefixCache.prefill` reuses the longest cached prefix, feeds only the suffix in
  block-sized chunks, and gives the full pass's logits for the suffix and KV for the prompt;
- the cache is never modified by a prefill;
- the measuring helpers agree with their analytic formulas.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.kit.authoring.nbsource import solution_namespace

ATOL, RTOL = 1e-5, 1e-4
VOCAB = 64
SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
FEW = settings(
    SETTINGS, max_examples=10
)  # for the scenarios that make hundreds of model calls each

tokens = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=40)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The models are tiny: one thread is faster than two fighting over a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ns():
    return solution_namespace()


@pytest.fixture(scope="module")
def model(ns):
    return ns["TinyCausalLM"](ns["TinyConfig"](), seed=7)


class Counting:
    """Wraps a model and records how many tokens each call fed."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, token_ids, past_kv=None):
        self.calls.append(len(token_ids))
        return self.model(token_ids, past_kv=past_kv)


def _assert_close(actual, expected, what):
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    assert torch.allclose(actual, expected, rtol=RTOL, atol=ATOL), (
        f"{what}: max diff {(actual - expected).abs().max():.2e}"
    )


def _assert_same_kv(actual, expected):
    assert len(actual) == len(expected)
    for (k, v), (k_ref, v_ref) in zip(actual, expected):
        _assert_close(k, k_ref, "k")
        _assert_close(v, v_ref, "v")


def _flat(past_kv):
    return [t for layer in past_kv for t in layer]


# --- the model ------------------------------------------------------------------------------


def test_tiny_config_rejects_invalid_shapes(ns):
    config = ns["TinyConfig"]
    for bad in (
        {"d_model": 30, "n_heads": 4},
        {"n_layers": 0},
        {"vocab_size": -1},
        {"max_positions": 2.0},
        {"mlp_ratio": True},
    ):
        with pytest.raises(ValueError):
            config(**bad)
    assert config().head_dim == 16


def test_model_rejects_empty_input_and_positions_past_the_table(ns, model):
    with pytest.raises(ValueError):
        model([])
    with pytest.raises(ValueError):
        model(list(range(10)) * 26)  # 260 > max_positions = 256


def test_same_seed_gives_the_same_model_and_leaves_global_rng_usable(ns):
    config = ns["TinyConfig"]()
    a, b = ns["TinyCausalLM"](config, seed=3), ns["TinyCausalLM"](config, seed=3)
    c = ns["TinyCausalLM"](config, seed=4)
    assert torch.equal(a([1, 2, 3])[0], b([1, 2, 3])[0])
    assert not torch.allclose(a([1, 2, 3])[0], c([1, 2, 3])[0])


@FEW
@given(prompt=tokens)
def test_decoding_token_by_token_equals_full_forward(ns, model, prompt):
    """Bottom-right mask and absolute positions: one token at a time with past_kv = full pass."""
    full_logits, full_kv = model(prompt)
    past, rows = None, []
    for token in prompt:
        logits, past = model([token], past_kv=past)
        rows.append(logits)
    _assert_close(torch.cat(rows), full_logits, "logits")
    _assert_same_kv(past, full_kv)


@SETTINGS
@given(prompt=tokens.filter(lambda p: len(p) >= 4), data=st.data())
def test_restarting_positions_per_chunk_changes_the_logits(ns, model, prompt, data):
    """The equality has teeth: chunks that forget past_kv differ far beyond the tolerance."""
    size = data.draw(st.integers(1, len(prompt) - 1))
    restarted = torch.cat([model(prompt[i : i + size])[0] for i in range(0, len(prompt), size)])
    assert (restarted - model(prompt)[0]).abs().max() > 100 * ATOL


def test_forward_does_not_modify_the_past_kv(ns, model):
    _, past = model([5, 6, 7, 8])
    before = [t.clone() for t in _flat(past)]
    model([9, 10], past_kv=past)
    assert all(torch.equal(a, b) for a, b in zip(before, _flat(past)))


# --- TODO 9: chunked prefill --------------------------------------------------------------


@SETTINGS
@given(prompt=tokens, chunk_size=st.integers(1, 48), as_tensor=st.booleans())
def test_chunked_prefill_equals_full_forward(ns, model, prompt, chunk_size, as_tensor):
    full_logits, full_kv = model(prompt)
    counting = Counting(model)
    ids = torch.tensor(prompt) if as_tensor else prompt
    logits, past = ns["chunked_prefill"](counting, ids, chunk_size)
    _assert_close(logits, full_logits, "logits")
    _assert_same_kv(past, full_kv)
    assert ns["kv_length"](past) == len(prompt)
    assert sum(counting.calls) == len(prompt) and max(counting.calls) <= chunk_size
    assert len(counting.calls) == -(-len(prompt) // chunk_size)


@SETTINGS
@given(prefix=tokens, suffix=tokens, chunk_size=st.integers(1, 48))
def test_chunked_prefill_after_a_cached_prefix_equals_full_forward(
    ns, model, prefix, suffix, chunk_size
):
    full_logits, full_kv = model(prefix + suffix)
    _, prefix_kv = model(prefix)
    before = [t.clone() for t in _flat(prefix_kv)]
    logits, past = ns["chunked_prefill"](model, suffix, chunk_size, past_kv=prefix_kv)
    _assert_close(logits, full_logits[len(prefix) :], "suffix logits")
    _assert_same_kv(past, full_kv)
    assert all(torch.equal(a, b) for a, b in zip(before, _flat(prefix_kv))), (
        "the incoming past_kv was modified"
    )


def test_chunked_prefill_rejects_bad_chunk_sizes_and_empty_input(ns, model):
    for bad in (0, -3, 2.0, None):
        with pytest.raises(ValueError):
            ns["chunked_prefill"](model, [1, 2, 3], bad)
    with pytest.raises(ValueError):
        ns["chunked_prefill"](model, [], 4)


# --- TODO 10: KV prefix cache ------------------------------------------------------------

prefix_sets = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=0, max_size=5)


def _longest_match(prefixes, prompt):
    return max((len(p) for p in prefixes if prompt[: len(p)] == p), default=0)


@SETTINGS
@given(prefixes=prefix_sets, data=st.data(), block_size=st.integers(1, 9))
def test_cached_prefill_equals_full_forward_for_any_prefix_set(
    ns, model, prefixes, data, block_size
):
    """Small alphabet so that prefixes share stems and prompts hit them in every way."""
    stem = data.draw(st.sampled_from(prefixes)) if prefixes and data.draw(st.booleans()) else []
    prompt = stem + data.draw(st.lists(st.integers(0, 3), min_size=0 if stem else 1, max_size=12))
    counting = Counting(model)
    cache = ns["KVPrefixCache"](counting, block_size)
    for prefix in prefixes:
        cache.add_prefix(prefix)
    counting.calls.clear()

    logits, past, hit_len = cache.prefill(prompt)

    expected_hit = min(_longest_match(prefixes, prompt), len(prompt) - 1)
    full_logits, full_kv = model(prompt)
    assert type(hit_len) is int and hit_len == expected_hit
    assert sum(counting.calls) == len(prompt) - hit_len, "only the suffix may be computed"
    assert max(counting.calls) <= block_size
    _assert_close(logits, full_logits[hit_len:], "suffix logits")
    _assert_same_kv(past, full_kv)


def test_full_hit_still_computes_the_last_token(ns, model):
    counting = Counting(model)
    cache = ns["KVPrefixCache"](counting, 4)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    cache.add_prefix(prompt)
    counting.calls.clear()
    logits, past, hit_len = cache.prefill(torch.tensor(prompt))
    assert hit_len == len(prompt) - 1 and counting.calls == [1]
    _assert_close(logits, model(prompt)[0][-1:], "last-token logits")
    assert ns["kv_length"](past) == len(prompt)


@FEW
@given(prefixes=prefix_sets.filter(bool), data=st.data(), block_size=st.integers(2, 6))
def test_prefill_never_modifies_the_cached_kv(ns, model, prefixes, data, block_size):
    cache = ns["KVPrefixCache"](model, block_size)
    for prefix in prefixes:
        cache.add_prefix(prefix)
    before = {key: [t.clone() for t in _flat(kv)] for key, kv in cache.prefix_kv.items()}
    prompts = [p + data.draw(st.lists(st.integers(0, 3), max_size=5)) for p in prefixes] + list(
        prefixes
    )
    first = [cache.prefill(p)[0] for p in prompts]
    second = [cache.prefill(p)[0] for p in prompts]
    assert all(torch.equal(a, b) for a, b in zip(first, second)), (
        "a prefill changed a later prefill"
    )
    assert before.keys() == cache.prefix_kv.keys()
    for key, saved in before.items():
        assert all(torch.equal(a, b) for a, b in zip(saved, _flat(cache.prefix_kv[key]))), (
            f"cached KV of {key} changed"
        )


def test_adding_a_registered_prefix_again_computes_nothing(ns, model):
    counting = Counting(model)
    cache = ns["KVPrefixCache"](counting, 3)
    cache.add_prefix([1, 2, 3, 4])
    counting.calls.clear()
    cache.add_prefix((1, 2, 3, 4))
    assert counting.calls == []
    assert cache.manager.cached_prefixes == [(1, 2, 3, 4)]


def test_empty_prompts_and_prefixes_are_rejected(ns, model):
    cache = ns["KVPrefixCache"](model, 4)
    with pytest.raises(ValueError):
        cache.add_prefix([])
    with pytest.raises(ValueError):
        cache.prefill([])


# --- measuring helpers ---------------------------------------------------------------------


@SETTINGS
@given(num_tokens=st.integers(1, 64), chunk_size=st.one_of(st.none(), st.integers(1, 80)))
def test_analytic_attention_peak_matches_the_hook(ns, model, num_tokens, chunk_size):
    prompt = list(range(num_tokens))
    if chunk_size is None:
        measured = ns["attention_peak_bytes"](model, lambda: model(prompt))
    else:
        measured = ns["attention_peak_bytes"](
            model, lambda: ns["chunked_prefill"](model, prompt, chunk_size)
        )
    assert measured == ns["analytic_attention_peak_bytes"](model.config, num_tokens, chunk_size)


def test_attention_hooks_are_removed_after_measuring(ns, model):
    ns["attention_peak_bytes"](model, lambda: model([1, 2, 3]))
    assert all(
        not m.scores_tap._forward_hooks
        for m in model.modules()
        if isinstance(m, ns["CausalSelfAttention"])
    )


def test_cost_model_is_one_without_hits_and_between_its_limits(ns):
    speedup = ns["cost_model_speedup"]
    assert speedup(0.0, 1024, 3_000_000, 4, 256) == pytest.approx(1.0)
    for h in (0.25, 0.5, 0.9, 0.95):
        value = speedup(h, 1024, 3_000_000, 4, 256)
        assert 1 / (1 - h * h) < value < 1 / (1 - h)
    assert speedup(0.9, 10**9, 1, 1, 1) == pytest.approx(
        1 / (1 - 0.81), rel=1e-6
    )  # attention-bound limit


def test_non_embedding_params_leaves_out_the_embeddings(ns, model):
    config = model.config
    total = sum(p.numel() for p in model.parameters())
    embeddings = (config.vocab_size + config.max_positions) * config.d_model
    assert ns["non_embedding_params"](model) == total - embeddings
