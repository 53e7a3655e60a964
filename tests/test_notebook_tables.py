"""The notebook tables and counts of README.md and docs/index.md come from the notebooks' metadata
(``python scripts/notebooks.py tables``), and ``python scripts/notebooks.py new`` starts a notebook the house takes."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hypviz_notebooks_script", ROOT / "scripts" / "notebooks.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notebooks)

NOTEBOOK_PATHS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_the_tables_and_counts_are_current():
    """What README.md and docs/index.md say of the notebooks is what the notebooks' metadata says now."""
    found = notebooks.entries()
    assert [e.stem for e in found] == [p.stem for p in NOTEBOOK_PATHS]
    stale = notebooks.tables(write=False)
    assert not stale, (f"stale notebook tables or counts in {', '.join(p.name for p in stale)}: "
                       f"run python scripts/notebooks.py tables")


def test_the_landing_page_states_the_count_and_the_range_it_is_given():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    found = notebooks.entries()
    assert f"every notebook ({found[0].number} to {found[-1].number})" in index
    assert f"over the {len(found)} notebooks" in (ROOT / "README.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- #
# the generator, on a folder of its own
# --------------------------------------------------------------------------- #
README = """# A project

<!-- notebooks:count -->
The test command runs nbval over the 7 notebooks in one environment.
<!-- /notebooks:count -->

## Notebooks

<!-- notebooks:table -->

| notebook | what it shows |
|---|---|
| `01_old` | gone |

<!-- /notebooks:table -->

After the table.
"""

INDEX = """# The site

% notebooks:count

Every notebook (01 to 07) is translated.

% /notebooks:count

% notebooks:table

(old table)

% /notebooks:table

## Conventions
"""


def _notebook(folder: Path, stem: str, meta: dict | None) -> Path:
    nb = nbformat.v4.new_notebook(metadata={} if meta is None else {"hypviz": meta})
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {stem[:2]} · x"), nbformat.v4.new_code_cell("x = 1")]
    path = folder / f"{stem}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture
def house(tmp_path):
    """A folder with two notebooks and a README and landing page holding the marked regions."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    _notebook(nbs, "01_first", {"title": "the first", "summary": "what $k$ is", "summary_readme": "what `k` is"})
    _notebook(nbs, "03_third", {"title": "the third", "summary": "a long summary " * 12 + "with $a \\le b$ at the end",
                                "summary_readme": "the third, shortly"})
    (tmp_path / "README.md").write_text(README, encoding="utf-8")
    (tmp_path / "index.md").write_text(INDEX, encoding="utf-8")
    return tmp_path


def _tables(house: Path, write: bool = True) -> list[Path]:
    return notebooks.tables(house / "notebooks", house / "README.md", house / "index.md", write=write)


def test_tables_are_written_from_the_metadata_and_only_inside_the_regions(house):
    assert _tables(house, write=False) == [house / "README.md", house / "index.md"]
    assert (house / "README.md").read_text(encoding="utf-8") == README  # write=False writes nothing
    assert _tables(house) == [house / "README.md", house / "index.md"]
    readme = (house / "README.md").read_text(encoding="utf-8")
    assert "| `01_first` | what `k` is |\n| `03_third` | the third, shortly |\n\n<!-- /notebooks:table -->" in readme
    assert "`01_old`" not in readme and readme.startswith("# A project\n") and readme.endswith("\nAfter the table.\n")
    assert "nbval over the 2 notebooks in one environment" in readme
    index = (house / "index.md").read_text(encoding="utf-8")
    assert "Every notebook (01 to 03) is translated." in index and "(old table)" not in index
    assert "* - [01 · the first](notebooks/01_first.ipynb)\n  - what $k$ is\n" in index
    rows = index.split("* - [03 · the third](notebooks/03_third.ipynb)\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert len(rows) > 1 and all(len(line) <= 116 for line in rows)  # wrapped, never inside $...$
    assert " ".join(line.strip().removeprefix("- ") for line in rows) == "a long summary " * 12 + "with $a \\le b$ at the end"
    assert index.endswith("% /notebooks:table\n\n## Conventions\n")
    assert _tables(house) == []  # written once, current after


def test_tables_check_exits_1_naming_the_stale_files_and_the_command(house, capsys):
    args = ["tables", "--check", "--notebooks-dir", str(house / "notebooks"), "--readme", str(house / "README.md"),
            "--index", str(house / "index.md")]
    assert notebooks.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "README.md" in err and "index.md" in err
    assert "python scripts/notebooks.py tables" in err
    assert notebooks.main(args[:1] + args[2:]) == 0
    assert notebooks.main(args) == 0


@pytest.mark.parametrize("meta, words", [
    (None, ["02_bad.ipynb", "no 'hypviz' entry", "title, summary, summary_readme"]),
    ({"title": "t", "summary": "s"}, ["02_bad.ipynb", "hypviz.summary_readme must be one line", "got None"]),
    ({"title": "t", "summary": "s", "summary_readme": "a | b"}, ["hypviz.summary_readme", "without '|'", "'a | b'"]),
    ({"title": "t [x]", "summary": "s", "summary_readme": "s"}, ["hypviz.title", "without '[' or ']'"]),
    ({"title": "t", "summary": "two\nlines", "summary_readme": "s"}, ["hypviz.summary must be one line"]),
])
def test_wrong_metadata_is_one_line_naming_the_notebook_and_the_field(house, capsys, meta, words):
    _notebook(house / "notebooks", "02_bad", meta)
    with pytest.raises(ValueError) as err:
        _tables(house)
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words), str(err.value)
    assert (house / "README.md").read_text(encoding="utf-8") == README
    code = notebooks.main(["tables", "--notebooks-dir", str(house / "notebooks"), "--readme", str(house / "README.md"),
                           "--index", str(house / "index.md")])
    out = capsys.readouterr().err.strip()
    assert code == 2 and out.startswith("notebooks.py: 02_bad.ipynb") and len(out.splitlines()) == 1


@pytest.mark.parametrize("text, words", [
    ("<!-- notebooks:table -->\nx\n", ["'<!-- notebooks:table -->' is never closed"]),
    ("x\n<!-- /notebooks:table -->\n", ["line 2", "closes no open region"]),
    ("<!-- notebooks:table -->\n<!-- notebooks:count -->\n", ["line 2", "opens a region inside another"]),
    ("<!-- notebooks:list -->\n<!-- /notebooks:list -->\n", ["line 1", "notebooks:table or notebooks:count, got notebooks:list"]),
    ("no markers at all\n", ["no notebooks:table or notebooks:count region"]),
    ("<!-- notebooks:count -->\nno number here\n<!-- /notebooks:count -->\n", ["no 'N notebooks' or '(NN to NN)'"]),
])
def test_wrong_markers_are_one_line_naming_the_file_and_line(house, text, words):
    (house / "README.md").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        _tables(house)
    assert str(err.value).startswith(str(house / "README.md")) and all(w in str(err.value) for w in words), str(err.value)
    assert (house / "README.md").read_text(encoding="utf-8") == text


# --------------------------------------------------------------------------- #
# a new notebook
# --------------------------------------------------------------------------- #
@pytest.fixture
def real_house(tmp_path):
    """A copy of the repository's first notebook (the house preamble's source) and README and landing page."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    shutil.copy(NOTEBOOK_PATHS[0], nbs)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "docs" / "index.md", tmp_path / "index.md")
    return tmp_path


def test_new_starts_a_notebook_with_the_house_cells_and_metadata(real_house, capsys):
    code = notebooks.main(["new", "12_new_topic", "a new topic", "--summary", "what the new topic shows, with $k$",
                           "--no-po", "--notebooks-dir", str(real_house / "notebooks"),
                           "--readme", str(real_house / "README.md"), "--index", str(real_house / "index.md")])
    assert code == 0 and "notebooks.py execute" in capsys.readouterr().out
    path = real_house / "notebooks" / "12_new_topic.ipynb"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    first = nbformat.read(NOTEBOOK_PATHS[0], as_version=4)
    assert nb.metadata["kernelspec"] == first.metadata["kernelspec"]
    assert nb.metadata["hypviz"] == {"title": "a new topic", "summary": "what the new topic shows, with $k$",
                                     "summary_readme": "what the new topic shows, with $k$"}
    cells = nb.cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# 12 · a new topic\n\n")
    codes = [c for c in cells if c.cell_type == "code"]
    assert codes[0].source == next(c for c in first.cells if c.cell_type == "code").source  # the house preamble
    assert all("hide-input" in c.metadata["tags"] for c in codes) and not any(c.outputs for c in codes)
    assert cells[-1].source.startswith("## Summary\n")
    assert len({c["id"] for c in cells}) == len(cells)
    for cell in codes[1:]:  # the checking cells run (the preamble needs IPython: nbval runs it)
        exec(cell.source, {"torch": torch})
    # the tables take it at once, and are current after
    readme = (real_house / "README.md").read_text(encoding="utf-8")
    assert "| `12_new_topic` | what the new topic shows, with $k$ |" in readme and "over the 2 notebooks" in readme
    index = (real_house / "index.md").read_text(encoding="utf-8")
    assert "* - [12 · a new topic](notebooks/12_new_topic.ipynb)" in index and "every notebook (01 to 12)" in index
    assert _tables(real_house) == []


@pytest.mark.parametrize("name, title, summary, words", [
    ("12-new", "t", None, ["name must be NN_slug", "'12-new'"]),
    ("1_new", "t", None, ["name must be NN_slug"]),
    ("12_New", "t", None, ["name must be NN_slug"]),
    ("01_again", "t", None, ["name must take a number no notebook has", "01_lorentzian_inner_product.ipynb has 01"]),
    ("12_new", "", None, ["title must be its short title"]),
    ("12_new", "t", "a | b", ["summary_readme must be", "without '|'"]),
])
def test_new_refuses_a_wrong_name_title_or_summary_in_one_line_and_writes_nothing(real_house, name, title, summary, words):
    before = sorted(p.name for p in (real_house / "notebooks").iterdir())
    with pytest.raises(ValueError) as err:
        notebooks.new_notebook(name, title, summary, real_house / "notebooks")
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words), str(err.value)
    assert sorted(p.name for p in (real_house / "notebooks").iterdir()) == before


def test_every_notebook_carries_its_table_metadata():
    for path in NOTEBOOK_PATHS:
        meta = json.loads(path.read_text(encoding="utf-8"))["metadata"]["hypviz"]
        assert set(meta) == set(notebooks.FIELDS), (path.name, sorted(meta))
