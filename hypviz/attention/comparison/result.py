"""The result of :func:`hypviz.attention.compare` (and :func:`hypviz.attention.compare_maps`) and how to read it:
baselines and verdicts.

:class:`Comparison` holds the per-row statistics of two attention maps (``b`` the reference) and
their summaries; :func:`verdict` reads one row against the uniform row and the rounding level:
*identical*, *close*, *different*, *uninformative* or *unresolved* (the rounding level too close to the
TVs being judged); :func:`overall_verdict` reads many rows from the fractions of their verdicts (*mixed*
when they differ in substance).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from hypviz.base import validate

__all__ = [
    "UNIFORM_TV",
    "UNIFORM_PEAK",
    "CLOSE_RATIO",
    "TOP1_WEIGHT",
    "TOP_SHARE",
    "RESOLVE",
    "MAJORITY",
    "VERDICTS",
    "ROW_VERDICTS",
    "TOPK_MAX",
    "verdict",
    "row_verdicts",
    "overall_verdict",
    "describe_fractions",
    "verdict_text",
    "verdict_rule",
    "Plan",
    "Comparison",
    "assemble",
]

UNIFORM_TV = 0.05
r"""A map is *near uniform* on a row when :math:`\mathrm{TV}(P, U) <` this and no key gets :data:`UNIFORM_PEAK` times
its uniform weight (:func:`verdict`)."""
UNIFORM_PEAK = 2.0
r"""A map is *near uniform* on a row only when :math:`M \max_j P_j <` this: no key gets twice the uniform weight
:math:`1/M` (:func:`verdict`)."""
CLOSE_RATIO = 0.25
r"""Two maps are *close* on a row when :math:`\mathrm{TV}(P_a, P_b) \le 0.25 \min(\mathrm{TV}(P_a, U), \mathrm{TV}(P_b, U))`
(and they agree on the favourite key, :data:`TOP1_WEIGHT`)."""
TOP1_WEIGHT = 0.9
r"""*Close* also needs each map to give the other's top set at least this fraction of its own largest weight (:func:`verdict`)."""
TOP_SHARE = 0.25
r"""A map's top set (its largest weight and every weight tied with it within rounding) is its *favourite* only when it
carries at least this fraction of the map's excess over uniform, :math:`\sum_{j \in T} (P_j - 1/M)_+ \ge 0.25\,
\mathrm{TV}(P, U)`; else the TV alone decides."""
RESOLVE = 0.5
r"""A row's rounding tolerance *resolves* it when it is at most this fraction of the TV that separates close from
different, :math:`0.25 \min(\mathrm{TV}(P_a, U), \mathrm{TV}(P_b, U))`; else a row within the tolerance of that TV is
*unresolved*."""
MAJORITY = 0.9
"""The verdict of a whole comparison is the row verdict of at least this fraction of its rows, else ``"mixed"``
(:func:`overall_verdict`)."""
#: The row verdicts of :func:`verdict`, in the order of their codes.
#: The largest ``topk`` of a comparison (:func:`hypviz.attention.compare`, :func:`hypviz.attention.compare_maps`):
#: a k beyond the number of keys is capped at it, so this bound refuses only the absurd (an int of 2**70).
TOPK_MAX = 2**31 - 1
ROW_VERDICTS: tuple[str, ...] = ("identical", "close", "different", "uninformative", "unresolved")
#: Every verdict a comparison can get, the row verdicts and ``"mixed"`` (:func:`overall_verdict`).
VERDICTS: tuple[str, ...] = ROW_VERDICTS + ("mixed",)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def verdict(
    tv: float,
    tv_uniform_a: float,
    tv_uniform_b: float,
    *,
    peak_a: float,
    peak_b: float,
    top1_weight: float,
    tolerance: float = 0.0,
) -> str:
    r"""Plain-language reading of ONE row of a comparison; symmetric in the two maps.

    With :math:`U` the uniform row over the :math:`M` keys, :math:`t = 0.25 \min(\mathrm{TV}(P_a, U),
    \mathrm{TV}(P_b, U))` the TV that separates *close* from *different*, and :math:`\epsilon` =
    ``tolerance``, the TV that rounding alone can produce (:attr:`Comparison.tv_tolerance`), the row is
    *resolved* when :math:`\epsilon \le 0.5\, t` (:data:`RESOLVE`); in this order:

    * ``"identical"`` when :math:`\mathrm{TV}(P_a, P_b) \le \epsilon` on a resolved row: the maps are equal up to
      rounding, whatever their distance from uniform (a computed TV of exactly 0 included: on a row that is not
      resolved, rounding alone could make two different maps' TV 0, or two equal maps' not 0);
    * ``"uninformative"`` when BOTH maps are near uniform: :math:`\mathrm{TV}(P, U) < 0.05` and
      :math:`M \max_j P_j < 2` (no key gets twice its uniform weight :math:`1/M`, so the test scales
      with :math:`M`): any two such maps are close in TV, so a small TV says nothing;
    * ``"unresolved"`` when the row is not resolved and :math:`\mathrm{TV}(P_a, P_b) \le t + \epsilon`:
      the rounding of this precision could make it identical, close or different (compute in a
      finer dtype);
    * ``"close"`` when the gap is small next to the structure of BOTH maps,
      :math:`\mathrm{TV}(P_a, P_b) \le t`, AND they agree on the keys that carry the weight:
      ``top1_weight`` :math:`\ge 0.9` (:data:`TOP1_WEIGHT`);
    * else ``"different"``.

    ``tv``, ``tv_uniform_a``, ``tv_uniform_b`` are :math:`\mathrm{TV}(P_a, P_b)`,
    :math:`\mathrm{TV}(P_a, U)`, :math:`\mathrm{TV}(P_b, U)`; ``peak_a``, ``peak_b`` are
    :math:`M \max_j P_{a,j}` and :math:`M \max_j P_{b,j}`; ``top1_weight`` is, with :math:`T_a` the
    top set of :math:`P_a` (its largest weight and every weight tied with it within rounding, so that
    no key order decides) and :math:`\tilde P = P / \max_j P_j`,

    .. math::

        \min\Bigl(\frac{\sum_{j \in T_a} \tilde P_{b,j}}{\sum_{j \in T_a} \tilde P_{a,j}},\;
                   \frac{\sum_{j \in T_b} \tilde P_{a,j}}{\sum_{j \in T_b} \tilde P_{b,j}}\Bigr)

    (capped at 1), each direction counted only when its top set carries at least a quarter of its map's
    excess over uniform (:data:`TOP_SHARE`): near-tied top keys that each carry a negligible part of
    the map never decide a row, so the verdict does not depend on :math:`M` for the same perturbation.
    The thresholds are :data:`UNIFORM_TV`, :data:`UNIFORM_PEAK`, :data:`CLOSE_RATIO`,
    :data:`TOP1_WEIGHT`, :data:`TOP_SHARE` and :data:`RESOLVE`; notebook 05 derives them and shows the
    calibration table (:func:`hypviz.attention.comparison.calibration.cases`) the tests hold this rule to.  A whole
    comparison is read from the fractions of its rows (:func:`overall_verdict`), never from row means.

    Examples
    --------
    A row 0.05 apart in TV, with both maps 0.4 from uniform and the same favourite key, is close;
    0.3 apart it is different:

    >>> from hypviz.attention import verdict
    >>> verdict(0.05, 0.4, 0.4, peak_a=3.0, peak_b=3.0, top1_weight=1.0)
    'close'
    >>> verdict(0.3, 0.4, 0.4, peak_a=3.0, peak_b=3.0, top1_weight=1.0)
    'different'
    """
    given = dict(tv=tv, tv_uniform_a=tv_uniform_a, tv_uniform_b=tv_uniform_b, peak_a=peak_a, peak_b=peak_b,
                 top1_weight=top1_weight, tolerance=tolerance)
    rows = [torch.tensor([validate.number(value, name, minimum=0.0)]) for name, value in given.items()]
    return ROW_VERDICTS[int(row_verdicts(*rows)[0])]


def row_verdicts(
    tv: torch.Tensor,
    ua: torch.Tensor,
    ub: torch.Tensor,
    peak_a: torch.Tensor,
    peak_b: torch.Tensor,
    top1_weight: torch.Tensor,
    tolerance: torch.Tensor,
) -> torch.Tensor:
    """The rule of :func:`verdict` on every row at once: codes, indices into :data:`ROW_VERDICTS` (``int8``, the rows' shape).

    Examples
    --------
    >>> import torch
    >>> from hypviz.attention import ROW_VERDICTS, row_verdicts
    >>> def rows(*v):
    ...     return torch.tensor(v, dtype=torch.float64)
    >>> codes = row_verdicts(rows(0.0, 0.05, 0.3), rows(0.4, 0.4, 0.4), rows(0.4, 0.4, 0.4),
    ...                      rows(3.0, 3.0, 3.0), rows(3.0, 3.0, 3.0), rows(1.0, 1.0, 1.0), rows(0.0, 0.0, 0.0))
    >>> [ROW_VERDICTS[int(c)] for c in codes]
    ['identical', 'close', 'different']
    """
    tv, ua, ub, tol = tv.double(), ua.double(), ub.double(), tolerance.double()
    near = (ua < UNIFORM_TV) & (peak_a.double() < UNIFORM_PEAK) & (ub < UNIFORM_TV) & (peak_b.double() < UNIFORM_PEAK)
    cut = CLOSE_RATIO * torch.minimum(ua, ub)
    resolved = tol <= RESOLVE * cut
    close = (tv <= cut) & (top1_weight.double() >= TOP1_WEIGHT)
    code = torch.where(close, 1, 2)
    code = torch.where(~resolved & (tv <= cut + tol), 4, code)
    code = torch.where(near, 3, code)
    code = torch.where(resolved & (tv <= tol), 0, code)  # a TV of 0 too: rounding could have made it 0 (or not)
    return code.to(torch.int8)


def _fractions(codes: torch.Tensor) -> dict[str, float]:
    flat = codes.reshape(-1)
    n = max(1, flat.numel())
    return {name: float((flat == i).sum()) / n for i, name in enumerate(ROW_VERDICTS)}


def overall_verdict(fractions: dict[str, float]) -> str:
    r"""The verdict of many rows from the fraction of rows with each row verdict (:data:`MAJORITY` = 0.9).

    ``"identical"`` when at least 90 % of the rows are identical; else ``"close"`` when at least 90 %
    are identical or close; else ``"uninformative"``, ``"different"`` or ``"unresolved"`` when at least
    90 % of the rows are; else ``"close"`` again when at least 90 % are identical, close or
    uninformative (the rows with structure agree, the others are near uniform in both maps: nothing
    differs in substance; :meth:`Comparison.verdict_text` says ``"close (x% near uniform)"``); else
    ``"unresolved"`` when those rows and the unresolved ones make 90 % (nothing is found to differ,
    but the precision cannot tell); otherwise ``"mixed"``: rows differ in substance, and the fractions
    say how.  A minority of rows (up to 10 %) can therefore never be hidden by a mean, and the
    fractions are always reported.

    Examples
    --------
    >>> from hypviz.attention import overall_verdict
    >>> overall_verdict({"close": 0.95, "different": 0.05})
    'close'
    >>> overall_verdict({"close": 0.5, "different": 0.5})
    'mixed'
    """
    f = {name: float(fractions.get(name, 0.0)) for name in ROW_VERDICTS}
    agree = f["identical"] + f["close"]
    if f["identical"] >= MAJORITY:
        return "identical"
    if agree >= MAJORITY:
        return "close"
    for name in ("uninformative", "different", "unresolved"):
        if f[name] >= MAJORITY:
            return name
    if agree + f["uninformative"] >= MAJORITY:
        return "close"
    if agree + f["uninformative"] + f["unresolved"] >= MAJORITY:
        return "unresolved"
    return "mixed"


def verdict_text(fractions: dict[str, float]) -> str:
    """:func:`overall_verdict` in words: ``"close (40% near uniform)"`` when near-uniform rows count towards *close*.

    Examples
    --------
    >>> from hypviz.attention import verdict_text
    >>> verdict_text({"close": 0.6, "uninformative": 0.4})
    'close (40% near uniform)'
    """
    v = overall_verdict(fractions)
    f = float(fractions.get("uninformative", 0.0))
    if v == "close" and f > 0.0:
        pct = round(100 * f)
        return f"close ({'<1' if pct == 0 else pct}% near uniform)"
    return v


def describe_fractions(fractions: dict[str, float]) -> str:
    """``"83% different, 17% uninformative"``: the nonzero fractions, largest first, in whole percent (``<1%`` for a few rows).

    Examples
    --------
    >>> from hypviz.attention import describe_fractions
    >>> describe_fractions({"different": 0.83, "uninformative": 0.17})
    '83% different, 17% uninformative'
    """
    parts = []
    for name, f in sorted(fractions.items(), key=lambda kv: (-kv[1], ROW_VERDICTS.index(kv[0]))):
        if f > 0:
            pct = round(100 * f)
            parts.append(f"{'<1' if pct == 0 else ('>99' if pct == 100 and f < 1 else pct)}% {name}")
    return ", ".join(parts) or "no rows"


def verdict_rule() -> dict[str, str]:
    """The rule of :func:`verdict` and :func:`overall_verdict` in words, with the thresholds (for ``metrics.json`` and
    the reports).

    Examples
    --------
    >>> from hypviz.attention import verdict_rule
    >>> rule = verdict_rule()
    >>> sorted(rule)
    ['close', 'different', 'identical', 'mixed', 'uninformative', 'unresolved']
    >>> rule["different"]
    'otherwise'
    """
    return {
        "identical": f"TV(P_a, P_b) = 0, or TV(P_a, P_b) <= the rounding level of the computation (tv_tolerance) on a row it "
                     f"resolves: tv_tolerance <= {RESOLVE} x {CLOSE_RATIO} x min(TV(P_a, uniform), TV(P_b, uniform))",
        "uninformative": f"both maps near uniform: TV(P, uniform) < {UNIFORM_TV} and M max_j P_j < {UNIFORM_PEAK:g}",
        "unresolved": f"the rounding level does not resolve the row "
                      f"(tv_tolerance > {RESOLVE} x {CLOSE_RATIO} x min(TV(P, uniform))) "
                      f"and TV(P_a, P_b) <= {CLOSE_RATIO} x min(TV(P, uniform)) + tv_tolerance: "
                      "rounding could make it identical, close or different; compute in a finer dtype",
        "close": f"TV(P_a, P_b) <= {CLOSE_RATIO} x min(TV(P_a, uniform), TV(P_b, uniform)) and each map gives the other's "
                 f"top set (its largest weight and the weights tied with it) >= {TOP1_WEIGHT} of its own largest weight, "
                 f"counted where that set carries >= {TOP_SHARE} of its map's excess over uniform; "
                 "a comparison whose other rows are uninformative is close too ('close (x% near uniform)')",
        "different": "otherwise",
        "mixed": f"a comparison (or head) whose rows differ in substance: no row verdict holds on {MAJORITY:.0%} of its rows "
                 "(identical counts as close; close with uninformative rows is close; those with unresolved rows unresolved); "
                 "the fractions are reported",
    }


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a comparison was computed, and why: read it as ``result.plan`` (``result.plan.reason``).

    ``path``: ``"one_product"`` (two kinds whose kernel shares one matrix product per row block),
    ``"two_products"`` (one product per map and block) or ``"given_maps"`` (:func:`hypviz.attention.compare_maps`);
    ``reason``: why that path, in words; ``block_rows``, ``n_blocks``: the row blocks; ``memory_budget``: the bytes
    of the row-block buffers; ``block_reason``: where ``block_rows`` came from; ``sampled_rows``: the query rows
    drawn per head (``rows=``), ``None`` when every row is computed; ``options``: the kernels' options the two kinds
    read, checked, by name (:meth:`hypviz.attention.CompareOptions.kernel_values`; empty for given maps).

    ``"fused"`` is ``"one_product"`` with each block's statistics in one compiled kernel
    (:mod:`hypviz.attention.comparison.fused_stats`); ``"dense_rows"`` compares the logs of the dense maps, row block by
    row block.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import compare
    >>> q, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> plan = compare(q, keys, "spatial", "distance", temperature=1.0).plan
    >>> plan.path, plan.block_rows, plan.n_blocks
    ('one_product', 4, 1)
    """

    path: str
    reason: str
    block_rows: int
    n_blocks: int
    memory_budget: int | None = None
    block_reason: str = ""
    sampled_rows: int | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        sampled = "" if self.sampled_rows is None else f", {self.sampled_rows} sampled rows per head"
        return f"{self.path}: {self.reason}; {self.n_blocks} blocks of {self.block_rows} rows ({self.block_reason}){sampled}"


def _mean(t: torch.Tensor | None) -> float | None:
    return None if t is None else float(t.double().mean())


@dataclasses.dataclass(repr=False)
class Comparison:
    r"""Row-by-row comparison of two attention maps :math:`P_a` and :math:`P_b` (``b`` is the reference), made by :func:`compare`.

    Per-row fields are tensors of shape ``(..., N)`` (the broadcast leading axes, then the query
    rows computed), on the inputs' device:

    * ``kl``: :math:`\mathrm{KL}(P_b \| P_a) = \sum_j P_{b,j} \log(P_{b,j} / P_{a,j})`;
    * ``tv``: the total variation :math:`\tfrac12 \sum_j |P_{b,j} - P_{a,j}|`;
    * ``tv_uniform_a``, ``tv_uniform_b``: :math:`\mathrm{TV}(P_a, U)` and :math:`\mathrm{TV}(P_b, U)`,
      :math:`U` the uniform row :math:`1/M`: the baseline, how far each map is from attending to
      nothing in particular;
    * ``logit_gap``: the spread :math:`\max_j g_j - \min_j g_j` of :math:`g = \log P_b - \log P_a`
      (twice its sup-distance from the nearest constant; for two softmax kinds
      :math:`(s_b - s_a)/\tau` up to a row constant);
    * ``top1``: whether both maps put their largest weight on the same key, *tie-aware*: one map's
      favourite counts when its logit in the other map is within that map's rounding bound of its
      maximum;
    * ``topk_overlap``: the fraction of one map's top-k keys that are (within rounding, the same
      way) among the other's top k, the larger of the two directions;
    * ``top1_weight``: :math:`\min(P_a[\arg\max P_b] / \max P_a,\ P_b[\arg\max P_a] / \max P_b)`,
      how much of its own largest weight each map gives the other's favourite key (1 when they
      agree, tie-aware);
    * ``peak_a``, ``peak_b``: :math:`M \max_j P_j`, the largest weight in units of the uniform
      weight :math:`1/M` (1 for the uniform row, :math:`M` for a one-hot row);
    * ``tv_tolerance``: the TV that rounding alone can produce between two maps equal in exact
      arithmetic (from the logits' magnitudes and the dtype: on one product only the rounding the two
      maps do not share, the shared product's cancelling; for given maps, from their storage dtype, and
      the precision and logit scale they were computed at where stated, :func:`hypviz.attention.compare_maps`),
      described in words by ``tolerance_basis``;
    * ``output_gap``, ``output_uniform_a``, ``output_uniform_b`` (only with ``values=``): the
      distance between the two attention outputs, and each output's distance from the output of
      the uniform row (see :func:`hypviz.attention.compare`);
    * ``spearman``: the Spearman rank correlation :math:`1 - 6 \sum_j d_j^2 / (M (M^2 - 1))` of the
      two rows' ranks (ties are ranked in the order the sort returns: not tie-aware), ``None`` when
      not computed.

    For two softmax kinds (``None`` when a map is ``"focused"``: no such bound holds for it):

    * ``delta``: the spread of the bias between the two kinds' logits,
      :math:`\Delta_i = |c_a - c_b|\, q_{t,i} (\max_j \kappa_{t,j} - \min_j \kappa_{t,j}) / \tau`, with
      :math:`c` each kind's coefficient of the key-norm bias :math:`q_t \kappa_t` (spatial 1,
      distance 0, lorentz 0: identities 4 and 5);
    * ``tv_bound``: :math:`\tanh(\Delta / 4)` (sharp, :func:`tv_supremum`);
    * ``kl_bound``: the exact supremum :func:`kl_supremum` of :math:`\Delta`;
      ``kl_bound_hoeffding``: :math:`\Delta^2 / 8`;
    * ``allowance``: a rigorous floating-point allowance :math:`\alpha` on the logit gap (0 when
      ``a == b``);
    * ``bound_met``: whether :math:`\mathrm{TV} \le \tanh((\Delta + \alpha)/4)` and
      :math:`\mathrm{KL} \le \sup\mathrm{KL}(\Delta + \alpha)`, each up to a slack of
      :math:`8 \varepsilon \log_2(M + 1)` (relative and absolute, :math:`\varepsilon` the dtype's
      machine epsilon) for the rounding of the statistics themselves.

    The set-up: ``a``, ``b``, ``k``, ``temperature`` (:math:`\tau`), ``topk`` (capped at
    :math:`M`), ``device`` (where it ran), ``dtype``, ``batch_shape``, ``n_queries`` (rows computed),
    ``n_keys``, ``dim`` (:math:`d`), ``block_rows``, ``n_blocks``, ``power`` and ``norm_scale``
    (``None`` without a focused map), ``n_queries_total`` and ``row_index`` (the sampled rows, or
    ``None`` when every row was computed), ``elapsed_s``, and ``plan`` (:class:`Plan`: the path taken and why).  The
    bound being met is a fact about the theory; whether the maps agree is :attr:`verdict`.

    Examples
    --------
    Made by :func:`compare` (or :func:`compare_maps`); one entry per query row:

    >>> from hypviz import data
    >>> from hypviz.attention import compare
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> res = compare(queries, keys, "spatial", "distance", temperature=1.0)
    >>> res.tv.shape, res.n_queries, res.n_keys
    (torch.Size([4]), 4, 6)
    >>> res.verdict
    'different'
    >>> bool((res.tv <= res.tv_bound).all())
    True
    """

    a: str
    b: str
    k: float | None
    temperature: float | None
    topk: int
    device: str
    dtype: str
    batch_shape: tuple[int, ...]
    n_queries: int
    n_keys: int
    dim: int | None
    block_rows: int
    n_blocks: int
    kl: torch.Tensor
    tv: torch.Tensor
    tv_uniform_a: torch.Tensor
    tv_uniform_b: torch.Tensor
    logit_gap: torch.Tensor
    top1: torch.Tensor
    topk_overlap: torch.Tensor
    top1_weight: torch.Tensor | None = None
    peak_a: torch.Tensor | None = None
    peak_b: torch.Tensor | None = None
    tv_tolerance: torch.Tensor | None = None
    output_gap: torch.Tensor | None = None
    output_uniform_a: torch.Tensor | None = None
    output_uniform_b: torch.Tensor | None = None
    output_metric: str | None = None
    spearman: torch.Tensor | None = None
    delta: torch.Tensor | None = None
    tv_bound: torch.Tensor | None = None
    kl_bound: torch.Tensor | None = None
    kl_bound_hoeffding: torch.Tensor | None = None
    allowance: torch.Tensor | None = None
    bound_met: torch.Tensor | None = None
    power: float | None = None
    norm_scale: float | None = None
    n_queries_total: int | None = None
    row_index: torch.Tensor | None = None
    tolerance_basis: str | None = None
    elapsed_s: float = 0.0
    plan: Plan | None = None

    # ---- summaries (Python floats) ----
    @property
    def bound_applies(self) -> bool:
        """Whether the softmax bound applies (both kinds are softmax kinds)."""
        return self.delta is not None

    @property
    def mean_tv(self) -> float:
        """Mean of ``tv`` over all rows (in float64)."""
        return float(self.tv.double().mean())

    @property
    def max_tv(self) -> float:
        """Largest ``tv`` of any row."""
        return float(self.tv.max())

    @property
    def mean_kl(self) -> float:
        """Mean of ``kl`` over all rows (in float64)."""
        return float(self.kl.double().mean())

    @property
    def max_kl(self) -> float:
        """Largest ``kl`` of any row."""
        return float(self.kl.max())

    @property
    def mean_tv_uniform_a(self) -> float:
        r"""Mean of ``tv_uniform_a`` (:math:`\mathrm{TV}(P_a, U)`, the baseline of map ``a``)."""
        return float(self.tv_uniform_a.double().mean())

    @property
    def mean_tv_uniform_b(self) -> float:
        r"""Mean of ``tv_uniform_b`` (:math:`\mathrm{TV}(P_b, U)`, the baseline of the reference)."""
        return float(self.tv_uniform_b.double().mean())

    @property
    def gap_ratio(self) -> float | None:
        r"""The gap next to the reference's baseline, :math:`\overline{\mathrm{TV}(P_a, P_b)} / \overline{\mathrm{TV}(P_b, U)}`
        (means over rows; ``None`` if the baseline is 0)."""
        base = self.mean_tv_uniform_b
        return None if base == 0.0 else self.mean_tv / base

    @property
    def row_verdict_codes(self) -> torch.Tensor:
        """Each row's :func:`verdict`, as codes into :data:`ROW_VERDICTS` (``int8``, the rows' shape)."""
        # every row-block loop fills these (assemble: "fav", "pa", "pb", "tol"); only the defaults leave them None
        assert self.peak_a is not None and self.peak_b is not None
        assert self.top1_weight is not None and self.tv_tolerance is not None
        return row_verdicts(
            self.tv, self.tv_uniform_a, self.tv_uniform_b, self.peak_a, self.peak_b, self.top1_weight, self.tv_tolerance
        )

    @property
    def row_verdicts(self) -> dict[str, float]:
        """Fraction of the rows with each row verdict,
        ``{"identical": ..., "close": ..., "different": ..., "uninformative": ...}``."""
        return _fractions(self.row_verdict_codes)

    @property
    def verdict(self) -> str:
        """The comparison's verdict, :func:`overall_verdict` of :attr:`row_verdicts` (a row verdict held by at least 90 %
        of the rows, else ``"mixed"``)."""
        return overall_verdict(self.row_verdicts)

    @property
    def verdict_text(self) -> str:
        """:attr:`verdict` in words (:func:`verdict_text`): ``"close (40% near uniform)"`` when near-uniform rows count
        towards it."""
        return verdict_text(self.row_verdicts)

    def head_verdicts(self) -> list[tuple[str, dict[str, float]]]:
        """Per head (the flattened leading axes): its verdict and its rows' fractions, by the same rule."""
        codes = self.row_verdict_codes.reshape(-1, self.n_queries)
        return [(overall_verdict(f), f) for f in (_fractions(c) for c in codes)]

    @property
    def has_outputs(self) -> bool:
        """Whether the attention outputs were compared (``values=``)."""
        return self.output_gap is not None

    @property
    def mean_output_gap(self) -> float | None:
        """Mean of ``output_gap`` (``None`` without ``values=``)."""
        return _mean(self.output_gap)

    @property
    def output_ratio(self) -> float | None:
        r"""The output gap next to its baseline, :math:`\overline{\mathrm{gap}} / \overline{d(o_b, o_U)}` (means over rows;
        ``None`` without values or when the baseline is 0)."""
        if self.output_gap is None:
            return None
        assert self.output_uniform_b is not None  # computed with output_gap (values=)
        base = float(self.output_uniform_b.double().mean())
        return None if base == 0.0 else float(self.output_gap.double().mean()) / base

    @property
    def max_delta(self) -> float | None:
        """Largest ``delta`` (``None`` when the bound does not apply)."""
        return None if self.delta is None else float(self.delta.max())

    @property
    def mean_delta(self) -> float | None:
        """Mean of ``delta`` (``None`` when the bound does not apply)."""
        return _mean(self.delta)

    @property
    def bound_met_fraction(self) -> float | None:
        """Fraction of rows that met the bound (``None`` when it does not apply)."""
        return _mean(self.bound_met)

    @property
    def all_bounds_met(self) -> bool | None:
        """Whether every row met the bound (``None`` when it does not apply)."""
        return None if self.bound_met is None else bool(self.bound_met.all())

    @property
    def top1_agreement(self) -> float:
        """Fraction of rows whose maps agree on their largest weight (tie-aware, ``top1``)."""
        return float(self.top1.double().mean())

    @property
    def topk_agreement(self) -> float:
        """Mean of ``topk_overlap`` over all rows."""
        return float(self.topk_overlap.double().mean())

    @property
    def rank_correlation(self) -> float | None:
        """Mean Spearman rank correlation of the rows (``None`` when not computed)."""
        return _mean(self.spearman)

    @property
    def n_rows(self) -> int:
        """Number of rows compared, over all leading axes."""
        return int(self.tv.numel())

    @property
    def sampled(self) -> bool:
        """Whether the statistics were computed on a uniform sample of the query rows (``rows=``)."""
        return self.row_index is not None

    def ci(self, field: str = "tv", level: float = 0.95) -> tuple[float, float, float]:
        r"""``(mean, low, high)``: the mean of a per-row field over all rows and its ``level`` confidence interval.

        For a sampled comparison (``rows=R`` of :math:`N` rows per head, the same rows for each of the
        :math:`H` heads, i.e. the flattened leading axes), the interval is ``mean`` :math:`\pm z\,\mathrm{se}`
        (:math:`z` the normal quantile of ``level``), the normal approximation for a sample
        stratified by head and drawn without replacement:

        .. math::

            \mathrm{se}^2 = \frac{1}{H^2} \sum_h \frac{s_h^2}{R}\,\frac{N - R}{N - 1},

        :math:`s_h^2` the sample variance of head :math:`h`.  When every row was computed the mean
        is exact and ``low = high = mean``.

        Raises
        ------
        ValueError
            When ``field`` is no per-row tensor here (``spearman`` when not computed, a scalar field);
            a name that is no field at all raises ``AttributeError``.
        """
        import statistics

        x = getattr(self, field)
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"ci: {field!r} is not a per-row statistic of this comparison")
        x = x.detach().double().reshape(-1, self.n_queries).cpu()
        mean = float(x.mean())
        if not self.sampled:
            return mean, mean, mean
        heads, r = x.shape
        assert self.n_queries_total is not None  # set with row_index (rows=)
        total = int(self.n_queries_total)
        fpc = (total - r) / (total - 1)
        se = math.sqrt(float(x.var(dim=1, unbiased=True).sum()) / r * fpc) / heads
        z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
        return mean, mean - z * se, mean + z * se

    def to_dict(self) -> dict[str, Any]:
        """The set-up, the summaries of the row statistics and the verdict as plain Python values, JSON-ready (no tensors)."""
        return {
            "a": self.a,
            "b": self.b,
            "k": self.k,
            "temperature": self.temperature,
            "power": self.power,
            "norm_scale": self.norm_scale,
            "device": self.device,
            "dtype": self.dtype,
            "batch_shape": list(self.batch_shape),
            "n_queries": self.n_queries,
            "n_keys": self.n_keys,
            "dim": self.dim,
            "block_rows": self.block_rows,
            "n_blocks": self.n_blocks,
            "plan": None if self.plan is None else dataclasses.asdict(self.plan),
            "verdict": self.verdict,
            "verdict_text": self.verdict_text,
            "tolerance_basis": self.tolerance_basis,
            "row_verdicts": self.row_verdicts,
            "mean_top1_weight": _mean(self.top1_weight),
            "mean_peak_a": _mean(self.peak_a),
            "mean_peak_b": _mean(self.peak_b),
            "max_tv_tolerance": None if self.tv_tolerance is None else float(self.tv_tolerance.max()),
            "mean_output_gap": self.mean_output_gap,
            "mean_output_uniform_a": _mean(self.output_uniform_a),
            "mean_output_uniform_b": _mean(self.output_uniform_b),
            "output_ratio": self.output_ratio,
            "output_metric": self.output_metric,
            "mean_tv": self.mean_tv,
            "max_tv": self.max_tv,
            "mean_tv_uniform_a": self.mean_tv_uniform_a,
            "mean_tv_uniform_b": self.mean_tv_uniform_b,
            "gap_ratio": self.gap_ratio,
            "mean_kl": self.mean_kl,
            "max_kl": self.max_kl,
            "top1_agreement": self.top1_agreement,
            "topk": self.topk,
            "topk_agreement": self.topk_agreement,
            "rank_correlation": self.rank_correlation,
            "bound_applies": self.bound_applies,
            "max_delta": self.max_delta,
            "bound_met_fraction": self.bound_met_fraction,
            "sampled_rows": self.n_queries if self.sampled else None,
            "n_queries_total": self.n_queries_total,
            "ci95": {
                name: list(self.ci(name)[1:])
                for name in ("tv", "kl", "tv_uniform_a", "tv_uniform_b", "top1", "topk_overlap")
            }
            if self.sampled
            else None,
            "elapsed_s": self.elapsed_s,
        }

    def summary(self, show_device: bool = True) -> str:
        """A readable summary, numbers rounded to 3 significant digits (no addresses, no timings).

        ``show_device=False`` leaves out where it ran, for text that must not depend on the machine.
        """
        lead = f"{self.batch_shape} x " if self.batch_shape else ""
        where = f" on {self.device}" if show_device else ""
        ratio = self.gap_ratio
        setup = "" if self.dim is None else f", d = {self.dim}, k = {_fmt(self.k)}, tau = {_fmt(self.temperature)}"
        lines = [
            f"Comparison {self.a!r} (P_a) vs {self.b!r} (P_b): {lead}{self.n_queries} queries x {self.n_keys} keys"
            f"{setup}, {self.dtype}{where}",
            f"  verdict: {self.verdict_text}  (rows: {describe_fractions(self.row_verdicts)})"
            + ("" if ratio is None else f"  gap / baseline {_fmt(ratio)}"),
        ]
        if self.tolerance_basis is not None and self.dim is None:  # given maps: the basis is an assumption to state
            lines.append(f"  rounding: {self.tolerance_basis}")
        if self.sampled:
            lo, hi = self.ci("tv")[1:]
            lines.append(
                f"  sampled {self.n_queries} of {self.n_queries_total} query rows per head (uniform): "
                f"mean TV 95% CI [{_fmt(lo)}, {_fmt(hi)}]"
            )
        lines += [
            f"  TV(P_a, P_b)   mean {_fmt(self.mean_tv)}  max {_fmt(self.max_tv)}",
            f"  baseline       TV(P_a, uniform) mean {_fmt(self.mean_tv_uniform_a)}  "
            f"TV(P_b, uniform) mean {_fmt(self.mean_tv_uniform_b)}",
            f"  KL(P_b || P_a) mean {_fmt(self.mean_kl)}  max {_fmt(self.max_kl)}",
            f"  top-1 agreement {_fmt(self.top1_agreement)}   top-{self.topk} overlap {_fmt(self.topk_agreement)}"
            + ("" if self.spearman is None else f"   Spearman {_fmt(self.rank_correlation)}"),
        ]
        if self.has_outputs:
            lines.append(
                f"  outputs ({self.output_metric}): gap mean {_fmt(self.mean_output_gap)}  "
                f"baseline d(o_b, o_uniform) mean {_fmt(_mean(self.output_uniform_b))}  ratio {_fmt(self.output_ratio)}"
            )
        if self.bound_met is None:
            lines.append("  softmax bound: not applicable "
                         "(it holds between two softmax maps whose logits differ by the key-norm bias)")
        else:
            met = int(self.bound_met.sum())
            lines.append(
                f"  theory check: TV <= tanh(Delta/4), KL <= sup_KL(Delta) on {met} of {self.n_rows} rows "
                f"(Delta max {_fmt(self.max_delta)})"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython
        p.text(self.summary())



#: The short names of the per-row statistics of a row-block loop, and the :class:`Comparison` field each fills.
STATISTICS: dict[str, str] = {"kl": "kl", "tv": "tv", "ua": "tv_uniform_a", "ub": "tv_uniform_b", "gap": "logit_gap",
                              "top1": "top1", "overlap": "topk_overlap", "fav": "top1_weight", "pa": "peak_a",
                              "pb": "peak_b", "tol": "tv_tolerance", "rho": "spearman", "og": "output_gap",
                              "oua": "output_uniform_a", "oub": "output_uniform_b"}


def assemble(stats: dict[str, torch.Tensor], shape: tuple[int, ...], home: Any, start: float, **setup: Any) -> Comparison:
    """A :class:`Comparison` from the per-row statistics of a row-block loop (by their :data:`STATISTICS` names,
    reshaped to ``shape`` on the device ``home``; ``top1`` as booleans) and the set-up fields; ``elapsed_s`` from ``start``.

    The one assembly of :func:`hypviz.attention.compare` and :func:`hypviz.attention.compare_maps`.
    """
    import time

    fields: dict[str, Any] = {STATISTICS[name]: t.to(home).reshape(shape)
                              for name, t in stats.items() if name in STATISTICS and t is not None}
    fields["top1"] = fields["top1"].bool()
    return Comparison(**setup, **fields, elapsed_s=time.perf_counter() - start)
