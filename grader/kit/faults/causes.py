"""The first cause of a run of failed checks: an answer cell that did not run.

When a learner's answer cell does not compile (a `SyntaxError`) or raises while it is defined
(a `NameError` at the top of the cell...), every check of its TODOs fails with a consequence
("找不到 PrefixCacheManager 类…", once per check). `definition_errors` finds each such cell in
the executed notebook, with the TODOs it answers, the error and its line; the console and
grades.csv get one line per cell (`reason`), the feedback page one line per cell above the
table and the cause under each TODO it cost (`report/feedback.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..authoring.nbsource import nbgrader_meta, todo_number

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")
NAMED_TODO = re.compile(r"todo(\d+)_")
# IPython's name for a cell's code in a SyntaxError's message: the line is given apart.
CELL_FILE = re.compile(r"\s*\(\d+\.py, line \d+\)")


@dataclass(frozen=True)
class CellError:
    """Answer cell `label` (answering `todos`) raised `error` at `line` of the cell."""

    label: str
    todos: tuple[int, ...]
    error: str
    line: int | None

    @property
    def todo_text(self) -> str:
        """`TODO 9` or `TODO 1–8` (a run) or `TODO 15、16` (otherwise)."""
        todos = self.todos
        if len(todos) > 2 and list(todos) == list(range(todos[0], todos[-1] + 1)):
            return f"TODO {todos[0]}–{todos[-1]}"
        return "TODO " + "、".join(map(str, todos)) if todos else self.label

    @property
    def reason(self) -> str:
        """The instructor's line: `the TODO 1-8 cell did not run: SyntaxError: ... (line 32)`."""
        where = f" (line {self.line})" if self.line else ""
        todos = self.todo_text.replace("–", "-").replace("、", ", ")
        return f"the {todos} cell ({self.label}) did not run: {self.error}{where}"

    @property
    def learner_text(self) -> str:
        where = f"第 {self.line} 行" if self.line else "运行时"
        return (
            f"{self.todo_text} 的答案单元格没能运行（{where}）：{self.error}。"
            "先修好它：这个单元格里定义的类和函数都不存在，依赖它们的检查因此全部失败。"
        )


def definition_errors(nb) -> list[CellError]:
    """Every answer cell of the executed `nb` whose run ended in an error, in notebook order."""
    found = []
    for index, cell in enumerate(nb.cells):
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("solution") or meta.get("grade"):
            continue
        error = next((o for o in cell.get("outputs", []) if o.output_type == "error"), None)
        if error is None:
            continue
        text = f"{error.ename}: {error.evalue}" if error.get("evalue") else error.ename
        text = CELL_FILE.sub("", text)
        lines = CELL_LINE.findall(ANSI.sub("", "\n".join(error.get("traceback", []))))
        label = meta.get("grade_id", f"cell {index}")
        found.append(CellError(label, todos_of(nb, index), text, int(lines[-1]) if lines else None))
    return found


def todos_of(nb, index: int) -> tuple[int, ...]:
    """The TODOs answer cell `index` answers: the one its id names (`todo9_...`), else those its
    code mentions (`# TODO 3`), else those of the grade cells after it, up to the next answer
    cell."""
    cell = nb.cells[index]
    named = NAMED_TODO.match(nbgrader_meta(cell).get("grade_id", ""))
    if named:
        return (int(named.group(1)),)
    mentioned = sorted({int(n) for n in re.findall(r"TODO (\d+)", cell.source)})
    if mentioned:
        return tuple(mentioned)
    after = []
    for later in nb.cells[index + 1 :]:
        meta = nbgrader_meta(later)
        if meta.get("solution") and not meta.get("grade"):
            break
        if meta.get("grade") and todo_number(meta.get("grade_id", "")) is not None:
            after.append(todo_number(meta["grade_id"]))
    return tuple(sorted(set(after)))


def cause_by_todo(errors: list[CellError]) -> dict[int, CellError]:
    """TODO number -> the error of the answer cell it is answered in."""
    return {todo: error for error in errors for todo in error.todos}
