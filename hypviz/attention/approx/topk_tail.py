r"""Distance attention from each query's top keys, exact, and a fitted positive tail: :func:`distance_topk_attention`.

The distance map :math:`P_{ij} = \operatorname{softmax}_j(s_{ij})`, :math:`s_{ij} = -\tfrac12\|q_i - \kappa_j\|_L^2/\tau`
(the logits from the stable operands of :func:`hypviz.lorentz.distance_operands`), is split per query
row into its top keys :math:`T_i` (the :math:`k_i` largest logits), weighted exactly, and the tail,
weighted by a quadratic in the logit measured from the cut :math:`t_i` (the :math:`k_i`-th largest logit):

.. math::

    \hat w_{ij} = \begin{cases} e^{s_{ij} - m_i} & j \in T_i \\
        e^{t_i - m_i}\, p_i(s_{ij} - t_i) & j \notin T_i \end{cases}, \qquad
    p_i(u) = 1 + \beta_i u + \gamma_i u^2 \approx e^u \quad (u \le 0), \qquad
    \hat P_{ij} = \frac{\hat w_{ij}}{\sum_l \hat w_{il}},

with :math:`m_i` the row's largest logit (every exponent is :math:`\le 0`, the largest weight is 1, so
nothing overflows or underflows to a zero row in float32).  :math:`p_i(0) = 1`: the tail meets the top
keys' weights at the cut, so the map is continuous in the logits (a key tied with the cut gets its
exact weight on either side).  :math:`\beta_i, \gamma_i` are fitted by least squares on
:math:`e^u - 1 = \beta u + \gamma u^2` over the keys ranked :math:`k_i + 1 \dots K_i` (exactly) and a
uniform sample of the keys below rank :math:`K_i` (each standing for :math:`(M - K_i)/n` keys), and
kept positive: :math:`\gamma \ge 0` and (:math:`\beta \le 0` or :math:`\beta^2 \le 4\gamma(1 - \eta)`),
so :math:`p_i(u) \ge \eta` for every :math:`u \le 0` (:data:`MARGIN` :math:`= \eta`); a fit outside
that set is replaced by the best of the boundary family :math:`p(u) = 1 + 2cu + c^2u^2/(1 - \eta)`,
:math:`c \ge 0` (a quartic in :math:`c`, minimised from the same moments).

**The tail through key sums.**  With centred keys :math:`b'_j = b_j - \bar b` (:math:`b_j` the key
operands) the logits are :math:`s_{ij} = \bar s_i + y_{ij}`, :math:`y_{ij} = a_i \cdot b'_j`,
:math:`\sum_j y_{ij} = 0`; with :math:`\delta_i = \bar s_i - t_i`,
:math:`p_i(s_{ij} - t_i) = p_i(\delta_i) + p'_i(\delta_i)\, y_{ij} + \gamma_i y_{ij}^2`, so

.. math::

    \sum_{j} p_i(s_{ij} - t_i)\, v_j = p_i(\delta_i) \sum_j v_j + p'_i(\delta_i)\, a_i^\top \Bigl(\sum_j b'_j v_j^\top\Bigr)
        + \gamma_i\, (a_i \otimes a_i) \cdot \sum_j b'_j \otimes b'_j \otimes v_j ,

and the tail is that sum over all keys minus the same over :math:`T_i` (explicit).  Without the top
keys' search this costs :math:`O((N + M)\, c^2 d_v)` (:math:`c = d + 3`), not :math:`O(NM)`.  For
the normaliser (:math:`v = 1`) every term is non-negative: :math:`M p_i(\delta_i) + \gamma_i \sum_j y_{ij}^2`.

**The error estimate and the choice of** :math:`k`.  With :math:`e_j = \hat w_j - w_j` (zero on
:math:`T_i`), :math:`\hat P_j - P_j = e_j/\hat Z - w_j E/(\hat Z Z)`, :math:`E = \sum_j e_j`, so

.. math::

    \mathrm{TV}(\hat P_i, P_i) \le \frac{\sum_{j \notin T_i} |e_{ij}|}{\hat Z_i}
    \approx \hat\varepsilon_i = \frac{e^{t_i - m_i}}{\hat Z_i}\Bigl(\sum_{r = k_i + 1}^{K_i} |p_i(u_r) - e^{u_r}|
        + \frac{M - K_i}{n_i} \sum_{j \in S_i} |p_i(u_j) - e^{u_j}|\Bigr),

exact over the ranks :math:`k_i + 1 \dots K_i` (the largest tail weights) and a uniform-sample estimate
over the keys below rank :math:`K_i` (:math:`S_i`: the :math:`n_i` keys of a second sample, not the
fit's, that fall below the rank-:math:`K_i` logit), unbiased for that part of the bound.  This is
``row_error``.  The row's distance from uniform, :math:`\mathrm{TV}(\hat P_i, U)`, is estimated on the
same strata (``row_baseline``).  Each row takes the smallest :math:`k` of ``top`` with
:math:`\hat\varepsilon_i \le \mathrm{tol}\cdot\mathrm{TV}(\hat P_i, U)`, :math:`K` the next entry of
``top`` (:math:`4k` after the last).  An entry of ``top`` at least :math:`M` means every key exact.

**The bound behind** ``met``.  The estimate can miss what its samples did not draw: a few keys of large norm
("sink" keys) far below the cut, where the quadratic grows like :math:`\gamma u^2`, or one key far above the rest.
So each row also gets a proven bound (``row_bound``) on the same :math:`\sum_{j \notin T_i} |e_{ij}| / \hat Z_i`:
exact over the ranks :math:`k_i + 1 \dots K_i`; below rank :math:`K_i` (exact search: every such logit is at most
the rank-:math:`K_i` one, :math:`u_j \le u_K`, and at least :math:`L_i = \bar s_i - \|a_i\| \max_j \|b'_j\|` by
Cauchy-Schwarz) each error is at most :math:`\max_{[L_i, u_K]} |p_i(u) - e^u|` (a grid plus its curvature term)
and at most :math:`p_i(u_j) + e^{u_j}`, whose sum is exact for :math:`p_i` (key sums less the top :math:`K_i`) and
at most the chord of the convex :math:`e^u` on :math:`[L_i, u_K]` (from :math:`\sum_j u_j = M \delta_i`); plus
what the logits' rounding can add.  A row is ``met`` when this bound is at most ``tol`` times a proven lower bound
on its distance from uniform, :math:`\sum_{r \le K_i} (\hat P_{ir} - 1/M)_+`: a guarantee.  A row whose estimate
meets the target where the bound does not is ``estimated``; so is every row of the tail alone (it has no top keys
to bound the distance from uniform with) and every row an index searched (a key it missed may lie above the cut).
``certify=True`` walks the levels by the bound instead of the estimate, so that every row is ``met`` (sharp rows
at few keys; spread rows, whose bound is loose, with every key exact).

**Rows no entry serves: every key exact.**  A row that meets the target at no entry of ``top`` is computed with
every key exact (``exact_fallback``, the default): ``row_error`` 0, ``met`` true, ``top_counts`` :math:`M`; its
logits are at hand with exact search (the block's product) and cost one product with an index, so it costs
about the exact map's row.  The walk stops early for a row whose error decays too slowly to meet the target by
the last entry: with :math:`\rho_j = \hat\varepsilon_i / (\mathrm{tol}\cdot\mathrm{TV}(\hat P_i, U))` at the
searched entry :math:`j`, the row is computed exactly once :math:`\rho_j\, \min(1, \rho_j/\rho_{j-1})^{a} > 1`,
:math:`a` the searched entries left (a geometric extrapolation; a row it sends too early is exact, never worse).
Without the fallback such a row keeps the last entry and is marked (``met`` false).  The first search reads the
top keys of the first two searched entries at once (one read, sliced).

**The tail alone, no search** (:math:`k = 0`).  The entry 0 of ``top`` (the first of :data:`LEVELS`) is tried
first for every row (unless the next entry already takes every key exactly, which then costs no more): no top
keys, every key weighted by a quadratic in the centred logit,
:math:`q_i(y) = \alpha_i + \beta_i y + \gamma_i y^2`, fitted by least squares to :math:`e^{y - y_0}` on
:data:`TAIL_SAMPLES` :math:`\times` ``samples`` sampled keys (every key when :math:`M` is at most twice that).  Its cut is
:math:`t_i = \bar s_i + D_i`, :math:`D_i = \|a_i\| \max_j \|b'_j\|`, which no logit exceeds (Cauchy-Schwarz:
:math:`y_{ij} \le D_i`), and its polynomial :math:`p_i(u) = q_i(u + D_i)/q_i(D_i)`, kept positive on all of
:math:`\mathbb R`: :math:`\gamma_i \ge 0` and :math:`\beta_i^2 \le 4\gamma_i(1 - \eta)` in the cut's form, so
:math:`p_i \ge \eta` everywhere (a fit outside that set is replaced by the constant, the uniform row).  The estimate
is the same bound over all keys from as many other sampled keys,
:math:`\hat\varepsilon_i = \frac{M}{n} \sum_{j \in S_i} |q_i(y_j) - e^{y_j - y_0}| \big/ \sum_l q_i(y_l)`, with
:math:`\sum_l q_i(y_l) = M\alpha_i + \gamma_i \sum_l y_l^2` exact from the key sums.  A row decided there costs
:math:`O(c^2 d_v)` beyond the key sums; the others go on to the searched levels, whose search runs once per
block of rows (an exact block's logits computed once, every level read from them).

**Where it cannot be accurate.**  When a row's weight is spread over more keys than the largest
:math:`k` while varying faster than a quadratic can follow (Gaussian keys at :math:`r^2/\tau \approx 12.5`,
whose significant keys grow in proportion to :math:`M`), no entry meets the bar: the row is computed with every
key exact (at about the exact map's cost, not sub-quadratic), or, without the fallback, says so.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple, Sequence

import torch

from hypviz.attention.approx.key_search import (
    KeyIndex,
    KeySearch,
    block_top,
    fit_key_index,
    logit_rounding,
    search_top_keys,
)
from hypviz.attention.approx.random_features import AGGREGATIONS
from hypviz.attention.maps.checks import check_temperature, checked_inputs, flatten_batch
from hypviz.attention.maps.kernels import Kernel, Operands, Option, clamp_nonpositive_, logit_error, register_kernel
from hypviz.base import validate
from hypviz.base.kinds import Kind
from hypviz.lorentz import distance_operands, lift

__all__ = ["LEVELS", "SEARCHES", "MARGIN", "TOL", "SAMPLES", "TAIL_SAMPLES", "TopkTail", "distance_topk_attention",
           "TopkOperands", "TopkTailKernel"]

ArrayLike = Any

#: The default numbers of exact keys a row may take, smallest first (0 is the tail alone, with no search).
LEVELS: tuple[int, ...] = (0, 16, 64, 256, 1024, 4096)
#: The top-key searches.
SEARCHES: tuple[str, ...] = ("exact", "index", "auto")
#: The margin :math:`\eta`, every tail polynomial is at least this on :math:`u \le 0`.
MARGIN = 1e-3
#: The default target, the estimated error at most this fraction of the row's distance from uniform.
TOL = 0.05
#: The default number of sampled keys (for the fit, and as many again for the error estimate).
SAMPLES = 64
#: The tail-only level samples this many times ``samples`` keys (for its fit, and as many again for its estimate).
TAIL_SAMPLES = 4

_BLOCK_ELEMENTS = 2**22  # elements of one block of logits (rows x keys)
_EXACT_BLOCK_ELEMENTS = 2**24  # exact search: elements of one block of logits (rows x keys), computed once
_TAIL_ROWS = 2048  # rows of one block of the tail-only level
_INDEX_KEYS_PER_TOP = 16  # fewer keys than this times K: exact search (search_top_keys's own rule)


def _exp_floor(dtype: torch.dtype) -> float:
    r"""The exponent an exact row's weight :math:`e^{s - \max s}` is raised to where it is smaller: :math:`\tfrac12
    \log` of the dtype's smallest normal number (about :math:`-43.7` in float32, so a row of :math:`M` keys gains at
    most :math:`M e^{-43.7}`, below its rounding for any :math:`M < 10^{11}`); no weight is then subnormal (on CPUs a
    subnormal exponential or product costs many times a normal one: 10x for 83 rows at :math:`M = 10^5`,
    :math:`r^2/\tau = 125`)."""
    return 0.5 * math.log(torch.finfo(dtype).tiny)


class TopkTail(NamedTuple):
    r"""The result of :func:`distance_topk_attention`.

    ``output``, ``(..., N, d_v + 1)`` points (``None`` without values); ``weights``, ``(T,)`` the normalised
    weights :math:`\hat P_{ij}` of every row's top keys, row after row (the rows of ``(..., N)`` in order), each
    row's strongest first, :math:`T = \sum_i k_i` over the rows with :math:`k_i < M`; ``indices``, ``(T,)`` those
    keys; ``offsets``, ``(..., N)`` where each row's entries start (row :math:`i`'s are
    ``offsets[i] : offsets[i] + top_counts[i]``; a flat layout, since a few rows with many top keys would make a
    padded array of ``N x max k_i`` entries); ``top_counts``, ``(..., N)`` :math:`k_i` (0 for a row weighted by the
    tail alone, :math:`M` for a row with every key exact, whose weights are the exact map's row and are not listed:
    it has no entries, as listing them would take :math:`M` per row); ``tail_mass``, ``(..., N)`` the tail's share
    :math:`\sum_{j \notin T_i} \hat P_{ij}`;
    ``row_error``, ``(..., N)`` :math:`\hat\varepsilon_i`, the estimate of :math:`\mathrm{TV}(\hat P_i, P_i)`
    (see the module); ``row_baseline``, ``(..., N)`` the estimate of :math:`\mathrm{TV}(\hat P_i, U)`;
    ``row_bound``, ``(..., N)`` a proven upper bound on :math:`\mathrm{TV}(\hat P_i, P_i)` (``inf`` where none:
    rows of the tail alone too wide for it, rows searched by an index), 0 for rows with every key exact;
    ``row_baseline_low``, ``(..., N)`` a proven lower bound on :math:`\mathrm{TV}(\hat P_i, U)` (0 where none: rows of
    the tail alone); ``met``, ``(..., N)`` whether the bound meets the target, ``row_bound <= tol * row_baseline_low``
    (a guarantee); ``estimated``, ``(..., N)`` the rows whose estimate meets the
    target, ``row_error <= tol * row_baseline``, where the bound does not (their accuracy is an estimate); ``cut``,
    ``(..., N, 3)``
    :math:`(t_i, \beta_i, \gamma_i)`, the cut's logit and the tail polynomial; ``search``, the top-key
    search used (``"exact"``, or each index's one-line summary, fallbacks with their reason); ``recall``, its
    measured recall of the exact top keys (the smallest over the searches; 1.0 for the exact search);
    ``temperature``, :math:`\tau`.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import distance_topk_attention
    >>> q, keys = data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(300, 4, 0.5, seed=1)
    >>> res = distance_topk_attention(q, keys, temperature=4.0)
    >>> res.top_counts.tolist(), res.weights.shape, res.search
    ([64, 0, 256, 16, 0, 0, 16, 64], torch.Size([416]), 'exact')
    >>> int(res.met.sum()), int(res.estimated.sum())  # rows proven within tol, rows whose accuracy is an estimate
    (1, 7)
    >>> int(distance_topk_attention(q, keys, temperature=4.0, certify=True).met.sum())  # walked by the bound: all proven
    8
    >>> res.padded()[0].shape  # (..., N, max k_i)
    torch.Size([8, 256])
    """

    output: torch.Tensor | None
    weights: torch.Tensor
    indices: torch.Tensor
    offsets: torch.Tensor
    top_counts: torch.Tensor
    tail_mass: torch.Tensor
    row_error: torch.Tensor
    row_baseline: torch.Tensor
    row_bound: torch.Tensor
    row_baseline_low: torch.Tensor
    met: torch.Tensor
    estimated: torch.Tensor
    cut: torch.Tensor
    search: str
    recall: float
    temperature: float

    def padded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``weights`` and ``indices`` as ``(..., N, max k_i)`` arrays, each row's entries first (weight 0 and index -1 after)."""
        starts = self.offsets.reshape(-1)
        counts = torch.diff(starts, append=torch.tensor([self.weights.numel()], device=starts.device))  # listed entries
        width = int(counts.max()) if counts.numel() else 0
        pos = torch.arange(width, device=counts.device)
        valid = pos < counts.unsqueeze(-1)
        at = (starts.unsqueeze(-1) + pos).clamp_max(max(0, self.weights.numel() - 1))
        w = torch.where(valid, self.weights[at] if self.weights.numel() else torch.zeros_like(at, dtype=self.weights.dtype),
                        torch.zeros((), dtype=self.weights.dtype, device=counts.device))
        i = torch.where(valid, self.indices[at] if self.indices.numel() else torch.zeros_like(at), -1)
        return w.reshape(*self.top_counts.shape, width), i.reshape(*self.top_counts.shape, width)


# --------------------------------------------------------------------------- #
# the search
# --------------------------------------------------------------------------- #
class _ExactSearch:
    """The exact search of one head's operands: each block of rows' logits ``a_rows @ b^T`` computed once, every level
    read from them (:func:`hypviz.attention.approx.key_search.block_top`: logits equal up to the product's rounding,
    :func:`hypviz.attention.approx.key_search.logit_rounding`, are tied and listed by index, whatever BLAS kernel ran)."""

    def __init__(self, a: torch.Tensor, b: torch.Tensor):
        self.a, self.b, self.b_t = a, b, b.transpose(0, 1)
        self.block_rows = max(1, _EXACT_BLOCK_ELEMENTS // max(1, b.shape[0]))
        self.s: torch.Tensor | None = None
        self.rounding: tuple[torch.Tensor, torch.Tensor] | None = None

    def start(self, rows: torch.Tensor) -> None:
        self.s = (self.a[rows] @ self.b_t).clamp_max_(0.0)
        self.rounding = logit_rounding(self.a[rows], self.b)

    def top(self, local: torch.Tensor, big: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.s is not None and self.rounding is not None
        whole = local.numel() == self.s.shape[0]
        s, row = (self.s, self.rounding[0]) if whole else (self.s[local], self.rounding[0][local])
        return block_top(s, big, (row, self.rounding[1]))

    def logits(self, local: torch.Tensor) -> torch.Tensor:
        """Every key's logit of the block's rows ``local`` (already at hand)."""
        assert self.s is not None
        return self.s[local]


class _IndexSearch:
    """The index search of one head's points (:func:`hypviz.attention.approx.key_search.search_top_keys`), recording
    each call's method and recall."""

    block_rows = 4096

    def __init__(self, q: torch.Tensor, keys: torch.Tensor, a: torch.Tensor, b: torch.Tensor, k: float, tau: float,
                 recall: float, seed: int):
        self.q, self.keys, self.k, self.tau, self.recall, self.seed = q, keys, k, tau, recall, seed
        self.a, self.b_t = a, b.transpose(0, 1)
        self.found: list[KeySearch] = []
        self.index: KeyIndex | None = None
        self.rows: torch.Tensor | None = None

    def start(self, rows: torch.Tensor) -> None:
        self.rows = rows

    def top(self, local: torch.Tensor, big: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.rows is not None
        q = self.q[self.rows[local]]
        if self.keys.shape[-2] < _INDEX_KEYS_PER_TOP * big:  # search_top_keys answers exactly, and says why
            found = search_top_keys(q, self.keys, big, k=self.k, recall=self.recall, seed=self.seed)
        else:  # one index per key set, fitted (its recall measured) at the first top asked, searched at every top
            if self.index is None:
                self.index = fit_key_index(self.q, self.keys, big, k=self.k, recall=self.recall, seed=self.seed)
            found = self.index.search(q, big)
        self.found.append(found)
        return found.logits * (1.0 / self.tau), found.indices

    def logits(self, local: torch.Tensor) -> torch.Tensor:
        """Every key's logit of the block's rows ``local``: one product."""
        assert self.rows is not None
        return (self.a[self.rows[local]] @ self.b_t).clamp_max_(0.0)


def _faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- #
# the fit
# --------------------------------------------------------------------------- #
def _fit(u: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Per row, :math:`(\beta, \gamma)` minimising :math:`\sum_j w_j (1 + \beta u_j + \gamma u_j^2 - e^{u_j})^2`, kept
    positive (float64)."""
    r = torch.expm1(u)
    u2 = u * u
    g11, g12, g22 = (w * u2).sum(-1), (w * u2 * u).sum(-1), (w * u2 * u2).sum(-1)
    h1, h2 = (w * u * r).sum(-1), (w * u2 * r).sum(-1)
    det = g11 * g22 - g12 * g12
    ok_det = det > 1e-12 * g11 * g22
    safe = torch.where(ok_det, det, torch.ones_like(det))
    beta = (g22 * h1 - g12 * h2) / safe
    gamma = (g11 * h2 - g12 * h1) / safe
    feasible = ok_det & torch.isfinite(beta) & torch.isfinite(gamma) & (gamma >= 0) & (
        (beta <= 0) | (beta * beta <= 4.0 * gamma * (1.0 - MARGIN)))
    if bool(feasible.all()):
        return beta, gamma
    # the boundary family p = 1 + 2 c u + kap c^2 u^2 (kap = 1 / (1 - eta)): f(c) = A0 + A1 c + A2 c^2 + A3 c^3 + A4 c^4
    kap = 1.0 / (1.0 - MARGIN)
    a1, a2, a3, a4 = -4.0 * h1, 4.0 * g11 - 2.0 * kap * h2, 4.0 * kap * g12, kap * kap * g22
    scale = torch.sqrt(torch.where(g11 > 0, g11 / w.sum(-1).clamp_min(1e-300), torch.ones_like(g11))).clamp_min(1e-6)
    grid = torch.cat([torch.zeros(1, dtype=u.dtype, device=u.device),
                      torch.logspace(-4, 2, 97, dtype=u.dtype, device=u.device)])
    c = grid.unsqueeze(0) / scale.unsqueeze(-1)  # (n, G): c in units of 1 / rms(u)
    f = c * (a1.unsqueeze(-1) + c * (a2.unsqueeze(-1) + c * (a3.unsqueeze(-1) + c * a4.unsqueeze(-1))))
    best = c.gather(-1, f.argmin(-1, keepdim=True)).squeeze(-1)
    for _ in range(4):  # Newton on f'(c) = 0, kept where it lowers f and c >= 0
        d1 = a1 + best * (2 * a2 + best * (3 * a3 + best * 4 * a4))
        d2 = 2 * a2 + best * (6 * a3 + best * 12 * a4)
        step = torch.where(d2 > 0, d1 / torch.where(d2 > 0, d2, torch.ones_like(d2)), torch.zeros_like(d1))
        cand = (best - step).clamp_min(0.0)

        def fval(x: torch.Tensor) -> torch.Tensor:
            return x * (a1 + x * (a2 + x * (a3 + x * a4)))

        best = torch.where(fval(cand) < fval(best), cand, best)
    return torch.where(feasible, beta, 2.0 * best), torch.where(feasible, gamma, kap * best * best)


def _poly(u: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """``1 + beta u + gamma u^2`` (``beta``, ``gamma`` broadcast over the last axis)."""
    return 1.0 + u * (beta.unsqueeze(-1) + gamma.unsqueeze(-1) * u)


def _range_error(lo: torch.Tensor, hi: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor, points: int = 129) -> torch.Tensor:
    r"""Per row, an upper bound on :math:`\max_{lo \le u \le hi} |g(u)|`, :math:`g(u) = p(u) - e^u` (float64).

    The largest :math:`|g|` on a grid of ``points`` points with spacing :math:`h`, plus :math:`\tfrac{h^2}8 \sup |g''|`
    (between two grid points :math:`g` is within that of the chord through them), :math:`|g''(u)| = |2\gamma - e^u| \le
    2\gamma + e^{\max(hi, 0)}`.

    >>> import torch
    >>> b, g = torch.tensor([1.0]), torch.tensor([0.5])  # p(u) = 1 + u + u^2/2, e^u's Taylor polynomial
    >>> float(_range_error(torch.tensor([-0.1]), torch.tensor([0.0]), b, g)) < 2e-4  # |u|^3/6 at u = -0.1, plus the grid's
    True
    """
    span = (hi - lo).clamp_min(0.0)
    grid = lo.unsqueeze(-1) + span.unsqueeze(-1) * torch.linspace(0.0, 1.0, points, dtype=torch.float64, device=lo.device)
    top = (_poly(grid, beta, gamma) - torch.exp(grid)).abs().amax(-1)
    h = span / (points - 1)
    out = top + 0.125 * h * h * (2.0 * gamma.abs() + torch.exp(hi.clamp_min(0.0)))
    return torch.where(torch.isnan(out), torch.full_like(out, math.inf), out)


# --------------------------------------------------------------------------- #
# the plan: per row, k, the cut and the tail polynomial
# --------------------------------------------------------------------------- #
class _Head(NamedTuple):
    """One head's plan, per row (filled in place as rows are decided, :meth:`record`)."""

    cut: torch.Tensor  # (N, 3) float64: t, beta, gamma (rounded to the inputs' dtype)
    top: torch.Tensor  # (N,) long
    error: torch.Tensor  # (N,) float64
    baseline: torch.Tensor  # (N,) float64
    met: torch.Tensor  # (N,) bool: the bound meets the target
    best: torch.Tensor  # (N,) float64: m, the row's largest logit (t for a tail-only row)
    bound: torch.Tensor  # (N,) float64: the bound on TV(P_hat, P) (inf where none)
    base_low: torch.Tensor  # (N,) float64: the lower bound on TV(P_hat, U) (0 where none)
    estimated: torch.Tensor  # (N,) bool: the estimate meets the target, the bound does not
    rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # (row index, top logits, top keys) per decided block

    @classmethod
    def empty(cls, n: int, device: torch.device) -> _Head:
        """A plan of ``n`` rows with none decided: zeros, the bound ``inf``."""
        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(n, dtype=dtype, device=device)

        return cls(torch.zeros(n, 3, dtype=torch.float64, device=device), zeros(torch.long), zeros(torch.float64),
                   zeros(torch.float64), zeros(torch.bool), zeros(torch.float64),
                   torch.full((n,), math.inf, dtype=torch.float64, device=device), zeros(torch.float64), zeros(torch.bool), [])

    def record(self, rows: torch.Tensor, done: torch.Tensor, k: int, level: _Level,
               listed: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Rows ``rows[done]`` decided at ``k`` top keys with ``level``'s answer; ``listed``: their top logits and keys, kept."""
        dr = rows[done]
        self.cut[dr, 0], self.cut[dr, 1], self.cut[dr, 2] = level.t[done], level.beta[done], level.gamma[done]
        self.top[dr] = k
        self.error[dr], self.baseline[dr], self.met[dr] = level.e_hat[done], level.b_hat[done], level.sure[done]
        self.best[dr], self.bound[dr], self.base_low[dr] = level.best[done], level.bound[done], level.base_low[done]
        self.estimated[dr] = level.guess[done] & ~level.sure[done]
        if listed is not None and dr.numel():
            self.rows.append((dr, listed[0][done, :k], listed[1][done, :k]))


class _Level(NamedTuple):
    """A level's answer for a block of rows: the cut and the polynomial, the estimates and the bounds."""

    t: torch.Tensor  # the cut's logit
    beta: torch.Tensor
    gamma: torch.Tensor
    e_hat: torch.Tensor  # the estimate of TV(P_hat, P)
    b_hat: torch.Tensor  # the estimate of TV(P_hat, U)
    bound: torch.Tensor  # the bound on TV(P_hat, P)
    base_low: torch.Tensor  # the lower bound on TV(P_hat, U)
    best: torch.Tensor  # the row's largest logit
    guess: torch.Tensor  # the estimate meets the target
    sure: torch.Tensor  # the bound meets the target


class _PlanSettings(NamedTuple):
    """The plan's settings: the numbers of top keys tried, the target, the samples, every-key fallback, walk by the bound."""

    top: Sequence[int] = LEVELS
    tol: float = TOL
    samples: int = SAMPLES
    seed: int = 0
    fallback: bool = True
    certify: bool = False


class _KeyStats(NamedTuple):
    """One head's key sums for the plan: the mean key operand, the centred keys' Gram matrix and largest norm."""

    bbar: torch.Tensor  # (c,) float64
    cov: torch.Tensor  # (c, c) float64: sum_j b'_j b'_j^T
    reach: float  # max_j |b'_j|


def _key_stats(b: torch.Tensor) -> _KeyStats:
    m, c = b.shape
    bbar = b.double().mean(0)
    cov = torch.zeros(c, c, dtype=torch.float64, device=b.device)
    reach = 0.0
    block = max(1, _BLOCK_ELEMENTS // max(1, c))
    for i in range(0, m, block):
        bc = b[i : i + block].double() - bbar
        cov += bc.transpose(0, 1) @ bc
        reach = max(reach, float(bc.norm(dim=-1).max()))
    return _KeyStats(bbar, cov, reach)


def _levels(top: Sequence[int], m: int) -> list[int]:
    levels = sorted({min(int(t), m) for t in top})
    if len(levels) > 1 and levels[0] == 0 and levels[1] >= m:  # every key exact at the first search: no tail to fit
        return levels[1:]
    return levels


def _tail_only(y_f: torch.Tensor, y_e: torch.Tensor, sq: torch.Tensor, reach: torch.Tensor, m: int, dt: torch.dtype,
               slack: torch.Tensor) -> tuple[torch.Tensor, ...]:
    r"""The tail-only level (no top keys) of a block of rows from the centred logits of the two samples.

    Fits :math:`q(y) = \alpha + \beta y + \gamma y^2 \approx e^{y - y_0}` (least squares on ``y_f``), kept where it
    is positive on all of :math:`\mathbb R` with margin (in the cut's form below); else the constant
    :math:`q = \operatorname{mean}_j e^{y_j - y_0}` (the uniform row).  The cut :math:`t = \bar s + D`,
    :math:`D = \|a_i\| \max_j \|b'_j\|` (Cauchy-Schwarz: every centred logit is at most :math:`D`), and
    :math:`p(u) = q(u + D) / q(D)`.  Returns ``D`` and, in the cut's form, ``beta, gamma``, the estimates ``e_hat,
    b_hat`` (from ``y_e``) and the bound :math:`M \max_{-2D \le u \le 0} |p(u) - e^u| / \sum_j p(u_j)` on
    :math:`\mathrm{TV}(\hat P, P)` (``slack``: the logits' rounding, widening the interval).
    """
    y0 = torch.maximum(y_f.amax(-1), y_e.amax(-1))
    rms = torch.sqrt(sq / m).clamp_min(1e-300)
    z = y_f / rms.unsqueeze(-1)  # the fit in y / rms(y): well conditioned
    r = torch.exp(y_f - y0.unsqueeze(-1))
    basis = torch.stack([torch.ones_like(z), z, z * z], dim=-1)  # (rows, n, 3)
    gram = basis.transpose(-1, -2) @ basis
    gram = gram + 1e-12 * gram.diagonal(dim1=-2, dim2=-1).sum(-1)[:, None, None] * torch.eye(3, dtype=gram.dtype)
    coef = torch.linalg.solve(gram, (basis * r.unsqueeze(-1)).sum(-2))
    al, be, ga = coef[:, 0], coef[:, 1] / rms, coef[:, 2] / (rms * rms)
    d = reach
    # the cut's form: p(u) = q(u + D) / q(D) = 1 + beta_u u + gamma_u u^2, kept positive on R: beta_u^2 <= 4 gamma_u (1 - eta)
    qd = al + d * (be + ga * d)
    bu, gu = (be + 2.0 * ga * d) / qd, ga / qd
    ok = (torch.isfinite(coef).all(-1) & (qd > 0) & (ga >= 0) & (bu * bu <= 4.0 * gu * (1.0 - MARGIN)))
    const = r.mean(-1)
    al, be, ga = torch.where(ok, al, const), torch.where(ok, be, 0.0), torch.where(ok, ga, 0.0)
    qd = torch.where(ok, qd, const)
    bu, gu = torch.where(ok, bu, 0.0).to(dt).double(), torch.where(ok, gu, 0.0).to(dt).double()
    # the estimates on the second sample: q's error against e^{y - y0}, and the distance from uniform
    zhat = m * al + ga * sq  # sum_j q(y_j): sum_j y_j = 0, sum_j y_j^2 = sq
    qe = al.unsqueeze(-1) + y_e * (be.unsqueeze(-1) + ga.unsqueeze(-1) * y_e)
    scale = m / y_e.shape[-1]
    e_hat = scale * (qe - torch.exp(y_e - y0.unsqueeze(-1))).abs().sum(-1) / zhat
    b_hat = 0.5 * scale * (qe / zhat.unsqueeze(-1) - 1.0 / m).abs().sum(-1)
    # the bound: every key's u = y - D lies in [-2D, 0] (Cauchy-Schwarz), widened by the logits' rounding
    zp = m * (1.0 - d * (bu - gu * d)) + gu * sq  # sum_j p(u_j), u_j = y_j - D, in the cut's form
    bound = m * _range_error(-2.0 * d - slack, slack, bu, gu) / zp.clamp_min(1e-300)
    return d, bu, gu, e_hat, b_hat, bound


class _LevelRows(NamedTuple):
    r"""A block of rows at a searched level, in float64: ``top``, each row's top ``big`` logits (strongest first);
    ``fit``, ``est``, the two samples' logits (``None`` when every key is among the top); ``mean``, each row's mean
    logit; ``sq``, its :math:`\sum_j y_j^2`; ``low``, a floor under every logit of the row (Cauchy-Schwarz), or
    ``None`` when the search is not exact (a key it missed may lie above the cut: no bound)."""

    top: torch.Tensor
    fit: torch.Tensor | None
    est: torch.Tensor | None
    mean: torch.Tensor
    sq: torch.Tensor
    low: torch.Tensor | None


def _searched(level: _LevelRows, k: int, big: int, m: int, dt: torch.dtype) -> tuple[torch.Tensor, ...]:
    r"""A searched level of a block of rows (:class:`_LevelRows`; ``fit``, ``est`` are ``None`` when every key below
    rank ``big`` is... none).  Returns ``t, beta, gamma, e_hat, b_hat``, the bound on :math:`\mathrm{TV}(\hat P, P)`
    and a lower bound on :math:`\mathrm{TV}(\hat P, U)`.

    The bound: with exact search every key below rank :math:`K` has :math:`u_j \le u_K` (its logit is at most the
    rank-:math:`K` one) and :math:`u_j \ge L` (``low``), so its error :math:`|p(u_j) - e^{u_j}|` is at most both
    :math:`\max_{[L, u_K]} |p - e^u|` (:func:`_range_error`) and :math:`p(u_j) + e^{u_j}`, where
    :math:`\sum p(u_j)` over those keys is exact (key sums less the top :math:`K`) and :math:`\sum e^{u_j}` is at
    most its chord on :math:`[L, u_K]` (:math:`e^u` is convex), summed from :math:`\sum_j u_j = M\delta`; the
    ranks :math:`k + 1 \dots K` are exact.  The lower bound: :math:`\mathrm{TV}(\hat P, U) \ge \sum_{r \le K}
    (\hat P_r - 1/M)_+`, over the weights known exactly."""
    v64, lf, le, ms, sqr, low = level
    mx = v64[:, 0]
    t = v64[:, k - 1]
    u_str = v64[:, k:big] - t.unsqueeze(-1)  # ranks k+1..K, exact
    t_big = v64[:, big - 1] if big < m else torch.full_like(t, -math.inf)
    out_n = m - big
    if out_n:
        assert lf is not None and le is not None  # keys below rank K: both samples' logits at hand
        in_f = lf < t_big.unsqueeze(-1)  # below rank K: the sampled stratum
        nf = in_f.sum(-1)
        u_f = torch.where(in_f, lf - t.unsqueeze(-1), torch.zeros_like(lf))
        w_f = in_f * (out_n / nf.clamp_min(1)).unsqueeze(-1)
        u_all = torch.cat([u_str, u_f], dim=-1)
        w_all = torch.cat([torch.ones_like(u_str), w_f], dim=-1)
    else:
        u_all, w_all = u_str, torch.ones_like(u_str)
    beta, gamma = _fit(u_all, w_all)
    beta, gamma = beta.to(dt).double(), gamma.to(dt).double()
    t = t.to(dt).double()
    rho = torch.exp(t - mx)  # the cut's weight, relative to the largest
    top_w = torch.exp(v64[:, :k] - mx.unsqueeze(-1))
    ztop = top_w.sum(-1)
    delta = ms - t
    p_all = m * (1.0 + delta * (beta + gamma * delta)) + gamma * sqr
    p_top = _poly(v64[:, :k] - t.unsqueeze(-1), beta, gamma).sum(-1)
    tail = (p_all - p_top).clamp_min(0.0)
    zhat = ztop + rho * tail
    p_str = _poly(u_str, beta, gamma)
    e_str = (p_str - torch.exp(u_str)).abs().sum(-1)
    pw_top = top_w / zhat.unsqueeze(-1)
    b_hat = 0.5 * ((pw_top - 1.0 / m).abs().sum(-1) + (rho.unsqueeze(-1) * p_str / zhat.unsqueeze(-1) - 1.0 / m).abs().sum(-1))
    if out_n:
        assert lf is not None and le is not None
        in_e = le < t_big.unsqueeze(-1)
        ne = in_e.sum(-1)
        u_e = le - t.unsqueeze(-1)
        p_e = _poly(u_e, beta, gamma)
        # rows whose estimate sample fell entirely inside the top K: the fit sample stands in
        use_f = ne == 0
        if le.shape[-1] != lf.shape[-1]:  # fewer than 2 x samples keys: no separate estimate sample
            u_e, p_e, in_e = lf - t.unsqueeze(-1), _poly(lf - t.unsqueeze(-1), beta, gamma), in_f
            ne = in_e.sum(-1)
        elif bool(use_f.any()):
            p_f = _poly(lf - t.unsqueeze(-1), beta, gamma)
            u_e = torch.where(use_f.unsqueeze(-1), lf - t.unsqueeze(-1), u_e)
            p_e = torch.where(use_f.unsqueeze(-1), p_f, p_e)
            in_e = torch.where(use_f.unsqueeze(-1), lf < t_big.unsqueeze(-1), in_e)
            ne = in_e.sum(-1)
        scale = out_n / ne.clamp_min(1)
        zero = torch.zeros_like(u_e)  # keys above rank K are not in this stratum (and their e^u may overflow)
        e_smp = scale * torch.where(in_e, (p_e - torch.exp(u_e.clamp_max(0.0))).abs(), zero).sum(-1)
        b_smp = scale * torch.where(in_e, (rho.unsqueeze(-1) * p_e / zhat.unsqueeze(-1) - 1.0 / m).abs(), zero).sum(-1)
        nothing = ne == 0  # no sampled key below rank K at all: bound it by the rank-K key's error
        e_smp = torch.where(nothing, out_n * (p_str[:, -1] - torch.exp(u_str[:, -1])).abs(), e_smp)
        b_smp = torch.where(nothing, out_n * (rho * p_str[:, -1] / zhat - 1.0 / m).abs(), b_smp)
    else:
        e_smp = torch.zeros_like(t)
        b_smp = torch.zeros_like(t)
    known = torch.cat([pw_top, rho.unsqueeze(-1) * p_str / zhat.unsqueeze(-1)], dim=-1)
    base_lo = (known - 1.0 / m).clamp_min(0.0).sum(-1)
    if not out_n:
        rest = torch.zeros_like(t)
    elif low is None:
        rest = torch.full_like(t, math.inf)
    else:
        u_k = t_big - t
        lo = torch.minimum(low - t, u_k)
        p_rest = (tail - p_str.sum(-1)).clamp_min(0.0)
        sum_u = m * delta - (v64[:, :big] - t.unsqueeze(-1)).sum(-1)  # sum of u_j over the keys below rank K
        e_k, e_l = torch.exp(u_k), torch.exp(lo)
        width = (u_k - lo).clamp_min(1e-300)
        chord = out_n * e_k - (e_k - e_l) * (out_n * u_k - sum_u).clamp_min(0.0) / width
        w_rest = torch.minimum(out_n * e_k, chord.clamp_min(0.0))
        rest = torch.minimum(p_rest + w_rest, out_n * _range_error(lo, u_k, beta, gamma))
    bound = rho * (e_str + rest) / zhat
    return t, beta, gamma, rho * (e_str + e_smp) / zhat, b_hat + 0.5 * b_smp, bound, base_lo


def _logit_floor(a64: torch.Tensor, ms: torch.Tensor, reach: float, err: torch.Tensor) -> torch.Tensor:
    r"""A floor under every computed logit of the rows: :math:`L_i = \bar s_i - \|a_i\| \max_j \|b'_j\| - 2\,\mathrm{err}_i`.

    Cauchy-Schwarz bounds the exact centred logit, :math:`a_i \cdot b'_j \ge -\|a_i\| \|b'_j\|`; the computed logit
    may lie below the exact one by its rounding (``err``, :func:`hypviz.attention.maps.kernels.logit_error`), and so may
    the computed mean logit :math:`\bar s_i`: twice ``err``.

    >>> float(_logit_floor(torch.tensor([[3.0, 4.0]]), torch.tensor([1.0]), 2.0, torch.tensor([0.25])))
    -9.5
    """
    norms: torch.Tensor = a64.norm(dim=-1)  # (Tensor.norm is typed as returning Any)
    return ms - norms * reach - 2.0 * err


def _rounding(err: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    r"""The TV the logits' rounding can add to a row's bound: every weight's relative error is at most
    :math:`e^{(1 + G)\,\mathrm{err}} - 1`, :math:`G = |\beta| + \sqrt{\gamma/\eta} \ge \sup_{u \le 0} |p'/p|` (``err``:
    :func:`hypviz.attention.maps.kernels.logit_error`), twice (numerator and normaliser), plus the weights' own rounding."""
    g = beta.abs() + torch.sqrt(gamma.clamp_min(0.0) / MARGIN)
    return 2.0 * torch.expm1((1.0 + g) * err) + 16.0 * torch.finfo(dt).eps


class _Job(NamedTuple):
    """One head's plan: its operands ``a (N, c)``, ``b (M, c)``, search and settings, and what every step reads."""

    a: torch.Tensor
    b: torch.Tensor
    search: Any
    settings: _PlanSettings
    stats: _KeyStats
    slack: torch.Tensor  # (N,) float64: each row's logits' rounding (logit_error)
    perm: torch.Tensor  # the keys in random order: the samples
    keep: bool  # list each decided row's top logits and keys
    sink: Any  # called with the weights of rows computed with every key exact

    def row_stats(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        r"""Per row: ``a`` in float64, the mean logit and :math:`\sum_j y_j^2` (the centred logits)."""
        a64 = self.a[rows].double()
        return a64, a64 @ self.stats.bbar, ((a64 @ self.stats.cov) * a64).sum(-1).clamp_min(0.0)


def _plan(a: torch.Tensor, b: torch.Tensor, search: Any, settings: _PlanSettings, keep: bool, sink: Any = None) -> _Head:
    """Per row of one head, ``a (N, c)`` against ``b (M, c)``: the number of top keys, the cut, the polynomial, the estimates.

    The tail-only level (``0`` in ``settings.top``) first, for every row, without search; then, per block of the rows
    it left, one search (``search.start``: an exact block's logits, computed once) read at each level in turn.  A row
    is decided at a level where its estimate meets the target (``certify``: where its bound does); ``met`` is the
    bound's.  ``sink(rows, weights, sums)`` receives the weights of the rows computed with every key exact.
    """
    n, m = a.shape[0], b.shape[0]
    levels = _levels(settings.top, m)
    perm = torch.randperm(m, generator=torch.Generator().manual_seed(settings.seed)).to(a.device)
    job = _Job(a, b, search, settings, _key_stats(b), logit_error(a, b).double(), perm, keep, sink)
    head = _Head.empty(n, a.device)
    todo = torch.arange(n, device=a.device)
    if levels[0] == 0:  # the tail alone, no search
        levels = levels[1:]
        todo = _tail_level(job, head, todo, last=not levels)
        if not levels and settings.fallback:  # the tail alone asked: the rows it leaves are computed with every key
            levels = [m]
    for r0 in range(0, todo.numel(), search.block_rows):
        _search_block(job, head, todo[r0 : r0 + search.block_rows], levels)
    return head


def _tail_level(job: _Job, head: _Head, todo: torch.Tensor, last: bool) -> torch.Tensor:
    """The tail-only level (no top keys, no search) for the rows ``todo``, in blocks; returns the rows it leaves."""
    b, st, dt = job.b, job.stats, job.a.dtype
    m, tol, certify = b.shape[0], job.settings.tol, job.settings.certify
    left = []
    wide = TAIL_SAMPLES * job.settings.samples  # the level is cheap per key sampled: more keys, a closer fit and estimate
    if m <= 2 * wide:  # few keys: every key in the fit, and the estimate exact
        bf = be_ = b.double() - st.bbar
    else:
        bf, be_ = b[job.perm[:wide]].double() - st.bbar, b[job.perm[wide : 2 * wide]].double() - st.bbar
    for i0 in range(0, todo.numel(), _TAIL_ROWS):
        rows = todo[i0 : i0 + _TAIL_ROWS]
        a64, ms, sqr = job.row_stats(rows)
        d = a64.norm(dim=-1) * st.reach
        slack = job.slack[rows]
        d, beta, gamma, e_hat, b_hat, bound = _tail_only(a64 @ bf.transpose(0, 1), a64 @ be_.transpose(0, 1), sqr, d, m,
                                                         dt, slack)
        t = (ms + d).to(dt).double()
        bound = bound + _rounding(slack, beta, gamma, dt)
        guess = e_hat <= tol * b_hat
        sure = torch.zeros_like(guess)  # no lower bound on TV(P_hat, U) without top keys: never certified here
        good = sure if certify else guess
        done = good | (last and not job.settings.fallback)
        no_keys = (torch.zeros(rows.numel(), 0, dtype=dt, device=rows.device),
                torch.zeros(rows.numel(), 0, dtype=torch.long, device=rows.device))
        head.record(rows, done, 0, _Level(t, beta, gamma, e_hat, b_hat, bound, torch.zeros_like(bound), t, guess, sure),
                    no_keys if job.keep else None)
        left.append(rows[~done])
    return torch.cat(left) if left else todo[:0]


def _read_width(levels: Sequence[int], li: int, big: int, m: int) -> int:
    """How many top keys the search reads at level ``li``: ``big``, or at the first level the next level's too (one
    cheap read, sliced), unless that takes every key."""
    wide = big
    if li == 0 and li != len(levels) - 1 and levels[li + 1] < m:
        wide = levels[li + 2] if li + 2 < len(levels) else min(4 * levels[li + 1], m)
        wide = big if wide >= m else wide
    return wide


def _search_block(job: _Job, head: _Head, block: torch.Tensor, levels: Sequence[int]) -> None:
    """The searched levels for one block of rows: one search started, read at each level in turn for the rows left."""
    m, fallback = job.b.shape[0], job.settings.fallback
    job.search.start(block)
    local = torch.arange(block.numel(), device=block.device)
    held: tuple[torch.Tensor, torch.Tensor] | None = None  # the last read, aligned with local (may be wider than asked)
    prev: torch.Tensor | None = None  # the previous searched level's e_hat / (tol b_hat), aligned with local
    for li, k in enumerate(levels):
        if not local.numel():
            break
        if k >= m:  # every key exact
            _exact_rows(job, head, block, local)
            break
        last = li == len(levels) - 1
        big = levels[li + 1] if not last else min(4 * k, m)
        if held is None or held[0].shape[-1] < big:
            held = job.search.top(local, _read_width(levels, li, big, m))
        vals, idx = held[0][:, :big], held[1][:, :big]
        rows = block[local]
        level, ratio = _searched_level(job, rows, vals, k, big)
        good = level.sure if job.settings.certify else level.guess
        hopeless = torch.zeros_like(good)
        if fallback:
            ahead = sum(1 for later in levels[li + 1 :] if later < m)  # searched levels still to come
            hopeless = _hopeless(good, ratio, prev, ahead, last)
        done = good | (last & ~hopeless)
        head.record(rows, done, k, level, (vals, idx) if job.keep else None)
        if bool(hopeless.any()):
            _exact_rows(job, head, block, local[hopeless])
        keep_on = ~(done | hopeless)
        local, prev = local[keep_on], ratio[keep_on]
        held = (held[0][keep_on], held[1][keep_on])


def _searched_level(job: _Job, rows: torch.Tensor, vals: torch.Tensor, k: int, big: int) -> tuple[_Level, torch.Tensor]:
    """Level ``k`` of the rows ``rows`` from their top ``big`` logits ``vals``: its answer, and each row's ratio of
    its estimate (``certify``: its bound) to the target."""
    m, dt, tol = job.b.shape[0], job.a.dtype, job.settings.tol
    samples = job.settings.samples
    ar = job.a[rows]
    a64, ms, sqr = job.row_stats(rows)
    lf = (ar @ job.b[job.perm[:samples]].transpose(0, 1)).double() if big < m else None
    le = (ar @ job.b[job.perm[samples : 2 * samples]].transpose(0, 1)).double() if big < m else None
    v64 = vals.double()
    slack = job.slack[rows]
    ranked = isinstance(job.search, _ExactSearch)  # every key below a read's last is at most its logit
    low = _logit_floor(a64, ms, job.stats.reach, slack) if ranked else None
    t, beta, gamma, e_hat, b_hat, bound, base_lo = _searched(_LevelRows(v64, lf, le, ms, sqr, low), k, big, m, dt)
    rnd = _rounding(slack, beta, gamma, dt)  # what rounding can move TV(P_hat, P) and TV(P_hat, U) by
    bound, base_lo = bound + rnd, (base_lo - rnd).clamp_min(0.0)
    guess = e_hat <= tol * b_hat
    sure = bound <= tol * base_lo
    ratio = (bound / (tol * base_lo).clamp_min(1e-300)) if job.settings.certify else e_hat / (tol * b_hat).clamp_min(1e-300)
    return _Level(t, beta, gamma, e_hat, b_hat, bound, base_lo, v64[:, 0], guess, sure), ratio


def _hopeless(good: torch.Tensor, ratio: torch.Tensor, prev: torch.Tensor | None, ahead: int, last: bool) -> torch.Tensor:
    """Rows to compute with every key exact now: at the last level those not good; before it, those whose ratio,
    decaying as from the previous level over the ``ahead`` levels to come, stays above 1 (a geometric extrapolation)."""
    if last:
        return ~good
    if prev is None:
        return torch.zeros_like(good)
    decay = (ratio / prev.clamp_min(1e-300)).clamp_max(1.0)  # the error's decay from the previous level
    return ~good & (ratio * decay**ahead > 1.0)


def _exact_rows(job: _Job, head: _Head, block: torch.Tensor, local: torch.Tensor) -> None:
    """Rows computed with every key exact (error 0) from every key's logit, in blocks; not listed in ``rows`` (their
    ``N x M`` weights would be the exact map), their weights handed to ``job.sink`` (the output's)."""
    m = job.b.shape[0]
    step = max(1, _BLOCK_ELEMENTS // m)
    for i in range(0, local.numel(), step):
        part = local[i : i + step]
        s = job.search.logits(part)
        rows = block[part]
        mx = s.amax(-1, keepdim=True)
        low = s.amin(-1)
        # in place: the weights relative to the largest, in the points' dtype, raised to at least e^{floor}
        w = torch.exp_(s.sub_(mx).clamp_min_(_exp_floor(s.dtype)))
        z = w.sum(-1).double()
        head.cut[rows, 0], head.cut[rows, 1], head.cut[rows, 2] = low.double(), 1.0, 0.5
        head.top[rows] = m
        head.error[rows], head.met[rows], head.best[rows] = 0.0, True, mx.squeeze(-1).double()
        head.bound[rows], head.estimated[rows] = 0.0, False
        head.baseline[rows] = 0.5 * (w * (1.0 / z).unsqueeze(-1).to(w.dtype) - 1.0 / m).abs_().sum(-1).double()
        head.base_low[rows] = (head.baseline[rows] - m * torch.finfo(w.dtype).eps).clamp_min(0.0)  # less the sum's worst rounding
        if job.sink is not None:
            job.sink(rows, w, z)


def _map_logits(s: torch.Tensor, cut: torch.Tensor) -> torch.Tensor:
    r"""In place on the logits ``s (n, M)``: :math:`s` on the top keys (:math:`s \ge t`), :math:`t + \log p(s - t)` below."""
    t, beta, gamma = cut[:, :1], cut[:, 1:2], cut[:, 2:3]
    u = s - t
    tail = torch.log((1.0 + u * (beta + gamma * u)).clamp_min(torch.finfo(s.dtype).tiny)) + t
    if s.requires_grad:  # out of place, so autograd can follow (the cut and the polynomial held fixed)
        return torch.where(u >= 0, s, tail)
    return torch.where(u >= 0, s, tail, out=s)


# --------------------------------------------------------------------------- #
# the kernel: the kind "distance_topk" in attention_map and compare
# --------------------------------------------------------------------------- #
class TopkOperands(Operands):
    r"""Operands of ``"distance_topk"``: ``A = [a, t, beta, gamma]`` (the cut and the tail per row), ``B = [b, 0, 0, 0]``.

    ``A @ B^T`` is the distance logits :math:`s` (the state columns meet zeros); :meth:`logits` then
    maps them to the log-weights, :math:`s` on the top keys and :math:`t + \log p(s - t)` below the cut.
    """

    spread: float  # set by TopkTailKernel.operands: the bound on |log p| it adds to the largest logit

    def logits(self, a_rows: torch.Tensor, b_t: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.mm(a_rows, b_t, out=out)
        out.clamp_max_(0.0)
        return _map_logits(out, a_rows[:, -3:])

    def largest(self) -> float:
        return super().largest() + float(self.spread)


def _bound_factor(cut: torch.Tensor, largest: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Per row, :math:`G \ge \sup_{u \le 0} |p'(u)/p(u)|` (:math:`|\beta| + \sqrt{\gamma/\eta}`) and a bound on
    :math:`|\log p|` over :math:`|u| \le 2\,\mathrm{largest}`."""
    beta, gamma = cut[..., 1].abs(), cut[..., 2]
    g = beta + torch.sqrt(gamma / MARGIN)
    span = 2.0 * largest + cut[..., 0].abs()  # |u| = |s - t|
    logp = torch.log1p(beta * span + gamma * span * span) + abs(math.log(MARGIN))
    return g, logp


class TopkTailKernel(Kernel):
    """The kernel of ``"distance_topk"``: the plan of :func:`distance_topk_attention` per head, then its map."""

    options = {"seed": Option(lambda v, name: validate.seed(v, name), 0)}

    def _plans(self, q: torch.Tensor, keys: torch.Tensor, k: float, tau: float, opts: dict[str, Any]
               ) -> tuple[torch.Size, torch.Tensor, torch.Tensor, list[_Head]]:
        batch = torch.broadcast_shapes(q.shape[:-2], keys.shape[:-2])
        a, b = distance_operands(flatten_batch(q, batch), flatten_batch(keys, batch), k=k, temperature=tau)
        settings = _PlanSettings(seed=opts.get("seed", 0))
        heads = [_plan(a[h], b[h], _ExactSearch(a[h], b[h]), settings, keep=False) for h in range(a.shape[0])]
        return batch, a, b, heads

    def operands(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
                 opts: dict[str, Any]) -> Operands:
        with torch.no_grad():
            _, a, b, heads = self._plans(q, keys, k, temperature, opts)
            cut = torch.stack([h.cut for h in heads]).to(a.dtype)
            err0 = logit_error(a, b)
            eps = torch.finfo(a.dtype).eps
            largest = err0 / ((a.shape[-1] + 3) * eps)
            g, logp = _bound_factor(cut.double(), largest.double(), eps)
            # the product's rounding, through the tail's |p'/p| <= G; plus the subtraction s - t and the log's own rounding
            err = (err0.double() * (1.0 + g) + 8.0 * eps * (2.0 * largest.double() * (1.0 + g) + logp)).to(a.dtype)
            aa = torch.cat([a, cut], dim=-1)
            bb = torch.cat([b, torch.zeros(*b.shape[:-1], 3, dtype=b.dtype, device=b.device)], dim=-1)
            ops = TopkOperands(kind.name, aa, bb, err, finish=clamp_nonpositive_, rounding=err)
            ops.spread = float(logp.max()) if logp.numel() else 0.0
            return ops

    def dense(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
              opts: dict[str, Any]) -> torch.Tensor:
        """The map, differentiable in the points with each row's plan (its cut and polynomial) held fixed."""
        with torch.no_grad():
            batch, _, _, heads = self._plans(q.detach(), keys.detach(), k, temperature, opts)
        a, b = distance_operands(flatten_batch(q, batch), flatten_batch(keys, batch), k=k, temperature=temperature)
        s = (a @ b.transpose(-1, -2)).clamp_max(0.0)
        rows = [_map_logits(s[h], plan.cut.to(s.dtype)) for h, plan in enumerate(heads)]
        p = torch.softmax(torch.stack(rows) if s.requires_grad else s, dim=-1)
        return p.reshape(*batch, q.shape[-2], keys.shape[-2])


register_kernel("topk_tail", TopkTailKernel())


# --------------------------------------------------------------------------- #
# the attention
# --------------------------------------------------------------------------- #
def _check_top(top: Any) -> tuple[int, ...]:
    if isinstance(top, (str, bytes)) or not isinstance(top, Sequence) or not top or not all(
            isinstance(t, numbers.Integral) and not isinstance(t, bool) and int(t) >= 0 for t in top):
        raise ValueError(f"top must be a non-empty sequence of non-negative integers (numbers of exact keys), got {top!r:.80}")
    return tuple(sorted(set(int(t) for t in top)))


class _Settings(NamedTuple):
    """The checked options of :func:`distance_topk_attention`: the plan's, the search's and the aggregation."""

    plan: _PlanSettings
    search: str  # "exact" or "index" ("index" for a fitted index too), or "auto"
    fitted: KeyIndex | None
    recall: float
    aggregation: str


def _check_settings(top: Any, tol: Any, samples: Any, seed: Any, search: Any, recall: Any, aggregation: Any,
                    exact_fallback: Any, certify: Any) -> _Settings:
    """Each option of :func:`distance_topk_attention` checked, in the order of its signature (one-line errors)."""
    plan = _PlanSettings(_check_top(top), validate.positive(tol, "tol"), validate.integer(samples, "samples", 1),
                         validate.seed(seed), exact_fallback, certify)  # the two flags checked below
    fitted = search if isinstance(search, KeyIndex) else None
    how = "index" if fitted is not None else validate.choice(search, "search", SEARCHES)
    asked = validate.positive(recall, "recall")
    if asked > 1.0:
        raise ValueError(f"recall must be a number in (0, 1], got {recall!r}")
    agg = validate.choice(aggregation, "aggregation", AGGREGATIONS)
    if not isinstance(exact_fallback, bool):
        raise TypeError(f"exact_fallback must be True or False, got {exact_fallback!r:.80}")
    if not isinstance(certify, bool):
        raise TypeError(f"certify must be True or False, got {certify!r:.80}")
    return _Settings(plan, how, fitted, asked, agg)


def _searches(settings: _Settings, q: torch.Tensor, keys: torch.Tensor, a: torch.Tensor, b: torch.Tensor, k: float,
              tau: float) -> list[Any]:
    """One top-key search per head of the flattened points ``q``, ``keys`` and their operands ``a``, ``b``."""
    use_index = settings.search == "index" or (settings.search == "auto" and _faiss_available())
    if settings.fitted is not None:
        settings.fitted.check_keys(keys, k=k, name="search")
    searches: list[Any] = [_IndexSearch(q[h], keys[h], a[h], b[h], k, tau, settings.recall, settings.plan.seed) if use_index
                           else _ExactSearch(a[h], b[h]) for h in range(q.shape[0])]
    if settings.fitted is not None:
        searches[0].index = settings.fitted
    return searches


def _search_summary(searches: list[Any]) -> tuple[str, float]:
    """The searches used, one line (``"exact"``, or each index's summary), and the smallest recall measured."""
    found = [f for srch in searches if isinstance(srch, _IndexSearch) for f in srch.found]
    if not found:
        return "exact", 1.0
    return "; ".join(dict.fromkeys(f.summary() for f in found)), min(f.recall for f in found)


def _value_sums(b: torch.Tensor, vals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Key sums (float64, blocked over keys): :math:`\bar b`, :math:`\sum_j v_j`, :math:`\sum_j b'_j v_j^\top`,
    :math:`\sum_j b'_j \otimes b'_j \otimes v_j`."""
    m, c = b.shape
    dv = vals.shape[-1]
    bbar = b.double().mean(0)
    s0 = torch.zeros(dv, dtype=torch.float64, device=b.device)
    s1 = torch.zeros(c, dv, dtype=torch.float64, device=b.device)
    s2 = torch.zeros(c * c, dv, dtype=torch.float64, device=b.device)
    block = max(1, _BLOCK_ELEMENTS // (c * c))
    for i in range(0, m, block):
        bc = b[i : i + block].double() - bbar
        v = vals[i : i + block].double()
        s0 += v.sum(0)
        s1 += bc.transpose(0, 1) @ v
        s2 += (bc.unsqueeze(-1) * bc.unsqueeze(-2)).reshape(-1, c * c).transpose(0, 1) @ v
    return bbar, s0, s1, s2


class _Output:
    """The output ``(H, N, d_v + 1)`` of :func:`distance_topk_attention`, row by row from the values' weighted sums
    (``out`` and ``vals`` ``None`` without values)."""

    def __init__(self, values: torch.Tensor | None, aggregation: str, k: float, like: torch.Tensor):
        self.aggregation, self.k = aggregation, k
        self.vals: torch.Tensor | None = None
        self.out: torch.Tensor | None = None
        self._values64: tuple[int, torch.Tensor] | None = None  # one head's values in float64, while it is filled
        if values is not None:  # like: the flattened queries (H, N, d + 1)
            self.vals = values if aggregation == "centroid" else values[..., 1:]
            self.out = torch.empty(*like.shape[:2], values.shape[-1], dtype=like.dtype, device=like.device)

    def finish(self, h: int, rows: torch.Tensor, num: torch.Tensor, zhat: torch.Tensor) -> None:
        """``out[h, rows]`` from the weighted sums of the values ``num`` and the normaliser ``zhat`` (float64)."""
        assert self.out is not None
        o = num / zhat.unsqueeze(-1)
        if self.aggregation == "centroid":
            norm2 = o[..., :1].square() - o[..., 1:].square().sum(dim=-1, keepdim=True)
            o = o[..., 1:] * (math.sqrt(self.k) / norm2.clamp_min(1e-300).sqrt())
        self.out[h, rows] = lift(o, k=self.k).to(self.out.dtype)

    def sink(self, h: int) -> Any:
        """What head ``h``'s plan hands the weights of its rows with every key exact to (``None`` without values)."""
        if self.vals is None:
            return None
        return lambda rows, w, z: self.finish(h, rows, (w @ self.vals[h]).double(), z)  # every key: one product, as the exact map

    def top_sums(self, h: int, coef: torch.Tensor, top_keys: torch.Tensor, m: int) -> torch.Tensor:
        r"""Per row, :math:`\sum_j c_j v_j` over its top keys (float64): gathered, or for many top keys dense rows of
        coefficients and one product."""
        assert self.vals is not None
        if 4 * top_keys.shape[-1] >= m and bool((top_keys >= 0).all()):
            if self._values64 is None or self._values64[0] != h:
                self._values64 = (h, self.vals[h].double())
            dense = torch.zeros(len(coef), m, dtype=torch.float64, device=coef.device).scatter_(-1, top_keys, coef)
            return dense @ self._values64[1]
        return torch.bmm(coef.unsqueeze(1), self.vals[h][top_keys].double()).squeeze(1)  # (r, k, d_v) values gathered


class _Listing(NamedTuple):
    """Every row's top keys and their weights as flat lists, where each row's entries start, and its tail's share."""

    offsets: torch.Tensor  # (H, N)
    weights: torch.Tensor  # (T,)
    indices: torch.Tensor  # (T,)
    tail_mass: torch.Tensor  # (H, N)

    @classmethod
    def of(cls, plans: list[_Head], heads: int, n: int, m: int, like: torch.Tensor) -> _Listing:
        """The lists for the plans (rows with every key exact are not listed), weights of ``like``'s dtype, zeros."""
        dt, dev = like.dtype, like.device
        counts = torch.stack([p.top for p in plans]) if plans else torch.zeros(heads, n, dtype=torch.long, device=dev)
        listed = torch.where(counts >= m, 0, counts)  # rows with every key exact are not listed (the exact map's rows)
        offsets = (torch.cumsum(listed.reshape(-1), 0) - listed.reshape(-1)).reshape(heads, n)
        weights = torch.zeros(int(listed.sum()), dtype=dt, device=dev)
        indices = torch.zeros(int(listed.sum()), dtype=torch.long, device=dev)
        return cls(offsets, weights, indices, torch.zeros(heads, n, dtype=dt, device=dev))


class _HeadSums(NamedTuple):
    r"""One head's sums for its listed rows: ``a`` in float64, each row's mean logit and :math:`\sum_j y_j^2`, the
    number of keys and the value sums ``s0, s1, s2`` of :func:`_value_sums` (``None`` without values)."""

    a64: torch.Tensor
    mean_s: torch.Tensor
    sq: torch.Tensor
    m: int
    values: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None


def _head_sums(a: torch.Tensor, b: torch.Tensor, vals: torch.Tensor | None) -> _HeadSums:
    """:class:`_HeadSums` of one head's operands ``a``, ``b`` and values ``vals``."""
    a64 = a.double()
    values: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    if vals is not None:
        bbar, s0, s1, s2 = _value_sums(b, vals)
        values = (s0, s1, s2)
    else:
        bbar = b.double().mean(0)
    bc = b.double() - bbar
    cov = bc.transpose(0, 1) @ bc
    return _HeadSums(a64, a64 @ bbar, ((a64 @ cov) * a64).sum(-1).clamp_min(0.0), b.shape[0], values)


def _fill_head(listing: _Listing, output: _Output, h: int, plan: _Head, a: torch.Tensor, b: torch.Tensor) -> None:
    """Head ``h``'s listed rows, in pieces of at most ``_BLOCK_ELEMENTS`` gathered values ``(r, k_i, d_v)``."""
    sums = _head_sums(a, b, None if output.vals is None else output.vals[h])
    dv = 1 if output.vals is None else output.vals.shape[-1]
    for rows, top_logits, top_keys in plan.rows:
        step = max(1, _BLOCK_ELEMENTS // max(1, top_keys.shape[-1] * dv))
        for i in range(0, rows.numel(), step):
            piece = (rows[i : i + step], top_logits[i : i + step], top_keys[i : i + step])
            _fill_piece(listing, output, h, plan, sums, piece)


def _fill_piece(listing: _Listing, output: _Output, h: int, plan: _Head, sums: _HeadSums,
                piece: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
    """Rows of one head: their top keys' weights, their tail's share and (with values) their output, the tail's
    share through the key sums."""
    rows, top_logits, top_keys = piece
    m, kr = sums.m, top_keys.shape[-1]
    mx = plan.best[rows]
    v64 = top_logits.double()
    th, bh, gh = plan.cut[:, 0][rows], plan.cut[:, 1][rows], plan.cut[:, 2][rows]
    rho = torch.exp(th - mx)
    top_w = torch.exp(v64 - mx.unsqueeze(-1))
    delta = sums.mean_s[rows] - th
    p_top = _poly(v64 - th.unsqueeze(-1), bh, gh)
    tail = (m * (1.0 + delta * (bh + gh * delta)) + gh * sums.sq[rows] - p_top.sum(-1)).clamp_min(0.0)
    zhat = top_w.sum(-1) + rho * tail
    at = listing.offsets[h, rows].unsqueeze(-1) + torch.arange(kr, device=rows.device)
    dt = listing.weights.dtype
    listing.weights[at], listing.indices[at] = (top_w / zhat.unsqueeze(-1)).to(dt), top_keys
    listing.tail_mass[h, rows] = (rho * tail / zhat).to(dt)
    if sums.values is None:  # no values: no output
        return
    s0, s1, s2 = sums.values
    num = output.top_sums(h, top_w - rho.unsqueeze(-1) * p_top, top_keys, m)  # the top keys exactly, less their tail share
    c0 = 1.0 + delta * (bh + gh * delta)
    c1 = bh + 2.0 * gh * delta
    ar = sums.a64[rows]
    quad = ((ar.unsqueeze(-1) * ar.unsqueeze(-2)).reshape(len(rows), -1) @ s2)
    allv = c0.unsqueeze(-1) * s0 + c1.unsqueeze(-1) * (ar @ s1) + gh.unsqueeze(-1) * quad
    output.finish(h, rows, num + rho.unsqueeze(-1) * allv, zhat)


def _result(plans: list[_Head], listing: _Listing, output: _Output, searches: list[Any], batch: torch.Size,
            like: torch.Tensor, tau: float) -> TopkTail:
    """The :class:`TopkTail` of the plans and lists, each per-row array back to the points' leading axes
    (``like``: the flattened queries)."""
    heads, n, dt = like.shape[0], like.shape[-2], like.dtype

    def back(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*batch, n, *x.shape[2:])

    def stack(name: str) -> torch.Tensor:
        return torch.stack([getattr(p, name) for p in plans]) if plans else torch.zeros(heads, n)

    used, measured = _search_summary(searches)
    return TopkTail(
        output=None if output.out is None else back(output.out),
        weights=listing.weights,
        indices=listing.indices,
        offsets=back(listing.offsets),
        top_counts=back(stack("top")),
        tail_mass=back(listing.tail_mass),
        row_error=back(stack("error").to(dt)),
        row_baseline=back(stack("baseline").to(dt)),
        row_bound=back(stack("bound")),
        row_baseline_low=back(stack("base_low")),
        met=back(stack("met")),
        estimated=back(stack("estimated")),
        cut=back(stack("cut").to(dt)),
        search=used,
        recall=measured,
        temperature=tau,
    )


def distance_topk_attention(
    queries: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike | None = None,
    *,
    k: float = 1.0,
    temperature: float | None = None,
    top: Sequence[int] = LEVELS,
    tol: float = TOL,
    samples: int = SAMPLES,
    seed: int = 0,
    search: str = "exact",
    recall: float = 0.9,
    aggregation: str = "centroid",
    exact_fallback: bool = True,
    certify: bool = False,
) -> TopkTail:
    r"""Distance attention from each query's exact top keys and a fitted positive tail (see the module for the method).

    .. math::

        \hat P_{ij} = \frac{\hat w_{ij}}{\sum_l \hat w_{il}}, \qquad
        \hat w_{ij} = \begin{cases} e^{s_{ij} - m_i} & j \in T_i \\ e^{t_i - m_i}\, p_i(s_{ij} - t_i) & j \notin T_i \end{cases},
        \qquad s_{ij} = -\frac{\|q_i - \kappa_j\|_L^2}{2\tau},

    an approximation of the ``"distance"`` map (the map of the kind ``"distance_topk"`` in
    :func:`hypviz.attention.attention_map` and :func:`hypviz.attention.compare`, at the default ``top``,
    ``tol`` and ``samples``).  Each row takes the smallest number of top keys :math:`k_i` in ``top``
    whose estimated error :math:`\hat\varepsilon_i` (``row_error``, an estimate of the bound
    :math:`\mathrm{TV}(\hat P_i, P_i) \le \sum_{j \notin T_i} |\hat w_{ij} - w_{ij}| / \hat Z_i`) is at most
    ``tol`` times the row's estimated distance from uniform.  The values are aggregated as
    :func:`hypviz.attention.distance_linear_attention` aggregates them,

    .. math::

        m_i = \sum_j \hat P_{ij} v_j, \qquad
        \text{centroid: } o_i = \frac{\sqrt k\, m_i}{\sqrt{-\langle m_i, m_i\rangle_L}}, \qquad
        \text{spatial: } o_i = \mathrm{lift}\Bigl(\sum_j \hat P_{ij} v_{s,j}\Bigr),

    the tail's share through key sums (:math:`O((N + M)\, c^2 d_v)`) and the top keys' explicitly, so
    the map is never formed.  The top keys' search is exact by default (blocked products, no ``N x M``
    array, :math:`O(NMd)` time) or an index (``search``).  Every weight is finite and non-negative in float32 at any norm (the
    exponents are measured from each row's largest logit).

    Parameters
    ----------
    queries, keys : array or tensor, shapes (..., N, d + 1) and (..., M, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked); leading axes broadcast.
    values : array or tensor, shape (..., M, d_v + 1), optional
        Points on the hyperboloid, one per key; without them ``output`` is ``None``.
    k : float
        Curvature parameter.
    temperature : float, optional
        :math:`\tau`, default :math:`\sqrt d`.
    top : sequence of int
        The numbers of exact keys a row may take (:data:`LEVELS`); 0 is the tail alone (no search), one at least
        :math:`M` makes every key exact.
    exact_fallback : bool
        True (default): a row that meets ``tol`` at no entry of ``top`` (or whose error is extrapolated not to by
        the last entry) is computed with every key exact, error 0; False: it keeps the last entry and is marked
        (``met`` false).
    certify : bool
        False (default): a row takes the first entry of ``top`` whose *estimate* meets ``tol``; ``met`` says where
        the bound also does, ``estimated`` where only the estimate does.  True: the first entry whose *bound*
        meets it (with ``exact_fallback``, every row is then ``met``: a guarantee, at the cost of more keys or
        exact rows where the bound is loose).
    tol : float
        The target :math:`\hat\varepsilon_i \le \mathrm{tol}\cdot\mathrm{TV}(\hat P_i, U)` (:data:`TOL`).
    samples : int
        Keys sampled for the fit, and as many again for the error estimate (:data:`SAMPLES`).
    seed : int
        Seed of the sampled keys.
    search : str or KeyIndex
        The top-key search: ``"exact"`` (:func:`hypviz.attention.approx.key_search.exact_top_keys`, the default),
        ``"index"`` (:func:`hypviz.attention.approx.key_search.search_top_keys`: a faiss index picked by measured
        recall, exact search where none reaches ``recall``; needs faiss), ``"auto"`` (the index where
        faiss is installed, else exact), or an index of these keys from
        :func:`hypviz.attention.approx.key_search.fit_key_index`, fitted and built beforehand (one key set), used as it
        is.  With an index a true top key it missed is weighted by the tail.
    recall : float
        The recall an index must reach on sampled queries, in :math:`(0, 1]` (``"index"``, ``"auto"``).
    aggregation : str
        ``"centroid"`` (default) or ``"spatial"``.

    Returns
    -------
    TopkTail
        The output, the top keys and their weights, :math:`k_i`, the tail's share, the per-row error
        estimate and baseline, whether each row met ``tol``, the cut and the polynomial, the search and
        its recall.

    Raises
    ------
    ValueError
        For points or shapes :func:`hypviz.attention.scores` refuses, a non-positive ``temperature`` or
        ``tol``, ``top`` not a sequence of positive integers, ``samples`` below 1, a negative ``seed``,
        another ``search`` or ``aggregation``, a ``recall`` outside :math:`(0, 1]`; ``TypeError`` for dtypes
        that differ or an ``exact_fallback`` not a bool; ``ImportError`` for ``search="index"`` without faiss.

    Examples
    --------
    >>> from hypviz import data
    >>> from hypviz.attention import attention_map, distance_topk_attention
    >>> q, keys = data.wrapped_normal(8, 4, 0.5, seed=0), data.wrapped_normal(40, 4, 0.5, seed=1)
    >>> res = distance_topk_attention(q, keys, temperature=1.0, top=(4, 16))  # no entry meets tol: every key exact
    >>> res.top_counts.tolist(), bool(res.met.all()), float(res.row_error.max()), res.weights.numel()
    ([40, 40, 40, 40, 40, 40, 40, 40], True, 0.0, 0)
    >>> flagged = distance_topk_attention(q, keys, temperature=1.0, top=(4, 16), exact_fallback=False)
    >>> flagged.top_counts.tolist(), bool(flagged.met.any())  # the last entry kept, each row marked
    ([16, 16, 16, 16, 16, 16, 16, 16], False)
    >>> approx = attention_map(q, keys, "distance_topk", temperature=1.0)
    >>> exact = attention_map(q, keys, "distance", temperature=1.0)
    >>> bool((approx >= 0).all()), bool(((approx - exact).abs().sum(-1) / 2 < 1e-6).all())  # 40 keys: all exact
    (True, True)
    """
    settings = _check_settings(top, tol, samples, seed, search, recall, aggregation, exact_fallback, certify)
    q, kappa, v, k, batch = checked_inputs(queries, keys, k=k, values=values, detach=True)
    tau = check_temperature(temperature, q.shape[-1] - 1)
    q, kappa = flatten_batch(q, batch), flatten_batch(kappa, batch)
    v = None if v is None else flatten_batch(v, batch)
    with torch.no_grad():
        a, b = distance_operands(q, kappa, k=k, temperature=tau)
        searches = _searches(settings, q, kappa, a, b, k, tau)
        output = _Output(v, settings.aggregation, k, like=q)
        plans = [_plan(a[h], b[h], searches[h], settings.plan, keep=True, sink=output.sink(h)) for h in range(q.shape[0])]
        listing = _Listing.of(plans, q.shape[0], q.shape[-2], kappa.shape[-2], like=q)
        for h, plan in enumerate(plans):
            if plan.rows:  # else every row exact: done in the plan
                _fill_head(listing, output, h, plan, a[h], b[h])
    return _result(plans, listing, output, searches, batch, q, tau)
