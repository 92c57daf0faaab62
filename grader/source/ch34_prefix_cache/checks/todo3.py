"""TODO 3 的隐藏检查：add_prefix 登记完整前缀和它的分块；重复登记什么也不做。

每个 check_todo3_* 是一个评分单元格（test_todo3_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 与 _chunk_tokens 用参考实现，只检查 TODO 3。
"""

import random

TODO = "TODO 3"
UNDER_TEST = "add_prefix"  # the method this file grades; every other TODO's method is the oracle
TOTAL_POINTS = {3: 3}  # the TODO's points, shared by its checks


def _entry_hint(entry, prefix, size):
    if all(not isinstance(x, (list, tuple)) for x in entry):
        return "chunked_prefixes 里应存分块结果 self._chunk_tokens(prefix)，得到的是逐个 token"
    if len(entry) == 1 and len(prefix) > size:
        return "整个前缀被当成了一块：应按 block_size 切块（self._chunk_tokens(prefix)）"
    return "应为 self._chunk_tokens(prefix)"


def _register(manager, label, tokens):
    where = f"{TODO} · {label}: block_size={manager.block_size} 时 add_prefix({tokens!r})"
    return where, _call(where, manager.add_prefix, tokens)


@check(points=1, title="基本", says="不同前缀依次登记：cached_prefixes 与 chunked_prefixes 一一对应")
def check_todo3_basic(ns):
    """Distinct prefixes: cached_prefixes holds each one, chunked_prefixes its chunks."""
    rng = random.Random(3403)
    for size in (1, 2, 3, 5):
        manager = _probe(ns, block_size=size)
        expected = []
        for _ in range(8):
            tokens = rng.choices(range(6), k=rng.randint(1, 11))
            if tuple(tokens) in expected:
                continue
            where, _ = _register(manager, "基本", tokens)
            expected.append(tuple(tokens))
            cached = [tuple(p) for p in manager.cached_prefixes]
            assert cached == expected, (
                f"{where} 后 cached_prefixes 应为 {expected!r}，得到 {manager.cached_prefixes!r}"
            )
            chunked = manager.chunked_prefixes
            assert len(chunked) == len(expected), (
                f"{where} 后 chunked_prefixes 应有 {len(expected)} 条（与 cached_prefixes 一一对应），得到 {len(chunked)} 条"
            )
            entry, want = chunked[-1], _chunks(tokens, size)
            try:
                contents = [tuple(chunk) for chunk in entry]
            except TypeError:
                contents = None
            assert contents == want, (
                f"{where} 后 chunked_prefixes[-1] 应为 {want!r}，得到 {entry!r}（{_entry_hint(entry, tokens, size)}）"
            )


@check(points=1, title="重复登记", says="同一前缀再登记（list / tuple / range）什么也不做")
def check_todo3_repeat(ns):
    """Registering a prefix again, as a list, tuple or range, adds nothing to either list."""
    rng = random.Random(3413)
    for size in (2, 3):
        manager = _probe(ns, block_size=size)
        stems = [list(range(4)), rng.choices(range(6), k=5), rng.choices(range(6), k=3)]
        for tokens in stems:
            where, _ = _register(manager, "重复登记", tokens)
        distinct = list(dict.fromkeys(tuple(s) for s in stems))
        assert [tuple(p) for p in manager.cached_prefixes] == distinct, (
            f"{where} 后 cached_prefixes 应为 {distinct!r}，得到 {manager.cached_prefixes!r}"
            "（这一格只在前缀真正登记进缓存时给分）"
        )
        before = _snapshot(manager)
        for tokens in (stems[0], tuple(stems[1]), range(4), stems[2], tuple(stems[0])):
            where, _ = _register(manager, "重复登记", tokens)
            after = _snapshot(manager)
            assert after == before, (
                f"{where}：这个前缀已经登记过，重复登记什么也不应做；cached_prefixes 应仍为 {before[0]!r}，"
                f"chunked_prefixes 应仍有 {len(before[1])} 条，得到 {after[0]!r} 与 {len(after[1])} 条"
            )


@check(points=1, title="类型", says="返回 None；前缀是 tuple，分块是 tuple 组成的 list")
def check_todo3_types(ns):
    """add_prefix returns None; a tuple per prefix, a list of tuples per chunked entry."""
    for tokens in ([1, 2, 3], (4, 5, 6, 7, 8), range(3)):
        manager = _probe(ns, block_size=2)
        where, got = _register(manager, "类型", tokens)
        assert got is None, f"{where} 不应返回值（应为 None），得到 {got!r}"
        cached = manager.cached_prefixes
        assert [type(p).__name__ for p in cached] == ["tuple"], (
            f"{where} 后 cached_prefixes 应为 [{tuple(tokens)!r}]（一个 tuple），得到 {cached!r}"
        )
        entries = manager.chunked_prefixes
        assert len(entries) == 1 and type(entries[0]) is list, (
            f"{where} 后 chunked_prefixes 应有一条 list，得到 {entries!r}"
        )
        kinds = [type(chunk).__name__ for chunk in entries[0]]
        assert kinds and all(kind == "tuple" for kind in kinds), (
            f"{where} 后 chunked_prefixes[0] 的每一块都应是 tuple，得到 {entries[0]!r}"
        )
