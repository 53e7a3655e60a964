"""compare(): the fused statistics (the plan's ``"fused"`` path) give what the eager ones give.

The one-product path's per-block statistics run either as eager torch passes (``"one_product"``, the
reference) or in one compiled kernel (``"fused"``, :mod:`hypviz.attention.comparison.fused_stats`).  Each test
runs both on the same plan (``with_path``) and holds the fused results to the eager ones' accuracy:
against a float64 reference, no field of the fused path may be further off than the eager path's own
error allows, on random, near-uniform, wide-gap (beyond ``TILT_MAX_GAP``), tied and float64 rows.
"""

from __future__ import annotations

import re

import pytest
import torch

from hypviz import attention as att
from hypviz.attention.comparison import fused_stats
from hypviz.attention.comparison.row_blocks import TILT_MAX_GAP

OK, WHY = fused_stats.availability(torch.float32, torch.device("cpu"))
pytestmark = pytest.mark.skipif(not OK, reason=f"no fused kernel here: {WHY}")

FIELDS = ("kl", "tv", "tv_uniform_a", "tv_uniform_b", "peak_a", "peak_b", "top1_weight", "logit_gap")


def _paths(q, kk, a="spatial", b="distance", **kwargs):
    plan = att.plan_compare(q, kk, a, b, spearman=False, **kwargs)
    return att.run_compare(plan.with_path("one_product")), att.run_compare(plan.with_path("fused"))


def _field(c, name):
    return getattr(c, name).double()


def _check(q, kk, *, tau, rows=None, **kwargs):
    """Both paths in q's dtype against the eager path in float64: the fused error at most the eager one's, plus rounding."""
    eager, fused = _paths(q, kk, temperature=tau, **kwargs)
    ref, _ = _paths(q.double(), kk.double(), temperature=tau, **kwargs)
    assert fused.plan.path == "fused" and eager.plan.path == "one_product"
    eps = torch.finfo(q.dtype).eps
    for name in FIELDS:
        r, e, f = _field(ref, name), _field(eager, name), _field(fused, name)
        slack = 64 * eps * r.abs() + 1e-30
        assert bool(((f - r).abs() <= 2 * (e - r).abs() + slack).all()), (
            name, float((f - r).abs().max()), float((e - r).abs().max()))
    tol = eager.tv_tolerance.double()
    assert bool(((_field(fused, "tv") - _field(eager, "tv")).abs() <= tol).all())
    torch.testing.assert_close(fused.tv_tolerance, eager.tv_tolerance, rtol=64 * eps, atol=0.0)
    for name in ("topk_overlap", "top1"):  # tie-aware: the same counts whatever index a tie picked
        assert torch.equal(getattr(fused, name), getattr(eager, name)), name
    assert fused.verdict == eager.verdict
    assert torch.equal(fused.bound_met, eager.bound_met)
    return eager, fused


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_rows_in_both_dtypes(points, dtype):
    # M = 1,600 keys: the kernel's top k from its chunk maxima (40 chunks of 40... 64 keys), as at large M
    q, kk = points(48, 8, 0.8, seed=1, dtype=dtype), points(1600, 8, 0.8, seed=2, dtype=dtype)
    eager, _ = _check(q, kk, tau=3.0, block_rows=20)
    assert float(eager.tv.min()) > 1e-3  # the tilted forms, on rows of moderate gap
    assert float(eager.logit_gap.max()) < TILT_MAX_GAP


def test_near_uniform_rows(points):
    # logits of order 1e-3: the baselines come from the logits without cancellation (tv_uniform), KL ~ 1e-13
    q, kk = points(40, 8, 1e-3, seed=3, dtype=torch.float32), points(700, 8, 1e-3, seed=4, dtype=torch.float32)
    eager, _ = _check(q, kk, tau=None)
    assert float(eager.kl.max()) < 1e-9 and float(eager.tv_uniform_a.max()) < 1e-4


def test_wide_gap_rows(points):
    # gaps beyond TILT_MAX_GAP on most rows (KL and TV by log-softmax), the rest tilted
    q, kk = (points(n, 8, 4.0, k=4.0, seed=seed, dtype=torch.float32) for n, seed in ((40, 5), (900, 6)))
    eager, _ = _check(q, kk, a="lorentz", b="spatial", tau=0.5, k=4.0)
    gap = eager.logit_gap
    assert bool((gap > TILT_MAX_GAP).any()) and bool((gap <= TILT_MAX_GAP).any())


def test_tied_rows(points):
    # every key twice (and a query equal to a key): top-k sets of tied pairs, told apart by no rounding
    base = points(400, 6, 1.0, seed=7, dtype=torch.float32)
    kk = torch.cat([base, base])
    q = torch.cat([points(30, 6, 1.0, seed=8, dtype=torch.float32), base[:2]])
    eager, fused = _check(q, kk, tau=2.0, topk=4)
    assert float(eager.topk_overlap.min()) < 1.0  # the test sees disagreement where there is some


def test_half_inputs_run_fused_in_float32(points):
    q, kk = points(30, 8, 0.8, seed=9).to(torch.float16), points(500, 8, 0.8, seed=10).to(torch.float16)
    eager, fused = _paths(q, kk, temperature=3.0)
    assert fused.dtype == eager.dtype == "float32 (from float16 inputs)"
    for name in FIELDS:
        torch.testing.assert_close(_field(fused, name), _field(eager, name), rtol=1e-5, atol=1e-6)


def test_the_plan_chooses_fused_from_its_size_and_says_why(points):
    small = att.plan_compare(points(20, 4, 1.0, seed=11), points(30, 4, 1.0, seed=12), "spatial", "distance")
    assert small.plan.path == "one_product" and "the statistics eager (fewer than 2^24 logits" in small.plan.reason
    q, kk = points(4096, 4, 1.0, seed=13, dtype=torch.float32), points(4096, 4, 1.0, seed=14, dtype=torch.float32)
    big = att.plan_compare(q, kk, "spatial", "distance")
    assert big.plan.path == "fused" and "one fused kernel (compiled by" in big.plan.reason
    seg = re.search(r"its rows in segments of ([\d,]+) keys \(a 32nd of the ([\d,]+) KiB L2\)", big.plan.reason)
    keys, l2 = (int(x.replace(",", "")) for x in seg.groups())  # float32: a 32nd of the L2, at least 1,024 keys
    assert keys == max(1024, l2 * 1024 // (32 * 4))
    assert att.plan_compare(q, kk, "distance", "lorentz").plan.path == "two_products"
    with pytest.raises(ValueError, match=r"^path must be 'two_products' or 'dense_rows' for 'distance' and 'lorentz'"):
        att.plan_compare(q[:5], kk[:5], "distance", "lorentz").with_path("fused")


def test_the_kernel_refuses_what_it_does_not_take():
    assert fused_stats.availability(torch.float16, torch.device("cpu"))[0] is False
    assert "runs on the CPU" in fused_stats.availability(torch.float32, torch.device("meta"))[1]
    with pytest.raises(ValueError, match=r"^s must be a contiguous float32 or float64 CPU tensor"):
        fused_stats.shared_rows(torch.zeros(4, 3).T, torch.zeros(3), torch.zeros(4), (0.0, 1.0), torch.zeros(3),
                                torch.zeros(3), torch.zeros(3), 1, 1e-6, TILT_MAX_GAP)


def test_the_kernels_top_k_is_torchs_over_chunks():
    # the top k located through chunk maxima (M = 5,000: 70 chunks), ties spread over chunks: torch's values,
    # indices pointing at them, distinct keys, the first index among ties
    g = torch.Generator().manual_seed(0)
    s = torch.randn(6, 5000, generator=g)
    s[1, ::97] = 9.0
    s[2, :] = 1.0
    w, c = torch.rand(5000, generator=g), torch.rand(6, generator=g)
    tol = torch.full((6,), 1e-3)
    for alpha in (0.0, 1.0):
        r = fused_stats.shared_rows(s, c, w, (alpha, 1.0 - alpha), tol, tol, c * 0.0 + 1.0, 5, 1e-6, TILT_MAX_GAP)
        logits = s - alpha * c[:, None] * w[None]
        v, _ = torch.topk(logits.double(), 5, dim=-1)
        torch.testing.assert_close(r["va"], v, rtol=1e-6, atol=1e-6)
        eps = torch.finfo(torch.float32).eps  # the kernel's logits may round through one FMA: within an ulp of torch's
        torch.testing.assert_close(torch.gather(logits, -1, r["ia"]).double(), r["va"], rtol=2 * eps, atol=2 * eps * 10)
        assert bool((r["ia"].sort(dim=-1).values.diff(dim=-1) > 0).all())
        if alpha == 0.0:
            assert r["ia"][2].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kernels_segments_give_one_passs_statistics(dtype):
    # the first passes segment by segment (e_b relative to each segment's maximum, the sums rescaled in double), and
    # narrow rows' expm1(x) recomputed rather than kept (cache=0): the same statistics as one segment with all kept,
    # on rows of moderate gap, narrow rows (gap <= 0.3: expm1 without range reduction), a row with one peak and a row
    # whose last third lies 60 below (their baselines partly from the segment sums), and a wide-gap row
    g = torch.Generator().manual_seed(1)
    m = 3000
    s = torch.randn(6, m, generator=g, dtype=dtype)
    s[1, 100] += 40.0
    s[3, 2000:] -= 60.0
    w, c = torch.rand(m, generator=g, dtype=dtype), torch.rand(6, generator=g, dtype=dtype) + 0.5
    c[4:] = torch.tensor([0.05, 0.25], dtype=dtype)
    tol = torch.full((6,), 1e-3, dtype=dtype)
    gap = c * (w.max() - w.min())
    gap[2] = 2 * TILT_MAX_GAP
    one = fused_stats.shared_rows(s, c, w, (0.0, 1.0), tol, tol, gap, 5, 1e-6, TILT_MAX_GAP)
    assert one["flags"].tolist() == [0, 0, 1, 0, 0, 0] and bool(one["kl"][2].isnan())
    assert (gap <= 0.3).tolist() == [False] * 4 + [True] * 2
    # the exponentials' arguments (up to |l| ~ 64) rounded at another maximum: a few eps times |l| apart
    rtol = 256 * torch.finfo(dtype).eps
    for segment, cache in ((64, None), (1000, 0), (None, 0)):
        many = fused_stats.shared_rows(s, c, w, (0.0, 1.0), tol, tol, gap, 5, 1e-6, TILT_MAX_GAP, segment, cache)
        for name in ("ua", "ub", "pa", "pb", "kl", "tv"):
            torch.testing.assert_close(many[name], one[name], rtol=rtol, atol=0.0, equal_nan=True, msg=name)
        for name in ("va", "ia", "vb", "ib", "a_at_ib", "b_at_ia", "flags"):
            assert torch.equal(many[name], one[name]), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identical_keys_give_one_verdict_on_both_paths(points, dtype):
    # 700 copies of one key: both maps exactly uniform in exact arithmetic; the eager TV is 0, the fused one rounding
    # (its tilt's mean key), and both say the same for every row: near uniform, so uninformative
    q = points(64, 8, 0.8, seed=1, dtype=dtype)
    kk = points(1, 8, 0.8, seed=2, dtype=dtype).expand(700, -1).contiguous()
    eager, fused = _paths(q, kk, temperature=3.0)
    assert torch.equal(eager.row_verdict_codes, fused.row_verdict_codes)
    assert eager.verdict == fused.verdict == "uninformative"


# ---- pins: the kernel against a float64 reference computed here, on the cases its loops and thresholds decide ----

def _reference(s, c, w, alphas):
    """KL(P_b || P_a), TV(P_a, P_b), TV(P_a, U), TV(P_b, U), M max P_a, M max P_b and both maps' logits, in float64."""
    s, c, w = s.double(), c.double(), w.double()
    la, lb = (s - alpha * c[:, None] * w[None] for alpha in alphas)
    pa, pb = torch.softmax(la, -1), torch.softmax(lb, -1)
    m = s.shape[-1]
    kl = (pb * (torch.log_softmax(lb, -1) - torch.log_softmax(la, -1))).sum(-1)
    return {"kl": kl, "tv": 0.5 * (pa - pb).abs().sum(-1), "ua": 0.5 * (pa - 1.0 / m).abs().sum(-1),
            "ub": 0.5 * (pb - 1.0 / m).abs().sum(-1), "pa": m * pa.amax(-1), "pb": m * pb.amax(-1)}, la, lb


def test_the_largest_logit_in_the_rows_remainder_is_in_the_top_k():
    # M = 5,000: chunks of 70 keys, 71 whole chunks (4,970 keys) and a remainder of 30 searched by its own loop; row i
    # has its largest logit at key 4,970 + i (the remainder's first to its last key, 4,999), the rest far below
    m, top = 5000, 5
    g = torch.Generator().manual_seed(3)
    rows = m - 4970
    s = torch.randn(rows, m, generator=g)
    s[torch.arange(rows), 4970 + torch.arange(rows)] = 20.0
    w, c = torch.rand(m, generator=g), torch.rand(rows, generator=g)
    tol = torch.full((rows,), 1e-3)
    r = fused_stats.shared_rows(s, c, w, (0.0, 1.0), tol, tol, c * (w.max() - w.min()), top, 1e-6, TILT_MAX_GAP)
    assert r["ia"][:, 0].tolist() == list(range(4970, m)) and r["ib"][:, 0].tolist() == list(range(4970, m))
    for alpha, v, i in ((0.0, "va", "ia"), (1.0, "vb", "ib")):
        want, at = torch.topk((s - alpha * c[:, None] * w[None]).double(), top, dim=-1)
        assert torch.equal(r[i], at)
        torch.testing.assert_close(r[v], want, rtol=1e-6, atol=1e-6)


def test_a_query_on_the_last_key_gets_the_eager_top1_and_verdict(points):
    # queries equal to the last keys (M = 5,000: in the kernel's remainder after its whole chunks): each row's top key
    # of the distance map is its own key, so both paths agree that the maps share it
    # the last six keys of larger norm: each is the top key of its own query in both maps (and the maps share some of
    # their other top keys), so a top k that missed it would count another overlap
    q0 = points(24, 8, 0.8, seed=21, dtype=torch.float32)
    kk = torch.cat([points(4994, 8, 0.8, seed=22, dtype=torch.float32), points(6, 8, 1.2, seed=23, dtype=torch.float32)])
    q = torch.cat([q0, kk[-6:]])
    eager, fused = _check(q, kk, tau=3.0)  # top1, topk_overlap and the verdict as the eager path's
    assert torch.equal(eager.top1, fused.top1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_narrow_and_moderate_rows_match_a_float64_reference(dtype):
    # rows whose gap spans NARROW_X = 0.3 (the kernel's e^x - 1 without range reduction at or below it) up to 3: each
    # statistic within float32's accuracy of the float64 reference; a polynomial without range reduction at a gap of
    # 3 would be off by about x^9 / 9! = 5 % of e^x at |x| = 3
    m = 3000
    g = torch.Generator().manual_seed(5)
    s = torch.randn(9, m, generator=g, dtype=torch.float64)
    w = torch.rand(m, generator=g, dtype=torch.float64)
    w[:2] = torch.tensor([0.0, 1.0], dtype=torch.float64)  # w spans [0, 1] exactly: the gap is c
    c = torch.tensor([0.05, 0.29, 0.31, 0.6, 1.0, 1.5, 2.0, 2.5, 3.0], dtype=torch.float64)
    tol = torch.full((9,), 1e-3, dtype=dtype)
    r = fused_stats.shared_rows(s.to(dtype), c.to(dtype), w.to(dtype), (0.0, 1.0), tol, tol, c.to(dtype), 5, 1e-6,
                                TILT_MAX_GAP)
    assert r["flags"].tolist() == [0] * 9
    ref, _, _ = _reference(s.to(dtype), c.to(dtype), w.to(dtype), (0.0, 1.0))
    rtol = 1e-4 if dtype == torch.float32 else 1e-10
    for name in ("kl", "tv", "ua", "ub", "pa", "pb"):
        torch.testing.assert_close(r[name], ref[name], rtol=rtol, atol=0.0, msg=name)
