"""Walk an export (a folder, zips inside it at most three deep) and sort its files.

`walk(folder, sink, collect)` calls `sink.notebook(path, source, parts)` for every notebook
(`collect(parts)` says whether a name is one) and `sink.skip(source, why, debris[, parts])` for
every other file, with why (`parts` for a file an LMS may have named after its student). The export is never modified: zips are extracted below `sink.scratch`,
keeping their files' times; a name that climbs out of its folder is cut back. A zip made on a
Chinese Windows stores GBK names without saying so (or, from some zippers, under the UTF-8
flag); they are read as such, and so are the GBK
names of a folder such a zip was unzipped into on Linux (`readable`).

One member that cannot be extracted never costs the rest of its zip (`extract`): a member that is
encrypted, compressed by a method Python cannot read, damaged, a symbolic link, or whose path
another member already took (the same name twice, a `../` cut back onto a file, a file where a
folder is) is reported with why; a name longer than the file system allows is shortened in its
middle.

A REPORT this kit wrote inside the export (`make autograde SUBMISSIONS=作业/ REPORT=作业/report`)
is one skipped line, never read: its autograded notebooks are no submissions.

Gradescope's "Export Submissions" holds `submission_metadata.yml` beside one
`submission_<id>/` folder per submission; `gradescope_ids(folder)` reads the submitters' `:sid:`
of each (its own YAML is plain enough for a line reader), and `sink.gradescope` keeps them.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import re
import shutil
import stat
import struct
import tempfile
import zipfile
import zlib
from datetime import datetime
from pathlib import Path

from ..paths import INTAKE
from .layouts import BLACKBOARD

DEBRIS_DIRS = frozenset({"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".git"})
DEBRIS_FILES = frozenset({".ds_store", "thumbs.db", "desktop.ini"})
MAX_ZIP_DEPTH = 3
GRADESCOPE_METADATA = "submission_metadata.yml"
DAMAGED = "not extracted: damaged in the zip"  # a download cut short, or a damaged disk
NOT_EXTRACTED = ("not extracted", "a damaged zip")  # how the whys of files not read begin
NO_NOTEBOOK_IN_ZIP = "a zip with no notebook inside"


def walk(folder: Path, sink, collect, parts=(), prefix="", depth=0) -> None:
    """Report each file below `folder` to `sink`; `parts`/`prefix` name `folder` in the export."""
    entries = sorted(folder.iterdir(), key=lambda p: p.name)
    if any(e.name == GRADESCOPE_METADATA for e in entries):
        sink.gradescope[prefix] = gradescope_ids(folder / GRADESCOPE_METADATA)
    for entry in entries:
        name = readable(entry.name)
        source, here = prefix + name, (*parts, name)
        if entry.is_symlink():
            sink.skip(source, "a symbolic link (not followed)")
        elif entry.is_dir() and is_report(entry):
            sink.skip(source + "/", "a report this kit wrote (REPORT=), not submissions: not read")
        elif entry.is_dir() and entry.name in DEBRIS_DIRS:
            for inner in sorted(p for p in entry.rglob("*") if not p.is_dir()):
                where = source + "/" + inner.relative_to(entry).as_posix()
                sink.skip(where, "operating-system debris", debris=True)
        elif entry.is_dir():
            walk(entry, sink, collect, here, source + "/", depth)
        elif name.startswith("._") or name.lower() in DEBRIS_FILES:
            sink.skip(source, "operating-system debris", debris=True)
        elif entry.suffix.lower() == ".zip":
            unzip(entry, sink, collect, parts, source, depth)
        elif collect(here):
            sink.notebook(entry, source, here)
        else:
            sink.skip(source, *other_file(entry), parts=here)


def is_report(folder: Path) -> bool:
    """Whether `folder` is a REPORT this kit wrote (its intake.csv): REPORT inside SUBMISSIONS
    would have the next run grade the kit's own autograded copies."""
    try:
        with (folder / INTAKE).open("rb") as handle:
            return handle.read(64).removeprefix(codecs.BOM_UTF8).startswith(b"file,student_id,")
    except OSError:
        return False


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
        left_out = extract(entry, into)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        sink.skip(source, f"a damaged zip ({error})", parts=(*parts, entry.name))
        return
    # A zip stands for a folder of its own name (a student's 2023008.zip holds their work).
    for name, why in left_out:
        sink.skip(f"{source}/{name}", why, parts=(*parts, entry.stem, *name.split("/")))
    before = sink.count()
    walk(into, sink, collect, (*parts, entry.stem), source + "/", depth + 1)
    if sink.count() == before and not left_out:
        sink.skip(source, NO_NOTEBOOK_IN_ZIP, parts=(*parts, entry.name))


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


def extract(archive: Path, into: Path) -> list[tuple[str, str]]:
    """Extract `archive` below `into`, keeping file times; (member name, why) of each member
    left out. Names that climb out are cut back, names too long for the file system shortened.

    Raises (BadZipFile, OSError, EOFError) only where the archive as a whole cannot be read; a
    member that cannot be extracted is left out, and the rest extracted.
    """
    into.mkdir(parents=True, exist_ok=True)
    limit = name_limit(into)
    left_out = []
    with open_zip(archive) as zipped:
        for info in zipped.infolist():
            name = zip_name(info)
            parts = [
                fitted(p, limit)
                for p in name.replace("\\", "/").split("/")
                if p not in ("", ".", "..")
            ]
            if not parts:
                continue
            if why := extract_member(zipped, info, into.joinpath(*parts)):
                left_out.append((name.rstrip("/"), why))
    return left_out


def open_zip(archive: Path) -> zipfile.ZipFile:
    """The archive, opened. Some zippers set the UTF-8 flag over names they wrote in GBK, which
    zipfile refuses as a whole; such a zip is read with the flag cleared (`zip_name` then reads
    the GBK)."""
    try:
        return zipfile.ZipFile(archive)
    except UnicodeDecodeError:
        return zipfile.ZipFile(io.BytesIO(without_utf8_flag(archive.read_bytes())))


def without_utf8_flag(data: bytes) -> bytes:
    """`data`, a zip, with the UTF-8 flag (bit 11) cleared in its central directory's headers
    and in the local header each of them points at."""
    data, end = bytearray(data), data.rfind(b"PK\x05\x06")
    if end < 0:
        raise zipfile.BadZipFile("no end of central directory")
    size, offset = struct.unpack_from("<II", data, end + 12)
    at, shift = end - size, end - size - offset  # shift: bytes before the zip (a stub)
    while at >= 0 and data[at : at + 4] == b"PK\x01\x02":
        (local,) = struct.unpack_from("<I", data, at + 42)
        for flags_at in (at + 8, local + shift + 6):
            if 0 <= flags_at < len(data) - 1:
                (flags,) = struct.unpack_from("<H", data, flags_at)
                struct.pack_into("<H", data, flags_at, flags & ~0x800)
        name, extra, comment = struct.unpack_from("<HHH", data, at + 28)
        at += 46 + name + extra + comment
    return bytes(data)


def extract_member(zipped: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path) -> str:
    """Write one member at `target`; why it was left out, or "" once written."""
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link in the zip (not followed)"
    try:
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            return ""
        if target.is_dir():
            return "not extracted: a file and a folder of the zip have the same path"
        if target.exists():
            return f"not extracted: an earlier file of the zip has the same path ({target.name}); it was kept"
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipped.open(info) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        return "not extracted: a file and a folder of the zip have the same path"
    except OSError as error:
        if error.errno != errno.ENAMETOOLONG:
            raise
        return "not extracted: its path is longer than the file system allows; extract it by hand"
    except NotImplementedError:
        return (
            f"not extracted: compressed by a method Python cannot read (zip method "
            f"{info.compress_type}); extract the zip with 7-Zip and pass the folder"
        )
    except (
        RuntimeError
    ):  # after NotImplementedError, its subclass: zipfile's word for a member that needs a password
        target.unlink(missing_ok=True)
        return "not extracted: encrypted (the zip has a password); ask for it without one"
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        target.unlink(missing_ok=True)
        return f"{DAMAGED} ({error})"
    stamp = datetime(*info.date_time).timestamp()
    os.utime(target, (stamp, stamp))
    return ""


def name_limit(folder: Path) -> int:
    """The longest file name, in bytes, the file system under `folder` takes."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def fitted(part: str, limit: int) -> str:
    """`part` as it is, or with its middle cut to "…" so that its UTF-8 fits in `limit` bytes.

    The start (where LMSs and students put a name or an id) and the end (Moodle's
    `_<n>_assignsubmission_file`, the extension) are kept.
    """
    size = len(os.fsencode(part))
    if size <= limit:
        return part
    budget = limit - len("…".encode())
    head, tail = part, ""
    while len(os.fsencode(head)) + len(os.fsencode(tail)) > budget:
        if len(os.fsencode(tail)) < budget // 2:
            tail, head = head[-1] + tail, head[:-1]
        else:
            head = head[:-1]
    return f"{head}…{tail}"


def readable(name: str) -> str:
    """A file name as its export meant it. A Chinese Windows zip unzipped on Linux leaves GBK
    bytes in names, which Python holds as surrogates; they are read as GB 18030."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        raw = os.fsencode(name)
    try:
        return raw.decode("gb18030")
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace")


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
