"""What an export's file and folder names say about whose notebook a file is.

`read_name(parts)` takes a notebook's path inside the export (a tuple of names, the file last)
and returns a dict:

    student_id   the id the name gives, or None when the name does not tell the student
    layout       the rule that read it (below)
    keyed        "lms" (the LMS's own number), "id" (a student id), "anonymous", "team",
                 "name" (a person's display name only) or "" (nothing)
    names        other tokens a roster may know (a person's name, a login)
    candidates   every id the name can be read as, best first (names holding `_`)
    lms_number   the LMS's number in the name (Moodle participant or group, Canvas user)
    late, timestamp, copy, file_id (the notebook's own name), why (how it was read)

Each rule follows the LMS's own code that writes the names:
  Moodle 4.x   mod/assign/classes/downloader.php, get_student_prefix(): "<full name>_<participant
               no.>" with every `_` of the name made a space; blind marking writes the string
               'participant' ("Participant") for the name; team submissions write "<group name>_
               <group id>", or "Default group" with no number. load_submissionplugin_filelist():
               "<prefix>_assignsubmission_file/<file>" in folders (before 4.1 the folder ended in
               `_`), "<prefix>_assignsubmission_file_<file>" without folders.
  Canvas       lib/content_zipper.rb, get_filename(): "<sortable name>[_LATE]_<user id>" (names
               lower-cased, every `_<digits>_` collapsed, non-word characters dropped), or
               "[LATE_]anon_<anonymous id>" under anonymous grading; add_upload_submission()
               appends "_<attachment id>_<file name>".
  Blackboard   "<assignment>_<user name>_attempt_<yyyy-mm-dd-hh-mm-ss>[_<file>]" (nbgrader's docs,
               ZipCollect); both the assignment and the user name may hold `_`.
  Brightspace  "<n>-<n> - <display name> - <date>/<file>": read by name, with a roster only.
  nbgrader     submitted/<student>/<assignment>/, and the exchange's inbound/<student>+
               <assignment>+<timestamp>[+<random>]/ (nbgrader/exchange/default/submit.py).
  per student  <student_id>/<notebook named like the assignment>
  plain        <student_id>.ipynb; a stem that is only the assignment's notebook name (any copy
               of it) names nobody.
Gradescope exports (submission_metadata.yml) are recognised by `inventory.py`, not here.
"""

from __future__ import annotations

import re
from datetime import datetime

from ..authoring.nbsource import ASSIGNMENT
from .names import copy_number, generic, named_like_assignment

# copy_number and named_like_assignment are read from here too (tests, identify.py).
__all__ = [
    "as_folder", "copy_number", "generic", "named_like_assignment", "owner", "read_name",
    "shared_file_names",
]  # fmt: skip

_NO_NAME = r"[^_]*"  # Moodle turns every `_` of a name into a space
MOODLE_FOLDER = re.compile(rf"^(?P<name>{_NO_NAME})_(?P<n>\d+)_assignsubmission_[a-z]+_?$")
MOODLE_FILE = re.compile(rf"^(?P<name>{_NO_NAME})_(?P<n>\d+)_assignsubmission_[a-z]+_(?P<file>.+)$")
MOODLE_DEFAULT_GROUP = re.compile(r"^(?P<name>[^_]+)_assignsubmission_[a-z]+(?:_(?P<file>.*))?$")
MOODLE_BLIND = frozenset({"participant", "参与者", "teilnehmer/in"})
CANVAS_ANON = re.compile(r"^(?P<late>LATE_)?anon_(?P<anon>[A-Za-z0-9]+)_(?P<att>\d+)_(?P<file>.+)$")
CANVAS_TAIL = re.compile(r"(?P<late>_LATE)?_(?P<uid>\d+)_(?P<att>\d+)_(?P<file>.+)$")
CANVAS_TEXT = re.compile(r"^(?P<name>\w+?)(?P<late>_LATE)?_(?P<uid>\d+)_(?:text|link)$")
CANVAS_RENAMED = re.compile(r"-(?P<n>\d+)$")  # Canvas's own renaming of a second upload
BLACKBOARD = re.compile(
    r"^(?P<head>.+)_attempt_(?P<ts>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file>.+))?$"
)
BRIGHTSPACE = re.compile(r"^\d+-\d+ - (?P<name>.+?) - (?P<date>.+)$")
EXCHANGE = re.compile(r"^(?P<sid>[^+]+)\+(?P<aid>[^+]+)\+(?P<ts>[^+]+)(?:\+[^+]*)?$")


def read_name(parts: tuple[str, ...]) -> dict:
    """What the path `parts` (folders, then the .ipynb file) says about its student."""
    folders, stem = parts[:-1], parts[-1][: -len(".ipynb")]
    base, copy = copy_number(stem)
    result = blank(parts[-1], copy=copy)
    if "submitted" in folders:
        at = folders.index("submitted")
        if len(folders) - at >= 3:  # submitted/<id>/<assignment>/
            return {**result, **by_id(folders[at + 1], "nbgrader", "submitted/<student>/")}
    if "inbound" in folders[:-1] and (found := EXCHANGE.match(folders[-1])):
        said = by_id(found["sid"], "nbgrader exchange", "inbound/<student>+<assignment>+<time>")
        return {**result, **said, "timestamp": found["ts"]}
    if len(folders) >= 2 and folders[-1] == ASSIGNMENT:
        return {**result, **by_id(folders[-2], "nbgrader", "<student>/<assignment>/")}
    for depth, name in enumerate((stem, *reversed(folders))):
        found = lms_name(name, is_folder=depth > 0)
        if found:
            return {**result, **found}
    if folders and named_like_assignment(parts[-1]) and not generic(folders[-1]):
        return {**result, **by_id(folders[-1], "per-student folder", "the folder's name")}
    if generic(base):
        why = "the file is named like the assignment's notebook, not after a student"
        return {**result, "layout": "plain", "why": why}
    return {**result, **by_id(base, "plain", "the file's name")}


def shared_file_names(paths: list[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """The notebooks whose file name is also the name of a notebook in sibling folders that
    look like one person's each: `张三/第34章_前缀缓存.ipynb` beside `李四/第34章_前缀缓存.ipynb`.
    Such a name is the assignment's, not a person's; each file's folder is its student's
    (`as_folder`). Not so where the name holds a number of four digits or more (an id:
    `第一次提交/2025001.ipynb` beside `第二次提交/2025001.ipynb` are one student's two rounds), nor
    where a folder holds as many notebooks as there are such folders (a round's, a class's)."""
    folders: dict[tuple, set[str]] = {}
    held: dict[tuple, int] = {}
    for parts in paths:
        held[parts[:-1]] = held.get(parts[:-1], 0) + 1
        if len(parts) >= 2 and not re.search(r"\d{4}", parts[-1]):
            folders.setdefault((parts[:-2], parts[-1]), set()).add(parts[-2])

    def shared(parts: tuple[str, ...]) -> bool:
        siblings = folders.get((parts[:-2], parts[-1]), set()) if len(parts) >= 2 else set()
        return len(siblings) > 1 and all(held[(*parts[:-2], f)] < len(siblings) for f in siblings)

    return {parts for parts in paths if shared(parts)}


def as_folder(reading: dict, parts: tuple[str, ...]) -> dict:
    """A plain reading of a file whose name other students' folders hold too: its folder names
    the student, unless the folder's own name is the assignment's or a shared folder's."""
    if generic(parts[-2]):
        why = f"the file's name {parts[-1]!r} is in other students' folders too, and its folder names no one"
        return {**reading, "student_id": None, "keyed": "", "why": why}
    said = by_id(
        parts[-2], "per-student folder", "the folder's name (other folders hold the same file name)"
    )
    return {**reading, **said}


def owner(parts: tuple[str, ...]) -> dict | None:
    """For a file that is no notebook: what its LMS name says of its student, or None.

    Canvas names a text entry "<name>[_LATE]_<user id>_text.html" (content_zipper.rb,
    add_text_or_url); Moodle an online text "<prefix>_assignsubmission_onlinetext/…".
    """
    stem = parts[-1].rsplit(".", 1)[0]
    if found := CANVAS_TEXT.match(stem):
        said = {"student_id": found["uid"], "layout": "Canvas", "keyed": "lms"}
        return {**blank(parts[-1]), **said, "names": (found["name"],), "why": "Canvas text entry"}
    for depth, name in enumerate((stem, *reversed(parts[:-1]))):
        if found := lms_name(name, is_folder=depth > 0):
            return {**blank(parts[-1]), **found}
    return None


def blank(file_id: str, **extra) -> dict:
    """A reading that names no one yet."""
    return {
        "student_id": None,
        "layout": "",
        "keyed": "",
        "names": (),
        "candidates": (),
        "lms_number": "",
        "late": False,
        "timestamp": None,
        "copy": 0,
        "file_id": file_id,
        "why": "",
        **extra,
    }


def by_id(student_id: str, layout: str, where: str) -> dict:
    return {"student_id": student_id, "layout": layout, "keyed": "id", "why": f"id from {where}"}


def lms_name(name: str, is_folder: bool) -> dict | None:
    """What a Moodle, Canvas, Blackboard or Brightspace name says, or None."""
    for reader in (moodle, canvas, blackboard, brightspace):
        said = reader(name, is_folder)
        if said:
            if not is_folder:
                said["file_id"] = (said.pop("file", None) or ASSIGNMENT) + ".ipynb"
            said.pop("file", None)
            return said
    return None


def moodle(name: str, is_folder: bool) -> dict | None:
    found = (MOODLE_FOLDER if is_folder else MOODLE_FILE).match(name)
    if found:
        number, person = found["n"], found["name"]
        if person.strip().casefold() in MOODLE_BLIND:
            return {
                "student_id": f"Participant_{number}",
                "layout": "Moodle (blind marking)",
                "keyed": "anonymous",
                "lms_number": number,
                "file": found.groupdict().get("file"),
                "why": f"Moodle's participant number {number} (blind marking hides the name)",
            }
        return {
            "student_id": number,
            "layout": "Moodle",
            "keyed": "lms",
            "names": (person,),
            "lms_number": number,
            "file": found.groupdict().get("file"),
            "why": f"Moodle's participant number {number} ({person})",
        }
    found = MOODLE_DEFAULT_GROUP.match(name)
    if found and (is_folder or found["file"]):
        return {
            "student_id": found["name"],
            "layout": "Moodle (team submission)",
            "keyed": "team",
            "file": found["file"],
            "why": f"Moodle's team submission of {found['name']!r}: its members are not in the "
            "export",
        }
    return None


def as_team(reading: dict) -> dict:
    """A Moodle reading of an export that holds team submissions: "<group>_<group id>"."""
    group, number = reading["names"][0], reading["lms_number"]
    why = f"Moodle's team submission of group {group!r} (id {number}): its members are not in the export"
    return {
        **reading,
        "student_id": f"group_{number}",
        "layout": "Moodle (team submission)",
        "keyed": "team",
        "names": (),
        "why": why,
    }


def canvas(name: str, is_folder: bool) -> dict | None:
    found = CANVAS_ANON.match(name)
    if found:
        return {
            "student_id": f"anon_{found['anon']}",
            "layout": "Canvas (anonymous grading)",
            "keyed": "anonymous",
            "late": bool(found["late"]),
            "file": found["file"],
            "copy": renamed(found["file"]),
            "why": f"Canvas's anonymous id {found['anon']} (anonymous grading hides the name)",
        }
    readings = []
    for at in (i for i, ch in enumerate(name) if ch == "_"):
        tail = CANVAS_TAIL.match(name, at)
        if not tail:
            continue
        person = name[:at]
        # Canvas keeps only word characters and collapses every `_<digits>_` of a name.
        if person.endswith("_LATE") or any(tail["uid"] == t["uid"] for _, t in readings):
            continue
        if person and re.fullmatch(r"\w+", person) and not re.search(r"_\d+_", person):
            readings.append((person, tail))
    if not readings:
        return None
    person, tail = readings[0]  # the name never holds `_<digits>_`: the first split is Canvas's
    return {
        "student_id": tail["uid"],
        "layout": "Canvas",
        "keyed": "lms",
        "names": (person,),
        "candidates": tuple(t["uid"] for _, t in readings),
        "lms_number": tail["uid"],
        "late": bool(tail["late"]),
        "file": tail["file"],
        "copy": renamed(tail["file"]),
        "why": f"Canvas's user id {tail['uid']} ({person})",
    }


def blackboard(name: str, is_folder: bool) -> dict | None:
    found = BLACKBOARD.match(name)
    if not found:
        return None
    head = found["head"]
    if head.startswith(ASSIGNMENT + "_"):  # the assignment's own name: the rest is the user's
        users = [head[len(ASSIGNMENT) + 1 :]]
    else:  # the user name may hold `_`: every split, the shortest user name first
        users = [head[at + 1 :] for at in reversed(range(len(head))) if head[at] == "_"]
    if not users or not users[0]:
        return None
    when = datetime.strptime(found["ts"], "%Y-%m-%d-%H-%M-%S")
    ambiguous = len(users) > 1
    return {
        "student_id": users[0],
        "layout": "Blackboard",
        "keyed": "id",
        "candidates": tuple(users),
        "timestamp": when,
        "file": found["file"],
        "why": f"Blackboard's user name {users[0]!r}"
        + (f" (or {', '.join(map(repr, users[1:3]))}: the name holds `_`)" if ambiguous else ""),
    }


def brightspace(name: str, is_folder: bool) -> dict | None:
    found = is_folder and BRIGHTSPACE.match(name)
    if not found:
        return None
    return {
        "student_id": None,
        "layout": "Brightspace",
        "keyed": "name",
        "names": (found["name"],),
        "timestamp": brightspace_time(found["date"]),
        "why": f"Brightspace names the student only by display name ({found['name']!r})",
    }


def brightspace_time(text: str) -> datetime | None:
    for form in ("%b %d, %Y %I%M %p", "%b %d, %Y %I:%M %p", "%d %B, %Y %I%M %p"):
        try:
            return datetime.strptime(text.strip(), form)
        except ValueError:
            pass
    return None


def renamed(file_name: str) -> int:
    """Canvas's "-1" of a second upload of the same name (before the extension)."""
    found = CANVAS_RENAMED.search(file_name.rsplit(".", 1)[0])
    return int(found["n"]) if found else 0
