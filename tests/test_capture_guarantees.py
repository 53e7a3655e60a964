"""What a capture's "verified" guarantees, held at the edges where it used to say more than it proved.

* A masked map is the map the layer applies at any norm: the softmax over the kept keys (masked logits -inf before
  it), never the softmax of all keys renormalised after every kept key underflowed (HyperCore's causal attention
  at inputs x40, query norms ~80).
* One temperature per layer call; a temperature its attributes give is never replaced by a fitted one; a fit whose
  outputs fix tau no better than the dtype's rounding is refused (bfloat16).
* The re-check's digests cover every field a verdict depends on; a missing digest is "not verified"; the tolerance
  comes from a dtype hypviz knows, never from the file; what the digests do NOT prove (a record rewritten whole) is
  said, not claimed away.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from hypviz import capture
from hypviz.capture import READERS, Reader, register, verification
from hypviz.capture.records import masked_softmax

from test_family_interfaces import (
    Block,
    HyboNetLorentz,
    Lorentz,
    LorentzMLA,
    LorentzMultiheadAttention,
    LorentzMultiHeadedAttention,
    _trained,
    rope,
)

F64 = torch.float64


def _capture(model, *args, **kw):
    with capture.attention(model) as cap, torch.no_grad():
        model(*args, **kw)
    return cap.layers


def _tv(p, w):
    return float(0.5 * (p.double() - w.double()).abs().sum(dim=-1).max())


# --------------------------------------------------------------------------- #
# 1. masked maps at large norms
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def causal_x40():
    torch.manual_seed(0)
    n, d_model, h = 7, 12, 3
    block = Block(d_model, h)
    x = torch.randn(2, n, d_model)
    causal = torch.triu(torch.ones(n, n), diagonal=1).bool()
    _trained(block, x, causal)
    x = 40.0 * x
    recs = _capture(block, x, causal)
    with torch.no_grad():
        _, w = block.attn(x, x, output_attentions=True, mask=causal)
    return recs, w, causal


def test_hypercore_causal_map_at_inputs_x40_is_the_layers_own(causal_x40):
    recs, w, causal = causal_x40
    assert min(float(r.queries[..., 0].max()) for r in recs) > 50  # the regime: kept keys underflow beside masked ones
    for r in recs:
        assert r.verify_note.startswith("verified: ") and r.temperature_source == "attributes"
        p = r.attention_map()
        assert _tv(p, w[r.batch]) < 1e-4  # the weights the layer applies (float32), row by row
        assert float(p.masked_select(causal).abs().max()) == 0.0
        # the old route, the softmax of all keys renormalised over the kept ones, has nothing left to renormalise
        with pytest.raises(ValueError, match=r"every key the mask keeps underflowed"):
            r.applied(r.unmasked_map(r.queries.double(), r.keys.double()))


def test_compare_on_the_x40_capture_exits_0_with_the_layers_verified(causal_x40, tmp_path, capsys):
    from hypviz import cli

    recs, _, _ = causal_x40
    capture.save(recs, tmp_path / "att.pt")
    code = cli.main(["compare", os.fspath(tmp_path / "att.pt"), "--device", "cpu", "--out", os.fspath(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.count("verified (error") == 2 and "not verified" not in out


def test_helm_hmla_causal_map_at_large_norms_is_the_layers_own():
    from types import SimpleNamespace

    torch.manual_seed(3)
    args = SimpleNamespace(dim=9, n_heads=2, q_lora_rank=0, kv_lora_rank=4, qk_nope_head_dim=3, qk_rope_head_dim=5,
                           v_head_dim=4)
    mla = LorentzMLA(Lorentz(1.0), args).eval()
    s = 6
    x = torch.randn(1, s, 9) * 30.0
    causal = torch.triu(torch.ones(s, s), diagonal=1).bool()
    (r,) = _capture(mla, x, 0, rope(args.qk_rope_head_dim, s), causal)
    assert float(r.queries[..., 0].max()) > 50
    assert r.verify_note.startswith("verified: ") and float(r.attention_map().masked_select(causal).abs().max()) == 0.0


def test_a_fully_masked_row_is_uniform_over_all_keys_as_the_layer_makes_it():
    torch.manual_seed(1)
    layer = LorentzMultiheadAttention(Lorentz(1.0), 4, 4, 2, attention_type="full")
    x = torch.randn(2, 5, 8) * 10.0
    pad = torch.tensor([[False, False, True, True, True], [True] * 5])  # (B, N) True = padded; element 1: all keys
    recs = _capture(layer, x, x, output_attentions=True, mask=pad)
    with torch.no_grad():
        _, w = layer(x, x, output_attentions=True, mask=layer.shape_mask(pad, 2, 2, 5))
    for r in recs:
        assert r.verify_note.startswith("verified: ")
        assert _tv(r.attention_map(), w[r.batch]) < 1e-5
    assert torch.equal(recs[1].attention_map(), torch.full((2, 5, 5), 0.2))  # masked_fill(-1e18) leaves every logit equal
    s = torch.tensor([[3.0, -1e4, 2.0]], dtype=F64)
    keep = torch.tensor([[False, False, False]])
    assert masked_softmax(s, keep).tolist() == [[1 / 3, 1 / 3, 1 / 3]]


def test_a_negative_scale_map_is_the_reversed_softmax_over_the_kept_keys():
    torch.manual_seed(2)
    layer = LorentzMultiheadAttention(Lorentz(1.0), 4, 4, 2, attention_type="full")
    with torch.no_grad():
        layer.scale.fill_(-2.0)
    x = torch.randn(1, 5, 8) * 5.0
    causal = torch.triu(torch.ones(5, 5), diagonal=1).bool()
    (r,) = _capture(layer, x, x, mask=causal)
    with torch.no_grad():
        _, w = layer(x, x, output_attentions=True, mask=causal)
    assert r.scale_sign == -1 and r.verify_note.startswith("verified: ")
    assert _tv(r.attention_map(), w[0]) < 1e-5  # the record's own map, not the positive-sign one


# --------------------------------------------------------------------------- #
# 2. the temperature: given by the attributes, or measured once per call above the rounding
# --------------------------------------------------------------------------- #
def _hybonet(seed, dtype=None):
    torch.manual_seed(seed)
    att = LorentzMultiHeadedAttention(2, 16, HyboNetLorentz())
    x = torch.randn(4, 5, 16)
    _trained(att, x, x, x)
    return (att if dtype is None else att.to(dtype)), (x if dtype is None else x.to(dtype))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hybonet_bfloat16_one_temperature_per_call_never_a_fitted_one(seed):
    att, x = _hybonet(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = _capture(att, x, x, x)
        scale32 = float(att.scale.detach())
        bf, xb = att.to(torch.bfloat16), x.to(torch.bfloat16)
        weights = _capture(bf, xb, xb, xb)
    for recs, scale in ((auto, scale32), (weights, float(bf.scale.detach().float()))):
        assert len(recs) == 4 and {r.call for r in recs} == {0} and all(r.dtype == "bfloat16" for r in recs)
        (tau,) = {r.temperature for r in recs}  # one for the call ...
        assert tau == pytest.approx(scale / 2.0, rel=1e-7)  # ... the attributes'
        assert {r.temperature_source for r in recs} == {"attributes"}
        assert not any("measured" in r.verify_note for r in recs)


class HiddenTau(nn.Module):
    """Per-head distance softmax at a temperature no attribute holds; returns the per-head centroids (B, N, H, D)."""

    def __init__(self, tau, d_in=6, heads=2, dim=4):
        super().__init__()
        self.heads, self.dim, self._tau = heads, dim, tau
        self.to_q, self.to_k, self.to_v = (nn.Linear(d_in, heads * dim) for _ in range(3))

    def forward(self, x):
        b, n, _ = x.shape

        def points(lin):
            s = lin(x).view(b, n, self.heads, self.dim).transpose(1, 2)
            return torch.cat([torch.sqrt((s * s).sum(-1, keepdim=True) + 1.0), s], dim=-1)

        q, k, v = points(self.to_q), points(self.to_k), points(self.to_v)
        inner = -q[..., :1] @ k[..., :1].transpose(-1, -2) + q[..., 1:] @ k[..., 1:].transpose(-1, -2)
        a = torch.softmax((2.0 + 2.0 * inner) / (2.0 * self._tau), dim=-1) @ v
        a = a / (a[..., :1] ** 2 - (a[..., 1:] ** 2).sum(-1, keepdim=True)).abs().sqrt()
        return a.transpose(1, 2)


class HiddenTauReader(Reader):
    family, structure = "hidden_tau", "to_q, to_k, to_v and heads; no attribute gives the temperature"
    queries, keys, values = "to_q", "to_k", "to_v"
    heads, spatial, aggregation = "heads", True, "centroid_heads"

    def temperature(self, layer):
        return None  # not given: measured from the call's outputs


@pytest.fixture
def hidden_reader():
    register(HiddenTauReader)
    yield
    READERS.remove(HiddenTauReader)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_a_temperature_no_attribute_gives_is_measured_once_per_call(hidden_reader, dtype):
    torch.manual_seed(0)
    layer = HiddenTau(0.7).to(dtype)
    recs = _capture(layer, torch.randn(3, 7, 6).to(dtype))
    assert len(recs) == 3 and {r.temperature_source for r in recs} == {"measured"}
    assert len({r.temperature for r in recs}) == 1  # one for the call, not one per batch element
    assert recs[0].temperature == pytest.approx(0.7, rel=1e-3 if dtype == torch.float32 else 1e-9)
    assert all(r.verify_note.startswith("verified at the measured tau = 0.7 (+-") for r in recs)


def test_a_temperature_fixed_no_better_than_bfloat16_rounding_is_refused(hidden_reader):
    torch.manual_seed(0)
    layer = HiddenTau(0.7).to(torch.bfloat16)
    recs = _capture(layer, torch.randn(3, 7, 6).to(torch.bfloat16))
    for r in recs:
        assert r.verify_note.startswith("not verified: the temperature could not be measured above the rounding of "
                                        "bfloat16: every tau from ")
        assert r.temperature_source == "default" and r.checked_output is None and r.digests is None
    lo, hi = (float(v) for v in re.search(r"from (\S+) to (\S+) reproduces", recs[0].verify_note).groups())
    assert lo < 0.7 < hi and hi / lo - 1 > verification.MEASURED_SPREAD


def test_a_fit_reports_its_spread():
    torch.manual_seed(0)
    (r,) = _capture_hidden(F64)
    fit = verification.fit_temperature([(dataclasses.replace(r, temperature=2.0), r.checked_output, None)],
                                       verification.tolerance("float64"))
    assert fit.temperature == pytest.approx(0.7, rel=1e-9) and fit.error < 1e-9
    assert fit.low < 0.7 < fit.high and fit.spread < 1e-5


def _capture_hidden(dtype):
    register(HiddenTauReader)
    try:
        layer = HiddenTau(0.7).to(dtype)
        return _capture(layer, torch.randn(1, 7, 6).to(dtype))
    finally:
        READERS.remove(HiddenTauReader)


# --------------------------------------------------------------------------- #
# 3. the re-check: what it covers, and what it does not prove
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    block = Block(8, 2).double()
    x = torch.randn(2, 5, 8, dtype=F64)
    causal = torch.triu(torch.ones(5, 5), diagonal=1).bool()
    recs = _capture(block, x, causal)
    path = tmp_path_factory.mktemp("cap") / "att.pt"
    capture.save(recs, path)
    return path


def _edited(saved, tmp_path, edit):
    obj = torch.load(saved, weights_only=True)
    edit(obj["layers"][0])
    torch.save(obj, tmp_path / "edited.pt")
    return capture.load(tmp_path / "edited.pt")[0]


def test_every_field_but_the_verdict_is_digested():
    fields = {f.name for f in dataclasses.fields(capture.LayerRecord)}
    # reader and plugins say what made the record (which module to load), not what its verdict depends on
    assert set(verification.DIGESTED) == fields - {"verify_error", "verify_tolerance", "verify_note", "digests", "reader",
                                                   "plugins"}


@pytest.mark.parametrize("field,value", [("name", "attn.spliced"), ("call", 3), ("batch", 1), ("training", False),
                                         ("dtype", "float32"), ("mode", "helm_hmla"), ("checked", "anything"),
                                         ("temperature_source", "measured"), ("aggregation", "centroid_mean_heads")])
def test_a_field_that_changes_a_verdict_edited_is_named(saved, tmp_path, field, value):
    rec = _edited(saved, tmp_path, lambda d: d.update({field: value}))
    assert capture.load(saved)[0].to_dict()[field] != value  # an edit indeed
    assert verification.recheck(rec).verify_note == f"not verified: {field} changed since the capture (digest differs)"


@pytest.mark.parametrize("edit", ["queries x1.5", "temperature x10", "keys shuffled", "values replaced"])
def test_edits_with_digests_recomputed_but_the_output_kept_fail_the_rebuild(saved, tmp_path, edit):
    def apply(d):
        rec = capture.LayerRecord.from_dict(d)
        if edit == "queries x1.5":
            s = 1.5 * rec.queries[..., 1:]
            rec = dataclasses.replace(rec, queries=torch.cat([(s * s).sum(-1, keepdim=True).add(rec.k).sqrt(), s], -1))
        elif edit == "temperature x10":
            rec = dataclasses.replace(rec, temperature=10.0 * rec.temperature)
        elif edit == "keys shuffled":
            rec = dataclasses.replace(rec, keys=rec.keys[:, torch.tensor([4, 2, 0, 3, 1])])
        else:
            rec = dataclasses.replace(rec, values=rec.values.flip(-2))
        d.update(rec.to_dict(), digests=verification.digests(rec))

    got = verification.recheck(_edited(saved, tmp_path, apply))
    assert got.verify_note.startswith("not verified: the re-check from the record differs from the stored output by ")


def test_a_record_rewritten_whole_passes_as_documented(saved, tmp_path):
    # what the digests do not prove: a record rewritten with its output rebuilt and digests recomputed is consistent
    def apply(d):
        rec = capture.LayerRecord.from_dict(d)
        rec = dataclasses.replace(rec, temperature=10.0 * rec.temperature)
        rec = dataclasses.replace(rec, checked_output=verification.rebuild(rec))
        d.update(rec.to_dict(), digests=verification.digests(rec))

    assert verification.recheck(_edited(saved, tmp_path, apply)).verify_note.startswith("verified")
    assert "not a record rewritten whole" in " ".join(verification.recheck.__doc__.split())
    assert "not a signature" in " ".join(verification.__doc__.split())


def test_no_digests_is_not_verified_and_an_older_capture_is_named(saved, tmp_path):
    rec = _edited(saved, tmp_path, lambda d: d.pop("digests"))
    assert verification.recheck(rec).verify_note.startswith("not verified: the record holds no digests")
    rec = _edited(saved, tmp_path, lambda d: [d["digests"].pop(f) for f in ("name", "training")])
    assert verification.recheck(rec).verify_note == (
        "not verified: its digests do not cover name, training (a capture of an older hypviz: capture again)")


def test_the_tolerance_comes_from_a_dtype_hypviz_knows_never_from_the_file(saved, tmp_path):
    def loosen(d):
        d.update(verify_tolerance=0.5, verify_error=0.4)
    got = verification.recheck(_edited(saved, tmp_path, loosen))
    assert got.verify_tolerance == verification.tolerance("float64") and got.verify_error < 1e-12

    def float8(d):
        rec = dataclasses.replace(capture.LayerRecord.from_dict(d), dtype="float8_e5m2")
        d.update(dtype="float8_e5m2", digests=verification.digests(rec))  # digests consistent: refused all the same
    got = verification.recheck(_edited(saved, tmp_path, float8))
    assert got.verify_note == ("not verified: dtype 'float8_e5m2' is not one hypviz verifies a layer in "
                               "(float64, float32, float16 or bfloat16)")


def test_no_text_of_the_package_claims_a_file_cannot_fake_its_verification():
    root = Path(verification.__file__).parents[1]
    claims = [str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".py", ".html", ".md", ".txt", ".j2")
              and re.search(r"cannot (be )?fake|tamper-?proof|cannot be forged", p.read_text(errors="ignore"), re.I)]
    assert claims == []
