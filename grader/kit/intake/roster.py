"""The course's roster: one CSV that maps what an LMS puts in file names to student ids.

    student_id,name,lms_user_id,username,email
    2023007,Wang Wu,12347,wangwu7,wangwu@example.edu

`student_id` is required and unique; `name`, `lms_user_id` (the LMS's own user number, as
Moodle and Canvas put it in file names; for Moodle the participant number of the assignment),
`username` (the LMS login, as Blackboard puts it in file names) and `email` are optional. The
headers may be those of the export the roster came from (`学号,姓名,邮箱`, `Student ID`,
`Username`, ...: `HEADER_NAMES`, listed in docs/grading.md). Read as Excel saves it: UTF-8
(with or without a BOM) or GBK.

A roster is whatever the instructor has: a list saved from Excel out of the school's 教务系统
(`序号,学号,姓名,性别,班级`), Moodle's participants or grader export (`First name,Last name,
ID number,Email address`), Canvas's gradebook export (`Student,ID,SIS User ID,SIS Login ID`),
Blackboard's Grade Center (`Last Name,First Name,Username,Student ID`), or the kit's own header.
Headers are compared with case, spaces, `_`, `-`, `/` and a trailing `*` dropped, so `Student ID`,
`student_id` and `STUDENT-ID` are one name; other columns are ignored. Where two columns name one
field, the one listed first in `HEADER_NAMES` wins (the kit's own name first) and the other is
ignored: a Canvas export's `SIS User ID` is the student id, its `ID` the Canvas user id. A title
line above the header (a 教务系统's "2026 秋季学期 … 学生名单") is skipped: the header is the first
of the first `HEADER_SEARCH` lines that names a student id. Columns may be separated by commas,
tabs (Excel's "Unicode 文本" and "文本文件(制表符分隔)") or semicolons (Excel where a comma is the
decimal mark): the first of them whose header names a student id is used.

An id as Excel or pandas wrote a number: `2025001.0` is read as `2025001` (a file name and an
LMS carry the digits alone); `2.02501E+11` (Excel's display of a long number in a narrow
column, the digits lost) stops the run with how to save the column as text.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RosterError, UnreadableCsv
from ..report.formats import open_csv

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
HEADER_SEARCH = 12  # a 教务系统 export: school, course, teacher, term, class, count… above it
DELIMITERS = (",", "\t", ";")
# A number as a float: `2025001.0` (pandas, a float column); as Excel shows a long one: `2.02501E+11`.
FLOAT_ID = re.compile(r"^(\d+)\.0+$")
SCIENTIFIC_ID = re.compile(r"^\d(?:\.\d+)?E\+\d+$", re.IGNORECASE)


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


def read_lines(text: str) -> tuple[list[tuple[int, list[str]]], tuple | None]:
    """(line number, cells) of every line not blank, and `find_header`'s answer, split at the
    first of `DELIMITERS` whose lines have a header naming a student id (else at commas)."""
    first = None
    for delimiter in DELIMITERS:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        numbered = [(reader.line_num, line) for line in reader if any(map(str.strip, line))]
        found = find_header([line for _, line in numbered])
        if found is not None:
            return numbered, found
        first = first or (numbered, None)
    return first


def person(line: list[str], columns: dict[str, int]) -> dict[str, str]:
    """One roster row as {field: value} (FIELDS), the split name joined where there is no whole one."""

    def cell(field: str) -> str:
        index = columns.get(field)
        return line[index].strip() if index is not None and index < len(line) else ""

    row = {field: cell(field) for field in FIELDS}
    for key in ("student_id", "lms_user_id", "username"):  # ids compared as file names give them
        row[key] = folded(row[key])
    for key in ("student_id", "lms_user_id"):
        if found := FLOAT_ID.match(row[key]):
            row[key] = found[1]
    if not row["name"]:
        first, last = cell("first_name"), cell("last_name")
        cjk = not (first + last).isascii()
        row["name"] = (last + first) if cjk else " ".join(x for x in (first, last) if x)
    return row


def accepted() -> str:
    """The accepted headers, one field a line, for an error message."""
    return "; ".join(f"{field}: {', '.join(names)}" for field, names in HEADER_NAMES.items())


@dataclass
class Roster:
    """The course's students: student_id, and optionally name, lms_user_id, username, email."""

    rows: list[dict]
    lines: dict[str, int] = field(default_factory=dict)  # student_id -> its line in the CSV

    @classmethod
    def read(cls, path: Path) -> Roster:
        """Read a roster CSV (UTF-8, BOM or not, or GBK); a RosterError says what is wrong."""
        if not path.is_file():
            raise RosterError(f"roster {path} does not exist: check ROSTER=")
        try:
            handle = open_csv(path)
        except UnreadableCsv as error:  # neither UTF-8 nor GBK
            raise RosterError(str(error).removeprefix("error: ")) from None
        with handle:
            numbered, found = read_lines(handle.read())
        lines = [line for _, line in numbered]
        if found is None:
            raise RosterError(
                f"roster {path} has no student id column (its first line is {lines[:1]}): the "
                "header must name one, e.g. student_id,name,lms_user_id,email or 学号,姓名,邮箱. "
                f"Accepted headers (docs/grading.md): {accepted()}"
            )
        at, columns = found
        # A line that names no person (a 教务系统's footer: `共 45 人`, `打印时间：…`) is no student.
        people = [(n, person(line, columns)) for n, line in numbered[at + 1 :]]
        people = [(line, row) for line, row in people if any(row.values())]
        for line, row in people:
            for key in ("student_id", "lms_user_id"):
                if SCIENTIFIC_ID.match(row[key]):
                    raise RosterError(
                        f"roster {path}, line {line}: {key} {row[key]!r} is a number as Excel shows "
                        "it in a narrow column, its digits lost. 在 Excel 里选中这一列，设置单元格格式为"
                        "“文本”（或“数值”、0 位小数），确认显示出完整的学号后再另存为 CSV UTF-8，再运行一次"
                    )
        for key in ("student_id", "lms_user_id", "username"):
            seen = {}
            for line, row in people:
                value = row.get(key, "")
                if key == "student_id" and not value:
                    raise RosterError(f"roster {path}, line {line}: the student_id is empty")
                if value and value in seen:
                    raise RosterError(
                        f"roster {path}: {key} {value!r} appears on lines {seen[value]} and {line}"
                    )
                seen[value] = line
        rows = [row for _, row in people]
        numbers = {row["student_id"]: line for line, row in people}
        return cls(rows, numbers)

    def described(self, student_id: str) -> str:
        """A roster row as a message names it: `第 3 行（2025004 王伟，wangwei@x.edu）`."""
        row = next((r for r in self.rows if r["student_id"] == student_id), {})
        said = "，".join(x for x in (student_id, row.get("name", ""), row.get("email", "")) if x)
        line = self.lines.get(student_id)
        return f"第 {line} 行（{said}）" if line else f"（{said}）"

    def by_lms(self, number: str) -> str | None:
        """The student whose `lms_user_id` is `number`, or None."""
        return next(
            (r["student_id"] for r in self.rows if number and r.get("lms_user_id") == number), None
        )

    def by_account(self, key: str) -> str | None:
        """The student whose `lms_user_id` or `username` is `key`, whole, or None."""
        key = folded(key)
        return next((r["student_id"] for r in self.rows if key and key in account_keys(r)), None)

    def by_id(self, key: str) -> str | None:
        """The student whose `student_id` is `key`, or None."""
        return next((r["student_id"] for r in self.rows if r["student_id"] == folded(key)), None)

    def by_name(self, token: str) -> list[str]:
        """Every student whose name, email or email's local part is `token` (simplified)."""
        wanted = simplified(token)
        if not wanted:
            return []
        return [row["student_id"] for row in self.rows if wanted in person_keys(row)]

    def search(self, text: str) -> tuple[list[str], list[str]]:
        """(students whose id, students whose name, occurs in `text`), each sorted.

        An id (or a `username`, or an `lms_user_id` that is not only digits) counts where no
        other letter or digit of the Latin alphabet touches it (`2025001_张三`, `李四-2025002`,
        `2025003王小明`, `li_wei5_作业`); an id of digits shorter than `SEARCHED_DIGITS` is not
        searched (第34章, a date's 12, a copy's (2) would read as one). A Chinese name counts
        anywhere in the text, but not inside a longer roster name found there (张三 in 张三丰);
        a Latin name as whole words (`Zhang San`, `zhang_san`, `ZhangSan`).
        """
        by_id, by_name, text = set(), set(), folded(text)
        words = re.split(r"[^0-9A-Za-z]+", text.casefold())
        squashed = simplified(text)
        chinese = []
        for row in self.rows:
            sid = row["student_id"]
            # An LMS number alone is not searched: a time stamp's digits could read as one.
            keys = [sid, *(k for k in account_keys(row) if not k.isdigit())]
            if any(searchable(key) and whole_in(key, text) for key in keys):
                by_id.add(sid)
            name = row.get("name", "")
            if not simplified(name):
                continue
            if not name.isascii():
                chinese.append((simplified(name), sid))
            elif simplified(name) in words or _words_in(name, words):
                by_name.add(sid)
        for name, sid in sorted(chinese, key=lambda pair: -len(pair[0])):  # the longest first
            if name in squashed:
                by_name.add(sid)
                squashed = squashed.replace(name, "\0")  # 张三丰 found: its 张三 is no one else
            elif any(name == other for other, found in chinese if found in by_name):
                by_name.add(sid)  # a name two students share stays ambiguous
        return sorted(by_id), sorted(by_name)


def account_keys(row: dict) -> set[str]:
    """The LMS's names of a roster row's person: its `lms_user_id` and `username`, as written."""
    return {row.get(key, "") for key in ("lms_user_id", "username")} - {""}


SEARCHED_DIGITS = 4


def searchable(key: str) -> bool:
    """Whether `key` is looked for inside a name: not a number of fewer than SEARCHED_DIGITS."""
    return not (key.isdigit() and len(key) < SEARCHED_DIGITS)


def whole_in(key: str, text: str) -> bool:
    """Whether `key` occurs in `text` with no Latin letter or digit touching it."""
    return bool(re.search(rf"(?<![0-9A-Za-z]){re.escape(key)}(?![0-9A-Za-z])", text))


def person_keys(row: dict) -> set[str]:
    """The simplified forms a file name may give of a roster row's person."""
    email = row.get("email", "")
    return {simplified(k) for k in (row.get("name", ""), email, email.split("@")[0]) if k} - {""}


def _words_in(name: str, words: list[str]) -> bool:
    """Whether the words of the Latin `name` come one after another among `words`."""
    parts = [w for w in re.split(r"[^0-9a-z]+", folded(name).casefold()) if w]
    return any(words[at : at + len(parts)] == parts for at in range(len(words)))


def simplified(text: str) -> str:
    """Case, spaces and punctuation dropped: "Zhang San" and "zhangsan" compare equal."""
    return "".join(ch for ch in folded(text).casefold() if ch.isalnum())


def folded(text: str) -> str:
    """`text` in Unicode's NFKC form: a name macOS zipped (decomposed é), an id typed in
    full-width digits (２０２５００１) compare equal to the roster's."""
    return unicodedata.normalize("NFKC", text)
