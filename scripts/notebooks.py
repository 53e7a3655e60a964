"""Execute the notebooks in place, deterministically; keep the notebook tables current; start a new notebook.

    python scripts/notebooks.py execute [--notebooks-dir DIR] [NOTEBOOK ...]
    python scripts/notebooks.py tables [--check]
    python scripts/notebooks.py new NN_slug "Title" [--summary TEXT] [--no-po]

``execute``: each notebook runs top to bottom in a fresh kernel of the current environment,
with its working directory set to the notebook's folder, and is written back in place (via a
temporary file, then a rename).  Cells run as nbval runs them (``store_history=False``: a
trailing ``;`` does not hide a value), so the stored outputs are the ones nbval compares.
Re-running gives a byte-identical file apart from image bytes: no execution timestamps,
streams coalesced, execution counts 1, 2, ..., the patterns of ``notebooks/sanitize.cfg``
(memory addresses, temp paths, ...) replaced in text outputs, cell ids kept (missing ones get
a stable id from the cell's position), fixed kernelspec, ``PYTHONHASHSEED=0``.

The committed outputs are the documentation site's cache: ``python scripts/site.py`` (Sphinx +
MyST-NB, run by ``bash scripts/run.sh``) renders them into ``build/html`` without executing
anything, and the test command's nbval run checks that they are what the code produces.

``tables``: the README's and the landing page's (``docs/index.md``) tables of notebooks, and the
counts of notebooks their prose states, are written from the notebooks' own metadata.  Each
notebook's metadata holds, under ``"hypviz"``, its ``title`` (the landing page's "NN · title"),
its ``summary`` (one line, the landing page's table: MyST, maths in ``$...$``) and its
``summary_readme`` (one line, the README's table: GitHub Markdown, maths in code spans).  The
files mark what is generated: a region opens with a line ``<!-- notebooks:NAME -->`` (README) or
``% notebooks:NAME`` (a MyST comment, neither shown nor translated) and closes with
``<!-- /notebooks:NAME -->`` or ``% /notebooks:NAME``; a ``table`` region is rewritten whole, a
``count`` region keeps its text and rewrites "N notebooks" and "(NN to NN)" in it.  ``--check``
writes nothing and exits 1 naming the stale files (``tests/test_notebook_tables.py`` runs it).

``new NN_slug "Title"``: a new notebook ``notebooks/NN_slug.ipynb`` with the house's first cells
(the title and opening statement, the house preamble copied from the first notebook, a checked
equation, a summary) and its metadata (the kernelspec, the title, the summaries: ``--summary``,
else the title), ready for ``execute``; then the tables are rewritten and, unless ``--no-po``,
``scripts/translations.py --update`` adds the new page's catalogue (its messages, untranslated)
and keeps the landing page's changed paragraphs' translations as fuzzy.

All notebooks are ``NN_*.ipynb`` in ``--notebooks-dir`` (default: the repository's
``notebooks/``) unless paths are given.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SANITIZE_CFG = NOTEBOOKS / "sanitize.cfg"
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"


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

    def __new__(cls, nb: Any, **kwargs: Any) -> Any:  # a NotebookClient (of a subclass made here), not an instance of cls
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


# --------------------------------------------------------------------------- #
# the notebook tables, from each notebook's metadata
# --------------------------------------------------------------------------- #
META = "hypviz"  # the key of a notebook's metadata that holds its title and summaries
FIELDS = {
    "title": "its short title, one line (the landing page shows 'NN · title')",
    "summary": "one line saying what it shows (the landing page's table: MyST, maths in $...$)",
    "summary_readme": "one line saying what it shows (the README's table: GitHub Markdown, maths in `code`)",
}
FORBIDDEN = {"title": "[]", "summary": "", "summary_readme": "|"}  # characters that would break the link or the table


class Entry(NamedTuple):
    """One notebook's row of the tables: ``stem`` (``NN_slug``) and the metadata's :data:`FIELDS`."""

    stem: str
    title: str
    summary: str
    summary_readme: str

    @property
    def number(self) -> str:
        return self.stem[:2]


def check_field(field: str, value: object, where: str = "") -> str:
    """``value`` as the metadata field ``field`` (one of :data:`FIELDS`) takes it, runs of spaces made one; else a
    one-line ``ValueError`` (prefixed with ``where``) saying what it must be."""
    bad = FORBIDDEN[field]
    if not isinstance(value, str) or not value.strip() or "\n" in value or any(c in value for c in bad):
        without = f" (without {' or '.join(map(repr, bad))})" if bad else ""
        raise ValueError(f"{where}{field} must be {FIELDS[field]}{without}, got {value!r:.80}")
    return " ".join(value.split())


def entries(notebooks_dir: Path = NOTEBOOKS) -> list[Entry]:
    """Every notebook's :class:`Entry`, in number order; a ``ValueError`` names a notebook whose metadata is wrong."""
    found = []
    for path in notebook_paths([], notebooks_dir):
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get(META)
        if not isinstance(meta, dict):
            raise ValueError(f"{path.name}: its metadata has no {META!r} entry holding {', '.join(FIELDS)} "
                             f"(python scripts/notebooks.py new makes a notebook with it)")
        found.append(Entry(path.stem, *(check_field(f, meta.get(f), f"{path.name}: metadata {META}.") for f in FIELDS)))
    return found


def _wrap(text: str, first: str, rest: str, width: int = 116) -> str:
    """``text`` filled to ``width`` columns, never breaking inside ``$...$`` or a code span."""
    words = re.findall(r"(?:\$[^$]*\$|`[^`]*`|[^\s$`])+", text)
    if " ".join(words) != text:  # an unclosed $ or `: no safe break points
        words = [text]
    lines, line = [], first + words[0]
    for word in words[1:]:
        if len(line) + 1 + len(word) > width:
            lines.append(line)
            line = rest + word
        else:
            line += " " + word
    return "\n".join([*lines, line])


def readme_table(found: list[Entry]) -> str:
    """The README's table: one row a notebook, its name and ``summary_readme``."""
    rows = [f"| `{e.stem}` | {e.summary_readme} |" for e in found]
    return "\n".join(["| notebook | what it shows |", "|---|---|", *rows])


def index_table(found: list[Entry]) -> str:
    """The landing page's MyST list-table: one row a notebook, linked by "NN · title", and its ``summary``."""
    head = ["```{list-table}", ":header-rows: 1", ":widths: 28 72", ":class: hypviz-notebooks", "",
            "* - notebook", "  - what it shows"]
    rows = [f"* - [{e.number} · {e.title}](notebooks/{e.stem}.ipynb)\n{_wrap(e.summary, '  - ', '    ')}" for e in found]
    return "\n".join([*head, *rows, "```"])


def count_text(body: str, found: list[Entry], where: str) -> str:
    """``body`` with its "N notebooks" and "(NN to NN)" made current; a ``ValueError`` when it has neither."""
    text, plain = re.subn(r"\b\d+ notebooks\b", f"{len(found)} notebooks", body)
    text, ranged = re.subn(r"\(\d\d to \d\d\)", f"({found[0].number} to {found[-1].number})", text)
    if not plain + ranged:
        raise ValueError(f"{where}: its notebooks:count region has no 'N notebooks' or '(NN to NN)' to keep current")
    return text


MARKER = re.compile(r"^(?:<!-- |% )(/?)notebooks:(\w+)(?: -->)?[ \t]*$", re.M)


def regenerate(text: str, table: str, found: list[Entry], where: str) -> str:
    """``text`` with each ``table`` region replaced by ``table`` and each ``count`` region's counts made current."""
    out, pos, opened, regions = [], 0, None, 0
    for mark in MARKER.finditer(text):
        closing, name = mark.group(1) == "/", mark.group(2)
        if name not in ("table", "count"):
            raise ValueError(f"{where}: line {text.count(chr(10), 0, mark.start()) + 1}: region must be notebooks:table "
                             f"or notebooks:count, got notebooks:{name}")
        if not closing and opened is None:
            opened = mark
        elif closing and opened is not None and opened.group(2) == name:
            body = text[opened.end() + 1:mark.start()]
            new = f"\n{table}\n\n" if name == "table" else count_text(body, found, where)
            out += [text[pos:opened.end() + 1], new]
            pos, opened, regions = mark.start(), None, regions + 1
        else:
            raise ValueError(f"{where}: line {text.count(chr(10), 0, mark.start()) + 1}: {mark.group(0).strip()!r} "
                             f"{'closes no open region' if closing else 'opens a region inside another'}")
    if opened is not None:
        raise ValueError(f"{where}: {opened.group(0).strip()!r} is never closed")
    if not regions:
        raise ValueError(f"{where}: no notebooks:table or notebooks:count region (marker lines) to keep current")
    return "".join(out) + text[pos:]


def tables(notebooks_dir: Path = NOTEBOOKS, readme: Path = README, index: Path = INDEX, write: bool = True) -> list[Path]:
    """Rewrite the README's and the landing page's tables and counts from the notebooks' metadata (``write``);
    return the files that were (or, with ``write=False``, would be) changed."""
    found = entries(notebooks_dir)
    changed = []
    for path, table in ((Path(readme), readme_table(found)), (Path(index), index_table(found))):
        text = path.read_text(encoding="utf-8")
        new = regenerate(text, table, found, _show(path))
        if new != text:
            changed.append(path)
            if write:
                path.write_text(new, encoding="utf-8")
    return changed


def cmd_tables(args: argparse.Namespace) -> int:
    changed = tables(args.notebooks_dir, args.readme, args.index, write=not args.check)
    names = ", ".join(_show(p) for p in changed)
    if args.check:
        if changed:
            print(f"stale notebook tables or counts in {names}: run python scripts/notebooks.py tables", file=sys.stderr)
        return 1 if changed else 0
    print(f"rewrote {names}" if changed else "the notebook tables and counts are current")
    return 0


# --------------------------------------------------------------------------- #
# a new notebook
# --------------------------------------------------------------------------- #
def new_notebook(name: str, title: str, summary: str | None = None, notebooks_dir: Path = NOTEBOOKS) -> Path:
    """Write ``notebooks_dir/name.ipynb``: the house's first cells and metadata (see the module's docstring)."""
    if not (isinstance(name, str) and re.fullmatch(r"\d\d_[a-z0-9]+(?:_[a-z0-9]+)*", name)):
        raise ValueError(f"name must be NN_slug (two digits, '_', lower-case words joined by '_'), got {name!r}")
    title = check_field("title", title)
    summary = title if summary is None else summary
    meta = {"title": title, "summary": check_field("summary", summary), "summary_readme": check_field("summary_readme", summary)}
    existing = notebook_paths([], notebooks_dir)
    taken = [p.name for p in existing if p.name[:2] == name[:2]]
    if taken:
        raise ValueError(f"name must take a number no notebook has, got {name!r} ({taken[0]} has {name[:2]})")
    template = nbformat.read(existing[0], as_version=4)
    preamble = next(c for c in template.cells if c.cell_type == "code")  # the house preamble (tests/test_site.py)
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": template.metadata["kernelspec"],
                                            "language_info": template.metadata.get("language_info", {}), META: meta})
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [
        md(f"# {name[:2]} · {title}\n\n"
           "What this notebook shows, in a few lines, and how each claim is checked: every equation stated in it is "
           "checked in code in the same notebook."),
        code(preamble.source, metadata={"tags": ["hide-input"]}),
        md("## 1. A first check\n\nA point lifted onto the hyperboloid satisfies $\\langle x, x\\rangle_L = -k$; the cell "
           "below checks it for five points."),
        code("from hypviz import lorentz as L\n\nk = 1.5\nx = L.lift(torch.randn(5, 3, dtype=torch.float64), k=k)\n"
             "assert torch.allclose(L.inner(x, x), torch.full((5,), -k, dtype=torch.float64))",
             metadata={"tags": ["hide-input"]}),
        md("## Summary\n\n* A lifted point lies on the hyperboloid, $\\langle x, x\\rangle_L = -k$ (checked above)."),
    ]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"nb{name[:2]}-{i:02d}"
    path = Path(notebooks_dir) / f"{name}.ipynb"
    _write_atomic(nb, path)
    return path


def cmd_new(args: argparse.Namespace) -> int:
    path = new_notebook(args.name, args.title, args.summary, args.notebooks_dir)
    print(f"wrote {_show(path)}")
    changed = tables(args.notebooks_dir, args.readme, args.index)
    print(f"rewrote {', '.join(_show(p) for p in changed)}" if changed else "the notebook tables were current")
    if not args.no_po:
        translations = _load_script("translations")
        translations.main(["--update"])
    print(f"next: write it, then python scripts/notebooks.py execute {_show(path)}")
    return 0


def _load_script(name: str):
    """``scripts/<name>.py`` as a module (loaded by path: ``scripts`` is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"hypviz_{name}_script", Path(__file__).resolve().parent / f"{name}.py")
    assert spec is not None and spec.loader is not None  # a .py path: a spec with a loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _show(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_exec = sub.add_parser("execute", help="re-execute notebooks in place")
    p_exec.add_argument("notebooks", nargs="*", help="notebook paths (default: every NN_*.ipynb)")
    p_exec.set_defaults(func=cmd_execute)
    p_tables = sub.add_parser("tables", help="rewrite the notebook tables and counts from the notebooks' metadata")
    p_tables.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale files")
    p_tables.set_defaults(func=cmd_tables)
    p_new = sub.add_parser("new", help="start a notebook NN_slug.ipynb with the house's first cells and metadata")
    p_new.add_argument("name", help="NN_slug: its number (not taken) and lower-case words joined by '_'")
    p_new.add_argument("title", help="its short title (the landing page shows 'NN · title')")
    p_new.add_argument("--summary", default=None, help="one line saying what it shows (default: the title)")
    p_new.add_argument("--no-po", action="store_true", help="do not run scripts/translations.py --update")
    p_new.set_defaults(func=cmd_new)
    for p in (p_exec, p_tables, p_new):
        p.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS, help="where to find NN_*.ipynb")
    for p in (p_tables, p_new):
        p.add_argument("--readme", type=Path, default=README, help=argparse.SUPPRESS)
        p.add_argument("--index", type=Path, default=INDEX, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"notebooks.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
