"""What the learner receives: no answers, every TODO a stub, the seed's tests, runnable anywhere."""

import ast
import re
import sys
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from grader.kit.authoring.build import SOLUTIONS_ONLY, execute, source_notebook
from grader.kit.authoring.nbsource import (
    CHECKS_DIR,
    NOTEBOOK_NAME,
    REPO_ROOT,
    colab_url,
    github_repo,
    nbgrader_meta,
    read_source,
    strip_solution_markers,
)
from tests.conftest import _REGION, read_nb, todo_of_region

RELEASE = REPO_ROOT / "notebooks" / NOTEBOOK_NAME
SOLUTIONS = REPO_ROOT / "solutions" / NOTEBOOK_NAME
SEED_DIR = REPO_ROOT.parent / "shared" / "seed"
SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


def release():
    return read_nb(RELEASE)


def release_text():
    return RELEASE.read_text(encoding="utf-8")


def test_release_holds_no_solution_line_and_no_hidden_test_line():
    text = "\n".join(cell.source for cell in release().cells)
    source = read_source()
    solution_lines = {
        ln.strip()
        for c in source.cells
        for r in SOLUTION_REGION.findall(c.source)
        for ln in r.splitlines()
    }
    released_lines = {ln.strip() for ln in text.splitlines()}
    # Lines that the given (non-solution) code also has are no leak: `else:`, `break`, a shared lookup.
    given_lines = {
        ln.strip() for c in source.cells for ln in SOLUTION_REGION.sub("", c.source).splitlines()
    }
    leaked = (solution_lines - given_lines) & released_lines
    assert not leaked, f"solution code in the release: {sorted(leaked)[:5]}"
    # A hidden line that the shown code also has (`import random`, `else:`) proves nothing.
    hidden_lines = {
        ln.strip()
        for c in source.cells
        for r in HIDDEN_REGION.findall(c.source)
        for ln in r.splitlines()
    }
    shown_lines = {
        ln.strip() for c in source.cells for ln in HIDDEN_REGION.sub("", c.source).splitlines()
    }
    leaked = (hidden_lines - shown_lines) & released_lines
    assert not leaked, f"hidden tests in the release: {sorted(leaked)[:5]}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "_hidden_todo"):
        assert marker not in release_text()


def test_solutions_only_analysis_is_left_out_of_the_release():
    analysis = [
        c.source
        for c in source_notebook(for_release=False).cells
        if SOLUTIONS_ONLY in c.metadata.get("tags", [])
    ]
    assert analysis, "the source should carry the 解析 as solutions-only cells"
    for text in analysis:
        assert text not in release_text()


def test_every_todo_region_becomes_a_stub_that_raises_not_implemented():
    source_regions = sum(len(SOLUTION_REGION.findall(c.source)) for c in read_source().cells)
    stubs = sum(
        c.source.count("raise NotImplementedError()")
        for c in release().cells
        if nbgrader_meta(c).get("solution")
    )
    assert stubs == source_regions > 0


def test_core_todos_are_worth_32_points_and_numbered_in_the_seed_order():
    grades = [nbgrader_meta(c) for c in release().cells if nbgrader_meta(c).get("grade")]
    core = [g for g in grades if re.match(r"test_todo[1-8]_", g["grade_id"])]
    order = [g["grade_id"].split("_")[1] for g in core]
    # Each TODO's checks are consecutive grade cells, the TODOs in the seed's order.
    assert [t for i, t in enumerate(order) if i == 0 or order[i - 1] != t] == [
        f"todo{i}" for i in range(1, 9)
    ]
    assert sum(g["points"] for g in core) == 32  # docs/grading.md: points follow difficulty


def test_the_class_the_learner_completes_is_one_code_cell_with_the_seed_api():
    cells = [c for c in release().cells if "class PrefixCacheManager" in c.source]
    assert len(cells) == 1 and nbgrader_meta(cells[0]).get("solution")
    tree = ast.parse(cells[0].source)
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef))
    methods = {
        f.name: [a.arg for a in f.args.args] for f in cls.body if isinstance(f, ast.FunctionDef)
    }
    assert methods == {
        "__init__": ["self", "block_size"],
        "_normalize": ["self", "tokens"],
        "_chunk_tokens": ["self", "tokens"],
        "add_prefix": ["self", "prefix_tokens"],
        "match_prefix": ["self", "prompt_tokens"],
        "split_prompt": ["self", "prompt_tokens"],
        "chunked_prefill_plan": ["self", "prompt_tokens"],
        "cache_stats": ["self", "prompt_tokens"],
        "chunked_suffix_prefill_plan": ["self", "prompt_tokens"],
    }
    todo_order = [int(n) for n in re.findall(r"# TODO (\d+):", cells[0].source)]
    assert todo_order == list(range(1, 9))


def test_check_files_appear_neither_in_the_release_nor_in_the_solutions():
    files = sorted(CHECKS_DIR.glob("*.py"))
    assert files, f"no check files in {CHECKS_DIR}"
    # A line the notebook shows anyway (`import random`, a closing bracket) proves nothing.
    shown = {
        ln.strip()
        for c in read_source().cells
        for ln in HIDDEN_REGION.sub("", c.source).splitlines()
    }
    for notebook in (RELEASE, SOLUTIONS):
        text = "\n".join(cell.source for cell in read_nb(notebook).cells)
        lines = {ln.strip() for ln in text.splitlines()}
        for path in files:
            hidden = {ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()}
            leaked = (hidden - shown - {""}) & lines
            assert not leaked, f"{path.name} in {notebook.name}: {sorted(leaked)[:5]}"
        for marker in ("#| check:", "_hidden_code", "<hidden check>", "check_todo1_basic"):
            assert marker not in text, f"{marker!r} in {notebook.name}"


def assert_expressions(source: str) -> list[str]:
    """Each assert's condition, as ast.dump (quotes, spacing and message do not matter)."""
    return [ast.dump(n.test) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assert)]


def test_visible_test_cell_keeps_every_assertion_of_the_seed():
    seeds = sorted(SEED_DIR.glob("*.txt"))
    if not seeds:
        pytest.skip(f"the seed chapter is not at {SEED_DIR}")
    seed = seeds[0].read_text(encoding="utf-8")
    seed_test = seed[
        seed.index("def test_prefix_cache_manager") : seed.index("test_prefix_cache_manager()🛑")
    ]
    # The seed's text lost its indentation: each assert is read as a line of its own.
    seed_asserts = [
        expression
        for ln in seed_test.splitlines()
        if ln.strip().startswith("assert")
        for expression in assert_expressions(ln.strip())
    ]
    cell = next(c for c in release().cells if c.id == "visible_tests")
    cell_asserts = Counter(assert_expressions(cell.source))
    assert len(seed_asserts) == 14, "the seed test has 14 assertions"
    # The cell may add checks (and messages), but keeps each of the seed's conditions. Their
    # order is the TODOs' (the seed checked TODO 6's second block size after TODO 8).
    missing = Counter(seed_asserts) - cell_asserts
    assert not missing, f"seed assertions missing from the visible cell: {list(missing)}"


def test_every_visible_assertion_has_a_message_naming_its_todo():
    cell = next(c for c in release().cells if c.id == "visible_tests")
    asserts = [n for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Assert)]
    assert len(asserts) >= 18
    for node in asserts:
        assert node.msg is not None, f"line {node.lineno}: an assert without a message"
        assert re.match(r"TODO [1-8]: ", ast.unparse(node.msg).lstrip("f'\""))


def test_first_cell_opens_in_colab_as_the_course_setting_says_and_has_modelscope_instructions():
    first = release().cells[0]
    assert first.cell_type == "markdown"
    assert "{{" not in first.source, "every placeholder is filled"
    repo = github_repo()
    if repo:  # a badge to the repository grader/course.toml (or the git remote) names
        assert f"]({colab_url(repo)})" in first.source and "colab-badge.svg" in first.source
    else:  # no repository anywhere: no badge to a placeholder, the upload steps instead
        assert "colab-badge.svg" not in first.source and "github/" not in first.source
        assert "上传笔记本" in first.source
    assert "魔搭" in first.source and "ModelScope" in first.source


# Packages the notebook may use when they are installed; each import of one sits in a `try` that
# catches ImportError (plots, rendered tables; part five: the hubs, the tokenizer, the chat template, the reference model).
OPTIONAL_PACKAGES = {
    "matplotlib", "IPython", "modelscope", "huggingface_hub", "tokenizers", "jinja2", "transformers"
}  # fmt: skip


def _guarded_by_import_error(node, parents) -> bool:
    """Is `node` inside the body of a try whose handlers catch ImportError?"""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Try) and node in parent.body:
            caught = [h.type for h in parent.handlers]
            if any(
                isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError")
                for t in caught
            ):
                return True
        node = parent
    return False


def test_student_notebook_imports_only_the_standard_library_and_torch():
    allowed = set(sys.stdlib_module_names) | {"torch"}
    for cell in release().cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top in OPTIONAL_PACKAGES:
                    assert _guarded_by_import_error(node, parents), (
                        f"{name} must stay optional (import it in try/except ImportError)"
                    )
                else:
                    assert top in allowed, f"the student notebook imports {name}"
    assert "matplotlib" not in release_text() or "except ImportError" in release_text(), (
        "matplotlib must stay optional"
    )


@pytest.mark.slow  # a Jupyter kernel runs the release top to bottom
def test_untouched_student_notebook_runs_top_to_bottom_and_only_the_checks_fail(tmp_path):
    nb = release()
    execute(nb, tmp_path, allow_errors=True)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if cell.id == "visible_tests":
            assert [e.ename for e in errors] == ["NotImplementedError"], (
                "the visible tests should ask for the TODOs"
            )
        elif cell.id.startswith("visible_todo"):
            # parts two and three: a check whose earlier TODO is unfinished skips instead of failing
            assert [e.ename for e in errors] in ([], ["NotImplementedError"]), (
                f"{cell.id}: {errors}"
            )
        elif nbgrader_meta(cell).get(
            "grade"
        ):  # a grade cell shows little or nothing until its hidden tests run
            assert [e.ename for e in errors] in ([], ["NotImplementedError"]), (
                f"{cell.id}: {errors}"
            )
        else:
            assert not errors, (
                f"cell {cell.id} raises {errors[0].ename if errors else ''} in the untouched notebook"
            )
    assert (
        nb.cells[-1].cell_type == "code" and "run_chunked_gpu_probe(RUN_MODE" in nb.cells[-1].source
    )
    assert "模式：dry_run" in "".join(o.get("text", "") for o in nb.cells[-1].outputs)


def test_first_cell_and_each_part_heading_give_the_points_and_whether_they_count():
    from grader.kit.authoring.nbsource import PARTS, part_of

    cells = release().cells
    grades = [nbgrader_meta(c) for c in cells if nbgrader_meta(c).get("grade")]
    counted = sum(g["points"] for g in grades if part_of(g["grade_id"]).counted)
    assert f"{counted} 分" in cells[0].source and "不计入" in cells[0].source
    headings = [
        ln
        for c in cells
        if c.cell_type == "markdown"
        for ln in c.source.splitlines()
        if ln.startswith("## 第")
    ]
    assert [h[:7] for h in headings] == [
        "## 第一部分",
        "## 第二部分",
        "## 第三部分",
        "## 第四部分",
        "## 第五部分",
    ]
    points = {p.key: sum(g["points"] for g in grades if part_of(g["grade_id"]) is p) for p in PARTS}
    said = [f"{points[p.key]:g} 分，{'计分' if p.counted else '单独计分'}" for p in PARTS]
    assert all(words in heading for words, heading in zip(said, headings)), (said, headings)
    assert "选做" in headings[2] and "单独计分" in headings[2]
    assert [p.key for p in PARTS if not p.counted] == ["block"]
    left = re.findall(r"\{\{[\w:]+\}\}", "\n".join(c.source for c in cells))
    assert not left, f"placeholders left unfilled: {left}"


def test_sections_follow_one_numbering_and_no_cell_claims_to_be_the_last_too_early():
    cells = release().cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    # "34.1" would be a chapter-style section number; a version such as vLLM 0.34.0 is not
    assert not re.search(r"Step \d|(?<![\d.])34\.\d", text), "one numbering scheme: part.section"
    for index, cell in enumerate(cells[:-1]):
        if cell.cell_type == "markdown":
            assert "最后一个单元格" not in cell.source, f"cell {index} says it is the last"


def test_release_validates_as_nbformat_4_5():
    nb = release()
    nbformat.validate(nb)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5)
    assert Path(RELEASE).read_bytes().endswith(b"\n")


def test_student_notebook_parses_as_python_3_10_for_modelscope():
    for cell in release().cells:
        if cell.cell_type == "code":
            ast.parse(cell.source, feature_version=(3, 10))


FOLD_TITLE = re.compile(r"# ?@title \S")


@pytest.mark.parametrize("path", [RELEASE, SOLUTIONS], ids=["release", "solutions"])
def test_provided_code_opens_folded_under_its_title_and_the_learners_cells_stay_open(path):
    """A `#@title` cell carries Colab's and JupyterLab's fold keys; no other cell does, and no
    cell the learner writes in starts folded (its nbgrader metadata is the source's)."""
    nb = read_nb(path)
    source = {nbgrader_meta(c).get("grade_id"): nbgrader_meta(c) for c in read_source().cells}
    folded = 0
    for cell in nb.cells:
        titled = cell.cell_type == "code" and bool(FOLD_TITLE.match(cell.source))
        keys = {k: cell.metadata[k] for k in ("cellView", "jupyter") if k in cell.metadata}
        want = {"cellView": "form", "jupyter": {"source_hidden": True}} if titled else {}
        assert keys == want, f"{cell.id}: {keys}"
        meta = nbgrader_meta(cell)
        assert not (titled and meta.get("solution")), f"{cell.id}: the learner's cell is folded"
        if titled and meta:  # the release adds a checksum and the cell type, nothing else
            declared = source[meta["grade_id"]]
            assert {k: meta[k] for k in declared} == declared, f"{cell.id}: nbgrader changed"
        folded += titled
    assert folded >= 15, f"only {folded} cells fold"


def test_no_hint_is_folded_inside_another():
    for cell in release().cells:
        if cell.cell_type != "markdown":
            continue
        depth = 0
        for tag in re.findall(r"</?details>", cell.source):
            depth += 1 if tag == "<details>" else -1
            assert 0 <= depth <= 1, f"{cell.id}: a <details> inside another"
        assert depth == 0, f"{cell.id}: an unclosed <details>"


def _solution_lines_by_todo() -> dict[int, set[str]]:
    """Each TODO's reference code, one line at a time with its spaces removed; lines shorter than
    14 characters (`return out`, `i += 1`) say too little to count as giving the answer away."""
    lines: dict[int, set[str]] = {}
    for cell in read_source().cells:
        if not nbgrader_meta(cell).get("solution"):
            continue
        for match in _REGION.finditer(cell.source):
            todo = todo_of_region(cell, cell.source[: match.start()])
            for line in strip_solution_markers(match.group(0)).splitlines():
                code = re.sub(r"\s+", "", line.split("#")[0])
                if len(code) >= 14:
                    lines.setdefault(todo, set()).add(code)
    return lines


def test_no_hint_holds_a_line_of_its_todos_answer():
    """The notebook promises 提示里没有答案代码: no hint has a code block, and none quotes a line of
    its TODO's reference answer (compared without spaces)."""
    answers = _solution_lines_by_todo()
    hints = 0
    for cell in release().cells:
        if cell.cell_type != "markdown":
            continue
        for todo, body in re.findall(
            r"<details><summary>TODO (\d+)(?: · \w+)? · 提示 \d+</summary>(.*?)</details>",
            cell.source,
            re.S,
        ):
            hints += 1
            assert "```" not in body, f"TODO {todo}'s hint has a code block: {body[:120]}"
            text = re.sub(r"\s+", "", body)
            quoted = [line for line in answers.get(int(todo), ()) if line in text]
            assert not quoted, f"TODO {todo}'s hint quotes its answer: {quoted}"
    assert hints >= 2 * 24, f"only {hints} hints found"
