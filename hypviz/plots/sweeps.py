r"""Curves of attention comparisons: the bound against a sweep, the gap next to its baseline, costs, per-row spreads.

Every function takes per-row statistics or :class:`hypviz.attention.Comparison` results (computed
by :mod:`hypviz.attention`, never here) and returns a ``matplotlib.figure.Figure`` made without
pyplot (shown once when returned from a notebook cell; save it with ``fig.savefig``).  With
``axes=`` (one Axes per panel) or ``ax=`` (one) the panels are drawn there, the overall title on
those Axes' ``Figure`` or ``SubFigure``, and the root ``Figure`` is returned, so figures compose.
Curves are Okabe-Ito colours with distinct line styles and markers; zero values are not drawn on
log axes.  These functions are also importable from :mod:`hypviz.plots.attention`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

import hypviz.plots._common as common
import hypviz.plots.style as style
from hypviz.plots._common import as_1d as _as_1d
from hypviz.plots._common import positive as _positive

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "bound_sweep_mpl",
    "comparison_sweep_mpl",
    "cost_curves_mpl",
    "row_distribution_mpl",
    "crossover",
]

ArrayLike = Any


# --------------------------------------------------------------------------- #
# the bound: TV and KL against a sweep parameter
# --------------------------------------------------------------------------- #
def bound_sweep_mpl(
    x: ArrayLike,
    results: Sequence[Any],
    *,
    xlabel: str = r"norm scale $r$ of the spatial parts",
    title: str = r"spatial vs distance softmax: measured gap and the bound $\Delta$",
    axes: Sequence[Axes] | None = None,
) -> Figure:
    r"""Mean and max row TV and KL of each :class:`~hypviz.attention.Comparison` of a sweep, with the bounds overlaid.

    .. math::

        \mathrm{TV}(P_a, P_b) \le \tanh\frac{\Delta}{4}, \qquad
        \mathrm{KL}(P_b \,\|\, P_a) \le \log\frac{e^\Delta - 1}{\Delta} - 1 + \frac{\Delta}{e^\Delta - 1}
                                   \le \frac{\Delta^2}{8}

    Left: TV (mean, max over rows) and ``Comparison.tv_bound`` (mean and max over rows).  Right:
    KL (mean, max), the exact supremum ``Comparison.kl_bound`` (mean and max) and Hoeffding's
    simpler ``Comparison.kl_bound_hoeffding`` (max).  One comparison per sweep value ``x``; log-log
    axes; zero values are not drawn.  ``axes``: the two Axes (TV, KL) to draw into.

    Raises
    ------
    ValueError
        When ``x`` and ``results`` differ in length, a result does not compare two softmax kinds
        (the bound does not apply to ``"focused"``, whose ``delta`` is ``None``), or ``axes`` are not
        two Axes of one figure.
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

    fig, (ax_tv, ax_kl) = common.panels(axes, 2, (8.8, 3.8))
    panels = (
        (ax_tv, "tv", "tv_bound", r"$\mathrm{TV}(P_a, P_b)$", r"$\tanh(\Delta/4)$", "total variation (probability)"),
        (ax_kl, "kl", "kl_bound", r"$\mathrm{KL}(P_b \,\|\, P_a)$", r"$\sup \mathrm{KL}(\Delta)$ (exact)",
         "KL divergence (nats)"),
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
    return common.root(fig)


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
    axes: Sequence[Axes] | None = None,
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

    Curves of different series that coincide show a collapse onto ``x``.  ``axes``: the three Axes
    to draw into.

    Raises
    ------
    ValueError
        For no series, an ``xscale`` other than ``"log"`` and ``"linear"``, a series whose ``x`` and
        ``results`` differ in length, a non-positive ``x`` on a log axis, or ``axes`` that are not
        three Axes of one figure.
    """
    from matplotlib.lines import Line2D

    from hypviz import attention as att

    if not series:
        raise ValueError("comparison_sweep_mpl: nothing to draw (series is empty)")
    if xscale not in ("log", "linear"):
        raise ValueError(f"comparison_sweep_mpl: xscale must be 'log' or 'linear', got {xscale!r}")
    ratio_line = att.CLOSE_RATIO if close_ratio is None else float(close_ratio)
    fig, (ax_tv, ax_ratio, ax_rank) = common.panels(axes, 3, (8.8, 3.8))
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
    return common.root(fig)


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
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """Time (s) and peak memory (bytes, drawn in MiB) against ``N``, log-log, crossovers marked.

    ``times`` and ``memory`` map a label to one value per ``N``; a missing value is ``nan`` (e.g. the
    quadratic form where it did not fit).  Several curves may share a panel; the crossover of the
    first two curves of each panel (:func:`crossover`, on the points where both are finite and
    positive) is marked with a vertical line.  ``axes``: the two Axes (time, memory) to draw into.

    Raises
    ------
    ValueError
        When a curve does not have one value per ``N``, or ``axes`` are not two Axes of one figure.
    """
    ns = _as_1d(n, "n")
    fig, (ax_t, ax_m) = common.panels(axes, 2, (8.8, 3.8))
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
    return common.root(fig)


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

    Raises
    ------
    ValueError
        For no entries or an empty one; ``TypeError`` for an ``ax`` that is not a matplotlib Axes.
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
    fig, ax = common.single(ax, (5.5, 3.6))
    styles = ("-", "--", "-.", ":")
    for i, (label, v) in enumerate(arrays.items()):
        ax.hist(v, bins=edges.tolist(), histtype="step", lw=1.8, color=style.colour(i), ls=styles[i % 4], label=label)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("number of query rows")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return common.root(fig)
