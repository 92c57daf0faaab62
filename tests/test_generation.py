"""The committed notebooks are exactly what the one source generates."""

import copy
import subprocess
import sys

import nbformat
import pytest

from grader.kit.authoring.nbsource import NOTEBOOK_NAME, REPO_ROOT
from tests.conftest import read_nb


def without_outputs(nb):
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


@pytest.fixture(scope="module")
def executed_solutions(tmp_path_factory):
    """The solutions notebook generated afresh and executed, as `make solutions` makes it."""
    out = tmp_path_factory.mktemp("executed")
    subprocess.run(
        [sys.executable, "-m", "grader.kit.authoring.build", "solutions", "--out", str(out)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    return out / "solutions" / NOTEBOOK_NAME


def test_committed_student_notebook_is_byte_identical_to_a_fresh_generation(fresh_build):
    committed = (REPO_ROOT / "notebooks" / NOTEBOOK_NAME).read_bytes()
    fresh = (fresh_build / "notebooks" / NOTEBOOK_NAME).read_bytes()
    assert committed == fresh, "notebooks/ is stale: run `make notebooks` and commit the result"


def test_committed_solutions_notebook_matches_a_fresh_generation_apart_from_outputs(
    executed_solutions,
):
    committed = read_nb(REPO_ROOT / "solutions" / NOTEBOOK_NAME)
    fresh = read_nb(executed_solutions)
    assert without_outputs(committed) == without_outputs(fresh), (
        "solutions/ is stale: run `make solutions` and commit"
    )


def test_generated_notebooks_record_no_time_no_path_and_stable_cell_ids(
    fresh_build, executed_solutions
):
    for path in (fresh_build / "notebooks" / NOTEBOOK_NAME, executed_solutions):
        text = path.read_text(encoding="utf-8")
        for leak in (
            str(fresh_build),
            str(executed_solutions.parents[1]),
            str(REPO_ROOT),
            "/tmp/",
            "iopub",
            '"execution":',
            "jupytext",
        ):
            assert leak not in text, f"{path.parent.name}/ records {leak!r}"
        nb = read_nb(path)
        ids = [cell.id for cell in nb.cells]
        assert len(set(ids)) == len(ids)
        grade_ids = [
            cell.metadata["nbgrader"]["grade_id"]
            for cell in nb.cells
            if "nbgrader" in cell.metadata
        ]
        assert set(grade_ids) <= set(ids), "cells with a grade id must carry it as their cell id"


def test_solutions_notebook_is_executed_with_every_test_passing(executed_solutions):
    nb = read_nb(executed_solutions)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), (
        "every code cell of the solutions must have run"
    )
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"the solutions raise: {[e.ename for e in errors]}"
    stderr = [o.text for cell in code for o in cell.outputs if o.get("name") == "stderr"]
    assert not stderr, f"the solutions write to stderr (nbgrader would give 0 points): {stderr[:2]}"
    visible = next(cell for cell in nb.cells if cell.id == "visible_tests")
    printed = "".join(o.get("text", "") for o in visible.outputs)
    assert "全部通过" in printed and "❌" not in printed, printed


def build_solutions(out, *extra):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.kit.authoring.build",
            "solutions",
            "--no-execute",
            "--out",
            str(out),
        ]
        + list(extra),
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_rebuilding_solutions_from_an_unchanged_source_keeps_the_committed_file(tmp_path):
    # Their measurement cells print this run's timings; that alone must not leave git dirty.
    target = tmp_path / "solutions" / NOTEBOOK_NAME
    target.parent.mkdir()
    committed = (REPO_ROOT / "solutions" / NOTEBOOK_NAME).read_bytes()
    target.write_bytes(committed)
    assert "kept" in build_solutions(tmp_path)
    assert target.read_bytes() == committed
    assert "wrote" in build_solutions(tmp_path, "--rewrite")
    assert target.read_bytes() != committed  # --no-execute: the outputs are gone


def test_rebuilding_solutions_from_a_changed_source_rewrites_them(tmp_path):
    target = tmp_path / "solutions" / NOTEBOOK_NAME
    target.parent.mkdir()
    stale = read_nb(REPO_ROOT / "solutions" / NOTEBOOK_NAME)
    prose = next(cell for cell in stale.cells if cell.cell_type == "markdown")
    prose.source += "\n\nA sentence the source no longer has."
    nbformat.write(stale, target)
    assert "wrote" in build_solutions(tmp_path)
    fresh = read_nb(target)
    assert without_outputs(fresh) == without_outputs(
        read_nb(REPO_ROOT / "solutions" / NOTEBOOK_NAME)
    )
