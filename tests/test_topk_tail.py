"""``distance_topk``: exact top keys plus a fitted positive tail (:mod:`hypviz.attention.approx.topk_tail`).

The bars of issue 30 at 128 queries x 256 keys (d = 64, tau = 8): Gaussian points at r^2/tau from 0.00125
to 125, a 32-cluster mixture and trees from :mod:`hypviz.data` (in H^2 and padded into H^64): mean row TV to
the exact map at most a quarter of the exact map's TV from uniform, tie-aware top-1 agreement >= 0.9 where the
exact map is sharp; no NaN and no negative weight in float32 at large norms; the per-row error estimate against
the true error of the same map, rebuilt here from the formula; the output against the map applied to the values.
"""

from __future__ import annotations

import math

import networkx as nx
import pytest
import torch

from hypviz import attention as att
from hypviz import data
from hypviz import lorentz as L

D, TAU = 64, 8.0
RADII = [10 ** (e / 2) for e in range(-2, 4)]  # r^2 / tau = 0.00125, 0.0125, ..., 125


def _mixture(n, seed, r, clusters=32, spread=0.1):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, D, generator=g, dtype=torch.float64) * (r / math.sqrt(D))
    label = torch.randint(0, clusters, (n,), generator=g)
    return L.lift(centres[label] + torch.randn(n, D, generator=g, dtype=torch.float64) * (spread * r / math.sqrt(D)))


def _tree(edge, dim):
    x = data.embed_tree(nx.balanced_tree(2, 7), 0, edge_length=edge).points  # 255 nodes in H^2
    return L.lift(torch.cat([x[:, 1:], torch.zeros(x.shape[0], dim - 2, dtype=x.dtype)], dim=-1))


def _logits(q, kk, tau, k=1.0):
    """The exact distance logits, float64, from the formula: -1/2 |q - kappa|^2_L / tau."""
    return -0.5 * (-2.0 * k - 2.0 * L.pairwise_inner(q.double(), kk.double())).clamp_min(0.0) / tau


def _rebuilt(res, s):
    """The map of a result, from its cut (t, beta, gamma) and the logits s: e^{s - m} at or above t, e^{t - m} p(s - t) below."""
    t, beta, gamma = (c.double().unsqueeze(-1) for c in res.cut.unbind(-1))
    m = s.amax(-1, keepdim=True)
    u = s - t
    w = torch.where(u >= 0, torch.exp(s - m), torch.exp(t - m) * (1.0 + beta * u + gamma * u * u))
    return w / w.sum(-1, keepdim=True)


def _bar(q, kk, tau=TAU):
    c = att.compare(q, kk, "distance_topk", "distance", temperature=tau, device="cpu")
    ratio = float(c.tv.mean() / c.tv_uniform_b.mean())
    assert ratio <= 0.25, ratio
    sharp = c.peak_b >= 0.5 * kk.shape[-2]  # rows whose largest weight is at least half the row's
    if bool(sharp.any()):
        assert float(c.top1[sharp].double().mean()) >= 0.9
    return c


@pytest.mark.parametrize("r", RADII)
def test_the_gaussian_sweep_meets_the_bar(r):
    c = _bar(data.lifted_gaussian(128, D, r, seed=10), data.lifted_gaussian(256, D, r, seed=11))
    assert float(c.top1.double().mean()) >= 0.9


@pytest.mark.parametrize("r", [0.1, 1.0, 10.0, 31.6])
def test_a_32_cluster_mixture_meets_the_bar(r):
    _bar(_mixture(128, 1, r), _mixture(256, 1, r))


@pytest.mark.parametrize("edge, dim, tau", [(0.4, 2, 1.0), (1.0, 2, 1.0), (0.7, 64, 8.0), (1.0, 64, 8.0)])
def test_trees_meet_the_bar(edge, dim, tau):
    x = _tree(edge, dim)
    _bar(x[::2], x, tau)


@pytest.mark.parametrize("r", [10 ** 0.5, 10.0, 10 ** 1.5])
def test_the_error_estimate_tracks_the_true_error(r):
    q, kk = data.lifted_gaussian(128, D, r, seed=10), data.lifted_gaussian(256, D, r, seed=11)
    res = att.distance_topk_attention(q, kk, temperature=TAU, top=(16,), exact_fallback=False)  # every row a real tail
    s = _logits(q, kk, TAU)
    true = 0.5 * (_rebuilt(res, s) - torch.softmax(s, -1)).abs().sum(-1)
    est = res.row_error.double()
    real = true > 1e-12  # rows whose tail error is far above rounding (at r^2/tau = 125 some tails are negligible)
    assert float(real.double().mean()) >= 0.5 and bool((est > 0).all())
    true, est = true[real], est[real]
    assert float((true <= 1.5 * est).double().mean()) >= 0.9  # an estimate of an upper bound
    assert float((est <= 4.0 * true).double().mean()) >= 0.9  # ... that is not loose by much
    corr = torch.corrcoef(torch.stack([true.log(), est.log()]))[0, 1]
    assert float(corr) >= 0.6, float(corr)


def test_the_result_is_its_map_applied_to_the_values():
    q, kk = data.lifted_gaussian(40, 6, 2.0, seed=1), data.lifted_gaussian(300, 6, 2.0, seed=2)
    v = data.lifted_gaussian(300, 3, 1.0, seed=3)
    tau = 2.0
    res = att.distance_topk_attention(q, kk, v, temperature=tau, top=(16, 64), exact_fallback=False)
    assert res.search == "exact" and res.recall == 1.0 and res.temperature == tau
    assert set(res.top_counts.tolist()) <= {16, 64} and bool((res.top_counts < 300).all())
    p = _rebuilt(res, _logits(q, kk, tau))
    # the top keys are the largest logits, their weights the map's
    ref_idx = _logits(q, kk, tau).argsort(-1, descending=True)
    w, idx = res.padded()
    assert res.weights.shape == (int(res.top_counts.sum()),) and res.offsets.tolist() == (
        torch.cumsum(res.top_counts, 0) - res.top_counts).tolist()
    for i in range(q.shape[0]):
        kt = int(res.top_counts[i])
        flat = slice(int(res.offsets[i]), int(res.offsets[i]) + kt)
        assert idx[i, :kt].tolist() == res.indices[flat].tolist() and bool((w[i, :kt] == res.weights[flat]).all())
        assert set(idx[i, :kt].tolist()) == set(ref_idx[i, :kt].tolist())
        assert bool((idx[i, kt:] == -1).all()) and bool((w[i, kt:] == 0).all())
        torch.testing.assert_close(w[i, :kt], p[i, idx[i, :kt]], rtol=1e-10, atol=1e-15)
        torch.testing.assert_close(res.tail_mass[i], 1.0 - p[i, idx[i, :kt]].sum(), rtol=1e-8, atol=1e-14)
    m = p @ v  # the centroid of the map's weighted values
    ref = L.lift(m[:, 1:] / torch.sqrt(m[:, 0] ** 2 - m[:, 1:].square().sum(-1)).unsqueeze(-1))
    torch.testing.assert_close(res.output, ref, rtol=1e-9, atol=1e-10)
    spatial = att.distance_topk_attention(q, kk, v, temperature=tau, top=(16, 64), aggregation="spatial",
                                          exact_fallback=False).output
    torch.testing.assert_close(spatial, L.lift(p @ v[:, 1:]), rtol=1e-9, atol=1e-10)
    # the kind's map is the same method at the defaults
    res0 = att.distance_topk_attention(q, kk, temperature=tau)
    torch.testing.assert_close(att.attention_map(q, kk, "distance_topk", temperature=tau), _rebuilt(res0, _logits(q, kk, tau)),
                               rtol=1e-9, atol=1e-14)


def test_every_key_exact_when_top_reaches_m():
    q, kk = data.lifted_gaussian((2, 20), 5, 3.0, seed=4), data.lifted_gaussian((2, 50), 5, 3.0, seed=5)
    res = att.distance_topk_attention(q, kk, temperature=1.0, top=(8, 50))
    assert res.padded()[0].shape[:2] == (2, 20) and res.row_error.shape == (2, 20) and res.offsets.shape == (2, 20)
    s = _logits(q, kk, 1.0)
    exact = res.top_counts == 50
    assert bool(exact.any()) and bool((res.row_error[exact] == 0).all())
    torch.testing.assert_close(_rebuilt(res, s)[exact], torch.softmax(s, -1)[exact], rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("search", ["exact", "index"])
def test_rows_no_entry_serves_are_exact_and_unlisted(search):
    if search == "index":
        pytest.importorskip("faiss")
    # r^2/tau = 12.5: the weight spread over many keys, no entry meets the target
    q, kk = data.lifted_gaussian(48, 16, 10.0, seed=3), data.lifted_gaussian(2048, 16, 10.0, seed=4)
    v = data.lifted_gaussian(2048, 3, 1.0, seed=5)
    tau = 8.0
    flagged = att.distance_topk_attention(q, kk, temperature=tau, top=(16, 64), exact_fallback=False)
    assert not bool(flagged.met.all())
    res = att.distance_topk_attention(q, kk, v, temperature=tau, top=(16, 64), search=search)
    exact = res.top_counts == 2048
    assert bool(res.met.all()) and bool(exact.any()) and bool((res.row_error[exact] == 0).all())
    assert bool((exact | (res.top_counts <= 64)).all()) and bool((exact >= ~flagged.met).all())  # every flagged row exact
    assert res.weights.numel() == int(res.top_counts[~exact].sum())  # exact rows list no entries
    w, _ = res.padded()
    assert w.shape[-1] <= 64 and bool((w[exact] == 0).all())
    s = _logits(q, kk, tau)
    p = torch.softmax(s, -1)
    torch.testing.assert_close(_rebuilt(res, s)[exact], p[exact], rtol=1e-10, atol=1e-15)
    torch.testing.assert_close(res.row_baseline[exact], 0.5 * (p[exact] - 1 / 2048).abs().sum(-1), rtol=1e-8, atol=1e-12)
    m = p @ v
    ref = L.lift(m[:, 1:] / torch.sqrt(m[:, 0] ** 2 - m[:, 1:].square().sum(-1)).unsqueeze(-1))
    torch.testing.assert_close(res.output[exact], ref[exact], rtol=1e-9, atol=1e-10)
    assert bool((res.tail_mass[exact] == 0).all())


def test_exact_fallback_must_be_a_bool():
    q = data.lifted_gaussian(4, 3, 1.0, seed=1)
    with pytest.raises(TypeError, match="exact_fallback must be True or False, got 1"):
        att.distance_topk_attention(q, q, exact_fallback=1)


@pytest.mark.parametrize("r", [57.0, 300.0, 3000.0])
def test_float32_at_large_norms_no_nan_no_negative_weight(r):
    q = data.lifted_gaussian(64, D, r, seed=1, dtype=torch.float32)
    kk = data.lifted_gaussian(300, D, r, seed=2, dtype=torch.float32)
    v = data.lifted_gaussian(300, 8, 1.0, seed=3, dtype=torch.float32)
    res = att.distance_topk_attention(q, kk, v, temperature=TAU)
    p = att.attention_map(q, kk, "distance_topk", temperature=TAU)
    for t in (p, res.weights, res.tail_mass, res.row_error, res.output):
        assert t.dtype == torch.float32 and bool(torch.isfinite(t).all())
    assert float(p.min()) >= 0 and float(res.weights.min()) >= 0 and float(res.tail_mass.min()) >= 0
    torch.testing.assert_close(p.sum(-1).double(), torch.ones(64, dtype=torch.float64), rtol=1e-5, atol=1e-5)
    exact = att.attention_map(q.double(), kk.double(), "distance", temperature=TAU)
    base = 0.5 * (exact - 1 / 300).abs().sum(-1)
    assert float((0.5 * (p.double() - exact).abs().sum(-1)).mean()) <= 0.25 * float(base.mean())


@pytest.mark.parametrize("kw, message", [
    (dict(top=()), "top must be a non-empty sequence of non-negative integers"),
    (dict(top=(-1, 16)), "top must be a non-empty sequence of non-negative integers"),
    (dict(top="16"), "top must be a non-empty sequence of non-negative integers"),
    (dict(top=(16.0,)), "top must be a non-empty sequence of non-negative integers"),
    (dict(tol=0.0), "tol must be a positive finite number"),
    (dict(samples=0), "samples must be a positive integer"),
    (dict(seed=-1), "seed must be an integer from 0"),
    (dict(search="faiss"), "search must be one of 'exact'"),
    (dict(aggregation="mean"), "aggregation must be one of 'centroid', 'spatial'"),
    (dict(temperature=-1.0), "temperature"),
])
def test_bad_input_is_one_line(kw, message):
    q = data.lifted_gaussian(4, 3, 1.0, seed=1)
    with pytest.raises(ValueError, match=message) as info:
        att.distance_topk_attention(q, q, **kw)
    assert "\n" not in str(info.value)


def test_the_index_search_reports_its_method_and_recall():
    pytest.importorskip("faiss")
    q, kk = data.lifted_gaussian(32, 8, 3.0, seed=1), data.lifted_gaussian(1024, 8, 3.0, seed=2)
    tau = 4.0
    res = att.distance_topk_attention(q, kk, temperature=tau, top=(16,), search="index")
    assert "hnsw" in res.search or "exact search (fallback)" in res.search
    assert 0.0 < res.recall <= 1.0 and ("hnsw" not in res.search or res.recall >= 0.9)
    exact = att.distance_topk_attention(q, kk, temperature=tau, top=(16,))
    assert exact.search == "exact" and exact.recall == 1.0
    s = _logits(q, kk, tau)
    p = torch.softmax(s, -1)
    base = float((0.5 * (p - 1 / 1024).abs().sum(-1)).mean())
    # the index's top keys: each row's weights on them are the exact map's up to the tail's share
    w, idx = res.padded()
    found = torch.gather(p, -1, idx.clamp_min(0))
    assert bool((res.indices >= 0).all()) and float((0.5 * (found - w).abs().sum(-1)).mean()) <= 0.25 * base
    auto = att.distance_topk_attention(q, kk, temperature=tau, top=(16,), search="auto")
    assert auto.search == res.search


def _grown_tree(depth, edge, seed=0):
    """Every node of a balanced binary tree grown in H^D from the origin, each child one geodesic step of length ``edge``
    along a random direction, carried to its parent by the boost that takes the origin to it."""
    g = torch.Generator().manual_seed(seed)
    level, out = L.origin(D).unsqueeze(0), [L.origin(D).unsqueeze(0)]
    for i in range(depth):
        u = torch.nn.functional.normalize(torch.randn(2 ** (i + 1), D, generator=g, dtype=torch.float64), dim=-1)
        p = level.repeat_interleave(2, 0)
        pt, ps = p[:, :1], p[:, 1:]
        xt, xs = torch.full_like(u[:, :1], math.cosh(edge)), math.sinh(edge) * u
        dot = (ps * xs).sum(-1, keepdim=True)
        level = L.lift(xs + ps * (xt + dot / (1 + pt)))
        out.append(level)
    return torch.cat(out)


def _index_map(res, s):
    """The map the kind computed with an index: listed top keys exact, every other key (a missed one too) by the tail,
    rows with every key exact (none listed) the exact row."""
    t, beta, gamma = (c.double().unsqueeze(-1) for c in res.cut.unbind(-1))
    m = torch.maximum(s.amax(-1, keepdim=True), t)
    u = s - t
    w = torch.where(res.top_counts.unsqueeze(-1) >= s.shape[-1], torch.exp(s - m),
                    torch.exp(t - m) * (1 + beta * u + gamma * u * u))
    listed = torch.diff(res.offsets, append=torch.tensor([res.weights.numel()]))
    for i in range(s.shape[0]):
        idx = res.indices[int(res.offsets[i]) : int(res.offsets[i] + listed[i])]
        w[i, idx] = torch.exp(s[i, idx] - m[i])
    return w / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("key_set", ["gaussian", "clusters", "tree"])
def test_the_index_search_meets_the_bar_on_4096_keys(key_set):
    pytest.importorskip("faiss")
    if key_set == "gaussian":  # r^2/tau = 125: sharp, a few top keys per row
        q, kk = data.lifted_gaussian(256, D, 31.6, seed=1), data.lifted_gaussian(4096, D, 31.6, seed=2)
    elif key_set == "clusters":
        x = _mixture(256 + 4096, 3, 10.0)
        q, kk = x[:256], x[256:]
    else:  # 8,191 nodes: 4,096 keys, 256 of the others as queries
        x = _grown_tree(12, 1.0)
        perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0))
        q, kk = x[perm[4096 : 4096 + 256]], x[perm[:4096]]
    res = att.distance_topk_attention(q.float(), kk.float(), temperature=TAU, search="index")
    assert bool((res.met | res.estimated).all()) and ("hnsw" in res.search or "exact search (fallback)" in res.search)
    searched = (res.top_counts < 4096) & ("exact search (fallback)" not in res.search)
    assert not bool(res.met[searched].any()) and bool(torch.isinf(res.row_bound[searched]).all())  # an index proves nothing
    s = _logits(q.float().double(), kk.float().double(), TAU)
    exact = torch.softmax(s, -1)
    p = _index_map(res, s)
    ratio = float((0.5 * (p - exact).abs().sum(-1)).mean() / (0.5 * (exact - 1 / 4096).abs().sum(-1)).mean())
    best = exact.gather(-1, p.argmax(-1, keepdim=True)).squeeze(-1)
    top1 = float((best >= exact.amax(-1) * (1 - 1e-6)).double().mean())
    assert ratio <= 0.25 and top1 >= 0.9, (ratio, top1, res.search)


def test_an_index_fitted_beforehand_is_used_as_it_is():
    pytest.importorskip("faiss")
    q, kk = data.lifted_gaussian(128, D, 31.6, seed=1), data.lifted_gaussian(4096, D, 31.6, seed=2)
    index = att.fit_key_index(q[:64], kk, 256, tries=((1, 32),))  # fitted on other queries, one configuration
    res = att.distance_topk_attention(q, kk, temperature=TAU, search=index)
    assert bool((res.met | res.estimated).all()) and res.recall == index.recall
    assert (index.method in res.search) if index.reason is None else ("exact search (fallback)" in res.search)
    with pytest.raises(ValueError, match="search must be an index of these keys"):
        att.distance_topk_attention(q, kk[:2048], temperature=TAU, search=index)


def test_the_tail_alone_needs_no_search_stays_positive_and_estimates_its_error():
    q, kk = data.lifted_gaussian(64, 16, 1.5, seed=7), data.lifted_gaussian(3000, 16, 1.5, seed=8)
    v = data.lifted_gaussian(3000, 4, 1.0, seed=9)
    tau = 4.0
    res = att.distance_topk_attention(q, kk, v, temperature=tau, top=(0,), search="auto")
    assert bool((res.top_counts == 0).all()) and res.weights.numel() == 0 and res.search == "exact"  # no search ran
    s = _logits(q, kk, tau)
    t, beta, gamma = res.cut.unbind(-1)
    assert bool((t >= s.amax(-1) - 1e-9).all())  # the cut: no logit above it (Cauchy-Schwarz)
    assert bool((gamma >= 0).all()) and bool((beta * beta <= 4 * gamma * (1 - 1e-3) + 1e-15).all())  # p >= eta on R
    p = _rebuilt(res, s)
    assert bool((p > 0).all()) and bool(res.estimated.all()) and not bool(res.met.any())  # no bound on TV(P, U) here
    exact = torch.softmax(s, -1)
    true = 0.5 * (p - exact).abs().sum(-1)
    assert bool((true <= res.row_bound.double()).all())  # the bound holds, though too wide to certify
    base = 0.5 * (exact - 1 / 3000).abs().sum(-1)
    assert float(true.mean() / base.mean()) <= 0.02
    est = res.row_error.double()  # estimated on 256 sampled keys (3000 > 512)
    assert float((true <= 1.5 * est).double().mean()) >= 0.9 and float((est <= 4.0 * true).double().mean()) >= 0.9
    m = p @ v  # the output is the centroid of the map's weighted values, through the key sums
    torch.testing.assert_close(res.output, L.lift(m[:, 1:] / torch.sqrt(m[:, 0] ** 2 - m[:, 1:].square().sum(-1)).unsqueeze(-1)),
                               rtol=1e-9, atol=1e-10)
    # the default levels try it first: every row of this smooth set is decided without top keys
    assert bool((att.distance_topk_attention(q, kk, temperature=tau).top_counts == 0).all())
