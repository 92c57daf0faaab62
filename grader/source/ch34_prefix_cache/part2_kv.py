# %% [markdown]
# ---
# ## 第二部分（{{points:kv}}）：从账本到真实 KV —— 在一个小 Transformer 上做前缀缓存与分块预填充
#
# **学习目标：** 学完这一部分，你能
# - 说明带 KV cache 接着算为什么等于从头完整算（因果性），以及它依赖的两个前提：右下角对齐的掩码和绝对位置；
# - 实现分块预填充和一个持有真实 KV 的前缀缓存，并用 `torch.allclose` 证明结果不变；
# - 用一个代价模型估算命中 h 能让 prefill 快多少，说清楚分块省下了什么、没省下什么。
#
# **用时：** 约 1.5 小时（TODO 9–10）。**需要：** 第一部分的 `PrefixCacheManager`（TODO 10 用它找命中；先让第一部分的可见检查通过）。
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
# 这一部分开始用 PyTorch（只用 CPU，几秒内跑完）。这里的 `chunk_size`，以及 `KVPrefixCache` 沿用第一部分的参数名 `block_size`，都是第一部分的分块大小，不是 KV 块的大小。

# %% nbgrader={"grade": false, "grade_id": "kv_imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math
import random
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn as nn

# %% nbgrader={"grade": false, "grade_id": "kv_visible_runner", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 可见检查的运行工具（第二、三部分共用）：逐个运行检查，每个 TODO 一行结果
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


def todo_of_frame(frame):
    """这一层调用是哪个 TODO 的方法（"TODO 17"）；不是 TODO 的方法时为 None。"""
    owner = frame.f_locals.get("self")
    classes = [cls.__name__ for cls in type(owner).__mro__] if owner is not None else [None]
    for name in classes:
        todo = VISIBLE_TODO_OF.get((name, frame.f_code.co_name))
        if todo:
            return todo
    return None


def todo_of_traceback(error):
    """(TODO, 方法名)：抛出 error 的最内层 TODO 方法；找不到时为 None。"""
    found = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        todo = todo_of_frame(frame)
        if todo:
            found = (todo, frame.f_code.co_name)
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
            skipped = run_boxed(check, last_words=lambda timeout, todo=todo: timed_out_line(todo, timeout, todo_of_frame))
        except CheckTimeout as timeout:
            message = timed_out_line(todo, timeout, todo_of_frame)
            print(message)
            failures.append(TimeoutError(message))
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


# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "table_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 显示表格的小工具：Jupyter / Colab 里画成表格，纯 Python 里打印文本
import re
from html import escape


def format_table(rows, columns) -> str:
    """rows: dict 的列表；columns: (键, 表头, 格式) 的列表，例如 ("h", "命中率 h", "{:.2f}")；返回 Markdown 表格。"""
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt.format(row[key]) for key, _, fmt in columns) + " |")
    return "\n".join(lines)


class Table:
    """一张算出来的表。Jupyter / Colab 显示它的 HTML（数字右对齐、不在数字中间折行），别处显示 Markdown 文本。"""

    def __init__(self, rows, columns):
        self.rows, self.columns = list(rows), list(columns)

    def __repr__(self):
        return format_table(self.rows, self.columns)

    def _repr_html_(self):
        head = "".join(f"<th>{escape(title)}</th>" for _, title, _ in self.columns)
        body = "".join(
            "<tr>" + "".join(self._cell(row[key], fmt) for key, _, fmt in self.columns) + "</tr>" for row in self.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    @staticmethod
    def _cell(value, fmt):
        text = fmt.format(value)
        align = "right" if re.match(r"[-+−]?[0-9.,]", text) else "left"  # 数字右对齐，文字左对齐
        return f'<td style="text-align: {align}; white-space: nowrap">{escape(text)}</td>'


def show_table(rows, columns) -> None:
    """在 Jupyter / Colab 里显示渲染好的表格；没有 IPython 的地方（纯 Python 运行）打印 Markdown 文本。"""
    table = Table(rows, columns)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # 纯 Python：没有 IPython 也照样能读
        print(repr(table))
        return
    if get_ipython() is None:
        print(repr(table))
    else:
        display(table)


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
# **为什么缓存后的计算与完整计算相等？因为因果性。** 第 `t` 个位置的 K、V 只取决于 token `0..t`（每一层都只看得到自己和前面的位置），与后面跟着什么 token 无关。所以两个 prompt 只要前 `h` 个 token 相同，它们前 `h` 个位置的 KV 就逐位相同，可以直接搬过来用；剩下的 token 拿着这份 KV 接着算，每个位置看到的 key/value 与完整计算时一模一样，结果自然相同（只差浮点运算顺序带来的 1e-6 量级误差）。这是 float32 下的结论：bf16 的有效位（significand）只有 8 个二进制位，约合 2–3 位十进制有效数字，命中路径与未命中路径的矩阵形状不同、kernel 的累加顺序也不同，舍入误差就可能让 logits 差出可见的量、甚至让贪心解码选出不同的 token。vLLM 和 SGLang 的 issue 里常有用户问“开了 prefix caching 输出就变了”，原因多半就是这个。
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

# %% [markdown]
# {{figure:chunk_mask}}

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
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开下面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 9 · 提示 1</summary>
#
# 模型怎么知道第二块的第一个 token 在哪个位置、能看到哪些 key？全靠你传给它的 `past_kv`。
#
# </details>
#
# <details><summary>TODO 9 · 提示 2</summary>
#
# 每块调用一次模型，把**这一次返回的** `past_kv` 留下来交给下一次调用（第一次用调用者传进来的那个）；每块的 logits 收进一个列表，最后沿第 0 维拼起来，和最后一块返回的 `past_kv` 一起返回。
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "visible_todo9", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title TODO 9 的可见检查：运行即可
# 运行此单元格检查 TODO 9：两条基本路径（无前缀、带前缀 past_kv），一秒内跑完；评分时还有 4 格隐藏检查。
def visible_check_todo9():
    model = TinyCausalLM(TinyConfig(), seed=1)
    prompt = [5, 17, 42, 8, 8, 30, 1, 63, 12, 7, 19, 2, 50]
    full_logits, _ = model(prompt)
    where = "TODO 9: chunked_prefill(model, 13 个 token, chunk_size=5)"
    result = chunked_prefill(model, prompt, 5)
    assert isinstance(result, tuple) and len(result) == 2, (
        f"{where} 应返回 (logits, past_kv) 二元组，得到 {type(result).__name__}："
        "函数末尾是否缺了 return？"
    )
    logits, kv = result
    assert tuple(logits.shape) == (13, 64), (
        f"{where} 的 logits 形状应为 (13, 64)（3 块的 logits 按顺序拼接），得到 "
        f"{tuple(logits.shape)}"
    )
    gap = (logits - full_logits).abs().max().item()
    assert torch.allclose(logits, full_logits, rtol=1e-4, atol=1e-5), (
        f"{where} 的 logits 应与一次完整前向 model(prompt) 相同，最大误差 {gap:.1e}："
        "每块要带上一块返回的 past_kv"
    )
    assert kv_length(kv) == 13, (
        f"{where} 返回的 past_kv 应覆盖 13 个 token，得到 {kv_length(kv)} 个"
    )
    _, prefix_kv = model(prompt[:6])
    where = "TODO 9: chunked_prefill(model, 后 7 个 token, chunk_size=3, past_kv=前 6 个 token 的 KV)"
    result = chunked_prefill(model, prompt[6:], 3, past_kv=prefix_kv)
    assert isinstance(result, tuple) and len(result) == 2, (
        f"{where} 应返回 (logits, past_kv) 二元组，得到 {type(result).__name__}："
        "函数末尾是否缺了 return？"
    )
    logits, kv = result
    assert tuple(logits.shape) == (7, 64), (
        f"{where} 的 logits 形状应为 (7, 64)，得到 {tuple(logits.shape)}"
    )
    gap = (logits - full_logits[6:]).abs().max().item()
    assert torch.allclose(logits, full_logits[6:], rtol=1e-4, atol=1e-5), (
        f"{where} 的 logits 应等于完整前向的 logits[6:]，最大误差 {gap:.1e}：第一块要接着传入的 "
        "past_kv 算"
    )
    assert kv_length(kv) == 13, (
        f"{where} 返回的 past_kv 应覆盖前缀 6 + 新 token 7 = 13 个位置，得到 {kv_length(kv)} 个"
    )
    assert kv_length(prefix_kv) == 6, (
        f"{where} 不应修改传入的 past_kv：它原本覆盖 6 个 token，现在是 {kv_length(prefix_kv)} "
        "个"
    )


run_visible_checks([("TODO 9", visible_check_todo9)])


# %% [markdown]
# ### 2.3　TODO 10：带真实 KV 的前缀缓存
#
# 现在把第一部分的账本和真实 KV 接起来。`KVPrefixCache` 用组合的方式持有一个 `PrefixCacheManager`（`self.manager`，负责登记前缀、找最长命中），再用字典 `self.prefix_kv` 保存每个已登记前缀的 KV：键是 `tuple(前缀 token)`，值是恰好覆盖这个前缀的 `past_kv`。
#
# **`add_prefix(token_ids)`**：算出前缀的 KV（用 `chunked_prefill`，分块大小 `chunk_size = self.block_size`），存进 `self.prefix_kv`，再在 `self.manager` 里登记。已经登记过的前缀什么也不做，不要重算。
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
# 评分时会把 `model` 包一层计数器：`prefill` 送入模型的 token 数必须正好是 `len(prompt) - hit_len`（重算已缓存的前缀会被发现），每次最多分块大小（`self.block_size`）个；还会登记多个前缀、检查无命中和完整命中，并把同一个 prompt prefill 两次、对比结果，确认缓存没被改坏。

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
# 卡住时再打开，一次一条：先看提示 1（往哪里想），还不够再打开下面的提示 2（思路）。提示里没有答案代码。
#
# <details><summary>TODO 10 · add_prefix · 提示 1</summary>
#
# `add_prefix` 要做两件事：把前缀的 KV 存进字典，在账本里登记。先做哪件？怎样认出已经登记过的前缀？
#
# </details>
#
# <details><summary>TODO 10 · add_prefix · 提示 2</summary>
#
# 用 `tuple(tokens)` 作键；键不在字典里时才用 `chunked_prefill`（`chunk_size = self.block_size`）算出 KV 存进去，然后再调用账本的 `add_prefix`。
#
# </details>
#
# <details><summary>TODO 10 · prefill · 提示 1</summary>
#
# 整个 prompt 都命中时，还剩几个 token 要送进模型？最后一个位置的 logits 从哪里来？
#
# </details>
#
# <details><summary>TODO 10 · prefill · 提示 2</summary>
#
# `hit_len` 取账本的命中长度与 `len(tokens) - 1` 中较小的一个。字典的键是命中的那个**完整**前缀（长度是账本的命中长度，不是 `hit_len`），用 `tokens` 而不是 `token_ids` 切；取出的 KV 每层只留前 `hit_len` 个位置（切片是新的视图，不写回字典），再把 `hit_len` 之后的 token 交给 `chunked_prefill` 接着算。
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "visible_todo10", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title TODO 10 的可见检查：运行即可
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
    assert tuple(logits.shape) == (3, 64), (
        f"{where} 的 logits 只含算出来的 3 个 suffix token，形状应为 (3, 64)，得到 "
        f"{tuple(logits.shape)}"
    )
    gap = (logits - full_logits[6:]).abs().max().item()
    assert torch.allclose(logits, full_logits[6:], rtol=1e-4, atol=1e-5), (
        f"{where} 的 logits 应等于完整前向的 logits[6:]，最大误差 {gap:.1e}"
    )
    assert kv_length(kv) == 9, (
        f"{where} 返回的 past_kv 应覆盖整个 prompt 的 9 个 token，得到 {kv_length(kv)} 个"
    )
    where = "TODO 10: prefill(torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9]))（LongTensor 输入）"
    try:
        tensor_result = cache.prefill(torch.tensor(prompt))
    except KeyError as error:
        raise AssertionError(
            f"{where} 抛出 KeyError: {error}：self.prefix_kv 的键是普通 int 的 tuple，"
            "要用 as_token_list 之后的 tokens 切片做键，不是 token_ids"
        ) from None
    assert tensor_result[2] == 6, (
        f"{where} 的 hit_len 应为 6（与 list 输入相同），得到 {tensor_result[2]!r}"
    )
    where = "TODO 10: prefill([1, 2, 3, 4, 5, 6])（整个 prompt 都已缓存）"
    try:
        logits, kv, hit_len = cache.prefill([1, 2, 3, 4, 5, 6])
    except ValueError as error:
        raise AssertionError(
            f"{where} 抛出 ValueError: {error}：整个 prompt 都命中时 suffix 为空，而 chunked_prefill "
            "不接受空输入。hit_len 应取 len(prompt) - 1，最后一个 token 仍要计算"
        ) from None
    assert hit_len == 5, (
        f"{where} 的 hit_len 应为 len(prompt) - 1 = 5（最后一个 token 仍要计算，才有它的 logits）"
        f"，得到 {hit_len!r}"
    )
    assert torch.allclose(logits, full_logits[5:6], rtol=1e-4, atol=1e-5), (
        f"{where} 的 logits 应等于完整前向的 logits[5:6]"
    )
    return None


run_visible_checks([("TODO 10", visible_check_todo10)])


# %%
#| checks: todo9.py
#| checks: todo10.py

# %% [markdown] tags=["solutions-only"]
# #### 参考答案解析（TODO 9–10）
#
# **TODO 9　分块预填充。** 循环 `for start in range(0, len(token_ids), chunk_size)`，每块 `token_ids[start : start + chunk_size]`（切片越界自动截断，尾块和“chunk 比 prompt 长”都不用特判），调用 `logits, past_kv = model(chunk, past_kv=past_kv)`，最后 `torch.cat` 各块 logits。关键只有一处：**把上一块返回的 `past_kv` 交给下一块**，第一块用调用者传进来的 `past_kv`。模型从 `past_kv` 的长度推出位置偏移和掩码偏移；传 `None` 就等于说“我在位置 0”，位置会从 0 重数、掩码按左上角对齐，后面的块看不到前面的 token；一直传最初的 `past_kv`，每块就只看得到前缀。
#
# **TODO 10　带真实 KV 的前缀缓存。** `add_prefix`：已登记就返回；否则 `chunked_prefill` 算出 KV 存进 `self.prefix_kv[tuple(tokens)]`，再 `self.manager.add_prefix`——先有 KV 再登记，账本里出现的前缀就一定能取到 KV。`prefill`：`match_len = self.manager.match_prefix(tokens)`，`hit_len = min(match_len, len(tokens) - 1)`；命中时从 `self.prefix_kv[tuple(tokens[:match_len])]` 取出 KV，每层切 `k[:, :hit_len]`（完整命中时少一个位置，否则就是整条），再 `chunked_prefill(self.model, tokens[hit_len:], self.block_size, past_kv=...)`。切片是新的视图、`torch.cat` 生成新张量，缓存条目本身从不被写。常见错误：完整命中时 `hit_len = match_len`（suffix 为空，没有 logits）；用 `tokens[:hit_len]` 当键（完整命中时这个键不存在）；把切短的 KV 写回缓存（之后命中同一前缀的请求会少一个位置，位置错位）；命中后仍把整个 prompt 送进模型。
#
# 真实系统多走一步：它们在 prefill 的途中一块一块地登记，`add_prefix` 这一步就省了，而且不用等整个 prompt 算完。vLLM 在调度器给一个请求分配这一步的块时（`kv_cache_manager.allocate_slots` 里调用 `cache_blocks`）就登记这一步会填满的满块，设计文档 `docs/design/prefix_caching.md` 说这样“同一批里的其他请求也能复用这个块”；SGLang 每算完一块就把已算好的前缀插进基数树（`cache_unfinished_req`）。SGLang 的基数树页大小为 1 时，命中可以停在任意 token 上，而不只是“登记过的完整前缀”；`--page-size` 大于 1 时，`match_prefix` 先把查询截到页大小的整数倍，命中按页对齐，和 vLLM 的整块一样。

# %% [markdown]
# ### 2.4　代价模型：命中 h 能省多少？
#
# 设模型有 `L` 层、宽度 `d`，`N` 个非嵌入参数。这里把 `lm_head` 也算进 `N`，因为本章的小模型对送入的每个 token 都算 logits。真实引擎每个请求每一步只为最后一个位置算一行 logits，所以套到真实模型上时 `N` 不含 `lm_head`（见下面的深入框）。prefill `T` 个 token 的浮点运算量：
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
# 两点说明：（1）我们的注意力先算完整的 `T × S` 分数再掩码，被掩掉的上三角也算了；下面的计时里，基线（空缓存，`h = 0`）与命中路径都走 `chunked_prefill`、按分块大小 `c` 分块，被白算的只剩每块对角线上的小三角，约多出 `c / T` 的注意力运算，与代价模型的假设基本一致。（2）代价模型只数浮点运算：调用开销、KV 拼接（`torch.cat` 每块复制一次已有 KV）和内存带宽都不在里面，suffix 越短，这些固定开销的占比越大，实测/模型 的比值就越低。
#
# <details><summary>深入：vLLM 0.33 只为每个请求的最后一个位置算 logits</summary>
#
# `vllm/v1/worker/gpu_model_runner.py` 在 `_prepare_inputs` 里取 `logits_indices = query_start_loc[1:] - 1`：每个被调度的请求每一步一行。一个长 prompt 中间的 prefill 块也照算这一行、照样采样，再把采样结果丢掉，源码注释说这样做是“为了简单”（we do so for simplicity）。所以 `lm_head` 的运算量按“每个请求每步一行”另算，prefill 几千个 token 时可以忽略。
#
# </details>
#
# 下面的单元格先定义测量用的工具函数（最后的 GPU 实验也用它们），再在 CPU 上实测。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "kv_measure_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 2.4 节的测量工具：计时、代价模型、注意力分数张量的 hook、表格
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
    if tuple(logits.shape) != tuple(reference.shape):
        how = f"形状是 {tuple(logits.shape)}，应为 {tuple(reference.shape)}"
    elif not torch.allclose(logits, reference, rtol=1e-4, atol=1e-4):
        how = f"形状都是 {tuple(logits.shape)}，但数值不同：最大差 {(logits - reference).abs().max().item():.2e}"
    else:
        return logits
    raise RuntimeError(
        f"测量前的核对：chunked_prefill(model, {len(prompt)} 个 token, chunk_size={chunk_size}) 的 logits 与一次性前向不同"
        f"（{how}）。回到 TODO 9（chunked_prefill）检查：每块要带上一块返回的 past_kv"
    )


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
    """每个 h > 0 的行一句话：代价模型 S(h,T) 落在这一行的比值范围之内、之上还是之下。
    范围宽到连“没有加速”（比值 1）都包含、或最大超过最小的两倍时，只说噪声太大、不下结论。"""
    noise = next((r for r in rows if r["hit_len"] == 0), None)
    width = (noise["spread_hi"] - noise["spread_lo"]) if noise else 0.0
    lines = []
    for r in rows:
        if r["hit_len"] == 0:
            continue
        lo, hi = r["spread_lo"], r["spread_hi"]
        if lo <= 1.0 <= hi or hi > 2 * lo:
            why = "连“没有加速”（比值 1）都在范围里" if lo <= 1.0 <= hi else f"最大是最小的 {hi / max(lo, 1e-12):.1f} 倍"
            verdict = f"噪声太大，不能下结论（{why}）：机器大概正忙，空闲时重新运行这个单元格"
        elif lo <= r["model"] <= hi:
            verdict = "代价模型落在实测范围之内：在这次的噪声下与模型一致"
        elif hi < r["model"]:
            verdict = "整段范围都低于代价模型：比模型慢"
        else:
            verdict = "整段范围都高于代价模型：比模型快"
        if "不能下结论" not in verdict and noise and (hi - lo) / max(r["measured"], 1e-12) > width / max(noise["measured"], 1e-12) * 2:
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
#@title 实测：命中率 h 与 prefill 耗时（CPU，约十秒）
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
    print(f"T = 512，d = 128，L = 2，N = {non_embedding_params(speed_model):,}，分块大小 = 64，单线程；21 轮交错计时，每轮每个 h 各测一次")
    show_table(speed_rows, SPEEDUP_COLUMNS)
    noise = speed_rows[0]
    print(f"\nh = 0 这一行两边做的是同一件事：它的比值在 {noise['spread_lo']:.2f}–{noise['spread_hi']:.2f} 之间，这就是这次测量的噪声。")
    print("\n".join(speedup_verdicts(speed_rows)))
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        fig, ax = plt.subplots(figsize=(9.5, 4.5))
        hs = [r["h"] for r in speed_rows]
        ax.fill_between(hs, [r["spread_lo"] for r in speed_rows], [r["spread_hi"] for r in speed_rows], alpha=0.25, label="measured, min-max of 21 rounds")
        ax.plot(hs, [r["measured"] for r in speed_rows], "o-", label="measured, median")
        ax.plot(hs, [r["model"] for r in speed_rows], "s--", label="cost model S(h,T)")
        ax.set_xlabel("hit ratio h")
        ax.set_ylabel("prefill speedup")
        ax.set_title("cached vs full prefill, T=512 (CPU)")
        ax.legend(loc="upper left")
        fig.tight_layout()
        plt.show()

# %% [markdown]
# ### 分块预填充省下了什么，没省下什么
#
# 一次性预填充 `T` 个 token 时，每层的注意力分数张量是 `(n_heads, T, T)`，随 `T` 平方增长；按 `c` 个 token 一块送入时，第 `j` 块的分数张量是 `(n_heads, c, 已有 token + c)`，最大的一块约 `n_heads · c · T`。所以注意力的工作集从 `O(T²)` 降到 `O(c·T)`，MLP 的中间激活也从 `T × 4d` 降到 `c × 4d`。
#
# **这个 `O(T²) → O(c·T)` 只对本章这种朴素注意力成立**：它把分数张量整个算出来放在内存里。用 FlashAttention（第 20 章）时，分数按小块在片上算完就丢，从不完整写进显存，一次性 prefill 的注意力本来就只要 `O(T)` 的额外内存。那时分块限制的主要是线性层和 MLP 的激活（`c × 4d` 而不是 `T × 4d`），也就是一步里送进模型的 token 数。vLLM 正是按这个数预留激活内存：启动时用一步最多的 token 数跑一遍假的前向，量出峰值，剩下的显存才分给 KV cache（见下面的深入框）。
#
# **没省下的：**
#
# - **KV cache 本身。** prefill 结束时 `T` 个 token 的 K、V 一个不少：`2 · L · T · d` 个元素，和分不分块无关。下表最后一列就是它。
# - **运算量。** 每个 token 仍要看它前面的全部 token，总 FLOPs 不变（我们的实现把掩掉的部分也算了，分块后白算的反而更少）。
# - **时间。** 块越小，调用次数越多；每块都要把已有 KV 重新读一遍，朴素的连续 KV（`torch.cat`）还要每块复制一遍。分块换来的是峰值内存和调度的灵活性：serving 系统把一个长 prompt 拆开，让正在解码的请求不必等整段 prefill 做完。vLLM v1 的调度器没有“prefill 阶段”和“decode 阶段”之分：每一步先按接纳的先后顺序排**已在运行**的请求（在 decode 的，和 prefill 还没做完、这一步接着送下一块的，一视同仁），各拿它欠的 token 数，直到这一步的 token 预算用完，剩下的预算才接纳等待队列里的新请求；所以 decode 和 prefill 块落在同一步里。SGLang 默认把 prefill 和 decode 放进不同的前向。这一点这里没有测，第四部分的调度器会实现 vLLM 的排法。
#
# <details><summary>深入：两个引擎的源码在哪里（vLLM 0.33、SGLang）</summary>
#
# - vLLM：`vllm/v1/core/sched/scheduler.py` 的 `schedule`，先是注释 “First, schedule the RUNNING requests” 下的循环，按 `self.running` 的顺序给每个请求分 `num_tokens_with_spec − num_computed_tokens` 个 token（受 `long_prefill_token_threshold` 和剩余预算限制），再是等待队列；同一文件开头的注释写明调度里没有 decode 阶段和 prefill 阶段。激活内存的预留在 `vllm/v1/worker/gpu_model_runner.py` 的 `profile_run`，假 batch 的 token 数是 `max_num_batched_tokens`。
# - SGLang：`python/sglang/srt/managers/scheduler.py` 的 `get_next_batch_to_run` 默认先做 prefill，prefill 与 decode 是不同的前向；打开 `--enable-mixed-chunk` 时才把 decode 混进 prefill 块所在的那一步。
#
# </details>
#
# 下表是一次**形状检查**，不是内存测量：`scores_tap` 上的 hook 记下经过它的最大一个分数张量的字节数，而这个张量的形状是我们的代码自己定的，所以“hook / 解析”等于 1.000 是必然的，它只说明 `chunked_prefill` 真的按 `chunk_size` 把 token 分块送进了模型（送错了块，这一列就不是 1）。测量前，单元格先核对每种分块的 logits 与一次性前向相同，不同就指出 TODO 9。分配器的总峰值（掩码、softmax 的输出、KV 拼接也要内存）要用分配器量：最后的 GPU 实验用 `torch.cuda.max_memory_allocated` 量整个 prefill。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "kv_measure_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 形状检查：一次性与分块预填充的最大注意力分数张量
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
    show_table(memory_rows, MEMORY_COLUMNS)
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        fig, ax = plt.subplots(figsize=(9.5, 4.5))
        labels = [str(r["chunk"]) if r["chunk"] != "一次性" else "one-shot" for r in memory_rows]
        ax.bar(labels, [r["measured_kib"] for r in memory_rows], label="largest attention scores (shape check)")
        ax.axhline(memory_rows[0]["kv_kib"], color="gray", linestyle="--", label="KV cache (unchanged)")
        ax.set_xlabel("chunk_size")
        ax.set_ylabel("KiB")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)  # 图外：不挡住最高的一次性那根柱
        fig.tight_layout()
        plt.show()

# %% [markdown]
# ### 2.5　证据边界：这一部分证明了什么，没证明什么
#
# - **证明了：** 在一个随机权重的小 Transformer 上，分块预填充、以及复用缓存前缀后只算 suffix，得到的 logits 和 KV 与一次完整前向一致（`torch.allclose`，`atol = 1e-5`，float32；bf16 下两条路径可能差出舍入误差，见 2.1 节）。等式来自因果性，与权重是否训练过、模型大小无关；右下角对齐的掩码和绝对位置是它成立的两个前提。评分测试用随机 prompt、多种 chunk 大小和前缀组合检查了这一点。
# - **测量了：** 单个 prompt 在 CPU 上（单线程）、float32 小模型的 prefill 耗时；分数张量那张表是形状检查，不是内存测量。`h = 0` 那一行两边做的是同一件事，它的比值范围就是这次测量的噪声：一行的实测加速比与代价模型的差别，只有超出这个范围才算测到了。在几个进程共用的 CPU 上这个范围可能很宽，宽到跨过 1（看上面表里 `h = 0` 那一行这次印出的最小–最大）；能稳定看到的只有“命中越多越快”，实测比代价模型快还是慢，要看那次运行的噪声有多大。这些数字也不能当作 GPU 上的数字。
# - **没有测：** batch、调度、TTFT / TPOT、吞吐、显存碎片、真实模型的权重与 kernel（FlashAttention、分页 KV）。这些需要 serving 级别的基准测试（例如 vLLM 的 `vllm bench serve`）。最后的 GPU 实验给出分配器层面的峰值显存，但仍只是这个小模型上的一次 prefill。

# %% [markdown]
# ### 2.6　小结
#
# - 带 KV cache 接着算等于从头完整算，靠的是因果性；要让它成立，掩码必须按右下角对齐，位置必须是绝对位置。
# - 分块预填充是一场接力：每块带着上一块返回的 KV。前缀缓存在此之上只改一件事：第一块接着命中前缀的 KV 算。
# - 整个 prompt 都命中时仍要算最后一个 token，因为下一个 token 要从它的 logits 采样；缓存的 KV 只能读，不能写回。
# - 命中 h 的加速比在 1/(1 − h) 与 1/(1 − h²) 之间，取决于 prompt 长度 T 与 N/(L·d) 之比；分块只降低一步的峰值内存，不减少 KV、运算量或时间。
#
# ### 2.7　练习（不计分，答案在答案版里）
#
# 1. 把 `CausalSelfAttention` 的掩码改成 `tril(diagonal=0)`，哪些结果会变？一次性前向（`past_kv=None`）的结果会变吗？为什么？
# 2. 一个模型用 RoPE 而不是学习式位置表。带 KV cache 接着算时，新 token 的位置从哪里来？位置从 0 重数会怎样？
# 3. 本章小模型 `d = 128`、`L = 2`，`N` 约 40 万，命中 50% 的 prompt 有 `T = 512` 个 token。用代价模型算 S(0.5, 512)，和 1/(1 − h) 比一比。
# 4. 分块大小为 64 时，`T = 512` 的一次 prefill 最大的注意力分数张量是一次性 prefill 的几分之一？KV cache 的大小变了吗？
# 5. `KVPrefixCache` 为每个登记的前缀存一份完整的 KV。两个前缀共享前 1000 个 token 时，这份共享部分存了几份？第三部分的 KV 块怎样避免它？

# %% [markdown] tags=["solutions-only"]
# #### 练习答案（第二部分）
#
# 1. 一次性前向不变：`past_kv=None` 时 `S = T`，两种对角线相同。带缓存或分块时 `S > T`，左上角对齐让第 `i` 个新 token 只看到前 `i + 1` 个 key，logits 和 KV 都错，TODO 9、10 的等式检查会失败。
# 2. 位置仍是 `P + i`（`P` = 已缓存的 token 数）：RoPE 按绝对位置旋转 q 和 k，缓存里的 k 已经按各自的位置转过。从 0 重数，新 token 的 q 会按错误的角度旋转，与缓存 k 的相对位置全错。
# 3. `T* = N/(L·d) ≈ 402688 / 256 ≈ 1573`，`L·d·T = 256 × 512 = 131072`。S = (402688 + 131072) / (402688 × 0.5 + 131072 × 0.75) = 533760 / 299648 ≈ 1.78，略低于 1/(1 − 0.5) = 2：注意力那一项让没命中的后半段更贵。
# 4. 一次性是 `n_heads · 512 · 512`，分块时最大一块是 `n_heads · 64 · 512`，即 1/8。KV cache 不变：`2 · L · T · d` 个元素，与分不分块无关。
# 5. 两份：每个前缀各存一份完整的 KV。第三部分把 KV 切成固定大小的块，以哈希链标识，两个前缀共享的满块只存一次，用引用计数记录有几个请求在用。
