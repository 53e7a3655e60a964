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

import math
import numbers
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

from hypviz.attention.checks import checked_inputs, flatten_batch
from hypviz.base import validate
from hypviz.lorentz import distance_operands

__all__ = ["TopKeyLogits", "exact_top_keys", "KeySearch", "search_top_keys", "KeyIndex", "fit_key_index"]

ArrayLike = Any

_BLOCK_BYTES = 32 * 2**20  # exact search: bytes of one (rows x M) block of logits


class TopKeyLogits(NamedTuple):
    r"""Each query's ``top`` strongest keys and their distance logits (see :func:`exact_top_keys`).

    ``indices``, ``(..., N, top)`` int64, the keys' indices, strongest first, keys with equal logits
    in increasing index order; ``logits``, ``(..., N, top)`` in the points' dtype, their logits
    :math:`s_{ij} = -\frac12\|q_i - \kappa_j\|_L^2 \le 0`, non-increasing along the last axis.

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


def _block_top_direct(s: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`block_top` on every entry of each row: ``torch.topk``, then, within each row's ``top``, equal values put in
    index order; a row where more entries than ``top`` reach its ``top``-th value (a tie across the cut) takes
    every entry at least that value as a candidate, sorted stably by value."""
    rows = s.shape[0]
    val, col = torch.topk(s, top, dim=-1)
    order = torch.argsort(col, dim=-1)
    val, col = torch.gather(val, -1, order), torch.gather(col, -1, order)
    order = torch.argsort(val, dim=-1, descending=True, stable=True)  # by value, equal values by index
    val, col = torch.gather(val, -1, order), torch.gather(col, -1, order)
    across = (s >= val[:, -1:]).sum(dim=-1) > top
    if bool(across.any()):
        sub = s[across]
        row, c = torch.nonzero(sub >= val[across, -1:], as_tuple=True)  # row-major: columns increase within a row
        v = sub[row, c]
        o = torch.argsort(v, descending=True, stable=True)
        o = o[torch.argsort(row[o], stable=True)]  # grouped by row, by value within, ties by column
        row, c, v = row[o], c[o], v[o]
        counts = torch.bincount(row, minlength=sub.shape[0])
        starts = torch.cumsum(counts, 0) - counts
        keep = torch.arange(row.numel(), device=s.device) - starts[row] < top
        val[across], col[across] = v[keep].view(-1, top), c[keep].view(-1, top)
    return val, col


def block_top(s: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The ``top`` largest entries of each row of ``s`` ``(rows, M)``, largest first, equal entries by index.

    ``torch.topk`` leaves the order of equal entries unspecified; here every entry at least the
    ``top``-th largest is a candidate, candidates are sorted by value (descending, stable) within
    their row, so equal values keep increasing index order, and each row's first ``top`` are kept.
    For long rows the candidates come from one cheap pass first: the row is cut into chunks of at most
    :math:`\sqrt M` entries (fewer when ``top`` is large), and every entry at least the ``top``-th largest lies in a chunk whose maximum
    is at least the ``top``-th largest chunk maximum (``top`` chunks hold all the ``top`` largest entries),
    so only those chunks are searched; a row where more than ``top`` chunk maxima tie at that value is
    searched whole.
    """
    rows, m = s.shape
    chunk = max(16, min(int(math.sqrt(m)), m // (8 * top)))  # about sqrt(M), smaller for a large top: few candidates
    n_chunks = m // chunk
    if n_chunks < 4 * top or rows == 0:
        return _block_top_direct(s, top)
    main = n_chunks * chunk
    maxima = s[:, :main].reshape(rows, n_chunks, chunk).amax(dim=-1)
    cv, best = torch.topk(maxima, top, dim=-1)
    tied = (maxima >= cv[:, -1:]).sum(dim=-1) > top
    best = best.sort(dim=-1).values  # chunks in index order: candidates' columns increase within a row
    idx = (best.unsqueeze(-1) * chunk + torch.arange(chunk, device=s.device)).reshape(rows, top * chunk)
    if main < m:
        idx = torch.cat([idx, torch.arange(main, m, device=s.device).expand(rows, m - main)], dim=-1)
    val, pos = _block_top_direct(torch.gather(s, -1, idx), top)
    col = torch.gather(idx, -1, pos)
    if bool(tied.any()):
        val[tied], col[tied] = _block_top_direct(s[tied], top)
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
    q, kk, _, kf, batch = checked_inputs(queries, keys, k=k)
    m = kk.shape[-2]
    top = validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
    block_rows = validate.integer(block_rows, "block_rows", 1, " (None: automatic)", allow_none=True)
    n = q.shape[-2]
    if block_rows is None:
        block_rows = max(1, _BLOCK_BYTES // (m * q.element_size()))
    rows = min(block_rows, n)
    a, b = distance_operands(q, kk, k=kf)
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
    r"""One HNSW graph over a shell of keys, MIPS made L2 by the augmentation :math:`[\kappa, \sqrt{R^2 - \|\kappa\|^2}]`."""

    def __init__(self, faiss: Any, keys: torch.Tensor, members: torch.Tensor):
        y = keys[members].double()
        sq = (y * y).sum(dim=-1)
        r2 = float(sq.max())
        aug = torch.cat([y, (r2 - sq).clamp_min(0.0).sqrt().unsqueeze(-1)], dim=-1)
        self.members = members
        self.index = faiss.IndexHNSWFlat(aug.shape[1], _NEIGHBOURS)
        self.index.add(np.ascontiguousarray(aug.float().cpu().numpy()))

    def search(self, xq: np.ndarray, top: int, ef: int) -> torch.Tensor:
        self.index.hnsw.efSearch = max(ef, top)
        kq = min(top, self.members.numel())
        _, labels = self.index.search(xq, kq)
        lab = torch.from_numpy(labels).to(self.members.device)
        found = self.members[lab.clamp_min(0)]
        return torch.where(lab >= 0, found, torch.full_like(found, -1))


def _rerank(a: torch.Tensor, b: torch.Tensor, cand: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top`` best of each row's candidate keys (``-1``: none) by their exact logits ``a_i . b_j``, ties by index."""
    valid = cand >= 0
    idx = cand.clamp_min(0)
    s = torch.einsum("nc,nmc->nm", a, b[idx]).clamp_max_(0.0)
    s = torch.where(valid, s, torch.full_like(s, -math.inf))
    # drop duplicate candidates (a key found twice): sort by index, keep the first of each run
    idx_sorted, perm = torch.sort(torch.where(valid, idx, torch.full_like(idx, b.shape[0])), dim=-1, stable=True)
    s = torch.gather(s, -1, perm)
    dup = torch.zeros_like(valid)
    dup[:, 1:] = idx_sorted[:, 1:] == idx_sorted[:, :-1]
    s = s.masked_fill(dup, -math.inf)
    logits, pos = block_top(s, top)
    return torch.gather(idx_sorted, -1, pos), logits


def _recall(logits: torch.Tensor, exact: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    r"""Tie-aware top-``top`` recall: the share of found keys whose exact logit reaches the exact ``top``-th logit
    (to the rounding of the dot product, :math:`(d + 3)\,\varepsilon\,\|a_i\|\max_j\|b_j\|`)."""
    eps = torch.finfo(a.dtype).eps
    tol = (a.shape[-1] * eps) * a.norm(dim=-1, keepdim=True) * b.norm(dim=-1).max()
    return float((logits >= exact[:, -1:] - tol).double().mean())


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
    (:attr:`KeySearch.reason`).  Each key set of a batch gets its own index (:func:`fit_key_index`);
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
        ``(buckets, ef)`` pairs, the index configurations in the order tried (default ``key_search.TRIES``).

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
    q, kk, _, kf, batch = checked_inputs(queries, keys, k=k)
    m = kk.shape[-2]
    top = validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
    asked, sample, seed, tries = _check_search(recall, sample, seed, tries)
    faiss = _import_faiss()
    qf, kf_ = flatten_batch(q, batch), flatten_batch(kk, batch)
    n = q.shape[-2]
    found = [_fit(faiss, qf[h], kf_[h], kf, top, asked, sample, seed, tries).search(qf[h], top) for h in range(qf.shape[0])]
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
    q, kk, _, kf, _batch = checked_inputs(queries, keys, k=k)
    if kk.dim() != 2:
        raise ValueError(f"keys must be one key set of shape (M, d + 1), got shape {tuple(kk.shape)}")
    m = kk.shape[0]
    top = validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
    asked, sample, seed, tries = _check_search(recall, sample, seed, tries)
    faiss = _import_faiss()
    return _fit(faiss, q.reshape(-1, q.shape[-1]), kk, kf, top, asked, sample, seed, tries)


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

    def search(self, queries: ArrayLike, top: int | None = None) -> KeySearch:
        r"""Each query's ``top`` (default the fitted ``top``) keys by this index, as a :class:`KeySearch`.

        Parameters
        ----------
        queries : array_like
            ``(..., N, d + 1)`` points of the index's dtype and device.
        top : int, optional
            How many keys per query; the recall reported is the one measured at the fitted ``top``.

        Returns
        -------
        KeySearch
            ``indices`` and ``logits`` ``(..., N, top)`` and this index's method, recall and reason.
        """
        q, kk, _, kf, batch = checked_inputs(queries, self.keys, k=self.k)
        m = kk.shape[-2]
        top = self.top if top is None else validate.integer(top, "top", 1, f" (the number of keys, M = {m})", maximum=m)
        if self.shells is None:
            res = exact_top_keys(q, kk, top, k=kf)
            return KeySearch(res.indices, res.logits, "exact", 1.0, self.recall_asked, self.sample, self.reason, self.trials)
        flat = q.reshape(-1, q.shape[-1])
        n = flat.shape[0]
        out_i = torch.empty(n, top, dtype=torch.int64, device=q.device)
        out_l = torch.empty(n, top, dtype=q.dtype, device=q.device)
        for start in range(0, n, _SEARCH_ROWS):
            rows = flat[start : start + _SEARCH_ROWS]
            a = distance_operands(rows, kk[:1], k=kf)[0]
            out_i[start : start + rows.shape[0]], out_l[start : start + rows.shape[0]] = _search(
                self.shells, _jq(rows), a, self._b, top, self.ef)
        shape = (*q.shape[:-1], top)
        return KeySearch(out_i.view(shape), out_l.view(shape), self.method, self.recall, self.recall_asked, self.sample,
                         None, self.trials)


def _check_search(recall: Any, sample: Any, seed: Any, tries: Any) -> tuple[float, int, int, tuple[tuple[int, int], ...]]:
    asked = validate.positive(recall, "recall")
    if asked > 1.0:
        raise ValueError(f"recall must be a number in (0, 1], got {recall!r}")
    return asked, validate.integer(sample, "sample", 1), validate.seed(seed), _check_tries(tries)


def _fit(faiss: Any, q: torch.Tensor, kk: torch.Tensor, kf: float, top: int, asked: float, sample: int, seed: int,
         tries: tuple[tuple[int, int], ...]) -> KeyIndex:
    """Pick the first configuration of ``tries`` whose recall on a sample of the queries ``q (N, c)`` reaches ``asked``."""
    m, n = kk.shape[0], q.shape[0]
    rows = min(sample, n)
    if m < _MIN_KEYS_PER_TOP * top:
        return KeyIndex(kk, None, 0, "exact", 1.0, asked, top, rows, k=kf, reason=f"M = {m} keys < {_MIN_KEYS_PER_TOP} x top = "
                        f"{_MIN_KEYS_PER_TOP * top}: exact search is as cheap as an index", trials=())
    g = torch.Generator().manual_seed(seed)
    picked = torch.randperm(n, generator=g)[:rows].sort().values.to(q.device)
    a, b = distance_operands(q[picked], kk, k=kf)
    truth = _exact_rows(a, b, top)  # the sample's exact answers
    xq = _jq(q[picked])  # the sample in faiss's picture (J q, 0)
    trials: list[tuple[str, float]] = []
    shells: dict[int, list[_Shell]] = {}
    for buckets, ef in tries:
        name = f"hnsw(buckets={buckets}, ef={ef}, neighbours={_NEIGHBOURS})"
        if buckets not in shells:
            shells[buckets] = [_Shell(faiss, kk, part) for part in _shells(kk, buckets)]
        _, logits = _search(shells[buckets], xq, a, b, top, ef)
        got = _recall(logits, truth, a, b)
        trials.append((name, got))
        if got >= asked:
            return KeyIndex(kk, shells[buckets], ef, name, got, asked, top, rows, None, tuple(trials), k=kf)
    best = max(trials, key=lambda t: t[1])
    return KeyIndex(kk, None, 0, "exact", 1.0, asked, top, rows, k=kf, reason=
                    f"no index reached recall {asked:g} on {rows} sampled queries (best {best[1]:.3g}, {best[0]})",
                    trials=tuple(trials))


_SEARCH_ROWS = 4096  # queries per faiss call (bounds the candidates' gathered keys)


def _check_tries(tries: Any) -> tuple[tuple[int, int], ...]:
    expected = "a non-empty sequence of (buckets, ef) pairs of positive integers"
    try:
        out = tuple((int(bk), int(ef)) for bk, ef in tries)
        ok = len(out) > 0 and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for pair in tries for v in pair)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"tries must be {expected}, got {validate._shown(tries)}")
    return out


def _jq(q: torch.Tensor) -> np.ndarray:
    r"""Queries in the augmented picture, :math:`(J q, 0)`, float32 for faiss."""
    x = torch.cat([-q[:, :1], q[:, 1:], torch.zeros_like(q[:, :1])], dim=-1)
    return np.ascontiguousarray(x.float().cpu().numpy())


def _exact_rows(a: torch.Tensor, b: torch.Tensor, top: int) -> torch.Tensor:
    s = (a @ b.transpose(0, 1)).clamp_max_(0.0)
    return block_top(s, top)[0]


def _search(shells: list[_Shell], xq: np.ndarray, a: torch.Tensor, b: torch.Tensor, top: int, ef: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    cand = torch.cat([shell.search(xq, top, ef) for shell in shells], dim=-1)
    return _rerank(a, b, cand, top)
