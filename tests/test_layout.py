"""Nothing hidden sideways, and the page chrome in its place: the built site in headless Chromium.

Every page of the repository's site (both languages; built once by ``tests/test_site.py``'s
``built_site``) is loaded in one browser tab after another and measured at 1280 and at 800 px
(the same tab, resized): a page fails when it scrolls sideways, and a code cell's output, an
equation (display or inline) or a table fails when its
content is clipped (an overflow box whose ``scrollWidth`` exceeds its ``clientWidth`` by more than
1 px: the only way to read the rest would be a scrollbar) or when its right edge is beyond the
content column.  ``_static/hypviz_fit.js`` scales wide equations and tables down to the column and
the stylesheet wraps long printed lines; these tests check the result, not the mechanism.

The page chrome: the language switch and the theme's buttons lie inside the sticky article header
(not under the top bar, not hanging below the header over the text) at the top of the page and
scrolled down, and a page shows one search box.

Chromium and the DevTools client are the ones of ``tests/test_browser.py`` (skipped with a visible
reason where Chromium is missing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tornado.websocket", reason="tornado (from ipykernel) speaks the DevTools protocol here")
from test_browser import READY, Chromium  # noqa: E402  (skips this module when Chromium is missing)

WIDTHS = (1280, 800)

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
        problems.push(`${name(el)}: equation ${Math.round(svg.getBoundingClientRect().right - Math.min(box.right, col.right))} px beyond its box`);
      if (el.style.fontSize) { scaled += 1; minScale = Math.min(minScale, parseFloat(el.style.fontSize) / 100); }
    }
  }
  // any other box of the article that hides content sideways (outside code input and MathJax's internals)
  for (const el of article.querySelectorAll('*')) {
    if (seen.has(el) || !visible(el) || el.closest('div.cell_input, div.highlight, mjx-container, .hypviz-plotly-box, .js-plotly-plot')) continue;
    const ox = getComputedStyle(el).overflowX;
    if (ox !== 'visible' && el.scrollWidth > el.clientWidth + 1) problems.push(`${name(el)}: ${el.scrollWidth - el.clientWidth} px clipped (overflow-x ${ox})`);
  }
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) problems.push(`the page scrolls sideways (${root.scrollWidth} > ${root.clientWidth} px)`);
  return JSON.stringify({checked, scaled, minScale, problems: problems.slice(0, 12), count: problems.length,
                         fitted: document.documentElement.getAttribute('data-hypviz-fitted')});
})()
"""

# where the chrome is: the article header's box, the switch's and the buttons', the visible search boxes
CHROME_PROBE = r"""
(() => {
  const box = el => { if (!el) return null; const r = el.getBoundingClientRect();
                      return r.width && r.height ? [r.top, r.bottom, r.left, r.right] : null; };
  const header = document.querySelector('.bd-header-article');
  const items = Array.from(document.querySelectorAll('nav.hypviz-lang-switch, .bd-header-article .theme-switch-button, '
                                                  + '.bd-header-article .search-button'));
  const link = document.querySelector('nav.hypviz-lang-switch a');
  let onTop = null;
  if (link) { const r = link.getBoundingClientRect(); const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
              onTop = !!hit && (hit === link || link.contains(hit)); }
  const searches = Array.from(document.querySelectorAll('.search-button-field, form.bd-search input')).filter(e => box(e)).length;
  return JSON.stringify({header: box(header), items: items.map(e => [e.tagName + '.' + String(e.className).split(' ').slice(-1)[0], box(e)]),
                         link_on_top: onTop, search_fields: searches});
})()
"""


@pytest.fixture(scope="module")
def site(run_folder) -> Path:
    """The repository's site, built once per test run (``tests/test_site.py``'s ``built_site``)."""
    from test_site import built_site

    return built_site("real", run_folder)


@pytest.fixture(scope="module")
def browser():
    b = Chromium()
    yield b
    b.close()


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


def _wait_fitted(tab, what: str) -> None:
    assert tab.wait_for(READY, timeout=60, await_promise=True), f"{what}: MathJax or the figures did not finish"
    assert tab.wait_for("document.documentElement.getAttribute('data-hypviz-fitted') === 'yes'", timeout=30), \
        f"{what}: hypviz_fit.js did not run"


MEASURED: dict[str, dict] = {}


def test_nothing_is_clipped_or_beyond_the_column(browser, site):
    """Every page, both languages, at 1280 and 800 px: no clipped or overflowing output, equation or table."""
    pages = _pages(site)
    assert len(pages) >= 2 * 12 and (site / "zh_CN" / "index.html") in pages, [p.name for p in pages]
    problems: dict[str, list[str]] = {}
    totals = {w: {"checked": 0, "scaled": 0, "min_scale": 1.0} for w in WIDTHS}
    for page in pages:
        what = str(page.relative_to(site))
        tab = browser.tab(page.as_uri(), width=WIDTHS[0])
        try:
            for i, width in enumerate(WIDTHS):
                if i:  # the same tab, resized: hypviz_fit.js measures again
                    tab.eval("document.documentElement.removeAttribute('data-hypviz-fitted')")
                    tab.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})
                _wait_fitted(tab, f"{what} at {width} px")
                tab.pump(0.2)
                r = json.loads(tab.eval(CLIP_PROBE))
                totals[width]["checked"] += r["checked"]
                totals[width]["scaled"] += r["scaled"]
                totals[width]["min_scale"] = min(totals[width]["min_scale"], r["minScale"])
                if r["count"]:
                    problems[f"{what} at {width} px"] = [f"{r['count']} problems", *r["problems"]]
            assert tab.errors == [], f"{what}: errors in the browser: {tab.errors}"
        finally:
            tab.close()
    MEASURED["clip"] = {"pages": len(pages), **{f"{w} px": totals[w] for w in WIDTHS}}
    print(f"\nlayout: {MEASURED['clip']}")
    assert all(totals[w]["checked"] > 100 for w in WIDTHS), totals  # the probe did find the outputs
    assert not problems, json.dumps(problems, indent=1, ensure_ascii=False)


def test_the_probe_sees_a_clipped_output(browser, tmp_path):
    """The measurement can fail: a page with an unwrapped 3000 px line in a scrolling box is reported."""
    page = tmp_path / "clipped.html"
    page.write_text(
        '<!doctype html><html><head><meta charset="utf-8"></head><body><article class="bd-article" style="width:600px">'
        '<div class="cell"><div class="cell_output"><div class="output"><pre style="white-space:pre;overflow-x:auto">'
        + "x" * 3000 + "</pre></div></div></div>"
        '<table><tr><td style="white-space:nowrap">' + "y " * 800 + "</td></tr></table></article></body></html>",
        encoding="utf-8",
    )
    tab = browser.tab(page.as_uri(), width=800)
    try:
        tab.pump(0.3)
        r = json.loads(tab.eval(CLIP_PROBE))
    finally:
        tab.close()
    text = " | ".join(r["problems"])
    assert "clipped" in text and "beyond the column" in text, r


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", ["index.html", "notebooks/05_attention_maps.html", "zh_CN/notebooks/05_attention_maps.html"])
def test_the_chrome_stays_in_the_article_header(browser, site, page, width):
    """The language switch and the theme's buttons lie inside the sticky article header, at the top and
    scrolled down (none under the top bar, none hanging over the text); one search box is visible."""
    tab = browser.tab((site / page).as_uri(), width=width)
    try:
        _wait_fitted(tab, page)
        for scroll in (0, 1500):
            tab.eval(f"window.scrollTo(0, {scroll})")
            tab.pump(0.4)
            r = json.loads(tab.eval(CHROME_PROBE))
            where = f"{page} at {width} px, scrolled {scroll} px"
            assert r["header"] is not None, f"{where}: no article header"
            top, bottom = r["header"][0], r["header"][1]
            assert r["items"] and all(b is not None for _, b in r["items"][:2]), f"{where}: the switch or the theme button is not shown: {r}"
            for item, b in r["items"]:
                if b is not None:
                    assert top - 1 <= b[0] and b[1] <= bottom + 1, f"{where}: {item} at {b[0]:.0f}-{b[1]:.0f} px, the header at {top:.0f}-{bottom:.0f} px"
            assert r["link_on_top"], f"{where}: something covers the language switch"
            if scroll == 0:
                expected = 1 if width >= 992 else 0  # narrow: the header's magnifier is the one search (a button, no field)
                assert r["search_fields"] == expected, f"{where}: {r['search_fields']} search fields"
    finally:
        tab.close()



@pytest.mark.parametrize("page", ["index.html", "zh_CN/index.html"])
def test_the_headline_figure_enlarges_on_click(browser, site, page):
    """The landing page's headline figure opens in the overlay at more than its shown width (its full resolution)."""
    tab = browser.tab((site / page).as_uri(), width=1280)
    try:
        _wait_fitted(tab, page)
        shown = json.loads(tab.eval(
            "(() => { const i = document.querySelector('img.hypviz-headline, figure.hypviz-headline img');"
            " i.scrollIntoView(); const r = i.getBoundingClientRect();"
            " return JSON.stringify({x: r.left + r.width / 2, y: r.top + r.height / 2, w: r.width, natural: i.naturalWidth,"
            " enlarge: i.getAttribute('data-hypviz-enlarge')}); })()"))
        assert shown["enlarge"] == "yes", f"{page}: the headline figure is not set up to enlarge"
        tab.click(shown["x"], shown["y"])
        assert tab.wait_for("!!document.querySelector('div.hypviz-lightbox img')", timeout=10), f"{page}: no overlay after a click"
        big = tab.eval("document.querySelector('div.hypviz-lightbox img').getBoundingClientRect().width")
        assert big > shown["w"] + 50 and big <= shown["natural"] + 1, (page, big, shown)
    finally:
        tab.close()
