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
against both maps' distance from the uniform row :math:`U`, with a verdict per head by the same
rule as everywhere (:func:`hypviz.attention.verdict` row by row, then
:func:`hypviz.attention.overall_verdict`: the verdict of at least 90 % of the head's rows, else
*mixed*).  Where the record holds the layer's values, the two attention outputs (Lorentzian
centroids) are compared too, against the uniform row's output.

Per layer it shows where the differences sit: the per-row gap against the query's norm, the
per-head gap against the spread :math:`\max_j \kappa_{t,j} - \min_j \kappa_{t,j}` of the key
norms, and the worst queries (by index) with their norms.

:func:`hypviz.reports.writing.write_model_report` puts ``report.html`` (self-contained;
:func:`hypviz.reports.html.model_page`, from the template ``hypviz/reports/templates/model_report.html``),
``metrics.json`` (:func:`metrics`), ``rows.npz`` (:func:`row_arrays`) and ``layers.png`` (:func:`layer_panels`,
drawn by :func:`hypviz.reports.figures.model_figure`) into a folder; :func:`summary` is the text the command
prints.  This module is the second of the reports' one-way chain (``point_report`` -> ``model_report`` ->
``figures`` -> ``html`` -> ``writing``): it imports :mod:`hypviz.reports.point_report` only.  Whether a
layer's map goes through :func:`hypviz.attention.compare` or is rebuilt and compared by
:func:`hypviz.attention.compare_maps` is read from the kind registry (:attr:`hypviz.base.kinds.Kind.comparable`).
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hypviz import attention
from hypviz.base import kinds
from hypviz.reports.point_report import fmt, json_ready, kind_words, per_head, sentence, temperature_words

__all__ = ["REFERENCE", "THREAD", "LayerResult", "analyse", "per_head", "layer_sentence", "worst_queries", "metrics",
           "row_arrays", "layer_panels", "summary"]

_WORST = 10  # worst queries listed per report
REFERENCE = "distance"  # every layer's map is compared with the distance softmax (Hypformer's full attention) ...
THREAD = "spatial"  # ... and so is the question-and-answer thread's spatial softmax


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
    def verified(self) -> bool:
        """Whether hypviz rebuilt the layer's own output from the record (:mod:`hypviz.capture.verification`)."""
        return str(getattr(self.record, "verify_note", "") or "").startswith("verified")

    @property
    def verification(self) -> str:
        """``"verified (error 1.2e-16)"`` or ``"not verified"``: the report's column."""
        err = getattr(self.record, "verify_error", None)
        return f"verified (error {err:.2g})" if self.verified and err is not None else "not verified"

    @property
    def verification_bound(self) -> str:
        """The column as a checked bound, for printed text that must not depend on rounding:
        ``"verified (error <= 1.5e-08, sqrt(eps) of float64)"`` or ``"not verified"``."""
        tol = getattr(self.record, "verify_tolerance", None)
        if not self.verified or tol is None:
            return "not verified"
        return f"verified (error <= {tol:.2g}, sqrt(eps) of {getattr(self.record, 'dtype', None) or 'float32'})"

    @property
    def temperature_text(self) -> str:
        r""":math:`\tau` as shown: the layer's, measured from its output, or hypviz's default :math:`\sqrt{d}`."""
        src = getattr(self.record, "temperature_source", None)
        if self.record.temperature is None:
            if abs(self.temperature - math.sqrt(self.record.dim)) <= 1e-12 * self.temperature:
                return f"{fmt(self.temperature)} (hypviz default sqrt(d), not the layer's)"
            return f"{fmt(self.temperature)} (--temperature, not the layer's)"
        sign = " (scale < 0)" if getattr(self.record, "scale_sign", 1) < 0 else ""
        if getattr(self.record, "head_temperatures", None) is not None:
            sign += " (geometric mean; one per head: " + ", ".join(fmt(t) for t in self.record.head_temperatures) + ")"
        return fmt(self.temperature) + (f" ({src})" if src in ("measured", "default") else "") + sign

    @property
    def default_temperature(self) -> bool:
        r"""Whether the distance reference was read at hypviz's default :math:`\tau = \sqrt{d}` (the layer records no
        temperature of its own and none was given)."""
        return self.record.temperature is None and abs(self.temperature - math.sqrt(self.record.dim)) <= 1e-12 * self.temperature

    @property
    def reason(self) -> str:
        """Why the layer is not verified, from its verification note (``""`` for a verified layer)."""
        if self.verified:
            return ""
        note = str(getattr(self.record, "verify_note", None) or "").strip()
        return note[len("not verified:"):].strip() if note.startswith("not verified:") else (note or "no verification recorded")

    @property
    def own_is_reference(self) -> bool | None:
        """Whether the layer's own map is the distance softmax itself (then ``own`` is ``None``); None for a layer
        hypviz did not verify (no statement about its own map)."""
        return None if not self.verified else self.own is None


def analyse(records: Sequence[Any], *, temperature: float | None = None, device: str = "auto",
            progress: bool | None = None) -> list[LayerResult]:
    r"""Compare, for every record, the model's map and the spatial softmax with the distance softmax.

    The distance softmax (and the spatial one) is taken at the record's own temperature (a full
    layer's, see :mod:`hypviz.capture`), else at ``temperature``, else at :math:`\sqrt{d}`.  The
    model's map is compared unless it is the distance softmax (kind ``"distance"``) or the record is not
    verified -- re-checked here from what the record holds (:func:`hypviz.capture.verification.recheck`: the output
    stored at capture rebuilt from the stored points and map, every field's digest unchanged) (one verdict policy: a
    layer whose output hypviz did not rebuild gets no verdict about its own map, ``own`` is None); a record's kind
    takes the kernel's options the record holds (a focused layer's ``power`` and ``norm_scale``).  A record with a
    mask or an adjacency is compared as the layer applies it: every map the softmax over the keys the layer attends
    (:func:`hypviz.capture.records.masked_softmax`, exact at any norm).  ``device`` and ``progress`` are passed to
    :func:`hypviz.attention.compare`.  Returns one :class:`LayerResult` per record, in order.
    """
    from hypviz.capture.verification import recheck

    results = []
    for rec in records:
        rec = recheck(rec)  # verified only when the check is redone from the record now; a stored verdict is not trusted
        label = rec.name + (f" (call {rec.call})" if getattr(rec, "call", 0) else "")
        if getattr(rec, "batch", None) is not None:
            label += f" (batch element {rec.batch})"
        tau = rec.temperature if rec.temperature is not None else temperature
        tau = float(math.sqrt(rec.dim) if tau is None else tau)
        options = attention.CompareOptions(k=rec.k, temperature=tau, device=device, progress=progress)
        verified = str(getattr(rec, "verify_note", "") or "").startswith("verified")
        own = None
        if getattr(rec, "mask", None) is not None or getattr(rec, "adjacency", None) is not None \
                or getattr(rec, "head_temperatures", None) is not None:
            own, thread = _restricted(rec, tau, verified)
            results.append(LayerResult(label, rec, tau, own, thread))
            continue
        if not verified:
            pass
        elif not kinds.get(rec.kind, "a record's kind").comparable or getattr(rec, "scale_sign", 1) < 0:
            own = _own_given(rec, tau)
        elif rec.kind != REFERENCE:  # a distance layer's map is the reference itself
            own = attention.compare(rec.queries, rec.keys, rec.kind, REFERENCE, values=rec.values, options=options,
                                    **_recorded_options(rec))
        thread = attention.compare(rec.queries, rec.keys, THREAD, REFERENCE, values=rec.values, options=options)
        results.append(LayerResult(label, rec, tau, own, thread))
    return results


def _recorded_options(rec: Any) -> dict[str, Any]:
    """The kernel's options of the record's kind that the record holds (``power`` and ``norm_scale`` of a focused
    layer); those it leaves ``None`` take the kernel's defaults."""
    return {name: getattr(rec, name) for name in kinds.get(rec.kind).options if getattr(rec, name, None) is not None}


def _restricted(rec: Any, tau: float, verified: bool) -> tuple[attention.Comparison | None, attention.Comparison]:
    """The model's map (when verified and not the distance softmax itself) and the spatial softmax, each against the
    distance softmax, all restricted to the keys the layer attends (its mask, or the adjacency's non-zero entries)
    and judged against the uniform row over those keys (``compare_maps(keep=...)``),
    each head at its own temperature where the layer learns one (``head_temperatures``)."""
    import torch

    from hypviz.capture.records import masked_softmax
    from hypviz.capture.verification import layer_map

    q, keys = rec.queries.to(torch.float64), rec.keys.to(torch.float64)
    keep = rec.mask if rec.mask is not None else torch.ones(1, rec.n_queries, rec.n_keys, dtype=torch.bool)
    if rec.adjacency is not None:
        adj = rec.adjacency.to_dense() if rec.adjacency.layout != torch.strided else rec.adjacency
        keep = keep & (adj != 0)

    def restrict(p: torch.Tensor) -> torch.Tensor:
        kept = torch.where(keep, p, torch.zeros((), dtype=p.dtype))
        total = kept.sum(dim=-1, keepdim=True)
        return torch.where(total > 0, kept / torch.where(total > 0, total, torch.ones_like(total)),
                           torch.full_like(p, 1.0 / p.shape[-1]))

    temperatures = rec.head_temperatures or [tau] * rec.n_heads  # per head where the layer learns one

    def masked(kind: str) -> torch.Tensor:  # the softmax over the kept keys (-inf logits before it): exact at any norm
        return torch.cat([masked_softmax(attention.scores(q[h:h + 1], keys[h:h + 1], kind, k=rec.k) / temperature,
                                         keep[h:h + 1] if keep.shape[0] > 1 else keep)
                          for h, temperature in enumerate(temperatures)])

    p_ref, p_thr = masked(REFERENCE), masked(THREAD)
    # judged over the keys each row attends: its uniform baseline is the uniform row over those keys
    thread = attention.compare_maps(p_thr, p_ref, a=THREAD, b=REFERENCE, keep=keep, values=rec.values, k=rec.k)
    own = None
    if verified and not (rec.kind == REFERENCE and getattr(rec, "scale_sign", 1) > 0):
        own = attention.compare_maps(restrict(layer_map(rec)), p_ref, a=rec.kind, b=REFERENCE, keep=keep,
                                     values=rec.values, k=rec.k)
    return own, thread


def _own_given(rec: Any, tau: float) -> attention.Comparison:
    """A layer's own map that :func:`hypviz.attention.compare` does not build (the gate, the Poincare softmax, a
    negative scale) against the distance softmax, by :func:`hypviz.attention.compare_maps`; the gate's rows are
    normalised first (its Lorentzian normalisation of :math:`G X` does not depend on the rows' scale)."""
    import torch

    from hypviz.capture.verification import layer_map

    p_own = layer_map(rec)
    p_own = p_own / p_own.sum(dim=-1, keepdim=True)
    p_ref = attention.attention_map(rec.queries.to(torch.float64), rec.keys.to(torch.float64), REFERENCE, k=rec.k,
                                    temperature=tau)
    return attention.compare_maps(p_own, p_ref, a=rec.kind, b=REFERENCE, values=rec.values, k=rec.k)


def layer_sentence(lr: LayerResult) -> str:
    """The layer's verdict in plain words, before its numbers: whether hypviz rebuilt its output (and if not, why:
    then nothing is said about its own map), its own map against the distance softmax
    (:func:`hypviz.reports.point_report.sentence`, over all its heads' rows; hypviz's default temperature named when
    the verdict was read at it), and the thread's spatial softmax against the same reference."""
    note = temperature_words(lr.temperature, lr.record.dim) if lr.default_temperature else ""
    if not lr.verified:
        own = (f"hypviz did not rebuild this layer's output ({lr.reason}), so nothing is said about the layer's own map. "
               "For comparison, ")
    elif lr.own is None:
        own = "The layer's map is the distance softmax itself (its output rebuilt and verified). For comparison, "
    else:
        words = sentence(lr.own.row_verdicts, lr.own.a, REFERENCE, lr.own.gap_ratio,
                         a_name=f"layer's {kind_words(lr.own.a)}", temperature_note=note)
        own = f"{words} For comparison, "
        note = ""  # said once, next to the first verdict it affects
    thread = sentence(lr.thread.row_verdicts, THREAD, REFERENCE, lr.thread.gap_ratio, temperature_note=note)
    return own + thread[0].lower() + thread[1:]


def _key_spread(rec: Any) -> np.ndarray:
    """Per head: the spread ``max - min`` of the keys' time coordinates (norms), the bias's driver."""
    kt = rec.keys[..., 0].double()
    return (kt.amax(dim=-1) - kt.amin(dim=-1)).numpy()


def _query_norms(rec: Any) -> np.ndarray:
    return rec.queries[..., 1:].double().norm(dim=-1).numpy()  # (H, N)


def worst_queries(results: Sequence[LayerResult], count: int = _WORST) -> list[dict[str, Any]]:
    """The query rows whose model map is farthest from the distance map (by TV), across the model."""
    rows: list[dict[str, Any]] = []
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
            "verified": lr.verified,
            "verification": lr.verification,
            **{f: getattr(rec, f, None) for f in ("verify_error", "verify_tolerance", "verify_note", "dtype", "training",
                                                  "scale_sign", "temperature_source", "aggregation", "bias",
                                                  "head_temperatures")},
            "model_vs_distance": None if lr.own is None or not lr.verified else {
                "summary": lr.own.to_dict(), "heads": per_head(lr.own)},
            "model_map_is_distance": lr.own_is_reference,
            "in_words": layer_sentence(lr),
            "model_verdict": ("not verified: no verdict" if not lr.verified else
                              "model's map = distance softmax" if lr.own is None else "per head in model_vs_distance"),
            "batch": getattr(rec, "batch", None),
            "masked": getattr(rec, "mask", None) is not None,
            "adjacency": getattr(rec, "adjacency", None) is not None,
            "detail": getattr(rec, "detail", None),
            "checked": getattr(rec, "checked", None),
            "thread_spatial_vs_distance": {"summary": lr.thread.to_dict(), "heads": per_head(lr.thread)},
        }
        layers.append(entry)
    return json_ready({
        "generator": "hypviz",
        "version": __version__,
        "command": "compare (model)",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "inputs": meta,
        "layers": layers,
        "worst_queries": worst_queries(results),
        "verdict_rule": attention.verdict_rule(),
    })


def row_arrays(results: Sequence[LayerResult]) -> dict[str, np.ndarray]:
    """The content of ``rows.npz``: per layer ``j``, ``layer<j>_<model|spatial>_vs_distance_<field>`` and
    ``layer<j>_query_norm``."""
    out = {}
    for j, lr in enumerate(results):
        for tag, comp in (("model", lr.own), ("spatial", lr.thread)):
            if comp is None:
                continue
            for name in ("tv", "kl", "tv_uniform_a", "tv_uniform_b", "top1"):
                out[f"layer{j}_{tag}_vs_distance_{name}"] = getattr(comp, name).detach().cpu().numpy()
        out[f"layer{j}_query_norm"] = _query_norms(lr.record)
    return out


def layer_panels(results: Sequence[LayerResult]) -> list[dict[str, Any]]:
    """What the figure ``layers.png`` draws, per layer (a row of panels): the per-row TV of the model's map (else
    the spatial softmax's) and the query norms, the per-head mean TV, baseline and key-norm spread (the figure is
    :func:`hypviz.reports.figures.model_figure`)."""
    layers = []
    for lr in results:
        comp = lr.own or lr.thread
        heads = per_head(comp)
        layers.append({
            "label": lr.label,
            "what": "model's map" if lr.own is not None else "spatial softmax",
            "tv": comp.tv.double().reshape(lr.record.n_heads, -1).numpy(),
            "query_norms": _query_norms(lr.record),
            "key_norm_spread": _key_spread(lr.record),
            "mean_tv": [h["mean_tv"] for h in heads],
            "baseline": [h["mean_tv_uniform_b"] for h in heads],
        })
    return layers


def summary(results: Sequence[LayerResult], out: Path, files: list[str], max_rows: int = 16) -> str:
    r"""The one-screen text the command prints: one line per layer, one per head (at most ``max_rows`` heads).

    The layer line says whether hypviz reproduced the layer's output, as the bound that was checked
    (the errors themselves are in ``metrics.json`` and ``report.html``), the next says the layer's verdicts in plain
    words (:func:`layer_sentence`).  Each head line gives the model's map's verdict with its mean TV and baseline
    :math:`\mathrm{TV}(P^{\mathrm{dist}}, U)`, and the spatial softmax's verdict with its mean TV.
    """
    lines = [f"hypviz compare (model): {len(results)} attention layer call(s)"]
    count = 0
    for lr in results:
        rec = lr.record
        mode = {True: "train", False: "eval", None: "train/eval not recorded"}[getattr(rec, "training", None)]
        detail = getattr(rec, "detail", None)
        checked = getattr(rec, "checked", None)
        lines.append(f"  {lr.label}: {rec.mode}{f' ({detail})' if detail else ''}, kind {rec.kind}, "
                     f"{rec.n_heads} head(s) x {rec.n_queries} queries x "
                     f"{rec.n_keys} keys, d = {rec.dim}, k = {fmt(rec.k)}, tau = {lr.temperature_text}, {mode}, "
                     + (f"{lr.verification_bound}" + (f"; checked: {checked}" if checked else "") if lr.verified
                        else str(getattr(rec, "verify_note", None) or "not verified")))
        lines.append(f"    in words: {layer_sentence(lr)}")
        own = per_head(lr.own) if lr.own is not None else None
        for h, th in enumerate(per_head(lr.thread)):
            count += 1
            if count > max_rows:
                continue
            model = ("model's map not verified: no verdict" if not lr.verified else
                     "model's map = distance softmax" if own is None else
                     f"model's map {own[h]['verdict']:<13} (TV {fmt(own[h]['mean_tv'])}, TV(model, U) "
                     f"{fmt(own[h]['mean_tv_uniform_a'])}, TV(dist, U) {fmt(own[h]['mean_tv_uniform_b'])})")
            lines.append(f"    head {h}: {model} | spatial softmax {th['verdict']} (TV {fmt(th['mean_tv'])}, "
                         f"TV(spatial, U) {fmt(th['mean_tv_uniform_a'])}, TV(dist, U) {fmt(th['mean_tv_uniform_b'])})")
    if count > max_rows:
        lines.append(f"    ... {count - max_rows} more heads in metrics.json")
    lines.append(f"report: {out / 'report.html'}")
    lines.append(f"  also in {out}: {', '.join(f for f in files if f != 'report.html')}")
    return "\n".join(lines)

