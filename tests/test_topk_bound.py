"""distance_topk's ``met`` is a guarantee: where it says so, the true TV is within the row's target.

Each case compares a result with the exact distance map computed in float64 from the same points: ``row_bound``
is never below the true :math:`\\mathrm{TV}(\\hat P_i, P_i)`, a row reported ``met`` has the true TV at most
``tol`` times the true :math:`\\mathrm{TV}(\\hat P_i, U)`, and ``certify=True`` makes every row ``met``.  The cases
are the ones a sampled estimate misses: a few large-norm ("sink") keys among Gaussian keys, keys far below the
rest, one key far above the rest, queries far from every key, two clusters (multimodal rows), and Gaussian keys
from near-uniform to sharp maps, in float32 and float64, on two seeds.
"""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.attention.approx.topk_tail import TOL, _range_error

D = 16


def _gauss(n, r, seed, dtype=torch.float32, d=D):
    g = torch.Generator().manual_seed(seed)
    return L.lift((torch.randn(n, d, generator=g, dtype=torch.float64) * r / math.sqrt(d)).to(dtype), k=1.0)


def _with_sinks(kk, count, norm, seed=9):
    sp = kk[:, 1:].clone()
    dirs = torch.randn(count, sp.shape[-1], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    sp[:count] = (dirs / dirs.norm(dim=-1, keepdim=True) * norm).to(sp.dtype)
    return L.lift(sp, k=1.0)


def _at_logits(logits, seed=3, d=8):
    """Keys whose distance logit from the origin is ``logits`` (temperature 1): time coordinate 1 - logit."""
    kt = 1.0 - logits.double()
    dirs = torch.randn(len(logits), d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return L.lift((dirs / dirs.norm(dim=-1, keepdim=True) * (kt * kt - 1).clamp_min(0).sqrt().unsqueeze(-1)), k=1.0)


def _truth(res, q, kk, tau):
    """The true TV of each row's map from the exact map, and the map's true TV from uniform (float64)."""
    s = -0.5 * (-2.0 - 2.0 * L.pairwise_inner(q.double(), kk.double())).clamp_min(0.0) / tau
    exact = torch.softmax(s, -1)
    t, beta, gamma = (c.double().unsqueeze(-1) for c in res.cut.unbind(-1))
    u = s - t
    w = torch.where(u >= 0, torch.exp(s - s.amax(-1, keepdim=True)),
                    torch.exp(t - s.amax(-1, keepdim=True)) * (1.0 + beta * u + gamma * u * u))
    p = w / w.sum(-1, keepdim=True)
    every = res.top_counts >= kk.shape[-2]
    p[every] = exact[every]
    return 0.5 * (p - exact).abs().sum(-1), 0.5 * (p - 1.0 / kk.shape[-2]).abs().sum(-1)


def _check(q, kk, tau, **kwargs):
    """``met`` and ``row_bound`` hold on every row; ``certify=True`` meets every row; returns the default result."""
    res = att.distance_topk_attention(q, kk, temperature=tau, **kwargs)
    tv, base = _truth(res, q, kk, tau)
    assert bool((tv <= res.row_bound.double() * (1 + 1e-9) + 1e-12).all()), float((tv - res.row_bound.double()).max())
    assert bool((tv[res.met] <= TOL * base[res.met] + 1e-12).all()), float((tv / base)[res.met].max())
    assert not bool((res.met & res.estimated).any())
    assert bool((res.row_baseline_low.double() <= base * (1 + 1e-9) + 1e-12).all())  # a lower bound on TV(P_hat, U)
    assert torch.equal(res.met, res.row_bound <= TOL * res.row_baseline_low)
    sure = att.distance_topk_attention(q, kk, temperature=tau, certify=True, **kwargs)
    tv_s, base_s = _truth(sure, q, kk, tau)
    assert bool(sure.met.all()) and bool((tv_s <= TOL * base_s + 1e-12).all())
    return res, tv, base


@pytest.mark.parametrize("count, norm", [(1, 100.0), (16, 30.0), (5, 1000.0)])
def test_sink_keys_are_never_met_by_the_estimate_alone(count, norm):
    tau = 8.0
    q, kk = _gauss(64, math.sqrt(1.25 * tau), 1), _with_sinks(_gauss(4096, math.sqrt(1.25 * tau), 2), count, norm)
    res, tv, base = _check(q, kk, tau)
    wrong = tv > TOL * base
    if count < 16:  # the estimate misses rows here (a sink key takes weight it should not) ...
        assert bool(wrong.any())
    assert not bool(res.met[wrong].any()) and bool(res.estimated[wrong].all())  # ... and they say "estimated"


def test_keys_far_below_the_rest():
    # 4,093 keys with logits in [-3, 0], 3 at -500; the query at the origin (the sampled estimate said 0.001, true 0.99)
    logits = torch.cat([-3 * torch.rand(4093, generator=torch.Generator().manual_seed(4), dtype=torch.float64),
                        torch.full((3,), -500.0, dtype=torch.float64)])
    _check(L.lift(torch.zeros(4, 8, dtype=torch.float64), k=1.0), _at_logits(logits), 1.0)


def test_one_key_far_above_the_rest():
    logits = torch.cat([torch.zeros(1, dtype=torch.float64),
                        -9 - 0.2 * torch.rand(4095, generator=torch.Generator().manual_seed(5), dtype=torch.float64)])
    res, tv, base = _check(L.lift(torch.zeros(4, 8, dtype=torch.float64), k=1.0), _at_logits(logits), 1.0)
    assert not bool(res.met[tv > TOL * base].any())


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("r2_tau", [0.00125, 0.125, 1.25, 12.5, 125.0])
def test_gaussian_keys_from_near_uniform_to_sharp(r2_tau, dtype, seed):
    tau = 8.0
    r = math.sqrt(r2_tau * tau)
    _check(_gauss(32, r, seed, dtype), _gauss(1024, r, seed + 10, dtype), tau)


def test_sharp_rows_are_certified():
    # r^2/tau = 125: the top keys carry the weight, and the bound shows it on most rows without certify
    tau = 8.0
    q, kk = _gauss(64, math.sqrt(125 * tau), 1), _gauss(4096, math.sqrt(125 * tau), 2)
    res, _, _ = _check(q, kk, tau)
    listed = res.top_counts < 4096
    assert float(res.met[listed].double().mean()) >= 0.8
    assert float(res.row_bound[listed].double().median()) <= 0.02


def test_queries_far_from_every_key_and_two_clusters():
    tau = 1.0
    far = _gauss(16, 1.0, 1, torch.float64)
    far = L.lift(far[:, 1:] + 20.0, k=1.0)  # every query far from the keys
    centres = torch.zeros(2, D, dtype=torch.float64)
    centres[0, 0], centres[1, 0] = 3.0, -3.0
    spread = 0.3 * torch.randn(2048, D, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    kk = L.lift(centres.repeat(1024, 1) + spread, k=1.0)  # two clusters: rows with two modes
    near = L.lift(0.1 * torch.randn(16, D, generator=torch.Generator().manual_seed(7), dtype=torch.float64), k=1.0)
    _check(torch.cat([far, near]), kk, tau)


def test_clustered_keys_with_the_index_are_never_certified_by_it():
    pytest.importorskip("faiss")
    tau = 8.0
    centres = 12.0 * torch.randn(32, D, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    x = centres.repeat(80, 1) + torch.randn(2560, D, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    pts = L.lift(x.float(), k=1.0)
    q, kk = pts[:256], pts[256:]
    res = att.distance_topk_attention(q, kk, temperature=tau, search="index")
    tv, base = _truth(res, q, kk, tau)
    assert bool((tv[res.met] <= TOL * base[res.met] + 1e-12).all())
    assert bool(res.met[res.top_counts < kk.shape[0]].logical_not().all())  # only rows with every key exact are met


def test_the_range_error_is_an_upper_bound_and_close_to_the_maximum():
    lo = torch.tensor([-0.5, -3.0, -40.0, -1e-3], dtype=torch.float64)
    hi = torch.tensor([0.0, -1.0, -2.0, 0.0], dtype=torch.float64)
    beta = torch.tensor([0.9, 0.3, 0.05, 1.0], dtype=torch.float64)
    gamma = torch.tensor([0.4, 0.03, 0.001, 0.5], dtype=torch.float64)
    got = _range_error(lo, hi, beta, gamma)
    u = lo.unsqueeze(-1) + (hi - lo).unsqueeze(-1) * torch.linspace(0, 1, 200_001, dtype=torch.float64)
    true = (1 + beta.unsqueeze(-1) * u + gamma.unsqueeze(-1) * u * u - torch.exp(u)).abs().amax(-1)
    assert bool((got >= true).all()) and bool((got <= true * 1.02 + 1e-4).all()), (got, true)


def test_certify_is_a_bool():
    q, kk = _gauss(4, 1.0, 1), _gauss(64, 1.0, 2)
    with pytest.raises(TypeError, match="certify must be True or False, got 'yes'"):
        att.distance_topk_attention(q, kk, certify="yes")


def test_top_takes_numpy_integers_and_ties_are_listed_by_index():
    import numpy as np

    tau = 8.0
    q, kk = _gauss(16, 3.0, 1), _gauss(300, 3.0, 2)
    a = att.distance_topk_attention(q, kk, temperature=tau, top=(16, 64))
    b = att.distance_topk_attention(q, kk, temperature=tau, top=(np.int64(16), np.int32(64)))
    assert torch.equal(a.top_counts, b.top_counts) and torch.equal(a.indices, b.indices)
    with pytest.raises(ValueError, match="top must be a non-empty sequence of non-negative integers"):
        att.distance_topk_attention(q, kk, temperature=tau, top=(np.bool_(True), 16))
    # three copies of every key: equal logits up to the product's rounding, listed by index whatever the BLAS kernel
    keys = torch.cat([kk, kk, kk])
    res = att.distance_topk_attention(q, keys, temperature=tau, top=(6,), exact_fallback=False)
    want = att.exact_top_keys(q, keys, 6).indices
    assert torch.equal(res.padded()[1], want)
    first = want[:, 0]
    assert torch.equal(want[:, :3], torch.stack([first, first + 300, first + 600], -1))


def _tail_map(s, t, beta, gamma):
    """The kind's map of logits ``s`` (rows x keys) with the cut ``t`` and the tail polynomial ``1 + beta u + gamma u^2``."""
    m = s.amax(-1, keepdim=True)
    u = s - t
    w = torch.where(u >= 0, torch.exp(s - m), torch.exp(t - m) * (1.0 + beta * u + gamma * u * u))
    return w / w.sum(-1, keepdim=True)


def test_the_rounding_allowance_covers_logits_moved_by_their_rounding():
    """``_rounding(err)`` bounds the TV that moving every logit by at most ``err`` can cause, and is within 10x of
    it where the move is worst: two equal top keys moved apart by ``err`` each (TV ``tanh(err) / 2``)."""
    from hypviz.attention.approx.topk_tail import _rounding

    f64 = torch.float64
    for err in (1e-4, 1e-3, 1e-2):  # above the weights' own rounding (16 eps)
        s = torch.tensor([[0.0, 0.0, -5.0, -6.0]], dtype=f64)
        zero = torch.zeros(1, 1, dtype=f64)
        moved = s + err * torch.tensor([[1.0, -1.0, -1.0, -1.0]], dtype=f64)
        tv = 0.5 * (_tail_map(moved, zero - 1.0, zero, zero) - _tail_map(s, zero - 1.0, zero, zero)).abs().sum(-1)
        allowance = _rounding(torch.tensor([err], dtype=f64), zero[:, 0], zero[:, 0], torch.float32)
        assert float(allowance) >= float(tv) > float(allowance) / 10, (err, float(tv), float(allowance))
    # tails from real fits, every logit moved by +-err at random: never above the allowance
    q, kk = _gauss(64, math.sqrt(1.25 * 8.0), 1), _gauss(2048, math.sqrt(1.25 * 8.0), 2)
    res = att.distance_topk_attention(q, kk, temperature=8.0, top=(16, 64), exact_fallback=False)
    s = -0.5 * (-2.0 - 2.0 * L.pairwise_inner(q.double(), kk.double())).clamp_min(0.0) / 8.0
    t, beta, gamma = (c.double().unsqueeze(-1) for c in res.cut.unbind(-1))
    g = torch.Generator().manual_seed(5)
    err = 1e-3
    moved = s + err * (2.0 * torch.randint(0, 2, s.shape, generator=g, dtype=f64) - 1.0)
    tv = 0.5 * (_tail_map(moved, t, beta, gamma) - _tail_map(s, t, beta, gamma)).abs().sum(-1)
    allowance = _rounding(torch.full((64,), err, dtype=f64), beta[:, 0], gamma[:, 0], torch.float32)
    assert bool((tv <= allowance).all())


def test_the_floor_of_the_logits_holds_where_cauchy_schwarz_is_tight():
    """Keys antiparallel to the query at the largest centred norm: their computed float32 logits reach the
    Cauchy-Schwarz floor to within rounding, on either side; ``_logit_floor``'s slack keeps every one above it."""
    from hypviz.attention.approx.topk_tail import _logit_floor
    from hypviz.attention.maps.kernels import logit_error

    g = torch.Generator().manual_seed(11)
    below_exact = 0
    for trial in range(20):
        a = torch.randn(32, 24, generator=g, dtype=torch.float64) * 30.0
        centre = torch.randn(24, generator=g, dtype=torch.float64)
        unit = a / a.norm(dim=-1, keepdim=True)
        reach = 50.0
        spread = torch.randn(64, 24, generator=g, dtype=torch.float64)
        spread = spread / spread.norm(dim=-1, keepdim=True) * (reach * 0.9)
        b = torch.cat([centre - reach * unit, centre + reach * unit, centre + spread, centre - spread]).float()
        a32 = a.float()
        s = (a32 @ b.T).double()
        b64 = b.double()
        bbar = b64.mean(0)
        reach64 = float((b64 - bbar).norm(dim=-1).max())
        ms = a32.double() @ bbar
        floor = _logit_floor(a32.double(), ms, reach64, logit_error(a32, b).double())
        assert bool((s >= floor.unsqueeze(-1)).all()), trial
        below_exact += int((s < (ms - a32.double().norm(dim=-1) * reach64).unsqueeze(-1)).sum())
    assert below_exact > 0  # the case is tight: without the slack some computed logit falls below the floor
