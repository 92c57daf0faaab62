"""What one submission may spend: the one place each limit is set.

The grader's address space, the kernel's, the submission's cgroups and the start line all read
these (`Limits`); the command line's defaults are its fields' defaults.

The two time limits are backstops. Inside the kernel every check has a time box of its own
(`checks/_timebox.py`): a TODO that never returns costs its checks' boxes and the next check runs.
The limits here are derived from those boxes (`derived_time_limits`), so that no number of faulty
TODOs reaches them: the cell limit lets the cell with the most boxes run each one out, and the
notebook limit lets every box of the notebook run out. Only code that no box can stop (C code
that never checks for signals, a kernel that ignores interrupts) meets them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# What the derivation assumes, for a machine whose cores are all busy:
LOAD_FACTOR = 2  # wall seconds a box of one second takes (a box counts time run or slept, not
#                  time spent waiting for a CPU: `checks/_timebox.py`)
CELL_OWN_S = 20  # a cell's own work beside its boxes
REFERENCE_S = 60  # the reference notebook's whole run, kernel start included (about 8 s quiet)
SWALLOWED_BOXES = 10  # boxes of a notebook whose alarm is swallowed, each going on for its grace


@dataclass(frozen=True)
class Limits:
    """What one submission may spend."""

    # `derived_time_limits(checkcells.time_boxes())`, written out so the command line starts
    # without reading the source (test_faults_hang checks that they are still what it derives).
    cell_timeout_s: int = 109
    notebook_timeout_s: int = 1075
    # The kernel's address space (torch alone maps about 1.5 GiB), and the memory the whole
    # submission may use (a memory cgroup: grader, kernel and all it starts).
    memory_bytes: int = 6 << 30
    output_lines: int = 200
    output_bytes: int = 2_000_000  # what the kernel may print in all, before the rest is dropped
    processes: int = 512  # tasks (threads too) of the grader, the kernel and all it starts

    @property
    def grader_address_space(self) -> int:
        """The forked grader's RLIMIT_AS: room for nbgrader beside the kernel's own limit."""
        return self.memory_bytes * 2

    def cgroup_caps(self) -> dict[str, int]:
        """controller -> the cap on a submission's cgroup (`sandbox.cgroups.make_groups`)."""
        return {"pids": self.processes, "memory": self.memory_bytes}


def derived_time_limits(boxes) -> tuple[int, int]:
    """(cell limit, notebook limit) in seconds for a notebook whose time boxes are `boxes` (a
    `checkcells.TimeBoxes`), on a busy machine: the boxes of the cell with the most of them run
    out and swallowed, plus the cell's own work; every box of the notebook run out, a few of them
    swallowed, plus the reference's run."""
    cell = LOAD_FACTOR * boxes.longest_cell + boxes.most_in_a_cell * boxes.grace + CELL_OWN_S
    notebook = REFERENCE_S + LOAD_FACTOR * boxes.total + SWALLOWED_BOXES * boxes.grace
    return math.ceil(cell), math.ceil(notebook)
