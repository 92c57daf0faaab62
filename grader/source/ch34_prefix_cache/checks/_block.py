"""Part three's helpers (TODO 11-14, `BlockPrefixCache`): a snapshot of the whole state, the
invariants, a reference match / acquire / release, a random driver and the collision classes.

The build runs `_common.py`, this file and one `todo<N>.py` as one code string in a scope of its
own; the messages name that file's `TODO`.
"""

import random


def _snapshot(c):
    """Everything a cache holds: blocks, queues, index and statistics."""
    return (
        [(b.block_id, b.ref_count, b.key, b.parent_key, b.token_ids) for b in c.blocks],
        list(c._free_block_ids),
        list(c._evictable),
        dict(c._cached),
        (c.num_requests, c.num_queried_tokens, c.num_hit_tokens, c.num_evictions),
    )


def _key_owner(c, key):
    """A key as a message shows it: which block is registered under it. The number itself is
    `hash()`'s, which differs from one Python process to the next (hash(None) before 3.12)."""
    if key is None:
        return " None"
    owners = [b.block_id for b in c.blocks if b.key == key]
    return f"块 {owners[0]} 的 key" if owners else "一个没有登记的 key"


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
        f"{TODO}: {after}之后，空闲 + 可淘汰 + 使用中的块应恰好覆盖整个块池 0..{c.num_blocks - 1}，得到 {pool}"
    )
    try:
        c.check_integrity()
    except AssertionError as error:
        raise AssertionError(f"{TODO}: {after}之后缓存的不变量被破坏了：{error}") from None


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
    rng = random.Random(seed)
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
