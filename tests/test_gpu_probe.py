"""The GPU probe, the notebook's last cell: dry run without torch, and its two clear errors."""

import subprocess
import sys

import pytest

from grader.kit.nbsource import NOTEBOOK_NAME, REPO_ROOT
from tests.conftest import read_nb

PROBE = read_nb(REPO_ROOT / "notebooks" / NOTEBOOK_NAME).cells[-1].source
DEFINITIONS = PROBE[: PROBE.rindex("run_chunked_gpu_probe(RUN_MODE")]


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_dry_run_prints_the_plan_without_importing_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        + PROBE
        + "\nassert 'torch' not in sys.modules or sys.modules['torch'] is None"
    )
    run = run_python(code)
    assert run.returncode == 0, run.stderr
    assert '"mode": "dry_run"' in run.stdout and '"chunk_count": 8' in run.stdout


def test_unknown_mode_is_refused_with_the_allowed_modes_named():
    run = run_python(DEFINITIONS + "\nrun_chunked_gpu_probe('gpu', CHUNK_GPU_PROBE)")
    assert "ValueError" in run.stderr and "dry_run" in run.stderr and "real_gpu" in run.stderr


def test_real_gpu_without_cuda_says_cuda_is_needed():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the error path needs a machine without it")
    run = run_python(DEFINITIONS + "\nrun_chunked_gpu_probe('real_gpu', CHUNK_GPU_PROBE)")
    assert "RuntimeError" in run.stderr and "CUDA" in run.stderr
