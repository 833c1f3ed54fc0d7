"""Which vLLM versions the adapter accepts, and the release table against the installed source."""

from __future__ import annotations

import inspect

import pytest
import vllm
from vllm.v1.engine import EngineCoreOutput
from vllm.v1.structured_output import StructuredOutputManager

from grammar_guard.vllm_adapter.compat import (
    RELEASES,
    SUPPORTED_RANGE,
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
}
UNSUPPORTED = ["0.31.9", "0.31.9+cpu", "0.34.0", "0.34.0.dev1", "1.0.0", "0.3.2", "garbage", ""]


@pytest.mark.parametrize(("version", "minor"), SUPPORTED.items())
def test_supported_versions(version: str, minor: tuple[int, int]) -> None:
    assert is_supported(version)
    assert release_for(version).minor == minor


@pytest.mark.parametrize("version", UNSUPPORTED)
def test_unsupported_versions(version: str) -> None:
    assert not is_supported(version)
    with pytest.raises(UnsupportedVLLMVersion) as info:
        release_for(version)
    message = str(info.value)
    assert SUPPORTED_RANGE == ">=0.32.0,<0.34.0"
    assert SUPPORTED_RANGE in message
    assert f"vLLM {version} is installed" in message


def test_the_installed_vllm_is_a_supported_release() -> None:
    assert installed_release() is release_for(str(vllm.__version__))
    assert installed_release() in RELEASES


def test_the_release_table_matches_the_installed_vllm_source() -> None:
    """Each field names a difference the installed vLLM's own code shows (or lacks)."""
    release = installed_release()
    manager_init = inspect.getsource(StructuredOutputManager.__init__)
    assert release.masks_reasoning_ends == hasattr(
        StructuredOutputManager, "_masked_reasoning_ends"
    )
    assert release.failure_error_field == ("error" in EngineCoreOutput.__struct_fields__)
    assert release.names_engine_backend == ("self.backend_name" in manager_init)


@pytest.mark.parametrize(
    ("layout", "first_rows", "total"),
    [(MaskLayout.PACKED, [0, 3, 4, 8], 9), (MaskLayout.BLOCKS, [0, 4, 8, 12], 16)],
)
def test_mask_layouts(layout: MaskLayout, first_rows: list[int], total: int) -> None:
    rows_per_request = [3, 1, 4, 1]
    assert layout.first_rows(rows_per_request, 4) == first_rows
    assert layout.total_rows(rows_per_request, 4) == total
