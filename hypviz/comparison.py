"""The result of :func:`hypviz.attention.compare` and how to read it: baselines and verdicts.

:class:`Comparison` holds the per-row statistics of two attention maps (``b`` the reference) and
their summaries; :func:`verdict` reads a comparison against the uniform row: *close*,
*different* or *uninformative*.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

__all__ = ["UNIFORM_TV", "CLOSE_RATIO", "VERDICTS", "verdict", "Comparison"]

UNIFORM_TV = 0.05
"""A row whose total variation from the uniform row is below this is *near uniform* (:func:`verdict`)."""
CLOSE_RATIO = 0.25
r"""Two maps are *close* when :math:`\mathrm{TV}(P_a, P_b) \le 0.25\,\mathrm{TV}(P_b, U)`, this ratio times the reference's baseline (:func:`verdict`)."""
#: The three readings :func:`verdict` gives.
VERDICTS: tuple[str, ...] = ("close", "different", "uninformative")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def verdict(tv: float, tv_uniform_a: float, tv_uniform_b: float) -> str:
    r"""Plain-language reading of a comparison, from its scale-free measures only; ``b`` is the reference.

    With :math:`U` the uniform row:

    * ``"uninformative"`` when both maps are near uniform, :math:`\mathrm{TV}(P_a, U) < 0.05` and
      :math:`\mathrm{TV}(P_b, U) < 0.05`: any two near-uniform maps have a small TV, so it says nothing;
    * else ``"close"`` when the gap is small next to the reference's own structure,
      :math:`\mathrm{TV}(P_a, P_b) \le 0.25\, \mathrm{TV}(P_b, U)`;
    * else ``"different"``.

    ``tv``, ``tv_uniform_a`` and ``tv_uniform_b`` are :math:`\mathrm{TV}(P_a, P_b)`,
    :math:`\mathrm{TV}(P_a, U)` and :math:`\mathrm{TV}(P_b, U)` (of one row, or means over rows).
    The thresholds are :data:`UNIFORM_TV` and :data:`CLOSE_RATIO`; an absolute TV alone is never read.
    """
    if tv_uniform_a < UNIFORM_TV and tv_uniform_b < UNIFORM_TV:
        return "uninformative"
    return "close" if tv <= CLOSE_RATIO * tv_uniform_b else "different"


def _row_verdicts(tv: torch.Tensor, ua: torch.Tensor, ub: torch.Tensor) -> torch.Tensor:
    """Per-row verdict codes (indices into :data:`VERDICTS`), same rule as :func:`verdict`."""
    code = torch.where(tv <= CLOSE_RATIO * ub, 0, 1)
    return torch.where((ua < UNIFORM_TV) & (ub < UNIFORM_TV), 2, code).to(torch.int8)


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
    ``None`` when every row was computed), ``elapsed_s``.  The bound being met is a fact about the
    theory; whether the maps agree is :attr:`verdict`.
    """

    a: str
    b: str
    k: float
    temperature: float
    topk: int
    device: str
    dtype: str
    batch_shape: tuple[int, ...]
    n_queries: int
    n_keys: int
    dim: int
    block_rows: int
    n_blocks: int
    kl: torch.Tensor
    tv: torch.Tensor
    tv_uniform_a: torch.Tensor
    tv_uniform_b: torch.Tensor
    logit_gap: torch.Tensor
    top1: torch.Tensor
    topk_overlap: torch.Tensor
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
    elapsed_s: float = 0.0

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
        r"""The gap next to the reference's baseline, :math:`\overline{\mathrm{TV}(P_a, P_b)} / \overline{\mathrm{TV}(P_b, U)}` (means over rows; ``None`` if the baseline is 0)."""
        base = self.mean_tv_uniform_b
        return None if base == 0.0 else self.mean_tv / base

    @property
    def verdict(self) -> str:
        """The :func:`verdict` of the row means of ``tv``, ``tv_uniform_a`` and ``tv_uniform_b`` (``"close"``, ``"different"`` or ``"uninformative"``)."""
        return verdict(self.mean_tv, self.mean_tv_uniform_a, self.mean_tv_uniform_b)

    @property
    def row_verdicts(self) -> dict[str, float]:
        """Fraction of the rows with each verdict, ``{"close": ..., "different": ..., "uninformative": ...}`` (:func:`verdict` row by row)."""
        codes = _row_verdicts(self.tv.double(), self.tv_uniform_a.double(), self.tv_uniform_b.double()).reshape(-1)
        return {name: float((codes == i).double().mean()) for i, name in enumerate(VERDICTS)}

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
            "verdict": self.verdict,
            "row_verdicts": self.row_verdicts,
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
        lines = [
            f"Comparison {self.a!r} (P_a) vs {self.b!r} (P_b): {lead}{self.n_queries} queries x {self.n_keys} keys, "
            f"d = {self.dim}, k = {_fmt(self.k)}, tau = {_fmt(self.temperature)}, {self.dtype}{where}",
            f"  verdict: {self.verdict}" + ("" if ratio is None else f"  (gap / baseline {_fmt(ratio)})"),
        ]
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
        if self.bound_met is None:
            lines.append(f"  softmax bound: not applicable ({'focused' if 'focused' in (self.a, self.b) else ''} map is no softmax)")
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

