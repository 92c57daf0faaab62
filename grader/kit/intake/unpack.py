"""Walk an export (a folder, zips inside it at most three deep) and sort its files.

`walk(folder, sink, collect)` calls `sink.notebook(path, source, parts)` for every notebook
(`collect(parts)` says whether a name is one) and `sink.skip(source, why, debris[, parts])` for
every other file, with why (`parts` for a file an LMS may have named after its student). The export is never modified: zips are extracted below `sink.scratch`,
keeping their files' times; a name that climbs out of its folder is cut back. A zip made on a
Chinese Windows stores GBK names without saying so; they are read as such.

Gradescope's "Export Submissions" holds `submission_metadata.yml` beside one
`submission_<id>/` folder per submission; `gradescope_ids(folder)` reads the submitters' `:sid:`
of each (its own YAML is plain enough for a line reader), and `sink.gradescope` keeps them.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from datetime import datetime
from pathlib import Path

from .layouts import BLACKBOARD

DEBRIS_DIRS = frozenset({"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".git"})
DEBRIS_FILES = frozenset({".ds_store", "thumbs.db", "desktop.ini"})
MAX_ZIP_DEPTH = 3
GRADESCOPE_METADATA = "submission_metadata.yml"


def walk(folder: Path, sink, collect, parts=(), prefix="", depth=0) -> None:
    """Report each file below `folder` to `sink`; `parts`/`prefix` name `folder` in the export."""
    entries = sorted(folder.iterdir(), key=lambda p: p.name)
    if any(e.name == GRADESCOPE_METADATA for e in entries):
        sink.gradescope[prefix] = gradescope_ids(folder / GRADESCOPE_METADATA)
    for entry in entries:
        source, here = prefix + entry.name, (*parts, entry.name)
        if entry.is_symlink():
            sink.skip(source, "a symbolic link (not followed)")
        elif entry.is_dir() and entry.name in DEBRIS_DIRS:
            for inner in sorted(p for p in entry.rglob("*") if not p.is_dir()):
                where = source + "/" + inner.relative_to(entry).as_posix()
                sink.skip(where, "operating-system debris", debris=True)
        elif entry.is_dir():
            walk(entry, sink, collect, here, source + "/", depth)
        elif entry.name.startswith("._") or entry.name.lower() in DEBRIS_FILES:
            sink.skip(source, "operating-system debris", debris=True)
        elif entry.suffix.lower() == ".zip":
            unzip(entry, sink, collect, parts, source, depth)
        elif collect(here):
            sink.notebook(entry, source, here)
        else:
            sink.skip(source, *other_file(entry), parts=here)


def other_file(entry: Path) -> tuple[str, bool]:
    """(why a file that is no notebook is not graded, whether it is mere bookkeeping)."""
    if entry.name == "timestamp.txt":
        return "nbgrader's time stamp of the submission (read with its notebook)", True
    if entry.name == GRADESCOPE_METADATA:
        return "Gradescope's list of submitters (read)", True
    if BLACKBOARD.match(entry.stem) and entry.suffix.lower() == ".txt":
        return "Blackboard's submission receipt", False
    return f"not a notebook ({entry.suffix or 'no extension'})", False


def unzip(entry: Path, sink, collect, parts, source: str, depth: int) -> None:
    if depth >= MAX_ZIP_DEPTH:
        sink.skip(source, f"a zip nested over {MAX_ZIP_DEPTH} deep")
        return
    into = Path(tempfile.mkdtemp(dir=sink.scratch))
    try:
        extract(entry, into)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        sink.skip(source, f"a damaged zip ({error})")
        return
    before = sink.count()
    # A zip stands for a folder of its own name (a student's 2023008.zip holds their work).
    walk(into, sink, collect, (*parts, entry.stem), source + "/", depth + 1)
    if sink.count() == before:
        sink.skip(source, "a zip with no notebook inside")


def gradescope_ids(path: Path) -> dict[str, tuple[list[str], datetime | None]]:
    """{"submission_<id>": ([sid of each submitter], created_at)} of Gradescope's metadata."""
    found: dict[str, tuple[list[str], datetime | None]] = {}
    current = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if head := re.match(r"^:?(submission_\d+):\s*$", line):
            current = head[1]
            found[current] = ([], None)
        elif current and (sid := re.match(r"^\s*-?\s*:sid:\s*['\"]?([^'\"]*)['\"]?\s*$", line)):
            found[current][0].append(sid[1].strip())
        elif current and (when := re.match(r"^\s*:created_at:\s*(\S+ \S+)", line)):
            try:
                stamp = datetime.fromisoformat(when[1][:19])
            except ValueError:
                stamp = None
            found[current] = (found[current][0], stamp)
    return found


def extract(archive: Path, into: Path) -> None:
    """Extract `archive` below `into`, keeping file times; names that climb out are cut back."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            parts = [
                p for p in zip_name(info).replace("\\", "/").split("/") if p not in ("", ".", "..")
            ]
            if not parts:
                continue
            target = into.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            stamp = datetime(*info.date_time).timestamp()
            os.utime(target, (stamp, stamp))
    into.mkdir(parents=True, exist_ok=True)


def zip_name(info: zipfile.ZipInfo) -> str:
    """The entry's name; a zip made on a Chinese Windows stores GBK without saying so."""
    if info.flag_bits & 0x800:
        return info.filename
    raw = info.filename.encode("cp437")
    for encoding in ("utf-8", "gb18030"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            pass
    return info.filename
