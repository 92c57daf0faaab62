"""REPORT/ for one batch. Opened before anything is graded (what the instructor wrote is read and
checked: grades.csv, overrides.csv); a page kept in memory for each outcome as it comes; and
everything written only once the batch has passed: feedback pages, grades.csv, summary.html,
the LMS files and the nbgrader course. A stopped batch writes nothing.

An interrupted batch writes what it graded and marks the report unfinished wherever an
instructor reads or imports it: grades.csv has a row of status `not_graded_yet` (no grade) for
each submission not reached, summary.html opens with a banner saying so in Chinese, and no LMS
file is written (an earlier run's are removed): an importer takes any CSV whose columns it
maps, so a mark inside the file or in its name would not stop an import of a half-graded class;
the finishing run writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .. import paths
from ..authoring.checkcells import check_titles
from ..cluster import shard
from ..grading.outcome import Outcome
from . import feedback, gradebook, grades, lms, summary

# The statuses whose row holds a grade the kit computed (flagged: one the instructor must
# confirm). Such a row is not replaced by a non-grade status, and only it takes overrides.
# (`scores.GRADE_STATUSES` is another question: which statuses an LMS may import as a score.)
COMPUTED_GRADES = ("graded", "flagged")


@dataclass
class ReportWriter:
    """What one batch writes into `folder`; `open` it, `add` each outcome, then `write`."""

    folder: Path
    columns: list  # (grade_id, points) of every grade cell
    overrides: dict  # by student: the instructor's overrides.csv lines
    people: dict  # the roster by student id ({} without one)
    intake: object = None  # the `Intake`: its files and roster go into summary.html
    previous: dict = field(default_factory=dict)  # grades.csv's rows before this run, by student
    lms: str = "auto"  # which LMS files (`lms.CHOICES`, --lms)
    titles: dict = field(default_factory=dict)  # by grade id: the check's (title, says)
    pages: dict = field(default_factory=dict)  # by student: the feedback page
    kept: dict = field(default_factory=dict)  # by student: the autograded notebook's bytes

    @classmethod
    def open(
        cls, folder: Path, release, student_ids, intake=None, lms_files="auto"
    ) -> ReportWriter:
        """Read and check what the instructor wrote into `folder` before anything is graded;
        raises BadOverrides naming the line of anything in overrides.csv that cannot apply.
        `student_ids` are this batch's students (they may be overridden, as may grades.csv's and
        the roster's); `lms_files` which LMS files to write (`lms.CHOICES`)."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / paths.FEEDBACK).mkdir(exist_ok=True)
        columns = grades.grade_columns(release)
        header, previous = grades.read_grades(folder / paths.GRADES)
        people = lms.people(intake.roster if intake is not None else None)
        overrides = grades.read_overrides(
            folder / paths.OVERRIDES,
            set(previous) | set(student_ids) | set(people),  # a roster's student: no file yet
            grades.kit_columns(columns) + header,
            grades.column_maxima(columns),
        )
        return cls(
            folder, columns, overrides, people, intake, previous, lms_files, check_titles(release)
        )

    def add(self, outcome) -> None:
        """Keep `outcome`'s page and autograded notebook while its working copy still exists."""
        self.kept[outcome.student_id] = gradebook.read_autograded(outcome.autograded)
        overrides = ()
        if outcome.status in COMPUTED_GRADES:  # a row without a grade takes no override
            overrides = self.overrides.get(outcome.student_id, ())
        name = self.people.get(outcome.student_id, {}).get("name", "")
        self.pages[outcome.student_id] = page_of(outcome, overrides, name)

    def write(
        self,
        outcomes,
        course: Path,
        progress,
        replaced=frozenset(),
        replace_graded=False,
        pending=(),
    ) -> None:
        """Everything, once the batch has passed. `replaced` are ids an earlier run graded files
        of this export under (`stale_ids`): their rows, pages and nbgrader submissions go.
        `pending` are the outcomes (status `not_graded_yet`) of submissions an interrupted batch
        did not reach: rows without a grade, no page, and the report marked unfinished.

        A row graded by an earlier run is not replaced by an outcome that is no grade (a
        timeout, a wrong file...) unless `replace_graded`; overrides.csv applies only to rows
        that hold a grade (`graded_only`)."""
        outcomes = self.keep_graded_rows(outcomes, progress, replace_graded)
        # A pending row does not replace an earlier run's grade (kept until it is graded again).
        pending = [
            o
            for o in pending
            if self.previous.get(o.student_id, {}).get("status") not in COMPUTED_GRADES
        ]
        self.overrides = self.graded_only([*outcomes, *pending], progress)
        gradebook.ensure_course(self.folder, course, progress)
        for student_id, text in self.pages.items():
            paths.feedback_page(self.folder, student_id).write_text(text, encoding="utf-8")
            gradebook.keep_notebook(self.folder, student_id, self.kept[student_id])
        for student_id in [*replaced, *(o.student_id for o in pending)]:
            paths.feedback_page(self.folder, student_id).unlink(missing_ok=True)
            gradebook.keep_notebook(self.folder, student_id, None)
        absent = grades.absent_rows(self.intake, self.with_files(outcomes), self.columns)
        rows = grades.write_grades(
            self.folder / paths.GRADES, by_id([*outcomes, *pending]), self.columns,
            self.overrides, drop=replaced, people=self.people, absent=absent,
        )  # fmt: skip
        gone = [Outcome(student_id, "replaced") for student_id in sorted(replaced)]
        self.write_views([*outcomes, *pending], rows, progress, gone, unfinished=len(pending))
        shard.record_outcomes(self.folder, outcomes)  # a shard's report only (cluster/shard.py)

    def with_files(self, outcomes) -> set:
        """Ids of students this run has a file to grade for: those graded now, and those an
        interrupted run has not reached yet or whose earlier grade was kept (none is `missing`)."""
        submitted = self.intake.submissions if self.intake is not None else ()
        return {o.student_id for o in outcomes} | {s.student_id for s in submitted}

    def keep_graded_rows(self, outcomes, progress, replace_graded: bool) -> list:
        """`outcomes` less those that would put a non-grade status over an earlier grade."""
        graded_now = {o.student_id for o in outcomes}  # an interrupt may leave a page without one
        for student_id in set(self.pages) - graded_now:
            self.pages.pop(student_id)
            self.kept.pop(student_id, None)
        held_back = [
            o
            for o in outcomes
            if o.status not in COMPUTED_GRADES
            and self.previous.get(o.student_id, {}).get("status") in COMPUTED_GRADES
        ]
        if not held_back or replace_graded:
            return outcomes
        print(
            f"kept the earlier grade of {len(held_back)} student(s) whose file in this run "
            "could not be graded (pass --replace-graded to record the new status instead):\n"
            + "\n".join(
                f"  {o.student_id}: {self.previous[o.student_id].get('score')} "
                f"({self.previous[o.student_id].get('source', '')}) kept; now {o.status}"
                for o in held_back
            ),
            file=progress,
        )
        for outcome in held_back:
            self.pages.pop(outcome.student_id, None)
            self.kept.pop(outcome.student_id, None)
        return [o for o in outcomes if o not in held_back]

    def graded_only(self, outcomes, progress) -> dict:
        """overrides.csv's lines for students whose row holds a grade; the others are named."""
        status = {sid: row.get("status") for sid, row in self.previous.items()}
        status |= {o.student_id: o.status for o in outcomes}
        ignored = sorted(s for s in self.overrides if status.get(s) not in COMPUTED_GRADES)
        if ignored:
            print(
                f"overrides.csv: not applied to {', '.join(ignored)}: their row holds no grade "
                f"({', '.join(sorted({str(status.get(s)) for s in ignored}))}); an override "
                "applies once the submission is graded",
                file=progress,
            )
        return {s: lines for s, lines in self.overrides.items() if s not in ignored}

    def write_views(self, outcomes, rows, progress, gone=(), unfinished: int = 0) -> None:
        """After grades.csv: the class summary, the LMS files and the nbgrader course's gradebook.

        `gone` are Outcomes of replaced ids (no reviewable notebook): their nbgrader submissions go.
        `unfinished`: how many submissions an interrupted batch left (banner; no LMS file).
        """
        warning = grades.max_score_warning(rows)
        grades.warn(warning, progress)
        warnings = [unfinished_banner(unfinished)] if unfinished else []
        summary.write_summary(
            self.folder / paths.SUMMARY,
            rows,
            self.columns,
            warnings + ([warning] if warning else []),
            intake=self.intake,
            titles=self.titles,
            overrides=self.overrides,
        )
        if unfinished:
            written = lms.remove_unwanted(self.folder, set(), "none")
            written.insert(
                0, "no LMS file written: the run was interrupted (the finishing run writes them)"
            )
        else:
            written = lms.write_lms_files(
                self.folder, rows, self.people, overrides=self.overrides, which=self.lms
            )
        for line in written:
            print(line, file=progress)
        held = gradebook.record(self.folder, [*outcomes, *gone], self.overrides)
        print(
            f"nbgrader course {gradebook.course_dir(self.folder)}: {held} graded submissions "
            "(`nbgrader formgrader` / `nbgrader export` there)",
            file=progress,
        )


def by_id(outcomes) -> list:
    """`outcomes` in the order of their ids: a report written in pieces is written as one."""
    return sorted(outcomes, key=lambda o: o.student_id)


def unfinished_banner(left: int) -> str:
    """summary.html's first words when a batch was interrupted with `left` submissions to grade."""
    return (
        f"评分未完成 / UNFINISHED：本次评分被中断，还有 {left} 份提交没有评分（grades.csv 里它们的"
        "状态是 not_graded_yet，不是成绩）。这份报告里的统计只算已评的部分，也没有写出任何 LMS "
        "导入文件。用同一条命令再运行一次，会从中断处接着评分并写出完整的报告；在那之前请不要导入或公布成绩。"
    )


def page_of(outcome, overrides=(), name: str = "") -> str:
    """The submission's feedback page (with the instructor's `overrides`; `name` from the roster).

    The page shows the final numbers (after `overrides`) beside the graded ones, and names the
    file graded and the student's files that were not.
    """
    final = None
    if overrides:  # the row grades.csv will hold, as `grades.write_grades` computes it
        columns = [(g, m) for g, (_, m) in outcome.scores.items()]
        final = grades.apply_overrides(grades.outcome_row(outcome, columns), list(overrides))
    files = (outcome.source, outcome.superseded, outcome.choice) if outcome.source else None
    if outcome.autograded and Path(outcome.autograded).exists():
        autograded = nbformat.read(outcome.autograded, as_version=4)
        return feedback.render(
            outcome.student_id,
            autograded,
            outcome.scores,
            status=outcome.status,
            reason=outcome.reason,
            repairs=outcome.repairs,
            overrides=overrides,
            final=final,
            files=files,
            name=name,
        )
    return feedback.failure_page(
        outcome.student_id,
        outcome.status,
        outcome.reason,
        outcome.repairs,
        overrides=overrides,
        final=final,
        files=files,
        name=name,
    )


def stale_ids(intake, report_dir: Path) -> dict[str, str]:
    """{id an earlier run graded a file of this export under: what that file is now}.

    A file is matched by its path in the export (grades.csv's `source`); an id graded again in
    this batch is not stale.
    """
    now = {s.source: f"graded as {s.student_id}" for s in intake.submissions}
    now |= {s.source: f"{s.outcome} ({s.why})" for s in intake.skipped}
    ids = {s.student_id for s in intake.submissions}
    _, previous = grades.read_grades(report_dir / paths.GRADES)
    return {
        student_id: f"{row['source']}: {now[row['source']]}"
        for student_id, row in previous.items()
        if row.get("source") in now and student_id not in ids
    }
