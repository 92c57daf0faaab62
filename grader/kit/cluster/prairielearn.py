"""PrairieLearn: the results.json of its external grader.

The format (PrairieLearn's "External Grading", https://docs.prairielearn.com/externalGrading/):
the grading container finds the learner's files in /grade/student and the question's data in
/grade/data/data.json, and writes /grade/results/results.json: `gradable`, `score` in [0, 1],
`message`, `output`, and `tests`, each with `name`, `points`, `max_points`, `message` and
`output`. `gradable: false` tells PrairieLearn the submission could not be graded (it costs the
learner no attempt): that is what a grader fault writes, with no score.
"""

from __future__ import annotations

import json
from pathlib import Path

from .hosted import NOT_YOUR_FAULT, Verdict

SUBMISSION = Path("grade/student")
RESULTS = Path("grade/results/results.json")


def results(verdict: Verdict) -> dict:
    """results.json's content for `verdict`."""
    if verdict.fault:
        return {"gradable": False, "message": NOT_YOUR_FAULT,
                "output": "The grader failed on its side; this submission was not graded."}  # fmt: skip
    tests = [
        {
            "name": check.name
            + ("" if check.counted else "（挑战题，不计分 / challenge, not counted）"),
            "points": check.score,
            "max_points": check.points,
            "message": check.message or "通过 / passed",
            "output": "",
        }
        for check in verdict.checks
    ]
    score = verdict.score / verdict.maximum if verdict.maximum else 0.0
    return {"gradable": True, "score": min(1.0, max(0.0, score)), "message": verdict.note,
            "output": "", "tests": tests}  # fmt: skip


def write_results(root: Path, verdict: Verdict) -> Path:
    path = root / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results(verdict), ensure_ascii=False, indent=1), encoding="utf-8")
    return path
