"""Pins: each threshold and bound of ``distance_topk`` and of the top-key search checked against a value computed here.

The mutation pass (``scripts/mutants.py``) plants one bug at a time; these tests are the ones that fail on the
bugs the rest of the suite let through: an exact row's weights floored too high, a bound whose sum of
:math:`e^u` below rank :math:`K` is dropped, the tail's margin and the default target changed, the index's recall
measured with too much slack, the candidates' memory budget.  Every expected value comes from the points
themselves in float64 (the exact map, the exact logits), not from the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.attention import exact_top_keys
from hypviz.attention.approx import key_search as ks
from hypviz.base.memory import peak_tensor_memory

D = 8


def _at_logits(logits: torch.Tensor, d: int = D, seed: int = 5, k: float = 1.0) -> torch.Tensor:
    """Keys whose distance logit from the origin is ``logits`` (temperature 1), in random directions:
    :math:`u = x_t - \\sqrt k = -\\mathrm{logit} / \\sqrt k`."""
    u = -logits.double() / math.sqrt(k)
    kt = u + math.sqrt(k)
    dirs = torch.randn(len(logits), d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return L.lift(dirs / dirs.norm(dim=-1, keepdim=True) * (kt * kt - k).clamp_min(0).sqrt().unsqueeze(-1), k=k)


def _origin(n: int = 1, dtype=torch.float64, k: float = 1.0) -> torch.Tensor:
    return L.lift(torch.zeros(n, D, dtype=dtype), k=k)


def _exact_logits(q: torch.Tensor, kk: torch.Tensor, tau: float, k: float = 1.0) -> torch.Tensor:
    """:math:`-\\|q - \\kappa\\|_L^2 / (2\\tau)` in float64 from the points."""
    return -0.5 * (-2.0 * k - 2.0 * L.pairwise_inner(q.double(), kk.double())).clamp_min(0.0) / tau


def _rebuilt(res, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The result's map from its cut in float64 (``s``: the exact logits), and the weights before normalising."""
    t, beta, gamma = (c.double().unsqueeze(-1) for c in res.cut.unbind(-1))
    mx = s.amax(-1, keepdim=True)
    u = s - t
    w = torch.where(u >= 0, torch.exp(s - mx), torch.exp(t - mx) * (1.0 + beta * u + gamma * u * u))
    return w / w.sum(-1, keepdim=True), w


# --------------------------------------------------------------------------- #
# distance_topk: rows with every key exact
# --------------------------------------------------------------------------- #
def test_exact_rows_weigh_far_keys_by_their_own_exponential_in_float32():
    # one key at logit 0 with value v0, 4,000 at logit -20 with value v1: e^-20 each, 8e-6 of the row in all, so the
    # output is v0 to 1e-5; a weight floor at e^-8.7 (instead of e^-43.7) would give them 0.40 of the row
    logits = torch.cat([torch.zeros(1, dtype=torch.float64), torch.full((4000,), -20.0, dtype=torch.float64)])
    kk = _at_logits(logits)
    vals = L.lift(torch.cat([torch.zeros(1, 3, dtype=torch.float64), torch.full((4000, 3), 2.0, dtype=torch.float64)]))
    q = _origin()
    s = _exact_logits(q, kk, 1.0)
    p = torch.softmax(s, -1)
    m = p @ vals
    want = L.lift(m[:, 1:] / torch.sqrt(m[:, 0] ** 2 - m[:, 1:].square().sum(-1)).unsqueeze(-1))
    assert float(L.pairwise_sqdist(want, vals[:1]).max()) < 1e-8  # the reference is v0, to the far keys' 8e-6
    for dtype in (torch.float32, torch.float64):
        res = att.distance_topk_attention(q.to(dtype), kk.to(dtype), vals.to(dtype), temperature=1.0, top=(4001,))
        assert res.top_counts.tolist() == [4001] and bool(res.met.all())
        torch.testing.assert_close(res.output.double(), want, rtol=0.0, atol=1e-5)
        # the row's distance from uniform is the exact map's: 1 - 1/M up to the far keys' share
        base = 0.5 * (p - 1.0 / p.shape[-1]).abs().sum(-1)
        torch.testing.assert_close(res.row_baseline.double(), base, rtol=1e-5, atol=0.0)


# --------------------------------------------------------------------------- #
# distance_topk: the bound where the sampled fit is blind
# --------------------------------------------------------------------------- #
M_BLIND = 4096


def _blind(hidden: float, k: float = 1.0) -> torch.Tensor:
    """64 keys near logit 0 (ranks 1 to 64), the 64 keys the fit samples (seed 0) at -3, the rest at ``hidden``."""
    fit = torch.randperm(M_BLIND, generator=torch.Generator().manual_seed(0))[:64]
    logits = torch.full((M_BLIND,), hidden, dtype=torch.float64)
    logits[fit] = -3.0
    logits[:64] = -0.02 * torch.linspace(0.0, 1.0, 64, dtype=torch.float64)
    return _at_logits(logits, k=k)


@pytest.mark.parametrize("k", [1.0, 100.0])
def test_the_bound_holds_for_keys_the_fit_never_sampled_at_the_polynomials_minimum(k):
    # the fit sees the top 64 and its sampled keys at -3, and bends its polynomial down to the margin: p(u) = 1e-3 at
    # its vertex (u = -3.85).  Every other key is put there, where p is 1e-3 and e^u 0.02: the tail misses almost all
    # of their weight (TV 0.50).  The bound holds because it counts sum e^u below rank K, at most the chord of e^u
    # between the floor L of the logits and the rank-K logit; without that sum, or with the chord below it (at k = 100
    # the Cauchy-Schwarz floor L is within 3 % of the lowest logit, the vertex past the middle of [L, 0]), the bound
    # would be 0.2 of the true TV.
    q = _origin(k=k)
    first = att.distance_topk_attention(q, _blind(-3.0, k), k=k, temperature=1.0, top=(16,), exact_fallback=False)
    t, beta, gamma = first.cut[0].tolist()
    vertex = t - beta / (2.0 * gamma)
    kk = _blind(vertex, k)
    res = att.distance_topk_attention(q, kk, k=k, temperature=1.0, top=(16,), exact_fallback=False)
    assert res.top_counts.tolist() == [16]
    s = _exact_logits(q, kk, 1.0, k)
    p_hat, w_hat = _rebuilt(res, s)
    exact = torch.softmax(s, -1)
    tv = 0.5 * (p_hat - exact).abs().sum(-1)
    assert float(tv) > 0.3  # the tail is far off here, and the bound must say so
    below = s < res.cut[:, :1].double()  # the tail's keys: what the bound covers, sum_j |w_hat_j - w_j| / Z_hat
    proven = ((w_hat - torch.exp(s - s.amax(-1, keepdim=True))).abs() * below).sum(-1) / w_hat.sum(-1)
    assert bool((res.row_bound.double() >= proven).all()) and bool((proven >= tv).all()), (res.row_bound, proven, tv)
    assert not bool(res.met.any())


def test_the_tails_polynomial_is_kept_at_the_margin_1e_minus_3():
    # where the least-squares fit would dip below zero (the same blind keys), the fit is the boundary family, whose
    # smallest value on u <= 0 is the margin: min p = 1 - beta^2 / (4 gamma) = 1e-3 at u = -beta / (2 gamma) < 0
    res = att.distance_topk_attention(_origin(), _blind(-3.0), temperature=1.0, top=(16,), exact_fallback=False)
    _, beta, gamma = res.cut[0].double().tolist()
    assert beta > 0 and gamma > 0
    assert abs((1.0 - beta * beta / (4.0 * gamma)) - 1e-3) <= 1e-12, 1.0 - beta * beta / (4.0 * gamma)


# --------------------------------------------------------------------------- #
# distance_topk: the default target
# --------------------------------------------------------------------------- #
def test_the_default_target_is_five_percent_of_the_distance_from_uniform():
    q, kk = L.lift(torch.randn(32, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3.0), \
        L.lift(torch.randn(1024, D, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 3.0)
    default = att.distance_topk_attention(q, kk, temperature=8.0)
    at_005 = att.distance_topk_attention(q, kk, temperature=8.0, tol=0.05)
    at_05 = att.distance_topk_attention(q, kk, temperature=8.0, tol=0.5)
    for name in ("top_counts", "met", "estimated", "row_bound"):
        assert torch.equal(getattr(default, name), getattr(at_005, name)), name
    assert not torch.equal(default.top_counts, at_05.top_counts)  # the target decides: the test would see another
    # the rows decided by the estimate meet 5 % of their estimated distance from uniform, met rows 5 % of the bound's
    listed = default.top_counts < kk.shape[0]
    assert bool((default.row_error[listed] <= 0.05 * default.row_baseline[listed]).all())
    assert bool((default.row_bound[default.met] <= 0.05 * default.row_baseline_low[default.met]).all())


# --------------------------------------------------------------------------- #
# the top-key search
# --------------------------------------------------------------------------- #
def test_the_index_reports_the_recall_its_keys_have_against_the_exact_logits():
    # float32 points far from the origin (spatial norm 300) in a cloud of spread 30: the logits' rounding E is about
    # 0.25 where the 8th logit is about -860, so many keys an index misses lie within 100 E of the 8th (the recall
    # with that slack would be 0.97).  The reported recall is the share of the found keys whose exact float64 logit
    # reaches the exact 8th logit, to the rounding: between that share at 0 and at 4 E (0.947 here).
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(31)
    centre = torch.zeros(D, dtype=torch.float64)
    centre[0] = 300.0
    keys = L.lift((centre + 30.0 * torch.randn(3000, D, generator=g, dtype=torch.float64)).float())
    q = L.lift((centre + 30.0 * torch.randn(200, D, generator=g, dtype=torch.float64)).float())
    index = ks.fit_key_index(q, keys, 8, recall=0.05, sample=200, tries=((1, 16),))  # every query in the sample
    assert index.reason is None and index.sample == 200
    found = index.search(q, 8)
    s = _exact_logits(q, keys, 1.0)
    kth = torch.topk(s, 8, dim=-1).values[:, -1:]
    got = torch.gather(s, -1, found.indices)
    row, col = ks.logit_rounding(*L.distance_operands(q, keys))
    e = (row * col.max()).double()
    share = [float((got >= kth - c * e).double().mean()) for c in (0.0, 4.0, 100.0)]
    assert share[2] - share[1] > 0.01  # the slack matters here: 100 E would count keys the index missed
    assert share[0] - 1 / 1600 <= index.recall <= share[1] + 1 / 1600, (index.recall, share)


def test_exact_search_holds_one_32_mib_block_of_logits():
    # 4,096 x 4,096 float64 logits are 128 MiB; the search holds one block of 32 MiB (1,024 rows) and its top-k pass
    q = L.lift(torch.randn(4096, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    kk = L.lift(torch.randn(4096, D, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    found, peak = peak_tensor_memory(exact_top_keys, q, kk, 16)
    assert 32 * 2**20 <= peak < 64 * 2**20, peak / 2**20
    assert torch.equal(found.indices[:64], exact_top_keys(q[:64], kk, 16).indices)
