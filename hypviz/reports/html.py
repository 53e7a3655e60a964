"""The HTML pages of the two reports, filled into the templates ``hypviz/reports/templates/*.html``.

:func:`page` is ``report.html`` of ``hypviz compare`` / ``hypviz demo`` (:mod:`hypviz.reports.point_report`),
:func:`model_page` that of ``hypviz compare CAPTURE.pt`` (:mod:`hypviz.reports.model_report`).  The
templates hold the page, its style and every fixed sentence; this module computes what fills their
``$name`` fields (:class:`string.Template`): the tables, the numbers (3 significant digits), the
figures as base64 PNG.  Every name from the inputs is HTML-escaped here; the pages are
self-contained (no network).  The templates are package data, read with :mod:`importlib.resources`.
In the reports' one-way chain (``point_report`` -> ``model_report`` -> ``figures`` -> ``html`` -> ``writing``)
this module reads the analysis and the figures' constants; it writes no file (:mod:`hypviz.reports.writing` does).
"""

from __future__ import annotations

import base64
import html
import string
from functools import lru_cache
from importlib import resources
from typing import Any, Sequence

from hypviz import attention
from hypviz.reports.figures import MAX_SCATTER
from hypviz.reports.model_report import LayerResult, layer_sentence, worst_queries
from hypviz.reports.point_report import FAR_RATIO, ROW_FIELDS, Result, fmt, kind_words, per_head, sentences

__all__ = ["template", "page", "model_page", "table", "verdict_html", "ratio_html"]


@lru_cache(maxsize=None)
def template(name: str) -> string.Template:
    """The page template ``hypviz/reports/templates/<name>`` (package data)."""
    return string.Template((resources.files("hypviz.reports") / "templates" / name).read_text(encoding="utf-8"))


def table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """An HTML table: ``header`` escaped, the cells as given (already HTML); the first ``left`` columns left-aligned."""
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(header))
    body = []
    for r in rows:
        body.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r)) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def verdict_html(v: str, fractions: dict[str, float] | None = None) -> str:
    """A verdict in its colour: identical and close (green), different (red), uninformative (grey), mixed and
    unresolved (amber);
    with ``fractions``, the rows' verdicts beside it when they are not all one."""
    cls = {"identical": "ok", "close": "ok", "different": "bad", "uninformative": "note", "mixed": "warn",
           "unresolved": "warn"}[v]
    rows = ("" if fractions is None or max(fractions.values()) == 1.0
            else f' <small>({html.escape(attention.describe_fractions(fractions))})</small>')
    return f'<span class="{cls}">{v}</span>{rows}'


def _rule_html() -> str:
    """The verdict rule (:func:`hypviz.attention.verdict_rule`) as one HTML sentence."""
    rule = attention.verdict_rule()
    return "; ".join(f"<i>{html.escape(name)}</i>: {html.escape(text)}" for name, text in rule.items()) + "."


def _bound_html(comp: attention.Comparison) -> str:
    if not comp.bound_applies:
        return "not applicable"
    assert comp.bound_met is not None  # compare fills it wherever the bound applies
    met = int(comp.bound_met.sum())
    text = f"{met} / {comp.n_rows} met"
    return text if met == comp.n_rows else f'<span class="bad">{text}</span>'


def ratio_html(ratio: float | None, reference: str, what: str = "map") -> str:
    """A gap / baseline ratio as a table cell; at or above :data:`hypviz.reports.point_report.FAR_RATIO` with its
    meaning beside it (the reference's ``what`` is nearly uniform, so the gap is the other map's own structure)."""
    if ratio is None or not ratio >= FAR_RATIO:
        return fmt(ratio)
    return f'{fmt(ratio)} <small>(the {html.escape(kind_words(reference))} {what} is nearly uniform here)</small>'


def _b64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


# --------------------------------------------------------------------------- #
# hypviz compare / hypviz demo
# --------------------------------------------------------------------------- #
def _facts(result: Result) -> str:
    comp0 = result.comparisons[0]
    heads_txt = " x ".join(str(s) for s in result.lead) if result.lead else "1"
    return (
        f"{heads_txt} head(s) x {comp0.n_queries} queries x {comp0.n_keys} keys, d = {comp0.dim}, "
        f"k = {fmt(comp0.k)}, temperature tau = {fmt(comp0.temperature)}, {comp0.dtype}, computed on {comp0.device}; "
        + ("inputs were spatial parts, lifted with x_t = sqrt(|x_s|^2 + k)." if result.inputs.spatial
           else "inputs are hyperboloid points, time first, checked on <x,x>_L = -k.")
        + (f" SAMPLED: the statistics are exact on {comp0.n_queries} of {comp0.n_queries_total} query rows per head, "
           "drawn uniformly (seed " + str(result.settings.seed) + "); metrics.json gives every mean a 95% "
           "confidence interval (normal approximation, stratified by head, finite-population corrected)."
           if comp0.sampled else "")
    )


def _sentences_html(result: Result) -> str:
    """One paragraph per comparison: its verdict in one plain sentence (:func:`hypviz.reports.point_report.sentences`)."""
    e = html.escape
    return "".join(f'<p class="words"><b>{e(comp.a)} vs {e(comp.b)}</b> ({verdict_html(comp.verdict)}): {e(words)}</p>'
                   for comp, words in zip(result.comparisons, sentences(result)))


def _verdict_table(result: Result) -> str:
    rows = [
        [
            html.escape(f"{comp.a} vs {comp.b}"),
            verdict_html(comp.verdict, comp.row_verdicts),
            fmt(comp.mean_tv),
            fmt(comp.mean_tv_uniform_a),
            fmt(comp.mean_tv_uniform_b),
            ratio_html(comp.gap_ratio, comp.b),
            fmt(comp.top1_agreement),
            fmt(comp.topk_agreement),
            fmt(comp.rank_correlation),
            _bound_html(comp),
        ]
        for comp in result.comparisons
    ]
    header = ["comparison", "verdict", "mean TV", "TV(P_a, U)", "TV(P_b, U)", "gap / baseline", "top-1 agreement",
              f"top-{result.comparisons[0].topk} overlap", "Spearman", "theory check (rows)"]
    return table(header, rows)


def _head_tables(result: Result) -> str:
    e = html.escape
    out = []
    for comp in result.comparisons:
        rows = [
            [e(label), verdict_html(h["verdict"], h["row_verdicts"]), fmt(h["mean_tv"]), fmt(h["max_tv"]),
             fmt(h["mean_tv_uniform_a"]), fmt(h["mean_tv_uniform_b"]), ratio_html(h["gap_ratio"], comp.b),
             fmt(h["top1_agreement"]), fmt(h["rank_correlation"]), fmt(h["bound_met_fraction"])]
            for label, h in zip(result.inputs.head_labels, per_head(comp))
        ]
        out.append(
            f"<h3>{e(comp.a)} vs {e(comp.b)}</h3>"
            + table(["head", "verdict", "mean TV", "max TV", "TV(P_a, U)", "TV(P_b, U)", "gap / baseline",
                     "top-1", "Spearman", "bound met"], rows)
        )
    return "".join(out)


def _inputs_table(result: Result) -> str:
    e = html.escape
    rows = []
    for role in ("queries", "keys"):
        d = result.inputs.described[role]
        rows.append([role, e(f"{d['path']}" + (f" [{d['array']}]" if d.get("array") else "")),
                     e(str(tuple(d["shape"]))), e(d["dtype"])])
    return table(["", "file [array]", "shape", "dtype"], rows, left=2)


def page(result: Result, images: dict[str, bytes], plotly_div: str, plotly_js: str, meta: dict[str, Any]) -> str:
    """``report.html`` of the compare report: the verdicts, the figures (``images``: PNG bytes of ``heatmaps``,
    ``difference``, ``rows``), the interactive row figure (``plotly_div``, with ``plotly_js`` inlined once),
    the per-head tables and the inputs.  ``meta``: ``version``, ``created`` and ``inputs_file`` (whether the
    folder holds the demo's ``inputs.npz``)."""
    e = html.escape
    comp0 = result.comparisons[0]
    inputs_file = (", <code>inputs.npz</code> (the demo queries and keys: try <code>hypviz compare inputs.npz "
                   "inputs.npz</code>)") if meta.get("inputs_file") else ""
    return template("report.html").substitute(
        title=e(result.inputs.title),
        plotly_js=plotly_js,
        version=e(meta["version"]),
        created=e(meta["created"]),
        facts=e(_facts(result)),
        sentences=_sentences_html(result),
        verdict_table=_verdict_table(result),
        reference=e(result.settings.reference),
        verdict_rule=_rule_html(),
        close_ratio=attention.CLOSE_RATIO,
        heatmaps_png=_b64(images["heatmaps"]),
        difference_png=_b64(images["difference"]),
        rows_png=_b64(images["rows"]),
        shown_head=e(result.inputs.head_labels[result.shown_head]),
        first_kind=e(comp0.a),
        shown_rows=len(result.shown_rows),
        n_keys=comp0.n_keys,
        plotly_div=plotly_div,
        max_scatter=MAX_SCATTER,
        head_tables=_head_tables(result),
        inputs_table=_inputs_table(result),
        row_fields=e(", ".join(ROW_FIELDS)),
        inputs_file=inputs_file,
    )


# --------------------------------------------------------------------------- #
# hypviz compare CAPTURE.pt
# --------------------------------------------------------------------------- #
def _layer_sentences_html(results: Sequence[LayerResult]) -> str:
    """One paragraph per layer: its family (and detail), whether it was verified and which step was checked (or why
    not), then its verdicts in plain words (:func:`hypviz.reports.model_report.layer_sentence`)."""
    e = html.escape
    out = []
    for lr in results:
        rec = lr.record
        detail = getattr(rec, "detail", None)
        checked = getattr(rec, "checked", None)
        family = e(rec.mode) + (f" ({e(detail)})" if detail else "")
        if lr.verified:
            check = f'<span class="ok">{e(lr.verification)}</span>' + (f"; step checked: {e(checked)}" if checked else "")
        else:
            check = f'<span class="warn">not verified</span>: {e(lr.reason)}'
        out.append(f'<p class="words"><b>{e(lr.label)}</b> &middot; {family} &middot; {check}<br>{e(layer_sentence(lr))}</p>')
    return "".join(out)


def _model_heads_table(results: Sequence[LayerResult]) -> str:
    e = html.escape
    rows = []
    for lr in results:
        own_heads = per_head(lr.own) if lr.own is not None else None
        for h, th in enumerate(per_head(lr.thread)):
            if not lr.verified:  # hypviz did not reproduce the layer's output: no verdict about its own map
                own = [e(lr.record.kind), "not verified: no verdict", "", "", "", "", ""]
            elif own_heads is None:
                own = ["distance softmax itself (exact)", '<span class="ok">same map</span>', "0", "", "", "", ""]
            else:
                oh = own_heads[h]
                at_default = (f" <small>(at hypviz's default &tau; = &radic;d = {fmt(lr.temperature)}, not the layer's)</small>"
                              if lr.default_temperature else "")
                own = [e(lr.record.kind), verdict_html(oh["verdict"], oh["row_verdicts"]) + at_default, fmt(oh["mean_tv"]),
                       fmt(oh["mean_tv_uniform_a"]), fmt(oh["mean_tv_uniform_b"]), fmt(oh["top1_agreement"]),
                       fmt(oh["rank_correlation"])]
            out_ratio = (own_heads[h] if own_heads is not None else th)["output_ratio"]
            out_gap = (ratio_html(out_ratio, "distance", "map's output") if lr.record.values is not None
                       else "no values recorded")
            rows.append([e(lr.label), e(lr.verification), str(h), *own, out_gap,
                         verdict_html(th["verdict"], th["row_verdicts"]), fmt(th["mean_tv"]), fmt(th["mean_tv_uniform_a"])])
    return table(["layer", "verified (error)", "head", "model's map", "verdict", "TV", "TV(model, U)", "TV(dist, U)", "top-1",
                  "Spearman", "output gap / baseline", "spatial softmax verdict", "its TV", "TV(spatial, U)"], rows, left=4)


def model_page(results: Sequence[LayerResult], png: bytes, meta: dict[str, Any]) -> str:
    """``report.html`` of the model report: per layer and head the verdicts, the figure (``png``: ``layers.png``),
    the worst queries and the layers' set-up.  ``meta``: ``path``, ``version``, ``created``."""
    e = html.escape
    worst = [[e(w["layer"]), str(w["head"]), str(w["query"]), fmt(w["query_norm"]), fmt(w["tv"]),
              fmt(w["tv_uniform_reference"]), e(w["comparison"])] for w in worst_queries(results)]
    layers = [[e(lr.label), e(lr.record.mode), e(getattr(lr.record, "detail", None) or ""), e(lr.record.kind),
               fmt(lr.record.k), e(lr.temperature_text),
               fmt(lr.record.power), fmt(lr.record.norm_scale), str(lr.record.n_heads), str(lr.record.n_queries),
               str(lr.record.n_keys), str(lr.record.dim),
               {True: "train", False: "eval", None: "not recorded"}[getattr(lr.record, "training", None)],
               e(getattr(lr.record, "dtype", None) or "not recorded"), e(lr.verification),
               e(getattr(lr.record, "checked", None) or "") if lr.verified else f"not verified: {e(lr.reason)}",
               e(getattr(lr.record, "verify_note", None) or "not verified")] for lr in results]
    return template("model_report.html").substitute(
        path=e(meta.get("path", "")),
        version=e(meta["version"]),
        created=e(meta["created"]),
        layer_sentences=_layer_sentences_html(results),
        heads_table=_model_heads_table(results),
        verdict_rule=_rule_html(),
        layers_png=_b64(png),
        worst_table=table(["layer", "head", "query (index)", "|q_s|", "TV", "TV(dist, U)", "comparison"], worst, left=1),
        layers_table=table(["layer", "family", "detail", "kind", "k", "tau", "power", "norm_scale", "heads", "queries", "keys",
                            "d", "train/eval", "dtype", "verified (error)", "step checked, or why not verified", "how"],
                           layers, left=4),
    )
