"""Grade one submission in a process forked from the batch grader (`autograde.py`).

The fork starts with nbgrader, nbconvert, nbclient and jupyter_client already imported by its
parent (about 3 s a submission that a fresh process would spend). `grade_in_child` gives the
working copy a kernelspec whose kernel is forked from the batch's pre-imported `Zygote`
(`zygote_server.py`) or, without one, starts afresh inside bubblewrap (`launcher.py` either way), sets
the limits, runs nbgrader's own `autograde` in process on `workdir/course`, writes
`workdir/result.json` and exits; nothing it started outlives it (`reaper.py`). It never writes
outside `workdir`.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.converters import Autograde
from nbgrader.coursedir import CourseDirectory
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import CheckCellMetadata
from traitlets.config.loader import PyFileConfigLoader

from ..authoring.build import kernel_tempdir
from ..authoring.nbsource import ASSIGNMENT, NOTEBOOK_NAME
from ..sandbox import cgroups, reaper

SANDBOX_SCRIPT = Path(__file__).parents[1] / "sandbox" / "launcher.py"
ZYGOTE_SCRIPT = Path(__file__).parents[1] / "sandbox" / "zygote_server.py"
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


def warm_up(release) -> None:
    """Load once, in the parent, what every forked grader would otherwise load for itself.

    Measured in a grader's profile: IPython and SQLAlchemy's SQLite dialect (imported on first
    use), nbformat's compiled schema validator, jsonschema's and re's caches, the kernel
    provisioners' entry points: about 0.25 s of CPU a submission.
    """
    import IPython  # noqa: F401  (nbconvert's execution imports it)
    from jupyter_client.provisioning import KernelProvisionerFactory
    from sqlalchemy.dialects import sqlite  # noqa: F401

    nbformat.validate(release)
    MetadataValidator().validate_nb(release)
    KernelProvisionerFactory.instance()


def sandbox_available() -> bool:
    """True when bubblewrap can create the namespaces the kernel sandbox needs.

    It says nothing about whether a kernel can start in there: `kernel_start_problem` does.
    """
    if shutil.which("bwrap") is None:
        return False
    probe = os.system(
        "bwrap --ro-bind / / --unshare-pid --unshare-net --die-with-parent true >/dev/null 2>&1"
    )
    return probe == 0


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


class Zygote:
    """The batch's pre-imported kernel process (`zygote_server.py`): start it, then `stop()` it.

    `socket` is where the kernel launchers reach it; `problem` is None when it is serving,
    else why it cannot (kernels then start afresh, each in bubblewrap). Starting takes the
    imports' time, about 3.5 s, once a batch.
    """

    STARTUP_TIMEOUT_S = 180

    def __init__(self, threads: int):
        import subprocess
        import threading

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


def sandbox_environment(scratch: Path, memory_bytes: int, sandbox: bool) -> dict:
    """The settings `launcher.py` reads (see its docstring)."""
    return {
        "CH34_SANDBOX_SCRATCH": str(scratch),
        "CH34_SANDBOX_PYTHON": os.pathsep.join(python_roots()),
        "CH34_SANDBOX_MEMORY": str(memory_bytes),
        "CH34_SANDBOX_BWRAP": "1" if sandbox else "0",
    }


def kernel_start_problem(limits: Limits, sandbox: bool) -> str | None:
    """Start the kernel's interpreter the way every kernel will start (sandbox, memory limit)
    and import ipykernel; None when that works, else what went wrong, for the instructor."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ch34-check-") as scratch:
        env = {**os.environ, **sandbox_environment(Path(scratch), limits.memory_bytes, sandbox)}
        run = subprocess.run(
            [kernel_python(), str(SANDBOX_SCRIPT), "--check"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    if run.returncode == 0:
        return None
    return (
        f"the kernel's Python ({kernel_python()}) could not start "
        f"{'inside bubblewrap' if sandbox else 'without a sandbox'} "
        f"(exit {run.returncode}): {run.stderr.strip()[-1500:] or 'no message'}"
    )


def grade_in_child(
    workdir: Path,
    student_id: str,
    limits: Limits,
    sandbox: bool,
    threads: int,
    groups: list[Path] = (),
    zygote: Path | None = None,
) -> None:
    """Forked per submission: run nbgrader autograde in `workdir/course`, write result.json.

    `groups` are the submission's cgroups (`cgroups.py`), empty where there are none.
    `zygote` is the socket of the batch's `Zygote`, None to start the kernel afresh.
    """
    cgroups.enter(groups)  # before anything starts, so the kernel and all below it count
    os.setpgrp()  # so the parent can kill this process and everything it started at once
    reaper.adopt_orphans()  # and so what escapes the group is still below this process
    # nbgrader's SQLAlchemy warnings are not the instructor's business
    warnings.simplefilter("ignore")
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes * 2, limits.memory_bytes * 2))
    prepare_kernel(workdir, limits)
    os.environ.update(kernel_settings(workdir, limits, sandbox, threads, groups, zygote))
    scratch_gradebook_without_sync()
    result = run_nbgrader(workdir, student_id, limits)
    reaper.kill_descendants()  # the kernel is gone; anything the notebook started goes too
    (workdir / "result.json").write_text(json.dumps(result, ensure_ascii=False))
    os._exit(0)  # skip atexit handlers inherited from the parent


def prepare_kernel(workdir: Path, limits: Limits) -> None:
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
                "argv": [kernel_python(), str(SANDBOX_SCRIPT), "{connection_file}"],
                "display_name": "Python 3 (ch34 sandbox)",
                "language": "python",
                # SIGINT cannot cross into the kernel's PID namespace; it interrupts itself instead.
                "interrupt_mode": "message",
            }
        )
    )


def kernel_settings(
    workdir: Path,
    limits: Limits,
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


def scratch_gradebook_without_sync() -> None:
    """Let SQLite skip its journal file and fsync in this process (a forked grader only).

    nbgrader commits once per grade cell (55 here) to the working copy's gradebook, which is
    read once and deleted: nothing in it needs to survive a crash. The class's gradebook is
    written by the parent (`report/gradebook.py`), where this is never set.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def unsynced(connection, _record):
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("PRAGMA journal_mode = MEMORY")


def run_nbgrader(workdir: Path, student_id: str, limits: Limits) -> dict:
    """nbgrader's autograde, in process, on the course in `workdir`."""
    course = workdir / "course"
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    config.Execute.kernel_name = KERNEL_NAME
    config.Execute.timeout = limits.cell_timeout_s
    config.LimitOutput.max_lines = limits.output_lines
    config.KernelManager.transport = "ipc"
    # Once the last cell has run the kernel has nothing left to give: kill it rather than wait
    # for a polite exit (nbclient's graceful shutdown idles about 0.9 s a submission).
    config.Execute.shutdown_kernel = "immediate"
    config.KernelManager.ip = str(workdir / "runtime" / "kernel")
    # nbgrader checks every cell's nbgrader metadata after sanitising and again after executing
    # (0.2 s of jsonschema a submission each time). Neither can fail here: `normalize.py` rebuilt
    # the notebook with the release's metadata on every release cell and none on the others,
    # and `warm_up` validated the release's once for the batch. Both checks are dropped.
    for stage in ("sanitize_preprocessors", "autograde_preprocessors"):
        setattr(
            config.Autograde,
            stage,
            [p for p in Autograde.class_traits()[stage].default() if p is not CheckCellMetadata],
        )
    os.chdir(course)
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    began = time.perf_counter()
    graded = api.autograde(ASSIGNMENT, student_id, force=True, create=True)
    seconds = {"autograde": time.perf_counter() - began}
    if not graded["success"]:
        return {"status": "failed", "log": graded.get("log", "") + graded.get("error", "")}
    with Gradebook(
        f"sqlite:///{course / 'gradebook.db'}", config.CourseDirectory.course_id
    ) as gradebook:
        notebook = gradebook.find_submission_notebook(
            NOTEBOOK_NAME[: -len(".ipynb")], ASSIGNMENT, student_id
        )
        scores = {grade.name: (grade.score, grade.max_score) for grade in notebook.grades}
    autograded = course / "autograded" / student_id / ASSIGNMENT / NOTEBOOK_NAME
    return {"status": "graded", "scores": scores, "seconds": seconds, "autograded": str(autograded)}
