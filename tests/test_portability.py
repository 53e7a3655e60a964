"""Every notebook reproduces its stored outputs under perturbed numerics.

A stored output may only hold digits that every correct run reproduces, on any CPU, thread count,
BLAS kernel or kernel-vs-process.  This is checked on the developer's own machine by running every
notebook with nbval (the same comparison, same sanitizers) in two environments, each changing the
floating-point summation order away from the default threads and kernels that ``scripts/notebooks.py
execute`` stores the outputs with:

``NOTEBOOK_ENV``     the test command's own nbval run of ``notebooks/`` (``tests/conftest.py`` sets it
(main run)           for the notebooks' kernels only): ``OMP_NUM_THREADS=1`` (reductions and matrix
                     products split differently), ``MKL_CBWR=COMPATIBLE`` (MKL's code path for any
                     x86-64 CPU), torch's AVX2 kernels instead of AVX-512, and 64 KiB row blocks in
                     ``attention.compare`` (``HYPVIZ_BLOCK_BYTES=65536``)
``default-kernels``  this file's re-run: ``ATEN_CPU_CAPABILITY=default``, torch's non-vectorised
                     kernels (no AVX), which also changes the oneDNN/MKL paths taken for matrix
                     products, at the default threads

These replace four passes over the notebooks (nbval at the defaults, then one thread; default kernels;
the compatible BLAS path with AVX2 and small blocks, one process each).  The default pass checked
nothing the others do not: a stale or wrong output fails in any environment.  The main run now joins
the one-thread and the compatible-BLAS changes, each of which changes the summation order of the
results it touches -- one how the work is split between threads, the other the kernels and blocks
each thread runs.  Neither undoes the other, so a printed digit that depends on either order moves
under the pair as it moved under that change alone (barring the same coincidence of roundings by
which a single run could miss it).

The re-run starts as soon as this file's first test asks for it (the test command puts this file
first, ``tests/conftest.py``), so it shares the CPUs with the rest of the suite instead of starting
after it.  Deselect with ``-m "not portability"`` for a quick local run; CI runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

PERTURBATIONS = {
    "default-kernels": {"ATEN_CPU_CAPABILITY": "default"},
}
TIMEOUT_S = 1500

pytestmark = pytest.mark.portability


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Start one nbval run per perturbation, all at once; yield {name: (Popen, log path, log file)}."""
    procs = {}
    for name, extra in PERTURBATIONS.items():
        log = tmp_path_factory.mktemp(name) / "nbval.log"
        # a plain run, not a worker, at the default threads and kernels but for the perturbation
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_") and k not in conftest.NOTEBOOK_ENV}
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


def test_the_main_runs_kernels_get_the_notebook_environment(tmp_path):
    """The test command's nbval kernels see NOTEBOOK_ENV (tests/conftest.py's plugin, as loaded by ``-p conftest``);
    a test that runs after a notebook in the same process does not."""
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    source = "import os\nprint(' '.join(f'{k}={os.environ.get(k)}' for k in %r))" % sorted(conftest.NOTEBOOK_ENV)
    expected = " ".join(f"{k}={conftest.NOTEBOOK_ENV[k]}" for k in sorted(conftest.NOTEBOOK_ENV)) + "\n"
    nb.cells = [nbformat.v4.new_code_cell(source, execution_count=1,
                                          outputs=[nbformat.v4.new_output("stream", name="stdout", text=expected)])]
    nbformat.write(nb, tmp_path / "a_env.ipynb")
    (tmp_path / "test_b_after.py").write_text(
        "import os\n\ndef test_the_worker_environment_is_restored():\n"
        "    assert all(os.environ.get(k) is None for k in %r), dict(os.environ)\n" % sorted(conftest.NOTEBOOK_ENV))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_") and k not in conftest.NOTEBOOK_ENV}
    env.update(PYTHONPATH=str(ROOT / "tests"), PYTHONHASHSEED="0", MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "--nbval", "--nbval-current-env",
         "-o", "addopts=", "--rootdir", str(tmp_path), "a_env.ipynb", "test_b_after.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
