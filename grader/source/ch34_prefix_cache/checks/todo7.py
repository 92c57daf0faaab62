"""TODO 7 的隐藏检查：cache_stats 返回 hit_tokens、uncached_tokens（int）和 reuse_ratio（float）。

每个 check_* 是一个评分单元格（test_todo7_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：其余 TODO 的方法（包括 match_prefix 和 split_prompt）
都用参考实现，只检查 TODO 7。
"""

import builtins
import random

TODO = "TODO 7"
UNDER_TEST = "cache_stats"  # the method this file grades; every other TODO's method is the oracle


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


KEYS = ["hit_tokens", "reuse_ratio", "uncached_tokens"]


def _stats(manager, label, prompt, shown=None):
    shown = prompt if shown is None else shown
    where = f"{TODO} · {label}: 缓存 {list(manager.cached_prefixes)!r} 时 cache_stats({shown!r})"
    got = _call(where, manager.cache_stats, shown)
    assert type(got) is dict, f"{where} 应返回 dict，得到 {type(got).__name__} {got!r}"
    assert sorted(got) == KEYS, (
        f"{where} 的键应恰好是 hit_tokens、uncached_tokens、reuse_ratio，得到 {sorted(got)!r}"
    )
    return where, got


def _random_cases(rng, count):
    for _ in range(count):
        stem = rng.choices(range(4), k=rng.randint(1, 12))
        cached = [stem[: rng.randint(1, len(stem))] for _ in range(rng.randint(1, 3))]
        tail = rng.choices(range(4), k=rng.randint(1, 9))
        for prompt in (stem, stem + tail, rng.choices(range(4), k=rng.randint(1, 7))):
            yield cached, prompt


def check_basic(ns):
    """Non-empty prompts: hit_tokens and uncached_tokens, plain ints, against the reference."""
    _guard()
    rng = random.Random(3407)
    for cached, prompt in _random_cases(rng, 40):
        manager = _probe(ns, block_size=2, cached=cached)
        for shown in (prompt, tuple(prompt)):
            where, got = _stats(manager, "基本", prompt, shown)
            hit = _match(cached, prompt)
            for key, want in (("hit_tokens", hit), ("uncached_tokens", len(prompt) - hit)):
                value = got[key]
                assert type(value) is int and value == want, (
                    f"{where} 的 {key} 应为 int {want}，得到 {type(value).__name__} {value!r}"
                )


def _ratio_hint(value, hit, length):
    if type(value) is not float:
        return "reuse_ratio 应是 float：用 / 而不是 //"
    if length and abs(value - 100 * hit / length) <= 0.01 and hit:
        return "reuse_ratio 是 0 到 1 之间的比例，不是百分比"
    if length and abs(value - (length - hit) / length) <= 5e-5:
        return "reuse_ratio = 命中的 token 数 / prompt 长度，不是未命中的"
    if length and value == hit / length:
        return "比例对了，但没有保留 4 位小数：用 round(hit_tokens / len(prompt), 4)"
    return "reuse_ratio = hit_tokens / len(prompt)，保留 4 位小数"


def check_ratio(ns):
    """Non-empty prompts: reuse_ratio is a float, round(hit_tokens / len(prompt), 4), as the text says."""
    _guard()
    rng = random.Random(3417)
    for cached, prompt in _random_cases(rng, 40):
        where, got = _stats(_probe(ns, block_size=2, cached=cached), "比例", prompt)
        hit = _match(cached, prompt)
        value, want = got["reuse_ratio"], round(hit / len(prompt), 4)
        assert type(value) is float and abs(value - want) <= 1e-12, (
            f"{where} 的 reuse_ratio 应为 float {want}（保留 4 位小数），得到 {type(value).__name__} {value!r}"
            f"（{_ratio_hint(value, hit, len(prompt))}）"
        )


def check_empty(ns):
    """An empty prompt: 0, 0 and 0.0 (a float), without dividing by zero."""
    _guard()
    want = {"hit_tokens": 0, "uncached_tokens": 0, "reuse_ratio": 0.0}
    for cached in ([], [(1, 2)]):
        for shown in ([], (), range(0)):
            where, got = _stats(_probe(ns, block_size=2, cached=cached), "空 prompt", [], shown)
            kinds = {key: type(value).__name__ for key, value in got.items()}
            assert got == want and kinds["reuse_ratio"] == "float", (
                f"{where} 应返回 {want!r}（reuse_ratio 是 float 0.0，不是 int 0），"
                f"得到 {got!r}（类型 {kinds!r}）"
            )
            assert kinds["hit_tokens"] == kinds["uncached_tokens"] == "int", (
                f"{where} 的 hit_tokens、uncached_tokens 应为 int，得到 {kinds!r}"
            )
    where, got = _stats(_probe(ns, block_size=2, cached=[(1, 2)]), "空 prompt", [1, 2, 3])
    _varies(where, [got["hit_tokens"]], [2])


def check_no_mutation(ns):
    """Statistics leave the cache and the caller's prompt as they were."""
    _guard()
    rng = random.Random(3427)
    results, wanted = [], []
    for cached, prompt in _random_cases(rng, 10):
        manager = _probe(ns, block_size=2, cached=cached)
        before = _snapshot(manager)
        shown = list(prompt)
        where, got = _stats(manager, "不修改", prompt, shown)
        results.append(got["hit_tokens"])
        wanted.append(_match(cached, prompt))
        after = _snapshot(manager)
        assert after == before, f"{where} 是统计，不应修改缓存：之前 {before!r}，之后 {after!r}"
        assert shown == prompt, f"{where} 不应修改传入的 prompt，调用后它变成了 {shown!r}"
    _varies(f"{TODO} · 不修改: cache_stats", results, wanted)
