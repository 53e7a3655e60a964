"""hypviz.symbolic: every derivation verifies, broken steps are caught, identities hold numerically."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from hypviz import lorentz
from hypviz import symbolic as hs

NAMES = list(hs.derivations())


@pytest.fixture(scope="module")
def built():
    return hs.derivations()


@pytest.fixture(scope="module")
def reports(built):
    return {name: der.verify() for name, der in built.items()}


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
    assert kinds == set(hs.KINDS)


# --------------------------------------------------------------------------- #
# k = 1 reproduces the thread's formulas exactly
# --------------------------------------------------------------------------- #
def test_thread_formulas_at_k1():
    der = hs.thread_approximation(1)
    ri, rj = sp.Symbol("i_norm", nonnegative=True), sp.Symbol("j_norm", nonnegative=True)
    dot = sp.Symbol("ij_dot", real=True)
    inner, sq = sp.Symbol("ij_inner"), sp.Symbol("ij_sqdist")
    rhs = [st.rhs for st in der.steps]
    assert sp.expand(rhs[1] - (-2 - 2 * inner)) == 0  # |i - j|^2_L = -2 - 2<i, j>_L
    assert sp.expand(rhs[2] - (-sq / 2 - 1)) == 0  # <i, j>_L = -1/2 |i - j|^2_L - 1
    assert sp.expand(rhs[4] - (1 + ri**2 / 2)) == 0  # sqrt(|i_s|^2 + 1) ~ 1 + |i_s|^2 / 2
    assert sp.expand(rhs[5] - (-(1 + (ri**2 + rj**2) / 2) + dot)) == 0
    assert der.verify().ok


def test_general_k_reduces_to_k1():
    k = sp.Symbol("k", positive=True)
    general, one = hs.thread_approximation(), hs.thread_approximation(1)
    for a, b in zip(general.steps, one.steps):
        assert sp.simplify(sp.sympify(a.rhs).subs(k, 1) - b.rhs) == 0


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
    good = hs.Step((x + y) ** 2, x**2 + 2 * x * y + y**2, "binomial")
    return hs.Derivation("test", [good, broken, good])


@pytest.mark.parametrize(
    "broken",
    [
        hs.Step((x + y) ** 2, x**2 + y**2, "forgot the cross term"),
        hs.Step(sp.sqrt(r**2 + k), sp.sqrt(k), "dropped the r^2 term", kind="series", var=r, order=4),
        hs.Step(sp.sin(x) / x, 0, "wrong limit", kind="limit", var=x, point=0),
        hs.Step(x * y, (x**2 + y**2) / 2, "AM-GM with a wrong certificate", kind="bound", certificate=(x + y) ** 2 / 2),
        hs.Step(x - y, 0, "certificate of unknown sign", kind="bound", certificate=y - x),
        hs.Step(sp.exp(x + y), sp.exp(x) * sp.exp(y), "claims a difference that is not there", kind="nonzero", witness={x: 1, y: 2}),
        hs.Step(x, y, "a failing custom check", kind="check", check=lambda: (False, "nope")),
        hs.Step(x, y, "a check that raises", kind="check", check=lambda: 1 / 0),
    ],
    ids=["simplify", "series", "limit", "bound-cert", "bound-sign", "nonzero", "check", "check-raises"],
)
def test_broken_step_is_reported(broken):
    der = _three(broken)
    report = der.verify()
    assert not report.ok
    assert report.first_failure.index == 2
    assert [res.ok for res in report.results] == [True, False, True]
    assert "FAILED at step 2 of 3" in str(report)
    with pytest.raises(hs.DerivationError, match="step 2"):
        der.check()


def test_verify_all_raises_on_failure(monkeypatch):
    bad = _three(hs.Step(x, y, "wrong"))
    monkeypatch.setattr(hs, "derivations", lambda *a, **kw: {"bad": bad})
    with pytest.raises(hs.DerivationError, match="FAILED at step 2"):
        hs.verify_all()
    assert not hs.verify_all(raise_on_failure=False).ok


def test_coordinate_recheck_catches_a_wrong_reduction():
    """A step true for the norm symbols but whose coordinate form is wrong fails on the re-check."""
    pair = hs._Pair("x", "y", k)
    defs = pair.definitions()
    wrong = [
        hs.Definition(df.symbol, df.expr, (lambda d: sum((a + b) ** 2 for a, b in zip(*pair.comps(d)))))
        if df.symbol == pair.es
        else df
        for df in defs
    ]
    step = hs.Step(pair.es, pair.ra**2 + pair.rb**2 - 2 * pair.c, "bilinearity")
    good = hs.Derivation("ok", [step], defs, coords=pair.coords)
    bad = hs.Derivation("bad", [step], wrong, coords=pair.coords)
    assert good.verify().ok
    rep = bad.verify()
    assert not rep.ok and "coordinates" in rep.first_failure.components
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
        for i, st in enumerate(der.steps, start=1):
            if st.kind != "simplify" or st.given or not st.expand:
                continue
            lhs, rhs = der.evaluate(i, values)
            assert np.allclose(lhs, rhs, rtol=1e-12, atol=1e-12), (name, i, lhs, rhs)
            n_checked += 1
        assert n_checked >= 2


@pytest.fixture(params=[0.5, 1.0, 2.3], ids=lambda v: f"k={v}")
def kk(request):
    return request.param


def _points(n, d, scale, k, seed):
    g = torch.Generator().manual_seed(seed)
    return lorentz.lift(torch.randn(n, d, generator=g, dtype=torch.float64) * scale, k)


def test_identities_1_to_4_with_lorentz(kk):
    xp, yp = _points(50, 5, 1.3, kk, 0), _points(50, 5, 1.3, kk, 1)
    xt, yt, xs, ys = xp[:, 0], yp[:, 0], xp[:, 1:], yp[:, 1:]
    inner = lorentz.inner(xp, yp)
    sq = lorentz.sqdist(xp, yp, kk)
    assert torch.allclose(lorentz.inner(xp, xp), torch.full_like(xt, -kk), atol=1e-12)  # on the hyperboloid
    assert torch.allclose(sq, -2 * kk - 2 * inner, rtol=1e-10)  # identity 1
    dist = lorentz.dist(xp, yp, kk)
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
    yp = lorentz.lift(xp[:, 1:] @ rot, kk)  # same spatial norms
    es = ((xp[:, 1:] - yp[:, 1:]) ** 2).sum(-1)
    assert torch.allclose(lorentz.sqdist(xp, yp, kk), es, rtol=1e-10)


def test_approximation_error_is_fourth_order(kk):
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(3, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    lead = (a.dot(a) - b.dot(b)) ** 2 / (4 * kk)
    deviation = []
    for eps in (1e-1, 1e-2):
        xp, yp = lorentz.lift(eps * a, kk), lorentz.lift(eps * b, kk)
        err = ((xp[1:] - yp[1:]) ** 2).sum() - lorentz.sqdist(xp, yp, kk)
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
    distance = -0.5 * lorentz.pairwise_sqdist(q, keys, kk) / tau
    bias = q[:, :1] * keys[:, 0][None, :] / tau
    lorentzian = lorentz.pairwise_inner(q, keys) / tau
    sm = lambda z: torch.softmax(z, dim=-1)  # noqa: E731
    assert torch.allclose(sm(spatial), sm(distance + bias), atol=1e-13)  # identity 4 in a softmax
    assert not torch.allclose(sm(spatial), sm(distance), atol=1e-6)  # the per-key bias does not cancel
    assert torch.allclose(sm(lorentzian), sm(distance), atol=1e-13)  # identity 5
    assert torch.allclose(sm(spatial + 3.7), sm(spatial), atol=1e-14)  # per-query shift invariance


def test_kl_identity_numerically():
    q, keys = _points(5, 6, 1.5, 1.0, 8), _points(7, 6, 1.5, 1.0, 9)
    res = hs.softmax_gap_bounds(q, keys, tau=2.0, k=1.0)
    p = torch.softmax(-0.5 * lorentz.pairwise_sqdist(q, keys) / 2.0, dim=-1)
    b = q[:, :1] * keys[:, 0][None, :] / 2.0
    kl = torch.log((p * b.exp()).sum(-1)) - (p * b).sum(-1)
    assert torch.allclose(res.kl, kl, rtol=1e-9, atol=1e-15)
