"""hypviz.attention: score kinds, maps, Hypformer's focused linear attention, streaming compare()."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.attention.maps.kernels import softmax_rows_
from hypviz.base import kinds


def as64(x: torch.Tensor, k: float = 1.0) -> torch.Tensor:
    """The float64 point with the same spatial part (re-lifted, so it is on the hyperboloid in float64)."""
    return L.lift(x[..., 1:].double(), k=k)


# --------------------------------------------------------------------------- #
# brute-force float64 references (broadcasting, textbook formulas)
# --------------------------------------------------------------------------- #
def ref_scores(q: torch.Tensor, kk: torch.Tensor, kind: str, k: float = 1.0) -> torch.Tensor:
    """The scores of ``kind`` as its registry entry states them, never a formula per kind here: a ``"bilinear"`` kind's
    raw scores are :math:`-\\tfrac12 \\langle q - \\kappa, q - \\kappa\\rangle_L + c\\, q_t \\kappa_t - o k` (``c``, ``o``: the
    entry's ``bias`` and ``constant``), the difference's square by broadcasting (no identity used).  Each kind's own
    formula is checked once, by its reference in ``tests/test_kinds.py``; identities 4 and 5 are checked below."""
    entry = kinds.get(kind)
    if entry.kernel != "bilinear":
        pytest.fail(f"no reference scores for kind {kind!r} (kernel {entry.kernel!r}): ref_scores in tests/test_attention.py "
                    f"reads them from the registry entry ('bias', 'constant') of 'bilinear' kinds only; add kernel "
                    f"{entry.kernel!r}'s scores there, from the entry's formula {entry.formula!r}")
    assert entry.bias is not None  # a 'bilinear' kind always states its key-norm bias (the registry refuses None)
    qq, ks = q.double().unsqueeze(-2), kk.double().unsqueeze(-3)
    diff = qq - ks  # <q-k, q-k>_L directly
    sqdist = -(diff[..., 0] ** 2) + (diff[..., 1:] ** 2).sum(-1)
    return -0.5 * sqdist + entry.bias * qq[..., 0] * ks[..., 0] - entry.constant * k


def ref_phi(xs: torch.Tensor, p: float, s: float) -> torch.Tensor:
    y = (torch.relu(xs.double()) + 1e-6) / (abs(s) + 1e-6)
    yp = y**p
    return (y.norm(dim=-1, keepdim=True) / yp.norm(dim=-1, keepdim=True)) * yp


def ref_stats(q, kk, a, b, tau, k=1.0, t=5):
    la = ref_scores(q, kk, a, k) / tau
    lb = ref_scores(q, kk, b, k) / tau
    lpa, lpb = torch.log_softmax(la, -1), torch.log_softmax(lb, -1)
    pa, pb = lpa.exp(), lpb.exp()
    kl = (pb * (lpb - lpa)).sum(-1)
    tv = 0.5 * (pa - pb).abs().sum(-1)
    g = lb - la
    gap = g.amax(-1) - g.amin(-1)
    return dict(kl=kl, tv=tv, gap=gap, la=la, lb=lb)


# --------------------------------------------------------------------------- #
# scores and maps
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("kind", att.SOFTMAX_KINDS)
@pytest.mark.parametrize("k", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("r", [0.05, 1.0, 4.0])
def test_scores_match_bruteforce_float64(points, kind, k, r):
    q, kk = points(17, 5, r, k=k, seed=1), points(13, 5, r, k=k, seed=2)
    got = att.scores(q, kk, kind, k=k)
    ref = ref_scores(q, kk, kind, k)
    assert got.shape == (17, 13) and got.dtype == torch.float64
    scale = 1.0 + ref.abs().max()
    assert torch.allclose(got, ref, rtol=0, atol=1e-12 * float(scale))


def test_distance_scores_agree_with_lorentz_pairwise_sqdist(points):
    q, kk = points(40, 8, 2.0, k=2.0, seed=3), points(30, 8, 2.0, k=2.0, seed=4)
    assert torch.allclose(att.scores(q, kk, "distance", k=2.0), -0.5 * L.pairwise_sqdist(q, kk, k=2.0), atol=1e-12)
    assert bool((att.scores(q, q, "distance", k=2.0) <= 0).all())


@pytest.mark.parametrize("r", [0.01, 0.3, 3.0])
def test_scores_float32_close_to_float64(points, r):
    q, kk = points(64, 16, r, dtype=torch.float32, seed=5), points(48, 16, r, dtype=torch.float32, seed=6)
    for kind in att.SOFTMAX_KINDS:
        got = att.scores(q, kk, kind).double()
        ref = ref_scores(as64(q), as64(kk), kind)
        # float32: error of order eps times the size of the terms, |q_t k_t| at most
        size = float((q[:, 0:1].double() * kk[:, 0].double()).max())
        assert float((got - ref).abs().max()) < 64 * 1.2e-7 * size, kind


def test_identities_4_and_5(points):
    k = 1.7
    q, kk = points(20, 6, 1.5, k=k, seed=7), points(25, 6, 1.5, k=k, seed=8)
    sp, di, lo = (att.scores(q, kk, kind, k=k) for kind in ("spatial", "distance", "lorentz"))
    bias = q[:, 0:1] * kk[:, 0].unsqueeze(0)
    assert torch.allclose(sp, di + bias - k, atol=1e-12)  # identity 4
    assert torch.allclose(lo, di - k, atol=1e-12)  # identity 5
    # the maps: hypviz evaluates "lorentz" from the distance operands, so its map is checked against the softmax of the
    # brute-force <q, kappa>_L = -q_t kappa_t + q_s . kappa_s (an independent computation), not against its "distance" map
    inner = -q[:, None, 0] * kk[None, :, 0] + (q[:, None, 1:] * kk[None, :, 1:]).sum(-1)
    direct = torch.softmax(inner / math.sqrt(6), -1)
    assert torch.allclose(att.attention_map(q, kk, "lorentz", k=k), direct, rtol=0, atol=1e-14)


@pytest.mark.parametrize("kind", att.SOFTMAX_KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_map_is_row_softmax(points, kind, dtype):
    q, kk = points(33, 9, 1.2, dtype=dtype, seed=9), points(70, 9, 1.2, dtype=dtype, seed=10)
    A = att.attention_map(q, kk, kind)
    assert A.shape == (33, 70) and A.dtype == dtype
    assert bool((A >= 0).all())
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    assert torch.allclose(A.sum(-1), torch.ones(33, dtype=dtype), atol=tol)
    ref = torch.softmax(ref_scores(as64(q), as64(kk), kind) / 3.0, -1)  # default tau = sqrt(9)
    assert float((A.double() - ref).abs().max()) < (1e-6 if dtype == torch.float32 else 1e-14)
    A2 = att.attention_map(q, kk, kind, temperature=0.5)
    ref2 = torch.softmax(ref_scores(as64(q), as64(kk), kind) / 0.5, -1)
    assert float((A2.double() - ref2).abs().max()) < (1e-5 if dtype == torch.float32 else 1e-13)


def test_in_place_softmax_both_paths():
    x = torch.randn(37, 300, dtype=torch.float64) * 30
    ref = torch.softmax(x, -1)
    fused = softmax_rows_(x.clone())  # contiguous CPU tensor: torch's fused kernel, in place
    passes = softmax_rows_(x.T.contiguous().T)  # non-contiguous: the in-place passes
    assert torch.allclose(fused, ref, atol=1e-15) and torch.allclose(passes, ref, atol=1e-15)
    y = x.clone()
    ptr = y.data_ptr()
    assert softmax_rows_(y).data_ptr() == ptr and torch.allclose(y, ref, atol=1e-15)


def test_attention_map_large_rows_equals_softmax(points):
    q, kk = points(300, 4, 1.0, seed=11), points(4000, 4, 1.0, seed=12)
    A = att.attention_map(q, kk, "distance", temperature=0.7)
    assert torch.allclose(A, torch.softmax(ref_scores(q, kk, "distance") / 0.7, -1), atol=1e-14)


def test_multi_head_and_broadcasting_shapes(points):
    q = points(11, 6, 1.0, seed=13, lead=(2, 3))
    kk = points(7, 6, 1.0, seed=14, lead=(3,))
    for kind in att.SOFTMAX_KINDS:
        S = att.scores(q, kk, kind)
        assert S.shape == (2, 3, 11, 7)
        assert torch.allclose(S[1, 2], att.scores(q[1, 2], kk[2], kind))
        A = att.attention_map(q, kk, kind)
        assert A.shape == (2, 3, 11, 7)
        assert torch.allclose(A[0, 1], att.attention_map(q[0, 1], kk[1], kind), atol=1e-15)
    F = att.focused_linear_map(q, kk)
    assert F.shape == (2, 3, 11, 7)
    v = points(7, 4, 1.0, seed=15, lead=(3,))
    out = att.focused_linear_attention(q, kk, v)
    assert out.shape == (2, 3, 11, 4)


def test_numpy_inputs_give_torch_outputs(points):
    q, kk = points(5, 3, 1.0, seed=16).numpy(), points(4, 3, 1.0, seed=17).numpy()
    A = att.attention_map(q, kk, "spatial")
    assert isinstance(A, torch.Tensor) and A.dtype == torch.float64


# --------------------------------------------------------------------------- #
# "distance_rf": the distance map by positive random features (hypviz.attention.approx.random_features)
# --------------------------------------------------------------------------- #
def ref_distance_rf(q, kk, omega, tau, k=1.0, control=True):
    """Dense float64 reference, N x M x D by broadcasting: the textbook features of J q / sqrt(tau) and kappa / sqrt(tau).

    phi_w(x) = exp(w.x - |x|^2/2); w_t enters with the opposite sign to the package's centred coordinates
    (the same random variable); on the rows with |a| max|b| < 1 the first-order control variate
    1 + a.b + mean_w[phi phi - (1 + w.a)(1 + w.b)] with a = (u, q_s)/sqrt(tau), b = (-w, kappa_s)/sqrt(tau).
    """
    q, kk, om = q.double(), kk.double(), omega.double()
    om_raw = torch.cat([-om[:, :1], om[:, 1:]], dim=-1)
    jq = torch.cat([-q[:, :1], q[:, 1:]], dim=-1) / math.sqrt(tau)
    kt = kk / math.sqrt(tau)
    phi_q = torch.exp(jq @ om_raw.T - 0.5 * (jq * jq).sum(-1, keepdim=True))  # (N, D)
    phi_k = torch.exp(kt @ om_raw.T - 0.5 * (kt * kt).sum(-1, keepdim=True))  # (M, D)
    w = (phi_q[:, None, :] * phi_k[None, :, :]).mean(-1)  # (N, M), unbiased for exp(<q, kappa>_L / tau)
    if control:
        rk = math.sqrt(k)
        u = (q[:, 0] - rk)[:, None]  # float64 points of modest norm: no cancellation that matters here
        wk = (kk[:, 0] - rk)[:, None]
        a = torch.cat([u, q[:, 1:]], -1) / math.sqrt(tau)
        b = torch.cat([-wk, kk[:, 1:]], -1) / math.sqrt(tau)
        ca, cb = (torch.exp(a @ om.T - 0.5 * (a * a).sum(-1, keepdim=True)),
                  torch.exp(b @ om.T - 0.5 * (b * b).sum(-1, keepdim=True)))
        # the rows where every weight is provably positive and the row sum's sample variance drops
        an, reach = a.norm(dim=-1), b.norm(dim=-1).max()
        spread = torch.linalg.eigvalsh(om.T @ om / om.shape[0] - torch.eye(om.shape[1], dtype=torch.float64)).abs().max()
        fac = torch.exp(-rk * wk[:, 0] / tau)
        x = ca * (cb * fac[:, None]).sum(0)
        y = x - (1 + a @ om.T) * ((1 + b @ om.T) * fac[:, None]).sum(0)
        use = (0.5 * (an**2 + reach**2) + spread * an * reach <= 0.5) & (y.var(-1) < x.var(-1))
        psi = ((1 + a @ om.T)[:, None, :] * (1 + b @ om.T)[None, :, :]).mean(-1)
        cv = (1 + a @ b.T + (ca[:, None, :] * cb[None, :, :]).mean(-1) - psi) * torch.exp(-rk * wk[:, 0] / tau)[None, :]
        w = torch.where(use[:, None], cv, w)
    return w / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("r", [0.05, 0.5, 2.0])
@pytest.mark.parametrize("orthogonal", [True, False])
def test_distance_rf_map_matches_dense_float64_reference(points, r, orthogonal):
    from hypviz.attention.approx import random_features as rf

    q, kk = points(13, 6, r, seed=40), points(17, 6, r, seed=41)
    for control in (False, True):
        got = rf.distance_rf_map(q, kk, temperature=2.0, features=40, seed=5, orthogonal=orthogonal, control_variate=control)
        omega = rf.random_directions(40, 7, seed=5, orthogonal=orthogonal)
        torch.testing.assert_close(got, ref_distance_rf(q, kk, omega, 2.0, control=control), rtol=1e-9, atol=1e-15)
    if r == 0.05:  # small norms: every row uses the control variate, which changes the map
        plain = rf.distance_rf_map(q, kk, temperature=2.0, features=40, seed=5, control_variate=False)
        assert float((got - plain).abs().max()) > 1e-6
    assert torch.equal(att.attention_map(q, kk, "distance_rf", temperature=2.0, features=40, seed=5),
                       rf.distance_rf_map(q, kk, temperature=2.0, features=40, seed=5))


# --------------------------------------------------------------------------- #
# Hypformer's focused linear attention
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("power", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("norm_scale", [0.1, 1.0, -2.5])
def test_focused_linear_map_matches_formula(points, power, norm_scale):
    q, kk = points(21, 8, 1.0, seed=18), points(19, 8, 1.0, seed=19)
    A = att.focused_linear_map(q, kk, power=power, norm_scale=norm_scale)
    fq, fk = ref_phi(q[:, 1:], power, norm_scale), ref_phi(kk[:, 1:], power, norm_scale)
    num = fq @ fk.T
    ref = num / num.sum(-1, keepdim=True)
    assert torch.allclose(A, ref, rtol=1e-12, atol=0)
    assert bool((A > 0).all())
    assert torch.allclose(A.sum(-1), torch.ones(21, dtype=torch.float64), atol=1e-14)


def test_focusing_function_keeps_the_norm_and_norm_scale_cancels(points):
    q, kk = points(30, 8, 2.0, seed=20), points(25, 8, 2.0, seed=21)
    maps = [att.focused_linear_map(q, kk, norm_scale=s) for s in (0.01, 1.0, 10.0)]
    assert torch.allclose(maps[0], maps[1], rtol=1e-12) and torch.allclose(maps[1], maps[2], rtol=1e-12)
    # power changes the map
    assert float((att.focused_linear_map(q, kk, power=1.0) - maps[1]).abs().max()) > 1e-3


def test_feature_map_stable_for_extreme_scales(points):
    q = points(10, 8, 5.0, seed=22)
    A = att.focused_linear_map(q, q, power=6.0, norm_scale=1e-4)
    assert bool(torch.isfinite(A).all())
    ref_q = ref_phi(q[:, 1:], 6.0, 1.0)  # norm_scale cancels; power 6 would over/underflow only when scaled
    ref = ref_q @ ref_q.T
    assert torch.allclose(A, ref / ref.sum(-1, keepdim=True), rtol=1e-10)


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_focused_linear_attention_equals_map_times_values(points, power):
    q, kk = points(64, 16, 1.0, seed=23, lead=(2,)), points(80, 16, 1.0, seed=24, lead=(2,))
    v = points(80, 12, 1.0, seed=25, lead=(2,))
    out = att.focused_linear_attention(q, kk, v, power=power)
    ref = att.focused_linear_map(q, kk, power=power) @ v[..., 1:]
    assert out.shape == (2, 64, 12)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-14)
    # float32: relative 1e-5
    q32, k32, v32 = (L.lift(t[..., 1:].float()) for t in (q, kk, v))
    out32 = att.focused_linear_attention(q32, k32, v32, power=power).double()
    ref32 = att.focused_linear_map(q32, k32, power=power).double() @ v32[..., 1:].double()
    assert float(((out32 - ref32).norm(dim=-1) / ref32.norm(dim=-1)).max()) < 1e-5


def test_focused_linear_attention_hypformer_eps(points):
    q, kk, v = points(20, 8, 1.0, seed=26), points(30, 8, 1.0, seed=27), points(30, 8, 1.0, seed=28)
    fq, fk = ref_phi(q[:, 1:], 2.0, 1.0), ref_phi(kk[:, 1:], 2.0, 1.0)
    ref = (fq @ (fk.T @ v[:, 1:])) / (fq @ fk.sum(0)[:, None] + 1e-6)
    out = att.focused_linear_attention(q, kk, v, eps=1e-6)
    assert torch.allclose(out, ref, rtol=1e-12)
    assert not torch.allclose(out, att.focused_linear_attention(q, kk, v), rtol=1e-12, atol=0)


def test_associativity_fails_with_softmax_between_products(points):
    q, kk, v = points(40, 8, 1.0, seed=29), points(50, 8, 1.0, seed=30), points(50, 8, 1.0, seed=31)
    qs, ks, vs = q[:, 1:], kk[:, 1:], v[:, 1:]
    left = torch.softmax(qs @ ks.T, -1) @ vs
    right = qs @ torch.softmax(ks.T @ vs, -1)
    assert float((left - right).abs().max()) > 1e-2


# --------------------------------------------------------------------------- #
# compare(): the streamed statistics, the bound, devices
# --------------------------------------------------------------------------- #
PAIRS = [("spatial", "distance"), ("distance", "spatial"), ("lorentz", "distance"), ("spatial", "lorentz")]


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("block_rows", [1, 3, 7, 29, None])
def test_compare_streamed_equals_dense(points, a, b, block_rows):
    q, kk = points(29, 6, 1.5, seed=32), points(23, 6, 1.5, seed=33)
    res = att.compare(q, kk, a, b, block_rows=block_rows, topk=3, device="cpu")
    ref = ref_stats(q, kk, a, b, math.sqrt(6))
    assert torch.allclose(res.kl, ref["kl"], atol=1e-14)
    assert torch.allclose(res.tv, ref["tv"], atol=1e-14)
    assert torch.allclose(res.logit_gap, ref["gap"], atol=1e-12)
    top_a, top_b = ref["la"].argmax(-1), ref["lb"].argmax(-1)
    assert torch.equal(res.top1, top_a == top_b)
    ia, ib = ref["la"].topk(3, -1).indices, ref["lb"].topk(3, -1).indices
    overlap = torch.tensor([len(set(x.tolist()) & set(y.tolist())) / 3 for x, y in zip(ia, ib)], dtype=torch.float64)
    assert torch.allclose(res.topk_overlap, overlap)
    assert res.block_rows == (29 if block_rows is None else block_rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("r", [0.01, 0.1, 1.0, 3.0, 10.0, 30.0])
@pytest.mark.parametrize("a,b", PAIRS)
def test_bound_holds_on_every_row(points, dtype, r, a, b):
    q, kk = points(48, 16, r, dtype=dtype, seed=34), points(64, 16, r, dtype=dtype, seed=35)
    res = att.compare(q, kk, a, b, block_rows=16)
    assert res.all_bounds_met, res.summary()
    # the allowance is a rounding allowance: a few hundred ulps of the largest logit term q_t k_t / tau
    size = (q[:, 0].double() * kk[:, 0].double().max() + 1) / 4.0
    assert bool((res.allowance.double() <= 300 * torch.finfo(dtype).eps * size).all())
    # and the values are those of the float64 reference
    ref = ref_stats(as64(q), as64(kk), a, b, 4.0)
    tv_tol = 1e-13 if dtype == torch.float64 else 1e-5
    assert float((res.tv.double() - ref["tv"]).abs().max()) < tv_tol
    # the bound really holds in exact terms for the float64 reference
    if dtype == torch.float64:
        # ... up to the reference's own rounding: a few ulps of its largest logit term
        slack = 64 * torch.finfo(torch.float64).eps * size
        delta = res.delta
        assert bool((ref["tv"] <= torch.tanh(delta / 4) + slack).all())
        # (the reference KL itself is a sum of M terms p log(p/p'): rounding of a few ulps of 1)
        kl_slack = slack * (delta + slack) + 8 * math.log2(64) * torch.finfo(torch.float64).eps
        assert bool((ref["kl"] <= att.kl_supremum(delta) + kl_slack).all())


def test_delta_is_the_bound_and_equals_the_logit_gap(points):
    q, kk = points(40, 8, 2.0, seed=36), points(50, 8, 2.0, seed=37)
    tau = 1.3
    res = att.compare(q, kk, "spatial", "distance", temperature=tau)
    ref = q[:, 0] * (kk[:, 0].max() - kk[:, 0].min()) / tau
    assert torch.allclose(res.delta, ref, rtol=1e-14)
    assert torch.allclose(res.logit_gap, res.delta, rtol=1e-10)
    assert torch.allclose(res.tv_bound, torch.tanh(ref / 4)) and torch.allclose(res.kl_bound_hoeffding, ref**2 / 8)
    assert torch.allclose(res.kl_bound, att.kl_supremum(ref)) and bool((res.kl_bound <= ref**2 / 8).all())
    # KL = log E_P[e^b] - E_P[b], with b the key-norm bias and P the distance map
    P = att.attention_map(q, kk, "distance", temperature=tau)
    bias = q[:, 0:1] * kk[:, 0] / tau
    kl = torch.log((P * bias.exp()).sum(-1)) - (P * bias).sum(-1)
    assert torch.allclose(res.kl, kl, atol=1e-14)
    # zero bound for lorentz vs distance and for a kind against itself
    for a, b in [("lorentz", "distance"), ("spatial", "spatial")]:
        r2 = att.compare(q, kk, a, b)
        assert float(r2.delta.abs().max()) == 0.0 and r2.all_bounds_met
        assert r2.max_tv < 1e-13 and r2.top1_agreement == 1.0


def test_equal_norm_keys_make_the_maps_equal(points):
    g = torch.Generator().manual_seed(38)
    ks = torch.randn(30, 8, generator=g, dtype=torch.float64)
    kk = L.lift(2.0 * ks / ks.norm(dim=-1, keepdim=True))
    q = points(20, 8, 2.0, seed=39)
    res = att.compare(q, kk)
    assert res.max_delta < 1e-14 and res.max_tv < 1e-13


def test_wide_gap_rows_use_direct_formulas(points):
    q, kk = points(12, 8, 40.0, dtype=torch.float32, seed=40), points(40, 8, 40.0, dtype=torch.float32, seed=41)
    res = att.compare(q, kk, "spatial", "distance", block_rows=5)
    assert float(res.logit_gap.min()) > 30  # every row goes through the fallback
    ref = ref_stats(as64(q), as64(kk), "spatial", "distance", math.sqrt(8))
    assert torch.isfinite(res.kl).all() and torch.isfinite(res.tv).all()
    assert float((res.tv.double() - ref["tv"]).abs().max()) < 1e-5
    assert torch.allclose(res.kl.double(), ref["kl"], rtol=1e-4, atol=1e-4)
    assert res.all_bounds_met


def test_compare_multi_head(points):
    q = points(10, 6, 1.0, seed=42, lead=(2, 3))
    kk = points(8, 6, 1.0, seed=43, lead=(3,))
    res = att.compare(q, kk, block_rows=4)
    assert res.tv.shape == (2, 3, 10) and res.batch_shape == (2, 3)
    assert res.n_blocks == 6 * 3
    one = att.compare(q[1, 2], kk[2])
    assert torch.allclose(res.tv[1, 2], one.tv, atol=1e-15) and torch.allclose(res.kl[1, 2], one.kl, atol=1e-15)
    assert torch.equal(res.bound_met[1, 2], one.bound_met)


def test_memory_budget_sets_block_rows(points):
    q, kk = points(50, 4, 1.0, seed=44), points(100, 4, 1.0, seed=45)
    res = att.compare(q, kk, memory_budget=3 * 100 * 8 * 7)
    assert res.block_rows == 7 and res.n_blocks == 8
    # automatic choice keeps (block x M) bounded for large M
    q2, k2 = points(8, 4, 1.0, seed=46, dtype=torch.float32), points(2**17, 4, 1.0, seed=47, dtype=torch.float32)
    res2 = att.compare(q2, k2, progress=False)
    assert res2.block_rows * 2**17 * 4 * 3 <= 256 * 2**20


def test_summary_and_repr_are_readable(points):
    q, kk = points(16, 4, 1.0, seed=48), points(12, 4, 1.0, seed=49)
    res = att.compare(q, kk, device="cpu")
    text = repr(res)
    assert "0x" not in text and "spatial" in text and "on cpu" in text
    assert f"{res.mean_tv:.3g}" in text and f"verdict: {res.verdict}" in text
    assert "on cpu" not in res.summary(show_device=False)
    json.dumps(res.to_dict())
    assert res.to_dict()["device"] == "cpu"


def test_progress_bar(points, capsys):
    q, kk = points(16, 4, 1.0, seed=50), points(12, 4, 1.0, seed=51)
    att.compare(q, kk, block_rows=2, progress=True)
    assert "compare spatial vs distance" in capsys.readouterr().err
    att.compare(q, kk, block_rows=2, progress=False)
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------- #
# devices
# --------------------------------------------------------------------------- #
def test_device_auto_follows_cuda_availability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert att.resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert att.resolve_device("auto") == torch.device("cuda")


def test_device_cpu_reported(points):
    q, kk = points(6, 3, 1.0, seed=52), points(5, 3, 1.0, seed=53)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert att.compare(q, kk).device == expected
    assert att.compare(q, kk, device="cpu").device == "cpu"
    assert att.compare(q, kk, device=torch.device("cpu")).device == "cpu"


def test_device_cuda_without_cuda_is_a_clear_error(points, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    q, kk = points(6, 3, 1.0, seed=54), points(5, 3, 1.0, seed=55)
    with pytest.raises(ValueError, match="CUDA is not available"):
        att.compare(q, kk, device="cuda")
    with pytest.raises(ValueError, match="device must be"):
        att.compare(q, kk, device="tpu")


# --------------------------------------------------------------------------- #
# bad input
# --------------------------------------------------------------------------- #
def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_bad_inputs(points):
    q, kk = points(6, 3, 1.0, seed=56), points(5, 3, 1.0, seed=57)
    with pytest.raises(ValueError, match="kind must be one of") as e:
        att.scores(q, kk, "euclid")
    one_line(e)
    with pytest.raises(ValueError, match="b must be one of"):
        att.compare(q, kk, "spatial", "dot")
    with pytest.raises(ValueError, match="same number of coordinates") as e:
        att.attention_map(q, points(5, 4, 1.0), "spatial")
    one_line(e)
    with pytest.raises(ValueError, match="off the hyperboloid") as e:
        att.attention_map(q, kk * 1.1, "distance")
    assert "keys" in one_line(e)
    with pytest.raises(ValueError, match="off the hyperboloid"):
        att.compare(q, kk, k=2.0)
    for bad in (0, -1.0, float("nan"), float("inf"), "warm", True):
        with pytest.raises(ValueError, match="temperature must be a positive finite number"):
            att.attention_map(q, kk, "spatial", temperature=bad)
    with pytest.raises(ValueError, match="at least one point") as e:
        att.compare(q[:0], kk)
    one_line(e)
    with pytest.raises(ValueError, match="at least one point"):
        att.attention_map(q, kk[:0], "spatial")
    with pytest.raises(ValueError, match=r"\(\.\.\., N, d \+ 1\)"):
        att.scores(q[0], kk, "spatial")
    with pytest.raises(TypeError, match="float32"):
        att.scores(q, kk.float(), "spatial")
    with pytest.raises(ValueError, match="do not broadcast"):
        att.scores(points(4, 3, 1.0, lead=(2,)), points(4, 3, 1.0, lead=(3,)), "spatial")
    with pytest.raises(ValueError, match="one row per key"):
        att.focused_linear_attention(q, kk, points(4, 3, 1.0))
    with pytest.raises(ValueError, match="power must be"):
        att.focused_linear_map(q, kk, power=0)
    with pytest.raises(ValueError, match="norm_scale must be"):
        att.focused_linear_map(q, kk, norm_scale=float("nan"))
    with pytest.raises(ValueError, match="k must be"):
        att.scores(q, kk, "spatial", k=-1)
    with pytest.raises(ValueError, match="topk must be"):
        att.compare(q, kk, topk=0)
    with pytest.raises(ValueError, match="block_rows must be"):
        att.compare(q, kk, block_rows=0)
    with pytest.raises(TypeError, match="floating-point"):
        att.scores(np.ones((3, 4), dtype=np.int64), kk, "spatial")
    nan_q = q.clone()
    nan_q[2, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        att.compare(nan_q, kk)


def test_peak_tensor_memory_measures_allocations():
    def make():
        a = torch.ones(1000, 1000, dtype=torch.float32)
        b = a * 2
        return float(b.sum())

    value, peak = att.peak_tensor_memory(make)
    assert value == 2e6
    assert 8_000_000 <= peak < 9_000_000  # two 4 MB tensors alive together
