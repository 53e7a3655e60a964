"""The top-key search under faults: ties decided within rounding on any BLAS kernel, one index searched from many
threads, candidate memory within its budget, every parameter range-checked, an index refused on other keys, numpy
integers accepted and strings refused (:mod:`hypviz.attention.approx.key_search`)."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hypviz import attention as att
from hypviz.attention import exact_top_keys, peak_tensor_memory
from hypviz.attention.approx import key_search as ks
from hypviz.lorentz import distance_operands, lift


def _points(shape, scale=1.0, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return lift(scale * torch.randn(*shape, generator=g, dtype=dtype))


def _leader_order(s, e, top):
    """The tie rule of block_top in plain Python: by upper end (ties by index), each group led by the first entry left
    and holding every later entry whose upper end reaches the leader's lower end, groups listed by index."""
    order = sorted(range(len(s)), key=lambda j: (-(s[j] + e[j]), j))
    out, i = [], 0
    while i < len(order):
        low = s[order[i]] - e[order[i]]
        group = [order[i]]
        i += 1
        while i < len(order) and s[order[i]] + e[order[i]] >= low:
            group.append(order[i])
            i += 1
        out.extend(sorted(group))
    return out[:top]


# ---- 1. ties decided within the rounding, whatever kernel computed the logits ----

@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.sampled_from([7, 60, 700, 5000]), top=st.integers(1, 40),
       levels=st.integers(1, 30))
def test_block_top_is_the_same_for_every_rounding_of_exact_ties(seed, m, top, levels):
    """Integer logits (many exact ties, across the cut too), each perturbed by less than its rounding bound e_ij: any
    perturbation, as any BLAS kernel's rounding, gives the exact ties' answer, by value then by index."""
    top = min(top, m)
    g = torch.Generator().manual_seed(seed)
    exact = torch.randint(-levels, 1, (5, m), generator=g).double()
    row = 0.2 * torch.rand(5, 1, generator=g, dtype=torch.float64)  # e_ij = row_i col_j <= 0.2: integers stay apart
    col = torch.rand(m, generator=g, dtype=torch.float64)
    noise = (2 * torch.rand(5, m, generator=g, dtype=torch.float64) - 1) * row * col  # |noise| <= e_ij
    val, idx = ks.block_top(exact + noise, top, (row, col))
    for i in range(5):
        ref = sorted(range(m), key=lambda j: (-float(exact[i, j]), j))[:top]
        assert idx[i].tolist() == ref
        assert torch.equal(val[i], (exact + noise)[i, ref])  # each key's own logit


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.sampled_from([5, 40, 3000]), top=st.integers(1, 25),
       spread=st.sampled_from([0.5, 3.0, 30.0]))
def test_block_top_groups_near_ties_by_the_leader_rule(seed, m, top, spread):
    """Arbitrary values and bounds, chains of overlapping intervals included: the grouping is the leader rule's (a
    group never spans more than its leader's interval), each row's or a shared column bound alike."""
    top = min(top, m)
    g = torch.Generator().manual_seed(seed)
    s = spread * torch.rand(4, m, generator=g, dtype=torch.float64)
    row = torch.rand(4, 1, generator=g, dtype=torch.float64)
    for col in (0.05 * torch.rand(m, generator=g, dtype=torch.float64),
                0.05 * torch.rand(4, m, generator=g, dtype=torch.float64)):
        _, idx = ks.block_top(s, top, (row, col))
        e = row * col
        for i in range(4):
            assert idx[i].tolist() == _leader_order(s[i].tolist(), e[i].tolist(), top)


def test_ten_equal_keys_are_listed_by_index_on_any_kernel():
    """Ten copies of one key among others: their logits differ by the matrix product's rounding wherever they sit
    (the fault: ~4e-16 at the kernel's edge columns gave [8, 9, 0, ...]); moved, padded, in other row blocks, or with
    the product summed in another order, the copies come out in index order, the other keys by their logits."""
    q = _points((64, 8), seed=6)
    others = _points((30, 8), scale=2.0, seed=7)
    copy = _points((1, 8), seed=8)
    keys = torch.cat([others[:11], copy.expand(10, 9), others[11:]])  # copies at 11..20
    base = exact_top_keys(q, keys, 25)
    for pad in (0, 1, 3, 7, 13):  # the copies at other columns of the product
        far = _points((pad, 8), scale=30.0, seed=9)  # far from every query: never among its top
        for block_rows in (None, 1, 5, 64):
            got = exact_top_keys(q, torch.cat([far, keys]), 25, block_rows=block_rows)
            assert torch.equal(got.indices - pad, base.indices)
    copies = (base.indices >= 11) & (base.indices <= 20)
    for i in range(q.shape[0]):  # copies listed together and in increasing index order
        at = copies[i].nonzero().flatten()
        if at.numel():
            assert base.indices[i, at].diff().eq(1).all() and at.diff().eq(1).all()
    # the same logits summed in another order (another kernel): the same answer
    a, b = distance_operands(q, keys)
    for perm_seed in range(5):
        perm = torch.randperm(a.shape[1], generator=torch.Generator().manual_seed(perm_seed))
        s = (a[:, perm] @ b[:, perm].T).clamp_max_(0.0)
        _, idx = ks.block_top(s, 25, ks.logit_rounding(a, b))
        assert torch.equal(idx, base.indices)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), copies=st.integers(2, 6), top=st.integers(1, 30),
       dtype=st.sampled_from([torch.float64, torch.float32]))
def test_exact_search_with_repeated_keys_is_the_same_under_any_permutation(seed, copies, top, dtype):
    """Keys repeated ``copies`` times and shuffled: searching them, in any order of the keys and any row blocks, gives
    the order (the distinct key's logit, then index); drawn so that distinct keys' logits are far from ties."""
    g = torch.Generator().manual_seed(seed)
    distinct = lift(torch.randn(20, 6, generator=g, dtype=torch.float64)).to(dtype)
    q = lift(torch.randn(6, 6, generator=g, dtype=torch.float64)).to(dtype)
    which = torch.randperm(20 * copies, generator=g) % 20  # key j is a copy of distinct[which[j]]
    keys = distinct[which]
    a, b = distance_operands(q, distinct)
    s = (a.double() @ b.double().T).clamp_max(0.0)  # the distinct keys' logits, float64
    row, col = ks.logit_rounding(a, b)
    gap = (s.unsqueeze(-1) - s.unsqueeze(-2)).abs().masked_fill(torch.eye(20, dtype=torch.bool), math.inf)
    assume(bool((gap > 10 * (row * col.max()).double().unsqueeze(-1)).all()))  # distinct keys are never ties

    def ref(w):
        return torch.tensor([sorted(range(len(w)), key=lambda j: (-float(s[i, w[j]]), j))[:top] for i in range(6)])

    for block_rows in (None, 1, 5):
        assert torch.equal(exact_top_keys(q, keys, top, block_rows=block_rows).indices, ref(which))
    for _ in range(3):  # the same keys in another order: the copies at other columns of the product
        perm = torch.randperm(len(which), generator=g)
        assert torch.equal(exact_top_keys(q, keys[perm], top, block_rows=7).indices, ref(which[perm]))


# ---- 2. one index searched from several threads ----

def test_one_index_searched_from_many_threads_at_different_tops():
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(21)
    keys, q = (lift(torch.randn(3000, 8, generator=g, dtype=torch.float64)),
               lift(torch.randn(400, 8, generator=g, dtype=torch.float64)))
    index = ks.fit_key_index(q, keys, 4, recall=0.5, sample=64, tries=((1, 16),))
    assert index.method.startswith("hnsw")
    tops = (1, 4, 100, 180)  # ef = max(16, top): each call its own ef
    ref = {top: index.search(q, top) for top in tops}
    errors: list[str] = []
    start = threading.Barrier(8)

    def work(t: int) -> None:
        start.wait()
        for r in range(6):
            top = tops[(t + r) % len(tops)]
            got = index.search(q, top)
            if not (torch.equal(got.indices, ref[top].indices) and torch.equal(got.logits, ref[top].logits)):
                errors.append(f"thread {t}, top {top}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


# ---- 3. candidate memory within the budget ----

def test_the_index_search_keeps_its_candidates_within_the_budget(monkeypatch):
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(22)
    keys, q = (lift(torch.randn(4096, 8, generator=g, dtype=torch.float64)),
               lift(torch.randn(400, 8, generator=g, dtype=torch.float64)))
    budget = 2**19
    monkeypatch.setattr(ks, "_BLOCK_BYTES", budget)
    index = ks.fit_key_index(q, keys, 8, recall=0.5, sample=64, tries=((16, 16),))  # 16 shells x top 8 per query
    assert index.method.startswith("hnsw(buckets=16")
    per_query = sum(min(8, int(s.members.numel())) for s in index.shells)
    gathered = q.shape[0] * per_query * 11 * 8  # all queries' candidate keys at once (d + 3 = 11 float64)
    assert gathered > 8 * budget  # unchunked, the search would hold far more than the budget
    found, peak = peak_tensor_memory(index.search, q, 8)
    out = found.indices.nbytes + found.logits.nbytes
    assert peak <= budget + out, (peak, budget, out)
    exact = exact_top_keys(q, keys, 8)
    assert float((found.logits >= exact.logits[:, -1:] - 1e-9).double().mean()) >= 0.5  # and it still finds keys


def test_too_many_candidates_per_query_use_exact_search_and_say_so(monkeypatch):
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(23)
    keys, q = (lift(torch.randn(2048, 8, generator=g, dtype=torch.float64)),
               lift(torch.randn(100, 8, generator=g, dtype=torch.float64)))
    index = ks.fit_key_index(q, keys, 4, recall=0.5, sample=64, tries=((16, 16),))
    assert index.method.startswith("hnsw(buckets=16")
    big = index.search(q, 128)  # 16 shells x 128 = 2048 candidates per query > M / 4 = 512
    assert big.method == "exact" and big.fell_back and "2048 candidate keys per query" in big.reason
    assert torch.equal(big.indices, exact_top_keys(q, keys, 128).indices)
    small = index.search(q, 16)  # 256 candidates: the index
    assert small.method == index.method and small.reason is None
    none = ks.fit_key_index(q, keys, 64, recall=0.5, sample=64, tries=((16, 16), (64, 32)))  # 1024 and 2048 per query
    assert none.method == "exact" and none.trials == () and "no configuration is cheaper than exact search" in none.reason
    monkeypatch.setattr(ks, "_BLOCK_BYTES", 200 * ks._candidate_bytes(torch.zeros(1, 11, dtype=torch.float64)))
    assert index.search(q, 16).method == "exact"  # 256 candidates do not fit half a budget of 200


# ---- 4. parameters range-checked before faiss ----

@pytest.mark.parametrize("tries", [((1, 2**31),), ((2**31, 1),), ((1, 2**16 + 1),), ((0, 16),), ((1, 16, 3),), ((1,),),
                                   (("1", 16),), ((b"1", 16),), ((True, 16),), ((1.0, 16),), ((1, None),), (), "ab", 5, None])
def test_bad_tries_are_one_line_errors(tries):
    q, kk = _points((50, 3), seed=1), _points((2000, 3), seed=2)
    for call in (lambda: ks.search_top_keys(q, kk, 2, tries=tries), lambda: ks.fit_key_index(q, kk, 2, tries=tries)):
        with pytest.raises(ValueError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith("tries must be a non-empty sequence of (buckets, ef) pairs of integers from 1 to 65536, got")
        assert "\n" not in msg


def test_the_largest_tries_are_accepted_and_numpy_integers_too():
    pytest.importorskip("faiss")
    q, kk = _points((50, 3), seed=1), _points((2000, 3), seed=2)
    index = ks.fit_key_index(q, kk, 2, recall=0.5, tries=((np.int64(1), np.int32(2**16)),))
    assert index.ef == 2**16 and isinstance(index.ef, int) and index.search(q[:3]).indices.shape == (3, 2)


# ---- 5. an index refused on keys it was not built on, naming the index ----

@pytest.fixture(scope="module")
def fitted():
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(24)
    keys, q = (lift(torch.randn(2048, 8, generator=g, dtype=torch.float64)),
               lift(torch.randn(64, 8, generator=g, dtype=torch.float64)))
    return keys, q, att.fit_key_index(q, keys, 16, tries=((1, 32),), recall=0.5)


def _other_keys(keys):
    g = torch.Generator().manual_seed(25)
    swapped = keys.clone()
    swapped[[5, 900]] = swapped[[900, 5]]
    return {
        "other keys": lift(torch.randn(2048, 8, generator=g, dtype=torch.float64)),
        "the same keys permuted": keys[torch.randperm(2048, generator=g)],
        "two keys swapped": swapped,
        "fewer keys": keys[:1024],
        "float32": keys.float(),
    }


@pytest.mark.parametrize("case", ["other keys", "the same keys permuted", "two keys swapped", "fewer keys", "float32"])
def test_an_index_of_other_keys_is_refused_by_the_attention(fitted, case):
    keys, q, index = fitted
    other = _other_keys(keys)[case]
    with pytest.raises(ValueError) as err:
        att.distance_topk_attention(q.to(other.dtype), other, temperature=8.0, search=index)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("search must be an index of these keys: the KeyIndex was built on")
    assert "fit" in msg and "fit_key_index" in msg


def test_the_refusal_names_what_differs(fitted):
    keys, q, index = fitted
    with pytest.raises(ValueError, match=r"other keys \(same shape \(2048, 9\), float64, k = 1, other values\)"):
        index.check_keys(keys.flip(0))
    with pytest.raises(ValueError, match=r"shape \(2048, 9\), float64, k = 1; got shape \(2048, 9\), float64, k = 2\)"):
        index.check_keys(lift(keys[:, 1:], k=2.0), k=2.0)
    with pytest.raises(ValueError, match=r"built on one key set of shape \(2048, 9\), got 3 key sets of shape \(2048, 9\)"):
        att.distance_topk_attention(q.expand(3, 64, 9), keys.expand(3, 2048, 9), temperature=8.0, search=index)
    with pytest.raises(ValueError, match="got 3 key sets"):  # queries of three heads: the keys broadcast to three sets
        att.distance_topk_attention(q.expand(3, 64, 9), keys, temperature=8.0, search=index)
    changed = keys.clone()
    own = att.fit_key_index(q, changed, 16, tries=((1, 32),), recall=0.5)
    changed[3, 0] += 1.0  # changed in place after the fit
    with pytest.raises(ValueError, match="the KeyIndex was built on other keys"):
        own.check_keys(changed)


def test_the_same_keys_are_accepted_as_a_copy_or_with_a_batch_axis(fitted):
    keys, q, index = fitted
    index.check_keys(keys.clone())
    index.check_keys(keys.numpy().copy())
    index.check_keys(keys.unsqueeze(0))
    res = att.distance_topk_attention(q, keys.clone(), temperature=8.0, search=index)
    assert res.recall == index.recall and torch.isfinite(res.row_error).all()
    with pytest.raises(TypeError, match="keys must be a tensor or array of points, got .*'abc'"):
        index.check_keys("abc")


# ---- 6. numpy integers accepted, strings, bytes, bools and floats refused ----

@pytest.mark.parametrize("top", [np.int64(3), np.int32(3), np.uint8(3)])
def test_numpy_integer_tops_are_accepted(top):
    q, kk = _points((20, 3), seed=1), _points((400, 3), seed=2)
    ref = exact_top_keys(q, kk, 3).indices
    assert torch.equal(exact_top_keys(q, kk, top, block_rows=np.int64(7)).indices, ref)
    pytest.importorskip("faiss")
    assert ks.search_top_keys(q, kk, top, sample=np.int64(20), seed=np.int64(0)).indices.shape == (20, 3)
    index = ks.fit_key_index(q, kk, top, sample=np.int16(20))
    assert index.top == 3 and type(index.top) is int and index.search(q, np.int64(5)).indices.shape == (20, 5)


@settings(max_examples=30, deadline=None)
@given(top=st.one_of(st.text(max_size=3), st.binary(max_size=3), st.booleans(), st.floats(allow_nan=True),
                     st.integers(-5, 0), st.integers(401, 2**70), st.none(), st.lists(st.integers(1, 3), max_size=2)))
def test_bad_tops_are_one_line_errors(top):
    q, kk = _points((4, 3), seed=1), _points((400, 3), seed=2)
    calls = [lambda: exact_top_keys(q, kk, top), lambda: ks.search_top_keys(q, kk, top),
             lambda: ks.fit_key_index(q, kk, top)]
    for call in calls:
        with pytest.raises(ValueError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith("top must be an integer from 1 to 400 (the number of keys, M = 400), got") and "\n" not in msg
