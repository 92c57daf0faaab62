"""Hidden checks of TODO 11, `BlockPrefixCache.match`: one function per grade cell, each given the notebook's namespace.

Only the learner's `match` runs; caches are filled with a reference acquire and release written here,
so a mistake in TODO 12-14 costs TODO 11 nothing. The expected answer comes from a brute-force
oracle that rebuilds each registered block's whole prefix from the parent_key chain.
"""

TODO = "TODO 11"
UNDER_TEST = "match"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {11: 13}  # the TODO's points, shared by its checks


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
            above = f"上一块（块 {got[i - 1]}）的 key" if i else "首块的父 key None"
            return (
                f"第 {i} 块返回了块 {b}，token 相同，但它的 parent_key 是{_key_owner(c, block.parent_key)}，不是{above}："
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
        raise AssertionError(f"{TODO} [{label}]: match({tokens}) 抛出了 {type(exc).__name__}: {exc}") from None
    expected = _content_match(c, tokens)
    assert _same_ints(got, expected), (
        f"{TODO} [{label}]: match({tokens}) 应返回 {expected}，得到 {got}：{_explain(c, tokens, got, expected)}"
    )
    assert _snapshot(c) == before, (
        f"{TODO} [{label}]: match({tokens}) 改变了缓存（块、引用计数、空闲/可淘汰队列或统计）：match 是纯查询"
    )
    again = c.match(tokens)
    assert _same_ints(again, expected), f"{TODO} [{label}]: 同一个查询 match({tokens}) 第二次返回 {again}，第一次是 {expected}"


@check(points=4, title="基本", says="从第一块起逐块命中，部分命中、不满一块的尾巴、空 prompt、错位的 prompt")
def check_todo11_basic(ns):
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
    assert _same_ints(got, first), f"{TODO}: match(list(range(1, 11))) 应返回 acquire 得到的块 {first}，得到 {got}"


@check(points=3, title="哈希链", says="token 相同、位置不同的块只靠 key 链区分")
def check_todo11_chain(ns):
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


@check(points=4, title="碰撞", says="强制哈希碰撞：key 相同但 parent_key 或 token_ids 不同，不算命中")
def check_todo11_collisions(ns):
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


@check(points=2, title="纯查询", says="随机请求序列中每一步都与参考一致，且 match 不改变任何状态")
def check_todo11_pure_query(ns):
    """Random requests with the real hash: after every step match agrees with the oracle and changes nothing."""
    Cache, _, _ = _classes(ns)

    def after_step(c, make):
        _integrity(c, "match ")
        for _ in range(3):
            _check(c, make(), "随机操作序列")

    _drive(Cache(4, 12), 34, 120, _oracle_acquire, _oracle_release, after_step)
