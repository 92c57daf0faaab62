# %% [markdown]
# ---
# ## 第五部分（{{points:engine}}）：一个引擎，一个真实的模型
#
# 前四部分各自停在引擎的前一步：第二部分复用真实的 KV，但每个请求各拿一份连续的张量；第三部分有哈希链、引用计数和 LRU，块里却没有 KV；第四部分用一个 token 预算排 decode 和 prefill，却不管 KV 放不放得下。这一部分把它们合成一个能服务**真实模型**的引擎，并在你自己的设备上量它。
#
# **学习目标：** 学完这一部分，你能：
#
# 1. 读懂一个真实的小模型（Qwen2.5-0.5B-Instruct）在纯 PyTorch 里的结构，并从 **safetensors**（Hugging Face 发布权重用的文件格式：一个 JSON 头加上各张量的原始字节）里读出它的权重；
# 2. 写出一个**分页 KV 池**（paged KV pool：所有请求的 K/V 存在同一组按固定大小的**块**切开的张量里，每个请求用一张**块表**记下它的 token 在哪些块）的块池与分配（TODO 20–21）；
# 3. 在池子不够时按 vLLM 的规则做**抢占**（preemption：收回一个正在跑的请求的全部块，让它以后从头重算）（TODO 22）；
# 4. 写出**分页注意力**（paged attention：每个请求按块表从池里取回自己的 K/V 再做注意力，所有请求一次算完）和一步的引擎循环（TODO 23–24）；
# 5. 在自己的设备上量这个引擎的 **TTFT**（time to first token：请求到达到第一个输出 token 的时间）和 **TBT**（time between tokens：同一请求相邻两个输出 token 的间隔），并且只在测量的散布允许时下结论。
#
# **用时：** 约 2–3 小时（TODO 20–24）。**需要：** 第四部分的调度器（`Request`、`Scheduler`，TODO 15–19）；不需要第三部分。
#
# #### 5.1　真实的模型：Qwen2.5-0.5B-Instruct（已给出）
#
# 我们用纯 PyTorch 写出 Qwen2.5-0.5B-Instruct 的结构，直接读它发布的权重文件（`config.json` + `*.safetensors`）。选它而不选 Qwen3-0.6B，是因为它的注意力只多了 q/k/v 的偏置，没有 Qwen3 的 q/k RMSNorm，要写的部件更少；`transformers` 从 4.37 起就认识它（Qwen3 要 4.51），老环境里也能拿来对照；权重只有约 1 GB（16 位），T4 上用 float16 就能跑。
#
# 结构自下而上，每一块都对应 checkpoint 里的一组权重名（`model.layers.{i}.self_attn.q_proj.weight` ……）：
#
# | 部件 | 做什么 | 权重 |
# |---|---|---|
# | `RMSNorm` | `x / sqrt(mean(x²) + eps) · weight`，在 float32 里算 | `input_layernorm`、`post_attention_layernorm`、`norm` |
# | RoPE | 把 q、k 的每对维度按位置 `p` 转一个角度 `p · θ^(-2i/d)`；位置是**绝对**位置 | 无（`rope_theta` = 10⁶） |
# | GQA 注意力 | 14 个 query 头共用 2 个 KV 头（每 7 个 query 头看同一个 KV 头）；q、k、v 的线性层带偏置 | `q_proj`、`k_proj`、`v_proj`、`o_proj` |
# | SwiGLU MLP | `down(silu(gate(x)) · up(x))` | `gate_proj`、`up_proj`、`down_proj` |
# | 共享词嵌入 | 输出层 `lm_head` 与输入词嵌入是同一个矩阵（`tie_word_embeddings`） | `embed_tokens` |
#
# **KV cache 只和 GQA 的 KV 头有关：** 每个 token 每层存 `2 × num_key_value_heads × head_dim` 个数，这个模型是 `2 × 2 × 64 = 256` 个，24 层共 6,144 个，bfloat16 下 12 KiB。一个 16 token 的 KV 块就是 192 KiB。
#
# 模型的 `forward(input_ids, positions=None, attention=None, logits_indices=None)` 留了一个口子给引擎：`attention` 为 `None` 时是普通的因果自注意力（这 T 个 token 是一条完整的序列）；传入一个对象时，每层都调用 `attention(layer_idx, q, k, v)`，q、k 已经按 `positions` 转好了 RoPE，由它决定 K、V 写到哪里、从哪里读。引擎的分页注意力就是这样一个对象。

# %% nbgrader={"grade": false, "grade_id": "model_imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 第五部分用到的标准库与 torch
import json
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

# %% nbgrader={"grade": false, "grade_id": "model_qwen2", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title Qwen2 模型（纯 torch）：RMSNorm、RoPE、GQA 注意力、SwiGLU MLP；forward(input_ids, positions, attention, logits_indices)
@dataclass
class Qwen2Config:
    """Qwen2 的超参数；默认值就是 Qwen2.5-0.5B-Instruct 的 config.json。"""

    vocab_size: int = 151936
    hidden_size: int = 896
    intermediate_size: int = 4864
    num_hidden_layers: int = 24
    num_attention_heads: int = 14
    num_key_value_heads: int = 2
    head_dim: Optional[int] = None  # None：hidden_size // num_attention_heads（Qwen2 的 config.json 不写它）
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 32768
    eos_token_ids: list = field(default_factory=list)  # 生成到这些 token 就停（来自 config.json，可以为空）

    def __post_init__(self):
        if self.head_dim is None and self.num_attention_heads:
            self.head_dim = self.hidden_size // self.num_attention_heads
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"Qwen2Config.{name} 必须是正整数，现在是 {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} 必须是 num_key_value_heads={self.num_key_value_heads} 的整数倍（GQA）")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} 必须是偶数（RoPE 按维度对旋转）")

    @classmethod
    def from_json(cls, data: dict) -> "Qwen2Config":
        """读 Hugging Face 的 config.json（已解析成 dict）。不是 Qwen2 结构、或用了本实现没有的功能时抛 ValueError。"""
        if data.get("model_type", "qwen2") != "qwen2":
            raise ValueError(f"config.json 的 model_type 是 {data.get('model_type')!r}：这里只实现了 Qwen2 结构（model_type='qwen2'）")
        if data.get("use_sliding_window"):
            raise ValueError("config.json 打开了 use_sliding_window：本实现只有全注意力（Qwen2.5 的发布版本都是关的）")
        rope = data.get("rope_parameters") or {}  # transformers 5.x 写 rope_parameters，4.x 写 rope_theta / rope_scaling
        scaling = data.get("rope_scaling") or {}
        kind = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
        if kind != "default":
            raise ValueError(f"config.json 的 RoPE 类型是 {kind!r}：本实现只有默认的 RoPE")
        eos = data.get("eos_token_id")
        return cls(
            vocab_size=data["vocab_size"], hidden_size=data["hidden_size"], intermediate_size=data["intermediate_size"],
            num_hidden_layers=data["num_hidden_layers"], num_attention_heads=data["num_attention_heads"],
            num_key_value_heads=data.get("num_key_value_heads", data["num_attention_heads"]), head_dim=data.get("head_dim"),
            rope_theta=float(rope.get("rope_theta", data.get("rope_theta", 10000.0))), rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
            max_position_embeddings=data.get("max_position_embeddings", 32768),
            eos_token_ids=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
        )

    def to_json(self) -> dict:
        """写成 transformers 也能读的 config.json 内容。"""
        data = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "use_sliding_window": False}
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "max_position_embeddings"):
            data[name] = getattr(self, name)
        if self.eos_token_ids:
            data["eos_token_id"] = self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else list(self.eos_token_ids)
        return data


class Linear(nn.Module):
    """y = x·Wᵀ (+ b)。和 nn.Linear 的权重名、形状相同，但不做随机初始化：0.5B 个参数马上要被 checkpoint 覆盖。"""

    def __init__(self, in_features, out_features, bias, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype), requires_grad=False)

    def forward(self, x):
        h = x.float()  # 在 float32 里求均方：float16 的平方和容易溢出
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_cos_sin(positions, head_dim, theta, dtype):
    """positions: (T,) 绝对位置。返回 cos、sin，各 (T, head_dim)，在 float32 里算好再转成 dtype。"""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]  # (T, head_dim/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, head_dim)：前一半和后一半配成一对
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x: (T, heads, head_dim)。第 i 维和第 i + head_dim/2 维组成一对，转过 positions·inv_freq[i] 的角度。"""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


_SDPA = getattr(F, "scaled_dot_product_attention", None)  # torch 2.0 起才有；没有时走下面的显式写法


def causal_attention(q, k, v):
    """因果注意力，query 右下角对齐：q (T, H, D)，k、v (S, KVH, D)，S ≥ T，第 i 个 query 的位置是 S - T + i。

    H 是 KVH 的整数倍：第 h 个 query 头看第 h // (H / KVH) 个 KV 头（GQA）。返回 (T, H, D)。
    S > T 时前 S - T 个 key 是已经缓存的上文，所有 query 都能看到。
    """
    T, H, D = q.shape
    S, KVH = k.shape[0], k.shape[1]
    if S < T or H % KVH:
        raise ValueError(f"causal_attention: q {tuple(q.shape)} 与 k {tuple(k.shape)} 不匹配（要求 S ≥ T，H 是 KVH 的整数倍）")
    k = k.repeat_interleave(H // KVH, dim=1).transpose(0, 1)  # (H, S, D)
    v = v.repeat_interleave(H // KVH, dim=1).transpose(0, 1)
    q = q.transpose(0, 1)  # (H, T, D)
    if _SDPA is not None:
        if S == T:
            out = _SDPA(q, k, v, is_causal=True)
        elif T == 1:
            out = _SDPA(q, k, v)  # 唯一的 query 在最后，能看到全部 key
        else:
            visible = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T)
            out = _SDPA(q, k, v, attn_mask=visible)
    else:
        out = _explicit_attention(q, k, v, S - T)
    return out.transpose(0, 1)  # (T, H, D)


def _explicit_attention(q, k, v, offset):
    """q (H, T, D)，k、v (H, S, D)，offset = S - T。softmax 在 float32 里算（和 transformers 的 eager 实现一样）。"""
    T, S = q.shape[1], k.shape[1]
    scores = (q @ k.transpose(-2, -1)).float() / (q.shape[-1] ** 0.5)  # (H, T, S)
    visible = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=offset)
    weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1).to(q.dtype)
    return weights @ v


class Qwen2Attention(nn.Module):
    def __init__(self, config, device=None, dtype=None):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        hidden, q_size, kv_size = config.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = Linear(hidden, q_size, True, device, dtype)  # Qwen2：q、k、v 带偏置，o 不带
        self.k_proj = Linear(hidden, kv_size, True, device, dtype)
        self.v_proj = Linear(hidden, kv_size, True, device, dtype)
        self.o_proj = Linear(q_size, hidden, False, device, dtype)

    def forward(self, x, cos, sin, layer_idx, attention):
        T = x.shape[0]  # x: (T, hidden)
        q = apply_rope(self.q_proj(x).view(T, self.num_heads, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(T, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
        out = causal_attention(q, k, v) if attention is None else attention(layer_idx, q, k, v)
        if tuple(out.shape) != (T, self.num_heads, self.head_dim):
            raise ValueError(f"attention({layer_idx}, q, k, v) 应返回形状 {(T, self.num_heads, self.head_dim)}，得到 {tuple(out.shape)}")
        return self.o_proj(out.reshape(T, self.num_heads * self.head_dim))


class Qwen2MLP(nn.Module):
    def __init__(self, config, device=None, dtype=None):
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, False, device, dtype)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, False, device, dtype)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, False, device, dtype)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # SwiGLU


class Qwen2DecoderLayer(nn.Module):
    def __init__(self, config, device=None, dtype=None):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, device, dtype)
        self.self_attn = Qwen2Attention(config, device, dtype)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, device, dtype)
        self.mlp = Qwen2MLP(config, device, dtype)

    def forward(self, x, cos, sin, layer_idx, attention):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, layer_idx, attention)  # pre-norm 残差
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Model(nn.Module):
    def __init__(self, config, device=None, dtype=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, device=device, dtype=dtype, _weight=torch.empty(
            config.vocab_size, config.hidden_size, device=device, dtype=dtype))  # 给出 _weight：不做随机初始化
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(Qwen2DecoderLayer(config, device, dtype) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, device, dtype)


class Qwen2ForCausalLM(nn.Module):
    """Qwen2 结构的因果语言模型（推理用，不建计算图）。参数名与 Hugging Face 的 checkpoint 一一对应。

    forward(input_ids, positions=None, attention=None, logits_indices=None)：
      input_ids: LongTensor (T,) 或 (1, T)；positions: (T,) 绝对位置，默认 0..T-1；
      attention: None（这 T 个 token 是一条完整序列，因果自注意力）或 attention(layer_idx, q, k, v) -> (T, H, D)；
      logits_indices: 只为这些行算 logits（lm_head 很大，prefill 只需要最后一行）。
    返回 logits：(T, vocab) 或 (len(logits_indices), vocab)；输入是 (1, T) 时多一维 batch。
    """

    def __init__(self, config: Qwen2Config, device=None, dtype=None):
        super().__init__()
        self.config = config
        self.model = Qwen2Model(config, device, dtype)
        if config.tie_word_embeddings:
            self.lm_head = Linear(config.hidden_size, config.vocab_size, False, device, dtype)
            self.lm_head.weight = self.model.embed_tokens.weight  # 共享同一个矩阵，checkpoint 里没有 lm_head.weight
        else:
            self.lm_head = Linear(config.hidden_size, config.vocab_size, False, device, dtype)
        self.eval()

    @torch.no_grad()
    def forward(self, input_ids, positions=None, attention=None, logits_indices=None):
        device = self.model.embed_tokens.weight.device
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=device)
        batched = ids.dim() == 2
        if batched:
            if ids.shape[0] != 1:
                raise ValueError(f"input_ids 的形状是 {tuple(ids.shape)}：只支持一条序列，(T,) 或 (1, T)")
            ids = ids[0]
        if ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(f"input_ids 必须是非空的 (T,) 或 (1, T)，现在形状是 {tuple(ids.shape)}")
        T = ids.numel()
        positions = torch.arange(T, device=device) if positions is None else torch.as_tensor(positions, dtype=torch.long, device=device)
        if tuple(positions.shape) != (T,):
            raise ValueError(f"positions 的形状应是 ({T},)，得到 {tuple(positions.shape)}")
        x = self.model.embed_tokens(ids)  # (T, hidden)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        for layer_idx, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, layer_idx, attention)
        x = self.model.norm(x)
        if logits_indices is not None:
            x = x[torch.as_tensor(logits_indices, dtype=torch.long, device=device)]
        logits = self.lm_head(x)  # (T 或 len(logits_indices), vocab)
        return logits[None] if batched else logits


def tiny_qwen2_config(**overrides) -> Qwen2Config:
    """CPU 路径的小模型：结构与 Qwen2.5 相同（GQA、q/k/v 偏置、共享词嵌入），尺寸小到 CPU 上一步几毫秒。"""
    values = dict(vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, rope_theta=10000.0, max_position_embeddings=8192)
    values.update(overrides)
    return Qwen2Config(**values)


def random_model(config: Qwen2Config, seed: int = 0, dtype=torch.float32, device="cpu") -> Qwen2ForCausalLM:
    """随机权重的 Qwen2 模型：同一个 config 和 seed 在任何设备上都得到同样的权重（先在 CPU 的 float32 里生成）。

    词嵌入 ~ N(0, 1)，线性层 ~ N(0, 4/in_features)，偏置 ~ N(0, 0.2²)，RMSNorm 的权重在 1 附近抖动。
    标准差故意取大：transformers 的 0.02 会让贪心解码一直重复同一个 token（残差里几乎只剩输入 token 自己的嵌入），
    拿它比较两种生成方式什么也证明不了；这样取，生成的 token 各不相同，少算偏置或范数的实现 logits 也明显不同。
    """
    model = Qwen2ForCausalLM(config, device=device, dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():  # 共享的 lm_head.weight 只出现一次
        values = torch.randn(param.shape, generator=generator)
        if name.endswith("norm.weight"):
            values = 1.0 + 0.1 * values
        elif name.endswith("bias"):
            values = 0.2 * values
        elif param.dim() == 2 and "embed_tokens" not in name:
            values = values * (2.0 / param.shape[1] ** 0.5)
        param.data.copy_(values.to(dtype))
    return model


def count_parameters(model) -> int:
    """参数个数；共享的词嵌入只算一次。"""
    return sum(p.numel() for p in model.parameters())

# %% [markdown]
# #### 5.2　读 checkpoint：safetensors 文件格式（已给出）
#
# Hugging Face 发布的权重是 safetensors 格式，结构简单到不需要任何库：
#
# 1. 前 8 个字节是一个小端序的无符号整数 `N`；
# 2. 接着 `N` 个字节是 JSON 头：每个张量一项，`{"dtype": "BF16", "shape": [896], "data_offsets": [start, end]}`，偏移从头后面算起；还可以有一项 `__metadata__`；
# 3. 后面是所有张量的原始字节，按小端序、行优先紧挨着存放。
#
# 大模型的权重会切成几个文件（分片），`model.safetensors.index.json` 的 `weight_map` 写着每个张量在哪个文件里。`load_model` 读 `config.json`，逐个张量读出（`torch.frombuffer`），转成要用的 dtype 后放到设备上；缺了、多了、形状不对，都会报出张量的名字。`dtype=None` 时：CPU 上用 float32；GPU 上用 checkpoint 自己的 dtype（Qwen2.5 是 bfloat16），但只在**原生**支持 bfloat16 的 GPU（计算能力 ≥ 8.0，Ampere 起）上；T4 的计算能力是 7.5，没有 bfloat16 的硬件，就换成 float16。判断看 `torch.cuda.get_device_capability()`，而不是 `torch.cuda.is_bf16_supported()`：后者默认把“能模拟”也算作支持，在 T4 上也回答 True。

# %% nbgrader={"grade": false, "grade_id": "model_loader", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 读写 checkpoint：只用标准库解析 safetensors；load_model、save_model、random_model
SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}


def read_safetensors_header(path):
    """返回 (JSON 头 dict, 数据区在文件里的起点)。文件不像 safetensors 时抛 ValueError。"""
    if sys.byteorder != "little":
        raise RuntimeError("safetensors 是小端序的，这台机器是大端序：本读取器不支持")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path}: 文件只有 {size} 字节，不是 safetensors 文件")
        (header_len,) = struct.unpack("<Q", head)
        if header_len > size - 8:
            raise ValueError(f"{path}: 头长度 {header_len} 超出文件大小 {size}，文件损坏或下载不完整")
        try:
            header = json.loads(f.read(header_len).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise ValueError(f"{path}: JSON 头无法解析（{error}），文件损坏或下载不完整") from None
    return header, 8 + header_len


def iter_safetensors(path):
    """逐个读出 safetensors 文件里的张量：yield (名字, CPU 上的张量)，dtype 与文件里的相同。"""
    header, data_start = read_safetensors_header(path)
    data_size = os.path.getsize(path) - data_start
    with open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = SAFETENSORS_DTYPES.get(info.get("dtype"))
            if dtype is None:
                raise ValueError(f"{path}: 张量 {name} 的 dtype {info.get('dtype')!r} 不认识（支持 {sorted(SAFETENSORS_DTYPES)}）")
            shape, (start, end) = list(info["shape"]), info["data_offsets"]
            numel = 1
            for dim in shape:
                numel *= dim
            itemsize = torch.tensor([], dtype=dtype).element_size()
            if end - start != numel * itemsize or not 0 <= start <= end <= data_size:
                raise ValueError(f"{path}: 张量 {name} 的偏移 {start}..{end} 与形状 {shape}（{dtype}）对不上")
            if numel == 0:
                yield name, torch.empty(shape, dtype=dtype)
                continue
            f.seek(data_start + start)
            buffer = bytearray(f.read(end - start))  # 可写的缓冲区：torch.frombuffer 对只读缓冲区会发警告
            yield name, torch.frombuffer(buffer, dtype=dtype, count=numel).reshape(shape)


def checkpoint_files(path):
    """checkpoint 文件夹里要读的 safetensors 文件：有 model.safetensors.index.json 时按它的 weight_map，否则全部 *.safetensors。"""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
    else:
        names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not names:
        found = ", ".join(sorted(os.listdir(path))[:8]) or "空文件夹"
        raise FileNotFoundError(f"{path} 里没有 *.safetensors 权重文件（有：{found}）；本读取器只读 safetensors，不读 pytorch_model.bin")
    missing = [n for n in names if not os.path.exists(os.path.join(path, n))]
    if missing:
        raise FileNotFoundError(f"{path}: index 里列出的分片不存在：{missing}（下载不完整？）")
    return [os.path.join(path, n) for n in names]


def native_bf16(capability) -> bool:
    """这块 GPU 的计算能力 (major, minor) 有没有原生 bfloat16：Ampere（8.0）起才有，T4（7.5）没有。

    不用 torch.cuda.is_bf16_supported()：它默认（including_emulation=True）在计算能力 < 8.0 时试着建一个 bfloat16 张量，
    建得出来就回答 True，T4 上也是；这个参数又只有较新的 torch 才有，而这本 notebook 要在 torch 1.11 上也能跑。
    """
    return tuple(capability) >= (8, 0)


def default_dtype(device, checkpoint_dtype, capability=None):
    """dtype=None 时用什么：CPU 上 float32；GPU 上 checkpoint 的 dtype，但 bfloat16 只在原生支持它的 GPU 上用，
    否则（T4 这类计算能力 < 8.0 的卡）换成 float16。capability 默认读 device 那块 GPU 的 (major, minor)。"""
    device = torch.device(device)
    if device.type == "cpu":
        return torch.float32
    if checkpoint_dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return torch.float16
    if checkpoint_dtype == torch.bfloat16 and device.type == "cuda":
        if capability is None:
            capability = torch.cuda.get_device_capability(device)
        if not native_bf16(capability):
            return torch.float16
    return checkpoint_dtype


def load_model(path: str, device: str = "cpu", dtype=None) -> Qwen2ForCausalLM:
    """从 checkpoint 文件夹（config.json + *.safetensors，可以分片）读出 Qwen2ForCausalLM，放在 device 上。"""
    config_path = os.path.join(path, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{path} 里没有 config.json：load_model 需要一个 checkpoint 文件夹（config.json + *.safetensors）")
    with open(config_path, encoding="utf-8") as f:
        raw = json.load(f)
    config = Qwen2Config.from_json(raw)
    checkpoint_dtype = SAFETENSORS_DTYPES.get({"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(
        raw.get("torch_dtype") or raw.get("dtype"), "F32"))
    dtype = default_dtype(device, checkpoint_dtype) if dtype is None else dtype
    model = Qwen2ForCausalLM(config, device=device, dtype=dtype)
    params = dict(model.named_parameters())  # 共享的 lm_head.weight 不在这里：它就是 embed_tokens.weight
    loaded, unexpected = set(), []
    for file in checkpoint_files(path):
        for name, tensor in iter_safetensors(file):
            if name not in params:
                if not (name == "lm_head.weight" and config.tie_word_embeddings) and "rotary_emb" not in name:
                    unexpected.append(name)
                continue
            if tuple(tensor.shape) != tuple(params[name].shape):
                raise ValueError(f"{file}: 张量 {name} 的形状是 {tuple(tensor.shape)}，按 config.json 应是 {tuple(params[name].shape)}")
            params[name].data.copy_(tensor.to(device=device, dtype=dtype))
            loaded.add(name)
    missing = sorted(set(params) - loaded)
    if missing or unexpected:
        raise ValueError(f"{path}: checkpoint 与 config.json 对不上：缺 {len(missing)} 个张量 {missing[:4]}，多 {len(unexpected)} 个 {unexpected[:4]}")
    return model


def write_safetensors(tensors: dict, path: str, metadata=None) -> None:
    """把 {名字: 张量} 写成一个 safetensors 文件（读取器的逆过程；JSON 头补空格到 8 字节对齐）。"""
    header, offset, order = {}, 0, sorted(tensors)
    codes = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}
    for name in order:
        t = tensors[name]
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + t.numel() * t.element_size()]}
        offset += t.numel() * t.element_size()
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in order:
            t = tensors[name].detach().to("cpu").contiguous()
            if t.numel():
                buffer = bytearray(t.numel() * t.element_size())
                torch.frombuffer(buffer, dtype=t.dtype, count=t.numel()).copy_(t.reshape(-1))
                f.write(buffer)


def save_model(model: Qwen2ForCausalLM, path: str, dtype=None) -> str:
    """把模型存成 checkpoint 文件夹（config.json + model.safetensors），load_model 和 transformers 都能读。返回 path。"""
    os.makedirs(path, exist_ok=True)
    dtype = dtype or next(model.parameters()).dtype
    data = dict(model.config.to_json(), torch_dtype=str(dtype).replace("torch.", ""))
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    tensors = {name: p.to(dtype) for name, p in model.named_parameters()}  # 共享的 lm_head 不存（和 transformers 一样）
    write_safetensors(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    return path


class DenseKVCache:
    """一条序列的 KV cache，每层一对连续的张量，每次调用往后接（torch.cat）：对照用的“一次一个请求”。

    作为模型的 attention 参数：model(ids, positions=arange(P, P+T), attention=cache)。
    """

    def __init__(self, num_layers):
        self.k, self.v = [None] * num_layers, [None] * num_layers

    def __len__(self):
        return 0 if self.k[0] is None else self.k[0].shape[0]

    def __call__(self, layer_idx, q, k, v):
        if self.k[layer_idx] is not None:
            k, v = torch.cat([self.k[layer_idx], k]), torch.cat([self.v[layer_idx], v])
        self.k[layer_idx], self.v[layer_idx] = k, v
        return causal_attention(q, k, v)


def generate_greedy(model, prompt_ids, max_tokens, eos_token_ids=()):
    """一次一个请求的贪心解码（带连续 KV cache）：返回新生成的 token（list[int]，不含 prompt）。遇到 eos 就停（eos 本身也返回）。"""
    if not len(prompt_ids):
        raise ValueError("prompt_ids 不能为空")
    cache = DenseKVCache(model.config.num_hidden_layers)
    ids, out = list(prompt_ids), []
    for _ in range(max_tokens):
        start = len(cache)
        new = ids[start:]
        logits = model(new, positions=torch.arange(start, start + len(new)), attention=cache, logits_indices=[len(new) - 1])
        token = int(logits[-1].argmax())
        out.append(token)
        ids.append(token)
        if token in eos_token_ids:
            break
    return out

# %% [markdown]
# #### 5.3　下载、分词器与对话模板（已给出）
#
# - **下载：** `download_model(repo_id)` 先试魔搭的 `modelscope`（魔搭的 notebook 预装了它，国内下载快），再试 Hugging Face 的 `huggingface_hub`（Colab 预装），哪个能导入、能连上就用哪个，只下 `config.json`、`*.safetensors` 和分词器文件（Qwen2.5-0.5B-Instruct 约 1 GB）。两个都不行时抛出一个一行的 `RuntimeError`，写明各自失败的原因。
# - **分词器：** `load_tokenizer(path)` 用 `tokenizers` 包读 `tokenizer.json`（Colab 和魔搭都预装）；没装时打印一行说明，返回 `None`，后面的实验就直接用 token id。
# - **对话模板：** 对话模型要按训练时的格式拼 prompt。checkpoint 的 `tokenizer_config.json` 里有一段 Jinja 模板（`chat_template`）；装了 `jinja2` 就照它渲染，没装就用 `chatml_prompt`：Qwen2.5 模板在没有工具调用时的结果就是 ChatML——每条消息 `<|im_start|>角色\n内容<|im_end|>\n`，第一条不是 system 时补上默认的 system 消息，最后加上 `<|im_start|>assistant\n` 让模型接着写。
#
# 对这一部分最重要的是：**同一个 system prompt 渲染出的开头总是同一串 token**。很多请求共享它，前缀缓存就能复用它的 KV。

# %% nbgrader={"grade": false, "grade_id": "model_hub_tokenizer", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 下载模型（魔搭或 Hugging Face，哪个能用用哪个）、分词器与 chat template
import inspect

QWEN_REPO_ID = "Qwen/Qwen2.5-0.5B-Instruct"  # 魔搭和 Hugging Face 上的名字相同
CHECKPOINT_PATTERNS = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                       "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def _hub_snapshot_download(hub):
    """hub 客户端的 snapshot_download；没装这个客户端时抛 ImportError。"""
    try:
        if hub == "modelscope":
            from modelscope import snapshot_download
        else:
            from huggingface_hub import snapshot_download
    except ImportError:
        raise ImportError(f"{hub} 没有安装") from None
    return snapshot_download


def download_model(repo_id: str = QWEN_REPO_ID) -> str:
    """从魔搭或 Hugging Face 下载 checkpoint（哪个能用就用哪个），返回本地文件夹；都不行时抛出一行的 RuntimeError。"""
    reasons = []
    for hub in ("modelscope", "huggingface_hub"):
        try:
            snapshot_download = _hub_snapshot_download(hub)
            accepted = inspect.signature(snapshot_download).parameters
            # huggingface_hub 和新版 modelscope 叫 allow_patterns，老版 modelscope 叫 allow_file_pattern
            name = next((n for n in ("allow_patterns", "allow_file_pattern") if n in accepted), None)
            path = snapshot_download(repo_id, **({name: CHECKPOINT_PATTERNS} if name else {}))
        except ImportError as error:
            reasons.append(str(error))
            continue
        except Exception as error:  # 网络、权限、仓库名……各个 hub 的异常类型都不同
            first_line = (str(error).strip().splitlines() or [""])[0][:160]
            reasons.append(f"{hub}: {type(error).__name__}: {first_line}")
            continue
        if os.path.exists(os.path.join(path, "config.json")):
            return path
        reasons.append(f"{hub}: 下载的文件夹 {path} 里没有 config.json")
    raise RuntimeError(f"下载 {repo_id} 失败（" + "；".join(reasons) + "）")


def chatml_prompt(messages, add_generation_prompt=True, default_system=QWEN_DEFAULT_SYSTEM):
    """Qwen2.5 对话模板在没有 tools 时的结果（ChatML）。messages: [{"role": "system"/"user"/"assistant", "content": str}]。"""
    if not messages:
        raise ValueError("messages 不能为空")
    parts = []
    if messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for message in messages:
        if message["role"] not in ("system", "user", "assistant"):
            raise ValueError(f"chatml_prompt 只支持 system/user/assistant 三种角色，得到 {message['role']!r}")
        parts.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_chat_template(template, messages, add_generation_prompt=True, **special_tokens):
    """用 jinja2 渲染 checkpoint 的对话模板（和 transformers 的 apply_chat_template 同样的设置）；
    没有模板或没装 jinja2 时返回 None，调用者改用 chatml_prompt。"""
    if not template:
        return None
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return None

    def raise_exception(message):
        raise ValueError(f"对话模板拒绝了这组消息：{message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda value, indent=None, **_: json.dumps(value, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt, tools=None, **special_tokens)


class ChatTokenizer:
    """checkpoint 的分词器（tokenizers 包读 tokenizer.json）加对话模板。encode/decode 不加也不删特殊 token 以外的东西。"""

    def __init__(self, path):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ImportError("ChatTokenizer 需要 tokenizers 包：pip install tokenizers") from None
        self.tokenizer = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        config = {}
        if os.path.exists(os.path.join(path, "tokenizer_config.json")):
            with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
                config = json.load(f)
        self.chat_template = config.get("chat_template")
        if not self.chat_template and os.path.exists(os.path.join(path, "chat_template.jinja")):
            with open(os.path.join(path, "chat_template.jinja"), encoding="utf-8") as f:
                self.chat_template = f.read()
        self.special_tokens = {k: config[k] for k in ("bos_token", "eos_token") if isinstance(config.get(k), str)}

    def encode(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens=True):
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """对话 -> prompt 文本：有模板且装了 jinja2 时照模板渲染，否则用 chatml_prompt。"""
        text = render_chat_template(self.chat_template, messages, add_generation_prompt, **self.special_tokens)
        return chatml_prompt(messages, add_generation_prompt) if text is None else text


def load_tokenizer(path):
    """读 checkpoint 的分词器；没装 tokenizers 或没有 tokenizer.json 时打印一行说明并返回 None。"""
    if not os.path.exists(os.path.join(path, "tokenizer.json")):
        print(f"{path} 里没有 tokenizer.json：不解码文本，只用 token id。")
        return None
    try:
        return ChatTokenizer(path)
    except ImportError as error:
        print(f"{error}：没有它就不解码文本，只用 token id。")
        return None

# %% [markdown]
# #### 5.4　选一个模型
#
# 下一格决定这一部分用哪个模型。默认 `MODEL_SOURCE = "auto"`：有 GPU 时下载真实的 Qwen2.5-0.5B-Instruct，没有 GPU 时用**随机权重的小模型**（结构相同，4 层、宽 128，CPU 上一步几毫秒）——引擎的对错与权重无关，小模型足够验证；它说不了“真实模型在你的设备上快多少”。想在 CPU 上也用真实模型，改成 `"hub"`（下载约 1 GB，CPU 上一步约几十到几百毫秒）；`"tiny"` 总是用小模型；也可以写一个本地 checkpoint 文件夹的路径。下载失败时，这一格打印一行原因，改用小模型。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "model_choose", "locked": true, "schema_version": 3, "solution": false, "task": false}
MODEL_SOURCE = "auto"  # "auto"、"hub"、"tiny"，或本地 checkpoint 文件夹
LLM_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def prepare_model(source, device, repo_id=QWEN_REPO_ID):
    """返回 (model, tokenizer 或 None, 一行说明)。只有下载失败会退回小模型；checkpoint 读不了照样报错。"""
    if source not in ("auto", "hub", "tiny") and not os.path.isdir(str(source)):
        raise ValueError(f"MODEL_SOURCE 应是 'auto'、'hub'、'tiny' 或一个存在的文件夹，现在是 {source!r}")
    note = ""
    if source == "hub" or (source == "auto" and device == "cuda") or os.path.isdir(str(source)):
        try:
            path = source if os.path.isdir(str(source)) else download_model(repo_id)
        except RuntimeError as error:
            note = f"{error}；"
        else:
            model = load_model(path, device=device)
            name = repo_id if path != source else path
            return model, load_tokenizer(path), f"真实模型 {name}（{count_parameters(model) / 1e6:.0f}M 参数，{next(model.parameters()).dtype}，{device}）"
    model = random_model(tiny_qwen2_config(), seed=0, device=device)
    return model, None, note + f"用随机权重的小模型（结构同 Qwen2.5，{count_parameters(model) / 1e6:.2f}M 参数，{device}）：结果验证引擎的对错，不代表真实模型的速度"


llm, llm_tokenizer, llm_note = prepare_model(MODEL_SOURCE, LLM_DEVICE)
print(llm_note)

# %% [markdown]
# 试一下：把一段对话按模板渲染成 prompt，一次一个请求地贪心解码几个 token（`generate_greedy`：每层一对连续的 KV 张量，后面的引擎要和它逐 token 相同）。小模型没有分词器，prompt 是几个固定的 token id，输出也只是 id。再把模型存成 checkpoint、用 `load_model` 读回来，logits 应当完全相同。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "model_demo", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tempfile

demo_messages = [{"role": "system", "content": "你是一个简洁的助手。"}, {"role": "user", "content": "用一句话解释什么是 KV cache。"}]
if llm_tokenizer is not None:
    demo_text = llm_tokenizer.apply_chat_template(demo_messages)
    demo_ids = llm_tokenizer.encode(demo_text)
    print(f"prompt（{len(demo_ids)} 个 token）:\n{demo_text}")
else:
    demo_text, demo_ids = None, [(7 * i + 3) % llm.config.vocab_size for i in range(24)]
demo_out = generate_greedy(llm, demo_ids, max_tokens=24, eos_token_ids=llm.config.eos_token_ids)
print("生成:", llm_tokenizer.decode(demo_out) if llm_tokenizer is not None else demo_out)

if llm_tokenizer is None:  # 存盘再读回（真实模型就是从文件读的，这一步省掉）
    with tempfile.TemporaryDirectory() as folder:
        reloaded = load_model(save_model(llm, folder), device=LLM_DEVICE)
        same = torch.equal(reloaded(demo_ids), llm(demo_ids))
    print("save_model -> load_model 读回的模型，logits 完全相同:", same)
