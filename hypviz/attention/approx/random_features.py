r"""Distance attention in linear time: positive random features for :math:`\exp(\langle q, \kappa\rangle_L / \tau)`.

With :math:`J = \mathrm{diag}(-1, 1, \dots, 1)`, :math:`\langle q, \kappa\rangle_L = (Jq) \cdot \kappa`, and
Performer's positive random features :math:`\varphi_\omega(x) = e^{\omega \cdot x - \|x\|^2 / 2}`,
:math:`\omega \sim \mathcal N(0, I)` (Choromanski et al., *Rethinking Attention with Performers*,
https://arxiv.org/abs/2009.14794), give

.. math::

    \mathbb{E}_\omega\bigl[\varphi_\omega(Jq/\sqrt\tau)\,\varphi_\omega(\kappa/\sqrt\tau)\bigr]
    = e^{\langle q, \kappa\rangle_L / \tau}, \qquad
    \frac{\mathrm{Var}}{\mathrm{mean}^2} = e^{\|Jq + \kappa\|^2 / \tau} - 1
    = e^{((\kappa_t - q_t)^2 + \|q_s + \kappa_s\|^2) / \tau} - 1

per feature, and :math:`\operatorname{softmax}_j(\langle q, \kappa_j\rangle_L / \tau)` is the distance
map (identity 5).  Queries and keys are featured *differently* (:math:`Jq` against :math:`\kappa`),
so whether the kernel's Gram matrix on one point set is positive semi-definite plays no role: the
estimator is unbiased for every pair.  Notebook 10 derives both formulas and measures the map.

Evaluated stably (no cancellation, float32 works), in coordinates measured from the origin:
:math:`u = q_t - \sqrt k = \|q_s\|^2 / (q_t + \sqrt k)`, :math:`w = \kappa_t - \sqrt k`,

.. math::

    a = \frac{(u, q_s)}{\sqrt\tau}, \qquad b = \frac{(-w, \kappa_s)}{\sqrt\tau}, \qquad
    \frac{\langle q, \kappa\rangle_L}{\tau} = a \cdot b - \frac{\sqrt k\, w}{\tau} + (\text{a term of } q \text{ only}),

and :math:`\varphi_\omega(Jq/\sqrt\tau)\varphi_\omega(\kappa/\sqrt\tau)` is, for the same
:math:`\omega` up to the sign of :math:`\omega_t`, :math:`\varphi_\omega(a)\varphi_\omega(b)\,e^{-\sqrt k w / \tau}`
times a factor of the query alone, which the row normalisation cancels.  The log-domain stabilisers
(a maximum per query row over the features, one maximum over all keys and features) cancel there too.

**Where plain random features fail, and the control variate.**  Near uniform maps (small
:math:`r^2/\tau`) the noise of the features, relative :math:`\sqrt{(e^{\|a + b\|^2} - 1)/D}`, is far
larger than the differences between the weights (of size :math:`r^2/\tau`).  ``control_variate=True``
(the default) adds the exact first-order term and uses the features only for the remainder,

.. math::

    \hat w_{ij} = e^{-\sqrt k w_j / \tau}\Bigl[1 + a_i \cdot b_j
        + \frac1D \sum_{\omega} \bigl(\varphi_\omega(a_i)\varphi_\omega(b_j)
        - (1 + \omega \cdot a_i)(1 + \omega \cdot b_j)\bigr)\Bigr],

still unbiased (:math:`\mathbb{E}[(1 + \omega \cdot a)(1 + \omega \cdot b)] = 1 + a \cdot b`) and still one
product of an :math:`N \times (2D + d + 2)` and an :math:`(2D + d + 2) \times M` matrix, on the rows where
it is used: those where every weight is provably at least half its first-order term (so never
negative: :func:`_positive_rows`, from :math:`e^y \ge 1 + y`) AND where its estimated variance of
the row's sum, from the :math:`D` samples, is below the plain features'.  Every other row uses the
plain positive features.  Its noise is of second order in the norms, so its error against the
exact map stays a fixed fraction of the exact map's distance from uniform as :math:`r^2/\tau \to 0`.
Orthogonal features (each block of :math:`d + 1` directions orthogonal, lengths :math:`\chi_{d+1}`:
every :math:`\omega` still :math:`\mathcal N(0, I)`, so still unbiased) reduce the noise further.
Both are measured in notebook 10, and so is where nothing here suffices: sharp maps,
:math:`r^2/\tau \gtrsim 1` for Gaussian points, where the variance grows like
:math:`e^{\|q_s + \kappa_s\|^2/\tau}`.

**What is unbiased.**  Each unnormalised weight :math:`\hat w_{ij}`, plain or with the control
variate, is an unbiased estimate of :math:`e^{\langle q_i, \kappa_j\rangle_L/\tau}` (times a factor of the
query alone) for directions drawn as :func:`random_directions` draws them.  The map
:math:`\hat w_{ij} / \sum_l \hat w_{il}` is a ratio of such estimates, a *ratio estimator*: consistent
as :math:`D \to \infty`, but biased at finite :math:`D` (the choice of rows for the control variate, made
from the same samples, is a further, smaller bias).  Every weight is finite and non-negative, in
float32 at any norm: each query-key product is stabilised in the log domain by the row's largest
term (:func:`_query_block`), so no row underflows.
"""

from __future__ import annotations

import collections
import math
from typing import Any, NamedTuple

import numpy as np
import torch

from hypviz.attention.maps.checks import check_temperature, checked_inputs, flatten_batch
from hypviz.attention.maps.kernels import Kernel, Operands, Option, log_, log_rounding, register_kernel
from hypviz.base import validate
from hypviz.base.kinds import Kind
from hypviz.lorentz import lift

__all__ = ["AGGREGATIONS", "random_directions", "performer_weights", "feature_operands", "distance_rf_map",
           "distance_linear_attention", "RandomFeatures"]

ArrayLike = Any

#: How :func:`distance_linear_attention` aggregates the values.
AGGREGATIONS: tuple[str, ...] = ("centroid", "spatial")
_BLOCK_BYTES = 4 * 2**20  # streaming: bytes of one block of feature rows


_CACHE_BYTES = 64 * 2**20  # the direction cache holds at most this many bytes
_cache: "collections.OrderedDict[tuple[int, int, int, bool], torch.Tensor]" = collections.OrderedDict()


def _check_options(features: Any, seed: Any, orthogonal: Any, control_variate: Any) -> tuple[int, int, bool, bool]:
    d_feat = validate.features(features)
    s = validate.seed(seed)
    for value, name in ((orthogonal, "orthogonal"), (control_variate, "control_variate")):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    return d_feat, s, orthogonal, control_variate


def random_directions(
    features: int, dim: int, *, seed: int = 0, orthogonal: bool = True, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    r"""The ``features x dim`` matrix of random directions :math:`\omega`, each row :math:`\mathcal N(0, I_{\mathrm{dim}})`.

    With ``orthogonal`` the rows come in blocks of ``dim`` mutually orthogonal directions
    (Haar-distributed, from the QR factorisation of a Gaussian matrix with the signs of
    :math:`\mathrm{diag}\, R` fixed) with independent :math:`\chi_{\mathrm{dim}}` lengths, so each row is
    still exactly :math:`\mathcal N(0, I)`.  Drawn in float64 on the CPU from ``torch.Generator(seed)``,
    then cast: the same seed gives the same directions on every machine.  Recent draws are cached
    (a sweep draws the same seeds at every point of it), at most 64 MiB in all.
    """
    d_feat, s, orth, _ = _check_options(features, seed, orthogonal, True)
    dim = validate.integer(dim, "dim", 1)
    return _directions(d_feat, dim, s, orth).to(dtype=dtype, copy=True)


def _directions(d_feat: int, dim: int, seed: int, orth: bool) -> torch.Tensor:
    """:func:`random_directions` in float64, from a cache bounded in bytes (least recently used dropped first)."""
    key = (d_feat, dim, seed, orth)
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit
    omega = _draw(d_feat, dim, seed, orth)
    size = omega.numel() * omega.element_size()
    if size <= _CACHE_BYTES:
        _cache[key] = omega
        total = sum(t.numel() * t.element_size() for t in _cache.values())
        while total > _CACHE_BYTES:
            _, old = _cache.popitem(last=False)
            total -= old.numel() * old.element_size()
    return omega


def _draw(d_feat: int, dim: int, seed: int, orth: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if not orth:
        return torch.randn(d_feat, dim, generator=gen, dtype=torch.float64)
    n_blocks = math.ceil(d_feat / dim)
    g = torch.randn(n_blocks, dim, dim, generator=gen, dtype=torch.float64)
    # chi_dim, independent (Tensor.norm is typed as returning Any)
    lengths: torch.Tensor = torch.randn(n_blocks, dim, dim, generator=gen, dtype=torch.float64).norm(dim=-1)
    qm, rm = np.linalg.qr(g.numpy())  # one stacked factorisation (LAPACK; faster than torch's for many small blocks)
    haar = torch.from_numpy(qm * np.sign(np.diagonal(rm, axis1=-2, axis2=-1))[..., None, :])  # orthonormal columns
    return (haar.transpose(-1, -2) * lengths.unsqueeze(-1)).reshape(n_blocks * dim, dim)[:d_feat].contiguous()


def performer_weights(
    queries: ArrayLike, keys: ArrayLike, omega: torch.Tensor, *, temperature: float, k: float = 1.0
) -> torch.Tensor:
    r"""The textbook estimate, unnormalised and unstabilised, shape ``(..., N, M)``: for measuring the estimator itself.

    .. math::

        \hat w_{ij} = \frac1D \sum_{\omega} \varphi_\omega\Bigl(\frac{J q_i}{\sqrt\tau}\Bigr)\,
        \varphi_\omega\Bigl(\frac{\kappa_j}{\sqrt\tau}\Bigr), \qquad
        \varphi_\omega(x) = e^{\omega \cdot x - \|x\|^2/2}, \qquad
        \mathbb{E}\,\hat w_{ij} = e^{\langle q_i, \kappa_j\rangle_L/\tau},

    with the rows of ``omega (D, d + 1)`` as the :math:`\omega` (:func:`random_directions`).  Formed
    pair by pair, :math:`O(NMD)`, and without stabilisers: for the modest norms of a check, not for
    attention (:func:`distance_linear_attention`).
    """
    q, kappa, _, _, _ = checked_inputs(queries, keys, k=k)
    tau = validate.temperature(temperature)
    om = torch.as_tensor(omega, dtype=q.dtype, device=q.device)
    if om.dim() != 2 or om.shape[-1] != q.shape[-1]:
        raise ValueError(f"omega must have shape (D, {q.shape[-1]}), got {tuple(om.shape)}")
    x = torch.cat([-q[..., :1], q[..., 1:]], dim=-1) / math.sqrt(tau)
    y = kappa / math.sqrt(tau)
    fx = torch.exp(x @ om.transpose(0, 1) - 0.5 * x.square().sum(dim=-1, keepdim=True))
    fy = torch.exp(y @ om.transpose(0, 1) - 0.5 * y.square().sum(dim=-1, keepdim=True))
    return (fx @ fy.transpose(-1, -2)) / om.shape[0]


def _centred_queries(q: torch.Tensor, k: float, tau: float) -> torch.Tensor:
    """``a = (u, q_s)/sqrt(tau)`` with ``u = q_t - sqrt(k) = |q_s|^2 / (q_t + sqrt(k))`` (no cancellation)."""
    u = q[..., 1:].square().sum(dim=-1, keepdim=True) / (q[..., :1] + math.sqrt(k))
    return torch.cat([u, q[..., 1:]], dim=-1) / math.sqrt(tau)


def _centred_keys(kappa: torch.Tensor, k: float, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``b = (-w, kappa_s)/sqrt(tau)`` and the keys' log-factor ``-sqrt(k) w / tau``, ``w = kappa_t - sqrt(k)``."""
    rk = math.sqrt(k)
    w = kappa[..., 1:].square().sum(dim=-1, keepdim=True) / (kappa[..., :1] + rk)
    return torch.cat([-w, kappa[..., 1:]], dim=-1) / math.sqrt(tau), (-rk / tau) * w.squeeze(-1)


def _centred(q: torch.Tensor, kappa: torch.Tensor, k: float, tau: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``a``, ``b`` and the keys' log-factor (:func:`_centred_queries`, :func:`_centred_keys`)."""
    return (_centred_queries(q, k, tau), *_centred_keys(kappa, k, tau))


def _key_logs(b: torch.Tensor, logkey: torch.Tensor, omega: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(omega . b, log phi_omega(b) + logkey)`` of a block of keys ``b (H, m, c)``: two ``(H, m, D)`` tensors."""
    pb = b @ omega.transpose(0, 1)
    return pb, pb - 0.5 * b.square().sum(dim=-1, keepdim=True) + logkey.unsqueeze(-1)


def _spread(omega: torch.Tensor) -> float:
    r""":math:`\|\Omega^\top \Omega / D - I\|_2`: how far the directions' second moment is from its expectation :math:`I`."""
    om = omega.double().cpu()
    dev = om.transpose(0, 1) @ om / om.shape[0] - torch.eye(om.shape[1], dtype=torch.float64)
    return float(torch.linalg.eigvalsh(dev).abs().max())


def _positive_rows(a_norm: torch.Tensor, reach: torch.Tensor, spread: float) -> torch.Tensor:
    r"""Rows on which the control-variate estimate of every weight is provably at least half the exact first-order term.

    From :math:`e^y \ge 1 + y`,
    :math:`\varphi_\omega(a)\varphi_\omega(b) \ge 1 + \omega \cdot (a + b) - (\|a\|^2 + \|b\|^2)/2`, so

    .. math::

        \hat w / e^{-\sqrt k w/\tau} \ge 1 - \frac{\|a\|^2 + \|b\|^2}{2} - a^\top (\hat\Sigma - I) b
        \ge 1 - \frac{\|a\|^2 + R^2}{2} - s\, \|a\| R

    with :math:`R = \max_j \|b_j\|`, :math:`\hat\Sigma = \Omega^\top\Omega / D` and :math:`s = \|\hat\Sigma - I\|_2`;
    the rows where this is at least :math:`1/2` (far from rounding) may use the control variate.
    """
    return (0.5 * (a_norm.square() + reach.square()) + spread * a_norm * reach) <= 0.5


def _query_block(a: torch.Tensor, omega: torch.Tensor, shift: torch.Tensor, c0: torch.Tensor, reach: torch.Tensor,
                 z: torch.Tensor, spread: float, control: bool) -> torch.Tensor:
    r"""Query operands of a block of rows ``a (H, n, c)``: ``(H, n, C)``, against keys scaled by ``shift`` (:func:`_key_block`).

    Plain columns :math:`e^{\log\varphi_\omega(a_i) + \mathrm{shift}_\omega - \rho_i}`, with
    :math:`\rho_i = \max_\omega(\log\varphi_\omega(a_i) + \mathrm{shift}_\omega)` the row's largest term:
    every product of a query and a key column is :math:`e^{\log\varphi_\omega(a_i) + \log\varphi_\omega(b_j)
    - \sqrt k w_j/\tau - \rho_i} \le 1` (a stabiliser per query-key pair in the log domain), and one is 1,
    so no row underflows and no row overflows.  With ``control``, the control-variate columns, nonzero
    on the rows that use it: those where every weight is provably positive (:func:`_positive_rows`) AND
    where the control variate's estimated variance of the row's sum is below the plain features', from
    the ``D`` samples :math:`X_\omega = \varphi_\omega(a_i) S_\omega` and
    :math:`Y_\omega = X_\omega - (1 + \omega \cdot a_i) T_\omega` (``z`` holds the keys' sums :math:`S, T`).
    """
    pa = a @ omega.transpose(0, 1)
    t = pa - 0.5 * a.square().sum(dim=-1, keepdim=True) + shift  # (H, n, D)
    row = t.amax(dim=-1, keepdim=True)
    plain = torch.exp(t - row)
    if not control:
        return plain
    d_feat = omega.shape[0]
    ok = _positive_rows(a.norm(dim=-1), reach, spread).unsqueeze(-1)  # (H, n, 1)
    scale = torch.exp(torch.where(ok, c0 - row, torch.full_like(row, -math.inf)))  # 0 where the CV is not allowed
    lin = (1.0 + pa) * scale
    x = plain * z[..., :d_feat].unsqueeze(-2)  # (H, n, D): samples of the plain row sum
    y = x - lin * z[..., d_feat : 2 * d_feat].unsqueeze(-2)  # and of the control variate's
    use = ok & (y.var(dim=-1, keepdim=True) < x.var(dim=-1, keepdim=True))
    scale = scale * use
    exact = torch.cat([torch.ones_like(a[..., :1]), a], dim=-1) * (d_feat * scale)
    return torch.cat([plain, -(1.0 + pa) * scale, exact], dim=-1)


def _key_block(b: torch.Tensor, logkey: torch.Tensor, omega: torch.Tensor, shift: torch.Tensor, c0: torch.Tensor,
               control: bool) -> torch.Tensor:
    """Key operands of a block of keys ``b (H, m, c)``: ``(H, m, C)``; plain columns scaled by ``exp(-shift)`` (per head
    and feature), the control variate's by ``exp(-c0)``."""
    pb, lb = _key_logs(b, logkey, omega)
    plain = torch.exp(lb - shift)
    if not control:
        return plain
    factor = torch.exp(logkey.unsqueeze(-1) - c0)
    return torch.cat([plain, factor * (1.0 + pb), factor * torch.cat([torch.ones_like(b[..., :1]), b], dim=-1)], dim=-1)


def _any_control(q: torch.Tensor, k: float, tau: float, reach: torch.Tensor, spread: float, control_variate: bool) -> bool:
    """Whether any query row may use the control variate (:func:`_positive_rows`): ``|a|^2 = (u^2 + |q_s|^2) / tau``."""
    if not control_variate:
        return False
    qs2 = q[..., 1:].square().sum(dim=-1)
    a_norm = torch.sqrt((qs2.square() / (q[..., 0] + math.sqrt(k)).square() + qs2) / tau)
    return bool(_positive_rows(a_norm, reach, spread).any())


def feature_operands(
    queries: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float, omega: torch.Tensor, control_variate: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Unchecked: operands ``A (H, N, C)``, ``B (H, M, C)`` with :math:`\hat w_{ij} = c_i\, A_i \cdot B_j`
    (:math:`c_i > 0` per row).

    ``queries``, ``keys``: checked points with their leading axes flattened into one, ``(H, N, d + 1)``
    and ``(H, M, d + 1)``; ``omega``: ``(D, d + 1)`` (:func:`random_directions`).  ``C = D`` for plain
    features, ``2D + d + 2`` when some row may use the first-order control variate.  Every
    :math:`A_i \cdot B_j \ge 0`, and every row's largest term is 1.  The row normalisation of
    :math:`A B^\top` is the implicit map of :func:`distance_linear_attention`, which streams the same
    operands.
    """
    a, b, logkey = _centred(queries, keys, k, temperature)
    _, lb = _key_logs(b, logkey, omega)
    shift = lb.amax(dim=-2, keepdim=True)  # (H, 1, D): the keys' stabiliser per feature
    c0 = logkey.amax(dim=-1, keepdim=True).unsqueeze(-1)  # (H, 1, 1)
    reach = b.norm(dim=-1).amax(dim=-1, keepdim=True)  # (H, 1)
    spread = _spread(omega)
    control = _any_control(queries, k, temperature, reach, spread, control_variate)
    bb = _key_block(b, logkey, omega, shift, c0, control)
    return _query_block(a, omega, shift, c0, reach, bb.sum(dim=-2), spread, control), bb


def _setup(queries: ArrayLike, keys: ArrayLike, values: ArrayLike | None, k: Any, temperature: Any, features: Any, seed: Any,
           orthogonal: Any, control_variate: Any) -> tuple[Any, ...]:
    """The checked points (leading axes flattened) and options: ``q, kappa, v, k, batch, tau, omega, control``."""
    d_feat, s, orth, control = _check_options(features, seed, orthogonal, control_variate)
    q, kappa, v, k, batch = checked_inputs(queries, keys, k=k, values=values)
    tau = check_temperature(temperature, q.shape[-1] - 1)
    omega = random_directions(d_feat, q.shape[-1], seed=s, orthogonal=orth, dtype=q.dtype).to(q.device)
    v = None if v is None else flatten_batch(v, batch)
    return flatten_batch(q, batch), flatten_batch(kappa, batch), v, k, batch, tau, omega, control


def distance_rf_map(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    k: float = 1.0,
    temperature: float | None = None,
    features: int = 256,
    seed: int = 0,
    orthogonal: bool = True,
    control_variate: bool = True,
) -> torch.Tensor:
    r"""The implicit map of :func:`distance_linear_attention`, shape ``(..., N, M)``: :math:`\hat w_{ij} / \sum_l \hat w_{il}`.

    .. math::

        \hat A_{ij} = \frac{\sum_\omega \varphi_\omega(a_i)\varphi_\omega(b_j)\, e^{-\sqrt k w_j/\tau}}
                           {\sum_l \sum_\omega \varphi_\omega(a_i)\varphi_\omega(b_l)\, e^{-\sqrt k w_l/\tau}}
        \approx \operatorname{softmax}_j\Bigl(-\frac{\|q_i - \kappa_j\|_L^2}{2\tau}\Bigr)

    (with the first-order control variate on the rows where it applies; see the module).  Formed
    here for measurement, :math:`O(NMD)`; the attention itself never forms it.  Every weight is
    finite and non-negative, every row sums to 1; each unnormalised weight is unbiased, the
    normalised map is a ratio estimator (biased at finite ``D``).

    Parameters
    ----------
    queries, keys : array or tensor, shapes (..., N, d + 1) and (..., M, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked); leading axes broadcast.
    k : float
        Curvature parameter.
    temperature : float, optional
        :math:`\tau`, default :math:`\sqrt d`.
    features : int
        :math:`D`, the number of random features.
    seed : int
        Seed of the random directions (:func:`random_directions`).
    orthogonal : bool
        Orthogonal blocks of directions (default) or independent ones.
    control_variate : bool
        The exact first-order term with the features as its control variate, on the rows where every
        weight stays provably positive and the estimated variance drops (see the module).

    Raises
    ------
    ValueError
        For points or shapes :func:`hypviz.attention.scores` refuses, a non-positive ``temperature``
        or ``features``, a negative ``seed``; ``TypeError`` for dtypes that differ or non-bool options.
    """
    q, kappa, _, k, batch, tau, omega, control = _setup(queries, keys, None, k, temperature, features, seed, orthogonal,
                                                         control_variate)
    a_op, b_op = feature_operands(q, kappa, k=k, temperature=tau, omega=omega, control_variate=control)
    w = a_op @ b_op.transpose(-1, -2)
    return (w / w.sum(dim=-1, keepdim=True)).reshape(*batch, q.shape[-2], kappa.shape[-2])


def distance_linear_attention(
    queries: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike,
    *,
    k: float = 1.0,
    temperature: float | None = None,
    features: int = 256,
    seed: int = 0,
    orthogonal: bool = True,
    control_variate: bool = True,
    aggregation: str = "centroid",
) -> torch.Tensor:
    r"""Distance attention in linear time: the values aggregated by the random-feature map, never forming it.

    With :math:`\hat A` the map of :func:`distance_rf_map` (before the row normalisation, an unbiased
    estimate, weight by weight, of :math:`e^{\langle q, \kappa\rangle_L/\tau}`; after it a ratio
    estimator, biased at finite ``D``; the same map as ``compare(..., "distance_rf")`` measures),

    .. math::

        m_i = \frac{A_i \bigl(B^\top V\bigr)}{A_i \bigl(B^\top \mathbf 1\bigr)} = \sum_j \hat A_{ij} v_j, \qquad
        \text{centroid: } o_i = \frac{\sqrt k\, m_i}{\sqrt{-\langle m_i, m_i\rangle_L}}, \qquad
        \text{spatial: } o_i = \mathrm{lift}\Bigl(\sum_j \hat A_{ij} v_{s,j}\Bigr),

    computed right to left, streamed over blocks of keys (twice: the stabiliser, then
    :math:`B^\top [V, \mathbf 1]`) and then of queries: :math:`O((N + M) D d)` time and
    :math:`O(\mathrm{block} \cdot (D + d) + D d)` working memory besides the inputs and the output
    (with the inputs flattened to one head axis, which copies them only when their leading axes broadcast).
    ``"centroid"`` is the Lorentzian centroid, the aggregation of Hypformer's full (distance) mode;
    ``"spatial"`` averages the spatial parts and lifts them, as its linear mode does.

    Parameters
    ----------
    queries, keys, values : array or tensor, shapes (..., N, d + 1), (..., M, d + 1), (..., M, d_v + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked); leading axes broadcast.
    k, temperature, features, seed, orthogonal, control_variate
        As :func:`distance_rf_map`.
    aggregation : str
        ``"centroid"`` (default) or ``"spatial"``.

    Returns
    -------
    torch.Tensor
        ``(..., N, d_v + 1)``, points on :math:`\langle x, x\rangle_L = -k`, dtype and device of the inputs.

    Raises
    ------
    ValueError
        As :func:`distance_rf_map`, for ``values`` without one row per key, or another ``aggregation``.

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz import lorentz
    >>> from hypviz.attention import distance_linear_attention
    >>> values = data.wrapped_normal(6, 2, 0.5, seed=2)
    >>> out = distance_linear_attention(queries, keys, values, temperature=1.0, features=64)
    >>> out.shape, lorentz.check_points(out).shape  # the centroid is a point of the hyperboloid
    (torch.Size([4, 3]), torch.Size([4, 3]))
    """
    agg = validate.choice(aggregation, "aggregation", AGGREGATIONS)
    q, kappa, v, k, batch, tau, omega, control = _setup(queries, keys, values, k, temperature, features, seed, orthogonal,
                                                         control_variate)
    n = q.shape[-2]
    block = max(1, _BLOCK_BYTES // ((2 * omega.shape[0] + q.shape[-1] + 1) * q.element_size()))
    stab = _stabilisers(kappa, k, tau, omega, block)
    spread = _spread(omega)
    control = _any_control(q, k, tau, stab.reach, spread, control)
    summary, norm = _key_summaries(kappa, v if agg == "centroid" else v[..., 1:], k, tau, omega, stab, control, block)
    res = torch.empty(q.shape[0], n, v.shape[-1], dtype=q.dtype, device=q.device)
    for i in range(0, n, block):  # one pass over the queries: A (B^T V) / A (B^T 1), then onto the hyperboloid
        aa = _query_block(_centred_queries(q[:, i : i + block], k, tau), omega, stab.shift, stab.c0, stab.reach, norm, spread,
                          control)
        o = (aa @ summary) / (aa @ norm.unsqueeze(-1))
        if agg == "centroid":
            norm2 = o[..., :1].square() - o[..., 1:].square().sum(dim=-1, keepdim=True)
            o = o[..., 1:] * (math.sqrt(k) / norm2.clamp_min(torch.finfo(o.dtype).tiny).sqrt())
        res[:, i : i + block] = lift(o, k=k)
    return res.reshape(*batch, n, res.shape[-1])


class _Stabilisers(NamedTuple):
    r"""The keys' stabilisers, per head: ``shift (H, 1, D)`` the largest key log-feature per feature, ``c0 (H, 1, 1)``
    the largest key factor, ``reach (H, 1)`` :math:`\max_j \|b_j\|`."""

    shift: torch.Tensor
    c0: torch.Tensor
    reach: torch.Tensor


def _stabilisers(kappa: torch.Tensor, k: float, tau: float, omega: torch.Tensor, block: int) -> _Stabilisers:
    """Pass 1 over the keys ``kappa (H, M, d + 1)``, ``block`` at a time: their :class:`_Stabilisers`."""
    heads, m = kappa.shape[0], kappa.shape[-2]
    shift = torch.full((heads, 1, omega.shape[0]), -math.inf, dtype=kappa.dtype, device=kappa.device)
    c0 = torch.full((heads, 1, 1), -math.inf, dtype=kappa.dtype, device=kappa.device)
    reach = torch.zeros(heads, 1, dtype=kappa.dtype, device=kappa.device)
    for i in range(0, m, block):
        b, logkey = _centred_keys(kappa[:, i : i + block], k, tau)
        shift = torch.maximum(shift, _key_logs(b, logkey, omega)[1].amax(dim=-2, keepdim=True))
        c0 = torch.maximum(c0, logkey.amax(dim=-1, keepdim=True).unsqueeze(-1))
        reach = torch.maximum(reach, b.norm(dim=-1).amax(dim=-1, keepdim=True))
    return _Stabilisers(shift, c0, reach)


def _key_summaries(kappa: torch.Tensor, vals: torch.Tensor, k: float, tau: float, omega: torch.Tensor, stab: _Stabilisers,
                   control: bool, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Pass 2 over the keys, ``block`` at a time: :math:`B^\top V` and :math:`B^\top \mathbf 1` (the key operands
    of :func:`_key_block` against the stabilisers)."""
    summary: torch.Tensor | None = None
    norm: torch.Tensor | None = None
    for i in range(0, kappa.shape[-2], block):
        b, logkey = _centred_keys(kappa[:, i : i + block], k, tau)
        bb = _key_block(b, logkey, omega, stab.shift, stab.c0, control)
        s = bb.transpose(-1, -2) @ vals[:, i : i + block]
        z = bb.sum(dim=-2)
        summary, norm = (s, z) if summary is None or norm is None else (summary + s, norm + z)
    assert summary is not None and norm is not None  # at least one key (checked)
    return summary, norm


class RandomFeatures(Kernel):
    """The distance map by positive random features (this module): ``log(A @ B^T)``."""

    options = {"features": Option(lambda v, name: validate.features(v), 256),
               "seed": Option(lambda v, name: validate.seed(v, name), 0)}

    def operands(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
                 opts: dict[str, Any]) -> Operands:
        omega = random_directions(opts["features"], q.shape[-1], seed=opts["seed"], dtype=q.dtype).to(q.device)
        a, b = feature_operands(q, keys, k=k, temperature=temperature, omega=omega)
        # the log of A @ B^T: on rows of positive terms (no control variate) off by <= gamma_c; on rows with
        # the control variate (terms of both signs) gamma_c sum_c |A_ic| max_j |B_jc|, relative to the row's mean weight
        gamma = (a.shape[-1] + 3) * torch.finfo(q.dtype).eps
        col_max = torch.maximum(b.amax(dim=-2, keepdim=True), -b.amin(dim=-2, keepdim=True))
        size = (a.abs() * col_max).sum(dim=-1)
        mean = (a * b.mean(dim=-2, keepdim=True)).sum(dim=-1).abs().clamp_min(torch.finfo(q.dtype).tiny)
        mixed = (a < 0).any(dim=-1)
        err = torch.where(mixed, gamma * size / mean, torch.full_like(size, gamma))
        # plus the log's own rounding; on mixed rows the smallest weight is only known to be >= the clamp
        return Operands(kind.name, a, b, err + log_rounding(a, b, mixed), finish=log_)

    def largest_logit(self, kind: Kind, ops: Operands, dtype: torch.dtype) -> float:
        return 0.0  # the log of a finite float cannot overflow

    def dense(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
              opts: dict[str, Any]) -> torch.Tensor:
        return distance_rf_map(q, keys, k=k, temperature=temperature, features=opts["features"], seed=opts["seed"])


register_kernel("random_features", RandomFeatures())
