"""The student notebook on the Pythons learners have: Colab's 3.12, ModelScope's 3.10 (stdlib only, no torch)."""

import glob
import os
import shutil
import subprocess

import pytest

from grader.kit.build import execute
from grader.kit.nbsource import NOTEBOOK_NAME, REPO_ROOT, nbgrader_meta
from tests.conftest import read_nb


def find_python(version):
    """A working interpreter of that version (pyenv's shims can exist without one), or None."""
    candidates = sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}"))
    )
    candidates += [shutil.which(f"python{version}")]
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "import venv"], capture_output=True).returncode == 0:
            return python
    return None


KERNELS = {"3.12": "ipykernel==7.4.0", "3.10": "ipykernel==7.3.0"}  # 7.4 needs Python 3.11 or newer


@pytest.mark.parametrize("version", sorted(KERNELS))
def test_core_part_and_probe_run_top_to_bottom_without_torch(version, tmp_path):
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", KERNELS[version]],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0:
        pytest.skip(
            f"ipykernel could not be installed for Python {version}: {install.stderr[-300:]}"
        )
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "ipykernel",
            "install",
            "--prefix",
            str(venv),
            "--name",
            "learner",
        ],
        check=True,
        capture_output=True,
    )
    nb = read_nb(REPO_ROOT / "notebooks" / NOTEBOOK_NAME)
    first_torch = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "import torch" in c.source
    )
    nb.cells = (
        nb.cells[:first_torch] + nb.cells[-2:]
    )  # the core part, then the GPU probe (its prose and code)
    os.environ["JUPYTER_PATH"] = str(venv / "share" / "jupyter")
    try:
        execute(nb, tmp_path, kernel_name="learner", allow_errors=True)
    finally:
        del os.environ["JUPYTER_PATH"]
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o.ename for o in cell.outputs if o.output_type == "error"]
        if cell.id == "visible_tests":
            assert errors == ["NotImplementedError"], (
                f"Python {version}: the visible tests should ask for the TODOs"
            )
        elif nbgrader_meta(cell).get("grade"):
            assert errors in ([], ["NotImplementedError"]), (
                f"Python {version}, cell {cell.id}: {errors}"
            )
        else:
            assert errors == [], f"Python {version}, cell {cell.id}: {errors}"
    assert '"mode": "dry_run"' in "".join(o.get("text", "") for o in nb.cells[-1].outputs)
