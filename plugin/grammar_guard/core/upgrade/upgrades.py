"""Reused keys move, in the background, onto the engine whose masks cost them less.

Routing serves a new key from the engine that compiles it fast; for a key
with long bounded strings that is llguidance. llguidance's typical mask
costs several times xgrammar's, but not inside bounded strings, where
xgrammar's cost grows with the bound: which engine masks a given key faster
is measured, not predicted (``mask_trial``). So for a key whose plan names
an upgrade:

- the first request of the key records the tokens it accepts, and so does
  each later one until one of them has shown enough of a path (a first
  request cut short by ``max_tokens`` or a cancel must not keep the key from
  its upgrade for good);
- its ``upgrade_after``-th request (with a path recorded) starts a compile
  of the key on the upgrade's engine, on a thread of its own at the compile
  priority (in a worker process where compiles are isolated);
- both grammars are then replayed along the recorded path, best of
  ``TRIAL_REPEATS``; if the new grammar fills its masks in at most
  ``MIN_GAIN`` of the time, later requests get it, else it is dropped;
- requests already decoding keep the matcher they have;
- both grammars enforce the same language (routing offers an upgrade only
  for keys both engines enforce alike; ``integration_tests`` checks that on
  the shared schema collections, and a replay the new grammar refuses
  keeps the key where it is);
- a slower upgrade, or one the new engine refuses, is not tried again for
  the key (one lost to a worker that could not start may be);
- an upgraded grammar replaces the first in the persistent cache too, so a
  restarted engine starts on it.

Only one upgrade runs at a time: it must never hold more than one of the
workers that requests' own compiles wait for.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from grammar_guard.core.engines.base import CompiledGrammar
from grammar_guard.core.errors import CompileCrashedError, InvalidGrammarError
from grammar_guard.core.metrics import CacheMetrics, LabelledCounter, UpgradeOutcome
from grammar_guard.core.upgrade.trial import PathRecorder, RecordedPath, fill_seconds

if TYPE_CHECKING:
    from grammar_guard.core.compile.cache_entries import Admission
    from grammar_guard.core.compile.in_thread import CompileResult
    from grammar_guard.core.engine_names import EngineName
    from grammar_guard.core.engines.base import CompilePlan, GrammarEngine, TokenMatcher
    from grammar_guard.core.request.spec import GrammarSpec

logger = logging.getLogger(__name__)

# The new grammar must fill the recorded path's masks in at most this share
# of the first one's time: a smaller gain is within the noise of one replay
# on a busy machine, and not worth a grammar that is often larger.
MIN_GAIN = 0.8
TRIAL_REPEATS = 3

# Seconds to fill masks along a path with a compiled grammar; None: refused.
MaskCost = Callable[[CompiledGrammar, Sequence[int]], float | None]
# Requests of one key recording at once, until a path is ready: a batch of a
# new key's requests arrives together, and any of them may end short.
MAX_RECORDINGS = 4


class _Key:
    """What is known of one upgradable key."""

    __slots__ = ("paths", "requests", "started")

    def __init__(self) -> None:
        self.requests = 0
        self.paths: list[RecordedPath] = []  # the newest MAX_RECORDINGS, oldest first
        self.started = False  # its upgrade ran or runs: never again

    def ready_path(self) -> RecordedPath | None:
        return next((path for path in self.paths if path.ready), None)


class Upgrades:
    """Records upgradable keys' paths, counts their requests, and upgrades them once reused.

    ``compile_on`` compiles a spec on the named engine of ``engine``;
    ``install`` puts the result in place of the key's cached grammar and
    says whether it did. ``executor`` runs one upgrade at a time. Specs of
    ``max_spec_chars`` or more are never upgraded. ``mask_cost`` times a
    grammar's masks along a path (tests pass their own).
    """

    def __init__(
        self,
        engine: GrammarEngine,
        *,
        plan: Callable[[GrammarSpec], CompilePlan],
        compile_on: Callable[[GrammarSpec, EngineName], CompileResult],
        install: Callable[[GrammarSpec, CompileResult], bool],
        executor: Executor,
        after: int,
        max_tracked_keys: int,
        metrics: CacheMetrics,
        max_spec_chars: int,
        mask_cost: MaskCost | None = None,
    ) -> None:
        self._plan = plan
        self._compile_on = compile_on
        self._install = install
        self._executor = executor
        self._after = after
        self._max_tracked_keys = max_tracked_keys
        self._metrics = metrics
        self._max_spec_chars = max_spec_chars
        self._mask_cost: MaskCost = mask_cost or (
            lambda compiled, path: fill_seconds(engine, compiled, path)
        )
        self._lock = threading.Lock()
        # Least recently seen first.
        self._keys: OrderedDict[GrammarSpec, _Key] = OrderedDict()

    def _target(self, spec: GrammarSpec) -> EngineName | None:
        # Runs on the thread admitting requests, where a large spec must not
        # even be parsed (its plan may not be made yet): such keys never move.
        if self._after == 0 or len(spec.text) >= self._max_spec_chars:
            return None
        return self._plan(spec).upgrade

    def _key(self, spec: GrammarSpec) -> _Key:
        """The key's record, made the most recent (lock held)."""
        key = self._keys.pop(spec, None) or _Key()
        self._keys[spec] = key
        while len(self._keys) > self._max_tracked_keys:
            self._keys.popitem(last=False)
        return key

    def matcher(
        self, spec: GrammarSpec, compiled: CompiledGrammar, matcher: TokenMatcher
    ) -> TokenMatcher:
        """``matcher`` of ``compiled``, recording its path if it is the first of a key to upgrade.

        A grammar already on the upgrade's engine (loaded so from the
        persistent cache) has nothing to prove: its requests pay no recorder.
        """
        target = self._target(spec)
        if target is None or compiled.engine_name == target:
            return matcher
        with self._lock:
            key = self._key(spec)
            if key.started or key.ready_path() is not None:
                return matcher
            path = RecordedPath()
            key.paths = [*key.paths[1 - MAX_RECORDINGS :], path]
            return PathRecorder(matcher, path)

    def note(self, spec: GrammarSpec, admission: Admission[CompiledGrammar]) -> None:
        """Count one request of ``spec``; start its upgrade if this is the request that does.

        Runs on the admitting thread: a dictionary update for most requests.
        An upgrade starts only from a cache hit whose grammar is not on the
        upgrade's engine already (one loaded from the persistent cache may
        be), once one of the key's requests has recorded enough of its path.
        """
        target = self._target(spec)
        if target is None:
            return
        with self._lock:
            key = self._key(spec)
            key.requests += 1
            recorded = key.ready_path()
            if (
                key.started
                or key.requests < self._after
                or not admission.hit
                or recorded is None
                or not self._needed(admission, target)
            ):
                return
            key.started = True
            key.paths = []  # the recorders still running write to nothing kept
            current = admission.future.result()
            path = recorded.snapshot()
            # Shut down: the engine is closing and the upgrade is not needed.
            with contextlib.suppress(RuntimeError):
                self._executor.submit(self._run, spec, target, current, path)

    @staticmethod
    def _needed(admission: Admission[CompiledGrammar], target: EngineName) -> bool:
        future = admission.future
        if future.exception() is not None:
            return False  # the key failed: there is nothing to upgrade
        return future.result().engine_name != target

    def _run(
        self, spec: GrammarSpec, target: EngineName, current: CompiledGrammar, path: RecordedPath
    ) -> None:
        try:
            result = self._compile_on(spec, target)
        except Exception as exc:
            logger.info(
                "grammar-guard: %s stays where it is: %s could not compile it: %s",
                spec.describe(),
                target,
                exc,
            )
            self._count(UpgradeOutcome.FAILED)
            if not isinstance(exc, (InvalidGrammarError, CompileCrashedError)):
                # Not the grammar's fault (its worker could not start, say): a
                # later request of the key may try again, on the same path. An
                # upgrade is optional, so one whose compile killed its worker
                # is not tried again: that would kill a worker per request.
                self._allow_retry(spec, path)
            return
        trial = self._trial(current, result.compiled, path.tokens)
        if isinstance(trial, str):
            logger.warning(
                "grammar-guard: %s stays where it is: its %s grammar refused the path "
                "a request of it took",
                spec.describe(),
                trial,
            )
            self._count(UpgradeOutcome.FAILED)
            return
        before, after = (1e6 * seconds / len(path.tokens) for seconds in trial)
        if after > MIN_GAIN * before:
            outcome = UpgradeOutcome.SLOWER
        elif self._install(spec, result):
            outcome = UpgradeOutcome.DONE
        else:
            outcome = UpgradeOutcome.DROPPED
        logger.info(
            "grammar-guard: upgrade of %s to %s: %s (masks %.1f us a token, against %.1f us)",
            spec.describe(),
            target,
            outcome.value,
            after,
            before,
        )
        self._count(outcome)

    def _allow_retry(self, spec: GrammarSpec, path: RecordedPath) -> None:
        # The path stays ready: the key's next cache hit retries, whatever the
        # requests recording (or not) while this upgrade ran.
        with self._lock:
            key = self._keys.get(spec)
            if key is not None:
                key.started = False
                key.paths = [path]

    def _trial(
        self, current: CompiledGrammar, upgraded: CompiledGrammar, path: list[int]
    ) -> tuple[float, float] | str:
        """The best of a few alternating replays of ``path`` with each grammar.

        Returns the engine name of a grammar that refused the path instead.
        """
        best = [float("inf"), float("inf")]
        for _ in range(TRIAL_REPEATS):
            for index, compiled in enumerate((current, upgraded)):
                seconds = self._mask_cost(compiled, path)
                if seconds is None:
                    return compiled.engine_name
                best[index] = min(best[index], seconds)
        return best[0], best[1]

    def _count(self, outcome: UpgradeOutcome) -> None:
        self._metrics.count_labelled(LabelledCounter.UPGRADES, outcome.value)
