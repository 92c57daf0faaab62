"""Grade cells generated from the hidden checks' declarations, and the code each one runs.

A check file (`checks/todo<N>.py`, or one file per part such as `checks/sched.py`) declares each
check once, beside its code:

    @check(points=4, title="基本", says="随机 list 输入，内容、顺序与重复 token 都与参考实现相同")
    def check_todo1_basic(ns): ...

and its TODOs' totals once (`TOTAL_POINTS = {1: 8}`). A source cell holding `#| checks: todo1.py`
lines becomes one grade cell per declaration, in the order the file declares them
(`grade_cells`): grade id `test_todo1_basic`, the points, the first line
`#@title TODO 1 · 基本（4 分）：…` (so the cell opens folded), and a hidden block naming the check, which the build replaces with
`check_code`: the common helpers, the part's helpers and the check file, joined into one code
string. Declarations are read with `ast`, never run; a malformed one is a `SourceError`.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import symtable
from dataclasses import dataclass

import nbformat

from .nbsource import CHECKS_DIR, PARTS, SourceError, check_file_text, nbgrader_meta

COMMON = "_common.py"  # helpers every check uses
TIMEBOX = "_timebox.py"  # the time box every check runs in (the visible checks too)
DECORATOR = "check"
_CHECKS_LINE = re.compile(r"^#\| checks: ([\w-]+\.py)[ \t]*$")
_CHECK_NAME = re.compile(r"^check_todo(\d+)_\w+$")
_DECLARED = ("points", "title", "says")
_OPTIONAL = ("seconds",)  # the check's time box, where BOX_SECONDS is too short
_TRIPLE = "'" * 3


@dataclass(frozen=True)
class Check:
    """One declared check: `check_todo<N>_<name>` in `filename`, worth `points`."""

    filename: str
    name: str
    todo: int
    points: int
    title: str
    says: str
    seconds: float | None = None  # None: the default box, `box_seconds()`

    @property
    def box(self) -> float:
        """The seconds this check's time box gives the learner's code."""
        return box_seconds() if self.seconds is None else self.seconds

    @property
    def grade_id(self) -> str:
        return "test_" + self.name.removeprefix("check_")

    @property
    def header(self) -> str:
        """The grade cell's first line: what it checks and its points."""
        return f"#@title TODO {self.todo} · {self.title}（{self.points} 分）：{self.says}"


def is_checks_cell(cell) -> bool:
    """Whether `cell` is a code cell holding only `#| checks: FILE.py` lines."""
    lines = cell.source.strip().splitlines()
    return cell.cell_type == "code" and bool(lines) and all(map(_CHECKS_LINE.match, lines))


def grade_cells(cell) -> list:
    """The cells a `#| checks:` cell stands for: a collapsed heading (`grade_heading`), then the
    grade cells, file by file, in declaration order."""
    filenames = [_CHECKS_LINE.match(line).group(1) for line in cell.source.strip().splitlines()]
    checks = [check for filename in filenames for check in declarations(filename)]
    return [grade_heading(checks), *map(grade_cell, checks)]


GRADE_HEADING = "#### 自动评分单元格（不用看）"
# JupyterLab 4 reads this cell metadata when it opens a notebook and hides every cell under the
# heading up to the next heading of its level or higher (`MarkdownCell`, "N cells hidden").
HEADING_COLLAPSED = "jp-MarkdownHeadingCollapsed"


def grade_heading(checks: list[Check]):
    """The markdown cell above a run of grade cells: one short heading that starts collapsed in
    JupyterLab, so a learner scrolls past one line instead of a cell per check. The next cell
    of the source after the grade cells must open with a heading of level 4 or higher, or
    JupyterLab hides it too (`tests/test_structure.py`)."""
    todos = sorted({check.todo for check in checks})
    span = f"TODO {todos[0]}" if len(todos) == 1 else f"TODO {todos[0]}–{todos[-1]}"
    points = sum(check.points for check in checks)
    source = (
        f"{GRADE_HEADING}\n\n"
        f"{span} 的 {len(checks)} 个评分单元格（共 {points} 分）折叠在这个标题下：每格只有一行注释，"
        "写着它查什么、值几分，检查代码在老师评分时才放进去。运行它们什么也不做；请不要删除或改动。"
    )
    return nbformat.v4.new_markdown_cell(source, metadata={HEADING_COLLAPSED: True})


def grade_cell(check: Check):
    """A locked grade cell: its first line (a `#@title`, so it opens folded), then a hidden block
    naming the check."""
    source = "\n".join(
        (
            check.header,
            "### BEGIN HIDDEN TESTS",
            f"#| check: {check.filename}::{check.name}",
            "### END HIDDEN TESTS",
        )
    )
    meta = {
        "grade": True,
        "grade_id": check.grade_id,
        "locked": True,
        "points": check.points,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta})


def declarations(filename: str) -> list[Check]:
    """The checks `filename` declares, in file order; a `SourceError` names what is malformed:
    a check without a declaration (or with a wrong one), a name that repeats or names no TODO
    of the file, or a TODO whose checks' points do not add up to its `TOTAL_POINTS`."""
    tree = _parse(filename)
    totals = total_points(filename, tree)
    found: list[Check] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        calls = [d for d in node.decorator_list if _is_declaration(d)]
        if not calls:
            if node.name.startswith("check_"):
                raise SourceError(f"{filename}: {node.name} has no @{DECORATOR}(...) declaration")
            continue
        where = f"{filename}:{node.lineno} {node.name}"
        if len(calls) > 1:
            raise SourceError(f"{where}: declared {len(calls)} times")
        found.append(_declared(filename, node.name, calls[0], where, totals))
    names = [check.name for check in found]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SourceError(f"{filename}: {', '.join(repeated)} defined more than once")
    for todo, total in totals.items():
        points = sum(check.points for check in found if check.todo == todo)
        if points != total:
            raise SourceError(
                f"{filename}: the checks of TODO {todo} give {points} points, "
                f"TOTAL_POINTS says {total}"
            )
    return found


def total_points(filename: str, tree: ast.Module | None = None) -> dict[int, int]:
    """`TOTAL_POINTS` of a check file: {TODO number: its points}, read without running the file."""
    tree = tree or _parse(filename)
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "TOTAL_POINTS"
        ):
            try:
                totals = ast.literal_eval(node.value)
            except ValueError:
                totals = None
            if (
                isinstance(totals, dict)
                and totals
                and all(type(k) is int and type(v) is int and v > 0 for k, v in totals.items())
            ):
                return totals
            raise SourceError(f"{filename}: TOTAL_POINTS must be a literal {{TODO: points}} dict")
    raise SourceError(f"{filename}: no TOTAL_POINTS = {{TODO: points}} (each TODO's total)")


def check_code(filename: str, name: str | None = None) -> str:
    """The code a grade cell runs for check `name` of `filename`: of the common helpers, the
    part's helpers (`_<part key>.py`, where the part has one) and the file itself, joined in that
    order (the time box ahead of them), the statements `name` needs (`needed_code`). Without
    `name`, all of them."""
    pieces = [TIMEBOX, COMMON, *part_helpers(filename), filename]
    texts = []
    for piece in pieces:
        text = check_file_text(piece).rstrip()
        if _TRIPLE in text or text.endswith("\\"):
            raise SourceError(f"{piece} cannot be inlined: it holds {_TRIPLE} or ends in \\")
        texts.append(text)
    joined = "\n\n\n".join(texts)
    return joined if name is None else needed_code(joined, name, where=filename)


@functools.lru_cache(maxsize=256)  # keyed by the text: the build asks once a cell, tests often
def needed_code(code: str, name: str, where: str = "<checks>") -> str:
    """The top-level statements of `code` that defining `name` needs, in their order, each with
    the comment lines right above it.

    A grade cell runs one check, and the helpers of a whole part are most of its text (a part's
    file is 25 kB): the kernel parses and nbgrader stores, copies and hashes every byte of it, in
    each of 70 cells of each submission. Kept: every statement that binds `name`, or binds a
    name a kept statement reads, and every statement that binds nothing (it may act), bare
    strings (docstrings) excepted. A `SourceError` names a global that the kept code reads and
    nothing defines, so a check cannot meet a NameError while grading.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        raise SourceError(f"{where}:{error.lineno}: {error.msg}") from None
    statements = [s for s in tree.body if not _is_bare_string(s)]
    binds = [_bound_names(s) for s in statements]
    reads = [_read_names(s) for s in statements]
    needed, kept = {name}, set()
    grew = True
    while grew:
        grew = False
        for i in range(len(statements)):
            if i not in kept and (not binds[i] or binds[i] & needed):
                kept.add(i)
                needed |= reads[i]
                grew = True
    if not any(name in binds[i] for i in kept):
        raise SourceError(f"a grade cell names {where}::{name}, which it does not define")
    lines = code.splitlines()
    blocks, last_end = [], 0
    for i in sorted(kept):
        first, end = _first_line(statements[i], lines), statements[i].end_lineno
        if first <= last_end:
            raise SourceError(f"{where}:{first}: one top-level statement a line, please")
        blocks.append("\n".join(lines[first - 1 : end]))
        last_end = end
    text = "\n\n\n".join(blocks)
    _defines_what_it_reads(text, where, name)
    return text


def _is_bare_string(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _bound_names(statement: ast.stmt) -> set[str]:
    """The module-level names `statement` binds (over-approximated: a local bound inside a
    top-level `for` or `with` counts too; harmless, it only keeps more)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        declared = {
            n for node in ast.walk(statement) if isinstance(node, ast.Global) for n in node.names
        }
        return {statement.name} | declared
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    return {
        node.id
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
    }


def _read_names(statement: ast.stmt) -> set[str]:
    """Every name `statement` reads anywhere inside it (locals too: harmless, as above)."""
    return {
        node.id
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }


def _first_line(statement: ast.stmt, lines: list[str]) -> int:
    """Where `statement` starts, its decorators and the comment lines right above it included."""
    first = min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", [])])
    while first > 1 and lines[first - 2].lstrip().startswith("#"):
        first -= 1
    return first


def _defines_what_it_reads(code: str, where: str, name: str) -> None:
    """A `SourceError` naming each global that `code` reads and neither binds nor is a builtin."""
    table = symtable.symtable(code, where, "exec")
    defined = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    defined |= set(dir(builtins)) | {"__name__"}
    missing, scopes = set(), [table]
    while scopes:
        scope = scopes.pop()
        scopes += scope.get_children()
        for symbol in scope.get_symbols():
            global_read = symbol.is_referenced() and (
                symbol.is_global() or scope.get_type() == "module"
            )
            if global_read and symbol.get_name() not in defined:
                missing.add(symbol.get_name())
    if missing:
        raise SourceError(
            f"{where}: {name}'s code reads {', '.join(sorted(missing))}, which nothing defines"
        )


def part_helpers(filename: str) -> list[str]:
    """The helper files of the parts whose TODOs `filename` checks (most files: one part)."""
    todos = total_points(filename)
    keys = [part.key for part in PARTS if set(part.todos) & set(todos)]
    return [f"_{key}.py" for key in keys if (CHECKS_DIR / f"_{key}.py").is_file()]


def _parse(filename: str) -> ast.Module:
    """The syntax tree of a check file (read-only: it is shared while the text is unchanged)."""
    return _parsed(check_file_text(filename), filename)


@functools.lru_cache(maxsize=64)  # keyed by the text: a test run asks for each file's tree often
def _parsed(text: str, filename: str) -> ast.Module:
    try:
        return ast.parse(text, filename)
    except SyntaxError as error:
        raise SourceError(f"{filename}:{error.lineno}: {error.msg}") from None


def _is_declaration(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Name) and target.id == DECORATOR


def _declared(filename, name, call, where, totals) -> Check:
    """One `@check(points=..., title=..., says=...)` read as a Check, or a SourceError."""
    number = _CHECK_NAME.match(name)
    if not number:
        raise SourceError(f"{where}: a check is named check_todo<N>_<name>")
    if int(number.group(1)) not in totals:
        raise SourceError(f"{where}: TODO {number.group(1)} is not in TOTAL_POINTS {totals}")
    if not isinstance(call, ast.Call) or call.args:
        raise SourceError(f"{where}: write @{DECORATOR}(points=N, title='...', says='...')")
    keywords = [k.arg for k in call.keywords]
    if sorted(set(keywords) - set(_OPTIONAL)) != sorted(_DECLARED) or len(set(keywords)) < len(
        keywords
    ):
        raise SourceError(
            f"{where}: @{DECORATOR} takes exactly {_DECLARED}, and optionally {_OPTIONAL}; "
            f"got {keywords}"
        )
    try:
        values = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except ValueError:
        raise SourceError(f"{where}: @{DECORATOR}'s values must be literals") from None
    points, title, says = (values[k] for k in _DECLARED)
    seconds = values.get("seconds")
    if seconds is not None and (type(seconds) not in (int, float) or not 0 < seconds <= 60):
        raise SourceError(f"{where}: seconds must be a number of seconds (0, 60], got {seconds!r}")
    if type(points) is not int or points <= 0:
        raise SourceError(f"{where}: points must be a positive int, got {points!r}")
    for key, text in (("title", title), ("says", says)):
        if type(text) is not str or not text.strip() or "\n" in text:
            raise SourceError(f"{where}: {key} must be one non-empty line, got {text!r}")
    return Check(filename, name, int(number.group(1)), points, title, says, seconds)


def box_seconds() -> float:
    """`BOX_SECONDS` of the time box (`_timebox.py`): the box of every check that does not say
    `seconds=`, and of every visible check."""
    return timebox_constant("BOX_SECONDS")


def timebox_constant(name: str) -> float:
    """A number that `_timebox.py` sets (`BOX_SECONDS`, `_GRACE_SECONDS`, ...), read without
    running it."""
    for node in _parse(TIMEBOX).body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == [name]
            and type(getattr(node.value, "value", None)) in (int, float)
        ):
            return node.value.value
    raise SourceError(f"{TIMEBOX}: no {name} = <number>")


@dataclass(frozen=True)
class TimeBoxes:
    """Every time box of the notebook: what the grader's own limits are derived from."""

    box: float  # a visible check's box, and a hidden one's unless it says seconds=
    grace: float  # how long past its box a check whose code swallows the alarm may go on
    hidden: tuple[float, ...]  # each grade cell's box
    visible: tuple[int, ...]  # how many checks each visible cell runs (a box each)

    @property
    def total(self) -> float:
        """Seconds of boxes in a notebook whose every check runs its box out."""
        return sum(self.hidden) + sum(self.visible) * self.box

    @property
    def longest_cell(self) -> float:
        """Seconds of boxes in the cell with the most of them."""
        return max([max(self.hidden, default=0.0), *(n * self.box for n in self.visible)])

    @property
    def most_in_a_cell(self) -> int:
        """How many boxes the cell with the most of them has."""
        return max([1, *self.visible])


# A visible check is a function `check_todo<N>...()` or `visible_check_todo<N>...()` of a part
# file; a cell runs those it defines.
_VISIBLE_CHECK = re.compile(r"^def (?:visible_)?check_todo\d+\w*\(\):", re.M)


def time_boxes() -> TimeBoxes:
    """The notebook's time boxes, read from the check files and the part files."""
    hidden = [
        check.box for path in sorted(CHECKS_DIR.glob("[!_]*.py")) for check in declarations(path.name)
    ]
    visible = []
    for part in sorted(CHECKS_DIR.parent.glob("part*.py")):
        cells = re.split(r"^# %%", part.read_text(encoding="utf-8"), flags=re.M)
        visible += [len(_VISIBLE_CHECK.findall(cell)) for cell in cells]
    return TimeBoxes(
        box_seconds(),
        timebox_constant("_GRACE_SECONDS") + timebox_constant("_TICK_SECONDS"),
        tuple(hidden),
        tuple(n for n in visible if n),
    )


# A grade cell's first line as `Check.header` writes it, read back where a person sees the check
# (the feedback page from the autograded notebook, summary.html from the release).
# Released before the grade cells folded, it read `# TODO …`; since, `#@title TODO …`.
HEADER = re.compile(
    r"^#(?: ?@title)? TODO (?P<todo>\d+) · (?P<title>.+?)（[\d.]+ 分）：(?P<says>.*)$"
)


def check_titles(nb) -> dict[str, tuple[str, str]]:
    """{grade_id: (title, says)} of every grade cell of `nb` whose first line is a check's header."""
    titles = {}
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        found = HEADER.match(cell.source.lstrip().split("\n", 1)[0])
        if found:
            titles[meta.get("grade_id", "")] = (found["title"], found["says"].strip())
    return titles


def check_label(grade_id: str, titles: dict) -> str:
    """`TODO 2 · 尾块` for a check with a title (`check_titles`), else its grade id."""
    found = re.match(r"^test_todo(\d+)_", grade_id)
    if grade_id in titles and found:
        return f"TODO {found[1]} · {titles[grade_id][0]}"
    return grade_id
