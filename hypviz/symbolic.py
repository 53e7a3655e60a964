r"""The project's derivations as code: every step an equation, its justification and its check.

A :class:`Derivation` is a titled list of :class:`Step` objects.  Each step states
``lhs <relation> rhs``, has a ``name`` (tests and notebooks look steps up by it) and says how it
is verified (``kind``, one of :data:`KINDS`):

* ``"simplify"``: exact identity, :math:`\mathrm{lhs} - \mathrm{rhs}` reduces to 0 (``expand``,
  ``cancel``, ``simplify``, ``simplify`` of the ``exp`` form);
* ``"series"``: :math:`\mathrm{lhs} - \mathrm{rhs} = O(\mathrm{var}^{\mathrm{order}})`, the series
  of the difference up to that order is 0;
* ``"limit"``: :math:`\lim_{\mathrm{var} \to \mathrm{point}} \mathrm{lhs} = \mathrm{rhs}`;
* ``"bound"``: :math:`\mathrm{lhs} \le \mathrm{rhs}`, where :math:`\mathrm{rhs} - \mathrm{lhs}`
  equals a ``certificate`` that is non-negative by its form (squares, products and quotients
  of non-negative symbols);
* ``"nonzero"``: :math:`\mathrm{lhs} \ne \mathrm{rhs}` as functions, the difference is non-zero
  at a ``witness`` point;
* ``"check"``: any other argument, written as a callable (e.g. a concavity argument, or a
  high-precision quadrature);

and what its check is worth (``role``, one of :data:`ROLES`):

* ``"proof"``: a genuine check, it could fail if the mathematics were wrong;
* ``"definition"``: the step restates a definition (the check compares a definition with itself);
* ``"consequence"``: an immediate consequence of earlier steps, or a truth that holds whatever the
  derivation says (e.g. "log is increasing"); shown for the reader, not evidence;
* ``"regression"``: a comparison with a number quoted elsewhere, not a proof.

Only ``"proof"`` steps count as genuine checks; :class:`Report` summaries say
"N genuine checks (+ M definitions/consequences/regressions)".  Every step is still verified,
whatever its role, and a failing step is named by number and name.
:meth:`Derivation.verify` checks every step and returns a :class:`Report` naming the first step
that failed; :func:`verify_all` does that for every derivation of the project.

Dimension is handled honestly: the two-point derivations are written with symbols for the norms
:math:`\|x_s\|`, :math:`\|y_s\|` and the dot product :math:`x_s \cdot y_s` (everything depends
on the spatial parts only through those, so the argument holds in every dimension :math:`d`),
and the exact, series and limit steps are re-checked with explicit coordinates
:math:`x_1, \dots, x_d` for a small :math:`d` (3 by default; see :meth:`Derivation.verify`).  The curvature :math:`k` is a positive symbol (``k=None``); pass
``k=1`` to get the formulas of the question-and-answer thread exactly.  Keys are written
:math:`\kappa`.

The derivations, by the notebook that shows them: notebook 02 (:func:`lifted_norm`,
:func:`squared_distance`, :func:`geodesic_distance`, :func:`decomposition`: identities 1-3) and
notebook 04 (the thread's Taylor argument and its exact error, identity 4, the Euclidean limit
(identity 6), the softmax identities including identity 5, the KL identity, Hoeffding's bound,
the exact KL supremum and the TV bound).

The module ends with numerical companions of the derivations, in float64 torch or mpmath:
:func:`softmax_gap_bounds` (per-row KL, TV, the bias spread and the bounds),
:func:`worst_case_row` (real points attaining :math:`\mathrm{TV} = \tanh(\Delta/4)`, or the exact
KL supremum), :func:`kl_supremum_mpmath` (the closed-form KL supremum at high precision),
:func:`sqdist_textbook`, :func:`sqdist_mpmath` and :func:`sqdist_accuracy` (the float32 /
float64 accuracy study of notebook 02).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import mpmath
import numpy as np
import sympy as sp
import torch
from sympy.core.function import AppliedUndef

from hypviz import lorentz

__all__ = [
    # the framework
    "Step",
    "Definition",
    "Derivation",
    "StepResult",
    "Report",
    "Reports",
    "DerivationError",
    "ROLES",
    "KINDS",
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
    "derivations",
    "verify_all",
    "softmax",
    # numerical companions
    "BoundCheck",
    "softmax_gap_bounds",
    "worst_case_row",
    "kl_supremum_mpmath",
    "sqdist_textbook",
    "sqdist_mpmath",
    "SqdistAccuracy",
    "sqdist_accuracy",
]

#: How a :class:`Step` is verified (see the module docstring).
KINDS = ("simplify", "series", "limit", "bound", "nonzero", "check")
#: What a step's check is worth; only ``"proof"`` counts as a genuine check.
ROLES = ("proof", "definition", "consequence", "regression")
_ROLE_PLURAL = {"definition": "definitions", "consequence": "consequences", "regression": "regressions"}


# =========================================================================== #
# the framework
# =========================================================================== #
@dataclass(frozen=True, eq=False)
class Step:
    r"""One step of a derivation: ``lhs <relation> rhs``, why it holds, and how that is checked.

    Parameters
    ----------
    lhs, rhs
        sympy expressions (or matrices).  They may use the abbreviation symbols of the
        :class:`Derivation` (e.g. ``x_t``), which are replaced by their definitions first.
    why : str
        The justification, one sentence, shown next to the equation.
    kind : str
        One of ``"simplify"``, ``"series"``, ``"limit"``, ``"bound"``, ``"nonzero"``, ``"check"``
        (see the module docstring).
    var, point, order
        series: :math:`\mathrm{lhs} - \mathrm{rhs} = O((\mathrm{var} - \mathrm{point})^{\mathrm{order}})`;
        limit: :math:`\lim_{\mathrm{var} \to \mathrm{point}} \mathrm{lhs} = \mathrm{rhs}`.
    scale
        A symbol :math:`\varepsilon`: before a series or limit, every spatial quantity of the
        derivation is shrunk by it (norms and coordinates times :math:`\varepsilon`, dot products
        times :math:`\varepsilon^2`), so that :math:`O(\varepsilon^4)` reads "fourth order in the
        size of the points".
    certificate
        bound: an expression equal to :math:`\mathrm{rhs} - \mathrm{lhs}` that is visibly non-negative.
    witness : mapping
        nonzero: a substitution at which :math:`\mathrm{lhs} - \mathrm{rhs}` is not zero.
    check : callable
        check: returns ``True``/``False`` or ``(ok, detail)``.
    given : mapping
        Substitutions (earlier steps, hypotheses such as :math:`\|y_s\| = \|x_s\|`) applied before
        checking.
    expand : bool
        Whether to substitute the derivation's definitions (``False``: the step holds for every
        value of the abbreviation symbols, e.g. a half-angle formula).
    coordinates : bool
        Whether to re-check the step with explicit coordinates (``False`` for statements about the
        norm symbols themselves, e.g. a derivative with respect to :math:`\|x_s\|`).
    relation, order_label : str
        Display only: the relation sign and the O-term (e.g. ``"O(r^{4})"``).
    name : str
        A short identifier, unique within the derivation (``Derivation.step(name)``); tests and
        notebooks pick steps by name, never by position.
    role : str
        What the check is worth: ``"proof"`` (the default), ``"definition"``, ``"consequence"`` or
        ``"regression"`` (see the module docstring).  Shown as the tag of the step; only proofs count
        as genuine checks.

    Raises
    ------
    ValueError
        For an unknown ``kind`` or ``role``, a ``name`` that is not an identifier, or a missing
        argument of the kind (``var``/``order``, ``certificate``, ``witness``, ``check``).
    """

    lhs: Any
    rhs: Any
    why: str
    kind: str = "simplify"
    var: Any = None
    point: Any = 0
    order: int | None = None
    scale: Any = None
    certificate: Any = None
    witness: Mapping | None = None
    check: Callable[[], Any] | None = None
    given: Mapping | None = None
    expand: bool = True
    coordinates: bool = True
    relation: str | None = None
    order_label: str | None = None
    name: str | None = None
    role: str = "proof"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Step kind must be one of {KINDS}, got {self.kind!r}")
        if self.role not in ROLES:
            raise ValueError(f"Step role must be one of {ROLES}, got {self.role!r}")
        if self.name is not None and (not isinstance(self.name, str) or not self.name.isidentifier()):
            raise ValueError(f"Step name must be an identifier such as 'identity_3', got {self.name!r}")
        if self.kind in ("series", "limit") and self.var is None:
            raise ValueError(f"a {self.kind} step needs var=, the variable of the expansion")
        if self.kind == "series" and self.order is None:
            raise ValueError("a series step needs order=: lhs - rhs = O(var**order)")
        if self.kind == "bound" and self.certificate is None:
            raise ValueError("a bound step needs certificate= (an expression equal to rhs - lhs, >= 0 by its form)")
        if self.kind == "nonzero" and self.witness is None:
            raise ValueError("a nonzero step needs witness=, a substitution where lhs - rhs != 0")
        if self.kind == "check" and self.check is None:
            raise ValueError("a check step needs check=, a callable returning True/False or (ok, detail)")


@dataclass(frozen=True, eq=False)
class Definition:
    r"""An abbreviation :math:`\mathrm{symbol} := \mathrm{expr}`.

    ``components(d)`` gives its form in ``d`` explicit coordinates (when that differs from
    substituting the coordinates into ``expr``); ``tex`` replaces the displayed
    ``symbol = expr`` (``""`` hides it, e.g. for the 2nd and 3rd members of a family
    :math:`P_1, P_2, P_3` displayed once as :math:`P_j = \dots`).  Display never affects checking.
    """

    symbol: Any
    expr: Any
    components: Callable[[int], Any] | None = None
    tex: str | None = None


@dataclass(frozen=True)
class StepResult:
    """The outcome of checking one step (``index`` counts from 1; ``name`` and ``role`` as in :class:`Step`).

    ``ok`` says whether it verified, ``how`` by which transformation (or why not), ``components``
    the outcome of the explicit-coordinate re-check (``""`` when there was none).
    """

    index: int
    ok: bool
    how: str
    components: str = ""
    name: str | None = None
    role: str = "proof"

    @property
    def label(self) -> str:
        """``"step 3 (identity_3)"``: the number and, when the step has one, the name."""
        return f"step {self.index}" + (f" ({self.name})" if self.name else "")

    def __str__(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        extra = f"; {self.components}" if self.components else ""
        tag = f" [{self.role}]" if self.role != "proof" else ""
        return f"  {mark} {self.label}{tag}: {self.how}{extra}"


def _count_roles(results: Iterable[StepResult]) -> tuple[int, str]:
    """The number of genuine checks, and the others as ``"1 definition, 3 consequences"``."""
    results = list(results)
    genuine = sum(1 for r in results if r.role == "proof")
    parts = []
    for role in ROLES[1:]:
        m = sum(1 for r in results if r.role == role)
        if m:
            parts.append(f"{m} {role if m == 1 else _ROLE_PLURAL[role]}")
    return genuine, ", ".join(parts)


def _genuine_text(results: Iterable[StepResult]) -> str:
    genuine, others = _count_roles(results)
    text = f"{genuine} genuine check" + ("" if genuine == 1 else "s")
    return text + (f" (+ {others})" if others else "")


class DerivationError(AssertionError):
    """A derivation step did not verify; the message names the derivation and the step."""


@dataclass
class Report:
    """The checks of one derivation: ``ok`` when every step verified; ``str()`` tells which did not.

    ``results`` holds one :class:`StepResult` per step, in order; ``d`` is the dimension of the
    explicit-coordinate re-check (``None``: none was made).
    """

    title: str
    results: list[StepResult] = field(default_factory=list)
    d: int | None = None

    @property
    def ok(self) -> bool:
        """Whether every step verified."""
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> list[StepResult]:
        """The results of the steps that did not verify, in order."""
        return [r for r in self.results if not r.ok]

    @property
    def first_failure(self) -> StepResult | None:
        """The first step that did not verify, or ``None``."""
        bad = self.failures
        return bad[0] if bad else None

    @property
    def genuine(self) -> int:
        """How many steps are genuine checks (role ``"proof"``)."""
        return _count_roles(self.results)[0]

    def result(self, name: str) -> StepResult:
        """The result of the step called ``name``.

        Raises
        ------
        KeyError
            When no step has that name (the message lists the names).
        """
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"{self.title!r} has no step named {name!r}; steps: {[r.name for r in self.results]}")

    def summary(self) -> str:
        """One line, e.g. ``"<title>: all 9 steps verified: 5 genuine checks (+ 1 definition, 3 consequences)"``.

        On a failure: the number, name and reason of the first failing step and how many failed.
        """
        n = len(self.results)
        if self.ok:
            where = f"; re-checked with d = {self.d} explicit coordinates" if self.d else ""
            return f"{self.title}: all {n} steps verified: {_genuine_text(self.results)}{where}"
        first = self.first_failure
        what = f"{first.name}: {first.how}" if first.name else first.how
        return f"{self.title}: FAILED at step {first.index} of {n} ({what}); {len(self.failures)} failing"

    def raise_if_failed(self) -> Report:
        """Return ``self`` when every step verified.

        Raises
        ------
        DerivationError
            Naming the first failing step, with every failing step listed.
        """
        if not self.ok:
            raise DerivationError(self.summary() + "\n" + "\n".join(str(r) for r in self.failures))
        return self

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return self.summary()


class Reports(list):
    """The reports of :func:`verify_all`, one per derivation; prints one line per derivation."""

    @property
    def ok(self) -> bool:
        """Whether every step of every derivation verified."""
        return all(r.ok for r in self)

    @property
    def genuine(self) -> int:
        """How many steps of all the derivations are genuine checks."""
        return sum(r.genuine for r in self)

    def __repr__(self) -> str:
        results = [res for r in self for res in r.results]
        head = (f"{len(self)} derivations, {len(results)} steps: " + ("all verified" if self.ok else "FAILURES")
                + f"; {_genuine_text(results)}")
        return "\n".join([head] + ["  " + r.summary() for r in self])

    __str__ = __repr__


def _is_zero(expr: Any) -> tuple[bool, str]:
    """Decide ``expr == 0`` by exact transformations; return (ok, which one succeeded)."""
    if isinstance(expr, sp.MatrixBase):
        hows = []
        for entry in expr:
            ok, how = _is_zero(entry)
            if not ok:
                return False, how
            hows.append(how)
        return True, max(hows, key=len) if hows else "identical"
    e = sp.sympify(expr)
    if e.has(sp.Integral, sp.Sum, sp.Subs, sp.Derivative):
        e = e.doit()
    if e == 0:
        return True, "identical"
    tries: list[tuple[str, Callable]] = [
        ("expand", sp.expand),
        ("cancel", lambda x: sp.cancel(sp.together(x))),
        ("simplify", sp.simplify),
    ]
    if e.has(sp.Sum):
        tries.append(("simplify(expanded powers)", lambda x: sp.simplify(sp.expand(sp.expand_power_exp(x)))))
    if e.has(sp.sinh, sp.cosh, sp.tanh, sp.exp):
        tries.insert(1, ("rational in exponentials", _exp_rational_zero))
    if e.has(sp.sinh, sp.cosh, sp.tanh, sp.asinh, sp.acosh, sp.exp):
        tries.append(("simplify(exp form)", lambda x: sp.simplify(sp.expand(x.rewrite(sp.exp)))))
    for name, f in tries:
        try:
            if f(e) == 0:
                return True, name
        except Exception:  # noqa: BLE001 - a failed transformation is simply not a proof
            continue
    return False, "lhs - rhs does not reduce to 0"


def _exp_rational_zero(e: Any) -> Any:
    """Rewrite hyperbolic functions as exponentials, name every distinct exponential and cancel.

    Each exponent is expanded into a sum of terms ``q * m`` (``q`` rational), each ``exp(q m)``
    becomes ``w_m ** (q L)`` with ``L`` the common denominator of the ``q`` of ``m``, and the
    result is a rational function of the ``w``.  Treating the ``w`` as independent variables is
    a stronger claim than the original one, so ``cancel(...) == 0`` proves ``e == 0``.
    Returns the cancelled expression.
    """
    f = e.rewrite(sp.exp)
    f = f.replace(lambda x: isinstance(x, sp.exp), lambda x: sp.exp(sp.expand(x.args[0])))
    f = sp.expand(f, power_exp=True, mul=False, multinomial=False, power_base=False, log=False)
    exps = sorted(f.atoms(sp.exp), key=sp.default_sort_key)
    denominators: dict = {}
    parts = {}
    for a in exps:
        coeff, rest = a.args[0].as_coeff_Mul()
        if not coeff.is_Rational:
            coeff, rest = sp.Integer(1), a.args[0]
        parts[a] = (coeff, rest)
        denominators.setdefault(rest, []).append(int(coeff.q))
    ws = {rest: sp.Dummy("w", positive=True) for rest in denominators}
    reps = {}
    for a, (coeff, rest) in parts.items():
        m = math.lcm(*denominators[rest])
        reps[a] = ws[rest] ** int(coeff * m)
    return sp.cancel(sp.together(f.xreplace(reps)))


def _series_head(expr: Any, var: sp.Symbol, point: Any, order: int) -> Any:
    """The part of the series of ``expr`` in ``var`` around ``point`` below ``var**order``.

    Fast path (``point = 0``, ``expr`` a polynomial in ``var`` and in fractional powers such as
    ``sqrt(eps**2 a + k)``): each fractional power ``A`` is replaced by its own Taylor polynomial
    plus ``var**order * R_A`` (``R_A`` bounded near 0), the result is expanded and the terms below
    ``var**order`` are returned.  Otherwise ``sympy.series``.
    """
    e = sp.sympify(expr)
    if point == 0 and not isinstance(e, sp.MatrixBase):
        atoms = sorted((a for a in e.atoms(sp.Pow) if a.has(var) and not a.exp.is_Integer), key=sp.default_sort_key)
        reps = {}
        for i, a in enumerate(atoms):
            reps[a] = sp.series(a, var, 0, order).removeO() + var**order * sp.Dummy(f"R{i}")
        poly = e.xreplace(reps)
        if poly.is_polynomial(var):
            p = sp.expand(poly)
            return sum(p.coeff(var, j) * var**j for j in range(order))
    return sp.series(e, var, point, order).removeO()


def _limit(expr: Any, var: sp.Symbol, point: Any) -> Any:
    """``lim_{var -> point} expr``.

    Fast path for ``point = 0`` and ``expr = N / (c var**m)`` with ``N`` as in :func:`_series_head`:
    the terms of ``N`` below ``var**m`` must vanish (else the limit is not finite: ``sympy.limit``
    decides), and the limit is the coefficient of ``var**m`` over ``c``.  Otherwise ``sympy.limit``.
    """
    e = sp.sympify(expr)
    if point == 0:
        num, den = sp.fraction(sp.together(e))
        c, m = den.as_coeff_exponent(var)
        if not c.has(var) and m.is_Integer and m >= 0:
            head = sp.expand(_series_head(num, var, 0, int(m) + 1))
            if all(_is_zero(head.coeff(var, j))[0] for j in range(int(m))):
                return head.coeff(var, int(m)) / c
    return sp.limit(e, var, point)


def _nonneg(expr: Any) -> bool:
    """``True`` when ``expr >= 0`` follows from its form and the symbols' assumptions."""
    e = sp.sympify(expr)
    if e.is_nonnegative:
        return True
    if isinstance(e, sp.Mul):
        factors = e.args
        negatives = [f for f in factors if f.is_negative]
        rest = [f for f in factors if not f.is_negative]
        return len(negatives) % 2 == 0 and all(_nonneg(f) for f in rest)
    if isinstance(e, sp.Add):
        return all(_nonneg(t) for t in e.args)
    if isinstance(e, sp.Pow):
        base, ex = e.args
        if ex.is_integer and ex.is_even:
            return base.is_real is True
        if base.is_positive:
            return True
        return _nonneg(base) and bool(ex.is_positive)
    return False


class Derivation:
    r"""A titled sequence of checked steps.

    Parameters
    ----------
    title : str
        What is derived, shown as a heading.
    steps : sequence of Step
        The :class:`Step` objects, in reading order; their names must be unique.
    definitions : sequence of Definition
        Abbreviations :math:`\mathrm{symbol} := \mathrm{expr}` used by the steps (substituted before
        checking).
    names : mapping
        LaTeX names of symbols for display, e.g. ``{x_norm: r"\|x_s\|"}``.
    intro : str
        One or two sentences shown under the title.
    coords : callable, optional
        ``coords(d)`` returns the substitution of the norm and dot-product symbols by explicit
        coordinates (:math:`\|x_s\| \to \sqrt{x_1^2 + \dots + x_d^2}`) and the scaling degree of each
        coordinate; ``None`` when the derivation has no spatial vectors.
    d : int
        The dimension of the explicit-coordinate re-check.

    Raises
    ------
    ValueError
        When two steps share a name.
    """

    def __init__(
        self,
        title: str,
        steps: Sequence[Step],
        definitions: Sequence[Definition] = (),
        names: Mapping[sp.Symbol, str] | None = None,
        intro: str = "",
        coords: Callable[[int], tuple[dict, dict]] | None = None,
        d: int = 3,
    ) -> None:
        self.title = title
        self.steps = list(steps)
        names_seen = [st.name for st in self.steps if st.name is not None]
        dupes = sorted({nm for nm in names_seen if names_seen.count(nm) > 1})
        if dupes:
            raise ValueError(f"derivation {title!r}: step names must be unique, repeated: {dupes}")
        self.definitions = list(definitions)
        self.names = dict(names or {})
        self.intro = intro
        self.coords = coords
        self.d = d

    # ------------------------------------------------------------------ steps by name
    @property
    def step_names(self) -> list[str | None]:
        """The names of the steps, in order."""
        return [st.name for st in self.steps]

    def number(self, name: str) -> int:
        """The number (from 1) of the step called ``name``; ``KeyError`` when there is none."""
        for i, st in enumerate(self.steps, start=1):
            if st.name == name:
                return i
        raise KeyError(f"{self.title!r} has no step named {name!r}; steps: {self.step_names}")

    def step(self, name: str) -> Step:
        """The step called ``name``; ``KeyError`` when there is none."""
        return self.steps[self.number(name) - 1]

    # ------------------------------------------------------------------ checking
    def _substitutions(self, step: Step, d: int | None) -> dict:
        subs: dict = {}
        if step.expand:
            for df in self.definitions:
                subs[df.symbol] = df.components(d) if (d and df.components is not None) else df.expr
            if d and self.coords is not None:
                subs.update(self.coords(d)[0])
        if step.given:
            subs.update({sp.sympify(a): sp.sympify(b) for a, b in step.given.items()})
        return subs

    def _scaling(self, eps: Any, d: int | None) -> dict:
        if self.coords is None:
            return {}
        general, by_d = self.coords(d or 1)
        if d:
            degrees = dict(by_d)
        else:
            degrees = {sym: (2 if "_dot" in sym.name else 1) for sym in general}
        return {sym: eps**deg * sym for sym, deg in degrees.items()}

    def _expand(self, expr: Any, subs: Mapping) -> Any:
        if not subs:
            return expr
        plain = {a: b for a, b in subs.items() if not isinstance(a, AppliedUndef)}
        funcs = {a.func: sp.Lambda(a.args, b) for a, b in subs.items() if isinstance(a, AppliedUndef)}
        for _ in range(30):
            new = expr.xreplace(plain) if hasattr(expr, "xreplace") else expr
            for fn, lam in funcs.items():
                new = new.replace(fn, lam)
            if new == expr:
                return new
            expr = new
        return expr

    def _check_step(self, step: Step, d: int | None) -> tuple[bool, str]:
        subs = self._substitutions(step, d)
        lhs = self._expand(sp.sympify(step.lhs), subs)
        rhs = self._expand(sp.sympify(step.rhs), subs)
        if step.kind != "check":
            lhs, rhs = lhs.doit(), rhs.doit()
        if step.scale is not None:
            scaling = self._scaling(step.scale, d)
            lhs, rhs = lhs.xreplace(scaling), rhs.xreplace(scaling)
        kind = step.kind
        if kind == "simplify":
            ok, how = _is_zero(lhs - rhs)
            return ok, f"lhs - rhs = 0 by {how}" if ok else how
        if kind == "series":
            head = _series_head(lhs - rhs, step.var, step.point, step.order)
            ok, how = _is_zero(head)
            if ok:
                return True, f"lhs - rhs = O({step.var}^{step.order}): its series below that order is 0"
            return False, f"the series of lhs - rhs has terms below order {step.order}: {sp.sstr(sp.simplify(head))[:120]}"
        if kind == "limit":
            value = _limit(lhs, step.var, step.point)
            ok, how = _is_zero(value - rhs)
            return ok, (f"limit = rhs by {how}" if ok else f"limit is {sp.sstr(value)[:120]}, not rhs")
        if kind == "bound":
            cert = self._expand(sp.sympify(step.certificate), subs)
            ok, how = _is_zero(rhs - lhs - cert)
            if not ok:
                return False, "rhs - lhs differs from the certificate"
            if not _nonneg(cert):
                return False, "the certificate is not visibly non-negative"
            return True, f"rhs - lhs = certificate ({how}), non-negative by its form"
        if kind == "nonzero":
            witness = {sp.sympify(a): sp.sympify(b) for a, b in step.witness.items()}
            value = self._expand(lhs - rhs, witness)
            if isinstance(value, sp.MatrixBase):
                values = [sp.simplify(v) for v in value]
            else:
                values = [sp.simplify(value)]
            nonzero = [v for v in values if v.free_symbols == set() and abs(complex(sp.N(v, 30))) > 1e-25]
            if nonzero:
                return True, f"lhs - rhs = {sp.sstr(nonzero[0])} != 0 at the witness"
            return False, "lhs - rhs vanishes (or is not a number) at the witness"
        # check
        out = step.check()
        if isinstance(out, tuple):
            return bool(out[0]), str(out[1])
        return bool(out), "custom check " + ("passed" if out else "failed")

    def verify(self, d: int | None = -1) -> Report:
        """Check every step; return a :class:`Report` (``report.ok``, ``report.first_failure``).

        With explicit coordinates available (two-point derivations), every ``simplify``, ``series`` and
        ``limit`` step with ``expand`` and ``coordinates`` set and no ``given`` hypotheses is checked
        twice: with norm / dot-product symbols (any dimension) and with ``d`` explicit coordinates
        (``d=-1``: the derivation's default, ``None``: skip).  An exception while checking a step is
        reported as a failure of that step.
        """
        dd = self.d if d == -1 else d
        if self.coords is None:
            dd = None
        report = Report(self.title, d=dd)
        for i, step in enumerate(self.steps, start=1):
            try:
                ok, how = self._check_step(step, None)
            except Exception as exc:  # noqa: BLE001 - report, do not crash
                ok, how = False, f"error while checking: {type(exc).__name__}: {exc}"
            comp = ""
            if ok and dd and step.expand and step.coordinates and not step.given and step.kind in ("simplify", "series", "limit"):
                try:
                    ok_c, how_c = self._check_step(step, dd)
                except Exception as exc:  # noqa: BLE001
                    ok_c, how_c = False, f"error: {type(exc).__name__}: {exc}"
                comp = f"d = {dd} coordinates: " + ("ok" if ok_c else how_c)
                ok = ok and ok_c
            report.results.append(StepResult(i, ok, how, comp, step.name, step.role))
        return report

    def check(self, d: int | None = -1) -> Report:
        """:meth:`verify`, raising :class:`DerivationError` naming the first failing step; returns the report."""
        return self.verify(d).raise_if_failed()

    def evaluate(self, index: int | str, values: Mapping[Any, float], d: int | None = None) -> tuple[Any, Any]:
        """Numerical values of both sides of a step at ``values`` (symbol -> number).

        ``index`` is the step's name or its number (from 1).  The derivation's definitions (and the
        step's ``given``) are substituted first; with ``d`` the explicit-coordinate form is used.
        Returns two floats, or two numpy arrays for matrices.
        """
        step = self.step(index) if isinstance(index, str) else self.steps[index - 1]
        subs = self._substitutions(step, d)
        vals = {sp.sympify(a): sp.sympify(b) for a, b in values.items()}
        out = []
        for side in (step.lhs, step.rhs):
            e = self._expand(sp.sympify(side), subs).doit()
            e = e.xreplace(vals)
            if isinstance(e, sp.MatrixBase):
                out.append(np.array([[complex(sp.N(v, 30)).real for v in row] for row in e.tolist()]))
            else:
                out.append(complex(sp.N(e, 30)).real)
        return out[0], out[1]

    # ------------------------------------------------------------------ display
    def latex(self, expr: Any) -> str:
        """LaTeX of ``expr`` with this derivation's symbol names (deterministic)."""
        return sp.latex(sp.sympify(expr), symbol_names=self.names)

    def step_latex(self, step: Step) -> str:
        r"""The step as one LaTeX equation (``=``, ``\le``, ``\ne``, a limit, or a series with its O-term)."""
        L, R = self.latex(step.lhs), self.latex(step.rhs)
        if step.kind == "series":
            if step.order_label:
                o = step.order_label
            else:
                o = sp.latex(sp.O(step.var**step.order), symbol_names=self.names)
            return f"{L} = {R} + {o}"
        if step.kind == "limit":
            if isinstance(sp.sympify(step.lhs), sp.Add):
                L = rf"\left({L}\right)"
            return rf"\lim_{{{self.latex(step.var)} \to {self.latex(step.point)}}} {L} = {R}"
        rel = step.relation or {"bound": r"\le", "nonzero": r"\ne"}.get(step.kind, "=")
        return f"{L} {rel} {R}"

    def to_markdown(self) -> str:
        """The derivation as Markdown with inline LaTeX: title, intro, the definitions used, numbered steps."""
        lines = [f"**{self.title}**", ""]
        if self.intro:
            lines += [self.intro, ""]
        used = self._used_definitions()
        if used:
            shown = [
                f"${self.latex(df.symbol)} = {self.latex(df.expr)}$" if df.tex is None else f"${df.tex}$"
                for df in used
                if df.tex != ""
            ]
            defs = ", ".join(shown)
            lines += [f"where {defs}.", ""]
        for i, step in enumerate(self.steps, start=1):
            note = step.why
            if step.kind == "bound":
                note += rf" (rhs $-$ lhs $= {self.latex(step.certificate)} \ge 0$)"
            if step.kind == "nonzero":
                w = ", ".join(f"${self.latex(a)} = {self.latex(b)}$" for a, b in step.witness.items())
                note += f" (at {w})"
            tag = step.kind if step.role == "proof" else step.role
            lines.append(rf"{i}. $\displaystyle {self.step_latex(step)}$ — {note} *[{tag}]*")
        return "\n".join(lines)

    def _used_definitions(self) -> list[Definition]:
        """The definitions that the steps use, directly or through other definitions (display order kept)."""

        def symbols_of(e: Any) -> set:
            e = sp.sympify(e)
            out = set(getattr(e, "free_symbols", set()))
            if hasattr(e, "atoms"):
                out |= e.atoms(AppliedUndef)
                out |= {f.func for f in e.atoms(AppliedUndef)}
            return out

        by_symbol = {}
        for df in self.definitions:
            key = df.symbol.func if isinstance(df.symbol, AppliedUndef) else df.symbol
            by_symbol[key] = df
        todo: set = set()
        for st in self.steps:
            for e in (st.lhs, st.rhs, st.certificate):
                if e is not None:
                    todo |= symbols_of(e)
        seen: set = set()
        while todo:
            sym = todo.pop()
            if sym in seen:
                continue
            seen.add(sym)
            if sym in by_symbol:
                todo |= symbols_of(by_symbol[sym].expr)
        used = []
        for df in self.definitions:
            key = df.symbol.func if isinstance(df.symbol, AppliedUndef) else df.symbol
            if key in seen:
                used.append(df)
        # a family is displayed through its first member: keep it when any member is used
        for i, df in enumerate(self.definitions):
            if df.tex and df not in used:
                later = self.definitions[i + 1 :]
                members = []
                for other in later:
                    if other.tex != "":
                        break
                    members.append(other)
                if any(m in used for m in members):
                    used.append(df)
        return [df for df in self.definitions if df in used]

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def __repr__(self) -> str:
        return f"<Derivation {self.title!r}: {len(self.steps)} steps>"

    def __len__(self) -> int:
        return len(self.steps)


# =========================================================================== #
# symbols
# =========================================================================== #
def _curvature(k: Any) -> sp.Expr:
    if k is None:
        return sp.Symbol("k", positive=True)
    kk = sp.sympify(k)
    if kk.is_positive is not True:
        raise ValueError(f"k must be a positive symbol or number (<x,x>_L = -k), got {k!r}")
    return kk


def _dot_symbol(name: str) -> sp.Symbol:
    """A dot-product symbol: its name contains ``_dot``, so it scales like ``eps**2`` under :attr:`Step.scale`."""
    return sp.Symbol(name, real=True)


class _Pair:
    """Two points ``a = (a_t, a_s)``, ``b = (b_t, b_s)`` on the hyperboloid, as symbols.

    General form: norms ``|a_s|``, ``|b_s|`` and dot product ``a_s . b_s``; explicit form:
    coordinates ``a_1 .. a_d``.  ``tex_a``/``tex_b`` are the LaTeX letters.
    """

    def __init__(self, a: str, b: str, k: sp.Expr, tex_a: str | None = None, tex_b: str | None = None) -> None:
        ta, tb = tex_a or a, tex_b or b
        self.a, self.b, self.k = a, b, k
        self.ta, self.tb = ta, tb
        self.ra = sp.Symbol(f"{a}_norm", nonnegative=True)
        self.rb = sp.Symbol(f"{b}_norm", nonnegative=True)
        self.c = _dot_symbol(f"{a}{b}_dot")
        self.at = sp.Symbol(f"{a}_t", positive=True)
        self.bt = sp.Symbol(f"{b}_t", positive=True)
        self.inner = sp.Symbol(f"{a}{b}_inner")
        self.aa = sp.Symbol(f"{a}{a}_inner")
        self.bb = sp.Symbol(f"{b}{b}_inner")
        self.sq = sp.Symbol(f"{a}{b}_sqdist")
        self.es = sp.Symbol(f"{a}{b}_spatial_sqdist")
        self.dd = sp.Symbol(f"{a}{b}_diff_dot_sum")
        self.names = {
            self.ra: rf"\|{ta}_s\|",
            self.rb: rf"\|{tb}_s\|",
            self.c: rf"{ta}_s \cdot {tb}_s",
            self.at: rf"{ta}_t",
            self.bt: rf"{tb}_t",
            self.inner: rf"\langle {ta}, {tb} \rangle_L",
            self.aa: rf"\langle {ta}, {ta} \rangle_L",
            self.bb: rf"\langle {tb}, {tb} \rangle_L",
            self.sq: rf"\|{ta} - {tb}\|_L^2",
            self.es: rf"\|{ta}_s - {tb}_s\|^2",
            self.dd: rf"\left[({ta}_s - {tb}_s)\cdot({ta}_s + {tb}_s)\right]",
        }

    def comps(self, d: int) -> tuple[list[sp.Symbol], list[sp.Symbol]]:
        xs = [sp.Symbol(f"{self.a}_{i}", real=True) for i in range(1, d + 1)]
        ys = [sp.Symbol(f"{self.b}_{i}", real=True) for i in range(1, d + 1)]
        return xs, ys

    def definitions(self) -> list[Definition]:
        k = self.k

        def es_c(d: int) -> sp.Expr:
            xs, ys = self.comps(d)
            return sum((x - y) ** 2 for x, y in zip(xs, ys))

        def dd_c(d: int) -> sp.Expr:
            xs, ys = self.comps(d)
            return sum((x - y) * (x + y) for x, y in zip(xs, ys))

        return [
            Definition(self.at, sp.sqrt(self.ra**2 + k)),
            Definition(self.bt, sp.sqrt(self.rb**2 + k)),
            Definition(self.inner, -self.at * self.bt + self.c),
            Definition(self.aa, -self.at**2 + self.ra**2),
            Definition(self.bb, -self.bt**2 + self.rb**2),
            Definition(self.es, self.ra**2 + self.rb**2 - 2 * self.c, es_c),
            Definition(self.sq, -((self.at - self.bt) ** 2) + self.es),
            Definition(self.dd, self.ra**2 - self.rb**2, dd_c),
        ]

    def coords(self, d: int) -> tuple[dict, dict]:
        xs, ys = self.comps(d)
        subs = {
            self.ra: sp.sqrt(sum(x**2 for x in xs)),
            self.rb: sp.sqrt(sum(y**2 for y in ys)),
            self.c: sum(x * y for x, y in zip(xs, ys)),
        }
        degrees = {s: 1 for s in xs + ys}
        return subs, degrees


def _pair_derivation(pair: _Pair, title: str, steps: list[Step], intro: str, extra_defs=(), names=None, d=3):
    allnames = dict(pair.names)
    allnames.update(names or {})
    return Derivation(
        title, steps, pair.definitions() + list(extra_defs), allnames, intro, coords=pair.coords, d=d
    )


_EPS = sp.Symbol("epsilon", positive=True)


# =========================================================================== #
# notebook 02: squared distance, geodesic distance, decomposition
# =========================================================================== #
def lifted_norm(k: Any = None, d: int = 3) -> Derivation:
    r"""A lifted point lies on the hyperboloid.

    .. math::

        x_t = \sqrt{\|x_s\|^2 + k} \;\Longrightarrow\;
        \langle x, x\rangle_L = -x_t^2 + \|x_s\|^2 = -k,
        \qquad x_s = 0 \;\Longrightarrow\; x_t = \sqrt{k}

    ``k=None`` is a positive symbol; ``d`` the dimension of the explicit-coordinate re-check (so for
    every derivation below).
    """
    k = _curvature(k)
    P = _Pair("x", "y", k)
    steps = [
        Step(P.at**2, P.ra**2 + k, "squaring the lift $x_t = \\sqrt{\\|x_s\\|^2 + k}$",
             name="lift_squared", role="definition"),
        Step(P.aa, -k, "so the Lorentzian norm of the lifted point is $-k$: it lies on the hyperboloid", name="on_hyperboloid"),
        Step(P.at, sp.sqrt(k), "at $x_s = 0$: the origin is $(\\sqrt{k}, 0, \\dots, 0)$", given={P.ra: 0},
             name="origin", role="consequence"),
    ]
    return _pair_derivation(
        P, "A lifted point lies on the hyperboloid $\\langle x, x\\rangle_L = -k$", steps,
        "Any spatial vector $x_s$ becomes a point of the hyperboloid by choosing its time coordinate.", d=d,
    )


def squared_distance(k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 1 (notebook 02): the squared Lorentzian distance.

    .. math::

        \|x - y\|_L^2 = \langle x - y, x - y\rangle_L = -2k - 2\langle x, y\rangle_L
    """
    k = _curvature(k)
    P = _Pair("x", "y", k)
    steps = [
        Step(P.sq, P.aa - 2 * P.inner + P.bb,
             "bilinearity and symmetry of $\\langle \\cdot, \\cdot \\rangle_L$ (expand the product of $x - y$ with itself)",
             name="bilinearity"),
        Step(P.aa, -k, "$x$ lies on the hyperboloid (the lift), and so does $y$: $\\langle y, y\\rangle_L = -k$", name="on_hyperboloid"),
        Step(P.sq, -2 * k - 2 * P.inner, "**identity 1**", name="identity_1"),
        Step(P.inner, -P.sq / 2 - k, "rearranged (for $k = 1$ the thread's $\\langle i, j\\rangle_L = -\\frac{1}{2}\\|i - j\\|_L^2 - 1$)",
             name="inner_from_distance"),
        Step(P.sq, 0, "the squared distance of a point to itself is 0", given={P.rb: P.ra, P.c: P.ra**2}, name="self_distance"),
    ]
    return _pair_derivation(
        P, "Identity 1: the squared Lorentzian distance", steps,
        "The squared Lorentzian distance is the Lorentzian inner product of the difference with itself.", d=d,
    )


def geodesic_distance(k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 2 (notebook 02): geodesic distance and squared Lorentzian distance.

    .. math::

        d = \sqrt{k}\,\operatorname{arcosh}\Bigl(-\frac{\langle x, y\rangle_L}{k}\Bigr), \qquad
        \|x - y\|_L^2 = 4k\sinh^2\frac{d}{2\sqrt{k}}, \qquad
        d = 2\sqrt{k}\,\operatorname{arsinh}\frac{\|x - y\|_L}{2\sqrt{k}}
    """
    k = _curvature(k)
    P = _Pair("x", "y", k)
    dist = sp.Symbol("geodesic_d", nonnegative=True)
    s = sp.Symbol("S_sq", nonnegative=True)  # a free stand-in for |x - y|^2_L in steps 5-6
    rk = sp.sqrt(k)
    half = dist / (2 * rk)

    def arsinh_inverse() -> tuple[bool, str]:
        w = sp.Symbol("w", real=True)
        claim = 2 * rk * sp.asinh(sp.sqrt(4 * k * sp.sinh(half) ** 2) / (2 * rk))
        same = _is_zero(sp.sinh(claim / (2 * rk)) - sp.sinh(half))[0]
        increasing = sp.diff(sp.sinh(w), w).is_positive
        return bool(same and increasing), "sinh(rhs / (2 sqrt k)) = sinh(d / (2 sqrt k)) and sinh' = cosh > 0"

    steps = [
        Step((k + P.ra * P.rb) ** 2, P.at**2 * P.bt**2,
             "$-\\langle x, y\\rangle_L \\ge k$, so the arcosh is defined: square both sides of "
             "$k + \\|x_s\\|\\|y_s\\| \\le x_t y_t$ (then Cauchy–Schwarz, $x_s \\cdot y_s \\le \\|x_s\\|\\|y_s\\|$)",
             kind="bound", certificate=k * (P.ra - P.rb) ** 2, name="arcosh_defined"),
        Step(-P.inner, k * sp.cosh(dist / rk), "invert the definition of $d$ ($\\cosh$ undoes $\\operatorname{arcosh}$ on $[1, \\infty)$)",
             name="cosh_of_distance"),
        Step(P.sq, -2 * k + 2 * k * sp.cosh(dist / rk), "identity 1 with the line above", name="sqdist_cosh"),
        Step(-2 * k + 2 * k * sp.cosh(dist / rk), 4 * k * sp.sinh(half) ** 2,
             "half-angle formula $\\cosh u - 1 = 2 \\sinh^2(u/2)$ (holds for every $d$)", expand=False, name="half_angle"),
        Step(P.sq, 4 * k * sp.sinh(half) ** 2, "**identity 2** (the two lines above)", expand=False,
             given={P.sq: -2 * k + 2 * k * sp.cosh(dist / rk)}, name="identity_2", role="consequence"),
        Step(sp.sqrt(s), 2 * rk * sp.sinh(half),
             "square root of identity 2 ($d \\ge 0$, so $\\sinh \\ge 0$)", expand=False,
             given={s: 4 * k * sp.sinh(half) ** 2}, name="square_root"),
        Step(dist, 2 * rk * sp.asinh(sp.sqrt(s) / (2 * rk)),
             "solved for $d$ ($\\sinh$ is increasing, $\\operatorname{arsinh}$ its inverse): the accurate way to compute the distance of nearby points",
             kind="check", check=arsinh_inverse, name="arsinh_form"),
        Step(dist, 0, "a point is at distance 0 from itself", given={P.rb: P.ra, P.c: P.ra**2}, name="self_distance"),
    ]
    names = {dist: "d", s: r"\|x - y\|_L^2"}
    defs = [Definition(dist, rk * sp.acosh(-P.inner / k))]
    return _pair_derivation(
        P, "Identity 2: geodesic distance and squared Lorentzian distance", steps,
        "The geodesic (true hyperbolic) distance $d$ is a monotone function of the squared Lorentzian distance.",
        extra_defs=defs, names=names, d=d,
    )


def decomposition(k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 3 (notebook 02) and its consequences (the stable formula; equal norms).

    .. math::

        \|x - y\|_L^2 = \|x_s - y_s\|^2 - (x_t - y_t)^2
                      = \|x_s - y_s\|^2 - \Bigl(\frac{(x_s - y_s)\cdot(x_s + y_s)}{x_t + y_t}\Bigr)^2
                      \le \|x_s - y_s\|^2,

    with equality when :math:`\|x_s\| = \|y_s\|`.
    """
    k = _curvature(k)
    P = _Pair("x", "y", k)
    stable = P.es - (P.dd / (P.at + P.bt)) ** 2
    steps = [
        Step(P.sq, P.es - (P.at - P.bt) ** 2, "write out $\\langle x - y, x - y\\rangle_L$: time part with a minus sign, spatial part with a plus",
             name="written_out", role="definition"),
        Step(P.es - (P.at - P.bt) ** 2, -2 * k - 2 * P.inner, "agrees with identity 1", name="agrees_with_identity_1"),
        Step(P.at - P.bt, (P.at**2 - P.bt**2) / (P.at + P.bt), "difference of squares", expand=False, name="difference_of_squares"),
        Step(P.at - P.bt, (P.ra**2 - P.rb**2) / (P.at + P.bt), "$x_t^2 - y_t^2 = \\|x_s\\|^2 - \\|y_s\\|^2$: the $k$ cancels",
             name="time_difference"),
        Step(P.ra**2 - P.rb**2, P.dd, "bilinearity of the dot product", name="norm_difference"),
        Step(P.sq, stable, "**identity 3**, the stable formula: no subtraction of two large, nearly equal numbers", name="identity_3"),
        Step(P.sq, P.es, "Euclidean spatial distance over-states the Lorentzian one by exactly $(x_t - y_t)^2$",
             kind="bound", certificate=(P.at - P.bt) ** 2, name="euclidean_overstates", role="consequence"),
        Step(P.at - P.bt, 0, "on a sphere $\\|y_s\\| = \\|x_s\\|$ the time coordinates agree", given={P.rb: P.ra},
             name="equal_norms_time", role="consequence"),
        Step(P.sq, P.es, "so on a sphere $\\|y_s\\| = \\|x_s\\|$ the two distances are **equal**", given={P.rb: P.ra},
             name="equal_norms_equal", role="consequence"),
    ]
    return _pair_derivation(
        P, "Identity 3: spatial distance minus squared time difference", steps,
        "Split the squared Lorentzian distance into a Euclidean part and a correction.", d=d,
    )


# =========================================================================== #
# notebook 04: Taylor expansion, the thread's approximation, its exact error, identities 4 and 6
# =========================================================================== #
def time_taylor(k: Any = None, order: int = 6) -> Derivation:
    r"""Taylor series of the time coordinate :math:`\sqrt{r^2 + k}` in :math:`r = \|x_s\|`, up to ``r**order``.

    .. math::

        \sqrt{r^2 + k} = \sum_{n \ge 0} \binom{1/2}{n} k^{1/2 - n} r^{2n}
                       = \sqrt{k} + \frac{r^2}{2\sqrt{k}} - \frac{r^4}{8k^{3/2}} + O(r^6)
                       \le \sqrt{k} + \frac{r^2}{2\sqrt{k}}
    """
    k = _curvature(k)
    r = sp.Symbol("r", nonnegative=True)
    t = sp.sqrt(r**2 + k)
    rk = sp.sqrt(k)
    cn, nn = sp.Symbol("c_n"), sp.Symbol("n", integer=True, nonnegative=True)
    series_terms = sum(sp.binomial(sp.Rational(1, 2), n) * k ** (sp.Rational(1, 2) - n) * r ** (2 * n) for n in range(order // 2 + 1))

    def coefficients() -> tuple[bool, str]:
        s = sp.series(t, r, 0, 2 * (order // 2) + 2).removeO()
        for n in range(order // 2 + 1):
            want = sp.binomial(sp.Rational(1, 2), n) * k ** (sp.Rational(1, 2) - n)
            if sp.simplify(s.coeff(r, 2 * n) - want) != 0:
                return False, f"coefficient of r^{2 * n} is not binomial(1/2, {n}) k^(1/2 - {n})"
        return True, f"coefficients of r^0 .. r^{2 * (order // 2)} are binomial(1/2, n) k^(1/2 - n)"

    steps = [
        Step(t, rk + r**2 / (2 * rk) - r**4 / (8 * k ** sp.Rational(3, 2)), "Taylor series in $r$ (the binomial series; coefficients in step 3)",
             kind="series", var=r, order=6, name="series_order_4"),
        Step(t, series_terms, f"to order {order}", kind="series", var=r, order=2 * (order // 2) + 2, name="series_full"),
        Step(cn, sp.binomial(sp.Rational(1, 2), nn) * k ** (sp.Rational(1, 2) - nn),
             f"the coefficient $c_n$ of $r^{{2n}}$ ($n = 0, \\dots, {order // 2}$): binomial series "
             "$(1 + u)^{1/2} = \\sum_n \\binom{1/2}{n} u^n$ with $u = r^2 / k$", kind="check", check=coefficients, name="coefficients"),
        Step(r**2 + k, (rk + r**2 / (2 * rk)) ** 2, "the first-order truncation over-estimates the time coordinate (compare squares)",
             kind="bound", certificate=r**4 / (4 * k), name="truncation_over_estimates"),
    ]
    return Derivation(
        "The time coordinate near the origin", steps, names={r: r"r", cn: "c_n", nn: "n"},
        intro="$r = \\|x_s\\|$ is the size of the spatial part; the time coordinate is $\\sqrt{r^2 + k}$.",
    )


def _query_key(k: sp.Expr) -> _Pair:
    """Query ``q`` and key ``kappa`` (internal name ``v``: sorts after ``q``, so terms read ``q_t kappa_t``)."""
    return _Pair("q", "v", k, "q", r"\kappa")


def thread_approximation(k: Any = None, d: int = 3) -> Derivation:
    r"""The thread's argument, step by step, with its :math:`O(r^4)` terms explicit (``k=1``: the thread's formulas).

    .. math::

        \|q - \kappa\|_L^2 = \|q_s - \kappa_s\|^2 + O(r^4), \qquad
        q_s \cdot \kappa_s = -\tfrac12\|q - \kappa\|_L^2 + \tfrac12\bigl(\|q_s\|^2 + \|\kappa_s\|^2\bigr) + O(r^4),

    :math:`r` the size of both spatial parts.  The thread writes the query and the key as
    :math:`i` and :math:`j`; here they are :math:`q` and :math:`\kappa`.
    """
    k = _curvature(k)
    P = _query_key(k)
    rk = sp.sqrt(k)
    o4 = "O(r^{4})"
    steps = [
        Step(P.inner, -P.at * P.bt + P.c, "Lorentzian inner product", name="inner_product", role="definition"),
        Step(P.sq, -2 * k - 2 * P.inner, "squared Lorentzian distance (identity 1)", name="identity_1"),
        Step(P.inner, -P.sq / 2 - k, "rearranged", name="inner_from_distance"),
        Step(P.inner, -sp.sqrt(P.ra**2 + k) * sp.sqrt(P.rb**2 + k) + P.c,
             f"substitute the lift $q_t = \\sqrt{{\\|q_s\\|^2 + {sp.latex(k)}}}$, $\\kappa_t = \\sqrt{{\\|\\kappa_s\\|^2 + {sp.latex(k)}}}$",
             name="lift_substituted", role="definition"),
        Step(sp.sqrt(P.ra**2 + k), rk + P.ra**2 / (2 * rk), "Taylor: nearby points, $\\|q_s\\|, \\|\\kappa_s\\| \\ll 1$",
             kind="series", var=_EPS, order=4, scale=_EPS, order_label=o4, name="taylor_lift"),
        Step(P.inner, -(k + (P.ra**2 + P.rb**2) / 2) + P.c, "product of the two expansions (the cross term is fourth order)",
             kind="series", var=_EPS, order=4, scale=_EPS, order_label=o4, name="taylor_inner"),
        Step(P.sq, P.es, "substitute into $-2k - 2\\langle q, \\kappa\\rangle_L$: to second order the Lorentzian distance is the Euclidean one",
             kind="series", var=_EPS, order=4, scale=_EPS, order_label=o4, name="taylor_distance"),
        Step(P.c, (P.ra**2 + P.rb**2 - P.es) / 2, "polarisation identity (exact)", name="polarisation"),
        Step(P.c, -P.sq / 2 + (P.ra**2 + P.rb**2) / 2,
             "the thread's result: the 'constant' is $(\\|q_s\\|^2 + \\|\\kappa_s\\|^2)/2$, which depends on the key $\\kappa$",
             kind="series", var=_EPS, order=4, scale=_EPS, order_label=o4, name="thread_result"),
        Step(P.at * P.bt - k, (P.ra**2 + P.rb**2) / 2, "the exact 'constant' of identity 4 agrees with it to this order",
             kind="series", var=_EPS, order=4, scale=_EPS, order_label=o4, name="constant_agrees"),
    ]
    return _pair_derivation(
        P, "The thread's approximation, step by step" + (" ($k = 1$)" if k == 1 else ""), steps,
        "Query $q$ and key $\\kappa$ (the thread's $i$ and $j$) are points of the hyperboloid; $r$ stands for the size "
        "of their spatial parts ($O(r^4)$: shrinking both spatial parts by $\\varepsilon$ shrinks the error like $\\varepsilon^4$).", d=d,
    )


def approximation_error(k: Any = None, d: int = 3) -> Derivation:
    r"""The exact error of the approximation :math:`\|q - \kappa\|_L^2 \approx \|q_s - \kappa_s\|^2`.

    .. math::

        \|q_s - \kappa_s\|^2 - \|q - \kappa\|_L^2 = (q_t - \kappa_t)^2
          = \frac{(\|q_s\|^2 - \|\kappa_s\|^2)^2}{(q_t + \kappa_t)^2}
          \le \frac{(\|q_s\|^2 - \|\kappa_s\|^2)^2}{4k},

    the bound being the leading, exactly fourth-order term near the origin; the error is 0 for
    equal norms.
    """
    k = _curvature(k)
    P = _query_key(k)
    err = (P.at - P.bt) ** 2
    lead = (P.ra**2 - P.rb**2) ** 2 / (4 * k)
    eps = _EPS
    scaled = (sp.sqrt(eps**2 * P.ra**2 + k) - sp.sqrt(eps**2 * P.rb**2 + k)) ** 2 / eps**4
    rk = sp.sqrt(k)
    # (q_t + kappa_t)^2 - 4k = (q_t + kappa_t - 2 sqrt k)(q_t + kappa_t + 2 sqrt k), and q_t - sqrt k = |q_s|^2 / (q_t + sqrt k)
    gap = P.ra**2 / (P.at + rk) + P.rb**2 / (P.bt + rk)
    steps = [
        Step(P.es - P.sq, err, "identity 3: the error of the approximation, exactly", name="exact_error", role="definition"),
        Step(err, (P.ra**2 - P.rb**2) ** 2 / (P.at + P.bt) ** 2,
             "identity 3, $q_t - \\kappa_t = (\\|q_s\\|^2 - \\|\\kappa_s\\|^2)/(q_t + \\kappa_t)$", name="stable_error"),
        Step(err, lead, "series: the error is fourth order in the size of the points", kind="series",
             var=eps, order=6, scale=eps, order_label="O(r^{6})", name="fourth_order"),
        Step(scaled, lead, "and exactly fourth order (the limit is not 0 unless the norms are equal)", kind="limit", var=eps, point=0,
             name="exactly_fourth_order"),
        Step(err, lead, "for all points, not only small ones: $(q_t + \\kappa_t)^2 \\ge 4k$", kind="bound",
             certificate=(P.ra**2 - P.rb**2) ** 2 * gap * (P.at + P.bt + 2 * rk) / (4 * k * (P.at + P.bt) ** 2), name="global_bound"),
        Step(err, 0, "equal norms $\\|\\kappa_s\\| = \\|q_s\\|$: the approximation is exact", given={P.rb: P.ra},
             name="equal_norms_exact", role="consequence"),
    ]
    names = {eps: r"\varepsilon"}
    return _pair_derivation(
        P, "The exact error of the approximation", steps,
        "The thread's $\\|q - \\kappa\\|_L^2 \\approx \\|q_s - \\kappa_s\\|^2$ has an error that identity 3 gives in closed form.",
        names=names, d=d,
    )


def query_constant(k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 4: what the thread's "constant" is (the key is :math:`\kappa`).

    .. math::

        q_s \cdot \kappa_s = -\tfrac12\|q - \kappa\|_L^2 + (q_t \kappa_t - k), \qquad
        \frac{\partial (q_t \kappa_t)}{\partial \|\kappa_s\|} = \frac{q_t \|\kappa_s\|}{\kappa_t} \ne 0,

    so the "constant" :math:`q_t\kappa_t - k` (near the origin
    :math:`\tfrac12(\|q_s\|^2 + \|\kappa_s\|^2) + O(r^4)`) changes with the key.
    """
    k = _curvature(k)
    P = _query_key(k)
    eps = _EPS
    steps = [
        Step(P.c, P.inner + P.at * P.bt, "definition of $\\langle q, \\kappa\\rangle_L$", name="inner_product", role="definition"),
        Step(P.inner, -P.sq / 2 - k, "identity 1", name="identity_1"),
        Step(P.c, -P.sq / 2 + (P.at * P.bt - k), "**identity 4**: the spatial dot product is distance plus $q_t \\kappa_t - k$",
             name="identity_4"),
        Step(P.at * P.bt - k, (P.ra**2 + P.rb**2) / 2, "near the origin the 'constant' is the thread's $(\\|q_s\\|^2 + \\|\\kappa_s\\|^2)/2$",
             kind="series", var=eps, order=4, scale=eps, order_label="O(r^{4})", name="near_origin"),
        Step(sp.Derivative(P.at * P.bt, P.rb), P.at * P.rb / P.bt, "the 'constant' grows with the key's norm", coordinates=False,
             name="grows_with_key_norm"),
        Step(sp.Derivative(P.at * P.bt, P.rb), 0, "so it is not constant over the keys", kind="nonzero", coordinates=False,
             witness={P.ra: 0, P.rb: 1, k: 1} if isinstance(k, sp.Symbol) else {P.ra: 0, P.rb: 1}, name="not_constant"),
    ]
    return _pair_derivation(
        P, "Identity 4: what the thread's 'constant' is", steps,
        "Query $q$, key $\\kappa$ (a Greek k, to keep the letter $k$ for the curvature).", d=d,
    )


def euclidean_limit(d: int = 3) -> Derivation:
    r"""Identity 6, the Euclidean shadow: :math:`k \to \infty` with the spatial parts fixed.

    .. math::

        q_t \kappa_t - k \to \tfrac12\bigl(\|q_s\|^2 + \|\kappa_s\|^2\bigr), \qquad
        -\tfrac12\|q - \kappa\|_L^2 \to -\tfrac12\|q_s - \kappa_s\|^2, \qquad
        q_s \cdot \kappa_s = -\tfrac12\|q_s - \kappa_s\|^2 + \tfrac12\bigl(\|q_s\|^2 + \|\kappa_s\|^2\bigr):

    identity 4 becomes the flat polarisation identity, and the key-dependent
    :math:`\tfrac12\|\kappa_s\|^2` is the bias that separates dot-product from distance attention in
    flat space.  The constant converges like :math:`1/k`, with
    :math:`q_t\kappa_t - k = \tfrac12(\|q_s\|^2 + \|\kappa_s\|^2) - (\|q_s\|^2 - \|\kappa_s\|^2)^2/(8k) + O(k^{-2})`.
    """
    k = sp.Symbol("k", positive=True)
    P = _query_key(k)
    rho2 = sp.Symbol("v2_norm", nonnegative=True)  # the norm of a second key kappa_2
    kt2 = sp.Symbol("v2_t", positive=True)
    steps = [
        Step(P.at * P.bt - k, (P.ra**2 + P.rb**2) / 2, "the 'constant' of identity 4 tends to the thread's $(\\|q_s\\|^2 + \\|\\kappa_s\\|^2)/2$",
             kind="limit", var=k, point=sp.oo, name="constant_limit"),
        Step(k * (P.at * P.bt - k - (P.ra**2 + P.rb**2) / 2), -((P.ra**2 - P.rb**2) ** 2) / 8,
             "it gets there like $1/k$: $q_t\\kappa_t - k = \\frac{1}{2}(\\|q_s\\|^2 + \\|\\kappa_s\\|^2) - (\\|q_s\\|^2 - \\|\\kappa_s\\|^2)^2/(8k) + O(k^{-2})$",
             kind="limit", var=k, point=sp.oo, name="constant_rate"),
        Step(-P.sq / 2, -P.es / 2, "the distance logit tends to the Euclidean one ($q_t - \\kappa_t \\to 0$)",
             kind="limit", var=k, point=sp.oo, name="distance_limit"),
        Step(P.c, -P.es / 2 + (P.ra**2 + P.rb**2) / 2,
             "**identity 6**, identity 4 in the limit: the flat polarisation identity, exact at every scale", name="identity_6"),
        Step(P.at * (P.bt - kt2), (P.rb**2 - rho2**2) / 2,
             "the bias difference between two keys tends to $\\frac{1}{2}(\\|\\kappa_{s,1}\\|^2 - \\|\\kappa_{s,2}\\|^2)$: "
             "a key-dependent term, not a constant, even in flat space",
             kind="limit", var=k, point=sp.oo, name="bias_difference_limit"),
    ]
    names = {rho2: r"\|\kappa_{s,2}\|", kt2: r"\kappa_{t,2}", P.rb: r"\|\kappa_s\|"}
    defs = [Definition(kt2, sp.sqrt(rho2**2 + k))]
    return _pair_derivation(
        P, "Identity 6: the Euclidean shadow ($k \\to \\infty$, spatial parts fixed)", steps,
        "Flatten the hyperboloid: let the curvature parameter $k$ grow (curvature $-1/k \\to 0$) and keep the spatial "
        "parts $q_s$, $\\kappa_s$ (and a second key $\\kappa_{s,2}$) fixed.", extra_defs=defs, names=names, d=d,
    )


# =========================================================================== #
# softmax: shift invariance, the per-key bias, identity 5
# =========================================================================== #
def softmax(z: Sequence[Any]) -> sp.Matrix:
    r"""Symbolic softmax of a list of logits, as a column matrix.

    .. math::

        \mathrm{softmax}(z)_j = \frac{e^{z_j}}{\sum_l e^{z_l}}
    """
    exps = [sp.exp(v) for v in z]
    total = sum(exps)
    return sp.Matrix([e / total for e in exps])


def _family(name: str, tex: str, exprs: Sequence[Any], shown: str | None, fmt: str | None = None) -> tuple[list[sp.Symbol], list[Definition], dict]:
    """Symbols ``name_1 .. name_n`` standing for ``exprs``; displayed once as ``shown``.

    ``fmt`` (with ``{j}``) is the LaTeX of member ``j``; default ``tex_{j}``.
    """
    syms = [sp.Symbol(f"{name}_{j}") for j in range(1, len(exprs) + 1)]
    defs = [Definition(sym, e, tex=(shown if j == 0 else "")) for j, (sym, e) in enumerate(zip(syms, exprs))]
    pattern = fmt or (tex + "_{{{j}}}")
    names = {sym: pattern.format(j=j) for j, sym in enumerate(syms, start=1)}
    return syms, defs, names


def _softmax_symbol(name: str, tex: str, logits: Sequence[Any], shown: str | None = "") -> tuple[sp.Symbol, Definition, dict]:
    """One symbol for the whole vector ``softmax(logits)`` (an immutable column matrix)."""
    sym = sp.Symbol(name)
    return sym, Definition(sym, sp.ImmutableMatrix(softmax(logits)), tex=shown), {sym: tex}


def _vec(syms: Sequence[Any]) -> sp.Matrix:
    return sp.Matrix(list(syms))


def softmax_shift(n: int = 3) -> Derivation:
    r"""A softmax ignores a term common to all logits (``n`` explicit and general); a per-key term does not cancel.

    .. math::

        \mathrm{softmax}(z + c)_j = \mathrm{softmax}(z)_j, \qquad
        \mathrm{softmax}(z + \beta) \ne \mathrm{softmax}(z) \text{ in general.}

    Raises
    ------
    ValueError
        When :math:`n < 2`.
    """
    if n < 2:
        raise ValueError(f"softmax_shift needs n >= 2 keys, got {n}")
    z = sp.symbols(f"z1:{n + 1}", real=True)
    beta = sp.symbols(f"beta1:{n + 1}", real=True)
    c = sp.Symbol("c", real=True)
    zi = sp.IndexedBase("z")
    j, l, m = sp.symbols("j l n", integer=True, positive=True)
    sum_shift = sp.Sum(sp.exp(zi[l] + c), (l, 1, m))
    sum_plain = sp.Sum(sp.exp(zi[l]), (l, 1, m))
    plain, d1, n1 = _softmax_symbol("sm", r"\mathrm{softmax}(z)", z, r"\mathrm{softmax}(z)_j = e^{z_j} / \sum_{l=1}^{n} e^{z_l}")
    shifted, d2, n2 = _softmax_symbol("smc", r"\mathrm{softmax}(z + c)", [v + c for v in z])
    perkey, d3, n3 = _softmax_symbol("smb", r"\mathrm{softmax}(z + \beta)", [v + b for v, b in zip(z, beta)])
    witness = {zz: 0 for zz in z}
    witness.update({b: (1 if i == 0 else 0) for i, b in enumerate(beta)})
    steps = [
        Step(shifted, plain, f"the common factor $e^c$ cancels ($n = {n}$ keys, every entry)", name="common_shift"),
        Step(sum_shift, sp.exp(c) * sum_plain, "general $n$: $e^{z_l + c} = e^c e^{z_l}$, and $e^c$ leaves the sum",
             name="general_sum"),
        Step(sp.exp(zi[j] + c) / sum_shift, sp.exp(zi[j]) / sum_plain, "general $n$: numerator and denominator share $e^c$",
             name="general_entry"),
        Step(perkey, plain, "a term $\\beta_j$ that depends on the key does **not** cancel",
             kind="nonzero", witness=witness, name="per_key_shift"),
    ]
    names = {c: "c", **n1, **n2, **n3}
    return Derivation(
        f"Softmax is blind to per-query shifts, not to per-key ones (n = {n} and general n)", steps, [d1, d2, d3], names,
        intro="Logits $z_1, \\dots, z_n$ (one per key), a shift $c$ common to all of them, a shift $\\beta_j$ per key.",
    )


def _keys(n: int, k: sp.Expr):
    rq = sp.Symbol("q_norm", nonnegative=True)
    rho = sp.symbols(f"kappa_norm1:{n + 1}", nonnegative=True)
    dots = [_dot_symbol(f"qkappa_dot{j}") for j in range(1, n + 1)]
    tau = sp.Symbol("tau", positive=True)
    qt = sp.sqrt(rq**2 + k)
    kt = [sp.sqrt(r**2 + k) for r in rho]
    sq = [-((qt - t) ** 2) + rq**2 + r**2 - 2 * c for t, r, c in zip(kt, rho, dots)]  # |q - kappa_j|^2_L
    inner = [-qt * t + c for t, c in zip(kt, dots)]
    names = {rq: r"\|q_s\|", tau: r"\tau"}
    for j, (r, c) in enumerate(zip(rho, dots), start=1):
        names[r] = rf"\|\kappa_{{s,{j}}}\|"
        names[c] = rf"q_s \cdot \kappa_{{s,{j}}}"
    return rq, rho, dots, tau, qt, kt, sq, inner, names


def bias_in_softmax(n: int = 3, k: Any = None) -> Derivation:
    r"""Identity 4 inside a softmax: spatial-dot attention is distance attention with a per-key bias.

    .. math::

        \mathrm{softmax}_j\Bigl(\frac{q_s \cdot \kappa_{s,j}}{\tau}\Bigr)
        = \mathrm{softmax}_j\Bigl(\frac{-\tfrac12\|q - \kappa_j\|_L^2 + q_t \kappa_{t,j}}{\tau}\Bigr),
        \qquad
        b_1 - b_2 = \frac{q_t\,(\|\kappa_{s,1}\|^2 - \|\kappa_{s,2}\|^2)}{\tau\,(\kappa_{t,1} + \kappa_{t,2})}

    with the bias :math:`b_j = q_t\kappa_{t,j}/\tau`, which changes with the key's norm (so the two
    attentions differ), for ``n`` keys.
    """
    k = _curvature(k)
    rq, rho, dots, tau, qt, kt, sq, inner, names = _keys(n, k)
    s_, ds, ns = _family("s", "s", [c / tau for c in dots], r"s_j = q_s \cdot \kappa_{s,j} / \tau \text{ (spatial logits)}")
    a_, da, na = _family("a", "a", [-x / 2 / tau for x in sq], r"a_j = -\frac{1}{2}\|q - \kappa_j\|_L^2 / \tau \text{ (distance logits)}")
    b_, db, nb = _family("b", "b", [qt * t / tau for t in kt], r"b_j = q_t \kappa_{t,j} / \tau \text{ (bias)}")
    t_, dt, nt = _family("kt", r"\kappa_t", kt, r"\kappa_{t,j} = \sqrt{\|\kappa_{s,j}\|^2 + k}", fmt=r"\kappa_{{t,{j}}}")
    sm_s, dss, nss = _softmax_symbol("sm_s", r"\mathrm{softmax}(s)", s_, r"\mathrm{softmax}(v)_j = e^{v_j} / \sum_l e^{v_l}")
    sm_ab, dsab, nsab = _softmax_symbol("sm_ab", r"\mathrm{softmax}(a + b)", [x + y for x, y in zip(a_, b_)])
    sm_a, dsa, nsa = _softmax_symbol("sm_a", r"\mathrm{softmax}(a)", a_)
    qts = sp.Symbol("q_t", positive=True)
    witness = {rq: 1, tau: 1, **{r: (1 if j == 0 else 0) for j, r in enumerate(rho)}, **{c: 0 for c in dots}}
    if isinstance(k, sp.Symbol):
        witness[k] = 1
    steps = [
        Step(_vec(s_), _vec([x + y - k / tau for x, y in zip(a_, b_)]), "identity 4 for every key, divided by the temperature $\\tau$",
             name="logits"),
        Step(sm_s, sm_ab, "the $-k/\\tau$ is common to all keys and cancels", name="softmax_with_bias"),
        Step(sm_s, sm_a, "but the bias changes with the key: the two attentions differ",
             kind="nonzero", witness=witness, name="attentions_differ"),
        Step(b_[0] - b_[1], qts * (rho[0] ** 2 - rho[1] ** 2) / (tau * (t_[0] + t_[1])),
             "bias differences come from norm differences only (identity 3)", name="bias_difference"),
    ]
    defs = [Definition(qts, qt)] + dt + ds + da + db + [dss, dsab, dsa]
    return Derivation(
        f"Identity 4 inside the softmax ({n} keys)", steps, defs, {**names, **ns, **na, **nb, **nt, **nss, **nsab, **nsa, qts: "q_t"},
        intro="Keys $\\kappa_1, \\dots, \\kappa_n$ of any dimension (only norms and dot products enter).",
    )


def lorentz_attention(n: int = 3, k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 5, and the Lorentzian inner product without a softmax.

    .. math::

        \mathrm{softmax}_j\Bigl(\frac{\langle q, \kappa_j\rangle_L}{\tau}\Bigr)
        = \mathrm{softmax}_j\Bigl(\frac{-\tfrac12\|q - \kappa_j\|_L^2}{\tau}\Bigr),
        \qquad
        \frac{\langle q, \kappa_j\rangle_L}{\sum_l \langle q, \kappa_l\rangle_L}
        = \frac{k + \tfrac12\|q - \kappa_j\|_L^2}{\sum_l \bigl(k + \tfrac12\|q - \kappa_l\|_L^2\bigr)}.

    Without a softmax the bilinear form keeps the :math:`Q(K^\top V)` associativity of linear
    attention, but every :math:`\langle q, \kappa\rangle_L \le -k` is negative, the signs cancel in
    the row normalisation, and the weights *grow* with distance.  ``n`` keys, ``d`` coordinates for
    the matrix form :math:`q^\top J \kappa`.
    """
    k = _curvature(k)
    rq, rho, dots, tau, qt, kt, sq, inner, names = _keys(n, k)
    l_, dl, nl = _family("l", r"\ell", [v / tau for v in inner], r"\ell_j = \langle q, \kappa_j \rangle_L / \tau \text{ (Lorentzian logits)}")
    a_, da, na = _family("a", "a", [-x / 2 / tau for x in sq], r"a_j = -\frac{1}{2}\|q - \kappa_j\|_L^2 / \tau \text{ (distance logits)}")
    m_, dm, nm = _family("m", "m", inner, "", fmt=r"\langle q, \kappa_{{{j}}} \rangle_L")
    w_, dw, nw = _family("w", "w", [v / sum(inner) for v in inner],
                         r"w_j = \langle q, \kappa_j \rangle_L / \sum_l \langle q, \kappa_l \rangle_L \text{ (no softmax)}")
    W_, dW, nW = _family("W", "W", [(k + x / 2) / sum(k + y / 2 for y in sq) for x in sq],
                         r"W_j = \big(k + \frac{1}{2}\|q - \kappa_j\|_L^2\big) / \sum_l \big(k + \frac{1}{2}\|q - \kappa_l\|_L^2\big)")
    J = sp.diag(-1, *([1] * d))
    qv = sp.Matrix(sp.symbols(f"q0:{d + 1}", real=True))
    kv = sp.Matrix(sp.symbols(f"kappa0:{d + 1}", real=True))
    lorentz_inner = -qv[0] * kv[0] + sum(qv[i] * kv[i] for i in range(1, d + 1))
    sm_l, dsl, nsl = _softmax_symbol("sm_l", r"\mathrm{softmax}(\ell)", l_, r"\mathrm{softmax}(v)_j = e^{v_j} / \sum_l e^{v_l}")
    sm_a, dsa, nsa = _softmax_symbol("sm_a", r"\mathrm{softmax}(a)", a_)
    li, qjk = sp.symbols("lorentz_inner qJkappa")
    dist1 = sp.Symbol("geodesic_d1", nonnegative=True)
    Dn = sp.symbols(f"Dn1:{n + 1}", nonnegative=True)  # any values D_j >= 0
    T = sum(k + x / 2 for x in Dn)
    extra = [
        Definition(li, lorentz_inner, tex=rf"\langle q, \kappa\rangle_L = -q_0 \kappa_0 + \sum_{{i=1}}^{{{d}}} q_i \kappa_i"),
        Definition(qjk, (qv.T * J * kv)[0, 0], tex=r"J = \mathrm{diag}(-1, 1, \dots, 1)"),
    ]
    steps = [
        Step(_vec(l_), _vec([x - k / tau for x in a_]), "identity 1 for every key", name="logits"),
        Step(sm_l, sm_a,
             "**identity 5**: the $-k/\\tau$ is common to all keys, so Lorentzian-inner-product attention *is* distance attention",
             name="identity_5"),
        Step(li, qjk, f"bilinear, written with a matrix ($d = {d}$): so $(Q J K^\\top) V = Q J (K^\\top V)$, but only with **no** "
             "softmax between the two products", name="bilinear"),
        Step(_vec(w_), _vec(W_),
             f"without the softmax, the row-normalised weights ($n = {n}$ keys, identity 1 for each)", name="normalised_weights"),
        Step(m_[0], -k, "every $\\langle q, \\kappa_j\\rangle_L \\le -k < 0$ (identity 2: $-\\langle q, \\kappa_j\\rangle_L = k\\cosh(d_j/\\sqrt{k})$, "
             "$d_j$ the geodesic distance), so no weight changes sign", kind="bound",
             certificate=2 * k * sp.sinh(dist1 / (2 * sp.sqrt(k))) ** 2,
             given={dots[0]: qt * kt[0] - k * sp.cosh(dist1 / sp.sqrt(k))}, name="inner_at_most_minus_k"),
        Step((k + Dn[0] / 2) / T - (k + Dn[1] / 2) / T, (Dn[0] - Dn[1]) / (2 * T),
             "so the weights **grow with distance**: with $D_j = \\|q - \\kappa_j\\|_L^2 \\ge 0$, the farther key gets the larger weight",
             expand=False, name="weights_grow_with_distance", role="consequence"),
    ]
    names = {**names, **nl, **na, **nm, **nw, **nW, **nsl, **nsa, li: r"\langle q, \kappa\rangle_L", qjk: r"q^\top J \kappa",
             dist1: "d_1", **{x: rf"D_{{{j}}}" for j, x in enumerate(Dn, start=1)}}
    return Derivation(
        f"Identity 5: the full Lorentzian inner product has no bias ({n} keys); without a softmax it prefers far keys", steps,
        dl + da + dm + dw + dW + [dsl, dsa] + extra, names,
        intro="Use $\\langle q, \\kappa_j\\rangle_L$ itself (time coordinates included) as the attention logit, with a softmax "
        "(steps 1-2) and without one, normalised by the row sum as linear attention does (steps 3-6).",
    )


def _pq(n: int, nonneg_b: bool = False):
    """Distance logits ``a``, bias ``b``, and ``P = softmax(a)``, ``S = softmax(a + b)`` as families of symbols."""
    a = sp.symbols(f"a1:{n + 1}", real=True)
    b = sp.symbols(f"b1:{n + 1}", nonnegative=True) if nonneg_b else sp.symbols(f"b1:{n + 1}", real=True)
    P, dP, nP = _family("P", "P", list(softmax(a)), r"P_j = e^{a_j} / \sum_l e^{a_l}")
    S, dS, nS = _family("S", "S", list(softmax([x + y for x, y in zip(a, b)])), r"S_j = e^{a_j + b_j} / \sum_l e^{a_l + b_l}")
    return a, b, P, S, dP + dS, {**nP, **nS}


def kl_identity(n: int = 3) -> Derivation:
    r"""The KL divergence of spatial attention :math:`S` from distance attention :math:`P` (``n`` explicit and general).

    With :math:`P = \mathrm{softmax}(a)` and :math:`S = \mathrm{softmax}(a + b)`,

    .. math::

        S_j = \frac{P_j e^{b_j}}{\mathbb{E}_P[e^b]}, \qquad
        \mathrm{KL}(P \,\|\, S) = \log \mathbb{E}_P[e^b] - \mathbb{E}_P[b],

    unchanged when a constant is added to every :math:`b_j`.
    """
    a, b, P, S, defs, names = _pq(n)
    c = sp.Symbol("c", real=True)
    M = sp.Symbol("M", positive=True)
    Eb = sp.Symbol("Eb", real=True)
    KL = sp.Symbol("KL", real=True)
    Mc, Ebc = sp.Symbol("Mc", positive=True), sp.Symbol("Ebc", real=True)
    defs = defs + [
        Definition(M, sum(P[i] * sp.exp(b[i]) for i in range(n)), tex=r"E_P[e^b] = \sum_j P_j e^{b_j}"),
        Definition(Eb, sum(P[i] * b[i] for i in range(n)), tex=r"E_P[b] = \sum_j P_j b_j"),
        Definition(KL, sum(P[i] * sp.log(P[i] / S[i]) for i in range(n)), tex=r"\mathrm{KL}(P\|S) = \sum_j P_j \log(P_j / S_j)"),
        Definition(Mc, sum(P[i] * sp.exp(b[i] + c) for i in range(n)), tex=""),
        Definition(Ebc, sum(P[i] * (b[i] + c) for i in range(n)), tex=""),
    ]
    # general n: one term of the sum, with M = E_P[e^b] a positive symbol and sum_j P_j = 1
    Pj = sp.Symbol("P_j", positive=True)
    bj = sp.Symbol("b_j", real=True)
    Pi = sp.IndexedBase("P")
    bi = sp.IndexedBase("b")
    j, m = sp.symbols("j n", integer=True, positive=True)
    steps = [
        Step(_vec(S), _vec([P[i] * sp.exp(b[i]) / M for i in range(n)]), f"$S$ reweights $P$ by $e^{{b_j}}$ and renormalises ($n = {n}$)",
             name="reweighting"),
        Step(KL, sp.log(M) - Eb, f"**KL identity** ($n = {n}$)", name="kl_identity"),
        Step(sp.log(Pj / (Pj * sp.exp(bj) / M)), sp.log(M) - bj, "general $n$, one term: $\\log(P_j / S_j) = \\log E_P[e^b] - b_j$",
             expand=False, name="general_term"),
        Step(sp.Sum(Pi[j] * (sp.log(M) - bi[j]), (j, 1, m)), sp.log(M) * sp.Sum(Pi[j], (j, 1, m)) - sp.Sum(Pi[j] * bi[j], (j, 1, m)),
             "general $n$: weight by $P_j$ and sum; with $\\sum_j P_j = 1$ this is the identity", expand=False, name="general_sum"),
        Step(sp.log(M) - Eb, sp.log(Mc) - Ebc, "adding a constant $c$ to every $b_j$ changes nothing", name="shift_invariance"),
    ]
    names = {**names, M: r"E_P[e^b]", Eb: r"E_P[b]", KL: r"\mathrm{KL}(P\|S)", Mc: r"E_P[e^{b + c}]", Ebc: r"E_P[b + c]",
             Pj: "P_j", bj: "b_j"}
    return Derivation(
        f"KL divergence between distance attention $P$ and spatial attention $S$ (n = {n} and general n)", steps, defs, names,
        intro="$P = \\mathrm{softmax}(a)$ (distance logits $a$), $S = \\mathrm{softmax}(a + b)$ (spatial logits = distance logits + bias $b$).",
    )


def hoeffding_bound(n: int = 3) -> Derivation:
    r"""Hoeffding's lemma, proved step by step: the KL divergence is at most :math:`\Delta^2/8`.

    .. math::

        \mathrm{KL}(P \,\|\, S) \le \frac{\Delta^2}{8}, \qquad \Delta = \max_j b_j - \min_j b_j
    """
    D = sp.Symbol("Delta", positive=True)
    x = sp.Symbol("x", nonnegative=True)
    u = sp.Symbol("u", nonnegative=True)
    th = sp.Symbol("theta", positive=True)
    rho = sp.Symbol("rho", real=True)
    M = sp.Symbol("M", positive=True)
    chord = 1 - x / D + x / D * sp.exp(D)
    Lexpr = sp.log(1 - th + th * sp.exp(u)) - th * u
    L = sp.Function("L")(u)
    R = sp.Function("rho")(u)
    rho_u = th * sp.exp(u) / (1 - th + th * sp.exp(u))
    a, bb, P, S, defs, names = _pq(n, nonneg_b=True)
    Eb = sp.Symbol("Eb", nonnegative=True)
    defs = defs + [
        Definition(Eb, sum(P[i] * bb[i] for i in range(n)), tex=r"E_P[b] = \sum_j P_j b_j = \theta \Delta"),
        Definition(L, Lexpr),
        Definition(R, rho_u),
    ]

    def concave_chord() -> tuple[bool, str]:
        g = chord - sp.exp(x)
        ends = sp.simplify(g.subs(x, 0)) == 0 and sp.simplify(g.subs(x, D)) == 0
        concave = sp.simplify(sp.diff(g, x, 2) + sp.exp(x)) == 0
        return ends and concave, "g = chord - e^x: g(0) = g(Delta) = 0 and g'' = -e^x < 0, so g >= 0 between"

    def log_increasing() -> tuple[bool, str]:
        y = sp.Symbol("y", positive=True)
        return bool(sp.diff(sp.log(y), y).is_positive), "d/dy log y = 1/y > 0"

    def taylor_remainder() -> tuple[bool, str]:
        worst = 0.0
        with mpmath.workdps(30):
            for tv, dv in ((sp.Rational(1, 10), sp.Rational(1, 2)), (sp.Rational(1, 2), sp.Integer(2)), (sp.Rational(9, 10), sp.Integer(7))):
                Lf = sp.lambdify(u, Lexpr.subs(th, tv), "mpmath")
                g = sp.lambdify(u, sp.diff(Lexpr, u, 2).subs(th, tv), "mpmath")
                dm = mpmath.mpf(int(dv.p)) / int(dv.q)
                integral = mpmath.quad(lambda s: (dm - s) * g(s), [0, dm])
                worst = max(worst, float(abs(integral - Lf(dm))))
        return worst < 1e-20, f"quadrature at 3 (theta, Delta) pairs, 30 digits: max difference {worst:.1e}"

    steps = [
        Step(chord, sp.exp(x), "convexity: $e^x$ lies below its chord on $[0, \\Delta]$ (shift $b$ so that $\\min_j b_j = 0$, $\\max_j b_j = \\Delta$)",
             kind="check", check=concave_chord, relation=r"\ge", name="chord"),
        Step(sum(P[i] * chord.subs(x, bb[i]) for i in range(n)), 1 - Eb / D + Eb / D * sp.exp(D),
             f"average the chord over $P$ ($n = {n}$): $E_P[e^b] \\le 1 - \\theta + \\theta e^\\Delta$", name="averaged_chord"),
        Step(sp.log(M) - th * D, L.subs(u, D), "$\\log$ is increasing: $\\mathrm{KL}(P\\|S) = \\log E_P[e^b] - \\theta\\Delta \\le L(\\Delta)$",
             kind="check", check=log_increasing, relation=r"\le", name="kl_below_L", role="consequence"),
        Step(sp.Subs(L, u, 0), 0, "$L(0) = 0$", name="L_at_0"),
        Step(sp.Subs(sp.Derivative(L, u), u, 0), 0, "$L'(0) = 0$", name="L_prime_at_0"),
        Step(sp.Derivative(L, (u, 2)), R * (1 - R), "the second derivative", name="L_second"),
        Step(rho * (1 - rho), sp.Rational(1, 4), "a product $\\rho (1 - \\rho)$ is at most $1/4$", kind="bound",
             certificate=(rho - sp.Rational(1, 2)) ** 2, name="product_quarter"),
        Step(L.subs(u, D), sp.Integral((D - u) * sp.Derivative(L, (u, 2)), (u, 0, D)),
             "Taylor's theorem with integral remainder, using $L(0) = L'(0) = 0$", kind="check", check=taylor_remainder,
             name="taylor_remainder"),
        Step(sp.Integral((D - u) / 4, (u, 0, D)), D**2 / 8, "bound $L''$ by $1/4$ and integrate: **Hoeffding's lemma**, $\\mathrm{KL}(P\\|S) \\le \\Delta^2/8$",
             name="hoeffding"),
    ]
    names = {**names, D: r"\Delta", th: r"\theta", rho: r"\rho", M: r"E_P[e^b]", Eb: r"E_P[b]"}
    return Derivation(
        "Hoeffding's lemma: $\\mathrm{KL}(P\\|S) \\le \\Delta^2/8$", steps, defs, names,
        intro="$\\mathrm{KL}(P\\|S) = \\log E_P[e^b] - E_P[b]$ is unchanged by shifting $b$, so let $b_j \\in [0, \\Delta]$, "
        "$\\Delta = \\max_j b_j - \\min_j b_j$, and write $E_P[b] = \\theta\\Delta$, $0 \\le \\theta \\le 1$.",
    )


def kl_supremum(n: int = 3) -> Derivation:
    r"""The exact supremum of :math:`\mathrm{KL}(P \,\|\, S)` over all rows whose bias spans :math:`\Delta`.

    .. math::

        \sup \mathrm{KL}(P \,\|\, S) = K(\Delta)
          = \log\frac{e^\Delta - 1}{\Delta} - 1 + \frac{\Delta}{e^\Delta - 1}
          = \frac{\Delta^2}{8} - \frac{\Delta^4}{576} + \frac{\Delta^6}{25920} - \dots
          \le \frac{\Delta^2}{8}

    Hoeffding's steps 1-3 give :math:`\mathrm{KL} \le F(\theta) = \log(1 - \theta + \theta e^\Delta) - \theta\Delta`
    with :math:`\theta = (\mathbb{E}_P[b] - \min b)/\Delta`; a two-point row attains :math:`F(\theta)`,
    so the supremum is :math:`F(\theta^*)`, :math:`\theta^* = 1/\Delta - 1/(e^\Delta - 1)`.  For large
    :math:`\Delta`, :math:`K(\Delta) \sim \Delta - 1 - \log\Delta`.  (``n`` is unused: the argument
    has no key count.)
    """
    D = sp.Symbol("Delta", positive=True)
    th = sp.Symbol("theta", positive=True)
    nn = sp.Symbol("n", integer=True, positive=True)
    E = sp.exp(D)
    Fexpr = sp.log(1 - th + th * E) - th * D
    F = sp.Function("F")(th)
    ts = sp.Symbol("theta^*", positive=True)
    ts_expr = 1 / D - 1 / (E - 1)
    closed = sp.log((E - 1) / D) - 1 + D / (E - 1)
    K = sp.Function("K")(D)
    R = sp.Function("R")(D)
    Z = 1 - th + th * E
    kl2 = sp.Symbol("KL2", real=True)
    kl2_expr = (1 - th) * sp.log((1 - th) / ((1 - th) / Z)) + th * sp.log(th / (th * E / Z))
    defs = [
        Definition(F, Fexpr, tex=r"F(\theta) = \log(1 - \theta + \theta e^\Delta) - \theta\Delta"),
        Definition(ts, ts_expr, tex=r"\theta^* = \frac{1}{\Delta} - \frac{1}{e^\Delta - 1}"),
        Definition(K, closed, tex=r"K(\Delta) = \log\frac{e^\Delta - 1}{\Delta} - 1 + \frac{\Delta}{e^\Delta - 1}"),
        Definition(R, closed - (D - 1 - sp.log(D)), tex=r"R(\Delta) = K(\Delta) - (\Delta - 1 - \log\Delta)"),
        Definition(kl2, kl2_expr, tex=r"\mathrm{KL}^{(2)}(\theta) = \mathrm{KL}\big((1 - \theta, \theta) \,\|\, S\big), "
                   r"S \propto (1 - \theta, \theta e^\Delta) \text{ (a two-point row, bias } (0, \Delta))"),
    ]

    def positive_theta() -> tuple[bool, str]:
        same = _is_zero(ts_expr - (E - 1 - D) / (D * (E - 1)))[0]
        series = _is_zero(sp.Sum(D**nn / sp.factorial(nn), (nn, 2, sp.oo)).doit() - (E - 1 - D))[0]
        return same and series, "theta* = (e^D - 1 - D) / (D (e^D - 1)), e^D - 1 - D = sum_{n>=2} D^n/n! > 0 (and e^D - 1 > 0)"

    def below_half() -> tuple[bool, str]:
        num = D * E - 2 * E + D + 2
        same = _is_zero(sp.Rational(1, 2) - ts_expr - num / (2 * D * (E - 1)))[0]
        series = _is_zero(sp.Sum((nn - 2) * D**nn / sp.factorial(nn), (nn, 3, sp.oo)).doit() - num)[0]
        return same and series, "1/2 - theta* = N / (2 D (e^D - 1)), N = D e^D - 2 e^D + D + 2 = sum_{n>=3} (n - 2) D^n/n! > 0"

    def below_hoeffding() -> tuple[bool, str]:
        below = []
        with mpmath.workdps(40):
            for dv in ("0.001", "0.1", "1", "2.5", "8", "20", "100"):
                x = mpmath.mpf(dv)
                below.append(kl_supremum_mpmath(x, dps=40) < x * x / 8)
        return all(below), "integrate the previous step from 0, where Delta^2/8 - K vanishes (step series); spot check: below Delta^2/8 at 7 values of Delta (40 digits)"

    c1 = sp.Rational(1, 2) - ts_expr  # = coth(D/2)/2 - 1/D, visibly real
    steps = [
        Step(kl2, F, "a two-point row with $P = (1 - \\theta, \\theta)$ and bias $(0, \\Delta)$ reaches Hoeffding's "
             "$F(\\theta)$ (Hoeffding, steps 1-3: every row with $E_P[b] = \\min b + \\theta\\Delta$ has $\\mathrm{KL} \\le F(\\theta)$), "
             "so the supremum over rows is $\\max_{\\theta \\in [0, 1]} F(\\theta)$", name="two_point_row"),
        Step(sp.Derivative(F, th), (E - 1) / Z - D, "the derivative in $\\theta$", name="derivative"),
        Step(sp.Derivative(F, (th, 2)), 0, "$F$ is concave: a stationary point in $[0, 1]$ is the maximum", kind="bound",
             certificate=(E - 1) ** 2 / Z**2, name="concave"),
        Step(sp.Subs(sp.Derivative(F, th), th, ts), 0, "the derivative condition $F'(\\theta) = 0$ holds at $\\theta^*$", name="stationary"),
        Step(0, ts, "$\\theta^* > 0$", kind="check", check=positive_theta, relation="<", name="theta_star_positive"),
        Step(ts, sp.Rational(1, 2), "$\\theta^* \\le 1/2$: the worst row puts less than half of its mass on the high-bias key",
             kind="check", check=below_half, relation=r"\le", name="theta_star_below_half"),
        Step(F.subs(th, ts), K, "**the exact supremum** $K(\\Delta) = \\max_\\theta F(\\theta)$, attained by the two-point row at $\\theta^*$",
             name="closed_form"),
        Step(K, D**2 / 8 - D**4 / 576 + D**6 / 25920 - D**8 / 1075200, "series at small $\\Delta$: Hoeffding's $\\Delta^2/8$ is its leading term",
             kind="series", var=D, order=10, name="series"),
        Step(sp.Derivative(K, D), D * ts * (1 - ts), "its slope (envelope theorem: $\\partial F / \\partial \\Delta$ at $\\theta^*$)",
             name="slope"),
        Step(0, sp.Derivative(D**2 / 8 - K, D), "$\\Delta^2/8 - K(\\Delta)$ never decreases: its slope is $\\Delta(\\theta^* - \\frac{1}{2})^2$",
             kind="bound", certificate=D * (1 / D - sp.coth(D / 2) / 2) ** 2, name="gap_increasing"),
        Step(K, D**2 / 8, "so, as $\\Delta^2/8 - K(\\Delta) \\to 0$ for $\\Delta \\to 0$ (series), $K(\\Delta) \\le \\Delta^2/8$ for every $\\Delta$: "
             "Hoeffding's bound is the simple, looser one",
             kind="check", check=below_hoeffding, relation=r"\le", name="below_hoeffding", role="consequence"),
        Step(R, 0, "for large $\\Delta$: $K(\\Delta) \\sim \\Delta - 1 - \\log\\Delta$, linear, not quadratic",
             kind="limit", var=D, point=sp.oo, name="large_delta"),
    ]
    names = {D: r"\Delta", th: r"\theta", ts: r"\theta^*", kl2: r"\mathrm{KL}^{(2)}(\theta)", nn: "n"}
    return Derivation(
        "The exact KL supremum: $\\sup \\mathrm{KL}(P\\|S) = \\log\\frac{e^\\Delta - 1}{\\Delta} - 1 + \\frac{\\Delta}{e^\\Delta - 1} \\le \\frac{\\Delta^2}{8}$",
        steps, defs, names,
        intro="Rows $P$, $S = $ softmax of the same logits plus a bias $b$ of spread $\\Delta = \\max_j b_j - \\min_j b_j$. "
        "$F(\\theta)$ is Hoeffding's $L(\\Delta)$ written as a function of $\\theta$.",
    )


def tv_bound(n: int = 3) -> Derivation:
    r"""The total variation is at most :math:`\tanh(\Delta/4)`, and a two-point row attains it.

    .. math::

        \mathrm{TV}(P, S) \le \tanh\frac{\Delta}{4} \le \frac{\Delta}{4},

    with equality for :math:`P = (p^*, 1 - p^*)`, :math:`p^* = 1/(1 + e^{\Delta/2})`, bias
    :math:`b = (\Delta, 0)`.
    """
    D = sp.Symbol("Delta", positive=True)
    p = sp.Symbol("p", nonnegative=True)
    sig = sp.Symbol("sigma", nonnegative=True)
    X, Yp = sp.symbols("X Y'", positive=True)
    Y, Xp = sp.symbols("Y X'", positive=True)
    al, be = sp.symbols("alpha beta", nonnegative=True)
    uA = sp.Symbol("u", nonnegative=True)
    v = sp.Symbol("v", real=True)
    a, b, P, S, defs, names = _pq(n)
    E = sp.exp(D)
    f = sp.Function("f")(p)
    fexpr = p * E / (p * E + 1 - p) - p
    pstar = sp.Symbol("p^*", positive=True)
    pstar_expr = 1 / (1 + sp.exp(D / 2))
    cert = sig * (1 - p * (2 + sig)) ** 2 / ((2 + sig) * (1 + p * sig * (2 + sig)))
    P2, S2 = sp.symbols("P2_1 S2_1", positive=True)
    defs = defs + [
        Definition(f, fexpr),
        Definition(pstar, pstar_expr),
        Definition(P2, softmax([sp.log(pstar), sp.log(1 - pstar)])[0], tex=r"P^{(2)} = (p^*, 1 - p^*)"),
        Definition(S2, softmax([sp.log(pstar) + D, sp.log(1 - pstar)])[0], tex=r"S^{(2)} = \mathrm{softmax}(\log p^* + \Delta, \log(1 - p^*))"),
    ]

    def tanh_vs_linear() -> tuple[bool, str]:
        y = sp.Symbol("y", nonnegative=True)
        h = y - sp.tanh(y)
        ok = h.subs(y, 0) == 0 and sp.simplify(sp.diff(h, y) - sp.tanh(y) ** 2) == 0
        return ok, "y - tanh y vanishes at 0 and has derivative tanh^2 y >= 0"

    steps = [
        Step(sum(S[i] - P[i] for i in range(n)), 0, f"both are probability vectors ($n = {n}$)", name="normalised"),
        Step((uA - v) / 2, uA, "so $\\mathrm{TV} = \\frac{1}{2}\\sum_j |S_j - P_j| = S(A) - P(A)$, $A = \\{j : S_j > P_j\\}$: "
             "the sums of $S_j - P_j$ over $A$ ($u$) and over the rest ($v = -u$) cancel", given={v: -uA},
             name="tv_as_set", role="consequence"),
        Step(S[0] + S[1], (P[0] * sp.exp(b[0]) + P[1] * sp.exp(b[1])) / sum(P[i] * sp.exp(b[i]) for i in range(n)),
             "$S(A) = X/(X + Y)$ with $X = \\sum_A P_j e^{b_j}$, $Y = \\sum_{A^c} P_j e^{b_j}$ (shown for $A = \\{1, 2\\}$)",
             name="mass_of_set"),
        Step(X / (X + Y), Xp / (Xp + Yp), "with $b \\in [0, \\Delta]$: $X \\le X' = P(A) e^\\Delta$ and $Y \\ge Y' = 1 - P(A)$; "
             "$X/(X + Y)$ grows with $X$ and falls with $Y$", kind="bound",
             certificate=(X * be + al * Yp + al * be) / ((X + al + Yp) * (X + Yp + be)), given={Xp: X + al, Y: Yp + be},
             name="extreme_bias"),
        Step(f, p * (1 - p) * (E - 1) / (p * E + 1 - p), "so $\\mathrm{TV} \\le f(p)$, $p = P(A)$", name="f_factored"),
        Step(sp.Subs(sp.Derivative(f, p), p, pstar), 0, "$f$ is stationary at $p^*$", name="stationary"),
        Step(f.subs(p, pstar), sp.tanh(D / 4), "its value there", name="value_at_stationary"),
        Step(f, sp.tanh(D / 4), "and that is the maximum over all $p \\in [0, 1]$ (with $e^{\\Delta/2} = 1 + \\sigma$): "
             "**$\\mathrm{TV}(P, S) \\le \\tanh(\\Delta/4)$**", kind="bound", certificate=cert, given={D: 2 * sp.log(1 + sig)},
             name="tv_bound"),
        Step(S2 - P2, sp.tanh(D / 4), "the two-point row $P^{(2)}$ with bias $b = (\\Delta, 0)$ attains the bound exactly", name="attained"),
        Step(sp.tanh(D / 4), D / 4, "sharper than Pinsker + Hoeffding, $\\sqrt{\\mathrm{KL}/2} \\le \\sqrt{\\Delta^2/16} = \\Delta/4$",
             kind="check", check=tanh_vs_linear, relation=r"\le", name="below_linear"),
    ]
    names = {**names, D: r"\Delta", sig: r"\sigma", al: r"\alpha", be: r"\beta", pstar: "p^*", P2: r"P^{(2)}_1", S2: r"S^{(2)}_1"}
    return Derivation(
        "Total variation: $\\mathrm{TV}(P, S) \\le \\tanh(\\Delta/4)$", steps, defs, names,
        intro="$S_j = P_j e^{b_j} / E_P[e^b]$ (KL derivation, step 1) with the bias shifted to $b_j \\in [0, \\Delta]$.",
    )


# =========================================================================== #
# all of them
# =========================================================================== #
def derivations(k: Any = None, d: int = 3, n: int = 3) -> dict[str, Derivation]:
    """Every derivation of the project, by name (general ``k`` plus the thread's ``k = 1``).

    ``d`` is the dimension of the explicit-coordinate re-checks, ``n`` the number of keys of the
    softmax derivations.
    """
    return {
        "lifted_norm": lifted_norm(k, d),
        "squared_distance": squared_distance(k, d),
        "geodesic_distance": geodesic_distance(k, d),
        "decomposition": decomposition(k, d),
        "time_taylor": time_taylor(k),
        "thread_approximation": thread_approximation(k, d),
        "thread_approximation_k1": thread_approximation(1, d),
        "approximation_error": approximation_error(k, d),
        "query_constant": query_constant(k, d),
        "euclidean_limit": euclidean_limit(d),
        "softmax_shift": softmax_shift(n),
        "bias_in_softmax": bias_in_softmax(n, k),
        "lorentz_attention": lorentz_attention(n, k, d),
        "kl_identity": kl_identity(n),
        "hoeffding_bound": hoeffding_bound(n),
        "kl_supremum": kl_supremum(n),
        "tv_bound": tv_bound(n),
    }


def verify_all(k: Any = None, d: int = 3, n: int = 3, raise_on_failure: bool = True) -> Reports:
    """Verify every derivation of :func:`derivations`; return their :class:`Reports`.

    Raises
    ------
    DerivationError
        When a step fails and ``raise_on_failure`` is true, naming every failing derivation.
    """
    reports = Reports(der.verify() for der in derivations(k, d, n).values())
    if raise_on_failure and not reports.ok:
        bad = [r for r in reports if not r.ok]
        raise DerivationError("\n".join(r.summary() for r in bad))
    return reports


# =========================================================================== #
# numerical companions (float64 torch, mpmath)
# =========================================================================== #
class BoundCheck(NamedTuple):
    r"""Per-row comparison of distance attention :math:`P` and spatial attention :math:`S` (float64, ``(..., N_q)``).

    Fields: ``kl`` :math:`\mathrm{KL}(P \,\|\, S)`, ``tv`` :math:`\mathrm{TV}(P, S)`, ``delta``
    :math:`\Delta`, ``kl_bound`` Hoeffding's :math:`\Delta^2/8` (the exact supremum is
    :func:`hypviz.attention.kl_supremum`), ``tv_bound`` :math:`\tanh(\Delta/4)`, and ``tv_uniform``
    the baseline :math:`\mathrm{TV}(P, U)` to the uniform row.
    """

    kl: torch.Tensor
    tv: torch.Tensor
    delta: torch.Tensor
    kl_bound: torch.Tensor
    tv_bound: torch.Tensor
    tv_uniform: torch.Tensor


def _as_points64(x: Any, k: float, name: str) -> torch.Tensor:
    t = lorentz.check_points(x, k, name=name)
    if t.dim() < 2:
        raise ValueError(f"{name}: expected (..., N, d + 1) rows of points, got shape {tuple(t.shape)}")
    return lorentz.lift(t[..., 1:].to(torch.float64), k)


def _expm1_minus_x(c: torch.Tensor) -> torch.Tensor:
    """``e^c - 1 - c`` without cancellation (float64 relative error below ~1e-14)."""
    series = c * c * (0.5 + c * (1 / 6 + c * (1 / 24 + c * (1 / 120 + c * (1 / 720 + c * (1 / 5040 + c * (1 / 40320
             + c * (1 / 362880 + c / 3628800))))))))
    return torch.where(c.abs() < 0.05, series, torch.expm1(c) - c)


def _reweighting_gap(p: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``KL(P || S)`` and ``TV(P, S)`` for ``S_j = P_j e^{c_j} / E_P[e^c]``, ``c`` centred (``E_P[c] = 0``).

    ``E_P[e^c] = 1 + m`` with ``m = E_P[e^c - 1 - c]``, so ``KL = log E_P[e^c] - E_P[c] = log1p(m)`` and
    ``S_j - P_j = P_j (expm1(c_j) - m) / (1 + m)``: no difference of two nearly equal numbers, so a
    tiny divergence keeps its relative accuracy.
    """
    m = (p * _expm1_minus_x(c)).sum(dim=-1)
    kl = torch.log1p(m)
    tv = 0.5 * (p * (torch.expm1(c) - m.unsqueeze(-1)).abs()).sum(dim=-1) / (1 + m)
    return kl, tv.clamp(max=1.0)


def softmax_gap_bounds(queries: Any, keys: Any, tau: float, k: float = 1.0) -> BoundCheck:
    r"""Measure how far spatial-dot attention is from distance attention, row by row, with the bounds.

    .. math::

        P_j = \mathrm{softmax}_j\Bigl(-\frac{\|q - \kappa_j\|_L^2}{2\tau}\Bigr), \qquad
        S_j = \mathrm{softmax}_j\Bigl(\frac{q_s \cdot \kappa_{s,j}}{\tau}\Bigr),

        \mathrm{KL} = \sum_j P_j \log\frac{P_j}{S_j}, \qquad
        \mathrm{TV} = \tfrac12 \sum_j |P_j - S_j|, \qquad
        \Delta = \frac{q_t\,(\max_j \kappa_{t,j} - \min_j \kappa_{t,j})}{\tau},

    with the bounds :math:`\Delta^2/8` (Hoeffding; the exact supremum is
    :func:`hypviz.attention.kl_supremum`) and :math:`\tanh(\Delta/4)`, and the baseline
    :math:`\mathrm{TV}(P, U) = \tfrac12\sum_j |P_j - 1/N_k|`.

    Computed in float64 (time coordinates recomputed from the spatial parts), whatever the input
    dtype.  Where a row's centred bias :math:`c_j = b_j - \mathbb{E}_P[b]`
    (:math:`b_j = q_t\kappa_{t,j}/\tau`) stays within :math:`[-1, 1]`, :math:`S` is obtained from
    :math:`P` through identity 4, :math:`S_j = P_j e^{c_j} / \mathbb{E}_P[e^c]` (exact; notebook 04
    checks it against the softmax of the spatial logits), and KL and TV are evaluated with
    ``expm1``/``log1p``: near the origin they are tiny, and the difference of two softmax rows
    would keep only a few of their digits.  Other rows use the softmax of the spatial logits
    directly.  ``tv_uniform`` likewise (``expm1`` of the centred logits near uniform).

    Parameters
    ----------
    queries : array or tensor, shape (..., N_q, d + 1)
        Points on the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    keys : array or tensor, shape (..., N_k, d + 1)
        Points of the same hyperboloid, batch shape broadcasting with the queries'.
    tau : float
        The softmax temperature (e.g. :math:`\sqrt{d}`), :math:`> 0`.
    k : float
        The curvature parameter.

    Returns
    -------
    BoundCheck
        float64 tensors of shape ``(..., N_q)``.

    Raises
    ------
    ValueError
        For a non-positive temperature, points off the hyperboloid, or queries and keys of
        different ``d``.
    """
    kf = lorentz.check_k(k)
    tau_f = float(tau)
    if not math.isfinite(tau_f) or tau_f <= 0:
        raise ValueError(f"tau must be a positive temperature, got {tau!r}")
    q = _as_points64(queries, kf, "queries")
    kk = _as_points64(keys, kf, "keys")
    if q.shape[-1] != kk.shape[-1]:
        raise ValueError(f"queries are {tuple(q.shape)} but keys are {tuple(kk.shape)}: the last dimensions (d + 1) differ")
    dist_logits = -0.5 * lorentz.pairwise_sqdist(q, kk, kf) / tau_f
    spatial_logits = (q[..., 1:] @ kk[..., 1:].transpose(-1, -2)) / tau_f
    log_p = torch.log_softmax(dist_logits, dim=-1)
    log_s = torch.log_softmax(spatial_logits, dim=-1)
    p = log_p.exp()
    kt = kk[..., 0]
    # small gaps (every |centred bias| <= 1): through identity 4 with expm1 / log1p; large ones: directly
    bias = q[..., :, :1] * kt[..., None, :] / tau_f
    centred = bias - (p * bias).sum(dim=-1, keepdim=True)
    small = centred.abs().amax(dim=-1) <= 1.0
    kl_acc, tv_acc = _reweighting_gap(p, centred.clamp(-1.0, 1.0))
    kl_dir = (p * (log_p - log_s)).sum(dim=-1)
    tv_dir = (0.5 * (p - log_s.exp()).abs().sum(dim=-1)).clamp(max=1.0)  # rounding could push a disjoint pair above 1
    kl, tv = torch.where(small, kl_acc, kl_dir), torch.where(small, tv_acc, tv_dir)
    # baseline TV(P, uniform): P_j - 1/N = (expm1(a_j) - mean expm1(a)) / (N (1 + mean expm1(a))), a centred
    n_keys = dist_logits.shape[-1]
    a = dist_logits - dist_logits.mean(dim=-1, keepdim=True)
    near_uniform = a.abs().amax(dim=-1) <= 1.0
    e1 = torch.expm1(a.clamp(-1.0, 1.0))
    mean_e1 = e1.mean(dim=-1)
    tvu_acc = 0.5 * (e1 - mean_e1.unsqueeze(-1)).abs().sum(dim=-1) / (n_keys * (1 + mean_e1))
    tvu_dir = 0.5 * (p - 1.0 / n_keys).abs().sum(dim=-1)
    tv_uniform = torch.where(near_uniform, tvu_acc, tvu_dir).clamp(max=1.0)
    spread = (kt.amax(dim=-1) - kt.amin(dim=-1)).unsqueeze(-1)
    delta = q[..., 0] * spread / tau_f
    return BoundCheck(kl, tv, delta, delta**2 / 8, torch.tanh(delta / 4), tv_uniform)


def worst_case_row(
    query_norm: float = 2.0, key_norm: float = 2.0, d: int = 2, tau: float = 1.0, k: float = 1.0, p1: float | None = None
):
    r"""Real points attaining :math:`\mathrm{TV}(P, S) = \tanh(\Delta/4)` (or the KL supremum): one query, two keys.

    Key 2 sits at the origin and key 1 at norm ``key_norm``, so

    .. math::

        \Delta = \frac{q_t\,(\kappa_{t,1} - \sqrt{k})}{\tau}, \qquad
        P_1 = p_1 = \frac{1}{1 + e^{\Delta/2}} \text{ by default};

    the angle between the query and key 1 is chosen so that distance attention gives key 1 the
    weight :math:`P_1 = p_1`.  The default is the maximiser of the TV bound;
    :math:`p_1 = 1/\Delta - 1/(e^\Delta - 1)` (:math:`\theta^*` of :func:`kl_supremum`) makes the KL
    equal its exact supremum, and :math:`p_1 = 1/2` with a small :math:`\Delta` makes
    :math:`\mathrm{KL}/(\Delta^2/8)` approach 1.

    Returns
    -------
    (queries, keys) : tuple of torch.Tensor
        Shapes ``(1, d + 1)`` and ``(2, d + 1)``, float64.

    Raises
    ------
    ValueError
        When :math:`d < 2`, :math:`p_1 \notin (0, 1)`, or no angle works (the needed
        :math:`q_s \cdot \kappa_s` exceeds :math:`\|q_s\|\|\kappa_s\|`).
    """
    kf = lorentz.check_k(k)
    if d < 2:
        raise ValueError(f"worst_case_row needs d >= 2 (the key is rotated in a plane), got d = {d}")
    qt = math.sqrt(query_norm**2 + kf)
    kt = math.sqrt(key_norm**2 + kf)
    delta = qt * (kt - math.sqrt(kf)) / tau
    if p1 is None:
        logit = -delta / 2  # log(p* / (1 - p*)) at the maximiser
    else:
        if not 0.0 < float(p1) < 1.0:
            raise ValueError(f"p1 must lie strictly between 0 and 1, got {p1!r}")
        logit = math.log(p1 / (1.0 - p1))
    # s_1 - s_2 = (a_1 - a_2) + (b_1 - b_2) with s_2 = 0 (key 2 at the origin), a_1 - a_2 = logit, b_1 - b_2 = Delta
    need = tau * (logit + delta)
    if query_norm * key_norm <= 0 or abs(need) > query_norm * key_norm:
        raise ValueError(
            f"no worst-case angle for |q_s| = {query_norm}, |kappa_s| = {key_norm}, k = {kf}: "
            f"need q_s . kappa_s = {need:.4g} > |q_s||kappa_s|; use larger norms"
        )
    cos = need / (query_norm * key_norm)
    sin = math.sqrt(max(0.0, 1.0 - cos * cos))
    qs = torch.zeros(1, d, dtype=torch.float64)
    qs[0, 0] = query_norm
    ks = torch.zeros(2, d, dtype=torch.float64)
    ks[0, 0], ks[0, 1] = key_norm * cos, key_norm * sin
    return lorentz.lift(qs, kf), lorentz.lift(ks, kf)


def kl_supremum_mpmath(delta: Any, dps: int = 50) -> Any:
    r"""The exact KL supremum at ``dps`` digits (an mpmath number); 0 at :math:`\Delta = 0`.

    .. math::

        K(\Delta) = \log\frac{e^\Delta - 1}{\Delta} - 1 + \frac{\Delta}{e^\Delta - 1}

    The reference for :func:`hypviz.attention.kl_supremum` (float64).  Extra working digits make
    up for the cancellation at small :math:`\Delta` (the value is about :math:`\Delta^2/8`).

    Raises
    ------
    ValueError
        When :math:`\Delta < 0`.
    """
    with mpmath.workdps(dps):
        x = mpmath.mpf(delta)
    if x < 0:
        raise ValueError(f"the bias spread Delta must be >= 0, got {delta!r}")
    if x == 0:
        return mpmath.mpf(0)
    extra = 10 + max(0, int(-mpmath.log10(x)))
    with mpmath.workdps(dps + 2 * extra):
        x = mpmath.mpf(delta)
        e1 = mpmath.expm1(x)
        value = mpmath.log(e1 / x) - 1 + x / e1
    with mpmath.workdps(dps):
        return +value


def sqdist_textbook(x: Any, y: Any, k: float = 1.0) -> torch.Tensor:
    r"""The textbook squared distance (identity 1), in the inputs' dtype; cancels badly for nearby points.

    .. math::

        \|x - y\|_L^2 = -2k - 2\langle x, y\rangle_L

    For comparison only (the points are not checked); use :func:`hypviz.lorentz.sqdist`
    (identity 3) in real code.
    """
    kf = lorentz.check_k(k)
    return -2.0 * kf - 2.0 * lorentz.inner(x, y)


def sqdist_mpmath(xs: np.ndarray, ys: np.ndarray, k: float = 1.0, dps: int = 50) -> list:
    r"""Reference :math:`\|x - y\|_L^2` at ``dps`` digits from the exact float values of the spatial parts.

    ``xs``, ``ys`` are ``(N, d)`` arrays of spatial parts; the time coordinates are recomputed at
    high precision and identity 3 is used, so that nothing cancels:

    .. math::

        \|x - y\|_L^2 = \|x_s - y_s\|^2 - \Bigl(\frac{\|x_s\|^2 - \|y_s\|^2}{x_t + y_t}\Bigr)^2

    Returns a list of ``N`` mpf numbers.

    Raises
    ------
    ValueError
        When ``xs`` and ``ys`` are not two ``(N, d)`` arrays of one shape.
    """
    xs = np.asarray(xs)
    ys = np.asarray(ys)
    if xs.shape != ys.shape or xs.ndim != 2:
        raise ValueError(f"expected two (N, d) arrays of spatial parts of one shape, got {xs.shape} and {ys.shape}")
    out = []
    with mpmath.workdps(dps):
        kk = mpmath.mpf(float(k))
        for a, b in zip(xs.tolist(), ys.tolist()):
            a = [mpmath.mpf(v) for v in a]
            b = [mpmath.mpf(v) for v in b]
            na = mpmath.fsum(v * v for v in a)
            nb = mpmath.fsum(v * v for v in b)
            ta, tb = mpmath.sqrt(na + kk), mpmath.sqrt(nb + kk)
            es = mpmath.fsum((u - w) ** 2 for u, w in zip(a, b))
            dt = (na - nb) / (ta + tb)
            out.append(+(es - dt * dt))
    return out


@dataclass
class SqdistAccuracy:
    r"""Relative errors of the textbook and stable squared distances against mpmath.

    ``errors[(method, dtype)]`` is ``(n_separations, n_pairs)`` (NaN where the two float inputs
    coincide); ``actual[dtype]`` the exact separations :math:`\|x_s - y_s\|` of the float inputs.
    """

    separations: np.ndarray
    norm: float
    d: int
    k: float
    errors: dict
    actual: dict

    def medians(self) -> dict:
        """Median relative error over the pairs of each separation, per ``(method, dtype)``."""
        return {key: np.nanmedian(v, axis=1) for key, v in self.errors.items()}

    def worst(self) -> dict:
        """Largest relative error over the pairs of each separation, per ``(method, dtype)``."""
        return {key: np.nanmax(v, axis=1) for key, v in self.errors.items()}


def sqdist_accuracy(
    separations: Iterable[float] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7),
    norm: float = 5.0,
    d: int = 4,
    n_pairs: int = 16,
    k: float = 1.0,
    dtypes: Sequence[str] = ("float32", "float64"),
    seed: int = 0,
    dps: int = 50,
) -> SqdistAccuracy:
    r"""Relative errors of the textbook :math:`-2k - 2\langle x, y\rangle_L` and of identity 3, in the points' dtype.

    The stable form is the arithmetic of :func:`hypviz.lorentz.sqdist` carried out in the dtype of
    the points (``sqdist`` itself evaluates float32 and half-precision points in float64).  Pairs:
    :math:`x_s` of norm ``norm`` in a random direction, :math:`y_s = x_s + s\,u` with :math:`u` a
    random unit vector and :math:`s` each separation; both rounded to the dtype, lifted in that dtype,
    then compared with :func:`sqdist_mpmath` on the very same float inputs:

    .. math::

        \mathrm{err} = \frac{|\hat D - D|}{D}, \qquad D = \|x - y\|_L^2 \text{ at } \mathtt{dps} \text{ digits}.
    """
    kf = lorentz.check_k(k)
    seps = np.asarray(list(separations), dtype=np.float64)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(seps), n_pairs, d))
    x *= norm / np.linalg.norm(x, axis=-1, keepdims=True)
    u = rng.standard_normal((len(seps), n_pairs, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    y = x + seps[:, None, None] * u
    errors: dict = {}
    actual: dict = {}
    for name in dtypes:
        npd = np.dtype(name)
        xd = x.astype(npd).reshape(-1, d)
        yd = y.astype(npd).reshape(-1, d)
        xp, yp = lorentz.lift(torch.from_numpy(xd), kf), lorentz.lift(torch.from_numpy(yd), kf)
        computed = {
            "textbook": sqdist_textbook(xp, yp, kf).numpy(),
            # identity 3 in the points' own precision (hypviz.lorentz.sqdist itself evaluates float32 in float64)
            "stable": lorentz._sqdist_checked(xp, yp, kf).numpy(),
        }
        ref = sqdist_mpmath(xd, yd, kf, dps)
        with mpmath.workdps(dps):
            sep = np.array([float(mpmath.sqrt(mpmath.fsum((mpmath.mpf(a) - mpmath.mpf(b)) ** 2 for a, b in zip(r1, r2))))
                            for r1, r2 in zip(xd.tolist(), yd.tolist())])
            for method, values in computed.items():
                err = np.array([float(abs(mpmath.mpf(float(c)) - r) / r) if r > 0 else np.nan for c, r in zip(values.tolist(), ref)])
                errors[(method, name)] = err.reshape(len(seps), n_pairs)
        actual[name] = sep.reshape(len(seps), n_pairs)
    return SqdistAccuracy(seps, float(norm), int(d), kf, errors, actual)
