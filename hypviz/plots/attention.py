"""Attention pictures: heatmaps side by side, difference maps, bound curves, cost curves.

Every function takes maps, per-row statistics or :class:`hypviz.attention.Comparison` results
(computed by :mod:`hypviz.attention`, never here) and returns a ``matplotlib.figure.Figure``
made without pyplot (shown once when returned from a notebook cell; save it with
``fig.savefig``).  Figures are labelled (axes with units, colourbars saying what they
measure, mathtext titles) and colour-blind safe: ``viridis`` for weights, ``RdBu_r`` centred
on zero for differences, Okabe-Ito colours plus distinct line styles and markers for curves.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import torch

__all__ = [
    "heatmaps_mpl",
    "difference_map_mpl",
    "difference_maps_mpl",
    "bound_sweep_mpl",
    "cost_curves_mpl",
    "row_distribution_mpl",
    "crossover",
]

ArrayLike = Any

# Okabe-Ito (colour-blind safe)
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#56B4E9", "#CC79A7", "#000000")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_BOUND_COLOUR = "#000000"


def _new_figure(figsize: tuple[float, float]):
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


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
):
    """Attention maps side by side on one shared colour scale, with one labelled colourbar.

    ``maps`` are ``(N, M)`` arrays or tensors (e.g. from :func:`hypviz.attention.attention_map`);
    the scale runs from ``vmin`` (default 0) to ``vmax`` (default the largest weight of all maps).
    """
    from matplotlib.colors import Normalize

    arrays = [_as_2d(m, f"maps[{i}]") for i, m in enumerate(maps)]
    if not arrays or len(titles) != len(arrays):
        raise ValueError(f"heatmaps_mpl: need one title per map, got {len(arrays)} maps and {len(titles)} titles")
    lo = 0.0 if vmin is None else float(vmin)
    hi = max(float(a.max()) for a in arrays) if vmax is None else float(vmax)
    norm = Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1.0)
    fig = _new_figure((panel_size * len(arrays) + 1.2, panel_size + 0.6))
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
    ax=None,
):
    """``map_b - map_a`` on a diverging colormap centred on zero (symmetric limits ``+-limit``).

    ``limit`` defaults to the largest absolute difference, so that two difference maps can share
    a scale when given the same ``limit``.  With ``ax`` the map is drawn there (its figure is
    returned); otherwise a new figure is made.
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
        fig = _new_figure((4.4, 3.6))
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
):
    """Several differences ``map_b - map_a`` side by side on ONE zero-centred diverging scale.

    ``pairs`` holds ``(map_a, map_b)``; ``limit`` defaults to the largest absolute difference of
    all pairs, so a panel that looks white really is (nearly) zero next to the others.
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
    fig = _new_figure((panel_size * len(diffs) + 1.4, panel_size + 0.6))
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
    title: str = r"spatial vs distance softmax: measured error and the bound $\Delta$",
):
    """Mean and max row TV and KL of each :class:`~hypviz.attention.Comparison`, with the bound overlaid.

    Left: ``TV`` (mean, max) and the bound ``tanh(Delta/4)`` (mean and max over rows); right:
    ``KL(P_b || P_a)`` and ``Delta^2/8``.  Log-log axes; zero values are not drawn.
    """
    xs = _as_1d(x, "x")
    if len(results) != xs.size:
        raise ValueError(f"bound_sweep_mpl: {xs.size} sweep values but {len(results)} results")

    def stat(field: str, how: str) -> np.ndarray:
        vals = []
        for r in results:
            t = getattr(r, field).detach().double()
            vals.append(float(t.mean() if how == "mean" else t.max()))
        return np.asarray(vals)

    fig = _new_figure((10.0, 4.0))
    ax_tv, ax_kl = fig.subplots(1, 2)
    panels = (
        (ax_tv, "tv", "tv_bound", r"$\mathrm{TV}(P_a, P_b)$", r"$\tanh(\Delta/4)$", "total variation (probability)"),
        (ax_kl, "kl", "kl_bound", r"$\mathrm{KL}(P_b \,\|\, P_a)$", r"$\Delta^2/8$", "KL divergence (nats)"),
    )
    for ax, field, bound, name, bname, ylabel in panels:
        ax.plot(xs, _positive(stat(field, "max")), color=_COLOURS[1], marker=_MARKERS[1], ls="-", label=f"max {name}")
        ax.plot(xs, _positive(stat(field, "mean")), color=_COLOURS[0], marker=_MARKERS[0], ls="-", label=f"mean {name}")
        ax.plot(xs, _positive(stat(bound, "max")), color=_BOUND_COLOUR, ls="--", label=f"bound: max {bname}")
        ax.plot(xs, _positive(stat(bound, "mean")), color=_BOUND_COLOUR, ls=":", label=f"bound: mean {bname}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    ax_tv.set_title(r"$\mathrm{TV} \leq \tanh(\Delta/4)$ per row")
    ax_kl.set_title(r"$\mathrm{KL} \leq \Delta^2/8$ per row")
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- #
# cost curves
# --------------------------------------------------------------------------- #
def crossover(x: ArrayLike, y1: ArrayLike, y2: ArrayLike) -> float | None:
    """The first ``x`` where ``y1`` and ``y2`` cross, interpolated linearly in log-log; ``None`` if they do not.

    A crossing is a change of sign of ``log(y1 / y2)`` between consecutive points (or a tie).
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
):
    """Time (s) and peak memory (bytes, drawn in MiB) against ``N``, log-log, crossovers marked.

    ``times`` and ``memory`` map a label to one value per ``N``; a missing value is ``nan``
    (e.g. the quadratic form where it did not fit).  Several curves may share a panel; the
    crossover of the first two curves of each panel is marked with a vertical line.
    """
    ns = _as_1d(n, "n")
    fig = _new_figure((10.0, 4.0))
    ax_t, ax_m = fig.subplots(1, 2)
    panels = ((ax_t, times, 1.0, "time (s)", "time"), (ax_m, memory, 1.0 / 2**20, memory_label, "memory"))
    for ax, series, scale, ylabel, what in panels:
        curves = []
        for i, (label, values) in enumerate(series.items()):
            v = _as_1d(values, label) * scale
            if v.size != ns.size:
                raise ValueError(f"cost_curves_mpl: {label!r} has {v.size} values for {ns.size} sizes")
            curves.append(v)
            ax.plot(ns, _positive(v), color=_COLOURS[i % 7], marker=_MARKERS[i % 7], ls="-", label=label)
        if mark_crossover and len(curves) >= 2:
            ok = np.isfinite(curves[0]) & np.isfinite(curves[1]) & (curves[0] > 0) & (curves[1] > 0)
            x_cross = crossover(ns[ok], curves[0][ok], curves[1][ok]) if ok.sum() >= 2 else None
            if x_cross is not None:
                ax.axvline(x_cross, color=_BOUND_COLOUR, ls=":", lw=1.2, label=f"{what} crossover, $N \\approx {x_cross:.3g}$")
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
):
    """Histograms (outlined, one colour and line style per entry) of per-row statistics, e.g. row TVs."""
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
    fig = _new_figure((5.5, 3.6))
    ax = fig.subplots()
    styles = ("-", "--", "-.", ":")
    for i, (label, v) in enumerate(arrays.items()):
        ax.hist(v, bins=edges, histtype="step", lw=1.8, color=_COLOURS[i % 7], ls=styles[i % 4], label=label)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("number of query rows")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
