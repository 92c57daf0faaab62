"""Gradebook files the LMSs' own importers accept: REPORT/canvas.csv, moodle.csv, and Moodle's
offline grading worksheet (moodle-grading-worksheet.csv) when the export came from Moodle.

All come from the rows of grades.csv (overrides applied) and carry `score` out of `max_score`:
the counted parts (nbsource.PARTS). A part that does not count goes into the feedback text.

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

ROSTER_COLUMNS = ["student_id", "name", "lms_user_id", "email"]
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


def write_lms_files(
    report_dir: Path, rows: list[dict], roster: dict[str, dict], settings: Path = COURSE_SETTINGS
) -> list[str]:
    """Write canvas.csv, moodle.csv (and the worksheet for a Moodle export); lines to print."""
    # The maximum most rows were graded under (grades.csv warns when there is more than one).
    maximum = Counter(row.get("max_score", "") for row in rows).most_common(1)[0][0] if rows else ""
    title, title_warning = canvas_title(settings)
    canvas, moodle, left_out = [], [], {"canvas": [], "moodle": []}
    for row in rows:
        person = roster.get(row["student_id"]) or {"name": "", "lms_user_id": "", "email": ""}
        keyed = lms_keyed(row, source_reading(row)) and row["student_id"] not in roster
        sis = "" if keyed else row["student_id"]
        if person["lms_user_id"] or sis:
            canvas.append(
                dict(zip(CANVAS_FIXED, [person["name"] or row["student_id"], person["lms_user_id"], sis, "", ""]))
                | {title: row["score"]}
            )  # fmt: skip
        else:
            left_out["canvas"].append(row["student_id"])
        if sis or person["email"]:
            moodle.append(
                {
                    "ID number": sis,
                    "Email address": person["email"],
                    "Full name": person["name"],
                    ASSIGNMENT: row["score"],
                    "Feedback": feedback_text(row),
                }
            )
        else:
            left_out["moodle"].append(row["student_id"])
    points = ["Points Possible", "", "", "", "", maximum]
    write_csv(report_dir / paths.CANVAS, [*CANVAS_FIXED, title], canvas, extra_rows=[points])
    write_csv(report_dir / paths.MOODLE, MOODLE_COLUMNS, moodle)
    lines = [
        f"wrote {report_dir / paths.CANVAS} and {report_dir / paths.MOODLE} ({len(rows)} rows)"
    ]
    lines += [title_warning] if title_warning else []
    lines += roster_lines(rows, roster, left_out)
    lines += write_worksheet(report_dir, rows, roster, maximum)
    return lines


def roster_lines(rows, roster, left_out) -> list[str]:
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
    for name, ids in left_out.items():
        if ids:
            lines.append(
                f"  {len(ids)} row(s) left out of {name}.csv: their id is an LMS number from the "
                f"export's file names, which its importer does not match ({', '.join(ids[:8])}"
                + (", ..." if len(ids) > 8 else "")
                + "); pass ROSTER=roster.csv"
                + (f", or import {WORKSHEET}" if name == "moodle" else "")
            )
    return lines


def write_worksheet(report_dir: Path, rows, roster, maximum: str) -> list[str]:
    """Moodle's offline grading worksheet, for rows from a Moodle export; lines to print."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    sheet, teams = [], []
    readings = [(row, source_reading(row)) for row in rows]
    team_export = any(reading["keyed"] == "team" for _, reading in readings)
    for row, reading in readings:
        if not reading["layout"].startswith("Moodle"):
            continue
        if team_export:
            teams.append(row["student_id"])
            continue
        person = roster.get(row["student_id"], {})
        number = reading["lms_number"] or person.get("lms_user_id", "")
        name = person.get("name") or (reading["names"][0] if reading["names"] else "")
        sheet.append(
            {
                "Identifier": f"Participant {number}",
                "Full name": name,
                "Grade": row["score"],
                "Maximum grade": maximum,
                "Last modified (grade)": stamp,
                "Feedback comments": feedback_text(row),
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


def feedback_text(row: dict) -> str:
    """One line for the LMS's feedback field, in Chinese: the grade, the parts not counted, the status."""
    text = f"自动评分 {row['score']} / {row['max_score']}"
    if row.get("status") != "graded":
        return text + f"；未能正常评分（{row.get('status')}），详见反馈页"
    for part in PARTS:
        if not part.counted and row.get(part.key, "") != "":
            text += f"；{part.title} {row[part.key]} 分（不计入总分）"
    return text
