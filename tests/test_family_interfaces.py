"""The readers held to the families' real interfaces.

Each layer below reproduces the structure of a family's real class -- attribute names, forward signature,
what it returns, its mask arguments, its head concatenation and its own numerics -- written here after reading
the family's code at the commit named (no code copied, nothing of theirs imported):

* HyperCore ``LorentzMultiheadAttention``: Graph-and-Geometric-Learning/HyperCore e87a4f8,
  hypercore/nn/attention/lorentz_former_conv.py; its encoder block hypercore/models/Transformer_encoder.py.
* HELM-D's use of it (a copy of the same file, helm/hypercore/nn/attention/lorentz_former_conv.py) with a causal
  mask and RoPE: Graph-and-Geometric-Learning/helm 83ac8ff, helm/modules/helm_d.py.
* HELM's HMLA ``LorentzMLA``: helm 83ac8ff, helm/modules/hmla.py (LorentzLinear and LorentzRMSNorm from
  helm/hypercore/nn/linear/lorentz_linear.py and helm/hypercore/nn/conv/conv_util_layers.py).
* HyboNet's machine-translation ``LorentzMultiHeadedAttention``: chenweize1998/fully-hyperbolic-nn 7ba8e1a,
  mt/onmt/modules/lmulti_headed_attn.py, its LorentzLinear mt/onmt/modules/hyper_nets.py.
* The Lorentz GCN gate ``LorentzAgg``: fully-hyperbolic-nn 7ba8e1a gcn/layers/hyp_layers.py, and HyperCore's
  copy e87a4f8 hypercore/nn/graph_conv/hyobnet_conv.py (sqrt(c) output scaling, rows clamped at 1e-6).
* Hypformer's ``TransConvLayer`` with ``trans_heads_concat=1``: Graph-and-Geometric-Learning/hyperbolic-transformer
  768fcec, large/hypformer.py.

Every layer is captured with the README's three lines, in float32 (as the families train), after a few
optimiser steps; every record must be verified to sqrt(eps) of float32 with the step checked named, and the map
in the record must be the one the layer applies (masked).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hypviz import capture
from hypviz.reports import model_report

TOL32 = math.sqrt(torch.finfo(torch.float32).eps)


# --------------------------------------------------------------------------- #
# HyperCore's manifold (hypercore/manifolds/lorentzian.py, lmath.py at e87a4f8)
# --------------------------------------------------------------------------- #
class Lorentz(nn.Module):
    def __init__(self, c=1.0):
        super().__init__()
        self.c = torch.tensor(float(c))
        self.k = self.c
        self.eps = {torch.float32: 1e-6, torch.float64: 1e-8}

    def l_inner(self, x, y, keep_dim=False, dim=-1):
        uv = x * y
        out = -uv.narrow(dim, 0, 1) + uv.narrow(dim, 1, x.size(dim) - 1).sum(dim=dim, keepdim=True)
        return out if keep_dim else out.squeeze(dim)

    def cinner(self, x, y):
        x = x.clone()
        x.narrow(-1, 0, 1).mul_(-1)
        return x @ y.transpose(-1, -2)

    def lorentzian_centroid(self, x, weight=None, dim=-1):
        ave = weight @ x if weight is not None else x.mean(dim=-2)
        denom = (-self.l_inner(ave, ave, dim=dim, keep_dim=True)).abs().clamp_min(self.eps[x.dtype]).sqrt()
        return self.c.sqrt() * ave / denom


class LorentzMultiheadAttention(nn.Module):
    """HyperCore's class: Wq/Wk/Wv to H (out - 1) spatial features, full_attention(qs, ks, vs, output_attentions,
    mask) with masked_fill(mask, -1e18), final_linear over the concatenated heads when trans_heads_concat."""

    def __init__(self, manifold, in_channels, out_channels, num_heads, use_weight=True, power_k=2.0,
                 attention_type="linear_focused", trans_heads_concat=False, normalize=False):
        super().__init__()
        self.manifold, self.in_channels, self.out_channels, self.num_heads = manifold, in_channels, out_channels, num_heads
        self.use_weight, self.attention_type = use_weight, attention_type
        self.Wk = nn.Linear(num_heads * in_channels, num_heads * (out_channels - 1))
        self.Wq = nn.Linear(num_heads * in_channels, num_heads * (out_channels - 1))
        if use_weight:
            self.Wv = nn.Linear(num_heads * in_channels, num_heads * (out_channels - 1))
        self.scale = nn.Parameter(torch.tensor([math.sqrt(num_heads * out_channels)]))
        self.bias = nn.Parameter(torch.zeros(()))
        self.power_k, self.trans_heads_concat, self.normalize = power_k, trans_heads_concat, normalize
        if trans_heads_concat:
            self.final_linear = nn.Linear(num_heads * out_channels, num_heads * out_channels - 1)

    def project(self, x):
        return torch.cat([((x ** 2).sum(dim=-1, keepdims=True) + self.manifold.c) ** 0.5, x], dim=-1)

    def shape_mask(self, mask, batch_size, num_heads, seq_len):
        if mask is None:
            return None
        if mask.dim() == 4:
            return mask
        if mask.dim() == 2:
            if mask.shape == (seq_len, seq_len):
                return mask.unsqueeze(0).unsqueeze(0)
            return mask.unsqueeze(1).unsqueeze(2)  # [B, 1, 1, N]
        if mask.shape[1:] == (seq_len, seq_len):
            return mask.unsqueeze(1)
        return mask.squeeze(1).unsqueeze(1).unsqueeze(2)

    def apply_rotary_embeddings(self, x, freqs_complex, device):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        out = torch.view_as_real(xc * freqs_complex.unsqueeze(0).unsqueeze(2)).reshape(*x.shape)
        return out.type_as(x).to(device)

    def full_attention(self, qs, ks, vs, output_attentions=False, mask=None):
        qs, ks, vs = self.project(qs), self.project(ks), self.project(vs)
        w = 2 * self.manifold.c + 2 * self.manifold.cinner(qs.transpose(1, 2), ks.transpose(1, 2))
        w = w / self.scale + self.bias
        if mask is not None:
            w = w.masked_fill(mask, -1e18)
        w = nn.Softmax(dim=-1)(w)
        out = self.manifold.lorentzian_centroid(vs.transpose(1, 2), w).transpose(1, 2)  # [B, N, H, D]
        if self.trans_heads_concat:
            space = self.final_linear(out.reshape(out.size(0), out.size(1), self.num_heads * self.out_channels))
            out = torch.cat([((space ** 2).sum(dim=-1, keepdims=True) + self.manifold.c).sqrt(), space], dim=-1)
        else:
            out = self.manifold.lorentzian_centroid(out)
        return (out, w) if output_attentions else out

    def forward(self, query_input, source_input, output_attentions=False, mask=None, rot_pos=None, edge_index=None,
                edge_weight=None):
        b, n, _ = source_input.size()
        if mask is not None:
            mask = self.shape_mask(mask, b, self.num_heads, n)
        q = self.Wq(query_input).view(b, n, self.num_heads, self.out_channels - 1)
        k = self.Wk(source_input).view(b, n, self.num_heads, self.out_channels - 1)
        if rot_pos is not None:
            q = self.apply_rotary_embeddings(q, rot_pos, q.device)
            k = self.apply_rotary_embeddings(k, rot_pos, k.device)
        v = self.Wv(source_input).view(b, n, self.num_heads, self.out_channels - 1)
        return self.full_attention(q, k, v, output_attentions, mask)


def rope(head_dim, seq_len, theta=10000.0):
    """helm_d.py's precompute_theta_pos_frequencies: RoPE on head_dim - 1 spatial dims."""
    head_dim -= 1
    t = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(seq_len).float(), t)
    return torch.polar(torch.ones_like(freqs), freqs)


class Block(nn.Module):
    """The encoder/decoder blocks' use: attn(lx, lx, output_attentions=False, mask=attn_mask[, rot_pos=rope])."""

    def __init__(self, d_model, n_head, c=1.0):
        super().__init__()
        dph = d_model // n_head
        self.attn = LorentzMultiheadAttention(Lorentz(c), dph, dph, n_head, attention_type="full",
                                              trans_heads_concat=True)

    def forward(self, x, attn_mask=None, rope=None):
        return self.attn(x, x, output_attentions=False, mask=attn_mask, rot_pos=rope)


def _trained(model, *inputs, steps=3, **kw):
    """A few optimiser steps on a random target, as a briefly trained model (float32)."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(steps):
        out = model(*inputs, **kw)
        out = out[0] if isinstance(out, tuple) else out
        loss = (out[..., 1:] ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _capture(model, *args, **kw):
    with capture.attention(model) as cap:
        with torch.no_grad():
            model(*args, **kw)
    return cap.layers


def _all_verified(recs):
    for r in recs:
        assert r.verify_note.startswith("verified"), r.verify_note
        assert r.verify_error is not None and r.verify_error <= TOL32


@pytest.mark.parametrize("c", [1.0, 2.0])
def test_hypercore_encoder_block_causal_mask_concatenated_heads_verified_per_head(c):
    torch.manual_seed(0)
    n, d_model, h = 7, 12, 3
    block = Block(d_model, h, c)
    x = torch.randn(2, n, d_model)
    causal = torch.triu(torch.full((n, n), float("-inf")), diagonal=1).bool()  # as LTransformerEncoder builds it
    _trained(block, x, causal)
    recs = _capture(block, x, causal)
    assert len(recs) == 2 and [r.batch for r in recs] == [0, 1] and {r.call for r in recs} == {0}
    _all_verified(recs)
    r = recs[0]
    assert r.mode == "hypercore" and r.aggregation == "centroid_heads" and "final_linear" in r.checked
    assert r.detail == "heads concatenated by final_linear" and r.k == pytest.approx(c)
    p = r.attention_map()
    assert float(p.masked_select(causal).abs().max()) == 0.0  # the map the layer applies: nothing above the diagonal
    # the record's map is the layer's own attention weights (output_attentions=True), head by head
    with torch.no_grad():
        _, w = block.attn(x, x, output_attentions=True, mask=causal)
    assert torch.allclose(p.double(), w[0].double(), atol=1e-5)


def test_hypercore_padding_mask_and_the_report_map_is_the_masked_one():
    torch.manual_seed(1)
    block = Block(8, 2)
    x = torch.randn(2, 6, 8)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])  # (B, N): True = a padded key
    recs = _capture(_trained(block, x, pad), x, pad)
    _all_verified(recs)
    assert recs[0].mask.all() and not recs[1].mask[..., 4:].any()
    (res,) = model_report.analyse([recs[1]], device="cpu", progress=False)
    assert res.label.endswith("(batch element 1)")
    assert res.own is None and res.own_is_reference  # a verified distance layer: its map is the reference


def test_helm_decoder_causal_mask_rope_named_hypercore_with_rope():
    torch.manual_seed(2)
    n, d_model, h = 6, 10, 2  # dim_per_head 5: RoPE on its 4 spatial dims
    block = Block(d_model, h)
    x = torch.randn(1, n, d_model)
    causal = torch.triu(torch.ones(n, n), diagonal=1).bool()
    pad = torch.zeros(1, n, n, dtype=torch.bool)
    mask = causal.unsqueeze(0) | pad  # helm_d.py: causal.unsqueeze(0) | attn_mask, (B, N, N)
    freqs = rope(d_model // h, n)
    (r,) = _capture(_trained(block, x, mask, rope=freqs), x, mask, rope=freqs)
    _all_verified([r])
    assert r.mode == "hypercore" and r.detail == "with RoPE, heads concatenated by final_linear"


# --------------------------------------------------------------------------- #
# HELM's HMLA (helm/modules/hmla.py at 83ac8ff)
# --------------------------------------------------------------------------- #
class LorentzLinear(nn.Module):
    """HyperCore/HELM LorentzLinear: nn.Linear on the whole point, the time recomputed (or the space returned)."""

    def __init__(self, manifold, in_features, out_features, bias=True):
        super().__init__()
        self.manifold, self.c = manifold, manifold.c
        self.linear = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x, x_manifold="hyp", return_space=False):
        s = self.linear(x)
        if return_space:
            return s
        return torch.cat([((s ** 2).sum(dim=-1, keepdims=True) + self.c).clamp_min(1e-8).sqrt(), s], dim=-1)


class LorentzRMSNorm(nn.Module):
    def __init__(self, manifold, dim, eps=1e-8):
        super().__init__()
        self.dim, self.eps, self.c = dim, eps, manifold.c
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, space_only=False, return_space=False):
        s = F.rms_norm(x if space_only else x[..., 1:], (self.dim,), self.weight, self.eps)
        return s if return_space else torch.cat([((s ** 2).sum(-1, keepdim=True) + self.c).sqrt(), s], dim=-1)


def apply_rotary_emb(x, freqs_cis):
    dtype = x.dtype
    xc = torch.view_as_complex(x.float().contiguous().view(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis.view(1, xc.size(1), 1, xc.size(-1))).flatten(3).to(dtype)


class LorentzMLA(nn.Module):
    def __init__(self, manifold, args):
        super().__init__()
        self.manifold, self.dim, self.n_heads, self.n_local_heads = manifold, args.dim, args.n_heads, args.n_heads
        self.q_lora_rank, self.kv_lora_rank = args.q_lora_rank, args.kv_lora_rank
        self.qk_nope_head_dim, self.qk_rope_head_dim = args.qk_nope_head_dim, args.qk_rope_head_dim
        self.qk_head_dim = args.qk_nope_head_dim + args.qk_rope_head_dim
        self.v_head_dim = args.v_head_dim
        if self.q_lora_rank == 0:
            self.wq = LorentzLinear(manifold, self.dim, self.n_heads * (self.qk_head_dim - 1))
        else:
            self.wq_a = LorentzLinear(manifold, self.dim, self.q_lora_rank - 1)
            self.q_norm = LorentzRMSNorm(manifold, self.q_lora_rank)
            self.wq_b = LorentzLinear(manifold, self.q_lora_rank + 1, self.n_heads * (self.qk_head_dim - 1))
        self.wkv_a = LorentzLinear(manifold, self.dim, self.kv_lora_rank + self.qk_rope_head_dim - 1)
        self.kv_norm = LorentzRMSNorm(manifold, self.kv_lora_rank)
        self.wkv_b = LorentzLinear(manifold, self.kv_lora_rank + 1,
                                   self.n_heads * (self.qk_nope_head_dim + self.v_head_dim - 1))
        self.wo = LorentzLinear(manifold, self.n_heads * self.v_head_dim, self.dim - 1)
        self.softmax_scale = nn.Parameter(torch.tensor([math.sqrt(self.n_local_heads * self.qk_head_dim)]))
        self.bias = nn.Parameter(torch.zeros(()))

    def project(self, x):
        return torch.cat([((x ** 2).sum(dim=-1, keepdims=True) + self.manifold.c) ** 0.5, x], dim=-1)

    shape_mask = LorentzMultiheadAttention.shape_mask

    def forward(self, x, start_pos, freqs_cis, mask, attn_impl="naive"):
        bsz, seqlen, _ = x.size()
        if self.q_lora_rank == 0:
            q = self.wq(x, return_space=True)
        else:
            q = self.wq_b(self.q_norm(self.wq_a(x, return_space=True), space_only=True), return_space=True)
        q = q.view(bsz, seqlen, self.n_local_heads, self.qk_head_dim - 1)
        q_nope, q_pe = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim - 1], dim=-1)
        q_pe = apply_rotary_emb(q_pe, freqs_cis)
        kv = self.wkv_a(x, return_space=True)
        kv, k_pe = torch.split(kv, [self.kv_lora_rank, self.qk_rope_head_dim - 1], dim=-1)
        k_pe = apply_rotary_emb(k_pe.unsqueeze(2), freqs_cis)
        q = torch.cat([q_nope, q_pe], dim=-1)
        kv = self.wkv_b(self.kv_norm(kv, space_only=True), return_space=True)
        kv = kv.view(bsz, seqlen, self.n_local_heads, self.qk_nope_head_dim + self.v_head_dim - 1)
        k_nope, v = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim - 1], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, -1, self.n_local_heads, -1)], dim=-1)
        qs, ks = self.project(q), self.project(k)
        scores = 2 * self.manifold.c + 2 * self.manifold.cinner(qs.transpose(1, 2), ks.transpose(1, 2))
        scores = scores / self.softmax_scale + self.bias
        if mask is not None:
            scores = scores.masked_fill(self.shape_mask(mask, bsz, self.n_local_heads, seqlen), -1e18)
        scores = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
        vs = self.project(v)
        x = self.manifold.lorentzian_centroid(vs.transpose(1, 2), scores).transpose(1, 2)
        return self.wo(x.flatten(2))


def test_helm_hmla_latent_attention_with_rope_verified_before_wo():
    # q_lora_rank 0, HELM's default (config/args.py); its q_lora_rank > 0 path feeds q_lora_rank - 1 features to an
    # RMS norm of q_lora_rank (hmla.py lines 62-63 at 83ac8ff), which F.rms_norm refuses
    torch.manual_seed(3)
    args = SimpleNamespace(dim=9, n_heads=2, q_lora_rank=0, kv_lora_rank=4, qk_nope_head_dim=3,
                           qk_rope_head_dim=5, v_head_dim=4)
    mla = LorentzMLA(Lorentz(1.0), args)
    s = 6
    x = torch.cat([torch.ones(2, s, 1) * 2.0, torch.randn(2, s, 8) * 0.5], dim=-1)
    x[..., :1] = ((x[..., 1:] ** 2).sum(-1, keepdim=True) + 1).sqrt()
    freqs = rope(args.qk_rope_head_dim, s)  # 4 rotated spatial dims of each head
    causal = torch.triu(torch.ones(s, s), diagonal=1).bool()
    recs = _capture(_trained(mla, x, 0, freqs, causal), x, 0, freqs, causal)
    assert len(recs) == 2 and [r.batch for r in recs] == [0, 1]
    _all_verified(recs)
    r = recs[0]
    assert r.mode == "helm_hmla" and r.n_heads == 2 and r.dim == args.qk_nope_head_dim + args.qk_rope_head_dim - 1
    assert r.values.shape[-1] == args.v_head_dim and "wo" in r.checked and "RoPE on the last 4" in r.detail
    assert r.temperature == pytest.approx(float(mla.softmax_scale.detach()) / 2, rel=1e-6)
    assert float(r.attention_map().masked_select(causal).abs().max()) == 0.0


# --------------------------------------------------------------------------- #
# HyboNet MT (mt/onmt/modules/lmulti_headed_attn.py, hyper_nets.py at 7ba8e1a)
# --------------------------------------------------------------------------- #
class HyboNetLorentz:
    def __init__(self, k=1.0):
        self.k = torch.tensor(float(k))

    def cinner(self, x, y):
        x = x.clone()
        x.narrow(-1, 0, 1).mul_(-1)
        return x @ y.transpose(-1, -2)

    def inner(self, u, v, keepdim=False):
        uv = u * v
        out = -uv.narrow(-1, 0, 1) + uv.narrow(-1, 1, u.size(-1) - 1).sum(dim=-1, keepdim=True)
        return out if keepdim else out.squeeze(-1)

    def mid_point(self, x, w=None):
        ave = w.matmul(x) if w is not None else x.mean(dim=-2)
        return ave / (-self.inner(ave, ave, keepdim=True)).abs().clamp_min(1e-8).sqrt()


class MTLorentzLinear(nn.Module):
    """HyboNet's LorentzLinear with head_num: (B, N, H, D) points, time = sigmoid(.) exp(scale) + 1.1."""

    def __init__(self, in_features, out_features, bias=True, dropout=0.1, manifold=None, head_num=0):
        super().__init__()
        self.manifold, self.head_num = manifold, head_num
        self.weight = nn.Linear(in_features, out_features, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.scale = nn.Parameter(torch.ones(()) * 2.3)

    def forward(self, x, bias=None):
        x = self.weight(self.dropout(x))
        if self.head_num > 0:
            x = x.view(x.shape[0], x.shape[1], self.head_num, -1)
        narrow = x.narrow(-1, 1, x.shape[-1] - 1)
        time = x.narrow(-1, 0, 1).sigmoid() * self.scale.exp() + 1.1
        sc = (time * time - self.manifold.k) / (narrow * narrow).sum(dim=-1, keepdim=True)
        return torch.cat([time, narrow * sc.sqrt()], dim=-1)


class LorentzMultiHeadedAttention(nn.Module):
    def __init__(self, head_count, model_dim, manifold, dropout=0.1, max_relative_positions=0):
        super().__init__()
        self.dim_per_head, self.model_dim = model_dim // head_count, model_dim
        self.manifold, self.head_count = manifold, head_count
        mk = lambda: MTLorentzLinear(model_dim, head_count * self.dim_per_head, dropout=dropout, manifold=manifold,  # noqa: E731
                                     head_num=head_count)
        self.linear_keys, self.linear_values, self.linear_query = mk(), mk(), mk()
        self.softmax, self.dropout = nn.Softmax(dim=-1), nn.Dropout(dropout)
        self.scale = nn.Parameter(torch.tensor([math.sqrt(model_dim)]))
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, key, value, query, mask=None, layer_cache=None, attn_type=None):
        b = key.size(0)

        def shape(x):
            return x.transpose(1, 2)

        if layer_cache is not None and attn_type == "self":
            query, key, value = self.linear_query(query), self.linear_keys(query), self.linear_values(query)
            key, value = shape(key), shape(value)
            if layer_cache["self_keys"] is not None:
                key = torch.cat((layer_cache["self_keys"], key), dim=2)
                value = torch.cat((layer_cache["self_values"], value), dim=2)
            layer_cache["self_keys"], layer_cache["self_values"] = key, value
        else:
            key, value, query = shape(self.linear_keys(key)), shape(self.linear_values(value)), self.linear_query(query)
        query = shape(query)
        attn = (2 + 2 * self.manifold.cinner(query, key)) / self.scale + self.bias
        if mask is not None:
            attn = attn.masked_fill(mask.unsqueeze(1), -1e18)
        attn = self.softmax(attn)
        context = self.manifold.mid_point(value, attn).transpose(1, 2)
        return context, attn.view(b, self.head_count, query.size(2), key.size(2))


def test_hybonet_mt_attention_padding_mask_tuple_return_verified():
    torch.manual_seed(4)
    att = LorentzMultiHeadedAttention(2, 8, HyboNetLorentz())
    x = torch.randn(2, 5, 8)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2]).unsqueeze(1)  # (B, 1, T), True = padding
    _trained(att, x, x, x, mask=pad)
    recs = _capture(att, x, x, x, mask=pad)
    _all_verified(recs)
    r = recs[1]
    assert r.mode == "hybonet" and r.aggregation == "midpoint_heads" and r.n_heads == 2 and r.dim == 3
    with torch.no_grad():
        _, attns = att(x, x, x, mask=pad)
    assert torch.allclose(r.attention_map().double(), attns[1].double(), atol=1e-5)  # the map it returns


def test_hybonet_mt_decoder_self_attention_with_layer_cache():
    torch.manual_seed(5)
    att = LorentzMultiHeadedAttention(2, 8, HyboNetLorentz()).eval()
    cache = {"self_keys": None, "self_values": None}
    recs = []
    for _ in range(3):  # step-by-step decoding: the keys and values grow in the cache
        x = torch.randn(1, 1, 8)
        recs += _capture(att, x, x, x, mask=None, layer_cache=cache, attn_type="self")
    _all_verified(recs)
    assert [r.n_keys for r in recs] == [1, 2, 3]


# --------------------------------------------------------------------------- #
# The Lorentz GCN gate: HyboNet's LorentzAgg and HyperCore's copy
# --------------------------------------------------------------------------- #
class PointLinear(nn.Module):
    def __init__(self, d, k=1.0):
        super().__init__()
        self.lin, self.k = nn.Linear(d + 1, d), k

    def forward(self, x):
        s = self.lin(x)
        return torch.cat([((s * s).sum(-1, keepdim=True) + self.k).sqrt(), s], dim=-1)


class LorentzAgg(nn.Module):
    def __init__(self, manifold, in_features, dropout, use_att, local_agg, hypercore=False):
        super().__init__()
        self.manifold, self.in_features, self.dropout = manifold, in_features, dropout
        self.local_agg, self.use_att = local_agg, use_att
        k = float(manifold.k)
        if hypercore:
            self.c = manifold.c
        self.key_linear, self.query_linear = PointLinear(in_features, k), PointLinear(in_features, k)
        self.bias = nn.Parameter(torch.zeros(()) + 20)
        self.scale = nn.Parameter(torch.zeros(()) + math.sqrt(in_features))

    def forward(self, x, adj):
        q, k = self.query_linear(x), self.key_linear(x)
        att = torch.sigmoid((2 + 2 * self.manifold.cinner(q, k)) / self.scale + self.bias)
        s = torch.matmul(torch.mul(adj.to_dense(), att), x)
        if hasattr(self, "c"):  # hyobnet_conv.py: l_inner, clamp 1e-6, divided by 1/sqrt(c)
            denom = (-self.manifold.l_inner(s, s, keep_dim=True)).abs().clamp_min(1e-6).sqrt() / self.c.sqrt()
        else:  # hyp_layers.py: inner, clamp 1e-8
            denom = (-self.manifold.inner(s, s, keepdim=True)).abs().clamp_min(1e-8).sqrt()
        return s / denom


def _graph(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(n, 4, generator=g)
    x = torch.cat([((xs * xs).sum(-1, keepdim=True) + k).sqrt(), xs], dim=-1)
    dense = ((torch.rand(n, n, generator=g) < 0.25) | torch.eye(n, dtype=torch.bool)).float()
    return x, dense.to_sparse()


@pytest.mark.parametrize("family,c", [("hybonet", 1.0), ("hypercore", 1.0), ("hypercore", 2.0)])
def test_gate_sparse_adjacency_kept_and_the_map_is_adj_times_gate(family, c):
    torch.manual_seed(6)
    man = Lorentz(c) if family == "hypercore" else HyboNetLorentz(c)
    agg = LorentzAgg(man, 4, 0.0, True, True, hypercore=family == "hypercore")
    x, adj = _graph(12, c, 6)
    (r,) = _capture(agg, x, adj)
    _all_verified([r])
    assert r.adjacency.layout == torch.sparse_coo  # a sparse adjacency stays sparse
    assert r.aggregation == ("gate_centroid" if family == "hypercore" else "gate_midpoint")
    p = r.attention_map()[0]
    off = adj.to_dense() == 0
    assert float(p.masked_select(off).abs().max()) == 0.0  # no weight on non-neighbours


# --------------------------------------------------------------------------- #
# Hypformer TransConvLayer, linear_focused with trans_heads_concat=1 (large/hypformer.py at 768fcec)
# --------------------------------------------------------------------------- #
class HypformerManifold:
    def __init__(self, k=1.0):
        self.k = torch.tensor(float(k))


class HypLinear(nn.Module):
    def __init__(self, manifold, in_channels, out_channels):
        super().__init__()
        self.manifold, self.lin = manifold, nn.Linear(in_channels + 1, out_channels)

    def forward(self, x):
        s = self.lin(x)
        return torch.cat([((s * s).sum(-1, keepdim=True) + self.manifold.k).sqrt(), s], dim=-1)


class TransConvLayer(nn.Module):
    def __init__(self, manifold, in_channels, out_channels, num_heads, use_weight=True, args=None):
        super().__init__()
        self.manifold, self.in_channels, self.out_channels, self.num_heads = manifold, in_channels, out_channels, num_heads
        self.use_weight, self.attention_type = use_weight, args.attention_type
        self.Wk = nn.ModuleList(HypLinear(manifold, in_channels, out_channels) for _ in range(num_heads))
        self.Wq = nn.ModuleList(HypLinear(manifold, in_channels, out_channels) for _ in range(num_heads))
        self.Wv = nn.ModuleList(HypLinear(manifold, in_channels, out_channels) for _ in range(num_heads))
        self.scale = nn.Parameter(torch.tensor([math.sqrt(out_channels)]))
        self.bias = nn.Parameter(torch.zeros(()))
        self.norm_scale = nn.Parameter(torch.ones(()))
        self.v_map_mlp = nn.Linear(in_channels, out_channels, bias=True)
        self.power_k, self.trans_heads_concat = args.power_k, args.trans_heads_concat
        if self.trans_heads_concat:
            self.final_linear = nn.Linear(out_channels * num_heads, out_channels, bias=True)

    @staticmethod
    def fp(x, p=2):
        return (torch.norm(x, p=2, dim=-1, keepdim=True) / torch.norm(x ** p, p=2, dim=-1, keepdim=True)) * x ** p

    def linear_focus_attention(self, hyp_qs, hyp_ks, hyp_vs, output_attn=False):
        qs, ks, v = hyp_qs[..., 1:], hyp_ks[..., 1:], hyp_vs[..., 1:]
        phi_q = self.fp((F.relu(qs) + 1e-6) / (self.norm_scale.abs() + 1e-6), p=self.power_k)
        phi_k = self.fp((F.relu(ks) + 1e-6) / (self.norm_scale.abs() + 1e-6), p=self.power_k)
        num = torch.einsum("nhm,hmd->nhd", phi_q, torch.einsum("nhm,nhd->hmd", phi_k, v))
        den = torch.einsum("nhd,hd->nh", phi_q, torch.einsum("nhd->hd", phi_k)).unsqueeze(-1)
        out = num / (den + 1e-6) + self.v_map_mlp(v)
        if self.trans_heads_concat:
            out = self.final_linear(out.reshape(-1, self.num_heads * self.out_channels))
        else:
            out = out.mean(dim=1)
        return torch.cat([((out ** 2).sum(dim=-1, keepdims=True) + self.manifold.k) ** 0.5, out], dim=-1)

    def forward(self, query_input, source_input, edge_index=None, edge_weight=None, output_attn=False):
        q = torch.stack([w(query_input) for w in self.Wq], dim=1)
        k = torch.stack([w(source_input) for w in self.Wk], dim=1)
        v = torch.stack([w(source_input) for w in self.Wv], dim=1)
        return self.linear_focus_attention(q, k, v, output_attn)


def test_hypformer_linear_with_concatenated_heads_verified_per_head():
    torch.manual_seed(7)
    args = SimpleNamespace(attention_type="linear_focused", power_k=2.0, trans_heads_concat=1)
    layer = TransConvLayer(HypformerManifold(1.0), 6, 6, 3, args=args)
    xs = torch.randn(20, 6)
    x = torch.cat([((xs * xs).sum(-1, keepdim=True) + 1).sqrt(), xs], dim=-1)
    (r,) = _capture(_trained(layer, x, x), x, x)
    _all_verified([r])
    assert r.aggregation == "focused_heads" and "final_linear" in r.checked and r.batch is None


# --------------------------------------------------------------------------- #
# One verdict policy; a reader registered at run time
# --------------------------------------------------------------------------- #
def test_an_unverified_layer_has_no_verdict_in_metrics_or_summary(tmp_path):
    torch.manual_seed(8)
    block = Block(8, 2)
    x = torch.randn(1, 5, 8)
    recs = _capture(block, x, None)
    import dataclasses
    bad = dataclasses.replace(recs[0], verify_note="not verified: for the test", verify_error=None, kind="spatial",
                              temperature=recs[0].temperature)
    res = model_report.analyse([bad], device="cpu", progress=False)
    m = model_report.metrics(res, {})
    layer = m["layers"][0]
    assert layer["model_vs_distance"] is None and layer["model_map_is_distance"] is None
    assert layer["model_verdict"] == "not verified: no verdict"
    text = model_report.summary(res, tmp_path, ["report.html"])
    assert "model's map not verified: no verdict" in text and "model's map = distance" not in text


@pytest.mark.parametrize("per_head", [False, True])
def test_a_reader_registered_at_run_time_captures_a_new_family(per_head):
    from hypviz.capture import READERS, Reader, register
    from hypviz.capture.records import modes

    class TinyAttention(nn.Module):
        """A new family: to_q/to_k/to_v spatial maps, logits -|q - kappa|^2_L / (2 tau), softmax, centroid per head."""

        def __init__(self, d=4, heads=2):
            super().__init__()
            self.to_q, self.to_k, self.to_v = (nn.Linear(d, heads * 3) for _ in range(3))
            self.heads = heads
            self.tau = nn.Parameter(torch.tensor([0.7, 1.9]) if per_head else torch.tensor(0.7))
            self.manifold = HypformerManifold(1.0)

        def forward(self, x, key_padding=None):
            b, n, _ = x.shape
            lift = lambda s: torch.cat([((s * s).sum(-1, keepdim=True) + 1).sqrt(), s], -1)  # noqa: E731
            q, k, v = (lift(m(x).view(b, n, self.heads, 3)).transpose(1, 2) for m in (self.to_q, self.to_k, self.to_v))
            inner = q[..., 1:] @ k[..., 1:].transpose(-1, -2) - q[..., :1] @ k[..., :1].transpose(-1, -2)
            tau = self.tau.flip(0) if getattr(self, "flip", False) else self.tau
            logits = (-0.5 * (-2 - 2 * inner)) / (tau.reshape(-1, 1, 1) if per_head else tau)
            if key_padding is not None:
                logits = logits.masked_fill(key_padding[:, None, None, :], -1e18)
            a = torch.softmax(logits, -1) @ v
            a = a / (a[..., :1] ** 2 - (a[..., 1:] ** 2).sum(-1, keepdim=True)).sqrt()
            return a.transpose(1, 2)

    class TinyReader(Reader):
        family = f"tiny_test_family_{int(per_head)}"
        structure = "to_q, to_k, to_v and tau, as the test's TinyAttention"
        queries, keys, values = "to_q", "to_k", "to_v"
        heads, spatial = "heads", True
        aggregation = "centroid_heads"
        mask_argument = "key_padding"

        @classmethod
        def matches(cls, m):
            return super().matches(m) and hasattr(m, "tau")

        def temperature(self, layer):
            return layer.tau.detach()

    assert TinyReader.family not in modes()
    register(TinyReader)
    try:
        assert TinyReader.family in modes()
        layer = TinyAttention()
        x = torch.randn(2, 5, 4)
        pad = torch.tensor([[False] * 5, [False] * 2 + [True] * 3])
        recs = _capture(layer, x, key_padding=pad)
        _all_verified(recs)
        assert recs[0].mode == TinyReader.family and not recs[1].mask[..., 2:].any()
        if per_head:  # one temperature per head, each head's map at its own
            assert recs[1].head_temperatures == pytest.approx([0.7, 1.9])
            assert recs[1].temperature == pytest.approx(math.sqrt(0.7 * 1.9))
            (res,) = model_report.analyse([recs[1]], device="cpu", progress=False)
            assert res.own is None and res.own_is_reference and "one per head" in res.temperature_text
            layer.flip = True  # a layer that applies its heads' temperatures swapped is caught
            bad = _capture(layer, x, key_padding=pad)
            assert all(r.verify_note.startswith("not verified") and r.verify_error > 1e-3 for r in bad)
        else:
            assert recs[1].temperature == pytest.approx(0.7) and recs[1].head_temperatures is None
        with pytest.raises(ValueError, match="reader.family must be new"):
            register(type("Other", (TinyReader,), {}))
    finally:
        READERS.remove(TinyReader)


def test_capture_lookup_is_linear_in_the_model_size():
    """10^4 tiny gate layers: the check for unrecognised attention asks the set of recognised layers about each
    module's prefixes (at most its depth) and never scans it, so a model of 10^4 layers costs 10^4-ish lookups."""
    from hypviz.capture.family_readers import reader_for, unrecognised

    class Lookups(set):
        count = 0

        def __contains__(self, item):
            Lookups.count += 1
            return super().__contains__(item)

        def __iter__(self):
            raise AssertionError("the recognised layers were scanned")

    man = HyboNetLorentz(1.0)
    model = nn.ModuleList(LorentzAgg(man, 2, 0.0, True, True) for _ in range(10_000))
    named = dict(model.named_modules())
    known = Lookups(n for n, m in named.items() if reader_for(m) is not None)
    assert len(known) == 10_000
    assert unrecognised(named, known) == []
    depth = max(n.count(".") + 1 for n in named)
    assert Lookups.count <= len(named) * depth
    xs = torch.randn(5, 2, generator=torch.Generator().manual_seed(0))
    x = torch.cat([((xs * xs).sum(-1, keepdim=True) + 1).sqrt(), xs], dim=-1)
    with capture.attention(model) as cap, torch.no_grad():  # the whole capture on that model: one layer run
        model[9_999](x, torch.eye(5))
    assert [r.name for r in cap.layers] == ["9999"]
