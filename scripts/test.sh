#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: lint, unit tests, and the
# integration tests that start real vLLM engines on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
