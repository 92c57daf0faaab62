"""A learner's "Run all" on a GPU machine that has torch but no Jupyter: every code cell of a
notebook, top to bottom, in one namespace, with the GPU probe's RUN_MODE switched as the learner
switches it. Standard library only, so it runs under any image's python3 beside its torch.

    python3 bench/notebook_on_gpu.py solutions/ch34_prefix_cache.ipynb --mode real_gpu
    python3 bench/notebook_on_gpu.py notebooks/ch34_prefix_cache.ipynb --mode real_gpu --unfinished

Unlike Jupyter's "Run all" it goes on past a failing cell (the student notebook's visible checks
raise until the TODOs are done), so one run shows every cell. Lines starting with `%` or `!`
(notebook-only syntax) are skipped. Writes a Markdown report (each cell's seconds, what it
raised, what it wrote to `sys.stderr` or warned, and the probe cell's whole output) and exits 1
when a cell wrote there, or raised where the notebook is not `--unfinished`. Writes that C code
makes to file descriptor 2 directly are not seen: `make compat` runs the cells in a real kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import warnings
from pathlib import Path

PROBE_LINE = 'RUN_MODE = "dry_run"'


def run_cell(source: str, name: str, namespace: dict) -> dict:
    """Execute one cell; its seconds, what it printed, what it wrote to `sys.stderr` (warnings
    included) and what it raised."""
    out, err = io.StringIO(), io.StringIO()
    raised = ""
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda message, category, *_rest, **_kw: err.write(
                f"{category.__name__}: {message}\n"
            )
            try:
                exec(compile(source, name, "exec"), namespace)
            except Exception as error:  # noqa: BLE001  (reported, and the next cell runs)
                raised = f"{type(error).__name__}: {error}"
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "out": out.getvalue(), "err": err.getvalue(), "raised": raised}


def table_text(text: str, width: int) -> str:
    return text[:width].replace("\n", " ").replace("|", "/")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--mode", choices=("dry_run", "real_gpu"), default="real_gpu")
    parser.add_argument(
        "--unfinished",
        action="store_true",
        help="the TODOs are left (the student release): cells that raise are reported, not failed",
    )
    parser.add_argument("--out", type=Path, help="the report (default: beside the notebook)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    out = args.out or args.notebook.with_suffix(f".{args.mode}.md")

    notebook = json.loads(args.notebook.read_text(encoding="utf-8"))
    cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    namespace = {"__name__": "__main__"}
    lines = [
        f"# {args.notebook}, RUN_MODE = {args.mode!r}",
        "",
        f"- Python {sys.version.split()[0]}; command: `python3 bench/notebook_on_gpu.py "
        f"{' '.join(argv)}`",
        "",
        "| cell | first line | s | raised | stderr |",
        "|---|---|---|---|---|",
    ]
    probe, stderr_cells, raising_cells = None, 0, 0
    for number, cell in enumerate(cells):
        source = "".join(cell["source"])
        is_probe = PROBE_LINE in source
        if is_probe:
            source = source.replace(PROBE_LINE, f'RUN_MODE = "{args.mode}"', 1)
        source = "\n".join(
            line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        ran = run_cell(source, f"<cell {number}>", namespace)
        stderr_cells += bool(ran["err"])
        raising_cells += bool(ran["raised"])
        first = next((line for line in source.splitlines() if line.strip()), "")
        lines.append(
            f"| {number} | `{table_text(first, 60)}` | {ran['seconds']:.2f} | "
            f"{table_text(ran['raised'], 160)} | {table_text(ran['err'], 200)} |"
        )
        if is_probe:
            probe = ran["out"] + (f"\nraised {ran['raised']}" if ran["raised"] else "")
    lines += ["", "## The probe cell's output", "", "```", probe or "(no probe cell)", "```", ""]
    out.write_text("\n".join(lines), encoding="utf-8")
    print(f"{len(cells)} code cells, {raising_cells} raised, {stderr_cells} wrote to stderr; {out}")
    return 1 if stderr_cells or (raising_cells and not args.unfinished) else 0


if __name__ == "__main__":
    sys.exit(main())
