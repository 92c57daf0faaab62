"""Find every submission in what an LMS or a person hands the grader, and say what was left out.

    with discover("export.zip", roster="roster.csv") as intake:
        intake.submissions   # one Submission per student: the newest notebook, its id, late flag
        intake.skipped       # every other file, with why (debris, superseded copy, not a notebook)

Reads a folder or a .zip (zips inside are opened too, at most three deep), in any of these
layouts; a file name is matched by the first rule that fits:
  NAME_PATTERN   a regex with a `student_id` group (and optional `late`, `timestamp`), matched
                 from the start of the file name, then of its path in the export (nbgrader's
                 `FileNameCollectorPlugin`, whose matching this module builds on)
  nbgrader       submitted/<student_id>/<assignment>/<notebook>.ipynb
  Moodle         Full Name_<participant id>_assignsubmission_file_/<file>, or the same prefix on
                 the file itself when "download submissions in folders" is off
  Canvas         <name>[_LATE]_<user id>_<submission id>_<file>  (LATE: after the due date)
  Blackboard     <assignment>_<username>_attempt_<yyyy-mm-dd-hh-mm-ss>[_<file>]
  per student    <student_id>/<notebook>.ipynb (also <student_id>.zip holding the notebook)
  plain          <student_id>.ipynb
A roster (`roster.py`: student_id, and optional name, lms_user_id, email) maps an LMS user
id, a login, a name or an email found in a file name to the roster's student_id. Without one,
Moodle and Canvas files are keyed by the LMS's own number (unique, and what their gradebook
imports match).

Duplicates: the newest notebook per student is graded (by the timestamp in the name where the
export gives one, else the file's modification time, else the copy suffix: "x (2)" after
"x (1)" after "x"); the others are listed as superseded. Extracted zips live in a temporary
folder that `close()` (or leaving the `with` block) removes. Bad input raises IntakeError,
whose message says what to fix; nothing else is raised for a damaged student file.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin
from nbgrader.utils import parse_utc

from .nbsource import ASSIGNMENT
from .roster import Roster, RosterError, simplified

DEBRIS_DIRS = {"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".git"}
DEBRIS_FILES = {".ds_store", "thumbs.db", "desktop.ini"}
MAX_ZIP_DEPTH = 3
LMS_NUMBERED = {"Moodle", "Canvas"}  # layouts whose key is the LMS's own user number


class IntakeError(Exception):
    """The input cannot be read as a whole; the message says what to fix."""


@dataclass
class Submission:
    """One student's notebook, as chosen for grading."""

    student_id: str
    path: Path  # the notebook on disk (inside the temporary folder when it came from a zip)
    source: str  # the file as named in the export: its path inside the folder or zip
    late: bool = False
    superseded: list[str] = field(default_factory=list)  # sources of the older copies
    layout: str = "plain"  # the rule that named it: regex, nbgrader, moodle, canvas, ...
    note: str = ""  # e.g. "not on the roster"


@dataclass
class Skipped:
    """A file that is not graded, and why."""

    source: str
    why: str
    student_id: str = ""
    debris: bool = False


@dataclass
class Intake:
    """What `discover` found. A context manager: leaving it removes the extracted zips."""

    submissions: list[Submission]
    skipped: list[Skipped]
    scratch: Path  # where zips were extracted
    keyed_by_lms_number: int = 0  # Moodle/Canvas submissions named without a roster

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Intake:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def not_graded(self) -> str:
        """The printed "not graded" list: one line a file, operating-system debris summed up."""
        debris = [s for s in self.skipped if s.debris]
        lines = [f"  {s.source}: {s.why}" for s in self.skipped if not s.debris]
        if len(debris) > 5:
            lines.append(f"  {len(debris)} files of operating-system debris (listed in intake.csv)")
        else:
            lines += [f"  {s.source}: {s.why}" for s in debris]
        head = f"not graded: {len(self.skipped)} file(s)"
        return "\n".join([head + (":" if lines else ""), *lines])

    def warnings(self) -> str:
        """Lines for the instructor about what was graded under a guessed or fallback id."""
        lines = [f"  {s.source}: {s.note}" for s in self.submissions if s.note]
        if self.keyed_by_lms_number:
            lines.append(
                f"  {self.keyed_by_lms_number} Moodle/Canvas file(s) are keyed by the LMS's user "
                "number: pass ROSTER=roster.csv (student_id,name,lms_user_id) to use student ids"
            )
        return "\n".join(["note:", *lines]) if lines else ""

    def write_csv(self, path: Path, statuses: dict[str, str] | None = None) -> None:
        """Every input file, one row: file, student_id, outcome, why (UTF-8 with a BOM, for Excel).

        `statuses` maps a student_id to its grading status; without it a submission's outcome
        is "to grade".
        """
        statuses = statuses or {}
        rows = []
        for s in self.submissions:
            why = "; ".join(x for x in (s.layout, "late" if s.late else "", s.note) if x)
            rows.append((s.source, s.student_id, statuses.get(s.student_id, "to grade"), why))
        rows += [(s.source, s.student_id, "not graded", s.why) for s in self.skipped]
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8-sig") as handle:
            writer = csv.writer(handle)
            writer.writerow(["file", "student_id", "outcome", "why"])
            writer.writerows(sorted(rows))


def discover(path, roster=None, pattern: str | None = None) -> Intake:
    """Find the submissions in `path` (a folder, a .zip or one .ipynb); the input is not modified.

    `roster` is a path to a roster CSV (see `Roster.read`), `pattern` a regex with a
    `student_id` group. Raises IntakeError for a missing input, a damaged top-level zip, a bad
    roster or a bad pattern.
    """
    path = Path(path)
    if not path.exists():
        raise IntakeError(
            f"{path} does not exist: "
            "pass SUBMISSIONS=<folder or .zip of the downloaded submissions>"
        )
    try:
        table = Roster.read(Path(roster)) if roster else None
    except RosterError as error:
        raise IntakeError(str(error)) from None
    collector = ExportCollector(pattern)
    intake = Intake([], [], Path(tempfile.mkdtemp(prefix="ch34-intake-")))
    try:
        found: list[tuple[Path, str, dict]] = []
        if path.is_dir():
            _walk(path, (), "", intake, found, collector, depth=0)
        elif path.suffix.lower() == ".zip":
            try:
                _extract(path, intake.scratch / "export")
            except (zipfile.BadZipFile, OSError, EOFError) as error:
                raise IntakeError(
                    f"{path} is not a readable zip ({error}): download the export again"
                ) from None
            _walk(intake.scratch / "export", (), "", intake, found, collector, depth=1)
        elif path.suffix.lower() == ".ipynb":
            found.append((path, path.name, collector.collect(path.name)))
        else:
            raise IntakeError(f"{path} is neither a folder, a .zip nor a .ipynb file")
        _choose(found, table, intake)
    except BaseException:
        intake.close()
        raise
    return intake


class ExportCollector(FileNameCollectorPlugin):
    """nbgrader's file-name collector, taught the LMS layouts above.

    `collect(relative_path)` returns nbgrader's groupdict (`student_id`, `file_id`, optional
    `timestamp`) plus `late`, `layout` and `names` (other tokens a roster may know: a person's
    name, a login), or None for a file that is not a notebook. A user's `named_regexp` is tried
    first, through nbgrader's own `_match`.
    """

    def __init__(self, pattern: str | None = None, **kwargs):
        quiet = logging.getLogger("ch34.intake")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        super().__init__(log=quiet, named_regexp=pattern or "", **kwargs)
        if pattern:
            try:
                groups = re.compile(pattern).groupindex
            except re.error as error:
                raise IntakeError(
                    f"NAME_PATTERN {pattern!r} is not a valid regular expression: {error}"
                ) from None
            if "student_id" not in groups:
                raise IntakeError(
                    f"NAME_PATTERN {pattern!r} has no (?P<student_id>...) group: add one around "
                    "the part of the file name that holds the student's id"
                )

    def collect(self, submitted_file: str) -> dict | None:
        parts = PurePosixPath(submitted_file).parts
        name = parts[-1]
        if not any(name.lower().endswith(ext.lower()) for ext in self.valid_ext):
            return None
        stem = name[: -len(".ipynb")]
        if self.named_regexp:
            found = self._match(name) or self._match(submitted_file)
            if found and found.get("student_id"):
                return {
                    "student_id": found["student_id"],
                    "file_id": found.get("file_id") or name,
                    "timestamp": found.get("timestamp"),
                    "late": bool(found.get("late")),
                    "layout": "NAME_PATTERN",
                    "names": (),
                }
        return _builtin(parts, stem)


# The built-in layouts. Names are matched on the file's stem (no .ipynb) or on a folder's name.
MOODLE_FOLDER = re.compile(r"^(?P<name>.*)_(?P<lms_id>\d+)_assignsubmission_[a-z]+_$")
MOODLE_FILE = re.compile(r"^(?P<name>.*)_(?P<lms_id>\d+)_assignsubmission_[a-z]+_(?P<file_id>.+)$")
CANVAS = re.compile(
    r"^(?P<name>[^_]+?)(?P<late>_LATE)?_(?P<lms_id>\d+)_(?P<submission_id>\d+)_(?P<file_id>.+)$"
)
BLACKBOARD = re.compile(
    r"^(?P<assignment>.+)_(?P<user>[^_]+)_attempt_"
    r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file_id>.+))?$"
)
COPY_SUFFIX = re.compile(
    r"^(?P<base>.+?)(?: ?\((?P<n>\d+)\)| - (?:Copy|副本)(?: \((?P<m>\d+)\))?)$"
)
CANVAS_RENAMED = re.compile(r"-(?P<n>\d+)$")


def copy_number(stem: str) -> tuple[str, int]:
    """("2023003", 1) for "2023003 (1)"; a " - Copy" counts as 1; no suffix is 0."""
    found = COPY_SUFFIX.match(stem)
    if not found:
        return stem, 0
    return found["base"], int(found["n"] or found["m"] or 1)


def _builtin(parts: tuple[str, ...], stem: str) -> dict:
    folders = parts[:-1]
    base, copy = copy_number(stem)
    result = {"file_id": parts[-1], "timestamp": None, "late": False, "names": (), "copy": copy}
    if "submitted" in folders:
        at = folders.index("submitted")
        if len(folders) - at >= 3:  # submitted/<id>/<assignment>/
            return {**result, "student_id": folders[at + 1], "layout": "nbgrader"}
    if len(folders) >= 2 and folders[-1] == ASSIGNMENT:
        return {**result, "student_id": folders[-2], "layout": "nbgrader"}
    # An LMS names the file, or a folder above it: Moodle's per-student folders, or a zip a
    # student handed in (a zip stands for a folder of its own name).
    for depth, name in enumerate((stem, *reversed(folders))):
        found = _lms_name(name, is_folder=depth > 0)
        if found:
            return {**result, **found}
    if folders and simplified(base) in (
        simplified(ASSIGNMENT),
        "copyof" + simplified(ASSIGNMENT),
    ):
        return {**result, "student_id": folders[-1], "layout": "per-student folder"}
    return {**result, "student_id": base, "layout": "plain"}


def _lms_name(name: str, is_folder: bool) -> dict | None:
    """What a Moodle, Canvas or Blackboard name says, or None; `file_id` only for a file."""
    found = is_folder and MOODLE_FOLDER.match(name)
    if found:
        return {"student_id": found["lms_id"], "names": (found["name"],), "layout": "Moodle"}
    found = MOODLE_FILE.match(name)
    if found:
        said = {"student_id": found["lms_id"], "names": (found["name"],), "layout": "Moodle"}
    elif found := CANVAS.match(name):
        renamed = CANVAS_RENAMED.search(found["file_id"])
        said = {
            "student_id": found["lms_id"],
            "names": (found["name"],),
            "late": bool(found["late"]),
            "copy": int(renamed["n"]) if renamed else 0,
            "layout": "Canvas",
        }
    elif found := BLACKBOARD.match(name):
        when = datetime.strptime(found["timestamp"], "%Y-%m-%d-%H-%M-%S")
        said = {"student_id": found["user"], "timestamp": when, "layout": "Blackboard"}
    else:
        return None
    if not is_folder:
        said["file_id"] = (found["file_id"] or ASSIGNMENT) + ".ipynb"
    return said


def _walk(folder, parts, prefix, intake, found, collector, depth) -> None:
    """Append (path, source, collected) for each notebook below `folder`; list the rest."""
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        source = prefix + entry.name
        here = (*parts, entry.name)
        if entry.is_symlink():
            intake.skipped.append(Skipped(source, "a symbolic link (not followed)"))
        elif entry.is_dir():
            if entry.name in DEBRIS_DIRS:
                for inner in sorted(p for p in entry.rglob("*") if not p.is_dir()):
                    where = source + "/" + inner.relative_to(entry).as_posix()
                    intake.skipped.append(Skipped(where, "operating-system debris", debris=True))
            else:
                _walk(entry, here, source + "/", intake, found, collector, depth)
        elif entry.name.startswith("._") or entry.name.lower() in DEBRIS_FILES:
            intake.skipped.append(Skipped(source, "operating-system debris", debris=True))
        elif entry.suffix.lower() == ".zip":
            if depth >= MAX_ZIP_DEPTH:
                intake.skipped.append(Skipped(source, f"a zip nested over {MAX_ZIP_DEPTH} deep"))
                continue
            into = Path(tempfile.mkdtemp(dir=intake.scratch))
            try:
                _extract(entry, into)
            except (zipfile.BadZipFile, OSError, EOFError) as error:
                intake.skipped.append(Skipped(source, f"a damaged zip ({error})"))
                continue
            before = len(found)
            # A zip stands for a folder of its own name (a student's 2023008.zip holds their work).
            _walk(into, (*parts, entry.stem), source + "/", intake, found, collector, depth + 1)
            if len(found) == before:
                intake.skipped.append(Skipped(source, "a zip with no notebook inside"))
        else:
            collected = collector.collect("/".join(here))
            if collected is not None:
                found.append((entry, source, collected))
            elif BLACKBOARD.match(entry.stem) and entry.suffix.lower() == ".txt":
                intake.skipped.append(Skipped(source, "Blackboard's submission receipt"))
            else:
                kind = entry.suffix or "no extension"
                intake.skipped.append(Skipped(source, f"not a notebook ({kind})"))


def _choose(found, roster: Roster | None, intake: Intake) -> None:
    """Map each notebook to its student and keep the newest one a student."""
    by_student: dict[str, list] = {}
    for path, source, info in found:
        student_id, note = info["student_id"], ""
        if roster is not None:
            lms = info["layout"] in LMS_NUMBERED
            known = roster.find(student_id, info["names"], lms=lms)
            if known is None:
                note = f"not on the roster: graded as {student_id!r}"
            student_id = known or student_id
        elif info["layout"] in LMS_NUMBERED:
            intake.keyed_by_lms_number += 1
        when = info["timestamp"]
        if isinstance(when, str):
            try:
                when = parse_utc(when).replace(tzinfo=None)
            except (ValueError, OverflowError):
                when, note = None, (note + "; " if note else "") + f"timestamp {when!r} unread"
        submission = Submission(student_id, path, source, info["late"], [], info["layout"], note)
        newness = (when or datetime.min, round(path.stat().st_mtime), info.get("copy", 0), source)
        by_student.setdefault(student_id, []).append((newness, submission))
    for student_id in sorted(by_student):
        copies = [s for _, s in sorted(by_student[student_id], key=lambda pair: pair[0])]
        newest = copies.pop()
        newest.superseded = [old.source for old in copies]
        intake.submissions.append(newest)
        for old in copies:
            why = f"superseded by the newer {newest.source}"
            intake.skipped.append(Skipped(old.source, why, student_id))


def _extract(archive: Path, into: Path) -> None:
    """Extract `archive` below `into`, keeping file times; names that climb out are cut back."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            parts = [
                p for p in _zip_name(info).replace("\\", "/").split("/") if p not in ("", ".", "..")
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


def _zip_name(info: zipfile.ZipInfo) -> str:
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
