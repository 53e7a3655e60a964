"""Every notebook reproduces its stored outputs under perturbed numerics.

A stored output may only hold digits that every correct run reproduces, on any CPU, thread count,
BLAS kernel or kernel-vs-process.  This is checked on the developer's own machine by re-running
every notebook with nbval (the same comparison as the main suite, same sanitizers) under
environments that change the floating-point summation order:

``one-thread``         ``OMP_NUM_THREADS=1``: reductions and matrix products split differently
``default-kernels``    ``ATEN_CPU_CAPABILITY=default``: torch's non-vectorised kernels (no AVX),
                       which also changes the oneDNN/MKL paths taken for matrix products
``blas-compatible``    ``MKL_CBWR=COMPATIBLE`` (MKL's code path for any x86-64 CPU), torch's AVX2
                       kernels instead of AVX-512, and 64 KiB row blocks in ``attention.compare``

The three runs start together (one subprocess each) and each test waits for its own.  The test
command puts this file first (``tests/conftest.py``), so that the three runs share the CPUs with the
rest of the suite instead of starting after it.  Deselect with ``-m "not portability"`` for a quick
local run; CI runs them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

PERTURBATIONS = {
    "one-thread": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "default-kernels": {"ATEN_CPU_CAPABILITY": "default"},
    "blas-compatible": {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2", "HYPVIZ_BLOCK_BYTES": "65536"},
}
TIMEOUT_S = 1500

pytestmark = pytest.mark.portability


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Start one nbval run per perturbation, all at once; yield {name: Popen} (with log paths)."""
    procs = {}
    for name, extra in PERTURBATIONS.items():
        log = tmp_path_factory.mktemp(name) / "nbval.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}  # a plain run, not a worker
        env.update(extra, PYTHONHASHSEED="0", MPLBACKEND="Agg")
        cmd = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
            "--nbval-sanitize-with", str(ROOT / "notebooks" / "sanitize.cfg"), *map(str, NOTEBOOKS),
        ]
        fh = open(log, "w")
        procs[name] = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT), log, fh)
    yield procs
    for proc, _, fh in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        fh.close()


def test_there_are_notebooks_to_check():
    assert len(NOTEBOOKS) >= 7, NOTEBOOKS


@pytest.mark.parametrize("name", list(PERTURBATIONS))
def test_notebooks_reproduce_their_outputs(runs, name):
    proc, log, fh = runs[name]
    start = time.monotonic()
    try:
        code = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{name}: nbval did not finish in {TIMEOUT_S} s")
    fh.flush()
    text = log.read_text(errors="replace")
    settings = " ".join(f"{k}={v}" for k, v in PERTURBATIONS[name].items())
    assert code == 0, (
        f"notebook outputs differ under {settings} (waited {time.monotonic() - start:.0f} s); "
        f"the cells below print digits that depend on the machine:\n{text[-12000:]}"
    )
    assert " passed" in text and "failed" not in text.splitlines()[-1], text[-2000:]
