r"""High-precision references (mpmath): the ground truth the float computations are measured against.

Each function takes exact float inputs (a float converts to an mpmath number without rounding) and
evaluates a formula at ``dps`` significant digits, with enough digits to spare that the result is
correct to far below float64's rounding:

* :func:`kl_supremum_mpmath`: the exact KL supremum :math:`K(\Delta)` (the reference for
  :func:`hypviz.attention.kl_supremum`; the derivation :func:`hypviz.symbolic.kl_supremum` uses it too);
* :func:`sqdist_mpmath` and :func:`distances_mpmath`: the squared Lorentzian distance (and the
  geodesic distance) of lifted points (the references of notebook 02's accuracy study,
  :func:`hypviz.attention.comparison.accuracy.sqdist_accuracy`, and of ``tests/test_lorentz_oracle.py``).

No torch: numpy and mpmath only.
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np

__all__ = ["kl_supremum_mpmath", "sqdist_mpmath", "distances_mpmath", "FORMULAS"]

#: The routes :func:`sqdist_mpmath` and :func:`distances_mpmath` can take (see :func:`sqdist_mpmath`).
FORMULAS = ("stable", "textbook")


def kl_supremum_mpmath(delta: Any, dps: int = 50) -> Any:
    r"""The exact KL supremum at ``dps`` digits (an mpmath number); 0 at :math:`\Delta = 0`.

    .. math::

        K(\Delta) = \log\frac{e^\Delta - 1}{\Delta} - 1 + \frac{\Delta}{e^\Delta - 1}

    The reference for :func:`hypviz.attention.kl_supremum` (float64).  Extra working digits make
    up for the cancellation at small :math:`\Delta` (the value is about :math:`\Delta^2/8`).

    Raises
    ------
    ValueError
        When :math:`\Delta < 0`.
    """
    with mpmath.workdps(dps):
        x = mpmath.mpf(delta)
    if x < 0:
        raise ValueError(f"the bias spread Delta must be >= 0, got {delta!r}")
    if x == 0:
        return mpmath.mpf(0)
    extra = 10 + max(0, int(-mpmath.log10(x)))
    with mpmath.workdps(dps + 2 * extra):
        x = mpmath.mpf(delta)
        e1 = mpmath.expm1(x)
        value = mpmath.log(e1 / x) - 1 + x / e1
    with mpmath.workdps(dps):
        return +value


def _spatial_pairs(xs: Any, ys: Any, formula: str) -> tuple[list[list[float]], list[list[float]]]:
    """``xs``, ``ys`` as two lists of rows of Python floats (exact), after checking shapes and ``formula``."""
    if formula not in FORMULAS:
        raise ValueError(f"formula must be one of {FORMULAS}, got {formula!r}")
    xs = np.asarray(xs)
    ys = np.asarray(ys)
    if xs.shape != ys.shape or xs.ndim != 2:
        raise ValueError(f"expected two (N, d) arrays of spatial parts of one shape, got {xs.shape} and {ys.shape}")
    return xs.tolist(), ys.tolist()


def _pair_sqdist(a: list[Any], b: list[Any], kk: Any, formula: str) -> tuple[Any, Any]:
    """``(|x - y|^2_L, <x, y>_L)`` of the lifts of ``a``, ``b`` (lists of mpf) at the working precision."""
    na = mpmath.fsum(v * v for v in a)
    nb = mpmath.fsum(v * v for v in b)
    ta, tb = mpmath.sqrt(na + kk), mpmath.sqrt(nb + kk)
    if formula == "textbook":
        ip = -ta * tb + mpmath.fsum(u * w for u, w in zip(a, b))
        return -2 * kk - 2 * ip, ip
    es = mpmath.fsum((u - w) ** 2 for u, w in zip(a, b))
    dt = (na - nb) / (ta + tb)
    return es - dt * dt, None


def sqdist_mpmath(xs: np.ndarray, ys: np.ndarray, *, k: float = 1.0, dps: int = 50, formula: str = "stable") -> list[Any]:
    r"""Reference :math:`\|x - y\|_L^2` at ``dps`` digits from the exact float values of the spatial parts.

    ``xs``, ``ys`` are ``(N, d)`` arrays of spatial parts; the time coordinates are recomputed at
    high precision, :math:`x_t = \sqrt{\|x_s\|^2 + k}` with ``k`` the float it is given as.
    ``formula="stable"`` (the default) uses identity 3, so that nothing cancels:

    .. math::

        \|x - y\|_L^2 = \|x_s - y_s\|^2 - \Bigl(\frac{\|x_s\|^2 - \|y_s\|^2}{x_t + y_t}\Bigr)^2;

    ``formula="textbook"`` uses identity 1, :math:`-2k - 2\langle x, y\rangle_L`, a different route
    (for checking a stable implementation against something other than itself) that cancels: for
    nearby points far from the origin it loses about
    :math:`\log_{10}(x_t^2 / \|x - y\|_L^2)` of the ``dps`` digits.

    Returns a list of ``N`` mpf numbers.

    Raises
    ------
    ValueError
        When ``xs`` and ``ys`` are not two ``(N, d)`` arrays of one shape, or for an unknown ``formula``.
    """
    rows_x, rows_y = _spatial_pairs(xs, ys, formula)
    out = []
    with mpmath.workdps(dps):
        kk = mpmath.mpf(float(k))
        for a, b in zip(rows_x, rows_y):
            sq, _ = _pair_sqdist([mpmath.mpf(v) for v in a], [mpmath.mpf(v) for v in b], kk, formula)
            out.append(+sq)
    return out


def distances_mpmath(
    xs: np.ndarray, ys: np.ndarray, *, k: float = 1.0, dps: int = 50, formula: str = "stable"
) -> tuple[list[Any], list[Any]]:
    r"""Reference squared distances and geodesic distances at ``dps`` digits, in one pass over the pairs.

    Inputs and ``formula`` as in :func:`sqdist_mpmath`, whose squared distances are the first list.
    The geodesic distance is identity 2 through the squared distance (``"stable"``) or the
    definition through the inner product (``"textbook"``):

    .. math::

        d = 2\sqrt{k}\,\operatorname{arsinh}\frac{\|x - y\|_L}{2\sqrt{k}}
        \quad\text{or}\quad
        d = \sqrt{k}\,\operatorname{arcosh}\Bigl(-\frac{\langle x, y\rangle_L}{k}\Bigr).

    Returns two lists of ``N`` mpf numbers: :math:`\|x - y\|_L^2` and :math:`d`.

    Raises
    ------
    ValueError
        As :func:`sqdist_mpmath`.
    """
    rows_x, rows_y = _spatial_pairs(xs, ys, formula)
    sqs, dists = [], []
    with mpmath.workdps(dps):
        kk = mpmath.mpf(float(k))
        rk = mpmath.sqrt(kk)
        for a, b in zip(rows_x, rows_y):
            sq, ip = _pair_sqdist([mpmath.mpf(v) for v in a], [mpmath.mpf(v) for v in b], kk, formula)
            sqs.append(+sq)
            if formula == "textbook":
                dists.append(rk * mpmath.acosh(-ip / kk))
            else:
                dists.append(2 * rk * mpmath.asinh(mpmath.sqrt(max(sq, 0)) / (2 * rk)))
    return sqs, dists
