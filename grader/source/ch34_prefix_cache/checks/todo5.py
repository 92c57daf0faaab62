"""TODO 5 的隐藏检查：split_prompt 返回 (可复用前缀 list, 后缀 list, hit_len)。

每个 check_* 是一个评分单元格（test_todo5_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 与 match_prefix 用参考实现，只检查 TODO 5。
返回值可以是 tuple 或它的子类（例如 NamedTuple）。
"""

import builtins
import random

TODO = "TODO 5"
UNDER_TEST = "split_prompt"  # the method this file grades; every other TODO's method is the oracle


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


def _split(manager, label, prompt, shown=None):
    """Ask the learner's split_prompt; check its shape; return (where, got, expected)."""
    shown = prompt if shown is None else shown
    where = f"{TODO} · {label}: 缓存 {list(manager.cached_prefixes)!r} 时 split_prompt({shown!r})"
    got = _call(where, manager.split_prompt, shown)
    hit = _match(manager.cached_prefixes, prompt)
    expected = (list(prompt[:hit]), list(prompt[hit:]), hit)
    assert isinstance(got, tuple) and len(got) == 3, (
        f"{where} 应返回 3 元组 (prefix, suffix, hit_len)（tuple 或 NamedTuple 都可以），得到 {got!r}"
    )
    return where, got, expected


def _contents(part):
    try:
        return list(part)
    except TypeError:
        return None


def _check_contents(where, got, expected):
    prefix, suffix, hit = got
    assert (_contents(prefix), _contents(suffix), hit) == expected, (
        f"{where} 应返回 {expected!r}，得到 {got!r}"
        "（hit_len 之前是 prefix，之后是 suffix：两者拼起来等于原 prompt，一个 token 也不多不少）"
    )


def _random_manager(ns, rng):
    stem = rng.choices(range(5), k=rng.randint(1, 8))
    cached = [stem[: rng.randint(1, len(stem))] for _ in range(2)]
    return stem, _probe(ns, block_size=rng.randint(1, 4), cached=cached)


def check_basic(ns):
    """Random caches and list prompts: prefix, suffix and hit_len against the reference."""
    _guard()
    rng = random.Random(3405)
    for _ in range(40):
        stem, manager = _random_manager(ns, rng)
        for prompt in (stem + rng.choices(range(5), k=3), rng.choices(range(5), k=6)):
            _check_contents(*_split(manager, "基本", prompt))


def check_types(ns):
    """prefix and suffix are plain lists, hit_len an int, for list, tuple and range prompts."""
    _guard()
    rng = random.Random(3415)
    results, wanted = [], []
    for _ in range(15):
        stem, manager = _random_manager(ns, rng)
        manager.cached_prefixes.append((0, 1))
        for prompt, shown in ((stem + [4], tuple(stem + [4])), (list(range(4)), range(4))):
            for given in (prompt, shown):
                where, got, expected = _split(manager, "类型", prompt, given)
                kinds = tuple(type(x).__name__ for x in got)
                assert kinds == ("list", "list", "int"), (
                    f"{where} 应返回 (list, list, int)，得到 {' / '.join(kinds)} {got!r}"
                    "（请对 _normalize 之后的 prompt 切片，而不是原始的 prompt_tokens）"
                )
                results.append(got)
                wanted.append(expected)
    _varies(f"{TODO} · 类型: split_prompt", results, wanted)


def check_edge(ns):
    """Empty prompt, no hit (the whole prompt is the suffix), a full hit (the suffix is [])."""
    _guard()
    cases = [
        ([(1, 2)], []),  # 空 prompt
        ([(1, 2)], [3, 4, 5]),  # 没有命中
        ([(1, 2, 3)], [1, 2, 3]),  # 完整命中
        ([], [7, 8]),  # 缓存为空
    ]
    for cached, prompt in cases:
        _check_contents(*_split(_probe(ns, block_size=2, cached=cached), "边界", prompt))


def check_no_mutation(ns):
    """Splitting leaves the cache and the caller's prompt as they were."""
    _guard()
    rng = random.Random(3425)
    results, wanted = [], []
    for _ in range(15):
        stem, manager = _random_manager(ns, rng)
        before = _snapshot(manager)
        prompt = stem + [4, 4]
        shown = list(prompt)
        where, got, expected = _split(manager, "不修改", prompt, shown)
        results.append(got)
        wanted.append(expected)
        after = _snapshot(manager)
        assert after == before, f"{where} 是查询，不应修改缓存：之前 {before!r}，之后 {after!r}"
        assert shown == prompt, f"{where} 不应修改传入的 prompt，调用后它变成了 {shown!r}"
    _varies(f"{TODO} · 不修改: split_prompt", results, wanted)
