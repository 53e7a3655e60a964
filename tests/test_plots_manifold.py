"""Tests of the manifold figures (hypviz.plots.scenes and its two renderers, manifold_mpl and manifold_plotly):
geometry of what is drawn, one scene drawn alike by both renderers, composition with ax=/axes=,
figure structure, images, JSON; and that the plots compute no geometry themselves."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch

from hypviz import attention as A
from hypviz import lorentz as L
from hypviz.base import kinds
from hypviz.lorentz import projections as D
from hypviz.plots import manifold_mpl as Mm
from hypviz.plots import manifold_plotly as Mp
from hypviz.plots import scenes as S

matplotlib = pytest.importorskip("matplotlib")
go = pytest.importorskip("plotly.graph_objects")


def wrapped_normal(n: int, d: int, k: float, scale: float = 0.8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, d, generator=g, dtype=torch.float64) * scale
    return L.expmap0(torch.nn.functional.pad(u, (1, 0)), k=k)


def circle_through(p: np.ndarray, q: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre and radius of the circle through three points of the plane."""
    a = np.array([[q[0] - p[0], q[1] - p[1]], [r[0] - p[0], r[1] - p[1]]]) * 2.0
    b = np.array([q @ q - p @ p, r @ r - p @ p])
    c = np.linalg.solve(a, b)
    return c, float(np.linalg.norm(p - c))


def split_polylines(xs, ys) -> list[np.ndarray]:
    """Undo the None separators of a single plotly line trace."""
    lines: list[np.ndarray] = []
    cur: list[tuple[float, float]] = []
    for x, y in zip(xs, ys):
        if x is None or y is None or (isinstance(x, float) and math.isnan(x)):
            if cur:
                lines.append(np.array(cur))
            cur = []
        else:
            cur.append((x, y))
    if cur:
        lines.append(np.array(cur))
    return lines


def trace(fig, name_start: str):
    found = [t for t in fig.data if (t.name or "").startswith(name_start)]
    assert found, f"no trace named {name_start!r} among {[t.name for t in fig.data]}"
    return found[0]


# --------------------------------------------------------------------------- #
# geodesics as the disks show them (hypviz.lorentz.geodesic itself: tests/test_lorentz.py)
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("k", [0.5, 1.0, 4.0])
def test_poincare_geodesics_are_arcs_orthogonal_to_the_boundary(k):
    x = wrapped_normal(5, 2, k, scale=1.5, seed=3)
    y = wrapped_normal(5, 2, k, scale=1.5, seed=4)
    p = L.to_poincare(L.geodesic(x, y, 41, k=k), k=k).numpy()
    for arc in p:
        c, rho = circle_through(arc[0], arc[20], arc[-1])
        # every sample on that circle, and the circle meets |p| = sqrt(k) at right angles
        np.testing.assert_allclose(np.linalg.norm(arc - c, axis=1), rho, rtol=1e-7)
        assert c @ c == pytest.approx(rho**2 + k, rel=1e-7)


@pytest.mark.parametrize("k", [0.5, 2.0])
def test_klein_geodesics_are_straight(k):
    x = wrapped_normal(5, 2, k, scale=1.5, seed=5)
    y = wrapped_normal(5, 2, k, scale=1.5, seed=6)
    q = L.to_klein(L.geodesic(x, y, 41, k=k), k=k).numpy()
    for chord in q:
        a, b = chord[-1] - chord[0], chord[1:-1] - chord[0]
        cross = a[0] * b[:, 1] - a[1] * b[:, 0]
        assert np.abs(cross).max() <= 1e-10 * max(1.0, float(a @ a))


def test_drawn_disk_geodesics_and_grid_have_the_right_shape():
    k = 2.0
    x = wrapped_normal(12, 2, k, seed=7)
    edges = [(0, 1), (2, 3), (4, 5), (6, 7)]
    poincare = Mp.poincare_figure_plotly(x, k=k, edges=edges, grid=True)
    klein = Mp.klein_figure_plotly(x, k=k, edges=edges, grid=True)
    for name in ("geodesics", "geodesic grid"):
        arcs = split_polylines(trace(poincare, name).x, trace(poincare, name).y)
        assert len(arcs) >= (len(edges) if name == "geodesics" else 4)
        for arc in arcs:
            m = len(arc) // 2
            u, v = arc[-1] - arc[0], arc[m] - arc[0]
            if abs(u[0] * v[1] - u[1] * v[0]) < 1e-3:
                continue  # a diameter: a circle of infinite radius
            c, rho = circle_through(arc[0], arc[m], arc[-1])
            np.testing.assert_allclose(np.linalg.norm(arc - c, axis=1), rho, rtol=1e-4, atol=1e-5)
            assert c @ c == pytest.approx(rho**2 + k, rel=1e-3)
        chords = split_polylines(trace(klein, name).x, trace(klein, name).y)
        for chord in chords:
            a, b = chord[-1] - chord[0], chord[1:-1] - chord[0]
            assert np.abs(a[0] * b[:, 1] - a[1] * b[:, 0]).max() < 1e-4
    # the points are where to_poincare / to_klein put them
    pts = trace(poincare, "points")
    np.testing.assert_allclose(np.c_[pts.x, pts.y], L.to_poincare(x, k=k).numpy(), atol=1e-6)
    pts = trace(klein, "points")
    np.testing.assert_allclose(np.c_[pts.x, pts.y], L.to_klein(x, k=k).numpy(), atol=1e-6)


# --------------------------------------------------------------------------- #
# plotly figures
# --------------------------------------------------------------------------- #
def test_hyperboloid_plotly_structure_labels_and_round_trip():
    k = 1.5
    x = wrapped_normal(20, 2, k, seed=8)
    values = L.inner(x, L.origin(2, k=k))
    fig = Mp.hyperboloid_figure_plotly(x, k=k, values=values, value_label="<x, o>_L", edges=[(0, 1), (2, 3)], grid=True)
    assert [t.type for t in fig.data] == ["surface", "scatter3d", "scatter3d", "scatter3d", "scatter3d"]
    assert [t.name for t in fig.data][1:] == ["geodesic grid", "geodesics", "points", "origin (√k, 0, 0)"]
    plain = Mp.hyperboloid_figure_plotly(x, k=k, show_origin=False)
    assert [t.type for t in plain.data] == ["surface", "scatter3d"]
    assert plain.layout.coloraxis.colorbar.title.text is None
    scene = fig.layout.scene
    assert "x₁" in scene.xaxis.title.text and "x₂" in scene.yaxis.title.text
    assert "time" in scene.zaxis.title.text
    assert "⟨x,x⟩_L = −k" in fig.layout.title.text and "k = 1.5" in fig.layout.title.text
    assert fig.layout.coloraxis.colorbar.title.text == "<x, o>_L"
    assert fig.layout.coloraxis.colorscale[0][1] == "#440154"  # viridis
    text = fig.to_json()
    assert len(text) < 200_000
    loaded = json.loads(text)
    again = go.Figure(loaded)
    assert json.loads(again.to_json()) == loaded
    # points drawn as (x_1, x_2, x_t), rounded to 6 decimals
    pts = trace(fig, "points")
    drawn = np.c_[pts.z, pts.x, pts.y]
    np.testing.assert_allclose(drawn, x.numpy(), atol=1e-6)
    assert np.array_equal(np.round(drawn, 6), drawn)
    np.testing.assert_allclose(pts.marker.color, values.numpy(), atol=1e-6)
    # the sheet is on the hyperboloid (to rounding)
    s = fig.data[0]
    sx, sy, sz = (np.array(v, dtype=float) for v in (s.x, s.y, s.z))
    assert np.abs(sx**2 + sy**2 - sz**2 + k).max() < 1e-3
    # deterministic
    fig2 = Mp.hyperboloid_figure_plotly(x, k=k, values=values, value_label="<x, o>_L", edges=[(0, 1), (2, 3)], grid=True)
    assert fig2.to_json() == text


def test_disk_and_three_panel_plotly_structure():
    k = 1.0
    x = wrapped_normal(15, 2, k, seed=9)
    fig = Mp.disk_figure_plotly(x, k=k, model="klein", values=np.arange(15.0), value_label="index", edges=[(0, 1)])
    assert [t.name for t in fig.data] == [
        "boundary |K| = √k (ideal points)", "geodesic grid", "geodesics", "points", "origin"]
    assert fig.layout.xaxis.title.text == "K₁" and fig.layout.yaxis.title.text == "K₂"
    assert fig.layout.yaxis.scaleanchor == "x"
    assert "Klein" in fig.layout.title.text
    boundary = fig.data[0]
    np.testing.assert_allclose(np.hypot(boundary.x, boundary.y), 1.0, atol=1e-6)
    three = Mp.three_models_figure_plotly(x, k=k, values=np.arange(15.0), value_label="index", edges=[(0, 1)])
    kinds = [t.type for t in three.data]
    assert kinds.count("surface") == 1 and kinds.count("scatter3d") == 4 and kinds.count("scatter") == 10
    poincare_panel, klein_panel = three.get_subplot(1, 2), three.get_subplot(1, 3)
    assert poincare_panel.xaxis.title.text == "p₁" and klein_panel.xaxis.title.text == "K₁"
    assert klein_panel.yaxis.title.text == "K₂" and klein_panel.yaxis.scaleanchor == klein_panel.yaxis.anchor
    assert three.layout.scene.zaxis.title.text.startswith("xₜ")
    assert three.layout.coloraxis.colorbar.title.text == "index"
    assert len(three.to_json()) < 200_000
    json.loads(three.to_json())


def test_higher_dimension_is_projected_and_says_so():
    k = 1.0
    x = wrapped_normal(25, 6, k, seed=10)
    proj = D.project_for_display(x, k=k)
    assert proj.points.shape == (25, 3) and proj.basis.shape == (6, 2)
    L.check_points(proj.points, k=k)
    assert 0.0 < proj.kept <= 1.0 and "PCA of logmap0" in proj.note and "d=6" in proj.note
    torch.testing.assert_close(proj.basis.T @ proj.basis, torch.eye(2, dtype=torch.float64))
    fig = Mp.hyperboloid_figure_plotly(x, k=k, edges=[(0, 1)])
    assert "display projection" in fig.layout.title.text
    fig_mpl = Mm.poincare_figure_mpl(x, k=k)
    assert "display projection" in fig_mpl.axes[0].get_title()
    # points that already lie in a coordinate plane keep their distances exactly
    flat = wrapped_normal(10, 2, k, seed=11)
    embedded = torch.cat([flat, torch.zeros(10, 3, dtype=torch.float64)], dim=1)
    p = D.project_for_display(embedded, k=k)
    assert p.kept == pytest.approx(1.0)
    torch.testing.assert_close(L.pairwise_sqdist(p.points, p.points, k=k), L.pairwise_sqdist(flat, flat, k=k))
    two = D.project_for_display(flat, k=k)
    assert two.basis is None and two.note == "" and torch.equal(two.points, flat)
    with pytest.raises(ValueError, match="d >= 2"):
        D.project_for_display(L.lift(torch.ones(4, 1, dtype=torch.float64)), k=k)


def test_bad_input_is_refused_with_a_clear_message():
    x = wrapped_normal(5, 2, 1.0)
    with pytest.raises(ValueError, match="one value per point"):
        Mp.hyperboloid_figure_plotly(x, values=np.zeros(4))
    with pytest.raises(ValueError, match=r"indices must lie in 0\.\.4"):
        Mp.poincare_figure_plotly(x, edges=[(0, 5)])
    with pytest.raises(ValueError, match=r"\(E, 2\)"):
        Mm.poincare_figure_mpl(x, edges=[0, 1, 2])
    with pytest.raises(ValueError, match="model"):
        Mp.disk_figure_plotly(x, model="halfplane")
    with pytest.raises(ValueError, match="off the hyperboloid"):
        Mm.hyperboloid_figure_mpl(x, k=2.0)


# --------------------------------------------------------------------------- #
# matplotlib figures
# --------------------------------------------------------------------------- #
def rendered(fig) -> np.ndarray:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(float)


def test_matplotlib_figures_are_labelled_and_not_blank():
    k = 1.0
    x = wrapped_normal(20, 2, k, seed=12)
    values = L.inner(x, L.origin(2, k=k))
    label = r"$\langle x,o\rangle_L$"
    hyp = Mm.hyperboloid_figure_mpl(x, k=k, values=values, value_label=label, edges=[(0, 1)], grid=True)
    ax = hyp.axes[0]
    assert ax.name == "3d"
    assert "x_1" in ax.get_xlabel() and "x_2" in ax.get_ylabel() and "x_t" in ax.get_zlabel()
    assert r"\langle x,x\rangle_L=-k" in ax.get_title()
    assert hyp.axes[1].get_ylabel() == label  # the colourbar says what it measures
    disk = Mm.poincare_figure_mpl(x, k=k, values=values, value_label=label, edges=[(0, 1), (2, 3)])
    ax = disk.axes[0]
    assert ax.get_xlabel() == "$p_1$" and ax.get_ylabel() == "$p_2$" and "Poincaré" in ax.get_title()
    assert disk.axes[1].get_ylabel() == label
    assert [c.get_label() for c in ax.collections] == ["geodesic grid", "geodesics", "points", "origin"]
    assert len(ax.collections[1].get_segments()) == 2  # one exact geodesic per edge
    klein = Mm.klein_figure_mpl(x, k=k)
    assert klein.axes[0].get_xlabel() == "$K_1$" and len(klein.axes) == 1  # no values: no colourbar
    for fig in (hyp, disk, klein):
        img = rendered(fig)
        assert img.std() > 10.0, "figure rendered (almost) blank"
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50


def test_three_panel_matplotlib_figure():
    k = 0.5
    x = wrapped_normal(15, 2, k, seed=13)
    fig = Mm.three_models_figure_mpl(x, k=k, values=np.linspace(0, 1, 15), value_label="t", edges=[(0, 1)])
    axes = fig.axes
    assert len(axes) == 4 and axes[0].name == "3d" and axes[3].get_ylabel() == "t"
    assert "Poincaré" in axes[1].get_title() and "Klein" in axes[2].get_title()
    assert "k=0.5" in fig._suptitle.get_text()
    img = rendered(fig)
    w = img.shape[1]
    for lo, hi in ((0, w // 3), (w // 3, 2 * w // 3), (2 * w // 3, w)):
        assert img[:, lo:hi].std() > 10.0


# --------------------------------------------------------------------------- #
# attention drawn on the manifold
# --------------------------------------------------------------------------- #
def edge_collection(ax):
    found = [c for c in ax.collections if c.get_label().startswith("top-")]
    assert len(found) == 1, [c.get_label() for c in ax.collections]
    return found[0]


def test_top_attention_is_the_attention_row_and_its_largest_weights():
    from hypviz import attention as A

    k = 1.5
    q = wrapped_normal(7, 3, k, scale=1.2, seed=20)
    keys = wrapped_normal(30, 3, k, scale=1.2, seed=21)
    tops = A.top_attention(q, keys, k=k, query=4, kinds=("spatial", "distance", "lorentz", "focused"), top=6,
                           temperature=0.7)
    assert list(tops) == ["spatial", "distance", "lorentz", "focused"]
    for kind, t in tops.items():
        if kind == "focused":
            row = A.focused_linear_map(q, keys, k=k)[4]
            assert t.temperature is None
        else:
            row = A.attention_map(q, keys, kind, k=k, temperature=0.7)[4]
            assert t.temperature == 0.7
        torch.testing.assert_close(t.row, row)
        assert t.indices.shape == (6,) and torch.equal(t.weights, t.row[t.indices])
        assert bool((t.weights[:-1] >= t.weights[1:]).all())  # strongest first
        assert float(t.weights.min()) >= float(t.row[np.setdiff1d(np.arange(30), t.indices.numpy())].max())
        assert set(t.indices.tolist()) == set(torch.topk(row, 6).indices.tolist())  # no ties here
    torch.testing.assert_close(tops["lorentz"].row, tops["distance"].row)  # identity 5: same map
    assert A.top_attention(q, keys, k=k, top=100)["spatial"].indices.shape == (30,)  # capped at M
    assert A.top_attention(q, keys, k=k)["distance"].temperature == pytest.approx(math.sqrt(3))


def test_top_attention_keeps_exact_ties_together_whatever_the_rounding():
    from hypviz import attention as A

    # keys at one distance from the query at the origin: their weights are equal in exact
    # arithmetic and differ by rounding only; which of them is drawn must not depend on it
    k = 1.0
    ang = torch.arange(12, dtype=torch.float64) * (2 * math.pi / 12)
    ring = torch.stack([torch.zeros(12, dtype=torch.float64), 1.3 * ang.cos(), 1.3 * ang.sin()], dim=-1)
    near = torch.tensor([[0.0, 0.2, 0.1], [0.0, -0.4, 0.3]], dtype=torch.float64)
    keys = L.expmap0(torch.cat([ring, near]), k=k)                     # keys 0..11 tied, 12 and 13 nearer
    q = L.origin(2, k=k)[None]
    for kind in ("distance", "lorentz", "spatial"):
        row = A.attention_map(q, keys, kind, k=k)[0]
        spread = float(row[:12].max() / row[:12].min() - 1)
        assert spread < 1e-12                                          # tied to rounding
    tops = A.top_attention(q, keys, k=k, query=0, kinds=("distance", "spatial"), top=4)
    d = tops["distance"]
    assert d.indices.tolist() == [12, 13] + list(range(12))          # the two near keys, then the whole tied ring
    assert torch.equal(d.weights, d.row[d.indices])
    # spatial: the query is the origin, q_s = 0, so every key is tied: all keys, by index
    assert tops["spatial"].indices.tolist() == list(range(14))
    # the reordering of tied keys is by index, for any permutation of the keys
    perm = torch.randperm(14, generator=torch.Generator().manual_seed(1))
    again = A.top_attention(q, keys[perm], k=k, kinds=("distance",), top=4)["distance"]
    assert sorted(perm[again.indices].tolist()) == sorted(d.indices.tolist())
    tied = again.indices[2:]
    assert tied.tolist() == sorted(tied.tolist())
    # without a tie at the cut: exactly top keys
    assert len(A.top_attention(q, keys, k=k, kinds=("distance",), top=2)["distance"].indices) == 2
    fig = Mm.attention_on_manifold_mpl(q, keys, k=k, top=4, grid=False)
    assert len(edge_collection(fig.axes[1]).get_segments()) == 14   # distance panel: the tied ring is drawn
    assert "tied" in fig.legends[0].get_title().get_text()
    with pytest.raises(ValueError, match="tie_rtol"):
        A.top_attention(q, keys, k=k, tie_rtol=1.5)


def test_attention_titles_come_from_the_registry_write_keys_kappa_and_cover_every_kind():
    from hypviz.base import kinds

    for kind in A.KINDS:
        entry = kinds.get(kind)
        assert r"\kappa" in entry.title and "k_" not in entry.title and "(k" not in entry.title
        assert "κ" in entry.plain and "k_" not in entry.plain and "(k" not in entry.plain
    # the renderers print the registry's titles, not a table of their own
    x = wrapped_normal(12, 2, 1.0, seed=5)
    for kind in A.KINDS:
        fig = Mm.attention_on_manifold_mpl(x, x, k=1.0, query=0, kinds=(kind,), top=3, grid=False)
        assert fig.axes[0].get_title().startswith(kinds.get(kind).title)
        fig = Mp.attention_on_manifold_plotly(x, x, k=1.0, query=0, kinds=(kind,), top=3, grid=False)
        assert fig.layout.annotations[0].text.startswith(kinds.get(kind).plain)
    for module in (Mm, Mp, S):
        assert not [n for n in vars(module) if n.lstrip("_").startswith(("ATTENTION_TEXT", "KIND_TEXT"))], module.__name__


def test_attention_on_manifold_draws_the_strongest_keys_along_geodesics():
    from hypviz import attention as A

    k = 1.0
    x = wrapped_normal(40, 2, k, scale=0.9, seed=22)
    top, query, lw = 7, 5, 6.0
    fig = Mm.attention_on_manifold_mpl(x, x, k=k, query=query, top=top, max_linewidth=lw)
    axes = fig.axes
    assert len(axes) == 3  # two disks and the colourbar
    assert "attention weight" in axes[2].get_ylabel()
    maps = {kind: A.attention_map(x, x, kind, k=k)[query] for kind in ("spatial", "distance")}
    w_max = max(float(m.max()) for m in maps.values())
    p = L.to_poincare(x, k=k).numpy()
    for ax, kind in zip(axes[:2], ("spatial", "distance")):
        assert kind in ax.get_title() and r"\mathrm{softmax}_j" in ax.get_title()
        assert ax.get_xlabel() == "$p_1$" and ax.get_ylabel() == "$p_2$"
        edges = edge_collection(ax)
        segs = edges.get_segments()
        assert len(segs) == top
        ends = np.array([s[-1] for s in segs])
        for s in segs:  # every edge leaves the query
            np.testing.assert_allclose(s[0], p[query], atol=1e-9)
        drawn = [int(np.argmin(np.linalg.norm(p - e, axis=1))) for e in ends]
        np.testing.assert_allclose(ends, p[drawn], atol=1e-9)
        row = maps[kind].numpy()
        expected = set(np.argsort(-row, kind="stable")[:top].tolist())
        assert set(drawn) == expected  # the edges are the top weights of attention_map
        if kind == "distance":
            assert query in drawn  # distance 0: the query's own key is among its strongest
        if query in drawn:  # self-attention: the key at the query's own position is drawn as a ring
            ring = [c for c in ax.collections if c.get_label().startswith("key at the query's position")]
            assert len(ring) == 1
            assert float(ring[0].get_linewidths()[0]) == pytest.approx(max(lw * row[query] / w_max, 0.8))
        widths = np.asarray(edges.get_linewidths())
        np.testing.assert_allclose(widths, np.maximum(lw * row[drawn] / w_max, 0.8), rtol=1e-12)
        alphas = np.asarray(edges.get_colors())[:, 3]
        assert np.all(np.diff(row[drawn]) >= 0) and np.all(np.diff(alphas) >= 0)  # strongest drawn last, most opaque
        # each edge is the exact geodesic: an arc orthogonal to the boundary (or a diameter)
        for s in segs:
            m = len(s) // 2
            u, v = s[-1] - s[0], s[m] - s[0]
            if abs(u[0] * v[1] - u[1] * v[0]) < 1e-6:
                continue
            c, rho = circle_through(s[0], s[m], s[-1])
            np.testing.assert_allclose(np.linalg.norm(s - c, axis=1), rho, rtol=1e-6)
            assert c @ c == pytest.approx(rho**2 + k, rel=1e-6)
    legend = fig.legends[0]
    assert "width" in legend.get_title().get_text()
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[0] == rf"$A_{{ij}} = {w_max:.3g}$" and any(s.startswith("query") for s in labels)
    assert "k=1" in fig._suptitle.get_text() and r"\tau" in fig._suptitle.get_text()
    img = rendered(fig)
    w = img.shape[1]
    assert img[:, : w // 2].std() > 10.0 and img[:, w // 2 :].std() > 10.0
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50


def test_attention_on_manifold_klein_projection_and_three_kinds():
    k = 2.0
    x = wrapped_normal(25, 2, k, scale=0.7, seed=25)
    fig = Mm.attention_on_manifold_mpl(x, x, k=k, query=2, kinds=("spatial", "distance", "focused"), top=4,
                                      model="klein", grid=False)
    assert len(fig.axes) == 4 and "Klein" in fig._suptitle.get_text()
    for ax in fig.axes[:3]:
        assert ax.get_xlabel() == "$K_1$"
        assert not [c for c in ax.collections if c.get_label() == "geodesic grid"]
        for s in edge_collection(ax).get_segments():  # Klein: straight chords
            a, b = s[-1] - s[0], s[1:-1] - s[0]
            assert np.abs(a[0] * b[:, 1] - a[1] * b[:, 0]).max() < 1e-9
    assert "focused" in fig.axes[2].get_title()
    # d > 2: one display projection for the query and all keys, stated on the figure
    q = wrapped_normal(6, 5, k, scale=0.7, seed=23)
    keys = wrapped_normal(25, 5, k, scale=0.7, seed=24)
    fig = Mm.attention_on_manifold_mpl(q, keys, k=k, query=2, top=4)
    assert "display projection" in fig._suptitle.get_text()
    proj = D.project_for_display(torch.cat([q[2:3], keys]), k=k)
    shown = L.to_poincare(proj.points, k=k).numpy()
    for ax in fig.axes[:2]:
        segs = edge_collection(ax).get_segments()
        assert len(segs) == 4
        for s in segs:
            np.testing.assert_allclose(s[0], shown[0], atol=1e-9)
            assert np.linalg.norm(shown[1:] - s[-1], axis=1).min() < 1e-9


def test_attention_on_manifold_bad_input():
    x = wrapped_normal(5, 2, 1.0)
    with pytest.raises(ValueError, match=r"query must be an integer from 0 to 4, got 5"):
        Mm.attention_on_manifold_mpl(x, x, query=5)
    with pytest.raises(ValueError, match="top must be a positive integer"):
        A.top_attention(x, x, top=0)
    with pytest.raises(ValueError, match="kinds must be one of " + re.escape(", ".join(map(repr, kinds.comparable())))):
        Mm.attention_on_manifold_mpl(x, x, kinds=("spatial", "not-a-kind"))  # a name the registry refuses: never a kind
    with pytest.raises(ValueError, match="kinds must be at least one of"):
        A.top_attention(x, x, kinds=())
    with pytest.raises(ValueError, match="temperature must be a positive"):
        A.top_attention(x, x, temperature=0.0)
    with pytest.raises(ValueError, match="different numbers of coordinates"):
        A.top_attention(x, wrapped_normal(5, 3, 1.0))
    with pytest.raises(ValueError, match=r"one set of points"):
        A.top_attention(x[None], x)
    with pytest.raises(ValueError, match="off the hyperboloid"):
        Mm.attention_on_manifold_mpl(x, x, k=2.0)
    with pytest.raises(ValueError, match="model"):
        Mm.attention_on_manifold_mpl(x, x, model="halfplane")


def test_far_points_draw_with_a_grid():
    # leaves of a low-distortion tree sit ~27 sqrt(k) from the origin: the grid must not run past float64's reach
    k = 1.0
    ang = torch.linspace(0, 2 * math.pi, 7, dtype=torch.float64)[:-1]
    u = torch.stack([torch.zeros(6, dtype=torch.float64), 27 * ang.cos(), 27 * ang.sin()], dim=-1)
    far = torch.cat([L.origin(2, k=k)[None], L.expmap0(u, k=k)])
    fig = Mm.poincare_figure_mpl(far, k=k, edges=[(0, 1), (1, 2)], grid=True)
    grid = [c for c in fig.axes[0].collections if c.get_label() == "geodesic grid"][0]
    segs = grid.get_segments()
    assert len(segs) >= 4
    assert all(np.isfinite(s).all() and (np.linalg.norm(s, axis=1) < 1.0 + 1e-12).all() for s in segs)
    klein = Mp.klein_figure_plotly(far, k=k, edges=[(0, 1)], grid=True)
    assert len(split_polylines(trace(klein, "geodesic grid").x, trace(klein, "geodesic grid").y)) >= 4


# --------------------------------------------------------------------------- #
# where the names live: geometry in hypviz.lorentz.projections, attention rows in hypviz.attention
# --------------------------------------------------------------------------- #
def test_the_geometry_lives_in_lorentz_projections_and_the_attention_rows_in_attention():
    from hypviz import attention as A
    from hypviz.attention.maps import top_keys
    from hypviz.lorentz import projections as D

    assert D.project_for_display.__module__ == "hypviz.lorentz.projections"
    assert A.top_attention is top_keys.top_attention
    assert A.TopKeys is top_keys.TopKeys and A.TopKeys.__module__ == "hypviz.attention.maps.top_keys"
    assert {"top_attention", "TopKeys"} <= set(A.__all__)
    for module in (Mm, Mp, S):  # the renderers and the scenes re-export neither
        assert not {"top_attention", "TopKeys", "project_for_display", "DisplayProjection"} & set(getattr(module, "__all__", ()))
    # top_attention uses attention's own kinds and default temperature (no list or formula of its own)
    x = wrapped_normal(9, 4, 2.0, seed=30)
    for kind in A.KINDS:
        t = A.top_attention(x, x, k=2.0, query=3, kinds=(kind,), top=3)[kind]
        torch.testing.assert_close(t.row, A.attention_map(x[3:4], x, kind, k=2.0)[0], rtol=0, atol=0)
        assert t.temperature == (None if kind == "focused" else math.sqrt(4))


def _calls(path) -> set[str]:
    """Every name called in a module: ``f(...)``, ``a.f(...)`` and ``a.b.f(...)`` as ``f``, ``a.f``, ``a.b.f``."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            names.add(".".join(reversed(parts)))
    return names


def test_the_plots_compute_no_geometry():
    from pathlib import Path

    import hypviz.plots as plots

    root = Path(plots.__file__).parent
    geometry = {"logmap0", "expmap0", "svd", "sinh", "cosh", "asinh", "acosh", "tanh", "atanh", "meshgrid",
                "from_klein", "from_poincare", "softmax", "attention_map", "focused_linear_map", "scores"}
    samples = {"linspace", "cos", "sin", "arange"}  # grids and circles: hypviz.lorentz.projections's job
    for name in ("manifold_mpl.py", "manifold_plotly.py", "scenes.py", "curves.py", "sweeps.py"):
        called = {c.split(".")[-1] for c in _calls(root / name)}
        assert not called & geometry, (name, called & geometry)
        if name != "curves.py" and name != "sweeps.py":  # (histogram bins are not geometry)
            assert not called & samples, (name, called & samples)
    # the renderers draw numpy arrays: they import neither torch nor hypviz.lorentz
    import ast

    for name in ("manifold_mpl.py", "manifold_plotly.py"):
        imported = set()
        for node in ast.walk(ast.parse((root / name).read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        heavy = ("torch", "hypviz.lorentz", "hypviz.lorentz.projections", "hypviz.attention")
        assert not {m for m in imported if m.startswith(heavy)}, name
    # no module of hypviz.plots is a re-export layer: each defines what it exports
    assert not (root / "manifold.py").exists()
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        if path.name != "__init__.py":
            assert [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))], path.name
    assert not [n for n in ast.parse((root / "__init__.py").read_text()).body
                if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))], "hypviz/plots/__init__.py is its docstring"
    # and what the scenes hold comes from hypviz.lorentz.projections: the same numbers
    from hypviz.lorentz import projections as D

    x = wrapped_normal(30, 5, 1.0, seed=31)
    proj = D.project_for_display(x, k=1.0)
    scene = S.disk_scene(x, k=1.0, grid=False)
    np.testing.assert_array_equal(scene.points, L.to_poincare(proj.points, k=1.0).numpy())
    assert scene.note == proj.note


# --------------------------------------------------------------------------- #
# one scene, two renderers
# --------------------------------------------------------------------------- #
def mpl_collection(ax, label):
    found = [c for c in ax.collections if c.get_label() == label]
    assert len(found) == 1, [c.get_label() for c in ax.collections]
    return found[0]


@pytest.mark.parametrize("model", ["poincare", "klein"])
def test_both_renderers_draw_the_same_disk_scene(model):
    from hypviz.plots import manifold_mpl, manifold_plotly

    k = 1.5
    x = wrapped_normal(14, 2, k, seed=32)
    edges = [(0, 1), (2, 3), (4, 5), (6, 9)]
    scene = S.disk_scene(x, k=k, model=model, values=np.arange(14.0), edges=edges, n_geodesic=30)
    assert scene.edges.shape == (4, 30, 2) and scene.points.shape == (14, 2) and scene.grid.shape[0] >= 4
    with pytest.raises(dataclasses.FrozenInstanceError):  # a scene is a description, not a workspace
        scene.k = 2.0
    mpl_fig = manifold_mpl.draw_disk_mpl(scene)
    plotly_fig = manifold_plotly.draw_disk_plotly(scene)
    ax = mpl_fig.axes[0]
    for label, lines in (("geodesics", scene.edges), ("geodesic grid", scene.grid)):
        drawn_mpl = mpl_collection(ax, label).get_segments()
        tr = trace(plotly_fig, label)
        drawn_plotly = split_polylines(tr.x, tr.y)
        assert len(drawn_mpl) == len(drawn_plotly) == lines.shape[0]
        for a, b, c in zip(drawn_mpl, drawn_plotly, lines):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_allclose(b, c, atol=1e-6)
    pts = mpl_collection(ax, "points")
    tr = trace(plotly_fig, "points")
    np.testing.assert_array_equal(pts.get_offsets(), scene.points)
    np.testing.assert_allclose(np.c_[tr.x, tr.y], scene.points, atol=1e-6)
    np.testing.assert_array_equal(pts.get_array(), scene.values)
    assert pts.get_clim() == scene.value_range == (plotly_fig.layout.coloraxis.cmin, plotly_fig.layout.coloraxis.cmax)
    # the figure functions are exactly "build the scene, draw it"
    again = Mp.disk_figure_plotly(x, k=k, model=model, values=np.arange(14.0), edges=edges, n_geodesic=30)
    assert again.to_json() == plotly_fig.to_json()


def test_both_renderers_draw_the_same_hyperboloid_and_three_model_scenes():
    from hypviz.plots import manifold_mpl, manifold_plotly

    k = 0.7
    x = wrapped_normal(11, 2, k, seed=33)
    scene = S.hyperboloid_scene(x, k=k, edges=[(0, 1), (1, 2)], grid=True, n_geodesic=20, sheet_resolution=(6, 9))
    assert scene.sheet.shape == (6, 9, 3) and scene.origin.tolist() == [0.0, 0.0, math.sqrt(k)]
    # display columns (x_1, x_2, x_t) of points on the sheet
    np.testing.assert_allclose(scene.sheet[..., 0] ** 2 + scene.sheet[..., 1] ** 2 - scene.sheet[..., 2] ** 2, -k,
                               atol=1e-12)
    np.testing.assert_array_equal(scene.points, x.numpy()[:, [1, 2, 0]])
    mpl_fig = manifold_mpl.draw_hyperboloid_mpl(scene)
    plotly_fig = manifold_plotly.draw_hyperboloid_plotly(scene)
    ax = mpl_fig.axes[0]
    assert rendered(mpl_fig).std() > 10.0  # 3-D collections report their (projected) segments once drawn
    for label, lines in (("geodesics", scene.edges), ("geodesic grid", scene.grid)):
        assert len(mpl_collection(ax, label).get_segments()) == lines.shape[0]
        tr = trace(plotly_fig, label)
        assert sum(v is None for v in tr.x) == lines.shape[0] - 1  # one trace, a break between lines
    xs, ys, zs = mpl_collection(ax, "points")._offsets3d
    np.testing.assert_array_equal(np.c_[xs, ys, zs], scene.points)
    tr = trace(plotly_fig, "points")
    np.testing.assert_allclose(np.c_[tr.x, tr.y, tr.z], scene.points, atol=1e-6)
    # three models: one preparation, the disks of the same display points
    three = S.three_models_scene(x, k=k, values=np.linspace(0, 1, 11), edges=[(0, 1)], n_geodesic=20)
    np.testing.assert_array_equal(three.poincare.points, L.to_poincare(x, k=k).numpy())
    np.testing.assert_array_equal(three.klein.points, L.to_klein(x, k=k).numpy())
    assert three.hyperboloid.value_range == three.poincare.value_range == three.klein.value_range == (0.0, 1.0)
    fig = manifold_mpl.draw_three_models_mpl(three)
    pfig = manifold_plotly.draw_three_models_plotly(three)
    assert len(fig.axes) == 4  # three panels and one colourbar
    for panel, disk in zip(fig.axes[1:3], (three.poincare, three.klein)):
        assert len(mpl_collection(panel, "geodesic grid").get_segments()) == disk.grid.shape[0]
    assert [t.type for t in pfig.data].count("scatter") == 2 * 5


def test_both_renderers_draw_the_same_attention_scene():
    from hypviz.plots import manifold_mpl, manifold_plotly

    k = 1.0
    x = wrapped_normal(30, 2, k, scale=0.9, seed=34)
    scene = S.attention_scene(x, x, k=k, query=4, top=5, kinds=("spatial", "distance", "focused"), grid=False)
    assert [p.kind for p in scene.panels] == ["spatial", "distance", "focused"] and scene.n_keys == 30
    for panel in scene.panels:
        assert np.all(np.diff(panel.edge_weights) >= 0)  # weakest first: the strongest is drawn on top
        np.testing.assert_allclose(panel.edge_widths, np.maximum(6.0 * panel.edge_weights / scene.w_max, 0.8))
    mpl_fig = manifold_mpl.draw_attention_mpl(scene)
    pfig = manifold_plotly.draw_attention_plotly(scene)
    for col, (ax, panel) in enumerate(zip(mpl_fig.axes, scene.panels), start=1):
        segs = edge_collection(ax).get_segments()
        xref = pfig.get_subplot(1, col).yaxis.anchor  # the panel's x axis ("x", "x2", ...)
        edges = [t for t in pfig.data if (t.name or "").startswith("edge, A =") and t.xaxis == xref]
        assert len(segs) == len(edges) == panel.edges.shape[0] == len(panel.keys)
        for seg, tr, line in zip(segs, edges, panel.edges):
            np.testing.assert_array_equal(seg, line)
            np.testing.assert_allclose(np.c_[tr.x, tr.y], line, atol=1e-6)
        widths = [tr.line.width for tr in edges]
        np.testing.assert_allclose(widths, np.asarray(edge_collection(ax).get_linewidths()), atol=1e-3)
    keys = [t for t in pfig.data if t.name == "keys"]
    assert len(keys) == 3 and all(len(t.x) == 30 for t in keys)
    assert pfig.layout.coloraxis.cmin == 0.0 and pfig.layout.coloraxis.cmax == pytest.approx(scene.w_max, abs=1e-6)
    text = pfig.to_json()
    assert len(text) < 200_000
    titles = [a.text for a in pfig.layout.annotations]
    assert len(titles) == 3 and all("κ" in t for t in titles) and "focused" in titles[2]
    assert "Attention of query 4" in pfig.layout.title.text and "τ = 1.41" in pfig.layout.title.text
    fig2 = Mp.attention_on_manifold_plotly(x, x, k=k, query=4, top=5, kinds=("spatial", "distance", "focused"), grid=False)
    assert fig2.to_json() == text  # deterministic, and the figure function is "scene, then draw"


# --------------------------------------------------------------------------- #
# composing: ax= and axes=
# --------------------------------------------------------------------------- #
def test_two_disks_compose_into_one_figure():
    from matplotlib.figure import Figure

    k = 1.0
    x = wrapped_normal(12, 2, k, seed=35)
    fig = Figure(figsize=(9, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    assert Mm.poincare_figure_mpl(x, k=k, edges=[(0, 1)], ax=left, legend=False) is fig
    assert Mm.klein_figure_mpl(x, k=k, values=np.arange(12.0), edges=[(0, 1)], ax=right) is fig
    assert left.get_xlabel() == "$p_1$" and right.get_xlabel() == "$K_1$"
    assert len(mpl_collection(left, "geodesics").get_segments()) == 1
    assert len(fig.axes) == 3  # two disks and the right one's colourbar
    img = rendered(fig)
    w = img.shape[1]
    assert img[:, : w // 2].std() > 10.0 and img[:, w // 2 :].std() > 10.0
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        Mm.disk_figure_mpl(x, k=k, ax="left")
    # the hyperboloid needs a 3-D Axes
    host = Figure()
    with pytest.raises(TypeError, match="projection='3d'"):
        Mm.hyperboloid_figure_mpl(x, k=k, ax=host.add_subplot())
    ax3 = host.add_subplot(projection="3d")
    assert Mm.hyperboloid_figure_mpl(x, k=k, ax=ax3) is host and ax3.get_zlabel().startswith("$x_t$")


def test_multi_panel_figures_compose_through_subfigures():
    from matplotlib.figure import Figure

    k = 1.0
    x = wrapped_normal(20, 2, k, scale=0.9, seed=36)
    fig = Figure(figsize=(12, 10), layout="constrained")
    top, bottom = fig.subfigures(2, 1)
    att_axes = top.subplots(1, 2)
    out = Mm.attention_on_manifold_mpl(x, x, k=k, query=1, top=3, grid=False, axes=att_axes)
    assert out is fig
    three_axes = [bottom.add_subplot(1, 3, 1, projection="3d"), bottom.add_subplot(1, 3, 2), bottom.add_subplot(1, 3, 3)]
    assert Mm.three_models_figure_mpl(x, k=k, edges=[(0, 1)], axes=three_axes) is fig
    # each multi-panel figure keeps its own overall title and legend, on its own subfigure
    assert "Attention of query 1" in top.get_suptitle() and "three models" in bottom.get_suptitle()
    assert len(top.legends) == 1 and not bottom.legends and not fig.legends
    assert len(edge_collection(att_axes[1]).get_segments()) >= 3
    img = rendered(fig)
    h = img.shape[0]
    assert img[: h // 2].std() > 10.0 and img[h // 2 :].std() > 10.0
    with pytest.raises(ValueError, match="axes must be 2 Axes"):
        Mm.attention_on_manifold_mpl(x, x, k=k, axes=att_axes[:1])
    with pytest.raises(TypeError, match=r"axes\[0\] must be a matplotlib Axes with projection='3d'"):
        Mm.three_models_figure_mpl(x, k=k, axes=list(Figure().subplots(1, 3)))
    other = Figure().subplots()
    with pytest.raises(ValueError, match="one figure"):
        Mm.attention_on_manifold_mpl(x, x, k=k, axes=[att_axes[0], other])


def test_display_geometry_grids_sheet_and_boundary():
    from hypviz.lorentz import projections as D

    k = 2.0
    lines = D.geodesic_grid(k=k, radius=2.0, spacing=0.5, n=17)
    assert lines.shape[1:] == (17, 3) and lines.shape[0] == 2 * 7  # a = -1.5 .. 1.5 on each of two axes
    L.check_points(lines, k=k)
    klein = L.to_klein(lines, k=k).numpy()
    for line in klein:  # a chord of the Klein disk perpendicular to one display axis
        spread = np.ptp(line, axis=0)
        assert spread.min() < 1e-9 and spread.max() > 0.1
    far = D.geodesic_grid(k=k, radius=1.0, spacing=0.5, n=5, reach=100.0)  # reach capped at GRID_MAX_REACH sqrt(k)
    assert float(L.dist(far, L.origin(2, k=k), k=k).max()) == pytest.approx(D.GRID_MAX_REACH * math.sqrt(k), rel=1e-6)
    assert D.geodesic_grid(k=k, radius=0.1, spacing=0.5, n=5).shape == (2, 5, 3)  # only the two axes
    sheet = D.polar_sheet(k=k, radius=1.5, n_radial=4, n_angle=7)
    assert sheet.shape == (4, 7, 3)
    L.check_points(sheet, k=k)
    np.testing.assert_allclose(L.dist(sheet, L.origin(2, k=k), k=k)[:, 0].numpy(), np.linspace(0, 1.5, 4), atol=1e-12)
    px, py, pts = D.poincare_polar_grid(k=k, n_radial=5, n_angle=9, edge=0.9)
    assert px.shape == py.shape == (5, 9) and pts.shape == (45, 3)
    rho = L.dist(pts.reshape(5, 9, 3)[:, 0], L.origin(2, k=k), k=k).numpy() / math.sqrt(k)
    np.testing.assert_allclose(np.diff(rho), rho[1] - rho[0], rtol=1e-9)  # evenly spaced in geodesic distance
    with pytest.raises(ValueError, match="edge"):
        D.poincare_polar_grid(k=k, n_radial=5, n_angle=9, edge=1.0)
    circle = D.disk_boundary(k=k, n=13)
    assert circle.shape == (13, 2)
    np.testing.assert_allclose(np.hypot(circle[:, 0], circle[:, 1]), math.sqrt(k))
    np.testing.assert_allclose(circle[0], circle[-1], atol=1e-15)


def test_rounded_stores_minus_zero_as_zero_and_nan_as_none():
    # the plotly renderer's (and the explorables') rounding of stored figure data
    assert Mp.rounded(np.array([-0.0, 1.23456789, np.nan]), 3) == [0.0, 1.235, None]
