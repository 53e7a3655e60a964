"""*Identical* comes from the rounding that survives the computation path, and the tolerance is pinned.

On one product the shared product's rounding cancels (only the rank-one update and the subtraction count);
given maps are compared at their own storage rounding unless the rounding of their computation is stated
(``logit_scale`` the size of the products' terms); a broadcast map costs what one head costs.
"""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.base.memory import peak_tensor_memory

U32 = 2.0**-24  # float32's unit roundoff
BF16 = 2.0**-8  # bfloat16's


def _stat(res, m: int, eps: float) -> torch.Tensor:
    """The statistics' own rounding, added to every tolerance: 16 eps log2(M + 1) max(TV(P_a, U), TV(P_b, U))."""
    return 16.0 * eps * math.log2(m + 1) * torch.maximum(res.tv_uniform_a.double(), res.tv_uniform_b.double())


# --------------------------------------------------------------------------- #
# compare(): one product
# --------------------------------------------------------------------------- #
def _orthogonal_keys(d: int, n: int = 64, m: int = 512, norm: float = 100.0, jitter: float = 6e-6, seed: int = 0):
    """Queries and keys of spatial norm 100 nearly orthogonal to them (q . kappa ~ N(0, 1)), key norms 1 + 6e-6 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    half = d // 2
    qs = torch.zeros(n, d, dtype=torch.float64)
    qs[:, :half] = torch.randn(n, half, generator=g, dtype=torch.float64)
    qs *= norm / qs.norm(dim=-1, keepdim=True)
    ks = torch.randn(m, d, generator=g, dtype=torch.float64)
    ks[:, half:] *= norm / ks[:, half:].norm(dim=-1, keepdim=True)
    ks[:, :half] /= norm
    ks *= norm * (1 + jitter * torch.randn(m, 1, generator=g, dtype=torch.float64)) / ks.norm(dim=-1, keepdim=True)
    rot, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))  # no coordinate-aligned structure
    return L.lift(qs @ rot), L.lift(ks @ rot)


def test_float32_on_one_product_gets_float64s_verdict_not_identical():
    # logits S - c w of size 1e4: S's rounding (sqrt(d) eps 1e4 = 0.02) is common to both maps and cancels
    q, kk = _orthogonal_keys(256)
    hi = att.compare(q, kk, "spatial", "distance", temperature=1.0)
    lo = att.compare(q.float(), kk.float(), "spatial", "distance", temperature=1.0)
    assert lo.plan.path == "one_product" and lo.dtype == "float32"
    assert hi.verdict == "close" and 0.02 < hi.mean_tv < 0.026  # a genuine gap of TV about 0.023
    assert lo.verdict == "close" and lo.row_verdicts["identical"] == 0.0
    assert float(lo.tv_tolerance.max()) < 0.25 * hi.mean_tv
    # the tolerance still covers what float32 does to the TV, row by row
    assert bool(((lo.tv.double() - hi.tv).abs() <= lo.tv_tolerance.double()).all())
    assert "shared product's rounding cancels" in lo.tolerance_basis


def test_the_one_product_tolerance_does_not_grow_like_the_products_rounding():
    # the old level grew as sqrt(d) (0.025 at d = 256, 0.044 at 1,024); what survives is the rank-one update's
    tol = {}
    for d in (256, 1024):
        q, kk = _orthogonal_keys(d, n=16, m=256)
        lo = att.compare(q.float(), kk.float(), "spatial", "distance", temperature=1.0)
        hi = att.compare(q, kk, "spatial", "distance", temperature=1.0)
        assert bool(((lo.tv.double() - hi.tv).abs() <= lo.tv_tolerance.double()).all()), d
        tol[d] = float(lo.tv_tolerance.max())
    assert tol[1024] < 1.5 * tol[256] and tol[1024] < 0.01, tol
    # on two products both products' roundings count: the same data, larger tolerance
    two = att.run_compare(att.plan_compare(q.float(), kk.float(), "spatial", "distance", temperature=1.0)
                          .with_path("two_products"))
    assert float(two.tv_tolerance.min()) > 4 * tol[1024]


def _pythagorean(k: float = 144.0):
    """Spatial parts of norm 5 and k = 144: every time coordinate is 13, w = |kappa_s|^2 / (kappa_t + 12) = 1, all exact."""
    q = torch.tensor([[13.0, 3.0, 4.0], [13.0, -4.0, 3.0]])
    keys = torch.tensor([[13.0, 3.0, 4.0], [13.0, 4.0, 3.0], [13.0, 5.0, 0.0], [13.0, 0.0, 5.0], [13.0, -3.0, 4.0],
                         [13.0, 0.0, -5.0]])
    return q, keys


def test_the_one_product_tolerance_is_the_worst_case_rounding_of_the_rank_one_update():
    # by hand, tau = 1/8: c = q_t / tau = 104, w_j = 1 exactly, |A_i| = |q_s| / tau = 40, max_j |B_j| = 5.  The distance
    # logits S - c w round c (2u), the products c w (2u) and the subtraction of a result <= |S| + c w <= 200 + 104 (u):
    # r = 104 (5u) + 200 u = 720 u per logit; the spatial logits are S itself (0).  TV <= (0 + 720 u) / 2 = 360 u.
    q, keys = _pythagorean()
    for a, b in [("spatial", "distance"), ("distance", "spatial")]:
        res = att.compare(q, keys, a, b, k=144.0, temperature=0.125)
        assert res.plan.path == "one_product"
        level = res.tv_tolerance.double() - _stat(res, 6, 2 * U32)
        torch.testing.assert_close(level, torch.full_like(level, 360 * U32), rtol=1e-3, atol=0.0)
        # equal maps in exact arithmetic (w is the same for every key): identical, and the rounding stays below the level
        assert res.verdict == "identical" and bool((res.tv <= res.tv_tolerance).all())


def test_the_two_product_tolerance_is_each_products_realistic_rounding():
    # "spatial" against itself takes two products: each rounds like (sqrt(c + 3) + 2) eps |A_i| max_j |B_j| (c = 2
    # columns; below the worst case 5 eps sum_c |A_ic| max_j |B_jc| = 5 eps 280), 0.5 (r + r) = r in TV
    q, keys = _pythagorean()
    res = att.compare(q, keys, "spatial", "spatial", k=144.0, temperature=0.125)
    assert res.plan.path == "two_products"
    level = res.tv_tolerance.double() - _stat(res, 6, 2 * U32)
    want = (math.sqrt(5.0) + 2.0) * (2 * U32) * 40.0 * 5.0
    torch.testing.assert_close(level, torch.full_like(level, want), rtol=1e-3, atol=0.0)


def test_one_product_rounding_of_equal_maps_stays_within_the_tolerance():
    # keys that are sign flips of one vector: every |kappa_s| the same to the last bit, so the maps are equal in exact
    # arithmetic and whatever TV float32 computes is rounding
    g = torch.Generator().manual_seed(0)
    v = 3.0 * torch.randn(64, generator=g, dtype=torch.float64)
    signs = 2.0 * torch.randint(0, 2, (512, 64), generator=g).double() - 1.0
    keys = L.lift((signs * v).float())
    q = L.lift(3.0 * torch.randn(64, 64, generator=g))
    for tau in (0.5, 8.0):
        res = att.compare(q, keys, "spatial", "distance", temperature=tau)
        assert res.plan.path == "one_product" and res.verdict == "identical", tau
        assert bool((res.tv <= res.tv_tolerance).all()), tau


# --------------------------------------------------------------------------- #
# compare_maps(): storage rounding by default, the computation's when stated
# --------------------------------------------------------------------------- #
def _noisy(n: int = 256, m: int = 128, noise: float = 0.04, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(n, m, generator=g, dtype=torch.float64)
    return torch.softmax(logits + noise * torch.randn(n, m, generator=g, dtype=torch.float64), -1), torch.softmax(logits, -1)


def test_bfloat16_maps_are_compared_at_their_storage_rounding():
    pa, pb = _noisy()
    ref = att.compare_maps(pa, pb)
    ha, hb = pa.to(torch.bfloat16), pb.to(torch.bfloat16)
    stored = max(float((0.5 * (h.double() / h.double().sum(-1, keepdim=True) - p).abs().sum(-1)).max())
                 for h, p in ((ha, pa), (hb, pb)))
    assert ref.verdict == "close" and 0.01 < ref.mean_tv < 0.02 and stored < 0.0015
    res = att.compare_maps(ha, hb)
    assert res.verdict == "close" and res.row_verdicts["identical"] < 0.1
    # each map: its unit roundoff (u/2 of TV for its weights' rounding, u/2 for renormalising the row), plus the
    # statistics' own rounding; below the storage rounding measured the verdict could not be trusted, above 2x it wastes
    level = res.tv_tolerance.double() - _stat(res, 128, torch.finfo(torch.float64).eps)
    torch.testing.assert_close(level, torch.full_like(level, 2 * BF16), rtol=1e-6, atol=0.0)
    assert stored <= float(level.min()) and "bfloat16 storage" in res.tolerance_basis
    # the rows that are called identical are within the tolerance in float64 too
    same = res.row_verdict_codes == 0
    assert bool((ref.tv[same] <= res.tv_tolerance.double()[same]).all())


def test_bfloat16_storage_rounding_reaches_half_the_level():
    # weights at 1/64 (1 + 0.999 u) and 1/64 (1 + 1.001 u), just either side of the midpoint of bfloat16's grid: half
    # round down, half up, each by almost u, so the storage TV is almost u / 2, a fixed fraction of the level u (the
    # level is neither 10x too small nor 10x too large)
    m = 64
    p = torch.full((1, m), (1.0 + 0.999 * BF16) / m, dtype=torch.float64)
    p[0, m // 2:] = (1.0 + 1.001 * BF16) / m  # the row sums to 1 + u, well within atol: compare_maps renormalises it
    h = p.to(torch.bfloat16)
    tv = float(0.5 * (h.double() / h.double().sum() - p / p.sum()).abs().sum())
    res = att.compare_maps(h, p)
    level = float(res.tv_tolerance[0]) - float(_stat(res, m, torch.finfo(torch.float64).eps)[0])
    assert level == pytest.approx(BF16 + 2.0**-53, rel=1e-6)  # bfloat16's u and float64's
    assert 0.45 * BF16 < tv <= level


def _cancelling(d: int, n: int = 16, m: int = 128, size: float = 100.0, seed: int = 0):
    """float32 logits x . y_j equal in exact arithmetic, by one matmul and by d additions one term at a time.

    The keys are nearly orthogonal to the queries: terms of size 100^2 / d sum to logits of a few units.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randn(m, d, generator=g, dtype=torch.float64)
    basis, _ = torch.linalg.qr(x.T)
    y = y - (y @ basis) @ basis.T + 0.02 * (torch.randn(m, n, generator=g, dtype=torch.float64) @ basis.T)
    x = (size * x / x.norm(dim=-1, keepdim=True)).float()
    y = (size * y / y.norm(dim=-1, keepdim=True)).float()
    one = x @ y.T
    two = torch.zeros(n, m)
    for i in range(d):
        two = two + x[:, i : i + 1] * y[:, i]
    return x, y, one, two


@pytest.mark.parametrize("d", [1024, 4096])
def test_cancelling_float32_logits_are_identical_at_the_size_of_their_terms(d):
    x, y, one, two = _cancelling(d)
    exact = x.double() @ y.double().T
    terms = float((x.abs().double() @ y.abs().double().T).max())  # sum_i |x_i y_i|, the documented logit_scale
    norms = float(x.norm(dim=-1).max() * y.norm(dim=-1).max())  # its bound |x||y|
    logits = float(exact.abs().max())
    err = float(torch.maximum((one.double() - exact).abs(), (two.double() - exact).abs()).max())
    # the premise: cancellation makes the rounding far larger than the logits' own size can explain, and the
    # terms' size does explain it
    assert err > 2 * (2 * U32) * logits and err <= 2 * (2 * U32) * terms
    pa, pb = one.double().softmax(-1), two.double().softmax(-1)
    for scale in (terms, norms):
        res = att.compare_maps(pa, pb, precision="float32", logit_scale=scale)
        assert res.verdict in ("identical", "unresolved"), (d, scale, res.row_verdicts)
        assert res.row_verdicts["close"] == res.row_verdicts["different"] == 0.0, (d, scale)
        assert "float32" in res.tolerance_basis and f"{scale:.3g}" in res.tolerance_basis


# --------------------------------------------------------------------------- #
# compare_maps(): broadcast heads
# --------------------------------------------------------------------------- #
def test_a_map_broadcast_to_many_heads_costs_what_one_head_costs():
    g = torch.Generator().manual_seed(1)
    one = torch.softmax(torch.randn(256, 256, generator=g), -1)
    other = torch.softmax(torch.randn(256, 256, generator=g), -1)
    values = torch.randn(256, 3, generator=g)
    single, p1 = peak_tensor_memory(att.compare_maps, one, other, values=values, spearman=False)
    many, p20 = peak_tensor_memory(att.compare_maps, one.expand(20, 256, 256), other, values=values.expand(20, 256, 3),
                                   spearman=False)
    # one head's work is about 4 MiB of float64 rows; 20 expanded copies would be 80 MiB.  The 19 more heads' per-row
    # results (5,120 rows x 15 float32 fields) are 0.3 MiB
    assert p20 < p1 + 2**20, (p1, p20)
    assert many.batch_shape == (20,) and many.tv.shape == (20, 256) and "1 of the 20 heads computed" in many.plan.reason
    for field in ("tv", "kl", "tv_uniform_a", "top1_weight", "tv_tolerance", "output_gap"):
        got, want = getattr(many, field), getattr(single, field)
        assert torch.equal(got, want.expand(20, 256)), field
    assert many.verdict == single.verdict
