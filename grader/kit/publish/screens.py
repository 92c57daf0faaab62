"""How long each unit of the student notebook is on a learner's screen, without a browser.

    python -m grader.kit.publish.screens [notebook]

A unit opens at a `## 本章导读`, `## 第…部分`, `## 本章小结` or `## 附…` heading (other `## ` headings, such
as "🛑 到这里先停一停", stay inside their unit); the cells before the first one are the opening. For
each cell the height it takes in JupyterLab 4 (as `make screenshots` shoots it) is estimated in
pixels: markdown by wrapped line (a CJK character is two columns), headings, list items and
table rows taller, a `<details>` box closed (its summary line); code by line; a folded cell
(`jupyter.source_hidden`) as its one-line bar; the cells under a collapsed heading
(`jp-MarkdownHeadingCollapsed`) as the one "N cells hidden" button. A unit's screens are its
height over one screenful; a screen is "mostly code" when more than half of its height is
visible code.

Calibration (SCREEN_PX). On 2026-12-05 `python -m grader.kit.publish.screenshots --out
/tmp/shots --pages 150` shot main's student notebook (212 cells) in JupyterLab 4.6 at 1280×857:
80 PNGs, the last one blank (JupyterLab's empty space after the last cell), so 79 screens with
content, each advancing 655 px (the 735-pixel scrolling area less the 80-pixel overlap that
`screenshots` keeps). The heights below add up to about 56,200 px for that notebook (its hints,
`<details>` boxes, closed); SCREEN_PX = 711 makes that 79 screens (890, the first guess, made it
63). So one "screen" here is one screenshot a learner scrolls through, overlap included.
Checked on 2026-12-06, after the figures became PNG in markdown image syntax (drawn at twice their
size, JupyterLab fits each to the column, about 1095 px wide: 400 to 550 px tall, IMAGE_PX = 510;
a picture's data address is no longer counted as text): the same command shot the student
notebook (243 cells) as 69 PNGs, the last one blank, so 68 screens; the heights below add up to
about 49,000 px, 68.9 screens at SCREEN_PX = 711, which stays.
Re-check after changing the heights: shoot the notebook, count the PNGs with content, and scale
SCREEN_PX by (this module's total / that count).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import REPO_ROOT, STUDENT_NOTEBOOK

SCREEN_PX = 711            # one screenshot's worth of notebook (see the calibration above)
TEXT_COLUMNS = 150         # half-width columns of a markdown line (a CJK character takes two)
TEXT_LINE_PX = 24
HEADING_PX = {1: 70, 2: 60, 3: 48, 4: 40, 5: 34, 6: 30}
PARAGRAPH_GAP_PX = 12
TABLE_ROW_PX = 38
CODE_COLUMNS = 130
CODE_LINE_PX = 18
CELL_PADDING_PX = 26       # a cell's frame: prompt area, margins
FOLDED_CELL_PX = 34        # a folded cell shows one bar
IMAGE_PX = 510             # a figure: its PNG fitted to the column (about 1095 px wide at 1280 px)


def columns(text: str) -> int:
    """Half-width columns the text takes: wide (CJK) characters count two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def wrapped_lines(text: str, width: int) -> int:
    return max(1, -(-columns(text) // width))


_DETAILS = re.compile(r"<details>\s*(<summary>.*?</summary>).*?</details>", re.S)
# A picture in markdown: `![alt](address)` (the figures' PNG), `<img ...>` or an inline `<svg>`.
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)|<img\b[^>]*>|<svg\b.*?</svg>")


def markdown_px(source: str) -> int:
    """A markdown cell's height; a `<details>` box (a 深入 box, a hint) is drawn closed."""
    height = 0
    source = _DETAILS.sub(lambda m: m.group(1), source)
    for line in source.splitlines():
        stripped = line.strip()
        if not stripped:
            height += PARAGRAPH_GAP_PX
            continue
        heading = re.match(r"(#{1,6})\s", stripped)
        if heading:
            height += HEADING_PX[len(heading.group(1))] * wrapped_lines(stripped, TEXT_COLUMNS)
        elif stripped.startswith("|"):
            if re.fullmatch(r"[|:\-\s]+", stripped):
                continue  # the header's separator row is not drawn
            cells = [c for c in stripped.strip("|").split("|")]
            # a row is as tall as its longest cell wrapped in its share of the width
            share = max(10, TEXT_COLUMNS // max(1, len(cells)))
            height += TABLE_ROW_PX * max(wrapped_lines(c.strip(), share) for c in cells)
        elif _IMAGE.sub("", stripped).strip():  # a picture's address is not text on screen
            height += TEXT_LINE_PX * wrapped_lines(_IMAGE.sub("", stripped), TEXT_COLUMNS)
        height += IMAGE_PX * len(_IMAGE.findall(line))
    return height + CELL_PADDING_PX


def code_px(source: str) -> int:
    lines = source.splitlines() or [""]
    return sum(CODE_LINE_PX * wrapped_lines(line, CODE_COLUMNS) for line in lines) + CELL_PADDING_PX


@dataclass
class Unit:
    title: str
    text_px: int = 0
    code_px: int = 0
    # (height, is visible code) of each cell in order, to cut into screens
    cells: list = field(default_factory=list)

    @property
    def screens(self) -> float:
        return (self.text_px + self.code_px) / SCREEN_PX

    @property
    def code_screens(self) -> int:
        """Screenfuls (cut from the unit's top) more than half of whose height is visible code."""
        count, filled, code = 0, 0, 0
        for height, is_code in self.cells:
            while height > 0:
                take = min(height, SCREEN_PX - filled)
                filled += take
                code += take if is_code else 0
                height -= take
                if filled == SCREEN_PX:
                    count += code * 2 > SCREEN_PX
                    filled, code = 0, 0
        return count + (filled > 0 and code * 2 > filled)


# The headings that open a unit; every other `## ` heading stays inside the unit it is in.
UNIT_HEADING = re.compile(r"^## ((?:本章导读|本章小结|第.{1,3}部分|附).*)$", re.M)
_HEADING_LEVEL = re.compile(r"^(#{1,6})\s", re.M)
HIDDEN_BUTTON_PX = 34      # a collapsed heading's "N cells hidden" button


def cell_source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def heading_level(cell: dict) -> int | None:
    """The level of a markdown cell's first heading (1 for `#`), or None."""
    found = _HEADING_LEVEL.search(cell_source(cell)) if cell["cell_type"] == "markdown" else None
    return len(found.group(1)) if found else None


def hidden_by_collapsed_headings(cells: list) -> set[int]:
    """Indexes of the cells JupyterLab hides under collapsed headings: after a markdown cell with
    `jp-MarkdownHeadingCollapsed`, every cell up to the next heading of its level or higher."""
    hidden, level = set(), None
    for index, cell in enumerate(cells):
        this = heading_level(cell)
        if level is not None and (this is None or this > level):
            hidden.add(index)
            continue
        level = this if cell.get("metadata", {}).get("jp-MarkdownHeadingCollapsed") else None
    return hidden


def units(notebook: dict) -> list[Unit]:
    """The notebook cut into units (`UNIT_HEADING`), each unit's estimated height."""
    found = [Unit("（开头）")]
    hidden = hidden_by_collapsed_headings(notebook["cells"])
    for index, cell in enumerate(notebook["cells"]):
        source = cell_source(cell)
        heading = UNIT_HEADING.search(source) if cell["cell_type"] == "markdown" else None
        if heading:
            found.append(Unit(heading.group(1).strip()))
        unit = found[-1]
        if index in hidden:
            continue
        folded = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden", False)
        if folded:
            unit.text_px += FOLDED_CELL_PX
            unit.cells.append((FOLDED_CELL_PX, False))
        elif cell["cell_type"] == "code":
            height = code_px(source)
            unit.code_px += height
            unit.cells.append((height, True))
        else:
            height = markdown_px(source)
            if cell.get("metadata", {}).get("jp-MarkdownHeadingCollapsed"):
                height += HIDDEN_BUTTON_PX
            unit.text_px += height
            unit.cells.append((height, False))
    return [unit for unit in found if unit.cells]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path, nargs="?", default=REPO_ROOT / STUDENT_NOTEBOOK)
    args = parser.parse_args(argv)
    found = units(json.loads(args.notebook.read_text(encoding="utf-8")))
    for unit in found:
        print(f"{unit.screens:5.1f} screens  {unit.code_screens:3d} mostly code  {unit.title[:60]}")
    print(f"{sum(u.screens for u in found):5.1f} screens in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
