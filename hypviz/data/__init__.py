r"""Point sets on the hyperboloid: near-origin Gaussians, tree embeddings, Hypformer-like Q/K.

Everything returns torch tensors of points ``(..., d + 1)``, time coordinate first, on
:math:`\langle x, x\rangle_L = -k` (the conventions of :mod:`hypviz.lorentz`), and is
deterministic given ``seed`` (an ``int``, a ``torch.Generator`` or a ``numpy.random.Generator``;
``None`` uses torch's global generator, which the notebooks seed).

* :func:`wrapped_normal`, :func:`lifted_gaussian`: samples near the origin;
* :func:`embed_tree`, :func:`balanced_tree`, :func:`karate_club`: trees (and a real graph,
  through a BFS spanning tree) embedded in the hyperbolic plane by Sarkar's construction,
  returned as a :class:`TreeEmbedding` with the measured distortion (:func:`distortion`),
  (:mod:`hypviz.data.trees`);
* :func:`htc_layer`, :func:`random_htc_qk`: Hypformer's HTC linear layer, curvature change included.

"""

from hypviz.data.point_sets import htc_layer, lifted_gaussian, random_htc_qk, wrapped_normal
from hypviz.data.trees import MAX_RADIUS, PARENT_GAP, TreeEmbedding, balanced_tree, distortion, embed_tree, karate_club

__all__ = [
    "MAX_RADIUS",
    "PARENT_GAP",
    "wrapped_normal",
    "lifted_gaussian",
    "TreeEmbedding",
    "distortion",
    "embed_tree",
    "balanced_tree",
    "karate_club",
    "htc_layer",
    "random_htc_qk",
]
