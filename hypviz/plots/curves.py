"""Numerical-error and bound curves for the derivation notebooks (matplotlib).

The functions take arrays (numpy or torch) that were computed elsewhere and return a
:class:`matplotlib.figure.Figure`; nothing here computes geometry.  Figures are built with the
object-oriented API (not ``pyplot``), so a notebook cell shows a returned figure once; with
``ax=`` they are drawn into an Axes made elsewhere (its root ``Figure`` is returned), so figures
compose.  Colours are Okabe and Ito's colour-blind-safe palette (:data:`OKABE_ITO`), points
coloured by a value use ``viridis``.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

import hypviz.plots._common as common
import hypviz.plots.style as style
from hypviz.plots.style import OKABE_ITO

__all__ = ["error_curves_mpl", "bound_scatter_mpl", "interval_curves_mpl", "OKABE_ITO"]


def _array(x: Any, name: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.size == 0:
        raise ValueError(f"{name}: got an empty array; expected values to plot")
    return arr


def error_curves_mpl(
    x: Any,
    curves: Mapping[str, Any],
    *,
    reference_lines: Mapping[str, float] | None = None,
    xlabel: str = r"separation $\|x_s - y_s\|$ (spatial units)",
    ylabel: str = "relative error (dimensionless)",
    title: str = r"Relative error of $\|x - y\|_L^2$",
    floor: float = 1e-18,
    invert_x: bool = False,
    figsize: tuple[float, float] = (6.4, 4.6),
    ax: Axes | None = None,
) -> Figure:
    r"""Log-log error curves: one line per entry of ``curves``, against ``x``.

    A curve given as ``(n, m)`` samples per ``x`` is drawn as the median with a shaded min-max band
    (NaN samples ignored); labels containing ``"float32"`` are dashed.  Values are drawn at
    :math:`\max(y, \mathrm{floor})`, so exact zeros stay on the log axis.

    Parameters
    ----------
    x : array, shape (n,)
        Positive values (e.g. separations :math:`\|x_s - y_s\|`).
    curves : mapping
        Label -> ``(n,)`` values, or ``(n, m)`` samples per ``x``.
    reference_lines : mapping, optional
        Label -> value, drawn as dotted horizontal lines (e.g. machine epsilons).
    floor : float
        Values below it (exact zeros included) are drawn at ``floor``.
    invert_x : bool
        Draw ``x`` decreasing to the right (e.g. "points getting closer").
    xlabel, ylabel, title : str
        Axis labels with units and a (LaTeX) title.
    figsize : tuple of float
        Size of a new figure, in inches.
    ax : matplotlib.axes.Axes, optional
        Draw into this Axes (of a figure made elsewhere) instead of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        One log-log axes (the root figure of ``ax`` when ``ax`` is given).

    Raises
    ------
    ValueError
        For non-positive or non-1-D ``x``, no curves, an empty curve or one whose length is not ``n``;
        ``TypeError`` for an ``ax`` that is not a matplotlib Axes.
    """
    xs = _array(x, "x")
    if xs.ndim != 1 or not np.all(xs > 0):
        raise ValueError(f"x: expected a 1-D array of positive values, got shape {xs.shape}")
    if not curves:
        raise ValueError("curves: expected at least one labelled curve")
    fig, ax = common.single(ax, figsize)
    for i, (label, values) in enumerate(curves.items()):
        ys = _array(values, f"curves[{label!r}]")
        if ys.shape[0] != xs.shape[0] or ys.ndim not in (1, 2):
            raise ValueError(f"curves[{label!r}]: expected shape ({xs.shape[0]},) or ({xs.shape[0]}, m), got {ys.shape}")
        color = OKABE_ITO[i % len(OKABE_ITO)]
        line = "--" if "float32" in label else "-"
        if ys.ndim == 2:
            with np.errstate(all="ignore"):
                med = np.nanmedian(ys, axis=1)
                lo, hi = np.nanmin(ys, axis=1), np.nanmax(ys, axis=1)
            ax.fill_between(xs, np.maximum(lo, floor), np.maximum(hi, floor), color=color, alpha=0.15, linewidth=0)
        else:
            med = ys
        ax.plot(xs, np.maximum(med, floor), line, color=color, marker=style.marker(i), label=label)
    for label, value in (reference_lines or {}).items():
        ax.axhline(value, color="0.45", linestyle=":", linewidth=1.0)
        ax.annotate(label, (0.01, value), xycoords=("axes fraction", "data"), xytext=(0, 3),
                    textcoords="offset points", fontsize=8, color="0.3")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if invert_x:
        ax.invert_xaxis()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return common.root(fig)


def bound_scatter_mpl(
    bound: Any,
    measured: Any,
    *,
    color: Any | None = None,
    color_label: str = "spatial norm scale $r$ (spatial units)",
    log_color: bool = True,
    xlabel: str = r"bound $\tanh(\Delta/4)$ (probability)",
    ylabel: str = r"measured $\mathrm{TV}(P, S)$ (probability)",
    title: str = r"Measured total variation against the bound $\tanh(\Delta/4)$",
    figsize: tuple[float, float] = (6.4, 5.0),
    ax: Axes | None = None,
) -> Figure:
    r"""Scatter of measured values against their bound, with the line :math:`y = x` (log-log).

    Points on or below the line respect the bound, e.g. :math:`\mathrm{TV}(P, S) \le \tanh(\Delta/4)`.
    ``color`` (one value per point) colours the points with ``viridis`` and a colourbar labelled
    ``color_label`` (on a log scale when ``log_color`` and every drawn value is positive).  Pairs with a
    non-positive or non-finite value are left out of the log axes (their count is written in the
    legend).  With ``ax`` the scatter is drawn into that Axes (its figure gets the colourbar).

    Returns
    -------
    matplotlib.figure.Figure
        One log-log axes (and a colourbar when ``color`` is given).

    Raises
    ------
    ValueError
        When ``bound``, ``measured`` (and ``color``) differ in length, or no pair is positive and finite;
        ``TypeError`` for an ``ax`` that is not a matplotlib Axes.
    """
    b = _array(bound, "bound").ravel()
    m = _array(measured, "measured").ravel()
    if b.shape != m.shape:
        raise ValueError(f"bound and measured must have the same number of values, got {b.size} and {m.size}")
    keep = (b > 0) & (m > 0) & np.isfinite(b) & np.isfinite(m)
    if not keep.any():
        raise ValueError("bound_scatter_mpl: no pair with both values positive and finite to draw on log axes")
    fig, ax = common.single(ax, figsize)
    label = f"{int(keep.sum())} rows"
    if int((~keep).sum()):
        label += f" ({int((~keep).sum())} with a zero left out)"
    if color is not None:
        c = _array(color, "color").ravel()
        if c.shape != b.shape:
            raise ValueError(f"color must have one value per point ({b.size}), got {c.size}")
        norm = LogNorm(c[keep].min(), c[keep].max()) if log_color and np.all(c[keep] > 0) else Normalize()
        sc = ax.scatter(b[keep], m[keep], c=c[keep], cmap=style.SEQUENTIAL, norm=norm, s=4, alpha=0.6, linewidths=0,
                        rasterized=True, label=label)
        fig.colorbar(sc, ax=ax, label=color_label)
    else:
        ax.scatter(b[keep], m[keep], color=OKABE_ITO[5], s=4, alpha=0.6, linewidths=0, rasterized=True, label=label)
    lo = min(b[keep].min(), m[keep].min())
    hi = max(b[keep].max(), m[keep].max())
    line = np.array([lo, hi])
    ax.plot(line, line, color=OKABE_ITO[4], linewidth=1.5, label="bound ($y = x$)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return common.root(fig)


def interval_curves_mpl(
    series: Mapping[str, tuple[Any, ...]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    references: Mapping[str, float] | None = None,
    xscale: str = "log",
    yscale: str = "linear",
    figsize: tuple[float, float] = (8.8, 3.8),
    ax: Axes | None = None,
) -> Figure:
    r"""Measured values against a swept parameter, one colour and marker per series, with their intervals.

    ``series`` maps a label to ``(x, y)`` or ``(x, y, lo, hi)``, arrays of one value per point,
    computed elsewhere (e.g. a mean over seeds and the 95 % confidence interval of that mean); with
    ``lo`` and ``hi`` each point gets an error bar from ``lo`` to ``hi``.  ``references`` maps a label
    to a value drawn as a dotted horizontal line (e.g. a first-order prediction).  With ``ax`` the
    curves are drawn into that Axes (its root figure is returned).

    Raises
    ------
    ValueError
        For no series, a series that is not 2 or 4 arrays of one common length, or an interval with
        ``lo > y`` or ``y > hi``; ``TypeError`` for an ``ax`` that is not a matplotlib Axes.
    """
    if not series:
        raise ValueError("interval_curves_mpl: got no series to draw")
    checked = []
    for label, arrays in series.items():
        if len(arrays) not in (2, 4):
            raise ValueError(f"series {label!r}: expected (x, y) or (x, y, lo, hi), got {len(arrays)} arrays")
        x, y, *band = (_array(a, f"series {label!r}").ravel() for a in arrays)
        if any(a.shape != x.shape for a in (y, *band)):
            raise ValueError(f"series {label!r}: x, y (and lo, hi) must have one common length")
        if band and (np.any(band[0] > y) or np.any(y > band[1])):
            raise ValueError(f"series {label!r}: every interval must hold its value (lo <= y <= hi)")
        checked.append((label, x, y, band))
    fig, ax = common.single(ax, figsize)
    for i, (label, x, y, band) in enumerate(checked):
        style_kw: dict[str, Any] = dict(color=style.colour(i), marker=style.marker(i), markersize=5, linewidth=1.4, label=label)
        if band:
            ax.errorbar(x, y, yerr=np.stack([y - band[0], band[1] - y]), capsize=3, elinewidth=1.2, **style_kw)
        else:
            ax.plot(x, y, **style_kw)
    for j, (label, value) in enumerate((references or {}).items()):
        ax.axhline(float(value), color=style.BOUND, linestyle=(":", "--", "-.")[j % 3], linewidth=1.2, label=label)
    ax.set_xscale(xscale)
    ax.set_yscale(yscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return common.root(fig)

