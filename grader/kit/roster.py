"""The course's roster: one CSV that maps what an LMS puts in file names to student ids.

    student_id,name,lms_user_id,email
    2023007,Wang Wu,12347,wangwu@example.edu

`student_id` is required and unique; `name`, `lms_user_id` (the LMS's own user number, as
Moodle and Canvas put it in file names; for Moodle the participant number of the assignment)
and `email` are optional. Read as Excel saves it: UTF-8 (with or without a BOM) or GBK.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .report import open_csv


class RosterError(Exception):
    """The roster cannot be used; the message says what to fix."""


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
        except SystemExit as error:  # neither UTF-8 nor GBK
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

    def find(self, key: str, names=(), *, lms: bool = False) -> str | None:
        """The student_id for `key` (an LMS's user number when `lms`), else for a name or login.

        A name that two students share maps to no one.
        """
        for column in ("lms_user_id",) if lms else ("student_id", "lms_user_id"):
            hits = [row["student_id"] for row in self.rows if row.get(column) == key]
            if hits:
                return hits[0]
        for token in (key, *names):
            wanted = simplified(token)
            hits = {
                row["student_id"]
                for row in self.rows
                if wanted
                and wanted
                in (
                    simplified(row.get("name", "")),
                    simplified(row.get("email", "")),
                    simplified(row.get("email", "").split("@")[0]),
                )
            }
            if len(hits) == 1:  # two students of one name: no guess
                return hits.pop()
        return None


def simplified(text: str) -> str:
    """Case, spaces and punctuation dropped: "Zhang San" and "zhangsan" compare equal."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())
