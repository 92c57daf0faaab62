"""The grader's side of the zygote (`zygote_server.py`): start the batch's pre-imported kernel
process, learn whether it serves, and stop it."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import threading
from pathlib import Path

from .kernel_setup import kernel_python, kernel_tempdir, python_roots, thread_environment

ZYGOTE_SCRIPT = Path(__file__).with_name("zygote_server.py")


class Zygote:
    """The batch's pre-imported kernel process (`zygote_server.py`): start it, then `stop()` it.

    Making one starts the process and returns at once: its imports (torch, ipykernel: about
    3.5 s) run while the grader does its own. `socket` is where the kernel launchers reach it;
    `problem`, the first time it is read, waits for the zygote's first word and is None when it
    serves, else why it cannot (kernels then start afresh, each in bubblewrap).
    """

    STARTUP_TIMEOUT_S = 180

    def __init__(self, threads: int):
        self.folder = kernel_tempdir("ch34-zygote-", below="/zygote.sock")
        self.socket = self.folder / "zygote.sock"
        self.process = subprocess.Popen(
            [kernel_python(), str(ZYGOTE_SCRIPT), str(self.socket), str(os.getpid())],
            cwd=self.folder,
            # Its self-test binds the Python trees every kernel will be given.
            env={
                **os.environ,
                **thread_environment(threads),
                "CH34_SANDBOX_PYTHON": os.pathsep.join(python_roots()),
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # an import's traceback becomes the problem's text
            text=True,
            errors="replace",
        )
        self.too_slow = threading.Timer(self.STARTUP_TIMEOUT_S, self.process.kill)
        self.too_slow.start()

    @functools.cached_property
    def problem(self) -> str | None:
        if self.process.stdout.closed:
            return "it was stopped before it said whether it serves"
        said = []
        for line in self.process.stdout:
            said.append(line.rstrip())
            if line.startswith(("ready", "unavailable: ")):
                break
        self.too_slow.cancel()
        if said[-1:] == ["ready"]:
            return None
        self.stop()
        return zygote_problem(said)

    @property
    def serving(self) -> bool:
        return self.problem is None

    def stop(self) -> None:
        """End the zygote; kernels still running from it end with it (parent-death signals)."""
        self.too_slow.cancel()
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def zygote_problem(said: list[str]) -> str:
    """Why the zygote is not serving, from what it printed before it stopped."""
    if said and said[-1].startswith("unavailable: "):
        return said[-1][len("unavailable: ") :]
    if not said:
        return f"it printed nothing (killed after {Zygote.STARTUP_TIMEOUT_S} s, or crashed)"
    return said[-1][-300:]  # an import's traceback ends with the error
