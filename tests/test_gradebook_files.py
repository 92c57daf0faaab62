"""The files for the LMS importers, overrides' bounds, final numbers on pages and in the summary.

No kernel and no nbgrader run: the functions that write these files are given grades.csv-like
rows. `tests/test_gradebook_out.py` grades a real batch and checks the same files end to end.
"""

import csv
import html
import re

import nbformat
import pytest

from grader.kit.authoring.nbsource import ASSIGNMENT, PARTS
from grader.kit.errors import BadOverrides
from grader.kit.grading.outcome import Outcome
from grader.kit.intake.inventory import discover
from grader.kit.report import feedback, lms, summary
from grader.kit.report.grades import (
    column_maxima,
    fmt,
    part_columns,
    read_overrides,
    summary_table,
)
from grader.kit.report.writer import stale_ids
from tests.test_lms_exports import NOTEBOOK, canvas_file, moodle_path, moodle_prefix, write

# One grade cell per part: enough to compute every subtotal without the real notebook.
COLUMNS = [(f"test_todo{part.todos[0]}_basic", 10.0) for part in PARTS]
COUNTED = sum(p for (g, p), part in zip(COLUMNS, PARTS) if part.counted)


def row(student_id, score, source="", status="graded", **extra):
    values = {"student_id": student_id, "score": str(score), "max_score": fmt(COUNTED)}
    return values | {"status": status, "source": source, "late": "no"} | extra


def settings(tmp_path, title="", number=""):
    return write(
        tmp_path,
        "course.toml",
        f'github_repo = ""\ncanvas_assignment_title = "{title}"\ncanvas_assignment_id = "{number}"\n',
    )


def read(path):
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.reader(handle))


def test_canvas_csv_titles_the_grade_column_as_canvas_exports_it(tmp_path):
    people = {"2023001": {"name": "Li Si", "lms_user_id": "4711", "email": ""}}
    rows = [row("2023001", 7)]
    lines = lms.write_lms_files(tmp_path, rows, people, settings(tmp_path, "第34章作业", "345"))
    canvas = read(tmp_path / "canvas.csv")
    # gradebook_importer.rb parse_assignments: "Title (id)" finds the assignment by its id.
    assert canvas[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "第34章作业 (345)",
    ]
    assert canvas[2] == ["Li Si", "4711", "2023001", "", "", "7"]
    assert not any("creates a new one" in line for line in lines)
    lines = lms.write_lms_files(tmp_path, rows, people, settings(tmp_path))
    assert read(tmp_path / "canvas.csv")[0][-1] == ASSIGNMENT
    assert any("canvas_assignment_title" in line for line in lines)


def test_canvas_csv_without_a_roster_fills_no_id_and_keeps_lms_numbers_out_of_sis(tmp_path):
    canvas_source = canvas_file("li, si", 123457, 9, NOTEBOOK)
    rows = [row("123457", 5, canvas_source), row("2023003", 6, "2023003.ipynb")]
    lines = lms.write_lms_files(tmp_path, rows, {}, settings(tmp_path, "HW", "1"))
    canvas = read(tmp_path / "canvas.csv")
    assert canvas[2:] == [["2023003", "", "2023003", "", "", "6"]]
    assert any("no ROSTER" in line and "lms_user_id" in line for line in lines)
    assert any("left out of canvas.csv" in line and "123457" in line for line in lines)


def test_moodle_csv_has_no_user_id_column_and_documents_its_mapping(tmp_path):
    people = {"2023001": {"name": "Li Si", "lms_user_id": "88", "email": "ls@example.edu"}}
    lms.write_lms_files(tmp_path, [row("2023001", 7)], people, settings(tmp_path))
    moodle = read(tmp_path / "moodle.csv")
    assert moodle[0] == ["ID number", "Email address", "Full name", ASSIGNMENT, "Feedback"]
    assert moodle[1][:4] == ["2023001", "ls@example.edu", "Li Si", "7"]
    assert "`ID number` to `useridnumber`" in lms.__doc__
    assert "`Email address` to `useremail`" in lms.__doc__


def test_a_moodle_export_gets_the_offline_grading_worksheet(tmp_path):
    blind = moodle_path(moodle_prefix("", 88, blind=True), NOTEBOOK)
    named = moodle_path(moodle_prefix("Wang Wu", 12347), NOTEBOOK)
    rows = [row("Participant_88", 9, blind), row("12347", 4, named, status="invalid_json")]
    lines = lms.write_lms_files(tmp_path, rows, {}, settings(tmp_path))
    sheet = read(tmp_path / lms.WORKSHEET)
    # importgradeslib.php: "Identifier", "Grade" and "Last modified (grade)" must be there.
    assert sheet[0] == [
        "Identifier",
        "Full name",
        "Grade",
        "Maximum grade",
        "Last modified (grade)",
        "Feedback comments",
    ]
    by_id = {line[0]: line for line in sheet[1:]}
    assert by_id["Participant 88"][2:4] == ["9", fmt(COUNTED)]
    assert (
        by_id["Participant 12347"][1] == "Wang Wu"
        and "未能正常评分" in by_id["Participant 12347"][5]
    )
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", by_id["Participant 88"][4])
    assert any("Upload grading worksheet" in line for line in lines)
    # Moodle's CSV import fails whole on one unknown user: participant numbers stay out of it.
    assert read(tmp_path / "moodle.csv")[1:] == []


def test_no_worksheet_for_an_export_that_is_not_moodles(tmp_path):
    lms.write_lms_files(tmp_path, [row("2023001", 7, "2023001.ipynb")], {}, settings(tmp_path))
    assert not (tmp_path / lms.WORKSHEET).exists()


@pytest.mark.parametrize(
    "column, value, ok",
    [
        ("score", "150", False),
        ("score", "-1", False),
        ("score", fmt(COUNTED), True),
        (PARTS[0].key, "11", False),
        (f"todo{PARTS[0].todos[0]}", "10", True),
        (COLUMNS[0][0], "10.5", False),
        ("bonus", "500", True),  # a column added by hand has no maximum
    ],
)
def test_overrides_are_bounded_by_the_columns_maximum(tmp_path, column, value, ok):
    path = write(tmp_path, "overrides.csv", f"student_id,column,value,note\na,{column},{value},x\n")
    maxima = column_maxima(COLUMNS)
    assert maxima["score"] == COUNTED and dict(part_columns(COLUMNS))[PARTS[0].key] == 10
    columns = ["score", "bonus", *maxima]
    if ok:
        assert read_overrides(path, {"a"}, columns, maxima)["a"][0]["value"] == fmt(float(value))
    else:
        with pytest.raises(
            BadOverrides, match=rf"line 2: value {re.escape(value)} is outside 0\.\."
        ):
            read_overrides(path, {"a"}, columns, maxima)


def page_text(text):
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


def test_a_feedback_page_shows_the_final_numbers_beside_the_graded_and_names_the_files():
    scores = {g: (0.0, p) for g, p in COLUMNS}
    final = {"score": "4", PARTS[0].key: "4", f"todo{PARTS[0].todos[0]}": "4"}
    overrides = [{"column": "score", "value": "4", "note": "人工复核"}]
    files = ("b/ch34_prefix_cache.ipynb", ["b/draft.ipynb"], "the one named like the assignment's")
    page = feedback.render(
        "lisi", nbformat.v4.new_notebook(), scores, overrides=overrides, final=final, files=files
    )
    text = re.sub(r"\s+", " ", page_text(page))
    assert f"lisi：4 / {fmt(COUNTED)}（自动评分 0）" in text
    assert "4 / 10（自动评分 0）" in text
    assert (
        "评分的文件： b/ch34_prefix_cache.ipynb" in text
        and "没有评分的文件： b/draft.ipynb" in text
    )
    plain = page_text(feedback.render("lisi", nbformat.v4.new_notebook(), scores))
    assert f"lisi：0 / {fmt(COUNTED)}" in plain and "自动评分" not in plain


def test_a_failure_page_shows_the_overridden_score():
    text = page_text(feedback.failure_page("x", "invalid_json", "", final={"score": "12"}))
    assert "老师调整后的得分：12（自动评分 0）" in text


def test_the_console_table_shows_the_final_score_and_the_graded_one():
    outcome = Outcome("lisi", "graded", scores={g: (1.0, p) for g, p in COLUMNS})
    graded = fmt(sum(1.0 for (_, _), part in zip(COLUMNS, PARTS) if part.counted))
    table = summary_table([outcome], {"lisi": {"score": "9"}})
    assert re.search(rf"lisi\s+9\s+{graded}\s+graded\s+overridden", table)
    assert re.search(rf"lisi\s+{graded}\s+graded", summary_table([outcome]))


def test_summary_lists_files_not_graded_missing_students_late_and_notes(tmp_path):
    export = tmp_path / "export"
    write(export, "2025001_张三.ipynb")
    write(export, "ch34 作业.ipynb")
    write(export, "readme.pdf")
    roster = write(tmp_path, "roster.csv", "student_id,name\n2025001,张三\n2025002,李四\n")
    rows = [row("2025001", 3, "2025001_张三.ipynb", late="yes")]
    with discover(export, roster=roster) as intake:
        summary.write_summary(tmp_path / "summary.html", rows, COLUMNS, intake=intake)
    text = page_text((tmp_path / "summary.html").read_text(encoding="utf-8"))
    assert "1 份迟交" in text
    assert re.search(r"student unknown\s+1\s+ch34 作业\.ipynb", text)
    assert re.search(r"not a notebook\s+1\s+readme\.pdf", text)
    assert "roster students with no submission: 1" in text and "2025002 李四" in text
    assert "notebook(s) of no known student are not graded" in text


def test_a_regrade_replaces_ids_of_files_now_read_under_another(tmp_path):
    export = tmp_path / "export"
    moodle = moodle_path(moodle_prefix("Wang Wu", 12347), NOTEBOOK)
    write(export, moodle)
    write(export, "ch34 作业.ipynb")
    report = tmp_path / "report"
    report.mkdir()
    # The previous run graded the Moodle folder under its notebook's name and the generic file
    # under "ch34 作业"; another export's student stays.
    with open(report / "grades.csv", "w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.writer(handle)
        writer.writerows(
            [
                ["student_id", "score", "source"],
                ["ch34_prefix_cache", "0", moodle],
                ["ch34 作业", "0", "ch34 作业.ipynb"],
                ["2023009", "5", "other/2023009.ipynb"],
                ["12347", "7", moodle],
            ]
        )
    with discover(export) as intake:
        stale = stale_ids(intake, report)
    assert set(stale) == {"ch34_prefix_cache", "ch34 作业"}
    assert "graded as 12347" in stale["ch34_prefix_cache"]
    assert "student unknown" in stale["ch34 作业"]
