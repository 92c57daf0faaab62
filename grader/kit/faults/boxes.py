"""Checks whose time box ended them: a TODO that loops, seen at class level.

A hidden check runs the learner's code in a time box (`checks/_timebox.py`); code that does not
return within it fails the check with a message "… 在 4 秒内没有返回 …，停在 <method> 的第 N
行 …", the kernel lives on and the next check runs. Nothing ended the kernel, so the resuming
executor (`resume.py`) records no fault, and without this module the row's `reason` stays empty
and the student is missing from the class's list of TODOs that hung or crashed (issue 40).
`timed_out_checks(nb)` reads those messages back from the executed notebook: one `BoxTimeout`
a TODO, whose `reason` (Chinese) goes into grades.csv's `reason`, the console's and
summary.html's lists (`lines.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..authoring.nbsource import nbgrader_meta, todo_number

# The words of `_timebox.timeout_text`: keep the two in step.
BOX_ENDED = re.compile(r"在 (\d+(?:\.\d+)?) 秒内没有返回")
STOPPED_AT = re.compile(r"停在 (\S+?) 的第 (\d+) 行")
REASON_HEAD = "超时："  # what `lines.FAULT_LINE` knows a reason line of this module by


@dataclass(frozen=True)
class BoxTimeout:
    """The checks `grade_ids` of TODO `todo` each ran out of their box of `seconds`."""

    todo: int
    grade_ids: tuple[str, ...]
    seconds: str
    where: str = ""  # "match_prefix 的第 2 行": where the learner's code was, if the message says

    @property
    def reason(self) -> str:
        """`TODO 4 超时：检查 test_todo4_basic、… 各在时间上限 4 秒内没有返回（停在 …；死循环？），只这些检查失分`."""
        where = f"停在 {self.where}；" if self.where else ""
        return (
            f"TODO {self.todo} {REASON_HEAD}检查 {'、'.join(self.grade_ids)} 各在时间上限 "
            f"{self.seconds} 秒内没有返回（{where}死循环？），只这些检查失分"
        )


def timed_out_checks(nb) -> list[BoxTimeout]:
    """The TODOs of the executed `nb` whose grade cells failed because their box ended, in
    TODO order. A cell under which the kernel ended is not one: `resume.py` reports it."""
    found: dict[int, list[tuple[str, re.Match, re.Match | None]]] = {}
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        todo = todo_number(meta.get("grade_id", "")) if meta.get("grade") else None
        if cell.cell_type != "code" or todo is None:
            continue
        for output in cell.get("outputs", []):
            text = output.get("evalue", "") if output.get("output_type") == "error" else ""
            if output.get("ename") == "AssertionError" and (box := BOX_ENDED.search(text)):
                found.setdefault(todo, []).append((meta["grade_id"], box, STOPPED_AT.search(text)))
                break
    timeouts = []
    for todo, cells in sorted(found.items()):
        stops = [stop for _, _, stop in cells if stop]
        where = f"{stops[0][1]} 的第 {stops[0][2]} 行" if stops else ""
        seconds = cells[0][1][1]
        timeouts.append(BoxTimeout(todo, tuple(g for g, _, _ in cells), seconds, where))
    return timeouts
