"""Compile-cache settings, read once from ``GRAMMAR_GUARD_*`` environment variables.

A bad value raises :class:`SettingsError` naming the variable, so a server
refuses to start instead of running with a setting it silently ignored.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T", int, float)

ENV_PREFIX = "GRAMMAR_GUARD_"
MIB = 1 << 20


class SettingsError(ValueError):
    pass


def default_compile_workers() -> int:
    # Two at least, so one slow compile never queues every other key behind it.
    return max(2, (os.cpu_count() or 1) // 2)


@dataclass(frozen=True)
class CacheSettings:
    compile_timeout_s: float = 30.0
    max_retries: int = 2
    timeout_ttl_s: float | None = None  # None: the compile timeout
    max_bytes: int = 512 * MIB
    max_entries: int = 1024
    compile_workers: int = field(default_factory=default_compile_workers)

    @property
    def ttl_s(self) -> float:
        return self.compile_timeout_s if self.timeout_ttl_s is None else self.timeout_ttl_s

    @property
    def max_tracked_keys(self) -> int:
        """How many keys' timeout counts are remembered (more are dropped oldest first)."""
        return 4 * self.max_entries

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CacheSettings:
        environ = os.environ if environ is None else environ
        defaults = cls()

        def read(name: str, parse: Callable[[str], T], default: T, minimum: T) -> T:
            variable = ENV_PREFIX + name
            raw = environ.get(variable, "").strip()
            if not raw:
                return default
            try:
                value = parse(raw)
            except ValueError:
                raise SettingsError(f"{variable}={raw!r} is not a number") from None
            if not math.isfinite(value) or value < minimum:
                raise SettingsError(f"{variable}={raw!r} must be at least {minimum}")
            return value

        timeout = read("COMPILE_TIMEOUT_S", float, defaults.compile_timeout_s, 0.001)
        cache_mb = read("CACHE_MB", float, defaults.max_bytes / MIB, 0.0)
        return cls(
            compile_timeout_s=timeout,
            max_retries=read("MAX_RETRIES", int, defaults.max_retries, 0),
            timeout_ttl_s=read("TIMEOUT_TTL_S", float, timeout, 0.0),
            max_bytes=int(cache_mb * MIB),
            max_entries=read("CACHE_ENTRIES", int, defaults.max_entries, 1),
            compile_workers=read("COMPILE_WORKERS", int, defaults.compile_workers, 1),
        )
