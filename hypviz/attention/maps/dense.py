r"""The dense attention maps: :func:`scores`, :func:`attention_map` and Hypformer's focused linear attention.

Each kind's map is computed by its kernel (:mod:`hypviz.attention.maps.kernels`), named by its entry in
:mod:`hypviz.base.kinds`; the arguments are checked once (:mod:`hypviz.attention.maps.checks`).  Pairwise
arrays come from one matrix product, never from broadcasting ``N x M x d``.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from hypviz.attention.maps.checks import check_eps, check_kind, check_norm_scale, check_power, check_temperature, checked_inputs
from hypviz.attention.maps.kernels import (
    KERNELS,
    Focused,
    check_logit_range,
    dense_map,
    feature_map,
    norm_scale_eps,
    option_names,
    raw_scores,
    unknown_options,
)
from hypviz.attention.maps.kernels import options as kernel_options
from hypviz.base import kinds

__all__ = ["KINDS", "SOFTMAX_KINDS", "MODEL_KINDS", "scores", "attention_map", "focused_linear_map", "focused_linear_attention"]

ArrayLike = Any

#: The kinds :func:`hypviz.attention.compare` takes: a live view of the registry (:func:`hypviz.base.kinds.comparable`).
KINDS: kinds.Names = kinds.Names(lambda kd: kd.comparable)
#: The kinds whose map is a row softmax of :func:`scores` over a temperature (their kernel has scores): a live view.
SOFTMAX_KINDS: kinds.Names = kinds.Names(lambda kd: kd.kernel in KERNELS and KERNELS[kd.kernel].has_scores())
#: The kinds of other hyperbolic attention families, computed by :func:`attention_map` (and read by
#: :mod:`hypviz.capture`) but not compared by :func:`hypviz.attention.compare` (a live view); built in: ``"sigmoid"``, the
#: Lorentz GCN gate :math:`\sigma(-\tfrac12\|q - \kappa\|_L^2/\tau + b)` (rows not normalised), and ``"poincare"``, the
#: softmax of the hyperbolic distance itself, :math:`\mathrm{softmax}_j(-d(q_i, \kappa_j)/\tau)` (not squared).
MODEL_KINDS: kinds.Names = kinds.Names(lambda kd: not kd.comparable)


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
        A ``"bilinear"`` softmax kind of :mod:`hypviz.base.kinds`: ``"spatial"``, ``"distance"`` or ``"lorentz"``
        (``"focused"`` has no scores).
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

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import scores
    >>> s = scores(queries, keys, "distance")
    >>> s.shape, bool((s <= 0).all())
    (torch.Size([4, 6]), True)
    >>> bool(torch.allclose(scores(queries, keys, "lorentz"), s - 1.0))  # identity 1 at k = 1
    True
    """
    check_kind(kind, allowed=tuple(SOFTMAX_KINDS))
    q, kappa, _, k, _ = checked_inputs(queries, keys, k=k)
    return raw_scores(kind, q, kappa, k=k)




def attention_map(
    queries: ArrayLike,
    keys: ArrayLike,
    kind: str,
    *,
    k: float = 1.0,
    temperature: float | None = None,
    heads_axis: int | None = None,
    **options: Any,
) -> torch.Tensor:
    r"""Attention map of ``kind``, shape ``(..., N, M)``; every row sums to 1 (except ``"sigmoid"``'s).

    For the softmax kinds, with :math:`s` the :func:`scores` of ``kind``,

    .. math::

        A_{ij} = \frac{\exp(s_{ij} / \tau)}{\sum_l \exp(s_{il} / \tau)} ;

    ``"lorentz"`` is evaluated as ``"distance"``, which has the same softmax (identity 5), because
    the direct :math:`-q_t \kappa_t + q_s \cdot \kappa_s` loses the differences between keys when
    :math:`k` is large.  ``"focused"`` is Hypformer's linear map, :func:`focused_linear_map` with
    ``power`` and ``norm_scale`` (no softmax; ``temperature`` is not used).  ``"distance_rf"`` is the
    implicit map of the linear-time distance attention, :func:`hypviz.attention.approx.random_features.distance_rf_map`
    with ``features`` random features drawn from ``seed`` (orthogonal, with the first-order control
    variate): an estimate of the ``"distance"`` map at ``temperature``.  The two kinds of
    :data:`MODEL_KINDS` are

    .. math::

        A^{\mathrm{sigmoid}}_{ij} = \sigma\Bigl(\frac{-\tfrac12\|q_i - \kappa_j\|_L^2}{\tau} + b\Bigr),
        \qquad
        A^{\mathrm{poincare}}_{ij} = \mathrm{softmax}_j\Bigl(\frac{-d(q_i, \kappa_j)}{\tau}\Bigr),
        \quad d = \sqrt{k}\,\operatorname{arcosh}\Bigl(1 + \frac{\|q - \kappa\|_L^2}{2k}\Bigr),

    the Lorentz GCN's gate (HyboNet's ``(2 + 2<q,kappa>_L)/scale + bias`` at :math:`k = 1`,
    :math:`\tau = \mathrm{scale}/2`, ``bias`` its :math:`b`) and the Poincare-ball attention of the
    HNN++ style (the distance of the ball equals the hyperboloid's, so the points are hyperboloid points).

    Parameters
    ----------
    queries, keys : array or tensor, shapes (..., N, d + 1) and (..., M, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k`, time first (checked); leading axes broadcast.
    kind : str
        A registered kind (:func:`hypviz.base.kinds.names`; the built-in ones are :data:`KINDS` and :data:`MODEL_KINDS`).
    k : float
        Curvature parameter.
    temperature : float, optional
        :math:`\tau`, default :math:`\sqrt{d}` (``d`` the spatial dimension).  Hypformer's full
        (quadratic) attention is ``"distance"`` at :math:`\tau = k \cdot \mathrm{scale} / 2`, its
        learned ``scale`` initialised to :math:`\sqrt{d}` (``scale / 2`` in its simplified code,
        whose ``cinner`` does not divide by ``k``; :mod:`hypviz.capture` measures which).
    heads_axis : int, optional
        The heads axis of a layout such as ``(N, H, d + 1)`` (Hypformer's); the result is then
        heads-first, ``(H, N, M)``.
    **options
        The options of the kind's kernel (:attr:`hypviz.attention.Kernel.options`), by name, each checked by it; an
        option another registered kernel declares is ignored here.  Built in: ``power`` and ``norm_scale``, the
        focused map's ``power_k`` and ``norm_scale`` (default 2 and 1); ``features`` and ``seed``, the number of
        random features of ``"distance_rf"`` and their seed (default 256 and 0); ``bias``, the gate's :math:`b` of
        ``"sigmoid"`` (default 0).

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
        For an unknown ``kind``, a non-positive ``temperature``, an option its kernel refuses (a non-positive
        ``power``, a non-finite ``norm_scale``, ...), a bad ``heads_axis``, or inputs :func:`scores` refuses, and for
        a scalar parameter given as a tensor that requires grad (like ``k``); ``TypeError`` when the dtypes differ,
        for tensors without dense data (meta, sparse, nested), or for an option no registered kernel declares (the
        line names those that exist).

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import attention_map
    >>> P = attention_map(queries, keys, "distance", temperature=0.5)
    >>> P.shape, bool(torch.allclose(P.sum(dim=-1), torch.ones(4, dtype=P.dtype)))
    (torch.Size([4, 6]), True)
    >>> bool(torch.allclose(attention_map(queries, keys, "lorentz", temperature=0.5), P))  # identity 5
    True
    """
    kd = kinds.get(kind)
    unknown = unknown_options(options)
    if unknown:
        raise TypeError(f"attention_map got an unknown option {unknown[0]!r} (the registered kernels' options: "
                        f"{', '.join(option_names()) or 'none'}; kind {kd.name!r} reads {', '.join(kd.options) or 'none'})")
    q, keys, _, k, _ = checked_inputs(queries, keys, k=k, heads_axis=heads_axis)
    temperature = check_temperature(temperature, q.shape[-1] - 1) if kd.temperature else 0.0
    values = kernel_options(kd, options)
    if kd.temperature:
        _check_logits(q, keys, k, temperature)
    return dense_map(kind, q, keys, k=k, temperature=temperature, opts=values)


def _check_logits(q: torch.Tensor, keys: torch.Tensor, k: float, temperature: float) -> None:
    r"""Refuse a ``temperature`` at which the logits may overflow the points' dtype (the map would be NaN).

    With :math:`Q = \max_i q_{t,i}` and :math:`K = \max_j \kappa_{t,j}`, every built-in kind's score is at most
    :math:`2QK + \sqrt{k}\operatorname{arcosh}(QK/k)` in size (:math:`|q_s \cdot \kappa_s| \le q_t\kappa_t`,
    :math:`\tfrac12\|q - \kappa\|_L^2 \le 2 q_t \kappa_t`, :math:`d(q, \kappa) = \sqrt{k}\operatorname{arcosh}(-\langle
    q, \kappa\rangle_L / k)`), so the logits are at most that over :math:`\tau` (:func:`check_logit_range`).
    """
    if q.numel() == 0 or keys.numel() == 0:
        return
    qk = float(q[..., 0].detach().amax()) * float(keys[..., 0].detach().amax())  # a bound: no gradient needed
    size = 2.0 * qk + math.sqrt(k) * math.acosh(max(1.0, qk / k))
    check_logit_range(size / temperature, q.dtype, temperature, lambda t: size / t)


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

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import focused_linear_map
    >>> A = focused_linear_map(queries, keys)
    >>> A.shape, bool((A >= 0).all()), bool(torch.allclose(A.sum(dim=-1), torch.ones(4, dtype=A.dtype)))
    (torch.Size([4, 6]), True, True)
    """
    q, kappa, _, k, _ = checked_inputs(queries, keys, k=k)
    opts = dict(power=check_power(power), norm_scale=check_norm_scale(norm_scale))
    focused = cast(Focused, KERNELS["focused"])  # the built-in kernel, whose dense map takes eps
    return focused.dense(kinds.get("focused"), q, kappa, k=k, temperature=0.0, opts=opts, eps=check_eps(eps))


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
    :math:`V_s`, averages the heads and lifts with ``hypviz.lorentz.lift(out, k=k)``).
    ``eps = 1e-6`` reproduces Hypformer's normaliser exactly; the default 0 makes the identity with
    the map exact.

    Raises
    ------
    ValueError
        As :func:`focused_linear_map`, and when ``values`` has not one row per key.

    Examples
    --------
    >>> import torch
    >>> from hypviz import data
    >>> queries, keys = data.wrapped_normal(4, 2, 0.5, seed=0), data.wrapped_normal(6, 2, 0.5, seed=1)
    >>> from hypviz.attention import focused_linear_attention, focused_linear_map
    >>> values = data.wrapped_normal(6, 2, 0.5, seed=2)
    >>> out = focused_linear_attention(queries, keys, values)
    >>> out.shape, bool(torch.allclose(out, focused_linear_map(queries, keys) @ values[:, 1:]))
    (torch.Size([4, 2]), True)
    """
    q, kappa, v, _, _ = checked_inputs(queries, keys, k=k, values=values)
    assert v is not None  # values were given, so checked_inputs returns them checked
    p, s, e = check_power(power), check_norm_scale(norm_scale), check_eps(eps)
    fq, fk = feature_map(q[..., 1:], p), feature_map(kappa[..., 1:], p)
    kv = fk.transpose(-1, -2) @ v[..., 1:]  # (..., d, d_v)
    numerator = fq @ kv  # (..., N, d_v)
    normaliser = fq @ fk.sum(dim=-2).unsqueeze(-1)  # (..., N, 1)
    return numerator.div_(normaliser.add_(norm_scale_eps(e, s)))



