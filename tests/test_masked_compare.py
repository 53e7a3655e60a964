"""``compare_maps(keep=...)``: each row judged over the keys it may attend (causal, padding, graph adjacency).

The reference is independent of the masked code path: every row compared on its own, with its kept keys sliced
out (an unmasked comparison of ``|K_i|`` keys).  The properties: keeping every key changes nothing, masked-out
padding keys change nothing, permuting keys changes nothing, sparse and dense adjacencies agree, and a model
report judges a causal layer against the uniform row over the keys each query attends.
"""

from __future__ import annotations

import pytest
import torch

from hypviz import attention as att
from hypviz.attention.comparison.result import ROW_VERDICTS, overall_verdict
from hypviz.capture import records
from hypviz.lorentz import lift
from hypviz.reports import model_report

F64 = torch.float64
FIELDS = ("tv", "kl", "tv_uniform_a", "tv_uniform_b", "peak_a", "peak_b", "top1_weight", "topk_overlap", "spearman")


def _causal_pair(h: int = 2, n: int = 9, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    keep = torch.ones(n, n, dtype=torch.bool).tril()
    s = 2.0 * torch.randn(h, n, n, generator=g, dtype=F64)
    t = s * torch.linspace(0.6, 1.6, h * n, dtype=F64).reshape(h, n, 1) + 0.3 * torch.randn(h, n, n, generator=g, dtype=F64)
    pa = torch.softmax(s.masked_fill(~keep, -1e18), dim=-1)
    pb = torch.softmax(t.masked_fill(~keep, -1e18), dim=-1)
    return pa, pb, keep


def _row_by_row(pa: torch.Tensor, pb: torch.Tensor, keep: torch.Tensor, **kw) -> dict[str, torch.Tensor]:
    """Every row compared alone over its kept keys (sliced out): the independent reference."""
    out: dict[str, list] = {f: [] for f in FIELDS + ("code",)}
    for h in range(pa.shape[0]):
        for i in range(pa.shape[1]):
            cols = keep[i].nonzero().reshape(-1)
            c = att.compare_maps(pa[h, i, cols][None], pb[h, i, cols][None], **kw)
            for f in FIELDS:
                out[f].append(float(getattr(c, f).reshape(-1)[0]))
            out["code"].append(int(c.row_verdict_codes.reshape(-1)[0]))
    return {f: torch.tensor(v, dtype=F64 if f != "code" else torch.int8).reshape(pa.shape[:2]) for f, v in out.items()}


def _fields_equal(c1: att.Comparison, c2: att.Comparison, atol: float = 0.0) -> None:
    for f in FIELDS + ("tv_tolerance",):
        assert torch.allclose(getattr(c1, f), getattr(c2, f), rtol=0.0, atol=atol), f
    assert torch.equal(c1.top1, c2.top1)
    assert torch.equal(c1.row_verdict_codes, c2.row_verdict_codes)


def test_a_causal_map_is_judged_as_each_row_over_its_kept_keys():
    pa, pb, keep = _causal_pair()
    got = att.compare_maps(pa, pb, keep=keep, topk=3)
    ref = _row_by_row(pa, pb, keep, topk=3)
    for f in FIELDS:
        assert torch.allclose(getattr(got, f), ref[f], rtol=1e-12, atol=1e-12), f
    assert torch.equal(got.row_verdict_codes, ref["code"])
    flat = ref["code"].reshape(-1)
    fractions = {name: float((flat == i).sum()) / flat.numel() for i, name in enumerate(ROW_VERDICTS)}
    assert got.verdict == overall_verdict(fractions)
    # the first query attends only itself: trivially identical, whatever the maps put there
    assert torch.all(got.tv[:, 0] == 0.0) and torch.all(got.tv_uniform_a[:, 0] == 0.0)
    # over all keys the masked zeros inflate the baseline: that is what keep= removes
    plain = att.compare_maps(pa, pb)
    assert bool((plain.tv_uniform_a[:, :4] > got.tv_uniform_a[:, :4] + 0.05).all())  # rows with most keys masked


def test_keeping_every_key_is_no_mask():
    pa, pb, _ = _causal_pair()
    pa, pb = torch.softmax(torch.log(pa + 0.1), -1), torch.softmax(torch.log(pb + 0.1), -1)
    _fields_equal(att.compare_maps(pa, pb, keep=torch.ones(9, 9, dtype=torch.bool)), att.compare_maps(pa, pb))


def test_masked_out_padding_keys_change_nothing_but_the_rounding_level():
    pa, pb, keep = _causal_pair()
    pad = torch.zeros(2, 9, 4, dtype=F64)
    keep_pad = torch.cat([keep, torch.zeros(9, 4, dtype=torch.bool)], dim=-1)
    a = att.compare_maps(torch.cat([pa, pad], -1), torch.cat([pb, pad], -1), keep=keep_pad, topk=4)
    b = att.compare_maps(pa, pb, keep=keep, topk=4)
    for f in FIELDS:
        assert torch.allclose(getattr(a, f), getattr(b, f), rtol=1e-13, atol=1e-15), f
    assert torch.equal(a.row_verdict_codes, b.row_verdict_codes)


def test_a_permutation_of_the_keys_changes_nothing():
    pa, pb, keep = _causal_pair(seed=3)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(5))
    a = att.compare_maps(pa[..., perm], pb[..., perm], keep=keep[:, perm], topk=2)
    b = att.compare_maps(pa, pb, keep=keep, topk=2)
    for f in FIELDS:
        assert torch.allclose(getattr(a, f), getattr(b, f), rtol=1e-12, atol=1e-14), f
    assert torch.equal(a.row_verdict_codes, b.row_verdict_codes)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_sparse_adjacency_agrees_with_its_dense_mask(layout):
    pa, pb, keep = _causal_pair(seed=1)
    adj = keep.to(F64) * 0.5  # the adjacency's non-zero entries are kept
    sparse = adj.to_sparse() if layout == "coo" else adj.to_sparse_csr()
    _fields_equal(att.compare_maps(pa, pb, keep=sparse), att.compare_maps(pa, pb, keep=keep))


def test_a_padding_mask_broadcasts_over_heads_and_queries():
    g = torch.Generator().manual_seed(2)
    b, h, n, m = 2, 3, 4, 6
    valid = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # batch element 1 pads its last two keys
    mask = valid[:, None, None, :]
    s = torch.randn(b, h, n, m, generator=g, dtype=F64)
    pa = torch.softmax(s.masked_fill(~mask, -1e18), -1)
    pb = torch.softmax((1.3 * s).masked_fill(~mask, -1e18), -1)
    _fields_equal(att.compare_maps(pa, pb, keep=mask), att.compare_maps(pa, pb, keep=mask.expand(b, h, n, m).clone()))


def test_rows_with_one_or_no_kept_key():
    p = torch.softmax(torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=F64), -1)
    one = torch.zeros(3, 5, dtype=torch.bool)
    one[:, 2] = True
    pa = torch.where(one, 1.0, 0.0).to(F64)
    c = att.compare_maps(pa, pa.clone(), keep=one)
    # one kept key: each row IS the uniform row over its kept keys, so both maps are uninformative (a TV of 0 is
    # identical only on rows the rounding resolves; a row with no structure has nothing to resolve)
    assert c.verdict == "uninformative" and float(c.tv.abs().max()) == 0.0 and float(c.peak_a.max()) == 1.0
    none = torch.zeros(3, 5, dtype=torch.bool)  # a row that keeps no key: all keys (a fully masked softmax is uniform)
    _fields_equal(att.compare_maps(p, p.flip(-1), keep=none), att.compare_maps(p, p.flip(-1)))


def test_values_are_averaged_against_the_uniform_row_over_the_kept_keys():
    pa, pb, keep = _causal_pair(h=1, n=6)
    v = torch.randn(1, 6, 3, generator=torch.Generator().manual_seed(4), dtype=F64)
    got = att.compare_maps(pa, pb, keep=keep, values=v)
    for i in range(6):
        ref = att.compare_maps(pa[0, i, : i + 1][None], pb[0, i, : i + 1][None], values=v[0, : i + 1])
        for f in ("output_gap", "output_uniform_a", "output_uniform_b"):
            assert torch.allclose(getattr(got, f)[0, i], getattr(ref, f)[0], rtol=1e-12, atol=1e-14), (f, i)


def test_weight_on_masked_keys_and_bad_masks_are_one_line_errors():
    pa, pb, keep = _causal_pair()
    full = pa.clone()
    full[1, 2] = 1.0 / 9.0  # row (1, 2) attends every key: 6/9 of its weight where keep masks out
    with pytest.raises(ValueError, match=r"^P_a must put no weight on the keys keep masks out .*, got 0.667 in row \(1, 2\)$"):
        att.compare_maps(full, pb, keep=keep)
    with pytest.raises(ValueError, match=r"^P_b must put no weight .* in row \(1, 2\)$"):
        att.compare_maps(pa, full, keep=keep)
    assert att.compare_maps(full, full, keep=torch.ones(9, 9, dtype=torch.bool)).verdict == "identical"
    with pytest.raises(TypeError, match=r"^keep must be a boolean array or tensor .*got dtype float64$"):
        att.compare_maps(pa, pb, keep=keep.to(F64))
    with pytest.raises(ValueError, match=r"^keep must have shape \(\.\.\., N, M\) broadcastable"):
        att.compare_maps(pa, pb, keep=keep[:, :5])
    with pytest.raises(ValueError, match=r"^keep must be an \(N, M\) = \(9, 9\) adjacency when sparse"):
        att.compare_maps(pa, pb, keep=keep[:5].to(F64).to_sparse())
    with pytest.raises(ValueError, match=r"^the leading axes of the maps \(2,\) and of keep \(3, 9, 9\) do not broadcast$"):
        att.compare_maps(pa, pb, keep=keep.expand(3, 9, 9))


def test_a_causal_layer_in_a_model_report_is_judged_over_the_keys_it_attends():
    g = torch.Generator().manual_seed(7)
    h, n, d, tau = 2, 7, 3, 0.6
    q = lift(torch.randn(h, n, d, generator=g, dtype=F64), k=1.0)
    kk = lift(torch.randn(h, n, d, generator=g, dtype=F64), k=1.0)
    keep = torch.ones(n, n, dtype=torch.bool).tril()
    rec = records.LayerRecord(name="dec", queries=q, keys=kk, values=None, k=1.0, mode="full", kind="distance",
                              temperature=tau, mask=keep)
    (res,) = model_report.analyse([rec], progress=False)
    thread = res.thread
    # the reference: every query's spatial and distance softmax built over its kept keys alone, compared alone
    tv, ua, codes = [], [], []
    for hh in range(h):
        for i in range(n):
            p_thr = att.attention_map(q[hh, i : i + 1], kk[hh, : i + 1], model_report.THREAD, k=1.0, temperature=tau)
            p_ref = att.attention_map(q[hh, i : i + 1], kk[hh, : i + 1], model_report.REFERENCE, k=1.0, temperature=tau)
            c = att.compare_maps(p_thr, p_ref)
            tv.append(float(c.tv[0]))
            ua.append(float(c.tv_uniform_b[0]))
            codes.append(int(c.row_verdict_codes[0]))
    assert torch.allclose(thread.tv.reshape(-1), torch.tensor(tv, dtype=F64), rtol=1e-9, atol=1e-12)
    assert torch.allclose(thread.tv_uniform_b.reshape(-1), torch.tensor(ua, dtype=F64), rtol=1e-9, atol=1e-12)
    assert thread.row_verdict_codes.reshape(-1).tolist() == codes
