"""One submission's working copy: made before its grader forks, read after it ended.

`prepare` normalises the notebook into a fresh copy of the grading course (nbgrader sees only
the internal id, `internal_id`: a learner's id may hold `[...]`, which nbgrader reads as a
glob); `collect` turns what the grader left there into an `Outcome`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import nbformat

from .. import paths
from ..errors import Ungradable
from ..intake import integrity
from ..intake.normalize import normalize_submission
from .limits import Limits
from .outcome import Outcome


def internal_id(index: int) -> str:
    """The id nbgrader grades a submission under: safe in its globs and paths, unlike a learner's."""
    return f"s{index:04d}"


def prepare(submission, student_id: str, release, course: Path, workdir: Path) -> Outcome | None:
    """Normalise `submission` into its own copy of `course` in `workdir`, under nbgrader's
    `student_id` (`internal_id`); an Outcome if it cannot be graded, None when it is ready."""
    workdir.mkdir(parents=True)
    try:
        normalized = normalize_submission(submission.path.read_bytes(), release)
    except Ungradable as error:
        return Outcome.of(submission, error.status, error.reason)
    except OSError as error:
        return Outcome.of(submission, "unreadable", f"could not read the file: {error.strerror}")
    target = workdir / "course"
    shutil.copytree(
        course,
        target,
        ignore=shutil.ignore_patterns("release", "autograded", "feedback", "submitted"),
    )
    notebook = paths.submitted_notebook(target, student_id)
    notebook.parent.mkdir(parents=True)
    nbformat.write(normalized.notebook, notebook)
    (workdir / "repairs.json").write_text(json.dumps(normalized.repairs, ensure_ascii=False))
    findings = integrity.scan(integrity.learner_cells(normalized.notebook))
    (workdir / "findings.json").write_text(json.dumps(findings, ensure_ascii=False))
    return None


def collect(workdir: Path, submission, student_id: str, ended, limits: Limits) -> Outcome:
    """The Outcome of `submission` from what its grader (`ended`, a `pool.Ended`) left in
    `workdir`; `student_id` is nbgrader's internal one."""
    repairs = (
        json.loads((workdir / "repairs.json").read_text())
        if (workdir / "repairs.json").exists()
        else []
    )
    result_file = workdir / "result.json"
    if ended.overdue:
        return Outcome.of(
            submission,
            "timeout",
            f"the notebook ran past the {limits.notebook_timeout_s} s limit "
            "(an endless loop, or one that ignores interrupts?)",
            repairs=repairs,
        )
    if not result_file.exists():
        return Outcome.of(
            submission,
            "grader_crash",
            f"the grading process ended with code {ended.exitcode} (memory limit or a signal)",
            repairs=repairs,
        )
    result = json.loads(result_file.read_text())
    if os.environ.get("CH34_GRADING_PHASES"):
        print(f"{student_id}: {result.get('seconds')}", file=sys.stderr)
    if result["status"] != "graded":
        status, reason = explain_failure(result.get("log", ""), limits)
        return Outcome.of(submission, status, reason, repairs=repairs)
    scores = {k: tuple(v) for k, v in result["scores"].items()}
    findings = json.loads((workdir / "findings.json").read_text())
    if findings:
        earned = sum(score for score, _ in scores.values())
        reason = f"suspicious code, would have scored {earned:g}: " + "; ".join(findings)
        zeroed = {k: (0.0, maximum) for k, (_, maximum) in scores.items()}
        return Outcome.of(
            submission, "flagged", reason, scores=zeroed, repairs=repairs,
            autograded=result["autograded"],
        )  # fmt: skip
    # Answer cells that did not run, and cells under which the kernel ended and after which
    # the rest were graded in a fresh one (`faults/resume.py`).
    faults = result.get("faults", [])
    return Outcome.of(
        submission,
        "graded",
        "; ".join(result.get("causes", []) + faults),
        faults=faults,
        scores=scores,
        repairs=repairs,
        autograded=result["autograded"],
    )


def explain_failure(log: str, limits: Limits) -> tuple[str, str]:
    """Status and reason for a notebook nbgrader gave up on."""
    if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log:
        return (
            "kernel_died",
            "the kernel died while running the notebook (os._exit, a crash or the memory limit)",
        )
    if "Timeout" in log or "timed out" in log:
        return (
            "timeout",
            f"a cell did not finish within {limits.cell_timeout_s} s and could not be interrupted",
        )
    last = [line for line in log.splitlines() if line.strip()][-1:] or ["no log"]
    return "grader_error", f"nbgrader could not grade this notebook: {last[0][:200]}"
