r"""The project's two-point derivations: identities 1-4 and 6, and the thread's Taylor argument.

Notebook 02 shows :func:`lifted_norm`, :func:`squared_distance` (identity 1),
:func:`geodesic_distance` (identity 2) and :func:`decomposition` (identity 3); notebook 04 shows
:func:`time_taylor`, :func:`thread_approximation` (the thread's argument with its :math:`O(r^4)`
terms), :func:`approximation_error` (its exact error), :func:`query_constant` (identity 4) and
:func:`euclidean_limit` (identity 6).  Each function returns a
:class:`~hypviz.symbolic.steps.Derivation`; :mod:`hypviz.symbolic` re-exports them all.

Dimension is handled honestly: the derivations are written with symbols for the norms
:math:`\|x_s\|`, :math:`\|y_s\|` and the dot product :math:`x_s \cdot y_s` (everything depends on
the spatial parts only through those, so the argument holds in every dimension :math:`d`), and
the exact, series and limit steps are re-checked with explicit coordinates
:math:`x_1, \dots, x_d` for a small :math:`d` (3 by default).  The curvature :math:`k` is a
positive symbol (``k=None``); pass ``k=1`` to get the formulas of the question-and-answer thread
exactly.  A query is :math:`q`, a key :math:`\kappa`.
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from hypviz.symbolic.steps import Definition, Derivation, Step, is_zero

__all__ = [
    "lifted_norm",
    "squared_distance",
    "geodesic_distance",
    "decomposition",
    "time_taylor",
    "thread_approximation",
    "approximation_error",
    "query_constant",
    "euclidean_limit",
]


# =========================================================================== #
# symbols
# =========================================================================== #
def curvature(k: Any) -> sp.Expr:
    if k is None:
        return sp.Symbol("k", positive=True)
    kk = sp.sympify(k)
    if kk.is_positive is not True:
        raise ValueError(f"k must be a positive symbol or number (<x,x>_L = -k), got {k!r}")
    return kk


def dot_symbol(name: str) -> sp.Symbol:
    """A dot-product symbol: its name contains ``_dot``, so it scales like ``eps**2`` under :attr:`Step.shrink`."""
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
        self.c = dot_symbol(f"{a}{b}_dot")
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
def lifted_norm(*, k: Any = None, d: int = 3) -> Derivation:
    r"""A lifted point lies on the hyperboloid.

    .. math::

        x_t = \sqrt{\|x_s\|^2 + k} \;\Longrightarrow\;
        \langle x, x\rangle_L = -x_t^2 + \|x_s\|^2 = -k,
        \qquad x_s = 0 \;\Longrightarrow\; x_t = \sqrt{k}

    ``k=None`` is a positive symbol; ``d`` the dimension of the explicit-coordinate re-check (so for
    every derivation below).

    Examples
    --------
    >>> from hypviz.symbolic import lifted_norm
    >>> der = lifted_norm(k=1, d=2)
    >>> der.step("on_hyperboloid").role
    'proof'
    >>> report = der.verify()
    >>> report.ok, "re-checked with d = 2 explicit coordinates" in report.summary()
    (True, True)
    """
    k = curvature(k)
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


def squared_distance(*, k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 1 (notebook 02): the squared Lorentzian distance.

    .. math::

        \|x - y\|_L^2 = \langle x - y, x - y\rangle_L = -2k - 2\langle x, y\rangle_L

    Examples
    --------
    >>> from hypviz.symbolic import squared_distance
    >>> der = squared_distance(d=2)
    >>> der.step("identity_1").rhs
    -2*k - 2*xy_inner
    >>> report = der.verify()
    >>> report.ok, "re-checked with d = 2 explicit coordinates" in report.summary()
    (True, True)
    """
    k = curvature(k)
    P = _Pair("x", "y", k)
    steps = [
        Step(P.sq, P.aa - 2 * P.inner + P.bb,
             "bilinearity and symmetry of $\\langle \\cdot, \\cdot \\rangle_L$ (expand the product of $x - y$ with itself)",
             name="bilinearity"),
        Step(P.aa, -k, "$x$ lies on the hyperboloid (the lift), and so does $y$: $\\langle y, y\\rangle_L = -k$",
             name="on_hyperboloid"),
        Step(P.sq, -2 * k - 2 * P.inner, "**identity 1**", name="identity_1"),
        Step(P.inner, -P.sq / 2 - k,
             "rearranged (for $k = 1$ the thread's $\\langle i, j\\rangle_L = -\\frac{1}{2}\\|i - j\\|_L^2 - 1$)",
             name="inner_from_distance"),
        Step(P.sq, 0, "the squared distance of a point to itself is 0", given={P.rb: P.ra, P.c: P.ra**2}, name="self_distance"),
    ]
    return _pair_derivation(
        P, "Identity 1: the squared Lorentzian distance", steps,
        "The squared Lorentzian distance is the Lorentzian inner product of the difference with itself.", d=d,
    )


def geodesic_distance(*, k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 2 (notebook 02): geodesic distance and squared Lorentzian distance.

    .. math::

        d = \sqrt{k}\,\operatorname{arcosh}\Bigl(-\frac{\langle x, y\rangle_L}{k}\Bigr), \qquad
        \|x - y\|_L^2 = 4k\sinh^2\frac{d}{2\sqrt{k}}, \qquad
        d = 2\sqrt{k}\,\operatorname{arsinh}\frac{\|x - y\|_L}{2\sqrt{k}}

    Examples
    --------
    >>> from hypviz.symbolic import geodesic_distance
    >>> der = geodesic_distance(d=2)
    >>> der.step("identity_2").rhs
    4*k*sinh(geodesic_d/(2*sqrt(k)))**2
    >>> report = der.verify(d=None)        # symbols only, no explicit coordinates
    >>> report.ok, "explicit coordinates" in report.summary()
    (True, False)
    """
    k = curvature(k)
    P = _Pair("x", "y", k)
    dist = sp.Symbol("geodesic_d", nonnegative=True)
    s = sp.Symbol("S_sq", nonnegative=True)  # a free stand-in for |x - y|^2_L in steps 5-6
    rk = sp.sqrt(k)
    half = dist / (2 * rk)

    def arsinh_inverse() -> tuple[bool, str]:
        w = sp.Symbol("w", real=True)
        claim = 2 * rk * sp.asinh(sp.sqrt(4 * k * sp.sinh(half) ** 2) / (2 * rk))
        same = is_zero(sp.sinh(claim / (2 * rk)) - sp.sinh(half))[0]
        increasing = sp.diff(sp.sinh(w), w).is_positive
        return bool(same and increasing), "sinh(rhs / (2 sqrt k)) = sinh(d / (2 sqrt k)) and sinh' = cosh > 0"

    steps = [
        Step((k + P.ra * P.rb) ** 2, P.at**2 * P.bt**2,
             "$-\\langle x, y\\rangle_L \\ge k$, so the arcosh is defined: square both sides of "
             "$k + \\|x_s\\|\\|y_s\\| \\le x_t y_t$ (then Cauchy–Schwarz, $x_s \\cdot y_s \\le \\|x_s\\|\\|y_s\\|$)",
             kind="bound", certificate=k * (P.ra - P.rb) ** 2, name="arcosh_defined"),
        Step(-P.inner, k * sp.cosh(dist / rk),
             "invert the definition of $d$ ($\\cosh$ undoes $\\operatorname{arcosh}$ on $[1, \\infty)$)",
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
             "solved for $d$ ($\\sinh$ is increasing, $\\operatorname{arsinh}$ its inverse): the accurate way to compute the "
             "distance of nearby points",
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


def decomposition(*, k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 3 (notebook 02) and its consequences (the stable formula; equal norms).

    .. math::

        \|x - y\|_L^2 = \|x_s - y_s\|^2 - (x_t - y_t)^2
                      = \|x_s - y_s\|^2 - \Bigl(\frac{(x_s - y_s)\cdot(x_s + y_s)}{x_t + y_t}\Bigr)^2
                      \le \|x_s - y_s\|^2,

    with equality when :math:`\|x_s\| = \|y_s\|`.

    Examples
    --------
    >>> from hypviz.symbolic import decomposition
    >>> der = decomposition(d=1)
    >>> der.step("identity_3").rhs
    -xy_diff_dot_sum**2/(x_t + y_t)**2 + xy_spatial_sqdist
    >>> report = der.verify()
    >>> report.ok, "re-checked with d = 1 explicit coordinates" in report.summary()
    (True, True)
    """
    k = curvature(k)
    P = _Pair("x", "y", k)
    stable = P.es - (P.dd / (P.at + P.bt)) ** 2
    steps = [
        Step(P.sq, P.es - (P.at - P.bt) ** 2,
             "write out $\\langle x - y, x - y\\rangle_L$: time part with a minus sign, spatial part with a plus",
             name="written_out", role="definition"),
        Step(P.es - (P.at - P.bt) ** 2, -2 * k - 2 * P.inner, "agrees with identity 1", name="agrees_with_identity_1"),
        Step(P.at - P.bt, (P.at**2 - P.bt**2) / (P.at + P.bt), "difference of squares", expand=False,
             name="difference_of_squares"),
        Step(P.at - P.bt, (P.ra**2 - P.rb**2) / (P.at + P.bt), "$x_t^2 - y_t^2 = \\|x_s\\|^2 - \\|y_s\\|^2$: the $k$ cancels",
             name="time_difference"),
        Step(P.ra**2 - P.rb**2, P.dd, "bilinearity of the dot product", name="norm_difference"),
        Step(P.sq, stable, "**identity 3**, the stable formula: no subtraction of two large, nearly equal numbers",
             name="identity_3"),
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
def time_taylor(*, k: Any = None, order: int = 6) -> Derivation:
    r"""Taylor series of the time coordinate :math:`\sqrt{r^2 + k}` in :math:`r = \|x_s\|`, up to ``r**order``.

    .. math::

        \sqrt{r^2 + k} = \sum_{n \ge 0} \binom{1/2}{n} k^{1/2 - n} r^{2n}
                       = \sqrt{k} + \frac{r^2}{2\sqrt{k}} - \frac{r^4}{8k^{3/2}} + O(r^6)
                       \le \sqrt{k} + \frac{r^2}{2\sqrt{k}}

    Examples
    --------
    >>> from hypviz.symbolic import time_taylor
    >>> der = time_taylor(k=1)
    >>> der.step("series_order_4").rhs          # sqrt(r**2 + 1) up to O(r**6)
    -r**4/8 + r**2/2 + 1
    >>> der.verify().ok
    True
    """
    k = curvature(k)
    r = sp.Symbol("r", nonnegative=True)
    t = sp.sqrt(r**2 + k)
    rk = sp.sqrt(k)
    cn, nn = sp.Symbol("c_n"), sp.Symbol("n", integer=True, nonnegative=True)
    series_terms = sum(sp.binomial(sp.Rational(1, 2), n) * k ** (sp.Rational(1, 2) - n) * r ** (2 * n)
                       for n in range(order // 2 + 1))

    def coefficients() -> tuple[bool, str]:
        s = sp.series(t, r, 0, 2 * (order // 2) + 2).removeO()
        for n in range(order // 2 + 1):
            want = sp.binomial(sp.Rational(1, 2), n) * k ** (sp.Rational(1, 2) - n)
            if sp.simplify(s.coeff(r, 2 * n) - want) != 0:
                return False, f"coefficient of r^{2 * n} is not binomial(1/2, {n}) k^(1/2 - {n})"
        return True, f"coefficients of r^0 .. r^{2 * (order // 2)} are binomial(1/2, n) k^(1/2 - n)"

    steps = [
        Step(t, rk + r**2 / (2 * rk) - r**4 / (8 * k ** sp.Rational(3, 2)),
             "Taylor series in $r$ (the binomial series; coefficients in step 3)",
             kind="series", var=r, order=6, name="series_order_4"),
        Step(t, series_terms, f"to order {order}", kind="series", var=r, order=2 * (order // 2) + 2, name="series_full"),
        Step(cn, sp.binomial(sp.Rational(1, 2), nn) * k ** (sp.Rational(1, 2) - nn),
             f"the coefficient $c_n$ of $r^{{2n}}$ ($n = 0, \\dots, {order // 2}$): binomial series "
             "$(1 + u)^{1/2} = \\sum_n \\binom{1/2}{n} u^n$ with $u = r^2 / k$", kind="check", check=coefficients,
             name="coefficients"),
        Step(r**2 + k, (rk + r**2 / (2 * rk)) ** 2,
             "the first-order truncation over-estimates the time coordinate (compare squares)",
             kind="bound", certificate=r**4 / (4 * k), name="truncation_over_estimates"),
    ]
    return Derivation(
        "The time coordinate near the origin", steps, names={r: r"r", cn: "c_n", nn: "n"},
        intro="$r = \\|x_s\\|$ is the size of the spatial part; the time coordinate is $\\sqrt{r^2 + k}$.",
    )


def _query_key(k: sp.Expr) -> _Pair:
    """Query ``q`` and key ``kappa`` (internal name ``v``: sorts after ``q``, so terms read ``q_t kappa_t``)."""
    return _Pair("q", "v", k, "q", r"\kappa")


def thread_approximation(*, k: Any = None, d: int = 3) -> Derivation:
    r"""The thread's argument, step by step, with its :math:`O(r^4)` terms explicit (``k=1``: the thread's formulas).

    .. math::

        \|q - \kappa\|_L^2 = \|q_s - \kappa_s\|^2 + O(r^4), \qquad
        q_s \cdot \kappa_s = -\tfrac12\|q - \kappa\|_L^2 + \tfrac12\bigl(\|q_s\|^2 + \|\kappa_s\|^2\bigr) + O(r^4),

    :math:`r` the size of both spatial parts.  The thread writes the query and the key as
    :math:`i` and :math:`j`; here they are :math:`q` and :math:`\kappa`.

    Examples
    --------
    >>> from hypviz.symbolic import thread_approximation
    >>> der = thread_approximation(k=1, d=1)
    >>> der.step("thread_result").rhs           # q_s . kappa_s up to O(r**4)
    q_norm**2/2 - qv_sqdist/2 + v_norm**2/2
    >>> der.verify().ok
    True
    """
    k = curvature(k)
    P = _query_key(k)
    rk = sp.sqrt(k)
    o4 = "O(r^{4})"
    steps = [
        Step(P.inner, -P.at * P.bt + P.c, "Lorentzian inner product", name="inner_product", role="definition"),
        Step(P.sq, -2 * k - 2 * P.inner, "squared Lorentzian distance (identity 1)", name="identity_1"),
        Step(P.inner, -P.sq / 2 - k, "rearranged", name="inner_from_distance"),
        Step(P.inner, -sp.sqrt(P.ra**2 + k) * sp.sqrt(P.rb**2 + k) + P.c,
             f"substitute the lift $q_t = \\sqrt{{\\|q_s\\|^2 + {sp.latex(k)}}}$, "
             f"$\\kappa_t = \\sqrt{{\\|\\kappa_s\\|^2 + {sp.latex(k)}}}$",
             name="lift_substituted", role="definition"),
        Step(sp.sqrt(P.ra**2 + k), rk + P.ra**2 / (2 * rk), "Taylor: nearby points, $\\|q_s\\|, \\|\\kappa_s\\| \\ll 1$",
             kind="series", var=_EPS, order=4, shrink=_EPS, order_label=o4, name="taylor_lift"),
        Step(P.inner, -(k + (P.ra**2 + P.rb**2) / 2) + P.c, "product of the two expansions (the cross term is fourth order)",
             kind="series", var=_EPS, order=4, shrink=_EPS, order_label=o4, name="taylor_inner"),
        Step(P.sq, P.es,
             "substitute into $-2k - 2\\langle q, \\kappa\\rangle_L$: to second order the Lorentzian distance is "
             "the Euclidean one",
             kind="series", var=_EPS, order=4, shrink=_EPS, order_label=o4, name="taylor_distance"),
        Step(P.c, (P.ra**2 + P.rb**2 - P.es) / 2, "polarisation identity (exact)", name="polarisation"),
        Step(P.c, -P.sq / 2 + (P.ra**2 + P.rb**2) / 2,
             "the thread's result: the 'constant' is $(\\|q_s\\|^2 + \\|\\kappa_s\\|^2)/2$, which depends on the key $\\kappa$",
             kind="series", var=_EPS, order=4, shrink=_EPS, order_label=o4, name="thread_result"),
        Step(P.at * P.bt - k, (P.ra**2 + P.rb**2) / 2, "the exact 'constant' of identity 4 agrees with it to this order",
             kind="series", var=_EPS, order=4, shrink=_EPS, order_label=o4, name="constant_agrees"),
    ]
    return _pair_derivation(
        P, "The thread's approximation, step by step" + (" ($k = 1$)" if k == 1 else ""), steps,
        "Query $q$ and key $\\kappa$ (the thread's $i$ and $j$) are points of the hyperboloid; $r$ stands for the size "
        "of their spatial parts ($O(r^4)$: shrinking both spatial parts by $\\varepsilon$ shrinks the error like "
        "$\\varepsilon^4$).", d=d,
    )


def approximation_error(*, k: Any = None, d: int = 3) -> Derivation:
    r"""The exact error of the approximation :math:`\|q - \kappa\|_L^2 \approx \|q_s - \kappa_s\|^2`.

    .. math::

        \|q_s - \kappa_s\|^2 - \|q - \kappa\|_L^2 = (q_t - \kappa_t)^2
          = \frac{(\|q_s\|^2 - \|\kappa_s\|^2)^2}{(q_t + \kappa_t)^2}
          \le \frac{(\|q_s\|^2 - \|\kappa_s\|^2)^2}{4k},

    the bound being the leading, exactly fourth-order term near the origin; the error is 0 for
    equal norms.

    Examples
    --------
    >>> from hypviz.symbolic import approximation_error
    >>> der = approximation_error(d=1)
    >>> der.step("exact_error").lhs, der.step("exact_error").rhs
    (qv_spatial_sqdist - qv_sqdist, (q_t - v_t)**2)
    >>> der.verify().ok
    True
    """
    k = curvature(k)
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
             var=eps, order=6, shrink=eps, order_label="O(r^{6})", name="fourth_order"),
        Step(scaled, lead, "and exactly fourth order (the limit is not 0 unless the norms are equal)", kind="limit", var=eps,
             point=0, name="exactly_fourth_order"),
        Step(err, lead, "for all points, not only small ones: $(q_t + \\kappa_t)^2 \\ge 4k$", kind="bound",
             certificate=(P.ra**2 - P.rb**2) ** 2 * gap * (P.at + P.bt + 2 * rk) / (4 * k * (P.at + P.bt) ** 2),
             name="global_bound"),
        Step(err, 0, "equal norms $\\|\\kappa_s\\| = \\|q_s\\|$: the approximation is exact", given={P.rb: P.ra},
             name="equal_norms_exact", role="consequence"),
    ]
    names = {eps: r"\varepsilon"}
    return _pair_derivation(
        P, "The exact error of the approximation", steps,
        "The thread's $\\|q - \\kappa\\|_L^2 \\approx \\|q_s - \\kappa_s\\|^2$ has an error that identity 3 gives in "
        "closed form.",
        names=names, d=d,
    )


def query_constant(*, k: Any = None, d: int = 3) -> Derivation:
    r"""Identity 4: what the thread's "constant" is (the key is :math:`\kappa`).

    .. math::

        q_s \cdot \kappa_s = -\tfrac12\|q - \kappa\|_L^2 + (q_t \kappa_t - k), \qquad
        \frac{\partial (q_t \kappa_t)}{\partial \|\kappa_s\|} = \frac{q_t \|\kappa_s\|}{\kappa_t} \ne 0,

    so the "constant" :math:`q_t\kappa_t - k` (near the origin
    :math:`\tfrac12(\|q_s\|^2 + \|\kappa_s\|^2) + O(r^4)`) changes with the key.

    Examples
    --------
    >>> from hypviz.symbolic import query_constant
    >>> der = query_constant(d=1)
    >>> der.step("identity_4").rhs              # q_s . kappa_s
    -k + q_t*v_t - qv_sqdist/2
    >>> report = der.verify()
    >>> report.ok, "re-checked with d = 1 explicit coordinates" in report.summary()
    (True, True)
    """
    k = curvature(k)
    P = _query_key(k)
    eps = _EPS
    steps = [
        Step(P.c, P.inner + P.at * P.bt, "definition of $\\langle q, \\kappa\\rangle_L$", name="inner_product",
             role="definition"),
        Step(P.inner, -P.sq / 2 - k, "identity 1", name="identity_1"),
        Step(P.c, -P.sq / 2 + (P.at * P.bt - k), "**identity 4**: the spatial dot product is distance plus $q_t \\kappa_t - k$",
             name="identity_4"),
        Step(P.at * P.bt - k, (P.ra**2 + P.rb**2) / 2,
             "near the origin the 'constant' is the thread's $(\\|q_s\\|^2 + \\|\\kappa_s\\|^2)/2$",
             kind="series", var=eps, order=4, shrink=eps, order_label="O(r^{4})", name="near_origin"),
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

    Examples
    --------
    >>> from hypviz.symbolic import euclidean_limit
    >>> der = euclidean_limit(d=1)
    >>> {"distance_limit", "identity_6"} <= set(der.step_names)
    True
    >>> der.step("identity_6").rhs              # q_s . kappa_s, Euclidean polarisation
    q_norm**2/2 - qv_spatial_sqdist/2 + v_norm**2/2
    """
    k = sp.Symbol("k", positive=True)
    P = _query_key(k)
    rho2 = sp.Symbol("v2_norm", nonnegative=True)  # the norm of a second key kappa_2
    kt2 = sp.Symbol("v2_t", positive=True)
    steps = [
        Step(P.at * P.bt - k, (P.ra**2 + P.rb**2) / 2,
             "the 'constant' of identity 4 tends to the thread's $(\\|q_s\\|^2 + \\|\\kappa_s\\|^2)/2$",
             kind="limit", var=k, point=sp.oo, name="constant_limit"),
        Step(k * (P.at * P.bt - k - (P.ra**2 + P.rb**2) / 2), -((P.ra**2 - P.rb**2) ** 2) / 8,
             "it gets there like $1/k$: "
             "$q_t\\kappa_t - k = \\frac{1}{2}(\\|q_s\\|^2 + \\|\\kappa_s\\|^2) - (\\|q_s\\|^2 - "
             "\\|\\kappa_s\\|^2)^2/(8k) + O(k^{-2})$",
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
