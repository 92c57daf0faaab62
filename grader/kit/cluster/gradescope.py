"""Gradescope: its results.json, and the autograder zip `make gradescope` builds.

The format (Gradescope's "Autograder Specifications",
https://gradescope-autograders.readthedocs.io/en/latest/specs/): the zip holds `setup.sh` and
`run_autograder` at its root (here deploy/gradescope/); Gradescope unpacks it into
/autograder/source, runs setup.sh once when it builds the image, and run_autograder once a
submission, with the learner's files in /autograder/submission. The image is Gradescope's
default base image, Ubuntu 22.04, whose python3 (3.10) is too old for requirements.txt:
setup.sh installs Ubuntu's python3.11 package, or stops in one line where none can be had. run_autograder writes /autograder/results/results.json: a top-level
`score` (or one per test), `output`, and `tests`, each with `name`, `score`, `max_score`,
`visibility` and `output`. Here one test a check (`hosted.Verdict`): its title, its points and
the learner's first message; a check's code is never shown. A grader fault is one test saying
it is not the learner's fault, with no score anywhere (Gradescope then shows no grade, and the
instructor regrades once the fault is fixed).

    python -m grader.kit.cluster.gradescope [--out build/gradescope]      (`make gradescope`)
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path

from ..paths import GRADING_COURSE, REPO_ROOT, require_grading_course
from .hosted import NOT_YOUR_FAULT, Verdict

SUBMISSION = Path("autograder/submission")
RESULTS = Path("autograder/results/results.json")
ZIP = Path("build/gradescope/autograder.zip")
# What the zip carries from the repository beside the grading course: the kit and its checks.
CARRIED = ("grader", "requirements.txt")

# setup.sh (once, when Gradescope builds the image: a Python 3.11+ on its default base image,
# Ubuntu 22.04, the kit's virtualenv) and run_autograder (once a submission), at the zip's root.
SCRIPTS = REPO_ROOT / "deploy" / "gradescope"
ENTRY_POINTS = ("setup.sh", "run_autograder")


def results(verdict: Verdict) -> dict:
    """results.json's content for `verdict`."""
    if verdict.fault:
        fault = {"name": NOT_YOUR_FAULT, "status": "failed", "visibility": "visible",
                 "output": "评分程序出了故障，这次提交没有评分；老师会处理后重新评分。"
                           "The grader failed on its side; your submission was not graded and "
                           "will be regraded."}  # fmt: skip
        return {"output": NOT_YOUR_FAULT, "tests": [fault],
                "extra_data": {"grader_fault": verdict.fault}}  # fmt: skip
    tests = [
        {
            "name": check.name
            + ("" if check.counted else "（挑战题，不计分 / challenge, not counted）"),
            "score": check.score,
            "max_score": check.points,
            "status": "passed" if check.score >= check.points else "failed",
            "visibility": "visible",
            "output": check.message or "通过 / passed",
        }
        for check in verdict.checks
    ]
    return {"score": verdict.score, "output": verdict.note, "tests": tests}


def write_results(root: Path, verdict: Verdict) -> Path:
    path = root / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results(verdict), ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def build_zip(out: Path = REPO_ROOT / ZIP, course: Path = REPO_ROOT / GRADING_COURSE) -> Path:
    """autograder.zip: setup.sh and run_autograder at the root, the kit (`CARRIED`) and `course`
    (the grading course) where the kit looks for it."""
    require_grading_course(course)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name in ENTRY_POINTS:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16  # executable, as Gradescope runs them
            zipped.writestr(info, (SCRIPTS / name).read_text(encoding="utf-8"))
        trees = [(REPO_ROOT / name, Path(name)) for name in CARRIED]
        for top, inside in [*trees, (course, GRADING_COURSE)]:
            for path in sorted([top] if top.is_file() else top.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    zipped.write(
                        path, str(inside / path.relative_to(top)) if path != top else str(inside)
                    )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write Gradescope's autograder.zip")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / ZIP)
    out = build_zip(parser.parse_args(argv).out)
    print(f"wrote {out}: upload it as the assignment's autograder (docs/cluster.md)")
    return 0


if __name__ == "__main__":
    from ..errors import run_command

    sys.exit(run_command(main))
