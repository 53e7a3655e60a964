"""Figures (matplotlib and plotly): they take tensors or arrays and return figures.

``hypviz.plots`` never computes geometry itself; it calls :mod:`hypviz.lorentz`
and :mod:`hypviz.attention`.  Submodules, one per kind of picture:

``manifold``     the hyperboloid sheet, Poincare and Klein disks, geodesics
``curves``       numerical-error and bound curves for the derivation notebooks
``attention``    attention heatmaps, difference maps and comparison curves
``explorables``  interactive plotly figures with sliders that need no kernel, a PNG still beside each
"""

from __future__ import annotations

import importlib

_SUBMODULES = ("manifold", "curves", "attention", "explorables")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    for sub in _SUBMODULES:
        module = importlib.import_module(f"{__name__}.{sub}")
        if name in getattr(module, "__all__", ()):
            return getattr(module, name)
    raise AttributeError(f"module 'hypviz.plots' has no attribute {name!r}")
