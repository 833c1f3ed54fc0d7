"""The soak's memory verdict: a leak past the warm-up fails it, a high-water climb does not."""

from __future__ import annotations

from benchmarks.load_soak import FLAT_FLOOR_MIB, Sample, memory_trend

GRAMMAR_MIB = 0.2
WARMUP = 1000


def _run(rss_after_warmup: float, leak_per_compile_mib: float) -> list[Sample]:
    """Two samples a second for 100 s: warm-up answered at 40 s, 5 compiles a second throughout."""
    samples = []
    for tick in range(200):
        at_s = tick / 2
        compiles = int(at_s * 5)
        answered = int(at_s * 25)
        if answered < WARMUP:  # climbing to the high-water mark
            rss = 800.0 + 300.0 * answered / WARMUP
        else:
            rss = 1100.0 + rss_after_warmup + leak_per_compile_mib * (compiles - 200)
        samples.append(
            Sample(
                at_s=at_s,
                rss_mib=rss,
                cache_mib=4.0,
                cache_entries=int(4.0 / GRAMMAR_MIB),
                evictions=max(0, compiles - 20),
                compiles=compiles,
                answered=answered,
            )
        )
    return samples


def test_a_climb_during_the_warm_up_is_flat() -> None:
    trend = memory_trend(_run(0.0, 0.0), WARMUP)
    assert trend.measured_from_s == 40.0
    assert trend.peak_mib - trend.baseline_mib == 300.0
    assert trend.flat


def test_keeping_every_grammar_past_the_warm_up_is_not_flat() -> None:
    trend = memory_trend(_run(0.0, GRAMMAR_MIB), WARMUP)
    assert trend.drift_mib > FLAT_FLOOR_MIB
    assert not trend.flat


def test_a_warm_up_that_outlasts_the_run_is_no_verdict() -> None:
    trend = memory_trend(_run(0.0, 0.0), warmup_requests=10**6)
    assert trend.measured_from_s is None
    assert not trend.flat
