"""Gradescope's and PrairieLearn's contracts (grader/kit/cluster/hosted.py): the unit run in each
grader's layout under a temporary root writes a results.json that validates against the field
lists those graders publish, with one entry per check, the learner's first message, no check's
code, and a grader fault as a "not your fault" entry with no score."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from grader.kit.authoring.examples import PARTLY_WRONG_EDITS, filled_submission
from grader.kit.cluster import gradescope
from grader.kit.paths import NOTEBOOK_NAME, course_source_notebook
from grader.kit.publish.compat import find_python
from grader.kit.report.scores import grade_columns
from tests.conftest import REPO_ROOT, read_nb

GRADESCOPE_RESULTS = "autograder/results/results.json"
PRAIRIELEARN_RESULTS = "grade/results/results.json"
TEST_NAME = {"type": "string", "minLength": 1}
NUMBER = {"type": "number"}

# Gradescope, "Autograder Specifications", Output format:
# https://gradescope-autograders.readthedocs.io/en/latest/specs/#output-format
GRADESCOPE_SCHEMA = {
    "type": "object",
    "properties": {
        "score": NUMBER,
        "execution_time": NUMBER,
        "output": {"type": "string"},
        "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "stdout_visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "extra_data": {"type": "object"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "score": NUMBER,
                    "max_score": NUMBER,
                    "status": {"enum": ["passed", "failed"]},
                    "name": {"type": "string"},
                    "name_format": {"type": "string"},
                    "number": {"type": "string"},
                    "output": {"type": "string"},
                    "output_format": {"type": "string"},
                    "tags": {"type": "array"},
                    "visibility": {
                        "enum": ["hidden", "after_due_date", "after_published", "visible"]
                    },
                    "extra_data": {"type": "object"},
                },
                "additionalProperties": False,
            },
        },
        "leaderboard": {"type": "array"},
    },
    "additionalProperties": False,
}

# PrairieLearn, "External Grading", Grading results:
# https://docs.prairielearn.com/externalGrading/#grading-results
PRAIRIELEARN_SCHEMA = {
    "type": "object",
    "required": ["gradable"],
    "properties": {
        "gradable": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "message": {"type": "string"},
        "output": {"type": "string"},
        "images": {"type": "array"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": TEST_NAME,
                    "description": {"type": "string"},
                    "points": NUMBER,
                    "max_points": NUMBER,
                    "message": {"type": "string"},
                    "output": {"type": "string"},
                    "images": {"type": "array"},
                },
                "additionalProperties": False,
            },
        },
    },
    "if": {"properties": {"gradable": {"const": True}}},
    "then": {"required": ["score"]},
    "additionalProperties": False,
}


def run_hosted(root, course):
    env = {**os.environ, "CH34_HOSTED_ROOT": str(root), "CH34_COURSE": str(course)}
    return subprocess.run(
        [sys.executable, "-m", "grader.kit.cluster.hosted"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def run_unpacked_gradescope_zip(root, course):
    """The zip `make gradescope` builds, unpacked where Gradescope puts it (root/autograder/source),
    its run_autograder run as Gradescope runs it: only what the zip carries grades (the kit, the
    course), with the Python setup.sh makes (here the repository's .venv, made from the same
    requirements.txt)."""
    autograder = root / "autograder"
    with zipfile.ZipFile(gradescope.build_zip(root / "autograder.zip", course)) as zipped:
        zipped.extractall(autograder / "source")
    (autograder / "venv").symlink_to(REPO_ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if k not in ("CH34_COURSE", "VIRTUAL_ENV")}
    env.update(CH34_HOSTED_ROOT=str(root), PATH="/usr/local/bin:/usr/bin:/bin")
    return subprocess.run(["bash", str(autograder / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


@pytest.fixture(scope="module")
def hosted_runs(fresh_build, tmp_path_factory):
    """The partly wrong example graded at once by the unpacked Gradescope zip's run_autograder
    and in PrairieLearn's layout."""
    course = fresh_build / "build" / "grading-course"
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    notebook = filled_submission(release, solutions, PARTLY_WRONG_EDITS)
    roots = {}
    for name, folder in (
        ("gradescope", "autograder/submission"),
        ("prairielearn", "grade/student"),
    ):
        root = tmp_path_factory.mktemp(name)
        (root / folder).mkdir(parents=True)
        (root / folder / NOTEBOOK_NAME).write_text(json.dumps(notebook), encoding="utf-8")
        roots[name] = root
    data = roots["prairielearn"] / "grade" / "data"
    data.mkdir(parents=True)
    (data / "data.json").write_text('{"params": {}, "correct_answers": {}}', encoding="utf-8")
    with ThreadPoolExecutor(2) as pool:
        gradescope_run = pool.submit(run_unpacked_gradescope_zip, roots["gradescope"], course)
        prairielearn_run = pool.submit(run_hosted, roots["prairielearn"], course)
        runs = {"gradescope": gradescope_run.result(), "prairielearn": prairielearn_run.result()}
    return {"roots": roots, "runs": runs, "release": release, "course": course}


def hidden_code(course) -> list[str]:
    """The lines of the hidden checks (the source notebook's BEGIN/END HIDDEN TESTS blocks) that
    a learner must never see in the results."""
    source = read_nb(course_source_notebook(course))
    hidden = re.findall(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", "\n".join(
        cell.source for cell in source.cells if cell.cell_type == "code"), re.S)  # fmt: skip
    lines = [line.strip() for block in hidden for line in block.splitlines()]
    return [line for line in lines if len(line) > 20]


def results_of(hosted_runs, grader: str, path: str, schema: dict) -> dict:
    """The unit's results.json in `grader`'s layout, checked against `schema`."""
    run = hosted_runs["runs"][grader]
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((hosted_runs["roots"][grader] / path).read_text(encoding="utf-8"))
    jsonschema.validate(results, schema)
    return results


@pytest.mark.slow
def test_gradescope_results_validate_and_hold_one_test_per_check(hosted_runs):
    results = results_of(hosted_runs, "gradescope", GRADESCOPE_RESULTS, GRADESCOPE_SCHEMA)
    columns = grade_columns(hosted_runs["release"])
    assert len(results["tests"]) == len(columns)
    failed = [t for t in results["tests"] if t["status"] == "failed"]
    assert failed and all(t["output"] and t["output"] != "通过 / passed" for t in failed)
    assert any(t["name"].startswith("TODO 2 ·") for t in failed), "the tail chunk slip (TODO 2)"
    assert 0 < results["score"] < sum(t["max_score"] for t in results["tests"])
    text = json.dumps(results, ensure_ascii=False)
    hidden = hidden_code(hosted_runs["course"])
    assert hidden and not [line for line in hidden if line in text]


@pytest.mark.slow
def test_prairielearn_results_validate_with_a_score_in_0_1(hosted_runs):
    results = results_of(hosted_runs, "prairielearn", PRAIRIELEARN_RESULTS, PRAIRIELEARN_SCHEMA)
    assert results["gradable"] is True and 0 < results["score"] < 1
    gradescope = results_of(hosted_runs, "gradescope", GRADESCOPE_RESULTS, GRADESCOPE_SCHEMA)
    assert [t["points"] for t in results["tests"]] == [t["score"] for t in gradescope["tests"]]
    assert [t["message"] for t in results["tests"]] == [t["output"] for t in gradescope["tests"]]


@pytest.mark.slow  # the kit's command line starts its sandbox and kernel probe first
def test_a_grader_fault_is_not_the_learners_and_carries_no_score(tmp_path):
    """No grading course where the unit looks for it: the grader's fault, in both formats."""
    for folder, results_path, schema in (
        ("autograder/submission", GRADESCOPE_RESULTS, GRADESCOPE_SCHEMA),
        ("grade/student", PRAIRIELEARN_RESULTS, PRAIRIELEARN_SCHEMA),
    ):
        root = tmp_path / folder.split("/")[0]
        (root / folder).mkdir(parents=True)
        (root / folder / NOTEBOOK_NAME).write_text("{}", encoding="utf-8")
        run = run_hosted(root, tmp_path / "no-course")
        assert run.returncode == 0, run.stderr
        results = json.loads((root / results_path).read_text(encoding="utf-8"))
        jsonschema.validate(results, schema)
        text = json.dumps(results, ensure_ascii=False)
        assert "not your fault" in text and '"score"' not in text
        assert results.get("gradable", False) is False


def test_the_autograder_zip_has_setup_and_run_autograder_at_its_root(fresh_build, tmp_path):
    out = gradescope.build_zip(
        tmp_path / "autograder.zip", fresh_build / "build" / "grading-course"
    )
    with zipfile.ZipFile(out) as zipped:
        names = set(zipped.namelist())
        assert {"setup.sh", "run_autograder"} <= names
        assert zipped.getinfo("run_autograder").external_attr >> 16 & 0o111
        assert "grader.kit.cluster.hosted" in zipped.read("run_autograder").decode()
        assert "build/grading-course/gradebook.db" in names
        assert "grader/kit/cluster/hosted.py" in names
        assert not [n for n in names if "__pycache__" in n]


# ---- setup.sh and run_autograder as Gradescope runs them -----------------------------------
# Gradescope's default base image is Ubuntu 22.04, whose python3 is 3.10 (too old for
# requirements.txt). No Ubuntu image can be had here, so each test gives setup.sh a PATH holding
# only what that image would offer it (a Python 3.10 as python3, with or without a python3.11)
# and a stand-in for / (CH34_HOSTED_ROOT).


def image_path(tmp_path, **tools) -> str:
    """A folder for PATH with bash, id and `tools` (name: the program it runs) and nothing else."""
    folder = tmp_path / "image-bin"
    folder.mkdir()
    for name, program in {"bash": shutil.which("bash"), "id": shutil.which("id"), **tools}.items():
        (folder / name).symlink_to(program)
    return str(folder)


def run_setup(root, path: str):
    return subprocess.run(
        ["bash", str(gradescope.SCRIPTS / "setup.sh")], capture_output=True, text=True,
        env={"PATH": path, "CH34_HOSTED_ROOT": str(root)}, timeout=300,
    )  # fmt: skip


def python_310():
    python = find_python("3.10")
    if python is None:
        pytest.skip("no Python 3.10 here (pyenv) to stand for Ubuntu 22.04's python3")
    return python


def test_setup_on_an_image_with_only_python_3_10_stops_in_one_line_before_installing(tmp_path):
    (tmp_path / "autograder" / "source").mkdir(parents=True)
    setup = run_setup(tmp_path, image_path(tmp_path, python3=python_310()))
    assert setup.returncode == 1
    assert setup.stdout == "" and setup.stderr.count("\n") == 1
    assert setup.stderr.startswith("setup.sh: error: the kit needs Python 3.11 or newer")
    assert "Python 3.10" in setup.stderr and "Ubuntu 22.04" in setup.stderr
    assert not (tmp_path / "autograder" / "venv").exists()


def test_setup_takes_python_3_11_over_the_images_python3_3_10(tmp_path):
    """As on Ubuntu 22.04 once its python3.11 package is in: the venv is made with 3.11 (a
    requirements.txt with nothing in it stands for the kit's, which needs the network)."""
    source = tmp_path / "autograder" / "source"
    source.mkdir(parents=True)
    (source / "requirements.txt").write_text("# nothing to install offline\n", encoding="utf-8")
    python311 = find_python("3.11")
    if python311 is None:
        pytest.skip("no Python 3.11 here")
    tools = {"python3": python_310(), "python3.11": python311}
    if shutil.which("bwrap"):
        tools["bwrap"] = shutil.which("bwrap")
    setup = run_setup(tmp_path, image_path(tmp_path, **tools))
    assert setup.returncode == 0, setup.stderr
    assert f"setup.sh: Python 3.11 ({tmp_path}/image-bin/python3.11)" in setup.stdout
    venv_python = tmp_path / "autograder" / "venv" / "bin" / "python"
    made = subprocess.run([str(venv_python), "-c", "import sys; print(sys.version_info[:2])"],
                          capture_output=True, text=True)  # fmt: skip
    assert made.stdout.strip() == "(3, 11)"


def test_the_zip_carries_the_setup_and_run_autograder_of_deploy_gradescope(fresh_build, tmp_path):
    out = gradescope.build_zip(
        tmp_path / "autograder.zip", fresh_build / "build" / "grading-course"
    )
    with zipfile.ZipFile(out) as zipped:
        for name in gradescope.ENTRY_POINTS:
            assert zipped.read(name) == (gradescope.SCRIPTS / name).read_bytes()


@pytest.mark.slow
def test_the_unpacked_zips_run_autograder_grades_a_submission(hosted_runs):
    """run_autograder from the unpacked zip (hosted_runs) wrote Gradescope's results for the
    partly wrong notebook: some points, not all."""
    results = results_of(hosted_runs, "gradescope", GRADESCOPE_RESULTS, GRADESCOPE_SCHEMA)
    assert 0 < results["score"] < sum(t["max_score"] for t in results["tests"])
