r"""Input turned into points of the Lorentz model, or a clear one-line error.

:func:`as_tensor` keeps the dtype of arrays and tensors and refuses integers, booleans and complex
numbers; :func:`check_k` the curvature parameter :math:`k > 0`; :func:`check_points` that every
row lies on :math:`\langle x, x\rangle_L = -k` (upper sheet, finite), and when it does not, says
why: another :math:`k` shared by every point, a time coordinate stored last, or the spatial parts
given instead of points.  Public through :mod:`hypviz.lorentz`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from hypviz.base import validate

__all__ = ["as_tensor", "check_k", "check_points"]

ArrayLike = Any  # numpy array, torch tensor, or a nested list of floats


def as_tensor(x: ArrayLike, name: str = "x") -> torch.Tensor:
    """Return ``x`` as a floating-point torch tensor without changing its dtype.

    numpy arrays keep their dtype (``float64`` stays ``float64``; a big-endian array is read in the native
    byte order, same values); nested lists go through ``numpy.asarray``; a tensor is returned as it is.
    ``name`` names ``x`` in the error message.

    Parameters
    ----------
    x : array, tensor or nested list of floats
        The values, any shape; float16, float32 or float64 (a tensor may be any floating dtype).
    name : str, default "x"
        What ``x`` is called in the error message.

    Returns
    -------
    torch.Tensor
        ``x`` with its dtype; a tensor is not copied, a C-contiguous writeable float array shares its memory.

    Raises
    ------
    TypeError
        For integer, boolean, complex, long double, string, bytes, date and time, record or object inputs,
        anything ``numpy.asarray`` cannot read, and tensors that hold no dense data: meta tensors (a shape
        without values), sparse and nested tensors.

    Examples
    --------
    >>> from hypviz.lorentz import as_tensor
    >>> as_tensor([[1.0, 2.0]]).dtype
    torch.float64
    >>> as_tensor([True, False])
    Traceback (most recent call last):
        ...
    TypeError: x: expected a floating-point array (float32 or float64), got dtype torch.bool
    """
    if isinstance(x, torch.Tensor):
        t = x
        problem = _not_dense(t)
        if problem:
            raise TypeError(f"{name}: expected a dense tensor of coordinates, got {problem}")
    else:
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"{name}: expected a numpy array or torch tensor, got {type(x).__name__}") from exc
        if arr.dtype == object:
            raise TypeError(f"{name}: expected a numeric array, got an array of Python objects")
        problem = _NUMPY_KINDS.get(arr.dtype.kind)
        if problem:
            raise TypeError(f"{name}: expected a floating-point array (float32 or float64), "
                            f"got dtype {str(arr.dtype)[:80]} ({problem})")
        if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
            raise TypeError(
                f"{name}: expected a floating-point array (float32 or float64), got dtype {arr.dtype} (long double, "
                f"which torch does not hold); pass {name}.astype(numpy.float64)"
            )
        if not arr.dtype.isnative:  # big-endian floats: the same values in the native byte order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if not (arr.flags.c_contiguous and arr.flags.writeable):
            arr = np.array(arr, order="C")  # torch needs positive strides and warns on read-only arrays
        t = torch.from_numpy(arr)
    if not t.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point array (float32 or float64), got dtype {t.dtype}")
    return t


_NUMPY_KINDS = {  # numpy dtypes that hold no numbers: named in as_tensor's message
    "U": "strings", "S": "bytes", "M": "dates and times", "m": "time differences", "V": "raw bytes or records",
}


def _not_dense(t: torch.Tensor) -> str | None:
    """What keeps ``t`` from being read as coordinates, in words (a meta, sparse or nested tensor), or None."""
    if getattr(t, "is_nested", False):
        return "a nested tensor"
    if t.layout != torch.strided:
        return f"a sparse tensor (layout {t.layout}); pass x.to_dense()"
    if t.is_meta:
        return "a meta tensor (a shape without values)"
    return None


def check_k(k: float) -> float:
    r"""Return the curvature parameter ``k`` as a Python float, or raise if it is not a number > 0.

    ``k`` is a fixed number here (as in Hypformer's code): a tensor that requires grad is refused
    rather than silently detached, and so is a bool.

    Parameters
    ----------
    k : float or 0-d tensor
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.

    Returns
    -------
    float
        ``k`` as a Python float.

    Raises
    ------
    ValueError
        When ``k`` is not a finite number :math:`> 0`, is a bool, or is a tensor that requires grad.

    Examples
    --------
    >>> from hypviz.lorentz import check_k
    >>> check_k(2)
    2.0
    >>> check_k(-1.0)
    Traceback (most recent call last):
        ...
    ValueError: k must be a positive finite number (<x,x>_L = -k, curvature -1/k), got -1.0
    """
    if isinstance(k, torch.Tensor) and k.requires_grad:
        raise ValueError(
            "k is a tensor that requires grad; hypviz treats the curvature parameter as a fixed number "
            "(no gradient flows to it): pass float(k) or k.detach()"
        )
    return validate.positive(k, "k", " (<x,x>_L = -k, curvature -1/k)")


def check_last_dim(x: torch.Tensor, name: str, minimum: int = 2) -> None:
    if x.dim() == 0 or x.shape[-1] < minimum:
        got = "a scalar" if x.dim() == 0 else f"shape {tuple(x.shape)}"
        what = "(..., d + 1) with d >= 1 (time coordinate first)" if minimum == 2 else "(..., d) with d >= 1"
        raise ValueError(f"{name}: expected {what}, got {got}")


def check_pair(x: torch.Tensor, y: torch.Tensor, names: tuple[str, str] = ("x", "y"), core: int = 1) -> None:
    # ``core`` trailing axes are the point axes (1: (..., d + 1); 2: (..., N, d + 1)); the rest must broadcast.
    a, b = names
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(
            f"{a} and {b} have different numbers of coordinates: {a} is {tuple(x.shape)}, {b} is {tuple(y.shape)}"
        )
    try:
        torch.broadcast_shapes(x.shape[:-core], y.shape[:-core])
    except RuntimeError:
        raise ValueError(
            f"{a} and {b} have batch shapes that do not broadcast: {a} is {tuple(x.shape)}, {b} is {tuple(y.shape)}"
        ) from None
    if x.dtype != y.dtype:
        raise TypeError(f"{a} is {x.dtype} but {b} is {y.dtype}; convert one of them so both dtypes match")
    if x.device != y.device:
        raise ValueError(f"{a} is on {x.device} but {b} is on {y.device}; move both to one device")


def _default_rtol(dtype: torch.dtype) -> float:
    if dtype == torch.float64:
        return 1e-10
    if dtype == torch.float32:
        return 1e-5
    return 1e-2  # float16 / bfloat16


def row_name(flat_index: int, batch_shape: torch.Size) -> str:
    if len(batch_shape) == 0:
        return "the point"
    idx = tuple(int(i) for i in np.unravel_index(flat_index, tuple(batch_shape)))
    return f"row {idx[0]}" if len(idx) == 1 else f"row {idx}"


def check_points(
    x: ArrayLike, *, k: float = 1.0, atol: float | None = None, rtol: float | None = None, name: str = "x"
) -> torch.Tensor:
    r"""Validate points on the upper sheet of :math:`\langle x, x\rangle_L = -k`; return them as a tensor.

    A point passes when it is finite and

    .. math::

        x_t > 0, \qquad
        \bigl|\langle x, x\rangle_L + k\bigr| \le \mathrm{atol} + \mathrm{rtol}\,(x_t^2 + \|x_s\|^2).

    Parameters
    ----------
    x : array or tensor, shape (..., d + 1)
        The points, time first, :math:`d \ge 1`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    atol, rtol : float, optional
        Tolerances; default ``rtol = 1e-5`` (float32) or ``1e-10`` (float64) and ``atol = rtol * k``.
    name : str, default "x"
        What the points are called in the error message.

    Returns
    -------
    torch.Tensor
        ``x`` as a tensor (same dtype; not copied when it already is one).

    Raises
    ------
    ValueError
        Naming the worst row and its :math:`\langle x, x\rangle_L` when points are off the
        hyperboloid or on the lower sheet, hold NaN/Inf or have fewer than 2 coordinates, or when
        :math:`k \le 0`.  The message guesses the cause (another ``k``, time stored last, spatial parts).

    Examples
    --------
    >>> from hypviz.lorentz import check_points, lift
    >>> check_points(lift([[0.5, 0.0]], k=2.0), k=2.0).shape
    torch.Size([1, 3])
    >>> check_points([[1.0, 0.5, 0.0]], k=2.0)
    Traceback (most recent call last):
        ...
    ValueError: x: points are off the hyperboloid <x,x>_L = -k (k=2): worst is row 0 with <x,x>_L = -0.75 ...: pass k=0.75 ...
    """
    kf = check_k(k)
    t = as_tensor(x, name)
    check_last_dim(t, name)
    batch = t.shape[:-1]
    if t.numel() == 0:
        return t
    flat = t.detach().reshape(-1, t.shape[-1])
    rtol_ = _default_rtol(t.dtype) if rtol is None else validate.number(rtol, "rtol", minimum=0.0)
    atol_ = rtol_ * kf if atol is None else validate.number(atol, "atol", minimum=0.0)
    # block by block (a few MiB each): no temporary of the size of the whole input
    step = max(1, _CHECK_BLOCK // flat.shape[-1])
    worst, worst_excess = -1, -math.inf
    for i in range(0, flat.shape[0], step):
        block = flat[i : i + step]
        finite = torch.isfinite(block).all(dim=-1)
        if not bool(finite.all()):
            bad = i + int((~finite).nonzero()[0, 0])
            raise ValueError(f"{name}: {row_name(bad, batch)} holds NaN or Inf: {flat[bad].tolist()[:6]}")
        excess, _ = _excess(block, kf, atol_, rtol_)
        j = int(torch.argmax(excess))
        if float(excess[j]) > worst_excess:
            worst, worst_excess = i + j, float(excess[j])
    if worst_excess > 0:
        _, lorentz_norm = _excess(flat[worst : worst + 1], kf, atol_, rtol_)
        raise ValueError(
            f"{name}: points are off the hyperboloid <x,x>_L = -k (k={kf:g}): worst is {row_name(worst, batch)} "
            f"with <x,x>_L = {float(lorentz_norm[0]):.10g} (tolerance {atol_:.1e} + {rtol_:.1e}*|x|^2); "
            + _diagnose(flat, rtol_)
        )
    time = flat[:, 0]
    if not bool((time > 0).all()):
        bad = int((time <= 0).nonzero()[0, 0])
        raise ValueError(
            f"{name}: {row_name(bad, batch)} is on the lower sheet (x_t = {float(time[bad]):.6g} <= 0); "
            f"expected the upper sheet x_t > 0 (time coordinate first)"
        )
    return t


_CHECK_BLOCK = 1 << 21  # values per block of check_points


def _excess(block: torch.Tensor, kf: float, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: how far ``|<x,x>_L + k|`` exceeds the tolerance (> 0: off the hyperboloid), and ``<x,x>_L``."""
    time = block[:, 0]
    sq_s = (block[:, 1:] ** 2).sum(dim=-1)
    lorentz_norm = sq_s - time**2
    residual = (lorentz_norm + kf).abs()
    excess = residual - (atol + rtol * (time**2 + sq_s))
    return torch.nan_to_num(excess, nan=math.inf), lorentz_norm  # squares that overflow (inf - inf) are refused


def _shared_level(time: torch.Tensor, sq_s: torch.Tensor, rtol: float) -> float | None:
    """``c`` when every point satisfies ``<x, x>_L = -c`` for one ``c > 0`` (to the tolerance), else None."""
    level = time**2 - sq_s
    c = float(level.double().median())
    if not (math.isfinite(c) and c > 0):
        return None
    ok = (level - c).abs() <= rtol * (c + time**2 + sq_s)
    return c if bool(ok.all()) and bool((time > 0).all()) else None


def _diagnose(flat: torch.Tensor, rtol: float) -> str:
    """What the points probably are, for the error message: another k, time stored last, or spatial parts."""
    sq = flat**2
    c = _shared_level(flat[:, 0], sq[:, 1:].sum(dim=-1), rtol)
    if c is not None:
        return f"every point lies on <x,x>_L = -{c:.6g}: pass k={c:.6g} (hypviz compare: --k {c:.6g})"
    c = _shared_level(flat[:, -1], sq[:, :-1].sum(dim=-1), rtol)
    if c is not None:
        return (
            f"the LAST coordinate looks like the time coordinate (<x,x>_L = -{c:.6g} with it): hypviz expects time "
            "first, so move it to the front, e.g. torch.cat([x[..., -1:], x[..., :-1]], -1)"
        )
    return "lift spatial parts with hypviz.lorentz.lift(x_s, k=k)"
