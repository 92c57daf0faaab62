"""The grader's side of the zygote (`zygote_server.py`): start the batch's pre-imported kernel
process, learn whether it serves, and stop it."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from ..authoring.build import kernel_tempdir
from .kernel_setup import kernel_python, python_roots, thread_environment

ZYGOTE_SCRIPT = Path(__file__).with_name("zygote_server.py")


class Zygote:
    """The batch's pre-imported kernel process (`zygote_server.py`): start it, then `stop()` it.

    `socket` is where the kernel launchers reach it; `problem` is None when it is serving,
    else why it cannot (kernels then start afresh, each in bubblewrap). Starting takes the
    imports' time, about 3.5 s, once a batch.
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
        said = []
        too_slow = threading.Timer(self.STARTUP_TIMEOUT_S, self.process.kill)
        too_slow.start()
        for line in self.process.stdout:
            said.append(line.rstrip())
            if line.startswith(("ready", "unavailable: ")):
                break
        too_slow.cancel()
        self.problem = None if said[-1:] == ["ready"] else zygote_problem(said)
        if self.problem:
            self.stop()

    @property
    def serving(self) -> bool:
        return self.problem is None

    def stop(self) -> None:
        """End the zygote; kernels still running from it end with it (parent-death signals)."""
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
