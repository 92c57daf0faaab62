"""The chapter's figures, drawn from code as SVG: one function a figure, each returning the SVG text.

The SVG is the master; the notebook shows a PNG of it. Google Colab, the learners' main platform,
shows no `data:image/svg+xml` picture in a text cell (googlecolab/colabtools#2092) and no
markdown attachment (#3836); a PNG in a data address in markdown image syntax,
`![alt](data:image/png;base64,...)`, is what Colab's own "insert image" writes, and JupyterLab,
ModelScope, nbconvert's HTML and the printed PDF show it too (no file beside the notebook).

The PNGs are committed beside the source, `grader/source/ch34_prefix_cache/figures/NAME.png`,
with `figures.json`: for each figure the sha256 of the SVG text it was rendered from and of the
PNG. `make figures` (`render`) draws them with headless Chromium at device scale 2; the build
never rasterises (fonts and Chromium differ between machines, the notebooks must not) and only
embeds the committed bytes: when a drawing no longer matches its recorded hash, the build stops
with a `SourceError` that says to run `make figures` (`png_bytes`).

A markdown cell of the source that holds `{{figure:prefix_tree}}` gets the picture there and a
one-line caption `图 N ...`, numbered in the order the figures appear (`figure_texts`). Each
figure draws the small example the text beside it uses, so the numbers in the picture are the
ones the learner reads. The SVG is the same bytes on every machine (`canvas.Canvas`). The
drawings: `caching` (parts one to three), `serving` (parts four and five).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Callable

from ...errors import SourceError
from ...paths import SOURCE_PATH
from .caching import chunk_mask, hash_chain, prefix_tree
from .serving import paged_pool, preemption, scheduler_step

PLACEHOLDER = re.compile(r"\{\{figure:([a-z_]+)\}\}")
# The committed PNGs and their manifest (`make figures` writes them; the build reads them).
ASSETS = SOURCE_PATH.parent / "figures"
MANIFEST = ASSETS / "figures.json"
RERENDER = "run `make figures` and commit grader/source/ch34_prefix_cache/figures/"


@dataclass(frozen=True)
class Figure:
    """One figure: how to draw it, its one-line caption (after 图 N) and its alt text.

    Figures are numbered 图 1, 图 2, ... through the notebook: the sections are numbered
    part.section (1.2, 4.4), and a chapter-style 图 34.1 would read as a second numbering scheme."""

    draw: Callable[[], str]
    caption: str
    alt: str


FIGURES = {
    "prefix_tree": Figure(
        prefix_tree,
        "已登记的前缀 [1, 2, 3]、[1, 2, 9] 画成前缀树；prompt [1, 2, 3, 9] 命中 3 个 token，只有后缀 [9] 要 prefill",
        "前缀树：根、1、2 之后分成 3 和 9 两支；prompt 1 2 3 9 沿 1→2→3 命中，hit_len 为 3，suffix 为 9",
    ),
    "chunk_mask": Figure(
        chunk_mask,
        "7 个 token 按 chunk_size = 3 分三块：每块的掩码是 T × S 的长方形，对角线偏移 S − T 等于已有的 token 数",
        "7 乘 7 的因果掩码按三块着色：块 0 的 P 为 0，块 1 的 P 为 3，块 2 的 P 为 6；每块的 key 包括 past_kv 中的和本块的",
    ),
    "hash_chain": Figure(
        hash_chain,
        "块级前缀缓存：哈希链（key 覆盖父块的 key）、每块的引用计数、可淘汰队列的队首与队尾",
        "四个块组成哈希链，块 0、1 被两个请求共享，块 2 的引用计数为 0 排在可淘汰队列的队尾，队首是请求 C 的尾块",
    ),
    "scheduler_step": Figure(
        scheduler_step,
        "调度器的一步：1024 个 token 的预算先给 running 里的 a（decode 1 个）、b（剩下的 576 个 prompt），再从 waiting 接纳 c（447 个）",
        "三个请求的进度条与这一步的 token 预算：a 1 个、b 576 个、c 447 个，合计 1024",
    ),
    "paged_pool": Figure(
        paged_pool,
        "分页 KV 池：两个请求的块表共享物理块 2；slot = block_id × block_size + offset，这一步的 slot_mapping = [1, 28, 29]",
        "8 个物理块、每块 4 个槽；r0 的块表是 2、5、0，r1 的块表是 2、7；这一步写入槽 1、28、29",
    ),
    "preemption": Figure(
        preemption,
        "抢占（vLLM 0.33，FCFS）：块不够时取走 running 里最后接纳的请求，释放它的块、num_computed_tokens 归零、放回 waiting 的队头",
        "抢占之前 running 是 A、B、C，waiting 是 D；之后 running 是 A、B，waiting 是 C、D，C 的块回到空闲队列",
    ),
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def svg_sha256(name: str) -> str:
    """The sha256 of the SVG text figure `name` draws now (UTF-8)."""
    return sha256(FIGURES[name].draw().encode("utf-8"))


def manifest() -> dict[str, dict[str, str]]:
    """{figure: {"svg_sha256": ..., "png_sha256": ...}} as `make figures` last recorded it."""
    try:
        return json.loads(MANIFEST.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def png_bytes(name: str) -> bytes:
    """The committed PNG of figure `name`; a `SourceError` when it is missing or was rendered
    from another drawing (or another PNG has been put in its place) than the current one."""
    recorded = manifest().get(name, {})
    png = ASSETS / f"{name}.png"
    if not png.exists() or not recorded:
        raise SourceError(f"figure {name} has no rendered PNG ({png.name}): {RERENDER}")
    if recorded.get("svg_sha256") != svg_sha256(name):
        raise SourceError(
            f"figure {name} was drawn differently since {png.name} was rendered: {RERENDER}"
        )
    data = png.read_bytes()
    if recorded.get("png_sha256") != sha256(data):
        raise SourceError(
            f"{png.name} is not the PNG `make figures` rendered for {name}: {RERENDER}"
        )
    return data


def check_rendered() -> None:
    """A `SourceError` unless every figure's committed PNG is its current drawing's (`png_bytes`):
    the build calls it before it writes anything."""
    for name in FIGURES:
        png_bytes(name)


def data_uri(name: str) -> str:
    """The figure `name` as a `data:image/png;base64,...` address (its committed PNG)."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(name)).decode("ascii")


def figure_markdown(name: str, number: int) -> str:
    """What `{{figure:NAME}}` becomes: the picture in markdown image syntax (what Colab shows)
    and its caption line. Markdown gives the picture no width: it is drawn at device scale 2, and
    the notebook's and the exported page's `max-width: 100%` fit it to the column."""
    figure = FIGURES[name]
    return f"![{figure.alt}]({data_uri(name)})\n\n**图 {number}**　{figure.caption}"


def figure_texts(cells) -> dict[str, str]:
    """{placeholder: markdown} for every `{{figure:NAME}}` in the markdown `cells`, numbered in
    the order they appear. An unknown name, or a figure placed twice, is a `SourceError`."""
    found = [
        name for cell in cells if cell.get("cell_type") == "markdown"
        for name in PLACEHOLDER.findall(cell.get("source", ""))
    ]  # fmt: skip
    unknown = sorted(set(found) - set(FIGURES))
    if unknown:
        raise SourceError(f"the source places figures {unknown}; the figures are {sorted(FIGURES)}")
    twice = sorted({name for name in found if found.count(name) > 1})
    if twice:
        raise SourceError(f"the source places figures {twice} more than once")
    return {f"{{{{figure:{name}}}}}": figure_markdown(name, n) for n, name in enumerate(found, 1)}
