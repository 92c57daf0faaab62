"""Where the instructor reads which TODO hung or crashed: after the console's table, and in
summary.html. Both list the submissions graded around a kernel that ended (`faults/resume.py`)
and the answer cells that did not run (`causes.py`), one line a submission, from the `reason`
the row holds (those lines are written by `faults/kinds.summary` and `causes.CellError`).
"""

from __future__ import annotations

import re

from ..report.formats import esc
from .boxes import REASON_HEAD
from .kinds import KINDS

# The lines of a `reason` that name a TODO (or another cell) that hung or crashed
# (`faults.summary`), an answer cell that did not run (`causes.CellError.reason`), or a TODO
# whose checks ran out of their time boxes (`boxes.BoxTimeout.reason`).
_ENDS = "|".join(re.escape(what.split("{")[0].strip()) for what, _ in KINDS.values())
FAULT_LINE = re.compile(
    rf"^((TODO \d+|cell \S+) ({_ENDS})|the TODO [\d, -]+ cell .* did not run|TODO \d+ {REASON_HEAD})"
)


def fault_lines(reason: str) -> list[str]:
    """The lines of a row's `reason` that say a TODO hung, crashed or did not run."""
    return [part for part in (reason or "").split("; ") if FAULT_LINE.match(part)]


def console_lines(outcomes) -> str:
    """For the console, after the table: each submission graded around a fault, in full."""
    lines = [
        f"  {o.student_id}: " + "; ".join(fault_lines(o.reason))
        for o in outcomes
        if fault_lines(o.reason)
    ]
    if not lines:
        return ""
    head = "graded around a TODO that hung, crashed or did not run (only its checks lost points):"
    return "\n".join([head, *lines])


def summary_section(rows: list[dict]) -> str:
    """For summary.html: the same, from grades.csv's rows; '' when there is none."""
    items = "".join(
        f"<tr><td>{esc(row['student_id'])}</td><td>{esc('; '.join(fault_lines(row.get('reason'))))}</td></tr>"
        for row in rows
        if fault_lines(row.get("reason"))
    )
    if not items:
        return ""
    return (
        "<h2>超时、崩溃或没能运行的 TODO / TODOs that hung, crashed or did not run</h2>"
        "<p>只有这些 TODO 的检查失分，其余照常评分 / only these TODOs' checks lost points.</p>"
        f"<table><tr><th>student</th><th>what</th></tr>{items}</table>"
    )
