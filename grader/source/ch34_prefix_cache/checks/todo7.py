"""TODO 7 的隐藏检查：cache_stats 返回 hit_tokens、uncached_tokens（int）和 reuse_ratio（float）。

每个 check_todo7_* 是一个评分单元格（test_todo7_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：其余 TODO 的方法（包括 match_prefix 和 split_prompt）
都用参考实现，只检查 TODO 7。
"""

import random

TODO = "TODO 7"
UNDER_TEST = "cache_stats"  # the method this file grades; every other TODO's method is the oracle
TOTAL_POINTS = {7: 5}  # the TODO's points, shared by its checks


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


@check(points=2, title="基本", says="hit_tokens 与 uncached_tokens（int）与参考实现相同")
def check_todo7_basic(ns):
    """Non-empty prompts: hit_tokens and uncached_tokens, plain ints, against the reference."""
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


@check(points=1, title="比例", says="reuse_ratio 是 float，等于 hit_tokens / len(prompt)（4 位小数）")
def check_todo7_ratio(ns):
    """Non-empty prompts: reuse_ratio is a float, round(hit_tokens / len(prompt), 4), as the text says."""
    rng = random.Random(3417)
    for cached, prompt in _random_cases(rng, 40):
        where, got = _stats(_probe(ns, block_size=2, cached=cached), "比例", prompt)
        hit = _match(cached, prompt)
        value, want = got["reuse_ratio"], round(hit / len(prompt), 4)
        assert type(value) is float and abs(value - want) <= 1e-12, (
            f"{where} 的 reuse_ratio 应为 float {want}（保留 4 位小数），得到 {type(value).__name__} {value!r}"
            f"（{_ratio_hint(value, hit, len(prompt))}）"
        )


@check(points=1, title="空 prompt", says="返回 0、0 与 float 0.0，不除以零")
def check_todo7_empty(ns):
    """An empty prompt: 0, 0 and 0.0 (a float), without dividing by zero."""
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


@check(points=1, title="不修改", says="统计不改动缓存和传入的 prompt")
def check_todo7_no_mutation(ns):
    """Statistics leave the cache and the caller's prompt as they were."""
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
