"""hypviz.attention.approx.random_features: distance attention in linear time by positive random features."""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention as att
from hypviz import data
from hypviz import lorentz as L
from hypviz.attention.approx import random_features as rf


def tv(p1: torch.Tensor, p2: torch.Tensor) -> torch.Tensor:
    return 0.5 * (p1 - p2).abs().sum(-1)


def exact(q, kk, tau):
    return att.attention_map(q, kk, "distance", temperature=tau)


def test_orthogonal_directions_are_orthogonal_in_blocks_and_gaussian_in_length():
    om = rf.random_directions(20, 7, seed=3)
    assert om.shape == (20, 7) and om.dtype == torch.float64
    for block in (om[:7], om[7:14]):
        g = block @ block.T
        assert float((g - torch.diag(torch.diagonal(g))).abs().max()) < 1e-12  # orthogonal rows
    assert not torch.allclose(om[:7].norm(dim=-1), om[7:14].norm(dim=-1))  # independent chi lengths
    many = rf.random_directions(7000, 7, seed=4)
    # each row N(0, I): E|w|^2 = 7, E[w w^T] = I (4 standard errors: sd of |w|^2 is sqrt(14))
    assert abs(float(many.square().sum(-1).mean()) - 7) < 4 * math.sqrt(14 / 7000)
    assert float((many.T @ many / 7000 - torch.eye(7, dtype=torch.float64)).abs().max()) < 0.06
    assert torch.equal(rf.random_directions(20, 7, seed=3), om)  # reproducible
    assert not torch.equal(rf.random_directions(20, 7, seed=3, orthogonal=False), om)


def test_the_estimator_is_unbiased_over_seeds(points):
    # the average over seeds of the unnormalised weights of one row, relative to one key's, is the exact ratio
    q, kk = points(1, 4, 0.8, seed=1), points(6, 4, 0.8, seed=2)
    tau, seeds = 2.0, 400
    ests = []
    for s in range(seeds):
        om = rf.random_directions(8, 5, seed=s, orthogonal=False)
        a_op, b_op = rf.feature_operands(q[None], kk[None], k=1.0, temperature=tau, omega=om, control_variate=False)
        # undo the stabiliser: every product carries exp(-rho), rho = max over features of (log phi(a) + max_j log phi(b_j))
        a, b, logkey = rf._centred(q[None], kk[None], 1.0, tau)
        la = a @ om.T - 0.5 * a.square().sum(-1, keepdim=True)
        lb = b @ om.T - 0.5 * b.square().sum(-1, keepdim=True) + logkey[..., None]
        w = (a_op @ b_op.transpose(-1, -2))[0, 0] * torch.exp((la + lb.amax(-2, keepdim=True)).amax()) / 8
        ests.append(w)
    est = torch.stack(ests)  # (seeds, M)
    # exp(a.b - sqrt(k) w / tau) = exp(<q, kappa>_L / tau) times a factor of the query alone
    # (k + sqrt(k) u) / tau = q_t / tau at k = 1
    truth = torch.exp(L.pairwise_inner(q, kk)[0] / tau) * math.exp(float(q[0, 0]) / tau)
    mean, se = est.mean(0), est.std(0) / math.sqrt(seeds)
    assert bool(((mean - truth).abs() < 4 * se).all())
    assert bool((se < 0.2 * truth).all())  # the test has power: the intervals are narrow


def test_more_features_and_more_seeds_bring_the_map_to_the_exact_one(points):
    q, kk = points(32, 16, 1.5, seed=3), points(48, 16, 1.5, seed=4)
    ref = exact(q, kk, 4.0)
    err = {d: float(tv(rf.distance_rf_map(q, kk, temperature=4.0, features=d, seed=1), ref).mean()) for d in (16, 256)}
    assert err[256] < 0.5 * err[16]
    mean_map = torch.stack([rf.distance_rf_map(q, kk, temperature=4.0, features=16, seed=s) for s in range(32)]).mean(0)
    assert float(tv(mean_map, ref).mean()) < 0.3 * err[16]


def test_the_control_variate_is_what_makes_near_uniform_maps_accurate(points):
    # r^2/tau = 1.25e-3 (notebook 05's sweep, d = 64, tau = 8): the plain features' error is many baselines
    q, kk = points(64, 64, 0.1, seed=10), points(128, 64, 0.1, seed=11)
    ref = exact(q, kk, 8.0)
    base = float(tv(ref, torch.full_like(ref, 1 / 128)).mean())
    plain = float(tv(rf.distance_rf_map(q, kk, temperature=8.0, features=256, control_variate=False), ref).mean())
    cv = float(tv(rf.distance_rf_map(q, kk, temperature=8.0, features=256), ref).mean())
    assert plain > 2 * base and cv < 0.25 * base


@pytest.mark.parametrize("aggregation", rf.AGGREGATIONS)
def test_the_linear_output_is_the_map_applied_to_the_values(points, aggregation, monkeypatch):
    q, kk, v = points(40, 8, 0.5, seed=5, lead=(2,)), points(50, 8, 0.5, seed=6, lead=(2,)), points(50, 5, 1.0, seed=7, lead=(2,))
    out = rf.distance_linear_attention(q, kk, v, temperature=3.0, features=64, seed=2, aggregation=aggregation)
    p = rf.distance_rf_map(q, kk, temperature=3.0, features=64, seed=2)
    if aggregation == "centroid":
        m = p @ v
        ref = L.lift(m[..., 1:] / torch.sqrt(m[..., 0] ** 2 - m[..., 1:].square().sum(-1))[..., None])
    else:
        ref = L.lift(p @ v[..., 1:])
    assert out.shape == (2, 40, 6)
    torch.testing.assert_close(out, ref, rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(L.inner(out, out), -torch.ones(2, 40, dtype=torch.float64), rtol=0, atol=1e-12)
    # streamed in blocks of a few rows: the same numbers
    monkeypatch.setattr(rf, "_BLOCK_BYTES", 2048)
    streamed = rf.distance_linear_attention(q, kk, v, temperature=3.0, features=64, seed=2, aggregation=aggregation)
    torch.testing.assert_close(streamed, out, rtol=1e-12, atol=1e-13)


def test_float32_is_stable_where_the_weights_span_hundreds_of_e_folds(points):
    q, kk, v = (points(30, 8, 12.0, seed=8, dtype=torch.float32), points(40, 8, 12.0, seed=9, dtype=torch.float32),
                points(40, 8, 1.0, seed=10, dtype=torch.float32))
    p = rf.distance_rf_map(q, kk, temperature=0.5, features=128)
    assert p.dtype == torch.float32 and bool(torch.isfinite(p).all()) and bool((p >= 0).all())
    ref = rf.distance_rf_map(q.double(), kk.double(), temperature=0.5, features=128)
    assert float(tv(p.double(), ref).max()) < 1e-4
    out = rf.distance_linear_attention(q, kk, v, temperature=0.5, features=128)
    assert bool(torch.isfinite(out).all())


def test_compare_streams_the_random_feature_map(points):
    q, kk = points(24, 8, 1.0, seed=11), points(30, 8, 1.0, seed=12)
    c = att.compare(q, kk, "distance_rf", "distance", temperature=2.0, features=64, seed=4)
    direct = tv(att.attention_map(q, kk, "distance_rf", temperature=2.0, features=64, seed=4), exact(q, kk, 2.0))
    torch.testing.assert_close(c.tv, direct, rtol=1e-9, atol=1e-14)
    assert c.delta is None and c.bound_met is None  # the softmax bound does not apply
    other = att.compare(q, kk, "distance_rf", "distance", temperature=2.0, features=64, seed=5)
    assert not torch.equal(other.tv, c.tv)  # the seed reaches the features
    split = att.compare(q, kk, "distance_rf", "distance", temperature=2.0, features=64, seed=4, rf_seed=5)
    assert torch.equal(split.tv, other.tv)  # rf_seed, when given, is the features' seed


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        (dict(features=0), ValueError, "features must be an integer from 1 to 4194304"),
        (dict(features=2.5), ValueError, "features must be an integer from 1 to 4194304"),
        (dict(features=10**30), ValueError, "features must be an integer from 1 to 4194304"),
        (dict(seed=-1), ValueError, "seed must be an integer from 0 to"),
        (dict(seed=2**64), ValueError, "seed must be an integer from 0 to"),
        (dict(orthogonal="yes"), TypeError, "orthogonal must be True or False"),
        (dict(control_variate=1), TypeError, "control_variate must be True or False"),
        (dict(aggregation="mean"), ValueError, "aggregation must be one of 'centroid', 'spatial'"),
        (dict(temperature=-1.0), ValueError, "temperature must be a positive finite number"),
    ],
)
def test_bad_input_gets_one_line(points, kwargs, exc, text):
    q = points(4, 3, 1.0, seed=13)
    with pytest.raises(exc, match=text) as info:
        rf.distance_linear_attention(q, q, q, **kwargs)
    assert "\n" not in str(info.value)


def _sphere(n: int, d: int, radius: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return L.lift(radius * x / x.norm(dim=-1, keepdim=True))


def test_small_queries_against_large_keys_give_non_negative_finite_weights():
    # tau = sqrt(d) = 8, queries of norm 0.1, keys of norm 14: where the old guard let the control variate make weights of +-3.5e3
    q, kk, v = _sphere(256, 64, 0.1, 1), _sphere(16, 64, 14.0, 2), _sphere(16, 3, 1.0, 3)
    p = rf.distance_rf_map(q, kk, temperature=8.0, features=256)
    assert bool((p >= 0).all()) and bool(torch.isfinite(p).all())
    torch.testing.assert_close(p.sum(-1), torch.ones(256, dtype=torch.float64))
    assert float(tv(p, exact(q, kk, 8.0)).max()) <= 1.0
    out = rf.distance_linear_attention(q, kk, v, temperature=8.0, features=256)
    assert bool(torch.isfinite(out).all())
    # compare("distance_rf") measures exactly this map: no negative weight clamped in its logarithm
    c = att.compare(q, kk, "distance_rf", "distance", temperature=8.0, features=256)
    torch.testing.assert_close(c.tv, tv(p, exact(q, kk, 8.0)), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("scale", [20.0, 50.0, 300.0])
def test_float32_never_underflows_to_nan_at_large_norms(points, scale):
    q = points(16, 8, scale, seed=1, dtype=torch.float32)
    kk = points(24, 8, scale, seed=2, dtype=torch.float32)
    v = points(24, 3, 1.0, seed=3, dtype=torch.float32)
    p = att.attention_map(q, kk, "distance_rf")
    assert bool(torch.isfinite(p).all()) and bool((p >= 0).all())
    torch.testing.assert_close(p.sum(-1), torch.ones(16), rtol=0, atol=1e-5)
    assert bool(torch.isfinite(rf.distance_linear_attention(q, kk, v)).all())
    c = att.compare(q, kk, "distance_rf", "distance")
    assert bool(torch.isfinite(c.tv).all())


@pytest.mark.parametrize("r", [0.05, 0.3, 1.0, 3.0])
def test_the_control_variate_is_used_only_where_its_estimated_variance_is_lower(points, r):
    # recomputed here from the samples of each row's sum: plain X_w = phi_w(a) sum_j phi_w(b_j) e^{lk_j},
    # control variate Y_w = X_w - (1 + w.a) sum_j (1 + w.b_j) e^{lk_j}
    q, kk = points(40, 6, r, seed=4), points(30, 6, r, seed=5)
    tau, om = 2.0, rf.random_directions(64, 7, seed=6)
    a_op, _ = rf.feature_operands(q[None], kk[None], k=1.0, temperature=tau, omega=om)
    used = (a_op[0, :, 64:].abs().sum(-1) > 0) if a_op.shape[-1] > 64 else torch.zeros(40, dtype=torch.bool)
    a, b, lk = rf._centred(q, kk, 1.0, tau)
    fa, fb = (torch.exp(a @ om.T - 0.5 * a.square().sum(-1, keepdim=True)),
              torch.exp(b @ om.T - 0.5 * b.square().sum(-1, keepdim=True)))
    x = fa * (fb * lk.exp()[:, None]).sum(0)
    y = x - (1 + a @ om.T) * ((1 + b @ om.T) * lk.exp()[:, None]).sum(0)
    assert bool((y.var(-1)[used] < x.var(-1)[used]).all())
    if r == 0.05:
        assert bool(used.all())  # near uniform: the control variate is what every row uses
    if r == 3.0:
        assert not bool(used.any())  # far from its first-order term: plain positive features
    p = rf.distance_rf_map(q, kk, temperature=tau, features=64, seed=6)
    assert bool((p >= 0).all())


def test_the_direction_cache_is_bounded_in_bytes():
    for s in range(6):
        rf.random_directions(70_000, 64, seed=s)  # 36 MB each
    held = sum(t.numel() * t.element_size() for t in rf._cache.values())
    assert held <= rf._CACHE_BYTES
    assert (70_000, 64, 5, True) in rf._cache  # the latest draw is kept
    rf.random_directions(300_000, 64, seed=0)  # larger than the whole budget: never cached
    assert (300_000, 64, 0, True) not in rf._cache


def test_orthogonal_directions_are_haar_distributed():
    # without the sign fix of the QR factorisation the diagonal of each block is biased (about -0.5 here)
    om = rf.random_directions(7 * 2000, 7, seed=4).reshape(2000, 7, 7)
    diag = torch.diagonal(om, dim1=-2, dim2=-1)
    assert abs(float(diag.mean())) < 0.05
    assert abs(float(om.mean())) < 0.05


def test_the_textbook_estimate_is_the_kernel_of_the_lorentzian_inner_product(points):
    # performer_weights with many independent features: exp(<q, kappa>_L / tau) within 3 % (J is what makes it Lorentzian)
    q, kk = points(3, 3, 0.4, seed=7), points(4, 3, 0.4, seed=8)
    om = rf.random_directions(200_000, 4, seed=9, orthogonal=False)
    est = rf.performer_weights(q, kk, om, temperature=2.0)
    truth = torch.exp(L.pairwise_inner(q, kk) / 2.0)
    torch.testing.assert_close(est, truth, rtol=0.03, atol=0)


@pytest.mark.parametrize("r", [0.5, 1.0, 2.0])
def test_weights_are_never_negative_over_seeds(points, r):
    # the control variate is used only where every weight is provably positive: no seed makes one negative
    q, kk = points(24, 6, r, seed=10), points(32, 6, r, seed=11)
    for s in range(12):
        p = rf.distance_rf_map(q, kk, temperature=1.0, features=16, seed=s)
        assert bool((p >= 0).all()) and bool(torch.isfinite(p).all()), s


def test_rows_where_the_control_variate_would_raise_the_variance_use_the_plain_features():
    # r = 0.6, d = 6, tau = 2, D = 8 features, 3 keys: a few rows are provably positive but the control variate's
    # estimated variance is higher there; those rows must be exactly the plain features' rows
    q, kk = data.lifted_gaussian(400, 6, 0.6, seed=1), data.lifted_gaussian(3, 6, 0.6, seed=2)
    tau, om = 2.0, rf.random_directions(8, 7, seed=3)
    a, b, lk = rf._centred(q, kk, 1.0, tau)
    fa, fb = (torch.exp(a @ om.T - 0.5 * a.square().sum(-1, keepdim=True)),
              torch.exp(b @ om.T - 0.5 * b.square().sum(-1, keepdim=True)))
    x = fa * (fb * lk.exp()[:, None]).sum(0)
    y = x - (1 + a @ om.T) * ((1 + b @ om.T) * lk.exp()[:, None]).sum(0)
    ok = rf._positive_rows(a.norm(dim=-1), b.norm(dim=-1).max(), rf._spread(om))
    worse, better = ok & (y.var(-1) >= x.var(-1)), ok & (y.var(-1) < x.var(-1))
    assert int(worse.sum()) >= 3 and int(better.sum()) >= 100
    p = rf.distance_rf_map(q, kk, temperature=tau, features=8, seed=3)
    plain = rf.distance_rf_map(q, kk, temperature=tau, features=8, seed=3, control_variate=False)
    torch.testing.assert_close(p[worse], plain[worse], rtol=1e-12, atol=1e-15)
    assert float((p[better] - plain[better]).abs().max()) > 1e-6
