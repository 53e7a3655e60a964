"""Tests for hypviz.data: near-origin samples, tree embeddings and their distortion, HTC queries/keys."""

from __future__ import annotations

import math

import mpmath
import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hypviz import data
from hypviz.lorentz import check_points, dist, logmap0


def lorentz_norm(x: torch.Tensor) -> torch.Tensor:
    return -x[..., 0] ** 2 + (x[..., 1:] ** 2).sum(-1)


# --------------------------------------------------------------------------- #
# independent oracles (no hypviz.lorentz inside)
# --------------------------------------------------------------------------- #
def polar_distances(points: torch.Tensor, k: float) -> np.ndarray:
    """All distances in the hyperbolic plane from polar coordinates, by the half-angle law of cosines.

    With r = arsinh(|x_s| / sqrt(k)) and phi the polar angle of x_s:
    sinh^2(d / (2 sqrt(k))) = sinh^2((r_i - r_j) / 2) + sinh(r_i) sinh(r_j) sin^2((phi_i - phi_j) / 2),
    a sum of non-negative terms (no cancellation at any radius).
    """
    x = points.numpy()
    rk = math.sqrt(k)
    r = np.arcsinh(np.linalg.norm(x[:, 1:], axis=1) / rk)
    phi = np.arctan2(x[:, 2], x[:, 1])
    s = np.sinh((r[:, None] - r[None]) / 2) ** 2 + np.sinh(r)[:, None] * np.sinh(r)[None] * np.sin(
        (phi[:, None] - phi[None]) / 2
    ) ** 2
    return 2 * rk * np.arcsinh(np.sqrt(s))


def mp_distance(x: np.ndarray, y: np.ndarray, k: float) -> float:
    """arcosh(-<x, y>_L / k) at 60 digits, time coordinates re-lifted from the stored spatial parts."""
    with mpmath.workdps(60):
        xs = [mpmath.mpf(float(v)) for v in x[1:]]
        ys = [mpmath.mpf(float(v)) for v in y[1:]]
        kk = mpmath.mpf(k)
        xt = mpmath.sqrt(sum(v * v for v in xs) + kk)
        yt = mpmath.sqrt(sum(v * v for v in ys) + kk)
        inner = -xt * yt + sum(a * b for a, b in zip(xs, ys))
        return float(mpmath.sqrt(kk) * mpmath.acosh(-inner / kk))


def hop_matrix(graph: nx.Graph, nodes: tuple) -> np.ndarray:
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    return np.array([[lengths[a][b] for b in nodes] for a in nodes], dtype=float)


def distortion_figures(d_hyp: np.ndarray, d_graph: np.ndarray, scale: float) -> tuple[float, float, tuple]:
    iu = np.triu_indices(len(d_hyp), 1)
    ratio = d_hyp[iu] / (scale * d_graph[iu])
    worst = ratio.max() / ratio.min()
    average = np.mean(np.abs(ratio - 1.0))
    extreme = ((iu[0][ratio.argmax()], iu[1][ratio.argmax()]), (iu[0][ratio.argmin()], iu[1][ratio.argmin()]))
    return float(worst), float(average), extreme


@pytest.fixture(scope="module")
def ternary() -> data.TreeEmbedding:
    return data.balanced_tree(3, 5)


@pytest.fixture(scope="module")
def karate() -> data.TreeEmbedding:
    return data.karate_club()


# --------------------------------------------------------------------------- #
# near-origin samples
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("k", [0.25, 1.0, 3.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_wrapped_normal_on_hyperboloid(k, dtype):
    x = data.wrapped_normal((4, 50), 3, 0.8, k=k, seed=1, dtype=dtype)
    assert x.shape == (4, 50, 4) and x.dtype == dtype
    check_points(x, k=k)
    x64 = x.double()
    tol = 1e-6 if dtype == torch.float32 else 1e-14  # relative to |x|^2, a few ulps
    assert torch.all((lorentz_norm(x64) + k).abs() <= tol * (x64 * x64).sum(-1))


def test_wrapped_normal_tangent_is_gaussian_with_the_scale():
    scale, k, n, d = 0.7, 2.0, 40000, 3
    x = data.wrapped_normal(n, d, scale, k=k, seed=123)
    u = logmap0(x, k=k)
    assert torch.all(u[:, 0] == 0)
    u = u[:, 1:].numpy()
    assert np.all(np.abs(u.mean(axis=0)) < 5 * scale / math.sqrt(n))
    assert np.allclose(u.std(axis=0), scale, rtol=0.03)
    z = u / scale
    assert np.allclose((z**4).mean(axis=0), 3.0, atol=0.25)  # Gaussian kurtosis
    assert abs(np.mean(np.abs(z[:, 0]) < 1.0) - 0.6827) < 0.01  # one-sigma mass
    # distance from the origin is the tangent norm: mean sqrt(k) ... = scale * E|z|, E|z| of chi_3
    radius = dist(x, torch.tensor([math.sqrt(k), 0, 0, 0], dtype=torch.float64), k=k).numpy()
    assert np.allclose(radius, np.linalg.norm(u, axis=1), rtol=1e-9, atol=1e-12)
    assert abs(radius.mean() / (scale * 2 * math.sqrt(2 / math.pi)) - 1) < 0.02


def test_wrapped_normal_seeds_are_deterministic():
    a = data.wrapped_normal(10, 2, seed=5)
    assert torch.equal(a, data.wrapped_normal(10, 2, seed=5))
    assert not torch.equal(a, data.wrapped_normal(10, 2, seed=6))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(data.wrapped_normal(10, 2, seed=g1), data.wrapped_normal(10, 2, seed=g2))
    n1 = data.wrapped_normal(10, 2, seed=np.random.default_rng(9))
    assert torch.equal(n1, data.wrapped_normal(10, 2, seed=np.random.default_rng(9)))
    torch.manual_seed(3)
    b = data.wrapped_normal(10, 2, seed=None)
    torch.manual_seed(3)
    assert torch.equal(b, data.wrapped_normal(10, 2, seed=None))


@pytest.mark.parametrize("d, r", [(64, 0.1), (64, 3.0), (2, 1.0)])
def test_lifted_gaussian_mean_norm(d, r):
    k = 1.5
    x = data.lifted_gaussian(20000, d, r, k=k, seed=2)
    check_points(x, k=k)
    norms = torch.linalg.vector_norm(x[:, 1:], dim=-1)
    assert abs(float(norms.mean()) - r) < 5 * float(norms.std()) / math.sqrt(20000)
    assert torch.allclose(x[:, 0], torch.sqrt(norms**2 + k), rtol=1e-12)


# --------------------------------------------------------------------------- #
# tree embeddings
# --------------------------------------------------------------------------- #
def test_balanced_tree_floor(ternary):
    e = ternary
    assert e.points.shape == (364, 3) and e.points.dtype == torch.float64
    check_points(e.points, k=1.0)
    assert e.worst_distortion <= 1.1
    assert 0 < e.average_distortion < 0.1
    assert e.edges.shape == (363, 2) and int(e.depth.max()) == 5
    assert e.root == 0 and torch.equal(e.points[0], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    # every tree edge has hyperbolic length exactly `scale`
    # (to float64's placement error, ~1.5 eps |x_s| per point)
    edge_len = polar_distances(e.points, e.k)[e.edges[:, 0], e.edges[:, 1]]
    place = 3 * np.finfo(np.float64).eps * e.max_norm
    assert np.allclose(edge_len, e.edge_length, rtol=0, atol=place)
    assert e.max_radius <= data.MAX_RADIUS * (1 + 1e-9)
    assert "worst_distortion=1.1" in repr(e)


def test_balanced_tree_distortion_matches_independent_recomputation(ternary):
    e = ternary
    d_hyp = polar_distances(e.points, e.k)
    d_graph = hop_matrix(nx.balanced_tree(3, 5), e.nodes)
    worst, average, extreme = distortion_figures(d_hyp, d_graph, e.edge_length)
    assert worst <= 1.1
    assert worst == pytest.approx(e.worst_distortion, rel=1e-5)
    assert average == pytest.approx(e.average_distortion, rel=1e-5)
    # the oracle itself against 60-digit arithmetic on the extreme pairs and a few others
    x = e.points.numpy()
    pairs = list(extreme) + [(0, 363), (120, 121), (200, 363), (40, 41)]
    for i, j in pairs:
        # the polar angle's rounding moves a point by ~eps |x_s|: 1e-6 relative at this radius
        assert d_hyp[i, j] == pytest.approx(mp_distance(x[i], x[j], e.k), rel=1e-6)


def test_distortion_agrees_with_lorentz_dist_at_moderate_radius():
    # where hypviz.lorentz.dist is accurate (radius < 6 here), the reported figures are its figures
    tree = nx.balanced_tree(2, 4)
    e = data.embed_tree(tree, 0, edge_length=1.0, k=0.5)
    assert e.max_radius < 6
    d_hyp = dist(e.points[:, None, :], e.points[None, :, :], k=0.5).numpy()
    worst, average, _ = distortion_figures(d_hyp, hop_matrix(tree, e.nodes), e.edge_length)
    assert (worst, average) == pytest.approx((e.worst_distortion, e.average_distortion), rel=1e-9)


def test_even_spacing_needs_a_longer_edge(ternary):
    # Sarkar's even spacing (parent_gap=1) at the default edge length misses the floor
    even = data.balanced_tree(3, 5, edge_length=ternary.edge_length, parent_gap=1.0)
    assert even.worst_distortion > 1.1 > ternary.worst_distortion - 1e-12
    # and a shorter edge is worse (the construction's distortion falls with the edge length)
    short = data.balanced_tree(3, 5, edge_length=3.0)
    assert short.worst_distortion > ternary.worst_distortion


def test_curvature_rescales_the_embedding(ternary):
    # the hyperboloid of k is sqrt(k) times that of k = 1: same distortion, edge length times sqrt(k)
    k = 4.0
    e = data.balanced_tree(3, 5, k=k, edge_length=2 * ternary.edge_length)
    check_points(e.points, k=k)
    assert torch.allclose(e.points, 2 * ternary.points, rtol=1e-12)
    assert e.worst_distortion == pytest.approx(ternary.worst_distortion, rel=1e-6)
    small, small_k = data.balanced_tree(2, 3), data.balanced_tree(2, 3, k=k)
    assert small_k.edge_length == pytest.approx(2 * small.edge_length, rel=1e-12)
    assert small_k.worst_distortion == pytest.approx(small.worst_distortion, rel=1e-6)


def test_random_networkx_tree():
    tree = nx.random_labeled_tree(40, seed=7)
    e = data.embed_tree(tree)
    check_points(e.points, k=1.0)
    assert e.root in nx.center(tree)
    assert e.nodes == tuple(tree.nodes) and e.points.shape == (40, 3)
    assert math.isfinite(e.worst_distortion) and e.worst_distortion >= 1.0
    assert e.average_distortion >= 0.0
    worst, average, _ = distortion_figures(polar_distances(e.points, 1.0), hop_matrix(tree, e.nodes), e.edge_length)
    assert worst == pytest.approx(e.worst_distortion, rel=1e-5)
    assert average == pytest.approx(e.average_distortion, rel=1e-5)
    # explicit root and scale; a directed tree (nx.bfs_tree output) is read as undirected
    f = data.embed_tree(nx.bfs_tree(tree, 3), root=3, edge_length=2.0)
    assert f.root == 3 and f.edge_length == 2.0
    assert torch.allclose(f.points[f.nodes.index(3)], torch.tensor([1.0, 0, 0], dtype=torch.float64))


def test_default_scale_is_capped_for_deep_trees():
    path_heavy = nx.random_labeled_tree(80, seed=11)  # deep: the cap binds, the target cannot be met
    e = data.embed_tree(path_heavy)
    height = nx.eccentricity(path_heavy, e.root)
    assert e.edge_length == pytest.approx(data.MAX_RADIUS / height, rel=1e-12)
    assert e.max_radius <= data.MAX_RADIUS * (1 + 1e-9)
    assert e.worst_distortion > 1.1
    with pytest.raises(ValueError, match="MAX_RADIUS"):
        data.embed_tree(path_heavy, edge_length=10.0)


def test_karate_club(karate):
    e = karate
    graph = nx.karate_club_graph()
    check_points(e.points, k=1.0)
    assert e.points.shape == (34, 3) and e.edges.shape == (33, 2) and e.graph_edges.shape == (78, 2)
    assert e.root == 0 and e.nodes == tuple(range(34))
    assert set(e.node_data["club"]) == {"Mr. Hi", "Officer"}
    figures = [e.worst_distortion, e.graph_worst_distortion]
    assert all(math.isfinite(v) and v >= 1.0 for v in figures)
    assert all(math.isfinite(v) and v >= 0.0 for v in (e.average_distortion, e.graph_average_distortion))
    assert e.graph_worst_distortion > e.worst_distortion
    d_hyp = polar_distances(e.points, 1.0)
    tree = nx.Graph([tuple(int(i) for i in edge) for edge in e.edges])
    worst_t, avg_t, _ = distortion_figures(d_hyp, hop_matrix(tree, e.nodes), e.edge_length)
    worst_g, avg_g, _ = distortion_figures(d_hyp, hop_matrix(graph, e.nodes), e.edge_length)
    assert (worst_t, avg_t) == pytest.approx((e.worst_distortion, e.average_distortion), rel=1e-5)
    assert (worst_g, avg_g) == pytest.approx((e.graph_worst_distortion, e.graph_average_distortion), rel=1e-5)
    # the tree edges are graph edges, and the tree is a BFS tree: depth = graph distance to the root
    graph_pairs = {frozenset(p) for p in e.graph_edges.tolist()}
    assert all(frozenset(p) in graph_pairs for p in e.edges.tolist())
    lengths = nx.single_source_shortest_path_length(graph, 0)
    assert e.depth.tolist() == [lengths[v] for v in e.nodes]


def test_distortion_function():
    d_graph = np.array([[0, 1, 2], [1, 0, 1], [2, 1, 0]], dtype=float)
    assert data.distortion(3 * d_graph, d_graph, 3.0) == pytest.approx((1.0, 0.0))
    worst, average = data.distortion(d_graph * np.array([[1, 2, 1], [2, 1, 1], [1, 1, 1]]), d_graph)
    assert worst == pytest.approx(2.0) and average == pytest.approx(1 / 3)


# --------------------------------------------------------------------------- #
# HTC layers
# --------------------------------------------------------------------------- #
def test_htc_layer_formula_and_curvature():
    k_in, k_out = 1.0, 2.5
    x = data.wrapped_normal(30, 4, 0.9, k=k_in, seed=3)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 5, generator=g, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    y = data.htc_layer(x, w, b, k_in=k_in, k_out=k_out)
    assert y.shape == (30, 7)
    check_points(y, k=k_out)
    # Hypformer's order: linear map, time for k_in, then scale the point by sqrt(k_out / k_in)
    z = x @ w.T + b
    ref = torch.cat([torch.sqrt((z * z).sum(-1, keepdim=True) + k_in), z], -1) * math.sqrt(k_out / k_in)
    assert torch.allclose(y, ref, rtol=1e-12)


@pytest.mark.parametrize("k_in, k_out", [(1.0, 1.0), (1.0, 4.0), (2.0, 0.5)])
def test_htc_selector_is_a_homothety(k_in, k_out):
    x = data.wrapped_normal(20, 3, 1.2, k=k_in, seed=4)
    w = torch.cat([torch.zeros(3, 1, dtype=torch.float64), torch.eye(3, dtype=torch.float64)], 1)
    y = data.htc_layer(x, w, k_in=k_in, k_out=k_out)
    assert torch.allclose(y, math.sqrt(k_out / k_in) * x, rtol=1e-12)
    ratio = dist(y[:10], y[10:], k=k_out) / dist(x[:10], x[10:], k=k_in)
    assert torch.allclose(ratio, torch.full_like(ratio, math.sqrt(k_out / k_in)), rtol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    k_in=st.floats(0.05, 20.0),
    k_out=st.floats(0.05, 20.0),
    d_in=st.integers(1, 6),
    d_out=st.integers(1, 6),
    scale=st.floats(0.01, 3.0),
    seed=st.integers(0, 2**16),
)
def test_htc_output_always_on_the_k_out_hyperboloid(k_in, k_out, d_in, d_out, scale, seed):
    x = data.wrapped_normal(8, d_in, scale, k=k_in, seed=seed)
    q, kk = data.random_htc_qk(x, d_out, k_in=k_in, k_out=k_out, seed=seed)
    check_points(q, k=k_out)
    check_points(kk, k=k_out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_htc_qk(dtype):
    x = data.wrapped_normal(50, 8, 0.5, k=1.0, seed=0, dtype=dtype)
    q, kk = data.random_htc_qk(x, 16, k_in=1.0, k_out=0.5, seed=1)
    assert q.shape == kk.shape == (50, 17) and q.dtype == kk.dtype == dtype
    check_points(q, k=0.5)
    check_points(kk, k=0.5)
    assert not torch.allclose(q, kk)
    q2, k2 = data.random_htc_qk(x, 16, k_in=1.0, k_out=0.5, seed=1)
    assert torch.equal(q, q2) and torch.equal(kk, k2)
    assert not torch.equal(q, data.random_htc_qk(x, 16, k_in=1.0, k_out=0.5, seed=2)[0])


def test_random_htc_qk_on_tree_points():
    e = data.balanced_tree(2, 3, edge_length=1.0, k=2.0)
    q, kk = data.random_htc_qk(e.points, 4, k_in=2.0, k_out=1.0, seed=np.random.default_rng(0))
    check_points(q, k=1.0)
    check_points(kk, k=1.0)


# --------------------------------------------------------------------------- #
# bad input
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: data.balanced_tree(0, 3), ValueError, "branching"),
        (lambda: data.balanced_tree(3, 0), ValueError, "depth"),
        (lambda: data.balanced_tree(2.5, 3), ValueError, "branching"),  # type: ignore[arg-type]  # a float on purpose
        (lambda: data.balanced_tree(True, 3), ValueError, "branching"),
        (lambda: data.balanced_tree(10, 5), ValueError, "at most"),
        (lambda: data.balanced_tree(3, 2, k=0), ValueError, "k must be"),
        (lambda: data.balanced_tree(3, 2, k=-1.0), ValueError, "k must be"),
        (lambda: data.balanced_tree(3, 2, edge_length=-1.0), ValueError, "edge_length"),
        (lambda: data.balanced_tree(3, 2, max_distortion=1.0), ValueError, "max_distortion"),
        (lambda: data.balanced_tree(3, 2, parent_gap=0), ValueError, "parent_gap"),
        (lambda: data.embed_tree(nx.cycle_graph(5)), ValueError, "expected a tree"),
        (lambda: data.embed_tree(nx.empty_graph(3)), ValueError, "3 connected component"),
        (lambda: data.embed_tree(nx.empty_graph(1)), ValueError, "at least 2 nodes"),
        (lambda: data.embed_tree(nx.MultiGraph([(0, 1)])), TypeError, "nx.Graph"),
        (lambda: data.embed_tree([(0, 1)]), TypeError, "networkx"),
        (lambda: data.embed_tree(nx.path_graph(3), root=7), ValueError, "root 7"),
        (lambda: data.karate_club(root=99), ValueError, "karate"),
        (lambda: data.wrapped_normal(0, 2), ValueError, "n must"),
        (lambda: data.wrapped_normal(5, 0), ValueError, "d must"),
        (lambda: data.wrapped_normal(5, 2, 0.0), ValueError, "std"),
        (lambda: data.wrapped_normal(5, 2, k=0.0), ValueError, "k must"),
        (lambda: data.wrapped_normal(5, 2, dtype=torch.int64), TypeError, "dtype"),
        (lambda: data.wrapped_normal(5, 2, seed="abc"), TypeError, "seed"),
        (lambda: data.lifted_gaussian(5, 2, -1.0), ValueError, "mean_norm"),
        (lambda: data.htc_layer(torch.ones(3, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)),
         ValueError, "off the hyperboloid"),
        (lambda: data.htc_layer(data.wrapped_normal(3, 2), torch.ones(2, 2, dtype=torch.float64)),
         ValueError, r"\(d_out, 3\)"),
        (lambda: data.htc_layer(data.wrapped_normal(3, 2), torch.ones(2, 3)), TypeError, "float32"),
        (lambda: data.htc_layer(data.wrapped_normal(3, 2), torch.ones(2, 3, dtype=torch.float64), k_out=0),
         ValueError, "k must"),
        (lambda: data.random_htc_qk(data.wrapped_normal(3, 2), 0), ValueError, "d_out"),
        (lambda: data.distortion(np.zeros((3, 3)), np.zeros((3, 3))), ValueError, "positive finite"),
        (lambda: data.distortion(np.zeros((3, 2)), np.zeros((3, 2))), ValueError, r"\(N, N\)"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert "\n" not in str(info.value)
