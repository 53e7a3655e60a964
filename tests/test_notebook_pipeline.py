"""scripts/notebooks.py: deterministic in-place execution and the offline HTML site.

Runs on tiny temporary notebooks (no heavy imports), not on notebooks/, to stay fast.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("nbconvert")

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hypviz_notebooks_script", ROOT / "scripts" / "notebooks.py")
nbscript = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbscript)

PLOTLY_FIGURE = {
    "data": [{"type": "scatter", "x": [0.0, 1.0, 2.0], "y": [1.0, 0.5, 0.25], "name": "tiny"}],
    "layout": {"title": {"text": "tiny figure"}, "height": 300},
    "config": {"responsive": True},
}


def tiny_notebook(title: str, drop_ids: bool = False) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"Intro line before the heading.\n\n# {title}\n\nSome math: $x^2$."),
        nbformat.v4.new_code_cell(
            "import random, sys\nrandom.seed(0)\nprint(round(random.random(), 6))\n"
            "print('to stderr', file=sys.stderr)\nprint('more stdout')"
        ),
        nbformat.v4.new_code_cell(
            "from IPython.display import publish_display_data\n"
            f"publish_display_data({{'application/vnd.plotly.v1+json': {PLOTLY_FIGURE!r}}})"
        ),
        nbformat.v4.new_code_cell("{'answer': 6 * 7}"),
        nbformat.v4.new_code_cell("object()"),  # a memory address: differs per run
        nbformat.v4.new_code_cell("1 + 1;"),  # nbval does not honour the trailing ';', so neither does execute
    ]
    if drop_ids:  # an older notebook without cell ids
        nb.nbformat_minor = 4
        for cell in nb.cells:
            cell.pop("id", None)
    return nb


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch):
    # the script sets PYTHONHASHSEED / MPLBACKEND for its kernels; keep the test process clean
    monkeypatch.setenv("PYTHONHASHSEED", os.environ.get("PYTHONHASHSEED", "0"))
    monkeypatch.setenv("MPLBACKEND", os.environ.get("MPLBACKEND", "Agg"))


def test_execute_in_place_is_deterministic(tmp_path):
    path = tmp_path / "01_tiny.ipynb"
    nbformat.write(tiny_notebook("Tiny pipeline check", drop_ids=True), path)
    path.chmod(0o644)
    assert nbscript.main(["execute", "--notebooks-dir", str(tmp_path)]) == 0
    first = path.read_bytes()
    assert nbscript.main(["execute", str(path)]) == 0
    second = path.read_bytes()
    assert first == second, "re-executing changed the notebook"
    nb = nbformat.reads(first.decode(), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, 3, 4, 5]
    assert code[0].outputs[0].name == "stdout" and code[0].outputs[0].text == "0.844422\nmore stdout\n"
    assert "application/vnd.plotly.v1+json" in code[1].outputs[0].data
    assert code[2].outputs[0].data["text/plain"] == "{'answer': 42}"
    assert code[2].outputs[0].execution_count == 3
    assert code[3].outputs[0].data["text/plain"] == "<object at 0xADDRESS>"
    assert code[4].outputs[0].data["text/plain"] == "2"
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids) and all(ids)
    text = first.decode()
    assert "iopub." not in text and '"execution"' not in text  # no timestamps
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    assert path.stat().st_mode & 0o777 == 0o644  # the file keeps its permissions


def test_render_writes_an_offline_site_from_copies(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    for name, title in (("01_first.ipynb", "First tiny notebook"), ("02_second.ipynb", "Second <tiny> one")):
        nbformat.write(tiny_notebook(title), nbdir / name)
    (nbdir / "scratch.ipynb").write_text("not a numbered notebook, not rendered")
    before = {p.name: p.read_bytes() for p in nbdir.iterdir()}
    out = tmp_path / "site"
    out.mkdir()
    (out / "stale.html").write_text("left from an earlier build")
    pages = nbscript.render(out, notebooks_dir=nbdir, log=lambda *_: None, mathjax_dir=False)

    assert {p.name for p in pages} == {"01_first.html", "02_second.html"}
    assert sorted(p.name for p in out.iterdir()) == ["01_first.html", "02_second.html", "index.html", "plotly.min.js"]
    assert (out / "plotly.min.js").stat().st_size > 1_000_000
    assert {p.name: p.read_bytes() for p in nbdir.iterdir()} == before, "render must not touch the notebooks"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site.")], "temporary folders left behind"

    index = (out / "index.html").read_text()
    assert 'href="01_first.html"' in index and 'href="02_second.html"' in index
    assert "First tiny notebook" in index and "Second &lt;tiny&gt; one" in index
    for page in pages:
        text = page.read_text()
        assert 'class="plotly-graph-div"' in text and "Plotly.newPlot" in text
        assert re.search(r"<script[^>]*\bsrc=\"plotly\.min\.js\"", text), "plotly.js not loaded from the site"
        assert 'style="height:300px' in text  # the figure's own height
        assert "tiny figure" in text and "0.844422" in text
        assert text.count("application/vnd.plotly.v1+json") == 1  # in the cell's source only, not as an output
        assert not re.search(r"<script[^>]*src\s*=\s*[\"']?(https?:)?//", text, re.I)
        assert not re.search(r"import\(\s*[\"']https?:", text)
        assert nbscript.network_references(text) == []
        assert "cdnjs" not in text and "mathjax" not in text.lower().replace("no mathjax", "")


def test_render_failure_leaves_the_old_site(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    bad = nbformat.v4.new_notebook()
    bad.cells = [nbformat.v4.new_code_cell("raise RuntimeError('boom')")]
    nbformat.write(bad, nbdir / "01_bad.ipynb")
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("old site")
    with pytest.raises(Exception, match="boom"):
        nbscript.render(out, notebooks_dir=nbdir, log=lambda *_: None)
    assert (out / "index.html").read_text() == "old site"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nbs", "site"]


def test_helpers():
    assert nbscript.network_references('<script src="https://cdn.example/x.js"></script>')
    assert nbscript.network_references("<script src='//cdn.example/x.js'></script>")
    assert nbscript.network_references('await import("https://cdn.example/m.mjs")')
    assert nbscript.network_references('<link rel="stylesheet" href="https://fonts.example/a.css">')
    assert nbscript.network_references('<script src="plotly.min.js"></script><a href="https://example.org">x</a>') == []
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1"), nbformat.v4.new_markdown_cell("text\n## The heading ##\n# later")]
    assert nbscript.first_heading(nb, "fallback") == "The heading"
    assert nbscript.first_heading(nbformat.v4.new_notebook(), "fallback") == "fallback"
    with pytest.raises(SystemExit, match="no such notebook"):
        nbscript.notebook_paths(["/nonexistent/01_x.ipynb"])


def linked_notebook(title: str, links: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# {title}\n\n{links}\n\nInline maths $x_t = \\sqrt{{|x_s|^2 + k}}$."),
        nbformat.v4.new_code_cell("1 + 1", outputs=[nbformat.v4.new_output(
            "execute_result", data={"text/plain": "2"}, execution_count=1)], execution_count=1),
    ]
    return nb


def fake_mathjax(root: Path) -> Path:
    """A folder shaped like a MathJax 2 build (what find_mathjax and copy_mathjax look at)."""
    for part in ("MathJax.js", "config/TeX-AMS_CHTML-full.js", "config/Safe.js", "extensions/Safe.js",
                 "jax/input/TeX/config.js", "jax/output/CommonHTML/jax.js", "fonts/HTML-CSS/TeX/woff/a.woff",
                 "localization/en/en.js", "localization/de/de.js", "unpacked/MathJax.js", "test/index.html"):
        f = root / part
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"/* {part} */")
    return root


def test_links_between_notebooks_point_to_pages_and_stored_outputs_render(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    nbformat.write(
        linked_notebook("One", "Next: [two](02_two.ipynb), [a section](./02_two.ipynb#Some-section), "
                        "[missing](09_missing.ipynb), [web](https://example.org/x.ipynb), "
                        '<a href="02_two.ipynb">html link</a>'),
        nbdir / "01_one.ipynb",
    )
    nbformat.write(linked_notebook("Two", "Back to [one](01_one.ipynb)."), nbdir / "02_two.ipynb")
    logged = []
    out = tmp_path / "site"
    nbscript.render(out, notebooks_dir=nbdir, log=logged.append, execute_notebooks=False, mathjax_dir=False)
    one = (out / "01_one.html").read_text()
    hrefs = re.findall(r'href="([^"]*)"', one)
    assert hrefs.count("02_two.html") == 2 and "02_two.html#Some-section" in hrefs
    assert "09_missing.ipynb" in hrefs and "https://example.org/x.ipynb" in hrefs  # left alone
    assert 'href="01_one.html"' in (out / "02_two.html").read_text()
    assert any("09_missing.ipynb" in line and "not in the site" in line for line in logged)
    assert any("stored outputs" in line for line in logged)
    assert "$x_t = \\sqrt{|x_s|^2 + k}$" in one  # TeX source kept when there is no MathJax
    assert not (out / "mathjax").exists()


def test_rewrite_links_helper():
    text = '<a href="02_b.ipynb">b</a> <a href=\'./03_c.ipynb#sec\'>c</a> <a href="sub/02_b.ipynb">x</a>'
    new, missing = nbscript.rewrite_links(text, {"02_b"})
    assert new.startswith('<a href="02_b.html">b</a>')
    assert "./03_c.ipynb#sec" in new and missing == ["03_c.ipynb"]
    assert 'href="sub/02_b.ipynb"' in new  # only links to pages of this site, in this folder


def test_local_mathjax_is_copied_once_and_referenced_relatively(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    for name in ("01_one", "02_two"):
        nbformat.write(linked_notebook(name, ""), nbdir / f"{name}.ipynb")
    mj = fake_mathjax(tmp_path / "mj")
    out = tmp_path / "site"
    pages = nbscript.render(out, notebooks_dir=nbdir, log=lambda *_: None, execute_notebooks=False, mathjax_dir=mj)
    copied = sorted(str(p.relative_to(out / "mathjax")) for p in (out / "mathjax").rglob("*") if p.is_file())
    assert "MathJax.js" in copied and "config/TeX-AMS_CHTML-full.js" in copied and "fonts/HTML-CSS/TeX/woff/a.woff" in copied
    assert not any(c.startswith(("unpacked", "test", "localization/de")) for c in copied)  # only what pages use
    for page in pages:
        text = page.read_text()
        assert re.search(r'<script src="mathjax/MathJax\.js\?config=TeX-AMS_CHTML-full,Safe">', text)
        assert nbscript.network_references(text) == []
    assert "local copy of MathJax" in (out / "index.html").read_text()
    with pytest.raises(SystemExit, match="not a MathJax 2 build"):
        nbscript.find_mathjax(tmp_path / "nbs")
