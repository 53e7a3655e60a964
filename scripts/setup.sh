#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install hypviz into it.
#   bash scripts/setup.sh [EXTRAS]      e.g. EXTRAS=test or EXTRAS=lab (default: test)
# The CPU build of torch is installed first, pinned, from PyTorch's CPU wheel index
# (https://download.pytorch.org/whl/cpu; HYPVIZ_TORCH_INDEX overrides it), so that no multi-GB CUDA
# build is pulled from PyPI on Linux; when that index cannot be reached the pin is installed from
# the default index (or pip's local wheels), and a torch of the pinned version already installed
# is kept as it is.  Every other version comes from constraints.txt, the one pin list.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
venv="${HYPVIZ_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
py="$venv/bin/python"
torch_pin="$(grep -E '^torch==' constraints.txt)"
torch_index="${HYPVIZ_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
if ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${torch_pin#torch==}')" 2>/dev/null; then
    echo "hypviz setup: installing ${torch_pin}, the CPU build, from ${torch_index}"
    if ! "$py" -m pip install --quiet --disable-pip-version-check --timeout 20 --retries 1 \
            --index-url "${torch_index}" "${torch_pin}"; then
        echo "hypviz setup: ${torch_index} could not be used; installing ${torch_pin} from the default index instead" \
             "(on Linux that may be the CUDA build: set HYPVIZ_TORCH_INDEX to a reachable CPU index to avoid it)"
        "$py" -m pip install --quiet --disable-pip-version-check "${torch_pin}"
    fi
else
    echo "hypviz setup: ${torch_pin} is already installed in ${venv}; kept"
fi
echo "hypviz setup: installing hypviz[${extras}] with constraints.txt into ${venv}"
"$py" -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[${extras}]"
