"""hypviz.toymodel: each layer computes what its docstring says, training lowers the loss, capture finds it."""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention, capture, lorentz, toymodel


def _points(n: int, d: int, k: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return lorentz.lift(0.9 * torch.randn(n, d, generator=g, dtype=torch.float64), k=k)


def _layer(mode: str, k: float, heads: int = 3, d_in: int = 5, d: int = 4, **kw) -> toymodel.HypAttention:
    torch.manual_seed(1)
    layer = toymodel.HypAttention(d_in, d, heads, k=k, attention_type=mode, **kw).double()
    with torch.no_grad():  # move the learned scalars away from their initial values
        layer.norm_scale.fill_(0.7)
        layer.scale.fill_(1.7)
        layer.bias.fill_(0.3)
    return layer


def _qkv(layer: toymodel.HypAttention, x: torch.Tensor, src: torch.Tensor):
    return tuple(torch.stack([w(inp) for w in ws]) for ws, inp in ((layer.Wq, x), (layer.Wk, src), (layer.Wv, src)))


@pytest.mark.parametrize("k", [1.0, 2.0])
def test_the_focused_output_is_hypviz_focused_attention_plus_the_value_map(k):
    layer = _layer("linear_focused", k, power_k=3.0)
    x, src = _points(7, 5, k, 0), _points(7, 5, k, 1)  # N = M: v_map_mlp(v_i) is added to query i
    q, kk, v = _qkv(layer, x, src)
    per_head = attention.focused_linear_attention(q, kk, v, power=3.0, norm_scale=0.7, k=k, eps=1e-6)
    expected = lorentz.lift((per_head + layer.v_map_mlp(v[..., 1:])).mean(dim=0), k=k)
    out = layer(x, src)
    assert torch.allclose(out, expected, rtol=1e-10, atol=1e-12)
    assert torch.allclose(lorentz.inner(out, out), torch.full((7,), -k, dtype=torch.float64), rtol=1e-12)
    # by associativity the per-head output is the implicit focused map times the values' spatial parts
    fmap = attention.attention_map(q, kk, "focused", k=k, power=3.0, norm_scale=0.7)
    assert torch.allclose(attention.focused_linear_attention(q, kk, v, power=3.0, norm_scale=0.7, k=k),
                          fmap @ v[..., 1:], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [1.0, 2.0])
def test_the_full_map_is_the_distance_softmax_at_k_scale_over_2_with_centroids(k):
    layer = _layer("full", k)
    x, src = _points(6, 5, k, 2), _points(9, 5, k, 3)
    q, kk, v = _qkv(layer, x, src)
    att = attention.attention_map(q, kk, "distance", k=k, temperature=k * 1.7 / 2)  # the bias 0.3 cancels
    logits = (2 + 2 * layer.manifold.cinner(q, kk)) / layer.scale + layer.bias
    assert torch.allclose(torch.softmax(logits, dim=-1), att, rtol=1e-10, atol=1e-14)
    expected = toymodel.centroid(toymodel.centroid(att @ v, k=k).mean(dim=0), k=k)
    out = layer(x, src)
    assert torch.allclose(out, expected, rtol=1e-10, atol=1e-12)
    assert torch.allclose(lorentz.inner(out, out), torch.full((6,), -k, dtype=torch.float64), rtol=1e-12)
    assert bool((out[:, 0] > 0).all())


def test_cinner_is_the_lorentzian_inner_product_over_k():
    x, y = _points(4, 3, 2.0, 4), _points(5, 3, 2.0, 5)
    assert torch.allclose(toymodel.Manifold(k=2.0).cinner(x, y), lorentz.pairwise_inner(x, y) / 2.0, rtol=1e-12)


def test_capture_recognises_both_layer_types_without_arguments():
    x = torch.eye(10, dtype=torch.float64)
    focused = toymodel.ToyHypformer(10, 4, 2, heads=2, k=2.0, attention_type="linear_focused", layers=2, power_k=3.0)
    full = toymodel.ToyHypformer(10, 3, 2, heads=3, k=2.0, attention_type="full")
    with torch.no_grad():
        full.blocks[0].scale.fill_(1.3)
    for model, mode, kind, heads in ((focused, "linear_focused", "focused", 2), (full, "full", "distance", 3)):
        with torch.no_grad(), capture.attention(model) as cap:
            out = model(x)
        assert out.shape == (10, 2)
        assert [r.name for r in cap.layers] == [f"blocks.{i}" for i in range(len(model.blocks))]
        for rec, block in zip(cap.layers, model.blocks):
            assert (rec.mode, rec.kind, rec.n_heads, rec.k) == (mode, kind, heads, 2.0)
            assert rec.values is not None and rec.values.shape == rec.keys.shape
            if mode == "full":  # tau = k scale / 2, measured from the layer's own cinner
                assert rec.temperature == pytest.approx(2.0 * block.scale.item() / 2, rel=1e-12)
            else:
                assert (rec.power, rec.norm_scale) == (3.0, block.norm_scale.item())
        rec = cap.layers[0]
        h0 = toymodel.lift(model.embed(x), k=2.0).detach()
        assert torch.equal(rec.queries, torch.stack([w(h0) for w in model.blocks[0].Wq]).detach())
    assert cap.layers[0].temperature == pytest.approx(1.3, rel=1e-12)


def test_training_lowers_the_loss_deterministically_and_leaves_the_global_rng_alone():
    x = torch.eye(12, dtype=torch.float64)
    y = torch.tensor([0] * 6 + [1] * 6)
    for mode in ("linear_focused", "full"):
        state = torch.get_rng_state()
        model = toymodel.ToyHypformer(12, 4, 2, heads=2, attention_type=mode)
        assert torch.equal(torch.get_rng_state(), state)
        losses = toymodel.train(model, x, y, steps=40, lr=0.02, seed=3)
        assert len(losses) == 41 and all(math.isfinite(v) for v in losses)
        assert losses[0] == pytest.approx(math.log(2), abs=0.1)  # two balanced classes, small initial logits
        assert losses[-1] < 0.5 * losses[0]
        assert toymodel.train(model, x, y, steps=40, lr=0.02, seed=3) == losses  # same seed, same run
        fresh = toymodel.ToyHypformer(12, 4, 2, heads=2, attention_type=mode, seed=3)
        assert toymodel.train(fresh, x, y, steps=40, lr=0.02, seed=None) == losses  # built from seed 3 = reset to 3
        assert all(p.dtype == torch.float64 for p in model.parameters())


def test_bad_attention_type_and_cross_attention_in_focused_mode_are_refused():
    with pytest.raises(ValueError, match="attention_type"):
        toymodel.HypAttention(3, 3, 1, k=1.0, attention_type="softmax")
    layer = _layer("linear_focused", 1.0, d_in=3)
    with pytest.raises(ValueError, match="N = M"):
        layer(_points(4, 3, 1.0, 0), _points(5, 3, 1.0, 1))


@pytest.mark.parametrize("attention_type", ["linear_focused", "full"])
@pytest.mark.parametrize("k", [0.5, 2.0])
def test_captured_toy_layers_verify_themselves(attention_type, k):
    model = toymodel.ToyHypformer(6, 4, 3, heads=3, k=k, attention_type=attention_type, layers=2).eval()
    x = torch.randn(15, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with capture.attention(model) as cap:
        model(x)
    assert len(cap.layers) == 2
    for r in cap.layers:  # the self term v_map_mlp(V_s) of the focused layers included
        assert r.verify_note.startswith("verified") and r.verify_error < 1e-13 and r.training is False


def test_dropout_between_layers_only_in_train_mode():
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got 1.5"):
        toymodel.ToyHypformer(6, 4, 3, dropout=1.5)
    x = torch.randn(15, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    plain, dropped = toymodel.ToyHypformer(6, 4, 3, layers=2), toymodel.ToyHypformer(6, 4, 3, layers=2, dropout=0.3)
    torch.testing.assert_close(plain.eval()(x), dropped.eval()(x), rtol=0, atol=0)  # same draws, eval: identical
    torch.manual_seed(0)
    assert not torch.allclose(plain.train()(x), dropped.train()(x))
