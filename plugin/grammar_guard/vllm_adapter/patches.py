"""The seams grammar-guard patches in vLLM: narrow, idempotent wrappers.

vLLM has no registry for structured-output backends: the backend name is a
closed ``Literal``, request validation and backend construction are
hard-coded chains. Each patch below wraps one of those seams and hands every
other backend's traffic to the original code unchanged:

1. ``StructuredOutputsConfig``: accept the name ``grammar-guard`` (also with
   ``disable_any_whitespace``).
2. ``SamplingParams._validate_structured_outputs``: validate grammar-guard
   requests in the API process with the plugin's own parser.
3. ``StructuredOutputManager.grammar_init``: admit grammar-guard requests
   through the plugin's own compile pool, never vLLM's single grammar thread
   (nor, on 0.33, its check that a request's backend is the engine's).
4. ``StructuredOutputManager.__init__``: build the grammar-guard backend when
   the engine core starts, not at the first structured request, so the
   warm-up file and the persistent cache are read before traffic arrives.
5. ``Scheduler.update_from_output`` and ``AsyncLLM.generate``: carry the
   reason a grammar-guard request failed in the engine core to its client,
   as a 400, 408, 503 or 500 naming it instead of vLLM 0.32's bare 500 or
   0.33's 400 for every compile failure (``failure_reporting``).
6. The completion and chat request models' ``check_structured_outputs_count``:
   refuse a ``structured_outputs`` that is not an object with a 400, where
   vLLM's own check crashes into a 500 (``request_models``).

It also installs the bitmask hooks (``fill_hook``: the engine core's per-step
fill; ``apply_hook``: the worker's apply), which take over only for
grammar-guard engines, and adds grammar-guard's cache metrics to the
process's Prometheus registry, so the API server's ``/metrics`` shows them.

Every wrapper carries a marker attribute, so installing twice (vLLM loads
plugins in every process, sometimes more than once) never wraps twice.
Importing this module imports vLLM internals: ``registration`` imports it
only once the installed vLLM is a supported release.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic.dataclasses import rebuild_dataclass
from vllm.config import VllmConfig
from vllm.config import structured_outputs as so_config_module
from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.structured_output import StructuredOutputManager

from grammar_guard import BACKEND_NAME
from grammar_guard.core.settings import CacheSettings
from grammar_guard.vllm_adapter.apply_hook import apply_hook_installed, install_apply_hook
from grammar_guard.vllm_adapter.compat import installed_release
from grammar_guard.vllm_adapter.failure_reporting import (
    raising_generate,
    reporting_update_from_output,
)
from grammar_guard.vllm_adapter.fill_hook import install_fill_hook
from grammar_guard.vllm_adapter.metrics_export import install_collector
from grammar_guard.vllm_adapter.request_models import install_type_check, type_check_installed

if TYPE_CHECKING:
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

PATCH_MARKER = "__grammar_guard_patch__"
_CONFIG_VALIDATOR = "_validate_structured_output_config"
_install_lock = threading.Lock()


def install_patches() -> None:
    with _install_lock:
        _allow_backend_name()
        _wrap_method(SamplingParams, "_validate_structured_outputs", _frontend_validation)
        _wrap_method(StructuredOutputManager, "__init__", _eager_backend)
        _wrap_method(StructuredOutputManager, "grammar_init", _request_admission)
        _wrap_method(Scheduler, "update_from_output", reporting_update_from_output)
        _wrap_method(AsyncLLM, "generate", raising_generate)
        install_type_check()
        install_collector()
        install_fill_hook()
        install_apply_hook()


def installed_patches() -> dict[str, bool]:
    """Which seams carry the plugin, for tests and for ``--help``-style diagnostics."""
    return {
        "config_backend_name": BACKEND_NAME in get_args(_backend_annotation()),
        "config_validator": _is_patched(_config_validator().func),
        "frontend_validation": _is_patched(SamplingParams._validate_structured_outputs),
        "backend_construction": _is_patched(StructuredOutputManager.__init__),
        "request_admission": _is_patched(StructuredOutputManager.grammar_init),
        "failure_reasons_engine": _is_patched(Scheduler.update_from_output),
        "failure_reasons_api": _is_patched(AsyncLLM.generate),
        "structured_outputs_type_check": type_check_installed(),
        "bitmask_apply": apply_hook_installed(),
        "bitmask_fill": _is_patched(StructuredOutputManager.grammar_bitmask),
    }


def _is_patched(function: object) -> bool:
    return bool(getattr(function, PATCH_MARKER, False))


def _mark(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, PATCH_MARKER, True)
    return wrapper


def _wrap_method(
    owner: type, name: str, make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    original = getattr(owner, name)
    if _is_patched(original):
        return
    setattr(owner, name, _mark(functools.wraps(original)(make_wrapper(original))))


def _backend_annotation() -> Any:
    return StructuredOutputsConfig.__dataclass_fields__["backend"].type


def _config_validator() -> Any:
    return StructuredOutputsConfig.__pydantic_decorators__.model_validators[_CONFIG_VALIDATOR]


def _allow_backend_name() -> None:
    """Add the name to the config's ``Literal`` and let it use ``disable_any_whitespace``.

    The config is a pydantic dataclass, so its validation schema is rebuilt
    after the annotation and the after-validator are swapped.
    """
    names = get_args(_backend_annotation())
    validator = _config_validator()
    if BACKEND_NAME in names and _is_patched(validator.func):
        return
    if BACKEND_NAME not in names:
        extended = Literal[(*names, BACKEND_NAME)]  # type: ignore[valid-type]
        StructuredOutputsConfig.__dataclass_fields__["backend"].type = extended
        StructuredOutputsConfig.__annotations__["backend"] = extended
        so_config_module.StructuredOutputsBackend = extended  # type: ignore[misc]
    if not _is_patched(validator.func):
        original = validator.func

        def validate(self: StructuredOutputsConfig) -> StructuredOutputsConfig:
            if self.backend != BACKEND_NAME:
                return original(self)
            if self.disable_additional_properties:
                raise ValueError(
                    "disable_additional_properties applies to the guidance backend only, "
                    f"not to {BACKEND_NAME}."
                )
            # A bad GRAMMAR_GUARD_* value stops start-up here, naming the variable,
            # rather than failing the first structured request in the engine.
            CacheSettings.from_env()
            return self

        decorators = StructuredOutputsConfig.__pydantic_decorators__.model_validators
        decorators[_CONFIG_VALIDATOR] = dataclasses.replace(validator, func=_mark(validate))
    rebuild_dataclass(StructuredOutputsConfig, force=True)  # type: ignore[arg-type]
    # VllmConfig re-validates its nested config with a schema copied at its
    # own build time, so it has to pick up the new one too.
    rebuild_dataclass(VllmConfig, force=True)  # type: ignore[arg-type]


def _frontend_validation(original: Callable[..., None]) -> Callable[..., None]:
    def validate(self: SamplingParams, model_config: Any, config: Any, tokenizer: Any) -> None:
        if config is None or self.structured_outputs is None or config.backend != BACKEND_NAME:
            return original(self, model_config, config, tokenizer)
        from grammar_guard.vllm_adapter.frontend import validate_structured_outputs

        validate_structured_outputs(self, model_config, config, tokenizer)

    return validate


def _grammar_guard_backend(manager: StructuredOutputManager) -> GrammarGuardBackend:
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    if manager.backend is None:
        manager.backend = GrammarGuardBackend(
            manager.vllm_config,
            tokenizer=manager.tokenizer,
            vocab_size=manager.vllm_config.model_config.get_vocab_size(),
        )
        if installed_release().names_engine_backend:
            # The state vLLM would be in had it built the backend itself: its
            # own grammar_init then refuses requests for other backends.
            manager.backend_name = BACKEND_NAME
    assert isinstance(manager.backend, GrammarGuardBackend)
    return manager.backend


def _eager_backend(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: StructuredOutputManager, vllm_config: VllmConfig) -> None:
        original(self, vllm_config)
        # Without a tokenizer there is nothing to compile for; vLLM refuses
        # structured requests then anyway.
        if (
            vllm_config.structured_outputs_config.backend == BACKEND_NAME
            and not vllm_config.model_config.skip_tokenizer_init
        ):
            _grammar_guard_backend(self)

    return __init__


def _request_admission(original: Callable[..., None]) -> Callable[..., None]:
    def grammar_init(self: StructuredOutputManager, request: Any) -> None:
        if (
            request.structured_output_request is None
            or request.sampling_params.structured_outputs._backend != BACKEND_NAME
        ):
            return original(self, request)
        # Instead of vLLM's single grammar thread, which would block on a slow
        # compile and hold every request queued behind it.
        _grammar_guard_backend(self).admit_request(
            request, block=not self._use_async_grammar_compilation
        )

    return grammar_init
