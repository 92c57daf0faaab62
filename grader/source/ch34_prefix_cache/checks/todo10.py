"""Hidden checks of TODO 10, `KVPrefixCache`: one function per grade cell, each given the notebook's namespace.

While a check runs, the notebook's `chunked_prefill`, `PrefixCacheManager` and `as_token_list` are
replaced by reference versions (restored afterwards), so a mistake in TODO 1-9 costs TODO 10 nothing.
The model is a reference model written here, wrapped in a counter of the tokens each call fed.
"""

import contextlib
import random

import torch

TODO = "TODO 10"
UNDER_TEST = "KVPrefixCache.add_prefix / prefill"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {10: 16}  # the TODO's points, shared by its checks


def _oracle_chunked_prefill(model, token_ids, chunk_size, past_kv=None):
    if not (type(chunk_size) is int and chunk_size > 0) or not len(token_ids):
        raise ValueError("参考 chunked_prefill：chunk_size 要是正整数，token_ids 不能为空")
    pieces = []
    for start in range(0, len(token_ids), chunk_size):
        logits, past_kv = model(token_ids[start : start + chunk_size], past_kv=past_kv)
        pieces.append(logits)
    return torch.cat(pieces, dim=0), past_kv


class _OracleManager:
    """Reference PrefixCacheManager (behaves like part one's reference answer); counts match_prefix calls."""

    def __init__(self, block_size=4):
        if not block_size > 0:
            raise ValueError("参考 PrefixCacheManager：block_size 要是正数")
        self.block_size, self.cached_prefixes, self.chunked_prefixes = block_size, [], []
        self.match_calls = 0

    def _normalize(self, tokens):
        return list(tokens)

    def _chunk_tokens(self, tokens):
        tokens = list(tokens)
        return [tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]

    def add_prefix(self, prefix_tokens):
        key = tuple(prefix_tokens)
        if key not in self.cached_prefixes:
            self.cached_prefixes.append(key)
            self.chunked_prefixes.append(self._chunk_tokens(key))

    def match_prefix(self, prompt_tokens):
        self.match_calls += 1
        prompt = list(prompt_tokens)
        fits = (len(p) for p in self.cached_prefixes if len(p) <= len(prompt) and prompt[: len(p)] == list(p))
        return max(fits, default=0)

    def split_prompt(self, prompt_tokens):
        prompt = list(prompt_tokens)
        hit = self.match_prefix(prompt)
        return prompt[:hit], prompt[hit:], hit

    def chunked_prefill_plan(self, prompt_tokens):
        return self._chunk_tokens(prompt_tokens)

    def cache_stats(self, prompt_tokens):
        prompt = list(prompt_tokens)
        hit = self.match_prefix(prompt)
        ratio = round(hit / len(prompt), 4) if prompt else 0.0
        return {"hit_tokens": hit, "uncached_tokens": len(prompt) - hit, "reuse_ratio": ratio}

    def chunked_suffix_prefill_plan(self, prompt_tokens):
        return self._chunk_tokens(self.split_prompt(prompt_tokens)[1])


def _oracle_as_token_list(token_ids):
    values = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else token_ids
    return [int(value) for value in values]


@contextlib.contextmanager
def _oracles(ns):
    """Swap in the reference chunked_prefill, PrefixCacheManager and as_token_list; one thread for tiny tensors."""
    replaced = {
        "chunked_prefill": _oracle_chunked_prefill,
        "PrefixCacheManager": _OracleManager,
        "as_token_list": _oracle_as_token_list,
    }
    missing = object()
    saved = {name: ns.get(name, missing) for name in replaced}
    threads = torch.get_num_threads()
    ns.update(replaced)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        for name, value in saved.items():
            if value is missing:
                ns.pop(name, None)
            else:
                ns[name] = value


def _tensors(obj):
    """Every tensor inside nested tuples, lists and dicts, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for key in sorted(obj, key=repr) for t in _tensors(obj[key])]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    return []


def _snapshot(cache):
    store = getattr(cache, "prefix_kv", None)
    if type(store) is not dict:
        return None
    return {key: [t.clone() for t in _tensors(value)] for key, value in store.items()}


class _Setup:
    """A cache over a counting reference model with three prefixes: short, long = short + more, other."""

    def __init__(self, ns, block_size, seed):
        self.rng = random.Random(seed)
        self.oracle = _OracleLM(seed=self.rng.randrange(10**6))
        self.model = _Counting(self.oracle)
        self.block_size = block_size
        try:
            self.cache = ns["KVPrefixCache"](self.model, block_size)
        except NotImplementedError:
            raise
        except Exception as exc:
            raise AssertionError(f"{TODO}: KVPrefixCache(model, block_size={block_size}) 抛出了 {type(exc).__name__}: {exc}") from None
        self.short = self.tokens(self.rng.randint(2, 9))
        self.long = self.short + self.tokens(self.rng.randint(2, 12))
        self.other = [(self.long[0] + 1) % _VOCAB] + self.tokens(self.rng.randint(2, 10))

    def tokens(self, k):
        return [self.rng.randrange(_VOCAB) for _ in range(k)]

    def register(self, *prefixes):
        for prefix in prefixes or (self.short, self.long, self.other):
            try:
                self.cache.add_prefix(list(prefix))
            except NotImplementedError:
                raise
            except Exception as exc:
                raise AssertionError(
                    f"{TODO}: add_prefix({len(prefix)} 个 token) 抛出了 {type(exc).__name__}: {exc}"
                ) from None

    def hits_somewhere(self, prompt):
        return any(prompt[: len(p)] == p for p in (self.short, self.long, self.other))

    def prefill(self, prompt, label, full_hit=False):
        """Run prefill; return (logits, past_kv, hit_len, calls) after checking its shape."""
        self.model.calls.clear()
        try:
            result = self.cache.prefill(prompt)
        except NotImplementedError:
            raise
        except Exception as exc:
            extra = ""
            if full_hit:
                extra = (
                    "。整个 prompt 都已缓存时，hit_len = len(prompt) - 1（最后一个 token 仍要计算才有 logits），"
                    "而缓存条目的键是完整的命中前缀 tuple(tokens[:match_len])，不是 tokens[:hit_len]"
                )
            raise AssertionError(
                f"{TODO} [{label}]: prefill({len(prompt)} 个 token) 抛出了 {type(exc).__name__}: {exc}{extra}"
            ) from None
        assert isinstance(result, tuple) and len(result) == 3, (
            f"{TODO} [{label}]: prefill 应返回 (logits, past_kv, hit_len) 三元组，得到 {type(result).__name__}"
        )
        return (*result, list(self.model.calls))

    def expect(self, prompt, expected_hit, label, result):
        """The result equals a full forward pass from expected_hit on, and only the suffix was fed."""
        logits, kv, hit_len, calls = result
        n = len(prompt)
        full_hit = expected_hit == n
        want_hit = n - 1 if full_hit else expected_hit
        assert type(hit_len) is int, f"{TODO} [{label}]: hit_len 应是 int，得到 {type(hit_len).__name__}"
        if full_hit:
            assert hit_len == want_hit, (
                f"{TODO} [{label}]: 整个 prompt（{n} 个 token）都已缓存时 hit_len 应为 len(prompt) - 1 = {want_hit}"
                f"（最后一个 token 仍要计算，才有它的 logits），得到 {hit_len}"
            )
        elif hit_len != want_hit:
            manager = getattr(self.cache, "manager", None)
            if hit_len == 0 and isinstance(manager, _OracleManager) and not manager.cached_prefixes:
                raise AssertionError(
                    f"{TODO} [{label}]: 应命中 {want_hit} 个 token，得到 hit_len=0：add_prefix 没有在账本里登记前缀"
                    "（要调用 self.manager.add_prefix），match_prefix 就永远找不到命中"
                )
            raise AssertionError(
                f"{TODO} [{label}]: hit_len 应等于 self.manager.match_prefix 给出的最长命中 {want_hit}，得到 {hit_len}"
            )
        fed = sum(calls)
        assert fed == n - want_hit, (
            f"{TODO} [{label}]: 命中 {want_hit} 个 token 后只应把 suffix 的 {n - want_hit} 个 token 送入模型，实际送入 {fed} 个"
            + ("：重算了已缓存的前缀，要从 tokens[hit_len:] 开始、带着缓存的 KV 算" if fed > n - want_hit else "")
        )
        full_logits, full_kv = self.oracle(prompt)
        assert isinstance(logits, torch.Tensor), f"{TODO} [{label}]: logits 应是张量，得到 {type(logits).__name__}"
        assert tuple(logits.shape) == (n - want_hit, self.oracle.vocab), (
            f"{TODO} [{label}]: logits 只含算出来的 suffix token，形状应为 {(n - want_hit, self.oracle.vocab)}，"
            f"得到 {tuple(logits.shape)}"
        )
        assert _close(logits, full_logits[want_hit:]), (
            f"{TODO} [{label}]: 复用前缀 KV 后的 logits 与完整前向的 [hit_len:] 不一致"
            "（取错了缓存条目，或复用的 KV 长度与 hit_len 不符？）"
        )
        assert kv is not None and len(kv) == len(full_kv), f"{TODO} [{label}]: 返回的 past_kv 应有 {len(full_kv)} 层"
        for layer, ((k, v), (k_ref, v_ref)) in enumerate(zip(kv, full_kv)):
            assert k.shape[1] == n, (
                f"{TODO} [{label}]: 返回的 past_kv 应覆盖整个 prompt 的 {n} 个位置，第 {layer} 层有 {k.shape[1]} 个"
            )
            assert _close(k, k_ref) and _close(v, v_ref), f"{TODO} [{label}]: 第 {layer} 层返回的 KV 与完整前向不一致"
        return logits


_BLOCK_SIZES = (1, 3, 4, 7)


@check(points=2, title="未命中", says="空缓存、前缀只出现在 prompt 中间：hit_len = 0，结果等于完整前向")
def check_todo10_miss(ns):
    """No hit: an empty cache, and a registered prefix that appears only in the middle of the prompt."""
    with _oracles(ns):
        for i, block_size in enumerate(_BLOCK_SIZES):
            s = _Setup(ns, block_size, seed=100 + i)
            cold = s.tokens(s.rng.randint(3, 20))
            label = f"block_size={block_size}，空缓存，{len(cold)} 个 token"
            s.expect(cold, 0, label, s.prefill(cold, label))
            s.register()
            middle = s.tokens(s.rng.randint(1, 12)) + s.short
            if not s.hits_somewhere(middle):
                label = f"block_size={block_size}，登记过的前缀只出现在 prompt 中间，不算命中"
                s.expect(middle, 0, label, s.prefill(middle, label))


@check(points=5, title="命中", says="复用最长命中前缀的 KV，只把 suffix 送入模型，logits 与 KV 等于完整前向")
def check_todo10_hit(ns):
    """A partial hit: the longest registered prefix is reused and only the suffix is computed."""
    with _oracles(ns):
        for i, block_size in enumerate(_BLOCK_SIZES):
            s = _Setup(ns, block_size, seed=200 + i)
            s.register()
            diverge = s.short + [(s.long[len(s.short)] + 1) % _VOCAB] + s.tokens(s.rng.randint(0, 6))
            cases = [
                (s.long + s.tokens(s.rng.randint(1, 15)), len(s.long), "命中较长的前缀"),
                (diverge, len(s.short), "在较长前缀中途分叉，只命中较短的前缀"),
                (s.long[: len(s.short) + 1], len(s.short), "prompt 比较长的前缀短，只命中较短的前缀"),
                (s.other + s.tokens(s.rng.randint(1, 8)), len(s.other), "命中另一个前缀"),
            ]
            for prompt, hit, what in cases:
                label = f"block_size={block_size}，{what}（prompt {len(prompt)} 个 token，应命中 {hit} 个）"
                s.expect(prompt, hit, label, s.prefill(prompt, label))
            prompt = torch.tensor(s.long + s.tokens(3))
            label = f"block_size={block_size}，LongTensor 输入，命中较长的前缀"
            s.expect(prompt.tolist(), len(s.long), label, s.prefill(prompt, label))


@check(points=3, title="完整命中", says="prompt 恰好是登记过的前缀：hit_len = len(prompt) - 1，最后一个 token 仍要计算")
def check_todo10_full_hit(ns):
    """The whole prompt is cached: the last token is still computed (hit_len = len(prompt) - 1)."""
    with _oracles(ns):
        for i, block_size in enumerate(_BLOCK_SIZES):
            s = _Setup(ns, block_size, seed=300 + i)
            s.register()
            for prefix, what in ((s.long, "较长的前缀"), (s.short, "较短的前缀"), (s.other, "另一个前缀")):
                label = f"block_size={block_size}，prompt 恰好是登记过的{what}（{len(prefix)} 个 token）"
                s.expect(prefix, len(prefix), label, s.prefill(list(prefix), label, full_hit=True))


@check(points=3, title="缓存只读", says="prefill 不改动 self.prefix_kv 里的 KV；同一个 prompt 两次结果相同")
def check_todo10_cache_unchanged(ns):
    """prefill only reads the cached KV: entries keep their keys, lengths and values; a prompt gives the same twice."""
    with _oracles(ns):
        for i, block_size in enumerate(_BLOCK_SIZES):
            s = _Setup(ns, block_size, seed=400 + i)
            s.register()
            before = _snapshot(s.cache)
            prompts = [
                (list(s.long), "完整命中较长的前缀"),
                (s.long + s.tokens(4), "命中较长的前缀"),
                (list(s.short), "完整命中较短的前缀"),
                (s.short + s.tokens(2), "命中较短的前缀"),
            ]
            first = {}
            for prompt, what in prompts * 2:
                label = f"block_size={block_size}，{what}（prompt {len(prompt)} 个 token）"
                logits, _, _, _ = s.prefill(prompt, label, full_hit=prompt in (s.long, s.short))
                if before is not None:
                    after = {key: _tensors(value) for key, value in s.cache.prefix_kv.items()}
                    assert after.keys() == before.keys(), (
                        f"{TODO} [{label}]: prefill 之后 self.prefix_kv 的键变了（{len(before)} 条变成 {len(after)} 条）："
                        "prefill 只能读缓存，不能增删条目"
                    )
                    for key, saved in before.items():
                        same = len(saved) == len(after[key]) and all(
                            a.shape == b.shape and torch.equal(a, b) for a, b in zip(saved, after[key])
                        )
                        assert same, (
                            f"{TODO} [{label}]: prefill 改动了缓存里长度为 {len(key)} 的前缀 KV"
                            "（把切短/加长的 KV 写回了 self.prefix_kv，或原地修改了张量）：缓存只能读，复用时取切片"
                        )
                key = (tuple(prompt), label.split("，")[0])
                if key in first:
                    assert isinstance(logits, torch.Tensor) and _close(logits, first[key]), (
                        f"{TODO} [{label}]: 同一个 prompt 两次 prefill 的 logits 不同：前面的 prefill 改坏了缓存"
                    )
                else:
                    first[key] = logits


@check(points=3, title="账本与分块", says="命中长度来自 self.manager；前缀与 suffix 都按 block_size 分块；重复登记不重算")
def check_todo10_manager_and_chunks(ns):
    """The ledger decides the hit (self.manager.match_prefix), the suffix goes in block_size chunks, keys are tuples."""
    with _oracles(ns):
        for i, block_size in enumerate(_BLOCK_SIZES):
            s = _Setup(ns, block_size, seed=500 + i)
            s.model.calls.clear()
            s.register()
            assert not s.model.calls or max(s.model.calls) <= block_size, (
                f"{TODO} [block_size={block_size}]: add_prefix 应按 block_size={block_size} 分块计算前缀 KV"
                f"（chunked_prefill），实际有一次送入了 {max(s.model.calls)} 个 token"
            )
            s.model.calls.clear()
            s.register(s.long)
            assert s.model.calls == [], (
                f"{TODO} [block_size={block_size}]: 重复登记同一个 {len(s.long)} 个 token 的前缀不应再调用模型，"
                f"实际送入了 {sum(s.model.calls)} 个 token"
            )
            store = getattr(s.cache, "prefix_kv", None)
            want = {tuple(s.short), tuple(s.long), tuple(s.other)}
            assert type(store) is dict and set(store) == want, (
                f"{TODO} [block_size={block_size}]: self.prefix_kv 应是 dict，键是 tuple(前缀 token)，每个登记过的前缀一个"
                f"（应有长度 {sorted(len(k) for k in want)} 的 3 个键），得到 "
                + (f"长度 {sorted(len(k) if isinstance(k, tuple) else -1 for k in store)} 的键" if isinstance(store, dict) else type(store).__name__)
            )
            prompt = s.long + s.tokens(s.rng.randint(2 * block_size + 1, 3 * block_size + 2))
            label = f"block_size={block_size}，命中较长的前缀，suffix {len(prompt) - len(s.long)} 个 token"
            asked = s.cache.manager.match_calls
            _, _, _, calls = s.prefill(prompt, label)
            assert s.cache.manager.match_calls > asked, (
                f"{TODO} [{label}]: 命中长度应由账本 self.manager.match_prefix（或 split_prompt）给出，prefill 没有调用它"
            )
            assert calls and max(calls) <= block_size, (
                f"{TODO} [{label}]: suffix 应按 block_size={block_size} 分块送入（chunked_prefill），实际每次送入 {calls} 个 token"
            )
