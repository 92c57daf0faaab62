"""Grading survives what students hand in: Colab round trips, broken files, hostile code."""

import time
from pathlib import Path

import pytest

from grader.kit.authoring.nbsource import NOTEBOOK_NAME
from grader.kit.report.grades import grade_columns
from tests.conftest import autograde, read_nb
from tests.fixtures.adversarial import (
    ATTACK_LIMITS,
    ATTACK_MEMORY_GB,
    ATTACKS,
    ORPHAN_SLEEP_SECONDS,
    SIGINT_IGNORED_FOREVER,
    with_scratch_cell,
)


@pytest.fixture(scope="session")
def attacked(fresh_build, tmp_path_factory):
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    submissions = tmp_path_factory.mktemp("attacks")
    for attack in ATTACKS:
        (submissions / f"{attack.name}.ipynb").write_bytes(attack.make(release, solutions))
    report = tmp_path_factory.mktemp("attack-report")
    run, rows = autograde(
        submissions,
        report,
        fresh_build / "build" / "grading-course",
        # Three at a time: the attack that ignores interrupts only sleeps until the notebook
        # limit, and the other two slots keep both cores busy meanwhile.
        jobs=3,
        extra=ATTACK_LIMITS,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return {"run": run, "rows": rows, "report": report, "columns": grade_columns(release)}


@pytest.fixture(scope="module")
def unsandboxed_batch(fresh_build, tmp_path_factory):
    """Graded in one batch with `--no-sandbox`: `detached`
    (a correct notebook that leaves a detached process running), `overrun` (a correct notebook
    whose scratch cell ignores interrupts and never ends) and `empty` (an empty file).

    The notebook limit is the only way `overrun` ends, so the batch lasts that long: 60 s, far
    above what grading the preflight's reference and `detached` takes on a loaded machine. Three
    at a time, so `overrun`, which only sleeps, waits out its limit beside the other two.
    """
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    root = tmp_path_factory.mktemp("unsandboxed")
    submissions, scratch = root / "submissions", root / "tmp"
    submissions.mkdir()
    scratch.mkdir()
    detach = next(a for a in ATTACKS if a.name == "background-process-left-running")
    (submissions / "detached.ipynb").write_bytes(detach.make(release, solutions))
    overrun = with_scratch_cell(SIGINT_IGNORED_FOREVER)
    (submissions / "overrun.ipynb").write_bytes(overrun(release, solutions))
    (submissions / "empty.ipynb").write_bytes(b"")
    run, rows = autograde(
        submissions,
        root / "report",
        fresh_build / "build" / "grading-course",
        jobs=3,
        extra=["--no-sandbox", "--notebook-timeout", "60"],
        # The kernels' connection files go there: their command lines name it.
        env={"TMPDIR": str(scratch)},
    )
    return {"run": run, "rows": rows, "scratch": scratch}


def test_the_attacks_were_graded_inside_the_sandbox_by_pre_imported_kernels(attacked):
    # Without the zygote the grader falls back to bubblewrap (tested below), without bubblewrap
    # to bare kernels; either way the attacks here would not test the default path.
    line = next(line for line in attacked["run"].stderr.splitlines() if "sandbox:" in line)
    assert "sandbox: namespaces" in line, (
        f"{line}: the kernels were not forked from the zygote (user namespaces refused? "
        "bubblewrap missing? apt-get install bubblewrap)"
    )


def test_the_attacks_were_graded_under_process_and_memory_limits(attacked):
    # Root ignores RLIMIT_NPROC and RLIMIT_AS is per process: only cgroups hold the fork bomb
    # and the memory taken by several processes at once.
    line = next(line for line in attacked["run"].stderr.splitlines() if "cgroup limits:" in line)
    assert "at most 512 processes" in line and f"{ATTACK_MEMORY_GB:g} GiB of memory" in line, line


def test_catalogue_has_at_least_15_attacks():
    assert len(ATTACKS) >= 15 and len({a.name for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_ends_as_its_expected_status_and_score(attacked, attack):
    row = attacked["rows"][attack.name]
    score, maximum = float(row["score"]), float(row["max_score"])
    assert row["status"] == attack.status, f"{row['status']}: {row['reason']}"
    # Full means every grade cell full: the challenge part is not in `score`, but it counts here.
    every_cell = all(float(row[grade_id]) == points for grade_id, points in attacked["columns"])
    expected = {
        "full": score == maximum and every_cell,
        "zero": score == 0,
        "partial": 0 < score < maximum,
    }[attack.score]
    assert expected, f"score {score}/{maximum}, expected {attack.score}"
    if attack.status != "graded":
        assert row["reason"], "a row that is not graded must say why"


def test_every_submission_in_the_batch_gets_a_row_and_a_feedback_page(attacked):
    assert set(attacked["rows"]) == {a.name for a in ATTACKS}
    for name in attacked["rows"]:
        assert (attacked["report"] / "feedback" / f"{name}.html").stat().st_size > 0


def test_repairs_are_listed_in_the_csv_for_the_colab_round_trip(attacked):
    repairs = attacked["rows"]["correct-with-all-metadata-stripped-by-colab"]["repairs"]
    assert repairs.startswith(tuple(f"{n} repair" for n in range(1, 100))), repairs
    assert attacked["rows"]["test-cells-deleted"]["repairs"] != "no repairs"


def test_sandboxed_kernel_finds_no_hidden_tests_on_disk(attacked):
    page = (attacked["report"] / "feedback" / "reads-hidden-tests-past-the-scanner.html").read_text(
        encoding="utf-8"
    )
    assert "matches: []" in page


def test_output_flood_is_cut_short_in_the_feedback(attacked):
    page = attacked["report"] / "feedback" / "output-flood.html"
    assert page.stat().st_size < 5_000_000


def test_no_process_a_submission_started_outlives_its_grading(attacked):
    orphan = f"sleep\0{ORPHAN_SLEEP_SECONDS}\0"
    assert wait_for_no_process_with(orphan) == [], (
        "a detached process from a graded notebook is still running"
    )


@pytest.mark.heavy  # the attacks graded once more, unsandboxed (about 65 s); make test grades them sandboxed
def test_nothing_outlives_grading_without_the_sandbox_either(unsandboxed_batch):
    # No PID namespace here: the kernel (jupyter_client starts it in a session of its own) and a
    # detached process both escape the kill of the grader's process group at the notebook limit.
    run, rows = unsandboxed_batch["run"], unsandboxed_batch["rows"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert rows["detached"]["status"] == "graded" and rows["overrun"]["status"] == "timeout"
    assert wait_for_no_process_with(f"sleep\0{ORPHAN_SLEEP_SECONDS}\0") == []
    assert wait_for_no_process_with(str(unsandboxed_batch["scratch"])) == [], (
        "a kernel outlived its grader"
    )


@pytest.mark.heavy  # shares the unsandboxed batch (a 60 s notebook limit waited out)
def test_grading_without_bubblewrap_says_so_loudly(unsandboxed_batch):
    run, rows = unsandboxed_batch["run"], unsandboxed_batch["rows"]
    assert "WITHOUT a sandbox" in run.stderr and "sandbox: NONE" in run.stderr
    assert rows["empty"]["status"] == "empty_file"


# What only the sandbox or its limits stop, graded again with every kernel started afresh in
# bubblewrap: the path taken where the zygote cannot make its namespaces (`--no-zygote`). A
# fallback path, each kernel importing torch itself: `make test-heavy`.
SANDBOX_ATTACKS = (
    "reads-hidden-tests-past-the-scanner",
    "background-process-left-running",
    "fork-bomb-stopped-by-the-process-limit",
    "memory-bomb-across-forked-processes",
    "kernel-segfault",
)


@pytest.mark.heavy
def test_the_sandbox_attacks_end_the_same_with_kernels_started_afresh_in_bubblewrap(
    fresh_build, tmp_path
):
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    chosen = [a for a in ATTACKS if a.name in SANDBOX_ATTACKS]
    assert len(chosen) == len(SANDBOX_ATTACKS)
    for attack in chosen:
        (submissions / f"{attack.name}.ipynb").write_bytes(attack.make(release, solutions))
    run, rows = autograde(
        submissions,
        tmp_path / "report",
        fresh_build / "build" / "grading-course",
        extra=["--no-zygote", *ATTACK_LIMITS],
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "sandbox: bubblewrap (each kernel started afresh)" in run.stderr
    for attack in chosen:
        row = rows[attack.name]
        assert row["status"] == attack.status, (attack.name, row["status"], row["reason"])
        full = float(row["score"]) == float(row["max_score"])
        assert full == (attack.score == "full"), (attack.name, row["score"])
    page = tmp_path / "report" / "feedback" / "reads-hidden-tests-past-the-scanner.html"
    assert "matches: []" in page.read_text(encoding="utf-8")
    assert wait_for_no_process_with(f"sleep\0{ORPHAN_SLEEP_SECONDS}\0") == []


def wait_for_no_process_with(text: str, seconds: float = 10) -> list[str]:
    """Pids whose command line contains `text` (NULs between arguments), once none are left or
    `seconds` have passed (SIGKILL is delivered asynchronously)."""

    def matching():
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if text.encode() in cmdline.read_bytes():
                    found.append(cmdline.parent.name)
            except OSError:  # the process ended while we looked
                pass
        return found

    deadline = time.monotonic() + seconds
    while matching() and time.monotonic() < deadline:
        time.sleep(0.2)
    return matching()
