"""The softmax bounds (derived in notebook 04), checked numerically: KL <= Delta^2/8 and TV <= tanh(Delta/4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hypviz import lorentz
from hypviz.attention.comparison import accuracy as acc

SLACK = 1e-12  # relative float64 slack on a bound


def _rows(scales, n_sets=4, n_q=16, n_k=24, d=16, k=1.0, spread=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.as_tensor(scales, dtype=torch.float64)[:, None, None, None]
    qs = torch.randn(len(scales), n_sets, n_q, d, generator=g, dtype=torch.float64) * s / math.sqrt(d)
    ks = torch.randn(len(scales), n_sets, n_k, d, generator=g, dtype=torch.float64) * s / math.sqrt(d)
    if spread:  # very unequal key norms: large Delta
        ks = ks * torch.exp(torch.randn(len(scales), n_sets, n_k, 1, generator=g, dtype=torch.float64))
    return lorentz.lift(qs, k=k), lorentz.lift(ks, k=k)


@pytest.mark.parametrize("k", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("spread", [False, True], ids=["gaussian", "spread-norms"])
def test_bounds_hold_on_random_rows(k, spread):
    scales = np.logspace(-2, 1, 7)
    q, keys = _rows(scales, k=k, spread=spread, seed=int(10 * k) + spread)
    tau = 4.0
    res = acc.softmax_gap_bounds(q, keys, tau, k=k)
    assert res.tv.shape == (7, 4, 16) and res.tv.dtype == torch.float64
    assert bool((res.tv >= 0).all()) and bool((res.tv <= 1 + 1e-12).all())
    assert bool((res.kl >= -1e-15).all())
    assert bool((res.tv <= res.tv_bound * (1 + SLACK) + 1e-300).all())
    assert bool((res.kl <= res.kl_bound * (1 + SLACK) + 1e-16).all())
    assert bool((res.tv <= torch.sqrt(res.kl.clamp_min(0) / 2) * (1 + 1e-9) + 1e-12).all())  # Pinsker
    assert bool((res.tv_bound <= res.delta / 4 + 1e-15).all())  # tanh(x) <= x
    # the bias matters more for larger points, and the bound is not vacuous there
    per_scale = res.tv.mean(dim=(1, 2))
    assert per_scale[-1] > 100 * per_scale[0]
    assert float((res.tv / res.tv_bound).max()) > 0.05


def test_delta_matches_its_definition():
    q, keys = _rows([1.0, 5.0], n_sets=2, seed=3)
    res = acc.softmax_gap_bounds(q, keys, 2.5, k=1.0)
    b = q[..., :, :1] * keys[..., None, :, 0] / 2.5  # (.., n_q, n_k) bias
    delta = b.amax(-1) - b.amin(-1)
    assert torch.allclose(res.delta, delta, rtol=1e-12)
    assert torch.allclose(res.kl_bound, delta**2 / 8) and torch.allclose(res.tv_bound, torch.tanh(delta / 4))


def test_float32_input_is_measured_in_float64():
    q, keys = _rows([0.5, 2.0], seed=4)
    r64 = acc.softmax_gap_bounds(q, keys, 3.0)
    q32 = lorentz.lift(q[..., 1:].float())
    k32 = lorentz.lift(keys[..., 1:].float())
    r32 = acc.softmax_gap_bounds(q32, k32, 3.0)
    assert r32.tv.dtype == torch.float64
    assert torch.allclose(r32.tv, r64.tv, rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize(
    "qn, kn, d, tau, k",
    [(2.0, 2.0, 2, 1.0, 1.0), (3.0, 1.0, 4, 2.0, 0.5), (5.0, 1.0, 8, 8.0, 2.0), (8.0, 6.0, 3, 1.5, 1.0),
     (1.2, 1.1, 2, 0.25, 1.0)],
)
def test_two_point_rows_attain_the_tv_bound(qn, kn, d, tau, k):
    q, keys = acc.worst_case_row(qn, kn, d=d, temperature=tau, k=k)
    lorentz.check_points(q, k=k)
    lorentz.check_points(keys, k=k)
    res = acc.softmax_gap_bounds(q, keys, tau, k=k)
    ratio = float(res.tv / res.tv_bound)
    assert 1 - 1e-9 < ratio <= 1 + SLACK
    assert float(res.kl) <= float(res.kl_bound) * (1 + SLACK)


@pytest.mark.parametrize("shift", [0.05, -0.05, 0.3, -0.3])
def test_moving_off_the_worst_case_lowers_tv(shift):
    delta = math.sqrt(5) * (math.sqrt(5) - 1)  # query and key norm 2, k = 1, tau = 1
    p_star = 1 / (1 + math.exp(delta / 2))
    q, keys = acc.worst_case_row(2.0, 2.0, p1=p_star + shift * p_star)
    res = acc.softmax_gap_bounds(q, keys, 1.0)
    assert float(res.delta) == pytest.approx(delta)
    assert float(res.tv) < float(res.tv_bound) * (1 - 1e-6)


def test_hoeffding_is_tight_for_small_delta():
    ratios = []
    for norm in (0.4, 0.2, 0.1):
        q, keys = acc.worst_case_row(norm, norm, p1=0.5)
        res = acc.softmax_gap_bounds(q, keys, 1.0)
        ratios.append(float(res.kl / res.kl_bound))
    assert all(r <= 1 + SLACK for r in ratios)
    assert ratios[0] < ratios[1] < ratios[2] and ratios[2] > 0.9999


def test_adversarial_random_rows_near_the_bound():
    """Many two-key rows with P_1 around the maximiser: TV/bound is <= 1 and reaches it."""
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(40):
        qn, kn = rng.uniform(1.5, 6.0), rng.uniform(1.0, 4.0)
        delta = math.sqrt(qn**2 + 1) * (math.sqrt(kn**2 + 1) - 1)
        p_star = 1 / (1 + math.exp(delta / 2))
        p1 = float(np.clip(p_star * math.exp(rng.normal(scale=0.2)), 1e-6, 1 - 1e-6))
        try:
            q, keys = acc.worst_case_row(qn, kn, d=3, p1=p1)
        except ValueError:
            continue
        res = acc.softmax_gap_bounds(q, keys, 1.0)
        ratio = float(res.tv / res.tv_bound)
        assert ratio <= 1 + SLACK
        worst = max(worst, ratio)
    assert worst > 0.99


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, kk: acc.softmax_gap_bounds(q, kk, 0.0), "temperature must be"),
        (lambda q, kk: acc.softmax_gap_bounds(q, kk, float("nan")), "temperature must be"),
        (lambda q, kk: acc.softmax_gap_bounds(q[0], kk, 1.0), "queries"),
        (lambda q, kk: acc.softmax_gap_bounds(q, lorentz.lift(torch.zeros(3, 5, dtype=torch.float64)), 1.0), "last dimensions"),
        (lambda q, kk: acc.softmax_gap_bounds(q * 2, kk, 1.0), "off the hyperboloid"),
        (lambda q, kk: acc.softmax_gap_bounds(q, kk, 1.0, k=-1.0), "k must be"),
    ],
)
def test_bad_input_is_refused(call, message):
    q, keys = acc.worst_case_row(2.0, 2.0, d=3)
    with pytest.raises(ValueError, match=message):
        call(q, keys)


def test_worst_case_row_refuses_impossible_geometry():
    with pytest.raises(ValueError, match="no worst-case angle"):
        acc.worst_case_row(0.1, 5.0)
    with pytest.raises(ValueError, match="p1"):
        acc.worst_case_row(2.0, 2.0, p1=1.0)
    with pytest.raises(ValueError, match="d must be an integer >= 2"):
        acc.worst_case_row(2.0, 2.0, d=1)
