r"""Attention pictures: heatmaps side by side, difference maps, bound and sweep curves, the bias in the disk.

Every function takes maps, per-row statistics or :class:`hypviz.attention.Comparison` results
(computed by :mod:`hypviz.attention`, never here) and returns a ``matplotlib.figure.Figure``
made without pyplot (shown once when returned from a notebook cell; save it with
``fig.savefig``).  The one picture that starts from points, :func:`disk_level_sets_mpl`, gets
its projections from :mod:`hypviz.lorentz` and its scores and weights from
:mod:`hypviz.attention`.  Figures are labelled (axes with units, colourbars saying what they
measure, mathtext titles; keys are written :math:`\kappa`, since :math:`k` is the curvature
parameter) and colour-blind safe: ``viridis`` for weights, ``RdBu_r`` centred on zero for
differences, Okabe-Ito colours plus distinct line styles and markers for curves.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import torch

import hypviz.plots.style as style

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "heatmaps_mpl",
    "difference_map_mpl",
    "difference_maps_mpl",
    "bound_sweep_mpl",
    "comparison_sweep_mpl",
    "disk_level_sets_mpl",
    "cost_curves_mpl",
    "row_distribution_mpl",
    "crossover",
]

ArrayLike = Any



def _as_2d(x: ArrayLike, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 2-D map (N, M); got shape {arr.shape}")
    return arr


def _as_1d(x: ArrayLike, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=float).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty sequence of numbers")
    return arr


def _positive(v: np.ndarray) -> np.ndarray:
    """Values for a log axis: non-positive ones are not drawn (NaN)."""
    return np.where(v > 0, v, np.nan)


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
    panel_size: float = 3.2,
) -> Figure:
    """Attention maps side by side on one shared colour scale, with one labelled colourbar.

    ``maps`` are ``(N, M)`` arrays or tensors of weights :math:`A_{ij}` (e.g. from
    :func:`hypviz.attention.attention_map`), one title each; the scale runs from ``vmin`` (default 0)
    to ``vmax`` (default the largest weight of all maps).

    Raises
    ------
    ValueError
        For an empty or non-2-D map, or a number of titles different from the number of maps.
    """
    from matplotlib.colors import Normalize

    arrays = [_as_2d(m, f"maps[{i}]") for i, m in enumerate(maps)]
    if not arrays or len(titles) != len(arrays):
        raise ValueError(f"heatmaps_mpl: need one title per map, got {len(arrays)} maps and {len(titles)} titles")
    lo = 0.0 if vmin is None else float(vmin)
    hi = max(float(a.max()) for a in arrays) if vmax is None else float(vmax)
    norm = Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1.0)
    fig = style.new_figure((panel_size * len(arrays) + 1.2, panel_size + 0.6))
    axes = fig.subplots(1, len(arrays), squeeze=False)[0]
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
    return fig


def difference_map_mpl(
    map_a: ArrayLike,
    map_b: ArrayLike,
    *,
    title: str = r"$A^{(b)} - A^{(a)}$",
    colorbar_label: str = r"$A^{(b)}_{ij} - A^{(a)}_{ij}$ (weight difference)",
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
    difference maps share a scale when given the same ``limit``.  With ``ax`` the map is drawn
    there (its figure is returned); otherwise a new figure is made.

    Raises
    ------
    ValueError
        When the two maps differ in shape (or are not non-empty 2-D arrays).
    """
    from matplotlib.colors import Normalize

    a, b = _as_2d(map_a, "map_a"), _as_2d(map_b, "map_b")
    if a.shape != b.shape:
        raise ValueError(f"difference_map_mpl: maps of different shapes {a.shape} and {b.shape}")
    diff = b - a
    lim = float(np.abs(diff).max()) if limit is None else float(limit)
    if not lim > 0:
        lim = 1e-16
    if ax is None:
        fig = style.new_figure((4.4, 3.6))
        ax = fig.subplots()
    else:
        fig = ax.figure
    image = ax.imshow(diff, cmap=cmap, norm=Normalize(vmin=-lim, vmax=lim), aspect="auto", interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    cbar = fig.colorbar(image, ax=ax, shrink=0.9)
    cbar.set_label(colorbar_label)
    cbar.formatter.set_powerlimits((-2, 2))
    cbar.update_ticks()
    return fig


def difference_maps_mpl(
    pairs: Sequence[tuple[ArrayLike, ArrayLike]],
    titles: Sequence[str],
    *,
    suptitle: str | None = None,
    colorbar_label: str = r"$A^{(b)}_{ij} - A^{(a)}_{ij}$ (weight difference)",
    limit: float | None = None,
    cmap: str = "RdBu_r",
    xlabel: str = r"key $j$",
    ylabel: str = r"query $i$",
    panel_size: float = 3.2,
) -> Figure:
    """Several differences :math:`A^{(b)} - A^{(a)}` side by side on ONE zero-centred diverging scale.

    ``pairs`` holds ``(map_a, map_b)``, one title each; ``limit`` defaults to the largest absolute
    difference of all pairs, so a panel that looks white really is (nearly) zero next to the others.

    Raises
    ------
    ValueError
        For a pair of maps of different shapes, or a number of titles different from the number of pairs.
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
    lim = max(float(np.abs(dd).max()) for dd in diffs) if limit is None else float(limit)
    if not lim > 0:
        lim = 1e-16
    norm = Normalize(vmin=-lim, vmax=lim)
    fig = style.new_figure((panel_size * len(diffs) + 1.4, panel_size + 0.6))
    axes = fig.subplots(1, len(diffs), squeeze=False)[0]
    image = None
    for ax, dd, title in zip(axes, diffs, titles):
        image = ax.imshow(dd, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    cbar = fig.colorbar(image, ax=list(axes), shrink=0.9)
    cbar.set_label(colorbar_label)
    cbar.formatter.set_powerlimits((-2, 2))
    cbar.update_ticks()
    if suptitle:
        fig.suptitle(suptitle)
    return fig


# --------------------------------------------------------------------------- #
# the bound: TV and KL against a sweep parameter
# --------------------------------------------------------------------------- #
def bound_sweep_mpl(
    x: ArrayLike,
    results: Sequence[Any],
    *,
    xlabel: str = r"norm scale $r$ of the spatial parts",
    title: str = r"spatial vs distance softmax: measured gap and the bound $\Delta$",
) -> Figure:
    r"""Mean and max row TV and KL of each :class:`~hypviz.attention.Comparison` of a sweep, with the bounds overlaid.

    .. math::

        \mathrm{TV}(P_a, P_b) \le \tanh\frac{\Delta}{4}, \qquad
        \mathrm{KL}(P_b \,\|\, P_a) \le \log\frac{e^\Delta - 1}{\Delta} - 1 + \frac{\Delta}{e^\Delta - 1}
                                   \le \frac{\Delta^2}{8}

    Left: TV (mean, max over rows) and ``Comparison.tv_bound`` (mean and max over rows).  Right:
    KL (mean, max), the exact supremum ``Comparison.kl_bound`` (mean and max) and Hoeffding's
    simpler ``Comparison.kl_bound_hoeffding`` (max).  One comparison per sweep value ``x``; log-log
    axes; zero values are not drawn.

    Raises
    ------
    ValueError
        When ``x`` and ``results`` differ in length, or a result does not compare two softmax kinds
        (the bound does not apply to ``"focused"``, whose ``delta`` is ``None``).
    """
    xs = _as_1d(x, "x")
    if len(results) != xs.size:
        raise ValueError(f"bound_sweep_mpl: {xs.size} sweep values but {len(results)} results")
    for i, r in enumerate(results):
        if getattr(r, "delta", None) is None:
            raise ValueError(
                f"bound_sweep_mpl: results[{i}] compares {getattr(r, 'a', '?')!r} with {getattr(r, 'b', '?')!r}; "
                "the softmax bound needs two softmax kinds (it is None for 'focused')"
            )

    def stat(field: str, how: str) -> np.ndarray:
        vals = []
        for r in results:
            t = getattr(r, field).detach().double()
            vals.append(float(t.mean() if how == "mean" else t.max()))
        return np.asarray(vals)

    fig = style.new_figure((10.0, 4.0))
    ax_tv, ax_kl = fig.subplots(1, 2)
    panels = (
        (ax_tv, "tv", "tv_bound", r"$\mathrm{TV}(P_a, P_b)$", r"$\tanh(\Delta/4)$", "total variation (probability)"),
        (ax_kl, "kl", "kl_bound", r"$\mathrm{KL}(P_b \,\|\, P_a)$", r"$\sup \mathrm{KL}(\Delta)$ (exact)", "KL divergence (nats)"),
    )
    for ax, field, bound, name, bname, ylabel in panels:
        ax.plot(xs, _positive(stat(field, "max")), color=style.colour(1), marker=style.marker(1), ls="-", label=f"max {name}")
        ax.plot(xs, _positive(stat(field, "mean")), color=style.colour(0), marker=style.marker(0), ls="-", label=f"mean {name}")
        ax.plot(xs, _positive(stat(bound, "max")), color=style.BOUND, ls="--", label=f"bound: max {bname}")
        ax.plot(xs, _positive(stat(bound, "mean")), color=style.BOUND, ls=":", label=f"bound: mean {bname}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    ax_kl.plot(xs, _positive(stat("kl_bound_hoeffding", "max")), color="0.45", ls="-.",
               label=r"simple bound: max $\Delta^2/8$ (Hoeffding)")
    for ax in (ax_tv, ax_kl):
        ax.legend(fontsize=8)
    ax_tv.set_title(r"$\mathrm{TV} \leq \tanh(\Delta/4)$ per row")
    ax_kl.set_title(r"$\mathrm{KL} \leq \sup \mathrm{KL}(\Delta) \leq \Delta^2/8$ per row")
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- #
# sweeps read against the uniform baseline
# --------------------------------------------------------------------------- #
_MEASURE_STYLES = ("-", "--", ":")


def comparison_sweep_mpl(
    series: Mapping[str, tuple[ArrayLike, Sequence[Any]]],
    *,
    xlabel: str = r"$r^2/\tau$ (dimensionless)",
    title: str = r"spatial vs distance softmax, read against the uniform row $U$",
    xscale: str = "log",
    close_ratio: float | None = None,
) -> Figure:
    r"""Scale-free measures of sweeps of :class:`~hypviz.attention.Comparison` results, one colour per series.

    ``series`` maps a label (e.g. ``r"$\tau = 8$"``) to ``(x, results)``: one sweep value and one
    comparison per point.  Three panels, each curve drawn against ``x``:

    * the gap :math:`\operatorname{mean}\mathrm{TV}(P_a, P_b)` (solid) and the reference's baseline
      :math:`\operatorname{mean}\mathrm{TV}(P_b, U)` (dashed), log-log: the two must be read together;
    * their ratio ``Comparison.gap_ratio`` (linear axis), with the ``"close"`` threshold
      ``close_ratio`` (default :data:`hypviz.attention.CLOSE_RATIO`) dotted,

      .. math::

          \mathrm{gap\_ratio} = \frac{\operatorname{mean}\mathrm{TV}(P_a, P_b)}{\operatorname{mean}\mathrm{TV}(P_b, U)};

    * the rank measures ``top1_agreement`` (solid), ``topk_agreement`` (dashed) and
      ``rank_correlation`` (Spearman, dotted; left out when not computed), on :math:`[0, 1]`.

    Curves of different series that coincide show a collapse onto ``x``.

    Raises
    ------
    ValueError
        For no series, an ``xscale`` other than ``"log"`` and ``"linear"``, a series whose ``x`` and
        ``results`` differ in length, or a non-positive ``x`` on a log axis.
    """
    from matplotlib.lines import Line2D

    from hypviz import attention as att

    if not series:
        raise ValueError("comparison_sweep_mpl: nothing to draw (series is empty)")
    if xscale not in ("log", "linear"):
        raise ValueError(f"comparison_sweep_mpl: xscale must be 'log' or 'linear', got {xscale!r}")
    ratio_line = att.CLOSE_RATIO if close_ratio is None else float(close_ratio)
    fig = style.new_figure((13.5, 4.2))
    ax_tv, ax_ratio, ax_rank = fig.subplots(1, 3)
    rank_names: list[str] = []
    for i, (label, (x, results)) in enumerate(series.items()):
        xs = _as_1d(x, f"series[{label!r}] x")
        if len(results) != xs.size:
            raise ValueError(f"comparison_sweep_mpl: series {label!r} has {xs.size} sweep values but {len(results)} results")
        if xscale == "log" and not np.all(xs > 0):
            raise ValueError(f"comparison_sweep_mpl: series {label!r} has non-positive x values on a log axis")
        colour, marker = style.colour(i), style.marker(i)
        gap = np.array([r.mean_tv for r in results])
        base = np.array([r.mean_tv_uniform_b for r in results])
        ratio = np.array([np.nan if r.gap_ratio is None else r.gap_ratio for r in results])
        ax_tv.plot(xs, _positive(gap), color=colour, marker=marker, ls="-", label=f"{label}: gap")
        ax_tv.plot(xs, _positive(base), color=colour, marker=marker, ls="--", mfc="none", label=f"{label}: baseline")
        ax_ratio.plot(xs, ratio, color=colour, marker=marker, ls="-", label=label)
        ranks = [("top-1", [r.top1_agreement for r in results]),
                 (f"top-{results[0].topk}", [r.topk_agreement for r in results])]
        if all(r.rank_correlation is not None for r in results):
            ranks.append(("Spearman", [r.rank_correlation for r in results]))
        for line, (name, vals) in zip(_MEASURE_STYLES, ranks):
            ax_rank.plot(xs, np.asarray(vals, dtype=float), color=colour, marker=marker, ls=line, ms=4,
                         label=f"{label}: {name}")
            if name not in rank_names:
                rank_names.append(name)
    ax_ratio.axhline(ratio_line, color=style.BOUND, ls=":", lw=1.2, label=f"'close' threshold {ratio_line:g}")
    # colours (series) are named in the middle panel; the outer panels name the line styles
    ax_tv.legend(handles=[Line2D([], [], color=style.BOUND, ls="-", label=r"gap $\mathrm{TV}(P_a, P_b)$"),
                          Line2D([], [], color=style.BOUND, ls="--", label=r"baseline $\mathrm{TV}(P_b, U)$")],
                 fontsize=8, loc="upper left")
    ax_rank.legend(handles=[Line2D([], [], color=style.BOUND, ls=line, label=name)
                            for line, name in zip(_MEASURE_STYLES, rank_names)], fontsize=8, loc="best")
    ax_ratio.legend(fontsize=8, loc="best")
    ax_tv.set_yscale("log")
    ax_tv.set_ylabel("mean row total variation (probability)")
    ax_tv.set_title(r"gap $\mathrm{TV}(P_a, P_b)$ and baseline $\mathrm{TV}(P_b, U)$")
    ax_ratio.set_ylabel(r"$\mathrm{TV}(P_a, P_b) \,/\, \mathrm{TV}(P_b, U)$ (ratio of means)")
    ax_ratio.set_ylim(bottom=0.0)
    ax_ratio.set_title("gap relative to the baseline")
    ax_rank.set_ylabel("agreement (fraction of rows) or rank correlation")
    ax_rank.set_ylim(-0.02, 1.02)
    ax_rank.set_title("do the maps rank the keys alike?")
    for ax in (ax_tv, ax_ratio, ax_rank):
        ax.set_xscale(xscale)
        ax.set_xlabel(xlabel)
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(title)
    return fig


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
    evaluated on a polar grid of the disk (``grid = (radii, angles)``; radii evenly spaced in
    geodesic distance from the origin, out to ``edge * sqrt(k)``), lifted by
    :func:`hypviz.lorentz.from_poincare`; scores and weights come from
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

    kf = L.check_k(k)
    q = L.as_tensor(query, "query")
    kk = L.as_tensor(keys, "keys")
    if q.dim() == 2 and q.shape[0] == 1:
        q = q[0]
    if q.shape != (3,):
        raise ValueError(f"disk_level_sets_mpl: query must be one point of the hyperbolic plane, shape (3,); got {tuple(q.shape)}")
    if kk.dim() != 2 or kk.shape[-1] != 3 or kk.shape[0] < 1:
        raise ValueError(f"disk_level_sets_mpl: keys must be points of the hyperbolic plane, shape (M, 3); got {tuple(kk.shape)}")
    if kk.dtype != q.dtype:
        kk = kk.to(q.dtype)
    L.check_points(q, kf, name="query")
    L.check_points(kk, kf, name="keys")
    if not (isinstance(grid, (tuple, list)) and len(grid) == 2 and all(int(g) >= 4 for g in grid)):
        raise ValueError(f"disk_level_sets_mpl: grid must be (radii, angles), each >= 4; got {grid!r}")
    if not 0.0 < float(edge) < 1.0:
        raise ValueError(f"disk_level_sets_mpl: edge must lie in (0, 1), got {edge!r}")
    root_k = math.sqrt(kf)

    # a polar grid of the disk, evenly spaced in geodesic distance rho from the origin (in units of
    # sqrt(k): disk radius sqrt(k) tanh(rho / 2)), so it stays fine where the fields steepen near the boundary
    rho = torch.linspace(0.0, 2.0 * math.atanh(float(edge)), int(grid[0]), dtype=q.dtype)
    rad = root_k * torch.tanh(rho / 2.0)
    ang = torch.linspace(0.0, 2.0 * math.pi, int(grid[1]), dtype=q.dtype)
    px, py = rad[:, None] * torch.cos(ang)[None, :], rad[:, None] * torch.sin(ang)[None, :]
    points = L.from_poincare(torch.stack([px, py], dim=-1).reshape(-1, 2), kf)
    qq = q[None, :]
    fields = (
        att.scores(qq, points, "spatial", k=kf)[0],  # q_s . x_s
        -2.0 * att.scores(qq, points, "distance", k=kf)[0],  # |q - x|^2_L
    )
    key_scores = (att.scores(qq, kk, "spatial", k=kf)[0], -2.0 * att.scores(qq, kk, "distance", k=kf)[0])
    weights = [att.attention_map(qq, kk, kind, k=kf, temperature=temperature)[0] for kind in ("spatial", "distance")]
    w_np = [w.detach().cpu().double().numpy() for w in weights]
    disk_q = L.to_poincare(q, kf).detach().cpu().double().numpy()
    disk_k = L.to_poincare(kk, kf).detach().cpu().double().numpy()
    gx, gy = px.detach().cpu().double().numpy(), py.detach().cpu().double().numpy()
    if isinstance(levels, (int, np.integer)) and not isinstance(levels, bool):
        level_sets = [_level_values(s.detach().cpu().double().numpy(), levels) for s in key_scores]
    else:
        if len(levels) != 2:
            raise ValueError("disk_level_sets_mpl: levels must be an int or a pair (spatial levels, |q - kappa|^2_L levels)")
        level_sets = [np.sort(_as_1d(lv, "levels")) for lv in levels]

    if axes is None:
        fig = style.new_figure((10.4, 4.9))
        panels = list(fig.subplots(1, 2))
    else:
        panels = list(axes)
        if len(panels) != 2:
            raise ValueError(f"disk_level_sets_mpl: axes must be two Axes, got {len(panels)}")
        fig = panels[0].figure
    norm = Normalize(vmin=0.0, vmax=max(float(w.max()) for w in w_np))
    titles = (
        r"spatial: level sets of $q_s \cdot \kappa_s$" "\n" r"weights $\mathrm{softmax}_j(q_s \cdot \kappa_{s,j} / \tau)$",
        r"distance: level sets of $\|q - \kappa\|_L^2$" "\n" r"weights $\mathrm{softmax}_j(-\frac{1}{2}\|q - \kappa_j\|_L^2 / \tau)$",
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
        ax.legend(fontsize=7, loc="lower left")
    cbar = fig.colorbar(dots, ax=panels, shrink=0.85)
    cbar.set_label(rf"attention weight of key $\kappa_j$ (query $q$, $\tau = {float(temperature):.3g}$)")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


# --------------------------------------------------------------------------- #
# cost curves
# --------------------------------------------------------------------------- #
def crossover(x: ArrayLike, y1: ArrayLike, y2: ArrayLike) -> float | None:
    r"""The first ``x`` where ``y1`` and ``y2`` cross, interpolated linearly in log-log; ``None`` if they do not.

    With :math:`r_i = \log(y_{1,i}/y_{2,i})`, a crossing is a tie (:math:`r_i = 0`, giving
    :math:`x_i`) or a change of sign between consecutive points, where

    .. math::

        x^* = \exp\bigl(\log x_i + t\,(\log x_{i+1} - \log x_i)\bigr), \qquad t = \frac{r_i}{r_i - r_{i+1}}.

    Raises
    ------
    ValueError
        When the three arrays differ in length or hold a non-positive value.
    """
    xs, a, b = _as_1d(x, "x"), _as_1d(y1, "y1"), _as_1d(y2, "y2")
    if not (xs.size == a.size == b.size):
        raise ValueError(f"crossover: x, y1, y2 differ in length ({xs.size}, {a.size}, {b.size})")
    if np.any(xs <= 0) or np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("crossover: x, y1 and y2 must be positive (log-log interpolation)")
    r = np.log(a) - np.log(b)
    lx = np.log(xs)
    for i in range(xs.size - 1):
        if r[i] == 0:
            return float(xs[i])
        if r[i] * r[i + 1] < 0:
            t = r[i] / (r[i] - r[i + 1])
            return float(math.exp(lx[i] + t * (lx[i + 1] - lx[i])))
    if r[-1] == 0:
        return float(xs[-1])
    return None


def cost_curves_mpl(
    n: ArrayLike,
    times: Mapping[str, ArrayLike],
    memory: Mapping[str, ArrayLike],
    *,
    memory_label: str = "peak memory (MiB)",
    xlabel: str = r"sequence length $N$",
    title: str = r"cost of $Q(K^\top V)$ against $(QK^\top)V$",
    mark_crossover: bool = True,
) -> Figure:
    """Time (s) and peak memory (bytes, drawn in MiB) against ``N``, log-log, crossovers marked.

    ``times`` and ``memory`` map a label to one value per ``N``; a missing value is ``nan`` (e.g. the
    quadratic form where it did not fit).  Several curves may share a panel; the crossover of the
    first two curves of each panel (:func:`crossover`, on the points where both are finite and
    positive) is marked with a vertical line.

    Raises
    ------
    ValueError
        When a curve does not have one value per ``N``.
    """
    ns = _as_1d(n, "n")
    fig = style.new_figure((10.0, 4.0))
    ax_t, ax_m = fig.subplots(1, 2)
    panels = ((ax_t, times, 1.0, "time (s)", "time"), (ax_m, memory, 1.0 / 2**20, memory_label, "memory"))
    for ax, series, scale, ylabel, what in panels:
        curves = []
        for i, (label, values) in enumerate(series.items()):
            v = _as_1d(values, label) * scale
            if v.size != ns.size:
                raise ValueError(f"cost_curves_mpl: {label!r} has {v.size} values for {ns.size} sizes")
            curves.append(v)
            ax.plot(ns, _positive(v), color=style.colour(i), marker=style.marker(i), ls="-", label=label)
        if mark_crossover and len(curves) >= 2:
            ok = np.isfinite(curves[0]) & np.isfinite(curves[1]) & (curves[0] > 0) & (curves[1] > 0)
            x_cross = crossover(ns[ok], curves[0][ok], curves[1][ok]) if ok.sum() >= 2 else None
            if x_cross is not None:
                ax.axvline(x_cross, color=style.BOUND, ls=":", lw=1.2, label=f"{what} crossover, $N \\approx {x_cross:.3g}$")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_title("time")
    ax_m.set_title("peak memory")
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- #
# distributions of per-row statistics
# --------------------------------------------------------------------------- #
def row_distribution_mpl(
    values: Mapping[str, ArrayLike],
    *,
    xlabel: str = r"row total variation $\mathrm{TV}(A_{i\cdot}, B_{i\cdot})$",
    title: str = "per-row distance between two attention maps",
    bins: int = 30,
    log: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """Histograms (outlined, one colour and line style per entry) of per-row statistics, e.g. row TVs.

    All entries share ``bins`` bins, evenly spaced (or log-spaced with ``log``) over the range of
    all values.  With ``ax`` the histograms are drawn there (its figure is returned); otherwise a
    new figure is made.
    """
    arrays = {label: _as_1d(v, label) for label, v in values.items()}
    if not arrays:
        raise ValueError("row_distribution_mpl: nothing to draw")
    allv = np.concatenate(list(arrays.values()))
    lo, hi = float(np.nanmin(allv)), float(np.nanmax(allv))
    if log:
        lo = max(lo, 1e-300)
        edges = np.geomspace(lo, max(hi, lo * 10), bins + 1)
    else:
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    if ax is None:
        fig = style.new_figure((5.5, 3.6))
        ax = fig.subplots()
    else:
        fig = ax.figure
    styles = ("-", "--", "-.", ":")
    for i, (label, v) in enumerate(arrays.items()):
        ax.hist(v, bins=edges, histtype="step", lw=1.8, color=style.colour(i), ls=styles[i % 4], label=label)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("number of query rows")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
