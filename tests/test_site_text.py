"""The notebooks' text and what their pages show agree (read from the notebooks' JSON; no site build).

* A markdown cell that discusses a table ("table" as a word) sits next to a code cell whose printed
  output is on the page: no fold tag (``hide-output``, ``remove-output``, ``hide-cell``, ``remove-cell``)
  on any code cell with printed text among its neighbours (the code cells between the markdown cell
  before it and the one after it), and at least one such printed output unless the text names the
  figure that draws the table instead (or is the notebook's summary, which recalls tables shown above).
* A code cell's nbval marker lines (``# NBVAL_IGNORE_OUTPUT``) are not shown on the site: the site's
  extension (``docs/_ext/hypviz_site.py``) drops them from the rendered source.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
OUTPUT_FOLDS = {"hide-output", "remove-output", "hide-cell", "remove-cell"}  # MyST-NB tags that hide an output
TABLE = re.compile(r"\btables?\b", re.IGNORECASE)
FIGURE = re.compile(r"\b(figure|plot|panel)s?\b", re.IGNORECASE)
SUMMARY = re.compile(r"#+ *Summary\b")  # a summary recalls tables shown (and checked) where they are discussed


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _prints_text(cell: dict) -> bool:
    """Whether a code cell's stored outputs hold printed text (a stream or a plain-text-only result)."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and _source({"source": out.get("text", "")}).strip():
            return True
        data = out.get("data", {})
        if set(data) == {"text/plain"}:
            return True
    return False


def _folded(cell: dict) -> bool:
    return bool(OUTPUT_FOLDS & set(cell.get("metadata", {}).get("tags", [])))


def neighbours(cells: list[dict], i: int) -> list[int]:
    """The code cells between the markdown cell before cell ``i`` and the markdown cell after it."""
    found = []
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(cells) and cells[j]["cell_type"] != "markdown":
            if cells[j]["cell_type"] == "code":
                found.append(j)
            j += step
    return sorted(found)


def hidden_tables(nb: dict) -> list[str]:
    """Each markdown cell that discusses a table the page does not show, with the reason."""
    cells = nb["cells"]
    problems = []
    for i, cell in enumerate(cells):
        text = _source(cell)
        if cell["cell_type"] != "markdown" or not TABLE.search(text):
            continue
        printing = [j for j in neighbours(cells, i) if _prints_text(cells[j])]
        folded = [j for j in printing if _folded(cells[j])]
        if folded:
            problems.append(f"cell {i} discusses a table; the printed output of cell(s) {folded} is folded away")
        elif not printing and not FIGURE.search(text) and not SUMMARY.match(text):
            problems.append(f"cell {i} discusses a table; no neighbouring cell prints one and no figure is named")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_table_the_text_discusses_is_on_the_page(path):
    problems = hidden_tables(json.loads(path.read_text(encoding="utf-8")))
    assert not problems, f"{path.name}: " + "; ".join(problems)


def _md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text, tags=(), printed="r  TV\n0.1  0.5\n"):
    outputs = [{"output_type": "stream", "name": "stdout", "text": printed}] if printed else []
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": text, "outputs": outputs}


def test_the_check_catches_a_folded_table_and_accepts_a_shown_one():
    shown = {"cells": [_md("The numbers:"), _code("print(t)", ["hide-input"]), _md("That table is one draw.")]}
    assert hidden_tables(shown) == []
    for tag in sorted(OUTPUT_FOLDS):
        folded = {"cells": [_md("The numbers:"), _code("print(t)", ["hide-input", tag]), _md("That table is one draw.")]}
        assert hidden_tables(folded) == ["cell 2 discusses a table; the printed output of cell(s) [1] is folded away"]
    # the table follows the text that announces it
    after = {"cells": [_md("The table below:"), _code("print(t)", ["hide-output"]), _md("Next.")]}
    assert len(hidden_tables(after)) == 1
    # no printed table at all: the text must name the figure that replaced it
    bare = {"cells": [_md("As the table says."), _code("x = 1", printed=""), _md("Next.")]}
    assert len(hidden_tables(bare)) == 1
    summary = {"cells": [_md("## Summary\n\n* The calibration table above agrees."), _code("x = 1", printed="")]}
    assert hidden_tables(summary) == []
    named = {"cells": [_md("The figure above draws that table."), _code("x = 1", printed=""), _md("Next.")]}
    assert hidden_tables(named) == []
    # a markdown cell that says nothing of a table is not checked
    assert hidden_tables({"cells": [_md("Text."), _code("print(t)", ["hide-output"])]}) == []


# --------------------------------------------------------------------------- #
# printed tables fit the column
# --------------------------------------------------------------------------- #
#: printed characters a line of output holds without wrapping in the text column at an 800 px window
#: (721 px; the output's monospace font is 8.4 px a character: 85 characters, less the output's padding)
COLUMN_CHARS = 80
#: notebooks whose printed tables are still wider than the column (the page wraps their lines); the list only shrinks
WIDE_TABLES_YET = ("01", "02", "03", "06", "07", "08", "09", "10", "11")


def wide_tables(nb: dict, limit: int = COLUMN_CHARS) -> list[str]:
    """Each printed table on the page (a shown output of three or more lines) with a line longer than ``limit``."""
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or _folded(cell):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") != "stream":
                continue
            lines = _source({"source": out.get("text", "")}).splitlines()
            longest = max((len(line) for line in lines), default=0)
            if len(lines) >= 3 and longest > limit:
                problems.append(f"cell {i}: a line of {longest} characters (of {len(lines)} lines)")
    return problems


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name[:2] not in WIDE_TABLES_YET], ids=lambda p: p.stem)
def test_printed_tables_fit_the_column(path):
    """A printed table's lines are at most COLUMN_CHARS long: nothing wraps at 800 px (split it, or shorten headers)."""
    problems = wide_tables(json.loads(path.read_text(encoding="utf-8")))
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_the_width_check_sees_a_wide_table_and_ignores_a_folded_one():
    wide = "r  " + "x" * 90 + "\n0.1  0.5\n0.2  0.6\n"
    assert wide_tables({"cells": [_code("print(t)", printed=wide)]}) == ["cell 0: a line of 93 characters (of 3 lines)"]
    assert wide_tables({"cells": [_code("print(t)", ["hide-output"], printed=wide)]}) == []
    assert wide_tables({"cells": [_code("print(t)", printed="r  TV\n0.1  0.5\n0.2  0.6\n")]}) == []


# --------------------------------------------------------------------------- #
# nbval markers are not shown
# --------------------------------------------------------------------------- #
def _site_extension():
    pytest.importorskip("docutils")
    spec = importlib.util.spec_from_file_location("hypviz_site_ext", ROOT / "docs" / "_ext" / "hypviz_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nbval_marker_lines_are_dropped_and_nothing_else():
    ext = _site_extension()
    assert ext.strip_nbval_markers("# NBVAL_IGNORE_OUTPUT\nprint(t)") == "print(t)"
    assert ext.strip_nbval_markers("x = 1\n  #NBVAL_SKIP  \ny = 2\n") == "x = 1\ny = 2\n"
    assert ext.strip_nbval_markers("x = 1\n# NBVAL_CHECK_OUTPUT") == "x = 1\n"
    kept = 'print("# NBVAL_IGNORE_OUTPUT")\nx = 1  # NBVAL_IGNORE_OUTPUT\n# a comment\n'
    assert ext.strip_nbval_markers(kept) == kept


def test_the_transform_hides_markers_in_notebook_code_cells_only():
    ext = _site_extension()
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    doc = new_document("page", get_default_settings(Parser))
    cell = nodes.container(nb_element="cell_code")
    source = nodes.container(nb_element="cell_code_source")
    text = "# NBVAL_IGNORE_OUTPUT\nprint(f'measured in {t:.2f} s')"
    source += nodes.literal_block(text, text, language="ipython3")
    cell += source
    doc += cell
    prose = "# NBVAL_IGNORE_OUTPUT\nan example in the text"
    doc += nodes.literal_block(prose, prose)  # not a notebook cell: left as written
    ext._hide_nbval_markers(None, doc)
    shown = source[0]
    assert shown.astext() == "print(f'measured in {t:.2f} s')"
    assert shown.rawsource == shown.astext(), "rawsource and text differ: Sphinx would not highlight the block"
    assert doc[-1].astext() == prose


def test_every_marker_in_the_notebooks_is_one_the_transform_drops():
    """A marker written another way (inline, lower case) would still show on the site."""
    ext = _site_extension()
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code" and "NBVAL_" in _source(cell).upper():
                assert "NBVAL_" not in ext.strip_nbval_markers(_source(cell)).upper(), f"{path.name} cell {i}"


def test_a_built_page_shows_the_cell_without_its_marker(tmp_path):
    """A one-notebook Sphinx build with the site's extension: no marker on the page, the code still highlighted."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    nbformat = pytest.importorskip("nbformat")
    from sphinx.cmd.build import build_main

    out = nbformat.v4.new_output
    nb = nbformat.v4.new_notebook(metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python", "pygments_lexer": "ipython3"},
    })
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A page\n\nTimings follow."),
        nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint('took 1 s')", metadata={"tags": ["hide-input"]},
                                  outputs=[out("stream", name="stdout", text="took 1 s\n")]),
        nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nelapsed = 1.0  # seconds"),
    ]
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(nb, src / "index.ipynb")
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'docs' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'hypviz_site']\nnb_execution_mode = 'off'\nexclude_patterns = ['_build']\n",
        encoding="utf-8",
    )
    assert build_main(["-q", "-b", "html", str(src), str(tmp_path / "html")]) == 0
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert "NBVAL" not in html
    inputs = re.findall(r'<div class="cell_input[^"]*">\s*<div class="highlight-(\w+)', html)
    assert inputs == ["ipython3", "ipython3"], inputs  # both cells shown and highlighted as code
    assert "took" in html and "elapsed" in html
