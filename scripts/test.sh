#!/usr/bin/env bash
# Set up (if needed) and run the tests: lint, unit tests, and the integration
# tests that start real vLLM engines on the CPU.
#
#   scripts/test.sh [pytest arguments]          everything: run it before calling a change done
#   scripts/test.sh --quick [pytest arguments]  lint, the unit tests and the seam tests
#                                               (no engine starts): the loop while working
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=false
if [[ ${1:-} == --quick ]]; then
    QUICK=true
    shift
fi
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check --quiet .
if $QUICK; then
    .venv/bin/python -m pytest unit_tests "$@"
    .venv/bin/python -m pytest integration_tests -m seam "$@"
else
    .venv/bin/python -m pytest "$@"
fi
