#!/usr/bin/env bash
# The whole test suite: unit + property + oracle tests (tests/) and nbval over notebooks/.
#   bash scripts/test.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
venv="${HYPVIZ_VENV:-.venv}"
export MPLBACKEND=Agg PYTHONHASHSEED=0
exec "$venv/bin/python" -m pytest tests notebooks \
    --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg \
    -p no:cacheprovider "$@"
