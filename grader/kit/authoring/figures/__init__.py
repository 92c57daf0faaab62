"""The chapter's figures, drawn from code as SVG: one function a figure, each returning the SVG text.

A markdown cell of the source that holds `{{figure:prefix_tree}}` gets the picture there, as an
`<img>` with a `data:image/svg+xml;base64,...` address (JupyterLab, Colab, ModelScope,
nbconvert's HTML and the printed PDF all show it; no file beside the notebook) and a one-line
caption `图 N ...`, numbered in the order the figures appear (`figure_texts`). Each figure
draws the small example the text beside it uses, so the numbers in the picture are the ones the
learner reads. Output is the same bytes on every machine (`canvas.Canvas`). The drawings:
`caching` (parts one to three), `serving` (parts four and five).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Callable

from ...errors import SourceError
from .caching import chunk_mask, hash_chain, prefix_tree
from .serving import paged_pool, preemption, scheduler_step

PLACEHOLDER = re.compile(r"\{\{figure:([a-z_]+)\}\}")


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


def data_uri(name: str) -> str:
    """The figure `name` as a `data:image/svg+xml;base64,...` address."""
    return "data:image/svg+xml;base64," + base64.b64encode(
        FIGURES[name].draw().encode("utf-8")
    ).decode("ascii")


def figure_markdown(name: str, number: int) -> str:
    """What `{{figure:NAME}}` becomes: the picture (at most its drawn width) and its caption line."""
    figure = FIGURES[name]
    return (
        f'<img src="{data_uri(name)}" alt="{figure.alt}" style="max-width:100%">\n\n'
        f"**图 {number}**　{figure.caption}"
    )


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
