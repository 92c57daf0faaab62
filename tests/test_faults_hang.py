"""A TODO that never returns costs its own checks and nothing else: the time box of every check.

The box itself (`checks/_timebox.py`) is tried here in process, as a grade cell runs it, on the
ways code fails to return; then one submission with such a TODO through the kit;
then the learner's side (the solutions notebook run with nbclient); then, in the heavy tier, the
whole catalogue of `tests/fixtures/faults_hang.py`, one fault a submission, through real nbgrader
and the sandbox. Elapsed-time bounds are generous ceilings (a hang would never meet them), never
a claim about speed.
"""

import shutil
import subprocess
import sys
import threading
import time

import nbformat
import pytest

from grader.kit.authoring.checkcells import check_code, time_boxes
from grader.kit.authoring.examples import filled_submission
from grader.kit.authoring.nbsource import (
    HIDDEN_CHECK_FILENAME,
    NOTEBOOK_NAME,
    check_file_text,
    nbgrader_meta,
    todo_number,
)
from grader.kit.grading.limits import Limits, derived_time_limits
from tests.conftest import autograde, lost_checks, read_nb
from tests.fixtures.faults_hang import CHEAP_HANG, FAULTS, KINDS, PLACES, TODO_CHECKS
from tests.test_adversarial import wait_for_no_process_with

BOX = 0.5  # the box of the in-process tries: short, the code it stops never returns anyway
CEILING = 30  # seconds that a box of BOX (and its escalation) stays far below, however busy
LEARNER_CELL = "/tmp/ipykernel_0/learner_cell.py"  # where a notebook's cell says it comes from
LEARNER_CODE = """
import time
def plain(budget):
    while budget > 0:
        pass
def torch_loop(budget):
    import torch
    x = torch.zeros(4)
    while x.sum() >= 0:
        x = x + 1
def long_sleep(budget):
    time.sleep(3600)
def helper():
    return 1
def catch_all(budget):
    while True:
        try:
            for _ in range(10**6):
                helper()
        except:  # noqa: E722
            pass
def catch_and_return(budget):
    try:
        while True:
            helper()
    except BaseException:
        return 0
def nested_catch_all(budget):
    while True:
        try:
            try:
                try:
                    for _ in range(10**6):
                        helper()
                except BaseException:
                    pass
            except BaseException:
                pass
        except BaseException:
            pass
def returns(budget):
    return budget
"""


def box_scope() -> dict:
    """The time box as a grade cell has it: its own scope, compiled as hidden check code."""
    scope = {"__name__": "hidden_check"}
    exec(compile(check_file_text("_timebox.py"), HIDDEN_CHECK_FILENAME, "exec"), scope)
    return scope


def learner_scope() -> dict:
    """Functions that a learner's cell defines, their source findable as a notebook's is."""
    import linecache

    scope = {"__name__": "__main__"}
    exec(compile(LEARNER_CODE, LEARNER_CELL, "exec"), scope)
    lines = LEARNER_CODE.splitlines(True)
    linecache.cache[LEARNER_CELL] = (len(LEARNER_CODE), None, lines, LEARNER_CELL)
    return scope


@pytest.fixture(scope="module")
def boxed():
    """run(name) -> (the CheckTimeout, or None if it returned; its message; seconds taken)."""
    import torch  # noqa: F401  (imported here: a box that ends inside torch's import breaks it)

    box, learner = box_scope(), learner_scope()

    def run(name):
        began = time.monotonic()
        try:
            box["run_boxed"](lambda: learner[name](10), BOX)
        except box["CheckTimeout"] as timeout:
            return timeout, box["timeout_text"](timeout), time.monotonic() - began
        return None, "", time.monotonic() - began

    return run


@pytest.mark.parametrize("name", ["plain", "torch_loop", "long_sleep"])
def test_code_that_never_returns_is_stopped_at_its_box_and_told_where(boxed, name):
    timeout, text, seconds = boxed(name)
    assert timeout is not None and seconds < CEILING
    assert f"{name}(budget=10)" in text and f"在 {BOX} 秒内没有返回" in text, text
    assert "停在" in text and not timeout.swallowed, text


def test_a_loop_that_catches_the_timeout_is_stopped_anyway_and_told_so(boxed):
    timeout, text, seconds = boxed("catch_all")
    assert timeout is not None and timeout.swallowed and seconds < CEILING
    assert "吞掉" in text and "except" in text, text


def test_code_that_swallows_the_timeout_and_returns_still_fails(boxed):
    timeout, text, _ = boxed("catch_and_return")
    assert timeout is not None and timeout.swallowed, text


def test_code_that_returns_in_time_keeps_its_result_and_leaves_nothing_armed():
    import signal

    box, learner = box_scope(), learner_scope()
    assert box["run_boxed"](lambda: learner["returns"](7), BOX) == 7
    time.sleep(2 * BOX)  # an alarm left armed would go off here
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_previous_alarm_handler_timer_and_trace_are_restored(boxed):
    import signal

    def mine(signum, frame):
        pass

    def tracer(frame, event, arg):
        return None

    signal.signal(signal.SIGALRM, mine)
    signal.setitimer(signal.ITIMER_REAL, 600)
    sys.settrace(tracer)
    try:
        timeout, _, _ = boxed("catch_all")  # the trace escalation was used
        assert timeout.swallowed
        assert sys.gettrace() is tracer and signal.getsignal(signal.SIGALRM) is mine
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 600
    finally:
        sys.settrace(None)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_a_box_inside_a_box_leaves_the_outer_one_in_charge():
    box, learner = box_scope(), learner_scope()
    inner = lambda: box["run_boxed"](lambda: learner["plain"](10), 3600)  # noqa: E731
    began = time.monotonic()
    with pytest.raises(box["CheckTimeout"]):
        box["run_boxed"](inner, BOX)
    assert time.monotonic() - began < CEILING


def test_off_the_main_thread_the_code_runs_unboxed_and_silently(capsys):
    box, learner = box_scope(), learner_scope()
    results = []
    worker = threading.Thread(
        target=lambda: results.append(box["run_boxed"](lambda: learner["returns"](3), BOX))
    )
    worker.start()
    worker.join()
    assert results == [3] and capsys.readouterr() == ("", "")


def test_code_that_defeats_every_escalation_ends_the_kernel_with_the_marked_status():
    """Three catch-alls deep, the loop's own jump inside all of them: only ending the process
    stops it. The last words go to stdout (a grade cell's output), nothing to stderr."""
    program = "\n".join(
        (
            "import sys",
            f"sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parents[1])!r})",
            "from tests.test_faults_hang import box_scope, learner_scope",
            "box, learner = box_scope(), learner_scope()",
            "last = lambda timeout: 'LAST WORDS ' + box['timeout_text'](timeout)",
            f"box['run_boxed'](lambda: learner['nested_catch_all'](10), {BOX}, last)",
            "print('not reached')",
        )
    )
    began = time.monotonic()
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    status = box_scope()["EXIT_STATUS"]
    assert run.returncode == status, (run.returncode, run.stdout, run.stderr)
    assert run.stdout.startswith("LAST WORDS ") and "吞掉" in run.stdout and run.stderr == ""
    assert time.monotonic() - began < 60


def test_a_hidden_check_names_its_todo_the_input_and_the_line_when_it_runs_out(monkeypatch):
    """The real check cell code (`check_code`) on the reference with TODO 17 replaced by an
    endless loop: it fails with an AssertionError, the way every failing check fails."""
    from grader.kit.authoring.nbsource import solution_namespace

    namespace = solution_namespace()
    loop = "def _schedule_running(self, out, token_budget):\n    while token_budget > 0:\n        pass\n"
    exec(compile(loop, LEARNER_CELL, "exec"), learned := {})
    monkeypatch.setattr(namespace["Scheduler"], "_schedule_running", learned["_schedule_running"])
    code = check_code("sched.py", "check_todo17_budget")
    scope = {"__name__": "hidden_check"}  # as its grade cell runs it, with a box of BOX seconds
    exec(compile(code.replace("BOX_SECONDS = 4", f"BOX_SECONDS = {BOX}"), HIDDEN_CHECK_FILENAME, "exec"), scope)
    check = scope["check_todo17_budget"]
    began = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        check(namespace)
    assert time.monotonic() - began < 60
    message = str(failed.value)
    assert message.startswith("TODO 17 · ") and "_schedule_running(out=<SchedulerOutput>" in message
    assert "秒内没有返回" in message and "while" in message, message


def test_the_grader_limits_are_derived_from_the_time_boxes():
    cell, notebook = derived_time_limits(time_boxes())
    assert (Limits.cell_timeout_s, Limits.notebook_timeout_s) == (cell, notebook), (
        f"write cell_timeout_s = {cell} and notebook_timeout_s = {notebook} in grading/limits.py"
    )
    # Every box of the notebook fits in the notebook limit, the longest cell's in the cell limit.
    assert time_boxes().total < notebook and time_boxes().longest_cell < cell


def test_the_catalogue_puts_every_kind_in_every_part_and_each_loses_its_whole_todo():
    assert {kind for places in PLACES.values() for kind in places} == set(KINDS)
    assert all(set(places) == set(KINDS) for places in PLACES.values())
    for fault in FAULTS:
        todo = int(fault.name.rsplit("todo", 1)[1])
        assert fault.loses == TODO_CHECKS[todo] and fault.loses, fault.name
        assert {todo_number(g) for g in fault.loses} == {todo}


# -- through real nbgrader ------------------------------------------------------------------


def first_failures(report, student_id) -> list[str]:
    """The failure texts on a feedback page, in order."""
    import html
    import re

    page = (report / "feedback" / f"{student_id}.html").read_text(encoding="utf-8")
    return [html.unescape(t) for t in re.findall(r"<pre class=fail>(.*?)</pre>", page, re.S)]


@pytest.fixture(scope="module")
def cheap_hang(fresh_build, tmp_path_factory):
    """The reference with TODO 19's method looping forever and swallowing every timeout
    (CHEAP_HANG), graded alone, one job."""
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    root = tmp_path_factory.mktemp("cheap-hang")
    (root / "submissions").mkdir()
    nb = filled_submission(release, solutions, CHEAP_HANG.edits)
    nbformat.write(nb, root / "submissions" / f"{CHEAP_HANG.name}.ipynb")
    course = fresh_build / "build" / "grading-course"
    run, rows = autograde(root / "submissions", root / "report", course, jobs=1)
    assert run.returncode == 0, run.stderr[-3000:]
    return {"rows": rows, "report": root / "report", "release": release}


@pytest.mark.heavy  # one hang graded through nbgrader (about 50 s); the box itself is tested above, every hang kind below
def test_a_todo_that_never_returns_and_swallows_the_timeout_costs_its_own_checks_only(cheap_hang):
    row = cheap_hang["rows"][CHEAP_HANG.name]
    assert row["status"] == "graded", row["reason"]
    assert lost_checks(row, cheap_hang["release"]) == set(CHEAP_HANG.loses)
    failures = first_failures(cheap_hang["report"], CHEAP_HANG.name)
    assert any(all(word in text for word in CHEAP_HANG.cause) for text in failures), failures
    assert any("吞掉" in text for text in failures), failures  # it caught the timeout


@pytest.mark.slow
def test_the_learner_sees_which_todo_hangs_within_its_box_without_the_kit(fresh_build):
    """The solutions notebook (no kit inside) with TODO 17 an endless loop, run by nbclient up
    to part four's visible check cell: it prints TODO 17's timeout line, and the cell ends
    within a few boxes."""
    from nbclient import NotebookClient
    from traitlets.config import Config

    from grader.kit.sandbox.kernel_setup import kernel_tempdir

    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    fault = next(f for f in FAULTS if f.name == "endless-loop-todo17")
    nb = filled_submission(solutions, solutions, fault.edits)
    last = next(
        i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == "visible_todo15_19"
    )
    nb.cells = [
        c
        for c in nb.cells[: last + 1]
        if not {"measurement", "learner-only"} & set(c.metadata.get("tags", []))
    ]
    workdir = kernel_tempdir("ch34-hang-")
    config = Config()
    config.KernelManager.transport, config.KernelManager.ip = "ipc", str(workdir / "kernel")
    client = NotebookClient(nb, timeout=300, allow_errors=True, kernel_name="python3", config=config)
    try:
        client.execute(cwd=str(workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    cell = nb.cells[-1]
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert "⏱️ TODO 17 的可见检查：_schedule_running(" in printed, printed
    assert "秒内没有返回" in printed and "while True" in printed, printed
    assert not [o for o in cell.outputs if o.get("name") == "stderr"], cell.outputs
    timing = cell.metadata["execution"]
    seconds = _seconds_between(timing["iopub.execute_input"], timing["shell.execute_reply"])
    assert seconds < 5 * time_boxes().box + 60, seconds


def _seconds_between(start: str, end: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(end[:26]) - datetime.fromisoformat(start[:26])).total_seconds()


@pytest.fixture(scope="module")
def hang_catalogue(fresh_build, tmp_path_factory):
    """Every hang fault, one a submission, graded beside the reference in one batch."""
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    solutions = read_nb(fresh_build / "solutions" / NOTEBOOK_NAME)
    root = tmp_path_factory.mktemp("hangs")
    submissions, scratch = root / "submissions", root / "tmp"
    submissions.mkdir()
    scratch.mkdir()
    nbformat.write(filled_submission(release, solutions), submissions / "reference.ipynb")
    for fault in FAULTS:
        nbformat.write(
            filled_submission(release, solutions, fault.edits),
            submissions / f"{fault.name}.ipynb",
        )
    run, rows = autograde(
        submissions,
        root / "report",
        fresh_build / "build" / "grading-course",
        env={"TMPDIR": str(scratch)},  # the kernels' command lines name it
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return {"run": run, "rows": rows, "release": release, "report": root / "report", "tmp": scratch}


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_a_hang_in_one_todo_costs_that_todo_and_keeps_every_other_check(hang_catalogue, fault):
    row = hang_catalogue["rows"][fault.name]
    assert row["status"] == "graded", row["reason"]
    assert lost_checks(row, hang_catalogue["release"]) == set(fault.loses)
    failures = first_failures(hang_catalogue["report"], fault.name)
    graded = [text for text in failures if text.startswith("AssertionError")]
    assert all(word in graded[0] for word in fault.cause), graded[0]


@pytest.mark.heavy
@pytest.mark.slow
def test_no_kernel_of_the_hang_catalogue_outlives_its_grading(hang_catalogue):
    assert hang_catalogue["rows"]["reference"]["status"] == "graded"
    assert wait_for_no_process_with(str(hang_catalogue["tmp"])) == []


BOX_ON_OTHER_PYTHONS = """
import signal, sys
box = {"__name__": "hidden_check"}
exec(compile(open(sys.argv[1]).read(), "<hidden check>", "exec"), box)
learner = {}
exec(compile(sys.argv[2], "/tmp/learner_cell.py", "exec"), learner)
for name in ("plain", "long_sleep", "catch_all", "catch_and_return"):
    try:
        box["run_boxed"](lambda: learner[name](10), float(sys.argv[3]))
        print(name, "returned")
    except box["CheckTimeout"] as timeout:
        print(name, "swallowed" if timeout.swallowed else "stopped")
    assert sys.gettrace() is None and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
"""


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_the_box_stops_the_same_code_on_the_pythons_learners_have(version):
    """Colab's 3.13, ModelScope's 3.12, the 3.10 floor: the alarm, and the line trace that
    stops a swallowing loop (3.12 moved tracing onto sys.monitoring), work the same."""
    from tests.test_other_pythons import find_python

    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    timebox = check_file_text("_timebox.py")
    run = subprocess.run(
        [python, "-c", BOX_ON_OTHER_PYTHONS, "/dev/stdin", LEARNER_CODE, str(BOX)],
        input=timebox,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.split() == [
        "plain", "stopped", "long_sleep", "stopped", "catch_all", "swallowed",
        "catch_and_return", "swallowed",
    ], run.stdout  # fmt: skip
