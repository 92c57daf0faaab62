"""`make intake`: who would be graded, under which id, from which file and why, on each layout.

Runs the real Makefile target (with STAMP= so that make does not touch the virtualenv, and this
interpreter as PY); no kernel starts and nothing is graded.
"""

import csv
import subprocess
import sys

import pytest

from grader.kit.authoring.nbsource import REPO_ROOT
from tests.test_lms_exports import (
    CLASS,
    NOTEBOOK,
    canvas_file,
    moodle_path,
    moodle_prefix,
    moodle_team_prefix,
    write,
)


def make_intake(tmp_path, export, roster_text=None, choices=None):
    report = tmp_path / "report"
    command = [
        "make", "-s", "intake", "STAMP=", f"PY={sys.executable}",
        f"SUBMISSIONS={export}", f"REPORT={report}",
    ]  # fmt: skip
    if roster_text:
        command.append(f"ROSTER={write(tmp_path, 'roster.csv', roster_text)}")
    if choices:
        command.append(f"CHOICES={choices}")
    run = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    rows = []
    if (report / "intake.csv").exists():
        with open(report / "intake.csv", newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.DictReader(handle))
    assert not (report / "grades.csv").exists() and not (report / "feedback").exists()
    return run, {row["file"]: row for row in rows}


def moodle41(export):
    write(export, moodle_path(moodle_prefix("Wang Wu", 12347), NOTEBOOK))
    write(export, moodle_path(moodle_prefix("Li Si", 12348), NOTEBOOK, folders=False))
    return None, {"12347": "no", "12348": "no"}


def moodle_blind(export):
    write(export, moodle_path(moodle_prefix("", 88, blind=True), NOTEBOOK))
    return None, {"Participant_88": "no"}


def moodle_teams(export):
    write(export, moodle_path(moodle_team_prefix("Team A", 5), NOTEBOOK))
    write(export, moodle_path(moodle_team_prefix(None), NOTEBOOK))
    return None, {"group_5": "no", "Default group": "no"}


def canvas_anonymous(export):
    write(export, canvas_file("", None, 1, NOTEBOOK, anon="aB3xY"))
    write(export, canvas_file("", None, 2, NOTEBOOK, anon="Qz9k1", late=True))
    return None, {"anon_aB3xY": "no", "anon_Qz9k1": "yes"}


def canvas_with_roster(export):
    write(export, canvas_file("li_wei, zhang", 124, 457, NOTEBOOK, late=True))
    return "student_id,name,lms_user_id\n2023002,Zhang Li Wei,124\n", {"2023002": "yes"}


def chinese_class(export):
    write(export, "2025001_张三_第34章作业.ipynb")
    write(export, "李四-2025002-ch34.ipynb")
    write(export, "2025003王小明.ipynb")
    return CLASS, {"2025001": "no", "2025002": "no", "2025003": "no"}


def exchange_inbound(export):
    folder = "ch34/inbound/2023001+ch34_prefix_cache+2026-12-01 08:00:00.000000 UTC+def"
    write(export, f"{folder}/{NOTEBOOK}")
    write(export, f"{folder}/timestamp.txt", "2026-12-01 08:00:00.000000 UTC")
    return None, {"2023001": "no"}


def gradescope(export):
    write(export, "submission_metadata.yml", ":submission_7:\n  :submitters:\n  - :sid: '99'\n")
    write(export, f"submission_7/{NOTEBOOK}")
    return None, {"99": "no"}


def blackboard(export):
    write(export, "Ch 34 作业_li_wei5_attempt_2026-11-30-10-15-00_ch34_prefix_cache.ipynb")
    write(export, "Ch 34 作业_li_wei5_attempt_2026-11-30-10-15-00.txt", "Name: Li Wei")
    return "student_id,name\nli_wei5,Li Wei\n", {"li_wei5": "no"}


def brightspace_with_roster(export):
    write(export, f"148-2093 - Zhang San - Nov 30, 2026 1015 AM/{NOTEBOOK}")
    return "student_id,name\n2023005,Zhang San\n", {"2023005": "no"}


def plain_and_per_student(export):
    write(export, "2023001.ipynb")
    write(export, f"2023002/{NOTEBOOK}")
    return None, {"2023001": "no", "2023002": "no"}


@pytest.mark.parametrize(
    "build",
    [
        moodle41,
        moodle_blind,
        moodle_teams,
        canvas_anonymous,
        canvas_with_roster,
        chinese_class,
        exchange_inbound,
        gradescope,
        blackboard,
        brightspace_with_roster,
        plain_and_per_student,
    ],
)
def test_make_intake_names_every_student_of_each_layout_and_grades_nothing(tmp_path, build):
    export = tmp_path / "export"
    roster_text, expected = build(export)
    run, rows = make_intake(tmp_path, export, roster_text)
    assert run.returncode == 0, run.stdout + run.stderr
    to_grade = {r["student_id"]: r["late"] for r in rows.values() if r["outcome"] == "to grade"}
    assert to_grade == expected
    assert all(r["why"] for r in rows.values()), "every row says why"
    for student_id in expected:
        assert student_id in run.stdout
    assert "nothing was graded" in run.stdout


def test_make_intake_exits_non_zero_when_no_file_has_a_known_student(tmp_path):
    export = tmp_path / "export"
    write(export, f"148-2093 - Zhang San - Nov 30, 2026 1015 AM/{NOTEBOOK}")  # Brightspace
    write(export, "ch34 作业.ipynb")
    run, rows = make_intake(tmp_path, export)
    assert run.returncode != 0
    assert {r["outcome"] for r in rows.values()} == {"student unknown"}
    assert "could be tied to a known student" in run.stderr
    assert "Brightspace" in rows[f"148-2093 - Zhang San - Nov 30, 2026 1015 AM/{NOTEBOOK}"]["why"]


def test_make_intake_lists_roster_students_with_no_notebook(tmp_path):
    export = tmp_path / "export"
    write(export, "2025001_张三.ipynb")
    run, _ = make_intake(tmp_path, export, CLASS)
    assert run.returncode == 0, run.stderr
    assert "no notebook from 4 roster student(s): 2025002 李四" in run.stdout


def test_make_intake_writes_the_choices_file_and_choices_grade_another_notebook(tmp_path):
    """Issue 40: `make intake` writes REPORT/choices.csv for a student with two notebooks; the
    same file, edited, passed as CHOICES= makes the other one the graded one."""
    export = tmp_path / "export"
    draft = moodle_path(moodle_prefix("王伟", 30101), NOTEBOOK)
    final = moodle_path(moodle_prefix("王伟", 30101), "ch34_prefix_cache_final.ipynb")
    write(export, draft, mtime=1_780_000_000)
    write(export, final, mtime=1_780_090_000)
    run, rows = make_intake(tmp_path, export)
    assert run.returncode == 0, run.stderr
    assert f"30101: 交了 2 个 notebook，评 {final}：最新的那个" in run.stdout
    assert rows[draft]["outcome"] == "not graded"
    choices = tmp_path / "report" / "choices.csv"
    with open(choices, newline="", encoding="utf-8-sig") as handle:
        [row] = list(csv.DictReader(handle))
    assert row["文件"] == final
    row["文件"] = draft  # the instructor's edit, saved by Excel
    with open(choices, "w", newline="", encoding="gbk") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    run, rows = make_intake(tmp_path, export, choices=choices)
    assert run.returncode == 0, run.stderr
    assert rows[draft]["outcome"] == "to grade"
    assert "老师在" in rows[draft]["why"]
    assert rows[final]["outcome"] == "not graded"
