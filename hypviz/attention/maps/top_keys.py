r"""One query's attention row and its strongest keys, tie-aware: :func:`top_attention`.

The rows are :func:`hypviz.attention.attention_map`'s, at its default temperature
(:math:`\tau = \sqrt{d}`) and for its kinds (:data:`hypviz.attention.KINDS`); nothing is
recomputed here.  What this module adds is the choice of the strongest keys that does not depend
on rounding: keys whose weights are equal up to rounding (exactly symmetric keys of a tree
embedding, keys on a circle around the query) are kept or left out together and listed by index.
Its names are importable from :mod:`hypviz.attention`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import torch

from hypviz import lorentz as L
from hypviz.attention.maps import dense as A
from hypviz.attention.maps.checks import check_temperature
from hypviz.base import kinds as registry
from hypviz.base import validate

__all__ = ["TopKeys", "top_attention", "TIE_RTOL"]

ArrayLike = Any

#: Weights within this relative distance of each other count as tied (rounding, not order).
TIE_RTOL = 1e-9


class TopKeys(NamedTuple):
    r"""One query's attention row and its strongest keys, for one attention kind (see :func:`top_attention`).

    ``kind``: one of :data:`KINDS`; ``row``: ``(M,)`` the query's row of :func:`attention_map` (it
    sums to 1); ``indices``: ``(n,)`` the ``top`` keys with the largest weights *and every key tied
    with the weakest of them* (:math:`n \ge` ``top``; tied: weights equal to a relative ``tie_rtol``,
    the level of rounding, as for exactly symmetric keys of a tree embedding), strongest first, keys
    tied with each other listed by index; ``weights``: ``row[indices]``; ``temperature``: the
    :math:`\tau` used (``None`` for ``"focused"``, which has none).

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import top_attention
    >>> tk = top_attention(queries, keys, top=3, temperature=1.0)["distance"]
    >>> tk.kind, tk.row.shape, tk.indices.tolist()
    ('distance', torch.Size([6]), [0, 1, 2])
    >>> bool(torch.equal(tk.weights, tk.row[tk.indices]))
    True
    """

    kind: str
    row: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor
    temperature: float | None




def _pointset(x: ArrayLike, k: float, name: str) -> torch.Tensor:
    t = L.check_points(x, k=k, name=name)
    if t.dim() != 2:
        raise ValueError(f"{name}: expected one set of points, shape ({name[0].upper()}, d + 1), got {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one point, got shape {tuple(t.shape)}")
    return t


def _index(value: Any, name: str, size: int) -> int:
    return validate.integer(value, name, 0, maximum=size - 1)


def _tolerance(value: Any) -> float:
    rtol = validate.number(value, "tie_rtol", 0.0, hint=" (a relative tolerance below 1)")
    if rtol >= 1.0:
        raise ValueError(f"tie_rtol must be a relative tolerance in [0, 1), got {value!r}")
    return rtol


def top_attention(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    k: float = 1.0,
    query: int = 0,
    kinds: Sequence[str] = ("spatial", "distance"),
    top: int = 8,
    temperature: float | None = None,
    tie_rtol: float = TIE_RTOL,
) -> dict[str, TopKeys]:
    r"""The attention row of one query and its ``top`` strongest keys (ties included), for each attention kind.

    The row is ``attention_map(queries[query], keys, kind, k=k, temperature=temperature)[0]``
    (:func:`hypviz.attention.attention_map`: a row softmax for ``"spatial"``, ``"distance"`` and
    ``"lorentz"``, its default :math:`\tau = \sqrt{d}`; Hypformer's focused linear map, with no
    temperature, for ``"focused"``).  Two positive weights :math:`w \ge w'` are tied when

    .. math::

        w' \ge (1 - \mathrm{tie\_rtol})\, w .

    Parameters
    ----------
    queries : array or tensor, shape (N, d + 1)
        Query points on :math:`\langle x, x\rangle_L = -k`, time first.
    keys : array or tensor, shape (M, d + 1)
        Key points on the same hyperboloid.
    k : float
        Curvature parameter.
    query : int
        Row of ``queries`` to show.
    kinds : sequence of str
        Attention kinds, each one of :data:`hypviz.attention.KINDS`.
    top : int
        Number of strongest keys kept per kind (at most ``M``), extended by every key whose weight is
        tied with the ``top``-th largest: which of exactly tied keys rounding puts first must not
        decide what is shown.
    temperature : float, optional
        The softmax temperature :math:`\tau` (default :math:`\sqrt{d}`, as
        :func:`hypviz.attention.attention_map`).
    tie_rtol : float
        In :math:`[0, 1)`; default ``1e-9`` (``hypviz.attention.maps.top_keys.TIE_RTOL``), far above the rounding of a float64
        softmax, far below any real difference of weights.

    Returns
    -------
    dict
        ``kind -> TopKeys``, in the order of ``kinds``.

    Raises
    ------
    ValueError
        For points off the hyperboloid, queries and keys of different ``d``, a ``query`` index out of
        range, ``top < 1``, a ``tie_rtol`` outside :math:`[0, 1)`, a non-positive ``temperature`` or
        an unknown kind.

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import top_attention
    >>> top = top_attention(queries, keys, query=0, top=3, temperature=1.0)
    >>> sorted(top)
    ['distance', 'spatial']
    >>> [round(w, 3) for w in top["distance"].weights.tolist()]
    [0.276, 0.211, 0.185]
    """
    k = L.check_k(k)
    q = _pointset(queries, k, "queries")
    kappa = _pointset(keys, k, "keys")
    if q.shape[-1] != kappa.shape[-1]:
        raise ValueError(
            f"queries and keys have different numbers of coordinates: {tuple(q.shape)} and {tuple(kappa.shape)}"
        )
    i = _index(query, "query", q.shape[0])
    m = min(validate.integer(top, "top", minimum=1, hint=" (a number of keys)"), kappa.shape[0])
    rtol = _tolerance(tie_rtol)
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if not kinds:
        raise ValueError(f"kinds must be at least one of {', '.join(map(repr, registry.comparable()))}, got none")
    for kind in kinds:
        registry.check(kind, "kinds", registry.comparable())
    out: dict[str, TopKeys] = {}
    for kind in kinds:
        row = A.attention_map(q[i : i + 1], kappa, kind, k=k, temperature=temperature)[0]
        tau = check_temperature(temperature, q.shape[-1] - 1) if registry.get(kind).temperature else None
        order = _strongest(row.detach().cpu().to(torch.float64), m, rtol)
        out[kind] = TopKeys(kind, row, order, row[order.to(row.device)], tau)
    return out


def _strongest(w: torch.Tensor, m: int, rtol: float) -> torch.Tensor:
    """Indices of the ``m`` largest of ``w`` plus all keys tied with the ``m``-th; tied keys by index.

    Ties are decided by the weights' values, never by the order rounding happened to give them:
    a run of weights each within ``rtol`` (relative) of the run's largest is one tie group.
    """
    order = torch.sort(w, descending=True, stable=True).indices
    vals = w[order].tolist()
    cut = vals[m - 1]
    if cut > 0.0:
        while m < len(vals) and vals[m] >= (1.0 - rtol) * cut:
            m += 1
    idx = order[:m].tolist()
    groups: list[list[int]] = []
    lead = None
    for pos, j in enumerate(idx):
        if lead is None or not (vals[pos] > 0.0 and vals[pos] >= (1.0 - rtol) * lead):
            groups.append([])
            lead = vals[pos]
        groups[-1].append(j)
    return torch.tensor([j for g in groups for j in sorted(g)], dtype=torch.long)
