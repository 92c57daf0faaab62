"""Shards of a class and their merge (grader/kit/cluster/): the merged report is the one report a
single run writes on the same export, except for timings; a missing shard is named, and
grading it then merging again completes the report."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from grader.kit.cluster import shard
from grader.kit.intake.inventory import discover
from grader.kit.report.feedback import joined_streams
from tests.conftest import NB, REPO_ROOT, autograde, write

NOTEBOOK_TIMINGS = ("execution", "iopub.execute_input")  # what differs between two gradings


def merge(report: Path, *folders: Path, course: Path | None = None):
    extra = ["--course", str(course)] if course else []
    return subprocess.run(
        [sys.executable, "-m", "grader.kit.cluster.merge", "--report", str(report), *extra]
        + [str(f) for f in folders],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_shard_is_K_of_N_and_anything_else_says_how_to_write_it():
    assert shard.parse("3/4") == (3, 4)
    for bad in ("4/4", "1", "a/b", "-1/2", "0/0"):
        with pytest.raises(shard.BadShard, match="K/N|0..N-1"):
            shard.parse(bad)


def test_every_file_and_every_roster_student_falls_to_exactly_one_shard(tmp_path):
    """Students with a file, roster students with none (missing) and files of no known student:
    each in one shard of three, whatever the count."""
    export = tmp_path / "export"
    roster = tmp_path / "roster.csv"
    ids = [f"s{n:02d}" for n in range(12)]
    roster.write_text("student_id,name\n" + "".join(f"{i},N{i}\n" for i in ids), encoding="utf-8")
    for student_id in ids[:8]:  # s08..s11 are missing
        write(export, f"{student_id}.ipynb", NB)
    write(export, "stranger.ipynb", NB)  # no roster student
    write(export, "notes.txt", "not a notebook")
    with discover(export, roster=roster) as intake:
        parts = [shard.part_of(intake, k, 3) for k in range(3)]
        for attribute in ("submissions", "skipped"):
            everything = sorted(repr(x) for x in getattr(intake, attribute))
            split = sorted(repr(x) for part in parts for x in getattr(part, attribute))
            assert split == everything, attribute
        rows = [row["student_id"] for part in parts for row in part.roster.rows]
        assert sorted(rows) == ids
        missing = sorted(r["student_id"] for part in parts for r in part.missing())
        assert missing == sorted(r["student_id"] for r in intake.missing()) == ids[8:]
        assert all(shard.shard_of(i, 3) == shard.shard_of(i, 3) for i in ids)


def test_a_recorded_outcome_reads_back_whole_with_its_checks_in_order(tmp_path):
    """The merge renders pages from the record: a check's place in it is its place on the page."""
    from grader.kit.grading.outcome import Outcome

    (tmp_path / shard.MANIFEST).write_text("{}", encoding="utf-8")
    scores = {"test_todo4_types": (0.0, 3.0), "test_todo4_immutable": (0.0, 3.0), "a": (1.0, 1.0)}
    outcome = Outcome("s1", "graded", "why", scores, ["a repair"], 1.5, "", True, "s1.ipynb",
                      ["old.ipynb"], "the newest", ["TODO 3 hung"])  # fmt: skip
    shard.record_outcomes(tmp_path, [outcome])
    back = shard.outcome_from(shard.read_outcomes(tmp_path)["s1"], tmp_path)
    assert back == outcome and list(back.scores) == list(scores)


def test_a_page_shows_a_printed_line_the_same_however_the_kernel_split_it():
    """The kernel may send "text" and its newline as two messages, depending on timing: two runs
    (or two shards) must still write the same feedback page."""
    from grader.kit.report.feedback import code_cell

    def cell(*texts):
        printed = nbformat.v4.new_code_cell("print('TODO 10 skipped')")
        printed.outputs = [nbformat.v4.new_output("stream", name="stdout", text=t) for t in texts]
        return code_cell(printed, {})

    assert cell("skipped", "\n") == cell("skipped\n")
    assert cell("a\n", "b\n").count("<pre>") == 2  # the source and one output


def run_shards(export: Path, root: Path, course: Path, count: int, extra=()):
    """Every shard of `count` graded at once (one job each), as the processes of a cluster."""

    def one(k: int):
        return autograde(
            export, root / f"shard{k}", course, jobs=1, extra=["--shard", f"{k}/{count}", *extra]
        )[0]

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def notebook_without_timings(path: Path) -> dict:
    """An autograded notebook less what the kernel's timing decides: its timestamps, and where
    it split a stream's text into messages (`feedback.joined_streams`)."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        cell.get("metadata", {}).pop("execution", None)
        if "outputs" in cell:
            cell.outputs = joined_streams(cell.outputs)
    return notebook


def worksheet_without_timings(path: Path) -> list:
    """Moodle's grading worksheet less its "Last modified (grade)" column: the time it was written."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))
    keep = [i for i, name in enumerate(rows[0]) if name != "Last modified (grade)"]
    assert len(keep) == len(rows[0]) - 1, rows[0]
    return [[row[i] for i in keep] for row in rows]


def gradebook_scores(report: Path) -> dict:
    """{student: {grade cell: (auto, manual, needs manual)}} of REPORT/nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    db = report / "nbgrader" / "gradebook.db"
    scores = {}
    with Gradebook(f"sqlite:///{db}", "ch34") as gradebook:
        for submission in gradebook.assignment_submissions("ch34_prefix_cache"):
            scores[submission.student_id] = {
                grade.name: (grade.auto_score, grade.manual_score, grade.needs_manual_grade)
                for notebook in submission.notebooks
                for grade in notebook.grades
            }
    return scores


def assert_same_report(single: Path, merged: Path) -> None:
    """Every file byte for byte, but autograded notebooks and Moodle's worksheet (less their
    timings) and the gradebook (by its scores)."""
    files = sorted(p.relative_to(single) for p in single.rglob("*") if p.is_file())
    merged_files = sorted(p.relative_to(merged) for p in merged.rglob("*") if p.is_file())
    assert files == merged_files
    for relative in files:
        a, b = single / relative, merged / relative
        if relative.suffix == ".ipynb" and "autograded" in relative.parts:
            assert notebook_without_timings(a) == notebook_without_timings(b), relative
        elif relative.name == "moodle-grading-worksheet.csv":
            assert worksheet_without_timings(a) == worksheet_without_timings(b)
        elif relative.name != "gradebook.db":
            assert a.read_bytes() == b.read_bytes(), relative
    assert gradebook_scores(single) == gradebook_scores(merged)
    assert gradebook_scores(merged)


def as_a_pod_runs(manifest: str, env: dict, index: int | None = None):
    """The command of deploy/k8s/`manifest`'s container run here as its pod would run it: the
    manifest's environment, JOB_COMPLETION_INDEX set for an Indexed Job, the image's /kit
    being this checkout; `env` overrides (the data folder, the shard count, the course)."""
    import yaml

    job = yaml.safe_load((REPO_ROOT / "deploy" / "k8s" / manifest).read_text(encoding="utf-8"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = [part.replace("/kit/", f"{REPO_ROOT}/") for part in container["command"]]
    pod_env = {item["name"]: item["value"] for item in container.get("env", [])}
    if index is not None:
        pod_env["JOB_COMPLETION_INDEX"] = str(index)
    return subprocess.run(
        command + container.get("args", []),
        env={**os.environ, **pod_env, **env, "PYTHON": sys.executable},
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip


@pytest.fixture(scope="module")
def examples_sharded(fresh_build, tmp_path_factory):
    """The bundled examples graded in one run and in two shards, with a merge tried before shard 1
    has run: shard 0 and that merge by the command line, shard 1 and the last merge by the commands
    of the Kubernetes Jobs (deploy/k8s/), as their pods run them."""
    root = tmp_path_factory.mktemp("sharded-examples")
    course = fresh_build / "build" / "grading-course"
    export = root / "export"
    subprocess.run(
        [sys.executable, "-m", "grader.kit.authoring.examples", str(export)],
        cwd=REPO_ROOT, check=True, capture_output=True,
    )  # fmt: skip
    shards = [root / "shards" / f"shard-{k}" for k in (0, 1)]
    with ThreadPoolExecutor(1) as pool:  # the single run beside the shards, one core each
        single = pool.submit(autograde, export, root / "single", course, 1)
        first = autograde(export, shards[0], course, 1, ["--shard", "0/2"])[0]
        lacking = merge(root / "report", *shards, course=course)
        lacking.wrote = sorted(p.name for p in (root / "report").glob("*"))
        pod = {"CH34_DATA": str(root), "EXPORT": "export", "ROSTER": "", "SHARDS": "2",
               "JOBS": "1", "CH34_COURSE": str(course)}  # fmt: skip
        second = as_a_pod_runs("grade-shards.yaml", pod, 1)
        merged = as_a_pod_runs("merge.yaml", pod)
        single = single.result()[0]
    return {"root": root, "lacking": lacking, "runs": (single, first, second, merged),
            "export": export, "shards": shards}  # fmt: skip


@pytest.fixture(scope="module")
def batch_sharded(graded_batch, fresh_build, tmp_path_factory):
    """graded_batch's Moodle export of 40 and its roster graded again in two shards at once, one
    core each: shard 0 by the command line, shard 1 and then the merge by the commands of the
    Kubernetes Jobs (deploy/k8s/), as their pods run them."""
    root = tmp_path_factory.mktemp("sharded-batch")
    shutil.copy(graded_batch["export"], root / "export.zip")
    shutil.copy(graded_batch["roster"], root / "roster.csv")
    course = fresh_build / "build" / "grading-course"
    pod = {"CH34_DATA": str(root), "EXPORT": "export.zip", "ROSTER": "roster.csv",
           "SHARDS": "2", "JOBS": "1", "CH34_COURSE": str(course)}  # fmt: skip
    extra = ["--shard", "0/2", "--roster", str(root / "roster.csv")]
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(as_a_pod_runs, "grade-shards.yaml", pod, 1)
        first = autograde(root / "export.zip", root / "shards" / "shard-0", course, 1, extra)[0]
        second = second.result()
    merged = as_a_pod_runs("merge.yaml", pod)
    return {"root": root, "runs": (first, second, merged),
            "shards": [root / "shards" / f"shard-{k}" for k in (0, 1)]}  # fmt: skip


@pytest.mark.slow
def test_a_merge_without_a_shard_names_its_students_and_writes_nothing(examples_sharded):
    lacking = examples_sharded["lacking"]
    assert lacking.returncode == 5, lacking.stderr
    with discover(examples_sharded["export"]) as intake:
        absent = shard.students_of(intake, 1, 2)
    assert absent, "the examples put somebody into shard 1"
    for student_id in absent:
        assert student_id in lacking.stderr
    assert "shard 1/2" in lacking.stderr
    assert lacking.wrote == [], "the merge wrote nothing while a shard lacked"


def assert_sharded_like_single(sharded: dict, single: Path) -> None:
    """Every run of `sharded` succeeded, each shard graded somebody, nobody was graded twice,
    and the merged report is `single`'s."""
    for run in sharded["runs"]:
        assert run.returncode == 0, run.stderr[-3000:]
    graded = [json.loads((folder / shard.OUTCOMES).read_text()) for folder in sharded["shards"]]
    assert graded[0] and graded[1], "each shard graded somebody"
    assert not set(graded[0]) & set(graded[1]), "nobody graded twice"
    assert_same_report(single, sharded["root"] / "report")


@pytest.mark.slow
def test_two_shards_merged_equal_one_run_on_the_bundled_examples(examples_sharded):
    assert_sharded_like_single(examples_sharded, examples_sharded["root"] / "single")


@pytest.mark.slow
@pytest.mark.heavy  # grades the 40 again (about 190 s); make test shards the examples the same way
def test_two_shards_of_a_40_submission_moodle_export_by_kubernetes_jobs_equal_one_run(
    batch_sharded, graded_batch
):
    """The test batch (every catalogued mistake, each TODO unfinished, a segfault in TODO 10, 张伟's own
    file name, a file that is not JSON, two roster students who submitted nothing) as Moodle's
    zip: the merged report, the Moodle worksheet and the gradebook are the single run's. The
    single run grades two at a time, each shard one: the grades do not depend on parallelism."""
    assert_sharded_like_single(batch_sharded, graded_batch["report"])
    rows = graded_batch["rows"]
    submitted = [r for r in rows.values() if r["status"] != "missing"]
    assert (
        sum(r["status"] == "graded" for r in submitted) == len(submitted) - 1
    )  # the non-JSON file


@pytest.mark.slow
@pytest.mark.heavy
def test_four_shards_of_the_40_submission_export_at_once_equal_one_run(
    graded_batch, fresh_build, tmp_path
):
    """The same export in four shards graded at the same time, one core each, merged."""
    course = fresh_build / "build" / "grading-course"
    extra = ["--roster", str(graded_batch["roster"])]
    for run in run_shards(graded_batch["export"], tmp_path, course, 4, extra):
        assert run.returncode == 0, run.stderr[-3000:]
    done = merge(tmp_path / "merged", *(tmp_path / f"shard{k}" for k in range(4)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_report(graded_batch["report"], tmp_path / "merged")
