"""Shared fixtures: the suite's point sets come from :mod:`hypviz.data`, in one place.

``points(n, d, r, *, k=1.0, seed=0, lead=(), dtype=torch.float64)`` is
:func:`hypviz.data.lifted_gaussian` (Gaussian spatial parts of mean norm ``r``, lifted onto
``<x, x>_L = -k``) with batch shape ``(*lead, n)``; float32 points are re-lifted in float32 so
that they lie on the float32 hyperboloid.
"""

from __future__ import annotations

import pytest
import torch

from hypviz import data

from hypviz import lorentz


def lifted_points(n: int, d: int, r: float, *, k: float = 1.0, seed: int = 0, lead: tuple[int, ...] = (), dtype=torch.float64):
    x = data.lifted_gaussian((*lead, n), d, r, k=k, seed=seed)
    return x if dtype == torch.float64 else lorentz.lift(x[..., 1:].to(dtype), k)


@pytest.fixture(scope="session")
def points():
    """The suite's point generator (:func:`lifted_points`)."""
    return lifted_points
