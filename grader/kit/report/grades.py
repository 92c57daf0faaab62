"""The instructor's view of a grading run: grades.csv, the overrides applied to it, a terminal table.

grades.csv is UTF-8 with a byte-order mark (Excel on a Chinese-locale Windows reads BOM-less UTF-8
as GBK), one row per student, columns in this order:

    student_id, [name,] score, max_score,     name: when a roster gives names
    status, late, source,                     score: the parts counted (nbsource.PARTS)
    core, kv, block,                          one subtotal per part; `block` is a challenge
    todo1 ... todo14,                         points per TODO, summed over its grade cells
    test_todo1_basic, ...                     points per grade cell, in notebook order
    reason, repairs

With a roster, every roster student has a row: status `missing` for one with no file, or the
fate of a file the intake did not grade (`absent_rows`).

A column the instructor adds by hand is kept, in place and with its values, at every regrade.
What the grader computed is also kept beside it (`.grades-as-graded.json`), so that a line taken
out of overrides.csv restores the graded value at the next run, for every student.

REPORT/overrides.csv (`student_id, column, value, note`) is applied after grading, at every run.
An override sets its column and everything computed from it, bottom up: a grade cell sets its
TODO, that TODO's part and `score`; a TODO sets its part and `score`; a part sets `score` (if the
part is counted); `score` sets only itself. An override of a lower column never undoes one of a
higher column: an overridden `score` stays what the instructor wrote.
"""

from __future__ import annotations

import csv
import json
import sys
import unicodedata
from pathlib import Path

from .. import paths
from ..authoring.nbsource import PARTS, todo_number
from ..errors import UnreadableCsv
from ..intake.normalize import repairs_summary
from ..intake.unpack import NO_NOTEBOOK_IN_ZIP, NOT_EXTRACTED
from .formats import from_cell_text, open_csv, write_csv
from .overrides import OVERRIDE_COLUMNS, apply_overrides, read_overrides
from .scores import (
    ABSENT_STATUSES,
    FIXED_COLUMNS,
    GRADE_STATUSES,
    MISSING,
    SEVERAL,
    TODO_COLUMN,
    TRAILING_COLUMNS,
    UNREADABLE,
    column_maxima,
    counted_score,
    fmt,
    grade_columns,
    max_score,
    num,
    part_columns,
    recompute,
    todo_columns,
)

__all__ = [  # read from here by the rest of the kit and the tests, beside grades.csv's own
    "OVERRIDE_COLUMNS",
    "apply_overrides",
    "column_maxima",
    "counted_score",
    "grade_columns",
    "max_score",
    "num",
    "open_csv",
    "part_columns",
    "read_overrides",
    "recompute",
    "todo_columns",
    "write_csv",
]

AS_GRADED = paths.AS_GRADED  # beside grades.csv: every row before overrides


NAME = "name"  # beside student_id, when a roster gives names


def kit_columns(columns: list[tuple[str, float]], named: bool = False) -> list[str]:
    """The columns the grader writes, in order (hand-added ones go between them); `named`: with
    the `name` column."""
    return (
        FIXED_COLUMNS[:1]
        + [NAME] * named
        + FIXED_COLUMNS[1:]
        + [key for key, _ in part_columns(columns)]
        + [name for name, _ in todo_columns(columns)]
        + [grade_id for grade_id, _ in columns]
        + TRAILING_COLUMNS
    )


def is_kit_column(name: str) -> bool:
    """True for a column the grader owns, in this layout or an older one (a renamed grade cell)."""
    return (
        name in FIXED_COLUMNS
        or name == NAME
        or name in TRAILING_COLUMNS
        or name in {"late", "source"}
        or any(name == part.key for part in PARTS)
        or bool(TODO_COLUMN.match(name))
        or todo_number(name) is not None
    )


def outcome_row(outcome, columns: list[tuple[str, float]]) -> dict:
    """The grader's row for one outcome, before overrides."""
    cells = {g: outcome.scores.get(g, (0.0, 0.0))[0] for g, _ in columns}
    row = {
        "student_id": outcome.student_id,
        "max_score": fmt(max_score(columns)),
        "status": outcome.status,
        "reason": outcome.reason,
        "repairs": repairs_summary(outcome.repairs),
        "late": "yes" if outcome.late else "no",
        "source": outcome.source,
    }
    row.update({g: fmt(v) for g, v in cells.items()})
    recompute(row, set(cells))
    return row


def read_grades(path: Path) -> tuple[list[str], dict[str, dict]]:
    """(header, rows by student) of an existing grades.csv; the BOM is optional."""
    if not path.exists():
        return [], {}
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        if "student_id" not in (reader.fieldnames or []):  # saved by Excel with tabs or `;`
            raise UnreadableCsv(
                f"error: {path} has no student_id column (its header: {reader.fieldnames}): save "
                'it from Excel as "CSV UTF-8（逗号分隔）", or move it away to start a new one '
                "(nothing was graded)"
            )
        rows = ({k: from_cell_text(v) for k, v in row.items()} for row in reader)
        return list(reader.fieldnames or []), {row["student_id"]: row for row in rows}


def write_grades(
    path: Path,
    outcomes,
    columns: list[tuple[str, float]],
    overrides: dict | None = None,
    drop=(),
    people: dict | None = None,
    absent=(),
) -> list[dict]:
    """Write grades.csv; return its rows. Students not in `outcomes` keep their rows.

    A student graded again always gets the new row, failures included: no stale score survives.
    Columns added by hand keep their place and values; `overrides` are applied to every row.
    The rows of the students in `drop` (an earlier run's ids of files now read otherwise) go.
    `people` is the roster by student (`lms.people`): names go beside the ids; `absent` are
    rows for roster students with no outcome (`absent_rows`), kept unless an earlier
    run graded a file of theirs.
    """
    header, old_rows = read_grades(path)
    raw_path = path.with_name(AS_GRADED)
    if raw_path.exists():
        graded = json.loads(raw_path.read_text(encoding="utf-8"))
    else:  # a grades.csv from before this file: its rows are the best record of what was graded
        graded = {s: {k: v for k, v in r.items() if is_kit_column(k)} for s, r in old_rows.items()}
    for student_id in drop:
        graded.pop(student_id, None)
    before = {student_id: row.get(NAME, "") for student_id, row in graded.items()}
    for outcome in outcomes:
        graded[outcome.student_id] = outcome_row(outcome, columns)
    for row in absent:
        if not keeps(graded.get(row["student_id"])):
            graded[row["student_id"]] = row
    named = add_names(graded, people or {}, before)
    names = merged_header(kit_columns(columns, named), header)
    rows = []
    for student_id in sorted(graded):
        row = apply_overrides(graded[student_id], (overrides or {}).get(student_id, []))
        for name in names:
            if not is_kit_column(name):
                row[name] = row.get(name, old_rows.get(student_id, {}).get(name, ""))
        rows.append(row)
    tmp = raw_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(graded, ensure_ascii=False, indent=0), encoding="utf-8")
    tmp.replace(raw_path)
    write_csv(path, names, rows)
    return rows


def add_names(graded: dict, people: dict, before: dict) -> bool:
    """Put the roster's name into each row of `graded`; where the roster gives none, the name
    the student had `before` (by student) stays. Whether any row has a name."""
    for student_id, row in graded.items():
        name = people.get(student_id, {}).get("name", "")
        row[NAME] = name or row.get(NAME) or before.get(student_id, "")
    return any(row[NAME] for row in graded.values())


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
    """(status, reason, source) of a roster student's file that the intake did not grade: a
    file that is no notebook (a zip without one) is `not_a_notebook`, a grade of 0; one the
    intake could not extract (a password, a method, damage) `unreadable`, no grade: the
    instructor looks at it."""
    if skipped.why.startswith(("not a notebook", NO_NOTEBOOK_IN_ZIP)):
        return "not_a_notebook", skipped.why, skipped.source
    if skipped.why.startswith(NOT_EXTRACTED):
        return UNREADABLE, skipped.why, skipped.source
    return SEVERAL, skipped.why, skipped.source


def keeps(old_row: dict | None) -> bool:
    """Whether a row from an earlier run outranks an absent row: it graded a file."""
    return old_row is not None and old_row.get("status") not in ABSENT_STATUSES


def merged_header(kit: list[str], old: list[str]) -> list[str]:
    """`kit` with the hand-added columns of `old`, each right after the column it followed there."""
    names = list(kit)
    for index, name in enumerate(old):
        if is_kit_column(name) or name in names:
            continue
        anchor = next((o for o in reversed(old[:index]) if o in names), None)
        names.insert(names.index(anchor) + 1 if anchor else 0, name)
    return names


def max_score_warning(rows) -> str:
    """A warning when rows were graded under different maximum scores, else ''."""
    by_max: dict[str, list[str]] = {}
    for row in rows:
        by_max.setdefault(row.get("max_score", ""), []).append(row["student_id"])
    if len(by_max) < 2:
        return ""
    ordered = sorted(by_max.items(), key=lambda item: -len(item[1]))
    lines = [
        f"  max_score {maximum or '(empty)'}: {len(ids)} rows"
        + (
            f" ({', '.join(ids[:8])}{', ...' if len(ids) > 8 else ''})"
            if len(ids) < len(rows) / 2
            else ""
        )
        for maximum, ids in ordered
    ]
    return (
        "WARNING: grades.csv holds rows graded under different maximum scores; the points in "
        "the source changed between runs. Regrade the older rows before using the totals:\n"
        + "\n".join(lines)
    )


def warn(text: str, stream=None) -> None:
    """Print `text` to stderr, framed so that it is seen."""
    if text:
        stream = stream or sys.stderr
        print("!" * 78 + "\n" + text + "\n" + "!" * 78, file=stream, flush=True)


def labelled(student_id: str, name: str, width: int = 24) -> str:
    """`student_id name` padded to `width` terminal columns (a CJK character takes two)."""
    text = f"{student_id} {name}".strip()
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in "WF")
    return text + " " * max(0, width - len(text) - wide)


def summary_table(outcomes, rows: dict | None = None) -> str:
    """A fixed-width table for the terminal: who scored what, who failed and why, who was repaired.

    `rows` are grades.csv's rows by student (overrides applied): `score` is the final number,
    `graded` what the grader gave, where an override changed it.
    """
    rows = rows or {}
    head = "student_id name" if any(row.get(NAME) for row in rows.values()) else "student_id"
    lines = [f"{head:<24} {'score':>7} {'graded':>7} {'status':<14} notes", "-" * 78]
    for outcome in outcomes:
        score = counted_score(outcome.scores)
        final = rows.get(outcome.student_id, {}).get("score", fmt(score))
        graded = fmt(score) if final != fmt(score) else ""
        notes = outcome.reason or ""
        if outcome.repairs:
            notes = (notes + "; " if notes else "") + repairs_summary(outcome.repairs)
        if graded:
            notes = ("overridden; " + notes) if notes else "overridden (overrides.csv)"
        who = labelled(outcome.student_id, rows.get(outcome.student_id, {}).get(NAME, ""))
        lines.append(f"{who} {final:>7} {graded:>7} {outcome.status:<14} {notes[:120]}")
    counts = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    repaired = sum(1 for o in outcomes if o.repairs)
    lines.append("-" * 78)
    lines.append(
        ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {repaired} repaired"
    )
    return "\n".join(lines)
