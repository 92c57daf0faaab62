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
# **难度：** 困难　|　**环境：** 第一到四部分在 CPU 上几秒一格；第五部分在 GPU 或 CPU 上服务一个真实的小模型；最后附一个不计分的 GPU 实验　|　**关键词：** prefix caching、chunked prefill、KV cache 复用、调度
#
# **怎么运行这本 notebook**
# - **Google Colab：** {{colab_howto}}
# - **魔搭社区（ModelScope）：** 登录后进入「我的 Notebook」，启动免费的 CPU 实例（第五部分想用 GPU、或做最后的 GPU 实验时选 GPU 实例），在 JupyterLab 左侧上传本 `.ipynb` 文件后双击打开。
# - 本 notebook 只依赖 Python 标准库和 PyTorch（Colab 与魔搭实例都已预装），不 import 任何课程代码，只要这一个 `.ipynb` 文件就能运行。
#
# <details><summary>深入：最低版本与验证过的平台</summary>
#
# - **最低版本：** Python 3.10、PyTorch 1.11。Colab 默认运行时（Python 3.13、torch 2.11）和魔搭的镜像（Python 3.12、torch 2.10；旧镜像 Python 3.11、torch 2.3.1）都满足。
# - **验证过的平台：** 2026-12-02 课程维护者在 CPU 上把答案版 notebook 从头到尾逐格运行了一遍：Colab 默认运行时（Python 3.13.0、torch 2.11.0）、魔搭（Python 3.12.1、torch 2.10.0；旧镜像 Python 3.11.7、torch 2.3.1）和最低版本（Python 3.10.13、torch 1.11.0）都通过，没有报错，也没有警告。
#
# </details>
#
# **分值：** {{grading_summary}}；最后的 GPU 实验不计分（分值按老师的设置）。每个 TODO 的分值按它的难度定，再拆到几个评分单元格里（基本行为、边界情况、返回类型、不修改输入……）：错一处只扣那一格的分，一个 TODO 写错也不会连累别的 TODO。评分单元格折叠在每部分的“自动评分单元格（不用看）”标题下。
#
# **交作业：** 完成全部 TODO 后，「文件 → 下载 → 下载 .ipynb」，把文件按老师的要求命名（通常是学号，如 `2024001.ipynb`）后提交。请不要删除或改动带锁的单元格；即使误删了，评分脚本也会按原题恢复它们。

# %% [markdown]
# ## 本章导读
#
# 一个请求进了推理引擎，要经过两个阶段：**prefill**（预填充）一次前向算完整个 prompt，得到每个位置的 KV cache 和第一个输出 token；**decode**（解码）此后每一步只送入一个新 token，拿着已有的 KV 算下一个。用户感到的延迟也分两段：**TTFT**（time to first token，从请求到达到第一个输出 token 的时间，主要花在 prefill 上）和 **TPOT**（time per output token，之后相邻两个输出 token 的间隔，也叫 **TBT**，time between tokens，由 decode 决定）。
#
# 长 prompt 之所以昂贵，不只是因为 token 多，更因为其中大量内容是**重复的**：同一个 system prompt、同一份工具说明、同一个 RAG 模板，以及多轮对话里越积越长的历史。每个请求都从第一个 token 重新 prefill，这些共享前缀就被一遍遍地重算。本章用两件工具对付它。**前缀缓存**让后来的请求直接复用已经算好的前缀 KV：新请求开头与缓存相同的那一段叫**命中**（hit），剩下要算的叫**后缀**（suffix）。**分块预填充**把长的后缀切成一段段的 **chunk**（每段最多“**分块大小**”个 token），和别的请求的 decode 一起排进每一步。
#
# 本章分五部分，每部分是一个**单元**，一次坐下来做完：开头写明学习目标，中间是讲解、图和 TODO，结尾是小结和几道不计分的练习（答案在答案版里）。
#
# | 单元 | 学完能做什么 | 大约用时 | 需要前面的什么 |
# |---|---|---|---|
# | 第一部分（{{points:core}}） | 用一个 token 账本找出最长命中前缀、拆出后缀、按分块大小切块（TODO 1–8） | 1 小时 | 无 |
# | 第二部分（{{points:kv}}） | 在一个小 Transformer 上复用真实的 KV，证明“缓存 + 分块”与完整 prefill 结果相同，并估算能省多少（TODO 9–10） | 1.5 小时 | 第一部分的 `PrefixCacheManager` |
# | 第三部分（选做，{{points:block}}） | 按真实引擎的方式管理 **KV 块**（block：显存里存放固定个数 token 的 K/V 的一页，不是 chunk）：哈希链、引用计数、LRU 淘汰（TODO 11–14） | 1.5 小时 | 第二部分开头的工具单元格（不需要 TODO 9–10） |
# | 第四部分（{{points:sched}}） | 写一个调度器：每一步用一个 token 预算安排 decode 和 prefill 块，命中的前缀整块跳过，再看 TTFT 与 TPOT 怎样随预算变化（TODO 15–19） | 2 小时 | 第一部分的 `PrefixCacheManager`、第二部分的小模型；不需要第三部分 |
# | 第五部分（{{points:engine}}） | 把调度器、分页的 KV 块池和一个真实的模型（GPU 上是 Qwen2.5-0.5B-Instruct，CPU 上是同样结构的小模型）接成一个能服务请求的引擎，包括**抢占**（preemption：显存不够时先停下一个请求、放掉它的 KV，以后重算）（TODO 20–24），本章的目标 | 2–3 小时 | 第四部分的调度器 |
#
# 最后是本章小结和一个不计分的 GPU 实验。小节按部分编号（1.1、1.2……）。
#
# **隔几天回来接着做（新的 kernel）：** 后面的单元会用到前面单元格定义的类和函数，所以先把前面的单元格重新运行一遍。JupyterLab：点一下你要继续的那一部分的标题，选菜单「运行 → 运行上方所有单元格」（Run All Above Selected Cell）；Colab：点那一格，选「代码执行程序 → 运行前面的所有单元格」。上面如果有还没做完的 TODO（例如跳过了选做的第三部分），它的检查单元格会报错，运行就停在那一格：选中报错那格的下一格，按 Shift + Enter 逐格运行到你要继续的地方即可（检查单元格只检查，不定义后面要用的东西）。
#
# **前置阅读：** 本课程第 20 章（FlashAttention 模拟）、第 22 章（vLLM PagedAttention）、第 24 章（SGLang RadixAttention）。开始之前，你应该能说清楚 KV cache 为什么能保存“历史”的计算结果。

# %%
#| include: part1_core.py

# %%
#| include: part2_kv.py

# %%
#| include: part3_block.py

# %%
#| include: part4_scheduler.py

# %%
#| include: part4_measure.py

# %%
#| include: part5_model.py

# %%
#| include: part5_engine.py

# %%
#| include: part5_measure.py

# %% [markdown]
# ## 本章小结
#
# - **前缀缓存成立的原因只有一个：因果性。** 一个位置的 KV 只取决于它和它前面的 token，所以从开头起相同的前缀，KV 逐位相同，可以跨请求复用；只有从第一个 token 起连续相同的部分才算命中（第一、二部分）。
# - **复用要对齐到块。** 真实引擎按固定大小的 KV 块管理显存，只有满块才能共享；哈希链让一个块的身份包含它前面的全部内容，引用计数决定谁还在用，LRU 决定先淘汰谁（第三部分）。
# - **分块预填充限制的是一步的工作量，不是总工作量。** 总运算量不变、KV 一个不少；换来的是单次前向的峰值内存受控，以及长 prompt 不再独占一整步（第二、四部分）。
# - **调度器把两件事放进同一步。** 每一步一个 token 预算：先给已在运行的请求（decode 和没做完的 prefill 一样对待），再接纳新请求，命中的前缀整块跳过；预算的大小在 TTFT 与 TPOT 之间取舍（第四部分）。
# - **引擎是这些部件的组合。** 分页的块池、块表与 slot mapping 让每个请求的 KV 不必连续，显存不够时抢占一个请求、以后重算；结果与一次算完逐 token 相同（第五部分）。
#
# 想继续深入：读 vLLM v1 的 `vllm/v1/core`（`block_pool.py`、`kv_cache_manager.py`、`sched/scheduler.py`）和 SGLang 的 `radix_cache.py`，对照本章每一部分找到同一个概念。

# %% [markdown]
# ## 附：GPU 可选实验（不计分）：观察分块带来的资源边界
#
# 实验就是紧接着的下一个单元格，notebook 到它为止。它的第一段是一个**演示**，不是测量：用**合成的** hidden states，一次性申请整个 suffix 大小的张量、或每次只申请一个 chunk 大小的张量，看分配器记下的峰值。峰值等于我们申请的大小是必然的（张量是这段代码自己按解析的大小造的），它只让你在真实的卡上看到“分块限制了一次要多大的块”；这一段不是真实的 prefix cache、KV cache 或 serving benchmark。
#
# - 第二部分的小 Transformer（float32，`d = 512`、4 层、4096 个 token）也在这里上 GPU：一次性与分块预填充的峰值显存、耗时、分块结果与一次性结果的最大误差，以及命中 90% 时的 prefill 加速比与代价模型 S(h, T) 之比。这一部分需要先完成 TODO 9。
# - **怎么量的。** 每个峰值都是“这次测量中的最高占用 − 测量开始前已经占用的显存”（`torch.cuda.max_memory_allocated` 减去 `memory_allocated`），所以模型权重、上一次运行留下的 cuBLAS 工作区都不算在内；它包括分数张量的几份拷贝、掩码、KV 和激活，不只是分数张量。每段计时前后都 `synchronize`，prompt 在计时开始前就已经是 GPU 上的张量。
# - **显存不够时**，那一行写“out of memory at N tokens”，其余各行照常打印，显存随即释放。
# - 默认 `RUN_MODE = 'dry_run'`：只用中文打印实验计划（要量什么、各项的解析值，单位 MiB = 2²⁰ 字节），并写明没有用到 GPU；不导入 torch、不申请任何 CUDA 张量，在任何机器上都能运行。
# - 在 Colab（「代码执行程序 → 更改运行时类型 → GPU」）或魔搭的 GPU 实例上，把 `RUN_MODE` 改成 `'real_gpu'` 再运行，会得到真实的峰值显存（这个单元格的代码默认折叠：Colab 的表单里直接在下拉框选 `RUN_MODE`；JupyterLab 里点单元格左侧的蓝条或“…”展开，改开头那一行）。合成部分用 float16：Colab 的 T4 不支持 bfloat16。
# - 在没有 CUDA 的机器上选 `'real_gpu'` 会得到一条说明原因的错误；`RUN_MODE` 写错也会直接报错。

# %%
#@title GPU 可选实验：配置、计时与检查（默认只打印计划）
# GPU 可选实验的配置：默认只打印计划，不申请 CUDA 张量。
RUN_MODE = "dry_run"  #@param ["dry_run", "real_gpu"]
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
    rounds = [f / c for f, c in zip(full_s, cached_s)]  # 每轮的加速比：它们的范围就是这次的噪声
    lo, hi = min(rounds), max(rounds)
    config = model.config
    predicted = cost_model_speedup(hit_len / tokens, tokens, non_embedding_params(model), config.n_layers, config.d_model)
    if lo <= 1.0 <= hi or hi > 2 * lo:
        verdict = f"各轮 {lo:.2f}–{hi:.2f}：噪声太大，不能下结论；GPU 空闲时重新运行"
    elif lo <= predicted <= hi:
        verdict = f"各轮 {lo:.2f}–{hi:.2f}，代价模型 {predicted:.2f} 在范围之内"
    else:
        verdict = f"各轮 {lo:.2f}–{hi:.2f}，整段都{'低' if hi < predicted else '高'}于代价模型 {predicted:.2f}"
    return {"hit_len": hit_len, "full_ms": round(1e3 * statistics.median(full_s), 3), "cached_ms": round(1e3 * statistics.median(cached_s), 3), "measured": round(measured, 3),
            "rounds_min": round(lo, 3), "rounds_max": round(hi, 3), "model": round(predicted, 3), "ratio": round(measured / predicted, 3), "verdict": verdict}


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
