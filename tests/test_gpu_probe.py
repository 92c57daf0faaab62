"""The GPU probe, the notebook's last cell: dry run without torch, its two clear errors, and its
whole real path run on the CPU (the notebook's own code, through `bench/cpu_memory.py`)."""

import ast
import re
import subprocess
import sys

import pytest
import torch

from bench.cpu_memory import CpuMemory, CpuOutOfMemoryError
from grader.kit.authoring.nbsource import NOTEBOOK_NAME, REPO_ROOT, read_source, solution_namespace
from tests.conftest import read_nb

PROBE = read_nb(REPO_ROOT / "notebooks" / NOTEBOOK_NAME).cells[-1].source
DEFINITIONS = PROBE[: PROBE.rindex("probe_result = run_chunked_gpu_probe(RUN_MODE")]
CPU = torch.device("cpu")
MiB = 2**20
SMALL = {
    "suffix_tokens": 2048,
    "hidden_size": 512,
    "chunk_size": 256,
    "dtype": "float16",
    "tiny_model": {
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 2,
        "num_tokens": 256,
        "chunk_sizes": [64, 32],
        "hit_ratio": 0.75,
        "block_size": 32,
        "repeats": 1,
    },
}


@pytest.fixture(scope="module")
def probe():
    """The notebook's reference code (its probe cell included), run in one namespace."""
    return solution_namespace()


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_release_probe_cell_is_the_source_probe_cell():
    assert PROBE == read_source().cells[-1].source


def test_dry_run_prints_the_plan_without_importing_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        + PROBE
        + "\nassert 'torch' not in sys.modules or sys.modules['torch'] is None"
    )
    run = run_python(code)
    assert run.returncode == 0, run.stderr
    assert "模式：dry_run" in run.stdout and "没有使用 GPU" in run.stdout, run.stdout
    assert "分块数：8" in run.stdout and "'real_gpu'" in run.stdout and "MiB" in run.stdout


def test_unknown_mode_is_refused_with_the_allowed_modes_named():
    run = run_python(DEFINITIONS + "\nrun_chunked_gpu_probe('gpu', CHUNK_GPU_PROBE)")
    assert "ValueError" in run.stderr and "dry_run" in run.stderr and "real_gpu" in run.stderr


def test_real_gpu_without_cuda_says_cuda_is_needed():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the error path needs a machine without it")
    run = run_python(DEFINITIONS + "\nrun_chunked_gpu_probe('real_gpu', CHUNK_GPU_PROBE)")
    assert "RuntimeError" in run.stderr and "CUDA" in run.stderr


def test_peak_leaves_out_what_was_resident_before_the_measurement(probe):
    with CpuMemory() as memory:
        resident = torch.ones(2 * MiB // 4)  # 2 MiB already held (weights, a workspace, ...)
        peak = probe["measure_peak"](memory, lambda: torch.ones(MiB // 4))
        assert memory.peak() == 3 * MiB  # the counter did see the resident tensor
        del resident
    assert peak == MiB


def test_synthetic_blocks_peak_at_one_buffer_of_their_analytic_size(probe):
    """No doubled buffer: the one-shot block is tokens x hidden x 2 bytes, the chunked one 1/8 of it."""
    plan = probe["probe_plan"](SMALL)
    with CpuMemory() as memory:
        resident = torch.ones(4 * MiB // 4)
        results = probe["probe_synthetic_blocks"](torch, SMALL, CPU, memory)
        del resident
    assert plan["analytic_block_mib"] == {"one_shot": 2.0, "chunked": 0.25}
    assert results == {
        "one_shot": {"peak_allocated_mib": 2.0},
        "chunked": {"peak_allocated_mib": 0.25},
    }


def test_whole_real_path_runs_on_cpu_and_gives_back_its_memory(probe, capsys):
    memory = CpuMemory()
    with memory:
        before = memory.allocated()
        result = probe["probe_on_device"](torch, SMALL, CPU, memory)
        assert memory.allocated() == before  # model, prompt, KV and logits all freed
    tiny = result["results"]["tiny_model"]
    assert result["device"] == memory.name and result["torch"] == torch.__version__
    assert set(tiny) == {"one_shot", "chunked_64", "chunked_32", "cached_prefill"}
    assert tiny["one_shot"]["max_abs_diff_vs_one_shot"] == 0.0
    for name in ("chunked_64", "chunked_32"):
        assert tiny[name]["max_abs_diff_vs_one_shot"] < 1e-4
        assert (
            0
            < tiny[name]["peak_extra_allocated_mib"]
            < tiny["one_shot"]["peak_extra_allocated_mib"]
        )
    speed = tiny["cached_prefill"]
    assert speed["hit_len"] == 192 and speed["measured"] > 0 and speed["model"] > 1
    # the rounds' spread and a verdict that may say the noise is too large, never silence
    assert 0 < speed["rounds_min"] <= speed["rounds_max"]
    # the verdict rounds the rounds' range itself (rounds_min is 3 digits: compare, do not re-round)
    shown = re.match(r"各轮 (\d+\.\d\d)–(\d+\.\d\d)", speed["verdict"])
    assert shown, speed["verdict"]
    assert abs(float(shown.group(1)) - speed["rounds_min"]) <= 0.0051, speed
    assert abs(float(shown.group(2)) - speed["rounds_max"]) <= 0.0051, speed


def test_out_of_memory_in_one_measurement_leaves_the_other_rows(probe, capsys):
    """A device too small for the one-shot prefill: that row says so, the others are measured."""
    with CpuMemory() as memory:
        unlimited = probe["probe_on_device"](torch, SMALL, CPU, memory)["results"]["tiny_model"]
    tiny = SMALL["tiny_model"]
    config = probe["TinyConfig"](
        vocab_size=64,
        d_model=tiny["d_model"],
        n_layers=tiny["n_layers"],
        n_heads=tiny["n_heads"],
        max_positions=tiny["num_tokens"],
    )
    weights = sum(p.numel() * 4 for p in probe["TinyCausalLM"](config).parameters())
    resident = weights + tiny["num_tokens"] * 8  # the weights and the prompt (int64)
    one_shot = unlimited["one_shot"]["peak_extra_allocated_mib"] * MiB
    chunked = unlimited["chunked_64"]["peak_extra_allocated_mib"] * MiB
    limited = CpuMemory(limit_bytes=int(resident + (one_shot + chunked) / 2))
    with limited:
        before = limited.allocated()
        result = probe["probe_on_device"](torch, SMALL, CPU, limited)
        assert limited.allocated() == before  # what the failed measurement held is freed
    synthetic, tiny = result["results"]["synthetic"], result["results"]["tiny_model"]
    assert synthetic == {  # the 2 MiB one-shot block does not fit either
        "one_shot": {"error": "out of memory at 2048 tokens"},
        "chunked": {"peak_allocated_mib": 0.25},
    }
    assert tiny["one_shot"] == {"error": "out of memory at 256 tokens"}
    assert tiny["chunked_64"]["peak_extra_allocated_mib"] > 0
    assert tiny["chunked_64"]["max_abs_diff_vs_one_shot"] is None  # no one-shot logits to compare
    assert (
        tiny["chunked_32"]["peak_extra_allocated_mib"] > 0
        and tiny["cached_prefill"]["measured"] > 0
    )
    probe["show_probe"](result)
    shown = capsys.readouterr().out
    assert "out of memory at 256 tokens" in shown and '"chunked_32"' in shown


def test_other_errors_than_out_of_memory_are_not_swallowed(probe):
    memory = CpuMemory()
    with pytest.raises(ValueError, match="not a memory error"):
        probe["out_of_memory_row"](memory, ValueError("not a memory error"), 10)
    assert probe["out_of_memory_row"](memory, CpuOutOfMemoryError("x"), 10) == {
        "error": "out of memory at 10 tokens"
    }


def test_cuda_adapter_knows_cuda_out_of_memory_on_every_torch(probe):
    """torch >= 1.13 raises torch.cuda.OutOfMemoryError; older torch a RuntimeError saying so."""
    adapter = probe["CudaMemory"].__new__(probe["CudaMemory"])
    adapter.oom_error = torch.cuda.OutOfMemoryError
    assert adapter.is_oom(
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
    )
    assert not adapter.is_oom(RuntimeError("CUDA error: device-side assert triggered"))
    adapter.oom_error = RuntimeError  # what the cell falls back to before torch 1.13
    assert adapter.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert not adapter.is_oom(RuntimeError("CUDA error: device-side assert triggered"))


def test_real_gpu_measures_and_names_the_current_device(probe, monkeypatch, capsys):
    """The device handed to the measurements is the current CUDA device, and its name is that one's."""
    seen = {}

    def record(torch_module, config, device, memory):
        seen.update(device=device, name=memory.name)
        return {"mode": "real_gpu", "device": memory.name}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"GPU at {device}")
    monkeypatch.setitem(probe, "probe_on_device", record)
    result = probe["run_chunked_gpu_probe"]("real_gpu", SMALL)
    assert seen == {"device": torch.device("cuda", 1), "name": "GPU at cuda:1"}
    assert result["device"] == "GPU at cuda:1"
    assert capsys.readouterr().out.count('"device"') == 1


def test_result_is_shown_once_in_the_notebook():
    """The cell ends in an assignment, so Jupyter echoes nothing; the executed reference shows one output."""
    last = ast.parse(PROBE).body[-1]
    assert isinstance(last, ast.Assign)
    outputs = read_nb(REPO_ROOT / "solutions" / NOTEBOOK_NAME).cells[-1].outputs
    assert [o.output_type for o in outputs] == ["stream"]
    assert outputs[0].text.count("模式：dry_run") == 1


@pytest.mark.slow  # bench/gpu_evidence.py runs the whole probe on the CPU (about 30 s)
def test_gpu_evidence_script_runs_on_cpu_and_writes_its_table(tmp_path):
    out = tmp_path / "evidence.md"
    run = run_bench("gpu_evidence.py", "--device", "cpu", "--out", out)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    table = out.read_text()
    assert "| synthetic chunked, 2048 tokens | 0.25 | 0.25 | 1.000 |" in table
    assert "S(h, T)" in table and "Checks: all passed" in table
    assert run.stdout.strip().splitlines()[-1].startswith("gpu_evidence: all checks passed on cpu")


@pytest.mark.slow  # every code cell of the committed solutions, in one process (about 15 s)
@pytest.mark.heavy  # the whole solutions notebook again (test_generation executes it in make test)
def test_notebook_on_gpu_runs_every_reference_cell_and_fails_only_at_the_probe_without_cuda(
    tmp_path,
):
    # The learner's "Run all" with RUN_MODE = 'real_gpu' on a machine without CUDA: every cell
    # before the probe runs clean, the probe raises its own error, and the run fails for it.
    report = tmp_path / "report.md"
    solutions = REPO_ROOT / "solutions" / NOTEBOOK_NAME
    run = run_bench("notebook_on_gpu.py", solutions, "--mode", "real_gpu", "--out", report)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "1 raised, 0 wrote to stderr" in run.stdout, run.stdout
    text = report.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line[:2] == "| "]
    raised = [row.split(" | ")[3] for row in rows[1:] if row.split(" | ")[3].strip()]
    assert len(raised) == 1 and raised[0].startswith("RuntimeError: real_gpu 模式需要 CUDA"), raised
    assert "raised RuntimeError: real_gpu" in text


def run_bench(script: str, *args) -> subprocess.CompletedProcess:
    """bench/`script` with `args`, run as a maintainer runs it; its output captured."""
    command = [sys.executable, str(REPO_ROOT / "bench" / script), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)
