r"""The comparison report behind ``hypviz compare`` and ``hypviz demo``: the analysis and its numbers.

:func:`analyse` runs :func:`hypviz.attention.compare` for every kind against the reference and
the dense :func:`hypviz.attention.attention_map` on a sample of query rows (a :class:`Result`);
:func:`metrics` and :func:`row_arrays` are the numbers of the report's files and :func:`summary` the
one-screen text printed by the command.  This module is the first of the reports' one-way chain
(``point_report`` -> ``model_report`` -> ``figures`` -> ``html`` -> ``writing``): it imports none of
the others; :func:`hypviz.reports.writing.write_point_report` puts into a folder

* ``report.html``: a self-contained page (PNG figures embedded as base64, plotly.js inlined
  once): it opens from disk and makes no network request (:func:`hypviz.reports.html.page`, from
  the template ``hypviz/reports/templates/report.html``);
* ``metrics.json``: the set-up, one summary per comparison and per head (``"generator": "hypviz"``;
  :func:`metrics`);
* ``rows.npz``: per-row statistics, ``<a>_vs_<b>_<field>`` of shape ``(*heads, N)`` (:func:`row_arrays`);
* ``heatmaps.png``, ``difference.png``, ``rows.png``: the figures (:mod:`hypviz.reports.figures`,
  drawn by :mod:`hypviz.plots`).

Each comparison is read
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

import datetime
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hypviz import attention
from hypviz.reports.inputs import Inputs, Settings

__all__ = ["ROW_FIELDS", "FAR_RATIO", "Result", "fmt", "kind_words", "share_words", "ratio_words", "temperature_words",
           "sentence", "sentences", "per_head", "analyse", "json_ready", "metrics", "row_arrays", "summary"]

ROW_FIELDS = (
    "tv",
    "kl",
    "tv_uniform_a",
    "tv_uniform_b",
    "top1",
    "topk_overlap",
    "top1_weight",
    "peak_a",
    "peak_b",
    "tv_tolerance",
    "spearman",
    "logit_gap",
    "delta",
    "tv_bound",
    "kl_bound",
    "kl_bound_hoeffding",
    "allowance",
    "bound_met",
)  # the bound fields exist only for two softmax kinds, spearman only when computed


@dataclass
class Result:
    """What :func:`analyse` found, as the report's files (:mod:`hypviz.reports.writing`) and :func:`summary` read it.

    Attributes
    ----------
    inputs : hypviz.reports.inputs.Inputs
        The command's inputs: queries, keys, ``k``, head labels and their description.
    settings : hypviz.reports.inputs.Settings
        The command's settings: kinds, reference, temperature, device, ...
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

    inputs: Inputs
    settings: Settings
    comparisons: list[attention.Comparison]  # one per kind
    maps: dict[str, torch.Tensor]  # kind -> (rows, M) attention map of the shown head
    shown_head: int
    shown_rows: list[int]
    lead: tuple[int, ...]


def fmt(x: float | None) -> str:
    """A number as the reports print it: 3 significant digits, ``"n/a"`` for None."""
    return "n/a" if x is None else f"{x:.3g}"


# --------------------------------------------------------------------------- #
# the verdict in words: one plain sentence per comparison, before the numbers
# --------------------------------------------------------------------------- #
FAR_RATIO = 10.0
r"""A gap / baseline ratio :math:`\operatorname{mean}\mathrm{TV}(P_a, P_b) / \operatorname{mean}\mathrm{TV}(P_b, U)` at or
above this is said in words (:func:`ratio_words`): the reference is then nearly uniform next to the gap."""


def kind_words(kind: str) -> str:
    """A kind's plain name, as the sentences say it: the part of its registered plain title before the colon
    (``"spatial"``, ``"focused (Hypformer, linear)"``; :mod:`hypviz.base.kinds`), else the name itself."""
    from hypviz.base import kinds

    try:
        plain = kinds.get(kind).plain
    except (KeyError, ValueError, TypeError):
        return str(kind)
    return plain.split(":", 1)[0].strip() or str(kind)


def share_words(fraction: float) -> str:
    """A fraction of rows in words: ``"all the rows"``, ``"nearly all the rows"`` (more than 99 %), ``"half the rows"``,
    ``"a quarter of the rows"``, ``"three quarters of the rows"``, ``"a few rows (under 1 %)"`` or ``"37 % of the rows"``
    (whole percent)."""
    f = float(fraction)
    pct = round(100 * f)
    if f >= 1.0:
        return "all the rows"
    if pct >= 100:
        return "nearly all the rows"
    if pct == 0:
        return "a few rows (under 1 %)"
    return {50: "half the rows", 25: "a quarter of the rows", 75: "three quarters of the rows"}.get(pct, f"{pct} % of the rows")


def ratio_words(gap_ratio: float | None, a: str, b: str) -> str:
    r"""A gap / baseline ratio far above 1 (at least :data:`FAR_RATIO`) in words, else ``""``:
    ``"The mean gap is 2,060 times the distance map's own distance from uniform: the distance map is nearly uniform
    here, so the gap measures the spatial map's own structure."`` (3 significant digits)."""
    if gap_ratio is None or not math.isfinite(gap_ratio) or gap_ratio < FAR_RATIO:
        return ""
    shown = float(f"{gap_ratio:.3g}")
    number = f"{shown:,.0f}" if shown >= 100 else f"{shown:.3g}"
    return (f"The mean gap is {number} times the {b} map's own distance from uniform: the {b} map is nearly uniform here, "
            f"so the gap measures the {a} map's own structure.")


def temperature_words(temperature: float | None, dim: int | None) -> str:
    r"""The note that names a default temperature next to a verdict read against it:
    ``"at hypviz's default tau = sqrt(d) = 2 (d = 4; not a temperature you gave)"``."""
    return f"at hypviz's default tau = sqrt(d) = {fmt(temperature)} (d = {dim}; not a temperature you gave)"


def sentence(fractions: dict[str, float], a: str, b: str, gap_ratio: float | None = None, *, a_name: str | None = None,
             temperature_note: str = "") -> str:
    r"""One plain sentence for a comparison of map ``a`` with the reference ``b``, from its row-verdict fractions.

    The fractions (row verdict -> fraction of rows, :attr:`hypviz.attention.Comparison.row_verdicts`) are said
    largest first, each as a clause: *identical* "equals the ``b`` map up to rounding", *close* "is close to",
    *different* "weighs the keys differently from", *uninformative* "both maps are nearly uniform", *unresolved*
    "rounding at this precision cannot tell whether it is close"; the kinds by their plain titles
    (:func:`kind_words`), the shares in words (:func:`share_words`), the last of two or more clauses as the rest
    ("the other half").  With ``gap_ratio`` (mean TV over the reference's mean :math:`\mathrm{TV}(P_b, U)`) at or
    above :data:`FAR_RATIO`, a second sentence says what it means (:func:`ratio_words`).  For example
    ``{"different": 0.5, "uninformative": 0.5}`` of spatial against distance gives "The spatial map weighs the keys
    differently from the distance map on half the rows; on the other half both maps are nearly uniform."
    ``a_name`` replaces the plain name of ``a`` (a model's own map: ``"layer's"``); ``temperature_note`` (the temperature the
    verdict was read at, when it is a default: :func:`temperature_words`) opens the sentence, next to the verdict it affects.
    """
    wa, wb = (kind_words(a) if a_name is None else a_name), kind_words(b)
    order = attention.ROW_VERDICTS
    parts = sorted(((n, float(f)) for n, f in fractions.items() if float(f) > 0),  # near-uniform rows said last
                   key=lambda nf: (nf[0] == "uninformative", -nf[1], order.index(nf[0]) if nf[0] in order else len(order)))
    if not parts:
        return f"No rows compared the {wa} map with the {wb} map."
    said = {
        "identical": f"equals the {wb} map up to rounding",
        "close": f"is close to the {wb} map",
        "different": f"weighs the keys differently from the {wb} map",
        "unresolved": f"may or may not be close to the {wb} map (rounding at this precision cannot tell; a finer dtype can)",
    }
    clauses = []
    for i, (name, f) in enumerate(parts):
        share = share_words(f)
        if i and i == len(parts) - 1:
            pct = round(100 * f)
            share = "the other half" if pct == 50 else "the rest (under 1 %)" if pct == 0 else f"the other {pct} %"
        if name == "uninformative":
            clauses.append(f"the {wa} and {wb} maps are both nearly uniform on {share}, where any two maps are close in "
                           "TV: the comparison says nothing there" if i == 0 else
                           f"on {share} both maps are nearly uniform")
        elif i == 0:
            clauses.append(f"the {wa} map {said.get(name, name)} on {share}")
        else:
            clauses.append(f"on {share} it {said.get(name, name)}")
    text = "; ".join(clauses)
    text = (f"{temperature_note}, {text}" if temperature_note else text) + "."
    text = text[0].upper() + text[1:]
    extra = ratio_words(gap_ratio, wa, wb)
    return f"{text} {extra}" if extra else text


def _flat(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.detach().reshape(-1, n).cpu()


def per_head(comp: attention.Comparison) -> list[dict[str, Any]]:
    r"""Per head (flat leading index), the summary statistics of a :class:`hypviz.attention.Comparison` as a dict.

    Keys: ``verdict`` and ``row_verdicts`` (the head's rows read by :func:`hypviz.attention.verdict`
    and :func:`hypviz.attention.overall_verdict`: the verdict of at least 90 % of its rows, else
    ``"mixed"``), ``mean_tv``, ``max_tv``, ``mean_tv_uniform_a``, ``mean_tv_uniform_b``,
    ``gap_ratio``, ``mean_kl``, ``max_kl``, ``top1_agreement``, ``topk_agreement``,
    ``rank_correlation``, ``mean_delta``, ``bound_met_fraction``, ``output_ratio`` (``None`` where
    the comparison does not have the field), with the means taken over the head's query rows and

    .. math::

        \mathrm{gap\_ratio} = \frac{\operatorname{mean} \mathrm{TV}(P_a, P_b)}{\operatorname{mean} \mathrm{TV}(P_b, U)}

    (``None`` when the denominator is 0).
    """
    n = comp.n_queries

    def full(t: torch.Tensor) -> torch.Tensor:
        return _flat(t, n).double()

    def flat(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else full(t)

    tv, kl, ua, ub = full(comp.tv), full(comp.kl), full(comp.tv_uniform_a), full(comp.tv_uniform_b)
    top1, topk, rho = full(comp.top1), full(comp.topk_overlap), flat(comp.spearman)
    delta, met = flat(comp.delta), flat(comp.bound_met)
    og, oub = flat(comp.output_gap), flat(comp.output_uniform_b)
    rows = []
    for h, (head_verdict, fractions) in enumerate(comp.head_verdicts()):
        mean_tv, base_a, base_b = float(tv[h].mean()), float(ua[h].mean()), float(ub[h].mean())
        out_base = None if oub is None else float(oub[h].mean())
        rows.append(
            {
                "verdict": head_verdict,
                "row_verdicts": fractions,
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
                "output_ratio": None if not out_base or og is None else float(og[h].mean()) / out_base,
            }
        )
    return rows


def analyse(inputs: Inputs, settings: Settings) -> Result:
    """Compare every kind with the reference; dense attention maps of a sample of rows of the worst head.

    Each of ``settings.kinds`` is compared with ``settings.reference`` by
    :func:`hypviz.attention.compare` (with the settings' :meth:`~hypviz.reports.inputs.Settings.compare_options`:
    temperature, row sample, seed, device, the kernels' options).  The shown head is the one whose first comparison
    has the largest mean TV; on it,
    ``settings.sample_rows`` evenly spaced query rows get the dense map of the reference and of
    every kind.
    """
    queries, keys = inputs.queries, inputs.keys
    options = settings.compare_options(k=inputs.k)
    comps = [attention.compare(queries, keys, kind, settings.reference, options=options) for kind in settings.kinds]
    lead = tuple(comps[0].batch_shape)
    heads = per_head(comps[0])
    shown = max(range(len(heads)), key=lambda h: heads[h]["mean_tv"])
    n, m = queries.shape[-2], keys.shape[-2]
    q_head = queries.expand(*lead, n, queries.shape[-1]).reshape(-1, n, queries.shape[-1])[shown]
    keys_head = keys.expand(*lead, m, keys.shape[-1]).reshape(-1, m, keys.shape[-1])[shown]
    count = min(settings.sample_rows, n)
    rows = sorted({int(round(i)) for i in np.linspace(0, n - 1, count)})
    dev = torch.device(settings.device)
    q_rows, keys_head = q_head[rows].to(dev), keys_head.to(dev)
    maps = {
        kind: attention.attention_map(q_rows, keys_head, kind, k=inputs.k, temperature=comps[0].temperature,
                                      **options.kernel_options).cpu()
        for kind in [settings.reference, *settings.kinds]
    }
    return Result(inputs, settings, comps, maps, shown, rows, lead)


# --------------------------------------------------------------------------- #
# numbers: JSON and per-row arrays
# --------------------------------------------------------------------------- #
def json_ready(x: Any) -> Any:
    """``x`` (dicts, lists, numbers) with every non-finite float made ``None`` and every key a string."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_ready(v) for v in x]
    return x


def metrics(result: Result, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The content of ``metrics.json``: the set-up (with ``options``, the kernels' options the compared kinds read,
    as each comparison's ``plan`` records them), per comparison its summary and per-head statistics (:func:`per_head`),
    the row fields and the verdict rule; ``options`` (how the inputs were read) are stored with the inputs."""
    from hypviz import __version__

    comp0 = result.comparisons[0]
    heads_out = []
    for comp, words in zip(result.comparisons, sentences(result)):
        summary = comp.to_dict()
        heads = per_head(comp)
        for label, h in zip(result.inputs.head_labels, heads):
            h["head"] = label
        heads_out.append({"a": comp.a, "b": comp.b, "in_words": words, "summary": summary, "heads": heads})
    return json_ready(
        {
            "generator": "hypviz",
            "version": __version__,
            "command": result.settings.command,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "inputs": {**result.inputs.described, "spatial": result.inputs.spatial, **(options or {})},
            "setup": {
                "k": comp0.k,
                "temperature": comp0.temperature,
                "options": {name: value for comp in result.comparisons if comp.plan is not None
                            for name, value in comp.plan.options.items()},
                "device": comp0.device,
                "dtype": comp0.dtype,
                "heads_shape": list(result.lead),
                "n_queries": comp0.n_queries,
                "n_queries_total": comp0.n_queries_total,
                "sampled_rows": comp0.n_queries if comp0.sampled else None,
                "sample_seed": result.settings.seed if comp0.sampled else None,
                "n_keys": comp0.n_keys,
                "dim": comp0.dim,
                "reference": result.settings.reference,
                "kinds": list(result.settings.kinds),
                "shown_head": result.inputs.head_labels[result.shown_head],
                "shown_rows": result.shown_rows,
            },
            "comparisons": heads_out,
            "rows_file": "rows.npz",
            "row_fields": list(ROW_FIELDS),
            "verdict_rule": attention.verdict_rule(),
        }
    )


def row_arrays(result: Result) -> dict[str, np.ndarray]:
    """The content of ``rows.npz``: ``<a>_vs_<b>_<field>`` -> the per-row array ``(*heads, N)`` of every
    field of :data:`ROW_FIELDS` the comparison has."""
    out = {}
    for comp in result.comparisons:
        for name in ROW_FIELDS:
            value = getattr(comp, name)
            if value is not None:
                out[f"{comp.a}_vs_{comp.b}_{name}"] = value.detach().cpu().numpy()
    return out


def sentences(result: Result) -> list[str]:
    """One plain sentence per comparison of ``result`` (:func:`sentence`), naming hypviz's default temperature
    :math:`\\sqrt{d}` next to the verdict when no temperature was given and a map of the comparison reads one."""
    from hypviz.base import kinds

    out = []
    for comp in result.comparisons:
        uses_tau = any(getattr(kinds.get(kd), "temperature", True) for kd in (comp.a, comp.b) if kd in kinds.names())
        note = temperature_words(comp.temperature, comp.dim) if result.settings.temperature is None and uses_tau else ""
        out.append(sentence(comp.row_verdicts, comp.a, comp.b, comp.gap_ratio, temperature_note=note))
    return out


def summary(result: Result, out: Path, files: list[str], show_inputs: bool = False, max_heads: int = 8) -> str:
    r"""The one-screen text the command prints.

    First one plain sentence per comparison (:func:`sentences`), then one line per comparison (verdict, mean TV,
    baseline :math:`\mathrm{TV}(P_b, U)`, gap / baseline, top-1 agreement, how many rows meet the bound), then up to
    ``max_heads`` per-head lines of the first comparison, and where the files are.
    """
    comp0 = result.comparisons[0]
    inp = result.inputs.described
    heads_txt = " x ".join(str(s) for s in result.lead) + " heads x " if result.lead else ""
    lines = [
        f"hypviz {result.settings.command}: {result.inputs.title}",
        f"  queries {tuple(inp['queries']['shape'])} {inp['queries']['dtype']}, keys {tuple(inp['keys']['shape'])} "
        f"{inp['keys']['dtype']}" + (" (spatial parts, lifted)" if result.inputs.spatial else ""),
        f"  {heads_txt}{comp0.n_queries} queries x {comp0.n_keys} keys, d = {comp0.dim}, k = {fmt(comp0.k)}, "
        f"tau = {fmt(comp0.temperature)}, {comp0.dtype} on {comp0.device}",
    ]
    for comp, words in zip(result.comparisons, sentences(result)):
        lines.append(f"  {comp.a} vs {comp.b}: {words}")
    width = max(len(f"{c.a} vs {c.b}") for c in result.comparisons)
    for comp in result.comparisons:
        if comp.bound_applies:
            assert comp.bound_met is not None  # compare fills it wherever the bound applies
            met = int(comp.bound_met.sum())
            check = f"theory check {met}/{comp.n_rows}" + ("" if met == comp.n_rows else "  <-- bound NOT met on some rows")
        else:
            check = "theory check n/a"
        lines.append(
            f"  {f'{comp.a} vs {comp.b}':<{width}}  {comp.verdict:<13} TV mean {fmt(comp.mean_tv):>8} | "
            f"TV(P_a, U) {fmt(comp.mean_tv_uniform_a):>8}  TV(P_b, U) {fmt(comp.mean_tv_uniform_b):>8} | "
            f"gap/baseline {fmt(comp.gap_ratio):>6} | top-1 {fmt(comp.top1_agreement)} | {check}"
        )
        lines.append(f"  {'':<{width}}  rows: {attention.describe_fractions(comp.row_verdicts)}")
    if len(result.inputs.head_labels) > 1:
        lines.append(f"  per head ({comp0.a} vs {comp0.b}):")
        heads = per_head(comp0)
        for label, h in list(zip(result.inputs.head_labels, heads))[:max_heads]:
            lines.append(
                f"    head {label:<14} {h['verdict']:<13} TV mean {fmt(h['mean_tv']):>8}  "
                f"baseline {fmt(h['mean_tv_uniform_b']):>8}  top-1 {fmt(h['top1_agreement'])}"
            )
        if len(heads) > max_heads:
            lines.append(f"    ... {len(heads) - max_heads} more heads in metrics.json")
    lines.append(f"report: {out / 'report.html'}")
    lines.append(f"  also in {out}: {', '.join(f for f in files if f != 'report.html')}")
    if show_inputs:
        lines.append(f"  your own tensors: hypviz compare QUERIES.npy KEYS.npy  (this demo's: {out / 'inputs.npz'} for both)")
    return "\n".join(lines)

