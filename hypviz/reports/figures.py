r"""The figures of the two reports, drawn with :mod:`hypviz.plots`.

For ``hypviz compare`` / ``hypviz demo`` (:mod:`hypviz.reports.point_report`): :func:`figures` gives the
heatmaps and difference maps of the shown head (:func:`hypviz.plots.attention.heatmaps_mpl`; maps whose
largest weights differ by more than ``SHARED_SCALE_RATIO`` get their own colour scales, :func:`heatmap_scales`,
:func:`~hypviz.plots.attention.difference_maps_mpl`) and :func:`rows_figure`, every query row read
against the reference's distance from the uniform row and, for the softmax comparisons, against its
bound :math:`\tanh((\Delta + \epsilon)/4)` (:func:`hypviz.plots.curves.bound_scatter_mpl`);
:func:`plotly_rows` is the interactive version of its left panel.  For ``hypviz compare
CAPTURE.pt`` (:mod:`hypviz.reports.model_report`): :func:`model_figure` (:func:`layers_figure` of
:func:`hypviz.reports.model_report.layer_panels`).  Nothing here computes a statistic: every value drawn was
computed by :func:`hypviz.attention.compare` (the figures take a :class:`hypviz.reports.point_report.Result`,
or the arrays of each layer); matplotlib and plotly are imported when a figure is drawn.  This module comes
after the analysis in the reports' one-way chain (``point_report`` -> ``model_report`` -> ``figures`` ->
``html`` -> ``writing``): it imports the two analysis modules, never the pages.
"""

from __future__ import annotations

import io
import math
from typing import Any, Mapping, Sequence

import numpy as np

import hypviz.plots.style as style
from hypviz import attention
from hypviz.reports import model_report
from hypviz.reports.point_report import Result

__all__ = ["MAX_SCATTER", "SHARED_SCALE_RATIO", "SHOWN_WIDTH_PX", "MIN_TEXT_PX", "DPI", "heatmap_scales", "difference_label",
           "text_pt", "readable", "legend_below", "figures", "rows_figure", "plotly_rows", "layers_figure", "model_figure",
           "scatter_rows", "png_bytes", "literal"]

MAX_SCATTER = 4000  # rows drawn per comparison in the row figures (evenly spaced, plus the worst ones)
SHARED_SCALE_RATIO = 3.0  # heatmaps share one colour scale only when their largest weights lie within this factor
DPI = 100  # the reports' PNG figures are written at this resolution (:func:`png_bytes`)
SHOWN_WIDTH_PX = 780  # the width a figure is shown at in a report opened 800 px wide (the page's column, less its border)
MIN_TEXT_PX = 9.0  # every text of a report's figure is at least this tall, in screen pixels, at that width


def text_pt(width_in: float, dpi: float = DPI, shown_px: float = SHOWN_WIDTH_PX, min_px: float = MIN_TEXT_PX) -> float:
    r"""The smallest font size (points) that shows at least ``min_px`` screen pixels in a figure ``width_in`` inches wide,
    written at ``dpi`` and shown at most ``shown_px`` wide (scaled down to fit, never up):

    .. math::

        s_{\min} = \frac{72\, p_{\min}}{\mathrm{dpi}\, \min(1, w_{\mathrm{shown}} / (\mathrm{dpi}\, W))}.
    """
    scale = min(1.0, shown_px / (dpi * float(width_in)))
    return 72.0 * min_px / (dpi * scale)


def readable(fig: Any, dpi: float = DPI, shown_px: float = SHOWN_WIDTH_PX, min_px: float = MIN_TEXT_PX) -> Any:
    """``fig`` with every text (titles, labels, tick labels, legends, colourbars) at least :func:`text_pt` points, so
    that it reads at ``min_px`` screen pixels in a report opened 800 px wide.  Returns ``fig``."""
    from matplotlib.text import Text

    size = text_pt(fig.get_size_inches()[0], dpi, shown_px, min_px) * 1.01  # a hair above: rounding of the sizes
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                ticks = axis.get_major_ticks() if which == "major" else axis.get_minor_ticks()
                current = ticks[0].label1.get_fontsize() if ticks else 0.0
                if current < size:
                    axis.set_tick_params(which=which, labelsize=size)
        ax.xaxis.get_offset_text().set_fontsize(max(size, ax.xaxis.get_offset_text().get_fontsize()))
        ax.yaxis.get_offset_text().set_fontsize(max(size, ax.yaxis.get_offset_text().get_fontsize()))
    for text in fig.findobj(Text):
        if text.get_fontsize() < size:
            text.set_fontsize(size)
    return fig


def legend_below(ax: Any, handles: Sequence[Any] | None = None, labels: Sequence[str] | None = None, **kwargs: Any) -> Any:
    """A legend under ``ax``, below its x-axis label, never over its data (the constrained layout makes room for it)."""
    opts = dict(loc="upper left", bbox_to_anchor=(0.0, -0.2), borderaxespad=0.0, frameon=False, **kwargs)
    if handles is None:
        return ax.legend(**opts)
    return ax.legend(handles, labels, **opts)


def difference_label(kind: str, reference: str) -> str:
    r"""The difference a difference panel shows, as mathtext: :math:`A^{\mathrm{kind}} - A^{\mathrm{reference}}`
    (its title, and its colourbar's label followed by ``(weight difference)``)."""
    return rf"$A^{{{_kind_tex(kind)}}} - A^{{{_kind_tex(reference)}}}$"


def heatmap_scales(maps: Sequence[Any]) -> list[float] | None:
    """The colour-scale tops of the heatmaps: ``None`` for one shared scale, else each map's own largest weight.

    Maps whose largest weights differ by more than a factor ``SHARED_SCALE_RATIO`` (a focused map
    beside a nearly uniform softmax, say) each get their own scale: on a shared one the flatter
    map would be drawn in one solid colour.
    """
    tops = [float(_np(m).max()) for m in maps]
    lo, hi = min(tops), max(tops)
    if lo > 0 and hi / lo <= SHARED_SCALE_RATIO:
        return None
    return [t if t > 0 else 1.0 for t in tops]


def _grid(n: int, panel: tuple[float, float], extra: float) -> tuple[Any, list[Any]]:
    """A new figure of ``n`` panels, at most two a row (wide rows would shrink the text shown at 800 px), and
    its axes in reading order; an unused last cell is hidden."""
    cols = min(2, n)
    rows = -(-n // cols)
    fig = style.new_figure((panel[0] * cols + extra, panel[1] * rows + 0.5))
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_axis_off()
    return fig, axes[:n]


def _heatmaps(maps: Sequence[Any], titles: Sequence[str], suptitle: str, ylabel: str) -> Any:
    """The heatmaps panel by panel, at most two a row: one shared colour scale, or each its own (stated in the title)."""
    from hypviz.plots import attention as pa

    scales = heatmap_scales(maps)
    if scales is None:
        fig, axes = _grid(len(maps), (3.6, 3.2), 1.0)
        pa.heatmaps_mpl(maps, titles, suptitle=f"{suptitle}; one shared colour scale", ylabel=ylabel, axes=axes)
    else:
        fig, axes = _grid(len(maps), (4.4, 3.2), 0.2)
        for ax, m, title, top in zip(axes, maps, titles, scales):
            pa.heatmaps_mpl([m], [f"{title} (own scale, 0 to {top:.3g})"], axes=[ax], vmax=top, ylabel=ylabel)
        fig.suptitle(f"{suptitle};\neach map on its own colour scale (their largest weights differ by more than "
                     f"{SHARED_SCALE_RATIO:g}x)")
    for i, ax in enumerate(axes):
        ax.set_ylabel(ylabel if i % 2 == 0 else "")
    return fig


def png_bytes(fig: Any, dpi: int = DPI) -> bytes:
    """A matplotlib figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def literal(text: str) -> str:
    r"""``text`` (a name read from a file) as matplotlib draws it literally: every ``$`` escaped as ``\$``, so that no
    part of it is parsed as mathtext (``enc$\frac{$0`` would not parse; ``$x^2$`` would be drawn as math)."""
    return str(text).replace("$", r"\$")


def _kind_tex(kind: str) -> str:
    """A kind's name as upright mathtext (its underscores kept as underscores, not subscripts)."""
    return r"\mathrm{" + kind.replace("_", r"\_") + "}"


def _np(t: Any) -> np.ndarray:
    return t.detach().reshape(-1).double().cpu().numpy()


def scatter_rows(comp: attention.Comparison) -> np.ndarray:
    """Indices (flat) of the rows drawn: every row, or :data:`MAX_SCATTER` of them, evenly spaced plus the
    200 farthest from the reference."""
    n = comp.n_rows
    if n <= MAX_SCATTER:
        return np.arange(n)
    worst = np.argsort(_np(comp.tv))[-200:]
    spaced = np.linspace(0, n - 1, MAX_SCATTER - 200).round().astype(int)
    return np.unique(np.concatenate([spaced, worst]))


def figures(result: Result) -> dict[str, Any]:
    """The matplotlib figures of the compare report: ``heatmaps``, ``difference``, ``rows``."""
    from hypviz.plots import attention as pa

    ref = result.settings.reference
    label = result.inputs.head_labels[result.shown_head]
    where = f"head {label}, {len(result.shown_rows)} of {result.comparisons[0].n_queries} query rows"
    kinds = [ref, *result.settings.kinds]
    figs = {}
    figs["heatmaps"] = _heatmaps(
        [result.maps[kd] for kd in kinds],
        [f"{kd}" + (" (reference)" if kd == ref else "") for kd in kinds],
        f"attention maps, {where}",
        r"sampled query row",
    )
    titles = [difference_label(kd, ref) for kd in result.settings.kinds]
    figs["difference"] = pa.difference_maps_mpl(
        [(result.maps[ref], result.maps[kd]) for kd in result.settings.kinds],
        titles,
        suptitle=f"difference to the reference, {where}",
        colorbar_label=(f"{titles[0]} (weight difference)" if len(titles) == 1 else
                        rf"$A^{{\mathrm{{kind}}}} - A^{{{_kind_tex(ref)}}}$ (weight difference)"),
        ylabel=r"sampled query row",
    )
    figs["rows"] = rows_figure(result)
    return {name: readable(fig) for name, fig in figs.items()}


def _few_log_ticks(ax: Any) -> None:
    from matplotlib.ticker import LogLocator, NullLocator

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10.0, numticks=7))  # few labels: fast layout
        axis.set_minor_locator(NullLocator())


def _nothing(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def rows_figure(result: Result) -> Any:
    r"""Every query row, two panels.

    Left: its gap :math:`\mathrm{TV}(P_a, P_b)` against the reference's distance from uniform
    :math:`\mathrm{TV}(P_b, U)` (the verdict's reading; below the dashed line the row is close).
    Right, for the softmax comparisons: its TV against its bound :math:`\tanh((\Delta + \epsilon)/4)`,
    drawn by :func:`hypviz.plots.curves.bound_scatter_mpl` (one call per comparison, in its colour).
    """
    from matplotlib.figure import Figure
    from matplotlib.markers import MarkerStyle

    from hypviz.plots.curves import bound_scatter_mpl

    fig = Figure(figsize=(10.0, 5.2), layout="constrained")
    ax_base, ax_bound = fig.subplots(1, 2)
    lo, hi = math.inf, 0.0
    for c, comp in enumerate(result.comparisons):
        idx = scatter_rows(comp)
        tv, base = _np(comp.tv)[idx], _np(comp.tv_uniform_b)[idx]
        ok = (tv > 0) & (base > 0)
        if ok.any():
            ax_base.scatter(base[ok], tv[ok], s=9, alpha=0.6, color=style.colour(c % 4), marker=style.marker(c % 4),
                            label=f"{comp.a} vs {comp.b} ({int(ok.sum())} rows)")
            lo = min(lo, float(base[ok].min()), float(tv[ok].min()))
            hi = max(hi, float(base[ok].max()), float(tv[ok].max()))
    if hi > 0:
        r = attention.CLOSE_RATIO
        ax_base.plot([lo / 2, hi * 2], [r * lo / 2, r * hi * 2], color=style.BOUND, ls="--", lw=1.0,
                     label=f"TV = {r} x baseline (close below)")
        ax_base.set_xscale("log")
        ax_base.set_yscale("log")
        _few_log_ticks(ax_base)
        ax_base.grid(True, alpha=0.3)
        legend_below(ax_base)
    else:
        _nothing(ax_base, "every row's TV is 0:\nnothing to draw on log axes")
    ax_base.set_xlabel(r"baseline $\mathrm{TV}(P_b, U)$ per row (probability; $U$ uniform)")
    ax_base.set_ylabel(r"measured $\mathrm{TV}(P_a, P_b)$ per row (probability)")
    ax_base.set_title("the gap against the reference's own structure")

    drawn = 0
    for c, comp in enumerate(result.comparisons):
        if not comp.bound_applies:
            continue
        idx = scatter_rows(comp)
        assert comp.delta is not None and comp.allowance is not None  # compare fills both where the bound applies
        tv, bound = _np(comp.tv)[idx], np.tanh(_np(comp.delta + comp.allowance)[idx] / 4)
        if not ((tv > 0) & (bound > 0) & np.isfinite(bound)).any():
            continue  # (bound_scatter_mpl refuses a comparison with nothing to draw on log axes)
        bound_scatter_mpl(
            bound, tv, ax=ax_bound,
            xlabel=r"bound $\tanh((\Delta + \epsilon)/4)$ per row (probability)",
            ylabel=r"measured $\mathrm{TV}(P_a, P_b)$ per row (probability)",
            title="theory check: TV against its bound",
        )
        points = ax_bound.collections[-1]  # in this comparison's colour and marker, as in the left panel
        mark = MarkerStyle(style.marker(c % 4))
        points.set_paths([mark.get_path().transformed(mark.get_transform())])
        points.set_color(style.colour(c % 4))
        points.set_label(f"{comp.a} vs {comp.b}: {points.get_label()}")
        drawn += 1
    if drawn:
        _few_log_ticks(ax_bound)
        handles = [*ax_bound.collections, ax_bound.lines[0]]  # the comparisons, then the line y = x once (each
        legend_below(ax_bound, handles, [h.get_label() for h in handles])  # call drew part of it)
    else:
        _nothing(ax_bound, "no softmax comparison:\nthe bound does not apply")
    fig.suptitle(r"every query row ($\epsilon$: rigorous rounding allowance on the logits)")
    return fig


def plotly_rows(result: Result) -> Any:
    """Interactive version of the row figure's left panel (gap against the baseline), hover naming head and row."""
    import plotly.graph_objects as go

    fig = go.Figure()
    hi, lo = 0.0, math.inf
    labels = result.inputs.head_labels
    for c, comp in enumerate(result.comparisons):
        idx = scatter_rows(comp)
        n = comp.n_queries
        tv, base, kl = _np(comp.tv)[idx], _np(comp.tv_uniform_b)[idx], _np(comp.kl)[idx]
        ok = (tv > 0) & (base > 0)
        query = list(range(n)) if comp.row_index is None else comp.row_index.tolist()  # each computed row's query
        text = [
            f"head {labels[i // n]}, query {query[i % n]}<br>TV {tv[j]:.3g}, baseline TV(P_b, U) {base[j]:.3g}<br>KL {kl[j]:.3g}"
            for j, i in enumerate(idx)
            if ok[j]
        ]
        if ok.any():
            hi = max(hi, float(tv[ok].max()), float(base[ok].max()))
            lo = min(lo, float(tv[ok].min()), float(base[ok].min()))
        fig.add_trace(
            go.Scatter(
                x=[float(f"{v:.4g}") for v in base[ok]],
                y=[float(f"{v:.4g}") for v in tv[ok]],
                mode="markers",
                marker={"size": 5, "color": style.colour(c % 4), "opacity": 0.6},
                name=f"{comp.a} vs {comp.b}",
                text=text,
                hoverinfo="text",
            )
        )
    if hi > 0:
        r = attention.CLOSE_RATIO
        fig.add_trace(
            go.Scatter(
                x=[lo / 2, hi * 2],
                y=[r * lo / 2, r * hi * 2],
                mode="lines",
                line={"color": style.BOUND, "dash": "dash", "width": 1},
                name=f"TV = {r} x baseline (close below)",
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title={"text": "every query row: TV(P_a, P_b) against the reference's distance from uniform TV(P_b, U)"},
        xaxis={"title": {"text": "baseline TV(P_b, U) per row"}, "type": "log"},
        yaxis={"title": {"text": "measured TV(P_a, P_b) per row"}, "type": "log"},
        height=540,
        template="plotly_white",
        legend={"orientation": "h", "x": 0.0, "xanchor": "left", "y": -0.18, "yanchor": "top"},  # below, never over data
        margin={"l": 70, "r": 20, "t": 60, "b": 110},
    )
    return fig


def layers_figure(layers: Sequence[Mapping[str, Any]]) -> Any:
    r"""The model report's figure: one row of two panels per layer.

    Each entry of ``layers`` holds ``label`` and ``what`` (the map compared with distance, in words),
    ``tv`` and ``query_norms`` ``(H, N)`` (per query: TV from the distance map, spatial norm
    :math:`\|q_s\|`), and per head ``key_norm_spread`` :math:`\max_j \kappa_{t,j} - \min_j \kappa_{t,j}`,
    ``mean_tv`` and ``baseline`` (the distance map's mean TV from uniform).  Left: every query's TV
    against its norm; right: per head, the mean TV and the baseline against the key-norm spread.
    """
    from matplotlib.figure import Figure

    n = len(layers)
    fig = Figure(figsize=(9.5, 3.4 * n), layout="constrained")
    axes = np.atleast_2d(fig.subplots(n, 2, squeeze=False))
    for row, layer in zip(axes, layers):
        tv, norms = np.asarray(layer["tv"]), np.asarray(layer["query_norms"])
        ax = row[0]
        for h in range(tv.shape[0]):
            ax.scatter(norms[h], tv[h], s=8, alpha=0.6, color=style.colour(h), label=f"head {h}")
        ax.set_xlabel(r"query norm $\|q_s\|$ (spatial units)")
        ax.set_ylabel(r"$\mathrm{TV}(P, P^{\mathrm{dist}})$ per query (probability)")
        ax.set_title(f"{literal(layer['label'])}: {layer['what']} vs distance, per query")
        ax.grid(True, alpha=0.3)
        if tv.shape[0] <= 8:
            ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)  # beside, not over
        ax = row[1]
        for tag, key, marker in (("TV", "mean_tv", "o"), ("baseline TV(P_dist, U)", "baseline", "s")):
            ax.scatter(layer["key_norm_spread"], layer[key], marker=marker, s=30, label=tag)
        ax.set_xlabel(r"key-norm spread $\max_j \kappa_{t,j} - \min_j \kappa_{t,j}$ (per head)")
        ax.set_ylabel("mean over queries (probability)")
        ax.set_title(f"{literal(layer['label'])}: per head vs key-norm spread")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)  # beside, not over
    return fig


def model_figure(results: Sequence[model_report.LayerResult]) -> Any:
    """The model report's figure ``layers.png``: :func:`layers_figure` of
    :func:`hypviz.reports.model_report.layer_panels` (per layer: per-row TV against the query norm, per-head mean TV
    against the key-norm spread)."""
    return readable(layers_figure(model_report.layer_panels(results)))
