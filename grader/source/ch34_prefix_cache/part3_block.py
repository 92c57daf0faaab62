# %% [markdown]
# ## 第三部分（选做，{{points:block}}）：真实引擎怎么做——块级前缀缓存、引用计数与 LRU 淘汰
#
# **学习目标：** 学完这一部分，你能：
#
# - 说清**块级前缀缓存**（block-level prefix cache）为什么只缓存满块，以及**哈希链**（hash chain）怎样让查找代价只和 prompt 长度有关；
# - 用**引用计数**（reference count）保护正在被请求使用的块，用 **LRU 淘汰**（least recently used eviction）在池子满时腾出没人用的块；
# - 实现 `BlockPrefixCache` 的查询、申请、释放和 token 级**命中率**统计（TODO 11–14），并用合成负载量出容量和淘汰策略对命中率的影响。
#
# **用时：** 约 1.5 小时（TODO 11–14，选做）。**需要：** 第二部分开头的工具单元格（不需要 TODO 9–10）。
#
# 第一部分的 `PrefixCacheManager` 讲清了“登记前缀 → 最长匹配 → 拆出 suffix”，但它离真实引擎还差三步：
#
# | 问题 | `PrefixCacheManager` | 真实引擎（vLLM / SGLang） |
# |---|---|---|
# | 查找代价 | 每次扫描**全部**已登记前缀，缓存 N 条就比较 N 次 | 沿哈希链（vLLM）或基数树（SGLang）逐块查找，代价只和 prompt 长度有关 |
# | 容量 | 只增不减，从不遗忘 | KV 放在固定大小的显存池里，满了就淘汰没人用的块 |
# | 存储单位 | 只记 token，不知道 KV 在哪里 | 记到物理块：命中的前缀直接得到一串 block id，多个请求共享同一批块 |
#
# 本部分是**选做**，默认单独记录，不计入成绩（见第一格的分值），只用 Python 标准库。这里的 `block_size` 是 KV cache 的块（页）大小：每个物理块存几个 token 的 K/V（见 1.3 节末尾），不是第一、二部分的 prefill chunk 大小。

# %% [markdown]
# ### 3.1　四个设计决定，各自为了什么
#
# **为什么按块。** vLLM 的 PagedAttention 把 KV cache 切成固定大小的**物理块**（physical block），一个请求的 KV 由一张**块表**（block table）指向若干物理块，不要求显存连续。两个请求前 k 个满块的内容相同，它们的块表就可以指向同一批物理块，所以缓存的单位是**满块**。最后一个不满的块还会被继续写入（后面的 prompt token、decode 出的新 token 都落进去），内容没有定型，不能共享。代价是命中长度按块向下取整：共享 100 个 token、`block_size=16` 时只能复用 96 个。
#
# **为什么用哈希链。** 第 i 块的 KV 不只取决于它自己的 token，还取决于它前面的全部 token（注意力看整个前缀）。所以块的 key 同时覆盖父块的 key 和本块的 token：`key_i = hash((key_{i-1}, tokens_i))`，首块的父 key 为 `None`。查找时从第一块开始逐块算 key、查一次字典，每块 O(1)，和缓存里存了多少条序列无关。哈希可能**碰撞**（两段不同的内容算出同一个 key），所以命中时还要核对块里存的 `parent_key` 和 `token_ids`，对不上就当作未命中：碰撞只会让命中变短，永远不会返回装着别的内容的块。
#
# **为什么要引用计数。** 同一个物理块可能同时被几个正在运行的请求读着（它们共享 system prompt）。每块记一个 `ref_count`：请求开始时 +1，结束时 −1。`ref_count > 0` 的块绝不能淘汰，否则别的请求正在用的 KV 会被覆盖。降到 0 的块不清空，仍留在缓存里等下一个请求命中，只是从此**可以**被淘汰。
#
# **为什么是 LRU。** 池子满了又需要新块时，只能从可淘汰块里清掉一个。刚被用过的前缀（热门的 system prompt、正在进行的多轮对话）最可能马上再被用到，所以先淘汰最久未用的。一个请求的块按**从尾到头**的顺序排进可淘汰队列，同一条链上就总是先淘汰尾部：父块永远不会比子块先走（链上缺了父块，子块就再也查不到了）。

# %% [markdown]
# ### 3.2　接口：块池已经写好，你来写缓存的四个方法
#
# 代码分两格。第一格（折叠的 `BlockPool`，已给出）管物理块本身：空闲队列、可淘汰队列（`OrderedDict`，队首最久未用）、“key → block id”的索引，以及登记 `insert`、淘汰 `evict`、取块 `_allocate_block` 和检查全部不变量的 `check_integrity`。任何时刻每个块恰好处于一种状态：**空闲**（未登记、没人用）、**可淘汰**（已登记、没人用）、**使用中**（有人用）。第二格是你要补全的 `BlockPrefixCache(BlockPool)`：
#
# | 方法 | 做什么 | 改状态吗 |
# |---|---|---|
# | `match(token_ids)` | 返回最长已缓存满块前缀的 block id 列表（**TODO 11**） | 不改：纯查询，不动引用计数、LRU 顺序和统计 |
# | `acquire(token_ids)` | 请求开始：命中块加引用，其余满块分配新块并登记，记统计；块不够时抛 `CacheFullError`（**TODO 12**） | 改；失败时什么都不改 |
# | `release(block_ids)` | 请求结束：引用 −1，降到 0 的块进入可淘汰队列（**TODO 13**） | 改 |
# | `_record_query(token_ids, hit_block_ids)` | 记一次成功的查询：token 级命中统计（**TODO 14**） | 改统计 |
#
# 两点取舍：**`match` 不刷新 LRU，也不记统计**（和 vLLM 一样，查找本身不碰淘汰顺序；块被 `acquire` 引用时移出可淘汰队列，`release` 时再排到队尾，这已经就是“最近使用”；统计放在 `acquire` 里，每个请求只记一次）。**只有满块才分配、才缓存**：不满一块的尾巴在真实引擎里放在请求自己的私有块里，这里不建模。
#
# <details><summary>深入：这里的命中率和 vLLM 报的命中率差在哪里</summary>
#
# 两者都按 token 计、按整块算命中。不同之处有两点。一是 vLLM 把命中封顶在 `num_tokens - 1`（`KVCacheManager.get_computed_blocks`，第四部分的 TODO 15），完整命中的 prompt 少算一块，这里不封顶。二是统计的范围：vLLM 的 Prometheus 计数器 `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` 是从启动起累计的；日志里那行 “Prefix cache hit rate” 来自 `LoggingStatLogger`（`vllm/v1/metrics/loggers.py`），它用的 `CachingMetrics`（`vllm/v1/metrics/stats.py`）默认只聚合最近 `max_recent_requests=1000` 个请求，超出时整批丢掉最旧的，所以是“最近约 1,000 个请求”的滑动窗口（读自 vLLM 0.33.0）。本章的 `hit_rate` 从头累计。
#
# </details>

# %% [markdown]
# {{figure:hash_chain}}

# %% nbgrader={"grade": false, "grade_id": "block_pool_given", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 已给出：BlockPool——物理块池、空闲 / 可淘汰队列、登记与淘汰、不变量检查
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass


class CacheFullError(RuntimeError):
    """acquire 需要的新块比能腾出的块多。抛出时缓存的状态没有任何改变。"""


@dataclass
class PhysicalBlock:
    """块池中的一个物理块（真实引擎里对应一段存 KV 的显存）。

    key 为 None 表示这个块没有登记在缓存里：要么空闲，要么是某个请求的私有块
    （发生哈希碰撞之后的块只能私有）。登记过的块：key 是链式哈希，parent_key 是父块的 key
    （首块为 None），token_ids 是本块的 block_size 个 token，命中时用来核对内容。
    """

    block_id: int
    ref_count: int = 0
    key: int | None = None
    parent_key: int | None = None
    token_ids: tuple = ()


class BlockPool:
    """固定大小的物理块池：哈希链索引、空闲队列、LRU 可淘汰队列、token 级统计的计数器。

    任何时刻每个块恰好处于一种状态：
        空闲   ref_count == 0，未登记   在 _free_block_ids 里
        可淘汰 ref_count == 0，已登记   在 _evictable 里（队首最久未用，最先淘汰）
        使用中 ref_count >  0           已登记的共享块，或未登记的私有块
    BlockPrefixCache 在它上面实现 match / acquire / release / _record_query。
    """

    def __init__(self, block_size: int, num_blocks: int):
        if block_size <= 0 or num_blocks <= 0:
            raise ValueError("block_size 和 num_blocks 必须是正整数")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.blocks = [PhysicalBlock(block_id) for block_id in range(num_blocks)]
        self._free_block_ids = deque(range(num_blocks))  # 空闲块，从队首取
        self._evictable = OrderedDict()  # block_id -> None；队首 = 最久未用
        self._cached = {}  # key -> block_id：已登记的块
        # token 级统计（TODO 14 更新它们）：命中按整块计，不封顶在 num_tokens - 1，从头累计
        self.num_requests = 0
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0
        self.num_evictions = 0

    @property
    def hit_rate(self) -> float:
        """命中 token 数 / 查询 token 数；还没有查询时为 0.0。"""
        if self.num_queried_tokens == 0:
            return 0.0
        return self.num_hit_tokens / self.num_queried_tokens

    def _hash_block(self, parent_key: int | None, token_ids: tuple) -> int:
        """一个满块的 key：覆盖父块的 key 和本块的 token。测试会替换它来制造碰撞。"""
        return hash((parent_key, token_ids))

    def _full_blocks(self, token_ids: Sequence[int]) -> list:
        """把 token_ids 切成满块（每块一个 tuple）；不满 block_size 的尾巴丢掉。"""
        size = self.block_size
        return [tuple(token_ids[i : i + size]) for i in range(0, len(token_ids) - size + 1, size)]

    def insert(self, token_ids: Sequence[int], block_ids: Sequence[int]) -> int:
        """把存放 token_ids 各个满块的 block_ids（第 i 个存第 i 块）登记进缓存，返回新登记的块数。

        调用者必须持有这些块（ref_count > 0）。已登记的块（命中的前缀）核对后跳过。
        一旦某块的 key 已被别的内容占用（哈希碰撞），它和它后面的块都不登记：
        它们作为私有块使用，release 时直接回到空闲队列。
        """
        num_inserted = 0
        parent_key = None
        for block_id, tokens in zip(block_ids, self._full_blocks(token_ids)):
            block = self.blocks[block_id]
            if block.ref_count <= 0:
                raise ValueError(f"块 {block_id} 没有被持有，不能登记")
            if block.key is not None:
                if block.parent_key != parent_key or block.token_ids != tokens:
                    raise ValueError(f"块 {block_id} 已登记了别的内容")
                parent_key = block.key
                continue
            key = self._hash_block(parent_key, tokens)
            if key in self._cached:
                break  # 碰撞：这个 key 已属于别的内容，后面的块只能私有
            block.key, block.parent_key, block.token_ids = key, parent_key, tokens
            self._cached[key] = block_id
            parent_key = key
            num_inserted += 1
        return num_inserted

    def evict(self) -> int:
        """淘汰最久未用的可淘汰块：注销它的 key，放回空闲队列，返回它的 block id。"""
        if not self._evictable:
            raise CacheFullError("没有可淘汰的块：已缓存的块都在使用中")
        block_id, _ = self._evictable.popitem(last=False)
        block = self.blocks[block_id]
        del self._cached[block.key]
        block.key, block.parent_key, block.token_ids = None, None, ()
        self._free_block_ids.append(block_id)
        self.num_evictions += 1
        return block_id

    def _allocate_block(self) -> int:
        """取一个块并持有它（ref_count = 1）：先用空闲块，没有时淘汰一个最久未用的块。"""
        if not self._free_block_ids:
            self.evict()
        block_id = self._free_block_ids.popleft()
        self.blocks[block_id].ref_count = 1
        return block_id

    def _check_releasable(self, block_ids: Sequence[int]) -> None:
        """release 的前置检查，不改状态：id 合法，且每个块被释放的次数不超过它的引用计数。"""
        counts = {}
        for block_id in block_ids:
            if not isinstance(block_id, int) or not 0 <= block_id < self.num_blocks:
                raise ValueError(f"不存在的 block id：{block_id!r}")
            counts[block_id] = counts.get(block_id, 0) + 1
        for block_id, count in counts.items():
            if count > self.blocks[block_id].ref_count:
                raise ValueError(
                    f"块 {block_id} 的引用计数是 {self.blocks[block_id].ref_count}，"
                    f"不能释放 {count} 次（重复 release 了？）"
                )

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_block_ids)

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._evictable)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def check_integrity(self) -> None:
        """断言全部不变量（不改状态）。测试在每一步操作之后都调用它。"""
        free, evictable = list(self._free_block_ids), list(self._evictable)
        free_set, position = set(free), {block_id: i for i, block_id in enumerate(evictable)}
        assert len(self.blocks) == self.num_blocks, "块池的大小变了"
        assert len(free_set) == len(free), "空闲队列里有重复的 block id"
        assert all(0 <= b < self.num_blocks for b in free + evictable), "出现了池外的 block id"
        assert not free_set & set(position), "同一个块既空闲又可淘汰"
        num_in_use = sum(1 for block in self.blocks if block.ref_count > 0)
        assert len(free) + len(evictable) + num_in_use == self.num_blocks, "空闲 + 可淘汰 + 使用中 ≠ 块池大小"
        num_registered = 0
        for i, block in enumerate(self.blocks):
            assert block.block_id == i, f"blocks[{i}] 的 block_id 是 {block.block_id}"
            assert block.ref_count >= 0, f"块 {i} 的引用计数为负"
            if block.key is None:
                assert block.parent_key is None and block.token_ids == (), f"未登记的块 {i} 还留着内容"
                assert i not in position, f"未登记的块 {i} 在可淘汰队列里"
                assert (i in free_set) == (block.ref_count == 0), f"未登记的块 {i}：空闲 ⇔ 引用计数为 0"
                continue
            num_registered += 1
            assert self._cached.get(block.key) == i, f"块 {i} 的 key 没有指回它自己"
            assert len(block.token_ids) == self.block_size, f"块 {i} 不满却被登记了"
            assert block.key == self._hash_block(block.parent_key, block.token_ids), f"块 {i} 的 key 与内容不符"
            assert i not in free_set, f"已登记的块 {i} 在空闲队列里"
            assert (i in position) == (block.ref_count == 0), f"块 {i}：可淘汰 ⇔ 已登记且引用计数为 0"
            if block.parent_key is not None:
                parent = self._cached.get(block.parent_key)
                assert parent is not None, f"块 {i} 的父块已不在缓存里（链断了）"
                assert self.blocks[parent].ref_count >= block.ref_count, f"块 {i} 的引用比它的父块还多"
                if i in position and parent in position:
                    assert position[i] < position[parent], f"块 {i} 的父块 {parent} 会比它先被淘汰"
        assert len(self._cached) == num_registered, "索引里有指向未登记块的 key"

# %% nbgrader={"grade": false, "grade_id": "block_prefix_cache", "locked": false, "schema_version": 3, "solution": true, "task": false}
class BlockPrefixCache(BlockPool):
    """块级前缀缓存：在 BlockPool 上实现一个请求的一生。

        block_ids = cache.acquire(prompt)   # 命中的块加引用；其余满块分配新块并登记
        ...                                 # 用这些块做 prefill / decode
        cache.release(block_ids)            # 引用 -1；降到 0 的块留在缓存里，变成可淘汰
    """

    # ------------------------------------------------------------------ 查询
    def match(self, token_ids: Sequence[int]) -> list:
        """返回 token_ids 最长的已缓存满块前缀所在的 block id 列表（第 i 个元素存第 i 块）。

        纯查询：不改变缓存内容、引用计数、LRU 顺序和统计。只看满块，不满一块的尾巴不参与。
        第 i 块命中的条件：它的 key 登记在缓存里，并且那个块存的 parent_key 和 token_ids
        都与查询一致；第一次不命中就停。哈希碰撞因此只会让命中变短。
        """
        # TODO 11：从第一块开始（父 key 为 None），用 self._full_blocks 切出满块，
        # 逐块用 self._hash_block(parent_key, tokens) 算 key，在 self._cached 里查 block id；
        # 查不到、或那个块的 parent_key / token_ids 与查询不一致，就停下。
        ### BEGIN SOLUTION
        block_ids = []
        parent_key = None
        for tokens in self._full_blocks(token_ids):
            key = self._hash_block(parent_key, tokens)
            block_id = self._cached.get(key)
            if block_id is None:
                break
            block = self.blocks[block_id]
            if block.parent_key != parent_key or block.token_ids != tokens:
                break  # 哈希碰撞：key 相同，内容不同
            block_ids.append(block_id)
            parent_key = key
        return block_ids
        ### END SOLUTION

    # ------------------------------------------------------------------ 请求的一生
    def acquire(self, token_ids: Sequence[int]) -> list:
        """请求开始时调用。返回存放 token_ids 各个满块的 block id 列表，调用者持有它们。

        前面命中的块（match 的结果）引用计数 +1；其余每个满块分配一个新块
        （self._allocate_block：先用空闲块，没有时按 LRU 淘汰），再用 self.insert 登记，
        最后调用一次 self._record_query 记统计。不满一块的尾巴不分配块。
        如果腾不出足够的块，抛出 CacheFullError，并且不改变任何状态（包括统计）。
        """
        # TODO 12：先算清楚要几个新块、最多能腾出几个（注意：命中的块里引用计数为 0 的，
        # 此刻在可淘汰队列里，但马上要被本请求引用，不能算作可腾出的块）；不够就抛错。
        # 够的话：先给命中的块加引用（移出可淘汰队列），再分配新块——顺序反了，
        # 命中的块可能被当成最久未用的块淘汰掉。
        ### BEGIN SOLUTION
        hit_ids = self.match(token_ids)
        num_new = len(token_ids) // self.block_size - len(hit_ids)
        num_hit_evictable = sum(1 for block_id in hit_ids if self.blocks[block_id].ref_count == 0)
        num_reclaimable = len(self._free_block_ids) + len(self._evictable) - num_hit_evictable
        if num_new > num_reclaimable:
            raise CacheFullError(f"需要 {num_new} 个新块，最多只能腾出 {num_reclaimable} 个")
        for block_id in hit_ids:  # 先加引用：命中的块从此不会被下面的分配淘汰
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self._evictable[block_id]
            block.ref_count += 1
        new_ids = [self._allocate_block() for _ in range(num_new)]
        block_ids = hit_ids + new_ids
        self.insert(token_ids, block_ids)
        self._record_query(token_ids, hit_ids)
        return block_ids
        ### END SOLUTION

    def release(self, block_ids: Sequence[int]) -> None:
        """请求结束时调用；block_ids 原样传回 acquire 返回的列表。

        每个块引用计数 -1。降到 0 的已登记块留在缓存里，排到可淘汰队列的队尾
        （最近用过，最后淘汰）；降到 0 的私有块（未登记）回到空闲队列。
        按从尾到头的顺序处理：同一条链上尾部的块先被淘汰，父块总比子块晚。
        """
        self._check_releasable(block_ids)
        # TODO 13：从最后一块往前，逐块引用 -1；降到 0 时按上面的规则放进
        # self._evictable（队尾）或 self._free_block_ids。
        ### BEGIN SOLUTION
        for block_id in reversed(block_ids):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count > 0:
                continue  # 还有别的请求在用
            if block.key is None:
                self._free_block_ids.append(block_id)  # 私有块：内容不可复用，直接回收
            else:
                self._evictable[block_id] = None  # 排到队尾：最近用过，最后淘汰
        ### END SOLUTION

    # ------------------------------------------------------------------ 统计
    def _record_query(self, token_ids: Sequence[int], hit_block_ids: Sequence[int]) -> None:
        """acquire 成功时调用一次：请求数 +1；查询 token 数加上整个 prompt 的长度
        （包括不满一块的尾巴）；命中 token 数加上命中的块覆盖的 token 数。"""
        # TODO 14：更新 num_requests、num_queried_tokens、num_hit_tokens（都按 token 计，不按块计）。
        ### BEGIN SOLUTION
        self.num_requests += 1
        self.num_queried_tokens += len(token_ids)
        self.num_hit_tokens += len(hit_block_ids) * self.block_size
        ### END SOLUTION

# %% [markdown]
# #### 提示：TODO 11–14
#
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开下面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 11 · 提示 1</summary>
#
# 从第一块开始，父 key 是 `None`；每一块的 key 由父 key 和本块的 token 一起决定。什么时候该停下？
#
# </details>
#
# <details><summary>TODO 11 · 提示 2</summary>
#
# 逐块算 key、在 `self._cached` 里查 block id，查不到就停。查到了还要核对那个块存的 `parent_key` 和 `token_ids` 与这次查询是否一致（哈希可能碰撞），不一致也停。`match` 只读：不碰引用计数、可淘汰队列和统计。
#
# </details>
#
# <details><summary>TODO 12 · 提示 1</summary>
#
# 动手之前先回答两个数：要几个新块？最多能腾出几个？命中的块里，有没有此刻正躺在可淘汰队列里的？
#
# </details>
#
# <details><summary>TODO 12 · 提示 2</summary>
#
# 能腾出的块 = 空闲块 + 可淘汰块 − 命中块中引用计数为 0 的那些。不够就抛 `CacheFullError`，此前什么都不改。够的话先给命中的块加引用（引用为 0 的移出可淘汰队列），再逐个分配新块，然后用 `insert` 登记、调用一次 `_record_query`。
#
# </details>
#
# <details><summary>TODO 13 · 提示 1</summary>
#
# 为什么要从最后一块往前处理？引用降到 0 的块该去哪里，取决于它有没有登记在缓存里。
#
# </details>
#
# <details><summary>TODO 13 · 提示 2</summary>
#
# 倒序遍历，引用减 1；仍大于 0 就跳过。降到 0 时：已登记（`key` 不是 `None`）的排到可淘汰队列的队尾，没有登记的私有块放回空闲队列。
#
# </details>
#
# <details><summary>TODO 14 · 提示 1</summary>
#
# 三个计数里只有一个按请求计，另外两个都按 token 计。命中的 token 数怎样从命中的块数换算出来？
#
# </details>
#
# <details><summary>TODO 14 · 提示 2</summary>
#
# 请求数加 1；查询 token 数加上整个 prompt 的长度（包括不满一块的尾巴）；命中 token 数加上命中块数乘以 `block_size`。
#
# </details>

# %% [markdown]
# 运行下面的单元格检查 TODO 11–14：四个检查各查一个 TODO，互不连带（查 `acquire` 时 `match` 和统计换成了替身），每条断言的消息写明输入、期望值和实际得到的值。

# %% nbgrader={"grade": false, "grade_id": "visible_todo11_14", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title TODO 11–14 的可见检查：运行即可，每个 TODO 打印一行结果
# 运行此单元格检查 TODO 11–14：每个 TODO 一个小检查，一秒内跑完；评分时每个 TODO 还有 3–5 格隐藏检查。
def visible_check_todo11():
    cache = BlockPrefixCache(block_size=4, num_blocks=8)
    ids = [cache._allocate_block() for _ in range(2)]
    cache.insert(list(range(10)), ids)  # 登记两个满块 (0,1,2,3) (4,5,6,7)；尾巴 8, 9 不登记
    for tokens, expected, why in (
        (list(range(10)), ids, "两个满块都命中"),
        ([0, 1, 2, 3, 99, 5, 6, 7], ids[:1], "第二块内容不同，只命中第一块"),
        ([9, 0, 1, 2, 3, 4, 5, 6, 7], [], "只能从 prompt 开头逐块匹配"),
        ([0, 1, 2], [], "不满一块的 token 不参与匹配"),
    ):
        got = cache.match(tokens)
        assert got == expected, (
            f"TODO 11: 登记 {ids} 两个满块后 match({tokens}) 应返回 {expected}（{why}），得到 "
            f"{got!r}"
        )
    cache.check_integrity()
    # match 是纯查询：引用降到 0 的块排在可淘汰队列里时，查询不能改变它们的顺序（不刷新 LRU）
    for block_id in reversed(ids):  # 模拟 release（不经过 TODO 13）：尾块先进队，先淘汰
        cache.blocks[block_id].ref_count = 0
        cache._evictable[block_id] = None
    before = list(cache._evictable)
    cache.match(list(range(10)))
    assert list(cache._evictable) == before, (
        "TODO 11: match 不应改变可淘汰队列（不刷新 LRU，和 vLLM 一样：查找不碰淘汰顺序）："
        f"match 前 {before}，match 后 {list(cache._evictable)}"
    )
    cache.check_integrity()
    # 强制哈希碰撞：每个满块的 key 都相同。命中时必须核对块里存的 parent_key 和 token_ids
    colliding = _Colliding11(block_size=2, num_blocks=4)
    first = colliding._allocate_block()
    colliding.insert([1, 2], [first])  # 登记 (1, 2)，key 为 0
    got = colliding.match([5, 6])
    assert got == [], (
        f"TODO 11: 强制哈希碰撞（每块 key 相同）时，登记了 (1, 2) 的块 {first} 后 match([5, 6]) "
        f"应返回 []：key 相同但块里的 token_ids 不同，要核对 token_ids，得到 {got!r}"
    )
    got = colliding.match([1, 2, 1, 2])
    assert got == [first], (
        f"TODO 11: 强制哈希碰撞时 match([1, 2, 1, 2]) 应返回 [{first}]：第二块的 key 也指向块 {first}，"
        "但它的 parent_key（None）与查询的父 key 不同，要核对 parent_key，"
        f"得到 {got!r}"
    ) + (
        "（得到 [] 说明没有用 self._hash_block 算 key：这里的替身让它恒为 0，直接调用 hash 就查不到）"
        if got == []
        else ""
    )


class _Colliding11(BlockPrefixCache):
    """测试替身：每个满块的 key 都是 0，制造哈希碰撞。"""

    def _hash_block(self, parent_key, token_ids):
        return 0


class _Stub12(BlockPrefixCache):
    """测试替身：match 返回事先指定的 hits，_record_query 什么都不做——只考 acquire 自己。"""

    hits = ()

    def match(self, token_ids):
        return list(self.hits)

    def _record_query(self, token_ids, hit_block_ids):
        pass


def visible_check_todo12():
    cache = _Stub12(block_size=4, num_blocks=3)
    first = cache.acquire(list(range(10)))
    assert isinstance(first, list) and len(first) == 2 and len(set(first)) == 2, (
        "TODO 12: 空缓存（3 块）acquire(list(range(10)))、block_size=4 应分配 2 "
        f"个不同的块（尾巴 8, 9 不分配），得到 {first!r}"
    )
    cache.hits = first  # 假装这两块都命中
    second = cache.acquire(list(range(10)))
    assert second == first, (
        f"TODO 12: match 命中 {first} 时 acquire 应直接复用它们，返回 {first}，得到 {second!r}"
    )
    refs = [cache.blocks[b].ref_count for b in first]
    assert refs == [2, 2], (
        f"TODO 12: 两个请求共用块 {first}，它们的引用计数应为 [2, 2]，得到 {refs}"
    )
    cache.hits = []
    try:
        cache.acquire([7] * 8)  # 需要 2 个新块，只剩 1 个空闲块
    except CacheFullError:
        pass
    else:
        raise AssertionError(
            "TODO 12: 只剩 1 个空闲块时 acquire([7] * 8) 需要 2 个新块，应抛出 CacheFullError，"
            "却没有抛"
        )
    free = [b.ref_count for b in cache.blocks].count(0)
    assert free == 1, (
        "TODO 12: 抛出 CacheFullError 后不能改变任何状态：应仍有 1 个引用计数为 0 的块，得到 "
        f"{free} 个"
    )
    cache.check_integrity()
    # 命中的块排在可淘汰队列的队首、没有空闲块：先给它加引用再分配，否则它会被当成最久未用的块淘汰
    pinned, hit, other = _evictable_pool(num_blocks=2)
    pinned.hits = [hit]
    try:
        got = pinned.acquire([1, 2, 3, 4])
    except Exception as error:  # noqa: BLE001  (顺序反了时 insert 会发现块已被挪作他用)
        got = f"{type(error).__name__}: {error}"
    assert got == [hit, other], (
        f"TODO 12: 命中的块 {hit} 在可淘汰队列队首、没有空闲块时 acquire([1, 2, 3, 4]) 应返回 "
        f"[{hit}, {other}]（先给命中的块加引用、移出队列，再分配新块，淘汰的是块 {other}），"
        f"得到 {got!r}"
    )
    pinned.check_integrity()
    # 可腾出的块：命中的块此刻在可淘汰队列里，但马上要被本请求引用，不能算作可腾出的块
    full, hit, other = _evictable_pool(num_blocks=2)
    full.hits = [hit]

    def state():
        # 每块的 (引用计数, 登记的 token)、可淘汰队列、每块的 key。key 是 hash() 的值，
        # 每个 Python 进程都不一样：拿来比较，不拿来显示
        shown = [(b.ref_count, None if b.key is None else b.token_ids) for b in full.blocks]
        return shown, list(full._evictable), [b.key for b in full.blocks]

    before = state()
    try:
        full.acquire([1, 2, 3, 4, 5, 6])  # 命中 1 块、还要 2 个新块，能腾出的只有块 other
    except CacheFullError:
        pass
    else:
        raise AssertionError(
            f"TODO 12: 可淘汰队列里只有命中的块 {hit} 和块 {other}、没有空闲块时，"
            "acquire([1, 2, 3, 4, 5, 6]) 要 2 个新块，只能腾出 1 "
            "个（命中的块不能算作可腾出的块），应抛出 CacheFullError，却没有抛"
        )
    after = state()
    assert after == before, (
        f"TODO 12: acquire 抛出 CacheFullError 时状态已经变了（每块的引用计数与登记的 token {before[0]} → "
        f"{after[0]}，可淘汰队列 {before[1]} → {after[1]}）：命中的块不能算作可腾出的块，"
        "要在改任何状态之前算清楚够不够"
    )


def _evictable_pool(num_blocks):
    """一个 block_size=2 的 _Stub12：块 hit 登记 (1, 2)、块 other 登记 (7, 8)，都可淘汰，hit 在队首；没有空闲块。"""
    cache = _Stub12(block_size=2, num_blocks=num_blocks)
    hit, other = cache._allocate_block(), cache._allocate_block()
    cache.insert([1, 2], [hit])
    cache.insert([7, 8], [other])
    for block_id in (hit, other):  # 模拟 release（不经过 TODO 13）
        cache.blocks[block_id].ref_count = 0
        cache._evictable[block_id] = None
    return cache, hit, other


def visible_check_todo13():
    cache = BlockPrefixCache(block_size=2, num_blocks=4)
    ids = [cache._allocate_block() for _ in range(2)]
    cache.insert([1, 2, 3, 4], ids)  # 模拟 acquire：持有并登记两个满块
    cache.release(ids)
    refs = [cache.blocks[b].ref_count for b in ids]
    assert refs == [0, 0], f"TODO 13: release({ids}) 后两块的引用计数应为 [0, 0]，得到 {refs}"
    queue = list(cache._evictable)
    assert queue == [ids[1], ids[0]], (
        f"TODO 13: release({ids}) 后可淘汰队列应为 {[ids[1], ids[0]]}（从尾到头排进队尾："
        f"尾块先淘汰），得到 {queue}"
    )
    assert cache.num_cached_blocks == 2, (
        "TODO 13: 引用降到 0 的块应留在缓存里等下一个请求命中：应仍有 2 个登记的块，得到 "
        f"{cache.num_cached_blocks} 个"
    )
    cache.check_integrity()


def visible_check_todo14():
    cache = BlockPrefixCache(block_size=4, num_blocks=8)
    cache._record_query(list(range(10)), [0, 1])  # 10 个 token，命中 2 块 = 8 个 token
    got = (cache.num_requests, cache.num_queried_tokens, cache.num_hit_tokens)
    assert got == (1, 10, 8), (
        "TODO 14: block_size=4 时 _record_query(list(range(10)), [0, 1]) 后 "
        f"(请求数, 查询 token, 命中 token) 应为 (1, 10, 8)，得到 {got}"
    )
    assert abs(cache.hit_rate - 0.8) < 1e-12, (
        f"TODO 14: 命中率应为 8 / 10 = 0.8，得到 {cache.hit_rate!r}"
    )
    cache._record_query([5, 6, 7, 8], [2])  # 第二个请求：4 个 token，命中 1 块；统计从头累计
    got = (cache.num_requests, cache.num_queried_tokens, cache.num_hit_tokens)
    assert got == (2, 14, 12), (
        "TODO 14: 接着 _record_query([5, 6, 7, 8], [2]) 后 (请求数, 查询 token, 命中 token) 应累计为 "
        f"(2, 14, 12)（用 +=，不是覆盖），得到 {got}"
    )


def run_optional_visible_checks(checks):
    """选做部分的可见检查：每个 TODO 单独跑 run_visible_checks，没通过的逐个列成 ❌ 行，但不抛出异常，
    所以 Run All 不会停在这里，没做第三部分的人也能接着运行第四、五部分。"""
    failed = []
    for todo, check in checks:
        try:
            run_visible_checks([(todo, check)])
        except Exception as error:  # noqa: BLE001  (上面已经打印了原因：这里只记下是哪个 TODO)
            failed.append((todo, type(error).__name__))
    for todo, kind in failed:
        status = "还没完成" if kind == "NotImplementedError" else "没通过可见检查（原因见上面）"
        print(f"❌ {todo}（选做）{status}")
    if failed:
        print("第三部分是选做：这一格不抛出异常，Run All 会接着运行后面的单元格。")


run_optional_visible_checks(
    [
        ("TODO 11", visible_check_todo11),
        ("TODO 12", visible_check_todo12),
        ("TODO 13", visible_check_todo13),
        ("TODO 14", visible_check_todo14),
    ]
)


# %% [markdown]
# 完成 TODO 11–14 后运行下面的演示：两个请求共享两块 system prompt，结束后块留在缓存里，第三个请求直接命中。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "block_demo", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 演示：一个请求的一生（acquire → 使用 → release），打印每一步的块状态
def demo_block_prefix_cache():
    """一个请求的一生：acquire → 使用 → release；打印每一步之后的块状态。"""
    cache = BlockPrefixCache(block_size=4, num_blocks=6)
    system = [101, 102, 103, 104, 105, 106, 107, 108]  # 两个满块的 system prompt

    def show(step, todo):
        try:
            cache.check_integrity()
        except AssertionError as error:
            raise AssertionError(f"演示：{step} 之后块的不变量被破坏了：{error}。这一步调用的是 {todo}，回到那里检查") from None
        refs = [block.ref_count for block in cache.blocks]
        print(f"{step:<34} 引用计数={refs}  可淘汰(先淘汰在前)={list(cache._evictable)}  空闲={list(cache._free_block_ids)}")

    first = cache.acquire(system + [1, 2, 3, 4, 5])  # 3 个满块 + 1 个 token 的尾巴
    show(f"请求 A acquire -> {first}", "TODO 12（acquire）")
    second = cache.acquire(system + [9, 9, 9, 9])  # 前两块命中，第三块新分配
    show(f"请求 B acquire -> {second}", "TODO 12（acquire）")
    cache.release(first)
    show("请求 A release", "TODO 13（release）")
    cache.release(second)
    show("请求 B release", "TODO 13（release）")
    print(f"请求 C match -> {cache.match(system + [1, 2, 3, 4, 7])}（纯查询，不改状态）")
    print(f"命中率 = {cache.num_hit_tokens}/{cache.num_queried_tokens} = {cache.hit_rate:.3f}")


try:
    demo_block_prefix_cache()
except NotImplementedError:
    print("先完成 TODO 11–14，再运行这个演示。")

# %% [markdown]
# ### 自动评分单元格：TODO 11–14（选做，单独计分）
#
# 下面每格检查一个 TODO 的一个方面，分值写在第一行。每格只查自己的 TODO：查某个 TODO 时，其余方法换成评分代码自带的参考实现；TODO 11、12、14 的检查每一步之后都检查全部不变量（`check_integrity()`）；TODO 13 的四格各看 `release` 留下的一个方面（引用计数、可淘汰队列的顺序、私有块的去向、登记是否保留），每次 `release` 之后把状态恢复成正确的 `release` 会留下的样子，一个错只扣一格。

# %%
#| checks: todo11.py
#| checks: todo12.py
#| checks: todo13.py
#| checks: todo14.py

# %% [markdown]
# ### 3.3　工作负载模拟器：什么样的请求流才能命中
#
# 命中率不是缓存自己的属性，而是“缓存 × 请求流”的结果。下面的模拟器生成三种真实场景里常见的请求流（token 是随机整数，只有刻意共享的部分才相同）：
#
# | 负载 | 形状 | 可复用的部分 |
# |---|---|---|
# | `system-prompt`（共享 system prompt） | 8 段长 system prompt（各 384 token），热度按 1, 1/2, …, 1/8 分布；每个请求选一段，再接自己的问题 | system prompt；问题各不相同 |
# | `multi-turn`（多轮对话） | 24 个会话随机交错，各 6 轮；每轮的 prompt = 之前的全部历史 + 新的用户消息 | 同一会话上一轮的 prompt（模型的回复这里不缓存） |
# | `few-shot`（少样本例题） | 3 个任务，各有一段说明和 6 道例题；每个请求按编号挑 3 道例题，再接新问题 | 说明 + 开头相同的几道例题 |
#
# `simulate` 按到达顺序回放请求：每个请求 `acquire`，最多 `max_running` 个请求同时持有块（模拟正在运行的批），多出来时最早的请求结束并 `release`；块不够时先让最早的请求结束再重试。`simulate_seed` 用第一部分的 `PrefixCacheManager` 回放同一个请求流：不限容量，每个 prompt 整条登记为一个前缀。
#
# 为了对照淘汰策略，还给出两个子类：`FIFOBlockPrefixCache` 淘汰**最早登记**的块（不管最近有没有用过），`RandomBlockPrefixCache` 随机淘汰。一个块被淘汰后，它在缓存里的后代也就再也查不到了，所以这两个子类连同后代一起淘汰（后代一定也可淘汰：后代被引用时父块必然也被引用）。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "block_simulator", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 3.3 节的工具：三种负载、请求流模拟、FIFO / 随机淘汰的对照实现
from random import Random


def random_tokens(rng, n, vocab_size=32000):
    """n 个随机 token；词表大，不同来源的 token 几乎不会碰巧相同。"""
    return rng.choices(range(1, vocab_size), k=n)


def system_prompt_trace(rng, num_requests=200, num_system_prompts=8, system_len=384, tail_len=(16, 192), skew=1.0):
    """很多用户共用几段长 system prompt 之一（第 i 段的热度正比于 1/(i+1)**skew），后面接各自不同的问题。"""
    systems = [random_tokens(rng, system_len) for _ in range(num_system_prompts)]
    weights = [1 / (i + 1) ** skew for i in range(num_system_prompts)]
    return [rng.choices(systems, weights)[0] + random_tokens(rng, rng.randint(*tail_len)) for _ in range(num_requests)]


def multi_turn_trace(rng, num_sessions=24, num_turns=6, system_len=64, user_len=(24, 80), reply_len=(32, 96)):
    """多轮对话：每轮的 prompt = 之前的全部历史 + 新的用户消息；各会话随机交错到达。"""
    system = random_tokens(rng, system_len)
    histories = [list(system) for _ in range(num_sessions)]
    turns_left = [num_turns] * num_sessions
    trace = []
    while any(turns_left):
        session = rng.choice([s for s, left in enumerate(turns_left) if left])
        histories[session] += random_tokens(rng, rng.randint(*user_len))
        trace.append(list(histories[session]))
        histories[session] += random_tokens(rng, rng.randint(*reply_len))  # 模型的回复进入下一轮的历史
        turns_left[session] -= 1
    return trace


def few_shot_trace(rng, num_requests=200, num_tasks=3, instruction_len=96, pool_size=6, shots=3, example_len=(48, 96), question_len=(16, 64)):
    """few-shot：任务说明 + 从例题池里按编号挑的几道例题 + 新问题。"""
    tasks = []
    for _ in range(num_tasks):
        examples = [random_tokens(rng, rng.randint(*example_len)) for _ in range(pool_size)]
        tasks.append((random_tokens(rng, instruction_len), examples))
    trace = []
    for _ in range(num_requests):
        instruction, examples = rng.choice(tasks)
        prompt = list(instruction)
        for i in sorted(rng.sample(range(pool_size), shots)):
            prompt += examples[i]
        trace.append(prompt + random_tokens(rng, rng.randint(*question_len)))
    return trace


def make_workloads(seed=34):
    """三种负载，固定种子；返回 {名字: 请求列表}。"""
    rng = Random(seed)
    return {
        "system-prompt": system_prompt_trace(rng),
        "multi-turn": multi_turn_trace(rng),
        "few-shot": few_shot_trace(rng),
    }


def num_distinct_full_blocks(trace, block_size):
    """请求流里不同的满块前缀有多少个：缓存不淘汰时需要的块数。"""
    prefixes = set()
    for prompt in trace:
        for end in range(block_size, len(prompt) + 1, block_size):
            prefixes.add(tuple(prompt[:end]))
    return len(prefixes)


def simulate(cache, trace, max_running=4):
    """按到达顺序回放 trace，返回 cache 的 token 级命中率。

    每个请求 acquire；最多 max_running 个请求同时持有块，多出来时最早的请求结束（release）。
    块不够时先让最早的请求结束再重试；一个请求独占整个池子都放不下时报错。
    模拟器自己记着每个块被运行中的请求持有几次：acquire / release 之后引用计数对不上，
    就指出该回去检查哪个 TODO，而不是等到块池耗尽才报一个看不出原因的错。
    """
    replay = _Replay(cache)
    for prompt in trace:
        replay.admit(prompt)
        if len(replay.running) > max_running:
            replay.finish(replay.running.popleft())
    while replay.running:
        replay.finish(replay.running.popleft())
    return cache.hit_rate


class _Replay:
    """simulate 的簿记：运行中的请求、每个块被它们持有几次、上一次改动缓存的操作。"""

    def __init__(self, cache):
        self.cache = cache
        self.running = deque()
        self.held = {}  # block_id -> 运行中的请求持有它的次数
        self.last_step = ["（还没有操作）", "TODO 12（acquire）"]  # 上一次改动缓存的操作，和它属于哪个 TODO

    def admit(self, prompt):
        """acquire 一个请求（块不够时先让最早的请求结束再重试），再核对它拿到的块和引用计数。"""
        cache = self.cache
        while True:
            try:
                block_ids = cache.acquire(prompt)
                break
            except CacheFullError:
                self.refused(prompt)
                self.finish(self.running.popleft())
            except NotImplementedError:
                raise
            except Exception as error:
                raise RuntimeError(
                    f"模拟器：acquire({len(prompt)} 个 token) 抛出 {type(error).__name__}: {error}。{self.explain(prompt)}"
                ) from None
        self.last_step[:] = [f"acquire({len(prompt)} 个 token)", "TODO 12（acquire）"]
        if len(block_ids) != len(prompt) // cache.block_size:
            raise RuntimeError(
                f"模拟器：acquire 对 {len(prompt)} 个 token、block_size={cache.block_size} 返回了 {len(block_ids)} 个块，"
                f"应为 {len(prompt) // cache.block_size} 个（只为满块分配）。回到 TODO 12 检查"
            )
        for block_id in block_ids:
            self.held[block_id] = self.held.get(block_id, 0) + 1
        self.check_refs(block_ids, f"acquire({len(prompt)} 个 token)", "TODO 12（acquire：命中的块 +1，新块为 1）")
        self.running.append(block_ids)

    def refused(self, prompt):
        """acquire 抛出了 CacheFullError：引用计数不应变；没有请求可以结束时，说明为什么放不下。"""
        cache, held = self.cache, self.held
        changed = [block.block_id for block in cache.blocks if block.ref_count != held.get(block.block_id, 0)]
        if changed:
            raise RuntimeError(
                f"模拟器：acquire({len(prompt)} 个 token) 抛出 CacheFullError 之后，块 {changed[:5]} 的引用计数变了"
                "（运行中的请求并没有多持有它们）：抛错之前已经改了引用计数，引用计数泄漏。"
                "回到 TODO 12 检查：先算清楚够不够，不够就抛错、什么都不改"
            ) from None
        if not self.running:
            leaked = [block.block_id for block in cache.blocks if block.ref_count > 0]
            if leaked:
                raise RuntimeError(
                    f"模拟器：没有请求在运行，{len(leaked)} 个块的引用计数却仍大于 0（引用计数泄漏），"
                    f"块池 {cache.num_blocks} 块因此放不下一个 {len(prompt)} token 的请求。回到 TODO 12"
                    "（acquire 抛出 CacheFullError 时是否已经加了引用？）和 TODO 13（release 是否每块减 1？）检查"
                ) from None
            raise ValueError(f"块池只有 {cache.num_blocks} 块，放不下一个 {len(prompt)} token 的请求") from None

    def finish(self, block_ids):
        """一个请求结束：release 它的块，再核对引用计数。"""
        try:
            self.cache.release(block_ids)
        except NotImplementedError:
            raise
        except Exception as error:
            raise RuntimeError(f"模拟器：release 抛出 {type(error).__name__}: {error}。回到 TODO 13（release）检查") from None
        self.last_step[:] = [f"release({len(block_ids)} 个块)", "TODO 13（release）"]
        for block_id in block_ids:
            self.held[block_id] -= 1
        self.check_refs(block_ids, f"release({len(block_ids)} 个块)", "TODO 13（release：每块恰好减 1）")

    def check_refs(self, block_ids, step, todo):
        for block_id in set(block_ids):
            if self.cache.blocks[block_id].ref_count != self.held.get(block_id, 0):
                raise RuntimeError(
                    f"模拟器：{step} 之后块 {block_id} 的引用计数是 {self.cache.blocks[block_id].ref_count}，"
                    f"但运行中的请求持有它 {self.held.get(block_id, 0)} 次。回到 {todo} 检查引用计数"
                )

    def explain(self, prompt):
        """学习者的缓存抛了异常：找出最可能的原因，说该回到哪个 TODO。"""
        cache = self.cache
        try:
            size, parent = cache.block_size, None
            for i, block_id in enumerate(cache.match(prompt)):
                block = cache.blocks[block_id]
                if block.token_ids != tuple(prompt[i * size : (i + 1) * size]) or block.parent_key != parent:
                    return f"match 返回的第 {i} 个块装的不是这个 prompt 的第 {i} 块。回到 TODO 11（match）检查"
                parent = block.key
        except Exception:  # noqa: BLE001  (match 本身出错：交给下面的不变量检查)
            pass
        try:
            cache.check_integrity()
        except AssertionError as broken:
            return f"此前的 {self.last_step[0]} 已经破坏了块的不变量（{broken}）。回到 {self.last_step[1]} 检查"
        return "回到 TODO 12（acquire）和 TODO 13（release）检查：先让它们的可见检查和上面的演示都通过"


def simulate_seed(trace, block_size):
    """第一部分的 PrefixCacheManager：不限容量，每个 prompt 整条登记为一个前缀；返回 token 级命中率。"""
    manager = PrefixCacheManager(block_size=block_size)
    num_hit = num_tokens = 0
    for prompt in trace:
        num_hit += manager.match_prefix(prompt)
        num_tokens += len(prompt)
        manager.add_prefix(prompt)
    return num_hit / num_tokens if num_tokens else 0.0


class _PolicyBlockPrefixCache(BlockPrefixCache):
    """淘汰策略对照组的公共部分：由 _pick_victim 选块，连同它在缓存里的后代一起淘汰。"""

    def _pick_victim(self) -> int:
        raise NotImplementedError

    def evict(self) -> int:
        if not self._evictable:
            raise CacheFullError("没有可淘汰的块：已缓存的块都在使用中")
        victim = self._pick_victim()
        doomed_keys = {self.blocks[victim].key}
        # 可淘汰队列里子块总排在父块前面，倒着扫一遍就能收齐全部后代
        for block_id in reversed(self._evictable):
            block = self.blocks[block_id]
            if block.parent_key in doomed_keys:
                doomed_keys.add(block.key)
        for key in doomed_keys:
            block = self.blocks[self._cached.pop(key)]
            del self._evictable[block.block_id]
            block.key, block.parent_key, block.token_ids = None, None, ()
            self._free_block_ids.append(block.block_id)
            self.num_evictions += 1
            self._forget(block.block_id)
        return victim

    def _forget(self, block_id: int) -> None:
        """子类在这里清掉为被淘汰的块记的东西。"""


class FIFOBlockPrefixCache(_PolicyBlockPrefixCache):
    """对照组：淘汰最早登记的块（先进先出），不管它最近有没有被用过。"""

    def __init__(self, block_size, num_blocks):
        super().__init__(block_size, num_blocks)
        self._registered_at = {}  # block_id -> 登记的序号
        self._clock = 0

    def insert(self, token_ids, block_ids):
        num_inserted = super().insert(token_ids, block_ids)
        for block_id in block_ids:
            if self.blocks[block_id].key is not None and block_id not in self._registered_at:
                self._registered_at[block_id] = self._clock
                self._clock += 1
        return num_inserted

    def _pick_victim(self):
        return min(self._evictable, key=self._registered_at.__getitem__)

    def _forget(self, block_id):
        del self._registered_at[block_id]


class RandomBlockPrefixCache(_PolicyBlockPrefixCache):
    """对照组：在可淘汰块里随机挑一个淘汰（固定种子）。"""

    def __init__(self, block_size, num_blocks, seed=34):
        super().__init__(block_size, num_blocks)
        self._rng = Random(seed)

    def _pick_victim(self):
        return self._rng.choice(list(self._evictable))

# %% [markdown]
# ### 3.4　测量一：命中率随容量的变化
#
# 同一个请求流，块池从 64 块放大到 2048 块（`block_size=16`，最多 4 个请求同时运行）。最后一行是第一部分的 `PrefixCacheManager`：不限容量，每个 prompt 整条登记。“不淘汰所需块数”是请求流里不同满块前缀的个数，池子有这么大就永远不必淘汰。整段测量在普通 CPU 上约 2 秒。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "measure_block_hit_rate", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 测量：三种负载下块级缓存的命中率随 num_blocks 的变化
# 测量：三种负载下，块级缓存的 token 命中率随 num_blocks 的变化，对照不限容量的 PrefixCacheManager
def _show_hit_rate_vs_capacity(block_size=16, capacities=(64, 128, 256, 512, 1024, 2048)):
    workloads = make_workloads(seed=34)
    try:
        rates = {name: [simulate(BlockPrefixCache(block_size, n), trace) for n in capacities] for name, trace in workloads.items()}
    except NotImplementedError:
        print("先完成 TODO 11–14，再运行这个测量。")
        return
    try:
        seed_rates = {name: f"{simulate_seed(trace, block_size):.3f}" for name, trace in workloads.items()}
    except NotImplementedError:
        seed_rates = {name: "（先完成 TODO 1–8）" for name in workloads}
    names = list(workloads)
    table = [{"n": n, **{name: f"{rates[name][i]:.3f}" for name in names}} for i, n in enumerate(capacities)]
    table.append({"n": "PrefixCacheManager（不限容量）", **seed_rates})
    table.append({"n": "不淘汰所需块数", **{name: num_distinct_full_blocks(workloads[name], block_size) for name in names}})
    show_table(table, [("n", "num_blocks", "{}")] + [(name, name, "{}") for name in names])
    print(f"（请求数：{', '.join(f'{name} {len(workloads[name])}' for name in names)}）")
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        print("没有安装 matplotlib：只打印表格。")
        return
    fig, ax = plt.subplots(figsize=(11, 5))
    for name in names:
        (line,) = ax.plot(capacities, rates[name], marker="o", label=f"BlockPrefixCache: {name}")
        if not seed_rates[name].startswith("（"):
            ax.axhline(float(seed_rates[name]), color=line.get_color(), linestyle="--", linewidth=1, label=f"PrefixCacheManager (unbounded): {name}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(capacities, [str(n) for n in capacities])  # 64、128……而不是 2⁶、2⁷
    ax.set_xlabel("num_blocks (block_size=16)")
    ax.set_ylabel("token hit rate")
    ax.set_ylim(-0.02, 1)
    ax.set_title("token hit rate vs capacity")
    ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5))  # 图外右侧：六条图例不压住曲线
    fig.tight_layout()
    plt.show()


_show_hit_rate_vs_capacity()
del _show_hit_rate_vs_capacity

# %% [markdown]
# **怎么读这张表。**
#
# - **容量决定能留住多少可复用的前缀。** 三种负载都是池子越大命中越高，饱和点却不同。`system-prompt` 在 512 块（约为“不淘汰所需块数”的三分之一）就到顶了：其余的块存的是每个请求独有的问题，永远不会再被命中，缓存它们只是占地方。`multi-turn` 和 `few-shot` 要到接近“不淘汰所需块数”才到顶：会话的每一轮都会被下一轮复用，例题的各种组合也会反复出现，几乎每个块都有再用的机会。到顶之后剩下的未命中，是每个请求独有的 token 加上不满一块的尾巴。
# - **小池子也保得住最热的前缀。** `system-prompt` 在 64 块时仍有三成左右的命中：最热的几段 system prompt 几乎一直被运行中的请求引用，引用计数保证它们不会被淘汰。
# - **`PrefixCacheManager` 只认“整条旧 prompt”。** 它把每个 prompt 整条登记，新请求只有以某条**完整的**旧 prompt 开头才算命中。`system-prompt` 和 `few-shot` 的新请求从不以别人的完整 prompt 开头，所以命中率是 0；块级缓存按块自动发现任意长度的公共前缀，不需要谁事先登记“哪段是公共的”。`multi-turn` 里上一轮的 prompt 恰好是下一轮的前缀，它按 token 精确命中，也不受容量限制，所以和大池子的块级缓存不相上下；块级缓存多出来的是各会话共享的那段 system prompt，少掉的是按块取整。

# %% [markdown]
# ### 3.5　测量二：淘汰策略为什么重要
#
# 同样的请求流、同样的块池，只换淘汰策略：LRU（本章的 `BlockPrefixCache`）、FIFO（淘汰最早登记的块）、随机淘汰。三者都受引用计数保护：正在运行的请求用着的块谁也不会淘汰。区别只在于：当几个块都没人用时，先丢哪一个。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "measure_block_eviction_policy", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 测量：LRU、FIFO、随机淘汰的命中率
# 测量：同一个请求流、同样大小的块池下，LRU、FIFO、随机淘汰的 token 命中率
def _show_eviction_policies(block_size=16, capacities=(128, 256)):
    policies = {"LRU": BlockPrefixCache, "FIFO": FIFOBlockPrefixCache, "random": RandomBlockPrefixCache}
    workloads = make_workloads(seed=34)
    try:
        rows = [
            (name, n, [simulate(cls(block_size, n), trace) for cls in policies.values()])
            for name, trace in workloads.items()
            for n in capacities
        ]
    except NotImplementedError:
        print("先完成 TODO 11–14，再运行这个测量。")
        return
    table = [{"workload": name, "n": n, **dict(zip(policies, rates))} for name, n, rates in rows]
    show_table(table, [("workload", "负载", "{}"), ("n", "num_blocks", "{}")] + [(p, p, "{:.3f}") for p in policies])


_show_eviction_policies()
del _show_eviction_policies

# %% [markdown]
# **怎么读这张表。** 在这些负载里 LRU 没有一格比 FIFO 或随机差：比 FIFO 高 2 到 8 个百分点，比随机高 0 到 5 个百分点。原因是请求流有“最近用过的很快会再用”的性质：热门 system prompt 一次次被命中，多轮对话的下一轮很快就来。FIFO 只看登记得早不早，一段热门 system prompt 登记得最早，只要某一刻没人引用它，就会被当成最老的块清掉，下一个请求只好重算，再登记，过一阵又被清掉。随机淘汰介于两者之间。差距并不大，因为真正最热的前缀大多时候正被运行中的请求引用，三种策略都淘汰不了它：**引用计数保护正在用的块，淘汰策略决定没人用的块谁先走。**
#
# 反过来，LRU 也有吃亏的时候：一大批只出现一次的长文档会把热门前缀挤到队首（缓存污染，scan pollution）。vLLM 社区里就有人提议借鉴 Linux 页缓存的 active/inactive 两条链表来缓解。

# %% [markdown]
# ### 3.6　vLLM 和 SGLang：同一件事的两种组织方式
#
# **vLLM** 的前缀缓存和本章的 `BlockPrefixCache` 结构相近：KV 按固定大小的块分页，只有满块才有块哈希（父块哈希 + 本块 token），用一张“块哈希 → 物理块”的字典查找；没人用的块按淘汰顺序排在一条空闲队列里，请求结束时从尾到头排到队尾；命中时把块从队列里摘下、引用 +1；查找本身不改变淘汰顺序。有一处要紧的不同：**vLLM 命中时不核对块里存的 token**，只信哈希，所以它用碰撞概率可以忽略的 SHA-256；本章用 Python 内置的 64 位 `hash`，碰撞要当真，TODO 11 才要核对 `parent_key` 和 `token_ids`。
#
# **SGLang** 的 RadixAttention 把缓存的前缀组织成一棵**基数树**（radix tree）：边上是 token 序列，节点上挂着这些 token 的 KV 在显存池里的位置。匹配时从根沿树逐段比较 token，不用哈希，命中可以精确到 token；引用计数沿节点到根的路径加减；淘汰时只从引用计数为 0 的叶子里挑，默认挑最久未访问的。
#
# 两者的取舍：哈希链每一步是一次 O(1) 的字典查找，块表天然对齐 PagedAttention 的块；基数树命中更精细，树的形状本身就表达了前缀之间的共享关系，代价是要自己维护节点分裂和叶子淘汰。
#
# <details><summary>深入：两个引擎里对应的名字和开关</summary>
#
# - vLLM：设计文档 `docs/design/prefix_caching.md` 写明块哈希“不是 100% 无碰撞”；哈希算法由 `prefix_caching_hash_algo` 选（`vllm/config/cache.py`，0.33 的默认是 `sha256`）；块哈希还会加上 LoRA、多模态输入、`cache_salt` 等额外键。空闲队列在 `vllm/v1/core/block_pool.py` 的 `BlockPool.free_block_queue`（双向链表）；从表头取到一个还带着哈希的块时才把它从字典里删掉（惰性淘汰，`_maybe_evict_cached_block`）；命中时由 `touch` 摘下并加引用。
# - SGLang：基数树在 `python/sglang/srt/mem_cache/radix_cache.py`。默认一个 token 一个槽位；`--page-size` 大于 1 时，`match_prefix` 先把查询截到页的整数倍，按页命中。分叉处就地把节点一分为二；匹配会刷新路径上节点的访问时间；`--radix-eviction-policy` 可把默认的 LRU 换成 LFU 等策略，叶子删掉后父节点可能变成新的叶子。
#
# </details>

# %% [markdown]
# ### 3.7　证据边界：这一部分证明了什么，没证明什么
#
# - **证明了：** `BlockPrefixCache` 的簿记是对的：随机操作序列与暴力参考实现逐步比对，每一步之后所有不变量都成立（块池不超容量、使用中的块不被淘汰、淘汰顺序是 LRU、不满的块不缓存、强制哈希碰撞也不会返回错误的块、查询不改变状态、块不够时报错且不改变状态）。
# - **测到了：** 在**合成**请求流上，token 级命中率如何随块池容量和淘汰策略变化。查找开销这本 notebook 不测：编写本章时我们另外计时过，缓存 100 到 10,000 条序列时哈希链的 `match` 耗时基本不变，`PrefixCacheManager.match_prefix` 的线性扫描随条数线性增长；想自己看，在 3.4 节之后新建一格，用 `time.perf_counter` 给两者各计一次时即可。
# - **没有证明：** 真实显存里的 KV 复用是否正确（那是第二部分用小 Transformer 做的事）；命中率换算成 TTFT、吞吐或显存节省是多少：命中的 token 省掉的是 prefill 计算，但注意力开销随位置增长，token 命中率不等于时间节省比例；真实请求流下命中率是多少。服务级别的数字需要 serving 基准测试（例如 vLLM 的 `vllm bench serve`）。
# - **没有实现：** decode 阶段新生成的满块也登记进缓存（vLLM 会这样做，多轮对话的命中率会更高）；全部命中时仍要重算最后一块（vLLM）或最后一个 token（SGLang，页大小为 1 时）以得到 logits（第四部分的 TODO 15 实现了 vLLM 的规则）；LoRA / 多模态的额外哈希键；抢占（preemption）时的块回收；KV 在 GPU、CPU、磁盘之间的分层卸载。

# %% [markdown]
# ### 小结
#
# - 前缀缓存的单位是**满块**：不满的块还会被写入，不能共享；命中长度因此按 `block_size` 向下取整。
# - 块的 key 是**哈希链**：覆盖父块的 key 和本块的 token，所以同样的 token 放在不同位置是不同的块；查找每块一次字典查询，和缓存的大小无关。哈希可能碰撞，命中时要核对内容（或者像 vLLM 那样用 SHA-256）。
# - **引用计数**保护正在用的块；**LRU** 只决定没人用的块谁先走。一条链从尾到头入队，父块总比子块晚淘汰。
# - 命中率是“缓存 × 请求流”的结果：容量要够装下会被再用的前缀，请求流要真有可复用的前缀。
#
# ### 练习
#
# 下面的问题不计分，答案在答案版 notebook 里。
#
# 1. `block_size=16` 时，两个请求共享前 100 个 token，第二个请求能命中几个 token？`block_size` 改成 64 呢？块取大、取小各有什么代价？
# 2. 缓存里登记了一个 48 token 的 prompt A（`block_size=16`，3 个满块）。新 prompt 与 A 只在第 20 个 token 上不同，其余 47 个 token 完全相同。`match` 返回几个块？第 3 块的 token 与 A 的第 3 块一模一样，为什么也不命中？
# 3. 请求 A（3 个满块）结束后，池子满了，新请求需要 1 个新块。哪个块被淘汰？如果 `release` 按从头到尾的顺序入队，会淘汰哪个块，之后 A 的前缀还能命中几块？
# 4. TODO 12 里，算“最多能腾出几个块”时为什么要减去命中块中引用计数为 0 的那些？举一个不减就会出错的例子。
# 5. 3.4 节里 `system-prompt` 负载在 512 块时命中率就到顶了，而“不淘汰所需块数”大得多。多出来的块存的是什么？如果把每个请求问题部分的长度加倍（`system_prompt_trace(rng, tail_len=(32, 384))`），命中率的顶和到顶所需的容量各会怎样变？先猜，再在新的一格里用 `simulate` 验证。

# %% [markdown] tags=["solutions-only"]
# #### 练习答案（第三部分）
#
# 1. 96 个（6 个满块；第 7 块只有 4 个共享 token，不满足“整块相同”）。`block_size=64` 时只有 64 个。块大：块表短、哈希和查表次数少，但命中向下取整损失得多，不满的尾块也更长；块小：命中更精细，块表和索引更大、每块的管理开销更高。
# 2. 1 个块。第 20 个 token 在第 2 块里，第 2 块的 key 不同，第一次不命中就停。即使单看第 3 块，它的 key 覆盖了父块的 key：父块不同，第 3 块的 key 也不同。KV 依赖整个前缀，第 3 块的 K/V 在两个 prompt 里本来就不一样，不能共享。
# 3. A 的第 3 块（链尾）：`release` 从尾到头入队，尾块排在队首。若按从头到尾入队，第 1 块排在队首先被淘汰，它的 key 注销后，第 2、3 块虽然还在池里，却再也查不到（查找从第 1 块开始），A 的前缀一块也命中不了，白白占着两个块直到被淘汰。
# 4. 命中块此刻在可淘汰队列里，但这次 `acquire` 马上要引用它，不能再拿来腾地方。例：池子 2 块、都可淘汰、没有空闲块，新 prompt 命中其中 1 块、还需要 2 个新块：不减时以为能腾出 2 块，开始改状态后才发现只能淘汰 1 块（或者把命中的块自己淘汰掉）；减去之后只剩 1 块可腾，正确地抛出 `CacheFullError`、什么都不改。
# 5. 多出来的块存的是每个请求独有的问题部分：它们只出现一次，永远不会再命中，缓存它们只是占地方。问题加倍后（种子 34），“不淘汰所需块数”从 1,453 涨到 2,732；命中率的顶从 0.749 降到 0.621，因为能命中的 system prompt 在每个 prompt 里占的比例变小了；到顶所需的容量从约 512 块推到约 1,024 块（512 块时 0.601）：可淘汰队列里夹着的一次性问题块变多，池子要更大，冷门的 system prompt 才不会在两次使用之间被挤掉。
