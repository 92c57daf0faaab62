"""The shards' reports merged into the one report a single run would have written.

    python -m grader.kit.cluster.merge --report REPORT SHARD_FOLDER...     (`make merge`)

Each shard folder holds `shard.json` and `shard-outcomes.json` (`shard.py`). The merge reads the
export again with the shards' roster and name pattern, checks that the intake decides as it
did in every shard (the same fingerprint), and checks that every student with a file to grade
is in the outcomes of the shard it belongs to. Then it writes REPORT through the same writer
as a single run (`report/writer.py`): grades.csv, feedback pages (rendered again from each
shard's autograded notebook, with REPORT's own overrides.csv), summary.html, the LMS files,
intake.csv and the nbgrader course REPORT/nbgrader, whose gradebook gets every student's scores
through nbgrader's API. Nothing is graded here.

A shard missing or unfinished: the merge names each student it lacks and the command that
grades them, writes nothing, and exits with status 5. Rerunning that shard (it resumes an
interrupted run, `grading/resumable.py`) and then the merge completes the report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import KitError, exit_with
from ..paths import GRADES, GRADING_COURSE, INTAKE, REPO_ROOT
from . import shard


class ShardsDisagree(KitError):
    """The shard folders are not parts of one run: another export, roster or shard count."""

    exit_status = 2
    prefix = "error: "


class ShardsIncomplete(KitError):
    """Students with a file to grade are in no shard's outcomes."""

    exit_status = 5
    prefix = "error: "


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return merge(args.report, args.shards, args.course)
    except KitError as error:
        return exit_with(error)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Merge the report folders of `autograde --shard K/N` into one report."
    )
    parser.add_argument("--report", type=Path, required=True, help="the merged report's folder")
    parser.add_argument("shards", type=Path, nargs="+", help="every shard's report folder")
    parser.add_argument("--course", type=Path, default=None, help="default: the shards' course")
    return parser


def merge(report: Path, folders: list[Path], course: Path | None = None) -> int:
    """Write the merged report into `report`; raise ShardsIncomplete or ShardsDisagree."""
    from ..intake.inventory import discover

    manifests = read_manifests(report, folders)
    first = next(iter(manifests.values()))[1]
    course = Path(course or first.get("course") or REPO_ROOT / GRADING_COURSE)
    roster = Path(first["roster"]) if first["roster"] else None
    choices = first.get("choices")  # the instructor's choice among a student's notebooks
    found = discover(
        Path(first["export"]), roster=roster, pattern=first["name_pattern"], choices=choices
    )
    with found as intake:
        absent = [str(f) for f in folders if not f.exists()]
        outcomes = gather(intake, manifests, first["shards"], absent)
        write_report(report, intake, outcomes, course, first["lms"])
    return 0


def read_manifests(report: Path, folders: list[Path]) -> dict[int, tuple[Path, dict]]:
    """{K: (folder, its shard.json)}; raises ShardsDisagree for a folder that is no shard's, two
    folders of one shard, or shards of different runs."""
    manifests: dict[int, tuple[Path, dict]] = {}
    for folder in folders:
        if folder.resolve() == report.resolve():
            raise ShardsDisagree(f"--report {report} is also a shard folder: merge into another")
        manifest = shard.read_manifest(folder)
        if manifest is None:
            if folder.is_dir():
                raise ShardsDisagree(
                    f"{folder} has no {shard.MANIFEST}: it is not the report of an "
                    "`autograde --shard K/N` run"
                )
            continue  # a shard that never ran: its students are named as lacking
        k = manifest["shard"]
        if k in manifests:
            raise ShardsDisagree(f"{manifests[k][0]} and {folder} are both shard {k}")
        manifests[k] = (folder, manifest)
    if not manifests:
        raise ShardsIncomplete(f"none of {', '.join(map(str, folders))} holds a shard's report")
    same = ("shards", "export", "roster", "name_pattern", "lms", "fingerprint")
    first_folder, first = next(iter(manifests.values()))
    for folder, manifest in manifests.values():
        differ = [key for key in same if manifest.get(key) != first.get(key)]
        if differ:
            raise ShardsDisagree(
                f"{folder} and {first_folder} are not shards of one run: their "
                f"{', '.join(differ)} differ (grade every shard with the same export, ROSTER=, "
                "NAME_PATTERN=, LMS= and N)"
            )
    return manifests


def gather(intake, manifests: dict, count: int, absent: list[str] = ()) -> list:
    """Every shard's outcomes, once each, sorted by student; ShardsIncomplete naming who lacks.
    `absent`: the folders given that do not exist (a shard that never ran, or a mistyped path)."""
    fingerprint = shard.fingerprint(intake)
    for folder, manifest in manifests.values():
        if manifest["fingerprint"] != fingerprint:
            raise ShardsDisagree(
                f"the export {manifest['export']} reads otherwise now than when {folder} was "
                "graded (files added, removed or renamed, or another roster): grade every "
                "shard again"
            )
    outcomes, lacking = [], []
    for k in range(count):
        students = shard.students_of(intake, k, count)
        folder, _ = manifests.get(k, (None, None))
        recorded = shard.read_outcomes(folder) if folder is not None else {}
        missed = [sid for sid in students if sid not in recorded]
        if missed:
            where = f"{folder}" if folder is not None else "no report of it in the folders given"
            if folder is None and absent:
                where += f"; these do not exist: {', '.join(absent)}"
            lacking.append(f"  shard {k}/{count} ({where}): {', '.join(missed)}")
        outcomes += [
            shard.outcome_from(recorded[sid], folder) for sid in students if sid in recorded
        ]
    if lacking:
        total = sum(line.count(",") + 1 for line in lacking)
        raise ShardsIncomplete(
            f"the shards lack {total} student(s) with a file to grade; nothing was written. "
            "Grade (or finish) these shards with `make autograde ... SHARD=K/N` into the same "
            "folders, then merge again:\n" + "\n".join(lacking)
        )
    return sorted(outcomes, key=lambda o: o.student_id)


def write_report(report: Path, intake, outcomes, course: Path, lms_files: str) -> None:
    """REPORT as a single run's writer writes it (`grading/batch.py`'s end, `autograde`'s)."""
    import nbformat

    from .. import paths
    from ..grading.batch import signals_deferred
    from ..report import grades
    from ..report.writer import ReportWriter, stale_ids

    release = nbformat.read(course / paths.STUDENT_RELEASE, as_version=4)
    ids = {o.student_id for o in outcomes}
    # A merge into the report of an earlier merge is a rerun: what that merge wrote under ids
    # the export's files are now read otherwise (another roster, a renamed file) goes, as a
    # single run's rerun removes it (`autograde.grade_sandboxed`).
    replaced = frozenset(stale_ids(intake, report))
    writer = ReportWriter.open(report, release, ids, intake, lms_files)
    for outcome in outcomes:
        writer.add(outcome)
    with signals_deferred():
        writer.write(outcomes, course, sys.stderr, replaced)
        intake.write_csv(report / INTAKE, {o.student_id: o.status for o in outcomes})
    print(grades.summary_table(outcomes, grades.read_grades(report / GRADES)[1]))
    print(f"merged {len(outcomes)} students into {report / GRADES}")


if __name__ == "__main__":
    sys.exit(main())
