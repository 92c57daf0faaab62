"""Tie each notebook to one student, never two students to one id, and pick one notebook each.

`identify(reading, parts, roster)` turns what `layouts.read_name` read into an `Identity`:
the student_id (None: the student cannot be told, and the file is not graded), how it was found,
and a note for the instructor (an ambiguity, a team whose members are unknown). It never
guesses: without a roster an id is what the export's layout names; with one, only a roster
student is an id (by the LMS's number, the student id, a name or email the name carries, or a
student id or name found inside the file or folder names: 学号_姓名, 姓名-学号, 学号姓名, ...),
and a name two students share, or a file that names two students, ties the file to no one.

`choose(copies)` picks the notebook to grade among one student's: the newest (the export's time
stamp, else the file's time); at equal times the one named like the assignment's notebook, then
the later copy ("x (1)" is made after "x"); the order of names never decides. When nothing
tells them apart, none is graded. Two files are ever compared only when both belong to one
recognised student: a duplicate is never a guess. The instructor's CHOICES file overrides
`choose` (`read_choices`, `pick`; the section at the end), and every intake writes one ready to
edit (`write_choices`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nbgrader.utils import parse_utc

from ..errors import IntakeError, UnreadableCsv
from ..report.formats import from_cell_text, open_csv, write_csv
from .layouts import named_like_assignment
from .roster import Roster, header_key

NOT_ON_ROSTER = "add the student to the roster (or fix its lms_user_id), then run again"
RENAME = "rename the file after its student (<student_id>_<name>.ipynb) or pass NAME_PATTERN="


@dataclass(frozen=True)
class Identity:
    student_id: str | None  # None: the student cannot be told
    why: str  # how the id was found, or why it could not be
    note: str = ""  # what the instructor should check


def identify(reading: dict, parts: tuple[str, ...], roster: Roster | None) -> Identity:
    """Whose notebook the file at `parts` is, from its `reading` and the roster (or None).

    A file whose own name names one roster student inside a folder that names another (张三's
    folder holding `2025002_李四.ipynb`) is tied to no one: which of them handed it in is for the
    instructor to say (`against_folders`).
    """
    identity = tie(reading, parts, roster)
    if roster is not None and identity.student_id and reading["layout"] in BY_FILE_NAME:
        return against_folders(identity, parts, roster)
    return identity


BY_FILE_NAME = ("plain", "per-student folder")  # readings no LMS made: a folder may disagree


def against_folders(identity: Identity, parts: tuple[str, ...], roster: Roster) -> Identity:
    """`identity`, unless the innermost folder that names one roster student names another."""
    for folder in reversed(parts[:-1]):
        by_id, by_name = roster.search(folder)
        named = set(by_id) | set(by_name)
        if len(named) != 1:
            continue
        (other,) = named
        if other == identity.student_id:
            return identity
        return unknown(
            f"文件名 {parts[-1]!r} 对上名单上的 {roster.described(identity.student_id)}，它所在的"
            f"文件夹 {folder!r} 却是 {roster.described(other)} 的：不知道是谁交的，没有评分。"
            "确认之后把文件改名或移到交它的学生的文件夹里，再运行一次"
        )
    return identity


def tie(reading: dict, parts: tuple[str, ...], roster: Roster | None) -> Identity:
    """`identify` by the reading and the roster alone."""
    keyed, why = reading["keyed"], reading["why"]
    if keyed in ("anonymous", "team"):  # the export hides the person: its own id is the key
        note = "the team's members are not in the export" if keyed == "team" else ""
        return Identity(reading["student_id"], why, note)
    if roster is None:
        return without_roster(reading)
    if keyed == "lms":
        for number in reading["candidates"] or (reading["student_id"],):
            if hit := roster.by_lms(number):
                return Identity(hit, f"{why} → roster lms_user_id")
    if keyed == "id":  # each reading whole, as a student id, an LMS user id or a user name
        found = id_hits(reading["candidates"] or (reading["student_id"],), roster)
        if len(found) == 1:
            (student_id, (candidate, what)), *_ = found.items()
            return Identity(student_id, f"{why} → roster {what} {candidate!r}")
        if len(found) > 1:
            return unknown(
                f"{why}: it reads as several roster students ({', '.join(sorted(found))})"
            )
    spoken = (*reading["names"], *([reading["student_id"]] if keyed == "id" else []))
    for name in spoken:
        hits = roster.by_name(name)
        if len(hits) == 1:
            return Identity(hits[0], f"{why} → roster name {name!r}")
        if len(hits) > 1:
            return unknown(shared_name(name, hits, reading, roster))
    return search_names(reading, parts, roster)


def id_hits(candidates, roster: Roster) -> dict[str, tuple[str, str]]:
    """{roster student: (the reading that names it, the roster column)} over `candidates`.

    Each is matched whole, against student_id, then lms_user_id and username: a Blackboard user
    name `li_wei5` finds its student before the split reading `wei5` could find another; where
    two readings find two students, the caller ties the file to no one.
    """
    found: dict[str, tuple[str, str]] = {}
    for candidate in candidates:
        for lookup, column in (
            (roster.by_id, "student_id"),
            (roster.by_account, "lms_user_id/username"),
        ):
            hit = lookup(candidate)
            if hit and hit not in found:
                found[hit] = (candidate, column)
    return found


def without_roster(reading: dict) -> Identity:
    if reading["student_id"] is None:
        hint = "pass ROSTER=roster.csv (with names) or NAME_PATTERN=... to tell the student"
        return unknown(f"{reading['why'] or 'the name tells no student'}; {hint}")
    note = ""
    if len(reading["candidates"]) > 1:
        others = ", ".join(repr(c) for c in reading["candidates"][1:3])
        note = (
            f"the name can also be read as {others}: pass ROSTER=roster.csv to confirm "
            f"{reading['student_id']!r}"
        )
    return Identity(reading["student_id"], reading["why"], note)


def search_names(reading: dict, parts: tuple[str, ...], roster: Roster) -> Identity:
    """A roster student's id or name inside the file's or its folders' names, innermost first."""
    stem = parts[-1][: -len(".ipynb")]
    for text in (stem, *reversed(parts[:-1])):
        by_id, by_name = roster.search(text)
        # The LMS's own number in the name is never another student's id.
        by_id = [sid for sid in by_id if sid != reading["lms_number"]]
        if len(by_id) == 1 and set(by_name) <= set(by_id):
            return Identity(by_id[0], f"student id {by_id[0]} in the name {text!r}")
        if len(by_id) > 1 or (by_id and by_name):
            found = ", ".join(sorted(set(by_id) | set(by_name)))
            return unknown(f"{text!r} names more than one roster student ({found})")
        if len(by_name) == 1:
            return Identity(by_name[0], f"the roster name of {by_name[0]} in {text!r}")
        if len(by_name) > 1:
            return unknown(shared_name(text, by_name, reading, roster))
    said = reading["why"] or "the name tells no student"
    if reading["student_id"]:
        return unknown(f"{said} ({reading['student_id']!r}), not on the roster; {NOT_ON_ROSTER}")
    return unknown(f"{said}, and no roster student's id or name is in it; {RENAME}")


# Where an LMS's own number for a student is read, for a roster's lms_user_id column.
LMS_NUMBER_SOURCE = {
    "Moodle": (
        "Moodle 的参与者编号（文件夹名 <姓名>_<编号>_assignsubmission_file 里的数字；也在 Moodle 的"
        "评分工作表 Identifier 列 “Participant <编号>”）"
    ),
    "Canvas": "Canvas 的用户 ID（文件名 <姓名>_<用户ID>_<提交ID>_… 里的第一个数字；也在 Canvas 成绩导出的 ID 列）",
}


def shared_name(name: str, hits: list[str], reading: dict, roster: Roster) -> str:
    """Why a name that two roster students share ties the file to no one, and what tells them
    apart: the roster's `lms_user_id` column where the file carries the LMS's number, else a
    student id in the file's name (issue 40)."""
    rows = "、".join(roster.described(sid) for sid in hits)
    said = f"名字 {name!r} 是名单上 {len(hits)} 名学生共有的：{rows}；同名，认不出是谁，没有评分"
    number, layout = reading.get("lms_number"), reading.get("layout", "")
    source = next((text for lms, text in LMS_NUMBER_SOURCE.items() if layout.startswith(lms)), "")
    if number and source:
        return (
            f"{said}。这个文件带着 {source} {number}：在名单里加一列 lms_user_id（表头也可写 "
            "Participant number、用户ID），每名学生填上自己的编号，按这一列认人，再运行一次"
        )
    return (
        f"{said}。请把文件改名为 <学号>_<姓名>.ipynb（例如 {hits[0]}_{name}.ipynb），文件名里的学号"
        "对上名单的学号列（student_id / 学号）就能认出，再运行一次"
    )


def unknown(why: str) -> Identity:
    return Identity(None, why)


def choose(copies: list[tuple[dict, str, float]]) -> tuple[int | None, str]:
    """(index of the notebook to grade, the rule that chose it, in Chinese) among one student's
    copies; each copy is (reading, source, mtime). None when nothing tells the copies apart.

    The newest is graded: the student's last submission is the one an LMS keeps as final and
    the one an instructor expects (issue 40: a draft named like the assignment's notebook beat
    the later `…_final.ipynb`). Newest by the export's own time (the LMS's submission time,
    nbgrader's timestamp.txt), else the file's time (the time a zip records for it);
    only where the times are equal does the name decide (the one named like the assignment's
    notebook, then the later copy: "x (1)" is made after "x"). The order of names never decides.
    """
    ranked = sorted(range(len(copies)), key=lambda i: rank(copies[i]), reverse=True)
    if len(ranked) == 1:
        return ranked[0], "只有这一个"
    best, second = rank(copies[ranked[0]]), rank(copies[ranked[1]])
    if best == second:
        return None, "时间相同，名字也分不出先后"
    decided = next(k for k, (a, b) in enumerate(zip(best, second)) if a != b)
    # No time in the rule: intake.csv's rows are a shard's fingerprint (`cluster/shard.py`), the
    # same on machines in other time zones; choices.csv lists each file's time.
    return ranked[0], [
        "最新提交的那个（按导出里写明的提交时间）",
        "最新的那个（按文件时间）",
        "与作业 notebook 同名的那个（文件时间相同）",
        "副本编号最大的那个（文件时间相同；“x (1)” 晚于 “x”）",
    ][decided]


def named_like(reading: dict) -> bool:
    return named_like_assignment(reading["file_id"])


def rank(copy: tuple[dict, str, float]) -> tuple:
    """(export time stamp, file time, named like the assignment's, copy number): the larger, the
    one graded."""
    reading, _, mtime = copy
    return (
        reading.get("when") or datetime.min,
        round(mtime),
        named_like(reading),
        reading.get("copy", 0),
    )


def stamp(when: datetime | None) -> str:
    """A time as the instructor reads it: `2026-12-01 08:00:00`."""
    return when.strftime("%Y-%m-%d %H:%M:%S") if when else "未知"


def when_of(reading: dict, path: Path) -> tuple[datetime | None, str]:
    """The export's time of the notebook (naive UTC), and a note when it could not be read."""
    when = reading["timestamp"]
    stamp = path.parent / "timestamp.txt"
    if reading["layout"].startswith("nbgrader") and stamp.is_file():
        when = stamp.read_text(encoding="utf-8", errors="replace").strip()
    if isinstance(when, str):
        try:
            return parse_utc(when).replace(tzinfo=None), ""
        except (ValueError, OverflowError):
            return None, f"timestamp {when!r} unread"
    return when, ""


# -- the instructor's choice: CHOICES=choices.csv ---------------------------------------------
#
# The instructor's choice among a student's notebooks: CHOICES=choices.csv.
#
#     学号,文件
#     2025001,ch34_prefix_cache_final.ipynb
#
# A student who handed in more than one notebook is graded on the newest (`identify.choose`);
# a row here grades the file it names instead. `文件` is the file's path as intake.csv lists it,
# or only its name where no other notebook of that student has the same name. The headers may
# be `student_id,file` too; other columns are ignored. Read as Excel saves it: UTF-8 (with or
# without a BOM) or GBK. A row that names a student with no notebook in the export, or a file
# that is none of theirs, stops the run with a message that says what to fix.
#
# Every intake (`make intake`, `make autograde`) writes REPORT/choices.csv, ready to edit: one row
# for each student with more than one notebook, `文件` the one graded, then every candidate with
# its time, and the rule that chose.

CHOICES_FILE = "choices.csv"
STUDENT_HEADERS = ("学号", "student_id")
FILE_HEADERS = ("文件", "file")
COLUMNS = ["学号", "姓名", "文件", "可选的文件（时间）", "默认评分的依据"]


@dataclass(frozen=True)
class Choice:
    """`file` is the notebook to grade of `student_id`, from line `line` of `path`."""

    student_id: str
    file: str
    line: int
    path: Path

    def where(self) -> str:
        return f"{self.path} 第 {self.line} 行（{self.student_id},{self.file}）"


def read_choices(path: Path) -> dict[str, Choice]:
    """{student_id: Choice} from the instructor's CSV; an IntakeError says what is wrong."""
    if not path.is_file():
        raise IntakeError(
            f"CHOICES={path} does not exist: pass the choices.csv that `make intake` wrote"
        )
    try:
        handle = open_csv(path)
    except UnreadableCsv as error:
        raise IntakeError(str(error).removeprefix("error: ")) from None
    with handle:
        reader = csv.reader(handle)
        numbered = [(reader.line_num, line) for line in reader if any(map(str.strip, line))]
    header = [header_key(text) for text in (numbered[0][1] if numbered else [])]
    at = [next((header.index(header_key(h)) for h in names if header_key(h) in header), None)
          for names in (STUDENT_HEADERS, FILE_HEADERS)]  # fmt: skip
    if None in at:
        raise IntakeError(
            f"CHOICES={path}: the first line must name the columns 学号,文件 (or student_id,file); "
            f"it is {numbered[0][1] if numbered else 'empty'}"
        )
    chosen: dict[str, Choice] = {}
    for line, cells in numbered[1:]:
        student_id, file = (from_cell_text(cells[i].strip()) if i < len(cells) else "" for i in at)
        if not student_id and not file:
            continue
        if not student_id or not file:
            raise IntakeError(
                f"CHOICES={path}, line {line}: both 学号 and 文件 are needed, got {cells}"
            )
        if student_id in chosen:
            raise IntakeError(
                f"CHOICES={path}: 学号 {student_id} is on lines {chosen[student_id].line} and {line}: keep one"
            )
        chosen[student_id] = Choice(student_id, file, line, path)
    return chosen


def pick(choice: Choice, sources: list[str]) -> int:
    """The index among a student's `sources` (paths in the export) of the file `choice` names."""
    whole = [i for i, source in enumerate(sources) if source == choice.file]
    named = [i for i, source in enumerate(sources) if source.rsplit("/", 1)[-1] == choice.file]
    found = whole or named
    listed = "、".join(sources)
    if not found:
        raise IntakeError(
            f"{choice.where()}: {choice.student_id} 没有叫这个名字的 notebook；他的 notebook：{listed}。"
            "把 文件 改成其中一个（intake.csv 的 file 列），再运行一次"
        )
    if len(found) > 1:
        raise IntakeError(
            f"{choice.where()}: {choice.student_id} 有 {len(found)} 个 notebook 叫这个名字：{listed}。"
            "写完整的路径（intake.csv 的 file 列），再运行一次"
        )
    return found[0]


def unused(choices: dict[str, Choice], students: set[str]) -> None:
    """Stop on a row whose student has no notebook in this export (a typo in 学号)."""
    for student_id, choice in choices.items():
        if student_id not in students:
            raise IntakeError(
                f"{choice.where()}: 这份导出里没有学号 {student_id} 的 notebook：检查学号（intake.csv 的 "
                "student_id 列），或删掉这一行"
            )


def write_choices(path: Path, candidates: list[dict]) -> None:
    """REPORT/choices.csv: a row for each student with several notebooks (`candidates`: dicts of
    COLUMNS); nothing written when there is none."""
    if candidates:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_csv(path, COLUMNS, candidates)
