"""Unit tests for hypviz.lorentz: values, shapes, dtypes, devices and error messages.

Reference values are computed here independently with numpy in float64 from the
formulas of identities 1-3; the accuracy against mpmath is in test_lorentz_oracle.py and
the identities over random inputs in test_lorentz_properties.py.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from hypviz import lorentz as L

DTYPES = [(np.float32, torch.float32), (np.float64, torch.float64)]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def np_lift(xs: np.ndarray, k: float) -> np.ndarray:
    xs = np.asarray(xs, dtype=np.float64)
    return np.concatenate([np.sqrt((xs**2).sum(-1, keepdims=True) + k), xs], axis=-1)


def np_inner(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return -x[..., 0] * y[..., 0] + (x[..., 1:] * y[..., 1:]).sum(-1)


def points(shape: tuple[int, ...], d: int, k: float = 1.0, scale: float = 1.0, seed: int = 0,
           dtype=np.float64) -> np.ndarray:
    """Lifted points (time first) as a numpy array of ``dtype``, shape ``shape + (d + 1,)``."""
    xs = (scale * rng(seed).standard_normal(shape + (d,))).astype(dtype)
    return L.lift(xs, k=k).numpy()


def raises_one_line(exc: type[Exception], match: str, fn, *args, **kwargs) -> str:
    """Assert ``fn(*args)`` raises ``exc`` whose message matches ``match`` and is a single line."""
    with pytest.raises(exc, match=match) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg, f"error message spans several lines: {msg!r}"
    assert len(msg) < 400, f"error message too long: {msg!r}"
    return msg


# --------------------------------------------------------------------------- #
# numpy in -> torch out, dtype preserved, for every public function
# --------------------------------------------------------------------------- #
def _calls(dtype):
    """(name, callable) pairs for every public function, fed numpy arrays of ``dtype``."""
    k = 2.0
    x = points((4,), 3, k, seed=1, dtype=dtype)
    y = points((4,), 3, k, seed=2, dtype=dtype)
    xs = rng(3).standard_normal((4, 3)).astype(dtype)
    u = np.concatenate([np.zeros((4, 1), dtype), xs], axis=-1)
    p = (0.3 * xs / np.linalg.norm(xs, axis=-1, keepdims=True)).astype(dtype)
    return [
        ("lift", lambda: L.lift(xs, k=k)),
        ("inner", lambda: L.inner(x, y)),
        ("sqdist", lambda: L.sqdist(x, y, k=k)),
        ("dist", lambda: L.dist(x, y, k=k)),
        ("pairwise_inner", lambda: L.pairwise_inner(x, y)),
        ("pairwise_sqdist", lambda: L.pairwise_sqdist(x, y, k=k)),
        ("expmap0", lambda: L.expmap0(u, k=k)),
        ("logmap0", lambda: L.logmap0(x, k=k)),
        ("to_poincare", lambda: L.to_poincare(x, k=k)),
        ("from_poincare", lambda: L.from_poincare(p, k=k)),
        ("to_klein", lambda: L.to_klein(x, k=k)),
        ("from_klein", lambda: L.from_klein(p, k=k)),
        ("check_points", lambda: L.check_points(x, k=k)),
        ("as_tensor", lambda: L.as_tensor(x)),
        ("geodesic", lambda: L.geodesic(x, y, 5, k=k)),
    ]


@pytest.mark.parametrize("np_dtype,torch_dtype", DTYPES)
def test_numpy_in_torch_out_dtype_preserved(np_dtype, torch_dtype):
    for name, call in _calls(np_dtype):
        out = call()
        assert isinstance(out, torch.Tensor), name
        assert out.dtype == torch_dtype, f"{name}: {np_dtype.__name__} in, {out.dtype} out"
        assert out.device.type == "cpu", name
        assert torch.isfinite(out).all(), name


@pytest.mark.parametrize("torch_dtype", [torch.float32, torch.float64])
def test_torch_in_keeps_dtype(torch_dtype):
    xs = torch.randn(5, 4, dtype=torch_dtype, generator=torch.Generator().manual_seed(0))
    x = L.lift(xs)
    for out in (x, L.inner(x, x), L.sqdist(x, x[:1]), L.dist(x, x[:1]), L.pairwise_sqdist(x, x),
                L.logmap0(x), L.to_poincare(x), L.to_klein(x)):
        assert out.dtype == torch_dtype


def test_origin():
    for k in (0.25, 1.0, 3.0):
        o = L.origin(4, k=k)
        assert o.shape == (5,) and o.dtype == torch.float64
        assert o[0].item() == pytest.approx(math.sqrt(k), rel=1e-15)
        assert (o[1:] == 0).all()
        assert L.inner(o, o).item() == pytest.approx(-k, rel=1e-15)
        L.check_points(o, k=k)
    assert L.origin(2, dtype=torch.float32).dtype == torch.float32
    for bad in (0, -1, 2.5):
        raises_one_line(ValueError, r"d must be a positive integer", L.origin, bad)
    raises_one_line(ValueError, r"k must be a positive", L.origin, 3, k=0.0)


# --------------------------------------------------------------------------- #
# values
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("k", [0.3, 1.0, 4.0])
def test_lift_values_and_shape(k):
    xs = rng(0).standard_normal((2, 3, 5, 6))
    x = L.lift(xs, k=k)
    assert x.shape == (2, 3, 5, 7)
    np.testing.assert_array_equal(x[..., 1:].numpy(), xs)  # spatial part untouched
    np.testing.assert_allclose(x.numpy(), np_lift(xs, k), rtol=1e-15)
    np.testing.assert_allclose(L.inner(x, x).numpy(), -k, rtol=1e-12)
    assert L.lift([[0.0, 0.0]], k=k)[0, 0].item() == pytest.approx(math.sqrt(k), rel=1e-15)  # nested list works


def test_inner_values_and_broadcasting():
    x = rng(0).standard_normal((2, 1, 5))
    y = rng(1).standard_normal((3, 5))
    got = L.inner(x, y)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got.numpy(), np_inner(x, y), rtol=1e-13)
    # bilinear with J = diag(-1, 1, ..., 1)
    J = np.diag([-1.0, 1, 1, 1, 1])
    np.testing.assert_allclose(got.numpy(), np.einsum("aci,ij,bj->ab", x, J, y), rtol=1e-12)


@pytest.mark.parametrize("k", [0.2, 1.0, 5.0])
def test_sqdist_and_dist_values(k):
    x = points((6,), 4, k, scale=2.0, seed=1)
    y = points((6,), 4, k, scale=2.0, seed=2)
    textbook = -2 * k - 2 * np_inner(x, y)  # well-separated points: no cancellation worth mentioning
    np.testing.assert_allclose(L.sqdist(x, y, k=k).numpy(), textbook, rtol=1e-10)
    d_ref = math.sqrt(k) * np.arccosh(-np_inner(x, y) / k)
    np.testing.assert_allclose(L.dist(x, y, k=k).numpy(), d_ref, rtol=1e-10)


@pytest.mark.parametrize("k", [0.2, 1.0, 5.0])
def test_dist_from_origin_is_radial_arsinh(k):
    # the geodesic from the origin to lift(r e) has length sqrt(k) arsinh(r / sqrt(k))
    r = np.array([0.0, 1e-8, 1e-3, 0.5, 3.0, 20.0])
    xs = np.zeros((r.size, 3))
    xs[:, 1] = r
    got = L.dist(L.origin(3, k=k), L.lift(xs, k=k), k=k)
    np.testing.assert_allclose(got.numpy(), math.sqrt(k) * np.arcsinh(r / math.sqrt(k)), rtol=1e-12, atol=0)


@pytest.mark.parametrize("np_dtype,torch_dtype", DTYPES)
def test_sqdist_self_zero_symmetric_nonnegative(np_dtype, torch_dtype):
    x = points((50,), 8, 1.0, scale=5.0, seed=4, dtype=np_dtype)
    y = points((50,), 8, 1.0, scale=5.0, seed=5, dtype=np_dtype)
    assert (L.sqdist(x, x) == 0).all()
    assert (L.dist(x, x) == 0).all()
    assert torch.equal(L.sqdist(x, y), L.sqdist(y, x))
    assert (L.sqdist(x, y) > 0).all()


def test_sqdist_batch_shapes_and_broadcasting():
    k = 1.5
    x = points((2, 3, 5), 4, k, seed=0)
    y = points((3, 1), 4, k, seed=1)
    got = L.sqdist(x, y, k=k)
    assert got.shape == (2, 3, 5)
    xb, yb = np.broadcast_arrays(x, y)
    ref = L.sqdist(xb.reshape(-1, 5), yb.reshape(-1, 5), k=k).reshape(2, 3, 5)
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert L.dist(x, y, k=k).shape == (2, 3, 5)
    assert L.sqdist(x[0, 0, 0], y[0, 0], k=k).shape == ()  # single points give a scalar


@pytest.mark.parametrize("np_dtype,torch_dtype", DTYPES)
def test_pairwise_equals_broadcast(np_dtype, torch_dtype):
    k = 0.7
    x = points((2, 3, 6), 5, k, scale=1.5, seed=0, dtype=np_dtype)  # (..., N, d + 1)
    y = points((2, 3, 4), 5, k, scale=1.5, seed=1, dtype=np_dtype)  # (..., M, d + 1)
    pin = L.pairwise_inner(x, y)
    psq = L.pairwise_sqdist(x, y, k=k)
    assert pin.shape == psq.shape == (2, 3, 6, 4)
    assert pin.dtype == psq.dtype == torch_dtype
    bin_ = L.inner(x[..., :, None, :], y[..., None, :, :])
    bsq = L.sqdist(x[..., :, None, :], y[..., None, :, :], k=k)
    # the Gram-matrix form has an absolute error of a few ulps of |x|^2 + |y|^2 (see its docstring)
    eps = torch.finfo(torch_dtype).eps
    xt, yt = torch.from_numpy(x[..., 0]), torch.from_numpy(y[..., 0])
    scale = (xt[..., :, None] ** 2 + yt[..., None, :] ** 2) * 2
    assert ((pin - bin_).abs() <= 16 * eps * scale).all()
    assert ((psq - bsq).abs() <= 16 * eps * scale).all()
    assert (psq >= 0).all()
    # batch dims broadcast like matmul: (2, 3, N) against (M,)
    assert L.pairwise_sqdist(x, y[0, 0], k=k).shape == (2, 3, 6, 4)
    assert L.pairwise_inner(x[0, 0], y).shape == (2, 3, 6, 4)


def test_pairwise_sqdist_diagonal_is_small():
    x = points((30,), 6, 1.0, scale=3.0, seed=2)
    p = L.pairwise_sqdist(x, x)
    x_t = torch.from_numpy(x[:, 0])
    assert (p.diagonal() <= 16 * 2.2e-16 * 2 * x_t**2).all()
    torch.testing.assert_close(p, p.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_expmap0_values(k):
    us = rng(0).standard_normal((7, 3)) * np.array([[0.0], [1e-9], [1e-3], [0.5], [2.0], [5.0], [10.0]])
    u = np.concatenate([np.zeros((7, 1)), us], axis=-1)
    x = L.expmap0(u, k=k)
    n = np.linalg.norm(us, axis=-1, keepdims=True)
    rk = math.sqrt(k)
    with np.errstate(invalid="ignore", divide="ignore"):
        xs_ref = np.where(n > 0, rk * np.sinh(n / rk) * us / n, 0.0)
    np.testing.assert_allclose(x[:, 1:].numpy(), xs_ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(x[:, 0].numpy(), rk * np.cosh(n[:, 0] / rk), rtol=1e-12)
    torch.testing.assert_close(x[0], L.origin(3, k=k), rtol=4e-16, atol=0)  # u = 0 goes to the origin
    assert (x[0, 1:] == 0).all()
    # the distance from the origin is the tangent norm
    np.testing.assert_allclose(L.dist(L.origin(3, k=k), x, k=k).numpy(), n[:, 0], rtol=1e-11, atol=1e-300)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_logmap0_values_and_inverse(k):
    xs = rng(1).standard_normal((2, 5, 4)) * 3
    x = L.lift(xs, k=k)
    u = L.logmap0(x, k=k)
    assert u.shape == (2, 5, 5)
    assert (u[..., 0] == 0).all()
    n = np.linalg.norm(xs, axis=-1, keepdims=True)
    rk = math.sqrt(k)
    np.testing.assert_allclose(u[..., 1:].numpy(), rk * np.arcsinh(n / rk) * xs / n, rtol=1e-12)
    torch.testing.assert_close(L.expmap0(u, k=k), x, rtol=1e-12, atol=1e-12)
    assert (L.logmap0(L.origin(4, k=k), k=k) == 0).all()


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_poincare_and_klein(k):
    xs = rng(2).standard_normal((3, 4, 2)) * 4
    x = L.lift(xs, k=k)
    xn = x.numpy()
    rk = math.sqrt(k)
    p = L.to_poincare(x, k=k)
    q = L.to_klein(x, k=k)
    assert p.shape == q.shape == (3, 4, 2)
    np.testing.assert_allclose(p.numpy(), rk * xs / (xn[..., :1] + rk), rtol=1e-13)
    np.testing.assert_allclose(q.numpy(), rk * xs / xn[..., :1], rtol=1e-13)
    assert (p.norm(dim=-1) < rk).all() and (q.norm(dim=-1) < rk).all()
    # Klein from Poincare: K = 2k p / (k + |p|^2)
    p2 = (p * p).sum(-1, keepdim=True)
    torch.testing.assert_close(q, 2 * k * p / (k + p2), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(L.from_poincare(p, k=k), x, rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(L.from_klein(q, k=k), x, rtol=1e-11, atol=1e-12)
    # the centre of the disk is the origin
    torch.testing.assert_close(L.from_poincare(np.zeros(2), k=k), L.origin(2, k=k))
    torch.testing.assert_close(L.from_klein(np.zeros(2), k=k), L.origin(2, k=k))


def test_check_points_accepts_and_returns_tensor():
    x = points((3, 4), 5, 2.0, scale=10.0)
    t = L.check_points(x, k=2.0)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.shape == (3, 4, 6)
    assert L.check_points(np.zeros((0, 3)), k=1.0).shape == (0, 3)
    # a loose tolerance accepts what the default refuses
    off = x.copy()
    off[1, 2, 0] *= 1 + 1e-6
    raises_one_line(ValueError, r"off the hyperboloid", L.check_points, off, k=2.0)
    L.check_points(off, k=2.0, rtol=1e-5)


# --------------------------------------------------------------------------- #
# bad input -> one-line, specific errors
# --------------------------------------------------------------------------- #
def test_check_points_names_worst_row_and_its_norm():
    x = points((6,), 3, 1.0, seed=3)
    x[2, 0] *= 1.01
    x[4, 0] *= 1.5  # the worst
    ip = float(np_inner(x[4], x[4]))
    msg = raises_one_line(ValueError, r"off the hyperboloid.*worst is row 4 ", L.check_points, x)
    m = re.search(r"with <x,x>_L = (-?[0-9.e+-]+) ", msg)
    assert m and float(m.group(1)) == pytest.approx(ip, rel=1e-8)


def test_check_points_batched_row_index():
    x = points((2, 3), 2, 1.0, seed=4)
    x[1, 2, 1] += 0.5
    raises_one_line(ValueError, r"worst is row \(1, 2\)", L.check_points, x)
    raises_one_line(ValueError, r"off the hyperboloid", L.check_points, np.array([2.0, 0.0, 0.0]))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_points_nan_inf(bad):
    x = points((5,), 3, 1.0, seed=5)
    x[3, 2] = bad
    raises_one_line(ValueError, r"row 3 holds NaN or Inf", L.check_points, x)


def test_check_points_overflowing_squares_are_refused():
    x = np.array([[3e20, 3e20, 0.0]], dtype=np.float32)  # x_t^2 overflows float32
    raises_one_line(ValueError, r"off the hyperboloid", L.check_points, x)


def test_check_points_too_few_coordinates_and_lower_sheet():
    raises_one_line(ValueError, r"expected \(\.\.\., d \+ 1\) with d >= 1.*got shape \(4, 1\)",
                    L.check_points, np.ones((4, 1)))
    raises_one_line(ValueError, r"got a scalar", L.check_points, np.float64(1.0))
    x = points((4,), 2, 1.0, seed=6)
    x[1] *= -1
    raises_one_line(ValueError, r"row 1 is on the lower sheet", L.check_points, x)


@pytest.mark.parametrize("k", [0.0, -1.0, float("nan"), float("inf"), "one", None])
def test_bad_k_everywhere(k):
    x = points((3,), 2)
    xs = x[:, 1:].copy()
    for fn, args in ((L.check_points, (x,)), (L.lift, (xs,)), (L.sqdist, (x, x)), (L.dist, (x, x)),
                     (L.pairwise_sqdist, (x, x)), (L.expmap0, (np.zeros((3, 3)),)), (L.logmap0, (x,)),
                     (L.to_poincare, (x,)), (L.from_poincare, (0.1 * xs,)), (L.to_klein, (x,)),
                     (L.from_klein, (0.1 * xs,))):
        raises_one_line(ValueError, r"k must be a positive", fn, *args, k=k)


def test_integer_and_object_inputs_refused():
    raises_one_line(TypeError, r"floating-point.*int64", L.lift, np.arange(6).reshape(3, 2))
    raises_one_line(TypeError, r"floating-point", L.inner, torch.ones(2, 3, dtype=torch.int32), torch.ones(2, 3))
    raises_one_line(TypeError, r"floating-point", L.check_points, np.array([[1, 0]]))
    raises_one_line(TypeError, r"numeric array", L.lift, np.array([object(), object()]))


def test_numpy_layouts_accepted_without_warnings(recwarn):
    xs = rng(0).standard_normal((4, 6))
    ro = np.broadcast_to(xs[:1], (4, 6))  # read-only view
    rev = xs[::-1, ::2]  # negative and non-unit strides
    torch.testing.assert_close(L.lift(ro), L.lift(np.repeat(xs[:1], 4, axis=0)))
    torch.testing.assert_close(L.lift(rev), L.lift(rev.copy()))
    assert L.as_tensor(np.float64(2.0)).shape == ()  # a numpy scalar stays a scalar
    assert not [w for w in recwarn.list if issubclass(w.category, UserWarning)], [str(w.message) for w in recwarn.list]


def test_lift_and_maps_bad_input():
    raises_one_line(ValueError, r"x_s holds NaN or Inf", L.lift, np.array([[0.0, np.nan]]))
    raises_one_line(ValueError, r"x_s: expected \(\.\.\., d\) with d >= 1", L.lift, np.zeros((3, 0)))
    raises_one_line(ValueError, r"tangent vector at the origin.*u\[\.\.\., 0\] == 0", L.expmap0, np.ones((2, 3)))
    raises_one_line(ValueError, r"u holds NaN or Inf", L.expmap0, np.array([0.0, np.inf]))
    raises_one_line(ValueError, r"inside the ball", L.from_poincare, np.array([[0.6, 0.8]]))
    raises_one_line(ValueError, r"inside the ball", L.from_klein, np.array([[2.0, 0.0]]), k=3.0)
    raises_one_line(ValueError, r"off the hyperboloid", L.logmap0, np.array([[1.0, 1.0]]))
    raises_one_line(ValueError, r"lower sheet", L.to_poincare, -points((2,), 2))


DISTANCES = [
    pytest.param(lambda x, y, **kw: L.sqdist(x, y, **kw), id="sqdist"),
    pytest.param(lambda x, y, **kw: L.dist(x, y, **kw), id="dist"),
    pytest.param(lambda x, y, **kw: L.pairwise_sqdist(x, y, **kw), id="pairwise_sqdist"),
]


@pytest.mark.parametrize("fn", DISTANCES)
def test_distance_functions_bad_input(fn):
    k = 1.0
    x = points((4,), 3, k, seed=7)
    y = points((4,), 3, k, seed=8)
    fn(x, y, k=k)  # the good case runs

    off = x.copy()
    off[2, 0] += 0.1
    raises_one_line(ValueError, r"^x: points are off the hyperboloid.*worst is row 2 .*<x,x>_L = ", fn, off, y, k=k)
    raises_one_line(ValueError, r"^y: points are off the hyperboloid.*row 2", fn, x, off, k=k)
    nan = y.copy()
    nan[1, 3] = np.nan
    raises_one_line(ValueError, r"^y: row 1 holds NaN or Inf", fn, x, nan, k=k)
    inf = x.copy()
    inf[0, 0] = np.inf
    raises_one_line(ValueError, r"^x: row 0 holds NaN or Inf", fn, inf, y, k=k)
    lower = x.copy()
    lower[3] *= -1
    raises_one_line(ValueError, r"^x: row 3 is on the lower sheet", fn, lower, y, k=k)
    raises_one_line(ValueError, r"different numbers of coordinates", fn, x, points((4,), 4, k), k=k)
    raises_one_line(TypeError, r"float64 but y is torch.float32", fn, x, y.astype(np.float32), k=k)
    raises_one_line(TypeError, r"floating-point", fn, x.astype(np.int64), y, k=k)
    raises_one_line(ValueError, r"expected \(\.\.\., d \+ 1\) with d >= 1", fn, x[:, :1], y[:, :1], k=k)
    for bad_k in (0.0, -1.0, float("nan"), float("inf")):
        raises_one_line(ValueError, r"k must be a positive", fn, x, y, k=bad_k)
    # points lifted with another k are off this hyperboloid
    raises_one_line(ValueError, r"off the hyperboloid <x,x>_L = -k \(k=2\)", fn, x, y, k=2.0)


def test_batch_shapes_that_do_not_broadcast():
    x = points((2, 3), 2)
    y = points((4,), 2)
    raises_one_line(ValueError, r"batch shapes that do not broadcast", L.sqdist, x, y)
    raises_one_line(ValueError, r"batch shapes that do not broadcast", L.dist, x, y)
    raises_one_line(ValueError, r"batch shapes that do not broadcast", L.inner, x, y)
    a = points((2, 5), 2)
    b = points((3, 4), 2)
    raises_one_line(ValueError, r"batch shapes that do not broadcast", L.pairwise_sqdist, a, b)
    raises_one_line(ValueError, r"batch shapes that do not broadcast", L.pairwise_inner, a, b)
    raises_one_line(ValueError, r"expected \(\.\.\., N, d \+ 1\) for a pairwise", L.pairwise_sqdist, x[0, 0], b)


def test_inner_bad_input():
    raises_one_line(ValueError, r"different numbers of coordinates", L.inner, np.ones((2, 3)), np.ones((2, 4)))
    raises_one_line(TypeError, r"float32 but y is torch.float64", L.inner, np.ones(3, np.float32), np.ones(3))
    raises_one_line(ValueError, r"expected \(\.\.\., d \+ 1\)", L.inner, np.ones((2, 1)), np.ones((2, 1)))


# --------------------------------------------------------------------------- #
# geodesic
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("np_dtype,torch_dtype", DTYPES)
@pytest.mark.parametrize("k", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("d", [2, 5])
def test_geodesic_endpoints_speed_and_sheet(np_dtype, torch_dtype, k, d):
    x = points((6,), d, k, scale=2.0, seed=1, dtype=np_dtype)  # numpy in
    y = points((6,), d, k, scale=2.0, seed=2, dtype=np_dtype)
    n = 33
    g = L.geodesic(x, y, n, k=k)
    assert isinstance(g, torch.Tensor) and g.dtype == torch_dtype and g.shape == (6, n, d + 1)
    L.check_points(g, k=k)  # every sample on <x, x>_L = -k, upper sheet
    assert torch.equal(g[:, 0], torch.from_numpy(x)) and torch.equal(g[:, -1], torch.from_numpy(y))
    total = L.dist(x, y, k=k)
    tol = dict(rtol=1e-9, atol=1e-9) if torch_dtype == torch.float64 else dict(rtol=2e-3, atol=2e-3)
    # constant speed: consecutive samples d(x, y) / (n - 1) apart
    steps = L.dist(g[:, :-1], g[:, 1:], k=k)
    torch.testing.assert_close(steps, (total / (n - 1))[:, None].expand(6, n - 1), **tol)
    # minimising: the triangle inequality is an equality along the curve
    t = torch.linspace(0, 1, n, dtype=torch_dtype)
    torch.testing.assert_close(L.dist(torch.from_numpy(x)[:, None], g, k=k), t * total[:, None], **tol)
    torch.testing.assert_close(L.dist(g, torch.from_numpy(y)[:, None], k=k), (1 - t) * total[:, None], **tol)


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_geodesic_matches_expmap_of_logmap_geoopt(k):
    geoopt = pytest.importorskip("geoopt")
    man = geoopt.Lorentz(k=torch.tensor(k, dtype=torch.float64))  # float64 k: see notebook 01
    x = torch.from_numpy(points((5,), 3, k, scale=1.5, seed=3))
    y = torch.from_numpy(points((5,), 3, k, scale=1.5, seed=4))
    n = 9
    t = torch.linspace(0, 1, n, dtype=torch.float64)[:, None, None]
    ref = man.expmap(x, t * man.logmap(x, y)).transpose(0, 1)  # (5, n, d + 1): expmap_x(t logmap_x(y))
    # t = 0 left out: geoopt clamps the tangent norm from below, so its expmap_x(0) is x only to ~1e-8
    torch.testing.assert_close(L.geodesic(x, y, n, k=k)[:, 1:], ref[:, 1:], rtol=1e-11, atol=1e-11)
    # and the closed form of the docstring: cosh(t theta) x + sinh(t theta) u / sinh(theta), u = y + <x,y>_L x / k
    theta = (L.dist(x, y, k=k) / math.sqrt(k))[:, None, None]
    u = y + (L.inner(x, y) / k)[:, None] * x
    tt = t.transpose(0, 1)
    closed = torch.cosh(tt * theta) * x[:, None] + torch.sinh(tt * theta) / torch.sinh(theta) * u[:, None]
    torch.testing.assert_close(L.geodesic(x, y, n, k=k), closed, rtol=1e-9, atol=1e-9)


def test_geodesic_lies_in_the_plane_of_x_and_y():
    # the geodesic is the sheet cut by the plane through 0, x and y: every sample is a x + b y
    k = 1.5
    x = torch.from_numpy(points((4,), 4, k, scale=2.0, seed=5))
    y = torch.from_numpy(points((4,), 4, k, scale=2.0, seed=6))
    g = L.geodesic(x, y, 17, k=k)
    basis = torch.stack([x, y], dim=-1)  # (4, 5, 2)
    coef = torch.linalg.lstsq(basis[:, None].expand(4, 17, 5, 2), g[..., None]).solution
    residual = (basis[:, None] @ coef)[..., 0] - g
    assert float(residual.abs().max()) < 1e-10 * float(g.abs().max())


def test_geodesic_broadcasting_far_coincident_and_large_n():
    k = 2.0
    far = L.lift(torch.tensor([[30.0, 0.0], [0.0, -30.0]], dtype=torch.float64), k=k)
    g = L.geodesic(far[0], far[1], 17, k=k)
    assert g.shape == (17, 3) and torch.isfinite(g).all()
    L.check_points(g, k=k)
    torch.testing.assert_close(L.dist(far[0], g[8], k=k), L.dist(g[8], far[1], k=k), rtol=1e-8, atol=1e-8)
    # hundreds of sqrt(k) apart: no overflow in sinh
    very = L.expmap0(torch.tensor([[0.0, 300.0, 0.0], [0.0, 0.0, -300.0]], dtype=torch.float64) / 1e3, k=k)
    assert torch.isfinite(L.geodesic(very[0], very[1], 5, k=k)).all()
    same = L.geodesic(far[0], far[0], 5, k=k)
    assert torch.equal(same, far[0].expand(5, 3))
    # one point against a batch: (3,) with (2, 4, 3) -> (2, 4, n, 3)
    batch = torch.from_numpy(points((2, 4), 2, k, seed=9))
    out = L.geodesic(L.origin(2, k=k), batch, 6, k=k)
    assert out.shape == (2, 4, 6, 3)
    torch.testing.assert_close(out[1, 2], L.geodesic(L.origin(2, k=k), batch[1, 2], 6, k=k))


def test_geodesic_bad_input():
    k = 1.0
    x = points((3,), 2, k, seed=1)
    y = points((3,), 2, k, seed=2)
    for bad_n in (1, 0, 2.5, True, "8"):
        raises_one_line(ValueError, r"^n must be an integer >= 2 \(samples along a geodesic\), got ", L.geodesic, x, y, bad_n,
                        k=k)
    raises_one_line(ValueError, r"^y: points are off the hyperboloid", L.geodesic, x, y * 2, 5, k=k)
    raises_one_line(ValueError, r"different numbers of coordinates", L.geodesic, x, points((3,), 3, k), 5, k=k)
    raises_one_line(TypeError, r"float64 but y is torch.float32", L.geodesic, x, y.astype(np.float32), 5, k=k)
    raises_one_line(ValueError, r"batch shapes that do not broadcast", L.geodesic, x, points((4,), 2, k), 5, k=k)
    raises_one_line(ValueError, r"k must be a positive", L.geodesic, x, y, 5, k=0.0)


# --------------------------------------------------------------------------- #
# CUDA (runs only where a GPU is present)
# --------------------------------------------------------------------------- #
@CUDA
@pytest.mark.parametrize("torch_dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu(torch_dtype):
    g = torch.Generator().manual_seed(0)
    xs = (3 * torch.randn(8, 5, generator=g)).to(torch_dtype)
    ys = (3 * torch.randn(6, 5, generator=g)).to(torch_dtype)
    k = 0.5
    x, y = L.lift(xs, k=k), L.lift(ys, k=k)
    xc, yc = L.lift(xs.cuda(), k=k), L.lift(ys.cuda(), k=k)
    tol = dict(rtol=1e-5, atol=1e-5) if torch_dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    pairs = [
        (xc, x),
        (L.sqdist(xc[:, None], yc[None], k=k), L.sqdist(x[:, None], y[None], k=k)),
        (L.dist(xc[:, None], yc[None], k=k), L.dist(x[:, None], y[None], k=k)),
        (L.pairwise_inner(xc, yc), L.pairwise_inner(x, y)),
        (L.pairwise_sqdist(xc, yc, k=k), L.pairwise_sqdist(x, y, k=k)),
        (L.logmap0(xc, k=k), L.logmap0(x, k=k)),
        (L.expmap0(L.logmap0(xc, k=k), k=k), x),
        (L.from_poincare(L.to_poincare(xc, k=k), k=k), x),
        (L.from_klein(L.to_klein(xc, k=k), k=k), x),
        (L.geodesic(xc[:6], yc, 5, k=k), L.geodesic(x[:6], y, 5, k=k)),
    ]
    for got, ref in pairs:
        assert got.device.type == "cuda" and got.dtype == torch_dtype
        torch.testing.assert_close(got.cpu(), ref, **tol)
    raises_one_line(ValueError, r"x is on cuda.* but y is on cpu", L.sqdist, xc, y, k=k)
    bad = xc.clone()
    bad[5, 0] += 1
    raises_one_line(ValueError, r"worst is row 5", L.check_points, bad, k=k)


def _not_dense(kind: str, x: torch.Tensor) -> torch.Tensor:
    if kind == "meta":
        return x.to("meta")
    if kind == "sparse":
        return x.to_sparse()
    if kind == "sparse_csr":
        return x.reshape(-1, x.shape[-1]).to_sparse_csr()
    return torch.nested.nested_tensor([x[0], x[1][:2]])


_ONE_POINT = ("lift", "expmap0", "logmap0", "to_poincare", "from_poincare", "to_klein", "from_klein", "check_points")
_TWO_POINTS = ("inner", "sqdist", "dist", "pairwise_inner", "pairwise_sqdist", "geodesic")


@pytest.mark.parametrize("kind", ["meta", "sparse", "sparse_csr", "nested"])
@pytest.mark.parametrize("fn", _ONE_POINT + _TWO_POINTS)
def test_meta_sparse_and_nested_tensors_are_a_type_error(fn, kind, recwarn):
    x = L.lift(torch.randn(2, 3, 3, dtype=torch.float64) * 0.1)
    bad = _not_dense(kind, x)
    args = (bad,) if fn in _ONE_POINT else (bad, x)
    with pytest.raises(TypeError, match=r"expected a dense tensor of coordinates, got a (meta|sparse|nested) tensor") as err:
        getattr(L, fn)(*args)
    assert "\n" not in str(err.value)
    if fn in _TWO_POINTS:  # the second argument is checked the same way
        with pytest.raises(TypeError, match="got a (meta|sparse|nested) tensor"):
            getattr(L, fn)(x, bad)
