"""The house's layering, checked: data flows one way (base -> lorentz -> data -> symbolic -> attention -> capture -> plots
-> reports -> cli).

Every module of ``hypviz`` belongs to the layer of its folder (:data:`LAYERS`, lowest first; CONTRIBUTING.md
shows the same table).  EVERY import counts: at module level, inside functions, under ``TYPE_CHECKING``, and
``importlib.import_module("hypviz...")`` with a literal name (an import whose name the test cannot read fails
by itself).  A module may import from its own layer or a lower one, never from a higher one; the graph of
modules has no cycle; a package's ``__init__`` (its face) may import its own submodules, and a submodule never
imports its own package's face.  Every public name the README and the notebooks import exists where they
import it from (read at run time, so a notebook edited later is checked as it is then).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hypviz"

#: The layers, lowest first: each is a tuple of the folders of ``hypviz/`` (or top-level modules) in it.
#: ``""`` is ``hypviz/__init__.py`` (its docstring: it imports nothing).
LAYERS: dict[str, tuple[str, ...]] = {
    "base": ("", "base"),                 # validation, messages, bounds, memory, oracle, the kind registry (no torch)
    "lorentz": ("lorentz",),              # the Lorentz model: points, distances, projections
    "data": ("data",),                    # point sets and trees on the hyperboloid
    "symbolic": ("symbolic",),            # sympy derivations: torch-free, on base only (NARROW)
    "attention.maps": ("attention.maps",),  # the maps and their kernels
    "attention.rooms": ("attention.comparison", "attention.approx"),  # two maps compared; distance attention approximated
    "attention": ("attention",),          # the face of the three rooms
    "capture": ("capture", "toymodel"),   # recorded layers; the toy model (torch only: NARROW)
    "plots": ("plots",),                  # figures
    "reports": ("reports",),              # analysis -> figures -> html
    "cli": ("cli",),                      # the command
}
#: Folders that may import less than every layer below theirs: the layers they may import.
NARROW: dict[str, tuple[str, ...]] = {"symbolic": ("base",), "toymodel": ()}
FOLDER_RANK = {f: i for i, folders in enumerate(LAYERS.values()) for f in folders}


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(m: str) -> bool:
    return MODULES[m].name == "__init__.py"


def _resolve(module: str, names: list[str]) -> set[str]:
    """The hypviz modules ``from hypviz.<module> import <names>`` depends on (names relative to hypviz)."""
    deps = set()
    for n in names:
        sub = f"{module}.{n}".lstrip(".")
        deps.add(sub if sub in MODULES else module)
    return deps


def edges() -> dict[str, dict[str, list[int]]]:
    """``{module: {imported module: [line, ...]}}`` over EVERY import of every module of ``hypviz``."""
    out: dict[str, dict[str, list[int]]] = {}
    for m, path in MODULES.items():
        deps: dict[str, list[int]] = {}
        pkg = m if _is_package(m) else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found: set[str] = set()
            if isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from . import x / from .x import y
                    base = pkg.split(".") if pkg else []
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                    found = _resolve(mod, [a.name for a in node.names])
                elif node.module and node.module.split(".")[0] == "hypviz":
                    found = _resolve(node.module[len("hypviz."):] if node.module != "hypviz" else "",
                                     [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                found = {a.name[len("hypviz."):] for a in node.names if a.name.startswith("hypviz.")}
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                    "import_module", "__import__"):
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    found = {"<a dynamic import the layering test cannot read>"}
                elif arg.value.startswith("hypviz."):
                    found = {arg.value[len("hypviz."):]}
            for d in found:
                if d != m:
                    deps.setdefault(d, []).append(cast("ast.stmt | ast.expr", node).lineno)  # an import or a call
        out[m] = deps
    return out


def rank(m: str) -> int | None:
    """The layer of module ``m``: its longest folder prefix in :data:`LAYERS` (``attention.maps.kernels`` is in
    ``attention.maps``)."""
    parts = m.split(".") if m else [""]
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in FOLDER_RANK:
            return FOLDER_RANK[".".join(parts[:i])]
    return None


def layer(m: str) -> str:
    r = rank(m)
    return "no layer" if r is None else list(LAYERS)[r]


def where(m: str, lines: list[int]) -> str:
    return f"{MODULES[m].relative_to(ROOT)}:{','.join(map(str, sorted(set(lines))))}"


def test_every_module_has_a_layer_and_every_import_names_a_module():
    missing = sorted(m or "hypviz" for m in MODULES if rank(m) is None)
    assert not missing, f"give these modules' folders a layer in tests/test_layering.py and CONTRIBUTING.md: {missing}"
    unknown = [f"{where(m, ls)} imports {d!r}, not a module of hypviz" for m, deps in edges().items()
               for d, ls in deps.items() if d not in MODULES]
    assert not unknown, "imports the layering test cannot place:\n" + "\n".join(unknown)


def test_imports_go_down_the_layers():
    up = [f"{where(m, ls)}: {m} ({layer(m)}) imports {d} ({layer(d)})"
          for m, deps in edges().items() for d, ls in deps.items()
          if d in MODULES and rank(d) > rank(m)]
    assert not up, "imports against the data flow (every import counts):\n" + "\n".join(sorted(up))


def test_the_narrow_folders_import_only_their_layers():
    wide = [f"{where(m, ls)}: {m} imports {d} ({layer(d)}); {m.split('.')[0]} may import only "
            f"{', '.join(NARROW[m.split('.')[0]]) or 'nothing of hypviz'}"
            for m, deps in edges().items() if m.split(".")[0] in NARROW for d, ls in deps.items()
            if d in MODULES and d.split(".")[0] != m.split(".")[0] and layer(d) not in NARROW[m.split(".")[0]]]
    assert not wide, "\n".join(wide)


def test_no_submodule_imports_its_own_package_face():
    back = [f"{where(m, ls)}: {m} imports its package's face {d or 'hypviz'}"
            for m, deps in edges().items() for d, ls in deps.items()
            if d in MODULES and _is_package(d) and not _is_package(m) and m.rpartition(".")[0] == d]
    assert not back, "a submodule imports its own package's __init__ (import the submodule instead):\n" + "\n".join(back)


def test_the_import_graph_has_no_cycle():
    graph = {m: {d for d in deps if d in MODULES} for m, deps in edges().items()}
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 2:
            return
        if state.get(m) == 1:
            cyc = path[path.index(m):] + [m]
            cycles.append(" -> ".join(f"{a} ({where(a, edges_[a][b])})" for a, b in zip(cyc, cyc[1:])) + f" -> {m}")
            return
        state[m] = 1
        for d in sorted(graph[m]):
            visit(d, path + [m])
        state[m] = 2

    edges_ = edges()
    for m in sorted(graph):
        visit(m, [])
    assert not cycles, "import cycles (every import counts):\n" + "\n".join(cycles)


def test_the_checker_sees_lazy_type_checking_relative_and_string_imports(tmp_path, monkeypatch):
    # the rules above are only as good as the edges: a module with each kind of import hidden in it
    fake = tmp_path / "hypviz"
    (fake / "base").mkdir(parents=True)
    (fake / "plots").mkdir()
    for p in ("__init__.py", "base/__init__.py", "plots/__init__.py", "plots/style.py"):
        (fake / p).write_text('"""x"""\n')
    (fake / "base" / "low.py").write_text(
        "from typing import TYPE_CHECKING\nimport importlib\n"
        "if TYPE_CHECKING:\n    from hypviz.plots import style\n"
        "def f():\n    from hypviz import plots\n    return importlib.import_module('hypviz.plots.style')\n"
        "def g(name):\n    return importlib.import_module(name)\n")
    (fake / "base" / "rel.py").write_text("def f():\n    from . import low\n    from .. import base\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "MODULES", {_name(p): p for p in sorted(fake.rglob("*.py"))})
    got = edges()
    assert got["base.low"] == {"plots.style": [4, 7], "plots": [6], "<a dynamic import the layering test cannot read>": [9]}
    assert got["base.rel"] == {"base.low": [2], "base": [3]}
    with pytest.raises(AssertionError, match=r"hypviz/base/low.py:4,7: base.low \(base\) imports plots.style \(plots\)"):
        test_imports_go_down_the_layers()
    with pytest.raises(AssertionError, match=r"hypviz/base/rel.py:3: base.rel imports its package's face base"):
        test_no_submodule_imports_its_own_package_face()
    with pytest.raises(AssertionError, match="cannot read"):
        test_every_module_has_a_layer_and_every_import_names_a_module()


# --------------------------------------------------------------------------- #
# what the README and the notebooks import exists where they import it from
# --------------------------------------------------------------------------- #
def _sources() -> list[tuple[str, str]]:
    """``(where, code)`` for the README's code blocks and every code cell of every notebook, read now."""
    out = []
    readme = ROOT / "README.md"
    block: list[str] | None = None
    for n, line in enumerate(readme.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            if block is None:
                block, start = [], n
            else:
                out.append((f"README.md:{start}", "\n".join(block)))
                block = None
        elif block is not None:
            block.append(line)
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] == "code":
                src = cell["source"]
                out.append((f"{nb.relative_to(ROOT)} (cell {i})", src if isinstance(src, str) else "".join(src)))
    return out


def public_imports() -> list[tuple[str, str, str | None]]:
    """``(where, module, name)`` for each hypviz import statement (``name`` None for ``import hypviz.x``)."""
    found: list[tuple[str, str, str | None]] = []
    for where_, code in _sources():
        for node in ast.walk(_parse(code)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hypviz":
                found += [(where_, node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                found += [(where_, a.name, None) for a in node.names if a.name.split(".")[0] == "hypviz"]
    return found


def _parse(code: str) -> ast.AST:
    """The code (IPython magics and shell lines dropped, ``>>>`` prompts removed); a block that is not Python
    (shell commands in the README) is read line by line, keeping the lines that are import statements."""
    lines = [line[4:] if line.startswith((">>> ", "... ")) else line for line in code.splitlines()]
    lines = ["" if line.lstrip().startswith(("%", "!", "$")) else line for line in lines]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        body = []
        for line in lines:
            if re.match(r"^\s*(from\s+hypviz[\w.]*\s+import\s+[\w, ]+|import\s+hypviz[\w., ]*(\s+as\s+\w+)?)\s*$", line):
                body += ast.parse(line.strip()).body
        return ast.Module(body=body, type_ignores=[])


def test_the_readme_and_the_notebooks_import_somewhere():
    found = public_imports()
    assert len({w for w, _, _ in found if w.startswith("notebooks")}) >= len(list((ROOT / "notebooks").glob("*.ipynb")))
    assert any(w.startswith("README") for w, _, _ in found)


def test_every_public_name_the_readme_and_the_notebooks_import_exists_where_they_import_it_from():
    missing = []
    for where_, module, name in public_imports():
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{where_}: import {module}: {exc}")
            continue
        if name is None or hasattr(mod, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except ImportError:
            missing.append(f"{where_}: from {module} import {name}: {module} has no {name!r}")
    assert not missing, "names the README and the notebooks import that do not exist there:\n" + "\n".join(
        sorted(set(missing)))


@pytest.mark.parametrize("module", ["hypviz.lorentz", "hypviz.symbolic", "hypviz.cli", "hypviz.base.kinds"])
def test_light_modules_stay_light(module):
    # lorentz needs only torch and numpy; symbolic only sympy (and mpmath); the CLI's --help and the registry nothing heavy
    heavy = {"hypviz.lorentz": ("matplotlib", "plotly", "sympy"), "hypviz.symbolic": ("torch", "matplotlib", "plotly"),
             "hypviz.cli": ("torch", "matplotlib", "plotly", "sympy"),
             "hypviz.base.kinds": ("torch", "numpy", "matplotlib", "plotly", "sympy")}[module]
    code = f"import sys, {module}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import {module} loads {out}"


#: Rooms of one layer that never import each other: each builds on the layers below only.
SIBLINGS: tuple[tuple[str, str], ...] = (("attention.comparison", "attention.approx"),)


def test_sibling_rooms_never_import_each_other():
    def room(m: str) -> str | None:
        return next((r for pair in SIBLINGS for r in pair if m == r or m.startswith(r + ".")), None)

    across = [f"{where(m, ls)}: {m} imports {d}" for m, deps in edges().items() for d, ls in deps.items()
              if room(m) and room(d) and room(m) != room(d)
              and any({room(m), room(d)} == set(pair) for pair in SIBLINGS)]
    assert not across, "rooms of one layer import each other (move the shared part down a layer):\n" + "\n".join(across)
