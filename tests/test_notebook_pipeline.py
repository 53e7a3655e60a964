"""scripts/notebooks.py: deterministic in-place execution (the outputs nbval compares and the site shows).

Runs on tiny temporary notebooks (no heavy imports), not on notebooks/, to stay fast.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from nbformat import NotebookNode

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hypviz_notebooks_script", ROOT / "scripts" / "notebooks.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
nbscript = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbscript)

PLOTLY_FIGURE = {
    "data": [{"type": "scatter", "x": [0.0, 1.0, 2.0], "y": [1.0, 0.5, 0.25], "name": "tiny"}],
    "layout": {"title": {"text": "tiny figure"}, "height": 300},
    "config": {"responsive": True},
}


def tiny_notebook(title: str, drop_ids: bool = False) -> NotebookNode:
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


def test_helpers():
    with pytest.raises(SystemExit, match="no such notebook"):
        nbscript.notebook_paths(["/nonexistent/01_x.ipynb"])
    with pytest.raises(SystemExit, match="no NN_"):
        nbscript.notebook_paths([], ROOT / "docs")
    patterns = nbscript.sanitizers()
    assert patterns, "notebooks/sanitize.cfg gave no patterns"


def test_render_is_gone_the_site_is_built_by_sphinx():
    """The hand-written HTML renderer was replaced by scripts/site.py (tests/test_site.py tests it)."""
    with pytest.raises(SystemExit):
        nbscript.main(["render", "--out", "x"])
    assert not hasattr(nbscript, "render")
