"""Hidden checks of part five (TODO 20-24, the engine): one function per grade cell.

Each check runs the TODO under test as the learner wrote it and every other TODO (and part four's
methods the engine inherits) as the reference's (`_Isolated`), so one mistake costs one TODO.
The bookkeeping TODOs (20-22) are compared with the references step by step on seeded random
workloads without a model; the attention read (23) against a request-by-request float64 oracle;
the step (24) and the whole engine against greedy decoding of one request at a time.
"""

import random

import torch

UNDER_TEST = {20: "BlockPool.get_new_blocks", 21: "KVCacheManager.allocate_slots"}
UNDER_TEST.update({22: "EngineScheduler._allocate_or_preempt", 23: "paged_attention", 24: "LLMEngine.step"})
TOTAL_POINTS = {20: 13, 21: 20, 22: 14, 23: 25, 24: 17}  # each TODO's points, shared by its checks
# Attention is compared with a float64 oracle within ATTENTION_TOLERANCE (float64 inputs): an
# implementation that computes in float32 (softmax or all of it) is about 1e-6 away, a wrong one 1e-1.
ATTENTION_TOLERANCE = 1e-4


def _pool_with_cached(ns, num_blocks, cached_ids, free_order):
    """A BlockPool (TODO 20 as written) whose blocks `cached_ids` carry hashes, every block free,
    the free queue in `free_order`."""
    pool = ns["BlockPool"](num_blocks)
    for block_id in cached_ids:
        pool.cache_full_block(pool.blocks[block_id], f"h{block_id}".encode())
    for block_id in free_order:
        pool.free_block_queue.move_to_end(block_id)
    return pool


# ---- TODO 20: taking blocks, lazy eviction ----


@check(points=3, title="从队首拿", says="按空闲队列的顺序拿块，ref_cnt 为 1，离开队列")
def check_todo20_queue_order(ns):
    """get_new_blocks takes blocks from the head of the free queue, in order, each held once."""
    with _Isolated(ns, 20):
        pool = _pool_with_cached(ns, 6, [], [4, 1, 5, 0, 3, 2])
        got = _call("get_new_blocks(4)", pool.get_new_blocks, 4)
        ids = [b.block_id for b in got] if isinstance(got, list) else got
        assert ids == [4, 1, 5, 0], (
            f"TODO 20: 空闲队列依次是 [4, 1, 5, 0, 3, 2]，get_new_blocks(4) 应返回块 [4, 1, 5, 0]（从队首拿），得到 {ids!r}"
        )
        assert [b.ref_cnt for b in got] == [1, 1, 1, 1] and list(pool.free_block_queue) == [3, 2], (
            f"TODO 20: 拿走的块 ref_cnt 应为 1、离开空闲队列：ref_cnt {[b.ref_cnt for b in got]}，"
            f"剩下的队列 {list(pool.free_block_queue)}（应为 [3, 2]）"
        )
        pool.free_blocks(reversed(got))
        again = [b.block_id for b in _call("get_new_blocks(2)", pool.get_new_blocks, 2)]
        assert again == [0, 5], (
            f"TODO 20: 释放后没登记的块回到队首（尾块在最前）：队列是 {[0, 5, 1, 4, 3, 2]}，get_new_blocks(2) 应为 [0, 5]，得到 {again}"
        )
        pool.check_integrity()


@check(points=3, title="惰性淘汰", says="拿走带 hash 的块时才注销它；没被拿走的缓存块仍能命中")
def check_todo20_lazy_eviction(ns):
    """A cached block with no users stays hittable until taken; taking it unregisters it."""
    with _Isolated(ns, 20):
        pool = _pool_with_cached(ns, 5, [0, 1, 2], [2, 3, 0, 1, 4])
        got = [b.block_id for b in _call("get_new_blocks(2)", pool.get_new_blocks, 2)]
        assert got == [2, 3], f"TODO 20: 空闲队列 [2, 3, 0, 1, 4]，get_new_blocks(2) 应为 [2, 3]，得到 {got}"
        block = pool.blocks[2]
        assert block.block_hash is None and pool.get_cached_block(b"h2") is None, (
            "TODO 20: 块 2 登记在缓存里（hash b'h2'），被 get_new_blocks 拿走后应注销："
            f"block_hash 应为 None（得到 {block.block_hash!r}），缓存表里不再有 b'h2'。用 self._maybe_evict_cached_block(block)"
        )
        assert pool.num_evictions == 1, f"TODO 20: 拿走一个登记过的块应计一次淘汰（num_evictions 应为 1），得到 {pool.num_evictions}"
        kept = [pool.get_cached_block(f"h{i}".encode()) for i in (0, 1)]
        assert kept == [pool.blocks[0], pool.blocks[1]], (
            "TODO 20: 块 0、1 没被拿走，应仍登记在缓存里（淘汰是惰性的：显存真被要走时才注销）"
        )
        pool.check_integrity()


@check(points=2, title="不够时", says="要的比空闲块多时抛 ValueError，什么都不改")
def check_todo20_not_enough(ns):
    """Asking for more blocks than are free raises ValueError and changes nothing."""
    with _Isolated(ns, 20):
        pool = _pool_with_cached(ns, 4, [1], [1, 0, 2, 3])
        taken = _call("get_new_blocks(3)", pool.get_new_blocks, 3)
        assert isinstance(taken, list) and [b.block_id for b in taken] == [1, 0, 2], (
            f"TODO 20: 空闲队列 [1, 0, 2, 3]，get_new_blocks(3) 应为块 [1, 0, 2]，得到 {taken!r}"
        )
        before = (list(pool.free_block_queue), [b.ref_cnt for b in pool.blocks], sorted(b.block_id for b in pool.cached_block_hash_to_block.cached_blocks()))
        try:
            pool.get_new_blocks(2)
        except ValueError:
            pass
        except Exception as error:  # noqa: BLE001  (any other error is the mistake this check names)
            raise AssertionError(f"TODO 20: 只剩 1 个空闲块时 get_new_blocks(2) 应抛 ValueError，得到 {type(error).__name__}: {error}") from None
        else:
            raise AssertionError("TODO 20: 只剩 1 个空闲块时 get_new_blocks(2) 应抛 ValueError，却没有抛")
        after = (list(pool.free_block_queue), [b.ref_cnt for b in pool.blocks], sorted(b.block_id for b in pool.cached_block_hash_to_block.cached_blocks()))
        assert after == before, f"TODO 20: 抛 ValueError 之前不应改任何状态：之前 {before[:2]}，之后 {after[:2]}"


@check(points=2, title="恰好够与 0 个", says="要的块数恰好等于空闲块数时全部拿走；要 0 个返回 []、不抛错")
def check_todo20_exact_and_zero(ns):
    """n == free blocks is enough (a `>=` refuses it); zero blocks is an empty list, on a full pool too."""
    with _Isolated(ns, 20):
        pool = _pool_with_cached(ns, 3, [2], [2, 0, 1])
        none = _call("get_new_blocks(0)（3 个空闲块）", pool.get_new_blocks, 0)
        assert none == [] and list(pool.free_block_queue) == [2, 0, 1], (
            f"TODO 20: get_new_blocks(0) 应返回 [] 且不动空闲队列，得到 {none!r}、队列 {list(pool.free_block_queue)}"
        )
        every = _call("get_new_blocks(3)（恰好 3 个空闲块）", pool.get_new_blocks, 3)
        ids = [b.block_id for b in every] if isinstance(every, list) else every
        assert ids == [2, 0, 1] and pool.get_num_free_blocks() == 0, (
            f"TODO 20: 空闲队列 [2, 0, 1]，get_new_blocks(3) 要的恰好是全部空闲块：应返回 [2, 0, 1]，得到 {ids!r}"
            "（够不够的比较是“多于空闲块才不够”，等于时是够的）"
        )
        none = _call("get_new_blocks(0)（没有空闲块）", pool.get_new_blocks, 0)
        assert none == [], f"TODO 20: 一个空闲块都没有时 get_new_blocks(0) 仍应返回 []（要 0 个总是够的），得到 {none!r}"
        pool.check_integrity()


@check(points=3, title="随机轨迹", says="共享前缀、小池子的随机负载：每步的空闲队列、块表、登记的块与参考实现相同")
def check_todo20_random(ns):
    """Seeded workloads on small pools, step by step against the references."""
    _compare_runs(ns, 20, seed=3420, workloads=12)


# ---- TODO 21: allocate_slots ----


def _request(ns, rid, prompt, computed=0, outputs=(), max_tokens=8):
    request = ns["Request"](rid, list(prompt), max_tokens)
    request.num_computed_tokens = computed
    request.output_token_ids = list(outputs)
    return request


@check(points=4, title="块数", says="按这一步的 token 要块：ceil((已算 + 新) / block_size) 减去已有的和命中的")
def check_todo21_block_count(ns):
    """allocate_slots takes exactly the blocks this step's tokens need, chunk after chunk."""
    with _Isolated(ns, 21):
        manager = ns["KVCacheManager"](10, 4, False)
        a = _request(ns, "a", range(13))
        for computed, new, want_new, want_table in [(0, 5, 2, 2), (5, 3, 0, 2), (8, 5, 2, 4), (13, 1, 0, 4)]:
            a.num_computed_tokens = computed
            got = _call(f"allocate_slots(已算 {computed}, 新 {new})", manager.allocate_slots, a, new)
            table = manager.get_block_ids("a")
            assert isinstance(got, list) and len(got) == want_new and len(table) == want_table, (
                f"TODO 21: block_size=4，13 个 token 的请求已算 {computed} 个、这一步 {new} 个：应新拿 {want_new} 个块、"
                f"块表共 {want_table} 个块；得到新块 {got if not isinstance(got, list) else [b.block_id for b in got]}、块表 {table}"
            )
        assert manager.block_pool.get_num_free_blocks() == 6, (
            f"TODO 21: 池里 10 个块、请求用了 4 个，应剩 6 个空闲块，得到 {manager.block_pool.get_num_free_blocks()}"
        )


@check(points=3, title="空闲的命中块", says="命中的块里 ref_cnt 为 0 的也要从空闲块里拿走：算够不够时把它们算上")
def check_todo21_evictable_hits(ns):
    """Evictable hit blocks count against the free blocks: not enough, None and nothing changed."""
    with _Isolated(ns, 21):
        manager = ns["KVCacheManager"](3, 2)
        _cached_then_freed(ns, manager, [1, 2, 3, 4, 5])  # 块 0、1 登记过，空闲队列 [2, 1, 0]
        b = _request(ns, "b", [1, 2, 3, 4, 9, 9, 9], max_tokens=1)
        hits, _ = manager.get_computed_blocks(b)
        before = _manager_state(manager)
        try:
            got = manager.allocate_slots(b, 3, hits)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001  (e.g. get_new_blocks refusing: the mistake this check names)
            got = f"{type(error).__name__}: {error}"
        assert got is None and _manager_state(manager) == before, (
            "TODO 21: 3 个块的池，b 命中块 [0, 1]（此刻没人用、在空闲队列里），还要 ceil(7 / 2) - 2 = 2 个新块："
            f"命中的块也要从空闲队列里拿走，2 + 2 > 3，应返回 None 且不改状态；得到 {got!r}"
        )
        manager = ns["KVCacheManager"](4, 2)
        _cached_then_freed(ns, manager, [1, 2, 3, 4, 5])
        hits, _ = manager.get_computed_blocks(b)
        got = _call("allocate_slots(b, 3, 命中的 2 块)（4 个空闲块）", manager.allocate_slots, b, 3, hits)
        assert isinstance(got, list) and len(got) == 2, (
            f"TODO 21: 4 个块的池，b 命中 2 个空闲块、还要 2 个新块：2 + 2 = 4 恰好够，应新拿 2 个块，得到 {got!r}"
        )
        manager = ns["KVCacheManager"](4, 2)
        a = _request(ns, "a", [1, 2, 3, 4, 5], max_tokens=2)
        _r_allocate_slots(manager, a, 5)  # 参考实现：a 占着块 0、1、2（0、1 登记过、正在用）
        c = _request(ns, "c", [1, 2, 3, 4, 8, 8], max_tokens=1)
        hits, _ = manager.get_computed_blocks(c)
        got = _call("allocate_slots(c, 2, 命中的 2 块)（命中的块正被 a 用着）", manager.allocate_slots, c, 2, hits)
        assert isinstance(got, list) and len(got) == 1 and manager.get_block_ids("c")[:2] == manager.get_block_ids("a")[:2], (
            "TODO 21: 4 个块的池，a 正用着块 0、1、2；c 命中 a 的块 0、1（ref_cnt 为 1，不在空闲队列里），还要 1 个新块："
            f"只有 ref_cnt 为 0 的命中块才占空闲名额，1 ≤ 1 够，应新拿 1 个块、块表以命中的 {manager.get_block_ids('a')[:2]} 开头；"
            f"得到 {[b.block_id for b in got] if isinstance(got, list) else got!r}，块表 {manager.get_block_ids('c')}"
        )


@check(points=3, title="先 touch", says="先 touch 命中的块再 get_new_blocks：命中的块排在队首时也不会被当作新块拿走")
def check_todo21_touch_first(ns):
    """Hits are touched before new blocks are taken, so a hit is never evicted for its own request."""
    with _Isolated(ns, 21):
        b = _request(ns, "b", [1, 2, 3, 4, 9, 9, 9], max_tokens=1)
        manager = ns["KVCacheManager"](4, 2)
        _cached_then_freed(ns, manager, [1, 2, 3, 4])
        for block_id in (1, 0):  # 命中的块排到队首：最先被拿走的就是它们
            manager.block_pool.free_block_queue.move_to_end(block_id, last=False)
        hits, _ = manager.get_computed_blocks(b)
        got = _call("allocate_slots(b, 3, 命中的 2 块)", manager.allocate_slots, b, 3, hits)
        table = manager.get_block_ids("b")
        assert isinstance(got, list) and table[:2] == [0, 1] and sorted(table) == [0, 1, 2, 3], (
            f"TODO 21: 空闲队列 [0, 1, 2, 3]，b 命中块 [0, 1]、这一步 3 个 token：块表应为命中的 [0, 1] 接上新块 [2, 3]，得到 {table}："
            "先 touch 命中的块再 get_new_blocks，否则命中的块会被当作最先淘汰的块拿走"
        )
        assert [manager.block_pool.blocks[i].ref_cnt for i in table] == [1, 1, 1, 1], (
            f"TODO 21: b 的四个块 ref_cnt 都应为 1，得到 {[manager.block_pool.blocks[i].ref_cnt for i in table]}"
        )
        manager.block_pool.check_integrity()


def _manager_state(manager):
    pool = manager.block_pool
    return (
        list(pool.free_block_queue),
        [b.ref_cnt for b in pool.blocks],
        {rid: [b.block_id for b in blocks] for rid, blocks in manager.req_to_blocks.items()},
        sorted(b.block_id for b in pool.cached_block_hash_to_block.cached_blocks()),
        dict(manager.num_cached_block),
    )


@check(points=3, title="不够时不改", says="返回 None 时块表、ref_cnt、空闲队列、登记都不变；请求已有块时也一样")
def check_todo21_unchanged_on_failure(ns):
    """A failed allocation leaves every piece of state as it was, for a running request and a new one."""
    with _Isolated(ns, 21):
        manager = ns["KVCacheManager"](5, 2)
        _cached_then_freed(ns, manager, [1, 2, 3, 4])  # 块 0、1 登记过、空闲
        a = _request(ns, "a", [7, 7, 7, 7, 7, 7, 7, 7, 7], max_tokens=3)
        _call("allocate_slots(a, 3)", manager.allocate_slots, a, 3)
        a.num_computed_tokens = 3
        before = _manager_state(manager)
        got = _call("allocate_slots(a, 20)（已有 2 块、已算 3 个）", manager.allocate_slots, a, 20)
        assert got is None and _manager_state(manager) == before, (
            f"TODO 21: a 已有 2 个块、已算 3 个 token，这一步要 20 个：共要 12 个块，池里只剩 3 个空闲块，应返回 None 且不改任何状态；"
            f"得到 {got!r}，状态（空闲队列、ref_cnt、块表、登记的块、num_cached_block）之前 {before}，之后 {_manager_state(manager)}"
        )
        b = _request(ns, "b", [1, 2, 3, 4, 5, 6, 7, 8, 9, 9], max_tokens=1)
        hits, _ = manager.get_computed_blocks(b)
        before = _manager_state(manager)
        got = _call("allocate_slots(b, 6, 命中的 2 块)", manager.allocate_slots, b, 6, hits)
        assert got is None and _manager_state(manager) == before, (
            f"TODO 21: b 命中 2 个空闲块、还要 3 个新块，池里只有 3 个空闲块（命中的 2 个也在里面）：应返回 None，"
            f"不 touch 命中的块、不存块表；得到 {got!r}，状态之前 {before}，之后 {_manager_state(manager)}"
        )


def _cached_then_freed(ns, manager, prompt):
    """A request computes `prompt` in one step and finishes: its full blocks stay cached, free."""
    request = _request(ns, "first", prompt, max_tokens=1)
    _r_allocate_slots(manager, request, len(prompt))  # the reference: only the state is set up here
    request.num_computed_tokens = len(prompt)
    manager.free(request)


@check(points=3, title="分配时登记", says="这一步算满的块在分配时就登记，同一步后到的请求能命中；不满的块不登记")
def check_todo21_cache_at_allocation(ns):
    """Full blocks are registered when allocated, so a request arriving while another still
    prefills the same prefix hits them; partial blocks are not registered; caching off registers none."""
    with _Isolated(ns, 21):
        system = [7, 3, 9, 1, 4, 4, 2, 8, 6, 5, 0, 2]
        manager = ns["KVCacheManager"](20, 4)
        a = _request(ns, "a", system + [1, 1])
        _call("allocate_slots(a, 6)", manager.allocate_slots, a, 6)  # 这一步只算 6 个 token：第一块满了
        b = _request(ns, "b", system + [2, 2, 2])
        hits, num_hit = manager.get_computed_blocks(b)
        assert num_hit == 4, (
            f"TODO 21: a（14 个 token）这一步分到 6 个 token、block_size=4：第一块这一步就会算满，分配时就应登记，"
            f"同一段前缀的 b 应命中 4 个 token，得到 {num_hit}（分配时没有调用 self.cache_blocks？）"
        )
        a.num_computed_tokens = 6
        _call("allocate_slots(a, 8)", manager.allocate_slots, a, 8)
        hits, num_hit = manager.get_computed_blocks(b)
        assert num_hit == 12, f"TODO 21: a 的 prompt 算完之后 b 应命中 12 个 token（3 个满块），得到 {num_hit}"
        cached = len(manager.block_pool.cached_block_hash_to_block)
        assert cached == 3, f"TODO 21: a 有 14 个 token：只有 3 个满块可登记，最后不满的块不登记；缓存表里有 {cached} 个块"
        off = ns["KVCacheManager"](20, 4, False)
        _call("allocate_slots(关掉前缀缓存)", off.allocate_slots, _request(ns, "c", system), 12)
        assert not off.block_pool.cached_block_hash_to_block, "TODO 21: 前缀缓存关掉时不应登记任何块"


@check(points=4, title="随机轨迹", says="共享前缀、小池子的随机负载：每步的块表、空闲队列、登记的块与参考实现相同")
def check_todo21_random(ns):
    """Seeded workloads on small pools, step by step against the references."""
    _compare_runs(ns, 21, seed=3421, workloads=20)


# ---- TODO 22: preemption ----


def _three_running_then_d(ns):
    """6 blocks of 2 tokens: a, b, c each hold 2 blocks and decoded once, d and e wait; a is next to ask for a block."""
    manager, sched = _engine_parts(ns, 6, 2, 100, 4)
    for rid in "abc":
        sched.add_request(ns["Request"](rid, [ord(rid)] * 4, 6))
    for rid in "de":
        sched.add_request(ns["Request"](rid, [1, 2], 2))
    first = sched.schedule()  # a、b、c 各 2 块，d、e 排不上
    sched.update_from_output(first, {rid: 5 for rid in first.num_scheduled_tokens})
    return manager, sched


@check(points=3, title="抢占谁", says="抢占 running 里最后接纳的请求：块释放、num_computed_tokens 归零、已生成的 token 留着")
def check_todo22_victim(ns):
    """The last-admitted running request is preempted: its blocks freed, its progress reset; the
    first request keeps running."""
    with _Isolated(ns, 22):
        manager, sched = _three_running_then_d(ns)
        out = sched.schedule()
        assert out.preempted_req_ids == ["c"], (
            f"TODO 22: 6 个块的池里 a、b、c 各占 2 块，a 要第 3 块：应抢占最后接纳的 c；得到被抢占的 {out.preempted_req_ids}"
        )
        c = next((r for r in sched.waiting if r.request_id == "c"), None)
        assert c is not None and c.num_computed_tokens == 0 and manager.get_block_ids("c") == [] and c.output_token_ids == [5], (
            f"TODO 22: 被抢占的 c 应回到 waiting（得到 waiting {[r.request_id for r in sched.waiting]}）、num_computed_tokens 归零"
            f"（得到 {getattr(c, 'num_computed_tokens', None)}）、块释放（块表 {manager.get_block_ids('c')}），已生成的 token 留着"
        )
        assert [r.request_id for r in sched.running] == ["a", "b"] and dict(out.num_scheduled_tokens) == {"a": 1, "b": 1}, (
            f"TODO 22: 抢占 c 之后 a、b 的 decode 都排得上，应调度 {{'a': 1, 'b': 1}}、running 为 [a, b]；"
            f"得到 {dict(out.num_scheduled_tokens)}、running {[r.request_id for r in sched.running]}"
        )
        assert sched.num_preemptions == 1, (
            f"TODO 22: 这一步只抢占了 c 一次，schedule() 已按 out.preempted_req_ids 记数，sched.num_preemptions 应为 1，"
            f"得到 {sched.num_preemptions}（engine.stats 的抢占次数会跟着错）"
        )


@check(points=3, title="放回队头", says="被抢占的请求放回 waiting 的队头，排在所有还在等的请求前面")
def check_todo22_requeue(ns):
    """With two requests already waiting, the preempted one goes ahead of both."""
    with _Isolated(ns, 22):
        _, sched = _three_running_then_d(ns)
        sched.schedule()
        order = [r.request_id for r in sched.waiting]
        assert order == ["c", "d", "e"], (
            f"TODO 22: waiting 里已有 d、e，被抢占的 c 应放回队头（self.waiting.appendleft），waiting 应为 [c, d, e]，得到 {order}"
        )


@check(points=3, title="抢到自己", says="当前请求自己是最后一个时它被抢占，返回 False，这一步不再排 running")
def check_todo22_self(ns):
    """When the request asking for blocks is itself the last-admitted, it is preempted and the
    call returns False."""
    with _Isolated(ns, 22):
        manager, sched = _engine_parts(ns, 3, 2, 100, 4)
        a = ns["Request"]("a", [1, 2, 3, 4], 4)
        sched.add_request(a)
        sched.schedule()
        a.num_computed_tokens, a.output_token_ids = 4, [9]  # a 占满 2 块
        _r_allocate_slots(manager, ns["Request"]("x", [5, 6], 1), 2)  # 第 3 块被别处占着（不在 running 里）
        out = ns["EngineSchedulerOutput"]()
        got = _call("_allocate_or_preempt(a, 1, out)", sched._allocate_or_preempt, a, 1, out)
        assert got is False and out.preempted_req_ids == ["a"] and list(sched.waiting) == [a] and sched.running == [], (
            f"TODO 22: running 里只有 a，它要第 3 块却没有空闲块：应抢占 a 自己并返回 False（a 回到 waiting 队头，记进 "
            f"out.preempted_req_ids）；得到返回值 {got!r}、preempted_req_ids={out.preempted_req_ids}、"
            f"waiting={[r.request_id for r in sched.waiting]}、running={[r.request_id for r in sched.running]}"
        )
        fine = ns["EngineSchedulerOutput"]()
        sched2_manager, sched2 = _engine_parts(ns, 4, 2, 100, 4)
        b = ns["Request"]("b", [1, 2, 3], 2)
        sched2.running.append(b)
        got = _call("_allocate_or_preempt(b, 3, out)", sched2._allocate_or_preempt, b, 3, fine)
        assert got is True and fine.preempted_req_ids == [] and len(sched2_manager.get_block_ids("b")) == 2, (
            f"TODO 22: 池子够时应直接分配（2 个块）并返回 True、不抢占，得到 {got!r}、被抢占 {fine.preempted_req_ids}"
        )


@check(points=2, title="两个牺牲者", says="抢占一个还不够时接着抢占下一个，直到分配成功")
def check_todo22_two_victims(ns):
    """One victim does not free enough: the next-to-last is preempted too, then the allocation succeeds."""
    with _Isolated(ns, 22):
        manager, sched = _engine_parts(ns, 3, 2, 100, 4)
        a, b, c = (ns["Request"](rid, [n] * 6, 2) for n, rid in enumerate("abc"))
        for request in (a, b, c):
            _r_allocate_slots(manager, request, 2)  # 每个请求 1 块，池子满了
            request.num_computed_tokens = 2
            sched.requests[request.request_id] = request
            sched.running.append(request)
        out = ns["EngineSchedulerOutput"]()
        got = _call("_allocate_or_preempt(a, 4, out)", sched._allocate_or_preempt, a, 4, out)
        order = [r.request_id for r in sched.waiting]
        assert got is True and out.preempted_req_ids == ["c", "b"] and order == ["b", "c"], (
            "TODO 22: a、b、c 各占 1 块、池子满了，a 这一步 4 个 token 要 2 个新块：抢占 c 只空出 1 块，还要接着抢占 b，然后分配成功、返回 True；"
            f"waiting 应为 [b, c]（后抢占的在队头）。得到返回值 {got!r}、被抢占 {out.preempted_req_ids}、waiting {order}"
        )
        assert len(manager.get_block_ids("a")) == 3 and [r.request_id for r in sched.running] == ["a"], (
            f"TODO 22: 分配成功后 a 应有 3 个块、running 只剩 a；得到块表 {manager.get_block_ids('a')}、running {[r.request_id for r in sched.running]}"
        )


@check(points=3, title="随机轨迹", says="小池子里的随机负载：每步的调度、抢占、块表与参考实现相同")
def check_todo22_random(ns):
    """Seeded workloads on small pools, step by step against the references."""
    _compare_runs(ns, 22, seed=3422, workloads=25)


# ---- TODO 23: the paged attention read ----


def _random_step(rng, num_heads=2, num_kv_heads=2, head_dim=8, block_size=4, num_blocks=24, dtype=torch.float64):
    """A pool with random K/V and a step of several requests on scattered blocks."""
    gen = torch.Generator().manual_seed(rng.randrange(10**6))
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = torch.randn(shape, generator=gen, dtype=dtype), torch.randn(shape, generator=gen, dtype=dtype)
    free = list(range(num_blocks))
    rng.shuffle(free)
    tables, seq_lens, query_lens, token_request, token_index = [], [], [], [], []
    for r in range(rng.randint(1, 4)):
        length = rng.randint(1, 4 * block_size)
        queries = rng.choice([1, 1, length, rng.randint(1, length)])
        tables.append([free.pop() for _ in range((length + block_size - 1) // block_size)])
        seq_lens.append(length)
        query_lens.append(queries)
        token_request += [r] * queries
        token_index += list(range(queries))
    width = max(len(t) for t in tables)
    meta = _meta(tables, width, seq_lens, query_lens, token_request, token_index)
    q = torch.randn(len(token_request), num_heads, head_dim, generator=gen, dtype=dtype)
    return q, k_cache, v_cache, meta


def _meta(tables, width, seq_lens, query_lens, token_request, token_index):
    """The metadata as a plain object (the check does not rely on the notebook's dataclass)."""

    def long(values):
        return torch.tensor(values, dtype=torch.long)

    meta = type("Meta", (), {})()
    meta.block_table = long([t + [0] * (width - len(t)) for t in tables])
    meta.seq_lens, meta.query_lens = long(seq_lens), long(query_lens)
    meta.token_request, meta.token_index = long(token_request), long(token_index)
    meta.max_query_len = max(query_lens)
    meta.slot_mapping = long([0] * len(token_request))
    return meta


def _attention_matches(ns, seed, cases, **shape):
    rng = random.Random(seed)
    for _ in range(cases):
        q, k_cache, v_cache, meta = _random_step(rng, **shape)
        want = _r_paged_attention(q, k_cache, v_cache, meta)
        got = _quietly("paged_attention(q, k_cache, v_cache, meta)", ns["paged_attention"], q, k_cache, v_cache, meta)
        where = (
            f"块表 {meta.block_table.tolist()}、seq_lens {meta.seq_lens.tolist()}、query_lens {meta.query_lens.tolist()}、"
            f"q {tuple(q.shape)}、池 {tuple(k_cache.shape)}"
        )
        assert isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(q.shape), (
            f"TODO 23: {where}：应返回形状 {tuple(q.shape)} 的张量，得到 {tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}"
        )
        gap = (got.double() - want.double()).abs().max().item()
        assert gap < ATTENTION_TOLERANCE, (
            f"TODO 23: {where}：与逐个请求算的注意力最大相差 {gap:.2e}。查询 i 的位置是 seq_lens - query_lens + i，"
            "它只看自己请求里位置不超过它的键；K/V 按块表从池里取"
        )


@check(points=6, title="decode", says="每个请求 1 个查询：按块表读出全部上文")
def check_todo23_decode(ns):
    """Decodes only: each query sees its request's whole context, read through scattered blocks."""
    rng = random.Random(3423)
    for _ in range(15):
        q, k_cache, v_cache, meta = _random_step(rng)
        meta.query_lens = torch.ones_like(meta.query_lens)
        meta.token_request = torch.arange(meta.block_table.shape[0])
        meta.token_index = torch.zeros_like(meta.token_request)
        meta.max_query_len = 1
        gen = torch.Generator().manual_seed(rng.randrange(10**6))
        q = torch.randn(len(meta.token_request), q.shape[1], q.shape[2], generator=gen, dtype=q.dtype)
        want = _r_paged_attention(q, k_cache, v_cache, meta)
        got = _quietly("paged_attention(decode)", ns["paged_attention"], q, k_cache, v_cache, meta)
        ok = isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(q.shape)
        gap = (got.double() - want).abs().max().item() if ok else float("inf")
        assert gap < ATTENTION_TOLERANCE, (
            f"TODO 23: 只有 decode（每个请求 1 个查询）、块表 {meta.block_table.tolist()}、seq_lens {meta.seq_lens.tolist()}："
            f"结果与逐个请求算的注意力不同（最大相差 {gap:.2e}）：每个查询看它请求的全部 seq_lens 个键，按块表的槽号取"
        )


@check(points=9, title="分块与偏移", says="prefill 块、decode 混在一步：因果掩码的偏移是已算好的 token 数")
def check_todo23_chunks(ns):
    """Prefill chunks starting mid-sequence and decodes in one step: causal offsets per request."""
    _attention_matches(ns, 3430, 25)
    _attention_matches(ns, 3431, 8, num_heads=3, num_kv_heads=3, head_dim=4, block_size=3)


@check(points=5, title="GQA", says="多个查询头共用一个 KV 头：第 h 个查询头用第 h // (num_heads // num_kv_heads) 个")
def check_todo23_gqa(ns):
    """Query heads share KV heads in groups (repeat_interleave order), with 2 and 3 heads a group."""
    rng = random.Random(3432)
    for num_heads, num_kv_heads in ((8, 2), (6, 3), (4, 2)):
        q, k_cache, v_cache, meta = _random_step(rng, num_heads=num_heads, num_kv_heads=num_kv_heads)
        want = _r_paged_attention(q, k_cache, v_cache, meta)
        got = _quietly(f"paged_attention({num_heads} 个查询头 / {num_kv_heads} 个 KV 头)", ns["paged_attention"], q, k_cache, v_cache, meta)
        ok = isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(q.shape)
        gap = (got.double() - want).abs().max().item() if ok else float("inf")
        assert gap < ATTENTION_TOLERANCE, (
            f"TODO 23: {num_heads} 个查询头、{num_kv_heads} 个 KV 头：第 h 个查询头用第 h // {num_heads // num_kv_heads} 个 KV 头"
            f"（相邻的查询头共用一个 KV 头：repeat_interleave，不是 repeat），最大相差 {gap:.2e}"
            + ("" if ok else f"；应返回形状 {tuple(q.shape)} 的张量，得到 {tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        )


@check(points=5, title="半精度", says="bfloat16 / float32 的输入：结果的 dtype 同 q、数值在半精度误差之内；只读池")
def check_todo23_half_precision(ns):
    """The output's dtype is q's (a float32 result breaks o_proj of a bf16 model on a GPU); the pool is only read."""
    rng = random.Random(3433)
    for dtype, tolerance in ((torch.bfloat16, 5e-2), (torch.float32, ATTENTION_TOLERANCE)):
        q, k_cache, v_cache, meta = _random_step(rng, num_heads=4, num_kv_heads=2, dtype=dtype)
        saved = (k_cache.clone(), v_cache.clone())
        got = _quietly(f"paged_attention({dtype})", ns["paged_attention"], q, k_cache, v_cache, meta)
        assert isinstance(got, torch.Tensor) and got.dtype == dtype and tuple(got.shape) == tuple(q.shape), (
            f"TODO 23: q、k_cache、v_cache 是 {dtype} 时结果应是形状 {tuple(q.shape)} 的 {dtype}，"
            f"得到 {getattr(got, 'dtype', type(got).__name__)} {tuple(getattr(got, 'shape', ()))}"
            "（在 float32 里算 softmax 可以，返回前转回 q.dtype）"
        )
        assert torch.equal(k_cache, saved[0]) and torch.equal(v_cache, saved[1]), "TODO 23: paged_attention 只读池，不应改 k_cache / v_cache"
        want = _r_paged_attention(q.double(), k_cache.double(), v_cache.double(), meta)
        gap = (got.double() - want).abs().max().item()
        assert gap < tolerance, f"TODO 23: {dtype} 的输入：与 float64 的逐个请求注意力最大相差 {gap:.2e}，超过 {tolerance:g}"


# ---- TODO 24: the step ----


@check(points=5, title="生成的 token", says="step 返回追上的请求采样的 token；generate 与逐个贪心解码相同")
def check_todo24_tokens(ns):
    """Every prompt's tokens equal greedy decoding alone; step returns only requests that sampled."""
    model = _tiny_model(ns)
    prompts = _chat_prompts(3424)
    with _Isolated(ns, 24):
        engine = ns["LLMEngine"](model, num_blocks=80, block_size=4, max_num_batched_tokens=8, max_num_seqs=3)
        engine.add_request("long", prompts[0], 2)
        first = _call("step()", engine.step)
        assert first == {}, f"TODO 24: 预算 8、prompt {len(prompts[0])} 个 token：第一步只算了 prompt 的一部分，step 应返回 {{}}，得到 {first!r}"
        while engine.has_unfinished_requests():
            _call("step()", engine.step)
        got = _call("generate", engine.generate, prompts, 3)
    want = [_greedy(model, p, 3) for p in prompts]
    assert got == want, f"TODO 24: generate 的结果 {got} 与逐个请求贪心解码的 {want} 不同"


@check(points=4, title="释放", says="结束的请求在它结束的那一步释放块；全部结束后池子全空")
def check_todo24_frees(ns):
    """A finished request's blocks go back in the step it finishes; at the end every block is free."""
    model = _tiny_model(ns)
    with _Isolated(ns, 24):
        engine = ns["LLMEngine"](model, num_blocks=12, block_size=4, max_num_batched_tokens=64, max_num_seqs=4)
        engine.add_request("short", [1, 2, 3, 4, 5], 1)
        engine.add_request("long", [6, 7, 8, 9, 10, 11], 3)
        sampled = _call("step()", engine.step)
        pool = engine.kv_cache_manager.block_pool
        left = engine.kv_cache_manager.get_block_ids("short")
        assert set(sampled) == {"short", "long"} and left == [], (
            f"TODO 24: 第一步两个请求都算完 prompt 并采样；short 的 max_tokens=1，这一步就结束，块应立刻释放："
            f"step 返回 {sampled!r}，short 的块表 {left}"
        )
        while engine.has_unfinished_requests():
            _call("step()", engine.step)
        assert pool.get_num_free_blocks() == 12, f"TODO 24: 全部请求结束后 12 个块都应空闲，得到 {pool.get_num_free_blocks()} 个"
        pool.check_integrity()


@check(points=3, title="统计", says="小池子里要抢占、要淘汰的一批请求：每步返回的 token 和引擎的统计与参考实现相同")
def check_todo24_stats(ns):
    """A small pool that preempts and evicts: every step's result and the stats equal the reference engine's."""
    model = _tiny_model(ns)
    prompts = _chat_prompts(3425, count=4)
    runs = []
    for todo in (None, 24):
        with _Isolated(ns, todo):
            engine = ns["LLMEngine"](model, num_blocks=14, block_size=4, max_num_batched_tokens=12, max_num_seqs=3)
            for n, prompt in enumerate(prompts):
                engine.add_request(f"p{n}", prompt, 3)
            steps = []
            while engine.has_unfinished_requests() and len(steps) < 200:
                steps.append(_call("step()", engine.step))
            runs.append((steps, engine.stats))
    (want_steps, want_stats), (got_steps, got_stats) = runs
    assert got_steps == want_steps, f"TODO 24: 14 个块的小池子、预算 12：每步 step() 的返回应依次为 {want_steps}，得到 {got_steps}"
    assert got_stats == want_stats, f"TODO 24: 跑完之后 engine.stats 应为 {want_stats}，得到 {got_stats}"


@check(points=3, title="空闲的引擎", says="没有请求、或全部请求都已结束时，step() 返回 {}，不抛错")
def check_todo24_idle(ns):
    """An idle engine's step returns an empty dict, before any request and after all finished."""
    model = _tiny_model(ns)
    with _Isolated(ns, 24):
        engine = ns["LLMEngine"](model, num_blocks=8, block_size=4)
        got = _call("step()（引擎里没有请求）", engine.step)
        assert got == {} and type(got) is dict, f"TODO 24: 引擎里没有请求时 step() 应返回 {{}}，得到 {got!r}"
        engine.add_request("x", [3, 1, 4], 1)
        first = _call("step()", engine.step)
        again = _call("step()（请求都已结束）", engine.step)
        assert list(first) == ["x"] and again == {}, (
            f"TODO 24: 一个 max_tokens=1 的请求：第一步采样它的 token（得到 {first!r}），之后引擎空闲，step() 应返回 {{}}（得到 {again!r}）"
        )


@check(points=2, title="卡住的引擎", says="还有没结束的请求、这一步却一个 token 也没排上时抛 RuntimeError，不空转")
def check_todo24_stuck(ns):
    """A step that schedules nothing while a request is unfinished raises RuntimeError (generate would spin)."""
    model = _tiny_model(ns)
    with _Isolated(ns, 24):
        engine = ns["LLMEngine"](model, num_blocks=4, block_size=4)
        engine.kv_cache_manager.block_pool.get_new_blocks(4)  # 别处（记账出错）占着全部块
        engine.add_request("x", [3, 1, 4], 2)
        try:
            got = engine.step()
        except NotImplementedError:  # a subclass of RuntimeError: the untouched stub must not pass
            raise
        except RuntimeError:
            return
        except Exception as error:  # noqa: BLE001  (any other error is the mistake this check names)
            got = f"{type(error).__name__}: {error}"
        raise AssertionError(
            f"TODO 24: 请求 x 没结束，但池里没有空闲块，schedule() 一个 token 也没排上：step() 应抛 RuntimeError，"
            f"否则 generate 会一直空转；得到 {got!r}"
        )
