"""The pieces every explorable is built from: rounding that reproduces, argument checks, figure parts.

Used by :mod:`hypviz.plots.explorables` (and importable for tests).  What a figure stores is compared exactly by nbval on
other machines, so every stored number goes through :func:`sig` (log axes: significant digits) or
:func:`fixed` (linear axes: decimals set by the scale), which give one more digit to a value
within ``_MARGIN`` of a rounding boundary.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

import hypviz.plots.style as style
from hypviz import lorentz as L
from hypviz.base import kinds, validate
from hypviz.plots.manifold_plotly import rounded

ArrayLike = Any

COLOURS = style.CYCLE  # Okabe-Ito, colour-blind safe (hypviz.plots.style)
REFERENCE = "#555555"  # reference lines drawn thin and dotted: y = x, the 'close' threshold
QUERY = style.QUERY
TEMPLATE = "none"  # plotly.js defaults: a 58-character template instead of plotly's 7 kB default


# --------------------------------------------------------------------------- #
# rounding: what a figure stores must be reproducible to the last digit
# --------------------------------------------------------------------------- #
_MARGIN = 1e-9  # relative: a value this close to a rounding boundary gets one more digit (noise is ~1e-15)


def _sig_text(v: float, digits: int) -> str:
    """``v`` to ``digits`` significant digits, or more where ``v`` sits within ``_MARGIN`` of a rounding boundary.

    ``1.625`` (exact in binary) would print as ``1.62`` here and ``1.63`` on a machine whose last bit
    differs; it is written ``1.625`` everywhere instead.
    """
    for d in range(digits, digits + 4):
        text = f"{v:.{d}g}"
        if f"{v * (1 - _MARGIN):.{d}g}" == text == f"{v * (1 + _MARGIN):.{d}g}":
            return text
    return f"{v:.{digits + 4}g}"


def sig(values: ArrayLike, digits: int) -> Any:
    """Each value to ``digits`` significant digits (for log axes; see :func:`_sig_text`); NaN becomes ``None``.

    Nested lists of the array's shape; a single value (0-d) as a float or ``None``."""
    arr = np.asarray(values, dtype=np.float64)
    flat = [float(_sig_text(v, digits)) + 0.0 if math.isfinite(v) else None for v in arr.ravel().tolist()]
    if arr.ndim == 0:
        return flat[0]
    return np.array(flat, dtype=object).reshape(arr.shape).tolist()


def decimals_for(magnitude: float, digits: int) -> int:
    """Decimals that keep ``digits`` significant digits of ``magnitude`` (the largest magnitude drawn)."""
    if not (math.isfinite(magnitude) and magnitude > 0):
        return digits
    return max(0, digits - 1 - math.floor(math.log10(magnitude)))


def fixed(values: ArrayLike, decimals: int) -> list:
    """Fixed decimals (for linear axes) with :func:`hypviz.plots.manifold_plotly.rounded` (``-0.0`` stored as ``0.0``).

    A value within ``_MARGIN`` (relative to the largest magnitude) of a rounding boundary gets one
    more decimal, up to three more, so that no stored digit depends on the last bit of a float.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return rounded(arr, decimals)
    eps = _MARGIN * max(float(np.nanmax(np.abs(arr))), 1e-300)

    def unsure(dec: int) -> np.ndarray:
        return (np.round(arr - eps, dec) != np.round(arr + eps, dec)) & np.isfinite(arr)

    out = np.round(arr, decimals)
    pending = unsure(decimals)
    for extra in range(1, 4):
        if not pending.any():
            break
        out = np.where(pending, np.round(arr, decimals + extra), out)
        pending &= unsure(decimals + extra)
    return rounded(out, decimals + 3)


def label(x: float, digits: int = 3) -> str:
    """A number in text (titles, slider labels): ``digits`` significant digits, more at a rounding boundary."""
    return _sig_text(float(x), digits)


# --------------------------------------------------------------------------- #
# input checks: one-line ValueErrors naming the parameter
# --------------------------------------------------------------------------- #
def checked_points(x: ArrayLike, name: str, *, k: float, d: int | None = None) -> torch.Tensor:
    """``(N, d + 1)`` points on ``<x, x>_L = -k`` as float64 (points made in float32 are checked there and re-lifted)."""
    t = L.as_tensor(x, name)
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 2:
        raise ValueError(f"{name}: expected points of shape (N, d + 1) with N >= 1, d >= 1 (time first), "
                         f"got shape {tuple(t.shape)}")
    if d is not None and t.shape[1] != d + 1:
        raise ValueError(f"{name}: expected {d + 1} coordinates per point (d = {d}), got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name}: expected floating-point coordinates, got {t.dtype}")
    L.check_points(t, k=k, name=name)
    t = t.detach().cpu()
    if t.dtype != torch.float64:
        t = L.lift(t[:, 1:].to(torch.float64), k=k)
    return t


def checked_grid(values: ArrayLike, name: str, *, positive: bool = True) -> np.ndarray:
    """A strictly monotone 1-D grid of finite (positive) numbers, the positions of a slider."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a sequence of numbers, got {values!r}") from None
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name}: expected a 1-D sequence of at least 2 values (slider positions), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or (positive and not np.all(arr > 0)):
        raise ValueError(f"{name}: every value must be finite{' and positive' if positive else ''}, got {arr.tolist()}")
    steps = np.diff(arr)
    if not (np.all(steps > 0) or np.all(steps < 0)):
        raise ValueError(f"{name}: values must be strictly increasing or strictly decreasing, got {arr.tolist()}")
    return arr


def checked_index(value: Any, name: str, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer index of the {what}, got {value!r}")
    i = int(value)
    if not 0 <= i < size:
        raise ValueError(f"{name} = {i} is out of range: there are {size} {what} (0 .. {size - 1})")
    return i


def grid_position(value: Any, grid: np.ndarray, name: str, default: int) -> int:
    """The slider index of ``value`` (one of the grid values), or ``default`` when ``value`` is None."""
    if value is None:
        return default
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be one of the grid values {grid.tolist()}, got {value!r}") from None
    hits = [i for i, g in enumerate(grid.tolist()) if math.isclose(v, g, rel_tol=1e-9, abs_tol=0.0)]
    if not hits:
        raise ValueError(f"{name} must be one of the grid values {grid.tolist()}, got {value!r}")
    return hits[0]


def checked_positive(value: Any, name: str) -> float:
    return validate.positive(value, name)


def checked_kind(kind: Any, name: str) -> str:
    return validate.choice(kind, name, kinds.comparable())


def check_digits(digits: Any) -> int:
    return validate.integer(digits, "digits", 2, maximum=6)


# --------------------------------------------------------------------------- #
# figure pieces
# --------------------------------------------------------------------------- #
# vertical layout, in px: title block, the plots, their axis titles, the slider(s), the legend
_TOP, _AXIS, _SLIDER, _LEGEND_ROW = 95, 58, 110, 21


def slider_menu(prefix: str, labels: Sequence[str], args: Sequence[list], active: int, x: float, length: float) -> dict:
    steps = [dict(method="restyle", label=lab, args=a) for lab, a in zip(labels, args)]
    return dict(active=active, steps=steps, x=x, len=length, y=0.0, yanchor="top", xanchor="left",
                pad=dict(t=_AXIS, b=10), currentvalue=dict(prefix=prefix, visible=True, xanchor="left"))


def frame(height: int, legend_rows: int, sliders: bool = True) -> dict:
    """Margins and the legend's place: the legend sits under the slider(s), which sit under the axis titles."""
    below = _AXIS + (_SLIDER if sliders else 0)
    b = below + legend_rows * _LEGEND_ROW + 12
    plot = height - _TOP - b
    if plot < 150:
        raise ValueError(f"height = {height} px leaves {plot} px for the plots; give at least {height + 150 - plot}")
    return dict(height=height, margin=dict(l=70, r=30, t=_TOP, b=b),
                legend=dict(orientation="h", x=0.0, y=round(-below / plot, 4), xanchor="left", yanchor="top",
                            font=dict(size=10)))


def title_dict(text: str, note: str = "") -> dict:
    full = text if not note else f"{text}<br><sup>{note}</sup>"
    return dict(text=full, x=0.5, xanchor="center")


def weights_scatter(go, x, y, colour, *, visible, name, hover, coloraxis="coloraxis", showlegend=False, size=6):
    return go.Scatter(x=x, y=y, mode="markers", visible=visible, name=name, showlegend=showlegend,
                      marker=dict(size=size, color=colour, coloraxis=coloraxis, line=dict(width=0.4, color="#333333")),
                      hovertemplate=hover + "<extra></extra>", xaxis="x3", yaxis="y3")


def diagonal(go, lo: float, hi: float, xaxis: str, yaxis: str) -> Any:
    return go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color=REFERENCE, width=1, dash="dot"),
                      name="y = x (the two maps agree)", hoverinfo="skip", xaxis=xaxis, yaxis=yaxis, showlegend=True)


def uniform_point(go, xaxis: str, yaxis: str) -> Any:
    return go.Scatter(x=[1.0], y=[1.0], mode="markers", marker=dict(symbol="x", size=11, color=style.BLACK),
                      name="(1, 1): the uniform row U", hoverinfo="skip", xaxis=xaxis, yaxis=yaxis, showlegend=True)


def legend_line(go, name: str, colour: str, dash: str) -> Any:
    """A legend entry only (no data): names a colour or a line style used by several traces."""
    return go.Scatter(x=[None], y=[None], mode="lines", line=dict(color=colour, dash=dash, width=2), name=name,
                      hoverinfo="skip", showlegend=True)


def decades(**kwargs: Any) -> dict:
    """A log axis labelled at the decades as powers of ten."""
    return dict(type="log", dtick=1, exponentformat="power", **kwargs)


def three_panels(titles: Sequence[str], spacing: float = 0.085):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=3, subplot_titles=list(titles), horizontal_spacing=spacing)


def log_range(lo: float, hi: float) -> list[float]:
    return [round(math.log10(lo), 4), round(math.log10(hi), 4)]
