"""hypviz.plots.attention: labelled, colour-blind-safe figures that actually draw something."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

from hypviz import attention as att
from hypviz import lorentz as L
from hypviz.plots import attention as pa


def points(n, d, r, seed):
    g = torch.Generator().manual_seed(seed)
    return L.lift(torch.randn(n, d, generator=g, dtype=torch.float64) * r / math.sqrt(d))


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
def maps():
    q, kk = points(24, 8, 2.0, 0), points(30, 8, 2.0, 1)
    return [att.attention_map(q, kk, kind) for kind in att.SOFTMAX_KINDS]


def test_heatmaps_share_one_scale_and_are_labelled(maps):
    fig = pa.heatmaps_mpl(maps, [r"$\mathrm{softmax}(q_s \cdot k_s/\tau)$", "distance", "lorentz"], suptitle="maps")
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 3
    assert len({im.get_clim() for im in images}) == 1
    assert images[0].get_clim()[1] == pytest.approx(max(float(m.max()) for m in maps))
    assert all(im.get_cmap().name == "viridis" for im in images)
    panels = [ax for ax in fig.axes if ax.images]
    assert all(ax.get_xlabel() == r"key $j$" for ax in panels) and panels[0].get_ylabel() == r"query $i$"
    assert [ax.get_title() for ax in panels][1] == "distance"
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


def test_bound_sweep_overlays_the_bound():
    scales = [0.1, 1.0, 3.0]
    results = [att.compare(points(20, 8, r, 2), points(25, 8, r, 3)) for r in scales]
    fig = pa.bound_sweep_mpl(scales, results)
    ax_tv, ax_kl = [a for a in fig.axes if a.lines]
    labels = [line.get_label() for line in ax_tv.lines]
    assert any("bound" in lab and "tanh" in lab for lab in labels)
    assert any("bound" in lab for lab in [line.get_label() for line in ax_kl.lines])
    assert ax_tv.get_xscale() == "log" and ax_tv.get_yscale() == "log"
    assert "total variation" in ax_tv.get_ylabel() and "KL" in ax_kl.get_ylabel() and ax_tv.get_xlabel()
    max_tv = [line for line in ax_tv.lines if line.get_label().startswith("max")][0]
    assert np.allclose(max_tv.get_ydata(), [r.max_tv for r in results])
    assert_not_blank(fig)
    with pytest.raises(ValueError, match="sweep values"):
        pa.bound_sweep_mpl([1.0], results)


def test_crossover():
    n = np.array([8, 16, 32, 64, 128])
    assert pa.crossover(n, n**2, 32 * n) == pytest.approx(32.0)
    assert pa.crossover(n, n**2, 40 * n) == pytest.approx(40.0, rel=1e-12)
    assert pa.crossover(n, n, 2 * n) is None
    with pytest.raises(ValueError, match="positive"):
        pa.crossover(n, n - 8, n)


def test_cost_curves_mark_the_crossover():
    n = np.array([8, 16, 32, 64, 128, 256])
    times = {"(QK^T)V": 1e-6 * n**2.0, "Q(K^T V)": 4e-5 * n}
    memory = {"(QK^T)V": 4.0 * n**2, "Q(K^T V)": np.array([2e3, 4e3, 8e3, 16e3, 32e3, np.nan])}
    fig = pa.cost_curves_mpl(n, times, memory)
    ax_t, ax_m = [a for a in fig.axes if a.lines]
    assert ax_t.get_ylabel() == "time (s)" and "MiB" in ax_m.get_ylabel() and "N" in ax_t.get_xlabel()
    cross = [line for line in ax_t.lines if "crossover" in line.get_label()]
    assert len(cross) == 1 and cross[0].get_xdata()[0] == pytest.approx(40.0)
    assert any("crossover" in line.get_label() for line in ax_m.lines)
    assert_not_blank(fig)


def test_row_distribution():
    rng = np.random.default_rng(0)
    fig = pa.row_distribution_mpl({"power 1": rng.random(50), "power 2": torch.rand(50, dtype=torch.float64)})
    (ax,) = fig.axes
    assert ax.get_xlabel() and ax.get_ylabel() == "number of query rows" and ax.get_title()
    assert len(ax.patches) == 2
    assert_not_blank(fig, min_colours=5)


def test_bad_plot_inputs(maps):
    with pytest.raises(ValueError, match="one title per map"):
        pa.heatmaps_mpl(maps, ["a"])
    with pytest.raises(ValueError, match="2-D map"):
        pa.heatmaps_mpl([torch.ones(3)], ["a"])
    with pytest.raises(ValueError, match="different shapes"):
        pa.difference_map_mpl(maps[0], maps[0][:3])


def test_all_is_complete():
    assert set(pa.__all__) == {n for n in dir(pa) if not n.startswith("_") and callable(getattr(pa, n))
                                and getattr(getattr(pa, n), "__module__", "") == pa.__name__}
