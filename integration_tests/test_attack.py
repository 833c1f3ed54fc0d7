"""Hostile requests of every class at once cost only their own requests (issue 28's attack test).

The session's ``api_server`` (default plugin settings) gets one request of
each hostile class at the same moment while a benign client repeats a
cached ``choice`` request and a probe reads ``/health``; the benign client's
worst is held to its worst over as long a time alone, just before. It runs after every
other test: the hostile compiles it starts may still be running when it
ends. docs/reliability.md shows the same run against vLLM's own backends
(``python -m benchmarks.attack``).
"""

from __future__ import annotations

import pytest
from harness.attack import ANSWER_LIMIT_S, HOSTILE, run_attack
from harness.server import ApiServer

pytestmark = [pytest.mark.engine, pytest.mark.after_other_users]

HEALTH_BOUND_S = 1.0


def test_hostile_requests_at_once_hold_up_no_one_else(api_server: ApiServer) -> None:
    report = run_attack(api_server.base_url, api_server.model)
    summary = report.brief()
    assert report.alive_after, summary
    assert set(report.hostile) == {hostile.name for hostile in HOSTILE}
    for name, answer in report.hostile.items():
        assert answer.acceptable, (name, answer, api_server.log_tail())
        assert answer.seconds < ANSWER_LIMIT_S, (name, answer)
    assert report.health_worst_s <= HEALTH_BOUND_S, summary
    assert report.benign_failures == 0, summary
    assert report.benign_worst_s <= report.benign_bound_s, summary
