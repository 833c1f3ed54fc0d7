"""Every plugin setting, read once from ``GRAMMAR_GUARD_*`` environment variables.

A bad value raises :class:`SettingsError` naming the variable, so a server
refuses to start instead of running with a setting it silently ignored.
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from grammar_guard.core.priority import MAX_NICENESS

T = TypeVar("T", int, float)

ENV_PREFIX = "GRAMMAR_GUARD_"
MIB = 1 << 20
# The lowest priority: compiles get the CPU the engine leaves them
# (docs/head-of-line.md: the only setting that met the latency goal).
DEFAULT_COMPILE_NICENESS = MAX_NICENESS


class SettingsError(ValueError):
    pass


class CompileIsolation(enum.Enum):
    """Where grammars compile (see docs/compile-isolation.md)."""

    PROCESS = "process"  # worker processes: a compile past its hard limit is killed
    THREAD = "thread"  # the compile pool's threads: no overhead, but nothing stops a compile


# The default hard limit, in compile timeouts: a compile that timed out may
# still land and serve a retry, up to the point where it is not worth a CPU.
KILL_AFTER_TIMEOUTS = 4


class UnenforcedPolicy(enum.Enum):
    """What to do with a JSON schema that asks for constraints the engine would not enforce."""

    REFUSE = "refuse"  # a 400 naming each keyword and where it is
    WARN = "warn"  # compile anyway; the API process logs and counts each keyword


UNENFORCED_VARIABLE = ENV_PREFIX + "UNENFORCED"


class EngineSelection(enum.Enum):
    """Which grammar engine compiles a request (see docs/routing.md)."""

    AUTO = "auto"  # per key: one that enforces it all, the faster of those
    XGRAMMAR = "xgrammar"
    LLGUIDANCE = "llguidance"


ENGINE_VARIABLE = ENV_PREFIX + "ENGINE"


def unenforced_policy_from_env(environ: Mapping[str, str] | None = None) -> UnenforcedPolicy:
    """``GRAMMAR_GUARD_UNENFORCED``, default ``refuse``; a bad value raises SettingsError."""
    environ = os.environ if environ is None else environ
    return _read_choice(environ, UNENFORCED_VARIABLE, UnenforcedPolicy.REFUSE)


def engine_selection_from_env(environ: Mapping[str, str] | None = None) -> EngineSelection:
    """``GRAMMAR_GUARD_ENGINE``, default ``auto``; a bad value raises SettingsError."""
    environ = os.environ if environ is None else environ
    return _read_choice(environ, ENGINE_VARIABLE, EngineSelection.AUTO)


E = TypeVar("E", bound=enum.Enum)


def _read_choice(environ: Mapping[str, str], variable: str, default: E) -> E:
    """One member of ``default``'s enum, named by its value in any case."""
    raw = environ.get(variable, "").strip()
    if not raw:
        return default
    choices = type(default)
    try:
        return choices(raw.lower())
    except ValueError:
        names = ", ".join(choice.value for choice in choices)
        raise SettingsError(f"{variable}={raw!r} must be one of {names}") from None


# A key's second request shows it is reused: from then on every token it is
# decoded with pays llguidance's slower mask, while the upgrade compile runs
# at the lowest priority on CPU the engine leaves idle.
DEFAULT_UPGRADE_AFTER = 2


def default_compile_workers() -> int:
    # Four at least: slow compiles arrive faster than they finish on a small
    # machine, and a new cheap grammar must find a worker free of them
    # (docs/head-of-line.md: two workers set the p99 at 6.5 s of waiting).
    return max(4, (os.cpu_count() or 1) // 2)


@dataclass(frozen=True)
class Settings:
    """Every plugin setting: the cache's, the compile pool's, routing's and the disk store's."""

    compile_timeout_s: float = 30.0
    max_retries: int = 2
    timeout_ttl_s: float | None = None  # None: the compile timeout
    max_bytes: int = 512 * MIB
    max_entries: int = 1024
    compile_workers: int = field(default_factory=default_compile_workers)
    compile_isolation: CompileIsolation = CompileIsolation.PROCESS
    compile_kill_after_s: float | None = None  # None: KILL_AFTER_TIMEOUTS compile timeouts
    # Added to the nice value of every compile (pool threads, worker processes).
    compile_niceness: int = DEFAULT_COMPILE_NICENESS
    # Persistent cache folder; None (the default) keeps compiled grammars in memory only.
    cache_dir: Path | None = None
    cache_dir_max_bytes: int = 1024 * MIB
    warmup_file: Path | None = None
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    engine: EngineSelection = EngineSelection.AUTO
    # The request of a key (counting the first) that starts its background
    # compile on the faster-masking engine; 0: never (docs/routing.md).
    upgrade_after: int = DEFAULT_UPGRADE_AFTER

    @property
    def ttl_s(self) -> float:
        return self.compile_timeout_s if self.timeout_ttl_s is None else self.timeout_ttl_s

    @property
    def kill_after_s(self) -> float:
        """How long a compile may run in its process before it is killed."""
        if self.compile_kill_after_s is not None:
            return self.compile_kill_after_s
        return KILL_AFTER_TIMEOUTS * self.compile_timeout_s

    @property
    def max_tracked_keys(self) -> int:
        """How many keys' timeout counts are remembered (more are dropped oldest first)."""
        return 4 * self.max_entries

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
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

        def read_path(name: str, *, folder: bool) -> Path | None:
            variable = ENV_PREFIX + name
            raw = environ.get(variable, "").strip()
            if not raw:
                return None
            path = Path(raw).expanduser()
            # A folder may not exist yet (it is created on first write); a
            # file must, so that a typo stops start-up instead of warming nothing.
            if folder and path.exists() and not path.is_dir():
                raise SettingsError(f"{variable}={raw!r} is not a folder")
            if not folder and not (path.is_file() and os.access(path, os.R_OK)):
                raise SettingsError(f"{variable}={raw!r} is not a readable file")
            return path

        timeout = read("COMPILE_TIMEOUT_S", float, defaults.compile_timeout_s, 0.001)
        cache_mb = read("CACHE_MB", float, defaults.max_bytes / MIB, 0.0)
        niceness = read("COMPILE_NICENESS", int, defaults.compile_niceness, 0)
        if niceness > MAX_NICENESS:
            raise SettingsError(
                f"{ENV_PREFIX}COMPILE_NICENESS={niceness} must be at most {MAX_NICENESS}"
            )
        return cls(
            compile_timeout_s=timeout,
            max_retries=read("MAX_RETRIES", int, defaults.max_retries, 0),
            timeout_ttl_s=read("TIMEOUT_TTL_S", float, timeout, 0.0),
            max_bytes=int(cache_mb * MIB),
            max_entries=read("CACHE_ENTRIES", int, defaults.max_entries, 1),
            compile_workers=read("COMPILE_WORKERS", int, defaults.compile_workers, 1),
            compile_isolation=_read_choice(
                environ, ENV_PREFIX + "COMPILE_ISOLATION", defaults.compile_isolation
            ),
            compile_kill_after_s=read(
                "COMPILE_KILL_AFTER_S", float, KILL_AFTER_TIMEOUTS * timeout, 0.001
            ),
            compile_niceness=niceness,
            cache_dir=read_path("CACHE_DIR", folder=True),
            cache_dir_max_bytes=int(
                read("CACHE_DIR_MB", float, defaults.cache_dir_max_bytes / MIB, 0.0) * MIB
            ),
            warmup_file=read_path("WARMUP", folder=False),
            unenforced=unenforced_policy_from_env(environ),
            engine=engine_selection_from_env(environ),
            upgrade_after=read("UPGRADE_AFTER", int, defaults.upgrade_after, 0),
        )
