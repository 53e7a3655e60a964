r"""The project's derivations as code: every step an equation, its justification and its check.

Each derivation is a function returning a :class:`Derivation`, a titled list of named
:class:`Step` objects (tests and notebooks look steps up by name, never by position); its
:meth:`~Derivation.verify` checks every step and returns a :class:`Report` naming the first step
that failed, and :func:`verify_all` does that for every derivation of the project
(:func:`derivations`).  What the step kinds (:data:`STEP_KINDS`) and roles (:data:`ROLES`) mean, and
why only ``"proof"`` steps count as genuine checks, is in :mod:`hypviz.symbolic.steps`.

The derivations, by the notebook that shows them: notebook 02 (:func:`lifted_norm`,
:func:`squared_distance`, :func:`geodesic_distance`, :func:`decomposition`: identities 1-3) and
notebook 04 (the thread's Taylor argument and its exact error, identity 4, the Euclidean limit
(identity 6), the softmax identities including identity 5, the KL identity, Hoeffding's bound,
the exact KL supremum and the TV bound) and notebook 05 (:func:`first_order_gap_ratio`, the
first-order gap ratio for Gaussian points).  The curvature :math:`k` is a positive symbol
(``k=None``); ``k=1`` gives the formulas of the question-and-answer thread exactly.  Keys are
written :math:`\kappa`.

This module is the one place to import them from; the code lives by job:

* :mod:`hypviz.symbolic.steps` (and :mod:`hypviz.symbolic.step_report`): the general framework,
  :class:`Step`, :class:`Definition`, :class:`Derivation`, :class:`StepResult`, :class:`Report`,
  :class:`Reports`, :class:`DerivationError` (sympy only);
* :mod:`hypviz.symbolic.geometry`: the two-point derivations (identities 1-4 and 6, the thread's
  Taylor argument);
* :mod:`hypviz.symbolic.softmax_identities`: the softmax derivations (the per-key bias, identity 5, the KL
  identity and the bounds);
* the numerical companions, in float64 torch or mpmath, live a layer up, in
  :mod:`hypviz.attention.comparison.accuracy` (:func:`~hypviz.attention.comparison.accuracy.softmax_gap_bounds`,
  :func:`~hypviz.attention.comparison.accuracy.sqdist_accuracy`, ...) and :mod:`hypviz.base.oracle` (the mpmath references):
  ``import hypviz.symbolic`` imports sympy only.
"""

from __future__ import annotations

from typing import Any

from hypviz.symbolic.geometry import (
    approximation_error,
    decomposition,
    euclidean_limit,
    geodesic_distance,
    lifted_norm,
    query_constant,
    squared_distance,
    thread_approximation,
    time_taylor,
)
from hypviz.symbolic.softmax_identities import (
    bias_in_softmax,
    first_order_gap_ratio,
    hoeffding_bound,
    kl_identity,
    kl_supremum,
    lorentz_attention,
    softmax,
    softmax_shift,
    tv_bound,
)
from hypviz.symbolic.steps import (
    ROLES,
    STEP_KINDS,
    Definition,
    Derivation,
    DerivationError,
    Report,
    Reports,
    Step,
    StepResult,
)

__all__ = [
    # the framework (hypviz.symbolic.steps)
    "Step",
    "Definition",
    "Derivation",
    "StepResult",
    "Report",
    "Reports",
    "DerivationError",
    "ROLES",
    "STEP_KINDS",
    # the derivations (notebooks 02 and 04)
    "lifted_norm",
    "squared_distance",
    "geodesic_distance",
    "decomposition",
    "time_taylor",
    "thread_approximation",
    "approximation_error",
    "query_constant",
    "euclidean_limit",
    "softmax_shift",
    "bias_in_softmax",
    "lorentz_attention",
    "kl_identity",
    "hoeffding_bound",
    "kl_supremum",
    "tv_bound",
    "first_order_gap_ratio",
    "derivations",
    "verify_all",
    "softmax",
]


# =========================================================================== #
# all of them
# =========================================================================== #
def derivations(*, k: Any = None, d: int = 3, n: int = 3) -> dict[str, Derivation]:
    """Every derivation of the project, by name (general ``k`` plus the thread's ``k = 1``).

    ``d`` is the dimension of the explicit-coordinate re-checks, ``n`` the number of keys of the
    softmax derivations.

    Examples
    --------
    >>> from hypviz.symbolic import derivations
    >>> ders = derivations(d=2, n=2)
    >>> list(ders)[:3]
    ['lifted_norm', 'squared_distance', 'geodesic_distance']
    >>> ders["time_taylor"].verify().ok
    True
    """
    return {
        "lifted_norm": lifted_norm(k=k, d=d),
        "squared_distance": squared_distance(k=k, d=d),
        "geodesic_distance": geodesic_distance(k=k, d=d),
        "decomposition": decomposition(k=k, d=d),
        "time_taylor": time_taylor(k=k),
        "thread_approximation": thread_approximation(k=k, d=d),
        "thread_approximation_k1": thread_approximation(k=1, d=d),
        "approximation_error": approximation_error(k=k, d=d),
        "query_constant": query_constant(k=k, d=d),
        "euclidean_limit": euclidean_limit(d),
        "softmax_shift": softmax_shift(n),
        "bias_in_softmax": bias_in_softmax(n, k=k),
        "lorentz_attention": lorentz_attention(n, k=k, d=d),
        "kl_identity": kl_identity(n),
        "hoeffding_bound": hoeffding_bound(n),
        "kl_supremum": kl_supremum(n),
        "tv_bound": tv_bound(n),
        "first_order_gap_ratio": first_order_gap_ratio(n, k=k),
    }


def verify_all(*, k: Any = None, d: int = 3, n: int = 3, raise_on_failure: bool = True) -> Reports:
    """Verify every derivation of :func:`derivations`; return their :class:`Reports`.

    Raises
    ------
    DerivationError
        When a step fails and ``raise_on_failure`` is true, naming every failing derivation.

    Examples
    --------
    >>> from hypviz.symbolic import verify_all
    >>> reports = verify_all(k=1, d=1, n=2)        # every derivation, at the smallest sizes
    >>> reports.ok, len(reports) == len(derivations())          # one report a derivation, each verified
    (True, True)
    >>> min(r.genuine for r in reports) >= 1                      # each makes at least one genuine check
    True
    """
    reports = Reports(der.verify() for der in derivations(k=k, d=d, n=n).values())
    if raise_on_failure and not reports.ok:
        bad = [r for r in reports if not r.ok]
        raise DerivationError("\n".join(r.summary() for r in bad))
    return reports

