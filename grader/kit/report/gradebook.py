"""The course nbgrader's own tools read: REPORT/nbgrader/, with every graded submission's scores.

The batch grades each submission in a throw-away copy of the grading course, so nbgrader's
gradebook there dies with it. This module keeps a course for the instructor instead:

    REPORT/nbgrader/nbgrader_config.py, gradebook.db, source/, release/   (copied from the grading course)
    REPORT/nbgrader/autograded/<student>/ch34_prefix_cache/ch34_prefix_cache.ipynb

and writes each graded submission's scores into its gradebook.db through nbgrader's Gradebook
API, so that `cd REPORT/nbgrader && nbgrader formgrader` lists them for manual review and
`nbgrader export` writes grades.csv the nbgrader way. It lives beside the report, not in
build/: `make notebooks` never wipes it, and `generate_assignment` is never blocked by it.

Only the batch's parent process writes here (the forked graders never share this SQLite file).
Grading a student again replaces that student's scores (and manual grades). A submission that could not be
graded has no notebook to review: its student is listed with no submission. A flagged one
(suspicious code, zeroed) is marked as needing a manual grade. An override of a grade cell in
overrides.csv becomes that cell's manual score (nbgrader shows manual over automatic); an
override of a TODO, a part or the score has no place in nbgrader's gradebook.
"""

from __future__ import annotations

import filecmp
import shutil
import sys
import time
import warnings
from pathlib import Path

from nbgrader.api import (
    Comment,
    Grade,
    Gradebook,
    Student,
    SubmittedAssignment,
    SubmittedNotebook,
)
from traitlets.config.loader import PyFileConfigLoader

from .. import paths
from ..paths import ASSIGNMENT

COURSE_FOLDER = paths.NBGRADER_COURSE  # under the report folder
NOTEBOOK = paths.NOTEBOOK_ID
REVIEWABLE = ("graded", "flagged")


def course_dir(report_dir: Path) -> Path:
    return report_dir / COURSE_FOLDER


def ensure_course(report_dir: Path, template: Path, progress=sys.stderr) -> Path:
    """The report's nbgrader course, made from `template` (the grading course) when missing.

    When the template's source notebook changed since (points, cells), the old course is moved
    aside to `nbgrader-before-<time>/`, said on `progress`, and a new one is made.
    """
    course = course_dir(report_dir)
    source = paths.course_source_notebook
    if course.exists() and not filecmp.cmp(source(course), source(template), shallow=False):
        aside = report_dir / f"{COURSE_FOLDER}-before-{time.strftime('%Y%m%d-%H%M%S')}"
        course.rename(aside)
        print(
            f"WARNING: the assignment changed since {course} was made; the old nbgrader course "
            f"(and its manual grades) moved to {aside}",
            file=progress,
        )
    if not course.exists():
        staging = course.with_name(COURSE_FOLDER + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in ("nbgrader_config.py", "gradebook.db"):
            shutil.copy2(template / name, staging / name)
        for name in ("source", "release"):
            shutil.copytree(template / name, staging / name)
        staging.rename(course)
    return course


def read_autograded(autograded: str) -> bytes | None:
    """The autograded notebook's bytes while its working copy still exists; None if there is none."""
    return Path(autograded).read_bytes() if autograded and Path(autograded).exists() else None


def keep_notebook(report_dir: Path, student_id: str, notebook: bytes | None) -> None:
    """Put a graded submission's autograded notebook (`read_autograded`) into the course."""
    target = paths.autograded_notebook(course_dir(report_dir), student_id)
    shutil.rmtree(target.parent, ignore_errors=True)
    if notebook is not None:
        target.parent.mkdir(parents=True)
        target.write_bytes(notebook)


def record(report_dir: Path, outcomes, overrides: dict | None = None) -> int:
    """Write `outcomes` into the course's gradebook; return how many submissions it now holds.

    One transaction for the batch (nbgrader's `add_submission` commits each time: about 0.2 s a
    student). A student graded before keeps the submission row; its scores are replaced.
    """
    course = course_dir(report_dir)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    url = f"sqlite:///{course / 'gradebook.db'}"
    with warnings.catch_warnings(), Gradebook(url, config.CourseDirectory.course_id) as gradebook:
        # nbgrader's ORM trips SQLAlchemy's autoflush warnings: not the instructor's business
        warnings.simplefilter("ignore")
        assignment = gradebook.find_assignment(ASSIGNMENT)
        cell_names = {c.id: c.name for nb in assignment.notebooks for c in nb.grade_cells}
        students = {student.id: student for student in gradebook.students}
        submissions = {s.student_id: s for s in gradebook.assignment_submissions(ASSIGNMENT)}
        gone = []
        for outcome in outcomes:
            student = students.get(outcome.student_id)
            if student is None:
                student = students[outcome.student_id] = Student(id=outcome.student_id)
                gradebook.db.add(student)
            submission = submissions.get(outcome.student_id)
            notebook_file = paths.autograded_notebook(course, outcome.student_id)
            if outcome.status not in REVIEWABLE or not notebook_file.exists():
                if submission is not None:  # nothing left to review
                    gone.append(outcome.student_id)
                continue
            if submission is None:
                submission = new_submission(gradebook, assignment, student)
            manual = {
                o["column"]: float(o["value"])
                for o in (overrides or {}).get(outcome.student_id, [])
            }
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    name = cell_names.get(grade.cell_id)
                    grade.auto_score = outcome.scores.get(name, (0.0, 0.0))[0]
                    grade.manual_score = manual.get(name)
                    grade.needs_manual_grade = outcome.status == "flagged"
        gradebook.db.commit()
        for student_id in gone:  # after the commit: each removal commits and expires the rest
            gradebook.remove_submission(ASSIGNMENT, student_id)
        return len(gradebook.assignment_submissions(ASSIGNMENT))


def new_submission(gradebook, assignment, student) -> SubmittedAssignment:
    """nbgrader's `Gradebook.add_submission`, without its commit: every cell's row, empty."""
    submission = SubmittedAssignment(assignment=assignment, student=student)
    for notebook in assignment.notebooks:
        submitted = SubmittedNotebook(notebook=notebook, assignment=submission)
        for cell in notebook.grade_cells:
            Grade(cell_id=cell.id, notebook=submitted)
        for cell in notebook.solution_cells:
            Comment(cell_id=cell.id, notebook=submitted)
        for cell in notebook.task_cells:
            Comment(cell_id=cell.id, notebook=submitted)
            Grade(cell_id=cell.id, notebook=submitted)
    gradebook.db.add(submission)
    return submission
