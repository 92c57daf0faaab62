"""Hidden checks of TODO 9, `chunked_prefill`: one function per grade cell, each given the notebook's namespace.

The learner's function runs against a reference model written here (right-aligned causal mask,
absolute positions), wrapped in a counter that records how many tokens each call fed.
"""

import random

import torch

TODO = "TODO 9"
UNDER_TEST = "chunked_prefill"  # what the learner writes; every other TODO's code is the oracle
TOTAL_POINTS = {9: 13}  # the TODO's points, shared by its checks


def _split(seq, size):
    return [seq[i : i + size] for i in range(0, len(seq), size)]


def _single_thread(check):
    """Tiny tensors: one thread is faster and does not fight other processes on the machine."""

    def run(ns):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return check(ns)
        finally:
            torch.set_num_threads(threads)

    run.__name__, run.__doc__ = check.__name__, check.__doc__
    return run


def _chunk_hint(calls, n, size):
    """What the pattern of tokens fed per call says about the chunk loop, or None when it is right."""
    expected = [len(piece) for piece in _split(list(range(n)), size)]
    fed = sum(calls)
    if calls == expected:
        return None
    if fed > n:
        return f"共送入 {fed} 个 token，多于 {n} 个：有 token 被重复送入（chunk 边界 off-by-one？应切 token_ids[start : start + chunk_size]）"
    if fed < n:
        return f"共送入 {fed} 个 token，少于 {n} 个：漏掉了不满 chunk_size 的尾块（chunk_size={size}；最后一块可以不满，chunk_size 比 prompt 长时只有一块）"
    if calls and max(calls) > size:
        return f"每次最多送入 chunk_size={size} 个 token，实际有一次送入了 {max(calls)} 个"
    return f"应依次送入 {expected} 个 token，实际是 {calls}"


def _run(ns, model, tokens, size, past, label):
    """Call the learner's chunked_prefill; any exception becomes an AssertionError that names the input."""
    chunked_prefill = ns["chunked_prefill"]
    try:
        result = chunked_prefill(model, tokens, size, past_kv=past)
    except NotImplementedError:
        raise
    except Exception as exc:
        hint = _chunk_hint(model.calls, len(tokens), size)
        raise AssertionError(
            f"{TODO} [{label}]: chunked_prefill(model, {len(tokens)} 个 token, chunk_size={size}) "
            f"抛出了 {type(exc).__name__}: {exc}" + (f"。{hint}" if hint else "")
        ) from None
    assert isinstance(result, tuple) and len(result) == 2, (
        f"{TODO} [{label}]: 应返回 (logits, past_kv) 二元组，得到 {type(result).__name__}"
    )
    return result


def _diagnose(logits, oracle, tokens, size, past):
    """Name the usual mistake when the logits differ from one full forward pass."""
    pieces = _split(tokens, size)
    relay = "要把上一块返回的 past_kv 交给下一块"
    if past is not None and _close(logits, oracle(tokens)[0]):
        return "忽略了传入的 past_kv：第一块应接着传入的前缀 KV 计算（位置从前缀长度开始数）"
    restart = torch.cat([oracle(p)[0] for p in pieces])
    if _close(logits, restart):
        if past is None:
            return f"第 2 块起的 logits 等于“每块都从 past_kv=None 开始”的结果：后面的块看不到前面的 token（位置从 0 重数、掩码没有偏移）。{relay}"
        return f"每块都从 past_kv=None 开始，连传入的前缀 past_kv 也没用上。{relay}，第一块接着传入的 past_kv 算"
    if past is not None:
        only_initial = torch.cat([oracle(p, past_kv=past)[0] for p in pieces])
        if _close(logits, only_initial):
            return f"每块都只带最初传入的 past_kv：每块的位置都从前缀末尾重新数，看不到前面几块。{relay}"
    return "分块 logits 与一次完整前向不一致"


def _check_result(result, oracle, model, tokens, size, past, label):
    """Logits and KV equal one full forward pass over prefix + tokens; the incoming past_kv is untouched."""
    n = len(tokens)
    past_len = 0 if past is None else past[0][0].shape[1]
    full_logits, full_kv = oracle(tokens, past_kv=past)
    hint = _chunk_hint(model.calls, n, size)
    assert hint is None, f"{TODO} [{label}]: {hint}"
    logits, kv = result
    assert isinstance(logits, torch.Tensor), f"{TODO} [{label}]: logits 应是张量，得到 {type(logits).__name__}"
    want = tuple(full_logits.shape)
    if tuple(logits.shape) == (min(size, n - (-(-n // size) - 1) * size), oracle.vocab) and want[0] > logits.shape[0]:
        raise AssertionError(
            f"{TODO} [{label}]: logits 形状应为 {want}（全部 {n} 个新 token 的 logits 按块拼接），"
            f"得到 {tuple(logits.shape)}：只返回了最后一块的 logits，要 torch.cat 各块的 logits"
        )
    assert tuple(logits.shape) == want, (
        f"{TODO} [{label}]: logits 形状应为 {want}（全部新 token 的 logits 按块拼接），得到 {tuple(logits.shape)}"
    )
    assert _close(logits, full_logits), f"{TODO} [{label}]: {_diagnose(logits, oracle, tokens, size, past)}"
    assert kv is not None and len(kv) == len(full_kv), f"{TODO} [{label}]: 返回的 past_kv 应有 {len(full_kv)} 层"
    for layer, ((k, v), (k_ref, v_ref)) in enumerate(zip(kv, full_kv)):
        assert k.shape[1] == past_len + n, (
            f"{TODO} [{label}]: 返回的 past_kv 应覆盖前缀 {past_len} + 新 token {n} = {past_len + n} 个位置，"
            f"第 {layer} 层有 {k.shape[1]} 个：要返回最后一块调用模型得到的 past_kv"
        )
        assert _close(k, k_ref) and _close(v, v_ref), f"{TODO} [{label}]: 第 {layer} 层返回的 KV 与完整前向不一致"


def _trials(count, divisible):
    """(oracle, tokens, sizes) for `count` random prompts; `divisible` keeps only sizes that divide the length."""
    rng = random.Random(34 + divisible)
    for _ in range(count):
        oracle = _OracleLM(seed=rng.randrange(10**6))
        if divisible:
            a, b = rng.randint(2, 5), rng.randint(3, 8)
            n = a * b
            sizes = sorted({1, a, b, n})
        else:
            n = rng.randint(7, 40)
            non_divisor = next(c for c in range(2, n + 1) if n % c)
            sizes = [non_divisor, 1, n + rng.randint(1, 9), rng.randint(2, n)]
        yield rng, oracle, [rng.randrange(_VOCAB) for _ in range(n)], sizes


@check(points=3, title="分块", says="按 chunk_size 依次切块送入模型：不满的尾块、chunk_size=1、chunk_size 比 prompt 还长")
@_single_thread
def check_todo9_chunks(ns):
    """The chunk loop: consecutive chunks of chunk_size tokens, a short tail chunk, one chunk when chunk_size > len."""
    for _, oracle, tokens, sizes in _trials(3, divisible=False):
        for size in sizes:
            model = _Counting(oracle)
            label = f"{len(tokens)} 个 token，chunk_size={size}"
            _run(ns, model, tokens, size, None, label)
            hint = _chunk_hint(model.calls, len(tokens), size)
            assert hint is None, f"{TODO} [{label}]: {hint}"


@check(points=5, title="接力", says="每块带上一块返回的 past_kv，logits 与 KV 等于一次完整前向（多种 chunk 大小）")
@_single_thread
def check_todo9_relay(ns):
    """Chunks relay the KV: each chunk gets the past_kv the previous chunk returned; logits and KV equal a full pass."""
    for _, oracle, tokens, sizes in _trials(3, divisible=True):
        for size in sizes:
            model = _Counting(oracle)
            label = f"无前缀，{len(tokens)} 个 token，chunk_size={size}"
            result = _run(ns, model, tokens, size, None, label)
            _check_result(result, oracle, model, tokens, size, None, label)


@check(points=3, title="前缀", says="传入已缓存前缀的 past_kv 时，第一块接着它算；结果覆盖前缀；不修改传入的 past_kv")
@_single_thread
def check_todo9_prefix(ns):
    """An incoming past_kv (a cached prefix): the first chunk continues it, the result covers it, it is not modified."""
    for rng, oracle, tokens, sizes in _trials(3, divisible=True):
        prefix = [rng.randrange(_VOCAB) for _ in range(rng.randint(1, 30))]
        _, past = oracle(prefix)
        snapshot = [t.clone() for layer in past for t in layer]
        for size in (sizes[1], sizes[0], len(tokens)):
            model = _Counting(oracle)
            label = f"带 {len(prefix)} 个 token 的前缀 past_kv，{len(tokens)} 个新 token，chunk_size={size}"
            result = _run(ns, model, tokens, size, past, label)
            _check_result(result, oracle, model, tokens, size, past, label)
            after = [t for layer in past for t in layer]
            assert all(torch.equal(a, b) for a, b in zip(snapshot, after)), (
                f"{TODO} [{label}]: 传入的 past_kv 被原地修改了：它可能是缓存里被别的请求共享的前缀 KV"
            )


@check(points=2, title="类型", says="LongTensor 与 list 输入；返回 (logits, past_kv)，形状与层数正确")
@_single_thread
def check_todo9_types(ns):
    """A LongTensor prompt works like a list; the result is a tuple (logits Tensor, past_kv of n_layers (k, v) pairs)."""
    rng = random.Random(9)
    oracle = _OracleLM(seed=rng.randrange(10**6))
    n = 12
    tokens = [rng.randrange(_VOCAB) for _ in range(n)]
    for prompt, kind in ((torch.tensor(tokens), "LongTensor"), (tokens, "list")):
        model = _Counting(oracle)
        label = f"{kind} 输入，{n} 个 token，chunk_size={n}"
        logits, kv = _run(ns, model, prompt, n, None, label)
        assert isinstance(logits, torch.Tensor) and logits.dtype == torch.float32, (
            f"{TODO} [{label}]: logits 应是 float32 张量，得到 {type(logits).__name__}"
            + (f"（dtype {logits.dtype}）" if isinstance(logits, torch.Tensor) else "")
        )
        assert tuple(logits.shape) == (n, oracle.vocab), (
            f"{TODO} [{label}]: logits 形状应为 {(n, oracle.vocab)}，得到 {tuple(logits.shape)}"
        )
        assert isinstance(kv, tuple) and len(kv) == len(oracle.layers), (
            f"{TODO} [{label}]: past_kv 应是 {len(oracle.layers)} 层的 tuple（模型返回的原样），得到 {type(kv).__name__}"
        )
        for layer, pair in enumerate(kv):
            shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in pair]
            want = (oracle.nh, n, oracle.d // oracle.nh)
            assert shapes == [want, want], f"{TODO} [{label}]: 第 {layer} 层的 (k, v) 形状应为 {[want, want]}，得到 {shapes}"
        full_logits, _ = oracle(tokens)
        assert _close(logits, full_logits), f"{TODO} [{label}]: 只有一块时 logits 应等于一次完整前向"
