"""Find and kill every process a grader leaves behind, with the sandbox or without it.

In the sandbox each kernel has a PID namespace of its own and takes everything in it along
when it dies. Without the sandbox two kinds of process escape a kill of the grader's process
group: the kernel itself (jupyter_client starts every kernel in a new session) and whatever
learner code detached (`start_new_session=True`, a double fork). Left alone, they run or sit
idle for as long as the machine stays up.

Linux lets a process declare itself a child subreaper: orphans below it are re-parented to it
rather than to init, so they stay below it and can be found in /proc and killed. Elsewhere
`adopt_orphans` says False and only the process group is killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>


def adopt_orphans(on: bool = True) -> bool:
    """Make this process the parent of every orphan below it (Linux); False where unsupported.

    Not inherited across fork: each process that should adopt calls it itself. `on=False`
    hands orphans back to init.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (a forked grader and what it started in it)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(*, spare=()) -> int:
    """SIGKILL every process below this one, except the pids in `spare` and what is below them.

    Reaps those that end up as this process's own children (a killed process's children are
    re-parented here when `adopt_orphans` was called). Returns how many processes were killed.
    Never touches `spare`: a running grader's subtree is its own business until it ends.
    """
    me, spare, killed = os.getpid(), set(spare), 0
    deadline = time.monotonic() + 5.0  # SIGKILL is asynchronous; children of the dead arrive late
    while True:
        table = _process_table()
        below = _below(me, table, spare)
        alive = [pid for pid in below if table[pid][1] != "Z"]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        for pid in below:
            if table[pid][0] == me:
                _reap(pid)
        if not below or time.monotonic() > deadline:
            return killed
        time.sleep(0.01)


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) for every process /proc lists now."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended while we looked
            continue
        # "pid (comm) state ppid ...": comm may itself hold spaces and parentheses
        state, ppid = text[text.rindex(")") + 2 :].split()[:2]
        table[int(stat.parent.name)] = (int(ppid), state)
    return table


def _below(root: int, table: dict, spare: set) -> list[int]:
    """Every pid under `root` in `table`, parents first, skipping `spare` and their subtrees."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in sorted(children.get(todo.pop(0), [])):
            if child not in spare:
                found.append(child)
                todo.append(child)
    return found


def _reap(pid: int) -> None:
    """Collect a child's exit status if it has one, without waiting for it."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
