"""The numerical studies over independent draws (hypviz.attention.comparison.accuracy): seed intervals, the gap study, its
prediction.

Each study is checked against a computation that does not go through it: the interval against its
textbook formula, the gap study's per-seed ratio against dense float64 maps built here from the
definitions, the prediction against the measurement where the first-order regime holds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hypviz import data
from hypviz import symbolic as hs
from hypviz.attention.comparison import accuracy as acc


# --------------------------------------------------------------------------- #
# seed_interval
# --------------------------------------------------------------------------- #
def test_seed_interval_is_the_student_t_interval_of_the_mean():
    x = np.array([0.2, 0.4, 0.3, 0.5, 0.1, 0.35])
    iv = acc.seed_interval(x)
    t975_df5 = 2.5705818356363146  # Student t, 97.5 % quantile, 5 degrees of freedom (scipy.stats.t.ppf)
    half = t975_df5 * x.std(ddof=1) / math.sqrt(6)
    assert iv.n == 6 and math.isclose(iv.mean, x.mean()) and math.isclose(iv.sd, x.std(ddof=1))
    assert math.isclose(iv.ci_low, x.mean() - half, rel_tol=1e-9) and math.isclose(iv.ci_high, x.mean() + half, rel_tol=1e-9)
    assert (iv.low, iv.high) == (0.1, 0.5)
    assert iv.fraction_within(0.15, 0.45) == pytest.approx(4 / 6)
    assert "95% CI" in iv.text() and "n = 6" in iv.text()


@pytest.mark.parametrize("df, expected", [(1, 12.706204736174694), (19, 2.0930240544083087), (39, 2.022690920036761)])
def test_t_quantile_matches_scipy_values(df, expected):
    assert acc._t_quantile(0.975, df) == pytest.approx(expected, rel=1e-9)


def test_seed_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    draws = rng.normal(1.0, 2.0, (2000, 20))
    hits = 0
    for row in draws:
        iv = acc.seed_interval(row)
        hits += iv.ci_low < 1.0 < iv.ci_high
    assert 0.93 < hits / 2000 < 0.97   # binomial sd 0.005 around 0.95


def test_printed_values_refuse_a_rounding_boundary():
    assert acc.seed_interval([0.56, 0.58, 0.57]).short(2) == "0.57 (0.55-0.59)"   # t(0.975, 2) = 4.303, sd 0.01
    with pytest.raises(ValueError, match="rounding boundary"):
        acc.seed_interval([0.125, 0.125]).short(2)      # 0.125 prints as 0.12 here and 0.13 a rounding step away


@pytest.mark.parametrize("bad, match", [([1.0], "at least 2"), ([1.0, float("nan")], "finite")])
def test_seed_interval_refuses_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        acc.seed_interval(bad)


def test_seed_interval_refuses_a_bad_confidence():
    with pytest.raises(ValueError, match="confidence must be"):
        acc.seed_interval([1.0, 2.0], confidence=1.5)


# --------------------------------------------------------------------------- #
# the prediction and the study
# --------------------------------------------------------------------------- #
def test_predicted_ratio_formula():
    assert acc.predicted_gap_ratio(1.0) == pytest.approx(1 / math.sqrt(3))
    assert acc.predicted_gap_ratio(0.0) == 1.0
    # general norms: 1 / sqrt(1 + 2 rho^2 kappa_t^2 / q_t^2), kappa_t^2 = k + (|q| / rho)^2, q_t^2 = k + |q|^2
    for qn, kn, k in [(5.0, 0.3, 1.0), (2.0, 1.0, 1.0), (1.0, 4.0, 1.0), (3.0, 3.0, 2.0), (7.0, 0.5, 0.25)]:
        rho = qn / kn
        want = 1 / math.sqrt(1 + 2 * rho**2 * (k + kn**2) / (k + qn**2))
        assert acc.predicted_gap_ratio(rho, qn, k=k) == pytest.approx(want, rel=1e-12)
    # the measured pairs: (2, 1) -> 0.488, (1, 4) -> 0.696, and 1/sqrt(3) at rho = 1 for any norm
    assert acc.predicted_gap_ratio(2.0, 2.0) == pytest.approx(1 / math.sqrt(4.2))
    assert acc.predicted_gap_ratio(0.25, 1.0) == pytest.approx(1 / math.sqrt(2.0625))
    for qn in (0.0, 1.0, 30.0):
        assert acc.predicted_gap_ratio(1.0, qn) == pytest.approx(1 / math.sqrt(3))
    np.testing.assert_allclose(acc.predicted_gap_ratio(np.array([0.5, 2.0])), [1 / math.sqrt(1.5), 1 / 3])
    assert acc.gaussian_gap_study(3.0, 3.0, n=4, m=8, d=4, seeds=2).prediction == pytest.approx(1 / math.sqrt(3))
    assert acc.gaussian_gap_study(2.0, 1.0, n=4, m=8, d=4, seeds=2).prediction == pytest.approx(1 / math.sqrt(4.2))
    with pytest.raises(ValueError, match="rho must be"):
        acc.predicted_gap_ratio(-1.0)


def test_the_derivation_gives_the_same_formula():
    der = hs.first_order_gap_ratio()
    assert der.verify().ok
    small = der.step("small_queries").rhs
    (rho,) = small.free_symbols
    assert float(small.subs(rho, 2)) == pytest.approx(acc.predicted_gap_ratio(2.0))
    general = der.step("general").rhs                             # (1 + 2 rho^2 kappa_t^2 / q_t^2)^(-1/2)
    for qn, kn in [(5.0, 0.3), (2.0, 1.0), (1.0, 4.0), (6.0, 6.0)]:
        values = {s: {"rho": qn / kn, "q_t": math.sqrt(1 + qn**2), "T2": 1 + kn**2}[s.name] for s in general.free_symbols}
        assert float(general.subs(values)) == pytest.approx(acc.predicted_gap_ratio(qn / kn, qn))
    small_keys = der.step("ratio").rhs                            # (1 + 2 rho^2 k / q_t^2)^(-1/2), k symbolic
    values = {s: {"rho": 2.0, "q_t": math.sqrt(5.0), "k": 1.0}[s.name] for s in small_keys.free_symbols}
    assert float(small_keys.subs(values)) == pytest.approx(1 / math.sqrt(1 + 8 / 5))


@pytest.mark.parametrize("qn, kn", [(2.0, 1.0), (1.0, 4.0), (4.0, 1.0), (6.0, 6.0), (0.5, 3.0)])
def test_the_general_prediction_holds_at_large_norms(qn, kn):
    # first order in the logits (tau = 800 max(1, qn kn): maps near uniform) but norms far from small, both large included
    study = acc.gaussian_gap_study(qn, kn, n=32, m=256, d=64, temperature=800.0 * max(1.0, qn * kn), seeds=10)
    assert abs(study.ratio.mean - study.prediction) < 0.01, (study.ratio.text(), study.prediction)
    small = 1 / math.sqrt(1 + 2 * (qn / kn) ** 2)
    if abs(small - study.prediction) > 0.05:  # where the small-norm formula is wrong, the measurement says so
        assert abs(study.ratio.mean - small) > 0.04


def _dense_ratio_and_top1(q, kap, tau):
    """TV(S, P) / TV(P, U) of the row means and plain top-1 agreement, from the definitions (float64, dense)."""
    s = q[:, 1:] @ kap[:, 1:].T / tau
    lor = -q[:, :1] * kap[:, 0] + q[:, 1:] @ kap[:, 1:].T       # <q, kappa>_L
    sq = -2.0 - 2.0 * lor                                       # identity 1, k = 1
    S, P = torch.softmax(s, -1), torch.softmax(-0.5 * sq / tau, -1)
    tv = 0.5 * (S - P).abs().sum(-1).mean()
    tvu = 0.5 * (P - 1.0 / kap.shape[0]).abs().sum(-1).mean()
    return float(tv / tvu), float((S.argmax(-1) == P.argmax(-1)).double().mean())


def test_gap_study_per_seed_values_match_dense_maps():
    study = acc.gaussian_gap_study(0.5, 0.5, n=32, m=48, d=16, temperature=4.0, seeds=3, first_seed=7)
    for i, s in enumerate(range(7, 10)):
        gen = torch.Generator().manual_seed(s)
        q = data.lifted_gaussian(32, 16, 0.5, seed=gen)
        kap = data.lifted_gaussian(48, 16, 0.5, seed=gen)
        ratio, top1 = _dense_ratio_and_top1(q, kap, 4.0)
        assert study.ratio.values[i] == pytest.approx(ratio, rel=1e-9)
        assert study.top1.values[i] == pytest.approx(top1)   # Gaussian logits: no ties
    assert study.setup["rho"] == 1.0 and "20 seeds" not in study.setup_text() and "3 seeds" in study.setup_text()


@pytest.mark.parametrize("rho", [0.5, 1.0, 2.0])
def test_gap_study_agrees_with_the_first_order_prediction(rho):
    # small norms (first-order regime), M = 512 keys, d = 64: the measured mean is within 0.02 of the prediction
    study = acc.gaussian_gap_study(0.05 * rho, 0.05, n=32, m=512, d=64, temperature=8.0, seeds=20)
    assert abs(study.ratio.mean - study.prediction) < 0.02, (study.ratio.text(), study.prediction)


def test_top1_agreement_falls_with_the_number_of_keys():
    few = acc.gaussian_gap_study(0.05, 0.05, n=64, m=16, d=64, seeds=20)
    many = acc.gaussian_gap_study(0.05, 0.05, n=64, m=1024, d=64, seeds=20)
    assert few.top1.ci_low > many.top1.ci_high
    # the ratio does not depend on M (to first order): both intervals hold the prediction's neighbourhood
    assert abs(few.ratio.mean - many.ratio.mean) < 0.05


@pytest.mark.parametrize("kwargs, match", [
    ({"query_norm": 0.0}, "query_norm must be"),
    ({"seeds": 1}, "seeds must be"),
    ({"temperature": -1.0}, "temperature must be"),
])
def test_gap_study_refuses_bad_arguments(kwargs, match):
    args = {"query_norm": 1.0, "key_norm": 1.0, "n": 4, "m": 4, "d": 2, "seeds": 2, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        acc.gaussian_gap_study(**args)
