"""Hidden checks of TODO 14, `BlockPrefixCache._record_query`: one function per grade cell, each given the notebook's namespace.

_record_query is called directly, and from a reference acquire over random request sequences,
so a mistake in TODO 11-13 costs TODO 14 nothing.
Points: hit_tokens 2, queried_tokens 2, accumulate 2 (6 in all).
"""

import random as _random

_TODO = "TODO 14"


def _named(title):
    """A check's messages read "TODO N · title [input]: ..."; an unfinished TODO is named as such."""

    def wrap(check):
        def run(ns):
            try:
                return check(ns)
            except NotImplementedError:
                raise NotImplementedError(
                    f"{_TODO} · {title}：请先完成 {_TODO}（仍在 raise NotImplementedError）"
                ) from None
            except AssertionError as error:
                text = str(error)
                if text.startswith(_TODO):
                    text = f"{_TODO} · {title}" + text[len(_TODO) :]
                raise AssertionError(text) from None

        run.__name__, run.__doc__ = check.__name__, check.__doc__
        return run

    return wrap


def _snapshot(c):
    """Everything a cache holds: blocks, queues, index and statistics."""
    return (
        [(b.block_id, b.ref_count, b.key, b.parent_key, b.token_ids) for b in c.blocks],
        list(c._free_block_ids),
        list(c._evictable),
        dict(c._cached),
        (c.num_requests, c.num_queried_tokens, c.num_hit_tokens, c.num_evictions),
    )


def _same_ints(got, expected):
    return (
        isinstance(got, list)
        and len(got) == len(expected)
        and all(type(g) is int and g == e for g, e in zip(got, expected))
    )


def _integrity(c, after):
    """The pool is exactly free + evictable + in use, and check_integrity (given code) holds."""
    in_use = [b.block_id for b in c.blocks if b.ref_count > 0]
    pool = sorted(list(c._free_block_ids) + list(c._evictable) + in_use)
    assert pool == list(range(c.num_blocks)), (
        f"{_TODO}: {after}之后，空闲 + 可淘汰 + 使用中的块应恰好覆盖整个块池 0..{c.num_blocks - 1}，得到 {pool}"
    )
    try:
        c.check_integrity()
    except AssertionError as error:
        raise AssertionError(f"{_TODO}: {after}之后缓存的不变量被破坏了：{error}") from None


def _oracle_match(c, tokens):
    found, parent = [], None
    for i in range(len(tokens) // c.block_size):
        chunk = tuple(tokens[i * c.block_size : (i + 1) * c.block_size])
        key = c._hash_block(parent, chunk)
        b = c._cached.get(key)
        if b is None or c.blocks[b].parent_key != parent or c.blocks[b].token_ids != chunk:
            break
        found.append(b)
        parent = key
    return found


def _oracle_record(c, tokens, hits):
    c.num_requests += 1
    c.num_queried_tokens += len(tokens)
    c.num_hit_tokens += len(hits) * c.block_size


def _oracle_acquire(c, tokens, record=_oracle_record):
    """Reference acquire; returns the block ids, or None when the pool cannot make room (nothing changed)."""
    hits = _oracle_match(c, tokens)
    need = len(tokens) // c.block_size - len(hits)
    if need > len(c._free_block_ids) + sum(1 for b in c._evictable if b not in hits):
        return None
    for b in hits:
        if c.blocks[b].ref_count == 0:
            del c._evictable[b]
        c.blocks[b].ref_count += 1
    ids = hits + [c._allocate_block() for _ in range(need)]
    c.insert(tokens, ids)
    record(c, tokens, hits)
    return ids


def _oracle_release(c, ids):
    for b in reversed(ids):
        c.blocks[b].ref_count -= 1
        if c.blocks[b].ref_count == 0:
            if c.blocks[b].key is None:
                c._free_block_ids.append(b)
            else:
                c._evictable[b] = None


def _drive(c, seed, steps, acquire, release, after_step):
    """A random sequence of requests: acquire(c, tokens) -> ids or None; release(c, ids); after_step(c, make)."""
    rng = _random.Random(seed)
    roots = [[rng.randrange(1, 4) for _ in range(4 * c.block_size)] for _ in range(3)]

    def make():
        root = rng.choice(roots)
        tail = [rng.randrange(1, 4) for _ in range(rng.randrange(2 * c.block_size + 1))]
        return root[: rng.randrange(len(root) + 1)] + tail

    running = []
    for _ in range(steps):
        if running and rng.random() < 0.4:
            release(c, running.pop(rng.randrange(len(running))))
        else:
            ids = acquire(c, make())
            if ids is not None:
                running.append(ids)
        after_step(c, make)


def _classes(ns, **methods):
    """The learner's BlockPrefixCache with `methods` replaced, plus variants whose hash collides often or always."""
    base = ns["BlockPrefixCache"]
    # the reference knows the learner's base class and error type through these two attributes
    Cache = type("Cache", (base,), {**methods, "_check_base": base, "_check_full_error": ns["CacheFullError"]})

    def mod3(self, parent_key, token_ids):
        # ints and tuples of ints hash the same in every process (hash(None) does not before 3.12)
        return hash((-1 if parent_key is None else parent_key, token_ids)) % 3

    def seven(self, parent_key, token_ids):
        return 7

    Collide = type("Collide", (Cache,), {"_hash_block": mod3, "__doc__": "哈希只有 3 个取值：碰撞随处可见。"})
    Constant = type("Constant", (Cache,), {"_hash_block": seven, "__doc__": "所有块的 key 都是 7。"})
    return Cache, Collide, Constant


def _stats(c):
    return (c.num_requests, c.num_queried_tokens, c.num_hit_tokens)


def _record(c, tokens, hits):
    """Call the learner's _record_query; return the change of (requests, queried tokens, hit tokens)."""
    before = _stats(c)
    label = f"_record_query({tokens}, {hits})，block_size={c.block_size}"
    try:
        result = c._record_query(tokens, hits)
    except NotImplementedError:
        raise
    except Exception as exc:
        raise AssertionError(f"{_TODO} [{label}]: 抛出了 {type(exc).__name__}: {exc}") from None
    assert result is None, f"{_TODO} [{label}]: _record_query 不返回值，得到 {result!r}"
    after = _stats(c)
    assert all(type(x) is int for x in after), f"{_TODO} [{label}]: 统计值应是 int，得到 {after}"
    return label, tuple(a - b for a, b in zip(after, before))


@_named("命中 token")
def check_hit_tokens(ns):
    """num_hit_tokens grows by the tokens the hit blocks hold (blocks x block_size), not by the number of blocks."""
    Cache, _, _ = _classes(ns)
    for size, tokens, hits in ((4, list(range(10)), [0, 1]), (3, list(range(9)), [5, 2, 7]), (4, [1, 2, 3], []), (2, [], [])):
        label, delta = _record(Cache(size, 8), tokens, hits)
        want = len(hits) * size
        cause = "：命中数要按 token 计（命中块数 × block_size），不是块数" if hits and delta[2] == len(hits) else ""
        assert delta[2] == want, f"{_TODO} [{label}]: num_hit_tokens 应增加 {want}，实际增加 {delta[2]}{cause}"


@_named("查询 token")
def check_queried_tokens(ns):
    """num_queried_tokens grows by the whole prompt, the partial tail included."""
    Cache, _, _ = _classes(ns)
    for size, tokens, hits in ((4, list(range(10)), [0, 1]), (4, (5, 6, 7), []), (3, list(range(9)), [1]), (2, [], [])):
        label, delta = _record(Cache(size, 8), tokens, hits)
        want = len(tokens)
        if delta[1] == len(tokens) // size * size != want:
            cause = "：查询 token 数要算整个 prompt，包括不满一块的尾巴"
        elif delta[1] == 1 != want:
            cause = "：查询数按 token 计（加上 len(token_ids)），不是按请求计"
        else:
            cause = ""
        assert delta[1] == want, f"{_TODO} [{label}]: num_queried_tokens 应增加 {want}，实际增加 {delta[1]}{cause}"


@_named("累计")
def check_accumulate(ns):
    """Requests count one each; totals and hit_rate accumulate over random requests; blocks are not touched."""
    Cache, _, _ = _classes(ns)
    c = Cache(4, 8)
    assert c.hit_rate == 0.0, f"{_TODO}: 还没有查询时 hit_rate 应为 0.0，得到 {c.hit_rate!r}"
    before = _snapshot(c)
    label, delta = _record(c, list(range(10)), [0, 1])
    assert delta[0] == 1, f"{_TODO} [{label}]: num_requests 应增加 1，实际增加 {delta[0]}"
    assert _snapshot(c)[:4] == before[:4], f"{_TODO} [{label}]: _record_query 只改统计，不能动块、队列和索引"
    _record(c, (5, 6, 7), [])
    _record(c, [], [])
    assert _stats(c) == (3, 13, 8), (
        f"{_TODO} [依次记 (list(range(10)), [0, 1])、((5, 6, 7), [])、([], [])，block_size=4]: "
        f"(请求数, 查询 token, 命中 token) 应为 (3, 13, 8)，得到 {_stats(c)}"
    )
    assert type(c.hit_rate) is float and abs(c.hit_rate - 8 / 13) < 1e-12, f"{_TODO}: hit_rate 应为 8 / 13，得到 {c.hit_rate!r}"
    totals = [0, 0, 0]

    def learner_record(c, tokens, hits):
        c._record_query(tokens, hits)
        totals[0] += 1
        totals[1] += len(tokens)
        totals[2] += len(hits) * c.block_size

    def after_step(c, make):
        assert _stats(c) == tuple(totals), (
            f"{_TODO} [随机操作序列，block_size={c.block_size}]: 累计 (请求数, 查询 token, 命中 token) 应为 {tuple(totals)}，"
            f"得到 {_stats(c)}"
        )
        _integrity(c, "_record_query ")

    _drive(Cache(4, 10), 34, 120, lambda c, tokens: _oracle_acquire(c, tokens, learner_record), _oracle_release, after_step)
