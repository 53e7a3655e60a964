r"""The manifold figures drawn with plotly: the same scenes as :mod:`hypviz.plots.manifold_mpl`, interactive.

Each figure is a scene of :mod:`hypviz.plots.scenes`, built once from the inputs, and a renderer
here that only draws it (``draw_*_plotly``; the ``*_figure_plotly`` functions build the scene and
call the renderer).  Every function returns a ``plotly.graph_objects.Figure`` whose data are
rounded to ``decimals`` places (``-0.0`` stored as ``0.0``), so that stored notebook outputs
compare exactly; several lines of one kind are one trace, broken by ``None``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

import hypviz.plots.style as style
from hypviz.base import kinds
from hypviz.plots.scenes import (
    MODEL_TEXT,
    AttentionScene,
    DiskScene,
    HyperboloidScene,
    ThreeModelsScene,
    attention_scene,
    disk_scene,
    hyperboloid_scene,
    three_models_scene,
)

if TYPE_CHECKING:  # plotly is imported lazily, inside the functions
    import plotly.graph_objects as go

__all__ = [
    "draw_hyperboloid_plotly",
    "draw_disk_plotly",
    "draw_three_models_plotly",
    "draw_attention_plotly",
    "hyperboloid_figure_plotly",
    "disk_figure_plotly",
    "poincare_figure_plotly",
    "klein_figure_plotly",
    "three_models_figure_plotly",
    "attention_on_manifold_plotly",
]

ArrayLike = Any

ORIGIN_COLOUR = style.BLACK
GRID_COLOUR = "#999999"
SHEET_COLOUR = "#BBBBBB"
_PLOTLY_SCALES = {"viridis": "Viridis", "cividis": "Cividis", "plasma": "Plasma", "inferno": "Inferno",
                  "magma": "Magma", "rdbu_r": "RdBu_r"}


def rounded(a: np.ndarray, decimals: int) -> list:
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


def _k_text(k: float) -> str:
    return f"{k:g}"


def _title(base: str, note: str) -> dict:
    text = base if not note else f"{base}<br><sup>{note}</sup>"
    return dict(text=text, x=0.5, xanchor="center")


def _coloraxis(value_range: tuple[float, float], value_label: str, cmap: str, decimals: int) -> dict:
    lo, hi = rounded(np.array(value_range), decimals)
    return dict(colorscale=_plotly_scale(cmap), cmin=lo, cmax=hi, colorbar=dict(title=dict(text=value_label)))


def _marker(values: np.ndarray | None, decimals: int) -> dict:
    if values is None:
        return dict(size=4, color=style.POINT, line=dict(width=0.5, color="black"))
    return dict(size=4, color=rounded(values, decimals), coloraxis="coloraxis", line=dict(width=0.5, color="black"))


def _hover(labels: Sequence[str], values: np.ndarray | None, decimals: int) -> list[str]:
    if values is None:
        return list(labels)
    return [f"{lab}: {v:.{min(decimals, 4)}g}" for lab, v in zip(labels, values.tolist())]


def _lines3d(lines: np.ndarray, decimals: int, **kwargs: Any) -> Any:
    import plotly.graph_objects as go

    x, y, z = _polylines(lines, (0, 1, 2))
    return go.Scatter3d(x=rounded(x, decimals), y=rounded(y, decimals), z=rounded(z, decimals), mode="lines",
                        hoverinfo="skip", **kwargs)


def _lines2d(lines: np.ndarray, decimals: int, **kwargs: Any) -> Any:
    import plotly.graph_objects as go

    x, y = _polylines(lines, (0, 1))
    return go.Scatter(x=rounded(x, decimals), y=rounded(y, decimals), mode="lines", hoverinfo="skip", **kwargs)


# --------------------------------------------------------------------------- #
# the traces of one scene
# --------------------------------------------------------------------------- #
def _hyperboloid_traces(scene: HyperboloidScene, decimals: int) -> list:
    import plotly.graph_objects as go

    s = scene.sheet
    traces = [
        go.Surface(
            x=rounded(s[..., 0], decimals), y=rounded(s[..., 1], decimals), z=rounded(s[..., 2], decimals),
            name="sheet ⟨x,x⟩_L = −k", colorscale=[[0.0, SHEET_COLOUR], [1.0, SHEET_COLOUR]], showscale=False,
            opacity=0.35, hoverinfo="skip", showlegend=True,
        )
    ]
    if scene.grid.shape[0]:
        traces.append(_lines3d(scene.grid, decimals, line=dict(color=GRID_COLOUR, width=1.5), name="geodesic grid"))
    if scene.edges.shape[0]:
        traces.append(_lines3d(scene.edges, decimals, line=dict(color=style.EDGE, width=4), name="geodesics"))
    x = scene.points
    traces.append(go.Scatter3d(x=rounded(x[:, 0], decimals), y=rounded(x[:, 1], decimals),
                               z=rounded(x[:, 2], decimals), mode="markers", marker=_marker(scene.values, decimals),
                               name="points", text=_hover(scene.labels, scene.values, decimals), hoverinfo="text"))
    if scene.origin is not None:
        o = scene.origin
        traces.append(go.Scatter3d(x=[float(o[0])], y=[float(o[1])], z=rounded(o[2:], decimals), mode="markers",
                                   marker=dict(symbol="x", size=4, color=ORIGIN_COLOUR), name="origin (√k, 0, 0)"))
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


def _boundary_trace(scene: DiskScene, decimals: int, legend: bool) -> Any:
    import plotly.graph_objects as go

    return go.Scatter(x=rounded(scene.boundary[:, 0], decimals), y=rounded(scene.boundary[:, 1], decimals),
                      mode="lines", line=dict(color="black", width=1.5),
                      name=f"boundary |{scene.coord}| = √k (ideal points)", hoverinfo="skip", showlegend=legend)


def _disk_traces(scene: DiskScene, decimals: int, legend: bool = True) -> list:
    import plotly.graph_objects as go

    traces = [_boundary_trace(scene, decimals, legend)]
    if scene.grid.shape[0]:
        traces.append(_lines2d(scene.grid, decimals, line=dict(color=GRID_COLOUR, width=0.8), name="geodesic grid",
                               showlegend=legend))
    if scene.edges.shape[0]:
        traces.append(_lines2d(scene.edges, decimals, line=dict(color=style.EDGE, width=2.5), name="geodesics",
                               showlegend=legend))
    p = scene.points
    traces.append(go.Scatter(x=rounded(p[:, 0], decimals), y=rounded(p[:, 1], decimals), mode="markers",
                             marker=_marker(scene.values, decimals) | dict(size=7), name="points",
                             text=_hover(scene.labels, scene.values, decimals), hoverinfo="text", showlegend=legend))
    if scene.origin is not None:
        traces.append(go.Scatter(x=[float(scene.origin[0])], y=[float(scene.origin[1])], mode="markers",
                                 marker=dict(symbol="x", size=8, color=ORIGIN_COLOUR), name="origin",
                                 showlegend=legend))
    return traces


def _disk_axes(scene: DiskScene) -> tuple[dict, dict]:
    lim = round(scene.limit, 6)
    return (
        dict(title=dict(text=f"{scene.coord}₁"), range=[-lim, lim], zeroline=False),
        dict(title=dict(text=f"{scene.coord}₂"), range=[-lim, lim], zeroline=False),
    )


def _disk_panel_axes(fig: go.Figure, disk: DiskScene, col: int) -> None:
    """The disk's axes on panel ``col`` of a one-row figure, with an equal aspect (anchored to its own x axis)."""
    xa, ya = _disk_axes(disk)
    anchor = "x" + fig.get_subplot(1, col).xaxis.plotly_name[len("xaxis"):]
    fig.update_xaxes(xa, row=1, col=col)
    fig.update_yaxes(ya | dict(scaleanchor=anchor, scaleratio=1), row=1, col=col)


def _colour_scale(fig: go.Figure, scene: Any, value_label: str, cmap: str, decimals: int) -> None:
    """The figure's colour axis for the scene's values (none when the points are not coloured by a value)."""
    if scene.values is not None:
        fig.update_layout(coloraxis=_coloraxis(scene.value_range, value_label, cmap, decimals))


# --------------------------------------------------------------------------- #
# renderers: a scene in, a figure out
# --------------------------------------------------------------------------- #
def draw_hyperboloid_plotly(
    scene: HyperboloidScene,
    *,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    height: int = 520,
) -> go.Figure:
    """Draw a :class:`~hypviz.plots.scenes.HyperboloidScene` in 3-D.

    Traces, in order: the sheet (a ``Surface``), the geodesic grid (if any), the geodesics (one
    trace for all edges), the points, the origin (if shown).  Every coordinate is rounded to
    ``decimals`` places.
    """
    import plotly.graph_objects as go

    fig = go.Figure(_hyperboloid_traces(scene, decimals))
    base = title or f"Hyperboloid ⟨x,x⟩_L = −k, k = {_k_text(scene.k)} (curvature −1/k)"
    fig.update_layout(title=_title(base, scene.note), scene=_scene_layout(), height=height,
                      margin=dict(l=0, r=0, t=60, b=0), legend=dict(x=0.0, y=1.0))
    _colour_scale(fig, scene, value_label, cmap, decimals)
    return fig


def draw_disk_plotly(
    scene: DiskScene,
    *,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    height: int = 500,
) -> go.Figure:
    """Draw a :class:`~hypviz.plots.scenes.DiskScene`.

    Traces, in order: boundary circle, geodesic grid (if any), geodesics (if any), points, origin
    (if shown).  Equal aspect; data rounded to ``decimals`` places.
    """
    import plotly.graph_objects as go

    fig = go.Figure(_disk_traces(scene, decimals))
    text = MODEL_TEXT[scene.model]
    base = title or f"{text['name']}: {text['plain']}, k = {_k_text(scene.k)} ({text['geo']})"
    xa, ya = _disk_axes(scene)
    fig.update_layout(title=_title(base, scene.note), xaxis=xa, yaxis=ya | dict(scaleanchor="x", scaleratio=1),
                      height=height, plot_bgcolor="white")
    _colour_scale(fig, scene, value_label, cmap, decimals)
    return fig


def draw_three_models_plotly(
    scene: ThreeModelsScene,
    *,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    height: int = 460,
) -> go.Figure:
    """Draw a :class:`~hypviz.plots.scenes.ThreeModelsScene`: hyperboloid (3-D), Poincare disk, Klein disk, one colour scale."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=3, specs=[[{"type": "scene"}, {"type": "xy"}, {"type": "xy"}]],
        subplot_titles=("hyperboloid ⟨x,x⟩_L = −k", "Poincaré: " + MODEL_TEXT["poincare"]["plain"],
                        "Klein: " + MODEL_TEXT["klein"]["plain"]),
        horizontal_spacing=0.06,
    )
    for tr in _hyperboloid_traces(scene.hyperboloid, decimals):
        fig.add_trace(tr, row=1, col=1)
    disks = ((2, scene.poincare), (3, scene.klein))
    for col, disk in disks:
        for tr in _disk_traces(disk, decimals, legend=False):
            fig.add_trace(tr, row=1, col=col)
    for col, disk in disks:
        _disk_panel_axes(fig, disk, col)
    base = title or f"The same points in three models of hyperbolic space, k = {_k_text(scene.k)}"
    fig.update_layout(title=_title(base, scene.note), scene=_scene_layout(), height=height,
                      plot_bgcolor="white", margin=dict(l=10, r=10, t=90, b=10),
                      legend=dict(orientation="h", x=0.0, y=-0.05))
    _colour_scale(fig, scene.hyperboloid, value_label, cmap, decimals)
    return fig


def draw_attention_plotly(
    scene: AttentionScene,
    *,
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    panel_height: int = 440,
) -> go.Figure:
    """Draw an :class:`~hypviz.plots.scenes.AttentionScene`: one disk per kind, one colour scale.

    Per panel: the boundary, the geodesic grid (one trace), one trace per edge to a strongest key
    (width, opacity and colour from the scene: the colour is the colorscale at
    :math:`A_{ij}/A_{\\max}`, rounded to ``decimals`` places), the keys coloured by weight (marker
    diameter the square root of the scene's area), the query as a star and the ring of a strong key
    at the query's own position.
    """
    import plotly.graph_objects as go
    from plotly.colors import sample_colorscale
    from plotly.subplots import make_subplots

    disk = scene.disk
    n = len(scene.panels)
    fig = make_subplots(rows=1, cols=n, horizontal_spacing=0.05,
                        subplot_titles=[f"{kinds.get(p.kind).plain}<br>top-{len(p.keys)} keys carry {p.share:.3f}"
                                        for p in scene.panels])
    scale = _plotly_scale(cmap)
    p_query, p_keys = disk.points[0], disk.points[1:]
    for col, panel in enumerate(scene.panels, start=1):
        first = col == 1
        fig.add_trace(_boundary_trace(disk, decimals, first), row=1, col=col)
        if disk.grid.shape[0]:
            fig.add_trace(_lines2d(disk.grid, decimals, line=dict(color=GRID_COLOUR, width=0.6), name="geodesic grid",
                                   legendgroup="grid", showlegend=first), row=1, col=col)
        rel = rounded(panel.edge_weights / scene.w_max, decimals)
        for line, r, w, lw, a in zip(panel.edges, rel, panel.edge_weights.tolist(), panel.edge_widths.tolist(),
                                     panel.edge_alphas.tolist()):
            fig.add_trace(_lines2d(line[None], decimals, line=dict(color=sample_colorscale(scale, [r])[0],
                                                                   width=round(lw, 3)),
                                   opacity=round(a, 3), name=f"edge, A = {w:.3g}", legendgroup="edges",
                                   showlegend=False), row=1, col=col)
        fig.add_trace(go.Scatter(x=rounded(p_keys[:, 0], decimals), y=rounded(p_keys[:, 1], decimals),
                                 mode="markers", name="keys", legendgroup="keys", showlegend=first,
                                 marker=dict(color=rounded(panel.row, decimals), coloraxis="coloraxis",
                                             size=rounded(np.sqrt(panel.key_sizes), 3),
                                             line=dict(width=0.5, color="black")),
                                 text=[f"key {j}: A = {v:.3g}" for j, v in enumerate(panel.row.tolist())],
                                 hoverinfo="text"), row=1, col=col)
        fig.add_trace(go.Scatter(x=rounded(p_query[:1], decimals), y=rounded(p_query[1:], decimals), mode="markers",
                                 marker=dict(symbol="star", size=15, color=style.QUERY, line=dict(width=1, color="black")),
                                 name=f"query {scene.query}", legendgroup="query", showlegend=first), row=1, col=col)
        if panel.ring is not None:
            weight, width, alpha = panel.ring
            colour = sample_colorscale(scale, [rounded(np.array(weight / scene.w_max), decimals)])[0]
            fig.add_trace(go.Scatter(x=rounded(p_query[:1], decimals), y=rounded(p_query[1:], decimals),
                                     mode="markers", opacity=round(alpha, 3),
                                     marker=dict(symbol="circle-open", size=23, color=colour,
                                                 line=dict(width=round(width, 3), color=colour)),
                                     name=f"key at the query's position, A = {weight:.3g}", showlegend=False),
                          row=1, col=col)
        _disk_panel_axes(fig, disk, col)
    tau_text = "" if scene.temperature is None else f", τ = {scene.temperature:.3g}"
    base = title or (f"Attention of query {scene.query} drawn on the manifold ({MODEL_TEXT[scene.model]['name']}), "
                     f"k = {_k_text(scene.k)}{tau_text}")
    fig.update_layout(title=_title(base, scene.note), height=panel_height, plot_bgcolor="white",
                      margin=dict(l=10, r=10, t=110, b=10), legend=dict(orientation="h", x=0.0, y=-0.08),
                      coloraxis=dict(colorscale=scale, cmin=0.0, cmax=rounded(np.array(scene.w_max), decimals),
                                     colorbar=dict(title=dict(text="attention weight A_ij"))))
    return fig


# --------------------------------------------------------------------------- #
# figure functions: build the scene, draw it
# --------------------------------------------------------------------------- #
def hyperboloid_figure_plotly(
    points: ArrayLike,
    *,
    k: float = 1.0,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    height: int = 520,
    **scene_options: Any,
) -> go.Figure:
    r"""Interactive 3-D picture of the sheet :math:`\langle x, x\rangle_L = -k` (:math:`d = 2`), points and geodesics.

    Axes: :math:`x_1`, :math:`x_2` (spatial) horizontal, :math:`x_t` (time) vertical.
    :func:`~hypviz.plots.scenes.hyperboloid_scene` (the scene parameters, ``sheet_resolution``
    included: see there) drawn by :func:`draw_hyperboloid_plotly` (``value_label``, ``cmap``,
    ``title``, ``decimals``, ``height``).

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.hyperboloid_scene`
    (``values``, ``edges``, ``grid``, ``radius``, ``n_geodesic``, ``show_origin``, ``vmin``,
    ``vmax``, ``sheet_resolution``), passed to it; here ``n_geodesic = 48``, ``sheet_resolution =
    (20, 37)`` by default (a lighter figure).
    """
    scene = hyperboloid_scene(points, k=k, **{"n_geodesic": 48, "sheet_resolution": (20, 37), **scene_options})
    return draw_hyperboloid_plotly(scene, value_label=value_label, cmap=cmap, title=title, decimals=decimals,
                                   height=height)


def disk_figure_plotly(
    points: ArrayLike,
    *,
    k: float = 1.0,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    height: int = 500,
    **scene_options: Any,
) -> go.Figure:
    """Interactive Poincare or Klein disk: :func:`~hypviz.plots.scenes.disk_scene` drawn by :func:`draw_disk_plotly`.

    Parameters as :func:`hypviz.plots.manifold_mpl.disk_figure_mpl`, plus ``decimals`` and ``height``.

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.disk_scene` (``model``,
    ``values``, ``edges``, ``grid``, ``radius``, ``n_geodesic``, ``show_origin``, ``vmin``,
    ``vmax``), passed to it; here ``n_geodesic = 48`` by default (a lighter figure).
    """
    scene = disk_scene(points, k=k, **{"n_geodesic": 48, **scene_options})
    return draw_disk_plotly(scene, value_label=value_label, cmap=cmap, title=title, decimals=decimals, height=height)


def poincare_figure_plotly(points: ArrayLike, *, k: float = 1.0, **kwargs: Any) -> go.Figure:
    """:func:`disk_figure_plotly` with ``model="poincare"``."""
    return disk_figure_plotly(points, k=k, model="poincare", **kwargs)


def klein_figure_plotly(points: ArrayLike, *, k: float = 1.0, **kwargs: Any) -> go.Figure:
    """:func:`disk_figure_plotly` with ``model="klein"``."""
    return disk_figure_plotly(points, k=k, model="klein", **kwargs)


def three_models_figure_plotly(
    points: ArrayLike,
    *,
    k: float = 1.0,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    height: int = 460,
    **scene_options: Any,
) -> go.Figure:
    """Interactive three panels: hyperboloid (3-D), Poincare disk, Klein disk, one colour scale.

    :func:`~hypviz.plots.scenes.three_models_scene` drawn by :func:`draw_three_models_plotly`;
    parameters as :func:`hyperboloid_figure_plotly`.

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.three_models_scene`
    (``values``, ``edges``, ``grid``, ``radius``, ``n_geodesic``, ``show_origin``,
    ``sheet_resolution``), passed to it; here ``n_geodesic = 40``, ``sheet_resolution = (16, 31)``
    by default (a lighter figure).
    """
    scene = three_models_scene(points, k=k, **{"n_geodesic": 40, "sheet_resolution": (16, 31), **scene_options})
    return draw_three_models_plotly(scene, value_label=value_label, cmap=cmap, title=title, decimals=decimals,
                                    height=height)


def attention_on_manifold_plotly(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    k: float = 1.0,
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    decimals: int = 6,
    panel_height: int = 440,
    **scene_options: Any,
) -> go.Figure:
    """Interactive version of :func:`hypviz.plots.manifold_mpl.attention_on_manifold_mpl`, from the same scene.

    :func:`~hypviz.plots.scenes.attention_scene` (weights from :func:`hypviz.attention.top_attention`)
    drawn by :func:`draw_attention_plotly`; parameters as the matplotlib figure, plus ``decimals``
    and ``panel_height`` (pixels).

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.attention_scene` (``query``,
    ``kinds``, ``top``, ``temperature``, ``model``, ``grid``, ``radius``, ``n_geodesic``,
    ``max_linewidth``), passed to it.
    """
    scene = attention_scene(queries, keys, k=k, **scene_options)
    return draw_attention_plotly(scene, cmap=cmap, title=title, decimals=decimals, panel_height=panel_height)
