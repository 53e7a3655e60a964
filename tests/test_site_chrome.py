"""The Chinese pages' own words around the content: figure alt texts, fold buttons, the search box.

``docs/_ext/hypviz_site.py`` writes each notebook figure's alt text after the page is translated:
on a Chinese page it leads with the (translated) prose before the figure, framed in Chinese; it
puts MyST-NB's "Show/Hide code cell ..." buttons and the search box's placeholder in Chinese.
Unit tests of those functions, then the built Chinese site (``tests/test_site.py``'s
``built_site``; skipped without Sphinx).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hypviz_site_ext_chrome", ROOT / "docs" / "_ext" / "hypviz_site.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
hypviz_site = importlib.util.module_from_spec(_spec)
try:
    _spec.loader.exec_module(hypviz_site)
except ImportError as exc:  # docutils comes with the docs extra
    pytest.skip(f"the site extension needs the docs extra: {exc}", allow_module_level=True)


def test_chinese_alt_text_leads_with_the_prose():
    alt = hypviz_site.alt_text('ax.set_title("four maps")', "空间映射把权重移向远处的键。其余不变。", "2. 四张图", "zh_CN")
    assert alt == "图（2. 四张图）：空间映射把权重移向远处的键（图中标题：four maps）"
    assert hypviz_site.alt_text('ax.set_title("four maps")', "", "", "zh_CN") == "图：four maps"
    assert hypviz_site.alt_text("plt.plot(x)", "", "3. 节", "zh_CN") == "图（3. 节）"
    # English pages are as before
    assert hypviz_site.alt_text('ax.set_title("four maps")', "Some prose.", "2. Maps") == "Figure: four maps"
    with pytest.raises(ValueError, match="language must be one of"):
        hypviz_site.alt_text("", language="fr")


def test_fold_buttons_in_chinese():
    body = ('<summary aria-label="Toggle hidden content">\n<p class="collapsed admonition-title">Show code cell source</p>\n'
            '<p class="expanded admonition-title">Hide code cell outputs</p>\n</summary>')
    out = hypviz_site.translate_prompts(body)
    assert "显示代码</p>" in out and "隐藏输出</p>" in out and "Show code" not in out and "Toggle" not in out
    assert hypviz_site.translate_prompts("Show code cell source in prose") == "Show code cell source in prose"


@pytest.fixture(scope="module")
def zh(run_folder) -> Path:
    from test_site import built_site

    return built_site("real", run_folder) / "zh_CN"


def test_the_built_chinese_pages_say_it_in_chinese(zh):
    page = (zh / "notebooks" / "05_attention_maps.html").read_text(encoding="utf-8")
    titles = re.findall(r'admonition-title">([^<]*)</p>', page)
    assert titles and not [t for t in titles if re.search(r"[A-Za-z]", t)], titles
    alts = re.findall(r'<img\b[^>]*\balt="([^"]*)"', page)
    assert alts and all(a.startswith("图") for a in alts), alts[:3]
    assert f'placeholder="{hypviz_site.ZH_SEARCH_TEXT}"' in (zh / "index.html").read_text(encoding="utf-8")
    english = (zh.parent / "notebooks" / "05_attention_maps.html").read_text(encoding="utf-8")
    alts = re.findall(r'<img\b[^>]*\balt="([^"]*)"', english)
    assert "Show code cell source" in english and all(a.startswith("Figure") for a in alts)


def test_a_caption_is_a_paragraph_opening_with_figure_in_bold():
    pytest.importorskip("myst_parser")
    from docutils.core import publish_doctree
    from myst_parser.parsers.docutils_ import Parser

    first = lambda text: publish_doctree(text, parser=Parser()).children[0]  # noqa: E731
    assert hypviz_site.is_caption(first("**Figure.** Titled *maps*: weight against key.\n"))
    assert hypviz_site.is_caption(first("**图。** 标题「maps」：纵轴为权重。\n"))
    assert not hypviz_site.is_caption(first("Figure. Titled maps.\n"))
    assert not hypviz_site.is_caption(first("The **Figure.** below.\n"))
    assert not hypviz_site.is_caption(first("**Figures.** many\n"))
