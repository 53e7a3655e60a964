"""A NEW kernel registered at run time: one registration, and every part of hypviz takes its kind.

The kernel here is logit soft-capping (Gemma 2's ``cap * tanh(s / cap)``) of the spatial product,
:math:`\\mathrm{softmax}_j(c \\tanh(q_s \\cdot \\kappa_{s,j} / (\\tau c)))`: its own finishing (not the product
itself), its own option (the cap, checked by the kernel), its own rounding bound and its own largest-logit
rule (at most the cap, whatever the temperature: not :math:`1/\\tau`).  With it registered, ``attention_map``,
``compare`` (its plan, both paths' results against the dense maps), ``compare_maps`` of its maps and the
kinds harness of ``tests/test_kinds.py`` take it with no edit elsewhere; it is then unregistered.
"""

from __future__ import annotations

import pytest
import torch

from hypviz import attention as att
from hypviz.attention.maps import kernels
from hypviz.base import kinds, validate

import test_kinds as harness

CAP = 30.0  # the kernel's default cap (Gemma 2 caps its attention logits at 50)


def _cap_(out: torch.Tensor, cap: float) -> torch.Tensor:
    return out.div_(cap).tanh_().mul_(cap)


class SoftCapped(kernels.Kernel):
    """``log-weights = cap tanh(q_s . kappa_s / (tau cap))``: the spatial product, soft-capped."""

    options = {"cap": kernels.Option(lambda v, name: validate.positive(v, name, " (the logit cap)"), CAP)}

    def operands(self, kind, q, keys, *, k, temperature, opts):
        a, b, cap = q[..., 1:] / temperature, keys[..., 1:], opts["cap"]
        # cap tanh(x / cap) is 1-Lipschitz: the product's rounding passes through, plus that of div, tanh and mul,
        # a few eps of the finished logit, which is at most min(cap, the row's product bound)
        eps, product = torch.finfo(q.dtype).eps, kernels.logit_error(a, b)
        size = product / ((a.shape[-1] + 3) * eps)  # sum_c |A_ic| max_j |B_jc|
        err = product + 4.0 * eps * size.clamp_max(cap)
        ops = kernels.Operands(kind.name, a, b, err, finish=lambda out: _cap_(out, cap))
        ops.cap = cap
        return ops

    def largest_logit(self, kind, ops, dtype):
        product = ops.largest()
        # the finished logits never exceed the cap; only a product that overflows the dtype itself is refused
        return float("inf") if product >= torch.finfo(dtype).max else min(product, ops.cap)

    def dense(self, kind, q, keys, *, k, temperature, opts):
        s = q[..., 1:] @ keys[..., 1:].transpose(-1, -2) / temperature
        return torch.softmax(_cap_(s, opts["cap"]), dim=-1)


def _reference(q, kk, k, tau, o):
    s = q[:, 1:] @ kk[:, 1:].T / tau
    return torch.softmax(CAP * torch.tanh(s / CAP), dim=-1)


@pytest.fixture
def soft_capped():
    before = dict(kernels.KERNELS)
    kernels.register_kernel("soft_capped", SoftCapped())
    kind = kinds.register(kinds.Kind(
        name="soft_capped", family="softmax", kernel="soft_capped", options=("cap",),
        formula=r"\mathrm{softmax}_j(c \tanh(q_s \cdot \kappa_{s,j} / (\tau c)))",
        title=r"soft-capped: $\mathrm{softmax}_j(c\tanh(q_s\cdot\kappa_{s,j}/\tau c))$",
        plain="soft-capped spatial", html="soft-capped spatial", description="the spatial logits soft-capped (a test kernel)",
        rounding="the product's bound plus 4 eps min(cap, the row's product bound)",
    ))
    harness.REFERENCES["soft_capped"] = _reference
    yield kind
    del harness.REFERENCES["soft_capped"]
    kinds.unregister("soft_capped")
    kernels.unregister_kernel("soft_capped")
    assert kernels.KERNELS == before and "soft_capped" not in kinds.names()


def test_a_new_kernel_gives_maps_comparisons_and_plans(soft_capped, tmp_path):
    q, kk = harness._points(24, 1.5, 1), harness._points(40, 1.5, 2)
    got = att.attention_map(q, kk, "soft_capped", k=harness.K, temperature=0.5)
    torch.testing.assert_close(got, _reference(q, kk, harness.K, 0.5, {}), rtol=1e-10, atol=1e-13)
    assert "soft_capped" in att.KINDS and "soft_capped" not in att.SOFTMAX_KINDS  # live views: comparable, no scores
    for other in ("spatial", "focused"):
        plan = att.plan_compare(q, kk, "soft_capped", other, k=harness.K, temperature=0.5)
        assert plan.plan.path == "two_products" and "different kernels ('soft_capped'" in plan.plan.reason
        res = att.run_compare(plan)
        pb = att.attention_map(q, kk, other, k=harness.K, temperature=0.5)
        torch.testing.assert_close(res.tv, 0.5 * (got - pb).abs().sum(-1), rtol=1e-9, atol=1e-12)
        given = att.compare_maps(got, pb)  # the same two maps, given as they are
        torch.testing.assert_close(given.tv, res.tv, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(given.kl, res.kl, rtol=1e-7, atol=1e-12)
        assert res.delta is None and given.verdict == res.verdict
    # the harness of tests/test_kinds.py, run on the new kind
    qk = (harness._points(24, 0.6, 1), harness._points(40, 0.6, 2))
    harness.test_the_dense_map_is_its_formula("soft_capped", qk)
    harness.test_the_streamed_compare_is_the_dense_maps("soft_capped", "distance", qk)
    for r in (0.3, 3.0):
        harness.test_the_rounding_bound_holds_and_is_not_loose_by_orders("soft_capped", r)
    harness.test_the_softmax_gap_bound_applies_where_the_registry_says("soft_capped", qk)
    harness.test_the_command_and_its_report_take_every_comparable_kind("soft_capped", tmp_path, qk)


def test_the_kernel_checks_its_options_and_rules_its_largest_logit(soft_capped):
    assert kernels.options(soft_capped) == {"cap": CAP}
    assert kernels.options(soft_capped, {"cap": 5}) == {"cap": 5.0}
    with pytest.raises(ValueError, match=r"^cap must be .*\(the logit cap\)"):
        kernels.options(soft_capped, {"cap": -1.0})
    q, kk = harness._points(10, 1.0, 3).float(), harness._points(12, 1.0, 4).float()
    # logits at most the cap at any temperature: one at which the spatial logits would reach a quarter of
    # float32's range is refused for "spatial" (it needs a margin of 16) and fine here (the product stays finite)
    at_1 = kernels.operands("spatial", q[None], kk[None], k=harness.K, temperature=1.0, opts={}).largest()
    tau = at_1 / (torch.finfo(torch.float32).max / 4)
    res = att.compare(q, kk, "soft_capped", "focused", k=harness.K, temperature=tau)
    assert bool(torch.isfinite(res.tv).all()) and bool(torch.isfinite(res.kl).all())
    with pytest.raises(ValueError, match=r"makes the logits overflow float32"):
        att.compare(q, kk, "spatial", "focused", k=harness.K, temperature=tau)
    with pytest.raises(ValueError, match=r"temperature 1e-39 makes the logits overflow float32 .*smallest usable is about") as e:
        att.compare(q, kk, "soft_capped", "focused", k=harness.K, temperature=1e-39)  # the product itself overflows
    smallest = float(str(e.value).rsplit("about ", 1)[1])
    assert smallest < tau and bool(torch.isfinite(att.compare(q, kk, "soft_capped", "focused", k=harness.K,
                                                                temperature=1.01 * smallest).tv).all())


def test_a_kernel_still_computing_a_kind_is_not_unregistered(soft_capped):
    with pytest.raises(ValueError, match=r"^kernel 'soft_capped' still computes the kinds 'soft_capped': unregister them first$"):
        kernels.unregister_kernel("soft_capped")
    with pytest.raises(ValueError, match=r"^name must be a kernel registered at run time, got 'bilinear'$"):
        kernels.unregister_kernel("bilinear")


class GeodesicRows(kernels.Kernel):
    """The softmax of ``-d(q, kappa) / tau`` (``d`` not squared), with a dense map only: no operands declared."""

    def dense(self, kind, q, keys, *, k, temperature, opts):
        u = kernels.distance_logits(q, keys, k=k, temperature=-k)  # |q - kappa|^2_L / 2k
        return torch.softmax(-(k ** 0.5) * torch.log1p(u + torch.sqrt(u * (u + 2.0))) / temperature, dim=-1)


def test_a_kernel_with_a_dense_map_only_is_compared_by_its_rows(tmp_path):
    kernels.register_kernel("geodesic_rows", GeodesicRows())
    kinds.register(kinds.Kind(
        name="geodesic_rows", family="softmax", kernel="geodesic_rows", formula=r"\mathrm{softmax}_j(-d(q, \kappa_j) / \tau)",
        title="geodesic rows", plain="geodesic rows", html="geodesic rows", description="-d / tau, dense only (a test kernel)",
        rounding="measured on the weights (dense rows)"))
    try:
        q, kk = harness._points(24, 1.5, 5), harness._points(40, 1.5, 6)
        plan = att.plan_compare(q, kk, "geodesic_rows", "distance", k=harness.K, temperature=0.5, block_rows=10)
        assert plan.plan.path == "dense_rows" and "'geodesic_rows' declares no operands" in plan.plan.reason
        with pytest.raises(ValueError, match=r"^path must be 'dense_rows' for 'geodesic_rows' and 'distance'"):
            plan.with_path("two_products")
        res = att.run_compare(plan)
        pa = att.attention_map(q, kk, "geodesic_rows", k=harness.K, temperature=0.5)
        pb = att.attention_map(q, kk, "distance", k=harness.K, temperature=0.5)
        torch.testing.assert_close(res.tv, 0.5 * (pa - pb).abs().sum(-1), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(res.kl, (pb * (pb.log() - pa.log())).sum(-1), rtol=1e-7, atol=1e-12)
        assert att.compare_maps(pa, pb).verdict == res.verdict
    finally:
        kinds.unregister("geodesic_rows")
        kernels.unregister_kernel("geodesic_rows")
