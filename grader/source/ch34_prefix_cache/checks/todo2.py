"""TODO 2 的隐藏检查：_chunk_tokens 先 normalize，再按 block_size 切成 tuple 块，尾块可以不满。

每个 check_todo2_* 是一个评分单元格（test_todo2_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 用参考实现，只检查 TODO 2。
"""

import random

TODO = "TODO 2"
UNDER_TEST = "_chunk_tokens"  # the method this file grades; every other TODO's method is the oracle
TOTAL_POINTS = {2: 4}  # the TODO's points, shared by its checks


def _hint(got, expected, tokens, size):
    """What the wrong chunks most likely come from."""
    contents = _as_chunks(got)
    tokens = list(tokens)
    if contents is None:
        return "应返回由 tuple 组成的 list"
    if contents == expected[:-1] and len(expected[-1]) < size:
        return "最后不足 block_size 的尾块丢了：它也要保留"
    if size != 4 and contents == _chunks(tokens, 4):
        return "每块都是 4 个 token：请使用 self.block_size，不要写死 4"
    if contents == [tuple(tokens[i : i + size - 1]) for i in range(0, len(tokens), size)]:
        return "每块少了一个 token：切片应为 tokens[i : i + self.block_size]"
    return "每块应有 self.block_size 个 token，按顺序排列"


def _check_cases(ns, label, cases):
    for size, tokens in cases:
        manager = _probe(ns, block_size=size) if size else _probe(ns)
        size = manager.block_size
        expected = _chunks(tokens, size)
        where = f"{TODO} · {label}: block_size={size} 时 _chunk_tokens({tokens!r})"
        got = _call(where, manager._chunk_tokens, tokens)
        assert _as_chunks(got) == expected, (
            f"{where} 应返回 {expected!r}，得到 {got!r}（{_hint(got, expected, tokens, size)}）"
        )


@check(points=1, title="基本", says="能整除时按 block_size 切块，多种 block_size（含默认的 4）")
def check_todo2_basic(ns):
    """Lengths that divide evenly into block_size chunks, several block sizes and the default."""
    rng = random.Random(3402)
    cases = [(None, list(range(8)))]  # the default block_size, 4
    for size in (1, 2, 3, 5, 7):
        cases += [(size, rng.choices(range(9), k=size * rng.randint(1, 4))) for _ in range(6)]
    _check_cases(ns, "基本", cases)


@check(points=1, title="尾块", says="长度不能整除、比一块还短时，不满的尾块也保留")
def check_todo2_tail(ns):
    """A last chunk shorter than block_size, and inputs shorter than one chunk."""
    rng = random.Random(3412)
    cases = [(None, list(range(9))), (3, [1, 2]), (5, [7]), (2, [1, 2, 3])]
    for size in (2, 3, 4, 5, 7):
        for _ in range(5):
            length = size * rng.randint(0, 3) + rng.randint(1, size - 1)
            cases.append((size, rng.choices(range(9), k=length)))
    _check_cases(ns, "尾块", cases)


@check(points=1, title="类型", says="返回 tuple 组成的 list；list / tuple / range 输入")
def check_todo2_types(ns):
    """A plain list of plain tuples, for list, tuple and range inputs."""
    cases = ((2, [1, 2, 3]), (3, (4, 5, 6, 7)), (2, range(5)), (4, range(3, 11)))
    results = []
    for size, tokens in cases:
        manager = _probe(ns, block_size=size)
        where = f"{TODO} · 类型: block_size={size} 时 _chunk_tokens({tokens!r})"
        got = _call(where, manager._chunk_tokens, tokens)
        assert type(got) is list, f"{where} 应返回 list，得到 {type(got).__name__} {got!r}"
        kinds = [type(chunk).__name__ for chunk in got]
        assert all(kind == "tuple" for kind in kinds), (
            f"{where} 的每一块都应是 tuple（块形成后不再修改，也可以做字典的键），得到 {got!r}"
        )
        results.append(got)
    _varies(f"{TODO} · 类型: _chunk_tokens", results, [_chunks(t, s) for s, t in cases])


@check(points=1, title="边界", says="空输入得到 []；不修改传入的序列")
def check_todo2_edge(ns):
    """Empty input of every kind gives []; the caller's list is left as it was."""
    for size in (1, 3, 4):
        manager = _probe(ns, block_size=size)
        for tokens in ([], (), range(0)):
            where = f"{TODO} · 边界: block_size={size} 时 _chunk_tokens({tokens!r})"
            got = _call(where, manager._chunk_tokens, tokens)
            assert type(got) is list and got == [], f"{where} 应返回 []，得到 {got!r}"
        full = list(range(2 * size))
        where = f"{TODO} · 边界: block_size={size} 时 _chunk_tokens({full!r})"
        _varies(where, [got, _call(where, manager._chunk_tokens, full)], [[], _chunks(full, size)])
    tokens = [1, 2, 3, 4, 5]
    where = f"{TODO} · 边界: _chunk_tokens({tokens!r})"
    _call(where, _probe(ns, block_size=2)._chunk_tokens, tokens)
    assert tokens == [1, 2, 3, 4, 5], f"{where} 不应修改传入的序列，调用后它变成了 {tokens!r}"
