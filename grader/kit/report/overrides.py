"""REPORT/overrides.csv: the instructor's adjustments, read and checked before grading, applied
to every row after it.

An override sets its column and everything computed from it, bottom up (`scores.recompute`): a
grade cell sets its TODO, that TODO's part and `score`; a TODO sets its part and `score`; a part
sets `score` (if the part is counted); `score` sets only itself. An override of a lower column
never undoes one of a higher column.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from ..authoring.nbsource import PARTS, todo_number
from ..errors import BadOverrides
from .formats import from_cell_text, open_csv
from .scores import TODO_COLUMN, TRAILING_COLUMNS, fmt, recompute

OVERRIDE_COLUMNS = ["student_id", "column", "value", "note"]


def read_overrides(
    path: Path, students, columns: list[str], maxima: dict[str, float] | None = None
) -> dict[str, list[dict]]:
    """overrides.csv as {student_id: [{column, value, note, line}]}; {} when there is none.

    `students` are the ids that may be overridden, `columns` the columns that may be set,
    `maxima` the points a column can hold (`column_maxima`; a column added by hand has none).
    Raises BadOverrides (a KitError) naming the line of anything that cannot be applied.
    """
    maxima = maxima or {}
    if not path.exists():
        return {}
    students, allowed = set(students), set(columns) - {"student_id", "max_score", "status"}
    allowed -= set(TRAILING_COLUMNS) | {"late", "source"}
    found: dict[str, list[dict]] = {}
    seen: dict[tuple[str, str], int] = {}
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        missing = [
            c for c in ("student_id", "column", "value") if c not in (reader.fieldnames or [])
        ]
        if missing:
            raise BadOverrides(
                f"error: {path}: the header must be `{','.join(OVERRIDE_COLUMNS)}` "
                f"(missing {', '.join(missing)}); nothing was graded"
            )
        for row in reader:
            line = reader.line_num
            student = from_cell_text((row["student_id"] or "").strip())
            column = (row["column"] or "").strip()
            value, note = (row["value"] or "").strip(), (row.get("note") or "").strip()
            where = f"error: {path}, line {line}"
            if student not in students:
                raise BadOverrides(
                    f"{where}: no student {student!r} in grades.csv or in this batch; "
                    "fix or delete the line (nothing was graded)"
                )
            if column not in allowed:
                raise BadOverrides(
                    f"{where}: {column!r} is not a column that can be overridden (score, "
                    "core/kv/block, todoN, a grade cell id or a column you added to grades.csv); "
                    "nothing was graded"
                )
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise BadOverrides(f"{where}: value {value!r} is not a number; nothing was graded")
            top = maxima.get(column)
            if top is not None and not 0 <= number <= top:
                raise BadOverrides(
                    f"{where}: value {value} is outside 0..{fmt(top)}, the points {column} can "
                    "hold; fix the value (nothing was graded)"
                )
            if (student, column) in seen:
                raise BadOverrides(
                    f"{where}: {student} {column} is already overridden on line "
                    f"{seen[student, column]}; keep one of the two (nothing was graded)"
                )
            seen[student, column] = line
            found.setdefault(student, []).append(
                {"column": column, "value": fmt(number), "note": note, "line": line}
            )
    return found


def apply_overrides(row: dict, overrides: list[dict]) -> dict:
    """A copy of `row` with `overrides` set, lowest level first, and what depends on them."""
    row = dict(row)
    level = {"cell": 0, "todo": 1, "part": 2, "score": 3, "other": 4}

    def kind(column):
        if todo_number(column) is not None:
            return "cell"
        if TODO_COLUMN.match(column):
            return "todo"
        if any(column == part.key for part in PARTS):
            return "part"
        return "score" if column == "score" else "other"

    fixed: set[str] = set()
    for override in sorted(overrides, key=lambda o: level[kind(o["column"])]):
        row[override["column"]] = override["value"]
        fixed.add(override["column"])
        recompute(row, fixed)
    return row
