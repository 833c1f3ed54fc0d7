"""Which vLLM versions the adapter accepts, and the release table against the installed source."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
from concurrent.futures import Future
from typing import Any

import pytest
import vllm
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.engine import EngineCoreOutput
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.request import StructuredOutputRequest

from grammar_guard.core.compile.inline_wait import InlineWaitBudget, WaitedForWhenPolled
from grammar_guard.vllm_adapter.compat import (
    NEWEST,
    RELEASES,
    TESTED_RANGE,
    MaskLayout,
    UnsupportedVLLMVersion,
    installed_release,
    is_supported,
    release_for,
)

pytestmark = pytest.mark.seam

SUPPORTED = {
    "0.32.0": (0, 32),
    "0.32.5": (0, 32),
    "0.32.0+cpu": (0, 32),
    "0.32.1.dev3": (0, 32),
    "0.32.12": (0, 32),
    "0.32.3+cu128": (0, 32),
    "0.33.0": (0, 33),
    "0.33.0.dev1": (0, 33),
    "0.33.2+cu130": (0, 33),
    "0.34.0": (0, 34),
    "0.34.1+cu130": (0, 34),
}
NEWER = {"0.35.0": (0, 35), "0.35.0.dev4": (0, 35), "0.40.2+cpu": (0, 40), "1.0.0": (1, 0)}
UNSUPPORTED = ["0.31.9", "0.31.9+cpu", "0.3.2", "0.9.0", "garbage", ""]


@pytest.mark.parametrize(("version", "minor"), SUPPORTED.items())
def test_supported_versions(version: str, minor: tuple[int, int]) -> None:
    assert is_supported(version)
    release = release_for(version)
    assert release.minor == minor
    assert release.tested


@pytest.mark.parametrize(("version", "minor"), NEWER.items())
def test_a_newer_release_behaves_as_the_newest_tested_one(
    version: str, minor: tuple[int, int]
) -> None:
    release = release_for(version)
    assert release.minor == minor
    assert not release.tested
    assert release.name == ".".join(map(str, minor))
    assert dataclasses.replace(release, minor=NEWEST.minor, tested=True) == NEWEST


@pytest.mark.parametrize("version", UNSUPPORTED)
def test_older_and_unparsable_versions_are_refused(version: str) -> None:
    assert not is_supported(version)
    with pytest.raises(UnsupportedVLLMVersion) as info:
        release_for(version)
    message = str(info.value)
    assert TESTED_RANGE == ">=0.32.0,<0.35.0"
    assert TESTED_RANGE in message
    assert f"vLLM {version} is installed" in message


def test_the_installed_vllm_is_a_supported_release() -> None:
    assert installed_release() is release_for(str(vllm.__version__))
    assert installed_release() in RELEASES


def test_the_release_table_matches_the_installed_vllm_source() -> None:
    """Each field names a difference the installed vLLM's own code shows (or lacks)."""
    release = installed_release()
    manager_init = inspect.getsource(StructuredOutputManager.__init__)
    assert release.failure_error_field == ("error" in EngineCoreOutput.__struct_fields__)
    assert release.names_engine_backend == ("self.backend_name" in manager_init)
    assert release.v1_model_runner == (
        importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is not None
    )


def test_vllm_asks_a_pending_grammar_s_done_so_a_quick_compile_is_waited_for_there() -> None:
    """The backend waits for a quick compile inside ``done()`` (inline_wait.py)."""
    waits: list[float] = []

    def lands(future: Future[Any], timeout: float) -> None:
        waits.append(timeout)
        future.set_result("grammar")

    params = SamplingParams(structured_outputs=StructuredOutputsParams(regex="[a-z]"))
    request = StructuredOutputRequest.from_sampling_params(params)
    assert request is not None
    request.grammar = WaitedForWhenPolled(InlineWaitBudget(waiter=lands))
    assert request.grammar == "grammar"  # what the scheduler reads before it schedules
    assert len(waits) == 1


@pytest.mark.parametrize(
    ("layout", "first_rows", "total"),
    [(MaskLayout.PACKED, [0, 3, 4, 8], 9), (MaskLayout.BLOCKS, [0, 4, 8, 12], 16)],
)
def test_mask_layouts(layout: MaskLayout, first_rows: list[int], total: int) -> None:
    rows_per_request = [3, 1, 4, 1]
    assert layout.first_rows(rows_per_request, 4) == first_rows
    assert layout.total_rows(rows_per_request, 4) == total
