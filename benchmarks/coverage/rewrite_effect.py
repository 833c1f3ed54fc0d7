"""Which keywords the plugin refuses schemas for, without its schema rewrite and with it.

No compile: each schema goes through the plugin's routing check (what the API process runs
before admitting a request) as served and with the rewrite turned off
(:func:`rewrite_turned_off`, this benchmark only); docs/benchmarks.md ("Schema coverage").
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

from benchmarks.coverage.cases import load_schema
from benchmarks.coverage.results import CaseRef

if TYPE_CHECKING:
    from grammar_guard.core.request.spec import CompileOptions

# The label of a refusal that names no keyword: the schema itself is wrong
# (or needs what neither engine has, such as a remote reference).
INVALID_SCHEMA = "invalid schema"
# Keyword rows a rendered table shows; the rest share one "other" row.
SHOWN_KEYWORDS = 25
# Every module that binds ``rewritten_schema_text`` by name (``grep -rn
# rewritten_schema_text plugin/``), the defining one included: turning the
# rewrite off must reach each of them. rewrite_turned_off() fails if any
# other module of the plugin holds the function.
REWRITE_IMPORTERS = (
    "grammar_guard.core.schema.rewrite",
    "grammar_guard.core.engines.routing",
    "grammar_guard.core.engines.xgrammar.rewrite",
    "grammar_guard.core.engines.llguidance.rewrite",
)
_REWRITE_FUNCTION = "rewritten_schema_text"
# Routing's last resort, a rewrite too: turned off with it, where routing binds it.
_NARROWING_IMPORTER = "grammar_guard.core.engines.routing"
_NARROWING_FUNCTION = "narrowed_schema_text"
_PLUGIN = "grammar_guard"


@dataclass(frozen=True)
class Refusals:
    """What routing refused one schema for: without the rewrite, with it (empty: served)."""

    ref: CaseRef
    without: frozenset[str]
    with_rewrite: frozenset[str]


def check_refusals(data_dir: Path, refs: Sequence[CaseRef], *, whitespace: bool) -> list[Refusals]:
    """Each schema's refusals, without the rewrite and with it, in the order of ``refs``."""
    from grammar_guard.core.request.spec import CompileOptions
    from grammar_guard.core.settings import objects_open

    # The server's keys: open objects unless GRAMMAR_GUARD_OBJECTS closes them.
    options = CompileOptions(any_whitespace=whitespace, open_objects=objects_open(False))
    rewritten: list[frozenset[str]] = []
    changed: list[int] = []  # where the rewrite changed the schema
    for index, ref in enumerate(refs):
        schema = load_schema(data_dir, ref)
        rewritten.append(refusal_labels(schema, options))
        if _rewrite_changes(schema, options):
            changed.append(index)
    # A schema the rewrite leaves as sent is checked as sent either way: only
    # the changed ones (a quarter of the collections) are checked again.
    as_sent = list(rewritten)
    with rewrite_turned_off():
        for index in changed:
            as_sent[index] = refusal_labels(load_schema(data_dir, refs[index]), options)
    return [Refusals(*row) for row in zip(refs, as_sent, rewritten, strict=True)]


def refusal_labels(schema: Any, options: CompileOptions) -> frozenset[str]:
    """Why routing refuses ``schema``: its findings' keywords, or a label; empty when served."""
    from grammar_guard.core.engines.routing import route
    from grammar_guard.core.errors import InvalidGrammarError, UnenforcedKeywordError
    from grammar_guard.core.request.spec import GrammarSpec, RequestKind

    try:
        route(GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, options))
    except UnenforcedKeywordError as error:
        keywords = frozenset(finding.keyword for finding in error.findings)
        return keywords or frozenset({type(error).__name__})
    except InvalidGrammarError as error:
        plain = type(error) is InvalidGrammarError
        return frozenset({INVALID_SCHEMA if plain else type(error).__name__})
    except Exception as error:  # a fault in the check: shown, rather than ending a finished run
        return frozenset({f"error:{type(error).__name__}"})
    return frozenset()


def _rewrite_changes(schema: Any, options: CompileOptions) -> bool:
    from grammar_guard.core.request.spec import GrammarSpec, RequestKind
    from grammar_guard.core.schema.rewrite import rewritten_schema_text

    try:
        text = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, options).text
    except Exception:
        return False  # refused before any rewrite, the same either way
    try:
        return rewritten_schema_text(text) != text
    except Exception:
        return True  # the rewrite itself refused it: check it without


@contextlib.contextmanager
def rewrite_turned_off() -> Iterator[None]:
    """The plugin with its schema rewrite turned off: every schema read as sent.

    For this benchmark only. Raises if a module outside
    :data:`REWRITE_IMPORTERS` still holds the rewrite.
    """
    modules = [importlib.import_module(name) for name in REWRITE_IMPORTERS]
    original = getattr(modules[0], _REWRITE_FUNCTION)
    narrowing = importlib.import_module(_NARROWING_IMPORTER)
    _forget_remembered()
    try:
        with contextlib.ExitStack() as patches:
            for module in modules:
                patches.enter_context(mock.patch.object(module, _REWRITE_FUNCTION, _as_sent))
            patches.enter_context(mock.patch.object(narrowing, _NARROWING_FUNCTION, _no_narrower))
            holders = _holders_of(original)
            if holders:
                raise RuntimeError(
                    f"the schema rewrite is still bound in {', '.join(holders)}: "
                    "add the module to REWRITE_IMPORTERS (benchmarks/coverage/rewrite_effect.py)"
                )
            yield
    finally:
        _forget_remembered()


def _forget_remembered() -> None:
    """Every memo of the plugin forgets what it holds: rewritten texts, costs, parses.

    They remember results of the rewrite, which must neither leak into the
    run without it nor out of it into the run with it.
    """
    for name, module in list(sys.modules.items()):
        if name == _PLUGIN or name.startswith(_PLUGIN + "."):
            for value in list(vars(module).values()):
                # functools' caches are the ones with cache_info() beside cache_clear().
                if callable(getattr(value, "cache_info", None)) and callable(
                    getattr(value, "cache_clear", None)
                ):
                    value.cache_clear()


def _as_sent(text: str, open_objects: bool = False) -> str:
    return text  # the opening of open objects is a rewrite too: off with the rest


def _no_narrower(text: str) -> None:
    return None


def _holders_of(value: object) -> list[str]:
    """Every attribute of the plugin's modules that is ``value``, as ``module.attribute``.

    The plugin's only: routing runs nothing else, and a test module may hold
    the function it tests.
    """
    holders = []
    for name, module in list(sys.modules.items()):
        if name != _PLUGIN and not name.startswith(_PLUGIN + "."):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        holders += [f"{name}.{key}" for key, item in list(namespace.items()) if item is value]
    return sorted(holders)


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 appended to ``path`` in the block.

    xgrammar's native code warns on it for many schemas (thousands of lines
    over the full collections); the workers' log is where those lines go.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


# -- the tally ---------------------------------------------------------------


def tally_keywords(refusals: Sequence[Refusals], shown: int = SHOWN_KEYWORDS) -> dict[str, Any]:
    """Per label: schemas refused naming it and their valid instances, without and with.

    Labels by schemas refused without the rewrite, most first (then with it,
    then by name); ``other`` counts each schema naming any label past the
    first ``shown`` once, ``total`` each refused schema once.
    """
    labels = {label for row in refusals for label in row.without | row.with_rewrite}
    counts = {
        label: _count(refusals, lambda named, label=label: label in named) for label in labels
    }
    order = sorted(
        labels, key=lambda label: (-counts[label]["without"], -counts[label]["with"], label)
    )
    rest = frozenset(order[shown:])
    return {
        "schemas": len(refusals),
        "shown": shown,
        "keywords": [{"keyword": label, **counts[label]} for label in order],
        "other": _count(refusals, lambda named: bool(named & rest)) if rest else None,
        "total": _count(refusals, bool),
    }


def _count(refusals: Sequence[Refusals], names: Callable[[frozenset[str]], bool]) -> dict[str, int]:
    """Schemas whose refusal ``names`` matches, and their valid instances, without and with."""
    without = [row.ref for row in refusals if names(row.without)]
    with_rewrite = [row.ref for row in refusals if names(row.with_rewrite)]
    return {
        "without": len(without),
        "with": len(with_rewrite),
        "valid_without": sum(ref.valid_total for ref in without),
        "valid_with": sum(ref.valid_total for ref in with_rewrite),
    }
