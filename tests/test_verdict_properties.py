"""The verdict's guarantees, one property each: key permutation, symmetry, M-invariance, precision, ties, mixed.

Each test builds maps where the property has something to lose (sharp and near-uniform rows, ties,
half precision, large logits) and fails when the property breaks.
"""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention as att
from hypviz.attention.comparison import calibration
from hypviz.attention.comparison.result import CLOSE_RATIO, RESOLVE, row_verdicts


def _maps(n: int, m: int, spread: float, noise: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = spread * torch.randn(n, m, generator=g, dtype=torch.float64)
    return torch.softmax(logits + noise * torch.randn(n, m, generator=g, dtype=torch.float64), -1), torch.softmax(logits, -1)


@pytest.mark.parametrize("spread, noise", [(0.01, 0.01), (1.0, 0.1), (3.0, 1.0), (8.0, 0.05)])
def test_row_verdicts_do_not_depend_on_the_order_of_the_keys(spread, noise):
    pa, pb = _maps(48, 97, spread, noise, seed=1)
    pa[:4, :3], pb[:4, :3] = 0.3, 0.3  # exact ties at the top of a few rows
    pa[:4, 3:] *= 0.1 / pa[:4, 3:].sum(-1, keepdim=True)
    pb[:4, 3:] *= 0.1 / pb[:4, 3:].sum(-1, keepdim=True)
    base = att.compare_maps(pa, pb)
    for seed in range(3):
        order = torch.randperm(97, generator=torch.Generator().manual_seed(seed))
        perm = att.compare_maps(pa[:, order], pb[:, order])
        assert torch.equal(perm.row_verdict_codes, base.row_verdict_codes)
        torch.testing.assert_close(perm.top1_weight, base.top1_weight, rtol=0, atol=1e-12)
        assert torch.equal(perm.top1, base.top1)


def test_compare_is_invariant_to_permuting_the_keys(points):
    q, kk = points(40, 8, 2.0, seed=1), points(60, 8, 2.0, seed=2)
    order = torch.randperm(60, generator=torch.Generator().manual_seed(3))
    for a, b in [("spatial", "distance"), ("focused", "distance")]:
        one, two = att.compare(q, kk, a, b, temperature=2.0), att.compare(q, kk[order], a, b, temperature=2.0)
        assert torch.equal(one.row_verdict_codes, two.row_verdict_codes), (a, b)
        torch.testing.assert_close(one.top1_weight, two.top1_weight, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("spread, noise", [(1.0, 0.1), (3.0, 1.0), (0.01, 0.01)])
def test_swapping_the_maps_keeps_every_row_verdict(spread, noise):
    pa, pb = _maps(64, 50, spread, noise, seed=4)
    ab, ba = att.compare_maps(pa, pb), att.compare_maps(pb, pa)
    assert torch.equal(ab.row_verdict_codes, ba.row_verdict_codes)
    torch.testing.assert_close(ab.top1_weight, ba.top1_weight, rtol=0, atol=1e-12)
    torch.testing.assert_close(ab.tv_tolerance, ba.tv_tolerance, rtol=1e-12, atol=0)


def test_the_same_perturbation_gets_the_same_verdict_at_every_number_of_keys():
    # lognormal rows with logit noise 0.1: near-tied top keys of tiny mass must not decide it
    got = {m: calibration._noisy_lognormal(m, n=8).verdict for m in (64, 256, 4096, 100_000)}
    assert set(got.values()) == {"close"}, got


def test_a_tie_is_read_as_a_set_whichever_tied_key_the_other_map_prefers():
    zero, one = calibration._tie(0), calibration._tie(1)
    assert zero.verdict == one.verdict == "close"
    assert float(zero.top1_weight[0]) == pytest.approx(float(one.top1_weight[0]))
    assert float(zero.top1_weight[0]) == pytest.approx(0.5 * (1 + 0.38 / 0.42))  # the mean over the tied set
    # a favourite that carries the map's weight still decides: 4 % on one key of 100,000, the keys differ
    assert calibration._one_key_each().verdict == "different"


def test_close_and_near_uniform_rows_are_close_not_mixed():
    res = calibration._close_and_uniform()
    assert res.row_verdicts["close"] == 0.5 and res.row_verdicts["uninformative"] == 0.5
    assert res.verdict == "close" and res.verdict_text == "close (50% near uniform)"
    assert "close (50% near uniform)" in res.summary()
    # a minority that differs in substance is still mixed
    assert calibration._minority().verdict == "mixed"


# --------------------------------------------------------------------------- #
# precision
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_maps_are_identical_only_when_they_agree_to_storage_precision(dtype):
    eye = torch.eye(8, dtype=dtype)
    assert att.compare_maps(eye[:4], eye[4:]).verdict == "different"  # one-hot rows on other keys: TV = 1
    pa, pb = _maps(100, 1000, 2.0, 0.5, seed=5)
    res = att.compare_maps(pa.to(dtype), pb.to(dtype))
    assert res.row_verdicts["identical"] == 0.0 and res.mean_tv > 0.1
    mixed = att.compare_maps(pa.to(dtype), pb)  # one map half, the other float64: the coarser decides
    assert mixed.row_verdicts["identical"] == 0.0
    same = att.compare_maps(pb.to(dtype), pb)  # equal up to the half-precision rounding of one of them
    assert same.verdict == "identical"
    eps = torch.finfo(dtype).eps
    assert float(same.tv_tolerance.max()) < 20 * eps  # a threshold only storage-precision agreement can meet


def test_no_verdict_flips_between_float32_and_float64_far_above_rounding(points):
    for r, tau in [(5.0, 8.0), (2.0, 1.0), (0.5, 0.5)]:
        q, kk = points(64, 16, r, seed=6), points(80, 16, r, seed=7)
        hi = att.compare(q, kk, "spatial", "distance", temperature=tau)
        lo = att.compare(q.float(), kk.float(), "spatial", "distance", temperature=tau)
        baseline = torch.minimum(hi.tv_uniform_a, hi.tv_uniform_b)
        far = (hi.tv > 100 * lo.tv_tolerance.double()) & ((hi.tv - CLOSE_RATIO * baseline).abs() > 0.01)
        far &= (hi.top1_weight - 0.9).abs() > 0.01
        assert bool(far.any())
        assert torch.equal(hi.row_verdict_codes[far], lo.row_verdict_codes[far]), (r, tau)
        pa, pb = att.attention_map(q, kk, "spatial", temperature=tau), att.attention_map(q, kk, "distance", temperature=tau)
        m64, m32 = att.compare_maps(pa, pb), att.compare_maps(pa.float(), pb.float())
        assert torch.equal(m64.row_verdict_codes[far], m32.row_verdict_codes[far]), (r, tau)


def test_large_float32_logits_keep_a_genuine_gap_and_equal_maps_identical(points):
    # spatial vs distance with float32 logits of about 1e4 and a genuine gap of TV about 0.03: close, as in float64
    from hypviz import lorentz as L

    def keys(n, jit, seed):
        g = torch.Generator().manual_seed(seed)
        u = torch.randn(n, 16, generator=g, dtype=torch.float64)
        u[:, 0] = 0
        x = 30.0 * (1 + jit * torch.randn(n, 1, generator=g, dtype=torch.float64)) * u / u.norm(dim=-1, keepdim=True)
        x[:, 0] = 1000.0
        return L.lift(x)

    q, kk = keys(64, 0.0, 1), keys(256, 0.01, 2)
    hi = att.compare(q, kk, "spatial", "distance", temperature=100.0)
    lo = att.compare(q.float(), kk.float(), "spatial", "distance", temperature=100.0)
    assert hi.verdict == lo.verdict == "close" and lo.row_verdicts["identical"] == 0.0
    # maps equal in exact arithmetic (lorentz and distance differ by a row constant) at the same logits: identical
    assert att.compare(q.float(), kk.float(), "lorentz", "distance", temperature=100.0).verdict == "identical"
    # the same float32 logits summed in two orders, their size stated: identical; unstated: never 'different'
    stated, unstated = calibration._summed_in_two_orders(1e4), calibration._summed_in_two_orders(None)
    assert stated.verdict == "identical" and unstated.row_verdicts["different"] == 0.0


def test_unresolved_when_the_rounding_tolerance_approaches_the_tvs_judged():
    # the rule itself, at the edge: tolerance just below / above RESOLVE x the close-different TV
    ua = ub = torch.tensor([0.4], dtype=torch.float64)
    cut = CLOSE_RATIO * 0.4
    one, peak = torch.ones(1, dtype=torch.float64), torch.full((1,), 50.0, dtype=torch.float64)
    assert RESOLVE == 0.5  # the documented rule: a tolerance up to half the close/different TV resolves a row
    for tol, want in [(0.49 * cut, 0), (0.51 * cut, 4), (0.3 * cut, 0), (2.0 * cut, 4)]:
        code = row_verdicts(torch.tensor([0.25 * cut]), ua, ub, peak, peak, one, torch.tensor([tol]))
        assert int(code[0]) == want, (tol, want)
    # far above cut + tolerance the row is resolved whatever the tolerance: different
    code = row_verdicts(torch.tensor([cut + 0.06]), ua, ub, peak, peak, one, torch.tensor([0.05]))
    assert int(code[0]) == 2
    # a computed TV of 0 is identical only where the rounding resolves the row (rounding could have made it 0):
    # uniform rows uninformative, structured rows unresolved at a tolerance beyond RESOLVE x the cut
    assert att.verdict(0.0, 0.0, 0.0, peak_a=1.0, peak_b=1.0, top1_weight=1.0, tolerance=0.0) == "identical"
    assert att.verdict(0.0, 0.0, 0.0, peak_a=1.0, peak_b=1.0, top1_weight=1.0, tolerance=1.0) == "uninformative"
    assert att.verdict(0.0, 0.4, 0.4, peak_a=50.0, peak_b=50.0, top1_weight=1.0, tolerance=0.49 * cut) == "identical"
    assert att.verdict(0.0, 0.4, 0.4, peak_a=50.0, peak_b=50.0, top1_weight=1.0, tolerance=0.51 * cut) == "unresolved"
    assert att.verdict(0.01, 0.02, 0.02, peak_a=1.2, peak_b=1.2, top1_weight=1.0, tolerance=0.5) == "uninformative"
    res = calibration._bfloat16_logits()
    assert res.verdict == "unresolved" and "bfloat16" in res.tolerance_basis
    assert att.overall_verdict({"identical": 0.5, "unresolved": 0.5}) == "unresolved"
    assert att.overall_verdict({"different": 0.5, "unresolved": 0.5}) == "mixed"


def test_the_float32_calibration_case_compares_float32_with_float64():
    res = calibration._float32_vs_float64()
    assert res.dtype == "float32" and 0.0 < res.mean_tv < float(res.tv_tolerance.max())
    # its tolerance is float32's, and float32 maps far apart are not identical at it
    assert float(res.tv_tolerance.max()) < 1e-5


# --------------------------------------------------------------------------- #
# compare_maps: hostile input, streaming
# --------------------------------------------------------------------------- #
def test_compare_maps_refuses_empty_maps_and_non_finite_values():
    for shape in [(0, 4, 8), (2, 0, 8)]:
        with pytest.raises(ValueError, match="P_a must be a map of shape") as err:
            att.compare_maps(torch.zeros(shape), torch.zeros(shape))
        assert "\n" not in str(err.value)
    p = torch.full((3, 4), 0.25, dtype=torch.float64)
    for bad in (float("nan"), float("inf")):
        v = torch.ones(4, 2, dtype=torch.float64)
        v[1, 0] = bad
        with pytest.raises(ValueError, match="values must hold finite numbers") as err:
            att.compare_maps(p, p, values=v)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="precision must be one of"):
        att.compare_maps(p, p, precision="float8")
    with pytest.raises(ValueError, match="logit_scale must be"):
        att.compare_maps(p, p, logit_scale=-1.0)


def test_broadcast_maps_are_compared_without_expanding_them(monkeypatch):
    from hypviz.attention.comparison import given_maps

    g = torch.Generator().manual_seed(8)
    pa = torch.softmax(torch.randn(1, 6, 16, generator=g, dtype=torch.float64), -1)
    pb = torch.softmax(torch.randn(5, 6, 16, generator=g, dtype=torch.float64), -1)
    v = torch.randn(16, 3, generator=g, dtype=torch.float64)
    whole = att.compare_maps(pa.expand(5, 6, 16).clone(), pb, values=v)
    monkeypatch.setattr(given_maps, "_BLOCK_ELEMENTS", 16 * 4)  # blocks of 4 rows, across heads
    streamed = att.compare_maps(pa, pb, values=v)
    for field in ("tv", "kl", "tv_uniform_a", "top1_weight", "output_gap", "tv_tolerance"):
        torch.testing.assert_close(getattr(streamed, field), getattr(whole, field), rtol=1e-12, atol=1e-15)
    assert streamed.n_blocks == 8


def test_compare_reads_a_rounding_level_tie_as_a_set():
    # map a: keys 0 and 1 tied within its rounding (1e-12 apart, tolerance 1e-9); map b prefers key 0 by e^0.7
    from hypviz.attention.comparison.row_blocks import top_set

    la = torch.tensor([[0.0, -1e-12, -5.0, -6.0, -7.0], [-1e-12, 0.0, -5.0, -6.0, -7.0]], dtype=torch.float64)
    lb = torch.tensor([[0.0, -0.7, -5.0, -6.0, -7.0], [0.0, -0.7, -5.0, -6.0, -7.0]], dtype=torch.float64)
    ta = tb = torch.full((2, 1), 1e-9, dtype=torch.float64)
    va, ia = torch.topk(la, 3, dim=-1)
    vb, _ = torch.topk(lb, 3, dim=-1)
    lbt = torch.gather(lb, -1, ia)
    ratio, excess, shared = top_set(va, ia, vb, lbt, ta, tb, la.shape[-1],
                                    lambda idx: (la, lb) if idx is None else (la[idx], lb[idx]))
    want = 0.5 * (1.0 + math.exp(-0.7))  # the mean over the tied set, whichever of the two rounding put first
    torch.testing.assert_close(ratio, torch.full((2,), want, dtype=torch.float64))
    assert bool(shared.all()) and bool((excess > 0).all())


def test_a_broadcast_map_is_never_expanded_nor_copied_to_float64_whole(monkeypatch):
    # one 64 x 64 float32 map against the same map broadcast to 200 and to 800 heads, in row blocks of 512 rows:
    # the extra memory of 600 more heads is their per-row results (38,400 rows x about a dozen float32 fields,
    # 1.8 MB), not a float64 copy or an expansion of their maps (20 MB)
    from hypviz.attention.comparison import given_maps
    from hypviz.base.memory import peak_tensor_memory

    monkeypatch.setattr(given_maps, "_BLOCK_ELEMENTS", 512 * 64)
    one = torch.softmax(torch.randn(64, 64, generator=torch.Generator().manual_seed(9)), -1)
    peaks = {}
    for heads in (200, 800):
        res, peaks[heads] = peak_tensor_memory(att.compare_maps, one.expand(heads, 64, 64), one, spearman=False)
        assert res.verdict == "identical" and res.tv.shape == (heads, 64) and res.tv.dtype == torch.float32
    assert peaks[800] - peaks[200] < 5 * 2**20, peaks
