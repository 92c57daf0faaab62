# %% [markdown]
# ## 第四部分：调度器——分块预填充与前缀缓存在同一步里相遇
#
# 前三部分各管一件事：第一、三部分记账（哪些前缀已经算过），第二部分证明分块算出的 logits 与一次算完相同。真实的推理服务里，这两件事由同一个部件安排：**调度器**。它每一步（step，一次模型前向）决定“这一步给哪些请求各算几个 token”。这一部分你来写 vLLM v1 调度器的核心，用 vLLM 自己的名字。
#
# #### 4.1　几个词
#
# - **一步（step）**：调度器选好一批 token，模型做一次前向。一步里可以同时有正在 decode 的请求（每个只差 1 个 token）和正在 prefill 的请求（差一大段 prompt）。
# - **token 预算（token budget）**：每一步最多处理多少个 token，vLLM 叫 `max_num_batched_tokens`。decode 的 token 和 prefill 的 token **共用**这一个预算。
# - **TTFT（time to first token，首 token 时延）**：请求到达到它的第一个输出 token 产生的时间，主要由排队和 prefill 决定。
# - **TBT（time between tokens，token 间隔）**：同一个请求相邻两个输出 token 之间的时间；**TPOT**（time per output token）是一个请求所有 TBT 的平均。用户看到的“卡顿”是 TBT 的尾部（p99），不是平均。
# - **generation stall（生成停顿）**：一个很长的 prefill 被整个塞进一步里，这一步变得很慢，所有正在 decode 的请求都要等它——它们的 TBT 一下子跳高。Sarathi-Serve（OSDI 2024）就是用这个词描述问题的。
#
# **“分块”现在有两种意思。** 第二部分的 `chunk_size` 是一个固定的块大小，只为了说明分块后结果不变、注意力分数变小；这里的“块”不是固定大小：一个 prefill 在一步里拿到多少 token，取决于这一步的预算被 decode 用掉多少、排在它前面的请求又拿走多少。`block_size` 在这一部分回到第三部分的意思：KV 块（页）的大小，前缀缓存以整块为单位命中。

# %% [markdown]
# #### 4.2　vLLM v1 的一步
#
# `vllm/v1/core/sched/scheduler.py` 的 `Scheduler.schedule` 开头有一段注释，说它**没有** prefill 阶段和 decode 阶段：每个请求只有两个数，`num_computed_tokens`（已经算好 KV 的 token 数）和 `num_tokens`（prompt 加上已经生成的 token），调度器每一步给请求分配 token，让前者追上后者。分块预填充、前缀缓存、投机解码都是这一条规则的特例。一步之内的顺序是：
#
# 1. `token_budget = max_num_batched_tokens`。
# 2. **先排正在运行的请求**（`self.running`，按进入的先后）。每个请求欠 `num_tokens - num_computed_tokens` 个 token：decode 欠 1 个，prefill 做了一半的欠剩下的 prompt。`long_prefill_token_threshold` 大于 0 时，一步最多给一个请求这么多（默认 0，即不限）；再不能超过剩下的预算。欠 0 个的请求跳过；预算用完就停。
# 3. **再从等待队列按到达顺序接纳新请求**（先来先服务），直到预算用完，或者运行中的请求已经有 `max_num_seqs` 个。新请求先查前缀缓存（`kv_cache_manager.get_computed_blocks`）：命中的 token 直接算作 `num_computed_tokens`，**永远不会被调度**，只有没命中的后缀参与分块——这正是第一部分 `chunked_suffix_prefill_plan` 的想法，只是块的大小由预算决定。
# 4. 每个被调度的请求把 `num_computed_tokens` 加上这一步给它的数（`_update_after_schedule`），所以做了一半的 prefill 下一步接着做。
# 5. 模型前向之后，`update_from_output` 把采样出的 token 交给**已经追上**的请求；这一步只算了 prompt 一部分的请求不产生 token（模型那边会丢掉它的采样结果）。生成够 `max_tokens` 个的请求结束、离开 running。
#
# 这样排的结果是：decode 永远排在 prefill 前面，一个长 prompt 被切成若干块、每步只占预算剩下的部分，正在 decode 的请求不会被它卡住。Sarathi-Serve 把这种做法叫 stall-free batching（先 decode，再做了一半的 prefill，最后新的 prefill）。
#
# **KV 不够时。** 上面第 2 步里，vLLM 为每个请求调用 `kv_cache_manager.allocate_slots` 申请新的 KV 块；申请不到时，它把 running 里**最后进入**的请求抢占（preempt）：释放它的块、`num_computed_tokens` 归零、放回等待队列的最前面，以后从头重算（命中的前缀可以再次命中）。这一步只要有抢占，就不再接纳新请求。本节的调度器不管 KV 容量，也就没有抢占。
#
# **SGLang 不一样。** SGLang 也只对没命中的 token 收预算（`extend_input_len = len(fill_ids) - len(prefix_indices)`），但它默认**先跑 prefill 批**：`get_next_batch_to_run` 只要能组出 prefill 批就先跑它，decode 等下一步；`--chunked-prefill-size` 是一个 prefill 批的预算。只有打开 `--enable-mixed-chunk`，prefill 块和 decode 才在同一步里，而且先扣 decode 的 token。所以同一个长 prompt，在 SGLang 默认设置下会让正在 decode 的请求停顿几步，在 vLLM v1 里不会。4.6 节会量这一点。

# %% nbgrader={"grade": false, "grade_id": "sched_request", "locked": true, "schema_version": 3, "solution": false, "task": false}
from collections import deque
from dataclasses import field


@dataclass
class Request:
    """一个生成请求：prompt、最多生成几个 token，以及调度器记的两个数。

    num_computed_tokens: 已经算好 KV 的 token 数（命中的前缀也算在内），从 0 开始。
    output_token_ids:    已经生成的 token。
    num_tokens:          prompt + 已生成的 token 数；num_computed_tokens 追上它时才能采样下一个 token。
    生成了 max_tokens 个 token 的请求就结束了（is_finished）。
    """

    request_id: str
    prompt_token_ids: list
    max_tokens: int
    num_computed_tokens: int = 0
    output_token_ids: list = field(default_factory=list)

    def __post_init__(self):
        self.prompt_token_ids = [int(t) for t in self.prompt_token_ids]  # 拷贝一份：调用方之后改自己的 list 不影响请求
        if not self.prompt_token_ids:
            raise ValueError(f"请求 {self.request_id!r} 的 prompt 不能为空")
        if type(self.max_tokens) is not int or self.max_tokens <= 0:
            raise ValueError(f"请求 {self.request_id!r} 的 max_tokens 必须是正整数，现在是 {self.max_tokens!r}")

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return len(self.output_token_ids) >= self.max_tokens


@dataclass
class SchedulerOutput:
    """schedule() 的结果：这一步给每个请求几个 token（request_id -> 正整数），按调度的先后排列。"""

    num_scheduled_tokens: dict = field(default_factory=dict)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


class BlockCacheAdapter:
    """让第三部分的 BlockPrefixCache 当调度器的 prefix_cache 用：match_prefix 返回命中的 token 数。"""

    def __init__(self, block_cache):
        self.block_cache = block_cache

    def match_prefix(self, token_ids) -> int:
        return len(self.block_cache.match(list(token_ids))) * self.block_cache.block_size

# %% [markdown]
# #### 4.3　TODO 15：前缀命中了多少，从哪里开始算
#
# 新请求进来时，调度器问前缀缓存：“这个 prompt 开头有多少个 token 的 KV 已经有了？”`prefix_cache` 可以是任何有 `match_prefix(token_ids) -> int` 的对象：第一部分的 `PrefixCacheManager` 就是；第三部分的 `BlockPrefixCache` 套上上面的 `BlockCacheAdapter` 也是；`None` 表示不用前缀缓存。
#
# 拿到的数不能直接用，vLLM 的 `get_computed_blocks`（`vllm/v1/core/kv_cache_manager.py`）还做了两件事：
#
# 1. **最多到 `num_tokens - 1`。** 整个 prompt 都命中时，最后一个 token 仍要算一遍，模型才会给出它的 logits，才能采样第一个输出 token。
# 2. **按整块算。** KV 以块为单位存放和共享，只有满块会被缓存；命中的长度向下取整到 `block_size` 的倍数，新算的 token 从块边界开始。
#
# 两条合起来：一个完整命中的 prompt 要重算的不是 1 个 token，而是最后一个（不满或刚好满的）块，最多 `block_size` 个 token——vLLM 源码里那段注释说的就是这件事。也因此，一段比一个块还短的共享前缀**永远不会命中**，这是用户最常问的“命中率为 0”的原因之一。（SGLang 的基数树默认一个 token 一页，完整命中时正好重算 1 个 token。）
#
# 实现 `num_cached_tokens(prefix_cache, token_ids, block_size)`：返回可以直接当作 `num_computed_tokens` 的命中长度（`int`）。例：`block_size=16`，缓存命中 37 个 token → 32；命中 10 个 → 0；48 个 token 的 prompt 全部命中 → `min(48, 47) = 47` → 32。

# %% nbgrader={"grade": false, "grade_id": "todo15_num_cached_tokens", "locked": false, "schema_version": 3, "solution": true, "task": false}
def num_cached_tokens(prefix_cache, token_ids, block_size) -> int:
    """新请求可以跳过的 token 数：前缀缓存命中的长度，最多 len(token_ids) - 1，向下取整到 block_size 的倍数。

    prefix_cache: None，或任何有 match_prefix(token_ids) -> int 的对象（只查询，不修改它）。
    token_ids:    list[int]，至少一个 token。
    block_size:   KV 块大小（正整数）。
    返回 int，0 <= 结果 <= len(token_ids) - 1，且是 block_size 的倍数。
    """
    ### BEGIN SOLUTION
    if prefix_cache is None:
        return 0
    hit = min(prefix_cache.match_prefix(token_ids), len(token_ids) - 1)  # 至少留最后一个 token 去算 logits
    return hit // block_size * block_size  # 只有整块才是缓存里的块
    ### END SOLUTION

# %% [markdown]
# #### 4.4　TODO 16–19：`Scheduler`
#
# 构造函数、`add_request` 和 `schedule` 已经写好：`schedule` 先用 `_schedule_running` 排正在运行的请求，再用 `_schedule_waiting` 接纳新请求，最后把每个被调度请求的 `num_computed_tokens` 加上它这一步拿到的 token 数。你来写四个方法：
#
# - **TODO 16 `_num_new_tokens(request, num_computed_tokens, token_budget)`**：这一步最多给这个请求几个 token：欠的 `request.num_tokens - num_computed_tokens`，`long_prefill_token_threshold > 0` 时不超过它，再不超过 `token_budget`。
# - **TODO 17 `_schedule_running(out, token_budget)`**：按 `self.running` 的顺序，给每个请求 `_num_new_tokens(...)` 个 token，记进 `out.num_scheduled_tokens[request_id]`，从预算里扣掉；得到 0 个的请求跳过（不记 0）；预算用完就停。返回剩下的预算。
# - **TODO 18 `_schedule_waiting(out, token_budget)`**：预算还有、运行中的请求不到 `max_num_seqs` 个时，从 `self.waiting` 的**队头**取请求：先用 TODO 15 把它的 `num_computed_tokens` 设成命中长度，再给它 `_num_new_tokens(...)` 个 token，放进 `self.running` 的末尾。
# - **TODO 19 `update_from_output(out, sampled_token_ids)`**：`sampled_token_ids` 是模型这一步为每个被调度请求采样的 token（`request_id -> int`）。只有已经追上的请求（`num_computed_tokens == num_tokens`）收下自己的 token；还在 prefill 中途的请求什么也不收。生成够 `max_tokens` 个的请求从 `self.running` 和 `self.requests` 里移除。
#
# 一个固定的例子：预算 1024，同时来了 3 个 800 token 的新请求，第一步调度 `{"a": 800, "b": 224}`，`c` 这一步什么也拿不到；第二步 `a` 只要 1 个 decode token，`b` 拿剩下的 576，`c` 拿到 447。
#
# 常见错误：decode 不扣预算；命中的 token 也扣预算；完整命中时一个 token 都不调度；命中长度不按块取整；忽略 `long_prefill_token_threshold`；先排 prefill，预算够时 decode 饿着；prefill 做到一半就采样；新请求不按到达顺序接纳；只在请求的第一块里找前缀（复用量被预算卡住）；预算多用了 1 个。

# %% nbgrader={"grade": false, "grade_id": "todo16_19_scheduler", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Scheduler:
    """vLLM v1 调度器的核心：一个 token 预算，decode 与 prefill 块共用，命中的前缀不重算。"""

    def __init__(
        self,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        block_size: int = 16,
        long_prefill_token_threshold: int = 0,
        prefix_cache=None,
    ):
        for name, value in (
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
            ("block_size", block_size),
        ):
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} 必须是正整数，现在是 {value!r}")
        if type(long_prefill_token_threshold) is not int or long_prefill_token_threshold < 0:
            raise ValueError(f"long_prefill_token_threshold 必须是非负整数（0 表示不限），现在是 {long_prefill_token_threshold!r}")
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.block_size = block_size
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.prefix_cache = prefix_cache
        self.waiting = deque()  # 还没进入 running 的请求，按到达顺序
        self.running = []  # 已接纳、还没结束的请求，按接纳顺序
        self.requests = {}  # request_id -> Request：waiting 与 running 里的全部请求

    def add_request(self, request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"请求 {request.request_id!r} 已经在调度器里了")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        """安排一步：先 running，再 waiting；然后每个被调度的请求前进它拿到的 token 数。"""
        out = SchedulerOutput()
        token_budget = self.max_num_batched_tokens
        token_budget = self._schedule_running(out, token_budget)
        self._schedule_waiting(out, token_budget)
        for request_id, num_new_tokens in out.num_scheduled_tokens.items():  # vLLM 的 _update_after_schedule
            self.requests[request_id].num_computed_tokens += num_new_tokens
        return out

    def _num_new_tokens(self, request, num_computed_tokens: int, token_budget: int) -> int:
        # TODO 16: 欠的 token 数；threshold > 0 时不超过它；再不超过 token_budget。
        ### BEGIN SOLUTION
        num_new_tokens = request.num_tokens - num_computed_tokens
        if 0 < self.long_prefill_token_threshold < num_new_tokens:
            num_new_tokens = self.long_prefill_token_threshold
        return min(num_new_tokens, token_budget)
        ### END SOLUTION

    def _schedule_running(self, out, token_budget: int) -> int:
        # TODO 17: 按接纳顺序给 running 里的请求分 token；得到 0 个的跳过；返回剩下的预算。
        ### BEGIN SOLUTION
        for request in self.running:
            if token_budget == 0:
                break
            num_new_tokens = self._num_new_tokens(request, request.num_computed_tokens, token_budget)
            if num_new_tokens == 0:
                continue
            out.num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
        return token_budget
        ### END SOLUTION

    def _schedule_waiting(self, out, token_budget: int) -> None:
        # TODO 18: 从 waiting 队头按到达顺序接纳：先设命中长度（TODO 15），再分 token，放进 running。
        ### BEGIN SOLUTION
        while self.waiting and token_budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting.popleft()
            request.num_computed_tokens = num_cached_tokens(self.prefix_cache, request.prompt_token_ids, self.block_size)
            num_new_tokens = self._num_new_tokens(request, request.num_computed_tokens, token_budget)
            self.running.append(request)
            out.num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
        ### END SOLUTION

    def update_from_output(self, out, sampled_token_ids: dict) -> None:
        """模型跑完这一步之后：追上的请求收下采样的 token，生成够 max_tokens 个的请求结束。"""
        # TODO 19: 只看这一步被调度的请求；prefill 中途的请求不收 token；结束的请求移出 running 和 requests。
        ### BEGIN SOLUTION
        for request_id in out.num_scheduled_tokens:
            request = self.requests[request_id]
            if request.num_computed_tokens < request.num_tokens:
                continue  # 只算了 prompt 的一部分：这一行的采样被丢掉
            request.output_token_ids.append(sampled_token_ids[request_id])
            if request.is_finished:
                self.running.remove(request)
                del self.requests[request_id]
        ### END SOLUTION
