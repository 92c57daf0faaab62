"""Find every submission in what an LMS or a person hands the grader, and say what was left out.

    with discover("export.zip", roster="roster.csv") as intake:
        intake.submissions   # one Submission per student: the notebook to grade, its id, late flag
        intake.skipped       # every other file, with why (student unknown, another notebook of a
                             # student, debris, not a notebook)
        print(intake.table())  # who will be graded, under which id, from which file, and why

Reads a folder, a .zip (zips inside are opened too, at most three deep: `unpack.py`) or one
.ipynb. A NAME_PATTERN (a regex with a `student_id` group, optional `late` and `timestamp`,
matched from the start of the file name, then of its path: nbgrader's `FileNameCollectorPlugin`,
whose matching this module builds on) comes first; then the LMS layouts of `layouts.py` (Moodle,
Canvas, Blackboard, Brightspace, nbgrader's submitted/ and exchange, per-student folders,
`<student_id>.ipynb`) and Gradescope's metadata. `identify.py` ties each notebook to a student
(with a roster: only to a roster student) and picks one notebook a student; a file whose student
cannot be told is a "student unknown" row, never a guess, and two files are compared only when
both belong to one recognised student.

Extracted zips live in a temporary folder that `close()` (or leaving the `with` block) removes.
Bad input raises IntakeError, whose message says what to fix; nothing else is raised for a
damaged student file.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..errors import IntakeError
from ..report.formats import as_cell_text
from . import layouts
from .collector import ExportCollector
from .identify import CHOICES_FILE as CHOICES
from .identify import (
    Choice,
    choose,
    identify,
    pick,
    read_choices,
    stamp,
    unused,
    when_of,
    write_choices,
)
from .roster import Roster
from .unpack import DAMAGED, NO_NOTEBOOK_IN_ZIP, NOT_EXTRACTED, extract, readable, walk

UNKNOWN = "student unknown"
NOT_GRADED = "not graded"
UNDECIDED = "都没有评分"  # a student's notebooks that nothing tells apart


@dataclass
class Submission:
    """One student's notebook, as chosen for grading."""

    student_id: str
    path: Path  # the notebook on disk (inside the temporary folder when it came from a zip)
    source: str  # the file as named in the export: its path inside the folder or zip
    late: bool = False
    superseded: list[str] = field(default_factory=list)  # the student's notebooks not graded
    layout: str = "plain"  # the rule that named it: NAME_PATTERN, nbgrader, Moodle, Canvas, ...
    note: str = ""  # what the instructor should check (an ambiguity, a team)
    why: str = ""  # how the student was told
    choice: str = ""  # with several notebooks: the rule that chose this one (Chinese)

    @property
    def choice_text(self) -> str:
        """With several notebooks: which was graded, by what rule, which not, how to choose another."""
        if not self.choice:
            return ""
        return (
            f"交了 {len(self.superseded) + 1} 个 notebook，评 {self.source}：{self.choice}；没评："
            f"{'、'.join(self.superseded)}。{HOW_TO_CHOOSE}"
        )


@dataclass
class Skipped:
    """A file that is not graded, and why."""

    source: str
    why: str
    student_id: str = ""
    debris: bool = False
    outcome: str = NOT_GRADED  # or UNKNOWN: a notebook whose student cannot be told
    late: bool = False
    graded_instead: str = ""  # another notebook of the same student, graded instead of this one


@dataclass
class Intake:
    """What `discover` found. A context manager: leaving it removes the extracted zips."""

    submissions: list[Submission]
    skipped: list[Skipped]
    scratch: Path  # where zips were extracted
    keyed_by_lms_number: int = 0  # Moodle/Canvas submissions named without a roster
    roster: Roster | None = None
    several: list[dict] = field(default_factory=list)  # choices.csv's rows (`choices.COLUMNS`)

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Intake:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def unknown(self) -> list[Skipped]:
        return [s for s in self.skipped if s.outcome == UNKNOWN]

    def missing(self) -> list[dict]:
        """The roster's students with no notebook in this export ([] without a roster)."""
        seen = {s.student_id for s in self.submissions} | {s.student_id for s in self.skipped}
        rows = self.roster.rows if self.roster else []
        return [row for row in rows if row["student_id"] not in seen]

    def not_graded(self) -> str:
        """The printed "not graded" list: one line a file, bookkeeping files summed up."""
        debris = [s for s in self.skipped if s.debris]
        lines = [f"  {s.source}: {s.why}" for s in self.skipped if not s.debris]
        if len(debris) > 5:
            lines.append(f"  {len(debris)} files of operating-system debris or bookkeeping")
        else:
            lines += [f"  {s.source}: {s.why}" for s in debris]
        head = f"not graded: {len(self.skipped)} file(s)"
        return "\n".join([head + (":" if lines else ""), *lines])

    def warnings(self) -> str:
        """Lines for the instructor: ambiguities, teams, the choice among a student's notebooks,
        files of no known student, LMS numbers."""
        lines = [f"  {s.source}: {s.note}" for s in self.submissions if s.note]
        lines += [f"  {s.student_id}: {s.choice_text}" for s in self.submissions if s.choice]
        if self.unknown():
            lines.append(
                f"  {len(self.unknown())} notebook(s) of no known student are not graded "
                "(intake.csv: outcome 'student unknown', with why)"
            )
        if self.keyed_by_lms_number:
            lines.append(
                f"  {self.keyed_by_lms_number} Moodle/Canvas file(s) are keyed by the LMS's user "
                "number: pass ROSTER=roster.csv (student_id,name,lms_user_id) to use student ids"
            )
        return "\n".join(["note:", *lines]) if lines else ""

    def rows(self, statuses: dict[str, str] | None = None) -> list[tuple[str, ...]]:
        """(file, student_id, outcome, why, late) for every input file, sorted by file."""
        statuses = statuses or {}
        rows = []
        for s in self.submissions:
            why = "; ".join(x for x in (s.why or s.layout, s.choice_text, s.note) if x)
            outcome = statuses.get(s.student_id, "to grade")
            rows.append((s.source, s.student_id, outcome, why, "yes" if s.late else "no"))
        rows += [
            (s.source, s.student_id, s.outcome, s.why, "yes" if s.late else "no")
            for s in self.skipped
        ]
        return sorted(rows)

    def write_csv(self, path: Path, statuses: dict[str, str] | None = None) -> None:
        """Every input file, one row: file, student_id, outcome, why, late (UTF-8 with a BOM);
        and beside it choices.csv, when a student handed in several notebooks (`identify.read_choices`).

        `statuses` maps a student_id to its grading status; without it an outcome is "to grade".
        """
        write_choices(path.with_name(CHOICES), self.several)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8-sig") as handle:
            writer = csv.writer(handle)
            writer.writerow(["file", "student_id", "outcome", "why", "late"])
            writer.writerows([as_cell_text(cell) for cell in row] for row in self.rows(statuses))

    def table(self) -> str:
        """Who will be graded, under which id, from which file and why; then the files not graded."""
        lines = [f"{'student_id':<20} {'late':<4} file  (why)", "-" * 78]
        for s in sorted(self.submissions, key=lambda s: s.student_id):
            why = "; ".join(x for x in (s.why or s.layout, s.choice_text, s.note) if x)
            lines.append(f"{s.student_id:<20} {'yes' if s.late else '':<4} {s.source}  ({why})")
        for s in self.unknown():
            lines.append(f"{'?':<20} {'yes' if s.late else '':<4} {s.source}  ({UNKNOWN}: {s.why})")
        lines.append("-" * 78)
        lines.append(
            f"{len(self.submissions)} to grade, {len(self.unknown())} {UNKNOWN}, "
            f"{len(self.skipped) - len(self.unknown())} other files not graded"
        )
        missing = [f"{r['student_id']} {r.get('name', '')}".strip() for r in self.missing()]
        if missing:
            lines.append(
                f"no notebook from {len(missing)} roster student(s): " + ", ".join(missing)
            )
        return "\n".join(lines)


def discover(path, roster=None, pattern: str | None = None, choices=None) -> Intake:
    """Find the submissions in `path` (a folder, a .zip or one .ipynb); the input is not modified.

    `roster` is a path to a roster CSV (see `Roster.read`), `pattern` a regex with a
    `student_id` group, `choices` a path to the instructor's choices among a student's notebooks
    (`identify.read_choices`). Raises IntakeError for a missing input, a damaged top-level zip, a bad
    roster, pattern or choices file.
    """
    path = Path(path)
    if not path.exists():
        raise IntakeError(
            f"{path} does not exist: "
            "pass SUBMISSIONS=<folder or .zip of the downloaded submissions>"
        )
    table = Roster.read(Path(roster)) if roster else None  # a RosterError is an IntakeError
    chosen = read_choices(Path(choices)) if choices else {}
    collector = ExportCollector(pattern)
    intake = Intake([], [], Path(tempfile.mkdtemp(prefix="ch34-intake-")), roster=table)
    sink = Sink(intake.scratch)
    try:
        if path.is_dir():
            walk(path, sink, collector.is_notebook)
        elif path.suffix.lower() == ".zip":
            try:
                left_out = extract(path, intake.scratch / "export")
            except (zipfile.BadZipFile, OSError, EOFError) as error:
                raise IntakeError(
                    f"{path} is not a readable zip ({error}): download the export again"
                ) from None
            if damaged := [name for name, why in left_out if why.startswith(DAMAGED)]:
                raise IntakeError(
                    f"{path} is damaged ({', '.join(damaged[:3])} cannot be read): download the "
                    "export again"
                )
            for name, why in left_out:
                sink.skip(name, why, parts=tuple(name.split("/")))
            walk(intake.scratch / "export", sink, collector.is_notebook, depth=1)
        elif path.suffix.lower() == ".ipynb":
            sink.notebook(path, readable(path.name), (readable(path.name),))
        else:
            raise IntakeError(f"{path} is neither a folder, a .zip nor a .ipynb file")
        intake.skipped += sink.skipped
        assign(sink, collector, table, intake, chosen)
        for (
            skipped,
            parts,
        ) in sink.named:  # a text-only or unreadable submission is still its student's
            if not skipped.why.startswith(("not a notebook", NO_NOTEBOOK_IN_ZIP, *NOT_EXTRACTED)):
                continue
            if (reading := layouts.owner(parts)) and (who := identify(reading, parts, table)):
                skipped.student_id = who.student_id or ""
                if who.student_id:
                    unread = skipped.why.startswith(NOT_EXTRACTED)
                    skipped.why += f": {reading['layout']} file of {who.student_id}" + (
                        ", to look at by hand" if unread else ", nothing to grade"
                    )
    except BaseException:
        intake.close()
        raise
    return intake


@dataclass
class Sink:
    """What `unpack.walk` reports: notebooks, other files, Gradescope's submitters."""

    scratch: Path
    found: list = field(default_factory=list)  # (path, source, parts)
    skipped: list = field(default_factory=list)
    gradescope: dict = field(default_factory=dict)  # export prefix -> gradescope_ids()
    named: list = field(default_factory=list)  # (Skipped, parts) of files that are no notebook

    def notebook(self, path: Path, source: str, parts: tuple[str, ...]) -> None:
        self.found.append((path, source, parts))

    def skip(self, source: str, why: str, debris: bool = False, parts=None) -> None:
        self.skipped.append(Skipped(source, why, debris=debris))
        if parts is not None and not debris:
            self.named.append((self.skipped[-1], parts))

    def count(self) -> int:
        return len(self.found)


def assign(
    sink: Sink, collector: ExportCollector, roster: Roster | None, intake: Intake, chosen: dict
) -> None:
    """Tie each notebook to its student (or to no one) and choose one notebook a student
    (`chosen`: the instructor's `choices.Choice` by student_id)."""
    by_student: dict[str, list] = {}
    readings = [collector.read(parts, source, sink.gradescope) for _, source, parts in sink.found]
    teams = any(r["layout"] == "Moodle (team submission)" for r in readings)
    shared = layouts.shared_file_names([parts for _, _, parts in sink.found])
    for (path, source, parts), reading in zip(sink.found, readings):
        if teams and reading["layout"] == "Moodle":
            reading = layouts.as_team(reading)
        if reading["layout"] == "plain" and parts in shared:
            reading = layouts.as_folder(reading, parts)
        reading["when"], unread = when_of(reading, path)
        identity = identify(reading, parts, roster)
        if identity.student_id is None:
            late = reading["late"]
            intake.skipped.append(Skipped(source, identity.why, outcome=UNKNOWN, late=late))
            continue
        if roster is None and reading["keyed"] == "lms":
            intake.keyed_by_lms_number += 1
        note = "; ".join(x for x in (identity.note, unread) if x)
        submission = Submission(
            identity.student_id, path, source, reading["late"], [], reading["layout"], note,
            identity.why,
        )  # fmt: skip
        by_student.setdefault(identity.student_id, []).append((reading, submission))
    unused(chosen, set(by_student))
    for student_id in sorted(by_student):
        keep_one(student_id, by_student[student_id], intake, chosen.get(student_id))


HOW_TO_CHOOSE = (
    "要评另一个：在 REPORT/choices.csv 的“文件”列写上它，加 CHOICES=REPORT/choices.csv 再运行"
)


def keep_one(student_id: str, copies: list, intake: Intake, choice: Choice | None) -> None:
    """Grade one of a student's notebooks: the instructor's `choice`, else by `identify.choose`;
    list the others with why, and the student in choices.csv."""
    copies = sorted(copies, key=lambda copy: copy[1].source)  # the same rows whatever the walk
    times = [(r, s.source, s.path.stat().st_mtime) for r, s in copies]
    index, rule = choose(times)
    if choice is not None:
        index = pick(choice, [s.source for _, s in copies])
        rule = f"老师在 {choice.where()} 指定的那个"
    if len(copies) == 1:
        intake.submissions.append(copies[0][1])
        return
    intake.several.append(candidates_row(student_id, copies, times, index, rule, intake.roster))
    if index is None:
        for _, s in copies:
            why = (
                f"{student_id} 交了 {len(copies)} 个 notebook，{rule}：{UNDECIDED}。{HOW_TO_CHOOSE}"
            )
            intake.skipped.append(Skipped(s.source, why, student_id, late=s.late))
        return
    chosen = copies[index][1]
    others = [s for i, (_, s) in enumerate(copies) if i != index]
    chosen.superseded = [s.source for s in others]
    chosen.choice = rule
    intake.submissions.append(chosen)
    for s in others:
        why = f"{student_id} 的另一个 notebook，没有评分：评的是 {chosen.source}，{rule}"
        intake.skipped.append(
            Skipped(s.source, why, student_id, late=s.late, graded_instead=chosen.source)
        )


def candidates_row(student_id, copies, times, index, rule, roster) -> dict:
    """choices.csv's row of a student with several notebooks (`choices.COLUMNS`)."""
    rows = roster.rows if roster else []
    name = next((r.get("name", "") for r in rows if r["student_id"] == student_id), "")
    listed = [
        f"{s.source}（{stamp(r.get('when')) + ' 提交' if r.get('when') else '文件时间 ' + stamp_of(mtime)}）"
        for (_, s), (r, _, mtime) in zip(copies, times)
    ]
    return {
        "学号": student_id,
        "姓名": name,
        "文件": copies[index][1].source if index is not None else "",
        "可选的文件（时间）": " | ".join(listed),
        "默认评分的依据": rule,
    }


def stamp_of(mtime: float) -> str:
    return stamp(datetime.fromtimestamp(mtime))
