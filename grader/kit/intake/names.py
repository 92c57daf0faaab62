"""What a notebook's own file name says: a copy's number, the assignment's name, or no one.

`copy_number("2023003 (1)")` is ("2023003", 1): the copy suffixes of Windows, macOS, Google
Drive and Chinese Windows ("x (1)", "x - Copy", "x - 副本"). `named_like_assignment(name)` holds for
the assignment's own notebook name and its copies. `generic(stem)` holds for a name that says
nothing about a person: the assignment's name, "Untitled", "作业", "ch34", a class's shared
upload folder; such a name never becomes a student id.
"""

from __future__ import annotations

import re

from ..authoring.nbsource import ASSIGNMENT
from .roster import simplified

COPY_SUFFIX = re.compile(
    r"^(?P<base>.+?)(?: ?\((?P<n>\d+)\)| - (?:Copy|副本)(?: \((?P<m>\d+)\))?)$"
)

# Words a notebook's own name is made of when it names no one (matched on `simplified` text).
GENERIC = re.compile(
    r"^(copyof)?((untitled|notebook|homework|assignment|作业|第\d+章|chapter\d+|ch\d+|lab|hw"
    r"|submission|提交)\d*)*$"
)
# Folders a class shares (Google Drive's, Classroom's, a Form's uploads), never one student's.
SHARED_FOLDER = re.compile(r"fileresponses|classroom|submissions|googledrive|提交|作业收集")
_CANVAS_RENAMED = re.compile(r"-(?P<n>\d+)$")  # Canvas's renaming of a second upload


def copy_number(stem: str) -> tuple[str, int]:
    """("2023003", 1) for "2023003 (1)"; a " - Copy" counts as 1; no suffix is 0."""
    found = COPY_SUFFIX.match(stem)
    if not found:
        return stem, 0
    return found["base"], int(found["n"] or found["m"] or 1)


def named_like_assignment(file_name: str) -> bool:
    """Whether a notebook's own name is the assignment's (a copy, a download suffix allowed)."""
    stem = file_name[: -len(".ipynb")] if file_name.lower().endswith(".ipynb") else file_name
    base = copy_number(_CANVAS_RENAMED.sub("", stem))[0]
    return simplified(base) in (simplified(ASSIGNMENT), "copyof" + simplified(ASSIGNMENT))


def generic(stem: str) -> bool:
    """A name that says nothing about a person: the assignment's notebook name, "Untitled", ..."""
    base = simplified(copy_number(stem)[0])
    return (
        named_like_assignment(stem)
        or bool(GENERIC.match(base) or SHARED_FOLDER.search(base))
        or ASSIGNMENT in stem.lower()
    )
