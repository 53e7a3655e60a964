r"""Two given attention maps compared row by row: :func:`compare_maps`.

Where :func:`hypviz.attention.compare` builds both maps from queries and keys, this takes two
row-stochastic maps as they are (a model's own attention weights, a map from another library)
and returns the same :class:`hypviz.attention.comparison.Comparison`: every measure, the uniform baselines
and the verdicts by the same rule.  Public through :func:`hypviz.attention.compare_maps`.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from hypviz.base import validate
from hypviz.attention.row_blocks import output_stats
from hypviz.attention.comparison import Comparison
from hypviz.lorentz import check_points
from hypviz.lorentz.points import row_name, as_tensor

__all__ = ["compare_maps"]

ArrayLike = Any

_BLOCK_ELEMENTS = 2**22  # float64 working rows per block: 32 MiB for each of a few temporaries


def _map(p: ArrayLike, name: str) -> torch.Tensor:
    t = as_tensor(p, name)
    if t.dim() < 2 or t.shape[-1] < 1 or t.shape[-2] < 1:
        raise ValueError(f"{name} must be a map of shape (..., N, M) with N, M >= 1, got shape {tuple(t.shape)}")
    return t


def _worst(bad: torch.Tensor, score: torch.Tensor, lead: torch.Size) -> tuple[str, float]:
    """The name of the worst offending row (largest ``score`` among ``bad``) and its score."""
    flat = torch.where(bad.reshape(-1), score.reshape(-1), torch.full_like(score.reshape(-1), -math.inf))
    i = int(flat.argmax())
    return row_name(i, lead), float(score.reshape(-1)[i])


def _check_map(t: torch.Tensor, name: str, atol: float) -> None:
    """Finite, non-negative, rows summing to 1 within ``atol``: else one line naming the worst row."""
    lead = t.shape[:-1]
    finite = torch.isfinite(t).all(dim=-1)
    if not bool(finite.all()):
        row, _ = _worst(~finite, torch.zeros(lead), lead)
        raise ValueError(f"{name} must hold finite weights, got NaN or inf in {row}")
    low = t.amin(dim=-1).double()
    if bool((low < -atol).any()):
        row, v = _worst(low < -atol, -low, lead)
        raise ValueError(f"{name} must hold non-negative weights, got {-v:.3g} in {row}")
    off = (t.double().sum(dim=-1) - 1.0).abs()
    if bool((off > atol).any()):
        row, v = _worst(off > atol, off, lead)
        raise ValueError(
            f"{name}'s rows must each sum to 1 within atol = {atol:.3g}, got a sum off by {v:.3g} in {row} "
            "(pass row-stochastic maps, e.g. softmax weights, or a larger atol)"
        )


def compare_maps(
    P_a: ArrayLike,
    P_b: ArrayLike,
    *,
    a: str = "P_a",
    b: str = "P_b",
    values: ArrayLike | None = None,
    k: float | None = None,
    topk: int = 5,
    spearman: bool | None = None,
    atol: float | None = None,
    tolerance: float | None = None,
) -> Comparison:
    r"""Compare two given row-stochastic attention maps row by row (``P_b`` the reference).

    Every row gets what :func:`hypviz.attention.compare` gives: :math:`\mathrm{KL}(P_b \| P_a)`,
    :math:`\mathrm{TV}(P_a, P_b) = \tfrac12 \sum_j |P_{a,j} - P_{b,j}|`, each map's
    :math:`\mathrm{TV}(P, U)` from the uniform row and its peak :math:`M \max_j P_j`, top-1 and
    top-k agreement, the favourite keys' weights (``top1_weight``), a Spearman correlation, and the
    verdict by the same rule (:func:`hypviz.attention.verdict`, :func:`hypviz.attention.overall_verdict`).
    The maps are renormalised in float64 (each row divided by its sum) before the statistics.
    No bound applies (the maps' logits are unknown): ``delta`` and the bounds are ``None``.

    Parameters
    ----------
    P_a, P_b : array or tensor, shape (..., N, M)
        Row-stochastic maps (non-negative, each row summing to 1 within ``atol``); leading axes
        broadcast.
    a, b : str
        Names for the two maps in the summary.
    values : array or tensor, shape (..., M, c), optional
        Value vectors: the attention outputs :math:`o = P V` are compared too (``output_gap``,
        ``output_uniform_a``, ``output_uniform_b``: each against the uniform row's output).
        With ``k`` they are hyperboloid points, aggregated by the Lorentzian centroid and measured
        by geodesic distance; without, Euclidean weighted averages and Euclidean distance.
    k : float, optional
        The curvature parameter of hyperboloid ``values``.
    topk : int
        The :math:`k` of the top-k agreement (capped at :math:`M`).
    spearman : bool, optional
        Compute Spearman correlations (by default when :math:`M \le 4096`).
    atol : float, optional
        How far a row's sum may be from 1 and a weight below 0; default :math:`\sqrt{\varepsilon}`
        of the coarser dtype (:math:`3.5 \cdot 10^{-4}` for float32, :math:`1.5 \cdot 10^{-8}` for float64).
    tolerance : float, optional
        The TV below which two rows are *identical* (rounding); default
        :math:`64\,\varepsilon \log_2(M + 1)` of the coarser dtype.  Ties in top-1/top-k are
        weights within a relative :math:`4\varepsilon` of each other.

    Returns
    -------
    Comparison
        ``k``, ``temperature`` and ``dim`` are ``None``; ``dtype`` is the coarser input dtype.

    Raises
    ------
    ValueError
        For maps that are not ``(..., N, M)``, whose ``(N, M)`` differ or whose leading axes do not
        broadcast, with NaN or infinite weights, negative weights, or rows not summing to 1 (the
        message names the worst row); for values with the wrong number of rows or off the
        hyperboloid, a bad ``topk``, ``atol`` or ``tolerance``.  ``TypeError`` for non-float input.
    """
    start = time.perf_counter()
    pa, pb = _map(P_a, "P_a"), _map(P_b, "P_b")
    if pa.shape[-2:] != pb.shape[-2:]:
        raise ValueError(
            f"P_a and P_b must have the same (N queries, M keys), got P_a {tuple(pa.shape)} and P_b {tuple(pb.shape)}"
        )
    try:
        batch = torch.broadcast_shapes(pa.shape[:-2], pb.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading axes of P_a {tuple(pa.shape)} and P_b {tuple(pb.shape)} do not broadcast") from None
    if pa.device != pb.device:
        raise ValueError(f"P_a is on {pa.device} but P_b is on {pb.device}; move them to one device")
    coarse = pa.dtype if torch.finfo(pa.dtype).eps >= torch.finfo(pb.dtype).eps else pb.dtype
    eps = torch.finfo(coarse).eps
    n, m = pa.shape[-2], pa.shape[-1]
    atol = math.sqrt(eps) if atol is None else validate.positive(atol, "atol")
    tol = 64.0 * eps * math.log2(m + 1) if tolerance is None else validate.number(tolerance, "tolerance", 0.0)
    t_k = min(validate.integer(topk, "topk", 1), m)
    if spearman is not None and not isinstance(spearman, bool):
        raise ValueError(f"spearman must be True, False or None (automatic), got {spearman!r}")
    rank = m <= 4096 if spearman is None else spearman
    _check_map(pa.detach(), "P_a", atol)
    _check_map(pb.detach(), "P_b", atol)
    kf = None
    v = None
    if values is not None:
        v = as_tensor(values, "values").detach()
        if v.dim() < 2 or v.shape[-2] != m:
            raise ValueError(f"values must have shape (..., M = {m}, c), one row per key, got shape {tuple(v.shape)}")
        if k is not None:
            kf = validate.positive(k, "k")
            v = check_points(v, kf, name="values")
        try:
            batch = torch.broadcast_shapes(batch, v.shape[:-2])
        except RuntimeError:
            raise ValueError(f"the leading axes of the maps {tuple(batch)} and of values {tuple(v.shape)} do not broadcast") from None
        v = v.double().expand(*batch, *v.shape[-2:]).reshape(-1, m, v.shape[-1])
    fa = pa.detach().double().expand(*batch, n, m).reshape(-1, n, m)
    fb = pb.detach().double().expand(*batch, n, m).reshape(-1, n, m)
    heads = fa.shape[0]
    names = ["kl", "tv", "ua", "ub", "pa", "pb", "gap", "top1", "fav", "overlap", "rho", "og", "oua", "oub"]
    out = {name: torch.empty(heads, n, dtype=torch.float64, device=pa.device) for name in names}
    rows = max(1, _BLOCK_ELEMENTS // m)
    rel = 4.0 * eps
    for h in range(heads):
        for i in range(0, n, rows):
            j = min(i + rows, n)
            x, y = fa[h, i:j], fb[h, i:j]
            x = x.clamp_min(0.0) / x.clamp_min(0.0).sum(dim=-1, keepdim=True)
            y = y.clamp_min(0.0) / y.clamp_min(0.0).sum(dim=-1, keepdim=True)
            sl = (h, slice(i, j))
            out["tv"][sl] = 0.5 * (x - y).abs().sum(dim=-1)
            ratio = torch.where(y > 0, y * (torch.log(y) - torch.log(x)), torch.zeros_like(y))
            out["kl"][sl] = ratio.sum(dim=-1).clamp_min(0.0)  # inf where P_a = 0 < P_b
            out["ua"][sl] = 0.5 * (x - 1.0 / m).abs().sum(dim=-1)
            out["ub"][sl] = 0.5 * (y - 1.0 / m).abs().sum(dim=-1)
            both = (x > 0) & (y > 0)
            g = torch.log(y) - torch.log(x)
            out["gap"][sl] = torch.where(
                both.all(dim=-1),
                torch.where(both, g, -math.inf).amax(dim=-1) - torch.where(both, g, math.inf).amin(dim=-1),
                math.inf,
            )
            va, ia = torch.topk(x, t_k, dim=-1)
            vb, ib = torch.topk(y, t_k, dim=-1)
            out["pa"][sl], out["pb"][sl] = va[:, 0] * m, vb[:, 0] * m
            wa = torch.gather(x, -1, ib[:, :1]).squeeze(-1) / va[:, 0]  # P_a at P_b's favourite, over max P_a
            wb = torch.gather(y, -1, ia[:, :1]).squeeze(-1) / vb[:, 0]
            wa = torch.where(wa >= 1.0 - rel, 1.0, wa)
            wb = torch.where(wb >= 1.0 - rel, 1.0, wb)
            out["top1"][sl] = ((wa == 1.0) | (wb == 1.0)).double()
            out["fav"][sl] = torch.minimum(wa, wb)
            b_in_a = torch.gather(x, -1, ib) >= va[:, -1:] * (1.0 - rel)
            a_in_b = torch.gather(y, -1, ia) >= vb[:, -1:] * (1.0 - rel)
            out["overlap"][sl] = torch.maximum(b_in_a.sum(dim=-1), a_in_b.sum(dim=-1)).double() / t_k
            if rank:
                ra = x.argsort(dim=-1).argsort(dim=-1).double()
                rb = y.argsort(dim=-1).argsort(dim=-1).double()
                ssd = (ra - rb).square().sum(dim=-1)
                out["rho"][sl] = 1.0 - 6.0 * ssd / (m * (m * m - 1.0)) if m > 1 else torch.ones_like(ssd)
            if v is not None:
                vh = v[h]
                out["og"][sl], out["oua"][sl], out["oub"][sl] = output_stats(x, y, vh, vh.mean(dim=0), kf)
    shape = (*batch, n)

    def back(name: str) -> torch.Tensor:
        return out[name].reshape(shape).to(coarse)

    outputs: dict[str, Any] = {}
    if v is not None:
        outputs = dict(
            output_gap=back("og"),
            output_uniform_a=back("oua"),
            output_uniform_b=back("oub"),
            output_metric="geodesic distance between Lorentzian centroids" if kf is not None else "Euclidean distance between weighted averages",
        )
    return Comparison(
        a=str(a),
        b=str(b),
        k=kf,
        temperature=None,
        topk=t_k,
        device=str(pa.device),
        dtype=str(coarse).replace("torch.", ""),
        batch_shape=tuple(batch),
        n_queries=n,
        n_keys=m,
        dim=None,
        block_rows=min(rows, n),
        n_blocks=heads * math.ceil(n / min(rows, n)),
        kl=back("kl"),
        tv=back("tv"),
        tv_uniform_a=back("ua"),
        tv_uniform_b=back("ub"),
        logit_gap=back("gap"),
        top1=out["top1"].reshape(shape).bool(),
        topk_overlap=back("overlap"),
        top1_weight=back("fav"),
        peak_a=back("pa"),
        peak_b=back("pb"),
        tv_tolerance=torch.full(shape, tol, dtype=coarse, device=pa.device),
        spearman=back("rho") if rank else None,
        elapsed_s=time.perf_counter() - start,
        **outputs,
    )
