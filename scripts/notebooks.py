"""Execute the notebooks in place, deterministically (the outputs nbval compares and the site shows).

    python scripts/notebooks.py execute [--notebooks-dir DIR] [NOTEBOOK ...]

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

All notebooks are ``NN_*.ipynb`` in ``--notebooks-dir`` (default: the repository's
``notebooks/``) unless paths are given.
"""

from __future__ import annotations

import argparse
import configparser
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_exec = sub.add_parser("execute", help="re-execute notebooks in place")
    p_exec.add_argument("notebooks", nargs="*", help="notebook paths (default: every NN_*.ipynb)")
    p_exec.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS, help="where to find NN_*.ipynb")
    p_exec.set_defaults(func=cmd_execute)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
