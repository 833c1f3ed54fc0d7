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
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

from vllm.exceptions import VLLMValidationError
from vllm.logger import init_logger

from grammar_guard import BACKEND_NAME
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.input_limits import quoted_excerpt
from grammar_guard.core.metrics import CacheMetrics, Counter, LabelledCounter
from grammar_guard.core.routing import route
from grammar_guard.core.schema.findings import Finding, iter_labels
from grammar_guard.core.settings import (
    EngineSelection,
    UnenforcedPolicy,
    engine_selection_from_env,
    unenforced_policy_from_env,
)
from grammar_guard.core.spec import GrammarSpec
from grammar_guard.core.spec_memo import SpecMemo
from grammar_guard.vllm_adapter.error_phrases import refusal_message
from grammar_guard.vllm_adapter.metrics_export import add_local_source
from grammar_guard.vllm_adapter.request_spec import (
    compile_options,
    requested_kind,
    spec_from_params,
)

if TYPE_CHECKING:
    from vllm.config import ModelConfig
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams
    from vllm.tokenizers import TokenizerLike

logger = init_logger(__name__)

# Parsing is normally sub-millisecond; the bound only matters for input that
# makes the native parser blow up, which must not hold the request path.
PARSE_DEADLINE_S = 10.0
_parse_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grammar-guard-parse")
_refusals = SpecMemo[InvalidGrammarError]()
# An accepted spec's findings, with the policy and selection it was judged under.
_accepted = SpecMemo[tuple[UnenforcedPolicy, EngineSelection, tuple[Finding, ...]]]()
_metrics = CacheMetrics()
add_local_source(_metrics)


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
    try:
        spec = spec_from_params(structured, compile_options(config))
        unenforced = _check_within_deadline(spec)
    except InvalidGrammarError as exc:
        raise VLLMValidationError(
            refusal_message(requested_kind(structured), exc), parameter="structured_outputs"
        ) from None
    if unenforced:
        _report_unenforced(spec, unenforced)
    structured._backend = BACKEND_NAME
    # vLLM's own validation ends with this; it re-checks field consistency.
    structured.__post_init__()


def _check_within_deadline(spec: GrammarSpec) -> tuple[Finding, ...]:
    """Parse ``spec``; the keywords accepted unenforced (warn mode), or raise why it is refused."""
    if (known := _refusals.get(spec)) is not None:
        raise known
    policy, selection = unenforced_policy_from_env(), engine_selection_from_env()
    accepted = _accepted.get(spec)
    if accepted is not None and accepted[:2] == (policy, selection):
        return accepted[2]
    future = _parse_pool.submit(route, spec, unenforced=policy, selection=selection)
    try:
        findings = future.result(timeout=PARSE_DEADLINE_S).findings
    except FutureTimeout:
        # Not remembered: a deadline miss may be load, not the grammar.
        raise InvalidGrammarError(
            f"{spec.kind.value} could not be parsed within {PARSE_DEADLINE_S:g} s; "
            "simplify it (deeply nested repetition is the usual cause)"
        ) from None
    except InvalidGrammarError as exc:
        _refusals.remember(spec, exc)
        _metrics.count(Counter.COMPILE_ERRORS)
        raise
    _accepted.remember(spec, (policy, selection, findings))
    return findings


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
