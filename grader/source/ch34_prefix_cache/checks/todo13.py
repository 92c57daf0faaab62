"""Hidden checks of TODO 13, `BlockPrefixCache.release`: one function per grade cell, each given the notebook's namespace.

Only the learner's release runs; requests acquire their blocks through a reference acquire written
here, so a mistake in TODO 11, 12 or 14 costs TODO 13 nothing. After every release the reference
counts, the evictable queue (its order too) and the free queue are compared with what is expected.
Points: refcount 3, lru_order 3, private_blocks 2, random 2 (10 in all).
"""

import random as _random

_TODO = "TODO 13"


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
        raise AssertionError(f"{_TODO} [{label}]: release 抛出了 {type(exc).__name__}: {exc}") from None
    assert result is None, f"{_TODO} [{label}]: release 不返回值，得到 {result!r}"
    got = [b.ref_count for b in c.blocks]
    if got != refs:
        if any(got[b] == 0 < refs[b] for b in ids):
            cause = "别的请求还在用的块被清零了：每次只减 1，降到 0 才算没人用"
        elif any(got[b] == refs0[b] for b in ids):
            cause = "有的块引用计数没有减：每个块都要 ref_count -= 1"
        else:
            cause = "每个块恰好减 1"
        raise AssertionError(f"{_TODO} [{label}]: 引用计数应为 {refs}，得到 {got}：{cause}")
    assert [(b.key, b.parent_key, b.token_ids) for b in c.blocks] == keys, (
        f"{_TODO} [{label}]: release 注销了块（key 变了）：引用降到 0 的已登记块要留在缓存里，等下一个请求命中"
    )
    private = [b for b in c._evictable if c.blocks[b].key is None]
    assert not private, (
        f"{_TODO} [{label}]: 私有块 {private}（key 为 None，没有登记）进了可淘汰队列：私有块的内容不可复用，"
        "引用降到 0 时要放回空闲队列 self._free_block_ids；只有已登记的块才进 self._evictable"
    )
    registered_free = [b for b in c._free_block_ids if c.blocks[b].key is not None]
    assert not registered_free, (
        f"{_TODO} [{label}]: 已登记的块 {registered_free} 被放回了空闲队列：引用降到 0 的已登记块要留在缓存里，"
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
        raise AssertionError(f"{_TODO} [{label}]: 可淘汰队列（最久未用在前）应为 {evictable}，得到 {got_queue}：{cause}")
    assert sorted(c._free_block_ids) == sorted(free), (
        f"{_TODO} [{label}]: 空闲队列应为 {sorted(free)}，得到 {sorted(c._free_block_ids)}：引用降到 0 的私有块回到空闲队列"
    )
    _integrity(c, f"release({ids}) ")


@_named("引用计数")
def check_refcount(ns):
    """Shared blocks: release takes exactly one reference; a block still held by another request stays in use."""
    Cache, _, _ = _classes(ns)
    c = Cache(2, 8)
    a = _oracle_acquire(c, [1, 2, 3, 4, 5, 6])
    b = _oracle_acquire(c, [1, 2, 3, 4, 7, 8])
    d = _oracle_acquire(c, [1, 2, 3, 4])
    _check_release(c, a)
    _check_release(c, d)
    _check_release(c, b)


@_named("LRU 顺序")
def check_lru_order(ns):
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
        f"{_TODO} [依次释放 A、B、C，A 又用了一次，再要两块]: 应淘汰最久未用的 B，A 和 C 留下："
        f"命中的块数 B、A、C 应为 [0, 2, 2]，得到 {kept}"
    )


@_named("私有块")
def check_private_blocks(ns):
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


@_named("随机序列")
def check_random(ns):
    """Random request sequences with the real hash: every release leaves the right references and queues."""
    Cache, _, _ = _classes(ns)
    _drive(Cache(4, 10), 34, 160, _oracle_acquire, _check_release, lambda c, make: None)
    _drive(Cache(2, 16), 36, 160, _oracle_acquire, _check_release, lambda c, make: None)
