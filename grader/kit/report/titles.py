"""What each check is called where a person reads it: its `title` and `says`, not its grade id.

Every grade cell starts with the line `checkcells.Check.header` writes from the check's
declaration, `# TODO 2 · 尾块（4 分）：长度不能整除、比一块还短时，不满的尾块也保留`; the release and
every autograded notebook carry it, so the report reads the titles from the notebook it has
(the feedback page from the autograded notebook, summary.html from the release).
"""

from __future__ import annotations

import re

from ..authoring.nbsource import nbgrader_meta

HEADER = re.compile(r"^# TODO (?P<todo>\d+) · (?P<title>.+?)（[\d.]+ 分）：(?P<says>.*)$")


def check_titles(nb) -> dict[str, tuple[str, str]]:
    """{grade_id: (title, says)} of every grade cell of `nb` whose first line is a check's header."""
    titles = {}
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        first = cell.source.lstrip().split("\n", 1)[0]
        found = HEADER.match(first)
        if found:
            titles[meta.get("grade_id", "")] = (found["title"], found["says"].strip())
    return titles


def label(grade_id: str, titles: dict) -> str:
    """`TODO 2 · 尾块` for a check with a title, else its grade id."""
    found = re.match(r"^test_todo(\d+)_", grade_id)
    if grade_id in titles and found:
        return f"TODO {found[1]} · {titles[grade_id][0]}"
    return grade_id
