r"""The strongest keys of distance attention as a search: :func:`exact_top_keys`.

The distance logit is an inner product plus a constant (identity 1),

.. math::

    s_{ij} = -\tfrac12 \|q_i - \kappa_j\|_L^2 = \langle q_i, \kappa_j\rangle_L + k
           = (J q_i) \cdot \kappa_j + k, \qquad J = \operatorname{diag}(-1, 1, \dots, 1),

so a query's top keys are a maximum-inner-product search over the keys (and, since
:math:`\|q - \kappa\|_L^2 = 2k(\cosh(\rho/\sqrt k) - 1)` grows with the geodesic distance
:math:`\rho`, a nearest-neighbour search in the hyperbolic metric).  :func:`exact_top_keys` is the
reference: one matrix product per block of query rows, no softmax, no ``M``-sized row kept beyond
its block.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from hypviz.attention.checks import checked_inputs, flatten_batch
from hypviz.base import validate
from hypviz.lorentz import distance_operands

__all__ = ["TopKeyLogits", "exact_top_keys"]

ArrayLike = Any

_BLOCK_BYTES = 32 * 2**20  # exact search: bytes of one (rows x M) block of logits


class TopKeyLogits(NamedTuple):
    r"""Each query's ``top`` strongest keys and their distance logits (see :func:`exact_top_keys`).

    ``indices``, ``(..., N, top)`` int64, the keys' indices, strongest first, keys with equal logits
    in increasing index order; ``logits``, ``(..., N, top)`` in the points' dtype, their logits
    :math:`s_{ij} = -\frac12\|q_i - \kappa_j\|_L^2 \le 0`, non-increasing along the last axis.
    """

    indices: torch.Tensor
    logits: torch.Tensor


def block_top(s: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top`` largest entries of each row of ``s`` ``(rows, M)``, largest first, equal entries by index.

    ``torch.topk`` leaves the order of equal entries unspecified; here every entry at least the
    ``top``-th largest is a candidate, candidates are sorted by value (descending, stable) within
    their row, so equal values keep increasing index order, and each row's first ``top`` are kept.
    """
    rows = s.shape[0]
    kth = torch.topk(s, top, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)
    row, col = torch.nonzero(s >= kth, as_tuple=True)  # row-major: columns increase within a row
    val = s[row, col]
    order = torch.argsort(val, descending=True, stable=True)
    order = order[torch.argsort(row[order], stable=True)]  # grouped by row, by value within, ties by column
    row, col, val = row[order], col[order], val[order]
    counts = torch.bincount(row, minlength=rows)
    starts = torch.cumsum(counts, 0) - counts
    keep = torch.arange(row.numel(), device=s.device) - starts[row] < top
    return val[keep].view(rows, top), col[keep].view(rows, top)


def exact_top_keys(
    queries: ArrayLike,
    keys: ArrayLike,
    top: int,
    *,
    k: float = 1.0,
    block_rows: int | None = None,
) -> TopKeyLogits:
    r"""Each query's ``top`` keys of largest distance logit, by exact blocked search.

    .. math::

        s_{ij} = -\tfrac12\|q_i - \kappa_j\|_L^2 = (J q_i)\cdot\kappa_j + k, \qquad
        \mathrm{top}(i) = \operatorname{arg\,top}_j\, s_{ij},

    the logits computed as one matrix product of the stable operands of
    :func:`hypviz.lorentz.distance_operands` per block of query rows (nothing of size :math:`k`
    cancels near the origin), clamped to :math:`\le 0`.  Cost :math:`O(N M d)`, memory one
    ``block_rows x M`` block: no softmax, no row of ``M`` weights kept beyond its block.  Keys whose
    computed logits are equal are listed by increasing index, so the result is deterministic.

    Parameters
    ----------
    queries : array_like
        ``(..., N, d + 1)`` points on the hyperboloid, time coordinate first.
    keys : array_like
        ``(..., M, d + 1)``, same dtype and device; leading axes broadcast against the queries'.
    top : int
        How many keys per query, ``1 <= top <= M``.
    k : float
        The curvature parameter, :math:`\langle x, x\rangle_L = -k`.
    block_rows : int, optional
        Query rows per matrix product; default as many as fit 32 MiB of logits.

    Returns
    -------
    TopKeyLogits
        ``indices`` and ``logits``, each ``(..., N, top)`` with the broadcast leading axes.

    Raises
    ------
    ValueError
        For points off the hyperboloid, shapes that do not match or broadcast, a bad ``top``,
        ``k`` or ``block_rows``.
    TypeError
        For queries and keys of different dtypes.

    Examples
    --------
    >>> import torch
    >>> from hypviz.lorentz import lift
    >>> from hypviz.attention import exact_top_keys
    >>> q = lift(torch.tensor([[0.0, 0.0]], dtype=torch.float64))
    >>> kappa = lift(torch.tensor([[2.0, 0.0], [0.1, 0.0], [0.0, -0.5]], dtype=torch.float64))
    >>> exact_top_keys(q, kappa, 2).indices
    tensor([[1, 2]])
    """
    q, kk, _, kf, batch = checked_inputs(queries, keys, k)
    m = kk.shape[-2]
    top = validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
    block_rows = validate.integer(block_rows, "block_rows", 1, " (None: automatic)", allow_none=True)
    n = q.shape[-2]
    if block_rows is None:
        block_rows = max(1, _BLOCK_BYTES // (m * q.element_size()))
    rows = min(block_rows, n)
    a, b = distance_operands(q, kk, kf)
    a, b = flatten_batch(a, batch), flatten_batch(b, batch)
    heads = a.shape[0]
    indices = torch.empty(heads, n, top, dtype=torch.int64, device=q.device)
    logits = torch.empty(heads, n, top, dtype=q.dtype, device=q.device)
    buf = torch.empty(rows, m, dtype=q.dtype, device=q.device)
    for h in range(heads):
        b_t = b[h].transpose(0, 1)
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            s = torch.matmul(a[h, start:stop], b_t, out=buf[: stop - start]).clamp_max_(0.0)
            logits[h, start:stop], indices[h, start:stop] = block_top(s, top)
    return TopKeyLogits(indices.view(*batch, n, top), logits.view(*batch, n, top))
