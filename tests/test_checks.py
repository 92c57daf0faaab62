"""The hidden checks as plain Python: every check file against the reference and each mistake.

No nbgrader here: each `checks/todo<N>.py` runs as its grade cell runs it (its own scope, the
notebook's namespace as argument), so a check that fails on the reference or misses a
catalogued mistake shows up in seconds. `test_autograde.py` grades the same with real nbgrader.
"""

import copy
import io
from contextlib import redirect_stdout

import pytest

from grader.kit.authoring.nbsource import (
    load_checks,
    named_checks,
    nbgrader_meta,
    read_source,
    strip_solution_markers,
    todo_number,
)
from tests.conftest import all_mistakes
from tests.fixtures.mistakes_core import MISTAKES as CORE
from tests.fixtures.mistakes_sched import MISTAKES as SCHED

MISTAKES = all_mistakes()
CORE_NAMES = {m.name for m in CORE}
# Catalogues whose correct-in-another-style entries (no `loses`) run here too.
NO_LOSS_NAMES = CORE_NAMES | {m.name for m in SCHED}
SOURCE = read_source()


def grade_cells():
    """(grade id, check file, check name) for every grade cell that names a check, in order."""
    found = []
    for cell in SOURCE.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type == "code" and meta.get("grade"):
            for filename, name in named_checks(cell.source):
                found.append((meta["grade_id"], filename, name))
    return found


CHECKED = grade_cells()
CONVERTED_TODOS = {grade_id.split("_")[1] for grade_id, _, _ in CHECKED}


def run_code_cells(edits=(), last_todo=None):
    """Run the reference's code cells (grade and measurement cells left out) with `edits` applied.

    With `last_todo`, stop at the first grade cell of a later TODO (the core's mistakes need
    no torch model). Returns the namespace and the grade ids of the cells that raised: a
    visible test cell that raises has caught the mistake. Each edit's old text must occur once.
    """
    nb = copy.deepcopy(SOURCE)
    cells = []
    for c in nb.cells:
        meta = nbgrader_meta(c)
        if last_todo and meta.get("grade") and (todo_number(meta["grade_id"]) or 0) > last_todo:
            break
        if c.cell_type == "code" and not meta.get("grade"):
            if "measurement" not in c.metadata.get("tags", []):
                cells.append(c)
    for cell in cells:
        cell.source = strip_solution_markers(cell.source)
    for old, new in edits:
        places = [c for c in cells if nbgrader_meta(c).get("solution") and old in c.source]
        assert sum(c.source.count(old) for c in places) == 1, f"edit {old!r} must match once"
        places[0].source = places[0].source.replace(old, new)
    namespace, raised = {"__name__": "__main__"}, []
    for cell in cells:
        code = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith("%"))
        try:
            with redirect_stdout(io.StringIO()):
                exec(compile(code, "<cell>", "exec"), namespace)
        except Exception:
            raised.append(nbgrader_meta(cell).get("grade_id", ""))
    return namespace, raised


def failures(namespace, last_todo=None):
    """{grade id: message} for every check that fails on `namespace`, in notebook order.

    With `last_todo`, only the checks of TODOs up to it (the namespace holds no later code).
    """
    checks = {filename: load_checks(filename) for _, filename, _ in CHECKED}
    failed = {}
    for grade_id, filename, name in CHECKED:
        if last_todo and todo_number(grade_id) > last_todo:
            continue
        try:
            checks[filename][name](namespace)
        except Exception as error:  # noqa: BLE001  (a check may end in any error; all count)
            failed[grade_id] = f"{type(error).__name__}: {error}"
    return failed


@pytest.fixture(scope="module")
def reference():
    return run_code_cells()


def test_every_check_passes_on_the_reference(reference):
    namespace, raised = reference
    assert raised == [], f"reference cells raised: {raised}"
    assert CHECKED, "no grade cell names a check"
    assert failures(namespace) == {}


def test_every_grade_cell_names_exactly_one_check_of_its_own_todo():
    for cell in SOURCE.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        named = named_checks(cell.source)
        todo = meta["grade_id"].split("_")[1]
        if todo not in CONVERTED_TODOS:
            continue
        assert len(named) == 1, f"{meta['grade_id']} names {named}"
        filename, name = named[0]
        check = meta["grade_id"].removeprefix(f"test_{todo}_")
        if filename == f"{todo}.py":  # one TODO's file: check_<check>
            assert name == f"check_{check}", f"{meta['grade_id']} names {name}"
        else:  # one part's file (sched.py): check_<todo>_<check>
            assert name == f"check_{todo}_{check}", f"{meta['grade_id']} names {filename}::{name}"


def converted(mistake):
    """Whether the mistake's checks live in check files (a TODO not yet split still has one cell)."""
    return all(grade_id.split("_")[1] in CONVERTED_TODOS for grade_id in mistake.loses) and (
        mistake.loses or mistake.name in NO_LOSS_NAMES
    )


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_mistake_fails_exactly_its_checks_and_names_the_cause_first(mistake):
    if not converted(mistake):
        pytest.skip("its TODO's checks are not split into check files yet")
    last_todo = max(
        (todo_number(g) for g in mistake.loses), default=8 if mistake.name in CORE_NAMES else None
    )
    namespace, raised = run_code_cells(mistake.edits, last_todo)
    failed = failures(namespace, last_todo)
    assert set(failed) == set(mistake.loses), f"failed {sorted(failed)}: {failed}"
    first = next(iter(failed.values()), "")
    for word in mistake.cause:
        assert word in first, f"first message lacks {word!r}: {first}"
    caught = any(grade_id.startswith("visible") for grade_id in raised)
    assert caught == mistake.visible, f"visible cells raised: {raised}"
