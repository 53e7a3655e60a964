"""hypviz: executable teaching and verification suite for Lorentz-model geometry.

Packages, by layer, lowest first (data flows one way; no module imports from a layer above its own):

base
    ``hypviz.base``: argument checks and messages, the registry of attention kinds (``kinds``), the
    softmax-gap bounds, memory measurement, mpmath references (no other layer imported)
geometry
    ``hypviz.lorentz``: points, inner products, distances, maps between the models, projections for
    pictures; ``hypviz.data``: point sets (near-origin Gaussians, tree embeddings, Hypformer-like Q/K)
symbolic
    ``hypviz.symbolic``: the sympy derivations, as functions returning checked equations (no torch)
attention
    ``hypviz.attention``: the kinds' kernels and maps, ``compare`` and its ``Comparison``, ``compare_maps``,
    the verdict, linear-time distance attention, the derivations' numerical companions
models
    ``hypviz.capture``: forward hooks that record a model's attention layers, the readers of the field's
    families, the records and their verification; ``hypviz.toymodel``: a small Hypformer-structured model
plots
    ``hypviz.plots``: matplotlib and plotly figures (scenes drawn by two renderers)
reports
    ``hypviz.reports``: the HTML / JSON reports behind ``hypviz compare``
cli
    ``hypviz.cli``: the ``hypviz`` command

``import hypviz`` imports nothing else; import the package you need (``from hypviz import lorentz``).
"""

__version__ = "0.1.0"
