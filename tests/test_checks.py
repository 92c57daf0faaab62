"""The hidden checks as plain Python: every check file against the reference and each mistake.

No nbgrader here: each `checks/todo<N>.py` runs as its grade cell runs it (its own scope, the
notebook's namespace as argument), so a check that fails on the reference or misses a
catalogued mistake shows up in seconds. `test_autograde.py` grades the same with real nbgrader.
"""

import ast
import copy
import io
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from grader.kit.authoring import checkcells, nbsource
from grader.kit.authoring.nbsource import (
    CHECKS_DIR,
    SourceError,
    load_checks,
    named_checks,
    nbgrader_meta,
    read_source,
    strip_solution_markers,
    todo_number,
)
from tests.conftest import (
    _REGION,
    ALL_TODOS,
    all_mistakes,
    batch_mistakes,
    tiered,
    todo_of_region,
)
from tests.fixtures.mistakes_core import MISTAKES as CORE
from tests.fixtures.mistakes_engine import MISTAKES as ENGINE
from tests.fixtures.mistakes_sched import MISTAKES as SCHED

MISTAKES = all_mistakes()
CORE_NAMES = {m.name for m in CORE}
# Catalogues whose correct-in-another-style entries (no `loses`) run here too.
NO_LOSS_NAMES = CORE_NAMES | {m.name for m in SCHED} | {m.name for m in ENGINE}
SOURCE = read_source()


def grade_cells():
    """(grade id, check file, check name) for every grade cell that names a check, in order."""
    found = []
    for cell in SOURCE.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type == "code" and meta.get("grade"):
            for filename, name in named_checks(cell.source):
                found.append((meta["grade_id"], filename, name))
    return found


CHECKED = grade_cells()
CONVERTED_TODOS = {grade_id.split("_")[1] for grade_id, _, _ in CHECKED}


def run_code_cells(edits=(), last_todo=None):
    """Run the reference's code cells (grade, measurement and learner-only cells left out, as the
    grading course blanks them) with `edits` applied.

    With `last_todo`, stop at the first grade cell of a later TODO (the core's mistakes need
    no torch model). Returns the namespace and the grade ids of the cells that raised or printed
    a ❌ line: a visible test cell that does either has caught the mistake. Each edit's old text must occur once.
    """
    nb = copy.deepcopy(SOURCE)
    cells = []
    for c in nb.cells:
        meta = nbgrader_meta(c)
        if last_todo and meta.get("grade") and (todo_number(meta["grade_id"]) or 0) > last_todo:
            break
        if c.cell_type == "code" and not meta.get("grade"):
            # what the grading course runs: measurements and learner-only demos are blanked there
            if not {"measurement", "learner-only"} & set(c.metadata.get("tags", [])):
                cells.append(c)
    for cell in cells:
        cell.source = strip_solution_markers(cell.source)
    for old, new in edits:
        places = [c for c in cells if nbgrader_meta(c).get("solution") and old in c.source]
        assert sum(c.source.count(old) for c in places) == 1, f"edit {old!r} must match once"
        places[0].source = places[0].source.replace(old, new)
    namespace, raised = {"__name__": "__main__"}, []
    for cell in cells:
        code = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith("%"))
        printed = io.StringIO()
        try:
            with redirect_stdout(printed):
                exec(compile(code, "<cell>", "exec"), namespace)
        except Exception:
            raised.append(nbgrader_meta(cell).get("grade_id", ""))
        else:
            # part three's visible cell (optional) reports a failure as ❌ lines without raising
            if any(line.startswith("❌") for line in printed.getvalue().splitlines()):
                raised.append(nbgrader_meta(cell).get("grade_id", ""))
    return namespace, raised


def failures(namespace, last_todo=None):
    """{grade id: message} for every check that fails on `namespace`, in notebook order.

    With `last_todo`, only the checks of TODOs up to it (the namespace holds no later code).
    """
    checks = {filename: load_checks(filename) for filename in {f for _, f, _ in CHECKED}}
    failed = {}
    for grade_id, filename, name in CHECKED:
        if last_todo and todo_number(grade_id) > last_todo:
            continue
        try:
            checks[filename][name](namespace)
        except Exception as error:  # noqa: BLE001  (a check may end in any error; all count)
            failed[grade_id] = f"{type(error).__name__}: {error}"
    return failed


@pytest.fixture(scope="module")
def reference():
    return run_code_cells()


def test_every_check_passes_on_the_reference(reference):
    namespace, raised = reference
    assert raised == [], f"reference cells raised: {raised}"
    assert CHECKED, "no grade cell names a check"
    assert failures(namespace) == {}


def test_every_grade_cell_names_exactly_one_check_of_its_own_todo():
    for cell in SOURCE.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        named = named_checks(cell.source)
        todo = meta["grade_id"].split("_")[1]
        if todo not in CONVERTED_TODOS:
            continue
        assert len(named) == 1, f"{meta['grade_id']} names {named}"
        filename, name = named[0]
        # one naming scheme: grade cell test_todo<N>_<check> runs check_todo<N>_<check>, from the
        # TODO's file (todo<N>.py) or its part's (sched.py, engine.py)
        assert name == "check_" + meta["grade_id"].removeprefix("test_"), (
            f"{meta['grade_id']} names {filename}::{name}"
        )
        assert filename in (f"{todo}.py", "sched.py", "engine.py"), (
            f"{meta['grade_id']} names {filename}"
        )


def unfinished_edits(todo: int) -> list[tuple[str, str]]:
    """Edits that leave TODO `todo` as the release has it: each of its solution regions becomes
    `raise NotImplementedError()`."""
    edits = []
    for cell in SOURCE.cells:
        if not nbgrader_meta(cell).get("solution"):
            continue
        for match in _REGION.finditer(cell.source):
            if todo_of_region(cell, cell.source[: match.start()]) == todo:
                code = strip_solution_markers(match.group(0))
                edits.append((code, f"{match.group(1)}raise NotImplementedError()\n"))
    assert edits, f"no solution region answers TODO {todo}"
    return edits


@pytest.mark.parametrize("todo", ALL_TODOS)
def test_an_unfinished_todo_loses_exactly_its_own_checks_each_saying_to_finish_it(todo):
    """What the batch's packed unfinished notebooks rest on (UNFINISHED_PACKS): one TODO left
    unfinished costs its own checks and no other, and each of them says which TODO to finish."""
    last_todo = 8 if todo <= 8 else None  # part one's checks need no torch model
    namespace, _ = run_code_cells(unfinished_edits(todo), last_todo)
    failed = failures(namespace, last_todo)
    own = {grade_id for grade_id, _, _ in CHECKED if todo_number(grade_id) == todo}
    assert set(failed) == own, f"TODO {todo} unfinished: {sorted(failed)}"
    unclear = {g: m for g, m in failed.items() if f"TODO {todo}" not in m}
    assert unclear == {}, f"messages that do not name TODO {todo}: {unclear}"


def converted(mistake):
    """Whether the mistake's checks live in check files (a TODO not yet split still has one cell)."""
    return all(grade_id.split("_")[1] in CONVERTED_TODOS for grade_id in mistake.loses) and (
        mistake.loses or mistake.name in NO_LOSS_NAMES
    )


@pytest.mark.parametrize("mistake", tiered(MISTAKES))
def test_mistake_fails_exactly_its_checks_and_names_the_cause_first(mistake):
    if not converted(mistake):
        pytest.skip("its TODO's checks are not split into check files yet")
    last_todo = max(
        (todo_number(g) for g in mistake.loses), default=8 if mistake.name in CORE_NAMES else None
    )
    namespace, raised = run_code_cells(mistake.edits, last_todo)
    failed = failures(namespace, last_todo)
    assert set(failed) == set(mistake.loses), f"failed {sorted(failed)}: {failed}"
    first = next(iter(failed.values()), "")
    for word in mistake.cause:
        assert word in first, f"first message lacks {word!r}: {first}"
    caught = any(grade_id.startswith("visible") for grade_id in raised)
    assert caught == mistake.visible, f"visible cells raised: {raised}"


def test_the_code_each_grade_cell_runs_defines_every_name_it_uses():
    """A check file alone uses names of _common.py and its part's helpers (ruff ignores F821
    there, pyproject.toml): lint the code as a grade cell runs it, joined (checkcells.check_code).
    A check file may import what its part's helpers import too (F811)."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip(f"no ruff next to {sys.executable}")
    for _, filename, name in CHECKED:
        run = subprocess.run(
            [str(ruff), "check", "--select", "F", "--ignore", "F811", "--output-format", "concise"]
            + ["--stdin-filename", f"{name}.py", "-"],
            input=checkcells.check_code(filename, name),
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, f"{filename}::{name} as its grade cell runs it: {run.stdout}"


def repeated_runs(texts: dict, run: int = 6) -> list:
    """[(first place, second place)] where `run` consecutive non-blank lines (stripped) of the
    texts ({name: text}) repeat; a place is (name, line number)."""
    seen, found = {}, []
    for name, text in texts.items():
        lines = [(n, ln.strip()) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        for i in range(len(lines) - run + 1):
            key = tuple(ln for _, ln in lines[i : i + run])
            place = (name, lines[i][0])
            if key in seen:
                found.append((seen[key], place))
            else:
                seen[key] = place
    return found


def test_no_six_lines_repeat_in_the_check_files():
    texts = {
        path.name: path.read_text(encoding="utf-8") for path in sorted(CHECKS_DIR.glob("*.py"))
    }
    assert len(texts) > 15
    assert repeated_runs(texts) == [], "a helper written twice: move it to _common.py or _<part>.py"


def test_the_repeat_finder_finds_a_repeat_across_files_and_within_one():
    block = "".join(f"    x{i} = {i}\n" for i in range(6))
    texts = {"a.py": f"def f():\n{block}", "b.py": f"def g():\n\n{block}\n{block}"}
    assert repeated_runs(texts) == [(("a.py", 2), ("b.py", 3)), (("a.py", 2), ("b.py", 10))]
    assert repeated_runs({"a.py": f"def f():\n{block[:-12]}"}) == []


GOOD = """TOTAL_POINTS = {3: 5}


@check(points=2, title="甲", says="第一项")
def check_todo3_first(ns):
    pass


@check(points=3, title="乙", says="第二项")
def check_todo3_second(ns):
    pass
"""


@pytest.fixture
def checks_dir(tmp_path, monkeypatch):
    """An empty checks folder in place of the source's."""
    monkeypatch.setattr(nbsource, "CHECKS_DIR", tmp_path)
    monkeypatch.setattr(checkcells, "CHECKS_DIR", tmp_path)
    (tmp_path / "_common.py").write_text(
        "def check(points, title, says):\n    return lambda f: f\n"
    )
    (tmp_path / "_timebox.py").write_text("BOX_SECONDS = 4\n")
    return tmp_path


def test_a_declaration_becomes_one_grade_cell_in_file_order(checks_dir):
    (checks_dir / "todo3.py").write_text(GOOD)
    heading, *cells = checkcells.grade_cells(
        nbsource.nbformat.v4.new_code_cell("#| checks: todo3.py")
    )
    # one collapsed heading over the grade cells, then a cell per check that opens folded
    assert heading.cell_type == "markdown" and heading.source.startswith(checkcells.GRADE_HEADING)
    assert heading.metadata == {checkcells.HEADING_COLLAPSED: True}
    assert "TODO 3 的 2 个评分单元格（共 5 分）" in heading.source
    assert [c.metadata.nbgrader["grade_id"] for c in cells] == [
        "test_todo3_first",
        "test_todo3_second",
    ]
    assert [c.metadata.nbgrader["points"] for c in cells] == [2, 3]
    assert cells[0].source.splitlines() == [
        "#@title TODO 3 · 甲（2 分）：第一项",
        "### BEGIN HIDDEN TESTS",
        "#| check: todo3.py::check_todo3_first",
        "### END HIDDEN TESTS",
    ]
    assert "check_todo3_second" in load_checks("todo3.py")


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("points=3", "points=4", "give 6 points, TOTAL_POINTS says 5"),
        ("check_todo3_second", "check_todo3_first", "defined more than once"),
        ('@check(points=3, title="乙", says="第二项")\n', "", "has no @check"),
        ('title="乙"', "title=TITLE", "must be literals"),
        ('says="第二项"', 'says=""', "one non-empty line"),
        ("points=3", "points=3, hidden=True", "takes exactly"),
        ("check_todo3_second", "check_todo4_second", "TODO 4 is not in TOTAL_POINTS"),
        ("check_todo3_second", "check_second", "named check_todo<N>_<name>"),
        ("TOTAL_POINTS = {3: 5}", "TOTAL = 5", "no TOTAL_POINTS"),
        ("    pass\n", "    return 1 if x else ''''''\n", "holds"),
    ],
)
def test_a_malformed_declaration_is_a_source_error(checks_dir, old, new, says):
    assert old in GOOD
    (checks_dir / "todo3.py").write_text(GOOD.replace(old, new, 1))
    with pytest.raises(SourceError, match=says):
        checkcells.declarations("todo3.py")
        checkcells.check_code("todo3.py")


PRUNED = """import random
import torch

TOTAL_POINTS = {3: 5}
UNDER_TEST = "f"


# the oracle the first check compares with
def _oracle(x):
    return _double(x)


def _double(x):
    return 2 * x


def _unrelated():
    return torch.zeros(1)


_registry = []
_registry.append(_oracle)


@check(points=2, title="甲", says="第一项")
def check_todo3_first(ns):
    assert ns["f"](random.random()) == _oracle(1)


@check(points=3, title="乙", says="第二项")
def check_todo3_second(ns):
    assert _unrelated() is not None
"""


def test_a_grade_cell_carries_only_the_helpers_its_check_reaches(checks_dir):
    (checks_dir / "todo3.py").write_text(PRUNED)
    first = checkcells.check_code("todo3.py", "check_todo3_first")
    for needed in ("import random", "def _oracle", "# the oracle", "def _double", "def check("):
        assert needed in first
    # what only the other check uses stays out; a statement that binds nothing stays in
    assert "import torch" not in first and "def _unrelated" not in first
    assert "_registry.append(_oracle)" in first and "_registry = []" in first
    assert "def check_todo3_second" not in first
    second = checkcells.check_code("todo3.py", "check_todo3_second")
    assert "import torch" in second and "import random" not in second
    # a statement that binds nothing runs in every cell, and so does what it reads
    assert "_registry.append(_oracle)" in second and "def _double" in second
    assert set(load_checks("todo3.py")) == {"check_todo3_first", "check_todo3_second"}


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("return 2 * x", "return _tripled(x)", "reads _tripled, which nothing defines"),
        ("def check_todo3_second", "def check_todo3_third", "names todo3.py::check_todo3_second"),
    ],
)
def test_a_check_whose_code_cannot_run_alone_is_a_source_error(checks_dir, old, new, says):
    (checks_dir / "todo3.py").write_text(PRUNED.replace(old, new, 1))
    with pytest.raises(SourceError, match=says):
        checkcells.check_code("todo3.py", "check_todo3_first")
        checkcells.check_code("todo3.py", "check_todo3_second")


def test_no_function_of_the_source_or_its_checks_runs_past_80_lines():
    long = []
    for path in sorted(nbsource.SOURCE_PATH.parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - first + 1 > 80:
                    long.append(f"{path.name}:{node.lineno} {node.name}")
    assert long == [], f"split these: {long}"


def test_mistakes_share_a_real_batch_notebook_only_when_the_grader_can_tell_them_apart():
    """The packs `test_autograde.py` grades for real (`tests/fixtures/packing.py`): every
    mistake in exactly one; within one, no two touch the same TODO, all agree on `visible`, and
    their edits apply together. A mistake that touches a TODO of another's is never packed
    with it, so a leak between them shows as a wrong union."""
    import nbformat

    from grader.kit.authoring.examples import filled_submission
    from grader.kit.paths import NOTEBOOK_NAME
    from tests.conftest import REPO_ROOT, mistake_packs, todos_of_edit
    from tests.fixtures.packing import todos_of

    release = nbformat.read(REPO_ROOT / "notebooks" / NOTEBOOK_NAME, as_version=4)
    solutions = nbformat.read(REPO_ROOT / "solutions" / NOTEBOOK_NAME, as_version=4)
    packs, todos = mistake_packs(release, solutions), todos_of_edit(solutions)
    names = [m.name for pack in packs for m in pack.mistakes]
    assert sorted(names) == sorted(m.name for m in batch_mistakes())
    for pack in packs:
        assert len({m.visible for m in pack.mistakes}) == 1, pack.name
        touched = [todos_of(m, todos) for m in pack.mistakes]
        assert sum(map(len, touched)) == len(set().union(*touched)), pack.name
        filled_submission(release, solutions, pack.edits)  # raises if they do not apply together
    # The core cell holds TODOs 1-8: an edit in one of its methods is that method's TODO.
    assert todos("normalized = list(tokens)") == {1}
    assert todos("chunks = [tuple(") == {2}


def lost_by(edits) -> dict:
    """{grade id: message} of the grade cells the reference with `edits` fails, in process."""
    namespace, _ = run_code_cells(edits)
    return failures(namespace)


def assert_a_fresh_mistake_loses_on_its_own_todo_only(entry) -> None:
    """A blind set's mistake (a dict with `todo`, `edits`, `why`; no `loses`, as it was written
    without reading the checks): some grade cell fails, and each failing one is its TODO's."""
    failed = lost_by(entry["edits"])
    assert failed, f"TODO {entry['todo']}: no grade cell lost points ({entry['why']})"
    elsewhere = {g: text for g, text in failed.items() if todo_number(g) != entry["todo"]}
    assert not elsewhere, f"TODO {entry['todo']}'s mistake loses points on other TODOs: {elsewhere}"
