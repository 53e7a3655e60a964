"""Fold the checking and plumbing code cells of the notebooks (MyST-NB's ``hide-input`` tag).

    python scripts/fold_cells.py notebooks/01_*.ipynb ...      # tag the cells that the rule folds
    python scripts/fold_cells.py --check notebooks/*.ipynb     # list the cells that should be folded; exit 1 if any

On the site a folded cell shows its output (figures, printed results) and hides its source behind
"Show code cell source"; in Jupyter nothing changes, and nbval still executes and compares every
cell.  The rule, applied to each code cell's source:

* **checking**: a line that asserts (``assert ...``, ``np.testing`` / ``torch.testing``,
  ``pytest.raises``);
* **plumbing**: the house preamble and other IPython magics, imports, function and class
  definitions, working-folder and output plumbing (``tempfile``, ``os.chdir``,
  ``contextlib.redirect_stdout``), or a cell longer than ``MAX_SHOWN_LINES`` non-blank lines;
* everything else is **story** (a few lines that draw a figure or call the package the way a
  reader would) and stays unfolded.

Checking and plumbing cells get the tag ``hide-input``.  The script only ever *adds* that tag to
``cell.metadata.tags``: sources, outputs, execution counts and every other byte of the file are
left as they are (checked before writing), so running it twice changes nothing the second time.
``tests/test_site.py`` fails when a notebook has a checking or plumbing cell that is not folded,
or when a page would show more than ``PAGE_LIMIT`` lines of unfolded code.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

FOLD_TAG = "hide-input"
MAX_SHOWN_LINES = 12  # a story cell shows at most this many non-blank lines
PAGE_LIMIT = 60  # unfolded code lines a notebook page may show, all cells together

_CHECKING = re.compile(r"^\s*assert\b|\bnp\.testing\.|\btorch\.testing\.|\bpytest\.raises\b", re.M)
_PLUMBING = re.compile(
    r"^\s*(?:%|!)|^\s*(?:import\s|from\s+\S+\s+import\s)|^\s*(?:async\s+)?def\s|^\s*class\s|^\s*@\w"
    r"|\btempfile\.|\bos\.chdir\(|\bredirect_(?:stdout|stderr)\(",
    re.M,
)


def source_of(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def shown_lines(source: str) -> int:
    """The non-blank lines of a cell's source."""
    return sum(1 for line in source.splitlines() if line.strip())


def kind(cell: dict) -> str:
    """``"checking"``, ``"plumbing"`` or ``"story"`` for a code cell (``"text"`` for any other cell)."""
    if cell.get("cell_type") != "code":
        return "text"
    source = source_of(cell)
    if _CHECKING.search(source):
        return "checking"
    if _PLUMBING.search(source) or shown_lines(source) > MAX_SHOWN_LINES:
        return "plumbing"
    return "story"


def is_folded(cell: dict) -> bool:
    tags = cell.get("metadata", {}).get("tags", [])
    return any(t in tags for t in (FOLD_TAG, "remove-input", "remove-cell"))


def unfolded(nb: dict) -> list[tuple[int, str]]:
    """(cell index, kind) of every checking or plumbing cell that is not folded."""
    return [(i, kind(c)) for i, c in enumerate(nb["cells"]) if kind(c) in ("checking", "plumbing") and not is_folded(c)]


def unfolded_code_lines(nb: dict) -> int:
    """How many lines of code the notebook's page shows unfolded (non-blank source lines)."""
    return sum(shown_lines(source_of(c)) for c in nb["cells"] if c.get("cell_type") == "code" and not is_folded(c))


def fold(nb: dict) -> int:
    """Tag every checking and plumbing cell of ``nb`` (in place); return how many cells were tagged now."""
    changed = 0
    for cell in nb["cells"]:
        if kind(cell) in ("checking", "plumbing") and not is_folded(cell):
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            tags.append(FOLD_TAG)
            changed += 1
    return changed


def _without_metadata(nb: dict) -> dict:
    stripped = copy.deepcopy(nb)
    for cell in stripped["cells"]:
        cell.pop("metadata", None)
    return stripped


def _dumps(nb: dict) -> str:
    # nbformat's own layout (nbformat.writes): one-space indent, sorted keys, UTF-8 text, final newline
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def fold_file(path: Path) -> int:
    """Fold the cells of the notebook at ``path``; write it only if a tag was added; return that count."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    before = _without_metadata(nb)
    changed = fold(nb)
    if not changed:
        return 0
    if _without_metadata(nb) != before:  # pragma: no cover - fold() only touches cell metadata
        raise RuntimeError(f"{path}: folding changed more than cell metadata")
    path.write_text(_dumps(nb), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="write nothing; list cells that should be folded (exit 1 if any)")
    args = parser.parse_args(argv)
    status = 0
    for path in args.notebooks:
        if not path.is_file():
            print(f"fold_cells.py: notebook must be an existing file, got {str(path)!r}", file=sys.stderr)
            return 2
        if args.check:
            nb = json.loads(path.read_text(encoding="utf-8"))
            missing = unfolded(nb)
            lines = unfolded_code_lines(nb)
            if missing or lines > PAGE_LIMIT:
                status = 1
            cells = ", ".join(f"cell {i} ({k})" for i, k in missing) or "none"
            print(f"{path.name}: unfolded checking/plumbing cells: {cells}; unfolded code lines {lines} (limit {PAGE_LIMIT})")
        else:
            print(f"{path.name}: {fold_file(path)} cell(s) folded")
    return status


if __name__ == "__main__":
    sys.exit(main())
