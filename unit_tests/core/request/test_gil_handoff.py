"""The GIL changes hands more often while large inputs are judged, and only then."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from grammar_guard.core.request.gil_handoff import HANDOFF_INTERVAL_S, SwitchIntervalWhileRunning
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS
from grammar_guard.core.request.validation_lanes import BoundedLanes

DEFAULT_INTERVAL_S = 0.005
WAIT_S = 10.0


@pytest.fixture(autouse=True)
def default_interval() -> Iterator[None]:
    saved = sys.getswitchinterval()
    sys.setswitchinterval(DEFAULT_INTERVAL_S)
    yield
    sys.setswitchinterval(saved)


def test_the_interval_is_short_until_the_last_running_work_ends() -> None:
    handoff = SwitchIntervalWhileRunning(0.001)
    with handoff.running():
        assert sys.getswitchinterval() == pytest.approx(0.001)
        with handoff.running():
            assert sys.getswitchinterval() == pytest.approx(0.001)
        assert sys.getswitchinterval() == pytest.approx(0.001)
    assert sys.getswitchinterval() == pytest.approx(DEFAULT_INTERVAL_S)


def test_the_interval_is_restored_when_the_work_raises() -> None:
    handoff = SwitchIntervalWhileRunning(0.001)
    with pytest.raises(RuntimeError), handoff.running():
        raise RuntimeError("the check failed")
    assert sys.getswitchinterval() == pytest.approx(DEFAULT_INTERVAL_S)


def test_an_interval_set_by_someone_else_meanwhile_is_left_as_they_set_it() -> None:
    handoff = SwitchIntervalWhileRunning(0.001)
    with handoff.running():
        sys.setswitchinterval(0.002)
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_a_shorter_interval_already_set_is_kept() -> None:
    sys.setswitchinterval(0.0001)
    already = sys.getswitchinterval()  # rounded by the interpreter
    with SwitchIntervalWhileRunning(0.001).running():
        assert sys.getswitchinterval() == already
    assert sys.getswitchinterval() == already


def test_only_the_large_input_lane_shortens_it() -> None:
    lanes = BoundedLanes("handoff-test")
    small = lanes.submit(1, sys.getswitchinterval).result(WAIT_S)
    large = lanes.submit(SMALL_SPEC_CHARS, sys.getswitchinterval).result(WAIT_S)
    assert small == pytest.approx(DEFAULT_INTERVAL_S)
    assert large == pytest.approx(HANDOFF_INTERVAL_S)
    assert sys.getswitchinterval() == pytest.approx(DEFAULT_INTERVAL_S)
