"""hypviz.plots.attention and hypviz.plots.sweeps: labelled, colour-blind-safe figures that actually draw
something, and compose into figures made elsewhere (axes=)."""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.base import kinds
from hypviz.plots import attention as pa
from hypviz.plots import sweeps


def render(fig) -> np.ndarray:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3]


def assert_not_blank(fig, min_colours: int = 20):
    img = render(fig)
    colours = np.unique(img.reshape(-1, 3), axis=0)
    assert len(colours) >= min_colours, f"only {len(colours)} colours drawn"


def colourbars(fig):
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


@pytest.fixture(scope="module")
def shown() -> tuple[str, ...]:
    """The registry's softmax kinds, read once for the module: their maps and their titles go together."""
    return tuple(att.SOFTMAX_KINDS)


@pytest.fixture(scope="module")
def maps(points, shown):
    q, kk = points(24, 8, 2.0, seed=0), points(30, 8, 2.0, seed=1)
    return [att.attention_map(q, kk, kind) for kind in shown]


@pytest.fixture(scope="module")
def titles(shown) -> list[str]:
    """Each shown kind's title, as the registry has it (the plots print the registry's titles)."""
    return [kinds.get(kind).title for kind in shown]


def test_heatmaps_share_one_scale_and_are_labelled(maps, titles):
    fig = pa.heatmaps_mpl(maps, titles, suptitle="maps")
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == len(maps) >= 3
    assert len({im.get_clim() for im in images}) == 1
    assert images[0].get_clim()[1] == pytest.approx(max(float(m.max()) for m in maps))
    assert all(im.get_cmap().name == "viridis" for im in images)
    panels = [ax for ax in fig.axes if ax.images]
    assert all(ax.get_xlabel() == r"key $j$" for ax in panels) and panels[0].get_ylabel() == r"query $i$"
    assert [ax.get_title() for ax in panels] == titles
    (cbar,) = colourbars(fig)
    assert "attention weight" in cbar.get_ylabel()
    assert_not_blank(fig)


def test_difference_map_is_zero_centred_diverging(maps):
    fig = pa.difference_map_mpl(maps[1], maps[0])
    (ax,) = [a for a in fig.axes if a.images]
    im = ax.images[0]
    lo, hi = im.get_clim()
    assert lo == pytest.approx(-hi) and hi == pytest.approx(float((maps[0] - maps[1]).abs().max()))
    assert im.get_cmap().name == "RdBu_r"
    (cbar,) = colourbars(fig)
    assert "difference" in cbar.get_ylabel()
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title().startswith("$")
    assert_not_blank(fig)
    # a shared limit
    fig2 = pa.difference_map_mpl(maps[1], maps[0], limit=0.5)
    assert [a for a in fig2.axes if a.images][0].images[0].get_clim() == (-0.5, 0.5)


def test_difference_maps_share_a_zero_centred_scale(maps):
    small = maps[0] + 1e-3 * (maps[1] - maps[0])
    fig = pa.difference_maps_mpl([(maps[1], maps[0]), (maps[0], small)], ["varied norms", "nearly equal"])
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2 and images[0].get_clim() == images[1].get_clim()
    lo, hi = images[0].get_clim()
    assert lo == pytest.approx(-hi) and hi == pytest.approx(float((maps[0] - maps[1]).abs().max()))
    assert all(im.get_cmap().name == "RdBu_r" for im in images)
    (cbar,) = colourbars(fig)
    assert "difference" in cbar.get_ylabel()
    assert_not_blank(fig)
    with pytest.raises(ValueError, match="one title per pair"):
        pa.difference_maps_mpl([(maps[1], maps[0])], [])


def test_bound_sweep_overlays_the_bound(points):
    scales = [0.1, 1.0, 3.0]
    results = [att.compare(points(20, 8, r, seed=2), points(25, 8, r, seed=3)) for r in scales]
    fig = sweeps.bound_sweep_mpl(scales, results)
    ax_tv, ax_kl = [a for a in fig.axes if a.lines]
    labels = [line.get_label() for line in ax_tv.lines]
    assert any("bound" in lab and "tanh" in lab for lab in labels)
    assert ax_tv.get_xscale() == "log" and ax_tv.get_yscale() == "log"
    assert "total variation" in ax_tv.get_ylabel() and "KL" in ax_kl.get_ylabel() and ax_tv.get_xlabel()
    by_label = {line.get_label(): line for line in ax_kl.lines}
    max_tv = [line for line in ax_tv.lines if line.get_label().startswith("max")][0]
    assert np.allclose(max_tv.get_ydata(), [r.max_tv for r in results])
    # KL: the exact supremum (Comparison.kl_bound) and Hoeffding's Delta^2/8, each drawn as what it is
    exact = [line for lab, line in by_label.items() if lab.startswith("bound: max") and "exact" in lab]
    hoeffding = [line for lab, line in by_label.items() if "Delta^2/8" in lab and "Hoeffding" in lab]
    assert len(exact) == 1 and len(hoeffding) == 1
    assert np.allclose(exact[0].get_ydata(), [float(r.kl_bound.max()) for r in results])
    assert np.allclose(hoeffding[0].get_ydata(), [float(r.kl_bound_hoeffding.max()) for r in results])
    assert np.all(exact[0].get_ydata() <= hoeffding[0].get_ydata())
    assert "Delta^2/8" in ax_kl.get_title() and r"\sup" in ax_kl.get_title()
    assert_not_blank(fig)
    with pytest.raises(ValueError, match="sweep values"):
        sweeps.bound_sweep_mpl([1.0], results)
    focused = att.compare(points(6, 8, 1.0, seed=2), points(7, 8, 1.0, seed=3), "focused", "distance")
    with pytest.raises(ValueError, match="two softmax kinds"):
        sweeps.bound_sweep_mpl([1.0], [focused])


def test_comparison_sweep_draws_the_gap_next_to_its_baseline(points):
    radii = [0.3, 1.0, 3.0]
    series = {}
    for tau in (2.0, 8.0):
        res = [att.compare(points(16, 8, r, seed=4), points(20, 8, r, seed=5), temperature=tau) for r in radii]
        series[rf"$\tau = {tau:g}$"] = ([r * r / tau for r in radii], res)
    fig = sweeps.comparison_sweep_mpl(series)
    ax_tv, ax_ratio, ax_rank = fig.axes
    assert all(ax.get_xscale() == "log" for ax in fig.axes) and ax_tv.get_yscale() == "log"
    assert all("tau" in ax.get_xlabel() for ax in fig.axes)
    assert "total variation" in ax_tv.get_ylabel() and "TV" in ax_ratio.get_ylabel() and ax_rank.get_ylabel()
    assert all(ax.get_title() for ax in fig.axes) and fig.get_suptitle()
    (x, res) = series[r"$\tau = 8$"]
    tv_lines = {line.get_label(): line for line in ax_tv.lines}
    assert np.allclose(tv_lines[r"$\tau = 8$: gap"].get_ydata(), [c.mean_tv for c in res])
    assert np.allclose(tv_lines[r"$\tau = 8$: baseline"].get_ydata(), [c.mean_tv_uniform_b for c in res])
    assert np.allclose(tv_lines[r"$\tau = 8$: gap"].get_xdata(), x)
    ratio = {line.get_label(): line for line in ax_ratio.lines}
    assert np.allclose(ratio[r"$\tau = 8$"].get_ydata(), [c.gap_ratio for c in res])
    threshold = [line for lab, line in ratio.items() if "close" in lab]
    assert len(threshold) == 1 and np.allclose(threshold[0].get_ydata(), att.CLOSE_RATIO)
    rank = {line.get_label(): line for line in ax_rank.lines}
    assert np.allclose(rank[r"$\tau = 8$: top-1"].get_ydata(), [c.top1_agreement for c in res])
    assert np.allclose(rank[r"$\tau = 8$: Spearman"].get_ydata(), [c.rank_correlation for c in res])
    assert rank[r"$\tau = 8$: top-5"].get_linestyle() == "--"
    # the two series have different colours; the legends name styles (outer panels) and series (middle)
    assert ratio[r"$\tau = 2$"].get_color() != ratio[r"$\tau = 8$"].get_color()
    legend = {t.get_text() for t in ax_tv.get_legend().get_texts()}
    assert legend == {r"gap $\mathrm{TV}(P_a, P_b)$", r"baseline $\mathrm{TV}(P_b, U)$"}
    assert [t.get_text() for t in ax_rank.get_legend().get_texts()] == ["top-1", "top-5", "Spearman"]
    assert_not_blank(fig)
    with pytest.raises(ValueError, match="nothing to draw"):
        sweeps.comparison_sweep_mpl({})
    with pytest.raises(ValueError, match="sweep values"):
        sweeps.comparison_sweep_mpl({"a": ([1.0], res)})
    with pytest.raises(ValueError, match="non-positive"):
        sweeps.comparison_sweep_mpl({"a": ([0.0, 1.0, 2.0], res)})
    lin = sweeps.comparison_sweep_mpl({"a": ([0.0, 1.0, 2.0], res)}, xscale="linear", close_ratio=0.5)
    assert lin.axes[0].get_xscale() == "linear"
    assert any(np.allclose(line.get_ydata(), 0.5) for line in lin.axes[1].lines if "close" in line.get_label())


def _disk_setup(k=1.0):
    keys = L.lift(torch.randn(30, 2, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 1.2, k=k)
    q = L.lift(torch.tensor([1.1, 0.4], dtype=torch.float64), k=k)
    return q, keys


@pytest.mark.parametrize("k", [1.0, 2.0])
def test_disk_level_sets_show_what_each_map_rewards(k):
    q, keys = _disk_setup(k)
    tau = 0.7
    fig = pa.disk_level_sets_mpl(q, keys, k=k, temperature=tau, levels=7, suptitle="disk")
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2
    (cbar,) = colourbars(fig)
    assert "attention weight" in cbar.get_ylabel() and r"\kappa" in cbar.get_ylabel()
    weights = [att.attention_map(q[None], keys, kind, k=k, temperature=tau)[0].numpy() for kind in ("spatial", "distance")]
    disk = L.to_poincare(keys, k=k).numpy()
    root_k = math.sqrt(k)
    clims = set()
    for ax, w, kind in zip(panels, weights, ("spatial", "distance")):
        assert r"\kappa" in ax.get_title() and ax.get_title().count("$") >= 2
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_aspect() == 1.0
        (dots,) = [c for c in ax.collections if hasattr(c, "get_offsets") and len(c.get_offsets()) == len(disk)]
        assert np.allclose(dots.get_offsets(), disk) and np.allclose(dots.get_array(), w)
        assert dots.get_cmap().name == "viridis"
        clims.add(dots.get_clim())
        # the boundary circle of radius sqrt(k)
        assert any(np.allclose(np.hypot(line.get_xdata(), line.get_ydata()), root_k) for line in ax.lines)
        # the level sets are what they claim: vertices of each contour lie on the level of the right field
        (cs,) = [c for c in ax.collections if hasattr(c, "levels")]
        assert len(cs.levels) == 7
        ks = att.scores(q[None], keys, kind, k=k)[0].numpy() * (1.0 if kind == "spatial" else -2.0)
        assert ks.min() < cs.levels.min() and cs.levels.max() < ks.max()
        for level, path in zip(cs.levels, cs.get_paths()):
            if len(path.vertices) == 0:
                continue
            pts = L.from_poincare(torch.as_tensor(path.vertices, dtype=torch.float64), k=k)
            field = att.scores(q[None], pts, kind, k=k)[0] * (1.0 if kind == "spatial" else -2.0)
            span = ks.max() - ks.min()
            assert np.allclose(field.numpy(), level, atol=0.02 * span)
    assert len(clims) == 1 and clims.pop() == pytest.approx((0.0, max(float(w.max()) for w in weights)))
    assert_not_blank(fig)


def test_disk_spatial_level_sets_are_curved_distance_level_sets_are_circles():
    q, keys = _disk_setup()
    fig = pa.disk_level_sets_mpl(q, keys, levels=([0.5, 1.5], [0.5, 2.0]))
    spatial, distance = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    (cs_s,) = [c for c in spatial.collections if hasattr(c, "levels")]
    (cs_d,) = [c for c in distance.collections if hasattr(c, "levels")]
    assert list(cs_s.levels) == [0.5, 1.5] and list(cs_d.levels) == [0.5, 2.0]
    v = cs_s.get_paths()[0].vertices  # a straight line of the spatial chart: curved in the disk
    a, b = v[len(v) // 4] - v[0], v[len(v) // 2] - v[0]
    assert abs(a[0] * b[1] - a[1] * b[0]) > 1e-3
    for path in cs_d.get_paths():  # a hyperbolic circle is a Euclidean circle in the disk
        w = path.vertices
        centre = (w.max(axis=0) + w.min(axis=0)) / 2
        radii = np.linalg.norm(w - centre, axis=1)
        assert radii.std() < 0.01 * radii.mean()


def test_disk_level_sets_into_given_axes_and_bad_input(points):
    from matplotlib.figure import Figure

    q, keys = _disk_setup()
    fig = Figure()
    axes = fig.subplots(1, 2)
    out = pa.disk_level_sets_mpl(q[None], keys, axes=axes)
    assert out is fig and len(colourbars(fig)) == 1
    with pytest.raises(ValueError, match="shape \\(3,\\)"):
        pa.disk_level_sets_mpl(points(2, 2, 1.0, seed=0), keys)
    with pytest.raises(ValueError, match="shape \\(M, 3\\)"):
        pa.disk_level_sets_mpl(q, points(5, 3, 1.0, seed=0))
    with pytest.raises(ValueError, match="axes must be 2 Axes"):
        pa.disk_level_sets_mpl(q, keys, axes=[axes[0]])
    with pytest.raises(ValueError, match="hyperboloid|<x, x>_L|lie on"):
        pa.disk_level_sets_mpl(q, keys * 1.5)
    with pytest.raises(ValueError, match="edge"):
        pa.disk_level_sets_mpl(q, keys, edge=1.0)
    with pytest.raises(ValueError, match="levels"):
        pa.disk_level_sets_mpl(q, keys, levels=0)


def test_crossover():
    n = np.array([8, 16, 32, 64, 128])
    assert sweeps.crossover(n, n**2, 32 * n) == pytest.approx(32.0)
    assert sweeps.crossover(n, n**2, 40 * n) == pytest.approx(40.0, rel=1e-12)
    assert sweeps.crossover(n, n, 2 * n) is None
    with pytest.raises(ValueError, match="positive"):
        sweeps.crossover(n, n - 8, n)


def test_cost_curves_mark_the_crossover():
    n = np.array([8, 16, 32, 64, 128, 256])
    times = {"(QK^T)V": 1e-6 * n**2.0, "Q(K^T V)": 4e-5 * n}
    memory = {"(QK^T)V": 4.0 * n**2, "Q(K^T V)": np.array([2e3, 4e3, 8e3, 16e3, 32e3, np.nan])}
    fig = sweeps.cost_curves_mpl(n, times, memory)
    ax_t, ax_m = [a for a in fig.axes if a.lines]
    assert ax_t.get_ylabel() == "time (s)" and "MiB" in ax_m.get_ylabel() and "N" in ax_t.get_xlabel()
    cross = [line for line in ax_t.lines if "crossover" in line.get_label()]
    assert len(cross) == 1 and cross[0].get_xdata()[0] == pytest.approx(40.0)
    assert any("crossover" in line.get_label() for line in ax_m.lines)
    assert_not_blank(fig)


def test_row_distribution():
    rng = np.random.default_rng(0)
    fig = sweeps.row_distribution_mpl({"power 1": rng.random(50), "power 2": torch.rand(50, dtype=torch.float64)})
    (ax,) = fig.axes
    assert ax.get_xlabel() and ax.get_ylabel() == "number of query rows" and ax.get_title()
    assert len(ax.patches) == 2
    assert_not_blank(fig, min_colours=5)
    from matplotlib.figure import Figure

    host = Figure()
    target = host.subplots()
    assert sweeps.row_distribution_mpl({"a": rng.random(20)}, ax=target) is host and len(target.patches) == 1


def test_bad_plot_inputs(maps):
    with pytest.raises(ValueError, match="one title per map"):
        pa.heatmaps_mpl(maps, ["a"])
    with pytest.raises(ValueError, match="2-D map"):
        pa.heatmaps_mpl([torch.ones(3)], ["a"])
    with pytest.raises(ValueError, match="different shapes"):
        pa.difference_map_mpl(maps[0], maps[0][:3])


def _defined_in(module) -> set[str]:
    return {n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))
            and getattr(getattr(module, n), "__module__", "") == module.__name__}


def test_all_is_complete():
    assert set(sweeps.__all__) == _defined_in(sweeps)
    # hypviz.plots.attention exports its own figures only (the sweep curves live in hypviz.plots.sweeps)
    assert set(pa.__all__) == _defined_in(pa)
    assert not set(pa.__all__) & set(sweeps.__all__)
    assert not [n for n in sweeps.__all__ if hasattr(pa, n)]


# --------------------------------------------------------------------------- #
# composing: every multi-panel figure draws into given axes (of a figure or a subfigure)
# --------------------------------------------------------------------------- #
def test_multi_panel_figures_compose_into_subfigures(maps, titles, points):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(14, 12), layout="constrained")
    rows = fig.subfigures(4, 1)
    heat = rows[0].subplots(1, len(maps))
    assert pa.heatmaps_mpl(maps, titles, suptitle="maps", axes=heat) is fig
    assert all(ax.images for ax in heat) and rows[0].get_suptitle() == "maps"
    diffs = rows[1].subplots(1, 2)
    assert pa.difference_maps_mpl([(maps[1], maps[0]), (maps[0], maps[2])], ["x", "y"], axes=diffs) is fig
    assert [ax.get_title() for ax in diffs] == ["x", "y"]
    results = [att.compare(points(10, 8, r, seed=2), points(12, 8, r, seed=3)) for r in (0.3, 1.0)]
    bound = rows[2].subplots(1, 2)
    assert sweeps.bound_sweep_mpl([0.3, 1.0], results, axes=bound) is fig
    assert bound[0].get_yscale() == "log" and len(bound[1].lines) == 5
    sweep = rows[3].subplots(1, 3)
    assert sweeps.comparison_sweep_mpl({"a": ([0.1, 1.0], results)}, axes=sweep) is fig
    assert np.allclose(sweep[1].lines[0].get_ydata(), [r.gap_ratio for r in results])
    # each figure's own colourbar and title stay on its own row
    assert len(colourbars(fig)) == 2 and not fig.get_suptitle()
    assert len(rows[0].axes) == len(maps) + 1 and len(rows[1].axes) == 3 and len(rows[2].axes) == 2
    img = render(fig)
    h = img.shape[0]
    for i in range(4):
        assert img[i * h // 4 : (i + 1) * h // 4].std() > 5.0
    with pytest.raises(ValueError, match=f"axes must be {len(maps)} Axes"):
        pa.heatmaps_mpl(maps, titles, axes=heat[:-1])
    with pytest.raises(ValueError, match="axes must be 2 Axes"):
        sweeps.cost_curves_mpl([8, 16], {"a": [1.0, 2.0]}, {"a": [1.0, 2.0]}, axes=sweep)
    with pytest.raises(TypeError, match=r"axes\[1\] must be a matplotlib Axes"):
        sweeps.bound_sweep_mpl([0.3, 1.0], results, axes=[bound[0], "right"])


def test_single_panel_figures_compose_into_one_figure(maps):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4), layout="constrained")
    left, mid, right = fig.subplots(1, 3)
    assert pa.difference_map_mpl(maps[1], maps[0], ax=left, title="one") is fig
    assert pa.difference_map_mpl(maps[2], maps[0], ax=mid, title="two") is fig
    n = np.array([8, 16, 32, 64])
    assert sweeps.row_distribution_mpl({"a": np.linspace(0, 1, 20)}, ax=right) is fig
    assert left.get_title() == "one" and mid.get_title() == "two" and len(right.patches) == 1
    assert len(colourbars(fig)) == 2
    cost = Figure().subplots(1, 2)
    out = sweeps.cost_curves_mpl(n, {"a": 1e-6 * n**2.0, "b": 4e-5 * n}, {"a": 4.0 * n**2}, axes=cost)
    assert out is cost[0].figure and len(cost[0].lines) == 3  # two curves and the crossover
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        pa.difference_map_mpl(maps[1], maps[0], ax=fig)


@pytest.mark.parametrize("call, message", [
    # the wrong types on purpose (type: ignore): the plots' own checks are under test
    (lambda: pa.heatmaps_mpl([np.eye(3)], ["a"], vmin="0"),  # type: ignore[arg-type]
     "vmin must be a finite number, got the string '0'"),
    (lambda: pa.difference_map_mpl(np.eye(3), np.eye(3), limit=b"1"),  # type: ignore[arg-type]
     "limit must be a finite number, got the bytes b'1'"),
])
def test_numbers_spelt_as_text_are_refused_by_the_plots(call, message):
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        call()
