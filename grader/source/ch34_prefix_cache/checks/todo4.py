"""TODO 4 的隐藏检查：match_prefix 只接受从 prompt 开头起连续的命中，并取最长的那个。

每个 check_* 是一个评分单元格（test_todo4_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 用参考实现，缓存直接写入，只检查 TODO 4。
"""

import builtins
import random

TODO = "TODO 4"
UNDER_TEST = "match_prefix"  # the method this file grades; every other TODO's method is the oracle


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


def _hint(prefixes, prompt, got):
    """Why `got` is not the longest hit from the start of `prompt`."""
    prompt = list(prompt)
    expected = _match(prefixes, prompt)
    if got == 0 and expected > 0:
        return (
            "cached_prefixes 里存的是 tuple，prompt 是 list，而 [1, 2] == (1, 2) 为 False："
            "比较前先把 cached_prefix 转成 list"
        )
    if type(got) is int and got > expected:
        for p in prefixes:
            if len(p) != got:
                continue
            inside = any(
                prompt[i : i + len(p)] == list(p) for i in range(1, len(prompt) - len(p) + 1)
            )
            if inside:
                return f"缓存前缀 {p!r} 出现在 prompt 中间，不算命中：只能从 prompt 开头连续匹配"
            return f"缓存前缀 {p!r} 并没有整个出现在 prompt 开头：整个前缀都要与 prompt 开头相同"
    if type(got) is int and 0 < got < expected:
        return "有更长的缓存前缀也命中了：要取最长的那个"
    return "只能从 prompt 开头连续匹配，且要取最长"


def _ask(manager, label, prompt, shown=None, check=True):
    shown = prompt if shown is None else shown
    prefixes = list(manager.cached_prefixes)
    where = f"{TODO} · {label}: 缓存 {prefixes!r} 时 match_prefix({shown!r})"
    got = _call(where, manager.match_prefix, shown)
    expected = _match(prefixes, prompt)
    assert not check or (type(got) is int and got == expected), (
        f"{where} 应返回 {expected}，得到 {got!r}（{_hint(prefixes, prompt, got)}）"
    )
    return where, got


def _random_cache(rng):
    stems = [rng.choices(range(4), k=rng.randint(1, 8)) for _ in range(3)]
    prefixes = []
    for _ in range(rng.randint(1, 5)):
        key = tuple(rng.choice(stems)[: rng.randint(1, 8)])
        if key not in prefixes:
            prefixes.append(key)
    return prefixes


def check_basic(ns):
    """Random caches and list prompts against the reference: the longest hit from the start."""
    _guard()
    rng = random.Random(3404)
    for _ in range(60):
        prefixes = _random_cache(rng)
        manager = _probe(ns, block_size=rng.randint(1, 4), cached=prefixes)
        stem = list(rng.choice(prefixes))
        prompts = [
            stem + rng.choices(range(4), k=rng.randint(1, 5)),
            rng.choices(range(4), k=rng.randint(1, 10)),
            [9] + stem,
        ]
        for prompt in prompts:
            _ask(manager, "基本", prompt)


def check_edge(ns):
    """Empty prompt, empty cache, a prompt equal to or shorter than a prefix, a hit mid-prompt."""
    _guard()
    cases = [
        ([(1, 2, 3)], []),  # 空 prompt
        ([], [1, 2, 3]),  # 缓存为空
        ([(1, 2, 3)], [1, 2, 3]),  # 与缓存前缀完全相同
        ([(1, 2, 3)], [1, 2]),  # 比缓存前缀短
        ([(1, 2)], [0, 1, 2, 5]),  # 缓存前缀出现在中间
        ([(1, 2), (1, 2, 3, 4)], [1, 2, 3, 4]),  # 两个都命中，取最长
        ([(5,), (5, 6, 7)], [5, 6, 0]),  # 长的没有命中，短的命中
    ]
    for prefixes, prompt in cases:
        _ask(_probe(ns, block_size=2, cached=prefixes), "边界", prompt)


def check_types(ns):
    """A plain int; a tuple or range prompt gives what the same list gives (right or wrong)."""
    _guard()
    rng = random.Random(3414)
    results, expected = [], []
    for _ in range(20):
        prefixes = _random_cache(rng) + [(0, 1, 2)]
        manager = _probe(ns, block_size=3, cached=prefixes)
        stem = list(rng.choice(prefixes))
        for prompt in (stem + [3], list(range(5)), stem):
            _, as_list = _ask(manager, "类型", prompt, check=False)
            for shown in (prompt, tuple(prompt), range(5) if prompt == list(range(5)) else prompt):
                where, got = _ask(manager, "类型", prompt, shown, check=False)
                assert type(got) is int, f"{where} 应返回 int，得到 {type(got).__name__} {got!r}"
                assert got == as_list, (
                    f"{where} 应与 list 输入 {prompt!r} 的结果 {as_list!r} 相同，得到 {got!r}"
                    "（先用 _normalize 统一输入类型）"
                )
            results.append(as_list)
            expected.append(_match(prefixes, prompt))
    _varies(f"{TODO} · 类型: match_prefix", results, expected)


def check_no_mutation(ns):
    """Queries leave the cache and the prompt as they were."""
    _guard()
    rng = random.Random(3424)
    results, expected = [], []
    for _ in range(20):
        prefixes = _random_cache(rng)
        manager = _probe(ns, block_size=2, cached=prefixes)
        before = _snapshot(manager)
        prompt = list(rng.choice(prefixes)) + [3, 2]
        shown = list(prompt)
        where = f"{TODO} · 不修改: 缓存 {prefixes!r} 时 match_prefix({prompt!r})"
        results.append(_call(where, manager.match_prefix, shown))
        expected.append(_match(prefixes, prompt))
        after = _snapshot(manager)
        assert after == before, f"{where} 是查询，不应修改缓存：之前 {before!r}，之后 {after!r}"
        assert shown == prompt, f"{where} 不应修改传入的 prompt，调用后它变成了 {shown!r}"
    _varies(f"{TODO} · 不修改: match_prefix", results, expected)
