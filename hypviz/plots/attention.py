r"""Attention pictures: heatmaps side by side, difference maps, the bias made visible in the Poincare disk.

Every function takes maps (computed by :mod:`hypviz.attention`, never here) or, for
:func:`disk_level_sets_mpl`, points, and returns a ``matplotlib.figure.Figure`` made without pyplot
(shown once when returned from a notebook cell; save it with ``fig.savefig``).
:func:`disk_level_sets_mpl` gets its grid from :func:`hypviz.lorentz.projections.poincare_polar_grid`, its
projections from :mod:`hypviz.lorentz` and its scores and weights from :mod:`hypviz.attention`.
With ``ax=`` (one Axes) or ``axes=`` (one per panel) a figure is drawn into Axes made elsewhere,
its colourbar and overall title on their ``Figure`` or ``SubFigure``, and the root ``Figure`` is
returned, so figures compose.  Figures are labelled (axes with units, colourbars saying what they
measure, mathtext titles; keys are written :math:`\kappa`, since :math:`k` is the curvature
parameter) and colour-blind safe: ``viridis`` for weights, ``RdBu_r`` centred on zero for
differences.

The curves of comparison results (:func:`~hypviz.plots.sweeps.bound_sweep_mpl`,
:func:`~hypviz.plots.sweeps.comparison_sweep_mpl`, :func:`~hypviz.plots.sweeps.cost_curves_mpl`,
:func:`~hypviz.plots.sweeps.row_distribution_mpl`, :func:`~hypviz.plots.sweeps.crossover`) live in
:mod:`hypviz.plots.sweeps`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence, cast

import numpy as np

import hypviz.plots._common as common
import hypviz.plots.style as style
from hypviz.base import validate
from hypviz.plots._common import as_1d as _as_1d
from hypviz.plots._common import as_2d as _as_2d

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    import torch
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "heatmaps_mpl",
    "difference_map_mpl",
    "difference_maps_mpl",
    "disk_level_sets_mpl",
]

ArrayLike = Any


# --------------------------------------------------------------------------- #
# heatmaps
# --------------------------------------------------------------------------- #
def heatmaps_mpl(
    maps: Sequence[ArrayLike],
    titles: Sequence[str],
    *,
    suptitle: str | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar_label: str = r"attention weight $A_{ij}$",
    xlabel: str = r"key $j$",
    ylabel: str = r"query $i$",
    panel_size: float = 2.5,
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """Attention maps side by side on one shared colour scale, with one labelled colourbar.

    ``maps`` are ``(N, M)`` arrays or tensors of weights :math:`A_{ij}` (e.g. from
    :func:`hypviz.attention.attention_map`), one title each; the scale runs from ``vmin`` (default 0)
    to ``vmax`` (default the largest weight of all maps).  ``axes``: one Axes per map to draw into.

    Raises
    ------
    ValueError
        For an empty or non-2-D map, a number of titles different from the number of maps, or
        ``axes`` that are not one Axes per map, of one figure.
    """
    from matplotlib.colors import Normalize

    arrays = [_as_2d(m, f"maps[{i}]") for i, m in enumerate(maps)]
    if not arrays or len(titles) != len(arrays):
        raise ValueError(f"heatmaps_mpl: need one title per map, got {len(arrays)} maps and {len(titles)} titles")
    lo = 0.0 if vmin is None else validate.number(vmin, "vmin")
    hi = max(float(a.max()) for a in arrays) if vmax is None else validate.number(vmax, "vmax")
    norm = Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1.0)
    fig, axes = common.panels(axes, len(arrays), (panel_size * len(arrays) + 1.2, panel_size + 0.6))
    image = None
    for ax, arr, title in zip(axes, arrays, titles):
        image = ax.imshow(arr, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    cbar = fig.colorbar(image, ax=list(axes), shrink=0.9)
    cbar.set_label(colorbar_label)
    if suptitle:
        fig.suptitle(suptitle)
    return common.root(fig)


def difference_map_mpl(
    map_a: ArrayLike,
    map_b: ArrayLike,
    *,
    title: str = r"$A^{(b)} - A^{(a)}$",
    colorbar_label: str | None = None,
    limit: float | None = None,
    cmap: str = "RdBu_r",
    xlabel: str = r"key $j$",
    ylabel: str = r"query $i$",
    ax: Axes | None = None,
) -> Figure:
    r"""The difference of two maps on a diverging colormap centred on zero.

    .. math::

        D_{ij} = A^{(b)}_{ij} - A^{(a)}_{ij}, \qquad \text{colour scale } [-\ell, \ell]

    with the limit :math:`\ell` = ``limit``, by default :math:`\max_{ij} |D_{ij}|`, so that two
    difference maps share a scale when given the same ``limit``.  The colourbar says what the title says:
    ``colorbar_label`` defaults to ``title`` followed by ``(weight difference)``.  With ``ax`` the map is drawn
    there (its figure is returned); otherwise a new figure is made.

    Raises
    ------
    ValueError
        When the two maps differ in shape (or are not non-empty 2-D arrays); ``TypeError`` for an
        ``ax`` that is not a matplotlib Axes.
    """
    from matplotlib.colors import Normalize

    a, b = _as_2d(map_a, "map_a"), _as_2d(map_b, "map_b")
    if a.shape != b.shape:
        raise ValueError(f"difference_map_mpl: maps of different shapes {a.shape} and {b.shape}")
    diff = b - a
    lim = float(np.abs(diff).max()) if limit is None else validate.number(limit, "limit")
    if not lim > 0:
        lim = 1e-16
    fig, ax = common.single(ax, (4.4, 3.6))
    image = ax.imshow(diff, cmap=cmap, norm=Normalize(vmin=-lim, vmax=lim), aspect="auto", interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    cbar = fig.colorbar(image, ax=ax, shrink=0.9)
    cbar.set_label(f"{title} (weight difference)" if colorbar_label is None else colorbar_label)
    cbar.formatter.set_powerlimits((-2, 2))
    cbar.update_ticks()
    return common.root(fig)


def difference_maps_mpl(
    pairs: Sequence[tuple[ArrayLike, ArrayLike]],
    titles: Sequence[str],
    *,
    suptitle: str | None = None,
    colorbar_label: str | None = None,
    limit: float | None = None,
    cmap: str = "RdBu_r",
    xlabel: str = r"key $j$",
    ylabel: str = r"query $i$",
    panel_size: float = 2.4,
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """Several differences :math:`A^{(b)} - A^{(a)}` side by side on ONE zero-centred diverging scale.

    ``pairs`` holds ``(map_a, map_b)``, one title each; ``limit`` defaults to the largest absolute
    difference of all pairs, so a panel that looks white really is (nearly) zero next to the others.
    The shared colourbar says what the titles say: ``colorbar_label`` defaults to the title followed by
    ``(weight difference)`` when every panel has the same title (one pair), else to
    :math:`A^{(b)}_{ij} - A^{(a)}_{ij}` with the pairs named as in the panels' titles.
    ``axes``: one Axes per pair to draw into.

    Raises
    ------
    ValueError
        For a pair of maps of different shapes, a number of titles different from the number of
        pairs, or ``axes`` that are not one Axes per pair, of one figure.
    """
    from matplotlib.colors import Normalize

    diffs = []
    for i, (ma, mb) in enumerate(pairs):
        a, b = _as_2d(ma, f"pairs[{i}][0]"), _as_2d(mb, f"pairs[{i}][1]")
        if a.shape != b.shape:
            raise ValueError(f"difference_maps_mpl: pair {i} has maps of different shapes {a.shape} and {b.shape}")
        diffs.append(b - a)
    if not diffs or len(titles) != len(diffs):
        raise ValueError(f"difference_maps_mpl: need one title per pair, got {len(diffs)} pairs and {len(titles)} titles")
    lim = max(float(np.abs(dd).max()) for dd in diffs) if limit is None else validate.number(limit, "limit")
    if not lim > 0:
        lim = 1e-16
    norm = Normalize(vmin=-lim, vmax=lim)
    fig, axes = common.panels(axes, len(diffs), (panel_size * len(diffs) + 1.4, panel_size + 0.6))
    image = None
    for ax, dd, title in zip(axes, diffs, titles):
        image = ax.imshow(dd, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    cbar = fig.colorbar(image, ax=list(axes), shrink=0.9)
    if colorbar_label is None:
        colorbar_label = (f"{titles[0]} (weight difference)" if len(set(titles)) == 1
                          else r"$A^{(b)}_{ij} - A^{(a)}_{ij}$ (weight difference, each pair as its panel's title)")
    cbar.set_label(colorbar_label)
    cbar.formatter.set_powerlimits((-2, 2))
    cbar.update_ticks()
    if suptitle:
        fig.suptitle(suptitle)
    return common.root(fig)


# --------------------------------------------------------------------------- #
# the bias made visible: level sets in the Poincare disk
# --------------------------------------------------------------------------- #
def _level_values(values: np.ndarray, levels: int | Sequence[float]) -> np.ndarray:
    if isinstance(levels, (int, np.integer)) and not isinstance(levels, bool):
        if levels < 1:
            raise ValueError(f"disk_level_sets_mpl: levels must be a positive integer or a sequence, got {levels!r}")
        lo, hi = float(values.min()), float(values.max())
        if not hi > lo:
            hi = lo + 1.0
        return np.linspace(lo, hi, int(levels) + 2)[1:-1]
    return np.sort(_as_1d(levels, "levels"))


def _disk_points(query: ArrayLike, keys: ArrayLike, k: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``query (3,)`` (or ``(1, 3)``) and ``keys (M, 3)``: points of the hyperbolic plane on ``<x, x>_L = -k``, one dtype."""
    from hypviz import lorentz as L

    q = L.as_tensor(query, "query")
    kk = L.as_tensor(keys, "keys")
    if q.dim() == 2 and q.shape[0] == 1:
        q = q[0]
    if q.shape != (3,):
        raise ValueError("disk_level_sets_mpl: query must be one point of the hyperbolic plane, shape (3,); "
                         f"got {tuple(q.shape)}")
    if kk.dim() != 2 or kk.shape[-1] != 3 or kk.shape[0] < 1:
        raise ValueError(f"disk_level_sets_mpl: keys must be points of the hyperbolic plane, shape (M, 3); got {tuple(kk.shape)}")
    if kk.dtype != q.dtype:
        kk = kk.to(q.dtype)
    L.check_points(q, k=k, name="query")
    L.check_points(kk, k=k, name="keys")
    return q, kk


def disk_level_sets_mpl(
    query: ArrayLike,
    keys: ArrayLike,
    *,
    k: float = 1.0,
    temperature: float = 1.0,
    levels: int | tuple[Sequence[float], Sequence[float]] = 9,
    grid: tuple[int, int] = (120, 181),
    edge: float = 0.985,
    axes: Sequence[Axes] | None = None,
    cmap: str = "viridis",
    suptitle: str | None = None,
) -> Figure:
    r"""The key-norm bias made visible: level sets of the two scores in the Poincare disk, keys coloured by weight.

    For one query :math:`q` and keys :math:`\kappa_j` in the hyperbolic plane (:math:`d = 2`, points
    ``(3,)`` and ``(M, 3)`` on :math:`\langle x, x\rangle_L = -k`), two panels in the Poincare disk
    of radius :math:`\sqrt{k}`, :math:`p = \sqrt{k}\,x_s/(x_t + \sqrt{k})`
    (:func:`hypviz.lorentz.to_poincare`):

    * left, the level sets of the spatial score :math:`q_s \cdot \kappa_s` (straight lines in the
      spatial chart, curved in the disk) and each key coloured by its weight
      :math:`\mathrm{softmax}_j(q_s \cdot \kappa_{s,j}/\tau)`;
    * right, the level sets of :math:`\|q - \kappa\|_L^2` (hyperbolic circles around :math:`q`) and
      each key coloured by :math:`\mathrm{softmax}_j(-\tfrac12\|q - \kappa_j\|_L^2/\tau)`.

    Both panels share one colour scale (0 to the largest weight of either).  The fields are
    evaluated on a polar grid of the disk (:func:`hypviz.lorentz.projections.poincare_polar_grid`,
    ``grid = (radii, angles)``; radii evenly spaced in geodesic distance from the origin, out to
    ``edge * sqrt(k)``), lifted by :func:`hypviz.lorentz.from_poincare`; scores and weights come from
    :func:`hypviz.attention.scores` and :func:`hypviz.attention.attention_map` at
    :math:`\tau` = ``temperature``.  ``levels`` is a number of evenly spaced values strictly inside
    the keys' range of each score, or a pair of sequences (spatial levels, :math:`\|q - \kappa\|_L^2`
    levels).  With ``axes`` (two Axes of one figure) the panels are drawn there.

    Raises
    ------
    ValueError
        For a query that is not one ``(3,)`` point, keys that are not ``(M, 3)``, points off the
        hyperboloid, a bad ``grid``, ``edge`` outside :math:`(0, 1)`, bad ``levels`` or ``axes``.
    """
    from matplotlib.colors import Normalize

    from hypviz import attention as att
    from hypviz import lorentz as L
    from hypviz.lorentz.projections import poincare_polar_grid

    kf = L.check_k(k)
    q, kk = _disk_points(query, keys, kf)
    if not (isinstance(grid, (tuple, list)) and len(grid) == 2):
        raise ValueError(f"disk_level_sets_mpl: grid must be (radii, angles), each >= 4; got {grid!r}")
    n_radial, n_angle = (validate.integer(g, "grid", 4) for g in grid)
    edge = validate.number(edge, "edge")
    if not 0.0 < edge < 1.0:
        raise ValueError(f"disk_level_sets_mpl: edge must lie in (0, 1), got {edge!r}")
    root_k = math.sqrt(kf)

    # a polar grid of the disk, evenly spaced in geodesic distance from the origin (fine where the fields steepen)
    px, py, points = poincare_polar_grid(k=kf, n_radial=n_radial, n_angle=n_angle, edge=float(edge), dtype=q.dtype)
    qq = q[None, :]
    fields = (
        att.scores(qq, points, "spatial", k=kf)[0],  # q_s . x_s
        -2.0 * att.scores(qq, points, "distance", k=kf)[0],  # |q - x|^2_L
    )
    key_scores = (att.scores(qq, kk, "spatial", k=kf)[0], -2.0 * att.scores(qq, kk, "distance", k=kf)[0])
    weights = [att.attention_map(qq, kk, kind, k=kf, temperature=temperature)[0] for kind in ("spatial", "distance")]
    w_np = [w.detach().cpu().double().numpy() for w in weights]
    disk_q = L.to_poincare(q, k=kf).detach().cpu().double().numpy()
    disk_k = L.to_poincare(kk, k=kf).detach().cpu().double().numpy()
    gx, gy = px.detach().cpu().double().numpy(), py.detach().cpu().double().numpy()
    if isinstance(levels, (int, np.integer)) and not isinstance(levels, bool):
        level_sets = [_level_values(s.detach().cpu().double().numpy(), levels) for s in key_scores]
    else:
        pair = cast(Sequence[Any], levels)  # not an integer: a pair, or refused here
        if len(pair) != 2:
            raise ValueError("disk_level_sets_mpl: levels must be an int or a pair (spatial levels, |q - kappa|^2_L levels)")
        level_sets = [np.sort(_as_1d(lv, "levels")) for lv in pair]

    fig, panels = common.panels(axes, 2, (8.8, 4.4))
    norm = Normalize(vmin=0.0, vmax=max(float(w.max()) for w in w_np))
    titles = (
        r"spatial: level sets of $q_s \cdot \kappa_s$" "\n" r"weights $\mathrm{softmax}_j(q_s \cdot \kappa_{s,j} / \tau)$",
        r"distance: level sets of $\|q - \kappa\|_L^2$" "\n"
        r"weights $\mathrm{softmax}_j(-\frac{1}{2}\|q - \kappa_j\|_L^2 / \tau)$",
    )
    circle = np.linspace(0.0, 2.0 * math.pi, 361)
    dots = None
    for ax, field, lv, w, title in zip(panels, fields, level_sets, w_np, titles):
        values = field.detach().cpu().double().numpy().reshape(gx.shape)
        ax.contour(gx, gy, values, levels=lv, colors="0.45", linewidths=0.8, linestyles="-")
        ax.plot(root_k * np.cos(circle), root_k * np.sin(circle), color="0.2", lw=1.0)
        dots = ax.scatter(disk_k[:, 0], disk_k[:, 1], c=w, cmap=cmap, norm=norm, s=34,
                          edgecolors="0.15", linewidths=0.5, zorder=3, label=r"keys $\kappa_j$")
        ax.plot(*disk_q, marker="*", ms=15, color=style.QUERY, mec="black", mew=0.8, ls="none", zorder=4, label=r"query $q$")
        ax.plot(0.0, 0.0, marker="+", ms=9, color="black", ls="none", zorder=4, label="origin")
        ax.set_aspect("equal")
        lim = 1.04 * root_k
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_xlabel(r"$p_1$ (Poincaré disk of radius $\sqrt{k}$, spatial units)")
        ax.set_ylabel(r"$p_2$ (Poincaré disk, spatial units)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="lower left")
    cbar = fig.colorbar(dots, ax=panels, shrink=0.85)
    cbar.set_label(rf"attention weight of key $\kappa_j$ (query $q$, $\tau = {float(temperature):.3g}$)")
    if suptitle:
        fig.suptitle(suptitle)
    return common.root(fig)
