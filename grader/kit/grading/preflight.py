"""The preflight: the reference solution graded exactly as the batch grades, before any student.

`write_reference` writes the release with every answer cell holding the reference code of the
grading course's source; the batch grades it first, through its own pool (same interpreter,
sandbox, limits and forked grader), and `judge_preflight` raises `GraderFault` unless it earned
full marks on every grade cell: graded exactly as the students are, anything less is the
grader's fault.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from .. import paths
from ..authoring.examples import filled_submission
from ..authoring.nbsource import nbgrader_meta, strip_solution_markers
from ..errors import GraderFault
from ..report import scores

REFERENCE_ID = "reference-solution"  # the preflight's submission: no student's


def reference_submission(course: Path):
    """The release with every answer cell holding the reference code of the course's source."""
    source = nbformat.read(paths.course_source_notebook(course), as_version=4)
    for cell in source.cells:
        if nbgrader_meta(cell).get("solution"):
            cell.source = strip_solution_markers(cell.source)
    release = nbformat.read(course / paths.STUDENT_RELEASE, as_version=4)
    return filled_submission(release, source)


def write_reference(course: Path, folder: Path) -> Path:
    """The preflight's notebook (`reference_submission`) written into `folder`; its path."""
    path = folder / f"{REFERENCE_ID}.ipynb"
    nbformat.write(reference_submission(course.resolve()), path)
    return path


# What to check, by how the reference solution ended.
CHECK = {
    "kernel_died": "can the kernel start in the sandbox (the Python installation it binds; "
    "--no-zygote tries bubblewrap), is --memory-gb high enough",
    "grader_crash": "the memory limit (--memory-gb), the cgroup limits, free disk space",
    "grader_error": "the nbgrader log above; rebuild the grading course with `make notebooks`",
    "timeout": "--cell-timeout and --notebook-timeout, and how busy this machine is",
    "graded": "that the grading course matches the source (`make notebooks`), and the "
    "limits: --memory-gb (torch alone maps about 1.5 GiB), --cell-timeout if a test is slow "
    "on this machine",
}


def judge_preflight(outcome, release, sandbox: str) -> None:
    """Raise `GraderFault` unless the reference solution's `outcome` earned full marks on
    every grade cell. `sandbox` is the start line's `sandbox_kind`."""
    points = dict(scores.grade_columns(release))
    lost = {
        grade_id: outcome.scores.get(grade_id, (0.0, p))[0]
        for grade_id, p in points.items()
        if outcome.scores.get(grade_id, (0.0, p))[0] < p
    }
    if outcome.status == "graded" and not lost:
        return
    earned = sum(score for score, _ in outcome.scores.values())
    what = f"ended {outcome.status}" + (f": {outcome.reason}" if outcome.reason else "")
    if outcome.status == "graded":
        what = "lost points on " + ", ".join(f"{g} ({s:g}/{points[g]:g})" for g, s in lost.items())
    raise GraderFault(
        f"preflight failed: the reference solution, graded exactly as the students' notebooks "
        f"would be (this Python, sandbox {sandbox}, the same limits), "
        f"scored {earned:g}/{sum(points.values()):g} and {what}. Nobody was graded and nothing "
        f"was written into the report. Check: {CHECK.get(outcome.status, 'the reason above')}."
    )
