"""Install grammar-guard into this process's vLLM, or say in one log line why not.

vLLM's plugin loader does not catch what a plugin raises, so a plugin that
refuses the installed vLLM with an exception stops vLLM from starting, for
every backend. On a release the plugin does not support the backend stays
unregistered instead: vLLM starts, and only a request for ``grammar-guard``
fails (vLLM's own "unknown backend" error). Supported are the releases in
:data:`~grammar_guard.vllm_adapter.compat.RELEASES` and any newer one whose
patched seams all pass their checks (:meth:`~grammar_guard.vllm_adapter.patching.Patch.check`):
such a release registers with one warning, and one whose seam changed stays
unregistered with one line naming the seam.

:func:`install` applies the one list of patches, :func:`_seams`, and
:func:`installed_patches` reports on the same list. The modules it names
import vLLM internals, so they are imported only once the release is known to
be supported. How a patch is applied, once, is :mod:`~grammar_guard.vllm_adapter.patching`.
"""

from __future__ import annotations

import functools
import logging
import threading

from grammar_guard.vllm_adapter.compat import NEWEST, UnsupportedVLLMVersion, installed_release
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


def installed_patches() -> dict[str, bool | None]:
    """Which seams carry the plugin, for tests and for ``--help``-style diagnostics.

    None: the installed release has nothing to patch at that seam (the mask
    apply on 0.34, whose V2 model runners apply it with vLLM's own code).
    """
    patched: dict[str, bool | None] = {
        seam: all(patch.applied() for patch in patches) for seam, patches in _seams().items()
    }
    for seam in _SEAMS_OF_SOME_RELEASES:
        patched.setdefault(seam, None)
    return patched


@functools.cache  # vLLM loads plugins several times per process: one line is enough
def _supported() -> bool:
    try:
        release = installed_release()
    except UnsupportedVLLMVersion as exc:
        logger.error("%s The grammar-guard backend is not registered.", exc)
        return False
    if release.tested:
        return True
    changed = seam_changes()
    if changed:
        logger.error(
            "vLLM %s is newer than the newest release vllm-grammar-guard was tested on (%s), "
            "and a seam it patches changed: %s. The grammar-guard backend is not registered.",
            release.name,
            NEWEST.name,
            "; ".join(changed),
        )
        return False
    logger.warning(
        "vLLM %s is newer than the newest release vllm-grammar-guard was tested on (%s); "
        "every seam it patches is as it was there, so the grammar-guard backend is "
        "registered, untested on this release.",
        release.name,
        NEWEST.name,
    )
    return True


def seam_changes() -> list[str]:
    """``seam: what changed`` for each patched seam that is not as the plugin was written for."""
    try:
        seams = _seams()
    except ImportError as exc:
        return [f"a module the plugin patches or reads cannot be imported ({exc})"]
    return [
        f"{seam}: {problem}"
        for seam, patches in seams.items()
        for patch in patches
        if (problem := patch.check()) is not None
    ]


# Seams that only some releases have (the V1 runner's apply: 0.32 and 0.33).
_SEAMS_OF_SOME_RELEASES = ("bitmask_apply",)


def _seams() -> dict[str, tuple[Patch, ...]]:
    """Every patch of the installed release, in the order it is applied, by seam name.

    docs/vllm-integration.md says what each one changes and why.
    """
    from vllm.config import VllmConfig
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.structured_output import StructuredOutputManager

    from grammar_guard.vllm_adapter import (
        backend_selection,
        failure_reporting,
        fill_hook,
        request_models,
    )
    from grammar_guard.vllm_adapter.patching import FunctionWrap, ValidatorSwap

    seams: dict[str, tuple[Patch, ...]] = {
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
                ("self", "model_config", "structured_outputs_config", "tokenizer"),
            ),
        ),
        # Before the synchronous validation above runs on the event loop, the
        # same judgement in a thread, awaited.
        "validation_off_loop": (
            FunctionWrap(
                AsyncLLM,
                "add_request",
                backend_selection.validation_off_loop,
                ("self", "request_id", "prompt", "params"),
                more_parameters=True,
            ),
        ),
        "backend_construction": (
            FunctionWrap(
                StructuredOutputManager,
                "__init__",
                backend_selection.eager_backend,
                ("self", "vllm_config"),
            ),
        ),
        "request_admission": (
            FunctionWrap(
                StructuredOutputManager,
                "grammar_init",
                backend_selection.request_admission,
                ("self", "request"),
            ),
        ),
        "failure_reasons_engine": (
            FunctionWrap(
                Scheduler,
                "update_from_output",
                failure_reporting.reporting_update_from_output,
                ("self", "scheduler_output", "model_runner_output"),
            ),
        ),
        "failure_reasons_api": (
            FunctionWrap(
                AsyncLLM,
                "generate",
                failure_reporting.raising_generate,
                ("self", "prompt", "sampling_params", "request_id"),
                more_parameters=True,
            ),
        ),
        "structured_outputs_type_check": tuple(
            ValidatorSwap(model, request_models.VALIDATOR, request_models.type_checked)
            for model in request_models.request_models()
        ),
        "bitmask_fill": (
            FunctionWrap(
                StructuredOutputManager,
                "grammar_bitmask",
                fill_hook.bitmask_fill,
                (
                    "self",
                    "requests",
                    "structured_output_request_ids",
                    "scheduled_spec_decode_tokens",
                ),
            ),
        ),
    }
    if installed_release().v1_model_runner:
        seams["bitmask_apply"] = _v1_apply_patches()
    return seams


def _v1_apply_patches() -> tuple[Patch, ...]:
    from vllm.v1.worker import gpu_model_runner

    from grammar_guard.vllm_adapter import apply_hook
    from grammar_guard.vllm_adapter.patching import FunctionWrap

    return (
        FunctionWrap(
            gpu_model_runner.GPUModelRunner,
            "sample_tokens",
            apply_hook.record_sampling_runner,
            ("self", "grammar_output"),
        ),
        FunctionWrap(
            gpu_model_runner,
            "apply_grammar_bitmask",
            apply_hook.dispatch_apply,
            ("scheduler_output", "grammar_output", "input_batch", "logits"),
        ),
    )
