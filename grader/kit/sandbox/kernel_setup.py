"""What the kernel of one working copy starts from: its kernelspec (whose argv is the launcher,
`launcher.py`, started by path), its IPython profile, and the environment the launcher reads.

The environment is the contract between the grader and the launcher: `sandbox_environment`
writes the CH34_SANDBOX_* settings `launcher.py`'s docstring lists, `kernel_settings` adds the
zygote's socket, the cgroups and Jupyter's own paths.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from ..errors import BuildError

LAUNCHER = Path(__file__).with_name("launcher.py")  # the kernelspec's argv runs it by path
KERNEL_NAME = "ch34-sandbox"
OUTPUT_CAP = """\
def _cap_output(stream, left=LIMIT):
    write, said = stream.write, []

    def capped(text):
        nonlocal left
        if left <= 0:
            if not said:
                said.append(write("\\n[输出超过 LIMIT 字节，其余已丢弃]\\n"))
            return len(text)
        left -= len(text)
        return write(text if left >= 0 else text[: left + len(text)])

    stream.write = capped


import sys as _sys

_cap_output(_sys.stdout)
_cap_output(_sys.stderr)
del _cap_output, _sys
"""
# The kernel's IPython settings. Plain tracebacks, as Python prints them: IPython's default
# ("Context") analyses every frame with stack_data, about 65 ms a traceback here, and an
# unfinished notebook raises one in each of its 55 grade cells (3.5 s of its 10.9 s). A learner's
# page still shows each frame's file, line and code; grade cells show only the message anyway.
# No input history either: IPython writes every cell to an SQLite file (here, in the scratch
# directory, read by no one) from a thread of its own; `In` and `Out` stay as they were.
KERNEL_IPYTHON_CONFIG = 'c.InteractiveShell.xmode = "Plain"\nc.HistoryManager.enabled = False\n'


def kernel_python() -> str:
    """The interpreter the kernelspec starts: this one, its directories resolved.

    A virtualenv reached through a symlinked directory (`/tmp/venv -> /work/.venv`) gives
    `sys.executable = /tmp/venv/bin/python`; the sandbox binds only the resolved trees, so that
    path does not exist inside it and every kernel died. The file name itself stays unresolved:
    a venv's `bin/python` is a symlink to the base interpreter, and following it would lose
    the venv (Python finds `pyvenv.cfg` beside the path it was started by).
    """
    folder, name = os.path.split(os.path.abspath(sys.executable))
    return os.path.join(os.path.realpath(folder), name)


def python_roots() -> list[str]:
    """The Python trees the sandbox shows the kernel (read-only), resolved."""
    return sorted({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def thread_environment(threads: int) -> dict:
    """Kernels graded side by side share the cores: `threads` BLAS/torch threads each."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def sandbox_environment(scratch: Path, memory_bytes: int, sandbox: bool) -> dict:
    """The settings `launcher.py` reads (see its docstring)."""
    return {
        "CH34_SANDBOX_SCRATCH": str(scratch),
        "CH34_SANDBOX_PYTHON": os.pathsep.join(python_roots()),
        "CH34_SANDBOX_MEMORY": str(memory_bytes),
        "CH34_SANDBOX_BWRAP": "1" if sandbox else "0",
    }


def prepare_kernel(workdir: Path, limits) -> None:  # limits: a `grading.limits.Limits`
    """Write what the kernel of `workdir` starts from: its kernelspec and IPython profile."""
    for name in ("scratch/.ipython/profile_default/startup", "runtime", "kernels/" + KERNEL_NAME):
        (workdir / name).mkdir(parents=True, exist_ok=True)
    # Runs in the kernel before any learner code (the kernel's HOME is the scratch directory).
    (workdir / "scratch/.ipython/profile_default/startup/00-output-cap.py").write_text(
        OUTPUT_CAP.replace("LIMIT", str(limits.output_bytes))
    )
    (workdir / "scratch/.ipython/profile_default/ipython_config.py").write_text(
        KERNEL_IPYTHON_CONFIG
    )
    (workdir / "kernels" / KERNEL_NAME / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [kernel_python(), str(LAUNCHER), "{connection_file}"],
                "display_name": "Python 3 (ch34 sandbox)",
                "language": "python",
                # SIGINT cannot cross into the kernel's PID namespace; it interrupts itself instead.
                "interrupt_mode": "message",
            }
        )
    )


def kernel_settings(
    workdir: Path,
    limits,
    sandbox: bool,
    threads: int,
    groups: list[Path] = (),
    zygote: Path | None = None,
) -> dict:
    """The environment under which jupyter_client finds and starts the kernel of `workdir`."""
    # The sandbox shows the kernel only the Python trees (read-only) and the system's own files.
    settings = sandbox_environment(workdir / "scratch", limits.memory_bytes, sandbox)
    if zygote is not None:
        settings["CH34_SANDBOX_ZYGOTE"] = str(zygote)
        settings["CH34_SANDBOX_CGROUPS"] = os.pathsep.join(map(str, groups))
    settings.update(JUPYTER_PATH=str(workdir), JUPYTER_RUNTIME_DIR=str(workdir / "runtime"))
    settings.update(thread_environment(threads))
    return settings


MAX_SOCKET_PATH = 107  # bytes in a Unix socket address (sun_path), less its closing NUL


def kernel_tempdir(prefix: str, *, below: str = "/kernel-99999") -> Path:
    """A new temporary folder short enough for the kernel IPC sockets that go `below` it.

    The default is where `execute(nb, folder)` puts them: `folder/kernel-<n>`.

    A Unix socket's path holds at most 107 bytes, and `execute` puts kernel sockets in a working
    folder: a long TMPDIR (a macOS one, a deep CI folder) would break every kernel. Such a
    TMPDIR is passed over for /tmp. The caller removes the folder.
    """
    for parent in (None, "/tmp"):
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        if len(os.fsencode(folder)) + len(below) <= MAX_SOCKET_PATH:
            return folder
        folder.rmdir()
    raise BuildError(
        f"no temporary folder short enough for kernel sockets ({len(below)} bytes must fit below "
        f"it in {MAX_SOCKET_PATH}): set TMPDIR to a short folder"
    )


def kernel_threads(jobs: int) -> int:
    """BLAS/torch threads a kernel gets: the cores shared among the jobs, no oversubscription."""
    return max(1, (os.cpu_count() or 1) // jobs)
