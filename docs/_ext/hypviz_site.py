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

MyST-NB finds mime renderers through the ``myst_nb.mime_renderers`` entry point group only; this
extension is not an installed package, so it appends its renderer to MyST-NB's list at set-up.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive, directives

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly.min.js"
LOADER_JS = "hypviz_plotly.js"
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
    # a figure with its own layout.width keeps it (and scrolls inside its box on a narrow page);
    # one without fills the text column and follows its width (config.responsive)
    width = f"{int(layout['width'])}px" if isinstance(layout.get("width"), (int, float)) else "100%"
    return (
        '<div class="hypviz-plotly-box">'
        f'<div class="hypviz-plotly" id="{div_id}" style="height:{int(height)}px; width:{width};" '
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


def _page_has_plotly(doctree) -> bool:
    return doctree is not None and any(
        "hypviz-plotly-output" in node.get("classes", []) for node in doctree.findall(nodes.raw)
    )


def _add_plotly_scripts(app, pagename, templatename, context, doctree) -> None:
    """Load plotly.js and the figure loader on the pages that have a figure (only those)."""
    if app.builder.format == "html" and _page_has_plotly(doctree):
        app.add_js_file(PLOTLY_JS, charset="utf-8")
        app.add_js_file(LOADER_JS)


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
    app.connect("html-page-context", _add_plotly_scripts)
    app.connect("build-finished", _copy_plotly_js)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
