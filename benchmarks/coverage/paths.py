"""The five ways a JSON-schema request gets its grammar, each through its real classes.

docs/coverage.md ("What each path runs"): grammar-guard routed and with each engine forced
(``GrammarGuardBackend.compile_grammar``), and vLLM's xgrammar and guidance backends after their
own frontend validation; every request key from vLLM's ``get_structured_output_key``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from benchmarks.coverage.results import (
    INVALID,
    PATHS,
    PLUGIN_LLGUIDANCE_PATH,
    PLUGIN_PATH,
    PLUGIN_XGRAMMAR_PATH,
    TIMEOUT,
    UNENFORCED_PREFIX,
    UNSUPPORTED,
    VLLM_GUIDANCE_PATH,
    VLLM_XGRAMMAR_PATH,
)
from benchmarks.scoped_env import scoped_environment

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.v1.structured_output.backend_types import (
        StructuredOutputBackend,
        StructuredOutputGrammar,
    )

    from grammar_guard.core.settings import EngineSelection

# vLLM's validation passed but its engine-side compile raised (xgrammar) or
# left the grammar in an error state (guidance): in a server the request fails
# inside the engine, or gets an empty answer, rather than a 400.
COMPILE_ERROR = "compile-error"
# Keyed by GRAMMAR_GUARD_ENGINE's values (the plugin's EngineSelection).
_PLUGIN_PATH_NAMES = {
    "auto": PLUGIN_PATH,
    "xgrammar": PLUGIN_XGRAMMAR_PATH,
    "llguidance": PLUGIN_LLGUIDANCE_PATH,
}


@dataclass(frozen=True)
class Compiled:
    grammar: StructuredOutputGrammar
    compile_s: float
    # The process's CPU time over the compile, every thread's: unlike the
    # wall-clock time it does not grow when other work shares the machine.
    compile_cpu_s: float
    # The grammar of another request for the same schema: a cache hit where
    # the path has a cache, a compile where it has none (see checker.py for why).
    renew: Callable[[], StructuredOutputGrammar]
    validate_s: float | None = None  # vLLM's frontend validation (vLLM's paths)
    engine: str | None = None  # the plugin's engine that serves it (ENGINES)


class Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class CompilePath(Protocol):
    name: str
    # One row, from the backend's allocate_token_bitmask(1): what the engine
    # fills for a request each step.
    bitmask: torch.Tensor

    def compile(self, schema: Any) -> Compiled:
        """The request's grammar; raises :class:`Refused` with the reason class."""
        ...


def build_paths(tokenizer: Any, vocab_size: int, *, whitespace: bool) -> dict[str, CompilePath]:
    """Every path, by name, in the order of ``PATHS``."""
    from grammar_guard.core.settings import EngineSelection

    paths: list[CompilePath] = [
        PluginPath(tokenizer, vocab_size, whitespace=whitespace, selection=selection)
        for selection in EngineSelection
    ]
    paths += [
        BuiltinPath(backend, tokenizer, vocab_size, whitespace=whitespace)
        for backend in ("xgrammar", "guidance")
    ]
    by_name = {path.name: path for path in paths}
    assert set(by_name) == set(PATHS), f"paths {sorted(by_name)} are not {PATHS}"
    return {name: by_name[name] for name in PATHS}


class PluginPath:
    def __init__(
        self, tokenizer: Any, vocab_size: int, *, whitespace: bool, selection: EngineSelection
    ) -> None:
        import grammar_guard
        from grammar_guard.core.settings import ENGINE_VARIABLE
        from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

        grammar_guard.register()
        self.name = _PLUGIN_PATH_NAMES[selection.value]
        # The backend reads GRAMMAR_GUARD_ENGINE once, when built: set for this one only.
        with scoped_environment({ENGINE_VARIABLE: selection.value}):
            self._backend = GrammarGuardBackend(
                vllm_config=_vllm_config(grammar_guard.BACKEND_NAME, whitespace=whitespace),
                tokenizer=tokenizer,
                vocab_size=vocab_size,
            )
        self.bitmask = self._backend.allocate_token_bitmask(1)

    def compile(self, schema: Any) -> Compiled:
        try:
            compiled = _compile(self._backend, _structured_outputs(schema))
        except Exception as exc:
            raise Refused(_plugin_reason(exc), _describe(exc)) from exc
        return replace(compiled, engine=_served_by(compiled.grammar))


class BuiltinPath:
    """vLLM's own backend as a request meets it: frontend validation, then the engine's compile."""

    def __init__(self, backend: str, tokenizer: Any, vocab_size: int, *, whitespace: bool) -> None:
        from vllm.v1.structured_output import backend_guidance, backend_xgrammar

        built: type[StructuredOutputBackend]
        if backend == "xgrammar":
            self.name, built = VLLM_XGRAMMAR_PATH, backend_xgrammar.XgrammarBackend
            self._validate = backend_xgrammar.validate_xgrammar_grammar
            # Whether a schema its validation refused uses a feature on vLLM's
            # list of what the backend does not support.
            self._unsupported = backend_xgrammar.has_xgrammar_unsupported_json_features
        else:
            self.name, built = VLLM_GUIDANCE_PATH, backend_guidance.GuidanceBackend
            # Without a tokenizer, as vLLM validates for a Hugging Face one.
            self._validate = backend_guidance.validate_guidance_grammar
            self._unsupported = backend_guidance.has_guidance_unsupported_json_features
        self._backend = built(
            vllm_config=_vllm_config(backend, whitespace=whitespace),
            tokenizer=tokenizer,
            vocab_size=vocab_size,
        )
        self.bitmask = self._backend.allocate_token_bitmask(1)

    def compile(self, schema: Any) -> Compiled:
        from vllm.exceptions import VLLMValidationError
        from vllm.sampling_params import SamplingParams

        started = time.perf_counter()
        try:
            params = SamplingParams(structured_outputs=_structured_outputs(schema))
            self._validate(params)
        except (VLLMValidationError, ValueError) as exc:
            unsupported = isinstance(schema, dict) and self._unsupported(schema)
            raise Refused(UNSUPPORTED if unsupported else INVALID, _describe(exc)) from exc
        validate_s = time.perf_counter() - started
        try:
            compiled = _compile(self._backend, params.structured_outputs)
        except Exception as exc:
            raise Refused(COMPILE_ERROR, _describe(exc)) from exc
        error = _guidance_error(compiled.grammar)
        if error:
            raise Refused(COMPILE_ERROR, _describe(error))
        return replace(compiled, validate_s=validate_s)


def _vllm_config(backend: str, *, whitespace: bool) -> VllmConfig:
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


def _compile(backend: StructuredOutputBackend, structured_outputs: Any) -> Compiled:
    """The request's grammar, as vLLM's engine asks for it, with its wall-clock and CPU time."""
    from vllm.v1.structured_output.request import get_structured_output_key

    option, key = get_structured_output_key(structured_outputs)
    started, cpu = time.perf_counter(), time.process_time()
    grammar = backend.compile_grammar(option, key)
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return Compiled(grammar, wall_s, cpu_s, functools.partial(backend.compile_grammar, option, key))


def _served_by(grammar: StructuredOutputGrammar) -> str | None:
    """The engine whose matcher the plugin's grammar wraps; None if it wraps none."""
    from grammar_guard.core.engine_names import EngineName
    from grammar_guard.core.engines.llguidance.matcher import LLGuidanceMatcher
    from grammar_guard.core.engines.xgrammar.engine import XGrammarMatcher
    from grammar_guard.core.upgrade.trial import PathRecorder
    from grammar_guard.vllm_adapter.backend import GuardedGrammar

    if not isinstance(grammar, GuardedGrammar):
        return None
    # batch_matcher() is GuardedGrammar's public way to its matcher (for batch
    # fills); it is None only once the grammar faulted, never fresh from a compile.
    matcher = grammar.batch_matcher()
    if isinstance(matcher, PathRecorder):  # an upgradable key's request recording its path
        matcher = matcher.inner
    if isinstance(matcher, XGrammarMatcher):
        return EngineName.XGRAMMAR.value
    if isinstance(matcher, LLGuidanceMatcher):
        return EngineName.LLGUIDANCE.value
    return None


def _plugin_reason(error: BaseException) -> str:
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


def _guidance_error(grammar: StructuredOutputGrammar) -> str:
    """The error vLLM's guidance grammar is in, or "" (xgrammar's compile raises instead).

    Its compile_grammar does not raise: a grammar llguidance cannot take
    leaves the LLMatcher in an error state, which ``check_error`` only logs,
    and such a matcher's mask allows nothing but the stop token. In a server
    the request then ends with an empty answer rather than an error.
    """
    from vllm.v1.structured_output.backend_guidance import GuidanceGrammar

    if isinstance(grammar, GuidanceGrammar) and grammar.ll_matcher.is_error():
        return str(grammar.ll_matcher.get_error())
    return ""


def _describe(error: BaseException | str) -> str:
    """The first line of an error's message (llguidance's run to pages of state)."""
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__
