"""Cap how many processes and threads one submission may have, with a Linux pids cgroup.

A fork bomb in learner code fills the machine's process table within seconds (32,768 entries
on the CI machine): no other grader, and nothing else on the machine, can start a process
until the notebook's time limit ends it. RLIMIT_NPROC cannot stop it, because Linux never
enforces it for root, and the grader runs as root. A pids cgroup does: once its `pids.max`
tasks exist, fork() and thread creation in it fail with EAGAIN.

Each submission gets a group of its own, made below the cgroup this process is already in (so
any limit set from outside still holds), entered by the forked grader before it starts the
kernel (so the kernel and all it starts are in it too), and removed once the grader has been
reaped. Where no writable pids cgroup exists (cgroup v2 without a delegated pids controller,
no root), `available` says so and grading goes on without this limit.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")


def available() -> Path | None:
    """The pids cgroup below which groups can be made here, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):  # cgroup v1: its own hierarchy
            base = CGROUP_MOUNT / "pids" / path.lstrip("/")
        elif controllers == "":  # cgroup v2: only where pids is handed down to children
            base = CGROUP_MOUNT / path.lstrip("/")
            try:
                if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
        else:
            continue
        if os.access(base, os.W_OK) and (base / "cgroup.procs").exists():
            return base
    return None


def make_group(base: Path | None, name: str, pids_max: int) -> Path | None:
    """A new group `base/name` allowing `pids_max` tasks; None when `base` is None or refuses."""
    if base is None:
        return None
    group = base / name
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(pids_max))
    except OSError:
        remove_group(group)
        return None
    return group


def enter(group: Path | None) -> None:
    """Move this process into `group`; what it starts from now on is counted there too."""
    if group is not None:
        (group / "cgroup.procs").write_text(str(os.getpid()))


def remove_group(group: Path | None) -> None:
    """Remove an emptied group (its last tasks may take a moment to leave after SIGKILL)."""
    if group is None:
        return
    for _ in range(100):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY: tasks still leaving
            time.sleep(0.02)
