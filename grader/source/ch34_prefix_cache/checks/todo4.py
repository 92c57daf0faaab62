"""TODO 4 的隐藏检查：match_prefix 只接受从 prompt 开头起连续的命中，并取最长的那个。

每个 check_todo4_* 是一个评分单元格（test_todo4_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 用参考实现，缓存直接写入，只检查 TODO 4。
"""

import random

TODO = "TODO 4"
UNDER_TEST = "match_prefix"  # the method this file grades; every other TODO's method is the oracle
TOTAL_POINTS = {4: 5}  # the TODO's points, shared by its checks


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
            if str(prompt).startswith(str(list(p))[:-1]) or "".join(map(str, prompt)).startswith("".join(map(str, p))):
                return f"prompt 开头的 token 是 {prompt[: len(p)]!r}，不是 {list(p)!r}：要逐个 token 比较，不要比较拼起来的字符串"
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


@check(points=2, title="基本", says="随机缓存与 prompt：从开头连续匹配的最长命中")
def check_todo4_basic(ns):
    """Random caches and list prompts against the reference: the longest hit from the start."""
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


@check(points=1, title="边界", says="空 prompt、空缓存、与前缀相同或更短的 prompt、出现在中间的前缀、多位数的 token")
def check_todo4_edge(ns):
    """Empty prompt, empty cache, a prompt equal to or shorter than a prefix, a hit mid-prompt,
    multi-digit tokens (a comparison of joined strings or reprs takes [12] or [1, 23] for (1, 2))."""
    cases = [
        ([(1, 2, 3)], []),  # 空 prompt
        ([], [1, 2, 3]),  # 缓存为空
        ([(1, 2, 3)], [1, 2, 3]),  # 与缓存前缀完全相同
        ([(1, 2, 3)], [1, 2]),  # 比缓存前缀短
        ([(1, 2)], [0, 1, 2, 5]),  # 缓存前缀出现在中间
        ([(1, 2), (1, 2, 3, 4)], [1, 2, 3, 4]),  # 两个都命中，取最长
        ([(5,), (5, 6, 7)], [5, 6, 0]),  # 长的没有命中，短的命中
        ([(1, 2)], [12, 3]),  # 多位数的 token：按 token 比较，不按拼起来的字符串
        ([(1, 2)], [1, 23, 4]),  # 同上：字符串 "[1, 23" 以 "[1, 2" 开头，token 23 却不是 2
    ]
    for prefixes, prompt in cases:
        _ask(_probe(ns, block_size=2, cached=prefixes), "边界", prompt)


@check(points=1, title="类型", says="tuple / range 输入得到同样的命中长度，返回 int")
def check_todo4_types(ns):
    """A plain int; a tuple or range prompt gives what the same list gives (right or wrong)."""
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


@check(points=1, title="不修改", says="查询不改动缓存和传入的 prompt")
def check_todo4_no_mutation(ns):
    """Queries leave the cache and the prompt as they were."""
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
