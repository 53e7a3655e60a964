"""``compare()``: two attention maps compared row by row, streaming over row blocks.

Nothing of size ``N x M`` is ever allocated: each block of query rows gets its logits (for a
softmax kind against one that differs from it by the key-norm bias, from ONE matrix product, the
second map a rank-one update of the first; otherwise one product per map), and every statistic
of :class:`hypviz.attention.comparison.result.Comparison` is taken from the block before the next one is computed.
Public through :func:`hypviz.attention.compare`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from hypviz.attention.comparison.fused_stats import availability as fused_availability
from hypviz.attention.comparison.fused_stats import shared_rows
from hypviz.attention.comparison.options import CompareOptions, gather
from hypviz.attention.comparison.result import Comparison, Plan, assemble
from hypviz.attention.comparison.row_blocks import (
    _P_ROUTE_EPS,
    TILT_MAX_GAP,
    Block,
    agreement,
    baseline,
    block_stats,
    direct_stats,
    favourite,
    output_stats,
    rank_stats,
    spearman_rows,
    tv_uniform,
    weighted_sum,
)
from hypviz.attention.maps.checks import check_kind, checked_inputs, flatten_batch, resolve_device
from hypviz.attention.maps.kernels import (
    DenseRows,
    Operands,
    SharedLogits,
    check_logit_range,
    kernel_for,
    rows_for,
    softmax_rows_,
)
from hypviz.base import kinds
from hypviz.base.bounds import kl_supremum, tv_supremum
from hypviz.base.kinds import Kind
from hypviz.base.messages import env_limit
from hypviz.lorentz import lift

__all__ = ["compare", "plan_compare", "run_compare", "ComparePlan", "PATHS"]

ArrayLike = Any

_DEFAULT_BUDGET = 256 * 2**20  # compare: working memory for the row-block buffers
_MIN_BLOCK_ROWS = 32  # compare on CPU: rows per block the cache-sized default may not go below (budget permitting)
_SPEARMAN_MAX_KEYS = 4096  # compare: rank correlations by default only up to this many keys
_L2_FALLBACK = 2**20  # per-core L2 bytes assumed where the CPU's caches cannot be read
_MIN_BLOCK_ELEMENTS = 2**20  # compare on CPU: elements per buffer at least, so that torch's fixed cost per call stays small


_FUSED_MIN_LOGITS = 2**24  # compare: the fused statistics (compiled at first use) from this many logits per map on
# compare, fused on the CPU: rows per block at most (the product of few rows re-reads all keys per block: N = M = 65,536,
# d = 64, float32, one thread: 32 rows 4.0 ns of CPU per logit, 512 rows 1.84, 8,192 rows 1.48)
_FUSED_MAX_ROWS = 1024
# compare, fused on the CPU: the kernel takes each row's first pass segment by segment, the segment's keys a 32nd of
# the per-core L2 (its s, w and e_b about a tenth): 16,384 float32 keys on a 2 MiB L2 (64 rows of section 5's
# product, M = 10^6, float32, one thread, Xeon with AVX-512, load average 2-3: 1.49 ns of CPU per logit at 16,384 keys,
# 1.50 at 4,096, 1.51 at 65,536, 1.75 in one segment; M = 65,536: 0.92, 0.93, 0.96)
_FUSED_SEGMENT_L2_PARTS = 32


def _fused_segment(itemsize: int) -> int:
    """Keys per segment of the fused kernel's row passes: a 32nd of :func:`_l2_bytes` (at least 1,024)."""
    return max(1024, _l2_bytes() // (_FUSED_SEGMENT_L2_PARTS * itemsize))

#: The paths :func:`run_compare` can take (:class:`hypviz.attention.comparison.result.Plan`'s ``path``): ``"fused"`` is
#: ``"one_product"`` with each block's statistics in one compiled kernel (:mod:`hypviz.attention.comparison.fused_stats`).
PATHS: tuple[str, ...] = ("fused", "one_product", "two_products", "dense_rows")


@dataclasses.dataclass(frozen=True)
class ComparePlan:
    """What :func:`run_compare` runs, made by :func:`plan_compare`: the checked inputs and set-up, and :attr:`plan`.

    ``q``, ``keys``: the checked points flattened to ``(H, n, d + 1)`` and ``(H, M, d + 1)`` (the sampled rows
    only, float32 for half-precision inputs); ``values``: the checked values or ``None``; ``batch``: the broadcast
    leading axes; ``k``, ``temperature``, ``options`` (checked by the kinds' kernels), ``device``, ``topk`` (capped
    at ``M``), ``spearman``; ``half``: the half-precision dtype of the inputs or ``None``; ``home``: the inputs'
    device; ``n_total``, ``row_index``: the query rows and the sampled ones; ``plan``: the path, the row blocks
    and why (:class:`hypviz.attention.comparison.result.Plan`).

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import plan_compare, run_compare
    >>> q, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> plan = plan_compare(q, keys, "spatial", "distance", temperature=1.0)
    >>> plan.plan.path
    'one_product'
    >>> run_compare(plan.with_path("two_products")).plan.reason
    'chosen by the caller (with_path)'
    """

    a: Kind
    b: Kind
    q: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor | None
    batch: torch.Size
    k: float
    temperature: float
    options: dict[str, Any]
    device: torch.device
    topk: int
    spearman: bool
    half: str | None
    home: torch.device
    n_total: int
    row_index: torch.Tensor | None
    progress: bool | None
    plan: Plan

    def with_path(self, path: str) -> ComparePlan:
        """This plan on the path ``path`` (one of :data:`PATHS`), its reason saying the caller chose it.

        Raises
        ------
        ValueError
            For another path, or ``"one_product"`` for two kinds whose kernel does not share one product.
        """
        if path not in PATHS:
            raise ValueError(f"path must be one of {', '.join(map(repr, PATHS))}, got {path!r}")
        kernel = kernel_for(self.a)
        if path != "dense_rows" and not (kernel.has_operands() and kernel_for(self.b).has_operands()):
            raise ValueError(f"path must be 'dense_rows' for {self.a.name!r} and {self.b.name!r} (a kernel declares no "
                             f"operands), got {path!r}")
        if path in ("one_product", "fused") and not (kernel is kernel_for(self.b) and kernel.shares_product(self.a, self.b)):
            raise ValueError(f"path must be 'two_products' or 'dense_rows' for {self.a.name!r} and {self.b.name!r} "
                             f"(their kernels share no product), got {path!r}")
        if path == "fused":
            ok, why = fused_availability(self.q.dtype, self.device)
            if not ok:
                raise ValueError(f"path must be one of 'one_product', 'two_products', 'dense_rows' here ({why}), got 'fused'")
        chosen = dataclasses.replace(self.plan, path=path, reason="chosen by the caller (with_path)")
        return dataclasses.replace(self, plan=chosen)


@functools.lru_cache(maxsize=1)
def _l2_bytes() -> int:
    """The CPU's per-core L2 cache in bytes, read from ``/sys/devices/system/cpu/cpu0/cache`` (1 MiB where unreadable)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() != "2" or (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit() and int(digits) > 0:
            return int(digits) * scale
    return _L2_FALLBACK


def _block_rows_for(m: int, itemsize: int, budget: int | None, dev: torch.device) -> int:
    """Query rows per block of :func:`compare`: three ``rows x M`` buffers (two logit blocks and one scratch).

    With a ``budget`` (bytes), as many rows as three buffers fit in it.  Otherwise, on CUDA, a quarter
    of the free device memory (at least 256 MiB, at most 8 GiB); on the CPU, one buffer the size of
    the L2 caches of the threads that share each pass (``torch.get_num_threads()`` times the per-core
    L2 of :func:`_l2_bytes`, or ``HYPVIZ_BLOCK_BYTES`` when set), so that the statistics' passes over a
    block stay in cache where the caches are large, and at least 2^20 elements (about 50 torch calls
    per block each cost a fixed overhead beside their work), but never fewer than 32 rows while 256 MiB
    allow: with fewer rows the matrix product re-reads all keys for every few queries (spatial vs
    distance, N = 1,024, M = 65,536, d = 64, float32, one thread: 8 rows per block took 1.27x the CPU
    time of 32 rows; 16 to 64 rows within 7 %).
    """
    if budget is None:
        budget = _DEFAULT_BUDGET
        if dev.type == "cuda":
            budget = max(budget, min(8 * 2**30, torch.cuda.mem_get_info(dev)[0] // 4))
        else:
            cache = env_limit("HYPVIZ_BLOCK_BYTES", 0, "bytes", error=ValueError) or max(
                _l2_bytes() * torch.get_num_threads(), _MIN_BLOCK_ELEMENTS * itemsize)
            rows_cap = max(rows_for(cache, m, itemsize), _MIN_BLOCK_ROWS)
            budget = min(budget, 3 * m * itemsize * rows_cap)
    return max(1, budget // (3 * m * itemsize))


def _key_sqnorms(keys: torch.Tensor) -> torch.Tensor:
    """``|kappa_s|^2`` of every key in float64, ``(..., M)``: one pass per block of keys, no float64 copy of all."""
    return torch.cat([torch.linalg.vector_norm(c, dim=-1, dtype=torch.float64)
                      for c in torch.split(keys[..., 1:], 65536, dim=-2)], dim=-1).square()


def _difference_rounding(sh: SharedLogits, alpha: float, keys: torch.Tensor, k: float, nk: torch.Tensor) -> torch.Tensor:
    r"""Per row (float64), the rounding of the logits :math:`\hat S - \alpha\, c\, w^\top` of one kind that a second kind of
    the same product does not share: what can make two maps of one product differ where exact arithmetic does not.

    Both kinds' logits hold the same computed :math:`\hat S`, so its rounding (:math:`\sqrt d` times the size of the
    product's terms) shifts both maps alike and cancels in :math:`\log P_a - \log P_b`.  What is left, per logit, is
    the rounding of :math:`\alpha\, c_i w_j` and of the subtraction (to first order in :math:`u = \varepsilon/2`):

    .. math::

        r_i = |\alpha|\, |c_i| \bigl(\delta w + 5u \max_j w_j\bigr) + u\, \|A_i\|_2 \max_j \|B_j\|_2,

    :math:`2u` for :math:`c = q_t / \tau`, :math:`2u` for the products :math:`\alpha\, c_i w_j`, :math:`u` for the
    subtraction of a result at most :math:`|\hat S_{ij}| + |\alpha c_i| w_j`, :math:`|S_{ij}| \le \|A_i\|_2 \|B_j\|_2`;
    :math:`\delta w = \max_j |w_j - w^{(64)}_j| + (d + 6)\,\varepsilon_{64} \max_j w_j` the measured error of the
    computed :math:`w` against its float64 value from ``nk`` (:func:`_key_sqnorms`), plus that value's own worst
    case.  0 for :math:`\alpha = 0` (that map's logits are :math:`\hat S` itself).
    """
    if alpha == 0.0 or sh.w.shape[-1] == 0:
        return torch.zeros(sh.c.shape, dtype=torch.float64, device=sh.c.device)
    u = 0.5 * torch.finfo(sh.A.dtype).eps
    w = sh.w.double()
    w64 = nk / (keys[..., 0].double() + math.sqrt(k))
    w_max = w.amax(dim=-1, keepdim=True)
    dw = (w - w64).abs().amax(dim=-1, keepdim=True) + (keys.shape[-1] + 5) * torch.finfo(torch.float64).eps * w_max
    # torch.linalg's functions are typed as returning Any
    size: torch.Tensor = torch.linalg.vector_norm(sh.A, dim=-1, dtype=torch.float64) * torch.linalg.vector_norm(
        sh.B, dim=-1, dtype=torch.float64).amax(dim=-1, keepdim=True)
    return abs(alpha) * sh.c.double().abs() * (dw + 5.0 * u * w_max) + u * size


def _two_rows(s: torch.Tensor, c: torch.Tensor, w: torch.Tensor, alpha_a: float, alpha_b: float,
              spare: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both kinds' logit rows from ``S`` (in ``s``): ``S - alpha c w^T``, the one with ``alpha = 0`` left as ``S``."""
    if alpha_a == 0.0:
        return s, torch.addr(s, c, w, alpha=-alpha_b, out=spare)
    if alpha_b == 0.0:
        return torch.addr(s, c, w, alpha=-alpha_a, out=spare), s
    lb = torch.addr(s, c, w, alpha=-alpha_b, out=spare)
    return s.addr_(c, w, alpha=-alpha_a), lb


def _shared_blocks(
    sh: SharedLogits,
    alphas: tuple[float, float],
    n: int,
    rows: int,
    topk: int,
    rank: bool,
    tol: tuple[torch.Tensor, torch.Tensor],
    out: dict[str, torch.Tensor],
    top1: torch.Tensor,
    bufs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    dev: torch.device,
    bar: Any,
) -> None:
    """Every statistic of a comparison of two ``"bilinear"`` kinds, one product per row block.

    Per block: ``S`` by one matrix product, each map by a rank-one update ``S - alpha c w^T`` (none for ``alpha = 0``),
    top-k of both, both
    maps by in-place softmaxes and their uniform baselines from the weights (rows near uniform
    recomputed without cancellation), then the tilted KL and TV from ``x = log P_a - log P_b`` (up to
    a constant) ``= (alpha_b - alpha_a) c (w - E_{P_b} w)``, another rank-one form.  Three ``rows x M`` buffers;
    nothing of size ``N x M``.
    """
    buf_s, buf_d, tmp = bufs
    alpha_a, alpha_b = alphas
    sign = alpha_b - alpha_a  # x = log P_a - log P_b + const = sign * c * w
    heads = sh.A.shape[0]
    for h in range(heads):
        b_t = sh.B[h].to(dev).transpose(0, 1)
        w = sh.w[h].to(dev)
        w_span = w.amax() - w.amin()
        for i in range(0, n, rows):
            j = min(i + rows, n)
            r = j - i
            sl = (h, slice(i, j))
            c = sh.c[h, i:j].to(dev)
            s = torch.mm(sh.A[h, i:j].to(dev), b_t, out=buf_s[:r])
            la, lb = _two_rows(s, c, w, alpha_a, alpha_b, buf_d[:r])
            ta, tb = tol[0][sl], tol[1][sl]
            ranked = rank_stats(la, lb, Block(out, top1, sl, topk, ta, tb), rank, defer=True)
            assert ranked is not None  # defer=True: the function that finishes the top sets, and the top indices
            finish_top, top_a, top_b = ranked
            out["gap"][sl] = c * w_span if abs(sign) == 1.0 else abs(sign) * c * w_span  # spread of log P_a - log P_b
            # the baselines (the other map's logits are consumed here), then P_b in place
            ua, peak_a, _ = baseline(la, ta, tmp[:r], top_a)
            ub, peak_b, t = baseline(lb, tb, tmp[:r], top_b)
            finish_top(peak_a, peak_b)  # the top sets' excesses from the peaks: no pass over the rows
            pb = lb if t is not None else softmax_rows_(lb)
            out["ua"][sl], out["ub"][sl] = ua, ub
            out["pa"][sl], out["pb"][sl] = peak_a, peak_b
            wb = pb @ w  # E_{P_b}[w]
            x = torch.addr((-sign * c * wb).unsqueeze(-1), c, w, alpha=sign, out=tmp[:r])  # centred under P_b
            scratch = la  # consumed above
            s1 = weighted_sum(pb, x, scratch)  # E_{P_b}[x] (zero up to rounding; cancels it below)
            wide = out["gap"][sl] > TILT_MAX_GAP
            any_wide = bool(wide.any())
            if any_wide:
                x.masked_fill_(wide.unsqueeze(-1), 0.0)
            e = x.expm1_()  # e^x - 1
            m1 = weighted_sum(pb, e, scratch)  # E_{P_b}[e^x] - 1
            out["kl"][sl] = (torch.log1p(m1) - s1).clamp_min_(0.0)
            # sum_j P_b,j |e_j - m1| = m1 (1 + t) - 2 sum_j P_b,j min(e_j, m1), t = sum_j P_b,j: one clamped pass
            t = pb.sum(dim=-1) if t is None else t
            below = weighted_sum(pb, e.clamp_max_(m1.unsqueeze(-1)), scratch)
            out["tv"][sl] = (0.5 * m1 * (1.0 + t) - below).clamp_min_(0.0) / (1.0 + m1)
            if any_wide:
                idx = wide.nonzero().squeeze(-1)
                kl_w, tv_w = direct_stats(sh.rows(h, i + idx, alpha_a, dev), sh.rows(h, i + idx, alpha_b, dev))
                out["kl"][h, i + idx] = kl_w
                out["tv"][h, i + idx] = tv_w
            if bar is not None:
                bar.update(1)


def _fused_blocks(
    sh: SharedLogits,
    alphas: tuple[float, float],
    n: int,
    rows: int,
    topk: int,
    rank: bool,
    tol: tuple[torch.Tensor, torch.Tensor],
    out: dict[str, torch.Tensor],
    top1: torch.Tensor,
    bufs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    dev: torch.device,
    bar: Any,
) -> None:
    """The statistics of :func:`_shared_blocks` with each block's elementwise work in one fused kernel.

    Per block: ``S`` by one matrix product, then :func:`hypviz.attention.comparison.fused_stats.shared_rows` (both maps'
    top k, baselines, peaks, KL and TV in a few passes over each row while it is in cache), then the
    ``O(rows x k)`` agreement (:func:`hypviz.attention.comparison.row_blocks.agreement`).  The few rows the kernel leaves
    (a logit gap beyond ``TILT_MAX_GAP``; near-uniform rows whose centred logits are that wide; top sets past the
    top k) are recomputed and taken by the eager formulas.
    """
    buf_s, buf_d, _ = bufs
    alpha_a, alpha_b = alphas
    sign = alpha_b - alpha_a
    small = _P_ROUTE_EPS * torch.finfo(buf_s.dtype).eps
    dtype = buf_s.dtype
    segment = _fused_segment(buf_s.element_size())
    for h in range(sh.A.shape[0]):
        b_t = sh.B[h].to(dev).transpose(0, 1)
        w = sh.w[h].to(dev).contiguous()
        w_span = w.amax() - w.amin()
        for i in range(0, n, rows):
            j = min(i + rows, n)
            r = j - i
            sl = (h, slice(i, j))
            c = sh.c[h, i:j].to(dev)
            s = torch.mm(sh.A[h, i:j].to(dev), b_t, out=buf_s[:r])
            gap = abs(sign) * c * w_span  # spread of log P_a - log P_b
            out["gap"][sl] = gap
            ta, tb = tol[0][sl], tol[1][sl]
            res = shared_rows(s, c, w, alphas, ta, tb, gap, topk, small, TILT_MAX_GAP, segment, _l2_bytes())

            def whole(idx: torch.Tensor | None, s: torch.Tensor = s, c: torch.Tensor = c,
                      w: torch.Tensor = w) -> tuple[torch.Tensor, torch.Tensor]:
                x, cx = (s, c) if idx is None else (s.index_select(0, idx), c.index_select(0, idx))
                xa, xb = (x.clone() if alpha == 0.0 else torch.addr(x, cx, w, alpha=-alpha) for alpha in alphas)
                return xa, xb

            va, vb, a_at_ib, b_at_ia = (res[x].to(dtype) for x in ("va", "vb", "a_at_ib", "b_at_ia"))
            finish_top = agreement((va, res["ia"]), (vb, res["ib"]), (a_at_ib, b_at_ia), s.shape[-1], whole,
                                   Block(out, top1, sl, topk, ta, tb), defer=True)
            assert finish_top is not None  # defer=True returns it
            flags = res["flags"]
            for bit, side in ((2, "a"), (4, "b")):  # near-uniform rows too wide for the kernel: tv_uniform's own route
                idx = (flags & bit).nonzero().squeeze(-1)
                if len(idx):
                    l_rows = whole(idx)[0 if side == "a" else 1]
                    ua, pa = tv_uniform(l_rows, torch.empty_like(l_rows))
                    res["u" + side][idx], res["p" + side][idx] = ua.double(), pa.double()
            finish_top(res["pa"].to(dtype), res["pb"].to(dtype))
            for name in ("ua", "ub", "pa", "pb", "kl", "tv"):
                out[name][sl] = res[name]
            idx = (flags & 1).nonzero().squeeze(-1)
            if len(idx):  # a logit gap too wide for the tilted forms: log-softmax directly
                kl_w, tv_w = direct_stats(*whole(idx))
                out["kl"][h, i + idx] = kl_w
                out["tv"][h, i + idx] = tv_w
            if rank:
                la, lb = _two_rows(s, c, w, alpha_a, alpha_b, buf_d[:r])
                out["rho"][sl] = spearman_rows(la, lb)
            if bar is not None:
                bar.update(1)


def compare(
    queries: ArrayLike,
    keys: ArrayLike,
    a: str = "spatial",
    b: str = "distance",
    *,
    values: ArrayLike | None = None,
    options: CompareOptions | None = None,
    **settings: Any,
) -> Comparison:
    r"""Compare the attention maps of two kinds row by row, streaming over blocks of query rows.

    :math:`P_a` and :math:`P_b` are the maps of :func:`attention_map` (softmax kinds at temperature
    :math:`\tau`; each kind with the options its kernel reads); ``b`` is the reference.  Each
    query row gets :math:`\mathrm{KL}(P_b \| P_a)`, the total variation, each map's TV from the
    uniform row :math:`U` (the baseline every gap must be read against), tie-aware top-1 and top-k
    agreement, a Spearman rank correlation and, for two softmax kinds, the bound's :math:`\Delta_i`
    and whether the row met it (see :class:`Comparison`); :attr:`Comparison.verdict` reads the
    result as ``"close"``, ``"different"`` or ``"uninformative"`` (:func:`verdict`).  For two
    softmax kinds whose logits carry the key-norm bias :math:`q_t \kappa_t / \tau` with coefficients
    :math:`c_a, c_b` (spatial 1, distance and lorentz 0),

    .. math::

        \Delta_i = |c_a - c_b|\, \frac{q_{t,i} (\max_j \kappa_{t,j} - \min_j \kappa_{t,j})}{\tau}, \qquad
        \mathrm{TV}_i \le \tanh\frac{\Delta_i}{4}, \qquad
        \mathrm{KL}_i(P_b \| P_a) \le \log\frac{e^{\Delta_i} - 1}{\Delta_i} - 1 + \frac{\Delta_i}{e^{\Delta_i} - 1}
        \le \frac{\Delta_i^2}{8} .

    Parameters
    ----------
    queries, keys : array or tensor, shapes (..., N, d + 1) and (..., M, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked); leading axes broadcast.
        Tensors that require grad are detached: the statistics are not differentiable.
    a, b : str
        Kinds of :data:`KINDS`; ``b`` is the reference.
    values : array or tensor, shape (..., M, d_v + 1), optional
        Value points (one per key): the two maps' outputs, their Lorentzian centroids, are compared too
        (``output_gap``, against the uniform row's output).
    options : CompareOptions, optional
        The settings (:class:`hypviz.attention.CompareOptions`, which lists them: ``k``, ``temperature``, ``topk``,
        ``spearman``, ``rows``, ``seed``, ``rf_seed``, ``heads_axis``, ``device``, ``block_rows``, ``memory_budget``,
        ``progress``, ``kernel_options``).
    **settings
        Any of those settings by name, in place of the same field of ``options``, or an option a registered kernel
        declares (``power``, ``norm_scale``, ``features``, a kernel's own): checked by the kernel of each kind that
        reads it, ignored by a kind that does not.

    Returns
    -------
    Comparison
        Per-row tensors of shape ``(..., n)`` (``n`` the query rows computed) on the inputs'
        device, the set-up and the summaries; ``result.plan.options`` the kernels' options the two kinds read.

    Raises
    ------
    ValueError
        For an unknown kind, points or shapes :func:`scores` refuses, a setting out of its range (one line naming
        it), a kernel's option its kernel refuses; a temperature so small that the logits overflow the dtype (the
        message names the smallest usable one); statistics that come out non-finite.  ``TypeError`` when the dtypes
        differ, or for a keyword that is neither a setting nor a registered kernel's option (the line names both).

    Notes
    -----
    *The plan.*  ``compare(...)`` is ``run_compare(plan_compare(...))``: the plan holds the checked inputs, the
    options and the row blocks, and the path with its reason (``result.plan``).  Two kinds whose kernel
    shares one product (:meth:`hypviz.attention.maps.kernels.Kernel.shares_product`: ``"spatial"`` against
    ``"distance"`` or ``"lorentz"``) take ``"one_product"``: with :math:`S_{ij} = q_{s,i} \cdot \kappa_{s,j} / \tau`,
    :math:`c_i = q_{t,i} / \tau` and :math:`w_j = \kappa_{t,j} - \sqrt{k} = \|\kappa_{s,j}\|^2 / (\kappa_{t,j} + \sqrt{k})`
    (no cancellation), identities 1 and 4 give

    .. math::

        -\frac{\|q_i - \kappa_j\|_L^2}{2\tau} = S_{ij} - c_i w_j + \Bigl(\frac{k}{\tau} - c_i \sqrt{k}\Bigr),

    so the distance map is the softmax of the rank-one update :math:`S - c\, w^\top` (the row constant does
    not change a softmax), and :math:`\log P_a - \log P_b = \pm c_i w_j` up to a row constant: the logit gap
    is :math:`\Delta_i` in exact arithmetic.  Every other pair takes ``"two_products"``: each kind's own
    operands and finishing (:class:`hypviz.attention.maps.kernels.Operands`), one product per map and block.

    *The fused path.*  On the CPU, from :math:`2^{24}` logits per map, ``"one_product"`` becomes ``"fused"``
    where a C++ compiler is found: each block's statistics in one kernel compiled at first use
    (:mod:`hypviz.attention.comparison.fused_stats`: a few passes over each row while it is in cache, the sums in double),
    the same formulas as the eager statistics, which stay the reference (``plan.with_path("one_product")``).

    *The statistics.*  With :math:`x_j = \log P_{a,j} - \log P_{b,j}` centred under :math:`P_b`,

    .. math::

        \mathrm{KL}(P_b \| P_a) = \log \mathbb{E}_{P_b}[e^{x}] - \mathbb{E}_{P_b}[x], \qquad
        \mathrm{TV}(P_a, P_b) = \frac{\mathbb{E}_{P_b}\bigl|e^{x} - \mathbb{E}_{P_b}[e^{x}]\bigr|}{2\,\mathbb{E}_{P_b}[e^{x}]},

    by ``expm1`` and ``log1p``: accurate to the rounding of the logits, not of the log-probabilities
    (rows whose logit gap exceeds 30 use the direct log-softmax formulas).  The baselines, with
    :math:`u = l - \operatorname{mean}_j l_j`,

    .. math::

        \mathrm{TV}(P, U) = \frac{\operatorname{mean}_j \bigl|e^{u_j} - \operatorname{mean}_l e^{u_l}\bigr|}
                                {2 \operatorname{mean}_l e^{u_l}},

    likewise (by the softmax for rows whose logits span more than 30; in the one-product path, by the
    computed weights on rows whose logits' rounding bound exceeds :math:`4\varepsilon`).

    *Ties and bounds.*  Top-1 and top-k count a key as shared when its logit in the other map is within
    that map's rounding bound of the cut: keys tied in exact arithmetic are never told apart by rounding.
    :math:`\Delta_i` is computed in float64 from the spatial parts,
    :math:`\max_j \kappa_{t,j} - \min_j \kappa_{t,j} = (n_{\max} - n_{\min}) / (\sqrt{n_{\max} + k} + \sqrt{n_{\min} + k})`
    with :math:`n = \|\kappa_s\|^2`.  The working memory is three ``block_rows x M`` buffers (plus the
    Spearman ranks'); nothing of size ``N x M`` is allocated.

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import compare
    >>> res = compare(queries, keys, "spatial", "distance", temperature=1.0)
    >>> res.verdict, res.tv.shape
    ('different', torch.Size([4]))
    >>> round(float(res.tv.mean()), 2), round(float(res.tv_uniform_b.mean()), 2)
    (0.06, 0.13)
    >>> bool(res.all_bounds_met)  # TV <= tanh(Delta / 4) on every row
    True
    >>> from hypviz.attention import CompareOptions
    >>> opts = CompareOptions(temperature=1.0, topk=2)  # one record of settings, for many calls
    >>> compare(queries, keys, "focused", "distance", options=opts, power=3.0).plan.options
    {'power': 3.0, 'norm_scale': 1.0}
    """
    return run_compare(_plan(queries, keys, a, b, values, gather(options, settings, "compare")))


def plan_compare(
    queries: ArrayLike,
    keys: ArrayLike,
    a: str = "spatial",
    b: str = "distance",
    *,
    values: ArrayLike | None = None,
    options: CompareOptions | None = None,
    **settings: Any,
) -> ComparePlan:
    r"""The plan of :func:`compare`: its arguments checked, the temperature, the kernels' options, the path and the row blocks.

    Takes exactly the arguments of :func:`compare` (and checks them the same way); ``compare(...)`` is
    ``run_compare(plan_compare(...))``.  The returned :class:`ComparePlan` says which path will run and why
    (``plan.plan.path``, ``plan.plan.reason``; the result keeps it as ``result.plan``) and can be changed
    before it runs: :meth:`ComparePlan.with_path` takes the other path on the same inputs.

    Parameters
    ----------
    queries, keys, a, b, values, options, **settings
        As :func:`compare`.

    Returns
    -------
    ComparePlan
        The checked inputs, the settings and :attr:`ComparePlan.plan`.

    Raises
    ------
    ValueError
        As :func:`compare` for every argument; ``TypeError`` when the dtypes differ or for an unknown keyword.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import plan_compare, run_compare
    >>> q, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> plan = plan_compare(q, keys, "spatial", "distance", temperature=1.0)
    >>> plan.plan.path
    'one_product'
    >>> run_compare(plan.with_path("two_products")).plan.reason
    'chosen by the caller (with_path)'
    """
    return _plan(queries, keys, a, b, values, gather(options, settings, "plan_compare"))


def _plan(queries: ArrayLike, keys: ArrayLike, a: Any, b: Any, values: ArrayLike | None, opts: CompareOptions) -> ComparePlan:
    """The plan of :func:`compare` from its checked settings: the kinds, the points (half precision computed in
    float32), the temperature, the kernels' options, the rows sampled, then the path and the row blocks (:func:`_route`)."""
    kind_a = kinds.get(check_kind(a, "a", kinds.comparable()))
    kind_b = kinds.get(check_kind(b, "b", kinds.comparable()))
    q, keys, values, k, batch = checked_inputs(queries, keys, k=opts.k, values=values, heads_axis=opts.heads_axis,
                                               detach=True)
    half = str(q.dtype).replace("torch.", "") if q.dtype in (torch.float16, torch.bfloat16) else None
    if half is not None:
        # half precision resolves logits to ~1e-3 and overflows the statistics' sums: compute in float32,
        # from the spatial parts (time recomputed, so that the points lie on float32's hyperboloid)
        q, keys = lift(q[..., 1:].float(), k=k), lift(keys[..., 1:].float(), k=k)
        values = None if values is None else lift(values[..., 1:].float(), k=k)
    temperature = math.sqrt(q.shape[-1] - 1) if opts.temperature is None else opts.temperature
    kernel_values = opts.kernel_values(kind_a, kind_b)
    n_total, row_index = q.shape[-2], None
    if opts.rows is not None and opts.rows < n_total:
        gen = torch.Generator().manual_seed(opts.seed)
        row_index = torch.randperm(n_total, generator=gen)[: opts.rows].sort().values
        q = q.index_select(-2, row_index.to(q.device))
    m = keys.shape[-2]
    spearman = m <= _SPEARMAN_MAX_KEYS if opts.spearman is None else opts.spearman
    device = resolve_device(opts.device)  # a torch.device already: the options were checked
    route = _route(kind_a, kind_b, q, m, math.prod(batch), spearman, device, opts)
    route = dataclasses.replace(route, sampled_rows=None if row_index is None else q.shape[-2], options=kernel_values)
    return ComparePlan(
        a=kind_a, b=kind_b, q=flatten_batch(q, batch), keys=flatten_batch(keys, batch), values=values, batch=batch, k=k,
        temperature=temperature, options=kernel_values, device=device, topk=min(opts.topk, m), spearman=spearman,
        half=half, home=q.device, n_total=n_total, row_index=row_index, progress=opts.progress, plan=route)


def _route(kind_a: Kind, kind_b: Kind, q: torch.Tensor, m: int, heads: int, spearman: bool, dev: torch.device,
           opts: CompareOptions) -> Plan:
    """The path of two kinds' comparison and why (the kernels decide: :meth:`Kernel.shares_product`, operands
    declared or not; the fused kernel from :data:`_FUSED_MIN_LOGITS` where it runs), and its row blocks."""
    n, itemsize = q.shape[-2], q.element_size()
    block_rows, block_reason = opts.block_rows, "block_rows given"
    if block_rows is None:
        block_rows = _block_rows_for(m, itemsize, opts.memory_budget, dev)
        block_reason = ("from memory_budget" if opts.memory_budget is not None else
                        "a quarter of the free device memory" if dev.type == "cuda" else
                        "cache-sized on the CPU (the L2 of the threads sharing each pass)")
    rows = min(block_rows, n)
    a, b = kind_a.name, kind_b.name
    kernel = kernel_for(kind_a)
    bare = [kd.kernel for kd in (kind_a, kind_b) if not kernel_for(kd).has_operands()]
    if bare:
        path, reason = "dense_rows", (f"the kernel {bare[0]!r} declares no operands: the log of each kind's dense map, "
                                      "row block by row block (a first pass measures the maps' rounding level)")
    elif kernel is kernel_for(kind_b) and kernel.shares_product(kind_a, kind_b):
        path, reason = "one_product", (f"{a!r} and {b!r} share one product per row block (their kernel {kind_a.kernel!r}: "
                                       "the second map's logits are a rank-one update of the first's)")
        if n * m < _FUSED_MIN_LOGITS:
            reason += f"; the statistics eager (fewer than 2^{_FUSED_MIN_LOGITS.bit_length() - 1} logits per map)"
        else:
            fused, why = fused_availability(q.dtype, dev)
            if fused:
                path, reason = "fused", reason + (f"; each block's statistics in one fused kernel ({why}), its rows in "
                                                  f"segments of {_fused_segment(itemsize):,} keys (a "
                                                  f"{_FUSED_SEGMENT_L2_PARTS}nd of the {_l2_bytes() // 1024:,} KiB L2)")
                if opts.block_rows is None and dev.type == "cpu":  # the kernel keeps each row in cache: rows for the product
                    budget = _DEFAULT_BUDGET if opts.memory_budget is None else opts.memory_budget
                    rows = min(n, _FUSED_MAX_ROWS, max(1, budget // ((1 + spearman) * m * itemsize)))
                    block_reason = (f"the product's rows for the fused kernel: {1 + spearman} buffer(s) in "
                                    f"{'memory_budget' if opts.memory_budget else '256 MiB'}, at most {_FUSED_MAX_ROWS} rows")
            else:
                reason += f"; the statistics eager ({why})"
    elif kernel is kernel_for(kind_b):
        path, reason = "two_products", (f"{a!r} and {b!r} do not share one product (their kernel {kind_a.kernel!r} says "
                                        "so): one product per map and block")
    else:
        path, reason = "two_products", (f"{a!r} and {b!r} have different kernels ({kind_a.kernel!r}, {kind_b.kernel!r}): "
                                        "one product per map and block")
    return Plan(path=path, reason=reason, block_rows=rows, n_blocks=heads * math.ceil(n / rows),
                memory_budget=((1 + spearman) if path == "fused" else 3) * rows * m * itemsize, block_reason=block_reason)


def run_compare(plan: ComparePlan) -> Comparison:
    """Run a :class:`ComparePlan` (:func:`plan_compare`): the steps its plan names, then the result.

    The logits of its path (:func:`_logits`: one product shared by the two kinds, or each kind's operands or dense
    rows), the statistics of its row blocks (:func:`_row_statistics`), the outputs' second pass when it holds
    ``values``, the softmax bound where it applies (:func:`_softmax_bound`) and the assembly (:func:`_result`).
    ``compare(...)`` is ``run_compare(plan_compare(...))``; the result's ``plan`` is ``plan.plan``.

    Parameters
    ----------
    plan : ComparePlan
        Made by :func:`plan_compare` (or changed by :meth:`ComparePlan.with_path`).

    Returns
    -------
    Comparison
        As :func:`compare`.

    Raises
    ------
    TypeError
        For anything but a :class:`ComparePlan`.
    ValueError
        For a temperature at which the logits overflow the dtype, or statistics that come out non-finite (as :func:`compare`).

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import plan_compare, run_compare
    >>> q, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> plan = plan_compare(q, keys, "spatial", "distance", temperature=1.0)
    >>> plan.plan.path
    'one_product'
    >>> run_compare(plan.with_path("two_products")).plan.reason
    'chosen by the caller (with_path)'
    """
    if not isinstance(plan, ComparePlan):
        raise TypeError(f"plan must be a ComparePlan (from plan_compare), got {type(plan).__name__}")
    start = time.perf_counter()
    logits = _logits(plan)
    out = _row_statistics(plan, logits)
    outputs = {} if plan.values is None else _compare_outputs(plan, logits, plan.values)
    _check_finite(plan, logits, out)
    bounds = _softmax_bound(plan, logits, out) if kinds.bound_applies(plan.a.name, plan.b.name) else {}
    return _result(plan, logits, out, outputs, bounds, start)


@dataclasses.dataclass
class _Logits:
    """How a plan's logits are made, and each map's per-row rounding: ``shared`` (the one product and each kind's
    ``alpha``) or ``pair`` (each kind's :class:`Operands`, or :class:`DenseRows`); ``err`` the rounding bounds,
    ``rounding`` the levels that decide *identical*, ``largest()`` a bound on the logits, ``key_sqnorms`` the keys'
    ``|kappa_s|^2`` in float64 where computed."""

    err: tuple[torch.Tensor, torch.Tensor]
    rounding: tuple[torch.Tensor, torch.Tensor]
    largest: Callable[[], float]
    shared: tuple[SharedLogits, tuple[float, float]] | None = None
    pair: tuple[Operands, Operands] | None = None
    key_sqnorms: torch.Tensor | None = None


def _logits(plan: ComparePlan) -> _Logits:
    """The logits of the plan's path, the temperature refused where they overflow the dtype (:func:`check_logit_range`)."""
    kind_a, kind_b, q, keys, k, temperature = plan.a, plan.b, plan.q, plan.keys, plan.k, plan.temperature
    dtype = q.dtype
    if plan.plan.path in ("one_product", "fused"):
        kernel = kernel_for(kind_a)
        sh, alphas = kernel.shared(kind_a, kind_b, q, keys, k=k, temperature=temperature)
        big = float(max(sh.largest(alpha).max() for alpha in alphas)) if q.numel() else 0.0

        def shared_at(temperature: float) -> float:  # the bound at another temperature, in float64
            at = kernel.shared(kind_a, kind_b, q.double(), keys.double(), k=k, temperature=temperature)[0]
            return float(max(at.largest(alpha).max() for alpha in alphas))

        check_logit_range(big, dtype, temperature, shared_at)
        nk = _key_sqnorms(keys)
        # the rounding the two maps do not share: S's own cancels in log P_a - log P_b
        rounding = (_difference_rounding(sh, alphas[0], keys, k, nk).to(dtype),
                    _difference_rounding(sh, alphas[1], keys, k, nk).to(dtype))
        return _Logits(err=(sh.err(alphas[0]), sh.err(alphas[1])), rounding=rounding, largest=lambda: big,
                       shared=(sh, alphas), key_sqnorms=nk)
    dense = plan.plan.path == "dense_rows"

    def made(kind: Kind) -> Operands:
        if dense:
            return DenseRows(kernel_for(kind), kind, q, keys, k=k, temperature=temperature, opts=plan.options)
        return kernel_for(kind).operands(kind, q, keys, k=k, temperature=temperature, opts=plan.options)

    ka, kb = made(kind_a), made(kind_b)

    def largest() -> float:
        if dense:  # logs of the maps' weights: no kernel's rule applies
            return max(ka.largest(), kb.largest())
        return max(kernel_for(kind_a).largest_logit(kind_a, ka, dtype), kernel_for(kind_b).largest_logit(kind_b, kb, dtype))

    def largest_at(temperature: float) -> float:  # the bound at another temperature, from float64 operands
        q64, keys64 = q.double(), keys.double()
        return max((kernel_for(kind).largest_logit(kind, kernel_for(kind).operands(
            kind, q64, keys64, k=k, temperature=temperature, opts=plan.options), dtype)
                    for kind in (kind_a, kind_b) if not dense), default=0.0)

    check_logit_range(largest(), dtype, temperature, largest_at)
    return _Logits(err=(ka.err, kb.err), rounding=(ka.rounding, kb.rounding), largest=largest, pair=(ka, kb))


def _row_statistics(plan: ComparePlan, logits: _Logits) -> dict[str, torch.Tensor]:
    """Every per-row statistic of the plan's row blocks, by its short name (``top1`` and ``fav`` among them), from
    three ``block_rows x M`` buffers (one, or two for Spearman, on the fused path), with a progress bar for long runs."""
    q, dev, rows, rank = plan.q, plan.device, plan.plan.block_rows, plan.spearman
    heads, n, m, dtype = q.shape[0], q.shape[-2], plan.keys.shape[-2], q.dtype
    names = ("kl", "tv", "gap", "overlap", "ra", "ea", "rb", "eb", "ua", "ub", "pa", "pb") + (("rho",) if rank else ())
    out = {name: torch.empty(heads, n, dtype=dtype, device=dev) for name in names}
    top1 = torch.empty(heads, n, dtype=torch.bool, device=dev)
    fused = plan.plan.path == "fused"  # one buffer (two for Spearman)
    bufs = (torch.empty(rows, m, dtype=dtype, device=dev),
            torch.empty(rows if not fused or rank else 0, m, dtype=dtype, device=dev),
            torch.empty(rows if not fused else 0, m, dtype=dtype, device=dev))
    tol = ((2.0 * logits.err[0]).to(dev), (2.0 * logits.err[1]).to(dev))
    show = plan.progress
    if show is None:
        show = plan.plan.n_blocks >= 64 and n * m * heads >= 2**28 and sys.stderr.isatty()
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=plan.plan.n_blocks, desc=f"compare {plan.a.name} vs {plan.b.name}", unit="block", leave=False,
                   file=sys.stderr)
    try:
        if logits.shared is not None:
            blocks = _fused_blocks if fused else _shared_blocks
            blocks(logits.shared[0], logits.shared[1], n, rows, plan.topk, rank, tol, out, top1, bufs, dev, bar)
        elif logits.pair is not None:
            _pair_blocks(logits.pair[0], logits.pair[1], n, rows, plan.topk, rank, tol, out, top1, bufs, dev, bar)
    finally:
        if bar is not None:
            bar.close()
    out["top1"] = top1
    out["fav"] = favourite(out["ra"], out["ea"], out["ua"], out["rb"], out["eb"], out["ub"])
    return out


def _pair_blocks(ka: Operands, kb: Operands, n: int, rows: int, topk: int, rank: bool, tol: tuple[torch.Tensor, torch.Tensor],
                 out: dict[str, torch.Tensor], top1: torch.Tensor, bufs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                 dev: torch.device, bar: Any) -> None:
    """Every statistic of two maps with their own operands (or dense rows): one product per map and row block."""
    buf_a, buf_b, buf_c = bufs
    for h in range(ka.A.shape[0]):
        ba_t = ka.B[h].to(dev).transpose(0, 1)
        bb_t = kb.B[h].to(dev).transpose(0, 1)
        for i in range(0, n, rows):
            j = min(i + rows, n)
            qa, qb = ka.A[h, i:j].to(dev), kb.A[h, i:j].to(dev)
            la = ka.logits(qa, ba_t, buf_a[: j - i])
            lb = kb.logits(qb, bb_t, buf_b[: j - i])
            sl = (h, slice(i, j))
            rank_stats(la, lb, Block(out, top1, sl, topk, tol[0][sl], tol[1][sl]), rank)
            out["ua"][sl], out["pa"][sl] = tv_uniform(la, buf_c[: j - i])
            out["ub"][sl], out["pb"][sl] = tv_uniform(lb, buf_c[: j - i])
            block_stats(la, lb, out, sl, (ka, qa, ba_t), (kb, qb, bb_t), buf_c[: j - i])
            if bar is not None:
                bar.update(1)


def _check_finite(plan: ComparePlan, logits: _Logits, out: dict[str, torch.Tensor]) -> None:
    """Refuse statistics that came out non-finite, naming them and the size of the logits."""
    bad = [name for name, t in (("TV", out["tv"]), ("KL", out["kl"]), ("uniform baselines", out["ua"]))
           if not bool(torch.isfinite(t).all())]
    if bad or not bool(torch.isfinite(out["ub"]).all()):
        dtype = plan.q.dtype
        raise ValueError(
            f"compare {plan.a.name} vs {plan.b.name}: the {', '.join(bad) or 'uniform baselines'} came out non-finite in "
            f"{dtype}: the logits (largest |s / tau| about {logits.largest():.3g}) are beyond what {dtype} resolves at "
            f"k = {plan.k:g}, tau = {plan.temperature:g}; use float64, a larger temperature or a smaller k"
        )


def _softmax_bound(plan: ComparePlan, logits: _Logits, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The softmax bound of two ``"bilinear"`` kinds, per row: :math:`\\Delta_i`, the TV and KL bounds, the allowance
    for rounding and whether the row met it (in float64 from the spatial parts: :math:`\\kappa_{t,\\max} -
    \\kappa_{t,\\min} = (n_{\\max} - n_{\\min}) / (t_{\\max} + t_{\\min})`, :math:`n = \\|\\kappa_s\\|^2`, without the
    cancellation of two rounded time coordinates at large ``k`` in float32)."""
    q, keys, k, temperature, dtype = plan.q, plan.keys, plan.k, plan.temperature, plan.q.dtype
    shape, m = (*plan.batch, q.shape[-2]), keys.shape[-2]
    nk = _key_sqnorms(keys) if logits.key_sqnorms is None else logits.key_sqnorms
    n_max, n_min = nk.amax(dim=-1), nk.amin(dim=-1)
    spread = ((n_max - n_min) / ((n_max + k).sqrt() + (n_min + k).sqrt())).unsqueeze(-1)
    q_t = (q[..., 1:].double().square().sum(dim=-1) + k).sqrt()
    bias_a, bias_b = plan.a.bias or 0.0, plan.b.bias or 0.0  # both set: the bound applies
    delta = (abs(bias_a - bias_b) * q_t * spread / temperature).to(dtype)
    eps = torch.finfo(dtype).eps
    err_a, err_b = logits.err
    allowance = torch.zeros_like(delta) if plan.a.name == plan.b.name else 2.0 * (err_a + err_b) + 4.0 * eps * delta
    d_eff = (delta + allowance).to(plan.home).reshape(shape)
    ulps = 8.0 * eps * math.log2(m + 1)
    kl, tv = out["kl"].to(plan.home).reshape(shape), out["tv"].to(plan.home).reshape(shape)
    met = (tv <= torch.tanh(d_eff / 4) * (1 + ulps) + ulps) & (kl <= kl_supremum(d_eff) * (1 + ulps) + ulps * (d_eff + eps))
    dl = delta.to(dtype).to(plan.home).reshape(shape)
    return dict(delta=dl, tv_bound=tv_supremum(dl), kl_bound=kl_supremum(dl), kl_bound_hoeffding=dl.square() / 8,
                allowance=allowance.to(dtype).to(plan.home).reshape(shape), bound_met=met)


def _result(plan: ComparePlan, logits: _Logits, out: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor],
            bounds: dict[str, torch.Tensor], start: float) -> Comparison:
    """The :class:`Comparison`: the statistics, the TV tolerance at the logits' rounding level, the set-up and the bounds.

    TV at the rounding level of the logits: identical maps in exact arithmetic whose logits are off by at most
    ``rnd`` give a logit gap of at most ``2 (rnd_a + rnd_b)``, hence TV <= tanh(gap / 4) <= (rnd_a + rnd_b) / 2;
    ``rnd`` is, on two products, the level each product's rounding actually reaches (:func:`logit_rounding`), not its
    worst case; on one product, only the rounding the two maps do not share (:func:`_difference_rounding`); plus the
    statistics' own.
    """
    q, dtype, n, m, dev = plan.q, plan.q.dtype, plan.q.shape[-2], plan.keys.shape[-2], plan.device
    eps = torch.finfo(dtype).eps
    rnd_a, rnd_b = logits.rounding  # the realistic levels; logits.err, the worst case, does not decide identical
    tv_tol = 0.5 * (rnd_a + rnd_b).to(dev) + 16.0 * eps * math.log2(m + 1) * torch.maximum(out["ua"], out["ub"])
    stats = {**out, "tol": tv_tol,
             **{short: outputs[name] for short, name in (("og", "output_gap"), ("oua", "output_uniform_a"),
                                                          ("oub", "output_uniform_b")) if name in outputs}}
    name = str(dtype).replace("torch.", "")
    return assemble(
        stats, (*plan.batch, n), plan.home, start,
        a=plan.a.name, b=plan.b.name, k=plan.k, temperature=plan.temperature, topk=plan.topk, device=str(plan.device),
        dtype=name + ("" if plan.half is None else f" (from {plan.half} inputs)"), batch_shape=tuple(plan.batch),
        n_queries=n, n_keys=m, dim=q.shape[-1] - 1, block_rows=plan.plan.block_rows, n_blocks=plan.plan.n_blocks,
        power=plan.options.get("power"), norm_scale=plan.options.get("norm_scale"), n_queries_total=plan.n_total,
        row_index=plan.row_index,
        tolerance_basis=(f"TV within the rounding of the {name} rank-one update c w^T and subtraction "
                         "(the shared product's rounding cancels; tv_tolerance)" if logits.shared is not None else
                         f"TV within the rounding of {name} logits of the size computed (tv_tolerance)"),
        output_metric="geodesic distance between Lorentzian centroids" if plan.values is not None else None,
        plan=plan.plan,
        **bounds,
    )


def _compare_outputs(plan: ComparePlan, logits: _Logits, values: torch.Tensor) -> dict[str, torch.Tensor]:
    """The outputs' gap and baselines (:func:`hypviz.attention.comparison.row_blocks.output_stats`), a second pass over
    the row blocks.

    Each block's two maps are recomputed from their logits (the one-product operands, or the two kinds' own) and
    both aggregate the same values by the Lorentzian centroid.
    """
    values, dev, rows, n = flatten_batch(values, plan.batch), plan.device, plan.plan.block_rows, plan.q.shape[-2]
    heads = values.shape[0]
    res = {name: torch.empty(heads, n, dtype=values.dtype, device=dev)
           for name in ("output_gap", "output_uniform_a", "output_uniform_b")}
    for h in range(heads):
        vh = values[h].to(dev)
        vu = vh.mean(dim=0)
        for i in range(0, n, rows):
            j = min(i + rows, n)
            if logits.shared is not None:
                sh, (alpha_a, alpha_b) = logits.shared
                idx = torch.arange(i, j)
                la, lb = sh.rows(h, idx, alpha_a, dev), sh.rows(h, idx, alpha_b, dev)
            elif logits.pair is not None:
                la, lb = (
                    ops.logits(ops.A[h, i:j].to(dev), ops.B[h].to(dev).transpose(0, 1),
                               torch.empty(j - i, ops.B.shape[-2], dtype=values.dtype, device=dev))
                    for ops in logits.pair
                )
            gap, ua, ub = output_stats(torch.softmax(la, dim=-1), torch.softmax(lb, dim=-1), vh, vu, k=plan.k)
            res["output_gap"][h, i:j], res["output_uniform_a"][h, i:j], res["output_uniform_b"][h, i:j] = gap, ua, ub
    return res
