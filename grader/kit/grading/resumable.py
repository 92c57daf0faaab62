"""An interrupted run keeps its work, and the same command finishes it.

Once the preflight has passed, each submission's outcome is saved into REPORT as it finishes,
not only when a signal arrives (so a `kill -9`, a lost terminal or a machine that goes down
also keeps it): REPORT/unfinished.json records each finished file by its path in the export,
the SHA-256 of its content, the student it was graded as and how the intake chose it, with
the outcome; REPORT/unfinished/ keeps its autograded notebook. The next run into that REPORT
takes the outcome of a submission whose record still matches (the same file, content, student
and choice) as if it had graded it now, and grades the rest; a run that completes writes the
whole report from both and removes the record. A file whose content changed, a student now
read from another file, or a roster that names the file's student otherwise: graded again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
from pathlib import Path

from ..cluster.shard import outcome_from
from ..errors import KitError
from .outcome import Outcome

UNFINISHED = "unfinished.json"
NOTEBOOKS = "unfinished"  # REPORT/unfinished/<n>.ipynb: the kept outcomes' autograded notebooks
# The status of a grades.csv row whose submission an interrupted run did not reach: no grade.
NOT_GRADED_YET = "not_graded_yet"


class Interrupted(KitError):
    """The run was interrupted; what it graded is in REPORT; the message says how to go on."""

    exit_status = 130  # as a shell reports a command ended by SIGINT
    prefix = "interrupted: "


def content_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def recorded(report_dir: Path) -> dict[str, dict]:
    """{file's path in the export: its record} of what interrupted runs kept."""
    path = report_dir / UNFINISHED
    if not path.exists():
        return {}
    try:
        kept = json.loads(path.read_text(encoding="utf-8")).get("kept", {})
    except (ValueError, AttributeError):  # cut short, or not this kit's record
        kept = None
    if not isinstance(kept, dict):
        print(f"note: {path} is not a record this kit can read; its submissions are graded again",
              file=sys.stderr)  # fmt: skip
        return {}
    return kept


def identity(submission) -> dict:
    """What must not have changed for a kept outcome to stand for `submission`."""
    return {
        "student_id": submission.student_id,
        "sha256": _hash_or_none(submission),
        "late": submission.late,
        "superseded": list(submission.superseded),
        "choice": submission.choice,
    }


def left_to_grade(submissions, report_dir: Path) -> tuple[list, list[Outcome]]:
    """(the submissions still to grade, the outcomes interrupted runs kept for the others)."""
    kept = recorded(report_dir)
    todo, done = [], []
    for submission in submissions:
        outcome = _kept_outcome(kept.get(submission.source), submission, report_dir)
        if outcome is not None:
            done.append(outcome)
        else:
            todo.append(submission)
    return todo, done


def _kept_outcome(record, submission, report_dir: Path) -> Outcome | None:
    """The outcome `record` kept for `submission`, or None: no record, a changed file, or a record
    an older kit wrote in another shape (graded again rather than trusted)."""
    if not isinstance(record, dict) or record.get("identity") != identity(submission):
        return None
    try:
        outcome = outcome_from(record["outcome"], report_dir / NOTEBOOKS)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if outcome.autograded and not Path(outcome.autograded).is_file():
        return None  # its autograded notebook is gone: the page could not be written
    return outcome


def keep(report_dir: Path, submission, outcome: Outcome, notebook: bytes | None) -> None:
    """Save `outcome` of `submission` (its autograded notebook's bytes, or None) into the record:
    the notebook first, then the record, replaced whole (a kill leaves the old one or the new)."""
    folder = report_dir / NOTEBOOKS
    folder.mkdir(parents=True, exist_ok=True)
    kept = recorded(report_dir)
    name = ""
    if notebook is not None:
        name = f"{hashlib.sha256(submission.source.encode('utf-8')).hexdigest()[:16]}.ipynb"
        (folder / name).write_bytes(notebook)
    record = dataclasses.asdict(outcome) | {"autograded": name}
    kept[submission.source] = {"identity": identity(submission), "outcome": record}
    _write(report_dir, kept)


def forget(report_dir: Path, sources) -> None:
    """Take the files `sources` out of the record (a batch that stopped on a grader fault)."""
    kept = recorded(report_dir)
    for source in sources:
        kept.pop(source, None)
    if kept:
        _write(report_dir, kept)
    else:
        finished(report_dir)


def finished(report_dir: Path) -> None:
    """A run into `report_dir` completed: no record of unfinished work is left."""
    (report_dir / UNFINISHED).unlink(missing_ok=True)
    shutil.rmtree(report_dir / NOTEBOOKS, ignore_errors=True)


def _write(report_dir: Path, kept: dict) -> None:
    text = json.dumps({"kept": kept}, ensure_ascii=False, indent=0)
    tmp = report_dir / f"{UNFINISHED}.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(report_dir / UNFINISHED)


def _hash_or_none(submission) -> str | None:
    try:
        return content_hash(submission.path)
    except OSError:
        return None
