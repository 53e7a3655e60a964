"""Tests of hypviz.plots.manifold: geometry of what is drawn, figure structure, images, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from hypviz import lorentz as L
from hypviz.plots import manifold as M

matplotlib = pytest.importorskip("matplotlib")
go = pytest.importorskip("plotly.graph_objects")


def wrapped_normal(n: int, d: int, k: float, scale: float = 0.8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, d, generator=g, dtype=torch.float64) * scale
    return L.expmap0(torch.nn.functional.pad(u, (1, 0)), k)


def circle_through(p: np.ndarray, q: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre and radius of the circle through three points of the plane."""
    a = np.array([[q[0] - p[0], q[1] - p[1]], [r[0] - p[0], r[1] - p[1]]]) * 2.0
    b = np.array([q @ q - p @ p, r @ r - p @ p])
    c = np.linalg.solve(a, b)
    return c, float(np.linalg.norm(p - c))


def split_polylines(xs, ys) -> list[np.ndarray]:
    """Undo the None separators of a single plotly line trace."""
    lines, cur = [], []
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
    p = L.to_poincare(L.geodesic(x, y, 41, k), k).numpy()
    for arc in p:
        c, rho = circle_through(arc[0], arc[20], arc[-1])
        # every sample on that circle, and the circle meets |p| = sqrt(k) at right angles
        np.testing.assert_allclose(np.linalg.norm(arc - c, axis=1), rho, rtol=1e-7)
        assert c @ c == pytest.approx(rho**2 + k, rel=1e-7)


@pytest.mark.parametrize("k", [0.5, 2.0])
def test_klein_geodesics_are_straight(k):
    x = wrapped_normal(5, 2, k, scale=1.5, seed=5)
    y = wrapped_normal(5, 2, k, scale=1.5, seed=6)
    q = L.to_klein(L.geodesic(x, y, 41, k), k).numpy()
    for chord in q:
        a, b = chord[-1] - chord[0], chord[1:-1] - chord[0]
        cross = a[0] * b[:, 1] - a[1] * b[:, 0]
        assert np.abs(cross).max() <= 1e-10 * max(1.0, float(a @ a))


def test_drawn_disk_geodesics_and_grid_have_the_right_shape():
    k = 2.0
    x = wrapped_normal(12, 2, k, seed=7)
    edges = [(0, 1), (2, 3), (4, 5), (6, 7)]
    poincare = M.poincare_figure_plotly(x, k, edges=edges, grid=True)
    klein = M.klein_figure_plotly(x, k, edges=edges, grid=True)
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
    np.testing.assert_allclose(np.c_[pts.x, pts.y], L.to_poincare(x, k).numpy(), atol=1e-6)
    pts = trace(klein, "points")
    np.testing.assert_allclose(np.c_[pts.x, pts.y], L.to_klein(x, k).numpy(), atol=1e-6)


# --------------------------------------------------------------------------- #
# plotly figures
# --------------------------------------------------------------------------- #
def test_hyperboloid_plotly_structure_labels_and_round_trip():
    k = 1.5
    x = wrapped_normal(20, 2, k, seed=8)
    values = L.inner(x, L.origin(2, k))
    fig = M.hyperboloid_figure_plotly(x, k, values=values, value_label="<x, o>_L", edges=[(0, 1), (2, 3)], grid=True)
    assert [t.type for t in fig.data] == ["surface", "scatter3d", "scatter3d", "scatter3d", "scatter3d"]
    assert [t.name for t in fig.data][1:] == ["geodesic grid", "geodesics", "points", "origin (√k, 0, 0)"]
    plain = M.hyperboloid_figure_plotly(x, k, show_origin=False)
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
    fig2 = M.hyperboloid_figure_plotly(x, k, values=values, value_label="<x, o>_L", edges=[(0, 1), (2, 3)], grid=True)
    assert fig2.to_json() == text


def test_disk_and_three_panel_plotly_structure():
    k = 1.0
    x = wrapped_normal(15, 2, k, seed=9)
    fig = M.disk_figure_plotly(x, k, model="klein", values=np.arange(15.0), value_label="index", edges=[(0, 1)])
    assert [t.name for t in fig.data] == [
        "boundary |K| = √k (ideal points)", "geodesic grid", "geodesics", "points", "origin"]
    assert fig.layout.xaxis.title.text == "K₁" and fig.layout.yaxis.title.text == "K₂"
    assert fig.layout.yaxis.scaleanchor == "x"
    assert "Klein" in fig.layout.title.text
    boundary = fig.data[0]
    np.testing.assert_allclose(np.hypot(boundary.x, boundary.y), 1.0, atol=1e-6)
    three = M.three_models_figure_plotly(x, k, values=np.arange(15.0), value_label="index", edges=[(0, 1)])
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
    proj = M.project_for_display(x, k)
    assert proj.points.shape == (25, 3) and proj.basis.shape == (6, 2)
    L.check_points(proj.points, k)
    assert 0.0 < proj.kept <= 1.0 and "PCA of logmap0" in proj.note and "d=6" in proj.note
    torch.testing.assert_close(proj.basis.T @ proj.basis, torch.eye(2, dtype=torch.float64))
    fig = M.hyperboloid_figure_plotly(x, k, edges=[(0, 1)])
    assert "display projection" in fig.layout.title.text
    fig_mpl = M.poincare_figure_mpl(x, k)
    assert "display projection" in fig_mpl.axes[0].get_title()
    # points that already lie in a coordinate plane keep their distances exactly
    flat = wrapped_normal(10, 2, k, seed=11)
    embedded = torch.cat([flat, torch.zeros(10, 3, dtype=torch.float64)], dim=1)
    p = M.project_for_display(embedded, k)
    assert p.kept == pytest.approx(1.0)
    torch.testing.assert_close(L.pairwise_sqdist(p.points, p.points, k), L.pairwise_sqdist(flat, flat, k))
    two = M.project_for_display(flat, k)
    assert two.basis is None and two.note == "" and torch.equal(two.points, flat)
    with pytest.raises(ValueError, match="d >= 2"):
        M.project_for_display(L.lift(torch.ones(4, 1, dtype=torch.float64)), k)


def test_bad_input_is_refused_with_a_clear_message():
    x = wrapped_normal(5, 2, 1.0)
    with pytest.raises(ValueError, match="one value per point"):
        M.hyperboloid_figure_plotly(x, values=np.zeros(4))
    with pytest.raises(ValueError, match=r"indices must lie in 0\.\.4"):
        M.poincare_figure_plotly(x, edges=[(0, 5)])
    with pytest.raises(ValueError, match=r"\(E, 2\)"):
        M.poincare_figure_mpl(x, edges=[0, 1, 2])
    with pytest.raises(ValueError, match="model"):
        M.disk_figure_plotly(x, model="halfplane")
    with pytest.raises(ValueError, match="off the hyperboloid"):
        M.hyperboloid_figure_mpl(x, k=2.0)


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
    values = L.inner(x, L.origin(2, k))
    label = r"$\langle x,o\rangle_L$"
    hyp = M.hyperboloid_figure_mpl(x, k, values=values, value_label=label, edges=[(0, 1)], grid=True)
    ax = hyp.axes[0]
    assert ax.name == "3d"
    assert "x_1" in ax.get_xlabel() and "x_2" in ax.get_ylabel() and "x_t" in ax.get_zlabel()
    assert r"\langle x,x\rangle_L=-k" in ax.get_title()
    assert hyp.axes[1].get_ylabel() == label  # the colourbar says what it measures
    disk = M.poincare_figure_mpl(x, k, values=values, value_label=label, edges=[(0, 1), (2, 3)])
    ax = disk.axes[0]
    assert ax.get_xlabel() == "$p_1$" and ax.get_ylabel() == "$p_2$" and "Poincaré" in ax.get_title()
    assert disk.axes[1].get_ylabel() == label
    assert [c.get_label() for c in ax.collections] == ["geodesic grid", "geodesics", "points", "origin"]
    assert len(ax.collections[1].get_segments()) == 2  # one exact geodesic per edge
    klein = M.klein_figure_mpl(x, k)
    assert klein.axes[0].get_xlabel() == "$K_1$" and len(klein.axes) == 1  # no values: no colourbar
    for fig in (hyp, disk, klein):
        img = rendered(fig)
        assert img.std() > 10.0, "figure rendered (almost) blank"
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50


def test_three_panel_matplotlib_figure():
    k = 0.5
    x = wrapped_normal(15, 2, k, seed=13)
    fig = M.three_models_figure_mpl(x, k, values=np.linspace(0, 1, 15), value_label="t", edges=[(0, 1)])
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
    tops = M.top_attention(q, keys, k, query=4, kinds=("spatial", "distance", "lorentz", "focused"), top=6,
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
    assert M.top_attention(q, keys, k, top=100)["spatial"].indices.shape == (30,)  # capped at M
    assert M.top_attention(q, keys, k)["distance"].temperature == pytest.approx(math.sqrt(3))


def test_top_attention_keeps_exact_ties_together_whatever_the_rounding():
    from hypviz import attention as A

    # keys at one distance from the query at the origin: their weights are equal in exact
    # arithmetic and differ by rounding only; which of them is drawn must not depend on it
    k = 1.0
    ang = torch.arange(12, dtype=torch.float64) * (2 * math.pi / 12)
    ring = torch.stack([torch.zeros(12, dtype=torch.float64), 1.3 * ang.cos(), 1.3 * ang.sin()], dim=-1)
    near = torch.tensor([[0.0, 0.2, 0.1], [0.0, -0.4, 0.3]], dtype=torch.float64)
    keys = L.expmap0(torch.cat([ring, near]), k)                     # keys 0..11 tied, 12 and 13 nearer
    q = L.origin(2, k)[None]
    for kind in ("distance", "lorentz", "spatial"):
        row = A.attention_map(q, keys, kind, k=k)[0]
        spread = float(row[:12].max() / row[:12].min() - 1)
        assert spread < 1e-12                                          # tied to rounding
    tops = M.top_attention(q, keys, k, query=0, kinds=("distance", "spatial"), top=4)
    d = tops["distance"]
    assert d.indices.tolist() == [12, 13] + list(range(12))          # the two near keys, then the whole tied ring
    assert torch.equal(d.weights, d.row[d.indices])
    # spatial: the query is the origin, q_s = 0, so every key is tied: all keys, by index
    assert tops["spatial"].indices.tolist() == list(range(14))
    # the reordering of tied keys is by index, for any permutation of the keys
    perm = torch.randperm(14, generator=torch.Generator().manual_seed(1))
    again = M.top_attention(q, keys[perm], k, kinds=("distance",), top=4)["distance"]
    assert sorted(perm[again.indices].tolist()) == sorted(d.indices.tolist())
    tied = again.indices[2:]
    assert tied.tolist() == sorted(tied.tolist())
    # without a tie at the cut: exactly top keys
    assert len(M.top_attention(q, keys, k, kinds=("distance",), top=2)["distance"].indices) == 2
    fig = M.attention_on_manifold_mpl(q, keys, k, top=4, grid=False)
    assert len(edge_collection(fig.axes[1]).get_segments()) == 14   # distance panel: the tied ring is drawn
    assert "tied" in fig.legends[0].get_title().get_text()
    with pytest.raises(ValueError, match="tie_rtol"):
        M.top_attention(q, keys, k, tie_rtol=1.5)


def test_attention_titles_write_keys_kappa_and_cover_every_kind():
    from hypviz import attention as A

    assert set(M._ATTENTION_TEXT) == set(A.KINDS)
    for text in M._ATTENTION_TEXT.values():
        assert r"\kappa" in text and "k_" not in text and "(k" not in text


def test_attention_on_manifold_draws_the_strongest_keys_along_geodesics():
    from hypviz import attention as A

    k = 1.0
    x = wrapped_normal(40, 2, k, scale=0.9, seed=22)
    top, query, lw = 7, 5, 6.0
    fig = M.attention_on_manifold_mpl(x, x, k, query=query, top=top, max_linewidth=lw)
    axes = fig.axes
    assert len(axes) == 3  # two disks and the colourbar
    assert "attention weight" in axes[2].get_ylabel()
    maps = {kind: A.attention_map(x, x, kind, k=k)[query] for kind in ("spatial", "distance")}
    w_max = max(float(m.max()) for m in maps.values())
    p = L.to_poincare(x, k).numpy()
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
    fig = M.attention_on_manifold_mpl(x, x, k, query=2, kinds=("spatial", "distance", "focused"), top=4,
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
    fig = M.attention_on_manifold_mpl(q, keys, k, query=2, top=4)
    assert "display projection" in fig._suptitle.get_text()
    proj = M.project_for_display(torch.cat([q[2:3], keys]), k)
    shown = L.to_poincare(proj.points, k).numpy()
    for ax in fig.axes[:2]:
        segs = edge_collection(ax).get_segments()
        assert len(segs) == 4
        for s in segs:
            np.testing.assert_allclose(s[0], shown[0], atol=1e-9)
            assert np.linalg.norm(shown[1:] - s[-1], axis=1).min() < 1e-9


def test_attention_on_manifold_bad_input():
    x = wrapped_normal(5, 2, 1.0)
    with pytest.raises(ValueError, match=r"query: expected an integer query index in 0\.\.4"):
        M.attention_on_manifold_mpl(x, x, query=5)
    with pytest.raises(ValueError, match="top: expected a positive integer"):
        M.top_attention(x, x, top=0)
    with pytest.raises(ValueError, match="kinds: each kind must be one of"):
        M.attention_on_manifold_mpl(x, x, kinds=("spatial", "cosine"))
    with pytest.raises(ValueError, match="different numbers of coordinates"):
        M.top_attention(x, wrapped_normal(5, 3, 1.0))
    with pytest.raises(ValueError, match=r"one set of points"):
        M.top_attention(x[None], x)
    with pytest.raises(ValueError, match="off the hyperboloid"):
        M.attention_on_manifold_mpl(x, x, 2.0)
    with pytest.raises(ValueError, match="model"):
        M.attention_on_manifold_mpl(x, x, model="halfplane")


def test_far_points_draw_with_a_grid():
    # leaves of a low-distortion tree sit ~27 sqrt(k) from the origin: the grid must not run past float64's reach
    k = 1.0
    ang = torch.linspace(0, 2 * math.pi, 7, dtype=torch.float64)[:-1]
    u = torch.stack([torch.zeros(6, dtype=torch.float64), 27 * ang.cos(), 27 * ang.sin()], dim=-1)
    far = torch.cat([L.origin(2, k)[None], L.expmap0(u, k)])
    fig = M.poincare_figure_mpl(far, k, edges=[(0, 1), (1, 2)], grid=True)
    grid = [c for c in fig.axes[0].collections if c.get_label() == "geodesic grid"][0]
    segs = grid.get_segments()
    assert len(segs) >= 4
    assert all(np.isfinite(s).all() and (np.linalg.norm(s, axis=1) < 1.0 + 1e-12).all() for s in segs)
    klein = M.klein_figure_plotly(far, k, edges=[(0, 1)], grid=True)
    assert len(split_polylines(trace(klein, "geodesic grid").x, trace(klein, "geodesic grid").y)) >= 4
