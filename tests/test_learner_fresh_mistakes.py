"""A fresh, blind set of answers for parts one to four (tests/fixtures/fresh_mistakes_learner.py)
through the hidden checks and the visible cells, in process, as test_checks.py and
test_visible_checks.py run the catalogue: each mistake loses points, and only on its own TODO's
grade cells, and the first visible failure it meets (if any) names that TODO; each correct style
keeps full marks and passes the visible cells.

The fresh entries carry no `loses` (they were written without reading the checks), so the test
asserts only the TODO. The ones it found wrong are in the catalogues (mistakes_core.py,
mistakes_sched.py) with their exact `loses`.
"""

import re

import pytest

from tests.fixtures.fresh_mistakes_learner import FRESH_CORRECT, FRESH_MISTAKES
from tests.test_checks import assert_a_fresh_mistake_loses_on_its_own_todo_only, lost_by
from tests.test_visible_checks import first_failure, run_cells

pytestmark = [pytest.mark.heavy, pytest.mark.slow]


def test_the_fresh_set_is_large_enough_and_spread_over_the_todos():
    assert len(FRESH_MISTAKES) >= 85 and len(FRESH_CORRECT) >= 55
    for todo in range(1, 20):
        assert [m for m in FRESH_MISTAKES if m["todo"] == todo], todo
        assert [m for m in FRESH_CORRECT if m["todo"] == todo], todo
    names = [e["name"] for e in FRESH_MISTAKES + FRESH_CORRECT]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("entry", FRESH_MISTAKES, ids=[m["name"] for m in FRESH_MISTAKES])
def test_a_fresh_mistake_loses_points_on_its_own_todo_only(entry):
    assert_a_fresh_mistake_loses_on_its_own_todo_only(entry)


@pytest.mark.parametrize("entry", FRESH_MISTAKES, ids=[m["name"] for m in FRESH_MISTAKES])
def test_the_first_visible_failure_of_a_fresh_mistake_names_its_todo(entry):
    cell, message = first_failure(run_cells(entry["edits"], last_todo=entry["todo"]))
    if cell is None:
        pytest.skip("no visible cell catches it (the hidden checks do)")
    named = re.findall(r"TODO (\d+)", message)
    assert named and int(named[0]) == entry["todo"], (
        f"{cell}: the first failure names {named}: {message}"
    )


@pytest.mark.parametrize("entry", FRESH_CORRECT, ids=[m["name"] for m in FRESH_CORRECT])
def test_a_fresh_correct_style_keeps_full_marks_and_passes_the_visible_cells(entry):
    failed = lost_by(entry["edits"])
    assert failed == {}, f"a correct TODO {entry['todo']} answer loses points: {failed}"
    cell, message = first_failure(run_cells(entry["edits"], last_todo=entry["todo"]))
    assert cell is None, f"a correct TODO {entry['todo']} answer fails {cell}: {message}"
