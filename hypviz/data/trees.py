r"""Trees embedded in the hyperbolic plane (Sarkar's construction) and their distortion.

:func:`embed_tree`, :func:`balanced_tree`, :func:`karate_club` (a real graph, through a BFS
spanning tree) return a :class:`TreeEmbedding`: the points, time coordinate first, on
:math:`\langle x, x\rangle_L = -k`, with the measured distortion (:func:`distortion`).

.. rubric:: Numerical range of the tree embeddings

A low-distortion tree embedding puts its leaves far from the origin: the branching-3, depth-5
tree needs them at hyperbolic radius 26.9 (edge length 5.37, :math:`k = 1`) for worst-case
distortion 1.1, so its float64 coordinates are large (spatial norm 2.3e11).  Measured against
the same construction in mpmath (60 digits), float64 still places every point to about
:math:`1.5\,\varepsilon\,\|x_s\|` in hyperbolic distance (1.2e-4 at norm 3.4e11; relative to
the edge length, 2e-5).  The distortion figures use :func:`hypviz.lorentz.dist`, whose
cancellation-free form agrees with an independent radial/angular formula to ~1e-5 absolute at
radius 27 (``tests/test_data.py``).  The error grows like :math:`\varepsilon e^r`, so no
embedding here goes farther than ``MAX_RADIUS * sqrt(k)`` from the origin (28, spatial norm
:math:`\sqrt{k}\sinh 28 \approx 7.2\cdot 10^{11}\sqrt{k}`).  Do not cast the embeddings to
float32 (good to radius ~8 only).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import torch

from hypviz.base import validate
from hypviz.lorentz import as_tensor, check_k, dist, lift

__all__ = ["MAX_RADIUS", "PARENT_GAP", "TreeEmbedding", "distortion", "embed_tree", "balanced_tree", "karate_club"]

ArrayLike = Any  # numpy array, torch tensor, or a nested list of floats

#: Largest hyperbolic distance from the origin, in units of ``sqrt(k)``, of a tree embedding.
MAX_RADIUS: float = 28.0
#: Default angular gap between a node's parent edge and its nearest child edge, in units of the
#: gap between neighbouring children (1.0 is Sarkar's even spacing).
PARENT_GAP: float = 1.35
_MAX_NODES = 5000


def distortion(d_hyp: ArrayLike, d_graph: ArrayLike, edge_length: float = 1.0) -> tuple[float, float]:
    r"""Worst-case and average distortion of an embedding (Sala et al. 2018's definitions).

    Over all pairs :math:`i < j`, with
    :math:`\rho_{ij} = d_{\mathrm{hyp}}(i, j) / (\ell\; d_{\mathrm{graph}}(i, j))` (:math:`\ell` = ``edge_length``),

    .. math::

        \text{worst} = \frac{\max_{i<j} \rho_{ij}}{\min_{i<j} \rho_{ij}}, \qquad
        \text{average} = \operatorname{mean}_{i<j} \bigl|\rho_{ij} - 1\bigr|.

    The worst case is :math:`\ge 1`, invariant to ``edge_length``, and 1 for a scaled isometry (``inf``
    when some :math:`\rho_{ij} = 0`); the average is the mean relative error against the graph
    metric scaled by ``edge_length`` (0 is exact).

    Parameters
    ----------
    d_hyp, d_graph : array or tensor, shape (N, N)
        Hyperbolic distances and graph (hop) distances, :math:`N \ge 2`; only the upper triangle is
        read, and ``d_graph`` must be positive and finite there.
    edge_length : float, default 1.0
        The edge length the graph metric is scaled by.

    Returns
    -------
    (worst, average) : tuple of float

    Raises
    ------
    ValueError
        For shapes other than two ``(N, N)`` matrices, a non-positive or infinite graph distance (a
        disconnected graph), a NaN/Inf hyperbolic distance, or :math:`\ell \le 0`.
    """
    h = as_tensor(d_hyp, "d_hyp").to(torch.float64)
    g = as_tensor(d_graph, "d_graph").to(torch.float64)
    if h.dim() != 2 or h.shape[0] != h.shape[1] or h.shape != g.shape or h.shape[0] < 2:
        raise ValueError(
            f"d_hyp and d_graph: expected two (N, N) matrices with N >= 2, got {tuple(h.shape)} and {tuple(g.shape)}"
        )
    s = validate.positive(edge_length, "edge_length")
    iu = torch.triu_indices(h.shape[0], h.shape[0], offset=1)
    hh, gg = h[iu[0], iu[1]], g[iu[0], iu[1]]
    if not bool(torch.isfinite(gg).all()) or not bool((gg > 0).all()):
        raise ValueError("d_graph: expected positive finite distances between distinct nodes (a connected graph)")
    if not bool(torch.isfinite(hh).all()):
        raise ValueError("d_hyp holds NaN or Inf")
    ref = s * gg
    ratio = hh / ref
    if float(ratio.min()) <= 0.0:
        return math.inf, float(((hh - ref).abs() / ref).mean())
    return float(ratio.max() / ratio.min()), float(((hh - ref).abs() / ref).mean())


def _hop_matrix(graph: nx.Graph, nodes: Sequence[Hashable]) -> np.ndarray:
    index = {v: i for i, v in enumerate(nodes)}
    out = np.full((len(nodes), len(nodes)), np.inf)
    for source, lengths in nx.all_pairs_shortest_path_length(graph):
        row = out[index[source]]
        for target, length in lengths.items():
            row[index[target]] = length
    return out


@dataclass(frozen=True, repr=False)
class TreeEmbedding:
    r"""A tree (or a graph through a spanning tree) embedded in the hyperbolic plane.

    A frozen dataclass: each parameter is kept as the attribute of the same name; :attr:`max_norm` and
    :attr:`max_radius` are computed from ``points``.

    Parameters
    ----------
    points : torch.Tensor
        ``(N, 3)`` float64 points on :math:`\langle x, x\rangle_L = -k`, time first; row ``i`` is ``nodes[i]``.
    nodes : tuple
        The node labels, in the graph's node order.
    edges : torch.Tensor
        ``(E, 2)`` int64 row indices of the tree edges.
    root : hashable
        The node placed at the origin.
    depth : torch.Tensor
        ``(N,)`` int64 hop distance of each node from the root in the tree.
    edge_length : float
        Edge length (hyperbolic distance, in the units of :func:`hypviz.lorentz.dist`).
    k : float
        Curvature parameter.
    worst_distortion, average_distortion : float
        :func:`distortion` of all pairwise geodesic distances against ``edge_length`` times the tree's
        hop distance.
    graph_edges : torch.Tensor or None, default None
        For a graph embedded through a spanning tree: ``(E', 2)`` row indices of all its edges.
    graph_worst_distortion, graph_average_distortion : float or None, default None
        The same distortion figures against the original graph's shortest-path hop distances.
    node_data : dict, default {}
        Per-node attributes carried over from the source graph (tuples in row order).
    """

    points: torch.Tensor
    nodes: tuple
    edges: torch.Tensor
    root: Hashable
    depth: torch.Tensor
    edge_length: float
    k: float
    worst_distortion: float
    average_distortion: float
    graph_edges: torch.Tensor | None = None
    graph_worst_distortion: float | None = None
    graph_average_distortion: float | None = None
    node_data: dict = field(default_factory=dict)

    @property
    def max_norm(self) -> float:
        r"""Largest spatial norm :math:`\max_i \|x_{s,i}\|` of the embedded points."""
        return float(torch.linalg.vector_norm(self.points[:, 1:], dim=-1).max())

    @property
    def max_radius(self) -> float:
        r"""Largest hyperbolic distance from the origin.

        .. math::

            \max_i d(o, x_i) = \sqrt{k}\,\operatorname{arsinh}\Bigl(\frac{\max_i \|x_{s,i}\|}{\sqrt{k}}\Bigr)
        """
        root_k = math.sqrt(self.k)
        return root_k * math.asinh(self.max_norm / root_k)

    def __repr__(self) -> str:
        text = (
            f"TreeEmbedding(nodes={len(self.nodes)}, edges={self.edges.shape[0]}, k={self.k:.4g}, "
            f"edge_length={self.edge_length:.4g}, max_radius={self.max_radius:.4g}, max_norm={self.max_norm:.4g}, "
            f"worst_distortion={self.worst_distortion:.4g}, average_distortion={self.average_distortion:.4g}"
        )
        if self.graph_edges is not None:
            text += (
                f", graph_edges={self.graph_edges.shape[0]}, graph_worst_distortion={self.graph_worst_distortion:.4g}"
                f", graph_average_distortion={self.graph_average_distortion:.4g}"
            )
        return text + ")"


@dataclass(frozen=True)
class _Layout:
    """The combinatorial part of Sarkar's construction: who hangs where, at which angle."""

    nodes: tuple
    parent: np.ndarray  # (N,) row of the parent, -1 for the root
    angle: np.ndarray  # (N,) direction of the node seen from its parent, in the parent's frame
    levels: list  # BFS levels, each an int array of rows (level 0 is the root)
    depth: np.ndarray  # (N,)


def _layout(tree: nx.Graph, root: Hashable, parent_gap: float) -> _Layout:
    """Directions of the children of every node, in that node's own frame.

    In the frame of a node ``v`` (``v`` at the origin, its parent in direction 0), its ``n``
    children get the directions ``pi + (j - (n - 1) / 2) a``, ``j = 0 .. n - 1``, with
    ``a = 2 pi / (n - 1 + 2 g)``: neighbouring children are ``a`` apart and the two outermost are
    ``g a`` from the parent (``g = parent_gap``; ``g = 1`` is Sarkar's even spacing of all
    ``n + 1`` edges).  The root's ``n`` children get ``2 pi j / n``.
    """
    nodes = tuple(tree.nodes)
    index = {v: i for i, v in enumerate(nodes)}
    n = len(nodes)
    parent = np.full(n, -1, dtype=np.int64)
    angle = np.zeros(n)
    depth = np.zeros(n, dtype=np.int64)
    levels = [np.array([index[root]], dtype=np.int64)]
    seen = {index[root]}
    while True:
        nxt = []
        for u in levels[-1]:
            children = sorted(index[w] for w in tree.neighbors(nodes[u]) if index[w] not in seen)
            m = len(children)
            if parent[u] < 0:
                dirs = [2.0 * math.pi * j / m for j in range(m)]
            else:
                a = 2.0 * math.pi / (m - 1 + 2.0 * parent_gap)
                dirs = [math.pi + (j - (m - 1) / 2.0) * a for j in range(m)]
            for c, th in zip(children, dirs):
                parent[c], angle[c], depth[c] = u, th, depth[u] + 1
                seen.add(c)
                nxt.append(c)
        if not nxt:
            break
        levels.append(np.array(nxt, dtype=np.int64))
    return _Layout(nodes, parent, angle, levels, depth)


def _rotation(theta: np.ndarray) -> np.ndarray:
    """Lorentz rotations about the time axis, ``(M, 3, 3)``."""
    c, s = np.cos(theta), np.sin(theta)
    out = np.zeros(theta.shape + (3, 3))
    out[..., 0, 0] = 1.0
    out[..., 1, 1], out[..., 1, 2], out[..., 2, 1], out[..., 2, 2] = c, -s, s, c
    return out


def _sarkar_points(layout: _Layout, tau: float, k: float) -> torch.Tensor:
    """Place the nodes with edge length ``tau * sqrt(k)``; returns ``(N, 3)`` float64 points.

    Each node carries a frame ``F_v`` in SO+(1, 2) (a float64 3 x 3 Lorentz matrix) mapping the origin to
    ``v`` and direction 0 to its parent: ``F_root = I`` and
    ``F_c = F_v R(theta_c) B(tau) R(pi)``, with ``R`` the rotation about the time axis and ``B(tau)``
    the boost along the first spatial axis by rapidity ``tau``.  Then ``x_v = sqrt(k) F_v e_0``,
    re-lifted from its spatial part.  Composing isometries keeps every point to ~1.5 eps |x_s|
    (no Poincare-disk coordinates near the boundary are ever formed).
    """
    n = len(layout.nodes)
    frames = np.zeros((n, 3, 3))
    frames[layout.levels[0]] = np.eye(3)
    boost = np.array([[math.cosh(tau), math.sinh(tau), 0.0], [math.sinh(tau), math.cosh(tau), 0.0], [0.0, 0.0, 1.0]])
    step_tail = boost @ _rotation(np.array(math.pi))
    for level in layout.levels[1:]:
        local = _rotation(layout.angle[level]) @ step_tail
        frames[level] = frames[layout.parent[level]] @ local
    spatial = math.sqrt(k) * frames[:, 1:, 0]
    return lift(torch.from_numpy(np.ascontiguousarray(spatial)), k=k)


def _check_tree(tree: Any, name: str = "tree") -> nx.Graph:
    if not isinstance(tree, nx.Graph):
        raise TypeError(f"{name}: expected a networkx Graph or DiGraph, got {type(tree).__name__}")
    if tree.is_multigraph():
        raise TypeError(
            f"{name}: expected a networkx Graph or DiGraph, got a {type(tree).__name__}; convert with nx.Graph(...)"
        )
    count = tree.number_of_nodes()
    if count < 2:
        raise ValueError(f"{name}: expected a tree with at least 2 nodes, got {count}")
    if count > _MAX_NODES:
        raise ValueError(f"{name}: {count} nodes; at most {_MAX_NODES} (all-pairs distortion is O(N^2))")
    und = tree.to_undirected(as_view=False) if tree.is_directed() else tree
    if not nx.is_tree(und):
        raise ValueError(
            f"{name}: expected a tree (connected and acyclic), got a graph with {count} nodes, "
            f"{und.number_of_edges()} edges and {nx.number_connected_components(und)} connected component(s)"
        )
    return und


def _measure(points: torch.Tensor, k: float, hops: np.ndarray, edge_length: float) -> tuple[float, float]:
    return distortion(dist(points[:, None], points[None], k=k), torch.from_numpy(hops), edge_length)


def embed_tree(
    tree: nx.Graph,
    root: Hashable | None = None,
    *,
    edge_length: float | None = None,
    k: float = 1.0,
    parent_gap: float = PARENT_GAP,
    max_distortion: float = 1.1,
) -> TreeEmbedding:
    r"""Embed a networkx tree in the hyperbolic plane (Sarkar's combinatorial construction).

    The root sits at the origin; every node's :math:`n` children lie on the circle of radius
    ``edge_length`` around it, spread over the arc facing away from its parent: seen from the node, with
    its parent in direction 0, child :math:`j` is in direction

    .. math::

        \pi + \Bigl(j - \frac{n - 1}{2}\Bigr) a, \qquad a = \frac{2\pi}{n - 1 + 2g}, \qquad j = 0, \dots, n - 1,

    so neighbouring children are :math:`a` apart and the outermost are :math:`g a` from the parent
    edge (:math:`g` = ``parent_gap``; :math:`g = 1` is Sarkar's even spacing); the root's children
    are at :math:`2\pi j / n`.  Nodes are placed by composing Lorentz rotations and boosts (3 x 3
    float64 matrices) on the hyperboloid, never through Poincare coordinates near the boundary.
    Sarkar (2011) and Sala et al. (2018) show the distortion tends to 1 as the edge length grows.

    Parameters
    ----------
    tree : networkx.Graph
        A tree (a directed tree such as ``nx.bfs_tree`` output is read as undirected), 2 to 5000 nodes.
    root : node, optional
        The node placed at the origin; default the tree's centre (``nx.center``, first one), which
        minimises the largest radius.
    edge_length : float, optional
        Edge length (hyperbolic distance).  Default: the smallest edge length (to 0.1 %, found by a
        safeguarded regula falsi on the measured worst-case distortion, searched from
        :math:`\sqrt{k}` up) whose worst-case distortion is at most ``max_distortion``, capped so that
        no node lies farther than ``MAX_RADIUS * sqrt(k)`` from the origin (the float64 limit of the
        module docstring); when the cap binds the target is not met and ``worst_distortion`` says by
        how much.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    parent_gap : float, default PARENT_GAP
        :math:`g` above, :math:`> 0`.  The default 1.35 minimises the edge length the branching-3,
        depth-5 tree needs for worst-case distortion 1.1 (5.37 against Sarkar's even spacing's 6.7).
    max_distortion : float, default 1.1
        Target worst-case distortion for the default ``edge_length``, :math:`> 1`; unused when ``edge_length`` is given.

    Returns
    -------
    TreeEmbedding
        ``points`` are ``(N, 3)`` float64 (time first), row ``i`` is ``list(tree.nodes)[i]``; the
        distortions are measured with :func:`hypviz.lorentz.dist` against ``edge_length`` times the hop
        distance.

    Raises
    ------
    ValueError
        For a graph that is not a tree, fewer than 2 or more than 5000 nodes, a ``root`` that is not
        a node, ``max_distortion <= 1``, or an explicit ``edge_length`` that puts a node beyond
        ``MAX_RADIUS * sqrt(k)``; ``TypeError`` for anything but a networkx (Di)Graph.
    """
    und = _check_tree(tree)
    kf = check_k(k)
    g = validate.positive(parent_gap, "parent_gap")
    target = validate.positive(max_distortion, "max_distortion")
    if target <= 1.0:
        raise ValueError(f"max_distortion must be > 1 (1 would be an isometry), got {max_distortion!r}")
    if root is None:
        root = nx.center(und)[0]
    elif root not in und:
        raise ValueError(f"root {root!r} is not a node of the tree")
    layout = _layout(und, root, g)
    hops = _hop_matrix(und, layout.nodes)
    root_k = math.sqrt(kf)
    height = int(layout.depth.max())

    if edge_length is None:
        tau = _default_tau(layout, kf, hops, height, target)
    else:
        tau = validate.positive(edge_length, "edge_length") / root_k
    points = _sarkar_points(layout, tau, kf)
    radius = math.asinh(float(torch.linalg.vector_norm(points[:, 1:], dim=-1).max()) / root_k)
    if radius > MAX_RADIUS * (1.0 + 1e-9):
        raise ValueError(
            f"edge_length={edge_length!r} puts nodes {radius * root_k:.4g} from the origin, beyond "
            f"MAX_RADIUS*sqrt(k) = {MAX_RADIUS * root_k:.4g} where float64 coordinates stop giving accurate "
            f"distances; use edge_length <= {MAX_RADIUS * root_k / height:.4g} for this tree"
        )
    worst, average = _measure(points, kf, hops, tau * root_k)
    index = {v: i for i, v in enumerate(layout.nodes)}
    edges = torch.tensor([[index[a], index[b]] for a, b in und.edges()], dtype=torch.int64).reshape(-1, 2)
    return TreeEmbedding(
        points=points,
        nodes=layout.nodes,
        edges=edges,
        root=root,
        depth=torch.from_numpy(layout.depth.copy()),
        edge_length=tau * root_k,
        k=kf,
        worst_distortion=worst,
        average_distortion=average,
    )


def _default_tau(layout: _Layout, k: float, hops: np.ndarray, height: int, target: float) -> float:
    """Smallest edge length (units of sqrt(k)) in ``[1, MAX_RADIUS / height]`` meeting ``target``.

    The worst-case distortion behaves like ``1 + c / (tau - c')``, so ``1 / (worst - 1)`` is
    nearly linear in ``tau``: Illinois (safeguarded regula falsi) on
    ``f(tau) = 1 / (worst(tau) - 1) - 1 / (target - 1)``, keeping a bracket whose upper end meets
    the target; stops once that end is within ``1e-4`` of the target or the bracket is 0.1 % wide.
    """
    root_k = math.sqrt(k)

    def worst(tau: float) -> float:
        return _measure(_sarkar_points(layout, tau, k), k, hops, tau * root_k)[0]

    def f(w: float) -> float:
        return (1.0 / (w - 1.0) if w > 1.0 else math.inf) - 1.0 / (target - 1.0)

    hi = MAX_RADIUS / height
    lo = min(1.0, hi)
    w_hi = worst(hi)
    if w_hi > target or lo == hi:
        return hi
    w_lo = worst(lo)
    if w_lo <= target:
        return lo
    f_lo, f_hi, side = f(w_lo), f(w_hi), 0
    for _ in range(50):
        if hi - lo <= 1e-3 * hi or w_hi >= target - 1e-4:
            break
        mid = lo - f_lo * (hi - lo) / (f_hi - f_lo) if math.isfinite(f_hi) else 0.5 * (lo + hi)
        if not lo < mid < hi:
            mid = 0.5 * (lo + hi)
        w_mid = worst(mid)
        if w_mid <= target:
            hi, w_hi, f_hi = mid, w_mid, f(w_mid)
            if side == -1:
                f_lo *= 0.5
            side = -1
        else:
            lo, f_lo = mid, f(w_mid)
            if side == 1:
                f_hi *= 0.5
            side = 1
    return hi


def balanced_tree(
    branching: int,
    depth: int,
    *,
    edge_length: float | None = None,
    k: float = 1.0,
    parent_gap: float = PARENT_GAP,
    max_distortion: float = 1.1,
) -> TreeEmbedding:
    r"""The balanced tree ``nx.balanced_tree(branching, depth)`` embedded by :func:`embed_tree`, root at the origin.

    With :math:`b` = ``branching`` :math:`\ge 1` children per inner node and :math:`h` = ``depth``
    :math:`\ge 1` levels below the root, the tree has

    .. math::

        N = \sum_{i=0}^{h} b^i = \frac{b^{h+1} - 1}{b - 1} \quad (b > 1), \qquad N = h + 1 \quad (b = 1)

    nodes (at most 5000).  With the defaults, branching 3 and depth 5 (364 nodes) get worst-case
    distortion :math:`\le 1.1` (edge length about :math:`5.37\sqrt{k}`).  Other parameters as
    :func:`embed_tree`.

    Parameters
    ----------
    branching : int
        :math:`b`, children per inner node, :math:`\ge 1`.
    depth : int
        :math:`h`, levels below the root, :math:`\ge 1`.
    edge_length : float, optional
        Edge length (hyperbolic distance); default as :func:`embed_tree`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    parent_gap : float, default PARENT_GAP
        Angular gap between a node's parent edge and its nearest child edge, as :func:`embed_tree`, :math:`> 0`.
    max_distortion : float, default 1.1
        Target worst-case distortion for the default ``edge_length``, :math:`> 1`; unused when ``edge_length`` is given.

    Returns
    -------
    TreeEmbedding
        Row ``i`` is node ``i`` of ``nx.balanced_tree(branching, depth)``; node 0, the root, at the origin.

    Raises
    ------
    ValueError
        When ``branching`` or ``depth`` is not an integer :math:`\ge 1`, the tree has more than 5000 nodes,
        or as :func:`embed_tree`.
    """
    b = validate.integer(branching, "branching", 1)
    h = validate.integer(depth, "depth", 1)
    count = h + 1 if b == 1 else (b ** (h + 1) - 1) // (b - 1)
    if count > _MAX_NODES:
        raise ValueError(
            f"balanced_tree({b}, {h}) has {count} nodes; at most {_MAX_NODES} (all-pairs distortion is O(N^2))"
        )
    return embed_tree(
        nx.balanced_tree(b, h), 0, edge_length=edge_length, k=k, parent_gap=parent_gap, max_distortion=max_distortion
    )


def karate_club(
    *,
    root: int = 0,
    edge_length: float | None = None,
    k: float = 1.0,
    parent_gap: float = PARENT_GAP,
    max_distortion: float = 1.1,
) -> TreeEmbedding:
    r"""Zachary's karate club (``nx.karate_club_graph()``, 34 members, 78 ties) through a BFS spanning tree.

    The tree is ``nx.bfs_tree(G, root)`` (default root 0, the instructor "Mr. Hi", a centre of the
    graph), embedded by :func:`embed_tree` with that root at the origin.  Both distortions are
    reported: against the spanning tree's hop metric (``worst_distortion``,
    ``average_distortion``; what the construction controls) and against the original graph's
    shortest paths (``graph_worst_distortion``, ``graph_average_distortion``; worse, because the 45
    ties left out of the tree are stretched to tree paths).  ``node_data["club"]`` holds each
    member's faction after the split ("Mr. Hi" or "Officer").  Other parameters as :func:`embed_tree`.

    Parameters
    ----------
    root : int, default 0
        The member placed at the origin, an int in 0..33.
    edge_length : float, optional
        Edge length (hyperbolic distance); default as :func:`embed_tree`.
    k : float, default 1.0
        Curvature parameter :math:`k > 0` of the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    parent_gap : float, default PARENT_GAP
        Angular gap between a node's parent edge and its nearest child edge, as :func:`embed_tree`, :math:`> 0`.
    max_distortion : float, default 1.1
        Target worst-case distortion for the default ``edge_length``, :math:`> 1`; unused when ``edge_length`` is given.

    Raises
    ------
    ValueError
        When ``root`` is not a member (an int in 0..33), or as :func:`embed_tree`.
    """
    graph = nx.karate_club_graph()
    if isinstance(root, bool) or root not in graph:
        raise ValueError(f"root must be a member of the karate club, an int in 0..33, got {root!r}")
    spanning = nx.Graph()
    spanning.add_nodes_from(graph.nodes)
    spanning.add_edges_from(nx.bfs_tree(graph, root).edges())
    emb = embed_tree(spanning, root, edge_length=edge_length, k=k, parent_gap=parent_gap, max_distortion=max_distortion)
    graph_hops = _hop_matrix(graph, emb.nodes)
    g_worst, g_avg = _measure(emb.points, emb.k, graph_hops, emb.edge_length)
    index = {v: i for i, v in enumerate(emb.nodes)}
    graph_edges = torch.tensor([[index[a], index[b]] for a, b in graph.edges()], dtype=torch.int64)
    clubs = tuple(graph.nodes[v]["club"] for v in emb.nodes)
    return TreeEmbedding(
        points=emb.points,
        nodes=emb.nodes,
        edges=emb.edges,
        root=emb.root,
        depth=emb.depth,
        edge_length=emb.edge_length,
        k=emb.k,
        worst_distortion=emb.worst_distortion,
        average_distortion=emb.average_distortion,
        graph_edges=graph_edges,
        graph_worst_distortion=g_worst,
        graph_average_distortion=g_avg,
        node_data={"club": clubs},
    )
