"""What the visible checks tell a learner: the right TODO named first, every TODO's state shown.

For every catalogued mistake that the visible cells catch (`visible=True`), the first failure a
learner reads (a ❌ or ⏳ line, or the raised error when nothing was printed) must name the TODO
the mistake is in, and no other TODO before it. Runs the reference's code cells with the edits,
as `test_checks.py` does, but keeps what each visible cell printed.
"""

import ast
import copy
import io
import re
import subprocess
import sys
from contextlib import redirect_stdout

import pytest

from grader.kit.authoring.nbsource import (
    nbgrader_meta,
    read_source,
    strip_solution_markers,
    todo_number,
)
from tests.conftest import all_mistakes, tiered

SOURCE = read_source()
VISIBLE = [m for m in all_mistakes() if m.visible]


def cells_until(last_todo=None, keep_measurements=False):
    """The reference's code cells (no grade cells), stopping before the grade cells of later TODOs."""
    cells = []
    for cell in copy.deepcopy(SOURCE).cells:
        meta = nbgrader_meta(cell)
        if last_todo and meta.get("grade") and (todo_number(meta["grade_id"]) or 0) > last_todo:
            break
        if cell.cell_type != "code" or meta.get("grade"):
            continue
        if "measurement" in cell.metadata.get("tags", []) and not keep_measurements:
            continue
        cell.source = strip_solution_markers(cell.source)
        cells.append(cell)
    return cells


def run_cells(edits=(), last_todo=None, keep_measurements=False, stop_after=None):
    """Run the cells with `edits`; returns [(grade id, printed text, error or None)] per cell."""
    cells = cells_until(last_todo, keep_measurements)
    for old, new in edits:
        places = [c for c in cells if nbgrader_meta(c).get("solution") and old in c.source]
        assert sum(c.source.count(old) for c in places) == 1, f"edit {old!r} must match once"
        places[0].source = places[0].source.replace(old, new)
    namespace, ran = {"__name__": "__main__"}, []
    for cell in cells:
        grade_id = nbgrader_meta(cell).get("grade_id", "")
        out, error = io.StringIO(), None
        try:
            with redirect_stdout(out):
                exec(compile(cell.source, "<cell>", "exec"), namespace)
        except Exception as raised:  # noqa: BLE001  (a visible cell may end in any error)
            error = raised
        ran.append((grade_id, out.getvalue(), error))
        if grade_id == stop_after:
            break
    return ran


def first_failure(ran):
    """The first thing a learner reads as a failure in the visible cells, with the cell's id."""
    for grade_id, printed, error in ran:
        if not grade_id.startswith("visible"):
            continue
        lines = [ln for ln in printed.splitlines() if ln.startswith(("❌", "⏳"))]
        if lines:
            return grade_id, lines[0]
        if error is not None:
            return grade_id, f"{type(error).__name__}: {error}"
    return None, ""


def todo_of(mistake):
    return min(todo_number(grade_id) for grade_id in mistake.loses) if mistake.loses else None


@pytest.mark.parametrize("mistake", tiered(VISIBLE))
def test_visible_cells_name_the_mistakes_todo_first(mistake):
    todo = todo_of(mistake)
    if todo is None:
        pytest.skip("a correct variant: nothing to name")
    ran = run_cells(mistake.edits, last_todo=max(todo_number(g) for g in mistake.loses))
    cell, message = first_failure(ran)
    assert cell is not None, "no visible cell failed"
    named = re.findall(r"TODO (\d+)", message)
    assert named and int(named[0]) == todo, f"{cell}: the first failure names {named}: {message}"
    assert not [n for n in named if int(n) < todo], f"an earlier TODO is named: {message}"


def test_a_later_todo_skipped_for_an_earlier_todos_error_names_the_todo_at_fault():
    """TODO 21 caching blocks not yet computed fails inside TODO 22's check: TODO 21's line says so,
    and TODO 24's line, skipped because TODO 22's check failed, names TODO 21, not TODO 22."""
    cache = "        self.cache_blocks(request, min(num_computed_tokens + num_new_tokens, request.num_tokens))\n"
    ran = run_cells(
        [(cache, "        self.cache_blocks(request, request.num_tokens)\n")],
        stop_after="visible_todo20_24",
    )
    printed = next(text for grade_id, text, _ in ran if grade_id == "visible_todo20_24")
    lines = {
        line.split("：")[0].split()[-1]: line
        for line in printed.splitlines()
        if "TODO" in line[:12]
    }
    assert lines["21"].startswith("❌") and "TODO 22 的检查里" in lines["21"], printed
    assert "出错的是 TODO 21 的代码" in lines["24"], printed


def test_part_one_reports_every_todo_even_when_todo_2_fails():
    edit = (
        "[tuple(tokens[i : i + self.block_size]) for i in range(0, len(tokens), self.block_size)]",
        "[tuple(tokens[i : i + 4]) for i in range(0, len(tokens), 4)]",
    )
    ran = run_cells((edit,), last_todo=8)
    printed, error = next((p, e) for g, p, e in ran if g == "visible_tests")
    assert isinstance(error, AssertionError) and str(error).startswith("TODO 2: ")
    for n in (1, 4, 5, 7):
        assert f"✅ TODO {n} 的可见检查通过" in printed, printed
    for n in (3, 6, 8):  # they use _chunk_tokens: skipped and said so, not failed in TODO 2's place
        assert f"⚠️ TODO {n}：跳过可见检查——它用到 TODO 2（_chunk_tokens）" in printed, printed
    assert [ln[:8] for ln in printed.splitlines() if ln.startswith("❌")] == ["❌ TODO 2"], printed


def test_todo_10_full_hit_mistake_is_told_about_the_full_hit_not_todo_9():
    edit = ("hit_len = min(match_len, len(tokens) - 1)", "hit_len = match_len")
    ran = run_cells((edit,), last_todo=10)
    _, message = first_failure(ran)
    assert message.startswith("❌ TODO 10: ") and "len(prompt) - 1" in message, message
    assert "TODO 9" not in message


def test_todo_9_without_return_is_told_it_returned_none():
    edit = (
        "    return torch.cat(chunk_logits, dim=0), past_kv",
        "    torch.cat(chunk_logits, dim=0), past_kv",
    )
    _, message = first_failure(run_cells((edit,), last_todo=9))
    assert "NoneType" in message and "return" in message and "cannot unpack" not in message, message


def test_part_three_visible_checks_run_without_torch():
    """The part-three check cell (and its runner) on a Python where `import torch` fails."""
    wanted = {
        "check_time_box",
        "kv_visible_runner",
        "block_pool_given",
        "block_prefix_cache",
        "visible_todo11_14",
    }
    cells = [c.source for c in cells_until() if nbgrader_meta(c).get("grade_id") in wanted]
    assert len(cells) == len(wanted)
    code = "import sys\nsys.modules['torch'] = None\n" + "\n\n".join(cells)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("的可见检查通过") == 4, run.stdout


def test_every_core_skeleton_ends_with_its_return():
    """TODO 1-8: the release keeps each method's `return <name>` after the stub (TODO 3 returns None)."""
    cell = next(
        c for c in SOURCE.cells if nbgrader_meta(c).get("grade_id") == "prefix_cache_manager"
    )
    for todo in (1, 2, 4, 5, 6, 7, 8):
        body = cell.source.split(f"# TODO {todo}:")[1].split("    def ")[0]
        after = body.split("### END SOLUTION")[1]
        assert re.search(r"^        return \S", after, re.M), (
            f"TODO {todo}: no return after the solution"
        )


# --- each visible cell lists its TODOs once, in order, and every message names its TODO --------

_TODO_ENTRY = re.compile(r"TODO (\d+)")
_CHECK_FUNCTION = re.compile(r"check_todo(\d+)")


def visible_cells():
    """The source's visible check cells, in notebook order."""
    return [c for c in SOURCE.cells if nbgrader_meta(c).get("grade_id", "").startswith("visible")]


def listed_todos(tree) -> list[int]:
    """The TODO numbers of every `("TODO N", check, ...)` entry (a check function named second)
    of a list or tuple literal in `tree`, in source order: the order a runner goes through them
    and prints a line for each."""
    entries = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            for element in node.elts:
                if not (isinstance(element, ast.Tuple) and len(element.elts) >= 2):
                    continue
                head, check = element.elts[:2]
                if isinstance(head, ast.Constant) and isinstance(check, ast.Name):
                    match = _TODO_ENTRY.fullmatch(str(head.value))
                    if match:
                        where = (element.lineno, element.col_offset)
                        entries.append((where, int(match.group(1))))
    return [number for _, number in sorted(entries)]


def message_heads(message, function) -> list[str]:
    """How a check's failure message can start: its leading text, or, where it opens with
    `{where}`, each string that `function` assigns to `where`."""
    if isinstance(message, ast.BinOp):  # "..." + (...)
        return message_heads(message.left, function)
    if isinstance(message, ast.Constant):
        return [str(message.value)]
    if isinstance(message, ast.JoinedStr) and message.values:
        first = message.values[0]
        if isinstance(first, ast.Constant):
            return [first.value]
        if isinstance(first, ast.FormattedValue) and isinstance(first.value, ast.Name):
            name = first.value.id
            return [
                node.value.value
                for node in ast.walk(function)
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Constant)
            ] or [f"{{{name}}}"]
    return [ast.unparse(message)]


def failure_messages(function):
    """Each assert message and each `raise AssertionError(...)` argument in `function`."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            yield node.lineno, node.msg
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            if getattr(node.exc.func, "id", "") == "AssertionError" and node.exc.args:
                yield node.lineno, node.exc.args[0]


def test_every_visible_cell_runs_its_todos_once_each_in_order_and_together_all_of_them():
    everywhere = []
    for cell in visible_cells():
        todos = listed_todos(ast.parse(cell.source))
        cell_id = nbgrader_meta(cell)["grade_id"]
        assert todos, f'{cell_id}: no ("TODO N", check) list'
        assert todos == sorted(set(todos)), f"{cell_id}: the TODOs run in the order {todos}"
        everywhere += todos
    assert everywhere == list(range(1, len(everywhere) + 1)), everywhere


def test_every_message_of_a_visible_check_names_its_own_todo():
    checked = 0
    for cell in visible_cells():
        for function in ast.walk(ast.parse(cell.source)):
            named = isinstance(function, ast.FunctionDef) and _CHECK_FUNCTION.search(function.name)
            if not named:
                continue
            own = f"TODO {named.group(1)}"
            for lineno, message in failure_messages(function):
                assert message is not None, f"{function.name} line {lineno}: no message"
                for head in message_heads(message, function):
                    checked += 1
                    assert re.match(rf"{own}\b(?! *[–-])", head), (
                        f"{function.name} line {lineno}: the message starts {head[:40]!r}, "
                        f"not {own!r}"
                    )
    assert checked >= 60, f"only {checked} messages found: the walk misses the checks"


def test_the_numbering_check_finds_a_todo_listed_twice_or_out_of_order():
    twice = 'CHECKS = [("TODO 1", a, ()), ("TODO 6", b, ()), ("TODO 8", c, ()), ("TODO 6", d, ())]'
    assert listed_todos(ast.parse(twice)) == [1, 6, 8, 6]
    wrong = ast.parse('def check_todo7():\n    assert x, f"TODO 6: got {x}"').body[0]
    heads = [h for _, m in failure_messages(wrong) for h in message_heads(m, wrong)]
    assert heads == ["TODO 6: got "]


# --- the measurement cells check their inputs, pin their threads and show their spread ----------

RELAY = (
    "model(chunk, past_kv=past_kv)",
    "model(chunk)",
)  # TODO 9 restarts every chunk at position 0


@pytest.mark.parametrize("cell_id", ["kv_measure_speedup", "kv_measure_memory"])
def test_measurement_cell_names_todo_9_for_a_broken_relay(cell_id):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(
        3
    )  # not the 1 the cell times with, so a cell that forgets to restore shows
    try:
        ran = run_cells((RELAY,), last_todo=10, keep_measurements=True, stop_after=cell_id)
        assert torch.get_num_threads() == 3, "the cell left torch's thread count changed"
    finally:
        torch.set_num_threads(threads)
    grade_id, printed, error = ran[-1]
    assert grade_id == cell_id and isinstance(error, RuntimeError), (grade_id, printed, error)
    assert "TODO 9" in str(error) and "TODO 10" not in str(error), str(error)
    assert "0.5" not in printed and printed == "", printed  # no table of wrong ratios


def test_measurement_cell_names_todo_10_for_a_prefill_that_recomputes_the_prefix():
    edit = (
        "logits, past_kv = chunked_prefill(self.model, tokens[hit_len:], self.block_size, past_kv=past_kv)",
        "logits, past_kv = chunked_prefill(self.model, tokens, self.block_size)",
    )
    ran = run_cells((edit,), last_todo=10, keep_measurements=True, stop_after="kv_measure_speedup")
    _, _, error = ran[-1]
    assert isinstance(error, RuntimeError) and "TODO 10" in str(error), error


@pytest.fixture(scope="module")
def reference_ns():
    """The reference's cells up to TODO 10, run once (no measurement cells)."""
    namespace = {"__name__": "__main__"}
    for cell in cells_until(last_todo=10):
        with redirect_stdout(io.StringIO()):
            exec(compile(cell.source, "<cell>", "exec"), namespace)
    return namespace


def test_speedup_rows_show_their_spread_and_the_h0_row_is_the_noise_floor(reference_ns):
    import torch

    ns = reference_ns
    model = ns["TinyCausalLM"](
        ns["TinyConfig"](d_model=32, n_layers=1, n_heads=2, max_positions=128), seed=0
    )
    torch.set_num_threads(1)
    rows = ns["measure_cached_speedup"](
        model, num_tokens=96, hit_ratios=(0, 0.75), block_size=16, repeats=5
    )
    for row in rows:
        assert row["spread_lo"] <= row["measured"] <= row["spread_hi"], row
    noise, hit = rows
    assert (
        noise["hit_len"] == 0 and abs(noise["model"] - 1.0) < 1e-12
    )  # the same work on both sides
    assert hit["hit_len"] == 72 and hit["model"] > 1
    verdicts = ns["speedup_verdicts"](rows)
    assert len(verdicts) == 1 and verdicts[0].startswith("h = 0.75：实测 ")
    assert any(w in verdicts[0] for w in ("之内", "比模型慢", "比模型快", "不能下结论"))
    table = ns["format_table"](rows, ns["SPEEDUP_COLUMNS"])
    assert "各轮最小" in table and "各轮最大" in table


def test_speedup_verdicts_judge_against_the_rows_range():
    """The verdict follows where the model falls relative to the measured min-max, nothing else."""
    ns = {"__name__": "__main__"}
    for cell in cells_until(last_todo=10):  # the imports, the model and the measuring helpers only
        if nbgrader_meta(cell).get("grade_id") in {
            "kv_imports",
            "kv_tiny_model",
            "kv_measure_helpers",
        }:
            exec(compile(cell.source, "<cell>", "exec"), ns)

    def row(h, lo, mid, hi, model):
        return {
            "h": h,
            "hit_len": int(h * 100),
            "spread_lo": lo,
            "measured": mid,
            "spread_hi": hi,
            "model": model,
        }

    noise = row(0, 0.9, 1.0, 1.1, 1.0)
    inside, slower, faster = (
        ns["speedup_verdicts"]([noise, row(0.5, 1.5, 1.8, 2.1, 1.9)]),
        ns["speedup_verdicts"]([noise, row(0.5, 1.2, 1.3, 1.4, 1.9)]),
        ns["speedup_verdicts"]([noise, row(0.5, 2.0, 2.1, 2.2, 1.9)]),
    )
    assert "之内" in inside[0] and "比模型慢" in slower[0] and "比模型快" in faster[0]
    # A range that also holds "no speedup" (ratio 1), or spans more than a factor two, concludes
    # nothing, even with the model inside it (a busy CPU once gave 0.36-1.36 "consistent").
    for busy in (row(0.5, 0.36, 0.9, 1.36, 1.9), row(0.9, 1.1, 3.0, 5.0, 4.0)):
        (verdict,) = ns["speedup_verdicts"]([noise, busy])
        assert "噪声太大，不能下结论" in verdict and "之内" not in verdict, verdict


SCHEDULER_MISTAKES = [m for m in VISIBLE if m.loses and 15 <= todo_of(m) < 20]  # part four's


@pytest.mark.parametrize("mistake", SCHEDULER_MISTAKES, ids=[m.name for m in SCHEDULER_MISTAKES])
def test_the_end_to_end_demo_blames_the_mistakes_own_todo(mistake):
    """4.5's demo on the tiny model: when a part-four mistake makes it fail, its message names
    the mistake's TODO (the first whose visible check fails), not a guess such as TODO 17-18;
    a bare KeyError from the given schedule() never reaches the learner."""
    ran = run_cells(mistake.edits, stop_after="sched_end_to_end")
    grade_id, printed, error = ran[-1]
    assert grade_id == "sched_end_to_end"
    if error is None:
        assert "✅" in printed, printed
        return
    named = re.findall(r"TODO (\d+)", str(error))
    assert named and int(named[0]) == todo_of(mistake), f"{type(error).__name__}: {error}"
    assert not isinstance(error, KeyError), error
