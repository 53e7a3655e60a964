"""Execute the notebooks in place, deterministically (and render them as HTML).

    python scripts/notebooks.py execute [NOTEBOOK ...]   # all of notebooks/ when none given

Each notebook runs top to bottom in a fresh kernel of the current environment, with
its working directory set to notebooks/, and is written back with its outputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def notebook_paths(paths: list[str]) -> list[Path]:
    found = [Path(p).resolve() for p in paths] if paths else sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in found if not p.is_file()]
    if missing:
        raise SystemExit(f"notebooks.py: no such notebook: {', '.join(missing)}")
    return found


def execute(path: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run ``path`` top to bottom in a fresh kernel and return the executed notebook."""
    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()
    for cell in nb.cells:  # drop per-run metadata so re-executions diff cleanly
        cell.metadata.pop("execution", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def cmd_execute(args: argparse.Namespace) -> int:
    for path in notebook_paths(args.notebooks):
        start = time.perf_counter()
        nb = execute(path)
        tmp = path.with_suffix(".ipynb.tmp")
        nbformat.write(nb, tmp)
        tmp.replace(path)
        print(f"executed {path.relative_to(ROOT)} in {time.perf_counter() - start:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_exec = sub.add_parser("execute", help="re-execute notebooks in place")
    p_exec.add_argument("notebooks", nargs="*")
    p_exec.set_defaults(func=cmd_execute)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
