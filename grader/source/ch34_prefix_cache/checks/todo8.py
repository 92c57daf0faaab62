"""TODO 8 的隐藏检查：chunked_suffix_prefill_plan 只对未命中的 suffix 切块；完整命中时为 []。

每个 check_todo8_* 是一个评分单元格（test_todo8_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：其余 TODO 的方法（包括 split_prompt）都用参考实现，只检查 TODO 8。
"""

import random

TODO = "TODO 8"
UNDER_TEST = "chunked_suffix_prefill_plan"  # the method this file grades; every other TODO's method is the oracle
TOTAL_POINTS = {8: 5}  # the TODO's points, shared by its checks


def _plan(manager, label, prompt, shown=None):
    shown = prompt if shown is None else shown
    cached = list(manager.cached_prefixes)
    size = manager.block_size
    where = f"{TODO} · {label}: block_size={size}、缓存 {cached!r} 时 chunked_suffix_prefill_plan({shown!r})"
    got = _call(where, manager.chunked_suffix_prefill_plan, shown)
    hit = _match(cached, prompt)
    expected = _chunks(prompt[hit:], size)
    hint = "只对 split_prompt 给出的 suffix 调用 self._chunk_tokens"
    contents = _as_chunks(got)
    if contents == _chunks(prompt, size) and hit:
        hint = "这是整个 prompt 的分块：命中的前缀不应再进入计划，只切 suffix"
    elif contents == _chunks(prompt[:hit], size) and contents != expected:
        hint = (
            "这是命中前缀的分块：split_prompt 返回 (prefix, suffix, hit_len)，要切的是第二项 suffix"
        )
    message = f"{where} 应返回 {expected!r}（suffix {list(prompt[hit:])!r} 的分块），得到 {got!r}（{hint}）"
    return where, got, contents == expected, message


def _assert_plan(manager, label, prompt, shown=None):
    _, _, right, message = _plan(manager, label, prompt, shown)
    assert right, message


@check(points=1, title="基本", says="部分命中时只切 suffix，随机 prompt 与多种 block_size")
def check_todo8_basic(ns):
    """A partial hit: the suffix's chunks, random prompts and block sizes."""
    rng = random.Random(3408)
    for size in (1, 2, 3, 5):
        for _ in range(12):
            stem = rng.choices(range(5), k=rng.randint(1, 10))
            cached = [stem[: rng.randint(1, len(stem))]]
            prompt = stem + rng.choices(range(5), k=rng.randint(1, 11))
            _assert_plan(_probe(ns, block_size=size, cached=cached), "基本", prompt)


@check(points=1, title="完整命中", says="整个 prompt 都已缓存时计划为 []")
def check_todo8_full_hit(ns):
    """A prompt that is wholly cached leaves nothing to compute: the plan is []."""
    rng = random.Random(3418)
    for size in (1, 2, 4):
        for _ in range(6):
            prompt = rng.choices(range(5), k=rng.randint(1, 9))
            cached = [prompt[: rng.randint(1, len(prompt))], prompt]
            manager = _probe(ns, block_size=size, cached=cached)
            _assert_plan(manager, "完整命中", prompt)
            longer = prompt + [4, 3]
            where, got, _, _ = _plan(manager, "完整命中", longer)
            _varies(where, [got], [_chunks([4, 3], size)])


@check(points=1, title="没有命中", says="没有命中时整个 prompt 都是 suffix；空 prompt 得到 []")
def check_todo8_no_hit(ns):
    """Nothing cached matches: the whole prompt is the suffix; an empty prompt plans []."""
    rng = random.Random(3428)
    for size in (1, 2, 3):
        for _ in range(6):
            prompt = rng.choices(range(5), k=rng.randint(0, 9))
            cached = [[9] + prompt[:2], [8]]
            _assert_plan(_probe(ns, block_size=size, cached=cached), "没有命中", prompt)


@check(points=1, title="类型", says="返回 tuple 组成的 list；list / tuple / range 输入")
def check_todo8_types(ns):
    """A plain list of plain tuples; a tuple or range prompt plans as the same list would."""
    results, wanted = [], []
    for size, prompt, shown in (
        (2, [1, 2, 3, 4, 5], (1, 2, 3, 4, 5)),
        (2, list(range(7)), range(7)),
    ):
        manager = _probe(ns, block_size=size, cached=[(1, 2), (0,)])
        _, as_list, _, _ = _plan(manager, "类型", prompt)
        results.append(as_list)
        wanted.append(_chunks(prompt[_match(manager.cached_prefixes, prompt) :], size))
        for given in (prompt, shown):
            where, got, _, _ = _plan(manager, "类型", prompt, given)
            _assert_plan_types(where, got, prompt, as_list)
    _varies(f"{TODO} · 类型: chunked_suffix_prefill_plan", results, wanted)


@check(points=1, title="不修改", says="生成计划不改动缓存和传入的 prompt")
def check_todo8_no_mutation(ns):
    """Planning leaves the cache and the caller's prompt as they were."""
    rng = random.Random(3438)
    results, wanted = [], []
    for _ in range(10):
        stem = rng.choices(range(5), k=rng.randint(1, 8))
        manager = _probe(ns, block_size=2, cached=[stem[:2], stem])
        before = _snapshot(manager)
        prompt = stem[: rng.randint(0, len(stem))] + rng.choices(range(5), k=rng.randint(1, 4))
        shown = list(prompt)
        where, got, _, _ = _plan(manager, "不修改", prompt, shown)
        results.append(got)
        wanted.append(_chunks(prompt[_match(manager.cached_prefixes, prompt) :], 2))
        after = _snapshot(manager)
        assert after == before, f"{where} 不应修改缓存：之前 {before!r}，之后 {after!r}"
        assert shown == prompt, f"{where} 不应修改传入的 prompt，调用后它变成了 {shown!r}"
    _varies(f"{TODO} · 不修改: chunked_suffix_prefill_plan", results, wanted)
