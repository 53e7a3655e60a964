r"""Attention maps on the hyperboloid: four score kinds, Hypformer's focused linear attention, a streaming comparison.

Inputs are points of the Lorentz model, time coordinate first, as in :mod:`hypviz.lorentz`:
``queries`` of shape ``(..., N, d + 1)`` and ``keys`` (and ``values``) of shape ``(..., M, d + 1)``
on :math:`\langle x, x\rangle_L = -k`, with optional leading head/batch axes that broadcast.
Keys are written :math:`\kappa`, because :math:`k` is the curvature parameter.

The kinds (:data:`KINDS`).  Three are softmax kinds, :math:`A_{ij} = \operatorname{softmax}_j(s_{ij} / \tau)`
with the scores

.. math::

    s^{\mathrm{spatial}}_{ij} = q_s \cdot \kappa_s, \qquad
    s^{\mathrm{distance}}_{ij} = -\tfrac12 \|q - \kappa\|_L^2 \le 0, \qquad
    s^{\mathrm{lorentz}}_{ij} = \langle q, \kappa\rangle_L = -q_t \kappa_t + q_s \cdot \kappa_s,

where ``"spatial"`` is the question-and-answer thread's object and ``"distance"`` is Hypformer's
full attention at :math:`\tau = k \cdot \mathrm{scale} / 2`.  The fourth, ``"focused"``, is
Hypformer's linear attention, which has no softmax and no temperature (:func:`focused_linear_map`):

.. math::

    A_{ij} = \frac{\phi(q_i) \cdot \phi(\kappa_j)}{\sum_l \phi(q_i) \cdot \phi(\kappa_l)} .

The softmax kinds are related exactly (identity 4, derived in notebook 04, and identity 1 rearranged):

.. math::

    q_s \cdot \kappa_s = -\tfrac12 \|q - \kappa\|_L^2 + (q_t \kappa_t - k), \qquad
    \langle q, \kappa\rangle_L = -\tfrac12 \|q - \kappa\|_L^2 - k,

so inside a row softmax ``"lorentz"`` equals ``"distance"`` exactly (identity 5), while ``"spatial"``
is ``"distance"`` plus the key-dependent bias :math:`q_t \kappa_t / \tau`.  :func:`compare` measures
how far two kinds' maps are apart, row by row, next to each map's distance from the uniform row,
and checks the bounds on the softmax gap (:func:`tv_supremum`, :func:`kl_supremum`).

The fifth, ``"distance_rf"``, is the ``"distance"`` map estimated by positive random features of
:math:`Jq/\sqrt\tau` and :math:`\kappa/\sqrt\tau` (:mod:`hypviz.random_features`): the implicit map of
:func:`hypviz.random_features.distance_linear_attention`, distance attention in linear time; like ``"focused"`` it is not a
softmax of scores, so the softmax bound does not apply to it.

Every public function validates its inputs once (a one-line ``ValueError`` or ``TypeError``) and
then computes with unchecked internals.  Pairwise arrays come from matrix products (one for
:func:`scores` and :func:`attention_map`; one or two per block of query rows in :func:`compare`),
never from broadcasting ``N x M x d``.

This module holds the maps; the rest of the public surface is importable from here but lives in
a module per job: :func:`compare` in :mod:`hypviz.streaming` (its row-block kernels in
:mod:`hypviz.block_stats`), :class:`Comparison` and :func:`verdict` in :mod:`hypviz.comparison`, :func:`compare_maps` (two
given maps) in :mod:`hypviz.given_maps`,
the bounds in :mod:`hypviz.bounds`, :func:`peak_tensor_memory` in :mod:`hypviz.memory`.
:func:`top_attention` (one query's row and its strongest keys, tie-aware, as :class:`TopKeys`) lives
in :mod:`hypviz.top_keys`.
"""

from __future__ import annotations

import math
from typing import Any
from typing import NamedTuple

import torch

from hypviz import _validate as validate
from hypviz.bounds import kl_supremum, tv_supremum
from hypviz.lorentz import as_tensor, check_k, check_points, distance_operands, lift

__all__ = [
    "KINDS",
    "SOFTMAX_KINDS",
    "MODEL_KINDS",
    "UNIFORM_TV",
    "UNIFORM_PEAK",
    "CLOSE_RATIO",
    "TOP1_WEIGHT",
    "MAJORITY",
    "VERDICTS",
    "ROW_VERDICTS",
    "verdict",
    "overall_verdict",
    "compare_maps",
    "scores",
    "attention_map",
    "focused_linear_map",
    "focused_linear_attention",
    "distance_linear_attention",
    "TopKeys",
    "top_attention",
    "compare",
    "Comparison",
    "kl_supremum",
    "tv_supremum",
    "resolve_device",
    "peak_tensor_memory",
]

ArrayLike = Any

#: The attention kinds: the softmax kinds (:data:`SOFTMAX_KINDS`), ``"focused"`` (Hypformer's linear map) and
#: ``"distance_rf"`` (the distance map by positive random features, :mod:`hypviz.random_features`).
KINDS: tuple[str, ...] = ("spatial", "distance", "lorentz", "focused", "distance_rf")
#: The kinds whose map is a row softmax of :func:`scores` over a temperature.
SOFTMAX_KINDS: tuple[str, ...] = ("spatial", "distance", "lorentz")
#: The kinds of other hyperbolic attention families, computed by :func:`attention_map` (and read by
#: :mod:`hypviz.capture`) but not compared by :func:`compare`: ``"sigmoid"``, the Lorentz GCN gate
#: :math:`\sigma(-\tfrac12\|q - \kappa\|_L^2/\tau + b)` (rows not normalised), and ``"poincare"``, the
#: softmax of the hyperbolic distance itself, :math:`\mathrm{softmax}_j(-d(q_i, \kappa_j)/\tau)` (not squared).
MODEL_KINDS: tuple[str, ...] = ("sigmoid", "poincare")
# coefficient c of the key-norm bias: logits(kind) = -1/2 |q - k|^2_L + c * q_t k_t + (row constant)
_BIAS = {"spatial": 1.0, "distance": 0.0, "lorentz": 0.0}
_FEATURE_EPS = 1e-6  # Hypformer's offsets in phi: (relu(x) + 1e-6) / (|norm_scale| + 1e-6)
# compare on CPU: bytes per logit buffer by default (within the budget).  HYPVIZ_BLOCK_BYTES overrides it:
# the portability check re-runs the notebooks with small blocks, so that results which depend on the
# blocking (and hence on the BLAS kernels chosen for each block shape) are caught.


# --------------------------------------------------------------------------- #
# validation: done once per public call
# --------------------------------------------------------------------------- #
def _check_kind(kind: Any, name: str = "kind", allowed: tuple[str, ...] = KINDS) -> str:
    return validate.choice(kind, name, allowed)


def _temperature(temperature: Any, d: int) -> float:
    if temperature is None:
        return math.sqrt(d)
    return validate.positive(temperature, "temperature", f" (default sqrt(d) = {math.sqrt(d):.4g})")


def _points(x: ArrayLike, name: str, rows: str) -> torch.Tensor:
    t = as_tensor(x, name)
    if t.dim() < 2 or t.shape[-1] < 2:
        raise ValueError(
            f"{name}: expected shape (..., {rows}, d + 1) with d >= 1 (time coordinate first), got shape {tuple(t.shape)}"
        )
    if t.numel() == 0:
        raise ValueError(f"{name}: expected at least one point, got the empty shape {tuple(t.shape)}")
    return t


def _heads_first(t: torch.Tensor, heads_axis: int | None, name: str) -> torch.Tensor:
    """Move the heads axis of a ``(..., N, d + 1)`` layout such as ``(N, H, d + 1)`` to the front."""
    if heads_axis is None:
        return t
    if isinstance(heads_axis, bool) or not isinstance(heads_axis, int):
        raise ValueError(f"heads_axis must be an integer axis or None, got {heads_axis!r}")
    if t.dim() < 3:
        raise ValueError(f"heads_axis={heads_axis}: {name} has shape {tuple(t.shape)}, no axis besides (N, d + 1)")
    ax = heads_axis + t.dim() if heads_axis < 0 else heads_axis
    if not 0 <= ax < t.dim() - 1:
        raise ValueError(
            f"heads_axis={heads_axis} is out of range for {name} of shape {tuple(t.shape)} "
            f"(expected 0..{t.dim() - 2}; the last axis holds the coordinates)"
        )
    return t.movedim(ax, 0)


def _on_hyperboloid(t: torch.Tensor, kf: float, name: str) -> torch.Tensor:
    """:func:`check_points`, except that float64 points made in float32 are checked there and re-lifted.

    ``x.double()`` of float32 points is off ``<x, x>_L = -k`` by float32 rounding, far above float64's
    tolerance.  When every coordinate is a float32 number and the points pass float32's check, they
    were made in float32: their time coordinate is recomputed from the spatial part in float64.
    """
    try:
        return check_points(t, kf, name=name)
    except ValueError:
        if t.dtype != torch.float64 or not bool(torch.isfinite(t).all()):
            raise
        as32 = t.to(torch.float32)
        if not torch.equal(as32.to(torch.float64), t):
            raise
        try:
            check_points(as32, kf, name=name)
        except ValueError:
            raise
        return lift(t[..., 1:], kf)


def _validate(
    queries: ArrayLike,
    keys: ArrayLike,
    k: float,
    values: ArrayLike | None = None,
    heads_axis: int | None = None,
    detach: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, float, torch.Size]:
    """Shapes, dtypes, devices, broadcasting and the hyperboloid; returns tensors and the batch shape."""
    kf = check_k(k)
    q = _heads_first(_points(queries, "queries", "N"), heads_axis, "queries")
    kk = _heads_first(_points(keys, "keys", "M"), heads_axis, "keys")
    v = None if values is None else _heads_first(_points(values, "values", "M"), heads_axis, "values")
    if detach:
        q, kk = q.detach(), kk.detach()
        v = None if v is None else v.detach()
    if q.shape[-1] != kk.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same number of coordinates d + 1: "
            f"queries is {tuple(q.shape)}, keys is {tuple(kk.shape)}"
        )
    if v is not None and v.shape[-2] != kk.shape[-2]:
        raise ValueError(
            f"values must have one row per key (M = {kk.shape[-2]}): keys is {tuple(kk.shape)}, values is {tuple(v.shape)}"
        )
    for t, name in ((kk, "keys"), (v, "values")):
        if t is None:
            continue
        if t.dtype != q.dtype:
            raise TypeError(f"queries are {q.dtype} but {name} are {t.dtype}; convert them to one dtype")
        if t.device != q.device:
            raise ValueError(f"queries are on {q.device} but {name} are on {t.device}; move them to one device")
    shapes = [q.shape[:-2], kk.shape[:-2]] + ([] if v is None else [v.shape[:-2]])
    try:
        batch = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        got = ", ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"the leading (head/batch) axes of queries, keys[, values] do not broadcast: {got}") from None
    q = _on_hyperboloid(q, kf, "queries")
    kk = _on_hyperboloid(kk, kf, "keys")
    if v is not None:
        v = _on_hyperboloid(v, kf, "values")
    return q, kk, v, kf, batch


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The device a computation runs on: ``"auto"`` is CUDA when available, else the CPU.

    ``"cpu"``, ``"cuda"`` and ``"cuda:<index>"`` (or a :class:`torch.device`) are accepted.

    Raises
    ------
    ValueError
        For any other device, for CUDA on a machine without it, or for a CUDA index the machine does not have.
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got {device!r}") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but CUDA is not available on this machine "
            "(torch.cuda.is_available() is False); use device='auto' or 'cpu'"
        )
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


# --------------------------------------------------------------------------- #
# unchecked kernels: logits as ONE matrix product of augmented operands
# --------------------------------------------------------------------------- #
def _operands(
    q: torch.Tensor, kk: torch.Tensor, kind: str, kf: float, scale: float, softmax: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(A, B)`` with ``A @ B^T = scale * scores(q, kk, kind)`` (before the distance clamp).

    ``A`` is ``(..., N, c)``, ``B`` is ``(..., M, c)``; the distance operands are
    :func:`hypviz.lorentz.distance_operands` (one product with ``d + 3`` columns).  With ``softmax``
    the logits only matter up to a constant per row: ``"lorentz"`` is then ``<q, kappa>_L + k =
    -1/2 |q - kappa|^2_L`` (identity 1), computed by the stable distance operands, because the direct
    ``-q_t kappa_t + q_s . kappa_s`` loses every digit of the differences between keys when ``k`` is large.
    """
    if kind == "spatial":
        return q[..., 1:] * scale, kk[..., 1:]
    if kind == "lorentz" and not softmax:
        return torch.cat([-q[..., :1], q[..., 1:]], dim=-1) * scale, kk
    return distance_operands(q, kk, kf, scale)


def _finish_(logits: torch.Tensor, kind: str) -> torch.Tensor:
    """In place: the distance logits are never positive (``|q - k|^2_L >= 0``)."""
    if kind == "distance":
        logits.clamp_max_(0.0)
    return logits


def _softmax_rows_(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of a contiguous tensor, in place: no new ``N x M`` allocation.

    On the CPU this is torch's fused last-dimension softmax kernel (max, exp and sum while the row
    is in cache, one parallel loop) writing over its input, which that kernel supports (it reads a
    row's maximum before writing and then works element by element).  Elsewhere, or should a
    future torch refuse the aliasing, the max-shifted formula runs as in-place passes.
    """
    if x.device.type == "cpu" and x.is_contiguous():
        try:
            return torch.ops.aten._softmax.out(x, -1, False, out=x)
        except RuntimeError:  # pragma: no cover - depends on the torch build
            pass
    x.sub_(x.amax(dim=-1, keepdim=True)).exp_()
    return x.div_(x.sum(dim=-1, keepdim=True))


def _flatten_batch(t: torch.Tensor, batch: torch.Size) -> torch.Tensor:
    return t.expand(*batch, *t.shape[-2:]).reshape(-1, *t.shape[-2:])


def _rows_for(nbytes: int, m: int, itemsize: int) -> int:
    return max(1, nbytes // max(1, m * itemsize))


def _logit_error(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row rounding bound of ``A @ B^T``: ``gamma_c * sum_c |A_ic| max_j |B_jc|`` (any summation order)."""
    c = a.shape[-1]
    gamma = (c + 3) * torch.finfo(a.dtype).eps
    col_max = torch.maximum(b.amax(dim=-2, keepdim=True), -b.amin(dim=-2, keepdim=True))  # (..., 1, c), no copy of b
    return gamma * (a.abs() * col_max).sum(dim=-1)


# --------------------------------------------------------------------------- #
# dense maps
# --------------------------------------------------------------------------- #
def scores(queries: ArrayLike, keys: ArrayLike, kind: str, *, k: float = 1.0) -> torch.Tensor:
    r"""Attention scores between every query and every key, shape ``(..., N, M)``, by one matrix product.

    .. math::

        s^{\mathrm{spatial}}_{ij} = q_{s,i} \cdot \kappa_{s,j}, \qquad
        s^{\mathrm{distance}}_{ij} = -\tfrac12 \|q_i - \kappa_j\|_L^2 \le 0, \qquad
        s^{\mathrm{lorentz}}_{ij} = \langle q_i, \kappa_j\rangle_L = -\tfrac12 \|q_i - \kappa_j\|_L^2 - k

    Parameters
    ----------
    queries : array or tensor, shape (..., N, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked).
    keys : array or tensor, shape (..., M, d + 1)
        Points; their leading axes broadcast against those of ``queries``.
    kind : str
        ``"spatial"``, ``"distance"`` or ``"lorentz"`` (``"focused"`` has no scores).
    k : float
        Curvature parameter.

    Returns
    -------
    torch.Tensor
        ``(..., N, M)``, dtype and device of the inputs.  ``"distance"`` is computed from the
        ``d + 3`` columns of :func:`hypviz.lorentz.distance_operands` (identity 1 with time measured
        from the origin's, no cancellation near it) and clamped at 0; ``"lorentz"`` directly as
        :math:`-q_t \kappa_t + q_s \cdot \kappa_s`.

    Raises
    ------
    ValueError
        For another ``kind``, points off the hyperboloid, ``d`` that differ, leading axes that do not
        broadcast, inputs on two devices, or :math:`k \le 0`; ``TypeError`` when the dtypes differ.
    """
    _check_kind(kind, allowed=SOFTMAX_KINDS)
    q, kk, _, kf, _ = _validate(queries, keys, k)
    a, b = _operands(q, kk, kind, kf, 1.0)
    return _finish_(a @ b.transpose(-1, -2), kind)


def attention_map(
    queries: ArrayLike,
    keys: ArrayLike,
    kind: str,
    *,
    k: float = 1.0,
    temperature: float | None = None,
    power: float = 2.0,
    norm_scale: float = 1.0,
    heads_axis: int | None = None,
    features: int = 256,
    seed: int = 0,
    bias: float = 0.0,
) -> torch.Tensor:
    r"""Attention map of ``kind``, shape ``(..., N, M)``; every row sums to 1 (except ``"sigmoid"``'s).

    For the softmax kinds, with :math:`s` the :func:`scores` of ``kind``,

    .. math::

        A_{ij} = \frac{\exp(s_{ij} / \tau)}{\sum_l \exp(s_{il} / \tau)} ;

    ``"lorentz"`` is evaluated as ``"distance"``, which has the same softmax (identity 5), because
    the direct :math:`-q_t \kappa_t + q_s \cdot \kappa_s` loses the differences between keys when
    :math:`k` is large.  ``"focused"`` is Hypformer's linear map, :func:`focused_linear_map` with
    ``power`` and ``norm_scale`` (no softmax; ``temperature`` is not used).  ``"distance_rf"`` is the
    implicit map of the linear-time distance attention, :func:`hypviz.random_features.distance_rf_map`
    with ``features`` random features drawn from ``seed`` (orthogonal, with the first-order control
    variate): an estimate of the ``"distance"`` map at ``temperature``.

    Parameters
    ----------
    queries, keys : array or tensor, shapes (..., N, d + 1) and (..., M, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked); leading axes broadcast.
    kind : str
        One of :data:`KINDS`.
    k : float
        Curvature parameter.
    temperature : float, optional
        :math:`\tau`, default :math:`\sqrt{d}` (``d`` the spatial dimension).  Hypformer's full
        (quadratic) attention is ``"distance"`` at :math:`\tau = k \cdot \mathrm{scale} / 2`, its
        learned ``scale`` initialised to :math:`\sqrt{d}` (``scale / 2`` in its simplified code,
        whose ``cinner`` does not divide by ``k``; :mod:`hypviz.capture` measures which).
    power, norm_scale : float
        The focused map's ``power_k`` and ``norm_scale`` (``"focused"`` only).
    heads_axis : int, optional
        The heads axis of a layout such as ``(N, H, d + 1)`` (Hypformer's); the result is then
        heads-first, ``(H, N, M)``.
    features, seed : int
        The number of random features and their seed (``"distance_rf"`` only).
    bias : float
        The gate's bias :math:`b` (``"sigmoid"`` only).  The two kinds of :data:`MODEL_KINDS` are

        .. math::

            A^{\mathrm{sigmoid}}_{ij} = \sigma\Bigl(\frac{-\tfrac12\|q_i - \kappa_j\|_L^2}{\tau} + b\Bigr),
            \qquad
            A^{\mathrm{poincare}}_{ij} = \mathrm{softmax}_j\Bigl(\frac{-d(q_i, \kappa_j)}{\tau}\Bigr),
            \quad d = \sqrt{k}\,\operatorname{arcosh}\Bigl(1 + \frac{\|q - \kappa\|_L^2}{2k}\Bigr),

        the Lorentz GCN's gate (HyboNet's ``(2 + 2<q,kappa>_L)/scale + bias`` at :math:`k = 1`,
        :math:`\tau = \mathrm{scale}/2`) and the Poincare-ball attention of the HNN++ style (the
        distance of the ball equals the hyperboloid's, so the points are hyperboloid points).

    Returns
    -------
    torch.Tensor
        ``(..., N, M)``, dtype and device of the inputs.  One matrix product writes the logits; on
        the CPU, without gradient, the softmax then overwrites them in place, so no second
        ``N x M`` array exists.  On other devices, or when a gradient is needed, it is
        ``torch.softmax`` (differentiable; ``torch.autograd.gradcheck`` checks it in the tests).

    Raises
    ------
    ValueError
        For an unknown ``kind``, a non-positive ``temperature`` or ``power``, a non-finite
        ``norm_scale``, a bad ``heads_axis``, or inputs :func:`scores` refuses, and for a scalar
        parameter given as a tensor that requires grad (like ``k``); ``TypeError`` when the dtypes
        differ, or for tensors without dense data (meta, sparse, nested).
    """
    if kind in MODEL_KINDS:
        return _model_kind_map(queries, keys, kind, k, temperature, bias, heads_axis)
    _check_kind(kind)
    if kind == "focused":
        q, kk, _, _, _ = _validate(queries, keys, k, heads_axis=heads_axis)
        return focused_linear_map(q, kk, power=power, norm_scale=norm_scale, k=k)
    if kind == "distance_rf":
        from hypviz.random_features import distance_rf_map

        q, kk, _, _, _ = _validate(queries, keys, k, heads_axis=heads_axis)
        return distance_rf_map(q, kk, k=k, temperature=temperature, features=features, seed=seed)
    q, kk, _, kf, batch = _validate(queries, keys, k, heads_axis=heads_axis)
    tau = _temperature(temperature, q.shape[-1] - 1)
    a, b = _operands(q, kk, kind, kf, 1.0 / tau, softmax=True)
    logits = _finish_(a @ b.transpose(-1, -2), kind)  # (..., N, M): the only N x M allocation
    if logits.device.type != "cpu" or logits.requires_grad:  # the in-place kernel is not differentiable
        return torch.softmax(logits, dim=-1)
    return _softmax_rows_(logits)


def _model_kind_map(queries: ArrayLike, keys: ArrayLike, kind: str, k: float, temperature: Any, bias: Any,
                    heads_axis: int | None) -> torch.Tensor:
    """The maps of :data:`MODEL_KINDS` (see :func:`attention_map`), from the squared distance by one product."""
    q, kk, _, kf, _ = _validate(queries, keys, k, heads_axis=heads_axis)
    tau = _temperature(temperature, q.shape[-1] - 1)
    b = validate.number(bias, "bias")
    inner_ = q[..., 1:] @ kk[..., 1:].transpose(-1, -2) - q[..., :1] @ kk[..., :1].transpose(-1, -2)
    sq = (-2.0 * kf - 2.0 * inner_).clamp_min(0.0)  # |q - kappa|^2_L >= 0 (rounding can make it negative)
    if kind == "sigmoid":
        return torch.sigmoid(-0.5 * sq / tau + b)
    u = sq / (2.0 * kf)  # arcosh(1 + u) = log1p(u + sqrt(u (u + 2))), accurate for small u
    dist = math.sqrt(kf) * torch.log1p(u + torch.sqrt(u * (u + 2.0)))
    return torch.softmax(-dist / tau, dim=-1)


# --------------------------------------------------------------------------- #
# Hypformer's focused linear attention
# --------------------------------------------------------------------------- #
def _check_power(power: Any) -> float:
    return validate.positive(power, "power", " (Hypformer's power_k, default 2)")


def _check_norm_scale(norm_scale: Any) -> float:
    return validate.number(norm_scale, "norm_scale")


def _check_eps(eps: Any) -> float:
    return validate.number(eps, "eps", minimum=0.0)


def _feature_map(xs: torch.Tensor, power: float) -> torch.Tensor:
    """``fp(relu(x) + 1e-6, p)`` with ``fp(y, p) = |y| y^p / |y^p|``: Hypformer's ``phi`` times ``|norm_scale| + 1e-6``.

    Hypformer's ``phi(x) = fp((relu(x) + 1e-6) / (|norm_scale| + 1e-6), p)``; ``fp`` is positively
    homogeneous (``fp(c y) = c fp(y)``), so ``phi = c fp(relu(x) + 1e-6)`` with
    ``c = 1 / (|norm_scale| + 1e-6)``, and ``c`` is applied by the callers where it does not cancel
    (:func:`_norm_scale_eps`): no ``norm_scale`` can make the features overflow or underflow.
    ``fp`` is evaluated as ``|y| z / |z|`` with ``z = (y / max(y))^p``: the same value, but ``y^p``
    can no longer overflow or underflow either.
    """
    y = torch.relu(xs) + _FEATURE_EPS
    if power == 1.0:
        return y
    z = y / y.amax(dim=-1, keepdim=True)
    if torch.is_grad_enabled() and z.requires_grad:  # out of place, so autograd can follow
        z = z.pow(power)
        return z * (torch.linalg.vector_norm(y, dim=-1, keepdim=True) / torch.linalg.vector_norm(z, dim=-1, keepdim=True))
    z.pow_(power)  # in place: no second (N, d) buffer
    ratio = torch.linalg.vector_norm(y, dim=-1, keepdim=True) / torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    return z.mul_(ratio)


def _norm_scale_eps(eps: float, norm_scale: float) -> float:
    """``eps / c^2 = eps (|norm_scale| + 1e-6)^2``: the normaliser's ``eps`` on the scale of ``fp`` features.

    ``phi(q) . phi(kappa) = c^2 fp(q) . fp(kappa)``, so ``c^2 a / (c^2 sum a + eps) = a / (sum a + eps / c^2)``;
    an overflow to ``inf`` gives the correct limit 0.
    """
    if eps == 0.0:
        return 0.0
    scale = abs(norm_scale) + _FEATURE_EPS
    return eps * scale * scale if scale < 1e150 else math.inf


def focused_linear_map(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    power: float = 2.0,
    norm_scale: float = 1.0,
    k: float = 1.0,
    eps: float = 0.0,
) -> torch.Tensor:
    r"""Hypformer's implicit linear-attention map, shape ``(..., N, M)``: no softmax, all entries positive.

    .. math::

        A_{ij} = \frac{\phi(q_i) \cdot \phi(\kappa_j)}{\sum_l \phi(q_i) \cdot \phi(\kappa_l) + \varepsilon},
        \qquad
        \phi(x) = f_p\Bigl(\frac{\mathrm{relu}(x_s) + 10^{-6}}{|\mathrm{norm\_scale}| + 10^{-6}}\Bigr),
        \qquad
        f_p(y) = \frac{\|y\|}{\|y^p\|}\, y^p,

    with the power :math:`y^p` taken element-wise (the focusing function, :math:`p` = ``power``), on
    the spatial parts only and without :math:`1/\sqrt{d}`, as in Hypformer's ``TransConvLayer``.
    Each row sums to 1 for :math:`\varepsilon = 0` (``eps``, the default; Hypformer adds
    :math:`10^{-6}` to the normaliser).  :math:`f_p` is positively homogeneous, so ``norm_scale``
    cancels from the map (exactly when :math:`\varepsilon = 0`; otherwise it only rescales
    :math:`\varepsilon`), and the features are computed without it: any finite ``norm_scale`` works.
    Hypformer never forms this map; here it costs :math:`O(N M d)`.

    ``queries (..., N, d + 1)`` and ``keys (..., M, d + 1)`` are checked to lie on
    :math:`\langle x, x\rangle_L = -k`; only their spatial parts enter.

    Raises
    ------
    ValueError
        For points or shapes :func:`scores` refuses, a non-positive ``power``, a non-finite
        ``norm_scale`` or a negative or non-finite ``eps``; ``TypeError`` when the dtypes differ.
    """
    q, kk, _, _, _ = _validate(queries, keys, k)
    p, s, e = _check_power(power), _check_norm_scale(norm_scale), _check_eps(eps)
    fq, fk = _feature_map(q[..., 1:], p), _feature_map(kk[..., 1:], p)
    a = fq @ fk.transpose(-1, -2)
    return a.div_(a.sum(dim=-1, keepdim=True).add_(_norm_scale_eps(e, s)))


def focused_linear_attention(
    queries: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike,
    *,
    power: float = 2.0,
    norm_scale: float = 1.0,
    k: float = 1.0,
    eps: float = 0.0,
) -> torch.Tensor:
    r"""Hypformer's aggregated spatial output, computed right to left: no ``N x M`` array.

    With :math:`\phi` as in :func:`focused_linear_map` and :math:`V_s` the values' spatial parts,

    .. math::

        O = \frac{\phi(Q)\,\bigl(\phi(K)^\top V_s\bigr)}{\phi(Q) \sum_j \phi(\kappa_j) + \varepsilon},

    in :math:`O((N + M)\, d\, d_v)` time and :math:`O((N + M)(d + d_v) + d\, d_v)` memory.  By
    associativity it equals ``focused_linear_map(queries, keys) @ V_s`` up to rounding (the tests
    hold float32 to a relative :math:`10^{-5}`).  ``values (..., M, d_v + 1)`` are points (checked);
    the result is the spatial output ``(..., N, d_v)`` (Hypformer then adds a learned map of
    :math:`V_s`, averages the heads and lifts with ``hypviz.lorentz.lift(out, k)``).
    ``eps = 1e-6`` reproduces Hypformer's normaliser exactly; the default 0 makes the identity with
    the map exact.

    Raises
    ------
    ValueError
        As :func:`focused_linear_map`, and when ``values`` has not one row per key.
    """
    q, kk, v, _, _ = _validate(queries, keys, k, values)
    p, s, e = _check_power(power), _check_norm_scale(norm_scale), _check_eps(eps)
    fq, fk = _feature_map(q[..., 1:], p), _feature_map(kk[..., 1:], p)
    kv = fk.transpose(-1, -2) @ v[..., 1:]  # (..., d, d_v)
    numerator = fq @ kv  # (..., N, d_v)
    normaliser = fq @ fk.sum(dim=-2).unsqueeze(-1)  # (..., N, 1)
    return numerator.div_(normaliser.add_(_norm_scale_eps(e, s)))



# --------------------------------------------------------------------------- #
# one row of a map and its strongest keys (computed by hypviz.top_keys.top_attention)
# --------------------------------------------------------------------------- #
class TopKeys(NamedTuple):
    r"""One query's attention row and its strongest keys, for one attention kind (see :func:`top_attention`).

    ``kind``: one of :data:`KINDS`; ``row``: ``(M,)`` the query's row of :func:`attention_map` (it
    sums to 1); ``indices``: ``(n,)`` the ``top`` keys with the largest weights *and every key tied
    with the weakest of them* (:math:`n \ge` ``top``; tied: weights equal to a relative ``tie_rtol``,
    the level of rounding, as for exactly symmetric keys of a tree embedding), strongest first, keys
    tied with each other listed by index; ``weights``: ``row[indices]``; ``temperature``: the
    :math:`\tau` used (``None`` for ``"focused"``, which has none).
    """

    kind: str
    row: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor
    temperature: float | None


# --------------------------------------------------------------------------- #
# the comparison and memory tools live in their own modules; their names are importable from here
# --------------------------------------------------------------------------- #
_ELSEWHERE = {
    "compare": "hypviz.streaming",
    "Comparison": "hypviz.comparison",
    "compare_maps": "hypviz.given_maps",
    "verdict": "hypviz.comparison",
    "overall_verdict": "hypviz.comparison",
    "UNIFORM_TV": "hypviz.comparison",
    "UNIFORM_PEAK": "hypviz.comparison",
    "CLOSE_RATIO": "hypviz.comparison",
    "TOP1_WEIGHT": "hypviz.comparison",
    "MAJORITY": "hypviz.comparison",
    "VERDICTS": "hypviz.comparison",
    "ROW_VERDICTS": "hypviz.comparison",
    "peak_tensor_memory": "hypviz.memory",
    "top_attention": "hypviz.top_keys",
    "distance_linear_attention": "hypviz.random_features",
}


def __getattr__(name: str) -> Any:
    if name in _ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module 'hypviz.attention' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ELSEWHERE))
