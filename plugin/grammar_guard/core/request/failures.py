"""Why a request got no grammar, in a form that survives the trip to the client.

A host engine usually ends such a request with a bare error status and no
text (vLLM: finish reason ``error``, which its server answers with HTTP
500). The engine side records each failure by request id (:class:`FailureLog`)
and writes it into whatever free-text field the host carries to its front end
(:func:`encode`); the front end reads it back (:func:`decode`) and answers with
the status the failure deserves, naming the reason.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http import HTTPStatus

from grammar_guard.core.errors import CompileTimeoutError, InvalidGrammarError, shorten

PREFIX = "grammar-guard"
# Ids of failed requests whose host output was never emitted (the client
# went away first) would otherwise pile up.
DEFAULT_MAX_ENTRIES = 4096


class FailureClass(enum.Enum):
    """What the client should make of a failure; the value is the HTTP status."""

    # The request's grammar is wrong, or timed out too often to ever compile:
    # sending it again cannot help.
    INVALID = HTTPStatus.BAD_REQUEST
    # The compile outlived the request's budget but goes on in the background;
    # a retry after the marker's TTL may find it cached. A 4xx, since the
    # request's own schema set the cost; 408, which clients retry.
    TIMEOUT = HTTPStatus.REQUEST_TIMEOUT
    # The compiler was shut down under the request (the engine is stopping),
    # or its compile process died (CompileCrashedError: killed from outside,
    # out of memory): not known to be the request's fault, and another
    # attempt, later or elsewhere, may succeed. Also any error not named above.
    UNAVAILABLE = HTTPStatus.SERVICE_UNAVAILABLE
    # The grammar engine failed while decoding: a server fault, named.
    INTERNAL = HTTPStatus.INTERNAL_SERVER_ERROR


def classify(error: BaseException) -> FailureClass:
    if isinstance(error, InvalidGrammarError):
        return FailureClass.INVALID
    if isinstance(error, CompileTimeoutError):
        return FailureClass.INVALID if error.permanent else FailureClass.TIMEOUT
    return FailureClass.UNAVAILABLE


def encode(failure: FailureClass, message: str) -> str:
    return f"{PREFIX}:{failure.name.lower()}: {shorten(message)}"


def decode(text: object) -> tuple[FailureClass, str] | None:
    """The failure written by :func:`encode`, or None for any other value."""
    if not isinstance(text, str) or not text.startswith(PREFIX + ":"):
        return None
    name, separator, message = text[len(PREFIX) + 1 :].partition(": ")
    try:
        failure = FailureClass[name.upper()]
    except KeyError:
        return None
    return (failure, message) if separator else None


class FailureLog:
    """Encoded failures by request id, until the host's output for that request takes them."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        # request id -> (encoded reason, when it was recorded)
        self._reasons: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def __bool__(self) -> bool:
        # Read without the lock on the host's hot path: a stale answer only
        # delays a reason by one step.
        return bool(self._reasons)

    def record_error(self, request_id: str, error: BaseException) -> None:
        self.record(request_id, classify(error), str(error) or type(error).__name__)

    def record(self, request_id: str, failure: FailureClass, message: str) -> None:
        with self._lock:
            # The first failure is the cause; later ones are its consequences.
            self._reasons.setdefault(request_id, (encode(failure, message), self._clock()))
            while len(self._reasons) > self._max_entries:
                self._reasons.popitem(last=False)

    def take(self, request_id: str) -> str | None:
        with self._lock:
            entry = self._reasons.pop(request_id, None)
        return None if entry is None else entry[0]

    def discard_unless(self, alive: Callable[[str], bool], *, older_than_s: float) -> None:
        """Forget the failures of requests the host does not hold, once ``older_than_s`` old.

        The age rule exists because a host may start a request's compile
        before it holds the request (vLLM compiles from its input thread): a
        failure that young belongs to a request still on its way in.
        """
        cutoff = self._clock() - older_than_s
        with self._lock:
            stray = []
            # Entries are in recording order, so oldest first: the scan
            # stops at the first one young enough to be kept whatever.
            for request_id, (_, recorded_at) in self._reasons.items():
                if recorded_at > cutoff:
                    break
                if not alive(request_id):
                    stray.append(request_id)
            for request_id in stray:
                del self._reasons[request_id]
