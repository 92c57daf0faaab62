"""The instructor's view of a grading run: grades.csv and a summary table for the terminal."""

from __future__ import annotations

import csv
from pathlib import Path

from .nbsource import nbgrader_meta
from .normalize import repairs_summary

FIXED_COLUMNS = ["student_id", "score", "max_score", "status", "late", "source"]
TRAILING_COLUMNS = ["reason", "repairs"]


def grade_columns(release) -> list[tuple[str, float]]:
    """(grade_id, points) of every grade cell, in notebook order."""
    return [
        (meta["grade_id"], float(meta.get("points", 0)))
        for meta in map(nbgrader_meta, release.cells)
        if meta.get("grade")
    ]


def write_grades(path: Path, outcomes, columns: list[tuple[str, float]]) -> None:
    """Write one row per student; rows already in `path` for students not in `outcomes` are kept.

    A student graded again always gets the new row, failures included: no stale score survives.
    """
    names = FIXED_COLUMNS + [grade_id for grade_id, _ in columns] + TRAILING_COLUMNS
    rows = {}
    if path.exists():
        with path.open(newline="", encoding="utf-8") as handle:
            rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    max_score = sum(points for _, points in columns)
    for outcome in outcomes:
        row = {
            "student_id": outcome.student_id,
            "score": fmt(sum(score for score, _ in outcome.scores.values())),
            "max_score": fmt(max_score),
            "status": outcome.status,
            "late": "yes" if outcome.late else "no",
            "source": outcome.source,
            "reason": outcome.reason,
            "repairs": repairs_summary(outcome.repairs),
        }
        for grade_id, _ in columns:
            row[grade_id] = fmt(outcome.scores.get(grade_id, (0.0, 0.0))[0])
        rows[outcome.student_id] = row
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=names, extrasaction="ignore", restval="")
        writer.writeheader()
        for student_id in sorted(rows):
            writer.writerow(rows[student_id])
    tmp.replace(path)


def summary_table(outcomes) -> str:
    """A fixed-width table for the terminal: who scored what, who failed and why, who was repaired."""
    lines = [f"{'student_id':<24} {'score':>7} {'status':<14} notes", "-" * 78]
    for outcome in outcomes:
        score = sum(score for score, _ in outcome.scores.values())
        notes = outcome.reason or ""
        if outcome.repairs:
            notes = (notes + "; " if notes else "") + repairs_summary(outcome.repairs)
        lines.append(f"{outcome.student_id:<24} {fmt(score):>7} {outcome.status:<14} {notes[:120]}")
    counts = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    repaired = sum(1 for o in outcomes if o.repairs)
    lines.append("-" * 78)
    lines.append(
        ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {repaired} repaired"
    )
    return "\n".join(lines)


def fmt(value: float) -> str:
    """Points without a trailing .0."""
    return f"{value:g}"
