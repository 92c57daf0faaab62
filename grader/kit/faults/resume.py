"""nbgrader's Execute preprocessor, made to survive the kernel: a dead or unstoppable kernel costs
only the cell that was running.

nbgrader's own executor gives up on the whole notebook when the kernel dies (`os._exit`, a
segfault, the memory cgroup's killer) or when a cell neither finishes nor yields to the
interrupt at its time limit: "Removing failed assignment", no grade at all. `ResumingExecute`
instead records the fault on that cell (an error output, so nbgrader scores a grade cell 0
there, and the feedback page shows the cause under its TODO), starts a fresh kernel, re-runs the
cells the rest of the notebook needs, and goes on with the next cell:

- re-run: every code cell before the fault that is not a grade cell (the answer cells, the
  given code, the learner's scratch cells), except a cell that ended a kernel itself; grade
  cells already scored are not run again. Outputs of the re-run go nowhere: the notebook keeps
  those of the first run.
- the run ends normally, and nbgrader writes one grade per grade cell as for any submission.

`child.py` configures nbgrader's Autograde with this class in place of `Execute` and reads the
faults from `ResumingExecute.faults` (a forked grader grades one notebook, then exits).
"""

from __future__ import annotations

import copy

from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute

from ..authoring.nbsource import nbgrader_meta, todo_number
from .boxes import BoxTimeout, timed_out_checks
from .causes import CellError, definition_errors
from .kinds import KernelFault, kind_of_death, oom_kill_count

# More restarts than this and the notebook is given up as nbgrader would (the notebook's own
# time limit stops it long before, for any notebook that takes time to kill its kernel).
MAX_RESTARTS = 40


class ResumingExecute(Execute):
    """Execute every cell; on a dead or unstoppable kernel, record and resume (module docstring)."""

    faults: list[KernelFault] = []  # of the last notebook this process ran
    # its answer cells that did not run (`causes.py`), then its TODOs whose checks ran out of
    # their time boxes (`boxes.py`): each has the `reason` line grades.csv gets
    causes: list[CellError | BoxTimeout] = []
    cgroups: tuple = ()  # the submission's cgroups, where the memory killer's count is read
    _failed_restore: int | None = None  # the cell whose re-run ended the kernel

    def preprocess(self, nb: NotebookNode, resources=None, km=None):
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        type(self).faults = []
        skipped: set[int] = set()  # cells that ended a kernel: never re-run
        start = 0
        while start is not None:
            if len(skipped) > MAX_RESTARTS:
                raise DeadKernelError(f"the kernel ended {len(skipped)} times")
            start = self._run_from(start, resources, skipped)
        self.set_widgets_metadata()
        type(self).causes = [*definition_errors(self.nb), *timed_out_checks(self.nb)]
        return self.nb, self.resources

    def _run_from(self, start: int, resources, skipped: set[int]) -> int | None:
        """Run cells from `start` in a fresh kernel (first restoring the cells before it);
        the index to resume at after a fault, None once the notebook has run."""
        self.km = self.kc = None  # a fresh kernel manager for every kernel
        with self.setup_kernel():
            info_msg = self.wait_for_reply(self.kc.kernel_info())
            self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
            kills_before = oom_kill_count(self.cgroups)
            index = start
            try:
                self._restore(start, skipped)
                for index in range(start, len(self.nb.cells)):
                    self.preprocess_cell(self.nb.cells[index], resources, index)
                    self._explain_interrupt(index)
                return None
            except (DeadKernelError, CellTimeoutError) as error:
                fault = self._fault(index, error, oom_kill_count(self.cgroups) - kills_before)
            # leaving `setup_kernel` kills whatever is left of the kernel
        skipped.add(fault.index)
        type(self).faults.append(fault)
        self.nb.cells[fault.index].setdefault("outputs", []).append(error_output(fault))
        if fault.index < start:  # a cell above, re-run to restore: resume where we were
            return start
        return fault.index + 1 if fault.index + 1 < len(self.nb.cells) else None

    def _explain_interrupt(self, index: int) -> None:
        """A cell interrupted at its time limit (the kernel lived on) gets, first, an error that
        says so under its TODO, and counts as a fault: not only nbclient's `CellTimeoutError`."""
        cell = self.nb.cells[index]
        outputs = cell.get("outputs", [])
        if not any(o.get("ename") == "CellTimeoutError" for o in outputs):
            return
        meta = nbgrader_meta(cell)
        label = meta.get("grade_id") or f"#{index}"
        todo = todo_number(label) if meta.get("grade") else None
        fault = KernelFault(index, label, todo, "interrupted", timeout=self.timeout)
        type(self).faults.append(fault)
        outputs.insert(0, error_output(fault))

    def _restore(self, before: int, skipped: set[int]) -> None:
        """Re-run, quietly, what the cells from `before` on need from those above them."""
        for index, cell in enumerate(self.nb.cells[:before]):
            if cell.cell_type != "code" or index in skipped or nbgrader_meta(cell).get("grade"):
                continue
            try:
                self.execute_cell(copy.deepcopy(cell), index, store_history=False)
            except (DeadKernelError, CellTimeoutError):
                # It ended a kernel now though it did not the first time (memory, timing):
                # reported against the cell, like any other fault.
                self._failed_restore = index
                raise

    def _fault(self, index: int, error: Exception, oom_kills: int) -> KernelFault:
        """What ended the kernel in cell `index` (or in the restore of an earlier one)."""
        if self._failed_restore is not None:
            index, self._failed_restore = self._failed_restore, None
        meta = nbgrader_meta(self.nb.cells[index])
        label = meta.get("grade_id") or f"#{index}"
        todo = todo_number(label) if meta.get("grade") else None
        if isinstance(error, CellTimeoutError) and self._kernel_alive():
            return KernelFault(index, label, todo, "hang", timeout=self.timeout)
        kind, code = kind_of_death(self._exit_status(), oom_kills)
        return KernelFault(index, label, todo, kind, code)

    def _kernel_alive(self) -> bool:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return process is not None and process.poll() is None

    def _exit_status(self) -> int | None:
        """The dead kernel's exit status (the launcher passes the kernel's on), if known."""
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        if process is None:
            return None
        try:
            return process.wait(timeout=5)
        except Exception:  # still ending: jupyter_client kills it when the kernel goes
            return None


def error_output(fault: KernelFault) -> NotebookNode:
    """The error a faulted cell shows: nbgrader scores a grade cell with one 0, and the feedback
    page quotes it under the TODO (`report/feedback.py`)."""
    return NotebookNode(
        output_type="error",
        ename="超时" if fault.kind in ("timebox", "hang", "interrupted") else "内核退出",
        evalue=fault.learner_text,
        traceback=[fault.learner_text],
    )
