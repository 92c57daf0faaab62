"""`make export`: the solutions as offline HTML and PDF, opened in a real headless browser: the
maths, the Chinese, the figures, the hints printed open, no blank page, nothing past the margin.

Needs Debian's chromium, poppler-utils and fonts-noto-cjk (`make test` installs them as root).
The screenshots stay in the test's temporary folder for a person to look at.
"""

import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from contextlib import contextmanager

import nbformat
import pytest
import websocket
from PIL import Image

from grader.kit.authoring.figures import ASSETS, FIGURES, data_uri
from grader.kit.authoring.nbsource import REPO_ROOT
from grader.kit.paths import SOLUTIONS_NOTEBOOK
from grader.kit.publish.export import (
    HTML_NAME,
    PDF_NAME,
    browser,
    markdown_with_mathml,
    open_details,
)

RAW_TEX = re.compile(r"\$[^$\s][^$]*\$|\\frac|\\,")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    for tool in ("pdftoppm", "pdftotext"):
        assert shutil.which(tool), f"{tool} is missing: run `make export-tools` (poppler-utils)"
    out = tmp_path_factory.mktemp("export")
    run = subprocess.run(
        [sys.executable, "-m", "grader.kit.publish.export", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def chromium(*args, timeout=180):
    return subprocess.run(
        [browser(), "--headless", "--no-sandbox", "--disable-gpu", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_html_loads_nothing_from_the_network(exported):
    page = (exported / HTML_NAME).read_text(encoding="utf-8")
    fetched = re.findall(
        r"<(?:script|img|link|iframe)\b[^>]*\b(?:src|href)=\"(https?:[^\"]+)", page
    )
    assert fetched == []
    assert "mathjax" not in page.lower() and "import(" not in page


def test_html_maths_is_mathml_in_a_real_browser(exported):
    html_file = exported / HTML_NAME
    dom = chromium("--dump-dom", html_file.as_uri()).stdout
    assert dom.count("<math") >= 2, "both formulas of the notebook become MathML"
    text = re.sub(r"<pre\b.*?</pre>|<code\b.*?</code>|<[^>]+>", " ", dom, flags=re.DOTALL)
    assert not RAW_TEX.search(text), RAW_TEX.search(text)
    shot = exported / "html.png"
    chromium(
        "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1200,1600", html_file.as_uri()
    )
    image = Image.open(shot).convert("L")
    assert image.getextrema()[0] < 100, "the screenshot shows text"


def test_pdf_prints_the_maths_and_the_chinese_glyphs(exported):
    pdf = exported / PDF_NAME
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    assert "前缀缓存" in text and "分块预填充" in text
    assert not RAW_TEX.search(text), RAW_TEX.search(text)
    # MathML's identifiers print in mathematical italic (U+1D446 ...), never as TeX source
    assert "𝐿𝑑𝑇" in text and "𝑆" in text and "ℎ" in text, "S(h, T) = ... as MathML prints it"
    subprocess.run(
        ["pdftoppm", "-r", "60", "-png", "-f", "1", "-l", "1", str(pdf), str(exported / "pdf")],
        check=True,
    )


def test_browser_draws_the_chinese_with_a_chinese_font_and_the_maths_with_glyphs(exported):
    # The fonts the browser really used for a node (DevTools' CSS.getPlatformFontsForNode):
    # a box drawn for a missing glyph would show up as a Latin font here, or as none.
    url = (exported / HTML_NAME).as_uri()
    title, formula = platform_fonts(url, ["h1", "math[display=block] mi"])
    assert any("CJK" in f["familyName"] and f["glyphCount"] > 0 for f in title), title
    assert sum(f["glyphCount"] for f in formula) > 0, formula


def platform_fonts(url: str, selectors: list[str]) -> list[list[dict]]:
    """For each CSS selector, the platform fonts headless Chromium drew its first match with."""
    with devtools(url) as call:
        call("DOM.enable")
        call("CSS.enable")
        root = call("DOM.getDocument")["root"]["nodeId"]
        found = []
        for selector in selectors:
            node = call("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
            assert node, f"nothing matches {selector}"
            found.append(call("CSS.getPlatformFontsForNode", nodeId=node)["fonts"])
        return found


@contextmanager
def devtools(url: str):
    """Headless Chromium with `url` loaded; yields `call(method, **params)` (DevTools protocol)."""
    profile = tempfile.mkdtemp(prefix="ch34-cdp-")
    proc = subprocess.Popen(
        [browser(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
        + ["--remote-debugging-port=0", "--window-size=1200,1600", "about:blank"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in proc.stderr:
            if match := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                break
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/json"))
        page = next(t for t in targets if t["type"] == "page")
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        calls = iter(range(1, 10**6))

        def call(method, **params):
            ident = next(calls)
            ws.send(json.dumps({"id": ident, "method": method, "params": params}))
            while (reply := json.loads(ws.recv())).get("id") != ident:
                pass
            assert "error" not in reply, reply
            return reply["result"]

        call("Page.enable")
        call("Page.navigate", url=url)
        while json.loads(ws.recv()).get("method") != "Page.loadEventFired":
            pass
        yield call
        ws.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def test_printed_code_wraps_tables_keep_numbers_whole_and_emoji_have_a_font(exported):
    """As the PDF lays the page out (print media, the width inside an A4 page's margins): no
    code or output line runs past the page, no cell of a computed table breaks across lines,
    a folded cell prints its title, ✅ is drawn in colour."""
    url = (exported / HTML_NAME).as_uri()
    with devtools(url) as call:
        call("Emulation.setEmulatedMedia", media="print")
        page_px = round((210 - 2 * 15) / 25.4 * 96)  # @page A4, 15 mm margins, CSS pixels
        call(
            "Emulation.setDeviceMetricsOverride",
            width=page_px,
            height=1000,
            deviceScaleFactor=1,
            mobile=False,
        )

        def value(expression):
            return call("Runtime.evaluate", expression=expression, returnByValue=True)["result"][
                "value"
            ]

        overflowing = value(
            "[...document.querySelectorAll('.jp-Cell pre')].filter(p => p.scrollWidth > "
            f"p.clientWidth + 1 || p.getBoundingClientRect().right > {page_px} + 1)"
            ".map(p => p.textContent.slice(0, 60))"
        )
        assert overflowing == [], overflowing
        lines = value(  # the line boxes each table cell's text takes
            "[...document.querySelectorAll('.jp-OutputArea-output table td')].map(td => {"
            " const r = document.createRange(); r.selectNodeContents(td);"
            " return [td.textContent, new Set([...r.getClientRects()].map(b => b.top)).size]; })"
        )
        assert len(lines) > 100, "the computed tables are HTML tables"
        broken = [text for text, count in lines if count > 1]
        assert broken == [], broken[:5]
        wide = value(
            "[...document.querySelectorAll('.jp-OutputArea-output table')]"
            f".filter(t => t.getBoundingClientRect().right > {page_px} + 1).length"
        )
        assert wide == 0, f"{wide} tables run past the page"
        probe = value(  # the GPU probe, the last cell: 245 lines in the notebook, folded
            "[...document.querySelectorAll('.jp-Cell')].pop()"
            ".querySelector('.jp-InputArea pre').textContent"
        )
        assert "@title" in probe and "RUN_MODE" not in probe, probe[:200]
    (checks,) = platform_fonts(url, ['[id="cell-id=visible_tests"] .jp-OutputArea-output pre'])
    emoji = [f for f in checks if "emoji" in f["familyName"].lower()]
    assert emoji and emoji[0]["glyphCount"] > 0, checks


def test_maths_in_code_stays_code_and_dollar_amounts_stay_text():
    text = "成本 `$x$` 与\n```\nprint('$i$')\n```\n位置 $i$，价格 5$ 和 10$"
    converted = markdown_with_mathml(text)
    assert "`$x$`" in converted and "print('$i$')" in converted
    assert (
        '<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline"><mrow><mi>i</mi>'
        in converted
    )
    assert "5$ 和 10$" in converted


def png_size(name: str) -> tuple[int, int]:
    """The committed PNG's width and height in pixels (twice the drawing's CSS size)."""
    return Image.open(io.BytesIO((ASSETS / f"{name}.png").read_bytes())).size


def test_html_shows_each_figure_as_a_loaded_png(exported):
    page = (exported / HTML_NAME).read_text(encoding="utf-8")
    missing = [name for name in FIGURES if data_uri(name) not in page]
    assert missing == [], (
        f"the solutions lack {missing}: run `make solutions` after changing a figure"
    )
    assert 'src="data:image/svg+xml' not in page, (
        "nbconvert's own CSS has SVG icons; no figure is SVG"
    )
    with devtools((exported / HTML_NAME).as_uri()) as call:
        shown = call(
            "Runtime.evaluate",
            expression="[...document.images].filter(i => i.src.startsWith('data:image/png'))"
            ".map(i => [i.alt, i.naturalWidth, i.naturalHeight,"
            " Math.round(i.getBoundingClientRect().width)])",
            returnByValue=True,
        )["result"]["value"]
    drawn = {alt: (natural, high, width) for alt, natural, high, width in shown}
    for name, figure in FIGURES.items():
        natural, high, width = drawn[figure.alt]
        assert (natural, high) == png_size(name) and width > 500, (name, natural, high, width)


def page_texts(pdf) -> list[str]:
    """Each page's text with all white space removed (pdftotext breaks lines where it likes)."""
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    return [re.sub(r"\s+", "", page) for page in text.split("\f")]


def ink(png) -> float:
    """The share of a page's pixels that are not near white."""
    histogram = Image.open(png).convert("L").histogram()
    return sum(histogram[:200]) / sum(histogram)


def pdf_images(pdf, page: int) -> list[tuple[int, int]]:
    """(width, height) in pixels of every picture printed on `page` (pdfimages -list)."""
    listing = subprocess.run(
        ["pdfimages", "-list", "-f", str(page), "-l", str(page), str(pdf)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split() for line in listing.splitlines()[2:]]  # two header lines
    return [(int(row[3]), int(row[4])) for row in rows if row[2] == "image"]


def test_pdf_prints_each_figure_on_the_page_of_its_caption(exported):
    pdf = exported / PDF_NAME
    pages = page_texts(pdf)
    for number, name in enumerate(FIGURES, 1):  # FIGURES is in the notebook's order
        # The picture is the PNG at full resolution, on the page its caption prints on.
        caption = f"图{number}" + re.sub(r"\s+", "", FIGURES[name].caption)[:2]
        at = [k + 1 for k, page in enumerate(pages) if caption in page]
        assert at, f"no page prints the caption of 图 {number} ({name})"
        printed = [k for k in at if png_size(name) in pdf_images(pdf, k)]
        assert printed, f"图 {number} ({name}): no {png_size(name)} picture on pages {at}"
        page = str(printed[0])
        subprocess.run(
            ["pdftoppm", "-r", "50", "-png", "-f", page, "-l", page, str(pdf)]
            + [str(exported / f"figure-{name}")],
            check=True,
        )
        (png,) = exported.glob(f"figure-{name}*.png")
        assert ink(png) > 0.03, f"the page of {name} is nearly blank"


def test_pdf_has_no_blank_page(exported):
    subprocess.run(
        ["pdftoppm", "-r", "20", "-png", str(exported / PDF_NAME), str(exported / "page")],
        check=True,
    )
    pages = sorted(exported.glob("page-*.png"))
    blank = [png.name for png in pages if ink(png) < 0.003]
    assert len(pages) > 20 and blank == [], blank


def first_printed_words(markdown: str) -> str:
    """The first words a box prints, as pdftotext reads them: no markup, no list bullet, a table's
    first cell (pdftotext may lay a table's columns out in any order), white space removed."""
    for line in re.sub(r"<[^>]+>", "", markdown).splitlines():
        line = re.sub(r"^\s*(?:[-*+]|\d+\.)\s+", "", line.strip())
        if line.startswith("|"):
            line = next((cell for cell in line.split("|") if cell.strip()), "")
            if re.fullmatch(r"[\s:-]*", line):
                continue
        words = re.sub(r"[`*\s]", "", line)
        if words:
            return words[:12]
    return ""


def test_printed_hints_are_open_and_legible(exported):
    """Every folded box (hints, 深入) prints open, in type as large as the prose around it."""
    nb = nbformat.read(REPO_ROOT / SOLUTIONS_NOTEBOOK, as_version=4)
    bodies = [
        first_printed_words(body)
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for body in re.findall(r"</summary>(.*?)</details>", cell.source, flags=re.DOTALL)
    ]
    assert len(bodies) > 20, "the notebook's hints are <details> boxes"
    printed = "".join(page_texts(exported / PDF_NAME))
    printed = re.sub(r"[`*]", "", printed)
    assert [body for body in bodies if body not in printed] == []
    with devtools((exported / HTML_NAME).as_uri()) as call:
        call("Emulation.setEmulatedMedia", media="print")
        closed, smallest = call(
            "Runtime.evaluate",
            expression="const d = [...document.querySelectorAll('details')];"
            "[d.filter(x => !x.open).length,"
            " Math.min(...d.map(x => parseFloat(getComputedStyle(x).fontSize)))]",
            returnByValue=True,
        )["result"]["value"]
    assert closed == 0 and smallest >= 12, (closed, smallest)


def test_printed_prose_tables_fit_the_page_with_their_code_spans(exported):
    """Tables in the prose (long `code` spans in their cells) wrap inside the A4 page in print."""
    with devtools((exported / HTML_NAME).as_uri()) as call:
        call("Emulation.setEmulatedMedia", media="print")
        page_px = round((210 - 2 * 15) / 25.4 * 96)
        call(
            "Emulation.setDeviceMetricsOverride",
            width=page_px,
            height=1000,
            deviceScaleFactor=1,
            mobile=False,
        )
        wide = call(
            "Runtime.evaluate",
            expression="[...document.querySelectorAll('.jp-MarkdownOutput table')]"
            f".filter(t => t.getBoundingClientRect().right > {page_px} + 1 || [...t.querySelectorAll"
            "('td, th')].some(c => c.scrollWidth > c.clientWidth + 1))"
            ".map(t => t.textContent.trim().slice(0, 40))",
            returnByValue=True,
        )["result"]["value"]
        count = call(
            "Runtime.evaluate",
            expression="document.querySelectorAll('.jp-MarkdownOutput table code').length",
            returnByValue=True,
        )["result"]["value"]
    assert count > 20 and wide == [], wide


def test_folded_boxes_open_once():
    text = "<details><summary>提示</summary>x</details>\n<details open><summary>深入</summary>y</details>"
    opened = open_details(text)
    assert opened.count("<details open>") == 2 and "open open" not in opened
