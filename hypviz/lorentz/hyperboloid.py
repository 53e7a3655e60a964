r"""Points of the hyperboloid and their geometry: products, distances, maps between the models.

Points are ``(..., d + 1)``, time first, on :math:`\langle x, x\rangle_L = -k` (the conventions of
:mod:`hypviz.lorentz`); input is checked by :mod:`hypviz.lorentz.points`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hypviz.base import validate
from hypviz.lorentz.points import as_tensor, check_k, check_last_dim, check_pair, check_points

__all__ = [
    "lift",
    "inner",
    "sqdist",
    "dist",
    "pairwise_inner",
    "pairwise_sqdist",
    "distance_operands",
    "expmap0",
    "logmap0",
    "to_poincare",
    "from_poincare",
    "to_klein",
    "from_klein",
    "origin",
    "geodesic",
]

ArrayLike = Any  # numpy array, torch tensor, or a nested list of floats




# --------------------------------------------------------------------------- #
# points
# --------------------------------------------------------------------------- #
def origin(d: int, *, k: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    r"""The origin of the ``d``-dimensional hyperboloid, shape ``(d + 1,)``.

    .. math::

        o = (\sqrt{k}, 0, \dots, 0)

    Parameters
    ----------
    d : int
        Dimension of the hyperbolic space, :math:`\ge 1` (the origin has ``d + 1`` coordinates).
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    dtype : torch.dtype, default torch.float64
        Dtype of the result.

    Raises
    ------
    ValueError
        When ``d`` is not an integer :math:`\ge 1` or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import origin
    >>> origin(2, k=4.0)
    tensor([2., 0., 0.], dtype=torch.float64)
    """
    d = validate.integer(d, "d", 1, " (the dimension of the hyperboloid)")
    o = torch.zeros(d + 1, dtype=dtype)
    o[0] = math.sqrt(check_k(k))
    return o


def lift(x_s: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Lift spatial parts ``(..., d)`` onto the hyperboloid, ``(..., d + 1)``, time first.

    .. math::

        x = \Bigl(\sqrt{\|x_s\|^2 + k},\; x_s\Bigr)

    Parameters
    ----------
    x_s : array or tensor, shape (..., d)
        Spatial parts, :math:`d \ge 1`, finite.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    torch.Tensor
        Shape ``(..., d + 1)`` on :math:`\langle x, x\rangle_L = -k`, dtype and device of ``x_s``.

    Raises
    ------
    ValueError
        When ``x_s`` holds NaN or Inf, has no coordinate, or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import lift
    >>> lift([3.0, 4.0], k=11.0)    # sqrt(3^2 + 4^2 + 11) = 6
    tensor([6., 3., 4.], dtype=torch.float64)
    >>> lift([[0.0, 0.0], [2.0, 2.0]], k=1.0).shape
    torch.Size([2, 3])
    """
    kf = check_k(k)
    s = as_tensor(x_s, "x_s")
    check_last_dim(s, "x_s", minimum=1)
    if s.numel() and not bool(torch.isfinite(s).all()):
        raise ValueError("x_s holds NaN or Inf; expected finite spatial coordinates")
    time = torch.sqrt((s * s).sum(dim=-1, keepdim=True) + kf)
    return torch.cat([time, s], dim=-1)


def inner(x: ArrayLike, y: ArrayLike) -> torch.Tensor:
    r"""Lorentzian inner product over the last axis (batch shapes broadcast).

    .. math::

        \langle x, y\rangle_L = -x_t y_t + x_s \cdot y_s

    Parameters
    ----------
    x, y : array or tensor, shape (..., d + 1)
        Vectors of :math:`\mathbb{R}^{d+1}`, time first, not checked to lie on a hyperboloid; their batch
        shapes broadcast.  One dtype and device.

    Returns
    -------
    torch.Tensor
        The broadcast batch shape ``(...)``.

    Raises
    ------
    ValueError
        When ``x`` and ``y`` differ in ``d`` or their batch shapes do not broadcast; ``TypeError`` when
        their dtypes differ.

    Examples
    --------
    >>> from hypviz.lorentz import inner, lift
    >>> x = lift([3.0, 4.0], k=11.0)
    >>> float(inner(x, x))      # -6^2 + 3^2 + 4^2 = -k
    -11.0
    >>> float(inner(x, [1.0, 0.0, 0.0]))
    -6.0
    """
    a, b = as_tensor(x, "x"), as_tensor(y, "y")
    check_last_dim(a, "x")
    check_last_dim(b, "y")
    check_pair(a, b)
    return -a[..., 0] * b[..., 0] + (a[..., 1:] * b[..., 1:]).sum(dim=-1)


_NARROW = (torch.float16, torch.bfloat16, torch.float32)


def sqdist_unchecked(a: torch.Tensor, b: torch.Tensor, *, k: float) -> torch.Tensor:
    # identity 3: D = |x - y|^2_L = |x_s - y_s|^2 - (x_t - y_t)^2 with x_t - y_t = (x_s - y_s).(x_s + y_s) / (x_t + y_t).
    # Write e = x_s - y_s, s = x_s + y_s, T = x_t + y_t.  Two exact forms of the same D:
    #   (A) D = |e|^2 - (e.s / T)^2                          cancels when x - y is nearly light-like
    #                                                        (points far from the origin, displaced radially);
    #   (B) D = |e|^2 (4k + |s_perp|^2) / (T^2 - |e|^2)      s_perp = s - (e.s / |e|^2) e, the part of s
    #       orthogonal to e; from (A) with (e.s)^2 = |e|^2 (|s|^2 - |s_perp|^2) and T^2 - |s|^2 = 4k + D.
    #       Its denominator T^2 - |e|^2 = 2k + 2 (x_t y_t + x_s.y_s) cancels only for far, nearly antipodal points.
    # Each element takes the form whose cancellation is milder: (A) loses a factor (e.s / T)^2 / D,
    # (B) a factor (2k + 2 x_t y_t + 2 |x_s.y_s|) / (T^2 - |e|^2).
    xs, ys = a[..., 1:], b[..., 1:]
    e, s = xs - ys, xs + ys
    ee = (e * e).sum(dim=-1)
    es = (e * s).sum(dim=-1)
    td = es / (a[..., 0] + b[..., 0])  # x_t - y_t
    d_a = ee - td * td
    s_perp = s - (es / torch.where(ee > 0, ee, torch.ones_like(ee))).unsqueeze(-1) * e
    tprod = a[..., 0] * b[..., 0]
    xy = (xs * ys).sum(dim=-1)
    denom = (2.0 * k + 2.0 * (tprod + xy)).clamp_min(torch.finfo(tprod.dtype).tiny)
    d_b = ee * (4.0 * k + (s_perp * s_perp).sum(dim=-1)) / denom
    use_b = (2.0 * k + 2.0 * (tprod + xy.abs())) * d_b <= td * td * denom
    return torch.where(use_b, d_b, d_a).clamp_min(0.0)


def sqdist(x: ArrayLike, y: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Squared Lorentzian distance of points on :math:`\langle x, x\rangle_L = -k`, never negative.

    .. math::

        \|x - y\|_L^2 = -2k - 2\langle x, y\rangle_L
                      = \|x_s - y_s\|^2 - (x_t - y_t)^2,
        \qquad x_t - y_t = \frac{(x_s - y_s)\cdot(x_s + y_s)}{x_t + y_t}

    The second form (identity 3, derived in notebook 02) keeps its relative accuracy for nearby
    points, where :math:`-2k - 2\langle x, y\rangle_L` cancels catastrophically.  Where the
    difference itself cancels (nearby points far from the origin, displaced radially) the
    same identity is used with the cancelling part solved exactly: with :math:`e = x_s - y_s`,
    :math:`s = x_s + y_s`, :math:`T = x_t + y_t` and :math:`s_\perp` the part of :math:`s`
    orthogonal to :math:`e`,

    .. math::

        \|x - y\|_L^2 = \frac{\|e\|^2\,(4k + \|s_\perp\|^2)}{T^2 - \|e\|^2},
        \qquad T^2 - \|e\|^2 = 2k + 2\,(x_t y_t + x_s \cdot y_s);

    each pair takes the form that cancels less.  In float64 the result is the distance of points
    within a few ulps of the inputs (backward stable): a few ulps near the origin, up to about
    :math:`\|x_s\| / \sqrt{k}` ulps far out for radially displaced pairs, whose distance is itself
    that sensitive to the last bits.  float32 and half-precision points are evaluated in float64
    from their spatial parts (time recomputed) and rounded once.

    ``x`` and ``y`` are ``(..., d + 1)`` points (checked by :func:`check_points`) whose batch
    shapes broadcast.

    Parameters
    ----------
    x, y : array or tensor, shape (..., d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first;
        their batch shapes broadcast.  One dtype (float32 or float64) and device.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    torch.Tensor
        The broadcast batch shape ``(...)``, dtype and device of the inputs.

    Raises
    ------
    ValueError
        When the points are off the hyperboloid (see :func:`check_points`), differ in ``d``, or their
        batch shapes do not broadcast; ``TypeError`` when their dtypes differ.

    Examples
    --------
    >>> from hypviz.lorentz import lift, sqdist
    >>> x, y = lift([[0.0, 0.0], [3.0, 4.0]], k=1.0)
    >>> round(float(sqdist(x, y, k=1.0)), 4)    # -2k - 2<x, y>_L = 2 sqrt(26) - 2
    8.198
    >>> float(sqdist(y, y, k=1.0))
    0.0
    """
    kf = check_k(k)
    a = check_points(x, k=kf, name="x")
    b = check_points(y, k=kf, name="y")
    check_pair(a, b)
    if a.dtype in _NARROW and a.device.type != "mps":
        # evaluated in float64 from the spatial parts (time recomputed): far from the origin the rounded
        # float32 time coordinate no longer determines the point, and |x_s|^4 overflows float32 from |x_s| ~ 1e9
        wide = sqdist_unchecked(lift(a[..., 1:].double(), k=kf), lift(b[..., 1:].double(), k=kf), k=kf)
        return wide.to(a.dtype)
    return sqdist_unchecked(a, b, k=kf)


def dist(x: ArrayLike, y: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Geodesic distance on the hyperboloid (batch shapes broadcast).

    .. math::

        d(x, y) = \sqrt{k}\,\operatorname{arcosh}\Bigl(-\frac{\langle x, y\rangle_L}{k}\Bigr)
                = 2\sqrt{k}\,\operatorname{arsinh}\frac{\|x - y\|_L}{2\sqrt{k}}

    Evaluated by the second form (identity 2) from :func:`sqdist`, accurate for nearby points,
    unlike ``arcosh`` of a clamped inner product.  Differentiable everywhere: at :math:`x = y`,
    where the distance has a kink, the gradient is the subgradient 0 (not NaN).

    Parameters
    ----------
    x, y : array or tensor, shape (..., d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first;
        their batch shapes broadcast.  One dtype (float32 or float64) and device.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    torch.Tensor
        The broadcast batch shape ``(...)``, dtype and device of the inputs.

    Raises
    ------
    ValueError
        When the points are off the hyperboloid (see :func:`check_points`), differ in ``d``, or their
        batch shapes do not broadcast; ``TypeError`` when their dtypes differ.

    Examples
    --------
    >>> from hypviz.lorentz import dist, lift
    >>> x, y = lift([[0.0, 0.0], [3.0, 4.0]], k=1.0)
    >>> round(float(dist(x, y, k=1.0)), 4)      # arcosh(sqrt(26))
    2.3124
    >>> float(dist(y, y, k=1.0))
    0.0
    """
    kf = check_k(k)
    root_k = math.sqrt(kf)
    sq = sqdist(x, y, k=kf)
    positive = sq > 0
    root = torch.sqrt(torch.where(positive, sq, torch.ones_like(sq)))  # no sqrt'(0) = inf in the graph
    return torch.where(positive, 2.0 * root_k * torch.asinh(root / (2.0 * root_k)), torch.zeros_like(sq))


def _pairwise_operands(x: ArrayLike, y: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = as_tensor(x, "x"), as_tensor(y, "y")
    for t, name in ((a, "x"), (b, "y")):
        if t.dim() < 2:
            raise ValueError(f"{name}: expected (..., N, d + 1) for a pairwise product, got shape {tuple(t.shape)}")
        check_last_dim(t, name)
    check_pair(a, b, core=2)
    return a, b


def pairwise_inner(x: ArrayLike, y: ArrayLike) -> torch.Tensor:
    r"""All Lorentzian inner products between two sets of points, by one matrix product.

    .. math::

        \langle x_i, y_j\rangle_L = (x J y^\top)_{ij}, \qquad J = \mathrm{diag}(-1, 1, \dots, 1)

    ``x`` is ``(..., N, d + 1)``, ``y`` is ``(..., M, d + 1)``; the result is ``(..., N, M)``
    (no ``N x M x (d + 1)`` intermediate).  The points are not checked to lie on a hyperboloid.

    Parameters
    ----------
    x : array or tensor, shape (..., N, d + 1)
        First set, time first.
    y : array or tensor, shape (..., M, d + 1)
        Second set, of the same ``d``, dtype and device; the batch shapes ``(...)`` broadcast.

    Raises
    ------
    ValueError
        When ``x`` or ``y`` has fewer than 2 axes, they differ in ``d``, or their batch shapes do not
        broadcast; ``TypeError`` when their dtypes differ.

    Examples
    --------
    >>> from hypviz.lorentz import lift, pairwise_inner
    >>> x = lift([[0.0, 0.0], [2.0, 2.0]], k=1.0)    # (1, 0, 0) and (3, 2, 2)
    >>> pairwise_inner(x, x)
    tensor([[-1., -3.],
            [-3., -1.]], dtype=torch.float64)
    """
    a, b = _pairwise_operands(x, y)
    a_j = torch.cat([-a[..., :1], a[..., 1:]], dim=-1)
    return a_j @ b.transpose(-1, -2)


def pairwise_sqdist(x: ArrayLike, y: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""All squared Lorentzian distances :math:`\|x_i - y_j\|_L^2`, shape ``(..., N, M)``, never negative.

    .. math::

        \|x_i - y_j\|_L^2 = (A B^\top)_{ij}

    with ``(A, B) = distance_operands(x, y, k=k, temperature=-0.5)`` (``d + 3`` columns each, see
    :func:`distance_operands`), clamped at 0 in place: no ``N x M x d`` intermediate and no second
    ``N x M`` array.

    The error is *absolute*, a few ulps times :math:`\|x_s\|^2 + \|y_s\|^2` (enough for attention
    logits, where only differences along a row matter).  For the relative accuracy on nearby pairs
    of :func:`sqdist`, call ``sqdist(x[..., :, None, :], y[..., None, :, :], k=k)``, which costs
    ``N x M x d`` memory.

    Parameters
    ----------
    x : array or tensor, shape (..., N, d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first.
    y : array or tensor, shape (..., M, d + 1)
        Points as ``x``, of the same ``d``, dtype and device; the batch shapes ``(...)`` broadcast.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Raises
    ------
    ValueError
        When the points fail :func:`check_points`, or as :func:`pairwise_inner`.

    Examples
    --------
    >>> from hypviz.lorentz import lift, pairwise_sqdist
    >>> x = lift([[0.0, 0.0], [2.0, 2.0]], k=1.0)    # (1, 0, 0) and (3, 2, 2)
    >>> pairwise_sqdist(x, x, k=1.0)                  # -2k - 2 <x_i, x_j>_L
    tensor([[0., 4.],
            [4., 0.]], dtype=torch.float64)
    """
    kf = check_k(k)
    a = check_points(x, k=kf, name="x")
    b = check_points(y, k=kf, name="y")
    a, b = _pairwise_operands(a, b)
    left, right = distance_operands(a, b, k=kf, temperature=-0.5)  # -1/2 D / (-1/2) = D
    return (left @ right.transpose(-1, -2)).clamp_min_(0.0)


def distance_operands(
    x: torch.Tensor, y: torch.Tensor, *, k: float = 1.0, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Operands ``(A, B)`` with :math:`A B^\top = -\tfrac12\|x_i - y_j\|_L^2 / \tau` (:math:`\tau` = ``temperature``).

    With the time coordinate measured from the origin's,
    :math:`u = x_t - \sqrt{k} = \|x_s\|^2 / (x_t + \sqrt{k})` (no cancellation), identity 1 becomes

    .. math::

        -\tfrac12\|x - y\|_L^2 = \langle x, y\rangle_L + k
            = x_s \cdot y_s - u_x u_y - \sqrt{k}\,(u_x + u_y),

    whose terms are all of the size of :math:`\|x_s\|^2`, so nothing of size :math:`k` cancels near
    the origin.  Hence

    .. math::

        A = [x_s,\; u_x,\; u_x,\; 1] / \tau, \qquad
        B = [y_s,\; -u_y,\; -\sqrt{k},\; -\sqrt{k}\,u_y],

    of shapes ``(..., N, d + 3)`` and ``(..., M, d + 3)``.  ``x`` and ``y`` must be tensors of
    points already checked with :func:`check_points` (they are not validated here; ``k`` and ``temperature``
    are: :math:`k > 0`, :math:`\tau` finite and nonzero, negative for :math:`+\tfrac12\|x - y\|_L^2 / |\tau|`).

    Parameters
    ----------
    x : torch.Tensor, shape (..., N, d + 1)
        Points already checked with :func:`check_points`.
    y : torch.Tensor, shape (..., M, d + 1)
        Points already checked with :func:`check_points`, of the dtype and device of ``x``.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    temperature : float, default 1.0
        :math:`\tau`, finite and nonzero.

    Returns
    -------
    (A, B) : tuple of torch.Tensor
        Shapes ``(..., N, d + 3)`` and ``(..., M, d + 3)``.

    Raises
    ------
    ValueError
        When :math:`k \le 0` or ``temperature`` is not a finite nonzero number.

    Examples
    --------
    >>> from hypviz.lorentz import distance_operands, lift
    >>> x = lift([[0.0, 0.0], [2.0, 2.0]], k=1.0)
    >>> left, right = distance_operands(x, x, k=1.0)
    >>> left.shape
    torch.Size([2, 5])
    >>> left @ right.T                                 # -1/2 |x_i - x_j|^2_L
    tensor([[ 0., -2.],
            [-2.,  0.]], dtype=torch.float64)
    """
    root_k = math.sqrt(check_k(k))
    temperature = validate.number(temperature, "temperature", hint=" (nonzero)")
    if temperature == 0.0:
        raise ValueError("temperature must be a finite number (nonzero), got 0.0")
    xt, xs = x[..., :1], x[..., 1:]
    yt, ys = y[..., :1], y[..., 1:]
    ux = (xs * xs).sum(dim=-1, keepdim=True) / (xt + root_k)
    uy = (ys * ys).sum(dim=-1, keepdim=True) / (yt + root_k)
    left = torch.cat([xs, ux, ux, torch.ones_like(ux)], dim=-1) * (1.0 / temperature)
    right = torch.cat([ys, -uy, torch.full_like(uy, -root_k), -root_k * uy], dim=-1)
    return left, right


# --------------------------------------------------------------------------- #
# maps between the hyperboloid, the tangent space at the origin and the disks
# --------------------------------------------------------------------------- #
def expmap0(u: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Exponential map at the origin: tangent vector :math:`u = (0, u_s)` to a point of the hyperboloid.

    .. math::

        x_s = \sqrt{k}\,\sinh\Bigl(\frac{\|u_s\|}{\sqrt{k}}\Bigr)\frac{u_s}{\|u_s\|}, \qquad
        x_t = \sqrt{\|x_s\|^2 + k} = \sqrt{k}\,\cosh\Bigl(\frac{\|u_s\|}{\sqrt{k}}\Bigr)

    ``u`` is ``(..., d + 1)`` with ``u[..., 0] == 0`` (as in geoopt); :math:`u_s = 0` gives the origin.

    Parameters
    ----------
    u : array or tensor, shape (..., d + 1)
        Tangent vectors at the origin, :math:`u = (0, u_s)`, finite.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    torch.Tensor
        Shape ``(..., d + 1)`` on :math:`\langle x, x\rangle_L = -k`, dtype and device of ``u``.

    Raises
    ------
    ValueError
        When ``u[..., 0]`` is not zero (beyond ``1000 eps max(1, max|u|)``), ``u`` holds NaN/Inf, or
        :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import expmap0
    >>> x = expmap0([0.0, 1.0, 0.0], k=1.0)       # (cosh 1, sinh 1, 0)
    >>> x.round(decimals=4).tolist()
    [1.5431, 1.1752, 0.0]
    """
    kf = check_k(k)
    v = as_tensor(u, "u")
    check_last_dim(v, "u")
    if v.numel():
        if not bool(torch.isfinite(v).all()):
            raise ValueError("u holds NaN or Inf; expected a finite tangent vector")
        w = v.detach()
        scale = w.abs().amax().clamp_min(1.0)
        if float(w[..., 0].abs().amax()) > 1e3 * torch.finfo(v.dtype).eps * float(scale):
            raise ValueError(
                "u: expected a tangent vector at the origin, (..., d + 1) with u[..., 0] == 0 (time first); "
                f"got max |u[..., 0]| = {float(v[..., 0].abs().amax()):.3g}. For a spatial vector v of shape "
                "(..., d), pass torch.nn.functional.pad(v, (1, 0))"
            )
    root_k = math.sqrt(kf)
    us = v[..., 1:]
    norm = torch.linalg.vector_norm(us, dim=-1, keepdim=True)
    theta = norm / root_k
    # sinh(theta) / theta, exact 1 at theta = 0
    safe = torch.where(theta > 0, theta, torch.ones_like(theta))
    sinhc = torch.where(theta > 0, torch.sinh(safe) / safe, torch.ones_like(theta))
    xs = us * sinhc
    return torch.cat([torch.sqrt((xs * xs).sum(dim=-1, keepdim=True) + kf), xs], dim=-1)


def logmap0(x: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Logarithmic map at the origin, the inverse of :func:`expmap0`; shape ``(..., d + 1)``.

    .. math::

        u_t = 0, \qquad
        u_s = \sqrt{k}\,\operatorname{arsinh}\Bigl(\frac{\|x_s\|}{\sqrt{k}}\Bigr)\frac{x_s}{\|x_s\|}

    so that :math:`\|u_s\| = d(o, x)`.  The points are checked with :func:`check_points`.

    Parameters
    ----------
    x : array or tensor, shape (..., d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Raises
    ------
    ValueError
        When the points fail :func:`check_points` or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import expmap0, logmap0
    >>> u = logmap0(expmap0([0.0, 1.0, -2.0], k=1.0), k=1.0)
    >>> u.round(decimals=6).tolist()
    [0.0, 1.0, -2.0]
    """
    kf = check_k(k)
    p = check_points(x, k=kf)
    root_k = math.sqrt(kf)
    xs = p[..., 1:]
    norm = torch.linalg.vector_norm(xs, dim=-1, keepdim=True)
    r = norm / root_k
    safe = torch.where(r > 0, r, torch.ones_like(r))
    ratio = torch.where(r > 0, torch.asinh(safe) / safe, torch.ones_like(r))  # arsinh(r) / r
    return torch.cat([torch.zeros_like(p[..., :1]), xs * ratio], dim=-1)


def to_poincare(x: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Hyperboloid to the Poincare ball of radius :math:`\sqrt{k}`, shape ``(..., d)``.

    .. math::

        p = \frac{\sqrt{k}\,x_s}{x_t + \sqrt{k}}

    Parameters
    ----------
    x : array or tensor, shape (..., d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Raises
    ------
    ValueError
        When the points fail :func:`check_points` or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import to_poincare
    >>> to_poincare([3.0, 2.0, 2.0], k=1.0).tolist()     # x_s / (x_t + 1)
    [0.5, 0.5]
    """
    kf = check_k(k)
    p = check_points(x, k=kf)
    root_k = math.sqrt(kf)
    return root_k * p[..., 1:] / (p[..., :1] + root_k)


def _check_ball(p: torch.Tensor, kf: float, name: str) -> torch.Tensor:
    check_last_dim(p, name, minimum=1)
    if p.numel() == 0:
        return (p * p).sum(dim=-1, keepdim=True)
    if not bool(torch.isfinite(p).all()):
        raise ValueError(f"{name} holds NaN or Inf; expected finite points of the disk")
    sq = (p * p).sum(dim=-1, keepdim=True)
    if not bool((sq < kf).all()):
        worst = float(sq.max().sqrt())
        raise ValueError(f"{name}: points must lie inside the ball |p| < sqrt(k) = {math.sqrt(kf):.6g}, got |p| = {worst:.6g}")
    return sq


def from_poincare(p: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Poincare ball of radius :math:`\sqrt{k}` to the hyperboloid, the inverse of :func:`to_poincare`.

    .. math::

        x_s = \frac{2k\,p}{k - \|p\|^2}, \qquad
        x_t = \sqrt{\|x_s\|^2 + k} = \frac{\sqrt{k}\,(k + \|p\|^2)}{k - \|p\|^2}

    Parameters
    ----------
    p : array or tensor, shape (..., d)
        Points of the open Poincare ball, :math:`\|p\| < \sqrt{k}`, :math:`d \ge 1`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    torch.Tensor
        Shape ``(..., d + 1)`` on :math:`\langle x, x\rangle_L = -k`, dtype and device of ``p``.

    Raises
    ------
    ValueError
        When a point is not strictly inside the ball, :math:`\|p\| \ge \sqrt{k}`, or holds NaN/Inf.

    Examples
    --------
    >>> from hypviz.lorentz import from_poincare
    >>> from_poincare([0.5, 0.5], k=1.0).tolist()
    [3.0, 2.0, 2.0]
    """
    kf = check_k(k)
    q = as_tensor(p, "p")
    sq = _check_ball(q, kf, "p")
    xs = 2.0 * kf * q / (kf - sq)
    return torch.cat([torch.sqrt((xs * xs).sum(dim=-1, keepdim=True) + kf), xs], dim=-1)


def to_klein(x: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Hyperboloid to the Klein (Beltrami-Klein) ball of radius :math:`\sqrt{k}`, shape ``(..., d)``.

    .. math::

        K = \frac{\sqrt{k}\,x_s}{x_t}

    Parameters
    ----------
    x : array or tensor, shape (..., d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Raises
    ------
    ValueError
        When the points fail :func:`check_points` or :math:`k \le 0`.

    Examples
    --------
    >>> from hypviz.lorentz import to_klein
    >>> to_klein([3.0, 2.0, 2.0], k=1.0).round(decimals=4).tolist()     # x_s / x_t
    [0.6667, 0.6667]
    """
    kf = check_k(k)
    p = check_points(x, k=kf)
    return math.sqrt(kf) * p[..., 1:] / p[..., :1]


def from_klein(q: ArrayLike, *, k: float = 1.0) -> torch.Tensor:
    r"""Klein ball of radius :math:`\sqrt{k}` to the hyperboloid, the inverse of :func:`to_klein`.

    .. math::

        x_t = \frac{k}{\sqrt{k - \|K\|^2}}, \qquad x_s = \frac{x_t\,K}{\sqrt{k}}

    Parameters
    ----------
    q : array or tensor, shape (..., d)
        Points :math:`K` of the open Klein ball, :math:`\|K\| < \sqrt{k}`, :math:`d \ge 1`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    torch.Tensor
        Shape ``(..., d + 1)`` on :math:`\langle x, x\rangle_L = -k`, dtype and device of ``q``.

    Raises
    ------
    ValueError
        When a point is not strictly inside the ball, :math:`\|K\| \ge \sqrt{k}`, or holds NaN/Inf.

    Examples
    --------
    >>> from hypviz.lorentz import from_klein
    >>> from_klein([0.6, 0.0], k=1.0).round(decimals=6).tolist()     # x_t = 1 / sqrt(1 - 0.36)
    [1.25, 0.75, 0.0]
    """
    kf = check_k(k)
    t = as_tensor(q, "q")
    sq = _check_ball(t, kf, "q")
    time = kf / torch.sqrt(kf - sq)
    return torch.cat([time, time * t / math.sqrt(kf)], dim=-1)


# --------------------------------------------------------------------------- #
# geodesics
# --------------------------------------------------------------------------- #
def _sinh_ratio(s: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """``sinh(s theta) / sinh(theta)`` for ``0 <= s <= 1`` and ``theta >= 0``, equal to ``s`` at ``theta = 0``.

    Written ``e^{(s - 1) theta} expm1(-2 s theta) / expm1(-2 theta)``: no overflow for far-apart
    points (``theta`` in the hundreds) and no cancellation for nearby ones.
    """
    pos = theta > 0
    safe = torch.where(pos, theta, torch.ones_like(theta))
    ratio = torch.exp((s - 1.0) * safe) * torch.expm1(-2.0 * s * safe) / torch.expm1(-2.0 * safe)
    return torch.where(pos, ratio, s.expand_as(ratio))


def geodesic(x: ArrayLike, y: ArrayLike, n: int = 64, *, k: float = 1.0) -> torch.Tensor:
    r"""``n`` points along the geodesic from ``x`` to ``y``, both included, at constant speed.

    With :math:`\theta = d(x, y)/\sqrt{k}` and :math:`t_i = i/(n - 1)`, :math:`i = 0, \dots, n - 1`,

    .. math::

        \gamma(t) = \frac{\sinh((1 - t)\theta)\,x + \sinh(t\theta)\,y}{\sinh\theta}
                  = \cosh(t\theta)\,x + \sinh(t\theta)\,\frac{u}{\sinh\theta},
        \qquad u = y + \frac{\langle x, y\rangle_L}{k}\,x,

    i.e. :math:`\exp_x(t\log_x y)`: the hyperboloid cut by the plane through the origin of
    :math:`\mathbb{R}^{d+1}` spanned by :math:`x` and :math:`y`.  Consecutive samples are
    :math:`d(x, y)/(n - 1)` apart; :math:`\gamma(0) = x` and :math:`\gamma(1) = y` exactly.  The
    sinh ratios are evaluated without overflow (:math:`d(x, y)` up to hundreds of :math:`\sqrt{k}`)
    and the time coordinate is recomputed with :func:`lift`, so every sample lies on the hyperboloid
    to rounding.  ``x == y`` gives ``n`` copies of ``x``.

    Parameters
    ----------
    x, y : array or tensor, shape (..., d + 1)
        Points on :math:`\langle x, x\rangle_L = -k` (checked by :func:`check_points`), time first;
        their batch shapes broadcast.  One dtype (float32 or float64) and device.
    n : int, default 64
        Number of samples, :math:`\ge 2`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    torch.Tensor
        Shape ``(..., n, d + 1)``, dtype and device of the inputs.

    Raises
    ------
    ValueError
        When ``n`` is not an integer :math:`\ge 2` or the points fail :func:`check_points`.

    Examples
    --------
    >>> from hypviz.lorentz import dist, geodesic, lift
    >>> x, y = lift([[0.0, 0.0], [2.0, 2.0]], k=1.0)
    >>> g = geodesic(x, y, n=5, k=1.0)
    >>> g.shape, bool((g[0] == x).all() and (g[-1] == y).all())
    (torch.Size([5, 3]), True)
    >>> (dist(g[:-1], g[1:], k=1.0) / dist(x, y, k=1.0)).round(decimals=6).tolist()    # constant speed
    [0.25, 0.25, 0.25, 0.25]
    """
    kf = check_k(k)
    m = validate.integer(n, "n", 2, " (samples along a geodesic)")
    a = check_points(x, k=kf, name="x")
    b = check_points(y, k=kf, name="y")
    check_pair(a, b)
    a, b = torch.broadcast_tensors(a, b)
    sq = sqdist_unchecked(a, b, k=kf)
    positive = sq > 0  # no sqrt'(0) = inf in the graph: at x = y the gradient is finite (the ratios are even in theta)
    root = torch.where(positive, torch.sqrt(torch.where(positive, sq, torch.ones_like(sq))), torch.zeros_like(sq))
    theta = (2.0 * torch.asinh(root / (2.0 * math.sqrt(kf))))[..., None, None]
    t = torch.linspace(0.0, 1.0, m, dtype=a.dtype, device=a.device)[:, None]
    pts = _sinh_ratio(1.0 - t, theta) * a[..., None, :] + _sinh_ratio(t, theta) * b[..., None, :]
    out = lift(pts[..., 1:], k=kf)
    out[..., 0, :] = a
    out[..., -1, :] = b
    return out
