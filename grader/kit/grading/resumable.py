"""An interrupted run keeps its work, and the same command finishes it.

When a batch is interrupted (Ctrl-C, SIGTERM) after its preflight, what it graded is written
into REPORT as a finished batch would write it, and REPORT/unfinished.json records each file so
kept, by its path in the export and the SHA-256 of its content. The next run into that REPORT
skips a submission whose file is recorded there with the same content (its row, page and
nbgrader submission are already in REPORT) and grades the rest; a run that completes removes
the record. A file whose content changed is graded again; a run without the record grades
everything, as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import KitError

UNFINISHED = "unfinished.json"


class Interrupted(KitError):
    """The run was interrupted; what it graded is in REPORT; the message says how to go on."""

    exit_status = 130  # as a shell reports a command ended by SIGINT
    prefix = "interrupted: "


def content_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def recorded(report_dir: Path) -> dict[str, str]:
    """{file's path in the export: its content's SHA-256} of what interrupted runs kept."""
    path = report_dir / UNFINISHED
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get("kept", {})


def left_to_grade(submissions, report_dir: Path) -> tuple[list, list]:
    """(the submissions still to grade, those an interrupted run already graded and kept)."""
    kept = recorded(report_dir)
    done = [s for s in submissions if s.source in kept and kept[s.source] == _hash_or_none(s)]
    return [s for s in submissions if s not in done], done


def record_kept(report_dir: Path, submissions, outcomes) -> None:
    """Add the files of `outcomes` (written into REPORT by an interrupted run) to the record."""
    by_id = {s.student_id: s for s in submissions}
    kept = recorded(report_dir)
    for outcome in outcomes:
        submission = by_id[outcome.student_id]
        kept[submission.source] = content_hash(submission.path)
    text = json.dumps({"kept": kept}, ensure_ascii=False, indent=0)
    tmp = report_dir / f"{UNFINISHED}.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(report_dir / UNFINISHED)


def finished(report_dir: Path) -> None:
    """A run into `report_dir` completed: no record of unfinished work is left."""
    (report_dir / UNFINISHED).unlink(missing_ok=True)


def _hash_or_none(submission) -> str | None:
    try:
        return content_hash(submission.path)
    except OSError:
        return None
