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

Every public function validates its inputs once (a one-line ``ValueError`` or ``TypeError``) and
then computes with unchecked internals.  Pairwise arrays come from matrix products (one for
:func:`scores` and :func:`attention_map`; one or two per block of query rows in :func:`compare`),
never from broadcasting ``N x M x d``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import Any, Callable

import torch

from hypviz import _validate as validate
from hypviz.lorentz import as_tensor, check_k, check_points, distance_operands, lift

__all__ = [
    "KINDS",
    "SOFTMAX_KINDS",
    "UNIFORM_TV",
    "CLOSE_RATIO",
    "VERDICTS",
    "verdict",
    "scores",
    "attention_map",
    "focused_linear_map",
    "focused_linear_attention",
    "compare",
    "Comparison",
    "kl_supremum",
    "tv_supremum",
    "resolve_device",
    "peak_tensor_memory",
]

ArrayLike = Any

#: The attention kinds, the softmax kinds (:data:`SOFTMAX_KINDS`) and ``"focused"`` (Hypformer's linear map).
KINDS: tuple[str, ...] = ("spatial", "distance", "lorentz", "focused")
#: The kinds whose map is a row softmax of :func:`scores` over a temperature.
SOFTMAX_KINDS: tuple[str, ...] = ("spatial", "distance", "lorentz")
# coefficient c of the key-norm bias: logits(kind) = -1/2 |q - k|^2_L + c * q_t k_t + (row constant)
_BIAS = {"spatial": 1.0, "distance": 0.0, "lorentz": 0.0}
_FEATURE_EPS = 1e-6  # Hypformer's offsets in phi: (relu(x) + 1e-6) / (|norm_scale| + 1e-6)
# compare on CPU: bytes per logit buffer by default (within the budget).  HYPVIZ_BLOCK_BYTES overrides it:
# the portability check re-runs the notebooks with small blocks, so that results which depend on the
# blocking (and hence on the BLAS kernels chosen for each block shape) are caught.
_COMPARE_BLOCK_BYTES = int(os.environ.get("HYPVIZ_BLOCK_BYTES", 16 * 2**20))
_DEFAULT_BUDGET = 256 * 2**20  # compare: working memory for the row-block buffers
_MIN_BLOCK_ROWS = 32  # compare on CPU: rows per block the cache-sized default may not go below (budget permitting)
_P_ROUTE_EPS = 8.0  # compare: baselines from the softmax weights where the logits' rounding bound (tol / 2) exceeds 4 eps
_TILT_MAX_GAP = 30.0  # compare: rows with a wider logit gap use the direct log-softmax formulas


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
# the bounds: suprema over all rows with a given bias spread Delta
# --------------------------------------------------------------------------- #
def tv_supremum(delta: ArrayLike) -> torch.Tensor:
    r"""Sharp bound on the total variation of two softmax rows whose logits differ by a bias of spread :math:`\Delta`.

    For :math:`P_j \propto e^{s_j}` and :math:`S_j \propto e^{s_j + b_j}` with
    :math:`\max_j b_j - \min_j b_j \le \Delta`,

    .. math::

        \mathrm{TV}(P, S) = \tfrac12 \sum_j |P_j - S_j| \le \tanh\frac{\Delta}{4},

    with equality for a two-point row (notebook 04 derives it).  Returns a tensor of the dtype of
    a floating-point ``delta`` (torch's default dtype for a Python number or integers).
    """
    d = torch.as_tensor(delta)
    return torch.tanh(d / 4)


def kl_supremum(delta: ArrayLike) -> torch.Tensor:
    r"""Exact supremum of the KL divergence of two softmax rows whose logits differ by a bias of spread :math:`\Delta \ge 0`.

    For :math:`P` and :math:`S` as in :func:`tv_supremum` (the supremum is the same for
    :math:`\mathrm{KL}(P \| S)` and :math:`\mathrm{KL}(S \| P)`),

    .. math::

        \sup \mathrm{KL} = \max_{\theta \in [0, 1]} \bigl[\log(1 - \theta + \theta e^{\Delta}) - \theta \Delta\bigr]
            = \log\frac{e^{\Delta} - 1}{\Delta} - 1 + \frac{\Delta}{e^{\Delta} - 1}
            \le \frac{\Delta^2}{8},

    attained by a two-point row (by convexity of :math:`e^b`; notebook 04 derives it).
    :math:`\Delta^2/8` is Hoeffding's simpler bound; the supremum grows only like
    :math:`\Delta - 1 - \log\Delta` for large :math:`\Delta` (4.92 at 8, 16.0 at 20).  Evaluated in
    float64 without cancellation (a series below :math:`\Delta = 0.05`; negative values count as 0)
    and returned in the dtype of ``delta`` (torch's default dtype for a Python float, float64 for
    integers).
    """
    d0 = torch.as_tensor(delta)
    d = d0.double().clamp_min(0.0)
    small = d < 0.05
    d2 = d * d
    series = d2 / 8 - d2**2 / 576 + d2**3 / 25920 - d2**4 / 1075200
    safe = torch.where(small, torch.ones_like(d), d)
    big = safe + torch.log1p(-torch.exp(-safe)) - torch.log(safe) - 1 + safe * torch.exp(-safe) / (-torch.expm1(-safe))
    out = torch.where(small, series, big)
    return out.to(d0.dtype) if d0.is_floating_point() else out


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
) -> torch.Tensor:
    r"""Attention map of ``kind``, shape ``(..., N, M)``; every row sums to 1.

    For the softmax kinds, with :math:`s` the :func:`scores` of ``kind``,

    .. math::

        A_{ij} = \frac{\exp(s_{ij} / \tau)}{\sum_l \exp(s_{il} / \tau)} ;

    ``"lorentz"`` is evaluated as ``"distance"``, which has the same softmax (identity 5), because
    the direct :math:`-q_t \kappa_t + q_s \cdot \kappa_s` loses the differences between keys when
    :math:`k` is large.  ``"focused"`` is Hypformer's linear map, :func:`focused_linear_map` with
    ``power`` and ``norm_scale`` (no softmax; ``temperature`` is not used).

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
        ``norm_scale``, a bad ``heads_axis``, or inputs :func:`scores` refuses; ``TypeError`` when
        the dtypes differ.
    """
    _check_kind(kind)
    if kind == "focused":
        q, kk, _, _, _ = _validate(queries, keys, k, heads_axis=heads_axis)
        return focused_linear_map(q, kk, power=power, norm_scale=norm_scale, k=k)
    q, kk, _, kf, batch = _validate(queries, keys, k, heads_axis=heads_axis)
    tau = _temperature(temperature, q.shape[-1] - 1)
    a, b = _operands(q, kk, kind, kf, 1.0 / tau, softmax=True)
    logits = _finish_(a @ b.transpose(-1, -2), kind)  # (..., N, M): the only N x M allocation
    if logits.device.type != "cpu" or logits.requires_grad:  # the in-place kernel is not differentiable
        return torch.softmax(logits, dim=-1)
    return _softmax_rows_(logits)


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
# streaming comparison
# --------------------------------------------------------------------------- #
UNIFORM_TV = 0.05
"""A row whose total variation from the uniform row is below this is *near uniform* (:func:`verdict`)."""
CLOSE_RATIO = 0.25
r"""Two maps are *close* when :math:`\mathrm{TV}(P_a, P_b) \le 0.25\,\mathrm{TV}(P_b, U)`, this ratio times the reference's baseline (:func:`verdict`)."""
#: The three readings :func:`verdict` gives.
VERDICTS: tuple[str, ...] = ("close", "different", "uninformative")
_SPEARMAN_MAX_KEYS = 4096  # compare: rank correlations by default only up to this many keys


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def verdict(tv: float, tv_uniform_a: float, tv_uniform_b: float) -> str:
    r"""Plain-language reading of a comparison, from its scale-free measures only; ``b`` is the reference.

    With :math:`U` the uniform row:

    * ``"uninformative"`` when both maps are near uniform, :math:`\mathrm{TV}(P_a, U) < 0.05` and
      :math:`\mathrm{TV}(P_b, U) < 0.05`: any two near-uniform maps have a small TV, so it says nothing;
    * else ``"close"`` when the gap is small next to the reference's own structure,
      :math:`\mathrm{TV}(P_a, P_b) \le 0.25\, \mathrm{TV}(P_b, U)`;
    * else ``"different"``.

    ``tv``, ``tv_uniform_a`` and ``tv_uniform_b`` are :math:`\mathrm{TV}(P_a, P_b)`,
    :math:`\mathrm{TV}(P_a, U)` and :math:`\mathrm{TV}(P_b, U)` (of one row, or means over rows).
    The thresholds are :data:`UNIFORM_TV` and :data:`CLOSE_RATIO`; an absolute TV alone is never read.
    """
    if tv_uniform_a < UNIFORM_TV and tv_uniform_b < UNIFORM_TV:
        return "uninformative"
    return "close" if tv <= CLOSE_RATIO * tv_uniform_b else "different"


def _row_verdicts(tv: torch.Tensor, ua: torch.Tensor, ub: torch.Tensor) -> torch.Tensor:
    """Per-row verdict codes (indices into :data:`VERDICTS`), same rule as :func:`verdict`."""
    code = torch.where(tv <= CLOSE_RATIO * ub, 0, 1)
    return torch.where((ua < UNIFORM_TV) & (ub < UNIFORM_TV), 2, code).to(torch.int8)


def _mean(t: torch.Tensor | None) -> float | None:
    return None if t is None else float(t.double().mean())


@dataclasses.dataclass(repr=False)
class Comparison:
    r"""Row-by-row comparison of two attention maps :math:`P_a` and :math:`P_b` (``b`` is the reference), made by :func:`compare`.

    Per-row fields are tensors of shape ``(..., N)`` (the broadcast leading axes, then the query
    rows computed), on the inputs' device:

    * ``kl``: :math:`\mathrm{KL}(P_b \| P_a) = \sum_j P_{b,j} \log(P_{b,j} / P_{a,j})`;
    * ``tv``: the total variation :math:`\tfrac12 \sum_j |P_{b,j} - P_{a,j}|`;
    * ``tv_uniform_a``, ``tv_uniform_b``: :math:`\mathrm{TV}(P_a, U)` and :math:`\mathrm{TV}(P_b, U)`,
      :math:`U` the uniform row :math:`1/M`: the baseline, how far each map is from attending to
      nothing in particular;
    * ``logit_gap``: the spread :math:`\max_j g_j - \min_j g_j` of :math:`g = \log P_b - \log P_a`
      (twice its sup-distance from the nearest constant; for two softmax kinds
      :math:`(s_b - s_a)/\tau` up to a row constant);
    * ``top1``: whether both maps put their largest weight on the same key, *tie-aware*: one map's
      favourite counts when its logit in the other map is within that map's rounding bound of its
      maximum;
    * ``topk_overlap``: the fraction of one map's top-k keys that are (within rounding, the same
      way) among the other's top k, the larger of the two directions;
    * ``spearman``: the Spearman rank correlation :math:`1 - 6 \sum_j d_j^2 / (M (M^2 - 1))` of the
      two rows' ranks (ties are ranked in the order the sort returns: not tie-aware), ``None`` when
      not computed.

    For two softmax kinds (``None`` when a map is ``"focused"``: no such bound holds for it):

    * ``delta``: the spread of the bias between the two kinds' logits,
      :math:`\Delta_i = |c_a - c_b|\, q_{t,i} (\max_j \kappa_{t,j} - \min_j \kappa_{t,j}) / \tau`, with
      :math:`c` each kind's coefficient of the key-norm bias :math:`q_t \kappa_t` (spatial 1,
      distance 0, lorentz 0: identities 4 and 5);
    * ``tv_bound``: :math:`\tanh(\Delta / 4)` (sharp, :func:`tv_supremum`);
    * ``kl_bound``: the exact supremum :func:`kl_supremum` of :math:`\Delta`;
      ``kl_bound_hoeffding``: :math:`\Delta^2 / 8`;
    * ``allowance``: a rigorous floating-point allowance :math:`\alpha` on the logit gap (0 when
      ``a == b``);
    * ``bound_met``: whether :math:`\mathrm{TV} \le \tanh((\Delta + \alpha)/4)` and
      :math:`\mathrm{KL} \le \sup\mathrm{KL}(\Delta + \alpha)`, each up to a slack of
      :math:`8 \varepsilon \log_2(M + 1)` (relative and absolute, :math:`\varepsilon` the dtype's
      machine epsilon) for the rounding of the statistics themselves.

    The set-up: ``a``, ``b``, ``k``, ``temperature`` (:math:`\tau`), ``topk`` (capped at
    :math:`M`), ``device`` (where it ran), ``dtype``, ``batch_shape``, ``n_queries`` (rows computed),
    ``n_keys``, ``dim`` (:math:`d`), ``block_rows``, ``n_blocks``, ``power`` and ``norm_scale``
    (``None`` without a focused map), ``n_queries_total`` and ``row_index`` (the sampled rows, or
    ``None`` when every row was computed), ``elapsed_s``.  The bound being met is a fact about the
    theory; whether the maps agree is :attr:`verdict`.
    """

    a: str
    b: str
    k: float
    temperature: float
    topk: int
    device: str
    dtype: str
    batch_shape: tuple[int, ...]
    n_queries: int
    n_keys: int
    dim: int
    block_rows: int
    n_blocks: int
    kl: torch.Tensor
    tv: torch.Tensor
    tv_uniform_a: torch.Tensor
    tv_uniform_b: torch.Tensor
    logit_gap: torch.Tensor
    top1: torch.Tensor
    topk_overlap: torch.Tensor
    spearman: torch.Tensor | None = None
    delta: torch.Tensor | None = None
    tv_bound: torch.Tensor | None = None
    kl_bound: torch.Tensor | None = None
    kl_bound_hoeffding: torch.Tensor | None = None
    allowance: torch.Tensor | None = None
    bound_met: torch.Tensor | None = None
    power: float | None = None
    norm_scale: float | None = None
    n_queries_total: int | None = None
    row_index: torch.Tensor | None = None
    elapsed_s: float = 0.0

    # ---- summaries (Python floats) ----
    @property
    def bound_applies(self) -> bool:
        """Whether the softmax bound applies (both kinds are softmax kinds)."""
        return self.delta is not None

    @property
    def mean_tv(self) -> float:
        """Mean of ``tv`` over all rows (in float64)."""
        return float(self.tv.double().mean())

    @property
    def max_tv(self) -> float:
        """Largest ``tv`` of any row."""
        return float(self.tv.max())

    @property
    def mean_kl(self) -> float:
        """Mean of ``kl`` over all rows (in float64)."""
        return float(self.kl.double().mean())

    @property
    def max_kl(self) -> float:
        """Largest ``kl`` of any row."""
        return float(self.kl.max())

    @property
    def mean_tv_uniform_a(self) -> float:
        r"""Mean of ``tv_uniform_a`` (:math:`\mathrm{TV}(P_a, U)`, the baseline of map ``a``)."""
        return float(self.tv_uniform_a.double().mean())

    @property
    def mean_tv_uniform_b(self) -> float:
        r"""Mean of ``tv_uniform_b`` (:math:`\mathrm{TV}(P_b, U)`, the baseline of the reference)."""
        return float(self.tv_uniform_b.double().mean())

    @property
    def gap_ratio(self) -> float | None:
        r"""The gap next to the reference's baseline, :math:`\overline{\mathrm{TV}(P_a, P_b)} / \overline{\mathrm{TV}(P_b, U)}` (means over rows; ``None`` if the baseline is 0)."""
        base = self.mean_tv_uniform_b
        return None if base == 0.0 else self.mean_tv / base

    @property
    def verdict(self) -> str:
        """The :func:`verdict` of the row means of ``tv``, ``tv_uniform_a`` and ``tv_uniform_b`` (``"close"``, ``"different"`` or ``"uninformative"``)."""
        return verdict(self.mean_tv, self.mean_tv_uniform_a, self.mean_tv_uniform_b)

    @property
    def row_verdicts(self) -> dict[str, float]:
        """Fraction of the rows with each verdict, ``{"close": ..., "different": ..., "uninformative": ...}`` (:func:`verdict` row by row)."""
        codes = _row_verdicts(self.tv.double(), self.tv_uniform_a.double(), self.tv_uniform_b.double()).reshape(-1)
        return {name: float((codes == i).double().mean()) for i, name in enumerate(VERDICTS)}

    @property
    def max_delta(self) -> float | None:
        """Largest ``delta`` (``None`` when the bound does not apply)."""
        return None if self.delta is None else float(self.delta.max())

    @property
    def mean_delta(self) -> float | None:
        """Mean of ``delta`` (``None`` when the bound does not apply)."""
        return _mean(self.delta)

    @property
    def bound_met_fraction(self) -> float | None:
        """Fraction of rows that met the bound (``None`` when it does not apply)."""
        return _mean(self.bound_met)

    @property
    def all_bounds_met(self) -> bool | None:
        """Whether every row met the bound (``None`` when it does not apply)."""
        return None if self.bound_met is None else bool(self.bound_met.all())

    @property
    def top1_agreement(self) -> float:
        """Fraction of rows whose maps agree on their largest weight (tie-aware, ``top1``)."""
        return float(self.top1.double().mean())

    @property
    def topk_agreement(self) -> float:
        """Mean of ``topk_overlap`` over all rows."""
        return float(self.topk_overlap.double().mean())

    @property
    def rank_correlation(self) -> float | None:
        """Mean Spearman rank correlation of the rows (``None`` when not computed)."""
        return _mean(self.spearman)

    @property
    def n_rows(self) -> int:
        """Number of rows compared, over all leading axes."""
        return int(self.tv.numel())

    @property
    def sampled(self) -> bool:
        """Whether the statistics were computed on a uniform sample of the query rows (``rows=``)."""
        return self.row_index is not None

    def ci(self, field: str = "tv", level: float = 0.95) -> tuple[float, float, float]:
        r"""``(mean, low, high)``: the mean of a per-row field over all rows and its ``level`` confidence interval.

        For a sampled comparison (``rows=R`` of :math:`N` rows per head, the same rows for each of the
        :math:`H` heads, i.e. the flattened leading axes), the interval is ``mean`` :math:`\pm z\,\mathrm{se}`
        (:math:`z` the normal quantile of ``level``), the normal approximation for a sample
        stratified by head and drawn without replacement:

        .. math::

            \mathrm{se}^2 = \frac{1}{H^2} \sum_h \frac{s_h^2}{R}\,\frac{N - R}{N - 1},

        :math:`s_h^2` the sample variance of head :math:`h`.  When every row was computed the mean
        is exact and ``low = high = mean``.

        Raises
        ------
        ValueError
            When ``field`` is no per-row tensor here (``spearman`` when not computed, a scalar field);
            a name that is no field at all raises ``AttributeError``.
        """
        import statistics

        x = getattr(self, field)
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"ci: {field!r} is not a per-row statistic of this comparison")
        x = x.detach().double().reshape(-1, self.n_queries).cpu()
        mean = float(x.mean())
        if not self.sampled:
            return mean, mean, mean
        heads, r = x.shape
        total = int(self.n_queries_total)
        fpc = (total - r) / (total - 1)
        se = math.sqrt(float(x.var(dim=1, unbiased=True).sum()) / r * fpc) / heads
        z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
        return mean, mean - z * se, mean + z * se

    def to_dict(self) -> dict[str, Any]:
        """The set-up, the summaries of the row statistics and the verdict as plain Python values, JSON-ready (no tensors)."""
        return {
            "a": self.a,
            "b": self.b,
            "k": self.k,
            "temperature": self.temperature,
            "power": self.power,
            "norm_scale": self.norm_scale,
            "device": self.device,
            "dtype": self.dtype,
            "batch_shape": list(self.batch_shape),
            "n_queries": self.n_queries,
            "n_keys": self.n_keys,
            "dim": self.dim,
            "block_rows": self.block_rows,
            "n_blocks": self.n_blocks,
            "verdict": self.verdict,
            "row_verdicts": self.row_verdicts,
            "mean_tv": self.mean_tv,
            "max_tv": self.max_tv,
            "mean_tv_uniform_a": self.mean_tv_uniform_a,
            "mean_tv_uniform_b": self.mean_tv_uniform_b,
            "gap_ratio": self.gap_ratio,
            "mean_kl": self.mean_kl,
            "max_kl": self.max_kl,
            "top1_agreement": self.top1_agreement,
            "topk": self.topk,
            "topk_agreement": self.topk_agreement,
            "rank_correlation": self.rank_correlation,
            "bound_applies": self.bound_applies,
            "max_delta": self.max_delta,
            "bound_met_fraction": self.bound_met_fraction,
            "sampled_rows": self.n_queries if self.sampled else None,
            "n_queries_total": self.n_queries_total,
            "ci95": {
                name: list(self.ci(name)[1:])
                for name in ("tv", "kl", "tv_uniform_a", "tv_uniform_b", "top1", "topk_overlap")
            }
            if self.sampled
            else None,
            "elapsed_s": self.elapsed_s,
        }

    def summary(self, show_device: bool = True) -> str:
        """A readable summary, numbers rounded to 3 significant digits (no addresses, no timings).

        ``show_device=False`` leaves out where it ran, for text that must not depend on the machine.
        """
        lead = f"{self.batch_shape} x " if self.batch_shape else ""
        where = f" on {self.device}" if show_device else ""
        ratio = self.gap_ratio
        lines = [
            f"Comparison {self.a!r} (P_a) vs {self.b!r} (P_b): {lead}{self.n_queries} queries x {self.n_keys} keys, "
            f"d = {self.dim}, k = {_fmt(self.k)}, tau = {_fmt(self.temperature)}, {self.dtype}{where}",
            f"  verdict: {self.verdict}" + ("" if ratio is None else f"  (gap / baseline {_fmt(ratio)})"),
        ]
        if self.sampled:
            lo, hi = self.ci("tv")[1:]
            lines.append(
                f"  sampled {self.n_queries} of {self.n_queries_total} query rows per head (uniform): "
                f"mean TV 95% CI [{_fmt(lo)}, {_fmt(hi)}]"
            )
        lines += [
            f"  TV(P_a, P_b)   mean {_fmt(self.mean_tv)}  max {_fmt(self.max_tv)}",
            f"  baseline       TV(P_a, uniform) mean {_fmt(self.mean_tv_uniform_a)}  "
            f"TV(P_b, uniform) mean {_fmt(self.mean_tv_uniform_b)}",
            f"  KL(P_b || P_a) mean {_fmt(self.mean_kl)}  max {_fmt(self.max_kl)}",
            f"  top-1 agreement {_fmt(self.top1_agreement)}   top-{self.topk} overlap {_fmt(self.topk_agreement)}"
            + ("" if self.spearman is None else f"   Spearman {_fmt(self.rank_correlation)}"),
        ]
        if self.bound_met is None:
            lines.append(f"  softmax bound: not applicable ({'focused' if 'focused' in (self.a, self.b) else ''} map is no softmax)")
        else:
            met = int(self.bound_met.sum())
            lines.append(
                f"  theory check: TV <= tanh(Delta/4), KL <= sup_KL(Delta) on {met} of {self.n_rows} rows "
                f"(Delta max {_fmt(self.max_delta)})"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython
        p.text(self.summary())


def _direct_stats(la: torch.Tensor, lb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(P_b || P_a) and TV from log-softmax (used for rows with a very wide logit gap)."""
    lpa, lpb = torch.log_softmax(la, dim=-1), torch.log_softmax(lb, dim=-1)
    pb = lpb.exp()
    kl = (pb * (lpb - lpa)).sum(dim=-1).clamp_min_(0.0)
    tv = 0.5 * (pb - lpa.exp()).abs().sum(dim=-1)
    return kl, tv


def _block_rows_for(m: int, itemsize: int, budget: int) -> int:
    # three (rows x M) buffers live across the block (two logit rows and one scratch)
    return max(1, budget // (3 * m * itemsize))


class _Kind:
    """One map of a comparison: operands ``A``, ``B`` with ``log-weights = A @ B^T`` (then clamp or log)."""

    def __init__(self, kind: str, q: torch.Tensor, kk: torch.Tensor, kf: float, tau: float, power: float, norm_scale: float):
        self.kind = kind
        if kind == "focused":
            # norm_scale cancels from the normalised map: the features are taken without it
            self.A, self.B = _feature_map(q[..., 1:], power), _feature_map(kk[..., 1:], power)
            # all terms positive: each product has relative error <= gamma_c, so its log is off by <= gamma_c
            gamma = (self.A.shape[-1] + 3) * torch.finfo(q.dtype).eps
            self.err = torch.full(self.A.shape[:-1], gamma, dtype=q.dtype)
        else:
            self.A, self.B = _operands(q, kk, kind, kf, 1.0 / tau, softmax=True)
            self.err = _logit_error(self.A, self.B)

    def logits(self, a_rows: torch.Tensor, b_t: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.mm(a_rows, b_t, out=out)
        if self.kind == "focused":
            return out.clamp_min_(torch.finfo(out.dtype).tiny).log_()
        return _finish_(out, self.kind)


def _largest_logit(*kinds: _Kind) -> float:
    """A bound on ``|log-weight|`` over all rows: ``sum_c |A_ic| max_j |B_jc|`` (the logit error bound over gamma).

    Reads the key operands without copying them (column maxima of ``B`` and ``-B``).
    """
    out = 0.0
    for kd in kinds:
        col = torch.maximum(kd.B.amax(dim=-2), -kd.B.amin(dim=-2)).double().unsqueeze(-2)  # (..., 1, c)
        out = max(out, float((kd.A.abs().double() * col).sum(dim=-1).max()))
    return out


def _check_logit_range(
    built: tuple[_Kind, ...], q: torch.Tensor, kk: torch.Tensor, kf: float, tau: float
) -> None:
    """Refuse a temperature whose logits overflow the points' dtype (the softmax would be NaN), naming the smallest usable one."""
    soft = [kd for kd in built if kd.kind != "focused"]
    if not soft:
        return
    limit = torch.finfo(q.dtype).max / 16
    big = _largest_logit(*soft)  # at this temperature, from the operands already built
    if big < limit:
        return
    big1 = _largest_logit(*(_Kind(kd.kind, q.double(), kk.double(), kf, 1.0, 2.0, 1.0) for kd in soft))  # tau = 1
    name = str(q.dtype).replace("torch.", "")
    raise ValueError(
        f"temperature {tau:g} makes the logits overflow {name} (largest |s / tau| about {big1 / tau:.3g}, "
        f"{name} holds {torch.finfo(q.dtype).max:.3g}); the smallest usable is about {16 * big1 / torch.finfo(q.dtype).max:.3g}"
    )


def _topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(x, k, dim=-1)`` of a contiguous ``(rows, M)`` block, in one cheap pass for large ``M``.

    The row is cut into chunks; the ``k`` largest entries lie in the ``k`` chunks with the largest
    maxima (each chunk holding one of them has a maximum at least the ``k``-th largest value), so
    only those chunks (and a short tail) are searched.  The values are exactly torch's; among tied
    keys the index chosen may differ, which the tie-aware statistics do not see.
    """
    r, m = x.shape
    chunk = max(64, int(math.sqrt(m)))
    n_chunks = m // chunk
    if n_chunks < 4 * k or not x.is_contiguous():
        return torch.topk(x, k, dim=-1)
    main = n_chunks * chunk
    _, best = torch.topk(x[:, :main].view(r, n_chunks, chunk).amax(dim=-1), k, dim=-1)  # (rows, k)
    idx = (best.unsqueeze(-1) * chunk + torch.arange(chunk, device=x.device)).reshape(r, k * chunk)
    if main < m:
        idx = torch.cat([idx, torch.arange(main, m, device=x.device).expand(r, m - main)], dim=-1)
    v, j = torch.topk(torch.gather(x, -1, idx), k, dim=-1)
    return v, torch.gather(idx, -1, j)


def _weighted_sum(p: torch.Tensor, x: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """``sum_j p_ij x_ij`` per row through a scratch buffer (faster on the CPU than ``vecdot``)."""
    return torch.mul(p, x, out=tmp).sum(dim=-1)


def _tv_uniform_p(p: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """``TV(P, U) = 1/2 sum_j |p_j - mean p| / sum_j p_j`` per row from computed softmax weights.

    Normalising by the computed sum cancels the rounding of the softmax's own normaliser (a factor
    common to the row); what is left is each weight's own rounding, at most ``~2 eps`` on ``TV``
    (:func:`_baseline` takes the rows where that is more than the logits' own rounding).
    """
    total = p.sum(dim=-1)
    mean = (total / p.shape[-1]).unsqueeze(-1)
    return 0.5 * torch.sub(p, mean, out=tmp).abs_().sum(dim=-1) / total


class _SharedLogits:
    """Two softmax kinds from ONE product: ``spatial = S``, ``distance = lorentz = S - c w^T`` (row constants dropped).

    ``S = q_s kappa_s^T / tau``; with ``u_kappa = kappa_t - sqrt(k) = |kappa_s|^2 / (kappa_t + sqrt(k))``,
    ``-1/2 |q - kappa|^2_L / tau = S - (q_t / tau) u_kappa - (a row constant)`` (identities 1 and 4),
    so the second map is a rank-one update of the first, exact in every digit that matters to a
    softmax.  ``err`` bounds each row's rounding of either kind's logits (any summation order).
    """

    def __init__(self, q: torch.Tensor, kk: torch.Tensor, kf: float, tau: float):
        self.A = q[..., 1:] * (1.0 / tau)  # (H, N, d)
        self.B = kk[..., 1:]  # (H, M, d), a view
        self.c = q[..., 0] * (1.0 / tau)  # (H, N)
        ks = kk[..., 1:]
        self.w = ks.square().sum(dim=-1) / (kk[..., 0] + math.sqrt(kf))  # (H, M), no cancellation
        eps = torch.finfo(q.dtype).eps
        err_s = _logit_error(self.A, self.B)  # gamma * sum |A| max|B|
        size = err_s / ((self.A.shape[-1] + 3) * eps)  # sum_c |A_ic| max_j |B_jc| >= |S_ij|
        self.largest = size + self.c.abs() * self.w.amax(dim=-1, keepdim=True)  # >= |logit| of either kind
        self.err_spatial = err_s
        self.err_distance = err_s + 3.0 * eps * self.largest

    def rows(self, h: int, idx: torch.Tensor, biased: bool, dev: torch.device) -> torch.Tensor:
        """Logit rows ``idx`` of head ``h`` (recomputed, for the few rows that need the direct formulas)."""
        s = self.A[h, idx].to(dev) @ self.B[h].to(dev).transpose(0, 1)
        if biased:
            s.addr_(self.c[h, idx].to(dev), self.w[h].to(dev), alpha=-1.0)
        return s


def _shared_blocks(
    sh: _SharedLogits,
    a_biased: bool,
    n: int,
    rows: int,
    t_k: int,
    rank: bool,
    tol: tuple[torch.Tensor, torch.Tensor],
    out: dict[str, torch.Tensor],
    top1: torch.Tensor,
    bufs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    dev: torch.device,
    bar: Any,
) -> None:
    """Every statistic of a spatial-vs-distance (or -lorentz) comparison, one product per row block.

    Per block: ``S`` by one matrix product, the biased map by a rank-one update, top-k of both, both
    maps by in-place softmaxes and their uniform baselines from the weights (rows near uniform
    recomputed without cancellation), then the tilted KL and TV from ``x = log P_a - log P_b`` (up to
    a constant) ``= +-c (w - E_{P_b} w)``, another rank-one form.  Three ``rows x M`` buffers;
    nothing of size ``N x M``.
    """
    buf_s, buf_d, tmp = bufs
    sign = 1.0 if not a_biased else -1.0  # x = log P_a - log P_b + const = sign * c * w
    heads = sh.A.shape[0]
    for h in range(heads):
        b_t = sh.B[h].to(dev).transpose(0, 1)
        w = sh.w[h].to(dev)
        w_span = w.amax() - w.amin()
        for i in range(0, n, rows):
            j = min(i + rows, n)
            r = j - i
            sl = (h, slice(i, j))
            c = sh.c[h, i:j].to(dev)
            s = torch.mm(sh.A[h, i:j].to(dev), b_t, out=buf_s[:r])
            dl = torch.addr(s, c, w, alpha=-1.0, out=buf_d[:r])
            la, lb = (dl, s) if a_biased else (s, dl)
            ta, tb = tol[0][sl], tol[1][sl]
            _rank_stats(la, lb, ta, tb, t_k, out, top1, sl, rank)
            out["gap"][sl] = c * w_span  # spread of log P_a - log P_b: exact from the rank-one form
            # the baselines (the other map's logits are consumed here), then P_b in place
            ua, _ = _baseline(la, ta, tmp[:r])
            ub, done = _baseline(lb, tb, tmp[:r])
            pb = lb if done else _softmax_rows_(lb)
            out["ua"][sl], out["ub"][sl] = ua, ub
            wb = pb @ w  # E_{P_b}[w]
            x = torch.addr((-sign * c * wb).unsqueeze(-1), c, w, alpha=sign, out=tmp[:r])  # centred under P_b
            scratch = la  # consumed above
            s1 = _weighted_sum(pb, x, scratch)  # E_{P_b}[x] (zero up to rounding; cancels it below)
            wide = out["gap"][sl] > _TILT_MAX_GAP
            any_wide = bool(wide.any())
            if any_wide:
                x.masked_fill_(wide.unsqueeze(-1), 0.0)
            e = x.expm1_()  # e^x - 1
            m1 = _weighted_sum(pb, e, scratch)  # E_{P_b}[e^x] - 1
            out["kl"][sl] = (torch.log1p(m1) - s1).clamp_min_(0.0)
            e.sub_(m1.unsqueeze(-1)).abs_()
            out["tv"][sl] = 0.5 * _weighted_sum(pb, e, scratch) / (1.0 + m1)
            if any_wide:
                idx = wide.nonzero().squeeze(-1)
                kl_w, tv_w = _direct_stats(sh.rows(h, i + idx, a_biased, dev), sh.rows(h, i + idx, not a_biased, dev))
                out["kl"][h, i + idx] = kl_w
                out["tv"][h, i + idx] = tv_w
            if bar is not None:
                bar.update(1)


def _baseline(l: torch.Tensor, tol: torch.Tensor, tmp: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``TV(softmax(l), U)`` per row, and whether ``l`` now holds the softmax (computed in place).

    From the weights (:func:`_tv_uniform_p`), whose rounding moves ``TV`` by up to ``~2 eps``, on
    the rows where the logits' own rounding (``tol / 2`` per row, about as much on ``TV``) is larger;
    the other rows (logits near 0: maps near uniform) from the logits by centred ``expm1``
    (:func:`_tv_uniform`, no cancellation).
    """
    small = (tol < _P_ROUTE_EPS * torch.finfo(l.dtype).eps).nonzero().squeeze(-1)
    if len(small) == l.shape[0]:
        return _tv_uniform(l, tmp), False
    exact = _tv_uniform(l.index_select(0, small), tmp[: len(small)]) if len(small) else None
    tv = _tv_uniform_p(_softmax_rows_(l), tmp)
    if exact is not None:
        tv[small] = exact
    return tv, True


def _check_shared_range(sh: _SharedLogits, q: torch.Tensor, kk: torch.Tensor, kf: float, tau: float) -> None:
    """Refuse a temperature whose logits overflow the points' dtype, naming the smallest usable one."""
    limit = torch.finfo(q.dtype).max / 16
    big = float(sh.largest.max()) if sh.largest.numel() else 0.0
    if big < limit:
        return
    s1 = _SharedLogits(q.double(), kk.double(), kf, 1.0)  # tau = 1, in float64
    big1 = float(s1.largest.max())
    name = str(q.dtype).replace("torch.", "")
    raise ValueError(
        f"temperature {tau:g} makes the logits overflow {name} (largest |s / tau| about {big1 / tau:.3g}, "
        f"{name} holds {torch.finfo(q.dtype).max:.3g}); the smallest usable is about {16 * big1 / torch.finfo(q.dtype).max:.3g}"
    )


def compare(
    queries: ArrayLike,
    keys: ArrayLike,
    a: str = "spatial",
    b: str = "distance",
    *,
    k: float = 1.0,
    temperature: float | None = None,
    power: float = 2.0,
    norm_scale: float = 1.0,
    device: str | torch.device = "auto",
    block_rows: int | None = None,
    topk: int = 5,
    spearman: bool | None = None,
    heads_axis: int | None = None,
    rows: int | None = None,
    seed: int = 0,
    memory_budget: int | None = None,
    progress: bool | None = None,
) -> Comparison:
    r"""Compare the attention maps of two kinds row by row, streaming over blocks of query rows.

    :math:`P_a` and :math:`P_b` are the maps of :func:`attention_map` (softmax kinds at temperature
    :math:`\tau`; ``"focused"`` with ``power`` and ``norm_scale``); ``b`` is the reference.  Each
    query row gets :math:`\mathrm{KL}(P_b \| P_a)`, the total variation, each map's TV from the
    uniform row :math:`U` (the baseline every gap must be read against), tie-aware top-1 and top-k
    agreement, a Spearman rank correlation and, for two softmax kinds, the bound's :math:`\Delta_i`
    and whether the row met it (see :class:`Comparison`); :attr:`Comparison.verdict` reads the
    result as ``"close"``, ``"different"`` or ``"uninformative"`` (:func:`verdict`).  For two
    softmax kinds whose logits carry the key-norm bias :math:`q_t \kappa_t / \tau` with coefficients
    :math:`c_a, c_b` (spatial 1, distance and lorentz 0),

    .. math::

        \Delta_i = |c_a - c_b|\, \frac{q_{t,i} (\max_j \kappa_{t,j} - \min_j \kappa_{t,j})}{\tau}, \qquad
        \mathrm{TV}_i \le \tanh\frac{\Delta_i}{4}, \qquad
        \mathrm{KL}_i(P_b \| P_a) \le \log\frac{e^{\Delta_i} - 1}{\Delta_i} - 1 + \frac{\Delta_i}{e^{\Delta_i} - 1}
        \le \frac{\Delta_i^2}{8} .

    Parameters
    ----------
    queries, keys : array or tensor, shapes (..., N, d + 1) and (..., M, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked); leading axes broadcast.
        Tensors that require grad are detached: the statistics are not differentiable.
    a, b : str
        Kinds of :data:`KINDS`; ``b`` is the reference.
    k : float
        Curvature parameter.
    temperature : float, optional
        :math:`\tau`, default :math:`\sqrt{d}`.  Hypformer's full attention is ``"distance"`` at
        :math:`\tau = k \cdot \mathrm{scale} / 2` (its learned ``scale``, initialised to
        :math:`\sqrt{d}`; ``scale / 2`` in its simplified code).
    power, norm_scale : float
        The focused map's ``power_k`` and ``norm_scale`` (checked and used only with ``"focused"``).
    device : str or torch.device
        ``"auto"`` (CUDA when available, else the CPU), ``"cpu"`` or ``"cuda[:i]"``.  The blocks are
        computed there; the per-row results come back on the inputs' device; ``result.device`` says
        where it ran.
    block_rows : int, optional
        Query rows per block (capped at :math:`N`); by default from ``memory_budget``, so that the
        working memory is :math:`O(\mathrm{block\_rows} \times M)` whatever :math:`N`.
    topk : int
        The :math:`k` of the top-k agreement (capped at :math:`M`).
    spearman : bool, optional
        Compute the per-row Spearman correlation (sorts every row, :math:`O(N M \log M)`); by
        default when :math:`M \le 4096`.
    heads_axis : int, optional
        The heads axis of a layout such as ``(N, H, d + 1)`` (Hypformer's), moved to the front.
    rows : int, optional
        Compute the statistics on ``rows`` query rows only (an integer :math:`\ge 2`), drawn
        uniformly without replacement (the same rows for every head), against all :math:`M` keys:
        for very large :math:`N`.  Every mean then comes with a confidence interval,
        :meth:`Comparison.ci`.  ``rows >= N`` computes every row.
    seed : int
        Seed of ``torch.randperm`` drawing the ``rows``.
    memory_budget : int, optional
        Bytes for the three ``block_rows x M`` buffers.  Default: on the CPU 256 MiB, with at most
        about 16 MiB per buffer unless that is under 32 rows (cache-friendlier); on CUDA a quarter
        of the free device memory, at least 256 MiB and at most 8 GiB.
    progress : bool, optional
        Show a tqdm bar on stderr; by default only for long runs (at least 64 blocks and
        :math:`2^{28}` logits) on a terminal.

    Returns
    -------
    Comparison
        Per-row tensors of shape ``(..., n)`` (``n`` the query rows computed) on the inputs'
        device, the set-up and the summaries.

    Raises
    ------
    ValueError
        For an unknown kind, points or shapes :func:`scores` refuses, a non-positive
        ``temperature`` or ``power``, a non-finite ``norm_scale``, a bad ``topk``, ``block_rows``,
        ``memory_budget``, ``spearman``, ``rows``, ``seed``, ``heads_axis`` or ``device``; a
        temperature so small that the logits overflow the dtype (the message names the smallest
        usable one); statistics that come out non-finite.  ``TypeError`` when the dtypes differ.

    Notes
    -----
    *One product or two.*  When one kind is ``"spatial"`` and the other ``"distance"`` or
    ``"lorentz"`` (either way round), both maps come from one matrix product per row block.  With
    :math:`S_{ij} = q_{s,i} \cdot \kappa_{s,j} / \tau`, :math:`c_i = q_{t,i} / \tau` and
    :math:`w_j = \kappa_{t,j} - \sqrt{k} = \|\kappa_{s,j}\|^2 / (\kappa_{t,j} + \sqrt{k})`
    (no cancellation), identities 1 and 4 give

    .. math::

        -\frac{\|q_i - \kappa_j\|_L^2}{2\tau} = S_{ij} - c_i w_j + \Bigl(\frac{k}{\tau} - c_i \sqrt{k}\Bigr),

    and the row constant in brackets does not change a softmax: the distance (and lorentz) map is
    the softmax of the rank-one update :math:`S - c\, w^\top` of the spatial logits.  So
    :math:`\log P_a - \log P_b = \pm c_i w_j` up to a row constant, and the logit gap is
    :math:`c_i (\max_j w_j - \min_j w_j)`, which is :math:`\Delta_i` in exact arithmetic.  Every other
    pair (distance against lorentz, a kind against itself, anything against ``"focused"``) computes
    each map's own logits, one product per map and block: the distance and lorentz kinds by the
    operands of :func:`hypviz.lorentz.distance_operands`, the focused map as the logarithm of its
    feature products.

    *The statistics.*  With :math:`x_j = \log P_{a,j} - \log P_{b,j}` centred under :math:`P_b`,

    .. math::

        \mathrm{KL}(P_b \| P_a) = \log \mathbb{E}_{P_b}[e^{x}] - \mathbb{E}_{P_b}[x], \qquad
        \mathrm{TV}(P_a, P_b) = \frac{\mathbb{E}_{P_b}\bigl|e^{x} - \mathbb{E}_{P_b}[e^{x}]\bigr|}{2\,\mathbb{E}_{P_b}[e^{x}]},

    evaluated with ``expm1`` and ``log1p``: accurate to the rounding of the logits, not of the
    log-probabilities (of size :math:`\log M`).  Rows whose logit gap exceeds 30 use the direct
    log-softmax formulas instead.  The baselines, with :math:`u = l - \operatorname{mean}_j l_j`
    centred logits,

    .. math::

        \mathrm{TV}(P, U) = \frac{\operatorname{mean}_j \bigl|e^{u_j} - \operatorname{mean}_l e^{u_l}\bigr|}{2 \operatorname{mean}_l e^{u_l}},

    likewise by ``expm1`` (by the softmax directly for rows whose logits span more than 30).  In
    the one-product path this holds for rows whose logits' rounding bound is under
    :math:`4\varepsilon`, the maps near uniform; the other rows' baselines come from the computed
    softmax weights normalised by their sum, whose rounding (about :math:`2\varepsilon` on TV) is then
    below the logits' own.

    *Ties and bounds.*  The top-1 and top-k agreements count a key as shared when its logit in the
    other map is within that map's rounding bound of the cut, so keys tied in exact arithmetic
    (symmetric embeddings) are never told apart by rounding noise.  :math:`\Delta_i` is computed in
    float64 from the spatial parts,
    :math:`\max_j \kappa_{t,j} - \min_j \kappa_{t,j} = (n_{\max} - n_{\min}) / (\sqrt{n_{\max} + k} + \sqrt{n_{\min} + k})`
    with :math:`n = \|\kappa_s\|^2`, without the cancellation of two rounded time coordinates.  The
    working memory is three ``block_rows x M`` buffers (plus temporaries of that size for the
    Spearman ranks); nothing of size ``N x M`` is allocated.
    """
    start = time.perf_counter()
    _check_kind(a, "a")
    _check_kind(b, "b")
    q, kk, _, kf, batch = _validate(queries, keys, k, heads_axis=heads_axis, detach=True)
    d = q.shape[-1] - 1
    tau = _temperature(temperature, d)
    focused = "focused" in (a, b)
    p_f, s_f = (_check_power(power), _check_norm_scale(norm_scale)) if focused else (None, None)
    topk = validate.integer(topk, "topk", 1)
    block_rows = validate.integer(block_rows, "block_rows", 1, " (None: automatic)", allow_none=True)
    memory_budget = validate.integer(memory_budget, "memory_budget", 1, " (bytes; None: automatic)", allow_none=True)
    if spearman is not None and not isinstance(spearman, bool):
        raise ValueError(f"spearman must be True, False or None (automatic), got {spearman!r}")
    dev = resolve_device(device)

    n_total, row_index = q.shape[-2], None
    if rows is not None:
        rows = validate.integer(rows, "rows", 2, " (query rows to sample; None: all)", allow_none=True)
        seed = validate.integer(seed, "seed")
        if rows < n_total:
            gen = torch.Generator().manual_seed(int(seed))
            row_index = torch.randperm(n_total, generator=gen)[: int(rows)].sort().values
            q = q.index_select(-2, row_index.to(q.device))
    n, m = q.shape[-2], kk.shape[-2]
    dtype, itemsize = q.dtype, q.element_size()
    t_k = min(topk, m)
    rank = m <= _SPEARMAN_MAX_KEYS if spearman is None else spearman
    if block_rows is None:
        budget = memory_budget
        if budget is None:
            budget = _DEFAULT_BUDGET
            if dev.type == "cuda":
                budget = max(budget, min(8 * 2**30, torch.cuda.mem_get_info(dev)[0] // 4))
            else:
                # cache-sized blocks, but never fewer than 32 rows while the budget allows: for very many
                # keys a block of a few rows would re-read the key operands once per handful of queries
                rows_cap = max(_rows_for(_COMPARE_BLOCK_BYTES, m, itemsize), _MIN_BLOCK_ROWS)
                budget = min(budget, 3 * m * itemsize * rows_cap)
        block_rows = _block_rows_for(m, itemsize, budget)
    rows = min(block_rows, n)

    qf, kfl = _flatten_batch(q, batch), _flatten_batch(kk, batch)
    heads = qf.shape[0]
    # a softmax kind against one that differs from it by the key-norm bias: one product per block
    shared = a in SOFTMAX_KINDS and b in SOFTMAX_KINDS and (a == "spatial") != (b == "spatial")
    if shared:
        sh = _SharedLogits(qf, kfl, kf, tau)
        _check_shared_range(sh, qf, kfl, kf, tau)
        err_a, err_b = (sh.err_distance, sh.err_spatial) if b == "spatial" else (sh.err_spatial, sh.err_distance)

        def largest() -> float:
            return float(sh.largest.max())
    else:
        ka = _Kind(a, qf, kfl, kf, tau, p_f or 2.0, s_f or 1.0)
        kb = _Kind(b, qf, kfl, kf, tau, p_f or 2.0, s_f or 1.0)
        _check_logit_range((ka, kb), qf, kfl, kf, tau)
        err_a, err_b = ka.err, kb.err

        def largest() -> float:
            return _largest_logit(ka, kb)

    names = ("kl", "tv", "gap", "overlap", "ua", "ub") + (("rho",) if rank else ())
    out = {name: torch.empty(heads, n, dtype=dtype, device=dev) for name in names}
    top1 = torch.empty(heads, n, dtype=torch.bool, device=dev)
    buf_a = torch.empty(rows, m, dtype=dtype, device=dev)
    buf_b = torch.empty(rows, m, dtype=dtype, device=dev)
    buf_c = torch.empty(rows, m, dtype=dtype, device=dev)
    tol_a, tol_b = (2.0 * err_a).to(dev), (2.0 * err_b).to(dev)

    n_blocks = heads * math.ceil(n / rows)
    show = progress
    if show is None:
        show = n_blocks >= 64 and n * m * heads >= 2**28 and sys.stderr.isatty()
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=n_blocks, desc=f"compare {a} vs {b}", unit="block", leave=False, file=sys.stderr)
    try:
        if shared:
            _shared_blocks(sh, b == "spatial", n, rows, t_k, rank, (tol_a, tol_b), out, top1, (buf_a, buf_b, buf_c), dev, bar)
        else:
            for h in range(heads):
                ba_t = ka.B[h].to(dev).transpose(0, 1)
                bb_t = kb.B[h].to(dev).transpose(0, 1)
                for i in range(0, n, rows):
                    j = min(i + rows, n)
                    qa, qb = ka.A[h, i:j].to(dev), kb.A[h, i:j].to(dev)
                    la = ka.logits(qa, ba_t, buf_a[: j - i])
                    lb = kb.logits(qb, bb_t, buf_b[: j - i])
                    sl = (h, slice(i, j))
                    _rank_stats(la, lb, tol_a[sl], tol_b[sl], t_k, out, top1, sl, rank)
                    out["ua"][sl] = _tv_uniform(la, buf_c[: j - i])
                    out["ub"][sl] = _tv_uniform(lb, buf_c[: j - i])
                    _block_stats(la, lb, out, sl, (ka, qa, ba_t), (kb, qb, bb_t), buf_c[: j - i])
                    if bar is not None:
                        bar.update(1)
    finally:
        if bar is not None:
            bar.close()

    bad = [name for name, t in (("TV", out["tv"]), ("KL", out["kl"]), ("uniform baselines", out["ua"])) if not bool(torch.isfinite(t).all())]
    if bad or not bool(torch.isfinite(out["ub"]).all()):
        raise ValueError(
            f"compare {a} vs {b}: the {', '.join(bad) or 'uniform baselines'} came out non-finite in {dtype}: the logits "
            f"(largest |s / tau| about {largest():.3g}) are beyond what {dtype} resolves at k = {kf:g}, "
            f"tau = {tau:g}; use float64, a larger temperature or a smaller k"
        )
    home = q.device
    shape = (*batch, n)

    def back(t: torch.Tensor) -> torch.Tensor:
        return t.to(home).reshape(shape)

    bounds: dict[str, torch.Tensor | None] = {}
    if not focused:
        # the bound, per row, and the floating-point allowance on the logit gap
        # in float64 from the spatial parts: kappa_t,max - kappa_t,min = (n_max - n_min) / (t_max + t_min),
        # n = |kappa_s|^2, without the cancellation of two rounded time coordinates (large k, float32)
        nk = kfl[..., 1:].double().square().sum(dim=-1)
        n_max, n_min = nk.amax(dim=-1), nk.amin(dim=-1)
        spread = ((n_max - n_min) / ((n_max + kf).sqrt() + (n_min + kf).sqrt())).unsqueeze(-1)
        q_t = (qf[..., 1:].double().square().sum(dim=-1) + kf).sqrt()
        delta = (abs(_BIAS[a] - _BIAS[b]) * q_t * spread / tau).to(dtype)
        eps = torch.finfo(dtype).eps
        allowance = torch.zeros_like(delta) if a == b else 2.0 * (err_a + err_b) + 4.0 * eps * delta
        d_eff = (delta + allowance).to(home).reshape(shape)
        ulps = 8.0 * eps * math.log2(m + 1)
        kl, tv = back(out["kl"]), back(out["tv"])
        met = (tv <= torch.tanh(d_eff / 4) * (1 + ulps) + ulps) & (
            kl <= kl_supremum(d_eff) * (1 + ulps) + ulps * (d_eff + eps)
        )
        dl = delta.to(dtype).to(home).reshape(shape)
        bounds = dict(
            delta=dl,
            tv_bound=tv_supremum(dl),
            kl_bound=kl_supremum(dl),
            kl_bound_hoeffding=dl.square() / 8,
            allowance=allowance.to(dtype).to(home).reshape(shape),
            bound_met=met,
        )
    return Comparison(
        a=a,
        b=b,
        k=kf,
        temperature=tau,
        topk=t_k,
        device=str(dev),
        dtype=str(dtype).replace("torch.", ""),
        batch_shape=tuple(batch),
        n_queries=n,
        n_keys=m,
        dim=d,
        block_rows=rows,
        n_blocks=n_blocks,
        kl=back(out["kl"]),
        tv=back(out["tv"]),
        tv_uniform_a=back(out["ua"]),
        tv_uniform_b=back(out["ub"]),
        logit_gap=back(out["gap"]),
        top1=back(top1),
        topk_overlap=back(out["overlap"]),
        spearman=back(out["rho"]) if rank else None,
        power=p_f,
        norm_scale=s_f,
        n_queries_total=n_total,
        row_index=row_index,
        elapsed_s=time.perf_counter() - start,
        **bounds,
    )


def _rank_stats(
    la: torch.Tensor,
    lb: torch.Tensor,
    tol_a: torch.Tensor,
    tol_b: torch.Tensor,
    t_k: int,
    out: dict[str, torch.Tensor],
    top1: torch.Tensor,
    sl: tuple,
    rank: bool,
) -> None:
    """Tie-aware top-1 / top-k agreement (and Spearman) of one row block; reads ``la``, ``lb`` only.

    A key of one map's top-k counts as shared when its log-weight in the other map is at least that
    map's k-th largest minus ``tol`` (the rounding bound of the difference of two computed logits);
    the overlap is the larger of the two directions' counts over ``k``.  Keys tied in exact arithmetic
    (symmetric embeddings) are therefore never told apart by rounding noise, and the work is
    ``O(rows x k)`` beyond the two ``topk`` calls.
    """
    va, ia = _topk_rows(la, t_k)
    vb, ib = _topk_rows(lb, t_k)
    ta, tb = tol_a.unsqueeze(-1), tol_b.unsqueeze(-1)
    b_in_a = torch.gather(la, -1, ib) >= va[:, -1:] - ta  # (rows, k)
    a_in_b = torch.gather(lb, -1, ia) >= vb[:, -1:] - tb
    both = torch.maximum(b_in_a.sum(dim=-1), a_in_b.sum(dim=-1))
    out["overlap"][sl] = both.to(la.dtype) / t_k
    top1[sl] = (torch.gather(la, -1, ib[:, :1]) >= va[:, :1] - ta).squeeze(-1) | (
        torch.gather(lb, -1, ia[:, :1]) >= vb[:, :1] - tb
    ).squeeze(-1)
    if rank:
        m = la.shape[-1]
        ra = la.argsort(dim=-1).argsort(dim=-1).to(la.dtype)
        rb = lb.argsort(dim=-1).argsort(dim=-1).to(la.dtype)
        ssd = ra.sub_(rb).square_().sum(dim=-1)
        out["rho"][sl] = 1.0 - 6.0 * ssd / (m * (m * m - 1.0)) if m > 1 else torch.ones_like(ssd)


def _tv_uniform(l: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """``TV(softmax(l), U)`` per row without cancellation: ``1/2 mean_j |e^{u_j} - mean e^u| / mean e^u``, ``u = l - mean l``."""
    u = torch.sub(l, l.mean(dim=-1, keepdim=True), out=tmp)
    wide = (u.amax(dim=-1) - u.amin(dim=-1)) > _TILT_MAX_GAP
    any_wide = bool(wide.any())
    if any_wide:
        u.masked_fill_(wide.unsqueeze(-1), 0.0)
    e = u.expm1_()
    mean = e.mean(dim=-1)
    tv = 0.5 * e.sub_(mean.unsqueeze(-1)).abs_().mean(dim=-1) / (1.0 + mean)
    if any_wide:
        idx = wide.nonzero().squeeze(-1)
        p = torch.softmax(l[idx], dim=-1)
        tv[idx] = 0.5 * (p - 1.0 / l.shape[-1]).abs().sum(dim=-1)
    return tv


def _block_stats(
    la: torch.Tensor,
    lb: torch.Tensor,
    out: dict[str, torch.Tensor],
    sl: tuple,
    op_a: tuple[_Kind, torch.Tensor, torch.Tensor],
    op_b: tuple[_Kind, torch.Tensor, torch.Tensor],
    tmp: torch.Tensor,
) -> None:
    """KL, TV and logit gap of one row block; overwrites the logit buffers ``la``, ``lb`` and ``tmp``."""
    g = torch.sub(la, lb, out=la)  # g' = (s_a - s_b) / tau = -g
    gap = g.amax(dim=-1) - g.amin(dim=-1)
    out["gap"][sl] = gap
    pb = _softmax_rows_(lb)
    g.sub_(_weighted_sum(pb, g, tmp).unsqueeze(-1))  # -h, centred under P_b
    s = _weighted_sum(pb, g, tmp)  # E_Pb[-h] (zero up to rounding)
    wide = gap > _TILT_MAX_GAP
    any_wide = bool(wide.any())
    if any_wide:
        g.masked_fill_(wide.unsqueeze(-1), 0.0)
    e = g.expm1_()  # e^{-h} - 1
    m1 = _weighted_sum(pb, e, tmp)  # E_Pb[e^{-h}] - 1
    out["kl"][sl] = (torch.log1p(m1) - s).clamp_min_(0.0)
    e.sub_(m1.unsqueeze(-1)).abs_()
    out["tv"][sl] = 0.5 * _weighted_sum(pb, e, tmp) / (1.0 + m1)
    if any_wide:  # recompute those rows' logits and use log-softmax directly
        idx = wide.nonzero().squeeze(-1)
        (ka, qa, ba_t), (kb, qb, bb_t) = op_a, op_b
        la_w = ka.logits(qa[idx], ba_t, torch.empty(len(idx), ba_t.shape[1], dtype=la.dtype, device=la.device))
        lb_w = kb.logits(qb[idx], bb_t, torch.empty(len(idx), bb_t.shape[1], dtype=la.dtype, device=la.device))
        kl_w, tv_w = _direct_stats(la_w, lb_w)
        h, rows = sl
        out["kl"][h, rows.start + idx] = kl_w
        out["tv"][h, rows.start + idx] = tv_w


# --------------------------------------------------------------------------- #
# measuring memory honestly: bytes of the tensors an operation allocates
# --------------------------------------------------------------------------- #
def peak_tensor_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Run ``fn(*args, **kwargs)`` and return ``(result, peak)``: the peak tensor memory it allocated, in bytes.

    Every aten operation run by ``fn`` is observed (a ``TorchDispatchMode``); an output whose storage
    aliases none of the operation's inputs is a new allocation, counted with its ``nbytes`` until
    its storage is freed.  ``peak`` is the largest total of such storages alive at once.  The inputs,
    allocated before, do not count; scratch space inside a single kernel (e.g. BLAS packing
    buffers) is not visible.  Deterministic, unlike the resident set size, and cheap enough for
    a notebook.
    """
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    state = {"live": 0, "peak": 0}
    tracked: set[int] = set()

    def release(ptr: int, nbytes: int) -> None:
        state["live"] -= nbytes
        tracked.discard(ptr)

    def storage_ptrs(tree: Any) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)}

    class _Meter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            inputs = storage_ptrs((args, kwargs))
            out = func(*args, **kwargs)
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                st = t.untyped_storage()
                ptr, nbytes = st.data_ptr(), st.nbytes()
                if nbytes == 0 or ptr in inputs or ptr in tracked:
                    continue
                tracked.add(ptr)
                state["live"] += nbytes
                state["peak"] = max(state["peak"], state["live"])
                weakref.finalize(st, release, ptr, nbytes)
            return out

    with _Meter():
        result = fn(*args, **kwargs)
    return result, state["peak"]
