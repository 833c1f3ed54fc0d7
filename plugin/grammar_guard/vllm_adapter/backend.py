"""The ``grammar-guard`` structured-output backend inside vLLM's engine core.

Compiles never run on vLLM's grammar thread: :meth:`GrammarGuardBackend.admit_request`
hands the request a grammar at once on a cache hit, or a future that the
plugin's own compile pool or the cache's deadline watcher resolves. vLLM's
scheduler polls that future each step, so one slow compile delays nobody else.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm.logger import init_logger
from vllm.utils.mistral import is_mistral_tokenizer
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from grammar_guard.core.bitmask import allocate_bitmask
from grammar_guard.core.compile_service import CompileService
from grammar_guard.core.engine import CompiledGrammar, GrammarEngine, TokenMatcher
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.failures import FailureClass
from grammar_guard.core.inline_wait import InlineWaitBudget
from grammar_guard.core.llguidance_engine import LLGuidanceEngine
from grammar_guard.core.metrics import CacheMetrics
from grammar_guard.core.process_compile import make_compiler
from grammar_guard.core.routing import RoutedEngine
from grammar_guard.core.settings import (
    CacheSettings,
    EngineSelection,
    SettingsError,
    UnenforcedPolicy,
)
from grammar_guard.core.spec import GrammarSpec
from grammar_guard.core.warmup import WarmUp, WarmupResult, read_warmup_file
from grammar_guard.core.xgrammar_engine import XGrammarEngine
from grammar_guard.vllm_adapter.failure_reporting import FAILURES
from grammar_guard.vllm_adapter.metrics_export import SnapshotPublisher
from grammar_guard.vllm_adapter.request_spec import compile_options, spec_from_key

if TYPE_CHECKING:
    import torch
    from vllm.v1.request import Request

logger = init_logger(__name__)

GrammarOrPending = StructuredOutputGrammar | Future[StructuredOutputGrammar]


def _compile_threads() -> int:
    # xgrammar's own parallelism inside one compile, not the number of compiles.
    return max(1, os.cpu_count() or 1)


def build_engine(
    tokenizer: object,
    vocab_size: int,
    *,
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    selection: EngineSelection = EngineSelection.AUTO,
) -> GrammarEngine:
    """The grammar engine for vLLM's tokenizer.

    ``unenforced`` is GRAMMAR_GUARD_UNENFORCED, ``selection`` GRAMMAR_GUARD_ENGINE.
    """
    if is_mistral_tokenizer(tokenizer):
        if selection is not EngineSelection.XGRAMMAR:
            logger.info("grammar-guard: Mistral tokenizer, so every request goes to xgrammar")
        # Mistral tokenizers are not Hugging Face ones; xgrammar needs the raw
        # vocabulary and whether it is byte-fallback (SentencePiece) or raw (Tekken).
        return XGrammarEngine.for_raw_vocab(
            tokenizer.vocab,
            byte_fallback=not tokenizer.is_tekken,
            stop_token_ids=[tokenizer.eos_token_id],
            add_prefix_space=True,
            compile_threads=_compile_threads(),
            unenforced=unenforced,
            # Its control tokens ([INST], [TOOL_CALLS]...) are in the vocabulary as text.
            special_token_ids=getattr(tokenizer, "all_special_ids", ()),
        )
    xgrammar = XGrammarEngine.for_hf_tokenizer(
        tokenizer, vocab_size, compile_threads=_compile_threads(), unenforced=unenforced
    )
    if selection is EngineSelection.XGRAMMAR:
        return xgrammar
    try:
        llguidance = LLGuidanceEngine.for_hf_tokenizer(
            tokenizer,
            vocab_size,
            stop_token_ids=xgrammar.stop_token_ids,
            special_token_ids=xgrammar.special_token_ids,
            unenforced=unenforced,
        )
        if selection is EngineSelection.LLGUIDANCE:
            return llguidance
        return RoutedEngine(xgrammar, llguidance, selection, unenforced)
    except (AttributeError, TypeError, ValueError) as exc:  # not a fast tokenizer, a
        # vocabulary llguidance sizes differently from vLLM's bitmask, or special
        # tokens it would read as text
        if selection is EngineSelection.LLGUIDANCE:
            raise SettingsError(
                f"GRAMMAR_GUARD_ENGINE=llguidance cannot serve this model: {exc}"
            ) from exc
        logger.warning(
            "grammar-guard: llguidance cannot serve this model (%s); "
            "every request goes to xgrammar",
            exc,
        )
        return xgrammar


def _report_refusal(request_id: str | None, error: BaseException) -> None:
    # vLLM ends the request with finish_reason "error"; the reason reaches
    # the client through FAILURES, and the operator through the log.
    logger.warning("grammar-guard: request %s gets no grammar: %s", request_id, error)
    if request_id is not None:
        FAILURES.record_error(request_id, error)


def _log_warmup_failure(result: WarmupResult) -> None:
    if result.error is not None:
        logger.warning(
            "grammar-guard warm-up: %s gets no grammar: %s", result.spec.describe(), result.error
        )


def _log_warmup_summary(results: list[WarmupResult]) -> None:
    ready = sum(result.error is None for result in results)
    logger.info("grammar-guard warm-up done: %d of %d grammars ready", ready, len(results))


def _failed(error: BaseException) -> Future[StructuredOutputGrammar]:
    future: Future[StructuredOutputGrammar] = Future()
    future.set_exception(error)
    return future


@dataclass
class GrammarGuardBackend(StructuredOutputBackend):
    def __post_init__(self) -> None:
        self.settings = CacheSettings.from_env()
        self._options = compile_options(self.vllm_config.structured_outputs_config)
        self._engine = build_engine(
            self.tokenizer,
            self.vocab_size,
            unenforced=self.settings.unenforced,
            selection=self.settings.engine,
        )
        self.vocab_size = self._engine.vocab_size
        speculative = self.vllm_config.speculative_config
        self._max_rollback = speculative.num_speculative_tokens if speculative else 0
        metrics = CacheMetrics(on_change=lambda: self._publisher.notify())
        self._publisher = SnapshotPublisher(metrics)
        self.service = CompileService(
            self._engine,
            self.settings,
            compiler=make_compiler(self._engine, self.settings),
            metrics=metrics,
        )
        self.cache = self.service.cache
        self._inline_wait = InlineWaitBudget()
        self._publisher.start()
        self._warmup = self._start_warmup()

    def _start_warmup(self) -> WarmUp | None:
        """Compile the grammars of ``GRAMMAR_GUARD_WARMUP`` in the background; serve meanwhile."""
        path = self.settings.warmup_file
        if path is None:
            return None
        plan = read_warmup_file(path, self._options)
        for problem in plan.problems:
            logger.warning("grammar-guard warm-up skips %s", problem)
        warmup = WarmUp(
            self.service.admit,
            plan.specs,
            # At most half the compile threads: the rest stay free for live requests.
            parallel=max(1, self.settings.compile_workers // 2),
            on_result=_log_warmup_failure,
            on_finished=_log_warmup_summary,
        )
        warmup.start()
        return warmup

    def admit_request(self, request: Request, *, block: bool) -> None:
        """Give ``request`` its grammar, or a future of it; never waits unless ``block``.

        ``block`` is for vLLM's external-launcher mode, where every rank must
        see the grammar ready at the same step; the wait is still bounded by
        the compile timeout.
        """
        structured = request.structured_output_request
        assert structured is not None
        request_type, grammar_spec = structured.structured_output_key
        params = request.sampling_params
        stop_token_ids = params.all_stop_token_ids if params is not None else None
        grammar = self._admit(request.request_id, request_type, grammar_spec, stop_token_ids)
        if block and isinstance(grammar, Future):
            wait([grammar])
        structured.grammar = grammar

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> StructuredOutputGrammar:
        grammar = self._admit(None, request_type, grammar_spec, stop_token_ids)
        return grammar.result() if isinstance(grammar, Future) else grammar

    def _admit(
        self,
        request_id: str | None,  # None: a direct compile, no request to report to
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None,
    ) -> GrammarOrPending:
        try:
            spec = spec_from_key(request_type, grammar_spec, self._options)
        except InvalidGrammarError as exc:
            return self._refuse(request_id, exc)
        admission = self.service.admit(spec)
        if admission.future.done():
            try:
                return self._grammar_for(spec, admission.future, stop_token_ids)
            except Exception as exc:
                return self._refuse(request_id, exc)
        pending: Future[StructuredOutputGrammar] = Future()

        def deliver(compiled: Future[CompiledGrammar]) -> None:
            if not pending.set_running_or_notify_cancel():
                return
            try:
                pending.set_result(self._grammar_for(spec, compiled, stop_token_ids))
            except Exception as exc:
                _report_refusal(request_id, exc)
                pending.set_exception(exc)

        admission.future.add_done_callback(deliver)
        if self.service.compiles_quickly(spec):
            # Ready now, the request joins the step vLLM is scheduling.
            self._inline_wait.wait(pending)
        return pending

    def _grammar_for(
        self, spec: GrammarSpec, compiled: Future[CompiledGrammar], stop_token_ids: set[int] | None
    ) -> StructuredOutputGrammar:
        """The request's own grammar over the shared compiled one; raises why there is none."""
        matcher = self.service.new_matcher(
            spec,
            compiled.result(),
            stop_token_ids=stop_token_ids,
            max_rollback_tokens=self._max_rollback,
        )
        return GuardedGrammar(matcher, spec.describe())

    @staticmethod
    def _refuse(request_id: str | None, error: BaseException) -> Future[StructuredOutputGrammar]:
        _report_refusal(request_id, error)
        return _failed(error)

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return allocate_bitmask(max_num_seqs, self.vocab_size)

    def destroy(self) -> None:
        if self._warmup is not None:
            self._warmup.stop()
        self._publisher.stop()
        self.service.close("the grammar-guard backend was shut down")


class GuardedGrammar(StructuredOutputGrammar):
    """One request's grammar state; its per-step methods never raise.

    An exception from the grammar engine in the middle of decoding must not
    reach the engine loop, where it would take every other request down with
    it. Instead the grammar is marked faulted: the current mask allows every
    token and the next ``accept_tokens`` returns False, which makes vLLM
    finish this one request with an error.
    """

    def __init__(self, matcher: TokenMatcher, label: str) -> None:
        self._matcher = matcher
        self._label = label
        self._terminated = False
        self._fault: str | None = None

    @property
    def fault(self) -> str | None:
        return self._fault

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        if self._fault is not None:
            return self._end(request_id, f"its grammar failed earlier: {self._fault}")
        if self._terminated:
            return True
        try:
            for token in tokens:
                if not self._matcher.accept_token(token):
                    return self._end(request_id, f"the grammar rejected sampled token {token}")
                if self._matcher.is_terminated():
                    self._terminated = True
                    break
        except Exception as exc:
            self._record_fault("accept_tokens", exc)
            return self._end(request_id, f"its grammar failed: {self._fault}")
        return True

    def _end(self, request_id: str, why: str) -> bool:
        """Returns False, which makes vLLM end the request; records why for its client."""
        message = f"grammar {self._label}: {why}"
        logger.error("Ending request %s: %s", request_id, message)
        FAILURES.record(request_id, FailureClass.INTERNAL, message)
        return False

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        if self._fault is not None or self._terminated:
            return []
        accepted = 0
        try:
            for token in tokens:
                if not self._matcher.accept_token(token):
                    break
                accepted += 1
                if self._matcher.is_terminated():
                    break
            if accepted:
                self._matcher.rollback(accepted)
        except Exception as exc:
            self._record_fault("validate_tokens", exc)
            return []
        return tokens[:accepted]

    def rollback(self, num_tokens: int) -> None:
        if self._fault is not None or num_tokens <= 0:
            return
        try:
            self._matcher.rollback(num_tokens)
            self._terminated = self._matcher.is_terminated()
        except Exception as exc:
            self._record_fault("rollback", exc)

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        if self._fault is None:
            try:
                self._matcher.fill_bitmask(bitmask, batch_index)
                return
            except Exception as exc:
                self._record_fault("fill_bitmask", exc)
        bitmask[batch_index].fill_(-1)

    def is_terminated(self) -> bool:
        return self._terminated

    def reset(self) -> None:
        try:
            self._matcher.reset()
        except Exception as exc:
            self._record_fault("reset", exc)
            return
        self._terminated = False

    def _record_fault(self, step: str, exc: Exception) -> None:
        self._fault = f"{step} raised {type(exc).__name__}: {exc}"
        logger.error("Grammar %s failed in %s; its request will be ended", self._label, self._fault)

    def batch_matcher(self) -> TokenMatcher | None:
        """The matcher a batch fill may fill directly; None once faulted (its row allows all)."""
        return self._matcher if self._fault is None else None
