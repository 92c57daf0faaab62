"""Part five's whole mistake catalogue (TODO 20-24) through real nbgrader: `make test-heavy`.

`make test` grades a sample of it (`mistakes_engine.SAMPLE`) in its one batch (graded_batch);
here every entry is graded, packed as `tests/fixtures/packing.py` packs them, together with the
reference: each pack loses exactly the union of its mistakes' checks (so a mistake leaks into no
other TODO), the first failing cell of each mistake names its cause, the visible cell fails for
the packs whose mistakes it is meant to catch, and the correct styles keep full marks.
"""

import nbformat
import pytest

from grader.kit.authoring.examples import filled_submission
from grader.kit.authoring.nbsource import NOTEBOOK_NAME
from grader.kit.report.grades import grade_columns
from tests.conftest import autograde, lost_checks, made_once, mistake_packs, read_nb
from tests.fixtures.mistakes_engine import MISTAKES
from tests.test_autograde import feedback_failures, visible_cell_failed

pytestmark = [pytest.mark.heavy, pytest.mark.slow]


@pytest.fixture(scope="module")
def engine_batch(fresh_build, tmp_path_factory):
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    packs = mistake_packs(release, solutions, MISTAKES)

    def grade(folder):
        submissions = folder / "submissions"
        submissions.mkdir()
        nbformat.write(filled_submission(release, solutions), submissions / "reference-solution.ipynb")
        for pack in packs:
            nbformat.write(filled_submission(release, solutions, pack.edits), submissions / f"{pack.name}.ipynb")
        course = fresh_build / "build" / "grading-course"
        run, _ = autograde(submissions, folder / "report", course)
        assert run.returncode == 0, run.stderr[-3000:]

    folder = made_once(tmp_path_factory, "engine-catalogue", grade)
    from tests.conftest import grades_csv_rows

    return {
        "rows": grades_csv_rows(folder / "report"),
        "report": folder / "report",
        "release": release,
        "pack_of": {m.name: pack for pack in packs for m in pack.mistakes},
    }


def test_the_catalogue_holds_at_least_60_mistakes_and_some_correct_styles():
    assert len([m for m in MISTAKES if m.loses]) >= 60
    assert len([m for m in MISTAKES if not m.loses]) >= 6
    assert len({m.name for m in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_each_mistake_loses_its_own_checks_and_names_its_cause(engine_batch, mistake):
    pack = engine_batch["pack_of"][mistake.name]
    row = engine_batch["rows"][pack.name]
    assert row["status"] == "graded", row
    lost = lost_checks(row, engine_batch["release"])
    assert set(mistake.loses) <= lost and lost == pack.loses, (
        f"{pack.name} lost {sorted(lost)}, expected {sorted(pack.loses)}"
    )
    if not pack.loses:
        assert float(row["score"]) == float(row["max_score"])
        return
    if mistake.loses:
        graded = [(g, text) for g, text in feedback_failures(engine_batch, pack.name) if g in mistake.loses]
        first_id = next(g for g, _ in grade_columns(engine_batch["release"]) if g in mistake.loses)
        assert graded and graded[0][0] == first_id, graded[:1]
        for word in mistake.cause:
            assert word in graded[0][1], f"the first message lacks {word!r}: {graded[0][1]}"
    assert visible_cell_failed(engine_batch, pack.name) == mistake.visible


def test_the_reference_keeps_full_marks(engine_batch):
    row = engine_batch["rows"]["reference-solution"]
    assert row["status"] == "graded" and float(row["score"]) == float(row["max_score"])
