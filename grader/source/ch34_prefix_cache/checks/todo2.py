"""TODO 2 的隐藏检查：_chunk_tokens 先 normalize，再按 block_size 切成 tuple 块，尾块可以不满。

每个 check_* 是一个评分单元格（test_todo2_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 用参考实现，只检查 TODO 2。
"""

import builtins
import random

TODO = "TODO 2"
UNDER_TEST = "_chunk_tokens"  # the method this file grades; every other TODO's method is the oracle


def _guard():
    for name in ("type", "len", "list", "tuple", "range", "repr", "isinstance", "zip", "all"):
        kind = type(getattr(builtins, name)).__name__
        assert kind in ("builtin_function_or_method", "type"), (
            f"{TODO}：内置函数 {name} 被替换，本格无法评分"
        )


def _chunks(tokens, size):
    tokens = list(tokens)
    return [tuple(tokens[i : i + size]) for i in range(0, len(tokens), size)]


def _match(prefixes, prompt):
    prompt = list(prompt)
    hits = [len(p) for p in prefixes if len(p) <= len(prompt) and list(p) == prompt[: len(p)]]
    return max(hits, default=0)


def _oracle_methods():
    """The reference of every TODO method; each works from the cache alone, never via self."""

    def _normalize(self, tokens):
        return list(tokens)

    def _chunk_tokens(self, tokens):
        return _chunks(tokens, self.block_size)

    def add_prefix(self, prefix_tokens):
        prefix = tuple(prefix_tokens)
        if prefix not in self.cached_prefixes:
            self.cached_prefixes.append(prefix)
            self.chunked_prefixes.append(_chunks(prefix, self.block_size))

    def match_prefix(self, prompt_tokens):
        return _match(self.cached_prefixes, prompt_tokens)

    def split_prompt(self, prompt_tokens):
        prompt = list(prompt_tokens)
        hit = _match(self.cached_prefixes, prompt)
        return prompt[:hit], prompt[hit:], hit

    def chunked_prefill_plan(self, prompt_tokens):
        return _chunks(prompt_tokens, self.block_size)

    def cache_stats(self, prompt_tokens):
        prompt = list(prompt_tokens)
        hit = _match(self.cached_prefixes, prompt)
        ratio = round(hit / len(prompt), 4) if prompt else 0.0
        return {"hit_tokens": hit, "uncached_tokens": len(prompt) - hit, "reuse_ratio": ratio}

    def chunked_suffix_prefill_plan(self, prompt_tokens):
        prompt = list(prompt_tokens)
        return _chunks(prompt[_match(self.cached_prefixes, prompt) :], self.block_size)

    return dict(locals())


def _probe(ns, block_size=4, cached=()):
    """The learner's class, every other TODO's method replaced by the oracle, cache filled."""
    cls = ns.get("PrefixCacheManager")
    assert isinstance(cls, type), f"{TODO}：找不到 PrefixCacheManager 类，请先运行定义它的单元格"
    methods = {name: f for name, f in _oracle_methods().items() if name != UNDER_TEST}
    manager = type("Probe", (cls,), methods)(block_size=block_size)
    manager.cached_prefixes = [tuple(p) for p in cached]
    manager.chunked_prefixes = [_chunks(p, block_size) for p in cached]
    return manager


def _call(where, method, *args):
    """Call the learner's method; an exception becomes a message naming the TODO and the input."""
    try:
        return method(*args)
    except NotImplementedError:
        raise NotImplementedError(
            f"{where}：请先完成 {TODO}（{UNDER_TEST} 里仍是 raise NotImplementedError）"
        ) from None
    except Exception as error:
        raise AssertionError(f"{where} 抛出 {type(error).__name__}: {error}") from None


def _snapshot(manager):
    """A copy of the cache to compare before and after a call (whatever the learner stored)."""

    def frozen(value):
        try:
            return (
                tuple(frozen(item) for item in value)
                if not isinstance(value, (int, str, bytes))
                else value
            )
        except TypeError:
            return value

    return frozen(manager.cached_prefixes), frozen(manager.chunked_prefixes)


def _as_chunks(got):
    """The contents of a list of chunks as tuples, or None when it is not one."""
    if type(got) not in (list, tuple):
        return None
    try:
        return [tuple(chunk) for chunk in got]
    except TypeError:
        return None


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


def check_basic(ns):
    """Lengths that divide evenly into block_size chunks, several block sizes and the default."""
    _guard()
    rng = random.Random(3402)
    cases = [(None, list(range(8)))]  # the default block_size, 4
    for size in (1, 2, 3, 5, 7):
        cases += [(size, rng.choices(range(9), k=size * rng.randint(1, 4))) for _ in range(6)]
    _check_cases(ns, "基本", cases)


def check_tail(ns):
    """A last chunk shorter than block_size, and inputs shorter than one chunk."""
    _guard()
    rng = random.Random(3412)
    cases = [(None, list(range(9))), (3, [1, 2]), (5, [7]), (2, [1, 2, 3])]
    for size in (2, 3, 4, 5, 7):
        for _ in range(5):
            length = size * rng.randint(0, 3) + rng.randint(1, size - 1)
            cases.append((size, rng.choices(range(9), k=length)))
    _check_cases(ns, "尾块", cases)


def check_types(ns):
    """A plain list of plain tuples, for list, tuple and range inputs."""
    _guard()
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


def check_edge(ns):
    """Empty input of every kind gives []; the caller's list is left as it was."""
    _guard()
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
