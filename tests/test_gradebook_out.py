"""Grades out: grades.csv for Excel and Python, overrides, summary.html, LMS files, nbgrader's gradebook.

One small batch (a full solution, a partly wrong one, a file that is not JSON) is graded once with
the real kit; tests that regrade work on a copy of its report.
"""

import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader.kit.authoring.build import source_notebook
from grader.kit.authoring.examples import PARTLY_WRONG_EDITS, filled_submission
from grader.kit.authoring.nbsource import (
    ASSIGNMENT,
    NOTEBOOK_NAME,
    PARTS,
    nbgrader_meta,
    part_of,
    read_source,
    todo_number,
)
from grader.kit.errors import BadOverrides
from grader.kit.grading.outcome import Outcome
from grader.kit.report import gradebook
from grader.kit.report.grades import grade_columns, max_score_warning, read_overrides
from tests.conftest import (
    ALL_POINTS,
    ALL_TODOS,
    COUNTED_POINTS,
    SOURCE_POINTS,
    autograde,
    grade_in_process,
    read_nb,
)

BOM = b"\xef\xbb\xbf"
# Each grade cell's points and each TODO's, as the source declares them (nothing pinned here).
CELL_POINTS = {
    nbgrader_meta(c)["grade_id"]: nbgrader_meta(c)["points"]
    for c in read_source().cells
    if nbgrader_meta(c).get("grade")
}
TODO_POINTS = {n: sum(p for g, p in CELL_POINTS.items() if todo_number(g) == n) for n in ALL_TODOS}
ROSTER = (  # wangwu sent no file
    "student_id,name,lms_user_id,email\n张三,张三,4711,zhangsan@example.edu\n"
    "lisi,李四,4712,lisi@example.edu\nbroken,,,\nwangwu,王五,4713,wangwu@example.edu\n"
)


@pytest.fixture(scope="module")
def batch(fresh_build, tmp_path_factory):
    """张三 (the reference solution), lisi (slips in TODO 2 and 7) and `broken` (not JSON), graded."""
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    root = tmp_path_factory.mktemp("gradebook-out")
    submissions = root / "submissions"
    submissions.mkdir()
    nbformat.write(filled_submission(release, solutions), submissions / "张三.ipynb")
    nbformat.write(
        filled_submission(release, solutions, PARTLY_WRONG_EDITS), submissions / "lisi.ipynb"
    )
    (submissions / "broken.ipynb").write_text("{not json")
    (root / "roster.csv").write_text(ROSTER, encoding="utf-8-sig")
    course = fresh_build / "build" / "grading-course"
    report = root / "report"
    run, rows = autograde(submissions, report, course, extra=["--roster", str(root / "roster.csv")])
    assert run.returncode == 0, run.stderr[-3000:]
    return {
        "run": run,
        "rows": rows,
        "report": report,
        "course": course,
        "release": release,
        "solutions": solutions,
        "root": root,
    }


def fmt_points(value: float) -> str:
    return f"{value:g}"


def copy_report(batch, tmp_path):
    report = tmp_path / "report"
    shutil.copytree(batch["report"], report)
    return report


def one_submission(batch, tmp_path, name, nb=None):
    """A folder holding one submission `name`.ipynb: the partly wrong notebook, or `nb`."""
    folder = tmp_path / f"only-{name}"
    folder.mkdir()
    if nb is None:
        nb = filled_submission(batch["release"], batch["solutions"], PARTLY_WRONG_EDITS)
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


def broken_only(tmp_path):
    """A batch needing no kernel: one file that is not JSON."""
    folder = tmp_path / "only-broken"
    folder.mkdir(exist_ok=True)
    (folder / "broken.ipynb").write_text("{not json")
    return folder


def test_grades_csv_starts_with_a_bom_and_round_trips_chinese_ids_through_csv(batch):
    raw = (batch["report"] / "grades.csv").read_bytes()
    assert raw[:3] == BOM, "Excel reads BOM-less UTF-8 as GBK on a Chinese-locale Windows"
    assert raw[3:18] == b"student_id,name"
    assert "张三".encode() in raw and "张三".encode("gbk") not in raw
    text = raw.decode("utf-8-sig")
    rows = list(csv.DictReader(text.splitlines()))
    assert {row["student_id"] for row in rows} == {"张三", "lisi", "broken", "wangwu"}
    # the stdlib reader round-trips the file unchanged
    lines = list(csv.reader(text.splitlines()))
    rewritten = "\r\n".join(",".join(csv_field(f) for f in line) for line in lines) + "\r\n"
    assert rewritten == text


def csv_field(value):
    return f'"{value.replace(chr(34), chr(34) * 2)}"' if re.search(r'[",\r\n]', value) else value


def test_grades_csv_columns_are_totals_parts_todos_cells_then_reason(batch):
    columns = grade_columns(batch["release"])
    todos = sorted({todo_number(g) for g, _ in columns})
    header = next(csv.reader((batch["report"] / "grades.csv").open(encoding="utf-8-sig")))
    assert header == (
        ["student_id", "name", "score", "max_score", "status", "late", "source"]
        + [part.key for part in PARTS]
        + [f"todo{n}" for n in todos]
        + [g for g, _ in columns]
        + ["reason", "repairs"]
    )
    assert [part.key for part in PARTS] == ["core", "kv", "block", "sched", "engine"]
    assert todos == ALL_TODOS


def test_subtotals_equal_the_sum_of_their_cells_and_score_leaves_the_challenge_out(batch):
    columns = grade_columns(batch["release"])
    counted_points = sum(p for g, p in columns if part_of(g).counted)
    for student, row in batch["rows"].items():
        if row["status"] == "missing":  # wangwu: no file, no points
            assert row["score"] == "" and row["max_score"] == f"{counted_points:g}"
            continue
        for number in ALL_TODOS:
            cells = [g for g, _ in columns if todo_number(g) == number]
            assert float(row[f"todo{number}"]) == sum(float(row[g]) for g in cells), student
        for part in PARTS:
            assert float(row[part.key]) == sum(float(row[f"todo{n}"]) for n in part.todos)
        assert float(row["score"]) == sum(float(row[p.key]) for p in PARTS if p.counted)
        assert float(row["max_score"]) == counted_points
    assert (
        batch["rows"]["张三"]["score"]
        == batch["rows"]["张三"]["max_score"]
        == f"{COUNTED_POINTS:g}"
    )
    assert float(batch["rows"]["张三"]["block"]) == SOURCE_POINTS["block"]
    lisi = batch["rows"]["lisi"]
    assert (
        float(lisi["todo2"]) < TODO_POINTS[2]
        and float(lisi["todo7"]) < TODO_POINTS[7]
        and float(lisi["score"]) < COUNTED_POINTS
    )


LATE_SCORE = f"{COUNTED_POINTS - 5:g}"  # 张三's full marks, less 5 for a day late


def test_overrides_and_a_hand_added_column_survive_regrades(batch, tmp_path):
    report = copy_report(batch, tmp_path)
    grades = report / "grades.csv"
    # The instructor adds a column after `status` in a spreadsheet, and writes overrides.
    lines = list(csv.reader(grades.open(encoding="utf-8-sig")))
    at = lines[0].index("status") + 1
    for line in lines:
        line.insert(at, "bonus" if line is lines[0] else ("3" if line[0] == "张三" else ""))
    with grades.open("w", newline="", encoding="utf-8-sig") as handle:
        csv.writer(handle).writerows(lines)
    (report / "overrides.csv").write_text(
        "student_id,column,value,note\n"
        f"lisi,test_todo2_tail,{CELL_POINTS['test_todo2_tail']},人工复核：尾块问题只是打印格式\n"
        f"张三,score,{LATE_SCORE},迟交一天，扣 5 分\n",
        encoding="utf-8",
    )
    lisi_before = batch["rows"]["lisi"]
    run, rows = autograde(one_submission(batch, tmp_path, "lisi"), report, batch["course"])
    assert run.returncode == 0, run.stderr[-3000:]
    header = next(csv.reader(grades.open(encoding="utf-8-sig")))
    assert header[at] == "bonus" and header[at - 1] == "status"
    assert rows["张三"]["bonus"] == "3" and rows["lisi"]["bonus"] == ""
    # a grade cell's override sets its TODO, its part and the score
    lisi = rows["lisi"]
    assert lisi["test_todo2_tail"] == fmt_points(CELL_POINTS["test_todo2_tail"])
    assert lisi["todo2"] == fmt_points(TODO_POINTS[2])
    gained = TODO_POINTS[2] - float(lisi_before["todo2"])
    assert float(lisi["core"]) == float(lisi_before["core"]) + gained
    assert float(lisi["score"]) == float(lisi_before["score"]) + gained
    # a student not in this batch gets the override too; the page of one graded shows it
    assert rows["张三"]["score"] == LATE_SCORE
    assert rows["张三"]["core"] == fmt_points(SOURCE_POINTS["core"])
    page = (report / "feedback" / "lisi.html").read_text(encoding="utf-8")
    assert "老师的调整" in page and "人工复核：尾块问题只是打印格式" in page
    # the page shows the final numbers, the graded ones beside them; so does the console
    final, graded = lisi["score"], fmt_points(float(lisi_before["score"]))
    assert f"lisi：{final} / {lisi['max_score']}（自动评分 {graded}）" in page
    assert re.search(rf"lisi 李四\s+{final}\s+{graded}\s+graded\s+overridden", run.stdout)
    assert page.index("老师的调整") < page.index("逐格结果"), "near the top"
    # the LMS files carry the overridden score
    canvas = list(csv.DictReader((report / "canvas.csv").open(encoding="utf-8-sig")))
    assert {r["SIS User ID"]: r[ASSIGNMENT] for r in canvas[1:]}["张三"] == LATE_SCORE
    # taking the line out restores the graded value, though 张三 is not graded again
    (report / "overrides.csv").write_text(
        f"student_id,column,value,note\nlisi,test_todo2_tail,{CELL_POINTS['test_todo2_tail']},人工复核\n",
        encoding="utf-8",
    )
    _, rows = grade_in_process(broken_only(tmp_path), report, batch["course"])
    assert rows["张三"]["score"] == f"{COUNTED_POINTS:g}" and rows["张三"]["bonus"] == "3"
    assert rows["lisi"]["todo2"] == fmt_points(TODO_POINTS[2])


@pytest.mark.parametrize(
    "line, says, command_line",
    [
        ("nobody,score,1,x", "no student 'nobody'", True),
        ("lisi,todo99,1,x", "'todo99' is not a column", False),
        ("lisi,score,ten,x", "'ten' is not a number", False),
        ("lisi,score,9999,x", "value 9999 is outside 0..", False),
    ],
    ids=["unknown-student", "unknown-column", "not-a-number", "above-the-maximum"],
)
def test_a_bad_overrides_line_stops_before_grading_and_names_the_line(
    batch, tmp_path, line, says, command_line
):
    # One line through the command line (its message, its exit status); the others straight
    # through grade_all, which reads overrides.csv before it grades anyone.
    report = copy_report(batch, tmp_path)
    before = (report / "grades.csv").read_bytes()
    (report / "overrides.csv").write_text(
        f"student_id,column,value,note\nlisi,score,100,ok\n{line}\n", encoding="utf-8"
    )
    submissions = one_submission(batch, tmp_path, "lisi")
    if command_line:
        run, _ = autograde(submissions, report, batch["course"])
        assert run.returncode != 0
        said = run.stderr
    else:
        with pytest.raises(BadOverrides) as stopped:
            grade_in_process(submissions, report, batch["course"])
        said = str(stopped.value)
    assert "overrides.csv, line 3" in said and says in said, said[-2000:]
    assert "/1]" not in said, "no submission was graded"
    assert (report / "grades.csv").read_bytes() == before, "nothing graded is lost"


def test_read_overrides_refuses_a_second_line_for_the_same_cell(tmp_path):
    path = tmp_path / "overrides.csv"
    path.write_text("student_id,column,value,note\na,score,1,\na,score,2,\n", encoding="utf-8-sig")
    with pytest.raises(BadOverrides, match="line 3.*already overridden on line 2"):
        read_overrides(path, {"a"}, ["score"])


def test_rows_graded_under_different_maximums_warn_on_stderr_and_in_the_summary(batch, tmp_path):
    report = copy_report(batch, tmp_path)
    as_graded = report / ".grades-as-graded.json"
    rows = json.loads(as_graded.read_text(encoding="utf-8"))
    rows["张三"]["max_score"] = "170"  # graded before the points in the source changed
    as_graded.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    said, _ = grade_in_process(broken_only(tmp_path), report, batch["course"])
    assert "different maximum scores" in said and "max_score 170: 1 rows (张三)" in said
    summary = (report / "summary.html").read_text(encoding="utf-8")
    assert "different maximum scores" in summary and 'class="warning"' in summary
    assert max_score_warning([{"student_id": "a", "max_score": "130"}]) == ""


def test_canvas_and_moodle_files_follow_their_import_layouts_with_roster_ids(batch):
    canvas = list(csv.reader((batch["report"] / "canvas.csv").open(encoding="utf-8-sig")))
    assert (batch["report"] / "canvas.csv").read_bytes()[:3] == BOM
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", ASSIGNMENT]
    assert canvas[1] == ["Points Possible", "", "", "", "", f"{COUNTED_POINTS:g}"]
    by_id = {line[2]: line for line in canvas[2:]}
    assert by_id["张三"] == ["张三", "4711", "张三", "", "", f"{COUNTED_POINTS:g}"]
    assert by_id["broken"][:2] == ["broken", ""] and by_id["broken"][5] == "0"
    moodle = list(csv.DictReader((batch["report"] / "moodle.csv").open(encoding="utf-8-sig")))
    # No "User ID": Moodle's `userid` is the site's user id, not the assignment's participant no.
    assert list(moodle[0]) == ["ID number", "Email address", "Full name", ASSIGNMENT, "Feedback"]
    lisi = next(r for r in moodle if r["ID number"] == "lisi")
    assert lisi["Email address"] == "lisi@example.edu" and lisi["Full name"] == "李四"
    assert lisi[ASSIGNMENT] == batch["rows"]["lisi"]["score"] and "不计入总分" in lisi["Feedback"]
    assert "not in the roster" not in batch["run"].stderr
    # The roster's student with no file: a row with no grade, and a word why, in both files.
    assert by_id["wangwu"] == ["王五", "4713", "wangwu", "", "", ""]
    wangwu = next(r for r in moodle if r["ID number"] == "wangwu")
    assert wangwu[ASSIGNMENT] == "" and "没有收到提交" in wangwu["Feedback"]
    assert re.search(r"1 row\(s\) exported with NO grade \(1 missing\): wangwu", batch["run"].stderr)


def test_summary_shows_pass_rates_a_plot_and_ungradable_files_offline(batch, tmp_path):
    page = (batch["report"] / "summary.html").read_text(encoding="utf-8")
    assert "<svg" in page and "</svg>" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "no network"
    text = html.unescape(re.sub(r"<[^>]+>", " ", page.split("<svg")[0] + page.split("</svg>")[-1]))
    todo2 = rf"todo2\s+核心：PrefixCacheManager\s+{TODO_POINTS[2]}\s+1/2\s+50%"
    assert re.search(todo2, text), text[:2000]
    basic = CELL_POINTS["test_todo1_basic"]
    assert re.search(rf"TODO 1 · 基本\s+随机 list 输入.*?\s+{basic}\s+2/2\s+100%", text)
    assert re.search(r"wangwu\s+王五\s+—\s+missing", text), "every roster student has a row"
    assert re.search(r"invalid_json\s+1\s+broken", text)
    shot = tmp_path / "summary.png"
    subprocess.run(
        [
            shutil.which("chromium") or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            (batch["report"] / "summary.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 20_000


def nbgrader_env():
    bin_dir = os.path.dirname(sys.executable)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_nbgraders_gradebook_holds_every_graded_submission_and_export_reads_it(batch):
    course = batch["report"] / "nbgrader"
    columns = grade_columns(batch["release"])
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "ch34") as gradebook:
        submitted = {s.student.id: s for s in gradebook.assignment_submissions(ASSIGNMENT)}
        assert set(submitted) == {"张三", "lisi"}, "`broken` has nothing to review"
        assert {s.id for s in gradebook.students} >= {"张三", "lisi", "broken"}
        for student in ("张三", "lisi"):
            notebook = gradebook.find_submission_notebook(NOTEBOOK_NAME[:-6], ASSIGNMENT, student)
            scores = {grade.name: grade.score for grade in notebook.grades}
            assert scores == {g: float(batch["rows"][student][g]) for g, _ in columns}
            assert not any(grade.needs_manual_grade for grade in notebook.grades)
    for student in ("张三", "lisi"):
        assert (course / "autograded" / student / ASSIGNMENT / NOTEBOOK_NAME).exists()
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", "export", "--to", "exported.csv"],
        cwd=course,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    exported = {
        r["student_id"]: r for r in csv.DictReader((course / "exported.csv").open(encoding="utf-8"))
    }
    for student in ("张三", "lisi"):
        row = batch["rows"][student]
        assert float(exported[student]["raw_score"]) == sum(float(row[g]) for g, _ in columns)
        assert float(exported[student]["max_score"]) == sum(p for _, p in columns)


def test_a_glob_character_student_id_goes_into_nbgraders_gradebook(batch, tmp_path):
    report = copy_report(batch, tmp_path)
    autograded = report / "nbgrader" / "autograded" / "张三" / ASSIGNMENT / NOTEBOOK_NAME
    scores = {g: (p, p) for g, p in grade_columns(batch["release"])}
    student = "Wang Wu [final]*?"
    gradebook.keep_notebook(report, student, autograded.read_bytes())
    held = gradebook.record(report, [Outcome(student, "graded", scores=scores)])
    assert held == 3
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", "export", "--to", "exported.csv"],
        cwd=report / "nbgrader",
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    exported = list(csv.DictReader((report / "nbgrader" / "exported.csv").open(encoding="utf-8")))
    assert [float(r["raw_score"]) for r in exported if r["student_id"] == student] == [
        float(ALL_POINTS)
    ]


def test_regrading_replaces_a_students_scores_in_nbgraders_gradebook(batch, tmp_path):
    report = copy_report(batch, tmp_path)
    override = CELL_POINTS["test_todo1_basic"] / 2  # any value the cell can hold, not its full marks
    (report / "overrides.csv").write_text(
        f"student_id,column,value,note\n张三,test_todo1_basic,{override:g},抄袭嫌疑，面谈后定\n",
        encoding="utf-8",
    )
    run, rows = autograde(one_submission(batch, tmp_path, "张三"), report, batch["course"])
    assert run.returncode == 0, run.stderr[-3000:]
    with Gradebook(f"sqlite:///{report / 'nbgrader' / 'gradebook.db'}", "ch34") as gradebook:
        assert len(gradebook.assignment_submissions(ASSIGNMENT)) == 2
        notebook = gradebook.find_submission_notebook(NOTEBOOK_NAME[:-6], ASSIGNMENT, "张三")
        grades = {grade.name: grade for grade in notebook.grades}
        assert grades["test_todo2_tail"].score == float(rows["张三"]["test_todo2_tail"])
        assert grades["test_todo2_tail"].score < 4, "the partly wrong notebook's score"
        assert grades["test_todo1_basic"].manual_score == override == grades["test_todo1_basic"].score


def hidden_test_lines():
    """Every line of a hidden block as graded (the inlined checks), long enough to mean something."""
    lines = set()
    for cell in source_notebook(for_release=True).cells:
        for block in re.findall(
            r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S
        ):
            lines |= {line.strip() for line in block.splitlines() if len(line.strip()) >= 12}
    return lines


def test_nbgraders_generate_feedback_shows_no_hidden_test_line(batch):
    course = batch["report"] / "nbgrader"
    autograded = nbformat.read(
        course / "autograded" / "lisi" / ASSIGNMENT / NOTEBOOK_NAME, as_version=4
    )
    # Lines the learner has anyway (their own code, the visible tests) are no secret; the
    # autograded notebook is no guide: nbgrader restores the grade cells, hidden tests and all.
    handed_in = filled_submission(batch["release"], batch["solutions"], PARTLY_WRONG_EDITS)
    own = "\n".join(cell.source for cell in handed_in.cells)
    secret = {line for line in hidden_test_lines() if line not in own}
    # The case this test guards: nbgrader restores the grade cells, hidden checks and all, into
    # the autograded notebook that generate_feedback renders.
    restored = "\n".join(cell.source for cell in autograded.cells)
    assert any(line in restored for line in secret), "the autograded notebook holds hidden lines"
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--force"],
        cwd=course,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    pages = sorted((course / "feedback").glob(f"*/{ASSIGNMENT}/*.html"))
    assert {page.parts[-3] for page in pages} == {"张三", "lisi"}
    for page in pages:
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
        shown = sorted(line for line in secret if line in text)
        assert not shown, f"{page.parts[-3]}'s nbgrader feedback shows hidden lines: {shown[:5]}"
        assert "HIDDEN TESTS" not in text


def test_overrides_saved_by_a_chinese_excel_in_gbk_are_read(tmp_path):
    path = tmp_path / "overrides.csv"
    path.write_bytes("student_id,column,value,note\r\n张三,todo2,10.5,人工复核\r\n".encode("gbk"))
    assert read_overrides(path, {"张三"}, ["todo2"]) == {
        "张三": [{"column": "todo2", "value": "10.5", "note": "人工复核", "line": 2}]
    }
