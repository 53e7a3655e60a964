"""Shared fixtures: the suite's point sets come from :mod:`hypviz.data`, in one place.

``points(n, d, r, *, k=1.0, seed=0, lead=(), dtype=torch.float64)`` is
:func:`hypviz.data.lifted_gaussian` (Gaussian spatial parts of mean norm ``r``, lifted onto
``<x, x>_L = -k``) with batch shape ``(*lead, n)``; float32 points are re-lifted in float32 so
that they lie on the float32 hyperboloid.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from hypviz import data, lorentz


def lifted_points(n: int, d: int, r: float, *, k: float = 1.0, seed: int = 0, lead: tuple[int, ...] = (), dtype=torch.float64):
    x = data.lifted_gaussian((*lead, n), d, r, k=k, seed=seed)
    return x if dtype == torch.float64 else lorentz.lift(x[..., 1:].to(dtype), k=k)


@pytest.fixture(scope="session")
def points():
    """The suite's point generator (:func:`lifted_points`)."""
    return lifted_points


# --------------------------------------------------------------------------- #
# the test command's order and tiers (bash scripts/test.sh; CONTRIBUTING.md, "Tests")
# --------------------------------------------------------------------------- #
#: Files that run first, in this order.  ``bash scripts/test.sh`` hands whole files to its workers
#: (pytest-xdist, ``--dist loadfile --no-loadscope-reorder``) in the order of the collection, so
#: the longest go first and the short ones fill the gaps at the end.  The perturbed notebook runs
#: (``test_portability``) lead: its process then shares the CPUs with everything else
#: instead of starting after it.  The site's tests come early, the browser's after them, so that
#: the one build of the site (``run_folder``) is made before the browser asks for it.  The rest
#: is by measured time, longest first; files not named follow in the collection's order.
FIRST = (
    "tests/test_portability.py",
    "tests/test_site.py",
    "tests/test_browser.py",
    "notebooks/10_linear_distance_attention.ipynb",
    "notebooks/11_topk_tail.ipynb",
    "notebooks/08_where_it_breaks.ipynb",
    "tests/test_hostile_paths.py",
    "tests/test_benchmarks.py",
    "notebooks/05_attention_maps.ipynb",
    "notebooks/04_small_norm_taylor.ipynb",
    "tests/test_symbolic.py",
    "tests/test_cli_faults.py",
    "tests/test_cli.py",
    "notebooks/",
    "tests/test_sampled_compare.py",
    "tests/test_gpu_script.py",
    "tests/test_plots_manifold.py",
    "tests/test_plots_explorables.py",
    "tests/test_plots_attention.py",
)

#: The quick tier (``-m quick``): the files that together run in well under 2 minutes on 2 cores
#: and cover every layer's unit tests; ``-m "not quick"`` is the rest.
QUICK = frozenset(f"tests/{name}.py" for name in (
    "test_bounds", "test_data", "test_gradients", "test_identities", "test_kinds", "test_layering",
    "test_lorentz", "test_lorentz_oracle", "test_packaging", "test_random_features", "test_toymodel",
    "test_verdict", "test_cli_inputs", "test_compare_measures", "test_readme", "test_notebook_pipeline",
    "test_test_command",
))

#: The packages whose docstrings' ``Examples`` the test command runs (``--doctest-modules`` on these folders
#: in ``scripts/test.sh``): those of ``tests/test_examples_present.py``, whose public functions and classes
#: each have one, and ``base``, where some of their public names are defined.  Their doctests are in the quick tier.
DOCTESTED = ("hypviz/base/", "hypviz/lorentz/", "hypviz/attention/", "hypviz/capture/", "hypviz/symbolic/")


def _path(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _rank(path: str) -> int:
    return next((i for i, first in enumerate(FIRST) if path == first or (first.endswith("/") and path.startswith(first))),
                len(FIRST))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the quick tier and put the long files first (a stable sort: each file keeps its own order)."""
    for item in items:
        path = _path(item)
        if path in QUICK or path.startswith(DOCTESTED):
            item.add_marker(pytest.mark.quick)
    items.sort(key=lambda item: _rank(_path(item)))


# --------------------------------------------------------------------------- #
# the environment of the test command's notebook kernels (nbval)
# --------------------------------------------------------------------------- #
#: What the kernels of this run's nbval items (``notebooks/NN_*.ipynb``) get in their environment: one
#: thread (reductions and matrix products split differently from the default threads), MKL's
#: code path for any x86-64 CPU, torch's AVX2 kernels instead of AVX-512 and 64 KiB row blocks in
#: ``attention.compare``.  Each changes the summation order of the results it touches, so the
#: main nbval run is itself a perturbed run: a stored digit must survive all of these at once.
#: ``tests/test_portability.py`` re-runs the notebooks once more under torch's non-vectorised
#: kernels and the default threads.  The workers' own environment (the unit tests') is unchanged.
NOTEBOOK_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE",
                "ATEN_CPU_CAPABILITY": "avx2", "HYPVIZ_BLOCK_BYTES": "65536"}


class NotebookEnvironment:
    """Sets :data:`NOTEBOOK_ENV` while a notebook item is set up (nbval starts the notebook's kernel
    then, with a copy of ``os.environ``), and restores the worker's environment right after.

    A plugin, not a hook of this file: this file's hooks reach only the items under ``tests/``."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        if item.path.suffix != ".ipynb":
            yield
            return
        saved = {name: os.environ.get(name) for name in NOTEBOOK_ENV}
        os.environ.update(NOTEBOOK_ENV)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("hypviz-notebook-environment"):
        config.pluginmanager.register(NotebookEnvironment(), "hypviz-notebook-environment")


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by every process of this test run: with pytest-xdist, the folder above the
    workers' own temporary folders (``.../pytest-N`` holding ``popen-gw0``, ``popen-gw1``, ...);
    without it, this process's own.  pytest removes it with its other old temporary folders."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

