#!/usr/bin/env bash
# Set up (if needed), build the tiny local model, start vLLM with grammar-guard,
# send one request of each kind and print the validated results.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m grammar_guard.demo "$@"
