"""hypviz.capture: recording a hyperbolic transformer's attention with forward hooks.

The Hypformer-style layer is the stand-in of ``tests/_standin.py`` (written from the maths); the
records are checked against what the layer itself computes.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch import nn

from hypviz import attention as att
from hypviz import capture
from hypviz import lorentz as L

from _standin import Encoder, StandInAttention, lifted_input


def n_hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def make(mode: str, heads: int, k: float, *, dtype=torch.float64, seed: int = 0, n_layers: int = 1, **kw) -> Encoder:
    torch.manual_seed(seed)
    d_in, d = 5, 4
    layers = [StandInAttention(d_in if i == 0 else d + 1, d, heads, k, mode, **kw) for i in range(n_layers)]
    return Encoder(layers).to(dtype)


def capture_one(model: nn.Module, x: torch.Tensor, **kw) -> tuple[torch.Tensor, list[capture.LayerRecord]]:
    with capture.attention(model, **kw) as cap:
        out = model(x)
    return out, cap.layers


# --------------------------------------------------------------------------- #
# Hypformer-style layers, recognised by structure
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("k", [1.0, 2.0])
def test_focused_records_reproduce_the_layer_output(heads, k):
    model = make("linear_focused", heads, k, power_k=3.0, norm_scale=0.6)
    x = lifted_input(12, 4, k, dtype=torch.float64)
    out, recs = capture_one(model, x)
    assert len(recs) == 1
    rec = recs[0]
    assert (rec.name, rec.call, rec.mode, rec.kind) == ("blocks.0", 0, "linear_focused", "focused")
    assert rec.queries.shape == (heads, 12, 5) and rec.keys.shape == (heads, 12, 5) and rec.values.shape == (heads, 12, 5)
    assert (rec.n_heads, rec.n_queries, rec.n_keys, rec.dim) == (heads, 12, 12, 4)
    assert rec.k == k and rec.power == 3.0 and rec.norm_scale == pytest.approx(0.6) and rec.temperature is None
    for t in (rec.queries, rec.keys, rec.values):
        L.check_points(t, k=k)
        assert t.device.type == "cpu" and not t.requires_grad and t.dtype == torch.float64
    # the heads are the per-head maps' outputs, heads first
    layer = model.blocks[0]
    for h in range(heads):
        torch.testing.assert_close(rec.queries[h], layer.Wq[h](x).detach(), rtol=0, atol=0)
        torch.testing.assert_close(rec.keys[h], layer.Wk[h](x).detach(), rtol=0, atol=0)
    spatial = att.focused_linear_attention(
        rec.queries, rec.keys, rec.values, power=rec.power, norm_scale=rec.norm_scale, k=rec.k, eps=1e-6
    ).mean(dim=0)
    torch.testing.assert_close(spatial, out[:, 1:].detach(), rtol=1e-10, atol=1e-12)


def test_focused_float32_and_values_from_the_source_input():
    # no Wv (use_weight False): the values are the layer's source input, repeated per head
    model = make("linear_focused", 3, 2.0, dtype=torch.float32, use_weight=False)
    assert not hasattr(model.blocks[0], "Wv")
    x = lifted_input(10, 4, 2.0, dtype=torch.float32)
    out, (rec,) = capture_one(model, x)
    assert rec.values.dtype == torch.float32 and rec.values.shape == (3, 10, 5)
    assert torch.equal(rec.values, x.expand(3, 10, 5))
    spatial = att.focused_linear_attention(
        rec.queries, rec.keys, rec.values, power=rec.power, norm_scale=rec.norm_scale, k=rec.k, eps=1e-6
    ).mean(dim=0)
    torch.testing.assert_close(spatial, out[:, 1:].detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("k", [1.0, 2.0])
def test_full_records_reproduce_the_layer_softmax(heads, k):
    model = make("full", heads, k, scale_factor=1.3, bias=0.4)
    layer = model.blocks[0]
    x = lifted_input(9, 4, k, dtype=torch.float64)
    out, (rec,) = capture_one(model, x)
    assert (rec.mode, rec.kind, rec.power, rec.norm_scale) == ("full", "distance", None, None)
    assert rec.temperature == pytest.approx(k * float(layer.scale.detach()) / 2)
    assert rec.queries.shape == (heads, 9, 5) and rec.values.shape == (heads, 9, 5)
    p = att.attention_map(rec.queries, rec.keys, "distance", k=rec.k, temperature=rec.temperature)
    assert layer.last_attention.shape == (heads, 9, 9)
    torch.testing.assert_close(p, layer.last_attention, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(rec.attention_map(), p, rtol=0, atol=0)
    L.check_points(out.detach(), k=k)


def test_full_temperature_follows_the_layers_own_cinner():
    # Hypformer's simplified tree: cinner is <q, kappa>_L itself (no 1/k), so tau = scale / 2 for any k
    k = 2.5
    model = make("full", 2, k, scale_factor=1.1, cinner_divides_by_k=False)
    layer = model.blocks[0]
    x = lifted_input(8, 4, k, dtype=torch.float64)
    _, (rec,) = capture_one(model, x)
    assert rec.temperature == pytest.approx(float(layer.scale.detach()) / 2)
    p = att.attention_map(rec.queries, rec.keys, "distance", k=rec.k, temperature=rec.temperature)
    torch.testing.assert_close(p, layer.last_attention, rtol=1e-10, atol=1e-13)


def test_full_float32_map():
    model = make("full", 2, 1.0, dtype=torch.float32, scale_factor=0.5)
    x = lifted_input(16, 4, 1.0, dtype=torch.float32)
    _, (rec,) = capture_one(model, x)
    assert rec.queries.dtype == torch.float32
    torch.testing.assert_close(rec.attention_map(), model.blocks[0].last_attention, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["linear_focused", "full"])
@pytest.mark.parametrize("grad", [True, False])
def test_outputs_and_gradients_are_unchanged(mode, grad):
    model = make(mode, 3, 2.0, dtype=torch.float32, n_layers=2)
    x = lifted_input(11, 4, 2.0)
    with torch.set_grad_enabled(grad):
        plain = model(x)
        if grad:
            plain.square().sum().backward()
            g_plain = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
            model.zero_grad()
        with capture.attention(model) as cap:
            hooked = model(x)
        assert torch.equal(plain, hooked)
        if grad:
            hooked.square().sum().backward()
            for a, b in zip(g_plain, (p.grad for p in model.parameters())):
                assert (a is None and b is None) or torch.equal(a, b)
    assert [r.name for r in cap.layers] == ["blocks.0", "blocks.1"]
    assert all(not r.queries.requires_grad and not r.keys.requires_grad for r in cap.layers)


def test_hooks_are_removed_on_exit_and_on_an_exception():
    model = make("full", 2, 1.0, n_layers=2)
    x = lifted_input(6, 4, dtype=torch.float64)
    assert n_hooks(model) == 0
    with capture.attention(model) as cap:
        assert n_hooks(model) > 0
        model(x)
    assert n_hooks(model) == 0 and len(cap.layers) == 2
    with pytest.raises(RuntimeError, match="boom"):
        with capture.attention(model) as cap2:
            model(x)
            raise RuntimeError("boom")
    assert n_hooks(model) == 0 and cap2.layers == []
    # after capture the model runs as before and nothing is recorded
    model(x)
    assert len(cap.layers) == 2


def test_several_calls_get_call_indices():
    model = make("linear_focused", 2, 1.0, n_layers=2)
    x = lifted_input(7, 4, dtype=torch.float64)
    with capture.attention(model) as cap:
        model(x)
        model(x[:5])
    assert [(r.name, r.call) for r in cap.layers] == [("blocks.0", 0), ("blocks.1", 0), ("blocks.0", 1), ("blocks.1", 1)]
    assert cap.layers[2].n_queries == 5 and len(cap) == 4
    # the same layer twice in one forward, and a bare layer as the model: its name is ""
    layer = StandInAttention(5, 3, 2, 1.0, "full").double()
    with capture.attention(layer) as cap:
        layer(x, x)
        layer(x[:3], x)  # 3 queries, 7 keys
    assert [(r.name, r.call, r.n_queries, r.n_keys) for r in cap.layers] == [("", 0, 7, 7), ("", 1, 3, 7)]


def test_restrict_to_named_layers_and_k_agreement():
    model = make("full", 2, 2.0, n_layers=2)
    x = lifted_input(6, 4, 2.0, dtype=torch.float64)
    _, recs = capture_one(model, x, layers=["blocks.1"], k=2.0)
    assert [r.name for r in recs] == ["blocks.1"]
    with pytest.raises(ValueError, match=r"k=1 was given but the layer's manifold.k is 2"):
        with capture.attention(model, k=1.0):
            pass
    with pytest.raises(ValueError, match="'blocks' .* is not a Hypformer-style layer"):
        capture.attention(model, layers=["blocks"])


# --------------------------------------------------------------------------- #
# files
# --------------------------------------------------------------------------- #
def test_save_load_round_trip(tmp_path):
    model = nn.Sequential(make("linear_focused", 3, 2.0).blocks[0])
    full = make("full", 1, 2.0).blocks[0]
    x = lifted_input(8, 4, 2.0, dtype=torch.float64)
    with capture.attention(model) as cap:
        model[0](x, x)
    with capture.attention(full) as cap_full:
        full(x, x)
    path = tmp_path / "att.pt"
    assert cap.save(path) == path
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == "hypviz.capture" and raw["version"] == 1 and len(raw["layers"]) == 1
    assert os.listdir(tmp_path) == ["att.pt"]  # the temporary file is gone
    (back,) = capture.load(path)
    (orig,) = cap.layers
    for f in ("name", "call", "k", "mode", "kind", "power", "norm_scale", "temperature"):
        assert getattr(back, f) == getattr(orig, f)
    for f in ("queries", "keys", "values"):
        assert torch.equal(getattr(back, f), getattr(orig, f))
    # overwriting is atomic too, and a full-mode record (no power) round-trips
    cap_full.save(str(path))
    (b2,) = capture.load(str(path))
    assert (b2.kind, b2.power, b2.temperature) == ("distance", None, cap_full.layers[0].temperature)
    assert isinstance(capture.LayerRecord.from_dict(b2.to_dict()), capture.LayerRecord)
    assert "LayerRecord(''" in repr(b2)


def test_load_refuses_bad_files(tmp_path):
    good = capture.LayerRecord(
        name="a", queries=L.lift(torch.randn(1, 3, 2)), keys=L.lift(torch.randn(1, 4, 2)), values=None,
        k=1.0, mode="generic", kind="spatial", temperature=1.0,
    )
    cases = {
        "missing.pt": None,
        "garbage.pt": b"not a torch file",
        "other.pt": {"a": torch.zeros(2)},
        "newer.pt": {"format": "hypviz.capture", "version": 2, "layers": []},
        "nolist.pt": {"format": "hypviz.capture", "version": 1, "layers": {}},
        "short.pt": {"format": "hypviz.capture", "version": 1, "layers": [{"name": "a"}]},
        "off.pt": {"format": "hypviz.capture", "version": 1, "layers": [dict(good.to_dict(), k=2.0)]},
        "shape.pt": {"format": "hypviz.capture", "version": 1, "layers": [dict(good.to_dict(), keys=torch.zeros(3, 3))]},
    }
    messages = {
        "missing.pt": "no such file",
        "garbage.pt": "cannot read it with torch.load",
        "other.pt": "not a hypviz.capture file",
        "newer.pt": "version 2 is newer",
        "nolist.pt": "'layers' must be a list",
        "short.pt": "record 0: .*missing queries",
        "off.pt": "record 0: layer 'a' \\(call 0\\) queries: points are off the hyperboloid",
        "shape.pt": "record 0: .*keys: expected shape \\(H, M, d \\+ 1\\)",
    }
    for name, content in cases.items():
        p = tmp_path / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif content is not None:
            torch.save(content, p)
        with pytest.raises(ValueError, match=messages[name]) as info:
            capture.load(p)
        assert "\n" not in str(info.value)
    capture.save([good], tmp_path / "good.pt")
    assert capture.load(tmp_path / "good.pt")[0].kind == "spatial"


# --------------------------------------------------------------------------- #
# any other model: name the modules
# --------------------------------------------------------------------------- #
class Proj(nn.Module):
    """``(N, d_in) -> `` points of ``heads`` heads in a chosen layout, or Poincare-ball points."""

    def __init__(self, d_in: int, d: int, heads: int, k: float, layout: str):
        super().__init__()
        self.linear = nn.Linear(d_in, heads * d)
        self.heads, self.d, self.k, self.layout = heads, d, k, layout

    def spatial(self, x: torch.Tensor) -> torch.Tensor:  # (N, H, d)
        return self.linear(x).reshape(x.shape[0], self.heads, self.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xs = self.spatial(x)
        if self.layout == "raw":  # not points: no time coordinate recomputed
            return torch.cat([torch.ones_like(xs[..., :1]), xs], dim=-1).transpose(0, 1)
        pts = L.lift(xs, k=self.k)  # (N, H, d + 1)
        if self.layout == "poincare":
            return L.to_poincare(pts, k=self.k).transpose(0, 1)  # (H, N, d)
        if self.layout == "NHD":
            return pts
        pts = pts.transpose(0, 1)  # (H, N, d + 1)
        return pts[0] if self.heads == 1 and self.layout == "single" else pts


class Block(nn.Module):
    def __init__(self, heads: int, k: float, layout: str, d_in: int = 5, d: int = 3):
        super().__init__()
        self.q, self.k, self.v = (Proj(d_in, d, heads, k, layout) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x).sum() + self.k(x).mean() * self.v(x).std()


class Net(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.enc = nn.ModuleList([Block(**kw), Block(**kw)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(b(x) for b in self.enc)


NAMES = {"enc.0": ("enc.0.q", "enc.0.k", "enc.0.v"), "enc.1": ("enc.1.q", "enc.1.k")}


@pytest.mark.parametrize(
    "layout, heads, heads_axis", [("single", 1, None), ("HND", 3, None), ("NHD", 3, 1), ("NHD", 2, -2)]
)
def test_generic_layers_by_name(layout, heads, heads_axis):
    torch.manual_seed(1)
    net = Net(heads=heads, k=2.0, layout=layout).double()
    x = torch.randn(6, 5, dtype=torch.float64)
    plain = net(x)
    with capture.attention(net, NAMES, k=2.0, heads_axis=heads_axis) as cap:
        hooked = net(x)
    assert torch.equal(plain, hooked) and n_hooks(net) == 0
    assert [(r.name, r.call, r.mode, r.kind) for r in cap.layers] == [
        ("enc.0", 0, "generic", "distance"),
        ("enc.1", 0, "generic", "distance"),
    ]
    r0, r1 = cap.layers
    assert r0.queries.shape == (heads, 6, 4) and r0.values.shape == (heads, 6, 4) and r1.values is None
    assert r0.temperature == pytest.approx(math.sqrt(3)) and r0.k == 2.0
    expect = L.lift(net.enc[0].q.spatial(x).detach().transpose(0, 1), k=2.0)
    torch.testing.assert_close(r0.queries, expect, rtol=0, atol=0)


def test_generic_kind_options_and_leading_axes():
    torch.manual_seed(2)
    net = Net(heads=2, k=1.0, layout="HND")
    x = torch.randn(4, 5)
    with capture.attention(net, {"a": ("enc.0.q", "enc.0.k")}, k=1.0, kind="focused", power=3.0, norm_scale=0.5) as cap:
        net(x)
        net(x)
    assert [(r.name, r.call) for r in cap.layers] == [("a", 0), ("a", 1)]
    r = cap.layers[0]
    assert (r.kind, r.power, r.norm_scale, r.temperature) == ("focused", 3.0, 0.5, None)
    torch.testing.assert_close(r.attention_map().sum(-1), torch.ones(2, 4), rtol=1e-5, atol=1e-5)
    with capture.attention(net, {"a": ("enc.0.q", "enc.0.k")}, k=1.0, kind="spatial", temperature=0.7) as cap:
        net(x)
    assert cap.layers[0].temperature == pytest.approx(0.7)

    class Batched(nn.Module):  # (B, H, N, d + 1): the leading axes are folded into the heads
        def forward(self, x):
            return L.lift(x, k=1.0)

    m = nn.Module()
    m.q, m.k = Batched(), Batched()
    with capture.attention(m, {"att": ("q", "k")}, k=1.0) as cap:
        m.q(torch.randn(2, 3, 5, 4))
        m.k(torch.randn(2, 3, 6, 4))
    assert cap.layers[0].queries.shape == (6, 5, 5) and cap.layers[0].keys.shape == (6, 6, 5)
    # (B, N, H, d + 1) with heads_axis=2: heads first, the batch axis folded into them
    pts = L.lift(torch.randn(2, 5, 3, 4), k=1.0)
    with capture.attention(m, {"att": ("q", "k")}, k=1.0, heads_axis=2) as cap:
        m.q(pts[..., 1:])
        m.k(pts[..., 1:])
    assert torch.equal(cap.layers[0].queries, pts.permute(2, 0, 1, 3).reshape(6, 5, 5))


@pytest.mark.parametrize("k", [1.0, 2.0])
def test_poincare_outputs_are_mapped_to_the_hyperboloid(k):
    torch.manual_seed(3)
    net = Net(heads=2, k=k, layout="poincare").double()
    x = 0.5 * torch.randn(7, 5, dtype=torch.float64)
    with capture.attention(net, {"enc.0": ("enc.0.q", "enc.0.k", "enc.0.v")}, k=k, model="poincare") as cap:
        net(x)
    (r,) = cap.layers
    assert r.queries.shape == (2, 7, 4)
    blk = net.enc[0]
    for got, proj in ((r.queries, blk.q), (r.keys, blk.k), (r.values, blk.v)):
        expect = L.lift(proj.spatial(x).detach().transpose(0, 1), k=k)
        torch.testing.assert_close(got, expect, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- #
# errors: one line each, saying what was wrong and what was expected
# --------------------------------------------------------------------------- #
def one_line(info) -> str:
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_error_messages():
    net = Net(heads=1, k=1.0, layout="single")
    x = torch.randn(3, 5)
    with pytest.raises(ValueError, match="k is required when layers= names the modules") as info:
        capture.attention(net, NAMES)
    one_line(info)
    with pytest.raises(ValueError, match=r"no module named 'enc.0.qq' in the model; close matches: 'enc.0.q'") as info:
        capture.attention(net, {"enc.0": ("enc.0.qq", "enc.0.k")}, k=1.0)
    one_line(info)
    with pytest.raises(ValueError, match="expected a tuple \\(queries module, keys module"):
        capture.attention(net, {"enc.0": "enc.0.q"}, k=1.0)
    with pytest.raises(ValueError, match="model='poincare' only applies to modules named with layers="):
        capture.attention(net, model="poincare")
    with pytest.raises(ValueError, match="model must be 'lorentz'"):
        capture.attention(net, NAMES, k=1.0, model="klein")
    with pytest.raises(ValueError, match="kind must be one of"):
        capture.attention(net, NAMES, k=1.0, kind="not-a-kind")  # a name the registry refuses: never a kind
    with pytest.raises(TypeError, match="expected a torch.nn.Module"):
        capture.attention(lambda t: t)
    # nothing recognised: raised on exit, saying what was looked for and how to name modules
    nothing = r"no attention layer recognised in the Net \(looked for submodules with Wq and Wk"
    with pytest.raises(ValueError, match=nothing) as info:
        with capture.attention(net):
            net(x)
    assert "layers={'enc.0': ('enc.0.q', 'enc.0.k')}" in one_line(info) and n_hooks(net) == 0
    # off the hyperboloid: generic (hint about model='poincare') and a Hypformer-style layer of the wrong k
    raw = Net(heads=2, k=1.0, layout="raw")
    off = r"layer 'enc.0' \(call 0\) queries \(module 'enc.0.q'\): points are off the hyperboloid"
    with pytest.raises(ValueError, match=off) as info:
        with capture.attention(raw, NAMES, k=1.0):
            raw(x)
    assert "model='poincare'" in one_line(info) and n_hooks(raw) == 0
    wrong_k = make("full", 2, 2.0, lift_k=1.0)
    off = r"layer 'blocks.0' \(call 0\) queries: points are off the hyperboloid .*k=2"
    with pytest.raises(ValueError, match=off) as info:
        with capture.attention(wrong_k):
            wrong_k(lifted_input(5, 4, 2.0, dtype=torch.float64))
    one_line(info)
    # Poincare points outside the ball, and modules that ran unequal numbers of times
    ball = Net(heads=1, k=1.0, layout="single")
    with pytest.raises(ValueError, match=r"layer 'enc.0' \(call 0\) queries .*inside the ball"):
        with capture.attention(ball, {"enc.0": ("enc.0.q", "enc.0.k")}, k=0.01, model="poincare"):
            ball(10 * x)
    unequal = r"ran unequal numbers of times \(queries module 'enc.0.q' 2 times, keys module 'enc.0.k' 1 times\)"
    with pytest.raises(ValueError, match=unequal):
        with capture.attention(ball, {"enc.0": ("enc.0.q", "enc.0.k")}, k=1.0):
            ball.enc[0].q(x)
            ball.enc[0].q(x)
            ball.enc[0].k(x)
    unknown = make("full", 1, 1.0)
    unknown.blocks[0].attention_type = "sparse"
    with pytest.raises(ValueError, match="attention_type 'sparse'; capture knows 'linear_focused' and 'full'"):
        with capture.attention(unknown):
            pass
    assert n_hooks(unknown) == 0
    cap = capture.attention(net, NAMES, k=1.0)
    with pytest.raises(ValueError, match="none of them ran inside the with block"):  # nothing recorded: said, not saved
        with cap:
            pass
    with pytest.raises(ValueError, match="already recorded"):
        with cap:
            pass


# --------------------------------------------------------------------------- #
# the capture checks itself, and the edges real users hit
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("mode", ["linear_focused", "full"])
@pytest.mark.parametrize("dtype, bound", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_every_record_verified_against_the_layers_output(mode, dtype, bound):
    model = make(mode, 3, 2.0, dtype=dtype, n_layers=2)
    _, recs = capture_one(model, lifted_input(10, 4, 2.0, dtype=dtype))
    assert len(recs) == 2
    for r in recs:
        assert r.verify_note.startswith("verified") and r.verify_error <= bound
        assert r.verify_tolerance == pytest.approx(math.sqrt(torch.finfo(dtype).eps))
        assert r.dtype == str(dtype).replace("torch.", "") and r.training is True


def _fork_full(model):
    """The layer's full logits divided by 2 scale instead of scale: a fork whose attributes mislead."""
    layer = model.blocks[0]
    original = layer.full

    def full(q, kk, v):
        with torch.no_grad():
            layer.scale.mul_(2.0)
        try:
            return original(q, kk, v)
        finally:
            with torch.no_grad():
                layer.scale.div_(2.0)

    layer.full = full
    return layer


def test_a_fork_with_logits_over_twice_the_scale_is_not_verified_and_named():
    # the attributes give tau: the record is judged at it, never at a fitted one; the note names the tau that fits
    model = make("full", 2, 2.0)
    _fork_full(model)
    x = lifted_input(12, 4, 2.0, dtype=torch.float64)
    with pytest.warns(UserWarning, match="recorded not verified, at the attributes' tau"):
        _, (rec,) = capture_one(model, x)
    scale = float(model.blocks[0].scale.detach())
    assert rec.temperature == pytest.approx(scale, rel=1e-12)  # tau = k scale / 2, the attributes', kept
    assert rec.temperature_source == "attributes" and rec.verify_note.startswith("not verified")
    assert f"its output is reproduced at tau = {2.0 * scale:.4g}" in rec.verify_note  # k (2 scale) / 2, measured
    assert rec.checked_output is None and rec.digests is None  # nothing to re-check: never verified later


def test_bfloat16_capture_stored_float32_with_its_dtype_and_analysed():
    from hypviz.reports import model_report

    model = make("full", 2, 1.0, dtype=torch.bfloat16)
    _, (rec,) = capture_one(model, lifted_input(10, 4, 1.0, dtype=torch.bfloat16))
    assert rec.dtype == "bfloat16" and rec.queries.dtype == torch.float32
    L.check_points(rec.queries, k=1.0)  # time recomputed: on the hyperboloid in float32
    assert rec.verify_note.startswith("verified") and rec.verify_error <= math.sqrt(2.0**-7)
    ref = att.attention_map(rec.queries.double(), rec.keys.double(), "distance", k=1.0, temperature=rec.temperature)
    assert rec.attention_map().dtype == torch.float32
    assert float((rec.attention_map().double() - ref).abs().max()) < 1e-5  # not computed in bf16
    (lr,) = model_report.analyse([rec], device="cpu", progress=False)
    assert lr.thread.verdict in att.VERDICTS


def test_negative_scale_recorded_and_reported_not_a_blocker(tmp_path):
    from hypviz.reports import model_report

    model = make("full", 2, 1.0)
    with torch.no_grad():
        model.blocks[0].scale.fill_(-1.5)
    _, (rec,) = capture_one(model, lifted_input(10, 4, 1.0, dtype=torch.float64))
    assert rec.scale_sign == -1 and rec.temperature == pytest.approx(0.75)
    assert rec.verify_note.startswith("verified")
    (lr,) = model_report.analyse([rec], device="cpu", progress=False)
    assert lr.own is not None  # the reversed softmax is not the distance reference: compared
    assert "(scale < 0)" in model_report.summary([lr], tmp_path, ["report.html"])


def test_train_mode_with_dropout_warns_and_is_recorded():
    model = make("full", 2, 1.0)
    model.drop = nn.Dropout(0.1)
    x = lifted_input(10, 4, 1.0, dtype=torch.float64)
    with pytest.warns(UserWarning, match="train mode with dropout active"):
        _, (rec,) = capture_one(model.train(), x)
    assert rec.training is True
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, (rec,) = capture_one(model.eval(), x)
    assert rec.training is False


def test_compiled_model_is_captured():
    model = make("full", 2, 1.0)
    x = lifted_input(10, 4, 1.0, dtype=torch.float64)
    _, eager = capture_one(model, x)
    compiled = torch.compile(model, backend="eager")
    compiled(x)
    _, recs = capture_one(compiled, x)
    assert [r.name for r in recs] == ["blocks.0"] and recs[0].verify_note.startswith("verified")
    torch.testing.assert_close(recs[0].queries, eager[0].queries, rtol=0, atol=0)
    compiled(x)  # the stance is restored: the compiled model runs as before
    assert n_hooks(model) == 0


def test_save_wants_the_extension_the_cli_reads_and_expands_home(tmp_path, monkeypatch):
    model = make("full", 1, 1.0)
    with capture.attention(model) as cap:
        model(lifted_input(6, 4, 1.0, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"must end in \.pt or \.pth .* got '\.capture'"):
        cap.save(tmp_path / "att.capture")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cap.save("~/att.pt") == tmp_path / "att.pt"
    assert capture.load("~/att.pt")[0].verify_note == cap.layers[0].verify_note
    with pytest.raises(ValueError, match="no layer records to save"):
        capture.save([], tmp_path / "empty.pt")


def _cli(capsys, *args):
    from hypviz import cli

    code = cli.main([os.fspath(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_on_a_capture_file_reports_verification_and_refuses_what_does_not_apply(tmp_path, capsys):
    focused, full = make("linear_focused", 2, 1.0), make("full", 2, 1.0)
    x = lifted_input(8, 4, 1.0, dtype=torch.float64)
    for name, model in (("focused", focused), ("full", full)):
        with capture.attention(model.eval()) as cap:
            model(x)
        cap.save(tmp_path / f"{name}.pt")
    code, out, err = _cli(capsys, "compare", tmp_path / "focused.pt", "--device", "cpu", "--out", tmp_path / "r1")
    assert code == 0, err
    layer_line = out.splitlines()[1]
    assert "verified (error <= 1.5e-08, sqrt(eps) of float64)" in layer_line and "eval" in layer_line
    assert "hypviz default sqrt(d)" in layer_line
    assert "verified (error)" in (tmp_path / "r1" / "report.html").read_text()
    for opts, named in ((["--k", "2"], "--k"), (["--kinds", "distance"], "--kinds"), (["--power", "3"], "--power"),
                        (["--reference", "spatial", "--norm-scale", "2"], "--reference, --norm-scale")):
        code, out, err = _cli(capsys, "compare", tmp_path / "full.pt", *opts, "--out", tmp_path / "r2")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert f"{named}: not for a capture file" in err and not (tmp_path / "r2").exists()
    code, out, err = _cli(capsys, "compare", tmp_path / "full.pt", "--temperature", "2", "--out", tmp_path / "r3")
    assert code == 2 and "--temperature: every layer of full.pt records its own temperature" in err
    code, out, err = _cli(capsys, "compare", tmp_path / "full.pt", tmp_path / "full.pt", "--out", tmp_path / "r4")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "is a capture file" in err and "pass the capture file alone: hypviz compare" in err
