"""A pool of forked graders: start one per submission, wait for one to end or overrun its time,
kill and reap it with everything it started, remove its cgroups.

The pool knows nothing of grades: a batch (`batch.py`) starts graders while `has_room`, and
reads each one that `ended()` from its working copy. Used as a context manager: whatever a
grader leaves running is re-parented to this process and killed, and on leaving every grader
still running is killed and the working copies' folder is removed.
"""

from __future__ import annotations

import multiprocessing
import shutil
import time
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_for_exit
from pathlib import Path

from ..sandbox import cgroups, reaper
from ..sandbox.kernel_setup import kernel_tempdir, kernel_threads
from .child import grade_in_child
from .limits import Limits


@dataclass
class Ended:
    """A grader that has ended (or was killed for overrunning), reaped."""

    index: int
    workdir: Path
    exitcode: int | None
    overdue: bool
    seconds: float


@dataclass
class _Running:
    index: int
    workdir: Path
    began: float
    groups: list


class GraderPool:
    """At most `jobs` graders at once, each forked from this process (`child.grade_in_child`).

    `cgroup_bases` is what `cgroups.available()` found; `zygote` the serving zygote's client
    (`sandbox.zygote_client.Zygote`), None to start every kernel afresh.
    """

    def __init__(self, *, jobs: int, limits: Limits, sandbox: bool, cgroup_bases, zygote):
        self.jobs, self.limits, self.sandbox = jobs, limits, sandbox
        self.bases = cgroups.available() if cgroup_bases is None else cgroup_bases
        self.threads = kernel_threads(jobs)
        # The zygote is this process's child too: it serves the whole batch, so it is spared.
        self.zygote_pid = zygote.process.pid if zygote else None
        self.zygote_socket = zygote.socket if zygote else None
        self.work_root = kernel_tempdir("ch34-grading-", below="/0000/runtime/kernel-99999")
        self._context = multiprocessing.get_context("fork")
        self._running: dict = {}

    def __enter__(self) -> GraderPool:
        # Whatever a grader leaves running (a kernel in its own session, a detached process) is
        # re-parented here when the grader ends, and killed.
        reaper.adopt_orphans()
        return self

    def __exit__(self, *exc) -> None:
        for proc in self._running:
            reaper.kill_group(proc.pid)
        reaper.kill_descendants()
        for running in self._running.values():
            cgroups.remove(running.groups)
        reaper.adopt_orphans(False)
        shutil.rmtree(self.work_root, ignore_errors=True)

    def workdir(self, index: int) -> Path:
        """The working copy of submission `index` (made by the caller, removed with the pool)."""
        return self.work_root / f"{index:04d}"

    @property
    def has_room(self) -> bool:
        return len(self._running) < self.jobs

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def start(self, index: int, workdir: Path, student_id: str) -> None:
        """Fork a grader for the prepared working copy `workdir`, nbgrader's `student_id`."""
        groups = cgroups.make_groups(
            self.bases, f"{self.work_root.name}-{index:04d}", self.limits.cgroup_caps()
        )
        proc = self._context.Process(
            target=grade_in_child,
            args=(
                workdir,
                student_id,
                self.limits,
                self.sandbox,
                self.threads,
                groups,
                self.zygote_socket,
            ),
        )
        proc.start()
        self._running[proc] = _Running(index, workdir, time.monotonic(), groups)

    def ended(self):
        """Wait until a grader exits (its slot refills at once) or the next deadline passes;
        yield each grader that has ended or overran (killed), reaped, one at a time."""
        timeout = self.limits.notebook_timeout_s
        deadlines = [running.began + timeout for running in self._running.values()]
        if deadlines:
            wait_for_exit(
                [proc.sentinel for proc in self._running],
                timeout=max(0.0, min(deadlines) - time.monotonic()),
            )
        for proc, running in list(self._running.items()):
            overdue = time.monotonic() - running.began > timeout
            if proc.is_alive() and not overdue:
                continue
            if proc.is_alive():
                reaper.kill_group(proc.pid)
            proc.join()
            del self._running[proc]
            reaper.kill_descendants(
                spare=[other.pid for other in self._running] + [self.zygote_pid]
            )
            cgroups.remove(running.groups)
            seconds = time.monotonic() - running.began
            yield Ended(running.index, running.workdir, proc.exitcode, overdue, seconds)
