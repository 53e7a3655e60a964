"""Every notebook runs in the environment the README's main job builds.

``bash scripts/run.sh`` installs ``hypviz[lab]`` (its ``extras=lab``), and the README tells a reader to open the
notebooks there.  Each third-party module a notebook imports, and each one ``hypviz`` imports anywhere (lazily
too: faiss for the key search of notebook 11), must come with that extra: a requirement of ``pyproject.toml``'s
``lab`` closure (its own and the extras it names, ``hypviz[notebooks]`` ...), or a package one of those installed
packages depends on (``PIL`` through matplotlib).
"""

from __future__ import annotations

import ast
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs tomllib (3.11+) or tomli")

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``faiss-cpu>=1.8; ...`` -> ``faiss-cpu``)."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9_.-]+)", requirement).group(1)).lower()  # type: ignore[union-attr]


def lab_closure(extra: str = "lab") -> set[str]:
    """The distributions ``pip install hypviz[extra]`` installs: pyproject's dependencies, the extra's and the extras
    it names, then every installed distribution's own requirements (those without an ``extra`` marker)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    names, todo, seen = {_name(r) for r in project["dependencies"]}, [extra], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for req in optional[current]:
            inner = re.fullmatch(r"\s*hypviz\[([a-z, ]+)\]\s*", req)
            if inner:
                todo += [e.strip() for e in inner.group(1).split(",")]
            else:
                names.add(_name(req))
    todo = list(names)
    while todo:  # what the installed distributions pull in
        try:
            requires = metadata.requires(todo.pop()) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" not in req and _name(req) not in names:
                names.add(_name(req))
                todo.append(_name(req))
    return names


def _imports(code: str) -> set[str]:
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()]
    out = set()
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return {m for m in out if m not in sys.stdlib_module_names and m not in ("hypviz", "__future__")}


def third_party_imports() -> dict[str, set[str]]:
    """``{module: {where, ...}}`` over every notebook's code cells and every module of ``hypviz``."""
    found: dict[str, set[str]] = {}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for m in _imports("".join(cell["source"])):
                    found.setdefault(m, set()).add(nb.name)
    for path in sorted((ROOT / "hypviz").rglob("*.py")):
        for m in _imports(path.read_text()):
            found.setdefault(m, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_main_job_installs_the_lab_extra():
    assert re.search(r"^extras=lab$", (ROOT / "scripts" / "run.sh").read_text(), re.M), "run.sh no longer installs lab"


def test_every_module_the_notebooks_and_hypviz_import_comes_with_the_lab_extra():
    closure = lab_closure()
    providers = metadata.packages_distributions()
    missing = []
    for module, where in sorted(third_party_imports().items()):
        dists = {_name(d) for d in providers.get(module, [module])}
        if not dists & closure:
            missing.append(f"{module} (imported by {', '.join(sorted(where)[:3])}): installed by {sorted(dists)}, "
                           "which hypviz[lab] does not install")
    assert not missing, "add these to an extra that lab includes (pyproject.toml):\n" + "\n".join(missing)


def test_the_closure_is_read_from_pyproject():
    """Without the search extra, the lab closure would miss faiss (the case the test exists for)."""
    assert "faiss-cpu" in lab_closure("search") and "faiss-cpu" in lab_closure()
    assert "faiss-cpu" not in lab_closure("docs")
