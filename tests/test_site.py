"""scripts/site.py and docs/: the documentation site (Sphinx + MyST-NB + sphinx-book-theme).

The real site is built once per test run from the repository (docs/, notebooks/, README.md), by
whichever process (pytest-xdist worker) needs it first, with its warnings listed (the main job
builds it with warnings as errors; one test below fails on any warning); a tiny site is built from two made-up
notebooks that hold every kind of output the engine must handle (a plotly figure with a slider
and frames, a plotly + PNG bundle, a PNG, LaTeX, a long printed line, links between notebooks).
``tests/test_browser.py`` opens the same two builds in Chromium (``built_site`` below).
These tests read the HTML; they need Sphinx (the ``docs`` extra) and skip without it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
nbformat = pytest.importorskip("nbformat")

_spec = importlib.util.spec_from_file_location("hypviz_site_script", ROOT / "scripts" / "site.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site)

PLOTLY_MIME = "application/vnd.plotly.v1+json"
# a 1 x 1 PNG (the still of a bundle, and a plain image output)
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
LONG_LINE = " ".join(f"column{i:02d}=0.{i:03d}" for i in range(40))  # ~ 600 characters, no newline
#: each documented module, by the API page (docs/api/<page>.rst) that documents it
API_MODULES = {
    "hypviz.lorentz": "lorentz", "hypviz.lorentz.projections": "display", "hypviz.attention": "attention",
    "hypviz.base.kinds": "attention", "hypviz.attention.maps.kernels": "attention", "hypviz.symbolic": "symbolic",
    "hypviz.data": "data", "hypviz.plots": "plots", "hypviz.plots.manifold_mpl": "plots",
    "hypviz.plots.manifold_plotly": "plots", "hypviz.plots.curves": "plots", "hypviz.plots.attention": "plots",
    "hypviz.capture": "capture", "hypviz.reports.model_report": "model_report", "hypviz.reports.point_report": "report",
    "hypviz.toymodel": "toymodel",
}


def _requires_sphinx():
    pytest.importorskip("sphinx", reason="the site needs the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("myst_nb", reason="the site needs the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("sphinx_book_theme", reason="the site needs the docs extra: pip install -e '.[docs]'")


# --------------------------------------------------------------------------- #
# the tiny notebooks
# --------------------------------------------------------------------------- #
def slider_figure() -> dict:
    """A figure with three frames and a slider whose steps animate to them."""
    frames = [{"name": f"f{i}", "data": [{"type": "scatter", "x": [0, 1, 2], "y": [i, i + 1, i + 3]}]} for i in range(3)]
    steps = [
        {"label": f"f{i}", "method": "animate",
         "args": [[f"f{i}"], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}]}
        for i in range(3)
    ]
    return {
        "data": [{"type": "scatter", "x": [0, 1, 2], "y": [0, 1, 3], "name": "slid"}],
        "layout": {"height": 360, "title": {"text": "slider figure"}, "yaxis": {"range": [-1, 7]},
                   "sliders": [{"active": 0, "steps": steps, "currentvalue": {"prefix": "frame "}}]},
        "frames": frames,
    }


BUNDLE_FIGURE = {"data": [{"type": "bar", "x": ["a", "b"], "y": [2, 3], "name": "bundled"}],
                 "layout": {"height": 300, "width": 900, "title": {"text": "bundle figure"},  # wider than 800 px
                            "yaxis": {"title": {"text": "$\\kappa_t$"}}}}  # LaTeX: typeset by the site's MathJax


def tiny_notebooks(folder: Path) -> Path:
    """Two notebooks with stored outputs of every kind the site renders (not executed)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = nbformat.v4.new_output
    metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"}}
    first = nbformat.v4.new_notebook(metadata=metadata)
    first.cells = [
        nbformat.v4.new_markdown_cell(
            "# First tiny notebook\n\nInline maths $x_t = \\sqrt{|x_s|^2 + k}$ and display maths\n\n"
            "$$\n\\frac{a}{b} = \\kappa\n$$\n\nOn to [the second notebook](02_second.ipynb).\n\n## A section\n\nText."
        ),
        nbformat.v4.new_code_cell("print(long_line)", outputs=[out("stream", name="stdout", text=LONG_LINE + "\nshort line\n")]),
        nbformat.v4.new_code_cell("fig.show()  # slider", outputs=[out("display_data", data={PLOTLY_MIME: slider_figure()})]),
        nbformat.v4.new_code_cell(
            "fig.show()  # bundle",
            outputs=[out("display_data", data={PLOTLY_MIME: BUNDLE_FIGURE, "image/png": PNG, "text/plain": "<Figure>"})],
        ),
        nbformat.v4.new_code_cell("plt.show()", outputs=[out("display_data", data={"image/png": PNG, "text/plain": "<Figure>"})]),
        nbformat.v4.new_code_cell(
            "sp.Rational(1, 2)",
            outputs=[out("execute_result", data={"text/latex": "$\\displaystyle \\frac{1}{2}$", "text/plain": "1/2"},
                         execution_count=5)],
        ),
    ]
    second = nbformat.v4.new_notebook(metadata=metadata)
    second.cells = [nbformat.v4.new_markdown_cell("# Second tiny notebook\n\nBack to [the first](01_first.ipynb#a-section).")]
    nbformat.write(first, folder / "01_first.ipynb")
    nbformat.write(second, folder / "02_second.ipynb")
    (folder / "scratch.ipynb").write_text("{}")  # not NN_*: not part of the site
    return folder


# --------------------------------------------------------------------------- #
# builds, once per test run, shared by its processes (test_browser.py uses them too)
# --------------------------------------------------------------------------- #
@contextlib.contextmanager
def _run_lock(folder: Path, name: str):
    """Hold the exclusive lock ``folder/name.lock`` (``fcntl.flock``): one process of the run at a time."""
    import fcntl

    with open(folder / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def built_site(kind: str, work: Path) -> Path:
    """The folder of the ``"real"`` site (the repository's) or the ``"tiny"`` one, built once per test run.

    ``work`` is the run's shared folder (the ``run_folder`` fixture of ``conftest.py``): the first
    process of the run (pytest-xdist worker) that needs a site builds it there, under a lock, from
    the repository as it is now; the others wait for it and read the same build.  The real site is
    copied from the main job's ``build/html`` (``bash scripts/run.sh``, just before the test command
    in CI) instead when that holds a site built with warnings as errors from the inputs as they are
    now (``site.is_current``: the stamp of every input -- docs/, the notebooks, README.md, the
    package's sources, scripts/site.py, the tools' versions -- equals the one kept in the site); it
    then had no warning, or it would not exist.  Any changed input changes the stamp, so no stale
    site can pass a test: it is rebuilt here.  A site is never taken from an earlier test run.
    Sites built here allow warnings and list them in ``KIND-warnings.txt`` (:func:`site_warnings`):
    a docstring that Sphinx warns about fails one test below, not every test of the site.
    """
    _requires_sphinx()
    if kind not in ("real", "tiny"):
        raise ValueError(f"kind must be 'real' or 'tiny', got {kind!r}")
    done, out = work / f"{kind}.built", work / kind / "html"
    with _run_lock(work, f"site-{kind}"):
        if not done.is_file():
            if kind == "real" and site.is_current(site.DEFAULT_OUT, warnings_as_errors=True):
                shutil.copytree(site.DEFAULT_OUT, out)
                (work / "real.reused").write_text(str(site.DEFAULT_OUT))
                done.write_text(str(out / "index.html"))
                return out
            nbs = tiny_notebooks(work / "tiny-notebooks") if kind == "tiny" else site.NOTEBOOKS
            if kind == "tiny":  # what test_build_replaces_the_output_whole_... checks: a stale page, the notebooks
                out.mkdir(parents=True, exist_ok=True)
                (out / "stale.html").write_text("from an earlier build")
                (work / "tiny-notebooks-before.json").write_text(json.dumps(_digests(nbs)))
            index = site.build(out, notebooks_dir=nbs, warnings_as_errors=False,
                               warnings_file=work / f"{kind}-warnings.txt", log=lambda *_: None)
            done.write_text(str(index))
    return out


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def site_warnings(kind: str, work: Path) -> list[str]:
    """The warnings of both builds of ``kind`` (English, then the second language's)."""
    built_site(kind, work)
    lines = []
    for name in (f"{kind}-warnings.txt", f"{kind}-warnings-{site.SECOND_LANGUAGE}.txt"):
        path = work / name
        if path.is_file():
            lines += [line for line in path.read_text().splitlines() if line.strip()]
    return lines


def _docstring_warning(line: str) -> bool:
    return line.startswith(str(ROOT / "hypviz")) and ":docstring of " in line


def real_notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def first_heading(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                m = re.match(r"^#\s+(.*?)\s*$", line)
                if m:
                    return m.group(1)
    raise AssertionError(f"{path.name} has no '# ' heading")


def plotly_outputs(path: Path) -> list[dict]:
    nb = nbformat.read(path, as_version=4)
    return [o["data"] for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if PLOTLY_MIME in o.get("data", {})]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _title(html: str) -> str:
    import html as html_lib

    m = re.search(r"<title>(.*?)</title>", html, re.S)
    assert m, "page without <title>"
    return html_lib.unescape(m.group(1)).strip()


def _figure_payloads(html: str) -> list[dict]:
    found = re.findall(r'<script type="application/json" class="hypviz-plotly-data"[^>]*>(.*?)</script>', html, re.S)
    return [json.loads(m) for m in found]


# --------------------------------------------------------------------------- #
# the real site
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def real(run_folder):
    return built_site("real", run_folder)


@pytest.fixture(scope="module")
def tiny(run_folder):
    return built_site("tiny", run_folder)


def test_real_site_builds_without_a_sphinx_warning(real, run_folder):
    """The main job builds with -W: a docstring or notebook that Sphinx warns about fails it."""
    warnings = site_warnings("real", run_folder)
    assert not warnings, "Sphinx warned (the main job would fail):\n" + "\n".join(warnings)


def test_tiny_site_pages_build_without_a_warning(tiny, run_folder):
    """The engine itself (conf.py, the extensions, the pages, the notebooks' outputs) warns about nothing.

    Docstring warnings are left to the test above: they come from the package, not the engine.
    """
    warnings = [w for w in site_warnings("tiny", run_folder) if not _docstring_warning(w) and not _real_notebook_link(w)]
    assert not warnings, "\n".join(warnings)


def _real_notebook_link(line: str) -> bool:
    """A warning of the tiny site about the landing or references page linking to a real notebook it does not have."""
    return (re.search(r"/src/(?:index|references)\.md:\d+", line) is not None
            and "cross-reference target not found: 'notebooks/" in line
            and not any(f"notebooks/{name}" in line for name in ("01_first", "02_second")))


def test_real_site_has_a_page_per_notebook_titled_by_its_heading(real):
    notebooks = real_notebooks()
    assert notebooks, "no notebooks in notebooks/"
    index = _text(real / "index.html")
    positions = []
    for nb in notebooks:
        page = real / "notebooks" / f"{nb.stem}.html"
        assert page.is_file(), f"no page for {nb.name}"
        assert _title(_text(page)).startswith(first_heading(nb)), f"{page.name} is not titled by its heading"
        positions.append(index.find(f'href="notebooks/{nb.stem}.html"'))
    assert all(p >= 0 for p in positions), "the landing page's navigation misses a notebook"
    assert positions == sorted(positions), "the navigation is not in story order (01, 02, ...)"


THREAD_URL = "https://github.com/Graph-and-Geometric-Learning/hyperbolic-transformer/issues/3"
THREAD_TITLE = "关于双曲空间中计算K和V的相似性问题"


def test_real_site_landing_page_states_the_question_and_the_short_answer(real):
    index = _text(real / "index.html")
    readme = _text(ROOT / "README.md")
    heading = re.search(r"^# (.+)$", _text(ROOT / "docs" / "index.md"), re.M).group(1)
    assert _title(index).startswith(heading)
    # the question as the thread asked it (in Chinese), linked, with its English translation
    assert f'href="{THREAD_URL}"' in index and THREAD_TITLE in index
    assert "这种做法在双曲空间中是有效的吗" in index and "Is that valid in hyperbolic space?" in index
    assert re.search(r'<img[^>]*src="_images/headline\.png"', index), "the headline figure is missing"
    assert (real / "_images" / "headline.png").read_bytes() == (ROOT / "docs" / "headline.png").read_bytes()
    # the short answer is README.md's own: each of its bold lead-ins is on the page
    section = readme.split("### The short answer", 1)[1].split("\n## ", 1)[0]
    leads = re.findall(r"^\* \*\*(.+?)\*\*", section, re.M)
    assert len(leads) >= 3, leads
    for lead in leads:
        assert lead.replace('"', "&quot;") in index or lead in index, f"short answer point missing: {lead}"
    # equation cross-references: the landing page points at identity 4 on the identities page, which
    # numbers all six and refers to them within the page
    assert 'href="identities.html#equation-identity-4"' in index
    identities = (real / "identities.html").read_text()
    for i in range(1, 7):
        assert f'id="equation-identity-{i}"' in identities
    assert 'href="#equation-identity-1"' in identities and 'href="#equation-identity-4"' in identities


def test_real_site_api_and_cli_pages(real):
    for module, name in API_MODULES.items():
        page = real / "api" / f"{name}.html"
        assert page.is_file(), f"no API page for {module}"
        assert f'id="module-{module}"' in _text(page), f"{page.name} does not document {module}"
    if (ROOT / "hypviz" / "plots" / "explorables.py").is_file():
        assert 'id="module-hypviz.plots.explorables"' in _text(real / "api" / "plots.html")
    # documented from the docstrings: a function of each core module, with its signature
    lorentz = _text(real / "api" / "lorentz.html")
    assert 'id="hypviz.lorentz.inner"' in lorentz and 'id="hypviz.lorentz.lift"' in lorentz
    assert 'id="hypviz.attention.compare"' in _text(real / "api" / "attention.html")
    # the CLI page comes from the parser: every option of every sub-command is on it
    from hypviz.cli import build_parser

    cli = _text(real / "cli.html")
    parser = build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert subs
    for name, sub in subs[0].choices.items():
        assert f"hypviz {name}" in cli
        for action in sub._actions:
            for opt in action.option_strings:
                assert f">{opt}" in cli or f"{opt} " in cli or f"{opt}<" in cli, f"hypviz {name} {opt} is not on the CLI page"


def test_real_site_figures_and_assets_are_local(real):
    import plotly

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert (real / "_static" / "plotly.min.js").read_bytes() == plotly_js.read_bytes()
    assert (real / "_static" / "mathjax" / "tex-svg.js").is_file()
    for nb in real_notebooks():
        html = _text(real / "notebooks" / f"{nb.stem}.html")
        stored = plotly_outputs(nb)
        payloads = _figure_payloads(html)
        assert len(payloads) == len(stored), f"{nb.name}: {len(stored)} plotly figures stored, {len(payloads)} on the page"
        for data, payload in zip(stored, payloads):
            figure = data[PLOTLY_MIME]
            assert payload["data"] == figure["data"] and payload["frames"] == figure.get("frames", [])
        if stored:
            assert re.search(r'<script[^>]*src="\.\./_static/plotly\.min\.js"', html)
        else:
            assert "plotly.min.js" not in html, f"{nb.name} loads plotly.js without a figure"
        if "math notranslate" in html:
            assert re.search(r'<script[^>]*src="\.\./_static/mathjax/tex-svg\.js"', html)
    for page in real.rglob("*.html"):
        if "_static" not in page.parts:
            assert site.network_references(_text(page)) == [], page


def test_real_site_search_index_finds_the_pages(real):
    text = _text(real / "searchindex.js")
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    docnames = index["docnames"]
    for word, page in (("taylor", "notebooks/04_small_norm_taylor"), ("hoeffd", "notebooks/04_small_norm_taylor"),
                       ("karat", "notebooks/07_hyperboloid_gallery")):
        hits = {k: v for k, v in index["terms"].items() if k.startswith(word)}
        docs = {docnames[i] for v in hits.values() for i in (v if isinstance(v, list) else [v])}
        assert page in docs, f"the search index does not lead '{word}' to {page}: {sorted(docs)}"



def test_real_site_chinese_search_index_finds_chinese_words(real):
    """The Chinese pages' index holds Chinese words (Sphinx segments Chinese with jieba, from the docs extra), so a
    search for 双曲面, 泰勒 or 判定 finds the pages that contain them."""
    text = _text(real / "zh_CN" / "searchindex.js")
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    docnames = index["docnames"]
    for word, page in (("双曲面", "notebooks/07_hyperboloid_gallery"), ("泰勒", "notebooks/04_small_norm_taylor"),
                       ("判定", "notebooks/05_attention_maps")):
        hits = [index[part].get(word) for part in ("terms", "titleterms")]  # a title's words are kept apart
        docs = {docnames[i] for hit in hits if hit is not None for i in (hit if isinstance(hit, list) else [hit])}
        assert page in docs, f"the Chinese search index does not lead {word!r} to {page}: {sorted(docs)}"
        assert len(docs) >= 5, f"the Chinese search index leads {word!r} to {len(docs)} pages only: {sorted(docs)}"

def test_notebooks_are_not_duplicated_under_docs():
    assert not list((ROOT / "docs").rglob("*.ipynb")), "docs/ must not hold copies of the notebooks"
    if shutil.which("git") and (ROOT / ".git").exists():
        tracked = subprocess.run(["git", "ls-files", "docs"], cwd=ROOT, capture_output=True, text=True).stdout.split()
        assert not [t for t in tracked if t.endswith(".ipynb")]


# --------------------------------------------------------------------------- #
# the tiny site: what the engine does with each kind of output
# --------------------------------------------------------------------------- #
def test_tiny_site_renders_plotly_not_the_png_of_a_bundle(tiny):
    html = _text(tiny / "notebooks" / "01_first.html")
    payloads = _figure_payloads(html)
    assert [p["layout"]["title"]["text"] for p in payloads] == ["slider figure", "bundle figure"]
    slider = payloads[0]
    assert slider["frames"] == slider_figure()["frames"] and slider["layout"]["sliders"]
    assert 'style="height:360px; width:100%;"' in html  # fills the column
    assert 'style="height:300px; width:100%;"' in html  # a stored layout.width does not widen it (hypviz_plotly.js drops it)
    # exactly one image: the PNG-only output; the bundle's still is not shown (its plotly figure is)
    images = re.findall(r'<img[^>]*src="([^"]+)"', html)
    digest = hashlib.sha256(base64.b64decode(PNG)).hexdigest()
    assert images == [f"../_images/{digest}.png"], images
    assert (tiny / "_images" / f"{digest}.png").is_file()
    assert html.count(PLOTLY_MIME) == 0  # no raw mimetype dumped into the page
    assert not (tiny / "notebooks" / "scratch.html").exists()


def test_tiny_site_maths_links_and_long_lines(tiny):
    html = _text(tiny / "notebooks" / "01_first.html")
    assert r"\(x_t = \sqrt{|x_s|^2 + k}\)" in html  # inline maths, for MathJax
    assert r"\frac{a}{b} = \kappa" in html and r"\frac{1}{2}" in html  # display maths and the text/latex output
    assert 'href="02_second.html"' in html and ".ipynb" not in re.sub(r"<script.*?</script>", "", html, flags=re.S)
    assert LONG_LINE in html  # printed as it is: one line, no inserted breaks
    second = _text(tiny / "notebooks" / "02_second.html")
    assert 'href="01_first.html#a-section"' in second
    assert 'id="a-section"' in html


# --------------------------------------------------------------------------- #
# the build script
# --------------------------------------------------------------------------- #
def test_build_replaces_the_output_whole_and_leaves_no_temporary_folders(tiny, run_folder):
    """The tiny site (``built_site``) was built into a folder holding a page of an earlier build."""
    assert (run_folder / "tiny.built").read_text() == str(tiny / "index.html") and (tiny / "index.html").is_file()
    assert not (tiny / "stale.html").exists()
    assert sorted(p.name for p in tiny.parent.iterdir()) == ["html"], "temporary folders left behind"
    before = json.loads((run_folder / "tiny-notebooks-before.json").read_text())
    assert _digests(run_folder / "tiny-notebooks") == before, "the build must not touch the notebooks"
    assert not list((ROOT / "docs").rglob("_readme.md")) and not (ROOT / "docs" / "notebooks").exists()


def test_the_main_jobs_site_is_read_only_when_it_is_current(tmp_path):
    """``built_site`` copies ``build/html`` only when ``site.is_current``: a site stamped from the inputs as
    they are now, built with warnings as errors; a changed notebook, or a site built with warnings allowed,
    is not current (so it is rebuilt)."""
    docs, nbs, readme, out = tmp_path / "docs", tmp_path / "notebooks", tmp_path / "README.md", tmp_path / "html"
    docs.mkdir()
    (docs / "conf.py").write_text("project = 'x'\n")
    nbs.mkdir()
    (nbs / "01_a.ipynb").write_text('{"cells": []}')
    readme.write_text("# readme\n")
    inputs = {"docs": docs, "notebooks_dir": nbs, "readme": readme}
    assert not site.is_current(out, **inputs)  # nothing there
    (out / site.SECOND_LANGUAGE).mkdir(parents=True)
    for page in (out / "index.html", out / site.SECOND_LANGUAGE / "index.html"):
        page.write_text("<html></html>")
    (out / site.STAMP_NAME).write_text(site.input_stamp(docs, nbs, readme, options="warnings_as_errors=True") + "\n")
    assert site.is_current(out, **inputs)
    assert not site.is_current(out, warnings_as_errors=False, **inputs)
    (nbs / "01_a.ipynb").write_text('{"cells": [1]}')
    assert not site.is_current(out, **inputs)


def test_a_sphinx_warning_fails_the_build_and_keeps_the_old_site(tmp_path, capsys):
    _requires_sphinx()
    nbs = tiny_notebooks(tmp_path / "nbs")
    nb = nbformat.read(nbs / "02_second.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A reference to {ref}`a-label-that-does-not-exist`."))
    nbformat.write(nb, nbs / "02_second.ipynb")
    out = tmp_path / "build" / "html"
    out.mkdir(parents=True)
    (out / "index.html").write_text("the old site")
    with pytest.raises(site.SiteError, match="warnings"):
        site.build(out, notebooks_dir=nbs, log=lambda *_: None)
    assert "a-label-that-does-not-exist" in capsys.readouterr().err  # Sphinx said which
    assert (out / "index.html").read_text() == "the old site"
    assert sorted(p.name for p in (tmp_path / "build").iterdir()) == ["html"]


def test_main_fails_with_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "html"
    assert site.main(["--out", str(out), "--notebooks-dir", str(empty)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("site.py: ") and "notebooks" in err[0], err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["empty"]


def test_network_references_helper():
    refs = site.network_references
    assert refs('<script src="https://cdn.example/x.js"></script>')
    assert refs("<script src='//cdn.example/x.js'></script>")
    assert refs('await import("https://cdn.example/m.mjs")')
    assert refs('<link rel="stylesheet" href="https://fonts.example/a.css">')
    assert refs("@font-face { src: url(https://fonts.example/a.woff2) }")
    assert refs('<img src="https://example.org/pixel.png">')
    assert refs('<script src="_static/plotly.min.js"></script><a href="https://example.org">a link</a>') == []


def test_the_main_job_builds_the_site_with_this_script():
    run = _text(ROOT / "scripts" / "run.sh")
    assert "scripts/site.py" in run and "notebooks.py render" not in run
    assert "render" not in _text(ROOT / "scripts" / "notebooks.py").split("def main", 1)[1]


# --------------------------------------------------------------------------- #
# folded code cells (scripts/fold_cells.py)
# --------------------------------------------------------------------------- #
_fold_spec = importlib.util.spec_from_file_location("hypviz_fold_cells", ROOT / "scripts" / "fold_cells.py")
assert _fold_spec is not None and _fold_spec.loader is not None  # a .py path: a spec with a loader
fold_cells = importlib.util.module_from_spec(_fold_spec)
_fold_spec.loader.exec_module(fold_cells)


@pytest.mark.parametrize("path", real_notebooks(), ids=lambda p: p.stem)
def test_checking_and_plumbing_cells_are_folded(path):
    """Every checking or plumbing cell carries hide-input, and the page shows few unfolded code lines.

    A failure names the cells: run ``python scripts/fold_cells.py notebooks/NN_x.ipynb`` (metadata only).
    """
    nb = json.loads(path.read_text(encoding="utf-8"))
    missing = fold_cells.unfolded(nb)
    assert not missing, f"{path.name}: not folded: " + ", ".join(f"cell {i} ({k})" for i, k in missing)
    lines = fold_cells.unfolded_code_lines(nb)
    assert lines <= fold_cells.PAGE_LIMIT, f"{path.name}: {lines} unfolded code lines (limit {fold_cells.PAGE_LIMIT})"


def test_fold_cells_touches_only_metadata_and_is_idempotent(tmp_path):
    out = nbformat.v4.new_output
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# T\n\nText."),
        nbformat.v4.new_code_cell("%matplotlib inline\nimport numpy as np"),  # plumbing
        nbformat.v4.new_code_cell("x = np.ones(3)\nassert x.sum() == 3", outputs=[out("stream", name="stdout", text="ok\n")]),
        nbformat.v4.new_code_cell("fig = draw(x)\nfig.show()"),  # story: stays unfolded
        nbformat.v4.new_code_cell("def f(a):\n    return a"),  # plumbing
        nbformat.v4.new_code_cell("y = 1", metadata={"tags": ["remove-output"]}),
    ]
    nb.cells.append(nbformat.v4.new_code_cell("\n".join(f"v{i} = {i}" for i in range(fold_cells.MAX_SHOWN_LINES + 1))))
    path = tmp_path / "01_t.ipynb"
    nbformat.write(nb, path)
    before = json.loads(path.read_text())
    assert fold_cells.main([str(path)]) == 0
    after = json.loads(path.read_text())
    tags = [c.get("metadata", {}).get("tags", []) for c in after["cells"]]
    assert tags == [[], ["hide-input"], ["hide-input"], [], ["hide-input"], ["remove-output"], ["hide-input"]], tags
    for a, b in zip(before["cells"], after["cells"]):
        a, b = dict(a), dict(b)
        a.pop("metadata"), b.pop("metadata")
        assert a == b, "fold_cells.py changed more than cell metadata"
    assert {k: v for k, v in before.items() if k != "cells"} == {k: v for k, v in after.items() if k != "cells"}
    text = path.read_text()
    assert fold_cells.main([str(path)]) == 0 and path.read_text() == text, "a second run changed the file"
    assert fold_cells.main(["--check", str(path)]) == 0
    assert fold_cells.main(["--check", str(tmp_path / "missing.ipynb")]) == 2


def test_folded_cells_are_collapsed_on_the_pages(real):
    """A hide-input cell is a closed <details> on its page (its output stays visible), one per folded cell."""
    for nb in real_notebooks():
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        folded = sum(1 for c in cells if c["cell_type"] == "code" and "hide-input" in c.get("metadata", {}).get("tags", []))
        html = _text(real / "notebooks" / f"{nb.stem}.html")
        shown = len(re.findall(r'<details class="(?:admonition )?hide above-input"', html))
        assert shown == folded, f"{nb.name}: {folded} folded cells, {shown} collapsed on the page"
        assert not re.search(r'<details class="(?:admonition )?hide above-input"[^>]*\bopen\b', html)


# --------------------------------------------------------------------------- #
# figures: alt text, click to enlarge, responsive plotly
# --------------------------------------------------------------------------- #
def test_every_notebook_image_has_a_meaningful_alt_text(real):
    for nb in real_notebooks():
        html = _text(real / "notebooks" / f"{nb.stem}.html")
        for tag in re.findall(r"<img\b[^>]*>", html):
            alt = re.search(r'\balt="([^"]*)"', tag)
            assert alt, f"{nb.stem}: an image without alt text: {tag[:120]}"
            text = alt.group(1)
            assert len(text) >= 12 and not re.fullmatch(r"[0-9a-f]{16,}(\.png)?", text), f"{nb.stem}: alt {text!r}"
            assert "\\" not in text and "$" not in text and "{" not in text, f"{nb.stem}: TeX left in alt {text!r}"
        if "<img" in html:
            assert re.search(r'<script[^>]*src="\.\./_static/hypviz_figures\.js[?"]', html), f"{nb.stem}: no click-to-enlarge"


def test_every_notebook_figure_has_its_caption_under_it_in_both_languages(real):
    """Each notebook cell that draws a figure is followed on the page by its caption (``p.hypviz-caption``),
    in English on the English page and in Chinese (opening with 图。) on the Chinese one; the alt text is the caption."""
    mimes = ("image/png", PLOTLY_MIME)
    for nb in real_notebooks():
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        drawn = sum(1 for c in cells if c["cell_type"] == "code"
                    and any(m in out.get("data", {}) for out in c.get("outputs", []) for m in mimes))
        for folder, word in (("", "Figure."), ("zh_CN/", "图。")):
            html = _text(real / folder / "notebooks" / f"{nb.stem}.html")
            captions = re.findall(r'<p class="hypviz-caption"><strong>([^<]*)</strong>', html)
            assert captions == [word] * drawn, f"{folder}{nb.stem}: {drawn} figures, captions {captions}"
            for alt in re.findall(r'<img\b[^>]*\balt="([^"]*)"', html):
                assert alt.startswith(word), f"{folder}{nb.stem}: an image whose alt text is not its caption: {alt[:80]!r}"


#: the widest a notebook figure may be declared (its 1x size, CSS px): the text column is 721 px wide at an
#: 800 px window (737 px at 1280, measured by tests/test_browser.py), so a wider figure is shrunk; up to this
#: width it keeps >= 88 % of its size, and its 10 pt tick labels (11.1 px at the house's 80 dpi) >= 9.7 px
MAX_DECLARED_WIDTH = 820


def house_preamble() -> str:
    """The house preamble, as CONTRIBUTING.md states it (the block after "The first code cell is exactly ...")."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    block = re.search(r"The first code cell is exactly the house preamble:\n\n( *)```python\n(.*?)\n *```", text, re.S)
    assert block, "CONTRIBUTING.md no longer states the house preamble"
    return "\n".join(line.removeprefix(block.group(1)) for line in block.group(2).splitlines())


@pytest.mark.parametrize("path", real_notebooks(), ids=lambda p: p.stem)
def test_every_notebook_opens_with_the_house_preamble(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert "".join(first["source"]).strip() == house_preamble().strip(), (
        f"{path.name}: the first code cell is not the house preamble")


def _png_size(b64: str) -> tuple[int, int]:
    raw = base64.b64decode(b64)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


@pytest.mark.parametrize("path", real_notebooks(), ids=lambda p: p.stem)
def test_notebook_figures_are_stored_at_twice_the_size_they_are_shown(path):
    """Every image a page shows (not the still of a plotly bundle) declares its shown size, at most half its pixels.

    The house preamble's formatter (``hypviz.plots.style.notebook_png``) stores matplotlib figures at 2x with
    their 1x width and height as metadata; MyST-NB writes them as the ``<img>``'s width and height.
    """
    nb = json.loads(path.read_text(encoding="utf-8"))
    seen = 0
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" not in data or PLOTLY_MIME in data:
                continue
            seen += 1
            w, h = _png_size(data["image/png"])
            meta = out.get("metadata", {}).get("image/png", {})
            assert "width" in meta and "height" in meta, f"{path.name} cell {i}: a {w} x {h} image with no shown size"
            assert w >= 2 * meta["width"] and h >= 2 * meta["height"], f"{path.name} cell {i}: {w} x {h} px shown at {meta}"
            assert meta["width"] <= MAX_DECLARED_WIDTH, f"{path.name} cell {i}: {meta['width']} px wide, shrunk on the page"
    assert seen, f"{path.name}: no figure"


def test_alt_text_from_titles_or_prose():
    import sys

    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import hypviz_site

    assert hypviz_site.alt_text('ax.set_title(f"maps, N = {n}, $\\tau = {tau:g}$")') == "Figure: maps, N = …, τ = …"
    assert hypviz_site.alt_text('fig.suptitle("edge length s = %.3g" % s)') == "Figure: edge length s = …"
    alt = hypviz_site.alt_text("plt.plot(x)", "The bias made visible. More.", "5. Bias")
    assert alt == "Figure (5. Bias): The bias made visible"
    assert hypviz_site.alt_text("plt.plot(x)") == "Figure"


# --------------------------------------------------------------------------- #
# references
# --------------------------------------------------------------------------- #
# what a notebook names -> the link the references page must have for it
SOURCES = {
    "Hypformer": "https://arxiv.org/abs/2407.01290",
    "TransConvLayer": "https://github.com/Graph-and-Geometric-Learning/hyperbolic-transformer",
    "Performer": "https://arxiv.org/abs/2009.14794",
    "geoopt": "https://github.com/geoopt/geoopt",
    "HGCN": "https://arxiv.org/abs/1910.12933",
    "Sarkar": "https://doi.org/10.1007/978-3-642-25878-7_34",
    "Zachary": "https://doi.org/10.1086/jar.33.4.3629752",
    "Hoeffding": "https://doi.org/10.1080/01621459.1963.10500830",
    "Pinsker": "https://doi.org/10.1002/047174882X",
    "mpmath": "https://mpmath.org",
    "sympy": "https://doi.org/10.7717/peerj-cs.103",
    "networkx": "https://networkx.org",
}


def test_references_page_cites_the_thread_and_every_source_a_notebook_names(real):
    page = _text(real / "references.html")
    assert f'href="{THREAD_URL}"' in page and THREAD_TITLE in page
    for url in ("https://github.com/Graph-and-Geometric-Learning/hyperbolic-transformer", "https://arxiv.org/abs/2407.01290"):
        assert f'href="{url}"' in page
    named = {}
    for nb in real_notebooks():
        text = " ".join("".join(c["source"]) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"])
        for word in SOURCES:
            if re.search(rf"\b{re.escape(word)}\b", text, re.I):
                named.setdefault(word, nb.stem)
    assert {"Hypformer", "Performer", "geoopt"} <= set(named), named
    missing = {word: (nb, SOURCES[word]) for word, nb in named.items() if f'href="{SOURCES[word]}' not in page}
    assert not missing, f"named in a notebook, not cited on the references page: {missing}"
    index = _text(real / "index.html")
    assert 'href="references.html"' in index and 'href="references.html#the-thread"' in index


def test_landing_page_routes_and_one_line_descriptions(real):
    index = _text(real / "index.html")
    for route, pages in (("follow the Taylor argument", ["04_", "05_"]), ("check your own model", ["cli", "09_"]),
                         ("learn the geometry from scratch", ["01_", "02_", "07_"])):
        row = index.split(route, 1)[1].split("</tr>", 1)[0]
        hrefs = re.findall(r'href="([^"]+)"', row)
        for want in pages:
            assert any(want in h for h in hrefs), f"route {route!r} does not lead to {want}: {hrefs}"
    table = index.split("what it shows", 1)[1]
    for nb in real_notebooks():
        row = table.split(f'href="notebooks/{nb.stem}.html"', 1)
        assert len(row) == 2, f"{nb.stem} has no row with a one-line description on the landing page"
        description = re.sub(r"<[^>]+>", "", row[1].split("</tr>", 1)[0]).strip()
        assert len(description) > 40, (nb.stem, description)
    # the short answer's formulas are typeset maths, not code chips
    section = index.split('id="the-short-answer"', 1)[1].split("<section", 1)[0]
    assert section.count('class="math') >= 10 and "<code" not in section


# --------------------------------------------------------------------------- #
# the second language
# --------------------------------------------------------------------------- #
def _paragraphs(html: str) -> list[str]:
    return re.findall(r"<(?:p|li|h[1-4]|td|th)\b[^>]*>(.*?)</(?:p|li|h[1-4]|td|th)>", html, re.S)


def _needs_translation(fragment: str) -> bool:
    """Prose in English: at least three Latin words outside maths, code and tags."""
    text = re.sub(r'<span class="math[^"]*">.*?</span>|<code.*?</code>|<[^>]+>', " ", fragment, flags=re.S)
    text = re.sub(r"\\\(.*?\\\)", " ", text)
    return len(re.findall(r"[A-Za-z]{3,}", text)) >= 3


def _article(html: str) -> str:
    m = re.search(r'<article class="bd-article"[^>]*>(.*?)</article>', html, re.S)
    return m.group(1) if m else html


def untranslated(en_html: str, zh_html: str) -> list[str]:
    """The prose paragraphs of an English page (its article) that appear unchanged on its Chinese twin."""
    zh = set(_paragraphs(_article(zh_html)))
    return [re.sub(r"<[^>]+>", "", p).strip()[:100] for p in _paragraphs(_article(en_html)) if _needs_translation(p) and p in zh]


def _summary(html: str) -> str:
    m = re.search(r'<section id="summary">(.*?)(?:<section id=|</section>\s*</section>|</article>)', html, re.S)
    return m.group(1) if m else ""


def test_second_language_has_every_page_and_a_switch_both_ways(real):
    zh = real / site.SECOND_LANGUAGE
    for page in sorted(p for p in real.rglob("*.html") if "_static" not in p.parts and zh not in p.parents):
        twin = zh / page.relative_to(real)
        assert twin.is_file(), f"no Chinese page for {page.relative_to(real)}"
        for here, there in ((page, twin), (twin, page)):
            link = re.search(r'<a class="hypviz-lang-link"[^>]*href="([^"]+)"', _text(here))
            assert link, f"{here.relative_to(real)}: no language switch"
            assert (here.parent / link.group(1)).resolve() == there.resolve(), (here, link.group(1))
    assert 'lang="zh-CN"' in _text(zh / "index.html") or 'lang="zh_CN"' in _text(zh / "index.html")
    assert list((ROOT / "docs" / "locale" / site.SECOND_LANGUAGE / "LC_MESSAGES").glob("*.po"))


def test_landing_page_is_translated(real):
    """Lists the landing page's English paragraphs that have no (or a stale) translation."""
    missing = untranslated(_text(real / "index.html"), _text(real / site.SECOND_LANGUAGE / "index.html"))
    assert not missing, (
        "untranslated on the Chinese landing page (docs/locale/zh_CN/LC_MESSAGES/index.po):\n" + "\n".join(missing))
    zh = _text(real / site.SECOND_LANGUAGE / "index.html")
    assert "简短的回答" in zh and "原帖的问题" in zh and THREAD_TITLE in zh


@pytest.mark.parametrize("path", real_notebooks(), ids=lambda p: p.stem)
def test_notebook_summary_is_translated(real, path):
    """Lists a notebook's summary paragraphs without a current translation (a changed summary shows up here)."""
    en = _summary(_text(real / "notebooks" / f"{path.stem}.html"))
    assert en, f"{path.stem} has no '## Summary' section"
    zh = _summary(_text(real / site.SECOND_LANGUAGE / "notebooks" / f"{path.stem}.html"))
    missing = untranslated(en, zh)
    catalogue = f"docs/locale/zh_CN/LC_MESSAGES/notebooks/{path.stem}.po"
    assert zh and not missing, f"untranslated in the summary of {path.stem} ({catalogue}):\n" + "\n".join(missing)
