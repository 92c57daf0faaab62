"""What a row of grades.csv stands for: a grade, or a status that is none; and the rows of the
roster's students who have no graded file.

A grade is what the notebook earned: `graded`, and the fates of a file that is the student's
own doing (empty, not JSON, not a notebook, another assignment's), which score 0 until a new
file is graded. Every other status is not a grade: the grader could not judge the work (a
timeout, a kernel that died, a grader fault), a person must look first (flagged), or there is
nothing to judge (missing: a roster student with no file; several_notebooks: two files of one
student that nothing tells apart). Such a row is never exported as a score an LMS imports
(`lms.py` leaves the grade blank and says why) unless the instructor overrode it: an override
is the instructor's grade.

With a roster, every roster student has a row in grades.csv: one with no file gets status
`missing`; one whose only file was not graded at intake gets its fate (`not_a_notebook`,
`several_notebooks`), with why.
"""

from __future__ import annotations

from .scores import fmt, max_score

GRADE_STATUSES = frozenset(
    {"graded", "empty_file", "invalid_json", "not_a_notebook", "wrong_assignment"}
)
MISSING = "missing"
SEVERAL = "several_notebooks"
# Statuses of rows written for roster students from the intake alone (no file was graded).
ABSENT_STATUSES = frozenset({MISSING, SEVERAL, "not_a_notebook"})


def is_grade(row: dict, overridden: bool = False) -> bool:
    """Whether `row`'s score may go to an LMS: a grade status, or any override of the row."""
    return overridden or row.get("status") in GRADE_STATUSES


def absent_rows(intake, graded_ids, columns) -> list[dict]:
    """Rows for the roster's students not in `graded_ids` (this batch's outcomes).

    `intake` is the `Intake` (None or roster-less: no rows). A student with a file the intake
    did not grade gets that file's fate; one with none, `missing`. The score is empty but for
    a file that is no notebook: 0, as for a .ipynb file that is none.
    """
    if intake is None or intake.roster is None:
        return []
    fates: dict[str, tuple[str, str, str]] = {}
    for skipped in intake.skipped:
        if skipped.student_id and skipped.student_id not in graded_ids:
            fates.setdefault(skipped.student_id, fate_of(skipped))
    rows = []
    for person in intake.roster.rows:
        student_id = person["student_id"]
        if student_id in graded_ids:
            continue
        status, reason, source = fates.get(student_id, (MISSING, "no file in the export", ""))
        rows.append(
            {
                "student_id": student_id,
                "score": "0" if status in GRADE_STATUSES else "",
                "max_score": fmt(max_score(columns)),
                "status": status,
                "late": "no",
                "source": source,
                "reason": reason,
                "repairs": "",
            }
        )
    return rows


def fate_of(skipped) -> tuple[str, str, str]:
    """(status, reason, source) of a roster student's file that the intake did not grade."""
    if skipped.why.startswith("not a notebook"):
        return "not_a_notebook", skipped.why, skipped.source
    return SEVERAL, skipped.why, skipped.source


def keeps(old_row: dict | None) -> bool:
    """Whether a row from an earlier run outranks an absent row: it graded a file."""
    return old_row is not None and old_row.get("status") not in ABSENT_STATUSES
