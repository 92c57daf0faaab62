"""The kit's shape: short functions, small folders, no SystemExit in library code (fast tier)."""

import ast
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "grader" / "kit"
MAX_FUNCTION_LINES = 80
MAX_MODULES_A_FOLDER = 9
# The command-line entry points and the sandbox's two scripts may end their process.
EXITING = {"autograde.py", "launcher.py", "zygote_server.py"}


def functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name (N lines)` for every function under `root` longer than `limit` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in functions(ast.parse(path.read_text(encoding="utf-8"))):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_in_the_kit_is_longer_than_80_lines():
    assert long_functions(KIT) == []


def test_the_length_check_can_fail(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def too_long():\n{body}", encoding="utf-8")
    (tmp_path / "short.py").write_text("def fine():\n    return 1\n", encoding="utf-8")
    assert long_functions(tmp_path) == [f"long.py:1 too_long ({MAX_FUNCTION_LINES + 1} lines)"]


def test_no_folder_of_the_kit_holds_more_than_nine_modules():
    for folder in [KIT, *(p for p in KIT.iterdir() if p.is_dir() and p.name != "__pycache__")]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MAX_MODULES_A_FOLDER, (folder, sorted(p.name for p in modules))


def test_library_code_raises_kit_errors_not_system_exit():
    for path in sorted(KIT.rglob("*.py")):
        if path.name in EXITING:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = getattr(call, "id", getattr(call, "attr", ""))
                assert name != "SystemExit", f"{path.relative_to(KIT)}:{node.lineno}"
