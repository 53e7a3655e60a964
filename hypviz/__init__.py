"""hypviz: executable teaching and verification suite for Lorentz-model geometry.

Submodules (imported on first use, so ``import hypviz`` stays fast):

``lorentz``  points, inner products, distances, maps, projections (torch)
``symbolic`` the sympy derivations, as functions returning checked equations (no torch; re-exports from the six below)
``derivation`` the derivation framework: steps, their sympy checks, derivations (sympy only)
``derivation_report`` what verifying a derivation found: step results, reports (plain Python)
``symbolic_geometry`` the two-point derivations: identities 1-4 and 6, the thread's Taylor argument
``symbolic_softmax`` the softmax derivations: the per-key bias, identity 5, the KL identity, the bounds
``accuracy`` the derivations' numerical companions: the bounds on real rows, float32/float64 accuracy (torch)
``oracle``   mpmath references: the KL supremum, squared and geodesic distances at high precision
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

_SUBMODULES = (
    "lorentz",
    "symbolic",
    "derivation",
    "derivation_report",
    "symbolic_geometry",
    "symbolic_softmax",
    "accuracy",
    "oracle",
    "attention",
    "data",
    "capture",
    "plots",
    "report",
    "model_report",
    "cli",
)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'hypviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_SUBMODULES))
