"""`make figures`: each figure's SVG rendered to the PNG the notebook embeds, and its manifest.

    python -m grader.kit.authoring.figures.render [--out DIR]

Writes `grader/source/ch34_prefix_cache/figures/NAME.png` for every figure and `figures.json`
(sorted keys: the sha256 of the SVG text each PNG was rendered from, and of the PNG). Run it after
changing a drawing and commit what it writes; the build refuses a figure whose recorded SVG hash
is not its current drawing's (`figures.png_bytes`). Nothing else runs it: the PNG depends on the
machine's fonts and Chromium, the notebooks must not.

Rendering: Debian's headless Chromium (`make export-tools` installs it and the CJK fonts),
driven over DevTools by the kit's one helper (`publish.screenshots.Chromium`); the SVG is shown
as an `<img>` (as the notebooks showed it before) in a viewport of its size at device scale 2,
so text stays crisp on a high-density screen and when the column shrinks it; the screenshot is
reduced to a 256-colour palette without dithering (the drawings have flat fills and
anti-aliased text: no visible change, a mean difference under 0.05 of 255, and a third of the
bytes the notebook carries) and saved without an alpha channel (the drawing's background is
white).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree

from PIL import Image

from ...errors import ExportError, run_command
from . import ASSETS, FIGURES, MANIFEST, sha256

SCALE = 2  # device pixels per CSS pixel of the drawing
PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><style>html,body{{margin:0;"
    "background:#ffffff}}img{{display:block}}</style></head><body>"
    "<img id='figure' src='data:image/svg+xml;base64,{svg}' width='{width}' height='{height}'>"
    "</body></html>"
)


def size(svg: str) -> tuple[int, int]:
    """The drawing's width and height in CSS pixels (the root's attributes)."""
    root = ElementTree.fromstring(svg)
    return int(root.get("width")), int(root.get("height"))


def render_pngs(names) -> dict[str, bytes]:
    """{name: PNG bytes} of the figures `names`, rendered by one headless Chromium."""
    from ...publish.screenshots import Chromium

    rendered = {}
    with tempfile.TemporaryDirectory(prefix="ch34-figures-") as tmp:
        page = Chromium(Path(tmp) / "profile")
        try:
            page.call("Page.enable")
            for name in names:
                rendered[name] = render_one(page, name, Path(tmp))
        finally:
            page.close()
    return rendered


def render_one(page, name: str, tmp: Path) -> bytes:
    svg = FIGURES[name].draw()
    width, height = size(svg)
    html = tmp / f"{name}.html"
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    html.write_text(PAGE.format(svg=encoded, width=width, height=height), encoding="utf-8")
    page.call(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=height,
        deviceScaleFactor=SCALE,
        mobile=False,
    )
    page.call("Page.navigate", url=html.as_uri())
    page.wait_until(
        "document.readyState === 'complete' && document.getElementById('figure')?.complete"
        " && document.fonts.status === 'loaded'",
        30,
    )
    shot = page.call(
        "Page.captureScreenshot",
        format="png",
        clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
    )["data"]
    image = Image.open(io.BytesIO(base64.b64decode(shot))).convert("RGB")
    if image.size != (width * SCALE, height * SCALE):
        raise ExportError(
            f"error: Chromium drew {name} at {image.size}, not {width}x{height} x{SCALE}"
        )
    palette = image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)
    return out.getvalue()


def write(folder: Path) -> dict[str, dict[str, str]]:
    """Render every figure into `folder` and write its manifest; return the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    recorded = {}
    for name, png in render_pngs(sorted(FIGURES)).items():
        (folder / f"{name}.png").write_bytes(png)
        svg = FIGURES[name].draw().encode("utf-8")
        recorded[name] = {"png_sha256": sha256(png), "svg_sha256": sha256(svg)}
    manifest = folder / MANIFEST.name
    manifest.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return recorded


def main(argv=None) -> int:
    """The command line: the kit's errors become their message and exit status."""
    return run_command(run, argv)


def run(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ASSETS, help="where the PNGs go")
    args = parser.parse_args(argv)
    for name in write(args.out):
        png = args.out / f"{name}.png"
        print(f"wrote {png} ({png.stat().st_size} bytes)")
    print(f"wrote {args.out / MANIFEST.name}: commit the folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
