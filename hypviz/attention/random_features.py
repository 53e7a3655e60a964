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
larger than the differences between the weights (of size :math:`r^2/\tau`).  On the rows where
:math:`\|a\| \max_j \|b_j\| < 1`, ``control_variate=True`` (the default) adds the exact first-order
term and uses the features only for the remainder,

.. math::

    \hat w_{ij} = e^{-\sqrt k w_j / \tau}\Bigl[1 + a_i \cdot b_j
        + \frac1D \sum_{\omega} \bigl(\varphi_\omega(a_i)\varphi_\omega(b_j) - (1 + \omega \cdot a_i)(1 + \omega \cdot b_j)\bigr)\Bigr],

still unbiased (:math:`\mathbb{E}[(1 + \omega \cdot a)(1 + \omega \cdot b)] = 1 + a \cdot b`) and still one
product of an :math:`N \times (2D + d + 2)` and an :math:`(2D + d + 2) \times M` matrix; on those rows
:math:`1 + a \cdot b > 0` by Cauchy-Schwarz.  Its noise is of second order in the norms, so its
error against the exact map stays a fixed fraction of the exact map's distance from uniform as
:math:`r^2/\tau \to 0`.  Orthogonal features (each block of :math:`d + 1` directions orthogonal,
lengths :math:`\chi_{d+1}`: every :math:`\omega` still :math:`\mathcal N(0, I)`, so still unbiased) reduce
the noise further.  Both are measured in notebook 10, and so is where nothing here suffices: sharp
maps, :math:`r^2/\tau \gtrsim 1` for Gaussian points, where the variance grows like
:math:`e^{\|q_s + \kappa_s\|^2/\tau}`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch

from hypviz.base import validate
from hypviz.attention.checks import check_temperature, checked_inputs, flatten_batch
from hypviz.lorentz import lift

__all__ = ["AGGREGATIONS", "random_directions", "performer_weights", "feature_operands", "distance_rf_map", "distance_linear_attention"]

ArrayLike = Any

#: How :func:`distance_linear_attention` aggregates the values.
AGGREGATIONS: tuple[str, ...] = ("centroid", "spatial")
_BLOCK_BYTES = 4 * 2**20  # streaming: bytes of one block of feature rows


def _check_options(features: Any, seed: Any, orthogonal: Any, control_variate: Any) -> tuple[int, int, bool, bool]:
    d_feat = validate.integer(features, "features", 1, " (the number D of random features)")
    s = validate.integer(seed, "seed", 0)
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
    then cast: the same seed gives the same directions on every machine.
    """
    d_feat, s, orth, _ = _check_options(features, seed, orthogonal, True)
    dim = validate.integer(dim, "dim", 1)
    return _directions(d_feat, dim, s, orth).to(dtype=dtype, copy=True)


@functools.lru_cache(maxsize=64)
def _directions(d_feat: int, dim: int, seed: int, orth: bool) -> torch.Tensor:
    """:func:`random_directions` in float64, cached (a sweep draws the same seeds at every point of it)."""
    gen = torch.Generator().manual_seed(seed)
    if not orth:
        return torch.randn(d_feat, dim, generator=gen, dtype=torch.float64)
    n_blocks = math.ceil(d_feat / dim)
    g = torch.randn(n_blocks, dim, dim, generator=gen, dtype=torch.float64)
    lengths = torch.randn(n_blocks, dim, dim, generator=gen, dtype=torch.float64).norm(dim=-1)  # chi_dim, independent
    qm, rm = np.linalg.qr(g.numpy())  # one stacked factorisation (LAPACK; faster than torch's for many small blocks)
    qm = torch.from_numpy(qm * np.sign(np.diagonal(rm, axis1=-2, axis2=-1))[..., None, :])  # Haar: orthonormal columns
    return (qm.transpose(-1, -2) * lengths.unsqueeze(-1)).reshape(n_blocks * dim, dim)[:d_feat].contiguous()


def performer_weights(queries: ArrayLike, keys: ArrayLike, omega: torch.Tensor, *, temperature: float, k: float = 1.0) -> torch.Tensor:
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
    q, kk, _, _, _ = checked_inputs(queries, keys, k)
    tau = validate.positive(temperature, "temperature")
    om = torch.as_tensor(omega, dtype=q.dtype, device=q.device)
    if om.dim() != 2 or om.shape[-1] != q.shape[-1]:
        raise ValueError(f"omega must have shape (D, {q.shape[-1]}), got {tuple(om.shape)}")
    x = torch.cat([-q[..., :1], q[..., 1:]], dim=-1) / math.sqrt(tau)
    y = kk / math.sqrt(tau)
    fx = torch.exp(x @ om.transpose(0, 1) - 0.5 * x.square().sum(dim=-1, keepdim=True))
    fy = torch.exp(y @ om.transpose(0, 1) - 0.5 * y.square().sum(dim=-1, keepdim=True))
    return (fx @ fy.transpose(-1, -2)) / om.shape[0]


def _centred_queries(q: torch.Tensor, kf: float, tau: float) -> torch.Tensor:
    """``a = (u, q_s)/sqrt(tau)`` with ``u = q_t - sqrt(k) = |q_s|^2 / (q_t + sqrt(k))`` (no cancellation)."""
    u = q[..., 1:].square().sum(dim=-1, keepdim=True) / (q[..., :1] + math.sqrt(kf))
    return torch.cat([u, q[..., 1:]], dim=-1) / math.sqrt(tau)


def _centred_keys(kk: torch.Tensor, kf: float, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``b = (-w, kappa_s)/sqrt(tau)`` and the keys' log-factor ``-sqrt(k) w / tau``, ``w = kappa_t - sqrt(k)``."""
    rk = math.sqrt(kf)
    w = kk[..., 1:].square().sum(dim=-1, keepdim=True) / (kk[..., :1] + rk)
    return torch.cat([-w, kk[..., 1:]], dim=-1) / math.sqrt(tau), (-rk / tau) * w.squeeze(-1)


def _centred(q: torch.Tensor, kk: torch.Tensor, kf: float, tau: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``a``, ``b`` and the keys' log-factor (:func:`_centred_queries`, :func:`_centred_keys`)."""
    return (_centred_queries(q, kf, tau), *_centred_keys(kk, kf, tau))


def _query_block(a: torch.Tensor, omega: torch.Tensor, reach: torch.Tensor, control: bool) -> torch.Tensor:
    """Query operands of a block of rows ``a (H, n, c)``: ``(H, n, C)``, with ``reach = max_j |b_j|`` per head ``(H, 1)``."""
    pa = a @ omega.transpose(0, 1)
    la = pa - 0.5 * a.square().sum(dim=-1, keepdim=True)
    if not control:
        return torch.exp(la - la.amax(dim=-1, keepdim=True))
    d_feat = omega.shape[0]
    use = ((a.norm(dim=-1) * reach) < 1.0).unsqueeze(-1)  # (H, n, 1): the first-order term is positive on these rows
    top = la.amax(dim=-1, keepdim=True)
    row = torch.where(use, top.clamp_min(0.0), top)  # a constant per row (it cancels): no overflow
    scale = torch.exp(-row) * use  # 0 on the rows without the control variate
    cv = -(1.0 + pa) * scale
    exact = torch.cat([torch.ones_like(a[..., :1]), a], dim=-1) * (d_feat * scale)
    return torch.cat([torch.exp(la - row), cv, exact], dim=-1)


def _key_block(b: torch.Tensor, logkey: torch.Tensor, omega: torch.Tensor, shift: torch.Tensor, control: bool) -> torch.Tensor:
    """Key operands of a block of keys ``b (H, m, c)``: ``(H, m, C)``, scaled by ``exp(-shift)`` (one constant per head)."""
    pb = b @ omega.transpose(0, 1)
    lk = logkey.unsqueeze(-1) - shift  # (H, m, 1)
    lb = torch.exp(pb - 0.5 * b.square().sum(dim=-1, keepdim=True) + lk)
    if not control:
        return lb
    kfac = lk.exp()
    return torch.cat([lb, kfac * (1.0 + pb), kfac * torch.cat([torch.ones_like(b[..., :1]), b], dim=-1)], dim=-1)


def feature_operands(
    queries: torch.Tensor, keys: torch.Tensor, kf: float, tau: float, omega: torch.Tensor, control_variate: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Unchecked: operands ``A (H, N, C)``, ``B (H, M, C)`` with :math:`\hat w_{ij} = c_i\, A_i \cdot B_j` (:math:`c_i > 0` per row).

    ``queries``, ``keys``: checked points with their leading axes flattened into one, ``(H, N, d + 1)``
    and ``(H, M, d + 1)``; ``omega``: ``(D, d + 1)`` (:func:`random_directions`).  ``C = D`` for plain
    features, ``2D + d + 2`` when some row uses the first-order control variate.  The row
    normalisation of :math:`A B^\top` is the implicit map of :func:`distance_linear_attention`.
    """
    a, b, logkey = _centred(queries, keys, kf, tau)
    lb = b @ omega.transpose(0, 1) - 0.5 * b.square().sum(dim=-1, keepdim=True) + logkey.unsqueeze(-1)
    shift = lb.amax(dim=(-2, -1), keepdim=True)  # the keys' stabiliser, from the same products (no second pass)
    reach = b.norm(dim=-1).amax(dim=-1, keepdim=True)
    control = control_variate and bool(((a.norm(dim=-1) * reach) < 1.0).any())
    return _query_block(a, omega, reach, control), _key_block(b, logkey, omega, shift, control)


def _setup(queries, keys, values, k, temperature, features, seed, orthogonal, control_variate):
    d_feat, s, orth, control = _check_options(features, seed, orthogonal, control_variate)
    q, kk, v, kf, batch = checked_inputs(queries, keys, k, values)
    tau = check_temperature(temperature, q.shape[-1] - 1)
    omega = random_directions(d_feat, q.shape[-1], seed=s, orthogonal=orth, dtype=q.dtype).to(q.device)
    return q, kk, v, kf, batch, tau, omega, control


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
    here for measurement, :math:`O(NMD)`; the attention itself never forms it.  Rows with the
    control variate can carry weights slightly below zero where the noise exceeds the first-order
    term (they are returned as computed: the output uses exactly these weights).

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
        The exact first-order term with the features as its control variate, where it applies.

    Raises
    ------
    ValueError
        For points or shapes :func:`hypviz.attention.scores` refuses, a non-positive ``temperature``
        or ``features``, a negative ``seed``; ``TypeError`` for dtypes that differ or non-bool options.
    """
    q, kk, _, kf, batch, tau, omega, control = _setup(queries, keys, None, k, temperature, features, seed, orthogonal, control_variate)
    qf, kfl = flatten_batch(q, batch), flatten_batch(kk, batch)
    a_op, b_op = feature_operands(qf, kfl, kf, tau, omega, control)
    w = a_op @ b_op.transpose(-1, -2)
    return (w / w.sum(dim=-1, keepdim=True)).reshape(*batch, q.shape[-2], kk.shape[-2])


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

    With :math:`\hat A` the map of :func:`distance_rf_map` (an unbiased estimate, weight by weight,
    of :math:`e^{\langle q, \kappa\rangle_L/\tau}` before the row normalisation),

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
    """
    agg = validate.choice(aggregation, "aggregation", AGGREGATIONS)
    q, kk, v, kf, batch, tau, omega, control = _setup(queries, keys, values, k, temperature, features, seed, orthogonal, control_variate)
    qf, kfl, vf = flatten_batch(q, batch), flatten_batch(kk, batch), flatten_batch(v, batch)
    heads, n, m = qf.shape[0], qf.shape[-2], kfl.shape[-2]
    block = max(1, _BLOCK_BYTES // ((2 * omega.shape[0] + q.shape[-1] + 1) * q.element_size()))
    # pass 1 over the keys: the stabiliser (largest key log-feature) and the reach max_j |b_j|, per head
    shift = torch.full((heads, 1, 1), -math.inf, dtype=q.dtype, device=q.device)
    reach = torch.zeros(heads, 1, dtype=q.dtype, device=q.device)
    for i in range(0, m, block):
        b, logkey = _centred_keys(kfl[:, i : i + block], kf, tau)
        lb = b @ omega.transpose(0, 1) - 0.5 * b.square().sum(dim=-1, keepdim=True) + logkey.unsqueeze(-1)
        shift = torch.maximum(shift, lb.amax(dim=(-2, -1), keepdim=True))
        reach = torch.maximum(reach, b.norm(dim=-1).amax(dim=-1, keepdim=True))
    if control:  # does any row use the first-order term?  |a|^2 = (u^2 + |q_s|^2) / tau, one number per query
        qs2 = qf[..., 1:].square().sum(dim=-1)
        a_norm = torch.sqrt((qs2.square() / (qf[..., 0] + math.sqrt(kf)).square() + qs2) / tau)
        control = bool(((a_norm * reach) < 1.0).any())
    vals = vf if agg == "centroid" else vf[..., 1:]
    summary, norm = None, None
    for i in range(0, m, block):  # pass 2 over the keys: B^T [V, 1]
        b, logkey = _centred_keys(kfl[:, i : i + block], kf, tau)
        bb = _key_block(b, logkey, omega, shift, control)
        s = bb.transpose(-1, -2) @ vals[:, i : i + block]
        z = bb.sum(dim=-2)
        summary, norm = (s, z) if summary is None else (summary + s, norm + z)
    res = torch.empty(heads, n, vf.shape[-1], dtype=q.dtype, device=q.device)
    for i in range(0, n, block):  # one pass over the queries: A (B^T V) / A (B^T 1), then onto the hyperboloid
        aa = _query_block(_centred_queries(qf[:, i : i + block], kf, tau), omega, reach, control)
        o = (aa @ summary) / (aa @ norm.unsqueeze(-1))
        if agg == "centroid":
            norm2 = o[..., :1].square() - o[..., 1:].square().sum(dim=-1, keepdim=True)
            o = o[..., 1:] * (math.sqrt(kf) / norm2.clamp_min(torch.finfo(o.dtype).tiny).sqrt())
        res[:, i : i + block] = lift(o, kf)
    return res.reshape(*batch, q.shape[-2], res.shape[-1])
