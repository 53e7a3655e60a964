r"""The comparison report behind ``hypviz compare`` and ``hypviz demo``.

:func:`analyse` runs :func:`hypviz.attention.compare` for every kind against the reference and
the dense :func:`hypviz.attention.attention_map` on a sample of query rows; :func:`write` puts
into a folder

* ``report.html``: a self-contained page (PNG figures embedded as base64, plotly.js inlined
  once): it opens from disk and makes no network request;
* ``metrics.json``: the set-up, one summary per comparison and per head (``"generator": "hypviz"``);
* ``rows.npz``: per-row statistics, ``<a>_vs_<b>_<field>`` of shape ``(*heads, N)``;
* ``heatmaps.png``, ``difference.png``, ``rows.png``: the figures;

and :func:`summary` is the one-screen text printed by the command.  Each comparison is read
against the reference's distance from the uniform row :math:`U` (the verdict of
:func:`hypviz.attention.verdict`), and for two softmax kinds every row is checked against its
bounds (derived in notebook 04)

.. math::

    \mathrm{TV}(P_a, P_b) \le \tanh\frac{\Delta + \epsilon}{4}, \qquad
    \mathrm{KL}(P_b \,\|\, P_a) \le K(\Delta + \epsilon), \qquad
    K(\Delta) = \log\frac{e^\Delta - 1}{\Delta} - 1 + \frac{\Delta}{e^\Delta - 1},

with :math:`\Delta` the bias spread of the row and :math:`\epsilon` the rigorous floating-point
allowance on the logits (:class:`hypviz.attention.Comparison`).
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hypviz import attention
import hypviz.plots.style as style

__all__ = ["Result", "analyse", "write", "summary", "per_head"]

_ROW_FIELDS = (
    "tv",
    "kl",
    "tv_uniform_a",
    "tv_uniform_b",
    "top1",
    "topk_overlap",
    "spearman",
    "logit_gap",
    "delta",
    "tv_bound",
    "kl_bound",
    "kl_bound_hoeffding",
    "allowance",
    "bound_met",
)  # the bound fields exist only for two softmax kinds, spearman only when computed
_MAX_SCATTER = 4000  # rows drawn per comparison in the row figures (evenly spaced, plus the worst ones)


@dataclass
class Result:
    """What :func:`analyse` found, as :func:`write` and :func:`summary` read it.

    Attributes
    ----------
    inputs : object
        The command's inputs (``hypviz.cli.Inputs``): queries, keys, ``k``, head labels and their
        description.
    settings : object
        The command's settings (``hypviz.cli.Settings``): kinds, reference, temperature, device, ...
    comparisons : list of hypviz.attention.Comparison
        One per kind, each against the reference.
    maps : dict
        Kind -> ``(rows, M)`` attention map of the shown head, on the sampled rows.
    shown_head : int
        The flat index of the head shown (the one whose first comparison has the largest mean TV).
    shown_rows : list of int
        The sampled query rows, evenly spaced.
    lead : tuple of int
        The broadcast leading (head) shape.
    """
    inputs: Any  # hypviz.cli.Inputs
    settings: Any  # hypviz.cli.Settings
    comparisons: list  # hypviz.attention.Comparison, one per kind
    maps: dict[str, torch.Tensor]  # kind -> (rows, M) attention map of the shown head
    shown_head: int
    shown_rows: list[int]
    lead: tuple[int, ...]


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _flat(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.detach().reshape(-1, n).cpu()


def per_head(comp: attention.Comparison) -> list[dict[str, Any]]:
    r"""Per head (flat leading index), the summary statistics of a :class:`hypviz.attention.Comparison` as a dict.

    Keys: ``verdict``, ``mean_tv``, ``max_tv``, ``mean_tv_uniform_a``, ``mean_tv_uniform_b``,
    ``gap_ratio``, ``mean_kl``, ``max_kl``, ``top1_agreement``, ``topk_agreement``,
    ``rank_correlation``, ``mean_delta``, ``bound_met_fraction`` (``None`` where the comparison
    does not have the field), with the means taken over the head's query rows and

    .. math::

        \mathrm{gap\_ratio} = \frac{\operatorname{mean} \mathrm{TV}(P_a, P_b)}{\operatorname{mean} \mathrm{TV}(P_b, U)}

    (``None`` when the denominator is 0); the verdict is :func:`hypviz.attention.verdict` of the
    three means.
    """
    n = comp.n_queries

    def flat(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else _flat(t, n).double()

    tv, kl, ua, ub = flat(comp.tv), flat(comp.kl), flat(comp.tv_uniform_a), flat(comp.tv_uniform_b)
    top1, topk, rho = flat(comp.top1), flat(comp.topk_overlap), flat(comp.spearman)
    delta, met = flat(comp.delta), flat(comp.bound_met)
    rows = []
    for h in range(tv.shape[0]):
        mean_tv, base_a, base_b = float(tv[h].mean()), float(ua[h].mean()), float(ub[h].mean())
        rows.append(
            {
                "verdict": attention.verdict(mean_tv, base_a, base_b),
                "mean_tv": mean_tv,
                "max_tv": float(tv[h].max()),
                "mean_tv_uniform_a": base_a,
                "mean_tv_uniform_b": base_b,
                "gap_ratio": None if base_b == 0.0 else mean_tv / base_b,
                "mean_kl": float(kl[h].mean()),
                "max_kl": float(kl[h].max()),
                "top1_agreement": float(top1[h].mean()),
                "topk_agreement": float(topk[h].mean()),
                "rank_correlation": None if rho is None else float(rho[h].mean()),
                "mean_delta": None if delta is None else float(delta[h].mean()),
                "bound_met_fraction": None if met is None else float(met[h].mean()),
            }
        )
    return rows


def analyse(inputs: Any, settings: Any) -> Result:
    """Compare every kind with the reference; dense attention maps of a sample of rows of the worst head.

    Each of ``settings.kinds`` is compared with ``settings.reference`` by
    :func:`hypviz.attention.compare` (with the settings' temperature, power, norm_scale, row sample,
    seed, device).  The shown head is the one whose first comparison has the largest mean TV; on it,
    ``settings.sample_rows`` evenly spaced query rows get the dense map of the reference and of
    every kind.
    """
    q, kk = inputs.queries, inputs.keys
    comps = [
        attention.compare(
            q,
            kk,
            kind,
            settings.reference,
            k=inputs.k,
            temperature=settings.temperature,
            power=settings.power,
            norm_scale=settings.norm_scale,
            rows=getattr(settings, "rows", None),
            seed=getattr(settings, "seed", 0),
            device=settings.device,
            progress=settings.progress,
        )
        for kind in settings.kinds
    ]
    lead = tuple(comps[0].batch_shape)
    heads = per_head(comps[0])
    shown = max(range(len(heads)), key=lambda h: heads[h]["mean_tv"])
    n, m = q.shape[-2], kk.shape[-2]
    qf = q.expand(*lead, n, q.shape[-1]).reshape(-1, n, q.shape[-1])[shown]
    kf = kk.expand(*lead, m, kk.shape[-1]).reshape(-1, m, kk.shape[-1])[shown]
    count = min(settings.sample_rows, n)
    rows = sorted({int(round(i)) for i in np.linspace(0, n - 1, count)})
    dev = torch.device(settings.device)
    qs, ks = qf[rows].to(dev), kf.to(dev)
    maps = {
        kind: attention.attention_map(
            qs, ks, kind, k=inputs.k, temperature=comps[0].temperature, power=settings.power, norm_scale=settings.norm_scale
        ).cpu()
        for kind in [settings.reference, *settings.kinds]
    }
    return Result(inputs, settings, comps, maps, shown, rows, lead)


# --------------------------------------------------------------------------- #
# numbers: JSON and per-row arrays
# --------------------------------------------------------------------------- #
def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def metrics(result: Result, options: dict[str, Any] | None = None) -> dict[str, Any]:
    from hypviz import __version__

    comp0 = result.comparisons[0]
    heads_out = []
    for comp in result.comparisons:
        summary = comp.to_dict()
        heads = per_head(comp)
        for label, h in zip(result.inputs.head_labels, heads):
            h["head"] = label
        heads_out.append({"a": comp.a, "b": comp.b, "summary": summary, "heads": heads})
    return _clean(
        {
            "generator": "hypviz",
            "version": __version__,
            "command": result.settings.command,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "inputs": {**result.inputs.described, "spatial": result.inputs.spatial, **(options or {})},
            "setup": {
                "k": comp0.k,
                "temperature": comp0.temperature,
                "power": result.settings.power,
                "norm_scale": result.settings.norm_scale,
                "device": comp0.device,
                "dtype": comp0.dtype,
                "heads_shape": list(result.lead),
                "n_queries": comp0.n_queries,
                "n_queries_total": comp0.n_queries_total,
                "sampled_rows": comp0.n_queries if comp0.sampled else None,
                "sample_seed": getattr(result.settings, "seed", 0) if comp0.sampled else None,
                "n_keys": comp0.n_keys,
                "dim": comp0.dim,
                "reference": result.settings.reference,
                "kinds": list(result.settings.kinds),
                "shown_head": result.inputs.head_labels[result.shown_head],
                "shown_rows": result.shown_rows,
            },
            "comparisons": heads_out,
            "rows_file": "rows.npz",
            "row_fields": list(_ROW_FIELDS),
            "verdict_rule": {
                "close": f"mean TV(P_a, P_b) <= {attention.CLOSE_RATIO} x mean TV(P_b, uniform)",
                "uninformative": f"both maps within mean TV {attention.UNIFORM_TV} of the uniform row",
                "different": "otherwise",
            },
        }
    )


def row_arrays(result: Result) -> dict[str, np.ndarray]:
    out = {}
    for comp in result.comparisons:
        for name in _ROW_FIELDS:
            value = getattr(comp, name)
            if value is not None:
                out[f"{comp.a}_vs_{comp.b}_{name}"] = value.detach().cpu().numpy()
    return out


# --------------------------------------------------------------------------- #
# figures
# --------------------------------------------------------------------------- #
def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _kind_tex(kind: str) -> str:
    return r"\mathrm{" + kind + "}"


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().reshape(-1).double().cpu().numpy()


def _scatter_rows(comp: attention.Comparison) -> np.ndarray:
    """Indices (flat) of the rows drawn: evenly spaced, plus the rows farthest from the reference."""
    n = comp.n_rows
    if n <= _MAX_SCATTER:
        return np.arange(n)
    worst = np.argsort(_np(comp.tv))[-200:]
    spaced = np.linspace(0, n - 1, _MAX_SCATTER - 200).round().astype(int)
    return np.unique(np.concatenate([spaced, worst]))


def figures(result: Result) -> dict[str, Any]:
    """The matplotlib figures of the report: ``heatmaps``, ``difference``, ``rows``."""
    from hypviz.plots import attention as pa

    ref = result.settings.reference
    label = result.inputs.head_labels[result.shown_head]
    where = f"head {label}, {len(result.shown_rows)} of {result.comparisons[0].n_queries} query rows"
    kinds = [ref, *result.settings.kinds]
    figs = {}
    figs["heatmaps"] = pa.heatmaps_mpl(
        [result.maps[kd] for kd in kinds],
        [f"{kd}" + (" (reference)" if kd == ref else "") for kd in kinds],
        suptitle=f"attention maps, {where}",
        ylabel=r"sampled query row",
    )
    figs["difference"] = pa.difference_maps_mpl(
        [(result.maps[ref], result.maps[kd]) for kd in result.settings.kinds],
        [rf"$A^{{{_kind_tex(kd)}}} - A^{{{_kind_tex(ref)}}}$" for kd in result.settings.kinds],
        suptitle=f"difference to the reference, {where}",
        ylabel=r"sampled query row",
    )

    figs["rows"] = _rows_figure(result)
    return figs


def _rows_figure(result: Result):
    """Left: every row's gap against the reference's distance from uniform (the verdict's reading).
    Right: for the softmax comparisons, every row's TV against its bound ``tanh((Delta + eps)/4)``."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import LogLocator, NullLocator

    fig = Figure(figsize=(10.0, 4.2), layout="constrained")
    ax_base, ax_bound = fig.subplots(1, 2)
    spans: dict[Any, list[float]] = {ax_base: [math.inf, 0.0], ax_bound: [math.inf, 0.0]}
    for c, comp in enumerate(result.comparisons):
        idx = _scatter_rows(comp)
        tv = _np(comp.tv)[idx]
        panels = [(ax_base, _np(comp.tv_uniform_b)[idx])]
        if comp.bound_applies:
            panels.append((ax_bound, np.tanh(_np(comp.delta + comp.allowance)[idx] / 4)))
        for ax, x in panels:
            ok = (tv > 0) & (x > 0)
            if not ok.any():
                continue
            ax.scatter(x[ok], tv[ok], s=9, alpha=0.6, color=style.colour(c % 4), marker=style.marker(c % 4),
                       label=f"{comp.a} vs {comp.b} ({int(ok.sum())} rows)")
            spans[ax][0] = min(spans[ax][0], float(x[ok].min()), float(tv[ok].min()))
            spans[ax][1] = max(spans[ax][1], float(x[ok].max()), float(tv[ok].max()))
    lines = {
        ax_base: (attention.CLOSE_RATIO, f"TV = {attention.CLOSE_RATIO} x baseline (close below)"),
        ax_bound: (1.0, "bound (met below the line)"),
    }
    for ax, (lo, hi) in spans.items():
        if hi <= 0:
            ax.text(0.5, 0.5, "no softmax comparison:\nthe bound does not apply", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_axis_off()
            continue
        slope, text = lines[ax]
        ax.plot([lo / 2, hi * 2], [slope * lo / 2, slope * hi * 2], color=style.BOUND, ls="--", lw=1.0, label=text)
        for axis, scale in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
            scale("log")
            axis.set_major_locator(LogLocator(base=10.0, numticks=7))  # few labels: fast layout
            axis.set_minor_locator(NullLocator())
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    ax_base.set_xlabel(r"baseline $\mathrm{TV}(P_b, U)$ per row (probability; $U$ uniform)")
    ax_base.set_ylabel(r"measured $\mathrm{TV}(P_a, P_b)$ per row (probability)")
    ax_base.set_title("the gap against the reference's own structure")
    ax_bound.set_xlabel(r"bound $\tanh((\Delta + \epsilon)/4)$ per row (probability)")
    ax_bound.set_ylabel(r"measured $\mathrm{TV}(P_a, P_b)$ per row (probability)")
    ax_bound.set_title("theory check: TV against its bound")
    fig.suptitle(r"every query row ($\epsilon$: rigorous rounding allowance on the logits)")
    return fig


def plotly_rows(result: Result):
    """Interactive version of the row figure (gap against the baseline), hover naming head and row."""
    import plotly.graph_objects as go

    fig = go.Figure()
    hi, lo = 0.0, math.inf
    labels = result.inputs.head_labels
    for c, comp in enumerate(result.comparisons):
        idx = _scatter_rows(comp)
        n = comp.n_queries
        tv, base, kl = _np(comp.tv)[idx], _np(comp.tv_uniform_b)[idx], _np(comp.kl)[idx]
        ok = (tv > 0) & (base > 0)
        query = (lambda r: r) if comp.row_index is None else (lambda r, ix=comp.row_index.tolist(): ix[r])
        text = [
            f"head {labels[i // n]}, query {query(i % n)}<br>TV {tv[j]:.3g}, baseline TV(P_b, U) {base[j]:.3g}<br>KL {kl[j]:.3g}"
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
        height=480,
        template="plotly_white",
        legend={"x": 0.01, "y": 0.99},
        margin={"l": 70, "r": 20, "t": 60, "b": 60},
    )
    return fig


# --------------------------------------------------------------------------- #
# the page
# --------------------------------------------------------------------------- #
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 72rem; margin: 1.5rem auto;
       padding: 0 1rem; line-height: 1.45; color: #1a1a1a; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.92rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.ok { color: #006b3c; font-weight: 600; } .bad { color: #b00020; font-weight: 600; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9rem; color: #444; max-width: 60rem; }
code { font-size: 0.92em; background: #f6f6f6; padding: 0 0.2em; } .note { color: #555; font-size: 0.9rem; }
"""


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(header))
    body = []
    for r in rows:
        body.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r)) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _verdict_html(v: str) -> str:
    cls = {"close": "ok", "different": "bad", "uninformative": "note"}[v]
    return f'<span class="{cls}">{v}</span>'


def _bound_html(comp: attention.Comparison) -> str:
    if not comp.bound_applies:
        return "not applicable"
    met = int(comp.bound_met.sum())
    text = f"{met} / {comp.n_rows} met"
    return text if met == comp.n_rows else f'<span class="bad">{text}</span>'


def page(result: Result, images: dict[str, bytes], plotly_div: str, plotly_js: str, meta: dict[str, Any]) -> str:
    comp0 = result.comparisons[0]
    ref = result.settings.reference
    inp = result.inputs.described
    e = html.escape
    setup_rows = [
        ["queries", e(f"{inp['queries']['path']}" + (f" [{inp['queries']['array']}]" if inp["queries"].get("array") else "")),
         e(str(tuple(inp["queries"]["shape"]))), e(inp["queries"]["dtype"])],
        ["keys", e(f"{inp['keys']['path']}" + (f" [{inp['keys']['array']}]" if inp["keys"].get("array") else "")),
         e(str(tuple(inp["keys"]["shape"]))), e(inp["keys"]["dtype"])],
    ]
    heads_txt = " x ".join(str(s) for s in result.lead) if result.lead else "1"
    facts = (
        f"{heads_txt} head(s) x {comp0.n_queries} queries x {comp0.n_keys} keys, d = {comp0.dim}, "
        f"k = {_fmt(comp0.k)}, temperature tau = {_fmt(comp0.temperature)}, {comp0.dtype}, computed on {comp0.device}; "
        + ("inputs were spatial parts, lifted with x_t = sqrt(|x_s|^2 + k)." if result.inputs.spatial
           else "inputs are hyperboloid points, time first, checked on <x,x>_L = -k.")
        + (f" SAMPLED: the statistics are exact on {comp0.n_queries} of {comp0.n_queries_total} query rows per head, "
           "drawn uniformly (seed " + str(getattr(result.settings, "seed", 0)) + "); metrics.json gives every mean a 95% "
           "confidence interval (normal approximation, stratified by head, finite-population corrected)."
           if comp0.sampled else "")
    )
    comp_rows = []
    for comp in result.comparisons:
        comp_rows.append(
            [
                e(f"{comp.a} vs {comp.b}"),
                _verdict_html(comp.verdict),
                _fmt(comp.mean_tv),
                _fmt(comp.mean_tv_uniform_a),
                _fmt(comp.mean_tv_uniform_b),
                _fmt(comp.gap_ratio),
                _fmt(comp.top1_agreement),
                _fmt(comp.topk_agreement),
                _fmt(comp.rank_correlation),
                _bound_html(comp),
            ]
        )
    head_tables = []
    for comp in result.comparisons:
        rows = []
        for label, h in zip(result.inputs.head_labels, per_head(comp)):
            rows.append(
                [
                    e(label),
                    _verdict_html(h["verdict"]),
                    _fmt(h["mean_tv"]),
                    _fmt(h["max_tv"]),
                    _fmt(h["mean_tv_uniform_a"]),
                    _fmt(h["mean_tv_uniform_b"]),
                    _fmt(h["gap_ratio"]),
                    _fmt(h["top1_agreement"]),
                    _fmt(h["rank_correlation"]),
                    _fmt(h["bound_met_fraction"]),
                ]
            )
        head_tables.append(
            f"<h3>{e(comp.a)} vs {e(comp.b)}</h3>"
            + _table(["head", "verdict", "mean TV", "max TV", "TV(P_a, U)", "TV(P_b, U)", "gap / baseline",
                      "top-1", "Spearman", "bound met"], rows)
        )

    def img(name: str, alt: str, caption: str) -> str:
        data = base64.b64encode(images[name]).decode("ascii")
        return (
            f'<figure><img src="data:image/png;base64,{data}" alt="{e(alt)}" data-file="{name}.png">'
            f"<figcaption>{caption} (also <code>{name}.png</code>)</figcaption></figure>"
        )

    label = result.inputs.head_labels[result.shown_head]
    explain = f"""<p class="note">Each row of the table compares a kind's attention map <code>P_a</code> with the
reference <code>P_b</code> ({e(ref)}), query row by query row, and reads the result against each map's distance from
the uniform row <code>U</code> (the baseline): two nearly uniform maps always have a small TV. <b>Verdict</b>:
<i>close</i> when the mean TV is at most {attention.CLOSE_RATIO} &times; the reference's mean TV from uniform;
<i>uninformative</i> when both maps are within mean TV {attention.UNIFORM_TV} of uniform; <i>different</i> otherwise.
Kinds: <b>spatial</b> <code>softmax(q_s . &kappa;_s / tau)</code> (the object of the question-and-answer thread;
neither of Hypformer's modes computes it), <b>distance</b> <code>softmax(-1/2 |q - &kappa;|^2_L / tau)</code>
(Hypformer's full attention, at <code>tau = k * scale / 2</code>), <b>lorentz</b> <code>softmax(&lt;q, &kappa;&gt;_L / tau)</code>
(equal to distance), <b>focused</b> Hypformer's linear map <code>phi(q) . phi(&kappa;) / sum</code> (no softmax).
The theory check is not a verdict: spatial attention is distance attention plus a bias <code>q_t &kappa;_t / tau</code>,
so its rows obey <code>TV &le; tanh(Δ/4)</code> and <code>KL &le; log((e^Δ - 1)/Δ) - 1 + Δ/(e^Δ - 1) &le; Δ²/8</code>,
<code>Δ = q_t (max_j &kappa;_t - min_j &kappa;_t) / tau</code> (derived in notebook 04); it holds whether or not the maps
are close, and does not apply to the focused map.</p>"""
    body = f"""
<h1>hypviz attention report</h1>
<p class="note">{e(result.inputs.title)} &middot; hypviz {e(meta['version'])} &middot; {e(meta['created'])}</p>
<p>{e(facts)}</p>
<h2>Verdict</h2>
{_table(["comparison", "verdict", "mean TV", "TV(P_a, U)", "TV(P_b, U)", "gap / baseline", "top-1 agreement", f"top-{comp0.topk} overlap", "Spearman", "theory check (rows)"], comp_rows)}
{explain}
<h2>Attention maps</h2>
{img("heatmaps", "attention heatmaps", f"Attention weights of each kind for head {e(label)} (the head whose {e(comp0.a)} map is farthest from the reference), on {len(result.shown_rows)} evenly spaced query rows and all {comp0.n_keys} keys; one shared colour scale.")}
{img("difference", "difference maps", f"Weight differences to the reference {e(ref)} on the same rows, on one diverging scale centred on zero.")}
<h2>Every row</h2>
{img("rows", "per-row TV against the baseline and against the bound", f"Each dot is one query row. Left: its TV against the reference row's TV from uniform; below the dashed line (TV = {attention.CLOSE_RATIO} x baseline) the row is close. Right (softmax comparisons only): its TV against the bound tanh((Δ + ε)/4) derived in notebook 04; every dot on or below the dashed line meets it. ε is the rigorous floating-point allowance on the logits.")}
<figure>{plotly_div}<figcaption>The left panel, interactive: hover for the head and query row (at most {_MAX_SCATTER} rows per comparison drawn: evenly spaced plus the farthest from the reference).</figcaption></figure>
<h2>Per head</h2>
{''.join(head_tables)}
<h2>Inputs and files</h2>
{_table(["", "file [array]", "shape", "dtype"], setup_rows, left=2)}
<p><code>metrics.json</code> (set-up, summaries per comparison and head), <code>rows.npz</code> (per-row arrays
<code>&lt;a&gt;_vs_&lt;b&gt;_&lt;field&gt;</code>, fields {e(', '.join(_ROW_FIELDS))}), the PNG figures{', ' + '<code>inputs.npz</code> (the demo queries and keys: try <code>hypviz compare inputs.npz inputs.npz</code>)' if meta.get('inputs_file') else ''}.</p>
"""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hypviz attention report: {e(result.inputs.title)}</title>
<style>{_CSS}</style>
<script type="text/javascript">{plotly_js}</script>
</head>
<body>
{body}
</body>
</html>
"""


def write(result: Result, folder: Path, options: dict[str, Any] | None = None) -> list[str]:
    """Write the report files (see the module docstring) into ``folder``, which exists.

    ``options`` are stored with the inputs in ``metrics.json``.  Returns the sorted names of the
    files in ``folder``.
    """
    import plotly.io as pio
    import plotly.offline

    folder = Path(folder)
    images = {name: _png(fig) for name, fig in figures(result).items()}
    for name, data in images.items():
        (folder / f"{name}.png").write_bytes(data)
    meta = metrics(result, options)
    (folder / "metrics.json").write_text(json.dumps(meta, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    np.savez_compressed(folder / "rows.npz", **row_arrays(result))
    div = pio.to_html(
        plotly_rows(result),
        include_plotlyjs=False,
        include_mathjax=False,
        full_html=False,
        div_id="hypviz-rows",
        config={"displaylogo": False, "responsive": True},
    )
    meta["inputs_file"] = (folder / "inputs.npz").exists()
    text = page(result, images, div, plotly.offline.get_plotlyjs(), meta)
    (folder / "report.html").write_text(text, encoding="utf-8")
    return sorted(p.name for p in folder.iterdir())


def summary(result: Result, out: Path, files: list[str], show_inputs: bool = False, max_heads: int = 8) -> str:
    r"""The one-screen text the command prints.

    One line per comparison (verdict, mean TV, baseline :math:`\mathrm{TV}(P_b, U)`, gap / baseline,
    top-1 agreement, how many rows meet the bound), then up to ``max_heads`` per-head lines of the
    first comparison, and where the files are.
    """
    comp0 = result.comparisons[0]
    inp = result.inputs.described
    heads_txt = " x ".join(str(s) for s in result.lead) + " heads x " if result.lead else ""
    lines = [
        f"hypviz {result.settings.command}: {result.inputs.title}",
        f"  queries {tuple(inp['queries']['shape'])} {inp['queries']['dtype']}, keys {tuple(inp['keys']['shape'])} "
        f"{inp['keys']['dtype']}" + (" (spatial parts, lifted)" if result.inputs.spatial else ""),
        f"  {heads_txt}{comp0.n_queries} queries x {comp0.n_keys} keys, d = {comp0.dim}, k = {_fmt(comp0.k)}, "
        f"tau = {_fmt(comp0.temperature)}, {comp0.dtype} on {comp0.device}",
    ]
    width = max(len(f"{c.a} vs {c.b}") for c in result.comparisons)
    for comp in result.comparisons:
        if comp.bound_applies:
            met = int(comp.bound_met.sum())
            check = f"theory check {met}/{comp.n_rows}" + ("" if met == comp.n_rows else "  <-- bound NOT met on some rows")
        else:
            check = "theory check n/a"
        lines.append(
            f"  {f'{comp.a} vs {comp.b}':<{width}}  {comp.verdict:<13} TV mean {_fmt(comp.mean_tv):>8} | "
            f"baseline TV(P_b, U) {_fmt(comp.mean_tv_uniform_b):>8} | gap/baseline {_fmt(comp.gap_ratio):>6} | "
            f"top-1 {_fmt(comp.top1_agreement)} | {check}"
        )
    if len(result.inputs.head_labels) > 1:
        lines.append(f"  per head ({comp0.a} vs {comp0.b}):")
        heads = per_head(comp0)
        for label, h in list(zip(result.inputs.head_labels, heads))[:max_heads]:
            lines.append(
                f"    head {label:<14} {h['verdict']:<13} TV mean {_fmt(h['mean_tv']):>8}  "
                f"baseline {_fmt(h['mean_tv_uniform_b']):>8}  top-1 {_fmt(h['top1_agreement'])}"
            )
        if len(heads) > max_heads:
            lines.append(f"    ... {len(heads) - max_heads} more heads in metrics.json")
    lines.append(f"report: {out / 'report.html'}")
    lines.append(f"  also in {out}: {', '.join(f for f in files if f != 'report.html')}")
    if show_inputs:
        lines.append(f"  your own tensors: hypviz compare QUERIES.npy KEYS.npy  (this demo's: {out / 'inputs.npz'} for both)")
    return "\n".join(lines)
