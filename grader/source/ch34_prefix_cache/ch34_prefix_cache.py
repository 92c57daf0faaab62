# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 第 34 章　前缀缓存（Prefix Caching）与分块预填充（Chunked Prefill）
#
# {{colab_badge}}
#
# **难度：** 困难　|　**环境：** 先在 CPU 上跑通，GPU 只用于最后的可选实验　|　**关键词：** prefix caching、chunked prefill、KV cache 复用
#
# **怎么运行这本 notebook**
# - **Google Colab：** {{colab_howto}}
# - **魔搭社区（ModelScope）：** 登录后进入「我的 Notebook」，启动免费的 CPU 实例（做最后的 GPU 实验时选 GPU 实例），在 JupyterLab 左侧上传本 `.ipynb` 文件后双击打开。
# - 本 notebook 只依赖 Python 标准库和 PyTorch（Colab 与魔搭实例都已预装），不从仓库里 import 任何东西，单个文件即可运行。
# - **最低版本：** Python 3.10、PyTorch 1.11。Colab 默认运行时（Python 3.13、torch 2.11）和魔搭的镜像（Python 3.12、torch 2.10；旧镜像 Python 3.11、torch 2.3.1）都满足。
# - **已验证的平台：** 2026-12-02 用 `make compat` 在 CPU 上逐一运行了答案版的全部 76 个代码单元格：Colab 默认运行时（Python 3.13.0、torch 2.11.0）、魔搭（Python 3.12.1、torch 2.10.0；旧镜像 Python 3.11.7、torch 2.3.1）和最低版本（Python 3.10.13、torch 1.11.0）都通过，没有报错，也没有警告。
#
# **分值：** {{grading_summary}}；最后的 GPU 实验不计分（分值按老师的设置）。每个 TODO 的分数拆到几个评分单元格里（基本行为、边界情况、返回类型、不修改输入……），错一处只扣那一格的分，一个 TODO 写错也不会连累别的 TODO。
#
# **交作业：** 完成全部 TODO 后，「文件 → 下载 → 下载 .ipynb」，把文件按老师的要求命名（通常是学号，如 `2024001.ipynb`）后提交。请不要删除或改动带锁的测试单元格；即使误删了，评分脚本也会按原题恢复它们。

# %% [markdown]
# ## 本章导读
#
# 长 prompt 之所以昂贵，不只是因为 token 多，更因为其中大量内容是**重复的**：同一个 system prompt、同一份工具说明、同一个 RAG 模板，以及多轮对话里越积越长的历史。若每个请求都从第一个 token 开始重新做一遍 prefill，这些共享前缀就被一遍遍地重算，它们的 KV cache 也无法在请求之间复用。
#
# 本章分四部分把这件事落到代码上：
# 1. **第一部分（核心，{{points:core}}）：前缀缓存的账本与分块计划。** 登记前缀、为新请求找出最长命中、拆出还需计算的后缀（suffix）、统计复用了多少 token，再把没有命中的长 suffix 切成固定大小的块逐块推进（TODO 1–8）。
# 2. **第二部分（{{points:kv}}）：从账本到真实 KV。** 把账本换成一个小 Transformer 的真实 KV 张量，证明“缓存 + 分块”的结果与一次完整的 prefill 相同，并在 CPU 上实测（TODO 9–10）。
# 3. **第三部分（选做，{{points:block}}）：块级前缀缓存。** 真实引擎的做法：固定大小的 KV 块、哈希链、引用计数与 LRU 淘汰（TODO 11–14）。
# 4. **第四部分（{{points:sched}}）：调度器。** 两件事在哪里相遇：vLLM v1 每一步用一个 token 预算同时安排 decode 和 prefill 块，命中的前缀按整块跳过；在小模型上端到端验证，再模拟 TTFT 与 TBT 怎样随预算变化（TODO 15–19，不依赖第三部分）。
#
# 最后附一个不计分的 GPU 可选实验。小节按部分编号：1.1–1.5、2.1–2.5、3.1–3.8、4.1–4.6。
#
# **前置阅读：** 本课程第 20 章（FlashAttention 模拟）、第 22 章（vLLM PagedAttention）、第 24 章（SGLang RadixAttention）。开始之前，你应该能说清楚 KV cache 为什么能保存“历史”的计算结果。

# %% [markdown]
# ## 第一部分（核心，{{points:core}}）：前缀缓存的账本与分块计划
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
# | `block_size` | 每个 chunk 最多包含的 token 数 | 决定单次 prefill 的工作集上限 |
# | `chunks` | suffix 被切出来的 token 块序列 | 可以逐块推进，而不是一口气处理完整个 suffix |
# | 尾块 | 最后一个不足 `block_size` 的 chunk | 真实输入长度很少恰好整除，必须正确处理 |
#
# **`block_size` 在本 notebook 里有两种含义，** 沿用题目给出的参数名，引擎里它们是两个不同的参数：
# - **第一、二部分：分块预填充的块大小（chunk size）。** 一个 prompt 一次前向最多送进几个 token，限制的是单次 prefill 的工作集。第二部分的函数参数就叫 `chunk_size`。引擎里没有一个参数和它一一对应：vLLM 的 `max_num_batched_tokens` 是**每一步**的 token 预算，这一步里所有请求的 decode token 和 prefill 块共用它；单个请求每步最多拿多少 prefill token 由 `long_prefill_token_threshold` 限制，默认 0，即不单独限制（`vllm/v1/core/sched/scheduler.py` 的 `schedule`）。SGLang 的 `--chunked-prefill-size` 是一个 prefill batch 的 token 预算（`python/sglang/srt/managers/schedule_policy.py` 的 `PrefillAdder`）。只有一个请求在做 prefill、没有别的 decode 时，这些预算才等于这里的 chunk 大小。
# - **第三部分：KV cache 的块（页）大小（block / page size）。** 每个物理块存几个 token 的 K/V，决定前缀缓存的粒度：只有满块才能共享。vLLM 叫 `--block-size`（PagedAttention 的页），SGLang 叫 `--page-size`。
#
# 两者可以独立设置：例如 KV 块是 16 个 token，而每次 prefill 最多处理 2048 个 token。

# %% [markdown]
# ### 1.4　实现前缀缓存管理器与分块计划
#
# 下面的 `PrefixCacheManager` 用最小的代码表达上面的流程：token 序列用 `list` 表示，chunk 用 `tuple` 表示。它只验证**控制逻辑**（命中多长、后缀是什么、怎样分块、复用了多少 token）；真实系统还要把命中范围映射到 KV cache 的物理存储，并管理它的生命周期——这些留到后面的扩展部分。
#
# | 阶段 | 要完成的内容 | 产出与检查项 |
# |---|---|---|
# | 表示与分块 | TODO 1–2：统一 token 类型，按 `block_size`（chunk 大小）切块 | token 列表、chunk 边界、尾块 |
# | 前缀命中 | TODO 3–5：登记前缀、求最长命中、拆出 suffix | `hit_len`、`reusable_prefix`、`suffix` |
# | 执行账本 | TODO 6–8：生成分块计划、统计复用 | `hit_tokens`、`uncached_tokens`、`reuse_ratio`、suffix 的 chunks |
#
# **提示**
# - 基础表示：`_normalize` 把 list、tuple、range 等输入统一成普通 `list`；`_chunk_tokens` 先 normalize，再按 `block_size` 切成 tuple，最后一块可以不满。
# - 命中路径：`add_prefix` 登记前缀（重复登记不应产生新条目），`match_prefix` 只接受从开头连续的命中并取最长，`split_prompt` 据此拆出前缀和后缀，返回 3 元组 `(prefix, suffix, hit_len)`：普通 tuple 或它的子类（例如 `NamedTuple`）都可以，`prefix` 和 `suffix` 是普通 list。
# - 执行账本：`chunked_prefill_plan` 对整个 prompt 切块；`cache_stats` 统计 token 级命中；`chunked_suffix_prefill_plan` 只对 suffix 切块。
#
# 每个 TODO 只需写几行。把 `raise NotImplementedError()` 换成你的代码即可，不要改方法的名字和签名：自动评分会逐个方法检查。

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
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开里面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 1 · 提示 1</summary>
#
# list、tuple、range 里可以装着同样的整数，可是 `[1, 2] == (1, 2)` 的结果是什么？在一个新单元格里试一下。
#
# <details><summary>TODO 1 · 提示 2</summary>
#
# Python 有一个内置类型，能把任何可迭代对象变成一个新的列表；新列表是一份拷贝，调用者的序列也就不会被改动。
#
# </details>
# </details>
#
# <details><summary>TODO 2 · 提示 1</summary>
#
# 第 0 块从位置 0 开始，第 1 块从哪里开始？最后一块的终点可能越过 `len(tokens)`，Python 的切片遇到越界会怎样？
#
# <details><summary>TODO 2 · 提示 2</summary>
#
# 用步长为 `block_size` 的 `range` 列出每块的起点，对每个起点切出一段并转成 tuple。`range` 的终点就是 `len(tokens)`，不要缩短它，否则不满的尾块会丢。
#
# </details>
# </details>
#
# <details><summary>TODO 3 · 提示 1</summary>
#
# 这一行只需要算出同一个前缀的分块结果，而切块的规则你已经写过一次了。
#
# <details><summary>TODO 3 · 提示 2</summary>
#
# `chunked_prefixes` 的每一项与 `cached_prefixes` 下标相同，内容是把这个前缀交给 TODO 2 的方法得到的 chunk 列表。这里的 chunk 是分块预填充的块（1.3 节的第一种含义），不是第三部分的 KV 块。
#
# </details>
# </details>
#
# <details><summary>TODO 4 · 提示 1</summary>
#
# 命中只有一个条件：prompt 开头的几个 token 与缓存的前缀逐个相同。同样的片段出现在 prompt 中间算不算？
#
# <details><summary>TODO 4 · 提示 2</summary>
#
# 取 prompt 开头、与缓存前缀等长的一段，和前缀比较；两边的类型要一样（list 与 tuple 比较永远不相等）。不要在第一次命中时就返回：外面的循环会在所有命中里取最长的。
#
# </details>
# </details>
#
# <details><summary>TODO 5 · 提示 1</summary>
#
# `hit_len` 已经算好了，prefix 和 suffix 就在这个位置分开。
#
# <details><summary>TODO 5 · 提示 2</summary>
#
# 对 normalize 之后的 `prompt` 在 `hit_len` 处一分为二：前一段是 prefix，后一段是 suffix。不要对原始的 `prompt_tokens` 切片：它是 tuple 时，切出来的还是 tuple。
#
# </details>
# </details>
#
# <details><summary>TODO 6 · 提示 1</summary>
#
# 整个 prompt 的分块计划与缓存命不命中有关系吗？
#
# <details><summary>TODO 6 · 提示 2</summary>
#
# 把整个 prompt 交给 TODO 2 的切块方法就够了：切块的规则只保留一份。
#
# </details>
# </details>
#
# <details><summary>TODO 7 · 提示 1</summary>
#
# 三个量之间有一个等式：命中的 + 未命中的 = prompt 长度。prompt 为空时，比例的除法会怎样？
#
# <details><summary>TODO 7 · 提示 2</summary>
#
# 命中长度来自 TODO 4 的方法；比例用真除法，并按注释的要求保留 4 位小数（Python 内置的四舍五入函数可以指定位数）；空 prompt 直接给 float 的 0.0。
#
# </details>
# </details>
#
# <details><summary>TODO 8 · 提示 1</summary>
#
# 已经命中的前缀不用再 prefill。哪一个方法已经把 prompt 拆成了前缀和后缀？
#
# <details><summary>TODO 8 · 提示 2</summary>
#
# 先用 TODO 5 的方法拿到 suffix，再把 suffix（不是整个 prompt）交给 TODO 2 的切块方法，结果赋给 `suffix_chunks`。完整命中时 suffix 为空，计划自然是空列表。
#
# </details>
# </details>

# %% [markdown]
# ### 测试
#
# 运行下面的单元格检查 TODO 1–8（几秒内跑完）。每条断言失败时都会写明是哪个 TODO、输入是什么、应该得到什么、实际得到什么；你的代码抛出的异常保持原样（`TypeError` 就是 `TypeError`），只有某个方法里仍是 `raise NotImplementedError()` 时才提示“请先完成 TODO N”。这里全部通过，说明基本路径正确；评分时还会用随机输入、边界情况和多种 `block_size` 再检查一遍。

# %% nbgrader={"grade": false, "grade_id": "visible_tests", "locked": true, "schema_version": 3, "solution": false, "task": false}
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
    assert type(got) is list and got == [3, 1, 3], f"TODO 1: _normalize((3, 1, 3)) 应返回普通 list [3, 1, 3]（保持顺序与重复），得到 {type(got).__name__} {got!r}"


def check_todo2():
    manager = PrefixCacheManager(block_size=2)
    got = manager._chunk_tokens(range(5))
    assert got == [(0, 1), (2, 3), (4,)], f"TODO 2: block_size=2 时 _chunk_tokens(range(5)) 应返回 [(0, 1), (2, 3), (4,)]（每块一个 tuple，不满的尾块也保留），得到 {got!r}"


def check_todo3():
    manager = PrefixCacheManager(block_size=2)
    manager.add_prefix([1, 2, 3])
    manager.add_prefix([1, 2, 9])
    manager.add_prefix([1, 2, 3])  # 重复登记不应增加缓存条目
    assert manager.cached_prefixes == [(1, 2, 3), (1, 2, 9)], f"TODO 3: 依次登记 [1, 2, 3]、[1, 2, 9]、[1, 2, 3] 后 cached_prefixes 应为 [(1, 2, 3), (1, 2, 9)]，得到 {manager.cached_prefixes!r}"
    assert len(manager.chunked_prefixes) == 2, f"TODO 3: 重复 prefix 不应重复建立分块记录：登记三次（其中一次重复）后 chunked_prefixes 应有 2 条，得到 {len(manager.chunked_prefixes)} 条"
    assert manager.chunked_prefixes[0] == [(1, 2), (3,)], f"TODO 3: block_size=2 时前缀 [1, 2, 3] 的分块应为 [(1, 2), (3,)]，得到 {manager.chunked_prefixes[0]!r}"


def check_todo4():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    assert manager.match_prefix([1, 2, 3, 9]) == 3, f"TODO 4: 缓存 [(1, 2, 3), (1, 2, 9)] 时 match_prefix([1, 2, 3, 9]) 应为 3，得到 {manager.match_prefix([1, 2, 3, 9])!r}"
    assert manager.match_prefix([1, 2, 9, 8]) == 3, f"TODO 4: match_prefix([1, 2, 9, 8]) 应为 3（命中 (1, 2, 9)），得到 {manager.match_prefix([1, 2, 9, 8])!r}"
    assert manager.match_prefix([1, 2, 0]) == 0, f"TODO 4: match_prefix([1, 2, 0]) 应为 0（两个缓存前缀都没有完整出现在开头），得到 {manager.match_prefix([1, 2, 0])!r}"
    assert manager.match_prefix([0, 1, 2, 3]) == 0, f"TODO 4: match_prefix([0, 1, 2, 3]) 应为 0（(1, 2, 3) 出现在 prompt 中间不算命中：只能从开头连续匹配），得到 {manager.match_prefix([0, 1, 2, 3])!r}"
    longest = _manager_with(2, (1, 2), (1, 2, 3, 4))
    got = longest.match_prefix([1, 2, 3, 4, 5])
    assert got == 4, f"TODO 4: 缓存 [(1, 2), (1, 2, 3, 4)] 时 match_prefix([1, 2, 3, 4, 5]) 应为 4（两个前缀都命中，取最长的；不能在第一个命中处就返回），得到 {got!r}"


def check_todo5():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    got = manager.split_prompt([1, 2, 3, 9])
    assert isinstance(got, tuple) and len(got) == 3, f"TODO 5: split_prompt([1, 2, 3, 9]) 应返回 3 元组 (prefix, suffix, hit_len)，得到 {got!r}"
    prefix, suffix, hit_len = got
    assert prefix == [1, 2, 3], f"TODO 5: split_prompt([1, 2, 3, 9]) 的 prefix 应为 [1, 2, 3]，得到 {prefix!r}"
    assert suffix == [9], f"TODO 5: split_prompt([1, 2, 3, 9]) 的 suffix 应为 [9]，得到 {suffix!r}"
    assert hit_len == 3, f"TODO 5: split_prompt([1, 2, 3, 9]) 的 hit_len 应为 3，得到 {hit_len!r}"
    got = manager.split_prompt((1, 2, 3, 9))
    assert [type(part).__name__ for part in got] == ["list", "list", "int"], f"TODO 5: split_prompt((1, 2, 3, 9)) 应返回 (list, list, int)：tuple 输入也要对 _normalize 之后的 prompt 切片，得到 {got!r}"


def check_todo6():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    assert manager.chunked_prefill_plan([1, 2, 3, 4, 5]) == [(1, 2), (3, 4), (5,)], f"TODO 6: block_size=2 时 chunked_prefill_plan([1, 2, 3, 4, 5]) 应为 [(1, 2), (3, 4), (5,)]（整个 prompt 都切块），得到 {manager.chunked_prefill_plan([1, 2, 3, 4, 5])!r}"


def check_todo7():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    stats = manager.cache_stats([1, 2, 3, 9])
    assert stats == {"hit_tokens": 3, "uncached_tokens": 1, "reuse_ratio": 0.75}, f"TODO 7: cache_stats([1, 2, 3, 9]) 应为 {{'hit_tokens': 3, 'uncached_tokens': 1, 'reuse_ratio': 0.75}}，得到 {stats!r}"
    stats = manager.cache_stats([])
    assert stats == {"hit_tokens": 0, "uncached_tokens": 0, "reuse_ratio": 0.0} and type(stats["reuse_ratio"]) is float, f"TODO 7: 空 prompt 时 cache_stats([]) 应为 {{'hit_tokens': 0, 'uncached_tokens': 0, 'reuse_ratio': 0.0}}（reuse_ratio 是 float），得到 {stats!r}"
    stats = manager.cache_stats([1, 2, 3, 9, 9, 9])
    assert stats["reuse_ratio"] == 0.5, f"TODO 7: cache_stats([1, 2, 3, 9, 9, 9]) 的 reuse_ratio 应为 3 / 6 = 0.5，得到 {stats['reuse_ratio']!r}"
    stats = _manager_with(2, (1,)).cache_stats([1, 5, 6])
    assert stats["reuse_ratio"] == 0.3333, f"TODO 7: 缓存 [(1,)] 时 cache_stats([1, 5, 6]) 的 reuse_ratio 应为 1 / 3 保留 4 位小数 = 0.3333（round(..., 4)），得到 {stats['reuse_ratio']!r}"


def check_todo8():
    manager = _manager_with(2, (1, 2, 3), (1, 2, 9))
    assert manager.chunked_suffix_prefill_plan([1, 2, 3, 9, 10]) == [(9, 10)], f"TODO 8: chunked_suffix_prefill_plan([1, 2, 3, 9, 10]) 应为 [(9, 10)]（只切未命中的 suffix），得到 {manager.chunked_suffix_prefill_plan([1, 2, 3, 9, 10])!r}"
    assert manager.chunked_suffix_prefill_plan([1, 2, 3]) == [], f"TODO 8: 完整命中时不应生成 suffix chunk：chunked_suffix_prefill_plan([1, 2, 3]) 应为 []，得到 {manager.chunked_suffix_prefill_plan([1, 2, 3])!r}"


def check_todo6_other_block_size():
    manager_small = PrefixCacheManager(block_size=3)
    assert manager_small.chunked_prefill_plan([1, 2, 3, 4, 5, 6, 7]) == [(1, 2, 3), (4, 5, 6), (7,)], f"TODO 6: 不同 block_size 下分块边界不正确：block_size=3 时应为 [(1, 2, 3), (4, 5, 6), (7,)]，得到 {manager_small.chunked_prefill_plan([1, 2, 3, 4, 5, 6, 7])!r}"


# (TODO, 检查, 它用到的其他 TODO)：用到的 TODO 没通过时跳过这个检查，免得把别人的错记在它头上
PART_ONE_CHECKS = [
    ("TODO 1", check_todo1, ()), ("TODO 2", check_todo2, ("TODO 1",)), ("TODO 3", check_todo3, ("TODO 1", "TODO 2")),
    ("TODO 4", check_todo4, ("TODO 1",)), ("TODO 5", check_todo5, ("TODO 1", "TODO 4")), ("TODO 6", check_todo6, ("TODO 1", "TODO 2")),
    ("TODO 7", check_todo7, ("TODO 1", "TODO 4")), ("TODO 8", check_todo8, ("TODO 1", "TODO 2", "TODO 4", "TODO 5")),
    ("TODO 6", check_todo6_other_block_size, ("TODO 1", "TODO 2")),
]
USED_METHOD = {todo: method for method, todo in TODO_OF_METHOD.items()}


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
            check()
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
    """Run `test`; an unfinished TODO is named, any other exception keeps its type and says where."""
    try:
        test()
    except NotImplementedError as error:
        if str(error).startswith("请先完成"):  # test 已经指出是哪个 TODO
            raise NotImplementedError(str(error)) from None
        frames = [f.name for f in traceback.extract_tb(error.__traceback__) if f.name in todo_of_method]
        where = frames[-1] if frames else "某个方法"
        raise NotImplementedError(f"请先完成 {todo_of_method.get(where, 'TODO')}：{where} 里仍是 raise NotImplementedError()") from None


run_visible_test(test_prefix_cache_manager, TODO_OF_METHOD)

# %% [markdown]
# ### 自动评分单元格（每个 TODO 分几格，合计 100 分）
#
# 下面每个单元格检查一个 TODO 的一个方面，第一行注释写明它检查什么、值几分：基本行为、边界情况（空 prompt、完整命中、不满的尾块……）、返回类型、不修改缓存和输入。单元格里的检查是隐藏的，评分时才运行：固定随机种子的随机输入与参考实现对比、list / tuple / range 三种输入、多种 `block_size`。每格只检查自己的 TODO：它用到的其他方法都换成参考实现，所以别的 TODO 写错不会连累这一格。评分反馈会列出每一格的得分和第一条失败信息。

# %% nbgrader={"grade": true, "grade_id": "test_todo1_basic", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 1 · 基本（4 分）：随机 list 输入，内容、顺序与重复 token 都与参考实现相同
### BEGIN HIDDEN TESTS
#| check: todo1.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo1_types", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 1 · 类型（2 分）：tuple / range 输入也得到元素相同的普通 list
### BEGIN HIDDEN TESTS
#| check: todo1.py::check_types
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo1_edge", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 1 · 边界（2 分）：空输入、单个 token；不修改传入的序列
### BEGIN HIDDEN TESTS
#| check: todo1.py::check_edge
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo2_basic", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 2 · 基本（4 分）：能整除时按 block_size 切块，多种 block_size（含默认的 4）
### BEGIN HIDDEN TESTS
#| check: todo2.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo2_tail", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 2 · 尾块（4 分）：长度不能整除、比一块还短时，不满的尾块也保留
### BEGIN HIDDEN TESTS
#| check: todo2.py::check_tail
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo2_types", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 2 · 类型（2 分）：返回 tuple 组成的 list；list / tuple / range 输入
### BEGIN HIDDEN TESTS
#| check: todo2.py::check_types
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo2_edge", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 2 · 边界（2 分）：空输入得到 []；不修改传入的序列
### BEGIN HIDDEN TESTS
#| check: todo2.py::check_edge
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo3_basic", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# TODO 3 · 基本（5 分）：不同前缀依次登记：cached_prefixes 与 chunked_prefixes 一一对应
### BEGIN HIDDEN TESTS
#| check: todo3.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo3_repeat", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 3 · 重复登记（4 分）：同一前缀再登记（list / tuple / range）什么也不做
### BEGIN HIDDEN TESTS
#| check: todo3.py::check_repeat
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo3_types", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 3 · 类型（3 分）：返回 None；前缀是 tuple，分块是 tuple 组成的 list
### BEGIN HIDDEN TESTS
#| check: todo3.py::check_types
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo4_basic", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
# TODO 4 · 基本（6 分）：随机缓存与 prompt：从开头连续匹配的最长命中
### BEGIN HIDDEN TESTS
#| check: todo4.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo4_edge", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 4 · 边界（4 分）：空 prompt、空缓存、与前缀相同或更短的 prompt、出现在中间的前缀
### BEGIN HIDDEN TESTS
#| check: todo4.py::check_edge
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo4_types", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 4 · 类型（3 分）：tuple / range 输入得到同样的命中长度，返回 int
### BEGIN HIDDEN TESTS
#| check: todo4.py::check_types
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo4_no_mutation", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 4 · 不修改（3 分）：查询不改动缓存和传入的 prompt
### BEGIN HIDDEN TESTS
#| check: todo4.py::check_no_mutation
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo5_basic", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# TODO 5 · 基本（5 分）：随机缓存与 prompt：prefix、suffix、hit_len 与参考实现相同
### BEGIN HIDDEN TESTS
#| check: todo5.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo5_types", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 5 · 类型（3 分）：返回 3 元组（tuple 或 NamedTuple）：list、list、int；tuple / range 输入
### BEGIN HIDDEN TESTS
#| check: todo5.py::check_types
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo5_edge", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 5 · 边界（2 分）：空 prompt、没有命中、完整命中
### BEGIN HIDDEN TESTS
#| check: todo5.py::check_edge
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo5_no_mutation", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 5 · 不修改（2 分）：拆分不改动缓存和传入的 prompt
### BEGIN HIDDEN TESTS
#| check: todo5.py::check_no_mutation
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo6_basic", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# TODO 6 · 基本（5 分）：缓存为空时，随机 prompt 与多种 block_size 的完整分块计划
### BEGIN HIDDEN TESTS
#| check: todo6.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo6_whole_prompt", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 6 · 整个 prompt（3 分）：即使前缀命中，计划也覆盖整个 prompt
### BEGIN HIDDEN TESTS
#| check: todo6.py::check_whole_prompt
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo6_types", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 6 · 类型（2 分）：返回 tuple 组成的 list；list / tuple / range 输入
### BEGIN HIDDEN TESTS
#| check: todo6.py::check_types
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo7_basic", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
# TODO 7 · 基本（6 分）：hit_tokens 与 uncached_tokens（int）与参考实现相同
### BEGIN HIDDEN TESTS
#| check: todo7.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo7_ratio", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# TODO 7 · 比例（5 分）：reuse_ratio 是 float，等于 hit_tokens / len(prompt)（4 位小数）
### BEGIN HIDDEN TESTS
#| check: todo7.py::check_ratio
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo7_empty", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 7 · 空 prompt（2 分）：返回 0、0 与 float 0.0，不除以零
### BEGIN HIDDEN TESTS
#| check: todo7.py::check_empty
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo7_no_mutation", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 7 · 不修改（2 分）：统计不改动缓存和传入的 prompt
### BEGIN HIDDEN TESTS
#| check: todo7.py::check_no_mutation
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo8_basic", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
# TODO 8 · 基本（6 分）：部分命中时只切 suffix，随机 prompt 与多种 block_size
### BEGIN HIDDEN TESTS
#| check: todo8.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo8_full_hit", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 8 · 完整命中（3 分）：整个 prompt 都已缓存时计划为 []
### BEGIN HIDDEN TESTS
#| check: todo8.py::check_full_hit
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo8_no_hit", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 8 · 没有命中（2 分）：没有命中时整个 prompt 都是 suffix；空 prompt 得到 []
### BEGIN HIDDEN TESTS
#| check: todo8.py::check_no_hit
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo8_types", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 8 · 类型（2 分）：返回 tuple 组成的 list；list / tuple / range 输入
### BEGIN HIDDEN TESTS
#| check: todo8.py::check_types
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo8_no_mutation", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 8 · 不修改（2 分）：生成计划不改动缓存和传入的 prompt
### BEGIN HIDDEN TESTS
#| check: todo8.py::check_no_mutation
### END HIDDEN TESTS

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
# **TODO 2　按 `block_size` 分块。** `[tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]`。步长等于块大小，切片越界时 Python 自动截断，所以不满的尾块自然保留下来；用 tuple 表示块，是因为块一旦形成就不应再改，而且 tuple 可以做字典的键（第三部分的块哈希就要用到）。常见错误：`range(0, len(tokens) - self.block_size, ...)` 或 `len(tokens) // self.block_size` 会丢掉尾块。
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
# - **为什么 `chunked_prefixes` 按 `block_size` 切：** 这里的块是分块预填充的 chunk（1.3 节的第一种含义）：登记前缀时顺便记下它会分几次送进模型。它和 PagedAttention 的 KV 块不是一回事：KV 块（1.3 节的第二种含义，第三部分的 `block_size`）决定 KV 显存按多大的页分配、共享和回收，两者在引擎里是两个独立的参数。
# - **工程上还缺什么：** 真实系统里缓存占用显存，必须配合淘汰策略（LRU）、引用计数和物理块管理；第三部分（选做）会实现它们。

# %% [markdown]
# ### 1.5　证据边界：这一部分证明了什么，没证明什么
#
# - **证明了：** 命中长度、suffix 拆分、分块计划和 token 级账本的控制逻辑是对的（随机输入与参考实现逐一比对）。
# - **没有证明：** 真实 KV 张量的复用是否正确、显存省了多少、TTFT / TPOT 和吞吐如何变化。`reuse_ratio` 是 token 数之比，不是显存或时间之比。第二部分用一个小 Transformer 给出“缓存后 logits 与完整 prefill 相同”的证据和 CPU 上的实测；服务级别的指标需要 serving 基准测试（例如 vLLM 的 `vllm bench serve`）。
# - **没有实现：** LRU 淘汰、引用计数、物理 block 分配、跨 worker 的 KV 传输。其中前三项是第三部分（选做）的内容。

# %% [markdown]
# ---
# ## 第二部分（{{points:kv}}）：从账本到真实 KV —— 在一个小 Transformer 上做前缀缓存与分块预填充
#
# 第一部分的 `PrefixCacheManager` 只记账：它告诉我们 prompt 的前 `hit_len` 个 token 可以复用、剩下的 suffix 要重新算，但它手里没有任何张量。这一部分把账本接到真实的 KV cache 上，并回答两个问题：
#
# 1. **结果对不对？** 命中前缀后只算 suffix，得到的 logits 和 KV 必须与“从头完整算一遍”一致（`torch.allclose`）。分块预填充也一样。
# 2. **省了多少？** 缓存命中省下多少时间，和一个简单的代价模型差多少；分块预填充让注意力的峰值内存降了多少，又有什么没省下。
#
# | 步骤 | 内容 | 你要写的 |
# |---|---|---|
# | 2.1 | 一个带 KV cache 接口的极小 decoder-only Transformer（已给出） | — |
# | 2.2 | 分块预填充：每块都接着前面所有 token 的 KV 计算 | TODO 9 `chunked_prefill` |
# | 2.3 | 带真实 KV 的前缀缓存：复用最长命中前缀，只算 suffix | TODO 10 `KVPrefixCache` |
# | 2.4 | 代价模型与 CPU 实测：缓存加速比、注意力峰值内存 | — |
#
# 这一部分开始用 PyTorch（只用 CPU，几秒内跑完）。TODO 9、10 各 15 分，计入成绩。这里的 `block_size` / `chunk_size` 是分块预填充的块大小（第一部分的含义），不是 KV 块的大小。

# %% nbgrader={"grade": false, "grade_id": "kv_imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math
import random
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn as nn

# %% nbgrader={"grade": false, "grade_id": "kv_visible_runner", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 第二、三部分的可见检查共用的小工具：逐个运行检查，每个 TODO 打印一行结果，最后抛出第一个失败。
# 只用标准库：第三部分不需要 torch，装了 torch 时才把线程数临时设为 1。
import sys
import traceback

VISIBLE_TODO_OF = {
    ("PrefixCacheManager", "_normalize"): "TODO 1",
    ("PrefixCacheManager", "_chunk_tokens"): "TODO 2",
    ("PrefixCacheManager", "add_prefix"): "TODO 3",
    ("PrefixCacheManager", "match_prefix"): "TODO 4",
    ("PrefixCacheManager", "split_prompt"): "TODO 5",
    (None, "chunked_prefill"): "TODO 9",
    ("KVPrefixCache", "add_prefix"): "TODO 10",
    ("KVPrefixCache", "prefill"): "TODO 10",
    ("BlockPrefixCache", "match"): "TODO 11",
    ("BlockPrefixCache", "acquire"): "TODO 12",
    ("BlockPrefixCache", "release"): "TODO 13",
    ("BlockPrefixCache", "_record_query"): "TODO 14",
}


def todo_of_traceback(error):
    """(TODO, 方法名)：抛出 error 的最内层 TODO 方法；找不到时为 None。"""
    found = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        owner = frame.f_locals.get("self")
        classes = [cls.__name__ for cls in type(owner).__mro__] if owner is not None else [None]
        for name in classes:
            todo = VISIBLE_TODO_OF.get((name, frame.f_code.co_name))
            if todo:
                found = (todo, frame.f_code.co_name)
                break
    return found


def run_visible_checks(checks):
    """checks: [(TODO, 检查函数)]。检查函数返回 None 表示通过，返回一句话表示跳过（原因）。

    只有真的还在 raise NotImplementedError 时才说“请先完成”；其他异常保留原来的类型。
    """
    failures = []
    torch_module = sys.modules.get("torch")  # 没装 torch（或还没 import）时为 None：第三部分照样能跑
    threads = torch_module.get_num_threads() if torch_module else None
    if torch_module:
        torch_module.set_num_threads(1)  # 张量很小：单线程快得多，也不和机器上的其他进程争抢
    for todo, check in checks:
        try:
            skipped = check()
        except NotImplementedError as error:
            owner = todo_of_traceback(error)
            unfinished, method = owner if owner else (todo, "代码")
            print(f"⏳ {todo}：请先完成 {unfinished}（{method} 里仍是 raise NotImplementedError()）")
            failures.append(NotImplementedError(f"请先完成 {unfinished}：{method} 里仍是 raise NotImplementedError()"))
        except AssertionError as error:
            print(f"❌ {error}")
            failures.append(error)
        except Exception as error:
            owner = todo_of_traceback(error)
            if owner and owner[0] != todo:
                # 检查只在它用到的别的 TODO 已经通过时才运行：错在这个 TODO 怎样调用它
                where = f"{todo} 的代码调用的 {owner[1]}（{owner[0]} 已单独通过检查，多半是 {todo} 传给它的参数不对）"
            else:
                where = f"{owner[1]}（{owner[0]}）" if owner else f"{todo} 的代码"
            print(f"❌ {todo} 的可见检查：{where} 抛出 {type(error).__name__}: {error}")
            failures.append(error)
        else:
            if skipped:
                print(f"⚠️ {todo}：跳过可见检查——{skipped}")
            else:
                print(f"✅ {todo} 的可见检查通过（评分时还有更多隐藏检查）")
    if torch_module:
        torch_module.set_num_threads(threads)
    if failures:
        raise failures[0]


# %% [markdown]
# ### 2.1　一个带 KV cache 接口的极小 Transformer
#
# 下面的模型按 nanoGPT 的写法自底向上搭成：注意力 `CausalSelfAttention`、含 MLP 的 `TransformerBlock`、整个模型 `TinyCausalLM`，超参数放在 `TinyConfig` 里。权重用固定种子随机初始化（float32），没有训练过——我们只关心“缓存后的计算是否等于完整计算”，这与权重是否训练过无关。
#
# **接口约定**（后面所有代码都靠它）：
#
# ```python
# logits, past_kv = model(token_ids, past_kv=None)
# ```
#
# - `token_ids`：本次**新送入**的 token，一维 `LongTensor` 或 `list[int]`，至少一个；不支持 batch。
# - `past_kv`：之前所有 token 的 KV，`None` 表示从头开始。它是长度为 `n_layers` 的 tuple，每层一个 `(k, v)`，形状都是 `(n_heads, P, head_dim)`，`P` 是已有 token 数（`kv_length(past_kv)`）。
# - 返回的 `logits` 形状 `(T, vocab_size)`，**只**含这 `T` 个新 token；返回的 `past_kv` 覆盖到目前为止的全部 `P + T` 个 token。
# - 传入的 `past_kv` 不会被修改：新的 KV 由 `torch.cat` 拼成新张量。
#
# **为什么缓存后的计算与完整计算相等？因为因果性。** 第 `t` 个位置的 K、V 只取决于 token `0..t`（每一层都只看得到自己和前面的位置），与后面跟着什么 token 无关。所以两个 prompt 只要前 `h` 个 token 相同，它们前 `h` 个位置的 KV 就逐位相同，可以直接搬过来用；剩下的 token 拿着这份 KV 接着算，每个位置看到的 key/value 与完整计算时一模一样，结果自然相同（只差浮点运算顺序带来的 1e-6 量级误差）。这是 float32 下的结论：bf16 只有 8 位有效数字，命中路径与未命中路径的矩阵形状不同、kernel 的累加顺序也不同，舍入误差就可能让 logits 差出可见的量、甚至让贪心解码选出不同的 token。vLLM 和 SGLang 的 issue 里常有用户问“开了 prefix caching 输出就变了”，原因多半就是这个。
#
# 要让“接着算”真的等于完整计算，模型里有两件事必须做对：
#
# **1. 因果掩码按右下角对齐。** 有 `P` 个已缓存 token、再送入 `T` 个新 token 时，注意力分数是 `T × S` 的长方形（`S = P + T`）。第 `i` 个新 token 的绝对位置是 `P + i`，它应当看到 key `0 .. P+i`，也就是掩码的对角线要贴着**右下角**：`torch.ones(T, S).tril(diagonal=S - T)`。如果像没有缓存时那样从左上角画对角线（`tril(diagonal=0)`），第 `i` 个新 token 只能看到前 `i+1` 个 key，等于把它当成了位置 `i` 的 token——结果就错了。注意 PyTorch 的 `scaled_dot_product_attention(..., is_causal=True)` 在 `T ≠ S` 时正是左上角对齐，带 KV cache 时不能直接用它（要么显式传掩码，要么用 `torch.nn.attention.bias.causal_lower_right`）。
#
# 例：已缓存 `P = 3` 个 token，再送入 `T = 2` 个，`S = 5`（✓ 表示能看到这个 key）：
#
# | 新 token | 掩码 | key 0 | key 1 | key 2 | key 3 | key 4 |
# |---|---|:-:|:-:|:-:|:-:|:-:|
# | 第 0 个（绝对位置 3） | 右下角对齐（正确） | ✓ | ✓ | ✓ | ✓ | |
# | 第 1 个（绝对位置 4） | 右下角对齐（正确） | ✓ | ✓ | ✓ | ✓ | ✓ |
# | 第 0 个 | 左上角对齐（错误） | ✓ | | | | |
# | 第 1 个 | 左上角对齐（错误） | ✓ | ✓ | | | |
#
# **2. 位置是绝对位置。** 新 token 的位置编号是 `P + i`，不能在每次调用时从 0 重新数。本模型用学习式的绝对位置表 `wpe`，第 `p` 个位置加上 `wpe[p]`；模型从 `kv_length(past_kv)` 推出 `P`，所以调用者只要把正确的 `past_kv` 传进来，位置和掩码就都对了——反过来，传错了 `past_kv`，位置和掩码会一起错。

# %% nbgrader={"grade": false, "grade_id": "kv_tiny_model", "locked": true, "schema_version": 3, "solution": false, "task": false}
@dataclass
class TinyConfig:
    """极小 decoder-only Transformer 的超参数（float32，学习式绝对位置编码）。"""

    vocab_size: int = 64
    d_model: int = 32  # 宽度 d
    n_layers: int = 2  # 层数 L
    n_heads: int = 2
    max_positions: int = 256  # 绝对位置表的长度：已缓存 token 数 + 新 token 数不能超过它
    mlp_ratio: int = 4  # MLP 隐层宽度 = mlp_ratio * d_model

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_positions", "mlp_ratio"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"TinyConfig.{name} 必须是正整数，现在是 {value!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} 必须能被 n_heads={self.n_heads} 整除")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def kv_length(past_kv) -> int:
    """past_kv 覆盖的 token 数；None 表示还没有任何 token。"""
    return 0 if past_kv is None else past_kv[0][0].shape[1]


def as_token_list(token_ids) -> list:
    """把一维 LongTensor 或 int 序列统一成 list[int]：账本 PrefixCacheManager 按 list 比较。"""
    if isinstance(token_ids, torch.Tensor):
        if token_ids.dim() != 1:
            raise ValueError(f"token_ids 必须是一维的，现在形状是 {tuple(token_ids.shape)}")
        return [int(t) for t in token_ids.tolist()]
    return [int(t) for t in token_ids]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.scores_tap = nn.Identity()  # 测量点：什么也不做，2.4 节用 forward hook 在这里看注意力分数张量

    def forward(self, x, layer_past=None):
        # x: (T, d) 新 token 的隐状态；layer_past: None 或本层已缓存的 (k, v)，各 (nh, P, hs)
        T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)  # 各 (T, d)
        q, k, v = (t.view(T, self.n_heads, self.head_dim).transpose(0, 1) for t in (q, k, v))  # 各 (nh, T, hs)
        if layer_past is not None:
            k = torch.cat([layer_past[0], k], dim=1)  # (nh, S, hs)，S = P + T；cat 生成新张量，缓存不被改动
            v = torch.cat([layer_past[1], v], dim=1)
        S = k.shape[1]
        att = self.scores_tap((q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim))  # (nh, T, S)
        # 右下角对齐的因果掩码：第 i 个新 token 的绝对位置是 S - T + i，只能看到 key 0 .. S - T + i
        visible = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)  # (T, S)
        att = att.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, d)  # (nh, T, hs) -> (T, d)
        return self.proj(y), (k, v)


class TransformerBlock(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        hidden = config.mlp_ratio * config.d_model
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, hidden, bias=False), nn.GELU(), nn.Linear(hidden, config.d_model, bias=False)
        )

    def forward(self, x, layer_past=None):
        # x: (T, d)；pre-LN 残差结构
        attn_out, layer_kv = self.attn(self.ln_1(x), layer_past)
        x = x + attn_out
        x = x + self.mlp(self.ln_2(x))
        return x, layer_kv


class TinyCausalLM(nn.Module):
    """极小的 decoder-only Transformer，forward 接收并返回 KV cache。

    用 `seed` 生成固定的随机权重（float32）：同一个 config 和 seed 总得到同一个模型。
    """

    def __init__(self, config: TinyConfig, seed: int = 0):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.max_positions, config.d_model)  # 学习式绝对位置：位置 p 加 wpe[p]
        self.blocks = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # 权重标准差选得让 logits 和注意力分布都在 O(1) 量级：掩码或位置一旦出错，差异远大于浮点误差
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Embedding):
                    module.weight.normal_(0.0, 1.0, generator=generator)
                elif isinstance(module, nn.Linear):
                    module.weight.normal_(0.0, module.in_features**-0.5, generator=generator)
        self.eval()

    @torch.no_grad()
    def forward(self, token_ids, past_kv=None):
        """对新送入的 token 做一次前向。

        token_ids: 一维 LongTensor 或 list[int]，至少一个 token（不支持 batch）。
        past_kv:   None，或之前调用返回的 KV：长度 n_layers 的 tuple，每层 (k, v)，各 (n_heads, P, head_dim)。
        返回 (logits, past_kv)：logits 形状 (T, vocab_size)，只含这 T 个新 token；
        新的 past_kv 覆盖全部 P + T 个 token。传入的 past_kv 不会被修改。
        新 token 的绝对位置是 P .. P+T-1，因果掩码按右下角对齐。
        """
        idx = torch.as_tensor(token_ids, dtype=torch.long, device=self.wte.weight.device)
        if idx.dim() != 1 or idx.numel() == 0:
            raise ValueError("token_ids 必须是非空的一维序列")
        if past_kv is not None and len(past_kv) != len(self.blocks):
            raise ValueError(f"past_kv 应有 {len(self.blocks)} 层，现在有 {len(past_kv)} 层")
        past_len, T = kv_length(past_kv), idx.numel()
        if past_len + T > self.config.max_positions:
            raise ValueError(f"共 {past_len + T} 个位置，超过 max_positions={self.config.max_positions}")
        positions = torch.arange(past_len, past_len + T, device=idx.device)  # 绝对位置：接着已缓存的 token 往后数
        x = self.wte(idx) + self.wpe(positions)  # (T, d)
        new_kv = []
        for layer, block in enumerate(self.blocks):
            x, layer_kv = block(x, None if past_kv is None else past_kv[layer])
            new_kv.append(layer_kv)
        logits = self.lm_head(self.ln_f(x))  # (T, vocab_size)
        return logits, tuple(new_kv)


# %% [markdown]
# 先看看这个接口：完整算一遍 prompt，再拿它的 KV 解码一个新 token。解码出的 logits 与“把新 token 接在 prompt 后面从头完整算一遍”的最后一行相同——这就是因果性。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "kv_model_demo", "locked": true, "schema_version": 3, "solution": false, "task": false}
demo_model = TinyCausalLM(TinyConfig(), seed=0)
demo_prompt = [3, 14, 15, 9, 26, 5]
demo_logits, demo_kv = demo_model(demo_prompt)
print("prompt logits:", tuple(demo_logits.shape), "| 每层 k:", tuple(demo_kv[0][0].shape), "| kv_length:", kv_length(demo_kv))

step_logits, step_kv = demo_model([7], past_kv=demo_kv)  # 只送入 1 个新 token，位置 6 由 past_kv 推出
full_logits, _ = demo_model(demo_prompt + [7])  # 对照：7 个 token 从头完整算一遍
print("带 KV 解码 vs 完整前向，最大绝对误差:", f"{(step_logits[0] - full_logits[-1]).abs().max().item():.1e}")
print("传入的 demo_kv 没被改动:", kv_length(demo_kv) == len(demo_prompt))

T_demo, S_demo = 2, 5
print("右下角对齐的掩码 (T=2, S=5):\n", torch.ones(T_demo, S_demo, dtype=torch.int8).tril(diagonal=S_demo - T_demo))

# %% [markdown]
# ### 2.2　TODO 9：分块预填充
#
# 长 prompt 一次性送进模型时，每层的注意力分数是 `(n_heads, T, T)`，随 `T` 平方增长。分块预填充把 token 切成每块最多 `chunk_size` 个，依次送入；每一块都带上**前面所有块**的 KV，所以每个 token 看到的东西与一次性计算时完全相同，结果也相同，而每次调用的注意力分数只有 `(n_heads, c, 已有 token 数 + c)`。
#
# 实现 `chunked_prefill(model, token_ids, chunk_size, past_kv=None)`：
#
# - 按顺序把 `token_ids` 切成长度 `chunk_size` 的块，最后一块可以不满；`chunk_size` 比 prompt 还长时就只有一块。
# - 每块调用一次 `model(chunk, past_kv=...)`，并把**它返回的** `past_kv` 交给下一块。模型从 `past_kv` 的长度推出绝对位置和掩码的偏移，所以 KV 接力传对了，位置和掩码就都对了。
# - 传入的 `past_kv` 不是 `None` 时（比如命中的前缀），第一块就要接着它算。
# - 返回 `(logits, past_kv)`：`logits` 是各块 logits 按顺序拼接（`torch.cat`，`dim=0`），形状 `(len(token_ids), vocab_size)`；`past_kv` 是最后一块返回的 KV，覆盖传入的前缀和全部新 token。
#
# 常见错误：每块都从 `past_kv=None` 开始（位置从 0 重数、掩码没有偏移），每块都只带最初传入的 `past_kv`，只返回最后一块的 logits，漏掉不满的尾块。评分时会用随机 prompt、不能整除长度的 chunk、`chunk_size=1`、比 prompt 还长的 chunk、带前缀的 `past_kv` 来检查，并数一数模型被调用了几次、每次送入几个 token。

# %% nbgrader={"grade": false, "grade_id": "todo9_chunked_prefill", "locked": false, "schema_version": 3, "solution": true, "task": false}
def chunked_prefill(model, token_ids, chunk_size, past_kv=None):
    """把 token_ids 按 chunk_size 分块依次送入模型，每块都接着前面全部 token 的 KV 计算。

    model:      可调用对象，model(ids, past_kv=...) -> (logits, past_kv)，例如 TinyCausalLM。
    token_ids:  一维 LongTensor 或 list[int]，至少一个 token。
    chunk_size: 每块最多多少个 token（正整数）；最后一块可以不满。
    past_kv:    这些 token 之前已有的 KV（例如命中的前缀），None 表示从位置 0 开始；不会被修改。
    返回 (logits, past_kv)：logits 形状 (len(token_ids), vocab_size)，是各块 logits 按顺序的拼接，
    与一次性 model(token_ids, past_kv) 的结果相同；past_kv 覆盖传入的前缀和全部新 token。
    """
    if type(chunk_size) is not int or chunk_size <= 0:
        raise ValueError(f"chunk_size 必须是正整数，现在是 {chunk_size!r}")
    if len(token_ids) == 0:
        raise ValueError("token_ids 不能为空")
    ### BEGIN SOLUTION
    chunk_logits = []
    for start in range(0, len(token_ids), chunk_size):
        chunk = token_ids[start : start + chunk_size]
        logits, past_kv = model(chunk, past_kv=past_kv)  # 接力：下一块接着这一块返回的 KV 算
        chunk_logits.append(logits)
    return torch.cat(chunk_logits, dim=0), past_kv
    ### END SOLUTION


# %% [markdown]
# #### 提示：TODO 9
#
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开里面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 9 · 提示 1</summary>
#
# 模型怎么知道第二块的第一个 token 在哪个位置、能看到哪些 key？全靠你传给它的 `past_kv`。
#
# <details><summary>TODO 9 · 提示 2</summary>
#
# 每块调用一次模型，把**这一次返回的** `past_kv` 留下来交给下一次调用（第一次用调用者传进来的那个）；每块的 logits 收进一个列表，最后沿第 0 维拼起来，和最后一块返回的 `past_kv` 一起返回。
#
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "visible_todo9", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 运行此单元格检查 TODO 9：两条基本路径（无前缀、带前缀 past_kv），一秒内跑完；评分时还有 4 格隐藏检查。
def visible_check_todo9():
    model = TinyCausalLM(TinyConfig(), seed=1)
    prompt = [5, 17, 42, 8, 8, 30, 1, 63, 12, 7, 19, 2, 50]
    full_logits, _ = model(prompt)
    where = "TODO 9: chunked_prefill(model, 13 个 token, chunk_size=5)"
    result = chunked_prefill(model, prompt, 5)
    assert isinstance(result, tuple) and len(result) == 2, f"{where} 应返回 (logits, past_kv) 二元组，得到 {type(result).__name__}：函数末尾是否缺了 return？"
    logits, kv = result
    assert tuple(logits.shape) == (13, 64), f"{where} 的 logits 形状应为 (13, 64)（3 块的 logits 按顺序拼接），得到 {tuple(logits.shape)}"
    gap = (logits - full_logits).abs().max().item()
    assert torch.allclose(logits, full_logits, rtol=1e-4, atol=1e-5), f"{where} 的 logits 应与一次完整前向 model(prompt) 相同，最大误差 {gap:.1e}：每块要带上一块返回的 past_kv"
    assert kv_length(kv) == 13, f"{where} 返回的 past_kv 应覆盖 13 个 token，得到 {kv_length(kv)} 个"
    _, prefix_kv = model(prompt[:6])
    where = "TODO 9: chunked_prefill(model, 后 7 个 token, chunk_size=3, past_kv=前 6 个 token 的 KV)"
    result = chunked_prefill(model, prompt[6:], 3, past_kv=prefix_kv)
    assert isinstance(result, tuple) and len(result) == 2, f"{where} 应返回 (logits, past_kv) 二元组，得到 {type(result).__name__}：函数末尾是否缺了 return？"
    logits, kv = result
    assert tuple(logits.shape) == (7, 64), f"{where} 的 logits 形状应为 (7, 64)，得到 {tuple(logits.shape)}"
    gap = (logits - full_logits[6:]).abs().max().item()
    assert torch.allclose(logits, full_logits[6:], rtol=1e-4, atol=1e-5), f"{where} 的 logits 应等于完整前向的 logits[6:]，最大误差 {gap:.1e}：第一块要接着传入的 past_kv 算"
    assert kv_length(kv) == 13, f"{where} 返回的 past_kv 应覆盖前缀 6 + 新 token 7 = 13 个位置，得到 {kv_length(kv)} 个"
    assert kv_length(prefix_kv) == 6, f"{where} 不应修改传入的 past_kv：它原本覆盖 6 个 token，现在是 {kv_length(prefix_kv)} 个"


run_visible_checks([("TODO 9", visible_check_todo9)])


# %% [markdown]
# #### 自动评分单元格：TODO 9（共 15 分）
#
# 下面每格检查 TODO 9 的一个方面，分值写在第一行。你只能看到这一行注释；评分时每格运行自己的隐藏检查（参考模型、随机 prompt、多种 chunk 大小、带前缀的 past_kv），失败时的消息写明输入、期望值和实际得到的值。

# %% nbgrader={"grade": true, "grade_id": "test_todo9_chunks", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 9 · 分块（4 分）：按 chunk_size 依次切块送入模型：不满的尾块、chunk_size=1、chunk_size 比 prompt 还长
### BEGIN HIDDEN TESTS
#| check: todo9.py::check_chunks
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo9_relay", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
# TODO 9 · 接力（5 分）：每块带上一块返回的 past_kv，logits 与 KV 等于一次完整前向（多种 chunk 大小）
### BEGIN HIDDEN TESTS
#| check: todo9.py::check_relay
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo9_prefix", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 9 · 前缀（4 分）：传入已缓存前缀的 past_kv 时，第一块接着它算；结果覆盖前缀；不修改传入的 past_kv
### BEGIN HIDDEN TESTS
#| check: todo9.py::check_prefix
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo9_types", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 9 · 类型（2 分）：LongTensor 与 list 输入；返回 (logits, past_kv)，形状与层数正确
### BEGIN HIDDEN TESTS
#| check: todo9.py::check_types
### END HIDDEN TESTS

# %% [markdown]
# ### 2.3　TODO 10：带真实 KV 的前缀缓存
#
# 现在把第一部分的账本和真实 KV 接起来。`KVPrefixCache` 用组合的方式持有一个 `PrefixCacheManager`（`self.manager`，负责登记前缀、找最长命中），再用字典 `self.prefix_kv` 保存每个已登记前缀的 KV：键是 `tuple(前缀 token)`，值是恰好覆盖这个前缀的 `past_kv`。
#
# **`add_prefix(token_ids)`**：算出前缀的 KV（用 `chunked_prefill`，`chunk_size = self.block_size`），存进 `self.prefix_kv`，再在 `self.manager` 里登记。已经登记过的前缀什么也不做，不要重算。
#
# **`prefill(token_ids) -> (logits, past_kv, hit_len)`**：
#
# 1. 用 `self.manager.match_prefix` 找最长命中 `match_len`；命中的一定是某个登记过的完整前缀，它的 KV 就在 `self.prefix_kv[tuple(tokens[:match_len])]`。这里的 `tokens` 是方法开头 `as_token_list(token_ids)` 的结果：字典的键是普通 int 组成的 tuple，而 LongTensor 切片再转 tuple 得到的是一串 0 维张量，查不到（`KeyError`）。
# 2. **整个 prompt 都命中时，最后一个 token 仍要计算。** prefill 的目的之一是得到最后一个位置的 logits，下一个 token 要从它采样；KV 只存了 K 和 V，没有存 logits。所以这时取 `hit_len = len(prompt) - 1`，只复用前 `len - 1` 个位置的 KV。其余情况 `hit_len = match_len`。真实引擎同样不会跳过最后一个 token，但粒度不同：SGLang 把可复用前缀的上限设为 `input_len - 1`（`python/sglang/srt/managers/schedule_batch.py` 的 `Req`，注释是 “Need at least one token to compute logits”），页大小为 1 时恰好只重算一个 token；vLLM 把命中上限设为 `num_tokens - 1`，但只按整块命中（`vllm/v1/core/kv_cache_manager.py` 的 `get_computed_blocks`），它的注释写明：因为 `allocate_slots` 要求已计算的 token 数与块对齐，完整命中的 prompt 可能要重算整整一块，而不只是最后一个 token。
# 3. 取出缓存的 KV 的前 `hit_len` 个位置（`k[:, :hit_len]`），用 `chunked_prefill(self.model, suffix, self.block_size, past_kv=...)` 只算 `hit_len` 之后的 suffix。
# 4. 返回 `(logits, past_kv, hit_len)`：`logits` **只含算出来的 suffix token**，形状 `(len(prompt) - hit_len, vocab_size)`，第 `j` 行是位置 `hit_len + j` 的 logits，等于完整前向 logits 的 `[hit_len:]`；`past_kv` 覆盖整个 prompt；`hit_len` 是复用的 token 数（`int`）。
#
# **不能改动缓存。** 缓存里的 KV 要被以后的许多请求复用：`prefill` 只能读它，不能把切短的或加长的 KV 写回 `self.prefix_kv`，也不能原地修改其中的张量。
#
# 评分时会把 `model` 包一层计数器：`prefill` 送入模型的 token 数必须正好是 `len(prompt) - hit_len`（重算已缓存的前缀会被发现），每次最多 `block_size` 个；还会登记多个前缀、检查无命中和完整命中，并把同一个 prompt prefill 两次、对比结果，确认缓存没被改坏。

# %% nbgrader={"grade": false, "grade_id": "todo10_kv_prefix_cache", "locked": false, "schema_version": 3, "solution": true, "task": false}
class KVPrefixCache:
    """在 PrefixCacheManager 的账本之上保存真实的前缀 KV，prefill 时复用最长命中前缀、只算 suffix。"""

    def __init__(self, model, block_size: int):
        self.model = model
        self.block_size = block_size
        self.manager = PrefixCacheManager(block_size)  # 账本：登记前缀、找最长命中
        self.prefix_kv = {}  # tuple(前缀 token) -> 恰好覆盖该前缀的 past_kv；只读，prefill 不能改它

    def add_prefix(self, token_ids) -> None:
        """算出前缀的 KV 存进 self.prefix_kv，并在 self.manager 里登记；已登记的前缀不重算。"""
        tokens = as_token_list(token_ids)
        if not tokens:
            raise ValueError("前缀不能为空")
        ### BEGIN SOLUTION
        key = tuple(tokens)
        if key not in self.prefix_kv:  # 已登记的前缀不重算
            _, self.prefix_kv[key] = chunked_prefill(self.model, tokens, self.block_size)
            self.manager.add_prefix(tokens)  # KV 算好了再登记：账本里有的前缀一定有 KV
        ### END SOLUTION

    def prefill(self, token_ids):
        """复用最长命中前缀的 KV，只计算其后的 suffix（按 block_size 分块）。

        返回 (logits, past_kv, hit_len)：
        hit_len: 复用的 token 数（int）。等于 self.manager.match_prefix 的结果；整个 prompt
                 都命中时为 len(prompt) - 1，最后一个 token 仍要计算，才有它的 logits。
        logits:  只含算出来的 suffix token，形状 (len(prompt) - hit_len, vocab_size)，
                 等于完整前向 logits 的 [hit_len:]。
        past_kv: 覆盖整个 prompt 的 KV。self.prefix_kv 里缓存的 KV 不会被修改。
        """
        tokens = as_token_list(token_ids)
        if not tokens:
            raise ValueError("prompt 不能为空")
        ### BEGIN SOLUTION
        match_len = self.manager.match_prefix(tokens)
        hit_len = min(match_len, len(tokens) - 1)  # 完整命中：仍要算最后一个 token 才有它的 logits
        past_kv = None
        if hit_len > 0:
            cached = self.prefix_kv[tuple(tokens[:match_len])]
            past_kv = tuple((k[:, :hit_len], v[:, :hit_len]) for k, v in cached)  # 切片是新的视图，缓存本身不动
        logits, past_kv = chunked_prefill(self.model, tokens[hit_len:], self.block_size, past_kv=past_kv)
        return logits, past_kv, hit_len
        ### END SOLUTION


# %% [markdown]
# #### 提示：TODO 10
#
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开里面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 10 · add_prefix · 提示 1</summary>
#
# `add_prefix` 要做两件事：把前缀的 KV 存进字典，在账本里登记。先做哪件？怎样认出已经登记过的前缀？
#
# <details><summary>TODO 10 · add_prefix · 提示 2</summary>
#
# 用 `tuple(tokens)` 作键；键不在字典里时才用 `chunked_prefill`（`chunk_size = self.block_size`）算出 KV 存进去，然后再调用账本的 `add_prefix`。
#
# </details>
# </details>
#
# <details><summary>TODO 10 · prefill · 提示 1</summary>
#
# 整个 prompt 都命中时，还剩几个 token 要送进模型？最后一个位置的 logits 从哪里来？
#
# <details><summary>TODO 10 · prefill · 提示 2</summary>
#
# `hit_len` 取账本的命中长度与 `len(tokens) - 1` 中较小的一个。字典的键是命中的那个**完整**前缀（长度是账本的命中长度，不是 `hit_len`），用 `tokens` 而不是 `token_ids` 切；取出的 KV 每层只留前 `hit_len` 个位置（切片是新的视图，不写回字典），再把 `hit_len` 之后的 token 交给 `chunked_prefill` 接着算。
#
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "visible_todo10", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 运行此单元格检查 TODO 10：命中一个登记过的前缀、完整命中，一秒内跑完；评分时还有 5 格隐藏检查。
def visible_check_todo10():
    """KVPrefixCache 用到第一部分的账本和 TODO 9：它们还没通过时跳过，免得把别的 TODO 的错记在 TODO 10 头上。"""
    model = TinyCausalLM(TinyConfig(), seed=2)
    try:
        manager = PrefixCacheManager(block_size=4)
        manager.add_prefix([1, 2, 3])
        ledger_ok = manager.match_prefix([1, 2, 3, 4]) == 3 and manager.match_prefix([9, 9]) == 0
    except Exception:  # noqa: BLE001  (前置检查：任何错误都只说明账本还没好)
        ledger_ok = False
    if not ledger_ok:
        return "KVPrefixCache 用到第一部分的 PrefixCacheManager（add_prefix / match_prefix，TODO 3–4），它们还没通过上面的检查"
    try:
        full = model([7, 8, 9, 10, 11])[0]
        chunked_ok = torch.allclose(chunked_prefill(model, [7, 8, 9, 10, 11], 2)[0], full, rtol=1e-4, atol=1e-5)
        tail = chunked_prefill(model, [9, 10, 11], 2, past_kv=model([7, 8])[1])[0]
        chunked_ok = chunked_ok and torch.allclose(tail, full[2:], rtol=1e-4, atol=1e-5)
    except Exception:  # noqa: BLE001
        chunked_ok = False
    if not chunked_ok:
        return "KVPrefixCache 用到 chunked_prefill（TODO 9），它还没通过 TODO 9 的检查"
    cache = KVPrefixCache(model, block_size=4)
    cache.add_prefix([1, 2, 3, 4, 5, 6])
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    full_logits, _ = model(prompt)
    where = "TODO 10: add_prefix([1, 2, 3, 4, 5, 6]) 之后 prefill([1, 2, 3, 4, 5, 6, 7, 8, 9])"
    logits, kv, hit_len = cache.prefill(prompt)
    assert hit_len == 6, f"{where} 的 hit_len 应为 6，得到 {hit_len!r}"
    assert tuple(logits.shape) == (3, 64), f"{where} 的 logits 只含算出来的 3 个 suffix token，形状应为 (3, 64)，得到 {tuple(logits.shape)}"
    gap = (logits - full_logits[6:]).abs().max().item()
    assert torch.allclose(logits, full_logits[6:], rtol=1e-4, atol=1e-5), f"{where} 的 logits 应等于完整前向的 logits[6:]，最大误差 {gap:.1e}"
    assert kv_length(kv) == 9, f"{where} 返回的 past_kv 应覆盖整个 prompt 的 9 个 token，得到 {kv_length(kv)} 个"
    where = "TODO 10: prefill(torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9]))（LongTensor 输入）"
    try:
        tensor_result = cache.prefill(torch.tensor(prompt))
    except KeyError as error:
        raise AssertionError(f"{where} 抛出 KeyError: {error}：self.prefix_kv 的键是普通 int 的 tuple，要用 as_token_list 之后的 tokens 切片做键，不是 token_ids") from None
    assert tensor_result[2] == 6, f"{where} 的 hit_len 应为 6（与 list 输入相同），得到 {tensor_result[2]!r}"
    where = "TODO 10: prefill([1, 2, 3, 4, 5, 6])（整个 prompt 都已缓存）"
    try:
        logits, kv, hit_len = cache.prefill([1, 2, 3, 4, 5, 6])
    except ValueError as error:
        raise AssertionError(f"{where} 抛出 ValueError: {error}：整个 prompt 都命中时 suffix 为空，而 chunked_prefill 不接受空输入。hit_len 应取 len(prompt) - 1，最后一个 token 仍要计算") from None
    assert hit_len == 5, f"{where} 的 hit_len 应为 len(prompt) - 1 = 5（最后一个 token 仍要计算，才有它的 logits），得到 {hit_len!r}"
    assert torch.allclose(logits, full_logits[5:6], rtol=1e-4, atol=1e-5), f"{where} 的 logits 应等于完整前向的 logits[5:6]"
    return None


run_visible_checks([("TODO 10", visible_check_todo10)])


# %% [markdown]
# #### 自动评分单元格：TODO 10（共 15 分）
#
# 评分时这几格把你的 `chunked_prefill` 和 `PrefixCacheManager` 换成参考实现（TODO 1–9 的错误不连累 TODO 10），再用一个计数的参考模型检查：送入模型的 token 数、分块大小、与完整前向的一致性，以及缓存是否被改动。

# %% nbgrader={"grade": true, "grade_id": "test_todo10_miss", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 10 · 未命中（2 分）：空缓存、前缀只出现在 prompt 中间：hit_len = 0，结果等于完整前向
### BEGIN HIDDEN TESTS
#| check: todo10.py::check_miss
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo10_hit", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# TODO 10 · 命中（4 分）：复用最长命中前缀的 KV，只把 suffix 送入模型，logits 与 KV 等于完整前向
### BEGIN HIDDEN TESTS
#| check: todo10.py::check_hit
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo10_full_hit", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 10 · 完整命中（3 分）：prompt 恰好是登记过的前缀：hit_len = len(prompt) - 1，最后一个 token 仍要计算
### BEGIN HIDDEN TESTS
#| check: todo10.py::check_full_hit
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo10_cache_unchanged", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 10 · 缓存只读（3 分）：prefill 不改动 self.prefix_kv 里的 KV；同一个 prompt 两次结果相同
### BEGIN HIDDEN TESTS
#| check: todo10.py::check_cache_unchanged
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo10_manager_and_chunks", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 10 · 账本与分块（3 分）：命中长度来自 self.manager；前缀与 suffix 都按 block_size 分块；重复登记不重算
### BEGIN HIDDEN TESTS
#| check: todo10.py::check_manager_and_chunks
### END HIDDEN TESTS

# %% [markdown] tags=["solutions-only"]
# #### 参考答案解析（TODO 9–10）
#
# **TODO 9　分块预填充。** 循环 `for start in range(0, len(token_ids), chunk_size)`，每块 `token_ids[start : start + chunk_size]`（切片越界自动截断，尾块和“chunk 比 prompt 长”都不用特判），调用 `logits, past_kv = model(chunk, past_kv=past_kv)`，最后 `torch.cat` 各块 logits。关键只有一处：**把上一块返回的 `past_kv` 交给下一块**，第一块用调用者传进来的 `past_kv`。模型从 `past_kv` 的长度推出位置偏移和掩码偏移；传 `None` 就等于说“我在位置 0”，位置会从 0 重数、掩码按左上角对齐，后面的块看不到前面的 token；一直传最初的 `past_kv`，每块就只看得到前缀。
#
# **TODO 10　带真实 KV 的前缀缓存。** `add_prefix`：已登记就返回；否则 `chunked_prefill` 算出 KV 存进 `self.prefix_kv[tuple(tokens)]`，再 `self.manager.add_prefix`——先有 KV 再登记，账本里出现的前缀就一定能取到 KV。`prefill`：`match_len = self.manager.match_prefix(tokens)`，`hit_len = min(match_len, len(tokens) - 1)`；命中时从 `self.prefix_kv[tuple(tokens[:match_len])]` 取出 KV，每层切 `k[:, :hit_len]`（完整命中时少一个位置，否则就是整条），再 `chunked_prefill(self.model, tokens[hit_len:], self.block_size, past_kv=...)`。切片是新的视图、`torch.cat` 生成新张量，缓存条目本身从不被写。常见错误：完整命中时 `hit_len = match_len`（suffix 为空，没有 logits）；用 `tokens[:hit_len]` 当键（完整命中时这个键不存在）；把切短的 KV 写回缓存（之后命中同一前缀的请求会少一个位置，位置错位）；命中后仍把整个 prompt 送进模型。
#
# 真实系统多走一步：vLLM 在 prefill 时顺手把算好的每个满块登记进缓存，`add_prefix` 这一步就省了；SGLang 用基数树保存前缀，命中可以停在任意 token 上，而不只是“登记过的完整前缀”。

# %% [markdown]
# ### 2.4　代价模型：命中 h 能省多少？
#
# 设模型有 `L` 层、宽度 `d`，`N` 个非嵌入参数。这里把 `lm_head` 也算进 `N`，因为本章的小模型对送入的每个 token 都算 logits。真实引擎不这样做：每个请求每一步只为它最后一个被调度的 token 算 logits（vLLM 在 `vllm/v1/worker/gpu_model_runner.py` 里只把每个请求最后一个位置的隐状态送进 `lm_head`），不是最后一块的 prefill 块一个 logits 也不产生。所以把这个模型套到真实模型上时，`N` 不含 `lm_head`。prefill `T` 个 token 的浮点运算量：
#
# - **线性层：** 每个 token 过一遍全部权重，约 `2N` 次运算，合计 `2N·T`。
# - **注意力：** 位置 `t` 的 query 要和 `t + 1` 个 key 做点积、再对同样多个 value 加权，每层约 `4·d·t` 次运算；对 `t = 0..T-1` 求和，`L` 层合计约 `2·L·d·T²`。
#
# 命中前 `hT` 个 token 后，只算位置 `hT..T-1`：线性层变成 `2N·(1−h)·T`；注意力仍要看全部前缀，求和区间变成 `[hT, T)`，得到 `2·L·d·T²·(1−h²)`。两者之比就是加速比的代价模型：
#
# $$S(h, T) = \frac{2NT + 2LdT^2}{2NT(1-h) + 2LdT^2(1-h^2)} = \frac{N + L\,d\,T}{N(1-h) + L\,d\,T\,(1-h^2)}$$
#
# 读这个式子：决定一切的是线性层一项 `N` 和注意力一项 `L·d·T` 谁大，两者在 $T^* = N / (L\,d)$ 处相等。`T` 远小于 `T*` 时注意力可以忽略，`S ≈ 1/(1−h)`，和 `reuse_ratio` 的直觉一致；`T` 远大于 `T*` 时注意力占主导，`S → 1/(1−h²)`：命中 90% 时这个极限约为 5.3 倍，因为没命中的那 10% 恰好是最贵的位置，它们要看的前缀最长。`T = T*` 时 `S(0.9) = 2 / 0.29 ≈ 6.9`。
#
# 这个极限要很长的 prompt 才接近。用上式算命中 90% 时的 `S(0.9, T)`：
#
# | 模型 | `N` | `L·d` | `T* = N/(L·d)` | `S(0.9, T)` |
# |---|---:|---:|---:|---|
# | 下面实测用的小模型（`d = 128`、`L = 2`，含 `lm_head`） | 402,688 | 256 | 约 1,600 | `T = 512`：8.2；2,048：6.6；8,192：5.7 |
# | 8B 模型（Llama-3-8B 的形状：`L = 32`、`d = 4096`，不含嵌入和 `lm_head`） | 约 6.98 × 10⁹ | 131,072 | 约 53,000 | `T = 2,048`：9.7；4,096：9.4；32k：7.5；128k：6.1 |
#
# 所以对一个 8B 模型、几千 token 的 prompt，命中 90% 在运算量上仍接近 10 倍；“只剩约 5.3 倍”要到远超 `T*` 的长上下文才接近。token 级的 `reuse_ratio` 不等于时间的节省比例，差多少取决于 `T` 与 `T*` 之比。还有一点是这个只数浮点运算的模型看不到的：在 GPU 上，一段短 suffix 的前向主要花在把全部权重从显存读一遍上（受带宽限制，而不是受算力限制），少算的运算并不按比例变成少花的时间，实测加速比会低于 `S`。
#
# 两点说明：（1）我们的注意力先算完整的 `T × S` 分数再掩码，被掩掉的上三角也算了；下面的计时里，基线（空缓存，`h = 0`）与命中路径都走 `chunked_prefill`、按 `block_size` 分块，被白算的只剩每块对角线上的小三角，约多出 `block_size / T` 的注意力运算，与代价模型的假设基本一致。（2）代价模型只数浮点运算：调用开销、KV 拼接（`torch.cat` 每块复制一次已有 KV）和内存带宽都不在里面，suffix 越短，这些固定开销的占比越大，实测/模型 的比值就越低。
#
# 下面的单元格先定义测量用的工具函数（最后的 GPU 实验也用它们），再在 CPU 上实测。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "kv_measure_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def time_prefill(fn, repeats=5, warmup=1, synchronize=None) -> float:
    """先不计时地运行 fn() warmup 次，再计时 repeats 次，返回秒数的中位数。GPU 上把 torch.cuda.synchronize 传给 synchronize。"""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        if synchronize is not None:
            synchronize()
        start = time.perf_counter()
        fn()
        if synchronize is not None:
            synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def non_embedding_params(model) -> int:
    """代价模型里的 N：除词嵌入 wte 和位置表 wpe 之外的参数个数（lm_head 计入）。"""
    embeddings = {id(model.wte.weight), id(model.wpe.weight)}
    return sum(p.numel() for p in model.parameters() if id(p) not in embeddings)


def cost_model_speedup(hit_ratio, num_tokens, num_params, n_layers, d_model) -> float:
    """S(h, T) = (N + L·d·T) / (N·(1−h) + L·d·T·(1−h²))：完整 prefill 与命中 h 后 prefill 的运算量之比。"""
    h, lin, att = hit_ratio, num_params, n_layers * d_model * num_tokens
    return (lin + att) / (lin * (1 - h) + att * (1 - h * h))


def attention_peak_bytes(model, run) -> int:
    """运行 run()，返回其间出现过的最大的一个注意力分数张量 (n_heads, T, S) 的字节数。

    量法：在每层的 scores_tap 上挂 forward hook，记下经过它的张量大小，结束后取下 hook。
    它量的是“分数张量有多大”，不是分配器的总峰值（掩码、softmax 输出、KV 等另算）。
    """
    peak = 0

    def record(module, inputs, output):
        nonlocal peak
        peak = max(peak, output.numel() * output.element_size())

    hooks = [m.scores_tap.register_forward_hook(record) for m in model.modules() if isinstance(m, CausalSelfAttention)]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return peak


def analytic_attention_peak_bytes(config, num_tokens, chunk_size=None, past_len=0, bytes_per_element=4) -> int:
    """分块预填充时最大的注意力分数张量的字节数（chunk_size=None 表示一次性）。

    第 j 块有 c_j 个 query、要看 past_len + (第 j 块末尾位置) 个 key，分数张量 n_heads · c_j · keys 个元素；
    满块里最后一块最大，不满的尾块看的 key 最多，两者取大。
    """
    chunk = num_tokens if chunk_size is None else min(chunk_size, num_tokens)
    full_chunks, tail = divmod(num_tokens, chunk)
    largest = chunk * (past_len + full_chunks * chunk)
    if tail:
        largest = max(largest, tail * (past_len + num_tokens))
    return config.n_heads * largest * bytes_per_element


def kv_cache_bytes(config, num_tokens, bytes_per_element=4) -> int:
    """num_tokens 个 token 的 KV cache 字节数：每层 K、V 各 num_tokens × d_model 个元素。"""
    return 2 * config.n_layers * num_tokens * config.d_model * bytes_per_element


def random_prompt(num_tokens, vocab_size, seed=0) -> list:
    """固定种子的随机 prompt（list[int]）。"""
    draw = random.Random(seed).randrange
    return [draw(vocab_size) for _ in range(num_tokens)]


def check_chunked_prefill(model, prompt, chunk_size, reference=None):
    """测量前的核对：chunked_prefill 的 logits 必须等于一次性前向（reference），否则指出 TODO 9。返回 logits。"""
    if reference is None:
        reference = model(prompt)[0]
    logits = chunked_prefill(model, prompt, chunk_size)
    if not (isinstance(logits, tuple) and len(logits) == 2):
        raise RuntimeError(f"测量前的核对：chunked_prefill 应返回 (logits, past_kv)，得到 {type(logits).__name__}。回到 TODO 9 检查它的 return")
    logits = logits[0]
    if tuple(logits.shape) != tuple(reference.shape) or not torch.allclose(logits, reference, rtol=1e-4, atol=1e-4):
        raise RuntimeError(
            f"测量前的核对：chunked_prefill(model, {len(prompt)} 个 token, chunk_size={chunk_size}) 的 logits 与一次性前向不同"
            f"（形状 {tuple(logits.shape)}，应为 {tuple(reference.shape)}）。回到 TODO 9（chunked_prefill）检查：每块要带上一块返回的 past_kv"
        )
    return logits


def measure_cached_speedup(model, num_tokens, hit_ratios, block_size, repeats=5, seed=0, synchronize=None) -> list:
    """同一个随机 prompt：空缓存（每个 token 都算）与缓存了前 round(h·T) 个 token 时 prefill 的耗时之比。

    两条路径都用 KVPrefixCache.prefill（按 block_size 分块）。计时交错进行：每一轮把每个 h 的基线与命中路径
    各跑一次，机器负载的漂移落在所有行上。每行给出各轮“基线耗时 / 命中耗时”的中位数（measured）和
    最小值–最大值（spread_lo、spread_hi）。h = 0 时两条路径做同一件事，它的范围就是噪声。返回每个 h 一行的 dict。
    """
    prompt = random_prompt(num_tokens, model.config.vocab_size, seed)
    num_params, config = non_embedding_params(model), model.config
    reference = model(prompt)[0]
    check_chunked_prefill(model, prompt, block_size, reference)  # TODO 9 先单独核对，错了就指名 TODO 9
    baseline = KVPrefixCache(model, block_size)
    paths = []
    for hit_ratio in hit_ratios:
        cache = KVPrefixCache(model, block_size)
        if round(hit_ratio * num_tokens) > 0:
            cache.add_prefix(prompt[: round(hit_ratio * num_tokens)])
        result = cache.prefill(prompt)  # 顺带预热；计时之前先核对结果
        expected_hit = min(round(hit_ratio * num_tokens), num_tokens - 1)
        ok = isinstance(result, tuple) and len(result) == 3
        if ok:
            logits, _, hit_len = result
            ok = hit_len == expected_hit and tuple(logits.shape) == tuple(reference[expected_hit:].shape)
            ok = ok and torch.allclose(logits, reference[expected_hit:], rtol=1e-4, atol=1e-4)
        if not ok:
            raise RuntimeError(
                f"测量前的核对：缓存了前 {round(hit_ratio * num_tokens)} 个 token 时，prefill 应返回 (logits, past_kv, hit_len)，"
                f"命中 {expected_hit} 个、logits 等于完整前向的 logits[hit_len:]，实际不符。回到 TODO 10（KVPrefixCache.prefill）检查"
            )
        paths.append((hit_ratio, expected_hit, cache))
    baseline.prefill(prompt)  # 预热
    full = [[] for _ in paths]
    cached = [[] for _ in paths]
    for _ in range(repeats):  # 交错：每一轮每个 h 各测一次
        for i, (_, _, cache) in enumerate(paths):
            full[i].append(time_prefill(lambda: baseline.prefill(prompt), repeats=1, warmup=0, synchronize=synchronize))
            cached[i].append(time_prefill(lambda cache=cache: cache.prefill(prompt), repeats=1, warmup=0, synchronize=synchronize))
    rows = []
    for i, (hit_ratio, hit_len, _) in enumerate(paths):
        ratios = [f / c for f, c in zip(full[i], cached[i])]
        measured = statistics.median(ratios)
        predicted = cost_model_speedup(hit_len / num_tokens, num_tokens, num_params, config.n_layers, config.d_model)
        rows.append({
            "h": hit_ratio, "hit_len": hit_len, "full_ms": 1e3 * statistics.median(full[i]), "cached_ms": 1e3 * statistics.median(cached[i]),
            "measured": measured, "spread_lo": min(ratios), "spread_hi": max(ratios), "model": predicted, "ratio": measured / predicted,
        })
    return rows


def speedup_verdicts(rows) -> list:
    """每个 h > 0 的行一句话：代价模型 S(h,T) 落在这一行的比值范围之内、之上还是之下；范围窄于 h = 0 的噪声时才下结论。"""
    noise = next((r for r in rows if r["hit_len"] == 0), None)
    width = (noise["spread_hi"] - noise["spread_lo"]) if noise else 0.0
    lines = []
    for r in rows:
        if r["hit_len"] == 0:
            continue
        lo, hi = r["spread_lo"], r["spread_hi"]
        if lo <= r["model"] <= hi:
            verdict = "代价模型落在实测范围之内：在这次的噪声下与模型一致"
        elif hi < r["model"]:
            verdict = "整段范围都低于代价模型：比模型慢"
        else:
            verdict = "整段范围都高于代价模型：比模型快"
        if noise and (hi - lo) / max(r["measured"], 1e-12) > width / max(noise["measured"], 1e-12) * 2:
            verdict += "（这一行的范围比 h = 0 的噪声宽得多，结论要打折扣）"
        lines.append(f"h = {r['h']:.2f}：实测 {lo:.2f}–{hi:.2f}，模型 {r['model']:.2f}，1/(1−h) = {1 / (1 - r['h']):.2f}；{verdict}")
    return lines


def measure_attention_peaks(model, num_tokens, chunk_sizes, seed=0) -> list:
    """一次性（chunk_size=None）与分块预填充的最大注意力分数张量：hook 看到的与解析值并排，每个 chunk_size 一行。

    这是形状检查：张量的形状由我们的代码决定，比值 1.000 说明 chunked_prefill 按 chunk_size 分了块。
    测量前先核对每种分块的 logits 等于一次性前向，不同就指出 TODO 9。
    """
    prompt = random_prompt(num_tokens, model.config.vocab_size, seed)
    reference = model(prompt)[0]
    rows = []
    for chunk_size in chunk_sizes:
        if chunk_size is None:
            measured = attention_peak_bytes(model, lambda: model(prompt))
        else:
            check_chunked_prefill(model, prompt, chunk_size, reference)
            measured = attention_peak_bytes(model, lambda size=chunk_size: chunked_prefill(model, prompt, size))
        analytic = analytic_attention_peak_bytes(model.config, num_tokens, chunk_size)
        rows.append({"chunk": "一次性" if chunk_size is None else chunk_size, "measured_kib": measured / 1024, "analytic_kib": analytic / 1024, "ratio": measured / analytic})
    one_shot = analytic_attention_peak_bytes(model.config, num_tokens)
    for row in rows:
        row["vs_one_shot"] = row["analytic_kib"] * 1024 / one_shot
        row["kv_kib"] = kv_cache_bytes(model.config, num_tokens) / 1024
    return rows


def format_table(rows, columns) -> str:
    """rows: dict 的列表；columns: (键, 表头, 格式) 的列表，例如 ("h", "命中率 h", "{:.2f}")；返回 Markdown 表格。"""
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt.format(row[key]) for key, _, fmt in columns) + " |")
    return "\n".join(lines)


SPEEDUP_COLUMNS = [
    ("h", "命中率 h", "{:.2f}"), ("hit_len", "复用 token", "{}"), ("full_ms", "完整 prefill (ms)", "{:.2f}"),
    ("cached_ms", "命中后 prefill (ms)", "{:.2f}"), ("measured", "实测加速比（中位数）", "{:.2f}"), ("spread_lo", "各轮最小", "{:.2f}"),
    ("spread_hi", "各轮最大", "{:.2f}"), ("model", "模型 S(h,T)", "{:.2f}"), ("ratio", "实测/模型", "{:.2f}"),
]
MEMORY_COLUMNS = [
    ("chunk", "chunk_size", "{}"), ("measured_kib", "hook 看到的最大分数张量 (KiB)", "{:.0f}"), ("analytic_kib", "解析值 (KiB)", "{:.0f}"),
    ("ratio", "hook/解析（形状检查）", "{:.3f}"), ("vs_one_shot", "相对一次性", "{:.3f}"), ("kv_kib", "KV cache (KiB，不变)", "{:.0f}"),
]

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "kv_measure_speedup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 实测：命中率 h 与 prefill 耗时（CPU、float32、单个 prompt；约十秒）
speed_config = TinyConfig(vocab_size=64, d_model=128, n_layers=2, n_heads=4, max_positions=512)
speed_model = TinyCausalLM(speed_config, seed=0)
speed_threads = torch.get_num_threads()
torch.set_num_threads(1)  # 单线程计时：小矩阵上多线程的同步开销、机器上其他进程的干扰都会让数字大幅抖动
try:
    speed_rows = measure_cached_speedup(speed_model, num_tokens=512, hit_ratios=(0, 0.25, 0.5, 0.75, 0.9, 0.95), block_size=64, repeats=21)
except NotImplementedError:
    speed_rows = []
    print("请先完成 TODO 9 和 TODO 10（以及第一部分的 TODO），再运行本测量。")
except RuntimeError as error:
    if not str(error).startswith("测量前的核对"):
        raise
    raise RuntimeError(str(error)) from None
except (ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
    raise RuntimeError(
        f"测量没能跑完（{type(error).__name__}: {error}）。它用到 KVPrefixCache（TODO 10）和 chunked_prefill（TODO 9）："
        "回到这两个 TODO，先让它们的可见检查通过"
    ) from None
finally:
    torch.set_num_threads(speed_threads)
if speed_rows:
    print(f"T = 512，d = 128，L = 2，N = {non_embedding_params(speed_model):,}，block_size = 64，单线程；21 轮交错计时，每轮每个 h 各测一次")
    print(format_table(speed_rows, SPEEDUP_COLUMNS))
    noise = speed_rows[0]
    print(f"\nh = 0 这一行两边做的是同一件事：它的比值在 {noise['spread_lo']:.2f}–{noise['spread_hi']:.2f} 之间，这就是这次测量的噪声。")
    print("\n".join(speedup_verdicts(speed_rows)))
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        hs = [r["h"] for r in speed_rows]
        ax.fill_between(hs, [r["spread_lo"] for r in speed_rows], [r["spread_hi"] for r in speed_rows], alpha=0.25, label="measured, min-max of 21 rounds")
        ax.plot(hs, [r["measured"] for r in speed_rows], "o-", label="measured, median")
        ax.plot(hs, [r["model"] for r in speed_rows], "s--", label="cost model S(h,T)")
        ax.set_xlabel("hit ratio h")
        ax.set_ylabel("prefill speedup")
        ax.set_title("cached vs full prefill, T=512 (CPU)")
        ax.legend()
        plt.show()

# %% [markdown]
# ### 分块预填充省下了什么，没省下什么
#
# 一次性预填充 `T` 个 token 时，每层的注意力分数张量是 `(n_heads, T, T)`，随 `T` 平方增长；按 `c` 个 token 一块送入时，第 `j` 块的分数张量是 `(n_heads, c, 已有 token + c)`，最大的一块约 `n_heads · c · T`。所以注意力的工作集从 `O(T²)` 降到 `O(c·T)`，MLP 的中间激活也从 `T × 4d` 降到 `c × 4d`。
#
# **这个 `O(T²) → O(c·T)` 只对本章这种朴素注意力成立**：它把分数张量整个算出来放在内存里。用 FlashAttention（第 20 章）时，分数按小块在片上算完就丢，从不完整写进显存，一次性 prefill 的注意力本来就只要 `O(T)` 的额外内存。那时分块限制的主要是线性层和 MLP 的激活（`c × 4d` 而不是 `T × 4d`），也就是一步里送进模型的 token 数。vLLM 正是按这个数预留激活内存：启动时用 `max_num_batched_tokens` 个 token 的假 batch 跑一遍前向（`vllm/v1/worker/gpu_model_runner.py` 的 `profile_run`），量出峰值，剩下的显存才分给 KV cache。
#
# **没省下的：**
#
# - **KV cache 本身。** prefill 结束时 `T` 个 token 的 K、V 一个不少：`2 · L · T · d` 个元素，和分不分块无关。下表最后一列就是它。
# - **运算量。** 每个 token 仍要看它前面的全部 token，总 FLOPs 不变（我们的实现把掩掉的部分也算了，分块后白算的反而更少）。
# - **时间。** 块越小，调用次数越多；每块都要把已有 KV 重新读一遍，朴素的连续 KV（`torch.cat`）还要每块复制一遍。分块换来的是峰值内存和调度的灵活性：serving 系统把一个长 prompt 拆开，让正在解码的请求不必等整段 prefill 做完。两个引擎的做法不同，这决定了 decode 会不会停顿：vLLM v1 在**同一步**里放 decode 和 prefill 块，先排 decode，剩下的 token 预算再给 prefill 块（`vllm/v1/core/sched/scheduler.py`；Sarathi-Serve 的 stall-free batching 也是这样）；SGLang 默认“能做 prefill 就先做 prefill”，prefill 和 decode 分成不同的前向（`python/sglang/srt/managers/scheduler.py` 的 `get_next_batch_to_run`），只有打开 `--enable-mixed-chunk` 时才把 decode 混进 prefill 块所在的那一步。这一点这里没有测。
#
# 下表是一次**形状检查**，不是内存测量：`scores_tap` 上的 hook 记下经过它的最大一个分数张量的字节数，而这个张量的形状是我们的代码自己定的，所以“hook / 解析”等于 1.000 是必然的，它只说明 `chunked_prefill` 真的按 `chunk_size` 把 token 分块送进了模型（送错了块，这一列就不是 1）。测量前，单元格先核对每种分块的 logits 与一次性前向相同，不同就指出 TODO 9。分配器的总峰值（掩码、softmax 的输出、KV 拼接也要内存）要用分配器量：最后的 GPU 实验用 `torch.cuda.max_memory_allocated` 量整个 prefill。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "kv_measure_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 形状检查：一次性与分块预填充的最大注意力分数张量（hook 看到的 vs 解析值）；先核对 logits
memory_config = TinyConfig(vocab_size=64, d_model=128, n_layers=2, n_heads=4, max_positions=512)
memory_model = TinyCausalLM(memory_config, seed=0)
memory_threads = torch.get_num_threads()
torch.set_num_threads(1)  # 与上一格相同：单线程，不和机器上的其他进程争抢
try:
    memory_rows = measure_attention_peaks(memory_model, num_tokens=512, chunk_sizes=(None, 256, 200, 128, 64, 16))
except NotImplementedError:
    memory_rows = []
    print("请先完成 TODO 9，再运行本测量。")
except RuntimeError as error:
    if not str(error).startswith("测量前的核对"):
        raise
    raise RuntimeError(str(error)) from None
except (ValueError, TypeError, IndexError, AttributeError) as error:
    raise RuntimeError(
        f"测量没能跑完（{type(error).__name__}: {error}）。它用到 chunked_prefill：回到 TODO 9，先让它的可见检查通过"
    ) from None
finally:
    torch.set_num_threads(memory_threads)
if memory_rows:
    print("T = 512，n_heads = 4，float32；解析值 = n_heads · max_j c_j · (第 j 块末尾位置) · 4 字节；每种分块的 logits 已核对等于一次性前向")
    print(format_table(memory_rows, MEMORY_COLUMNS))
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        labels = [str(r["chunk"]) if r["chunk"] != "一次性" else "one-shot" for r in memory_rows]
        ax.bar(labels, [r["measured_kib"] for r in memory_rows], label="largest attention scores (shape check)")
        ax.axhline(memory_rows[0]["kv_kib"], color="gray", linestyle="--", label="KV cache (unchanged)")
        ax.set_xlabel("chunk_size")
        ax.set_ylabel("KiB")
        ax.legend()
        plt.show()

# %% [markdown]
# ### 2.5　证据边界：这一部分证明了什么，没证明什么
#
# - **证明了：** 在一个随机权重的小 Transformer 上，分块预填充、以及复用缓存前缀后只算 suffix，得到的 logits 和 KV 与一次完整前向一致（`torch.allclose`，`atol = 1e-5`，float32；bf16 下两条路径可能差出舍入误差，见 2.1 节）。等式来自因果性，与权重是否训练过、模型大小无关；右下角对齐的掩码和绝对位置是它成立的两个前提。评分测试用随机 prompt、多种 chunk 大小和前缀组合检查了这一点。
# - **测量了：** 单个 prompt 在 CPU 上（单线程）、float32 小模型的 prefill 耗时；分数张量那张表是形状检查，不是内存测量。`h = 0` 那一行两边做的是同一件事，它的比值范围就是这次测量的噪声：一行的实测加速比与代价模型的差别，只有超出这个范围才算测到了。在几个进程共用的 CPU 上这个范围可能很宽（本套件的测试机在负载约 2.5 时见过 0.66 到 1.69）；能稳定看到的只有“命中越多越快”，实测比代价模型快还是慢，要看那次运行的噪声有多大。这些数字也不能当作 GPU 上的数字。
# - **没有测：** batch、调度、TTFT / TPOT、吞吐、显存碎片、真实模型的权重与 kernel（FlashAttention、分页 KV）。这些需要 serving 级别的基准测试（例如 vLLM 的 `vllm bench serve`）。最后的 GPU 实验给出分配器层面的峰值显存，但仍只是这个小模型上的一次 prefill。

# %% [markdown]
# ## 第三部分（选做，{{points:block}}）：真实引擎怎么做——块级前缀缓存、引用计数与 LRU 淘汰
#
# 第一部分的 `PrefixCacheManager` 把“登记前缀 → 最长匹配 → 拆出 suffix”这条路径讲清楚了，但它离真实引擎还差三步：
#
# | 问题 | `PrefixCacheManager` 的做法 | 真实引擎（vLLM / SGLang）的做法 |
# |---|---|---|
# | 查找代价 | 每次 `match_prefix` 扫描**全部**已登记前缀，缓存 N 条就比较 N 次 | 沿哈希链（vLLM）或基数树（SGLang）逐块/逐段查找，代价只和 prompt 长度有关 |
# | 容量 | `cached_prefixes` 只增不减，从不遗忘 | KV cache 放在固定大小的显存池里，满了就按 LRU 淘汰没人用的块 |
# | 存储单位 | 只记 token，不知道 KV 存在哪里 | 记到物理块：命中的前缀直接得到一串 block id，多个请求共享同一批块，用引用计数保护 |
#
# 本部分实现 `BlockPrefixCache`：固定 `num_blocks` 个物理块、只缓存满块的哈希链、每块一个引用计数、可淘汰块按 LRU 排队，外加 vLLM 口径的 token 级命中率统计。最后用合成负载量一量：容量多大时命中率才上得去，淘汰策略换成 FIFO 或随机会怎样。
#
# 本部分是**选做**，共 40 分（TODO 11–14），默认单独记录，不计入成绩（见第一格的分值）。只用 Python 标准库，不需要 torch。这里的 `block_size` 是 KV cache 的块（页）大小：每个物理块存几个 token 的 K/V（见 1.3 节末尾），不是第一、二部分的 prefill chunk 大小。

# %% [markdown]
# ### 3.1　四个设计决定，各自为了什么
#
# **为什么按块（paged KV）。** vLLM 的 PagedAttention 把 KV cache 切成固定大小的物理块，每块存 `block_size` 个 token 的 K/V；一个请求的 KV 由一张块表（block table）指向若干物理块，不要求显存连续。前缀缓存就建在这一层上：两个请求前 k 个满块的内容相同，它们的块表就可以指向同一批物理块。所以缓存的单位是**满块**。最后一个不满的块还会被继续写入（后面的 prompt token、decode 出的新 token 都会落进去），内容还没定型，不能共享。代价是命中长度按块向下取整：共享 100 个 token、`block_size=16` 时只能复用 96 个。
#
# **为什么用哈希链。** 第 i 块的 KV 不只取决于它自己的 token，还取决于它前面的全部 token（注意力看的是整个前缀）。所以块的 key 要覆盖父块的 key 和本块的 token：`key_i = hash((key_{i-1}, tokens_i))`，首块的父 key 为 `None`。一条前缀对应一条 key 链；查找时从第一块开始逐块算 key、查一次字典，每块 O(1)，和缓存里存了多少条序列无关。哈希可能碰撞：两段不同的内容算出同一个 key。所以命中时还要核对块里存的 `parent_key` 和 `token_ids`，对不上就当作未命中。这样碰撞只会让命中变短，永远不会返回装着别的内容的块。
#
# **为什么要引用计数。** 同一个物理块可能同时被好几个正在运行的请求读着（它们共享 system prompt）。每块记一个 `ref_count`：`acquire` 时 +1，`release` 时 −1。`ref_count > 0` 的块绝不能淘汰，否则别的请求正在用的 KV 会被覆盖。降到 0 的块不清空，仍留在缓存里等下一个请求命中，只是从此**可以**被淘汰。
#
# **为什么是 LRU。** 池子满了又需要新块时，只能从可淘汰块里挑一个清掉。刚被用过的前缀（热门的 system prompt、正在进行的多轮对话）最可能马上再被用到，所以先淘汰最久未用的。这里用 `OrderedDict` 当队列：`release` 时追加到队尾，淘汰时从队首弹出，都是 O(1)。一个请求的块按**从尾到头**的顺序入队，同一条链上就总是先淘汰尾部、后淘汰头部；父块永远不会比子块先被淘汰（链上缺了父块，子块就再也查不到了）。
#
# ### 3.2　接口
#
# | 方法 | 做什么 | 改状态吗 |
# |---|---|---|
# | `match(token_ids)` | 返回最长已缓存满块前缀的 block id 列表（**TODO 11**） | 不改：纯查询，不动缓存内容、引用计数、LRU 顺序和统计 |
# | `acquire(token_ids)` | 请求开始：命中块加引用，其余满块分配新块并登记，记统计；块不够时抛 `CacheFullError`（**TODO 12**） | 改；失败时什么都不改 |
# | `release(block_ids)` | 请求结束：引用 −1，降到 0 的块进入可淘汰队列（**TODO 13**） | 改 |
# | `_record_query(token_ids, hit_block_ids)` | 记一次成功的查询：token 级命中统计（**TODO 14**） | 改统计 |
# | `insert(token_ids, block_ids)` / `evict()` | 已给出：把算好的满块登记进缓存 / 淘汰最久未用的块 | 改 |
# | `check_integrity()` | 已给出：断言全部不变量，测试在每一步之后都调用 | 不改 |
#
# 两点取舍说明：
# - **`match` 不刷新 LRU，也不记统计。** 和 vLLM 一样，查找本身不碰淘汰顺序；块被 `acquire` 引用时移出可淘汰队列，`release` 时再排到队尾，这已经就是“最近使用”。统计放在 `acquire` 里（每个请求只记一次），所以随手多调几次 `match` 探一探，也不会把命中率算歪。
# - **只有满块才分配、才缓存。** `acquire` 只为满块返回 block id；不满一块的尾巴在真实引擎里放在请求自己的私有块里，每次都要重算，这里不建模。

# %% nbgrader={"grade": false, "grade_id": "block_prefix_cache", "locked": false, "schema_version": 3, "solution": true, "task": false}
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


class BlockPrefixCache:
    """块级前缀缓存：哈希链 + 固定大小的物理块池 + 引用计数 + LRU 淘汰。

    一个请求的一生：
        block_ids = cache.acquire(prompt)   # 命中的块加引用；其余满块分配新块并登记
        ...                                 # 用这些块做 prefill / decode
        cache.release(block_ids)            # 引用 -1；降到 0 的块留在缓存里，变成可淘汰

    任何时刻每个块恰好处于一种状态：
        空闲   ref_count == 0，未登记   在 _free_block_ids 里
        可淘汰 ref_count == 0，已登记   在 _evictable 里（队首最久未用，最先淘汰）
        使用中 ref_count >  0           已登记的共享块，或未登记的私有块
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
        # token 级统计，口径与 vLLM 的 prefix cache hit rate 相同
        self.num_requests = 0
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0
        self.num_evictions = 0

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

    @property
    def hit_rate(self) -> float:
        """命中 token 数 / 查询 token 数；还没有查询时为 0.0。"""
        if self.num_queried_tokens == 0:
            return 0.0
        return self.num_hit_tokens / self.num_queried_tokens

    # ------------------------------------------------------------------ 已给出的积木
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

# %% [markdown]
# #### 提示：TODO 11–14
#
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开里面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 11 · 提示 1</summary>
#
# 从第一块开始，父 key 是 `None`；每一块的 key 由父 key 和本块的 token 一起决定。什么时候该停下？
#
# <details><summary>TODO 11 · 提示 2</summary>
#
# 逐块算 key、在 `self._cached` 里查 block id，查不到就停。查到了还要核对那个块存的 `parent_key` 和 `token_ids` 与这次查询是否一致（哈希可能碰撞），不一致也停。`match` 只读：不碰引用计数、可淘汰队列和统计。
#
# </details>
# </details>
#
# <details><summary>TODO 12 · 提示 1</summary>
#
# 动手之前先回答两个数：要几个新块？最多能腾出几个？命中的块里，有没有此刻正躺在可淘汰队列里的？
#
# <details><summary>TODO 12 · 提示 2</summary>
#
# 能腾出的块 = 空闲块 + 可淘汰块 − 命中块中引用计数为 0 的那些。不够就抛 `CacheFullError`，此前什么都不改。够的话先给命中的块加引用（引用为 0 的移出可淘汰队列），再逐个分配新块，然后用 `insert` 登记、调用一次 `_record_query`。
#
# </details>
# </details>
#
# <details><summary>TODO 13 · 提示 1</summary>
#
# 为什么要从最后一块往前处理？引用降到 0 的块该去哪里，取决于它有没有登记在缓存里。
#
# <details><summary>TODO 13 · 提示 2</summary>
#
# 倒序遍历，引用减 1；仍大于 0 就跳过。降到 0 时：已登记（`key` 不是 `None`）的排到可淘汰队列的队尾，没有登记的私有块放回空闲队列。
#
# </details>
# </details>
#
# <details><summary>TODO 14 · 提示 1</summary>
#
# 三个计数里只有一个按请求计，另外两个都按 token 计。命中的 token 数怎样从命中的块数换算出来？
#
# <details><summary>TODO 14 · 提示 2</summary>
#
# 请求数加 1；查询 token 数加上整个 prompt 的长度（包括不满一块的尾巴）；命中 token 数加上命中块数乘以 `block_size`。
#
# </details>
# </details>

# %% [markdown]
# 运行下面的单元格检查 TODO 11–14：四个检查各查一个 TODO，互不连带（查 `acquire` 时 `match` 和统计换成了替身），每条断言的消息写明输入、期望值和实际得到的值。

# %% nbgrader={"grade": false, "grade_id": "visible_todo11_14", "locked": true, "schema_version": 3, "solution": false, "task": false}
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
        assert got == expected, f"TODO 11: 登记 {ids} 两个满块后 match({tokens}) 应返回 {expected}（{why}），得到 {got!r}"
    cache.check_integrity()
    # match 是纯查询：引用降到 0 的块排在可淘汰队列里时，查询不能改变它们的顺序（不刷新 LRU）
    for block_id in reversed(ids):  # 模拟 release（不经过 TODO 13）：尾块先进队，先淘汰
        cache.blocks[block_id].ref_count = 0
        cache._evictable[block_id] = None
    before = list(cache._evictable)
    cache.match(list(range(10)))
    assert list(cache._evictable) == before, f"TODO 11: match 不应改变可淘汰队列（不刷新 LRU，和 vLLM 一样：查找不碰淘汰顺序）：match 前 {before}，match 后 {list(cache._evictable)}"
    cache.check_integrity()
    # 强制哈希碰撞：每个满块的 key 都相同。命中时必须核对块里存的 parent_key 和 token_ids
    colliding = _Colliding11(block_size=2, num_blocks=4)
    first = colliding._allocate_block()
    colliding.insert([1, 2], [first])  # 登记 (1, 2)，key 为 0
    got = colliding.match([5, 6])
    assert got == [], f"TODO 11: 强制哈希碰撞（每块 key 相同）时，登记了 (1, 2) 的块 {first} 后 match([5, 6]) 应返回 []：key 相同但块里的 token_ids 不同，要核对 token_ids，得到 {got!r}"
    got = colliding.match([1, 2, 1, 2])
    assert got == [first], f"TODO 11: 强制哈希碰撞时 match([1, 2, 1, 2]) 应返回 [{first}]：第二块的 key 也指向块 {first}，但它的 parent_key（None）与查询的父 key 不同，要核对 parent_key，得到 {got!r}" + ("（得到 [] 说明没有用 self._hash_block 算 key：这里的替身让它恒为 0，直接调用 hash 就查不到）" if got == [] else "")


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
    assert isinstance(first, list) and len(first) == 2 and len(set(first)) == 2, f"TODO 12: 空缓存（3 块）acquire(list(range(10)))、block_size=4 应分配 2 个不同的块（尾巴 8, 9 不分配），得到 {first!r}"
    cache.hits = first  # 假装这两块都命中
    second = cache.acquire(list(range(10)))
    assert second == first, f"TODO 12: match 命中 {first} 时 acquire 应直接复用它们，返回 {first}，得到 {second!r}"
    refs = [cache.blocks[b].ref_count for b in first]
    assert refs == [2, 2], f"TODO 12: 两个请求共用块 {first}，它们的引用计数应为 [2, 2]，得到 {refs}"
    cache.hits = []
    try:
        cache.acquire([7] * 8)  # 需要 2 个新块，只剩 1 个空闲块
    except CacheFullError:
        pass
    else:
        raise AssertionError("TODO 12: 只剩 1 个空闲块时 acquire([7] * 8) 需要 2 个新块，应抛出 CacheFullError，却没有抛")
    free = [b.ref_count for b in cache.blocks].count(0)
    assert free == 1, f"TODO 12: 抛出 CacheFullError 后不能改变任何状态：应仍有 1 个引用计数为 0 的块，得到 {free} 个"
    cache.check_integrity()
    # 命中的块排在可淘汰队列的队首、没有空闲块：先给它加引用再分配，否则它会被当成最久未用的块淘汰
    pinned, hit, other = _evictable_pool(num_blocks=2)
    pinned.hits = [hit]
    try:
        got = pinned.acquire([1, 2, 3, 4])
    except Exception as error:  # noqa: BLE001  (顺序反了时 insert 会发现块已被挪作他用)
        got = f"{type(error).__name__}: {error}"
    assert got == [hit, other], f"TODO 12: 命中的块 {hit} 在可淘汰队列队首、没有空闲块时 acquire([1, 2, 3, 4]) 应返回 [{hit}, {other}]（先给命中的块加引用、移出队列，再分配新块，淘汰的是块 {other}），得到 {got!r}"
    pinned.check_integrity()
    # 可腾出的块：命中的块此刻在可淘汰队列里，但马上要被本请求引用，不能算作可腾出的块
    full, hit, other = _evictable_pool(num_blocks=2)
    full.hits = [hit]
    before = [(b.ref_count, b.key) for b in full.blocks], list(full._evictable)
    try:
        full.acquire([1, 2, 3, 4, 5, 6])  # 命中 1 块、还要 2 个新块，能腾出的只有块 other
    except CacheFullError:
        pass
    else:
        raise AssertionError(f"TODO 12: 可淘汰队列里只有命中的块 {hit} 和块 {other}、没有空闲块时，acquire([1, 2, 3, 4, 5, 6]) 要 2 个新块，只能腾出 1 个（命中的块不能算作可腾出的块），应抛出 CacheFullError，却没有抛")
    after = [(b.ref_count, b.key) for b in full.blocks], list(full._evictable)
    assert after == before, f"TODO 12: acquire 抛出 CacheFullError 时状态已经变了（引用计数与登记 {before[0]} → {after[0]}，可淘汰队列 {before[1]} → {after[1]}）：命中的块不能算作可腾出的块，要在改任何状态之前算清楚够不够"


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
    assert queue == [ids[1], ids[0]], f"TODO 13: release({ids}) 后可淘汰队列应为 {[ids[1], ids[0]]}（从尾到头排进队尾：尾块先淘汰），得到 {queue}"
    assert cache.num_cached_blocks == 2, f"TODO 13: 引用降到 0 的块应留在缓存里等下一个请求命中：应仍有 2 个登记的块，得到 {cache.num_cached_blocks} 个"
    cache.check_integrity()


def visible_check_todo14():
    cache = BlockPrefixCache(block_size=4, num_blocks=8)
    cache._record_query(list(range(10)), [0, 1])  # 10 个 token，命中 2 块 = 8 个 token
    got = (cache.num_requests, cache.num_queried_tokens, cache.num_hit_tokens)
    assert got == (1, 10, 8), f"TODO 14: block_size=4 时 _record_query(list(range(10)), [0, 1]) 后 (请求数, 查询 token, 命中 token) 应为 (1, 10, 8)，得到 {got}"
    assert abs(cache.hit_rate - 0.8) < 1e-12, f"TODO 14: 命中率应为 8 / 10 = 0.8，得到 {cache.hit_rate!r}"


run_visible_checks(
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
# ### 3.3　自动评分单元格：TODO 11–14（选做，共 40 分，单独计分）
#
# 下面每格检查一个 TODO 的一个方面，分值写在第一行。每格只查自己的 TODO：查某个 TODO 时，其余方法换成评分代码自带的参考实现；每一步之后都检查全部不变量（`check_integrity()`）。

# %% nbgrader={"grade": true, "grade_id": "test_todo11_basic", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 11 · 基本（3 分）：从第一块起逐块命中，部分命中、不满一块的尾巴、空 prompt、错位的 prompt
### BEGIN HIDDEN TESTS
#| check: todo11.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo11_chain", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 11 · 哈希链（2 分）：token 相同、位置不同的块只靠 key 链区分
### BEGIN HIDDEN TESTS
#| check: todo11.py::check_chain
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo11_collisions", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 11 · 碰撞（3 分）：强制哈希碰撞：key 相同但 parent_key 或 token_ids 不同，不算命中
### BEGIN HIDDEN TESTS
#| check: todo11.py::check_collisions
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo11_pure_query", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 11 · 纯查询（2 分）：随机请求序列中每一步都与参考一致，且 match 不改变任何状态
### BEGIN HIDDEN TESTS
#| check: todo11.py::check_pure_query
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo12_basic", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 12 · 基本（3 分）：只为满块分配、先用空闲块、新块登记进缓存、同一 prompt 再来全部命中、统计记一次
### BEGIN HIDDEN TESTS
#| check: todo12.py::check_basic
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo12_refcounts", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 12 · 引用计数（3 分）：共享前缀的块每个持有者 +1；命中可淘汰的块时把它移出可淘汰队列
### BEGIN HIDDEN TESTS
#| check: todo12.py::check_refcounts
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo12_hit_blocks_protected", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 12 · 命中块不被淘汰（3 分）：没有空闲块时按 LRU 淘汰，命中的块即使排在队首也不淘汰
### BEGIN HIDDEN TESTS
#| check: todo12.py::check_hit_blocks_protected
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo12_cache_full", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 12 · 块不够（3 分）：腾不出足够的块时抛 CacheFullError，且引用、队列、索引、统计都不变
### BEGIN HIDDEN TESTS
#| check: todo12.py::check_cache_full
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo12_random", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 12 · 随机序列（2 分）：随机请求序列（含频繁哈希碰撞）中每次 acquire 之后的完整状态
### BEGIN HIDDEN TESTS
#| check: todo12.py::check_random
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo13_refcount", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 13 · 引用计数（3 分）：每次 release 只减 1；别的请求还在用的块保持使用中
### BEGIN HIDDEN TESTS
#| check: todo13.py::check_refcount
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo13_lru_order", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# TODO 13 · LRU 顺序（3 分）：降到 0 的块从尾到头排到可淘汰队列的队尾；淘汰最久未用的
### BEGIN HIDDEN TESTS
#| check: todo13.py::check_lru_order
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo13_private_blocks", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 13 · 私有块（2 分）：哈希碰撞之后没有登记的私有块回到空闲队列，不进可淘汰队列
### BEGIN HIDDEN TESTS
#| check: todo13.py::check_private_blocks
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo13_random", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 13 · 随机序列（2 分）：随机请求序列中每次 release 之后的引用计数与两条队列
### BEGIN HIDDEN TESTS
#| check: todo13.py::check_random
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo14_hit_tokens", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 14 · 命中 token（2 分）：命中 token 数 = 命中块数 × block_size
### BEGIN HIDDEN TESTS
#| check: todo14.py::check_hit_tokens
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo14_queried_tokens", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 14 · 查询 token（2 分）：查询 token 数加上整个 prompt 的长度，包括不满一块的尾巴
### BEGIN HIDDEN TESTS
#| check: todo14.py::check_queried_tokens
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo14_accumulate", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# TODO 14 · 累计（2 分）：请求数每次 +1；随机请求序列中累计值与 hit_rate；不动块
### BEGIN HIDDEN TESTS
#| check: todo14.py::check_accumulate
### END HIDDEN TESTS

# %% [markdown]
# ### 3.4　工作负载模拟器：什么样的请求流才能命中
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
    running = deque()
    held = {}  # block_id -> 运行中的请求持有它的次数
    last_step = ["（还没有操作）", "TODO 12（acquire）"]  # 上一次改动缓存的操作，和它属于哪个 TODO

    def explain(prompt):
        """学习者的缓存抛了异常：找出最可能的原因，说该回到哪个 TODO。"""
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
            return f"此前的 {last_step[0]} 已经破坏了块的不变量（{broken}）。回到 {last_step[1]} 检查"
        return "回到 TODO 12（acquire）和 TODO 13（release）检查：先让它们的可见检查和上面的演示都通过"

    def check_refs(block_ids, step, todo):
        for block_id in set(block_ids):
            if cache.blocks[block_id].ref_count != held.get(block_id, 0):
                raise RuntimeError(
                    f"模拟器：{step} 之后块 {block_id} 的引用计数是 {cache.blocks[block_id].ref_count}，"
                    f"但运行中的请求持有它 {held.get(block_id, 0)} 次。回到 {todo} 检查引用计数"
                )

    def finish(block_ids):
        try:
            cache.release(block_ids)
        except NotImplementedError:
            raise
        except Exception as error:
            raise RuntimeError(f"模拟器：release 抛出 {type(error).__name__}: {error}。回到 TODO 13（release）检查") from None
        last_step[:] = [f"release({len(block_ids)} 个块)", "TODO 13（release）"]
        for block_id in block_ids:
            held[block_id] -= 1
        check_refs(block_ids, f"release({len(block_ids)} 个块)", "TODO 13（release：每块恰好减 1）")

    for prompt in trace:
        while True:
            try:
                block_ids = cache.acquire(prompt)
                break
            except CacheFullError:
                changed = [block.block_id for block in cache.blocks if block.ref_count != held.get(block.block_id, 0)]
                if changed:
                    raise RuntimeError(
                        f"模拟器：acquire({len(prompt)} 个 token) 抛出 CacheFullError 之后，块 {changed[:5]} 的引用计数变了"
                        "（运行中的请求并没有多持有它们）：抛错之前已经改了引用计数，引用计数泄漏。"
                        "回到 TODO 12 检查：先算清楚够不够，不够就抛错、什么都不改"
                    ) from None
                if not running:
                    leaked = [block.block_id for block in cache.blocks if block.ref_count > 0]
                    if leaked:
                        raise RuntimeError(
                            f"模拟器：没有请求在运行，{len(leaked)} 个块的引用计数却仍大于 0（引用计数泄漏），"
                            f"块池 {cache.num_blocks} 块因此放不下一个 {len(prompt)} token 的请求。回到 TODO 12"
                            "（acquire 抛出 CacheFullError 时是否已经加了引用？）和 TODO 13（release 是否每块减 1？）检查"
                        ) from None
                    raise ValueError(f"块池只有 {cache.num_blocks} 块，放不下一个 {len(prompt)} token 的请求") from None
                finish(running.popleft())
            except NotImplementedError:
                raise
            except Exception as error:
                raise RuntimeError(
                    f"模拟器：acquire({len(prompt)} 个 token) 抛出 {type(error).__name__}: {error}。{explain(prompt)}"
                ) from None
        last_step[:] = [f"acquire({len(prompt)} 个 token)", "TODO 12（acquire）"]
        if len(block_ids) != len(prompt) // cache.block_size:
            raise RuntimeError(
                f"模拟器：acquire 对 {len(prompt)} 个 token、block_size={cache.block_size} 返回了 {len(block_ids)} 个块，"
                f"应为 {len(prompt) // cache.block_size} 个（只为满块分配）。回到 TODO 12 检查"
            )
        for block_id in block_ids:
            held[block_id] = held.get(block_id, 0) + 1
        check_refs(block_ids, f"acquire({len(prompt)} 个 token)", "TODO 12（acquire：命中的块 +1，新块为 1）")
        running.append(block_ids)
        if len(running) > max_running:
            finish(running.popleft())
    while running:
        finish(running.popleft())
    return cache.hit_rate


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
# ### 3.5　测量一：命中率随容量的变化
#
# 同一个请求流，块池从 64 块放大到 2048 块（`block_size=16`，最多 4 个请求同时运行）。最后一行是第一部分的 `PrefixCacheManager`：不限容量，每个 prompt 整条登记。“不淘汰所需块数”是请求流里不同满块前缀的个数，池子有这么大就永远不必淘汰。整段测量在普通 CPU 上约 2 秒。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "measure_block_hit_rate", "locked": true, "schema_version": 3, "solution": false, "task": false}
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
    print("| num_blocks | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for i, n in enumerate(capacities):
        print(f"| {n} | " + " | ".join(f"{rates[name][i]:.3f}" for name in names) + " |")
    print("| PrefixCacheManager（不限容量） | " + " | ".join(seed_rates[name] for name in names) + " |")
    print("| 不淘汰所需块数 | " + " | ".join(str(num_distinct_full_blocks(workloads[name], block_size)) for name in names) + " |")
    print(f"\n（请求数：{', '.join(f'{name} {len(workloads[name])}' for name in names)}）")
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        print("没有安装 matplotlib：只打印表格。")
        return
    _, ax = plt.subplots(figsize=(6.4, 4))
    for name in names:
        (line,) = ax.plot(capacities, rates[name], marker="o", label=f"BlockPrefixCache: {name}")
        if not seed_rates[name].startswith("（"):
            ax.axhline(float(seed_rates[name]), color=line.get_color(), linestyle="--", linewidth=1, label=f"PrefixCacheManager (unbounded): {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("num_blocks (block_size=16)")
    ax.set_ylabel("token hit rate")
    ax.set_ylim(-0.02, 1)
    ax.set_title("token hit rate vs capacity")
    ax.legend(fontsize=8)
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
# ### 3.6　测量二：淘汰策略为什么重要
#
# 同样的请求流、同样的块池，只换淘汰策略：LRU（本章的 `BlockPrefixCache`）、FIFO（淘汰最早登记的块）、随机淘汰。三者都受引用计数保护：正在运行的请求用着的块谁也不会淘汰。区别只在于：当几个块都没人用时，先丢哪一个。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "measure_block_eviction_policy", "locked": true, "schema_version": 3, "solution": false, "task": false}
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
    print("| 负载 | num_blocks | " + " | ".join(policies) + " |")
    print("|---|---:|" + "---:|" * len(policies))
    for name, n, rates in rows:
        print(f"| {name} | {n} | " + " | ".join(f"{rate:.3f}" for rate in rates) + " |")


_show_eviction_policies()
del _show_eviction_policies

# %% [markdown]
# **怎么读这张表。** 在这些负载里 LRU 没有一格比 FIFO 或随机差：比 FIFO 高 2 到 8 个百分点，比随机高 0 到 5 个百分点。原因是请求流有“最近用过的很快会再用”的性质：热门 system prompt 一次次被命中，多轮对话的下一轮很快就来。FIFO 只看登记得早不早，一段热门 system prompt 登记得最早，只要某一刻没人引用它，就会被当成最老的块清掉，下一个请求只好重算，再登记，过一阵又被清掉。随机淘汰介于两者之间。差距并不大，因为真正最热的前缀大多时候正被运行中的请求引用，三种策略都淘汰不了它：**引用计数保护正在用的块，淘汰策略决定没人用的块谁先走。**
#
# 反过来，LRU 也有吃亏的时候：一大批只出现一次的长文档会把热门前缀挤到队首（缓存污染，scan pollution）。vLLM 社区里就有人提议借鉴 Linux 页缓存的 active/inactive 两条链表来缓解。

# %% [markdown]
# ### 3.7　vLLM 和 SGLang：同一件事的两种组织方式
#
# vLLM 的 prefix caching 和本章的 `BlockPrefixCache` 结构相近，但有一处要紧的不同：**vLLM 命中时不核对块里存的 token**，只信哈希。设计文档 `docs/design/prefix_caching.md` 自己写明这种键“不是 100% 无碰撞”，建议多租户部署用 SHA-256；新版本里配置项 `prefix_caching_hash_algo` 的默认值就是 `sha256`（`vllm/config/cache.py`），碰撞概率小到可以不管。本章用 Python 内置的 64 位 `hash`，碰撞要当真，所以 TODO 11 要核对 `parent_key` 和 `token_ids`。相同的部分：KV 按固定大小的块分页，只有满块才计算块哈希（父块哈希 + 本块 token，再加上 LoRA、多模态输入等额外键），用一张“块哈希 → 物理块”的字典查找；空闲块放在一个双向链表里，按淘汰顺序排列，请求结束时它的块从尾到头追加到链表末尾，需要新块时从表头取，取到还带着哈希的块就顺手把它从字典里删掉（惰性淘汰）；命中时把块从空闲链表中摘下、引用计数 +1。查找本身不改变淘汰顺序。SGLang 的 RadixAttention 则把所有缓存的前缀组织成一棵基数树：边上是 token 序列，节点上挂着这些 token 的 KV 在显存池里的位置（默认一个 token 一个槽位，也可以按页）。匹配时从根沿树逐段比较 token，不用哈希，命中长度可以精确到 token，分叉处就地把节点一分为二；引用计数（lock_ref）沿着从节点到根的路径加减；淘汰时只从引用计数为 0 的叶子里挑：默认按最近访问时间挑最老的（LRU），也可以用 `--radix-eviction-policy` 换成 LFU 等策略，叶子删掉后父节点可能变成新的叶子；匹配会刷新路径上节点的访问时间。两者的取舍：哈希链的每一步是 O(1) 的字典查找，块表天然对齐 PagedAttention 的块；基数树命中更精细，树的结构本身就表达了前缀之间的共享关系，同时也要自己维护节点分裂和叶子淘汰。

# %% [markdown]
# ### 3.8　证据边界：这一部分证明了什么，没证明什么
#
# - **证明了：** `BlockPrefixCache` 的簿记是对的：随机操作序列与暴力参考实现逐步比对，每一步之后所有不变量都成立（块池不超容量、使用中的块不被淘汰、淘汰顺序是 LRU、不满的块不缓存、强制哈希碰撞也不会返回错误的块、查询不改变状态、块不够时报错且不改变状态）。
# - **测到了：** 在**合成**请求流上，token 级命中率如何随块池容量和淘汰策略变化；本套件的维护者另外测了查找开销（不在这本 notebook 里）：缓存 100 到 10,000 条序列时 `match` 的耗时，对照 `PrefixCacheManager.match_prefix` 的线性扫描。
# - **没有证明：** 真实显存里的 KV 复用是否正确（那是第二部分用小 Transformer 做的事）；命中率换算成 TTFT、吞吐或显存节省是多少：命中的 token 省掉的是 prefill 计算，但注意力开销随位置增长，token 命中率不等于时间节省比例；真实请求流（到达时间、长度分布、会话间隔）下命中率是多少。服务级别的数字需要 serving 基准测试（例如 vLLM 的 `vllm bench serve`）。
# - **没有实现：** decode 阶段新生成的满块也登记进缓存（vLLM 会这样做，多轮对话的命中率会更高）；全部命中时仍要重算最后一块（vLLM）或最后一个 token（SGLang）以得到 logits（第四部分的 TODO 15 实现了 vLLM 的规则）；LoRA / 多模态的额外哈希键；抢占（preemption）时的块回收；KV 在 GPU、CPU、磁盘之间的分层卸载。

# %%
#| include: part4_scheduler.py

# %%
#| include: part4_measure.py

# %% [markdown]
# ## 附：GPU 可选实验（不计分）：观察分块带来的资源边界
#
# 实验就是紧接着的下一个单元格，notebook 到它为止。它的第一段是一个**演示**，不是测量：用**合成的** hidden states，一次性申请整个 suffix 大小的张量、或每次只申请一个 chunk 大小的张量，看分配器记下的峰值。峰值等于我们申请的大小是必然的（张量是这段代码自己按解析的大小造的），它只让你在真实的卡上看到“分块限制了一次要多大的块”；这一段不是真实的 prefix cache、KV cache 或 serving benchmark。
#
# - 第二部分的小 Transformer（float32，`d = 512`、4 层、4096 个 token）也在这里上 GPU：一次性与分块预填充的峰值显存、耗时、分块结果与一次性结果的最大误差，以及命中 90% 时的 prefill 加速比与代价模型 S(h, T) 之比。这一部分需要先完成 TODO 9。
# - **怎么量的。** 每个峰值都是“这次测量中的最高占用 − 测量开始前已经占用的显存”（`torch.cuda.max_memory_allocated` 减去 `memory_allocated`），所以模型权重、上一次运行留下的 cuBLAS 工作区都不算在内；它包括分数张量的几份拷贝、掩码、KV 和激活，不只是分数张量。每段计时前后都 `synchronize`，prompt 在计时开始前就已经是 GPU 上的张量。
# - **显存不够时**，那一行写“out of memory at N tokens”，其余各行照常打印，显存随即释放。
# - 默认 `RUN_MODE = 'dry_run'`：只用中文打印实验计划（要量什么、各项的解析值，单位 MiB = 2²⁰ 字节），并写明没有用到 GPU；不导入 torch、不申请任何 CUDA 张量，在任何机器上都能运行。
# - 在 Colab（「代码执行程序 → 更改运行时类型 → GPU」）或魔搭的 GPU 实例上，把 `RUN_MODE` 改成 `'real_gpu'` 再运行，会得到真实的峰值显存。合成部分用 float16：Colab 的 T4 不支持 bfloat16。
# - 在没有 CUDA 的机器上选 `'real_gpu'` 会得到一条说明原因的错误；`RUN_MODE` 写错也会直接报错。

# %%
# GPU 可选实验的配置：默认只打印计划，不申请 CUDA 张量。
RUN_MODE = "dry_run"  # 'dry_run' 或 'real_gpu'
CHUNK_GPU_PROBE = {
    "suffix_tokens": 4096,
    "hidden_size": 1024,
    "chunk_size": 512,
    "dtype": "float16",  # 不用 bfloat16：Colab 的 T4 不支持
    # 第二部分的小 Transformer（float32）：一次性与分块预填充的峰值显存、耗时，以及命中 h 时的 prefill 加速比
    "tiny_model": {"d_model": 512, "n_layers": 4, "n_heads": 8, "num_tokens": 4096, "chunk_sizes": [1024, 256], "hit_ratio": 0.9, "block_size": 256, "repeats": 5},
}
PROBE_MODES = ("dry_run", "real_gpu")


def tiny_model_plan(tiny):
    """小模型实验的计划与解析值：各调度下最大的注意力分数张量、KV cache 的大小。

    纯 Python，不用 torch，也不用前面单元格的定义（本单元格单独运行也可以）；
    公式与第二部分的 analytic_attention_peak_bytes、kv_cache_bytes 相同。
    """
    tokens, heads = tiny["num_tokens"], tiny["n_heads"]

    def scores_mib(chunk):  # n_heads · max_j c_j · (第 j 块末尾位置) · 4 字节
        full_chunks, tail = divmod(tokens, chunk)
        return round(heads * max(chunk * full_chunks * chunk, tail * tokens) * 4 / 2**20, 2)

    return {
        "model": {"d_model": tiny["d_model"], "n_layers": tiny["n_layers"], "n_heads": heads, "dtype": "float32"},
        "num_tokens": tokens,
        "analytic_attention_scores_mib": {"one_shot": scores_mib(tokens), **{f"chunked_{size}": scores_mib(min(size, tokens)) for size in tiny["chunk_sizes"]}},
        "kv_cache_mib": round(2 * tiny["n_layers"] * tokens * tiny["d_model"] * 4 / 2**20, 2),
        "cached_prefill": {"hit_ratio": tiny["hit_ratio"], "block_size": tiny["block_size"]},
    }


def probe_plan(config):
    """实验计划（纯 Python）：合成 suffix 的分块数与各调度最大一块的解析字节数，以及小模型的计划。"""
    tokens, chunk_size = config["suffix_tokens"], config["chunk_size"]
    itemsize = {"float16": 2, "bfloat16": 2, "float32": 4}[config["dtype"]]
    plan = {
        "suffix_tokens": tokens,
        "chunk_size": chunk_size,
        "chunk_count": (tokens + chunk_size - 1) // chunk_size,
        "evidence_level": "演示：合成张量按解析大小申请，峰值等于解析值是必然的",
        "analytic_block_mib": {name: round(size * config["hidden_size"] * itemsize / 2**20, 2) for name, size in (("one_shot", tokens), ("chunked", min(chunk_size, tokens)))},
    }
    if "tiny_model" in config:
        plan["tiny_model"] = tiny_model_plan(config["tiny_model"])
    return plan


class CudaMemory:
    """唯一调用 torch.cuda 的地方：一块 GPU 上的同步、分配计数和显存不足错误。

    测量代码只通过这几个方法接触设备，所以同一套测量也能在 CPU 上（换一个计数器）完整运行。
    """

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.name = torch.cuda.get_device_name(device)  # 量的是哪块卡，就报哪块卡的名字
        self.oom_error = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)  # torch 1.13 才有 OutOfMemoryError

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def synchronize(self):
        self.torch.cuda.synchronize(self.device)

    def allocated(self):
        return self.torch.cuda.memory_allocated(self.device)

    def reset_peak(self):
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self):
        return self.torch.cuda.max_memory_allocated(self.device)

    def release(self):
        self.torch.cuda.empty_cache()

    def is_oom(self, error):
        return isinstance(error, self.oom_error) and "out of memory" in str(error)


def measure_peak(memory, run):
    """运行 run()，返回它让分配器多占用的最高字节数：峰值减去开始前已经占用的（权重、缓存等）。"""
    memory.synchronize()
    before = memory.allocated()
    memory.reset_peak()
    run()
    memory.synchronize()
    return memory.peak() - before


def out_of_memory_row(memory, error, tokens):
    """显存不足：这一行只记一句话（不留异常对象和它引用的张量），并把缓存的显存还给设备。"""
    if not memory.is_oom(error):
        raise error
    memory.release()
    return {"error": f"out of memory at {tokens} tokens"}


def probe_synthetic_blocks(torch, config, device, memory):
    """演示（不是测量）：一次性与分块各申请一遍 (tokens, hidden) 的块，返回每种调度的峰值（MiB）。峰值等于申请的大小是必然的。"""
    tokens, chunk_size = config["suffix_tokens"], config["chunk_size"]
    dtype = getattr(torch, config["dtype"])
    schedules = {"one_shot": [tokens], "chunked": [min(chunk_size, tokens - i) for i in range(0, tokens, chunk_size)]}
    results = {}
    for name, sizes in schedules.items():

        def run(sizes=sizes):
            for size in sizes:
                block = torch.empty((size, config["hidden_size"]), dtype=dtype, device=device)
                block.fill_(1.0)  # 原地写一遍，让分配真正发生；不会再分配第二块
                del block

        try:
            results[name] = {"peak_allocated_mib": round(measure_peak(memory, run) / 2**20, 2)}
        except Exception as error:  # 只接住显存不足，其余错误由 out_of_memory_row 原样抛出
            results[name] = out_of_memory_row(memory, error, tokens)
    return results


def probe_tiny_model(torch, tiny, device, memory):
    """在 device 上跑第二部分的小模型：各调度的峰值、耗时、与一次性结果的误差，再测命中 h 时的加速比。"""
    needed = ("TinyConfig", "TinyCausalLM", "chunked_prefill", "time_prefill", "random_prompt", "non_embedding_params", "cost_model_speedup")
    if any(name not in globals() for name in needed):
        return {"skipped": "小模型部分要用第二部分的定义：请先从头运行 notebook"}
    plan, tokens = tiny_model_plan(tiny), tiny["num_tokens"]
    config = TinyConfig(vocab_size=64, d_model=tiny["d_model"], n_layers=tiny["n_layers"], n_heads=tiny["n_heads"], max_positions=tokens)
    model = TinyCausalLM(config, seed=0).to(device)
    prompt = torch.tensor(random_prompt(tokens, config.vocab_size), dtype=torch.long, device=device)  # 计时前就在设备上
    schedules = {"one_shot": None, **{f"chunked_{size}": size for size in tiny["chunk_sizes"]}}
    results, reference = {}, None
    try:
        for name, size in schedules.items():
            run = (lambda: model(prompt)) if size is None else (lambda size=size: chunked_prefill(model, prompt, size))
            try:
                logits = run()[0]  # 预热，也用来核对分块结果与一次性结果相同
                reference = logits if size is None else reference
                row = {"max_abs_diff_vs_one_shot": None if reference is None else float((logits - reference).abs().max())}
                del logits
                row["peak_extra_allocated_mib"] = round(measure_peak(memory, run) / 2**20, 2)
                row["analytic_attention_scores_mib"] = plan["analytic_attention_scores_mib"][name]
                row["time_ms"] = round(1e3 * time_prefill(run, repeats=tiny["repeats"], warmup=0, synchronize=memory.synchronize), 3)
                results[name] = row
            except Exception as error:  # 显存不足记一行；NotImplementedError 等其他错误原样抛出
                results[name] = out_of_memory_row(memory, error, tokens)
        try:
            results["cached_prefill"] = probe_cached_speedup(model, prompt, tiny, memory)
        except Exception as error:
            results["cached_prefill"] = out_of_memory_row(memory, error, tokens)
    except NotImplementedError:
        results["skipped"] = "小模型部分需要先完成 TODO 9（以及第一部分的 TODO）"
    del model, prompt, reference
    memory.release()
    return results


def probe_cached_speedup(model, prompt, tiny, memory):
    """命中前 h·T 个 token（它们的 KV 事先算好、放在设备上）时 prefill 的加速比，与代价模型 S(h, T) 对照。

    两条路径都按 block_size 分块：基线从空 KV 算全部 T 个 token，命中路径只算剩下的 suffix；轮流计时、各取中位数。
    """
    import statistics

    tokens, block = len(prompt), tiny["block_size"]
    hit_len = min(round(tiny["hit_ratio"] * tokens), tokens - 1)
    prefix_kv = chunked_prefill(model, prompt[:hit_len], block)[1] if hit_len else None
    full = lambda: chunked_prefill(model, prompt, block)  # noqa: E731
    cached = lambda: chunked_prefill(model, prompt[hit_len:], block, past_kv=prefix_kv)  # noqa: E731
    full(), cached()  # 预热
    full_s, cached_s = [], []
    for _ in range(tiny["repeats"]):
        full_s.append(time_prefill(full, repeats=1, warmup=0, synchronize=memory.synchronize))
        cached_s.append(time_prefill(cached, repeats=1, warmup=0, synchronize=memory.synchronize))
    measured = statistics.median(full_s) / statistics.median(cached_s)
    config = model.config
    predicted = cost_model_speedup(hit_len / tokens, tokens, non_embedding_params(model), config.n_layers, config.d_model)
    return {"hit_len": hit_len, "full_ms": round(1e3 * statistics.median(full_s), 3), "cached_ms": round(1e3 * statistics.median(cached_s), 3), "measured": round(measured, 3), "model": round(predicted, 3), "ratio": round(measured / predicted, 3)}


def probe_on_device(torch, config, device, memory):
    """整个实测：与设备无关，设备相关的调用都在 memory 里（GPU 上是 CudaMemory）。返回结果，不打印。"""
    with memory:
        results = {"synthetic": probe_synthetic_blocks(torch, config, device, memory)}
        if "tiny_model" in config:
            results["tiny_model"] = probe_tiny_model(torch, config["tiny_model"], device, memory)
    return {"mode": "real_gpu", "device": memory.name, "torch": torch.__version__, "plan": probe_plan(config), "results": results}


def show_probe(result):
    """把结果打印一次：dry_run 用中文说明计划和怎样切换到实测；real_gpu 打印 JSON 结果（单位 MiB）。"""
    import json

    if result["mode"] != "dry_run":
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return
    plan = result["plan"]
    lines = [
        "模式：dry_run——只打印计划，没有使用 GPU，也没有导入 torch。",
        "要在 GPU 上实测：在 Colab 选「代码执行程序 → 更改运行时类型 → GPU」，或启动魔搭的 GPU 实例；"
        "把本单元格开头的 RUN_MODE 改成 'real_gpu'，先从头运行 notebook（小模型部分要用第二部分的定义），再运行本单元格。",
        "",
        f"一、合成 suffix（{plan['evidence_level']}）：{plan['suffix_tokens']} 个 token，chunk_size = {plan['chunk_size']}，分块数：{plan['chunk_count']}",
        f"    将记录的峰值：一次性 {plan['analytic_block_mib']['one_shot']} MiB，分块 {plan['analytic_block_mib']['chunked']} MiB（解析值）",
    ]
    tiny = plan.get("tiny_model")
    if tiny:
        model = tiny["model"]
        label = lambda name: "一次性" if name == "one_shot" else name.replace("chunked_", "分块 ")  # noqa: E731
        scores = "，".join(f"{label(name)} {mib} MiB" for name, mib in tiny["analytic_attention_scores_mib"].items())
        lines += [
            f"二、第二部分的小模型（d_model = {model['d_model']}，{model['n_layers']} 层，{model['n_heads']} 个头，{model['dtype']}），{tiny['num_tokens']} 个 token：",
            "    将实测：一次性与各种分块预填充的峰值显存（峰值 − 测量前已占用）、耗时、分块结果与一次性结果的最大误差；",
            f"    最大注意力分数张量的解析值：{scores}；KV cache 的解析值：{tiny['kv_cache_mib']} MiB（与分不分块无关）；",
            f"    命中率 h = {tiny['cached_prefill']['hit_ratio']}（block_size = {tiny['cached_prefill']['block_size']}）时的 prefill 加速比，与代价模型 S(h, T) 对照。",
        ]
    print("\n".join(lines))


def run_chunked_gpu_probe(run_mode="dry_run", config=None):
    """比较合成 suffix 一次性处理与分块处理的张量峰值，再在 GPU 上跑小模型；不代表真实的 prefill kernel。

    dry_run 只打印计划（不导入 torch）；real_gpu 需要 CUDA，在当前 GPU 上实测并打印结果。两种模式都返回结果。
    """
    if run_mode not in PROBE_MODES:
        raise ValueError(f"RUN_MODE 只能是 {' 或 '.join(map(repr, PROBE_MODES))}，现在是 {run_mode!r}：请改正上面的 RUN_MODE 后重新运行")
    config = dict(config or CHUNK_GPU_PROBE)
    if run_mode == "dry_run":
        result = {"mode": run_mode, "plan": probe_plan(config)}
    else:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("real_gpu 模式需要 CUDA，但当前运行时没有可用的 GPU：在 Colab 中选「更改运行时类型 → GPU」，或在魔搭启动 GPU 实例；只想看计划就把 RUN_MODE 改回 'dry_run'")
        device = torch.device("cuda", torch.cuda.current_device())
        result = probe_on_device(torch, config, device, CudaMemory(torch, device))
    show_probe(result)
    return result


probe_result = run_chunked_gpu_probe(RUN_MODE, CHUNK_GPU_PROBE)  # 赋值而不是裸表达式：结果只显示一次
