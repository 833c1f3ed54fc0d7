"""Shared real-engine fixtures: one tiny model and one engine of each configuration.

Starting vLLM costs tens of seconds on this project's 2-core machines, so
each engine is started once per session and shared by every test whose
flags agree (docs/testing.md lists which test uses which engine):

- ``llm``: ``LLM(...)`` with its engine core in this process;
- ``api_server``: the OpenAI-compatible server as a new operator starts it;
- ``spawned_engine``: one run of ``LLM(...)`` in a fresh interpreter with
  the engine core spawned, as vLLM starts it by default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from harness.server import (
    GRAMMAR_GUARD_FLAGS,
    ApiServer,
    start_api_server,
    without_plugin_settings,
)

from grammar_guard.demo.tiny_model import build_tiny_model
from integration_tests.first_request import DECODE_STREAMS

if TYPE_CHECKING:
    from vllm import LLM

REPO = Path(__file__).resolve().parents[1]
SPAWNED_RUN_LIMIT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``after_other_users`` run last: what they leave behind cannot reach others."""
    items.sort(key=lambda item: item.get_closest_marker("after_other_users") is not None)


@pytest.fixture(scope="session")
def tiny_model() -> str:
    return str(build_tiny_model())


@pytest.fixture(scope="session")
def llm(tiny_model: str) -> Iterator[LLM]:
    """In-process engine core: the fast path; ``spawned_engine`` covers the spawned one."""
    from grammar_guard.demo.engine import start_engine

    engine = start_engine(tiny_model)
    yield engine
    del engine


@pytest.fixture(scope="session")
def api_server(tiny_model: str) -> Iterator[ApiServer]:
    """The server with default plugin settings (no ``GRAMMAR_GUARD_*``), nothing warmed up.

    ``test_first_request.py`` measures its first requests and checks that no
    key was looked up before; it runs before ``test_openai_server.py``.
    """
    with start_api_server(
        tiny_model,
        *GRAMMAR_GUARD_FLAGS,
        # tool_choice="required" needs a tool parser; hermes makes vLLM send
        # the tool-call format as a structural tag. No grammar-guard setting.
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        plugin_defaults=True,
    ) as server:
        yield server


@pytest.fixture(scope="session")
def spawned_engine(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report of ``spawned_engine_run.py``: first requests, then every case, one engine."""
    output = tmp_path_factory.mktemp("spawned-engine") / "report.json"
    environment = {
        **without_plugin_settings(os.environ),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        # collective_rpc ships a function to the workers to read the apply hook's count.
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    }
    command = [sys.executable, "-m", "integration_tests.spawned_engine_run", tiny_model]
    run = subprocess.run(
        [*command, str(output), str(DECODE_STREAMS)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=SPAWNED_RUN_LIMIT_S,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    report: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
    return report
