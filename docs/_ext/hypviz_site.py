"""hypviz's own Sphinx extension: interactive plotly figures and offline MathJax for the site.

* **Plotly figures.**  The notebooks store figures as ``application/vnd.plotly.v1+json`` (figure
  JSON, no plotly.js), some of them in a bundle that also holds an ``image/png`` still for
  readers on a code host.  For HTML builders this module makes the plotly mimetype the first
  choice of MyST-NB and renders it as a ``<div>`` plus the figure JSON in a
  ``<script type="application/json">``; ``_static/hypviz_plotly.js`` calls
  ``Plotly.newPlot(div, {data, layout, frames, config})`` for each, so sliders and animation
  frames work.  plotly.js is the ``plotly.min.js`` of the installed plotly package, copied into
  ``_static`` and loaded only by the pages that have a figure.  Other builders get the PNG.
* **API pages of a package's submodules.**  ``.. hypviz-submodules:: hypviz.plots`` writes a
  section with ``.. automodule:: NAME :members:`` for every public submodule the package has
  when the site is built (``:order:`` names those that come first), so a new module of
  ``hypviz.plots`` gets its API section without editing the page.
* **Offline MathJax.**  ``sphinx-mathjax-offline`` copies MathJax 3 into ``_static/mathjax``;
  the site uses its ``tex-svg.js`` bundle (no web fonts to load from disk, and the SVG output
  is what plotly.js needs to typeset LaTeX in figure titles).

* **Figures people can read.**  A notebook figure is followed by its caption, a paragraph that opens
  with **Figure.** and says the figure's titles, axes and legend in words (translated on the Chinese
  pages, where the figure itself is drawn in English); it gets the class ``hypviz-caption``
  (:func:`is_caption`).  Every notebook image gets an alt text: its caption, or else the figure's
  own title (``suptitle`` / ``set_title`` / ``title=`` in the cell's source) or the prose just
  before the cell (:func:`alt_text`), and ``_static/hypviz_figures.js`` opens any figure at its full
  resolution on click (Escape or a click closes it).
* **Nothing hidden sideways.**  ``_static/hypviz_fit.js`` (on every page) scales a display
  equation or a table wider than its column down to the column's width; the stylesheet wraps
  printed lines that are longer than the column.
* **No checker's markers.**  A code cell's ``# NBVAL_...`` lines (how nbval compares the cell) are
  dropped from its shown source (:func:`strip_nbval_markers`); the notebooks keep them.
* **Two languages.**  The site is built in English and, with the translation catalogues of
  ``docs/locale/`` (Sphinx's gettext internationalisation), in Simplified Chinese under
  ``zh_CN/``; every page's header links to the same page in the other language
  (:func:`language_switch`, drawn by ``_templates/hypviz-lang-switch.html``).  On the Chinese
  pages the figures' alt texts (:func:`alt_text`), MyST-NB's "Show/Hide code cell" buttons
  (:data:`ZH_PROMPTS`) and the search box's placeholder are Chinese too.

MyST-NB finds mime renderers through the ``myst_nb.mime_renderers`` entry point group only; this
extension is not an installed package, so it appends its renderer to MyST-NB's list at set-up.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive, directives

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly.min.js"
LOADER_JS = "hypviz_plotly.js"
FIGURES_JS = "hypviz_figures.js"
FIT_JS = "hypviz_fit.js"  # scales a display equation or table wider than its column down to fit
LANGUAGES = {"en": "English", "zh_CN": "简体中文"}  # the site's languages; the second lives in zh_CN/
SECOND_LANGUAGE = "zh_CN"
MATHJAX_BUNDLE = "mathjax/tex-svg.js"
HTML_BUILDERS = ("html", "dirhtml", "singlehtml")
DEFAULT_HEIGHT = 525  # plotly.js's own default figure height, in px


def _script_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</script>``, no ``<!--``)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def plotly_html(figure: dict, div_id: str) -> str:
    """The HTML for one figure: a sized ``<div>`` and its JSON (drawn by ``hypviz_plotly.js``)."""
    if not isinstance(figure, dict) or not isinstance(figure.get("data", []), list):
        raise ValueError("a plotly figure is a JSON object with a 'data' list")
    layout = figure.get("layout") or {}
    height = layout.get("height") or DEFAULT_HEIGHT
    payload = {
        "data": figure.get("data") or [],
        "layout": layout,
        "frames": figure.get("frames") or [],
        "config": figure.get("config") or {},
    }
    # every figure fills the text column and follows its width (config.responsive; a stored
    # layout.width is dropped by hypviz_plotly.js, which also stacks the panels of a wide figure)
    return (
        '<div class="hypviz-plotly-box">'
        f'<div class="hypviz-plotly" id="{div_id}" style="height:{int(height)}px; width:100%;" '
        f'data-frames="{len(payload["frames"])}"></div></div>\n'
        f'<script type="application/json" class="hypviz-plotly-data" data-for="{div_id}">'
        f"{_script_json(payload)}</script>\n"
    )


class PlotlyMimeRenderer:
    """A MyST-NB mime render plugin for ``application/vnd.plotly.v1+json`` (HTML builders)."""

    mime_priority_overrides = [(b, PLOTLY_MIME, 1) for b in HTML_BUILDERS]

    @staticmethod
    def handle_mime(renderer, data, inline: bool):
        if data.mime_type != PLOTLY_MIME:
            return None
        figure = data.content
        if isinstance(figure, (str, bytes)):
            figure = json.loads(figure)
        env = getattr(renderer.renderer.document.settings, "env", None)
        docname = getattr(env, "docname", "page").replace("/", "-")
        div_id = f"plotly-{docname}-{data.cell_index}-{data.output_index}"  # unique on the page
        try:
            html = plotly_html(figure, div_id)
        except (ValueError, TypeError) as exc:
            renderer.logger.warning(f"plotly figure not rendered: {exc}", subtype="plotly", line=data.line)
            return []
        return [nodes.raw("", html, format="html", classes=["output", "hypviz-plotly-output"])]


def _install_mime_renderer() -> None:
    """Append :class:`PlotlyMimeRenderer` to the plugins MyST-NB loads from entry points."""
    from myst_nb.core import render

    original = render.load_mime_renders
    if getattr(original, "_hypviz", False):
        return

    def load_mime_renders():
        return [*original(), PlotlyMimeRenderer]

    load_mime_renders._hypviz = True  # type: ignore[attr-defined]
    render.load_mime_renders = load_mime_renders


class SubmodulesDirective(Directive):
    """``.. hypviz-submodules:: package`` (option ``:order: a b``): an autodoc section per submodule."""

    required_arguments = 1
    option_spec = {"order": directives.unchanged}

    def run(self):
        name = self.arguments[0]
        try:
            package = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure becomes a located build error
            raise self.error(f"hypviz-submodules: cannot import {name}: {exc}") from None
        found = sorted(m.name for m in pkgutil.iter_modules(getattr(package, "__path__", [])) if not m.name.startswith("_"))
        first = self.options.get("order", "").split()
        found.sort(key=lambda m: (first.index(m) if m in first else len(first), m))
        lines: list[str] = []
        for sub in found:
            full = f"{name}.{sub}"
            # each function where it is defined: a module's re-exports (in its __all__) are not repeated
            lines += [full, "-" * len(full), "", f".. automodule:: {full}", "   :members:", "   :ignore-module-all:", ""]
        self.state_machine.insert_input(lines, source=f"<hypviz-submodules {name}>")
        return []


# ----------------------------------------------------------------------------- alt text
_TITLE_CALL = re.compile(
    r"""(?:suptitle|set_title|title)\s*[(=]\s*(?:text\s*=\s*)?([rbuf]{0,2})(["'])((?:(?!\2).){4,200}?)\2""", re.S | re.I
)
_TEX_WORDS = {
    "kappa": "κ", "tau": "τ", "Delta": "Δ", "delta": "δ", "ell": "ℓ", "sqrt": "√", "langle": "⟨", "rangle": "⟩",
    "lVert": "‖", "rVert": "‖", "Vert": "‖", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "to": "→",
    "infty": "∞", "cdot": "·", "varphi": "φ", "phi": "φ", "mu": "μ", "sigma": "σ", "alpha": "α", "beta": "β",
    "theta": "θ", "lambda": "λ", "rho": "ρ", "pi": "π", "approx": "≈", "sum": "Σ", "quad": " ", "qquad": " ",
    "left": "", "right": "", "big": "", "Big": "", "tfrac": "", "frac": "", "operatorname": "", "displaystyle": "",
}


def _plain(text: str) -> str:
    """A title or sentence as plain words: TeX as Unicode, no Markdown emphasis, no placeholders, one line."""
    text = re.sub(r"%[-+ #0]*\d*(?:\.\d+)?[sdgfeir]", "…", text)  # printf-style placeholders
    text = re.sub(r"\\(?:mathrm|operatorname|text|mathbf|mathit|mathbb|mathcal)\s*\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\[,;:! ]", " ", text).replace("\\|", "‖")
    text = re.sub(r"\\([A-Za-z]+)", lambda m: _TEX_WORDS.get(m.group(1), m.group(1)), text)
    text = text.replace("$", "").replace("{", "").replace("}", "").replace("*", "").replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"\s+", " ", text).strip(" .:;,")


ALT_WORDS = {  # the alt text's framing words, per language: (prefix, the figure's titles)
    "en": ("Figure", "titles"),
    "zh_CN": ("图", "图中标题"),
}


def _first_sentence(text: str) -> str:
    """The first sentence of ``text`` (ending with . ! ? followed by a space, or with 。！？)."""
    return re.split(r"(?<=[.!?])\s|(?<=[。！？])", text.strip(), maxsplit=1)[0]


def alt_text(source: str, before: str = "", section: str = "", language: str | None = "en") -> str:
    """The alt text of a figure drawn by a cell with ``source``: its titles, else the prose before it.

    ``before`` is the text of the paragraph just before the cell, ``section`` its section's title,
    ``language`` the page's language.  In English: ``Figure: <titles>``, else
    ``Figure (<section>): <first sentence before>``.  On a Chinese page the figure's titles (drawn
    in English by the package) do not describe it to a Chinese reader, so the (translated) prose
    comes first: ``图（<section>）：<first sentence before>``, the titles after it
    (``图中标题：<titles>``), and the titles alone only when there is no prose.
    """
    if language not in (None, "en") and language not in ALT_WORDS:
        raise ValueError(f"language must be one of {sorted(ALT_WORDS)}, got {language!r}")
    chinese = (language or "en") == "zh_CN"
    titles = []
    for m in _TITLE_CALL.finditer(source or ""):
        prefix, title = m.group(1).lower(), m.group(3)
        if "f" in prefix:  # an f-string: its {placeholders} are not words ({{ and }} are braces)
            title = re.sub(r"(?<!\{)\{[^{}]*\}(?!\})", "…", title).replace("{{", "{").replace("}}", "}")
        title = _plain(title)
        if len(title) >= 4 and title not in titles:
            titles.append(title)
    sentence = _plain(_first_sentence(before)) if before.strip() else ""
    if chinese:
        prefix, titled = ALT_WORDS["zh_CN"]
        where = f"{prefix}（{_plain(section)}）" if section else prefix
        sentence = sentence.rstrip("。！？；：，")
        if sentence:
            text = f"{where}：{sentence[:250]}"
            return f"{text}（{titled}：{'; '.join(titles)[:200]}）" if titles else text
        if titles:
            return f"{where}：{'; '.join(titles)[:300]}"
        return where
    if titles:
        return "Figure: " + "; ".join(titles)[:300]
    if sentence:
        return f"Figure ({_plain(section)}): {sentence[:250]}" if section else f"Figure: {sentence[:250]}"
    return f"Figure: {_plain(section)}" if section else "Figure"


# ----------------------------------------------------------------------------- nbval markers
NBVAL_MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+[ \t]*(?:\n|$)", re.MULTILINE)


def strip_nbval_markers(source: str) -> str:
    """``source`` without its nbval marker lines (a whole line ``# NBVAL_IGNORE_OUTPUT``, ``# NBVAL_SKIP``, ...).

    The markers tell the notebook checker how to compare a cell; they say nothing to a reader.
    Other lines, and a marker inside a line of code or a string, are kept.
    """
    return NBVAL_MARKER.sub("", source)


def _hide_nbval_markers(app, doctree) -> None:
    """Every notebook code cell's shown source loses its nbval marker lines (:func:`strip_nbval_markers`)."""
    for block in list(doctree.findall(nodes.literal_block)):
        parent = block.parent
        if not (isinstance(parent, nodes.container) and parent.get("nb_element") == "cell_code_source"):
            continue
        text = block.astext()
        shown = strip_nbval_markers(text)
        if shown != text:
            # rawsource and text stay equal, so Sphinx still highlights the block as code
            block.rawsource = shown
            block[:] = [nodes.Text(shown)]


def _cell_source(cell) -> str:
    for child in cell.findall(nodes.literal_block):
        return child.astext()
    return ""


def _text_before(cell) -> tuple[str, str]:
    """The paragraph just before ``cell`` (in document order within its section) and the section title."""
    section = cell.parent
    while section is not None and not isinstance(section, nodes.section):
        section = section.parent
    title = section[0].astext() if section is not None and len(section) and isinstance(section[0], nodes.title) else ""
    before = ""
    node = cell
    while node is not None and node is not section:
        parent = node.parent
        if parent is None:
            break
        index = parent.index(node)
        for sibling in reversed(parent.children[:index]):
            paragraphs = list(sibling.findall(nodes.paragraph)) if not isinstance(sibling, nodes.paragraph) else [sibling]
            if isinstance(sibling, nodes.container) and sibling.get("nb_element") == "cell_code":
                paragraphs = []  # another cell's outputs are not its caption
            if paragraphs:
                before = paragraphs[-1].astext()
                return before, title
        node = parent
    return before, title


# ----------------------------------------------------------------------------- figure captions
CAPTION_WORDS = {"en": "Figure.", "zh_CN": "图。"}  # a notebook's figure caption opens with these, in bold
CAPTION_CLASS = "hypviz-caption"


def is_caption(paragraph) -> bool:
    """Whether ``paragraph`` is a figure caption: a paragraph that opens with **Figure.** (**图。** translated)."""
    if not isinstance(paragraph, nodes.paragraph):
        return False
    # MyST starts a paragraph with an empty text node: the first child that holds text
    first = next((c for c in paragraph.children if not (isinstance(c, nodes.Text) and not c.astext().strip())), None)
    return isinstance(first, nodes.strong) and first.astext().strip() in CAPTION_WORDS.values()


def _caption_after(cell):
    """The caption paragraph right after the notebook cell ``cell`` (its next sibling), or ``None``."""
    parent = cell.parent
    if parent is None:
        return None
    index = parent.index(cell)
    following = parent.children[index + 1] if index + 1 < len(parent.children) else None
    return following if following is not None and is_caption(following) else None


def _mark_captions(app, doctree) -> None:
    """A figure caption (the paragraph under a figure that opens with **Figure.**/**图。**) gets the class
    ``hypviz-caption`` (set in smaller type, close under its figure by the stylesheet)."""
    for paragraph in list(doctree.findall(nodes.paragraph)):
        if is_caption(paragraph):
            paragraph["classes"].append(CAPTION_CLASS)


def _add_alt_text(app, doctree) -> None:
    """Every image a notebook cell drew gets an alt text: its caption (in the page's language) where the
    cell has one under it, else the figure's titles or the preceding prose (:func:`alt_text`)."""
    for image in list(doctree.findall(nodes.image)):
        if image.get("alt"):
            continue
        cell = image.parent
        while cell is not None and not (isinstance(cell, nodes.container) and cell.get("nb_element") == "cell_code"):
            cell = cell.parent
        if cell is None:
            continue
        caption = _caption_after(cell)
        if caption is not None:
            image["alt"] = _plain(caption.astext())[:400]
            continue
        before, title = _text_before(cell)
        language = app.config.language if app.config.language in ALT_WORDS else "en"
        image["alt"] = alt_text(_cell_source(cell), before, title, language)


# ----------------------------------------------------------------------------- language switch
def language_switch(pagename: str, language: str | None) -> str:
    """The HTML of the link from page ``pagename`` (built in ``language``) to the same page in the other language.

    The English site is the root of the build; the Chinese one is its ``zh_CN/`` folder.
    """
    up = "../" * pagename.count("/")
    if (language or "en") == SECOND_LANGUAGE:
        href, target, label = f"{up}../{pagename}.html", "en", "English"
        note = "本页的英文版"
    else:
        href, target, label = f"{up}{SECOND_LANGUAGE}/{pagename}.html", SECOND_LANGUAGE, "简体中文"
        note = "this page in Simplified Chinese"
    here = LANGUAGES.get(language or "en", LANGUAGES["en"])
    return (
        f'<nav class="hypviz-lang-switch" aria-label="language"><span class="hypviz-lang-here">{here}</span> · '
        f'<a class="hypviz-lang-link" hreflang="{target.replace("_", "-")}" lang="{target.replace("_", "-")}" '
        f'href="{href}" title="{note}">{label}</a></nav>\n'
    )


def _add_language_switch(app, pagename, templatename, context, doctree) -> None:
    """Every page (genindex and search too) shows the switch in its article header (_templates/hypviz-lang-switch.html)."""
    if app.builder.format != "html":
        return
    context["hypviz_lang_switch"] = language_switch(pagename, app.config.language)


ZH_PROMPTS = {  # MyST-NB's buttons of a folded cell, as the Chinese pages say them
    "Show code cell source": "显示代码",
    "Hide code cell source": "隐藏代码",
    "Show code cell outputs": "显示输出",
    "Hide code cell outputs": "隐藏输出",
    "Show code cell output": "显示输出",
    "Hide code cell output": "隐藏输出",
    "Show code cell content": "显示代码单元",
    "Hide code cell content": "隐藏代码单元",
}
ZH_SEARCH_TEXT = "搜索笔记本与 API"


def translate_prompts(body: str) -> str:
    """``body`` (a page's HTML) with MyST-NB's fold buttons (:data:`ZH_PROMPTS`) in Chinese."""
    for english, chinese in ZH_PROMPTS.items():
        body = body.replace(f'admonition-title">{english}</p>', f'admonition-title">{chinese}</p>')
    return body.replace('aria-label="Toggle hidden content"', 'aria-label="显示或隐藏"')


def _chinese_chrome(app, pagename, templatename, context, doctree) -> None:
    """On the Chinese pages: the fold buttons in Chinese (the search box's text: :func:`_chinese_search_text`)."""
    if app.builder.format == "html" and (app.config.language or "").startswith("zh") and "body" in context:
        context["body"] = translate_prompts(context["body"])


def _chinese_search_text(app, config) -> None:
    """The search box's placeholder in the page's language (a theme option, read when the builder starts)."""
    if (config.language or "").startswith("zh"):
        config.html_theme_options = {**config.html_theme_options, "search_bar_text": ZH_SEARCH_TEXT}


def _chinese_search_stemmer(app) -> None:
    """The Chinese search works offline: Sphinx's zh language data names a ``ChineseStemmer`` it never defines.

    Its ``language_data.js`` ships the English stemmer (the zh search stems Latin words in English)
    and then runs ``window.Stemmer = ChineseStemmer``; defined first, that name builds an English one.
    """
    if app.builder.format == "html" and (app.config.language or "").startswith("zh"):
        app.add_js_file(None, body="window.ChineseStemmer = function () { return new EnglishStemmer(); };", priority=100)


def _page_has_plotly(doctree) -> bool:
    return doctree is not None and any(
        "hypviz-plotly-output" in node.get("classes", []) for node in doctree.findall(nodes.raw)
    )


def _add_plotly_scripts(app, pagename, templatename, context, doctree) -> None:
    """Load plotly.js and the figure loader on the pages that have a figure (only those)."""
    if app.builder.format == "html" and _page_has_plotly(doctree):
        app.add_js_file(PLOTLY_JS, charset="utf-8")
        app.add_js_file(LOADER_JS)
    if app.builder.format == "html" and doctree is not None and any(True for _ in doctree.findall(nodes.image)):
        app.add_js_file(FIGURES_JS)



def _use_offline_mathjax(app, config) -> None:
    # sphinx-mathjax-offline points mathjax_path at its tex-chtml.js; the SVG bundle needs no
    # font files and is the output plotly.js typesets figure titles with
    config.mathjax_path = MATHJAX_BUNDLE


def _copy_plotly_js(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    import plotly

    source = Path(plotly.__file__).resolve().parent / "package_data" / PLOTLY_JS
    if not source.is_file():
        raise RuntimeError(f"the installed plotly has no {source}: cannot put plotly.js into the site")
    target = Path(app.outdir) / "_static" / PLOTLY_JS
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def setup(app):
    _install_mime_renderer()
    app.add_directive("hypviz-submodules", SubmodulesDirective)
    app.connect("config-inited", _use_offline_mathjax, priority=900)
    app.add_js_file(FIT_JS)  # every page: equations and tables fit the column
    app.connect("html-page-context", _add_plotly_scripts)
    app.connect("html-page-context", _add_language_switch)
    app.connect("html-page-context", _chinese_chrome)
    app.connect("config-inited", _chinese_search_text)
    app.connect("doctree-read", _hide_nbval_markers, priority=400)
    app.connect("doctree-read", _add_alt_text)
    app.connect("doctree-read", _mark_captions)
    app.connect("builder-inited", _chinese_search_stemmer)
    app.connect("build-finished", _copy_plotly_js)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
