"""Oracle tests: hypviz.lorentz against mpmath (ground truth) and geoopt (an independent implementation).

mpmath reference (hypviz.base.oracle, shared with notebook 02's accuracy study): the exact
floating-point spatial parts handed to hypviz, the time coordinate recomputed as
sqrt(|x_s|^2 + k) at 100 significant digits, and the textbook formulas (identity 1:
-2k - 2<x,y>_L, identity 2: sqrt(k) arcosh(-<x,y>_L / k)) evaluated at that precision
(formula="textbook"), so the reference takes a different route from hypviz's stable one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hypviz import lorentz as L
from hypviz.base import oracle

DIGITS = 100  # >= 50 significant digits; the textbook formula loses < 20 of them here


def mp_reference(xs: np.ndarray, ys: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Squared distance and distance of lift(xs), lift(ys) at DIGITS digits (textbook route), returned as float64."""
    assert DIGITS >= 50
    xs, ys = np.asarray(xs, np.float64), np.asarray(ys, np.float64)  # float32 -> float64 is exact
    sq, d = oracle.distances_mpmath(xs, ys, k=k, dps=DIGITS, formula="textbook")
    return np.array([float(v) for v in sq]), np.array([float(v) for v in d])


def nearby_pairs(d: int, n: int, radial: bool, seed: int, r_max: float = 10.0, sep: float = 1e-3):
    """Spatial parts x_s with |x_s| in [0, r_max] (a quarter of them at r_max), y_s = x_s + sep * unit."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    r = rng.uniform(0.0, r_max, n)
    r[: n // 4] = r_max
    xs = u * r[:, None]
    if radial:
        step = u  # straight away from the origin: the hard case for |x_s - y_s|^2 - (x_t - y_t)^2
    else:
        step = rng.standard_normal((n, d))
        step /= np.linalg.norm(step, axis=-1, keepdims=True)
    return xs, xs + sep * step


KS = [0.1, 0.5, 1.0, 2.0, 10.0]
DIMS = [2, 16, 64]
N_PAIRS = 24


def relerr(got: torch.Tensor, ref: np.ndarray) -> np.ndarray:
    return np.abs(got.double().numpy() - ref) / np.abs(ref)


def _sample(np_dtype, k, seed0):
    """(float-typed spatial parts x_s, y_s, mpmath sqdist, mpmath dist) over DIMS x {random, radial}."""
    out = []
    for i, d in enumerate(DIMS):
        for radial in (False, True):
            xs, ys = nearby_pairs(d, N_PAIRS, radial, seed=seed0 + 10 * i + radial)
            xs, ys = xs.astype(np_dtype), ys.astype(np_dtype)
            sq, dd = mp_reference(xs, ys, k)
            out.append((xs, ys, sq, dd))
    return out


@pytest.mark.parametrize("k", KS)
def test_float32_nearby_pairs_within_1e_4_and_textbook_is_not(k):
    worst = {"sqdist": 0.0, "dist": 0.0, "textbook": 0.0}
    for xs, ys, sq_ref, d_ref in _sample(np.float32, k, seed0=100):
        assert (sq_ref > 0).all()
        x, y = L.lift(xs, k=k), L.lift(ys, k=k)  # float32 points, time coordinate rounded to float32
        assert x.dtype == torch.float32
        sq, d = L.sqdist(x, y, k=k), L.dist(x, y, k=k)
        assert sq.dtype == d.dtype == torch.float32
        textbook = -2 * k - 2 * L.inner(x, y)  # identity 1 evaluated in float32
        worst["sqdist"] = max(worst["sqdist"], relerr(sq, sq_ref).max())
        worst["dist"] = max(worst["dist"], relerr(d, d_ref).max())
        worst["textbook"] = max(worst["textbook"], relerr(textbook, sq_ref).max())
    assert worst["sqdist"] < 1e-4, worst
    assert worst["dist"] < 1e-4, worst
    # the reason for the stable formula: the textbook one is off by ~100% or more here
    assert worst["textbook"] > 0.5, worst


@pytest.mark.parametrize("k", KS)
def test_float64_nearby_pairs_within_1e_10(k):
    for xs, ys, sq_ref, d_ref in _sample(np.float64, k, seed0=200):
        x, y = L.lift(xs, k=k), L.lift(ys, k=k)
        assert relerr(L.sqdist(x, y, k=k), sq_ref).max() < 1e-10
        assert relerr(L.dist(x, y, k=k), d_ref).max() < 1e-10


@pytest.mark.parametrize("np_dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_far_pairs_and_batch_against_mpmath(np_dtype, tol):
    # well-separated, antipodal and origin pairs up to norm 20, given as one batched call
    rng = np.random.default_rng(7)
    k = 0.5
    n, d = 30, 8
    u = rng.standard_normal((n, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    r = rng.uniform(0, 20, (n, 1))
    xs = np.concatenate([u * r, u * r, u * r, u * r])
    ys = np.concatenate([rng.standard_normal((n, d)) * 5, -u * r * 1.001, np.zeros((n, d)), u * r * 0.5])
    xs, ys = xs.astype(np_dtype), ys.astype(np_dtype)
    sq_ref, d_ref = mp_reference(xs, ys, k)
    x, y = L.lift(xs, k=k).reshape(4, n, d + 1), L.lift(ys, k=k).reshape(4, n, d + 1)
    assert relerr(L.sqdist(x, y, k=k).reshape(-1), sq_ref).max() < tol
    assert relerr(L.dist(x, y, k=k).reshape(-1), d_ref).max() < tol


# --------------------------------------------------------------------------- #
# geoopt
# --------------------------------------------------------------------------- #
GEOOPT_TOL = dict(rtol=1e-6, atol=1e-6)


@pytest.fixture(params=[0.5, 1.0, 2.0], ids=lambda k: f"k={k}")
def manifold(request):
    k = request.param
    geoopt = pytest.importorskip("geoopt")
    # k as a float64 tensor: otherwise geoopt keeps it in float32
    return k, geoopt.Lorentz(k=torch.tensor(k, dtype=torch.float64))


def _geo_points(seed: int, n: int = 64, d: int = 5, r_max: float = 4.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    return v / v.norm(dim=-1, keepdim=True) * torch.rand(n, 1, generator=g, dtype=torch.float64) * r_max


def test_geoopt_projx_is_lift(manifold):
    k, M = manifold
    xs = _geo_points(0)
    junk_time = torch.randn(xs.shape[0], 1, dtype=torch.float64)
    torch.testing.assert_close(M.projx(torch.cat([junk_time, xs], -1)), L.lift(xs, k=k), **GEOOPT_TOL)


def test_geoopt_inner_and_dist(manifold):
    from geoopt.manifolds.lorentz import math as gmath

    k, M = manifold
    x, y = M.projx(torch.nn.functional.pad(_geo_points(1), (1, 0))), M.projx(torch.nn.functional.pad(_geo_points(2), (1, 0)))
    torch.testing.assert_close(L.inner(x, y), gmath.inner(x, y), **GEOOPT_TOL)
    torch.testing.assert_close(L.inner(x, x), gmath.inner(x, x), **GEOOPT_TOL)
    # geoopt's arcosh is not accurate for coincident points: compare on distinct ones
    d = L.dist(x, y, k=k)
    assert d.min() > 1e-2
    torch.testing.assert_close(d, M.dist(x, y), **GEOOPT_TOL)
    # pairwise: geoopt broadcasts, hypviz builds the matrix from products
    gd = M.dist(x[:, None], y[None])
    torch.testing.assert_close(L.dist(x[:, None], y[None], k=k), gd, **GEOOPT_TOL)
    rk = math.sqrt(k)
    pd = 2 * rk * torch.asinh(torch.sqrt(L.pairwise_sqdist(x, y, k=k)) / (2 * rk))
    torch.testing.assert_close(pd, gd, **GEOOPT_TOL)
    torch.testing.assert_close(L.pairwise_inner(x, y), gmath.inner(x[:, None], y[None]), **GEOOPT_TOL)


def test_geoopt_expmap0_logmap0(manifold):
    k, M = manifold
    u = torch.nn.functional.pad(_geo_points(3, r_max=3.0), (1, 0))
    u = u[u[:, 1:].norm(dim=-1) > 1e-3]  # geoopt clamps tiny norms
    x = L.expmap0(u, k=k)
    torch.testing.assert_close(x, M.expmap0(u), **GEOOPT_TOL)
    torch.testing.assert_close(L.logmap0(x, k=k), M.logmap0(x), **GEOOPT_TOL)
    y = M.projx(torch.nn.functional.pad(_geo_points(4), (1, 0)))
    torch.testing.assert_close(L.logmap0(y, k=k), M.logmap0(y), **GEOOPT_TOL)
    # and each is on the other's manifold
    M.assert_check_point_on_manifold(x)
    L.check_points(M.expmap0(u), k=k)
