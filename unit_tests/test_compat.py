"""Which vLLM versions the adapter accepts, and what it says about the others."""

from __future__ import annotations

import pytest
import vllm

from grammar_guard.vllm_adapter.compat import (
    SUPPORTED_RANGE,
    UnsupportedVLLMVersion,
    check_vllm_version,
    is_supported,
)

SUPPORTED = ["0.32.0", "0.32.5", "0.32.0+cpu", "0.32.1.dev3", "0.32.12", "0.32.3+cu128"]
UNSUPPORTED = ["0.31.9", "0.31.9+cpu", "0.33.0", "0.33.0.dev1", "1.0.0", "0.3.2", "garbage", ""]


@pytest.mark.parametrize("version", SUPPORTED)
def test_supported_versions(version: str) -> None:
    assert is_supported(version)
    assert check_vllm_version(version) == version


@pytest.mark.parametrize("version", UNSUPPORTED)
def test_unsupported_versions(version: str) -> None:
    assert not is_supported(version)
    with pytest.raises(UnsupportedVLLMVersion) as info:
        check_vllm_version(version)
    message = str(info.value)
    assert ">=0.32.0,<0.33.0" in message
    assert SUPPORTED_RANGE in message
    assert f"vLLM {version} is installed" in message


def test_installed_vllm_is_checked_by_default() -> None:
    assert check_vllm_version() == str(vllm.__version__)
