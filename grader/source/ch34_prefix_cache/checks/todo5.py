"""TODO 5 的隐藏检查：split_prompt 返回 (可复用前缀 list, 后缀 list, hit_len)。

每个 check_todo5_* 是一个评分单元格（test_todo5_<名字>）；ns 是 notebook 的全局命名空间。
本文件只依赖标准库，自带参考实现：_normalize 与 match_prefix 用参考实现，只检查 TODO 5。
返回值可以是 tuple 或它的子类（例如 NamedTuple）。
"""

import random

TODO = "TODO 5"
UNDER_TEST = "split_prompt"  # the method this file grades; every other TODO's method is the oracle
TOTAL_POINTS = {5: 4}  # the TODO's points, shared by its checks


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


@check(points=1, title="基本", says="随机缓存与 prompt：prefix、suffix、hit_len 与参考实现相同")
def check_todo5_basic(ns):
    """Random caches and list prompts: prefix, suffix and hit_len against the reference."""
    rng = random.Random(3405)
    for _ in range(40):
        stem, manager = _random_manager(ns, rng)
        for prompt in (stem + rng.choices(range(5), k=3), rng.choices(range(5), k=6)):
            _check_contents(*_split(manager, "基本", prompt))


@check(points=1, title="类型", says="返回 3 元组（tuple 或 NamedTuple）：list、list、int；tuple / range 输入")
def check_todo5_types(ns):
    """prefix and suffix are plain lists, hit_len an int, for list, tuple and range prompts."""
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


@check(points=1, title="边界", says="空 prompt、没有命中、完整命中")
def check_todo5_edge(ns):
    """Empty prompt, no hit (the whole prompt is the suffix), a full hit (the suffix is [])."""
    cases = [
        ([(1, 2)], []),  # 空 prompt
        ([(1, 2)], [3, 4, 5]),  # 没有命中
        ([(1, 2, 3)], [1, 2, 3]),  # 完整命中
        ([], [7, 8]),  # 缓存为空
    ]
    for cached, prompt in cases:
        _check_contents(*_split(_probe(ns, block_size=2, cached=cached), "边界", prompt))


@check(points=1, title="不修改", says="拆分不改动缓存和传入的 prompt")
def check_todo5_no_mutation(ns):
    """Splitting leaves the cache and the caller's prompt as they were."""
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
