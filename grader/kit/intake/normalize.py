"""Normalise a learner's notebook against the released one before nbgrader grades it.

nbgrader finds cells by `metadata.nbgrader`. A notebook that went through Colab may have lost
that metadata, duplicated, reordered or retyped cells, and then scores 0. `normalize_submission`
rebuilds the submission on the release's skeleton: every release cell appears once, in the
release's order, with the release's exact metadata; solution cells keep the learner's code, test
and read-only cells get the release's source back, and the learner's other cells stay as plain
scratch cells where they were. Every change is reported as one short English line. Nothing here
runs code, touches files or modifies `release`; the same input always gives the same output.
"""

from __future__ import annotations

import ast
import bisect
import codecs
import copy
import difflib
import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field

import nbformat
from nbformat import v4

from ..errors import Ungradable

_REDOWNLOAD = "download the notebook again with File > Download > .ipynb"


@dataclass
class Normalized:
    """What `normalize_submission` returns; `repairs` is empty for an untouched submission."""

    notebook: nbformat.NotebookNode  # valid nbformat 4.5, ready for nbgrader autograde
    repairs: list[str]  # one short English line per repair, in a fixed order


def normalize_submission(raw: bytes, release: nbformat.NotebookNode) -> Normalized:
    """Parse a submitted .ipynb and rebuild it on `release` (the student notebook as released).

    Raises `Ungradable` for bad input, never anything else. Code cells come back without
    outputs (autograde executes them again). `release` is not modified.
    """
    repairs: list[str] = []
    cells = _read_cells(_parse(raw), repairs)
    refs = [_Ref.of(j, cell) for j, cell in enumerate(release.cells)]
    match = _attach(cells, refs, repairs)
    notebook = _assemble(cells, refs, match, release, repairs)
    return Normalized(notebook, repairs)


def repairs_summary(repairs: list[str]) -> str:
    """One line for a CSV column: "no repairs", or "3 repairs: first; second; third"."""
    if not repairs:
        return "no repairs"
    text = "; ".join(" ".join(line.split()) for line in repairs)
    return f"{len(repairs)} repair{'s' if len(repairs) > 1 else ''}: {text}"


# ---------------------------------------------------------------------------------- reading

_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")  # nbformat 4.5's cell id pattern
# Not `cellView`: the release itself folds its provided cells with it (a `#@title` cell).
_COLAB_CELL_KEYS = {"colab", "colab_type", "id", "outputId", "executionInfo"}
_COLAB_NB_KEYS = {"colab", "accelerator", "gpuClass", "widgets"}


@dataclass
class _Cell:
    """One learner cell, read defensively: plain strings and small dicts only."""

    index: int
    cell_type: str
    source: str
    grade_id: str | None = None
    cell_id: str | None = None  # valid and first of its kind, or None
    tags: list[str] = field(default_factory=list)
    attachments: dict | None = None
    names: frozenset[str] = field(init=False)  # see _features
    lines: tuple[str, ...] = field(init=False)
    head: str = field(init=False)

    def __post_init__(self):
        self.names, self.lines, self.head = _features(self.source)


def _parse(raw: bytes) -> dict:
    """The submission as a JSON dict of an nbformat 4 notebook, or `Ungradable`."""
    raw = raw.encode() if isinstance(raw, str) else bytes(raw)
    if not raw.strip():
        raise Ungradable("empty_file", f"the file is empty: save the notebook, then {_REDOWNLOAD}")
    if raw.startswith(b"PK\x03\x04"):
        raise Ungradable(
            "invalid_json",
            "the file is a zip archive named .ipynb, not a notebook: upload the .ipynb file itself",
        )
    try:  # UTF-8 (a BOM or not) as Jupyter writes it; UTF-16 with a BOM as Windows' Notepad may
        utf16 = raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
        data = json.loads(raw.decode("utf-16" if utf16 else "utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise Ungradable(
            "invalid_json", f"the file is not UTF-8 text (byte {exc.start}): {_REDOWNLOAD}"
        ) from None
    except json.JSONDecodeError as exc:
        raise Ungradable(
            "invalid_json",
            f"the file is not valid JSON (line {exc.lineno}, column {exc.colno}): {_REDOWNLOAD}",
        ) from None
    except (ValueError, RecursionError):  # numbers too long, nesting too deep
        raise Ungradable("invalid_json", f"the file is not usable JSON: {_REDOWNLOAD}") from None
    if isinstance(data, dict) and data.get("nbformat", 4) not in (4, "4"):  # v3: worksheets
        raise Ungradable(
            "not_a_notebook",
            f"the file is a notebook of format version {data.get('nbformat')!r}, not 4: "
            f"open it in Jupyter or Colab, save it, and {_REDOWNLOAD}",
        )
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Ungradable(
            "not_a_notebook",
            "the file is JSON but not a Jupyter notebook (it has no list of cells): "
            "upload the .ipynb file you worked in",
        )
    return data


def _read_cells(data: dict, repairs: list[str]) -> list[_Cell]:
    """Learner cells in order; format quirks, bad ids and Colab metadata become repair lines."""
    minor = data.get("nbformat_minor")
    if "nbformat" not in data or type(minor) is not int or minor < 0:
        repairs.append("set the missing notebook format version to 4.5")
    elif minor != 5:
        verb = "upgraded" if minor < 5 else "converted"
        repairs.append(f"{verb} notebook format 4.{minor} to 4.5")
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    if colab := sorted(_COLAB_NB_KEYS & set(meta)):
        repairs.append(f"removed Colab notebook metadata ({', '.join(colab)})")
    counts, seen, cells = Counter(), set(), []
    for raw in data["cells"]:
        if not isinstance(raw, dict):
            counts["malformed"] += 1
            continue
        cell_type, source = raw.get("cell_type"), _text(raw.get("source"))
        if cell_type == "heading":  # nbformat 3 leftover
            cell_type, source = "markdown", "# " + source
        elif cell_type not in ("code", "markdown", "raw"):
            counts["unknown"] += 1
            cell_type = "raw"
        cell = _Cell(len(cells), cell_type, source)
        meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
        counts["colab"] += bool(_COLAB_CELL_KEYS & set(meta))
        nbgrader = meta.get("nbgrader")
        if isinstance(nbgrader, dict) and isinstance(nbgrader.get("grade_id"), str):
            cell.grade_id = nbgrader["grade_id"]
        tags = meta.get("tags") if isinstance(meta.get("tags"), list) else []
        tags = [_clean(t) for t in tags if isinstance(t, str) and t and "," not in t]
        cell.tags = list(dict.fromkeys(tags))  # unique, in order, as nbformat requires
        if cell_type != "code" and isinstance(raw.get("attachments"), dict):
            cell.attachments = _attachments(raw["attachments"])
        cell_id = raw.get("id")
        if cell_id is None:
            counts["missing"] += 1
        elif not isinstance(cell_id, str) or not _ID.match(cell_id):
            counts["invalid"] += 1
        elif cell_id in seen:
            counts["duplicated"] += 1
        else:
            cell.cell_id = cell_id
            seen.add(cell_id)
        cells.append(cell)
    for key, line, noun in [
        ("malformed", "dropped {}", "malformed cell"),
        ("unknown", "turned {} into raw cells", "cell of unknown type"),
        ("missing", "assigned {}", "missing cell id"),
        ("duplicated", "replaced {}", "duplicated cell id"),
        ("invalid", "replaced {}", "invalid cell id"),
        ("colab", "removed Colab metadata from {}", "cell"),
    ]:
        if counts[key]:
            repairs.append(line.format(_n(counts[key], noun)))
    return cells


def _n(count: int, noun: str) -> str:
    """Count and noun: "1 cell id", "2 cell ids", "2 cells of unknown type"."""
    head, _, tail = noun.partition(" of ")
    return f"{count} {head}{'' if count == 1 else 's'}" + (f" of {tail}" if tail else "")


def _text(value) -> str:
    """A cell source as one string (nbformat allows a list of lines); junk becomes ""."""
    if isinstance(value, list):
        value = "".join(part for part in value if isinstance(part, str))
    return _clean(value) if isinstance(value, str) else ""


def _clean(text):
    """`text` (a str or list of str) writable as UTF-8: JSON may carry lone surrogates."""
    if isinstance(text, list):
        return [_clean(part) for part in text]
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _attachments(value: dict) -> dict:
    """Only {name: {mimetype: str or list of str}} (valid nbformat); anything else is dropped."""
    kept = {}
    for name, bundle in value.items():
        bundle = bundle if isinstance(bundle, dict) else {}
        bundle = {
            _clean(mime): _clean(data)
            for mime, data in bundle.items()
            if isinstance(data, str)
            or (type(data) is list and all(isinstance(x, str) for x in data))
        }
        if bundle:
            kept[_clean(name)] = bundle
    return kept


# --------------------------------------------------------------------------------- matching

_THRESHOLD = 0.6  # below this a learner cell is scratch, not a copy of a release cell
_STUB = {"# YOUR CODE HERE", "raise NotImplementedError()", "raise NotImplementedError"}
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


@dataclass
class _Ref:
    """One release cell and what identifies it."""

    index: int
    cell: nbformat.NotebookNode
    kind: str  # "solution", "test", "read-only" or "plain" (no nbgrader role)
    grade_id: str | None
    names: frozenset[str] = field(init=False)  # see _features
    lines: tuple[str, ...] = field(init=False)
    head: str = field(init=False)

    @classmethod
    def of(cls, index: int, cell) -> _Ref:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        kind = (
            "solution"
            if meta.get("solution")
            else "test"
            if meta.get("grade")
            else "read-only"
            if meta.get("locked") or meta.get("task")
            else "plain"
        )
        ref = cls(index, cell, kind, meta.get("grade_id") or None)
        ref.names, ref.lines, ref.head = _features(_text(cell.get("source")))
        return ref

    @property
    def label(self) -> str:
        return f"{self.kind} cell {self.grade_id or self.index + 1}"


def _features(source: str) -> tuple[frozenset[str], tuple[str, ...], str]:
    """Defined names ("Class", "Class.method", "func"), significant lines, first line."""
    # A class's cells are mostly the release's own text: each is parsed once per batch.
    return _features_of_short(source) if len(source) < _CACHED_SOURCE else _read_features(source)


_CACHED_SOURCE = 64 * 1024  # longer cells are parsed each time, not kept


@functools.lru_cache(maxsize=4096)
def _features_of_short(source: str) -> tuple[frozenset[str], tuple[str, ...], str]:
    return _read_features(source)


def _read_features(source: str) -> tuple[frozenset[str], tuple[str, ...], str]:
    try:
        names = set()
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {
                    f"{node.name}.{n.name}"
                    for n in node.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # magics, prose, junk
        names, owner = set(), None
        for indent, keyword, name in _DEF.findall(source):
            if not indent:
                names.add(name)
                owner = name if keyword == "class" else None
            elif owner and keyword == "def":
                names.add(f"{owner}.{name}")
    lines = tuple(s for line in source.splitlines()[:500] if (s := line.strip()))
    return frozenset(names), lines, lines[0] if lines else ""


def _score(cell: _Cell, ref: _Ref, floor: float = 0.0) -> float:
    """How surely learner `cell` is release `ref` with its metadata lost: 0 (unrelated) to 1.

    A score below `floor` is only known to be below it (the value returned is then no more
    than the true score): the line diff, the costly part, is skipped when its upper bounds
    show it can neither reach `floor` nor beat the other signs.
    """
    scores = [0.0]
    if shared := cell.names & ref.names:  # shares class/function definitions
        scores.append(0.5 + 0.5 * len(shared) / len(ref.names))
    if ref.kind != "solution" and ref.head.startswith("#") and cell.head == ref.head:
        scores.append(0.9)  # a test cell's first comment says what it checks
    stub = [line for line in ref.lines if line not in _STUB and len(line) > 3]
    if len(stub) >= 2:  # still contains the stub / release text
        scores.append(len(set(stub) & set(cell.lines)) / len(stub))
    best = max(scores)
    if not (cell.lines and ref.lines) or not _may_beat(_length_bound(cell, ref), best, floor):
        return best
    diff = difflib.SequenceMatcher(None, cell.lines, ref.lines, False)
    if _may_beat(diff.quick_ratio(), best, floor):  # quick_ratio() too bounds ratio() above
        best = max(best, diff.ratio())
    return best


def _length_bound(cell: _Cell, ref: _Ref) -> float:
    """The most `SequenceMatcher.ratio()` of the two cells' lines can be (its real_quick_ratio)."""
    shorter, total = min(len(cell.lines), len(ref.lines)), len(cell.lines) + len(ref.lines)
    return 2.0 * shorter / total


def _may_beat(bound: float, best: float, floor: float) -> bool:
    return bound > best and bound >= floor


def _attach(cells: list[_Cell], refs: list[_Ref], repairs: list[str]) -> dict[int, int]:
    """Map release index -> learner index: by grade_id first, then by content and position."""
    by_gid = {ref.grade_id: ref for ref in refs if ref.grade_id}
    match: dict[int, int] = {}
    claimed = [c for c in cells if c.grade_id in by_gid]
    for gid in dict.fromkeys(c.grade_id for c in claimed):
        ref, copies = by_gid[gid], [c for c in claimed if c.grade_id == gid]
        match[ref.index] = max(copies, key=lambda c: (_score(c, ref), -c.index)).index
        if len(copies) > 1:
            repairs.append(
                f"kept {_n(len(copies) - 1, 'duplicate')} of {gid} as scratch (no grading metadata)"
            )
    free = [c for c in cells if c.grade_id not in by_gid]
    anchors = sorted(match.items())  # (release index, learner index) found by grade_id

    def distance(cell: _Cell, j: int) -> int:  # from where the cells around j say it should be
        k = bisect.bisect_left(anchors, (j, -1)) - 1
        return abs(cell.index - (anchors[k][1] + j - anchors[k][0] if k >= 0 else j))

    pairs = sorted(
        (-score, c.cell_type != r.cell.cell_type, distance(c, r.index), c.index, r.index)
        for r in refs
        if r.index not in match
        for c in free
        if (score := _score(c, r, _THRESHOLD)) >= _THRESHOLD
    )
    taken, by_content = set(), []
    for *_, i, j in pairs:
        if j not in match and i not in taken:
            match[j], taken = i, taken | {i}
            by_content.append(j)
    solutions = [r for r in refs if r.kind == "solution"] or [r for r in refs if r.grade_id]
    if solutions and not claimed and not any(match.get(r.index) is not None for r in solutions):
        names = sorted({n for r in solutions for n in r.names if "." not in n})[:4]
        raise Ungradable(
            "wrong_assignment",
            "no cell of this notebook belongs to the assignment (no grade id matches and none "
            f"defines {', '.join(names) or 'its solution code'}): upload the notebook you worked "
            "on for this assignment",
        )
    if attached := [refs[j].grade_id for j in sorted(by_content) if refs[j].grade_id]:
        repairs.append(
            f"re-attached {_n(len(attached), 'cell')} whose nbgrader metadata was "
            f"lost: {', '.join(attached)}"
        )
    if moved := len(match) - _longest_increasing(
        [j for j, _ in sorted(match.items(), key=lambda p: p[1])]
    ):
        repairs.append(f"put {_n(moved, 'moved cell')} back in the release's order")
    return match


def _longest_increasing(values: list[int]) -> int:
    """Length of the longest strictly increasing subsequence (patience sorting)."""
    tails: list[int] = []
    for value in values:
        k = bisect.bisect_left(tails, value)
        tails[k : k + 1] = [value]
    return len(tails)


# --------------------------------------------------------------------------------- building


def _assemble(cells, refs, match, release, repairs) -> nbformat.NotebookNode:
    """Release cells in release order, each followed by the scratch cells that followed it."""
    where = {i: j for j, i in match.items()}
    after: dict[int, list[_Cell]] = {}
    anchor = -1  # scratch cells before any matched cell come first
    for cell in cells:
        if cell.index in where:
            anchor = where[cell.index]
        else:
            after.setdefault(anchor, []).append(cell)
    out = [(_scratch(cell), True) for cell in after.get(-1, [])]
    for ref in refs:
        mine = cells[match[ref.index]] if ref.index in match else None
        out.append((_rebuild(ref, mine, repairs), False))
        out.extend((_scratch(cell), True) for cell in after.get(ref.index, []))
    if restored := sum(ref.kind == "plain" and ref.index not in match for ref in refs):
        repairs.append(f"restored {_n(restored, 'deleted instruction cell')}")
    used: set[str] = set()
    for cell, _ in sorted(out, key=lambda pair: pair[1]):  # release cells keep their ids first
        base, k = cell.id, 1
        while cell.id in used:
            k += 1
            cell.id = f"{base[:56]}-{k}"  # stays within nbformat's 64 characters
        used.add(cell.id)
    notebook = v4.new_notebook(
        cells=[cell for cell, _ in out], metadata=copy.deepcopy(release.get("metadata", {}))
    )
    nbformat.validate(notebook)  # learner data kept is only strings: failing here is a bug
    return notebook


def _rebuild(ref: _Ref, mine: _Cell | None, repairs: list[str]) -> nbformat.NotebookNode:
    """The release cell, with the learner's source where it is theirs to write."""
    cell_id = ref.cell.get("id")
    if not (isinstance(cell_id, str) and _ID.match(cell_id)):
        cell_id = re.sub(r"[^A-Za-z0-9_-]", "-", ref.grade_id or "")[:64] or f"cell-{ref.index}"
    source, attachments = _text(ref.cell.get("source")), ref.cell.get("attachments")
    if mine is None and ref.kind != "plain":
        extra = " (the stub, raises NotImplementedError)" if ref.kind == "solution" else ""
        repairs.append(f"restored deleted {ref.label}{extra}")
    elif mine is not None:
        if mine.cell_type != ref.cell.cell_type:
            repairs.append(
                f"restored {ref.cell.cell_type} type of {ref.label} (was {mine.cell_type})"
            )
        if ref.kind in ("solution", "plain"):
            source, attachments = mine.source, mine.attachments
        elif _canon(mine.source) != _canon(source):
            repairs.append(f"restored edited {ref.label}")
    metadata = copy.deepcopy(ref.cell.get("metadata", {}))
    return _new_cell(ref.cell.cell_type, source, metadata, cell_id, attachments)


def _scratch(cell: _Cell) -> nbformat.NotebookNode:
    """A learner cell no release cell claims: kept as is, without grading metadata."""
    metadata = {"tags": cell.tags} if cell.tags else {}
    return _new_cell(
        cell.cell_type,
        cell.source,
        metadata,
        cell.cell_id or f"scratch-{cell.index}",
        cell.attachments,
    )


def _new_cell(cell_type, source, metadata, cell_id, attachments=None):
    """A fresh nbformat 4.5 cell: code cells without outputs or execution count.

    Not validated cell by cell (nbformat's `new_*_cell` would spend 40 ms a notebook on it):
    `_assemble` validates the whole notebook once.
    """
    cell = {"id": cell_id, "cell_type": cell_type, "metadata": metadata, "source": source}
    if cell_type == "code":
        cell.update(execution_count=None, outputs=[])
    elif attachments:
        cell["attachments"] = copy.deepcopy(attachments)
    return nbformat.from_dict(cell)


def _canon(source: str) -> str:
    """Source compared for edits: trailing spaces and blank edges do not count."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines())
