"""The attention API's seeds, feature counts, ``k`` and ``topk``: one line naming the argument and its range.

Seeds go through :func:`hypviz.base.validate.seed` (0 to 2**64 - 1, what ``torch.Generator.manual_seed``
takes: never torch's "Overflow when unpacking long long"); the number of random features has one maximum,
:data:`hypviz.base.validate.FEATURES_MAX`, which the CLI's ``--features`` reads; ``compare_maps`` checks ``k``
even without ``values``; ``topk`` is bounded by :data:`hypviz.attention.comparison.result.TOPK_MAX`.
"""

from __future__ import annotations

import argparse
import math
import re

import pytest
import torch

from hypviz import attention as att
from hypviz.base import validate
from hypviz.cli import command
from hypviz.lorentz import lift

F64 = torch.float64
SEED_RANGE = "must be an integer from 0 to 18446744073709551615 = 2**64 - 1, got "


@pytest.fixture
def pts():
    return lift(torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=F64), k=1.0)


def _one_line(exc: pytest.ExceptionInfo, pattern: str) -> None:
    text = str(exc.value)
    assert "\n" not in text and "Overflow" not in text and re.search(pattern, text), text


@pytest.mark.parametrize("value", [2**64, -1, 2**70, 1.5, True, "3"])
@pytest.mark.parametrize("call", ["compare seed", "compare rf_seed", "attention_map seed", "distance_rf_map seed"])
def test_seeds_outside_0_to_2_64_are_one_line_naming_the_argument(pts, value, call):
    fn, name = call.split()
    with pytest.raises(ValueError) as exc:
        if fn == "compare":
            att.compare(pts, pts, "distance", "distance_rf", k=1.0, **{name: value})
        elif fn == "attention_map":
            att.attention_map(pts, pts, "distance_rf", k=1.0, seed=value)
        else:
            att.approx.random_features.distance_rf_map(pts, pts, k=1.0, temperature=1.0, seed=value)
    _one_line(exc, "^" + re.escape(name + " " + SEED_RANGE))


def test_the_largest_seed_is_accepted(pts):
    a = att.attention_map(pts, pts, "distance_rf", k=1.0, seed=validate.SEED_MAX)
    b = att.attention_map(pts, pts, "distance_rf", k=1.0, seed=validate.SEED_MAX)
    assert torch.equal(a, b) and bool(torch.isfinite(a).all())
    c = att.compare(pts, pts, "distance", "distance_rf", k=1.0, seed=validate.SEED_MAX, rows=3)
    assert c.n_queries == 3


def test_one_maximum_of_random_features_for_the_api_and_the_cli(pts):
    assert command.FEATURES_MAX is validate.FEATURES_MAX
    top = validate.FEATURES_MAX
    for call in (lambda f: att.attention_map(pts, pts, "distance_rf", k=1.0, features=f),
                 lambda f: att.compare(pts, pts, "distance", "distance_rf", k=1.0, features=f),
                 lambda f: att.approx.random_features.random_directions(f, 4)):
        for bad in (top + 1, 10**30, 0):
            with pytest.raises(ValueError) as exc:
                call(bad)
            _one_line(exc, rf"^features must be an integer from 1 to {top} = 2\*\*22 ")
    assert command._features(str(top)) == top  # the CLI's --features takes the same range
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected an integer from 1 to 2\*\*22 = 4194304 "):
        command._features(str(top + 1))


@pytest.mark.parametrize("k", [-1, 0, math.nan, math.inf, -math.inf, True])
def test_compare_maps_checks_k_even_without_values(k):
    p = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=F64), -1)
    with pytest.raises(ValueError) as exc:
        att.compare_maps(p, p, k=k)
    _one_line(exc, r"^k must be a positive finite number \(the curvature parameter of hyperboloid values\), got ")


@pytest.mark.parametrize("topk", [2**70, 2**31, 0, -1, 2.0])
def test_topk_is_bounded(pts, topk):
    p = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=F64), -1)
    for call in (lambda: att.compare_maps(p, p, topk=topk), lambda: att.compare(pts, pts, "spatial", "distance", topk=topk)):
        with pytest.raises(ValueError) as exc:
            call()
        _one_line(exc, r"^topk must be an integer from 1 to 2147483647, got ")
    assert att.compare_maps(p, p, topk=2**31 - 1).topk == 4  # the largest is capped at the number of keys
