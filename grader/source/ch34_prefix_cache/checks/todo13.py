"""Hidden checks of TODO 13, `BlockPrefixCache.release`: one function per grade cell, each given the notebook's namespace.

Only the learner's release runs; requests acquire their blocks through a reference acquire written
here, so a mistake in TODO 11, 12 or 14 costs TODO 13 nothing. After every release the reference
counts, the evictable queue (its order too) and the free queue are compared with what is expected.
"""

TODO = "TODO 13"
UNDER_TEST = "release"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {13: 10}  # the TODO's points, shared by its checks


def _check_release(c, ids):
    """Run the learner's release(ids) and compare references and queues with the reference."""
    refs0 = [b.ref_count for b in c.blocks]
    refs, evictable, free = list(refs0), list(c._evictable), list(c._free_block_ids)
    keys = [(b.key, b.parent_key, b.token_ids) for b in c.blocks]
    to_zero = []
    for b in reversed(ids):
        refs[b] -= 1
        if refs[b] == 0:
            to_zero.append(b)
            (free if c.blocks[b].key is None else evictable).append(b)
    label = f"release({ids})，引用计数 {[refs0[b] for b in ids]}"
    try:
        result = c.release(ids)
    except NotImplementedError:
        raise
    except Exception as exc:
        raise AssertionError(f"{TODO} [{label}]: release 抛出了 {type(exc).__name__}: {exc}") from None
    assert result is None, f"{TODO} [{label}]: release 不返回值，得到 {result!r}"
    got = [b.ref_count for b in c.blocks]
    if got != refs:
        if any(got[b] == 0 < refs[b] for b in ids):
            cause = "别的请求还在用的块被清零了：每次只减 1，降到 0 才算没人用"
        elif any(got[b] == refs0[b] for b in ids):
            cause = "有的块引用计数没有减：每个块都要 ref_count -= 1"
        else:
            cause = "每个块恰好减 1"
        raise AssertionError(f"{TODO} [{label}]: 引用计数应为 {refs}，得到 {got}：{cause}")
    assert [(b.key, b.parent_key, b.token_ids) for b in c.blocks] == keys, (
        f"{TODO} [{label}]: release 注销了块（key 变了）：引用降到 0 的已登记块要留在缓存里，等下一个请求命中"
    )
    private = [b for b in c._evictable if c.blocks[b].key is None]
    assert not private, (
        f"{TODO} [{label}]: 私有块 {private}（key 为 None，没有登记）进了可淘汰队列：私有块的内容不可复用，"
        "引用降到 0 时要放回空闲队列 self._free_block_ids；只有已登记的块才进 self._evictable"
    )
    registered_free = [b for b in c._free_block_ids if c.blocks[b].key is not None]
    assert not registered_free, (
        f"{TODO} [{label}]: 已登记的块 {registered_free} 被放回了空闲队列：引用降到 0 的已登记块要留在缓存里，"
        "排到可淘汰队列 self._evictable 的队尾，下一个请求才能命中它"
    )
    got_queue = list(c._evictable)
    if got_queue != evictable:
        queued = [b for b in to_zero if c.blocks[b].key is not None]
        old = evictable[: len(evictable) - len(queued)]
        if got_queue == old + queued[::-1] and len(queued) > 1:
            cause = "块是从头到尾排进队列的：要从最后一块往前（reversed(block_ids)），同一条链上尾块先淘汰，父块总比子块晚"
        elif got_queue[: len(queued)] == queued or got_queue[: len(queued)] == queued[::-1]:
            cause = "刚释放的块排到了队首（最先淘汰）：应追加到队尾，最近用过的最后淘汰"
        else:
            cause = "引用降到 0 的已登记块要从尾到头依次追加到队尾，队列里原有的块不动"
        raise AssertionError(f"{TODO} [{label}]: 可淘汰队列（最久未用在前）应为 {evictable}，得到 {got_queue}：{cause}")
    assert sorted(c._free_block_ids) == sorted(free), (
        f"{TODO} [{label}]: 空闲队列应为 {sorted(free)}，得到 {sorted(c._free_block_ids)}：引用降到 0 的私有块回到空闲队列"
    )
    _integrity(c, f"release({ids}) ")


@check(points=3, title="引用计数", says="每次 release 只减 1；别的请求还在用的块保持使用中")
def check_todo13_refcount(ns):
    """Shared blocks: release takes exactly one reference; a block still held by another request stays in use."""
    Cache, _, _ = _classes(ns)
    c = Cache(2, 8)
    a = _oracle_acquire(c, [1, 2, 3, 4, 5, 6])
    b = _oracle_acquire(c, [1, 2, 3, 4, 7, 8])
    d = _oracle_acquire(c, [1, 2, 3, 4])
    _check_release(c, a)
    _check_release(c, d)
    _check_release(c, b)


@check(points=3, title="LRU 顺序", says="降到 0 的块从尾到头排到可淘汰队列的队尾；淘汰最久未用的")
def check_todo13_lru_order(ns):
    """Released blocks join the tail of the evictable queue, last block first; eviction then takes the least recent."""
    Cache, _, _ = _classes(ns)
    c = Cache(2, 8)
    _check_release(c, _oracle_acquire(c, [1, 2, 3, 4, 5, 6]))
    _check_release(c, _oracle_acquire(c, [7, 7, 8, 8]))
    c = Cache(2, 6)
    for tokens in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]):
        _check_release(c, _oracle_acquire(c, tokens))
    _check_release(c, _oracle_acquire(c, [1, 2, 3, 4]))  # A 又用了一次
    _oracle_acquire(c, [1, 1, 1, 1])  # 需要两块：淘汰最久未用的 B
    kept = [len(_oracle_match(c, t)) for t in ([5, 6, 7, 8], [1, 2, 3, 4], [9, 9, 9, 9])]
    assert kept == [0, 2, 2], (
        f"{TODO} [依次释放 A、B、C，A 又用了一次，再要两块]: 应淘汰最久未用的 B，A 和 C 留下："
        f"命中的块数 B、A、C 应为 [0, 2, 2]，得到 {kept}"
    )


@check(points=2, title="私有块", says="哈希碰撞之后没有登记的私有块回到空闲队列，不进可淘汰队列")
def check_todo13_private_blocks(ns):
    """A private block (not registered after a hash collision) goes back to the free queue, not to the evictable queue."""
    _, Collide, Constant = _classes(ns)
    c = Constant(2, 4)
    _check_release(c, _oracle_acquire(c, [1, 2, 3, 4]))  # 第二块撞上首块的 key：私有
    _check_release(c, [])
    c = Constant(2, 6)
    held = _oracle_acquire(c, [1, 2, 3, 4, 5, 6])
    other = _oracle_acquire(c, [1, 2, 7, 7])
    _check_release(c, held)
    _check_release(c, other)
    _drive(Collide(4, 10), 35, 160, _oracle_acquire, _check_release, lambda c, make: None)


@check(points=2, title="随机序列", says="随机请求序列中每次 release 之后的引用计数与两条队列")
def check_todo13_random(ns):
    """Random request sequences with the real hash: every release leaves the right references and queues."""
    Cache, _, _ = _classes(ns)
    _drive(Cache(4, 10), 34, 160, _oracle_acquire, _check_release, lambda c, make: None)
    _drive(Cache(2, 16), 36, 160, _oracle_acquire, _check_release, lambda c, make: None)
