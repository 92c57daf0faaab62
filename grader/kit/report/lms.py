"""Gradebook files the LMSs' own importers accept: REPORT/canvas.csv, moodle.csv, and Moodle's
offline grading worksheet (moodle-grading-worksheet.csv).

Which are written follows where the export came from (`--lms auto`, the default): a Moodle
export gets moodle.csv and the worksheet, a Canvas export canvas.csv, an export of no LMS
(plain files, nbgrader's folders, Blackboard, Gradescope) all of them; `--lms all`, `canvas`,
`moodle` or `none` choose. A file of an earlier run that this run does not write is removed, so
that no stale grade is imported.

All come from the rows of grades.csv (overrides applied) and carry `score` out of `max_score`:
the counted parts (nbsource.PARTS). A part that does not count goes into the feedback text. A
row whose status is not a grade (`scores.is_grade`: timeout, flagged, kernel_died, a grader fault,
missing) gets an empty grade, never 0, and its feedback says why; the console lists them. An
empty grade is "no grade" to both importers, and Moodle's CSV import sets it so (clearing a
grade typed into Moodle by hand: put such a grade into overrides.csv). An overridden score is
the instructor's grade and is exported as one, called so in the feedback.

Canvas (Grades > Import), as app/models/gradebook_importer.rb reads it: the layout of Canvas's
own export, `Student, ID, SIS User ID, SIS Login ID, Section, <assignment>`, then a
`Points Possible` row. A student is found by `ID` (Canvas's user id), else by `SIS User ID`.
`ID` is filled only from the roster's `lms_user_id`; without a roster only `SIS User ID` is
written, and only for rows whose id is a student id (not an LMS number read from a file name).
The grade column is titled `<title> (<id>)` as Canvas's export titles it (`parse_assignments`
matches the id in parentheses, else the exact title, else creates a new assignment), from
`canvas_assignment_title` and `canvas_assignment_id` in grader/course.toml.

Moodle (Grades > Import > CSV file, grade/import/csv): any columns, mapped in the import form:
`ID number` to `useridnumber`, or `Email address` to `useremail`; the grade column to the grade
item; `Feedback` to its feedback. One unknown user fails the whole import, so a row with neither
an ID number nor an email is left out (and said so).

Moodle's offline grading worksheet (Assignment > Grading action > Upload grading worksheet,
mod/assign/feedback/offline/importgradeslib.php): rows are found by `Identifier` =
"Participant <participant no.>" (the number of the export's folder names), the grade by `Grade`,
and a grade changed in Moodle after `Last modified (grade)` is kept; `Feedback comments` fills
the feedback comments. The only import path while blind marking is on.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from .. import paths
from ..authoring.nbsource import ASSIGNMENT, COURSE_SETTINGS, PARTS
from ..intake.layouts import read_name
from ..intake.roster import Roster
from .grades import write_csv
from .scores import MISSING, is_grade

ROSTER_COLUMNS = ["student_id", "name", "lms_user_id", "username", "email"]
CHOICES = ("auto", "all", "canvas", "moodle", "none")  # --lms
CANVAS_FIXED = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_COLUMNS = ["ID number", "Email address", "Full name", ASSIGNMENT, "Feedback"]
WORKSHEET = paths.WORKSHEET
WORKSHEET_COLUMNS = [
    "Identifier",
    "Full name",
    "Grade",
    "Maximum grade",
    "Last modified (grade)",
    "Feedback comments",
]


def people(roster: Roster | None) -> dict[str, dict]:
    """The roster (`intake.roster.Roster`, read once, by the intake) as {student_id: row}; {} for
    no roster."""
    if roster is None:
        return {}
    return {row["student_id"]: {k: row.get(k, "") for k in ROSTER_COLUMNS} for row in roster.rows}


def canvas_title(settings: Path = COURSE_SETTINGS) -> tuple[str, str]:
    """(the grade column's title in canvas.csv, a warning or '') from grader/course.toml."""
    with settings.open("rb") as handle:
        values = tomllib.load(handle)
    title = str(values.get("canvas_assignment_title", "")).strip()
    number = str(values.get("canvas_assignment_id", "")).strip()
    if number:
        return f"{title or ASSIGNMENT} ({number})", ""
    if title:
        return title, ""
    return ASSIGNMENT, (
        f"  canvas.csv: the grade column is titled {ASSIGNMENT!r}; Canvas matches an assignment "
        "by `Title (id)` or its exact title and otherwise creates a new one: set "
        "canvas_assignment_title and canvas_assignment_id in grader/course.toml"
    )


def source_reading(row: dict) -> dict:
    """What the row's source file name says (`layouts.read_name`)."""
    return read_name(tuple(row.get("source", "").split("/")))


def lms_keyed(row: dict, reading: dict) -> bool:
    """Whether the row's student_id is an LMS's own number (or a hidden person's id), not a student id."""
    ids = (reading["student_id"], f"group_{reading['lms_number']}")
    return reading["keyed"] in ("lms", "anonymous", "team") and row["student_id"] in ids


def chosen(rows: list[dict], which: str = "auto") -> set[str]:
    """The LMS files to write, {"canvas", "moodle"}: `which` (CHOICES), `auto` by the export."""
    if which != "auto":
        return {"all": {"canvas", "moodle"}, "none": set()}.get(which, {which})
    layouts = {source_reading(row)["layout"].split(" ")[0] for row in rows if row.get("source")}
    found = {name.lower() for name in ("Canvas", "Moodle") if name in layouts}
    return found or {"canvas", "moodle"}


def write_lms_files(
    report_dir: Path,
    rows: list[dict],
    roster: dict[str, dict],
    settings: Path = COURSE_SETTINGS,
    *,
    overrides: dict | None = None,
    which: str = "auto",
) -> list[str]:
    """Write the LMS files `chosen` for `rows` (canvas.csv, moodle.csv, the worksheet); lines
    to print. `overrides` are overrides.csv's lines by student: an overridden row is a grade."""
    # The maximum most rows were graded under (grades.csv warns when there is more than one).
    maximum = Counter(row.get("max_score", "") for row in rows).most_common(1)[0][0] if rows else ""
    overrides = overrides or {}
    wanted = chosen(rows, which)
    exported = [exported_row(row, overrides.get(row["student_id"], ())) for row in rows]
    lines = remove_unwanted(report_dir, wanted, which)
    if "canvas" in wanted:
        lines += write_canvas(report_dir, exported, roster, settings, maximum)
    if "moodle" in wanted:
        lines += write_moodle(report_dir, exported, roster)
        lines += write_worksheet(report_dir, exported, roster, maximum)
    lines += roster_lines(rows, roster)
    lines += no_grade_lines(exported)
    return lines


def exported_row(row: dict, overrides) -> dict:
    """`row` as an LMS gets it: `score` empty when the status is not a grade; `Feedback` set."""
    grade = is_grade(row, overridden=bool(overrides))
    return row | {"score": row["score"] if grade else "", "Feedback": feedback_text(row, overrides)}


def remove_unwanted(report_dir: Path, wanted: set[str], which: str) -> list[str]:
    """Remove an earlier run's LMS files that this run does not write; say so and why."""
    files = {"canvas": [paths.CANVAS], "moodle": [paths.MOODLE, WORKSHEET]}
    gone = [
        name
        for lms, names in files.items()
        if lms not in wanted
        for name in names
        if (report_dir / name).exists()
    ]
    for name in gone:
        (report_dir / name).unlink()
    lines = []
    if which == "auto" and wanted != {"canvas", "moodle"}:
        lines.append(
            f"  the export came from {' and '.join(sorted(w.capitalize() for w in wanted))}: "
            "only its LMS files are written (--lms all writes every one)"
        )
    if gone:
        lines.append(f"  removed {', '.join(gone)} of an earlier run (not written this time)")
    return lines


def write_canvas(report_dir: Path, rows, roster, settings: Path, maximum: str) -> list[str]:
    """canvas.csv: a row per student Canvas can find (its ID or SIS User ID); lines to print."""
    title, title_warning = canvas_title(settings)
    canvas, left_out = [], []
    for row in rows:
        person = roster.get(row["student_id"]) or {"name": "", "lms_user_id": "", "email": ""}
        sis = "" if is_lms_number(row, roster) else row["student_id"]
        if person["lms_user_id"] or sis:
            canvas.append(
                dict(zip(CANVAS_FIXED, [person["name"] or row["student_id"], person["lms_user_id"], sis, "", ""]))
                | {title: row["score"]}
            )  # fmt: skip
        else:
            left_out.append(row["student_id"])
    points = ["Points Possible", "", "", "", "", maximum]
    write_csv(report_dir / paths.CANVAS, [*CANVAS_FIXED, title], canvas, extra_rows=[points])
    lines = [f"wrote {report_dir / paths.CANVAS} ({len(canvas)} rows)"]
    lines += [title_warning] if title_warning else []
    return lines + left_out_lines("canvas", left_out)


def write_moodle(report_dir: Path, rows, roster) -> list[str]:
    """moodle.csv: a row per student with an ID number or an email; lines to print."""
    moodle, left_out = [], []
    for row in rows:
        person = roster.get(row["student_id"]) or {"name": "", "lms_user_id": "", "email": ""}
        sis = "" if is_lms_number(row, roster) else row["student_id"]
        if sis or person["email"]:
            values = [sis, person["email"], person["name"], row["score"], row["Feedback"]]
            moodle.append(dict(zip(MOODLE_COLUMNS, values)))
        else:
            left_out.append(row["student_id"])
    write_csv(report_dir / paths.MOODLE, MOODLE_COLUMNS, moodle)
    lines = [f"wrote {report_dir / paths.MOODLE} ({len(moodle)} rows)"]
    return lines + left_out_lines("moodle", left_out)


def is_lms_number(row: dict, roster: dict) -> bool:
    """Whether the row's id is an LMS's own number from a file name (no roster student's)."""
    return lms_keyed(row, source_reading(row)) and row["student_id"] not in roster


def no_grade_lines(rows: list[dict]) -> list[str]:
    """The console's word on the rows exported with no grade, by status."""
    empty = [row for row in rows if row["score"] == "" and row.get("status")]
    if not empty:
        return []
    by_status = Counter(row["status"] for row in empty)
    ids = ", ".join(row["student_id"] for row in empty[:10]) + (" ..." if len(empty) > 10 else "")
    return [
        f"  {len(empty)} row(s) exported with NO grade ("
        + ", ".join(f"{n} {status}" for status, n in sorted(by_status.items()))
        + f"): {ids}. Their status is not a grade; look at them, then put a grade into "
        "overrides.csv (it is exported at the next run). An empty grade clears one typed into "
        "Moodle by hand."
    ]


def roster_lines(rows, roster) -> list[str]:
    lines = []
    if not roster:
        lines.append(
            "  no ROSTER: canvas.csv has no Canvas ID (it comes only from the roster's "
            "lms_user_id) and names students by SIS User ID = student_id, which Canvas matches "
            "only where those are its SIS ids; pass ROSTER=roster.csv (student_id,name,"
            "lms_user_id,email)"
        )
    else:
        unknown = [row["student_id"] for row in rows if row["student_id"] not in roster]
        if unknown:
            lines.append(
                f"  WARNING: {len(unknown)} students are not in the roster, named by student_id "
                "only: " + ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "")
            )
    return lines


def left_out_lines(name: str, ids: list[str]) -> list[str]:
    """The rows an LMS file could not hold: their id is an LMS number its importer cannot find."""
    if not ids:
        return []
    return [
        f"  {len(ids)} row(s) left out of {name}.csv: their id is an LMS number from the "
        f"export's file names, which its importer does not match ({', '.join(ids[:8])}"
        + (", ..." if len(ids) > 8 else "")
        + "); pass ROSTER=roster.csv"
        + (f", or import {WORKSHEET}" if name == "moodle" else "")
    ]


def write_worksheet(report_dir: Path, rows, roster, maximum: str) -> list[str]:
    """Moodle's offline grading worksheet, for rows from a Moodle export and the roster's
    students with no file whose participant number it gives; lines to print."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    sheet, teams = [], []
    readings = [(row, source_reading(row)) for row in rows]
    team_export = any(reading["keyed"] == "team" for _, reading in readings)
    from_moodle = any(reading["layout"].startswith("Moodle") for _, reading in readings)
    for row, reading in readings:
        person = roster.get(row["student_id"], {})
        absent = from_moodle and row.get("status") == MISSING and person.get("lms_user_id")
        if not reading["layout"].startswith("Moodle") and not absent:
            continue
        if team_export:
            teams.append(row["student_id"])
            continue
        number = reading["lms_number"] or person.get("lms_user_id", "")
        name = person.get("name") or (reading["names"][0] if reading["names"] else "")
        sheet.append(
            {
                "Identifier": f"Participant {number}",
                "Full name": name,
                "Grade": row["score"],
                "Maximum grade": maximum,
                "Last modified (grade)": stamp,
                "Feedback comments": row["Feedback"],
            }
        )
    if not sheet and not teams:
        return []
    write_csv(report_dir / WORKSHEET, WORKSHEET_COLUMNS, sheet)
    lines = [
        f"wrote {report_dir / WORKSHEET} ({len(sheet)} rows): Moodle's offline grading "
        "worksheet, for Assignment > Upload grading worksheet (the path under blind marking)"
    ]
    if teams:
        lines.append(
            f"  {len(teams)} team submission(s) are not in the worksheet (its rows are "
            "participants, and the export does not say a team's members): " + ", ".join(teams[:8])
        )
    return lines


def feedback_text(row: dict, overrides=()) -> str:
    """One line for the LMS's feedback field, in Chinese: the grade (the teacher's where
    overridden), the parts not counted, the status."""
    status = row.get("status")
    if overrides:
        notes = "；".join(o.get("note", "") for o in overrides if o.get("note"))
        text = (
            f"得分 {row['score']} / {row['max_score']}（老师评定"
            + (f"：{notes}" if notes else "")
            + "）"
        )
    elif status == MISSING:
        return "没有收到提交，未评分"
    elif not is_grade(row):
        return f"未能自动评分（{status}），暂不登记分数；老师复查后给分，详见反馈页"
    else:
        text = f"自动评分 {row['score']} / {row['max_score']}"
    if status != "graded" and not overrides:
        return text + f"；未能正常评分（{status}），详见反馈页"
    for part in PARTS:
        if not part.counted and row.get(part.key, "") != "":
            text += f"；{part.title} {row[part.key]} 分（不计入总分）"
    return text
