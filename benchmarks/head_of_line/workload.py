"""The head-of-line request stream: schemas, a seeded arrival schedule (plain data, so every
backend and both kinds of block replay the same simple stream), the presets."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

Schema = dict[str, Any]
ALONE, LOADED = "alone", "with slow"
BLOCKS = (ALONE, LOADED)
# Sampling seeds per round: the simple stream counts up from the round's
# first, the slow requests take the round's last ones.
SEEDS_PER_ROUND = 100_000
# The simple stream's rate, when not given, is this share of the rate at which the
# engine serves a burst of cache hits: the blocks must measure blocking, not a queue.
UTILIZATION = 0.5
BURST_REQUESTS = 16
CALIBRATION_SEED = 10 * SEEDS_PER_ROUND  # past any round's seeds


def sustainable_rate(served_per_s: float, ceiling: float) -> float:
    """``UTILIZATION`` of ``served_per_s`` in steps of 0.5 requests/s, from 0.5 to ``ceiling``."""
    steps = math.floor(served_per_s * UTILIZATION * 2) / 2
    return min(ceiling, max(0.5, steps))


class Kind(StrEnum):
    REPEATED = "repeated"  # one of a few small schemas: a cache hit once warm
    NEW_SMALL = "new-small"  # a small schema never seen before: a cheap compile
    SLOW = "slow"  # long bounded strings, never seen before: seconds of compile


SIMPLE = frozenset({Kind.REPEATED.value, Kind.NEW_SMALL.value})


def _object(properties: Schema) -> Schema:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _integer(minimum: int, maximum: int) -> Schema:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def _string(**bounds: Any) -> Schema:
    return {"type": "string", **bounds}


# Small and bounded, so a random-weight model closes them within a few tokens
# of compact JSON: enums, bounded integers, short strings, short arrays.
REPEATED_SCHEMAS: tuple[Schema, ...] = (
    _object({"color": {"enum": ["red", "green", "blue"]}, "n": _integer(0, 99)}),
    _object({"name": _string(maxLength=8), "age": _integer(0, 120)}),
    _object({"ok": {"type": "boolean"}}),
    _object({"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}),
    _object({"city": {"enum": ["Oslo", "Lima", "Pune"]}, "zip": _string(pattern="^[0-9]{4}$")}),
    _object({"level": _integer(-5, 5), "done": {"type": "boolean"}}),
)


def new_small_schema(name: str) -> Schema:
    """A small schema no engine has seen: a fresh property name makes a fresh cache key."""
    return _object({f"field_{name}": {"enum": ["x", "y", "z"]}, "n": _integer(0, 9)})


def slow_schema(name: str, max_lengths: Sequence[int]) -> Schema:
    """Seconds to compile against a 129k vocabulary; each string's bound must be new, or
    xgrammar's own cache (on in vLLM's backend) compiles it in milliseconds."""
    numbered = enumerate(max_lengths)
    return _object({f"note_{name}_{i}": _string(maxLength=length) for i, length in numbered})


@dataclass(frozen=True)
class Arrival:
    at_s: float  # from the start of its block
    kind: Kind
    schema: Schema
    max_tokens: int
    seed: int  # sampling seed: the simple stream samples alike with and without slow requests


@dataclass(frozen=True)
class Workload:
    """``rounds`` rounds of two blocks, alone and with slow requests, the simple stream the
    same in both; every schema a function of its round and place (docs/head-of-line.md).

    The defaults are the full run's. A slow schema every 7.5 s, alternately one and two new
    long strings: about 2.5 s and 5 s of compile each on an idle 2-core machine, so vLLM's
    single grammar thread is busy about half of a loaded block and keeps up.
    """

    block_s: float = 30.0
    rounds: int = 2
    rate_per_s: float = 8.0  # simple requests, Poisson arrivals
    new_small_share: float = 0.1  # of simple requests
    slow_every_s: float = 7.5
    slow_strings: tuple[int, ...] = (1, 2)  # strings per slow schema, used in turn
    slow_max_length: int = 300  # the first string's bound; each later one is one longer
    simple_max_tokens: int = 32
    slow_max_tokens: int = 16
    seed: int = 0

    def schedule(self, round_index: int, *, with_slow: bool) -> list[Arrival]:
        """One block's arrivals in time order; the simple stream's depend on the round alone."""
        arrivals = self._simple(round_index)
        if with_slow:
            arrivals += self._slow(round_index)
        return sorted(arrivals, key=lambda arrival: arrival.at_s)

    def warm_up(self) -> list[Arrival]:
        """Every repeated schema once, so the blocks start with them cached, and a new one."""
        arrivals = [
            Arrival(0.05 * index, Kind.REPEATED, schema, self.simple_max_tokens, seed=index)
            for index, schema in enumerate(REPEATED_SCHEMAS)
        ]
        new = new_small_schema("warm-up")
        return [*arrivals, Arrival(0.5, Kind.NEW_SMALL, new, 8, seed=len(arrivals))]

    def burst(self) -> list[Arrival]:
        """Cache hits all due at once, the repeated schemas in turn: the engine's capacity."""
        schemas = itertools.cycle(REPEATED_SCHEMAS)
        return [
            Arrival(0.0, Kind.REPEATED, next(schemas), self.simple_max_tokens, seed)
            for seed in range(CALIBRATION_SEED, CALIBRATION_SEED + BURST_REQUESTS)
        ]

    def _simple(self, round_index: int) -> list[Arrival]:
        rng = random.Random(self.seed + round_index)
        first_seed = round_index * SEEDS_PER_ROUND
        arrivals: list[Arrival] = []
        at = rng.expovariate(self.rate_per_s)
        while at < self.block_s:
            if rng.random() < self.new_small_share:
                kind = Kind.NEW_SMALL
                schema = new_small_schema(f"{round_index}_{len(arrivals)}")
            else:
                kind, schema = Kind.REPEATED, rng.choice(REPEATED_SCHEMAS)
            seed = first_seed + len(arrivals)
            arrivals.append(Arrival(at, kind, schema, self.simple_max_tokens, seed))
            at += rng.expovariate(self.rate_per_s)
        return arrivals

    def _slow(self, round_index: int) -> list[Arrival]:
        # Due evenly, from half a period in.
        due = itertools.count(self.slow_every_s / 2, self.slow_every_s)
        times = list(itertools.takewhile(lambda at: at < self.block_s, due))
        strings = [self.slow_strings[index % len(self.slow_strings)] for index in range(len(times))]
        # Bounds count up across the whole run: no two strings share one.
        bounds = itertools.count(self.slow_max_length + round_index * sum(strings))
        first_seed = (round_index + 1) * SEEDS_PER_ROUND - len(times)
        arrivals: list[Arrival] = []
        for index, (at, count) in enumerate(zip(times, strings, strict=True)):
            schema = slow_schema(f"{round_index}_{index}", list(itertools.islice(bounds, count)))
            arrivals.append(
                Arrival(at, Kind.SLOW, schema, self.slow_max_tokens, first_seed + index)
            )
        return arrivals


FULL = Workload()
QUICK = replace(FULL, block_s=15.0, rounds=1)
