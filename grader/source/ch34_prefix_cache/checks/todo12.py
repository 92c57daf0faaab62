"""Hidden checks of TODO 12, `BlockPrefixCache.acquire`: one function per grade cell, each given the notebook's namespace.

acquire runs on a subclass whose match, release and _record_query are reference versions written
here, so a mistake in TODO 11, 13 or 14 costs TODO 12 nothing. After every acquire the whole state
is compared with what a correct acquire leaves.
"""

TODO = "TODO 12"
UNDER_TEST = "acquire"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {12: 20}  # the TODO's points, shared by its checks


def _iso(ns):
    """(Iso, IsoCollide): only acquire is the learner's; match, release and _record_query are the reference."""
    Iso, IsoCollide, _ = _classes(
        ns,
        match=lambda self, token_ids: _oracle_match(self, token_ids),
        release=lambda self, block_ids: _oracle_release(self, block_ids),
        _record_query=lambda self, token_ids, hit_block_ids: _oracle_record(self, token_ids, hit_block_ids),
    )
    return Iso, IsoCollide


def _changes(before, after):
    """Which parts of the state differ, in words."""
    names = ("块的引用计数或登记", "空闲队列", "可淘汰队列", "索引 _cached", "统计（请求数、查询/命中 token 数、淘汰数）")
    return "、".join(name for name, a, b in zip(names, before, after) if a != b)


def _check_acquire(c, tokens):
    """Run the learner's acquire and compare the whole state with the reference; return the ids or None."""
    s = _Situation(c, tokens)
    return _check_refused(c, tokens, s) if s.need > s.room else _check_granted(c, tokens, s)


class _Situation:
    """What a correct acquire of `tokens` meets: the state before, the hits, the room, the label."""

    def __init__(self, c, tokens):
        self.before = _snapshot(c)
        self.free0, self.evictable0 = list(c._free_block_ids), list(c._evictable)
        self.refs0 = [b.ref_count for b in c.blocks]
        self.hits = _oracle_match(c, tokens)
        self.need = len(tokens) // c.block_size - len(self.hits)
        self.left = [b for b in self.evictable0 if b not in self.hits]
        self.room = len(self.free0) + len(self.left)
        self.hits_evictable = [b for b in self.hits if b in self.evictable0]
        self.label = (
            f"acquire({tokens})，block_size={c.block_size}，命中 {len(self.hits)} 块，还需 {self.need} 块，"
            f"空闲 {len(self.free0)} 块，可淘汰 {len(self.evictable0)} 块"
        )


_REFS_FIRST = (
    "要先给命中的块加引用（移出可淘汰队列），再分配新块：命中的块若引用计数为 0，正排在可淘汰队列里，"
    "先分配的话它们可能被当成最久未用的块淘汰掉"
)


def _check_refused(c, tokens, s):
    """Too few blocks: acquire raises CacheFullError and changes nothing; returns None."""
    full_error = c._check_full_error
    before, free0, evictable0, refs0 = s.before, s.free0, s.evictable0, s.refs0
    hits, need, room, hits_evictable, label = s.hits, s.need, s.room, s.hits_evictable, s.label
    try:
        c.acquire(tokens)
    except full_error:
        pass
    except NotImplementedError:
        raise
    except Exception as exc:
        raise AssertionError(
            f"{TODO} [{label}]: 块不够时应抛出 CacheFullError，得到 {type(exc).__name__}: {exc}"
        ) from None
    else:
        counted = (
            f"：命中的 {len(hits_evictable)} 个块引用计数为 0、在可淘汰队列里，但马上要被本请求引用，不能算作可腾出的块"
            if need <= len(free0) + len(evictable0)
            else ""
        )
        raise AssertionError(
            f"{TODO} [{label}]: 需要 {need} 个新块、最多只能腾出 {room} 个，应抛出 CacheFullError，却没有抛{counted}"
        )
    after = _snapshot(c)
    if after != before:
        changed = _changes(before, after)
        only_hit_refs = after[1:4] == before[1:4] or (
            after[1] == before[1] and after[2] == [b for b in before[2] if b not in hits] and after[3] == before[3]
        )
        refs = [b[1] for b in after[0]]
        if after[4] != before[4] and after[0] == before[0] and after[1:4] == before[1:4]:
            cause = "统计在检查容量之前就记了：要先确认块够用，成功之后再调用 self._record_query"
        elif only_hit_refs and all(refs[b] == refs0[b] + (b in hits) for b in range(c.num_blocks)):
            cause = "引用计数泄漏：先给命中的块加了引用，才发现块不够，抛错时没有撤销。要先算清楚够不够，再加引用"
        elif hits_evictable and need <= len(free0) + len(evictable0):
            cause = (
                f"分配到一半才发现不够。命中的 {len(hits_evictable)} 个块引用计数为 0、在可淘汰队列里，"
                "但马上要被本请求引用，不能算作可腾出的块；要在改动任何状态之前算清楚够不够"
            )
        else:
            cause = "要在改动任何状态之前算清楚够不够"
        raise AssertionError(f"{TODO} [{label}]: 抛出 CacheFullError 时状态变了（{changed}）：{cause}")
    return None


def _check_granted(c, tokens, s):
    """Enough blocks: the ids, references, queues, statistics and index a correct acquire leaves."""
    full_error, refs_first = c._check_full_error, _REFS_FIRST
    before, free0, refs0, left = s.before, s.free0, s.refs0, s.left
    hits, need, room, hits_evictable, label = s.hits, s.need, s.room, s.hits_evictable, s.label
    try:
        ids = c.acquire(tokens)
    except full_error:
        raise AssertionError(
            f"{TODO} [{label}]: 需要 {need} 个新块、能腾出 {room} 个，不应抛出 CacheFullError"
            + ("。" + refs_first if hits_evictable else "")
        ) from None
    except NotImplementedError:
        raise
    except Exception as exc:
        hint = "。" + refs_first if hits_evictable and need > len(free0) else ""
        raise AssertionError(f"{TODO} [{label}]: acquire 抛出了 {type(exc).__name__}: {exc}{hint}") from None
    assert isinstance(ids, list), f"{TODO} [{label}]: acquire 应返回 list，得到 {type(ids).__name__}"
    num_full = len(tokens) // c.block_size
    assert len(ids) == num_full, (
        f"{TODO} [{label}]: {len(tokens)} 个 token、block_size={c.block_size}，应返回 {num_full} 个 block id"
        f"（只为满块分配，不满一块的尾巴不分配），得到 {len(ids)} 个：{ids}"
    )
    assert all(type(b) is int for b in ids), f"{TODO} [{label}]: block id 应是 int，得到 {ids}"
    assert _same_ints(ids[: len(hits)], hits), (
        f"{TODO} [{label}]: 前 {len(hits)} 个应是 match 命中的块 {hits}（直接复用，不重新分配），得到 {ids[: len(hits)]}"
    )
    new = ids[len(hits) :]
    assert len(set(new)) == len(new) and not set(new) & set(hits), (
        f"{TODO} [{label}]: 新分配的块 {new} 不能重复，也不能是命中的块 {hits}" + ("：" + refs_first if set(new) & set(hits) else "")
    )
    evicted = left[: max(0, need - len(free0))]
    if evicted:
        assert set(new) == set(free0) | set(evicted), (
            f"{TODO} [{label}]: 空闲块用完后应按 LRU 淘汰最久未用的块 {evicted}，新块应是 {sorted(set(free0) | set(evicted))}，"
            f"得到 {new}" + ("：" + refs_first if hits_evictable else "")
        )
    else:
        assert set(new) <= set(free0), f"{TODO} [{label}]: 还有空闲块时应先用空闲块 {free0}，不应淘汰缓存的块，得到新块 {new}"
    for b in range(c.num_blocks):
        expected = 1 if b in new else refs0[b] + (b in hits)
        got = c.blocks[b].ref_count
        assert got == expected, (
            f"{TODO} [{label}]: 块 {b} 的引用计数应为 {expected}，得到 {got}（命中的块各 +1，新块为 1，其余不变）"
        )
    assert list(c._evictable) == left[len(evicted) :], (
        f"{TODO} [{label}]: 可淘汰队列应为 {left[len(evicted):]}，得到 {list(c._evictable)}："
        "命中的块被本请求引用后要移出可淘汰队列，其余可淘汰块保持原来的顺序"
    )
    r0, q0, h0, _ = before[4]
    stats = (c.num_requests, c.num_queried_tokens, c.num_hit_tokens)
    want = (r0 + 1, q0 + len(tokens), h0 + len(hits) * c.block_size)
    assert stats == want, (
        f"{TODO} [{label}]: 统计 (请求数, 查询 token, 命中 token) 应为 {want}，得到 {stats}："
        "成功的 acquire 应恰好调用一次 self._record_query(token_ids, 命中的块)"
    )
    registered = _oracle_match(c, tokens)
    assert _same_ints(registered, ids[: len(registered)]) and len(registered) >= len(hits), (
        f"{TODO} [{label}]: 缓存里登记的块 {registered} 应是返回的块 {ids} 的开头"
    )
    if type(c)._hash_block is c._check_base._hash_block:
        assert len(registered) == num_full, (
            f"{TODO} [{label}]: 之后 match 只找到 {len(registered)} 个块，应找到全部 {num_full} 个："
            "新块要用 self.insert(token_ids, block_ids) 登记进缓存，下一个相同的请求才能命中"
        )
    _integrity(c, f"acquire({tokens}) ")
    return ids


@check(points=4, title="基本", says="只为满块分配、先用空闲块、新块登记进缓存、同一 prompt 再来全部命中、统计记一次")
def check_todo12_basic(ns):
    """Full blocks only, free blocks first, new blocks registered, a repeated prompt hits, stats recorded once."""
    Iso, _ = _iso(ns)
    c = Iso(4, 8)
    first = _check_acquire(c, list(range(1, 11)))
    again = _check_acquire(c, list(range(1, 11)))
    assert _same_ints(again, first), f"{TODO}: 同一个 prompt 第二次 acquire 应全部命中 {first}，得到 {again}"
    _check_acquire(c, [])
    _check_acquire(c, [1, 2, 3])
    _check_acquire(c, list(range(1, 5)) + [7, 7, 7, 7])


@check(points=4, title="引用计数", says="共享前缀的块每个持有者 +1；命中可淘汰的块时把它移出可淘汰队列")
def check_todo12_refcounts(ns):
    """Shared prefixes: each holder adds one reference; a hit on a released block takes it out of the evictable queue."""
    Iso, _ = _iso(ns)
    c = Iso(2, 8)
    a = _check_acquire(c, [1, 2, 3, 4, 5, 6])
    _check_acquire(c, [1, 2, 3, 4, 7, 8])
    _check_acquire(c, [1, 2, 3, 4, 7, 8, 9])
    c.release(a)
    _check_acquire(c, [1, 2, 3, 4, 5, 6, 9, 9])


@check(points=4, title="命中块不被淘汰", says="没有空闲块时按 LRU 淘汰，命中的块即使排在队首也不淘汰")
def check_todo12_hit_blocks_protected(ns):
    """With no free block left, LRU eviction takes the oldest evictable block, never one this request hits."""
    Iso, _ = _iso(ns)
    c = Iso(2, 4)
    c.release(_check_acquire(c, [1, 2, 3, 4]))
    c.release(_check_acquire(c, [5, 6, 7, 8]))  # 没有空闲块；可淘汰队列：A 尾, A 头, B 尾, B 头
    _check_acquire(c, [1, 2, 3, 4, 9, 9, 9, 9])  # 命中 A 的两块（在队首），淘汰 B 的两块
    c = Iso(2, 6)
    for tokens in ([1, 1, 2, 2], [3, 3, 4, 4], [5, 5, 6, 6]):
        c.release(_check_acquire(c, tokens))
    _check_acquire(c, [1, 1, 2, 2, 8, 8])  # 命中 A 的两块，淘汰最久未用的 B 尾


@check(points=5, title="块不够", says="腾不出足够的块时抛 CacheFullError，且引用、队列、索引、统计都不变")
def check_todo12_cache_full(ns):
    """Too few blocks: CacheFullError, and nothing changes (references, queues, index, statistics)."""
    Iso, _ = _iso(ns)
    c = Iso(2, 4)
    c.release(_check_acquire(c, [1, 2, 3, 4]))  # 两块可淘汰，两块空闲
    _check_acquire(c, list(range(1, 11)))  # 命中 2 块，还要 3 块，只能腾出 2 块
    held = _check_acquire(c, list(range(1, 9)))  # 命中 2 块，再用两个空闲块
    _check_acquire(c, [9, 9, 9, 9])  # 全部在用：一块也腾不出
    c.release(held)
    _check_acquire(c, list(range(1, 9)) + [9, 9])  # 命中 4 块，还要 1 块，没有别的可淘汰块


@check(points=3, title="随机序列", says="随机请求序列（含频繁哈希碰撞）中每次 acquire 之后的完整状态")
def check_todo12_random(ns):
    """Random request sequences, with the real hash and with one of 3 values: every acquire leaves the right state."""
    Iso, IsoCollide = _iso(ns)
    _drive(Iso(4, 10), 34, 160, _check_acquire, _oracle_release, lambda c, make: None)
    _drive(IsoCollide(4, 10), 35, 160, _check_acquire, _oracle_release, lambda c, make: None)
