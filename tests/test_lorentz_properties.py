"""Property tests (hypothesis) of the identities 1-5 (notebooks 02 and 04) and of the maps in hypviz.lorentz.

Points are float64 numpy arrays: a direction (from a drawn seed and sparsity), scaled
to a drawn norm in [0, 20]; dimensions 1..64; curvature parameter k in [0.1, 10].  Pairs come in
several kinds (independent, nearby, radial, equal-norm, antipodal, identical) so the
cancelling regimes are exercised too.  Tolerances are written from the size of the
terms each side adds up (a few ulps of them), never as bare constants.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypviz import lorentz as L

EPS64 = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)
SETTINGS = settings(max_examples=50, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])



@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    # thousands of tiny tensors: torch's thread pool only adds overhead (milliseconds per call
    # on a busy 2-core machine); restored afterwards for the other test modules
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


DIMS = st.integers(1, 64)
KS = st.floats(0.1, 10.0)
MAX_NORM = 20.0


def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.divide(v, n, out=np.zeros_like(v), where=n > 0)


@st.composite
def directions(draw, n: int, d: int) -> np.ndarray:
    """(n, d) unit vectors: Gaussian from a drawn seed, with a drawn number of non-zero coordinates
    (so axis-aligned and sparse directions come up)."""
    v = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal((n, d))
    v[:, draw(st.integers(1, d)):] = 0.0
    return _unit(v)


@st.composite
def spatial(draw, n: int, d: int, max_norm: float = MAX_NORM) -> np.ndarray:
    norms = draw(hnp.arrays(np.float64, (n, 1), elements=st.floats(0, max_norm, allow_subnormal=False)))
    return draw(directions(n, d)) * norms


KINDS = ["independent", "nearby", "radial", "equal_norm", "antipodal", "identical"]


@st.composite
def partner(draw, xs: np.ndarray, kind: str | None = None) -> np.ndarray:
    """A second set of spatial parts related to ``xs`` as ``kind`` says."""
    n, d = xs.shape
    kind = kind or draw(st.sampled_from(KINDS))
    sep = draw(st.sampled_from([1e-8, 1e-5, 1e-3, 1e-1, 1.0]))
    if kind == "independent":
        return draw(spatial(n, d))
    if kind == "nearby":
        return xs + sep * draw(directions(n, d))
    if kind == "radial":
        u = _unit(xs)
        return xs + sep * np.where(np.linalg.norm(u, axis=-1, keepdims=True) > 0, u, draw(directions(n, d)))
    if kind == "equal_norm":  # permute coordinates and flip signs: exactly the same norm
        perm = np.array(draw(st.permutations(range(d))))
        signs = np.where(draw(hnp.arrays(np.bool_, (n, d))), -1.0, 1.0)
        return xs[:, perm] * signs
    if kind == "antipodal":
        return -xs * (1 + sep * draw(st.sampled_from([-1.0, 1.0])))
    return xs.copy()


@st.composite
def pairs(draw, kind: str | None = None):
    d, k, n = draw(DIMS), draw(KS), draw(st.integers(1, 4))
    xs = draw(spatial(n, d))
    return k, xs, draw(partner(xs, kind))


def terms(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
    """Size of the terms of -2k - 2<x, y>_L: k + x_t y_t + sum_i |x_i y_i|."""
    return k + x[..., 0] * y[..., 0] + (x[..., 1:] * y[..., 1:]).abs().sum(-1)


# --------------------------------------------------------------------------- #
# identities 1-3
# --------------------------------------------------------------------------- #
@SETTINGS
@given(pairs())
def test_identity1_sqdist_is_minus_2k_minus_2_inner(args):
    k, xs, ys = args
    x, y = L.lift(xs, k=k), L.lift(ys, k=k)
    D = L.sqdist(x, y, k=k)
    textbook = -2 * k - 2 * L.inner(x, y)  # cancels for nearby points: compare on the scale of its terms
    assert ((D - textbook).abs() <= 32 * EPS64 * terms(x, y, k)).all()


@SETTINGS
@given(pairs())
def test_identity2_arcosh_and_sinh(args):
    k, xs, ys = args
    x, y = L.lift(xs, k=k), L.lift(ys, k=k)
    D, d = L.sqdist(x, y, k=k), L.dist(x, y, k=k)
    rk = math.sqrt(k)
    # sqdist == 4k sinh^2(d / (2 sqrt k)), to a few ulps
    torch.testing.assert_close(4 * k * torch.sinh(d / (2 * rk)) ** 2, D, rtol=1e-13, atol=1e-300)
    # d == sqrt(k) arcosh(-<x,y>_L / k) where arcosh is well conditioned
    z = -L.inner(x, y) / k
    dz = 32 * EPS64 * terms(x, y, k) / k  # rounding of z
    ok = z - 1 > 1e3 * dz
    ref = rk * torch.acosh(z[ok])
    tol = rk * dz[ok] / torch.sqrt(z[ok] ** 2 - 1) * 4 + 1e-14 * ref
    assert ((d[ok] - ref).abs() <= tol).all()


@SETTINGS
@given(pairs())
def test_identity3_decomposition(args):
    k, xs, ys = args
    x, y = L.lift(xs, k=k).numpy(), L.lift(ys, k=k).numpy()
    xt, yt = x[:, 0], y[:, 0]
    D = L.sqdist(x, y, k=k).numpy()
    ee = ((xs - ys) ** 2).sum(-1)
    # |x - y|^2_L == |x_s - y_s|^2 - (x_t - y_t)^2  (right side cancels: tolerance on its terms)
    assert (np.abs(D - (ee - (xt - yt) ** 2)) <= 32 * EPS64 * (ee + (xt + yt) * np.abs(xt - yt))).all()
    # x_t - y_t == (|x_s|^2 - |y_s|^2) / (x_t + y_t)
    rhs = ((xs**2).sum(-1) - (ys**2).sum(-1)) / (xt + yt)
    assert (np.abs((xt - yt) - rhs) <= 16 * EPS64 * (xt + yt)).all()
    # the Euclidean spatial distance over-states the Lorentzian one
    assert (D <= ee * (1 + 16 * EPS64) + 1e-300).all()


@SETTINGS
@given(pairs(kind="equal_norm"))
def test_identity3_equal_norms_give_euclidean_distance(args):
    k, xs, ys = args
    x, y = L.lift(xs, k=k), L.lift(ys, k=k)
    ee = torch.from_numpy(((xs - ys) ** 2).sum(-1))
    r = torch.from_numpy(np.linalg.norm(xs, axis=-1))
    torch.testing.assert_close(x[:, 0], y[:, 0], rtol=4 * EPS64, atol=0)
    D = L.sqdist(x, y, k=k)
    assert ((D - ee).abs() <= 16 * EPS64 * ee + (16 * EPS64 * r) ** 2).all()


# --------------------------------------------------------------------------- #
# identities 4-5: the thread's "constant" and attention
# --------------------------------------------------------------------------- #
@SETTINGS
@given(pairs())
def test_identity4_spatial_dot_is_distance_plus_time_product(args):
    k, qs, ks = args
    q, kk = L.lift(qs, k=k), L.lift(ks, k=k)
    lhs = (q[:, 1:] * kk[:, 1:]).sum(-1)
    rhs = -0.5 * L.sqdist(q, kk, k=k) + (q[:, 0] * kk[:, 0] - k)
    assert ((lhs - rhs).abs() <= 32 * EPS64 * terms(q, kk, k)).all()


@st.composite
def attention_inputs(draw):
    d, k, n = draw(DIMS), draw(KS), draw(st.integers(1, 8))
    queries = draw(spatial(draw(st.integers(1, 3)), d))
    keys = np.concatenate([draw(partner(queries[:1])) for _ in range(n)])  # a mix of near and far keys
    tau = draw(st.floats(0.1, 10.0))
    return k, queries, keys, tau


def _check_identity5(k, queries, keys, tau, dtype, eps):
    q, kk = L.lift(queries.astype(dtype), k=k), L.lift(keys.astype(dtype), k=k)
    scale = (q[:, None, 0] * kk[None, :, 0] + q[:, None, 1:].norm(dim=-1) * kk[None, :, 1:].norm(dim=-1) + k) / tau
    tol = 64 * eps * scale.max()  # bound on the logit errors; softmax moves by at most about that much
    lorentz = torch.softmax(L.pairwise_inner(q, kk) / tau, dim=-1)
    D = L.sqdist(q[:, None], kk[None], k=k)
    distance = torch.softmax(-0.5 * D / tau, dim=-1)
    assert ((lorentz - distance).abs() <= tol).all()
    # identity 4 under a softmax: spatial dot products = distance logits + a key-norm bias
    spatial_ = torch.softmax(q[:, 1:] @ kk[:, 1:].T / tau, dim=-1)
    biased = torch.softmax((-0.5 * D + q[:, None, 0] * kk[None, :, 0]) / tau, dim=-1)
    assert ((spatial_ - biased).abs() <= tol).all()
    # the pairwise (matrix-product) distances give the same distance attention
    assert ((torch.softmax(-0.5 * L.pairwise_sqdist(q, kk, k=k) / tau, dim=-1) - distance).abs() <= tol).all()


@SETTINGS
@given(attention_inputs())
def test_identity5_lorentz_softmax_is_distance_softmax(args):
    _check_identity5(*args, dtype=np.float64, eps=EPS64)


@SETTINGS
@given(attention_inputs())
def test_identity5_float32(args):
    _check_identity5(*args, dtype=np.float32, eps=EPS32)


# --------------------------------------------------------------------------- #
# the hyperboloid, the maps and the metric
# --------------------------------------------------------------------------- #
def _on_hyperboloid(x: torch.Tensor, k: float, eps: float = EPS64) -> None:
    lorentz_norm = L.inner(x, x)
    assert ((lorentz_norm + k).abs() <= 32 * eps * (x * x).sum(-1)).all()
    assert (x[..., 0] > 0).all()
    L.check_points(x, k=k)


@st.composite
def ball_points(draw):
    d, k, n = draw(DIMS), draw(KS), draw(st.integers(1, 4))
    rho = draw(hnp.arrays(np.float64, (n, 1), elements=st.floats(0, 0.999)))
    return k, math.sqrt(k) * rho * draw(directions(n, d))


@SETTINGS
@given(pairs(kind="independent"), ball_points())
def test_points_land_on_the_hyperboloid(args, ball):
    k, xs, us = args
    _on_hyperboloid(L.lift(xs, k=k), k)
    _on_hyperboloid(L.lift(xs.astype(np.float32), k=k), k, eps=EPS32)
    _on_hyperboloid(L.expmap0(np.pad(us, ((0, 0), (1, 0))), k=k), k)
    kb, p = ball
    _on_hyperboloid(L.from_poincare(p, k=kb), kb)
    _on_hyperboloid(L.from_klein(p, k=kb), kb)


@SETTINGS
@given(pairs())
def test_inner_of_two_points_is_at_most_minus_k(args):
    k, xs, ys = args
    x, y = L.lift(xs, k=k), L.lift(ys, k=k)
    assert (L.inner(x, y) <= -k + 32 * EPS64 * terms(x, y, k)).all()


@SETTINGS
@given(KS, DIMS, st.data())
def test_expmap0_logmap0_inverse(k, d, data):
    us = data.draw(spatial(3, d))
    u = torch.from_numpy(np.pad(us, ((0, 0), (1, 0))))
    x = L.expmap0(u, k=k)
    torch.testing.assert_close(L.logmap0(x, k=k), u, rtol=1e-12, atol=1e-13)
    # the distance from the origin is the tangent norm
    torch.testing.assert_close(L.dist(L.origin(d, k=k), x, k=k), u.norm(dim=-1), rtol=1e-12, atol=1e-13)
    y = L.lift(data.draw(spatial(3, d)), k=k)
    torch.testing.assert_close(L.expmap0(L.logmap0(y, k=k), k=k), y, rtol=1e-12, atol=1e-13)


@SETTINGS
@given(pairs(kind="independent"), ball_points())
def test_poincare_klein_round_trips(args, ball):
    k, xs, _ = args
    x = L.lift(xs, k=k)
    p, q = L.to_poincare(x, k=k), L.to_klein(x, k=k)
    rk = math.sqrt(k)
    assert (p.norm(dim=-1) < rk).all() and (q.norm(dim=-1) < rk).all()
    # near the rim k - |p|^2 cancels: the round trip loses about x_t / sqrt(k) ulps
    rtol = 64 * EPS64 * (1 + float(x[:, 0].max()) / rk)
    torch.testing.assert_close(L.from_poincare(p, k=k), x, rtol=rtol, atol=1e-13)
    torch.testing.assert_close(L.from_klein(q, k=k), x, rtol=rtol, atol=1e-13)
    # Klein from Poincare: K = 2k p / (k + |p|^2)
    torch.testing.assert_close(q, 2 * k * p / (k + (p * p).sum(-1, keepdim=True)), rtol=1e-13, atol=1e-15)
    kb, pb = ball
    torch.testing.assert_close(L.to_poincare(L.from_poincare(pb, k=kb), k=kb), torch.from_numpy(pb), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(L.to_klein(L.from_klein(pb, k=kb), k=kb), torch.from_numpy(pb), rtol=1e-12, atol=1e-14)


@SETTINGS
@given(pairs())
def test_sqdist_nonnegative_and_symmetric(args):
    k, xs, ys = args
    x, y = L.lift(xs, k=k), L.lift(ys, k=k)
    D = L.sqdist(x, y, k=k)
    assert (D >= 0).all()
    torch.testing.assert_close(L.sqdist(y, x, k=k), D, rtol=1e-14, atol=0)
    torch.testing.assert_close(L.dist(y, x, k=k), L.dist(x, y, k=k), rtol=1e-14, atol=0)
    assert (L.sqdist(x, x, k=k) == 0).all()


@SETTINGS
@given(pairs(), st.data())
def test_triangle_inequality(args, data):
    k, xs, ys = args
    zs = data.draw(partner(ys))
    x, y, z = L.lift(xs, k=k), L.lift(ys, k=k), L.lift(zs, k=k)
    dxy, dyz, dxz = L.dist(x, y, k=k), L.dist(y, z, k=k), L.dist(x, z, k=k)
    assert (dxz <= dxy + dyz + 1e-12 * (dxy + dyz) + 1e-300).all()


@SETTINGS
@given(pairs())
def test_float32_sqdist_and_dist_close_to_float64(args):
    # same (float32-rounded) spatial inputs; the float32 error is a few ulps times |x_s| / sqrt(k)
    k, xs, ys = args
    xs32, ys32 = xs.astype(np.float32), ys.astype(np.float32)
    D32 = L.sqdist(L.lift(xs32, k=k), L.lift(ys32, k=k), k=k)
    d32 = L.dist(L.lift(xs32, k=k), L.lift(ys32, k=k), k=k)
    x64, y64 = L.lift(xs32.astype(np.float64), k=k), L.lift(ys32.astype(np.float64), k=k)
    D64, d64 = L.sqdist(x64, y64, k=k), L.dist(x64, y64, k=k)
    amp = 1 + (x64[:, 1:].norm(dim=-1) + y64[:, 1:].norm(dim=-1)) / math.sqrt(k)
    assert ((D32.double() - D64).abs() <= 16 * EPS32 * amp * D64 + 1e-37).all()
    assert ((d32.double() - d64).abs() <= 16 * EPS32 * amp * d64 + 1e-18).all()
