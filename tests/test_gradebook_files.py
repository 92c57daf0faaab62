"""The files for the LMS importers, overrides' bounds, final numbers on pages and in the summary.

No kernel and no nbgrader run: the functions that write these files are given grades.csv-like
rows. `tests/test_gradebook_out.py` grades a real batch and checks the same files end to end.
"""

import csv
import html
import re
import zipfile

import nbformat
import pytest

from grader.kit.authoring.checkcells import check_label, check_titles, declarations, grade_cell
from grader.kit.authoring.nbsource import ASSIGNMENT, PARTS, part_of, todo_number
from grader.kit.errors import BadOverrides, RosterError, UnreadableCsv
from grader.kit.grading.outcome import Outcome
from grader.kit.intake.inventory import discover
from grader.kit.intake.roster import HEADER_NAMES, Roster
from grader.kit.paths import REPO_ROOT
from grader.kit.report import feedback, lms, summary
from grader.kit.report.grades import (
    absent_rows,
    apply_overrides,
    column_maxima,
    fmt,
    outcome_row,
    part_columns,
    read_grades,
    read_overrides,
    summary_table,
    write_grades,
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
    files = ("b/ch34_prefix_cache.ipynb", ["b/draft.ipynb"], "最新的那个（按文件时间）")
    page = feedback.render(
        "lisi", nbformat.v4.new_notebook(), scores, overrides=overrides, final=final, files=files
    )
    text = re.sub(r"\s+", " ", page_text(page))
    assert f"lisi：4 / {fmt(COUNTED)}（自动评分 0）" in text
    assert "4 / 10（自动评分 0）" in text
    assert (
        "评分的文件： b/ch34_prefix_cache.ipynb" in text
        and "没有评分的文件： b/draft.ipynb" in text
        and "评分的是最新的那个（按文件时间）" in text
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


def test_summary_says_which_roster_rows_share_a_name_and_what_tells_them_apart(tmp_path):
    export = tmp_path / "export"
    write(export, "王伟.ipynb")
    roster = write(tmp_path, "roster.csv", "学号,姓名\n2025011,王伟\n2025012,王伟\n")
    with discover(export, roster=roster) as intake:
        summary.write_summary(tmp_path / "summary.html", [], COLUMNS, intake=intake)
    text = page_text((tmp_path / "summary.html").read_text(encoding="utf-8"))
    assert "第 2 行（2025011，王伟）、第 3 行（2025012，王伟）" in text
    assert "<学号>_<姓名>.ipynb" in text


def test_summary_says_in_chinese_which_of_a_students_notebooks_was_graded(tmp_path):
    export = tmp_path / "export"
    write(export, "2025001_张三_草稿.ipynb", mtime=1_780_000_000)
    write(export, "2025001_张三_final.ipynb", mtime=1_780_090_000)
    roster = write(tmp_path, "roster.csv", "学号,姓名\n2025001,张三\n")
    with discover(export, roster=roster) as intake:
        summary.write_summary(tmp_path / "summary.html", [], COLUMNS, intake=intake)
    text = page_text((tmp_path / "summary.html").read_text(encoding="utf-8"))
    assert (
        "2025001: 交了 2 个 notebook，评 2025001_张三_final.ipynb：最新的那个（按文件时间）" in text
    )
    assert "没评：2025001_张三_草稿.ipynb" in text and "CHOICES=REPORT/choices.csv" in text
    assert re.search(r"同一学生的另一个 notebook.*\s1\s+2025001_张三_草稿\.ipynb", text)


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


def class_of_four(tmp_path):
    """A roster of four and an export with files of two: one notebook, one PDF."""
    export = tmp_path / "export"
    write(export, "2025001_张三.ipynb")
    write(export, moodle_path(moodle_prefix("Li Si", 12), "report.pdf"))
    people = write(
        tmp_path,
        "roster.csv",
        "学号,姓名,lms_user_id,邮箱\n2025001,张三,11,zs@example.edu\n2025002,李四,12,\n"
        "2025003,王五,13,ww@example.edu\n2025004,赵六,,\n",
    )
    return export, people


def test_grades_csv_has_a_name_column_and_a_row_for_every_roster_student(tmp_path):
    export, people = class_of_four(tmp_path)
    outcome = Outcome("2025001", "graded", scores={g: (1.0, p) for g, p in COLUMNS})
    with discover(export, roster=people) as intake:
        absent = absent_rows(intake, {"2025001"}, COLUMNS)
        rows = write_grades(
            tmp_path / "grades.csv", [outcome], COLUMNS, people=lms.people(intake.roster),
            absent=absent,
        )  # fmt: skip
    header = read(tmp_path / "grades.csv")[0]
    assert header[:3] == ["student_id", "name", "score"]
    by_id = {row["student_id"]: row for row in rows}
    assert {sid: (row["name"], row["status"]) for sid, row in by_id.items()} == {
        "2025001": ("张三", "graded"),
        "2025002": ("李四", "not_a_notebook"),  # the Moodle folder of participant 12: a PDF
        "2025003": ("王五", "missing"),
        "2025004": ("赵六", "missing"),
    }
    assert by_id["2025003"]["score"] == "" and by_id["2025002"]["score"] == "0"
    assert "report.pdf" in by_id["2025002"]["source"]
    # A later run grading 王五's late file, without the roster: the names stay, 王五 is graded,
    # and a row graded before is never turned back into `missing`.
    late = Outcome("2025003", "graded", scores={g: (2.0, p) for g, p in COLUMNS})
    again = {r["student_id"]: r for r in write_grades(tmp_path / "grades.csv", [late], COLUMNS)}
    assert again["2025003"]["status"] == "graded" and again["2025003"]["name"] == "王五"
    missing_again = absent_rows(intake, set(), COLUMNS)
    rows = write_grades(tmp_path / "grades.csv", [], COLUMNS, absent=missing_again)
    assert {r["student_id"]: r["status"] for r in rows}["2025003"] == "graded"
    table = summary_table([outcome], {"2025001": by_id["2025001"]})
    assert re.search(r"2025001 张三\s+\d+", table) and table.startswith("student_id name")


@pytest.mark.parametrize(
    "text, encoding",
    [
        ("学号,姓名,邮箱\n2025001,张三,zs@example.edu\n", "gbk"),  # Excel on a Chinese Windows
        ("2026 秋 第34章 学生名单,,\n序号,工号/学号,学生姓名\n1,2025001,张三\n", "utf-8-sig"),
        (
            "First name,Last name,ID number,Email address\nSan,Zhang,2025001,zs@example.edu\n",
            "utf-8",
        ),
        ("Student,ID,SIS User ID,SIS Login ID\nZhang San,4711,2025001,zhangsan\n", "utf-8"),
        ("Last Name,First Name,Username,Student ID\nZhang,San,zhangsan,2025001\n", "utf-8"),
        ("姓,名,学号\n张,三,2025001\n", "utf-8"),
    ],
    ids=["chinese-gbk", "title-line", "moodle", "canvas", "blackboard", "split-chinese-name"],
)
def test_rosters_headed_as_chinese_and_lms_exports_head_them_are_read(tmp_path, text, encoding):
    path = tmp_path / "roster.csv"
    path.write_bytes(text.encode(encoding))
    row = Roster.read(path).rows[0]
    assert row["student_id"] == "2025001"
    assert row["name"] in ("张三", "San Zhang", "Zhang San")
    if "Canvas" in text or "SIS" in text:
        assert (row["lms_user_id"], row["username"]) == ("4711", "zhangsan")


def test_the_accepted_roster_headers_are_listed_in_the_instructors_docs(tmp_path):
    docs = (REPO_ROOT / "docs" / "grading.md").read_text(encoding="utf-8")
    for field, names in HEADER_NAMES.items():
        for name in names:
            assert f"`{name}`" in docs, (field, name)
    with pytest.raises(RosterError, match="学号,姓名,邮箱"):
        Roster.read(write(tmp_path, "roster.csv", "序号,名单\n1,张三\n"))


@pytest.mark.parametrize("status", ["timeout", "flagged", "kernel_died", "grader_error", "missing"])
def test_no_score_is_exported_for_a_status_that_is_not_a_grade(tmp_path, status):
    people = {"2023001": {"name": "Li Si", "lms_user_id": "4711", "email": "ls@example.edu"}}
    rows = [row("2023001", 0 if status != "missing" else "", status=status)]
    lines = lms.write_lms_files(tmp_path, rows, people, settings(tmp_path), which="all")
    assert read(tmp_path / "canvas.csv")[2] == ["Li Si", "4711", "2023001", "", "", ""]
    moodle = read(tmp_path / "moodle.csv")[1]
    assert moodle[3] == "" and not re.search(r"自动评分 \d", moodle[4])
    assert ("未评分" in moodle[4]) if status == "missing" else (status in moodle[4])
    assert any("exported with NO grade" in line and f"1 {status}" in line for line in lines)
    # Reviewed and overridden, it is the instructor's grade: exported, and called so.
    overrides = {"2023001": [{"column": "score", "value": "88", "note": "复查无误"}]}
    rows = [row("2023001", 88, status=status)]
    lms.write_lms_files(
        tmp_path, rows, people, settings(tmp_path), overrides=overrides, which="all"
    )
    moodle = read(tmp_path / "moodle.csv")[1]
    assert moodle[3] == "88" and "老师评定：复查无误" in moodle[4] and "自动评分" not in moodle[4]
    assert read(tmp_path / "canvas.csv")[2][5] == "88"


def test_only_the_lms_files_of_the_exports_origin_are_written_unless_asked(tmp_path):
    people = {"2023001": {"name": "Li Si", "lms_user_id": "12347", "email": "ls@example.edu"}}
    named = moodle_path(moodle_prefix("Li Si", 12347), NOTEBOOK)
    lms.write_lms_files(tmp_path, [row("2023001", 7, "2023001.ipynb")], people, settings(tmp_path))
    assert (tmp_path / "canvas.csv").exists() and (tmp_path / "moodle.csv").exists()
    lines = lms.write_lms_files(tmp_path, [row("2023001", 7, named)], people, settings(tmp_path))
    assert not (tmp_path / "canvas.csv").exists(), "a Moodle class gets no canvas.csv"
    assert (tmp_path / "moodle.csv").exists() and (tmp_path / lms.WORKSHEET).exists()
    assert any("removed canvas.csv" in line for line in lines)
    lms.write_lms_files(
        tmp_path, [row("2023001", 7, named)], people, settings(tmp_path), which="all"
    )
    assert (tmp_path / "canvas.csv").exists()


def graded_notebook(scores, messages=None):
    """A notebook of grade cells with check headers; `messages` {grade_id: error} as outputs."""
    nb = nbformat.v4.new_notebook()
    for grade_id, (_, points) in scores.items():
        number = todo_number(grade_id)
        cell = nbformat.v4.new_code_cell(
            f"# TODO {number} · 检查{number}（{points:g} 分）：它查什么"
        )
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": points}
        if grade_id in (messages or {}):
            ename, evalue = messages[grade_id].split(": ", 1)
            cell.outputs = [
                nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])
            ]
        nb.cells.append(cell)
    return nb


def test_an_overridden_check_shows_the_teachers_value_not_a_red_failure():
    first = COLUMNS[0][0]
    scores = {g: (0.0, p) if g == first else (p, p) for g, p in COLUMNS}
    nb = graded_notebook(scores, {first: "AssertionError: TODO 1: 尾块丢了"})
    overrides = [{"column": first, "value": "10", "note": "打印格式问题"}]
    final = apply_overrides(outcome_row(Outcome("x", "graded", scores=scores), COLUMNS), overrides)
    page = feedback.render("x", nb, scores, overrides=overrides, final=final, name="李四")
    text = re.sub(r"\s+", " ", page_text(page))
    assert "李四（x）" in text
    assert "检查1（10 / 10，老师调整；自动评分 0）" in text
    assert "（0 / 10）" not in text and "class=fail" not in page.split("<details>")[0]
    plain = page_text(feedback.render("x", nb, scores))
    assert "检查1（0 / 10）：AssertionError: TODO 1: 尾块丢了" in plain


def test_a_skipped_optional_part_is_one_line_and_a_flagged_page_lists_no_checks():
    optional = next(part for part in PARTS if not part.counted)
    cells = {f"test_todo{n}_{k}": 2.0 for n in optional.todos for k in ("a", "b", "c")}
    scores = {g: (p, p) for g, p in COLUMNS if part_of(g) is not optional}
    scores |= {g: (0.0, p) for g, p in cells.items()}
    unfinished = {
        g: f"NotImplementedError: TODO {todo_number(g)} · x：请先完成 TODO {todo_number(g)}"
        for g in cells
    }
    page = page_text(feedback.render("x", graded_notebook(scores, unfinished), scores))
    assert "选做，没有完成" in page and f"{len(cells)} 个检查都停在“请先完成”" in page
    assert "请先完成 TODO" not in page.split("完整的 notebook")[0].split("选做，没有完成")[1]
    flagged = {g: (0.0, p) for g, (_, p) in scores.items()}
    page = page_text(feedback.render("x", graded_notebook(flagged), flagged, status="flagged"))
    assert "没有错误信息" not in page and "老师复查之前" in page


def test_summary_has_a_row_per_student_and_names_checks_by_their_titles(tmp_path):
    rows = [
        row("2025001", 7, name="张三"),
        row("2025002", "", status="missing", name="李四"),
        row("2025003", 0, status="timeout", name="王五"),
    ]
    titles = {COLUMNS[0][0]: ("基本", "随机输入与参考实现相同")}
    overrides = {"2025001": [{"column": "score", "value": "7", "note": ""}]}
    summary.write_summary(
        tmp_path / "summary.html", rows, COLUMNS, titles=titles, overrides=overrides
    )
    text = re.sub(r"\s+", " ", page_text((tmp_path / "summary.html").read_text(encoding="utf-8")))
    assert re.search(r"2025001 张三 7 老师调整 graded", text)
    assert re.search(r"2025002 李四 — missing", text) and "2025003 王五 0 timeout" in text
    number = todo_number(COLUMNS[0][0])
    assert f"TODO {number} · 基本 随机输入与参考实现相同" in text
    assert f"{COLUMNS[1][0]}" in text, "a check without a title keeps its id"


def test_check_titles_read_back_every_header_the_build_writes():
    checks = [check for name in ("todo2.py", "todo12.py") for check in declarations(name)]
    nb = nbformat.v4.new_notebook(cells=[grade_cell(check) for check in checks])
    titles = check_titles(nb)
    assert titles == {check.grade_id: (check.title, check.says) for check in checks}
    assert check_label("test_todo2_tail", titles) == "TODO 2 · 尾块"


@pytest.mark.parametrize(
    "data",
    [
        "student_id;score\n2023001;100\n".encode(),
        "student_id\tscore\n2023001\t100\n".encode("utf-16"),
    ],
    ids=["semicolons", "unicode-text"],
)
def test_a_grades_csv_excel_resaved_with_semicolons_or_tabs_says_how_to_save_it(tmp_path, data):
    # The instructor adds a column in Excel and saves; a KeyError traceback, before any grading.
    (tmp_path / "grades.csv").write_bytes(data)
    with pytest.raises(UnreadableCsv, match="has no student_id column.*CSV UTF-8"):
        read_grades(tmp_path / "grades.csv")


def test_a_students_zip_the_intake_cannot_open_is_his_unreadable_row_not_missing(tmp_path):
    # 王五 handed in a zip with a password: his row said `missing` ("没有收到提交") and the LMS
    # files told him so; it is his file, not read, for the instructor to look at.
    inner = tmp_path / "work.zip"
    with zipfile.ZipFile(inner, "w") as zipped:
        zipped.writestr(NOTEBOOK, "{}")
    data = bytearray(inner.read_bytes())
    for flags_at in (6, data.find(b"PK\x01\x02") + 8):
        data[flags_at] |= 1  # encrypted
    export = tmp_path / "export"
    export.mkdir()
    (export / "王五_103_assignsubmission_file").mkdir()
    (export / "王五_103_assignsubmission_file" / "work.zip").write_bytes(bytes(data))
    people = write(tmp_path, "roster.csv", "学号,姓名,lms_user_id\n2025003,王五,103\n")
    with discover(export, roster=people) as intake:
        assert intake.missing() == []
        (row,) = absent_rows(intake, set(), [("test_todo1_basic", 1.0)])
    assert (row["status"], row["score"]) == ("unreadable", "")
    assert row["source"] == f"王五_103_assignsubmission_file/work.zip/{NOTEBOOK}"
    assert "encrypted" in row["reason"] and "2025003" in row["reason"]
