"""The instructor's choice among a student's notebooks: CHOICES=choices.csv.

    学号,文件
    2025001,ch34_prefix_cache_final.ipynb

A student who handed in more than one notebook is graded on the newest (`identify.choose`);
a row here grades the file it names instead. `文件` is the file's path as intake.csv lists it,
or only its name where no other notebook of that student has the same name. The headers may
be `student_id,file` too; other columns are ignored. Read as Excel saves it: UTF-8 (with or
without a BOM) or GBK. A row that names a student with no notebook in the export, or a file
that is none of theirs, stops the run with a message that says what to fix.

Every intake (`make intake`, `make autograde`) writes REPORT/choices.csv, ready to edit: one row
for each student with more than one notebook, `文件` the one graded, then every candidate with
its time, and the rule that chose.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ..errors import IntakeError, UnreadableCsv
from ..report.formats import open_csv, write_csv
from .roster import header_key

NAME = "choices.csv"
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
        raise IntakeError(f"CHOICES={path} does not exist: pass the choices.csv that `make intake` wrote")
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
        student_id, file = (cells[i].strip() if i < len(cells) else "" for i in at)
        if not student_id and not file:
            continue
        if not student_id or not file:
            raise IntakeError(f"CHOICES={path}, line {line}: both 学号 and 文件 are needed, got {cells}")
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
