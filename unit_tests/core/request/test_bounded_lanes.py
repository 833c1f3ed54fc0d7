"""The validation lanes: size picks the lane, a full lane refuses at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from grammar_guard.core.request.spec import SMALL_SPEC_CHARS
from grammar_guard.core.request.validation_lanes import (
    BoundedLanes,
    LaneFullError,
    LaneSizes,
    bounded_size,
)

ONE_EACH = LaneSizes(small_threads=1, small_waiting=1, large_threads=1, large_waiting=1)
WAIT_S = 10.0  # far beyond what any task here takes; only a broken lane reaches it


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _blocked(release: threading.Event) -> str:
    release.wait()
    return "released"


def test_a_stuck_large_input_never_delays_a_small_one(release: threading.Event) -> None:
    lanes = BoundedLanes("test-lanes", ONE_EACH)
    stuck = lanes.submit(SMALL_SPEC_CHARS, lambda: _blocked(release))
    assert lanes.submit(10, lambda: "small").result(timeout=WAIT_S) == "small"
    assert not stuck.done()


def test_a_full_lane_refuses_at_once_and_the_other_lane_still_takes_work(
    release: threading.Event,
) -> None:
    lanes = BoundedLanes("test-lanes", ONE_EACH)
    running = lanes.submit(SMALL_SPEC_CHARS, lambda: _blocked(release))
    waiting = lanes.submit(SMALL_SPEC_CHARS, lambda: "waited")
    with pytest.raises(LaneFullError, match="retry"):
        lanes.submit(SMALL_SPEC_CHARS, lambda: "refused")
    assert lanes.submit(1, lambda: "small").result(timeout=WAIT_S) == "small"
    release.set()
    assert running.result(timeout=WAIT_S) == "released"
    assert waiting.result(timeout=WAIT_S) == "waited"


def test_a_cancelled_waiting_task_gives_its_place_back(release: threading.Event) -> None:
    lanes = BoundedLanes("test-lanes", ONE_EACH)
    lanes.submit(SMALL_SPEC_CHARS, lambda: _blocked(release))
    given_up = lanes.submit(SMALL_SPEC_CHARS, lambda: "never run")
    assert given_up.cancel()
    taken = lanes.submit(SMALL_SPEC_CHARS, lambda: "taken")
    release.set()
    assert taken.result(timeout=WAIT_S) == "taken"


def test_bounded_size_counts_small_values_and_stops_at_the_limit() -> None:
    assert bounded_size("abc", 100) == 5
    assert bounded_size({"k": ["ab", None]}, 100) == 2 + 3 + 2 + 4 + 2
    huge = {"choices": ["x" * 10] * 1_000_000}
    assert 100 <= bounded_size(huge, 100) < 100 + 20
