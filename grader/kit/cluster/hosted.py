"""One learner's notebook graded inside a hosted grader's container (Gradescope, PrairieLearn).

    python -m grader.kit.cluster.hosted        (Gradescope's run_autograder; PrairieLearn's entrypoint)

The layout says which grader runs us, under ROOT (`/`, or $CH34_HOSTED_ROOT for a test):

    Gradescope    ROOT/autograder/submission/*.ipynb  ->  ROOT/autograder/results/results.json
    PrairieLearn  ROOT/grade/student/*.ipynb          ->  ROOT/grade/results/results.json
                  (ROOT/grade/data/data.json is PrairieLearn's; nothing in it is needed here)

The notebook is graded by the kit's own command line, as any class is (`autograde.py`: intake,
normalisation, the sandbox, the preflight, the hidden checks, the time boxes and the fault
handling), on a folder holding that one file, as the only shard of one (`--shard 0/1`) so that
its outcome is recorded in full (`shard.py`). The result is a `Verdict`: one entry per check,
with its title, points and the learner's first message (never a check's code); `gradescope.py`
and `prairielearn.py` write it in their grader's format. When the kit says the fault is its
own (a failed preflight, a grader crash, a kernel the grader could not keep), the verdict
holds no score but an entry saying so: the submission is not the learner's fault.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import GRADING_COURSE, NOTEBOOK_NAME, REPO_ROOT, STUDENT_RELEASE
from . import shard

LEARNER = "learner"  # the student id of the one file, in the kit's report
NOT_YOUR_FAULT = "评分程序出错，不是你的问题 / grader fault, not your fault"


@dataclass
class CheckResult:
    name: str  # `TODO 2 · 尾块`: the check's title
    score: float
    points: float
    message: str  # the learner's first message, '' when the check passed
    counted: bool = True  # a challenge part's checks do not count toward the score


@dataclass
class Verdict:
    checks: list = field(default_factory=list)
    score: float = 0.0
    maximum: float = 0.0
    note: str = ""  # for the learner: why nothing ran, what was repaired
    fault: str = ""  # the grader's own fault: no score at all

    @property
    def gradable(self) -> bool:
        return not self.fault


def hosted_root() -> Path:
    return Path(os.environ.get("CH34_HOSTED_ROOT", "/"))


def course_dir() -> Path:
    return Path(os.environ.get("CH34_COURSE", REPO_ROOT / GRADING_COURSE))


def pick_notebook(folder: Path) -> tuple[Path | None, str]:
    """The submitted notebook (the assignment's name first), and a note naming the others."""
    found = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not found:
        return None, ""
    named = [p for p in found if p.name == NOTEBOOK_NAME]
    chosen = (named or found)[0]
    others = [p.name for p in found if p != chosen]
    return chosen, (f"graded {chosen.name}; not graded: {', '.join(others)}" if others else "")


def grade_notebook(notebook: Path, course: Path) -> Verdict:
    """Grade `notebook` with the kit's command line; its verdict."""
    with tempfile.TemporaryDirectory(prefix="ch34-hosted-") as scratch:
        inbox, report = Path(scratch) / "in", Path(scratch) / "report"
        inbox.mkdir()
        shutil.copyfile(notebook, inbox / f"{LEARNER}.ipynb")
        command = [sys.executable, "-m", "grader.kit.autograde", str(inbox), "--report",
                   str(report), "--jobs", "1", "--shard", "0/1", "--lms", "none",
                   "--course", str(course)]  # fmt: skip
        run = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
        record = shard.read_outcomes(report).get(LEARNER)
        if run.returncode != 0 or record is None:
            return Verdict(fault=f"exit status {run.returncode}: {run.stderr.strip()[-2000:]}")
        return verdict_of(shard.outcome_from(record, report), course)


def verdict_of(outcome, course: Path) -> Verdict:
    """The checks of a graded outcome, or a one-line verdict for a file that ran no check."""
    import nbformat

    from ..authoring.checkcells import check_label, check_titles
    from ..authoring.nbsource import part_of
    from ..grading.batch import FAULT_STATUSES
    from ..intake.normalize import repairs_summary
    from ..report.feedback import failure_messages, scrub_paths
    from ..report.scores import counted_score, grade_columns, max_score

    if outcome.status in FAULT_STATUSES:
        return Verdict(fault=f"{outcome.status}: {scrub_paths(outcome.reason)}")
    release = nbformat.read(course / STUDENT_RELEASE, as_version=4)
    columns, titles = grade_columns(release), check_titles(release)
    messages = {}
    if outcome.autograded:
        messages = failure_messages(nbformat.read(outcome.autograded, as_version=4))
    verdict = Verdict(score=counted_score(outcome.scores), maximum=max_score(columns))
    notes = [] if not outcome.repairs else [repairs_summary(outcome.repairs)]
    if outcome.status != "graded":
        notes.insert(0, f"{outcome.status}: {scrub_paths(outcome.reason)}")
    verdict.note = "\n".join(notes + [scrub_paths(line) for line in outcome.faults])
    for grade_id, points in columns:
        score = outcome.scores.get(grade_id, (0.0, points))[0]
        part = part_of(grade_id)
        failed = score < points
        message = messages.get(grade_id, "没有错误信息：这个检查没有通过") if failed else ""
        label = check_label(grade_id, titles)
        counted = part is not None and part.counted
        verdict.checks.append(CheckResult(label, score, points, message, counted))
    return verdict


def main() -> int:
    """Grade what the layout under `hosted_root()` holds; write its grader's results.json."""
    from . import gradescope, prairielearn

    root = hosted_root()
    for layout in (gradescope, prairielearn):
        if (root / layout.SUBMISSION).is_dir():
            break
    else:
        print(f"error: neither {gradescope.SUBMISSION} nor {prairielearn.SUBMISSION} under {root}",
              file=sys.stderr)  # fmt: skip
        return 2
    notebook, note = pick_notebook(root / layout.SUBMISSION)
    if notebook is None:
        verdict = Verdict(note="没有找到 .ipynb 文件：请提交你的 notebook / no .ipynb submitted")
    else:
        verdict = grade_notebook(notebook, course_dir())
        verdict.note = "\n".join(x for x in (note, verdict.note) if x)
    layout.write_results(root, verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
