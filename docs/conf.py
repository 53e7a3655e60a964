"""Sphinx configuration of the hypviz site (Sphinx + MyST-NB + sphinx-book-theme).

Build it with ``python scripts/site.py`` (the main job, ``bash scripts/run.sh``, does): that
script lays out a temporary source folder -- this folder plus the notebooks of ``notebooks/``
(read from there, never copied into git) and README.md -- runs Sphinx with warnings as errors,
and renames the finished site into ``build/html``.

The site works opened from disk with no network: MathJax 3 comes from sphinx-mathjax-offline,
plotly.js from the installed plotly package (``_ext/hypviz_site.py``), the theme's assets are
bundled by the theme.  The notebooks are not executed: their committed outputs are the cache
(nbval checks them in the test command).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "hypviz"
author = "the hypviz authors"
copyright = "the hypviz authors (MIT licence)"
try:
    from hypviz import __version__ as release
except Exception:  # pragma: no cover - the build reports the import error from autodoc anyway
    release = ""
version = release

extensions = [
    "myst_nb",  # notebooks and Markdown pages (MyST-NB brings myst-parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # numpy-style docstrings
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # vendored MathJax 3, copied into _static/mathjax
    "sphinx_copybutton",
    "hypviz_site",  # ours: plotly figures in the pages, the offline MathJax bundle
    "hypviz_cli",  # ours: the CLI page, generated from hypviz.cli.build_parser()
]

# ----------------------------------------------------------------------------- languages
# English is the source; Simplified Chinese is a second build of the same sources with the
# gettext catalogues of locale/zh_CN/LC_MESSAGES/*.po (compiled to .mo at build time):
# scripts/site.py builds it with -D language=zh_CN into build/html/zh_CN/.  A paragraph without a
# translation stays in English (tests/test_site.py lists the landing page's and the summaries' ones).
language = "en"
locale_dirs = ["locale/"]
gettext_compact = False  # one catalogue per page: locale/zh_CN/LC_MESSAGES/notebooks/05_attention_maps.po
gettext_uuid = False
gettext_location = False
gettext_auto_build = True

root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_readme.md", "**.ipynb_checkpoints", "notebooks/sanitize.cfg", "locale"]
# hypviz-lang-switch.html: the language switch in every page's header; author.html, copyright.html: the footer's
# author and copyright lines in the page's language
templates_path = ["_templates"]
smartquotes = False  # keep "--k", quotes and dashes as written (option names, code-like prose)

# ----------------------------------------------------------------------------- MyST / MyST-NB
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_dmath_double_inline = True  # $$...$$ inside a paragraph is display maths, as in Jupyter
myst_heading_anchors = 3  # [text](02_x.ipynb#a-heading) links resolve
nb_execution_mode = "off"  # the committed outputs are the cache; nbval validates them
nb_merge_streams = True
nb_render_markdown_format = "myst"  # text/markdown outputs (hypviz.symbolic's) hold $...$ maths
nb_output_stderr = "show"
math_number_all = False
math_numfig = True
numfig = True
math_eqref_format = "({number})"

# ----------------------------------------------------------------------------- autodoc
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"  # types of the parameters the docstring names
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_preprocess_types = False

# ----------------------------------------------------------------------------- HTML
html_theme = "sphinx_book_theme"
html_title = "hypviz"
html_static_path = ["_static"]
html_css_files = ["hypviz.css"]
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
# search results without page excerpts: the excerpts are fetched with fetch(), which browsers refuse
# for file:// pages; the search itself (searchindex.js, loaded by a <script>) works offline
html_show_search_summary = False
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
    "show_prev_next": True,
    "search_bar_text": "Search the notebooks and the API",
    # the language switch (English / Simplified Chinese) before the theme's buttons, on every page
    "article_header_end": ["hypviz-lang-switch.html", "article-header-buttons.html"],
}
# one search box: the top bar's (and, on narrow screens, the article header's magnifier, which opens
# the same search); the theme's second field at the top of the navigation sidebar is left out
html_sidebars = {"**": ["navbar-logo.html", "icon-links.html", "sbt-sidebar-nav.html"]}
# light by default (the notebooks' PNG figures have white backgrounds); the reader can switch
html_context = {"default_mode": "light"}

copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_exclude = ".linenos, .gp, .go"
