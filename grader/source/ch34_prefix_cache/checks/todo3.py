"""TODO 3 的隐藏检查：add_prefix 登记完整前缀和它的分块；重复登记什么也不做。

每个 check_* 是一个评分单元格（test_todo3_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 与 _chunk_tokens 用参考实现，只检查 TODO 3。
"""

import builtins
import random

TODO = "TODO 3"
UNDER_TEST = "add_prefix"  # the method this file grades; every other TODO's method is the oracle


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


def _entry_hint(entry, prefix, size):
    if all(not isinstance(x, (list, tuple)) for x in entry):
        return "chunked_prefixes 里应存分块结果 self._chunk_tokens(prefix)，得到的是逐个 token"
    if len(entry) == 1 and len(prefix) > size:
        return "整个前缀被当成了一块：应按 block_size 切块（self._chunk_tokens(prefix)）"
    return "应为 self._chunk_tokens(prefix)"


def _register(manager, label, tokens):
    where = f"{TODO} · {label}: block_size={manager.block_size} 时 add_prefix({tokens!r})"
    return where, _call(where, manager.add_prefix, tokens)


def check_basic(ns):
    """Distinct prefixes: cached_prefixes holds each one, chunked_prefixes its chunks."""
    _guard()
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


def check_repeat(ns):
    """Registering a prefix again, as a list, tuple or range, adds nothing to either list."""
    _guard()
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


def check_types(ns):
    """add_prefix returns None; a tuple per prefix, a list of tuples per chunked entry."""
    _guard()
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
