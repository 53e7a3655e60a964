#!/usr/bin/env bash
# The main job: set up, execute every notebook top to bottom and render the results
# as HTML pages under build/html/ (open build/html/index.html in a browser).
#   bash scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh lab
venv="${HYPVIZ_VENV:-.venv}"
export MPLBACKEND=Agg PYTHONHASHSEED=0
"$venv/bin/python" scripts/notebooks.py render --out build/html
echo "hypviz: open build/html/index.html in a browser (or: $venv/bin/jupyter lab notebooks/)"
