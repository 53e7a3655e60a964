"""hypviz.symbolic: every derivation verifies, broken steps are caught, identities hold numerically.

Steps are found by name (``Derivation.step(name)``, ``Report.result(name)``), never by position.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import subprocess
import sys

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from hypviz import attention, lorentz
from hypviz import symbolic as hs
from hypviz.attention.comparison import accuracy as acc
from hypviz.symbolic.geometry import _Pair

NAMES = list(hs.derivations())

@pytest.fixture(scope="module")
def built():
    return hs.derivations()


@pytest.fixture(scope="module")
def reports(built):
    return {name: der.verify() for name, der in built.items()}


# --------------------------------------------------------------------------- #
# the package: light to import, its names where they are documented
# --------------------------------------------------------------------------- #
_IMPORT_PROBE = """
import sys
import hypviz.symbolic as hs
heavy = sorted(m for m in sys.modules
               if m == "torch" or (m.startswith("hypviz.") and not m.startswith(("hypviz.symbolic", "hypviz.base"))))
listed = all(hasattr(hs, name) for name in hs.__all__)
from hypviz.base.oracle import kl_supremum_mpmath, sqdist_mpmath  # the mpmath references need no torch either
print(repr((heavy, listed, "torch" in sys.modules)))
"""


def test_import_is_light():
    """``import hypviz.symbolic`` (a fresh process) imports sympy only: no torch, no other layer of hypviz (no timing)."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True, timeout=120, check=True)
    heavy, listed, torch_after_oracle = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert heavy == [], f"import hypviz.symbolic imported {heavy}"
    assert listed, "every name of hypviz.symbolic.__all__ must exist"
    assert not torch_after_oracle


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hs.nope  # noqa: B018
    with pytest.raises(ImportError):
        exec("from hypviz.symbolic import nope", {})


def test_the_framework_and_the_derivations_live_in_their_own_modules():
    from hypviz.symbolic import geometry, softmax_identities, steps

    assert hs.Derivation is steps.Derivation and hs.Step is steps.Step
    assert hs.squared_distance is geometry.squared_distance and hs.tv_bound is softmax_identities.tv_bound
    # the numerics live in hypviz.attention.comparison.accuracy
    assert not hasattr(hs, "sqdist_accuracy") and not hasattr(hs, "softmax_gap_bounds")


# --------------------------------------------------------------------------- #
# every derivation verifies (independently of the notebooks)
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("name", NAMES)
def test_derivation_verifies(reports, name):
    report = reports[name]
    assert report.ok, str(report) + "\n" + "\n".join(str(r) for r in report.failures)
    assert len(report.results) >= 3


def test_two_point_derivations_recheck_coordinates(reports):
    for name in ("squared_distance", "decomposition", "thread_approximation", "approximation_error", "query_constant"):
        rep = reports[name]
        assert rep.d == 3
        checked = [r for r in rep.results if r.components]
        assert checked and all(r.components.endswith("ok") for r in checked), name


def test_verify_all_reports_every_derivation(reports):
    combined = hs.Reports(reports.values())
    assert combined.ok
    text = repr(combined)
    assert text.startswith(f"{len(NAMES)} derivations")
    assert "all verified" in text


def test_every_kind_is_used(built):
    kinds = {st.kind for der in built.values() for st in der.steps}
    assert kinds == set(hs.STEP_KINDS)


# --------------------------------------------------------------------------- #
# steps have names; what a check is worth is tagged and counted
# --------------------------------------------------------------------------- #
def test_every_step_has_a_unique_name(built):
    for name, der in built.items():
        names = der.step_names
        assert all(isinstance(nm, str) and nm.isidentifier() for nm in names), name
        assert len(set(names)) == len(names), name
        for i, nm in enumerate(names, start=1):
            assert der.number(nm) == i and der.step(nm) is der.steps[i - 1]


def test_unknown_step_name_is_a_clear_error(built):
    with pytest.raises(KeyError, match="no step named"):
        built["decomposition"].step("nope")
    with pytest.raises(KeyError, match="no step named"):
        built["decomposition"].verify().result("nope")


def test_duplicate_step_names_are_refused():
    st = hs.Step(x, x, "same", name="twice")
    with pytest.raises(ValueError, match="unique"):
        hs.Derivation("dup", [st, hs.Step(y, y, "same", name="twice")])
    with pytest.raises(ValueError, match="identifier"):
        hs.Step(x, x, "bad name", name="not a name")
    with pytest.raises(ValueError, match="role"):
        hs.Step(x, x, "bad role", role="evidence")


# the steps a review found to be definitions or trivial consequences, by name
NOT_GENUINE = {
    "decomposition": {"written_out": "definition", "euclidean_overstates": "consequence",
                      "equal_norms_time": "consequence", "equal_norms_equal": "consequence"},
    "approximation_error": {"exact_error": "definition", "equal_norms_exact": "consequence"},
    "thread_approximation": {"inner_product": "definition", "lift_substituted": "definition"},
    "query_constant": {"inner_product": "definition"},
    "tv_bound": {"tv_as_set": "consequence"},
    "hoeffding_bound": {"kl_below_L": "consequence"},
    "lifted_norm": {"lift_squared": "definition", "origin": "consequence"},
}


@pytest.mark.parametrize("name", sorted(NOT_GENUINE))
def test_definitions_and_consequences_are_tagged(built, reports, name):
    der, rep = built[name], reports[name]
    for step_name, role in NOT_GENUINE[name].items():
        assert der.step(step_name).role == role, (name, step_name)
        assert rep.result(step_name).role == role
    genuine = sum(1 for st in der.steps if st.role == "proof")
    assert rep.genuine == genuine == len(der.steps) - len([st for st in der.steps if st.role != "proof"])
    assert f"{genuine} genuine check" in rep.summary()
    md = der.to_markdown()
    for step_name, role in NOT_GENUINE[name].items():
        i = der.number(step_name)
        line = next(ln for ln in md.splitlines() if ln.startswith(f"{i}. "))
        assert line.endswith(f"*[{role}]*"), line


def test_summary_counts_genuine_checks_separately(reports):
    rep = reports["decomposition"]
    assert rep.summary().startswith(
        "Identity 3: spatial distance minus squared time difference: all 9 steps verified: "
        "5 genuine checks (+ 1 definition, 3 consequences)"
    )
    combined = hs.Reports(reports.values())
    total = sum(len(r.results) for r in combined)
    others = total - combined.genuine
    assert 0 < others < total
    head = repr(combined).splitlines()[0]
    assert f"{total} steps: all verified; {combined.genuine} genuine checks (+ " in head


def test_a_failing_definition_step_still_fails_by_name():
    bad = hs.Derivation("t", [hs.Step(x, y, "restated wrongly", name="restated", role="definition")])
    rep = bad.verify()
    assert not rep.ok and rep.result("restated").role == "definition"
    assert "FAILED at step 1 of 1 (restated:" in rep.summary()
    assert "[definition]" in str(rep.failures[0])


# --------------------------------------------------------------------------- #
# k = 1 reproduces the thread's formulas exactly
# --------------------------------------------------------------------------- #
def test_thread_formulas_at_k1():
    der = hs.thread_approximation(k=1)
    rq, rk = sp.Symbol("q_norm", nonnegative=True), sp.Symbol("v_norm", nonnegative=True)  # query q, key kappa
    dot = sp.Symbol("qv_dot", real=True)
    inner, sq = sp.Symbol("qv_inner"), sp.Symbol("qv_sqdist")
    rhs = {nm: der.step(nm).rhs for nm in der.step_names}
    assert sp.expand(rhs["identity_1"] - (-2 - 2 * inner)) == 0  # |q - kappa|^2_L = -2 - 2<q, kappa>_L
    assert sp.expand(rhs["inner_from_distance"] - (-sq / 2 - 1)) == 0  # <q, kappa>_L = -1/2 |q - kappa|^2_L - 1
    assert sp.expand(rhs["taylor_lift"] - (1 + rq**2 / 2)) == 0  # sqrt(|q_s|^2 + 1) ~ 1 + |q_s|^2 / 2
    assert sp.expand(rhs["taylor_inner"] - (-(1 + (rq**2 + rk**2) / 2) + dot)) == 0
    assert der.verify().ok


def test_general_k_reduces_to_k1():
    k = sp.Symbol("k", positive=True)
    general, one = hs.thread_approximation(), hs.thread_approximation(k=1)
    assert general.step_names == one.step_names
    for name in general.step_names:
        assert sp.simplify(sp.sympify(general.step(name).rhs).subs(k, 1) - one.step(name).rhs) == 0, name


def test_curvature_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        hs.squared_distance(k=-1)
    with pytest.raises(ValueError, match="positive"):
        hs.squared_distance(k=sp.Symbol("kk"))


# --------------------------------------------------------------------------- #
# a broken step is reported as failing, by number
# --------------------------------------------------------------------------- #
x, y, r = sp.symbols("x y r", positive=True)
k = sp.Symbol("k", positive=True)


def _three(broken: hs.Step) -> hs.Derivation:
    """``before``, the step named ``broken`` (its own name if it has one), ``after``."""
    good = hs.Step((x + y) ** 2, x**2 + 2 * x * y + y**2, "binomial")
    if broken.name is None:
        broken = dataclasses.replace(broken, name="broken")
    return hs.Derivation("test", [dataclasses.replace(good, name="before"), broken, dataclasses.replace(good, name="after")])


@pytest.mark.parametrize(
    "broken",
    [
        hs.Step((x + y) ** 2, x**2 + y**2, "forgot the cross term"),
        hs.Step(sp.sqrt(r**2 + k), sp.sqrt(k), "dropped the r^2 term", kind="series", var=r, order=4),
        hs.Step(sp.sin(x) / x, 0, "wrong limit", kind="limit", var=x, point=0),
        hs.Step(x * y, (x**2 + y**2) / 2, "AM-GM with a wrong certificate", kind="bound", certificate=(x + y) ** 2 / 2),
        hs.Step(x - y, 0, "certificate of unknown sign", kind="bound", certificate=y - x),
        hs.Step(sp.exp(x + y), sp.exp(x) * sp.exp(y), "claims a difference that is not there", kind="nonzero",
                witness={x: 1, y: 2}),
        hs.Step(x, y, "a failing custom check", kind="check", check=lambda: (False, "nope")),
        hs.Step(x, y, "a check that raises", kind="check", check=lambda: 1 / 0),
    ],
    ids=["simplify", "series", "limit", "bound-cert", "bound-sign", "nonzero", "check", "check-raises"],
)
def test_broken_step_is_reported(broken):
    der = _three(broken)
    report = der.verify()
    assert not report.ok
    assert report.first_failure is report.result("broken") and report.failures == [report.result("broken")]
    assert report.result("before").ok and report.result("after").ok
    assert report.first_failure.index == der.number("broken") == 2  # reported by its number too
    assert "FAILED at step 2 of 3 (broken: " in str(report)
    with pytest.raises(hs.DerivationError, match=r"step 2 \(broken\)"):
        der.check()


def test_verify_all_raises_on_failure(monkeypatch):
    bad = _three(hs.Step(x, y, "wrong"))
    monkeypatch.setattr(hs, "derivations", lambda *a, **kw: {"bad": bad})
    with pytest.raises(hs.DerivationError, match="FAILED at step 2"):
        hs.verify_all()
    assert not hs.verify_all(raise_on_failure=False).ok
    named = _three(hs.Step(x, y, "wrong", name="broken_step"))
    good = hs.squared_distance()
    monkeypatch.setattr(hs, "derivations", lambda *a, **kw: {"good": good, "bad": named})
    with pytest.raises(hs.DerivationError, match=r"FAILED at step 2 of 3 \(broken_step: "):
        hs.verify_all()
    reports = hs.verify_all(raise_on_failure=False)
    assert {r.title: r.ok for r in reports} == {good.title: True, "test": False} and "FAILURES" in repr(reports)
    bad = next(r for r in reports if not r.ok)
    assert not bad.result("broken_step").ok and bad.result("before").ok


def test_coordinate_recheck_catches_a_wrong_reduction():
    """A step true for the norm symbols but whose coordinate form is wrong fails on the re-check."""
    pair = _Pair("x", "y", k)
    defs = pair.definitions()
    wrong = [
        hs.Definition(df.symbol, df.expr, (lambda d: sum((a + b) ** 2 for a, b in zip(*pair.comps(d)))))
        if df.symbol == pair.es
        else df
        for df in defs
    ]
    step = hs.Step(pair.es, pair.ra**2 + pair.rb**2 - 2 * pair.c, "bilinearity", name="bilinearity")
    good = hs.Derivation("ok", [step], defs, coords=pair.coords)
    bad = hs.Derivation("bad", [step], wrong, coords=pair.coords)
    assert good.verify().ok
    rep = bad.verify()
    assert not rep.ok and "coordinates" in rep.result("bilinearity").components
    assert bad.verify(d=None).ok  # general form alone cannot see it


def test_given_hypotheses_are_used():
    step = hs.Step(x - y, 0, "equal", given={y: x})
    assert hs.Derivation("g", [step]).verify().ok
    assert not hs.Derivation("g", [hs.Step(x - y, 0, "equal")]).verify().ok


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(kind="nope"), "kind"),
        (dict(kind="series"), "var"),
        (dict(kind="series", var=x), "order"),
        (dict(kind="bound"), "certificate"),
        (dict(kind="nonzero"), "witness"),
        (dict(kind="check"), "check"),
    ],
)
def test_step_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        hs.Step(x, y, "why", **kwargs)


# --------------------------------------------------------------------------- #
# display
# --------------------------------------------------------------------------- #
def test_markdown_is_deterministic_and_complete(built):
    for name, der in built.items():
        md = der.to_markdown()
        assert md == der._repr_markdown_() == der.to_markdown()
        assert md.startswith(f"**{der.title}**")
        for i in range(1, len(der.steps) + 1):
            assert f"\n{i}. $\\displaystyle " in md, (name, i)
        assert "0x" not in md and "Dummy" not in md


def test_markdown_uses_readable_names():
    md = hs.squared_distance().to_markdown()
    assert r"\|x - y\|_L^2 = - 2 k - 2 \langle x, y \rangle_L" in md
    series = hs.time_taylor().to_markdown()
    assert r"O\left(r^{6}\right)" in series
    assert r"\le" in hs.tv_bound().to_markdown()


# --------------------------------------------------------------------------- #
# numerical cross-check: the steps at random points, and the identities with hypviz.lorentz
# --------------------------------------------------------------------------- #
PAIR_DERIVATIONS = ["squared_distance", "decomposition", "thread_approximation", "approximation_error", "query_constant"]


@pytest.mark.parametrize("name", PAIR_DERIVATIONS)
def test_exact_steps_hold_numerically(built, name):
    """Evaluate both sides of every exact step at random points (norms and dot product of real vectors)."""
    der = built[name]
    rng = np.random.default_rng(1)
    na, nb, dot = sorted(der.coords(1)[0], key=lambda s_: ("_dot" in s_.name, s_.name))
    for _ in range(3):
        a_s, b_s = rng.normal(size=4) * 1.5, rng.normal(size=4) * 1.5
        values = {
            na: float(np.linalg.norm(a_s)),
            nb: float(np.linalg.norm(b_s)),
            dot: float(a_s @ b_s),
            sp.Symbol("k", positive=True): float(rng.uniform(0.3, 3.0)),
        }
        n_checked = 0
        for st in der.steps:
            if st.kind != "simplify" or st.given or not st.expand:
                continue
            lhs, rhs = der.evaluate(st.name, values)
            assert np.allclose(lhs, rhs, rtol=1e-12, atol=1e-12), (name, st.name, lhs, rhs)
            n_checked += 1
        assert n_checked >= 2


@pytest.fixture(params=[0.5, 1.0, 2.3], ids=lambda v: f"k={v}")
def kk(request):
    return request.param


def _points(n, d, scale, k, seed):
    g = torch.Generator().manual_seed(seed)
    return lorentz.lift(torch.randn(n, d, generator=g, dtype=torch.float64) * scale, k=k)


def test_identities_1_to_4_with_lorentz(kk):
    xp, yp = _points(50, 5, 1.3, kk, 0), _points(50, 5, 1.3, kk, 1)
    xt, yt, xs, ys = xp[:, 0], yp[:, 0], xp[:, 1:], yp[:, 1:]
    inner = lorentz.inner(xp, yp)
    sq = lorentz.sqdist(xp, yp, k=kk)
    assert torch.allclose(lorentz.inner(xp, xp), torch.full_like(xt, -kk), atol=1e-12)  # on the hyperboloid
    assert torch.allclose(sq, -2 * kk - 2 * inner, rtol=1e-10)  # identity 1
    dist = lorentz.dist(xp, yp, k=kk)
    assert torch.allclose(dist, math.sqrt(kk) * torch.acosh(-inner / kk), rtol=1e-9)  # identity 2
    assert torch.allclose(sq, 4 * kk * torch.sinh(dist / (2 * math.sqrt(kk))) ** 2, rtol=1e-10)
    es = ((xs - ys) ** 2).sum(-1)
    assert torch.allclose(sq, es - (xt - yt) ** 2, rtol=1e-10)  # identity 3
    assert torch.allclose(xt - yt, ((xs - ys) * (xs + ys)).sum(-1) / (xt + yt), rtol=1e-10)
    assert bool((es >= sq).all())  # the Euclidean distance over-states
    assert torch.allclose((xs * ys).sum(-1), -sq / 2 + (xt * yt - kk), rtol=1e-10, atol=1e-12)  # identity 4


def test_equal_norms_make_the_distances_equal(kk):
    xp = _points(20, 4, 2.0, kk, 3)
    g = torch.Generator().manual_seed(4)
    rot, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))
    yp = lorentz.lift(xp[:, 1:] @ rot, k=kk)  # same spatial norms
    es = ((xp[:, 1:] - yp[:, 1:]) ** 2).sum(-1)
    assert torch.allclose(lorentz.sqdist(xp, yp, k=kk), es, rtol=1e-10)


def test_approximation_error_is_fourth_order(kk):
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(3, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    lead = (a.dot(a) - b.dot(b)) ** 2 / (4 * kk)
    deviation = []
    for eps in (1e-1, 1e-2):
        xp, yp = lorentz.lift(eps * a, k=kk), lorentz.lift(eps * b, k=kk)
        err = ((xp[1:] - yp[1:]) ** 2).sum() - lorentz.sqdist(xp, yp, k=kk)
        assert err >= 0 and err <= lead * eps**4 * (1 + 1e-9)  # the bound of the derivation
        deviation.append(float(abs(err / eps**4 - lead)))
    assert deviation[1] < deviation[0] / 50  # err / eps^4 -> lead, with an O(eps^2) correction
    r = torch.tensor([1e-2, 1e-1, 0.3], dtype=torch.float64)
    taylor = math.sqrt(kk) + r**2 / (2 * math.sqrt(kk)) - r**4 / (8 * kk**1.5)
    assert bool(((torch.sqrt(r**2 + kk) - taylor).abs() <= r**6 / (16 * kk**2.5) * 1.01).all())


def test_softmax_identities_with_lorentz(kk):
    q, keys = _points(6, 8, 0.7, kk, 6), _points(9, 8, 0.7, kk, 7)
    tau = math.sqrt(8)
    spatial = q[:, 1:] @ keys[:, 1:].T / tau
    distance = -0.5 * lorentz.pairwise_sqdist(q, keys, k=kk) / tau
    bias = q[:, :1] * keys[:, 0][None, :] / tau
    lorentzian = lorentz.pairwise_inner(q, keys) / tau
    sm = lambda z: torch.softmax(z, dim=-1)  # noqa: E731
    assert torch.allclose(sm(spatial), sm(distance + bias), atol=1e-13)  # identity 4 in a softmax
    assert not torch.allclose(sm(spatial), sm(distance), atol=1e-6)  # the per-key bias does not cancel
    assert torch.allclose(sm(lorentzian), sm(distance), atol=1e-13)  # identity 5
    assert torch.allclose(sm(spatial + 3.7), sm(spatial), atol=1e-14)  # per-query shift invariance


def test_kl_identity_numerically():
    q, keys = _points(5, 6, 1.5, 1.0, 8), _points(7, 6, 1.5, 1.0, 9)
    res = acc.softmax_gap_bounds(q, keys, temperature=2.0, k=1.0)
    p = torch.softmax(-0.5 * lorentz.pairwise_sqdist(q, keys) / 2.0, dim=-1)
    b = q[:, :1] * keys[:, 0][None, :] / 2.0
    kl = torch.log((p * b.exp()).sum(-1)) - (p * b).sum(-1)
    assert torch.allclose(res.kl, kl, rtol=1e-9, atol=1e-15)


def test_kl_and_tv_are_accurate_near_the_origin():
    """Tiny divergences keep their relative accuracy (against a 60-digit reference)."""
    g = torch.Generator().manual_seed(11)
    q = lorentz.lift(torch.randn(2, 8, generator=g, dtype=torch.float64) * 0.001)
    keys = lorentz.lift(torch.randn(12, 8, generator=g, dtype=torch.float64) * 0.001)
    res = acc.softmax_gap_bounds(q, keys, temperature=2.0)
    with mpmath.workdps(60):
        for i in range(2):
            qs = [mpmath.mpf(v) for v in q[i, 1:].tolist()]
            qt = mpmath.sqrt(mpmath.fsum(v * v for v in qs) + 1)
            a, s = [], []
            for j in range(12):
                ks = [mpmath.mpf(v) for v in keys[j, 1:].tolist()]
                kt = mpmath.sqrt(mpmath.fsum(v * v for v in ks) + 1)
                dot = mpmath.fsum(u * v for u, v in zip(qs, ks))
                a.append((1 - qt * kt + dot) / 2)  # -1/2 |q - kappa|^2_L / tau, tau = 2
                s.append(dot / 2)
            za, zs = mpmath.fsum(mpmath.exp(v) for v in a), mpmath.fsum(mpmath.exp(v) for v in s)
            P, Sm = [mpmath.exp(v) / za for v in a], [mpmath.exp(v) / zs for v in s]
            kl = mpmath.fsum(p * mpmath.log(p / x) for p, x in zip(P, Sm))
            tv = mpmath.fsum(abs(p - x) for p, x in zip(P, Sm)) / 2
            tvu = mpmath.fsum(abs(p - mpmath.mpf(1) / 12) for p in P) / 2
            assert kl < 1e-12  # a tiny divergence, where a difference of two softmax rows loses its digits
            assert abs(mpmath.mpf(res.kl[i].item()) / kl - 1) < 1e-9
            assert abs(mpmath.mpf(res.tv[i].item()) / tv - 1) < 1e-9
            assert abs(mpmath.mpf(res.tv_uniform[i].item()) / tvu - 1) < 1e-9


def test_tv_uniform_and_direct_softmax_agree():
    q, keys = _points(4, 6, 2.0, 1.0, 12), _points(10, 6, 2.0, 1.0, 13)
    res = acc.softmax_gap_bounds(q, keys, temperature=1.5)
    p = torch.softmax(-0.5 * lorentz.pairwise_sqdist(q, keys) / 1.5, dim=-1)
    s = torch.softmax(q[:, 1:] @ keys[:, 1:].T / 1.5, dim=-1)
    assert torch.allclose(res.tv, 0.5 * (p - s).abs().sum(-1), rtol=1e-10, atol=1e-14)
    assert torch.allclose(res.tv_uniform, 0.5 * (p - 1 / 10).abs().sum(-1), rtol=1e-10, atol=1e-14)


# --------------------------------------------------------------------------- #
# the exact KL supremum, the Euclidean limit, the weights without a softmax
# --------------------------------------------------------------------------- #
DELTAS = [1e-6, 1e-3, 0.04, 0.06, 0.5, 1.0, 2.7, 8.0, 20.0, 60.0]


def _theta_star(delta: float) -> float:
    return 1 / delta - 1 / math.expm1(delta)


def test_attention_kl_supremum_matches_the_formula():
    got = attention.kl_supremum(torch.tensor(DELTAS, dtype=torch.float64))
    for dv, g_ in zip(DELTAS, got.tolist()):
        ref = acc.kl_supremum_mpmath(dv)
        assert abs(g_ / float(ref) - 1) < 1e-13, dv
        assert float(ref) <= dv * dv / 8  # Hoeffding is an upper bound ...
    assert float(acc.kl_supremum_mpmath(0.0)) == 0.0
    with pytest.raises(ValueError, match="Delta"):
        acc.kl_supremum_mpmath(-1.0)
    # ... tight at small Delta, linear at large Delta: K ~ Delta - 1 - log Delta
    assert abs(float(acc.kl_supremum_mpmath(1e-3)) / (1e-6 / 8) - 1) < 1e-6
    for dv in (8.0, 20.0, 60.0):
        assert abs(float(acc.kl_supremum_mpmath(dv)) - (dv - 1 - math.log(dv))) < 3 * dv * math.exp(-dv) + 1e-15


def test_kl_supremum_is_the_max_over_theta():
    theta = np.linspace(0.0, 1.0, 200_001)
    for dv in (0.5, 1.0, 2.7, 8.0, 20.0):
        F = np.log1p(theta * np.expm1(dv)) - theta * dv
        sup = float(acc.kl_supremum_mpmath(dv))
        assert F.max() <= sup * (1 + 1e-12)
        assert F.max() >= sup * (1 - 1e-8)
        assert abs(theta[F.argmax()] - _theta_star(dv)) < 1e-4
        assert 0 < _theta_star(dv) < 0.5


@pytest.mark.parametrize("qn, kn, d, tau, k", [(2.0, 2.0, 3, 1.0, 1.0), (3.0, 1.0, 4, 2.0, 0.5), (1.2, 1.1, 2, 0.25, 1.0)])
def test_two_point_rows_attain_the_kl_supremum(qn, kn, d, tau, k):
    kf = k
    delta = math.sqrt(qn**2 + kf) * (math.sqrt(kn**2 + kf) - math.sqrt(kf)) / tau
    q, keys = acc.worst_case_row(qn, kn, d=d, temperature=tau, k=k, p1=_theta_star(delta))
    res = acc.softmax_gap_bounds(q, keys, tau, k=k)
    assert float(res.delta) == pytest.approx(delta, rel=1e-12)
    sup = float(attention.kl_supremum(res.delta))
    assert abs(float(res.kl) / sup - 1) < 1e-9
    # any other weight on the far key gives less
    for factor in (0.8, 1.25):
        q2, k2 = acc.worst_case_row(qn, kn, d=d, temperature=tau, k=k, p1=_theta_star(delta) * factor)
        assert float(acc.softmax_gap_bounds(q2, k2, tau, k=k).kl) < sup * (1 - 1e-6)


def test_random_rows_stay_below_the_kl_supremum():
    q, keys = _points(64, 8, 3.0, 1.0, 14), _points(32, 8, 3.0, 1.0, 15)
    factors = torch.exp(torch.randn(32, 1, generator=torch.Generator().manual_seed(16), dtype=torch.float64))
    keys = lorentz.lift(keys[:, 1:] * factors)
    res = acc.softmax_gap_bounds(q, keys, temperature=2.0)
    sup = attention.kl_supremum(res.delta)
    assert bool((res.kl <= sup * (1 + 1e-12)).all())
    assert bool((sup <= res.kl_bound * (1 + 1e-15)).all())


def test_euclidean_limit_numerically():
    """k -> inf with fixed spatial parts: q_t kappa_t - k -> (|q_s|^2 + |kappa_s|^2)/2, at the rate of step constant_rate."""
    rng = np.random.default_rng(3)
    qs, ks = rng.normal(size=5), rng.normal(size=5)
    a2, b2 = float(qs @ qs), float(ks @ ks)
    with mpmath.workdps(60):
        for kv in (1e2, 1e4, 1e6):
            kk = mpmath.mpf(kv)
            qt, kt = mpmath.sqrt(mpmath.mpf(a2) + kk), mpmath.sqrt(mpmath.mpf(b2) + kk)
            gap = qt * kt - kk - (a2 + b2) / 2
            assert abs(gap * kk / (-(a2 - b2) ** 2 / 8) - 1) < 3 * (a2 + b2) / kv
            sq = mpmath.fsum((mpmath.mpf(u) - mpmath.mpf(v)) ** 2 for u, v in zip(qs, ks)) - (qt - kt) ** 2
            assert abs(sq - float(((qs - ks) ** 2).sum())) < 10 / kv
    der = hs.euclidean_limit()
    assert der.step("constant_limit").point == sp.oo


def test_lorentzian_weights_without_softmax_grow_with_distance(kk):
    q, keys = _points(5, 6, 1.0, kk, 17), _points(9, 6, 1.0, kk, 18)
    inner = lorentz.pairwise_inner(q, keys)
    sq = lorentz.pairwise_sqdist(q, keys, k=kk)
    assert bool((inner <= -kk * (1 - 1e-12)).all())
    w = inner / inner.sum(-1, keepdim=True)
    assert torch.allclose(w, (kk + sq / 2) / (kk + sq / 2).sum(-1, keepdim=True), rtol=1e-10)
    # the farthest key gets the largest normalised weight, the nearest the largest softmax weight
    assert torch.equal(w.argmax(-1), sq.argmax(-1))
    assert torch.equal(torch.softmax(inner, -1).argmax(-1), sq.argmin(-1))


def test_printed_summaries_hold_no_tex():
    # the summaries are printed in the notebooks (plain text on the site): maths in Unicode, no $ or backslash
    for name, d in hs.derivations().items():
        line = d.check(d=None).summary()
        assert "$" not in line and "\\" not in line, (name, line)
    assert hs.derivations()["kl_supremum"].check(d=None).summary().startswith(
        "The exact KL supremum: sup KL(P‖S) = log((e^Δ − 1)/Δ) − 1 + Δ/(e^Δ − 1) ≤ Δ²/8: all"
    )


def test_every_derivation_function_is_registered():
    """A derivation left out of ``symbolic.derivations()`` would never be verified: every function returning one is listed."""
    import inspect

    from hypviz.symbolic import geometry as symbolic_geometry
    from hypviz.symbolic import softmax_identities as symbolic_softmax

    registered = set(hs.derivations())
    missing = []
    for module in (symbolic_geometry, symbolic_softmax):
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            returns = str(inspect.signature(fn).return_annotation)
            if fn.__module__ == module.__name__ and not name.startswith("_") and "Derivation" in returns:
                if not any(key == name or key.startswith(name + "_") for key in registered):
                    missing.append(f"{module.__name__}.{name}")
    assert not missing, f"register these in hypviz.symbolic.derivations(): {missing}"
