r"""Two attention maps compared, row by row: the plan, the statistics, the verdict.

:func:`compare` computes two kinds' maps from the same points by blocks of query rows and returns a
:class:`Comparison` (per-row TV, KL, top-1 agreement, each map's distance from uniform, the softmax bound) with its
verdict (:func:`verdict`); :func:`plan_compare` says what it would run; :func:`compare_maps` compares maps a model
already produced.  All three take their settings as one :class:`CompareOptions` (``options=``) or by name.  Modules:
:mod:`~hypviz.attention.comparison.options` (:class:`CompareOptions`), :mod:`~hypviz.attention.comparison.result`
(:class:`Comparison`, the verdict rule),
:mod:`~hypviz.attention.comparison.streamed_compare` and :mod:`~hypviz.attention.comparison.row_blocks`
(:func:`compare`), :mod:`~hypviz.attention.comparison.fused_stats` (the compiled statistics kernel),
:mod:`~hypviz.attention.comparison.given_maps` (:func:`compare_maps`), :mod:`~hypviz.attention.comparison.calibration`
(the verdict's cases) and :mod:`~hypviz.attention.comparison.accuracy` (the derivations' numerical companions).

>>> from hypviz import lorentz
>>> q = lorentz.lift([[0.0, 0.0], [1.0, 0.0]])
>>> compare(q, q, "distance", "lorentz").verdict
'identical'
"""

from hypviz.attention.comparison.given_maps import compare_maps
from hypviz.attention.comparison.options import CompareOptions
from hypviz.attention.comparison.result import (
    CLOSE_RATIO,
    MAJORITY,
    RESOLVE,
    ROW_VERDICTS,
    TOP1_WEIGHT,
    TOP_SHARE,
    UNIFORM_PEAK,
    UNIFORM_TV,
    VERDICTS,
    Comparison,
    Plan,
    describe_fractions,
    overall_verdict,
    row_verdicts,
    verdict,
    verdict_rule,
    verdict_text,
)
from hypviz.attention.comparison.streamed_compare import ComparePlan, compare, plan_compare, run_compare

__all__ = ["compare", "plan_compare", "run_compare", "ComparePlan", "CompareOptions", "compare_maps", "Comparison", "Plan",
           "verdict", "row_verdicts", "overall_verdict", "describe_fractions", "verdict_rule", "verdict_text", "UNIFORM_TV",
           "UNIFORM_PEAK", "CLOSE_RATIO", "TOP1_WEIGHT", "TOP_SHARE", "RESOLVE", "MAJORITY", "VERDICTS", "ROW_VERDICTS"]
