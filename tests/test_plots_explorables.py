"""hypviz.plots.explorables: sliders that reference what exists, numbers from hypviz.attention, rounded, small."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess

import numpy as np
import pytest
import torch

from hypviz import attention as att
from hypviz import data
from hypviz import lorentz as L
from hypviz.base import kinds

go = pytest.importorskip("plotly.graph_objects")
pio = pytest.importorskip("plotly.io")
ex = pytest.importorskip("hypviz.plots.explorables")
parts = pytest.importorskip("hypviz.plots.explorable_parts")

RADII = [0.1, 1.0, 10.0]
TAUS = [4.0, 40.0]
SPREADS = [0.4, 0.1, 0.025]


# --------------------------------------------------------------------------- #
# small inputs, built once
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def unit_points():
    return data.lifted_gaussian(6, 5, 1.0, seed=1), data.lifted_gaussian(12, 5, 1.0, seed=2)


@pytest.fixture(scope="module")
def norm_fig(unit_points):
    q, kk = unit_points
    return ex.norm_temperature_explorer(q, kk, RADII, TAUS, query=2, start=(10.0, 4.0))


@pytest.fixture(scope="module")
def spread_setup():
    q = data.lifted_gaussian(6, 5, 2.0, seed=3)
    g = torch.Generator().manual_seed(4)
    u = torch.randn(12, 5, generator=g, dtype=torch.float64)
    w = torch.linspace(-1.0, 1.0, 12, dtype=torch.float64)[torch.randperm(12, generator=g)]
    return q, u, w


@pytest.fixture(scope="module")
def spread_fig(spread_setup):
    q, u, w = spread_setup
    return ex.key_spread_explorer(q, u, w, SPREADS, mean_norm=2.0, temperature=3.0, query=1, start=0.1)


@pytest.fixture(scope="module")
def disk_setup():
    keys = data.lifted_gaussian(9, 2, 1.2, seed=5)
    path = L.lift(torch.linspace(0.0, 2.0, 5, dtype=torch.float64)[:, None] * torch.tensor([0.6, 0.8], dtype=torch.float64))
    return path, keys


@pytest.fixture(scope="module")
def disk_fig(disk_setup):
    path, keys = disk_setup
    return ex.disk_query_explorer(path, keys, temperature=0.7, start=3)


@pytest.fixture(scope="module")
def heat_setup():
    return data.lifted_gaussian(7, 4, 2.0, seed=6), data.lifted_gaussian(9, 4, 2.0, seed=7)


@pytest.fixture(scope="module")
def heat_fig(heat_setup):
    q, kk = heat_setup
    return ex.attention_heatmap_explorer(q, kk, "spatial", "distance", temperature=2.0)


def trace(fig, name):
    (found,) = [t for t in fig.data if t.name == name]
    return found


def decoded(v) -> np.ndarray:
    """A trace array as numpy, whether plotly keeps it as a list, an ndarray or a typed-array spec."""
    if isinstance(v, dict) and "bdata" in v:
        arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        return arr.reshape([int(n) for n in str(v["shape"]).split(",")]) if "shape" in v else arr
    return np.asarray(v, dtype=float)


# --------------------------------------------------------------------------- #
# slider structure, shared by the explorers with sliders
# --------------------------------------------------------------------------- #
def check_sliders(fig, expected_steps: list[int]) -> None:
    sliders = fig.layout.sliders
    assert [len(s.steps) for s in sliders] == expected_steps
    n = len(fig.data)
    for s in sliders:
        assert 0 <= s.active < len(s.steps)
        assert s.currentvalue.visible and s.currentvalue.prefix
        assert len({st.label for st in s.steps}) == len(s.steps), "two slider positions with the same label"
        for st in s.steps:
            assert st.method == "restyle"
            update, idx = st.args
            assert idx and all(isinstance(i, int) and 0 <= i < n for i in idx), "a step names a trace that does not exist"
            assert len(set(idx)) == len(idx)
            for attr, values in update.items():
                assert isinstance(values, (list, tuple)) and len(values) == len(idx), f"{attr}: one value per trace"
                for i in idx:  # the attribute exists on that trace
                    obj = fig.data[i]
                    for part in attr.split(".")[:-1]:
                        obj = obj[part]
                    assert attr.split(".")[-1] in obj, f"trace {i} has no {attr}"
    # the figure as stored is the state of the sliders' starting positions
    for s in sliders:
        update, idx = s.steps[s.active].args
        for attr, values in update.items():
            for i, v in zip(idx, values):
                cur = fig.data[i]
                for part in attr.split("."):
                    cur = cur[part]
                cur = list(cur) if isinstance(cur, (tuple, list)) else cur
                assert cur == v, f"trace {i} {attr} is not the active step's value"


def all_floats(obj):
    if isinstance(obj, float):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from all_floats(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from all_floats(v)


def assert_rounded(fig, digits: int = 8) -> None:
    """No stored number in the data or the slider steps carries more than ``digits`` significant digits.

    (4 digits, or up to 3 more for a value at a rounding boundary; float64 noise would show 15-17.)
    """
    js = json.loads(fig.to_json())
    parts = [js["data"], [s.get("steps") for s in js["layout"].get("sliders", [])]]
    floats = [v for part in parts for v in all_floats(part)]
    assert floats, "nothing numeric found"
    noisy = [v for v in floats if v != float(f"{v:.{digits}g}")]
    assert not noisy, f"{len(noisy)} values carry rounding noise, e.g. {noisy[:3]}"


def test_norm_temperature_sliders_and_layout(norm_fig):
    check_sliders(norm_fig, [len(RADII), len(TAUS)])
    r_slider, tau_slider = norm_fig.layout.sliders
    assert [s.label for s in r_slider.steps] == ["0.1", "1", "10"] and r_slider.active == 2 and tau_slider.active == 0
    # the tau slider shows exactly one temperature's copy of each per-temperature trace
    for st in tau_slider.steps:
        vis = st.args[0]["visible"]
        assert sum(vis) == len(vis) // len(TAUS)
    assert norm_fig.layout.xaxis.type == "log" and norm_fig.layout.yaxis.type == "log"
    assert "r²/τ" in norm_fig.layout.xaxis2.title.text
    assert all(ax.title.text for ax in (norm_fig.layout.xaxis, norm_fig.layout.yaxis, norm_fig.layout.xaxis3,
                                        norm_fig.layout.yaxis3))
    assert norm_fig.layout.coloraxis.colorscale[0][1] == "#440154"  # viridis
    assert_rounded(norm_fig)


def test_norm_temperature_values_match_attention(unit_points, norm_fig):
    q, kk = unit_points
    r, tau = 1.0, 40.0
    Q, K = L.lift(r * q[:, 1:]), L.lift(r * kk[:, 1:])
    c = att.compare(Q, K, "spatial", "distance", temperature=tau)
    gap = np.asarray(trace(norm_fig, "τ = 40: gap TV(S, P)").y)
    base = np.asarray(trace(norm_fig, "τ = 40: baseline TV(P, U)").y)
    assert gap[1] == pytest.approx(c.mean_tv, rel=1e-3) and base[1] == pytest.approx(c.mean_tv_uniform_b, rel=1e-3)
    # panel 3 at slider position r = 1: M * weights of query 2, the tau = 40 copy
    update, idx = norm_fig.layout.sliders[0].steps[1].args
    weight_traces = [i for i in idx if norm_fig.data[i].xaxis == "x3"]
    j = idx.index(weight_traces[1])  # second temperature
    M = K.shape[0]
    for kind, axis in (("distance", "x"), ("spatial", "y")):
        want = M * att.attention_map(Q[2:3], K, kind, temperature=tau)[0].numpy()
        assert np.allclose(update[axis][j], want, rtol=5e-3)
    # and along r^2/tau the second panel's x is r^2/tau
    collapsed = trace(norm_fig, "τ = 40: gap TV(S, P) against r²/τ")
    assert collapsed.xaxis == "x2" and np.allclose(collapsed.x, np.asarray(RADII) ** 2 / 40.0, rtol=1e-3)
    assert collapsed.y == trace(norm_fig, "τ = 40: gap TV(S, P)").y


def test_key_spread_sliders_values_and_rounding(spread_setup, spread_fig):
    check_sliders(spread_fig, [len(SPREADS)])
    assert spread_fig.layout.sliders[0].active == 1
    assert spread_fig.layout.xaxis.autorange == "reversed"  # s shrinks left to right, as the slider moves
    q, u, w = spread_setup
    s = 0.025
    K = L.lift(u / u.norm(dim=-1, keepdim=True) * (2.0 * (1 + s * w))[:, None])
    c = att.compare(q, K, "spatial", "distance", temperature=3.0)
    gap = np.asarray(trace(spread_fig, "gap TV(S, P)").y)
    ratio = np.asarray(trace(spread_fig, "gap / baseline").y)
    assert gap[2] == pytest.approx(c.mean_tv, rel=1e-3) and ratio[2] == pytest.approx(c.gap_ratio, rel=1e-3)
    assert np.all(np.diff(gap) < 0)  # the gap shrinks with the spread
    update, idx = spread_fig.layout.sliders[0].steps[2].args
    want = 12 * att.attention_map(q[1:2], K, "spatial", temperature=3.0)[0].numpy()
    assert np.allclose(update["y"][2], want, rtol=5e-3)
    assert_rounded(spread_fig)


def test_disk_query_sliders_values_and_geometry(disk_setup, disk_fig):
    path, keys = disk_setup
    check_sliders(disk_fig, [path.shape[0]])
    update, idx = disk_fig.layout.sliders[0].steps[4].args
    ws = att.attention_map(path[4:5], keys, "spatial", temperature=0.7)[0].numpy()
    wd = att.attention_map(path[4:5], keys, "distance", temperature=0.7)[0].numpy()
    assert np.allclose(update["marker.color"][0], ws, atol=1e-4) and np.allclose(update["marker.color"][1], wd, atol=1e-4)
    cd = np.asarray(update["customdata"][0], dtype=float)
    assert np.allclose(cd[:, 0], L.dist(path[4], keys).numpy(), rtol=5e-3)
    p = L.to_poincare(path[4]).numpy()
    assert np.allclose([update["x"][2][0], update["y"][2][0]], p, atol=1e-4)
    # at q_s = 0 the spatial logits are all 0: the spatial map is exactly uniform
    first = disk_fig.layout.sliders[0].steps[0].args[0]["marker.color"][0]
    assert len(set(first)) == 1 and first[0] == pytest.approx(1 / keys.shape[0], abs=1e-4)
    assert disk_fig.layout.yaxis.scaleanchor == "x" and disk_fig.layout.yaxis2.scaleanchor == "x2"
    assert disk_fig.layout.coloraxis.cmin == 0.0
    assert_rounded(disk_fig)


def test_heatmap_hover_panels_agree_and_noise_is_stored_as_zero(heat_setup, heat_fig):
    q, kk = heat_setup
    assert len(heat_fig.data) == 3 and not heat_fig.layout.sliders
    za, zb, zd = (decoded(t.z).astype(float) for t in heat_fig.data)
    ref_a = att.attention_map(q, kk, "spatial", temperature=2.0).numpy()
    ref_b = att.attention_map(q, kk, "distance", temperature=2.0).numpy()
    assert np.allclose(za, ref_a, atol=1e-4) and np.allclose(zb, ref_b, atol=1e-4)
    assert np.allclose(zd, za - zb, atol=2e-4)
    cd = [decoded(t.customdata).astype(float) for t in heat_fig.data]
    assert np.array_equal(cd[0][..., 0], zb) and np.array_equal(cd[1][..., 0], za) and np.array_equal(cd[2][..., 1], zb)
    for t in heat_fig.data:
        assert "query i" in t.hovertemplate and "key j" in t.hovertemplate and "difference" in t.hovertemplate
    assert heat_fig.data[2].zmin == -heat_fig.data[2].zmax and heat_fig.data[0].zmin == 0.0
    assert heat_fig.layout.yaxis.autorange == "reversed"  # query 0 on top, as in the matplotlib heatmaps
    # stored numbers are the float32 of values rounded to the figure's decimals
    dec = int(heat_fig.layout.title.text.split("weights to ")[1].split(" ")[0])
    for z in (za, zb, zd):
        assert np.array_equal(np.float32(np.round(z, dec)), z.astype(np.float32))
    # identity 5: the Lorentzian map IS the distance map; the rounding noise between them is stored as 0
    lz = ex.attention_heatmap_explorer(q, kk, "lorentz", "distance", temperature=2.0)
    assert not np.any(decoded(lz.data[2].z))


def test_json_sizes_at_notebook_scale():
    q, kk = data.lifted_gaussian(128, 64, 1.0, seed=10), data.lifted_gaussian(256, 64, 1.0, seed=11)
    fig = ex.norm_temperature_explorer(q, kk, [10 ** (e / 2) for e in range(-4, 3)], [8.0, 80.0, 800.0])
    assert len(fig.to_json()) < 1e6
    u = kk[:, 1:]
    w = torch.linspace(-1.0, 1.0, 256, dtype=torch.float64)
    fig = ex.key_spread_explorer(data.lifted_gaussian(128, 64, 4.0, seed=10), u, w, [0.5, 0.2, 0.1, 0.05, 0.02, 0.01])
    assert len(fig.to_json()) < 1e6
    Q, K = data.lifted_gaussian(48, 16, 3.0, seed=1), data.lifted_gaussian(48, 16, 3.0, seed=2)
    assert len(ex.attention_heatmap_explorer(Q, K, temperature=4.0).to_json()) < 1e6
    keys = data.lifted_gaussian(40, 2, 1.5, seed=3)
    path = L.lift(torch.linspace(0.0, 3.9, 13, dtype=torch.float64)[:, None] * torch.tensor([0.92, 0.38], dtype=torch.float64))
    assert len(ex.disk_query_explorer(path, keys).to_json()) < 1e6


def test_rounding_never_keeps_a_digit_that_depends_on_the_last_bit():
    # 1.625 and 2.675 sit on 3-digit rounding boundaries (1.625 exactly, 2.675 within one ulp):
    # a neighbouring float would round the other way, so they keep a 4th digit
    assert parts.sig([1.625, 2.675, 0.031622776601683794, -0.0], 3) == [1.625, 2.675, 0.0316, 0.0]
    for v in (1.625, 2.675, 0.3, 4.5585e-7):
        for u in (np.nextafter(v, 0.0), np.nextafter(v, 1.0)):
            assert parts.sig([u], 3) == parts.sig([v], 3)
            assert parts.fixed([u, 1.0], 2) == parts.fixed([v, 1.0], 2)
    assert parts.fixed([0.12345, 0.1, float("nan")], 4) == [0.12345, 0.1, None]
    assert parts.label(1.625) == "1.625" and parts.label(0.5) == "0.5" and parts.label(10.0) == "10"


# --------------------------------------------------------------------------- #
# the still and the bundle
# --------------------------------------------------------------------------- #
def test_bundle_is_plotlys_own_json_plus_a_png(norm_fig):
    old = pio.renderers.default
    try:
        pio.renderers.default = "plotly_mimetype"
        want = norm_fig._repr_mimebundle_()
    finally:
        pio.renderers.default = old
    b = ex.bundle(norm_fig)
    assert sorted(b) == sorted([ex.PLOTLY_MIME, "image/png"])
    assert b[ex.PLOTLY_MIME] == want[ex.PLOTLY_MIME]
    png = base64.b64decode(b["image/png"])
    assert png.startswith(b"\x89PNG")
    assert ex.still_png(norm_fig) == png  # deterministic
    with pytest.raises(ValueError, match="still"):
        ex.bundle(norm_fig, b"not a png")
    with pytest.raises(TypeError, match="fig"):
        ex.bundle({"data": []})


@pytest.mark.parametrize("name", ["norm_fig", "spread_fig", "disk_fig", "heat_fig"])
def test_stills_draw_something(name, request):
    from PIL import Image

    fig = request.getfixturevalue(name)
    with Image.open(io.BytesIO(ex.still_png(fig, dpi=50))) as im:
        rgb = np.asarray(im.convert("RGB"))
    assert rgb.shape[0] > 150 and rgb.shape[1] > 500
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) >= 20


def test_show_displays_one_raw_bundle(monkeypatch, heat_fig):
    import IPython.display

    calls = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: calls.append((obj, kw)))
    ex.show(heat_fig)
    assert len(calls) == 1 and calls[0][1] == {"raw": True}
    assert sorted(calls[0][0]) == sorted([ex.PLOTLY_MIME, "image/png"])


# --------------------------------------------------------------------------- #
# bad input: one-line ValueErrors naming the parameter
# --------------------------------------------------------------------------- #
def one_line(excinfo, *words):
    text = str(excinfo.value)
    assert "\n" not in text
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"


def test_the_kinds_come_from_the_registry_a_new_one_shows_up_and_an_unknown_one_is_refused(heat_setup):
    q, kk = heat_setup
    # a kind registered at run time (the distance logits plus a quarter of the key-norm bias) shows up, titled as
    # the registry says, its map the one attention_map computes; once removed it is refused like any unknown name
    kinds.register(kinds.Kind(
        name="quarter_bias", family="softmax", kernel="bilinear", bias=0.25, constant=0.25,
        formula=r"\mathrm{softmax}_j((-\tfrac12\|q - \kappa_j\|_L^2 + \tfrac14 q_t \kappa_{t,j}) / \tau)",
        title="quarter bias", plain="quarter bias", html="quarter bias (run time)",
        description="a quarter of the way from distance to spatial (a test kind)", rounding="as spatial and distance",
    ))
    try:
        fig = ex.attention_heatmap_explorer(q, kk, "quarter_bias", "distance", temperature=2.0)
        titles = [a.text for a in fig.layout.annotations]
        assert "A<sup>quarter_bias</sup>: quarter bias (run time)" in titles
        want = att.attention_map(q, kk, "quarter_bias", temperature=2.0).numpy()
        got = ex.trace_array(trace(fig, "A<sup>quarter_bias</sup>").z)
        np.testing.assert_allclose(got, want, atol=1e-4)  # stored to 4 decimals of the largest weight (< 1)
    finally:
        kinds.unregister("quarter_bias")
    for bad, name in ((("quarter_bias", "distance"), "a"), (("spatial", "sigmoid"), "b")):  # gone; not comparable
        with pytest.raises(ValueError) as info:
            ex.attention_heatmap_explorer(q, kk, *bad, temperature=2.0)
        message = str(info.value)
        assert "\n" not in message and message.startswith(f"{name} must be ")
        assert all(repr(n) in message for n in kinds.comparable())


def test_bad_input(unit_points, spread_setup, disk_setup, heat_setup):
    q, kk = unit_points
    cases = [
        (lambda: ex.norm_temperature_explorer(q, kk, [0.1, -1.0], TAUS), "radii"),
        (lambda: ex.norm_temperature_explorer(q, kk, [1.0], TAUS), "radii"),
        (lambda: ex.norm_temperature_explorer(q, kk, RADII, [4.0, 40.0, 10.0]), "temperatures"),
        (lambda: ex.norm_temperature_explorer(q, kk, RADII, TAUS, query=6), "query"),
        (lambda: ex.norm_temperature_explorer(q, kk, RADII, TAUS, start=(2.0, 4.0)), "start[0]"),
        (lambda: ex.norm_temperature_explorer(q, kk, RADII, TAUS, digits=9), "digits"),
        (lambda: ex.norm_temperature_explorer(q, kk[:, :4], RADII, TAUS), "keys"),
        (lambda: ex.norm_temperature_explorer(q[0], kk, RADII, TAUS), "queries"),
    ]
    qs, u, w = spread_setup
    cases += [
        (lambda: ex.key_spread_explorer(qs, u, w, [1.2, 0.5]), "spreads"),
        (lambda: ex.key_spread_explorer(qs, u, 2 * w, SPREADS), "offsets"),
        (lambda: ex.key_spread_explorer(qs, u[:, :3], w, SPREADS), "directions"),
        (lambda: ex.key_spread_explorer(qs, u, w, SPREADS, temperature=0.0), "temperature"),
        (lambda: ex.key_spread_explorer(qs, u, w, SPREADS, mean_norm=-1), "mean_norm"),
    ]
    path, keys = disk_setup
    cases += [
        (lambda: ex.disk_query_explorer(path, kk), "keys"),
        (lambda: ex.disk_query_explorer(path[:1], keys), "queries"),
        (lambda: ex.disk_query_explorer(path, keys, start=7), "start"),
    ]
    hq, hk = heat_setup
    cases += [
        (lambda: ex.attention_heatmap_explorer(hq, hk, "dot"), "a"),
        (lambda: ex.attention_heatmap_explorer(hq, hk, "spatial", "euclid"), "b"),
        (lambda: ex.attention_heatmap_explorer(hq, hk, temperature=-2), "temperature"),
    ]
    for make, word in cases:
        with pytest.raises(ValueError) as excinfo:
            make()
        one_line(excinfo, word)
    off = q.clone()
    off[0, 0] += 0.5  # not on the hyperboloid
    with pytest.raises(ValueError) as excinfo:
        ex.norm_temperature_explorer(off, kk, RADII, TAUS)
    one_line(excinfo, "queries")


# --------------------------------------------------------------------------- #
# the sliders in a real browser (plotly.js of the installed plotly), when Chromium is there
# --------------------------------------------------------------------------- #
_CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)

_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><script src="plotly.min.js"></script></head><body>
<div id="gd" style="width:1200px;height:650px"></div><pre id="out">pending</pre>
<script type="application/json" id="figs">__FIGS__</script>
<script>
(async () => {
  const out = {errors: [], steps: 0, figures: 0};
  const figs = JSON.parse(document.getElementById('figs').textContent);
  for (const [name, fig] of Object.entries(figs)) {
    try {
      const gd = document.getElementById('gd');
      await Plotly.newPlot(gd, fig.data, fig.layout, {});
      out.figures += 1;
      for (const s of (fig.layout.sliders || [])) {
        for (const step of s.steps) {
          await Plotly.restyle(gd, ...JSON.parse(JSON.stringify(step.args)));
          out.steps += 1;
          const [upd, idx] = step.args;
          for (const [attr, vals] of Object.entries(upd)) {
            idx.forEach((ti, j) => {
              const full = gd._fullData[ti];
              let got = full.visible === true ? full : gd.data[ti];
              for (const part of attr.split('.')) got = got[part];
              if (got && (ArrayBuffer.isView(got) || Array.isArray(got))) got = Array.from(got);
              if (JSON.stringify(got) !== JSON.stringify(vals[j])) out.errors.push(`${name}: trace ${ti} ${attr}`);
            });
          }
        }
      }
      Plotly.purge(gd);
    } catch (e) { out.errors.push(`${name}: ${e}`); }
  }
  document.getElementById('out').textContent = 'RESULT' + JSON.stringify(out) + 'END';
})();
</script></body></html>"""


@pytest.mark.skipif(_CHROMIUM is None, reason="Chromium not found (apt-get install -y chromium)")
def test_every_slider_step_runs_in_plotly_js(tmp_path, norm_fig, spread_fig, disk_fig, heat_fig):
    import plotly

    shutil.copy(plotly.__path__[0] + "/package_data/plotly.min.js", tmp_path / "plotly.min.js")
    figs = {name: ex.bundle(f, b"\x89PNG\r\n\x1a\n")[ex.PLOTLY_MIME]
            for name, f in (("norm", norm_fig), ("spread", spread_fig), ("disk", disk_fig), ("heat", heat_fig))}
    page = tmp_path / "sliders.html"
    page.write_text(_PAGE.replace("__FIGS__", json.dumps(figs).replace("<", "\\u003c")), encoding="utf-8")
    run = subprocess.run([_CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    assert "RESULT" in run.stdout, f"the page did not finish: {run.stderr[-500:]}"
    result = json.loads(run.stdout.split("RESULT", 1)[1].split("END", 1)[0])
    assert result["errors"] == [] and result["figures"] == 4
    steps = sum(len(s.steps) for f in (norm_fig, spread_fig, disk_fig) for s in f.layout.sliders)
    assert result["steps"] == steps
