# %% [markdown]
# ## 第四部分（{{points:sched}}）：调度器——分块预填充与前缀缓存在同一步里相遇
#
# **学习目标：** 学完这一部分，你能：
#
# - 说清 vLLM v1 调度器的**一步**（step）怎样用一个 **token 预算**（token budget）同时安排 decode 和 prefill，以及**分块预填充**（chunked prefill）为什么让 decode 不再被长 prompt 卡住；
# - 实现命中前缀的取整规则（TODO 15）和调度器的四个方法（TODO 16–19），并在小模型上验证：切成什么样的块，算出的结果都与一次算完相同；
# - 读懂一次离散事件模拟：预算大小怎样在 **TTFT** 和 **TBT** 之间取舍，前缀缓存省下多少 prefill，路由怎样决定跨副本的命中率。
#
# **用时：** 约 2 小时（TODO 15–19）。**需要：** 第一部分的 `PrefixCacheManager`、第二部分的小模型；不需要第三部分。
#
# 前三部分各管一件事：第一、三部分记账（哪些前缀已经算过），第二部分证明分块算出的 logits 与一次算完相同。真实的推理服务里，这两件事由同一个部件安排：**调度器**。它每一步（step，一次模型前向）决定“这一步给哪些请求各算几个 token”。这一部分你来写 vLLM v1 调度器的核心，用 vLLM 自己的名字。
#
# ### 4.1　几个词
#
# - **一步（step）**：调度器选好一批 token，模型做一次前向。一步里可以同时有正在 decode 的请求（每个只差 1 个 token）和正在 prefill 的请求（差一大段 prompt）。
# - **token 预算（token budget）**：每一步最多处理多少个 token，vLLM 叫 `max_num_batched_tokens`。decode 的 token 和 prefill 的 token **共用**这一个预算。
# - **TTFT（time to first token，首 token 时延）**：请求到达到它的第一个输出 token 产生的时间，主要由排队和 prefill 决定。
# - **TBT（time between tokens，token 间隔）**：同一个请求相邻两个输出 token 之间的时间；**TPOT**（time per output token）是一个请求所有 TBT 的平均。用户看到的“卡顿”是 TBT 的尾部（p99），不是平均。
# - **generation stall（生成停顿）**：一个很长的 prefill 被整个塞进一步里，这一步变得很慢，所有正在 decode 的请求都要等它——它们的 TBT 一下子跳高。Sarathi-Serve（OSDI 2024）就是用这个词描述问题的。
#
# **“分块”现在有两种意思。** 第二部分的 `chunk_size` 是一个固定的块大小，只为了说明分块后结果不变、注意力分数变小；这里的“块”不是固定大小：一个 prefill 在一步里拿到多少 token，取决于这一步的预算被 decode 用掉多少、排在它前面的请求又拿走多少。`block_size` 在这一部分回到第三部分的意思：KV 块（页）的大小，前缀缓存以整块为单位命中。

# %% [markdown]
# ### 4.2　vLLM v1 的一步
#
# `vllm/v1/core/sched/scheduler.py` 的 `Scheduler.schedule` 开头有一段注释，说它**没有** prefill 阶段和 decode 阶段：每个请求只有两个数，`num_computed_tokens`（已经算好 KV 的 token 数）和 `num_tokens`（prompt 加上已经生成的 token），调度器每一步给请求分配 token，让前者追上后者。分块预填充、前缀缓存、投机解码都是这一条规则的特例。一步之内的顺序是：
#
# 1. `token_budget = max_num_batched_tokens`。
# 2. **先排正在运行的请求**（`self.running`，按进入的先后）。每个请求欠 `num_tokens - num_computed_tokens` 个 token：decode 欠 1 个，prefill 做了一半的欠剩下的 prompt。`long_prefill_token_threshold` 大于 0 时，一步最多给一个请求这么多（vLLM 0.33 的默认是 0，即不限；这一步只有一个请求时也不设上限，因为没有别的请求会被它饿着）；再不能超过剩下的预算。欠 0 个的请求跳过；预算用完就停。
# 3. **再从等待队列按到达顺序接纳新请求**（先来先服务），直到预算用完，或者运行中的请求已经有 `max_num_seqs` 个。新请求先查前缀缓存（`kv_cache_manager.get_computed_blocks`）：命中的 token 直接算作 `num_computed_tokens`，**永远不会被调度**，只有没命中的后缀参与分块——这正是第一部分 `chunked_suffix_prefill_plan` 的想法，只是块的大小由预算决定。
# 4. 每个被调度的请求把 `num_computed_tokens` 加上这一步给它的数（`_update_after_schedule`），所以做了一半的 prefill 下一步接着做。
# 5. 模型前向之后，`update_from_output` 把采样出的 token 交给**已经追上**的请求；这一步只算了 prompt 一部分的请求不产生 token（模型那边会丢掉它的采样结果）。生成够 `max_tokens` 个的请求结束、离开 running。
#
# 这样排的结果是：已经在 running 里的请求——正在 decode 的，和 prefill 做了一半的——都排在新请求前面，彼此之间**按接纳的先后**，vLLM 不把 decode 挪到做了一半的 prefill 前面（第 2 步只是按顺序走一遍 `self.running`）。一个长 prompt 被切成若干块、每步只占预算剩下的部分；running 里的 decode 每步都排得上，除非排在它前面的请求（包括一个先被接纳、还在分块的长 prefill）已经把预算用完——预算远大于 decode 的个数时，这很少发生。Sarathi-Serve 把这种做法叫 stall-free batching；它的调度器（`sarathi/core/scheduler/sarathi_scheduler.py`）才是严格的“先 decode，再做了一半的 prefill，最后新的 prefill”。
#
# **KV 不够时。** 上面第 2 步里，vLLM 为每个请求调用 `kv_cache_manager.allocate_slots` 申请新的 KV 块；申请不到时，它把 running 里**最后进入**的请求抢占（preempt）：释放它的块、`num_computed_tokens` 归零、放回等待队列的最前面，以后从头重算（命中的前缀可以再次命中）。这一步只要有抢占，就不再接纳新请求；等待的请求要整个序列都放得下才被接纳（0.33.0 的默认，第五部分细说）。本节的调度器不管 KV 容量，也就没有抢占。
#
# **SGLang 不一样。** SGLang 也只对没命中的 token 收预算，但它默认**先跑 prefill 批**：只要能组出一个 prefill 批就先跑它，decode 等下一步；只有打开 `--enable-mixed-chunk`，prefill 块和 decode 才在同一步里，而且先扣 decode 的 token。所以同一个长 prompt，在 SGLang 默认设置下会让正在 decode 的请求停顿几步，在 vLLM v1 里不会。4.6 节用模拟看这一点（不是在 GPU 上测）。
#
# <details><summary>深入：SGLang 里对应的名字（读自 SGLang 0.4.6 与 0.5.x 的源码）</summary>
#
# - 收预算的 token 数：`extend_input_len = len(fill_ids) - len(prefix_indices)`（`schedule_batch.py`），即没命中的部分。
# - 先跑 prefill：`Scheduler.get_next_batch_to_run` 里“能组出 prefill 批就先跑它”。
# - `--chunked-prefill-size` 是一个 prefill 批的分块预算（`PrefillAdder.rem_chunk_tokens`）；`--max-prefill-tokens`（默认 16384）也限制一个 prefill 批的 token 数，帮助文字说实际上限取它和模型最大上下文长度中较大的一个。
#
# 这些名字在新版本里可能改了：读你用的版本的 `python/sglang/srt/managers/` 时，先按上面的行为找对应的代码。
#
# </details>

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
# **本部分的规则对应 vLLM 0.33.0（2026 年 11 月）。** 编写本章时我们把本部分的参考调度器和 vLLM 0.33.0 自己的 `Scheduler`、`KVCacheManager` 放在 CPU 上跑（模型输出是假的），在 240 条随机轨迹、31,764 步上逐步比较：每一步调度了谁、按什么顺序、各几个 token，新请求从 `get_computed_blocks` 得到的命中长度，全部相同（2026-12-04）。引擎改得很快，读别的版本的源码时会遇到差别，见下面的深入。
#
# <details><summary>深入：别的 vLLM 版本与本部分不同的地方</summary>
#
# - **0.7.3 及以前**：默认引擎是 V0（`vllm/envs.py` 里 `VLLM_USE_V1` 默认 0；更早的版本还没有 V1），调度器是另一套（`vllm/core/scheduler.py`），本部分的规则不适用。
# - **0.8.0–0.10.x**：V1 成为默认引擎（0.8.0 的 `VLLM_USE_V1` 默认 1），V0 还在，V1 不支持的设置会退回 V0（`vllm/engine/arg_utils.py`）；0.11.0 删掉了 V0。
# - **0.8.0–0.8.2**：V1 调度器（0.8.0 里是 `vllm/v1/core/scheduler.py`）还没有 `long_prefill_token_threshold`；0.8.0 的 `_is_v1_supported_oracle` 遇到非默认的 threshold 或 `max_num_partial_prefills` 就退回 V0。0.8.3 起 V1 支持 threshold。
# - **完整命中的写法**：0.8.0 由调度器处理，块对齐的 prompt 全部命中时（要算的 token 为 0）退回最后一整块重算（`Scheduler.schedule`，注释说 `allocate_slots` 要求 `num_computed_tokens` 是块大小的倍数）；之后的 0.8.x 在 `kv_cache_manager.py` 里去掉最后一块再查；0.9.0 起把命中封顶到 `num_tokens - 1`。三种写法得到的命中长度相同。
# - **4 % 的默认上限**：0.8.0 的 `SchedulerConfig`（`vllm/config.py`）在 `max_num_partial_prefills > 1` 时把为 0 的 threshold 换成 `int(max_model_len * 0.04)`；同一版本的 V1 不接受 `max_num_partial_prefills > 1`（退回 V0），所以 V1 里默认仍是 0。0.33 已没有 `max_num_partial_prefills`。
# - **0.8.3–0.30.x**：threshold 大于 0 时，即使只有一个请求，它也被切成 threshold 大小的块（`Scheduler.schedule`）。
# - **0.31.0 起**：只有一个请求（running 加 waiting 共 1 个）时不设上限；新增 `long_prefill_token_threshold_adaptive`（默认关，打开时上限至少是 `max_num_batched_tokens` 除以请求数；`vllm/config/scheduler.py`）。
# - **0.34.0**：新增 `cache_aware_admission_window`（默认 0：严格按到达顺序接纳；打开后，窗口里前缀已缓存的请求可以先被接纳；`vllm/config/scheduler.py`）。
#
# </details>

# %% [markdown]
# ### 4.3　TODO 15：前缀命中了多少，从哪里开始算
#
# 新请求进来时，调度器问前缀缓存：“这个 prompt 开头有多少个 token 的 KV 已经有了？”`prefix_cache` 可以是任何有 `match_prefix(token_ids) -> int` 的对象：第一部分的 `PrefixCacheManager` 就是；第三部分的 `BlockPrefixCache` 套上上面的 `BlockCacheAdapter` 也是；`None` 表示不用前缀缓存。
#
# 拿到的数不能直接用，vLLM 的 `get_computed_blocks`（`vllm/v1/core/kv_cache_manager.py`）还做了两件事：
#
# 1. **最多到 `num_tokens - 1`。** 整个 prompt 都命中时，最后一个 token 仍要算一遍，模型才会给出它的 logits，才能采样第一个输出 token。
# 2. **按整块算。** KV 以块为单位存放和共享，只有满块会被缓存；命中的长度向下取整到 `block_size` 的倍数，新算的 token 从块边界开始。
#
# 两条合起来：一个完整命中的 prompt 要重算的不是 1 个 token，而是最后一个（不满或刚好满的）块，最多 `block_size` 个 token——vLLM 源码里那段注释说的就是这件事。也因此，一段比一个块还短的共享前缀**永远不会命中**，这是用户最常问的“命中率为 0”的原因之一。（SGLang 的基数树页大小为 1 时，完整命中正好重算 1 个 token；`--page-size` 更大时命中按页对齐，和 vLLM 的整块一样。）
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
# ### 4.4　TODO 16–19：`Scheduler`
#
# 构造函数、`add_request` 和 `schedule` 已经写好：`schedule` 先定下这一步的 `self.long_prefill_token_threshold`（构造时给的值；只有一个请求时为 0），再用 `_schedule_running` 排正在运行的请求，再用 `_schedule_waiting` 接纳新请求，最后把每个被调度请求的 `num_computed_tokens` 加上它这一步拿到的 token 数。你来写四个方法：
#
# - **TODO 16 `_num_new_tokens(request, num_computed_tokens, token_budget)`**：这一步最多给这个请求几个 token：欠的 `request.num_tokens - num_computed_tokens`，`long_prefill_token_threshold > 0` 时不超过它，再不超过 `token_budget`。
# - **TODO 17 `_schedule_running(out, token_budget)`**：按 `self.running` 的顺序，给每个请求 `_num_new_tokens(...)` 个 token，记进 `out.num_scheduled_tokens[request_id]`，从预算里扣掉；得到 0 个的请求跳过（不记 0）；预算用完就停。返回剩下的预算。
# - **TODO 18 `_schedule_waiting(out, token_budget)`**：预算还有、运行中的请求不到 `max_num_seqs` 个时，从 `self.waiting` 的**队头**取请求：先用 TODO 15 把它的 `num_computed_tokens` 设成命中长度，再给它 `_num_new_tokens(...)` 个 token，放进 `self.running` 的末尾。
# - **TODO 19 `update_from_output(out, sampled_token_ids)`**：`sampled_token_ids` 是模型这一步为每个被调度请求采样的 token（`request_id -> int`）。只有已经追上的请求（`num_computed_tokens == num_tokens`）收下自己的 token；还在 prefill 中途的请求什么也不收。生成够 `max_tokens` 个的请求从 `self.running` 和 `self.requests` 里移除。
#
# 一个固定的例子：预算 1024，同时来了 3 个 800 token 的新请求，第一步调度 `{"a": 800, "b": 224}`，`c` 这一步什么也拿不到；第二步 `a` 只要 1 个 decode token，`b` 拿剩下的 576，`c` 拿到 447。
#
# 常见错误：decode 不扣预算；命中的 token 也扣预算；完整命中时一个 token 都不调度；命中长度不按块取整；忽略 `long_prefill_token_threshold`；先排 prefill，预算够时 decode 饿着；prefill 做到一半就采样；新请求不按到达顺序接纳；只在请求的第一块里找前缀（复用量被预算卡住）；预算多用了 1 个；把 decode 挪到做了一半的 prefill 前面（`self.running` 的顺序就是该用的顺序）；欠 0 个的请求记成 0 或者在它那里 `break`；不用参数 `token_budget` 而用 `self.max_num_batched_tokens`；接纳时只看 `self.waiting[0]`、不把请求取出队列；在 TODO 17 或 19 里改 `num_computed_tokens`（给定的 `schedule()` 已经前进过了）；结束的请求只从 `self.running` 或只从 `self.requests` 里移除。

# %% [markdown]
# {{figure:scheduler_step}}

# %% nbgrader={"grade": false, "grade_id": "scheduler_todo16_19", "locked": false, "schema_version": 3, "solution": true, "task": false}
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
        self.configured_long_prefill_token_threshold = long_prefill_token_threshold  # 构造时给的值
        self.long_prefill_token_threshold = long_prefill_token_threshold  # 这一步的上限：schedule() 每步重设
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
        """安排一步：定下这一步的 threshold，先 running，再 waiting；然后每个被调度的请求前进它拿到的 token 数。"""
        out = SchedulerOutput()
        # vLLM 0.33：只有一个请求（running + waiting）时不设上限，没有别的请求会被它饿着
        num_eligible = len(self.running) + len(self.waiting)
        self.long_prefill_token_threshold = self.configured_long_prefill_token_threshold if num_eligible > 1 else 0
        token_budget = self.max_num_batched_tokens
        token_budget = self._schedule_running(out, token_budget)
        self._schedule_waiting(out, token_budget)
        for request_id, num_new_tokens in out.num_scheduled_tokens.items():  # vLLM 的 _update_after_schedule
            self._scheduled_request(request_id).num_computed_tokens += num_new_tokens
        return out

    def _scheduled_request(self, request_id):
        """schedule() 按 id 找被调度的请求；找不到时说清是哪个 TODO 让它找不到，而不是只抛一个 KeyError。"""
        request = self.requests.get(request_id)
        if request is not None:
            return request
        if any(r.request_id == request_id for r in self.waiting):
            why = "TODO 18：它被接纳过，却还留在 self.waiting 里（接纳时要用 self.waiting.popleft() 把它取出来），结束之后又被接纳了一次"
        elif any(r.request_id == request_id for r in self.running):
            why = "TODO 19：它已从 self.requests 里删掉，却还留在 self.running 里（结束的请求要从两处都移除）"
        else:
            why = "TODO 17–18：out.num_scheduled_tokens 里只应有 self.running 和 self.waiting 里的请求"
        raise RuntimeError(f"schedule() 调度了请求 {request_id!r}，可它不在 self.requests 里。回到 {why}")

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
        # TODO 18: 从 waiting 队头按到达顺序接纳：先用 num_cached_tokens 设命中长度，再分 token，放进 running。
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


# %% [markdown]
# #### 提示：TODO 15–19
#
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开下面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 15 · 提示 1</summary>
#
# 缓存说命中了 `m` 个 token。哪两条规则会让可以跳过的数比 `m` 小？一个完整命中的 prompt，模型还要算哪个位置的 logits？
#
# </details>
#
# <details><summary>TODO 15 · 提示 2</summary>
#
# 没有缓存时是 0。否则先把命中长度限制在 `len(token_ids) - 1` 以内，再向下取整到 `block_size` 的倍数（整除再乘回去）。两步的先后不能反：先取整再减 1，结果就不是块的倍数了。
#
# </details>
#
# <details><summary>TODO 16 · 提示 1</summary>
#
# 一个请求“欠”多少，看的是 `num_tokens` 还是 `num_prompt_tokens`？一个正在 decode 的请求欠几个？threshold 和预算都是上限，什么时候它们不起作用？
#
# </details>
#
# <details><summary>TODO 16 · 提示 2</summary>
#
# 欠的数 = `request.num_tokens - num_computed_tokens`（用参数里的 `num_computed_tokens`）。threshold 大于 0、而且比欠的数小时，才换成 threshold；最后再和 `token_budget` 取较小的一个。
#
# </details>
#
# <details><summary>TODO 17 · 提示 1</summary>
#
# 这个方法只“记账”：它往 `out` 里写谁拿几个 token、返回剩下的预算，请求本身的 `num_computed_tokens` 谁来改？`self.running` 的顺序是什么意思，要不要重新排？
#
# </details>
#
# <details><summary>TODO 17 · 提示 2</summary>
#
# 照 `self.running` 原来的顺序走一遍，预算从参数 `token_budget` 开始（不是 `self.max_num_batched_tokens`）。预算为 0 就停；每个请求用 TODO 16 算出给几个，得到 0 个的 `continue`（不记，也不停下），否则记进 `out.num_scheduled_tokens` 并从预算里减掉。最后返回剩下的预算。
#
# </details>
#
# <details><summary>TODO 18 · 提示 1</summary>
#
# 循环什么时候停：队列空了、预算用完、running 满了。一个被接纳的请求要从哪里挪到哪里？命中的前缀什么时候算进 `num_computed_tokens`？
#
# </details>
#
# <details><summary>TODO 18 · 提示 2</summary>
#
# 三个条件都满足时，用 `self.waiting.popleft()` 取出队头（不能只看 `self.waiting[0]`：接纳过的请求要离开队列），用 TODO 15 设好它的 `num_computed_tokens`，再用 TODO 16 算出这一步给它几个，追加到 `self.running` 末尾，记进 `out`，从参数 `token_budget` 里减掉。
#
# </details>
#
# <details><summary>TODO 19 · 提示 1</summary>
#
# 一个请求这一步之后“追上了”是什么意思？给定的 `schedule()` 已经前进过 `num_computed_tokens`，这里还要动它吗？结束的请求登记在哪两处？
#
# </details>
#
# <details><summary>TODO 19 · 提示 2</summary>
#
# 只遍历 `out.num_scheduled_tokens` 里的请求（从 `self.requests` 按 id 找）。`num_computed_tokens < num_tokens` 的跳过；否则把 `sampled_token_ids[request_id]` 追加到它的 `output_token_ids`，不改 `num_computed_tokens`（新 token 的 KV 下一步才算）。生成够 `max_tokens` 个时，从 `self.running` 和 `self.requests` 两处都移除。
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "visible_todo15_19", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title TODO 15–19 的可见检查：运行即可，每个 TODO 打印一行结果
# 运行此单元格检查 TODO 15–19：每个 TODO 几个固定的小例子，一秒内跑完；评分时还有 15 格隐藏检查（随机轨迹逐步比对参考实现）。
VISIBLE_TODO_OF.update(
    {
        (None, "num_cached_tokens"): "TODO 15",
        ("Scheduler", "_num_new_tokens"): "TODO 16",
        ("Scheduler", "_schedule_running"): "TODO 17",
        ("Scheduler", "_schedule_waiting"): "TODO 18",
        ("Scheduler", "update_from_output"): "TODO 19",
    }
)


class ListPrefixCache:
    """最简单的 prefix_cache：登记过的前缀里，取 prompt 开头命中的最长一个。可见检查和 4.5 节用它。"""

    def __init__(self, prefixes=()):
        self.prefixes = [list(p) for p in prefixes]

    def match_prefix(self, token_ids) -> int:
        tokens = list(token_ids)
        return max((len(p) for p in self.prefixes if tokens[: len(p)] == p), default=0)


def visible_check_todo15():
    f = num_cached_tokens
    for matched, length, block, want in [(37, 60, 16, 32), (10, 60, 16, 0), (0, 60, 16, 0), (48, 48, 16, 32), (49, 49, 16, 48)]:
        cache = ListPrefixCache([list(range(matched))])
        got = f(cache, list(range(length)), block)
        assert got == want, f"TODO 15: num_cached_tokens(缓存命中 {matched} 个, {length} 个 token 的 prompt, block_size={block}) 应为 {want}，得到 {got!r}"
    assert f(None, [1, 2, 3], 4) == 0, f"TODO 15: prefix_cache=None 时 num_cached_tokens 应为 0，得到 {f(None, [1, 2, 3], 4)!r}"


def visible_check_todo16():
    scheduler = Scheduler(max_num_batched_tokens=64, max_num_seqs=4)
    request = Request("a", list(range(50)), 4)
    for computed, budget, want in [(0, 64, 50), (30, 64, 20), (30, 7, 7)]:
        got = scheduler._num_new_tokens(request, computed, budget)
        assert got == want, f"TODO 16: 50 个 token 的请求已算 {computed} 个、预算 {budget} 时应给 {want} 个，得到 {got!r}"
    request.output_token_ids.extend([3, 4])  # num_tokens = 52：已算 51 个时 decode 欠 1 个
    got = scheduler._num_new_tokens(request, 51, 64)
    assert got == 1, f"TODO 16: prompt 50 个、已生成 2 个（num_tokens = 52）、已算 51 个时 decode 欠 1 个，得到 {got!r}：欠的是 num_tokens - num_computed_tokens"
    request = Request("a", list(range(50)), 4)
    capped = Scheduler(max_num_batched_tokens=64, max_num_seqs=4, long_prefill_token_threshold=8)
    got = capped._num_new_tokens(request, 0, 64)
    assert got == 8, f"TODO 16: long_prefill_token_threshold=8 时一步最多给 8 个 token，得到 {got!r}"
    got = capped._num_new_tokens(request, 45, 64)
    assert got == 5, f"TODO 16: long_prefill_token_threshold=8、50 个 token 的请求已算 45 个（只欠 5 个）时应给 5 个：threshold 只是上限，得到 {got!r}"
    capped.long_prefill_token_threshold = 0  # schedule() 这样设这一步的上限：只有一个请求时不封顶
    got = capped._num_new_tokens(request, 0, 64)
    assert got == 50, f"TODO 16: 构造时 threshold=8，这一步 schedule() 把 self.long_prefill_token_threshold 设成了 0（只有一个请求）时应给 50 个：用这一步的 self.long_prefill_token_threshold，不是 configured_long_prefill_token_threshold，得到 {got!r}"


def depends_on(*todos):
    """TODO 17、18 的可见检查用到前面的 TODO：它们还没通过时跳过，免得把别的 TODO 的错记到这里。"""
    checks = {15: visible_check_todo15, 16: visible_check_todo16}
    for todo in todos:
        try:
            checks[todo]()
        except Exception:  # noqa: BLE001  (前置检查：任何错误都只说明那个 TODO 还没好)
            return f"它用到 TODO {todo}，TODO {todo} 还没通过上面的检查"
    return None


def scheduler_in_state(settings, running=(), waiting=()):
    """直接摆好调度器的状态：running、waiting 里的请求（各自的 num_computed_tokens 与输出已设好）。

    TODO 17–19 的可见检查各只调用一个方法，这样一个 TODO 的错不会算到另一个头上。
    """
    scheduler = Scheduler(**settings)
    scheduler.running = list(running)
    scheduler.waiting = deque(waiting)
    scheduler.requests = {r.request_id: r for r in [*running, *waiting]}
    return scheduler


def request_in_state(request_id, prompt, num_computed_tokens, outputs=(), max_tokens=5):
    request = Request(request_id, prompt, max_tokens)
    request.num_computed_tokens = num_computed_tokens
    request.output_token_ids = list(outputs)
    return request


def running_in_order(scheduler, token_budget):
    """调用 _schedule_running(out, token_budget)：返回 ([(id, token 数)] 按调度先后, 返回的预算)；它不该改任何请求的 num_computed_tokens。"""
    computed = [(r.request_id, r.num_computed_tokens) for r in scheduler.running]
    out = SchedulerOutput()
    left = scheduler._schedule_running(out, token_budget)
    after = [(r.request_id, r.num_computed_tokens) for r in scheduler.running]
    assert after == computed, f"TODO 17: _schedule_running 只记这一步给谁几个 token，不改 num_computed_tokens（schedule() 在最后统一前进）：调用前 {computed}，调用后 {after}"
    return list(out.num_scheduled_tokens.items()), left


def visible_check_todo17():
    skipped = depends_on(16)
    if skipped:
        return skipped
    settings = {"max_num_batched_tokens": 100, "max_num_seqs": 8}

    def in_order(names):  # a、b 是 decode（各欠 1 个），c 的 prefill 做了 8 个（欠 22 个）
        made = {"a": request_in_state("a", [1, 2, 3], 3, outputs=[9]), "b": request_in_state("b", [4, 5, 6, 7], 4, outputs=[9]),
                "c": request_in_state("c", list(range(30)), 8)}
        return scheduler_in_state(settings, running=[made[name] for name in names])

    got, left = running_in_order(in_order("abc"), 10)
    assert (got, left) == ([("a", 1), ("b", 1), ("c", 8)], 0), f"TODO 17: running 里依次是 decode 的 a、b 和做了一半的 c（欠 22 个），参数 token_budget=10（max_num_batched_tokens 是 100：用参数，不用它）：应按顺序给 a、b 各 1 个、c 8 个，返回 0；得到 {got}，返回 {left!r}"
    got, left = running_in_order(in_order("cab"), 10)
    assert (got, left) == ([("c", 10)], 0), f"TODO 17: running 里依次是做了一半的 c（先被接纳，欠 22 个）和 decode 的 a、b，预算 10：按 running 的顺序，c 先拿走全部 10 个，a、b 这一步没有（不要把 decode 挪到前面）；应为 [('c', 10)]、返回 0，得到 {got}、返回 {left!r}"
    x, y = request_in_state("x", list(range(9)), 4), request_in_state("y", [1], 1, outputs=[2])  # x 欠 5 个，y 是 decode
    done = request_in_state("z", [1, 2], 3, outputs=[5])  # 已经追上：欠 0 个
    got, left = running_in_order(scheduler_in_state({"max_num_batched_tokens": 4, "max_num_seqs": 8}, running=[done, x, y]), 4)
    assert (got, left) == ([("x", 4)], 0), f"TODO 17: running 里依次是欠 0 个的 z、欠 5 个的 x、decode 的 y，预算 4：z 跳过（不记 0），x 拿 4 个，预算用完 y 这一步没有；应为 [('x', 4)]、返回 0，得到 {got}、返回 {left!r}"
    x.num_computed_tokens = 6  # 欠 3 个
    got, left = running_in_order(scheduler_in_state({"max_num_batched_tokens": 10, "max_num_seqs": 8}, running=[x, done, y]), 10)
    assert (got, left) == ([("x", 3), ("y", 1)], 6), f"TODO 17: running 里依次是欠 3 个的 x、欠 0 个的 z、decode 的 y，预算 10：z 跳过后接着排 y（continue，不是 break），应为 [('x', 3), ('y', 1)]、返回 6，得到 {got}、返回 {left!r}"
    return None


def waiting_ids(scheduler):
    return [r.request_id for r in scheduler.waiting]


def visible_check_todo18():
    skipped = depends_on(15, 16)
    if skipped:
        return skipped
    new = [request_in_state(name, list(range(800)), 0) for name in "abc"]
    scheduler = scheduler_in_state({"max_num_batched_tokens": 1024, "max_num_seqs": 8}, waiting=new)
    out = SchedulerOutput()
    scheduler._schedule_waiting(out, 1024)
    got = list(out.num_scheduled_tokens.items())
    admitted = [r.request_id for r in scheduler.running]
    assert got == [("a", 800), ("b", 224)] and admitted == ["a", "b"], f"TODO 18: 预算 1024，等待队列里依次是三个 800 token 的请求 a、b、c：应接纳 a（800 个）、b（224 个），c 留在队列里；得到 {got}，running = {admitted}"
    assert waiting_ids(scheduler) == ["c"], f"TODO 18: 接纳了 a、b 之后 self.waiting 里应只剩 ['c']，得到 {waiting_ids(scheduler)}：接纳时用 self.waiting.popleft() 把请求从队头取出来，不然它结束后还会被再接纳一次"
    busy = request_in_state("old", [1, 2], 2, outputs=[3])
    queued = [request_in_state(f"q{i}", [i] * 5, 0) for i in range(3)]
    scheduler = scheduler_in_state({"max_num_batched_tokens": 100, "max_num_seqs": 2}, running=[busy], waiting=queued)
    out = SchedulerOutput()
    scheduler._schedule_waiting(out, 99)
    got = dict(out.num_scheduled_tokens)
    assert got == {"q0": 5}, f"TODO 18: max_num_seqs=2、running 里已有 1 个请求，等待队列 q0、q1、q2：只能按到达顺序接纳 q0，应为 {{'q0': 5}}，得到 {got}"
    queued = [request_in_state(f"q{i}", [i] * 5, 0) for i in range(3)]
    scheduler = scheduler_in_state({"max_num_batched_tokens": 100, "max_num_seqs": 8}, running=[busy], waiting=queued)
    out = SchedulerOutput()
    scheduler._schedule_waiting(out, 7)
    got = list(out.num_scheduled_tokens.items())
    assert got == [("q0", 5), ("q1", 2)] and waiting_ids(scheduler) == ["q2"], f"TODO 18: 参数 token_budget=7（running 已用掉一部分，max_num_batched_tokens 是 100：用参数），等待队列 q0、q1、q2 各 5 个 token：应为 [('q0', 5), ('q1', 2)]、q2 留在队列里；得到 {got}，waiting = {waiting_ids(scheduler)}"
    system = [(3 * i) % 47 for i in range(200)]
    hit = request_in_state("hit", system + [5] * 20, 0)
    settings = {"max_num_batched_tokens": 40, "max_num_seqs": 4, "block_size": 16, "prefix_cache": ListPrefixCache([system])}
    scheduler = scheduler_in_state(settings, waiting=[hit])
    out = SchedulerOutput()
    scheduler._schedule_waiting(out, 40)
    got = dict(out.num_scheduled_tokens)
    assert got == {"hit": 28} and hit.num_computed_tokens == 192, f"TODO 18: 缓存了 200 个 token 的 system prompt，新请求 220 个 token、block_size=16、预算 40：命中 192 个（整块），num_computed_tokens 应设为 192、只调度 28 个；得到 {got}，num_computed_tokens = {hit.num_computed_tokens}"
    return None


def visible_check_todo19():
    a = request_in_state("a", list(range(10)), 8, max_tokens=2)  # 这一步只算到第 8 个 token
    b = request_in_state("b", [1, 2], 2, outputs=[4], max_tokens=3)  # decode，还差 2 个 token 才结束
    scheduler = scheduler_in_state({"max_num_batched_tokens": 4, "max_num_seqs": 4}, running=[b, a])
    scheduler.update_from_output(SchedulerOutput({"a": 4}), {"a": 7})
    assert a.output_token_ids == [], f"TODO 19: 10 个 token 的 prompt 这一步之后只算了 8 个：prefill 中途不采样，output_token_ids 应为 []，得到 {a.output_token_ids}"
    for computed, step, sampled, want in [(10, {"a": 2, "b": 1}, {"a": 7, "b": 5}, [7]), (11, {"a": 1}, {"a": 8}, [7, 8])]:
        a.num_computed_tokens, b.num_computed_tokens = computed, 3
        scheduler.update_from_output(SchedulerOutput(step), sampled)
        assert a.output_token_ids == want, f"TODO 19: a 的 num_computed_tokens = {computed}（已追上）时应收下采样的 token：output_token_ids 应为 {want}，得到 {a.output_token_ids}"
        assert (a.num_computed_tokens, b.num_computed_tokens) == (computed, 3), f"TODO 19: update_from_output 不改 num_computed_tokens（采样出的 token 还没算 KV，下一步才算）：a、b 应仍是 {computed}、3，得到 {a.num_computed_tokens}、{b.num_computed_tokens}"
    assert a not in scheduler.running and "a" not in scheduler.requests, "TODO 19: max_tokens=2 的请求生成了 2 个 token，应离开 running 和 requests"
    assert scheduler.running == [b] and list(scheduler.requests) == ["b"], f"TODO 19: 没结束的 b 应留在 running 和 requests 里，得到 running = {[r.request_id for r in scheduler.running]}、requests = {list(scheduler.requests)}"
    return None


VISIBLE_SCHED_CHECKS = [
    ("TODO 15", visible_check_todo15),
    ("TODO 16", visible_check_todo16),
    ("TODO 17", visible_check_todo17),
    ("TODO 18", visible_check_todo18),
    ("TODO 19", visible_check_todo19),
]


def first_failing_todo():
    """第一个可见检查不通过的 TODO（如 "TODO 17"）；都通过时为 None。4.5、4.6 节出错时用它指明该回到哪个 TODO。"""
    for todo, check in VISIBLE_SCHED_CHECKS:
        try:
            check()
        except Exception:  # noqa: BLE001  (任何错误都说明这个 TODO 还没好)
            return todo
    return None


run_visible_checks(VISIBLE_SCHED_CHECKS)


# %% [markdown]
# ### 自动评分单元格：TODO 15–19
#
# 每格检查一个 TODO 的一个方面，分值写在第一行。评分时只有被检查的那个 TODO 用你的代码，调度器的其他 TODO（以及 TODO 15 的命中规则）换成参考实现，所以一处错误只扣它自己那个 TODO 的分。随机轨迹的检查在上百个种子固定的场景里逐步比较：每步调度了谁、各几个 token，每个请求的 `num_computed_tokens` 和输出。

# %%
#| checks: sched.py

# %% [markdown]
# ### 4.5　在小模型上跑一遍：调度器切出的块，算出的结果与一次算完相同
#
# 到这里调度器只是在记账。下面把它接到第二部分的 `TinyCausalLM` 上：每一步按 `schedule()` 的结果，给每个被调度的请求把它这一步的 token（从 `num_computed_tokens` 前进之前的位置开始）送进模型，带上这个请求自己的 KV，算完把 KV 留给它的下一块；命中前缀的请求，第一块接着缓存里那段前缀的 KV 算。每个追上的请求取最后一行 logits 的 argmax 作为采样结果，交给 `update_from_output`。
#
# 块的大小每一步都不一样（取决于预算被 decode 用掉多少），命中的 token 从没被算过，可每个请求 prompt 部分的 logits 仍应与一次完整前向 `model(prompt)` 相同（从命中的位置起），生成的 token 也应与逐个 token 的贪心解码相同。这与第二部分的结论是同一件事：KV 接力传对了，怎么切都一样。
#
# （真实引擎把同一步里所有请求的 token 拼成一个批，一次前向算完，每个被调度的请求都对它这一步最后一个位置算一行 logits，prefill 中途的请求也算，只是丢掉采样结果；这里为了清楚，逐个请求调用模型。fp32 下结果逐位接近；bf16 的服务里，切法不同会让舍入不同，命中与不命中的结果可能差几个 ulp。）

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "sched_end_to_end", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 端到端验证：用你的调度器在小模型上真的跑每一步，对照不缓存、不分块的结果
def serve_on_tiny_model(model, scheduler, prompts, max_tokens, cached_prefixes=(), max_steps=500):
    """用 scheduler 排的每一步真的跑 model：返回 ({id: prompt 部分算出的 logits}, {id: 生成的 token}, {id: 命中长度}, 每步的调度)。

    cached_prefixes 里的前缀先各算一次 KV 存起来，命中时从中切出前 num_computed_tokens 个位置。
    """
    prefix_kv = {tuple(p): model(list(p))[1] for p in cached_prefixes}
    requests = {rid: Request(rid, prompt, max_tokens) for rid, prompt in prompts.items()}
    for request in requests.values():
        scheduler.add_request(request)
    kv, rows, hits, timeline = {}, {rid: [] for rid in prompts}, {}, []
    for _ in range(max_steps):
        out = scheduler.schedule()
        if not out.num_scheduled_tokens:
            break
        timeline.append(dict(out.num_scheduled_tokens))
        sampled = {}
        for rid, n in out.num_scheduled_tokens.items():
            request = requests[rid]
            start = request.num_computed_tokens - n  # schedule() 已经前进过了
            if rid not in kv:  # 第一块：从命中的位置开始
                hits[rid] = start
                kv[rid] = None
                if start > 0:
                    source = [c for p, c in prefix_kv.items() if len(p) >= start and list(p[:start]) == request.prompt_token_ids[:start]]
                    assert source, f"调度器让 {rid} 从第 {start} 个 token 开始，可没有哪段缓存的前缀覆盖这 {start} 个 token：回到 {blame('TODO 15 与 TODO 18')}"
                    kv[rid] = tuple((k[:, :start], v[:, :start]) for k, v in source[0])
            tokens = (request.prompt_token_ids + request.output_token_ids)[start : start + n]
            logits, kv[rid] = model(tokens, past_kv=kv[rid])
            if start < request.num_prompt_tokens:
                rows[rid].append(logits[: request.num_prompt_tokens - start])
            sampled[rid] = int(logits[-1].argmax())
        scheduler.update_from_output(out, sampled)
    prompt_logits = {rid: torch.cat(chunks, dim=0) for rid, chunks in rows.items() if chunks}
    return prompt_logits, {rid: list(r.output_token_ids) for rid, r in requests.items()}, hits, timeline


def blame(fallback):
    """出错时该回到的 TODO：第一个可见检查不通过的那个；可见检查都通过时，是 fallback 说的那几个。"""
    todo = first_failing_todo()
    return f"{todo}（它的可见检查不通过，先让它通过）" if todo else fallback


def greedy_one_shot(model, prompt, max_tokens):
    """参照：整个 prompt 一次前向，然后每次把全部 token 从头算一遍，取 argmax。"""
    tokens, outputs = list(prompt), []
    full_logits = model(tokens)[0]
    for _ in range(max_tokens):
        outputs.append(int(model(tokens)[0][-1].argmax()))
        tokens.append(outputs[-1])
    return full_logits, outputs


def demo_end_to_end():
    torch.manual_seed(0)
    model = TinyCausalLM(TinyConfig(max_positions=256), seed=4)
    rng = random.Random(34)
    system = [rng.randrange(64) for _ in range(40)]  # 一段共享的 system prompt，已经在缓存里
    prompts = {
        "long": [rng.randrange(64) for _ in range(90)],
        "chat-1": system + [rng.randrange(64) for _ in range(11)],
        "chat-2": system + [rng.randrange(64) for _ in range(25)],
        "repeat": list(system),  # 整个 prompt 都已缓存
    }
    scheduler = Scheduler(max_num_batched_tokens=32, max_num_seqs=3, block_size=16, prefix_cache=ListPrefixCache([system]))
    try:
        logits, outputs, hits, timeline = serve_on_tiny_model(model, scheduler, prompts, max_tokens=4, cached_prefixes=[system])
    except (AssertionError, NotImplementedError):
        raise
    except Exception as error:
        raise RuntimeError(f"调度器跑这个例子时出错（{type(error).__name__}: {error}）：回到 {blame('TODO 15–19')}") from error
    print("每一步调度的 token（前 8 步）：")
    for index, step in enumerate(timeline[:8]):
        print(f"  第 {index} 步：{step}（共 {sum(step.values())}）")
    print(f"  ……共 {len(timeline)} 步")
    print(f"{'请求':<8}{'prompt':>8}{'命中':>6}{'最大误差':>12}  生成的 token（调度器 / 逐个贪心解码）")
    for rid, prompt in prompts.items():
        full_logits, expected = greedy_one_shot(model, prompt, 4)
        hit = hits.get(rid)
        assert hit is not None and rid in logits, f"调度器没有算完请求 {rid} 的 prompt：回到 {blame('TODO 15–19')}"
        same_shape = logits[rid].shape == full_logits[hit:].shape
        gap = (logits[rid] - full_logits[hit:]).abs().max().item() if same_shape else float("inf")
        assert gap < 1e-4, f"{rid}：调度器切出的块算出的 logits 与一次完整前向不同（最大误差 {gap:.1e}）：回到 {blame('TODO 16–18（给的 token 数与 num_computed_tokens）')}"
        assert outputs[rid] == expected, f"{rid}：生成的 token {outputs[rid]} 与逐个贪心解码的 {expected} 不同：回到 {blame('TODO 19（什么时候收下 token）')}"
        print(f"{rid:<8}{len(prompt):>8}{hit:>6}{gap:>12.1e}  {outputs[rid]} / {expected}")
    print("✅ 每个请求的 logits 都与一次完整前向相同，生成的 token 与贪心解码相同")
    if first_failing_todo():
        print(f"⚠️ 不过 {first_failing_todo()} 的可见检查还没通过：这个演示只核对算出的结果，不核对每一步排得对不对")


try:
    demo_end_to_end()
except NotImplementedError:
    print("⏳ 这个演示用到 TODO 15–19：完成它们（上面的可见检查通过）后再运行这一格")
