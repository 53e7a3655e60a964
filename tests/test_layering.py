"""The house's layering, checked: data flows one way (geometry -> attention -> plots -> cli).

Every module of ``hypviz`` belongs to one layer; at module level it may import only from its own
layer or a lower one (imports inside functions and ``TYPE_CHECKING`` blocks are how a lower layer
reaches up lazily, e.g. for a re-export, and are not counted), and the import graph has no cycle.
A new module must be given its layer here; CONTRIBUTING.md shows the same table.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hypviz"

LAYERS: dict[str, tuple[str, ...]] = {
    "base": ("_validate", "_messages", "bounds", "memory", "oracle", "derivation_report", "derivation", "plots.style"),
    "geometry": ("points", "lorentz", "display", "trees", "data", "symbolic_geometry", "symbolic_softmax", "symbolic"),
    "attention": ("attention", "random_features", "comparison", "block_stats", "streaming", "given_maps", "calibration", "top_keys", "accuracy"),
    "models": ("records", "verification", "layer_readers", "family_readers", "capture", "toymodel"),
    "plots": ("plots", "plots._common", "plots.scenes", "plots.curves", "plots.sweeps", "plots.manifold_mpl",
              "plots.manifold_plotly", "plots.manifold", "plots.attention", "plots.stills", "plots._explorable_parts",
              "plots.explorables"),
    "reports": ("inputs", "input_files", "publishing", "report_figures", "report", "model_report", "report_html"),
    "cli": ("cli",),
}
RANK = {m: i for i, mods in enumerate(LAYERS.values()) for m in mods}


def modules() -> dict[str, set[str]]:
    """Every module of the package and the hypviz modules it imports at module level."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        deps: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hypviz":
                base = node.module[len("hypviz."):] if node.module != "hypviz" else ""
                if base in ("", "plots"):
                    deps |= {f"{base}.{a.name}".lstrip(".") for a in node.names}
                else:
                    deps.add(base)
            elif isinstance(node, ast.Import):
                deps |= {a.name[len("hypviz."):] for a in node.names if a.name.startswith("hypviz.")}
        out[name] = deps
    return out


def test_every_module_has_a_layer():
    missing = sorted(m for m in modules() if m and m not in RANK)
    assert not missing, f"give these modules a layer in tests/test_layering.py and CONTRIBUTING.md: {missing}"


def test_imports_go_down_the_layers():
    up = [f"{m} ({layer(m)}) imports {d} ({layer(d)})"
          for m, deps in modules().items() if m for d in deps if d in RANK and RANK[d] > RANK[m]]
    assert not up, "imports against the data flow:\n" + "\n".join(up)


def layer(m: str) -> str:
    return list(LAYERS)[RANK[m]]


def test_the_import_graph_has_no_cycle():
    graph = {m: {d for d in deps if d in RANK} for m, deps in modules().items() if m}
    state: dict[str, int] = {}

    def visit(m: str, path: tuple[str, ...]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, f"import cycle: {' -> '.join(path + (m,))}"
        state[m] = 1
        for d in graph.get(m, ()):
            visit(d, path + (m,))
        state[m] = 2

    for m in graph:
        visit(m, ())


@pytest.mark.parametrize("module", ["hypviz.lorentz", "hypviz.symbolic", "hypviz.cli"])
def test_light_modules_stay_light(module):
    # lorentz needs only torch and numpy; symbolic only sympy (and mpmath); the CLI's --help nothing heavy
    heavy = {"hypviz.lorentz": ("matplotlib", "plotly", "sympy"), "hypviz.symbolic": ("torch", "matplotlib", "plotly"),
             "hypviz.cli": ("torch", "matplotlib", "plotly", "sympy")}[module]
    code = f"import sys, {module}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import {module} loads {out}"
