r"""Scenes: what each manifold figure draws, computed once from the inputs; the renderers only draw them.

A scene is a small frozen dataclass of numpy arrays in display coordinates (the hyperboloid as
:math:`(x_1, x_2, x_t)`, the disks as :math:`(p_1, p_2)` or :math:`(K_1, K_2)`), colour values and
labels.  :mod:`hypviz.plots.manifold_mpl` and :mod:`hypviz.plots.manifold_plotly` draw the same
scene, so the two back-ends cannot disagree about what is shown.  Building a scene only *calls*
geometry: :mod:`hypviz.lorentz` (geodesics, the maps to the disks), :mod:`hypviz.lorentz.projections` (the
display projection for :math:`d > 2`, the geodesic grid, the sheet) and, for attention,
:func:`hypviz.attention.top_attention`.

* :func:`hyperboloid_scene` -> :class:`HyperboloidScene` (the sheet, grid, geodesics, points);
* :func:`disk_scene` -> :class:`DiskScene` (the Poincare or Klein disk);
* :func:`three_models_scene` -> :class:`ThreeModelsScene` (one point set, three models);
* :func:`attention_scene` -> :class:`AttentionScene` (one query's strongest keys, one panel per kind).

Points are ``(..., d + 1)`` on :math:`\langle x, x\rangle_L = -k`, time first, numpy or torch;
:math:`d > 2` goes through :func:`hypviz.lorentz.projections.project_for_display` (its note is carried by the
scene and written on every figure), :math:`d = 1` is refused.  Geodesics between ``points[i]`` and
``points[j]`` for each row ``(i, j)`` of ``edges`` are the exact :func:`hypviz.lorentz.geodesic`,
computed in :math:`d` dimensions and then projected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from hypviz import lorentz as L
from hypviz.attention.maps.top_keys import top_attention
from hypviz.base import validate
from hypviz.lorentz import projections as D

__all__ = [
    "MODELS",
    "HyperboloidScene",
    "DiskScene",
    "ThreeModelsScene",
    "AttentionPanel",
    "AttentionScene",
    "hyperboloid_scene",
    "disk_scene",
    "three_models_scene",
    "attention_scene",
]

ArrayLike = Any

#: The disk models, as ``model=`` takes them.
MODELS = ("poincare", "klein")
# grid lines in the disks run on to hyperbolic radius 6 sqrt(k): |p| = tanh(3) sqrt(k) ~ 0.995 sqrt(k)
_DISK_REACH = 6.0
_BOUNDARY_SAMPLES = 121

# what each model is called and how it is written (mathtext for matplotlib, plain text for plotly)
MODEL_TEXT = {
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


# --------------------------------------------------------------------------- #
# the scenes
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class HyperboloidScene:
    r"""What the hyperboloid figure draws (:math:`d = 2`), every array in columns :math:`(x_1, x_2, x_t)`.

    ``sheet``: ``(R, A, 3)`` the sheet up to hyperbolic radius ``radius``
    (:func:`hypviz.lorentz.projections.polar_sheet`); ``grid``: ``(G, n, 3)`` geodesic grid lines (``G = 0``:
    none); ``edges``: ``(E, n, 3)`` exact geodesic samples; ``points``: ``(N, 3)``; ``origin``:
    ``(3,)`` or ``None`` (not shown); ``values``: ``(N,)`` colour values or ``None``, drawn on
    ``value_range``; ``labels``: one per point; ``note``: the display projection's sentence (empty
    for :math:`d = 2`).
    """

    k: float
    radius: float
    sheet: np.ndarray
    grid: np.ndarray
    edges: np.ndarray
    points: np.ndarray
    origin: np.ndarray | None
    values: np.ndarray | None
    value_range: tuple[float, float] | None
    labels: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class DiskScene:
    r"""What a disk figure draws: the Poincare (``model="poincare"``) or Klein (``"klein"``) disk of radius :math:`\sqrt{k}`.

    Coordinates :math:`p = \sqrt{k}\,x_s/(x_t + \sqrt{k})` or :math:`K = \sqrt{k}\,x_s/x_t`
    (:func:`hypviz.lorentz.to_poincare`, :func:`hypviz.lorentz.to_klein`).  ``boundary``:
    ``(B, 2)`` samples of the circle of radius ``boundary_radius`` :math:`= \sqrt{k}`
    (:func:`hypviz.lorentz.projections.disk_boundary`); ``limit``:
    half the width of the axes; ``grid``: ``(G, n, 2)``, run on to hyperbolic radius
    :math:`6\sqrt{k}`; ``edges``: ``(E, n, 2)``; ``points``: ``(N, 2)``; ``origin``: ``(2,)`` or
    ``None``; ``values``, ``value_range``, ``labels``, ``note`` as :class:`HyperboloidScene`.
    """

    k: float
    model: str
    radius: float
    boundary_radius: float
    boundary: np.ndarray
    limit: float
    grid: np.ndarray
    edges: np.ndarray
    points: np.ndarray
    origin: np.ndarray | None
    values: np.ndarray | None
    value_range: tuple[float, float] | None
    labels: tuple[str, ...]
    note: str

    @property
    def coord(self) -> str:
        """The coordinate's letter, ``"p"`` (Poincare) or ``"K"`` (Klein)."""
        return MODEL_TEXT[self.model]["coord"]


@dataclass(frozen=True)
class ThreeModelsScene:
    """One point set in the three models, from one preparation of the inputs (one projection, one colour range)."""

    k: float
    hyperboloid: HyperboloidScene
    poincare: DiskScene
    klein: DiskScene
    note: str


@dataclass(frozen=True)
class AttentionPanel:
    r"""One attention kind's panel of an :class:`AttentionScene`.

    ``row``: ``(M,)`` the query's weights :math:`A_{ij}` over all keys; ``keys``: the indices of the
    strongest keys (:attr:`hypviz.attention.TopKeys.indices`, strongest first); ``edges``:
    ``(n_e, n, 2)`` the geodesics from the query to them in drawing order (weakest first, so the
    strongest is drawn on top), with ``edge_weights``, ``edge_widths`` and ``edge_alphas``;
    ``key_sizes``: ``(M,)`` marker areas (pt²); ``ring``: ``(weight, width, alpha)`` of a strong
    key at the query's own position (a geodesic of length 0), else ``None``; ``share``: the
    weight the strongest keys carry.
    """

    kind: str
    row: np.ndarray
    keys: tuple[int, ...]
    edges: np.ndarray
    edge_weights: np.ndarray
    edge_widths: np.ndarray
    edge_alphas: np.ndarray
    key_sizes: np.ndarray
    ring: tuple[float, float, float] | None
    share: float


@dataclass(frozen=True)
class AttentionScene:
    r"""One query's attention drawn on the manifold: a disk (query first, then the keys) and one panel per kind.

    ``disk``: the :class:`DiskScene` of ``[query, keys...]``; ``panels``: one :class:`AttentionPanel`
    per kind; ``w_max``: the largest weight of any panel (the colour scale runs from 0 to it);
    ``legend_weights``, ``legend_widths``, ``legend_alphas``: three reference edges; ``top``: the
    number of keys asked for (at most ``M``); ``tied``: whether a panel shows more, because of keys
    tied with its weakest; ``temperature``: the :math:`\tau` shared by the softmax panels (``None``
    when there is none or several).
    """

    k: float
    model: str
    query: int
    disk: DiskScene
    panels: tuple[AttentionPanel, ...]
    w_max: float
    legend_weights: np.ndarray
    legend_widths: np.ndarray
    legend_alphas: np.ndarray
    top: int
    tied: bool
    temperature: float | None
    note: str

    @property
    def n_keys(self) -> int:
        """The number of keys ``M``."""
        return int(self.panels[0].row.shape[0])


# --------------------------------------------------------------------------- #
# input handling, shared by every scene
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class _Geometry:
    k: float
    x: torch.Tensor  # (N, 3) display points on the hyperboloid
    values: np.ndarray | None
    edges: torch.Tensor  # (E, n, 3) geodesic samples, display space
    radius: float
    note: str
    labels: tuple[str, ...]
    n_geodesic: int


def _geometry(
    points: ArrayLike,
    k: float,
    values: ArrayLike | None,
    edges: ArrayLike | None,
    radius: float | None,
    n_geodesic: int,
    labels: Sequence[str] | None,
) -> _Geometry:
    kf = L.check_k(k)
    x_full = L.check_points(points, k=kf, name="points")
    x_full = x_full.reshape(-1, x_full.shape[-1]).detach().cpu().to(torch.float64)
    n_points = x_full.shape[0]
    proj = D.project_for_display(x_full, k=kf)
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
        samples = L.geodesic(x_full[idx[:, 0]], x_full[idx[:, 1]], n_geodesic, k=kf)
        samples = proj.apply(samples, k=kf)
    else:
        samples = torch.zeros(0, n_geodesic, 3, dtype=torch.float64)
    if radius is None:
        origin = L.origin(2, k=kf)
        far = float(L.dist(proj.points, origin, k=kf).max()) if n_points else 0.0
        if samples.shape[0]:
            far = max(far, float(L.dist(samples, origin, k=kf).max()))
        radius = max(1.15 * far, 1.0 * math.sqrt(kf))
    radius = validate.number(radius, "radius")
    if not math.isfinite(radius) or radius <= 0:
        raise ValueError(f"radius: expected a positive hyperbolic radius, got {radius!r}")
    if labels is not None:
        labels = [str(s) for s in labels]
        if len(labels) != n_points:
            raise ValueError(f"labels: expected one label per point ({n_points}), got {len(labels)}")
    else:
        labels = [f"point {i}" for i in range(n_points)]
    return _Geometry(kf, proj.points, vals, samples, radius, proj.note, tuple(labels), int(n_geodesic))


def _nice_spacing(radius: float) -> float:
    """Grid spacing of 1, 2 or 5 times a power of ten giving 2..5 lines on each side of the origin."""
    raw = radius / 5.0
    p = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        if m * p >= raw:
            return m * p
    return 10.0 * p


def _grid(geo: _Geometry, grid: bool, reach: float | None = None) -> torch.Tensor:
    if not grid:
        return torch.zeros(0, geo.n_geodesic, 3, dtype=torch.float64)
    return D.geodesic_grid(k=geo.k, radius=geo.radius, spacing=_nice_spacing(geo.radius), n=geo.n_geodesic, reach=reach)


def _value_range(values: np.ndarray | None, vmin: float | None, vmax: float | None) -> tuple[float, float] | None:
    if values is None:
        return None
    lo = float(np.min(values)) if vmin is None else validate.number(vmin, "vmin")
    hi = float(np.max(values)) if vmax is None else validate.number(vmax, "vmax")
    return lo, hi


def _check_model(model: str) -> str:
    m = str(model).lower().replace("é", "e")
    if m not in MODELS:
        raise ValueError(f"model: expected 'poincare' or 'klein', got {model!r}")
    return m


def _to_model(x: torch.Tensor, k: float, model: str) -> np.ndarray:
    if x.shape[0] == 0:
        return np.zeros((*x.shape[:-1], 2))
    if model == "poincare":
        return L.to_poincare(x, k=k).numpy()
    return L.to_klein(x, k=k).numpy()


# --------------------------------------------------------------------------- #
# scenes from prepared inputs
# --------------------------------------------------------------------------- #
def _xyz(a: np.ndarray) -> np.ndarray:
    """Hyperboloid coordinates ``(x_t, x_1, x_2)`` as display columns ``(x_1, x_2, x_t)``."""
    return a[..., [1, 2, 0]]


def _hyperboloid(geo: _Geometry, grid: bool, show_origin: bool, sheet_resolution: tuple[int, int],
                 value_range: tuple[float, float] | None) -> HyperboloidScene:
    sheet = D.polar_sheet(k=geo.k, radius=geo.radius, n_radial=sheet_resolution[0], n_angle=sheet_resolution[1]).numpy()
    origin = _xyz(L.origin(2, k=geo.k).numpy()) if show_origin else None
    return HyperboloidScene(
        geo.k, geo.radius, _xyz(sheet), _xyz(_grid(geo, grid).numpy()), _xyz(geo.edges.numpy()),
        _xyz(geo.x.numpy()), origin, geo.values, value_range, geo.labels, geo.note,
    )


def _disk(geo: _Geometry, grid_lines: torch.Tensor, model: str, show_origin: bool,
          value_range: tuple[float, float] | None) -> DiskScene:
    root_k = math.sqrt(geo.k)
    return DiskScene(
        geo.k, model, geo.radius, root_k, D.disk_boundary(k=geo.k, n=_BOUNDARY_SAMPLES), 1.05 * root_k,
        _to_model(grid_lines, geo.k, model),
        _to_model(geo.edges, geo.k, model), _to_model(geo.x, geo.k, model),
        np.zeros(2) if show_origin else None, geo.values, value_range, geo.labels, geo.note,
    )


def _disk_reach(k: float) -> float:
    return _DISK_REACH * math.sqrt(k)


# --------------------------------------------------------------------------- #
# public builders
# --------------------------------------------------------------------------- #
def hyperboloid_scene(
    points: ArrayLike,
    *,
    k: float = 1.0,
    values: ArrayLike | None = None,
    edges: ArrayLike | None = None,
    grid: bool = False,
    radius: float | None = None,
    n_geodesic: int = 64,
    show_origin: bool = True,
    vmin: float | None = None,
    vmax: float | None = None,
    labels: Sequence[str] | None = None,
    sheet_resolution: tuple[int, int] = (25, 49),
) -> HyperboloidScene:
    r"""The scene of a hyperboloid figure: the sheet :math:`\langle x, x\rangle_L = -k` (:math:`d = 2`), points, geodesics.

    Parameters
    ----------
    points : array or tensor, shape (..., d + 1)
        Points of the hyperboloid, time first; :math:`d > 2` goes through
        :func:`hypviz.lorentz.projections.project_for_display` (its note is kept in the scene).
    k : float
        Curvature parameter (curvature :math:`-1/k`).
    values : array, shape (N,), optional
        Colour values of the points, drawn on ``vmin`` .. ``vmax`` (default their range).
    edges : array of int, shape (E, 2), optional
        Index pairs ``(i, j)``: the exact geodesic from ``points[i]`` to ``points[j]``,
        ``n_geodesic`` samples each.
    grid : bool
        A geodesic grid (:func:`hypviz.lorentz.projections.geodesic_grid`) on the drawn part of the sheet.
    radius : float, optional
        Hyperbolic radius of the drawn part of the sheet (default: 1.15 times the farthest point or
        geodesic sample, at least :math:`\sqrt{k}`).
    show_origin : bool
        Mark the origin :math:`(\sqrt{k}, 0, 0)`.
    labels : sequence of str, optional
        One label per point (hover text of the plotly renderer; default ``"point i"``).
    sheet_resolution : (int, int)
        Radial and angular samples of the sheet.

    Raises
    ------
    ValueError
        For points off the hyperboloid or of dimension :math:`d < 2`, ``values``, ``edges`` or
        ``labels`` that do not fit the points, or a non-positive ``radius``.
    """
    geo = _geometry(points, k, values, edges, radius, n_geodesic, labels)
    return _hyperboloid(geo, grid, show_origin, sheet_resolution, _value_range(geo.values, vmin, vmax))


def disk_scene(
    points: ArrayLike,
    *,
    k: float = 1.0,
    model: str = "poincare",
    values: ArrayLike | None = None,
    edges: ArrayLike | None = None,
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 64,
    show_origin: bool = True,
    vmin: float | None = None,
    vmax: float | None = None,
    labels: Sequence[str] | None = None,
) -> DiskScene:
    r"""The scene of a disk figure: the Poincare (``model="poincare"``) or Klein (``"klein"``) disk.

    .. math::

        p = \frac{\sqrt{k}\,x_s}{x_t + \sqrt{k}} \quad\text{(Poincare)}, \qquad
        K = \frac{\sqrt{k}\,x_s}{x_t} \quad\text{(Klein)}

    Points and the exact geodesic samples go through the same map, so geodesics come out as arcs
    orthogonal to the boundary (Poincare) or straight chords (Klein).  The grid (default on) runs on
    to hyperbolic radius :math:`6\sqrt{k}` (or the drawn radius, if larger; at most
    :math:`12\sqrt{k}`).  Other parameters as :func:`hyperboloid_scene`.

    Raises
    ------
    ValueError
        For a ``model`` other than ``"poincare"`` and ``"klein"``, or as :func:`hyperboloid_scene`.
    """
    m = _check_model(model)
    geo = _geometry(points, k, values, edges, radius, n_geodesic, labels)
    lines = _grid(geo, grid, reach=_disk_reach(geo.k))
    return _disk(geo, lines, m, show_origin, _value_range(geo.values, vmin, vmax))


def three_models_scene(
    points: ArrayLike,
    *,
    k: float = 1.0,
    values: ArrayLike | None = None,
    edges: ArrayLike | None = None,
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 64,
    show_origin: bool = True,
    labels: Sequence[str] | None = None,
    sheet_resolution: tuple[int, int] = (25, 49),
) -> ThreeModelsScene:
    """The same points and geodesics in the hyperboloid, the Poincare disk and the Klein disk.

    One preparation of the inputs (one display projection, one colour range: the values' own);
    the hyperboloid's grid is cut at the drawn radius, the disks' runs on to :math:`6\\sqrt{k}`.
    Parameters as :func:`hyperboloid_scene`.
    """
    geo = _geometry(points, k, values, edges, radius, n_geodesic, labels)
    vr = _value_range(geo.values, None, None)
    disk_lines = _grid(geo, grid, reach=_disk_reach(geo.k))
    return ThreeModelsScene(
        geo.k,
        _hyperboloid(geo, grid, show_origin, sheet_resolution, vr),
        _disk(geo, disk_lines, "poincare", show_origin, vr),
        _disk(geo, disk_lines, "klein", show_origin, vr),
        geo.note,
    )


def _edge_width(rel: np.ndarray, max_linewidth: float) -> np.ndarray:
    """Line width of an edge of relative weight ``rel = A_ij / max A`` (proportional, at least 0.8 pt)."""
    return np.maximum(max_linewidth * rel, 0.8)


def _edge_alpha(rel: np.ndarray) -> np.ndarray:
    """Opacity of an edge of relative weight ``rel``: from 0.45 (weakest) to 1 (strongest)."""
    return 0.45 + 0.55 * rel


def attention_scene(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    k: float = 1.0,
    query: int = 0,
    kinds: Sequence[str] = ("spatial", "distance"),
    top: int = 8,
    temperature: float | None = None,
    model: str = "poincare",
    grid: bool = True,
    radius: float | None = None,
    n_geodesic: int = 48,
    max_linewidth: float = 6.0,
) -> AttentionScene:
    r"""One query's attention on the manifold: its strongest keys joined to it by geodesics, one panel per kind.

    The rows and the strongest keys (ties included) are :func:`hypviz.attention.top_attention`'s;
    nothing here computes attention.  The disk holds the query and all keys; queries and keys of
    dimension :math:`d > 2` go through one :func:`hypviz.lorentz.projections.project_for_display` fitted to
    the query and all keys, the geodesics computed in :math:`d` dimensions and then projected.
    Each edge's width and opacity grow with its weight,

    .. math::

        \mathrm{width} = \max\Bigl(\mathrm{max\_linewidth}\,\frac{A_{ij}}{A_{\max}},\; 0.8\Bigr),
        \qquad \mathrm{opacity} = 0.45 + 0.55\,\frac{A_{ij}}{A_{\max}},

    with :math:`A_{\max}` the largest weight of any panel; a key's marker area is
    :math:`14 + 110\,A_{ij}/A_{\max}` (pt²) for the strongest keys and 14 for the others.

    Parameters
    ----------
    queries : array or tensor, shape (N, d + 1)
        Query points on :math:`\langle x, x\rangle_L = -k`.
    keys : array or tensor, shape (M, d + 1)
        Key points.
    k : float
        Curvature parameter.
    query, kinds, top, temperature
        As :func:`hypviz.attention.top_attention`.
    model : str
        ``"poincare"`` or ``"klein"``.
    grid, radius, n_geodesic
        As :func:`disk_scene`.
    max_linewidth : float
        The widest edge (pt).

    Raises
    ------
    ValueError
        As :func:`hypviz.attention.top_attention` and :func:`disk_scene`.
    """
    m = _check_model(model)
    tops = top_attention(queries, keys, k=k, query=query, kinds=kinds, top=top, temperature=temperature)
    kf = L.check_k(k)
    q = L.as_tensor(queries, "queries").detach().cpu().to(torch.float64)
    kk = L.as_tensor(keys, "keys").detach().cpu().to(torch.float64)
    n_keys = kk.shape[0]
    union = sorted({int(j) for t in tops.values() for j in t.indices})
    geo = _geometry(torch.cat([q[query : query + 1], kk]), kf, None, [(0, 1 + j) for j in union], radius,
                    n_geodesic, None)
    disk = _disk(geo, _grid(geo, grid, reach=_disk_reach(kf)), m, False, None)
    edge_of = {j: e for e, j in enumerate(union)}
    rows = {kind: t.row.detach().cpu().to(torch.float64).numpy() for kind, t in tops.items()}
    w_max = max(float(r.max()) for r in rows.values())
    p_query = disk.points[0]
    panels = []
    for kind, t in tops.items():
        idx = [int(j) for j in t.indices]
        w = rows[kind][idx]
        order = np.argsort(w, kind="stable")  # weakest first, so the strongest edge is drawn on top
        rel = w[order] / w_max
        sizes = np.full(n_keys, 14.0)
        sizes[idx] += 110.0 * w / w_max  # the strongest keys are also drawn larger (a key equal to the query too)
        own = [o for o in range(len(idx)) if float(np.abs(disk.edges[edge_of[idx[o]]] - p_query).max()) < 1e-12]
        ring = None
        if own:
            r = np.array(w[own[0]] / w_max)
            ring = (float(w[own[0]]), float(_edge_width(r, max_linewidth)), float(_edge_alpha(r)))
        panels.append(AttentionPanel(
            kind, rows[kind], tuple(idx), disk.edges[[edge_of[idx[o]] for o in order]], w[order],
            _edge_width(rel, max_linewidth), _edge_alpha(rel), sizes, ring, float(w.sum()),
        ))
    refs = np.array([w_max, w_max / 2, w_max / 4])
    top_n = min(int(top), n_keys)
    taus = {t.temperature for t in tops.values() if t.temperature is not None}
    return AttentionScene(
        kf, m, int(query), disk, tuple(panels), w_max, refs, _edge_width(refs / w_max, max_linewidth),
        _edge_alpha(refs / w_max), top_n, any(len(t.indices) > top_n for t in tops.values()),
        next(iter(taus)) if len(taus) == 1 else None, geo.note,
    )
