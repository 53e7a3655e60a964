r"""Points of the Lorentz model (hyperboloid) and their geometry.

Conventions (the same as geoopt and Hypformer's code): a point is :math:`x = (x_t, x_s)`,
time coordinate **first**, shape ``(..., d + 1)``; the curvature parameter is :math:`k > 0`,

.. math::

    \langle x, y\rangle_L = -x_t y_t + x_s \cdot y_s, \qquad
    \langle x, x\rangle_L = -k, \quad x_t > 0,

with sectional curvature :math:`-1/k` and origin :math:`(\sqrt{k}, 0, \dots, 0)`.

Every function accepts numpy arrays or torch tensors (float32 or float64, any leading batch
shape, any device) and returns torch tensors of the same dtype and device; input is checked by
:func:`as_tensor`, :func:`check_k` and :func:`check_points`.

The package holds the checks (:mod:`hypviz.lorentz.points`), the geometry
(:mod:`hypviz.lorentz.hyperboloid`) and the projections for pictures (:mod:`hypviz.lorentz.projections`);
every public name is importable from here.
"""

from hypviz.lorentz.hyperboloid import (
    dist,
    distance_operands,
    expmap0,
    from_klein,
    from_poincare,
    geodesic,
    inner,
    lift,
    logmap0,
    origin,
    pairwise_inner,
    pairwise_sqdist,
    sqdist,
    to_klein,
    to_poincare,
)
from hypviz.lorentz.points import as_tensor, check_k, check_points
from hypviz.lorentz.projections import (
    GRID_MAX_REACH,
    DisplayProjection,
    disk_boundary,
    geodesic_grid,
    poincare_polar_grid,
    polar_sheet,
    project_for_display,
)

__all__ = [
    "as_tensor",
    "check_k",
    "check_points",
    "lift",
    "inner",
    "sqdist",
    "dist",
    "pairwise_inner",
    "pairwise_sqdist",
    "distance_operands",
    "expmap0",
    "logmap0",
    "to_poincare",
    "from_poincare",
    "to_klein",
    "from_klein",
    "origin",
    "geodesic",
    "DisplayProjection",
    "project_for_display",
    "GRID_MAX_REACH",
    "geodesic_grid",
    "polar_sheet",
    "poincare_polar_grid",
    "disk_boundary",
]
