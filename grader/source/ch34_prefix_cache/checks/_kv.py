"""Part two's helpers (TODO 9-10, real KV): a reference model and a counter of the tokens fed.

The build runs `_common.py`, this file and one `todo<N>.py` as one code string in a scope of its own.
"""

import torch
import torch.nn.functional as F

_VOCAB = 64


class _OracleLM:
    """The TinyCausalLM interface: model(ids, past_kv=None) -> (logits, past_kv), weights from `seed`."""

    def __init__(self, seed, vocab=_VOCAB, d=32, n_layers=2, n_heads=2, max_positions=160):
        g = torch.Generator().manual_seed(seed)

        def rand(*shape, std=1.0):
            return torch.randn(*shape, generator=g) * std

        self.d, self.nh, self.vocab = d, n_heads, vocab
        self.wte, self.wpe = rand(vocab, d), rand(max_positions, d)
        self.layers = [
            (
                rand(d, 3 * d, std=d**-0.5),
                rand(d, d, std=d**-0.5),
                rand(d, 4 * d, std=d**-0.5),
                rand(4 * d, d, std=(4 * d) ** -0.5),
            )
            for _ in range(n_layers)
        ]
        self.head = rand(d, vocab, std=d**-0.5)

    def __call__(self, token_ids, past_kv=None):
        idx = torch.as_tensor(token_ids, dtype=torch.long)
        if not (idx.dim() == 1 and idx.numel() > 0):
            raise ValueError("参考模型只接受非空的一维 token 序列")
        d, nh, hs = self.d, self.nh, self.d // self.nh
        P, T = (0 if past_kv is None else past_kv[0][0].shape[1]), idx.numel()
        x = self.wte[idx] + self.wpe[P : P + T]
        new_kv = []
        for layer, (w_qkv, w_proj, w_fc, w_out) in enumerate(self.layers):
            q, k, v = (F.layer_norm(x, (d,)) @ w_qkv).split(d, dim=-1)
            q, k, v = (t.view(T, nh, hs).transpose(0, 1) for t in (q, k, v))
            if past_kv is not None:
                k = torch.cat([past_kv[layer][0], k], dim=1)
                v = torch.cat([past_kv[layer][1], v], dim=1)
            keys = k.shape[1]
            att = (q @ k.transpose(-2, -1)) * hs**-0.5
            visible = torch.ones(T, keys, dtype=torch.bool).tril(keys - T)
            att = att.masked_fill(~visible, float("-inf")).softmax(-1)
            x = x + (att @ v).transpose(0, 1).reshape(T, d) @ w_proj
            x = x + F.gelu(F.layer_norm(x, (d,)) @ w_fc) @ w_out
            new_kv.append((k, v))
        return F.layer_norm(x, (d,)) @ self.head, tuple(new_kv)


class _Counting:
    """Wraps a model and records how many tokens each call fed."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, token_ids, past_kv=None):
        self.calls.append(len(token_ids))
        return self.model(token_ids, past_kv=past_kv)


def _close(a, b):
    return tuple(a.shape) == tuple(b.shape) and torch.allclose(a, b, rtol=1e-4, atol=1e-5)
