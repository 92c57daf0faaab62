"""The instructor's view of a grading run: grades.csv, the overrides applied to it, a terminal table.

grades.csv is UTF-8 with a byte-order mark (Excel on a Chinese-locale Windows reads BOM-less UTF-8
as GBK), one row per student, columns in this order:

    student_id, score, max_score, status,     score: the parts counted (nbsource.PARTS)
    core, kv, block,                          one subtotal per part; `block` is a challenge
    todo1 ... todo14,                         points per TODO, summed over its grade cells
    test_todo1_basic, ...                     points per grade cell, in notebook order
    reason, repairs

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
import io
import json
import math
import re
import sys
from pathlib import Path

from ..authoring.nbsource import PARTS, nbgrader_meta, part_of, todo_number
from ..intake.normalize import repairs_summary

FIXED_COLUMNS = ["student_id", "score", "max_score", "status", "late", "source"]
TRAILING_COLUMNS = ["reason", "repairs"]
OVERRIDE_COLUMNS = ["student_id", "column", "value", "note"]
AS_GRADED = ".grades-as-graded.json"  # beside grades.csv: every row before overrides
_TODO_COLUMN = re.compile(r"^todo(\d+)$")


class BadOverrides(SystemExit):
    """overrides.csv cannot be applied; the message names the file and the line."""


def grade_columns(release) -> list[tuple[str, float]]:
    """(grade_id, points) of every grade cell, in notebook order."""
    return [
        (meta["grade_id"], float(meta.get("points", 0)))
        for meta in map(nbgrader_meta, release.cells)
        if meta.get("grade")
    ]


def todo_columns(columns: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """(`todo<N>`, points) for every TODO that has grade cells, by number."""
    points: dict[int, float] = {}
    for grade_id, cell_points in columns:
        number = todo_number(grade_id)
        if number is not None:
            points[number] = points.get(number, 0.0) + cell_points
    return [(f"todo{number}", points[number]) for number in sorted(points)]


def part_columns(columns: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """(part key, points) of every part in nbsource.PARTS, in their order."""
    return [(part.key, sum(p for g, p in columns if part_of(g) is part)) for part in PARTS]


def max_score(columns: list[tuple[str, float]]) -> float:
    """The points `score` is out of: the counted parts only."""
    return sum(p for g, p in columns if part_of(g) is not None and part_of(g).counted)


def kit_columns(columns: list[tuple[str, float]]) -> list[str]:
    """The columns the grader writes, in order (hand-added ones go between them)."""
    return (
        FIXED_COLUMNS
        + [key for key, _ in part_columns(columns)]
        + [name for name, _ in todo_columns(columns)]
        + [grade_id for grade_id, _ in columns]
        + TRAILING_COLUMNS
    )


def is_kit_column(name: str) -> bool:
    """True for a column the grader owns, in this layout or an older one (a renamed grade cell)."""
    return (
        name in FIXED_COLUMNS
        or name in TRAILING_COLUMNS
        or name in {"late", "source"}
        or any(name == part.key for part in PARTS)
        or bool(_TODO_COLUMN.match(name))
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


def recompute(row: dict, changed: set[str]) -> set[str]:
    """Set every column computed from `changed` columns of `row`: TODOs, parts, then score.

    Only the chain above `changed` is touched; returns the columns that were set.
    """
    cells = [name for name in row if todo_number(name) is not None]
    todos = {todo_number(name) for name in changed if todo_number(name) is not None}
    done = set()
    for number in sorted(todos):
        if f"todo{number}" in changed:
            continue
        row[f"todo{number}"] = fmt(sum(num(row[c]) for c in cells if todo_number(c) == number))
        done.add(f"todo{number}")
    numbers = {int(m.group(1)) for m in map(_TODO_COLUMN.match, changed | done) if m}
    parts = {part for part in PARTS if set(part.todos) & numbers} | {
        part for part in PARTS if part.key in changed
    }
    for part in PARTS:
        if part in parts and part.key not in changed:
            row[part.key] = fmt(
                sum(num(row.get(f"todo{n}", "")) for n in part.todos if f"todo{n}" in row)
            )
            done.add(part.key)
    if any(part.counted for part in parts) and "score" not in changed:
        row["score"] = fmt(sum(num(row.get(part.key, "")) for part in PARTS if part.counted))
        done.add("score")
    return done


def column_maxima(columns: list[tuple[str, float]]) -> dict[str, float]:
    """The most points each computed column can hold: score, every part, TODO and grade cell."""
    return (
        {"score": max_score(columns)}
        | dict(part_columns(columns))
        | dict(todo_columns(columns))
        | dict(columns)
    )


def read_overrides(
    path: Path, students, columns: list[str], maxima: dict[str, float] | None = None
) -> dict[str, list[dict]]:
    """overrides.csv as {student_id: [{column, value, note, line}]}; {} when there is none.

    `students` are the ids that may be overridden, `columns` the columns that may be set,
    `maxima` the points a column can hold (`column_maxima`; a column added by hand has none).
    Raises BadOverrides (a SystemExit) naming the line of anything that cannot be applied.
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
            student, column = (row["student_id"] or "").strip(), (row["column"] or "").strip()
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
        if _TODO_COLUMN.match(column):
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


def read_grades(path: Path) -> tuple[list[str], dict[str, dict]]:
    """(header, rows by student) of an existing grades.csv; the BOM is optional."""
    if not path.exists():
        return [], {}
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), {row["student_id"]: row for row in reader}


def open_csv(path: Path) -> io.StringIO:
    """A CSV file the instructor may have saved from Excel: UTF-8 (a BOM or not), else GBK.

    Excel on a Chinese-locale Windows saves "CSV (逗号分隔)" in GBK; GB 18030 reads it.
    """
    data = path.read_bytes()
    try:
        return io.StringIO(data.decode("utf-8-sig"), newline="")
    except UnicodeDecodeError:
        pass
    try:
        return io.StringIO(data.decode("gb18030"), newline="")
    except UnicodeDecodeError as error:
        raise SystemExit(
            f"error: {path} is neither UTF-8 nor GBK (byte {error.start}); save it as "
            '"CSV UTF-8" and run again (nothing was graded)'
        ) from None


def write_grades(
    path: Path,
    outcomes,
    columns: list[tuple[str, float]],
    overrides: dict | None = None,
    drop=(),
) -> list[dict]:
    """Write grades.csv; return its rows. Students not in `outcomes` keep their rows.

    A student graded again always gets the new row, failures included: no stale score survives.
    Columns added by hand keep their place and values; `overrides` are applied to every row.
    The rows of the students in `drop` (an earlier run's ids of files now read otherwise) go.
    """
    header, old_rows = read_grades(path)
    raw_path = path.with_name(AS_GRADED)
    if raw_path.exists():
        graded = json.loads(raw_path.read_text(encoding="utf-8"))
    else:  # a grades.csv from before this file: its rows are the best record of what was graded
        graded = {s: {k: v for k, v in r.items() if is_kit_column(k)} for s, r in old_rows.items()}
    for student_id in drop:
        graded.pop(student_id, None)
    for outcome in outcomes:
        graded[outcome.student_id] = outcome_row(outcome, columns)
    names = merged_header(kit_columns(columns), header)
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


def merged_header(kit: list[str], old: list[str]) -> list[str]:
    """`kit` with the hand-added columns of `old`, each right after the column it followed there."""
    names = list(kit)
    for index, name in enumerate(old):
        if is_kit_column(name) or name in names:
            continue
        anchor = next((o for o in reversed(old[:index]) if o in names), None)
        names.insert(names.index(anchor) + 1 if anchor else 0, name)
    return names


def write_csv(path: Path, names: list[str], rows, *, extra_rows=()) -> None:
    """Write atomically, UTF-8 with a BOM; `extra_rows` (lists) go right after the header."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.DictWriter(handle, fieldnames=names, extrasaction="ignore", restval="")
        writer.writeheader()
        for extra in extra_rows:
            csv.writer(handle).writerow(extra)
        writer.writerows(rows)
    tmp.replace(path)


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


def summary_table(outcomes, rows: dict | None = None) -> str:
    """A fixed-width table for the terminal: who scored what, who failed and why, who was repaired.

    `rows` are grades.csv's rows by student (overrides applied): `score` is the final number,
    `graded` what the grader gave, where an override changed it.
    """
    rows = rows or {}
    lines = [f"{'student_id':<24} {'score':>7} {'graded':>7} {'status':<14} notes", "-" * 78]
    for outcome in outcomes:
        score = counted_score(outcome.scores)
        final = rows.get(outcome.student_id, {}).get("score", fmt(score))
        graded = fmt(score) if final != fmt(score) else ""
        notes = outcome.reason or ""
        if outcome.repairs:
            notes = (notes + "; " if notes else "") + repairs_summary(outcome.repairs)
        if graded:
            notes = ("overridden; " + notes) if notes else "overridden (overrides.csv)"
        lines.append(
            f"{outcome.student_id:<24} {final:>7} {graded:>7} {outcome.status:<14} {notes[:120]}"
        )
    counts = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    repaired = sum(1 for o in outcomes if o.repairs)
    lines.append("-" * 78)
    lines.append(
        ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {repaired} repaired"
    )
    return "\n".join(lines)


def counted_score(scores: dict) -> float:
    """The points of `scores` ({grade_id: (score, max)}) that count toward `score`."""
    return sum(s for g, (s, _) in scores.items() if part_of(g) is not None and part_of(g).counted)


def num(text) -> float:
    """A cell of grades.csv as a number (empty: 0)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def fmt(value: float) -> str:
    """Points without a trailing .0."""
    return f"{value:g}"
