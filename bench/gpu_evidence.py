"""GPU evidence: run the notebook's GPU probe on a CUDA device and write a Markdown table.

The probe code is the notebook's own last cell, read from the chapter source with
`solution_namespace()` (never a copy): `probe_on_device` with the cell's `CudaMemory` adapter on
the current CUDA device, and with the notebook's `CHUNK_GPU_PROBE` configuration. The table holds
the device, the torch version, the synthetic one-shot vs chunked peak beside its analytic size,
the tiny model's peak per schedule beside the analytic attention-score size, and the cached
prefill speed-up beside the cost model S(h, T).

Asserted (exit 1 when missed): the synthetic chunked and one-shot peaks each within TOLERANCE
(2 %) of their analytic size, size x hidden x bytes per element (one buffer, measured as peak
minus what was resident before); the tiny model's chunked results equal the one-shot ones (max
abs diff < 1e-3) and every chunked peak is below the one-shot peak. The model's peak / analytic
ratio is reported, not asserted: the peak also holds about three copies of the scores (scaled,
masked, softmax), the mask, the KV cache and the activations.

    python bench/gpu_evidence.py                        # on a CUDA machine: build/gpu-evidence.md
    python bench/gpu_evidence.py --device cpu           # CI: same code, CPU allocation counter,
                                                        # a smaller configuration (seconds)
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

from grader.kit.authoring.nbsource import REPO_ROOT, solution_namespace  # noqa: E402

TOLERANCE = 0.02  # synthetic peak vs analytic size: the CUDA allocator rounds blocks to 512 bytes
MAX_ABS_DIFF = 1e-3  # chunked vs one-shot logits, float32
# On the CPU the counter adds Python work to every op: a configuration that runs in seconds.
CPU_CONFIG = {
    "suffix_tokens": 2048,
    "hidden_size": 512,
    "chunk_size": 256,
    "dtype": "float16",
    "tiny_model": {
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 4,
        "num_tokens": 256,
        "chunk_sizes": [64],
        "hit_ratio": 0.9,
        "block_size": 64,
        "repeats": 2,
    },
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "gpu-evidence.md")
    args = parser.parse_args(argv)

    namespace = solution_namespace()  # the notebook's reference code, its probe cell included
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit(
                "gpu_evidence: no CUDA device here; run it on a CUDA machine or pass --device cpu"
            )
        device = torch.device("cuda", torch.cuda.current_device())
        memory = namespace["CudaMemory"](torch, device)
        config = namespace["CHUNK_GPU_PROBE"]
    else:
        from bench.cpu_memory import CpuMemory

        device, memory, config = torch.device("cpu"), CpuMemory(), CPU_CONFIG
    result = namespace["probe_on_device"](torch, config, device, memory)
    table, failures = evidence(result, args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table, encoding="utf-8")
    print(table)
    if failures:
        print(f"gpu_evidence: FAILED on {result['device']}: " + "; ".join(failures))
        return 1
    print(f"gpu_evidence: all checks passed on {result['device']}; table written to {args.out}")
    return 0


def evidence(result: dict, device_kind: str) -> tuple[str, list[str]]:
    """The Markdown table for one probe result, and the checks it missed (empty when all passed)."""
    plan, results = result["plan"], result["results"]
    tiny_plan, tiny = plan["tiny_model"], results["tiny_model"]
    failures = []
    lines = [
        f"# GPU probe evidence ({datetime.date.today().isoformat()})",
        "",
        f"- device: {result['device']} ({device_kind})",
        f"- torch {result['torch']}, Python {platform.python_version()}, {platform.machine()}",
        f"- command: `python bench/gpu_evidence.py --device {device_kind}`",
        "- every peak is the allocator's peak during the measurement minus what was resident before",
        "- on cpu the counter adds Python work to every op: its times say nothing about speed"
        if device_kind == "cpu"
        else "- times: median of the probe's repeats, each bracketed by torch.cuda.synchronize",
        "",
        "| measurement | peak (MiB) | analytic (MiB) | peak / analytic | time (ms) | max abs diff |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("one_shot", "chunked"):
        row, analytic = results["synthetic"][name], plan["analytic_block_mib"][name]
        label = f"synthetic {name}, {plan['suffix_tokens']} tokens"
        if "error" in row:
            lines.append(f"| {label} | {row['error']} | {analytic} | — | — | — |")
            failures.append(f"synthetic {name}: {row['error']}")
            continue
        ratio = row["peak_allocated_mib"] / analytic
        lines.append(
            f"| {label} | {row['peak_allocated_mib']} | {analytic} | {ratio:.3f} | — | — |"
        )
        if abs(ratio - 1) > TOLERANCE:
            failures.append(
                f"synthetic {name} peak / analytic = {ratio:.3f}, not within {TOLERANCE:.0%}"
            )
    if "skipped" in tiny:
        failures.append(f"tiny model: {tiny['skipped']}")
    one_shot_peak = tiny.get("one_shot", {}).get("peak_extra_allocated_mib")
    for name, analytic in tiny_plan["analytic_attention_scores_mib"].items():
        row = tiny.get(name, {"error": "not measured"})
        label = f"tiny model {name}, {tiny_plan['num_tokens']} tokens"
        if "error" in row:
            lines.append(f"| {label} | {row['error']} | {analytic} | — | — | — |")
            failures.append(f"tiny model {name}: {row['error']}")
            continue
        peak, diff = row["peak_extra_allocated_mib"], row["max_abs_diff_vs_one_shot"]
        diff_text = "—" if diff is None else f"{diff:.1e}"
        lines.append(
            f"| {label} | {peak} | {analytic} (scores) | {peak / analytic:.2f} | {row['time_ms']} "
            f"| {diff_text} |"
        )
        if name != "one_shot":
            if diff is None or diff > MAX_ABS_DIFF:
                failures.append(f"tiny model {name}: max abs diff {diff} vs one-shot")
            if one_shot_peak is not None and not peak < one_shot_peak:
                failures.append(
                    f"tiny model {name}: peak {peak} MiB not below one-shot {one_shot_peak}"
                )
    speed = tiny.get("cached_prefill", {"error": "not measured"})
    lines += [
        "",
        "| cached prefill | hit tokens | full (ms) | cached (ms) | speed-up | S(h, T) | speed-up / S |",
    ]
    lines.append("|---|---|---|---|---|---|---|")
    if "error" in speed:
        lines.append(
            f"| h = {tiny_plan['cached_prefill']['hit_ratio']} | {speed['error']} | | | | | |"
        )
        failures.append(f"cached prefill: {speed['error']}")
    else:
        lines.append(
            f"| h = {tiny_plan['cached_prefill']['hit_ratio']} | {speed['hit_len']} | {speed['full_ms']} "
            f"| {speed['cached_ms']} | {speed['measured']} | {speed['model']} | {speed['ratio']} |"
        )
    lines += [
        "",
        f"Checks: {'all passed' if not failures else 'FAILED: ' + '; '.join(failures)}",
        "",
    ]
    return "\n".join(lines), failures


if __name__ == "__main__":
    sys.exit(main())
