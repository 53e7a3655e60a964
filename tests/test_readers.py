"""The family readers (hypviz.capture.family_readers) and the self-verification (hypviz.capture.verification).

Each family is a small layer written here from that family's maths (attribute names and call structure
as in its public code, see hypviz.capture.family_readers), independent of hypviz: Möbius addition for the
Poincare distance, the Einstein midpoint in the Klein model for the gyromidpoint.  Every reader must
recognise its layer, record the temperature of its convention, and rebuild the layer's output to
rounding (float64); a modified layer must be caught.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from hypviz import capture
from hypviz.attention import attention_map
from hypviz.capture import verification
from hypviz.lorentz import from_poincare

F64 = torch.float64


def lift(xs, c):
    return torch.cat([torch.sqrt((xs * xs).sum(-1, keepdim=True) + c), xs], dim=-1)


def linner(a, b):
    return a[..., 1:] @ b[..., 1:].transpose(-1, -2) - a[..., :1] @ b[..., :1].transpose(-1, -2)


# --------------------------------------------------------------------------- #
# HyperCore / HELM
# --------------------------------------------------------------------------- #
class LorentzManifold:
    def __init__(self, c):
        self.c = float(c)

    def cinner(self, x, y):
        return linner(x, y)

    def lorentzian_centroid(self, x, weight=None):
        ave = weight @ x if weight is not None else x.mean(dim=-2)
        nrm = (-(-ave[..., :1] ** 2 + (ave[..., 1:] ** 2).sum(-1, keepdim=True))).abs().sqrt()
        return math.sqrt(self.c) * ave / nrm


class HyperCoreAttention(nn.Module):
    """(2c + 2<q,kappa>_L)/scale + bias, scale initialised sqrt(H D), centroids per head and of the heads."""

    def __init__(self, c, d_in, out_channels, heads, logit_divisor=1.0):
        super().__init__()
        self.manifold, self.num_heads, self.out_channels, self.attention_type = LorentzManifold(c), heads, out_channels, "full"
        self.in_channels = d_in
        self.Wq, self.Wk, self.Wv = (nn.Linear(heads * d_in, heads * (out_channels - 1)) for _ in range(3))
        self.scale = nn.Parameter(torch.tensor([math.sqrt(heads * out_channels)]))
        self.bias = nn.Parameter(torch.zeros(()))
        self.trans_heads_concat, self.normalize, self.use_weight = False, False, True
        self.logit_divisor = logit_divisor

    def project(self, x):
        return lift(x, self.manifold.c)

    def apply_rotary_embeddings(self, x, freqs, device=None):
        return x

    def full_attention(self, qs, ks, vs, output_attentions=False, mask=None):
        qs, ks, vs = self.project(qs), self.project(ks), self.project(vs)  # (B, N, H, D)
        w = 2 * self.manifold.c + 2 * self.manifold.cinner(qs.transpose(1, 2), ks.transpose(1, 2))
        w = w / (self.logit_divisor * self.scale) + self.bias
        w = torch.softmax(w if mask is None else w.masked_fill(mask, -1e18), dim=-1)
        out = self.manifold.lorentzian_centroid(vs.transpose(1, 2), w).transpose(1, 2)  # (B, N, H, D)
        return self.manifold.lorentzian_centroid(out)

    def forward(self, query_input, source_input, output_attentions=False, mask=None, rot_pos=None):
        b, n, _ = source_input.shape
        q = self.Wq(query_input).view(b, n, self.num_heads, self.out_channels - 1)
        k = self.Wk(source_input).view(b, n, self.num_heads, self.out_channels - 1)
        if rot_pos is not None:
            q, k = self.apply_rotary_embeddings(q, rot_pos), self.apply_rotary_embeddings(k, rot_pos)
        v = self.Wv(source_input).view(b, n, self.num_heads, self.out_channels - 1)
        return self.full_attention(q, k, v, output_attentions, mask)


class HelmAttention(HyperCoreAttention):
    """HELM: rotary embedding of the spatial part (pairs rotated by position), time recomputed by project."""

    def apply_rotary_embeddings(self, x, freqs, device=None):
        n = x.shape[1]
        ang = torch.arange(n, dtype=x.dtype)[:, None] * freqs[None, :]  # (N, D/2)
        cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)
        return out.reshape(x.shape)


# --------------------------------------------------------------------------- #
# HyboNet
# --------------------------------------------------------------------------- #
class HeadPoints(nn.Module):
    """dim features -> head_count points of dim_per_head coordinates each, (B, N, dim)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.lin = heads, nn.Linear(dim, heads * (dim // heads - 1))

    def forward(self, x):
        s = self.lin(x).view(*x.shape[:-1], self.heads, -1)
        return lift(s, 1.0).reshape(*x.shape[:-1], -1)


class HyboNetManifold:
    k = 1.0

    def cinner(self, x, y):
        return linner(x, y)

    def mid_point(self, x, w):
        ave = w @ x
        return ave / (-(-ave[..., :1] ** 2 + (ave[..., 1:] ** 2).sum(-1, keepdim=True))).abs().clamp_min(1e-8).sqrt()


class LorentzMultiHeadedAttention(nn.Module):
    def __init__(self, head_count, dim, softmax=True):
        super().__init__()
        self.head_count, self.dim, self.dim_per_head, self.manifold = head_count, dim, dim // head_count, HyboNetManifold()
        self.linear_keys, self.linear_values, self.linear_query = (HeadPoints(dim, head_count) for _ in range(3))
        self.scale = nn.Parameter(torch.tensor([math.sqrt(dim)]))
        self.bias = nn.Parameter(torch.zeros(()))
        self.use_softmax = softmax

    def forward(self, key, value, query, mask=None):
        b, h, dph = key.size(0), self.head_count, self.dim_per_head

        def shape(x):
            return x.view(b, -1, h, dph).transpose(1, 2)

        query, key, value = shape(self.linear_query(query)), shape(self.linear_keys(key)), shape(self.linear_values(value))
        attn = (2 + 2 * self.manifold.cinner(query, key)) / self.scale + self.bias
        if self.use_softmax:
            attn = torch.softmax(attn, dim=-1)
        ctx = self.manifold.mid_point(value, attn)
        return ctx.transpose(1, 2), attn


# --------------------------------------------------------------------------- #
# Lorentz GCN gate
# --------------------------------------------------------------------------- #
class PointMap(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return lift(self.lin(x[..., 1:]), 1.0)


class LorentzAgg(nn.Module):
    def __init__(self, d, normalise_rows=False):
        super().__init__()
        self.manifold, self.use_att, self.local_agg = HyboNetManifold(), True, True
        self.query_linear, self.key_linear = PointMap(d), PointMap(d)
        self.bias = nn.Parameter(torch.zeros(()) + 2.0)
        self.scale = nn.Parameter(torch.zeros(()) + math.sqrt(d))
        self.normalise_rows = normalise_rows

    def forward(self, x, adj):
        q, k = self.query_linear(x), self.key_linear(x)
        att = torch.sigmoid((2 + 2 * linner(q, k)) / self.scale + self.bias) * adj
        if self.normalise_rows:
            att = att / att.sum(-1, keepdim=True)
        s = att @ x
        return s / (-(-s[..., :1] ** 2 + (s[..., 1:] ** 2).sum(-1, keepdim=True))).abs().clamp_min(1e-8).sqrt()


# --------------------------------------------------------------------------- #
# Poincare ball, HNN++ style
# --------------------------------------------------------------------------- #
class Ball:
    def __init__(self, c):
        self.c = c

    def mobius_add(self, x, y):
        c = self.c
        xy, x2, y2 = (x * y).sum(-1, keepdim=True), (x * x).sum(-1, keepdim=True), (y * y).sum(-1, keepdim=True)
        return ((1 + 2 * c * xy + c * y2) * x + (1 - c * x2) * y) / (1 + 2 * c * xy + c * c * x2 * y2)

    def dist_matmul(self, x, y_t):  # (..., N, d), (..., d, M) -> (..., N, M)
        y = y_t.transpose(-1, -2)
        diff = self.mobius_add(-x.unsqueeze(-2), y.unsqueeze(-3))
        sc = math.sqrt(self.c)
        return 2 / sc * torch.atanh(sc * diff.norm(dim=-1))

    def weighted_midpoint_bmm(self, xs, weights):  # Einstein midpoint in the Klein model, back to the ball
        sc = math.sqrt(self.c)
        p = xs * sc
        kl = 2 * p / (1 + (p * p).sum(-1, keepdim=True))
        gamma = 1 / torch.sqrt(1 - (kl * kl).sum(-1, keepdim=True))
        m = (weights @ (gamma * kl)) / (weights @ gamma)
        return m / (1 + torch.sqrt(1 - (m * m).sum(-1, keepdim=True))) / sc


class BallMap(nn.Module):
    def __init__(self, d, heads, c):
        super().__init__()
        self.heads, self.lin, self.c = heads, nn.Linear(d, d), c

    def forward(self, x):  # expmap0 of a linear map, per head: ball points (B, N, H, hd)
        u = self.lin(x).view(*x.shape[:-1], self.heads, -1)
        n = u.norm(dim=-1, keepdim=True)
        return torch.tanh(math.sqrt(self.c) * n) * u / (math.sqrt(self.c) * n)


class HyperbolicMultiHeadAttention(nn.Module):
    def __init__(self, d, heads, c, scale=None):
        super().__init__()
        self.manifold, self.num_attention_heads, self.attention_head_size = Ball(c), heads, d // heads
        self.query, self.key, self.value = (BallMap(d, heads, c) for _ in range(3))
        if scale is not None:
            self.scale = scale

    def forward(self, hidden_states, attention_mask=None):
        q, k, v = (m(hidden_states).permute(0, 2, 1, 3) for m in (self.query, self.key, self.value))
        s = getattr(self, "scale", 1.0)
        probs = torch.softmax(-self.manifold.dist_matmul(q, k.transpose(-1, -2)) / s, dim=-1)
        ctx = self.manifold.weighted_midpoint_bmm(v, probs).permute(0, 2, 1, 3)
        return (ctx.reshape(*ctx.shape[:2], -1),)


# --------------------------------------------------------------------------- #
# tests
# --------------------------------------------------------------------------- #
def _capture(model, *args, **kw):
    with capture.attention(model) as cap:
        with torch.no_grad():
            model(*args, **kw)
    return cap.layers


@pytest.mark.parametrize("c", [0.5, 1.0, 2.0])
def test_hypercore_reader_verifies_and_reads_tau_scale_over_two(c):
    torch.manual_seed(0)
    layer = HyperCoreAttention(c, 4, 5, heads=3).double()
    x = torch.randn(2, 7, 12, dtype=F64)
    recs = _capture(layer, x, x)
    assert len(recs) == 2 and {r.mode for r in recs} == {"hypercore"}  # one record per batch element
    for r in recs:
        assert r.kind == "distance" and r.n_heads == 3 and r.dim == 4 and r.k == pytest.approx(c)
        assert r.temperature == pytest.approx(math.sqrt(15) / 2) and r.temperature_source == "attributes"
        assert r.verify_error is not None and r.verify_error < 1e-12, r.verify_note
        assert r.verify_note.startswith("verified")


def test_helm_rotary_points_recorded_after_rope():
    torch.manual_seed(1)
    layer = HelmAttention(1.0, 4, 5, heads=2).double()
    x = torch.randn(1, 9, 8, dtype=F64)
    freqs = torch.tensor([1.0, 0.1], dtype=F64)
    recs = _capture(layer, x, x, rot_pos=freqs)
    # the family is named from structure (HyperCore's class), the rotary embedding as a detail
    assert recs[0].mode == "hypercore" and recs[0].detail == "with RoPE" and recs[0].verify_error < 1e-12
    plain = _capture(HelmAttention(1.0, 4, 5, heads=2).double().requires_grad_(False), x, x)
    assert plain[0].mode == "hypercore" and plain[0].detail is None


def test_hybonet_reader_midpoint_heads_and_no_softmax_copy_caught():
    torch.manual_seed(2)
    layer = LorentzMultiHeadedAttention(2, 8).double()
    x = torch.randn(1, 6, 8, dtype=F64)
    (r,) = _capture(layer, x, x, x)
    assert r.mode == "hybonet" and r.aggregation == "midpoint_heads" and r.n_heads == 2 and r.dim == 3
    assert r.temperature == pytest.approx(math.sqrt(8) / 2) and r.verify_error < 1e-12
    bad = LorentzMultiHeadedAttention(2, 8, softmax=False).double()  # the GCN tree's copy: logits into mid_point
    bad.load_state_dict(layer.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (rb,) = _capture(bad, x, x, x)
    assert rb.verify_note.startswith("not verified") and (rb.verify_error is None or rb.verify_error > 1e-3)


def test_lorentz_gcn_gate_rows_not_normalised():
    torch.manual_seed(3)
    agg = LorentzAgg(4).double()
    x = lift(torch.randn(10, 4, dtype=F64), 1.0)
    adj = (torch.rand(10, 10) < 0.4).double() + torch.eye(10, dtype=F64)
    (r,) = _capture(agg, x, adj.clamp(max=1))
    assert r.kind == "sigmoid" and r.bias == pytest.approx(2.0) and r.temperature == pytest.approx(1.0)
    assert r.verify_error < 1e-12
    gate = r.attention_map()
    assert not torch.allclose(gate.sum(-1), torch.ones(1, 10, dtype=F64))  # a gate, not a softmax
    ref = torch.sigmoid((2 + 2 * linner(agg.query_linear(x), agg.key_linear(x))) / agg.scale + agg.bias).detach()
    # the record's map is the one the layer applies: adj (.) G, zero off the graph's edges
    assert torch.allclose(gate[0], ref * adj.clamp(max=1), atol=1e-12)
    norm = LorentzAgg(4, normalise_rows=True).double()
    norm.load_state_dict(agg.state_dict())
    # row normalisation does not change a Lorentzian normalisation of s: the same output, still verified
    (rn,) = _capture(norm, x, adj.clamp(max=1))
    assert rn.verify_error < 1e-12


@pytest.mark.parametrize("c, scale", [(1.0, None), (0.5, 2.0)])
def test_poincare_reader_distance_not_squared_and_gyromidpoint(c, scale):
    torch.manual_seed(4)
    layer = HyperbolicMultiHeadAttention(6, 2, c, scale).double()
    x = torch.randn(1, 8, 6, dtype=F64) * 0.5
    (r,) = _capture(layer, x)
    assert r.kind == "poincare" and r.k == pytest.approx(1 / c) and r.temperature == pytest.approx(scale or 1.0)
    assert r.temperature_source == ("default" if scale is None else "attributes")
    assert r.verify_error < 1e-10, r.verify_note
    # the map is softmax(-d/tau) of the ball's own distance (Möbius addition), not of its square
    q = layer.query(x).permute(0, 2, 1, 3)[0].detach()
    kk = layer.key(x).permute(0, 2, 1, 3)[0].detach()
    ref = torch.softmax(-layer.manifold.dist_matmul(q, kk.transpose(-1, -2)) / (scale or 1.0), dim=-1)
    assert torch.allclose(r.attention_map(), ref, atol=1e-10)
    sq = attention_map(from_poincare(q, k=1 / c), from_poincare(kk, k=1 / c), "distance", k=1 / c, temperature=scale or 1.0)
    assert not torch.allclose(sq, ref, atol=1e-3)


def test_a_fork_with_twice_the_scale_is_not_verified_at_a_fitted_tau():
    torch.manual_seed(5)
    layer = HyperCoreAttention(1.0, 4, 5, heads=2, logit_divisor=2.0).double()
    x = torch.randn(1, 7, 8, dtype=F64)
    with pytest.warns(UserWarning, match="does not reproduce its output, but tau = 3.162"):
        (r,) = _capture(layer, x, x)
    assert r.temperature_source == "attributes" and r.temperature == pytest.approx(math.sqrt(10) / 2, rel=1e-6)
    assert r.verify_note.startswith("not verified") and "reproduced at tau = 3.162" in r.verify_note


def test_unrecognised_attention_named_with_how_to_capture():
    class MyAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(3, 3), nn.Linear(3, 3)

        def forward(self, x):
            return self.q_proj(x) + self.k_proj(x)

    model = nn.Sequential(MyAttention())
    with pytest.raises(ValueError, match=r"module '0' \(MyAttention\) has q_proj/k_proj .* layers=\{'0': \('0.q_proj', "
                                         r"'0.k_proj'\)\}.*hypviz.capture.register") as e:
        with capture.attention(model):
            model(torch.zeros(2, 3))
    assert "\n" not in str(e.value)


def test_new_fields_survive_save_and_load(tmp_path):
    torch.manual_seed(6)
    agg = LorentzAgg(3).double()
    x = lift(torch.randn(5, 3, dtype=F64), 1.0)
    with capture.attention(agg) as cap:
        agg(x, torch.ones(5, 5, dtype=F64))
    path = cap.save(tmp_path / "gate.pt")
    (r,) = capture.load(path)
    (r0,) = cap.layers
    for f in ("bias", "scale_sign", "aggregation", "verify_error", "verify_tolerance", "verify_note", "dtype", "training",
              "temperature_source", "kind", "mode"):
        assert getattr(r, f) == getattr(r0, f), f
    assert r.training is True and r.dtype == "float64"


def test_tolerance_is_sqrt_eps_of_the_model_dtype():
    assert verification.tolerance("float64") == pytest.approx(math.sqrt(2.220446049250313e-16))
    assert verification.tolerance(torch.bfloat16) == pytest.approx(math.sqrt(2.0**-7))
    for unknown in (None, "float8_e5m2", torch.float8_e5m2, "int8", "float"):  # never a tolerance it does not know
        with pytest.raises(ValueError, match="is not one hypviz verifies a layer in"):
            verification.tolerance(unknown)


def test_model_report_shows_verification_and_no_verdict_for_unverified(tmp_path):
    from hypviz.reports import model_report
    from hypviz.reports.html import model_page

    torch.manual_seed(7)
    good = LorentzMultiHeadedAttention(2, 8).double()
    bad = LorentzMultiHeadedAttention(2, 8, softmax=False).double()
    gate = LorentzAgg(4).double()
    x = torch.randn(1, 6, 8, dtype=F64)
    xl = lift(torch.randn(6, 4, dtype=F64), 1.0)
    recs = _capture(good, x, x, x) + _capture(gate, xl, torch.ones(6, 6, dtype=F64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        recs += _capture(bad, x, x, x)
    results = model_report.analyse(recs, device="cpu", progress=False)
    assert [lr.verified for lr in results] == [True, True, False]
    assert results[1].own is not None and results[1].own.a == "sigmoid"  # the gate's own map, row-normalised, compared
    text = model_report.summary(results, tmp_path, ["report.html"])
    lines = text.splitlines()
    assert "verified (error" in lines[1] and "eval" not in lines[1] and "train" in lines[1]
    assert sum("model's map not verified: no verdict" in ln for ln in lines) == 2  # the unverified layer's two heads
    page = model_page(results, b"", {"version": "x", "created": "now"})
    assert "verified (error)" in page and "not verified: no verdict" in page
    data = model_report.metrics(results, {})
    assert [entry["verified"] for entry in data["layers"]] == [True, True, False]


def test_rebuild_in_row_blocks_equals_one_block(monkeypatch):
    torch.manual_seed(8)
    layer = HyperbolicMultiHeadAttention(6, 2, 1.0).double()
    x = torch.randn(1, 9, 6, dtype=F64) * 0.5
    (r,) = _capture(layer, x)
    whole = verification.rebuild(r)
    monkeypatch.setattr(verification, "_BLOCK_ELEMENTS", 2 * 9 * 2)  # two query rows a block
    torch.testing.assert_close(verification.rebuild(r), whole, rtol=0, atol=1e-15)
    agg = LorentzAgg(3).double()
    xl = lift(torch.randn(9, 3, dtype=F64), 1.0)
    adj = (torch.rand(9, 9, generator=torch.Generator().manual_seed(0)) < 0.5).double() + torch.eye(9, dtype=F64)
    (g,) = _capture(agg, xl, adj.clamp(max=1))
    assert g.verify_error < 1e-12  # verified with the adjacency's rows split along with the queries


def test_an_unrecognised_attention_beside_recognised_ones_is_named_not_skipped_silently():
    class MyAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.to_q, self.to_k = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.to_q(x) * self.to_k(x)

    model = nn.ModuleDict({"hybo": LorentzMultiHeadedAttention(2, 8).double(), "mine": MyAttention().double()})
    x = torch.randn(1, 5, 8, dtype=F64)
    with pytest.warns(UserWarning, match=r"not recorded: module 'mine' \(MyAttention\) has to_q/to_k"):
        with capture.attention(model) as cap:
            model["hybo"](x, x, x)
            model["mine"](x)
    assert [r.name for r in cap.layers] == ["hybo"]


def test_hypercore_mask_applied_and_a_concat_flag_without_its_map_not_verified():
    torch.manual_seed(9)
    layer = HyperCoreAttention(1.0, 4, 5, heads=2).double()
    x = torch.randn(1, 6, 8, dtype=F64)
    mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)[None, None].expand(1, 2, 6, 6)  # True = masked
    (r,) = _capture(layer, x, x, False, mask)
    assert r.verify_note.startswith("verified") and r.verify_error < 1e-12
    assert torch.equal(r.mask, ~mask[0])  # the record holds what is attended
    p = r.attention_map()
    assert float(p.masked_select(mask[0]).abs().max()) == 0.0 and torch.allclose(p.sum(-1), torch.ones(2, 6, dtype=F64))
    ignoring = HyperCoreAttention(1.0, 4, 5, heads=2).double()
    ignoring.load_state_dict(layer.state_dict())
    ignoring.full_attention = lambda qs, ks, vs, oa=False, mask=None: HyperCoreAttention.full_attention(ignoring, qs, ks, vs)
    (r,) = _capture(ignoring, x, x, False, mask)  # a layer that drops the mask it is given is caught
    assert r.verify_note.startswith("not verified") and r.verify_error > 1e-3
    layer.trans_heads_concat = True  # the flag without a final_linear: the step to check never ran
    (r,) = _capture(layer, x, x)
    assert r.verify_note.startswith("not verified: final_linear")
