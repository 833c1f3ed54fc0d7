"""Shared real-engine fixtures: one tiny model, one in-process engine, one server.

Starting vLLM costs tens of seconds on this project's 2-core machines, so
each engine is started once per session and shared by every test using it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from harness.server import GRAMMAR_GUARD_FLAGS, ApiServer, start_api_server

from grammar_guard.demo.tiny_model import build_tiny_model

if TYPE_CHECKING:
    from vllm import LLM


@pytest.fixture(scope="session")
def tiny_model() -> str:
    return str(build_tiny_model())


@pytest.fixture(scope="session")
def llm(tiny_model: str) -> Iterator[LLM]:
    """In-process engine core: the fast path; other tests cover the spawned one."""
    from grammar_guard.demo.engine import start_engine

    engine = start_engine(tiny_model)
    yield engine
    del engine


@pytest.fixture(scope="session")
def api_server(tiny_model: str) -> Iterator[ApiServer]:
    with start_api_server(
        tiny_model,
        *GRAMMAR_GUARD_FLAGS,
        # tool_choice="required" needs a tool parser; hermes makes vLLM send
        # the tool-call format as a structural tag.
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ) as server:
        yield server
