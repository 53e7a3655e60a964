r"""Geometry prepared for pictures: a display projection to the hyperbolic plane, geodesic grids, the sheet.

Everything :mod:`hypviz.plots` draws that is not a point given to it is computed here, from
:mod:`hypviz.lorentz` only (nothing else of hypviz is imported): the plots build their scenes from
these functions and never compute geometry themselves.  Points are :math:`x = (x_t, x_s)`, time
first, on :math:`\langle x, x\rangle_L = -k`, origin :math:`o = (\sqrt{k}, 0, \dots, 0)`.

* :func:`project_for_display`: points of a :math:`d`-dimensional hyperboloid brought to the 2-D one
  by an uncentred PCA of :math:`\log_o(x)` (:class:`DisplayProjection` carries more points through
  the same map);
* :func:`geodesic_grid`: two families of geodesics of the hyperbolic plane, perpendicular to the
  display axes at equal hyperbolic spacing;
* :func:`polar_sheet`: the sheet itself, :math:`\exp_o` of a polar grid of the tangent plane;
* :func:`poincare_polar_grid`: a polar grid of the Poincare disk, evenly spaced in geodesic distance;
* :func:`disk_boundary`: the circle of ideal points of the Poincare and Klein disks.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from hypviz.base import validate
from hypviz.lorentz import hyperboloid as L
from hypviz.lorentz.points import check_k, check_points

__all__ = [
    "DisplayProjection",
    "project_for_display",
    "GRID_MAX_REACH",
    "geodesic_grid",
    "polar_sheet",
    "poincare_polar_grid",
    "disk_boundary",
]

ArrayLike = Any

#: No grid line runs farther than ``GRID_MAX_REACH * sqrt(k)`` from the origin: beyond it the Klein
#: radius :math:`\sqrt{k}\tanh(12) = (1 - 8\cdot 10^{-11})\sqrt{k}` rounds to the boundary in float64.
GRID_MAX_REACH = 12.0


# --------------------------------------------------------------------------- #
# the display projection
# --------------------------------------------------------------------------- #
class DisplayProjection(NamedTuple):
    r"""Points brought to the 2-D hyperbolic plane for display (the result of :func:`project_for_display`).

    A named tuple: each parameter is the field of the same name.

    Parameters
    ----------
    points : torch.Tensor, shape (N, 3)
        The projected points, on :math:`\langle x, x\rangle_L = -k`.
    basis : torch.Tensor, shape (d, 2), or None
        :math:`B`, orthonormal directions in the tangent space at the origin (``None`` when
        :math:`d = 2`: nothing projected).
    kept : float
        The fraction of :math:`\sum_i \|\log_o(x_i)\|^2` kept.
    note : str
        The sentence stated on the figure (empty when :math:`d = 2`).

    Examples
    --------
    >>> from hypviz.lorentz import lift, project_for_display
    >>> proj = project_for_display(lift([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], k=1.0), k=1.0)
    >>> proj.points.shape, proj.basis.shape, round(proj.kept, 6)
    (torch.Size([2, 3]), torch.Size([3, 2]), 1.0)
    >>> proj.apply(lift([[0.0, 0.0, 3.0]], k=1.0), k=1.0).round(decimals=6).abs().tolist()   # orthogonal to the plane kept
    [[1.0, 0.0, 0.0]]
    """

    points: torch.Tensor
    basis: torch.Tensor | None
    kept: float
    note: str

    def apply(self, x: torch.Tensor, *, k: float) -> torch.Tensor:
        r"""Carry more points of the same space (e.g. geodesic samples) through the same projection.

        .. math::

            x \mapsto \exp_o\bigl((0,\; \log_o(x)_s\, B)\bigr)

        (``x`` unchanged when ``basis`` is ``None``).
        """
        if self.basis is None:
            return x
        u = L.logmap0(x, k=k)[..., 1:] @ self.basis.to(x.dtype)
        return L.expmap0(torch.nn.functional.pad(u, (1, 0)), k=k)


def project_for_display(points: ArrayLike, *, k: float = 1.0) -> DisplayProjection:
    r"""Bring points of a ``d``-dimensional hyperboloid to the 2-D one for display.

    :math:`d = 2`: returned unchanged.  :math:`d > 2`: with :math:`U` the ``(N, d)`` matrix of the
    tangent vectors :math:`u_s = \log_o(x)_s` at the origin and its singular value decomposition
    :math:`U = W \Sigma V^\top`, the basis :math:`B` is the two leading right singular vectors
    (uncentred PCA, so the origin stays the centre; the largest-magnitude entry of each column made positive), and

    .. math::

        x' = \exp_o\bigl((0,\; u_s B)\bigr), \qquad
        \mathrm{kept} = \frac{\sigma_1^2 + \sigma_2^2}{\sum_i \sigma_i^2}.

    Distances from the origin are kept for points in the kept plane and shrink otherwise; other
    distances are not kept.  The returned ``note`` says so and is written on every figure.
    ``points`` are ``(..., d + 1)``; the result's ``points`` ``(N, 3)``.

    Parameters
    ----------
    points : array or tensor, shape (..., d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first,
        :math:`d \ge 2`; the batch axes are flattened to ``N`` rows.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    DisplayProjection
        ``points`` ``(N, 3)``, ``basis``, ``kept`` and ``note``; for :math:`d = 2` the points unchanged,
        ``basis=None``, ``kept=1.0`` and ``note=""``.

    Raises
    ------
    ValueError
        For :math:`d < 2` or points off the hyperboloid.

    Examples
    --------
    >>> from hypviz.lorentz import lift, project_for_display
    >>> proj = project_for_display(lift([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 1.0, 0.0]], k=1.0), k=1.0)
    >>> proj.points.shape
    torch.Size([3, 3])
    >>> proj.note
    'display projection: d=3 -> 2 by PCA of logmap0(x) at the origin, 100.0% of tangent variance kept, expmap0 back'
    """
    kf = check_k(k)
    x = check_points(points, k=kf, name="points")
    x = x.reshape(-1, x.shape[-1])
    d = x.shape[-1] - 1
    if d < 2:
        raise ValueError(
            f"points: expected a hyperboloid of dimension d >= 2, shape (N, d + 1) with d + 1 >= 3, "
            f"got shape {tuple(x.shape)}"
        )
    if d == 2:
        return DisplayProjection(x, None, 1.0, "")
    us = L.logmap0(x, k=kf)[:, 1:]
    _, s, vh = torch.linalg.svd(us, full_matrices=False)
    basis = vh[:2].T.clone()  # (d, 2)
    for j in range(2):  # deterministic sign: the largest entry of each direction is positive
        col = basis[:, j]
        if float(col[int(torch.argmax(col.abs()))]) < 0:
            basis[:, j] = -col
    total = float((s * s).sum())
    kept = float((s[:2] * s[:2]).sum()) / total if total > 0 else 1.0
    note = (
        f"display projection: d={d} -> 2 by PCA of logmap0(x) at the origin, "
        f"{100 * kept:.1f}% of tangent variance kept, expmap0 back"
    )
    proj = L.expmap0(torch.nn.functional.pad(us @ basis, (1, 0)), k=kf)
    return DisplayProjection(proj, basis, kept, note)


# --------------------------------------------------------------------------- #
# grids of the hyperbolic plane (d = 2)
# --------------------------------------------------------------------------- #
def _axis_point(axis: int, distance: float, k: float, dtype: torch.dtype) -> torch.Tensor:
    """The point of the plane at signed hyperbolic ``distance`` from the origin along spatial ``axis``."""
    u = torch.zeros(3, dtype=dtype)
    u[1 + axis] = distance
    return L.expmap0(u, k=k)


def geodesic_grid(
    *,
    k: float,
    radius: float,
    spacing: float,
    n: int = 48,
    reach: float | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    r"""A geodesic grid of the hyperbolic plane, shape ``(lines, n, 3)``.

    For each signed distance :math:`a = j\,\mathrm{spacing}` with :math:`|a| <` ``radius`` and each
    display axis, the geodesic perpendicular to that axis through the point at distance :math:`a`
    from the origin, cut where it leaves the disk of hyperbolic radius ``reach`` (default ``radius``;
    at least ``radius``, at most :data:`GRID_MAX_REACH` :math:`\sqrt{k}`).  In the Klein disk such a
    geodesic is the chord :math:`K_{\mathrm{axis}} = c` with

    .. math::

        c = \sqrt{k}\,\tanh\frac{a}{\sqrt{k}}, \qquad
        \text{ends at } K_{\perp} = \pm\sqrt{\rho^2 - c^2}, \quad \rho = \sqrt{k}\,\tanh\frac{\mathrm{reach}}{\sqrt{k}},

    (:func:`hypviz.lorentz.to_klein` of :func:`hypviz.lorentz.expmap0`); its ends go back to the
    hyperboloid with :func:`hypviz.lorentz.from_klein` and are joined by ``n`` samples of the exact
    :func:`hypviz.lorentz.geodesic`.  Lines shorter than rounding are left out; no line: shape
    ``(0, n, 3)``.

    Parameters
    ----------
    k : float
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    radius : float
        The lines are at signed distances :math:`|a| <` ``radius`` from the origin, :math:`> 0`.
    spacing : float
        Hyperbolic distance between neighbouring parallel lines, :math:`> 0`.
    n : int, default 48
        Samples along each line, :math:`\ge 2`.
    reach : float, optional
        Hyperbolic radius at which the lines are cut; default ``radius``.
    dtype : torch.dtype, default torch.float64
        Dtype of the result.

    Raises
    ------
    ValueError
        When ``radius``, ``spacing`` or ``reach`` is not a positive finite number, ``n`` is not an integer
        :math:`\ge 2`, or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import geodesic_grid
    >>> grid = geodesic_grid(k=1.0, radius=1.0, spacing=0.5, n=8)    # a = -0.5, 0, 0.5 on each axis
    >>> grid.shape
    torch.Size([6, 8, 3])
    """
    kf = check_k(k)
    root_k = math.sqrt(kf)
    radius, spacing = validate.positive(radius, "radius"), validate.positive(spacing, "spacing")
    n = validate.integer(n, "n", 2, " (samples along each line)")
    reach = radius if reach is None else max(validate.positive(reach, "reach"), radius)
    reach = min(reach, GRID_MAX_REACH * root_k)
    rho = float(L.to_klein(_axis_point(0, reach, kf, dtype), k=kf)[0])  # Klein radius of the cut
    m = int(math.floor(radius / spacing - 1e-9))
    ends_a, ends_b = [], []
    for j in range(-m, m + 1):
        c = float(L.to_klein(_axis_point(0, j * spacing, kf, dtype), k=kf)[0])
        h = math.sqrt(max(rho * rho - c * c, 0.0))
        if h <= 1e-9 * root_k:
            continue
        for axis in (0, 1):
            ends_a.append([c, -h] if axis == 0 else [-h, c])
            ends_b.append([c, h] if axis == 0 else [h, c])
    if not ends_a:
        return torch.zeros(0, n, 3, dtype=dtype)
    xa = L.from_klein(torch.tensor(ends_a, dtype=dtype), k=kf)
    xb = L.from_klein(torch.tensor(ends_b, dtype=dtype), k=kf)
    return L.geodesic(xa, xb, n, k=kf)


def polar_sheet(
    *,
    k: float, radius: float, n_radial: int, n_angle: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    r"""The 2-D sheet up to hyperbolic ``radius``, shape ``(n_radial, n_angle, 3)``.

    .. math::

        x_{ij} = \exp_o\bigl((0,\; r_i\cos\varphi_j,\; r_i\sin\varphi_j)\bigr), \qquad
        r_i \in [0, \mathrm{radius}], \quad \varphi_j \in [0, 2\pi],

    both evenly spaced (``n_radial`` and ``n_angle`` values, ends included).

    Parameters
    ----------
    k : float
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    radius : float
        Largest hyperbolic distance from the origin, :math:`> 0`.
    n_radial, n_angle : int
        Numbers of radii and of angles, each :math:`\ge 1`.
    dtype : torch.dtype, default torch.float64
        Dtype of the result.

    Raises
    ------
    ValueError
        When ``radius`` is not a positive finite number, ``n_radial`` or ``n_angle`` is not an integer
        :math:`\ge 1`, or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import inner, polar_sheet
    >>> sheet = polar_sheet(k=1.0, radius=2.0, n_radial=3, n_angle=5)
    >>> sheet.shape
    torch.Size([3, 5, 3])
    >>> bool(inner(sheet, sheet).add(1.0).abs().max() < 1e-12)
    True
    """
    kf = check_k(k)
    radius = validate.positive(radius, "radius")
    r = torch.linspace(0.0, radius, validate.integer(n_radial, "n_radial", 1), dtype=dtype)
    phi = torch.linspace(0.0, 2.0 * math.pi, validate.integer(n_angle, "n_angle", 1), dtype=dtype)
    rr, pp = torch.meshgrid(r, phi, indexing="ij")
    u = torch.stack([torch.zeros_like(rr), rr * torch.cos(pp), rr * torch.sin(pp)], dim=-1)
    return L.expmap0(u, k=kf)


def poincare_polar_grid(
    *,
    k: float, n_radial: int, n_angle: int, edge: float, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""A polar grid of the Poincare disk of radius :math:`\sqrt{k}`, evenly spaced in geodesic distance.

    .. math::

        p_{ij} = \sqrt{k}\,\tanh\frac{\rho_i}{2}\,(\cos\varphi_j, \sin\varphi_j), \qquad
        \rho_i \in [0,\, 2\,\operatorname{artanh}(\mathrm{edge})], \quad \varphi_j \in [0, 2\pi],

    :math:`\rho_i` (the distance from the origin in units of :math:`\sqrt{k}`) and :math:`\varphi_j`
    evenly spaced, so the grid stays fine where fields steepen near the boundary; ``edge`` in
    :math:`(0, 1)` is the outermost radius as a fraction of :math:`\sqrt{k}`.

    Parameters
    ----------
    k : float
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    n_radial, n_angle : int
        Numbers of radii and of angles, each :math:`\ge 1`.
    edge : float
        Outermost radius as a fraction of :math:`\sqrt{k}`, in :math:`(0, 1)`.
    dtype : torch.dtype, default torch.float64
        Dtype of the result.

    Returns
    -------
    tuple of torch.Tensor
        ``(px, py, points)``: the disk coordinates, each ``(n_radial, n_angle)``, and the grid
        lifted to the hyperboloid by :func:`hypviz.lorentz.from_poincare`, ``(n_radial * n_angle, 3)``.

    Raises
    ------
    ValueError
        When ``edge`` is not in :math:`(0, 1)`, ``n_radial`` or ``n_angle`` is not an integer :math:`\ge 1`,
        or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import poincare_polar_grid
    >>> px, py, points = poincare_polar_grid(k=1.0, n_radial=3, n_angle=4, edge=0.9)
    >>> px.shape, points.shape
    (torch.Size([3, 4]), torch.Size([12, 3]))
    >>> round(float((px**2 + py**2).sqrt().max()), 6)    # edge * sqrt(k)
    0.9
    """
    kf = check_k(k)
    fraction = validate.number(edge, "edge", hint=" (a fraction of the disk radius in (0, 1))")
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"edge must be a fraction of the disk radius in (0, 1), got {edge!r}")
    root_k = math.sqrt(kf)
    rho = torch.linspace(0.0, 2.0 * math.atanh(fraction), validate.integer(n_radial, "n_radial", 1), dtype=dtype)
    rad = root_k * torch.tanh(rho / 2.0)
    ang = torch.linspace(0.0, 2.0 * math.pi, validate.integer(n_angle, "n_angle", 1), dtype=dtype)
    px, py = rad[:, None] * torch.cos(ang)[None, :], rad[:, None] * torch.sin(ang)[None, :]
    points = L.from_poincare(torch.stack([px, py], dim=-1).reshape(-1, 2), k=kf)
    return px, py, points


def disk_boundary(*, k: float, n: int = 121) -> np.ndarray:
    r"""``n`` points of the boundary circle of the Poincare and Klein disks (the ideal points), shape ``(n, 2)``.

    .. math::

        \bigl(\sqrt{k}\cos\varphi_j,\; \sqrt{k}\sin\varphi_j\bigr), \qquad
        \varphi_j = \frac{2\pi j}{n - 1}, \quad j = 0, \dots, n - 1

    (closed: the last point is the first).  A numpy array, since it is only ever drawn.

    Parameters
    ----------
    k : float
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    n : int, default 121
        Number of points, :math:`\ge 2`.

    Examples
    --------
    >>> import numpy as np
    >>> from hypviz.lorentz import disk_boundary
    >>> ring = disk_boundary(k=4.0, n=5)
    >>> ring.shape, bool(np.allclose(np.hypot(ring[:, 0], ring[:, 1]), 2.0))
    ((5, 2), True)
    """
    root_k = math.sqrt(check_k(k))
    angle = np.linspace(0.0, 2.0 * np.pi, validate.integer(n, "n", 2, " (points of the closed circle)"))
    return np.stack([root_k * np.cos(angle), root_k * np.sin(angle)], axis=-1)
