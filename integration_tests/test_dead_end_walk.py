"""Random walks through real grammars: no token a mask allows leads into a dead end.

A dead end fails a served request midway. When the mask allows a token the
matcher then refuses, or allows nothing before the output is complete, vLLM
ends the request with "the grammar rejected sampled token" (issue 15: after
the last property of vLLM's own test schema the mask allowed ``,``, and after
it only the end token, which the matcher refused). With free whitespace the
same dead end allows whitespace alone, until the request's token limit.

Each schema of a fixed slice of both collections, and vLLM's test
schema, is compiled by each engine that serves it as grammar-guard builds
it, over the real 129k-token tokenizer, and walked from the start a few
times. Each step samples one allowed token. A uniform pick among 129k tokens
would wander inside strings and seldom close an object, so the walk favours
the end token and short structural tokens: it ends constructs and reaches
the states where dead ends were. Seeded, so every run walks the same paths.
Reads the repository's data/, whose jsonschemabench sample holds the first
schemas of every category of the full collection: the slice is the same.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from harness.model import model_tokenizer
from harness.schema_data.cases import Selection, discover, load_case, sample_data_dir

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route, xgrammar_enforces_the_same
from grammar_guard.core.engines.xgrammar.cost import slow_for_xgrammar
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.settings import EngineSelection
from grammar_guard.demo.cases import LISTED_PATTERN_SCHEMA

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engines.base import CompiledGrammar, GrammarEngine, TokenMatcher

DATA_DIR = sample_data_dir()
# The first schemas of every category of both collections: the slice covers
# each kind of schema the collections hold and walks in about a minute.
SCHEMAS_PER_CATEGORY = 3
WALKS = 8
STEPS = 160
# In a JSON grammar whitespace is never needed, so a state allowing nothing
# else is a dead end; a few steps are allowed for a string that asks for it.
WHITESPACE_STEPS = 16
OPTIONS = {"compact": CompileOptions(any_whitespace=False), "whitespace": CompileOptions()}
# A dead end's message shows this much of the text before it.
EXCERPT_CHARS = 200
_CLOSING = frozenset('"]}')
_STRUCTURAL = _CLOSING | frozenset("{[,:")
_WHITESPACE = frozenset(" \t\n\r")


@dataclass(frozen=True)
class TokenKinds:
    """The vocabulary sorted into the kinds of token a walk favours, and their shares."""

    kinds: tuple[np.ndarray, ...]  # token ids of each kind
    shares: np.ndarray  # one per kind, then one for "any allowed token"
    whitespace: np.ndarray  # per token: whether it is whitespace alone

    @classmethod
    def of(cls, texts: Sequence[str], end_ids: Collection[int]) -> TokenKinds:
        # Each kind's share of the steps, among the kinds with an allowed
        # token: most steps end the output or close a string, array or object
        # where they may, so walks get to the end of constructs; whitespace,
        # which a walk could take forever, gets few (and is last: see below).
        tests: list[tuple[float, Callable[[int, str], bool]]] = [
            (0.2, lambda token, text: token in end_ids),
            (0.3, lambda token, text: bool(text) and set(text) <= _CLOSING),
            (0.2, lambda token, text: bool(text) and set(text) <= _STRUCTURAL),
            (0.2, lambda token, text: len(text) == 1 and text not in _WHITESPACE),
            (0.02, lambda token, text: bool(text) and set(text) <= _WHITESPACE),
        ]
        kinds: list[list[int]] = [[] for _ in tests]
        for token, text in enumerate(texts):
            # Each token in the first kind it fits: "]" closes before it is structural.
            kind = next((k for k, (_, fits) in enumerate(tests) if fits(token, text)), None)
            if kind is not None:
                kinds[kind].append(token)
        whitespace = np.zeros(len(texts), dtype=bool)
        whitespace[kinds[-1]] = True  # every whitespace token is of the last kind
        shares = np.array([share for share, _ in tests] + [0.08])
        return cls(tuple(np.array(ids, dtype=np.int64) for ids in kinds), shares, whitespace)

    def pick(self, allowed: np.ndarray, rng: np.random.Generator) -> int:
        candidates = [ids[allowed[ids]] for ids in self.kinds] + [np.flatnonzero(allowed)]
        shares = self.shares * np.array([ids.size > 0 for ids in candidates])
        kind = rng.choice(len(candidates), p=shares / shares.sum())
        return int(rng.choice(candidates[kind]))


@dataclass(frozen=True)
class Walker:
    kinds: TokenKinds
    decode: Callable[[list[int]], str]
    vocab_size: int

    def dead_end(self, matcher: TokenMatcher, rng: np.random.Generator) -> str | None:
        """Where a walk from the start of ``matcher`` met a dead end; None if it met none."""
        bitmask = allocate_bitmask(1, self.vocab_size)
        written: list[int] = []
        whitespace_steps = 0
        for _ in range(STEPS):
            if matcher.is_terminated():
                return None
            matcher.fill_bitmask(bitmask, 0)
            allowed = self._allowed(bitmask)
            if not allowed.any():
                return f"nothing is allowed after {self._excerpt(written)!r}"
            if allowed[~self.kinds.whitespace].any():
                whitespace_steps = 0
            else:
                whitespace_steps += 1
                if whitespace_steps > WHITESPACE_STEPS:
                    return f"only whitespace is allowed after {self._excerpt(written)!r}"
            token = self.kinds.pick(allowed, rng)
            if not matcher.accept_token(token):
                sampled = self.decode([token])
                return f"the allowed {sampled!r} is refused after {self._excerpt(written)!r}"
            written.append(token)
        return None

    def _excerpt(self, written: list[int]) -> str:
        text = self.decode(written)
        return text if len(text) <= EXCERPT_CHARS else "..." + text[-EXCERPT_CHARS:]

    def _allowed(self, bitmask: torch.Tensor) -> np.ndarray:
        bits = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")
        return bits[: self.vocab_size].astype(bool)


@dataclass(frozen=True)
class Engines:
    walker: Walker
    routed: RoutedEngine
    by_name: dict[EngineName, GrammarEngine]


@pytest.fixture(scope="module")
def engines() -> Engines:
    # The backend's own construction, for each engine alone and routed.
    from grammar_guard.core.engines.factory import build_engine

    tokenizer = model_tokenizer()
    vocab_size = len(tokenizer)
    xgrammar = build_engine(tokenizer, vocab_size, selection=EngineSelection.XGRAMMAR)
    llguidance = build_engine(tokenizer, vocab_size, selection=EngineSelection.LLGUIDANCE)
    assert isinstance(xgrammar, XGrammarEngine) and isinstance(llguidance, LLGuidanceEngine)
    texts = tokenizer.batch_decode([[token] for token in range(vocab_size)])
    kinds = TokenKinds.of(texts, frozenset(xgrammar.stop_token_ids))
    walker = Walker(kinds, tokenizer.decode, vocab_size)
    by_name: dict[EngineName, GrammarEngine] = {
        EngineName.XGRAMMAR: xgrammar,
        EngineName.LLGUIDANCE: llguidance,
    }
    return Engines(walker, RoutedEngine(xgrammar, llguidance), by_name)


def _schemas() -> Iterator[tuple[str, Any]]:
    yield "vLLM's test schema", LISTED_PATTERN_SCHEMA
    for ref in discover(DATA_DIR, Selection(limit=SCHEMAS_PER_CATEGORY)):
        yield ref.name, load_case(DATA_DIR, ref).schema


def _upgradable(spec: GrammarSpec) -> bool:
    """Whether a reused key of ``spec`` moves from llguidance to xgrammar (upgrades.py)."""
    try:
        chosen = route(spec)
    except InvalidGrammarError:
        return False
    return xgrammar_enforces_the_same(spec, chosen)


def _dead_end(
    engine: GrammarEngine, compiled: CompiledGrammar, walker: Walker, seed: str
) -> str | None:
    """The first dead end of a few walks through ``compiled``, or None."""
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    for walk in range(WALKS):
        matcher = engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
        found = walker.dead_end(matcher, rng)
        if found is not None:
            return f"walk {walk}: {found}"
    return None


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("engine_name", EngineName, ids=lambda name: name.value)
def test_no_allowed_token_leads_into_a_dead_end(
    engines: Engines, engine_name: EngineName, options: CompileOptions
) -> None:
    engine = engines.by_name[engine_name]
    found: list[str] = []
    walked = 0
    for name, schema in _schemas():
        spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, options)
        if engine_name is EngineName.XGRAMMAR and slow_for_xgrammar(spec) and not _upgradable(spec):
            continue  # seconds to compile, and routing keeps it on llguidance
        try:
            compiled = engine.compile(spec)
        except InvalidGrammarError:
            continue  # refused: no request gets this grammar
        walked += 1
        dead_end = _dead_end(engine, compiled, engines.walker, f"{name}|{options}")
        if dead_end is not None:
            found.append(f"{name}, {dead_end}")
    assert walked >= 50, f"only {walked} grammars walked: is data/ complete?"
    assert not found, f"{len(found)} dead ends on {engine_name.value}:\n" + "\n".join(found)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_vllms_test_schema_is_served_and_ends_after_its_last_property(
    engines: Engines, options: CompileOptions
) -> None:
    spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, LISTED_PATTERN_SCHEMA, options)
    compiled = engines.routed.compile(spec)  # raises if refused
    assert _dead_end(engines.routed, compiled, engines.walker, "vLLM's test schema") is None


# Hostile specs as a client may send them: repeat counts past every engine's
# limit and past Python's int conversion, an unused definition holding one,
# bounds no machine word holds, more alternatives than llguidance keeps.
HOSTILE_SPECS: dict[str, tuple[RequestKind, Any]] = {
    "a repeat count past the lexer's limit": (RequestKind.REGEX, "a{99999999}"),
    "a 5,000-digit repeat count": (RequestKind.REGEX, "a{" + "9" * 5000 + "}"),
    "an unused definition with a 400-digit count": (
        RequestKind.JSON_SCHEMA,
        {"type": "string", "maxLength": 10, "$defs": {"u": {"pattern": "a{" + "9" * 400 + "}"}}},
    ),
    "bounds past any machine word": (
        RequestKind.JSON_SCHEMA,
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 10**30, "maximum": 10**40}},
            "required": ["n"],
        },
    ),
    "a length bound of 2**64": (RequestKind.JSON_SCHEMA, {"type": "string", "maxLength": 2**64}),
    "3,000 alternatives": (
        RequestKind.GRAMMAR,
        "root ::= " + " | ".join(f'"w{number}"' for number in range(3000)),
    ),
}


@pytest.mark.parametrize("name", HOSTILE_SPECS)
@pytest.mark.parametrize("engine_name", EngineName, ids=lambda name: name.value)
def test_a_hostile_spec_is_refused_served_or_ended_in_the_plugins_words(
    engines: Engines, engine_name: EngineName, name: str
) -> None:
    """Refused at compile, walked without a dead end, or ended by the matcher with its reason.

    Any of these reaches the client as a 400 naming the cause or as valid
    output; a dead end, or an error that is not the plugin's, would be a 500.
    Each engine alone, as routing or a forced GRAMMAR_GUARD_ENGINE may use it.
    """
    kind, source = HOSTILE_SPECS[name]
    spec = GrammarSpec.build(kind, source, OPTIONS["compact"])
    engine = engines.by_name[engine_name]
    try:
        compiled = engine.compile(spec)
    except InvalidGrammarError:
        return
    try:
        dead_end = _dead_end(engine, compiled, engines.walker, name)
    except InvalidGrammarError:
        return
    assert dead_end is None, dead_end
