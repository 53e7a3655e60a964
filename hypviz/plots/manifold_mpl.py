r"""The manifold figures drawn with matplotlib: the hyperboloid sheet, the Poincare and Klein disks, attention on them.

Each figure is a scene of :mod:`hypviz.plots.scenes`, built once from the inputs, and a renderer
here that only draws it (``draw_*_mpl``; the ``*_figure_mpl`` functions build the scene and call
the renderer).  Every function returns a ``matplotlib.figure.Figure`` made without pyplot (shown
once when returned from a notebook cell, no global figure; save it with ``fig.savefig``).  With
``ax=`` (one Axes; ``projection="3d"`` for the hyperboloid) or ``axes=`` (one per panel) the figure
is drawn there, its colourbar, legend and overall title go on those Axes' ``Figure`` or
``SubFigure``, and the root ``Figure`` is returned: several figures compose into one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, cast

import hypviz.plots._common as common
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

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from mpl_toolkits.mplot3d import Axes3D

__all__ = [
    "draw_hyperboloid_mpl",
    "draw_disk_mpl",
    "draw_three_models_mpl",
    "draw_attention_mpl",
    "hyperboloid_figure_mpl",
    "disk_figure_mpl",
    "poincare_figure_mpl",
    "klein_figure_mpl",
    "three_models_figure_mpl",
    "attention_on_manifold_mpl",
]

ArrayLike = Any

ORIGIN_COLOUR = style.BLACK
GRID_COLOUR = "#999999"
SHEET_COLOUR = "#BBBBBB"


def _k_text(k: float) -> str:
    return f"{k:g}"


def _title(base: str, note: str) -> str:
    return base if not note else f"{base}\n{note}"


# --------------------------------------------------------------------------- #
# drawing one scene into one Axes
# --------------------------------------------------------------------------- #
def _hyperboloid_into(ax: Axes3D, scene: HyperboloidScene, cmap: str) -> Any:
    from matplotlib.ticker import MaxNLocator
    from mpl_toolkits.mplot3d.art3d import Line3DCollection

    sheet = scene.sheet
    ax.plot_surface(sheet[..., 0], sheet[..., 1], sheet[..., 2], color=SHEET_COLOUR, alpha=0.25,
                    linewidth=0, shade=False, rstride=1, cstride=1)
    if scene.grid.shape[0]:
        ax.add_collection3d(Line3DCollection(list(scene.grid), colors=GRID_COLOUR, linewidths=0.5, alpha=0.8,
                                             label="geodesic grid"))
    if scene.edges.shape[0]:
        ax.add_collection3d(Line3DCollection(list(scene.edges), colors=style.EDGE, linewidths=1.6, label="geodesics"))
    x = scene.points
    mappable = None
    if scene.values is not None:
        vmin, vmax = cast(tuple[float, float], scene.value_range)  # set with the values
        mappable = ax.scatter(x[:, 0], x[:, 1], x[:, 2], c=scene.values, cmap=cmap, vmin=vmin, vmax=vmax,
                              s=22, edgecolors="k", linewidths=0.3, depthshade=False, label="points")
    else:
        ax.scatter(x[:, 0], x[:, 1], x[:, 2], color=style.POINT, s=22, edgecolors="k", linewidths=0.3,
                   depthshade=False, label="points")
    if scene.origin is not None:
        o = scene.origin
        ax.scatter([o[0]], [o[1]], [o[2]], marker="x", color=ORIGIN_COLOUR, s=40, depthshade=False,
                   label=r"origin $(\sqrt{k},0,0)$")
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        axis.set_major_locator(MaxNLocator(5))
    ax.set_xlabel(r"$x_1$ (spatial)")
    ax.set_ylabel(r"$x_2$ (spatial)")
    ax.set_zlabel(r"$x_t$ (time)")
    ax.view_init(elev=18, azim=-60)
    return mappable


def _disk_into(ax: Axes, scene: DiskScene, cmap: str) -> Any:
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Circle

    c = scene.coord
    ax.add_patch(Circle((0.0, 0.0), scene.boundary_radius, fill=False, color="k", linewidth=1.2,
                        label=r"boundary $|%s|=\sqrt{k}$ (ideal points)" % c))
    if scene.grid.shape[0]:
        ax.add_collection(LineCollection(list(scene.grid), colors=GRID_COLOUR, linewidths=0.5, label="geodesic grid"))
    if scene.edges.shape[0]:
        ax.add_collection(LineCollection(list(scene.edges), colors=style.EDGE, linewidths=1.6, label="geodesics"))
    p = scene.points
    mappable = None
    if scene.values is not None:
        vmin, vmax = cast(tuple[float, float], scene.value_range)  # set with the values
        mappable = ax.scatter(p[:, 0], p[:, 1], c=scene.values, cmap=cmap, vmin=vmin, vmax=vmax, s=22,
                              edgecolors="k", linewidths=0.3, zorder=3, label="points")
    else:
        ax.scatter(p[:, 0], p[:, 1], color=style.POINT, s=22, edgecolors="k", linewidths=0.3, zorder=3,
                   label="points")
    if scene.origin is not None:
        ax.scatter([scene.origin[0]], [scene.origin[1]], marker="x", color=ORIGIN_COLOUR, s=40, zorder=4,
                   label="origin")
    _disk_frame(ax, scene)
    return mappable


def _disk_frame(ax: Axes, scene: DiskScene) -> None:
    ax.set_xlim(-scene.limit, scene.limit)
    ax.set_ylim(-scene.limit, scene.limit)
    ax.set_aspect("equal")
    ax.set_xlabel(rf"${scene.coord}_1$")
    ax.set_ylabel(rf"${scene.coord}_2$")


# --------------------------------------------------------------------------- #
# renderers: a scene in, a figure out
# --------------------------------------------------------------------------- #
def draw_hyperboloid_mpl(
    scene: HyperboloidScene,
    *,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 5.0),
    ax: Axes | None = None,
) -> Figure:
    """Draw a :class:`~hypviz.plots.scenes.HyperboloidScene` in 3-D: :math:`x_1`, :math:`x_2` (spatial), :math:`x_t`
    (time, vertical).

    ``ax``: a 3-D Axes (``projection="3d"``) to draw into; the colourbar (when the scene has values,
    labelled ``value_label``) goes beside it.

    Raises
    ------
    TypeError
        When ``ax`` is not a 3-D matplotlib Axes.
    """
    fig, ax = common.single(ax, figsize, projection="3d")
    mappable = _hyperboloid_into(ax, scene, cmap)
    if mappable is not None:
        fig.colorbar(mappable, ax=ax, label=value_label, shrink=0.65, pad=0.08)
    base = title or (r"Hyperboloid $\langle x,x\rangle_L=-k$, $k=%s$ (curvature $-1/k$)" % _k_text(scene.k))
    ax.set_title(_title(base, scene.note), fontsize=10)
    return common.root(fig)


def draw_disk_mpl(
    scene: DiskScene,
    *,
    value_label: str = "value",
    legend: bool = True,
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    figsize: tuple[float, float] = (5.6, 5.0),
    ax: Axes | None = None,
) -> Figure:
    """Draw a :class:`~hypviz.plots.scenes.DiskScene`: boundary, grid, geodesics, points, origin; equal aspect.

    ``legend`` puts a legend under the disk; ``ax`` is an Axes to draw into.

    Raises
    ------
    TypeError
        When ``ax`` is not a matplotlib Axes.
    """
    fig, ax = common.single(ax, figsize)
    mappable = _disk_into(ax, scene, cmap)
    if mappable is not None:
        fig.colorbar(mappable, ax=ax, label=value_label, shrink=0.8)
    text = MODEL_TEXT[scene.model]
    base = title or f"{text['name']} {text['formula']}, $k={_k_text(scene.k)}$"
    ax.set_title(_title(base, scene.note), fontsize=10)
    if legend:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
    return common.root(fig)


def draw_three_models_mpl(
    scene: ThreeModelsScene,
    *,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    figsize: tuple[float, float] = (8.8, 3.4),
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """Draw a :class:`~hypviz.plots.scenes.ThreeModelsScene`: hyperboloid, Poincare disk, Klein disk, one colourbar.

    ``axes``: three Axes to draw into, the first 3-D (``projection="3d"``); the overall title goes
    on their figure (or subfigure).

    Raises
    ------
    TypeError, ValueError
        When ``axes`` are not three matplotlib Axes of one figure, the first 3-D.
    """
    if axes is None:
        fig = style.new_figure(figsize)
        spec = fig.add_gridspec(1, 3, width_ratios=(1.15, 1.0, 1.0), wspace=0.12)
        ax0 = fig.add_subplot(spec[0, 0], projection="3d")
        ax1 = fig.add_subplot(spec[0, 1])
        ax2 = fig.add_subplot(spec[0, 2])
    else:
        fig, (ax0, ax1, ax2) = common.panels(axes, 3, figsize)
        common.check_axes(ax0, "axes[0]", "3d")
    mappable = _hyperboloid_into(ax0, scene.hyperboloid, cmap)
    _disk_into(ax1, scene.poincare, cmap)
    _disk_into(ax2, scene.klein, cmap)
    ax0.set_title(r"hyperboloid $\langle x,x\rangle_L=-k$", fontsize=10)
    ax1.set_title("Poincaré " + MODEL_TEXT["poincare"]["formula"], fontsize=10)
    ax2.set_title("Klein " + MODEL_TEXT["klein"]["formula"], fontsize=10)
    if mappable is not None:
        fig.colorbar(mappable, ax=[ax0, ax1, ax2], label=value_label, shrink=0.8)
    base = title or (r"The same points in three models of hyperbolic space, $k=%s$" % _k_text(scene.k))
    fig.suptitle(_title(base, scene.note), fontsize=11)
    return common.root(fig)


def draw_attention_mpl(
    scene: AttentionScene,
    *,
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    panel_size: float = 3.7,
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """Draw an :class:`~hypviz.plots.scenes.AttentionScene`: one disk per kind, one colourbar, one legend.

    Each panel: the geodesic grid, the edges to the strongest keys (colour, width and opacity from
    the scene), every key coloured by its weight, the query as a star, a ring for a strong key at
    the query's own position.  ``axes``: one Axes per kind to draw into; the colourbar, legend and
    overall title go on their figure (or subfigure).

    Raises
    ------
    TypeError, ValueError
        When ``axes`` are not one matplotlib Axes per panel, of one figure.
    """
    import matplotlib as mpl
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Circle

    n_panels = len(scene.panels)
    fig, axes = common.panels(axes, n_panels, (panel_size * n_panels + 1.2, panel_size + 1.3))
    disk = scene.disk
    norm = mpl.colors.Normalize(vmin=0.0, vmax=scene.w_max)
    colormap = mpl.colormaps[cmap]
    p_query, p_keys = disk.points[0], disk.points[1:]
    for ax, panel in zip(axes, scene.panels):
        ax.add_patch(Circle((0.0, 0.0), disk.boundary_radius, fill=False, color="k", linewidth=1.2))
        if disk.grid.shape[0]:
            ax.add_collection(LineCollection(list(disk.grid), colors=GRID_COLOUR, linewidths=0.4, label="geodesic grid"))
        colours = colormap(norm(panel.edge_weights))
        colours[:, 3] = panel.edge_alphas
        ax.add_collection(LineCollection(list(panel.edges), colors=colours, linewidths=panel.edge_widths,
                                         capstyle="round", label=f"top-{len(panel.keys)} edges", zorder=2))
        ax.scatter(p_keys[:, 0], p_keys[:, 1], c=panel.row, cmap=colormap, norm=norm, s=panel.key_sizes,
                   edgecolors="k", linewidths=0.3, zorder=3, label="keys")
        ax.scatter([p_query[0]], [p_query[1]], marker="*", s=220, color=style.QUERY, edgecolors="k",
                   linewidths=0.6, zorder=4, label=f"query {scene.query}")
        if panel.ring is not None:
            weight, width, alpha = panel.ring
            ax.scatter([p_query[0]], [p_query[1]], marker="o", s=520, facecolors="none",
                       edgecolors=[colormap(norm(weight))], alpha=alpha, linewidths=width, zorder=5,
                       label=f"key at the query's position, A = {weight:.3g}")
        _disk_frame(ax, disk)
        ax.set_title(f"{kinds.get(panel.kind).title}\ntop-{len(panel.keys)} keys carry {panel.share:.3f} of the weight",
                     fontsize=10)
    sm = mpl.cm.ScalarMappable(norm=norm, cmap=colormap)
    fig.colorbar(sm, ax=list(axes), label=r"attention weight $A_{ij}$ (colour of keys and edges)", shrink=0.8)
    handles = [Line2D([], [], color=colormap(norm(v)), lw=float(lw), alpha=float(a), label=rf"$A_{{ij}} = {v:.3g}$")
               for v, lw, a in zip(scene.legend_weights.tolist(), scene.legend_widths, scene.legend_alphas)]
    handles += [
        Line2D([], [], ls="", marker="*", ms=12, color=style.QUERY, markeredgecolor="k", label=f"query {scene.query}"),
        Line2D([], [], ls="", marker="o", ms=5, color=colormap(0.5), markeredgecolor="k", label=f"keys ({scene.n_keys})"),
    ]
    tie_note = " (and keys tied with the weakest)" if scene.tied else ""
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False,
               title=f"edges: geodesics to the {scene.top} strongest keys{tie_note}, width and opacity ∝ weight",
               title_fontsize=8)
    tau_text = "" if scene.temperature is None else rf", $\tau={scene.temperature:.3g}$"
    base = title or (
        rf"Attention of query {scene.query} drawn on the manifold ({MODEL_TEXT[scene.model]['name']}), "
        rf"$k={_k_text(scene.k)}${tau_text}"
    )
    fig.suptitle(_title(base, scene.note), fontsize=11)
    return common.root(fig)


# --------------------------------------------------------------------------- #
# figure functions: build the scene, draw it
# --------------------------------------------------------------------------- #
def hyperboloid_figure_mpl(
    points: ArrayLike,
    *,
    k: float = 1.0,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 5.0),
    ax: Axes | None = None,
    **scene_options: Any,
) -> Figure:
    r"""Static 3-D picture of the sheet :math:`\langle x, x\rangle_L = -k` (:math:`d = 2`) with points and geodesics.

    :func:`~hypviz.plots.scenes.hyperboloid_scene` (``points``, ``k``, ``values``, ``edges``,
    ``grid``, ``radius``, ``n_geodesic``, ``show_origin``, ``vmin``, ``vmax``: see there) drawn by
    :func:`draw_hyperboloid_mpl` (``value_label``, the colourbar's label; ``cmap``; ``title``,
    replacing the default; ``figsize``; ``ax``, a 3-D Axes to draw into).  For :math:`d > 2` the
    display projection is stated in the title.

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.hyperboloid_scene`
    (``values``, ``edges``, ``grid``, ``radius``, ``n_geodesic``, ``show_origin``, ``vmin``,
    ``vmax``), passed to it.

    Raises
    ------
    ValueError
        As :func:`~hypviz.plots.scenes.hyperboloid_scene`; ``TypeError`` for an ``ax`` that is not 3-D.
    """
    scene = hyperboloid_scene(points, k=k, **scene_options)
    return draw_hyperboloid_mpl(scene, value_label=value_label, cmap=cmap, title=title, figsize=figsize, ax=ax)


def disk_figure_mpl(
    points: ArrayLike,
    *,
    k: float = 1.0,
    value_label: str = "value",
    legend: bool = True,
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    figsize: tuple[float, float] = (5.6, 5.0),
    ax: Axes | None = None,
    **scene_options: Any,
) -> Figure:
    r"""The Poincare disk (``model="poincare"``) or Klein disk (``model="klein"``) of radius :math:`\sqrt{k}`.

    .. math::

        p = \frac{\sqrt{k}\,x_s}{x_t + \sqrt{k}} \quad\text{(Poincare)}, \qquad
        K = \frac{\sqrt{k}\,x_s}{x_t} \quad\text{(Klein)}

    :func:`~hypviz.plots.scenes.disk_scene` (geodesics come out as arcs orthogonal to the boundary
    or straight chords; the grid, default on, runs on to hyperbolic radius :math:`6\sqrt{k}`) drawn
    by :func:`draw_disk_mpl` (``legend``: a legend under the disk; ``ax``: an Axes to draw into).
    Parameters as :func:`hyperboloid_figure_mpl`.

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.disk_scene` (``model``,
    ``values``, ``edges``, ``grid``, ``radius``, ``n_geodesic``, ``show_origin``, ``vmin``,
    ``vmax``), passed to it.

    Raises
    ------
    ValueError
        For a ``model`` other than ``"poincare"`` and ``"klein"``, or as :func:`hyperboloid_figure_mpl`.
    """
    scene = disk_scene(points, k=k, **scene_options)
    return draw_disk_mpl(scene, value_label=value_label, legend=legend, cmap=cmap, title=title, figsize=figsize,
                         ax=ax)


def poincare_figure_mpl(points: ArrayLike, *, k: float = 1.0, ax: Axes | None = None, **kwargs: Any) -> Figure:
    """:func:`disk_figure_mpl` with ``model="poincare"`` (``ax`` and the other keywords as there)."""
    return disk_figure_mpl(points, k=k, model="poincare", ax=ax, **kwargs)


def klein_figure_mpl(points: ArrayLike, *, k: float = 1.0, ax: Axes | None = None, **kwargs: Any) -> Figure:
    """:func:`disk_figure_mpl` with ``model="klein"`` (``ax`` and the other keywords as there)."""
    return disk_figure_mpl(points, k=k, model="klein", ax=ax, **kwargs)


def three_models_figure_mpl(
    points: ArrayLike,
    *,
    k: float = 1.0,
    value_label: str = "value",
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    figsize: tuple[float, float] = (8.8, 3.4),
    axes: Sequence[Axes] | None = None,
    **scene_options: Any,
) -> Figure:
    """The same points and geodesics in the hyperboloid, the Poincare disk and the Klein disk.

    Three panels sharing one colour scale (one colourbar): :func:`~hypviz.plots.scenes.three_models_scene`
    drawn by :func:`draw_three_models_mpl` (``axes``: three Axes to draw into, the first 3-D).
    Parameters as :func:`hyperboloid_figure_mpl`.

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.three_models_scene`
    (``values``, ``edges``, ``grid``, ``radius``, ``n_geodesic``, ``show_origin``), passed to it.
    """
    scene = three_models_scene(points, k=k, **scene_options)
    return draw_three_models_mpl(scene, value_label=value_label, cmap=cmap, title=title, figsize=figsize, axes=axes)


def attention_on_manifold_mpl(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    k: float = 1.0,
    cmap: str = style.SEQUENTIAL,
    title: str | None = None,
    panel_size: float = 3.7,
    axes: Sequence[Axes] | None = None,
    **scene_options: Any,
) -> Figure:
    r"""One query's attention drawn on the manifold: edges to its strongest keys, one panel per kind.

    For each kind (default ``"spatial"`` and ``"distance"``, side by side) the panel shows, in the
    Poincare disk (``model="poincare"``) or the Klein disk (``"klein"``):

    * every key as a dot coloured by its weight :math:`A_{ij}` in the query's row (one colour scale,
      0 to the maximum over all panels, one colourbar);
    * the query as a star; the ``top`` strongest keys (with every key tied with the weakest of them,
      see :func:`hypviz.attention.top_attention`) are drawn larger, in proportion to their weight;
    * the exact geodesic (:func:`hypviz.lorentz.geodesic`) from the query to each of those strongest
      keys, with line width and opacity growing with the weight,

      .. math::

          \mathrm{width} = \max\Bigl(\mathrm{max\_linewidth}\,\frac{A_{ij}}{A_{\max}},\; 0.8\,\mathrm{pt}\Bigr),
          \qquad \mathrm{opacity} = 0.45 + 0.55\,\frac{A_{ij}}{A_{\max}},

      (:math:`A_{\max}` the largest weight of any panel) and coloured on the same scale; a strong key
      at the query's own position (self-attention, a geodesic of length 0) is drawn as a ring around
      the star, with the same width and colour code; a legend gives the weights of three reference
      widths.

    The scene is :func:`~hypviz.plots.scenes.attention_scene` (weights from
    :func:`hypviz.attention.top_attention`; nothing here computes attention; :math:`d > 2` through
    one display projection fitted to the query and all keys, stated on the figure), drawn by
    :func:`draw_attention_mpl`.

    ``scene_options`` are the keywords of :func:`~hypviz.plots.scenes.attention_scene` (``query``,
    ``kinds``, ``top``, ``temperature``, ``model``, ``grid``, ``radius``, ``n_geodesic``,
    ``max_linewidth``), passed to it.

    Parameters
    ----------
    queries : array or tensor, shape (N, d + 1)
        Query points on :math:`\langle x, x\rangle_L = -k`.
    keys : array or tensor, shape (M, d + 1)
        Key points.
    k : float
        Curvature parameter.
    query : int
        The query row to show.
    kinds, top, temperature
        As :func:`hypviz.attention.top_attention`.
    model : str
        ``"poincare"`` or ``"klein"``.
    grid, radius, n_geodesic
        As :func:`disk_figure_mpl`.
    max_linewidth, cmap, title, panel_size
        The widest edge (pt), the colormap, a title replacing the default, the panel size (inches).
    axes : sequence of matplotlib.axes.Axes, optional
        One Axes per kind to draw into.

    Returns
    -------
    matplotlib.figure.Figure
        One disk axes per kind, then the colourbar axes.
    """
    scene = attention_scene(queries, keys, k=k, **scene_options)
    return draw_attention_mpl(scene, cmap=cmap, title=title, panel_size=panel_size, axes=axes)
