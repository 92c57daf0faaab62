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
# [![在 Colab 中打开](https://colab.research.google.com/assets/colab-badge.svg)]({{colab_url}})
#
# **难度：** 困难　|　**环境：** 先在 CPU 上跑通，GPU 只用于最后的可选实验　|　**关键词：** prefix caching、chunked prefill、KV cache 复用
#
# **怎么运行这本 notebook**
# - **Google Colab：** 点上面的徽章，或在 Colab 里选「文件 → 打开笔记本 → GitHub」，粘贴本仓库地址后选 `notebooks/ch34_prefix_cache.ipynb`。
# - **魔搭社区（ModelScope）：** 登录后进入「我的 Notebook」，启动免费的 CPU 实例（做最后的 GPU 实验时选 GPU 实例），在 JupyterLab 左侧上传本 `.ipynb` 文件后双击打开；也可以在实例的终端里 `git clone` 本仓库。
# - 本 notebook 只依赖 Python 标准库和 PyTorch（Colab 与魔搭实例都已预装），不从仓库里 import 任何东西，单个文件即可运行。
#
# **交作业：** 完成全部 TODO 后，「文件 → 下载 → 下载 .ipynb」，把文件按老师的要求命名（通常是学号，如 `2024001.ipynb`）后提交。请不要删除或改动带锁的测试单元格；即使误删了，评分脚本也会按原题恢复它们。

# %% [markdown]
# ## 本节导读
#
# 长 prompt 之所以昂贵，不只是因为 token 多，更因为其中大量内容是**重复的**：同一个 system prompt、同一份工具说明、同一个 RAG 模板，以及多轮对话里越积越长的历史。若每个请求都从第一个 token 开始重新做一遍 prefill，这些共享前缀就被一遍遍地重算，它们的 KV cache 也无法在请求之间复用。
#
# 本节分三步把这件事落到代码上：
# 1. **前缀缓存的账本**：登记前缀、为新请求找出最长命中、拆出还需计算的后缀（suffix），并统计复用了多少 token（TODO 1–8，核心部分，共 100 分）。
# 2. **分块预填充的计划**：把没有命中的长 suffix 切成固定大小的块，逐块推进，观察它如何限制单次 prefill 的工作集。
# 3. 后面的扩展部分再把账本换成真实的 KV 张量，并证明“缓存 + 分块”的结果与一次完整的 prefill 完全相同。
#
# **前置阅读：** 第 20 节 FlashAttention 模拟、第 22 节 vLLM PagedAttention、第 24 节 SGLang RadixAttention。开始之前，你应该能说清楚 KV cache 为什么能保存“历史”的计算结果。

# %% [markdown]
# ## Step 1　共享前缀为什么值得缓存
#
# 在自回归模型里，第 $i$ 个位置的 key/value 只由前 $i$ 个 token 决定。于是，两个请求只要**从开头起**有一段完全相同的 token，这一段的 KV 就完全相同，算一次就够了。前缀缓存（prefix caching）的输入是“已经缓存的若干 token 前缀”和“新请求的 prompt”，输出是“可以直接复用的前缀范围”与“仍需计算的后缀”。
#
# | 要素 | 要认出的东西 | 为什么重要 |
# |---|---|---|
# | 重复的来源 | system prompt、工具说明、RAG 模板、多轮对话历史 | 说明缓存能省下多少重复计算 |
# | 能复用的部分 | 从 prompt **第一个 token 起连续相同**的前缀 | 这部分的 prefill 可以跳过 |
# | 必须新算的部分 | 第一个不相同的 token 及其之后的全部 token | 本次请求真正要做的 prefill |

# %% [markdown]
# ## Step 2　命中的前缀与未命中的后缀
#
# 拿到新请求后，先在缓存里找**最长**的匹配前缀，再把 prompt 一分为二。注意：只有从 prompt 开头连续相同的 token 才算命中；某个 token 恰好在中间位置与缓存相同，并不构成前缀命中——它前面的上下文不同，KV 也就不同。
#
# | 输出 | 来自哪里 | 执行上的含义 |
# |---|---|---|
# | `reusable_prefix` | 缓存中、从开头起连续命中的 token | 直接使用已有的 prefill 结果（KV） |
# | `suffix` | `hit_len` 之后剩下的 token | 继续送进模型做 prefill |
# | 没有命中 | `hit_len = 0` | 整个 prompt 都是 suffix |

# %% [markdown]
# ## Step 3　长后缀如何分块执行
#
# 即使命中了前缀，剩下的 suffix 也可能很长。一次性把它送进 prefill，注意力分数矩阵和中间激活都按 suffix 长度增长，单次前向的工作集（以及显存峰值）随之变大，还会长时间占住 GPU，让正在解码的其他请求等着。分块预填充（chunked prefill）只处理未命中的 suffix，把它切成固定大小的块，一块一块地推进：
#
# | 分块相关的量 | 含义 | 对资源压力的影响 |
# |---|---|---|
# | `block_size` | 每个 chunk 最多包含的 token 数 | 决定单次 prefill 的工作集上限 |
# | `chunks` | suffix 被切出来的 token 块序列 | 可以逐块推进，而不是一口气处理完整个 suffix |
# | 尾块 | 最后一个不足 `block_size` 的 chunk | 真实输入长度很少恰好整除，必须正确处理 |

# %% [markdown]
# ## Step 4　实现前缀缓存管理器与分块计划
#
# 下面的 `PrefixCacheManager` 用最小的代码表达上面的流程：token 序列用 `list` 表示，chunk 用 `tuple` 表示。它只验证**控制逻辑**（命中多长、后缀是什么、怎样分块、复用了多少 token）；真实系统还要把命中范围映射到 KV cache 的物理存储，并管理它的生命周期——这些留到后面的扩展部分。
#
# | 阶段 | 要完成的内容 | 产出与检查项 |
# |---|---|---|
# | 表示与分块 | TODO 1–2：统一 token 类型，按 `block_size` 切块 | token 列表、chunk 边界、尾块 |
# | 前缀命中 | TODO 3–5：登记前缀、求最长命中、拆出 suffix | `hit_len`、`reusable_prefix`、`suffix` |
# | 执行账本 | TODO 6–8：生成分块计划、统计复用 | `hit_tokens`、`uncached_tokens`、`reuse_ratio`、suffix 的 chunks |
#
# **提示**
# - 基础表示：`_normalize` 把 list、tuple、range 等输入统一成普通 `list`；`_chunk_tokens` 先 normalize，再按 `block_size` 切成 tuple，最后一块可以不满。
# - 命中路径：`add_prefix` 登记前缀（重复登记不应产生新条目），`match_prefix` 只接受从开头连续的命中并取最长，`split_prompt` 据此拆出前缀和后缀。
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
        # TODO 5: hit_len 之前是可复用前缀，之后是待 prefill 的后缀（两者都是 list）。
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
        return self._chunk_tokens(suffix)
        ### END SOLUTION

# %% [markdown]
# ### 测试
#
# 运行下面的单元格检查你的实现。它与下方逐个 TODO 的评分单元格相互独立：这里全部通过，说明基本路径正确；评分时还会用随机输入、边界情况和多种 `block_size` 再检查一遍。

# %% nbgrader={"grade": false, "grade_id": "visible_tests", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 运行此单元格以测试你的实现
def test_prefix_cache_manager():
    try:
        manager = PrefixCacheManager(block_size=2)
        manager.add_prefix([1, 2, 3])
        manager.add_prefix([1, 2, 9])
        manager.add_prefix([1, 2, 3])  # 重复登记不应增加缓存条目
        assert manager.cached_prefixes == [(1, 2, 3), (1, 2, 9)]
        assert len(manager.chunked_prefixes) == 2, "重复 prefix 不应重复建立分块记录"
        assert manager.chunked_prefixes[0] == [(1, 2), (3,)]
        assert manager.match_prefix([1, 2, 3, 9]) == 3
        assert manager.match_prefix([1, 2, 9, 8]) == 3
        assert manager.match_prefix([1, 2, 0]) == 0
        prefix, suffix, hit_len = manager.split_prompt([1, 2, 3, 9])
        assert prefix == [1, 2, 3]
        assert suffix == [9]
        assert hit_len == 3
        assert manager.chunked_prefill_plan([1, 2, 3, 4, 5]) == [(1, 2), (3, 4), (5,)]
        stats = manager.cache_stats([1, 2, 3, 9])
        assert stats == {"hit_tokens": 3, "uncached_tokens": 1, "reuse_ratio": 0.75}
        assert manager.chunked_suffix_prefill_plan([1, 2, 3, 9, 10]) == [(9, 10)]
        assert manager.chunked_suffix_prefill_plan([1, 2, 3]) == [], "完整命中时不应生成 suffix chunk"
        manager_small = PrefixCacheManager(block_size=3)
        assert manager_small.chunked_prefill_plan([1, 2, 3, 4, 5, 6, 7]) == [(1, 2, 3), (4, 5, 6), (7,)], "不同 block_size 下分块边界不正确"
        print("✅ PrefixCacheManager 测试通过")
    except NotImplementedError:
        print("请先完成 TODO 代码！")
        raise
    except (AttributeError, NameError, TypeError, ValueError) as e:
        print("代码可能未完成，导致变量未定义")
        raise NotImplementedError("请先完成 TODO 代码！") from e
    except AssertionError as e:
        print(f"❌ 测试失败: {e}")
        raise NotImplementedError("请先完成 TODO 代码！") from e


test_prefix_cache_manager()

# %% [markdown]
# ### 自动评分单元格（每个 TODO 一格）
#
# 下面每个单元格检查一个 TODO，分值写在单元格的评分信息里（合计 100 分）。你能看到的只是其中一小部分断言；评分时每格还会运行隐藏测试：固定随机种子的随机输入与参考实现对比、list / tuple / range 三种输入、空 prompt、重复登记、比 prompt 更长的前缀、与缓存前缀完全相同的 prompt、多种 `block_size`，并检查查询不会改动缓存、返回值的类型完全正确。每格只检查自己的 TODO：其他 TODO 写错不会连累这一格。

# %% nbgrader={"grade": true, "grade_id": "test_todo1_normalize", "locked": true, "points": 8, "schema_version": 3, "solution": false, "task": false}
# TODO 1：_normalize 把 list / tuple / range 统一成内容相同的普通 list
assert PrefixCacheManager()._normalize((1, 2, 3)) == [1, 2, 3], "TODO 1: tuple 输入应转换成 list"
### BEGIN HIDDEN TESTS
def _hidden_todo1():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    def same(a, b):  # 类型与内容都相同；__eq__ 恒为 True 的对象过不了这一关
        if type(a) is not type(b):
            return False
        if type(a) in (list, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    rng = random.Random(3401)
    cases = [[], [7], (1, 2, 3), range(5), range(3, 12, 2), [5, 5, 1, 5]]
    cases += [rng.choices(range(6), k=rng.randint(0, 12)) for _ in range(30)]
    cases += [tuple(rng.choices(range(6), k=rng.randint(1, 12))) for _ in range(10)]
    manager = PrefixCacheManager(block_size=3)
    for tokens in cases:
        expected = list(tokens)
        got = manager._normalize(tokens)
        assert type(got) is list, f"TODO 1: _normalize 应返回 list，输入 {tokens!r} 时得到 {type(got).__name__}"
        assert same(got, expected), f"TODO 1: _normalize({tokens!r}) 应为 {expected}（保持顺序与重复 token），得到 {got!r}"
        assert list(tokens) == expected, "TODO 1: _normalize 不应修改传入的序列"


_hidden_todo1()
del _hidden_todo1
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo2_chunk_tokens", "locked": true, "points": 12, "schema_version": 3, "solution": false, "task": false}
# TODO 2：_chunk_tokens 按 block_size 切成 tuple 块，尾块可以不满
assert PrefixCacheManager(block_size=2)._chunk_tokens([1, 2, 3]) == [(1, 2), (3,)], "TODO 2: 尾块 (3,) 不能丢"
### BEGIN HIDDEN TESTS
def _hidden_todo2():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    def same(a, b):
        if type(a) is not type(b):
            return False
        if type(a) in (list, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    class Probe(PrefixCacheManager):  # 只检查 TODO 2：_normalize 换成参考实现
        def _normalize(self, tokens):
            return list(tokens)

    def oracle(tokens, size):
        tokens = list(tokens)
        return [tuple(tokens[i : i + size]) for i in range(0, len(tokens), size)]

    rng = random.Random(3402)
    assert same(Probe()._chunk_tokens(range(9)), oracle(range(9), 4)), "TODO 2: 默认 block_size=4 时切块不对：请使用 self.block_size"
    for size in (1, 2, 3, 4, 5, 7):
        manager = Probe(block_size=size)
        cases = [[], list(range(size)), list(range(2 * size)), list(range(2 * size + 1)), range(size + 1), tuple(range(3 * size - 1))]
        cases += [rng.choices(range(9), k=rng.randint(0, 20)) for _ in range(12)]
        for tokens in cases:
            expected = oracle(tokens, size)
            got = manager._chunk_tokens(tokens)
            assert type(got) is list and all(type(c) is tuple for c in got), f"TODO 2: 应返回 tuple 组成的 list，block_size={size}、输入 {tokens!r} 时得到 {got!r}"
            assert same(got, expected), f"TODO 2: block_size={size} 时 {list(tokens)} 应切成 {expected}，得到 {got!r}（检查步长、尾块和空输入）"


_hidden_todo2()
del _hidden_todo2
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo3_add_prefix", "locked": true, "points": 12, "schema_version": 3, "solution": false, "task": false}
# TODO 3：add_prefix 登记完整前缀和它的分块；重复登记不产生新条目
_m = PrefixCacheManager(block_size=2)
_m.add_prefix([4, 5, 6])
assert _m.chunked_prefixes == [[(4, 5), (6,)]], "TODO 3: chunked_prefixes 应保存前缀的分块结果"
del _m
### BEGIN HIDDEN TESTS
def _hidden_todo3():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    def same(a, b):
        if type(a) is not type(b):
            return False
        if type(a) in (list, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    class Probe(PrefixCacheManager):  # 只检查 TODO 3：其余方法换成参考实现
        def _normalize(self, tokens):
            return list(tokens)

        def _chunk_tokens(self, tokens):
            tokens = list(tokens)
            return [tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]

    rng = random.Random(3403)
    base = [rng.choices(range(5), k=rng.randint(1, 9)) for _ in range(6)]
    for size in (1, 2, 3, 5):
        manager = Probe(block_size=size)
        expected_prefixes, expected_chunks = [], []
        for step in range(25):
            tokens = rng.choice(base)[: rng.randint(0, 9)]
            shown = rng.choice([list, tuple, lambda t: range(len(t)) if t == list(range(len(t))) else list(t)])(tokens)
            assert manager.add_prefix(shown) is None, "TODO 3: add_prefix 不应返回值"
            key = tuple(tokens)
            if key not in expected_prefixes:
                expected_prefixes.append(key)
                expected_chunks.append([key[i : i + size] for i in range(0, len(key), size)])
            assert same(manager.cached_prefixes, expected_prefixes), f"TODO 3: 第 {step + 1} 次登记后 cached_prefixes 应为 {expected_prefixes}，得到 {manager.cached_prefixes!r}"
            assert type(manager.chunked_prefixes) is list and len(manager.chunked_prefixes) == len(expected_chunks), f"TODO 3: 重复登记不应再追加分块记录：应有 {len(expected_chunks)} 条，实际 {len(manager.chunked_prefixes)} 条"
            assert same(manager.chunked_prefixes, expected_chunks), f"TODO 3: block_size={size} 时 chunked_prefixes 应为 {expected_chunks}，得到 {manager.chunked_prefixes!r}"


_hidden_todo3()
del _hidden_todo3
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo4_match_prefix", "locked": true, "points": 16, "schema_version": 3, "solution": false, "task": false}
# TODO 4：match_prefix 只接受从 prompt 开头连续的命中，返回最长命中长度（int）
_m = PrefixCacheManager(block_size=2)
_m.cached_prefixes = [(1, 2), (1, 2, 3)]
assert _m.match_prefix([1, 2, 3, 4]) == 3, "TODO 4: 应返回最长的命中"
del _m
### BEGIN HIDDEN TESTS
def _hidden_todo4():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    class Probe(PrefixCacheManager):  # 只检查 TODO 4：_normalize 换成参考实现，缓存直接写入
        def _normalize(self, tokens):
            return list(tokens)

    def oracle(prefixes, prompt):
        prompt = list(prompt)
        hits = [len(p) for p in prefixes if len(p) <= len(prompt) and prompt[: len(p)] == list(p)]
        return max(hits, default=0)

    rng = random.Random(3404)
    for trial in range(60):
        stems = [rng.choices(range(4), k=rng.randint(1, 8)) for _ in range(3)]
        prefixes = []
        for _ in range(rng.randint(1, 5)):
            key = tuple(rng.choice(stems)[: rng.randint(1, 8)])
            if key not in prefixes:
                prefixes.append(key)
        manager = Probe(block_size=rng.randint(1, 4))
        manager.cached_prefixes = list(prefixes)
        manager.chunked_prefixes = [[p[i : i + manager.block_size] for i in range(0, len(p), manager.block_size)] for p in prefixes]
        before = (list(manager.cached_prefixes), [list(c) for c in manager.chunked_prefixes])
        stem = list(rng.choice(prefixes))
        prompts = [
            stem,  # 与缓存前缀完全相同
            stem + rng.choices(range(4), k=rng.randint(1, 5)),  # 命中后还有 suffix
            stem[:-1],  # 比缓存前缀短：不能命中它
            [9] + stem,  # 缓存内容出现在中间：不算前缀命中
            [],
            rng.choices(range(4), k=rng.randint(1, 10)),
        ]
        for prompt in prompts:
            for shown in (prompt, tuple(prompt)):
                expected = oracle(prefixes, prompt)
                got = manager.match_prefix(shown)
                assert type(got) is int, f"TODO 4: match_prefix 应返回 int，得到 {type(got).__name__}"
                assert got == expected, f"TODO 4: 缓存 {prefixes}、prompt {list(prompt)} 时最长前缀命中应为 {expected}，得到 {got}（只能从开头连续匹配，且要取最长）"
        assert manager.match_prefix(range(6)) == oracle(prefixes, range(6)), "TODO 4: range 输入的命中长度不对"
        assert (manager.cached_prefixes, manager.chunked_prefixes) == before, "TODO 4: 查询不应修改缓存"


_hidden_todo4()
del _hidden_todo4
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo5_split_prompt", "locked": true, "points": 12, "schema_version": 3, "solution": false, "task": false}
# TODO 5：split_prompt 返回 (可复用前缀 list, 后缀 list, hit_len)
_m = PrefixCacheManager(block_size=2)
_m.cached_prefixes = [(1, 2)]
assert _m.split_prompt((1, 2, 5)) == ([1, 2], [5], 2), "TODO 5: 前缀与后缀的拆分位置应为 hit_len"
del _m
### BEGIN HIDDEN TESTS
def _hidden_todo5():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    def same(a, b):
        if type(a) is not type(b):
            return False
        if type(a) in (list, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    class Probe(PrefixCacheManager):  # 只检查 TODO 5：命中长度由参考实现给出
        def _normalize(self, tokens):
            return list(tokens)

        def match_prefix(self, prompt_tokens):
            prompt = list(prompt_tokens)
            return max((len(p) for p in self.cached_prefixes if list(p) == prompt[: len(p)]), default=0)

    rng = random.Random(3405)
    for trial in range(40):
        stem = rng.choices(range(5), k=rng.randint(1, 8))
        manager = Probe(block_size=rng.randint(1, 4))
        manager.cached_prefixes = [tuple(stem[: rng.randint(1, len(stem))]) for _ in range(2)]
        before = list(manager.cached_prefixes)
        for prompt in (stem, stem + rng.choices(range(5), k=3), rng.choices(range(5), k=6), [], list(range(4))):
            hit = manager.match_prefix(prompt)
            expected = (prompt[:hit], prompt[hit:], hit)
            for shown in (prompt, tuple(prompt), range(4) if prompt == list(range(4)) else prompt):
                got = manager.split_prompt(shown)
                assert type(got) is tuple and len(got) == 3, f"TODO 5: split_prompt 应返回 3 元组 (prefix, suffix, hit_len)，得到 {got!r}"
                assert same(got, expected), f"TODO 5: 缓存 {manager.cached_prefixes}、prompt {shown!r} 时应返回 {expected}，得到 {got!r}（前缀与后缀都应是 list，拼起来等于原 prompt）"
        assert manager.cached_prefixes == before, "TODO 5: 查询不应修改缓存"


_hidden_todo5()
del _hidden_todo5
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo6_chunked_prefill_plan", "locked": true, "points": 10, "schema_version": 3, "solution": false, "task": false}
# TODO 6：chunked_prefill_plan 对整个 prompt 切块（与缓存是否命中无关）
assert PrefixCacheManager(block_size=3).chunked_prefill_plan([1, 2, 3, 4]) == [(1, 2, 3), (4,)], "TODO 6: 应复用 _chunk_tokens 对整个 prompt 切块"
### BEGIN HIDDEN TESTS
def _hidden_todo6():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    def same(a, b):
        if type(a) is not type(b):
            return False
        if type(a) in (list, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    class Probe(PrefixCacheManager):  # 只检查 TODO 6：切块与匹配用参考实现
        def _normalize(self, tokens):
            return list(tokens)

        def _chunk_tokens(self, tokens):
            tokens = list(tokens)
            return [tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]

        def match_prefix(self, prompt_tokens):
            prompt = list(prompt_tokens)
            return max((len(p) for p in self.cached_prefixes if list(p) == prompt[: len(p)]), default=0)

    rng = random.Random(3406)
    for size in (1, 2, 3, 4, 6):
        manager = Probe(block_size=size)
        for trial in range(10):
            prompt = rng.choices(range(7), k=rng.randint(0, 17))
            manager.cached_prefixes = [tuple(prompt[: rng.randint(0, len(prompt))])]  # 即使命中，计划也覆盖整个 prompt
            expected = [tuple(prompt[i : i + size]) for i in range(0, len(prompt), size)]
            for shown in (prompt, tuple(prompt)):
                got = manager.chunked_prefill_plan(shown)
                assert same(got, expected), f"TODO 6: block_size={size}、prompt {prompt} 的完整分块计划应为 {expected}，得到 {got!r}"
        assert same(manager.chunked_prefill_plan(range(7)), [tuple(range(7))[i : i + size] for i in range(0, 7, size)]), "TODO 6: range 输入的分块计划不对"


_hidden_todo6()
del _hidden_todo6
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo7_cache_stats", "locked": true, "points": 15, "schema_version": 3, "solution": false, "task": false}
# TODO 7：cache_stats 返回 hit_tokens、uncached_tokens（int）和 reuse_ratio（float）
_m = PrefixCacheManager(block_size=2)
_m.cached_prefixes = [(1, 2)]
assert _m.cache_stats([1, 2, 3, 4]) == {"hit_tokens": 2, "uncached_tokens": 2, "reuse_ratio": 0.5}, "TODO 7: 账本数值不对"
del _m
### BEGIN HIDDEN TESTS
def _hidden_todo7():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr", "abs", "sorted"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    class Probe(PrefixCacheManager):  # 只检查 TODO 7：命中长度由参考实现给出
        def _normalize(self, tokens):
            return list(tokens)

        def match_prefix(self, prompt_tokens):
            prompt = list(prompt_tokens)
            return max((len(p) for p in self.cached_prefixes if list(p) == prompt[: len(p)]), default=0)

    def check(manager, prompt):
        hit = manager.match_prefix(prompt)
        got = manager.cache_stats(prompt)
        where = f"缓存 {manager.cached_prefixes}、prompt {list(prompt)}"
        assert type(got) is dict, f"TODO 7: cache_stats 应返回 dict，得到 {type(got).__name__}"
        assert sorted(got) == ["hit_tokens", "reuse_ratio", "uncached_tokens"], f"TODO 7: 键应恰好是 hit_tokens、uncached_tokens、reuse_ratio，得到 {sorted(got)}"
        assert type(got["hit_tokens"]) is int and got["hit_tokens"] == hit, f"TODO 7: {where} 时 hit_tokens 应为 {hit}，得到 {got['hit_tokens']!r}"
        assert type(got["uncached_tokens"]) is int and got["uncached_tokens"] == len(prompt) - hit, f"TODO 7: {where} 时 uncached_tokens 应为 {len(prompt) - hit}，得到 {got['uncached_tokens']!r}"
        ratio = hit / len(prompt) if len(prompt) else 0.0
        assert type(got["reuse_ratio"]) is float, f"TODO 7: reuse_ratio 应为 float（空 prompt 时为 0.0），得到 {type(got['reuse_ratio']).__name__}"
        assert abs(got["reuse_ratio"] - ratio) <= 5e-5, f"TODO 7: {where} 时 reuse_ratio 应约为 {round(ratio, 4)}（命中 token / prompt 长度），得到 {got['reuse_ratio']!r}"

    rng = random.Random(3407)
    manager = Probe(block_size=2)
    check(manager, [])  # 空 prompt 不应除以零
    check(manager, [1, 2, 3])
    for trial in range(60):
        stem = rng.choices(range(4), k=rng.randint(1, 12))
        manager.cached_prefixes = [tuple(stem[: rng.randint(1, len(stem))]) for _ in range(rng.randint(1, 3))]
        before = list(manager.cached_prefixes)
        for prompt in (stem, stem + rng.choices(range(4), k=rng.randint(1, 9)), rng.choices(range(4), k=rng.randint(1, 7)), list(manager.cached_prefixes[0])):
            check(manager, prompt)
            check(manager, tuple(prompt))
        assert manager.cached_prefixes == before, "TODO 7: 统计不应修改缓存"


_hidden_todo7()
del _hidden_todo7
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_todo8_chunked_suffix_plan", "locked": true, "points": 15, "schema_version": 3, "solution": false, "task": false}
# TODO 8：chunked_suffix_prefill_plan 只对未命中的 suffix 切块；完整命中时为空
_m = PrefixCacheManager(block_size=2)
_m.cached_prefixes = [(1, 2, 3)]
assert _m.chunked_suffix_prefill_plan([1, 2, 3, 4, 5, 6]) == [(4, 5), (6,)], "TODO 8: 只对 suffix 切块"
del _m
### BEGIN HIDDEN TESTS
def _hidden_todo8():
    import builtins
    import random

    for name in ("type", "len", "all", "zip", "list", "tuple", "range", "repr"):
        assert name not in globals() and type(getattr(builtins, name)).__name__ in ("builtin_function_or_method", "type"), f"内置函数 {name} 被替换或遮蔽，本格无法评分"

    def same(a, b):
        if type(a) is not type(b):
            return False
        if type(a) in (list, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    class Probe(PrefixCacheManager):  # 只检查 TODO 8：其余方法全部用参考实现
        def _normalize(self, tokens):
            return list(tokens)

        def _chunk_tokens(self, tokens):
            tokens = list(tokens)
            return [tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]

        def match_prefix(self, prompt_tokens):
            prompt = list(prompt_tokens)
            return max((len(p) for p in self.cached_prefixes if list(p) == prompt[: len(p)]), default=0)

        def split_prompt(self, prompt_tokens):
            prompt = list(prompt_tokens)
            hit = self.match_prefix(prompt)
            return prompt[:hit], prompt[hit:], hit

    rng = random.Random(3408)
    for size in (1, 2, 3, 5):
        manager = Probe(block_size=size)
        for trial in range(15):
            stem = rng.choices(range(5), k=rng.randint(1, 10))
            manager.cached_prefixes = [tuple(stem[: rng.randint(1, len(stem))]), tuple(stem)]
            before = list(manager.cached_prefixes)
            for prompt in (stem, stem + rng.choices(range(5), k=rng.randint(1, 11)), rng.choices(range(5), k=rng.randint(0, 9))):
                hit = manager.match_prefix(prompt)
                suffix = prompt[hit:]
                expected = [tuple(suffix[i : i + size]) for i in range(0, len(suffix), size)]
                for shown in (prompt, tuple(prompt)):
                    got = manager.chunked_suffix_prefill_plan(shown)
                    assert same(got, expected), f"TODO 8: block_size={size}、缓存 {before}、prompt {prompt} 时 suffix {suffix} 的分块应为 {expected}，得到 {got!r}（完整命中时应为 []）"
            assert manager.cached_prefixes == before, "TODO 8: 生成计划不应修改缓存"


_hidden_todo8()
del _hidden_todo8
### END HIDDEN TESTS

# %% [markdown]
# ---
# ## 🛑 到这里先停一停 🛑
#
# 请先独立完成 TODO 1–8，并让上面的测试单元格通过，再往下走。
#
# 参考答案与逐条解析**不在**这本学生版 notebook 里：它们在讲师用 `make` 生成的 `solutions/ch34_prefix_cache.ipynb` 中，通常在作业截止后发布。卡住时，先回到 Step 2–3 的表格，对照测试单元格里的断言想一想“输入是什么、应该返回什么类型”。

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
# **TODO 8　只对 suffix 分块。** `_, suffix, _ = self.split_prompt(prompt_tokens)`，再 `return self._chunk_tokens(suffix)`。命中的前缀不应再进入 prefill 计划；完整命中时 suffix 为空，计划就是 `[]`。
#
# ### 要点回顾
# - **前缀缓存为什么成立：** 因果注意力下，一个位置的 KV 只取决于它和它之前的 token，所以共享前缀的 KV 对所有请求都一样。
# - **为什么按块组织：** 把前缀切成固定大小的块，便于按块分配、共享和回收 KV 显存（vLLM 的 PagedAttention），也让调度器能以块为粒度安排 prefill。
# - **工程上还缺什么：** 真实系统里缓存占用显存，必须配合淘汰策略（LRU）、引用计数和物理块管理；第三部分（选做）会实现它们。

# %% [markdown]
# ## 证据边界：这一部分证明了什么，没证明什么
#
# - **证明了：** 命中长度、suffix 拆分、分块计划和 token 级账本的控制逻辑是对的（随机输入与参考实现逐一比对）。
# - **没有证明：** 真实 KV 张量的复用是否正确、显存省了多少、TTFT / TPOT 和吞吐如何变化。`reuse_ratio` 是 token 数之比，不是显存或时间之比。第二部分用一个小 Transformer 给出“缓存后 logits 与完整 prefill 相同”的证据和 CPU 上的实测；服务级别的指标需要第 69 节的 backend benchmark。
# - **没有实现：** LRU 淘汰、引用计数、物理 block 分配、跨 worker 的 KV 传输。其中前三项是第三部分（选做）的内容。

# %% [markdown]
# <!-- KV-SECTION-ANCHOR: the issue-4 section (TODO 9-10) is inserted above this cell -->

# %% [markdown]
# <!-- BLOCK-SECTION-ANCHOR: the issue-5 section (challenge TODOs) is inserted above this cell -->

# %% [markdown]
# ## Step 5　GPU 可选实验：观察分块带来的资源边界
#
# 这是本 notebook 的最后一个单元格。它用**合成的** hidden states 比较“一次性处理整个 suffix”与“按 chunk 处理 suffix”时的显存分配峰值，帮助理解分块限制了什么。它不是真实的 prefix cache、KV cache 或 serving benchmark。
#
# - 默认 `RUN_MODE = 'dry_run'`：只打印实验计划，不导入 torch、不申请任何 CUDA 张量，在任何机器上都能运行。
# - 在 Colab（「代码执行程序 → 更改运行时类型 → GPU」）或魔搭的 GPU 实例上，把 `RUN_MODE` 改成 `'real_gpu'` 再运行，会得到真实的峰值显存。
# - 在没有 CUDA 的机器上选 `'real_gpu'` 会得到一条说明原因的错误；`RUN_MODE` 写错也会直接报错。

# %%
# GPU 可选实验的配置：默认只打印计划，不申请 CUDA 张量。
RUN_MODE = "dry_run"  # 'dry_run' 或 'real_gpu'
CHUNK_GPU_PROBE = {
    "suffix_tokens": 4096,
    "hidden_size": 1024,
    "chunk_size": 512,
    "dtype": "float16",
}
PROBE_MODES = ("dry_run", "real_gpu")


def run_chunked_gpu_probe(run_mode="dry_run", config=None):
    """比较合成 suffix 一次性处理与分块处理的张量峰值；不代表真实的 prefill kernel。

    dry_run 只返回并打印计划（不导入 torch）；real_gpu 需要 CUDA，返回计划与实测峰值。
    """
    import json

    if run_mode not in PROBE_MODES:
        raise ValueError(f"RUN_MODE 只能是 {' 或 '.join(map(repr, PROBE_MODES))}，现在是 {run_mode!r}：请改正上面的 RUN_MODE 后重新运行")
    config = dict(config or CHUNK_GPU_PROBE)
    tokens, chunk_size = config["suffix_tokens"], config["chunk_size"]
    plan = {
        "suffix_tokens": tokens,
        "chunk_size": chunk_size,
        "chunk_count": (tokens + chunk_size - 1) // chunk_size,
        "evidence_level": "synthetic_gpu_chunk_probe",
    }
    if run_mode == "dry_run":
        print(json.dumps({"mode": run_mode, "plan": plan}, ensure_ascii=False, indent=2))
        return plan

    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("real_gpu 模式需要 CUDA，但当前运行时没有可用的 GPU：在 Colab 中选「更改运行时类型 → GPU」，或在魔搭启动 GPU 实例；只想看计划就把 RUN_MODE 改回 'dry_run'")
    device = torch.device("cuda")
    dtype = getattr(torch, config["dtype"])
    schedules = {"one_shot": [tokens], "chunked": [min(chunk_size, tokens - i) for i in range(0, tokens, chunk_size)]}
    results = {}
    for name, sizes in schedules.items():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        for size in sizes:
            block = torch.empty((size, config["hidden_size"]), dtype=dtype, device=device)
            block = block + 1  # 读写一遍，让分配真正发生
            del block
        torch.cuda.synchronize(device)
        results[name] = {"peak_allocated_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 2)}
    torch.cuda.empty_cache()
    result = {"mode": run_mode, "plan": plan, "results": results, "device": torch.cuda.get_device_name(0)}
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return result


run_chunked_gpu_probe(RUN_MODE, CHUNK_GPU_PROBE)
