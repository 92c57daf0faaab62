# %% [markdown]
# ## 第一部分（核心，{{points:core}}）：前缀缓存的账本与分块计划
#
# **学习目标：** 学完这一部分，你能
# - 说明为什么只有从 prompt 第一个 token 起连续相同的前缀才能复用 KV；
# - 在一个只记 token 的账本里找出最长命中、拆出后缀，并统计复用了多少 token；
# - 按分块大小把后缀切块，正确处理不满的尾块。
#
# **用时：** 约 1 小时（TODO 1–8，每个只有几行）。**需要：** 只用 Python，不用 torch，也不用前面的任何单元格。
#
# ### 1.1　共享前缀为什么值得缓存
#
# 在自回归模型里，位置 $t$ 的 key/value 只由 token $0, 1, \dots, t$ 决定（位置从 0 数起，第二部分也这样数）。于是，两个请求只要**从开头起**有一段完全相同的 token，这一段的 KV 就完全相同，算一次就够了。前缀缓存（prefix caching）的输入是“已经缓存的若干 token 前缀”和“新请求的 prompt”，输出是“可以直接复用的前缀范围”与“仍需计算的后缀”。
#
# | 要素 | 要认出的东西 | 为什么重要 |
# |---|---|---|
# | 重复的来源 | system prompt、工具说明、RAG 模板、多轮对话历史 | 说明缓存能省下多少重复计算 |
# | 能复用的部分 | 从 prompt **第一个 token 起连续相同**的前缀 | 这部分的 prefill 可以跳过 |
# | 必须新算的部分 | 第一个不相同的 token 及其之后的全部 token | 本次请求真正要做的 prefill |

# %% [markdown]
# ### 1.2　命中的前缀与未命中的后缀
#
# 拿到新请求后，先在缓存里找**最长**的匹配前缀，再把 prompt 一分为二。注意：只有从 prompt 开头连续相同的 token 才算命中；某个 token 恰好在中间位置与缓存相同，并不构成前缀命中——它前面的上下文不同，KV 也就不同。
#
# | 输出 | 来自哪里 | 执行上的含义 |
# |---|---|---|
# | `reusable_prefix` | 缓存中、从开头起连续命中的 token | 直接使用已有的 prefill 结果（KV） |
# | `suffix` | `hit_len` 之后剩下的 token | 继续送进模型做 prefill |
# | 没有命中 | `hit_len = 0` | 整个 prompt 都是 suffix |

# %% [markdown]
# ### 1.3　长后缀如何分块执行
#
# 即使命中了前缀，剩下的 suffix 也可能很长。一次性把它送进 prefill，注意力分数矩阵和中间激活都按 suffix 长度增长，单次前向的工作集（以及显存峰值）随之变大，还会长时间占住 GPU，让正在解码的其他请求等着。分块预填充（chunked prefill）只处理未命中的 suffix，把它切成固定大小的块，一块一块地推进：
#
# | 分块相关的量 | 含义 | 对资源压力的影响 |
# |---|---|---|
# | **分块大小**（chunk size，参数 `block_size`） | 每个 **chunk**（一次送进模型的一段 token）最多包含的 token 数 | 决定单次 prefill 的工作集上限 |
# | `chunks` | suffix 被切出来的 chunk 序列 | 可以逐块推进，而不是一口气处理完整个 suffix |
# | 尾块 | 最后一个不足分块大小的 chunk | 真实输入长度很少恰好整除，必须正确处理 |
#
# **chunk 不是 KV 块。** 这一部分和第二部分说的“块”都是 chunk：一次前向送进模型的一段 token，它的长度上限叫**分块大小**。第三到五部分还会出现另一种块，**KV 块**（block）：显存里固定存放若干个 token 的 K/V 的一页，只有满页才能在请求之间共享。两者在引擎里是两个独立的设置，例如 KV 块是 16 个 token，而一次 prefill 最多处理 2048 个 token。
#
# 下面的 `PrefixCacheManager(block_size=4)` 里，`block_size` 就是分块大小：这个参数名来自本章最初的题目，已经发出去的作业和评分都按它调用，所以没有改名。第二部分的函数参数直接叫 `chunk_size`。
#
# <details><summary>深入：引擎里哪个参数对应分块大小（vLLM 0.33、SGLang）</summary>
#
# - 引擎里没有一个参数和分块大小一一对应。vLLM 的 `max_num_batched_tokens` 是**每一步**的 token 预算，这一步里所有请求的 decode token 和 prefill chunk 共用它；单个请求每步最多拿多少 prefill token 由 `long_prefill_token_threshold` 限制，vLLM 0.33 的默认是 0，即不单独限制（`vllm/v1/core/sched/scheduler.py` 的 `schedule`；默认值随版本变）。
# - SGLang 的 `--chunked-prefill-size` 是一个 prefill batch 的分块预算（`python/sglang/srt/managers/schedule_policy.py` 的 `PrefillAdder`），`--max-prefill-tokens`（默认 16384）再给一个 prefill batch 的 token 数设一个上限。
# - 只有一个请求在做 prefill、没有别的 decode 时，这些预算才等于这里的分块大小。
# - KV 块的大小在 vLLM 叫 `--block-size`（PagedAttention 的页），在 SGLang 叫 `--page-size`。
#
# </details>

# %% [markdown]
# ### 1.4　实现前缀缓存管理器与分块计划
#
# 下面的 `PrefixCacheManager` 用最小的代码表达上面的流程：token 序列用 `list` 表示，chunk 用 `tuple` 表示。它只验证**控制逻辑**（命中多长、后缀是什么、怎样分块、复用了多少 token）；真实系统还要把命中范围映射到 KV cache 的物理存储，并管理它的生命周期——这些留到后面的扩展部分。
#
# | 阶段 | 要完成的内容 | 产出与检查项 |
# |---|---|---|
# | 表示与分块 | TODO 1–2：统一 token 类型，按分块大小（`self.block_size`）切块 | token 列表、chunk 边界、尾块 |
# | 前缀命中 | TODO 3–5：登记前缀、求最长命中、拆出 suffix | `hit_len`、`reusable_prefix`、`suffix` |
# | 执行账本 | TODO 6–8：生成分块计划、统计复用 | `hit_tokens`、`uncached_tokens`、`reuse_ratio`、suffix 的 chunks |
#
# **提示**
# - 基础表示：`_normalize` 把 list、tuple、range 等输入统一成普通 `list`；`_chunk_tokens` 先 normalize，再按分块大小 `self.block_size` 切成 tuple，最后一块可以不满。
# - 命中路径：`add_prefix` 登记前缀（重复登记不应产生新条目），`match_prefix` 只接受从开头连续的命中并取最长，`split_prompt` 据此拆出前缀和后缀，返回 3 元组 `(prefix, suffix, hit_len)`：普通 tuple 或它的子类（例如 `NamedTuple`）都可以，`prefix` 和 `suffix` 是普通 list。
# - 执行账本：`chunked_prefill_plan` 对整个 prompt 切块；`cache_stats` 统计 token 级命中；`chunked_suffix_prefill_plan` 只对 suffix 切块。
#
# 每个 TODO 只需写几行。把 `raise NotImplementedError()` 换成你的代码即可，不要改方法的名字和签名：自动评分会逐个方法检查。

# %% [markdown]
# {{figure:prefix_tree}}

# %% nbgrader={"grade": false, "grade_id": "setup_imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
from typing import List, Sequence, Tuple

# %% nbgrader={"grade": false, "grade_id": "prefix_cache_manager", "locked": false, "schema_version": 3, "solution": true, "task": false}
class PrefixCacheManager:
    """极简的前缀缓存与分块预填充管理器：只记 token 账本，不存真实的 KV。"""

    def __init__(self, block_size: int = 4):
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self.cached_prefixes: List[Tuple[int, ...]] = []
        self.chunked_prefixes: List[List[Tuple[int, ...]]] = []

    def _normalize(self, tokens: Sequence[int]) -> List[int]:
        # TODO 1: 把输入（list / tuple / range ...）统一成普通 list，
        #         这样后面的切片与比较才不会因为类型不同而失败。
        ### BEGIN SOLUTION
        normalized = list(tokens)
        ### END SOLUTION
        return normalized

    def _chunk_tokens(self, tokens: Sequence[int]) -> List[Tuple[int, ...]]:
        # TODO 2: 先 normalize，再每 block_size 个 token 组成一个 tuple；最后一块可以不满。
        tokens = self._normalize(tokens)
        ### BEGIN SOLUTION
        chunks = [tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]
        ### END SOLUTION
        return chunks

    def add_prefix(self, prefix_tokens: Sequence[int]) -> None:
        # TODO 3: 登记一个可复用前缀：cached_prefixes 存完整前缀（tuple），
        #         chunked_prefixes 存同一前缀的分块结果；重复登记什么也不做。
        prefix = tuple(self._normalize(prefix_tokens))
        if prefix not in self.cached_prefixes:
            self.cached_prefixes.append(prefix)
            ### BEGIN SOLUTION
            prefix_chunks = self._chunk_tokens(prefix)
            ### END SOLUTION
            self.chunked_prefixes.append(prefix_chunks)

    def match_prefix(self, prompt_tokens: Sequence[int]) -> int:
        # TODO 4: 判断 cached_prefix 是否从 prompt 开头起连续命中；循环负责取最长的那个。
        prompt = self._normalize(prompt_tokens)
        best_len = 0
        for cached_prefix in self.cached_prefixes:
            if len(cached_prefix) > len(prompt):
                continue
            ### BEGIN SOLUTION
            is_match = prompt[: len(cached_prefix)] == list(cached_prefix)
            ### END SOLUTION
            if is_match:
                best_len = max(best_len, len(cached_prefix))
        return best_len

    def split_prompt(self, prompt_tokens: Sequence[int]) -> Tuple[List[int], List[int], int]:
        # TODO 5: hit_len 之前是可复用前缀，之后是待 prefill 的后缀（两者都是 list）；
        #         返回 3 元组（普通 tuple 或 NamedTuple 这样的 tuple 子类都可以）。
        prompt = self._normalize(prompt_tokens)
        hit_len = self.match_prefix(prompt)
        ### BEGIN SOLUTION
        reusable_prefix = prompt[:hit_len]
        suffix = prompt[hit_len:]
        ### END SOLUTION
        return reusable_prefix, suffix, hit_len

    def chunked_prefill_plan(self, prompt_tokens: Sequence[int]) -> List[Tuple[int, ...]]:
        # TODO 6: 对整个 prompt 生成分块计划；直接复用 _chunk_tokens，保证切块规则只有一份。
        ### BEGIN SOLUTION
        plan = self._chunk_tokens(prompt_tokens)
        ### END SOLUTION
        return plan

    def cache_stats(self, prompt_tokens: Sequence[int]) -> dict:
        """返回 token 级的命中账本；它不代表真实的 KV 显存收益。"""
        prompt = self._normalize(prompt_tokens)
        # TODO 7: hit_tokens 是命中的前缀长度，uncached_tokens 是仍需 prefill 的 token 数，
        #         reuse_ratio = hit_tokens / len(prompt)（float，保留 4 位小数；空 prompt 为 0.0）。
        ### BEGIN SOLUTION
        hit_tokens = self.match_prefix(prompt)
        uncached_tokens = len(prompt) - hit_tokens
        reuse_ratio = round(hit_tokens / len(prompt), 4) if prompt else 0.0
        ### END SOLUTION
        return {"hit_tokens": hit_tokens, "uncached_tokens": uncached_tokens, "reuse_ratio": reuse_ratio}

    def chunked_suffix_prefill_plan(self, prompt_tokens: Sequence[int]) -> List[Tuple[int, ...]]:
        """只对未命中的 suffix 生成 chunk 计划。"""
        # TODO 8: 复用 split_prompt 拿到 suffix，再只对 suffix 调用 _chunk_tokens。
        ### BEGIN SOLUTION
        _, suffix, _ = self.split_prompt(prompt_tokens)
        suffix_chunks = self._chunk_tokens(suffix)
        ### END SOLUTION
        return suffix_chunks

# %% [markdown]
# #### 提示：TODO 1–8
#
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开下面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 1 · 提示 1</summary>
#
# list、tuple、range 里可以装着同样的整数，可是 `[1, 2] == (1, 2)` 的结果是什么？在一个新单元格里试一下。
#
# </details>
#
# <details><summary>TODO 1 · 提示 2</summary>
#
# Python 有一个内置类型，能把任何可迭代对象变成一个新的列表；新列表是一份拷贝，调用者的序列也就不会被改动。
#
# </details>
#
# <details><summary>TODO 2 · 提示 1</summary>
#
# 第 0 块从位置 0 开始，第 1 块从哪里开始？最后一块的终点可能越过 `len(tokens)`，Python 的切片遇到越界会怎样？
#
# </details>
#
# <details><summary>TODO 2 · 提示 2</summary>
#
# 用步长为分块大小（`self.block_size`）的 `range` 列出每块的起点，对每个起点切出一段并转成 tuple。`range` 的终点就是 `len(tokens)`，不要缩短它，否则不满的尾块会丢。
#
# </details>
#
# <details><summary>TODO 3 · 提示 1</summary>
#
# 这一行只需要算出同一个前缀的分块结果，而切块的规则你已经写过一次了。
#
# </details>
#
# <details><summary>TODO 3 · 提示 2</summary>
#
# `chunked_prefixes` 的每一项与 `cached_prefixes` 下标相同，内容是把这个前缀交给 TODO 2 的方法得到的 chunk 列表。这里的 chunk 是分块预填充的块（1.3 节），不是第三部分的 KV 块。
#
# </details>
#
# <details><summary>TODO 4 · 提示 1</summary>
#
# 命中只有一个条件：prompt 开头的几个 token 与缓存的前缀逐个相同。同样的片段出现在 prompt 中间算不算？
#
# </details>
#
# <details><summary>TODO 4 · 提示 2</summary>
#
# 取 prompt 开头、与缓存前缀等长的一段，和前缀比较；两边的类型要一样（list 与 tuple 比较永远不相等）。不要在第一次命中时就返回：外面的循环会在所有命中里取最长的。
#
# </details>
#
# <details><summary>TODO 5 · 提示 1</summary>
#
# `hit_len` 已经算好了，prefix 和 suffix 就在这个位置分开。
#
# </details>
#
# <details><summary>TODO 5 · 提示 2</summary>
#
# 对 normalize 之后的 `prompt` 在 `hit_len` 处一分为二：前一段是 prefix，后一段是 suffix。不要对原始的 `prompt_tokens` 切片：它是 tuple 时，切出来的还是 tuple。
#
# </details>
#
# <details><summary>TODO 6 · 提示 1</summary>
#
# 整个 prompt 的分块计划与缓存命不命中有关系吗？
#
# </details>
#
# <details><summary>TODO 6 · 提示 2</summary>
#
# 把整个 prompt 交给 TODO 2 的切块方法就够了：切块的规则只保留一份。
#
# </details>
#
# <details><summary>TODO 7 · 提示 1</summary>
#
# 三个量之间有一个等式：命中的 + 未命中的 = prompt 长度。prompt 为空时，比例的除法会怎样？
#
# </details>
#
# <details><summary>TODO 7 · 提示 2</summary>
#
# 命中长度来自 TODO 4 的方法；比例用真除法，并按注释的要求保留 4 位小数（Python 内置的四舍五入函数可以指定位数）；空 prompt 直接给 float 的 0.0。
#
# </details>
#
# <details><summary>TODO 8 · 提示 1</summary>
#
# 已经命中的前缀不用再 prefill。哪一个方法已经把 prompt 拆成了前缀和后缀？
#
# </details>
#
# <details><summary>TODO 8 · 提示 2</summary>
#
# 先用 TODO 5 的方法拿到 suffix，再把 suffix（不是整个 prompt）交给 TODO 2 的切块方法，结果赋给 `suffix_chunks`。完整命中时 suffix 为空，计划自然是空列表。
#
# </details>

# %% [markdown]
# ### 测试
#
# 运行下面的单元格检查 TODO 1–8（几秒内跑完）。每条断言失败时都会写明是哪个 TODO、输入是什么、应该得到什么、实际得到什么；你的代码抛出的异常保持原样（`TypeError` 就是 `TypeError`），只有某个方法里仍是 `raise NotImplementedError()` 时才提示“请先完成 TODO N”。这里全部通过，说明基本路径正确；评分时还会用随机输入、边界情况和多种分块大小再检查一遍。

# %% nbgrader={"grade": false, "grade_id": "check_time_box", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 可见检查的时限：每个检查最多运行 BOX_SECONDS 秒，超时就失败并写明是哪个 TODO（已给出，运行即可）
# 已给出，不必读懂：可见检查（和评分时的隐藏检查）的时限。每个检查最多运行 BOX_SECONDS 秒；超时（死循环、
# 等太久的 time.sleep）时这个检查失败，消息写明是哪个 TODO、哪次调用、停在哪一行，然后接着运行下一个检查。
#| code: _timebox.py


def timed_out_line(todo, timeout, todo_of_frame):
    """超时的可见检查打印的那一行：哪个 TODO、哪次调用没有返回、停在哪一行、多半是什么原因。

    todo_of_frame(frame)：这一层调用属于哪个 TODO（"TODO 4"），不属于任何 TODO 时为 None。
    """
    return f"⏱️ {todo} 的可见检查：{timeout_text(timeout, todo_of_frame)}"

# %% nbgrader={"grade": false, "grade_id": "visible_tests", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title TODO 1–8 的可见检查：运行即可，每个 TODO 打印一行结果
# 运行此单元格检查 TODO 1–8：每个 TODO 一个小检查，每个 TODO 打印一行结果（一个 TODO 没通过不会挡住后面的 TODO），
# 最后抛出第一个失败。每条断言的消息写明 TODO、输入、期望值和实际得到的值；几秒内跑完，评分时每个 TODO 还有几格隐藏检查。
import traceback

TODO_OF_METHOD = {
    "_normalize": "TODO 1",
    "_chunk_tokens": "TODO 2",
    "add_prefix": "TODO 3",
    "match_prefix": "TODO 4",
    "split_prompt": "TODO 5",
    "chunked_prefill_plan": "TODO 6",
    "cache_stats": "TODO 7",
    "chunked_suffix_prefill_plan": "TODO 8",
}


def _manager_with(block_size, *prefixes):
    """一个 PrefixCacheManager，缓存里直接放好这些前缀（不经过 add_prefix），检查 TODO 4–8 时不依赖 TODO 3。"""
    manager = PrefixCacheManager(block_size=block_size)
    manager.cached_prefixes = [tuple(p) for p in prefixes]
    return manager


def check_todo1():
    manager = PrefixCacheManager(block_size=2)
    got = manager._normalize((3, 1, 3))
    assert type(got) is list and got == [3, 1, 3], (
        "TODO 1: _normalize((3, 1, 3)) 应返回普通 list [3, 1, 3]（保持顺序与重复），得到 "
        f"{type(got).__name__} {got!r}"
    )


def check_todo2():
    manager = PrefixCacheManager(block_size=2)
    got = manager._chunk_tokens(range(5))
    assert got == [(0, 1), (2, 3), (4,)], (
        "TODO 2: block_size=2 时 _chunk_tokens(range(5)) 应返回 "
        f"[(0, 1), (2, 3), (4,)]（每块一个 tuple，不满的尾块也保留），得到 {got!r}"
    )
    got = manager._chunk_tokens([])
    assert got == [], f"TODO 2: _chunk_tokens([]) 应返回 []（没有 token 就没有块），得到 {got!r}"


def check_todo3():
    manager = PrefixCacheManager(block_size=2)
    manager.add_prefix([1, 2, 3])
    manager.add_prefix([1, 2, 9])
    manager.add_prefix([1, 2, 3])  # 重复登记不应增加缓存条目
    assert manager.cached_prefixes == [(1, 2, 3), (1, 2, 9)], (
        "TODO 3: 依次登记 [1, 2, 3]、[1, 2, 9]、[1, 2, 3] 后 cached_prefixes 应为 "
        f"[(1, 2, 3), (1, 2, 9)]，得到 {manager.cached_prefixes!r}"
    )
    assert len(manager.chunked_prefixes) == 2, (
        "TODO 3: 重复 prefix 不应重复建立分块记录：登记三次（其中一次重复）后 chunked_prefixes "
        f"应有 2 条，得到 {len(manager.chunked_prefixes)} 条"
    )
    assert manager.chunked_prefixes[0] == [(1, 2), (3,)], (
        "TODO 3: block_size=2 时前缀 [1, 2, 3] 的分块应为 [(1, 2), (3,)]，得到 "
        f"{manager.chunked_prefixes[0]!r}"
    )


def check_todo4():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    assert manager.match_prefix([1, 2, 3, 9]) == 3, (
        "TODO 4: 缓存 [(1, 2, 3), (1, 2, 9)] 时 match_prefix([1, 2, 3, 9]) 应为 3，得到 "
        f"{manager.match_prefix([1, 2, 3, 9])!r}"
    )
    assert manager.match_prefix([1, 2, 9, 8]) == 3, (
        "TODO 4: match_prefix([1, 2, 9, 8]) 应为 3（命中 (1, 2, 9)），得到 "
        f"{manager.match_prefix([1, 2, 9, 8])!r}"
    )
    assert manager.match_prefix([1, 2, 0]) == 0, (
        "TODO 4: match_prefix([1, 2, 0]) 应为 0（两个缓存前缀都没有完整出现在开头），得到 "
        f"{manager.match_prefix([1, 2, 0])!r}"
    )
    assert manager.match_prefix([0, 1, 2, 3]) == 0, (
        "TODO 4: match_prefix([0, 1, 2, 3]) 应为 0（(1, 2, 3) 出现在 prompt 中间不算命中："
        f"只能从开头连续匹配），得到 {manager.match_prefix([0, 1, 2, 3])!r}"
    )
    got = _manager_with(2, (1, 2)).match_prefix([1, 23, 4])
    assert got == 0, (
        "TODO 4: 缓存 [(1, 2)] 时 match_prefix([1, 23, 4]) 应为 0（第二个 token 是 23，不是 2："
        f"要逐个 token 比较，不要比较拼起来的字符串），得到 {got!r}"
    )
    longest = _manager_with(2, (1, 2), (1, 2, 3, 4))
    got = longest.match_prefix([1, 2, 3, 4, 5])
    assert got == 4, (
        "TODO 4: 缓存 [(1, 2), (1, 2, 3, 4)] 时 match_prefix([1, 2, 3, 4, 5]) 应为 "
        f"4（两个前缀都命中，取最长的；不能在第一个命中处就返回），得到 {got!r}"
    )


def check_todo5():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    got = manager.split_prompt([1, 2, 3, 9])
    assert isinstance(got, tuple) and len(got) == 3, (
        "TODO 5: split_prompt([1, 2, 3, 9]) 应返回 3 元组 (prefix, suffix, hit_len)，得到 "
        f"{got!r}"
    )
    prefix, suffix, hit_len = got
    assert prefix == [1, 2, 3], (
        f"TODO 5: split_prompt([1, 2, 3, 9]) 的 prefix 应为 [1, 2, 3]，得到 {prefix!r}"
    )
    assert suffix == [9], (
        f"TODO 5: split_prompt([1, 2, 3, 9]) 的 suffix 应为 [9]，得到 {suffix!r}"
    )
    assert hit_len == 3, (
        f"TODO 5: split_prompt([1, 2, 3, 9]) 的 hit_len 应为 3，得到 {hit_len!r}"
    )
    got = manager.split_prompt((1, 2, 3, 9))
    assert [type(part).__name__ for part in got] == ["list", "list", "int"], (
        "TODO 5: split_prompt((1, 2, 3, 9)) 应返回 (list, list, int)：tuple 输入也要对 "
        f"_normalize 之后的 prompt 切片，得到 {got!r}"
    )


def check_todo6():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    assert manager.chunked_prefill_plan([1, 2, 3, 4, 5]) == [(1, 2), (3, 4), (5,)], (
        "TODO 6: block_size=2 时 chunked_prefill_plan([1, 2, 3, 4, 5]) 应为 "
        "[(1, 2), (3, 4), (5,)]（整个 prompt 都切块），得到 "
        f"{manager.chunked_prefill_plan([1, 2, 3, 4, 5])!r}"
    )
    manager_small = PrefixCacheManager(block_size=3)
    assert (
        manager_small.chunked_prefill_plan([1, 2, 3, 4, 5, 6, 7]) == [(1, 2, 3), (4, 5, 6), (7,)]
    ), (
        "TODO 6: 不同 block_size 下分块边界不正确：block_size=3 时应为 "
        "[(1, 2, 3), (4, 5, 6), (7,)]，得到 "
        f"{manager_small.chunked_prefill_plan([1, 2, 3, 4, 5, 6, 7])!r}"
    )


def check_todo7():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    stats = manager.cache_stats([1, 2, 3, 9])
    assert stats == {"hit_tokens": 3, "uncached_tokens": 1, "reuse_ratio": 0.75}, (
        f"TODO 7: cache_stats([1, 2, 3, 9]) 应为 {{'hit_tokens': 3, 'uncached_tokens': 1, "
        f"'reuse_ratio': 0.75}}，得到 {stats!r}"
    )
    stats = manager.cache_stats([])
    assert (
        stats == {"hit_tokens": 0, "uncached_tokens": 0, "reuse_ratio": 0.0}
        and type(stats["reuse_ratio"]) is float
    ), (
        f"TODO 7: 空 prompt 时 cache_stats([]) 应为 {{'hit_tokens': 0, 'uncached_tokens': 0, "
        f"'reuse_ratio': 0.0}}（reuse_ratio 是 float），得到 {stats!r}"
    )
    stats = manager.cache_stats([1, 2, 3, 9, 9, 9])
    assert stats["reuse_ratio"] == 0.5, (
        "TODO 7: cache_stats([1, 2, 3, 9, 9, 9]) 的 reuse_ratio 应为 3 / 6 = 0.5，得到 "
        f"{stats['reuse_ratio']!r}"
    )
    stats = _manager_with(2, (1,)).cache_stats([1, 5, 6])
    assert stats["reuse_ratio"] == 0.3333, (
        "TODO 7: 缓存 [(1,)] 时 cache_stats([1, 5, 6]) 的 reuse_ratio 应为 1 / 3 保留 4 位小数 "
        f"= 0.3333（round(..., 4)），得到 {stats['reuse_ratio']!r}"
    )
    stats = _manager_with(2, (1, 2)).cache_stats([1, 2, 3])
    assert stats["reuse_ratio"] == 0.6667, (
        "TODO 7: 缓存 [(1, 2)] 时 cache_stats([1, 2, 3]) 的 reuse_ratio 应为 2 / 3 四舍五入到 4 位小数 "
        f"= 0.6667（round(..., 4)，不是截断成 0.6666），得到 {stats['reuse_ratio']!r}"
    )


def check_todo8():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    assert manager.chunked_suffix_prefill_plan([1, 2, 3, 9, 10]) == [(9, 10)], (
        "TODO 8: chunked_suffix_prefill_plan([1, 2, 3, 9, 10]) 应为 [(9, 10)]（只切未命中的 "
        f"suffix），得到 {manager.chunked_suffix_prefill_plan([1, 2, 3, 9, 10])!r}"
    )
    assert manager.chunked_suffix_prefill_plan([1, 2, 3]) == [], (
        "TODO 8: 完整命中时不应生成 suffix chunk：chunked_suffix_prefill_plan([1, 2, 3]) 应为 "
        f"[]，得到 {manager.chunked_suffix_prefill_plan([1, 2, 3])!r}"
    )


# (TODO, 检查, 它用到的其他 TODO)：用到的 TODO 没通过时跳过这个检查，免得把别人的错记在它头上
PART_ONE_CHECKS = [
    ("TODO 1", check_todo1, ()),
    ("TODO 2", check_todo2, ("TODO 1",)),
    ("TODO 3", check_todo3, ("TODO 1", "TODO 2")),
    ("TODO 4", check_todo4, ("TODO 1",)),
    ("TODO 5", check_todo5, ("TODO 1", "TODO 4")),
    ("TODO 6", check_todo6, ("TODO 1", "TODO 2")),
    ("TODO 7", check_todo7, ("TODO 1", "TODO 4")),
    ("TODO 8", check_todo8, ("TODO 1", "TODO 2", "TODO 4", "TODO 5")),
]
USED_METHOD = {todo: method for method, todo in TODO_OF_METHOD.items()}


def method_todo(frame):
    """这一层调用是哪个 TODO 的方法；不是时为 None。"""
    return TODO_OF_METHOD.get(frame.f_code.co_name)


def test_prefix_cache_manager():
    """逐个运行 PART_ONE_CHECKS：每个 TODO 打印一行结果，全部跑完后抛出第一个失败。"""
    failures, failed = [], set()
    for todo, check, uses in PART_ONE_CHECKS:
        broken = [used for used in uses if used in failed]
        if broken:
            names = "、".join(f"{used}（{USED_METHOD[used]}）" for used in broken)
            print(f"⚠️ {todo}：跳过可见检查——它用到 {names}，先让那里通过")
            failed.add(todo)
            continue
        failed.add(todo)  # 通过时再移除
        try:
            run_boxed(check, last_words=lambda timeout, todo=todo: timed_out_line(todo, timeout, method_todo))
        except CheckTimeout as timeout:
            message = timed_out_line(todo, timeout, method_todo)
            print(message)
            failures.append(TimeoutError(message))
        except NotImplementedError as error:
            frames = [f.name for f in traceback.extract_tb(error.__traceback__) if f.name in TODO_OF_METHOD]
            where = frames[-1] if frames else "某个方法"
            unfinished = TODO_OF_METHOD.get(where, todo)
            print(f"⏳ {todo}：请先完成 {unfinished}（{where} 里仍是 raise NotImplementedError()）")
            failures.append(NotImplementedError(f"请先完成 {unfinished}：{where} 里仍是 raise NotImplementedError()"))
        except AssertionError as error:
            print(f"❌ {error}")
            failures.append(error)
        except Exception as error:
            frames = [f.name for f in traceback.extract_tb(error.__traceback__) if f.name in TODO_OF_METHOD]
            where = f"{frames[-1]}（{TODO_OF_METHOD[frames[-1]]}）" if frames else "被检查的代码"
            print(f"❌ {todo} 的可见检查：{where} 抛出 {type(error).__name__}: {error}")
            failures.append(error)
        else:
            failed.discard(todo)
            print(f"✅ {todo} 的可见检查通过")
    if failures:
        raise failures[0]
    print("✅ PrefixCacheManager 的可见测试全部通过（评分时还有更多隐藏检查）")


def run_visible_test(test, todo_of_method):
    """运行 test：没做完的 TODO 指名是哪一个，其他异常保留原来的类型并说明出在哪里。"""
    try:
        test()
    except NotImplementedError as error:
        if str(error).startswith("请先完成"):  # test 已经指出是哪个 TODO
            raise NotImplementedError(str(error)) from None
        frames = [f.name for f in traceback.extract_tb(error.__traceback__) if f.name in todo_of_method]
        where = frames[-1] if frames else "某个方法"
        raise NotImplementedError(f"请先完成 {todo_of_method.get(where, 'TODO')}：{where} 里仍是 raise NotImplementedError()") from None


run_visible_test(test_prefix_cache_manager, TODO_OF_METHOD)

# %%
#| checks: todo1.py
#| checks: todo2.py
#| checks: todo3.py
#| checks: todo4.py
#| checks: todo5.py
#| checks: todo6.py
#| checks: todo7.py
#| checks: todo8.py

# %% [markdown]
# ---
# ## 🛑 到这里先停一停 🛑
#
# 请先独立完成 TODO 1–8，并让上面的测试单元格通过，再往下走。
#
# 参考答案与逐条解析**不在**这本学生版 notebook 里：它们在答案版 notebook 里，通常由老师在作业截止后发布。卡住时，先打开每个 TODO 旁边折叠的“提示”（一次只看一条），再回到 1.2–1.3 节的表格，对照测试单元格里的断言想一想“输入是什么、应该返回什么类型”。

# %% [markdown] tags=["solutions-only"]
# ## 参考答案解析
#
# 参考代码就在上面的 `PrefixCacheManager` 单元格里。下面逐个 TODO 说明写法与要点。
#
# **TODO 1　统一 token 表示。** `normalized = list(tokens)`。list、tuple、range 的元素相同，但 `[1, 2] == (1, 2)` 为 `False`：若不统一类型，后面的切片比较会悄悄失败。`list(...)` 还顺带复制了一份，调用方的序列不会被改动。
#
# **TODO 2　按分块大小切块。** `[tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]`。步长等于块大小，切片越界时 Python 自动截断，所以不满的尾块自然保留下来；用 tuple 表示块，是因为块一旦形成就不应再改，而且 tuple 可以做字典的键（第三部分的块哈希就要用到）。常见错误：`range(0, len(tokens) - self.block_size, ...)` 或 `len(tokens) // self.block_size` 会丢掉尾块。
#
# **TODO 3　登记前缀。** `prefix_chunks = self._chunk_tokens(prefix)`。`cached_prefixes` 存完整前缀，`chunked_prefixes` 存同一前缀的分块视图，两者下标一一对应；只有第一次见到这个前缀时才写入，否则重复登记会让两个列表错位，也会让统计失真。
#
# **TODO 4　最长前缀命中。** `is_match = prompt[: len(cached_prefix)] == list(cached_prefix)`。要把 tuple 转回 list 再比较；只比较 prompt 的开头，中间出现相同片段不算命中；外层循环维护 `best_len`，所以多个候选中取最长。
#
# **TODO 5　拆出前缀与后缀。** `reusable_prefix = prompt[:hit_len]`，`suffix = prompt[hit_len:]`。必须对 normalize 之后的 `prompt` 切片，而不是原始的 `prompt_tokens`：后者若是 tuple，切出来的也是 tuple。命中越长，需要重新计算的 suffix 越短——这就是前缀缓存的全部收益来源。
#
# **TODO 6　完整 prompt 的分块计划。** `plan = self._chunk_tokens(prompt_tokens)`。这是没有缓存时的基线计划，切块规则只写一份（在 `_chunk_tokens` 里），这里直接复用。
#
# **TODO 7　命中账本。** `hit_tokens = self.match_prefix(prompt)`，`uncached_tokens = len(prompt) - hit_tokens`，`reuse_ratio = round(hit_tokens / len(prompt), 4) if prompt else 0.0`。空 prompt 要单独处理，否则会除以零。`reuse_ratio` 只是 token 数的比例，不等于 KV 显存或计算时间的节省比例（第二部分会看到：注意力的代价随位置增长，后面的 token 更贵）。
#
# **TODO 8　只对 suffix 分块。** `_, suffix, _ = self.split_prompt(prompt_tokens)`，再 `suffix_chunks = self._chunk_tokens(suffix)`。命中的前缀不应再进入 prefill 计划；完整命中时 suffix 为空，计划就是 `[]`。
#
# ### 要点回顾
# - **前缀缓存为什么成立：** 因果注意力下，一个位置的 KV 只取决于它和它之前的 token，所以共享前缀的 KV 对所有请求都一样。
# - **为什么 `chunked_prefixes` 按分块大小切：** 这里的块是分块预填充的 chunk（1.3 节）：登记前缀时顺便记下它会分几次送进模型。它和 PagedAttention 的 KV 块不是一回事：KV 块决定 KV 显存按多大的页分配、共享和回收，两者在引擎里是两个独立的参数。
# - **工程上还缺什么：** 真实系统里缓存占用显存，必须配合淘汰策略（LRU）、引用计数和物理块管理；第三部分（选做）会实现它们。

# %% [markdown]
# ### 1.5　证据边界：这一部分证明了什么，没证明什么
#
# - **证明了：** 命中长度、suffix 拆分、分块计划和 token 级账本的控制逻辑是对的（随机输入与参考实现逐一比对）。
# - **没有证明：** 真实 KV 张量的复用是否正确、显存省了多少、TTFT / TPOT 和吞吐如何变化。`reuse_ratio` 是 token 数之比，不是显存或时间之比。第二部分用一个小 Transformer 给出“缓存后 logits 与完整 prefill 相同”的证据和 CPU 上的实测；服务级别的指标需要 serving 基准测试（例如 vLLM 的 `vllm bench serve`）。
# - **没有实现：** LRU 淘汰、引用计数、物理 KV 块的分配、跨 worker 的 KV 传输。其中前三项是第三部分（选做）的内容。

# %% [markdown]
# ### 1.6　小结
#
# - 因果注意力下，一个位置的 KV 只取决于它和它前面的 token；所以只有从 prompt 开头连续相同的前缀才是命中，命中的部分可以跳过 prefill。
# - 新请求在缓存里取**最长**的命中，剩下的后缀才要计算；`reuse_ratio` 是 token 数之比，不是时间或显存之比。
# - 分块预填充只切未命中的后缀，每块最多“分块大小”个 token，最后一块可以不满。
# - chunk（一次前向的一段 token）和 KV 块（显存里的一页 K/V）是两回事；这一部分只有 chunk。
#
# ### 1.7　练习（不计分，答案在答案版里）
#
# 1. 缓存里有前缀 `(1, 2, 3)`，新 prompt 是 `[9, 1, 2, 3, 4]`。命中多长？为什么 `1, 2, 3` 在这里的 KV 和缓存里的不同？
# 2. 两个缓存前缀 `(1, 2)` 和 `(1, 2, 3, 4)` 都命中同一个 prompt。取短的那个会错吗？会浪费什么？
# 3. 分块大小为 4 时，一个 10 个 token、命中 6 个的 prompt，`chunked_prefill_plan` 和 `chunked_suffix_prefill_plan` 各给出几块、每块多长？
# 4. `reuse_ratio = 0.9` 是否意味着 prefill 的时间省了 90%？先写下你的猜测，第二部分的代价模型会给出答案。
# 5. 本部分的 `match_prefix` 把 prompt 和每个缓存前缀逐个比较。缓存里有一万个前缀时，这样做的代价是多少？第三部分用什么办法避开它？

# %% [markdown] tags=["solutions-only"]
# #### 练习答案（第一部分）
#
# 1. 命中 0 个 token：命中必须从第一个 token 开始。这里的 `1, 2, 3` 前面多了一个 `9`，每个位置的注意力都看得到它，所以 KV 与缓存里从位置 0 开始的 `1, 2, 3` 不同。
# 2. 结果不会错：短前缀的 KV 也是对的，只是后缀更长，要多算 2 个 token 的 prefill。取最长的命中是为了少算。
# 3. `chunked_prefill_plan` 给 3 块：4、4、2 个 token；后缀是 4 个 token，`chunked_suffix_prefill_plan` 给 1 块：4 个 token。
# 4. 不是。注意力的代价随位置增长，没命中的 10% 恰好是最后、也最贵的位置。第二部分的代价模型给出加速比 S(h, T)：prompt 短时（线性层为主）接近 1/(1 − h) = 10 倍，极长时（注意力为主）趋于 1/(1 − h²) ≈ 5.3 倍；在 GPU 上，短后缀的前向还受读权重的带宽限制，实测更低。
# 5. 每次查询要和一万个前缀各比较一次，代价与前缀总长成正比。第三部分把 prompt 切成固定大小的 KV 块，每块的哈希包含它前面的全部内容（哈希链），查一个块就是查一次字典，命中长度按块逐个往后找。
