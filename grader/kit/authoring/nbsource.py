"""Read the one source of the chapter and run its reference code outside a notebook.

The source is a jupytext percent-format file with nbgrader metadata inline. Tests and
benchmarks use `solution_namespace()` to get the reference classes and functions without
going through a Jupyter kernel; they never import anything from the generated notebooks.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

from ..errors import SourceError
from ..paths import ASSIGNMENT, CHECKS_DIR, COURSE_SETTINGS, NOTEBOOK_NAME, REPO_ROOT, SOURCE_PATH

__all__ = [
    "ASSIGNMENT",
    "CHECKS_DIR",
    "COURSE_SETTINGS",
    "NOTEBOOK_NAME",
    "REPO_ROOT",
    "SOURCE_PATH",
    "SourceError",
]
# COURSE_SETTINGS names the course's GitHub repository (the "Open in Colab" badge).
_GITHUB_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_GITHUB_REMOTE = re.compile(
    r"^(?:https://github\.com/|git@github\.com:|ssh://git@github\.com/)"
    r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)


@dataclass(frozen=True)
class Part:
    """One part of the notebook: the TODOs it holds and whether its points count toward `score`."""

    key: str  # column name in grades.csv
    title: str  # as the learner reads it
    todos: tuple[int, ...]
    counted: bool  # False: a challenge part, reported beside the score, never inside it


# The one table of parts: (key, title, TODOs). Grade ids read `test_todo<N>_<check>`: the TODO
# number says the part. Which parts count toward `score` is the instructor's setting,
# `counted_parts` in grader/course.toml; the others are recorded beside the score.
_PART_TABLE = (
    ("core", "核心：PrefixCacheManager", tuple(range(1, 9))),
    ("kv", "第二部分：真实 KV", (9, 10)),
    ("block", "第三部分（选做）：块级缓存", tuple(range(11, 15))),
    ("sched", "第四部分：调度器", tuple(range(15, 20))),
    ("engine", "第五部分：引擎", tuple(range(20, 25))),
)
DEFAULT_COUNTED_PARTS = ("core", "kv", "sched", "engine")


def load_parts(settings: Path = COURSE_SETTINGS) -> tuple[Part, ...]:
    """The parts, each counted or not as `counted_parts` in `settings` says (default: all but
    part three). An unknown part key, or a setting that is not a list of keys, is an error."""
    with open(settings, "rb") as handle:
        chosen = tomllib.load(handle).get("counted_parts", list(DEFAULT_COUNTED_PARTS))
    keys = [key for key, _, _ in _PART_TABLE]
    if not isinstance(chosen, list) or not all(isinstance(k, str) for k in chosen):
        raise ValueError(f"{settings}: counted_parts must be a list of part keys, e.g. {keys}")
    unknown = [k for k in chosen if k not in keys]
    if unknown:
        raise ValueError(f"{settings}: counted_parts names {unknown}; the parts are {keys}")
    return tuple(Part(key, title, todos, key in chosen) for key, title, todos in _PART_TABLE)


PARTS = load_parts()
_GRADE_ID = re.compile(r"^test_todo(\d+)_")


def todo_number(grade_id: str) -> int | None:
    """The TODO a grade cell checks (`test_todo12_acquire` -> 12), or None for another id."""
    match = _GRADE_ID.match(grade_id)
    return int(match.group(1)) if match else None


def part_of(grade_id: str, parts: tuple[Part, ...] = PARTS) -> Part | None:
    """The part a grade cell belongs to, or None when its id names no TODO of any part."""
    number = todo_number(grade_id)
    return next((part for part in parts if number in part.todos), None)


def github_repo(settings: Path = COURSE_SETTINGS, root: Path = REPO_ROOT) -> str | None:
    """The course's GitHub repository as "owner/name", or None when nothing names one.

    `github_repo` in `settings` (grader/course.toml) when set; otherwise the `origin` remote
    of the git checkout at `root` when it is a GitHub address. A malformed setting is an error.
    """
    with open(settings, "rb") as handle:
        value = str(tomllib.load(handle).get("github_repo", "")).strip()
    if value:
        if not _GITHUB_REPO.match(value):
            raise ValueError(
                f'{settings}: github_repo = {value!r} is not of the form "owner/name" '
                "(for https://github.com/owner/name); leave it empty to use the git remote"
            )
        return value
    try:
        remote = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:  # no git: no remote to read
        return None
    match = _GITHUB_REMOTE.match(remote)
    return match.group(1) if match else None


def colab_url(repo: str) -> str:
    """The address that opens the student notebook of GitHub repository `repo` in Colab."""
    return f"https://colab.research.google.com/github/{repo}/blob/main/notebooks/{NOTEBOOK_NAME}"


def colab_texts(repo: str | None) -> dict[str, str]:
    """What the first cell's `{{colab_badge}}` and `{{colab_howto}}` become for `repo`."""
    if repo:
        return {
            "{{colab_badge}}": "[![在 Colab 中打开](https://colab.research.google.com/assets/"
            f"colab-badge.svg)]({colab_url(repo)})",
            "{{colab_howto}}": "点上面的徽章，或在 Colab 里选「文件 → 打开笔记本 → GitHub」，"
            f"粘贴 `{repo}` 后选 `notebooks/{NOTEBOOK_NAME}`。",
        }
    return {
        "{{colab_badge}}": "**在 Colab 中打开：** 进入 https://colab.research.google.com ，"
        f"选「文件 → 上传笔记本」，上传老师发给你的 `{NOTEBOOK_NAME}`。",
        "{{colab_howto}}": "按上面的方法上传本 `.ipynb` 文件；做完后同样用「文件 → 下载」取回。",
    }


def part_points(nb, parts: tuple[Part, ...] = PARTS) -> dict[str, float]:
    """Each part's points: the sum of its grade cells' points in `nb`."""
    points = {part.key: 0 for part in parts}
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        part = part_of(meta.get("grade_id", ""), parts) if meta.get("grade") else None
        if part is not None:
            points[part.key] += meta.get("points", 0)
    return points


def points_texts(nb, parts: tuple[Part, ...] = PARTS) -> dict[str, str]:
    """What the placeholders about points become: `{{grading_summary}}` in the first cell (each
    part's TODOs and points, which count toward the score, their total) and `{{points:<part>}}`
    in each part's heading ("30 分，计分" or "40 分，单独计分"), as `counted_parts` says."""
    points = part_points(nb, parts)
    texts = {
        f"{{{{points:{p.key}}}}}": f"{points[p.key]:g} 分，{'计分' if p.counted else '单独计分'}"
        for p in parts
    }
    return {"{{grading_summary}}": grading_summary(points, parts), **texts}


def grading_summary(points: dict[str, float], parts: tuple[Part, ...] = PARTS) -> str:
    """The first cell's sentence on points: the counted parts and their total, then the others."""
    counted = [p for p in parts if p.counted]
    others = [p for p in parts if not p.counted]

    def named(part):
        return f"{part.title}（TODO {part.todos[0]}–{part.todos[-1]}）{points[part.key]:g} 分"

    total = sum(points[p.key] for p in counted)
    text = "、".join(named(p) for p in counted) + f"，共 **{total:g} 分，计入成绩**"
    if others:
        text += "；" + "、".join(named(p) for p in others) + f"**单独记录，不计入这 {total:g} 分**"
    return text


# A marker line goes with its newline; a marker ending the cell (no newline) goes too.
_SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*(\n|\Z)", re.MULTILINE)
_HIDDEN_BLOCK = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*(\n|$)",
    re.MULTILINE | re.DOTALL,
)


# Hidden checks live in plain files next to the source (`checks/todo<N>.py`, one per TODO, or one
# per part), each check declared once (`checkcells`). A `#| checks: FILE.py` cell becomes that
# file's grade cells; each names one check in its hidden block, and the build inlines it there.
_CHECK_LINE = re.compile(r"^#\| check: ([\w-]+\.py)::(check_\w+)[ \t]*$", re.MULTILINE)
HIDDEN_CHECK_FILENAME = "<hidden check>"  # what a traceback names: it cannot quote the lines
_TRIPLE = "'" * 3


def named_checks(text: str) -> list[tuple[str, str]]:
    """The (file, function) pairs that `#| check: todo1.py::check_todo1_types` lines in `text` name."""
    return _CHECK_LINE.findall(text)


def check_file_text(filename: str) -> str:
    """The text of one file in checks/; a `SourceError` when it is missing."""
    path = CHECKS_DIR / filename
    if not path.is_file():
        raise SourceError(f"the source names {filename}, but {path} does not exist")
    return path.read_text(encoding="utf-8")


def load_checks(filename: str) -> dict:
    """Each check of a check file, built as its grade cell builds it (its own code, its own
    scope): {check name: function taking the notebook's namespace}."""
    from .checkcells import check_code, declarations

    checks = {}
    for declared in declarations(filename):
        scope: dict = {"__name__": "hidden_check"}
        exec(_compiled_check(check_code(filename, declared.name)), scope)
        checks[declared.name] = scope[declared.name]
    return checks


@functools.lru_cache(maxsize=256)  # keyed by the text; each load still runs it in a fresh scope
def _compiled_check(code: str):
    return compile(code, HIDDEN_CHECK_FILENAME, "exec")


def inline_checks(text: str) -> str:
    """A grade cell with each `#| check: FILE::NAME` line replaced by the check's code and a call.

    The code (`checkcells.check_code`: what the check needs of the common helpers, the part's
    and the file) runs in a scope of its own (a learner's cell cannot replace one of its
    helpers), compiled under a name no traceback can quote lines from; the check gets the
    notebook's namespace. A raw triple-quoted string keeps the code readable in formgrader.
    """
    from .checkcells import check_code

    def inline(match: re.Match) -> str:
        filename, name = match.groups()
        code = check_code(filename, name)
        if not re.search(rf"^def {name}\(ns\)", code, re.MULTILINE):
            raise SourceError(f"{filename}: {name} is not a check, def {name}(ns)")
        return "\n".join(
            (
                f"_hidden_code = r{_TRIPLE}",
                code,
                _TRIPLE,
                '_hidden_scope = {"__name__": "hidden_check"}',
                f'exec(compile(_hidden_code, "{HIDDEN_CHECK_FILENAME}", "exec"), _hidden_scope)',
                "del _hidden_code",
                f'_hidden_scope["{name}"](globals())',
            )
        )

    return _CHECK_LINE.sub(inline, text)


# A cell holding only `#| include: FILE.py` is replaced by the cells of that percent-format file,
# which sits next to the main source: one file per part, joined in this order by `read_source`.
_INCLUDE_LINE = re.compile(r"^#\| include: ([\w-]+\.py)\s*$")
# A line `#| code: FILE.py` in a code cell is replaced by the text of checks/FILE.py: code that
# the notebook and the grade cells both run (the time box), written once.
_CODE_LINE = re.compile(r"^#\| code: ([\w-]+\.py)[ \t]*$", re.MULTILINE)


def read_source(path: Path = SOURCE_PATH) -> nbformat.NotebookNode:
    """Parse the percent-format source into a notebook (nbgrader metadata included).

    Include cells (`#| include: part4_scheduler.py`) are replaced by the named file's cells, so
    a part can live in a file of its own while the notebook stays one; `#| checks: todo1.py`
    cells by the grade cells that check file declares (`checkcells.grade_cells`); a
    `#| code: _timebox.py` line by that file of checks/.

    Each call returns a notebook of its own. The parse is done once for as long as no file of
    the source's folder changes (a build reads the source three times, the tests many more).
    """
    folder = Path(path).resolve().parent
    stamp = tuple(
        (str(file), stat.st_mtime_ns, stat.st_size)
        for file in sorted(folder.rglob("*.py"))
        for stat in [file.stat()]
    )
    return copy.deepcopy(_parsed_source(Path(path).resolve(), stamp))


@functools.lru_cache(maxsize=4)
def _parsed_source(path: Path, stamp: tuple) -> nbformat.NotebookNode:
    """`read_source`'s parse; `stamp` (every file's path, mtime and size) keys the cache."""
    from .checkcells import grade_cells, is_checks_cell

    nb = jupytext.read(str(path), fmt="py:percent")
    cells = []
    for cell in nb.cells:
        included = _INCLUDE_LINE.match(cell.source) if cell.cell_type == "code" else None
        if included:
            part = path.parent / included.group(1)
            if not part.is_file():
                raise SourceError(
                    f"{path.name} includes {included.group(1)}, but {part} does not exist"
                )
            cells.extend(jupytext.read(str(part), fmt="py:percent").cells)
        else:
            cells.append(cell)
    for cell in cells:
        if cell.cell_type == "code":
            cell.source = _CODE_LINE.sub(lambda m: check_file_text(m.group(1)).rstrip(), cell.source)
    nb.cells = [
        new for cell in cells for new in (grade_cells(cell) if is_checks_cell(cell) else [cell])
    ]
    return nb


# Provided code a learner is not asked to read opens folded: a code cell whose first line is
# `#@title <what it provides>` (Colab's form syntax; `# @title`, as ruff format and newer Colab
# write it, too) gets both platforms' fold keys (`fold_keys`).
_FOLD_TITLE = re.compile(r"\A# ?@title[ \t]+(\S[^\n]*?)[ \t]*$", re.MULTILINE)


def fold_title(cell) -> str | None:
    """The title of a code cell that starts folded (its `#@title` first line), else None."""
    if cell.get("cell_type") != "code":
        return None
    match = _FOLD_TITLE.match(cell.get("source", ""))
    return match.group(1) if match else None


def fold_keys(cell) -> dict:
    """The cell metadata that folds a `#@title` cell's code behind its title when it opens:
    `cellView: "form"` (Colab shows the title only) and `jupyter.source_hidden` (JupyterLab
    collapses the input). {} for any other cell. The source, and so nbgrader's checksum of a
    locked cell, is the same folded or not."""
    if fold_title(cell) is None:
        return {}
    return {"cellView": "form", "jupyter": {"source_hidden": True}}


def nbgrader_meta(cell) -> dict:
    """The cell's nbgrader metadata, or {} for a plain cell."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def strip_solution_markers(text: str) -> str:
    """Reference code as the solutions notebook shows it: the markers go, the code stays."""
    return _SOLUTION_MARKER.sub("", text)


def strip_hidden_tests(text: str) -> str:
    """A grade cell as the learner sees it: hidden test blocks removed with their markers."""
    return _HIDDEN_BLOCK.sub("", text)


def solution_code_cells(nb=None, *, skip_tags=("measurement",)) -> list[str]:
    """Source of every non-grade code cell, solution markers removed, in notebook order.

    Grade cells (tests) are left out; so are cells carrying any tag in `skip_tags`.
    """
    nb = nb if nb is not None else read_source()
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code" or nbgrader_meta(cell).get("grade"):
            continue
        if set(cell.get("metadata", {}).get("tags", [])) & set(skip_tags):
            continue
        cells.append(strip_solution_markers(cell.source))
    return cells


def solution_namespace(nb=None, *, skip_tags=("measurement",), quiet=True) -> dict:
    """Execute the reference code cells in one fresh namespace and return it.

    Notebook-only syntax (lines starting with `%` or `!`) is skipped. Printed output is
    swallowed when `quiet` is true.
    """
    namespace: dict = {"__name__": "ch34_solution"}
    sink = io.StringIO() if quiet else None
    for code in solution_code_cells(nb, skip_tags=skip_tags):
        code = "\n".join(
            line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext():
            exec(compile(code, "<ch34 solution>", "exec", dont_inherit=True), namespace)
    return namespace
