"""The generated pages in a real browser: headless Chromium, driven over the DevTools protocol.

Opens the report of ``hypviz demo``, the index and a page of a site rendered from tiny notebooks,
and a real notebook page (rendered from its stored outputs), and asserts that each page loads
with no console error, no uncaught exception and no network request (only ``file:`` and
``data:`` URLs), that the plotly figures rendered (``.js-plotly-plot`` with ``svg.main-svg``
inside), that images decoded, and that links between pages lead to files that exist.

Chromium is Debian's ``chromium`` package (``apt-get install -y chromium``); where it is missing
every test here is skipped with that reason (shown by ``pytest -ra``).  The protocol is spoken
with tornado's websocket client (tornado comes with ipykernel, a test dependency): no new package.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM = os.environ.get("HYPVIZ_CHROMIUM") or next((p for p in map(shutil.which, CANDIDATES) if p), None)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
)

if CHROMIUM is None:
    pytest.skip(
        "Chromium not found (looked for chromium, chromium-browser, google-chrome on PATH and $HYPVIZ_CHROMIUM); "
        "install Debian's package: apt-get update && apt-get install -y chromium",
        allow_module_level=True,
    )
websocket = pytest.importorskip("tornado.websocket", reason="tornado (from ipykernel) speaks the DevTools protocol here")

PROBE = r"""
(() => {
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
  const imgs = Array.from(document.images);
  return JSON.stringify({
    title: document.title,
    plots: plots.length,
    containers: document.querySelectorAll('.plot-container').length,
    svgs: document.querySelectorAll('svg.main-svg').length,
    rendered: plots.filter(p => p.querySelector('svg.main-svg') && p._fullLayout).length,
    traces: plots.reduce((n, p) => n + ((p.data || []).length), 0),
    images: imgs.length,
    images_ok: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    links: Array.from(document.links).map(a => a.getAttribute('href')),
    math: document.querySelectorAll('.MathJax_CHTML, .mjx-chtml, mjx-container').length,
    mathjax: typeof window.MathJax !== 'undefined',
    text: document.body ? document.body.innerText.length : 0,
  });
})()
"""


class Chromium:
    """One headless Chromium, a page per :meth:`open`; collects console errors and network requests."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="hypviz-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []

        def pump() -> None:
            for line in self.proc.stderr:
                self.log.append(line.rstrip())
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        self.ws_url = None
        while time.monotonic() < deadline and self.ws_url is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                self.ws_url = m.group(1)
        if self.ws_url is None:
            self.close()
            raise RuntimeError("Chromium did not start its DevTools endpoint:\n" + "\n".join(self.log[-20:]))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def open(self, url: str, settle: float = 0.5, timeout: float = 30.0, wait_for: str | None = None) -> dict:
        """Load ``url`` in a fresh tab; return the probe's result plus ``errors`` and ``requests``."""
        return asyncio.run(self._open(url, settle, timeout, wait_for))

    async def _open(self, url: str, settle: float, timeout: float, wait_for: str | None) -> dict:
        conn = await websocket.websocket_connect(self.ws_url, max_message_size=256 * 2**20)
        ids = iter(range(1, 10**9))
        events: list[dict] = []
        loaded = asyncio.Event()

        async def call(method: str, params: dict | None = None, session: str | None = None) -> dict:
            mid = next(ids)
            msg = {"id": mid, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            await conn.write_message(json.dumps(msg))
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                raw = await asyncio.wait_for(conn.read_message(), timeout=max(0.1, end - time.monotonic()))
                if raw is None:
                    raise RuntimeError("DevTools connection closed")
                data = json.loads(raw)
                if data.get("id") == mid:
                    if "error" in data:
                        raise RuntimeError(f"{method}: {data['error']}")
                    return data.get("result", {})
                if "method" in data:
                    events.append(data)
                    if data["method"] == "Page.loadEventFired":
                        loaded.set()
            raise TimeoutError(method)

        async def pump_events(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    raw = await asyncio.wait_for(conn.read_message(), timeout=max(0.05, end - time.monotonic()))
                except asyncio.TimeoutError:
                    return
                if raw is None:
                    return
                data = json.loads(raw)
                if "method" in data:
                    events.append(data)
                    if data["method"] == "Page.loadEventFired":
                        loaded.set()

        try:
            target = (await call("Target.createTarget", {"url": "about:blank"}))["targetId"]
            session = (await call("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                await call(f"{domain}.enable", session=session)
            await call("Page.navigate", {"url": url}, session=session)
            end = time.monotonic() + timeout
            while not loaded.is_set() and time.monotonic() < end:
                await pump_events(0.2)
            if not loaded.is_set():
                raise TimeoutError(f"{url} did not finish loading in {timeout} s")
            probe: dict = {}
            end = time.monotonic() + timeout
            while True:  # wait for the page to settle: figures drawn, MathJax done (if asked)
                await pump_events(settle)
                res = await call("Runtime.evaluate", {"expression": PROBE, "returnByValue": True}, session=session)
                probe = json.loads(res["result"]["value"])
                ready = True
                if wait_for:
                    res = await call(
                        "Runtime.evaluate", {"expression": wait_for, "returnByValue": True}, session=session
                    )
                    ready = bool(res["result"].get("value"))
                if ready or time.monotonic() > end:
                    break
            await call("Target.closeTarget", {"targetId": target})
        finally:
            conn.close()
        probe["errors"] = _errors(events)
        probe["requests"] = sorted(
            {
                e["params"]["request"]["url"][:120]
                for e in events
                if e["method"] == "Network.requestWillBeSent"
                and not e["params"]["request"]["url"].startswith(("file:", "data:", "blob:", "about:"))
            }
        )
        probe["failed"] = [
            e["params"].get("errorText", "") for e in events if e["method"] == "Network.loadingFailed"
        ]
        return probe


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", ""))[:300])
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))[:300])
        elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append("log: " + p["entry"].get("text", "")[:300] + " " + p["entry"].get("url", "")[:120])
    return out


def _check_clean(result: dict, what: str) -> None:
    assert result["errors"] == [], f"{what}: errors in the browser: {result['errors']}"
    assert result["requests"] == [], f"{what}: network requests: {result['requests']}"
    assert result["failed"] == [], f"{what}: resources failed to load: {result['failed']}"


@pytest.fixture(scope="module")
def browser():
    b = Chromium()
    yield b
    b.close()


def _load_notebooks_script():
    spec = importlib.util.spec_from_file_location("hypviz_notebooks_script_browser", ROOT / "scripts" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- #
# the report of `hypviz demo`
# --------------------------------------------------------------------------- #
def test_demo_report_renders_offline(browser, tmp_path, capsys):
    from hypviz import cli

    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    result = browser.open(out.joinpath("report.html").as_uri(), wait_for="document.querySelectorAll('svg.main-svg').length > 0")
    _check_clean(result, "report.html")
    assert result["title"].startswith("hypviz attention report")
    assert result["plots"] == 1 and result["rendered"] == 1, result
    assert result["containers"] >= 1 and result["svgs"] >= 1
    assert result["traces"] == 4  # spatial, focused and lorentz vs distance, the close-threshold line
    assert result["images"] == 3 and result["images_ok"] == 3, "the embedded PNG figures did not decode"
    assert result["links"] == []  # nothing to follow: the report is one file


# --------------------------------------------------------------------------- #
# the notebook site
# --------------------------------------------------------------------------- #
def _tiny_site(tmp_path: Path, mathjax: bool) -> Path:
    nbformat = pytest.importorskip("nbformat")
    nbscript = _load_notebooks_script()
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    figure = {"data": [{"type": "scatter", "x": [0, 1, 2], "y": [2, 1, 0]}], "layout": {"height": 300}}
    for i, (name, link) in enumerate(
        (("01_first", "[the second notebook](02_second.ipynb#Second-notebook)"), ("02_second", "[back](./01_first.ipynb)"))
    ):
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_markdown_cell(f"# {name.split('_')[1].title()} notebook\n\nSee {link}. Maths: $x^2 + y^2 = k$."),
            nbformat.v4.new_code_cell(
                "from IPython.display import publish_display_data\n"
                f"publish_display_data({{'application/vnd.plotly.v1+json': {figure!r}}})",
                outputs=[nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": figure})],
            ),
        ]
        nbformat.write(nb, nbdir / f"{name}.ipynb")
    out = tmp_path / "site"
    nbscript.render(out, notebooks_dir=nbdir, log=lambda *_: None, execute_notebooks=False, mathjax_dir=None if mathjax else False)
    return out


def test_site_index_and_pages_render_offline_and_link_up(browser, tmp_path):
    out = _tiny_site(tmp_path, mathjax=False)
    index = browser.open((out / "index.html").as_uri())
    _check_clean(index, "index.html")
    assert index["links"] == ["01_first.html", "02_second.html"]
    assert all((out / href).is_file() for href in index["links"])

    first = browser.open((out / "01_first.html").as_uri(), wait_for="document.querySelectorAll('svg.main-svg').length > 0")
    _check_clean(first, "01_first.html")
    assert first["plots"] == 1 and first["rendered"] == 1 and first["svgs"] >= 1
    assert "02_second.html#Second-notebook" in first["links"], first["links"]
    assert not any(href.endswith(".ipynb") for href in first["links"] if href)
    second = browser.open((out / "02_second.html").as_uri(), wait_for="document.querySelectorAll('svg.main-svg').length > 0")
    _check_clean(second, "02_second.html")
    assert "01_first.html" in second["links"] and second["rendered"] == 1


@pytest.fixture(scope="module")
def real_site(tmp_path_factory) -> tuple[Path, Path]:
    """notebooks/01 rendered from its stored outputs (fast), with MathJax when the machine has a build."""
    pytest.importorskip("nbconvert")
    nbscript = _load_notebooks_script()
    notebook = ROOT / "notebooks" / "01_lorentzian_inner_product.ipynb"
    if not notebook.is_file():
        pytest.skip(f"{notebook} is not in this checkout")
    out = tmp_path_factory.mktemp("real") / "site"
    nbscript.render(out, [str(notebook)], log=lambda *_: None, execute_notebooks=False)
    return out, out / f"{notebook.stem}.html"


_DRAWN = "document.querySelectorAll('svg.main-svg').length > 0"
_TYPESET = (
    " && window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0"
    " && document.querySelectorAll('.MathJax_CHTML, .mjx-chtml').length > 0"
)


def test_real_notebook_page_renders_offline(browser, real_site):
    out, page_path = real_site
    typeset = (out / "mathjax" / "MathJax.js").is_file()
    page = browser.open(page_path.as_uri(), wait_for=_DRAWN + (_TYPESET if typeset else ""))
    _check_clean(page, page_path.name)
    assert page["plots"] >= 1 and page["rendered"] == page["plots"], page
    assert page["text"] > 1000


def test_real_notebook_equations_are_typeset_offline(browser, real_site):
    out, page_path = real_site
    if not (out / "mathjax" / "MathJax.js").is_file():
        pytest.skip("equations stay TeX source: no MathJax 2 build on this machine (apt-get install -y libjs-mathjax)")
    page = browser.open(page_path.as_uri(), wait_for=_DRAWN + _TYPESET)
    _check_clean(page, page_path.name)
    assert page["mathjax"] and page["math"] > 10, f"equations were not typeset: {page['math']} elements"


def test_the_harness_sees_errors_and_network_requests(browser, tmp_path):
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>bad</title></head><body><p>x</p>"
        "<script>console.error('boom from the page')</script>"
        "<img src='https://example.invalid/pixel.png'>"
        "<script>undefined_function_called()</script></body></html>"
    )
    result = browser.open(page.as_uri())
    text = " ".join(result["errors"])
    assert "boom from the page" in text and "undefined_function_called" in text
    assert result["requests"] == ["https://example.invalid/pixel.png"]
