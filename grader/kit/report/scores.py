"""The one definition of a score: the grade cells' points summed to TODOs, parts and `score`.

Every output reads it: grades.csv and its overrides, the feedback pages, summary.html, the
console's table and progress lines, the preflight. A grade cell belongs to the TODO its id
names (`test_todo<N>_...`) and to that TODO's part; `score` sums the counted parts only
(`counted_parts` in grader/course.toml): a cell of no part, like a part that is not counted, is
recorded beside the score, never inside it.

Whether a row's score is a grade at all is decided here too (`is_grade`): `graded`, and the fates
of a file that are the student's own doing (empty, not JSON, not a notebook, another
assignment's), which score 0 until a new file is graded. Every other status is not a grade: the
grader could not judge the work (a timeout, a kernel that died, a grader fault), a person must
look first (flagged), or there is nothing to judge (`missing`: a roster student with no file;
`several_notebooks`: two files of one student that nothing tells apart). Such a row is never
exported as a score an LMS imports (`lms.py`) unless the instructor overrode it: an override is
the instructor's grade.
"""

from __future__ import annotations

import re

from ..authoring.nbsource import PARTS, nbgrader_meta, part_of, todo_number

TODO_COLUMN = re.compile(r"^todo(\d+)$")
# grades.csv's own columns before and after the scores (`grades.kit_columns` orders them all).
FIXED_COLUMNS = ["student_id", "score", "max_score", "status", "late", "source"]
TRAILING_COLUMNS = ["reason", "repairs"]
GRADE_STATUSES = frozenset(
    {"graded", "empty_file", "invalid_json", "not_a_notebook", "wrong_assignment"}
)
MISSING = "missing"  # a roster student with no file
SEVERAL = "several_notebooks"  # a roster student's files, none chosen
UNREADABLE = "unreadable"  # a file the grader could not read (for the intake: not extracted)
# Statuses of rows written for roster students from the intake alone (no file was graded).
ABSENT_STATUSES = frozenset({MISSING, SEVERAL, "not_a_notebook", UNREADABLE})


def is_grade(row: dict, overridden: bool = False) -> bool:
    """Whether `row`'s score may go to an LMS: a grade status, or any override of the row."""
    return overridden or row.get("status") in GRADE_STATUSES


def counts(grade_id: str) -> bool:
    """Whether a grade cell's points go into `score`: its part is a counted one."""
    part = part_of(grade_id)
    return part is not None and part.counted


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


def column_maxima(columns: list[tuple[str, float]]) -> dict[str, float]:
    """The most points each computed column can hold: score, every part, TODO and grade cell."""
    return (
        {"score": max_score(columns)}
        | dict(part_columns(columns))
        | dict(todo_columns(columns))
        | dict(columns)
    )


def counted_score(scores: dict) -> float:
    """The points of `scores` ({grade_id: (score, max)}) that count toward `score`."""
    return sum(s for g, (s, _) in scores.items() if part_of(g) is not None and part_of(g).counted)


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
    numbers = {int(m.group(1)) for m in map(TODO_COLUMN.match, changed | done) if m}
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


def num(text) -> float:
    """A cell of grades.csv as a number (empty: 0)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def fmt(value: float) -> str:
    """Points without a trailing .0."""
    return f"{value:g}"
