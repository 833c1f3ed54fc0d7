"""The two ways a JSON-schema request gets its grammar, each through its real classes.

- ``grammar-guard``: the plugin's ``GrammarGuardBackend.compile_grammar``, the
  call vLLM's engine core makes: the request key becomes a ``GrammarSpec``
  with the server's ``CompileOptions``, is admitted to the plugin's cache and
  compiled by its ``XGrammarEngine``. The plugin's API-process check parses
  with the same function its compile starts with, so a schema it refuses
  there is refused here with the same error, whose class names the reason.
- ``vllm-xgrammar``: vLLM's own frontend validation for ``xgrammar``
  (``validate_xgrammar_grammar``), then ``XgrammarBackend.compile_grammar``.

Both build the request key with vLLM's ``get_structured_output_key``, from
the schema as a client's JSON body would carry it, and take their settings
from a real ``VllmConfig``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from benchmarks.coverage.results import (
    BUILTIN_PATH,
    INVALID,
    PLUGIN_PATH,
    TIMEOUT,
    UNENFORCED_PREFIX,
    UNSUPPORTED,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

# vLLM's validation passed but its engine-side compile raised: in a server the
# request fails inside the engine rather than with a 400.
COMPILE_ERROR = "compile-error"


@dataclass(frozen=True)
class Compiled:
    grammar: StructuredOutputGrammar
    compile_s: float
    # The process's CPU time over the compile, every thread's: unlike the
    # wall-clock time it does not grow when other work shares the machine.
    compile_cpu_s: float
    validate_s: float | None


class Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class CompilePath(Protocol):
    name: str

    def compile(self, schema: Any) -> Compiled:
        """The request's grammar; raises :class:`Refused` with the reason class."""
        ...


def vllm_config(backend: str, *, whitespace: bool) -> VllmConfig:
    from vllm.config import VllmConfig
    from vllm.config.structured_outputs import StructuredOutputsConfig

    return VllmConfig(
        structured_outputs_config=StructuredOutputsConfig(
            backend=backend, disable_any_whitespace=not whitespace
        )
    )


def _structured_outputs(schema: Any) -> Any:
    """The request's ``structured_outputs``; a schema that is not an object goes as text.

    vLLM's request field takes an object or text, so a boolean schema
    (``true``, ``false``) reaches the server written out.
    """
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(json=schema if isinstance(schema, dict) else json.dumps(schema))


def _request_key(structured_outputs: Any) -> tuple[Any, str]:
    from vllm.v1.structured_output.request import get_structured_output_key

    return get_structured_output_key(structured_outputs)


class PluginPath:
    name = PLUGIN_PATH

    def __init__(self, tokenizer: Any, vocab_size: int, *, whitespace: bool) -> None:
        import grammar_guard
        from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

        grammar_guard.register()
        self._backend = GrammarGuardBackend(
            vllm_config=vllm_config(grammar_guard.BACKEND_NAME, whitespace=whitespace),
            tokenizer=tokenizer,
            vocab_size=vocab_size,
        )

    def compile(self, schema: Any) -> Compiled:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            option, key = _request_key(_structured_outputs(schema))
            grammar = self._backend.compile_grammar(option, key)
        except Exception as exc:
            raise Refused(plugin_reason(exc), _describe(exc)) from exc
        return Compiled(
            grammar,
            time.perf_counter() - started,
            time.process_time() - cpu,
            validate_s=None,
        )


def plugin_reason(error: BaseException) -> str:
    """The reason class of a plugin refusal, read from the exception's class."""
    from grammar_guard.core import errors

    # Looked up by name: the schema analysis that raises it may not be installed.
    unenforced = getattr(errors, "UnenforcedKeywordError", None)
    if unenforced is not None and isinstance(error, unenforced):
        keywords = [str(finding.keyword) for finding in getattr(error, "findings", ())]
        return UNENFORCED_PREFIX + (keywords[0] if keywords else "?")
    if isinstance(error, errors.CompileTimeoutError):
        return TIMEOUT
    if isinstance(error, errors.InvalidGrammarError):
        return INVALID
    return f"error:{type(error).__name__}"


class BuiltinPath:
    name = BUILTIN_PATH

    def __init__(self, tokenizer: Any, vocab_size: int, *, whitespace: bool) -> None:
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

        self._backend = XgrammarBackend(
            vllm_config=vllm_config("xgrammar", whitespace=whitespace),
            tokenizer=tokenizer,
            vocab_size=vocab_size,
        )

    def compile(self, schema: Any) -> Compiled:
        from vllm.exceptions import VLLMValidationError
        from vllm.sampling_params import SamplingParams
        from vllm.v1.structured_output.backend_xgrammar import (
            has_xgrammar_unsupported_json_features,
            validate_xgrammar_grammar,
        )

        started = time.perf_counter()
        try:
            params = SamplingParams(structured_outputs=_structured_outputs(schema))
            validate_xgrammar_grammar(params)
        except (VLLMValidationError, ValueError) as exc:
            unsupported = isinstance(schema, dict) and has_xgrammar_unsupported_json_features(
                schema
            )
            raise Refused(UNSUPPORTED if unsupported else INVALID, _describe(exc)) from exc
        validated, cpu = time.perf_counter(), time.process_time()
        try:
            option, key = _request_key(params.structured_outputs)
            grammar = self._backend.compile_grammar(option, key)
        except Exception as exc:
            raise Refused(COMPILE_ERROR, _describe(exc)) from exc
        return Compiled(
            grammar,
            time.perf_counter() - validated,
            time.process_time() - cpu,
            validate_s=validated - started,
        )


def _describe(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__
