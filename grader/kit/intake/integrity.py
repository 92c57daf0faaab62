"""Find code in a submission that tries to earn points without solving the exercise.

The sandbox keeps hidden tests and the gradebook out of the kernel's reach, and the grade
cells compare exact types against oracles, so most cheats simply fail. What remains are
tricks that change how the grade cells themselves run: replacing builtins, IPython input or
AST transformers that rewrite later cells, poking at the grader's environment, or leaving the
kernel through its back door. `scan()` looks for them in the learner's own cells (answer
and scratch cells; the release's locked cells are restored before grading anyway) with the
`ast` module, without running anything. A finding flags the submission: it scores 0 and its
row names the finding, so the instructor can look at it.
"""

from __future__ import annotations

import ast

# Names whose mere use in this exercise means the code is reaching for the grader.
SUSPICIOUS_NAMES = {
    "builtins": "uses the builtins module",
    "__builtins__": "touches __builtins__",
    "ast_transformers": "installs an IPython AST transformer (rewrites later cells)",
    "input_transformers_post": "installs an IPython input transformer (rewrites later cells)",
    "input_transformers_cleanup": "installs an IPython input transformer (rewrites later cells)",
    "input_transformer_manager": "installs an IPython input transformer (rewrites later cells)",
    "NBGRADER_EXECUTION": "looks for the grader's environment variable",
    "settrace": "installs a trace function",
    "setprofile": "installs a profile function",
    "_getframe": "inspects the caller's frames",
    "f_back": "inspects the caller's frames",
    "f_globals": "inspects another frame's globals",
    "f_locals": "inspects another frame's locals",
}
SUSPICIOUS_STRINGS = {
    "gradebook": "reads the gradebook",
    "nbgrader": "refers to nbgrader",
    "HIDDEN TESTS": "looks for hidden tests",
    ".ipynb": "opens a notebook file",
}
SUSPICIOUS_CALLS = {
    ("sys", "modules"): "rewrites sys.modules",
    ("events", "register"): "registers an IPython event hook (runs code around every cell)",
}


def scan(cells) -> list[str]:
    """Findings (one line each) in the given code cells' sources; [] when nothing is suspicious."""
    findings = []
    for index, source in cells:
        try:
            tree = ast.parse(_python_only(source))
        except SyntaxError:
            continue  # it cannot run either; the grade cells will say so
        for what in _suspicious(tree):
            line = f"cell {index}: {what}"
            if line not in findings:
                findings.append(line)
    return findings


def learner_cells(nb) -> list[tuple[int, str]]:
    """(index, source) of every code cell the learner wrote: answer cells and scratch cells."""
    cells = []
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or not meta):
            cells.append((index, cell.source))
    return cells


def _suspicious(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in SUSPICIOUS_NAMES:
            yield SUSPICIOUS_NAMES[node.id]
        elif isinstance(node, ast.Attribute):
            if node.attr in SUSPICIOUS_NAMES:
                yield SUSPICIOUS_NAMES[node.attr]
            if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in SUSPICIOUS_CALLS:
                yield SUSPICIOUS_CALLS[(node.value.id, node.attr)]
            if (
                isinstance(node.value, ast.Attribute)
                and (node.value.attr, node.attr) in SUSPICIOUS_CALLS
            ):
                yield SUSPICIOUS_CALLS[(node.value.attr, node.attr)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                module = (node.module if isinstance(node, ast.ImportFrom) else alias.name) or ""
                if module.split(".")[0] in SUSPICIOUS_NAMES or alias.name in SUSPICIOUS_NAMES:
                    yield SUSPICIOUS_NAMES.get(
                        module.split(".")[0], SUSPICIOUS_NAMES.get(alias.name)
                    )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for needle, what in SUSPICIOUS_STRINGS.items():
                if needle.lower() in node.value.lower():
                    yield what


def _python_only(source: str) -> str:
    """Drop IPython magics and shell escapes, which `ast` cannot parse."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )
