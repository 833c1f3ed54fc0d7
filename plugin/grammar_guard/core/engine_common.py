"""What every grammar engine does the same way, written once so the engines cannot drift apart.

Clients and tests match the refusal messages word for word, persistent
caches are keyed by the fingerprints, and a batch holds rows of every
engine: so the wording of a refused spec, the fingerprint recipe and the
grouping of a batch by engine live here, and each engine module keeps only
what its library does differently.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from grammar_guard.core.engine import MatcherWrapper
from grammar_guard.core.errors import InvalidGrammarError

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engine import TokenMatcher
    from grammar_guard.core.settings import UnenforcedPolicy
    from grammar_guard.core.spec import GrammarSpec


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


def engine_fingerprint(
    library: str, vocabulary: str, unenforced: UnenforcedPolicy, *rules: str
) -> str:
    """What a grammar ``library`` serialised is bound to; engines load each other's if equal.

    It names the whole vocabulary, not its size (two tokenizers of one size
    can differ in every token); the library release, which stands in for a
    serialisation format no library exposes on its own; the unenforced
    policy, so that a grammar compiled while unenforced keywords were let
    through is never served from disk to an engine that refuses them; and
    ``rules``, the engine's own rewrites of its input by name, so that a
    grammar compiled before a rewrite existed is not loaded by an engine
    that applies it.
    """
    digest = hashlib.sha256(vocabulary.encode())
    digest.update(importlib.metadata.version(library).encode())
    digest.update(unenforced.value.encode())
    for rule in rules:
        digest.update(rule.encode())
    return f"{library}-{digest.hexdigest()[:32]}"


def fill_by_engine(
    matchers: Sequence[TokenMatcher],
    bitmask: torch.Tensor,
    rows: Sequence[int],
    *,
    threads: int,
) -> None:
    """Batch-fill rows whose matchers may come from several engines: one call per engine name.

    A :class:`MatcherWrapper` fills as the matcher inside it does, so that
    matcher joins its engine's call: each engine's batch fill then sees only
    its own matchers.
    """
    groups: dict[str, tuple[list[TokenMatcher], list[int]]] = {}
    for matcher, row in zip(matchers, rows, strict=True):
        while isinstance(matcher, MatcherWrapper):
            matcher = matcher.inner
        group_matchers, group_rows = groups.setdefault(matcher.engine_name, ([], []))
        group_matchers.append(matcher)
        group_rows.append(row)
    for group_matchers, group_rows in groups.values():
        group_matchers[0].fill_batch(group_matchers, bitmask, group_rows, threads=threads)
