"""The solutions for students, after the deadline: one self-contained HTML file and its PDF.

    python -m grader.kit.publish.export [--out export]

Reads the committed, executed solutions notebook (`solutions/`) and writes
`export/ch34_prefix_cache_solutions.html` and `.pdf`. The HTML needs no network: nbconvert's
template would load MathJax (and require.js) from a CDN, so the maths is converted to MathML
here (latex2mathml; Chromium and Firefox render MathML natively), the template's scripts are
(MathJax, require.js, mermaid) dropped, plots are embedded and pictures on the web (the Colab
badge) become links. A cell the notebook opens folded (`#@title`) shows its title only; the
hints and 深入 boxes (`<details>`) print open; code, printed output and code spans in prose tables
wrap at the margin; computed tables keep each number on one line; the figures (PNG in data
addresses, rendered at twice their size) fit the page's width. The PDF is
that HTML printed by Debian's headless Chromium (`make export` installs it, the Chinese fonts
and the colour emoji font, when it may).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from jinja2 import DictLoader
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert import HTMLExporter

from ..errors import ExportError, run_command
from ..paths import ASSIGNMENT, REPO_ROOT, SOLUTIONS_NOTEBOOK

HTML_NAME = f"{ASSIGNMENT}_solutions.html"
PDF_NAME = f"{ASSIGNMENT}_solutions.pdf"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_css -%}{{ super() }}<style>
:root {
  --ch34-emoji: "Noto Color Emoji", "Apple Color Emoji", "Segoe UI Emoji";
  --ch34-sans: system-ui, "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", var(--ch34-emoji), sans-serif;
  --jp-content-font-family: var(--ch34-sans);
  --jp-ui-font-family: var(--ch34-sans);
  --jp-code-font-family: "DejaVu Sans Mono", "Noto Sans Mono CJK SC", monospace, var(--ch34-emoji);
}
math[display="block"] { margin: 1em 0; font-size: 1.15em; }
/* Code and printed output wrap at the margin instead of running off it (a page cannot scroll). */
.jp-Cell pre { white-space: pre-wrap; overflow-wrap: break-word; }
/* Computed tables: a number never breaks across lines (headings may); a wide table gets smaller
   type in print instead of a scroll bar that paper cannot use. */
.jp-OutputArea-output table td { white-space: nowrap; }
.jp-OutputArea-output td { overflow-wrap: normal; word-break: keep-all; }
/* Prose tables: a long code span breaks inside its cell instead of pushing the table off the page. */
.jp-MarkdownOutput table { max-width: 100%; }
.jp-MarkdownOutput td, .jp-MarkdownOutput th { overflow-wrap: anywhere; }
.jp-MarkdownOutput td code, .jp-MarkdownOutput th code { white-space: normal; overflow-wrap: anywhere; }
/* Hints and 深入 boxes print open (`open_details`), framed so they read as asides. */
.jp-MarkdownOutput details { border: 1px solid #c9d1d9; border-radius: 4px; padding: 0.2em 0.8em;
  margin: 0.6em 0; background: #f8fafc; }
.jp-MarkdownOutput details > summary { font-weight: bold; margin: 0.2em 0; }
.jp-MarkdownOutput img { max-width: 100%; height: auto; }
@page { size: A4; margin: 15mm; }
@media print {
  /* Only what is short keeps whole (a picture, a table row; a heading or a figure stays with what
     follows it, its caption): a cell kept whole moved to the next page and left the page before it half empty. */
  .jp-MarkdownOutput img, .jp-OutputArea-output img, .jp-MarkdownOutput tr { break-inside: avoid-page; }
  .jp-MarkdownOutput h1, .jp-MarkdownOutput h2, .jp-MarkdownOutput h3, .jp-MarkdownOutput h4,
  .jp-MarkdownOutput h5, details > summary { break-after: avoid-page; }
  /* a figure cell: picture and caption (markdown puts the picture in a paragraph of its own) */
  .jp-MarkdownOutput:has(> img), .jp-MarkdownOutput:has(> p > img:only-child) { break-inside: avoid-page; }
  .jp-Cell pre, .jp-MarkdownOutput p { orphans: 3; widows: 3; }
  .jp-MarkdownOutput table { font-size: 11px; }
  .jp-MarkdownOutput details > summary { list-style: none; }
  .jp-MarkdownOutput details > summary::-webkit-details-marker { display: none; }
  .jp-Cell pre { font-size: 11px; line-height: 1.3; }
  .jp-OutputArea-output, .jp-OutputArea-output.jp-RenderedHTMLCommon { overflow: visible; }
  .jp-OutputArea-output table { font-size: 9px; }
  .jp-OutputArea-output table th { white-space: normal; }
  .jp-OutputArea-output img { max-width: 100%; height: auto; }
}
</style>{%- endblock html_head_css -%}
"""
# A folded cell (`#@title`, `jupyter.source_hidden`) prints as its title, as the notebook opens.
FOLDED_NOTE = "# （提供的代码，在 notebook 里默认折叠：展开这一格可以看到全部）"
# Code (fenced blocks, inline spans) is left alone; maths is $$...$$ or $...$ outside it.
CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`)", re.DOTALL)
DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.DOTALL)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\s)([^$\n]+?)(?<!\s)\$(?!\d)")
CLOSED_DETAILS = re.compile(r"<details(?![^>]*\bopen\b)")
WEB_IMAGE = re.compile(r"!\[([^\]]*)\]\((https?://[^)\s]+)\)")


def markdown_with_mathml(text: str) -> str:
    """`text` with every LaTeX formula outside code replaced by MathML, web images by their alt text."""
    pieces = CODE.split(text)
    for k in range(0, len(pieces), 2):  # even pieces are prose, odd ones code
        prose = DISPLAY_MATH.sub(lambda m: mathml(m.group(1), "block"), pieces[k])
        prose = INLINE_MATH.sub(lambda m: mathml(m.group(1), "inline"), prose)
        pieces[k] = WEB_IMAGE.sub(lambda m: m.group(1) or "链接", prose)
    return "".join(pieces)


def open_details(text: str) -> str:
    """`text` with every folded box (`<details>`: the hints, the 深入 boxes) opened: paper cannot
    unfold one, and the solutions are read after the deadline."""
    return CLOSED_DETAILS.sub("<details open", text)


def mathml(latex: str, display: str) -> str:
    # One line: a blank line would end the markdown HTML block around a display formula.
    return latex_to_mathml(latex.strip(), display=display).replace("\n", "")


def export_html(solutions: Path, target: Path) -> Path:
    """Write the self-contained HTML of the solutions notebook to `target`."""
    nb = nbformat.read(solutions, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = open_details(markdown_with_mathml(cell.source))
        elif cell.metadata.get("jupyter", {}).get("source_hidden"):
            cell.source = f"{cell.source.splitlines()[0]}\n{FOLDED_NOTE}"
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"ch34_export.html.j2": TEMPLATE})],
        template_file="ch34_export.html.j2",
        language_code="zh",
    )
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": "第 34 章 参考答案"}})
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(body, encoding="utf-8")
    return target


def browser() -> str:
    """The headless browser that prints the PDF, or an ExportError saying how to get one."""
    for name in BROWSERS:
        if shutil.which(name):
            return name
    raise ExportError(
        "error: no Chromium to print the PDF with: run `make export` as root (it installs "
        "Debian's chromium and the fonts) or `sudo apt-get install chromium fonts-noto-cjk "
        "fonts-noto-color-emoji`"
    )


def export_pdf(html_file: Path, target: Path) -> Path:
    """Print `html_file` to `target` with headless Chromium (no network needed)."""
    with tempfile.TemporaryDirectory(prefix="ch34-chromium-") as profile:
        run = subprocess.run(
            [
                browser(),
                "--headless",
                "--no-sandbox",  # root in a container: Chromium's own sandbox cannot start
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--no-pdf-header-footer",
                f"--print-to-pdf={target.resolve()}",
                html_file.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    if run.returncode != 0 or not target.exists() or target.stat().st_size == 0:
        raise ExportError(f"error: Chromium could not print {html_file}: {run.stderr[-1500:]}")
    return target


def main(argv=None) -> int:
    """The command line: the kit's errors become their message and exit status."""
    return run_command(run, argv)


def run(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the solutions as offline HTML and PDF.")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "export")
    parser.add_argument("--solutions", type=Path, default=REPO_ROOT / SOLUTIONS_NOTEBOOK)
    args = parser.parse_args(argv)
    html_file = export_html(args.solutions, args.out / HTML_NAME)
    pdf_file = export_pdf(html_file, args.out / PDF_NAME)
    print(f"wrote {html_file} and {pdf_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
