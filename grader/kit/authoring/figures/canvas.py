"""A small SVG canvas for the chapter's figures: boxes, lines, arrows and text, written as text.

The figures are drawn at build time and compared byte for byte with the committed notebook, on
machines whose fonts differ: so nothing is measured or rasterised here. Coordinates are integers
(or halves), every element is written in the order it was drawn, and the text is left to the
reader's browser (`<text>` with a font list that starts with the CJK fonts the platforms have).
"""

from __future__ import annotations

from xml.sax.saxutils import escape

SANS = "'Noto Sans CJK SC','Source Han Sans SC','PingFang SC','Microsoft YaHei',sans-serif"
MONO = "'DejaVu Sans Mono','Noto Sans Mono CJK SC',Menlo,Consolas,monospace"
INK = "#1f2933"
MUTED = "#5f6b7a"
# One colour a role, the same in every figure: a hit / cached, this step's work, a second
# request, what is waiting or evicted, a plain box.
HIT = "#c8ecd2"
HIT_EDGE = "#2f8f4e"
WORK = "#cfe0fb"
WORK_EDGE = "#2f6fdb"
OTHER = "#fde2c4"
OTHER_EDGE = "#d9822b"
WAIT = "#eceff3"
WARN_EDGE = "#c0392b"


def _num(value: float) -> str:
    """A coordinate as the shortest exact text: 12, 12.5 (never 12.000001)."""
    return f"{round(value * 2) / 2:g}"


class Canvas:
    """An SVG picture `width` x `height` pixels, drawn element by element; `svg()` is its text."""

    def __init__(self, width: int, height: int, title: str):
        self.width, self.height, self.title = width, height, title
        self.parts: list[str] = []

    def rect(self, x, y, w, h, *, fill="#ffffff", stroke=INK, width=1, dash=False, radius=4):
        extra = ' stroke-dasharray="5 4"' if dash else ""
        self.parts.append(
            f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" '
            f'rx="{radius}" fill="{fill}" stroke="{stroke}" stroke-width="{width}"{extra}/>'
        )

    def circle(self, x, y, r, *, fill="#ffffff", stroke=INK, width=1.5):
        self.parts.append(
            f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{width}"/>'
        )

    def line(self, x1, y1, x2, y2, *, stroke=INK, width=1.5, arrow=False, dash=False):
        extra = ' marker-end="url(#arrow)"' if arrow else ""
        extra += ' stroke-dasharray="5 4"' if dash else ""
        self.parts.append(
            f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}" '
            f'stroke="{stroke}" stroke-width="{width}"{extra}/>'
        )

    def text(self, x, y, words, *, size=14, anchor="start", bold=False, mono=False, fill=INK):
        weight = ' font-weight="bold"' if bold else ""
        kind = ' class="m"' if mono else ""
        where = "" if anchor == "start" else f' text-anchor="{anchor}"'
        self.parts.append(
            f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size}"{where}{kind} fill="{fill}"'
            f"{weight}>{escape(words)}</text>"
        )

    def boxed(
        self, x, y, w, h, words, *, fill="#ffffff", stroke=INK, size=14, mono=True, bold=False
    ):
        """A box with `words` centred in it (a token, a block id, a request)."""
        self.rect(x, y, w, h, fill=fill, stroke=stroke)
        self.text(
            x + w / 2,
            y + h / 2 + size * 0.36,
            words,
            size=size,
            anchor="middle",
            mono=mono,
            bold=bold,
        )

    def svg(self) -> str:
        """The picture as a standalone SVG document (no XML declaration, ends without a newline)."""
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
            f'viewBox="0 0 {self.width} {self.height}" role="img">'
            f"<title>{escape(self.title)}</title>"
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{INK}"/>'
            f"</marker><style>text{{font-family:{SANS}}}text.m{{font-family:{MONO}}}</style></defs>"
            f'<rect width="{self.width}" height="{self.height}" fill="#ffffff"/>'
        )
        return head + "".join(self.parts) + "</svg>"
