"""Issue 38: a fresh, blind set of part-five answers (tests/fixtures/fresh_mistakes_engine.py)
through the hidden checks, in process, as test_checks.py runs the catalogue: each mistake loses
points, and only on its own TODO's grade cells; each correct style keeps full marks.

The fresh entries carry no `loses` (they were written without reading the checks), so the test
asserts only the TODO: the lost cells are a non-empty subset of `test_todo<N>_*` for the entry's N.
"""

import re

import pytest

from tests.fixtures.fresh_mistakes_engine import FRESH_CORRECT, FRESH_MISTAKES
from tests.test_checks import assert_a_fresh_mistake_loses_on_its_own_todo_only, lost_by
from tests.test_visible_checks import first_failure, run_cells

pytestmark = [pytest.mark.heavy, pytest.mark.slow]


def test_the_fresh_set_is_large_enough_and_spread_over_the_todos():
    assert len(FRESH_MISTAKES) >= 65 and len(FRESH_CORRECT) >= 10
    for todo in range(20, 25):
        assert len([m for m in FRESH_MISTAKES if m["todo"] == todo]) >= 10, todo
    names = [e["name"] for e in FRESH_MISTAKES + FRESH_CORRECT]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("entry", FRESH_MISTAKES, ids=[m["name"] for m in FRESH_MISTAKES])
def test_a_fresh_mistake_loses_points_on_its_own_todo_only(entry):
    assert_a_fresh_mistake_loses_on_its_own_todo_only(entry)


@pytest.mark.parametrize("entry", FRESH_CORRECT, ids=[m["name"] for m in FRESH_CORRECT])
def test_a_fresh_correct_style_keeps_full_marks(entry):
    failed = lost_by(entry["edits"])
    assert failed == {}, f"a correct TODO {entry['todo']} answer loses points: {failed}"


def test_the_first_visible_failure_names_the_fresh_mistakes_own_todo_and_never_another():
    """Issue 38's bar for what the learner reads first: the visible cells, run with each fresh
    mistake, name its TODO first for at least 60 of every 65 mistakes, and never blame another
    TODO (a mistake they miss shows nothing; the hidden checks above still catch it)."""
    right, silent, blamed = [], [], []
    for entry in FRESH_MISTAKES:
        cell, message = first_failure(run_cells(entry["edits"], last_todo=24))
        named = [int(n) for n in re.findall(r"TODO (\d+)", message)]
        if cell is None:
            silent.append(entry["name"])
        elif named and named[0] == entry["todo"]:
            right.append(entry["name"])
        else:
            blamed.append((entry["name"], entry["todo"], message))
    assert not blamed, f"the first visible failure names another TODO: {blamed}"
    assert len(right) * 65 >= 60 * len(FRESH_MISTAKES), (
        f"{len(right)} of {len(FRESH_MISTAKES)} named first; silent: {silent}"
    )
