"""compare(): the one-product path for two softmax kinds gives what the two-product path gives.

``spatial`` against ``distance`` or ``lorentz`` is computed from ONE matrix product per row block
(the second map is a rank-one update of the first); every other pair from one product per map.
The plan (:func:`hypviz.attention.plan_compare`) says which path runs and why; choosing the general
path through the plan on the same inputs must reproduce every field.
"""

from __future__ import annotations

import pytest
import torch

from hypviz import attention as att
from hypviz.attention.comparison import row_blocks as block_stats


def both_paths(*args, **kwargs):
    plan = att.plan_compare(*args, **kwargs)
    assert plan.plan.path in ("one_product", "fused"), plan.plan.reason  # fused: the one product, its statistics fused
    one, two = att.run_compare(plan), att.run_compare(plan.with_path("two_products"))
    assert (one.plan.path, two.plan.path) == (plan.plan.path, "two_products")
    return one, two


FIELDS = ("kl", "tv", "tv_uniform_a", "tv_uniform_b", "logit_gap", "delta", "tv_bound", "kl_bound")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "a,b,r,k,tau",
    [
        ("spatial", "distance", 1.0, 1.0, None),
        ("distance", "spatial", 2.0, 1.0, 2.0),
        ("spatial", "lorentz", 0.05, 1.0, None),  # near uniform: the baselines come from the logits
        ("lorentz", "spatial", 6.0, 4.0, 0.5),  # wide gaps: the direct log-softmax rows
        ("spatial", "distance", 3.0, 1e4, 1.0),  # large k: no cancellation of size k
    ],
)
def test_one_product_equals_two_products(points, dtype, a, b, r, k, tau):
    # sizes: two batch entries of 150 rows are three row blocks of 64 (the last one partial), and 300
    # keys of dimension 16; a wrong rank-one update, block boundary or batch index moves a field by
    # O(1), far above the tolerances, whose rounding terms shrink with the sizes, so these sizes decide
    # as well as larger ones (each top-1 disagreement is 1/300 of the rows: the 0.99 bar allows 3)
    q = points(150, 16, r, k=k, seed=1, lead=(2,), dtype=dtype)
    kk = points(300, 16, r, k=k, seed=2, lead=(2,), dtype=dtype)
    one, two = both_paths(q, kk, a, b, k=k, temperature=tau, block_rows=64, spearman=True)
    rtol = 1e-9 if dtype == torch.float64 else 2e-4
    for name in FIELDS:
        x, y = getattr(one, name).double(), getattr(two, name).double()
        scale = y.abs().max().clamp_min(torch.finfo(dtype).eps)
        assert torch.allclose(x, y, rtol=rtol, atol=rtol * float(scale)), name
    # the rounding allowances bound different computations: the same size, not the same number
    ratio = one.allowance.double() / two.allowance.double()
    assert bool(((ratio > 0.2) & (ratio < 5)).all())
    assert torch.equal(one.bound_met, two.bound_met)
    # discrete statistics: tie-aware, so the two rounding patterns agree on (almost) every row
    assert float((one.top1 == two.top1).double().mean()) >= 0.99
    assert float((one.topk_overlap - two.topk_overlap).abs().max()) <= 0.2 + 1e-6  # one key of the top 5 (0.2 in float32)
    assert torch.allclose(one.spearman.double(), two.spearman.double(), atol=1e-2)


def test_one_product_sampled_rows(points):
    q, kk = points(900, 8, 1.5, seed=3), points(500, 8, 1.5, seed=4)
    one, two = both_paths(q, kk, rows=128, seed=7, block_rows=50)
    assert one.plan.sampled_rows == 128 and one.plan.block_rows == 50 and one.plan.n_blocks == 3
    assert torch.equal(one.row_index, two.row_index)
    assert torch.allclose(one.tv, two.tv, rtol=1e-9, atol=1e-15)
    assert one.ci("tv") == pytest.approx(two.ci("tv"), rel=1e-9)


def test_topk_rows_equals_torch_topk():
    g = torch.Generator().manual_seed(0)
    for m in (5, 100, 4096, 5000, 16411):
        x = torch.randn(7, m, generator=g)
        x[0, :] = 1.0  # all tied
        x[1, ::97] = 9.0  # ties at the top, spread over chunks
        for k in (1, 5):
            if k > m:
                continue
            v, i = block_stats._topk_rows(x, k)
            tv, _ = torch.topk(x, k, dim=-1)
            assert torch.equal(v, tv)
            assert torch.equal(torch.gather(x, -1, i), v)  # the indices point at those values
            assert bool((i.sort(dim=-1).values.diff(dim=-1) > 0).all()) if k > 1 else True  # distinct keys


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("a,b", [("spatial", "distance"), ("distance", "lorentz"), ("focused", "spatial")])
def test_compare_leaves_its_inputs_untouched(points, dtype, a, b):
    q, kk = points(40, 6, 2.0, seed=5, dtype=dtype), points(70, 6, 2.0, seed=6, dtype=dtype)
    q0, k0 = q.clone(), kk.clone()
    att.compare(q, kk, a, b, block_rows=16, rows=20)
    att.compare(q, kk, a, b)
    assert torch.equal(q, q0) and torch.equal(kk, k0)


@pytest.mark.parametrize("a,b,path,words", [
    ("spatial", "distance", "one_product", "share one product"),
    ("lorentz", "spatial", "one_product", "rank-one update"),
    ("distance", "lorentz", "two_products", "do not share one product"),
    ("spatial", "spatial", "two_products", "do not share one product"),
    ("focused", "distance", "two_products", "different kernels ('focused', 'bilinear')"),
])
def test_the_plan_says_which_path_and_why(points, a, b, path, words):
    q, kk = points(30, 4, 1.0, seed=8), points(40, 4, 1.0, seed=9)
    plan = att.plan_compare(q, kk, a, b, block_rows=7)
    assert plan.plan.path == path and words in plan.plan.reason
    assert (plan.plan.block_rows, plan.plan.n_blocks, plan.plan.block_reason) == (7, 5, "block_rows given")
    res = att.compare(q, kk, a, b, block_rows=7)
    assert res.plan == plan.plan and res.to_dict()["plan"]["path"] == path and path in str(res.plan)


def test_the_one_product_path_is_refused_where_the_kernel_shares_none(points):
    q = points(10, 3, 1.0, seed=10)
    plan = att.plan_compare(q, q, "distance", "lorentz")
    with pytest.raises(ValueError, match=r"^path must be 'two_products' or 'dense_rows' for 'distance' and 'lorentz'"):
        plan.with_path("one_product")
    with pytest.raises(ValueError,
                       match=r"^path must be one of 'fused', 'one_product', 'two_products', 'dense_rows', got 'dense'$"):
        plan.with_path("dense")
    with pytest.raises(TypeError, match=r"^plan must be a ComparePlan \(from plan_compare\), got dict$"):
        att.run_compare({})


@pytest.mark.parametrize("a,b", [("spatial", "distance"), ("focused", "distance_rf"), ("lorentz", "distance")])
def test_the_dense_rows_path_gives_what_the_operands_give(points, a, b):
    # the fallback for kernels without operands, chosen through the plan for kernels that have them
    q, kk = points(60, 4, 1.5, seed=11, lead=(2,)), points(70, 4, 1.5, seed=12, lead=(2,))
    plan = att.plan_compare(q, kk, a, b, block_rows=16, features=64)
    ops, dense = att.run_compare(plan), att.run_compare(plan.with_path("dense_rows"))
    assert dense.plan.path == "dense_rows" and dense.verdict == ops.verdict
    for name in ("kl", "tv", "tv_uniform_a", "tv_uniform_b", "peak_a", "peak_b"):
        torch.testing.assert_close(getattr(dense, name), getattr(ops, name), rtol=1e-9, atol=1e-12, msg=name)
    assert torch.equal(dense.top1, ops.top1)
    ratio = dense.tv_tolerance / ops.tv_tolerance  # a measured level, of the size of the operands' bound
    assert bool(((ratio > 0.05) & (ratio < 20)).all())
