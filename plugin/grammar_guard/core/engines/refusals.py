"""How an engine words a spec it refuses: the same wording whichever library refused it.

Clients and tests match these messages word for word, so both engines and
their rewrites take them from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from grammar_guard.core.errors import InvalidGrammarError

if TYPE_CHECKING:
    from grammar_guard.core.request.spec import GrammarSpec


def invalid_spec(spec: GrammarSpec, reason: str) -> InvalidGrammarError:
    """The client's error for a spec the engine cannot read."""
    return InvalidGrammarError(f"invalid {spec.kind.value}: {reason}")


@contextmanager
def invalid_spec_on_error(
    spec: GrammarSpec, reason: Callable[[BaseException], str] = str
) -> Iterator[None]:
    """Turn whatever a library raises while reading ``spec`` into :func:`invalid_spec`.

    Libraries raise anything for a spec they cannot read (ValueError from a
    converter, RuntimeError from native code); ``reason`` words the
    exception for the client. An :class:`InvalidGrammarError` raised inside
    is already worded and passes unchanged.
    """
    try:
        yield
    except InvalidGrammarError:
        raise
    except Exception as exc:
        raise invalid_spec(spec, reason(exc)) from exc


def compile_failure(what: str, reason: str) -> InvalidGrammarError:
    """The client's error for a spec the library read but could not compile."""
    return InvalidGrammarError(f"{what} failed to compile: {reason}")


def require_a_first_token(spec: GrammarSpec, allows_a_first_token: bool) -> None:
    """Refuse a compiled ``spec`` under which a request can emit nothing, not even its stop token.

    An unsatisfiable schema, regex or grammar compiles to a grammar whose
    first mask is empty: vLLM would sample a token the grammar then rejects
    and fail the request as a server error. Found at compile time, it is the
    client's error, and cached as one.
    """
    if not allows_a_first_token:
        raise InvalidGrammarError(
            f"{spec.kind.value} allows no output at all: it is unsatisfiable, "
            "or needs characters no token of this model can write"
        )
