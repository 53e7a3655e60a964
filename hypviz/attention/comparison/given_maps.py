r"""Two given attention maps compared row by row: :func:`compare_maps`.

Where :func:`hypviz.attention.compare` builds both maps from queries and keys, this takes two
row-stochastic maps as they are (a model's own attention weights, a map from another library)
and returns the same :class:`hypviz.attention.comparison.result.Comparison`: every measure, the uniform baselines
and the verdicts by the same rule.  Public through :func:`hypviz.attention.compare_maps`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import torch

from hypviz.attention.comparison.options import GIVEN_MAPS_READS, CompareOptions, gather
from hypviz.attention.comparison.result import STATISTICS, TOP_SHARE, Comparison, Plan, assemble
from hypviz.attention.comparison.row_blocks import output_stats
from hypviz.base import validate
from hypviz.lorentz import check_points
from hypviz.lorentz.points import as_tensor, row_name

__all__ = ["compare_maps"]

ArrayLike = Any

_BLOCK_ELEMENTS = 2**22  # float64 working rows per block: 32 MiB for each of a few temporaries


def _map(p: ArrayLike, name: str) -> torch.Tensor:
    t = as_tensor(p, name)
    if t.dim() < 2 or t.shape[-1] < 1 or t.shape[-2] < 1 or t.numel() == 0:
        raise ValueError(f"{name} must be a map of shape (..., N, M) with N, M >= 1, got shape {tuple(t.shape)}")
    return t


def _own(t: torch.Tensor) -> torch.Tensor:
    """``t`` without the axes it was expanded along (stride 0): each distinct row once, a view (they broadcast back)."""
    for axis in range(t.dim() - 2):
        if t.stride(axis) == 0 and t.shape[axis] > 1:
            t = t.narrow(axis, 0, 1)
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
    off = (t.sum(dim=-1, dtype=torch.float64) - 1.0).abs()  # float64 sums without a float64 copy
    if bool((off > atol).any()):
        row, v = _worst(off > atol, off, lead)
        raise ValueError(
            f"{name}'s rows must each sum to 1 within atol = {atol:.3g}, got a sum off by {v:.3g} in {row} "
            "(pass row-stochastic maps, e.g. softmax weights, or a larger atol)"
        )


def _row_source(t: torch.Tensor, batch: torch.Size, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` as ``(rows, M)`` without expanding broadcasts, and each broadcast row's index into it (``(batch..., N)`` strides).

    Returns the map's own rows (a view when ``t`` is contiguous) and the row strides of the broadcast
    shape ``(*batch, N)``, 0 on the axes ``t`` broadcasts along.
    """
    rows = t.contiguous().reshape(-1, t.shape[-1])
    own = (1,) * (len(batch) + 1 - (t.dim() - 1)) + tuple(t.shape[:-1])
    strides, acc = [], 1
    for size in reversed(own):
        strides.append(acc if size > 1 else 0)
        acc *= size
    return rows, torch.tensor(list(reversed(strides)), dtype=torch.long)


def _gather(rows: torch.Tensor, strides: torch.Tensor, shape: tuple[int, ...], start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of the broadcast ``(*batch, N)`` row grid, from the map's own rows (in their dtype)."""
    flat = torch.arange(start, stop, dtype=torch.long)
    own = torch.zeros_like(flat)
    for size, stride in zip(reversed(shape), reversed(strides.tolist())):
        own += (flat % size) * stride
        flat = flat // size
    return rows.index_select(0, own.to(rows.device))


def _keep_source(keep: Any, n: int, m: int) -> tuple[str, Any, tuple[int, ...]]:
    """``keep`` read once: ``("dense", its (..., N, M) boolean tensor)`` or ``("sparse", (crow, col))`` for a sparse
    ``(N, M)`` adjacency (its non-zero entries kept, never densified whole); and its leading axes."""
    if isinstance(keep, torch.Tensor) and keep.layout != torch.strided:
        if keep.dim() != 2 or tuple(keep.shape) != (n, m):
            raise ValueError(f"keep must be an (N, M) = ({n}, {m}) adjacency when sparse, got shape {tuple(keep.shape)}")
        # torch's Tensor.to_sparse_coo has no annotations (a stub gap)
        coo = keep.detach().to_sparse_coo().coalesce().cpu()  # type: ignore[no-untyped-call]
        r, c = coo.indices()
        nz = coo.values() != 0
        r, c = r[nz], c[nz]
        crow = torch.zeros(n + 1, dtype=torch.long)
        crow[1:] = torch.bincount(r, minlength=n).cumsum(0)
        return "sparse", (crow, c), ()
    if isinstance(keep, torch.Tensor):
        t = keep.detach()
    else:
        try:
            t = torch.as_tensor(np.asarray(keep))
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"keep must be a boolean array or tensor (True where a row may attend a key), "
                            f"got {type(keep).__name__}") from None
    if t.dtype != torch.bool:
        raise TypeError(f"keep must be a boolean array or tensor (True where a row may attend a key) or a sparse adjacency, "
                        f"got dtype {str(t.dtype).replace('torch.', '')}")
    if t.dim() < 2:
        raise ValueError(f"keep must have shape (..., N, M) broadcastable to the maps' ({n}, {m}), got shape {tuple(t.shape)}")
    try:
        t = torch.broadcast_to(t, (*t.shape[:-2], n, m))
    except RuntimeError:
        raise ValueError(f"keep must have shape (..., N, M) broadcastable to the maps' ({n}, {m}), "
                         f"got shape {tuple(t.shape)}") from None
    return "dense", t, tuple(t.shape[:-2])


def _sparse_rows(crow: torch.Tensor, col: torch.Tensor, q: torch.Tensor, m: int) -> torch.Tensor:
    """The dense boolean rows ``q`` of a CSR adjacency ``(crow, col)``: only these rows are densified."""
    counts = crow[q + 1] - crow[q]
    owner = torch.repeat_interleave(torch.arange(q.numel()), counts)
    offset = torch.arange(int(counts.sum())) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    out = torch.zeros(q.numel(), m, dtype=torch.bool)
    out[owner, col[torch.repeat_interleave(crow[q], counts) + offset]] = True
    return out


def _logit_scale(x: torch.Tensor) -> torch.Tensor:
    r"""Per row, :math:`\max(1, \mathbb{E}_P \log(\max P / P))`: the smallest logit spread that makes the map,
    weighted by the map."""
    top = x.amax(dim=-1, keepdim=True)
    gap = torch.where(x > 0, torch.log(top) - torch.log(x.clamp_min(torch.finfo(x.dtype).tiny)), torch.zeros_like(x))
    return (x * gap).sum(dim=-1).clamp_min(1.0)


def _favourite(
    x: torch.Tensor, y: torch.Tensor, rel: float, ux: torch.Tensor, inv: Any, keep: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Direction ``x -> y`` of ``top1_weight`` (:func:`hypviz.attention.verdict`) and whether ``y`` has its own top on
    ``x``'s top set.

    :math:`T_x` = keys within a relative ``rel`` of :math:`\max x` (ties within rounding); the ratio
    :math:`\operatorname{mean}_{j \in T_x} \min(1, y_j / ((1 - \mathrm{rel}) \max y))` as
    :func:`hypviz.attention.comparison.row_blocks.top_set`, 1 when the set carries less than
    :data:`hypviz.attention.comparison.result.TOP_SHARE` of ``x``'s excess over uniform (``inv`` = 1 / the number
    of keys each row attends; only the kept keys count when ``keep`` is given).
    """
    mx, my = x.amax(dim=-1, keepdim=True), y.amax(dim=-1, keepdim=True)
    top = x >= mx * (1.0 - rel)
    if keep is not None:
        top = top & keep
    ratio = ((y / (my * (1.0 - rel))).clamp_max(1.0) * top).sum(dim=-1) / top.sum(dim=-1)
    excess = ((x - inv).clamp_min(0.0) * top).sum(dim=-1)
    counted = (excess >= TOP_SHARE * ux) & (ux > 0)
    shared = ((y >= my * (1.0 - rel)) & top).any(dim=-1)
    return torch.where(counted, ratio, torch.ones_like(ratio)), shared


def compare_maps(
    P_a: ArrayLike,
    P_b: ArrayLike,
    *,
    a: str = "P_a",
    b: str = "P_b",
    keep: ArrayLike | None = None,
    values: ArrayLike | None = None,
    k: float | None = None,
    options: CompareOptions | None = None,
    **settings: Any,
) -> Comparison:
    r"""Compare two given row-stochastic attention maps row by row (``P_b`` the reference).

    Every row gets what :func:`hypviz.attention.compare` gives: :math:`\mathrm{KL}(P_b \| P_a)`,
    :math:`\mathrm{TV}(P_a, P_b) = \tfrac12 \sum_j |P_{a,j} - P_{b,j}|`, each map's
    :math:`\mathrm{TV}(P, U)` from the uniform row and its peak :math:`M \max_j P_j`, top-1 and
    top-k agreement, the weights of the top sets (``top1_weight``), a Spearman correlation, and the
    verdict by the same rule (:func:`hypviz.attention.verdict`, :func:`hypviz.attention.overall_verdict`).
    The maps are read in row blocks, each renormalised in float64 (each row divided by its sum): no
    float64 copy of a whole map, no broadcast expanded.  No bound applies (the maps' logits are
    unknown): ``delta`` and the bounds are ``None``.

    *Identical within rounding.*  By default each map is taken as it is stored: a map stored in a dtype of
    machine epsilon :math:`\varepsilon_s` (unit roundoff :math:`u_s = \varepsilon_s / 2`; half precision
    included: it is compared in float64) is off from the weights it stores by at most

    .. math::

        u_s + \tfrac12 M\, \varepsilon_s\, t_s

    in TV (each weight rounded by a relative :math:`u_s`, :math:`\tfrac12 u_s \sum_j P_j` of TV, as much
    again for renormalising the row; the flush of weights below the smallest normal number :math:`t_s`).
    Where the rounding of the maps' computation is stated, ``precision`` (epsilon :math:`\varepsilon_c`)
    and ``logit_scale`` (:math:`L`), each map's level adds :math:`\varepsilon_c L`: logits off by
    :math:`2 \varepsilon_c L` move TV by at most half of that.  :math:`L` is the size of the *terms* each
    logit was summed from, not of the logit: for :math:`x \cdot y_j`, :math:`\sum_i |x_i y_{j,i}|` (at
    most :math:`\|x\| \|y_j\|`), which cancellation can make far larger than the logits themselves;
    :math:`2 \varepsilon_c L` is the level such sums reach in practice (float32 sums of :math:`d` = 1,024
    and 4,096 cancelling products, added one at a time, were off by at most :math:`1.1\, \varepsilon_c L`),
    not their worst case :math:`\approx d\, \varepsilon_c L / 2`.  The tolerance ``tv_tolerance`` is the
    sum of the two maps' levels plus :math:`16\,\varepsilon_{64} \log_2(M + 1)` for the statistics, so
    two maps can be *identical* only if they agree to their storage precision (and to the stated rounding
    of their computation); where that level is not far below the TVs being judged, rows are *unresolved*
    instead (:func:`hypviz.attention.verdict`).  The basis is written in ``tolerance_basis``.

    Parameters
    ----------
    P_a, P_b : array or tensor, shape (..., N, M)
        Row-stochastic maps (non-negative, each row summing to 1 within ``atol``; float16, bfloat16,
        float32 or float64); leading axes broadcast.
    a, b : str
        Names for the two maps in the summary.
    keep : boolean array or tensor, shape (..., N, M) broadcastable, or a sparse (N, M) tensor, optional
        The keys each row may attend (a causal or padding mask, True where kept; or a graph's adjacency,
        its non-zero entries kept, read row block by row block, never densified whole).  Each row is then
        judged over its kept keys :math:`K_i` only: both maps must put at most ``atol`` of weight off
        :math:`K_i` (else ``ValueError``), are renormalised over :math:`K_i`, and the uniform baseline is
        :math:`U_i = 1/|K_i|` on :math:`K_i`: :math:`\mathrm{TV}(P, U) = \tfrac12 \sum_{j \in K_i} |P_j - 1/|K_i||`,
        the peak :math:`|K_i| \max_j P_j`, top-k (k capped at :math:`|K_i|`), top sets and Spearman over
        :math:`K_i`.  A row with one kept key is identical in both maps (TV 0); a row that keeps no key is
        judged over all :math:`M` keys (a softmax with every key masked is uniform, as ``masked_fill``
        makes it).  Default: every key kept.
    values : array or tensor, shape (..., M, c), optional
        Value vectors (finite): the attention outputs :math:`o = P V` are compared too (``output_gap``,
        ``output_uniform_a``, ``output_uniform_b``: each against the uniform row's output).
        With ``k`` they are hyperboloid points, aggregated by the Lorentzian centroid and measured
        by geodesic distance; without, Euclidean weighted averages and Euclidean distance.
    k : float, optional
        The curvature parameter of hyperboloid ``values``.
    options : CompareOptions, optional
        The settings; those read here are ``topk``, ``spearman``, ``atol``, ``tolerance``, ``precision`` and
        ``logit_scale`` (:class:`hypviz.attention.CompareOptions` describes each).  Ties in top-1/top-k are
        weights within a relative :math:`4\varepsilon_s` of each other.
    **settings
        Any of those settings by name, in place of the same field of ``options``.  The maps are given: no kernel's
        option and no setting of :func:`hypviz.attention.compare` alone applies (a ``TypeError`` names them).

    Returns
    -------
    Comparison
        ``k``, ``temperature`` and ``dim`` are ``None``; ``dtype`` is the coarser input dtype.

    Raises
    ------
    ValueError
        For maps that are not ``(..., N, M)`` or hold no row, whose ``(N, M)`` differ or whose leading
        axes do not broadcast, with NaN or infinite weights, negative weights, or rows not summing to 1
        (the message names the worst row); for values with the wrong number of rows, NaN or infinite, or
        off the hyperboloid, a bad ``k`` or setting (:class:`hypviz.attention.CompareOptions`); for a ``keep`` that
        does not broadcast, or a row whose weight off its kept keys exceeds ``atol``.  ``TypeError`` for non-float
        input, a ``keep`` neither boolean nor sparse, or a keyword that is not a setting read here.

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import attention_map, compare, compare_maps
    >>> P_a = attention_map(queries, keys, "spatial", temperature=1.0)
    >>> P_b = attention_map(queries, keys, "distance", temperature=1.0)
    >>> res = compare_maps(P_a, P_b, a="spatial", b="distance")
    >>> res.verdict
    'different'
    >>> bool(torch.allclose(res.tv, compare(queries, keys, "spatial", "distance", temperature=1.0).tv))
    True

    Two maps of float32 logits equal in exact arithmetic (one product summed in two orders) differ by their
    rounding: identical once it is stated, ``logit_scale`` the size of the products' terms :math:`\sum_i |x_i y_i|`:

    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.randn(8, 256, generator=g), torch.randn(32, 256, generator=g) / 8
    >>> one, two = x @ y.T, (x.unsqueeze(1) * y).flip(-1).sum(-1)
    >>> P_a, P_b = one.double().softmax(-1), two.double().softmax(-1)
    >>> compare_maps(P_a, P_b).verdict  # float64 storage only: the float32 rounding is a gap
    'close'
    >>> terms = float((x.abs() @ y.abs().T).max())
    >>> compare_maps(P_a, P_b, precision="float32", logit_scale=terms).verdict
    'identical'
    """
    start = time.perf_counter()
    opts = gather(options, settings, "compare_maps", GIVEN_MAPS_READS)
    pa, pb, batch = _given(P_a, P_b)
    coarse = pa.dtype if torch.finfo(pa.dtype).eps >= torch.finfo(pb.dtype).eps else pb.dtype
    m = pa.shape[-1]
    atol = math.sqrt(torch.finfo(coarse).eps) if opts.atol is None else opts.atol
    k = None if k is None else validate.positive(k, "k", " (the curvature parameter of hyperboloid values)")
    _check_map(pa.detach(), "P_a", atol)
    _check_map(pb.detach(), "P_b", atol)
    src = _sources(pa, pb, keep, values, k, batch)
    setup = _Setup(topk=min(opts.topk, m), rank=m <= 4096 if opts.spearman is None else opts.spearman,
                   rel=4.0 * torch.finfo(coarse).eps, atol=atol, levels=_levels(pa, pb, m, opts), scale=opts.logit_scale,
                   tolerance=opts.tolerance)
    out = _statistics(src, setup, coarse)
    total, rows = math.prod(src.core) * src.n, max(1, _BLOCK_ELEMENTS // m)
    reason = "two given maps: their weights compared as they are"
    if src.core != src.batch:
        reason += (f"; {math.prod(src.core)} of the {math.prod(src.batch)} heads computed (every input is broadcast "
                   "along the others), their rows' results broadcast back")
    route = Plan(path="given_maps", reason=reason, block_rows=min(rows, total), n_blocks=math.ceil(total / rows),
                 block_reason=f"{_BLOCK_ELEMENTS} float64 weights a block")
    shape = (*src.batch, src.n)  # the computed heads' per-row results, broadcast back to every head
    return assemble(
        {name: t.reshape(src.grid).expand(shape).contiguous() for name, t in out.items()
         if name in STATISTICS and (name not in ("og", "oua", "oub") or src.values is not None)},
        shape, pa.device, start,
        a=str(a), b=str(b), k=k, temperature=None, topk=setup.topk, device=str(pa.device),
        dtype=str(coarse).replace("torch.", ""), batch_shape=tuple(src.batch), n_queries=src.n, n_keys=m, dim=None,
        block_rows=route.block_rows, n_blocks=route.n_blocks, tolerance_basis=_tolerance_basis(pa, pb, opts),
        output_metric=None if src.values is None else ("geodesic distance between Lorentzian centroids" if k is not None
                                                       else "Euclidean distance between weighted averages"),
        plan=route,
    )


def _given(P_a: ArrayLike, P_b: ArrayLike) -> tuple[torch.Tensor, torch.Tensor, torch.Size]:
    """The two maps as tensors, each distinct row once (an expanded input is read, never copied), and their
    broadcast leading axes; one line for maps whose ``(N, M)``, leading axes or devices do not match."""
    ta, tb = _map(P_a, "P_a"), _map(P_b, "P_b")
    if ta.shape[-2:] != tb.shape[-2:]:
        raise ValueError(
            f"P_a and P_b must have the same (N queries, M keys), got P_a {tuple(ta.shape)} and P_b {tuple(tb.shape)}"
        )
    try:
        batch = torch.broadcast_shapes(ta.shape[:-2], tb.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading axes of P_a {tuple(ta.shape)} and P_b {tuple(tb.shape)} do not broadcast") from None
    pa, pb = _own(ta), _own(tb)
    if pa.device != pb.device:
        raise ValueError(f"P_a is on {pa.device} but P_b is on {pb.device}; move them to one device")
    return pa, pb, batch


@dataclasses.dataclass
class _Sources:
    """Where each row of the heads computed comes from: ``batch`` the broadcast leading axes, ``core`` those along
    which some input varies (the heads computed; their results broadcast back), ``grid`` ``(*core, N)``; ``a``, ``b``,
    ``k`` the values' curvature (None: Euclidean values); ``keep`` each map's (and a dense keep's) own rows with
    their strides (:func:`_row_source`), ``sparse`` a sparse
    keep's CSR ``(crow, col)``; ``values`` ``(heads, M, c)`` and ``value_head`` each computed head's values."""

    batch: torch.Size
    core: torch.Size
    n: int
    k: float | None
    a: tuple[torch.Tensor, torch.Tensor]
    b: tuple[torch.Tensor, torch.Tensor]
    keep: tuple[torch.Tensor, torch.Tensor] | None = None
    sparse: tuple[torch.Tensor, torch.Tensor] | None = None
    values: torch.Tensor | None = None
    value_head: torch.Tensor | None = None

    @property
    def grid(self) -> tuple[int, ...]:
        return (*self.core, self.n)


def _sources(pa: torch.Tensor, pb: torch.Tensor, keep: Any, values: Any, k: float | None, batch: torch.Size) -> _Sources:
    """``keep`` and ``values`` checked and broadcast with the maps, and the heads computed: a leading axis along
    which no input varies (every one broadcast along it) is computed once and its per-row results broadcast back, so
    that a map expanded to many heads costs what one head costs."""
    n, m = pa.shape[-2], pa.shape[-1]
    ksrc = None
    if keep is not None:
        ksrc = _keep_source(keep, n, m)
        try:
            batch = torch.broadcast_shapes(batch, ksrc[2])
        except RuntimeError:
            raise ValueError(f"the leading axes of the maps {tuple(batch)} and of keep {tuple(ksrc[1].shape)} "
                             "do not broadcast") from None
    v = None if values is None else _values(values, k, m)
    if v is not None:
        try:
            batch = torch.broadcast_shapes(batch, v.shape[:-2])
        except RuntimeError:
            raise ValueError(f"the leading axes of the maps {tuple(batch)} and of values {tuple(v.shape)} "
                             "do not broadcast") from None
    if math.prod(batch) == 0:
        raise ValueError(f"P_a and P_b must hold at least one map, got leading axes {tuple(batch)} (no rows to compare)")
    kown = None if ksrc is None or ksrc[0] != "dense" else _own(ksrc[1])
    v = None if v is None else _own(v)
    owned = [t.shape[:-2] for t in (pa, pb, kown, v) if t is not None]
    core = torch.Size(size if any(len(o) > len(batch) - 1 - ax and o[ax - len(batch)] > 1 for o in owned) else 1
                      for ax, size in enumerate(batch))
    src = _Sources(batch, core, n, k, _row_source(pa.detach(), core, n), _row_source(pb.detach(), core, n),
                   keep=None if kown is None else _row_source(kown, core, n),
                   sparse=ksrc[1] if ksrc is not None and ksrc[0] == "sparse" else None)
    if v is not None:  # each head's own values, by index: no broadcast expanded
        lead = v.shape[:-2]
        src.value_head = torch.arange(math.prod(lead), dtype=torch.long).reshape(lead).expand(core).reshape(-1)
        src.values = v.reshape(-1, m, v.shape[-1])
    return src


def _values(values: ArrayLike, k: float | None, m: int) -> torch.Tensor:
    """The value vectors, one row per key, finite (hyperboloid points when ``k`` is given)."""
    v = as_tensor(values, "values").detach()
    if v.dim() < 2 or v.shape[-2] != m:
        raise ValueError(f"values must have shape (..., M = {m}, c), one row per key, got shape {tuple(v.shape)}")
    if not bool(torch.isfinite(v).all()):
        raise ValueError("values must hold finite numbers, got NaN or inf")
    return v if k is None else check_points(v, k=k, name="values")


@dataclasses.dataclass
class _Setup:
    """The settings of the row blocks: ``topk`` (capped at M), ``rank`` (Spearman), ``rel`` (ties: a relative
    :math:`4\\varepsilon_s`), ``atol``, each map's rounding ``levels`` (:func:`_levels`), the stated ``scale`` of the
    logits' terms and a fixed ``tolerance`` (or None)."""

    topk: int
    rank: bool
    rel: float
    atol: float
    levels: list[tuple[float, float]]
    scale: float | None
    tolerance: float | None


def _levels(pa: torch.Tensor, pb: torch.Tensor, m: int, opts: CompareOptions) -> list[tuple[float, float]]:
    """Per map: its storage rounding in TV, and (only when stated) the epsilon of its computation."""
    comp = opts.precision if isinstance(opts.precision, torch.dtype) else None  # checked: a dtype or None
    stated = comp is not None or opts.logit_scale is not None
    levels = []
    for t in (pa, pb):
        fs = torch.finfo(t.dtype)
        ec = (fs.eps if comp is None else torch.finfo(comp).eps) if stated else 0.0
        levels.append((0.5 * fs.eps + 0.5 * m * fs.eps * fs.tiny, ec))
    return levels


def _statistics(src: _Sources, setup: _Setup, coarse: torch.dtype) -> dict[str, torch.Tensor]:
    """Every per-row statistic, by its short name, from float64 blocks of rows of the heads computed."""
    a_rows = src.a[0]
    m = a_rows.shape[-1]
    names = ["kl", "tv", "ua", "ub", "pa", "pb", "gap", "top1", "fav", "overlap", "tol"]
    names += (["rho"] if setup.rank else []) + (["og", "oua", "oub"] if src.values is not None else [])
    total = math.prod(src.core) * src.n
    kept = coarse if coarse in (torch.float32, torch.float64) else torch.float32  # no float64 copies of float32 maps
    out = {name: torch.empty(total, dtype=kept, device=a_rows.device) for name in names}
    rows = max(1, _BLOCK_ELEMENTS // m)
    for i in range(0, total, rows):
        j = min(i + rows, total)
        x, y, kb, cnt = _block(src, i, j, setup.atol)
        _block_statistics(out, slice(i, j), x, y, kb, cnt, setup)
        if src.values is not None and src.value_head is not None:
            _block_outputs(out, src.values, src.value_head, src, i, j, (x, y), kb, 1.0 / cnt)
    if setup.tolerance is not None:
        out["tol"].fill_(setup.tolerance)
    return out


def _block(src: _Sources, i: int, j: int, atol: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Rows ``i:j`` of both maps in float64, each renormalised over its kept keys (``keep``: every key for a row that
    keeps none, as a fully masked softmax is uniform), the kept keys and their count per row."""
    x, y = _gather(*src.a, src.grid, i, j).double(), _gather(*src.b, src.grid, i, j).double()
    m = x.shape[-1]
    kb = None
    if src.keep is not None:
        kb = _gather(*src.keep, src.grid, i, j).to(x.device)
    elif src.sparse is not None:
        kb = _sparse_rows(*src.sparse, torch.arange(i, j, dtype=torch.long) % src.n, m).to(x.device)
    if kb is not None:
        kb = kb | ~kb.any(dim=-1, keepdim=True)
        for p_, nm in ((x, "P_a"), (y, "P_b")):
            off = torch.where(kb, 0.0, p_.abs()).sum(dim=-1)
            if bool((off > atol).any()):
                w = int(torch.where(off > atol, off, -1.0).argmax())
                raise ValueError(f"{nm} must put no weight on the keys keep masks out (at most atol = {atol:.3g} a row), "
                                 f"got {float(off[w]):.3g} in {row_name(i + w, torch.Size(src.grid))}")
        x, y = torch.where(kb, x, 0.0), torch.where(kb, y, 0.0)
        cnt = kb.sum(dim=-1, keepdim=True).double()
    else:
        cnt = torch.full((j - i, 1), float(m), dtype=torch.float64, device=x.device)
    x = x.clamp_min(0.0) / x.clamp_min(0.0).sum(dim=-1, keepdim=True)
    y = y.clamp_min(0.0) / y.clamp_min(0.0).sum(dim=-1, keepdim=True)
    return x, y, kb, cnt


def _block_statistics(out: dict[str, torch.Tensor], sl: slice, x: torch.Tensor, y: torch.Tensor, kb: torch.Tensor | None,
                      cnt: torch.Tensor, setup: _Setup) -> None:
    """A block's TV, KL, baselines, logit gap, peaks, top sets, top-k overlap, tolerance and Spearman, into ``out``."""
    inv, topk, rel = 1.0 / cnt, setup.topk, setup.rel
    out["tv"][sl] = 0.5 * (x - y).abs().sum(dim=-1)
    ratio = torch.where(y > 0, y * (torch.log(y) - torch.log(x)), torch.zeros_like(y))
    out["kl"][sl] = ratio.sum(dim=-1).clamp_min(0.0)  # inf where P_a = 0 < P_b
    du, dv = (x - inv).abs(), (y - inv).abs()
    if kb is not None:
        du, dv = torch.where(kb, du, 0.0), torch.where(kb, dv, 0.0)
    ua = out["ua"][sl] = 0.5 * du.sum(dim=-1)
    ub = out["ub"][sl] = 0.5 * dv.sum(dim=-1)
    both = (x > 0) & (y > 0)
    g = torch.log(y) - torch.log(x)
    out["gap"][sl] = torch.where(
        (both if kb is None else both | ~kb).all(dim=-1),
        torch.where(both, g, -math.inf).amax(dim=-1) - torch.where(both, g, math.inf).amin(dim=-1),
        math.inf,
    )
    xs, ys = (x, y) if kb is None else (torch.where(kb, x, -1.0), torch.where(kb, y, -1.0))  # masked keys last
    va, ia = torch.topk(xs, topk, dim=-1)
    vb, ib = torch.topk(ys, topk, dim=-1)
    out["pa"][sl], out["pb"][sl] = va[:, 0] * cnt[:, 0], vb[:, 0] * cnt[:, 0]
    wa, sa = _favourite(x, y, rel, ua, inv, kb)
    wb, sb = _favourite(y, x, rel, ub, inv, kb)
    out["top1"][sl] = (sa | sb).double()
    out["fav"][sl] = torch.minimum(wa, wb)
    top = cnt.clamp_max(topk).long()  # top-k capped at the kept keys
    first = torch.arange(topk, device=x.device) < top
    ta_, tb_ = torch.gather(va, -1, top - 1), torch.gather(vb, -1, top - 1)
    b_in_a = (torch.gather(x, -1, ib) >= ta_ * (1.0 - rel)) & first
    a_in_b = (torch.gather(y, -1, ia) >= tb_ * (1.0 - rel)) & first
    out["overlap"][sl] = torch.maximum(b_in_a.sum(dim=-1), a_in_b.sum(dim=-1)).double() / top[:, 0]
    if setup.tolerance is None:
        tol, scale = torch.full_like(ua, 16.0 * torch.finfo(torch.float64).eps * math.log2(x.shape[-1] + 1)), setup.scale
        for p, (store, ec) in zip((x, y), setup.levels):
            tol += store + (0.0 if ec == 0.0 else ec * (_logit_scale(p) if scale is None else scale))
        out["tol"][sl] = tol
    if setup.rank:  # masked keys rank lowest in both maps, in key order (stable): only the kept keys' ranks differ
        st = kb is not None
        ra = xs.argsort(dim=-1, stable=st).argsort(dim=-1).double()
        rb = ys.argsort(dim=-1, stable=st).argsort(dim=-1).double()
        ssd = (ra - rb).square().sum(dim=-1)
        c1 = cnt[:, 0]
        out["rho"][sl] = torch.where(c1 > 1, 1.0 - 6.0 * ssd / (c1 * (c1 * c1 - 1.0)).clamp_min(1.0), 1.0)


def _block_outputs(out: dict[str, torch.Tensor], values: torch.Tensor, value_head: torch.Tensor, src: _Sources, i: int,
                   j: int, maps: tuple[torch.Tensor, torch.Tensor], kb: torch.Tensor | None, inv: torch.Tensor) -> None:
    """The outputs' gap and baselines of rows ``i:j``, with the values of each head the block touches."""
    (x, y), n = maps, src.n
    for h in range(i // n, (j - 1) // n + 1):
        r0, r1 = max(i, h * n), min(j, (h + 1) * n)
        vh = values[int(value_head[h])].double()
        vu = vh.mean(dim=0) if kb is None else (kb[r0 - i : r1 - i].double() * inv[r0 - i : r1 - i]) @ vh
        og, oua, oub = output_stats(x[r0 - i : r1 - i], y[r0 - i : r1 - i], vh, vu, k=src.k)
        out["og"][r0:r1], out["oua"][r0:r1], out["oub"][r0:r1] = og, oua, oub


def _tolerance_basis(pa: torch.Tensor, pb: torch.Tensor, opts: CompareOptions) -> str:
    """The basis of ``tv_tolerance``, in words."""
    if opts.tolerance is not None:
        return f"TV <= {opts.tolerance:.3g} (given tolerance)"
    stored = "/".join(dict.fromkeys(str(t.dtype).replace("torch.", "") for t in (pa, pb)))
    if opts.precision is None and opts.logit_scale is None:
        return (f"TV within the rounding of {stored} storage (tv_tolerance; state precision= and logit_scale=, "
                "the size of the products' terms, to count the rounding of the maps' computation)")
    made = "their storage dtype" if opts.precision is None else str(opts.precision).replace("torch.", "")
    size = "max(1, E_P log(max P / P)) per row (default)" if opts.logit_scale is None else f"{opts.logit_scale:.3g}"
    return (f"TV within the rounding of {stored} storage and of logits from terms of size {size} computed in "
            f"{made} (tv_tolerance)")
