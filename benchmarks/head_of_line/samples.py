"""What the head-of-line benchmark records of each request, and how a run's records are grouped."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.head_of_line.workload import Kind

ALONE, LOADED = "alone", "with slow"
BLOCKS = (ALONE, LOADED)
SIMPLE = frozenset({Kind.REPEATED.value, Kind.NEW_SMALL.value})
# Per backend, per block: every request of every round.
Results = dict[str, dict[str, list["Sample"]]]


@dataclass
class Sample:
    """One request as the client saw it, with vLLM's engine-side timestamps."""

    kind: str
    round: int
    at_s: float  # due time from the start of its block
    send_lag_s: float  # how late the client sent it (event-loop delay)
    ttft_s: float | None = None  # from due time to the first token; None: none came
    wait_s: float | None = None  # engine: queued until first scheduled (grammar included)
    step_s: float | None = None  # engine: first scheduled until its first token
    output_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    done_s: float | None = None  # from due time to its last output; None: it failed

    @property
    def other_s(self) -> float | None:
        """The rest of the TTFT: the API process, the hops to the engine and back, send lag."""
        if self.ttft_s is None or self.wait_s is None or self.step_s is None:
            return None
        return self.ttft_s - self.wait_s - self.step_s


def present(values: list[float | None]) -> list[float]:
    """The figures that were measured: a request that failed has none."""
    return [value for value in values if value is not None]


def of_kinds(samples: list[Sample], kinds: frozenset[str]) -> list[Sample]:
    return [sample for sample in samples if sample.kind in kinds]
