"""Part five's engine (part5_engine.py) generates exactly what greedy decoding of one request at a
time generates, whatever the chunking, caching, batching or preemption.

Runs the reference cells from the one source: part four's Request and Scheduler, part five's model
(a tiny random Qwen2 from `random_model`, float64 so no argmax tie decides a token) and the engine.
The reference (`greedy_alone`, given code of the notebook) decodes each prompt alone with the
model's own attention, recomputing every token each time (no cache of any kind). Nothing is downloaded.
"""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.kit.authoring.nbsource import nbgrader_meta, read_source, strip_solution_markers

CELLS = (
    "sched_request",
    "todo15_num_cached_tokens",
    "scheduler_todo16_19",
    "model_imports",
    "model_qwen2",
    "engine_hashing",
    "engine_block_pool_given",
    "engine_block_pool",
    "engine_kv_cache_manager_given",
    "engine_kv_cache_manager",
    "engine_scheduler_given",
    "engine_scheduler",
    "engine_attention_metadata",
    "engine_attention",
    "engine_model_runner",
    "engine_llm_engine_given",
    "engine_llm_engine",
)
BLOCK = 4
VOCAB = 97


@pytest.fixture(scope="module")
def ns():
    """The reference cells above, executed in one namespace (solution markers removed)."""
    namespace = {"__name__": "part5_engine"}
    exec("import random\nfrom dataclasses import dataclass, field\nimport torch", namespace)
    cells = {
        nbgrader_meta(c).get("grade_id"): c for c in read_source().cells if c.cell_type == "code"
    }
    for grade_id in CELLS:
        exec(compile(strip_solution_markers(cells[grade_id].source), grade_id, "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def model(ns):
    config = ns["tiny_qwen2_config"](
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return ns["random_model"](config, seed=7, dtype=torch.float64)


def chat_prompts(seed, count=6, system_len=22):
    """Prompts sharing a system prompt (not block-aligned), one unrelated, one repeated whole."""
    rng = random.Random(seed)
    system = [rng.randrange(VOCAB) for _ in range(system_len)]
    prompts = [
        system + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 14))] for _ in range(count - 2)
    ]
    return prompts + [[rng.randrange(VOCAB) for _ in range(rng.randint(3, 30))], list(prompts[0])]


MAX_TOKENS = 5


@pytest.fixture(scope="module")
def workload(ns, model):
    prompts = chat_prompts(34)
    return prompts, [ns["greedy_alone"](model, p, MAX_TOKENS) for p in prompts]


@pytest.mark.parametrize("caching", [True, False], ids=["cache-on", "cache-off"])
@pytest.mark.parametrize(
    "budget", [BLOCK, 2 * BLOCK + 3, 64], ids=["one-block", "odd", "whole-prompt"]
)
def test_generate_equals_greedy_alone_for_every_budget_with_caching_on_and_off(
    ns, model, workload, caching, budget
):
    prompts, expected = workload
    engine = ns["LLMEngine"](
        model,
        num_blocks=200,
        block_size=BLOCK,
        max_num_batched_tokens=budget,
        max_num_seqs=4,
        enable_prefix_caching=caching,
    )
    assert engine.generate(prompts, MAX_TOKENS) == expected
    stats = engine.stats
    assert stats["num_preemptions"] == 0
    assert stats["prefix_cache_query_tokens"] == sum(len(p) for p in prompts)
    assert (stats["prefix_cache_hit_tokens"] > 0) == caching
    pool = engine.kv_cache_manager.block_pool
    pool.check_integrity()
    assert pool.get_num_free_blocks() == 200


def test_a_pool_too_small_to_hold_everyone_preempts_and_evicts_yet_generates_the_same(
    ns, model, workload
):
    prompts, expected = workload
    engine = ns["LLMEngine"](
        model, num_blocks=12, block_size=BLOCK, max_num_batched_tokens=16, max_num_seqs=4
    )
    assert engine.generate(prompts, MAX_TOKENS) == expected
    stats = engine.stats
    assert stats["num_preemptions"] > 0 and stats["num_evicted_blocks"] > 0, stats
    assert stats["preempted_prefix_cache_query_tokens"] > 0
    engine.kv_cache_manager.block_pool.check_integrity()


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 10**6),
    num_blocks=st.integers(9, 40),
    budget=st.integers(1, 40),
    max_num_seqs=st.integers(1, 5),
    caching=st.booleans(),
)
def test_generate_equals_greedy_alone_on_random_workloads(
    ns, model, seed, num_blocks, budget, max_num_seqs, caching
):
    rng = random.Random(seed)
    prompts = chat_prompts(seed, count=rng.randint(3, 5), system_len=rng.randint(1, 14))
    prompts = [
        p[:20] for p in prompts
    ]  # 20 + 4 - 1 tokens: 6 blocks of 4, within the smallest pool
    engine = ns["LLMEngine"](
        model,
        num_blocks=num_blocks,
        block_size=BLOCK,
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        enable_prefix_caching=caching,
    )
    assert engine.generate(prompts, 4) == [ns["greedy_alone"](model, p, 4) for p in prompts]
    engine.kv_cache_manager.block_pool.check_integrity()


def test_a_request_arriving_mid_prefill_hits_blocks_computed_in_the_same_step(ns, model):
    system = [(5 * i) % VOCAB for i in range(24)]
    prompts = {"first": system + [1, 2, 3], "second": system + [4, 5]}
    engine = ns["LLMEngine"](
        model, num_blocks=64, block_size=BLOCK, max_num_batched_tokens=16, max_num_seqs=4
    )
    engine.add_request("first", prompts["first"], 3)
    outputs = {rid: [] for rid in prompts}
    assert engine.step() == {}  # 16 of its 27 tokens
    assert engine.scheduler.requests["first"].num_computed_tokens == 16
    engine.add_request("second", prompts["second"], 3)
    for rid, token in engine.step().items():  # first's last 11 tokens and second's 2 in one forward
        outputs[rid].append(token)
    # first's blocks 4 and 5 were registered when this step allocated them, before their KV existed
    assert engine.stats["prefix_cache_hit_tokens"] == 24
    while engine.has_unfinished_requests():
        for rid, token in engine.step().items():
            outputs[rid].append(token)
    assert outputs == {rid: ns["greedy_alone"](model, p, 3) for rid, p in prompts.items()}


def test_one_step_is_one_forward_pass_for_all_its_requests(ns, model, monkeypatch):
    calls = []
    real = ns["paged_attention"]

    def counted(q, k_cache, v_cache, meta):
        calls.append(meta.block_table.shape[0])
        return real(q, k_cache, v_cache, meta)

    monkeypatch.setitem(ns, "paged_attention", counted)
    engine = ns["LLMEngine"](
        model, num_blocks=64, block_size=BLOCK, max_num_batched_tokens=64, max_num_seqs=8
    )
    for i in range(5):
        engine.add_request(f"r{i}", [i + 1] * (3 + i), 3)
    engine.step()
    assert (
        calls == [5] * model.config.num_hidden_layers
    )  # each layer once, all five requests together


def test_a_pool_too_small_for_one_request_is_a_clear_error_and_nothing_is_submitted(ns, model):
    engine = ns["LLMEngine"](model, num_blocks=3, block_size=BLOCK)
    with pytest.raises(ValueError, match="整个池只有 3 个"):
        engine.add_request("big", list(range(12)), 2)  # 12 + 2 - 1 tokens need 4 blocks
    with pytest.raises(ValueError, match="整个池只有 3 个"):
        engine.generate([[1, 2], list(range(13))], 1)
    assert not engine.has_unfinished_requests()
    engine.add_request("fits", list(range(11)), 2)  # 12 tokens: exactly the pool
    while engine.has_unfinished_requests():
        engine.step()


def test_bad_requests_are_clear_errors(ns, model):
    engine = ns["LLMEngine"](model, num_blocks=8, block_size=BLOCK)
    with pytest.raises(ValueError, match="词表"):
        engine.add_request("oov", [1, VOCAB], 1)
    with pytest.raises(ValueError, match="max_tokens"):
        engine.add_request("zero", [1, 2], 0)
    engine.add_request("a", [1, 2], 1)
    with pytest.raises(ValueError, match="已经在引擎里"):
        engine.add_request("a", [3], 1)


def test_a_waiting_request_is_admitted_only_when_its_whole_sequence_fits(ns):
    """vLLM 0.33.0's scheduler_reserve_full_isl: the first chunk fitting is not enough."""
    manager = ns["KVCacheManager"](num_blocks=6, block_size=BLOCK)
    scheduler = ns["EngineScheduler"](manager, max_num_batched_tokens=4 * BLOCK, max_num_seqs=4)
    a = ns["Request"]("a", list(range(3 * BLOCK)), 1)  # 3 blocks
    b = ns["Request"]("b", list(range(50, 50 + 4 * BLOCK)), 1)  # 4 blocks; 3 are left
    scheduler.add_request(a)
    scheduler.add_request(b)
    first = scheduler.schedule()  # b's first chunk (1 block, the budget's last BLOCK tokens) fits
    assert dict(first.num_scheduled_tokens) == {"a": 3 * BLOCK}, "b's whole sequence does not fit"
    assert [r.request_id for r in scheduler.waiting] == ["b"] and manager.get_block_ids("b") == []
    assert not manager.full_sequence_fits(b, [])
    scheduler.update_from_output(first, {"a": 1})  # a finishes
    manager.free(a)
    second = scheduler.schedule()
    assert dict(second.num_scheduled_tokens) == {"b": 4 * BLOCK}


def test_a_second_block_with_the_same_content_is_registered_too_and_freed_as_cached(ns):
    """vLLM's BlockHashToBlockMap does not de-duplicate: both blocks are cached under one hash."""
    manager = ns["KVCacheManager"](num_blocks=6, block_size=BLOCK)
    prompt = list(range(BLOCK)) + [90]
    a, b = ns["Request"]("a", prompt, 1), ns["Request"]("b", list(prompt), 1)
    manager.allocate_slots(a, len(prompt))
    manager.allocate_slots(b, len(prompt))  # no lookup: b computes its own copy of the block
    first_a, first_b = manager.req_to_blocks["a"][0], manager.req_to_blocks["b"][0]
    assert first_a is not first_b and first_a.block_hash == first_b.block_hash is not None
    pool = manager.block_pool
    assert len(pool.cached_block_hash_to_block) == 2 and pool.get_cached_block(first_a.block_hash) is first_a
    manager.free(b)
    assert list(pool.free_block_queue)[-1] == first_b.block_id, "a cached block goes to the tail"
    pool.get_new_blocks(len(pool.free_block_queue))  # takes (evicts) b's copy; a's stays
    assert pool.get_cached_block(first_a.block_hash) is first_a and len(pool.cached_block_hash_to_block) == 1
    pool.check_integrity()


# --- the layout: given halves in locked base-class cells; a previous-layout notebook still grades ---

ENGINE_ANSWER_CELLS = ("engine_block_pool", "engine_kv_cache_manager", "engine_scheduler", "engine_attention", "engine_llm_engine")


def test_each_engine_todo_cell_holds_its_todo_method_and_little_else():
    """The given halves live in locked, folded cells (`#@title`) before each TODO cell."""
    cells = {nbgrader_meta(c).get("grade_id"): c for c in read_source().cells if c.cell_type == "code"}
    for grade_id in ENGINE_ANSWER_CELLS:
        code = strip_solution_markers(cells[grade_id].source)
        defined = [ln for ln in code.splitlines() if ln.lstrip().startswith("def ")]
        assert len(defined) == 1, f"{grade_id} defines {defined}"
    for given_id in ("engine_block_pool_given", "engine_kv_cache_manager_given", "engine_scheduler_given", "engine_llm_engine_given"):
        meta = nbgrader_meta(cells[given_id])
        assert meta["locked"] and not meta.get("solution") and cells[given_id].source.startswith("#@title ")


def test_a_notebook_handed_in_from_the_previous_layout_grades_in_full():
    """A learner who started from the release before the split hands in whole classes in the five
    answer cells and lacks the new given cells: the intake rebuilds the notebook on the release
    (the given cells come back, locked), the learner's whole classes override them, and every
    hidden check of every part passes."""
    import copy
    import io
    from contextlib import redirect_stdout

    import nbformat

    from grader.kit.authoring.nbsource import NOTEBOOK_NAME, REPO_ROOT
    from grader.kit.intake.normalize import normalize_submission
    from tests.fixtures.part5_previous_layout import PREVIOUS_ANSWER_CELLS
    from tests.test_checks import failures

    path = REPO_ROOT / "notebooks" / NOTEBOOK_NAME
    if not path.exists():
        pytest.skip("build the student notebook first (make notebooks)")
    release = nbformat.read(path, as_version=4)
    if "engine_block_pool_given" not in {nbgrader_meta(c).get("grade_id") for c in release.cells}:
        pytest.skip("notebooks/ was built from an older source: run make notebooks")
    answers = {
        nbgrader_meta(c)["grade_id"]: strip_solution_markers(c.source)
        for c in read_source().cells
        if nbgrader_meta(c).get("solution")
    }
    answers.update(PREVIOUS_ANSWER_CELLS)
    old = copy.deepcopy(release)
    new_cells = {"engine_attention_metadata"} | {g + "_given" for g in ENGINE_ANSWER_CELLS}
    old.cells = [c for c in old.cells if nbgrader_meta(c).get("grade_id") not in new_cells]
    for cell in old.cells:
        if nbgrader_meta(cell).get("solution"):
            cell.source = answers[nbgrader_meta(cell)["grade_id"]]
    graded = normalize_submission(nbformat.writes(old).encode(), release).notebook
    ids = [nbgrader_meta(c).get("grade_id") for c in graded.cells]
    assert "engine_block_pool_given" in ids and ids.index("engine_block_pool_given") < ids.index("engine_block_pool")
    learner = next(c for c in graded.cells if nbgrader_meta(c).get("grade_id") == "engine_block_pool")
    assert learner.source.startswith("class BlockPool:")  # the learner's whole class, kept
    namespace = {"__name__": "__main__"}
    for cell in graded.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or meta.get("grade") or "measurement" in cell.metadata.get("tags", []):
            continue
        code = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
        with redirect_stdout(io.StringIO()):
            exec(compile(code, meta.get("grade_id", "<cell>"), "exec"), namespace)
    assert failures(namespace) == {}
