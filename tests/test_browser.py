"""The generated pages in a real browser: headless Chromium, driven over the DevTools protocol.

Opens the report of ``hypviz demo`` and every page of the documentation site (the repository's,
and a tiny one whose notebooks hold a plotly figure with a slider, a plotly + PNG bundle, a PNG,
LaTeX and a long printed line; both built by ``tests/test_site.py``'s ``built_site``), and asserts
that each page loads with no console error, no uncaught exception and no network request (every
http(s) request is intercepted and refused, and recorded), that equations are typeset (no raw TeX
in the visible text), that every plotly figure is drawn and its slider, where it has one, moves
the plot, that images decode, that every link (navigation, in-page table of contents,
previous/next, cross-references) leads to a file and an anchor that exist, that the search page
finds the right notebooks for "Taylor", "Hoeffding" and "karate", and that at 800 px the page does
not scroll sideways (printed lines wrap at the column's edge: no output hides text sideways), and
that no output, equation or table of any page is clipped or beyond the column at 1280 or 800 px.
Each page of the real site is loaded once for all of that (``_visit_site``: probed at 1280 px as
loaded, then resized to 800 px in the same tab); ``tests/test_layout.py`` checks the page chrome.

Chromium is Debian's ``chromium`` package (``apt-get install -y chromium``); where it is missing
every test here is skipped with that reason (shown by ``pytest -ra``).  The protocol is spoken
with tornado's websocket client (tornado comes with ipykernel, a test dependency): no new package.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
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
    "--enable-unsafe-swiftshader",  # software WebGL for plotly's 3-D scenes (no GPU here)
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
    math: document.querySelectorAll('mjx-container').length,
    mathjax: typeof window.MathJax !== 'undefined',
    text: document.body ? document.body.innerText.length : 0,
  });
})()
"""

# What a page of the site shows: raw TeX in visible text (outside code, equations and figures),
# figures, equations, navigation, and whether anything is wider than the window.
SITE_PROBE = r"""
(() => {
  const visible = el => !!el && el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  const skip = 'pre, code, kbd, samp, script, style, textarea, noscript, template, mjx-container, '
             + '.js-plotly-plot, .hypviz-plotly, .highlight, .MathJax, svg';
  const tex =
    /\$\$|\\\(|\\\[|\\(?:frac|tfrac|dfrac|sqrt|kappa|langle|rangle|mathrm|mathbb|left|right|begin|end|cdot|tau|Delta|sum|le|ge)\b|\$[^$\s][^$]{0,120}?\\[A-Za-z]/;
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (!p || p.closest(skip) || !visible(p)) continue;
    if (tex.test(n.textContent)) raw.push(n.textContent.trim().slice(0, 160));
  }
  const root = document.documentElement;
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const aRect = article.getBoundingClientRect();
  const outputs = Array.from(document.querySelectorAll('div.cell_output pre'));
  const hidden = outputs.filter(pre => pre.scrollWidth > pre.clientWidth + 1).length;
  const stuck = outputs.filter(pre => pre.scrollWidth > pre.clientWidth + 1
                               && !['auto', 'scroll'].includes(getComputedStyle(pre).overflowX)).length;
  const sticking = Array.from(article.querySelectorAll('pre, img, table, .hypviz-plotly-box, div.math, div.cell_output'))
    .filter(el => visible(el) && el.getBoundingClientRect().right > aRect.right + 2)
    .map(el => el.tagName + '.' + el.className).slice(0, 5);
  const hrefs = sel => Array.from(document.querySelectorAll(sel)).map(a => a.getAttribute('href'));
  return JSON.stringify({
    title: document.title,
    raw_tex: raw.slice(0, 10),
    math_sources: document.querySelectorAll('span.math, div.math').length,
    math: document.querySelectorAll('mjx-container').length,
    math_errors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
    figures: document.querySelectorAll('div.hypviz-plotly').length,
    drawn: Array.from(document.querySelectorAll('div.hypviz-plotly')).filter(
      d => d.classList.contains('js-plotly-plot') && d._fullLayout && d.querySelector('svg.main-svg')).length,
    sliders: Array.from(document.querySelectorAll('div.hypviz-plotly')).filter(
      d => d.layout && (d.layout.sliders || []).length).map(d => d.id),
    images: document.images.length,
    images_ok: Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length,
    links: Array.from(document.links).map(a => a.getAttribute('href')),
    nav: hrefs('nav.bd-links a.reference'),
    toc: hrefs('.bd-sidebar-secondary a, #pst-page-navigation-heading-2 ~ * a'),
    prev: hrefs('a.left-prev'),
    next: hrefs('a.right-next'),
    copy_buttons: document.querySelectorAll('button.copybtn').length,
    code_cells: document.querySelectorAll('div.cell_input').length,
    page_width: root.scrollWidth,
    window_width: root.clientWidth,
    hidden_outputs: hidden,
    unscrollable_outputs: stuck,
    sticking_out: sticking,
    text: document.body ? document.body.innerText.length : 0,
  });
})()
"""

READY = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const figs = document.querySelectorAll('div.hypviz-plotly').length;
  if (figs && document.documentElement.getAttribute('data-hypviz-plots') !== 'drawn') return false;
  return document.readyState === 'complete';
})()
"""


# every output, display equation and table of the article: clipped or beyond the column
CLIP_PROBE = r"""
(() => {
  const visible = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const col = article.getBoundingClientRect();
  const name = el => {
    const cell = el.closest('div.cell');
    const where = cell ? 'cell ' + Array.from(document.querySelectorAll('div.cell')).indexOf(cell) : '';
    const text = (el.innerText || el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 60);
    return `${el.tagName.toLowerCase()}.${String(el.className).split(' ')[0]} ${where} "${text}"`;
  };
  const selectors = ['div.cell_output pre', 'div.cell_output .output', 'div.cell_output table', 'article table',
                     'mjx-container', 'div.math', 'div.cell_output .text_latex'];
  const seen = new Set(), problems = [];
  let checked = 0, scaled = 0, minScale = 1;
  for (const el of article.querySelectorAll(selectors.join(', '))) {
    if (seen.has(el) || !visible(el)) continue;
    seen.add(el);
    checked += 1;
    const r = el.getBoundingClientRect();
    if (r.right > col.right + 1) problems.push(`${name(el)}: right edge ${Math.round(r.right - col.right)} px beyond the column`);
    const ox = getComputedStyle(el).overflowX;
    if (ox !== 'visible' && el.scrollWidth > el.clientWidth + 1)
      problems.push(`${name(el)}: ${el.scrollWidth - el.clientWidth} px clipped (overflow-x ${ox})`);
    if (el.tagName === 'MJX-CONTAINER') {
      const svg = el.querySelector('svg');
      const box = (el.closest('div.math, div.output, dd, li, td') || el.parentElement).getBoundingClientRect();
      if (svg && svg.getBoundingClientRect().right > Math.min(box.right, col.right) + 1)
        problems.push(`${name(el)}: equation ${Math.round(svg.getBoundingClientRect().right
                                                          - Math.min(box.right, col.right))} px beyond its box`);
      if (el.style.fontSize) { scaled += 1; minScale = Math.min(minScale, parseFloat(el.style.fontSize) / 100); }
    }
  }
  // any other box of the article that hides content sideways (outside code input and MathJax's internals)
  for (const el of article.querySelectorAll('*')) {
    if (seen.has(el) || !visible(el)
        || el.closest('div.cell_input, div.highlight, mjx-container, .hypviz-plotly-box, .js-plotly-plot')) continue;
    const ox = getComputedStyle(el).overflowX;
    if (ox !== 'visible' && el.scrollWidth > el.clientWidth + 1)
      problems.push(`${name(el)}: ${el.scrollWidth - el.clientWidth} px clipped (overflow-x ${ox})`);
  }
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1)
    problems.push(`the page scrolls sideways (${root.scrollWidth} > ${root.clientWidth} px)`);
  return JSON.stringify({checked, scaled, minScale, problems: problems.slice(0, 12), count: problems.length,
                         fitted: document.documentElement.getAttribute('data-hypviz-fitted')});
})()
"""


def _wait_fitted(tab: "Tab", what: str) -> None:
    assert tab.wait_for(READY, timeout=60, await_promise=True), f"{what}: MathJax or the figures did not finish"
    assert tab.wait_for("document.documentElement.getAttribute('data-hypviz-fitted') === 'yes'", timeout=30), \
        f"{what}: hypviz_fit.js did not run"


class Tab:
    """One page in its own tab: navigate, evaluate, click; collects console errors and requests."""

    def __init__(self, browser: "Chromium", url: str, width: int = 1280, height: int = 900, timeout: float = 60.0):
        self.browser, self.url, self.timeout = browser, url, timeout
        self.events: list[dict] = []
        self.blocked: list[str] = []
        self._ids = itertools.count(1)
        self._loaded = False
        self.conn = self._run(self._connect(browser.ws_url))
        self.target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": self.target, "flatten": True}, session=False)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        # every request to a host is stopped here, recorded, and refused: the site must make none
        self.call("Fetch.enable", {"patterns": [{"urlPattern": "http://*"}, {"urlPattern": "https://*"}]})
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.call("Page.navigate", {"url": url})
        end = time.monotonic() + timeout
        while not self._loaded and time.monotonic() < end:
            self.pump(0.2)
        if not self._loaded:
            raise TimeoutError(f"{url} did not finish loading in {timeout} s")

    # -- protocol ---------------------------------------------------------------------------
    @staticmethod
    async def _connect(url: str):
        return await websocket.websocket_connect(url, max_message_size=256 * 2**20)

    def _run(self, coro):
        return self.browser.loop.run_until_complete(coro)

    def _event(self, data: dict) -> None:
        self.events.append(data)
        method = data["method"]
        if method == "Page.loadEventFired":
            self._loaded = True
        elif method == "Fetch.requestPaused":
            self.blocked.append(data["params"]["request"]["url"][:120])
            msg = {"id": next(self._ids), "method": "Fetch.failRequest", "sessionId": self.session,
                   "params": {"requestId": data["params"]["requestId"], "errorReason": "BlockedByClient"}}
            self.conn.write_message(json.dumps(msg))

    async def _call(self, method: str, params: dict | None, session: bool) -> dict:
        mid = next(self._ids)
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        await self.conn.write_message(json.dumps(msg))
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            raw = await asyncio.wait_for(self.conn.read_message(), timeout=max(0.1, end - time.monotonic()))
            if raw is None:
                raise RuntimeError("DevTools connection closed")
            data = json.loads(raw)
            if data.get("id") == mid:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data.get("result", {})
            if "method" in data:
                self._event(data)
        raise TimeoutError(method)

    def call(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        return self._run(self._call(method, params, session))

    async def _pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                raw = await asyncio.wait_for(self.conn.read_message(), timeout=max(0.05, end - time.monotonic()))
            except asyncio.TimeoutError:
                return
            if raw is None:
                return
            data = json.loads(raw)
            if "method" in data:
                self._event(data)

    def pump(self, seconds: float) -> None:
        self._run(self._pump(seconds))

    # -- page -------------------------------------------------------------------------------
    def eval(self, expression: str, await_promise: bool = False):
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": await_promise})
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails'].get('exception', {}).get('description', res)}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None, await_promise: bool = False) -> bool:
        end = time.monotonic() + (timeout or self.timeout)
        while True:
            if self.eval(expression, await_promise=await_promise):
                return True
            if time.monotonic() > end:
                return False
            self.pump(0.2)

    def probe(self, script: str = PROBE) -> dict:
        return json.loads(self.eval(script))

    def click(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            params = {"type": kind, "x": x, "y": y, "button": "left" if kind != "mouseMoved" else "none", "clickCount": 1}
            self.call("Input.dispatchMouseEvent", params)

    @property
    def errors(self) -> list[str]:
        return _errors(self.events)

    @property
    def requests(self) -> list[str]:
        seen = {
            e["params"]["request"]["url"][:120]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
            and not e["params"]["request"]["url"].startswith(("file:", "data:", "blob:", "about:"))
        }
        return sorted(seen | set(self.blocked))

    @property
    def failed(self) -> list[str]:
        return [e["params"].get("errorText", "") for e in self.events if e["method"] == "Network.loadingFailed"]

    def close(self) -> None:
        try:
            self.call("Target.closeTarget", {"targetId": self.target}, session=False)
        finally:
            self.conn.close()


class Chromium:
    """One headless Chromium; a tab per :meth:`tab` / :meth:`open`."""

    def __init__(self) -> None:
        assert CHROMIUM is not None  # this module is skipped where no Chromium is found
        self.loop = asyncio.new_event_loop()
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

        stderr = self.proc.stderr
        assert stderr is not None  # stderr=subprocess.PIPE

        def pump() -> None:
            for line in stderr:
                self.log.append(line.rstrip())
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        url: str | None = None
        while time.monotonic() < deadline and url is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                url = m.group(1)
        if url is None:
            self.close()
            raise RuntimeError("Chromium did not start its DevTools endpoint:\n" + "\n".join(self.log[-20:]))
        self.ws_url = url

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
        self.loop.close()

    def tab(self, url: str, **kwargs) -> Tab:
        return Tab(self, url, **kwargs)

    def open(self, url: str, settle: float = 0.5, timeout: float = 30.0, wait_for: str | None = None) -> dict:
        """Load ``url`` in a fresh tab; return the probe's result plus ``errors``, ``requests``, ``failed``."""
        tab = self.tab(url, timeout=timeout)
        try:
            tab.pump(settle)
            if wait_for:
                tab.wait_for(wait_for, timeout)
            tab.pump(0.2)
            result = tab.probe()
            result.update(errors=tab.errors, requests=tab.requests, failed=tab.failed)
            return result
        finally:
            tab.close()


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", ""))[:300])
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            values = (str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            out.append("console.error: " + " ".join(values)[:300])
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
# the documentation site
# --------------------------------------------------------------------------- #
def _built(kind: str, work: Path) -> Path:
    from test_site import built_site

    return built_site(kind, work)


@pytest.fixture(scope="module")
def real_site(run_folder) -> Path:
    return _built("real", run_folder)


@pytest.fixture(scope="module")
def tiny_site(run_folder) -> Path:
    return _built("tiny", run_folder)


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


# LAYOUT_PROBE's results by (page, width), taken by _visit on the page as _layout would take them
# (a fresh tab at that width, ready, 0.3 s later): the layout tests below read them instead of loading
# every notebook page again at 1280 and at 800 px.
_LAYOUTS: dict[tuple[Path, int], dict] = {}


def _visit(browser: Chromium, page: Path, width: int = 1280) -> tuple[dict, Tab]:
    """Open ``page``, wait for MathJax and the figures, probe it (and keep its LAYOUT_PROBE); the caller closes the tab."""
    tab = browser.tab(page.as_uri(), width=width)
    ready = tab.wait_for(READY, timeout=60, await_promise=True)
    tab.pump(0.3)
    result = tab.probe(SITE_PROBE)
    if ready:
        layout = json.loads(tab.eval(LAYOUT_PROBE))
        layout["errors"] = tab.errors
        _LAYOUTS.setdefault((page, width), layout)
    result.update(errors=tab.errors, requests=tab.requests, failed=tab.failed, ready=ready)
    return result, tab


def _check_page(result: dict, what: str) -> None:
    _check_clean(result, what)
    assert result["ready"], f"{what}: MathJax or the figures did not finish"
    assert result["raw_tex"] == [], f"{what}: raw TeX visible: {result['raw_tex']}"
    if result["math_sources"]:
        assert result["math"] >= result["math_sources"], f"{what}: {result['math_sources']} equations, {result['math']} typeset"
    assert result["math_errors"] == 0, f"{what}: MathJax could not typeset {result['math_errors']} equations"
    assert result["drawn"] == result["figures"], f"{what}: {result['figures']} figures, {result['drawn']} drawn"
    assert result["images_ok"] == result["images"], f"{what}: an image did not decode"
    assert result["code_cells"] == 0 or result["copy_buttons"] >= result["code_cells"], (
        f"{what}: code cells without a copy button")


_IDS: dict[Path, set[str]] = {}


def _ids(path: Path) -> set[str]:
    if path not in _IDS:
        _IDS[path] = set(re.findall(r"""\bid=["']([^"']+)["']""", path.read_text(encoding="utf-8")))
    return _IDS[path]


def _broken_links(page: Path, hrefs: list[str | None]) -> list[str]:
    """The links of ``page`` that lead nowhere: a missing file, or an anchor the target does not have."""
    broken = []
    for href in hrefs:
        if not href or href.startswith(("http://", "https://", "mailto:", "javascript:")):
            continue
        url = urllib.parse.urljoin(page.as_uri(), href)
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "file":
            broken.append(href)
            continue
        target = Path(urllib.parse.unquote(parsed.path))
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(href)
        elif parsed.fragment and target.suffix == ".html" and urllib.parse.unquote(parsed.fragment) not in _ids(target):
            broken.append(href)
    return broken


def _slider_moves(tab: Tab, div_id: str) -> str | None:
    """Click the far end of the figure's first slider; None when the slider and the plot changed, else why not."""
    state = json.loads(tab.eval(
        "(() => { const gd = document.getElementById(%s);"
        " const rail = gd.querySelector('.slider-rail-touch-rect') || gd.querySelector('.slider-rail-rect');"
        " rail.scrollIntoView({block: 'center'}); const r = rail.getBoundingClientRect();"
        " const sig = JSON.stringify(gd.data) + JSON.stringify(Object.assign({}, gd.layout, {sliders: null}));"
        " window.__hypviz_sig = sig;"
        " const s = gd._fullLayout.sliders[0];"  # click the end farther from the active step
        # a figure wider than its scrolling box: click the part of the rail the reader can see
        " const b = (gd.closest('.hypviz-plotly-box') || gd).getBoundingClientRect();"
        " const lo = Math.max(r.left, b.left), hi = Math.min(r.right, b.right);"
        " const x = s.active >= s.steps.length / 2 ? lo + 3 : hi - 3;"
        " return JSON.stringify({x: x, y: r.top + r.height / 2, active: s.active, steps: s.steps.length}); })()"
        % json.dumps(div_id)
    ))
    if state["steps"] < 2:
        return f"{div_id}: a slider with {state['steps']} steps"
    tab.click(state["x"], state["y"])
    moved = tab.wait_for(
        "(() => { const gd = document.getElementById(%s);"
        " const sig = JSON.stringify(gd.data) + JSON.stringify(Object.assign({}, gd.layout, {sliders: null}));"
        " return gd._fullLayout.sliders[0].active !== %d && sig !== window.__hypviz_sig; })()"
        % (json.dumps(div_id), state["active"]),
        timeout=15,
    )
    return None if moved else f"{div_id}: the slider did not move the plot (clicked at {state['x']:.0f}, {state['y']:.0f})"


_VISITS: dict[Path, dict[str, dict]] = {}


CLIP_WIDTHS = (1280, 800)


def _clip(tab: Tab, what: str, width: int) -> dict:
    """CLIP_PROBE of the page in ``tab`` at ``width`` (the tab resized to it first when it is narrower), once
    ``hypviz_fit.js`` has fitted it; ``{"failed": why}`` when it did not finish."""
    if width != 1280:  # the same tab, resized: hypviz_fit.js measures again
        tab.eval("document.documentElement.removeAttribute('data-hypviz-fitted')")
        tab.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    try:
        _wait_fitted(tab, f"{what} at {width} px")
    except AssertionError as exc:
        return {"failed": str(exc).splitlines()[0]}
    tab.pump(0.2)
    return json.loads(tab.eval(CLIP_PROBE))


def _visit_site(browser: Chromium, site: Path) -> dict[str, dict]:
    """Every page of ``site`` opened once at 1280 px and probed (SITE_PROBE and LAYOUT_PROBE as loaded, then
    CLIP_PROBE once fitted), its sliders moved, then resized to 800 px and CLIP_PROBE'd again; cached for the
    tests below."""
    if site not in _VISITS:
        results = {}
        for page in _pages(site):
            result, tab = _visit(browser, page)
            what = page.relative_to(site).as_posix()
            try:
                result["clip"] = {1280: _clip(tab, what, 1280) if result["ready"] else {"failed": "not ready"}}
                result["slider_failures"] = [f for f in map(lambda d: _slider_moves(tab, d), result["sliders"]) if f]
                result["clip"][800] = _clip(tab, what, 800) if result["ready"] else {"failed": "not ready"}
                result["errors"] = tab.errors  # including any raised while the sliders moved or the page was resized
            finally:
                tab.close()
            result["broken_links"] = _broken_links(page, result["links"])
            results[page.relative_to(site).as_posix()] = result
        _VISITS[site] = results
    return _VISITS[site]


def test_every_page_of_the_site_renders_offline(browser, real_site):
    """Each page: no error, no request, equations typeset, figures drawn (sliders moving), links resolve."""
    results = _visit_site(browser, real_site)
    assert len(results) >= 15, sorted(results)
    for what, result in results.items():
        _check_page(result, what)
        assert result["slider_failures"] == [], result["slider_failures"]
        if what.startswith("notebooks/"):
            assert result["nav"], f"{what}: no left navigation"
            assert result["toc"], f"{what}: no in-page table of contents"
            assert result["prev"] and result["next"], f"{what}: no previous/next links"
            assert result["copy_buttons"] > 0, f"{what}: code cells without copy buttons"
    broken = {what: r["broken_links"] for what, r in results.items() if r["broken_links"]}
    assert not broken, f"links that lead nowhere: {broken}"


def test_nothing_is_clipped_or_beyond_the_column(browser, real_site):
    """Every page, both languages, at 1280 and 800 px: no clipped or overflowing output, equation or table.

    Each page is measured in the tab of its visit (``_visit_site``): at 1280 px as loaded and fitted,
    then (after its sliders moved) resized to 800 px and fitted again.  An overflow box fails when its
    ``scrollWidth`` exceeds its ``clientWidth`` by more than 1 px (the rest could only be read with a
    scrollbar), and any output, equation or table fails when its right edge is beyond the content column
    (``tests/test_layout.py`` checks that the probe sees both)."""
    results = _visit_site(browser, real_site)
    assert len(results) >= 2 * 12 and "zh_CN/index.html" in results, sorted(results)
    problems: dict[str, list[str]] = {}
    totals = {w: {"checked": 0, "scaled": 0, "min_scale": 1.0} for w in CLIP_WIDTHS}
    for what, result in results.items():
        for width in CLIP_WIDTHS:
            r = result["clip"][width]
            if "failed" in r:
                problems[f"{what} at {width} px"] = [r["failed"]]
                continue
            totals[width]["checked"] += r["checked"]
            totals[width]["scaled"] += r["scaled"]
            totals[width]["min_scale"] = min(totals[width]["min_scale"], r["minScale"])
            if r["count"]:
                problems[f"{what} at {width} px"] = [f"{r['count']} problems", *r["problems"]]
        if result["errors"]:
            problems.setdefault(what, []).append(f"errors in the browser: {result['errors']}")
    MEASURED["clip"] = {"pages": len(results), **{f"{w} px": totals[w] for w in CLIP_WIDTHS}}
    print(f"\nlayout: {MEASURED['clip']}")
    assert all(totals[w]["checked"] > 100 for w in CLIP_WIDTHS), totals  # the probe did find the outputs
    assert not problems, json.dumps(problems, indent=1, ensure_ascii=False)


def test_navigation_is_in_story_order_with_previous_and_next(browser, real_site):
    results = _visit_site(browser, real_site)
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for what, result in results.items():
        if what == "index.html" or what.startswith(("notebooks/", "api/")) or what == "cli.html":
            base = what.rsplit("/", 1)[0] + "/" if "/" in what else ""
            # the current page's own entry is href="#"
            nav = [what if h == "#" else os.path.normpath(base + h) for h in result["nav"] if h == "#" or not h.startswith("#")]
            stems = [h.split("/")[1].removesuffix(".html") for h in nav if h.startswith("notebooks/")]
            assert stems == notebooks, f"{what}: the left navigation lists {stems}"
    chain = ["index"] + [f"notebooks/{n}" for n in notebooks]

    def rel(name, page):
        """The link from ``page`` to ``name`` as the site writes it (relative)."""
        return os.path.relpath(real_site / f"{name}.html", (real_site / page).parent)

    for before, page, after in zip(chain, chain[1:], chain[2:] + [None]):
        result = results[f"{page}.html"]
        assert result["prev"] == [rel(before, page)], (page, result["prev"])
        if after:
            assert result["next"] == [rel(after, page)], (page, result["next"])


@pytest.mark.parametrize(
    "query, expected",
    [("Taylor", {"04_small_norm_taylor"}), ("Hoeffding", {"04_small_norm_taylor"}),
     ("karate", {"07_hyperboloid_gallery", "09_check_your_own_model"})],
)
def test_search_finds_the_notebooks_offline(browser, real_site, query, expected):
    url = (real_site / "search.html").as_uri() + "?q=" + urllib.parse.quote(query)
    tab = browser.tab(url)
    try:
        done = tab.wait_for("(() => { const s = document.querySelector('#search-results p');"
                            " return !!s && /Search finished|did not match/.test(s.innerText); })()", timeout=60)
        tab.pump(0.5)
        hits = tab.eval("JSON.stringify(Array.from(document.querySelectorAll('#search-results ul.search li a'))"
                        ".map(a => a.getAttribute('href')))")
        errors, requests = tab.errors, tab.requests
    finally:
        tab.close()
    assert done, f"the search for {query!r} did not finish"
    assert errors == [] and requests == [], (errors, requests)
    pages = {urllib.parse.urlparse(h).path.rsplit("/", 1)[-1].removesuffix(".html") for h in json.loads(hits)}
    assert expected <= pages, f"searching {query!r} found {sorted(pages)}"


def test_pages_are_readable_at_800_px(browser, real_site, tiny_site):
    pages = [real_site / "index.html", real_site / "cli.html", real_site / "api" / "attention.html",
             *sorted((real_site / "notebooks").glob("*.html")), tiny_site / "notebooks" / "01_first.html",
             real_site / "zh_CN" / "index.html", real_site / "zh_CN" / "notebooks" / "05_attention_maps.html"]
    problems = {}
    for page in pages:
        result, tab = _visit(browser, page, width=800)
        tab.close()
        what = str(page.relative_to(page.parents[1]))
        _check_clean(result, what)
        issues = []
        if result["page_width"] > result["window_width"]:
            issues.append(f"the page scrolls sideways ({result['page_width']} > {result['window_width']} px)")
        if result["hidden_outputs"]:
            issues.append(f"{result['hidden_outputs']} printed outputs hide text sideways")
        if result["unscrollable_outputs"]:
            issues.append(f"{result['unscrollable_outputs']} wide outputs cannot scroll")
        if result["sticking_out"]:
            issues.append(f"wider than the text column: {result['sticking_out']}")
        if issues:
            problems[what] = issues
    assert not problems, problems


def test_tiny_site_slider_bundle_and_maths(browser, tiny_site):
    page = tiny_site / "notebooks" / "01_first.html"
    result, tab = _visit(browser, page)
    try:
        _check_page(result, "01_first.html")
        assert result["figures"] == 2 and result["drawn"] == 2  # the slider figure and the bundle's plotly figure
        assert result["images"] == 1  # the PNG-only output; the bundle's still is not shown
        assert len(result["sliders"]) == 1
        assert _slider_moves(tab, result["sliders"][0]) is None
        frames = tab.eval("document.getElementById(%s)._transitionData._frames.length" % json.dumps(result["sliders"][0]))
        assert frames == 3
        assert result["math"] >= 3  # inline, display and the text/latex output
        # LaTeX in a figure's axis title is typeset too (plotly.js uses the page's MathJax, SVG output)
        assert tab.eval("!!document.querySelector('div.hypviz-plotly .ytitle-math-group svg')"), "no typeset axis title"
        long_line = tab.eval(
            "(() => { const pre = Array.from(document.querySelectorAll('div.cell_output pre'))"
            ".find(p => p.innerText.includes('column39'));"
            " return JSON.stringify({lines: pre.innerText.trim().split('\\n').length, "
            "rect: pre.getClientRects().length, h: pre.scrollWidth > pre.clientWidth}); })()"
        )
        info = json.loads(long_line)
        assert info["lines"] == 2 and not info["h"], info  # one long line + "short line": wrapped, nothing hidden sideways
        assert tab.errors == []
    finally:
        tab.close()
    assert _broken_links(page, result["links"]) == []


def test_the_harness_sees_errors_and_network_requests(browser, tmp_path):
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>bad</title></head><body><p>x</p>"
        "<script>console.error('boom from the page')</script>"
        "<img src='https://example.invalid/pixel.png'>"
        "<p>\\(x^2\\) and $$y$$ and \\frac{a}{b}</p>"
        "<script>undefined_function_called()</script></body></html>"
    )
    result, tab = _visit(browser, page)
    tab.close()
    text = " ".join(result["errors"])
    assert "boom from the page" in text and "undefined_function_called" in text
    assert result["requests"] == ["https://example.invalid/pixel.png"]
    assert len(result["raw_tex"]) == 1 and "frac" in result["raw_tex"][0]
    assert _broken_links(page, ["missing.html", "#nowhere", "bad.html", "https://example.org/"]) == ["missing.html", "#nowhere"]


# --------------------------------------------------------------------------- #
# figures that fit, folded code, the language switch (issue: a site people read to the end)
# --------------------------------------------------------------------------- #
# What a notebook page's figures and code look like in the window: every figure box and whether it
# scrolls sideways, every plotly figure's drawn width against its box, every image's natural size
# against the size it is shown at, whether a plotly toolbar overlaps its figure's title, and the
# lines of code shown unfolded (visible cell sources, outside closed "Show code cell source").
LAYOUT_PROBE = r"""
(() => {
  const visible = el => !!el && el.getClientRects().length > 0;
  const boxes = Array.from(document.querySelectorAll('div.hypviz-plotly-box')).map(b => {
    const svg = b.querySelector('svg.main-svg');
    return {id: (b.querySelector('div.hypviz-plotly') || {}).id, box: b.clientWidth, scroll: b.scrollWidth,
            svg: svg ? Math.round(svg.getBoundingClientRect().width) : null,
            stacked: (b.querySelector('div.hypviz-plotly') || {dataset: {}}).getAttribute('data-stacked')};
  });
  const overlaps = Array.from(document.querySelectorAll('div.hypviz-plotly')).filter(d => {
    const bar = d.querySelector('.modebar-container, .modebar');
    const title = d.querySelector('.gtitle, .g-gtitle text');
    if (!bar || !title) return false;
    const a = bar.getBoundingClientRect(), t = title.getBoundingClientRect();
    return a.width > 0 && t.width > 0 && a.left < t.right && t.left < a.right && a.top < t.bottom && t.top < a.bottom;
  }).map(d => d.id);
  const images = Array.from(document.querySelectorAll('article img')).filter(visible).map(i => {
    const r = i.getBoundingClientRect();
    return {src: (i.getAttribute('src') || '').split('/').pop().slice(0, 16), natural: [i.naturalWidth, i.naturalHeight],
            shown: [Math.round(r.width), Math.round(r.height)], alt: i.alt,
            exact: [r.width, r.height], declared: i.hasAttribute('width') ? Number(i.getAttribute('width')) : null};
  });
  const code = Array.from(document.querySelectorAll('div.cell_input')).filter(visible)
    .reduce((n, c) => n + c.innerText.split('\n').filter(l => l.trim()).length, 0);
  const folded = document.querySelectorAll('details.hide.above-input').length;
  return JSON.stringify({window: document.documentElement.clientWidth, page: document.documentElement.scrollWidth,
                         boxes, overlaps, images, code, folded});
})()
"""


def _layout(browser: Chromium, page: Path, width: int) -> dict:
    """LAYOUT_PROBE of ``page`` freshly loaded at ``width`` (kept from an earlier _visit of it, if any)."""
    if (page, width) in _LAYOUTS:
        return _LAYOUTS[(page, width)]
    tab = browser.tab(page.as_uri(), width=width)
    try:
        assert tab.wait_for(READY, timeout=60, await_promise=True), f"{page.name}: not ready"
        tab.pump(0.3)
        result = json.loads(tab.eval(LAYOUT_PROBE))
        result["errors"] = tab.errors
        return result
    finally:
        tab.close()


MEASURED: dict[str, dict] = {}  # what the layout tests measured (printed with -s)
# An image may be shown narrower than its declared (1x) width when the column is narrower, but not much:
# the house figures' 10 pt tick labels are 11.1 px at 80 dpi and stay >= 9.4 px at this fraction.
MIN_SHOWN_FRACTION = 0.85


@pytest.mark.parametrize("width", [1280, 800])
def test_figures_fit_the_column_and_images_are_sharp(browser, real_site, width):
    """No figure box scrolls sideways, no plotly figure is wider than its box or has its toolbar on its title,
    every image has at least twice the pixels of the size it is shown at, and none is shrunk below
    MIN_SHOWN_FRACTION of its declared (1x) size, so its fonts stay readable (measured at 1280 and 800 px)."""
    problems, ratios, fractions, figures = {}, [], [], 0
    for page in sorted((real_site / "notebooks").glob("*.html")):
        r = _layout(browser, page, width)
        issues = []
        if r["page"] > r["window"]:
            issues.append(f"the page scrolls sideways ({r['page']} > {r['window']} px)")
        for b in r["boxes"]:
            figures += 1
            if b["scroll"] > b["box"] + 1:
                issues.append(f"figure box {b['id']} scrolls sideways ({b['scroll']} > {b['box']} px)")
            if b["svg"] is not None and b["svg"] > b["box"] + 1:
                issues.append(f"figure {b['id']} is {b['svg']} px wide in a {b['box']} px box")
        if r["overlaps"]:
            issues.append(f"toolbar over the title: {r['overlaps']}")
        for im in r["images"]:
            (nat_w, nat_h), (shown_w, shown_h) = im["natural"], im["exact"]  # the layout's own (fractional) size
            if nat_w + 0.01 < 2 * shown_w or nat_h + 0.01 < 2 * shown_h:
                issues.append(f"image {im['src']} ({im['alt'][:40]!r}) shown at {im['shown']} px: its "
                              f"{im['natural']} px are not 2x")
            declared = im["declared"] or nat_w / 2
            if shown_w < MIN_SHOWN_FRACTION * declared:
                issues.append(f"image {im['src']} ({im['alt'][:40]!r}) shrunk to {shown_w:.0f} px of its {declared:g} px: "
                              "fonts too small")
            if shown_w:
                ratios.append(nat_w / shown_w)
                fractions.append(shown_w / declared)
        if r["errors"]:
            issues.append(f"errors: {r['errors']}")
        if issues:
            problems[page.name] = issues
    MEASURED[f"figures@{width}"] = {"figures": figures, "images": len(ratios),
                                    "min natural/shown": round(min(ratios), 2) if ratios else None,
                                    "images at >= 2x": sum(x >= 2 for x in ratios),
                                    "min shown/declared": round(min(fractions), 3) if fractions else None}
    print(f"\n{width} px: {MEASURED[f'figures@{width}']}")
    assert figures >= 5 and ratios, (figures, ratios)
    assert not problems, problems


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
def test_no_page_shows_more_than_the_limit_of_unfolded_code(browser, real_site, name):
    """What a reader sees of the code on a page: at most fold_cells.PAGE_LIMIT lines unfolded (checks and plumbing folded)."""
    from test_site import fold_cells

    r = _layout(browser, real_site / "notebooks" / f"{name}.html", 1280)
    MEASURED[f"code {name}"] = {"unfolded lines": r["code"], "folded cells": r["folded"]}
    print(f"\n{name}: {r['code']} unfolded code lines, {r['folded']} folded cells")
    assert r["code"] <= fold_cells.PAGE_LIMIT, f"{name}: {r['code']} lines of code shown unfolded (limit {fold_cells.PAGE_LIMIT})"


def _follow(tab: Tab, selector: str, timeout: float = 30.0) -> str:
    """Click the first element matching ``selector`` (a real mouse click) and wait for the new page; return its URL."""
    before = tab.eval("location.href")
    box = json.loads(tab.eval(
        "(() => { const a = document.querySelector(%s); a.scrollIntoView({block: 'center'});"
        " const r = a.getBoundingClientRect(); return JSON.stringify({x: r.left + r.width / 2, y: r.top + r.height / 2}); })()"
        % json.dumps(selector)))
    tab.click(box["x"], box["y"])
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        tab.pump(0.2)
        try:
            if tab.eval("location.href") != before and tab.eval("document.readyState") == "complete":
                return tab.eval("location.href")
        except RuntimeError:  # the old page's context went away mid-navigation
            continue
    raise TimeoutError(f"clicking {selector} on {before} led nowhere")


@pytest.mark.parametrize("page", ["index.html", "notebooks/05_attention_maps.html", "references.html"])
def test_language_switch_works_both_ways(browser, real_site, page):
    tab = browser.tab((real_site / page).as_uri())
    try:
        assert tab.eval("document.documentElement.lang").startswith("en")
        zh = _follow(tab, "a.hypviz-lang-link")
        assert zh == (real_site / "zh_CN" / page).as_uri(), zh
        assert tab.eval("document.documentElement.lang").lower().startswith("zh")
        assert tab.eval("/[\\u4e00-\\u9fff]/.test(document.body.innerText)"), "no Chinese on the page"
        back = _follow(tab, "a.hypviz-lang-link")
        assert back == (real_site / page).as_uri(), back
        assert tab.eval("document.documentElement.lang").startswith("en")
        assert tab.errors == [] and tab.requests == [], (tab.errors, tab.requests)
    finally:
        tab.close()


def test_a_click_enlarges_a_figure_at_full_resolution(browser, real_site):
    tab = browser.tab((real_site / "notebooks" / "09_check_your_own_model.html").as_uri())
    try:
        tab.wait_for(READY, timeout=60, await_promise=True)
        box = json.loads(tab.eval(
            "(() => { const i = document.querySelector('article img[data-hypviz-enlarge]'); i.scrollIntoView({block: 'center'});"
            " const r = i.getBoundingClientRect(); return JSON.stringify({x: r.left + r.width / 2, y: r.top + r.height / 2,"
            " natural: i.naturalWidth, shown: r.width}); })()"))
        tab.click(box["x"], box["y"])
        assert tab.wait_for("!!document.querySelector('div.hypviz-lightbox img')", timeout=10), "no enlarged figure"
        big = json.loads(tab.eval("(() => { const i = document.querySelector('div.hypviz-lightbox img');"
                                  " return JSON.stringify({natural: i.naturalWidth, shown: "
                                  "i.getBoundingClientRect().width}); })()"))
        assert big["natural"] == box["natural"], (box, big)
        assert box["shown"] - 1 < big["shown"] <= big["natural"] + 0.5, (box, big)
        tab.call("Input.dispatchKeyEvent", {"type": "keyDown", "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27})
        assert tab.wait_for("!document.querySelector('div.hypviz-lightbox')", timeout=10), "Escape did not close it"
        assert tab.errors == []
    finally:
        tab.close()


def test_reports_do_not_scroll_sideways_at_800_px(browser, tmp_path, capsys):
    import torch

    from hypviz import capture, cli, toymodel

    assert cli.main(["demo", "--out", str(tmp_path / "demo"), "--no-progress"]) == 0
    model = toymodel.ToyHypformer(8, 4, 2, heads=2, k=1.0, attention_type="linear_focused", seed=0)
    with capture.attention(model) as cap:
        model(torch.randn(30, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    cap.save(tmp_path / "att.pt")
    status = cli.main(["compare", str(tmp_path / "att.pt"), "--out", str(tmp_path / "model"), "--no-progress"])
    said = capsys.readouterr()
    assert status == 0, said
    for report in (tmp_path / "demo" / "report.html", tmp_path / "model" / "report.html"):
        tab = browser.tab(report.as_uri(), width=800)
        try:
            tab.pump(1.0)
            r = json.loads(tab.eval("JSON.stringify({page: document.documentElement.scrollWidth, window: "
                                    "document.documentElement.clientWidth})"))
        finally:
            tab.close()
        MEASURED[f"report {report.parent.name}@800"] = r
        assert r["page"] <= r["window"], f"{report.parent.name} report scrolls sideways at 800 px: {r}"
