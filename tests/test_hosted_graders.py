"""Gradescope's and PrairieLearn's contracts (grader/kit/cluster/hosted.py): the unit run in each
grader's layout under a temporary root writes a results.json that validates against the field
lists those graders publish, with one entry per check, the learner's first message, no check's
code, and a grader fault as a "not your fault" entry with no score."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from grader.kit.authoring.examples import PARTLY_WRONG_EDITS, filled_submission
from grader.kit.cluster import gradescope
from grader.kit.paths import NOTEBOOK_NAME, course_source_notebook
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


@pytest.fixture(scope="module")
def hosted_runs(fresh_build, tmp_path_factory):
    """The partly wrong example graded in Gradescope's layout and in PrairieLearn's, at once."""
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
        runs = dict(zip(roots, pool.map(lambda r: run_hosted(r, course), roots.values())))
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
