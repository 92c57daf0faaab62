"""Generate the student notebook, the solutions notebook and the nbgrader course from the one source.

    python -m grader.kit.authoring.build [--out DIR] [--no-execute] {notebooks,solutions,all}

`notebooks` runs the real `nbgrader generate_assignment` in a course directory
(`DIR/build/course`, kept for the autograder) and writes its release to
`DIR/notebooks/`. `solutions` writes `DIR/solutions/`: the source with the solution
markers and hidden tests removed, executed in a fresh kernel. Output is deterministic:
cell ids come from grade ids and positions, metadata is reduced to what nbgrader and
Jupyter need, and nothing records a time or a path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

from .. import paths
from ..errors import BuildError, run_command
from ..paths import ASSIGNMENT, GRADING_COURSE, REPO_ROOT, STUDENT_RELEASE
from ..sandbox.kernel_setup import kernel_tempdir
from .figures import check_rendered, figure_texts
from .nbsource import (
    colab_texts,
    fold_keys,
    github_repo,
    inline_checks,
    nbgrader_meta,
    points_texts,
    read_source,
    strip_hidden_tests,
    strip_solution_markers,
)

CONFIG_PATH = paths.NBGRADER_CONFIG
SOLUTIONS_ONLY = "solutions-only"
MEASUREMENT = "measurement"
LEARNER_ONLY = "learner-only"  # demos and the measurements' helpers: graded code never uses them
# What the grading course holds in place of such cells (a feedback page shows it).
SKIPPED_IN_GRADING = {
    MEASUREMENT: "# 测量单元格：自动评分时跳过（它不计分，只耗时间）。\n",
    LEARNER_ONLY: "# 演示与测量工具：自动评分时跳过（不计分，评分用到的代码不依赖它）。\n",
}
# jp-MarkdownHeadingCollapsed: the heading over a part's grade cells opens collapsed (checkcells).
KEPT_CELL_METADATA = ("nbgrader", "tags", "editable", "deletable", "jp-MarkdownHeadingCollapsed")
NOTEBOOK_METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}
EXECUTE_TIMEOUT_S = 300


def source_notebook(*, for_release: bool, for_grading: bool = False) -> nbformat.NotebookNode:
    """The parsed source with the Colab address filled in.

    `for_release` drops solutions-only cells; `for_grading` also empties the cells nothing graded
    needs (measurements, demos, the measurements' helpers: tagged `SKIPPED_IN_GRADING`), which
    the autograder then restores into every submission in place of the learner's copy.
    Grade cells get the hidden checks they name inlined (`nbsource.inline_checks`); a markdown
    cell's `{{figure:NAME}}` becomes the figure and its caption (`figures.figure_texts`).
    """
    nb = read_source()
    filled = {**colab_texts(github_repo()), **points_texts(nb), **figure_texts(nb.cells)}
    for cell in nb.cells:
        for placeholder, text in filled.items():
            cell.source = cell.source.replace(placeholder, text)
        if cell.cell_type == "code" and nbgrader_meta(cell).get("grade"):
            cell.source = inline_checks(cell.source)
        skipped = [t for t in cell.metadata.get("tags", []) if t in SKIPPED_IN_GRADING]
        if for_grading and skipped:
            cell.source = SKIPPED_IN_GRADING[skipped[0]]
    if for_release or for_grading:
        nb.cells = [c for c in nb.cells if SOLUTIONS_ONLY not in c.metadata.get("tags", [])]
    return canonical(nb)


def build_course(course_dir: Path, *, for_grading: bool = False) -> Path:
    """Make an nbgrader course in `course_dir` and release the assignment; return the release notebook.

    The grading course differs from the release course only in the cells `SKIPPED_IN_GRADING` empties.
    """
    if course_dir.exists():
        shutil.rmtree(course_dir)
    source = paths.course_source_notebook(course_dir)
    source.parent.mkdir(parents=True)
    shutil.copy(CONFIG_PATH, course_dir / "nbgrader_config.py")
    write_notebook(source_notebook(for_release=True, for_grading=for_grading), source)
    # nbgrader runs `alembic` by bare name when it creates the gradebook.
    env = dict(
        os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
        cwd=course_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    release = paths.released_notebook(course_dir)
    if run.returncode != 0 or not release.exists():
        raise BuildError(f"nbgrader generate_assignment failed:\n{run.stdout}\n{run.stderr}")
    return release


def student_notebook(course_dir: Path) -> nbformat.NotebookNode:
    """nbgrader's release, made deterministic."""
    release = build_course(course_dir)
    return canonical(nbformat.read(release, as_version=4))


def solutions_notebook(*, run: bool = True) -> nbformat.NotebookNode:
    """The reference notebook: solutions in place, no markers, no hidden tests, executed."""
    nb = source_notebook(for_release=False)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.source = strip_solution_markers(cell.source).rstrip("\n")
        if nbgrader_meta(cell).get("grade"):
            cell.source = strip_hidden_tests(cell.source).rstrip("\n")
    if run:
        workdir = kernel_tempdir("ch34-solutions-")
        try:
            execute(nb, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return canonical(nb, keep_outputs=True)


def execute(nb, workdir: Path, *, kernel_name: str = "python3", allow_errors: bool = False) -> None:
    """Run `nb` in place in a fresh kernel whose working directory is `workdir`.

    The kernel talks over local IPC sockets in `workdir`: no TCP warning, no port races.
    It is killed once the last cell has run: a graceful shutdown only waits (about 0.9 s).
    """
    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(workdir / "kernel")
    NotebookClient(
        nb,
        timeout=EXECUTE_TIMEOUT_S,
        kernel_name=kernel_name,
        allow_errors=allow_errors,
        record_timing=False,
        shutdown_kernel="immediate",
        resources={"metadata": {"path": str(workdir)}},
        config=config,
    ).execute()


def canonical(nb: nbformat.NotebookNode, *, keep_outputs: bool = False) -> nbformat.NotebookNode:
    """Deterministic ids, minimal metadata, and (unless `keep_outputs`) no outputs.

    A `#@title` cell gets the keys that start it folded (`nbsource.fold_keys`); no other cell
    keeps any, so a fold follows the source and nothing else.
    """
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = nbformat.from_dict(NOTEBOOK_METADATA)
    for index, cell in enumerate(nb.cells):
        grade_id = nbgrader_meta(cell).get("grade_id")
        cell.id = grade_id if grade_id else f"cell-{index:03d}"
        cell.metadata = nbformat.from_dict(
            {
                **{k: v for k, v in cell.metadata.items() if k in KEPT_CELL_METADATA},
                **fold_keys(cell),
            }
        )
        if cell.cell_type == "code":
            if not keep_outputs:
                cell.outputs, cell.execution_count = [], None
            for output in cell.get("outputs", []):
                output.get("metadata", {}).pop("execution", None)
        if not cell.get("attachments"):
            cell.pop("attachments", None)
    nbformat.validate(nb)
    return nb


def same_but_outputs(nb: nbformat.NotebookNode, path: Path) -> bool:
    """True when the notebook at `path` equals `nb` in everything but code cells' outputs.

    The solutions' measurement cells print this run's timings: a rebuild from the same source
    differs there and nowhere else. Neither argument is modified.
    """
    try:
        other = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return False

    def skeleton(notebook):
        run = ("outputs", "execution_count")
        return notebook.metadata, [
            {k: v for k, v in cell.items() if k not in run} for cell in notebook.cells
        ]

    return skeleton(nb) == skeleton(other)


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write atomically, so a half-written notebook never replaces a good one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".ipynb.tmp")
    tmp.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv=None) -> int:
    """The command line: the kit's errors become their message and exit status."""
    return run_command(run, argv)


def run(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["notebooks", "solutions", "all"])
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT, help="root of the outputs (default: the repo)"
    )
    parser.add_argument(
        "--no-execute", action="store_true", help="write the solutions without running them"
    )
    parser.add_argument(
        "--rewrite",
        action="store_true",
        help="write the solutions even when only their outputs (timings) changed",
    )
    args = parser.parse_args(argv)
    check_rendered()  # a figure drawn differently from its committed PNG: stop before writing
    start = time.perf_counter()
    if args.what in ("notebooks", "all"):
        target = args.out / paths.STUDENT_NOTEBOOK
        # The two courses are independent: their `nbgrader generate_assignment` runs overlap.
        with ThreadPoolExecutor(max_workers=2) as pool:
            grading = pool.submit(build_course, args.out / GRADING_COURSE, for_grading=True)
            student = student_notebook(args.out / paths.COURSE)
            grading.result()
        write_notebook(student, target)
        write_notebook(student, args.out / GRADING_COURSE / STUDENT_RELEASE)
        print(f"wrote {target.relative_to(args.out)}, build/course and {GRADING_COURSE}")
    if args.what in ("solutions", "all"):
        target = args.out / paths.SOLUTIONS_NOTEBOOK
        fresh = solutions_notebook(run=not args.no_execute)
        seconds = time.perf_counter() - start
        if not args.rewrite and target.exists() and same_but_outputs(fresh, target):
            # Only the measurement cells' timings moved: keep the committed run, keep git clean.
            print(
                f"kept {target.relative_to(args.out)}: same source, outputs differ only ({seconds:.1f} s)"
            )
        else:
            write_notebook(fresh, target)
            print(f"wrote {target.relative_to(args.out)} ({seconds:.1f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
