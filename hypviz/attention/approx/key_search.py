r"""The strongest keys of distance attention as a search: :func:`exact_top_keys`.

The distance logit is an inner product plus a constant (identity 1),

.. math::

    s_{ij} = -\tfrac12 \|q_i - \kappa_j\|_L^2 = \langle q_i, \kappa_j\rangle_L + k
           = (J q_i) \cdot \kappa_j + k, \qquad J = \operatorname{diag}(-1, 1, \dots, 1),

so a query's top keys are a maximum-inner-product search over the keys (and, since
:math:`\|q - \kappa\|_L^2 = 2k(\cosh(\rho/\sqrt k) - 1)` grows with the geodesic distance
:math:`\rho`, a nearest-neighbour search in the hyperbolic metric).  :func:`exact_top_keys` is the
reference: one matrix product per block of query rows, no softmax, no ``M``-sized row kept beyond
its block.  Logits equal up to the product's rounding (:func:`logit_rounding`) are ties, listed by key index
(:func:`block_top`), so no answer depends on which BLAS kernel ran.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

from hypviz.attention.maps.checks import checked_inputs, flatten_batch
from hypviz.base import validate
from hypviz.lorentz import check_k, distance_operands

__all__ = ["TopKeyLogits", "exact_top_keys", "KeySearch", "search_top_keys", "KeyIndex", "fit_key_index"]

ArrayLike = Any

_BLOCK_BYTES = 32 * 2**20  # exact search: bytes of one (rows x M) block of logits


class TopKeyLogits(NamedTuple):
    r"""Each query's ``top`` strongest keys and their distance logits (see :func:`exact_top_keys`).

    ``indices``, ``(..., N, top)`` int64, the keys' indices, strongest first, keys with logits equal up to
    rounding (:func:`block_top`) in increasing index order; ``logits``, ``(..., N, top)`` in the points' dtype,
    their logits :math:`s_{ij} = -\frac12\|q_i - \kappa_j\|_L^2 \le 0`, non-increasing along the last axis up to
    that rounding.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import exact_top_keys
    >>> found = exact_top_keys(data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(40, 4, 0.5, seed=1), 2)
    >>> found.indices.shape, bool((found.logits <= 0).all())
    (torch.Size([8, 2]), True)
    """

    indices: torch.Tensor
    logits: torch.Tensor


def logit_rounding(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The rounding bound of the logits ``a @ b.T`` as two factors, :math:`e_{ij} = \mathrm{row}_i\,\mathrm{col}_j`.

    .. math::

        |\hat s_{ij} - a_i \cdot b_j| \le \gamma_c \sum_l |a_{il} b_{jl}| \le e_{ij} = \gamma_c\,\|a_i\|\,\|b_j\|,
        \qquad \gamma_c = \frac{c\,u}{1 - c\,u},\ u = \varepsilon / 2,

    the worst case of a dot product of ``c`` terms (``c = d + 3``) summed in any order, with or without FMA: any
    BLAS kernel, any block.  Two logits of equal exact value are computed at most :math:`e_{ij} + e_{ij'}` apart.
    Returns ``(row, col)``: ``(rows, 1)`` :math:`\gamma_c\|a_i\|` and ``(M,)`` :math:`\|b_j\|`, for :func:`block_top`.

    Examples
    --------
    >>> import torch
    >>> row, col = logit_rounding(torch.ones(2, 4, dtype=torch.float64), torch.ones(3, 4, dtype=torch.float64))
    >>> row.shape, col.shape, f"{float(row[0, 0] * col[0]):.3g}"  # 4 u / (1 - 4 u) * 2 * 2
    (torch.Size([2, 1]), torch.Size([3]), '1.78e-15')
    """
    cu = a.shape[-1] * torch.finfo(a.dtype).eps / 2
    return (cu / (1.0 - cu)) * a.norm(dim=-1, keepdim=True), b.norm(dim=-1)


Rounding = tuple[torch.Tensor, torch.Tensor]


def _rows_of(rounding: Rounding | None, which: torch.Tensor) -> Rounding | None:
    """The rounding of the rows ``which`` (a mask): the column factor kept whole when shared by every row."""
    if rounding is None:
        return None
    row, col = rounding
    return row[which], (col if col.dim() == 1 else col[which])


def _at(rounding: Rounding, rows: torch.Tensor | None, cols: torch.Tensor) -> torch.Tensor:
    """:math:`e_{ij}` at the columns ``cols`` (``(R, K)``, or flat with their ``rows``)."""
    row, col = rounding
    if rows is not None:  # flat (row, column) pairs
        return row[rows, 0] * (col[cols] if col.dim() == 1 else col[rows, cols])
    return row * (col[cols] if col.dim() == 1 else torch.gather(col, -1, cols))


def _block_top_direct(s: torch.Tensor, top: int, rounding: Rounding | None, where: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`block_top` on every entry of each row of ``s`` (``where``: each entry's column in the rounding's terms,
    default its own): ``torch.topk``; a row where rounding could decide the order (two of its ``top`` whose
    intervals meet) or the cut (an entry beyond the ``top`` within the row's largest rounding ``E`` of the lowest
    interval among them) is ordered by :func:`_by_groups`, from the ``top`` themselves or, for the cut, from every
    entry within ``3 E`` of the ``top``-th (:func:`_tied_top`).  Returns values and positions in ``s``."""
    val, pos = torch.topk(s, top, dim=-1)
    if rounding is None:
        e = torch.zeros_like(val)
        span = e[:, :1]
    else:
        e = _at(rounding, None, pos if where is None else torch.gather(where, -1, pos))
        span = rounding[0] * rounding[1].amax(dim=-1, keepdim=True)  # E_i = e_row_i * max_j e_col_j
    tied = ~(val[:, :-1] - val[:, 1:] > e[:, :-1] + e[:, 1:]).all(dim=-1)  # nan (equal infinities) counts too
    across = (s >= (val - e).amin(dim=-1, keepdim=True) - span).sum(dim=-1) > top  # an entry beyond the top reaches them
    tied |= across
    if bool(tied.any()):
        inner = tied & ~across  # only ties among the top: those are the candidates
        if bool(inner.any()):
            val[inner], pos[inner] = _by_groups(val[inner], pos[inner], e[inner], s.shape[1], top, in_index_order=False)
        if bool(across.any()):
            val[across], pos[across] = _tied_top(s[across], top, val[across, -1:] - 3.0 * span[across],
                                                 _rows_of(rounding, across), None if where is None else where[across])
    return val, pos


def _tied_top(s: torch.Tensor, top: int, floor: torch.Tensor, rounding: Rounding | None, where: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``top`` by the tie rule of :func:`block_top`, from its entries ``>= floor`` (every entry that can
    be among them or tied with them), by :func:`_by_groups`."""
    rows, m = s.shape
    dev = s.device
    row, c = torch.nonzero(s >= floor, as_tuple=True)  # row-major: columns increase within a row
    v = s[row, c]
    counts = torch.bincount(row, minlength=rows)
    width = int(counts.max())
    at = torch.arange(row.numel(), device=dev) - (torch.cumsum(counts, 0) - counts)[row]
    val = torch.full((rows, width), -math.inf, dtype=s.dtype, device=dev)
    e = torch.zeros_like(val)
    col = torch.full((rows, width), m, dtype=torch.int64, device=dev)  # padding: after every entry
    val[row, at], col[row, at] = v, c
    if rounding is not None:
        e[row, at] = _at(rounding, row, c if where is None else where[row, c])
    return _by_groups(val, col, e, m, top, in_index_order=True)


def _by_groups(val: torch.Tensor, col: torch.Tensor, e: torch.Tensor, m: int, top: int, *, in_index_order: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The first ``top`` of candidates ``(val, col)`` with roundings ``e`` ``(rows, C)`` by the tie rule of :func:`block_top`.

    The candidates are sorted by the upper ends :math:`u = \hat s + e` of their intervals (stable, after a sort by
    index unless ``in_index_order``: equal ends by index); the first candidate not yet in a group leads the next
    one, which takes every later candidate whose interval reaches the leader's lower end :math:`l = \hat s - e`.
    A group is a run of that order, so its leaders are the orbit of the first candidate under ``next`` (the first
    candidate whose ``u`` is below one's own ``l``), found by pointer doubling in :math:`\lceil\log_2 C\rceil` steps;
    candidates are then ordered by (group, index).
    """
    rows, width = val.shape
    dev = val.device
    if not in_index_order:
        order = torch.argsort(col, dim=-1)
        val, col, e = (torch.gather(x, -1, order) for x in (val, col, e))
    up = val + e
    order = torch.argsort(up, dim=-1, descending=True, stable=True)  # equal upper ends keep index order
    up, val, col, e = (torch.gather(x, -1, order) for x in (up, val, col, e))
    nxt = torch.searchsorted(-up, e - val, right=True)  # first candidate whose upper end is below one's lower end
    jump = torch.cat([nxt, torch.full((rows, 1), width, dtype=nxt.dtype, device=dev)], dim=-1)
    lead = torch.zeros(rows, width + 1, dtype=torch.int32, device=dev)
    lead[:, 0] = 1
    for _ in range(max(1, (width - 1).bit_length())):  # lead: the orbit's first 2^t members; jump: next^(2^t)
        lead = lead | torch.zeros_like(lead).scatter_add_(-1, jump, lead).clamp_max_(1)
        jump = torch.gather(jump, -1, jump)
    group = torch.cumsum(lead[:, :width], dim=-1)
    pick = torch.argsort(group * (m + 1) + col, dim=-1)[:, :top]  # by group, then by index
    return torch.gather(val, -1, pick), torch.gather(col, -1, pick)


def block_top(s: torch.Tensor, top: int, rounding: Rounding | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The ``top`` largest entries of each row of ``s`` ``(rows, M)``, largest first, entries tied up to rounding by index.

    With ``rounding = (row, col)`` (:func:`logit_rounding`: ``(rows, 1)`` and ``(M,)`` or ``(rows, M)``), entry
    :math:`\hat s_{ij}` is known to :math:`e_{ij} = \mathrm{row}_i\,\mathrm{col}_j`, i.e. lies in
    :math:`[\hat s_{ij} - e_{ij}, \hat s_{ij} + e_{ij}]`, and two entries whose intervals meet,

    .. math::

        |\hat s_{ij} - \hat s_{ij'}| \le e_{ij} + e_{ij'},

    are tied: which one a BLAS kernel rounded up must not decide their order.  Entries are grouped from the
    largest upper end down, each group led by the first entry left and holding every later entry whose interval
    meets the leader's (a group spans at most its leader's interval, so no chain of near ties merges distinct
    values); groups are listed in that order, each group's entries by increasing index, and each row's first
    ``top`` kept (ties across the cut by index too).  Entries whose intervals are disjoint keep the order of their
    values.  Without ``rounding`` only exactly equal entries are tied.  The values returned are the entries'
    own, so they are non-increasing up to the rounding.

    Most rows have no ties and cost one ``torch.topk``.  For long rows the candidates come from one cheap pass first:
    the row is cut into chunks of at most :math:`\sqrt M` entries (fewer when ``top`` is large), and every entry
    that can be among the ``top`` or tied with them lies in a chunk whose maximum is within :math:`3E` (``E`` the
    row's largest rounding) of the ``top``-th largest chunk maximum, so only those chunks are searched (as many per
    row as the row needing most, at most ``2 top``); a row needing more is searched whole.

    Examples
    --------
    >>> import torch
    >>> s = torch.tensor([[1.0, 3.0, 3.0 + 1e-12, 2.0]], dtype=torch.float64)
    >>> block_top(s, 2)[1].tolist()  # without rounding, 3 + 1e-12 > 3
    [[2, 1]]
    >>> block_top(s, 2, (torch.tensor([[1e-12]], dtype=torch.float64), torch.ones(4, dtype=torch.float64)))[1].tolist()
    [[1, 2]]
    """
    rows, m = s.shape
    chunk = max(16, min(int(math.sqrt(m)), m // (8 * top)))  # about sqrt(M), smaller for a large top: few candidates
    n_chunks = m // chunk
    if n_chunks < 4 * top or rows == 0:
        return _block_top_direct(s, top, rounding)
    main = n_chunks * chunk
    maxima = s[:, :main].reshape(rows, n_chunks, chunk).amax(dim=-1)
    cv, best = torch.topk(maxima, top, dim=-1)
    cv = cv[:, -1:]
    if rounding is not None:
        cv = cv - 3.0 * rounding[0] * rounding[1].amax(dim=-1, keepdim=True)
    need = (maxima >= cv).sum(dim=-1)  # chunks that can hold a candidate: top, more where chunk maxima (nearly) tie
    width = min(int(need.max()), 2 * top)
    whole = need > width  # more than 2 top such chunks: the row searched whole
    if width > top:
        best = torch.topk(maxima, width, dim=-1).indices
    best = best.sort(dim=-1).values  # chunks in index order: columns increase within a row
    idx = (best.unsqueeze(-1) * chunk + torch.arange(chunk, device=s.device)).reshape(rows, width * chunk)
    if main < m:
        idx = torch.cat([idx, torch.arange(main, m, device=s.device).expand(rows, m - main)], dim=-1)
    val, pos = _block_top_direct(torch.gather(s, -1, idx), top, rounding, idx)
    col = torch.gather(idx, -1, pos)
    if bool(whole.any()):
        val[whole], col[whole] = _block_top_direct(s[whole], top, _rows_of(rounding, whole))
    return val, col


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
    logits are equal up to the product's rounding, :math:`|\hat s_{ij} - \hat s_{ij'}| \le e_{ij} + e_{ij'}` with
    :math:`e_{ij} \approx (d + 3)\,\tfrac{\varepsilon}{2}\,\|a_i\|\|b_j\|` (:func:`logit_rounding`, :func:`block_top`), are tied
    and listed by increasing index, so the result does not depend on the BLAS kernel, the block or the keys'
    position in the product.

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
    q, kappa, _, k, batch = checked_inputs(queries, keys, k=k)
    m = kappa.shape[-2]
    top = validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
    block_rows = validate.integer(block_rows, "block_rows", 1, " (None: automatic)", allow_none=True)
    n = q.shape[-2]
    if block_rows is None:
        block_rows = max(1, _BLOCK_BYTES // (m * q.element_size()))
    rows = min(block_rows, n)
    a, b = distance_operands(q, kappa, k=k)
    a, b = flatten_batch(a, batch), flatten_batch(b, batch)
    heads = a.shape[0]
    indices = torch.empty(heads, n, top, dtype=torch.int64, device=q.device)
    logits = torch.empty(heads, n, top, dtype=q.dtype, device=q.device)
    buf = torch.empty(rows, m, dtype=q.dtype, device=q.device)
    for h in range(heads):
        b_t = b[h].transpose(0, 1)
        row, col = logit_rounding(a[h], b[h])
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            s = torch.matmul(a[h, start:stop], b_t, out=buf[: stop - start]).clamp_max_(0.0)
            logits[h, start:stop], indices[h, start:stop] = block_top(s, top, (row[start:stop], col))
    return TopKeyLogits(indices.view(*batch, n, top), logits.view(*batch, n, top))


#: The index configurations :func:`search_top_keys` tries by default, cheapest first: ``(buckets, ef)``, the
#: number of key shells by time coordinate (one HNSW graph each) and HNSW's ``efSearch``.
TRIES = ((1, 16), (1, 32), (1, 64), (4, 32), (4, 64), (1, 128), (4, 128), (1, 256), (4, 256), (16, 128), (16, 512))

_NEIGHBOURS = 32  # HNSW: graph degree (faiss's M)
_MIN_KEYS_PER_TOP = 16  # fewer keys than 16 * top: exact search is as cheap as any index


@dataclass(frozen=True)
class KeySearch:
    r"""Each query's ``top`` keys by :func:`search_top_keys`, with how they were found and how well.

    ``indices``, ``logits``, as :class:`TopKeyLogits` (the logits exact, for the keys found);
    ``method``, ``"exact"`` or the index used, as ``"hnsw(buckets=4, ef=64, neighbours=32)"``;
    ``recall``, the measured top-``top`` recall (1.0 for exact search); ``recall_asked``, the recall
    the index had to reach; ``sample``, how many queries (per key set) it was measured on;
    ``reason``, why exact search was used (``None`` when an index was); ``trials``, every
    configuration tried, ``(method, recall)``, in order.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import search_top_keys
    >>> q, keys = data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(40, 4, 0.5, seed=1)
    >>> found = search_top_keys(q, keys, 4)
    >>> found.method, found.fell_back
    ('exact', True)
    >>> found.reason
    'M = 40 keys < 16 x top = 64: exact search is as cheap as an index'
    """

    indices: torch.Tensor
    logits: torch.Tensor
    method: str
    recall: float
    recall_asked: float
    sample: int
    reason: str | None
    trials: tuple[tuple[str, float], ...]

    @property
    def fell_back(self) -> bool:
        """True when exact search was used because no index was good enough (or none was worth building)."""
        return self.reason is not None

    def summary(self) -> str:
        """One line: the method, the recall measured next to the recall asked, and the reason for a fallback."""
        if self.reason is None:
            return f"{self.method}: top-{self.indices.shape[-1]} recall {self.recall:.3g} on {self.sample} sampled queries " \
                   f"(asked {self.recall_asked:g})"
        return f"exact search (fallback): {self.reason}"


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ImportError("search_top_keys needs faiss: pip install 'hypviz[search]' (faiss-cpu)") from None
    return faiss


def _shells(b: torch.Tensor, buckets: int) -> list[torch.Tensor]:
    r"""Key indices split into ``buckets`` shells of nearly equal size by the time coordinate (equivalently by
    :math:`\|\kappa\|^2 = 2\kappa_t^2 - k`), each sorted."""
    order = torch.argsort(b[:, 0], stable=True)
    return [part.sort().values for part in torch.tensor_split(order, min(buckets, b.shape[0]))]


class _Shell:
    r"""One HNSW graph over a shell of keys, MIPS made L2 by the augmentation :math:`[\kappa, \sqrt{R^2 - \|\kappa\|^2}]`.

    Searched with HNSW's ``efSearch`` passed per call (faiss ``SearchParametersHNSW``), never set on the graph: one
    graph may be searched from several threads at once, each at its own ``ef``."""

    def __init__(self, faiss: Any, keys: torch.Tensor, members: torch.Tensor):
        y = keys[members].double()
        sq = (y * y).sum(dim=-1)
        r2 = float(sq.max())
        aug = torch.cat([y, (r2 - sq).clamp_min(0.0).sqrt().unsqueeze(-1)], dim=-1)
        self.members = members
        self.index = faiss.IndexHNSWFlat(aug.shape[1], _NEIGHBOURS)
        self.index.add(np.ascontiguousarray(aug.float().cpu().numpy()))
        self._params = faiss.SearchParametersHNSW

    def search(self, xq: np.ndarray, top: int, ef: int) -> torch.Tensor:
        kq = min(top, self.members.numel())
        _, labels = self.index.search(xq, kq, params=self._params(efSearch=max(ef, top)))
        lab = torch.from_numpy(labels).to(self.members.device)
        found = self.members[lab.clamp_min(0)]
        return torch.where(lab >= 0, found, torch.full_like(found, -1))


def _rerank(a: torch.Tensor, b: torch.Tensor, b_norm: torch.Tensor, cand: torch.Tensor, top: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top`` best of each row's candidate keys (``-1``: none) by their exact logits ``a_i . b_j``, ties up to
    rounding by index (:func:`block_top`; ``b_norm``, the keys' norms ``|b_j|``)."""
    valid = cand >= 0
    idx = cand.clamp_min(0)
    s = torch.bmm(b[idx], a.unsqueeze(-1)).squeeze(-1).clamp_max_(0.0)
    s = torch.where(valid, s, torch.full_like(s, -math.inf))
    # drop duplicate candidates (a key found twice): sort by index, keep the first of each run
    idx_sorted, perm = torch.sort(torch.where(valid, idx, torch.full_like(idx, b.shape[0])), dim=-1, stable=True)
    s = torch.gather(s, -1, perm)
    dup = torch.zeros_like(valid)
    dup[:, 1:] = idx_sorted[:, 1:] == idx_sorted[:, :-1]
    s = s.masked_fill(dup, -math.inf)
    row, _ = logit_rounding(a, b[:1])
    logits, pos = block_top(s, top, (row, b_norm[idx_sorted.clamp_max(b.shape[0] - 1)]))
    return torch.gather(idx_sorted, -1, pos), logits


def _recall(logits: torch.Tensor, exact: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    r"""Tie-aware top-``top`` recall: the share of found keys whose exact logit reaches the exact ``top``-th logit
    (to the rounding of the dot product, :math:`\gamma_{d+3}\|a_i\|\max_j\|b_j\|`, :func:`logit_rounding`)."""
    row, col = logit_rounding(a, b)
    return float((logits >= exact[:, -1:] - row * col.max()).double().mean())


def search_top_keys(
    queries: ArrayLike,
    keys: ArrayLike,
    top: int,
    *,
    k: float = 1.0,
    recall: float = 0.9,
    sample: int = 256,
    seed: int = 0,
    tries: Sequence[tuple[int, int]] = TRIES,
) -> KeySearch:
    r"""Each query's ``top`` keys of largest distance logit by an approximate index, chosen by measured recall.

    The logit is an inner product (identity 1), and on the hyperboloid the keys' Euclidean norms are
    fixed by their time coordinate, :math:`\|\kappa\|^2 = 2\kappa_t^2 - k`:

    .. math::

        s_{ij} = (J q_i)\cdot\kappa_j + k, \qquad
        \|(J q_i, 0) - (\kappa_j, \sqrt{R^2 - \|\kappa_j\|^2})\|^2 = \|q_i\|^2 + R^2 - 2\,(J q_i)\cdot\kappa_j,

    so within a shell of keys (:math:`R^2` its largest :math:`\|\kappa\|^2`) the top keys are the
    Euclidean nearest neighbours of :math:`(Jq, 0)` among the augmented keys.  The keys are cut into
    ``buckets`` shells of equal size by :math:`\kappa_t` (few shells suffice for keys of similar norms;
    keys whose norms spread over orders of magnitude, deep trees, need more, since one :math:`R` makes
    the augmented coordinate dominate), each shell gets a faiss HNSW graph, each query's best keys of
    every shell are re-ranked by their exact logits (:func:`exact_top_keys`'s operands).

    The configurations ``tries`` are tried in order on ``sample`` queries drawn with ``seed``; the
    first whose tie-aware recall (the share of the keys found whose exact logit reaches the exact
    ``top``-th logit) is at least ``recall`` answers every query.  When none does, or when
    ``M < 16 top`` (exact search is as cheap), the result is exact search and says why
    (:attr:`KeySearch.reason`).  Keys whose logits are equal up to rounding are listed by index
    (:func:`block_top`), and the queries are searched in blocks whose candidates fit 32 MiB
    (:meth:`KeyIndex.search`).  Each key set of a batch gets its own index (:func:`fit_key_index`);
    the result names each one's method and reports the smallest recall.

    Parameters
    ----------
    queries : array_like
        ``(..., N, d + 1)`` points on the hyperboloid, time coordinate first.
    keys : array_like
        ``(..., M, d + 1)``, same dtype and device; leading axes broadcast, one index per key set.
    top : int
        How many keys per query, ``1 <= top <= M``.
    k : float
        The curvature parameter, :math:`\langle x, x\rangle_L = -k`.
    recall : float
        The recall an index must reach on the sample, in :math:`(0, 1]`.
    sample : int
        How many queries (per key set) the recall is measured on (all queries when fewer).
    seed : int
        The seed of the sample's draw.
    tries : sequence of (int, int)
        ``(buckets, ef)`` pairs of integers from 1 to ``key_search.TRIES_MAX`` = 65,536, the index configurations
        in the order tried (default ``key_search.TRIES``); one whose candidates per query are too many
        (:meth:`KeyIndex.search`: more than ``M / 4`` or than 16 MiB of gathered keys) is skipped, never built.

    Returns
    -------
    KeySearch
        ``indices`` and ``logits`` ``(..., N, top)``, the method, the measured recall, the reason for
        a fallback and every configuration tried.

    Raises
    ------
    ImportError
        When faiss is not installed (the extra ``hypviz[search]``).
    ValueError
        For the arguments :func:`exact_top_keys` refuses, a ``recall`` outside :math:`(0, 1]`, a bad
        ``sample``, ``seed`` or ``tries``.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import exact_top_keys, search_top_keys
    >>> q, keys = data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(40, 4, 0.5, seed=1)
    >>> found = search_top_keys(q, keys, 4)  # 40 keys: exact search, said so in found.reason
    >>> bool((found.indices == exact_top_keys(q, keys, 4).indices).all()), found.recall
    (True, 1.0)
    """
    q, kappa, _, k, batch = checked_inputs(queries, keys, k=k)
    m = kappa.shape[-2]
    top = validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
    asked, sample, seed, tries = _check_search(recall, sample, seed, tries)
    faiss = _import_faiss()
    q, kappa = flatten_batch(q, batch), flatten_batch(kappa, batch)
    n = q.shape[-2]
    found = [_fit(faiss, q[h], kappa[h], k, top, asked, sample, seed, tries).search(q[h], top) for h in range(q.shape[0])]
    methods = list(dict.fromkeys(f.method for f in found))
    reasons = list(dict.fromkeys(f.reason for f in found if f.reason is not None))
    trials = tuple(t for f in found for t in f.trials)
    return KeySearch(torch.stack([f.indices for f in found]).view(*batch, n, top),
                     torch.stack([f.logits for f in found]).view(*batch, n, top),
                     " | ".join(methods), min(f.recall for f in found), asked, found[0].sample,
                     "; ".join(reasons) if reasons else None, trials)


def fit_key_index(
    queries: ArrayLike,
    keys: ArrayLike,
    top: int,
    *,
    k: float = 1.0,
    recall: float = 0.9,
    sample: int = 256,
    seed: int = 0,
    tries: Sequence[tuple[int, int]] = TRIES,
) -> "KeyIndex":
    r"""The index of :func:`search_top_keys` for one key set, fitted once and kept: :meth:`KeyIndex.search` answers
    any queries of that key set (in blocks, at any ``top``) without building it again.

    The configuration is picked as in :func:`search_top_keys`, on ``sample`` of ``queries`` at this ``top``
    (:attr:`KeyIndex.recall`, measured there); an index that reached no configuration is exact search, with
    the reason (:attr:`KeyIndex.reason`).

    Parameters
    ----------
    queries : array_like
        ``(..., N, d + 1)`` points the recall is measured on (a sample of them).
    keys : array_like
        ``(M, d + 1)``, one key set.
    top, k, recall, sample, seed, tries
        As for :func:`search_top_keys`.

    Returns
    -------
    KeyIndex
        The fitted index: its method, measured recall and reason, and :meth:`KeyIndex.search`.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import fit_key_index
    >>> q, keys = data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(40, 4, 0.5, seed=1)
    >>> fit_key_index(q, keys, 4).recall  # 40 keys: exact search, recall 1
    1.0
    """
    q, kappa, _, k, _batch = checked_inputs(queries, keys, k=k)
    if kappa.dim() != 2:
        raise ValueError(f"keys must be one key set of shape (M, d + 1), got shape {tuple(kappa.shape)}")
    m = kappa.shape[0]
    top = validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
    asked, sample, seed, tries = _check_search(recall, sample, seed, tries)
    faiss = _import_faiss()
    return _fit(faiss, q.reshape(-1, q.shape[-1]), kappa, k, top, asked, sample, seed, tries)


class KeyIndex:
    r"""A top-key index over one key set, from :func:`fit_key_index`.

    ``method``, ``recall``, ``recall_asked``, ``sample``, ``reason`` and ``trials`` as in :class:`KeySearch`;
    ``top``, the number of keys the recall was measured at.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import fit_key_index
    >>> q, keys = data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(40, 4, 0.5, seed=1)
    >>> index = fit_key_index(q, keys, 4)
    >>> index.method, index.search(q, 2).indices.shape
    ('exact', torch.Size([8, 2]))
    """

    def __init__(self, keys: torch.Tensor, shells: list[_Shell] | None, ef: int, method: str, recall: float,
                 asked: float, top: int, sample: int, reason: str | None, trials: tuple[tuple[str, float], ...], *, k: float):
        self.keys, self.k, self.shells, self.ef = keys, k, shells, ef
        self.method, self.recall, self.recall_asked, self.top = method, recall, asked, top
        self.sample, self.reason, self.trials = sample, reason, trials
        self._b = distance_operands(keys[:1], keys, k=k)[1]
        self._b_norm = self._b.norm(dim=-1)
        self._fingerprint = _fingerprint(keys, k)

    def check_keys(self, keys: ArrayLike, *, k: float = 1.0, name: str = "search") -> None:
        r"""Refuse keys other than the ones this index was built on (a ``ValueError`` naming the index).

        The index keeps a fingerprint of its keys: their shape, dtype, ``k`` and the SHA-256 of their bytes
        (one pass over the ``M (d + 1)`` numbers, about 1.8 GB/s: 5 ms for 16,384 keys of ``d = 64`` in float64).
        Other keys, the same keys permuted or changed in place, another dtype, ``k`` or more than one key set
        (heads) are refused.

        Parameters
        ----------
        keys : array_like
            ``(M, d + 1)`` or ``(1, M, d + 1)``, the keys the index is about to be used for.
        k : float
            Their curvature parameter.
        name : str
            The argument the index was passed as, for the message.

        Examples
        --------
        >>> from hypviz import data
        >>> from hypviz.attention import fit_key_index
        >>> q, keys = data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(40, 4, 0.5, seed=1)
        >>> index = fit_key_index(q, keys, 4)
        >>> index.check_keys(keys)  # the same keys: nothing to say
        >>> index.check_keys(keys.flip(0))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: search must be an index of these keys: the KeyIndex was built on other keys (same shape (40, 5), ...
        """
        try:
            t = keys if isinstance(keys, torch.Tensor) else torch.as_tensor(keys)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"keys must be a tensor or array of points, got {validate._shown(keys)}") from None
        t = t[0] if t.dim() == 3 and t.shape[0] == 1 else t
        mine = self._fingerprint
        head = f"{name} must be an index of these keys: the KeyIndex was built on"
        if t.dim() != 2:
            got = f"{t.shape[0]} key sets of shape {tuple(t.shape[1:])}" if t.dim() == 3 else f"keys of shape {tuple(t.shape)}"
            raise ValueError(f"{head} one key set of shape {mine[0]}, got {got}; fit one index per key set with fit_key_index")
        theirs = _fingerprint(t, check_k(k))
        if theirs != mine:
            what = (f"same shape {mine[0]}, {mine[1]}, k = {mine[2]:g}, other values" if theirs[:3] == mine[:3] else
                    f"shape {mine[0]}, {mine[1]}, k = {mine[2]:g}; got shape {theirs[0]}, {theirs[1]}, k = {theirs[2]:g}")
            raise ValueError(f"{head} other keys ({what}); fit it on these keys with fit_key_index")

    def search(self, queries: ArrayLike, top: int | None = None) -> KeySearch:
        r"""Each query's ``top`` (default the fitted ``top``) keys by this index, as a :class:`KeySearch`.

        Safe to call from several threads at once (HNSW's ``ef`` is passed per call).  The queries are searched in
        blocks whose candidates (each shell's ``top`` per query: their labels, then their keys gathered for the exact
        re-ranking) fit ``key_search._BLOCK_BYTES`` = 32 MiB; when one query's candidates would not (their keys more
        than half of it), or would be more than a quarter of the keys (``M / 4``: the exact product is then cheaper),
        or when ``M < 16 top``, exact search answers, with the reason.

        Parameters
        ----------
        queries : array_like
            ``(..., N, d + 1)`` points of the index's dtype and device.
        top : int, optional
            How many keys per query, ``1 <= top <= M``; the recall reported is the one measured at the fitted ``top``.

        Returns
        -------
        KeySearch
            ``indices`` and ``logits`` ``(..., N, top)`` and this index's method, recall and reason.
        """
        q, _, _, k, _batch = checked_inputs(queries, self.keys[:1], k=self.k)  # the keys were checked by the fit
        m = self.keys.shape[-2]
        top = self.top if top is None else validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
        why = self.reason if self.shells is None else _too_costly(self.shells, m, top, self._b)
        if why is not None:
            res = exact_top_keys(q, self.keys, top, k=k)
            return KeySearch(res.indices, res.logits, "exact", 1.0, self.recall_asked, self.sample, why, self.trials)
        assert self.shells is not None  # without shells self.reason says why, and the exact search answered
        idx, logits = _search(self.shells, q.reshape(-1, q.shape[-1]), self.keys, self._b, self._b_norm, k, top, self.ef)
        shape = (*q.shape[:-1], top)
        return KeySearch(idx.view(shape), logits.view(shape), self.method, self.recall, self.recall_asked, self.sample,
                         None, self.trials)


def _fingerprint(keys: torch.Tensor, k: float) -> tuple[tuple[int, ...], str, float, str]:
    """``(shape, dtype, k, SHA-256 of the bytes)`` of a key set."""
    data = keys.detach().cpu().contiguous().numpy()
    digest = hashlib.sha256(data.data.cast("B")).hexdigest()
    return tuple(keys.shape), str(keys.dtype).removeprefix("torch."), float(k), digest


def _check_search(recall: Any, sample: Any, seed: Any, tries: Any) -> tuple[float, int, int, tuple[tuple[int, int], ...]]:
    asked = validate.positive(recall, "recall")
    if asked > 1.0:
        raise ValueError(f"recall must be a number in (0, 1], got {recall!r}")
    return asked, validate.integer(sample, "sample", 1), validate.seed(seed), _check_tries(tries)


def _fit(faiss: Any, q: torch.Tensor, keys: torch.Tensor, k: float, top: int, asked: float, sample: int, seed: int,
         tries: tuple[tuple[int, int], ...]) -> KeyIndex:
    """Pick the first configuration of ``tries`` whose recall on a sample of the queries ``q (N, c)`` reaches ``asked``;
    configurations whose candidates per query :func:`_too_costly` refuses are skipped (never built)."""
    m, n = keys.shape[0], q.shape[0]
    rows = min(sample, n)
    if m < _MIN_KEYS_PER_TOP * top:
        return KeyIndex(keys, None, 0, "exact", 1.0, asked, top, rows, k=k, reason=f"M = {m} keys < {_MIN_KEYS_PER_TOP} x top = "
                        f"{_MIN_KEYS_PER_TOP * top}: exact search is as cheap as an index", trials=())
    g = torch.Generator().manual_seed(seed)
    picked = torch.randperm(n, generator=g)[:rows].sort().values.to(q.device)
    a, b = distance_operands(q[picked], keys, k=k)
    b_norm = b.norm(dim=-1)
    truth = _exact_rows(a, b, top)  # the sample's exact answers
    trials: list[tuple[str, float]] = []
    shells: dict[int, list[_Shell]] = {}
    skipped = ""
    for buckets, ef in tries:
        name = f"hnsw(buckets={buckets}, ef={ef}, neighbours={_NEIGHBOURS})"
        if buckets not in shells:
            parts = _shells(keys, buckets)
            costly = _too_costly(parts, m, top, b)
            if costly is not None:
                skipped = skipped or f"{name} skipped: {costly}"
                continue
            shells[buckets] = [_Shell(faiss, keys, part) for part in parts]
        _, logits = _search(shells[buckets], q[picked], keys, b, b_norm, k, top, ef)
        got = _recall(logits, truth, a, b)
        trials.append((name, got))
        if got >= asked:
            return KeyIndex(keys, shells[buckets], ef, name, got, asked, top, rows, None, tuple(trials), k=k)
    if trials:
        best = max(trials, key=lambda t: t[1])
        reason = f"no index reached recall {asked:g} on {rows} sampled queries (best {best[1]:.3g}, {best[0]})"
    else:
        reason = f"no configuration is cheaper than exact search ({skipped})"
    return KeyIndex(keys, None, 0, "exact", 1.0, asked, top, rows, k=k, reason=reason, trials=tuple(trials))


#: The largest number of shells (buckets) and HNSW ``ef`` in ``tries``.
TRIES_MAX = 2**16

_CANDIDATE_OVERHEAD = 128  # bytes per candidate beside its gathered key: its index, logit, sort and tie passes
_LABEL_BYTES = 48  # bytes per candidate of a block searched by faiss: its label (all shells) and one shell's passes


def _candidate_bytes(b: torch.Tensor) -> int:
    """Bytes one candidate key of one query holds while a block of queries is re-ranked: its key ``b_j`` gathered,
    ``d + 3`` numbers, and the overhead of its index, logit and sorts."""
    return b.shape[-1] * b.element_size() + _CANDIDATE_OVERHEAD


def _too_costly(shells: Sequence[Any], m: int, top: int, b: torch.Tensor) -> str | None:
    r"""Why an index search at ``top`` is no cheaper than exact search, or ``None``: ``M < 16 top``, or the candidates per
    query, :math:`C = \sum_{\text{shells}} \min(\mathrm{top}, |\text{shell}|)`, more than :math:`M / 4` (re-ranking a
    candidate costs more than its column of the exact product) or more than half of ``_BLOCK_BYTES`` hold for one query."""
    if m < _MIN_KEYS_PER_TOP * top:
        return f"M = {m} keys < {_MIN_KEYS_PER_TOP} x top = {_MIN_KEYS_PER_TOP * top}: exact search is as cheap as an index"
    sizes = [int(s.members.numel()) if isinstance(s, _Shell) else int(s.numel()) for s in shells]
    per_query = sum(min(top, size) for size in sizes)
    fits = _BLOCK_BYTES // 2 // _candidate_bytes(b)
    if per_query > min(m // 4, fits):
        return (f"top {top} from each of {len(sizes)} shells is {per_query} candidate keys per query, more than "
                f"min(M / 4 = {m // 4}, {fits} whose keys fit {_BLOCK_BYTES / 2**21:g} MiB): exact search is cheaper")
    return None


def _check_tries(tries: Any) -> tuple[tuple[int, int], ...]:
    expected = f"a non-empty sequence of (buckets, ef) pairs of integers from 1 to {TRIES_MAX}"
    try:
        pairs = tuple(tuple(pair) for pair in tries)
        ok = len(pairs) > 0 and all(len(pair) == 2 for pair in pairs) and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and 1 <= int(v) <= TRIES_MAX
            for pair in pairs for v in pair)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"tries must be {expected}, got {validate._shown(tries)}")
    return tuple((int(bk), int(ef)) for bk, ef in pairs)


def _jq(q: torch.Tensor) -> np.ndarray:
    r"""Queries in the augmented picture, :math:`(J q, 0)`, float32 for faiss."""
    x = torch.cat([-q[:, :1], q[:, 1:], torch.zeros_like(q[:, :1])], dim=-1)
    return np.ascontiguousarray(x.float().cpu().numpy())


def _exact_rows(a: torch.Tensor, b: torch.Tensor, top: int) -> torch.Tensor:
    """The ``top`` exact logits of each row of ``a @ b.T``, in blocks of rows of at most ``_BLOCK_BYTES`` of logits."""
    rows = max(1, _BLOCK_BYTES // (b.shape[0] * b.element_size()))
    out = [block_top((a[i : i + rows] @ b.transpose(0, 1)).clamp_max_(0.0), top, logit_rounding(a[i : i + rows], b))[0]
           for i in range(0, a.shape[0], rows)]
    return torch.cat(out)


def _search(shells: list[_Shell], q: torch.Tensor, keys: torch.Tensor, b: torch.Tensor, b_norm: torch.Tensor, k: float,
            top: int, ef: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's ``top`` keys: each shell's ``top`` nearest in faiss's picture, re-ranked by their exact logits.

    In blocks of queries whose candidates' labels take at most half of ``_BLOCK_BYTES`` (one faiss call per shell and
    block), re-ranked in sub-blocks whose gathered keys take at most the other half (at least one query each)."""
    n = q.shape[0]
    per_query = sum(min(top, int(shell.members.numel())) for shell in shells)
    rows = max(1, _BLOCK_BYTES // 2 // (per_query * _LABEL_BYTES))
    sub = max(1, _BLOCK_BYTES // 2 // (per_query * _candidate_bytes(b)))
    out_i = torch.empty(n, top, dtype=torch.int64, device=q.device)
    out_l = torch.empty(n, top, dtype=q.dtype, device=q.device)
    for start in range(0, n, rows):
        block = q[start : start + rows]
        xq = _jq(block)  # the block in faiss's picture (J q, 0)
        cand = torch.cat([shell.search(xq, top, ef) for shell in shells], dim=-1)
        for i in range(0, block.shape[0], sub):
            a = distance_operands(block[i : i + sub], keys[:1], k=k)[0]
            at = slice(start + i, start + min(i + sub, block.shape[0]))
            out_i[at], out_l[at] = _rerank(a, b, b_norm, cand[i : i + sub], top)
    return out_i, out_l
