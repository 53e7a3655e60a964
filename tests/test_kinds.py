"""The harness every registered attention kind passes, and a kind registered at run time.

For each kind of :mod:`hypviz.base.kinds`: its dense map against a float64 reference written here from
its formula (not from its kernel); for the comparable kinds, ``compare`` streamed against the dense maps
on every path (one product, two products, the dense rows), the rounding bound of its logits against the measured error,
where the softmax-gap bound applies and that it holds, the command and its report.  A kind without one
of these pieces fails by name.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from hypviz import attention as att
from hypviz import data
from hypviz import lorentz as L
from hypviz.attention.maps import kernels
from hypviz.base import kinds
from hypviz.cli import main as cli_main

D, K, TAU = 6, 1.5, 2.0


def _sqdist(q, kk, k):
    return (-2.0 * k - 2.0 * L.pairwise_inner(q, kk)).clamp_min(0.0)


def _focused(q, kk, k, tau, o):
    def phi(x):
        y = torch.relu(x[..., 1:]) + 1e-6
        return y.norm(dim=-1, keepdim=True) * y ** o["power"] / (y ** o["power"]).norm(dim=-1, keepdim=True)
    w = phi(q) @ phi(kk).T
    return w / w.sum(-1, keepdim=True)


def _bilinear(bias, constant):
    def ref(q, kk, k, tau, o):  # -1/2 |q - kappa|^2_L + c q_t kappa_t - o k, over tau
        s = -0.5 * _sqdist(q, kk, k) + bias * q[:, :1] * kk[:, :1].T - constant * k
        return torch.softmax(s / tau, dim=-1)
    return ref


#: Float64 references, from each kind's formula.  ``distance_rf`` and ``distance_topk`` estimate the distance map: their
#: reference is that map, met to a quarter of the map's own distance from uniform.
REFERENCES = {
    "spatial": lambda q, kk, k, tau, o: torch.softmax(q[:, 1:] @ kk[:, 1:].T / tau, dim=-1),
    "distance": lambda q, kk, k, tau, o: torch.softmax(-0.5 * _sqdist(q, kk, k) / tau, dim=-1),
    "lorentz": lambda q, kk, k, tau, o: torch.softmax(L.pairwise_inner(q, kk) / tau, dim=-1),
    "focused": _focused,
    "distance_rf": lambda q, kk, k, tau, o: torch.softmax(-0.5 * _sqdist(q, kk, k) / tau, dim=-1),
    "distance_topk": lambda q, kk, k, tau, o: torch.softmax(-0.5 * _sqdist(q, kk, k) / tau, dim=-1),
    "sigmoid": lambda q, kk, k, tau, o: torch.sigmoid(-0.5 * _sqdist(q, kk, k) / tau + o["bias"]),
    "poincare": lambda q, kk, k, tau, o: torch.softmax(
        -math.sqrt(k) * torch.acosh(1.0 + _sqdist(q, kk, k) / (2.0 * k)) / tau, dim=-1),
}
ESTIMATES = {"distance_rf", "distance_topk"}
OPTIONS = {"power": 2.5, "norm_scale": 3.0, "features": 4096, "seed": 3, "bias": -0.4}


def _points(n, r, seed, k=K):
    return data.lifted_gaussian(n, D, r, k=k, seed=seed, dtype=torch.float64)


@pytest.fixture(scope="module")
def qk():
    return _points(24, 0.6, 1), _points(40, 0.6, 2)


def _dense(kind, q, kk, **kw):
    return att.attention_map(q, kk, kind, k=K, temperature=TAU, **{n: v for n, v in {**OPTIONS, **kw}.items()
                                                                     if n in kinds.get(kind).options})


def _tv(p, r):
    return 0.5 * (p - r).abs().sum(-1)


def test_every_registered_kind_has_a_reference_here():
    missing = [name for name in kinds.names() if name not in REFERENCES]
    assert not missing, f"kinds registered without a dense float64 reference in tests/test_kinds.py: {missing}"


def test_every_kind_names_a_registered_kernel_and_has_its_texts():
    for name in kinds.names():
        kd = kinds.get(name)
        kernels.kernel_for(kd)  # raises, naming the kind, when its kernel is missing
        for field in ("formula", "title", "plain", "html", "description", "rounding"):
            assert getattr(kd, field).strip(), f"kind {name!r} has no {field}"


@pytest.mark.parametrize("kind", kinds.names())
def test_the_dense_map_is_its_formula(kind, qk):
    q, kk = qk
    ref = REFERENCES[kind](q, kk, K, TAU, OPTIONS)
    got = _dense(kind, q, kk)
    assert got.shape == ref.shape and got.dtype == torch.float64
    if kind in ESTIMATES:
        uniform = torch.full_like(ref, 1.0 / ref.shape[-1])
        assert float(_tv(got, ref).mean()) <= 0.25 * float(_tv(ref, uniform).mean())
    else:
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-13)
    if kinds.get(kind).family != "gate":
        torch.testing.assert_close(got.sum(-1), torch.ones(q.shape[0], dtype=torch.float64), rtol=1e-12, atol=1e-12)


def _compare_every_path(q, kk, a, b):
    opts = {n: OPTIONS[n] for n in ("power", "norm_scale", "features")}
    plan = att.plan_compare(q, kk, a, b, k=K, temperature=TAU, rf_seed=OPTIONS["seed"], device="cpu", **opts)
    paths = ("one_product", "two_products", "dense_rows") if plan.plan.path == "one_product" else ("two_products", "dense_rows")
    return {path: att.run_compare(plan.with_path(path)) for path in paths}


@pytest.mark.parametrize("kind", kinds.comparable())
@pytest.mark.parametrize("other", ["spatial", "distance", "focused"])
def test_the_streamed_compare_is_the_dense_maps(kind, other, qk):
    q, kk = qk
    pa, pb = _dense(kind, q, kk), _dense(other, q, kk)
    uniform = torch.full_like(pa, 1.0 / pa.shape[-1])
    for c in _compare_every_path(q, kk, kind, other).values():
        torch.testing.assert_close(c.tv, _tv(pa, pb), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(c.tv_uniform_a, _tv(pa, uniform), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(c.tv_uniform_b, _tv(pb, uniform), rtol=1e-9, atol=1e-12)
        kl = (pb * (pb.log() - pa.log())).sum(-1)
        torch.testing.assert_close(c.kl, kl, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("kind", kinds.comparable())
@pytest.mark.parametrize("r", [0.3, 3.0])
def test_the_rounding_bound_holds_and_is_not_loose_by_orders(kind, r):
    # the float32 product of float32 operands against the same operands' product in float64
    q, kk = _points(64, r, 5).float(), _points(200, r, 6).float()
    opts = kernels.options(kinds.get(kind), {**{n: OPTIONS[n] for n in ("power", "norm_scale", "seed")}, "features": 256})
    ops = kernels.operands(kind, q[None], kk[None], k=K, temperature=TAU, opts=opts)
    low = ops.logits(ops.A[0], ops.B[0].T, torch.empty(64, 200)).double()
    exact = ops.logits(ops.A[0].double(), ops.B[0].double().T, torch.empty(64, 200, dtype=torch.float64))
    err = (low - exact).abs().amax(-1)
    bound = ops.err[0].double()
    assert bool((err <= bound).all()), f"{kind}: measured {float((err / bound).max()):.3g} x its rounding bound"
    assert float(err.max()) > 0 and float((err / bound).max()) > 1e-3  # a bound 1000x too large would hide errors


@pytest.mark.parametrize("kind", kinds.comparable())
def test_the_softmax_gap_bound_applies_where_the_registry_says(kind, qk):
    q, kk = qk
    for other in kinds.comparable():
        c = att.compare(q, kk, kind, other, k=K, temperature=TAU, device="cpu", features=256)
        if kinds.bound_applies(kind, other):
            assert c.delta is not None and bool(c.bound_met.all()), (kind, other)
            expected = abs(kinds.get(kind).bias - kinds.get(other).bias)
            nk = kk[:, 1:].square().sum(-1)
            spread = float(torch.sqrt(nk.max() + K) - torch.sqrt(nk.min() + K))
            torch.testing.assert_close(c.delta, expected * q[:, 0] * spread / TAU, rtol=1e-9, atol=1e-15)
        else:
            assert c.delta is None and c.bound_met is None, (kind, other)


def _write(tmp_path, q, kk):
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", kk.numpy())


@pytest.mark.parametrize("kind", kinds.comparable())
def test_the_command_and_its_report_take_every_comparable_kind(kind, tmp_path, qk):
    q, kk = qk
    _write(tmp_path, q, kk)
    out = tmp_path / "report"
    reference = "spatial" if kind == "distance" else "distance"  # a kind is not compared with itself
    code = cli_main(["compare", str(tmp_path / "q.npy"), str(tmp_path / "k.npy"), "--k", str(K), "--temperature",
                     str(TAU), "--kinds", kind, "--reference", reference, "--out", str(out), "--device", "cpu",
                     "--no-progress"])
    assert code == 0
    meta = json.loads((out / "metrics.json").read_text())
    assert kind in json.dumps(meta) and (out / "report.html").read_text().count(kind) >= 1


def test_a_kind_that_is_not_comparable_is_refused_by_compare_in_one_line(qk):
    q, kk = qk
    for name in kinds.names():
        if not kinds.get(name).comparable:
            with pytest.raises(ValueError, match=f"b must be one of .*got '{name}'"):
                att.compare(q, kk, "spatial", name)


# --------------------------------------------------------------------------- #
# a kind registered at run time: one entry, no other change
# --------------------------------------------------------------------------- #
@pytest.fixture
def half_bias():
    kind = kinds.register(kinds.Kind(
        name="half_bias", family="softmax", kernel="bilinear", bias=0.5, constant=0.5,
        formula=r"\mathrm{softmax}_j((-\tfrac12\|q - \kappa_j\|_L^2 + \tfrac12 q_t \kappa_{t,j}) / \tau)",
        title=r"half bias: $\mathrm{softmax}_j((-\frac{1}{2}\|q-\kappa_j\|_L^2+\frac{1}{2}q_t\kappa_{t,j})/\tau)$",
        plain="half bias", html="half bias", description="halfway between distance and spatial (a test kind)",
        rounding="as spatial and distance",
    ))
    REFERENCES["half_bias"] = _bilinear(0.5, 0.5)
    yield kind
    kinds.unregister("half_bias")
    del REFERENCES["half_bias"]


def test_a_kind_registered_at_run_time_runs_through_maps_compare_and_the_report(half_bias, qk, tmp_path):
    q, kk = qk
    got = att.attention_map(q, kk, "half_bias", k=K, temperature=TAU)
    torch.testing.assert_close(got, REFERENCES["half_bias"](q, kk, K, TAU, OPTIONS), rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(att.scores(q, kk, "half_bias", k=K),
                               -0.5 * _sqdist(q, kk, K) + 0.5 * q[:, :1] * kk[:, :1].T - 0.5 * K, rtol=1e-10, atol=1e-12)
    for other in ("spatial", "distance"):
        plan = att.plan_compare(q, kk, "half_bias", other, k=K)
        assert plan.plan.path == "one_product" and "share one product" in plan.plan.reason
    for other in ("spatial", "distance", "focused"):
        pb = _dense(other, q, kk)
        results = _compare_every_path(q, kk, "half_bias", other)
        assert set(results) == ({"two_products", "dense_rows"} | ({"one_product"} if other != "focused" else set()))
        for c in results.values():
            torch.testing.assert_close(c.tv, _tv(got, pb), rtol=1e-9, atol=1e-12)
        if other != "focused":  # the bound, with |c_a - c_b| = 1/2
            one, two = results["one_product"], results["two_products"]
            assert one.delta is not None and bool(one.bound_met.all()) and bool(two.bound_met.all())
            torch.testing.assert_close(one.delta, two.delta)
    _write(tmp_path, q, kk)
    code = cli_main(["compare", str(tmp_path / "q.npy"), str(tmp_path / "k.npy"), "--k", str(K), "--kinds",
                     "half_bias,spatial", "--out", str(tmp_path / "r"), "--device", "cpu", "--no-progress"])
    assert code == 0 and "half_bias" in (tmp_path / "r" / "metrics.json").read_text()


def test_a_kind_whose_kernel_is_missing_fails_by_name(qk):
    q, kk = qk
    kinds.register(kinds.Kind(name="no_kernel", family="features", kernel="nowhere", formula="x", title="x", plain="x",
                              html="x", description="x", rounding="x"))
    try:
        with pytest.raises(ValueError, match="kind 'no_kernel' names the kernel 'nowhere', which is not registered"):
            att.attention_map(q, kk, "no_kernel", k=K)
    finally:
        kinds.unregister("no_kernel")


@pytest.mark.parametrize("bad, message", [
    (dict(family="other"), "family must be one of"),
    (dict(bias=None), "needs its key-norm bias coefficient"),
    (dict(kernel="focused", bias=1.0), "only a 'bilinear' softmax kind has a key-norm bias"),
    (dict(name="two words"), "Kind name must be a word"),
])
def test_a_malformed_entry_is_refused_in_one_line(bad, message):
    entry = dict(name="bad_kind", family="softmax", kernel="bilinear", bias=0.0, formula="x", title="x", plain="x",
                 html="x", description="x", rounding="x")
    with pytest.raises(ValueError, match=message):
        kinds.Kind(**{**entry, **bad})


def test_a_name_already_taken_is_refused():
    with pytest.raises(ValueError, match="'spatial' is already registered"):
        kinds.register(kinds.get("spatial"))


def test_the_registry_imports_no_torch():
    import subprocess
    import sys

    probe = "import sys, hypviz.base.kinds as k; print(len(k.names()), 'torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    count, torch_loaded, numpy_loaded = out.stdout.split()
    assert int(count) == len(kinds.names()) and torch_loaded == "False" and numpy_loaded == "False"
