"""Grade one submission in a process forked from the batch's pool (`pool.py`).

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
import time
import warnings
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.converters import Autograde
from nbgrader.coursedir import CourseDirectory
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import CheckCellMetadata, Execute
from traitlets.config.loader import PyFileConfigLoader

from .. import paths
from ..faults.kinds import summary
from ..faults.resume import ResumingExecute
from ..paths import ASSIGNMENT
from ..sandbox import cgroups, reaper
from ..sandbox.kernel_setup import KERNEL_NAME, kernel_settings, prepare_kernel
from .limits import Limits


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
    resource.setrlimit(resource.RLIMIT_AS, (limits.grader_address_space,) * 2)
    prepare_kernel(workdir, limits)
    os.environ.update(kernel_settings(workdir, limits, sandbox, threads, groups, zygote))
    scratch_gradebook_without_sync()
    ResumingExecute.cgroups = tuple(groups)
    result = run_nbgrader(workdir, student_id, limits)
    reaper.kill_descendants()  # the kernel is gone; anything the notebook started goes too
    (workdir / "result.json").write_text(json.dumps(result, ensure_ascii=False))
    os._exit(0)  # skip atexit handlers inherited from the parent


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
    # A kernel that dies or will not stop costs only its cell (`faults/resume.py`).
    swap = {CheckCellMetadata: None, Execute: ResumingExecute}
    for stage in ("sanitize_preprocessors", "autograde_preprocessors"):
        default = Autograde.class_traits()[stage].default()
        setattr(config.Autograde, stage, [swap.get(p, p) for p in default if swap.get(p, p)])
    os.chdir(course)
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    began = time.perf_counter()
    graded = api.autograde(ASSIGNMENT, student_id, force=True, create=True)
    seconds = {"autograde": time.perf_counter() - began}
    if not graded["success"]:
        log = graded.get("log", "") + graded.get("error", "")
        return {"status": "failed", "log": log, "faults": summary(ResumingExecute.faults)}
    with Gradebook(
        f"sqlite:///{course / 'gradebook.db'}", config.CourseDirectory.course_id
    ) as gradebook:
        notebook = gradebook.find_submission_notebook(paths.NOTEBOOK_ID, ASSIGNMENT, student_id)
        scores = {grade.name: (grade.score, grade.max_score) for grade in notebook.grades}
    autograded = paths.autograded_notebook(course, student_id)
    return {
        "status": "graded",
        "scores": scores,
        "seconds": seconds,
        "autograded": str(autograded),
        "causes": [cause.reason for cause in ResumingExecute.causes],
        "faults": summary(ResumingExecute.faults),
    }
