"""The verdict held to its calibration table, its symmetry and aggregation; compare_maps; the outputs (values=)."""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.attention.comparison import calibration
from hypviz.attention.comparison.result import ROW_VERDICTS, describe_fractions, overall_verdict, row_verdicts


@pytest.fixture(scope="module")
def built():
    return calibration.cases()


def test_every_calibration_case_gets_its_verdict(built):
    wrong = [(case.name, res.verdict, case.expected) for case, res in built if res.verdict != case.expected]
    assert not wrong, f"cases whose verdict moved (name, got, expected): {wrong}"


def test_each_calibration_case_is_computed_in_the_dtype_its_name_says(built):
    # a case named after a precision must really be that precision (not float64 compared with itself)
    for case, res in built:
        for name in ("float16", "bfloat16", "float32"):
            if case.name.startswith(name) or f" {name} " in f" {case.name} ".replace(",", " "):
                assert name in res.dtype or name in (res.tolerance_basis or ""), (case.name, res.dtype)


def test_the_calibration_table_covers_every_verdict(built):
    assert {case.expected for case, _ in built} == set(att.VERDICTS)
    assert all(case.why and case.setup for case, _ in built)


def test_a_row_verdict_does_not_depend_on_which_map_is_the_reference(built):
    # swapping a and b swaps the per-map fields; every row keeps its verdict
    for case, res in built:
        swapped = row_verdicts(res.tv, res.tv_uniform_b, res.tv_uniform_a, res.peak_b, res.peak_a, res.top1_weight,
                               res.tv_tolerance)
        assert torch.equal(swapped, res.row_verdict_codes), case.name


def test_compare_swapped_gives_the_same_verdicts(points):
    q, kk = points(40, 8, 2.0, seed=1), points(50, 8, 2.0, seed=2)
    for a, b in [("spatial", "distance"), ("focused", "distance"), ("spatial", "lorentz")]:
        ab, ba = att.compare(q, kk, a, b, temperature=2.0), att.compare(q, kk, b, a, temperature=2.0)
        assert torch.equal(ab.row_verdict_codes, ba.row_verdict_codes), (a, b)
        assert ab.verdict == ba.verdict


def test_overall_verdict_from_fractions():
    assert overall_verdict({"identical": 1.0}) == "identical"
    assert overall_verdict({"identical": 0.5, "close": 0.45, "different": 0.05}) == "close"
    assert overall_verdict({"identical": 0.85, "different": 0.15}) == "mixed"
    assert overall_verdict({"uninformative": 0.95, "different": 0.05}) == "uninformative"
    assert overall_verdict({"different": 0.6, "uninformative": 0.4}) == "mixed"
    assert overall_verdict({"different": 0.9, "close": 0.1}) == "different"
    assert describe_fractions({"different": 0.6, "uninformative": 0.4, "close": 0.0}) == "60% different, 40% uninformative"


def test_near_uniform_scales_with_the_number_of_keys():
    # the same absolute TV from uniform: near uniform at M = 16 with a flat tilt, not with one key at 4000x its share
    m = 100_000
    flat = att.verdict(0.04, 0.04, 0.04, peak_a=1.3, peak_b=1.3, top1_weight=0.95)
    peaked = att.verdict(0.04, 0.04, 0.04, peak_a=0.04 * m, peak_b=0.04 * m, top1_weight=0.0)
    assert flat == "uninformative" and peaked == "different"


def test_peaks_and_favourite_weights_match_dense_maps(points):
    q, kk = points(30, 6, 2.5, seed=3), points(70, 6, 2.5, seed=4)
    for a, b in [("spatial", "distance"), ("focused", "distance"), ("distance", "lorentz")]:
        res = att.compare(q, kk, a, b, temperature=1.5)
        pa = att.attention_map(q, kk, a, temperature=1.5)
        pb = att.attention_map(q, kk, b, temperature=1.5)
        m = kk.shape[-2]
        assert torch.allclose(res.peak_a, m * pa.amax(-1), rtol=1e-9)
        assert torch.allclose(res.peak_b, m * pb.amax(-1), rtol=1e-9)
        fa = pa.gather(-1, pb.argmax(-1, keepdim=True)).squeeze(-1) / pa.amax(-1)
        fb = pb.gather(-1, pa.argmax(-1, keepdim=True)).squeeze(-1) / pb.amax(-1)
        # tie-aware: at least the plain ratio, never above 1
        assert bool((res.top1_weight >= torch.minimum(fa, fb) - 1e-9).all()) and bool((res.top1_weight <= 1.0).all())


def test_compare_maps_reproduces_compare(points):
    q, kk = points(25, 6, 2.0, seed=5, lead=(3,)), points(40, 6, 2.0, seed=6, lead=(3,))
    for a, b in [("spatial", "distance"), ("focused", "distance")]:
        res = att.compare(q, kk, a, b, temperature=2.0)
        got = att.compare_maps(att.attention_map(q, kk, a, temperature=2.0), att.attention_map(q, kk, b, temperature=2.0),
                               a=a, b=b)
        for field in ("tv", "kl", "tv_uniform_a", "tv_uniform_b", "peak_a", "peak_b", "topk_overlap", "spearman", "top1_weight"):
            assert torch.allclose(getattr(got, field), getattr(res, field), atol=1e-9), (a, b, field)
        assert torch.equal(got.top1, res.top1)
        assert got.verdict == res.verdict and got.row_verdicts == res.row_verdicts
        assert got.delta is None and not got.bound_applies
        assert f"'{a}' (P_a) vs '{b}' (P_b)" in got.summary() and "tau" not in got.summary()


@pytest.mark.parametrize(
    "maps, match",
    [
        ((torch.tensor([[0.5, 0.5], [0.7, 0.4]]), torch.full((2, 2), 0.5)), r"P_a's rows must each sum to 1 .* in row 1"),
        ((torch.tensor([[1.2, -0.2]]), torch.full((1, 2), 0.5)), r"P_a must hold non-negative weights, got -0.2 in row 0"),
        ((torch.full((1, 2), 0.5), torch.tensor([[float("nan"), 1.0]])),
         r"P_b must hold finite weights, got NaN or inf in row 0"),
        ((torch.full((2, 3), 1 / 3), torch.full((2, 4), 0.25)), r"P_a and P_b must have the same \(N queries, M keys\)"),
        ((torch.full((3,), 1 / 3), torch.full((3,), 1 / 3)), r"P_a must be a map of shape \(\.\.\., N, M\)"),
    ],
)
def test_compare_maps_refuses_bad_maps_in_one_line(maps, match):
    with pytest.raises(ValueError, match=match) as err:
        att.compare_maps(*maps)
    assert "\n" not in str(err.value)


def test_compare_maps_names_the_worst_row_of_a_batch():
    p = torch.full((2, 3, 4), 0.25, dtype=torch.float64)
    p[1, 2] = torch.tensor([0.25, 0.25, 0.25, 0.5])
    p[0, 1] = torch.tensor([0.25, 0.25, 0.25, 0.26])
    with pytest.raises(ValueError, match=r"off by 0\.25 in row \(1, 2\)"):
        att.compare_maps(p, torch.full((2, 3, 4), 0.25, dtype=torch.float64))


def test_outputs_are_the_centroids_of_the_two_maps(points):
    q, kk, v = points(20, 5, 1.5, seed=7, lead=(2,)), points(30, 5, 1.5, seed=8, lead=(2,)), points(30, 5, 1.5, seed=9, lead=(2,))

    def centroid(m):
        norm = (m[..., :1].square() - m[..., 1:].square().sum(-1, keepdim=True)).sqrt()
        return L.lift(m[..., 1:] / norm, k=1.0)

    for a, b in [("spatial", "distance"), ("focused", "distance"), ("lorentz", "distance")]:
        res = att.compare(q, kk, a, b, temperature=1.0, values=v, block_rows=7)
        pa, pb = att.attention_map(q, kk, a, temperature=1.0), att.attention_map(q, kk, b, temperature=1.0)
        ca, cb, cu = centroid(pa @ v), centroid(pb @ v), centroid(v.mean(-2, keepdim=True))
        assert torch.allclose(res.output_gap, L.dist(ca, cb), atol=1e-12)
        assert torch.allclose(res.output_uniform_b, L.dist(cb, cu), atol=1e-12)
        assert torch.allclose(res.output_uniform_a, L.dist(ca, cu), atol=1e-12)
        assert res.output_ratio == pytest.approx(float(res.output_gap.mean() / res.output_uniform_b.mean()))
    assert att.compare(q, kk, "lorentz", "distance", values=v).mean_output_gap < 1e-12
    assert att.compare(q, kk).output_gap is None


def test_compare_maps_outputs_euclidean_and_on_the_hyperboloid(points):
    g = torch.Generator().manual_seed(10)
    pa = torch.softmax(torch.randn(6, 9, generator=g, dtype=torch.float64), -1)
    pb = torch.softmax(torch.randn(6, 9, generator=g, dtype=torch.float64), -1)
    v = torch.randn(9, 3, generator=g, dtype=torch.float64)
    res = att.compare_maps(pa, pb, values=v)
    assert torch.allclose(res.output_gap, (pa @ v - pb @ v).norm(dim=-1))
    assert torch.allclose(res.output_uniform_b, (pb @ v - v.mean(0)).norm(dim=-1))
    assert res.output_metric.startswith("Euclidean")
    hv = points(9, 2, 1.0, seed=11)
    assert att.compare_maps(pa, pb, values=hv, k=1.0).output_metric.startswith("geodesic")
    with pytest.raises(ValueError, match="values must have shape"):
        att.compare_maps(pa, pb, values=v[:4])


def test_every_row_verdict_is_reachable_from_compare(points):
    seen = set()
    for r in (0.01, 5.0):
        codes = att.compare(points(64, 16, r, seed=1), points(64, 16, r, seed=2)).row_verdict_codes
        seen |= {ROW_VERDICTS[int(c)] for c in codes}
    codes = att.compare(points(8, 16, 1.0, seed=1), points(8, 16, 1.0, seed=2), "lorentz").row_verdict_codes
    seen |= {ROW_VERDICTS[int(c)] for c in codes}
    assert {"identical", "uninformative", "different"} <= seen
    assert math.isfinite(att.compare(points(8, 4, 1.0, seed=3), points(8, 4, 1.0, seed=4)).gap_ratio)
