r"""Pictures of hyperbolic space: the hyperboloid sheet, the Poincare disk and the Klein disk.

Every function takes points of the Lorentz model, shape ``(N, d + 1)`` (time coordinate first,
:math:`\langle x, x\rangle_L = -k`; any leading batch shape is flattened), as numpy arrays or
torch tensors, and returns a figure: a ``matplotlib.figure.Figure`` (``*_mpl``; made without
pyplot, so it is shown once when returned from a notebook cell and never leaks a global figure;
save it with ``fig.savefig``) or a ``plotly.graph_objects.Figure`` (``*_plotly``; its data
rounded to ``decimals`` places so stored notebook outputs compare exactly).

All geometry comes from :mod:`hypviz.lorentz`:

* geodesic segments between ``points[i]`` and ``points[j]`` for each row ``(i, j)`` of ``edges``
  are sampled exactly by :func:`hypviz.lorentz.geodesic`, at constant speed,

  .. math::

      \gamma(t) = \frac{\sinh((1 - t)\theta)\,x + \sinh(t\theta)\,y}{\sinh\theta},
      \qquad \theta = \frac{d(x, y)}{\sqrt{k}},

  and then carried to each model with ``to_poincare``
  (:math:`p = \sqrt{k}\,x_s/(x_t + \sqrt{k})`) or ``to_klein`` (:math:`K = \sqrt{k}\,x_s/x_t`):
  arcs orthogonal to the boundary in the Poincare disk, straight chords in the Klein disk, curves
  on the sheet, never straight chords in :math:`\mathbb{R}^3`;
* the optional geodesic grid is two families of geodesics perpendicular to the display axes at
  equal hyperbolic spacing (``expmap0`` for the feet, chords of the Klein disk mapped back with
  ``from_klein``);
* the sheet is ``expmap0`` of a polar grid of the tangent plane at the origin.

Attention on the manifold (:func:`attention_on_manifold_mpl`): one query's edges to its strongest
keys, width and opacity by weight, one disk per attention kind side by side; the weights come
from :mod:`hypviz.attention` through :func:`top_attention`, never computed here.

For :math:`d > 2` the points are shown through a documented projection, stated on every figure:
:func:`project_for_display` (uncentred PCA of ``logmap0(x)`` in the tangent space at the origin,
keep 2 components, ``expmap0`` back).  Coordinates are never dropped silently; :math:`d = 1` is
refused.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

from hypviz import lorentz as L
from hypviz.attention import KINDS as _ATTENTION_KINDS
import hypviz.plots.style as style

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
]

ArrayLike = Any

# Okabe-Ito colours (colour-blind safe) for the fixed elements; viridis for values.
_ORIGIN_COLOUR = style.BLACK
_GRID_COLOUR = "#999999"
_SHEET_COLOUR = "#BBBBBB"
_DEFAULT_CMAP = style.SEQUENTIAL
_PLOTLY_SCALES = {"viridis": "Viridis", "cividis": "Cividis", "plasma": "Plasma", "inferno": "Inferno",
                  "magma": "Magma", "rdbu_r": "RdBu_r"}

_MODELS = ("poincare", "klein")
# grid lines in the disks run on to hyperbolic radius 6 sqrt(k): |p| = tanh(3) sqrt(k) ~ 0.995 sqrt(k)
_DISK_REACH = 6.0
# no grid line runs farther than 12 sqrt(k) from the origin: |K| = tanh(12) sqrt(k) = (1 - 8e-11) sqrt(k)
_GRID_MAX_REACH = 12.0


# --------------------------------------------------------------------------- #
# geometry helpers: only hypviz.lorentz calls and torch arithmetic
# --------------------------------------------------------------------------- #
def _axis_point(d: int, axis: int, distance: float, k: float, dtype: torch.dtype) -> torch.Tensor:
    """The point at signed hyperbolic ``distance`` from the origin along spatial ``axis`` (``expmap0``)."""
    u = torch.zeros(d + 1, dtype=dtype)
    u[1 + axis] = distance
    return L.expmap0(u, k)


def _grid_geodesics(k: float, radius: float, spacing: float, n: int, dtype: torch.dtype,
                    reach: float | None = None) -> torch.Tensor:
    """Geodesic grid of the 2-D hyperbolic plane, shape ``(lines, n, 3)``.

    For each signed distance ``a = j * spacing`` (``|a| < radius``) and each axis, the geodesic
    perpendicular to that axis through the point at distance ``a`` from the origin, cut where
    it leaves the disk of hyperbolic radius ``reach`` (default ``radius``; at most ``_GRID_MAX_REACH sqrt(k)``,
    beyond which the Klein radius ``sqrt(k) tanh(reach / sqrt(k))`` rounds to the boundary in float64 and
    the lines would be drawn on it anyway).  In the Klein disk these are the chords
    ``K_axis = const`` (a geodesic perpendicular to a diameter is a chord perpendicular to it);
    their ends go back to the hyperboloid with ``from_klein`` and are joined by exact geodesics.
    """
    root_k = math.sqrt(k)
    reach = radius if reach is None else max(float(reach), radius)
    reach = min(reach, _GRID_MAX_REACH * root_k)
    rho = float(L.to_klein(_axis_point(2, 0, reach, k, dtype), k)[0])  # Klein radius of the cut
    m = int(math.floor(radius / spacing - 1e-9))
    ends_a, ends_b = [], []
    for j in range(-m, m + 1):
        c = float(L.to_klein(_axis_point(2, 0, j * spacing, k, dtype), k)[0])
        h = math.sqrt(max(rho * rho - c * c, 0.0))
        if h <= 1e-9 * root_k:
            continue
        for axis in (0, 1):
            e1 = [c, -h] if axis == 0 else [-h, c]
            e2 = [c, h] if axis == 0 else [h, c]
            ends_a.append(e1)
            ends_b.append(e2)
    if not ends_a:
        return torch.zeros(0, n, 3, dtype=dtype)
    xa = L.from_klein(torch.tensor(ends_a, dtype=dtype), k)
    xb = L.from_klein(torch.tensor(ends_b, dtype=dtype), k)
    return L.geodesic(xa, xb, n, k)


def _sheet(k: float, radius: float, n_radial: int, n_angle: int, dtype: torch.dtype) -> torch.Tensor:
    """The 2-D sheet up to hyperbolic ``radius``: ``expmap0`` of a polar grid, shape ``(n_radial, n_angle, 3)``."""
    r = torch.linspace(0.0, radius, n_radial, dtype=dtype)
    phi = torch.linspace(0.0, 2.0 * math.pi, n_angle, dtype=dtype)
    rr, pp = torch.meshgrid(r, phi, indexing="ij")
    u = torch.stack([torch.zeros_like(rr), rr * torch.cos(pp), rr * torch.sin(pp)], dim=-1)
    return L.expmap0(u, k)


class DisplayProjection(NamedTuple):
    r"""Points brought to the 2-D hyperbolic plane for display (the result of :func:`project_for_display`).

    ``points``: ``(N, 3)`` on :math:`\langle x, x\rangle_L = -k`; ``basis``: :math:`B`, ``(d, 2)``
    orthonormal directions in the tangent space at the origin (``None`` when :math:`d = 2`: nothing
    projected); ``kept``: the fraction of :math:`\sum_i \|\log_o(x_i)\|^2` kept; ``note``: the
    sentence stated on the figure (empty when :math:`d = 2`).
    """

    points: torch.Tensor
    basis: torch.Tensor | None
    kept: float
    note: str

    def apply(self, x: torch.Tensor, k: float) -> torch.Tensor:
        r"""Carry more points of the same space (e.g. geodesic samples) through the same projection.

        .. math::

            x \mapsto \exp_o\bigl((0,\; \log_o(x)_s\, B)\bigr)

        (``x`` unchanged when ``basis`` is ``None``).
        """
        if self.basis is None:
            return x
        u = L.logmap0(x, k)[..., 1:] @ self.basis.to(x.dtype)
        return L.expmap0(torch.nn.functional.pad(u, (1, 0)), k)


def project_for_display(points: ArrayLike, k: float = 1.0) -> DisplayProjection:
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

    Raises
    ------
    ValueError
        For :math:`d < 2` or points off the hyperboloid.
    """
    kf = L.check_k(k)
    x = L.check_points(points, kf, name="points")
    x = x.reshape(-1, x.shape[-1])
    d = x.shape[-1] - 1
    if d < 2:
        raise ValueError(
            f"points: expected a hyperboloid of dimension d >= 2, shape (N, d + 1) with d + 1 >= 3, "
            f"got shape {tuple(x.shape)}"
        )
    if d == 2:
        return DisplayProjection(x, None, 1.0, "")
    us = L.logmap0(x, kf)[:, 1:]
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
    proj = L.expmap0(torch.nn.functional.pad(us @ basis, (1, 0)), kf)
    return DisplayProjection(proj, basis, kept, note)


# --------------------------------------------------------------------------- #
# input handling and the scene shared by all figures
# --------------------------------------------------------------------------- #
class _Scene(NamedTuple):
    k: float
    x: torch.Tensor  # (N, 3) display points on the hyperboloid
    values: np.ndarray | None
    edges: torch.Tensor  # (E, n, 3) geodesic samples, display space
    grid: torch.Tensor  # (G, n, 3) grid geodesics, cut at ``radius`` (for the sheet)
    grid_disk: torch.Tensor  # (G, n, 3) the same geodesics run on to near the disk boundary
    radius: float  # hyperbolic radius of the drawn region
    note: str
    labels: list[str]


def _prepare(
    points: ArrayLike,
    k: float,
    values: ArrayLike | None,
    edges: ArrayLike | None,
    grid: bool,
    radius: float | None,
    n_geodesic: int,
    labels: Sequence[str] | None,
) -> _Scene:
    kf = L.check_k(k)
    x_full = L.check_points(points, kf, name="points")
    x_full = x_full.reshape(-1, x_full.shape[-1]).detach().cpu().to(torch.float64)
    n_points = x_full.shape[0]
    proj = project_for_display(x_full, kf)
    vals = None
    if values is not None:
        vals = np.asarray(L.as_tensor(values, "values").detach().cpu().to(torch.float64).reshape(-1))
        if vals.shape[0] != n_points:
            raise ValueError(f"values: expected one value per point ({n_points}), got {vals.shape[0]}")
    e = np.zeros((0, 2), dtype=np.int64) if edges is None else np.asarray(edges)
    if e.size == 0:
        e = np.zeros((0, 2), dtype=np.int64)
    if e.ndim != 2 or e.shape[1] != 2 or not np.issubdtype(e.dtype, np.integer):
        raise ValueError(f"edges: expected integer index pairs of shape (E, 2), got {e.dtype} of shape {e.shape}")
    if e.size and (e.min() < 0 or e.max() >= n_points):
        raise ValueError(f"edges: indices must lie in 0..{n_points - 1}, got {int(e.min())}..{int(e.max())}")
    if e.shape[0]:
        idx = torch.as_tensor(e, dtype=torch.long)
        samples = L.geodesic(x_full[idx[:, 0]], x_full[idx[:, 1]], n_geodesic, kf)
        samples = proj.apply(samples, kf)
    else:
        samples = torch.zeros(0, n_geodesic, 3, dtype=torch.float64)
    origin = L.origin(2, kf)
    if radius is None:
        far = float(L.dist(proj.points, origin, kf).max()) if n_points else 0.0
        if samples.shape[0]:
            far = max(far, float(L.dist(samples, origin, kf).max()))
        radius = max(1.15 * far, 1.0 * math.sqrt(kf))
    radius = float(radius)
    if not math.isfinite(radius) or radius <= 0:
        raise ValueError(f"radius: expected a positive hyperbolic radius, got {radius!r}")
    if grid:
        spacing = _nice_spacing(radius)
        grid_t = _grid_geodesics(kf, radius, spacing, n_geodesic, torch.float64)
        grid_d = _grid_geodesics(kf, radius, spacing, n_geodesic, torch.float64, reach=_DISK_REACH * math.sqrt(kf))
    else:
        grid_t = grid_d = torch.zeros(0, n_geodesic, 3, dtype=torch.float64)
    if labels is not None:
        labels = [str(s) for s in labels]
        if len(labels) != n_points:
            raise ValueError(f"labels: expected one label per point ({n_points}), got {len(labels)}")
    else:
        labels = [f"point {i}" for i in range(n_points)]
    return _Scene(kf, proj.points, vals, samples, grid_t, grid_d, radius, proj.note, labels)


def _nice_spacing(radius: float) -> float:
    """Grid spacing of 1, 2 or 5 times a power of ten giving 2..5 lines on each side of the origin."""
    raw = radius / 5.0
    p = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        if m * p >= raw:
            return m * p
    return 10.0 * p


def _to_model(x: torch.Tensor, k: float, model: str) -> torch.Tensor:
    if model == "poincare":
        return L.to_poincare(x, k)
    if model == "klein":
        return L.to_klein(x, k)
    raise ValueError(f"model: expected one of {_MODELS}, got {model!r}")


def _check_model(model: str) -> str:
    m = str(model).lower().replace("é", "e")
    if m not in _MODELS:
        raise ValueError(f"model: expected 'poincare' or 'klein', got {model!r}")
    return m


def _k_text(k: float) -> str:
    return f"{k:g}"


def _title_mpl(base: str, note: str) -> str:
    return base if not note else f"{base}\n{note}"


_MODEL_TEXT = {
    "poincare": dict(
        name="Poincaré disk",
        coord="p",
        formula=r"$p=\sqrt{k}\,x_s/(x_t+\sqrt{k})$",
        plain="p = √k x_s / (x_t + √k)",
        geo="geodesics: arcs orthogonal to the boundary",
    ),
    "klein": dict(
        name="Klein disk",
        coord="K",
        formula=r"$K=\sqrt{k}\,x_s/x_t$",
        plain="K = √k x_s / x_t",
        geo="geodesics: straight chords",
    ),
}

_SUB = str.maketrans("0123456789t", "₀₁₂₃₄₅₆₇₈₉ₜ")


# --------------------------------------------------------------------------- #
# matplotlib
# --------------------------------------------------------------------------- #
def _segments(lines: torch.Tensor) -> list[np.ndarray]:
    return [np.asarray(line) for line in lines.detach().cpu().numpy()]


def _draw_hyperboloid_mpl(ax, scene: _Scene, cmap: str, vmin, vmax, show_origin: bool):
    from mpl_toolkits.mplot3d.art3d import Line3DCollection

    k = scene.k
    sheet = _sheet(k, scene.radius, 25, 49, torch.float64).numpy()
    ax.plot_surface(sheet[..., 1], sheet[..., 2], sheet[..., 0], color=_SHEET_COLOUR, alpha=0.25,
                    linewidth=0, shade=False, rstride=1, cstride=1)
    if scene.grid.shape[0]:
        segs = [s[:, [1, 2, 0]] for s in _segments(scene.grid)]
        ax.add_collection3d(Line3DCollection(segs, colors=_GRID_COLOUR, linewidths=0.5, alpha=0.8,
                                             label="geodesic grid"))
    if scene.edges.shape[0]:
        segs = [s[:, [1, 2, 0]] for s in _segments(scene.edges)]
        ax.add_collection3d(Line3DCollection(segs, colors=style.EDGE, linewidths=1.6, label="geodesics"))
    x = scene.x.numpy()
    mappable = None
    if scene.values is not None:
        mappable = ax.scatter(x[:, 1], x[:, 2], x[:, 0], c=scene.values, cmap=cmap, vmin=vmin, vmax=vmax,
                              s=22, edgecolors="k", linewidths=0.3, depthshade=False, label="points")
    else:
        ax.scatter(x[:, 1], x[:, 2], x[:, 0], color=style.POINT, s=22, edgecolors="k", linewidths=0.3,
                   depthshade=False, label="points")
    if show_origin:
        o = L.origin(2, k).numpy()
        ax.scatter([o[1]], [o[2]], [o[0]], marker="x", color=_ORIGIN_COLOUR, s=40, depthshade=False,
                   label=r"origin $(\sqrt{k},0,0)$")
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        axis.set_major_locator(MaxNLocator(5))
    ax.set_xlabel(r"$x_1$ (spatial)")
    ax.set_ylabel(r"$x_2$ (spatial)")
    ax.set_zlabel(r"$x_t$ (time)")
    ax.view_init(elev=18, azim=-60)
    return mappable


def _draw_disk_mpl(ax, scene: _Scene, model: str, cmap: str, vmin, vmax, show_origin: bool):
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Circle

    k = scene.k
    root_k = math.sqrt(k)
    text = _MODEL_TEXT[model]
    ax.add_patch(Circle((0.0, 0.0), root_k, fill=False, color="k", linewidth=1.2,
                        label=r"boundary $|%s|=\sqrt{k}$ (ideal points)" % text["coord"]))
    if scene.grid_disk.shape[0]:
        segs = _segments(_to_model(scene.grid_disk, k, model))
        ax.add_collection(LineCollection(segs, colors=_GRID_COLOUR, linewidths=0.5, label="geodesic grid"))
    if scene.edges.shape[0]:
        segs = _segments(_to_model(scene.edges, k, model))
        ax.add_collection(LineCollection(segs, colors=style.EDGE, linewidths=1.6, label="geodesics"))
    p = _to_model(scene.x, k, model).numpy()
    mappable = None
    if scene.values is not None:
        mappable = ax.scatter(p[:, 0], p[:, 1], c=scene.values, cmap=cmap, vmin=vmin, vmax=vmax, s=22,
                              edgecolors="k", linewidths=0.3, zorder=3, label="points")
    else:
        ax.scatter(p[:, 0], p[:, 1], color=style.POINT, s=22, edgecolors="k", linewidths=0.3, zorder=3,
                   label="points")
    if show_origin:
        ax.scatter([0.0], [0.0], marker="x", color=_ORIGIN_COLOUR, s=40, zorder=4, label="origin")
    lim = 1.05 * root_k
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    c = text["coord"]
    ax.set_xlabel(rf"${c}_1$")
    ax.set_ylabel(rf"${c}_2$")
    return mappable


def _value_range(values: np.ndarray | None, vmin, vmax):
    if values is None:
        return None, None
    lo = float(np.min(values)) if vmin is None else float(vmin)
    hi = float(np.max(values)) if vmax is None else float(vmax)
    return lo, hi


def hyperboloid_figure_mpl(
    points: ArrayLike,
    k: float = 1.0,
    *,
    values: ArrayLike | None = None,
    value_label: str = "value",
    edges: ArrayLike | None = None,
    grid: bool = False,
    radius: float | None = None,
    n_geodesic: int = 64,
    show_origin: bool = True,
    cmap: str = _DEFAULT_CMAP,
    vmin: float | None = None,
    vmax: float | None = None,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 5.0),
):
    r"""Static 3-D picture of the sheet :math:`\langle x, x\rangle_L = -k` (:math:`d = 2`) with points and geodesics.

    Axes :math:`x_1`, :math:`x_2` (spatial) and :math:`x_t` (time, vertical).

    Parameters
    ----------
    points : array or tensor, shape (..., d + 1)
        Points of the hyperboloid, time first; :math:`d > 2` goes through :func:`project_for_display`
        (stated in the title).
    k : float
        Curvature parameter (curvature :math:`-1/k`).
    values : array, shape (N,), optional
        Colour the points by these values with ``cmap`` (range ``vmin`` .. ``vmax``, default their
        range); the colourbar is labelled ``value_label``.
    edges : array of int, shape (E, 2), optional
        Index pairs ``(i, j)``: draw the exact geodesic from ``points[i]`` to ``points[j]``
        (``n_geodesic`` samples each).
    grid : bool
        Draw a geodesic grid on the sheet.
    radius : float, optional
        Hyperbolic radius of the drawn part of the sheet (default: 1.15 times the farthest point or
        geodesic sample, at least :math:`\sqrt{k}`).
    show_origin, title, figsize
        Mark the origin :math:`(\sqrt{k}, 0, 0)`; a title replacing the default; the figure size.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        For points off the hyperboloid or of dimension :math:`d < 2`, ``values`` or ``edges`` that do
        not fit the points, or a non-positive ``radius``.
    """
    scene = _prepare(points, k, values, edges, grid, radius, n_geodesic, None)
    fig = style.new_figure(figsize)
    ax = fig.add_subplot(projection="3d")
    vmin, vmax = _value_range(scene.values, vmin, vmax)
    mappable = _draw_hyperboloid_mpl(ax, scene, cmap, vmin, vmax, show_origin)
    if mappable is not None:
        fig.colorbar(mappable, ax=ax, label=value_label, shrink=0.65, pad=0.08)
    base = title or (r"Hyperboloid $\langle x,x\rangle_L=-k$, $k=%s$ (curvature $-1/k$)" % _k_text(scene.k))
    ax.set_title(_title_mpl(base, scene.note), fontsize=10)
    return fig


def disk_figure_mpl(
    points: ArrayLike,
    k: float = 1.0,
    *,
    model: str = "poincare",
    values: ArrayLike | None = None,
    value_label: str = "value",
    edges: ArrayLike | None = None,
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 64,
    show_origin: bool = True,
    legend: bool = True,
    cmap: str = _DEFAULT_CMAP,
    vmin: float | None = None,
    vmax: float | None = None,
    title: str | None = None,
    figsize: tuple[float, float] = (5.6, 5.0),
):
    r"""The Poincare disk (``model="poincare"``) or Klein disk (``model="klein"``) of radius :math:`\sqrt{k}`.

    .. math::

        p = \frac{\sqrt{k}\,x_s}{x_t + \sqrt{k}} \quad\text{(Poincare)}, \qquad
        K = \frac{\sqrt{k}\,x_s}{x_t} \quad\text{(Klein)}

    Points go through ``to_poincare`` / ``to_klein``; geodesics are exact samples carried by the
    same map, so they come out as arcs orthogonal to the boundary (Poincare) or straight chords
    (Klein).  Parameters as :func:`hyperboloid_figure_mpl`; ``grid`` (default on) adds the geodesic
    grid, run on to hyperbolic radius :math:`6\sqrt{k}` (or the drawn radius, if larger; at most
    :math:`12\sqrt{k}`), and ``legend`` a legend under the disk.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        For a ``model`` other than ``"poincare"`` and ``"klein"``, or as :func:`hyperboloid_figure_mpl`.
    """
    model = _check_model(model)
    scene = _prepare(points, k, values, edges, grid, radius, n_geodesic, None)
    fig = style.new_figure(figsize)
    ax = fig.add_subplot()
    vmin, vmax = _value_range(scene.values, vmin, vmax)
    mappable = _draw_disk_mpl(ax, scene, model, cmap, vmin, vmax, show_origin)
    if mappable is not None:
        fig.colorbar(mappable, ax=ax, label=value_label, shrink=0.8)
    text = _MODEL_TEXT[model]
    base = title or f"{text['name']} {text['formula']}, $k={_k_text(scene.k)}$"
    ax.set_title(_title_mpl(base, scene.note), fontsize=10)
    if legend:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
    return fig


def poincare_figure_mpl(points: ArrayLike, k: float = 1.0, **kwargs):
    """:func:`disk_figure_mpl` with ``model="poincare"``."""
    return disk_figure_mpl(points, k, model="poincare", **kwargs)


def klein_figure_mpl(points: ArrayLike, k: float = 1.0, **kwargs):
    """:func:`disk_figure_mpl` with ``model="klein"``."""
    return disk_figure_mpl(points, k, model="klein", **kwargs)


def three_models_figure_mpl(
    points: ArrayLike,
    k: float = 1.0,
    *,
    values: ArrayLike | None = None,
    value_label: str = "value",
    edges: ArrayLike | None = None,
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 64,
    show_origin: bool = True,
    cmap: str = _DEFAULT_CMAP,
    title: str | None = None,
    figsize: tuple[float, float] = (14.0, 4.6),
):
    """The same points and geodesics in the hyperboloid, the Poincare disk and the Klein disk.

    Three panels sharing one colour scale (one colourbar).  Parameters as
    :func:`hyperboloid_figure_mpl`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    scene = _prepare(points, k, values, edges, grid, radius, n_geodesic, None)
    fig = style.new_figure(figsize)
    spec = fig.add_gridspec(1, 3, width_ratios=(1.15, 1.0, 1.0), wspace=0.12)
    ax0 = fig.add_subplot(spec[0, 0], projection="3d")
    ax1 = fig.add_subplot(spec[0, 1])
    ax2 = fig.add_subplot(spec[0, 2])
    vmin, vmax = _value_range(scene.values, None, None)
    mappable = _draw_hyperboloid_mpl(ax0, scene, cmap, vmin, vmax, show_origin)
    _draw_disk_mpl(ax1, scene, "poincare", cmap, vmin, vmax, show_origin)
    _draw_disk_mpl(ax2, scene, "klein", cmap, vmin, vmax, show_origin)
    ax0.set_title(r"hyperboloid $\langle x,x\rangle_L=-k$", fontsize=10)
    ax1.set_title("Poincaré " + _MODEL_TEXT["poincare"]["formula"], fontsize=10)
    ax2.set_title("Klein " + _MODEL_TEXT["klein"]["formula"], fontsize=10)
    if mappable is not None:
        fig.colorbar(mappable, ax=[ax0, ax1, ax2], label=value_label, shrink=0.8)
    base = title or (r"The same points in three models of hyperbolic space, $k=%s$" % _k_text(scene.k))
    fig.suptitle(_title_mpl(base, scene.note), fontsize=11)
    return fig


# --------------------------------------------------------------------------- #
# attention drawn on the manifold
# --------------------------------------------------------------------------- #
# keys are written kappa (k is the curvature parameter); one title per kind of hypviz.attention.KINDS
_ATTENTION_TEXT = {
    "spatial": r"spatial: $\mathrm{softmax}_j(q_s\cdot \kappa_{s,j}/\tau)$",
    "distance": r"distance: $\mathrm{softmax}_j(-\frac{1}{2}\|q-\kappa_j\|_L^2/\tau)$",
    "lorentz": r"Lorentz: $\mathrm{softmax}_j(\langle q,\kappa_j\rangle_L/\tau)$",
    "focused": r"focused (Hypformer, linear): $\varphi(q)\cdot\varphi(\kappa_j)/\sum_l\varphi(q)\cdot\varphi(\kappa_l)$",
}
# top_attention: weights within this relative distance of each other count as tied (rounding, not order)
_TIE_RTOL = 1e-9


class TopKeys(NamedTuple):
    r"""One query's attention row and its strongest keys, for one attention kind (see :func:`top_attention`).

    ``kind``: the attention kind; ``row``: ``(M,)`` the query's attention weights over all keys
    (they sum to 1); ``indices``: ``(n,)`` the ``top`` keys with the largest weights *and every key
    tied with the weakest of them* (:math:`n \ge` ``top``; tied: weights equal to a relative
    ``tie_rtol``, the level of rounding, as for exactly symmetric keys of a tree embedding),
    strongest first, keys tied with each other listed by index; ``weights``: ``row[indices]``;
    ``temperature``: the :math:`\tau` used (``None`` for ``"focused"``, which has none).
    """

    kind: str
    row: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor
    temperature: float | None


def _check_index(value: Any, name: str, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer {what} index in 0..{size - 1}, got {value!r}")
    if not 0 <= int(value) < size:
        raise ValueError(f"{name}: expected an integer {what} index in 0..{size - 1}, got {value!r}")
    return int(value)


def _check_pointset(x: ArrayLike, k: float, name: str) -> torch.Tensor:
    t = L.check_points(x, k, name=name)
    if t.dim() != 2:
        raise ValueError(f"{name}: expected one set of points, shape ({name[0].upper()}, d + 1), got {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one point, got shape {tuple(t.shape)}")
    return t


def top_attention(
    queries: ArrayLike,
    keys: ArrayLike,
    k: float = 1.0,
    *,
    query: int = 0,
    kinds: Sequence[str] = ("spatial", "distance"),
    top: int = 8,
    temperature: float | None = None,
    tie_rtol: float = _TIE_RTOL,
) -> dict[str, TopKeys]:
    r"""The attention row of one query and its ``top`` strongest keys (ties included), for each attention kind.

    The weights come from :mod:`hypviz.attention`: ``attention_map(queries[query], keys, kind, k=k,
    temperature=temperature)`` for ``"spatial"``, ``"distance"``, ``"lorentz"`` (a row softmax,
    :math:`\tau` defaulting to :math:`\sqrt{d}`), and ``focused_linear_map(queries[query], keys, k=k)``
    for ``"focused"`` (Hypformer's implicit linear-attention map, no temperature).  Two positive
    weights :math:`w \ge w'` are tied when

    .. math::

        w' \ge (1 - \mathrm{tie\_rtol})\, w.

    Parameters
    ----------
    queries : array or tensor, shape (N, d + 1)
        Query points on :math:`\langle x, x\rangle_L = -k`, time first.
    keys : array or tensor, shape (M, d + 1)
        Key points on the same hyperboloid.
    query : int
        Row of ``queries`` to show.
    kinds : sequence of str
        Attention kinds, each one of ``"spatial"``, ``"distance"``, ``"lorentz"``, ``"focused"``.
    top : int
        Number of strongest keys kept per kind (at most ``M``), extended by every key whose weight is
        tied with the ``top``-th largest: which of exactly tied keys rounding puts first must not
        decide what is shown.
    temperature : float, optional
        The softmax temperature :math:`\tau` (default :math:`\sqrt{d}`).
    tie_rtol : float
        In :math:`[0, 1)`; default ``1e-9``, far above the rounding of a float64 softmax, far below
        any real difference of weights.

    Returns
    -------
    dict
        ``kind -> TopKeys``, in the order of ``kinds``.

    Raises
    ------
    ValueError
        For points off the hyperboloid, queries and keys of different ``d``, a ``query`` index out of
        range, ``top < 1``, a ``tie_rtol`` outside :math:`[0, 1)`, or an unknown kind.
    """
    from hypviz import attention as A

    kf = L.check_k(k)
    q = _check_pointset(queries, kf, "queries")
    kk = _check_pointset(keys, kf, "keys")
    if q.shape[-1] != kk.shape[-1]:
        raise ValueError(
            f"queries and keys have different numbers of coordinates: {tuple(q.shape)} and {tuple(kk.shape)}"
        )
    i = _check_index(query, "query", q.shape[0], "query")
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or int(top) < 1:
        raise ValueError(f"top: expected a positive integer number of keys, got {top!r}")
    try:
        rtol = float(tie_rtol)
    except (TypeError, ValueError):
        rtol = float("nan")
    if isinstance(tie_rtol, bool) or not 0.0 <= rtol < 1.0:
        raise ValueError(f"tie_rtol: expected a relative tolerance in [0, 1), got {tie_rtol!r}")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if not kinds:
        raise ValueError(f"kinds: expected at least one of {_ATTENTION_KINDS}")
    m = min(int(top), kk.shape[0])
    out: dict[str, TopKeys] = {}
    for kind in kinds:
        if kind not in _ATTENTION_KINDS:
            raise ValueError(f"kinds: each kind must be one of {', '.join(map(repr, _ATTENTION_KINDS))}, got {kind!r}")
        if kind == "focused":
            row, tau = A.focused_linear_map(q[i : i + 1], kk, k=kf)[0], None
        else:
            row = A.attention_map(q[i : i + 1], kk, kind, k=kf, temperature=temperature)[0]
            tau = math.sqrt(q.shape[-1] - 1) if temperature is None else float(temperature)
        order = _strongest(row.detach().cpu().to(torch.float64), m, rtol)
        out[kind] = TopKeys(kind, row, order, row[order.to(row.device)], tau)
    return out


def _strongest(w: torch.Tensor, m: int, rtol: float) -> torch.Tensor:
    """Indices of the ``m`` largest of ``w`` plus all keys tied with the ``m``-th; tied keys by index.

    Ties are decided by the weights' values, never by the order rounding happened to give them:
    a run of weights each within ``rtol`` (relative) of the run's largest is one tie group.
    """
    order = torch.sort(w, descending=True, stable=True).indices
    vals = w[order].tolist()
    cut = vals[m - 1]
    if cut > 0.0:
        while m < len(vals) and vals[m] >= (1.0 - rtol) * cut:
            m += 1
    idx = order[:m].tolist()
    groups: list[list[int]] = []
    lead = None
    for pos, j in enumerate(idx):
        if lead is None or not (vals[pos] > 0.0 and vals[pos] >= (1.0 - rtol) * lead):
            groups.append([])
            lead = vals[pos]
        groups[-1].append(j)
    return torch.tensor([j for g in groups for j in sorted(g)], dtype=torch.long)


def _edge_width(rel: np.ndarray, max_linewidth: float) -> np.ndarray:
    """Line width of an edge of relative weight ``rel = A_ij / max A`` (proportional, at least 0.8 pt)."""
    return np.maximum(max_linewidth * rel, 0.8)


def _edge_alpha(rel: np.ndarray) -> np.ndarray:
    """Opacity of an edge of relative weight ``rel``: from 0.45 (weakest) to 1 (strongest)."""
    return 0.45 + 0.55 * rel


def attention_on_manifold_mpl(
    queries: ArrayLike,
    keys: ArrayLike,
    k: float = 1.0,
    *,
    query: int = 0,
    kinds: Sequence[str] = ("spatial", "distance"),
    top: int = 8,
    temperature: float | None = None,
    model: str = "poincare",
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 48,
    max_linewidth: float = 6.0,
    cmap: str = _DEFAULT_CMAP,
    title: str | None = None,
    panel_size: float = 4.4,
):
    r"""One query's attention drawn on the manifold: edges to its strongest keys, one panel per kind.

    For each kind (default ``"spatial"`` and ``"distance"``, side by side) the panel shows, in the
    Poincare disk (``model="poincare"``) or the Klein disk (``"klein"``):

    * every key as a dot coloured by its weight :math:`A_{ij}` in the query's row (one colour scale,
      0 to the maximum over all panels, one colourbar);
    * the query as a star; the ``top`` strongest keys (with every key tied with the weakest of them,
      see :func:`top_attention`) are drawn larger, in proportion to their weight;
    * the exact geodesic (:func:`hypviz.lorentz.geodesic`) from the query to each of those strongest
      keys, with line width and opacity growing with the weight,

      .. math::

          \mathrm{width} = \max\Bigl(\mathrm{max\_linewidth}\,\frac{A_{ij}}{A_{\max}},\; 0.8\,\mathrm{pt}\Bigr),
          \qquad \mathrm{opacity} = 0.45 + 0.55\,\frac{A_{ij}}{A_{\max}},

      (:math:`A_{\max}` the largest weight of any panel) and coloured on the same scale; a strong key
      at the query's own position (self-attention, a geodesic of length 0) is drawn as a ring around
      the star, with the same width and colour code; a legend gives the weights of three reference
      widths.

    The weights come from :func:`top_attention` (that is, from :mod:`hypviz.attention`); nothing
    here computes attention.  Queries and keys of dimension :math:`d > 2` are shown through one
    :func:`project_for_display` fitted to the query and all keys (stated on the figure); the
    geodesics are computed in :math:`d` dimensions and then projected.

    Parameters
    ----------
    queries : array or tensor, shape (N, d + 1)
        Query points on :math:`\langle x, x\rangle_L = -k`.
    keys : array or tensor, shape (M, d + 1)
        Key points.
    k : float
        Curvature parameter.
    query : int
        The query row to show.
    kinds, top, temperature
        As :func:`top_attention`.
    model : str
        ``"poincare"`` or ``"klein"``.
    grid, radius, n_geodesic
        As :func:`disk_figure_mpl`.
    max_linewidth, cmap, title, panel_size
        The widest edge (pt), the colormap, a title replacing the default, the panel size (inches).

    Returns
    -------
    matplotlib.figure.Figure
        One disk axes per kind, then the colourbar axes.
    """
    import matplotlib as mpl
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Circle

    model = _check_model(model)
    tops = top_attention(queries, keys, k, query=query, kinds=kinds, top=top, temperature=temperature)
    kf = L.check_k(k)
    q = L.as_tensor(queries, "queries").detach().cpu().to(torch.float64)
    kk = L.as_tensor(keys, "keys").detach().cpu().to(torch.float64)
    n_keys = kk.shape[0]
    union = sorted({int(j) for t in tops.values() for j in t.indices})
    edges = [(0, 1 + j) for j in union]
    scene = _prepare(torch.cat([q[query : query + 1], kk]), kf, None, edges, grid, radius, n_geodesic, None)
    edge_of = {j: e for e, j in enumerate(union)}
    rows = {kind: t.row.detach().cpu().to(torch.float64).numpy() for kind, t in tops.items()}
    w_max = max(float(r.max()) for r in rows.values())
    norm = mpl.colors.Normalize(vmin=0.0, vmax=w_max)
    colormap = mpl.colormaps[cmap]
    root_k = math.sqrt(kf)
    text = _MODEL_TEXT[model]
    c = text["coord"]
    p_query = _to_model(scene.x[:1], kf, model).numpy()[0]
    p_keys = _to_model(scene.x[1:], kf, model).numpy()
    grid_lines = _segments(_to_model(scene.grid_disk, kf, model)) if scene.grid_disk.shape[0] else []
    arcs = _segments(_to_model(scene.edges, kf, model)) if scene.edges.shape[0] else []

    n_panels = len(tops)
    fig = style.new_figure((panel_size * n_panels + 1.2, panel_size + 1.3))
    axes = fig.subplots(1, n_panels, squeeze=False)[0]
    for ax, (kind, t) in zip(axes, tops.items()):
        ax.add_patch(Circle((0.0, 0.0), root_k, fill=False, color="k", linewidth=1.2))
        if grid_lines:
            ax.add_collection(LineCollection(grid_lines, colors=_GRID_COLOUR, linewidths=0.4, label="geodesic grid"))
        idx = [int(j) for j in t.indices]
        w = rows[kind][idx]
        order = np.argsort(w, kind="stable")  # weakest first, so the strongest edge is drawn on top
        segs = [arcs[edge_of[idx[o]]] for o in order]
        rel = w[order] / w_max
        colours = colormap(norm(w[order]))
        colours[:, 3] = _edge_alpha(rel)
        ax.add_collection(LineCollection(segs, colors=colours, linewidths=_edge_width(rel, max_linewidth),
                                         capstyle="round", label=f"top-{len(idx)} edges", zorder=2))
        sizes = np.full(n_keys, 14.0)
        sizes[idx] += 110.0 * w / w_max  # the strongest keys are also drawn larger (a key equal to the query too)
        ax.scatter(p_keys[:, 0], p_keys[:, 1], c=rows[kind], cmap=colormap, norm=norm, s=sizes, edgecolors="k",
                   linewidths=0.3, zorder=3, label="keys")
        ax.scatter([p_query[0]], [p_query[1]], marker="*", s=220, color=style.QUERY, edgecolors="k",
                   linewidths=0.6, zorder=4, label=f"query {query}")
        # a strong key at the query's own position (self-attention: a geodesic of length 0) gets a ring
        own = [o for o in range(len(idx)) if float(np.abs(arcs[edge_of[idx[o]]] - p_query).max()) < 1e-12]
        if own:
            o = own[0]
            ax.scatter([p_query[0]], [p_query[1]], marker="o", s=520, facecolors="none",
                       edgecolors=[colormap(norm(w[o]))], alpha=float(_edge_alpha(w[o] / w_max)),
                       linewidths=float(_edge_width(w[o] / w_max, max_linewidth)), zorder=5,
                       label=f"key at the query's position, A = {w[o]:.3g}")
        lim = 1.05 * root_k
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.set_xlabel(rf"${c}_1$")
        ax.set_ylabel(rf"${c}_2$")
        share = float(w.sum())
        ax.set_title(f"{_ATTENTION_TEXT[kind]}\ntop-{len(idx)} keys carry {share:.3f} of the weight", fontsize=10)
    sm = mpl.cm.ScalarMappable(norm=norm, cmap=colormap)
    fig.colorbar(sm, ax=list(axes), label=r"attention weight $A_{ij}$ (colour of keys and edges)", shrink=0.8)
    refs = [w_max, w_max / 2, w_max / 4]
    handles = [Line2D([], [], color=colormap(norm(v)), lw=float(_edge_width(np.array(v / w_max), max_linewidth)),
                      alpha=float(_edge_alpha(np.array(v / w_max))), label=rf"$A_{{ij}} = {v:.3g}$") for v in refs]
    handles += [
        Line2D([], [], ls="", marker="*", ms=12, color=style.QUERY, markeredgecolor="k", label=f"query {query}"),
        Line2D([], [], ls="", marker="o", ms=5, color=colormap(0.5), markeredgecolor="k", label=f"keys ({n_keys})"),
    ]
    tie_note = " (and keys tied with the weakest)" if any(len(t.indices) > min(int(top), n_keys) for t in tops.values()) else ""
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False,
               title=f"edges: geodesics to the {min(int(top), n_keys)} strongest keys{tie_note}, width and opacity ∝ weight",
               title_fontsize=8)
    taus = {t.temperature for t in tops.values() if t.temperature is not None}
    tau_text = "" if len(taus) != 1 else rf", $\tau={next(iter(taus)):.3g}$"
    base = title or (
        rf"Attention of query {query} drawn on the manifold ({text['name']}), $k={_k_text(kf)}${tau_text}"
    )
    fig.suptitle(_title_mpl(base, scene.note), fontsize=11)
    return fig


# --------------------------------------------------------------------------- #
# plotly
# --------------------------------------------------------------------------- #
def _rounded(a: np.ndarray, decimals: int) -> list:
    """Round for stable stored JSON (``-0.0`` becomes ``0.0``); NaN becomes ``None`` (a line break)."""
    out = np.round(np.asarray(a, dtype=np.float64), decimals) + 0.0
    lst = out.tolist()

    def fix(v):
        if isinstance(v, list):
            return [fix(w) for w in v]
        return None if v != v else v

    return fix(lst)


def _polylines(lines: np.ndarray, cols: Sequence[int]) -> list[np.ndarray]:
    """Join ``(L, n, c)`` polylines into one array per coordinate, NaN between lines (one trace)."""
    if lines.shape[0] == 0:
        return [np.zeros(0) for _ in cols]
    pad = np.full((lines.shape[0], 1, lines.shape[2]), np.nan)
    joined = np.concatenate([lines, pad], axis=1).reshape(-1, lines.shape[2])[:-1]
    return [joined[:, c] for c in cols]


def _plotly_scale(cmap: str) -> str:
    return _PLOTLY_SCALES.get(str(cmap).lower(), cmap)


def _coloraxis(scene: _Scene, value_label: str, cmap: str, vmin, vmax, decimals: int) -> dict:
    lo, hi = _value_range(scene.values, vmin, vmax)
    lo, hi = _rounded(np.array([lo, hi]), decimals)
    return dict(colorscale=_plotly_scale(cmap), cmin=lo, cmax=hi, colorbar=dict(title=dict(text=value_label)))


def _marker(scene: _Scene, decimals: int) -> dict:
    if scene.values is None:
        return dict(size=4, color=style.POINT, line=dict(width=0.5, color="black"))
    return dict(size=4, color=_rounded(scene.values, decimals), coloraxis="coloraxis",
                line=dict(width=0.5, color="black"))


def _hover(scene: _Scene, decimals: int) -> list[str]:
    if scene.values is None:
        return scene.labels
    return [f"{lab}: {v:.{min(decimals, 4)}g}" for lab, v in zip(scene.labels, scene.values.tolist())]


def _hyperboloid_traces_plotly(scene: _Scene, decimals: int, show_origin: bool, n_sheet: tuple[int, int]):
    import plotly.graph_objects as go

    k = scene.k
    sheet = _sheet(k, scene.radius, n_sheet[0], n_sheet[1], torch.float64).numpy()
    traces = [
        go.Surface(
            x=_rounded(sheet[..., 1], decimals), y=_rounded(sheet[..., 2], decimals),
            z=_rounded(sheet[..., 0], decimals), name="sheet ⟨x,x⟩_L = −k",
            colorscale=[[0.0, _SHEET_COLOUR], [1.0, _SHEET_COLOUR]], showscale=False, opacity=0.35,
            hoverinfo="skip", showlegend=True,
        )
    ]
    if scene.grid.shape[0]:
        gx, gy, gz = _polylines(scene.grid.numpy(), (1, 2, 0))
        traces.append(go.Scatter3d(x=_rounded(gx, decimals), y=_rounded(gy, decimals), z=_rounded(gz, decimals),
                                   mode="lines", line=dict(color=_GRID_COLOUR, width=1.5), name="geodesic grid",
                                   hoverinfo="skip"))
    if scene.edges.shape[0]:
        ex, ey, ez = _polylines(scene.edges.numpy(), (1, 2, 0))
        traces.append(go.Scatter3d(x=_rounded(ex, decimals), y=_rounded(ey, decimals), z=_rounded(ez, decimals),
                                   mode="lines", line=dict(color=style.EDGE, width=4), name="geodesics",
                                   hoverinfo="skip"))
    x = scene.x.numpy()
    traces.append(go.Scatter3d(x=_rounded(x[:, 1], decimals), y=_rounded(x[:, 2], decimals),
                               z=_rounded(x[:, 0], decimals), mode="markers", marker=_marker(scene, decimals),
                               name="points", text=_hover(scene, decimals), hoverinfo="text"))
    if show_origin:
        o = L.origin(2, k).numpy()
        traces.append(go.Scatter3d(x=[0.0], y=[0.0], z=_rounded(o[:1], decimals), mode="markers",
                                   marker=dict(symbol="x", size=4, color=_ORIGIN_COLOUR),
                                   name="origin (√k, 0, 0)"))
    return traces


def _scene_layout() -> dict:
    return dict(
        xaxis=dict(title=dict(text="x₁ (spatial)")),
        yaxis=dict(title=dict(text="x₂ (spatial)")),
        zaxis=dict(title=dict(text="xₜ (time)")),
        aspectmode="manual",
        aspectratio=dict(x=1.0, y=1.0, z=0.8),
        camera=dict(eye=dict(x=1.5, y=-1.5, z=0.8)),
    )


def _disk_traces_plotly(scene: _Scene, model: str, decimals: int, show_origin: bool, legend: bool = True):
    import plotly.graph_objects as go

    k = scene.k
    root_k = math.sqrt(k)
    c = _MODEL_TEXT[model]["coord"]
    angle = np.linspace(0.0, 2.0 * np.pi, 121)
    traces = [go.Scatter(x=_rounded(root_k * np.cos(angle), decimals), y=_rounded(root_k * np.sin(angle), decimals),
                         mode="lines", line=dict(color="black", width=1.5),
                         name=f"boundary |{c}| = √k (ideal points)", hoverinfo="skip", showlegend=legend)]
    if scene.grid_disk.shape[0]:
        gx, gy = _polylines(_to_model(scene.grid_disk, k, model).numpy(), (0, 1))
        traces.append(go.Scatter(x=_rounded(gx, decimals), y=_rounded(gy, decimals), mode="lines",
                                 line=dict(color=_GRID_COLOUR, width=0.8), name="geodesic grid", hoverinfo="skip",
                                 showlegend=legend))
    if scene.edges.shape[0]:
        ex, ey = _polylines(_to_model(scene.edges, k, model).numpy(), (0, 1))
        traces.append(go.Scatter(x=_rounded(ex, decimals), y=_rounded(ey, decimals), mode="lines",
                                 line=dict(color=style.EDGE, width=2.5), name="geodesics", hoverinfo="skip",
                                 showlegend=legend))
    p = _to_model(scene.x, k, model).numpy()
    traces.append(go.Scatter(x=_rounded(p[:, 0], decimals), y=_rounded(p[:, 1], decimals), mode="markers",
                             marker=_marker(scene, decimals) | dict(size=7), name="points",
                             text=_hover(scene, decimals), hoverinfo="text", showlegend=legend))
    if show_origin:
        traces.append(go.Scatter(x=[0.0], y=[0.0], mode="markers", marker=dict(symbol="x", size=8,
                                 color=_ORIGIN_COLOUR), name="origin", showlegend=legend))
    return traces


def _disk_axes(model: str, k: float) -> tuple[dict, dict]:
    c = _MODEL_TEXT[model]["coord"]
    lim = round(1.05 * math.sqrt(k), 6)
    return (
        dict(title=dict(text=f"{c}₁"), range=[-lim, lim], zeroline=False),
        dict(title=dict(text=f"{c}₂"), range=[-lim, lim], zeroline=False),
    )


def _plotly_title(base: str, note: str) -> dict:
    text = base if not note else f"{base}<br><sup>{note}</sup>"
    return dict(text=text, x=0.5, xanchor="center")


def hyperboloid_figure_plotly(
    points: ArrayLike,
    k: float = 1.0,
    *,
    values: ArrayLike | None = None,
    value_label: str = "value",
    edges: ArrayLike | None = None,
    grid: bool = False,
    radius: float | None = None,
    n_geodesic: int = 48,
    show_origin: bool = True,
    cmap: str = _DEFAULT_CMAP,
    vmin: float | None = None,
    vmax: float | None = None,
    title: str | None = None,
    decimals: int = 6,
    sheet_resolution: tuple[int, int] = (20, 37),
    height: int = 520,
):
    r"""Interactive 3-D picture of the sheet :math:`\langle x, x\rangle_L = -k` (:math:`d = 2`), points and geodesics.

    Axes: :math:`x_1`, :math:`x_2` (spatial) horizontal, :math:`x_t` (time) vertical.  Traces, in
    order: the sheet (a ``Surface`` of ``sheet_resolution`` samples), the geodesic grid (if
    ``grid``), the geodesics (one trace for all ``edges``), the points, the origin (if
    ``show_origin``).  Every coordinate is rounded to ``decimals`` places.  Other parameters as
    :func:`hyperboloid_figure_mpl`.

    Returns
    -------
    plotly.graph_objects.Figure
    """
    import plotly.graph_objects as go

    scene = _prepare(points, k, values, edges, grid, radius, n_geodesic, None)
    fig = go.Figure(_hyperboloid_traces_plotly(scene, decimals, show_origin, sheet_resolution))
    base = title or f"Hyperboloid ⟨x,x⟩_L = −k, k = {_k_text(scene.k)} (curvature −1/k)"
    fig.update_layout(title=_plotly_title(base, scene.note), scene=_scene_layout(), height=height,
                      margin=dict(l=0, r=0, t=60, b=0), legend=dict(x=0.0, y=1.0))
    if scene.values is not None:
        fig.update_layout(coloraxis=_coloraxis(scene, value_label, cmap, vmin, vmax, decimals))
    return fig


def disk_figure_plotly(
    points: ArrayLike,
    k: float = 1.0,
    *,
    model: str = "poincare",
    values: ArrayLike | None = None,
    value_label: str = "value",
    edges: ArrayLike | None = None,
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 48,
    show_origin: bool = True,
    cmap: str = _DEFAULT_CMAP,
    vmin: float | None = None,
    vmax: float | None = None,
    title: str | None = None,
    decimals: int = 6,
    height: int = 500,
):
    """Interactive Poincare or Klein disk; see :func:`disk_figure_mpl`.

    Traces, in order: boundary circle, geodesic grid (if ``grid``), geodesics (if ``edges``),
    points, origin (if ``show_origin``).  Equal aspect; data rounded to ``decimals`` places.

    Returns
    -------
    plotly.graph_objects.Figure
    """
    import plotly.graph_objects as go

    model = _check_model(model)
    scene = _prepare(points, k, values, edges, grid, radius, n_geodesic, None)
    fig = go.Figure(_disk_traces_plotly(scene, model, decimals, show_origin))
    text = _MODEL_TEXT[model]
    base = title or f"{text['name']}: {text['plain']}, k = {_k_text(scene.k)} ({text['geo']})"
    xa, ya = _disk_axes(model, scene.k)
    fig.update_layout(title=_plotly_title(base, scene.note), xaxis=xa, yaxis=ya | dict(scaleanchor="x", scaleratio=1),
                      height=height, plot_bgcolor="white")
    if scene.values is not None:
        fig.update_layout(coloraxis=_coloraxis(scene, value_label, cmap, vmin, vmax, decimals))
    return fig


def poincare_figure_plotly(points: ArrayLike, k: float = 1.0, **kwargs):
    """:func:`disk_figure_plotly` with ``model="poincare"``."""
    return disk_figure_plotly(points, k, model="poincare", **kwargs)


def klein_figure_plotly(points: ArrayLike, k: float = 1.0, **kwargs):
    """:func:`disk_figure_plotly` with ``model="klein"``."""
    return disk_figure_plotly(points, k, model="klein", **kwargs)


def three_models_figure_plotly(
    points: ArrayLike,
    k: float = 1.0,
    *,
    values: ArrayLike | None = None,
    value_label: str = "value",
    edges: ArrayLike | None = None,
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 40,
    show_origin: bool = True,
    cmap: str = _DEFAULT_CMAP,
    title: str | None = None,
    decimals: int = 6,
    sheet_resolution: tuple[int, int] = (16, 31),
    height: int = 460,
):
    """Interactive three panels: hyperboloid (3-D), Poincare disk, Klein disk, one colour scale.

    Data rounded to ``decimals`` places; parameters as :func:`hyperboloid_figure_plotly`.

    Returns
    -------
    plotly.graph_objects.Figure
    """
    from plotly.subplots import make_subplots

    scene = _prepare(points, k, values, edges, grid, radius, n_geodesic, None)
    fig = make_subplots(
        rows=1, cols=3, specs=[[{"type": "scene"}, {"type": "xy"}, {"type": "xy"}]],
        subplot_titles=("hyperboloid ⟨x,x⟩_L = −k", "Poincaré: " + _MODEL_TEXT["poincare"]["plain"],
                        "Klein: " + _MODEL_TEXT["klein"]["plain"]),
        horizontal_spacing=0.06,
    )
    for tr in _hyperboloid_traces_plotly(scene, decimals, show_origin, sheet_resolution):
        fig.add_trace(tr, row=1, col=1)
    for col, model in ((2, "poincare"), (3, "klein")):
        for tr in _disk_traces_plotly(scene, model, decimals, show_origin, legend=False):
            fig.add_trace(tr, row=1, col=col)
    for col, model in ((2, "poincare"), (3, "klein")):
        xa, ya = _disk_axes(model, scene.k)
        anchor = "x" + fig.get_subplot(1, col).xaxis.plotly_name[len("xaxis"):]
        fig.update_xaxes(xa, row=1, col=col)
        fig.update_yaxes(ya | dict(scaleanchor=anchor, scaleratio=1), row=1, col=col)
    base = title or f"The same points in three models of hyperbolic space, k = {_k_text(scene.k)}"
    fig.update_layout(title=_plotly_title(base, scene.note), scene=_scene_layout(), height=height,
                      plot_bgcolor="white", margin=dict(l=10, r=10, t=90, b=10),
                      legend=dict(orientation="h", x=0.0, y=-0.05))
    if scene.values is not None:
        fig.update_layout(coloraxis=_coloraxis(scene, value_label, cmap, None, None, decimals))
    return fig
