# %% [markdown]
# #### 4.6　测量：分块预填充到底换来了什么
#
# 前面几节证明了调度器“排得对”。这一节问它“排得好不好”：同一串请求，token 预算取 256 还是 8192、开不开前缀缓存、先 decode 还是先 prefill，用户看到的 TTFT 和 TBT 差多少。我们没有 GPU 集群，所以分三步：
#
# 1. **一步要多久：步时模型。** 先在你的 CPU 上给第二部分的小模型计时，拟合出 `一步的时间 ≈ a + b·token 数 + c·注意力工作量`；再按规格表上的数字，给 T4 和 A100 上的真实模型写一个 roofline 模型。
# 2. **请求怎么来：一个固定种子的泊松负载。** 短请求共用几段 system prompt，夹着少量很长的文档。
# 3. **离散事件模拟。** 用**你写的** `Scheduler` 一步一步排，每一步的时长由步时模型给出，记下每个请求每个 token 出来的时刻，算 TTFT 和 TBT。
#
# 模拟只用调度器的公开接口：`Request(...)`、`Scheduler(...)`、`add_request`、`schedule()`、`update_from_output(...)`，以及请求的 `num_computed_tokens`、`output_token_ids`、`num_tokens`。每一步它都核对你的调度器：没超预算、每个数都是正整数、命中的前缀没被调度、追上的请求收到了 token……有一条不成立，就停下来告诉你该回到哪个 TODO，而不是打印一张错的表。
#
# **注意力工作量**是什么：一步里第 `i` 个请求新算 `n_i` 个 token，它之前已经算好 `P_i` 个，这 `n_i` 个 query 每个要看 `P_i + n_i` 个 key（我们的实现把被掩掉的也算了），于是 `W = Σ_i n_i · (P_i + n_i)`。decode 的 `n_i = 1`，`W` 就是它的上下文长度。线性层的运算量只跟 token 数 `N_tok = Σ_i n_i` 成正比，注意力的运算量跟 `W` 成正比——这就是步时模型的后两项；`a` 是每一步都要付的固定开销。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "sched_measure_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 4.6 节的工具：步时模型、负载、离散事件模拟、统计。只用标准库和 torch；下面的测量单元格都调用它们。


def step_work(chunks):
    """chunks: 这一步的 [(n, P)]（新算 n 个 token，之前已算好 P 个）。返回 (token 数, 注意力工作量 W = Σ n·(P+n), 读的 KV token 数 Σ (P+n))。"""
    tokens = sum(n for n, _ in chunks)
    return tokens, sum(n * (p + n) for n, p in chunks), sum(p + n for n, p in chunks)


def linear_step_model(a, b, c):
    """步时模型 t = a + b·token 数 + c·W（秒）。返回 step_seconds(chunks)。"""

    def step_seconds(chunks):
        tokens, work, _ = step_work(chunks)
        return a + b * tokens + c * work

    return step_seconds


# 规格表上的数字（不是实测）：峰值是 Tensor Core 的稠密（不含稀疏）峰值
GPU_SPECS = {
    "T4": {"name": "NVIDIA T4 (16 GB)", "peak_flops": 65e12, "bandwidth": 320e9, "dtype": "fp16",
           "source": "NVIDIA T4 datasheet: FP16 混合精度 Tensor Core 65 TFLOPS，GDDR6 320 GB/s"},
    "A100": {"name": "NVIDIA A100 SXM 80 GB", "peak_flops": 312e12, "bandwidth": 2.039e12, "dtype": "bf16",
             "source": "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS（稠密），HBM2e 2,039 GB/s（40 GB 版 1,555 GB/s）"},
}
# 模型形状取自各自的 config.json；matmul_params = 每个 token 要乘的参数（不含输入词嵌入的查表，含 lm_head）
MODEL_SPECS = {
    "Llama-3-8B": {"params": 8.03e9, "matmul_params": 7.50e9, "n_layers": 32, "d_attn": 4096, "kv_heads": 8, "head_dim": 128, "bytes": 2},
    "Qwen2.5-1.5B": {"params": 1.54e9, "matmul_params": 1.54e9, "n_layers": 28, "d_attn": 1536, "kv_heads": 2, "head_dim": 128, "bytes": 2},
}


def roofline_step_model(gpu, model, step_overhead=0.0):
    """roofline：t = max(读的字节 / 带宽, 运算量 / 峰值算力) + step_overhead。返回 step_seconds(chunks)。

    读的字节 = 全部权重 + 每个请求读一遍自己的 KV（每 token 2·L·kv_heads·head_dim·bytes 字节）；
    运算量 = 2·matmul_params·token 数 + 4·L·d_attn·Σ n·(P + (n+1)/2)：QKᵀ 和 AV 每对 (query, key) 每层
    各 2·d_attn 次，像 FlashAttention 那样跳过被因果掩码掉的一半。step_overhead 是每步固定开销（秒），
    roofline 本身没有它，默认 0。
    """
    g, m = GPU_SPECS[gpu], MODEL_SPECS[model]
    weight_bytes = m["params"] * m["bytes"]
    kv_bytes_per_token = 2 * m["n_layers"] * m["kv_heads"] * m["head_dim"] * m["bytes"]

    def step_seconds(chunks):
        tokens, _, kv_tokens = step_work(chunks)
        causal_pairs = sum(n * p + n * (n + 1) / 2 for n, p in chunks)
        memory = (weight_bytes + kv_bytes_per_token * kv_tokens) / g["bandwidth"]
        compute = (2 * m["matmul_params"] * tokens + 4 * m["n_layers"] * m["d_attn"] * causal_pairs) / g["peak_flops"]
        return max(memory, compute) + step_overhead

    return step_seconds


def roofline_ridge_tokens(gpu, model):
    """只看权重（不计注意力和 KV）时，读权重的时间与算 token 的时间相等的 token 数：weight_bytes·peak / (bandwidth·2·matmul_params)。"""
    g, m = GPU_SPECS[gpu], MODEL_SPECS[model]
    return m["params"] * m["bytes"] * g["peak_flops"] / (g["bandwidth"] * 2 * m["matmul_params"])


def fit_step_model(samples, relative=True):
    """最小二乘拟合 t ≈ a + b·tokens + c·W。samples: [(tokens, W, 秒)]。返回 (a, b, c)。

    relative=True 时最小化相对误差（每个样本按 1/t 加权）：步时从零点几毫秒到上百毫秒，
    不加权的话最慢的几个点说了算，小步的拟合可以差好几倍。两列自变量量级差很多，先各自缩放再解。
    """
    if len(samples) < 3:
        raise ValueError("拟合 3 个系数至少要 3 个样本")
    scale_t = max(s[0] for s in samples) or 1
    scale_w = max(s[1] for s in samples) or 1
    weights = [1.0 / s[2] if relative else 1.0 for s in samples]
    design = torch.tensor([[w, w * s[0] / scale_t, w * s[1] / scale_w] for s, w in zip(samples, weights)], dtype=torch.float64)
    target = torch.tensor([[w * float(s[2])] for s, w in zip(samples, weights)], dtype=torch.float64)
    solution = torch.linalg.lstsq(design, target).solution[:, 0].tolist()
    return solution[0], solution[1] / scale_t, solution[2] / scale_w


def time_model_steps(model, points, repeats=3, seed=0):
    """给 model 的一步计时：每个 (n, P) 先用 P 个 token 建好 KV（不计时），再计时“带着这份 KV 新算 n 个 token”。

    各点轮流计时（每一轮把全部点各跑一次），机器状态的漂移对所有点一样；返回每点一行：
    {"n", "P", "tokens", "work", "median", "low", "high"}（秒，repeats 次的中位数、最小、最大）。
    """
    draw = random.Random(seed).randrange
    vocab = model.config.vocab_size
    prepared = []
    for n, p in points:
        if n + p > model.config.max_positions:
            raise ValueError(f"(n={n}, P={p}) 超过 max_positions={model.config.max_positions}")
        past = model([draw(vocab) for _ in range(p)])[1] if p else None
        prepared.append((n, p, [draw(vocab) for _ in range(n)], past))
    for n, p, ids, past in prepared:  # 预热
        model(ids, past_kv=past)
    samples = [[] for _ in prepared]
    for _ in range(repeats):
        for i, (n, p, ids, past) in enumerate(prepared):
            start = time.perf_counter()
            model(ids, past_kv=past)
            samples[i].append(time.perf_counter() - start)
    rows = []
    for (n, p, _, _), seconds in zip(prepared, samples):
        tokens, work, _ = step_work([(n, p)])
        rows.append({"n": n, "P": p, "tokens": tokens, "work": work, "median": statistics.median(seconds), "low": min(seconds), "high": max(seconds)})
    return rows


def poisson_workload(seed=34, num_requests=150, rate=3.0, num_system_prompts=4, system_len=1024, user_len=(16, 256),
                     long_share=0.15, long_len=(3000, 6000), output_len=(32, 256), vocab_size=32000):
    """固定种子的泊松到达负载：[(到达时刻 秒, prompt, max_tokens)]，按到达时刻排列。

    短请求 = 一段共享 system prompt（从 num_system_prompts 段里均匀挑一段）+ 自己的问题；
    长请求（占 long_share）= 一篇不和别人共享的长文档。num_system_prompts=None 表示每个短请求的
    system prompt 都是它独有的（长度分布不变，但没有可复用的前缀）。随机数的抽取顺序与
    num_system_prompts 无关，所以同一个 seed 下到达时刻、长度全都一样，只有“共享多少”不同。
    """
    rng = random.Random(seed)
    tokens = lambda n: [rng.randrange(1, vocab_size) for _ in range(n)]  # noqa: E731
    shared = [tokens(system_len) for _ in range(num_system_prompts or 0)]
    clock, requests = 0.0, []
    for _ in range(num_requests):
        clock += rng.expovariate(rate)
        is_long = rng.random() < long_share
        length = rng.randint(*long_len) if is_long else rng.randint(*user_len)
        which = rng.randrange(max(num_system_prompts or 1, 1))
        own = tokens(length)
        max_tokens = rng.randint(*output_len)
        if is_long:
            prompt = own
        elif num_system_prompts:
            prompt = shared[which] + own
        else:
            prompt = [rng.randrange(1, vocab_size) for _ in range(system_len)] + own
        requests.append((clock, prompt, max_tokens))
    return requests


class HashPrefixCache:
    """模拟用的前缀缓存：像 vLLM 一样只登记满块，块的键是（父块的键, 本块 token）链起来的哈希。

    match_prefix(tokens) -> 命中的 token 数（整块）；insert(tokens) 登记 tokens 的全部满块。
    不限容量、不淘汰（模拟里不管 KV 容量）。第一部分的 PrefixCacheManager 是线性扫描，
    几百个长 prompt 时太慢，这里用字典。
    """

    def __init__(self, block_size=16):
        self.block_size = block_size
        self.keys = set()

    def _walk(self, tokens):
        key, size = None, self.block_size
        for start in range(0, len(tokens) - size + 1, size):
            key = hash((key, tuple(tokens[start : start + size])))
            yield start + size, key

    def match_prefix(self, tokens) -> int:
        hit = 0
        for end, key in self._walk(tokens):
            if key not in self.keys:
                break
            hit = end
        return hit

    def insert(self, tokens) -> None:
        for _, key in self._walk(tokens):
            self.keys.add(key)


class PrefillFirstScheduler(Scheduler):
    """SGLang 默认的“先 prefill”（get_next_batch_to_run: Run prefill first if possible），用你的 TODO 15–18 搭成。

    能组出 prefill 批就只跑 prefill：先接着做了一半的 prefill，再按到达顺序接纳新请求，
    合起来不超过 max_num_batched_tokens（相当于 --chunked-prefill-size）；这一步 decode 一个 token 也拿不到。
    组不出 prefill 批时，才让 running 里的全部请求各 decode 一个 token。没有 --enable-mixed-chunk。
    """

    def schedule(self):
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        for request in self.running:  # 做了一半的 prefill（SGLang 的 chunked_req）
            if budget > 0 and request.num_computed_tokens < request.num_prompt_tokens:
                num_new = self._num_new_tokens(request, request.num_computed_tokens, budget)
                if num_new > 0:
                    out.num_scheduled_tokens[request.request_id] = num_new
                    budget -= num_new
        self._schedule_waiting(out, budget)
        if not out.num_scheduled_tokens:  # 没有 prefill 可做：纯 decode 步
            self._schedule_running(out, len(self.running))
        for request_id, num_new in out.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += num_new
        return out


class SchedulerCheckError(RuntimeError):
    """模拟过程中发现调度器的输出不对：消息里写明该回到哪个 TODO。"""


def percentile(values, q):
    """线性插值的分位数（q 取 0–100）；空列表返回 nan。"""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def simulate_serving(workload, step_seconds, max_num_batched_tokens, max_num_seqs=64, block_size=16, cache=None,
                     scheduler_class=None, record_steps=False):
    """离散事件模拟：按到达时刻把请求交给调度器，一步一步排，时钟每步前进 step_seconds(这一步的 [(n, P)])。

    workload: poisson_workload 的结果；cache: None（不用前缀缓存）或 HashPrefixCache（可以是上一次运行留下的“热”缓存）。
    scheduler_class: None 表示你的 Scheduler（vLLM 的 decode 优先），也可以是 PrefillFirstScheduler。
    一个请求的 prompt 全部算完后（每步结束时）把它算好的满块登记进 cache，和 vLLM 一样只登记满块。
    返回 dict：ttft、tbt（秒的列表，tbt 把所有请求的相邻 token 间隔放在一起）、hit_tokens、prompt_tokens、
    prefill_tokens（真正算了的 prompt token）、token_times（request_id -> 各 token 出来的时刻）、num_steps、makespan，按请求排列的 prefill_busy（它的 prefill
    所在各步的时长之和）与 uncached（它没命中的 prompt token 数），record_steps=True 时还有 steps：
    [(开始时刻, 时长, decode token 数, prefill token 数)]。调度器的输出不对时抛出 SchedulerCheckError。
    """
    scheduler_class = Scheduler if scheduler_class is None else scheduler_class
    decode_first = not issubclass(scheduler_class, PrefillFirstScheduler)
    scheduler = scheduler_class(max_num_batched_tokens, max_num_seqs, block_size=block_size, prefix_cache=cache)
    requests, arrival, admitted, finished, first_hit, token_times, busy = {}, {}, set(), set(), {}, {}, {}
    for i, (when, prompt, max_tokens) in enumerate(workload):
        rid = f"r{i}"
        requests[rid] = Request(rid, prompt, max_tokens)
        arrival[rid] = when
    order = list(requests)
    total_tokens = sum(len(r.prompt_token_ids) + r.max_tokens for r in requests.values())
    clock, next_arrival, steps, num_steps, prefill_tokens = 0.0, 0, [], 0, 0

    def fail(todo, message):
        raise SchedulerCheckError(f"模拟第 {num_steps + 1} 步：{message}。回到 {todo} 检查（先让 4.5 节的可见检查通过）")

    while len(finished) < len(order):
        if num_steps > total_tokens:  # 每一步至少推进 1 个 token，超过这个数一定是调度器在原地打转
            fail("TODO 17–19", f"{num_steps} 步后还有请求没结束")
        while next_arrival < len(order) and arrival[order[next_arrival]] <= clock:
            scheduler.add_request(requests[order[next_arrival]])
            next_arrival += 1
        arrived_unfinished = [rid for rid in order[:next_arrival] if rid not in finished]
        if not arrived_unfinished:
            clock = arrival[order[next_arrival]]  # 空闲：时钟跳到下一个请求到达
            continue
        before = {rid: requests[rid].num_computed_tokens for rid in arrived_unfinished}
        try:
            out = scheduler.schedule()
        except NotImplementedError:
            raise
        except Exception as error:
            fail("TODO 15–18", f"schedule() 抛出 {type(error).__name__}: {error}")
        scheduled = getattr(out, "num_scheduled_tokens", None)
        if not isinstance(scheduled, dict):
            fail("TODO 17–18", f"out.num_scheduled_tokens 应是 dict，得到 {type(scheduled).__name__}")
        if not scheduled:
            fail("TODO 17–18", f"有 {len(arrived_unfinished)} 个请求没结束，schedule() 却一个 token 也没排")
        if sum(scheduled.values()) > max_num_batched_tokens:
            fail("TODO 16–18", f"这一步一共排了 {sum(scheduled.values())} 个 token，超过预算 {max_num_batched_tokens}")
        chunks, decode_tokens = [], 0
        for rid, n in scheduled.items():
            if rid not in before:
                fail("TODO 18–19", f"排了 {rid!r}，它不是一个已到达、没结束的请求")
            if type(n) is not int or n <= 0:
                fail("TODO 17–18", f"{rid} 分到 {n!r} 个 token，应是正整数（分到 0 个的请求不要记）")
            request = requests[rid]
            start = request.num_computed_tokens - n
            if rid not in admitted:
                expected = 0 if cache is None else min(cache.match_prefix(request.prompt_token_ids), request.num_tokens - 1) // block_size * block_size
                if start != expected:
                    fail("TODO 15 和 TODO 18", f"新请求 {rid}（{request.num_prompt_tokens} 个 token）应从命中长度 {expected} 开始算，实际从 {start} 开始")
                admitted.add(rid)
                first_hit[rid] = start
            elif start != before[rid]:
                fail("TODO 17", f"{rid} 的 num_computed_tokens 从 {before[rid]} 变成 {request.num_computed_tokens}，只应增加 {n}")
            if request.num_computed_tokens > request.num_tokens:
                fail("TODO 16", f"{rid} 只欠 {request.num_tokens - start} 个 token，却分到 {n} 个")
            if start >= request.num_prompt_tokens:
                decode_tokens += n
            else:
                prefill_tokens += min(n, request.num_prompt_tokens - start)
            chunks.append((n, start))
        if decode_first and sum(scheduled.values()) < max_num_batched_tokens:
            idle = [rid for rid in admitted if rid not in finished and rid not in scheduled]
            if idle:
                fail("TODO 17", f"预算还剩 {max_num_batched_tokens - sum(scheduled.values())}，running 里的 {idle[0]} 却没被排上")
            waiting = [rid for rid in arrived_unfinished if rid not in admitted]
            running = len([rid for rid in admitted if rid not in finished])
            if waiting and running < max_num_seqs:
                fail("TODO 18", f"预算还剩、running 只有 {running} 个（max_num_seqs={max_num_seqs}），等待中的 {waiting[0]} 却没被接纳")
        duration = step_seconds(chunks)
        if record_steps:
            steps.append((clock, duration, decode_tokens, sum(scheduled.values()) - decode_tokens))
        clock += duration
        num_steps += 1
        for rid in scheduled:
            if rid not in token_times:  # 还没出第一个 token：这一步的时长算进它的 prefill
                busy[rid] = busy.get(rid, 0.0) + duration
        caught_up = {rid for rid in scheduled if requests[rid].num_computed_tokens == requests[rid].num_tokens}
        outputs_before = {rid: len(requests[rid].output_token_ids) for rid in scheduled}
        try:
            scheduler.update_from_output(out, {rid: 1 + num_steps % 97 for rid in scheduled})
        except NotImplementedError:
            raise
        except Exception as error:
            fail("TODO 19", f"update_from_output 抛出 {type(error).__name__}: {error}")
        for rid in scheduled:
            request = requests[rid]
            gained = len(request.output_token_ids) - outputs_before[rid]
            if gained != (1 if rid in caught_up else 0):
                state = "已经追上" if rid in caught_up else "还在 prefill 中途"
                fail("TODO 19", f"{rid} {state}，这一步应收到 {1 if rid in caught_up else 0} 个 token，实际收到 {gained} 个")
            if gained:
                token_times.setdefault(rid, []).append(clock)
                if len(request.output_token_ids) >= request.max_tokens:
                    finished.add(rid)
            if cache is not None and request.num_computed_tokens >= request.num_prompt_tokens and before[rid] < request.num_prompt_tokens:
                cache.insert(request.prompt_token_ids)  # prompt 刚算完：登记它的满块
        for rid in finished & set(scheduled):
            if rid in getattr(scheduler, "requests", {}):
                fail("TODO 19", f"{rid} 已生成 max_tokens 个 token，却还留在调度器里")
    ttft = [token_times[rid][0] - arrival[rid] for rid in order]
    tbt = [later - earlier for rid in order for earlier, later in zip(token_times[rid], token_times[rid][1:])]
    result = {
        "ttft": ttft, "tbt": tbt, "token_times": token_times, "num_steps": num_steps, "makespan": clock, "prefill_tokens": prefill_tokens,
        "hit_tokens": sum(first_hit.values()), "prompt_tokens": sum(r.num_prompt_tokens for r in requests.values()),
        "prefill_busy": [busy.get(rid, 0.0) for rid in order], "uncached": [requests[rid].num_prompt_tokens - first_hit[rid] for rid in order],
    }
    if record_steps:
        result["steps"] = steps
    return result


def summarize_run(label, result):
    """一次模拟的一行表：TTFT / TBT 的 p50、p99（毫秒），命中率，真正算了的 prompt token。"""
    return {
        "label": label,
        "ttft_p50": 1e3 * percentile(result["ttft"], 50), "ttft_p99": 1e3 * percentile(result["ttft"], 99),
        "tbt_p50": 1e3 * percentile(result["tbt"], 50), "tbt_p99": 1e3 * percentile(result["tbt"], 99),
        "tbt_max": 1e3 * max(result["tbt"]), "hit_share": result["hit_tokens"] / result["prompt_tokens"],
        "prefill_tokens": result["prefill_tokens"], "steps": result["num_steps"], "makespan": result["makespan"],
    }


SERVING_COLUMNS = [
    ("label", "配置", "{}"), ("ttft_p50", "TTFT p50 (ms)", "{:.0f}"), ("ttft_p99", "TTFT p99 (ms)", "{:.0f}"),
    ("tbt_p50", "TBT p50 (ms)", "{:.1f}"), ("tbt_p99", "TBT p99 (ms)", "{:.1f}"), ("tbt_max", "TBT 最大 (ms)", "{:.0f}"),
    ("hit_share", "命中的 prompt token", "{:.0%}"), ("prefill_tokens", "实际 prefill token", "{:,}"), ("steps", "步数", "{:,}"),
    ("makespan", "全部完成 (s)", "{:.1f}"),
]


def serving_result_or_none(run):
    """运行 run()；你的 TODO 还是 raise NotImplementedError 时返回 None（测量单元格据此提示先完成 TODO），其他错误照常抛出。"""
    try:
        return run()
    except NotImplementedError:
        return None


# %% [markdown]
# ##### 步时模型（一）：在你的 CPU 上量出来
#
# 下面的单元格给第二部分的 `TinyCausalLM`（这次宽一点：`d = 128`、2 层、4 个头）计时：对 4 种 token 数 `n` × 3 种已有上下文 `P`，先建好 `P` 个 token 的 KV，再计时“带着它新算 `n` 个 token”的一次前向。12 个点轮流各跑 5 遍（轮流，是为了让机器状态的漂移对每个点一样），表里是中位数和最小–最大。然后用最小二乘（`torch.linalg.lstsq`，按相对误差加权）拟合 `t ≈ a + b·N_tok + c·W`，“拟合”一列是模型的预测，“残差”是预测相对中位数差了多少。
#
# 读数时注意三件事：`a` 是每一步都要付的固定开销（Python 调用、几十个小算子的启动）；`b` 是每个 token 过一遍全部线性层的代价；这个小模型的注意力把 `T × S` 的分数全算出来再掩码，所以 `c·W` 随上下文增长得很快——这是它和 GPU 上 FlashAttention 的不同之处。计时用单线程（`torch.set_num_threads(1)`，测完恢复），一共一两秒。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "sched_measure_step_model", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 实测：小模型一步的耗时，拟合 t ≈ a + b·N_tok + c·W；再列出 T4 / A100 的 roofline（规格表数字，不是实测）
calib_model = TinyCausalLM(TinyConfig(vocab_size=64, d_model=128, n_layers=2, n_heads=4, max_positions=1536), seed=0)
calib_threads = torch.get_num_threads()
torch.set_num_threads(1)
try:
    calib_rows = time_model_steps(calib_model, [(n, p) for n in (1, 32, 128, 384) for p in (0, 384, 1152)], repeats=5)
finally:
    torch.set_num_threads(calib_threads)
calib_a, calib_b, calib_c = fit_step_model([(r["tokens"], r["work"], r["median"]) for r in calib_rows])
for row in calib_rows:
    row["fit"] = calib_a + calib_b * row["tokens"] + calib_c * row["work"]
    row["residual"] = row["fit"] / row["median"] - 1
    row["ms"] = f"{1e3 * row['median']:.2f} [{1e3 * row['low']:.2f}, {1e3 * row['high']:.2f}]"
    row["fit_ms"] = 1e3 * row["fit"]
print("小模型（d=128, L=2, 4 头, float32, 单线程）一步的耗时：5 次的中位数 [最小, 最大]")
print(format_table(calib_rows, [("n", "新 token n", "{}"), ("P", "已有 P", "{}"), ("work", "W = n·(P+n)", "{:,}"), ("ms", "实测 ms", "{}"),
                                ("fit_ms", "拟合 ms", "{:.2f}"), ("residual", "残差", "{:+.0%}")]))
print(f"\n拟合：a = {1e3 * calib_a:.3f} ms，b = {1e6 * calib_b:.2f} µs/token，c = {1e9 * calib_c:.1f} ns/(query·key)；"
      f"残差的中位数 {statistics.median(abs(r['residual']) for r in calib_rows):.0%}，最大 {max(abs(r['residual']) for r in calib_rows):.0%}")
if calib_b > 0:
    print(f"固定开销 a 相当于 {calib_a / calib_b:.0f} 个 token 的线性层时间：一步只算几个 token 时，时间几乎全是 a")

print("\nroofline：t = max((权重 + KV) 字节 / 带宽, 运算量 / 峰值)；常数是规格表上的数字")
roofline_rows = []
for gpu, model_name in (("T4", "Qwen2.5-1.5B"), ("A100", "Llama-3-8B")):
    step = roofline_step_model(gpu, model_name)
    roofline_rows.append({
        "where": f"{GPU_SPECS[gpu]['name']} · {model_name} ({GPU_SPECS[gpu]['dtype']})",
        "weights_gb": MODEL_SPECS[model_name]["params"] * MODEL_SPECS[model_name]["bytes"] / 1e9,
        "ridge": roofline_ridge_tokens(gpu, model_name),
        "decode": 1e3 * step([(1, 1000)]), "decode64": 1e3 * step([(1, 1000)] * 64),
        "prefill2k": 1e3 * step([(2048, 0)]), "prefill8k": 1e3 * step([(8192, 0)]),
    })
print(format_table(roofline_rows, [("where", "GPU · 模型", "{}"), ("weights_gb", "权重 (GB)", "{:.1f}"), ("ridge", "拐点 (token/步)", "{:.0f}"),
                                   ("decode", "1 个 decode (ms)", "{:.1f}"), ("decode64", "64 个 decode (ms)", "{:.1f}"),
                                   ("prefill2k", "2048 token prefill (ms)", "{:.0f}"), ("prefill8k", "8192 token prefill (ms)", "{:.0f}")]))
for gpu in ("T4", "A100"):
    print(f"  {gpu}: {GPU_SPECS[gpu]['source']}")

print("\n每步固定开销 t0：A100 · Llama-3-8B，一个 prompt 分块算完 / 一次算完 的时间比（roofline + t0）")
overhead_rows = []
for t0 in (0.0, 0.005):
    step = roofline_step_model("A100", "Llama-3-8B", step_overhead=t0)
    for length in (2048, 8192):
        whole = step([(length, 0)])
        row = {"t0": 1e3 * t0, "length": length}
        for chunk in (512, 2048):
            row[f"c{chunk}"] = sum(step([(min(chunk, length - s), s)]) for s in range(0, length, chunk)) / whole
        overhead_rows.append(row)
print(format_table(overhead_rows, [("t0", "t0 (ms)", "{:.0f}"), ("length", "prompt 长度", "{}"), ("c512", "块 512", "{:.2f}×"), ("c2048", "块 2048", "{:.2f}×")]))

try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    fig, (ax_cpu, ax_gpu) = plt.subplots(1, 2, figsize=(10, 3.6))
    for p, marker in zip((0, 384, 1152), ("o", "s", "^")):
        rows = [r for r in calib_rows if r["P"] == p]
        ax_cpu.errorbar([r["n"] for r in rows], [1e3 * r["median"] for r in rows],
                        yerr=[[1e3 * (r["median"] - r["low"]) for r in rows], [1e3 * (r["high"] - r["median"]) for r in rows]],
                        fmt=marker, capsize=3, label=f"measured, P={p}")
        grid = list(range(1, 385, 8))
        ax_cpu.plot(grid, [1e3 * (calib_a + calib_b * n + calib_c * n * (p + n)) for n in grid], "--", color=ax_cpu.lines[-1].get_color())
    ax_cpu.set_xlabel("new tokens in the step (n)")
    ax_cpu.set_ylabel("step time (ms)")
    ax_cpu.set_title("your CPU: tiny model, fit a + b*n + c*n*(P+n)")
    ax_cpu.legend(fontsize=8)
    tokens_grid = [2 ** k for k in range(0, 14)]
    for gpu, model_name in (("T4", "Qwen2.5-1.5B"), ("A100", "Llama-3-8B")):
        step = roofline_step_model(gpu, model_name)
        ax_gpu.plot(tokens_grid, [1e3 * step([(n, 0)]) for n in tokens_grid], "o-", markersize=3, label=f"{gpu}, {model_name}")
        ridge = roofline_ridge_tokens(gpu, model_name)
        ax_gpu.axvline(ridge, color=ax_gpu.lines[-1].get_color(), linestyle=":", linewidth=1)
    ax_gpu.set_xscale("log", base=2)
    ax_gpu.set_yscale("log")
    ax_gpu.set_xlabel("tokens in the step (prefill from an empty context)")
    ax_gpu.set_ylabel("step time (ms)")
    ax_gpu.set_title("roofline from spec sheets (dotted: ridge)")
    ax_gpu.legend(fontsize=8)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# ##### 步时模型（二）：规格表上的 roofline
#
# 一个 decoder-only 模型的一步，GPU 至少要做两件事：把全部权重从显存读一遍（还有每个请求自己的 KV），以及做完这一步的乘加。设权重 `B_w` 字节、每个 token 乘 `N` 个参数（`2N` 次运算）、显存带宽 `BW`、峰值算力 `F`，一步 `N_tok` 个 token：
#
# $$t_\text{step} \approx \max\Big(\frac{B_w + B_\text{KV}}{BW},\ \frac{2N\cdot N_\text{tok} + 4\,L\,d\cdot W_\text{causal}}{F}\Big)$$
#
# 左边与 token 数几乎无关（decode 一个还是六十四个，权重都只读一遍），右边与 token 数成正比。两边相等处是**拐点**：不计注意力和 KV 时 `N_tok* = B_w·F / (BW·2N)`；bf16/fp16 每个参数 2 字节、2 次运算，两者抵消，`N_tok* ≈ F / BW`——A100 约 160 个 token，T4 约 200 个。一步少于这么多 token 时是**带宽受限**的（多加 token 几乎不要钱：这正是 decode 可以“搭便车”塞进 prefill 块的原因），多于它时是**算力受限**的（时间随 token 数线性增长：这正是长 prefill 造成 generation stall 的原因）。
#
# 上面的表用了两组规格表数字：**T4**（Colab 的免费 GPU；65 TFLOPS fp16 Tensor Core、320 GB/s；它只有 16 GB，放不下 16 GB 的 8B 模型，所以配 Qwen2.5-1.5B）与 **A100 SXM 80 GB**（论文里的卡；312 TFLOPS bf16 稠密、2,039 GB/s；40 GB 版 1,555 GB/s）配 Llama-3-8B（80.3 亿参数，bf16 权重 16 GB；32 层、宽 4096、8 个 KV 头 × 128，每个 token 的 KV 128 KiB）。`W_causal = Σ n·(P + (n+1)/2)`：GPU 上的 FlashAttention 跳过被掩掉的一半，所以这里不用小模型的 `n·(P+n)`。
#
# **roofline 忽略了什么。** 它假设 kernel 一过拐点就跑满峰值、带宽也用满（实际的矩阵乘在几百个 token 时远没到峰值，MFU 常在 40–70%）；没有 kernel 启动、调度、采样、CPU 与 GPU 之间的同步这些**每步固定开销**；没有通信（张量并行）、没有显存容量（KV 放不放得下、会不会抢占）、没有量化和投机解码。所以它给出的是“这块卡不可能比这更快”的下界，不是预测。
#
# 每步固定开销对这一节很要紧：没有它，把一个 prompt 切成 512 的块与一次算完**一样快**（上表 `t0 = 0` 两行都是 1.00×）。Sarathi-Serve 论文实测的分块开销是：块 512 时 1.12–1.19×，块 2048 时约 1.0×（2k–8k token 的 prompt）。我们给 roofline 加一个假设的每步固定开销 `t0 = 5 ms`，它正好把这个比例复现到 1.14–1.16× 与 1.00–1.03×（上表后两行）。**`t0` 是为了对上论文的数字而选的，不是测出来的**；下面的模拟两种都跑：`t0 = 5 ms` 作为主结果，`t0 = 0`（纯 roofline）作为对照。你的 CPU 上量出的 `a`（约 1 ms，相当于上百个 token 的线性层时间）是同一类东西在小模型上的样子。

# %% [markdown]
# ##### 负载与模拟
#
# `poisson_workload(seed=34)`：180 个请求，泊松到达，平均每秒 10 个；85% 是短请求（4 段 1,024 token 的共享 system prompt 之一 + 16–256 token 的问题），15% 是 3,000–6,000 token 的长文档（不和别人共享）；每个请求生成 32–256 个 token。`max_num_seqs = 64`、`block_size = 16`，前缀缓存默认打开（`HashPrefixCache`：像 vLLM 一样只登记满块；不限容量）。
#
# 模拟的一步：把到达时刻已过的请求交给调度器（`add_request`）；`schedule()`；由 `num_computed_tokens` 减去这一步分到的 token 数得到每个请求这一步之前的上下文 `P`，算出这一步的时长；时钟前进这么多；`update_from_output` 把 token 交给追上的请求，它们的 token 在这一步结束时“出来”。**TTFT** = 第一个 token 出来的时刻 − 到达时刻；**TBT** = 同一请求相邻两个 token 的间隔，p50/p99 是把所有请求的间隔放在一起算的。
#
# 三种调度：
# - **decode 优先（vLLM v1）**：就是你的 `Scheduler`，预算取 256 到 8192。
# - **不分块**：还是你的 `Scheduler`，预算取“最长的 prompt + `max_num_seqs`”，于是任何 prompt 都能一步算完，running 里的 decode 也都排得上（vLLM 文档说，预算等于 `max_model_len` 时近似 V0 的默认调度，只是仍然先排 decode）。一步里排完一个整 prompt 后如果还有预算，下一个新请求仍可能只拿到一部分——这点和 V0 不同，我们不另写一个调度器。
# - **prefill 优先（SGLang 默认）**：`PrefillFirstScheduler`，用你的 TODO 15–18 搭成：能组出 prefill 批就只跑 prefill（预算相当于 `--chunked-prefill-size`），这一步 decode 一个 token 也拿不到；没有 prefill 可做时才跑全部 decode。接纳顺序我们用先来先服务（SGLang 的 `--schedule-policy` 还能按最长前缀匹配等排序，这里不模拟）。
#
# 每一次模拟都在几百毫秒内跑完；这一格一共几秒。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "sched_measure_budget", "locked": true, "schema_version": 3, "solution": false, "task": false}
# 模拟：token 预算、不分块、先 prefill，A100 · Llama-3-8B 的 roofline（+ 每步 5 ms / 纯 roofline）
sweep_workload = poisson_workload(seed=34, num_requests=180, rate=10.0)
sweep_longest = max(len(prompt) for _, prompt, _ in sweep_workload)
sweep_step = roofline_step_model("A100", "Llama-3-8B", step_overhead=0.005)
sweep_pure = roofline_step_model("A100", "Llama-3-8B")
sweep_budgets = (256, 512, 1024, 2048, 4096, 8192)
sweep_no_chunk = sweep_longest + 64  # 最长的 prompt + max_num_seqs 个 decode
print(f"负载：{len(sweep_workload)} 个请求，{sweep_workload[-1][0]:.1f} s 内到达；prompt {min(len(p) for _, p, _ in sweep_workload)}–{sweep_longest} token，"
      f"其中长文档 {sum(len(p) >= 3000 for _, p, _ in sweep_workload)} 个；共生成 {sum(n for _, _, n in sweep_workload):,} 个 token")


def _sweep():
    rows, runs = [], {}
    for budget in sweep_budgets + (sweep_no_chunk,):
        label = f"decode 优先 {budget}" if budget != sweep_no_chunk else f"不分块（{budget}）"
        runs[label] = simulate_serving(sweep_workload, sweep_step, budget, cache=HashPrefixCache(), record_steps=budget in (512, sweep_no_chunk))
        rows.append(summarize_run(label, runs[label]))
    for budget in (512, 2048):
        label = f"prefill 优先 {budget}"
        runs[label] = simulate_serving(sweep_workload, sweep_step, budget, cache=HashPrefixCache(), scheduler_class=PrefillFirstScheduler)
        rows.append(summarize_run(label, runs[label]))
    for budget in (512, 2048):
        label = f"decode 优先 {budget}，无缓存"
        runs[label] = simulate_serving(sweep_workload, sweep_step, budget, cache=None)
        rows.append(summarize_run(label, runs[label]))
    pure_rows = [summarize_run(f"纯 roofline {budget}", simulate_serving(sweep_workload, sweep_pure, budget, cache=HashPrefixCache()))
                 for budget in (256, 512, 2048, 8192)]
    return rows, runs, pure_rows


sweep_started = time.perf_counter()
sweep = serving_result_or_none(_sweep)
if sweep is None:
    print("请先完成 TODO 15–19（4.3、4.4 节），再运行本测量。")
else:
    sweep_rows, sweep_runs, sweep_pure_rows = sweep
    print(f"模拟 {len(sweep_rows) + len(sweep_pure_rows)} 次，用时 {time.perf_counter() - sweep_started:.1f} s；A100 · Llama-3-8B，roofline + 每步 5 ms：")
    print(format_table(sweep_rows, SERVING_COLUMNS))
    print("\n对照：纯 roofline（t0 = 0）")
    print(format_table(sweep_pure_rows, SERVING_COLUMNS[:5]))
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        # (i) 时间线：不分块时最长的一步前后，两种调度并排；上：每步的 token（宽 = 时长），下：正在 decode 的请求各 token 出来的时刻
        stall_start, stall_length, _, _ = max(sweep_runs[f"不分块（{sweep_no_chunk}）"]["steps"], key=lambda s: s[1])
        window = (stall_start - 0.3, stall_start + stall_length + 0.5)
        fig, axes = plt.subplots(2, 2, figsize=(11, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
        for col, label in enumerate(("decode 优先 512", f"不分块（{sweep_no_chunk}）")):
            run = sweep_runs[label]
            steps = [s for s in run["steps"] if window[0] - 1 <= s[0] <= window[1]]
            starts, widths = [s[0] for s in steps], [s[1] for s in steps]
            top = axes[0, col]
            top.bar(starts, [s[2] for s in steps], width=widths, align="edge", color="tab:blue", edgecolor="white", linewidth=0.3, label="decode tokens")
            top.bar(starts, [s[3] for s in steps], width=widths, align="edge", bottom=[s[2] for s in steps], color="tab:orange", edgecolor="white", linewidth=0.3, label="prefill tokens")
            top.set_ylabel("tokens in the step")
            longest = max(widths)
            top.set_title(("decode-first, budget 512" if col == 0 else f"no chunking (budget {sweep_no_chunk})") + f": longest step {1e3 * longest:.0f} ms")
            decoding = sorted(run["token_times"], key=lambda rid: -sum(window[0] <= t <= window[1] for t in run["token_times"][rid]))[:12]
            for row, rid in enumerate(decoding):
                times = [t for t in run["token_times"][rid] if window[0] <= t <= window[1]]
                axes[1, col].plot(times, [row] * len(times), "|", color="tab:blue", markersize=7)
            axes[1, col].set_yticks([])
            axes[1, col].set_ylabel("12 running requests")
            axes[1, col].set_xlabel("time (s); a bar's width is the step's duration; a tick is one output token")
            axes[1, col].set_xlim(*window)
        axes[0, 0].legend(fontsize=8, loc="lower left")
        fig.suptitle("generation stall: one long prompt computed whole (right) freezes every running request; chunked (left) it does not")
        fig.tight_layout()
        plt.show()
        # (ii) TTFT 与 TBT p99 的取舍：每个预算一个点
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for prefix, marker, color, name in (("decode 优先", "o-", "tab:blue", "decode-first (vLLM)"), ("prefill 优先", "s", "tab:red", "prefill-first (SGLang default)")):
            points = [r for r in sweep_rows if r["label"].startswith(prefix) and "无缓存" not in r["label"]]
            ax.plot([r["ttft_p50"] for r in points], [r["tbt_p99"] for r in points], marker, color=color, label=name)
            for r in points:
                ax.annotate(r["label"].split()[-1], (r["ttft_p50"], r["tbt_p99"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        no_chunk = next(r for r in sweep_rows if r["label"].startswith("不分块"))
        ax.plot([no_chunk["ttft_p50"]], [no_chunk["tbt_p99"]], "kx", markersize=9, label="no chunking")
        pure = sweep_pure_rows
        ax.plot([r["ttft_p50"] for r in pure], [r["tbt_p99"] for r in pure], "^--", color="tab:green", alpha=0.7, label="decode-first, pure roofline (t0=0)")
        for r in pure:
            ax.annotate(r["label"].split()[-1], (r["ttft_p50"], r["tbt_p99"]), textcoords="offset points", xytext=(5, -10), fontsize=7, color="tab:green")
        ax.set_yscale("log")
        ax.set_xlabel("TTFT p50 (ms)")
        ax.set_ylabel("TBT p99 (ms)")
        ax.set_title("budget trade-off, A100 + Llama-3-8B (simulated)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        plt.show()
