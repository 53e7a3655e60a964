r"""Attention maps on the hyperboloid: four score kinds, Hypformer's focused linear attention, a streaming comparison.

Inputs are points of the Lorentz model, time coordinate first, as in :mod:`hypviz.lorentz`:
``queries`` of shape ``(..., N, d + 1)`` and ``keys`` (and ``values``) of shape ``(..., M, d + 1)``
on :math:`\langle x, x\rangle_L = -k`, with optional leading head/batch axes that broadcast.
Keys are written :math:`\kappa`, because :math:`k` is the curvature parameter.

The built-in kinds (:data:`KINDS`).  Three are softmax kinds, :math:`A_{ij} = \operatorname{softmax}_j(s_{ij} / \tau)`
with the scores

.. math::

    s^{\mathrm{spatial}}_{ij} = q_s \cdot \kappa_s, \qquad
    s^{\mathrm{distance}}_{ij} = -\tfrac12 \|q - \kappa\|_L^2 \le 0, \qquad
    s^{\mathrm{lorentz}}_{ij} = \langle q, \kappa\rangle_L = -q_t \kappa_t + q_s \cdot \kappa_s,

where ``"spatial"`` is the question-and-answer thread's object and ``"distance"`` is Hypformer's
full attention at :math:`\tau = k \cdot \mathrm{scale} / 2`.  The fourth, ``"focused"``, is
Hypformer's linear attention, which has no softmax and no temperature (:func:`focused_linear_map`):

.. math::

    A_{ij} = \frac{\phi(q_i) \cdot \phi(\kappa_j)}{\sum_l \phi(q_i) \cdot \phi(\kappa_l)} .

The softmax kinds are related exactly (identity 4, derived in notebook 04, and identity 1 rearranged):

.. math::

    q_s \cdot \kappa_s = -\tfrac12 \|q - \kappa\|_L^2 + (q_t \kappa_t - k), \qquad
    \langle q, \kappa\rangle_L = -\tfrac12 \|q - \kappa\|_L^2 - k,

so inside a row softmax ``"lorentz"`` equals ``"distance"`` exactly (identity 5), while ``"spatial"``
is ``"distance"`` plus the key-dependent bias :math:`q_t \kappa_t / \tau`.  :func:`compare` measures
how far two kinds' maps are apart, row by row, next to each map's distance from the uniform row,
and checks the bounds on the softmax gap (:func:`tv_supremum`, :func:`kl_supremum`).

The fifth, ``"distance_rf"``, is the ``"distance"`` map estimated by positive random features of
:math:`Jq/\sqrt\tau` and :math:`\kappa/\sqrt\tau` (:mod:`hypviz.attention.approx.random_features`): the implicit map of
:func:`distance_linear_attention`, distance attention in linear time; like ``"focused"`` it is not a
softmax of scores, so the softmax bound does not apply to it.  The sixth, ``"distance_topk"``, is the
``"distance"`` map from each query's exact top keys and a fitted positive tail (:mod:`hypviz.attention.approx.topk_tail`):
the implicit map of :func:`distance_topk_attention`, which also estimates each row's error.

Every public function validates its inputs once (a one-line ``ValueError`` or ``TypeError``) and
then computes with unchecked internals.  Pairwise arrays come from matrix products (one for
:func:`scores` and :func:`attention_map`; one or two per block of query rows in :func:`compare`),
never from broadcasting ``N x M x d``.

The kinds are entries of :mod:`hypviz.base.kinds` (``hypviz.attention.kinds``): adding one is one
entry there plus its tests.  This package has three rooms, by job: :mod:`hypviz.attention.maps` (the maps and
their kernels: :func:`scores`, :func:`attention_map`, :func:`top_attention`, the focused map, each kind's
operands and rounding bound), :mod:`hypviz.attention.comparison` (two maps compared: :func:`compare`,
:func:`plan_compare`, :func:`compare_maps`, :class:`Comparison` and the verdict, the calibration cases and the
derivations' numerical companions) and :mod:`hypviz.attention.approx` (distance attention approximated:
:func:`distance_linear_attention`, :func:`distance_topk_attention`, :func:`exact_top_keys`,
:func:`search_top_keys`).  The comparison and the approximations build on the maps, never on each other.
Every public name is importable from here.
"""

from hypviz.attention.approx import (
    KeyIndex,
    KeySearch,
    TopKeyLogits,
    TopkTail,
    distance_linear_attention,
    distance_topk_attention,
    exact_top_keys,
    fit_key_index,
    search_top_keys,
)
from hypviz.attention.comparison import (
    CLOSE_RATIO,
    MAJORITY,
    RESOLVE,
    ROW_VERDICTS,
    TOP1_WEIGHT,
    TOP_SHARE,
    UNIFORM_PEAK,
    UNIFORM_TV,
    VERDICTS,
    CompareOptions,
    ComparePlan,
    Comparison,
    Plan,
    compare,
    compare_maps,
    describe_fractions,
    overall_verdict,
    plan_compare,
    row_verdicts,
    run_compare,
    verdict,
    verdict_rule,
    verdict_text,
)
from hypviz.attention.maps import (
    KINDS,
    MODEL_KINDS,
    SOFTMAX_KINDS,
    Kernel,
    Operands,
    Option,
    TopKeys,
    attention_map,
    focused_linear_attention,
    focused_linear_map,
    register_kernel,
    resolve_device,
    scores,
    top_attention,
    unregister_kernel,
)
from hypviz.base import kinds
from hypviz.base.bounds import kl_supremum, tv_supremum
from hypviz.base.memory import peak_tensor_memory

__all__ = [
    "kinds",
    "KINDS",
    "SOFTMAX_KINDS",
    "MODEL_KINDS",
    "UNIFORM_TV",
    "UNIFORM_PEAK",
    "CLOSE_RATIO",
    "TOP1_WEIGHT",
    "TOP_SHARE",
    "RESOLVE",
    "MAJORITY",
    "VERDICTS",
    "ROW_VERDICTS",
    "verdict",
    "row_verdicts",
    "overall_verdict",
    "describe_fractions",
    "verdict_rule",
    "verdict_text",
    "compare_maps",
    "scores",
    "attention_map",
    "focused_linear_map",
    "focused_linear_attention",
    "distance_linear_attention",
    "distance_topk_attention",
    "TopkTail",
    "TopKeys",
    "top_attention",
    "TopKeyLogits",
    "exact_top_keys",
    "KeySearch",
    "search_top_keys",
    "KeyIndex",
    "fit_key_index",
    "compare",
    "plan_compare",
    "run_compare",
    "ComparePlan",
    "CompareOptions",
    "Plan",
    "Comparison",
    "kl_supremum",
    "tv_supremum",
    "resolve_device",
    "peak_tensor_memory",
    "Kernel",
    "Operands",
    "Option",
    "register_kernel",
    "unregister_kernel",
]
