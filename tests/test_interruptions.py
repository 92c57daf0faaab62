"""Reruns and interruptions never leave wrong files (issue 40): a run stopped by Ctrl-C through a
pipe, by SIGTERM or by `kill -9` leaves a report marked unfinished wherever an instructor opens
or imports it, the same command picks up where it stopped, and what it then writes is, file by
file, what one clean run writes; a class graded again in shards with a new roster merges into
the clean run's report, with no row, page or worksheet line left of the old ids.

The class is small (three plain files: two correct answers and the untouched release) so that
each run costs its preflight and three fast gradings; `clean` grades it once for the module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader.kit.authoring.examples import filled_submission
from grader.kit.authoring.nbsource import NOTEBOOK_NAME
from grader.kit.grading.resumable import NOT_GRADED_YET, UNFINISHED
from tests.conftest import REPO_ROOT, autograde, grades_csv_rows, read_nb
from tests.test_shards import assert_same_report, merge

LMS_FILES = ("canvas.csv", "moodle.csv", "moodle-grading-worksheet.csv")
ROSTER = "学号,姓名,班级,邮箱\n2024001,张三,1班,a@x.cn\n2024002,李四,1班,b@x.cn\n2024003,王五,1班,c@x.cn\n"


@pytest.fixture(scope="module")
def clean(fresh_build, tmp_path_factory):
    """The class as plain `<name>.ipynb` files, and its report from one uninterrupted run."""
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    root = tmp_path_factory.mktemp("interruptions")
    export = root / "export"
    export.mkdir()
    correct = filled_submission(release, solutions)
    for name, notebook in (("张三", correct), ("李四", release), ("王五", correct)):
        nbformat.write(notebook, export / f"{name}.ipynb")
    course = fresh_build / "build" / "grading-course"
    run, rows = autograde(export, root / "clean", course, jobs=1)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(rows) == ["张三", "李四", "王五"]
    return {"root": root, "export": export, "course": course, "report": root / "clean"}


def command(clean, report: Path) -> list[str]:
    return [sys.executable, "-m", "grader.kit.autograde", str(clean["export"]), "--report",
            str(report), "--jobs", "1", "--course", str(clean["course"])]  # fmt: skip


def kept_records(report: Path) -> int:
    """How many submissions the report's resume record holds (0 while there is none)."""
    try:
        return len(json.loads((report / UNFINISHED).read_text(encoding="utf-8"))["kept"])
    except (OSError, ValueError):  # not written yet, or being replaced
        return 0


def wait_until(done, process, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert process.poll() is None, f"ended before {what}"
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.2)


def assert_marked_unfinished(report: Path, graded: int) -> None:
    """What the instructor opens says the run stopped; nothing of it can be imported."""
    rows = grades_csv_rows(report)
    assert sorted(rows) == ["张三", "李四", "王五"], "every submission has a row"
    waiting = [sid for sid, row in rows.items() if row["status"] == NOT_GRADED_YET]
    assert len(waiting) == 3 - graded, rows
    summary = (report / "summary.html").read_text(encoding="utf-8")
    assert "评分未完成" in summary and f"还有 {3 - graded} 份提交没有评分" in summary
    assert not [name for name in LMS_FILES if (report / name).exists()]
    pages = sorted(p.stem for p in (report / "feedback").glob("*.html"))
    assert pages == sorted(set(rows) - set(waiting))
    intake = (report / "intake.csv").read_text(encoding="utf-8-sig")
    for sid in waiting:
        assert re.search(rf"^{sid}\.ipynb,{sid},{NOT_GRADED_YET},", intake, re.M), intake
    assert kept_records(report) == graded


def resume_and_compare(clean, report: Path, graded: int) -> None:
    """The same command again: grades only what was left; the report is the clean run's."""
    again = subprocess.run(command(clean, report), cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=1200)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{graded} submissions were graded by an interrupted run" in again.stderr
    assert len(re.findall(r"^\[\s*\d+/\d+\]", again.stderr, re.M)) == 3 - graded
    assert not (report / UNFINISHED).exists() and not (report / "unfinished").exists()
    assert_same_report(clean["report"], report)


@pytest.mark.slow
@pytest.mark.heavy  # three runs of the class (about 75 s): make test keeps within 8 minutes
def test_ctrl_c_with_the_output_piped_through_tee_keeps_the_work_and_the_resume_finishes_it(
    clean, tmp_path
):
    """`make autograde ... 2>&1 | tee log`, Ctrl-C: SIGINT to the grader and to tee, whose end
    of the pipe is then gone when the grader prints its next line."""
    for attempt in range(3):
        report, log = tmp_path / f"report{attempt}", tmp_path / f"log{attempt}"
        grader = subprocess.Popen(command(clean, report), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, process_group=0)  # fmt: skip
        with open(log, "wb") as out:
            tee = subprocess.Popen(
                ["tee"], stdin=grader.stdout, stdout=out, process_group=grader.pid
            )
        grader.stdout.close()  # tee holds the only reading end
        wait_until(lambda: "[  1/3]" in log.read_text(errors="replace"), grader, "first graded")
        os.killpg(grader.pid, signal.SIGINT)  # Ctrl-C at the terminal: the whole process group
        code = grader.wait(timeout=300)
        tee.wait(timeout=60)
        if code == 0 and "[  3/3]" in log.read_text(errors="replace"):
            continue  # the run had graded everyone before the signal came (a stalled test process)
        break
    assert code == 130, f"exit {code} after Ctrl-C"
    assert "Traceback" not in log.read_text(errors="replace")
    graded = kept_records(report)
    assert 1 <= graded < 3
    assert_marked_unfinished(report, graded)
    resume_and_compare(clean, report, graded)


@pytest.mark.slow
@pytest.mark.heavy  # each interruption test costs about 60 s of both cores
def test_sigterm_after_the_reader_of_the_output_went_away_keeps_the_work(clean, tmp_path):
    """`... | head -n 3`: head has read its lines and gone before the grader's first progress
    line; a job scheduler's SIGTERM later still ends like Ctrl-C."""
    report = tmp_path / "report"
    grader = subprocess.Popen(command(clean, report), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    head = subprocess.Popen(["head", "-n", "3"], stdin=grader.stdout, stdout=subprocess.DEVNULL)
    grader.stdout.close()
    assert head.wait(timeout=300) == 0
    wait_until(lambda: kept_records(report) >= 1, grader, "a saved outcome")
    grader.send_signal(signal.SIGTERM)
    assert grader.wait(timeout=300) == 130
    graded = kept_records(report)
    assert_marked_unfinished(report, graded)
    resume_and_compare(clean, report, graded)


@pytest.mark.slow
@pytest.mark.heavy
def test_a_run_killed_with_sigkill_resumes_from_the_submissions_it_had_finished(clean, tmp_path):
    """No handler runs for `kill -9`: each outcome was saved when its submission finished."""
    report = tmp_path / "report"
    grader = subprocess.Popen(command(clean, report), cwd=REPO_ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)  # fmt: skip
    wait_until(lambda: kept_records(report) >= 1, grader, "a saved outcome")
    os.killpg(grader.pid, signal.SIGKILL)
    grader.wait(timeout=60)
    graded = kept_records(report)
    assert graded >= 1 and not (report / "grades.csv").exists()
    resume_and_compare(clean, report, graded)


@pytest.mark.slow
@pytest.mark.heavy
def test_shards_graded_again_with_a_new_roster_merge_into_the_clean_runs_report(clean, tmp_path):
    """First graded without a roster (ids from the file names), then, into the same shard and
    merge folders, with the class's GBK roster (学号 as ids): the merge is the clean run's with
    that roster, and none of the first ids is left in grades.csv, the pages or the LMS files."""
    roster = tmp_path / "roster.csv"
    roster.write_bytes(ROSTER.encode("gbk"))
    course, export = clean["course"], clean["export"]
    single, _ = autograde(export, tmp_path / "single", course, 1, ["--roster", str(roster)])
    assert single.returncode == 0, single.stderr[-3000:]
    shards = [tmp_path / f"shard{k}" for k in (0, 1)]
    for extra in ([], ["--roster", str(roster)]):
        for k, folder in enumerate(shards):
            run, _ = autograde(export, folder, course, 1, ["--shard", f"{k}/2", *extra])
            assert run.returncode == 0, run.stderr[-3000:]
        merged = merge(tmp_path / "merged", *shards, course=course)
        assert merged.returncode == 0, merged.stderr[-3000:]
    assert sorted(grades_csv_rows(tmp_path / "merged")) == ["2024001", "2024002", "2024003"]
    assert_same_report(tmp_path / "single", tmp_path / "merged")


@pytest.mark.slow
@pytest.mark.heavy  # two runs of the class: about 80 s on a quiet machine
def test_a_class_graded_again_with_a_new_roster_and_a_late_file_equals_one_clean_run(
    clean, tmp_path
):
    """A single run's rerun into its report after the roster came and 王五 handed in again late:
    the report is the one a clean run with both writes."""
    export = tmp_path / "export"
    shutil.copytree(clean["export"], export)
    roster = tmp_path / "roster.csv"
    roster.write_bytes(ROSTER.encode("gbk"))
    course = clean["course"]
    shutil.copytree(clean["report"], tmp_path / "report")  # the first run: the clean one
    late = shutil.copy(export / "李四.ipynb", export / "王五_late.ipynb")
    newer = (export / "王五.ipynb").stat().st_mtime + 3600
    os.utime(late, (newer, newer))  # handed in after the first run: the newest is graded
    extra = ["--roster", str(roster), "--name-pattern", r"(?P<student_id>[^_.]+)(?P<late>_late)?"]
    again, rows = autograde(export, tmp_path / "report", course, 1, extra)
    assert again.returncode == 0, again.stderr[-3000:]
    single, _ = autograde(export, tmp_path / "single", course, 1, extra)
    assert single.returncode == 0, single.stderr[-3000:]
    assert sorted(rows) == ["2024001", "2024002", "2024003"]
    assert_same_report(tmp_path / "single", tmp_path / "report")


@pytest.mark.parametrize(
    "text",
    [
        '{"kept": {"a.ipynb": {"outcome": {}}}}',  # an older kit's record: no identity
        '{"kept": {"a.ipynb": {"identity": IDENTITY, "outcome": {"student": "a"}}}}',
        '{"kept": [1, 2]}',
        '{"kept": {"a.ipynb": {"identity": IDE',  # cut short by a full disk
        "[]",
    ],
    ids=["no-identity", "old-outcome-fields", "kept-not-a-dict", "cut-short", "not-an-object"],
)
def test_a_record_the_kit_cannot_read_grades_its_files_again_instead_of_failing(tmp_path, text):
    """An unfinished.json from an older kit, or cut short, never stops the rerun: its
    submissions are graded again (nothing already written is lost)."""
    from grader.kit.grading.resumable import identity, left_to_grade
    from grader.kit.intake.inventory import Submission

    notebook = tmp_path / "a.ipynb"
    notebook.write_text("{}", encoding="utf-8")
    submission = Submission("a", notebook, "a.ipynb")
    text = text.replace("IDENTITY", json.dumps(identity(submission)))
    (tmp_path / UNFINISHED).write_text(text, encoding="utf-8")
    todo, done = left_to_grade([submission], tmp_path)
    assert (todo, done) == ([submission], [])
