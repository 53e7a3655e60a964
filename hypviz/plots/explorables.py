r"""Interactive explorables: plotly figures with sliders that work without a kernel, and a still beside each.

Each explorer takes points (and the grid its slider runs over), gets every number from
:mod:`hypviz.attention` and :mod:`hypviz.lorentz` in float64, and returns a
``plotly.graph_objects.Figure`` whose sliders use ``"restyle"`` steps: every slider position's
data is stored in the figure, so the sliders work in a static page and in JupyterLab with no
kernel running.  Two sliders of one figure never fight: a figure holds one copy of each
per-parameter trace, a slider over the second parameter only switches which copy is visible.

=================================== ==================================================================
:func:`norm_temperature_explorer`   norm scale ``r`` and ``temperature`` :math:`\tau`: the gap
                                    ``TV(spatial, distance)`` and the baseline ``TV(distance, U)``
                                    against ``r`` and against :math:`r^2/\tau` (where they
                                    collapse), and one query's weights under both maps
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
JupyterLab often fails (plotly.py issues 1740 and 4336: raw or missing titles).  The still is drawn from the same
text (sub- and superscripts as mathtext).
Colours are colour-blind safe: Okabe-Ito (``hypviz.plots.style``) for curves, ``viridis`` for
weights and norms, ``RdBu_r`` centred on zero for differences.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

import hypviz.plots.style as style
from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.base import kinds, validate
from hypviz.plots.explorable_parts import (  # noqa: F401  (the explorers' shared pieces)
    COLOURS,
    QUERY,
    REFERENCE,
    TEMPLATE,
    check_digits,
    checked_grid,
    checked_index,
    checked_kind,
    checked_points,
    checked_positive,
    decades,
    decimals_for,
    diagonal,
    fixed,
    frame,
    grid_position,
    label,
    legend_line,
    log_range,
    sig,
    slider_menu,
    three_panels,
    title_dict,
    uniform_point,
    weights_scatter,
)
from hypviz.plots.stills import PLOTLY_MIME, bundle, show, still_png, trace_array  # noqa: F401  (part of this module's surface)

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


#: The two kinds whose gap the explorers (a) to (c) study: the thread's spatial map and Hypformer's distance map, the
#: pair whose gap collapses onto r^2 / temperature.  Names only: each explorer looks them up in the registry
#: (hypviz.base.kinds) when it runs, so one that is not registered is refused in one line; their maps come from
#: hypviz.attention, never computed here.  (d) takes any kind the registry's compare takes.
_THREAD_PAIR: tuple[str, str] = ("spatial", "distance")


def _gap_and_weights(q: torch.Tensor, keys: torch.Tensor, qi: int, k: float,
                     temperature: float) -> tuple[float, float, float, np.ndarray, np.ndarray]:
    """The pair's mean gap, baseline and their ratio (:func:`hypviz.attention.compare`) and query ``qi``'s weights
    under each map, times ``M`` (:func:`hypviz.attention.attention_map`): one step of a sweep."""
    a, b = (checked_kind(name, "kind") for name in _THREAD_PAIR)
    c = att.compare(q, keys, a, b, k=k, temperature=temperature, device="cpu", spearman=False)
    m = keys.shape[0]
    w_a, w_b = (m * att.attention_map(q[qi:qi + 1], keys, kind, k=k, temperature=temperature)[0].numpy() for kind in (a, b))
    return c.mean_tv, c.mean_tv_uniform_b, math.nan if c.gap_ratio is None else c.gap_ratio, w_a, w_b


def _weight_range(weight_range: tuple[float, float]) -> tuple[float, float]:
    """``weight_range`` checked: ``(low, high)`` with ``0 < low < 1 < high``."""
    lo_w, hi_w = (validate.number(v, "weight_range") for v in weight_range)
    if not 0 < lo_w < 1 < hi_w:
        raise ValueError(f"weight_range must be (low, high) with 0 < low < 1 < high, got {weight_range!r}")
    return lo_w, hi_w


def _weight_axes(fig: go.Figure, lo_w: float, hi_w: float) -> None:
    """Panel 3's log axes: ``M P_j`` (distance) against ``M S_j`` (spatial) over ``weight_range``."""
    fig.update_xaxes(decades(range=log_range(lo_w, hi_w), title_text="M·P<sub>j</sub>: distance map × M"), row=1, col=3)
    fig.update_yaxes(decades(range=log_range(lo_w, hi_w), title_text="M·S<sub>j</sub>: spatial map × M"), row=1, col=3)


# --------------------------------------------------------------------------- #
# (a) norm scale and temperature
# --------------------------------------------------------------------------- #
def _norm_temperature_sweep(q0: torch.Tensor, k0: torch.Tensor, rs: np.ndarray, taus: np.ndarray, qi: int,
                            kf: float) -> tuple[np.ndarray, ...]:
    """Gap, baseline, ratio ``(T, R)`` and query ``qi``'s weights under each map ``(T, R, M)``, every ``r`` and tau."""
    R, T, M = len(rs), len(taus), k0.shape[0]
    gap, base, ratio = np.zeros((T, R)), np.zeros((T, R)), np.zeros((T, R))
    w_s, w_d = np.zeros((T, R, M)), np.zeros((T, R, M))
    for i, r in enumerate(rs.tolist()):
        Q, K = L.lift(r * q0[:, 1:], k=kf), L.lift(r * k0[:, 1:], k=kf)
        for t, tau in enumerate(taus.tolist()):
            gap[t, i], base[t, i], ratio[t, i], w_s[t, i], w_d[t, i] = _gap_and_weights(Q, K, qi, kf, tau)
    return gap, base, ratio, w_s, w_d


def _norm_temperature_curves(go: Any, fig: go.Figure, rs: np.ndarray, taus: np.ndarray, x_coll: np.ndarray,
                             sweep: tuple[np.ndarray, ...], digits: int) -> None:
    """Panels 1 and 2: gap and baseline against ``r`` and ``r^2/tau``, one colour per temperature, and the legend."""
    gap, base, ratio = sweep[:3]
    for t, tau in enumerate(taus.tolist()):
        colour = COLOURS[t % len(COLOURS)]
        for col, xs in ((1, rs), (2, x_coll[t])):
            for field, dash, what in ((gap, "solid", "gap TV(S, P)"), (base, "dash", "baseline TV(P, U)")):
                fig.add_trace(go.Scatter(
                    x=sig(xs, digits), y=sig(field[t], digits), customdata=sig(ratio[t], 3),
                    mode="lines+markers", line=dict(color=colour, dash=dash, width=2), marker=dict(size=5, color=colour),
                    name=f"τ = {label(tau)}: {what}" + ("" if col == 1 else " against r²/τ"), showlegend=False,
                    hovertemplate=(f"τ = {label(tau)}, {what}<br>r = %{{x:.3g}}<br>value %{{y:.4g}}"
                                   "<br>gap / baseline %{customdata:.3g}<extra></extra>" if col == 1 else
                                   f"τ = {label(tau)}, {what}<br>r²/τ = %{{x:.3g}}<br>value %{{y:.4g}}"
                                   "<br>gap / baseline %{customdata:.3g}<extra></extra>"),
                ), row=1, col=col)
    for t, tau in enumerate(taus.tolist()):  # the legend: one entry per colour, one per line style
        fig.add_trace(legend_line(go, f"τ = {label(tau)}", COLOURS[t % len(COLOURS)], "solid"))
    fig.add_trace(legend_line(go, "solid: gap TV(S, P)", style.BLACK, "solid"))
    fig.add_trace(legend_line(go, "dashed: baseline TV(P, U)", style.BLACK, "dash"))


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
    r"""Sliders for the norm scale ``r`` and the ``temperature`` :math:`\tau`: gap and baseline collapse onto :math:`r^2/\tau`.

    The spatial parts of ``queries (N, d + 1)`` and ``keys (M, d + 1)`` are multiplied by each
    ``r`` of ``radii`` and lifted (:func:`hypviz.lorentz.lift`; points of mean spatial norm 1, e.g.
    ``data.lifted_gaussian(N, d, 1.0)``, make ``r`` the mean norm); for every ``r`` and every :math:`\tau` of
    ``temperatures``, :func:`hypviz.attention.compare` gives the mean row gap ``TV(S, P)`` between the spatial map
    :math:`S = \mathrm{softmax}(q_s \cdot \kappa_s / \tau)` and the distance map
    :math:`P = \mathrm{softmax}(-\tfrac12\|q - \kappa\|_L^2 / \tau)`, the baseline ``TV(P, U)`` (``U`` the uniform
    row) and their ratio.  Three panels:

    1. gap (solid) and baseline (dashed) against ``r``, one colour per temperature, log-log;
    2. the same against :math:`r^2/\tau`: the curves of all temperatures coincide;
    3. one query's weights, ``M P_j`` against ``M S_j`` for every key ``kappa_j`` (1 = uniform),
       coloured by the key's norm relative to the mean key norm, with ``y = x`` and the uniform
       point ``(1, 1)``: as :math:`r^2/\tau` shrinks the cloud collapses onto the uniform point, it
       does not settle on the diagonal.  Weights outside ``weight_range`` lie off the axes.

    The ``r`` slider moves the markers of panels 1 and 2 and the weights of panel 3 (for every
    temperature at once); the temperature slider (:math:`\tau`) shows the copies for its temperature.
    ``start = (r, temperature)`` (grid values) sets the sliders' starting positions (default: the middle of
    each grid).

    Returns
    -------
    plotly.graph_objects.Figure with 2 sliders (``len(radii)`` and ``len(temperatures)`` restyle steps).
    """
    import plotly.graph_objects as go

    kf = L.check_k(k)
    q0 = checked_points(queries, "queries", k=kf)
    k0 = checked_points(keys, "keys", k=kf, d=q0.shape[1] - 1)
    rs = checked_grid(radii, "radii")
    taus = checked_grid(temperatures, "temperatures")
    qi = checked_index(query, "query", q0.shape[0], "queries")
    digits = check_digits(digits)
    if start is not None and (not isinstance(start, (tuple, list)) or len(start) != 2):
        raise ValueError(f"start must be a pair (r, temperature) of grid values or None, got {start!r}")
    ir = grid_position(None if start is None else start[0], rs, "start[0] (r)", len(rs) // 2)
    it = grid_position(None if start is None else start[1], taus, "start[1] (temperature)", len(taus) // 2)
    lo_w, hi_w = _weight_range(weight_range)
    T, M = len(taus), k0.shape[0]

    sweep = _norm_temperature_sweep(q0, k0, rs, taus, qi, kf)
    gap, base, _, w_s, w_d = sweep
    key_norm = k0[:, 1:].norm(dim=-1).numpy()
    rel_norm = fixed(key_norm / key_norm.mean(), 3)
    x_coll = rs[None, :] ** 2 / taus[:, None]  # r^2 / tau, (T, R)

    fig = three_panels((
        "gap and baseline against r",
        "against r²/τ: the curves coincide",
        f"one query's weights × M (query {qi})",
    ))
    _norm_temperature_curves(go, fig, rs, taus, x_coll, sweep, digits)
    fig.add_trace(diagonal(go, lo_w, hi_w, "x3", "y3"))
    fig.add_trace(uniform_point(go, "x3", "y3"))
    first = len(fig.data)

    def marker_xy(i: int, t: int) -> tuple[list, list, list, list]:
        y = sig([gap[t, i], base[t, i]], digits)
        return sig([rs[i]] * 2, digits), y, sig([x_coll[t, i]] * 2, digits), y

    hover = ("key κ<sub>%{pointNumber}</sub> (‖κ<sub>s</sub>‖ / mean %{marker.color:.3g})"
             "<br>M·P<sub>j</sub> (distance) %{x:.3g}<br>M·S<sub>j</sub> (spatial) %{y:.3g}")
    for t in range(T):
        x1, y1, x2, y2 = marker_xy(ir, t)
        for xaxis, yaxis, xs, ys in (("x", "y", x1, y1), ("x2", "y2", x2, y2)):
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", visible=(t == it), showlegend=False,
                                     marker=dict(size=13, color="rgba(0,0,0,0)", line=dict(width=2.5, color=style.BLACK)),
                                     name="current (r, τ)", hoverinfo="skip", xaxis=xaxis, yaxis=yaxis))
    for t in range(T):
        fig.add_trace(weights_scatter(go, sig(w_d[t, ir], 3), sig(w_s[t, ir], 3), rel_norm, visible=(t == it),
                                       name=f"keys of query {qi} (τ = {label(taus[t])})", hover=hover,
                                       showlegend=True))
    marker_idx = list(range(first, first + 2 * T))
    weight_idx = list(range(first + 2 * T, first + 3 * T))

    r_args, tau_args = _norm_temperature_steps(marker_xy, w_s, w_d, marker_idx + weight_idx)

    fig.update_xaxes(decades(title_text="norm scale r (mean ‖q<sub>s</sub>‖, spatial units)"), row=1, col=1)
    fig.update_xaxes(decades(title_text="r²/τ (dimensionless)"), row=1, col=2)
    fig.update_yaxes(decades(title_text="mean row total variation (probability)"), row=1, col=1)
    fig.update_yaxes(decades(), row=1, col=2)
    _weight_axes(fig, lo_w, hi_w)
    fig.update_layout(
        template=TEMPLATE, **frame(height, 2),
        title=title_dict("Spatial S vs distance P softmax: the gap and the baseline depend on r and τ through r²/τ",
                     f"{q0.shape[0]} queries × {M} keys, d = {q0.shape[1] - 1}, k = {label(kf)}; "
                     "the r slider moves every temperature's copy, the τ slider shows one"),
        coloraxis=dict(colorscale="Viridis", cmin=min(rel_norm), cmax=max(rel_norm),
                       colorbar=dict(title=dict(text="key norm ‖κ<sub>s</sub>‖ / mean", side="right"), x=1.0, len=0.75)),
        sliders=[
            slider_menu("r = ", [label(r) for r in rs.tolist()], r_args, ir, 0.0, 0.6),
            slider_menu("τ = ", [label(t) for t in taus.tolist()], tau_args, it, 0.66, 0.34),
        ],
    )
    return fig


def _norm_temperature_steps(marker_xy: Callable[[int, int], tuple[list, list, list, list]], w_s: np.ndarray,
                            w_d: np.ndarray, idx: list[int]) -> tuple[list, list]:
    """The restyle steps of the ``r`` slider (markers and weights of every temperature) and of the tau slider."""
    T, R = w_s.shape[:2]
    r_args = []
    for i in range(R):
        xs, ys = [], []
        for t in range(T):
            x1, y1, x2, y2 = marker_xy(i, t)
            xs += [x1, x2]
            ys += [y1, y2]
        xs += [sig(w_d[t, i], 3) for t in range(T)]
        ys += [sig(w_s[t, i], 3) for t in range(T)]
        r_args.append([{"x": xs, "y": ys}, idx])
    tau_args = []
    for t in range(T):
        vis = [u == t for u in range(T) for _ in range(2)] + [u == t for u in range(T)]
        tau_args.append([{"visible": vis}, idx])
    return r_args, tau_args


# --------------------------------------------------------------------------- #
# (b) the key-norm spread
# --------------------------------------------------------------------------- #
def _unit_directions_and_offsets(directions: ArrayLike, offsets: ArrayLike, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``directions (M, d)`` normalised to unit rows and ``offsets (M,)`` in ``[-1, 1]``, float64, checked."""
    u = L.as_tensor(directions, "directions")
    if u.dim() != 2 or u.shape[1] != d or u.shape[0] < 2:
        raise ValueError(f"directions: expected shape (M, {d}) with M >= 2 (the queries have d = {d}), "
                         f"got shape {tuple(u.shape)}")
    u = u.detach().cpu().to(torch.float64)
    lengths = u.norm(dim=-1)
    if not bool(torch.isfinite(u).all()) or not bool((lengths > 0).all()):
        raise ValueError("directions: every row must be finite and non-zero (it is normalised to a unit vector)")
    u = u / lengths[:, None]
    w = L.as_tensor(offsets, "offsets").detach().cpu().to(torch.float64).reshape(-1)
    if w.numel() != u.shape[0] or not bool(torch.isfinite(w).all()) or float(w.abs().max()) > 1.0:
        raise ValueError(f"offsets: expected {u.shape[0]} finite values in [-1, 1] (one per key), got {w.numel()} values")
    return u, w


def _key_spread_curves(go: Any, fig: go.Figure, ss: np.ndarray, sweep: tuple[np.ndarray, np.ndarray, np.ndarray],
                       digits: int) -> None:
    """Panels 1 and 2: gap and baseline against ``s``, and their ratio with the ``"close"`` threshold."""
    gap, base, ratio = sweep
    for field, dash, what, colour in ((gap, "solid", "gap TV(S, P)", COLOURS[0]),
                                      (base, "dash", "baseline TV(P, U)", COLOURS[1])):
        fig.add_trace(go.Scatter(x=sig(ss, digits), y=sig(field, digits), mode="lines+markers",
                                 line=dict(color=colour, dash=dash, width=2), marker=dict(size=5, color=colour),
                                 name=what, hovertemplate=f"{what}<br>s = %{{x:.3g}}<br>%{{y:.4g}}<extra></extra>"),
                      row=1, col=1)
    fig.add_trace(go.Scatter(x=sig(ss, digits), y=sig(ratio, digits), mode="lines+markers",
                             line=dict(color=COLOURS[2], width=2), marker=dict(size=5, color=COLOURS[2]),
                             name="gap / baseline", hovertemplate="s = %{x:.3g}<br>gap / baseline %{y:.3g}<extra></extra>"),
                  row=1, col=2)
    close = float(att.CLOSE_RATIO)
    fig.add_trace(go.Scatter(x=sig([ss.min(), ss.max()], digits), y=[close, close], mode="lines",
                             line=dict(color=REFERENCE, dash="dot", width=1.5), hoverinfo="skip",
                             name=f"'close' threshold {close:g}"), row=1, col=2)


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
    ``TV(S, P)`` between the spatial and the distance softmax at ``temperature``, the
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
    q = checked_points(queries, "queries", k=kf)
    d = q.shape[1] - 1
    u, w = _unit_directions_and_offsets(directions, offsets, d)
    ss = checked_grid(spreads, "spreads")
    m = checked_positive(mean_norm, "mean_norm")
    tau = checked_positive(temperature, "temperature")
    qi = checked_index(query, "query", q.shape[0], "queries")
    digits = check_digits(digits)
    if float(ss.max()) * float(w.abs().max()) >= 1.0:
        raise ValueError(f"spreads: s * max|w| must stay below 1 (key norms m (1 + s w) > 0), got s up to {ss.max():g}")
    js = grid_position(start, ss, "start (s)", 0)
    lo_w, hi_w = _weight_range(weight_range)
    S, M = len(ss), u.shape[0]

    gap, base, ratio = np.zeros(S), np.zeros(S), np.zeros(S)
    w_s, w_d = np.zeros((S, M)), np.zeros((S, M))
    for i, s in enumerate(ss.tolist()):
        K = L.lift(u * (m * (1.0 + s * w))[:, None], k=kf)
        gap[i], base[i], ratio[i], w_s[i], w_d[i] = _gap_and_weights(q, K, qi, kf, tau)

    fig = three_panels(("gap and baseline against the spread s", "gap / baseline",
                         f"one query's weights × M (query {qi})"))
    _key_spread_curves(go, fig, ss, (gap, base, ratio), digits)
    fig.add_trace(diagonal(go, lo_w, hi_w, "x3", "y3"))
    fig.add_trace(uniform_point(go, "x3", "y3"))
    first = len(fig.data)

    def current(i: int) -> list[tuple[list, list]]:
        return [(sig([ss[i]] * 2, digits), sig([gap[i], base[i]], digits)),
                (sig([ss[i]], digits), sig([ratio[i]], digits)),
                (sig(w_d[i], 3), sig(w_s[i], 3))]

    (x1, y1), (x2, y2), (x3, y3) = current(js)
    ring = dict(size=13, color="rgba(0,0,0,0)", line=dict(width=2.5, color=style.BLACK))
    fig.add_trace(go.Scatter(x=x1, y=y1, mode="markers", marker=ring, name="current s", showlegend=False,
                             hoverinfo="skip", xaxis="x", yaxis="y"))
    fig.add_trace(go.Scatter(x=x2, y=y2, mode="markers", marker=ring, name="current s", showlegend=False,
                             hoverinfo="skip", xaxis="x2", yaxis="y2"))
    hover = ("key κ<sub>%{pointNumber}</sub> (offset w = %{marker.color:.3g})"
             "<br>M·P<sub>j</sub> (distance) %{x:.3g}<br>M·S<sub>j</sub> (spatial) %{y:.3g}")
    fig.add_trace(weights_scatter(go, x3, y3, fixed(w.numpy(), 3), visible=True, name=f"keys of query {qi}",
                                   hover=hover, showlegend=True))
    idx = [first, first + 1, first + 2]
    args = []
    for i in range(S):
        cur = current(i)
        args.append([{"x": [c[0] for c in cur], "y": [c[1] for c in cur]}, idx])

    order = "reversed" if ss[0] > ss[-1] else True  # the axes run the way the slider does
    fig.update_xaxes(decades(autorange=order, title_text="relative half-width s of the key norms (dimensionless)"),
                     row=1, col=1)
    fig.update_yaxes(decades(title_text="mean row total variation (probability)"), row=1, col=1)
    fig.update_xaxes(decades(autorange=order, title_text="s (dimensionless)"), row=1, col=2)
    fig.update_yaxes(rangemode="tozero", title_text="TV(S, P) / TV(P, U) (ratio of means)", row=1, col=2)
    _weight_axes(fig, lo_w, hi_w)
    fig.update_layout(
        template=TEMPLATE, **frame(height, 2),
        title=title_dict("Shrinking the key-norm spread: the spatial map converges to the distance map, not to uniform",
                     f"keys of norm {label(m)}·(1 + s·w<sub>j</sub>), {q.shape[0]} queries × {M} keys, "
                     f"d = {d}, k = {label(kf)}, τ = {label(tau)}"),
        coloraxis=dict(colorscale="Viridis", cmin=-1.0, cmax=1.0,
                       colorbar=dict(title=dict(text="key offset w (norm)", side="right"), x=1.0, len=0.75)),
        sliders=[slider_menu("s = ", [label(s) for s in ss.tolist()], args, js, 0.0, 1.0)],
    )
    return fig


# --------------------------------------------------------------------------- #
# (c) one query moving in the Poincare disk
# --------------------------------------------------------------------------- #
def _disk_frame(go: Any, fig: go.Figure, root_k: float, disk_q: np.ndarray) -> None:
    """In both panels: the disk's boundary, the query's path (dotted) and the origin."""
    angle = np.linspace(0.0, 2.0 * math.pi, 121)
    path_x, path_y = fixed(disk_q[:, 0], 4), fixed(disk_q[:, 1], 4)
    for col in (1, 2):
        legend = col == 1
        fig.add_trace(go.Scatter(x=fixed(root_k * np.cos(angle), 4), y=fixed(root_k * np.sin(angle), 4), mode="lines",
                                 line=dict(color=style.BLACK, width=1.2), name="boundary |p| = √k (ideal points)",
                                 hoverinfo="skip", showlegend=legend), row=1, col=col)
        fig.add_trace(go.Scatter(x=path_x, y=path_y, mode="lines", line=dict(color=QUERY, width=1, dash="dot"),
                                 name="the query's path", hoverinfo="skip", showlegend=legend), row=1, col=col)
        fig.add_trace(go.Scatter(x=[0.0], y=[0.0], mode="markers", marker=dict(symbol="cross", size=8, color=style.BLACK),
                                 name="origin", hoverinfo="skip", showlegend=legend), row=1, col=col)


def _disk_axes(fig: go.Figure, root_k: float) -> None:
    """Both panels' axes: the disk of radius ``sqrt(k)`` with a margin, equal aspect."""
    lim = round(1.05 * root_k, 4)
    for col in (1, 2):
        anchor = "x" if col == 1 else "x2"
        fig.update_xaxes(range=[-lim, lim], zeroline=False, title_text="p₁ (Poincaré disk of radius √k)", row=1, col=col)
        fig.update_yaxes(range=[-lim, lim], zeroline=False, scaleanchor=anchor, scaleratio=1, title_text="p₂",
                         row=1, col=col)


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
    key's weight under the spatial map :math:`\mathrm{softmax}_j(q_s \cdot \kappa_{s,j} / \tau)`; right panel: under
    the distance map :math:`\mathrm{softmax}_j(-\tfrac12\|q - \kappa_j\|_L^2 / \tau)` (:math:`\tau` = ``temperature``;
    colour and size, one scale for
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
    qs = checked_points(queries, "queries", k=kf, d=2)
    kk = checked_points(keys, "keys", k=kf, d=2)
    if qs.shape[0] < 2:
        raise ValueError(f"queries: expected at least 2 positions of the query (one per slider step), got {qs.shape[0]}")
    tau = checked_positive(temperature, "temperature")
    p0 = checked_index(start, "start", qs.shape[0], "query positions")
    digits = check_digits(digits)
    P, M = qs.shape[0], kk.shape[0]
    root_k = math.sqrt(kf)

    pair = tuple(checked_kind(name, "kind") for name in _THREAD_PAIR)  # the registry's, checked at each call
    weights = dict(zip(("spatial", "distance"), (att.attention_map(qs, kk, kind, k=kf, temperature=tau).numpy()
                                                for kind in pair)))
    dists = L.dist(qs[:, None, :], kk[None, :, :], k=kf).numpy()  # (P, M) geodesic distances
    disk_q = L.to_poincare(qs, k=kf).numpy()
    disk_k = L.to_poincare(kk, k=kf).numpy()
    key_norm = kk[:, 1:].norm(dim=-1).numpy()
    q_norm = qs[:, 1:].norm(dim=-1).numpy()
    w_max = max(float(weights["spatial"].max()), float(weights["distance"].max()))
    dec_w = decimals_for(w_max, digits)
    c_max = fixed([w_max], dec_w)[0]

    def keys_state(p: int, kind: str) -> tuple[list, list, list]:
        wk = weights[kind][p]
        colour = fixed(wk, dec_w)
        size = fixed(5.0 + 17.0 * wk / w_max, 1)
        cd = [[a, b, c] for a, b, c in zip(sig(dists[p], 3), fixed(weights["spatial"][p], dec_w),
                                            fixed(weights["distance"][p], dec_w))]
        return colour, size, cd

    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "spatial map: softmax<sub>j</sub>(q<sub>s</sub>·κ<sub>s,j</sub> / τ)",
        "distance map: softmax<sub>j</sub>(−½‖q − κ<sub>j</sub>‖²<sub>L</sub> / τ)"))
    _disk_frame(go, fig, root_k, disk_q)
    hover = ("key κ<sub>%{pointNumber}</sub>, %{text}<br>d(q, κ) = %{customdata[0]:.3g}"
             "<br>spatial weight %{customdata[1]:.4g}<br>distance weight %{customdata[2]:.4g}<extra></extra>")
    first = len(fig.data)
    norm_text = [f"‖κ<sub>s</sub>‖ = {v}" for v in (label(x) for x in key_norm.tolist())]
    for col, kind in ((1, "spatial"), (2, "distance")):
        colour, size, cd = keys_state(p0, kind)
        fig.add_trace(go.Scatter(x=fixed(disk_k[:, 0], 4), y=fixed(disk_k[:, 1], 4), mode="markers",
                                 marker=dict(color=colour, size=size, coloraxis="coloraxis",
                                             line=dict(width=0.6, color="#222222")),
                                 customdata=cd, text=norm_text, hovertemplate=hover, name="keys (colour and size: weight)",
                                 showlegend=(col == 1)), row=1, col=col)
    for col in (1, 2):
        fig.add_trace(go.Scatter(x=fixed(disk_q[p0:p0 + 1, 0], 4), y=fixed(disk_q[p0:p0 + 1, 1], 4), mode="markers",
                                 marker=dict(symbol="star", size=17, color=QUERY, line=dict(width=1, color=style.BLACK)),
                                 name="query q", showlegend=(col == 1),
                                 hovertemplate="query q, ‖q<sub>s</sub>‖ = " + "%{customdata:.3g}<extra></extra>",
                                 customdata=sig(q_norm[p0:p0 + 1], 3)), row=1, col=col)
    idx = list(range(first, first + 4))
    key_x, key_y = fixed(disk_k[:, 0], 4), fixed(disk_k[:, 1], 4)
    args = []
    for p in range(P):
        (c1, s1, d1), (c2, s2, d2) = keys_state(p, "spatial"), keys_state(p, "distance")
        qx, qy = fixed(disk_q[p:p + 1, 0], 4), fixed(disk_q[p:p + 1, 1], 4)
        qn = sig(q_norm[p:p + 1], 3)
        # one restyle for the four traces: the keys keep their places (x, y repeated), the query moves
        args.append([{"marker.color": [c1, c2, QUERY, QUERY], "marker.size": [s1, s2, 17, 17],
                      "customdata": [d1, d2, qn, qn], "x": [key_x, key_x, qx, qx], "y": [key_y, key_y, qy, qy]}, idx])
    _disk_axes(fig, root_k)
    fig.update_layout(
        template=TEMPLATE, **frame(height, 1),
        title=title_dict("One query q moving through the Poincaré disk: the keys' weights under both maps",
                     f"{M} keys κ<sub>j</sub>, d = 2, k = {label(kf)}, τ = {label(tau)}; one colour scale for both panels"),
        coloraxis=dict(colorscale="Viridis", cmin=0.0, cmax=c_max,
                       colorbar=dict(title=dict(text="attention weight of κ<sub>j</sub>", side="right"), x=1.0, len=0.8)),
        sliders=[slider_menu("‖q<sub>s</sub>‖ = ", [label(v) for v in q_norm.tolist()], args, p0, 0.0, 1.0)],
    )
    return fig


# --------------------------------------------------------------------------- #
# (d) heatmaps with a hover that tells everything
# --------------------------------------------------------------------------- #


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

    checked_kind(a, "a")
    checked_kind(b, "b")
    kf = L.check_k(k)
    q = checked_points(queries, "queries", k=kf)
    kk = checked_points(keys, "keys", k=kf, d=q.shape[1] - 1)
    digits = check_digits(digits)
    tau = math.sqrt(q.shape[1] - 1) if temperature is None else checked_positive(temperature, "temperature")
    maps = [att.attention_map(q, kk, kind, k=kf, temperature=tau, power=power, norm_scale=norm_scale).numpy()
            for kind in (a, b)]
    diff = maps[0] - maps[1]
    w_max = max(float(maps[0].max()), float(maps[1].max()))
    dec = decimals_for(w_max, digits)
    za, zb, zd = (np.asarray(fixed(m, dec), dtype=np.float32) for m in (maps[0], maps[1], diff))
    lim = fixed([float(np.abs(diff).max())], dec)[0]
    if not lim > 0:
        lim = 10.0 ** -dec
    top = fixed([w_max], dec)[0]

    def pairs(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.stack([u, v], axis=-1)

    na, nb = a if a != b else f"{a} (a)", b if a != b else f"{b} (b)"
    names = {"a": f"A<sup>{na}</sup>", "b": f"A<sup>{nb}</sup>"}
    hover_own = {
        "a": (f"query i = %{{y}}, key j = %{{x}}<br>{names['a']} %{{z:.{dec}f}}<br>{names['b']} %{{customdata[0]:.{dec}f}}"
              f"<br>difference %{{customdata[1]:.{dec}f}}<extra></extra>"),
        "b": (f"query i = %{{y}}, key j = %{{x}}<br>{names['a']} %{{customdata[0]:.{dec}f}}<br>{names['b']} %{{z:.{dec}f}}"
              f"<br>difference %{{customdata[1]:.{dec}f}}<extra></extra>"),
        "d": (f"query i = %{{y}}, key j = %{{x}}<br>{names['a']} %{{customdata[0]:.{dec}f}}"
              f"<br>{names['b']} %{{customdata[1]:.{dec}f}}<br>difference %{{z:.{dec}f}}<extra></extra>"),
    }
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.12, subplot_titles=(
        f"{names['a']}: {kinds.get(a).html}", f"{names['b']}: {kinds.get(b).html}", f"difference {names['a']} − {names['b']}"))
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
    note = (f"N = {q.shape[0]} queries, M = {kk.shape[0]} keys, d = {q.shape[1] - 1}, k = {label(kf)}"
            + (f", τ = {label(tau)}" if kinds.get(a).temperature or kinds.get(b).temperature else "")
            + f"; weights to {dec} decimals")
    fig.update_layout(template=TEMPLATE, **frame(height, 0, sliders=False),
                      title=title_dict(f"Attention maps {na} and {nb}: hover any cell for both weights and their difference",
                                       note))
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
        out.append(trace_array(update[attr][list(idx).index(hits[0])]))
    return out
