"""The soak's memory verdict: a leak fails it, a climb to a high-water mark before it does not."""

from __future__ import annotations

from benchmarks.load_soak import FLAT_MIB, Sample, memory_trend

GRAMMAR_MIB = 0.5
CLIMB_REQUESTS = 1000  # RSS climbs while these are answered, then levels
WINDOW = 1000


def _run(
    leak_per_compile_mib: float,
    seconds: int = 100,
    first_eviction_s: float = 4.0,
    compiles_per_s: float = 5.0,
) -> list[Sample]:
    """Two samples a second, 25 answers a second, the climb done at 40 s."""
    samples = []
    for tick in range(2 * seconds):
        at_s = tick / 2
        compiles = int(at_s * compiles_per_s)
        answered = int(at_s * 25)
        if answered < CLIMB_REQUESTS:
            rss = 800.0 + 300.0 * answered / CLIMB_REQUESTS
        else:
            rss = 1100.0 + leak_per_compile_mib * (compiles - 200)
        evictions = 1 if at_s >= first_eviction_s else 0
        samples.append(
            Sample(
                at_s=at_s,
                rss_mib=rss,
                cache_mib=4.0,
                cache_entries=int(4.0 / GRAMMAR_MIB),
                evictions=evictions,
                compiles=compiles,
                answered=answered,
            )
        )
    return samples


def test_a_climb_before_the_window_is_flat() -> None:
    trend = memory_trend(_run(0.0), WINDOW)
    assert trend.measured_from_s is not None and trend.measured_from_s > 40.0
    assert trend.peak_mib - trend.baseline_mib == 300.0
    assert trend.flat


def test_keeping_every_grammar_is_not_flat() -> None:
    trend = memory_trend(_run(GRAMMAR_MIB), WINDOW)
    assert trend.measured_from_s is not None
    assert trend.drift_mib > FLAT_MIB
    assert not trend.flat


def test_a_window_inside_the_climb_is_not_flat() -> None:
    """The soak stops at the first flat window, so no window of a climb may pass."""
    trend = memory_trend(_run(0.0, seconds=40), WINDOW // 2)
    assert trend.measured_from_s is not None
    assert not trend.flat


def test_a_window_that_began_before_the_cache_evicted_is_no_verdict() -> None:
    trend = memory_trend(_run(0.0, first_eviction_s=70.0), WINDOW)
    assert trend.bound_reached_s == 70.0
    assert trend.measured_from_s is None
    assert not trend.flat


def test_a_window_with_too_few_compiles_to_show_a_leak_is_not_flat() -> None:
    trend = memory_trend(_run(GRAMMAR_MIB, compiles_per_s=0.5), WINDOW)
    assert trend.measured_from_s is not None
    assert trend.drift_mib <= FLAT_MIB
    assert not trend.flat


def test_a_run_shorter_than_the_window_is_no_verdict() -> None:
    trend = memory_trend(_run(0.0), window_requests=10**6)
    assert trend.measured_from_s is None
    assert not trend.flat
