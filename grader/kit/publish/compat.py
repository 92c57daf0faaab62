"""Run the reference notebook, every cell, in a kernel of another Python environment.

    python -m grader.kit.publish.compat VENV       one environment you built
    python -m grader.kit.publish.compat --matrix   the learners' platforms (`make compat`)

The executed notebook is the solutions notebook with its outputs cleared: the core part, the torch
parts (KV cache, cached and chunked prefill, the measurements) and the GPU probe's dry run. The GPU
probe's real path needs CUDA and is not run. Prints one line per cell that failed or wrote to
stderr (nbgrader gives 0 to a graded cell that writes to stderr, so both count as failures), then
the Python and torch versions of the kernel; exits 1 on any failure.

`--matrix` builds one throwaway venv per platform in PLATFORMS under build/compat/ from the
Pythons in ~/.pyenv/versions (the package index's regular torch wheels, CUDA libraries included,
run on a CPU), runs the notebook in each, removes the venv and prints one line per platform.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from ..authoring.build import execute
from ..errors import run_command
from ..paths import COMPAT_VENVS, REPO_ROOT, SOLUTIONS_NOTEBOOK
from ..sandbox.kernel_setup import kernel_tempdir

VERSIONS = "import sys, torch; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}')"
# What the probe's CudaMemory adapter calls (OutOfMemoryError has a fallback: torch < 1.13 lacks it).
CUDA_CALLS = (
    "is_available",
    "current_device",
    "get_device_name",
    "synchronize",
    "memory_allocated",
    "reset_peak_memory_stats",
    "max_memory_allocated",
    "empty_cache",
)
MISSING = f"import torch; print(' '.join(n for n in {CUDA_CALLS!r} if not hasattr(torch.cuda, n)))"


# (platform, Python, torch, numpy): Colab's default runtime, ModelScope's image and its legacy image,
# and the floor the notebook's first cell states.
PLATFORMS = (
    ("Colab", "3.13", "2.11.0", "2.2.6"),
    ("ModelScope", "3.12", "2.10.0", "2.2.6"),
    ("ModelScope (legacy image)", "3.11", "2.3.1", "1.26.4"),
    ("floor", "3.10", "1.11.0", "1.26.4"),
)


def find_python(version: str) -> str | None:
    """The newest ~/.pyenv/versions/<version>.*/bin/python<version>, else python<version> on PATH."""
    found = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    return str(found[-1]) if found else shutil.which(f"python{version}")


def matrix() -> int:
    """Every platform of PLATFORMS, one after the other; a line per platform, 1 if any failed."""
    results = []
    for name, version, torch_version, numpy_version in PLATFORMS:
        python = find_python(version)
        label = f"{name}: Python {version}, torch {torch_version}"
        if python is None:
            results.append((label, f"no Python {version} here"))
            continue
        venv = REPO_ROOT / COMPAT_VENVS / f"py{version}"
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-cache-dir"]
        packages = [f"torch=={torch_version}", f"numpy=={numpy_version}", "ipykernel==7.3.0"]
        install = subprocess.run(
            pip + ["--disable-pip-version-check"] + packages, capture_output=True, text=True
        )
        if install.returncode:
            results.append((label, f"pip install failed: {install.stderr.strip()[-300:]}"))
        else:
            print(f"== {label}", flush=True)
            code = main([str(venv)])
            results.append((label, "passed" if code == 0 else "FAILED (see above)"))
        shutil.rmtree(venv, ignore_errors=True)
    print()
    for label, outcome in results:
        print(f"compat matrix: {label}: {outcome}")
    return 0 if all(outcome == "passed" for _, outcome in results) else 1


def main(argv=None) -> int:
    """The command line: the kit's errors become their message and exit status."""
    return run_command(run, argv)


def run(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--matrix"]:
        return matrix()
    if len(args) != 1 or not (Path(args[0]) / "bin" / "python").exists():
        print(
            "usage: python -m grader.kit.publish.compat VENV  (a venv with torch and ipykernel)",
            file=sys.stderr,
        )
        return 2
    venv = Path(args[0]).resolve()
    python = str(venv / "bin" / "python")
    versions = subprocess.run([python, "-c", VERSIONS], capture_output=True, text=True, check=True)
    missing = subprocess.run([python, "-c", MISSING], capture_output=True, text=True, check=True)
    install = [python, "-m", "ipykernel", "install", "--prefix", str(venv), "--name", "compat"]
    subprocess.run(install, check=True, capture_output=True)
    nb = nbformat.read(REPO_ROOT / SOLUTIONS_NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    workdir = kernel_tempdir("ch34-compat-")
    os.environ["JUPYTER_PATH"] = str(venv / "share" / "jupyter")
    try:
        execute(nb, workdir, kernel_name="compat", allow_errors=True)
    finally:
        del os.environ["JUPYTER_PATH"]
        shutil.rmtree(workdir, ignore_errors=True)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    failed = 0
    for cell in code_cells:
        for output in cell.outputs:
            if output.output_type == "error":
                failed += 1
                print(f"cell {cell.id}: {output.ename}: {output.evalue}")
            elif output.output_type == "stream" and output.name == "stderr":
                failed += 1
                print(f"cell {cell.id} wrote to stderr: {output.text.strip()[:300]}")
    kernel = versions.stdout.strip()
    if missing.stdout.strip():
        failed += 1
        print(
            f"the GPU probe calls torch.cuda functions this torch lacks: {missing.stdout.strip()}"
        )
    if failed:
        print(f"compat: {failed} failure(s) on {kernel}")
        return 1
    print(
        f"compat: all {len(code_cells)} code cells of the reference notebook ran on {kernel}; the GPU probe's torch.cuda calls all exist"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
