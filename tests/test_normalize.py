"""normalize_submission: every submission is rebuilt on the release before nbgrader sees it.

A small synthetic release (prose, a locked setup cell, two solution cells, two grade cells) and
a correct submission made from it; each test damages the submission the way one scenario does
and asserts on the exact structure that comes back. No kernel runs here.
"""

import codecs
import copy
import json
import re
from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat import v4

from grader.kit.intake.normalize import Ungradable, normalize_submission, repairs_summary

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_NOTEBOOK = REPO_ROOT / "notebooks" / "ch34_prefix_cache.ipynb"
REAL_SOLUTIONS = REPO_ROOT / "solutions" / "ch34_prefix_cache.ipynb"

INTRO = "# 第 34 章：前缀缓存\n\n本节实现一个按块哈希的前缀缓存。"
SETUP = '''import hashlib

BLOCK_SIZE = 4


def block_hash(parent, tokens):
    """给定的辅助函数：链式哈希。"""
    return hashlib.sha256(repr((parent, tuple(tokens))).encode()).hexdigest()'''
MANAGER_HEAD = '''class PrefixCacheManager:
    """按块管理前缀缓存。"""

    def __init__(self, block_size):
        self.block_size = block_size

    def normalize(self, tokens):
        """TODO 1: 把 tokens 变成 list[int]。"""
'''
MANAGER_MID = '''
    def chunk_tokens(self, tokens):
        """TODO 2: 按 block_size 切块，丢掉不满的尾块。"""
'''
STUB_BODY = "        # YOUR CODE HERE\n        raise NotImplementedError()\n"
MANAGER_STUB = MANAGER_HEAD + STUB_BODY + MANAGER_MID + STUB_BODY
MANAGER_DONE = (
    MANAGER_HEAD
    + "        return [int(t) for t in tokens]\n"
    + MANAGER_MID
    + "        n = len(tokens) // self.block_size * self.block_size\n"
    + "        return [list(tokens[i:i + self.block_size])"
    + " for i in range(0, n, self.block_size)]\n"
)
TEST1 = '''# TODO 1: normalize 返回 list[int]
m = PrefixCacheManager(4)
assert m.normalize((1, 2)) == [1, 2], "TODO 1: 应返回 list"
assert type(m.normalize([3])) is list, "TODO 1: 类型必须是 list"'''
TEST2 = '''# TODO 2: chunk_tokens 只保留满块
m = PrefixCacheManager(2)
assert m.chunk_tokens([1, 2, 3]) == [[1, 2]], "TODO 2: 丢掉不满的尾块"'''
PART2 = "## 分块预填充\n\n实现 `chunked_prefill`：把 prompt 按 chunk_size 分段。"
PREFILL_HEAD = '''def chunked_prefill(manager, tokens, chunk_size):
    """TODO 3: 按 chunk_size 分段预填充，返回段列表。"""
'''
PREFILL_STUB = PREFILL_HEAD + "    # YOUR CODE HERE\n    raise NotImplementedError()\n"
PREFILL_DONE = (
    PREFILL_HEAD
    + "    return [tokens[i:i + chunk_size] for i in range(0, len(tokens), chunk_size)]\n"
)

# (id, type, grade_id or None, role, release source, learner source)
LAYOUT = [
    ("intro", "markdown", None, None, INTRO, INTRO),
    ("setup", "code", "setup", "locked", SETUP, SETUP),
    ("manager", "code", "prefix_cache_manager", "solution", MANAGER_STUB, MANAGER_DONE),
    ("t1", "code", "test_todo1_normalize", "grade", TEST1, TEST1),
    ("t2", "code", "test_todo2_chunk_tokens", "grade", TEST2, TEST2),
    ("part2", "markdown", None, None, PART2, PART2),
    ("prefill", "code", "chunked_prefill_impl", "solution", PREFILL_STUB, PREFILL_DONE),
]
GRADE_IDS = [gid for _, _, gid, _, _, _ in LAYOUT if gid]


def _nbgrader(grade_id, role):
    meta = {
        "grade": role == "grade",
        "grade_id": grade_id,
        "locked": role != "solution",
        "schema_version": 3,
        "solution": role == "solution",
        "task": False,
    }
    if role == "grade":
        meta["points"] = 1
    return meta


def make_release() -> nbformat.NotebookNode:
    cells = []
    for cell_id, cell_type, gid, role, source, _ in LAYOUT:
        metadata = {"nbgrader": _nbgrader(gid, role)} if gid else {}
        if role in ("locked", "grade"):
            metadata.update(deletable=False, editable=False)
        maker = v4.new_code_cell if cell_type == "code" else v4.new_markdown_cell
        cells.append(maker(source=source, metadata=metadata, id=cell_id))
    return v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
    )


def make_submission() -> dict:
    """A correct learner notebook as JSON: the release with both TODO cells filled in."""
    nb = make_release()
    for cell, (*_, learner_source) in zip(nb.cells, LAYOUT):
        cell.source = learner_source
    return json.loads(nbformat.writes(nb))


def scratch(source, cell_id, cell_type="code"):
    maker = {"code": v4.new_code_cell, "markdown": v4.new_markdown_cell}[cell_type]
    return json.loads(json.dumps(maker(source=source, id=cell_id)))


def run(data) -> tuple[list, list[str]]:
    """Normalise JSON `data`; return the shape of the result and its repair lines."""
    result = normalize_submission(json.dumps(data).encode(), make_release())
    _assert_gradable(result.notebook)
    return shape(result.notebook), result.repairs


def shape(nb) -> list[tuple]:
    """(type, grade_id or None, source) of every cell, in order."""
    return [
        (c.cell_type, c.metadata.get("nbgrader", {}).get("grade_id"), c.source) for c in nb.cells
    ]


def _assert_gradable(nb):
    """Valid 4.5; every release cell with nbgrader metadata appears once, in release order,
    with the release's exact metadata; code cells carry no outputs."""
    nbformat.validate(nb)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5)
    release = {
        c.metadata["nbgrader"]["grade_id"]: c.metadata
        for c in make_release().cells
        if "nbgrader" in c.metadata
    }
    graded = [c for c in nb.cells if "nbgrader" in c.metadata]
    assert [c.metadata.nbgrader.grade_id for c in graded] == GRADE_IDS
    for cell in graded:
        assert cell.metadata == release[cell.metadata.nbgrader.grade_id]
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids)
    assert all(
        c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code"
    )


FILLED = [(cell_type, gid, learner) for _, cell_type, gid, _, _, learner in LAYOUT]


def index(grade_id_or_id: str) -> int:
    return next(k for k, row in enumerate(LAYOUT) if grade_id_or_id in (row[0], row[2]))


# ------------------------------------------------------------------------------- scenarios


def test_unchanged_submission_needs_no_repair():
    result = normalize_submission(json.dumps(make_submission()).encode(), make_release())
    assert shape(result.notebook) == FILLED
    assert [c.id for c in result.notebook.cells] == [row[0] for row in LAYOUT]
    assert result.repairs == []
    assert repairs_summary(result.repairs) == "no repairs"


def test_colab_copy_with_all_nbgrader_metadata_stripped():
    data = make_submission()
    data["nbformat_minor"] = 0
    for k, cell in enumerate(data["cells"]):
        cell["metadata"] = {"id": f"colab{k}x", "colab": {"base_uri": "https://localhost:8080/"}}
        del cell["id"]
    got, repairs = run(data)
    assert got == FILLED
    assert repairs == [
        "upgraded notebook format 4.0 to 4.5",
        "assigned 7 missing cell ids",
        "removed Colab metadata from 7 cells",
        (
            "re-attached 5 cells whose nbgrader metadata was lost: setup, prefix_cache_manager, "
            "test_todo1_normalize, test_todo2_chunk_tokens, chunked_prefill_impl"
        ),
    ]


def test_colab_metadata_removed():
    data = make_submission()
    data["metadata"].update(colab={"provenance": []}, accelerator="GPU")
    for cell in data["cells"]:
        cell["metadata"].update(id="abc", outputId="x-1", executionInfo={"status": "ok"})
    data["cells"].append(scratch("x = 1", "mine"))
    data["cells"][-1]["metadata"] = {"colab": {}, "tags": ["keep", "a,b", "keep"]}
    result = normalize_submission(json.dumps(data).encode(), make_release())
    _assert_gradable(result.notebook)
    assert result.notebook.metadata == make_release().metadata
    text = nbformat.writes(result.notebook)
    for key in ("colab", "outputId", "executionInfo", "accelerator"):
        assert key not in text
    assert result.notebook.cells[-1].metadata == {"tags": ["keep"]}
    assert result.repairs == [
        "removed Colab notebook metadata (accelerator, colab)",
        "removed Colab metadata from 8 cells",
    ]


def test_nbformat_44_without_ids_gets_ids():
    data = make_submission()
    data["nbformat_minor"] = 4
    for cell in data["cells"]:
        del cell["id"]
    data["cells"].insert(3, scratch("print(1)", "ignored"))
    del data["cells"][3]["id"]
    got, repairs = run(data)
    assert repairs == ["upgraded notebook format 4.4 to 4.5", "assigned 8 missing cell ids"]
    assert got == FILLED[:3] + [("code", None, "print(1)")] + FILLED[3:]


def test_duplicated_and_invalid_ids_replaced():
    data = make_submission()
    data["cells"][index("t1")]["id"] = "setup"  # the id of an earlier cell
    data["cells"][index("t2")]["id"] = "not valid!"
    data["cells"].append(scratch("y = 2", "intro"))
    result = normalize_submission(json.dumps(data).encode(), make_release())
    _assert_gradable(result.notebook)
    ids = [c.id for c in result.notebook.cells]
    assert ids == [row[0] for row in LAYOUT] + ["scratch-7"]
    assert all(re.fullmatch(r"[a-zA-Z0-9-_]{1,64}", cell_id) for cell_id in ids)
    assert result.repairs == ["replaced 2 duplicated cell ids", "replaced 1 invalid cell id"]


def test_edited_test_cell_restored():
    data = make_submission()
    data["cells"][index("t1")]["source"] = "# TODO 1: normalize 返回 list[int]\nassert True\n"
    data["cells"][index("setup")]["source"] = SETUP.replace("BLOCK_SIZE = 4", "BLOCK_SIZE = 1")
    got, repairs = run(data)
    assert got == FILLED
    assert repairs == [
        "restored edited read-only cell setup",
        "restored edited test cell test_todo1_normalize",
    ]


def test_whitespace_only_edit_is_not_a_repair():
    data = make_submission()
    data["cells"][index("t2")]["source"] = TEST2 + "   \n\n"
    got, repairs = run(data)
    assert got == FILLED and repairs == []


def test_deleted_test_cell_restored():
    data = make_submission()
    del data["cells"][index("t2")]
    got, repairs = run(data)
    assert got == FILLED
    assert repairs == ["restored deleted test cell test_todo2_chunk_tokens"]


def test_deleted_solution_cell_restores_stub():
    data = make_submission()
    del data["cells"][index("prefill")]
    got, repairs = run(data)
    assert got == FILLED[:-1] + [("code", "chunked_prefill_impl", PREFILL_STUB)]
    assert repairs == [
        (
            "restored deleted solution cell chunked_prefill_impl "
            "(the stub, raises NotImplementedError)"
        )
    ]


def test_deleted_everything_but_the_solutions():
    data = make_submission()
    data["cells"] = [data["cells"][index("manager")], data["cells"][index("prefill")]]
    for cell in data["cells"]:
        cell["metadata"] = {}
    got, repairs = run(data)
    assert got == [
        FILLED[0],
        (FILLED[1][0], "setup", SETUP),
        FILLED[2],
        FILLED[3],
        FILLED[4],
        FILLED[5],
        FILLED[6],
    ]
    assert repairs == [
        (
            "re-attached 2 cells whose nbgrader metadata was lost: prefix_cache_manager, "
            "chunked_prefill_impl"
        ),
        "restored deleted read-only cell setup",
        "restored deleted test cell test_todo1_normalize",
        "restored deleted test cell test_todo2_chunk_tokens",
        "restored 2 deleted instruction cells",
    ]


def test_scratch_cells_kept_in_place():
    data = make_submission()
    first = scratch("print('hello')", "s0")
    probe = scratch("m = PrefixCacheManager(4)\nm.chunk_tokens([1, 2, 3, 4, 5])", "s1")
    notes = scratch("我的笔记：块大小影响命中率。", "s2", "markdown")
    probe["metadata"] = {"nbgrader": {"grade_id": "not_in_release", "solution": True}}
    cells = data["cells"]
    data["cells"] = [first] + cells[:3] + [probe] + cells[3:] + [notes]
    got, repairs = run(data)
    assert got == (
        [("code", None, first["source"])]
        + FILLED[:3]
        + [("code", None, probe["source"])]
        + FILLED[3:]
        + [("markdown", None, notes["source"])]
    )
    assert repairs == []


def test_scratch_cells_follow_their_cell_when_reordered():
    data = make_submission()
    cells = data["cells"]
    note = scratch("chunked_prefill(None, [1, 2, 3], 2)", "after-prefill")
    data["cells"] = [cells[6], note] + cells[:6]
    got, _ = run(data)
    assert got == FILLED + [("code", None, note["source"])]


def test_reordered_cells_restored_to_release_order():
    data = make_submission()
    c = data["cells"]
    data["cells"] = [c[6], c[0], c[1], c[2], c[4], c[3], c[5]]
    got, repairs = run(data)
    assert got == FILLED
    assert repairs == ["put 2 moved cells back in the release's order"]


def test_reordered_cells_without_metadata():
    data = make_submission()
    c = data["cells"]
    data["cells"] = [c[4], c[3], c[6], c[5], c[2], c[1], c[0]]
    for cell in data["cells"]:
        cell["metadata"] = {}
    got, repairs = run(data)
    assert got == FILLED
    assert repairs[-1] == "put 5 moved cells back in the release's order"


def test_duplicated_solution_cell_keeps_best_copy():
    data = make_submission()
    experiment = copy.deepcopy(data["cells"][index("manager")])
    experiment["id"] = "copy-of-manager"
    experiment["source"] = (
        "class PrefixCacheManager:\n    def normalize(self, tokens):\n        return tokens\n"
    )
    data["cells"].insert(index("manager"), experiment)  # the copy lands above the original
    got, repairs = run(data)
    assert got == FILLED[:2] + [("code", None, experiment["source"])] + FILLED[2:]
    assert repairs == [
        ("kept 1 duplicate of prefix_cache_manager as scratch (no grading metadata)")
    ]


def test_duplicated_test_cell_keeps_the_untouched_copy():
    data = make_submission()
    edited = copy.deepcopy(data["cells"][index("t1")])
    edited["id"], edited["source"] = "t1-copy", TEST1 + "\nprint(m.normalize([5]))"
    data["cells"].insert(index("t1") + 1, edited)
    got, repairs = run(data)
    assert got == FILLED[:4] + [("code", None, edited["source"])] + FILLED[4:]
    assert repairs == [
        ("kept 1 duplicate of test_todo1_normalize as scratch (no grading metadata)")
    ]


def test_code_cell_turned_markdown_or_raw():
    data = make_submission()
    prefill, t1 = data["cells"][index("prefill")], data["cells"][index("t1")]
    for cell, new_type in [(prefill, "markdown"), (t1, "raw")]:
        cell["cell_type"] = new_type
        del cell["outputs"], cell["execution_count"]
    t1["metadata"] = {}
    got, repairs = run(data)
    assert got == FILLED
    assert repairs == [
        "re-attached 1 cell whose nbgrader metadata was lost: test_todo1_normalize",
        "restored code type of test cell test_todo1_normalize (was raw)",
        "restored code type of solution cell chunked_prefill_impl (was markdown)",
    ]


def test_cell_sources_as_lists_and_missing_keys():
    data = make_submission()
    for cell in data["cells"]:
        cell["source"] = "".join(cell["source"])  # nbformat writes lists; a string is valid too
        cell.pop("outputs", None)
        cell.pop("metadata")
    data.pop("nbformat_minor")
    data["cells"].append("not a cell")
    got, repairs = run(data)
    assert got == FILLED
    assert repairs[:2] == [
        "set the missing notebook format version to 4.5",
        "dropped 1 malformed cell",
    ]


@pytest.mark.parametrize("raw", [b"", b"  \n\t\r\n"])
def test_empty_file(raw):
    with pytest.raises(Ungradable) as err:
        normalize_submission(raw, make_release())
    assert err.value.status == "empty_file"
    assert "File > Download" in err.value.reason


def test_invalid_json():
    with pytest.raises(Ungradable) as err:
        normalize_submission(b'{"cells": [\n    {"cell_type": }]}', make_release())
    assert err.value.status == "invalid_json"
    assert err.value.reason.startswith("the file is not valid JSON (line 2, column 19)")
    with pytest.raises(Ungradable) as err:
        normalize_submission(b"\xff\xfe{\x00", make_release())
    assert err.value.status == "invalid_json"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_a_notebook_resaved_as_utf16_or_with_a_bom_is_graded(encoding):
    # Windows' Notepad saves "Unicode" (UTF-16 with a BOM): the work is all there, not invalid_json.
    text = json.dumps(make_submission(), ensure_ascii=False)
    raw = (
        codecs.BOM_UTF16_BE + text.encode(encoding)
        if encoding == "utf-16-be"
        else text.encode(encoding)
    )
    result = normalize_submission(raw, make_release())
    assert shape(result.notebook) == FILLED and result.repairs == []


def test_a_v3_notebook_and_a_zip_named_ipynb_say_what_they_are():
    v3 = b'{"nbformat": 3, "nbformat_minor": 0, "worksheets": [{"cells": []}]}'
    with pytest.raises(Ungradable) as err:
        normalize_submission(v3, make_release())
    assert "format version 3, not 4" in err.value.reason  # not "it has no list of cells"
    with pytest.raises(Ungradable) as err:
        normalize_submission(b"PK\x03\x04\x14\x00\x00\x00" + bytes(40), make_release())
    assert err.value.status == "invalid_json" and "a zip archive named .ipynb" in err.value.reason


@pytest.mark.parametrize(
    "raw",
    [
        b'{"hello": 1}',
        b"[1, 2]",
        b'"just text"',
        b"42",
        b'{"nbformat": 3, "nbformat_minor": 0, "worksheets": [{"cells": []}]}',
        b'{"nbformat": 5, "cells": []}',
        b'{"nbformat": 4, "cells": {"0": {}}}',
    ],
)
def test_json_that_is_not_a_notebook(raw):
    with pytest.raises(Ungradable) as err:
        normalize_submission(raw, make_release())
    assert err.value.status == "not_a_notebook"
    assert err.value.reason


def test_notebook_of_another_assignment():
    other = v4.new_notebook(
        cells=[
            v4.new_markdown_cell("# 第 33 章：旋转位置编码", id="a"),
            v4.new_code_cell(
                "def rotate_half(x):\n    raise NotImplementedError()\n",
                id="b",
                metadata={"nbgrader": _nbgrader("rope_impl", "solution")},
            ),
            v4.new_code_cell(
                "# TODO 1: rotate_half\nassert rotate_half([1, 2]) == [-2, 1]",
                id="c",
                metadata={"nbgrader": _nbgrader("test_todo1_rope", "grade")},
            ),
        ]
    )
    for nb in (other, v4.new_notebook()):
        with pytest.raises(Ungradable) as err:
            normalize_submission(nbformat.writes(nb).encode(), make_release())
        assert err.value.status == "wrong_assignment"
        assert "PrefixCacheManager, chunked_prefill" in err.value.reason


def test_output_is_deterministic_and_idempotent():
    data = make_submission()
    c = data["cells"]
    data["cells"] = [c[2], scratch("x = 1", "s"), c[0], c[1], c[3], c[5], c[6]]
    for cell in data["cells"]:
        cell["metadata"] = {"colab": {}}
        del cell["id"]
    raw = json.dumps(data).encode()
    first = normalize_submission(raw, make_release())
    second = normalize_submission(raw, make_release())
    assert nbformat.writes(first.notebook) == nbformat.writes(second.notebook)
    assert first.repairs == second.repairs
    again = normalize_submission(nbformat.writes(first.notebook).encode(), make_release())
    assert nbformat.writes(again.notebook) == nbformat.writes(first.notebook)
    assert first.repairs[-1] == "restored deleted test cell test_todo2_chunk_tokens"
    assert again.repairs == []


def test_release_without_ids_gives_derived_ids():
    release = make_release()
    release.nbformat_minor = 4
    for cell in release.cells:
        del cell["id"]
    result = normalize_submission(json.dumps(make_submission()).encode(), release)
    nbformat.validate(result.notebook)
    assert [c.id for c in result.notebook.cells] == [
        "cell-0",
        "setup",
        "prefix_cache_manager",
        "test_todo1_normalize",
        "test_todo2_chunk_tokens",
        "cell-5",
        "chunked_prefill_impl",
    ]


def test_markdown_attachments_kept_and_malformed_ones_dropped():
    data = make_submission()
    image = {"image/png": "iVBORw0KGgo="}
    data["cells"].append(scratch("![图](attachment:a.png)", "pic", "markdown"))
    data["cells"][-1]["attachments"] = {"a.png": image}
    result = normalize_submission(json.dumps(data).encode(), make_release())
    assert result.notebook.cells[-1].attachments == {"a.png": image} and result.repairs == []
    data["cells"][-1]["attachments"] = {"a.png": {"image/png": 5}, "b.png": "junk"}
    result = normalize_submission(json.dumps(data).encode(), make_release())
    _assert_gradable(result.notebook)
    assert "attachments" not in result.notebook.cells[-1]


def test_lone_surrogates_do_not_break_writing():
    data = make_submission()
    data["cells"][index("prefill")]["source"] = PREFILL_DONE + "# \ud800\n"
    raw = json.dumps(data).encode()  # JSON escapes keep the lone surrogate
    result = normalize_submission(raw, make_release())
    nbformat.writes(result.notebook).encode("utf-8")
    assert result.notebook.cells[-1].source == PREFILL_DONE + "# ?\n"


def test_ungradable_pickles_with_status_and_reason():
    import pickle

    err = pickle.loads(pickle.dumps(Ungradable("empty_file", "the file is empty")))
    assert (err.status, err.reason, str(err)) == (
        "empty_file",
        "the file is empty",
        "empty_file: the file is empty",
    )


def test_release_is_not_modified():
    release = make_release()
    before = nbformat.writes(release)
    data = make_submission()
    data["cells"][index("t1")]["source"] = "assert True"
    normalize_submission(json.dumps(data).encode(), release)
    assert nbformat.writes(release) == before


def test_repairs_summary_is_one_line():
    assert repairs_summary(["a", "b\nc"]) == "2 repairs: a; b c"
    assert repairs_summary(["only"]) == "1 repair: only"


# ------------------------------------------------------------------------------ properties

_MUTATIONS = ["keep", "delete", "duplicate", "strip", "retype", "edit"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_MUTATIONS), min_size=7, max_size=7), st.randoms())
def test_any_damage_still_yields_a_gradable_notebook(mutations, rnd):
    data = make_submission()
    cells = []
    for cell, mutation in zip(data["cells"], mutations):
        if mutation == "delete":
            continue
        cells.append(cell)
        if mutation == "duplicate":
            cells.append(copy.deepcopy(cell))
        elif mutation == "strip":
            cell["metadata"] = {}
        elif mutation == "retype":
            cell["cell_type"] = "raw"
        elif mutation == "edit":
            cell["source"] += "\n# learner note"
    rnd.shuffle(cells)
    data["cells"] = cells
    raw = json.dumps(data).encode()
    try:
        result = normalize_submission(raw, make_release())
    except Ungradable as err:  # only when no solution survived with a trace of itself
        assert err.status == "wrong_assignment"
        return
    _assert_gradable(result.notebook)
    by_gid = {gid: source for _, gid, source in shape(result.notebook) if gid}
    assert by_gid["setup"] == SETUP and by_gid["test_todo1_normalize"] == TEST1
    assert by_gid["prefix_cache_manager"] in (
        MANAGER_DONE,
        MANAGER_STUB,
        MANAGER_DONE + "\n# learner note",
    )
    assert normalize_submission(raw, make_release()).repairs == result.repairs
    again = normalize_submission(nbformat.writes(result.notebook).encode(), make_release())
    assert shape(again.notebook) == shape(result.notebook)
    assert again.repairs == []


_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_CELL = st.fixed_dictionaries(
    {},
    optional={
        "cell_type": st.sampled_from(["code", "markdown", "raw", "heading", "widget"]) | _JUNK,
        "source": st.sampled_from([MANAGER_DONE, TEST1, "x = 1", ""]) | st.lists(st.text()) | _JUNK,
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "nbgrader": st.fixed_dictionaries({"grade_id": st.sampled_from(GRADE_IDS) | _JUNK}),
                "tags": _JUNK,
                "colab": _JUNK,
            },
        )
        | _JUNK,
        "id": st.sampled_from(["setup", "ok-id", "bad id"]) | _JUNK,
        "attachments": st.dictionaries(
            st.text(max_size=5),
            st.dictionaries(st.text(max_size=12), st.text() | _JUNK, max_size=2),
            max_size=2,
        )
        | _JUNK,
    },
)


@settings(max_examples=100, deadline=None)
@given(
    st.fixed_dictionaries(
        {"cells": st.lists(_CELL | _JUNK, max_size=6)},
        optional={
            "nbformat": st.sampled_from([4, "4", 3]) | _JUNK,
            "nbformat_minor": _JUNK,
            "metadata": _JUNK,
        },
    )
)
def test_junk_notebooks_raise_only_ungradable(data):
    try:
        result = normalize_submission(json.dumps(data).encode(), make_release())
    except Ungradable as err:
        assert err.status in ("not_a_notebook", "wrong_assignment") and err.reason
        return
    nbformat.validate(result.notebook)
    assert [gid for _, gid, _ in shape(result.notebook) if gid] == GRADE_IDS


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_ungradable(raw):
    try:
        normalize_submission(raw, make_release())
    except Ungradable as err:
        assert err.status in ("empty_file", "invalid_json", "not_a_notebook", "wrong_assignment")


# ---------------------------------------------------------------------- the real notebook


@pytest.mark.skipif(
    not REAL_NOTEBOOK.exists(), reason="notebooks/ch34_prefix_cache.ipynb is not generated yet"
)
def test_real_notebook_as_released_needs_no_repair_and_keeps_its_folds():
    release = nbformat.read(REAL_NOTEBOOK, as_version=4)
    result = normalize_submission(REAL_NOTEBOOK.read_bytes(), release)
    assert result.repairs == []
    folded = [c.id for c in result.notebook.cells if c.metadata.get("cellView") == "form"]
    assert folded == [c.id for c in release.cells if c.metadata.get("cellView") == "form"]
    assert folded


@pytest.mark.skipif(
    not REAL_NOTEBOOK.exists(), reason="notebooks/ch34_prefix_cache.ipynb is not generated yet"
)
def test_real_notebook_stripped_of_all_metadata_is_reattached():
    release = nbformat.read(REAL_NOTEBOOK, as_version=4)
    solutions = nbformat.read(REAL_SOLUTIONS, as_version=4) if REAL_SOLUTIONS.exists() else None
    reference = {
        c.metadata.nbgrader.grade_id: c.source
        for c in getattr(solutions, "cells", [])
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    filled = copy.deepcopy(release)
    for cell in filled.cells:  # the reference answer where the solutions notebook has it
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = reference.get(cell.metadata.nbgrader.grade_id, cell.source)
    expected = shape(filled)
    for cell in filled.cells:  # what a Colab copy may look like: no metadata, no ids, 4.4
        cell.metadata = {"id": "colab-id"}
        del cell["id"]
    filled.nbformat_minor = 4
    result = normalize_submission(nbformat.writes(filled, version=4).encode(), release)
    nbformat.validate(result.notebook)
    assert shape(result.notebook) == expected
    graded = [c.metadata.nbgrader.grade_id for c in release.cells if "nbgrader" in c.metadata]
    assert [c.metadata for c in result.notebook.cells] == [c.metadata for c in release.cells]
    assert result.repairs == [
        "upgraded notebook format 4.4 to 4.5",
        f"assigned {len(release.cells)} missing cell ids",
        f"removed Colab metadata from {len(release.cells)} cells",
        f"re-attached {len(graded)} cells whose nbgrader metadata was lost: {', '.join(graded)}",
    ]


def test_the_scores_shortcut_never_changes_which_cells_match():
    """`_score(cell, ref, floor)` skips the line diff when its bounds say it cannot matter: for
    every pair of real cells (the release, the reference, a Colab copy of each), the pairs at or
    above the threshold and their scores are those of the full computation."""
    from grader.kit.intake.normalize import _THRESHOLD, _Cell, _Ref, _score

    release = nbformat.read(REAL_NOTEBOOK, as_version=4)
    solutions = nbformat.read(REAL_SOLUTIONS, as_version=4)
    refs = [_Ref.of(j, cell) for j, cell in enumerate(release.cells)]
    sources = [c.source for c in release.cells + solutions.cells]
    sources += [s.replace("    ", "  ") for s in sources[::3]]  # re-indented copies
    cells = [_Cell(i, "code", source) for i, source in enumerate(sources)]
    checked = 0
    for cell in cells:
        for ref in refs:
            full, quick = _score(cell, ref), _score(cell, ref, _THRESHOLD)
            assert (quick >= _THRESHOLD) == (full >= _THRESHOLD), (cell.index, ref.index)
            assert quick <= full and (full < _THRESHOLD or quick == full), (cell.index, ref.index)
            checked += full >= _THRESHOLD
    assert checked > len(refs)  # the pairs that match were among those compared
