"""DiskStore: compiled grammars on disk survive, are shared, and bad files never hurt.

Real files in a temporary folder, the small real tokenizer, and for sharing,
real processes started with ``spawn``. Loads are timed on a fake clock, on
which they take no time unless a test says otherwise, and each save names a
compile time: whether a load pays for its file is decided by the tests. Orders
of use are set with explicit modification times, never by waiting. Hostile
files (links, FIFOs, oversized entries, decompression bombs) are planted by
hand; memory is measured with ``tracemalloc``, a FIFO read in a thread whose
wait has a timeout.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import lzma
import multiprocessing
import os
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr
from unit_tests.conftest import COMPACT, EOS, VOCAB, SmallTokenizer
from unit_tests.core.test_private_folder import UNSAFE_FOLDERS, Loosen, finishes

from grammar_guard.core.compile.disk_store import (
    LOAD_SHARE,
    MAGIC,
    DiskStore,
    LoadCostFloor,
    key_text,
    read_header,
    stored_files,
)
from grammar_guard.core.engines.base import CompiledGrammar, GrammarEngine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine, XGrammarRecipe
from grammar_guard.core.metrics import CacheMetrics, Counter
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings

HANG_GUARD_S = 120.0
BUDGET = 64 << 20
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 4}},
    "required": ["name"],
}


# What a save says its compile took: a slow one, so every file pays unless a test says not.
COMPILE_S = 60.0


class Stopwatch:
    """A fake clock on which each load takes ``load_s`` (a load reads the clock twice)."""

    def __init__(self, load_s: float = 0.0) -> None:
        self.load_s = load_s
        self._readings = 0

    def __call__(self) -> float:
        self._readings += 1
        return self._readings * self.load_s


def _store(
    folder: Path,
    engine: GrammarEngine,
    max_bytes: int = BUDGET,
    *,
    clock: Callable[[], float] | None = None,
    floor: LoadCostFloor | None = None,
) -> DiskStore:
    metrics, clock, floor = CacheMetrics(), clock or Stopwatch(), floor or LoadCostFloor()
    return DiskStore(folder, engine, max_bytes=max_bytes, metrics=metrics, clock=clock, floor=floor)


def _count(store: DiskStore, counter: Counter) -> int:
    return store._metrics.snapshot().counters[counter]


def _matches(engine: GrammarEngine, compiled: CompiledGrammar, text: str) -> bool:
    matcher = engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    tokens = [VOCAB.index(char) for char in text] + [VOCAB.index(EOS)]
    return all(matcher.accept_token(token) for token in tokens) and matcher.is_terminated()


def _schema_spec(small: SmallTokenizer) -> GrammarSpec:
    return small.spec(RequestKind.JSON_SCHEMA, SCHEMA, COMPACT)


def _saved(small: SmallTokenizer, folder: Path, spec: GrammarSpec) -> DiskStore:
    store = _store(folder, small.engine)
    assert store.save(spec, small.engine.compile(spec), None, COMPILE_S)
    return store


def test_a_stored_grammar_loads_in_a_new_store_and_enforces_the_same_language(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    spec = _schema_spec(small)
    writer = _saved(small, tmp_path, spec)
    reader = _store(tmp_path, small.engine)  # a restart: nothing shared but the folder
    loaded = reader.load(spec)
    assert loaded is not None
    assert _matches(small.engine, loaded, '{"name":"abcd"}')
    assert not _matches(small.engine, loaded, '{"name":"abcde"}')
    assert not _matches(small.engine, loaded, '{"name": "ab"}')  # compact, as compiled
    assert _count(writer, Counter.DISK_WRITES) == 1 and _count(reader, Counter.DISK_HITS) == 1


def test_a_missing_grammar_is_a_miss(small: SmallTokenizer, tmp_path: Path) -> None:
    store = _store(tmp_path / "not-yet-created", small.engine)
    assert store.load(_schema_spec(small)) is None
    assert _count(store, Counter.DISK_MISSES) == 1 and _count(store, Counter.DISK_ERRORS) == 0


def test_keys_that_differ_only_in_options_are_separate_files(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    compact = _schema_spec(small)
    spaced = small.spec(RequestKind.JSON_SCHEMA, SCHEMA)
    store = _saved(small, tmp_path, compact)
    assert store.path_for(compact) != store.path_for(spaced)
    assert store.load(spaced) is None


def test_the_serialised_form_a_compiler_already_has_is_stored_as_is(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    spec = small.spec(RequestKind.REGEX, "[a-c]+")
    compiled = small.engine.compile(spec)
    store = _store(tmp_path, small.engine)
    assert store.save(spec, compiled, small.engine.serialize(compiled), COMPILE_S)
    loaded = store.load(spec)
    assert loaded is not None and _matches(small.engine, loaded, "cab")


# --- only files whose load pays: at most LOAD_SHARE of the compile it saves -----------


def test_a_grammar_whose_least_load_cost_is_over_a_tenth_of_its_compile_is_not_written(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    spec = _schema_spec(small)
    compiled = small.engine.compile(spec)
    size = len(small.engine.serialize(compiled))
    # On this floor a load costs a second a byte: it pays for a compile of ten seconds a byte.
    floor = LoadCostFloor(fixed_s=0.0, per_byte_s=1.0)
    store = _store(tmp_path, small.engine, floor=floor)
    assert not store.save(spec, compiled, None, size / LOAD_SHARE * 0.99)
    assert stored_files(tmp_path) == [] and _count(store, Counter.DISK_WRITES) == 0
    assert store.save(spec, compiled, None, size / LOAD_SHARE)
    assert _count(store, Counter.DISK_WRITES) == 1 and store.load(spec) is not None


def test_a_compile_quicker_than_any_load_could_pay_for_is_not_even_serialised(
    small: SmallTokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _schema_spec(small)
    compiled = small.engine.compile(spec)
    store = _store(tmp_path, small.engine, floor=LoadCostFloor(fixed_s=1.0, per_byte_s=0.0))

    def no_serialize(_compiled: object) -> bytes:
        raise AssertionError("serialised a grammar no load could pay for")

    monkeypatch.setattr(store._engine, "serialize", no_serialize)
    assert not store.save(spec, compiled, None, 1.0 / LOAD_SHARE * 0.99)
    assert stored_files(tmp_path) == [] and _count(store, Counter.DISK_ERRORS) == 0


@pytest.mark.parametrize("share", [LOAD_SHARE, LOAD_SHARE * 1.01], ids=["paid", "not paid"])
def test_a_load_that_did_not_pay_serves_once_and_its_file_is_removed(
    small: SmallTokenizer, tmp_path: Path, share: float
) -> None:
    spec = _schema_spec(small)
    _saved(small, tmp_path, spec)
    store = _store(tmp_path, small.engine, clock=Stopwatch(load_s=share * COMPILE_S))
    loaded = store.load(spec)
    assert loaded is not None and _matches(small.engine, loaded, '{"name":"ok"}')
    assert _count(store, Counter.DISK_HITS) == 1 and _count(store, Counter.DISK_ERRORS) == 0
    paid = share == LOAD_SHARE
    assert _count(store, Counter.DISK_UNPAID_LOADS) == (0 if paid else 1)
    assert store.path_for(spec).exists() == paid


def test_a_file_that_records_no_compile_time_serves_once_and_is_removed(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    """Written before compile times were recorded: nothing says its load pays."""
    spec = _schema_spec(small)
    path = _saved(small, tmp_path, spec).path_for(spec)
    data = path.read_bytes()
    header_end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC) : header_end])
    del header["compile_s"]
    path.write_bytes(MAGIC + json.dumps(header).encode() + data[header_end:])

    store = _store(tmp_path, small.engine, clock=Stopwatch(load_s=0.001))
    assert store.load(spec) is not None
    assert _count(store, Counter.DISK_UNPAID_LOADS) == 1 and not path.exists()


# --- files that cannot serve: ignored, counted, removed, replaced ----------------------


def _truncate(path: Path, _other: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_payload_byte(path: Path, _other: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def _not_a_cache_file(path: Path, _other: Path) -> None:
    path.write_bytes(b"\x00garbage" * 100)


def _header_only(path: Path, _other: Path) -> None:
    path.write_bytes(MAGIC)


def _another_grammar(path: Path, other: Path) -> None:
    path.write_bytes(other.read_bytes())  # a valid file, for another key


def _another_fingerprint(path: Path, _other: Path) -> None:
    data = path.read_bytes()
    header_end = data.index(b"\n", len(MAGIC))
    header = data[len(MAGIC) : header_end].replace(b'"xgrammar-', b'"xgrammar-0')
    path.write_bytes(MAGIC + header + data[header_end:])


def _another_codec(path: Path, _other: Path) -> None:
    """A codec an earlier release wrote (the payload is still lzma's: only the name tells)."""
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"codec": "lzma-0"', b'"codec": "zlib-6"', 1))


def _header_names_another_key(path: Path, other: Path) -> None:
    """A forgery: the file's own grammar and checksum, under a header naming another key."""
    data = path.read_bytes()
    header_end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC) : header_end])
    header["key"] = (read_header(other) or {})["key"]
    path.write_bytes(MAGIC + json.dumps(header).encode() + data[header_end:])


@pytest.mark.parametrize(
    "damage",
    [
        _truncate,
        _flip_a_payload_byte,
        _not_a_cache_file,
        _header_only,
        _another_grammar,
        _another_fingerprint,
        _another_codec,
        _header_names_another_key,
    ],
)
def test_an_unusable_file_is_ignored_counted_removed_and_replaced(
    small: SmallTokenizer, tmp_path: Path, damage: Callable[[Path, Path], None]
) -> None:
    spec = _schema_spec(small)
    other = small.spec(RequestKind.REGEX, "[0-9]+")
    store = _saved(small, tmp_path, spec)
    store.save(other, small.engine.compile(other), None, COMPILE_S)
    damage(store.path_for(spec), store.path_for(other))

    assert store.load(spec) is None  # no exception, whatever the damage
    assert _count(store, Counter.DISK_ERRORS) == 1 and _count(store, Counter.DISK_HITS) == 0
    assert not store.path_for(spec).exists()
    assert store.save(spec, small.engine.compile(spec), None, COMPILE_S)
    loaded = store.load(spec)
    assert loaded is not None and _matches(small.engine, loaded, '{"name":"ok"}')


def test_another_tokenizer_misses_without_loading_and_leaves_the_file(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    spec = _schema_spec(small)
    _saved(small, tmp_path, spec)
    swapped = list(VOCAB)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    info = xgr.TokenizerInfo(encoded_vocab=swapped, stop_token_ids=[VOCAB.index(EOS)])
    other = _CountingEngine(XGrammarEngine(info, compile_threads=1))

    other_store = _store(tmp_path, other)
    assert other_store.load(spec) is None
    assert other.deserialized == 0
    assert _count(other_store, Counter.DISK_MISSES) == 1
    assert _count(other_store, Counter.DISK_ERRORS) == 0
    assert _store(tmp_path, small.engine).load(spec) is not None  # the first engine's file


class _CountingEngine:
    """An engine that counts how often it was asked to load a grammar."""

    def __init__(self, engine: XGrammarEngine) -> None:
        self._engine = engine
        self.deserialized = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def deserialize(self, data: bytes) -> CompiledGrammar:
        self.deserialized += 1
        return self._engine.deserialize(data)


# --- the folder's bound ---------------------------------------------------------------


def _file_size(small: SmallTokenizer, tmp_path: Path, spec: GrammarSpec) -> int:
    store = _saved(small, tmp_path / "probe", spec)
    return store.path_for(spec).stat().st_size


def test_the_folder_stays_under_its_bound_least_recently_used_first(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    specs = [small.spec(RequestKind.REGEX, f"{letter}[a-z]{{3}}") for letter in "abcde"]
    size = _file_size(small, tmp_path, specs[0])
    folder = tmp_path / "bounded"
    # Room for three files of this size (the regexes differ in one letter only).
    store = _store(folder, small.engine, max_bytes=3 * size + size // 2)
    past = time.time() - 1000
    for age, spec in enumerate(specs[:3]):
        store.save(spec, small.engine.compile(spec), None, COMPILE_S)
        os.utime(store.path_for(spec), (past + age, past + age))
    assert store.load(specs[0]) is not None  # the oldest becomes the most recent

    store.save(specs[3], small.engine.compile(specs[3]), None, COMPILE_S)
    store.save(specs[4], small.engine.compile(specs[4]), None, COMPILE_S)

    kept = {item.path for item in stored_files(folder)}
    assert kept == {store.path_for(specs[i]) for i in (0, 3, 4)}
    assert sum(item.size for item in stored_files(folder)) <= 3 * size + size // 2


def test_a_grammar_larger_than_the_whole_bound_is_not_stored(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    spec = _schema_spec(small)
    store = _store(tmp_path, small.engine, max_bytes=100)
    assert not store.save(spec, small.engine.compile(spec), None, COMPILE_S)
    assert stored_files(tmp_path) == [] and _count(store, Counter.DISK_ERRORS) == 0


def test_temporary_files_of_dead_writers_are_removed_live_ones_kept(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    stale, live = tmp_path / ".tmp-dead.partial", tmp_path / ".tmp-live.partial"
    stale.write_bytes(b"half a grammar")
    live.write_bytes(b"a grammar being written")
    long_ago = time.time() - 7200
    os.utime(stale, (long_ago, long_ago))
    _saved(small, tmp_path, _schema_spec(small))
    assert not stale.exists() and live.exists()


def test_a_folder_that_cannot_be_written_is_an_error_not_a_crash(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    spec = _schema_spec(small)
    store = _store(blocker / "cache", small.engine)
    assert not store.save(spec, small.engine.compile(spec), None, COMPILE_S)
    assert store.load(spec) is None
    assert _count(store, Counter.DISK_ERRORS) == 2  # the write, then the read


# --- a folder others can write, and hostile files in it --------------------------------


@pytest.mark.parametrize(
    "loosen", [loosen for loosen, _ in UNSAFE_FOLDERS.values()], ids=UNSAFE_FOLDERS.keys()
)
def test_a_folder_others_can_write_is_refused_once_and_serving_goes_on_without_it(
    small: SmallTokenizer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    loosen: Loosen,
) -> None:
    wanted, permissive = _schema_spec(small), small.spec(RequestKind.REGEX, "[a-z{}:]+")
    shared = tmp_path / "shared"
    # What whoever could write the folder can do: a file for the wanted key
    # whose header is right in every field and whose grammar is another one.
    forger = _store(shared, small.engine)
    assert forger.save(wanted, small.engine.compile(permissive), None, COMPILE_S)
    forged = forger.path_for(wanted).read_bytes()
    folder = loosen(shared, monkeypatch)

    service = CompileService(small.engine, Settings(compile_workers=1, cache_dir=folder))
    try:
        with caplog.at_level(logging.WARNING):
            grammar = service.admit(wanted).future.result(timeout=HANG_GUARD_S)
            assert service.drain(HANG_GUARD_S)
            assert service.admit(small.spec(RequestKind.REGEX, "[0-9]+")).future.result(
                timeout=HANG_GUARD_S
            )
            assert service.drain(HANG_GUARD_S)
    finally:
        service.close("test over")

    assert _matches(small.engine, grammar, '{"name":"abcd"}')  # the wanted key's own grammar
    assert not _matches(small.engine, grammar, "{abc}")  # not the planted one's
    counters = service.metrics.snapshot().counters
    assert counters[Counter.DISK_HITS] == counters[Counter.DISK_WRITES] == 0
    assert [path.name for path in shared.iterdir()] == [forger.path_for(wanted).name]
    assert forger.path_for(wanted).read_bytes() == forged  # neither loaded nor rewritten
    refusals = [record for record in caplog.records if str(folder) in record.getMessage()]
    assert len(refusals) == 1 and "persistent cache" in refusals[0].getMessage()


def test_a_link_planted_as_an_entry_is_not_followed(small: SmallTokenizer, tmp_path: Path) -> None:
    spec = _schema_spec(small)
    target = _saved(small, tmp_path / "elsewhere", spec).path_for(spec)  # a valid entry
    original = target.read_bytes()
    store = _store(tmp_path / "cache", small.engine)
    (tmp_path / "cache").mkdir(mode=0o700)
    store.path_for(spec).symlink_to(target)

    assert store.load(spec) is None
    assert _count(store, Counter.DISK_ERRORS) == 1 and _count(store, Counter.DISK_HITS) == 0
    assert store.save(spec, small.engine.compile(spec), None, COMPILE_S)  # replaces the link itself
    assert target.read_bytes() == original
    assert not store.path_for(spec).is_symlink() and store.load(spec) is not None


def test_a_fifo_planted_as_an_entry_blocks_neither_a_load_nor_a_listing(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    spec = _schema_spec(small)
    store = _store(tmp_path, small.engine)
    os.mkfifo(store.path_for(spec))

    assert finishes(lambda: store.load(spec)) is None
    assert _count(store, Counter.DISK_ERRORS) == 1
    assert [item.header for item in finishes(lambda: stored_files(tmp_path))] == [None]


@contextlib.contextmanager
def _peak_memory() -> Iterator[list[int]]:
    """The peak of Python's allocations inside the block, in bytes (in the list, once it ends)."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
        peak.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


SMALL_BOUND = 4 << 20


def test_an_entry_over_the_folder_s_bound_is_refused_without_being_read(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    spec = _schema_spec(small)
    store = _store(tmp_path, small.engine, max_bytes=SMALL_BOUND)
    with store.path_for(spec).open("wb") as file:
        file.write(MAGIC)
        file.truncate(16 * SMALL_BOUND)  # sparse: a cache file in every byte it is asked for
    with _peak_memory() as peak:
        assert store.load(spec) is None
    assert peak[0] < SMALL_BOUND
    assert _count(store, Counter.DISK_ERRORS) == 1


BOMB_BYTES = 128 << 20
# A few kB that decompress to BOMB_BYTES of zeros, or a few bytes whose header
# makes the decoder allocate a 1 GiB dictionary.
BOMBS = ("lzma", "lzma dictionary")


@functools.cache
def _bomb(kind: str) -> bytes:
    if kind == "lzma dictionary":
        filters = [{"id": lzma.FILTER_LZMA2, "dict_size": 1 << 30}]
        return lzma.compress(b"x", format=lzma.FORMAT_XZ, filters=filters)
    compressor = lzma.LZMACompressor(preset=0)
    chunk = bytes(1 << 20)  # compressed a MiB at a time: the test never holds the bomb's output
    pieces = [compressor.compress(chunk) for _ in range(BOMB_BYTES // len(chunk))]
    return b"".join([*pieces, compressor.flush()])


@pytest.mark.parametrize("kind", BOMBS)
@pytest.mark.parametrize(
    "claimed",
    [{}, {"raw_length": 1000}, {"raw_length": BOMB_BYTES}],
    ids=["no size", "a size that lies", "a size over the bound"],
)
def test_a_decompression_bomb_is_refused_before_memory_grows_past_the_bound(
    small: SmallTokenizer, tmp_path: Path, kind: str, claimed: dict[str, int]
) -> None:
    spec = _schema_spec(small)
    store = _store(tmp_path, small.engine, max_bytes=SMALL_BOUND)
    payload = _bomb(kind)
    header = {
        "codec": "lzma-0",
        "crc32": zlib.crc32(payload),
        "fingerprint": small.engine.fingerprint,
        "key": key_text(spec),
        "length": len(payload),
        "memory_bytes": 1,
        **claimed,
    }
    store.path_for(spec).write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + payload)
    with _peak_memory() as peak:
        assert store.load(spec) is None
    # The output stops at the bound (held twice while it is joined), plus the decoder's own.
    assert peak[0] < 3 * SMALL_BOUND
    assert _count(store, Counter.DISK_ERRORS) == 1


# --- several processes on one folder --------------------------------------------------

ROUNDS = 25
# Each regex with a text it matches, to check every load in the worker.
SHARED = (("[a-c]{2}", "ab"), ("[0-9]+x", "12x"), ("(yes|no)+", "yesno"), ("a[a-z]*b", "azzb"))


def _hammer(recipe: XGrammarRecipe, folder: str, start: Any, results: Any) -> None:
    """One process: save and load the shared keys as fast as it can, checking each load."""
    engine = recipe.build()
    store = _store(Path(folder), engine)
    specs = [GrammarSpec.build(RequestKind.REGEX, regex, COMPACT) for regex, _ in SHARED]
    compiled = [engine.compile(spec) for spec in specs]
    bad_loads = 0
    start.wait(HANG_GUARD_S)
    for round_ in range(ROUNDS):
        for index, spec in enumerate(specs):
            store.save(spec, compiled[index], None, COMPILE_S)
            other = (index + round_) % len(specs)
            loaded = store.load(specs[other])
            if loaded is not None and not _matches(engine, loaded, SHARED[other][1]):
                bad_loads += 1
    counters = store._metrics.snapshot().counters
    results.put((counters[Counter.DISK_ERRORS], counters[Counter.DISK_HITS], bad_loads))


def test_processes_sharing_a_folder_never_see_half_a_file(
    small: SmallTokenizer, tmp_path: Path
) -> None:
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_hammer, args=(small.engine.recipe(), str(tmp_path), start, results))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=HANG_GUARD_S) for _ in workers]
    for worker in workers:
        worker.join(HANG_GUARD_S)
        assert worker.exitcode == 0

    assert [errors for errors, _, _ in reports] == [0, 0]
    assert [hits for _, hits, _ in reports] == [ROUNDS * len(SHARED)] * 2
    assert [bad for _, _, bad in reports] == [0, 0]
    store = _store(tmp_path, small.engine)
    for regex, _ in SHARED:
        assert store.load(GrammarSpec.build(RequestKind.REGEX, regex, COMPACT)) is not None
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".partial")]
