"""The student notebook's stdlib parts (the core part and the GPU probe's dry run) in fresh kernels
of the Pythons learners have, none with torch installed:

- 3.13: Colab's default runtime (with torch 2.11 there, on a T4 without bfloat16);
- 3.12: ModelScope's current images (with torch 2.10); its legacy images run 3.11 (torch 2.3.1),
  the Python of this kit's own venv, where the whole notebook runs in the other tests;
- 3.10: the floor the notebook's first cell states (`int | None` in a dataclass needs it).

The torch parts on each of these Pythons, with the torch its platform ships, are `make compat`
(a matrix outside `make test`: PyPI's regular torch wheels, CUDA libraries included, several GB each).
This module is a platform matrix too (a venv and kernel for each Python): `make test-heavy`.
"""

import glob
import os
import shutil
import subprocess

import pytest

from grader.kit.authoring.build import execute
from grader.kit.authoring.nbsource import NOTEBOOK_NAME, REPO_ROOT, nbgrader_meta
from tests.conftest import read_nb

pytestmark = [pytest.mark.heavy, pytest.mark.slow]


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


# ipykernel 7.4 requires Python >= 3.11; 7.3.0 is the newest that installs on 3.10.
KERNELS = {"3.13": "ipykernel==7.4.0", "3.12": "ipykernel==7.4.0", "3.10": "ipykernel==7.3.0"}


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
    assert "模式：dry_run" in "".join(o.get("text", "") for o in nb.cells[-1].outputs)
