"""`make autograde`: real nbgrader on real kernels, graded in one batch per session."""

import html
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from grader.kit.authoring.examples import filled_submission
from grader.kit.authoring.nbsource import PARTS, REPO_ROOT, part_of, todo_number
from grader.kit.report.grades import grade_columns
from tests.conftest import (
    BATCH_ABSENT,
    BATCH_BROKEN,
    BATCH_CRASH,
    NB,
    UNFINISHED_PACKS,
    autograde,
    batch_mistakes,
    lost_checks,
    read_nb,
    unfinished_name,
    write,
)

MISTAKES = batch_mistakes()


def grade_ids(batch):
    return dict(grade_columns(batch["release"]))


FEEDBACK_CELL = re.compile(r'<div class="cell[^"]*">(.*?)</div>', re.S)
GRADE_VERDICT = re.compile(r"<p class=fail><b>([^<]+)</b>")
FAILURE = re.compile(r"<pre class=fail>(.*?)</pre>", re.S)


def feedback_failures(batch, student_id):
    """What the learner reads on the feedback page: [(grade id or "", failure text)], in order.

    A grade cell's failure is its `ename: evalue`; another cell's is its traceback.
    """
    page = (batch["report"] / "feedback" / f"{student_id}.html").read_text(encoding="utf-8")
    found = []
    for cell in FEEDBACK_CELL.findall(page):
        failure = FAILURE.search(cell)
        if failure:
            verdict = GRADE_VERDICT.search(cell)
            found.append((verdict.group(1) if verdict else "", html.unescape(failure.group(1))))
    return found


def visible_cell_failed(batch, student_id) -> bool:
    """Whether any visible check cell (core: `run_visible_test(`; parts two and three:
    `run_visible_checks(`) shows a failure: an error, or a printed line that starts with ❌."""
    page = (batch["report"] / "feedback" / f"{student_id}.html").read_text(encoding="utf-8")
    cells = [
        c
        for c in FEEDBACK_CELL.findall(page)
        if "run_visible_test(" in c or "run_visible_checks(" in c
    ]
    assert cells, "no visible test cell on the feedback page"
    # part three's visible cell (optional) reports a failure as ❌ lines without raising
    printed_failure = re.compile(r"<pre>[^<]*^❌", re.M)
    return any(FAILURE.search(cell) or printed_failure.search(cell) for cell in cells)


def test_reference_solution_scores_full_marks_on_every_cell(graded_batch):
    row = graded_batch["rows"]["reference-solution"]
    assert row["status"] == "graded"
    for grade_id, points in grade_ids(graded_batch).items():
        assert float(row[grade_id]) == points, f"{grade_id}: {row[grade_id]}/{points}"
    counted = sum(p for g, p in grade_ids(graded_batch).items() if part_of(g).counted)
    assert float(row["score"]) == float(row["max_score"]) == counted


def test_a_moodle_file_under_the_learners_own_name_is_graded_under_the_roster_id(graded_batch):
    """张伟 handed in the reference as `第34章作业.ipynb`: the roster's number names the student."""
    row = graded_batch["rows"]["zhang-wei"]
    assert (row["status"], row["name"]) == ("graded", "张伟")
    assert re.fullmatch(r"张伟_\d+_assignsubmission_file_/第34章作业\.ipynb", row["source"])
    assert row["score"] == graded_batch["rows"]["reference-solution"]["score"]


def test_a_kernel_that_segfaults_costs_the_todo_it_died_in_and_no_other(graded_batch):
    row = graded_batch["rows"][BATCH_CRASH.name]
    assert row["status"] == "graded" and f"TODO {BATCH_CRASH.todo}" in row["reason"], row
    lost = lost_checks(row, graded_batch["release"])
    assert lost and {todo_number(g) for g in lost} == {BATCH_CRASH.todo}, sorted(lost)


def test_untouched_release_scores_zero_without_crashing_the_grader(graded_batch):
    row = graded_batch["rows"]["untouched-release"]
    assert row["status"] == "graded" and float(row["score"]) == 0


def test_catalogue_has_at_least_15_core_mistakes():
    assert (
        len(
            [
                m
                for m in MISTAKES
                if any(g.startswith(f"test_todo{i}_") for g in m.loses for i in range(1, 9))
            ]
        )
        >= 15
    )
    assert len({m.name for m in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_mistake_loses_points_exactly_on_the_checks_it_breaks(graded_batch, mistake):
    """Graded in its pack (`tests/fixtures/packing.py`): the pack loses exactly the union of its
    mistakes' checks, so this mistake loses its own and leaks into no other cell."""
    pack = graded_batch["pack_of"][mistake.name]
    row = graded_batch["rows"][pack.name]
    assert row["status"] == "graded"
    lost = lost_checks(row, graded_batch["release"])
    assert set(mistake.loses) <= lost, f"lost {sorted(lost)}, expected {sorted(mistake.loses)}"
    others = [m.name for m in pack.mistakes if m is not mistake]
    assert lost == pack.loses, (
        f"{pack.name} ({mistake.name} with {others}) lost {sorted(lost)}, "
        f"expected {sorted(pack.loses)}"
    )
    if not pack.loses:  # correct answers written another way
        assert float(row["score"]) == float(row["max_score"])


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_first_failure_message_names_the_cause(graded_batch, mistake):
    """The first of this mistake's failing cells, on its pack's page, names the cause."""
    if mistake.loses and not mistake.cause:
        pytest.skip("no cause words catalogued for this mistake yet")
    pack = graded_batch["pack_of"][mistake.name]
    graded = [(g, text) for g, text in feedback_failures(graded_batch, pack.name) if g]
    mine = [(g, text) for g, text in graded if g in mistake.loses]
    if not mistake.loses:
        assert {g for g, _ in graded} <= pack.loses
        return
    first_id, first = mine[0]
    assert first_id == next(g for g in grade_ids(graded_batch) if g in mistake.loses), first_id
    for word in mistake.cause:
        assert word in first, f"the first message lacks {word!r}: {first}"


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_visible_checks_catch_the_mistakes_they_are_meant_to(graded_batch, mistake):
    """A pack's mistakes agree on `visible`: none of them trips a visible cell, or the pack does."""
    if mistake.loses and not mistake.cause:
        pytest.skip("catalogue entry not yet reviewed for its visible checks")
    pack = graded_batch["pack_of"][mistake.name]
    caught = visible_cell_failed(graded_batch, pack.name)
    assert caught == mistake.visible, f"the visible cell {'failed' if caught else 'passed'}"


def test_the_real_batch_grades_every_mistake_in_fewer_notebooks(graded_batch):
    packs = set(graded_batch["pack_of"].values())
    assert sorted(m.name for p in packs for m in p.mistakes) == sorted(m.name for m in MISTAKES)
    assert len(packs) * 3 < len(MISTAKES)


def test_visible_checks_pass_on_the_reference_and_ask_for_the_todos_on_the_release(graded_batch):
    assert not visible_cell_failed(graded_batch, "reference-solution")
    untouched = [text for g, text in feedback_failures(graded_batch, "untouched-release") if not g]
    assert "NotImplementedError: 请先完成 TODO 1" in untouched[0]


def test_a_failing_cell_shows_the_learner_where_and_which_line_raised(graded_batch):
    """Graded kernels print plain tracebacks (sandbox/kernel_setup.KERNEL_IPYTHON_CONFIG, for speed): the
    page must still give each frame's cell, line number and code, and no terminal colours."""
    untouched = [text for g, text in feedback_failures(graded_batch, "untouched-release") if not g]
    first = untouched[0]
    assert re.search(r"Cell In\[\d+\], line \d+", first), first
    assert "run_visible_test(test_prefix_cache_manager" in first, first
    assert "\x1b[" not in first


@pytest.mark.parametrize("todos", UNFINISHED_PACKS, ids=unfinished_name)
def test_unfinished_todos_cost_their_own_checks_and_no_other(graded_batch, todos):
    row = graded_batch["rows"][unfinished_name(todos)]
    assert row["status"] == "graded"
    lost = lost_checks(row, graded_batch["release"])
    own = {g for g in grade_ids(graded_batch) if todo_number(g) in todos}
    assert lost == own, f"lost {sorted(lost)}, expected {sorted(own)}"
    assert all(float(row[g]) == 0 for g in own)


def test_grades_csv_has_the_fixed_columns_then_points_per_todo(graded_batch):
    header = (
        (graded_batch["report"] / "grades.csv")
        .read_text(encoding="utf-8-sig")
        .splitlines()[0]
        .split(",")
    )
    cells = list(grade_ids(graded_batch))
    todos = [f"todo{n}" for n in sorted({todo_number(g) for g in cells})]
    fixed = ["student_id", "name", "score", "max_score", "status", "late", "source"]
    assert header[:7] == fixed  # `name`: the batch has a roster
    parts_end = 7 + len(PARTS)
    assert header[7:parts_end] == [part.key for part in PARTS]
    assert header[parts_end:-2] == todos + cells and header[-2:] == ["reason", "repairs"]
    packs = set(graded_batch["pack_of"].values())
    graded = [i for i, row in graded_batch["rows"].items() if row["status"] == "graded"]
    assert len(graded) == len(packs) + 4 + len(UNFINISHED_PACKS)  # + the crash, zhang-wei
    missing = [i for i, row in graded_batch["rows"].items() if row["status"] == "missing"]
    assert sorted(missing) == sorted(BATCH_ABSENT)
    assert graded_batch["rows"][BATCH_BROKEN]["status"] == "invalid_json"
    assert len(graded_batch["rows"]) == len(graded) + len(missing) + 1


def test_feedback_exists_for_everyone_and_never_shows_hidden_tests(graded_batch):
    for student_id in set(graded_batch["rows"]) - set(BATCH_ABSENT):
        page = (graded_batch["report"] / "feedback" / f"{student_id}.html").read_text(
            encoding="utf-8"
        )
        secrets = ("_hidden_todo", "HIDDEN TESTS", "rng = random.Random(34", "class Probe")
        for secret in secrets + ("_hidden_code", "_hidden_scope", "def _oracle_methods"):
            assert secret not in page, f"{student_id}'s feedback shows {secret!r}"
    pack = graded_batch["pack_of"]["stats-integer-division"]
    page = (graded_batch["report"] / "feedback" / f"{pack.name}.html").read_text(encoding="utf-8")
    assert "TODO 7" in page, "a failing cell must say which TODO is wrong"


@pytest.fixture(scope="module")
def first_grading(fresh_build, tmp_path_factory):
    """alice and 张三, both the reference solution, graded under a TMPDIR over 100 characters
    long (test_a_long_tmpdir...), into the report test_regrading... grades alice again in."""
    root = tmp_path_factory.mktemp("first-grading")
    # A Unix socket's path holds 107 bytes, and the kernels' IPC sockets sit a few folders below
    # the grader's temporary folder: with this TMPDIR every submission used to fail.
    long_tmp = root / ("a-rather-deep-folder-" * 4)
    long_tmp.mkdir()
    release = read_nb(fresh_build / "notebooks" / "ch34_prefix_cache.ipynb")
    solutions = read_nb(fresh_build / "solutions" / "ch34_prefix_cache.ipynb")
    first = root / "first"
    first.mkdir()
    nbformat.write(filled_submission(release, solutions), first / "alice.ipynb")
    nbformat.write(filled_submission(release, solutions), first / "张三.ipynb")
    course = fresh_build / "build" / "grading-course"
    run, rows = autograde(first, root / "report", course, env={"TMPDIR": str(long_tmp)})
    return {"run": run, "rows": rows, "report": root / "report", "long_tmp": long_tmp}


def test_regrading_a_student_replaces_the_old_grade_and_keeps_the_others(
    first_grading, fresh_build, tmp_path
):
    course = fresh_build / "build" / "grading-course"
    report = tmp_path / "report"
    shutil.copytree(first_grading["report"], report)
    second = tmp_path / "second"
    second.mkdir()
    (second / "alice.ipynb").write_text("")  # alice hands in an empty file the second time
    rows = first_grading["rows"]
    assert rows["alice"]["status"] == "graded" and float(rows["alice"]["score"]) > 0
    assert rows["张三"]["status"] == "graded" and float(rows["张三"]["score"]) > 0
    # A status that is no grade replaces a grade only when asked (test_grading_accidents.py
    # shows the earlier grade kept without the flag).
    run, rows = autograde(second, report, course, extra=["--replace-graded"])
    assert run.returncode == 0, run.stderr
    assert rows["alice"]["status"] == "empty_file" and float(rows["alice"]["score"]) == 0
    assert rows["张三"]["score"] == rows["张三"]["max_score"], (
        "a student not in the batch keeps the grade"
    )
    assert (report / "feedback" / "alice.html").read_text(encoding="utf-8").count("empty_file") >= 1


def test_a_long_tmpdir_does_not_break_the_kernels_sockets(first_grading):
    assert len(str(first_grading["long_tmp"])) > 100
    run, rows = first_grading["run"], first_grading["rows"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert rows["alice"]["status"] == "graded", rows["alice"]["reason"]
    assert rows["alice"]["score"] == rows["alice"]["max_score"]


def test_autograde_refuses_a_missing_folder_with_a_usage_hint(tmp_path):

    run = subprocess.run(
        [sys.executable, "-m", "grader.kit.autograde", str(tmp_path / "nowhere")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "SUBMISSIONS=" in run.stderr


def test_autograde_without_a_built_course_says_to_run_make_and_writes_nothing(tmp_path):
    write(tmp_path / "export", "2023001.ipynb", NB)
    run = subprocess.run(
        [sys.executable, "-m", "grader.kit.autograde", str(tmp_path / "export"),
         "--course", str(tmp_path / "no-course"), "--report", str(tmp_path / "report")],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 1 and "run `make` first" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "report").exists()
