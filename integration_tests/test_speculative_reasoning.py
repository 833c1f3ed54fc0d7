"""Speculative decoding and reasoning parsers with grammar-guard on a real engine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration_tests.speculative_reasoning_run import (
    ANSWER_REGEX,
    REPEATED,
    THINKING_BUDGET,
    WRONG_DRAFTS_REGEX,
)

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report(tiny_model: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-m", "integration_tests.speculative_reasoning_run", tiny_model],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-6000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_drafts_the_grammar_allows_are_accepted(report: dict[str, Any]) -> None:
    result = report["results"]["drafts_accepted"]
    assert (result["text"], result["finish_reason"]) == (REPEATED, "stop")
    metrics = report["spec_metrics"]
    assert metrics["vllm:spec_decode_num_drafts"] > 0
    assert metrics["vllm:spec_decode_num_accepted_tokens"] > 0


def test_drafts_the_grammar_forbids_never_reach_the_output(report: dict[str, Any]) -> None:
    # The prompt keeps proposing "abc" after "abc abc "; the grammar wants "x".
    result = report["results"]["drafts_rejected"]
    assert result["finish_reason"] == "stop"
    assert re.fullmatch(WRONG_DRAFTS_REGEX, result["text"])


def test_grammar_applies_only_after_the_reasoning_section(report: dict[str, Any]) -> None:
    result = report["results"]["reasoning_first"]
    assert result["ended_reasoning"]
    assert result["finish_reason"] == "stop"
    assert re.fullmatch(ANSWER_REGEX, result["answer"])
    # The reasoning is free text from the whole vocabulary; anything other
    # than digits in it shows the grammar did not constrain it.
    assert result["reasoning"] and not re.fullmatch(r"[0-9]*", result["reasoning"])
    assert len(result["reasoning"]) >= THINKING_BUDGET  # one or more characters per token
