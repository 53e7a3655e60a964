"""The statistics of one row block of a comparison, from its two logit blocks.

Private kernels of :func:`hypviz.attention.compare` (:mod:`hypviz.attention.comparison.streamed_compare`): each reads a
``rows x M`` block of logits (and may overwrite it, as documented), and writes per-row results.
KL and TV use the tilted form (``expm1``/``log1p``: accurate to the rounding of the logits), the
uniform baselines are computed without cancellation, top-k agreement is tie-aware.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from hypviz.attention.comparison.result import TOP_SHARE
from hypviz.attention.maps.kernels import Operands, softmax_rows_
from hypviz.lorentz import dist, lift

_P_ROUTE_EPS = 8.0  # baselines from the softmax weights where the logits' rounding bound (tol / 2) exceeds 4 eps
TILT_MAX_GAP = 30.0  # rows with a wider logit gap use the direct log-softmax formulas


def direct_stats(la: torch.Tensor, lb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(P_b || P_a) and TV from log-softmax (used for rows with a very wide logit gap)."""
    lpa, lpb = torch.log_softmax(la, dim=-1), torch.log_softmax(lb, dim=-1)
    pb = lpb.exp()
    kl = (pb * (lpb - lpa)).sum(dim=-1).clamp_min_(0.0)
    tv = 0.5 * (pb - lpa.exp()).abs().sum(dim=-1)
    return kl, tv


def _topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(x, k, dim=-1)`` of a contiguous ``(rows, M)`` block, in one cheap pass for large ``M``.

    The row is cut into chunks; the ``k`` largest entries lie in the ``k`` chunks with the largest
    maxima (each chunk holding one of them has a maximum at least the ``k``-th largest value), so
    only those chunks (and a short tail) are searched.  The values are exactly torch's; among tied
    keys the index chosen may differ, which the tie-aware statistics do not see.
    """
    r, m = x.shape
    chunk = max(64, int(math.sqrt(m)))
    n_chunks = m // chunk
    if n_chunks < 4 * k or not x.is_contiguous():
        return torch.topk(x, k, dim=-1)
    main = n_chunks * chunk
    _, best = torch.topk(x[:, :main].view(r, n_chunks, chunk).amax(dim=-1), k, dim=-1)  # (rows, k)
    idx = (best.unsqueeze(-1) * chunk + torch.arange(chunk, device=x.device)).reshape(r, k * chunk)
    if main < m:
        idx = torch.cat([idx, torch.arange(main, m, device=x.device).expand(r, m - main)], dim=-1)
    v, j = torch.topk(torch.gather(x, -1, idx), k, dim=-1)
    return v, torch.gather(idx, -1, j)


def weighted_sum(p: torch.Tensor, x: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """``sum_j p_ij x_ij`` per row through a scratch buffer (faster on the CPU than ``vecdot``)."""
    return torch.mul(p, x, out=tmp).sum(dim=-1)


def _tv_uniform_p(
    p: torch.Tensor, tmp: torch.Tensor, top: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``TV(P, U) = 1/2 sum_j |p_j - mean p| / sum_j p_j``, the peak ``M max_j p_j / sum_j p_j`` and ``sum_j p_j`` per
    row, from computed softmax weights.

    Normalising by the computed sum cancels the rounding of the softmax's own normaliser (a factor
    common to the row); what is left is each weight's own rounding, at most ``~2 eps`` on ``TV``
    (:func:`baseline` takes the rows where that is more than the logits' own rounding).  ``top``: the
    index of each row's largest logit (``(rows, 1)``), where the largest weight is read, not searched.
    """
    total = p.sum(dim=-1)
    largest = p.amax(dim=-1) if top is None else torch.gather(p, -1, top).squeeze(-1)
    peak = largest * p.shape[-1] / total
    mean = (total / p.shape[-1]).unsqueeze(-1)
    return 0.5 * torch.sub(p, mean, out=tmp).abs_().sum(dim=-1) / total, peak, total


def baseline(
    logits: torch.Tensor, tol: torch.Tensor, tmp: torch.Tensor, top: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``TV(softmax(logits), U)`` and the peak ``M max_j P_j`` per row, and, when ``logits`` now holds the softmax
    (computed in place), its row sums (else None).

    From the weights (:func:`_tv_uniform_p`), whose rounding moves ``TV`` by up to ``~2 eps``, on
    the rows where the logits' own rounding (``tol / 2`` per row, about as much on ``TV``) is larger;
    the other rows (logits near 0: maps near uniform) from the logits by centred ``expm1``
    (:func:`tv_uniform`, no cancellation).  ``top``: each row's largest logit's index, if known.
    """
    small = (tol < _P_ROUTE_EPS * torch.finfo(logits.dtype).eps).nonzero().squeeze(-1)
    if len(small) == logits.shape[0]:
        tv, peak = tv_uniform(logits, tmp)
        return tv, peak, None
    exact = tv_uniform(logits.index_select(0, small), tmp[: len(small)]) if len(small) else None
    tv, peak, total = _tv_uniform_p(softmax_rows_(logits), tmp, top)
    if exact is not None:
        tv[small], peak[small] = exact
    return tv, peak, total


Rows = Callable[[torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]


@dataclasses.dataclass
class Block:
    """Where the statistics of one row block go: ``out`` (per-row tensors by short name) and ``top1``, at the block's
    rows ``sl`` (``(head, slice)``); ``topk`` the k of the top-k agreement; ``tol_a``, ``tol_b`` each map's per-row
    rounding tolerance on the block's rows (ties within it count as shared)."""

    out: dict[str, torch.Tensor]
    top1: torch.Tensor
    sl: tuple[int, slice]
    topk: int
    tol_a: torch.Tensor
    tol_b: torch.Tensor


def rank_stats(la: torch.Tensor, lb: torch.Tensor, block: Block, rank: bool,
               defer: bool = False) -> tuple[Callable[[torch.Tensor, torch.Tensor], None], torch.Tensor, torch.Tensor] | None:
    """Tie-aware top-1 / top-k agreement, the top sets (:func:`top_set`) and Spearman of one row block; reads ``la``,
    ``lb`` only.

    The top k of each map (:func:`_topk_rows`) and each map's logits at the other's, then :func:`agreement`.
    With ``defer``, the top sets' excesses are finished by the returned function, called with both maps'
    peaks ``M max_j P_j`` (:func:`baseline`) once the block's baselines are known, after ``la`` and ``lb``
    may have been overwritten; returned with the index of each map's largest logit per row (``(rows, 1)``).
    """
    va, ia = _topk_rows(la, block.topk)
    vb, ib = _topk_rows(lb, block.topk)

    def whole(idx: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        return (la, lb) if idx is None else (la.index_select(0, idx), lb.index_select(0, idx))

    finish = agreement((va, ia), (vb, ib), (torch.gather(la, -1, ib), torch.gather(lb, -1, ia)), la.shape[-1], whole,
                       block, defer)
    if rank:
        block.out["rho"][block.sl] = spearman_rows(la, lb)
    return None if finish is None else (finish, ia[:, :1], ib[:, :1])


def spearman_rows(la: torch.Tensor, lb: torch.Tensor) -> torch.Tensor:
    r"""Spearman's rank correlation of each row of ``la`` and ``lb``: :math:`1 - 6 \sum_j d_j^2 / (M (M^2 - 1))`."""
    m = la.shape[-1]
    ra = la.argsort(dim=-1).argsort(dim=-1).to(la.dtype)
    rb = lb.argsort(dim=-1).argsort(dim=-1).to(la.dtype)
    ssd = ra.sub_(rb).square_().sum(dim=-1)
    return 1.0 - 6.0 * ssd / (m * (m * m - 1.0)) if m > 1 else torch.ones_like(ssd)


def agreement(
    top_a: tuple[torch.Tensor, torch.Tensor], top_b: tuple[torch.Tensor, torch.Tensor], at: tuple[torch.Tensor, torch.Tensor],
    m: int, whole: Rows, block: Block, defer: bool,
) -> Callable[[torch.Tensor, torch.Tensor], None] | None:
    """Tie-aware top-k agreement and the top sets of one row block, from each map's top k and its logits at the other's.

    A key of one map's top-k counts as shared when its log-weight in the other map is at least that
    map's k-th largest minus ``tol`` (the rounding bound of the difference of two computed logits);
    the overlap is the larger of the two directions' counts over ``k``.  Keys tied in exact arithmetic
    (symmetric embeddings) are therefore never told apart by rounding noise, and the work is
    ``O(rows x k)``.  ``top_a = (va, ia)`` (``top_b``): map a's (b's) top k, descending; ``at = (a_at_ib, b_at_ia)``:
    map a's logits at b's top keys, and the converse; ``whole(idx)``: both maps' logit rows ``idx`` of the block
    (``None``: all), read only for the rare rows whose top set extends past the top k.  With ``defer`` returns
    the function finishing the top sets' excesses from both maps' peaks (:func:`rank_stats`).
    """
    (va, ia), (vb, ib), (a_at_ib, b_at_ia) = top_a, top_b, at
    out, top1, sl = block.out, block.top1, block.sl
    ta, tb = block.tol_a.unsqueeze(-1), block.tol_b.unsqueeze(-1)
    b_in_a = a_at_ib >= va[:, -1:] - ta  # (rows, k)
    a_in_b = b_at_ia >= vb[:, -1:] - tb
    both = torch.maximum(b_in_a.sum(dim=-1), a_in_b.sum(dim=-1))
    out["overlap"][sl] = both.to(va.dtype) / block.topk

    def swapped(idx: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        xa, xb = whole(idx)
        return xb, xa

    ra, ea, sa = top_set(va, ia, vb, b_at_ia, ta, tb, m, whole, defer=defer)
    rb, eb, sb = top_set(vb, ib, va, a_at_ib, tb, ta, m, swapped, defer=defer)
    top1[sl] = sa | sb
    out["ra"][sl], out["rb"][sl] = ra, rb
    if not defer:
        assert isinstance(ea, torch.Tensor) and isinstance(eb, torch.Tensor)  # top_set finishes them without defer
        out["ea"][sl], out["eb"][sl] = ea, eb
        return None
    assert isinstance(ea, TopExcess) and isinstance(eb, TopExcess)  # with defer they wait for the peaks

    def finish(peak_a: torch.Tensor, peak_b: torch.Tensor) -> None:
        out["ea"][sl] = ea.finish(peak_a / m)
        out["eb"][sl] = eb.finish(peak_b / m)

    return finish


class TopExcess:
    r"""A top set's excess over uniform on the rows whose set lies within the top k, from the weight of the largest key.

    On those rows :math:`P_j = e^{v_j - v_1} P_{\max}` for the top-k logits :math:`v_1 \ge \dots \ge v_k`,
    so :math:`\sum_{j \in T} (P_j - 1/M)_+` takes ``O(rows x k)`` once :math:`P_{\max}` is known (from
    the baseline's peak, or :math:`e^{v_1 - \operatorname{logsumexp}_j l_j}`).  ``excess`` holds the
    other rows' values (0, or computed from the whole row).
    """

    def __init__(self, va: torch.Tensor, inside: torch.Tensor, rows: torch.Tensor, excess: torch.Tensor, m: int):
        self.va, self.inside, self.rows, self.excess, self.m = va, inside, rows, excess, m

    def finish(self, p_max: torch.Tensor) -> torch.Tensor:
        """The excess per row, given ``P_max`` per row of the block."""
        if len(self.rows):
            va, inside = self.va.index_select(0, self.rows), self.inside.index_select(0, self.rows)
            pj = torch.exp(va - va[:, :1]).mul_(p_max.index_select(0, self.rows).unsqueeze(-1))
            self.excess[self.rows] = (pj.sub_(1.0 / self.m).clamp_min_(0.0) * inside).sum(dim=-1)
        return self.excess


def top_set(
    va: torch.Tensor, ia: torch.Tensor, vb: torch.Tensor, lbt: torch.Tensor, ta: torch.Tensor, tb: torch.Tensor, m: int,
    whole: Rows, defer: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | TopExcess, torch.Tensor]:
    r"""The top set :math:`T_a` of map ``a`` (logits within ``ta`` of its largest) read in both maps, per row of a block.

    Returns the ratio :math:`\operatorname{mean}_{j \in T_a} \min(1, e^{l_{b,j} - \max l_b + t_b})` (the weight map
    ``b`` gives ``a``'s top set, next to its own largest weight, tie-aware: ``a``'s weights on its top
    set are its largest within rounding), ``a``'s excess over uniform on the set,
    :math:`\sum_{j \in T_a} (P_{a,j} - 1/M)_+` (computed only on the rows whose ratio is below 1: it
    decides whether the set counts, :func:`hypviz.attention.verdict`; 0 elsewhere), and whether ``b``
    has its own largest weight (within rounding) on the set.  ``va, ia``: the top-k of map ``a``; ``vb``:
    that of map ``b``; ``lbt``: map ``b``'s logits at ``ia``; ``m``: the keys; ``whole(idx)``: the rows ``idx``
    of both maps' logits (``a``'s first; ``None``: all rows).  The set is read from the top k unless all k are
    tied, then from the whole row.  With ``defer`` the excess comes as a :class:`TopExcess` to finish from
    ``a``'s largest weight.
    """
    cut = va[:, :1] - ta
    inside = va >= cut  # (rows, k): the top set among the top k
    wb = torch.exp((lbt - vb[:, :1] + tb).clamp_max_(0.0))
    ratio = (wb * inside).sum(dim=-1) / inside.sum(dim=-1)
    shared = ((lbt >= vb[:, :1] - tb) & inside).any(dim=-1)
    wide = inside[:, -1].nonzero().squeeze(-1) if va.shape[-1] < m else inside[:, -1].new_zeros(0, dtype=torch.long)
    if len(wide):  # the top set may extend past the top k: read those rows whole
        xa, xb = whole(wide)
        full = xa >= cut.index_select(0, wide)
        wfull = torch.exp((xb - vb.index_select(0, wide)[:, :1] + tb.index_select(0, wide)).clamp_max(0.0))
        ratio[wide] = (wfull * full).sum(dim=-1) / full.sum(dim=-1)
        shared[wide] = ((xb >= vb.index_select(0, wide)[:, :1] - tb.index_select(0, wide)) & full).any(dim=-1)
    excess = torch.zeros_like(ratio)
    low = ratio < 1.0
    if len(wide):
        w_low = wide[low.index_select(0, wide)]
        if len(w_low):
            xa = whole(w_low)[0]
            pa = torch.exp(xa - torch.logsumexp(xa, dim=-1, keepdim=True))
            excess[w_low] = ((pa - 1.0 / m).clamp_min_(0.0) * (xa >= cut.index_select(0, w_low))).sum(dim=-1)
        low[wide] = False
    pending = TopExcess(va, inside, low.nonzero().squeeze(-1), excess, m)
    if defer:
        return ratio, pending, shared
    rows = pending.rows
    if len(rows) == 0:
        return ratio, excess, shared
    lse = torch.logsumexp(whole(None if len(rows) == va.shape[0] else rows)[0], dim=-1)
    p_max = torch.zeros_like(ratio)
    p_max[rows] = torch.exp(va.index_select(0, rows)[:, 0] - lse)
    return ratio, pending.finish(p_max), shared


def favourite(ratio_a: torch.Tensor, excess_a: torch.Tensor, ua: torch.Tensor,
              ratio_b: torch.Tensor, excess_b: torch.Tensor, ub: torch.Tensor) -> torch.Tensor:
    """``top1_weight``: the smaller of the two directions' ratios (:func:`top_set`), each counted where its set carries
    ``TOP_SHARE`` of its map's excess over uniform."""
    one = torch.ones_like(ratio_a)
    fa = torch.where((excess_a >= TOP_SHARE * ua) & (ua > 0), ratio_a, one)
    fb = torch.where((excess_b >= TOP_SHARE * ub) & (ub > 0), ratio_b, one)
    return torch.minimum(fa, fb)


def tv_uniform(logits: torch.Tensor, tmp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``TV(softmax(logits), U)`` and the peak ``M max_j P_j`` per row without cancellation.

    With ``u = logits - mean logits``: ``TV = 1/2 mean_j |e^{u_j} - mean e^u| / mean e^u`` and
    ``M max_j P_j = e^{max u} / mean e^u``.
    """
    u = torch.sub(logits, logits.mean(dim=-1, keepdim=True), out=tmp)
    u_max = u.amax(dim=-1)
    wide = (u_max - u.amin(dim=-1)) > TILT_MAX_GAP
    any_wide = bool(wide.any())
    if any_wide:
        u.masked_fill_(wide.unsqueeze(-1), 0.0)
        u_max = u_max.masked_fill(wide, 0.0)
    e = u.expm1_()
    mean = e.mean(dim=-1)
    peak = torch.exp(u_max) / (1.0 + mean)
    tv = 0.5 * e.sub_(mean.unsqueeze(-1)).abs_().mean(dim=-1) / (1.0 + mean)
    if any_wide:
        idx = wide.nonzero().squeeze(-1)
        p = torch.softmax(logits[idx], dim=-1)
        tv[idx] = 0.5 * (p - 1.0 / logits.shape[-1]).abs().sum(dim=-1)
        peak[idx] = p.amax(dim=-1) * logits.shape[-1]
    return tv, peak


def block_stats(
    la: torch.Tensor,
    lb: torch.Tensor,
    out: dict[str, torch.Tensor],
    sl: tuple[int, slice],
    op_a: tuple["Operands", torch.Tensor, torch.Tensor],
    op_b: tuple["Operands", torch.Tensor, torch.Tensor],
    tmp: torch.Tensor,
) -> None:
    """KL, TV and logit gap of one row block; overwrites the logit buffers ``la``, ``lb`` and ``tmp``."""
    g = torch.sub(la, lb, out=la)  # g' = (s_a - s_b) / tau = -g
    gap = g.amax(dim=-1) - g.amin(dim=-1)
    out["gap"][sl] = gap
    pb = softmax_rows_(lb)
    g.sub_(weighted_sum(pb, g, tmp).unsqueeze(-1))  # -h, centred under P_b
    s = weighted_sum(pb, g, tmp)  # E_Pb[-h] (zero up to rounding)
    wide = gap > TILT_MAX_GAP
    any_wide = bool(wide.any())
    if any_wide:
        g.masked_fill_(wide.unsqueeze(-1), 0.0)
    e = g.expm1_()  # e^{-h} - 1
    m1 = weighted_sum(pb, e, tmp)  # E_Pb[e^{-h}] - 1
    out["kl"][sl] = (torch.log1p(m1) - s).clamp_min_(0.0)
    e.sub_(m1.unsqueeze(-1)).abs_()
    out["tv"][sl] = 0.5 * weighted_sum(pb, e, tmp) / (1.0 + m1)
    if any_wide:  # recompute those rows' logits and use log-softmax directly
        idx = wide.nonzero().squeeze(-1)
        (ka, qa, ba_t), (kb, qb, bb_t) = op_a, op_b
        la_w = ka.logits(qa[idx], ba_t, torch.empty(len(idx), ba_t.shape[1], dtype=la.dtype, device=la.device))
        lb_w = kb.logits(qb[idx], bb_t, torch.empty(len(idx), bb_t.shape[1], dtype=la.dtype, device=la.device))
        kl_w, tv_w = direct_stats(la_w, lb_w)
        h, rows = sl
        out["kl"][h, rows.start + idx] = kl_w
        out["tv"][h, rows.start + idx] = tv_w


def output_stats(
    pa: torch.Tensor, pb: torch.Tensor, v: torch.Tensor, v_uniform: torch.Tensor, *, k: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Distances between the two attention outputs of a row block, and of each from the uniform row's output.

    The outputs are the weighted averages :math:`m = \sum_j P_{ij} v_j` (``pa @ v``, ``pb @ v``;
    ``v_uniform`` is :math:`\operatorname{mean}_j v_j`).  With ``k`` (values on the hyperboloid
    :math:`\langle v, v\rangle_L = -k`) each average is taken to the manifold as the Lorentzian
    centroid :math:`\sqrt{k}\, m / \sqrt{-\langle m, m\rangle_L}` (the aggregation of Hypformer's
    full mode) and distances are geodesic; without it they are Euclidean.  Returns ``(gap,
    from_uniform_a, from_uniform_b)``, one value per row.
    """
    oa, ob = pa @ v, pb @ v
    ou = v_uniform.expand_as(oa)
    if k is None:
        return (oa - ob).norm(dim=-1), (oa - ou).norm(dim=-1), (ob - ou).norm(dim=-1)

    def centroid(m: torch.Tensor) -> torch.Tensor:  # its spatial part, lifted (time recomputed)
        norm2 = m[..., :1].square() - m[..., 1:].square().sum(dim=-1, keepdim=True)
        return lift(m[..., 1:] * (math.sqrt(k) / norm2.clamp_min(torch.finfo(m.dtype).tiny).sqrt()), k=k)

    ca, cb, cu = centroid(oa), centroid(ob), centroid(ou)
    return dist(ca, cb, k=k), dist(ca, cu, k=k), dist(cb, cu, k=k)
