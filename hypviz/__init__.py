"""hypviz: executable teaching and verification suite for Lorentz-model geometry.

Submodules (imported on first use, so ``import hypviz`` stays fast), by layer, lowest first
(data flows one way: geometry -> attention -> plots -> cli):

geometry
    ``lorentz``  points, inner products, distances, maps between the models (torch); input checked by ``points``
    ``display``  projections of point sets for pictures (PCA of the tangent vectors at the origin)
    ``data``     point sets: near-origin Gaussians, Hypformer-like Q/K; ``trees``: tree embeddings
    ``symbolic`` the sympy derivations, as functions returning checked equations (no torch), built
    on ``derivation`` / ``derivation_report`` (the step checker) from ``symbolic_geometry`` and
    ``symbolic_softmax``; ``oracle``: mpmath references
attention
    ``attention`` score kinds, softmax / focused-linear maps; ``compare`` (``streaming``) and its
    result ``Comparison`` (``comparison``), the bounds (``bounds``), importable from here
    ``top_keys``  each query's strongest keys under one kind
    ``accuracy``  the derivations' numerical companions: the bounds on real rows, float accuracy
models
    ``capture``  forward hooks that record a model's attention layers; ``records``: ``LayerRecord``
    and its file; ``toymodel``: a small Hypformer-structured model
plots
    ``plots``    matplotlib and plotly figures (scenes drawn by two renderers; style in ``plots.style``)
reports and the command
    ``report``   the HTML / JSON attention report behind ``hypviz compare``; ``model_report``: the
    whole-model report behind ``hypviz compare CAPTURE.pt``; ``inputs``: the command's checked points
    and settings
    ``cli``      the ``hypviz`` command
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "lorentz",
    "display",
    "data",
    "trees",
    "symbolic",
    "derivation",
    "derivation_report",
    "symbolic_geometry",
    "symbolic_softmax",
    "oracle",
    "attention",
    "comparison",
    "streaming",
    "bounds",
    "top_keys",
    "accuracy",
    "records",
    "capture",
    "toymodel",
    "plots",
    "inputs",
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
