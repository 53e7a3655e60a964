r"""The project's softmax derivations: what a per-key bias does to attention, and how much.

Notebook 04 shows them: :func:`softmax_shift` (a softmax ignores a common shift, not a per-key
one), :func:`bias_in_softmax` (identity 4 inside a softmax: spatial-dot attention is distance
attention plus the key-dependent bias :math:`q_t\kappa_{t,j}/\tau`), :func:`lorentz_attention`
(identity 5, and the Lorentzian inner product without a softmax), :func:`kl_identity`,
:func:`hoeffding_bound` (:math:`\mathrm{KL} \le \Delta^2/8`), :func:`kl_supremum` (the exact
supremum) and :func:`tv_bound` (:math:`\mathrm{TV} \le \tanh(\Delta/4)`, attained); notebook 05 shows
:func:`first_order_gap_ratio` (the gap over its baseline for Gaussian points, to first order).  Each returns a
:class:`~hypviz.symbolic.steps.Derivation`; :mod:`hypviz.symbolic` re-exports them all, with
:func:`softmax` (the symbolic softmax they use).  Their numerical companions (the bounds measured
on real rows) are in :mod:`hypviz.attention.comparison.accuracy`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import mpmath
import sympy as sp

from hypviz.symbolic.geometry import curvature, dot_symbol
from hypviz.symbolic.steps import Definition, Derivation, Step, is_zero

__all__ = [
    "softmax",
    "softmax_shift",
    "bias_in_softmax",
    "lorentz_attention",
    "kl_identity",
    "hoeffding_bound",
    "kl_supremum",
    "tv_bound",
    "first_order_gap_ratio",
]


# =========================================================================== #
# softmax: shift invariance, the per-key bias, identity 5
# =========================================================================== #
def softmax(z: Sequence[Any]) -> sp.Matrix:
    r"""Symbolic softmax of a list of logits, as a column matrix.

    .. math::

        \mathrm{softmax}(z)_j = \frac{e^{z_j}}{\sum_l e^{z_l}}

    Examples
    --------
    >>> import sympy as sp
    >>> from hypviz.symbolic import softmax
    >>> softmax([0, sp.log(2)])
    Matrix([
    [1/3],
    [2/3]])
    >>> a, b = sp.symbols("a b")
    >>> sp.simplify(softmax([a, b])[0] - 1 / (1 + sp.exp(b - a)))
    0
    """
    exps = [sp.exp(v) for v in z]
    total = sum(exps)
    return sp.Matrix([e / total for e in exps])


def _family(name: str, tex: str, exprs: Sequence[Any], shown: str | None,
            fmt: str | None = None) -> tuple[list[sp.Symbol], list[Definition], dict]:
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

    Examples
    --------
    >>> from hypviz.symbolic import softmax_shift
    >>> der = softmax_shift(n=2)
    >>> der.step("per_key_shift").kind          # a per-key bias changes the softmax
    'nonzero'
    >>> der.verify().ok
    True
    """
    if n < 2:
        raise ValueError(f"softmax_shift needs n >= 2 keys, got {n}")
    z = sp.symbols(f"z1:{n + 1}", real=True)
    beta = sp.symbols(f"beta1:{n + 1}", real=True)
    c = sp.Symbol("c", real=True)
    zi = sp.IndexedBase("z")
    j, ell, m = sp.symbols("j l n", integer=True, positive=True)
    sum_shift = sp.Sum(sp.exp(zi[ell] + c), (ell, 1, m))
    sum_plain = sp.Sum(sp.exp(zi[ell]), (ell, 1, m))
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
    dots = [dot_symbol(f"qkappa_dot{j}") for j in range(1, n + 1)]
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


def bias_in_softmax(n: int = 3, *, k: Any = None) -> Derivation:
    r"""Identity 4 inside a softmax: spatial-dot attention is distance attention with a per-key bias.

    .. math::

        \mathrm{softmax}_j\Bigl(\frac{q_s \cdot \kappa_{s,j}}{\tau}\Bigr)
        = \mathrm{softmax}_j\Bigl(\frac{-\tfrac12\|q - \kappa_j\|_L^2 + q_t \kappa_{t,j}}{\tau}\Bigr),
        \qquad
        b_1 - b_2 = \frac{q_t\,(\|\kappa_{s,1}\|^2 - \|\kappa_{s,2}\|^2)}{\tau\,(\kappa_{t,1} + \kappa_{t,2})}

    with the bias :math:`b_j = q_t\kappa_{t,j}/\tau`, which changes with the key's norm (so the two
    attentions differ), for ``n`` keys.

    Examples
    --------
    >>> from hypviz.symbolic import bias_in_softmax
    >>> der = bias_in_softmax(n=2, k=1)
    >>> der.step("bias_difference").rhs
    q_t*(kappa_norm1**2 - kappa_norm2**2)/(tau*(kt_1 + kt_2))
    >>> der.verify().ok
    True
    """
    k = curvature(k)
    rq, rho, dots, tau, qt, kt, sq, inner, names = _keys(n, k)
    s_, ds, ns = _family("s", "s", [c / tau for c in dots], r"s_j = q_s \cdot \kappa_{s,j} / \tau \text{ (spatial logits)}")
    a_, da, na = _family("a", "a", [-x / 2 / tau for x in sq],
                         r"a_j = -\frac{1}{2}\|q - \kappa_j\|_L^2 / \tau \text{ (distance logits)}")
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
        Step(_vec(s_), _vec([x + y - k / tau for x, y in zip(a_, b_)]),
             "identity 4 for every key, divided by the temperature $\\tau$",
             name="logits"),
        Step(sm_s, sm_ab, "the $-k/\\tau$ is common to all keys and cancels", name="softmax_with_bias"),
        Step(sm_s, sm_a, "but the bias changes with the key: the two attentions differ",
             kind="nonzero", witness=witness, name="attentions_differ"),
        Step(b_[0] - b_[1], qts * (rho[0] ** 2 - rho[1] ** 2) / (tau * (t_[0] + t_[1])),
             "bias differences come from norm differences only (identity 3)", name="bias_difference"),
    ]
    defs = [Definition(qts, qt)] + dt + ds + da + db + [dss, dsab, dsa]
    return Derivation(
        f"Identity 4 inside the softmax ({n} keys)", steps, defs,
        {**names, **ns, **na, **nb, **nt, **nss, **nsab, **nsa, qts: "q_t"},
        intro="Keys $\\kappa_1, \\dots, \\kappa_n$ of any dimension (only norms and dot products enter).",
    )


def lorentz_attention(n: int = 3, *, k: Any = None, d: int = 3) -> Derivation:
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

    Examples
    --------
    >>> from hypviz.symbolic import lorentz_attention
    >>> der = lorentz_attention(n=2, k=1, d=1)
    >>> der.step_names[:2]
    ['logits', 'identity_5']
    >>> der.verify().ok
    True
    """
    k = curvature(k)
    rq, rho, dots, tau, qt, kt, sq, inner, names = _keys(n, k)
    l_, dl, nl = _family("l", r"\ell", [v / tau for v in inner],
                         r"\ell_j = \langle q, \kappa_j \rangle_L / \tau \text{ (Lorentzian logits)}")
    a_, da, na = _family("a", "a", [-x / 2 / tau for x in sq],
                         r"a_j = -\frac{1}{2}\|q - \kappa_j\|_L^2 / \tau \text{ (distance logits)}")
    m_, dm, nm = _family("m", "m", inner, "", fmt=r"\langle q, \kappa_{{{j}}} \rangle_L")
    w_, dw, nw = _family("w", "w", [v / sum(inner) for v in inner],
                         r"w_j = \langle q, \kappa_j \rangle_L / \sum_l \langle q, \kappa_l \rangle_L \text{ (no softmax)}")
    W_, dW, nW = _family("W", "W", [(k + x / 2) / sum(k + y / 2 for y in sq) for x in sq],
                         r"W_j = \big(k + \frac{1}{2}\|q - \kappa_j\|_L^2\big) "
                         r"/ \sum_l \big(k + \frac{1}{2}\|q - \kappa_l\|_L^2\big)")
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
             "**identity 5**: the $-k/\\tau$ is common to all keys, so Lorentzian-inner-product attention *is* "
             "distance attention",
             name="identity_5"),
        Step(li, qjk,
             f"bilinear, written with a matrix ($d = {d}$): so $(Q J K^\\top) V = Q J (K^\\top V)$, but only with **no** "
             "softmax between the two products", name="bilinear"),
        Step(_vec(w_), _vec(W_),
             f"without the softmax, the row-normalised weights ($n = {n}$ keys, identity 1 for each)", name="normalised_weights"),
        Step(m_[0], -k,
             "every $\\langle q, \\kappa_j\\rangle_L \\le -k < 0$ (identity 2: "
             "$-\\langle q, \\kappa_j\\rangle_L = k\\cosh(d_j/\\sqrt{k})$, "
             "$d_j$ the geodesic distance), so no weight changes sign", kind="bound",
             certificate=2 * k * sp.sinh(dist1 / (2 * sp.sqrt(k))) ** 2,
             given={dots[0]: qt * kt[0] - k * sp.cosh(dist1 / sp.sqrt(k))}, name="inner_at_most_minus_k"),
        Step((k + Dn[0] / 2) / T - (k + Dn[1] / 2) / T, (Dn[0] - Dn[1]) / (2 * T),
             "so the weights **grow with distance**: with $D_j = \\|q - \\kappa_j\\|_L^2 \\ge 0$, the farther key gets "
             "the larger weight",
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


# =========================================================================== #
# how far apart: the KL identity, Hoeffding's bound, the exact KL supremum, the TV bound
# =========================================================================== #
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

    Examples
    --------
    >>> from hypviz.symbolic import kl_identity
    >>> der = kl_identity(n=2)
    >>> der.step("kl_identity").lhs, der.step("kl_identity").rhs       # KL(P||S) = log E_P[e^b] - E_P[b]
    (KL, -Eb + log(M))
    >>> der.step_names[:2]
    ['reweighting', 'kl_identity']
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
        Step(_vec(S), _vec([P[i] * sp.exp(b[i]) / M for i in range(n)]),
             f"$S$ reweights $P$ by $e^{{b_j}}$ and renormalises ($n = {n}$)",
             name="reweighting"),
        Step(KL, sp.log(M) - Eb, f"**KL identity** ($n = {n}$)", name="kl_identity"),
        Step(sp.log(Pj / (Pj * sp.exp(bj) / M)), sp.log(M) - bj,
             "general $n$, one term: $\\log(P_j / S_j) = \\log E_P[e^b] - b_j$",
             expand=False, name="general_term"),
        Step(sp.Sum(Pi[j] * (sp.log(M) - bi[j]), (j, 1, m)),
             sp.log(M) * sp.Sum(Pi[j], (j, 1, m)) - sp.Sum(Pi[j] * bi[j], (j, 1, m)),
             "general $n$: weight by $P_j$ and sum; with $\\sum_j P_j = 1$ this is the identity", expand=False,
             name="general_sum"),
        Step(sp.log(M) - Eb, sp.log(Mc) - Ebc, "adding a constant $c$ to every $b_j$ changes nothing", name="shift_invariance"),
    ]
    names = {**names, M: r"E_P[e^b]", Eb: r"E_P[b]", KL: r"\mathrm{KL}(P\|S)", Mc: r"E_P[e^{b + c}]", Ebc: r"E_P[b + c]",
             Pj: "P_j", bj: "b_j"}
    return Derivation(
        f"KL divergence between distance attention $P$ and spatial attention $S$ (n = {n} and general n)", steps, defs, names,
        intro="$P = \\mathrm{softmax}(a)$ (distance logits $a$), $S = \\mathrm{softmax}(a + b)$ (spatial logits = distance "
              "logits + bias $b$).",
    )


def hoeffding_bound(n: int = 3) -> Derivation:
    r"""Hoeffding's lemma, proved step by step: the KL divergence is at most :math:`\Delta^2/8`.

    .. math::

        \mathrm{KL}(P \,\|\, S) \le \frac{\Delta^2}{8}, \qquad \Delta = \max_j b_j - \min_j b_j

    Examples
    --------
    >>> from hypviz.symbolic import hoeffding_bound
    >>> der = hoeffding_bound(n=2)
    >>> der.step("hoeffding").rhs
    Delta**2/8
    >>> der.verify().ok
    True
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
            for tv, dv in ((sp.Rational(1, 10), sp.Rational(1, 2)), (sp.Rational(1, 2), sp.Integer(2)),
                           (sp.Rational(9, 10), sp.Integer(7))):
                Lf = sp.lambdify(u, Lexpr.subs(th, tv), "mpmath")
                g = sp.lambdify(u, sp.diff(Lexpr, u, 2).subs(th, tv), "mpmath")
                dm = mpmath.mpf(int(dv.p)) / int(dv.q)
                integral = mpmath.quad(lambda s: (dm - s) * g(s), [0, dm])  # noqa: B023  (quad calls it before the loop moves on)
                worst = max(worst, float(abs(integral - Lf(dm))))
        return worst < 1e-20, f"quadrature at 3 (theta, Delta) pairs, 30 digits: max difference {worst:.1e}"

    steps = [
        Step(chord, sp.exp(x),
             "convexity: $e^x$ lies below its chord on $[0, \\Delta]$ (shift $b$ so that $\\min_j b_j = 0$, "
             "$\\max_j b_j = \\Delta$)",
             kind="check", check=concave_chord, relation=r"\ge", name="chord"),
        Step(sum(P[i] * chord.subs(x, bb[i]) for i in range(n)), 1 - Eb / D + Eb / D * sp.exp(D),
             f"average the chord over $P$ ($n = {n}$): $E_P[e^b] \\le 1 - \\theta + \\theta e^\\Delta$", name="averaged_chord"),
        Step(sp.log(M) - th * D, L.subs(u, D),
             "$\\log$ is increasing: $\\mathrm{KL}(P\\|S) = \\log E_P[e^b] - \\theta\\Delta \\le L(\\Delta)$",
             kind="check", check=log_increasing, relation=r"\le", name="kl_below_L", role="consequence"),
        Step(sp.Subs(L, u, 0), 0, "$L(0) = 0$", name="L_at_0"),
        Step(sp.Subs(sp.Derivative(L, u), u, 0), 0, "$L'(0) = 0$", name="L_prime_at_0"),
        Step(sp.Derivative(L, (u, 2)), R * (1 - R), "the second derivative", name="L_second"),
        Step(rho * (1 - rho), sp.Rational(1, 4), "a product $\\rho (1 - \\rho)$ is at most $1/4$", kind="bound",
             certificate=(rho - sp.Rational(1, 2)) ** 2, name="product_quarter"),
        Step(L.subs(u, D), sp.Integral((D - u) * sp.Derivative(L, (u, 2)), (u, 0, D)),
             "Taylor's theorem with integral remainder, using $L(0) = L'(0) = 0$", kind="check", check=taylor_remainder,
             name="taylor_remainder"),
        Step(sp.Integral((D - u) / 4, (u, 0, D)), D**2 / 8,
             "bound $L''$ by $1/4$ and integrate: **Hoeffding's lemma**, $\\mathrm{KL}(P\\|S) \\le \\Delta^2/8$",
             name="hoeffding"),
    ]
    names = {**names, D: r"\Delta", th: r"\theta", rho: r"\rho", M: r"E_P[e^b]", Eb: r"E_P[b]"}
    return Derivation(
        "Hoeffding's lemma: $\\mathrm{KL}(P\\|S) \\le \\Delta^2/8$", steps, defs, names,
        intro="$\\mathrm{KL}(P\\|S) = \\log E_P[e^b] - E_P[b]$ is unchanged by shifting $b$, so let $b_j \\in [0, \\Delta]$, "
        "$\\Delta = \\max_j b_j - \\min_j b_j$, and write $E_P[b] = \\theta\\Delta$, $0 \\le \\theta \\le 1$.",
    )


def _kl_supremum_checks(D: sp.Symbol, nn: sp.Symbol, E: sp.Expr,
                        ts_expr: sp.Expr) -> tuple[Callable[[], tuple[bool, str]], ...]:
    r"""The checks of :func:`kl_supremum`: :math:`\theta^* > 0`, :math:`\theta^* \le 1/2`, :math:`K \le \Delta^2/8`."""

    def positive_theta() -> tuple[bool, str]:
        same = is_zero(ts_expr - (E - 1 - D) / (D * (E - 1)))[0]
        series = is_zero(sp.Sum(D**nn / sp.factorial(nn), (nn, 2, sp.oo)).doit() - (E - 1 - D))[0]
        return same and series, "theta* = (e^D - 1 - D) / (D (e^D - 1)), e^D - 1 - D = sum_{n>=2} D^n/n! > 0 (and e^D - 1 > 0)"

    def below_half() -> tuple[bool, str]:
        num = D * E - 2 * E + D + 2
        same = is_zero(sp.Rational(1, 2) - ts_expr - num / (2 * D * (E - 1)))[0]
        series = is_zero(sp.Sum((nn - 2) * D**nn / sp.factorial(nn), (nn, 3, sp.oo)).doit() - num)[0]
        return same and series, "1/2 - theta* = N / (2 D (e^D - 1)), N = D e^D - 2 e^D + D + 2 = sum_{n>=3} (n - 2) D^n/n! > 0"

    def below_hoeffding() -> tuple[bool, str]:
        from hypviz.base.oracle import kl_supremum_mpmath  # on demand: importing the derivations stays light

        below = []
        with mpmath.workdps(40):
            for dv in ("0.001", "0.1", "1", "2.5", "8", "20", "100"):
                x = mpmath.mpf(dv)
                below.append(kl_supremum_mpmath(x, dps=40) < x * x / 8)
        return all(below), ("integrate the previous step from 0, where Delta^2/8 - K vanishes (step series); "
                            "spot check: below Delta^2/8 at 7 values of Delta (40 digits)")

    return positive_theta, below_half, below_hoeffding


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

    Examples
    --------
    >>> from hypviz.symbolic import kl_supremum
    >>> der = kl_supremum(n=2)
    >>> der.step_names[:3]
    ['two_point_row', 'derivative', 'concave']
    >>> der.step("below_hoeffding").role       # below Delta**2/8: shown, not counted as a proof
    'consequence'
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

    positive_theta, below_half, below_hoeffding = _kl_supremum_checks(D, nn, E, ts_expr)
    steps = [
        Step(kl2, F, "a two-point row with $P = (1 - \\theta, \\theta)$ and bias $(0, \\Delta)$ reaches Hoeffding's "
             "$F(\\theta)$ (Hoeffding, steps 1-3: every row with $E_P[b] = \\min b + \\theta\\Delta$ has "
             "$\\mathrm{KL} \\le F(\\theta)$), "
             "so the supremum over rows is $\\max_{\\theta \\in [0, 1]} F(\\theta)$", name="two_point_row"),
        Step(sp.Derivative(F, th), (E - 1) / Z - D, "the derivative in $\\theta$", name="derivative"),
        Step(sp.Derivative(F, (th, 2)), 0, "$F$ is concave: a stationary point in $[0, 1]$ is the maximum", kind="bound",
             certificate=(E - 1) ** 2 / Z**2, name="concave"),
        Step(sp.Subs(sp.Derivative(F, th), th, ts), 0, "the derivative condition $F'(\\theta) = 0$ holds at $\\theta^*$",
             name="stationary"),
        Step(0, ts, "$\\theta^* > 0$", kind="check", check=positive_theta, relation="<", name="theta_star_positive"),
        Step(ts, sp.Rational(1, 2), "$\\theta^* \\le 1/2$: the worst row puts less than half of its mass on the high-bias key",
             kind="check", check=below_half, relation=r"\le", name="theta_star_below_half"),
        Step(F.subs(th, ts), K,
             "**the exact supremum** $K(\\Delta) = \\max_\\theta F(\\theta)$, attained by the two-point row at $\\theta^*$",
             name="closed_form"),
        Step(K, D**2 / 8 - D**4 / 576 + D**6 / 25920 - D**8 / 1075200,
             "series at small $\\Delta$: Hoeffding's $\\Delta^2/8$ is its leading term",
             kind="series", var=D, order=10, name="series"),
        Step(sp.Derivative(K, D), D * ts * (1 - ts),
             "its slope (envelope theorem: $\\partial F / \\partial \\Delta$ at $\\theta^*$)",
             name="slope"),
        Step(0, sp.Derivative(D**2 / 8 - K, D),
             "$\\Delta^2/8 - K(\\Delta)$ never decreases: its slope is $\\Delta(\\theta^* - \\frac{1}{2})^2$",
             kind="bound", certificate=D * (1 / D - sp.coth(D / 2) / 2) ** 2, name="gap_increasing"),
        Step(K, D**2 / 8,
             "so, as $\\Delta^2/8 - K(\\Delta) \\to 0$ for $\\Delta \\to 0$ (series), $K(\\Delta) \\le \\Delta^2/8$ for "
             "every $\\Delta$: "
             "Hoeffding's bound is the simple, looser one",
             kind="check", check=below_hoeffding, relation=r"\le", name="below_hoeffding", role="consequence"),
        Step(R, 0, "for large $\\Delta$: $K(\\Delta) \\sim \\Delta - 1 - \\log\\Delta$, linear, not quadratic",
             kind="limit", var=D, point=sp.oo, name="large_delta"),
    ]
    names = {D: r"\Delta", th: r"\theta", ts: r"\theta^*", kl2: r"\mathrm{KL}^{(2)}(\theta)", nn: "n"}
    return Derivation(
        "The exact KL supremum: "
        "$\\sup \\mathrm{KL}(P\\|S) = \\log\\frac{e^\\Delta - 1}{\\Delta} - 1 + \\frac{\\Delta}{e^\\Delta - 1} \\le "
        "\\frac{\\Delta^2}{8}$",
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

    Examples
    --------
    >>> from hypviz.symbolic import tv_bound
    >>> der = tv_bound(n=2)
    >>> der.step("tv_bound").kind, der.step("tv_bound").rhs
    ('bound', tanh(Delta/4))
    >>> der.verify().ok
    True
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
        Definition(S2, softmax([sp.log(pstar) + D, sp.log(1 - pstar)])[0],
                   tex=r"S^{(2)} = \mathrm{softmax}(\log p^* + \Delta, \log(1 - p^*))"),
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
        Step(S2 - P2, sp.tanh(D / 4), "the two-point row $P^{(2)}$ with bias $b = (\\Delta, 0)$ attains the bound exactly",
             name="attained"),
        Step(sp.tanh(D / 4), D / 4,
             "sharper than Pinsker + Hoeffding, $\\sqrt{\\mathrm{KL}/2} \\le \\sqrt{\\Delta^2/16} = \\Delta/4$",
             kind="check", check=tanh_vs_linear, relation=r"\le", name="below_linear"),
    ]
    names = {**names, D: r"\Delta", sig: r"\sigma", al: r"\alpha", be: r"\beta", pstar: "p^*", P2: r"P^{(2)}_1", S2: r"S^{(2)}_1"}
    return Derivation(
        "Total variation: $\\mathrm{TV}(P, S) \\le \\tanh(\\Delta/4)$", steps, defs, names,
        intro="$S_j = P_j e^{b_j} / E_P[e^b]$ (KL derivation, step 1) with the bias shifted to $b_j \\in [0, \\Delta]$.",
    )


# =========================================================================== #
# the first-order gap ratio for Gaussian queries and keys (notebook 05)
# =========================================================================== #
def _gaussian_expectation(expr: Any, zs: Sequence[sp.Symbol], sigma: sp.Expr) -> sp.Expr:
    r""":math:`\mathbb{E}[\mathrm{expr}]` for independent :math:`z_i \sim \mathcal{N}(0, \sigma^2)` (polynomial ``expr``).

    Term by term with the Gaussian moments :math:`\mathbb{E}[z^{2m}] = \sigma^{2m}(2m - 1)!!`,
    :math:`\mathbb{E}[z^{2m+1}] = 0`.
    """
    poly = sp.Poly(sp.expand(expr), *zs)
    total = sp.Integer(0)
    for powers, coeff in poly.terms():
        term = coeff
        for a in powers:
            term *= 0 if a % 2 else sigma**a * sp.factorial2(a - 1)
        total += term
    return sp.expand(total)


def _gaussian_covariance(a: Any, b: Any, zs: Sequence[sp.Symbol], sigma: sp.Expr) -> sp.Expr:
    r""":math:`\mathrm{Cov}(a, b) = \mathbb{E}[ab] - \mathbb{E}[a]\mathbb{E}[b]` for independent
    :math:`z_i \sim \mathcal{N}(0, \sigma^2)` (polynomials ``a``, ``b``; ``a = b`` gives the variance).

    Examples
    --------
    >>> import sympy as sp
    >>> z, s = sp.Symbol("z", real=True), sp.Symbol("sigma", positive=True)
    >>> _gaussian_covariance(z**2, z**2, [z], s)
    2*sigma**4
    """
    return (_gaussian_expectation(a * b, zs, sigma)
            - _gaussian_expectation(a, zs, sigma) * _gaussian_expectation(b, zs, sigma))


def _gaussian_mad() -> tuple[bool, str]:
    r"""The check :math:`\mathbb{E}|X| = \sigma\sqrt{2/\pi}` for :math:`X \sim \mathcal{N}(0, \sigma^2)`, by sympy."""
    x = sp.Symbol("x", real=True)
    s_ = sp.Symbol("s", positive=True)
    density = sp.exp(-x**2 / (2 * s_**2)) / sp.sqrt(2 * sp.pi * s_**2)
    value = 2 * sp.integrate(x * density, (x, 0, sp.oo))
    return sp.simplify(value - s_ * sp.sqrt(2 / sp.pi)) == 0, "E|X| = 2 * integral of x phi(x) over x > 0, by sympy"


def first_order_gap_ratio(n: int = 3, *, k: Any = None, d: int = 3) -> Derivation:
    r"""The first-order ratio :math:`\mathrm{TV}(S, P)/\mathrm{TV}(P, U) \approx (1 + 2\rho^2\kappa_t^2/q_t^2)^{-1/2}`
    for Gaussian points.

    Queries and keys with independent isotropic Gaussian spatial parts, keys
    :math:`\kappa_s = \sigma z`, :math:`z \sim \mathcal{N}(0, I_d)`, one query row :math:`q`,
    :math:`\rho^2 = \|q_s\|^2/(d\sigma^2)` (query norm over the keys' root-mean-square norm),
    :math:`\kappa_t^2 = k + d\sigma^2` (the keys' time coordinate at their root-mean-square norm) and
    :math:`q_t^2 = k + \|q_s\|^2`:

    .. math::

        \mathrm{softmax}(\varepsilon g)_j = \tfrac1n\bigl(1 + \varepsilon(g_j - \bar g)\bigr) + O(\varepsilon^2)
        \;\Rightarrow\;
        \mathrm{TV}(S, P) \approx \tfrac{1}{2n}\sum_j |b_j - \bar b|, \quad
        \mathrm{TV}(P, U) \approx \tfrac{1}{2n}\sum_j |f_j - \bar f|,

        \kappa_{t,j} = \kappa_t + \frac{\sigma^2(\|z_j\|^2 - d)}{2\kappa_t} + O\bigl((\|z_j\|^2 - d)^2\bigr), \qquad
        \frac{\mathrm{TV}(S, P)}{\mathrm{TV}(P, U)} \approx \frac{\mathrm{sd}(b)}{\mathrm{sd}(f)}
        = \Bigl(1 + \frac{2\rho^2 \kappa_t^2}{q_t^2}\Bigr)^{-1/2},

    with :math:`f_j` the distance logits and :math:`b_j = q_t\kappa_{t,j}/\tau` the bias.  Its limits:
    :math:`(1 + 2\rho^2 k/q_t^2)^{-1/2}` for small keys, :math:`(1 + 2\rho^2)^{-1/2}` only when both norms are
    small against :math:`\sqrt k`, and :math:`1/\sqrt 3` at :math:`\rho = 1` for ANY norm
    (:math:`q_t = \kappa_t` there).  Assumptions: first order in the logits (small :math:`r^2/\tau`, maps
    near uniform), the key norms concentrated (:math:`\|z\|^2 - d = O(\sqrt d)` against :math:`d`: large
    :math:`d`), many keys and both deviations Gaussian.  The softmax steps are checked for ``n`` keys,
    the Gaussian moments in ``d`` explicit coordinates (``d`` symbolic in the result:
    :math:`\mathrm{Var}\,\|z\|^2 = 2d`); :func:`hypviz.attention.comparison.accuracy.gaussian_gap_study` measures how
    well the result holds.

    Examples
    --------
    >>> from hypviz.symbolic import first_order_gap_ratio
    >>> der = first_order_gap_ratio(n=2, k=1)
    >>> der.step("ratio").kind, der.step("ratio").rhs
    ('limit', 1/sqrt(1 + 2*rho**2/q_t**2))
    >>> der.step("ratio").role                 # a genuine check, not a definition or a consequence
    'proof'
    """
    k = curvature(k)
    eps = sp.Symbol("epsilon", positive=True)
    g = sp.symbols(f"g1:{n + 1}", real=True)
    f = sp.symbols(f"f1:{n + 1}", real=True)
    b = sp.symbols(f"b1:{n + 1}", real=True)
    mean = lambda v: sum(v) / n  # noqa: E731
    u = sp.Symbol("u", nonnegative=True)                  # |kappa_s|^2
    sigma = sp.Symbol("sigma", positive=True)
    zs = sp.symbols(f"z1:{d + 1}", real=True)
    qc = sp.symbols(f"q1:{d + 1}", real=True)
    c = sp.Symbol("c", real=True)                        # the coefficient q_t / (2 sqrt k) of |kappa_s|^2
    dot = sum(a * z for a, z in zip(qc, zs))
    sqn = sum(z * z for z in zs)
    qn2 = sum(a * a for a in qc)
    var = lambda e: _gaussian_covariance(e, e, zs, sigma)  # noqa: E731
    cov = _gaussian_covariance(dot, sqn, zs, sigma)
    s_ = sp.Symbol("s", positive=True)
    dd = sp.Symbol("d", positive=True, integer=True)
    rho = sp.Symbol("rho", nonnegative=True)
    qt = sp.Symbol("q_t", positive=True)
    A2, B2 = sp.symbols("A^2 B^2", positive=True)        # Var(q_s . z) and Var(c |z|^2), symbolic d
    Q2 = sp.Symbol("Q2", nonnegative=True)               # |q_s|^2
    T2 = sp.Symbol("T2", positive=True)                  # kappa_t^2 = k + d sigma^2, the keys' time coordinate squared
    vz = sp.Symbol("v", real=True)                       # |z|^2 - d

    ratio = sp.sqrt(B2 / (A2 + B2))
    steps = [
        Step(softmax([eps * v for v in g])[0], (1 + eps * (g[0] - mean(g))) / n,
             f"a softmax of small logits is linear in them (entry 1 of $n = {n}$)", kind="series", var=eps, order=2,
             name="linear_softmax"),
        Step(softmax([eps * (v + w) for v, w in zip(f, b)])[0] - softmax([eps * v for v in f])[0], eps * (b[0] - mean(b)) / n,
             "so to first order $S_j - P_j = (b_j - \\bar b)/n$ and $P_j - 1/n = (f_j - \\bar f)/n$: both TVs are half "
             "the mean absolute deviations of the bias and of the distance logits over the keys",
             kind="series", var=eps, order=2, name="linear_gap"),
        Step(sp.sqrt(k + sigma**2 * (dd + vz)), sp.sqrt(k + dd * sigma**2) + sigma**2 * vz / (2 * sp.sqrt(k + dd * sigma**2)),
             "keys of any norm: $\\kappa_{t,j} = \\sqrt{k + \\sigma^2\\|z_j\\|^2}$ is linear in $\\|z_j\\|^2 - d$ "
             "(of size $\\sqrt d$ against $d$), so $\\tau b_j = c\\|\\kappa_{s,j}\\|^2$ and "
             "$\\tau f_j = q_s\\cdot\\kappa_{s,j} - c\\|\\kappa_{s,j}\\|^2$ up to row constants, "
             "$c = q_t/(2\\kappa_t)$, $\\kappa_t^2 = k + d\\sigma^2$", kind="series", var=vz, order=2, name="key_time"),
        Step(sp.sqrt(u + k), sp.sqrt(k) + u / (2 * sp.sqrt(k)), "small keys: $\\kappa_t \\to \\sqrt k$ and "
             "$c \\to q_t/(2\\sqrt k)$",
             kind="series", var=u, order=2, name="small_keys"),
        Step(var(dot), qn2 * sigma**2, f"$\\kappa_s = \\sigma z$: $\\mathrm{{Var}}(q_s \\cdot \\kappa_s) = \\|q_s\\|^2\\sigma^2$ "
             f"(Gaussian moments, $d = {d}$ coordinates)", name="var_dot"),
        Step(var(sqn), 2 * d * sigma**4, f"$\\mathrm{{Var}}\\,\\|\\kappa_s\\|^2 = 2d\\sigma^4$ ($d = {d}$)", name="var_norm"),
        Step(cov, 0, "the two are uncorrelated (odd moments vanish)", name="uncorrelated"),
        Step(var(dot - c * sqn), qn2 * sigma**2 + c**2 * 2 * d * sigma**4,
             "so $\\tau^2\\mathrm{Var}(f) = \\|q_s\\|^2\\sigma^2 + 2dc^2\\sigma^4$ and "
             "$\\tau^2\\mathrm{Var}(b) = 2dc^2\\sigma^4$",
             name="var_logits"),
        Step(sp.Symbol("E|X|"), s_ * sp.sqrt(2 / sp.pi), "a Gaussian deviation has mean absolute value "
             "$\\sqrt{2/\\pi}\\,\\mathrm{sd}$; with many keys and large $d$ (both deviations Gaussian) the ratio of the "
             "TVs is the ratio of the standard deviations", kind="check", check=_gaussian_mad, name="gaussian_mad"),
        Step(ratio.subs({A2: Q2 * sigma**2, B2: 2 * dd * (qt / (2 * sp.sqrt(T2))) ** 2 * sigma**4}),
             (1 + 2 * rho**2 * T2 / qt**2) ** sp.Rational(-1, 2),
             "$\\mathrm{sd}(b)/\\mathrm{sd}(f)$ with $\\|q_s\\|^2 = \\rho^2 d\\sigma^2$ ($\\rho$: query norm over the keys' "
             "root-mean-square norm): **$(1 + 2\\rho^2\\kappa_t^2/q_t^2)^{-1/2}$**", given={Q2: rho**2 * dd * sigma**2},
             name="general"),
        Step((1 + 2 * rho**2 * T2 / qt**2) ** sp.Rational(-1, 2), (1 + 2 * rho**2 * k / qt**2) ** sp.Rational(-1, 2),
             "small keys, $\\kappa_t^2 \\to k$", kind="limit", var=T2, point=k, name="ratio"),
        Step((1 + 2 * rho**2 * k / (Q2 + k)) ** sp.Rational(-1, 2), (1 + 2 * rho**2) ** sp.Rational(-1, 2),
             "queries small too, $q_t^2 = k + \\|q_s\\|^2 \\to k$: $(1 + 2\\rho^2)^{-1/2}$ needs BOTH norms small against "
             "$\\sqrt k$", kind="limit", var=Q2, point=0, name="small_queries"),
        Step((1 + 2 * rho**2 * T2 / qt**2) ** sp.Rational(-1, 2), 1 / sp.sqrt(3),
             "equal scales, $\\rho = 1$: $q_t^2 = k + d\\sigma^2 = \\kappa_t^2$, so $1/\\sqrt 3$ at any norm",
             given={rho: 1, qt: sp.sqrt(k + dd * sigma**2), T2: k + dd * sigma**2}, name="equal_scales_any_norm",
             role="consequence"),
        Step((1 + 2 * rho**2) ** sp.Rational(-1, 2), 1 / sp.sqrt(3), "equal scales and small norms, $\\rho = 1$: $1/\\sqrt 3$",
             given={rho: 1}, name="equal_scales", role="consequence"),
    ]
    names = {eps: r"\varepsilon", sigma: r"\sigma", rho: r"\rho", Q2: r"\|q_s\|^2", u: r"\|\kappa_s\|^2",
             T2: r"\kappa_t^2", vz: r"\|z\|^2 - d",
             s_: r"\mathrm{sd}", A2: r"A^2", B2: r"B^2"}
    return Derivation(
        "First-order gap ratio for Gaussian points: TV(S, P)/TV(P, U) ≈ 1/√(1 + 2ρ²κ_t²/q_t²)", steps, [], names,
        intro="Spatial map $S = \\mathrm{softmax}(f + b)$, distance map $P = \\mathrm{softmax}(f)$, one query row, "
              "keys with independent isotropic Gaussian spatial parts $\\kappa_s = \\sigma z$; first order in the logits "
              "(small $r^2/\\tau$) and in the spread of the key norms about their root-mean-square (large $d$).",
    )
