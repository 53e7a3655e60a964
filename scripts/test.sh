#!/usr/bin/env bash
# The whole test suite: unit + property + oracle tests (tests/) and nbval over notebooks/, spread
# over the machine's CPUs by pytest-xdist.
#   bash scripts/test.sh [extra pytest arguments]      e.g. -m quick (the edit-test loop's tier)
# Whole files go to the workers (--dist loadfile: a notebook's cells run in order in one kernel, a
# module's fixtures are made once), in the order tests/conftest.py gives them (the perturbed notebook
# re-run and the longest files first: --no-loadscope-reorder keeps it).  nbval's kernels run under
# NOTEBOOK_ENV (tests/conftest.py: one thread, MKL's compatible path, AVX2 kernels, small row blocks),
# so this run of the notebooks is itself one of the two perturbed environments (tests/test_portability.py).
# The site's tests read build/html when it is the main job's build of the sources as they are now
# (scripts/site.py's stamp), and build it once per run otherwise.  HYPVIZ_TEST_WORKERS sets the
# number of workers (default: the CPUs this process may use; 0 runs everything in this process).
# --doctest-modules runs the docstrings' Examples in the hypviz folders named after the notebooks
# (DOCTESTED in tests/conftest.py); it reads .py files only, so it does not meet nbval's notebooks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
venv="${HYPVIZ_VENV:-.venv}"
export MPLBACKEND=Agg PYTHONHASHSEED=0
# More processes than CPUs here (the workers, the perturbed re-run, their kernels): torch's OpenMP threads
# sleep when idle instead of spinning (no effect on any result, only on the CPU time spent waiting).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
workers="${HYPVIZ_TEST_WORKERS:-$("$venv/bin/python" -c 'import os; print(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())')}"
exec "$venv/bin/python" -m pytest tests notebooks hypviz/base hypviz/lorentz hypviz/attention hypviz/capture hypviz/symbolic \
    --doctest-modules --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg \
    -n "$workers" --dist loadfile --no-loadscope-reorder \
    -p no:cacheprovider "$@"
