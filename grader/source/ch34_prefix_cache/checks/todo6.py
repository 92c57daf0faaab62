"""TODO 6 的隐藏检查：chunked_prefill_plan 对整个 prompt 切块（与缓存是否命中无关）。

每个 check_* 是一个评分单元格（test_todo6_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：其余 TODO 的方法都用参考实现，只检查 TODO 6。
"""

import builtins
import random

TODO = "TODO 6"
UNDER_TEST = (
    "chunked_prefill_plan"  # the method this file grades; every other TODO's method is the oracle
)


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


def check_basic(ns):
    """An empty cache: random prompts and block sizes against the reference."""
    _guard()
    rng = random.Random(3406)
    for size in (1, 2, 3, 4, 6):
        manager = _probe(ns, block_size=size)
        for _ in range(10):
            _assert_plan(manager, "基本", rng.choices(range(7), k=rng.randint(0, 17)))


def check_whole_prompt(ns):
    """With a cached prefix that hits, the plan still covers the whole prompt."""
    _guard()
    rng = random.Random(3416)
    for size in (1, 2, 3, 5):
        for _ in range(8):
            prompt = rng.choices(range(7), k=rng.randint(2, 17))
            cached = [prompt[: rng.randint(1, len(prompt))]]
            _assert_plan(_probe(ns, block_size=size, cached=cached), "整个 prompt", prompt)


def check_types(ns):
    """A plain list of plain tuples; a tuple or range prompt plans as the same list would."""
    _guard()
    results, wanted = [], []
    for size, prompt, shown in ((2, [1, 2, 3], (1, 2, 3)), (3, list(range(7)), range(7))):
        manager = _probe(ns, block_size=size)
        where, as_list, expected, _ = _plan(manager, "类型", prompt)
        results.append(as_list)
        wanted.append(expected)
        for given in (prompt, shown):
            where, got, _, _ = _plan(manager, "类型", prompt, given)
            kinds = [type(chunk).__name__ for chunk in got]
            assert type(got) is list and all(kind == "tuple" for kind in kinds), (
                f"{where} 应返回由 tuple 组成的 list，得到 {type(got).__name__} {got!r}"
            )
            assert got == as_list, (
                f"{where} 应与 list 输入 {prompt!r} 的结果 {as_list!r} 相同，得到 {got!r}"
            )
    _varies(f"{TODO} · 类型: chunked_prefill_plan", results, wanted)
