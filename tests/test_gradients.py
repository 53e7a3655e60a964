"""Gradients: the maps are differentiable (gradcheck), the fused in-place path is kept when none is
needed, and the geodesic distance has the subgradient 0 (not NaN) where it has its kink, x = y."""

from __future__ import annotations

import pytest
import torch

from hypviz import attention, lorentz


def spatial(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_(True)


@pytest.mark.parametrize("kind", attention.KINDS)
def test_attention_map_passes_gradcheck(kind):
    qs, ks = spatial(3, 4, 1), spatial(5, 4, 2)
    fn = lambda a, b: attention.attention_map(lorentz.lift(a), lorentz.lift(b), kind, temperature=1.5)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (qs, ks))


def test_focused_map_and_attention_pass_gradcheck():
    qs, ks, vs = spatial(3, 4, 3), spatial(5, 4, 4), spatial(5, 3, 5)
    assert torch.autograd.gradcheck(lambda a, b: attention.focused_linear_map(lorentz.lift(a), lorentz.lift(b), power=3.0),
                                    (qs, ks))
    assert torch.autograd.gradcheck(
        lambda a, b, c: attention.focused_linear_attention(lorentz.lift(a), lorentz.lift(b), lorentz.lift(c)), (qs, ks, vs)
    )


@pytest.mark.parametrize("kind", ["spatial", "distance"])
def test_the_fused_path_and_the_differentiable_path_agree(kind):
    qs, ks = spatial(40, 8, 6), spatial(50, 8, 7)
    with torch.no_grad():
        fused = attention.attention_map(lorentz.lift(qs), lorentz.lift(ks), kind)
    grad = attention.attention_map(lorentz.lift(qs), lorentz.lift(ks), kind)
    assert grad.requires_grad and not fused.requires_grad
    torch.testing.assert_close(grad.detach(), fused, rtol=1e-14, atol=1e-16)


def test_dist_of_a_point_to_itself_has_gradient_zero():
    x = lorentz.lift(spatial(4, 3, 8).detach()).requires_grad_(True)
    d = lorentz.dist(x, x.detach())
    d.sum().backward()
    assert torch.equal(d.detach(), torch.zeros(4, dtype=torch.float64))
    assert torch.equal(x.grad, torch.zeros_like(x))
    o = lorentz.origin(3).requires_grad_(True)
    lorentz.dist(o, o.detach()).backward()
    assert torch.isfinite(o.grad).all()


def test_dist_keeps_its_accuracy_near_zero():
    x = lorentz.lift(torch.tensor([[3.0, 4.0, 0.0]], dtype=torch.float64))
    for eps in (1e-4, 1e-8, 1e-12):
        y = lorentz.lift(torch.tensor([[3.0, 4.0, eps]], dtype=torch.float64))
        # for points this close the distance equals the Euclidean separation of the spatial parts to O(eps^2)
        # times the metric factor at that point; compare with the arcosh-free closed form at high precision
        import mpmath

        with mpmath.workdps(50):
            xs, ys = [mpmath.mpf(v) for v in (3, 4, 0)], [mpmath.mpf(v) for v in (3, 4, eps)]
            xt, yt = mpmath.sqrt(sum(v * v for v in xs) + 1), mpmath.sqrt(sum(v * v for v in ys) + 1)
            sq = sum((a - b) ** 2 for a, b in zip(xs, ys)) - (xt - yt) ** 2
            ref = 2 * mpmath.asinh(mpmath.sqrt(sq) / 2)
        got = float(lorentz.dist(x, y))
        assert abs(got - float(ref)) <= 8 * 2.0**-53 * float(ref)


def test_k_that_requires_grad_or_is_a_bool_is_refused_and_numpy_integers_are_accepted():
    import numpy as np

    q = lorentz.lift(spatial(4, 3, 9).detach())
    with pytest.raises(ValueError, match="requires grad"):
        attention.compare(q, q, k=torch.tensor(1.0, requires_grad=True))
    with pytest.raises(ValueError, match="bool"):
        attention.compare(q, q, k=True)
    assert attention.compare(q, q, topk=np.int64(3)).topk == 3


# every differentiable function of hypviz.lorentz, as a function of spatial parts (points made by lift);
# two-argument ones get x and y, which the test sets equal (coincident points)
_ONE = {
    "lift": lambda s: lorentz.lift(s),
    "expmap0": lambda s: lorentz.expmap0(torch.nn.functional.pad(s, (1, 0))),
    "logmap0": lambda s: lorentz.logmap0(lorentz.lift(s)),
    "to_poincare": lambda s: lorentz.to_poincare(lorentz.lift(s)),
    "from_poincare": lambda s: lorentz.from_poincare(0.1 * torch.tanh(s)),
    "to_klein": lambda s: lorentz.to_klein(lorentz.lift(s)),
    "from_klein": lambda s: lorentz.from_klein(0.1 * torch.tanh(s)),
}
_TWO = {
    "inner": lambda a, b: lorentz.inner(lorentz.lift(a), lorentz.lift(b)),
    "sqdist": lambda a, b: lorentz.sqdist(lorentz.lift(a), lorentz.lift(b)),
    "pairwise_inner": lambda a, b: lorentz.pairwise_inner(lorentz.lift(a), lorentz.lift(b)),
    "pairwise_sqdist": lambda a, b: lorentz.pairwise_sqdist(lorentz.lift(a), lorentz.lift(b)),
    "distance_operands": lambda a, b: torch.cat(lorentz.distance_operands(lorentz.lift(a), lorentz.lift(b)), -1),
    "geodesic": lambda a, b: lorentz.geodesic(lorentz.lift(a), lorentz.lift(b), n=5),
}


def _at(where: str) -> torch.Tensor:
    return spatial(3, 4, 10).detach() if where == "x" else torch.zeros(3, 4, dtype=torch.float64)


@pytest.mark.parametrize("where", ["x", "origin"])
@pytest.mark.parametrize("name", sorted(_ONE))
def test_every_map_passes_gradcheck_at_a_point_and_at_the_origin(name, where):
    s = _at(where).requires_grad_(True)
    assert torch.autograd.gradcheck(_ONE[name], (s,))


@pytest.mark.parametrize("where", ["x", "origin"])
@pytest.mark.parametrize("name", sorted(_TWO))
def test_every_two_point_function_passes_gradcheck_at_coincident_points(name, where):
    a, b = _at(where).requires_grad_(True), _at(where).requires_grad_(True)  # x = y
    out = _TWO[name](a, b)
    ga, gb = torch.autograd.grad(out.sum(), (a, b))
    assert torch.isfinite(ga).all() and torch.isfinite(gb).all()
    assert torch.autograd.gradcheck(_TWO[name], (a, b))


def test_geodesic_from_a_point_to_itself_has_finite_gradients():
    x = lorentz.lift(spatial(2, 3, 11).detach()).requires_grad_(True)
    lorentz.geodesic(x, x).sum().backward()  # x = y, the same tensor
    assert torch.isfinite(x.grad).all()
    o = lorentz.origin(3).requires_grad_(True)
    lorentz.geodesic(o, o, n=8).sum().backward()  # origin to origin
    assert torch.isfinite(o.grad).all()


@pytest.mark.parametrize("param", ["temperature", "power", "norm_scale"])
def test_every_scalar_parameter_that_requires_grad_is_refused_like_k(param):
    q = lorentz.lift(spatial(4, 3, 12).detach())
    value = torch.tensor(1.5, requires_grad=True)
    kind = "distance" if param == "temperature" else "focused"
    for call in (lambda: attention.attention_map(q, q, kind, **{param: value}),
                 lambda: attention.compare(q, q, "spatial" if kind == "distance" else kind, "distance", **{param: value})):
        with pytest.raises(ValueError, match=f"{param} is a tensor that requires grad.*{param}.detach"):
            call()
    # a tensor without grad is a number like any other
    detached = attention.attention_map(q, q, kind, **{param: value.detach()})
    assert torch.equal(detached, attention.attention_map(q, q, kind, **{param: 1.5}))
