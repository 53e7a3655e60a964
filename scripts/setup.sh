#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install hypviz into it.
#   bash scripts/setup.sh [EXTRAS]      e.g. EXTRAS=test or EXTRAS=lab (default: test)
# The CPU build of torch is installed first, pinned, so that no multi-GB CUDA build is pulled;
# every other version comes from constraints.txt, the one pin list.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
venv="${HYPVIZ_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
py="$venv/bin/python"
torch_pin="$(grep -E '^torch==' constraints.txt)"
if ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${torch_pin#torch==}')" 2>/dev/null; then
    echo "hypviz setup: installing ${torch_pin} (CPU build first)"
    "$py" -m pip install --quiet --disable-pip-version-check "${torch_pin}"
fi
echo "hypviz setup: installing hypviz[${extras}] with constraints.txt into ${venv}"
"$py" -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[${extras}]"
