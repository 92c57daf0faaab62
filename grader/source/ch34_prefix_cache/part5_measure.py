# %% [markdown]
# #### 5.8　测量：你的引擎在你的设备上
#
# 4.6 节的数字都是**模拟**：调度器是真的，步时来自一个模型。现在引擎是真的了，这一节在你的设备上**量**它，并把量到的放在 4.6 节的模拟旁边。用的模型是 5.4 节选的那个（`llm`）：有 GPU 时默认是真实的 Qwen2.5-0.5B-Instruct，CPU 上是随机权重的小模型。四件事：
#
# 1. **服务一串聊天请求。** 和 4.6 节同样形状的负载（`poisson_workload`：泊松到达，短请求共用几段 system prompt；token 是随机的 id，不是真实文本——计时与内容无关），按到达时刻交给你的 `LLMEngine`，每一步之后给采样出的 token 打上墙钟时间：**TTFT** = 第一个 token 的时刻 − 到达时刻，**TBT** = 同一请求相邻两个 token 的间隔。引擎空闲、下一个请求还没到时，时钟直接跳到它到达（不真的等）。前缀缓存开 / 关 × 几种 token 预算，每种跑三遍，表里是三遍的中位数和 [最小, 最大]。到达率按你的设备定：先把同一串请求离线跑一遍（全部同时到达）量出它的吞吐，再取它的 60%，所以不同设备上的负载“一样忙”，而不是一样多。
# 2. **放在模拟旁边。** 用这些步自己的耗时拟合 4.6 节的步时模型 `t ≈ a + b·N_tok + c·W`，再用**你第四部分的** `Scheduler` 和 `simulate_serving` 模拟同一串请求，看模拟与实测差多少。
# 3. **一次一个请求，对照。** 同一批请求，全部同时交给引擎，和一次只处理一个请求（`generate_greedy`；装了 `transformers` 时再加它的 `generate`）比吞吐。
# 4. **前缀缓存从多长开始划算，一步为什么这么慢。** 90% 的 prompt 已在缓存里时，prefill 比从头算快多少，随 prompt 长度怎样变；再把一个 decode 步的耗时和两条下限比：读一遍权重要多久（权重字节 / 实测带宽），发射这一步的全部算子要多久（算子数 × 一个空算子的耗时）。
#
# 每个计时都给出重复几遍的中位数和最小–最大。表下面的每一句结论都由这一次运行的数写成：两组数的范围不重叠，才说谁低、低多少；范围重叠，就说“这次测量分不出差别”，而不是挑一个好看的数。所以这一节的正文只讲**该看什么、为什么**，不替你的设备预先写好结果。CPU 上整节约半分钟到一分钟。

# %% tags=["learner-only"] nbgrader={"grade": false, "grade_id": "engine_measure_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 这一节的测量工具：驱动引擎服务一串请求并打时间戳、设备上的各种计时。只用标准库和 torch（transformers、matplotlib 可选）。
import contextlib
import tempfile
import warnings


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def spread_text(values, scale=1e3, digits=1):
    """中位数 [最小, 最大]，乘以 scale（默认秒 -> 毫秒）。"""
    return f"{scale * statistics.median(values):.{digits}f} [{scale * min(values):.{digits}f}, {scale * max(values):.{digits}f}]"


def range_order(a, b):
    """两组重复测量谁更小：-1（a 的每一次都比 b 的每一次小）、1（反过来）、0（范围重叠，分不出）。"""
    if max(a) < min(b):
        return -1
    if max(b) < min(a):
        return 1
    return 0


def compare_verdict(name_a, a, name_b, b, what="耗时", scale=1e3, unit="ms", digits=1):
    """两组重复测量的一句结论，由这次的数写成：各自的中位数 [最小, 最大]（乘以 scale，单位 unit），
    范围不重叠才说谁低、中位数差几倍；重叠就说这次分不出差别。"""
    spreads = f"「{name_a}」{spread_text(a, scale, digits)} {unit}，「{name_b}」{spread_text(b, scale, digits)} {unit}"
    order = range_order(a, b)
    if order == 0:
        return f"{what}：{spreads}；范围重叠，这次测量分不出差别（太吵，下不了结论；在空闲的机器上重跑这一格）"
    low, high = (name_a, name_b) if order < 0 else (name_b, name_a)
    ratio = max(statistics.median(a), statistics.median(b)) / max(min(statistics.median(a), statistics.median(b)), 1e-12)
    return f"{what}：{spreads}；「{low}」低，每一次都比「{high}」的每一次低（中位数差 {ratio:.2f}×）"


def serve_workload(engine, workload):
    """按到达时刻把 workload（poisson_workload 的结果）交给 engine，一步一步跑完，给每个采样的 token 打墙钟时间。

    返回 simulate_serving 同样的键（ttft、tbt、hit_tokens、prompt_tokens、prefill_tokens、num_steps、makespan），
    加上 throughput（生成 token/s）和 steps：每步的 (token 数, 注意力工作量 W, 秒)，用来拟合步时模型。
    """
    chunks_of_step, schedule = [], engine.scheduler.schedule

    def recording_schedule():  # 记下每一步排了什么：[(n, P)]（schedule() 已经把 num_computed_tokens 前进了 n）
        out = schedule()
        requests = engine.scheduler.requests
        chunks_of_step.append([(n, requests[rid].num_computed_tokens - n) for rid, n in out.num_scheduled_tokens.items()])
        return out

    engine.scheduler.schedule = recording_schedule
    order = [f"r{i}" for i in range(len(workload))]
    token_times, durations = {rid: [] for rid in order}, []
    start, skipped, next_arrival = time.perf_counter(), 0.0, 0
    while next_arrival < len(workload) or engine.has_unfinished_requests():
        now = time.perf_counter() - start + skipped
        while next_arrival < len(workload) and workload[next_arrival][0] <= now:
            _, prompt, max_tokens = workload[next_arrival]
            engine.add_request(order[next_arrival], prompt, max_tokens)
            next_arrival += 1
        if not engine.has_unfinished_requests():
            skipped += workload[next_arrival][0] - now  # 空闲：时钟跳到下一个请求到达
            continue
        began = time.perf_counter()
        sampled = engine.step()  # 返回 Python 的 int：GPU 上它已经等前向算完了
        ended = time.perf_counter()
        durations.append(ended - began)
        for rid in sampled:
            token_times[rid].append(ended - start + skipped)
    del engine.scheduler.schedule  # 恢复类上的 schedule
    stats = engine.stats
    prompt_tokens = sum(len(prompt) for _, prompt, _ in workload)
    end_clock = max(times[-1] for times in token_times.values())
    return {
        "ttft": [token_times[rid][0] - workload[i][0] for i, rid in enumerate(order)],
        "tbt": [b - a for times in token_times.values() for a, b in zip(times, times[1:])],
        "hit_tokens": stats["prefix_cache_hit_tokens"], "prompt_tokens": prompt_tokens,
        "prefill_tokens": prompt_tokens - stats["prefix_cache_hit_tokens"], "num_steps": stats["num_steps"],
        "makespan": end_clock, "num_preemptions": stats["num_preemptions"],
        "throughput": sum(m for _, _, m in workload) / (end_clock - workload[0][0]),
        "steps": [step_work(chunks)[:2] + (seconds,) for chunks, seconds in zip(chunks_of_step, durations)],
    }


def calibrated_chat_workload(model, num_requests, system_len, user_len, output_len, num_system_prompts, budget, load=0.6, seed=34):
    """4.6 节形状的聊天负载（poisson_workload，没有长文档），到达率按这台设备定：先离线跑一遍（全部同时到达，也当预热），
    量出它多久跑完，再把到达率取成“离线吞吐 × load”。返回 (workload, 每秒请求数, 离线那次的 serve_workload 结果)。"""
    unit = poisson_workload(seed=seed, num_requests=num_requests, rate=1.0, num_system_prompts=num_system_prompts, system_len=system_len,
                            user_len=user_len, long_share=0.0, output_len=output_len, vocab_size=model.config.vocab_size)
    blocks = pool_blocks_for(unit, 16)
    offline = serve_workload(LLMEngine(model, blocks, 16, budget, 16), [(0.0, prompt, m) for _, prompt, m in unit])
    rate = load * num_requests / offline["makespan"]
    return [(when / rate, prompt, m) for when, prompt, m in unit], rate, offline  # rate=1 的到达时刻按比例缩放


def pool_blocks_for(workload, block_size):
    """够全部请求同时放下的块数：测的是调度与缓存，不是抢占。"""
    return sum(-(-(len(prompt) + max_tokens) // block_size) for _, prompt, max_tokens in workload) + 1


def time_cached_prefill(model, lengths, share=0.9, repeats=3, block_size=16, seed=0):
    """prompt 从头 prefill，与前 share 已在缓存里（按整块）时的 prefill，各用一个新引擎、各 repeats 次（先预热一次）。

    返回每个长度一行：cold、warm（秒的列表）、hit（实际命中的 token 数）；显存不够时那一行写 oom 并停止。
    """
    rng, vocab = random.Random(seed), model.config.vocab_size
    device = next(model.parameters()).device
    rows = []
    for length in lengths:
        prompt = [rng.randrange(vocab) for _ in range(length)]
        prefix = prompt[: int(length * share) // block_size * block_size]
        blocks = 2 * (-(-(length + 1) // block_size)) + 1

        def new_engine():
            return LLMEngine(model, blocks, block_size, max_num_batched_tokens=length, max_num_seqs=2)

        cold, warm, hit = [], [], 0
        try:
            for attempt in range(repeats + 1):  # 第 0 次是预热，不计
                engine = new_engine()
                _sync(device)
                began = time.perf_counter()
                engine.generate([prompt], 1)
                cold_seconds = time.perf_counter() - began
                engine = new_engine()
                engine.generate([prefix], 1)  # 把前缀的满块登记进缓存
                before = engine.stats["prefix_cache_hit_tokens"]
                _sync(device)
                began = time.perf_counter()
                engine.generate([prompt], 1)
                warm_seconds = time.perf_counter() - began
                hit = engine.stats["prefix_cache_hit_tokens"] - before
                if attempt:
                    cold.append(cold_seconds)
                    warm.append(warm_seconds)
        except RuntimeError as error:  # torch.cuda.OutOfMemoryError 是 RuntimeError 的子类
            if "out of memory" not in str(error):
                raise
            rows.append({"length": length, "oom": True})
            torch.cuda.empty_cache()
            break
        rows.append({"length": length, "cold": cold, "warm": warm, "hit": hit, "oom": False})
    return rows


def decode_step_seconds(model, batch, context, steps=12, block_size=16, seed=1):
    """batch 个请求、各带 context 个 token 的上下文时，一个纯 decode 步的耗时（秒的列表，steps 个）。"""
    rng, vocab = random.Random(seed), model.config.vocab_size
    prompts = [[rng.randrange(vocab) for _ in range(context)] for _ in range(batch)]
    engine = LLMEngine(model, batch * (-(-(context + steps + 3) // block_size)) + 1, block_size,
                       max_num_batched_tokens=max(512, batch * context), max_num_seqs=batch, enable_prefix_caching=False)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"d{i}", prompt, steps + 3)  # 计时之后还剩一个 decode 步，给 count_kernel_ops 数
    engine.step()  # 一步算完全部 prompt，各得第一个 token
    engine.step()  # 第一个 decode 步：预热
    times = []
    for _ in range(steps):
        began = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - began)
    return times, engine  # engine 里的请求还差一个 token


def copy_bandwidth(device, megabytes=256, repeats=5):
    """device 上一次大张量拷贝的带宽（字节/秒，读 + 写都算）：读权重那条下限的分母。返回各次的列表。"""
    source = torch.empty(megabytes * 2**20 // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    target.copy_(source)
    results = []
    for _ in range(repeats):
        _sync(device)
        began = time.perf_counter()
        target.copy_(source)
        _sync(device)
        results.append(2 * source.numel() * 4 / (time.perf_counter() - began))
    return results


def seconds_per_tiny_op(device, count=2000):
    """一个几乎不做事的算子（1 个元素加 1）从 Python 发出到做完的平均耗时：GPU 上约等于一次 kernel 启动。"""
    x = torch.zeros(1, device=device)
    for _ in range(50):
        x.add_(1)
    _sync(device)
    began = time.perf_counter()
    for _ in range(count):
        x.add_(1)
    _sync(device)
    return (time.perf_counter() - began) / count


def count_kernel_ops(run):
    """run() 里发出的 aten 算子数（不算只改形状的 view 类算子）；这个 torch 没有 TorchDispatchMode 时返回 None。"""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None

    class Counter(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            returns = func._schema.returns
            if not (returns and returns[0].alias_info is not None and not returns[0].alias_info.is_write):
                Counter.count += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        run()
    return Counter.count


def transformers_model_or_none(model):
    """model 的权重装进 transformers 的 Qwen2ForCausalLM（存盘再读），没装 transformers 时打印一行并返回 None。"""
    try:
        import transformers
    except ImportError:
        print("没有安装 transformers：跳过 transformers.generate 的对照（pip install transformers 后重跑这一格）。")
        return None
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # 读权重的进度条写到 stderr
    weight = next(model.parameters())
    dtype_name = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"  # 5.x 改了参数名
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save_model(model, folder)
        reference = transformers.Qwen2ForCausalLM.from_pretrained(folder, **{dtype_name: weight.dtype})
    return reference.to(weight.device).eval()


def one_at_a_time_seconds(generate_one, prompts, max_tokens):
    """一个请求做完再做下一个：总秒数。"""
    began = time.perf_counter()
    for prompt in prompts:
        generate_one(prompt, max_tokens)
    return time.perf_counter() - began


@contextlib.contextmanager
def one_thread_on_cpu(device):
    """CPU 上计时用 1 个线程（小模型这样更快，也少和别的进程抢），结束后恢复。"""
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def engine_unfinished_message():
    """第四、五部分的 TODO 还没写完（引擎抛 NotImplementedError）时返回一行提示；写完了返回 None。"""
    probe = random_model(tiny_qwen2_config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1), seed=0)
    try:
        LLMEngine(probe, 8, 16, 32, 2).generate([[1, 2, 3], [1, 2, 4]], 2)
    except NotImplementedError:
        return "请先完成第四部分的 TODO 15–19 和第五部分的 TODO 20–24，再运行这一格的测量。"
    return None


def measurement_plan(model):
    """按设备和模型选这一节的规模：CPU 上小（整节十几秒），GPU 上按真实模型的量级。"""
    on_gpu = next(model.parameters()).device.type == "cuda"
    longest = model.config.max_position_embeddings - 1
    if not on_gpu:
        return {"requests": 16, "system_len": 192, "user_len": (8, 48), "output_len": (6, 16), "systems": 2,
                "budgets": (64, 512), "repeats": 3, "prefill_lengths": [n for n in (32, 64, 128, 256, 512, 1024) if n <= longest],
                "decode_batches": (1, 8), "context": 256, "one_at_a_time": 6}
    return {"requests": 48, "system_len": 1024, "user_len": (32, 256), "output_len": (32, 96), "systems": 4,
            "budgets": (512, 2048), "repeats": 3,
            "prefill_lengths": [n for n in (512, 1024, 2048, 4096, 8192, 16384) if n <= longest],
            "decode_batches": (1, 16, 64), "context": 1024, "one_at_a_time": 16}

# %% [markdown]
# ##### 服务一串聊天请求：前缀缓存开与关，几种预算
#
# 下一格先打印负载和离线吞吐，再打印两张表，每一行是一种配置。第一张是实测：TTFT、TBT 的 p50 / p99 和生成吞吐都是三遍运行的中位数 [最小, 最大]。第二张是命中的 prompt token 比例和“模拟”两列： 4.6 节的 `simulate_serving` 用这些步拟合出的步时模型给出的同一负载的结果。最后是两张图：左边是 TTFT p50，右边是 TBT p99，实测（带三遍的范围）与模拟并排。表下的结论逐条比较：每种预算下缓存开与关的 TTFT p50、TBT p50、TBT p99，以及缓存开时小预算与大预算的 TTFT p50、TBT p99。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "engine_measure_serving", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 实测：你的 LLMEngine 服务一串共享 system prompt 的聊天请求（前缀缓存开 / 关 × 预算），旁边是 4.6 节的模拟
engine_missing = engine_unfinished_message()
if engine_missing:
    print(engine_missing)
else:
    plan = measurement_plan(llm)
    with one_thread_on_cpu(LLM_DEVICE):
        chat, chat_rate, offline = calibrated_chat_workload(llm, plan["requests"], plan["system_len"], plan["user_len"], plan["output_len"],
                                                            plan["systems"], max(plan["budgets"]))
        chat_blocks = pool_blocks_for(chat, 16)
        print(f"{llm_note}\n负载：{len(chat)} 个请求，{plan['systems']} 段 {plan['system_len']} token 的共享 system prompt + {plan['user_len'][0]}–{plan['user_len'][1]} token 的问题，"
              f"各生成 {plan['output_len'][0]}–{plan['output_len'][1]} 个 token；离线（同时到达）{offline['makespan']:.2f} s 跑完，"
              f"{offline['throughput']:.0f} token/s；在线到达率取它的 60%：每秒 {chat_rate:.1f} 个请求")
        serving_runs = {}
        for budget in plan["budgets"]:
            for caching in (True, False):
                serving_runs[(budget, caching)] = [
                    serve_workload(LLMEngine(llm, chat_blocks, 16, budget, 16, enable_prefix_caching=caching), chat) for _ in range(plan["repeats"])]

    all_steps = [s for runs in serving_runs.values() for run in runs for s in run["steps"]]
    fit_a, fit_b, fit_c = fit_step_model(all_steps)
    print(f"\n用这些运行的 {len(all_steps):,} 步拟合步时模型：a = {1e3 * fit_a:.2f} ms，b = {1e6 * fit_b:.1f} µs/token，c = {1e9 * fit_c:.2f} ns/(query·key)")
    serving_rows = []
    for (budget, caching), runs in serving_runs.items():
        simulated = serving_result_or_none(lambda: simulate_serving(chat, linear_step_model(fit_a, fit_b, fit_c), budget, max_num_seqs=16,
                                                                    cache=HashPrefixCache() if caching else None))
        row = {"label": f"预算 {budget}，缓存{'开' if caching else '关'}", "runs": runs}
        for key, q in (("ttft", 50), ("ttft", 99), ("tbt", 50), ("tbt", 99)):
            row[f"{key}_p{q}"] = spread_text([percentile(run[key], q) for run in runs])
            row[f"sim_{key}_p{q}"] = "—" if simulated is None else f"{1e3 * percentile(simulated[key], q):.1f}"
        row["throughput"] = spread_text([run["throughput"] for run in runs], scale=1, digits=0)
        row["hit_share"] = runs[0]["hit_tokens"] / runs[0]["prompt_tokens"]
        serving_rows.append(row)
    # Two tables: measured (each a median with its [min, max]) and simulated; one would not fit a printed page.
    show_table(serving_rows, [("label", "配置", "{}"), ("ttft_p50", "TTFT p50 (ms)", "{}"), ("ttft_p99", "TTFT p99 (ms)", "{}"),
                              ("tbt_p50", "TBT p50 (ms)", "{}"), ("tbt_p99", "TBT p99 (ms)", "{}"), ("throughput", "生成 token/s", "{}")])
    show_table(serving_rows, [("label", "配置", "{}"), ("hit_share", "命中的 prompt token", "{:.0%}"),
                              ("sim_ttft_p50", "模拟 TTFT p50 (ms)", "{}"), ("sim_tbt_p99", "模拟 TBT p99 (ms)", "{}")])
    if serving_rows[0]["sim_ttft_p50"] == "—":
        print("（第二张表的两栏模拟是空的：先完成第四部分的 TODO 15–19。）")
    for budget in plan["budgets"]:
        for key, q in (("ttft", 50), ("tbt", 50), ("tbt", 99)):
            on, off = ([percentile(run[key], q) for run in serving_runs[(budget, c)]] for c in (True, False))
            print(f"预算 {budget}，" + compare_verdict("缓存开", on, "缓存关", off, f"{key.upper()} p{q}"))
    small, large = min(plan["budgets"]), max(plan["budgets"])
    for key, q in (("ttft", 50), ("tbt", 99)):
        a, b = ([percentile(run[key], q) for run in serving_runs[(budget, True)]] for budget in (small, large))
        print("缓存开，" + compare_verdict(f"预算 {small}", a, f"预算 {large}", b, f"{key.upper()} p{q}"))

    try:
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if plt is not None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
        for ax, (key, q) in zip(axes, (("ttft", 50), ("tbt", 99))):
            for offset, (caching, color) in enumerate(((True, "tab:blue"), (False, "tab:red"))):
                xs = [i + 0.2 * offset for i in range(len(plan["budgets"]))]
                values = [[1e3 * percentile(run[key], q) for run in serving_runs[(b, caching)]] for b in plan["budgets"]]
                mid = [statistics.median(v) for v in values]
                ax.errorbar(xs, mid, yerr=[[m - min(v) for m, v in zip(mid, values)], [max(v) - m for m, v in zip(mid, values)]],
                            fmt="o", color=color, capsize=3, label=f"measured, cache {'on' if caching else 'off'}")
                sims = [r[f"sim_{key}_p{q}"] for r in serving_rows if r["label"].endswith("开" if caching else "关")]
                if "—" not in sims:
                    ax.plot(xs, [float(s) for s in sims], "x", color=color, markersize=9, label=f"simulated (4.6), cache {'on' if caching else 'off'}")
            ax.set_xticks(range(len(plan["budgets"])))
            ax.set_xticklabels([f"budget {b}" for b in plan["budgets"]])
            ax.set_ylabel(f"{key.upper()} p{q} (ms)")
            ax.set_yscale("log")
            ax.legend(fontsize=7)
        fig.suptitle(f"your engine on {LLM_DEVICE}: measured (median, bars = min-max of {plan['repeats']} runs) vs the step-time simulation")
        fig.tight_layout()
        plt.show()

# %% [markdown]
# **怎么读。** 先看表下的结论，它们由这次的三遍运行写成。该期待什么：system prompt 占了 prompt 的大部分，缓存一开，要算的 prompt token 只剩各自的问题，所以 TTFT 应当下降。TBT 也可能跟着变：前缀缓存省的是 prefill，可是 decode 和 prefill 的块排在**同一步**里（第四部分），一步里的 prefill 少了，这一步就短，同一步里在 decode 的请求也就更早拿到下一个 token。预算的作用和 4.6 节一样：预算小，一步塞进的 prefill 少，TBT 低、TTFT 高。你的设备上哪些差别量得出来，以结论行为准；说“分不出”的，在空闲时重跑一次。
#
# 模拟与实测差多少，取决于步时模型 `a + b·N_tok + c·W` 对这台设备的引擎有多准：它没有排队之外的抖动，也不知道 Python 的记账（调度、准备输入、采样）在每一步里占多少——这些都被拟合进了 `a`。模拟还漏掉了 `step()` 之外的时间（把请求交给引擎、驱动循环本身）；机器忙时（别的进程在抢 CPU），实测的步时拖着长尾，而按相对误差拟合的模型贴着典型的步，模拟的数会系统地偏低。两者随预算和缓存朝同一个方向变，就说明 4.6 节的结论在你的设备上成立；p99 由最慢的一两个请求决定，差得多是常态。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "engine_measure_one_at_a_time", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 实测：同一批请求，全部同时交给引擎 vs 一次一个（generate_greedy；装了 transformers 时加上它的 generate）
engine_missing = engine_unfinished_message()
if engine_missing:
    print(engine_missing)
else:
    plan = measurement_plan(llm)
    batch_rng = random.Random(35)
    batch_prompts = [[batch_rng.randrange(llm.config.vocab_size) for _ in range(batch_rng.randint(64, 192))] for _ in range(plan["one_at_a_time"])]
    batch_max_tokens = 16
    with one_thread_on_cpu(LLM_DEVICE):
        reference_tokens = [generate_greedy(llm, p, batch_max_tokens) for p in batch_prompts[:2]]  # 预热，也用来核对结果
        engine_seconds, engine_outputs = [], None
        for _ in range(plan["repeats"]):
            engine = LLMEngine(llm, pool_blocks_for([(0, p, batch_max_tokens) for p in batch_prompts], 16), 16, 2048, len(batch_prompts))
            began = time.perf_counter()
            engine_outputs = engine.generate(batch_prompts, batch_max_tokens)
            engine_seconds.append(time.perf_counter() - began)
        greedy_seconds = [one_at_a_time_seconds(lambda p, m: generate_greedy(llm, p, m), batch_prompts, batch_max_tokens) for _ in range(plan["repeats"])]
        hf_model = transformers_model_or_none(llm)
        hf_seconds = []
        if hf_model is not None:
            def hf_generate(prompt, max_tokens):
                ids = torch.tensor([prompt], device=LLM_DEVICE)
                with torch.no_grad():
                    return hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                             do_sample=False, pad_token_id=0)
            hf_generate(batch_prompts[0], 2)  # 预热
            hf_seconds = [one_at_a_time_seconds(hf_generate, batch_prompts, batch_max_tokens) for _ in range(plan["repeats"])]

    total_tokens = len(batch_prompts) * batch_max_tokens
    print(f"{len(batch_prompts)} 个请求（prompt 64–192 token，互不共享），各生成 {batch_max_tokens} 个 token；{llm_note}")
    print("引擎的输出与一次一个的贪心解码相同（前两个请求）:", engine_outputs[:2] == reference_tokens)
    throughput_rows = [{"how": "引擎：全部同时提交（generate）", "tps": spread_text([total_tokens / s for s in engine_seconds], 1, 0)},
                       {"how": "一次一个：generate_greedy（连续 KV）", "tps": spread_text([total_tokens / s for s in greedy_seconds], 1, 0)}]
    if hf_seconds:
        throughput_rows.append({"how": "一次一个：transformers generate", "tps": spread_text([total_tokens / s for s in hf_seconds], 1, 0)})
    show_table(throughput_rows, [("how", "怎么跑", "{}"), ("tps", "生成 token/s：中位数 [最小, 最大]", "{}")])
    print(compare_verdict("引擎", engine_seconds, "一次一个的 generate_greedy", greedy_seconds, "总耗时", scale=1, unit="s", digits=2))
    if hf_seconds:
        print(compare_verdict("引擎", engine_seconds, "一次一个的 transformers generate", hf_seconds, "总耗时", scale=1, unit="s", digits=2))

# %% [markdown]
# **怎么读。** 引擎把同一步里所有请求的 token 拼成一次前向：权重读一遍、算子发一遍，服务所有请求；一次一个时，每个请求的每个 token 都要单独付一次。所以请求越多，引擎应当领先越多；编写本章时定的目标是 GPU 上 64 个并发请求时达到一次一个的 transformers `generate` 的 10 倍以上，这个数在 GPU 上还没有量过。CPU 的小模型上差别可能小得多，甚至反过来：小模型一步的时间主要是 Python 和算子的固定开销，而引擎每一步还要调度、准备块表、补齐注意力。哪一边快、快多少，看上面的结论行。结果相同（上面的 `True`）是前提：快而不对没有意义。

# %% [markdown]
# ##### 前缀缓存从多长开始划算？一步的时间花在哪里？
#
# 下一格对几种 prompt 长度各做两件事：新引擎上从头 prefill 整个 prompt（冷），和先让引擎算过前 90%（按整块）、再 prefill 整个 prompt（热：只算最后 10%）。两者都是 `engine.generate([prompt], 1)` 的墙钟时间，即这个请求的 TTFT，预热一次后各量 3 次。加速比 = 冷 / 热。然后量 decode 步：1 个和多个请求一起 decode 时一步多久，与两条下限并列：
#
# - **读权重的下限** = 权重字节 / 你的设备上实测的拷贝带宽：一步 decode 至少要把全部权重读一遍。
# - **发射算子的下限** = 这一步发出的算子数 × 一个空算子（1 个元素加 1）从 Python 发出到做完的耗时：哪怕每个算子都不做事，一步也要这么久。算子数由 `TorchDispatchMode` 数出来（torch 2.0 以前没有它，那一列就空着）。

# %% tags=["measurement"] nbgrader={"grade": false, "grade_id": "engine_measure_prefill_and_step", "locked": true, "schema_version": 3, "solution": false, "task": false}
#@title 实测：90% 已缓存时 prefill 的加速比随 prompt 长度的变化；decode 步的耗时与读权重 / 发射算子两条下限
engine_missing = engine_unfinished_message()
if engine_missing:
    print(engine_missing)
else:
    plan = measurement_plan(llm)
    with one_thread_on_cpu(LLM_DEVICE):
        prefill_rows = time_cached_prefill(llm, plan["prefill_lengths"])
        weight_bytes = sum(p.numel() * p.element_size() for p in llm.parameters())
        bandwidth = copy_bandwidth(LLM_DEVICE)
        tiny_op = seconds_per_tiny_op(LLM_DEVICE)
        decode_rows = []
        for batch in plan["decode_batches"]:
            times, engine = decode_step_seconds(llm, batch, plan["context"])
            ops = count_kernel_ops(engine.step)
            decode_rows.append({"batch": batch, "step": spread_text(times, digits=2), "median": statistics.median(times),
                                "ops": "—" if ops is None else f"{ops:,}", "launch": None if ops is None else ops * tiny_op})
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None

    print(f"{llm_note}\n前缀已缓存 90%（按整块）时的 prefill：墙钟秒，3 次的中位数 [最小, 最大]")
    for row in prefill_rows:
        if row["oom"]:
            row.update(cold_ms="out of memory", warm_ms="—", speedup="—", verdict="—", hit=0)
            continue
        row.update(cold_ms=spread_text(row["cold"]), warm_ms=spread_text(row["warm"]),
                   speedup=f"{statistics.median(row['cold']) / statistics.median(row['warm']):.2f}×",
                   verdict={-1: "热更快", 1: "冷更快", 0: "重叠：分不出"}[range_order(row["warm"], row["cold"])])
    show_table(prefill_rows, [("length", "prompt token", "{:,}"), ("hit", "命中 token", "{:,}"), ("cold_ms", "冷 (ms)", "{}"),
                                      ("warm_ms", "热 (ms)", "{}"), ("speedup", "加速比", "{}"), ("verdict", "判断", "{}")])
    paying = [r["length"] for r in prefill_rows if not r["oom"] and range_order(r["warm"], r["cold"]) < 0]
    print(f"在这台设备上，90% 命中从 {paying[0]:,} 个 token 起各次都更快" if paying else "在测过的长度里，没有一个长度的热 prefill 各次都比冷的快")

    floor = weight_bytes / statistics.median(bandwidth)
    print(f"\n权重 {weight_bytes / 2**20:,.1f} MiB；拷贝带宽 {spread_text(bandwidth, 1e-9, 1)} GB/s → 读一遍权重至少 {1e3 * floor:.3f} ms；"
          f"一个空算子 {1e6 * tiny_op:.1f} µs")
    for row in decode_rows:
        row["weights_floor"] = f"{1e3 * floor:.3f}"
        row["launch_floor"] = "—" if row["launch"] is None else f"{1e3 * row['launch']:.2f}"
        row["times_floor"] = f"{row['median'] / max(floor, row['launch'] or 0):.1f}×"
    show_table(decode_rows, [("batch", "一起 decode 的请求", "{}"), ("step", "一步 (ms)：中位数 [最小, 最大]", "{}"), ("ops", "算子数", "{}"),
                                     ("weights_floor", "读权重下限 (ms)", "{}"), ("launch_floor", "发射算子下限 (ms)", "{}"), ("times_floor", "实测 / 较大的下限", "{}")])

    if plt is not None and any(not r["oom"] for r in prefill_rows):
        done = [r for r in prefill_rows if not r["oom"]]
        ratios = [[c / w for c, w in zip(r["cold"], r["warm"])] for r in done]
        mids = [statistics.median(x) for x in ratios]
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        ax.errorbar([r["length"] for r in done], mids, yerr=[[m - min(x) for m, x in zip(mids, ratios)], [max(x) - m for m, x in zip(mids, ratios)]],
                    fmt="o-", capsize=3, label="cold / warm (median, bars: min-max of 3)")
        ax.axhline(1.0, color="gray", linestyle=":", label="no gain")
        ax.axhline(10.0, color="tab:green", linestyle="--", linewidth=1, label="ideal 10x (only 10% recomputed)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("prompt tokens (90% cached)")
        ax.set_ylabel("prefill speed-up")
        ax.set_title(f"where prefix caching starts to pay on {LLM_DEVICE}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        plt.show()

# %% [markdown]
# **怎么读。** 命中 90% 时，线性层只算 10% 的 token，理想的加速比是 10×；注意力的运算量随长度平方增长，而热的 prefill 只有 10% 的查询，所以长 prompt 上加速比可以超过 10×。可是一次前向还有一笔**固定开销**：不管算多少 token，每一层的每个算子都要从 Python 发出去一次。prompt 短的时候，这笔开销占了前向的大部分，前缀缓存省下的是 token 的计算，省不掉它，加速比就远低于 10×；prompt 长到一次前向的时间主要由 token 数决定时，缓存才真正划算。表下那一行由这次的数写成：在你的设备上，从多长开始热的 prefill “每一次都更快”。
#
# decode 那张表检验同一个解释。一步 decode 至少要把全部权重读一遍（**读权重下限**），也至少要把这一步的全部算子发一遍（**发射算子下限**）。实测一步与发射算子下限同一量级、远大于读权重下限，这一步就是**发射受限**的：它的时间由“发了多少个算子”决定，几乎不随这一步有多少 token 变；再加请求，一步也几乎不变慢。实测比两条下限都大好几倍时，多出来的是引擎自己的 Python 记账（调度、逐 token 准备输入和块表）。最后一列“实测 / 较大的下限”说的就是你的设备落在哪一种。**前缀缓存和分块从多长开始划算，取决于模型和设备：只有在你自己的设备上量才知道。**
#
# <details><summary>深入：编写本章时在一张 H200 上量到的数</summary>
#
# 2026-12-04，一张 NVIDIA H200，torch 2.11，Qwen2.5-0.5B 的形状（24 层，宽 896，14 个查询头、2 个 KV 头），随机权重，fp16，transformers 的 eager 实现，10 次的中位数（不是这本 notebook 的引擎）：一次前向约 20 ms，处理 1 个 token 和 2,048 个 token 差不多；一个 decode 步 18–22 ms。90% 命中的 prefill 对整段 prefill 的加速比：2,048 token 时 0.86×（更慢），8,192 时 1.2×，16,384 时 3.1×。同一个 prompt 切成 256 token 的块，要多花 9–20 倍时间，因为每一块都重新付一遍固定开销。对照读权重下限：16 位的 Qwen2.5-0.5B 约 1 GB，H200 的显存带宽约 4.8 TB/s（规格表），读一遍约 0.2 ms；T4（320 GB/s）约 3 ms。一步 20 ms 远大于 0.2 ms：这是发射受限。vLLM 和 SGLang 用 CUDA graph 把一个 decode 步录下来、一次发射，就是为了这笔开销。
#
# </details>

# %% [markdown]
# #### 小结
#
# - 一个能服务真实模型的引擎，是前四部分的同一套账再加一层**分页 KV 池**：块池管空闲与淘汰，KV 缓存管理器管一个请求要哪些块，调度器管一步给谁几个 token，模型执行一次前向算完一步里的所有请求。
# - 前缀缓存就是**块表共享**：两个请求前缀相同，块表就指向同一批物理块；没人用的缓存块留在空闲队列里，直到显存真的被要走才淘汰，而且同一条链上尾块先走。
# - 池子不够时，vLLM 抢占最后接纳的请求、让它以后从头重算；接纳新请求前先确认整个序列放得下，免得算到一半再抢占。
# - 分块、命中、拼批、抢占都不应改变结果：每个请求的输出与单独的贪心解码逐 token 相同。
# - 速度只能在自己的设备上量：小模型在快 GPU 上是发射受限的，固定开销决定了前缀缓存和分块从多长开始划算；一次测量的结论要带着它的散布，范围重叠就是分不出。
#
# #### 练习
#
# 这些问题不计分，答案在答案版 notebook 里。
#
# 1. 把 `free` 改成按块表**从头到尾**释放（第一块先被淘汰）。设想池子很紧、一个 8 块长的共享前缀被部分淘汰：改动前后，下一个带同样前缀的请求各能命中几块？哪些块白白占着显存？
# 2. 一个请求的 prompt 是 100 个 token，`block_size = 16`，前 96 个 token 已在缓存里。`get_computed_blocks` 给它几块命中？这一步要算几个 token？如果 prompt 恰好是 96 个 token 呢？
# 3. 5.8 节的 decode 表里，请求从 1 个加到很多个，一步的耗时几乎不变。这说明这一步受什么限制？如果把同一个引擎换到一块慢得多的 GPU（或大得多的模型）上，你预期这张表怎样变？
# 4. 5.8 节某一行的结论说“范围重叠，这次测量分不出差别”。列出两种让它能下结论的办法，并说明为什么“多跑几遍取最小值”并不总是对的。
# 5. vLLM 0.33.0 默认开着异步调度：CPU 排下一步时，GPU 还在算这一步。我们的 `step()` 若要这样做，哪一步骤会遇到困难（提示：下一步要的 token 此刻还不知道）？

# %% [markdown] tags=["solutions-only"]
# #### 练习答案（第五部分）
#
# 1. 从头到尾释放时，第一块最先被淘汰。查找从第一块开始、遇到第一个没命中的块就停，所以只要第一块没了，后面还登记着的 7 块一块也命中不了，却仍占着显存，直到它们也被从队首拿走。按 vLLM 的做法（尾块先淘汰），被淘汰的是链尾：剩下的块仍是一段从第一块开始、连续的前缀，下一个请求能命中剩下的全部。
# 2. 满块的命中最多到 `(num_tokens - 1) // block_size` 块：`(100 - 1) // 16 = 6` 块，96 个 token 全部命中，这一步算剩下的 4 个。prompt 恰好 96 个 token 时：`(96 - 1) // 16 = 5` 块，只命中 80 个，要算最后 16 个（整整一块）：至少要留一个 token 来算出第一个输出的 logits，而分配按整块对齐，所以留下的是一整块。
# 3. 一步的时间几乎不随 token 数变，说明它不是受算力或读权重的限制，而是受每步固定开销（算子的发射、Python 的记账）限制。换到慢 GPU 或大模型上，每个算子的计算变长，读权重下限也变大，一步会随请求数明显变慢，实测会靠近读权重下限或算力；批处理带来的收益相对变小，但前缀缓存从更短的 prompt 起就划算。
# 4. 在空闲的机器上重跑（减少别的进程抢 CPU / GPU 造成的长尾），或者加大重复次数、加大负载让差别超过噪声（例如更长的共享前缀）。只取最小值会挑出最幸运的一次：对 TTFT、TBT 这种本身就是分布的量，p50 / p99 才是结论的对象，最小值会系统地低估尾部；只有测“一段确定的计算最快要多久”时，最小值才是合理的估计。
# 5. `step()` 的 `schedule()` 需要上一步采样的 token 才能给 decode 的请求排下一个 token（它要写进 `input_ids`），而这个 token 要等前向算完才知道。vLLM 0.33.0 的做法是先给每个 decode 请求记一个占位的输出 token（`Request.num_output_placeholders`），按它排好下一步，上一步采到的 token 在 GPU 那边填进下一步的输入，CPU 拿到结果后再补记账；一个请求在上一步已经结束（采到 eos）时，为它多排的那一步算出的 token 要丢掉，抢占时还在路上的输出也要标成过时的。
