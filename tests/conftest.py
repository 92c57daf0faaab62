"""Shared fixtures: one fresh build of the kit and one graded batch per test run."""

import csv
import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# The suite's tensors are tiny: one thread each runs them faster than two (test_checks.py alone:
# 140 s -> 103 s on a quiet 2-core machine), and a worker a core then leaves the other core
# alone. Set before anything imports torch. The kernels the kit grades in get their own count
# from the kit (`sandbox.kernel_setup.thread_environment`), whatever this says.
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(REPO_ROOT))

from grader.kit.authoring.examples import filled_submission  # noqa: E402
from grader.kit.authoring.nbsource import (  # noqa: E402
    NOTEBOOK_NAME,
    PARTS,
    nbgrader_meta,
    part_points,
    read_source,
    strip_solution_markers,
)
from tests import fixtures  # noqa: E402
from tests.fixtures import faults_crash  # noqa: E402

# graded_batch's submission whose kernel dies: a segfault at the top of TODO 10's answer.
BATCH_CRASH = next(f for f in faults_crash.FAULTS if f.name == "segfault-todo10")

# Two tiers. `make test-fast` (`pytest -m "not slow"`) runs what needs no Jupyter kernel, no
# nbgrader run and no browser: a maintainer's loop. `make test` runs everything. A test is slow
# when its module is one of these, when it asks for a fixture that builds or grades the kit, or
# when it carries `@pytest.mark.slow` itself.
SLOW_MODULES = frozenset(
    {
        "test_adversarial",
        "test_autograde",
        "test_export",
        "test_generation",
        "test_grader_faults",
        "test_other_pythons",
        "test_zygote",
    }
)
SLOW_FIXTURES = frozenset({"fresh_build", "graded_batch"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        if module in SLOW_MODULES or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
    # The modules with slow tests first, each in one piece: pytest-xdist hands modules to its
    # workers in this order (`make test`: `--dist loadfile`), so the short ones fill in at the end.
    slow_modules = {item.module for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module not in slow_modules)


def all_mistakes():
    """Every Mistake of every tests/fixtures/mistakes_*.py catalogue."""
    found = []
    for module in sorted(
        m.name for m in pkgutil.iter_modules(fixtures.__path__) if m.name.startswith("mistakes_")
    ):
        found += importlib.import_module(f"tests.fixtures.{module}").MISTAKES
    return found


def batch_mistakes():
    """The mistakes `make test` grades with real nbgrader (graded_batch) and in process: every
    catalogue's entries, less part five's beyond its sample (`mistakes_engine.SAMPLE`). The whole
    part-five catalogue runs in the heavy tier (test_engine_catalogue.py and the heavy cases of
    test_checks.py and test_visible_checks.py)."""
    return [m for m in all_mistakes() if not heavy_mistake(m)]


def heavy_mistake(mistake) -> bool:
    """Whether `mistake` runs only in `make test-heavy`: part five's, outside its sample."""
    from tests.fixtures.mistakes_engine import MISTAKES as ENGINE
    from tests.fixtures.mistakes_engine import SAMPLE

    return mistake.name not in SAMPLE and any(mistake is m for m in ENGINE)


def tiered(mistakes):
    """Each mistake as a pytest parameter; part five's beyond its sample marked heavy (and slow)."""
    return [
        pytest.param(
            m, id=m.name, marks=[pytest.mark.heavy, pytest.mark.slow] if heavy_mistake(m) else []
        )
        for m in mistakes
    ]


ALL_TODOS = [todo for part in PARTS for todo in part.todos]
# The points the source's grade cells give: counted toward `score` (counted_parts), and in all.
SOURCE_POINTS = part_points(read_source())
COUNTED_POINTS = sum(SOURCE_POINTS[part.key] for part in PARTS if part.counted)
ALL_POINTS = sum(SOURCE_POINTS.values())
_REGION = re.compile(
    r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*(\n|\Z)", re.M | re.S
)


def todo_of_region(cell, before: str) -> int:
    """The TODO a solution region answers: the cell's id says it (`todo9_...`), else the last
    `TODO <N>` comment above the region."""
    named = re.match(r"todo(\d+)_", nbgrader_meta(cell)["grade_id"])
    return int(named.group(1)) if named else int(re.findall(r"TODO (\d+)", before)[-1])


def unfinished_submission(release, solutions, todo):
    """The reference answers with TODO `todo` (a number, or a set of them) left as the release
    has it (`raise NotImplementedError()`)."""
    return todo_region_changed(
        release, solutions, todo, lambda indent, _code: f"{indent}raise NotImplementedError()\n"
    )


# The batch leaves the TODOs unfinished three notebooks at a time, every third TODO in one (one
# per TODO cost 24 gradings): the checks of each TODO use the reference for every other, so a
# notebook loses exactly the union of its TODOs' checks; test_checks.py proves each TODO alone.
UNFINISHED_PACKS = tuple(tuple(ALL_TODOS[k::3]) for k in range(3))


def unfinished_name(todos) -> str:
    """graded_batch's id of the notebook that leaves `todos` unfinished: unfinished-1-4-7-…"""
    return "unfinished-" + "-".join(map(str, todos))


def todo_region_changed(release, solutions, todo, change):
    """The reference answers with TODO `todo`'s solution regions (a number, or a set of them)
    replaced by `change(indent, region)`: `indent` is the region's, `region` its code without
    the markers."""
    todos = {todo} if isinstance(todo, int) else set(todo)
    changed = {}
    for cell in read_source().cells:
        if not nbgrader_meta(cell).get("solution"):
            continue

        def edit(match, cell=cell):
            if todo_of_region(cell, cell.source[: match.start()]) not in todos:
                return match.group(0)
            region = strip_solution_markers(match.group(0))
            return change(match.group(1), region)

        text = _REGION.sub(edit, cell.source)
        if text != cell.source:
            changed[nbgrader_meta(cell)["grade_id"]] = strip_solution_markers(text).rstrip("\n")
    assert changed, f"no solution region answers TODO {todo}"
    nb = filled_submission(release, solutions)
    for cell in nb.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id in changed:
            cell.source = changed[grade_id]
    return nb


def made_once(tmp_path_factory, name: str, make) -> Path:
    """The folder `name`, filled by `make(folder)` once for the whole run: under pytest-xdist
    every worker is a session of its own, and the first to ask makes it while the others wait.

    For a fixture that several test modules share; a module's own fixtures need nothing, since
    `--dist loadfile` runs a module on one worker. A `make` that raises leaves no folder.
    """
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above the workers' own
    folder, done = root / name, root / f"{name}.done"
    with FileLock(root / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


@pytest.fixture(scope="session")
def fresh_build(tmp_path_factory):
    """The kit generated from the source into a temporary root: notebooks/, build/, and
    solutions/ not executed (what the batches take from it is code; test_generation executes
    its own)."""

    def build(out):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grader.kit.authoring.build",
                "all",
                "--no-execute",
                "--out",
                str(out),
            ],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
        )

    return made_once(tmp_path_factory, "fresh-build", build)


# An empty but valid notebook, and a file written where an LMS export would put it (the intake tests).
NB = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def write(folder, relative, text=NB, mtime=None):
    """Write `text` at `folder / relative` (folders made), with modification time `mtime` if given."""
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def read_nb(path):
    return nbformat.read(path, as_version=4)


def autograde(submissions_dir, report_dir, course, jobs=2, extra=(), env=None):
    """Run the kit's autograder CLI for real; return (completed process, grades.csv rows by student).

    `env` adds to (or overrides) this process's environment for the run.
    """

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.kit.autograde",
            str(submissions_dir),
            "--report",
            str(report_dir),
            "--jobs",
            str(jobs),
            "--course",
            str(course),
            *extra,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
        env=None if env is None else {**os.environ, **env},
    )
    return run, grades_csv_rows(report_dir)


def grades_csv_rows(report_dir):
    """grades.csv's rows by student; {} when there is none."""
    rows = {}
    if (report_dir / "grades.csv").exists():
        with open(report_dir / "grades.csv", newline="", encoding="utf-8-sig") as handle:
            rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    return rows


def lost_checks(row, release) -> set[str]:
    """The grade cells a grades.csv row scored below their points (`release`: the notebook
    whose grade cells the report's columns are)."""
    from grader.kit.report.grades import grade_columns

    return {g for g, points in grade_columns(release) if float(row[g]) < points}


def grade_in_process(submissions_dir, report_dir, course):
    """The kit's `grade_all`, called in this process, for a batch in which no file needs a kernel
    (every one is refused before grading: not JSON, empty) or which stops before grading
    anyone (a bad overrides.csv): what the command line does once its sandbox is up, less the
    zygote, the kernel probe and the preflight, which would grade nothing here. At least one
    test per behaviour runs the command line itself.

    Returns (what grade_all wrote on its progress stream, grades.csv rows by student); raises
    what grade_all raises (BadOverrides for a bad overrides.csv).
    """
    import io

    from grader.kit.grading.batch import FAULT_STATUSES, BatchSettings, grade_all
    from grader.kit.intake.inventory import discover
    from grader.kit.report.writer import stale_ids

    progress = io.StringIO()
    settings = BatchSettings(course=course, jobs=1, progress=progress)
    with discover(submissions_dir) as intake:
        outcomes = grade_all(
            intake.submissions,
            report_dir,
            settings,
            replaced=frozenset(stale_ids(intake, report_dir)),
            intake=intake,
        )
    kernels = FAULT_STATUSES + ("graded", "flagged", "timeout")
    started = [o.student_id for o in outcomes if o.status in kernels]
    assert not started, f"{started}: a kernel was needed; grade these with autograde()"
    return progress.getvalue(), grades_csv_rows(report_dir)


def todos_of_edit(solutions):
    """`todos(old)`: the TODOs whose reference code (in `solutions`) holds the text `old`: the
    one its cell is named for, else the last one mentioned above it, else (code shared by the
    cell's TODOs, ahead of them) every TODO its cell mentions."""
    cells = [cell for cell in solutions.cells if nbgrader_meta(cell).get("solution")]

    def todos(old: str) -> set[int]:
        # a cell's source ends without the newline its last line had in the source file
        cell = next(cell for cell in cells if old in cell.source + "\n")
        named = re.match(r"todo(\d+)_", nbgrader_meta(cell)["grade_id"])
        if named:
            return {int(named.group(1))}
        above = re.findall(
            r"TODO (\d+)", (cell.source + "\n")[: (cell.source + "\n").index(old) + len(old)]
        )
        return (
            {int(above[-1])} if above else {int(n) for n in re.findall(r"TODO (\d+)", cell.source)}
        )

    return todos


def mistake_packs(release, solutions, mistakes=None):
    """The catalogued mistakes of `make test` (batch_mistakes; or `mistakes`), packed for one
    real batch (`tests/fixtures/packing.py`)."""
    from tests.fixtures.packing import pack_mistakes

    chosen = batch_mistakes() if mistakes is None else mistakes
    return pack_mistakes(chosen, release, solutions, todos_of_edit(solutions))


# graded_batch's roster also lists these two, who submitted nothing (rows `missing`), and this
# one, whose file is not a notebook.
BATCH_ABSENT = ("absent-1", "absent-2")
BATCH_BROKEN = "broken-json"


def batch_submissions(release, solutions, packs) -> dict:
    """{student id: notebook, or the text of a file that is none} of graded_batch, in the order
    the export lists them."""
    submissions = {
        "reference-solution": filled_submission(release, solutions),
        "untouched-release": release,
    }
    for pack in packs:
        submissions[pack.name] = filled_submission(release, solutions, pack.edits)
    for todos in UNFINISHED_PACKS:
        submissions[unfinished_name(todos)] = unfinished_submission(release, solutions, todos)
    submissions[BATCH_CRASH.name] = faults_crash.submission(
        release, solutions, BATCH_CRASH, todo_region_changed
    )
    # the reference once more, under a Chinese name and the learner's own file name
    submissions["zhang-wei"] = filled_submission(release, solutions)
    submissions[BATCH_BROKEN] = "{not json"  # a file no kernel opens (`invalid_json`)
    return submissions


def write_moodle_export(submissions: dict, folder: Path) -> tuple[Path, Path]:
    """`submissions` as Moodle's "download all submissions" zip (a folder per participant:
    `<full name>_<participant number>_assignsubmission_file_/<the learner's file>`) and a
    roster naming each student with that number as `lms_user_id`, plus BATCH_ABSENT."""
    import zipfile

    archive, roster = folder / "moodle-ch34.zip", folder / "roster.csv"
    students = [*submissions, *BATCH_ABSENT]
    names = {"zhang-wei": "张伟"}
    lines = ["student_id,name,lms_user_id"]
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for n, student_id in enumerate(students):
            name, number = names.get(student_id, f"Student {n:02d}"), 30100 + n
            lines.append(f"{student_id},{name},{number}")
            if student_id in submissions:
                file = "第34章作业.ipynb" if student_id in names else NOTEBOOK_NAME
                text = submissions[student_id]
                text = text if isinstance(text, str) else nbformat.writes(text)
                zipped.writestr(f"{name}_{number}_assignsubmission_file_/{file}", text)
    roster.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return archive, roster


@pytest.fixture(scope="session")
def graded_batch(fresh_build, tmp_path_factory):
    """Graded in one batch, made once for the whole run (every worker reads the same report):
    the reference solution, the untouched release, every catalogued mistake in a few packs
    (`pack-<n>`, `tests/fixtures/packing.py`), the reference with every third TODO left
    unfinished (UNFINISHED_PACKS), the reference with a segfault in TODO 10 (BATCH_CRASH,
    `tests/fixtures/faults_crash.py`), the reference once more (`zhang-wei`) and a file that
    is not JSON (BATCH_BROKEN), as one Moodle export with a roster that also lists
    BATCH_ABSENT. Two jobs (test_shards' shards: one)."""
    import json

    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    packs = mistake_packs(release, solutions)

    def grade(folder):
        submissions = batch_submissions(release, solutions, packs)
        export, roster = write_moodle_export(submissions, folder)
        course = fresh_build / "build" / "grading-course"
        run, _ = autograde(export, folder / "report", course, extra=["--roster", str(roster)])
        kept = {"returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr}
        (folder / "run.json").write_text(json.dumps(kept), encoding="utf-8")

    folder = made_once(tmp_path_factory, "graded-batch", grade)
    kept = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    run = subprocess.CompletedProcess("autograde", **kept)
    assert run.returncode == 0, run.stderr[-3000:]
    report = folder / "report"
    pack_of = {m.name: pack for pack in packs for m in pack.mistakes}
    return {
        "run": run,
        "rows": grades_csv_rows(report),
        "report": report,
        "release": release,
        "pack_of": pack_of,
        "export": folder / "moodle-ch34.zip",
        "roster": folder / "roster.csv",
    }
