"""Install grammar-guard into this process's vLLM, or say in one log line why not.

vLLM's plugin loader does not catch what a plugin raises, so a plugin that
refuses the installed vLLM with an exception stops vLLM from starting, for
every backend. On a release outside :data:`~grammar_guard.vllm_adapter.compat.SUPPORTED_RANGE`
the backend stays unregistered instead: vLLM starts, and only a request for
``grammar-guard`` fails (vLLM's own "unknown backend" error).

:func:`install` applies the one list of patches, :func:`_seams`, and
:func:`installed_patches` reports on the same list. The modules it names
import vLLM internals, so they are imported only once the release is known to
be supported. How a patch is applied, once, is :mod:`~grammar_guard.vllm_adapter.patching`.
"""

from __future__ import annotations

import functools
import logging
import threading

from grammar_guard.vllm_adapter.compat import UnsupportedVLLMVersion, installed_release
from grammar_guard.vllm_adapter.patching import Patch

logger = logging.getLogger(__name__)

# Two installs at once must not both find a seam unpatched and wrap it twice.
_install_lock = threading.Lock()


def install() -> None:
    if not _supported():
        return
    from grammar_guard.vllm_adapter.metrics_export import install_collector

    with _install_lock:
        for patches in _seams().values():
            for patch in patches:
                patch.apply()
        # Not a patch of vLLM: the API server's /metrics reads this process's registry.
        install_collector()


def installed_patches() -> dict[str, bool]:
    """Which seams carry the plugin, for tests and for ``--help``-style diagnostics."""
    return {seam: all(patch.applied() for patch in patches) for seam, patches in _seams().items()}


@functools.cache  # vLLM loads plugins several times per process: one line is enough
def _supported() -> bool:
    try:
        installed_release()
    except UnsupportedVLLMVersion as exc:
        logger.error("%s The grammar-guard backend is not registered.", exc)
        return False
    return True


def _seams() -> dict[str, tuple[Patch, ...]]:
    """Every patch, in the order it is applied, under the seam name it is reported by.

    docs/vllm-integration.md says what each one changes and why.
    """
    from vllm.config import VllmConfig
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.worker import gpu_model_runner

    from grammar_guard.vllm_adapter import (
        apply_hook,
        backend_selection,
        failure_reporting,
        fill_hook,
        request_models,
    )
    from grammar_guard.vllm_adapter.patching import FunctionWrap, ValidatorSwap

    return {
        # Before the validator swap, whose schema rebuild picks the new name up.
        "config_backend_name": (backend_selection.BackendNameInConfig(),),
        "config_validator": (
            ValidatorSwap(
                StructuredOutputsConfig,
                backend_selection.CONFIG_VALIDATOR,
                backend_selection.config_validation,
                # VllmConfig re-validates its nested config with a copy of its schema.
                dependents=(VllmConfig,),
            ),
        ),
        "frontend_validation": (
            FunctionWrap(
                SamplingParams,
                "_validate_structured_outputs",
                backend_selection.frontend_validation,
            ),
        ),
        "backend_construction": (
            FunctionWrap(StructuredOutputManager, "__init__", backend_selection.eager_backend),
        ),
        "request_admission": (
            FunctionWrap(
                StructuredOutputManager, "grammar_init", backend_selection.request_admission
            ),
        ),
        "failure_reasons_engine": (
            FunctionWrap(
                Scheduler, "update_from_output", failure_reporting.reporting_update_from_output
            ),
        ),
        "failure_reasons_api": (
            FunctionWrap(AsyncLLM, "generate", failure_reporting.raising_generate),
        ),
        "structured_outputs_type_check": tuple(
            ValidatorSwap(model, request_models.VALIDATOR, request_models.type_checked)
            for model in request_models.request_models()
        ),
        "bitmask_fill": (
            FunctionWrap(StructuredOutputManager, "grammar_bitmask", fill_hook.bitmask_fill),
        ),
        "bitmask_apply": (
            FunctionWrap(
                gpu_model_runner.GPUModelRunner, "sample_tokens", apply_hook.record_sampling_runner
            ),
            FunctionWrap(gpu_model_runner, "apply_grammar_bitmask", apply_hook.dispatch_apply),
        ),
    }
