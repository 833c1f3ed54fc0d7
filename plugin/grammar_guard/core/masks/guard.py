"""One request's matcher behind a guard whose per-step methods never raise.

An exception from a grammar engine in the middle of decoding must not reach
the host's engine loop, where it would take every other request down with
it. Instead the guard is marked faulted: the current mask allows every token
and the next ``accept_tokens`` returns False, which ends this one request.

The guard decides *that* a request must end and *why*; the host decides what
that means to its operator and to the request's client. So both events go
to callbacks the host gives: :data:`EndRequest` when a request must end,
:data:`ReportFault` when the engine raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.failures import FailureClass

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engines.base import TokenMatcher

EndRequest = Callable[[str, str, FailureClass], None]
"""Called with a request's id, why it must end (``grammar LABEL: ...``) and whose fault it is.

A step that raised :class:`InvalidGrammarError` ended on the grammar's own
limits (an engine refusing to grow it further): the client's error, INVALID.
Anything else is a server fault, INTERNAL.
"""

ReportFault = Callable[[str, str], None]
"""Called with the grammar's label and its fault (``STEP raised TYPE: MESSAGE``)."""


class GuardedMatcher:
    """One request's grammar state; ``label`` names its grammar in every report.

    After a fault the matcher is no longer trusted: no step calls it again
    except ``reset``, and the fault outlives a reset, so the request still ends.
    """

    def __init__(
        self,
        matcher: TokenMatcher,
        label: str,
        *,
        end_request: EndRequest,
        report_fault: ReportFault,
    ) -> None:
        self._matcher = matcher
        self._label = label
        self._end_request = end_request
        self._report_fault = report_fault
        self._terminated = False
        self._fault: str | None = None
        self._fault_class = FailureClass.INTERNAL

    @property
    def fault(self) -> str | None:
        return self._fault

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by ``tokens``; False means the request must end (the host was told why).

        A rejected token leaves the state where it was before the call: the
        tokens before it are rolled back, as hosts that retry or fill more
        rows after a rejection expect (vLLM from 0.34).
        """
        if self._fault is not None:
            why = f"its grammar failed earlier: {self._fault}"
            return self._end(request_id, why, self._fault_class)
        if self._terminated:
            # Like vLLM's own backends: tokens after termination are ignored.
            return True
        accepted = 0
        try:
            for token in tokens:
                if not self._matcher.accept_token(token):
                    if accepted:
                        self._matcher.rollback(accepted)
                    why = f"the grammar rejected sampled token {token}"
                    return self._end(request_id, why, FailureClass.INTERNAL)
                accepted += 1
                if self._matcher.is_terminated():
                    self._terminated = True
                    break
        except Exception as exc:
            self._record_fault("accept_tokens", exc)
            return self._end(request_id, f"its grammar failed: {self._fault}", self._fault_class)
        return True

    def _end(self, request_id: str, why: str, failure: FailureClass) -> bool:
        self._end_request(request_id, f"grammar {self._label}: {why}", failure)
        return False

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts; the state does not move."""
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
        """Fill row ``batch_index``; a faulted grammar's row allows every token."""
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
        if isinstance(exc, InvalidGrammarError):
            self._fault_class = FailureClass.INVALID
        self._report_fault(self._label, self._fault)

    def batch_matcher(self) -> TokenMatcher | None:
        """The matcher a batch fill may fill directly; None once faulted (its row allows all)."""
        return self._matcher if self._fault is None else None
