"""Hidden checks of TODO 11, `BlockPrefixCache.match`: one function per grade cell, each given the notebook's namespace.

Only the learner's `match` runs; caches are filled with a reference acquire and release written here,
so a mistake in TODO 12-14 costs TODO 11 nothing. The expected answer comes from a brute-force
oracle that rebuilds each registered block's whole prefix from the parent_key chain.
Points: basic 3, chain 2, collisions 3, pure_query 2 (10 in all).
"""

import random as _random

_TODO = "TODO 11"


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


def _content_match(c, tokens):
    """Brute force: every registered block names the whole prefix up its parent_key chain; compare token by token."""
    by_key = {b.key: b for b in c.blocks if b.key is not None}
    index = {}
    for b in by_key.values():
        parts, cur, complete = [], b, False
        for _ in range(len(by_key)):
            parts.append(cur.token_ids)
            if cur.parent_key is None:
                complete = True
                break
            cur = by_key.get(cur.parent_key)
            if cur is None:
                break
        if complete:
            index[tuple(t for part in reversed(parts) for t in part)] = b.block_id
    found = []
    for n in range(1, len(tokens) // c.block_size + 1):
        b = index.get(tuple(tokens[: n * c.block_size]))
        if b is None:
            break
        found.append(b)
    return found


def _explain(c, tokens, got, expected):
    """The cause of a wrong match result, read from the blocks it returned."""
    size = c.block_size
    chunks = [tuple(tokens[i * size : (i + 1) * size]) for i in range(len(tokens) // size)]
    if not isinstance(got, list):
        return f"match 应返回 list，得到 {type(got).__name__}"
    if not all(type(b) is int for b in got):
        return "block id 应是 int（self._cached 里存的值）"
    parent = None
    for i, b in enumerate(got):
        if not 0 <= b < c.num_blocks:
            return f"第 {i} 个元素 {b} 不是块池里的 block id"
        if i >= len(chunks):
            return f"prompt 只有 {len(chunks)} 个满块，却返回了 {len(got)} 个 block id：不满一块的尾巴不参与匹配"
        block = c.blocks[b]
        if block.token_ids != chunks[i]:
            if block.token_ids in chunks[i + 1 :]:
                return (
                    f"第 {i} 块没有命中，match 却跳过它接着匹配后面的块（返回的块 {b} 存的是后面的 {block.token_ids}）："
                    "第一次不命中就要停下，链上缺了一块，后面的块就不再是同一个前缀"
                )
            return (
                f"第 {i} 块返回了块 {b}，它存的 token 是 {block.token_ids}，查询的第 {i} 块是 {chunks[i]}："
                "key 相同不代表内容相同（哈希可能碰撞），命中时要核对块里存的 token_ids 和 parent_key"
            )
        if block.parent_key != parent:
            return (
                f"第 {i} 块返回了块 {b}，token 相同，但它的 parent_key 是 {block.parent_key}，不是上一块的 key {parent}："
                "命中时还要核对 parent_key（同样的 token 出现在别的前缀后面，是另一个块）"
            )
        parent = block.key
    if len(got) < len(expected) and got == expected[: len(got)]:
        i = len(got)
        return (
            f"第 {i} 块应命中块 {expected[i]}，match 却在这里停下了：每块的 key 要用 "
            "self._hash_block(上一块的 key, 本块的 tokens) 计算（首块的父 key 为 None），与 insert 登记时一致"
        )
    return "返回的块不是最长的已缓存满块前缀"


def _check(c, tokens, what):
    """match(tokens) equals the brute-force oracle, twice, and changes nothing."""
    before = _snapshot(c)
    label = f"{what}，block_size={c.block_size}"
    try:
        got = c.match(tokens)
    except NotImplementedError:
        raise
    except Exception as exc:
        raise AssertionError(f"{_TODO} [{label}]: match({tokens}) 抛出了 {type(exc).__name__}: {exc}") from None
    expected = _content_match(c, tokens)
    assert _same_ints(got, expected), (
        f"{_TODO} [{label}]: match({tokens}) 应返回 {expected}，得到 {got}：{_explain(c, tokens, got, expected)}"
    )
    assert _snapshot(c) == before, (
        f"{_TODO} [{label}]: match({tokens}) 改变了缓存（块、引用计数、空闲/可淘汰队列或统计）：match 是纯查询"
    )
    again = c.match(tokens)
    assert _same_ints(again, expected), f"{_TODO} [{label}]: 同一个查询 match({tokens}) 第二次返回 {again}，第一次是 {expected}"


@_named("基本")
def check_basic(ns):
    """Whole and partial hits from the first block on; the partial tail, an empty prompt and a shifted prompt miss."""
    Cache, _, _ = _classes(ns)
    c = Cache(4, 16)
    first = _oracle_acquire(c, list(range(1, 11)))
    _oracle_acquire(c, [1, 2, 3, 4, 9, 9, 9, 9])
    cases = (
        (list(range(1, 11)), "登记过的 10 个 token（两个满块 + 尾巴）"),
        (list(range(1, 9)), "恰好两个满块"),
        (list(range(1, 14)), "两个满块之后还有没登记的块"),
        ([1, 2, 3, 4, 0, 0, 0, 0], "第二块内容不同"),
        ([1, 2, 3, 4, 9, 9, 9, 9, 1], "另一条分支"),
        ([0] + list(range(1, 11)), "前面多一个 token：只能从开头逐块匹配"),
        ([1, 2, 3], "不满一块"),
        ([], "空 prompt"),
    )
    for tokens, what in cases:
        _check(c, tokens, what)
    got = c.match(list(range(1, 11)))
    assert _same_ints(got, first), f"{_TODO}: match(list(range(1, 11))) 应返回 acquire 得到的块 {first}，得到 {got}"


@_named("哈希链")
def check_chain(ns):
    """Equal blocks at different positions: only the key chain (parent key + tokens) tells them apart."""
    Cache, _, _ = _classes(ns)
    c = Cache(2, 8)
    _oracle_acquire(c, [5, 5, 5, 5, 5, 5])
    for tokens, what in (
        ([5, 5, 5, 5, 5, 5, 5], "三块 token 相同：(5, 5) (5, 5) (5, 5)"),
        ([5, 5, 5, 5], "前两块"),
    ):
        _check(c, tokens, what)
    c = Cache(2, 8)
    _oracle_acquire(c, [1, 1, 5, 5])
    _oracle_acquire(c, [2, 2, 5, 5])
    for tokens, what in (([2, 2, 5, 5], "第二块 (5, 5) 接在不同的首块后面"), ([3, 3, 5, 5], "首块没登记")):
        _check(c, tokens, what)


@_named("碰撞")
def check_collisions(ns):
    """Forced hash collisions: a block whose key matches but whose parent_key or token_ids differ is no hit."""
    _, Collide, Constant = _classes(ns)
    c = Constant(4, 8)
    _oracle_acquire(c, [1, 2, 3, 4, 5, 6, 7, 8])  # 首块登记在 key 7；第二块撞上首块，只能私有
    for tokens, what in (
        ([1, 2, 3, 4, 5, 6, 7, 8], "所有 key 都是 7：第二块撞上首块"),
        ([9, 9, 9, 9], "所有 key 都是 7：key 相同但 token 不同"),
        ([1, 2, 3, 4, 1, 2, 3, 4], "所有 key 都是 7：第二块 token 与首块相同，但父 key 不同"),
    ):
        _check(c, tokens, what)

    def after_step(c, make):
        for _ in range(3):
            _check(c, make(), "随机操作序列，哈希只有 3 个取值")

    _drive(Collide(4, 12), 35, 120, _oracle_acquire, _oracle_release, after_step)


@_named("纯查询")
def check_pure_query(ns):
    """Random requests with the real hash: after every step match agrees with the oracle and changes nothing."""
    Cache, _, _ = _classes(ns)

    def after_step(c, make):
        _integrity(c, "match ")
        for _ in range(3):
            _check(c, make(), "随机操作序列")

    _drive(Cache(4, 12), 34, 120, _oracle_acquire, _oracle_release, after_step)
