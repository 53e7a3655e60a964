"""Interactive explorables: plotly figures with sliders that work without a kernel, and a still beside each.

Each explorer takes points (and the grid its slider runs over), gets every number from
:mod:`hypviz.attention` and :mod:`hypviz.lorentz` in float64, and returns a
``plotly.graph_objects.Figure`` whose sliders use ``"restyle"`` steps: every slider position's
data is stored in the figure, so the sliders work in a static page and in JupyterLab with no
kernel running.  Two sliders of one figure never fight: a figure holds one copy of each
per-parameter trace, a slider over the second parameter only switches which copy is visible.

=================================== ==================================================================
:func:`norm_temperature_explorer`   norm scale ``r`` and temperature ``tau``: the gap
                                    ``TV(spatial, distance)`` and the baseline ``TV(distance, U)``
                                    against ``r`` and against ``r^2/tau`` (where they collapse), and
                                    one query's weights under both maps
:func:`key_spread_explorer`         the relative spread ``s`` of the key norms at a fixed mean norm:
                                    the gap falls to 0 while the baseline stays; the weights converge
                                    onto the diagonal (the maps agree), not onto the uniform point
:func:`disk_query_explorer`         one query moving in the Poincare disk, the keys' weights under
                                    the spatial and the distance map
:func:`attention_heatmap_explorer`  two attention maps and their difference; hovering shows the
                                    query, the key, both maps' weights and the difference
=================================== ==================================================================

:func:`still_png` draws the figure's default state (the sliders' starting positions) with matplotlib,
and :func:`show` displays ONE output holding both the figure JSON, exactly as plotly's
``"plotly_mimetype"`` renderer builds it, and that PNG.  The site draws the interactive figure;
JupyterLab's plotly renderer (jupyterlab-plotly) shows the PNG until the pointer first enters it,
then draws the interactive figure in its place (and, once drawn, keeps its own picture of it as the
PNG if the notebook is saved); a code host shows the PNG.

Stored notebook outputs are compared exactly (nbval), so every number in a figure is computed in
float64 and rounded: values drawn on a log axis to ``digits`` significant digits each, values on a
linear axis to a fixed number of decimals set by the scale of what is drawn (``digits``
significant digits of the largest value), so that a difference that is rounding noise (the
Lorentzian map minus the distance map, identity 5) is stored as 0.  Slider data are plain JSON
lists; the heatmaps (no slider) are stored as plotly typed arrays of those rounded values
(float32, the form plotly itself uses for numpy arrays), which keeps a 48 x 48 figure small in a
notebook.  Text in the plotly figures is Unicode and HTML (``κ``, ``τ``, ``r²``, ``<sub>``), which
every plotly renderer draws: plotly typesets LaTeX only where the page hands it MathJax, which in
JupyterLab often fails (plotly.py issues 1740 and 4336: raw or missing titles).  The still is drawn from the same text (sub- and superscripts as mathtext).
Colours are colour-blind safe: Okabe-Ito (``hypviz.plots.style``) for curves, ``viridis`` for
weights and norms, ``RdBu_r`` centred on zero for differences.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.plots import style
from hypviz.plots.manifold import _rounded

if TYPE_CHECKING:  # plotly and matplotlib are imported lazily, inside the functions
    import plotly.graph_objects as go

__all__ = [
    "norm_temperature_explorer",
    "key_spread_explorer",
    "disk_query_explorer",
    "attention_heatmap_explorer",
    "slider_values",
    "still_png",
    "bundle",
    "show",
]

ArrayLike = Any

PLOTLY_MIME = "application/vnd.plotly.v1+json"
_COLOURS = style.CYCLE  # Okabe-Ito, colour-blind safe (hypviz.plots.style)
_REFERENCE = "#555555"  # reference lines drawn thin and dotted: y = x, the 'close' threshold
_QUERY = style.QUERY
_TEMPLATE = "none"  # plotly.js defaults: a 58-character template instead of plotly's 7 kB default


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


def _sig(values: ArrayLike, digits: int) -> list:
    """Each value to ``digits`` significant digits (for log axes; see :func:`_sig_text`); NaN becomes ``None``."""
    arr = np.asarray(values, dtype=np.float64)
    flat = [float(_sig_text(v, digits)) + 0.0 if math.isfinite(v) else None for v in arr.ravel().tolist()]
    if arr.ndim == 0:
        return flat[0]
    return np.array(flat, dtype=object).reshape(arr.shape).tolist()


def _decimals(scale: float, digits: int) -> int:
    """Decimals that keep ``digits`` significant digits of ``scale`` (the largest magnitude drawn)."""
    if not (math.isfinite(scale) and scale > 0):
        return digits
    return max(0, digits - 1 - math.floor(math.log10(scale)))


def _fixed(values: ArrayLike, decimals: int) -> list:
    """Fixed decimals (for linear axes) with :func:`hypviz.plots.manifold._rounded` (``-0.0`` stored as ``0.0``).

    A value within ``_MARGIN`` (relative to the largest magnitude) of a rounding boundary gets one
    more decimal, up to three more, so that no stored digit depends on the last bit of a float.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return _rounded(arr, decimals)
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
    return _rounded(out, decimals + 3)


def _label(x: float, digits: int = 3) -> str:
    """A number in text (titles, slider labels): ``digits`` significant digits, more at a rounding boundary."""
    return _sig_text(float(x), digits)


# --------------------------------------------------------------------------- #
# input checks: one-line ValueErrors naming the parameter
# --------------------------------------------------------------------------- #
def _points(x: ArrayLike, name: str, kf: float, d: int | None = None) -> torch.Tensor:
    """``(N, d + 1)`` points on ``<x, x>_L = -k`` as float64 (points made in float32 are checked there and re-lifted)."""
    t = L.as_tensor(x, name)
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 2:
        raise ValueError(f"{name}: expected points of shape (N, d + 1) with N >= 1, d >= 1 (time first), got shape {tuple(t.shape)}")
    if d is not None and t.shape[1] != d + 1:
        raise ValueError(f"{name}: expected {d + 1} coordinates per point (d = {d}), got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name}: expected floating-point coordinates, got {t.dtype}")
    L.check_points(t, kf, name=name)
    t = t.detach().cpu()
    if t.dtype != torch.float64:
        t = L.lift(t[:, 1:].to(torch.float64), kf)
    return t


def _grid(values: ArrayLike, name: str, *, positive: bool = True) -> np.ndarray:
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


def _index(value: Any, name: str, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer index of the {what}, got {value!r}")
    i = int(value)
    if not 0 <= i < size:
        raise ValueError(f"{name} = {i} is out of range: there are {size} {what} (0 .. {size - 1})")
    return i


def _position(value: Any, grid: np.ndarray, name: str, default: int) -> int:
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


def _positive(value: Any, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def _kind(kind: Any, name: str) -> str:
    if not isinstance(kind, str) or kind not in att.KINDS:
        raise ValueError(f"{name} must be one of {', '.join(repr(x) for x in att.KINDS)}, got {kind!r}")
    return kind


def _check_digits(digits: Any) -> int:
    if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)) or not 2 <= int(digits) <= 6:
        raise ValueError(f"digits must be an integer from 2 to 6, got {digits!r}")
    return int(digits)


# --------------------------------------------------------------------------- #
# figure pieces
# --------------------------------------------------------------------------- #
# vertical layout, in px: title block, the plots, their axis titles, the slider(s), the legend
_TOP, _AXIS, _SLIDER, _LEGEND_ROW = 95, 58, 110, 21


def _slider(prefix: str, labels: Sequence[str], args: Sequence[list], active: int, x: float, length: float) -> dict:
    steps = [dict(method="restyle", label=lab, args=a) for lab, a in zip(labels, args)]
    return dict(active=active, steps=steps, x=x, len=length, y=0.0, yanchor="top", xanchor="left",
                pad=dict(t=_AXIS, b=10), currentvalue=dict(prefix=prefix, visible=True, xanchor="left"))


def _frame(height: int, legend_rows: int, sliders: bool = True) -> dict:
    """Margins and the legend's place: the legend sits under the slider(s), which sit under the axis titles."""
    below = _AXIS + (_SLIDER if sliders else 0)
    b = below + legend_rows * _LEGEND_ROW + 12
    plot = height - _TOP - b
    if plot < 150:
        raise ValueError(f"height = {height} px leaves {plot} px for the plots; give at least {height + 150 - plot}")
    return dict(height=height, margin=dict(l=70, r=30, t=_TOP, b=b),
                legend=dict(orientation="h", x=0.0, y=round(-below / plot, 4), xanchor="left", yanchor="top",
                            font=dict(size=10)))


def _title(text: str, note: str = "") -> dict:
    full = text if not note else f"{text}<br><sup>{note}</sup>"
    return dict(text=full, x=0.5, xanchor="center")


def _weights_scatter(go, x, y, colour, *, visible, name, hover, coloraxis="coloraxis", showlegend=False, size=6):
    return go.Scatter(x=x, y=y, mode="markers", visible=visible, name=name, showlegend=showlegend,
                      marker=dict(size=size, color=colour, coloraxis=coloraxis, line=dict(width=0.4, color="#333333")),
                      hovertemplate=hover + "<extra></extra>", xaxis="x3", yaxis="y3")


def _diagonal(go, lo: float, hi: float, xaxis: str, yaxis: str) -> Any:
    return go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color=_REFERENCE, width=1, dash="dot"),
                      name="y = x (the two maps agree)", hoverinfo="skip", xaxis=xaxis, yaxis=yaxis, showlegend=True)


def _uniform_point(go, xaxis: str, yaxis: str) -> Any:
    return go.Scatter(x=[1.0], y=[1.0], mode="markers", marker=dict(symbol="x", size=11, color=style.BLACK),
                      name="(1, 1): the uniform row U", hoverinfo="skip", xaxis=xaxis, yaxis=yaxis, showlegend=True)


def _legend_line(go, name: str, colour: str, dash: str) -> Any:
    """A legend entry only (no data): names a colour or a line style used by several traces."""
    return go.Scatter(x=[None], y=[None], mode="lines", line=dict(color=colour, dash=dash, width=2), name=name,
                      hoverinfo="skip", showlegend=True)


def _decades(**kwargs: Any) -> dict:
    """A log axis labelled at the decades as powers of ten."""
    return dict(type="log", dtick=1, exponentformat="power", **kwargs)


def _three_panels(titles: Sequence[str], spacing: float = 0.085):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=3, subplot_titles=list(titles), horizontal_spacing=spacing)


def _log_range(lo: float, hi: float) -> list[float]:
    return [round(math.log10(lo), 4), round(math.log10(hi), 4)]


# --------------------------------------------------------------------------- #
# (a) norm scale and temperature
# --------------------------------------------------------------------------- #
def norm_temperature_explorer(
    queries: ArrayLike,
    keys: ArrayLike,
    radii: ArrayLike,
    temperatures: ArrayLike,
    *,
    k: float = 1.0,
    query: int = 0,
    start: tuple[float, float] | None = None,
    weight_range: tuple[float, float] = (1e-3, 1e2),
    digits: int = 4,
    height: int = 660,
) -> go.Figure:
    r"""Sliders for the norm scale ``r`` and the temperature ``tau``: gap and baseline collapse onto ``r^2/tau``.

    The spatial parts of ``queries (N, d + 1)`` and ``keys (M, d + 1)`` are multiplied by each
    ``r`` of ``radii`` and lifted (:func:`hypviz.lorentz.lift`; points of mean spatial norm 1, e.g.
    ``data.lifted_gaussian(N, d, 1.0)``, make ``r`` the mean norm); for every ``(r, tau)``,
    :func:`hypviz.attention.compare` gives the mean row gap ``TV(S, P)`` between the spatial map
    ``S = softmax(q_s . kappa_s / tau)`` and the distance map ``P = softmax(-1/2 |q - kappa|^2_L / tau)``,
    the baseline ``TV(P, U)`` (``U`` the uniform row) and their ratio.  Three panels:

    1. gap (solid) and baseline (dashed) against ``r``, one colour per ``tau``, log-log;
    2. the same against ``r^2/tau``: the curves of all temperatures coincide;
    3. one query's weights, ``M P_j`` against ``M S_j`` for every key ``kappa_j`` (1 = uniform),
       coloured by the key's norm relative to the mean key norm, with ``y = x`` and the uniform
       point ``(1, 1)``: as ``r^2/tau`` shrinks the cloud collapses onto the uniform point, it
       does not settle on the diagonal.  Weights outside ``weight_range`` lie off the axes.

    The ``r`` slider moves the markers of panels 1 and 2 and the weights of panel 3 (for every
    ``tau`` at once); the ``tau`` slider shows the copies for its temperature.  ``start = (r, tau)``
    (grid values) sets the sliders' starting positions (default: the middle of each grid).

    Returns
    -------
    plotly.graph_objects.Figure with 2 sliders (``len(radii)`` and ``len(temperatures)`` restyle steps).
    """
    import plotly.graph_objects as go

    kf = L.check_k(k)
    q0 = _points(queries, "queries", kf)
    k0 = _points(keys, "keys", kf, d=q0.shape[1] - 1)
    rs = _grid(radii, "radii")
    taus = _grid(temperatures, "temperatures")
    qi = _index(query, "query", q0.shape[0], "queries")
    digits = _check_digits(digits)
    if start is not None and (not isinstance(start, (tuple, list)) or len(start) != 2):
        raise ValueError(f"start must be a pair (r, tau) of grid values or None, got {start!r}")
    ir = _position(None if start is None else start[0], rs, "start[0] (r)", len(rs) // 2)
    it = _position(None if start is None else start[1], taus, "start[1] (tau)", len(taus) // 2)
    lo_w, hi_w = (float(v) for v in weight_range)
    if not 0 < lo_w < 1 < hi_w:
        raise ValueError(f"weight_range must be (low, high) with 0 < low < 1 < high, got {weight_range!r}")
    R, T, M = len(rs), len(taus), k0.shape[0]

    gap, base, ratio = np.zeros((T, R)), np.zeros((T, R)), np.zeros((T, R))
    w_s, w_d = np.zeros((T, R, M)), np.zeros((T, R, M))
    for i, r in enumerate(rs.tolist()):
        Q, K = L.lift(r * q0[:, 1:], kf), L.lift(r * k0[:, 1:], kf)
        for t, tau in enumerate(taus.tolist()):
            c = att.compare(Q, K, "spatial", "distance", k=kf, temperature=tau, device="cpu", spearman=False)
            gap[t, i], base[t, i] = c.mean_tv, c.mean_tv_uniform_b
            ratio[t, i] = math.nan if c.gap_ratio is None else c.gap_ratio
            for kind, out in (("spatial", w_s), ("distance", w_d)):
                out[t, i] = M * att.attention_map(Q[qi:qi + 1], K, kind, k=kf, temperature=tau)[0].numpy()
    key_norm = k0[:, 1:].norm(dim=-1).numpy()
    rel_norm = _fixed(key_norm / key_norm.mean(), 3)
    x_coll = rs[None, :] ** 2 / taus[:, None]  # r^2 / tau, (T, R)

    fig = _three_panels((
        "gap and baseline against r",
        "against r²/τ: the curves coincide",
        f"one query's weights × M (query {qi})",
    ))
    for t, tau in enumerate(taus.tolist()):
        colour = _COLOURS[t % len(_COLOURS)]
        for col, xs in ((1, rs), (2, x_coll[t])):
            for field, dash, what in ((gap, "solid", "gap TV(S, P)"), (base, "dash", "baseline TV(P, U)")):
                fig.add_trace(go.Scatter(
                    x=_sig(xs, digits), y=_sig(field[t], digits), customdata=_sig(ratio[t], 3),
                    mode="lines+markers", line=dict(color=colour, dash=dash, width=2), marker=dict(size=5, color=colour),
                    name=f"τ = {_label(tau)}: {what}" + ("" if col == 1 else " against r²/τ"), showlegend=False,
                    hovertemplate=(f"τ = {_label(tau)}, {what}<br>r = %{{x:.3g}}<br>value %{{y:.4g}}"
                                   "<br>gap / baseline %{customdata:.3g}<extra></extra>" if col == 1 else
                                   f"τ = {_label(tau)}, {what}<br>r²/τ = %{{x:.3g}}<br>value %{{y:.4g}}"
                                   "<br>gap / baseline %{customdata:.3g}<extra></extra>"),
                ), row=1, col=col)
    for t, tau in enumerate(taus.tolist()):  # the legend: one entry per colour, one per line style
        fig.add_trace(_legend_line(go, f"τ = {_label(tau)}", _COLOURS[t % len(_COLOURS)], "solid"))
    fig.add_trace(_legend_line(go, "solid: gap TV(S, P)", style.BLACK, "solid"))
    fig.add_trace(_legend_line(go, "dashed: baseline TV(P, U)", style.BLACK, "dash"))
    fig.add_trace(_diagonal(go, lo_w, hi_w, "x3", "y3"))
    fig.add_trace(_uniform_point(go, "x3", "y3"))
    first = len(fig.data)

    def marker_xy(i: int, t: int) -> tuple[list, list, list, list]:
        y = _sig([gap[t, i], base[t, i]], digits)
        return _sig([rs[i]] * 2, digits), y, _sig([x_coll[t, i]] * 2, digits), y

    hover = ("key κ<sub>%{pointNumber}</sub> (‖κ<sub>s</sub>‖ / mean %{marker.color:.3g})"
             "<br>M·P<sub>j</sub> (distance) %{x:.3g}<br>M·S<sub>j</sub> (spatial) %{y:.3g}")
    for t in range(T):
        x1, y1, x2, y2 = marker_xy(ir, t)
        for xaxis, yaxis, xs, ys in (("x", "y", x1, y1), ("x2", "y2", x2, y2)):
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", visible=(t == it), showlegend=False,
                                     marker=dict(size=13, color="rgba(0,0,0,0)", line=dict(width=2.5, color=style.BLACK)),
                                     name="current (r, τ)", hoverinfo="skip", xaxis=xaxis, yaxis=yaxis))
    for t in range(T):
        fig.add_trace(_weights_scatter(go, _sig(w_d[t, ir], 3), _sig(w_s[t, ir], 3), rel_norm, visible=(t == it),
                                       name=f"keys of query {qi} (τ = {_label(taus[t])})", hover=hover,
                                       showlegend=True))
    marker_idx = list(range(first, first + 2 * T))
    weight_idx = list(range(first + 2 * T, first + 3 * T))

    r_args = []
    for i in range(R):
        xs, ys = [], []
        for t in range(T):
            x1, y1, x2, y2 = marker_xy(i, t)
            xs += [x1, x2]
            ys += [y1, y2]
        xs += [_sig(w_d[t, i], 3) for t in range(T)]
        ys += [_sig(w_s[t, i], 3) for t in range(T)]
        r_args.append([{"x": xs, "y": ys}, marker_idx + weight_idx])
    tau_args = []
    for t in range(T):
        vis = [u == t for u in range(T) for _ in range(2)] + [u == t for u in range(T)]
        tau_args.append([{"visible": vis}, marker_idx + weight_idx])

    fig.update_xaxes(_decades(title_text="norm scale r (mean ‖q<sub>s</sub>‖, spatial units)"), row=1, col=1)
    fig.update_xaxes(_decades(title_text="r²/τ (dimensionless)"), row=1, col=2)
    fig.update_yaxes(_decades(title_text="mean row total variation (probability)"), row=1, col=1)
    fig.update_yaxes(_decades(), row=1, col=2)
    fig.update_xaxes(_decades(range=_log_range(lo_w, hi_w), title_text="M·P<sub>j</sub>: distance map × M"), row=1, col=3)
    fig.update_yaxes(_decades(range=_log_range(lo_w, hi_w), title_text="M·S<sub>j</sub>: spatial map × M"), row=1, col=3)
    fig.update_layout(
        template=_TEMPLATE, **_frame(height, 2),
        title=_title("Spatial S vs distance P softmax: the gap and the baseline depend on r and τ through r²/τ",
                     f"{q0.shape[0]} queries × {M} keys, d = {q0.shape[1] - 1}, k = {_label(kf)}; "
                     "the r slider moves every temperature's copy, the τ slider shows one"),
        coloraxis=dict(colorscale="Viridis", cmin=min(rel_norm), cmax=max(rel_norm),
                       colorbar=dict(title=dict(text="key norm ‖κ<sub>s</sub>‖ / mean", side="right"), x=1.0, len=0.75)),
        sliders=[
            _slider("r = ", [_label(r) for r in rs.tolist()], r_args, ir, 0.0, 0.6),
            _slider("τ = ", [_label(t) for t in taus.tolist()], tau_args, it, 0.66, 0.34),
        ],
    )
    return fig


# --------------------------------------------------------------------------- #
# (b) the key-norm spread
# --------------------------------------------------------------------------- #
def key_spread_explorer(
    queries: ArrayLike,
    directions: ArrayLike,
    offsets: ArrayLike,
    spreads: ArrayLike,
    *,
    mean_norm: float = 4.0,
    k: float = 1.0,
    temperature: float = 8.0,
    query: int = 0,
    start: float | None = None,
    weight_range: tuple[float, float] = (0.1, 10.0),
    digits: int = 4,
    height: int = 660,
) -> go.Figure:
    r"""A slider for the relative spread ``s`` of the key norms at a fixed mean norm: the maps converge, not to uniform.

    The keys are ``kappa_j(s) = lift(m (1 + s w_j) u_j)``: ``u_j`` the unit vectors of
    ``directions (M, d)``, ``w_j`` the ``offsets (M,)`` in ``[-1, 1]``, ``m = mean_norm``; for each
    ``s`` of ``spreads`` (``s max|w| < 1``) :func:`hypviz.attention.compare` gives the gap
    ``TV(S, P)`` between the spatial and the distance softmax at ``tau = temperature``, the
    baseline ``TV(P, U)`` and their ratio.  ``s = 0`` (equal norms) makes the two maps identical
    (identity 4: the bias ``q_t kappa_t`` is then the same for every key); it is not a slider
    position because the spread is drawn on a log axis.  Three panels:

    1. gap (solid) and baseline (dashed) against ``s``, log-log, the current ``s`` marked;
    2. the ratio gap / baseline against ``s``, with the ``"close"`` threshold
       :data:`hypviz.attention.CLOSE_RATIO`;
    3. one query's weights ``M P_j`` against ``M S_j`` (1 = uniform), coloured by the key's offset
       ``w_j`` (its norm: ``-1`` smallest, ``+1`` largest): as ``s`` shrinks the cloud settles on
       the diagonal ``y = x``, away from the uniform point.

    Returns
    -------
    plotly.graph_objects.Figure with 1 slider (``len(spreads)`` restyle steps).
    """
    import plotly.graph_objects as go

    kf = L.check_k(k)
    q = _points(queries, "queries", kf)
    d = q.shape[1] - 1
    u = L.as_tensor(directions, "directions")
    if u.dim() != 2 or u.shape[1] != d or u.shape[0] < 2:
        raise ValueError(f"directions: expected shape (M, {d}) with M >= 2 (the queries have d = {d}), got shape {tuple(u.shape)}")
    u = u.detach().cpu().to(torch.float64)
    lengths = u.norm(dim=-1)
    if not bool(torch.isfinite(u).all()) or not bool((lengths > 0).all()):
        raise ValueError("directions: every row must be finite and non-zero (it is normalised to a unit vector)")
    u = u / lengths[:, None]
    w = L.as_tensor(offsets, "offsets").detach().cpu().to(torch.float64).reshape(-1)
    if w.numel() != u.shape[0] or not bool(torch.isfinite(w).all()) or float(w.abs().max()) > 1.0:
        raise ValueError(f"offsets: expected {u.shape[0]} finite values in [-1, 1] (one per key), got {w.numel()} values")
    ss = _grid(spreads, "spreads")
    m = _positive(mean_norm, "mean_norm")
    tau = _positive(temperature, "temperature")
    qi = _index(query, "query", q.shape[0], "queries")
    digits = _check_digits(digits)
    if float(ss.max()) * float(w.abs().max()) >= 1.0:
        raise ValueError(f"spreads: s * max|w| must stay below 1 (key norms m (1 + s w) > 0), got s up to {ss.max():g}")
    js = _position(start, ss, "start (s)", 0)
    lo_w, hi_w = (float(v) for v in weight_range)
    if not 0 < lo_w < 1 < hi_w:
        raise ValueError(f"weight_range must be (low, high) with 0 < low < 1 < high, got {weight_range!r}")
    S, M = len(ss), u.shape[0]

    gap, base, ratio = np.zeros(S), np.zeros(S), np.zeros(S)
    w_s, w_d = np.zeros((S, M)), np.zeros((S, M))
    for i, s in enumerate(ss.tolist()):
        K = L.lift(u * (m * (1.0 + s * w))[:, None], kf)
        c = att.compare(q, K, "spatial", "distance", k=kf, temperature=tau, device="cpu", spearman=False)
        gap[i], base[i] = c.mean_tv, c.mean_tv_uniform_b
        ratio[i] = math.nan if c.gap_ratio is None else c.gap_ratio
        w_s[i] = M * att.attention_map(q[qi:qi + 1], K, "spatial", k=kf, temperature=tau)[0].numpy()
        w_d[i] = M * att.attention_map(q[qi:qi + 1], K, "distance", k=kf, temperature=tau)[0].numpy()

    fig = _three_panels(("gap and baseline against the spread s", "gap / baseline",
                         f"one query's weights × M (query {qi})"))
    for field, dash, what, colour in ((gap, "solid", "gap TV(S, P)", _COLOURS[0]),
                                      (base, "dash", "baseline TV(P, U)", _COLOURS[1])):
        fig.add_trace(go.Scatter(x=_sig(ss, digits), y=_sig(field, digits), mode="lines+markers",
                                 line=dict(color=colour, dash=dash, width=2), marker=dict(size=5, color=colour),
                                 name=what, hovertemplate=f"{what}<br>s = %{{x:.3g}}<br>%{{y:.4g}}<extra></extra>"),
                      row=1, col=1)
    fig.add_trace(go.Scatter(x=_sig(ss, digits), y=_sig(ratio, digits), mode="lines+markers",
                             line=dict(color=_COLOURS[2], width=2), marker=dict(size=5, color=_COLOURS[2]),
                             name="gap / baseline", hovertemplate="s = %{x:.3g}<br>gap / baseline %{y:.3g}<extra></extra>"),
                  row=1, col=2)
    close = float(att.CLOSE_RATIO)
    fig.add_trace(go.Scatter(x=_sig([ss.min(), ss.max()], digits), y=[close, close], mode="lines",
                             line=dict(color=_REFERENCE, dash="dot", width=1.5), hoverinfo="skip",
                             name=f"'close' threshold {close:g}"), row=1, col=2)
    fig.add_trace(_diagonal(go, lo_w, hi_w, "x3", "y3"))
    fig.add_trace(_uniform_point(go, "x3", "y3"))
    first = len(fig.data)

    def current(i: int) -> list[tuple[list, list]]:
        return [(_sig([ss[i]] * 2, digits), _sig([gap[i], base[i]], digits)),
                (_sig([ss[i]], digits), _sig([ratio[i]], digits)),
                (_sig(w_d[i], 3), _sig(w_s[i], 3))]

    (x1, y1), (x2, y2), (x3, y3) = current(js)
    ring = dict(size=13, color="rgba(0,0,0,0)", line=dict(width=2.5, color=style.BLACK))
    fig.add_trace(go.Scatter(x=x1, y=y1, mode="markers", marker=ring, name="current s", showlegend=False,
                             hoverinfo="skip", xaxis="x", yaxis="y"))
    fig.add_trace(go.Scatter(x=x2, y=y2, mode="markers", marker=ring, name="current s", showlegend=False,
                             hoverinfo="skip", xaxis="x2", yaxis="y2"))
    hover = ("key κ<sub>%{pointNumber}</sub> (offset w = %{marker.color:.3g})"
             "<br>M·P<sub>j</sub> (distance) %{x:.3g}<br>M·S<sub>j</sub> (spatial) %{y:.3g}")
    fig.add_trace(_weights_scatter(go, x3, y3, _fixed(w.numpy(), 3), visible=True, name=f"keys of query {qi}",
                                   hover=hover, showlegend=True))
    idx = [first, first + 1, first + 2]
    args = []
    for i in range(S):
        cur = current(i)
        args.append([{"x": [c[0] for c in cur], "y": [c[1] for c in cur]}, idx])

    order = "reversed" if ss[0] > ss[-1] else True  # the axes run the way the slider does
    fig.update_xaxes(_decades(autorange=order, title_text="relative half-width s of the key norms (dimensionless)"),
                     row=1, col=1)
    fig.update_yaxes(_decades(title_text="mean row total variation (probability)"), row=1, col=1)
    fig.update_xaxes(_decades(autorange=order, title_text="s (dimensionless)"), row=1, col=2)
    fig.update_yaxes(rangemode="tozero", title_text="TV(S, P) / TV(P, U) (ratio of means)", row=1, col=2)
    fig.update_xaxes(_decades(range=_log_range(lo_w, hi_w), title_text="M·P<sub>j</sub>: distance map × M"), row=1, col=3)
    fig.update_yaxes(_decades(range=_log_range(lo_w, hi_w), title_text="M·S<sub>j</sub>: spatial map × M"), row=1, col=3)
    fig.update_layout(
        template=_TEMPLATE, **_frame(height, 2),
        title=_title("Shrinking the key-norm spread: the spatial map converges to the distance map, not to uniform",
                     f"keys of norm {_label(m)}·(1 + s·w<sub>j</sub>), {q.shape[0]} queries × {M} keys, "
                     f"d = {d}, k = {_label(kf)}, τ = {_label(tau)}"),
        coloraxis=dict(colorscale="Viridis", cmin=-1.0, cmax=1.0,
                       colorbar=dict(title=dict(text="key offset w (norm)", side="right"), x=1.0, len=0.75)),
        sliders=[_slider("s = ", [_label(s) for s in ss.tolist()], args, js, 0.0, 1.0)],
    )
    return fig


# --------------------------------------------------------------------------- #
# (c) one query moving in the Poincare disk
# --------------------------------------------------------------------------- #
def disk_query_explorer(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    k: float = 1.0,
    temperature: float = 1.0,
    start: int = 0,
    digits: int = 4,
    height: int = 660,
) -> go.Figure:
    r"""A slider that moves one query through the Poincare disk; the keys coloured by weight under both maps.

    ``queries (P, 3)`` are the query's positions (a path, one slider step each) and ``keys (M, 3)``
    the keys, points of the hyperbolic plane (``d = 2``) on ``<x, x>_L = -k``, drawn in the
    Poincare disk of radius ``sqrt(k)`` (:func:`hypviz.lorentz.to_poincare`).  Left panel: each
    key's weight under the spatial map ``softmax_j(q_s . kappa_{s,j} / tau)``; right panel: under
    the distance map ``softmax_j(-1/2 |q - kappa_j|^2_L / tau)`` (colour and size, one scale for
    both panels and every position, from :func:`hypviz.attention.attention_map`).  Hovering a key
    shows its hyperbolic distance from the query (:func:`hypviz.lorentz.dist`), its norm and both
    weights.  The spatial map rewards keys far out in the direction of ``q_s`` (and is uniform
    when ``q_s = 0``); the distance map rewards keys near ``q``.

    Returns
    -------
    plotly.graph_objects.Figure with 1 slider (``P`` restyle steps).
    """
    import plotly.graph_objects as go

    kf = L.check_k(k)
    qs = _points(queries, "queries", kf, d=2)
    kk = _points(keys, "keys", kf, d=2)
    if qs.shape[0] < 2:
        raise ValueError(f"queries: expected at least 2 positions of the query (one per slider step), got {qs.shape[0]}")
    tau = _positive(temperature, "temperature")
    p0 = _index(start, "start", qs.shape[0], "query positions")
    digits = _check_digits(digits)
    P, M = qs.shape[0], kk.shape[0]
    root_k = math.sqrt(kf)

    weights = {kind: att.attention_map(qs, kk, kind, k=kf, temperature=tau).numpy() for kind in ("spatial", "distance")}
    dists = L.dist(qs[:, None, :], kk[None, :, :], kf).numpy()  # (P, M) geodesic distances
    disk_q = L.to_poincare(qs, kf).numpy()
    disk_k = L.to_poincare(kk, kf).numpy()
    key_norm = kk[:, 1:].norm(dim=-1).numpy()
    q_norm = qs[:, 1:].norm(dim=-1).numpy()
    w_max = max(float(weights["spatial"].max()), float(weights["distance"].max()))
    dec_w = _decimals(w_max, digits)
    c_max = _fixed([w_max], dec_w)[0]

    def keys_state(p: int, kind: str) -> tuple[list, list, list]:
        wk = weights[kind][p]
        colour = _fixed(wk, dec_w)
        size = _fixed(5.0 + 17.0 * wk / w_max, 1)
        cd = [[a, b, c] for a, b, c in zip(_sig(dists[p], 3), _fixed(weights["spatial"][p], dec_w),
                                            _fixed(weights["distance"][p], dec_w))]
        return colour, size, cd

    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "spatial map: softmax<sub>j</sub>(q<sub>s</sub>·κ<sub>s,j</sub> / τ)",
        "distance map: softmax<sub>j</sub>(−½‖q − κ<sub>j</sub>‖²<sub>L</sub> / τ)"))
    angle = np.linspace(0.0, 2.0 * math.pi, 121)
    path_x, path_y = _fixed(disk_q[:, 0], 4), _fixed(disk_q[:, 1], 4)
    hover = ("key κ<sub>%{pointNumber}</sub>, %{text}<br>d(q, κ) = %{customdata[0]:.3g}"
             "<br>spatial weight %{customdata[1]:.4g}<br>distance weight %{customdata[2]:.4g}<extra></extra>")
    for col, kind in ((1, "spatial"), (2, "distance")):
        legend = col == 1
        fig.add_trace(go.Scatter(x=_fixed(root_k * np.cos(angle), 4), y=_fixed(root_k * np.sin(angle), 4), mode="lines",
                                 line=dict(color=style.BLACK, width=1.2), name="boundary |p| = √k (ideal points)",
                                 hoverinfo="skip", showlegend=legend), row=1, col=col)
        fig.add_trace(go.Scatter(x=path_x, y=path_y, mode="lines", line=dict(color=_QUERY, width=1, dash="dot"),
                                 name="the query's path", hoverinfo="skip", showlegend=legend), row=1, col=col)
        fig.add_trace(go.Scatter(x=[0.0], y=[0.0], mode="markers", marker=dict(symbol="cross", size=8, color=style.BLACK),
                                 name="origin", hoverinfo="skip", showlegend=legend), row=1, col=col)
    first = len(fig.data)
    norm_text = [f"‖κ<sub>s</sub>‖ = {v}" for v in (_label(x) for x in key_norm.tolist())]
    for col, kind in ((1, "spatial"), (2, "distance")):
        colour, size, cd = keys_state(p0, kind)
        fig.add_trace(go.Scatter(x=_fixed(disk_k[:, 0], 4), y=_fixed(disk_k[:, 1], 4), mode="markers",
                                 marker=dict(color=colour, size=size, coloraxis="coloraxis", line=dict(width=0.6, color="#222222")),
                                 customdata=cd, text=norm_text, hovertemplate=hover, name="keys (colour and size: weight)",
                                 showlegend=(col == 1)), row=1, col=col)
    for col in (1, 2):
        fig.add_trace(go.Scatter(x=_fixed(disk_q[p0:p0 + 1, 0], 4), y=_fixed(disk_q[p0:p0 + 1, 1], 4), mode="markers",
                                 marker=dict(symbol="star", size=17, color=_QUERY, line=dict(width=1, color=style.BLACK)),
                                 name="query q", showlegend=(col == 1),
                                 hovertemplate="query q, ‖q<sub>s</sub>‖ = " + "%{customdata:.3g}<extra></extra>",
                                 customdata=_sig(q_norm[p0:p0 + 1], 3)), row=1, col=col)
    idx = list(range(first, first + 4))
    key_x, key_y = _fixed(disk_k[:, 0], 4), _fixed(disk_k[:, 1], 4)
    args = []
    for p in range(P):
        (c1, s1, d1), (c2, s2, d2) = keys_state(p, "spatial"), keys_state(p, "distance")
        qx, qy = _fixed(disk_q[p:p + 1, 0], 4), _fixed(disk_q[p:p + 1, 1], 4)
        qn = _sig(q_norm[p:p + 1], 3)
        # one restyle for the four traces: the keys keep their places (x, y repeated), the query moves
        args.append([{"marker.color": [c1, c2, _QUERY, _QUERY], "marker.size": [s1, s2, 17, 17],
                      "customdata": [d1, d2, qn, qn], "x": [key_x, key_x, qx, qx], "y": [key_y, key_y, qy, qy]}, idx])
    lim = round(1.05 * root_k, 4)
    for col in (1, 2):
        anchor = "x" if col == 1 else "x2"
        fig.update_xaxes(range=[-lim, lim], zeroline=False, title_text="p₁ (Poincaré disk of radius √k)", row=1, col=col)
        fig.update_yaxes(range=[-lim, lim], zeroline=False, scaleanchor=anchor, scaleratio=1, title_text="p₂",
                         row=1, col=col)
    fig.update_layout(
        template=_TEMPLATE, **_frame(height, 1),
        title=_title("One query q moving through the Poincaré disk: the keys' weights under both maps",
                     f"{M} keys κ<sub>j</sub>, d = 2, k = {_label(kf)}, τ = {_label(tau)}; one colour scale for both panels"),
        coloraxis=dict(colorscale="Viridis", cmin=0.0, cmax=c_max,
                       colorbar=dict(title=dict(text="attention weight of κ<sub>j</sub>", side="right"), x=1.0, len=0.8)),
        sliders=[_slider("‖q<sub>s</sub>‖ = ", [_label(v) for v in q_norm.tolist()], args, p0, 0.0, 1.0)],
    )
    return fig


# --------------------------------------------------------------------------- #
# (d) heatmaps with a hover that tells everything
# --------------------------------------------------------------------------- #
_KIND_TEXT = {
    "spatial": "spatial softmax<sub>j</sub>(q<sub>s</sub>·κ<sub>s,j</sub> / τ)",
    "distance": "distance softmax<sub>j</sub>(−½‖q − κ<sub>j</sub>‖²<sub>L</sub> / τ)",
    "lorentz": "Lorentz softmax<sub>j</sub>(⟨q, κ<sub>j</sub>⟩<sub>L</sub> / τ)",
    "focused": "focused φ(q)·φ(κ<sub>j</sub>) / Σ<sub>l</sub> φ(q)·φ(κ<sub>l</sub>)",
}


def attention_heatmap_explorer(
    queries: ArrayLike,
    keys: ArrayLike,
    a: str = "spatial",
    b: str = "distance",
    *,
    k: float = 1.0,
    temperature: float | None = None,
    power: float = 2.0,
    norm_scale: float = 1.0,
    key_label: str = "key κ<sub>j</sub>",
    digits: int = 4,
    height: int = 480,
) -> go.Figure:
    r"""Two attention maps ``A^a``, ``A^b`` and their difference ``A^a - A^b``, with a hover that tells everything.

    The maps of kinds ``a`` and ``b`` (reference) come from :func:`hypviz.attention.attention_map`
    (``temperature`` for the softmax kinds, ``power``/``norm_scale`` for ``"focused"``), in float64.
    Left and middle: the maps on one ``viridis`` scale from 0; right: the difference on ``RdBu_r``
    centred on zero (symmetric limits).  Hovering any cell of any panel shows the query ``i``, the
    key ``j``, both maps' weights and the difference.  Weights and differences are stored with the
    same fixed decimals (``digits`` significant digits of the largest weight), so a difference that
    is rounding noise -- ``"lorentz"`` against ``"distance"`` is identical in exact arithmetic,
    identity 5 -- is stored as 0.  Query 0 is the top row, as in the matplotlib heatmaps.  No slider:
    every cell is already in the figure.

    Returns
    -------
    plotly.graph_objects.Figure with three heatmaps.
    """
    import plotly.graph_objects as go

    _kind(a, "a")
    _kind(b, "b")
    kf = L.check_k(k)
    q = _points(queries, "queries", kf)
    kk = _points(keys, "keys", kf, d=q.shape[1] - 1)
    digits = _check_digits(digits)
    tau = math.sqrt(q.shape[1] - 1) if temperature is None else _positive(temperature, "temperature")
    maps = [att.attention_map(q, kk, kind, k=kf, temperature=tau, power=power, norm_scale=norm_scale).numpy()
            for kind in (a, b)]
    diff = maps[0] - maps[1]
    w_max = max(float(maps[0].max()), float(maps[1].max()))
    dec = _decimals(w_max, digits)
    za, zb, zd = (np.asarray(_fixed(m, dec), dtype=np.float32) for m in (maps[0], maps[1], diff))
    lim = _fixed([float(np.abs(diff).max())], dec)[0]
    if not lim > 0:
        lim = 10.0 ** -dec
    top = _fixed([w_max], dec)[0]

    def pairs(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.stack([u, v], axis=-1)

    na, nb = a if a != b else f"{a} (a)", b if a != b else f"{b} (b)"
    names = {"a": f"A<sup>{na}</sup>", "b": f"A<sup>{nb}</sup>"}
    hover_own = {
        "a": (f"query i = %{{y}}, key j = %{{x}}<br>{names['a']} %{{z:.{dec}f}}<br>{names['b']} %{{customdata[0]:.{dec}f}}"
              f"<br>difference %{{customdata[1]:.{dec}f}}<extra></extra>"),
        "b": (f"query i = %{{y}}, key j = %{{x}}<br>{names['a']} %{{customdata[0]:.{dec}f}}<br>{names['b']} %{{z:.{dec}f}}"
              f"<br>difference %{{customdata[1]:.{dec}f}}<extra></extra>"),
        "d": (f"query i = %{{y}}, key j = %{{x}}<br>{names['a']} %{{customdata[0]:.{dec}f}}<br>{names['b']} %{{customdata[1]:.{dec}f}}"
              f"<br>difference %{{z:.{dec}f}}<extra></extra>"),
    }
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.12, subplot_titles=(
        f"{names['a']}: {_KIND_TEXT[a]}", f"{names['b']}: {_KIND_TEXT[b]}", f"difference {names['a']} − {names['b']}"))
    edge = fig.layout.xaxis2.domain[1]
    weights_bar = dict(title=dict(text="attention weight A<sub>ij</sub>", side="right"), x=round(edge + 0.008, 4),
                       xanchor="left", len=0.9, thickness=12)
    diff_bar = dict(title=dict(text="weight difference", side="right"), x=1.0, xanchor="left", len=0.9, thickness=12)
    fig.add_trace(go.Heatmap(z=za, customdata=pairs(zb, zd), colorscale="Viridis", zmin=0.0, zmax=top,
                             colorbar=weights_bar, hovertemplate=hover_own["a"], name=names["a"]), row=1, col=1)
    fig.add_trace(go.Heatmap(z=zb, customdata=pairs(za, zd), colorscale="Viridis", zmin=0.0, zmax=top,
                             showscale=False, hovertemplate=hover_own["b"], name=names["b"]), row=1, col=2)
    fig.add_trace(go.Heatmap(z=zd, customdata=pairs(za, zb), colorscale="RdBu_r", zmin=-lim, zmax=lim, zmid=0.0,
                             colorbar=diff_bar, hovertemplate=hover_own["d"], name="difference"), row=1, col=3)
    for col in (1, 2, 3):
        fig.update_xaxes(title_text=key_label, row=1, col=col)
        fig.update_yaxes(autorange="reversed", title_text="query i" if col == 1 else None, row=1, col=col)
    note = (f"N = {q.shape[0]} queries, M = {kk.shape[0]} keys, d = {q.shape[1] - 1}, k = {_label(kf)}"
            + (f", τ = {_label(tau)}" if "focused" not in (a, b) or a in att.SOFTMAX_KINDS or b in att.SOFTMAX_KINDS else "")
            + f"; weights to {dec} decimals")
    fig.update_layout(template=_TEMPLATE, **_frame(height, 0, sliders=False),
                      title=_title(f"Attention maps {na} and {nb}: hover any cell for both weights and their difference", note))
    return fig


# --------------------------------------------------------------------------- #
# reading a figure back: what a slider position shows
# --------------------------------------------------------------------------- #
def slider_values(fig: go.Figure, name: str, attr: str = "y", *, slider: int = 0) -> list[np.ndarray]:
    """What each step of slider ``slider`` sets ``attr`` of the trace named ``name`` to, one array per step.

    These are the numbers the figure shows at each slider position (rounded as stored; ``None`` is
    NaN), for checking in code what the narrative says about them.
    """
    hits = [i for i, t in enumerate(fig.data) if t.name == name]
    if len(hits) != 1:
        raise ValueError(f"name: expected exactly one trace named {name!r}, found {len(hits)}")
    sliders = fig.layout.sliders or ()
    if isinstance(slider, bool) or not isinstance(slider, int) or not 0 <= slider < len(sliders):
        raise ValueError(f"slider must be an index of the figure's {len(sliders)} slider(s), got {slider!r}")
    out = []
    for step in sliders[slider].steps:
        update, idx = step.args
        if attr not in update or hits[0] not in idx:
            raise ValueError(f"attr: slider {slider} does not set {attr!r} of the trace {name!r}")
        out.append(_values(update[attr][list(idx).index(hits[0])]))
    return out


# --------------------------------------------------------------------------- #
# the still: the default state drawn with matplotlib
# --------------------------------------------------------------------------- #
_DASHES = {None: "-", "solid": "-", "dash": "--", "dot": ":", "dashdot": "-.", "longdash": "--"}
_SYMBOLS = {None: "o", "circle": "o", "square": "s", "diamond": "D", "cross": "P", "x": "X", "star": "*",
            "triangle-up": "^"}


def _mpl_text(text: Any) -> str:
    """Plotly's HTML-ish text as matplotlib text: ``<br>`` a new line, ``<sub>``/``<sup>`` mathtext, other tags dropped."""
    if not text:
        return ""
    s = str(text)
    s = re.sub(r"<br\s*/?>", "\n", s)
    s = re.sub(r"<sup>(.*?)</sup>", lambda m: "$^{\\mathrm{" + _math_escape(m.group(1)) + "}}$", s)
    s = re.sub(r"<sub>(.*?)</sub>", lambda m: "$_{\\mathrm{" + _math_escape(m.group(1)) + "}}$", s)
    s = re.sub(r"<[^>]+>", "", s)
    return html.unescape(s)


def _math_escape(s: str) -> str:
    s = re.sub(r"<[^>]+>", "", html.unescape(s))
    out = []
    for ch in s:
        if ch in "{}_^$%#&\\":
            out.append("\\" + ch)
        elif ch == " ":
            out.append("\\ ")
        else:
            out.append(ch)
    return "".join(out)


def _colormap(scale: Any):
    from matplotlib.colors import LinearSegmentedColormap, to_rgb

    stops = []
    for pos, colour in scale:
        c = str(colour)
        if c.startswith("rgb"):
            rgb = tuple(float(v) / 255.0 for v in re.findall(r"[\d.]+", c)[:3])
        else:
            rgb = to_rgb(c)
        stops.append((float(pos), rgb))
    return LinearSegmentedColormap.from_list("plotly", stops)


def _values(v: Any) -> np.ndarray:
    """A trace's array as float64 numpy (``None`` is NaN); plotly's typed arrays (``bdata``) decoded."""
    if v is None:
        return np.zeros(0)
    if isinstance(v, dict) and "bdata" in v:
        raw = v["bdata"]
        raw = base64.b64decode(raw) if isinstance(raw, str) else bytes(raw)
        arr = np.frombuffer(raw, dtype=np.dtype(v["dtype"])).astype(np.float64)
        shape = v.get("shape")
        return arr.reshape([int(n) for n in str(shape).split(",")]) if shape is not None else arr
    if isinstance(v, np.ndarray):
        return v.astype(np.float64)
    return np.array([np.nan if x is None else x for x in np.asarray(v, dtype=object).ravel()], dtype=float).reshape(
        np.shape(v))


def _axis_key(ref: str | None, letter: str) -> str:
    ref = ref or letter
    return f"{letter}axis" + ref[1:]


def still_png(fig: go.Figure, *, dpi: int = 72, width_px: int = 1150) -> bytes:
    """A PNG of the figure's default state (the sliders' starting positions), drawn with matplotlib.

    Handles what this module draws: one row of 2-D subplots holding scatter traces (lines and
    markers, colours from a colour axis) and heatmaps, log or linear axes with fixed ranges, equal
    aspect, subplot titles, colour bars, the legend, the figure title; the sliders' starting
    values are written under the title.  Hidden traces (``visible=False``) are not drawn.  The
    PNG carries no metadata (the same figure gives the same bytes) and a 256-colour palette
    (pillow, which matplotlib depends on), a third of the RGBA size: notebooks must stay small.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    dpi = int(_positive(dpi, "dpi"))
    width_px = int(_positive(width_px, "width_px"))
    data = fig.to_dict()
    layout = data.get("layout", {})
    traces = [t for t in data.get("data", []) if t.get("visible", True) is True]
    axes_names = sorted({t.get("xaxis", "x") for t in data.get("data", [])}, key=lambda s: int(s[1:] or 1))
    height = float(layout.get("height") or 500)
    mfig = Figure(figsize=(width_px / dpi, 0.9 * height / dpi), dpi=dpi, layout="constrained")
    panels = mfig.subplots(1, len(axes_names), squeeze=False)[0]
    by_name = dict(zip(axes_names, panels))
    coloraxis = layout.get("coloraxis", {})
    colour_images: list[tuple[Any, Any, dict]] = []
    handles: list[Any] = []

    for t in traces:
        ax = by_name[t.get("xaxis", "x")]
        if t.get("type") == "heatmap":
            z = _values(t["z"])
            cmap = _colormap(t["colorscale"])
            norm = Normalize(t.get("zmin", np.nanmin(z)), t.get("zmax", np.nanmax(z)))
            image = ax.pcolormesh(np.arange(z.shape[1] + 1) - 0.5, np.arange(z.shape[0] + 1) - 0.5, z, cmap=cmap,
                                  norm=norm, rasterized=True)
            if t.get("showscale", True) is not False:
                colour_images.append((image, [ax], t.get("colorbar", {})))
            continue
        mode = t.get("mode", "lines")
        x, y = _values(t.get("x")), _values(t.get("y"))
        line = t.get("line", {})
        marker = t.get("marker", {})
        label = _mpl_text(t.get("name")) if t.get("showlegend", True) is not False else None
        if "lines" in mode:
            (h,) = ax.plot(x, y, color=line.get("color", _COLOURS[0]), lw=0.75 * float(line.get("width", 2)),
                           ls=_DASHES.get(line.get("dash"), "-"),
                           marker="o" if "markers" in mode else None, ms=0.75 * float(marker.get("size", 6)) if "markers" in mode else 0)
            if label:
                h.set_label(label)
                handles.append(h)
            continue
        colour = marker.get("color", _COLOURS[0])
        size = marker.get("size", 6)
        symbol = _SYMBOLS.get(marker.get("symbol"), "o")
        edge = marker.get("line", {})
        kwargs: dict[str, Any] = dict(marker=symbol, s=(0.75 * np.asarray(_values(size) if isinstance(size, list) else size)) ** 2,
                                      linewidths=0.75 * float(edge.get("width", 0.5)), zorder=3)
        if isinstance(colour, list):
            cax = coloraxis if marker.get("coloraxis") else marker
            kwargs.update(c=_values(colour), cmap=_colormap(cax.get("colorscale", [[0, "#440154"], [1, "#fde725"]])),
                          norm=Normalize(cax.get("cmin"), cax.get("cmax")), edgecolors=edge.get("color", "#333333"))
        elif str(colour).startswith("rgba(0,0,0,0)"):
            kwargs.update(facecolors="none", edgecolors=edge.get("color", style.BLACK))
        else:
            kwargs.update(color=colour, edgecolors=edge.get("color", colour))
        h = ax.scatter(x, y, **kwargs)
        if isinstance(colour, list) and marker.get("coloraxis"):  # one colour bar per colour axis (drawn below)
            colour_images.append((h, list(panels), coloraxis.setdefault("colorbar", {})))
        if label:
            h.set_label(label)
            handles.append(h)

    for name, ax in by_name.items():
        xa = layout.get(_axis_key(name, "x"), {})
        ya = layout.get(_axis_key("y" + name[1:], "y"), {})
        for spec, setter_scale, setter_lim, setter_label in ((xa, ax.set_xscale, ax.set_xlim, ax.set_xlabel),
                                                            (ya, ax.set_yscale, ax.set_ylim, ax.set_ylabel)):
            log = spec.get("type") == "log"
            if log:
                setter_scale("log")
            rng = spec.get("range")
            if rng:
                setter_lim(*(10.0 ** np.asarray(rng) if log else rng))
            setter_label(_mpl_text((spec.get("title") or {}).get("text")))
        if ya.get("autorange") == "reversed":
            ax.invert_yaxis()
        if xa.get("autorange") == "reversed":
            ax.invert_xaxis()
        if ya.get("scaleanchor"):
            ax.set_aspect("equal")
        if not ax.collections or not any(type(c).__name__ == "QuadMesh" for c in ax.collections):
            ax.grid(True, alpha=0.3)  # no grid lines over a heatmap
        domain = xa.get("domain", [0, 1])
        for ann in layout.get("annotations", []):
            if ann.get("xref") == "paper" and domain[0] <= float(ann.get("x", -1)) <= domain[1]:
                ax.set_title(_mpl_text(ann.get("text")), fontsize=9)
    seen = set()
    for artist, axs, bar in colour_images:
        key = id(bar)
        if key in seen:
            continue
        seen.add(key)
        cb = mfig.colorbar(artist, ax=axs, shrink=0.85)
        cb.set_label(_mpl_text((bar.get("title") or {}).get("text")))
    title = _mpl_text(re.sub(r"<br><sup>(.*)</sup>$", "<br>\\1", str((layout.get("title") or {}).get("text") or "")))
    state = []
    for slider in layout.get("sliders", []):
        steps = slider.get("steps", [])
        if steps:
            prefix = _mpl_text((slider.get("currentvalue") or {}).get("prefix", ""))
            state.append(f"{prefix}{steps[int(slider.get('active', 0))].get('label', '')}")
    if state:
        title += "\n(static still at " + ", ".join(state) + "; the interactive figure has sliders)"
    mfig.suptitle(title, fontsize=10)
    if handles:
        mfig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)
    FigureCanvasAgg(mfig)
    raw = io.BytesIO()
    mfig.savefig(raw, format="png", dpi=dpi, metadata={"Software": None})
    return _palette_png(raw.getvalue())


def _palette_png(png: bytes) -> bytes:
    """The same picture with a 256-colour palette (a third of the bytes; notebooks must stay small)."""
    try:
        from PIL import Image
    except ImportError:  # pillow comes with matplotlib; without it, keep the RGBA PNG
        return png
    with Image.open(io.BytesIO(png)) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        out = io.BytesIO()
        small.save(out, format="PNG", optimize=True)
    return out.getvalue()


# --------------------------------------------------------------------------- #
# one output, two mimetypes
# --------------------------------------------------------------------------- #
def bundle(fig: go.Figure, still: bytes | None = None, *, dpi: int = 72) -> dict:
    """The display bundle: the figure JSON exactly as plotly's ``"plotly_mimetype"`` renderer makes it, plus a PNG.

    ``still`` is PNG bytes (default: :func:`still_png` of ``fig``); it is stored base64-encoded
    under ``"image/png"``, the form a notebook keeps images in.
    """
    import plotly.graph_objects as go
    import plotly.io as pio

    if not isinstance(fig, go.Figure):
        raise TypeError(f"fig must be a plotly.graph_objects.Figure, got {type(fig).__name__}")
    png = still_png(fig, dpi=dpi) if still is None else still
    if not isinstance(png, (bytes, bytearray)) or not bytes(png).startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("still must be the bytes of a PNG image (or None to draw one)")
    out = dict(pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict()))
    out["image/png"] = base64.b64encode(bytes(png)).decode("ascii")
    return out


def show(fig: go.Figure, still: bytes | None = None, *, dpi: int = 72) -> None:
    """Display ``fig`` as ONE output with both mimetypes (:func:`bundle`): interactive where plotly runs, a PNG elsewhere."""
    from IPython.display import display

    display(bundle(fig, still, dpi=dpi), raw=True)
