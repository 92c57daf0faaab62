"""Read the one source of the chapter and run its reference code outside a notebook.

The source is a jupytext percent-format file with nbgrader metadata inline. Tests and
benchmarks use `solution_namespace()` to get the reference classes and functions without
going through a Jupyter kernel; they never import anything from the generated notebooks.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

REPO_ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ch34_prefix_cache"
NOTEBOOK_NAME = f"{ASSIGNMENT}.ipynb"
SOURCE_PATH = REPO_ROOT / "grader" / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py"

# The one place that names the repository: the "Open in Colab" badge is built from it.
GITHUB_REPO = "inference-course/ch34-prefix-cache-kit"
COLAB_URL = (
    f"https://colab.research.google.com/github/{GITHUB_REPO}/blob/main/notebooks/{NOTEBOOK_NAME}"
)


@dataclass(frozen=True)
class Part:
    """One part of the notebook: the TODOs it holds and whether its points count toward `score`."""

    key: str  # column name in grades.csv
    title: str  # as the learner reads it
    todos: tuple[int, ...]
    counted: bool  # False: a challenge part, reported beside the score, never inside it


# The one table of parts. Grade ids read `test_todo<N>_<check>`: the TODO number says the part.
PARTS = (
    Part("core", "核心：PrefixCacheManager", tuple(range(1, 9)), counted=True),
    Part("kv", "第二部分：真实 KV", (9, 10), counted=True),
    Part("block", "第三部分（选做）：块级缓存", tuple(range(11, 15)), counted=False),
)
_GRADE_ID = re.compile(r"^test_todo(\d+)_")


def todo_number(grade_id: str) -> int | None:
    """The TODO a grade cell checks (`test_todo12_acquire` -> 12), or None for another id."""
    match = _GRADE_ID.match(grade_id)
    return int(match.group(1)) if match else None


def part_of(grade_id: str) -> Part | None:
    """The part a grade cell belongs to, or None when its id names no TODO of any part."""
    number = todo_number(grade_id)
    return next((part for part in PARTS if number in part.todos), None)


_SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", re.MULTILINE)
_HIDDEN_BLOCK = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*(\n|$)",
    re.MULTILINE | re.DOTALL,
)


def read_source(path: Path = SOURCE_PATH) -> nbformat.NotebookNode:
    """Parse the percent-format source into a notebook (nbgrader metadata included)."""
    return jupytext.read(str(path), fmt="py:percent")


def nbgrader_meta(cell) -> dict:
    """The cell's nbgrader metadata, or {} for a plain cell."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def strip_solution_markers(text: str) -> str:
    """Reference code as the solutions notebook shows it: the markers go, the code stays."""
    return _SOLUTION_MARKER.sub("", text)


def strip_hidden_tests(text: str) -> str:
    """A grade cell as the learner sees it: hidden test blocks removed with their markers."""
    return _HIDDEN_BLOCK.sub("", text)


def solution_code_cells(nb=None, *, skip_tags=("measurement",)) -> list[str]:
    """Source of every non-grade code cell, solution markers removed, in notebook order.

    Grade cells (tests) are left out; so are cells carrying any tag in `skip_tags`.
    """
    nb = nb if nb is not None else read_source()
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code" or nbgrader_meta(cell).get("grade"):
            continue
        if set(cell.get("metadata", {}).get("tags", [])) & set(skip_tags):
            continue
        cells.append(strip_solution_markers(cell.source))
    return cells


def solution_namespace(nb=None, *, skip_tags=("measurement",), quiet=True) -> dict:
    """Execute the reference code cells in one fresh namespace and return it.

    Notebook-only syntax (lines starting with `%` or `!`) is skipped. Printed output is
    swallowed when `quiet` is true.
    """
    namespace: dict = {"__name__": "ch34_solution"}
    sink = io.StringIO() if quiet else None
    for code in solution_code_cells(nb, skip_tags=skip_tags):
        code = "\n".join(
            line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext():
            exec(compile(code, "<ch34 solution>", "exec", dont_inherit=True), namespace)
    return namespace
