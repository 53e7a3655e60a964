"""The top keys of distance attention as a search (issue 30): exact blocked search against dense ``torch.topk``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hypviz.attention import exact_top_keys
from hypviz.lorentz import lift, pairwise_sqdist


def _points(shape, scale=1.0, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return lift(scale * torch.randn(*shape, generator=g, dtype=dtype))


def _dense_top(q, kk, top):
    s = -0.5 * pairwise_sqdist(q, kk)
    return torch.topk(s, top, dim=-1)


@pytest.mark.parametrize("block_rows", [None, 1, 7])
def test_exact_search_equals_dense_topk_with_heads(block_rows):
    q, kk = _points((2, 3, 40, 6), seed=1), _points((3, 55, 6), seed=2)  # keys broadcast over the first axis
    got = exact_top_keys(q, kk, 5, block_rows=block_rows)
    v, i = _dense_top(q, kk, 5)
    assert got.indices.shape == got.logits.shape == (2, 3, 40, 5) and got.indices.dtype == torch.int64
    assert torch.equal(got.indices, i)
    assert torch.allclose(got.logits, v, rtol=1e-12, atol=1e-12)
    assert (got.logits <= 0).all() and (got.logits[..., 1:] <= got.logits[..., :-1]).all()


def test_exact_search_float32_and_numpy_input():
    q, kk = _points((30, 9), seed=3), _points((64, 9), seed=4)
    got = exact_top_keys(q.numpy().astype(np.float32), kk.float(), 3)
    assert got.logits.dtype == torch.float32
    v, _ = _dense_top(q, kk, 3)
    assert torch.allclose(got.logits.double(), v, rtol=1e-4, atol=1e-4)  # same keys up to float32 near-ties: same logits


@pytest.mark.parametrize("pad", [0, 1, 5])
@pytest.mark.parametrize("block_rows", [None, 1, 3])
def test_equal_logits_are_listed_by_index_deterministically(pad, block_rows):
    """Equal keys' logits differ by the matrix product's rounding, by how much depending on the BLAS kernel and on the
    keys' columns (``pad`` far keys first shift them): ties within the rounding are listed by index all the same."""
    kk = _points((20, 4), seed=5)
    far = _points((pad, 4), scale=30.0, seed=4)  # never among any query's top
    keys = torch.cat([far, kk, kk, kk], dim=0)  # every logit appears three times: at j, j + 20, j + 40 (+ pad)
    q = _points((8, 4), seed=6)
    got = exact_top_keys(q, keys, 4, block_rows=block_rows)
    best = _dense_top(q, kk, 2).indices + pad
    assert torch.equal(got.indices[:, :3], torch.stack([best[:, 0], best[:, 0] + 20, best[:, 0] + 40], -1))
    assert torch.equal(got.indices[:, 3], best[:, 1])
    assert torch.allclose(got.logits[:, 0], got.logits[:, 2], rtol=0.0, atol=1e-13)
    # all keys equal: the first `top` indices
    same = kk[:1].expand(10, 5)
    assert torch.equal(exact_top_keys(q, torch.cat([far, same]), 6, block_rows=block_rows).indices,
                       torch.arange(pad, pad + 6).expand(8, 6))


def test_top_equal_to_m_sorts_every_key():
    q, kk = _points((5, 3), seed=7), _points((9, 3), seed=8)
    got = exact_top_keys(q, kk, 9)
    assert torch.equal(got.indices.sort(dim=-1).values, torch.arange(9).expand(5, 9))
    assert torch.equal(got.indices, _dense_top(q, kk, 9).indices)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top": 0}, "top must be an integer from 1 to 12"),
        ({"top": 13}, "top must be an integer from 1 to 12"),
        ({"top": 2.0}, "top must be an integer from 1 to 12"),
        ({"top": 2, "block_rows": 0}, "block_rows must be a positive integer or None"),
        ({"top": 2, "k": -1.0}, "k must be"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, message):
    q, kk = _points((4, 3)), _points((12, 3))
    with pytest.raises(ValueError) as err:
        exact_top_keys(q, kk, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_points_off_the_hyperboloid_and_mixed_dtypes_are_refused():
    q, kk = _points((4, 3)), _points((12, 3))
    with pytest.raises(ValueError, match="keys"):
        exact_top_keys(q, kk * 2.0, 2)
    with pytest.raises(TypeError, match="float64 but keys are torch.float32"):
        exact_top_keys(q, kk.float(), 2)


# ---- the index path (faiss): recall measured against exact search, a visible fallback ----

def _radial(n, d, rmax, g):
    """Points at geodesic radii uniform in [0, rmax] in uniform directions: Euclidean norms over orders of magnitude."""
    u = torch.randn(n, d, generator=g, dtype=torch.float64)
    r = rmax * torch.rand(n, 1, generator=g, dtype=torch.float64)
    return torch.cat([torch.cosh(r), torch.sinh(r) * u / u.norm(dim=-1, keepdim=True)], dim=-1)


def _mixture(n, d, clusters, g):
    centres = 1.5 * torch.randn(clusters, d, generator=g, dtype=torch.float64)
    return lift(centres[torch.randint(0, clusters, (n,), generator=g)]
                + 0.3 * torch.randn(n, d, generator=g, dtype=torch.float64))


def _full_recall(found, exact):
    return float((found.logits >= exact.logits[..., -1:] - 1e-9).double().mean())


@pytest.mark.parametrize("keyset", ["gaussian", "mixture"])
def test_the_index_reaches_its_recall_and_its_logits_are_exact(keyset):
    pytest.importorskip("faiss")
    from hypviz.attention import search_top_keys

    g = torch.Generator().manual_seed(11)
    make = (lambda n: lift(torch.randn(n, 16, generator=g, dtype=torch.float64))) if keyset == "gaussian" else \
        (lambda n: _mixture(n, 16, 8, g))
    keys, queries = make(3000), make(400)
    got = search_top_keys(queries, keys, 8, recall=0.9, sample=100)
    exact = exact_top_keys(queries, keys, 8)
    assert not got.fell_back and got.method.startswith("hnsw") and got.recall >= 0.9 and got.sample == 100
    assert got.trials[-1] == (got.method, got.recall) and all(r < 0.9 for _, r in got.trials[:-1])
    assert _full_recall(got, exact) >= 0.85  # the sample's recall holds for every query
    again = -0.5 * pairwise_sqdist(queries.unsqueeze(-2), keys[got.indices]).squeeze(-2)
    assert torch.allclose(got.logits, again, rtol=1e-9, atol=1e-9)  # found keys carry their exact logits
    assert (got.logits[:, 1:] <= got.logits[:, :-1]).all()
    assert (got.indices.sort(dim=-1).values.diff(dim=-1) > 0).all()  # no key twice
    assert "recall" in got.summary() and got.method in got.summary()


def test_shells_by_time_coordinate_rescue_keys_of_spread_norms_and_a_weak_index_falls_back():
    pytest.importorskip("faiss")
    from hypviz.attention import search_top_keys

    g = torch.Generator().manual_seed(12)
    keys, queries = _radial(2000, 16, 10.0, g), _radial(200, 16, 10.0, g)  # norms from 1 to e^10
    exact = exact_top_keys(queries, keys, 8)
    one_shell = search_top_keys(queries, keys, 8, recall=0.9, sample=100, tries=((1, 16), (1, 32)))
    assert one_shell.fell_back and one_shell.method == "exact" and one_shell.recall == 1.0
    assert "no index reached recall 0.9" in one_shell.reason and all(r < 0.9 for _, r in one_shell.trials)
    assert torch.equal(one_shell.indices, exact.indices) and one_shell.summary().startswith("exact search (fallback)")
    shells = search_top_keys(queries, keys, 8, recall=0.9, sample=100, tries=((1, 32), (8, 32), (8, 128)))
    assert not shells.fell_back and "buckets=8" in shells.method and shells.recall >= 0.9
    assert shells.trials[0][1] < 0.9 <= shells.recall and _full_recall(shells, exact) >= 0.85


def test_few_keys_use_exact_search_and_say_so():
    pytest.importorskip("faiss")
    from hypviz.attention import search_top_keys

    q, kk = _points((2, 10, 5), seed=13), _points((2, 50, 5), seed=14)
    got = search_top_keys(q, kk, 4)
    assert got.fell_back and "exact search is as cheap" in got.reason
    assert torch.equal(got.indices, exact_top_keys(q, kk, 4).indices)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"recall": 0.0}, "recall must be a positive finite number"),
        ({"recall": 1.5}, "recall must be a number in (0, 1], got 1.5"),
        ({"sample": 0}, "sample must be a positive integer"),
        ({"tries": ()}, "tries must be a non-empty sequence of (buckets, ef) pairs"),
        ({"tries": ((0, 16),)}, "tries must be a non-empty sequence of (buckets, ef) pairs"),
        ({"tries": ((1.5, 16),)}, "tries must be a non-empty sequence of (buckets, ef) pairs"),
    ],
)
def test_search_arguments_are_one_line_errors(kwargs, message):
    from hypviz.attention import search_top_keys

    q, kk = _points((4, 3)), _points((12, 3))
    with pytest.raises(ValueError) as err:
        search_top_keys(q, kk, 2, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_without_faiss_the_error_names_the_extra(monkeypatch):
    import sys

    from hypviz.attention import search_top_keys

    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match=r"pip install 'hypviz\[search\]'"):
        search_top_keys(_points((4, 3)), _points((200, 3)), 2)


def test_a_fitted_index_answers_later_queries_at_any_top_without_rebuilding():
    pytest.importorskip("faiss")
    from hypviz.attention import fit_key_index

    g = torch.Generator().manual_seed(15)
    keys, queries = (lift(torch.randn(2000, 8, generator=g, dtype=torch.float64)),
                     lift(torch.randn(300, 8, generator=g, dtype=torch.float64)))
    index = fit_key_index(queries, keys, 8, recall=0.9, sample=64)
    assert index.reason is None and index.recall >= 0.9 and index.top == 8 and index.method.startswith("hnsw")
    later = queries[:50].reshape(5, 10, 9)  # any leading axes
    for top in (8, 32):
        got = index.search(later, top)
        exact = exact_top_keys(later, keys, top)
        assert got.indices.shape == (5, 10, top) and got.method == index.method and got.recall == index.recall
        assert _full_recall(got, exact) >= 0.85
    with pytest.raises(ValueError, match="keys must be one key set of shape"):
        fit_key_index(queries, keys.expand(2, 2000, 9), 8)
    weak = fit_key_index(queries, _radial(2000, 8, 10.0, g), 8, recall=0.99, sample=64, tries=((1, 16),))
    assert weak.reason is not None and weak.search(queries[:5]).method == "exact"


@pytest.mark.parametrize("m, top", [(50, 7), (20_000, 5), (20_000, 64), (100_000, 500), (4_100, 4_100)])
def test_block_top_is_torch_topk_with_ties_in_index_order(m, top):
    from hypviz.attention.approx.key_search import block_top

    g = torch.Generator().manual_seed(m + top)
    s = torch.randint(-40, 0, (6, m), generator=g).double()  # many exact ties, across the cut too
    s[1] = -1.0  # a row of one value
    s[2, : m // 2] = torch.rand(m // 2, generator=g, dtype=torch.float64) - 0.5  # ties only below the top
    s[3] = torch.randn(m, generator=g, dtype=torch.float64)  # no ties: the chunk maxima's pass
    val, col = block_top(s, top)
    for i in range(s.shape[0]):  # the reference: sort by (value descending, index ascending)
        ref = sorted(range(m), key=lambda j: (-float(s[i, j]), j))[:top]
        assert col[i].tolist() == ref
        assert bool((val[i] == s[i, ref]).all())
