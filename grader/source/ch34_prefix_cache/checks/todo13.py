"""Hidden checks of TODO 13, `BlockPrefixCache.release`: one function per grade cell, each given the notebook's namespace.

Only the learner's release runs; requests acquire their blocks through a reference acquire written
here, so a mistake in TODO 11, 12 or 14 costs TODO 13 nothing. Each check looks at one aspect of
what release leaves (the reference counts; the order of the evictable queue; where private blocks
go; that registered blocks stay cached), judged from the learner's own reference counts, and after
every release the state is put back to what a correct release leaves: one mistake costs one check
(issue 40: an ordering mistake lost the reference-count check too). Every check runs the same
requests: shared prefixes, chains, hash collisions and random sequences.
"""

TODO = "TODO 13"
UNDER_TEST = "release"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {13: 15}  # the TODO's points, shared by its checks


class _Release:
    """One release(ids) by the learner: the state before, what a correct release leaves, what it left."""

    def __init__(self, c, ids):
        self.c, self.ids, self.before = c, list(ids), _snapshot(c)
        self.keys = [b.key for b in c.blocks]  # before: a block is private when its key is None
        self.refs0 = [b.ref_count for b in c.blocks]
        self.refs, self.evictable, self.free = list(self.refs0), list(c._evictable), list(c._free_block_ids)
        self.types = (type(c._free_block_ids), type(c._evictable))
        for b in reversed(self.ids):
            self.refs[b] -= 1
            if self.refs[b] == 0:
                (self.free if self.keys[b] is None else self.evictable).append(b)
        self.label = f"release({self.ids})，引用计数 {[self.refs0[b] for b in self.ids]}"
        try:
            self.result = c.release(self.ids)
        except NotImplementedError:
            raise
        except Exception as exc:
            raise AssertionError(f"{TODO} [{self.label}]: release 抛出了 {type(exc).__name__}: {exc}") from None
        self.got_refs = [b.ref_count for b in c.blocks]
        # The blocks this release takes to 0, last block first: by both the correct counts and the
        # learner's (they must be queued), and by either (a wrong count is `_refcounts`'s aspect:
        # a block queued by either count is accepted here).
        zero = [(b, self.refs[b] == 0, self.got_refs[b] == 0 < self.refs0[b]) for b in reversed(self.ids)]
        self.zeroed = list(dict.fromkeys(b for b, right, theirs in zero if right and theirs))
        self.either = list(dict.fromkeys(b for b, right, theirs in zero if right or theirs))
        # blocks in use by both counts: in no queue (`_refcounts`'s aspect; the others skip them)
        self.in_use = {b for b in range(len(c.blocks)) if self.refs[b] > 0 and self.got_refs[b] > 0}

    def fail(self, text):
        raise AssertionError(f"{TODO} [{self.label}]: {text}")

    def put_back(self):
        """The state a correct release leaves, whatever the learner's did: the next step starts right."""
        c = self.c
        blocks, _, _, cached, stats = self.before
        for block, (_, _, key, parent_key, token_ids), refs in zip(c.blocks, blocks, self.refs):
            block.key, block.parent_key, block.token_ids, block.ref_count = key, parent_key, token_ids, refs
        free_type, evictable_type = self.types
        c._free_block_ids, c._evictable = free_type(self.free), evictable_type.fromkeys(self.evictable)
        c._cached.clear()
        c._cached.update(cached)
        c.num_requests, c.num_queried_tokens, c.num_hit_tokens, c.num_evictions = stats


def _refcounts(r):
    """Each block released loses exactly one reference, and a block still in use stays out of
    both queues; release returns nothing."""
    if r.result is not None:
        r.fail(f"release 不返回值，得到 {r.result!r}")
    if r.got_refs == r.refs:
        queued = [b for b in [*r.c._evictable, *r.c._free_block_ids] if b in r.in_use]
        if queued:
            r.fail(
                f"块 {queued} 还有别的请求在用（引用计数 {[r.refs[b] for b in queued]}），却进了可淘汰队列或空闲队列："
                "引用降到 0 才算没人用，才放进队列"
            )
        return
    if any(r.got_refs[b] == 0 < r.refs[b] for b in r.ids):
        cause = "别的请求还在用的块被清零了：每次只减 1，降到 0 才算没人用"
    elif any(r.got_refs[b] == r.refs0[b] for b in r.ids):
        cause = "有的块引用计数没有减：每个块都要 ref_count -= 1"
    else:
        cause = "每个块恰好减 1"
    r.fail(f"引用计数应为 {r.refs}，得到 {r.got_refs}：{cause}")


def _lru_order(r):
    """The registered blocks taken to 0 join the tail of the evictable queue, last block first.

    Only the order is judged, of the blocks both queues hold: which blocks belong there is
    `_stays_cached`'s aspect."""
    queued = [b for b in r.either if r.keys[b] is not None]
    old = list(r.before[2])
    wanted = old + [b for b in queued if b not in old]
    got = list(r.c._evictable)
    got_order = [b for b in got if b in wanted]
    wanted_order = [b for b in wanted if b in got]
    if got_order == wanted_order:
        return
    tail = [b for b in queued if b in got]
    if len(tail) > 1 and got_order == [b for b in old if b in got] + tail[::-1]:
        cause = "块是从头到尾排进队列的：要从最后一块往前（reversed(block_ids)），同一条链上尾块先淘汰，父块总比子块晚"
    elif tail and got_order[: len(tail)] in (tail, tail[::-1]):
        cause = "刚释放的块排到了队首（最先淘汰）：应追加到队尾，最近用过的最后淘汰"
    else:
        cause = "引用降到 0 的已登记块要从尾到头依次追加到队尾，队列里原有的块不动"
    r.fail(f"可淘汰队列（最久未用在前）应为 {wanted}，得到 {got}：{cause}")


def _private_blocks(r):
    """A private block (key None) taken to 0 goes back to the free queue, never to the evictable queue."""
    private = [b for b in r.c._evictable if r.keys[b] is None and b not in r.in_use]
    if private:
        r.fail(
            f"私有块 {private}（key 为 None，没有登记）进了可淘汰队列：私有块的内容不可复用，"
            "引用降到 0 时要放回空闲队列 self._free_block_ids；只有已登记的块才进 self._evictable"
        )
    wanted = sorted(r.before[1] + [b for b in r.zeroed if r.keys[b] is None])
    allowed = wanted + [b for b in r.either if r.keys[b] is None and b not in r.zeroed]
    got = sorted(b for b in r.c._free_block_ids if r.keys[b] is None and b not in r.in_use)
    if any(got.count(b) < wanted.count(b) or got.count(b) > allowed.count(b) for b in set(got + wanted)):
        r.fail(f"空闲队列里的私有块应为 {wanted}，得到 {got}：引用降到 0 的私有块回到空闲队列，每块一次")


def _stays_cached(r):
    """A registered block taken to 0 keeps its key and its place in the index, and waits in the
    evictable queue (not the free queue) for the next request to hit it."""
    now = [(b.key, b.parent_key, b.token_ids) for b in r.c.blocks]
    if now != [row[2:] for row in r.before[0]] or dict(r.c._cached) != r.before[3]:
        r.fail("release 注销了块（key 或索引 _cached 变了）：引用降到 0 的已登记块要留在缓存里，等下一个请求命中")
    registered_free = [b for b in r.c._free_block_ids if r.keys[b] is not None and b not in r.in_use]
    if registered_free:
        r.fail(
            f"已登记的块 {registered_free} 被放回了空闲队列：引用降到 0 的已登记块要留在缓存里，"
            "排到可淘汰队列 self._evictable 的队尾，下一个请求才能命中它"
        )
    queued = set(r.c._evictable)
    missing = [b for b in r.zeroed if r.keys[b] is not None and b not in queued]
    if missing:
        r.fail(f"引用降到 0 的已登记块 {missing} 没有进可淘汰队列：要排到 self._evictable 的队尾，等下一个请求命中")


def _run_requests(ns, aspect):
    """Every check's requests, with `aspect` judged after each of the learner's releases."""

    def release(c, ids):
        r = _Release(c, ids)
        aspect(r)
        r.put_back()

    Cache, Collide, Constant = _classes(ns)
    c = Cache(2, 8)  # three requests share a prefix; released in another order than acquired
    a, b, d = (_oracle_acquire(c, t) for t in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7, 8], [1, 2, 3, 4]))
    for ids in (a, d, b):
        release(c, ids)
    c = Cache(2, 8)  # whole chains, then a chain with repeated tokens
    release(c, _oracle_acquire(c, [1, 2, 3, 4, 5, 6]))
    release(c, _oracle_acquire(c, [7, 7, 8, 8]))
    c = Constant(2, 4)  # every key collides: the second block is private
    release(c, _oracle_acquire(c, [1, 2, 3, 4]))
    release(c, [])
    c = Constant(2, 6)
    held, other = _oracle_acquire(c, [1, 2, 3, 4, 5, 6]), _oracle_acquire(c, [1, 2, 7, 7])
    release(c, held)
    release(c, other)
    nothing = lambda c, make: None  # noqa: E731
    _drive(Collide(4, 10), 35, 160, _oracle_acquire, release, nothing)
    _drive(Cache(4, 10), 34, 160, _oracle_acquire, release, nothing)
    _drive(Cache(2, 16), 36, 160, _oracle_acquire, release, nothing)


@check(points=4, title="引用计数", says="每次 release 每块恰好减 1；别的请求还在用的块保持使用中")
def check_todo13_refcount(ns):
    """Shared, chained, colliding and random requests: release takes exactly one reference a block."""
    _run_requests(ns, _refcounts)


@check(points=5, title="LRU 顺序", says="降到 0 的已登记块从尾到头排到可淘汰队列的队尾，原有的顺序不动")
def check_todo13_lru_order(ns):
    """Released blocks join the tail of the evictable queue, last block first."""
    _run_requests(ns, _lru_order)


@check(points=3, title="私有块", says="哈希碰撞之后没有登记的私有块降到 0 时回到空闲队列，不进可淘汰队列")
def check_todo13_private_blocks(ns):
    """A private block (not registered after a hash collision) goes back to the free queue, not to the evictable queue."""
    _run_requests(ns, _private_blocks)


@check(points=3, title="留在缓存", says="降到 0 的已登记块保留登记，进可淘汰队列而不回空闲队列")
def check_todo13_stays_cached(ns):
    """A registered block at 0 stays registered and evictable, for the next request to hit."""
    _run_requests(ns, _stays_cached)
