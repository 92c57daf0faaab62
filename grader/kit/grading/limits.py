"""What one submission may spend: the one place each limit is set.

The grader's address space, the kernel's, the submission's cgroups and the start line all read
these (`Limits`); the command line's defaults are its fields' defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one submission may spend."""

    cell_timeout_s: int = 60
    notebook_timeout_s: int = 240
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
