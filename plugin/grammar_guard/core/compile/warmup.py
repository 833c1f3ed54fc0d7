"""Compile a list of known grammars in the background when an engine starts.

``GRAMMAR_GUARD_WARMUP`` names a JSON-lines file, one request spec a line::

    {"kind": "json_schema", "grammar": {"type": "object", ...}}
    {"kind": "regex", "grammar": "[a-z]+"}
    {"kind": "json_object"}

``kind`` is one of :class:`RequestKind`'s values; ``grammar`` is what a
request would send (JSON kinds accept the value or its text); an optional
``options`` object overrides the engine's compile options (today only
``any_whitespace``), which is rarely wanted: a key compiled with other options
than the server's is never hit. Blank lines and lines starting with ``#`` are
skipped; a bad line is reported and skipped, never fatal.

Warm-up entries are admitted through the same compile service as requests,
a few at a time so live requests keep compile threads, and the caller never
waits for them. They are requests like any other: one that compiles slower
than the compile timeout times out the same way (its compile still lands).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grammar_guard.core.compile.cache_entries import Admission, Clock
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

_FIELDS = frozenset({"kind", "grammar", "options"})


@dataclass(frozen=True)
class WarmupPlan:
    specs: list[GrammarSpec]
    # One line per skipped input line, e.g. "warmup.jsonl:3: unknown kind 'jsn'".
    problems: list[str] = field(default_factory=list)


def parse_warmup(lines: Iterable[str], options: CompileOptions, *, source: str) -> WarmupPlan:
    """The specs of a warm-up file's lines, each once, in file order."""
    specs: dict[GrammarSpec, None] = {}
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            entry = json.loads(stripped)
        except ValueError as exc:
            problems.append(f"{source}:{number}: not JSON: {exc}")
            continue
        try:
            specs.setdefault(spec_from_entry(entry, options))
        except (ValueError, InvalidGrammarError) as exc:
            problems.append(f"{source}:{number}: {exc}")
    return WarmupPlan(list(specs), problems)


def read_warmup_file(path: Path, options: CompileOptions) -> WarmupPlan:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return WarmupPlan([], [f"{path}: cannot read: {exc}"])
    return parse_warmup(text.splitlines(), options, source=str(path))


def spec_from_entry(entry: Any, options: CompileOptions) -> GrammarSpec:
    """One warm-up entry as the key a request for it would have; raises ``ValueError``."""
    if not isinstance(entry, dict):
        raise ValueError("expected a JSON object with 'kind' and 'grammar'")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (known: grammar, kind, options)")
    try:
        kind = RequestKind(entry.get("kind"))
    except ValueError:
        known = ", ".join(k.value for k in RequestKind)
        raise ValueError(f"unknown kind {entry.get('kind')!r} (known: {known})") from None
    if kind is not RequestKind.JSON_OBJECT and "grammar" not in entry:
        raise ValueError(f"a {kind.value} entry needs a 'grammar'")
    return GrammarSpec.build(kind, entry.get("grammar"), _options(entry, options))


def _options(entry: dict[str, Any], default: CompileOptions) -> CompileOptions:
    given = entry.get("options")
    if given is None:
        return default
    if not isinstance(given, dict) or set(given) - {"any_whitespace"}:
        raise ValueError("'options' may only hold 'any_whitespace'")
    any_whitespace = given.get("any_whitespace", default.any_whitespace)
    if not isinstance(any_whitespace, bool):
        raise ValueError("'any_whitespace' must be true or false")
    return replace(default, any_whitespace=any_whitespace)


@dataclass(frozen=True)
class WarmupResult:
    spec: GrammarSpec
    error: BaseException | None  # None: the grammar is in the cache
    seconds: float  # from admission to its answer


class WarmUp:
    """Admits ``specs`` on a background thread, at most ``parallel`` at a time."""

    def __init__(
        self,
        admit: Callable[[GrammarSpec], Admission[Any]],
        specs: Sequence[GrammarSpec],
        *,
        parallel: int,
        on_result: Callable[[WarmupResult], None] | None = None,
        on_finished: Callable[[list[WarmupResult]], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._admit = admit
        self._specs = list(specs)
        self._slots = threading.BoundedSemaphore(max(1, parallel))
        self._parallel = max(1, parallel)
        self._on_result = on_result
        self._on_finished = on_finished
        self._clock = clock
        self._lock = threading.Lock()
        self._results: list[WarmupResult] = []
        self._stopped = False
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="grammar-guard-warmup", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Admit nothing more; entries already admitted still report."""
        self._stopped = True

    def wait(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    @property
    def results(self) -> list[WarmupResult]:
        with self._lock:
            return list(self._results)

    def _run(self) -> None:
        try:
            self._admit_all()
            if self._on_finished is not None:
                self._on_finished(self.results)
        finally:
            self._finished.set()

    def _admit_all(self) -> None:
        for spec in self._specs:
            self._slots.acquire()
            if self._stopped:
                self._slots.release()
                break
            started = self._clock()
            self._admit(spec).future.add_done_callback(
                lambda future, spec=spec, started=started: self._landed(spec, started, future)
            )
        for _ in range(self._parallel):  # every admitted entry has answered
            self._slots.acquire()

    def _landed(self, spec: GrammarSpec, started: float, future: Future[Any]) -> None:
        error = None if future.cancelled() else future.exception()
        result = WarmupResult(spec, error, self._clock() - started)
        with self._lock:
            self._results.append(result)
        try:
            if self._on_result is not None:
                self._on_result(result)
        finally:
            self._slots.release()
