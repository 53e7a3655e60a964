"""Near the limits of floating point: either the right answer or a one-line refusal naming the limit,
never a NaN or a silently wrong result."""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention, lorentz


def pts(n: int, d: int, k: float, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return lorentz.lift(torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype), k=k)


# 3e-308: the smallest normal float64 is 2.2e-308
@pytest.mark.parametrize("dtype,tau", [(torch.float32, 1e-39), (torch.float64, 3e-308)])
def test_a_temperature_that_overflows_the_logits_is_refused_with_the_limit(dtype, tau):
    q, kk = pts(10, 8, 1.0, dtype, 1), pts(12, 8, 1.0, dtype, 2)
    with pytest.raises(ValueError, match=r"overflow .*the smallest usable is about") as err:
        attention.compare(q, kk, temperature=tau)
    smallest = float(str(err.value).rsplit("about ", 1)[1])
    res = attention.compare(q, kk, temperature=2 * smallest)  # just above the limit: finite statistics
    assert bool(torch.isfinite(res.tv).all()) and bool(torch.isfinite(res.kl).all())


@pytest.mark.parametrize("k", [1e8, 1e12, 1e30])
def test_large_k_in_float32_gives_the_float64_answer_and_meets_the_bound(k):
    q, kk = pts(16, 8, k, torch.float32, 3), pts(20, 8, k, torch.float32, 4)
    res = attention.compare(q, kk, "spatial", "distance", k=k)
    ref = attention.compare(lorentz.lift(q[:, 1:].double(), k=k), lorentz.lift(kk[:, 1:].double(), k=k), k=k)
    assert res.all_bounds_met
    assert torch.allclose(res.tv.double(), ref.tv, rtol=1e-3, atol=1e-6)
    assert torch.allclose(res.delta.double(), ref.delta, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lorentz_and_distance_maps_are_equal_at_any_k(dtype):
    for k in (1.0, 1e8, 1e16):
        q, kk = pts(12, 6, k, dtype, 5), pts(14, 6, k, dtype, 6)
        res = attention.compare(q, kk, "lorentz", "distance", k=k)
        # the same stable operands: a definition, not a check of identity 5
        assert res.max_tv == 0.0 and res.verdict == "identical"


@pytest.mark.parametrize("norm_scale", [1e-30, 1e30, 1e200, -1e250])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norm_scale_cancels_from_the_focused_map_at_any_size(norm_scale, dtype):
    q, kk, v = pts(6, 5, 1.0, dtype, 7), pts(7, 5, 1.0, dtype, 8), pts(7, 3, 1.0, dtype, 9)
    m = attention.focused_linear_map(q, kk, norm_scale=norm_scale)
    torch.testing.assert_close(m, attention.focused_linear_map(q, kk), rtol=0, atol=0)
    out = attention.focused_linear_attention(q, kk, v, norm_scale=norm_scale)
    torch.testing.assert_close(out, attention.focused_linear_attention(q, kk, v), rtol=0, atol=0)
    # with Hypformer's eps = 1e-6 the normaliser's offset no longer cancels: a finite answer, never NaN
    assert bool(torch.isfinite(attention.focused_linear_attention(q, kk, v, norm_scale=norm_scale, eps=1e-6)).all())
    res = attention.compare(q, kk, "focused", "distance", norm_scale=norm_scale)
    assert bool(torch.isfinite(res.tv).all()) and not math.isnan(res.mean_kl)


@pytest.mark.parametrize("radius", [1e5, 1e8, 1e12, 1e15])
def test_dist_of_far_float32_points_is_that_of_the_lifted_points(radius):
    import mpmath

    g = torch.Generator().manual_seed(int(math.log10(radius)))
    worst = 0.0
    for _ in range(12):
        u = torch.randn(4, generator=g, dtype=torch.float64)
        w = torch.randn(4, generator=g, dtype=torch.float64)
        u, w = u / u.norm(), w / w.norm()
        xs, ys = (radius * u).float(), (radius * (u + 1e-3 * w)).float()
        got = float(lorentz.dist(lorentz.lift(xs), lorentz.lift(ys)))
        with mpmath.workdps(80):
            X, Y = [mpmath.mpf(float(v)) for v in xs], [mpmath.mpf(float(v)) for v in ys]
            xt, yt = mpmath.sqrt(sum(a * a for a in X) + 1), mpmath.sqrt(sum(a * a for a in Y) + 1)
            ref = 2 * mpmath.asinh(mpmath.sqrt(sum((a - b) ** 2 for a, b in zip(X, Y)) - (xt - yt) ** 2) / 2)
        worst = max(worst, float(abs(got - ref) / ref))
    assert worst <= 2 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("radius", [1e3, 1e6, 1e10, 1e14])
def test_dist_of_far_float64_points_is_within_its_documented_conditioning(radius):
    # nearly radial displacements are the worst case: relative error up to about |x_s| / sqrt(k) ulps
    import mpmath

    g = torch.Generator().manual_seed(7)
    for i in range(12):
        u = torch.randn(4, generator=g, dtype=torch.float64)
        u = u / u.norm()
        xs, ys = radius * u, radius * u * (1 + 10.0 ** -(1 + i % 10))
        got = float(lorentz.dist(lorentz.lift(xs), lorentz.lift(ys)))
        with mpmath.workdps(100):
            X, Y = [mpmath.mpf(float(v)) for v in xs], [mpmath.mpf(float(v)) for v in ys]
            xt, yt = mpmath.sqrt(sum(a * a for a in X) + 1), mpmath.sqrt(sum(a * a for a in Y) + 1)
            ref = mpmath.acosh(xt * yt - sum(a * b for a, b in zip(X, Y)))
        assert float(abs(got - ref) / ref) <= 64 * torch.finfo(torch.float64).eps * (1 + radius)
