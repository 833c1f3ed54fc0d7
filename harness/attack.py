"""Hostile requests sent at once to a running server while a benign client and a probe watch.

One request of each class of hostile input issue 28 found goes out at the
same moment; meanwhile a benign client repeats a cheap ``choice`` request
(a cache hit) and a probe reads ``/health``. What an operator notices is
what is measured: whether each hostile request got an answer (and which),
how long ``/health`` and the benign client waited at worst, and whether the
server is still up. ``integration_tests/test_attack.py`` holds the plugin's
server to the bounds; ``benchmarks/attack.py`` runs the same against vLLM's
built-in backends.
"""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

# A hostile request with no answer by then counts as unanswered.
ANSWER_LIMIT_S = 60.0
HEALTH_PERIOD_S = 0.25
# The benign client runs alone at least as long as the attack lasts (its
# slowest hostile request: 1.7 s on the development machine), so the worst
# alone is of as many requests as the worst during it, or more: the worst of
# five is no baseline for the worst of 40 or 200.
BENIGN_ALONE_S = 5.0
# How many of the slowest benign requests during the attack the report keeps.
SLOWEST_KEPT = 5
BENIGN = {"choice": ["yes", "no"]}


@dataclass(frozen=True)
class Hostile:
    """One class of hostile input: its name and its ``structured_outputs`` (built when sent)."""

    name: str
    structured_outputs: Callable[[], Any]
    max_tokens: int = 16


def _negated_classes() -> str:
    # Planned quick by a predictor that only counted repetitions of [a-z].
    return "".join(f"[^{letter}]{{0,63}}" for letter in "abcdefgh")


HOSTILE: tuple[Hostile, ...] = (
    Hostile(
        "unterminated string of escaped quotes as a schema",
        lambda: {"json": '"' + '\\"' * 250_000},
    ),
    Hostile(
        "a pattern of 200,000 escaped quotes",
        lambda: {"json": {"type": "string", "pattern": '\\"' * 200_000}},
    ),
    Hostile("choice of 100,000 strings", lambda: {"choice": [f"o{i}" for i in range(100_000)]}),
    Hostile(
        "EBNF grammar of 50,000 alternatives",
        lambda: {"grammar": "root ::= " + " | ".join(f'"w{i}"' for i in range(50_000))},
    ),
    Hostile("eight negated classes of up to 63", lambda: {"regex": _negated_classes()}),
    Hostile("a repeat count past the lexer's limit", lambda: {"regex": "a{99999999}"}),
    Hostile(
        "an unused definition with a 400-digit repeat count",
        lambda: {
            "json": {
                "type": "string",
                "maxLength": 10,
                "$defs": {"u": {"pattern": "a{" + "9" * 400 + "}"}},
            }
        },
    ),
    Hostile("a 5,000-digit repeat count", lambda: {"regex": "a{" + "9" * 5000 + "}"}),
    Hostile(
        "nesting 5,000 deep",
        lambda: {"json": '{"items":' * 5000 + "{}" + "}" * 5000},
    ),
)


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no answer within ANSWER_LIMIT_S (or the connection failed)
    seconds: float
    message: str

    @property
    def acceptable(self) -> bool:
        """An answer, and not a server error: a 200, a 4xx that says why, a 408."""
        return self.status is not None and self.status < 500


@dataclass
class AttackReport:
    hostile: dict[str, Answer] = field(default_factory=dict)
    health_worst_s: float = 0.0
    benign_alone_worst_s: float = 0.0
    benign_alone_count: int = 0
    benign_worst_s: float = 0.0
    benign_worst_at_s: float = 0.0
    benign_count: int = 0
    # (when it was sent, from the attack's start; how long it took), slowest first
    benign_slowest: list[tuple[float, float]] = field(default_factory=list)
    benign_failures: int = 0
    alive_after: bool = False

    @property
    def benign_bound_s(self) -> float:
        """The most a benign request may take during the attack: 3x alone, or 1 s more."""
        return max(3 * self.benign_alone_worst_s, self.benign_alone_worst_s + 1.0)

    def brief(self) -> str:
        """The summary as one string (a test's failure message keeps a string whole), answers
        as their status and time only."""
        answers = {
            name: [answer.status, round(answer.seconds, 2)] for name, answer in self.hostile.items()
        }
        return json.dumps({**self.summary(), "hostile": answers})

    def summary(self) -> dict[str, Any]:
        return {
            "hostile": {name: vars(answer) for name, answer in self.hostile.items()},
            "hostile_acceptable": sum(answer.acceptable for answer in self.hostile.values()),
            "health_worst_s": round(self.health_worst_s, 3),
            "benign_alone_worst_s": round(self.benign_alone_worst_s, 3),
            "benign_alone_count": self.benign_alone_count,
            "benign_worst_s": round(self.benign_worst_s, 3),
            "benign_worst_at_s": round(self.benign_worst_at_s, 3),
            "benign_count": self.benign_count,
            "benign_slowest": [(round(at, 3), round(took, 3)) for at, took in self.benign_slowest],
            "benign_failures": self.benign_failures,
            "alive_after": self.alive_after,
        }


def _completion(model: str, structured_outputs: Any, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": "Answer: ",
        "max_tokens": max_tokens,
        "seed": 7,
        "structured_outputs": structured_outputs,
    }


def _send(client: httpx.Client, body: Mapping[str, Any]) -> Answer:
    started = time.monotonic()
    try:
        response = client.post(
            "/v1/completions",
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
    except httpx.HTTPError as exc:
        return Answer(None, time.monotonic() - started, type(exc).__name__)
    return Answer(response.status_code, time.monotonic() - started, response.text[:300])


def _benign_once(client: httpx.Client, model: str) -> Answer:
    return _send(client, _completion(model, BENIGN, max_tokens=2))


class _Watch:
    """A thread that runs ``probe`` over and over until stopped, keeping the slowest times."""

    def __init__(self, probe: Callable[[], Answer], period_s: float) -> None:
        # (when it started, from the watch's start; how long it took), slowest first
        self.slowest: list[tuple[float, float]] = []
        self.count = 0
        self.failures = 0
        self._probe = probe
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def worst_s(self) -> float:
        return self.slowest[0][1] if self.slowest else 0.0

    @property
    def worst_at_s(self) -> float:
        return self.slowest[0][0] if self.slowest else 0.0

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            sent_at = time.monotonic() - started
            answer = self._probe()
            self.slowest = sorted(
                [*self.slowest, (sent_at, answer.seconds)], key=lambda sample: -sample[1]
            )[:SLOWEST_KEPT]
            self.count += 1
            self.failures += answer.status != 200
            self._stop.wait(self._period_s)


def _health(client: httpx.Client) -> Answer:
    started = time.monotonic()
    try:
        status = client.get("/health").status_code
    except httpx.HTTPError as exc:
        return Answer(None, time.monotonic() - started, type(exc).__name__)
    return Answer(status, time.monotonic() - started, "")


def run_attack(base_url: str, model: str) -> AttackReport:
    """Measure the benign client alone, then send every hostile request at once and watch.

    The watchers share this process with whatever ran before (a whole test
    session, with an engine in it): a full garbage collection there stops
    every thread for about a second, which the benign client would count as
    the server's. So the heap found here is frozen out of the collections
    for the attack's length, and only what the attack allocates is scanned.
    """
    gc.collect()
    gc.freeze()
    try:
        return _attack(base_url, model)
    finally:
        gc.unfreeze()


def _attack(base_url: str, model: str) -> AttackReport:
    report = AttackReport()
    limits = httpx.Timeout(ANSWER_LIMIT_S)
    with (
        httpx.Client(base_url=base_url, timeout=limits) as benign,
        httpx.Client(base_url=base_url, timeout=limits) as probe,
    ):
        _benign_once(benign, model)  # its key compiled and cached: the client's steady state
        with _Watch(lambda: _benign_once(benign, model), 0.0) as alone:
            threading.Event().wait(BENIGN_ALONE_S)
        report.benign_alone_worst_s, report.benign_alone_count = alone.worst_s, alone.count
        bodies = {
            hostile.name: _completion(model, hostile.structured_outputs(), hostile.max_tokens)
            for hostile in HOSTILE
        }
        with (
            _Watch(lambda: _health(probe), HEALTH_PERIOD_S) as health,
            _Watch(lambda: _benign_once(benign, model), 0.0) as steady,
            ThreadPoolExecutor(len(bodies)) as senders,
        ):
            futures = {
                name: senders.submit(_send_one, base_url, body) for name, body in bodies.items()
            }
            report.hostile = {name: future.result() for name, future in futures.items()}
        report.health_worst_s = health.worst_s
        report.benign_worst_s, report.benign_worst_at_s = steady.worst_s, steady.worst_at_s
        report.benign_count, report.benign_slowest = steady.count, steady.slowest
        report.benign_failures = steady.failures + alone.failures
        report.alive_after = _health(probe).status == 200
    return report


def _send_one(base_url: str, body: Mapping[str, Any]) -> Answer:
    with httpx.Client(base_url=base_url, timeout=httpx.Timeout(ANSWER_LIMIT_S)) as client:
        return _send(client, body)
