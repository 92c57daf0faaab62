"""Gradebook files a learning management system imports: REPORT/canvas.csv and REPORT/moodle.csv.

Both come from the rows of grades.csv (overrides applied) and carry `score` out of `max_score`:
the counted parts. The challenge part goes into Moodle's feedback text, not into the grade.

Canvas (Grades > Import): the layout of Canvas's own gradebook export, which its importer reads:
`Student, ID, SIS User ID, SIS Login ID, Section, <assignment>`, then a `Points Possible` row.
Canvas finds each student by `ID` (its user id), else by `SIS User ID` or `SIS Login ID`.

Moodle (Grades > Import > CSV file): any columns, mapped in the import form; we write
`ID number, Email address, User ID, Full name, <assignment>, Feedback`. Map `ID number` to
`useridnumber` (or `Email address` to `useremail`, `User ID` to `userid`), the grade column to
the grade item, and `Feedback` to its feedback (Moodle clears a grade's feedback when only the
grade is imported, so both come together).

The LMS's own ids come from a roster, ROSTER=roster.csv (UTF-8, a BOM allowed, or Excel's GBK): header
`student_id` (required), then `name`, `lms_user_id`, `email`, all optional. Without a roster,
or for a student not in it, the files say the student_id only (Canvas's `SIS User ID`, Moodle's
`ID number`), which matches only where those are the LMS's ids.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from .nbsource import ASSIGNMENT, PARTS
from .report import write_csv
from .roster import Roster, RosterError

ROSTER_COLUMNS = ["student_id", "name", "lms_user_id", "email"]
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", ASSIGNMENT]
MOODLE_COLUMNS = ["ID number", "Email address", "User ID", "Full name", ASSIGNMENT, "Feedback"]


def read_roster(path: Path | None) -> dict[str, dict]:
    """The roster (`roster.py`) as {student_id: row}; {} for no roster. Exits if it is bad."""
    if path is None:
        return {}
    try:
        rows = Roster.read(path).rows
    except RosterError as error:
        raise SystemExit(f"error: {error}") from None
    return {row["student_id"]: {k: row.get(k, "") for k in ROSTER_COLUMNS} for row in rows}


def write_lms_files(report_dir: Path, rows: list[dict], roster: dict[str, dict]) -> list[str]:
    """Write canvas.csv and moodle.csv into `report_dir`; return lines for the console."""
    # The maximum most rows were graded under (grades.csv warns when there is more than one).
    maximum = Counter(row.get("max_score", "") for row in rows).most_common(1)[0][0] if rows else ""
    canvas, moodle, unknown = [], [], []
    for row in rows:
        person = roster.get(row["student_id"])
        if roster and person is None:
            unknown.append(row["student_id"])
        person = person or {"name": "", "lms_user_id": "", "email": ""}
        canvas.append(
            {
                "Student": person["name"] or row["student_id"],
                "ID": person["lms_user_id"],
                "SIS User ID": row["student_id"],
                "SIS Login ID": "",
                "Section": "",
                ASSIGNMENT: row["score"],
            }
        )
        moodle.append(
            {
                "ID number": row["student_id"],
                "Email address": person["email"],
                "User ID": person["lms_user_id"],
                "Full name": person["name"],
                ASSIGNMENT: row["score"],
                "Feedback": feedback_text(row),
            }
        )
    write_csv(
        report_dir / "canvas.csv",
        CANVAS_COLUMNS,
        canvas,
        extra_rows=[["Points Possible", "", "", "", "", maximum]],
    )
    write_csv(report_dir / "moodle.csv", MOODLE_COLUMNS, moodle)
    lines = [
        f"wrote {report_dir / 'canvas.csv'} and {report_dir / 'moodle.csv'} ({len(rows)} rows)"
    ]
    if not roster:
        lines.append(
            "  no ROSTER: students are named by student_id only (Canvas: SIS User ID; Moodle: "
            "ID number); pass ROSTER=roster.csv (student_id,name,lms_user_id,email) for LMS ids"
        )
    elif unknown:
        lines.append(
            f"  WARNING: {len(unknown)} students are not in the roster, named by student_id only: "
            + ", ".join(unknown[:10])
            + (" ..." if len(unknown) > 10 else "")
        )
    return lines


def feedback_text(row: dict) -> str:
    """One line for the LMS's feedback field, in Chinese: the grade, the challenge part, the status."""
    text = f"自动评分 {row['score']} / {row['max_score']}"
    if row.get("status") != "graded":
        return text + f"；未能正常评分（{row.get('status')}），详见反馈页"
    for part in PARTS:
        if not part.counted and row.get(part.key, "") != "":
            text += f"；{part.title} {row[part.key]} 分（不计入总分）"
    return text
