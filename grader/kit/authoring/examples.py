"""Make submissions the way learners would: the released notebook with answers typed in.

Used for the bundled examples (`make`) and the mistake catalogue of the tests.

    python -m grader.kit.authoring.examples OUTDIR    # correct, untouched and partly-wrong examples
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import nbformat

from ..errors import KitError, exit_with
from ..paths import REPO_ROOT, SOLUTIONS_NOTEBOOK, STUDENT_NOTEBOOK
from .build import write_notebook
from .nbsource import nbgrader_meta

# Two slips a learner could make: the tail chunk dropped (TODO 2), an integer ratio (TODO 7).
PARTLY_WRONG_EDITS = (
    (
        "for i in range(0, len(tokens), self.block_size)]",
        "for i in range(0, len(tokens) - len(tokens) % self.block_size, self.block_size)]",
    ),
    ("round(hit_tokens / len(prompt), 4)", "hit_tokens // len(prompt)"),
)


def filled_submission(release, solutions, edits=()) -> nbformat.NotebookNode:
    """`release` with every solution cell holding the reference code of `solutions`, then `edits` applied.

    Each edit is (old, new); `old` must occur exactly once in all solution cells together,
    so a change to the reference code cannot silently turn a mistake into a no-op.
    """
    reference = {
        nbgrader_meta(cell)["grade_id"]: cell.source
        for cell in solutions.cells
        if nbgrader_meta(cell).get("solution")
    }
    nb = copy.deepcopy(release)
    answer_cells = [cell for cell in nb.cells if nbgrader_meta(cell).get("solution")]
    for cell in answer_cells:
        # A cell keeps the newline of its last line, so an edit may end with it (jupytext
        # writes a cell's source without the final newline).
        cell.source = reference[nbgrader_meta(cell)["grade_id"]].rstrip("\n") + "\n"
    for old, new in edits:
        places = [cell for cell in answer_cells if old in cell.source]
        count = sum(cell.source.count(old) for cell in places)
        if count != 1:
            raise ValueError(
                f"edit {old!r} matches {count} places in the solution code; it must match exactly one"
            )
        places[0].source = places[0].source.replace(old, new)
    return nb


def write_examples(out_dir: Path) -> list[Path]:
    """Write the bundled example submissions into `out_dir`."""
    release = nbformat.read(REPO_ROOT / STUDENT_NOTEBOOK, as_version=4)
    solutions = nbformat.read(REPO_ROOT / SOLUTIONS_NOTEBOOK, as_version=4)
    examples = {
        "example-correct": filled_submission(release, solutions),
        "example-untouched": release,
        "example-partly-wrong": filled_submission(release, solutions, PARTLY_WRONG_EDITS),
    }
    paths = []
    for name, nb in examples.items():
        paths.append(out_dir / f"{name}.ipynb")
        write_notebook(nb, paths[-1])
    return paths


def main(argv=None) -> int:
    """`python -m grader.kit.authoring.examples OUTDIR`; the kit's errors become an exit status."""
    out = (sys.argv[1:] if argv is None else argv)[0]
    try:
        written = write_examples(Path(out))
    except KitError as error:
        return exit_with(error)
    print(f"wrote {len(written)} example submissions in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
