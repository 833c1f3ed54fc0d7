"""Compiled grammars on disk: kept across restarts, shared by engine processes.

One file per grammar, named after a hash of the cache key and of the engine's
fingerprint (tokenizer vocabulary and grammar-library release), so an engine
never even opens a file compiled for another tokenizer. Each file repeats the
fingerprint and the key in its header and checksums its payload; a file that
fails any check is ignored, counted as an error and removed, and the compile
that follows writes a good one in its place. A load never raises.

Those checks catch damage, not forgery: whoever can write the folder can
write any header. So the folder is used only while it is private (see
``private_folder``: created 0700, or owned by this user and writable by no
one else, not a symbolic link); one that is not is refused with one log line
and the cache runs in memory only. Even in a private folder a file is read
as if hostile: not through a symbolic link, not from a FIFO, not past the
folder's byte bound, and not decompressed past the size its header gives.

A file is kept only while loading it pays: at most a tenth (``LOAD_SHARE``)
of the compile it saves. A grammar is not written when even the least a
load of its size could cost (``LoadCostFloor``) is over that share of its
compile time; the header records the compile time, each load is timed, and
a file whose load cost more than that share serves this once and is removed
(``grammar_guard_disk_unpaid_loads_total``). See docs/persistent-cache.md.

Writes go to a temporary file in the same folder, are flushed to disk and
then renamed over the final name, so a reader in another process sees the
old file or the new one, never half of one. The folder is kept under a byte
budget by removing the least recently used files (a load touches its file).

File layout::

    grammar-guard compiled grammar v1\\n
    {"codec": "lzma-0", "compile_s": ..., "crc32": ..., "fingerprint": ..., "key": ..., ...}\\n
    payload: GrammarEngine.serialize(compiled) (raw_length bytes), lzma preset 0
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import lzma
import os
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grammar_guard.core.metrics import CacheMetrics, Counter
from grammar_guard.core.private_folder import (
    TEMP_PREFIX,
    TEMP_SUFFIX,
    claim_private_folder,
    open_regular_file,
    read_regular_file,
    write_file_atomically,
)

if TYPE_CHECKING:
    from grammar_guard.core.engines.base import CompiledGrammar, GrammarEngine
    from grammar_guard.core.request.spec import GrammarSpec

logger = logging.getLogger(__name__)

MAGIC = b"grammar-guard compiled grammar v1\n"
SUFFIX = ".grammar"
# A temporary file this old belongs to a writer that died mid-write.
STALE_TEMP_S = 3600.0
# Headers hold the key, and keys are at most 1 MiB of grammar text (input_limits).
_MAX_HEADER_BYTES = 8 << 20
_PURPOSE = "the persistent cache (compiled grammars stay in memory only)"


# The one codec written; a file naming any other is unusable (removed and compiled again).
CODEC = "lzma-0"
# liblzma allocates the dictionary a stream's header asks for, up to 1.5 GiB for
# a file of a few bytes. Decoding preset 0 needs 1.1 MiB.
_LZMA_MEMLIMIT = 32 << 20

# A load may cost at most this share of the compile it saves; a file whose
# load costs more is not worth keeping.
LOAD_SHARE = 0.1


@dataclass(frozen=True)
class LoadCostFloor:
    """The least a load can cost, from the serialised grammar's size (measured, see the docs).

    Below the cost of any load measured: a grammar is refused a file only
    when even this floor is over ``LOAD_SHARE`` of its compile, so none that
    would pay is refused; the timed load judges the rest.
    """

    fixed_s: float = 0.5e-3  # open, read, header, checks: a grammar of a few bytes
    per_byte_s: float = 10e-9  # xgrammar's JSON parse, most of a large grammar's load

    def __call__(self, raw_length: int) -> float:
        return self.fixed_s + self.per_byte_s * raw_length


def pays(load_s: float, compile_s: float) -> bool:
    """Whether a load of ``load_s`` seconds is worth a file that saves ``compile_s``."""
    return load_s <= LOAD_SHARE * compile_s


class _Unusable(Exception):
    """A file that exists but cannot serve this key; the message says why."""


def key_text(spec: GrammarSpec) -> str:
    """The cache key as text: kind, every compile option and the canonical grammar."""
    document = {
        "kind": spec.kind.value,
        "options": dataclasses.asdict(spec.options),
        "text": spec.text,
    }
    return json.dumps(document, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class StoredFile:
    """One file of a cache folder, as ``grammar-guard stats`` lists it."""

    path: Path
    size: int
    last_used: float  # the file's mtime: written or last loaded
    header: dict[str, Any] | None  # None: not a readable grammar file


class DiskStore:
    """Loads and saves one engine's compiled grammars in ``folder``.

    ``max_bytes`` bounds the folder, and so each file in it and each grammar's
    decompressed form: a grammar over it is neither stored nor loaded.
    """

    def __init__(
        self,
        folder: Path,
        engine: GrammarEngine,
        *,
        max_bytes: int,
        metrics: CacheMetrics,
        clock: Callable[[], float] = time.perf_counter,
        floor: LoadCostFloor = LoadCostFloor(),
    ) -> None:
        self.folder = folder
        self._engine = engine
        self._max_bytes = max_bytes
        self._metrics = metrics
        self._clock = clock  # times loads (tests pass their own)
        self._floor = floor

    def path_for(self, spec: GrammarSpec) -> Path:
        digest = hashlib.sha256(f"{self._engine.fingerprint}\n{key_text(spec)}".encode())
        return self.folder / f"{spec.kind.value}-{digest.hexdigest()[:40]}{SUFFIX}"

    def load(self, spec: GrammarSpec) -> CompiledGrammar | None:
        """The stored grammar of ``spec``, or None (missing or unusable); never raises.

        A load that cost more than ``LOAD_SHARE`` of the compile its header
        records still serves, and its file is removed.
        """
        path = self.path_for(spec)
        started = self._clock()
        try:
            if not claim_private_folder(self.folder, _PURPOSE):
                return None
            data, identity = read_regular_file(path, self._max_bytes)
        except FileNotFoundError:
            self._metrics.count(Counter.DISK_MISSES)
            return None
        except OSError as exc:
            self._error(f"cannot read {path}: {exc}")
            return None
        try:
            compiled, compile_s = self._decode(spec, data)
        except Exception as exc:  # whatever is wrong with the file, serving goes on
            self._error(f"ignoring {path}: {exc}; a fresh compile will replace it")
            _remove_if_same(path, identity)
            return None
        self._metrics.count(Counter.DISK_HITS)
        load_s = self._clock() - started
        if pays(load_s, compile_s):
            with contextlib.suppress(OSError):  # least recently used goes first
                os.utime(path)
        else:
            logger.info(
                "grammar-guard: removing %s from the cache folder: its load took %.3f s, "
                "more than a tenth of its %.3f s compile",
                spec.describe(),
                load_s,
                compile_s,
            )
            self._metrics.count(Counter.DISK_UNPAID_LOADS)
            _remove_if_same(path, identity)
        return compiled

    def save(
        self,
        spec: GrammarSpec,
        compiled: CompiledGrammar,
        serialized: bytes | None,
        compile_s: float,
    ) -> bool:
        """Store ``compiled`` (``serialized`` is its serialised form, if known); never raises.

        ``compile_s`` is how long its compile took. Returns whether a file was
        written: not for a grammar whose load could not pay (even the floor of
        a load's cost is over ``LOAD_SHARE`` of ``compile_s``), nor one larger
        than the whole budget (stored or decompressed), nor for a refused folder.
        """
        if not pays(self._floor(0), compile_s):
            return False  # a compile of milliseconds: no load is worth a file
        path = self.path_for(spec)
        try:
            if not claim_private_folder(self.folder, _PURPOSE):
                return False
            raw = self._engine.serialize(compiled) if serialized is None else serialized
            if not pays(self._floor(len(raw)), compile_s):
                return False
            data = self._encode(spec, compiled, raw, compile_s)
            largest = max(len(raw), len(data))
            if largest > self._max_bytes:
                logger.info(
                    "grammar-guard: not storing %s: %d bytes exceed the cache folder's %d",
                    spec.describe(),
                    largest,
                    self._max_bytes,
                )
                return False
            write_file_atomically(path, data, durable=True)
        except Exception as exc:  # a full disk or a read-only folder must not hurt serving
            self._error(f"cannot store {spec.describe()} in {self.folder}: {exc}")
            return False
        self._metrics.count(Counter.DISK_WRITES)
        self.enforce_budget()
        return True

    def enforce_budget(self) -> None:
        """Remove least recently used files until the folder fits the budget."""
        files = sorted(_grammar_files(self.folder), key=lambda item: item.last_used)
        total = sum(item.size for item in files)
        for item in files:
            if total <= self._max_bytes:
                break
            # Another process may have removed it already: it is gone either way.
            with contextlib.suppress(FileNotFoundError):
                item.path.unlink()
            total -= item.size
        _remove_stale_temps(self.folder)

    def _encode(
        self, spec: GrammarSpec, compiled: CompiledGrammar, raw: bytes, compile_s: float
    ) -> bytes:
        payload = lzma.compress(raw, preset=0)
        header = {
            "codec": CODEC,
            "compile_s": compile_s,
            "crc32": zlib.crc32(payload),
            "fingerprint": self._engine.fingerprint,
            "key": key_text(spec),
            "length": len(payload),
            "memory_bytes": compiled.memory_bytes,
            "raw_length": len(raw),
        }
        return MAGIC + json.dumps(header, ensure_ascii=False).encode() + b"\n" + payload

    def _decode(self, spec: GrammarSpec, data: bytes) -> tuple[CompiledGrammar, float]:
        """The grammar, and the compile time its header records (0 when it records none)."""
        header, payload = _split(data)
        if header.get("fingerprint") != self._engine.fingerprint:
            raise _Unusable("compiled for another tokenizer or library release")
        if header.get("key") != key_text(spec):
            raise _Unusable("holds another grammar")
        if header.get("length") != len(payload) or header.get("crc32") != zlib.crc32(payload):
            raise _Unusable("truncated or corrupted")
        if header.get("codec") != CODEC:
            raise _Unusable(f"unknown codec {header.get('codec')!r}")
        # Files written before raw_length was recorded may be as large as the bound.
        raw_length = header.get("raw_length", self._max_bytes)
        # Checked before use: a max_length of 0 (zlib) or -1 (lzma) means no limit at all.
        if not isinstance(raw_length, int) or not 0 <= raw_length <= self._max_bytes:
            raise _Unusable(f"raw_length {raw_length!r} is not within 0..{self._max_bytes}")
        compile_s = header.get("compile_s", 0.0)
        if not isinstance(compile_s, (int, float)):
            raise _Unusable(f"compile_s {compile_s!r} is not a number")
        return self._engine.deserialize(_decompress(payload, raw_length)), float(compile_s)

    def _error(self, message: str) -> None:
        self._metrics.count(Counter.DISK_ERRORS)
        logger.warning("grammar-guard cache folder: %s", message)


def _decompress(payload: bytes, max_bytes: int) -> bytes:
    """``payload`` decompressed; refused once it passes ``max_bytes``, before it grows further."""
    decompressor = lzma.LZMADecompressor(memlimit=_LZMA_MEMLIMIT)
    raw = decompressor.decompress(payload, max_bytes + 1)
    if len(raw) > max_bytes:
        raise _Unusable(f"decompresses to more than the {max_bytes} bytes its header allows")
    if not decompressor.eof:
        raise _Unusable("compressed payload ends early")
    return raw


def _split(data: bytes) -> tuple[dict[str, Any], bytes]:
    if not data.startswith(MAGIC):
        raise _Unusable("not a grammar-guard cache file")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise _Unusable("truncated header")
    header = json.loads(data[len(MAGIC) : end])
    if not isinstance(header, dict):
        raise _Unusable("malformed header")
    return header, data[end + 1 :]


def read_header(path: Path) -> dict[str, Any] | None:
    """A file's header without reading its payload; None when it is not a cache file."""
    try:
        with open_regular_file(path) as file:
            if file.read(len(MAGIC)) != MAGIC:
                return None
            line = file.readline(_MAX_HEADER_BYTES)
        header = json.loads(line)
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def stored_files(folder: Path) -> list[StoredFile]:
    """Every grammar file of ``folder`` with its header, most recently used first."""
    files = [
        dataclasses.replace(item, header=read_header(item.path)) for item in _grammar_files(folder)
    ]
    return sorted(files, key=lambda item: item.last_used, reverse=True)


def _grammar_files(folder: Path) -> Iterator[StoredFile]:
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    for entry in entries:
        if not entry.name.endswith(SUFFIX):
            continue
        try:
            status = entry.stat(follow_symlinks=False)  # a link's own size, never its target's
        except FileNotFoundError:  # removed by another process meanwhile
            continue
        yield StoredFile(Path(entry.path), status.st_size, status.st_mtime, None)


def _remove_if_same(path: Path, identity: os.stat_result) -> None:
    """Remove a bad file unless another process has already replaced it with a good one."""
    with contextlib.suppress(OSError):
        current = path.stat()
        if (current.st_dev, current.st_ino) == (identity.st_dev, identity.st_ino):
            path.unlink()


def _remove_stale_temps(folder: Path) -> None:
    cutoff = time.time() - STALE_TEMP_S
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith(TEMP_PREFIX) and entry.name.endswith(TEMP_SUFFIX):
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
