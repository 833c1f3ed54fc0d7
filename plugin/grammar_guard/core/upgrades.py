"""Reused keys move, in the background, onto the engine whose masks cost less.

Routing serves a new key from the engine that compiles it fast; for a key
with long bounded strings that is llguidance, whose typical mask costs
several times xgrammar's, on every token of every later request of the key.
A key reused many times (a tool's schema) would pay that forever to save
one compile. So once a key whose plan names an upgrade is requested for the
``upgrade_after``-th time, its grammar is compiled again on that engine,
on a thread of its own at the compile priority (in a worker process where
compiles are isolated), and later requests get the new grammar:

- requests already decoding keep the matcher they have;
- both grammars enforce the same language (routing offers an upgrade only
  for keys both engines enforce alike; ``integration_tests`` checks that on
  the shared schema collections);
- a failed upgrade (refused, or killed at the hard limit) is not retried:
  the key stays on the engine that serves it;
- the upgraded grammar replaces the first in the persistent cache too, so
  a restarted engine starts on it.

Only one upgrade compiles at a time: it must never hold more than one of the
workers that requests' own compiles wait for.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from grammar_guard.core.metrics import CacheMetrics, LabelledCounter, UpgradeOutcome

if TYPE_CHECKING:
    from grammar_guard.core.cache import Admission
    from grammar_guard.core.compilers import CompileResult
    from grammar_guard.core.engine import CompiledGrammar, CompilePlan
    from grammar_guard.core.spec import GrammarSpec

logger = logging.getLogger(__name__)

# A key's count once its upgrade has started: it never starts again.
_STARTED = -1


class Upgrades:
    """Counts each upgradable key's requests and starts its upgrade compile once reused.

    ``compile_part`` compiles a spec on the named part of the engine;
    ``install`` puts the result in place of the key's cached grammar and
    says whether it did. ``executor`` runs one upgrade at a time.
    """

    def __init__(
        self,
        *,
        plan: Callable[[GrammarSpec], CompilePlan],
        compile_part: Callable[[GrammarSpec, str], CompileResult],
        install: Callable[[GrammarSpec, CompileResult], bool],
        executor: Executor,
        after: int,
        max_tracked_keys: int,
        metrics: CacheMetrics,
    ) -> None:
        self._plan = plan
        self._compile_part = compile_part
        self._install = install
        self._executor = executor
        self._after = after
        self._max_tracked_keys = max_tracked_keys
        self._metrics = metrics
        self._lock = threading.Lock()
        # Requests seen per upgradable key, least recently seen first.
        self._counts: OrderedDict[GrammarSpec, int] = OrderedDict()

    def note(self, spec: GrammarSpec, admission: Admission[CompiledGrammar]) -> None:
        """Count one request of ``spec``; start its upgrade if this is the request that does.

        Runs on the admitting thread: a dictionary update for most requests.
        An upgrade starts only from a cache hit whose grammar is not on the
        upgrade's engine already (one loaded from the persistent cache may be).
        """
        if self._after == 0:
            return
        part = self._plan(spec).upgrade
        if part is None:
            return
        with self._lock:
            count = self._counts.pop(spec, 0)
            if count != _STARTED:
                count += 1
                if count >= self._after and admission.hit and self._needed(admission, part):
                    count = _STARTED
                    self._start(spec, part)
            self._counts[spec] = count
            while len(self._counts) > self._max_tracked_keys:
                self._counts.popitem(last=False)

    @staticmethod
    def _needed(admission: Admission[CompiledGrammar], part: str) -> bool:
        future = admission.future
        if future.exception() is not None:
            return False  # the key failed: there is nothing to upgrade
        return future.result().engine_name != part

    def _start(self, spec: GrammarSpec, part: str) -> None:
        # Shut down: the engine is closing and the upgrade is not needed.
        with contextlib.suppress(RuntimeError):
            self._executor.submit(self._run, spec, part)

    def _run(self, spec: GrammarSpec, part: str) -> None:
        try:
            result = self._compile_part(spec, part)
        except Exception as exc:
            logger.info(
                "grammar-guard: %s stays where it is: %s could not compile it: %s",
                spec.describe(),
                part,
                exc,
            )
            self._count(UpgradeOutcome.FAILED)
            return
        if self._install(spec, result):
            logger.info(
                "grammar-guard: %s moves to %s for its later requests", spec.describe(), part
            )
            self._count(UpgradeOutcome.DONE)
        else:
            self._count(UpgradeOutcome.DROPPED)

    def _count(self, outcome: UpgradeOutcome) -> None:
        self._metrics.count_labelled(LabelledCounter.UPGRADES, outcome.value)
