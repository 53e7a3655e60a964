r"""Derivations as code: every step an equation, its justification and its check (sympy only).

A :class:`Derivation` is a titled list of :class:`Step` objects.  Each step states
``lhs <relation> rhs``, has a ``name`` (tests and notebooks look steps up by it) and says how it
is verified (``kind``, one of :data:`STEP_KINDS`):

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

:meth:`Derivation.verify` checks every step, whatever its role, and returns a
:class:`~hypviz.symbolic.step_report.Report` (defined in :mod:`hypviz.symbolic.step_report`, re-exported
here) naming the first step that failed, by number and name; only ``"proof"`` steps count as
genuine checks in its summary.  A derivation may carry ``coords``, a substitution of its norm and
dot-product symbols by explicit coordinates :math:`x_1, \dots, x_d`: its exact, series and limit
steps are then re-checked in that form too.

This module knows nothing of hyperbolic geometry: the project's derivations are in
:mod:`hypviz.symbolic`.  It imports sympy only (numpy on demand, in :meth:`Derivation.evaluate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, cast

import sympy as sp
from sympy.core.function import AppliedUndef

from hypviz.symbolic.step_report import ROLES, DerivationError, Report, Reports, StepResult

__all__ = ["Step", "Definition", "Derivation", "StepResult", "Report", "Reports", "DerivationError", "ROLES", "STEP_KINDS"]

#: How a :class:`Step` is verified (see the module docstring).
STEP_KINDS = ("simplify", "series", "limit", "bound", "nonzero", "check")


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
    shrink
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

    Examples
    --------
    >>> import sympy as sp
    >>> from hypviz.symbolic import Derivation, Step
    >>> a = sp.Symbol("a", positive=True)
    >>> step = Step(sp.log(a**2), 2 * sp.log(a), "the logarithm of a power, a > 0", name="log_power")
    >>> Derivation("A logarithm", [step]).verify().ok
    True
    """

    lhs: Any
    rhs: Any
    why: str
    kind: str = "simplify"
    var: Any = None
    point: Any = 0
    order: int | None = None
    shrink: Any = None
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
        if self.kind not in STEP_KINDS:
            raise ValueError(f"Step kind must be one of {STEP_KINDS}, got {self.kind!r}")
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

    Examples
    --------
    >>> import sympy as sp
    >>> from hypviz.symbolic import Definition, Derivation, Step
    >>> x, s = sp.symbols("x s", positive=True)
    >>> root = Step(sp.sqrt(s), x, "x > 0", name="root")
    >>> Derivation("A root", [root], [Definition(s, x**2)]).verify().ok     # s := x**2 substituted first
    True
    >>> Derivation("A root", [root]).verify().ok                            # without it, sqrt(s) != x
    False
    """

    symbol: Any
    expr: Any
    components: Callable[[int], Any] | None = None
    tex: str | None = None



def is_zero(expr: Any) -> tuple[bool, str]:
    """Decide ``expr == 0`` by exact transformations; return (ok, which one succeeded)."""
    if isinstance(expr, sp.MatrixBase):
        hows = []
        for entry in expr:
            ok, how = is_zero(entry)
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
            if all(is_zero(head.coeff(var, j))[0] for j in range(int(m))):
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

    Examples
    --------
    >>> import sympy as sp
    >>> from hypviz.symbolic import Derivation, Step
    >>> x = sp.Symbol("x")
    >>> der = Derivation("Two steps", [Step(sp.sin(x)**2 + sp.cos(x)**2, 1, "Pythagoras", name="pythagoras"),
    ...                                Step(sp.exp(x), 1 + x, "first order", kind="series", var=x, order=2, name="exp")])
    >>> der.step_names, der.number("exp")
    (['pythagoras', 'exp'], 2)
    >>> der.verify()
    Two steps: all 2 steps verified: 2 genuine checks
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
        if step.shrink is not None:
            scaling = self._scaling(step.shrink, d)
            lhs, rhs = lhs.xreplace(scaling), rhs.xreplace(scaling)
        kind = step.kind
        if kind == "simplify":
            ok, how = is_zero(lhs - rhs)
            return ok, f"lhs - rhs = 0 by {how}" if ok else how
        if kind == "series":
            head = _series_head(lhs - rhs, step.var, step.point, cast(int, step.order))  # a series step has its order
            ok, how = is_zero(head)
            if ok:
                return True, f"lhs - rhs = O({step.var}^{step.order}): its series below that order is 0"
            return False, f"the series of lhs - rhs has terms below order {step.order}: {sp.sstr(sp.simplify(head))[:120]}"
        if kind == "limit":
            value = _limit(lhs, step.var, step.point)
            ok, how = is_zero(value - rhs)
            return ok, (f"limit = rhs by {how}" if ok else f"limit is {sp.sstr(value)[:120]}, not rhs")
        if kind == "bound":
            cert = self._expand(sp.sympify(step.certificate), subs)
            ok, how = is_zero(rhs - lhs - cert)
            if not ok:
                return False, "rhs - lhs differs from the certificate"
            if not _nonneg(cert):
                return False, "the certificate is not visibly non-negative"
            return True, f"rhs - lhs = certificate ({how}), non-negative by its form"
        if kind == "nonzero":
            # a nonzero step has its witness
            witness = {sp.sympify(a): sp.sympify(b) for a, b in cast(Mapping, step.witness).items()}
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
        out = cast(Callable[[], Any], step.check)()  # a check step has its check
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
        import numpy as np  # only here: the framework itself needs no numpy

        step = self.step(index) if isinstance(index, str) else self.steps[index - 1]
        subs = self._substitutions(step, d)
        vals = {sp.sympify(a): sp.sympify(b) for a, b in values.items()}
        out: list[Any] = []
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
                w = ", ".join(f"${self.latex(a)} = {self.latex(b)}$" for a, b in cast(Mapping, step.witness).items())
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
