"""Every plugin setting, read once from ``GRAMMAR_GUARD_*`` environment variables.

A bad value raises :class:`SettingsError` naming the variable, its value and
what it may be, so a server refuses to start instead of running with a setting
it silently ignored. A ``GRAMMAR_GUARD_*`` variable nothing reads (a misspelt
name, most likely) is logged once per process, with the closest known name.
"""

from __future__ import annotations

import difflib
import enum
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.errors import quoted_excerpt

logger = logging.getLogger(__name__)

T = TypeVar("T", int, float)

ENV_PREFIX = "GRAMMAR_GUARD_"
MIB = 1 << 20
# The range of nice increments POSIX systems accept.
MAX_NICENESS = 19
# The lowest priority: compiles get the CPU the engine leaves them
# (docs/head-of-line.md: the only setting that met the latency goal).
DEFAULT_COMPILE_NICENESS = MAX_NICENESS


# Bounds of the numeric settings, far past any useful value: they keep every
# value finite and every quantity derived from it usable.
# A year: each wait built from a number of seconds (the default kill limit is
# four of them) stays within what threading and sockets take as a timeout.
MAX_SECONDS = 365 * 24 * 3600
# 1 EiB: a size in bytes stays an exact integer below 2**63.
MAX_MIB = 1 << 40
# The largest C int: no count exceeds what a native or process call takes.
MAX_COUNT = (1 << 31) - 1


class SettingsError(ValueError):
    """A ``GRAMMAR_GUARD_*`` variable holds a value no setting can take."""


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
    XGRAMMAR = EngineName.XGRAMMAR.value
    LLGUIDANCE = EngineName.LLGUIDANCE.value

    @property
    def forced(self) -> EngineName | None:
        """The one engine this selection forces on every key; None for per-key routing."""
        return None if self is EngineSelection.AUTO else EngineName(self.value)


ENGINE_VARIABLE = ENV_PREFIX + "ENGINE"


class ObjectsPolicy(enum.Enum):
    """Which properties an object takes, and which items a tuple (see docs/routing.md)."""

    CLOSED = "closed"  # only those its schema lists, as xgrammar's strict mode
    OPEN = "open"  # also those its schema does not forbid, as JSON Schema says


OBJECTS_VARIABLE = ENV_PREFIX + "OBJECTS"


def unenforced_policy_from_env(environ: Mapping[str, str] | None = None) -> UnenforcedPolicy:
    """``GRAMMAR_GUARD_UNENFORCED``, default ``refuse``; a bad value raises SettingsError."""
    environ = os.environ if environ is None else environ
    return _read_choice(environ, UNENFORCED_VARIABLE, UnenforcedPolicy.REFUSE)


def engine_selection_from_env(environ: Mapping[str, str] | None = None) -> EngineSelection:
    """``GRAMMAR_GUARD_ENGINE``, default ``auto``; a bad value raises SettingsError."""
    environ = os.environ if environ is None else environ
    return _read_choice(environ, ENGINE_VARIABLE, EngineSelection.AUTO)


def objects_policy_from_env(environ: Mapping[str, str] | None = None) -> ObjectsPolicy:
    """``GRAMMAR_GUARD_OBJECTS``, default ``open``; a bad value raises SettingsError."""
    environ = os.environ if environ is None else environ
    return _read_choice(environ, OBJECTS_VARIABLE, ObjectsPolicy.OPEN)


def objects_open(disable_additional_properties: bool) -> bool:
    """Whether a key's objects are open: ``GRAMMAR_GUARD_OBJECTS`` and vLLM's flag.

    vLLM's ``disable_additional_properties`` closes objects for its
    ``guidance`` backend, whose objects are open like ours by default; it
    closes ours too, so either way of asking for closed objects is enough.
    """
    return not disable_additional_properties and objects_policy_from_env() is ObjectsPolicy.OPEN


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
        raise SettingsError(f"{variable}={quoted_excerpt(raw)} must be one of {names}") from None


def _read_number(
    environ: Mapping[str, str],
    name: str,
    parse: Callable[[str], T],
    default: T,
    bounds: tuple[T, T],
) -> T:
    """A number from ``bounds[0]`` to ``bounds[1]``; ``parse`` is ``int`` or ``float``."""
    variable = ENV_PREFIX + name
    raw = environ.get(variable, "").strip()
    if not raw:
        return default
    minimum, maximum = bounds
    try:
        value: T | None = parse(raw)
    except ValueError:  # also an int of more digits than Python converts
        value = None
    # One comparison refuses NaN, infinities and overflowing values too:
    # NaN compares false, and float() turns an overflow into an infinity.
    if value is None or not minimum <= value <= maximum:
        kind = "a whole number" if parse is int else "a number"
        raise SettingsError(
            f"{variable}={quoted_excerpt(raw)} is not {kind} from {minimum} to {maximum}"
        )
    return value


def _read_path(environ: Mapping[str, str], name: str, *, folder: bool) -> Path | None:
    variable = ENV_PREFIX + name
    raw = environ.get(variable, "").strip()
    if not raw:
        return None
    try:
        path = Path(raw).expanduser()
        # A folder may not exist yet (it is created on first write); a file
        # must, so that a typo stops start-up instead of warming nothing.
        if folder:
            usable, wanted = not path.exists() or path.is_dir(), "a folder"
        else:
            usable, wanted = path.is_file() and os.access(path, os.R_OK), "a readable file"
    except (OSError, RuntimeError, ValueError) as exc:  # a name too long, a NUL, an unknown ~user
        # An OSError's text repeats the whole path; its errno's text does not.
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SettingsError(
            f"{variable}={quoted_excerpt(raw)} is not a usable path: {reason}"
        ) from None
    if not usable:
        raise SettingsError(f"{variable}={quoted_excerpt(raw)} is not {wanted}")
    return path


# Read outside :meth:`Settings.from_env`: the metrics folder by the vLLM
# adapter, the tiny model's folder by the demo, a switch by the integration tests.
_READ_ELSEWHERE = ("METRICS_DIR", "TINY_MODEL_DIR", "CHECK_EVERY_UPGRADE")
KNOWN_VARIABLES = frozenset(
    ENV_PREFIX + name
    for name in (
        "COMPILE_TIMEOUT_S",
        "MAX_RETRIES",
        "TIMEOUT_TTL_S",
        "CACHE_MB",
        "CACHE_ENTRIES",
        "COMPILE_WORKERS",
        "COMPILE_ISOLATION",
        "COMPILE_KILL_AFTER_S",
        "COMPILE_NICENESS",
        "COMPILE_WORKER_MEMORY_MB",
        "CACHE_DIR",
        "CACHE_DIR_MB",
        "WARMUP",
        "UNENFORCED",
        "ENGINE",
        "OBJECTS",
        "UPGRADE_AFTER",
        "VALIDATION_BUDGET_S",
        *_READ_ELSEWHERE,
    )
)


class _UnknownVariableWarning:
    """Logs the ``GRAMMAR_GUARD_*`` variables nothing reads, once per process.

    Settings are read more than once per process (each engine config the
    API process validates, the backend), and one warning says it all.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._given = False

    def check(self, names: Iterable[str]) -> None:
        unknown = sorted(
            name for name in names if name.startswith(ENV_PREFIX) and name not in KNOWN_VARIABLES
        )
        if not unknown:
            return
        with self._lock:
            if self._given:
                return
            self._given = True
        logger.warning(
            "grammar-guard: ignoring %s* variables no setting reads: %s",
            ENV_PREFIX,
            ", ".join(map(_with_suggestion, unknown)),
        )


def _with_suggestion(name: str) -> str:
    closest = difflib.get_close_matches(name, KNOWN_VARIABLES, n=1)
    suggestion = f" (did you mean {closest[0]}?)" if closest else ""
    return quoted_excerpt(name) + suggestion


_unknown_variables = _UnknownVariableWarning()


# A key's second request shows it is reused: from then on every token it is
# decoded with pays llguidance's slower mask, while the upgrade compile runs
# at the lowest priority on CPU the engine leaves idle.
DEFAULT_UPGRADE_AFTER = 2


def default_compile_workers() -> int:
    # Four at least: slow compiles arrive faster than they finish on a small
    # machine, and a new cheap grammar must find a worker free of them
    # (docs/head-of-line.md: with two workers, cheap grammars waited behind slow ones).
    return max(4, (os.cpu_count() or 1) // 2)


def default_worker_memory_bytes() -> int:
    """Each compile worker's address space: a quarter of the machine, within 8 to 32 GiB.

    A worker maps torch and the tokenizer (gigabytes of address space)
    before it compiles anything, and every thread of a native compile
    may reserve an allocator arena: those are what the per-core share is for.
    A hostile compile that needs more fails in its worker instead of taking
    the machine's memory from the engine.
    """
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    share = min(max(physical // 4, 8 << 30), 32 << 30)
    return share + (os.cpu_count() or 1) * (128 << 20)


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
    # Each compile worker process's address-space limit; 0: none.
    compile_worker_memory_bytes: int = field(default_factory=default_worker_memory_bytes)
    # Persistent cache folder; None (the default) keeps compiled grammars in memory only.
    cache_dir: Path | None = None
    cache_dir_max_bytes: int = 1024 * MIB
    warmup_file: Path | None = None
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    engine: EngineSelection = EngineSelection.AUTO
    objects: ObjectsPolicy = ObjectsPolicy.OPEN
    # The request of a key (counting the first) that starts its background
    # compile on the faster-masking engine; 0: never (docs/routing.md).
    upgrade_after: int = DEFAULT_UPGRADE_AFTER
    # How long the API process judges one request's grammar before it answers
    # that it could not (a 400); the work itself is bounded by the input limit.
    validation_budget_s: float = 5.0

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
        _unknown_variables.check(environ)
        defaults = cls()

        def seconds(name: str, default: float, minimum: float) -> float:
            return _read_number(environ, name, float, default, (minimum, MAX_SECONDS))

        def mebibytes(name: str, default: int) -> int:
            return int(_read_number(environ, name, float, default / MIB, (0.0, MAX_MIB)) * MIB)

        def count(name: str, default: int, minimum: int) -> int:
            return _read_number(environ, name, int, default, (minimum, MAX_COUNT))

        timeout = seconds("COMPILE_TIMEOUT_S", defaults.compile_timeout_s, 0.001)
        return cls(
            compile_timeout_s=timeout,
            max_retries=count("MAX_RETRIES", defaults.max_retries, 0),
            timeout_ttl_s=seconds("TIMEOUT_TTL_S", timeout, 0.0),
            max_bytes=mebibytes("CACHE_MB", defaults.max_bytes),
            max_entries=count("CACHE_ENTRIES", defaults.max_entries, 1),
            compile_workers=count("COMPILE_WORKERS", defaults.compile_workers, 1),
            compile_isolation=_read_choice(
                environ, ENV_PREFIX + "COMPILE_ISOLATION", defaults.compile_isolation
            ),
            compile_kill_after_s=seconds(
                "COMPILE_KILL_AFTER_S", KILL_AFTER_TIMEOUTS * timeout, 0.001
            ),
            compile_niceness=_read_number(
                environ, "COMPILE_NICENESS", int, defaults.compile_niceness, (0, MAX_NICENESS)
            ),
            compile_worker_memory_bytes=mebibytes(
                "COMPILE_WORKER_MEMORY_MB", defaults.compile_worker_memory_bytes
            ),
            cache_dir=_read_path(environ, "CACHE_DIR", folder=True),
            cache_dir_max_bytes=mebibytes("CACHE_DIR_MB", defaults.cache_dir_max_bytes),
            warmup_file=_read_path(environ, "WARMUP", folder=False),
            unenforced=unenforced_policy_from_env(environ),
            engine=engine_selection_from_env(environ),
            objects=objects_policy_from_env(environ),
            upgrade_after=count("UPGRADE_AFTER", defaults.upgrade_after, 0),
            validation_budget_s=seconds("VALIDATION_BUDGET_S", defaults.validation_budget_s, 0.001),
        )
