"""The chapter's figures: well-formed SVG with the example's labels, the same bytes on every build,
each placed in the student notebook just before the code it explains, as the committed PNG that
`make figures` rendered from its current drawing (fast tier); that PNG is the SVG's picture as
Chromium draws it (slow tier: a browser).

That the exported HTML and PDF show them is tests/test_export.py (it needs Chromium).
"""

import base64
import dataclasses
import io
import json
import re
import unicodedata
import xml.etree.ElementTree as ET

import nbformat
import pytest
from PIL import Image, ImageChops, ImageStat

from grader.kit.authoring import build, figures
from grader.kit.authoring.build import source_notebook
from grader.kit.authoring.nbsource import REPO_ROOT, nbgrader_meta
from grader.kit.errors import SourceError
from grader.kit.paths import SOLUTIONS_NOTEBOOK, STUDENT_NOTEBOOK

SVG = "{http://www.w3.org/2000/svg}"
# What each picture must say: the numbers of the example the text beside it uses.
LABELS = {
    "prefix_tree": [
        "根",
        "hit_len = 3：reusable_prefix = [1, 2, 3]",
        "suffix = [9]：只有它要做 prefill",
    ],
    "chunk_mask": [
        "块 0：P = 0，T = 3，S = 3",
        "块 2：P = 6，T = 1，S = 7",
        "torch.ones(T, S).tril(diagonal=3)",
    ],
    "hash_chain": [
        "parent_key = k1",
        "ref_count = 0",
        "可淘汰队列 _evictable",
        "队首（最久未用，先淘汰）",
    ],
    "scheduler_step": ['num_scheduled_tokens = {"a": 1, "b": 576, "c": 447}，合计 1024', "waiting"],
    "paged_pool": ["这一步 r0 解码 p = 9，r1 预填充 p = 4、5：slot_mapping = [1, 28, 29]", "块 7"],
    "preemption": ["① preempted = self.running.pop()：取走最后接纳的 C（FCFS 策略）", "之后"],
}
# The code each figure explains, by grade id: the figure comes before it, with no other code
# the learner writes in between.
EXPLAINS = {
    "prefix_tree": "prefix_cache_manager",
    "chunk_mask": "todo9_chunked_prefill",
    "hash_chain": "block_prefix_cache",
    "scheduler_step": "scheduler_todo16_19",
    "paged_pool": "engine_block_pool",
    "preemption": "engine_scheduler",
}


def texts(svg: str) -> list[str]:
    return [node.text or "" for node in ET.fromstring(svg).iter(f"{SVG}text")]


def test_every_figure_has_a_scenario_here():
    assert sorted(figures.FIGURES) == sorted(LABELS) == sorted(EXPLAINS)


@pytest.mark.parametrize("name", sorted(LABELS))
def test_figure_is_well_formed_svg_with_its_example_labels(name):
    svg = figures.FIGURES[name].draw()
    root = ET.fromstring(svg)  # raises on malformed XML
    assert root.tag == f"{SVG}svg"
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    drawn = texts(svg)
    missing = [label for label in LABELS[name] if label not in drawn]
    assert missing == [], f"{name} lacks {missing}; it draws {drawn}"


@pytest.mark.parametrize("name", sorted(LABELS))
def test_figure_is_the_same_bytes_each_time_and_holds_nothing_machine_made(name):
    first, second = figures.FIGURES[name].draw(), figures.FIGURES[name].draw()
    assert first == second
    assert not re.search(r"\d\.\d{2,}", first), "coordinates are whole or half pixels"
    assert "<image" not in first and "base64" not in first, "no raster inside the SVG"


def estimated_width(words: str, size: float) -> float:
    """A generous width for `words` at `size` px: wide (CJK) characters a full em, others 0.62."""
    return sum(size if unicodedata.east_asian_width(ch) in "WF" else 0.62 * size for ch in words)


@pytest.mark.parametrize("name", sorted(LABELS))
def test_no_label_runs_past_the_picture(name):
    root = ET.fromstring(figures.FIGURES[name].draw())
    width = float(root.get("width"))
    over = []
    for node in root.iter(f"{SVG}text"):
        size, x = float(node.get("font-size")), float(node.get("x"))
        half = estimated_width(node.text, size) / 2
        left, right = {
            "middle": (x - half, x + half),
            "end": (x - 2 * half, x),
        }.get(node.get("text-anchor"), (x, x + 2 * half))
        if left < 0 or right > width:
            over.append((node.text, round(left), round(right)))
    assert over == [], f"{name} is {width:g} px wide: {over}"


def test_labels_check_can_fail_on_a_label_too_long_for_the_picture():
    assert estimated_width("可淘汰队列" * 40, 14) > 860


@pytest.fixture(scope="module")
def student():
    return source_notebook(for_release=True)


def figure_cells(nb) -> dict[str, int]:
    """{figure name: index of the markdown cell that shows it} in `nb`."""
    found = {}
    for index, cell in enumerate(nb.cells):
        for name in figures.FIGURES:
            if cell.cell_type == "markdown" and figures.data_uri(name) in cell.source:
                assert name not in found, f"{name} is shown twice"
                found[name] = index
    return found


def test_each_figure_comes_just_before_the_code_it_explains(student):
    shown = figure_cells(student)
    assert sorted(shown) == sorted(EXPLAINS)
    ids = [nbgrader_meta(cell).get("grade_id") for cell in student.cells]
    for name, grade_id in EXPLAINS.items():
        target = ids.index(grade_id)
        assert shown[name] < target, f"{name} comes after {grade_id}"
        between = student.cells[shown[name] + 1 : target]
        learner_code = [
            nbgrader_meta(c)["grade_id"] for c in between if nbgrader_meta(c).get("solution")
        ]
        assert learner_code == [] and len(between) <= 2, (name, [c.source[:40] for c in between])


def test_figures_are_numbered_in_order_with_a_one_line_chinese_caption(student):
    shown = sorted(figure_cells(student).items(), key=lambda item: item[1])
    for number, (name, index) in enumerate(shown, 1):
        source = student.cells[index].source
        assert "{{figure:" not in source
        caption = source.split("\n")[-1]
        assert caption == f"**图 {number}**　{figures.FIGURES[name].caption}"
        assert re.search(r"[\u4e00-\u9fff]", caption) and "\n" not in figures.FIGURES[name].caption
        image = re.search(r"!\[([^\]]+)\]\(data:image/png;base64,([^)]+)\)\n\n", source)
        assert image and image.group(1) == figures.FIGURES[name].alt
        png = figures.ASSETS / f"{name}.png"
        assert base64.b64decode(image.group(2)) == png.read_bytes()


def markdown(*sources):
    return [nbformat.v4.new_markdown_cell(s) for s in sources]


def test_placeholders_are_numbered_in_the_order_they_appear():
    texts_ = figures.figure_texts(markdown("前\n{{figure:hash_chain}}", "{{figure:chunk_mask}}"))
    assert texts_["{{figure:hash_chain}}"].endswith(
        f"**图 1**　{figures.FIGURES['hash_chain'].caption}"
    )
    assert "**图 2**" in texts_["{{figure:chunk_mask}}"]


def test_a_placeholder_in_a_code_cell_is_left_alone():
    assert figures.figure_texts([nbformat.v4.new_code_cell("# {{figure:chunk_mask}}")]) == {}


def test_an_unknown_figure_is_a_source_error_naming_the_figures():
    with pytest.raises(SourceError, match=r"\['prefix_tres'\].*prefix_tree"):
        figures.figure_texts(markdown("{{figure:prefix_tres}}"))


def test_a_figure_placed_twice_is_a_source_error():
    with pytest.raises(SourceError, match="more than once"):
        figures.figure_texts(markdown("{{figure:preemption}}", "{{figure:preemption}}"))


# ---------------------------------------------------------------------------- the committed PNGs


def png_size(data: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(data)).size


def test_every_figure_has_a_png_rendered_from_its_current_drawing():
    recorded = json.loads(figures.MANIFEST.read_text(encoding="utf-8"))
    assert sorted(recorded) == sorted(figures.FIGURES)
    assert (
        figures.MANIFEST.read_text(encoding="utf-8")
        == json.dumps(recorded, indent=2, sort_keys=True) + "\n"
    )
    for name in figures.FIGURES:
        png = (figures.ASSETS / f"{name}.png").read_bytes()
        assert recorded[name] == {
            "png_sha256": figures.sha256(png),
            "svg_sha256": figures.svg_sha256(name),
        }, f"{name}: run `make figures` and commit its PNG"
        root = ET.fromstring(figures.FIGURES[name].draw())
        width, height = int(root.get("width")), int(root.get("height"))
        assert png_size(png) == (2 * width, 2 * height), "rendered at device scale 2"
        assert Image.open(io.BytesIO(png)).mode in ("P", "RGB"), "no alpha channel"


def test_alt_texts_fit_in_markdown_image_syntax():
    for name, figure in figures.FIGURES.items():
        assert not re.search(r"[\[\]\n]", figure.alt), name


def redrawn(monkeypatch, name: str) -> None:
    """Figure `name` drawn one comment different from the drawing its PNG was rendered from."""
    figure = figures.FIGURES[name]
    changed = dataclasses.replace(figure, draw=lambda: figure.draw()[:-6] + "<!-- -->" + "</svg>")
    monkeypatch.setitem(figures.FIGURES, name, changed)


def test_a_changed_drawing_makes_the_build_refuse_and_write_nothing(monkeypatch, tmp_path, capsys):
    redrawn(monkeypatch, "hash_chain")
    out = tmp_path / "out"
    with pytest.raises(SourceError) as refused:
        build.run(["notebooks", "--out", str(out)])
    message = str(refused.value)
    assert "hash_chain" in message and "`make figures`" in message and "\n" not in message
    assert "commit" in message
    assert not out.exists()
    assert build.main(["all", "--out", str(out)]) == 1
    assert "make figures" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SourceError, match="make figures"):
        source_notebook(for_release=True)


def test_a_png_put_in_place_of_another_makes_the_build_refuse(monkeypatch, tmp_path):
    assets = tmp_path / "figures"
    assets.mkdir()
    for path in figures.ASSETS.iterdir():
        (assets / path.name).write_bytes(path.read_bytes())
    (assets / "preemption.png").write_bytes((assets / "scheduler_step.png").read_bytes())
    monkeypatch.setattr(figures, "ASSETS", assets)
    monkeypatch.setattr(figures, "MANIFEST", assets / figures.MANIFEST.name)
    with pytest.raises(SourceError, match=r"preemption\.png is not the PNG .*make figures"):
        figures.check_rendered()


def test_notebooks_show_the_figures_as_png_in_markdown_and_no_svg():
    for release in (True, False):
        text = nbformat.writes(source_notebook(for_release=release))
        assert "svg+xml" not in text and "<svg" not in text
        assert text.count("](data:image/png;base64,") == len(figures.FIGURES)
    for committed in (STUDENT_NOTEBOOK, SOLUTIONS_NOTEBOOK):
        text = (REPO_ROOT / committed).read_text(encoding="utf-8")
        assert "svg+xml" not in text, f"{committed} still holds SVG: run `make notebooks solutions`"
        assert text.count("](data:image/png;base64,") == len(figures.FIGURES), committed


# A different Chromium or CJK font version moves anti-aliasing and glyph edges by a pixel or so; a
# whole picture shifted 2 px differs by about 6.6, and two different figures of the same size
# (scheduler_step, preemption) by about 17.5. Mean absolute difference over R, G and B, 0-255.
TOLERANCE = 4.0


def mean_difference(a: bytes, b: bytes) -> float:
    one, two = (Image.open(io.BytesIO(x)).convert("RGB") for x in (a, b))
    return sum(ImageStat.Stat(ImageChops.difference(one, two)).mean) / 3


@pytest.fixture(scope="module")
def rerendered():
    from grader.kit.authoring.figures.render import render_pngs

    return render_pngs(sorted(figures.FIGURES))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LABELS))
def test_committed_png_is_its_svg_as_chromium_draws_it(rerendered, name):
    committed = (figures.ASSETS / f"{name}.png").read_bytes()
    assert png_size(rerendered[name]) == png_size(committed)
    difference = mean_difference(rerendered[name], committed)
    assert difference <= TOLERANCE, f"{name}.png differs from its SVG by {difference:.2f}"


@pytest.mark.slow
def test_pixel_comparison_fails_on_another_figures_png(rerendered):
    other = (figures.ASSETS / "preemption.png").read_bytes()
    assert png_size(rerendered["scheduler_step"]) == png_size(other)
    assert mean_difference(rerendered["scheduler_step"], other) > 2 * TOLERANCE


def test_screen_estimate_counts_a_figure_as_a_picture_not_its_data_address():
    from grader.kit.publish import screens

    figure = "![alt](data:image/png;base64," + "A" * 100_000 + ")"
    assert screens.markdown_px(figure) == screens.IMAGE_PX + screens.CELL_PADDING_PX
    assert screens.markdown_px("前文 " + figure) > screens.markdown_px(figure)
