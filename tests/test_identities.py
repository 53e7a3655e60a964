"""The six identities of the site's page (docs/identities.md), each evaluated numerically.

The page states them; their derivations are in notebooks 02 and 04 (``hypviz.symbolic``). Here
every displayed equation is evaluated in float64 on random points of several hyperboloids,
against an independent high-precision (mpmath) evaluation where the float64 form cancels, and the
page is checked to hold exactly six labelled identities, each naming the derivation that proves it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import mpmath
import pytest
import torch

from hypviz import lorentz as L
from hypviz import symbolic

PAGE = Path(__file__).resolve().parent.parent / "docs" / "identities.md"


def pair(k: float, seed: int, d: int = 5, r: float = 1.5):
    g = torch.Generator().manual_seed(seed)
    xs, ys = (torch.randn(64, d, generator=g, dtype=torch.float64) * r / math.sqrt(d) for _ in range(2))
    return L.lift(xs, k=k), L.lift(ys, k=k)


def mink(x, y):
    return -x[..., 0] * y[..., 0] + (x[..., 1:] * y[..., 1:]).sum(-1)


@pytest.mark.parametrize("k", [0.25, 1.0, 7.0])
def test_identities_1_to_4(k):
    x, y = pair(k, 1)
    sq = mink(x - y, x - y)  # the squared Lorentzian norm of the difference, by definition
    assert torch.allclose(sq, -2 * k - 2 * mink(x, y), rtol=1e-12, atol=1e-12)  # identity 1
    dist = math.sqrt(k) * torch.arccosh(-mink(x, y) / k)
    assert torch.allclose(L.dist(x, y, k=k), dist, rtol=1e-9, atol=1e-9)  # identity 2, first part
    assert torch.allclose(sq, 4 * k * torch.sinh(dist / (2 * math.sqrt(k))) ** 2, rtol=1e-9, atol=1e-12)
    assert torch.allclose(sq, ((x[:, 1:] - y[:, 1:]) ** 2).sum(-1) - (x[:, 0] - y[:, 0]) ** 2, rtol=1e-12, atol=1e-12)  # 3
    q, kk = x, y
    lhs = (q[:, 1:] * kk[:, 1:]).sum(-1)
    assert torch.allclose(lhs, -0.5 * sq + (q[:, 0] * kk[:, 0] - k), rtol=1e-12, atol=1e-12)  # identity 4


@pytest.mark.parametrize("k,tau", [(1.0, 2.0), (5.0, 0.7)])
def test_identity_5(k, tau):
    q, _ = pair(k, 2)
    kk, _ = pair(k, 3)
    inner = -q[:, :1] * kk[:, 0] + q[:, 1:] @ kk[:, 1:].T
    sq = -2 * k - 2 * inner
    assert torch.allclose(torch.softmax(inner / tau, -1), torch.softmax(-0.5 * sq / tau, -1), rtol=1e-12, atol=1e-15)


def test_identity_6_the_euclidean_limit():
    g = torch.Generator().manual_seed(4)
    qs, ks = torch.randn(2, 6, generator=g, dtype=torch.float64)
    qs, ks = [mpmath.matrix(v.tolist()) for v in (qs, ks)]
    nq, nk = (sum(v[i] ** 2 for i in range(6)) for v in (qs, ks))
    flat_const = (nq + nk) / 2
    flat_sq = sum((qs[i] - ks[i]) ** 2 for i in range(6))
    with mpmath.workdps(60):
        errs = []
        for k in (1e2, 1e4, 1e6):
            qt, kt = mpmath.sqrt(nq + k), mpmath.sqrt(nk + k)
            const = qt * kt - k
            sq = flat_sq - (qt - kt) ** 2  # identity 3
            errs.append((abs(const - flat_const), abs(-sq / 2 + flat_sq / 2)))
        # both converge, like 1/k: a hundredfold larger k, a hundredfold smaller error
        for (c1, s1), (c2, s2) in zip(errs, errs[1:]):
            assert 80 < c1 / c2 < 120 and 80 < s1 / s2 < 120


def test_the_page_states_six_identities_each_with_its_derivation():
    text = PAGE.read_text()
    labels = re.findall(r"^\$\$ \((identity-\d)\)$", text, flags=re.M)
    assert labels == [f"identity-{i}" for i in range(1, 7)]
    for i, name in enumerate(
        ["squared_distance", "geodesic_distance", "decomposition", "query_constant", "lorentz_attention", "euclidean_limit"], 1
    ):
        assert f"`symbolic.{name}`" in text
        assert getattr(symbolic, name)().title.startswith(f"Identity {i}:")
