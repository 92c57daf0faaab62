"""The course's roster: one CSV that maps what an LMS puts in file names to student ids.

    student_id,name,lms_user_id,email
    2023007,Wang Wu,12347,wangwu@example.edu

`student_id` is required and unique; `name`, `lms_user_id` (the LMS's own user number, as
Moodle and Canvas put it in file names; for Moodle the participant number of the assignment)
and `email` are optional. Read as Excel saves it: UTF-8 (with or without a BOM) or GBK.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import RosterError, UnreadableCsv
from ..report.formats import open_csv


@dataclass
class Roster:
    """The course's students: student_id, and optionally name, lms_user_id and email."""

    rows: list[dict]

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
            reader = csv.DictReader(handle)
            header = [(h or "").strip().lower() for h in reader.fieldnames or []]
            if "student_id" not in header:
                raise RosterError(
                    f"roster {path} has no student_id column (its header is {header}): the "
                    "first line must name the columns, e.g. student_id,name,lms_user_id,email"
                )
            reader.fieldnames = header
            rows = [{k: (v or "").strip() for k, v in row.items() if k} for row in reader]
        for key in ("student_id", "lms_user_id"):
            seen = {}
            for line, row in enumerate(rows, start=2):
                value = row.get(key, "")
                if key == "student_id" and not value:
                    raise RosterError(f"roster {path}, line {line}: the student_id is empty")
                if value and value in seen:
                    raise RosterError(
                        f"roster {path}: {key} {value!r} appears on lines {seen[value]} and {line}"
                    )
                seen[value] = line
        return cls(rows)

    def by_lms(self, number: str) -> str | None:
        """The student whose `lms_user_id` is `number`, or None."""
        return next(
            (r["student_id"] for r in self.rows if number and r.get("lms_user_id") == number), None
        )

    def by_id(self, key: str) -> str | None:
        """The student whose `student_id` is `key`, or None."""
        return next((r["student_id"] for r in self.rows if r["student_id"] == key), None)

    def by_name(self, token: str) -> list[str]:
        """Every student whose name, email or email's local part is `token` (simplified)."""
        wanted = simplified(token)
        if not wanted:
            return []
        return [row["student_id"] for row in self.rows if wanted in person_keys(row)]

    def search(self, text: str) -> tuple[list[str], list[str]]:
        """(students whose id, students whose name, occurs in `text`), each sorted.

        An id counts where no other letter or digit of the Latin alphabet touches it
        (`2025001_张三`, `李四-2025002`, `2025003王小明`); a Chinese name counts anywhere in the
        text, a Latin name as whole words (`Zhang San`, `zhang_san`, `ZhangSan`).
        """
        by_id, by_name = set(), set()
        words = re.split(r"[^0-9A-Za-z]+", text.casefold())
        squashed = simplified(text)
        for row in self.rows:
            sid = row["student_id"]
            if re.search(rf"(?<![0-9A-Za-z]){re.escape(sid)}(?![0-9A-Za-z])", text):
                by_id.add(sid)
            name = row.get("name", "")
            if not simplified(name):
                continue
            if not name.isascii():
                if simplified(name) in squashed:
                    by_name.add(sid)
            elif simplified(name) in words or _words_in(name, words):
                by_name.add(sid)
        return sorted(by_id), sorted(by_name)


def person_keys(row: dict) -> set[str]:
    """The simplified forms a file name may give of a roster row's person."""
    email = row.get("email", "")
    return {simplified(k) for k in (row.get("name", ""), email, email.split("@")[0]) if k} - {""}


def _words_in(name: str, words: list[str]) -> bool:
    """Whether the words of the Latin `name` come one after another among `words`."""
    parts = [w for w in re.split(r"[^0-9a-z]+", name.casefold()) if w]
    return any(words[at : at + len(parts)] == parts for at in range(len(words)))


def simplified(text: str) -> str:
    """Case, spaces and punctuation dropped: "Zhang San" and "zhangsan" compare equal."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())
