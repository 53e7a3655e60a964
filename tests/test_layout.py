"""Nothing hidden sideways, and the page chrome in its place: the built site in headless Chromium.

Every page of the repository's site (both languages) is measured at 1280 and at 800 px by
``tests/test_browser.py``'s ``test_nothing_is_clipped_or_beyond_the_column``, in the same tab that
checks the page's rendering (one load per page, resized to 800 px): a page fails when it scrolls
sideways, and a code cell's output, an equation (display or inline) or a table fails when its
content is clipped (an overflow box whose ``scrollWidth`` exceeds its ``clientWidth`` by more than
1 px: the only way to read the rest would be a scrollbar) or when its right edge is beyond the
content column.  ``_static/hypviz_fit.js`` scales wide equations and tables down to the column and
the stylesheet wraps long printed lines; these tests check the result, not the mechanism.  This file
checks that the measurement (``CLIP_PROBE``) can fail.

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
from test_browser import CLIP_PROBE, Chromium, _wait_fitted  # noqa: E402  (skips this module when Chromium is missing)

WIDTHS = (1280, 800)


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
  if (link) { const r = link.getBoundingClientRect();
              const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
              onTop = !!hit && (hit === link || link.contains(hit)); }
  const searches = Array.from(document.querySelectorAll('.search-button-field, form.bd-search input')).filter(e => box(e)).length;
  return JSON.stringify({header: box(header),
                         items: items.map(e => [e.tagName + '.' + String(e.className).split(' ').slice(-1)[0], box(e)]),
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
            assert r["items"] and all(b is not None for _, b in r["items"][:2]), (
                f"{where}: the switch or the theme button is not shown: {r}")
            for item, b in r["items"]:
                if b is not None:
                    assert top - 1 <= b[0] and b[1] <= bottom + 1, (
                        f"{where}: {item} at {b[0]:.0f}-{b[1]:.0f} px, the header at {top:.0f}-{bottom:.0f} px")
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
        assert tab.wait_for("!!document.querySelector('div.hypviz-lightbox img')", timeout=10), (
            f"{page}: no overlay after a click")
        big = tab.eval("document.querySelector('div.hypviz-lightbox img').getBoundingClientRect().width")
        assert big > shown["w"] + 50 and big <= shown["natural"] + 1, (page, big, shown)
    finally:
        tab.close()
