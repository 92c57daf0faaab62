"""Screenshots of the notebooks as a person sees them: the student notebook open in a real
JupyterLab (folds applied), and the exported solutions page.

    python -m grader.kit.publish.screenshots [--out build/screenshots] [--pages 12]

Starts a local JupyterLab on a free port with a random token (its settings and workspaces in a
temporary folder, nothing of the user's touched), opens the student notebook in headless
Chromium and saves a 1280-pixel-wide PNG per screenful while scrolling down the notebook
(`lab-01.png`, ...); then the same for `export/ch34_prefix_cache_solutions.html` when it exists
(`make export`; `solutions-01.png`, ...). Chromium is driven over its DevTools protocol
(websocket-client, which Jupyter Server already installs). Nothing here is a test: a person looks
at the pictures.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from ..errors import ExportError, run_command
from ..paths import NOTEBOOK_NAME, REPO_ROOT, STUDENT_NOTEBOOK
from .export import HTML_NAME, browser

WIDTH, HEIGHT = 1280, 1000
# JupyterLab's notebook scrolls inside this element; an exported page scrolls the window.
LAB_SCROLLER = ".jp-NotebookPanel .jp-WindowedPanel-outer"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, seconds: float) -> None:
    """Poll `url` until it answers 200, or raise an ExportError after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise ExportError(f"error: {url} did not answer within {seconds:.0f} s")


@contextmanager
def jupyter_lab(notebook: Path):
    """A JupyterLab serving a copy of `notebook`; yields the notebook's address (token included)."""
    with tempfile.TemporaryDirectory(prefix="ch34-lab-") as tmp:
        root, home = Path(tmp) / "root", Path(tmp) / "home"
        root.mkdir()
        shutil.copy(notebook, root / notebook.name)
        # No "get notified about Jupyter news?" pop-up over the cells.
        news = (
            home
            / "settings"
            / "@jupyterlab"
            / "apputils-extension"
            / "notification.jupyterlab-settings"
        )
        news.parent.mkdir(parents=True)
        news.write_text(json.dumps({"fetchNews": "false"}), encoding="utf-8")
        port, token = free_port(), secrets.token_hex(16)
        env = dict(
            os.environ,
            JUPYTER_CONFIG_DIR=str(home / "config"),
            JUPYTER_DATA_DIR=str(home / "data"),
            JUPYTER_RUNTIME_DIR=str(home / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        )
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root"]
        command += [f"--port={port}", "--ip=127.0.0.1", f"--ServerApp.token={token}"]
        command += [f"--ServerApp.root_dir={root}"]
        log = open(Path(tmp) / "lab.log", "w")
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", 60)
            yield f"http://127.0.0.1:{port}/lab/tree/{notebook.name}?token={token}"
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()


class Chromium:
    """Headless Chromium driven over the DevTools protocol (one page)."""

    def __init__(self, profile: Path):
        import websocket  # websocket-client: a dependency of jupyter_server

        port = free_port()
        self.process = subprocess.Popen(
            [
                browser(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--remote-debugging-port={port}",
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{HEIGHT}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(f"http://127.0.0.1:{port}/json/version", 30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as answer:
            page = next(t for t in json.load(answer) if t["type"] == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise ExportError(f"error: Chromium {method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def wait_until(self, expression: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise ExportError(f"error: the page never satisfied {expression}")
            time.sleep(0.5)

    def key(self, key: str, code: str, key_code: int, modifiers: int = 0) -> None:
        """Press and release one key (`modifiers`: 2 is Ctrl) in the page."""
        for kind in ("keyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code=code,
                windowsVirtualKeyCode=key_code,
                modifiers=modifiers,
            )

    def screenshot(self, target: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        target.write_bytes(base64.b64decode(data))
        return target

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        self.process.wait(timeout=10)


def scroll_and_shoot(page: Chromium, scroller: str | None, prefix: Path, pages: int) -> list[Path]:
    """A screenshot per screenful from the top, `pages` at most; `scroller` is the scrolling
    element's CSS selector, or None for the window."""
    box = (
        f"document.querySelector({json.dumps(scroller)})"
        if scroller
        else "document.scrollingElement"
    )
    shots = []
    for index in range(pages):
        page.evaluate(f"{box}.scrollTop = {index} * ({box}.clientHeight - 80)")
        time.sleep(1.0)  # JupyterLab renders the cells that scroll into view
        shots.append(page.screenshot(prefix.with_name(f"{prefix.name}-{index + 1:02d}.png")))
        at_end = page.evaluate(f"{box}.scrollTop + {box}.clientHeight >= {box}.scrollHeight - 2")
        if at_end:
            break
    return shots


def lab_screenshots(notebook: Path, out: Path, pages: int) -> list[Path]:
    """The student notebook as JupyterLab opens it, screenful by screenful."""
    with jupyter_lab(notebook) as url, tempfile.TemporaryDirectory() as profile:
        page = Chromium(Path(profile))
        try:
            page.call("Page.enable")
            page.call("Page.navigate", url=url)
            page.wait_until(f"!!document.querySelector({json.dumps(LAB_SCROLLER)})", 90)
            page.wait_until("document.querySelectorAll('.jp-Cell').length > 10", 60)
            time.sleep(3)  # fonts, markdown and the kernel indicator settle
            page.key("b", "KeyB", 66, modifiers=2)  # Ctrl+B: fold the file browser away
            time.sleep(1)
            return scroll_and_shoot(page, LAB_SCROLLER, out / "lab", pages)
        finally:
            page.close()


def page_screenshots(html_file: Path, out: Path, pages: int) -> list[Path]:
    """A static page (the exported solutions), screenful by screenful."""
    with tempfile.TemporaryDirectory() as profile:
        page = Chromium(Path(profile))
        try:
            page.call("Page.enable")
            page.call("Page.navigate", url=html_file.resolve().as_uri())
            page.wait_until("document.readyState === 'complete'", 60)
            return scroll_and_shoot(page, None, out / "solutions", pages)
        finally:
            page.close()


def main(argv=None) -> int:
    """The command line: the kit's errors become their message and exit status."""
    return run_command(run, argv)


def run(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "screenshots")
    parser.add_argument("--pages", type=int, default=80, help="screenfuls per notebook at most")
    parser.add_argument("--notebook", type=Path, default=REPO_ROOT / STUDENT_NOTEBOOK)
    parser.add_argument("--solutions-html", type=Path, default=REPO_ROOT / "export" / HTML_NAME)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    shots = lab_screenshots(args.notebook, args.out, args.pages)
    if args.solutions_html.exists():
        shots += page_screenshots(args.solutions_html, args.out, args.pages)
    else:
        print(f"no {args.solutions_html} (run `make export`): only {NOTEBOOK_NAME} in JupyterLab")
    print(f"wrote {len(shots)} screenshots to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
