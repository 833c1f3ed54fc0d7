"""The ``grammar-guard`` structured-output backend inside vLLM's engine core.

Compiles never run on vLLM's grammar thread: :meth:`GrammarGuardBackend.admit_request`
hands the request a grammar at once on a cache hit, or a future that the
plugin's own compile pool or the cache's deadline watcher resolves. vLLM's
scheduler polls that future each step, so one slow compile delays nobody else.
"""

from __future__ import annotations

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

from grammar_guard.core.compile.inline_wait import InlineWaitBudget, WaitedForWhenPolled
from grammar_guard.core.compile.warmup import WarmUp, WarmupResult, read_warmup_file
from grammar_guard.core.compile.workers import make_compiler
from grammar_guard.core.engines.base import CompiledGrammar, TokenMatcher
from grammar_guard.core.engines.factory import build_engine
from grammar_guard.core.errors import MAX_REASON_CHARS, InvalidGrammarError, quoted_excerpt
from grammar_guard.core.masks.guard import GuardedMatcher
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.metrics import CacheMetrics
from grammar_guard.core.request.failures import FailureClass
from grammar_guard.core.request.spec import GrammarSpec
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings
from grammar_guard.vllm_adapter.failure_reporting import FAILURES
from grammar_guard.vllm_adapter.fill_hook import RowQueue, queue_for
from grammar_guard.vllm_adapter.metrics_export import SnapshotPublisher
from grammar_guard.vllm_adapter.request_spec import compile_options, spec_from_key

if TYPE_CHECKING:
    import torch
    from vllm.v1.request import Request

logger = init_logger(__name__)

GrammarOrPending = StructuredOutputGrammar | Future[StructuredOutputGrammar]


def _report_refusal(request_id: str | None, error: BaseException) -> None:
    # vLLM ends the request with finish_reason "error"; the reason reaches
    # the client through FAILURES, and the operator through the log. A reason
    # can hold the client's text (a property name, an engine's echo of a
    # pattern), so the log gets it escaped: its newlines start no log line.
    logger.warning(
        "grammar-guard: request %s gets no grammar: %s",
        request_id,
        quoted_excerpt(str(error), MAX_REASON_CHARS),
    )
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
        self.settings = Settings.from_env()
        self._options = compile_options(self.vllm_config.structured_outputs_config)
        self._engine = build_engine(
            self.tokenizer,
            self.vocab_size,
            mistral=is_mistral_tokenizer(self.tokenizer),
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
        # A quick compile is waited for when vLLM's scheduler first asks for
        # it, so the request joins the step being scheduled; this thread goes on.
        pending: Future[StructuredOutputGrammar] = (
            WaitedForWhenPolled(self._inline_wait)
            if self.service.compiles_quickly(spec)
            else Future()
        )

        def deliver(compiled: Future[CompiledGrammar]) -> None:
            if not pending.set_running_or_notify_cancel():
                return
            try:
                pending.set_result(self._grammar_for(spec, compiled, stop_token_ids))
            except Exception as exc:
                _report_refusal(request_id, exc)
                pending.set_exception(exc)

        admission.future.add_done_callback(deliver)
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


def _end_request(request_id: str, reason: str, failure: FailureClass) -> None:
    # The guard's accept_tokens then returns False, which makes vLLM end the
    # request; the reason reaches its client through FAILURES.
    logger.error("Ending request %s: %s", request_id, reason)
    FAILURES.record(request_id, failure, reason)


def _log_fault(label: str, fault: str) -> None:
    logger.error("Grammar %s failed in %s; its request will be ended", label, fault)


class GuardedGrammar(GuardedMatcher, StructuredOutputGrammar):
    """One request's grammar as vLLM holds it: a :class:`GuardedMatcher`, whose steps never raise.

    The guard's methods are vLLM's grammar interface; this class says how an
    ended request and a fault are reported in vLLM, and takes part in the
    fill hook's batching: inside vLLM's ``grammar_bitmask`` a row is queued,
    and the queue is filled before this grammar's state moves.
    """

    def __init__(self, matcher: TokenMatcher, label: str) -> None:
        super().__init__(matcher, label, end_request=_end_request, report_fault=_log_fault)
        self._row_queue: RowQueue | None = None

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        queue = queue_for(bitmask)
        if queue is None:
            super().fill_bitmask(bitmask, batch_index)
            return
        queue.add(self, batch_index)
        self._row_queue = queue

    def _fill_queued_rows(self) -> None:
        queue, self._row_queue = self._row_queue, None
        if queue is not None:
            queue.flush()

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        self._fill_queued_rows()
        return super().accept_tokens(request_id, tokens)

    def rollback(self, num_tokens: int) -> None:
        self._fill_queued_rows()
        super().rollback(num_tokens)

    def reset(self) -> None:
        self._fill_queued_rows()
        super().reset()
