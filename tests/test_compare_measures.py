"""compare(): the scale-free measures (uniform baselines, rank agreement, verdicts), the focused kind, the KL supremum."""

from __future__ import annotations

import math
import re

import mpmath
import numpy as np
import pytest
import torch

from hypviz import attention as att
from hypviz import lorentz as L


def dense_map(q, kk, kind, tau, k=1.0, power=2.0, norm_scale=1.0):
    return att.attention_map(q, kk, kind, k=k, temperature=tau, power=power, norm_scale=norm_scale).double()


def tv_rows(p, q):
    return 0.5 * (p - q).abs().sum(-1)


# --------------------------------------------------------------------------- #
# the KL supremum
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("delta", [1e-6, 1e-3, 0.049, 0.05, 0.3, 1.0, 4.0, 8.0, 20.0, 200.0])
def test_kl_supremum_is_the_two_point_maximum(delta):
    got = float(att.kl_supremum(torch.tensor(delta, dtype=torch.float64)))
    with mpmath.workdps(40):
        d = mpmath.mpf(delta)
        exact = mpmath.log(mpmath.expm1(d) / d) - 1 + d / mpmath.expm1(d)
        theta = np.linspace(0.0, 1.0, 20001)
        brute = max(mpmath.log(1 - t + t * mpmath.e**d) - t * d for t in map(mpmath.mpf, theta[::50]))
    assert got == pytest.approx(float(exact), rel=1e-12)
    assert float(brute) <= got * (1 + 1e-12)  # the closed form is the maximum over theta
    assert got <= delta**2 / 8 * (1 + 1e-15)  # below Hoeffding's bound


def test_kl_supremum_quoted_values_and_asymptotics():
    v = att.kl_supremum(torch.tensor([8.0, 20.0, 1e4], dtype=torch.float64))
    assert round(float(v[0]), 2) == 4.92 and round(float(v[1]), 1) == 16.0
    assert float(v[2]) == pytest.approx(1e4 - 1 - math.log(1e4), rel=1e-9)
    assert att.kl_supremum(torch.tensor(0.0)).item() == 0.0


def test_two_point_rows_attain_the_kl_supremum():
    # a row with two keys whose bias differs by delta, weights (1 - theta*, theta*) under P
    for delta in (0.5, 3.0, 12.0):
        theta = 1 / delta - 1 / math.expm1(delta)
        p = torch.tensor([1 - theta, theta], dtype=torch.float64)
        b = torch.tensor([0.0, delta], dtype=torch.float64)
        s = p * torch.exp(b)
        s = s / s.sum()
        kl = float((p * (p / s).log()).sum())
        assert kl == pytest.approx(float(att.kl_supremum(torch.tensor(delta, dtype=torch.float64))), rel=1e-12)


# --------------------------------------------------------------------------- #
# uniform baselines, rank agreement, the focused kind
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("a,b", [("spatial", "distance"), ("focused", "distance"), ("spatial", "focused")])
@pytest.mark.parametrize("r", [0.05, 1.0, 8.0])
def test_streamed_measures_equal_dense_references(points, a, b, r):
    q, kk = points(37, 6, r, seed=1), points(29, 6, r, seed=2)
    tau = 1.7
    res = att.compare(q, kk, a, b, temperature=tau, block_rows=5, power=3.0, norm_scale=0.7, device="cpu")
    pa, pb = dense_map(q, kk, a, tau, power=3.0, norm_scale=0.7), dense_map(q, kk, b, tau, power=3.0, norm_scale=0.7)
    u = torch.full_like(pa, 1.0 / pa.shape[-1])
    scale = 1e-12  # float64 rows of 29 probabilities: rounding far below this
    assert torch.allclose(res.tv, tv_rows(pa, pb), atol=scale)
    assert torch.allclose(res.kl, (pb * (pb / pa).log()).sum(-1), atol=scale)
    assert torch.allclose(res.tv_uniform_a, tv_rows(pa, u), atol=scale)
    assert torch.allclose(res.tv_uniform_b, tv_rows(pb, u), atol=scale)
    # Spearman: no ties in random float64 data
    ra = pa.argsort(-1).argsort(-1).double()
    rb = pb.argsort(-1).argsort(-1).double()
    rho = torch.stack([torch.corrcoef(torch.stack([x, y]))[0, 1] for x, y in zip(ra, rb)])
    assert torch.allclose(res.spearman, rho, atol=1e-12)
    assert torch.equal(res.top1, pa.argmax(-1) == pb.argmax(-1))
    if "focused" in (a, b):
        assert not res.bound_applies and res.delta is None and res.bound_met is None
        assert "not applicable" in res.summary()
    else:
        assert res.bound_applies and res.all_bounds_met


def test_uniform_baseline_is_accurate_for_nearly_uniform_float32_rows(points):
    # at r = 1e-3 every row is within ~1e-7 of uniform: a direct 1/2 sum |p - 1/M| in float32 would be noise
    q, kk = points(16, 64, 1e-3, seed=3), points(256, 64, 1e-3, seed=4)
    r32 = att.compare(q.float(), kk.float(), "spatial", "distance", temperature=8.0)
    r64 = att.compare(q, kk, "spatial", "distance", temperature=8.0)
    assert float(r64.tv_uniform_b.min()) < 1e-6
    assert torch.allclose(r32.tv_uniform_b.double(), r64.tv_uniform_b, rtol=1e-3)
    assert torch.allclose(r32.tv_uniform_a.double(), r64.tv_uniform_a, rtol=1e-3)


def test_exact_ties_are_not_split_by_rounding():
    # keys that are rotations of each other around the query's axis: equal distances in exact arithmetic
    d = 3
    angles = torch.linspace(0, 2 * math.pi, 9, dtype=torch.float64)[:-1]
    ring = torch.stack([torch.full_like(angles, 0.7), 0.9 * torch.cos(angles), 0.9 * torch.sin(angles)], -1)
    keys = L.lift(torch.cat([ring, torch.tensor([[-2.0, 0.0, 0.0]], dtype=torch.float64)]))
    q = L.lift(torch.tensor([[1.3, 0.0, 0.0]], dtype=torch.float64))
    assert d == keys.shape[-1] - 1
    for dtype in (torch.float32, torch.float64):
        res = att.compare(q.to(dtype), keys.to(dtype), "spatial", "distance", topk=3, device="cpu")
        # the 8 ring keys tie for first in both maps: whichever one rounding favours, they agree
        assert bool(res.top1.all()) and float(res.topk_overlap.min()) == 1.0


def test_verdict_rules():
    kw = dict(peak_a=5.0, peak_b=5.0, top1_weight=1.0)
    near = dict(peak_a=1.1, peak_b=1.1, top1_weight=1.0)
    assert att.verdict(0.001, 0.01, 0.02, **near) == "uninformative"
    assert att.verdict(0.01, 0.3, 0.2, **kw) == "close"  # 0.01 <= 0.25 * min(0.3, 0.2)
    assert att.verdict(0.06, 0.3, 0.2, **kw) == "different"
    # the same numbers with the favourite keys disagreeing are not close
    assert att.verdict(0.01, 0.3, 0.2, peak_a=5.0, peak_b=5.0, top1_weight=0.5) == "different"
    # a near-uniform reference and a sharp map are not "uninformative"
    assert att.verdict(0.3, 0.4, 0.01, **kw) == "different"
    # near uniform in TV but one key far above its uniform weight: not uninformative
    assert att.verdict(0.04, 0.04, 0.04, peak_a=4000.0, peak_b=4000.0, top1_weight=0.0) == "different"
    # at the rounding level: identical, even when both maps are near uniform
    assert att.verdict(1e-17, 1e-5, 1e-5, tolerance=1e-16, **near) == "identical"
    assert att.UNIFORM_TV == 0.05 and att.CLOSE_RATIO == 0.25 and att.UNIFORM_PEAK == 2.0


def test_verdict_is_symmetric_in_the_two_maps():
    for tv, ua, ub in [(0.2, 0.7, 0.9), (0.01, 0.3, 0.04), (0.05, 0.06, 0.5)]:
        for pa, pb in [(1.5, 30.0), (3.0, 3.0)]:
            one = att.verdict(tv, ua, ub, peak_a=pa, peak_b=pb, top1_weight=1.0)
            assert one == att.verdict(tv, ub, ua, peak_a=pb, peak_b=pa, top1_weight=1.0)


def test_verdicts_of_the_three_regimes(points):
    # lorentz vs distance: equal maps
    q, kk = points(32, 16, 3.0, seed=5), points(64, 16, 3.0, seed=6)
    assert att.compare(q, kk, "lorentz", "distance").verdict == "identical"
    # tiny norms: both maps uniform to 1e-5, however much they differ relative to that
    q, kk = points(32, 16, 0.01, seed=5), points(64, 16, 0.01, seed=6)
    res = att.compare(q, kk, "spatial", "distance")
    assert res.verdict == "uninformative" and res.gap_ratio > 0.25
    # Gaussian points at a useful scale: the gap is half the structure
    q, kk = points(64, 64, 3.0, seed=7), points(256, 64, 3.0, seed=8)
    res = att.compare(q, kk, "spatial", "distance", temperature=8.0)
    assert res.verdict in ("different", "mixed") and 0.4 < res.gap_ratio < 0.8
    assert res.row_verdicts["different"] > 0.5
    d = res.to_dict()
    assert d["verdict"] in ("different", "mixed") and set(d["row_verdicts"]) == set(att.ROW_VERDICTS)


def test_equal_key_norms_make_spatial_and_distance_identical(points):
    # keys on a sphere |kappa_s| = const: the bias q_t kappa_t is constant over keys and cancels
    g = torch.Generator().manual_seed(9)
    ks = torch.randn(50, 8, generator=g, dtype=torch.float64)
    ks = 4.0 * ks / ks.norm(dim=-1, keepdim=True)
    q, kk = points(20, 8, 4.0, seed=10), L.lift(ks)
    res = att.compare(q, kk, "spatial", "distance")
    assert res.max_tv < 1e-12 and res.verdict == "identical"


def test_attention_map_focused_is_the_focused_linear_map(points):
    q, kk = points(9, 5, 2.0, seed=11), points(7, 5, 2.0, seed=12)
    got = att.attention_map(q, kk, "focused", power=3.0, norm_scale=2.0)
    assert torch.allclose(got, att.focused_linear_map(q, kk, power=3.0, norm_scale=2.0), rtol=1e-14)
    with pytest.raises(ValueError,
                       match="kind must be one of " + re.escape(", ".join(map(repr, att.SOFTMAX_KINDS))) + ", got 'focused'"):
        att.scores(q, kk, "focused")
