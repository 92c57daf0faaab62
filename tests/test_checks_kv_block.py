"""The hidden checks of TODO 9-14 against the reference, without nbgrader, in seconds.

Each check file runs as its grade cell runs it (`load_checks`, the notebook's namespace as
argument), on a namespace built from only the cells that TODO 9-14 need. Every KV and block
mistake must fail exactly its `loses` checks, with its cause words in the first message.
`test_checks.py` checks the same for every TODO with all cells run (and the visible cells);
`test_autograde.py` grades with real nbgrader. The simulator tests prove that a measurement
broken by a wrong TODO names that TODO.
"""

import copy
import io
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest

from grader.kit.authoring.checkcells import total_points
from grader.kit.authoring.nbsource import (
    PARTS,
    load_checks,
    named_checks,
    nbgrader_meta,
    read_source,
    strip_solution_markers,
)
from grader.kit.intake.normalize import normalize_submission
from grader.kit.paths import STUDENT_NOTEBOOK
from tests.conftest import read_nb
from tests.fixtures.mistakes_block import MISTAKES as BLOCK_MISTAKES
from tests.fixtures.mistakes_kv import MISTAKES as KV_MISTAKES

SOURCE = read_source()
# TODO 9-14 (parts two and three) and each one's points, as its check file declares them
TOTALS = {
    todo: total_points(f"todo{todo}.py")[todo]
    for part in PARTS
    if part.key in ("kv", "block")
    for todo in part.todos
}
# The cells TODO 9-14 and their checks need: the tiny model, the two KV TODOs, the block cache and
# the simulator the measurements use (the PrefixCacheManager cell: simulate_seed refers to it).
NEEDED = (
    "setup_imports",
    "prefix_cache_manager",
    "kv_imports",
    "kv_tiny_model",
    "todo9_chunked_prefill",
    "todo10_kv_prefix_cache",
    "block_pool_given",
    "block_prefix_cache",
    "block_simulator",
)


def grade_cells():
    """[(todo, grade id, points, file, check name)] of the grade cells of TODO 9-14, in notebook order."""
    found = []
    for cell in SOURCE.cells:
        meta = nbgrader_meta(cell)
        number = meta.get("grade_id", "").removeprefix("test_todo").split("_")[0]
        if (
            cell.cell_type == "code"
            and meta.get("grade")
            and number.isdigit()
            and int(number) in TOTALS
        ):
            (filename, name), *others = named_checks(cell.source)
            assert not others, f"{meta['grade_id']} names more than one check"
            found.append((int(number), meta["grade_id"], meta["points"], filename, name))
    return found


CELLS = grade_cells()
CHECKS = {filename: load_checks(filename) for _, _, _, filename, _ in CELLS}


def namespace(edits=()):
    """The NEEDED cells of the reference, `edits` applied (each old text exactly once), run in order."""
    cells = [copy.deepcopy(c) for c in SOURCE.cells if nbgrader_meta(c).get("grade_id") in NEEDED]
    assert len(cells) == len(NEEDED), "a cell named in NEEDED is gone from the source"
    for cell in cells:
        cell.source = strip_solution_markers(cell.source)
    for old, new in edits:
        places = [c for c in cells if nbgrader_meta(c).get("solution") and old in c.source]
        assert sum(c.source.count(old) for c in places) == 1, f"edit {old!r} must match once"
        places[0].source = places[0].source.replace(old, new)
    ns = {"__name__": "__main__"}
    for cell in cells:
        with redirect_stdout(io.StringIO()):
            exec(compile(cell.source, "<cell>", "exec"), ns)
    return ns


def failures(ns):
    """{grade id: message} of the TODO 9-14 checks that fail on `ns`, in notebook order."""
    failed = {}
    for _, grade_id, _, filename, name in CELLS:
        try:
            CHECKS[filename][name](ns)
        except Exception as error:  # noqa: BLE001  (any error loses the cell's points)
            failed[grade_id] = f"{type(error).__name__}: {error}"
    return failed


@pytest.fixture(scope="module")
def reference():
    return namespace()


def test_each_todo_keeps_its_total_across_its_checks():
    points = {todo: 0 for todo in TOTALS}
    for todo, _, cell_points, _, _ in CELLS:
        points[todo] += cell_points
    assert points == TOTALS


def test_every_check_function_has_exactly_one_grade_cell():
    named = sorted((filename, name) for _, _, _, filename, name in CELLS)
    defined = sorted(
        (f"todo{todo}.py", name)
        for todo in TOTALS
        for name in load_checks(f"todo{todo}.py")
        if name.startswith("check_")
    )
    assert named == defined
    assert all(grade_id == f"test_{name[6:]}" for _, grade_id, _, _, name in CELLS)
    assert all(name.startswith(f"check_todo{todo}_") for todo, _, _, _, name in CELLS)


def test_every_kv_and_block_check_passes_on_the_reference(reference):
    assert failures(reference) == {}


def test_an_unfinished_todo_loses_only_its_own_checks():
    stub = "raise NotImplementedError()"
    for todo, old in (
        (9, "    chunk_logits = []\n"),
        (10, "        match_len = self.manager.match_prefix(tokens)\n"),
        (11, "        block_ids = []\n        parent_key = None\n"),
        (12, "        hit_ids = self.match(token_ids)\n"),
        (13, "        for block_id in reversed(block_ids):\n"),
        (14, "        self.num_requests += 1\n"),
    ):
        indent = old[: len(old) - len(old.lstrip())]
        failed = failures(namespace(((old, f"{indent}{stub}\n{old}"),)))
        own = {grade_id for number, grade_id, _, _, _ in CELLS if number == todo}
        assert set(failed) == own, f"TODO {todo} unfinished: {sorted(failed)}"
        assert all(f"请先完成 TODO {todo}" in message for message in failed.values()), failed


@pytest.mark.parametrize(
    "mistake", KV_MISTAKES + BLOCK_MISTAKES, ids=[m.name for m in KV_MISTAKES + BLOCK_MISTAKES]
)
def test_mistake_fails_exactly_its_checks_and_names_the_cause_first(mistake):
    failed = failures(namespace(mistake.edits))
    assert set(failed) == set(mistake.loses), f"failed {sorted(failed)}: {failed}"
    first = next(iter(failed.values()))
    for word in mistake.cause:
        assert word in first, f"first message lacks {word!r}: {first}"


def simulate_system_prompts(ns, cls_name="BlockPrefixCache", num_blocks=64):
    """The first measurement's smallest case: the shared-system-prompt workload on a 64-block pool."""
    trace = ns["make_workloads"](seed=34)["system-prompt"]
    return ns["simulate"](ns[cls_name](16, num_blocks), trace)


def mistake(name):
    return next(m for m in KV_MISTAKES + BLOCK_MISTAKES if m.name == name)


def test_simulator_runs_the_reference(reference):
    for cls_name in ("BlockPrefixCache", "FIFOBlockPrefixCache", "RandomBlockPrefixCache"):
        assert 0.0 < simulate_system_prompts(reference, cls_name) < 1.0


@pytest.mark.parametrize(
    ("name", "todo"),
    [
        ("acquire-takes-refs-before-the-capacity-check", "TODO 12"),
        ("acquire-counts-hit-blocks-as-reclaimable", "TODO 12"),
        ("acquire-allocates-partial-last-block", "TODO 12"),
        ("release-never-decrements-refcount", "TODO 13"),
        ("release-zeroes-shared-refcount", "TODO 13"),
    ],
)
def test_a_simulation_broken_by_a_wrong_todo_names_that_todo(name, todo):
    ns = namespace(mistake(name).edits)
    with pytest.raises(RuntimeError, match=todo) as caught:
        simulate_system_prompts(ns)
    assert "块池只有" not in str(caught.value)


# --- a part-three answer submitted in the layout before BlockPool became a locked cell ---------

BEFORE_SPLIT = Path(__file__).parent / "fixtures" / "block_cell_before_split.py"
BLOCK_CELLS = ("block_pool_given", "block_prefix_cache")


def test_an_answer_in_the_layout_before_the_split_still_grades_in_full():
    """Until BlockPool moved into a locked cell ("block_pool_given"), the answer cell held the whole
    class. Such a notebook, normalised against today's release, gets the given cell back in front of
    its own, keeps its own class (which defines everything again), and earns every TODO 11-14 point."""
    release = read_nb(STUDENT_NOTEBOOK)
    submitted = copy.deepcopy(release)
    submitted.cells = [c for c in submitted.cells if c.get("id") != "block_pool_given"]
    answer = next(c for c in submitted.cells if nbgrader_meta(c).get("grade_id") == BLOCK_CELLS[1])
    answer.source = BEFORE_SPLIT.read_text(encoding="utf-8")
    normalized = normalize_submission(nbformat.writes(submitted).encode(), release).notebook
    ids = [nbgrader_meta(c).get("grade_id") for c in normalized.cells]
    assert ids.index(BLOCK_CELLS[0]) + 1 == ids.index(BLOCK_CELLS[1]), (
        "the given cell is not back in place"
    )
    cells = {nbgrader_meta(c).get("grade_id"): c for c in normalized.cells}
    assert cells[BLOCK_CELLS[1]].source == answer.source, "the learner's class was not kept"
    ns = {"__name__": "__main__"}
    for grade_id in BLOCK_CELLS:
        exec(compile(cells[grade_id].source, f"<{grade_id}>", "exec"), ns)
    assert ns["BlockPrefixCache"].__mro__[1] is object, "the old class should stand alone"
    block_ids = {grade_id for todo, grade_id, _, _, _ in CELLS if todo in range(11, 15)}
    lost = {
        grade_id: message for grade_id, message in failures(ns).items() if grade_id in block_ids
    }
    assert not lost, lost
