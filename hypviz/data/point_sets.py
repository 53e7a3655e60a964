r"""Point sets near the origin and Hypformer-like queries and keys (the trees are in :mod:`hypviz.data.trees`).

Everything returns torch tensors of points ``(..., d + 1)``, time coordinate first, on
:math:`\langle x, x\rangle_L = -k`, deterministic given ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hypviz.base import validate
from hypviz.lorentz import as_tensor, check_k, check_points, expmap0, lift

__all__ = [
    "wrapped_normal",
    "lifted_gaussian",
    "htc_layer",
    "random_htc_qk",
]


ArrayLike = Any  # numpy array, torch tensor, or a nested list of floats


# --------------------------------------------------------------------------- #
# argument checks and random numbers
# --------------------------------------------------------------------------- #
def _check_shape(n: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
        return (validate.integer(n, "n", 1),)
    if isinstance(n, (tuple, list, torch.Size)) and len(n) > 0:
        return tuple(validate.integer(m, "n", 1) for m in n)
    raise ValueError(f"n must be a positive integer or a non-empty tuple of them (the batch shape), got {n!r}")


def _generator(seed: Any) -> torch.Generator | np.random.Generator | None:
    if seed is None or isinstance(seed, (torch.Generator, np.random.Generator)):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise TypeError(
            f"seed must be a non-negative int, a torch.Generator, a numpy.random.Generator or None, got {seed!r}"
        )
    return torch.Generator().manual_seed(int(seed))


def _standard_normal(shape: tuple[int, ...], gen: Any, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(gen, np.random.Generator):
        return torch.from_numpy(gen.standard_normal(shape)).to(dtype)
    return torch.randn(shape, generator=gen, dtype=dtype)


def _uniform(shape: tuple[int, ...], bound: float, gen: Any, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(gen, np.random.Generator):
        u = torch.from_numpy(gen.random(shape)).to(dtype)
    else:
        u = torch.rand(shape, generator=gen, dtype=dtype)
    return (2.0 * u - 1.0) * bound


# --------------------------------------------------------------------------- #
# near-origin samples
# --------------------------------------------------------------------------- #
def wrapped_normal(
    n: int | Sequence[int],
    d: int,
    std: float = 1.0,
    *,
    k: float = 1.0,
    seed: Any = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""Wrapped normal at the origin: a Gaussian in the tangent space at the origin, then ``expmap0``.

    .. math::

        u_s \sim \mathcal{N}(0, \sigma^2 I_d), \qquad
        x_s = \sqrt{k}\,\sinh\Bigl(\frac{\|u_s\|}{\sqrt{k}}\Bigr)\frac{u_s}{\|u_s\|}, \qquad
        x_t = \sqrt{\|x_s\|^2 + k},

    with :math:`\sigma` = ``std``, i.e. :math:`x = \exp_o((0, u_s))` (:func:`hypviz.lorentz.expmap0`), so ``logmap0(x)`` is the
    Gaussian sample and :math:`d(o, x) = \|u_s\|` (about :math:`\sigma\sqrt{d}`).
    Drawn in float64, then cast to ``dtype``.

    Parameters
    ----------
    n : int or tuple of int
        Number of points, or a batch shape.
    d : int
        Dimension of the hyperbolic space (points have ``d + 1`` coordinates).
    std : float
        Standard deviation of each tangent coordinate, :math:`> 0`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    seed : int, torch.Generator, numpy.random.Generator or None, default 0
        Random seed (an int :math:`\ge 0`) or generator; ``None`` uses torch's global generator.
    dtype : torch.dtype, default torch.float64
        ``torch.float32`` or ``torch.float64``.
    device : torch.device or str, optional
        Device of the result; default the CPU.

    Returns
    -------
    torch.Tensor
        Shape ``(*n, d + 1)``, on :math:`\langle x, x\rangle_L = -k`.

    Raises
    ------
    ValueError
        When ``n`` is not a positive integer or a non-empty tuple of them, ``d`` is not an integer
        :math:`\ge 1`, ``std`` is not a positive finite number, or :math:`k \le 0`; ``TypeError`` for
        another ``seed`` or ``dtype``.
    """
    shape = _check_shape(n)
    d = validate.integer(d, "d", 1)
    s = validate.positive(std, "std")
    kf = check_k(k)
    dtype = validate.float_dtype(dtype)
    u = s * _standard_normal(shape + (d,), _generator(seed), torch.float64)
    x = expmap0(torch.nn.functional.pad(u, (1, 0)), k=kf)
    return x.to(dtype=dtype, device=device)


def _mean_chi(d: int) -> float:
    """``E|z|`` for ``z ~ N(0, I_d)``: ``sqrt(2) Gamma((d + 1) / 2) / Gamma(d / 2)``."""
    return math.sqrt(2.0) * math.exp(math.lgamma((d + 1) / 2.0) - math.lgamma(d / 2.0))


def lifted_gaussian(
    n: int | Sequence[int],
    d: int,
    mean_norm: float,
    *,
    k: float = 1.0,
    seed: Any = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""Gaussian spatial parts of mean norm ``mean_norm`` (:math:`r`), lifted onto the hyperboloid.

    .. math::

        x_s = \sigma z, \quad z \sim \mathcal{N}(0, I_d), \quad
        \sigma = \frac{r}{\mathbb{E}\|z\|}, \quad
        \mathbb{E}\|z\| = \frac{\sqrt{2}\,\Gamma((d + 1)/2)}{\Gamma(d/2)}, \qquad
        x_t = \sqrt{\|x_s\|^2 + k},

    so :math:`\mathbb{E}\|x_s\| = r` (:func:`hypviz.lorentz.lift`).  The point sets of notebooks
    03, 05 and 06.  Drawn in float64, then cast to ``dtype``; other parameters as
    :func:`wrapped_normal`.

    Parameters
    ----------
    n : int or tuple of int
        Number of points, or a batch shape.
    d : int
        Dimension of the hyperbolic space (points have ``d + 1`` coordinates).
    mean_norm : float
        :math:`r`, the mean spatial norm, :math:`> 0`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    seed : int, torch.Generator, numpy.random.Generator or None, default 0
        Random seed (an int :math:`\ge 0`) or generator; ``None`` uses torch's global generator.
    dtype : torch.dtype, default torch.float64
        ``torch.float32`` or ``torch.float64``.
    device : torch.device or str, optional
        Device of the result; default the CPU.

    Returns
    -------
    torch.Tensor
        Shape ``(*n, d + 1)``, on :math:`\langle x, x\rangle_L = -k`.

    Raises
    ------
    ValueError
        When ``n`` is not a positive integer or a non-empty tuple of them, ``d`` is not an integer
        :math:`\ge 1`, ``mean_norm`` is not a positive finite number, or :math:`k \le 0`; ``TypeError`` for
        another ``seed`` or ``dtype``.
    """
    shape = _check_shape(n)
    d = validate.integer(d, "d", 1)
    r = validate.positive(mean_norm, "mean_norm")
    kf = check_k(k)
    dtype = validate.float_dtype(dtype)
    xs = (r / _mean_chi(d)) * _standard_normal(shape + (d,), _generator(seed), torch.float64)
    return lift(xs, k=kf).to(dtype=dtype, device=device)


# --------------------------------------------------------------------------- #
# Hypformer-like queries and keys
# --------------------------------------------------------------------------- #
def htc_layer(
    x: ArrayLike,
    weight: ArrayLike,
    bias: ArrayLike | None = None,
    *,
    k_in: float = 1.0,
    k_out: float = 1.0,
) -> torch.Tensor:
    r"""Hypformer's HTC linear layer: a linear map of the full point, time recomputed, curvature ``k_in -> k_out``.

    .. math::

        y_s = \sqrt{\frac{k_{\mathrm{out}}}{k_{\mathrm{in}}}}\,(W x + b), \qquad
        y_t = \sqrt{\|y_s\|^2 + k_{\mathrm{out}}}

    :math:`W` acts on the whole point, time coordinate included (Hypformer's ``HypLinear`` has
    ``in_features + 1`` inputs).  Hypformer's code computes :math:`z_s = W x + b`,
    :math:`z_t = \sqrt{\|z_s\|^2 + k_{\mathrm{in}}}` and then scales the point by
    :math:`\sqrt{k_{\mathrm{out}}/k_{\mathrm{in}}}`; that is the formula above, a point of
    :math:`\langle y, y\rangle_L = -k_{\mathrm{out}}`.  With :math:`W = [0 \mid I]` and no bias the
    layer is the homothety :math:`y = \sqrt{k_{\mathrm{out}}/k_{\mathrm{in}}}\,x`, which multiplies
    every geodesic distance by :math:`\sqrt{k_{\mathrm{out}}/k_{\mathrm{in}}}`.

    Parameters
    ----------
    x : array or tensor, shape (..., d_in + 1)
        Points on :math:`\langle x, x\rangle_L = -k_{\mathrm{in}}`.
    weight : array or tensor, shape (d_out, d_in + 1)
        Same dtype and device as ``x``.
    bias : array or tensor, shape (d_out,), optional
        Same dtype and device as ``x``.
    k_in, k_out : float, default 1.0
        Curvature parameters of the input and output hyperboloids.

    Returns
    -------
    torch.Tensor
        ``(..., d_out + 1)`` on :math:`\langle y, y\rangle_L = -k_{\mathrm{out}}`.

    Raises
    ------
    ValueError
        For points off the input hyperboloid or mis-shaped ``weight``/``bias``; ``TypeError`` when
        ``weight`` differs from ``x`` in dtype or device.
    """
    ki, ko = check_k(k_in), check_k(k_out)
    p = check_points(x, k=ki, name="x")
    w = as_tensor(weight, "weight")
    if w.dim() != 2 or w.shape[1] != p.shape[-1] or w.shape[0] < 1:
        raise ValueError(
            f"weight: expected (d_out, d_in + 1) = (d_out, {p.shape[-1]}) acting on the full point, "
            f"got {tuple(w.shape)}"
        )
    if w.dtype != p.dtype or w.device != p.device:
        raise TypeError(f"weight is {w.dtype} on {w.device} but x is {p.dtype} on {p.device}; match them")
    z = p @ w.transpose(0, 1)
    if bias is not None:
        b = as_tensor(bias, "bias")
        if b.shape != (w.shape[0],) or b.dtype != p.dtype or b.device != p.device:
            raise ValueError(
                f"bias: expected shape ({w.shape[0]},), {p.dtype} on {p.device}; "
                f"got {tuple(b.shape)}, {b.dtype} on {b.device}"
            )
        z = z + b
    ys = math.sqrt(ko / ki) * z
    return torch.cat([torch.sqrt((ys * ys).sum(dim=-1, keepdim=True) + ko), ys], dim=-1)


def random_htc_qk(
    points: ArrayLike,
    d_out: int,
    *,
    k_in: float = 1.0,
    k_out: float = 1.0,
    seed: Any = 0,
    gain: float = math.sqrt(2.0),
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Queries and keys of one random Hypformer-like attention head: two random :func:`htc_layer` maps.

    .. math::

        Q = \mathrm{HTC}(x; W_q), \qquad K = \mathrm{HTC}(x; W_k), \qquad
        W_{q,ij},\, W_{k,ij} \sim \mathcal{U}[-a, a], \quad
        a = \mathrm{gain}\,\sqrt{\frac{6}{d_{\mathrm{in}} + 1 + d_{\mathrm{out}}}},

    no bias, as Hypformer's initialisation: each :math:`W` of shape ``(d_out, d_in + 1)`` drawn
    independently (``xavier_uniform(gain)``; :math:`W_q` first).

    Parameters
    ----------
    points : array or tensor, shape (..., N, d_in + 1)
        Points on :math:`\langle x, x\rangle_L = -k_{\mathrm{in}}` (from this module or anywhere).
    d_out : int
        Spatial dimension of the queries and keys.
    k_in, k_out : float, default 1.0
        Curvature parameters of the input and output hyperboloids.
    seed : int, torch.Generator, numpy.random.Generator or None, default 0
        Random seed (an int :math:`\ge 0`) or generator; ``None`` uses torch's global generator.
    gain : float, default sqrt(2)
        Xavier gain, :math:`> 0`.

    Returns
    -------
    (queries, keys) : tuple of torch.Tensor
        Each ``(..., N, d_out + 1)`` on :math:`\langle y, y\rangle_L = -k_{\mathrm{out}}`, dtype and
        device of ``points``.

    Raises
    ------
    ValueError
        When ``points`` fail :func:`hypviz.lorentz.check_points` for ``k_in``, ``d_out`` is not an integer
        :math:`\ge 1`, ``gain`` is not a positive finite number, or a curvature parameter is :math:`\le 0`;
        ``TypeError`` for another ``seed``.
    """
    ki = check_k(k_in)
    p = check_points(points, k=ki, name="points")
    d_out = validate.integer(d_out, "d_out", 1)
    a = validate.positive(gain, "gain") * math.sqrt(6.0 / (p.shape[-1] + d_out))
    gen = _generator(seed)
    shape = (d_out, p.shape[-1])
    w_q = _uniform(shape, a, gen, p.dtype).to(p.device)
    w_k = _uniform(shape, a, gen, p.dtype).to(p.device)
    return htc_layer(p, w_q, k_in=ki, k_out=k_out), htc_layer(p, w_k, k_in=ki, k_out=k_out)
