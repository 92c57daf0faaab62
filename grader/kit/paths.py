"""Every path and name of the course, in one place: the assignment and its notebook, the one
source, the generated notebooks, the nbgrader courses and where each notebook sits in one, and
the files of a report folder.

Paths under the repository are absolute (`REPO_ROOT / ...`); the outputs of `make notebooks` and
`make solutions` are relative to the root they are written under (the repository, or the
build's `--out`). A course's own layout is nbgrader's: `source/`, `release/`,
`submitted/<student>/`, `autograded/<student>/`, each holding `<assignment>/<notebook>`.
"""

from __future__ import annotations

from pathlib import Path

from .errors import NoGradingCourse

REPO_ROOT = Path(__file__).resolve().parents[2]

# The assignment: nbgrader's assignment id, and its one notebook.
ASSIGNMENT = "ch34_prefix_cache"
NOTEBOOK_NAME = f"{ASSIGNMENT}.ipynb"
NOTEBOOK_ID = NOTEBOOK_NAME[: -len(".ipynb")]  # the notebook as nbgrader's gradebook names it

# The one source and the settings beside it.
SOURCE_PATH = REPO_ROOT / "grader" / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py"
CHECKS_DIR = SOURCE_PATH.parent / "checks"
COURSE_SETTINGS = REPO_ROOT / "grader" / "course.toml"
NBGRADER_CONFIG = REPO_ROOT / "grader" / "nbgrader_config.py"

# What the build writes, relative to its root (the repository, or --out).
STUDENT_NOTEBOOK = Path("notebooks") / NOTEBOOK_NAME
SOLUTIONS_NOTEBOOK = Path("solutions") / NOTEBOOK_NAME
COURSE = Path("build") / "course"  # nbgrader's course, kept for the instructor
GRADING_COURSE = Path("build") / "grading-course"  # the autograder's template
STUDENT_RELEASE = (
    "student-release.ipynb"  # in the grading course: what submissions are normalised against
)
COMPAT_VENVS = Path("build") / "compat"  # `make compat`'s throwaway environments


def require_grading_course(course: Path) -> Path:
    """`course`, resolved; NoGradingCourse when `make` has not built it (no gradebook.db)."""
    course = course.resolve()
    if not (course / "gradebook.db").exists():
        raise NoGradingCourse(
            f"no grading course at {course}: run `make` first (`make notebooks` builds only it)"
        )
    return course


def course_source_notebook(course: Path) -> Path:
    """The source notebook inside an nbgrader course (with the solutions and hidden tests)."""
    return course / "source" / ASSIGNMENT / NOTEBOOK_NAME


def released_notebook(course: Path) -> Path:
    """What nbgrader's `generate_assignment` released in `course`."""
    return course / "release" / ASSIGNMENT / NOTEBOOK_NAME


def submitted_notebook(course: Path, student_id: str) -> Path:
    """Where nbgrader's `autograde` reads `student_id`'s submission in `course`."""
    return course / "submitted" / student_id / ASSIGNMENT / NOTEBOOK_NAME


def autograded_notebook(course: Path, student_id: str) -> Path:
    """Where nbgrader's `autograde` writes `student_id`'s graded notebook in `course`."""
    return course / "autograded" / student_id / ASSIGNMENT / NOTEBOOK_NAME


# The files of a report folder (`--report`, REPORT= of `make autograde`).
GRADES = "grades.csv"
AS_GRADED = ".grades-as-graded.json"  # beside grades.csv: every row before overrides
OVERRIDES = "overrides.csv"
INTAKE = "intake.csv"
SUMMARY = "summary.html"
FEEDBACK = "feedback"  # a folder: one page per student (`page_name`)
CANVAS = "canvas.csv"
MOODLE = "moodle.csv"
WORKSHEET = "moodle-grading-worksheet.csv"
NBGRADER_COURSE = "nbgrader"  # a folder: the course nbgrader's own tools read


def page_name(student_id: str) -> str:
    """`<student_id>.html`, with path separators (and a leading dot) made harmless."""
    name = student_id.replace("/", "_").replace("\\", "_").replace("\0", "_")
    return ("_" + name if name.startswith(".") or not name else name) + ".html"


def feedback_page(report_dir: Path, student_id: str) -> Path:
    """A student's feedback page in `report_dir`."""
    return report_dir / FEEDBACK / page_name(student_id)
