"""Run All does not stop at part three, the optional part.

A learner who answered parts one and two and skipped part three (TODO 11-14 still raise
NotImplementedError) presses Run All: Jupyter stops at the first cell that raises, so part three's
visible check must report its failures as printed ❌ lines and raise nothing. The notebook here is
the source as released (grade cells without their hidden checks) with parts one and two answered
and part three's TODO bodies replaced by the release's stub, run in a real kernel without `allow_errors` up to part four's first code cell.
"""

import re

import pytest

from grader.kit.authoring.build import MEASUREMENT, execute, source_notebook
from grader.kit.authoring.nbsource import nbgrader_meta, strip_hidden_tests, strip_solution_markers

SOLUTION_REGION = re.compile(r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION(?:\n|$)", re.S)
SKIPPED_TODOS_CELL = "block_prefix_cache"  # the cell with TODO 11-14
STOP_AFTER = "sched_request"  # part four's first code cell


def stubbed(source: str) -> str:
    """Each TODO body as the release has it: nbgrader's two stub lines, indented like the body."""
    return SOLUTION_REGION.sub(
        lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()\n", source
    )


def parts_one_to_four_with_part_three_skipped():
    nb = source_notebook(for_release=True)
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if MEASUREMENT in cell.metadata.get("tags", []):
            continue  # they define nothing later cells use; they only cost time
        meta = nbgrader_meta(cell)
        if meta.get("grade_id") == SKIPPED_TODOS_CELL:
            cell.source = stubbed(cell.source)
        else:
            cell.source = strip_solution_markers(strip_hidden_tests(cell.source))
        cells.append(cell)
        if meta.get("grade_id") == STOP_AFTER:
            break
    else:
        raise AssertionError(f"no cell {STOP_AFTER!r} in the source")
    nb.cells = cells
    return nb


def test_stub_matches_what_the_release_writes():
    source = (
        "    def f(self):\n        ### BEGIN SOLUTION\n        return 1\n        ### END SOLUTION\n"
    )
    assert stubbed(source) == (
        "    def f(self):\n        # YOUR CODE HERE\n        raise NotImplementedError()\n"
    )


@pytest.mark.slow  # a Jupyter kernel runs parts one to four's first cell
def test_run_all_with_part_three_skipped_reaches_part_four(tmp_path):
    nb = parts_one_to_four_with_part_three_skipped()
    execute(nb, tmp_path)  # no allow_errors: like Run All, the first cell that raises stops it
    by_id = {nbgrader_meta(c).get("grade_id"): c for c in nb.cells}
    assert by_id[STOP_AFTER].execution_count is not None, "part four's first cell did not run"
    printed = "".join(
        o.get("text", "") for o in by_id["visible_todo11_14"].outputs if o.output_type == "stream"
    )
    failed = [ln for ln in printed.splitlines() if ln.startswith("❌")]
    assert failed == [f"❌ TODO {n}（选做）还没完成" for n in (11, 12, 13, 14)], printed
