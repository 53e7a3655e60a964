"""hypviz: executable teaching and verification suite for Lorentz-model geometry.

Submodules (imported on first use, so ``import hypviz`` stays fast):

``lorentz``  points, inner products, distances, maps, projections (torch)
``symbolic`` the sympy derivations, as functions returning checked equations
``attention`` score kinds, softmax / focused-linear maps, streaming comparison
``data``     point sets: near-origin Gaussians, tree embeddings, Hypformer-like Q/K
``capture``  forward hooks that record a model's attention layers (queries, keys, values, k, mode)
``plots``    matplotlib and plotly figures
``report``   the HTML / JSON attention report behind ``hypviz compare``
``model_report``  the whole-model report behind ``hypviz compare CAPTURE.pt``
``cli``      the ``hypviz`` command
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = ("lorentz", "symbolic", "attention", "data", "capture", "plots", "report", "model_report", "cli")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'hypviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_SUBMODULES))
