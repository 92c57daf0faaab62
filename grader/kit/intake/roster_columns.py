"""Which column of a roster is which: the headers an LMS's or a 教务系统's export gives them.

A roster is whatever the instructor has: a list saved from Excel out of the school's 教务系统
(`序号,学号,姓名,性别,班级`), Moodle's participants or grader export (`First name,Last name,
ID number,Email address`), Canvas's gradebook export (`Student,ID,SIS User ID,SIS Login ID`),
Blackboard's Grade Center (`Last Name,First Name,Username,Student ID`), or the kit's own
`student_id,name,lms_user_id,username,email`. `HEADER_NAMES` maps every header this reads to its
field; headers are compared with case, spaces, `_`, `-`, `/` and a trailing `*` dropped, so
`Student ID`, `student_id` and `STUDENT-ID` are one name. Other columns are ignored. Where two
columns name one field, the one listed first below wins (the kit's own name first), and the
other is ignored: a Canvas export's `SIS User ID` is the student id, its `ID` the Canvas user id.

A title line above the header (a 教务系统's "2026 秋季学期 … 学生名单") is skipped: the header
is the first of the first `HEADER_SEARCH` lines that names a student id.

docs/grading.md lists these names for the instructor (a test keeps the two in step).
"""

from __future__ import annotations

import re

# field -> the headers read as it, best first. Keys of a roster row are these fields.
HEADER_NAMES: dict[str, tuple[str, ...]] = {
    "student_id": (
        "student_id", "学号", "学生学号", "工号/学号", "学号/工号", "学工号", "学籍号",
        "Student ID", "Student Number", "ID number", "SIS User ID", "SIS ID", "Matriculation number",
    ),
    "name": (
        "name", "姓名", "学生姓名", "名字", "Full name", "Student name", "Student", "Display name",
    ),
    "lms_user_id": (
        "lms_user_id", "LMS user id", "User ID", "用户ID", "ID", "Participant", "Participant number",
    ),
    "username": (
        "username", "用户名", "账号", "帐号", "登录名", "User name", "Login", "Login ID",
        "SIS Login ID",
    ),
    "email": ("email", "邮箱", "电子邮箱", "电子邮件", "Email address", "E-mail", "Mail"),
    # Split names (Moodle, Blackboard): joined into `name` when no column gives it whole.
    "first_name": ("First name", "名", "Given name"),
    "last_name": ("Last name", "姓", "Surname", "Family name"),
}  # fmt: skip
FIELDS = ("student_id", "name", "lms_user_id", "username", "email")
HEADER_SEARCH = 5


def header_key(text: str) -> str:
    """A header as compared: case, spaces, `_`, `-`, `/`, a BOM and a trailing `*` dropped."""
    return re.sub(r"[\s_\-/*\ufeff]+", "", (text or "").casefold())


_FIELD_OF = {}
_RANK = {}
for _field, _names in HEADER_NAMES.items():
    for _rank, _name in enumerate(_names):
        _FIELD_OF.setdefault(header_key(_name), _field)
        _RANK.setdefault(header_key(_name), _rank)


def columns_of(header: list[str]) -> dict[str, int]:
    """{field: the index of the column that gives it} for one header line."""
    best: dict[str, tuple[int, int]] = {}
    for index, text in enumerate(header):
        key = header_key(text)
        field = _FIELD_OF.get(key)
        if field and (field not in best or _RANK[key] < best[field][0]):
            best[field] = (_RANK[key], index)
    return {field: index for field, (_, index) in best.items()}


def find_header(lines: list[list[str]]) -> tuple[int, dict[str, int]] | None:
    """(the header's line index, its `columns_of`) among the first lines; None if none names an id."""
    for at, line in enumerate(lines[:HEADER_SEARCH]):
        columns = columns_of(line)
        if "student_id" in columns:
            return at, columns
    return None


def person(line: list[str], columns: dict[str, int]) -> dict[str, str]:
    """One roster row as {field: value} (FIELDS), the split name joined where there is no whole one."""

    def cell(field: str) -> str:
        index = columns.get(field)
        return line[index].strip() if index is not None and index < len(line) else ""

    row = {field: cell(field) for field in FIELDS}
    if not row["name"]:
        first, last = cell("first_name"), cell("last_name")
        cjk = not (first + last).isascii()
        row["name"] = (last + first) if cjk else " ".join(x for x in (first, last) if x)
    return row


def accepted() -> str:
    """The accepted headers, one field a line, for an error message."""
    return "; ".join(f"{field}: {', '.join(names)}" for field, names in HEADER_NAMES.items())
