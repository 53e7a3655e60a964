r"""The whole-model report behind ``hypviz compare CAPTURE.pt`` (a file written by :mod:`hypviz.capture`).

For every recorded attention layer and head it compares **the map the model computes**
(Hypformer's focused linear map for a ``linear_focused`` layer; for a ``full`` layer the
distance softmax at the layer's recorded temperature, :math:`\tau = k\,\mathrm{scale}/2`, or
:math:`\mathrm{scale}/2` where its ``cinner`` does not divide by :math:`k`, which *is* the
reference) with the distance softmax

.. math::

    P^{\mathrm{dist}}_{ij} = \mathrm{softmax}_j\Bigl(\frac{-\tfrac12\|q_i - \kappa_j\|_L^2}{\tau}\Bigr),

and the question-and-answer thread's spatial softmax
:math:`\mathrm{softmax}_j(q_{s,i}\cdot\kappa_{s,j}/\tau)` with the same reference, each read
against both maps' distance from the uniform row :math:`U`, with a verdict
(:func:`hypviz.attention.verdict`, on the means over a head's queries):

.. math::

    \text{uninformative if } \mathrm{TV}(P_a, U) < 0.05 \text{ and } \mathrm{TV}(P_b, U) < 0.05,
    \quad\text{else close if } \mathrm{TV}(P_a, P_b) \le 0.25\,\mathrm{TV}(P_b, U),
    \quad\text{else different.}

Per layer it shows where the differences sit: the per-row gap against the query's norm, the
per-head gap against the spread :math:`\max_j \kappa_{t,j} - \min_j \kappa_{t,j}` of the key
norms, and the worst queries (by index) with their norms.

:func:`write` puts ``report.html`` (self-contained), ``metrics.json``, ``rows.npz`` and
``layers.png`` into a folder; :func:`summary` is the text the command prints.
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
from typing import Any, Sequence

import numpy as np

from hypviz import attention
import hypviz.plots.style as style

__all__ = ["LayerResult", "analyse", "metrics", "write", "summary"]

_WORST = 10  # worst queries listed per report


@dataclass
class LayerResult:
    r"""One recorded layer call: the model's own map and the thread's spatial softmax, each against distance.

    Attributes
    ----------
    label : str
        The layer's name, with ``(call c)`` for repeated calls.
    record : hypviz.capture.LayerRecord
        The recorded queries, keys and layer parameters.
    temperature : float
        The :math:`\tau` of the distance reference (and of the spatial softmax).
    own : hypviz.attention.Comparison or None
        The model's map against the distance softmax; ``None`` when the model's map *is* the
        distance softmax (kind ``"distance"``).
    thread : hypviz.attention.Comparison
        The spatial softmax against the distance softmax.
    """

    label: str
    record: Any  # hypviz.capture.LayerRecord
    temperature: float
    own: attention.Comparison | None  # None when the model's map is the distance softmax itself
    thread: attention.Comparison

    @property
    def own_kind(self) -> str:
        """The kind of the map the layer computes (``record.kind``)."""
        return self.record.kind

    @property
    def own_is_reference(self) -> bool:
        """Whether the layer's own map is the distance softmax itself (then ``own`` is ``None``)."""
        return self.own is None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def analyse(records: Sequence[Any], *, temperature: float | None = None, device: str = "auto",
            progress: bool | None = None) -> list[LayerResult]:
    r"""Compare, for every record, the model's map and the spatial softmax with the distance softmax.

    The distance softmax (and the spatial one) is taken at the record's own temperature (a full
    layer's, see :mod:`hypviz.capture`), else at ``temperature``, else at :math:`\sqrt{d}`.  The
    model's map is compared unless it is the distance softmax (kind ``"distance"``); a focused
    record uses its ``power`` and ``norm_scale``.  ``device`` and ``progress`` are passed to
    :func:`hypviz.attention.compare`.  Returns one :class:`LayerResult` per record, in order.
    """
    results = []
    for rec in records:
        label = rec.name + (f" (call {rec.call})" if getattr(rec, "call", 0) else "")
        tau = rec.temperature if rec.temperature is not None else temperature
        tau = float(math.sqrt(rec.dim) if tau is None else tau)
        common = dict(k=rec.k, temperature=tau, device=device, progress=progress)
        own = None
        if rec.kind != "distance":  # a distance layer's map is the reference itself
            own = attention.compare(
                rec.queries, rec.keys, rec.kind, "distance",
                power=rec.power if rec.power is not None else 2.0,
                norm_scale=rec.norm_scale if rec.norm_scale is not None else 1.0,
                **common,
            )
        thread = attention.compare(rec.queries, rec.keys, "spatial", "distance", **common)
        results.append(LayerResult(label, rec, tau, own, thread))
    return results


def _heads(comp: attention.Comparison) -> list[dict[str, Any]]:
    from hypviz.report import per_head

    return per_head(comp)


def _key_spread(rec: Any) -> np.ndarray:
    """Per head: the spread ``max - min`` of the keys' time coordinates (norms), the bias's driver."""
    kt = rec.keys[..., 0].double()
    return (kt.amax(dim=-1) - kt.amin(dim=-1)).numpy()


def _query_norms(rec: Any) -> np.ndarray:
    return rec.queries[..., 1:].double().norm(dim=-1).numpy()  # (H, N)


def worst_queries(results: Sequence[LayerResult], count: int = _WORST) -> list[dict[str, Any]]:
    """The query rows whose model map is farthest from the distance map (by TV), across the model."""
    rows = []
    for lr in results:
        comp = lr.own or lr.thread
        tv = comp.tv.double().reshape(lr.record.n_heads, -1).numpy()
        norms = _query_norms(lr.record)
        for h, i in zip(*np.unravel_index(np.argsort(tv, axis=None)[::-1][:count], tv.shape)):
            rows.append({"layer": lr.label, "head": int(h), "query": int(i), "query_norm": float(norms[h, i]),
                         "tv": float(tv[h, i]), "tv_uniform_reference": float(comp.tv_uniform_b.double().reshape(tv.shape)[h, i]),
                         "comparison": f"{comp.a} vs {comp.b}"})
    rows.sort(key=lambda r: -r["tv"])
    return rows[:count]


def metrics(results: Sequence[LayerResult], meta: dict[str, Any]) -> dict[str, Any]:
    r"""Everything of the report as a JSON-ready dict (the content of ``metrics.json``).

    Per layer: the set-up (mode, kind, :math:`k`, :math:`\tau`, power, norm_scale, shapes), the
    per-head key-norm spread :math:`\max_j \kappa_{t,j} - \min_j \kappa_{t,j}`, and both
    comparisons (summary and per head); then the worst queries and the verdict rule.  ``meta`` is
    stored as the ``inputs``; non-finite floats become ``None``.
    """
    from hypviz import __version__
    from hypviz.report import _clean

    layers = []
    for lr in results:
        rec = lr.record
        entry = {
            "layer": lr.label,
            "name": rec.name,
            "call": getattr(rec, "call", 0),
            "mode": rec.mode,
            "kind": rec.kind,
            "k": rec.k,
            "temperature": lr.temperature,
            "power": rec.power,
            "norm_scale": rec.norm_scale,
            "heads": rec.n_heads,
            "n_queries": rec.n_queries,
            "n_keys": rec.n_keys,
            "dim": rec.dim,
            "key_norm_spread": _key_spread(rec).tolist(),
            "model_vs_distance": None if lr.own is None else {
                "summary": lr.own.to_dict(), "heads": _heads(lr.own)},
            "model_map_is_distance": lr.own is None,
            "thread_spatial_vs_distance": {"summary": lr.thread.to_dict(), "heads": _heads(lr.thread)},
        }
        layers.append(entry)
    return _clean({
        "generator": "hypviz",
        "version": __version__,
        "command": "compare (model)",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "inputs": meta,
        "layers": layers,
        "worst_queries": worst_queries(results),
        "verdict_rule": {
            "close": f"mean TV(P_a, P_b) <= {attention.CLOSE_RATIO} x mean TV(P_b, uniform)",
            "uninformative": f"both maps within mean TV {attention.UNIFORM_TV} of the uniform row",
            "different": "otherwise",
        },
    })


def row_arrays(results: Sequence[LayerResult]) -> dict[str, np.ndarray]:
    out = {}
    for j, lr in enumerate(results):
        for tag, comp in (("model", lr.own), ("spatial", lr.thread)):
            if comp is None:
                continue
            for name in ("tv", "kl", "tv_uniform_a", "tv_uniform_b", "top1"):
                out[f"layer{j}_{tag}_vs_distance_{name}"] = getattr(comp, name).detach().cpu().numpy()
        out[f"layer{j}_query_norm"] = _query_norms(lr.record)
    return out


def figure(results: Sequence[LayerResult]):
    """Per layer (a row of panels): per-row TV against the query norm; per-head mean TV against key-norm spread."""
    from matplotlib.figure import Figure

    n = len(results)
    fig = Figure(figsize=(10.0, 3.4 * n), layout="constrained")
    axes = np.atleast_2d(fig.subplots(n, 2, squeeze=False))
    for row, lr in zip(axes, results):
        comp = lr.own or lr.thread
        what = "model's map" if lr.own is not None else "spatial softmax"
        tv = comp.tv.double().reshape(lr.record.n_heads, -1).numpy()
        norms = _query_norms(lr.record)
        ax = row[0]
        for h in range(tv.shape[0]):
            ax.scatter(norms[h], tv[h], s=8, alpha=0.6, color=style.colour(h), label=f"head {h}")
        ax.set_xlabel(r"query norm $\|q_s\|$ (spatial units)")
        ax.set_ylabel(r"$\mathrm{TV}(P, P^{\mathrm{dist}})$ per query (probability)")
        ax.set_title(f"{lr.label}: {what} vs distance, per query")
        ax.grid(True, alpha=0.3)
        if tv.shape[0] <= 8:
            ax.legend(fontsize=7)
        ax = row[1]
        spread = _key_spread(lr.record)
        heads = _heads(comp)
        for tag, key, marker in (("TV", "mean_tv", "o"), ("baseline TV(P_dist, U)", "mean_tv_uniform_b", "s")):
            ax.scatter(spread, [h[key] for h in heads], marker=marker, s=30, label=tag)
        ax.set_xlabel(r"key-norm spread $\max_j \kappa_{t,j} - \min_j \kappa_{t,j}$ (per head)")
        ax.set_ylabel("mean over queries (probability)")
        ax.set_title(f"{lr.label}: per head vs key-norm spread")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return fig


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 76rem; margin: 1.5rem auto;
       padding: 0 1rem; line-height: 1.45; color: #1a1a1a; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; } th { background: #f3f3f3; }
td.l, th.l { text-align: left; } .ok { color: #006b3c; font-weight: 600; } .bad { color: #b00020; font-weight: 600; }
.note { color: #555; font-size: 0.9rem; } figure img { max-width: 100%; height: auto; }
"""


def page(results: Sequence[LayerResult], png: bytes, meta: dict[str, Any]) -> str:
    from hypviz.report import _table, _verdict_html

    e = html.escape
    rows = []
    for lr in results:
        rec = lr.record
        own_heads = _heads(lr.own) if lr.own is not None else None
        for h, th in enumerate(_heads(lr.thread)):
            if own_heads is None:
                own = ["distance softmax itself (exact)", '<span class="ok">same map</span>', "0", "", "", "", ""]
            else:
                oh = own_heads[h]
                own = [e(rec.kind), _verdict_html(oh["verdict"]), _fmt(oh["mean_tv"]), _fmt(oh["mean_tv_uniform_a"]),
                       _fmt(oh["mean_tv_uniform_b"]), _fmt(oh["top1_agreement"]), _fmt(oh["rank_correlation"])]
            rows.append([e(lr.label), str(h), *own, _verdict_html(th["verdict"]), _fmt(th["mean_tv"])])
    table = _table(["layer", "head", "model's map", "verdict", "TV", "TV(model, U)", "TV(dist, U)", "top-1",
                    "Spearman", "spatial softmax verdict", "its TV"], rows, left=3)
    worst = [[e(w["layer"]), str(w["head"]), str(w["query"]), _fmt(w["query_norm"]), _fmt(w["tv"]),
              _fmt(w["tv_uniform_reference"]), e(w["comparison"])] for w in worst_queries(results)]
    layers = [[e(lr.label), e(lr.record.mode), e(lr.record.kind), _fmt(lr.record.k), _fmt(lr.temperature),
               _fmt(lr.record.power), _fmt(lr.record.norm_scale), str(lr.record.n_heads), str(lr.record.n_queries),
               str(lr.record.n_keys), str(lr.record.dim)] for lr in results]
    data = base64.b64encode(png).decode("ascii")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>hypviz model attention report: {e(meta.get('path', ''))}</title><style>{_CSS}</style></head><body>
<h1>hypviz model attention report</h1>
<p class="note">{e(meta.get('path', ''))} &middot; hypviz {e(meta['version'])} &middot; {e(meta['created'])}</p>
<h2>Per layer and head: is the attention the model computes close to distance attention?</h2>
{table}
<p class="note">Each row compares, for one head, <b>the map the model computes</b> (a <code>linear_focused</code>
layer: Hypformer's focused map <code>phi(q) . phi(&kappa;) / sum</code>, no softmax; a <code>full</code> layer:
the distance softmax at its own <code>tau = k * scale / 2</code>, which is the reference itself) with the distance
softmax <code>softmax(-1/2 |q - &kappa;|^2_L / tau)</code>, and, in the last two columns, the question-and-answer
thread's spatial softmax with the same reference. Every TV is read against each map's distance from the uniform row
<code>U</code>: <i>close</i> when TV &le; {attention.CLOSE_RATIO} &times; TV(dist, U), <i>uninformative</i> when
both maps are within TV {attention.UNIFORM_TV} of uniform, <i>different</i> otherwise.</p>
<h2>Where the differences are</h2>
<figure><img src="data:image/png;base64,{data}" alt="TV per query against its norm, and per head against the key-norm spread" data-file="layers.png">
<figcaption>Left: every query's TV from the distance map against the query's spatial norm. Right: per head, the mean
TV and the distance map's own TV from uniform against the spread of the key norms (the source of the spatial
softmax's bias). (also <code>layers.png</code>)</figcaption></figure>
<h3>Worst queries</h3>
{_table(["layer", "head", "query (index)", "|q_s|", "TV", "TV(dist, U)", "comparison"], worst, left=1)}
<h2>Layers</h2>
{_table(["layer", "mode", "kind", "k", "tau", "power", "norm_scale", "heads", "queries", "keys", "d"], layers, left=3)}
<p class="note"><code>metrics.json</code> holds every number of this page; <code>rows.npz</code> the per-query arrays.</p>
</body></html>
"""


def write(results: Sequence[LayerResult], folder: Path, meta: dict[str, Any]) -> list[str]:
    """Write ``report.html``, ``metrics.json``, ``rows.npz`` and ``layers.png`` into ``folder`` (which exists).

    Returns the sorted names of the files in ``folder``.
    """
    folder = Path(folder)
    fig = figure(results)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    png = buf.getvalue()
    (folder / "layers.png").write_bytes(png)
    data = metrics(results, meta)
    (folder / "metrics.json").write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    np.savez_compressed(folder / "rows.npz", **row_arrays(results))
    (folder / "report.html").write_text(page(results, png, {**meta, "version": data["version"], "created": data["created"]}),
                                        encoding="utf-8")
    return sorted(p.name for p in folder.iterdir())


def summary(results: Sequence[LayerResult], out: Path, files: list[str], max_rows: int = 16) -> str:
    r"""The one-screen text the command prints: one line per layer, one per head (at most ``max_rows`` heads).

    Each head line gives the model's map's verdict with its mean TV and baseline
    :math:`\mathrm{TV}(P^{\mathrm{dist}}, U)`, and the spatial softmax's verdict with its mean TV.
    """
    lines = [f"hypviz compare (model): {len(results)} attention layer call(s)"]
    count = 0
    for lr in results:
        rec = lr.record
        lines.append(f"  {lr.label}: {rec.mode}, kind {rec.kind}, {rec.n_heads} head(s) x {rec.n_queries} queries x "
                     f"{rec.n_keys} keys, d = {rec.dim}, k = {_fmt(rec.k)}, tau = {_fmt(lr.temperature)}")
        own = _heads(lr.own) if lr.own is not None else None
        for h, th in enumerate(_heads(lr.thread)):
            count += 1
            if count > max_rows:
                continue
            model = ("model's map = distance softmax" if own is None else
                     f"model's map {own[h]['verdict']:<13} (TV {_fmt(own[h]['mean_tv'])}, baseline {_fmt(own[h]['mean_tv_uniform_b'])})")
            lines.append(f"    head {h}: {model} | spatial softmax {th['verdict']} (TV {_fmt(th['mean_tv'])})")
    if count > max_rows:
        lines.append(f"    ... {count - max_rows} more heads in metrics.json")
    lines.append(f"report: {out / 'report.html'}")
    lines.append(f"  also in {out}: {', '.join(f for f in files if f != 'report.html')}")
    return "\n".join(lines)
