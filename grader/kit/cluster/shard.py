"""One shard of a class: which students it grades, and what it leaves for the merge.

`make autograde SHARD=K/N` (`--shard K/N`) reads the whole export and makes every intake
decision exactly as a single run would (so a student's files are never split across shards),
then keeps only its own part of the class: the submissions, the files not graded and the
roster's students whose key falls to shard K. It runs its own preflight and grades its
students into its own report folder, a complete report for that part.

The split: a student belongs to shard `sha256(student_id) mod N` (a file of no known student:
by its path in the export). A hash, not the sorted position, because it depends on nothing
but the student: a late submission added to the export, or a student dropped from the roster,
moves nobody else to another shard, so rerunning one shard after the export changed still
grades the same students into the same folder (its resume and its kept grades stay valid) and
no student is graded by two shards. The price is balance: N shards get N binomial shares, not
equal ones (40 students on 4 shards: 10 each on average, typically 7 to 13).

Beside its report a shard writes `shard.json` (the export, the options, K/N, the intake's
fingerprint) before grading, and `shard-outcomes.json` (every outcome it wrote into its report,
added to at each run, an interrupted one included) when it writes its report. `merge.py` reads
both. A report folder without `shard.json` is a single run's: nothing of this is written there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from ..errors import KitError
from ..grading.outcome import Outcome

MANIFEST = "shard.json"
OUTCOMES = "shard-outcomes.json"


class BadShard(KitError):
    """A --shard that is not K/N with 0 <= K < N."""

    exit_status = 2
    prefix = "error: "


def parse(text: str) -> tuple[int, int]:
    """`K/N` -> (K, N); raises BadShard saying what is wrong."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise BadShard(f"--shard {text!r}: write K/N, e.g. 0/4 (shard K of N, K from 0)") from None
    if n < 1 or not 0 <= k < n:
        raise BadShard(f"--shard {text!r}: K must be 0..N-1 and N at least 1")
    return k, n


def shard_of(key: str, count: int) -> int:
    """The shard of a student id (or a file's path), of `count` shards: stable across runs."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % count


def fingerprint(intake) -> str:
    """The intake's decisions (every file: its student, outcome, why, late), hashed: two runs on
    the same export with the same roster and pattern have the same fingerprint."""
    text = json.dumps([list(row) for row in intake.rows()], ensure_ascii=False)
    roster = intake.roster.rows if intake.roster is not None else []
    text += json.dumps(roster, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def part_of(intake, k: int, n: int):
    """`intake` (an `Intake`) less everything that is not shard k's: its submissions, files not
    graded and roster rows. The scratch folder stays the whole intake's (closed with it)."""
    from ..intake.roster import Roster  # imported late, as autograde imports the intake

    def mine(key: str) -> bool:
        return shard_of(key, n) == k

    roster = intake.roster
    if roster is not None:
        roster = Roster([row for row in roster.rows if mine(row["student_id"])])
    return dataclasses.replace(
        intake,
        submissions=[s for s in intake.submissions if mine(s.student_id)],
        skipped=[s for s in intake.skipped if mine(s.student_id or s.source)],
        roster=roster,
    )


def students_of(intake, k: int, n: int) -> list[str]:
    """The ids shard k must grade (those with a file to grade), sorted."""
    return sorted(s.student_id for s in intake.submissions if shard_of(s.student_id, n) == k)


def write_manifest(report_dir: Path, intake, args, k: int, n: int) -> None:
    """`shard.json`: what the merge needs to redo the intake and check this shard's part."""
    report_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "shard": k,
        "shards": n,
        "export": str(Path(args.submissions).resolve()),
        "roster": str(Path(args.roster).resolve()) if args.roster else None,
        "name_pattern": args.name_pattern,
        "choices": str(Path(args.choices).resolve()) if args.choices else None,
        "lms": args.lms,
        "course": str(Path(args.course).resolve()),
        "fingerprint": fingerprint(intake),
        "students": students_of(intake, k, n),
    }
    text = json.dumps(manifest, ensure_ascii=False, indent=1)
    (report_dir / MANIFEST).write_text(text, encoding="utf-8")


def read_manifest(report_dir: Path) -> dict | None:
    path = report_dir / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def record_outcomes(report_dir: Path, outcomes) -> None:
    """Add `outcomes` (just written into a shard's report) to its `shard-outcomes.json`; nothing
    in a report folder that is no shard's. The autograded notebook is named by its place in
    the shard's nbgrader course (the working copy it came from is gone)."""
    if read_manifest(report_dir) is None:
        return
    from .. import paths
    from ..report.gradebook import course_dir  # the writer's own module: imported by then

    kept = read_outcomes(report_dir)
    for outcome in outcomes:
        record = dataclasses.asdict(outcome)
        notebook = paths.autograded_notebook(course_dir(report_dir), outcome.student_id)
        record["autograded"] = str(notebook.relative_to(report_dir)) if notebook.exists() else ""
        kept[outcome.student_id] = record
    text = json.dumps(kept, ensure_ascii=False, indent=0)  # the checks keep their order
    tmp = report_dir / f"{OUTCOMES}.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(report_dir / OUTCOMES)


def read_outcomes(report_dir: Path) -> dict[str, dict]:
    """{student id: the recorded outcome's fields} of a shard's report ({} when none)."""
    path = report_dir / OUTCOMES
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def outcome_from(record: dict, report_dir: Path) -> Outcome:
    """A recorded outcome, its autograded notebook found again in the shard's report."""
    fields = dict(record)
    fields["scores"] = {g: tuple(v) for g, v in fields["scores"].items()}
    if fields["autograded"]:
        fields["autograded"] = str(report_dir / fields["autograded"])
    return Outcome(**fields)
