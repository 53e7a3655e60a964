#!/usr/bin/env bash
# The main job: set up (.venv with the CPU torch first, then hypviz[lab]: everything the notebooks
# import, the documentation tools and JupyterLab), build the documentation site from the notebooks'
# committed outputs into build/html/ (Sphinx + MyST-NB, offline; the test command's nbval run checks
# those outputs), and write the demo attention report to build/demo/.
#   bash scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh lab
venv="${HYPVIZ_VENV:-.venv}"
export MPLBACKEND=Agg PYTHONHASHSEED=0
"$venv/bin/python" scripts/site.py --out build/html
"$venv/bin/hypviz" demo --out build/demo --force --no-progress
echo "hypviz: open build/html/index.html (the notebooks, API and CLI reference) and build/demo/report.html (an attention report)"
echo "hypviz: re-execute the notebooks after changing the package: $venv/bin/python scripts/notebooks.py execute"
echo "hypviz: for interactive use: $venv/bin/jupyter lab notebooks/"
