"""Per-submission Linux cgroups: a cap on the tasks and on the memory of a grader, its kernel and
everything below them.

The kernel's own limits are per process: RLIMIT_AS caps one process's address space, and
RLIMIT_NPROC, which would cap processes, is never enforced for root (the grader runs as root).
So a fork bomb fills the machine's process table within seconds (32,768 entries on the CI
machine), and a few forked children, each under its own address-space cap, can together take
all the memory, and the out-of-memory killer then picks among every grader on the machine.
A cgroup counts the whole submission: once `pids` tasks exist in it, fork() and thread creation
fail with EAGAIN; once its memory is used up, the killer picks inside it.

Each submission gets its groups below the cgroups this process is already in (so limits set
from outside still hold). The forked grader enters them before it starts the kernel, and the
parent removes them once the grader has been reaped. cgroup v1 keeps a tree per controller;
cgroup v2 has one tree, used only where the controller is handed down to this process's
children. Where neither is writable, `available` leaves the controller out and grading goes
on without that limit, saying so.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
# controller -> (limit file in cgroup v1, limit file in cgroup v2)
LIMIT_FILES = {"pids": ("pids.max", "pids.max"), "memory": ("memory.limit_in_bytes", "memory.max")}


def available() -> dict[str, tuple[Path, str]]:
    """controller -> (the group below which groups can be made, its limit file's name)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for controller, (v1_file, v2_file) in LIMIT_FILES.items():
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):  # v1: the controller's own tree
                base, limit_file = CGROUP_MOUNT / controller / path.lstrip("/"), v1_file
            elif controllers == "" and _hands_down(CGROUP_MOUNT / path.lstrip("/"), controller):
                base, limit_file = CGROUP_MOUNT / path.lstrip("/"), v2_file
            else:
                continue
            if os.access(base, os.W_OK) and (base / "cgroup.procs").exists():
                found[controller] = (base, limit_file)
                break
    return found


def describe(bases: dict, *, pids: int, memory_bytes: int) -> str:
    """What the start line says about these limits."""
    parts = []
    if "pids" in bases:
        parts.append(f"at most {pids} processes")
    if "memory" in bases:
        parts.append(f"{memory_bytes / 2**30:g} GiB of memory")
    missing = [c for c in LIMIT_FILES if c not in bases]
    text = " and ".join(parts) + " a submission" if parts else "none"
    if missing:
        text += f" (no writable {' or '.join(missing)} cgroup here)"
    return text


def make_groups(bases: dict, name: str, limits: dict[str, int]) -> list[Path]:
    """Groups called `name` with `limits` (controller -> value), one per tree; [] if none."""
    groups: list[Path] = []
    for controller, value in limits.items():
        if controller not in bases:
            continue
        base, limit_file = bases[controller]
        group = base / name
        try:
            if group not in groups:  # cgroup v2: one group holds every controller
                group.mkdir()
                groups.append(group)
            (group / limit_file).write_text(str(value))
        except OSError:
            continue  # this controller refused; the others still apply
    return groups


def enter(groups: list[Path]) -> None:
    """Move this process into `groups`; what it starts from now on is counted there too."""
    for group in groups:
        (group / "cgroup.procs").write_text(str(os.getpid()))


def remove(groups: list[Path]) -> None:
    """Remove emptied groups (their last tasks may take a moment to leave after SIGKILL)."""
    for group in groups:
        for _ in range(100):
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # EBUSY: tasks still leaving
                time.sleep(0.02)


def _hands_down(group: Path, controller: str) -> bool:
    try:
        return controller in (group / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False
