"""Benchmark (not a test): part five's LLMEngine against one request at a time, prefix caching, step floors, pool memory.

Runs the reference code of chapter 34, part five (`LLMEngine`, the plain-torch Qwen2 and the
measurement helpers of part5_measure.py, loaded with `solution_namespace()`) on random weights:
on the CPU always (the tiny model of the same architecture, float32), on CUDA when a GPU is there
(the real Qwen2.5-0.5B-Instruct shape, 16-bit). Prints a Markdown report with the machine, the
command and the date:

- output throughput of `engine.generate` (all requests at once) against transformers' `generate`
  one request at a time on the same prompts (goal on a GPU: >= 10x at 64 concurrent requests; on a
  CPU no goal: the figure is reported as it is), with `generate_greedy` one at a time beside it;
- TTFT p50 with prefix caching against without, at 90 % shared prompt, Poisson arrivals at 60 % of
  the offline throughput (goal: <= 0.5x where the prefill is compute-bound);
- the decode step time against the weights-bandwidth floor (weight bytes / measured copy bandwidth)
  and the launch floor (aten ops of one step x the time of one tiny op);
- the KV pool's memory against its analytic size 2 * layers * blocks * block_size * kv_heads *
  head_dim * bytes (goal: within 2 %): CUDA allocator bytes on a GPU, the process's resident set
  growth on the CPU.

Every timing is a median with its min-max over the repeats. Exits 0 whether the goals are met or not.

The GPU path in one command (real weights from a folder of safetensors; the solutions notebook's
part five first, then this benchmark, both on that checkpoint; every figure, with its spread, and
the notebook's plots go to --out and the folder beside it):

    python bench/bench_engine.py --device cuda --checkpoint ~/Qwen2.5-0.5B-Instruct --notebook --out build/part5-gpu.md

`--notebook` runs part five's cells of the solutions notebook (built from the chapter source, or
the .ipynb given) in one namespace, as a learner's "Run all" would, with the model cell pointed at
the checkpoint and the device; the cells of parts one to four that part five builds on run first,
their measurement cells left out. A notebook cell that raises or writes to stderr makes the exit
status 1. `--tiny` makes a tiny random checkpoint in a temporary folder and uses it as
`--checkpoint` (the CPU test of this path: no download).

    python bench/bench_engine.py                # CPU (and CUDA when present), random weights: a few minutes on 2 cores
    python bench/bench_engine.py --device cpu --tiny --notebook --repeats 1 --out build/part5-cpu.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

from grader.kit.authoring.nbsource import solution_namespace  # noqa: E402

PART_FIVE = "## 第五部分"  # the heading that opens part five; the next "## " heading closes it

GOAL_GPU_THROUGHPUT = 10.0  # engine / transformers one at a time, 64 concurrent requests, on a GPU
GOAL_TTFT_RATIO = 0.5  # TTFT p50 with caching / without, 90 % shared prompt
GOAL_POOL_TOLERANCE = 0.02


def plan_for(device: str) -> dict:
    if device == "cpu":
        return {"concurrent": 16, "prompt": (64, 192), "max_tokens": 16, "hf_requests": 16, "requests": 24,
                "system_len": 576, "user_len": 64, "output_len": (8, 16), "budget": 512, "batches": (1, 16), "context": 256,
                "pool_mib": 256}
    return {"concurrent": 64, "prompt": (128, 512), "max_tokens": 64, "hf_requests": 64, "requests": 64,
            "system_len": 1843, "user_len": 205, "output_len": (32, 96), "budget": 2048, "batches": (1, 64), "context": 1024,
            "pool_mib": 2048}


def spread(values, scale=1.0, digits=1) -> str:
    return f"{scale * statistics.median(values):.{digits}f} [{scale * min(values):.{digits}f}, {scale * max(values):.{digits}f}]"


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def throughput(ns, model, device, plan, repeats, rng) -> tuple[list[str], float]:
    """Engine generate (all at once) vs transformers generate and generate_greedy one at a time: report lines, ratio."""
    prompts = [[rng.randrange(model.config.vocab_size) for _ in range(rng.randint(*plan["prompt"]))] for _ in range(plan["concurrent"])]
    max_tokens, total = plan["max_tokens"], plan["concurrent"] * plan["max_tokens"]
    blocks = ns["pool_blocks_for"]([(0, p, max_tokens) for p in prompts], 16)
    engine_seconds = []
    for attempt in range(repeats + 1):  # the first run warms up
        engine = ns["LLMEngine"](model, blocks, 16, max_num_batched_tokens=max(2048, plan["prompt"][1]), max_num_seqs=len(prompts))
        sync(device)
        began = time.perf_counter()
        outputs = engine.generate(prompts, max_tokens)
        if attempt:
            engine_seconds.append(time.perf_counter() - began)
    hf = ns["transformers_model_or_none"](model)

    def hf_generate(prompt, n):
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    hf_generate(prompts[0], 2)
    same = hf_generate(prompts[0], max_tokens)[0, len(prompts[0]):].tolist() == outputs[0]
    subset = prompts[: plan["hf_requests"]]
    hf_seconds = [ns["one_at_a_time_seconds"](hf_generate, subset, max_tokens) * len(prompts) / len(subset) for _ in range(max(1, repeats - 1))]
    greedy_seconds = [ns["one_at_a_time_seconds"](lambda p, n: ns["generate_greedy"](model, p, n), subset, max_tokens) * len(prompts) / len(subset)]
    ratio = statistics.median(hf_seconds) / statistics.median(engine_seconds)
    lines = [
        f"{len(prompts)} requests, prompts {plan['prompt'][0]}-{plan['prompt'][1]} tokens (random, none shared), {max_tokens} output tokens each; "
        f"engine's first output equals transformers' greedy tokens: {same}",
        "",
        "| how | output tokens/s: median [min, max] | runs |",
        "|---|---|---|",
        f"| engine.generate, all {len(prompts)} at once | {spread([total / s for s in engine_seconds], digits=0)} | {len(engine_seconds)} |",
        f"| transformers generate, one at a time | {spread([total / s for s in hf_seconds], digits=0)} | {len(hf_seconds)} |",
        f"| generate_greedy (dense KV), one at a time | {spread([total / s for s in greedy_seconds], digits=0)} | 1 |",
        "",
        f"engine / transformers one at a time: **{ratio:.2f}x** (min-max of the ratio: "
        f"{min(hf_seconds) / max(engine_seconds):.2f}-{max(hf_seconds) / min(engine_seconds):.2f}x)",
    ]
    return lines, ratio


def ttft_with_and_without_cache(ns, model, plan, repeats) -> tuple[list[str], float]:
    """TTFT p50 at 90 % shared prompt, Poisson arrivals at 60 % of the offline throughput, caching on vs off."""
    workload, rate, _ = ns["calibrated_chat_workload"](model, plan["requests"], plan["system_len"], (plan["user_len"], plan["user_len"]),
                                                        plan["output_len"], 1, plan["budget"])
    blocks = ns["pool_blocks_for"](workload, 16)
    p50 = {True: [], False: []}
    for _ in range(repeats):
        for caching in (True, False):
            engine = ns["LLMEngine"](model, blocks, 16, plan["budget"], 16, enable_prefix_caching=caching)
            p50[caching].append(ns["percentile"](ns["serve_workload"](engine, workload)["ttft"], 50))
    ratio = statistics.median(p50[True]) / statistics.median(p50[False])
    shared = plan["system_len"] / (plan["system_len"] + plan["user_len"])
    alone = ns["time_cached_prefill"](model, [plan["system_len"] + plan["user_len"]], share=shared, repeats=repeats)[0]
    lines = [
        f"{len(workload)} requests, one {plan['system_len']}-token system prompt + {plan['user_len']} own tokens ({shared:.0%} shared), "
        f"{plan['output_len'][0]}-{plan['output_len'][1]} output tokens, budget {plan['budget']}, {rate:.1f} requests/s; {repeats} runs each",
        "",
        "| prefix caching | TTFT p50 (ms): median [min, max] |",
        "|---|---|",
        f"| on | {spread(p50[True], 1e3)} |",
        f"| off | {spread(p50[False], 1e3)} |",
        "",
        f"with / without: **{ratio:.2f}x**" + (" (ranges overlap: too noisy to conclude)" if max(p50[True]) >= min(p50[False]) else ""),
        "(the arrival rate is 60 % of the cached engine's offline throughput: without the cache the same arrivals can exceed what",
        "the engine serves, and queueing then dominates the TTFT.)",
        "",
        "One request alone, no queueing (`time_cached_prefill`: a new engine, or one whose cache holds the shared prefix):",
        "" if alone["oom"] else f"cold {spread(alone['cold'], 1e3)} ms, {alone['hit']} tokens cached {spread(alone['warm'], 1e3)} ms: "
        f"**{statistics.median(alone['warm']) / statistics.median(alone['cold']):.2f}x**"
        + (" (ranges overlap: too noisy to conclude)" if max(alone["warm"]) >= min(alone["cold"]) else ""),
    ]
    return lines, ratio


def step_floors(ns, model, device, plan) -> list[str]:
    """Decode step time against the weights-bandwidth floor and the launch floor."""
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = ns["copy_bandwidth"](device)
    tiny_op = ns["seconds_per_tiny_op"](device)
    floor = weight_bytes / statistics.median(bandwidth)
    lines = [
        f"weights {weight_bytes / 2**20:,.1f} MiB; copy bandwidth {spread(bandwidth, 1e-9)} GB/s -> weights floor {1e3 * floor:.3f} ms; "
        f"one tiny op {1e6 * tiny_op:.1f} us",
        "",
        f"| requests decoding together (context {plan['context']}) | step (ms): median [min, max] | aten ops | weights floor (ms) | launch floor (ms) | measured / larger floor |",
        "|---|---|---|---|---|---|",
    ]
    for batch in plan["batches"]:
        times, engine = ns["decode_step_seconds"](model, batch, plan["context"])
        ops = ns["count_kernel_ops"](engine.step)
        launch = None if ops is None else ops * tiny_op
        lines.append(f"| {batch} | {spread(times, 1e3, 2)} | {ops} | {1e3 * floor:.3f} | {'-' if launch is None else f'{1e3 * launch:.2f}'} | "
                     f"{statistics.median(times) / max(floor, launch or 0):.1f}x |")
    return lines


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pool_memory(ns, model, device, plan) -> tuple[list[str], float]:
    """The KV pool's memory (CUDA allocator / resident set growth) against its analytic size."""
    config, dtype_bytes = model.config, next(model.parameters()).element_size()
    per_block = 2 * config.num_hidden_layers * 16 * config.num_key_value_heads * config.head_dim * dtype_bytes
    num_blocks = plan["pool_mib"] * 2**20 // per_block
    analytic = num_blocks * per_block
    sync(device)
    before = torch.cuda.memory_allocated() if device == "cuda" else resident_bytes()
    engine = ns["LLMEngine"](model, num_blocks, 16)
    sync(device)
    measured = (torch.cuda.memory_allocated() if device == "cuda" else resident_bytes()) - before
    how = "torch.cuda.memory_allocated() growth" if device == "cuda" else "resident set growth (/proc/self/statm)"
    error = measured / analytic - 1
    del engine
    return [f"{num_blocks:,} blocks of 16 tokens: analytic 2 x {config.num_hidden_layers} layers x {num_blocks:,} x 16 x "
            f"{config.num_key_value_heads} x {config.head_dim} x {dtype_bytes} B = {analytic / 2**20:,.1f} MiB; {how}: "
            f"{measured / 2**20:,.1f} MiB; **{error:+.2%}**"], error


def run_device(ns, device, repeats, checkpoint=None) -> list[str]:
    import random

    plan = plan_for(device)
    if checkpoint is not None:
        model = ns["load_model"](str(checkpoint), device=device)
        name = f"checkpoint {checkpoint} ({next(model.parameters()).dtype})"
        if device == "cpu" and model.config.num_hidden_layers > 4:
            plan = plan_for("cuda")  # a real model on a CPU: the GPU's sizes (slow, but what was asked)
    elif device == "cpu":
        model = ns["random_model"](ns["tiny_qwen2_config"](), seed=0)
        name = "tiny Qwen2 (random weights, 4 layers, hidden 128, 4 heads / 2 KV heads, float32)"
    else:
        dtype = ns["default_dtype"](device, torch.bfloat16)  # bf16 only where the GPU has it natively (not a T4)
        model = ns["random_model"](ns["Qwen2Config"](), seed=0, dtype=dtype, device=device)
        name = f"Qwen2.5-0.5B-Instruct's shape (random weights, 24 layers, hidden 896, 14 heads / 2 KV heads, {dtype})"
    rng = random.Random(34)
    out = [f"## {device}: {name}, {ns['count_parameters'](model) / 1e6:.2f}M parameters", ""]
    lines, ratio = throughput(ns, model, device, plan, repeats, rng)
    goal = f"goal >= {GOAL_GPU_THROUGHPUT:.0f}x: {'met' if ratio >= GOAL_GPU_THROUGHPUT else 'missed'}" if device == "cuda" else "no goal on a CPU"
    out += ["### Output throughput, engine vs one request at a time", "", *lines, f"({goal})", ""]
    lines, ratio = ttft_with_and_without_cache(ns, model, plan, repeats)
    out += ["### TTFT p50 with prefix caching vs without (90 % shared prompt)", "", *lines,
            f"(goal <= {GOAL_TTFT_RATIO}x: {'met' if ratio <= GOAL_TTFT_RATIO else 'missed'})", ""]
    out += ["### Decode step against its floors", "", *step_floors(ns, model, device, plan), ""]
    lines, error = pool_memory(ns, model, device, plan)
    out += ["### KV pool memory against its analytic size", "", *lines,
            f"(goal within {GOAL_POOL_TOLERANCE:.0%}: {'met' if abs(error) <= GOAL_POOL_TOLERANCE else 'missed'})", ""]
    return out


def tiny_checkpoint(ns, folder: Path) -> Path:
    """A tiny random Qwen2 saved as config.json + model.safetensors (bf16, like the real one): the --tiny path."""
    model = ns["random_model"](ns["tiny_qwen2_config"](), seed=0)
    return Path(ns["save_model"](model, str(folder), dtype=torch.bfloat16))


def part_five_cells(notebook: Path | None) -> list[tuple[str, str]]:
    """(title, source) of the code cells to run: those of parts one to four that are not measurements,
    then every code cell of part five. From the .ipynb given, or the solutions built from the source."""
    if notebook is None:
        from grader.kit.authoring.build import solutions_notebook

        cells = solutions_notebook(run=False).cells
    else:
        import json

        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    chosen, part = [], "before"
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and re.search(r"^## ", source, re.MULTILINE):
            part = "five" if PART_FIVE in source else ("after" if part == "five" else part)
        if cell["cell_type"] != "code" or part == "after":
            continue
        if part == "before" and "measurement" in cell.get("metadata", {}).get("tags", []):
            continue
        title = next((line for line in source.splitlines() if line.strip()), "")
        chosen.append((("5: " if part == "five" else "") + title, source))
    if not any(title.startswith("5: ") for title, _ in chosen):
        raise RuntimeError(f"no part five ({PART_FIVE}) in {notebook or 'the solutions built from the source'}")
    return chosen


def run_part_five(notebook, checkpoint: Path, device: str, figures: Path) -> tuple[list[str], int]:
    """Part five of the solutions notebook on `checkpoint` and `device`: report lines, and how many cells failed."""
    from notebook_on_gpu import (  # bench/notebook_on_gpu.py: one cell as "Run all" runs it
        run_cell,
        table_text,
    )

    saved = []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        def save_figures(*_args, **_kwargs):  # the notebook's plt.show(): each figure to a PNG
            for number in plt.get_fignums():
                path = figures / f"part5-figure-{len(saved) + 1}.png"
                plt.figure(number).savefig(path, dpi=100)
                saved.append(path)
            plt.close("all")

        plt.show = save_figures
    except ImportError:
        pass
    namespace, failed = {"__name__": "__main__"}, 0
    table = ["| cell | first line | s | raised | stderr |", "|---|---|---|---|---|"]
    outputs = []
    for number, (title, source) in enumerate(part_five_cells(notebook)):
        source = re.sub(r'^MODEL_SOURCE = .*$', f"MODEL_SOURCE = {str(checkpoint)!r}", source, count=1, flags=re.MULTILINE)
        source = re.sub(r'^LLM_DEVICE = .*$', f"LLM_DEVICE = {device!r}", source, count=1, flags=re.MULTILINE)
        ran = run_cell(source, f"<cell {number}>", namespace)
        failed += bool(ran["raised"] or ran["err"])
        if title.startswith("5: ") or ran["raised"] or ran["err"]:
            table.append(f"| {number} | `{table_text(title, 70)}` | {ran['seconds']:.2f} | {table_text(ran['raised'], 160)} | "
                         f"{table_text(ran['err'], 200)} |")
        if title.startswith("5: ") and ran["out"].strip():
            outputs += [f"#### {title[3:]}", "", "```", ran["out"].rstrip(), "```", ""]
    lines = ["## The solutions notebook's part five", "", f"checkpoint `{checkpoint}`, device `{device}`; {failed} cell(s) raised or "
             "wrote to stderr (cells of parts one to four are listed only then)", "", *table, "", *outputs]
    lines += [f"figures: {', '.join(p.name for p in saved)}" if saved else "figures: none (matplotlib missing)", ""]
    return lines, failed


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per timed configuration (default 3)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto (default): the CPU, and CUDA too when there is a GPU")
    parser.add_argument("--cpu-only", action="store_true", help="the same as --device cpu")
    parser.add_argument("--checkpoint", type=Path, help="a folder with config.json and *.safetensors (Qwen2.5-0.5B-Instruct): real weights")
    parser.add_argument("--tiny", action="store_true", help="make a tiny random checkpoint and use it as --checkpoint (no download)")
    parser.add_argument("--notebook", nargs="?", const="source", help="run the solutions notebook's part five first "
                        "(no value: built from the chapter source; or a path to an .ipynb)")
    parser.add_argument("--out", type=Path, help="write the report here as well (figures beside it)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the tiny model is fastest so)")
    args = parser.parse_args(argv)
    if args.tiny and args.checkpoint:
        parser.error("--tiny makes its own checkpoint: give --tiny or --checkpoint, not both")
    if args.checkpoint and not (args.checkpoint / "config.json").exists():
        parser.error(f"--checkpoint {args.checkpoint}: no config.json there (a folder with config.json and *.safetensors)")
    if args.notebook and not (args.checkpoint or args.tiny):
        parser.error("--notebook needs --checkpoint FOLDER or --tiny")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    ns = solution_namespace()
    if args.device == "auto" and not args.cpu_only:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    else:
        devices = ["cpu" if args.cpu_only else args.device]
    report = [
        "# Part five: the engine on a real architecture (bench/bench_engine.py)", "",
        f"- command: `python {' '.join(sys.argv if argv is None else ['bench/bench_engine.py', *argv])}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average before: {os.getloadavg()[0]:.2f}",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, "
        f"{args.threads} torch thread(s)" + (f", GPU {torch.cuda.get_device_name(0)}" if "cuda" in devices else ", no GPU: the CUDA path has not run"),
        "",
    ]
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = tiny_checkpoint(ns, Path(scratch) / "tiny-qwen2") if args.tiny else args.checkpoint
        if args.notebook:
            figures = args.out.parent if args.out else Path(scratch)
            figures.mkdir(parents=True, exist_ok=True)
            notebook = None if args.notebook == "source" else Path(args.notebook)
            lines, failed = run_part_five(notebook, checkpoint, devices[-1], figures)
            report += lines
        for device in devices:
            report += run_device(ns, device, args.repeats, checkpoint)
    report.append(f"Total {time.perf_counter() - started:.0f} s." + (f" {failed} notebook cell(s) failed." if failed else ""))
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
