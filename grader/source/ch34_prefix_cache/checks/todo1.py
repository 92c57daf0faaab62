"""TODO 1 的隐藏检查：_normalize 把 list / tuple / range 统一成内容相同的普通 list。

每个 check_todo1_* 是一个评分单元格（test_todo1_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现，不用 notebook 里定义的任何辅助函数。
"""

import random

TODO = "TODO 1"
UNDER_TEST = "_normalize"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {1: 3}  # the TODO's points, shared by its checks


@check(points=1, title="基本", says="随机 list 输入，内容、顺序与重复 token 都与参考实现相同")
def check_todo1_basic(ns):
    """Random lists: same tokens, same order, repeats kept."""
    manager = _probe(ns, block_size=3)
    rng = random.Random(3401)
    cases = [[5, 5, 1, 5], [3, 1, 2], [9, 0, 9, 0]]
    cases += [rng.choices(range(6), k=rng.randint(1, 12)) for _ in range(30)]
    for tokens in cases:
        shown = list(tokens)
        where = f"{TODO} · 基本: _normalize({shown!r})"
        got = _call(where, manager._normalize, shown)
        try:
            contents = list(got)
        except TypeError:
            contents = None
        assert contents == tokens, (
            f"{where} 应返回 {tokens!r}（保持顺序，重复的 token 也要保留），得到 {got!r}"
        )


@check(points=1, title="类型", says="tuple / range 输入也得到元素相同的普通 list")
def check_todo1_types(ns):
    """tuple and range become a plain list of int (the contents are check_todo1_basic's business)."""
    manager = _probe(ns, block_size=3)
    rng = random.Random(3411)
    cases = [(1, 2, 3), range(5), range(3, 12, 2), [4, 4, 2]]
    cases += [tuple(rng.choices(range(6), k=rng.randint(1, 12))) for _ in range(10)]
    results = []
    for tokens in cases:
        expected = list(tokens)
        where = f"{TODO} · 类型: _normalize({tokens!r})"
        got = _call(where, manager._normalize, tokens)
        assert type(got) is list, (
            f"{where} 应返回普通 list {expected!r}，得到 {type(got).__name__} {got!r}"
        )
        assert all(type(x) is int for x in got), f"{where} 的元素应是 int，和输入一样，得到 {got!r}"
        results.append(got)
    _varies(f"{TODO} · 类型: _normalize", results, [list(tokens) for tokens in cases])


@check(points=1, title="边界", says="空输入、单个 token；不修改传入的序列")
def check_todo1_edge(ns):
    """Empty inputs of every kind, one token; the caller's list is left as it was."""
    manager = _probe(ns, block_size=3)
    for tokens in ([], (), range(0), [7], (7,)):
        where = f"{TODO} · 边界: _normalize({tokens!r})"
        got = _call(where, manager._normalize, tokens)
        expected = list(tokens)
        assert type(got) is list and got == expected, (
            f"{where} 应返回 {expected!r}，得到 {type(got).__name__} {got!r}"
        )
    tokens = [1, 2, 3]
    where = f"{TODO} · 边界: _normalize({tokens!r})"
    got = _call(where, manager._normalize, tokens)
    assert tokens == [1, 2, 3], f"{where} 不应修改传入的序列，调用后它变成了 {tokens!r}"
