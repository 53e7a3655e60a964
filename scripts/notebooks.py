"""Execute the notebooks in place, deterministically, and render them as offline HTML.

    python scripts/notebooks.py execute [--notebooks-dir DIR] [NOTEBOOK ...]
    python scripts/notebooks.py render --out DIR [--notebooks-dir DIR] [--no-execute]
                                      [--mathjax-dir DIR | --no-mathjax | --mathjax-url URL] [NOTEBOOK ...]

``execute``: each notebook runs top to bottom in a fresh kernel of the current environment,
with its working directory set to the notebook's folder, and is written back in place (via a
temporary file, then a rename).  Cells run as nbval runs them (``store_history=False``: a
trailing ``;`` does not hide a value), so the stored outputs are the ones nbval compares.
Re-running gives a byte-identical file apart from image bytes: no execution timestamps,
streams coalesced, execution counts 1, 2, ..., the patterns of ``notebooks/sanitize.cfg``
(memory addresses, temp paths, ...) replaced in text outputs, cell ids kept (missing ones get
a stable id from the cell's position), fixed kernelspec, ``PYTHONHASHSEED=0``.

``render``: executes *copies* of the notebooks (the committed files are not touched;
``--no-execute`` renders their stored outputs instead) and writes ``DIR/NN_topic.html`` for
each, ``DIR/index.html`` listing them with their first heading, and ``DIR/plotly.min.js``
(from the installed plotly) referenced relatively by every page.  Plotly figures stored as
``application/vnd.plotly.v1+json`` become rendered plotly divs.  Links between notebooks
(``[next](02_topic.ipynb#section)`` in Markdown) point to the rendered pages.  The pages make
no network requests: nbconvert's require.js, MathJax and mermaid CDN scripts are left out.
Equations are typeset offline when a MathJax 2 build is on the machine (Debian's
``libjs-mathjax``, ``/usr/share/javascript/mathjax``, or ``--mathjax-dir``): the part of it
that TeX-to-HTML needs (about 1.7 MB) is copied once into ``DIR/mathjax/``.  Without one they
show as their TeX source (``--no-mathjax`` forces that; ``--mathjax-url`` loads MathJax from a
URL you choose, which the reader then needs to reach).  The site is built in a temporary
folder beside DIR and renamed into place, so DIR is never half-written.

All notebooks are ``NN_*.ipynb`` in ``--notebooks-dir`` (default: the repository's
``notebooks/``) unless paths are given.
"""

from __future__ import annotations

import argparse
import configparser
import html
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SANITIZE_CFG = NOTEBOOKS / "sanitize.cfg"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly.min.js"

# What a page may not load from the network: script sources, module imports, stylesheets.
_NETWORK_REF = re.compile(
    r"""<script[^>]*\bsrc\s*=\s*["']?(?:https?:)?//|import\s*\(\s*["'](?:https?:)?//|"""
    r"""<link[^>]*\bhref\s*=\s*["']?(?:https?:)?//|@import\s+(?:url\()?\s*["']?(?:https?:)?//""",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- #
# finding and executing notebooks
# --------------------------------------------------------------------------- #
def notebook_paths(paths: list[str], notebooks_dir: Path = NOTEBOOKS) -> list[Path]:
    """The notebooks named by ``paths``, or every ``NN_*.ipynb`` of ``notebooks_dir``."""
    found = [Path(p).resolve() for p in paths] if paths else sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in found if not p.is_file()]
    if missing:
        raise SystemExit(f"notebooks.py: no such notebook: {', '.join(missing)}")
    if not found:
        raise SystemExit(f"notebooks.py: no NN_*.ipynb notebooks in {notebooks_dir}")
    return found


def _stable_ids(nb: nbformat.NotebookNode) -> None:
    """Give every cell an id; keep the ones it has, make missing or repeated ones from the position."""
    seen: set[str] = set()
    for i, cell in enumerate(nb.cells):
        cid = cell.get("id")
        if not cid or cid in seen:
            cid = f"cell-{i:03d}"
            while cid in seen:
                cid += "x"
            cell["id"] = cid
        seen.add(cid)


def sanitizers(cfg: Path = SANITIZE_CFG) -> list[tuple[re.Pattern, str]]:
    """The ``regex`` / ``replace`` pairs of nbval's sanitize file (what differs per run and carries no content)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cfg, encoding="utf-8")
    return [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections() if "regex" in parser[s]]


def _normalise_outputs(nb: nbformat.NotebookNode, patterns: list[tuple[re.Pattern, str]]) -> None:
    """Renumber execution counts 1, 2, ... and apply the sanitizers to text outputs, so reruns are byte-identical."""
    count = 0

    def clean(text):
        if isinstance(text, list):
            text = "".join(text)
        for rx, rep in patterns:
            text = rx.sub(rep, text)
        return text

    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        for out in cell.get("outputs", []):
            if out.output_type == "execute_result":
                out.execution_count = count
            if out.output_type == "stream":
                out.text = clean(out.text)
            for mime in list(out.get("data", {})):
                if mime.startswith("text/"):
                    out.data[mime] = clean(out.data[mime])


class _NbvalLikeClient:
    """Factory for a NotebookClient that runs every cell as nbval does (``store_history=False``).

    Under ``store_history=False`` IPython's displayhook does not see the cell's source, so a
    trailing ``;`` does *not* suppress the value (as nbval runs it); running the same way
    here stores exactly the outputs that nbval will compare against.
    """

    def __new__(cls, nb, **kwargs):
        from nbclient import NotebookClient

        class Client(NotebookClient):
            async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
                return await super().async_execute_cell(cell, cell_index, execution_count, store_history=False)

        return Client(nb, **kwargs)


def execute(path: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run ``path`` top to bottom in a fresh kernel and return the executed notebook (not written)."""
    nb = nbformat.read(path, as_version=4)
    nb.nbformat, nb.nbformat_minor = 4, max(int(nb.get("nbformat_minor", 5)), 5)
    _stable_ids(nb)
    os.environ["PYTHONHASHSEED"] = "0"
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    from jupyter_client.manager import AsyncKernelManager

    # the kernel talks over local IPC sockets in a private folder: no TCP ports, and no
    # "Kernel is running over TCP without encryption" warning on every run
    sockets = tempfile.mkdtemp(prefix="hypviz-kernel-")

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(transport="ipc", ip=os.path.join(sockets, "kernel"), **kwargs)

    client = _NbvalLikeClient(
        nb,
        kernel_manager_class=IPCKernelManager,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(path).resolve().parent)}},
        record_timing=False,
        coalesce_streams=True,
        store_widget_state=False,
    )
    try:
        client.execute()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    for cell in nb.cells:  # drop per-run metadata so re-executions diff cleanly
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                out.get("metadata", {}).pop("execution", None)
    _normalise_outputs(nb, sanitizers())
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def _write_atomic(nb: nbformat.NotebookNode, path: Path) -> None:
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, mode)  # mkstemp makes 0600 files; keep the notebook's own mode
        nbformat.write(nb, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cmd_execute(args: argparse.Namespace) -> int:
    for path in notebook_paths(args.notebooks, args.notebooks_dir):
        start = time.perf_counter()
        nb = execute(path)
        _write_atomic(nb, path)
        print(f"executed {_show(path)} in {time.perf_counter() - start:.1f} s")
    return 0


def _show(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- #
# rendering
# --------------------------------------------------------------------------- #
_TEMPLATE = r"""{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
<script src="__PLOTLY_JS__" charset="utf-8"></script>
{%- endblock html_head_js -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}
__MATHJAX__
{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def _exporter(mathjax_url: str | None):
    """nbconvert's lab template without network scripts; MathJax 2 from ``mathjax_url`` (relative or not) if given."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    if mathjax_url:
        mathjax = "{{ mathjax(resources.mathjax_url) }}"
    else:
        mathjax = "<!-- equations are shown as TeX source: no MathJax is loaded (offline page) -->"
    source = _TEMPLATE.replace("__PLOTLY_JS__", PLOTLY_JS).replace("__MATHJAX__", mathjax)
    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[DictLoader({"hypviz_offline.html.j2": source})],
        template_file="hypviz_offline.html.j2",
        embed_images=True,
    )
    if mathjax_url:
        exporter.mathjax_url = mathjax_url
    return exporter


def plotly_to_html(nb: nbformat.NotebookNode, stem: str) -> int:
    """Replace each plotly JSON output by a rendered plotly div (plotly.js loaded by the page); return the count."""
    import plotly.io as pio

    count = 0
    for ci, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for oi, out in enumerate(cell.get("outputs", [])):
            data = out.get("data")
            if not data or PLOTLY_MIME not in data:
                continue
            fig = data[PLOTLY_MIME]
            fig = dict(fig) if isinstance(fig, dict) else fig
            config = dict(fig.pop("config", None) or {})
            height = (fig.get("layout") or {}).get("height") or 525
            div = pio.to_html(
                fig,
                config=config,
                include_plotlyjs=False,
                include_mathjax=False,
                full_html=False,
                validate=False,
                div_id=f"plotly-{stem}-{ci}-{oi}",
                default_height=f"{int(height)}px",
            )
            out["data"] = {"text/html": div}
            count += 1
    return count


def first_heading(nb: nbformat.NotebookNode, default: str) -> str:
    """The text of the notebook's first Markdown heading (``# ...``), or ``default``."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m and m.group(1):
                return m.group(1)
    return default


def network_references(text: str) -> list[str]:
    """Fragments of an HTML page that would load something from the network."""
    return [text[max(m.start() - 20, 0) : m.end() + 60] for m in _NETWORK_REF.finditer(text)]


# --------------------------------------------------------------------------- #
# offline MathJax (a local MathJax 2 build, copied once into the site)
# --------------------------------------------------------------------------- #
MATHJAX_SEARCH = (Path("/usr/share/javascript/mathjax"), Path("/usr/share/mathjax"))  # Debian's libjs-mathjax
MATHJAX_CONFIG = "TeX-AMS_CHTML-full,Safe"
# what TeX input -> CommonHTML output needs (MathJax 2.7); about 1.7 MB
MATHJAX_PARTS = (
    "MathJax.js",
    "config/TeX-AMS_CHTML-full.js",
    "config/Safe.js",
    "extensions",
    "jax/input/TeX",
    "jax/element",
    "jax/output/CommonHTML",
    "fonts/HTML-CSS/TeX/woff",
    "localization/en",
)


def find_mathjax(explicit: Path | None = None) -> Path | None:
    """A local MathJax 2 build: ``explicit`` (must be one), else the first of ``MATHJAX_SEARCH`` that is one."""

    def is_build(d: Path) -> bool:
        return (d / "MathJax.js").is_file() and (d / "config" / "TeX-AMS_CHTML-full.js").is_file()

    if explicit is not None:
        d = Path(explicit)
        if not is_build(d):
            raise SystemExit(f"notebooks.py: {d} is not a MathJax 2 build (no MathJax.js and config/TeX-AMS_CHTML-full.js)")
        return d
    return next((d for d in MATHJAX_SEARCH if is_build(d)), None)


def copy_mathjax(source: Path, target: Path) -> int:
    """Copy the parts of a MathJax 2 build that the pages use into ``target``; return the bytes copied."""
    for part in MATHJAX_PARTS:
        src = source / part
        if src.is_dir():
            shutil.copytree(src, target / part, symlinks=False, dirs_exist_ok=True)
        elif src.is_file():
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target / part)
    return sum(f.stat().st_size for f in target.rglob("*") if f.is_file())


# --------------------------------------------------------------------------- #
# links between notebooks
# --------------------------------------------------------------------------- #
_NOTEBOOK_LINK = re.compile(r"""(\bhref\s*=\s*)(["'])(?:\./)?([^"'/#?:]+)\.ipynb((?:#[^"']*)?)\2""", re.IGNORECASE)


def rewrite_links(text: str, stems: set[str]) -> tuple[str, list[str]]:
    """Point ``href="NN_topic.ipynb#frag"`` at ``NN_topic.html#frag`` for the notebooks in ``stems``.

    Returns the new text and the ``.ipynb`` targets that are not in the site (left as they are).
    """
    missing: list[str] = []

    def repl(m: re.Match) -> str:
        attr, quote, stem, frag = m.groups()
        if stem not in stems:
            missing.append(f"{stem}.ipynb")
            return m.group(0)
        return f"{attr}{quote}{stem}.html{frag}{quote}"

    return _NOTEBOOK_LINK.sub(repl, text), missing


_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>hypviz notebooks</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; }}
li {{ margin: 0.4rem 0; }} code {{ font-size: 0.95em; }} .note {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
<h1>hypviz notebooks</h1>
<p>Lorentz-model (hyperboloid) geometry for hyperbolic transformers, executed and rendered.</p>
<ol>
{items}
</ol>
<p class="note">Pages work offline: interactive figures use the local <code>{plotly}</code>.
{math_note}</p>
</body>
</html>
"""


def render(
    out: Path,
    paths: list[str] | None = None,
    notebooks_dir: Path = NOTEBOOKS,
    mathjax_url: str | None = None,
    timeout: int = 600,
    log=print,
    execute_notebooks: bool = True,
    mathjax_dir: Path | None | bool = None,
) -> list[Path]:
    """Execute copies of the notebooks and write the offline HTML site to ``out``; return the pages.

    ``execute_notebooks=False`` renders the stored outputs.  ``mathjax_dir``: a MathJax 2 build to
    copy into the site, ``None`` to look for one (:func:`find_mathjax`), ``False`` for none
    (equations as TeX source).  ``mathjax_url`` (a URL the reader must reach) overrides both.
    """
    import plotly.offline

    notebooks = notebook_paths(list(paths or []), notebooks_dir)
    mathjax_src = None
    if not mathjax_url and mathjax_dir is not False:
        mathjax_src = find_mathjax(None if mathjax_dir is None or mathjax_dir is True else Path(mathjax_dir))
    page_mathjax = mathjax_url or (f"mathjax/MathJax.js?config={MATHJAX_CONFIG}" if mathjax_src else None)
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        (tmp / PLOTLY_JS).write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
        if mathjax_src:
            size = copy_mathjax(mathjax_src, tmp / "mathjax")
            log(f"equations: MathJax from {mathjax_src} copied into mathjax/ ({size / 2**20:.1f} MiB)")
        exporter = _exporter(page_mathjax)
        stems = {p.stem for p in notebooks}
        items, pages = [], []
        for path in notebooks:
            start = time.perf_counter()
            nb = execute(path, timeout=timeout) if execute_notebooks else nbformat.read(path, as_version=4)
            n_fig = plotly_to_html(nb, path.stem)
            body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
            body, missing = rewrite_links(body, stems)
            if missing:
                log(f"warning: {path.name} links to notebooks that are not in the site: {', '.join(sorted(set(missing)))}")
            if not mathjax_url:
                bad = network_references(body)
                if bad:
                    raise RuntimeError(f"{path.name}: the page would load from the network: {bad[:3]}")
            page = tmp / f"{path.stem}.html"
            page.write_text(body, encoding="utf-8")
            pages.append(out / page.name)
            title = first_heading(nb, path.stem)
            items.append(f'<li><a href="{html.escape(page.name)}">{html.escape(path.stem)}</a>: {html.escape(title)}</li>')
            how = "rendered" if execute_notebooks else "rendered (stored outputs)"
            log(f"{how} {_show(path)} -> {page.name} ({n_fig} interactive figures) in {time.perf_counter() - start:.1f} s")
        if mathjax_url:
            math_note = f"Equations are typeset by MathJax from {html.escape(mathjax_url)}."
        elif mathjax_src:
            math_note = "Equations are typeset by the local copy of MathJax in <code>mathjax/</code>."
        else:
            math_note = (
                "Equations are shown as their TeX source (no MathJax build was found on the machine that built "
                "the site, and nothing is loaded from the network)."
            )
        (tmp / "index.html").write_text(
            _INDEX.format(items="\n".join(items), plotly=PLOTLY_JS, math_note=math_note), encoding="utf-8"
        )
        os.chmod(tmp, 0o755)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"wrote {len(pages)} pages and index.html to {out}")
    return pages


def cmd_render(args: argparse.Namespace) -> int:
    render(
        args.out,
        args.notebooks,
        args.notebooks_dir,
        mathjax_url=args.mathjax_url,
        execute_notebooks=args.execute,
        mathjax_dir=False if args.no_mathjax else args.mathjax_dir,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_exec = sub.add_parser("execute", help="re-execute notebooks in place")
    p_exec.add_argument("notebooks", nargs="*", help="notebook paths (default: every NN_*.ipynb)")
    p_exec.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS, help="where to find NN_*.ipynb")
    p_exec.set_defaults(func=cmd_execute)
    p_render = sub.add_parser("render", help="execute copies and write an offline HTML site")
    p_render.add_argument("notebooks", nargs="*", help="notebook paths (default: every NN_*.ipynb)")
    p_render.add_argument("--out", type=Path, required=True, help="output folder (replaced as a whole)")
    p_render.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS, help="where to find NN_*.ipynb")
    p_render.add_argument(
        "--execute",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="execute copies of the notebooks first (default); --no-execute renders the stored outputs",
    )
    math = p_render.add_mutually_exclusive_group()
    math.add_argument(
        "--mathjax-dir",
        type=Path,
        default=None,
        help="a local MathJax 2 build to copy into the site (default: Debian's libjs-mathjax when installed)",
    )
    math.add_argument("--no-mathjax", action="store_true", help="show equations as TeX source")
    math.add_argument(
        "--mathjax-url", default=None, help="typeset equations with MathJax 2 from this URL (the page then needs it)"
    )
    p_render.set_defaults(func=cmd_render)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
