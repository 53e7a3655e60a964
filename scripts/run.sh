#!/usr/bin/env bash
# The main job: set up (.venv with the CPU torch first, then hypviz[lab]: everything the notebooks
# import, and JupyterLab), execute every notebook top to bottom and render the results as an offline
# HTML site under build/html/, and write the demo attention report to build/demo/.
#   bash scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh lab
venv="${HYPVIZ_VENV:-.venv}"
export MPLBACKEND=Agg PYTHONHASHSEED=0
"$venv/bin/python" scripts/notebooks.py render --out build/html
"$venv/bin/hypviz" demo --out build/demo --force --no-progress
echo "hypviz: open build/html/index.html (the notebooks) and build/demo/report.html (an attention report)"
echo "hypviz: for interactive use: $venv/bin/jupyter lab notebooks/"
