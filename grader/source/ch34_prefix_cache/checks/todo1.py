"""TODO 1 的隐藏检查：_normalize 把 list / tuple / range 统一成内容相同的普通 list。

每个 check_* 是一个评分单元格（test_todo1_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现，不用 notebook 里定义的任何辅助函数。
"""

import builtins
import random

TODO = "TODO 1"


def _guard():
    for name in ("type", "len", "list", "tuple", "range", "repr", "isinstance", "zip", "all"):
        kind = type(getattr(builtins, name)).__name__
        assert kind in ("builtin_function_or_method", "type"), (
            f"{TODO}：内置函数 {name} 被替换，本格无法评分"
        )


def _manager(ns, block_size=3):
    cls = ns.get("PrefixCacheManager")
    assert isinstance(cls, type), f"{TODO}：找不到 PrefixCacheManager 类，请先运行定义它的单元格"
    return cls(block_size=block_size)


def _call(where, method, *args):
    """Call the learner's method; an exception becomes a message naming the TODO and the input."""
    try:
        return method(*args)
    except NotImplementedError:
        raise NotImplementedError(
            f"{where}：请先完成 {TODO}（仍在 raise NotImplementedError）"
        ) from None
    except Exception as error:
        raise AssertionError(f"{where} 抛出 {type(error).__name__}: {error}") from None


def _plain(value):
    """A comparable copy that no __eq__ can fool: exact list / tuple (or subclass) / scalars."""
    if type(value) is list:
        return ("list", tuple(_plain(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_plain(v) for v in value))
    if type(value) is dict:
        return ("dict", tuple(sorted((repr(k), _plain(v)) for k, v in value.items())))
    if type(value) in (int, float, str, bool, type(None)):
        return (type(value).__name__, value)
    return ("other", id(value))


def _varies(where, results, expected):
    """A property check (types, no mutation, an edge case) pays only for code that computes:
    some answer must be right, and where the right answers differ, the answers must too."""
    results, expected = [_plain(r) for r in results], [_plain(e) for e in expected]
    if not any(r == e for r, e in zip(results, expected)):
        raise AssertionError(
            f"{where}：这些输入没有一个得到正确结果，这一格只在方法至少算对一部分输入时给分"
        )
    if len(set(expected)) > 1 and len(set(results)) == 1:
        raise AssertionError(
            f"{where}：这几个输入应得到不同的结果，却都返回同一个值："
            "这一格只在方法真正按输入计算时给分"
        )


def check_basic(ns):
    """Random lists: same tokens, same order, repeats kept."""
    _guard()
    manager = _manager(ns)
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


def check_types(ns):
    """tuple and range become a plain list of int (the contents are check_basic's business)."""
    _guard()
    manager = _manager(ns)
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


def check_edge(ns):
    """Empty inputs of every kind, one token; the caller's list is left as it was."""
    _guard()
    manager = _manager(ns)
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
