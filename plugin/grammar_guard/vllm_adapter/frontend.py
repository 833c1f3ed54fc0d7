"""Request validation in the API process, before a request reaches the engine.

Replaces vLLM's per-backend validation for ``grammar-guard`` requests: the
request is turned into the same :class:`GrammarSpec` the engine will compile
and parsed (no tokenizer, no compile), so an invalid schema, regex or grammar
is answered with a 400 naming the reason and the engine never sees it.

Decisions are remembered: a client repeating an invalid spec is refused
without a second parse, and ``grammar_guard_compile_errors_total`` counts it
once; a repeated valid spec (a tool's schema, say) is accepted without a
parse or a hop through the parse threads, under the same unenforced-keyword
policy and engine selection.

A refusal starts with the phrase vLLM's own backends use for it
(``error_phrases``). A JSON schema (or structural tag) asking for
constraints no grammar engine would enforce is refused the same way,
naming each keyword and where it is, unless
``GRAMMAR_GUARD_UNENFORCED=warn``: then it is accepted, each keyword is
logged with its location, and ``grammar_guard_unenforced_total{keyword=...}``
counts it once per request.

Nothing is judged on the API server's event loop: :func:`validate_off_loop`
runs before vLLM's own (synchronous) validation, judges the request in the
:class:`BoundedLanes` threads within ``GRAMMAR_GUARD_VALIDATION_BUDGET_S``
and leaves its verdict on the request for :func:`validate_structured_outputs`
to read. A request that takes longer to judge is refused with a 400 that
says so, and so is one that finds its lane full; either way every other
client, ``/health`` and ``/metrics`` keep being answered.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

from vllm.exceptions import VLLMValidationError
from vllm.logger import init_logger

from grammar_guard import BACKEND_NAME
from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import InvalidGrammarError, quoted_excerpt
from grammar_guard.core.metrics import CacheMetrics, Counter, LabelledCounter
from grammar_guard.core.request.memo import SpecMemo
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS, CompileOptions, GrammarSpec
from grammar_guard.core.request.validation_lanes import BoundedLanes, bounded_size
from grammar_guard.core.schema.findings import Finding, iter_labels
from grammar_guard.core.settings import (
    EngineSelection,
    Settings,
    UnenforcedPolicy,
    engine_selection_from_env,
    unenforced_policy_from_env,
)
from grammar_guard.vllm_adapter.error_phrases import refusal_message
from grammar_guard.vllm_adapter.metrics_export import add_local_source
from grammar_guard.vllm_adapter.patching import plugin_state
from grammar_guard.vllm_adapter.request_spec import (
    compile_options,
    requested_kind,
    requested_value,
    spec_from_params,
)

if TYPE_CHECKING:
    from vllm.config import ModelConfig, VllmConfig
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.tokenizers import TokenizerLike

logger = init_logger(__name__)

_lanes = BoundedLanes("grammar-guard-validate")
_refusals = SpecMemo[InvalidGrammarError]()
# An accepted spec's findings, with the policy and selection it was judged under.
_accepted = SpecMemo[tuple[UnenforcedPolicy, EngineSelection, tuple[Finding, ...]]]()
_metrics = CacheMetrics()
add_local_source(_metrics)
# Where validate_off_loop leaves its verdict on the request's StructuredOutputsParams.
_VERDICT = "verdict"
_Verdict = tuple[GrammarSpec, tuple[Finding, ...]]


async def validate_off_loop(params: SamplingParams, vllm_config: VllmConfig) -> None:
    """Judge a grammar-guard request's grammar in the lanes, awaiting it within the budget.

    The verdict is left on the request for :func:`validate_structured_outputs`,
    which vLLM then calls on the event loop and which then does no work.
    """
    structured = params.structured_outputs
    config = vllm_config.structured_outputs_config
    if structured is None or config.backend != BACKEND_NAME or structured._backend:
        return  # the synchronous validation refuses a pinned backend
    try:
        pending = _verdict(structured, compile_options(config))
        if isinstance(pending, Future):
            budget = Settings.from_env().validation_budget_s
            try:
                pending = await asyncio.wait_for(asyncio.wrap_future(pending), budget)
            except TimeoutError:
                raise _over_budget(structured, budget) from None
    except InvalidGrammarError as exc:
        raise _validation_error(structured, exc) from None
    plugin_state(structured)[_VERDICT] = pending


def validate_structured_outputs(
    params: SamplingParams,
    model_config: ModelConfig,
    config: StructuredOutputsConfig,
    tokenizer: TokenizerLike | None,
) -> None:
    """Validate ``params.structured_outputs`` for the grammar-guard backend."""
    structured = params.structured_outputs
    assert structured is not None
    if model_config.is_diffusion:
        raise VLLMValidationError(
            "Structured outputs are not supported for diffusion language models."
        )
    if tokenizer is None:
        raise VLLMValidationError(
            "Structured outputs need a tokenizer, so they cannot be used with skip_tokenizer_init."
        )
    if structured._backend and structured._backend != BACKEND_NAME:
        raise VLLMValidationError(
            f"This server uses the '{BACKEND_NAME}' structured-output backend; the request "
            f"asked for '{structured._backend}'. Remove '_backend' from the request."
        )
    verdict = plugin_state(structured).pop(_VERDICT, None)
    if verdict is None:  # not through AsyncLLM (LLM(...), say): this caller may block
        try:
            verdict = _wait(_verdict(structured, compile_options(config)), structured)
        except InvalidGrammarError as exc:
            raise _validation_error(structured, exc) from None
    spec, unenforced = verdict
    if unenforced:
        _report_unenforced(spec, unenforced)
    structured._backend = BACKEND_NAME
    # vLLM's own validation ends with this; it re-checks field consistency.
    structured.__post_init__()


def _verdict(
    structured: StructuredOutputsParams, options: CompileOptions
) -> _Verdict | Future[_Verdict]:
    """The verdict on a request's grammar, at once if it is small and known; else its future.

    A small input is turned into its spec on the caller's thread (its text
    is at most :data:`SMALL_SPEC_CHARS`), so a repeated spec is answered
    from memory without a hop; anything else is judged in a lane. Raises
    :class:`InvalidGrammarError` for a known refusal or a full lane.
    """
    policy, selection = unenforced_policy_from_env(), engine_selection_from_env()
    size = bounded_size(requested_value(structured), SMALL_SPEC_CHARS)
    if size >= SMALL_SPEC_CHARS:
        return _lanes.submit(
            size, lambda: _judge(spec_from_params(structured, options), policy, selection)
        )
    spec = spec_from_params(structured, options)
    if (known := _known(spec, policy, selection)) is not None:
        return spec, known
    return _lanes.submit(size, lambda: _judge(spec, policy, selection))


def _known(
    spec: GrammarSpec, policy: UnenforcedPolicy, selection: EngineSelection
) -> tuple[Finding, ...] | None:
    """The remembered findings of an accepted ``spec``; raise a remembered refusal; else None."""
    if (refusal := _refusals.get(spec)) is not None:
        raise refusal
    accepted = _accepted.get(spec)
    if accepted is not None and accepted[:2] == (policy, selection):
        return accepted[2]
    return None


def _judge(spec: GrammarSpec, policy: UnenforcedPolicy, selection: EngineSelection) -> _Verdict:
    """Route ``spec`` (in a lane thread) and remember what was decided.

    A verdict reached after its request gave up is remembered too: the
    client's retry is then answered at once.
    """
    if (known := _known(spec, policy, selection)) is not None:
        return spec, known
    try:
        findings = route(spec, unenforced=policy, selection=selection).findings
    except InvalidGrammarError as exc:
        _refusals.remember(spec, exc)
        _metrics.count(Counter.COMPILE_ERRORS)
        raise
    _accepted.remember(spec, (policy, selection, findings))
    return spec, findings


def _wait(pending: _Verdict | Future[_Verdict], structured: StructuredOutputsParams) -> _Verdict:
    if not isinstance(pending, Future):
        return pending
    budget = Settings.from_env().validation_budget_s
    try:
        return pending.result(timeout=budget)
    except FutureTimeout:
        pending.cancel()  # if it has not started, nothing runs for it
        raise _over_budget(structured, budget) from None


def _over_budget(structured: StructuredOutputsParams, budget: float) -> InvalidGrammarError:
    kind = requested_kind(structured)
    return InvalidGrammarError(
        f"{kind.value if kind else 'structured_outputs'} could not be checked within "
        f"{budget:g} s (GRAMMAR_GUARD_VALIDATION_BUDGET_S); simplify it"
    )


def _validation_error(
    structured: StructuredOutputsParams, exc: InvalidGrammarError
) -> VLLMValidationError:
    return VLLMValidationError(
        refusal_message(requested_kind(structured), exc), parameter="structured_outputs"
    )


def _report_unenforced(spec: GrammarSpec, findings: tuple[Finding, ...]) -> None:
    """Warn mode: log every keyword accepted unenforced and count each keyword once.

    A finding's label, pointer and reason can hold the client's text (a
    property name, a format), so each is logged quoted and cut: escaped, a
    newline in it cannot start a log line of the client's making.
    """
    for finding in findings:
        logger.warning(
            "grammar-guard: %s keyword %s at %s is accepted but not enforced: %s",
            spec.kind.value,
            quoted_excerpt(finding.label),
            quoted_excerpt(finding.pointer or "/"),
            quoted_excerpt(finding.reason),
        )
    for keyword in iter_labels(findings):
        _metrics.count_labelled(LabelledCounter.UNENFORCED, keyword)
