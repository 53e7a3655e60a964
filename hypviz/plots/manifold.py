r"""Pictures of hyperbolic space: the hyperboloid sheet, the Poincare disk and the Klein disk.

Every figure function takes points of the Lorentz model, shape ``(N, d + 1)`` (time coordinate first,
:math:`\langle x, x\rangle_L = -k`; any leading batch shape is flattened), as numpy arrays or
torch tensors, and returns a figure: a ``matplotlib.figure.Figure`` (``*_mpl``; made without
pyplot, so it is shown once when returned from a notebook cell and never leaks a global figure;
save it with ``fig.savefig``) or a ``plotly.graph_objects.Figure`` (``*_plotly``; its data
rounded to ``decimals`` places so stored notebook outputs compare exactly).

This module is where the figures are imported from; it computes nothing.  Each figure is a scene
(:mod:`hypviz.plots.scenes`, built once from the inputs: coordinates, colour values, labels) and two
renderers that only draw it, :mod:`hypviz.plots.manifold_mpl` and :mod:`hypviz.plots.manifold_plotly`.
Every matplotlib function takes ``ax=`` (or ``axes=`` for several panels) to draw into Axes made
elsewhere, so figures compose.

All geometry comes from :mod:`hypviz.lorentz` and :mod:`hypviz.lorentz.projections`:

* geodesic segments between ``points[i]`` and ``points[j]`` for each row ``(i, j)`` of ``edges``
  are sampled exactly by :func:`hypviz.lorentz.geodesic`, at constant speed,

  .. math::

      \gamma(t) = \frac{\sinh((1 - t)\theta)\,x + \sinh(t\theta)\,y}{\sinh\theta},
      \qquad \theta = \frac{d(x, y)}{\sqrt{k}},

  and then carried to each model with ``to_poincare``
  (:math:`p = \sqrt{k}\,x_s/(x_t + \sqrt{k})`) or ``to_klein`` (:math:`K = \sqrt{k}\,x_s/x_t`):
  arcs orthogonal to the boundary in the Poincare disk, straight chords in the Klein disk, curves
  on the sheet, never straight chords in :math:`\mathbb{R}^3`;
* the optional geodesic grid (:func:`hypviz.lorentz.projections.geodesic_grid`) is two families of geodesics
  perpendicular to the display axes at equal hyperbolic spacing (``expmap0`` for the feet, chords
  of the Klein disk mapped back with ``from_klein``);
* the sheet (:func:`hypviz.lorentz.projections.polar_sheet`) is ``expmap0`` of a polar grid of the tangent
  plane at the origin.

Attention on the manifold (:func:`attention_on_manifold_mpl`, :func:`attention_on_manifold_plotly`):
one query's edges to its strongest keys, width and opacity by weight, one disk per attention kind
side by side; the weights come from :func:`hypviz.attention.top_attention`, never computed here.

For :math:`d > 2` the points are shown through a documented projection, stated on every figure:
:func:`hypviz.lorentz.projections.project_for_display` (uncentred PCA of ``logmap0(x)`` in the tangent space at
the origin, keep 2 components, ``expmap0`` back).  Coordinates are never dropped silently;
:math:`d = 1` is refused.

Also importable from here, where they used to live: :class:`~hypviz.lorentz.projections.DisplayProjection` and
:func:`~hypviz.lorentz.projections.project_for_display` (from :mod:`hypviz.lorentz.projections`),
:class:`~hypviz.attention.TopKeys` and :func:`~hypviz.attention.top_attention` (from
:mod:`hypviz.attention`).
"""

from __future__ import annotations

from hypviz.attention import TopKeys
from hypviz.lorentz.projections import DisplayProjection, project_for_display
from hypviz.plots.manifold_mpl import (
    attention_on_manifold_mpl,
    disk_figure_mpl,
    hyperboloid_figure_mpl,
    klein_figure_mpl,
    poincare_figure_mpl,
    three_models_figure_mpl,
)
from hypviz.plots.manifold_plotly import (
    _rounded,  # noqa: F401 - hypviz.plots.explorables imports it from here
    attention_on_manifold_plotly,
    disk_figure_plotly,
    hyperboloid_figure_plotly,
    klein_figure_plotly,
    poincare_figure_plotly,
    three_models_figure_plotly,
)
from hypviz.plots.scenes import ATTENTION_TEXT as _ATTENTION_TEXT  # noqa: F401
from hypviz.attention.top_keys import top_attention

__all__ = [
    "DisplayProjection",
    "project_for_display",
    "hyperboloid_figure_plotly",
    "hyperboloid_figure_mpl",
    "disk_figure_mpl",
    "poincare_figure_mpl",
    "klein_figure_mpl",
    "disk_figure_plotly",
    "poincare_figure_plotly",
    "klein_figure_plotly",
    "three_models_figure_mpl",
    "three_models_figure_plotly",
    "TopKeys",
    "top_attention",
    "attention_on_manifold_mpl",
    "attention_on_manifold_plotly",
]
