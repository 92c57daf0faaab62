"""TODO 6 的隐藏检查：chunked_prefill_plan 对整个 prompt 切块（与缓存是否命中无关）。

每个 check_todo6_* 是一个评分单元格（test_todo6_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：其余 TODO 的方法都用参考实现，只检查 TODO 6。
"""

import random

TODO = "TODO 6"
UNDER_TEST = "chunked_prefill_plan"  # the method this file grades; every other TODO's method is the oracle
TOTAL_POINTS = {6: 3}  # the TODO's points, shared by its checks


def _plan(manager, label, prompt, shown=None):
    shown = prompt if shown is None else shown
    cached = list(manager.cached_prefixes)
    where = f"{TODO} · {label}: block_size={manager.block_size}、缓存 {cached!r} 时 chunked_prefill_plan({shown!r})"
    got = _call(where, manager.chunked_prefill_plan, shown)
    expected = _chunks(prompt, manager.block_size)
    hint = "按 block_size 切整个 prompt，直接复用 self._chunk_tokens"
    if _as_chunks(got) == [tuple(prompt)] and len(expected) > 1:
        hint = "整个 prompt 被当成了一块：应按 block_size 切块，直接复用 self._chunk_tokens"
    elif cached and _as_chunks(got) == _chunks(
        prompt[_match(cached, prompt) :], manager.block_size
    ):
        hint = "这是 suffix 的分块：完整计划要覆盖整个 prompt，与缓存是否命中无关"
    return where, got, expected, hint


def _assert_plan(manager, label, prompt, shown=None):
    where, got, expected, hint = _plan(manager, label, prompt, shown)
    assert _as_chunks(got) == expected, f"{where} 应返回 {expected!r}，得到 {got!r}（{hint}）"


@check(points=1, title="基本", says="缓存为空时，随机 prompt 与多种 block_size 的完整分块计划")
def check_todo6_basic(ns):
    """An empty cache: random prompts and block sizes against the reference."""
    rng = random.Random(3406)
    for size in (1, 2, 3, 4, 6):
        manager = _probe(ns, block_size=size)
        for _ in range(10):
            _assert_plan(manager, "基本", rng.choices(range(7), k=rng.randint(0, 17)))


@check(points=1, title="整个 prompt", says="即使前缀命中，计划也覆盖整个 prompt")
def check_todo6_whole_prompt(ns):
    """With a cached prefix that hits, the plan still covers the whole prompt."""
    rng = random.Random(3416)
    for size in (1, 2, 3, 5):
        for _ in range(8):
            prompt = rng.choices(range(7), k=rng.randint(2, 17))
            cached = [prompt[: rng.randint(1, len(prompt))]]
            _assert_plan(_probe(ns, block_size=size, cached=cached), "整个 prompt", prompt)


@check(points=1, title="类型", says="返回 tuple 组成的 list；list / tuple / range 输入")
def check_todo6_types(ns):
    """A plain list of plain tuples; a tuple or range prompt plans as the same list would."""
    results, wanted = [], []
    for size, prompt, shown in ((2, [1, 2, 3], (1, 2, 3)), (3, list(range(7)), range(7))):
        manager = _probe(ns, block_size=size)
        where, as_list, expected, _ = _plan(manager, "类型", prompt)
        results.append(as_list)
        wanted.append(expected)
        for given in (prompt, shown):
            where, got, _, _ = _plan(manager, "类型", prompt, given)
            _assert_plan_types(where, got, prompt, as_list)
    _varies(f"{TODO} · 类型: chunked_prefill_plan", results, wanted)
