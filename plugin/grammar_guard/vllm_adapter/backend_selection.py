"""The seams that let vLLM select grammar-guard: its config, its request validation, its engine.

vLLM has no registry for structured-output backends: the backend name is a
closed ``Literal``, request validation and backend construction are
hard-coded chains. The wrappers here hand every other backend's traffic to
the original code unchanged:

1. ``StructuredOutputsConfig``: accept the name ``grammar-guard`` (also with
   ``disable_any_whitespace``).
2. ``SamplingParams._validate_structured_outputs``: validate grammar-guard
   requests in the API process with the plugin's own parser.
   ``AsyncLLM.add_request``: the same judgement first, in a thread the
   event loop awaits, so the synchronous one above finds it made.
3. ``StructuredOutputManager.__init__``: build the grammar-guard backend when
   the engine core starts, not at the first structured request, so the
   warm-up file and the persistent cache are read before traffic arrives.
4. ``StructuredOutputManager.grammar_init``: admit grammar-guard requests
   through the plugin's own compile pool, never vLLM's single grammar thread
   (nor, from 0.33, its check that a request's backend is the engine's).

``registration`` applies them, with the other hooks; this module imports
vLLM internals, so it is imported only once the release is supported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from vllm.config import VllmConfig
from vllm.config import structured_outputs as so_config_module
from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.structured_output import StructuredOutputManager

from grammar_guard import BACKEND_NAME
from grammar_guard.core.settings import Settings
from grammar_guard.vllm_adapter.compat import installed_release

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

CONFIG_VALIDATOR = "_validate_structured_output_config"


class BackendNameInConfig:
    """``grammar-guard`` among the names the config's ``backend`` field accepts.

    The config is a pydantic dataclass: the new ``Literal`` takes effect when
    its schema is rebuilt, which the swap of its validator, listed right
    after this patch, does.
    """

    def apply(self) -> None:
        names = get_args(_backend_annotation())
        if BACKEND_NAME in names:
            return
        extended = Literal[(*names, BACKEND_NAME)]  # type: ignore[valid-type]
        StructuredOutputsConfig.__dataclass_fields__["backend"].type = extended
        StructuredOutputsConfig.__annotations__["backend"] = extended
        so_config_module.StructuredOutputsBackend = extended  # type: ignore[misc]

    def applied(self) -> bool:
        return BACKEND_NAME in get_args(_backend_annotation())

    def check(self) -> str | None:
        field = StructuredOutputsConfig.__dataclass_fields__.get("backend")
        if field is None or get_origin(field.type) is not Literal:
            return "StructuredOutputsConfig.backend is no longer a Literal of backend names"
        return None


def _backend_annotation() -> Any:
    return StructuredOutputsConfig.__dataclass_fields__["backend"].type


def config_validation(
    original: Callable[..., StructuredOutputsConfig],
) -> Callable[..., StructuredOutputsConfig]:
    """Let ``grammar-guard`` use ``disable_any_whitespace`` and ``disable_additional_properties``.

    vLLM allows the first to xgrammar and guidance, the second to guidance
    alone; grammar-guard reads both (request_spec.compile_options). Other
    backends keep vLLM's rule.
    """

    def validate(self: StructuredOutputsConfig) -> StructuredOutputsConfig:
        if self.backend != BACKEND_NAME:
            return original(self)
        # A bad GRAMMAR_GUARD_* value stops start-up here, naming the variable,
        # rather than failing the first structured request in the engine.
        Settings.from_env()
        # The API process validates its config before it serves, so the first
        # structured request finds the validation module (routing, schema
        # analysis) imported, not importing on the event loop every client and
        # /health share. A thread would not do: the request alone would wait
        # for the import, and its unconstrained twin would not.
        import grammar_guard.vllm_adapter.frontend  # noqa: F401

        return self

    return validate


def frontend_validation(original: Callable[..., None]) -> Callable[..., None]:
    def validate(self: SamplingParams, model_config: Any, config: Any, tokenizer: Any) -> None:
        if config is None or self.structured_outputs is None or config.backend != BACKEND_NAME:
            return original(self, model_config, config, tokenizer)
        from grammar_guard.vllm_adapter.frontend import validate_structured_outputs

        validate_structured_outputs(self, model_config, config, tokenizer)

    return validate


def validation_off_loop(original: Callable[..., Any]) -> Callable[..., Any]:
    async def add_request(
        self: AsyncLLM, request_id: str, prompt: Any, params: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if getattr(params, "structured_outputs", None) is not None:
            from grammar_guard.vllm_adapter.frontend import validate_off_loop

            await validate_off_loop(params, self.vllm_config)
        return await original(self, request_id, prompt, params, *args, **kwargs)

    return add_request


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


def eager_backend(original: Callable[..., None]) -> Callable[..., None]:
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


def request_admission(original: Callable[..., None]) -> Callable[..., None]:
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
