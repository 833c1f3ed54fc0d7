"""grammar-guard's cache metrics on vLLM's ``/metrics``, whichever process compiles.

The cache lives in the engine-core process; ``/metrics`` is served by the
API-server process that spawned it. Each engine process publishes its
snapshot as a small JSON file under ``<base>/<parent pid>/<pid>.json``; a
process reads the files of its own (live) children and adds its in-process
caches. That is what the Prometheus collector exports and what
:func:`metrics_snapshot` returns, so an in-process ``LLM`` and a served engine
read the same way.

``GRAMMAR_GUARD_METRICS_DIR`` moves ``<base>`` (default: a folder in the
system's temporary directory). Whoever can write ``<base>`` decides what
``/metrics`` shows and where a publisher's write lands, so ``<base>`` is used
only while it is private (``core.private_folder``); one that is not is
refused with one log line, and each process serves its own metrics only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import (
    REGISTRY,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from vllm.logger import init_logger

from grammar_guard.core.metrics import (
    CacheMetrics,
    Counter,
    Gauge,
    LabelledCounter,
    MetricsSnapshot,
)
from grammar_guard.core.private_folder import (
    claim_private_folder,
    read_regular_file,
    write_file_atomically,
)

logger = init_logger(__name__)

METRICS_DIR_ENV = "GRAMMAR_GUARD_METRICS_DIR"
# Bursts of hits are folded into one write at most this often.
PUBLISH_INTERVAL_S = 0.2
# A snapshot is a few kB (its labels come from bounded sets); a far larger file is none.
MAX_SNAPSHOT_BYTES = 1 << 20
_PURPOSE = "metrics shared between processes (/metrics shows the serving process's own only)"

_HELP = {
    Counter.HITS: "Requests answered without starting a compile (finished or in-flight entry).",
    Counter.MISSES: "Requests that started a compile.",
    Counter.COMPILES: "Compiles that finished, successfully or not.",
    LabelledCounter.COMPILES_BY_ENGINE: "Compiles that finished, successfully or not, by the "
    "engine that ran them; none: refused before any engine ran, or loaded from the "
    "persistent cache.",
    Counter.COMPILE_ERRORS: "Distinct invalid grammars found, by the API process's parse or "
    "by an engine compile.",
    Counter.COMPILE_TIMEOUTS: "Compiles that outlived their requests' timeout (once per compile).",
    Counter.COMPILE_CRASHES: "Compiles whose worker process died under them (a signal, an "
    "exit), the hard-limit kill excepted; the key is compiled again after the marker's TTL.",
    Counter.QUICK_COMPILE_OVERRUNS: "Compiles in the engine's process past their CPU budget, "
    "demoted to a lower priority; their key's retries compile in a worker process.",
    Counter.ESCALATIONS: "Keys refused for good after too many timeouts or worker deaths.",
    Counter.EVICTIONS: "Entries evicted to stay under the byte or entry bound.",
    Counter.DISK_HITS: "Cache fills loaded from the persistent cache folder instead of compiled.",
    Counter.DISK_MISSES: "Persistent-cache lookups that found no file: a compile followed.",
    Counter.DISK_WRITES: "Compiled grammars written to the persistent cache folder.",
    Counter.DISK_ERRORS: "Persistent-cache files that could not be read, loaded or written.",
    Counter.DISK_UNPAID_LOADS: "Persistent-cache loads that cost more than a tenth of the "
    "compile they saved: the grammar served, its file removed.",
    Gauge.CACHE_BYTES: "Memory held by cached compiled grammars, in bytes.",
    Gauge.CACHE_ENTRIES: "Entries in the compile cache, in flight included.",
    LabelledCounter.UPGRADES: "Background compiles of reused keys onto the engine with the "
    "faster masks, by outcome; done: later requests of the key use it.",
    LabelledCounter.UNENFORCED: "Requests accepted (GRAMMAR_GUARD_UNENFORCED=warn) whose JSON "
    "schema uses this keyword where xgrammar does not enforce it; once per request and keyword.",
}

_lock = threading.Lock()
_install_lock = threading.Lock()  # registering collects, which takes _lock
_local_sources: list[CacheMetrics] = []
_collector_installed = False


def _base_dir() -> Path:
    configured = os.environ.get(METRICS_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"grammar-guard-metrics-{os.getuid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children_snapshots() -> Iterator[MetricsSnapshot]:
    base = _base_dir()
    try:
        if not claim_private_folder(base, _PURPOSE):
            return
    except OSError:  # it cannot be created, so no engine process has published there
        return
    for path in (base / str(os.getpid())).glob("*.json"):
        if not path.stem.isdigit() or not _pid_alive(int(path.stem)):
            continue
        # A file being replaced, a writer of another version, or no regular
        # file of a sane size: skip it this time.
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data, _ = read_regular_file(path, MAX_SNAPSHOT_BYTES)
            yield MetricsSnapshot.from_json(json.loads(data))


def add_local_source(metrics: CacheMetrics) -> None:
    with _lock:
        _local_sources.append(metrics)


def remove_local_source(metrics: CacheMetrics) -> None:
    with _lock:
        if metrics in _local_sources:
            _local_sources.remove(metrics)


def metrics_snapshot() -> MetricsSnapshot:
    """grammar-guard's numbers as ``/metrics`` shows them, summed over engines.

    In-process caches (an ``LLM`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
    plus the engine processes this process started. Index the result by the
    exported name, e.g. ``metrics_snapshot()["grammar_guard_compiles_total"]``.
    """
    with _lock:
        local = [source.snapshot() for source in _local_sources]
    return MetricsSnapshot.total([*local, *_children_snapshots()])


class SnapshotPublisher:
    """Writes one cache's snapshot for the parent process whenever it changes."""

    def __init__(self, metrics: CacheMetrics) -> None:
        self._metrics = metrics
        self._changed = threading.Event()
        self._stopped = False
        self._base = _base_dir()
        self._path = self._base / str(os.getppid()) / f"{os.getpid()}.json"
        self._thread = threading.Thread(
            target=self._loop, name="grammar-guard-metrics", daemon=True
        )

    def notify(self) -> None:
        self._changed.set()

    def start(self) -> None:
        add_local_source(self._metrics)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        remove_local_source(self._metrics)
        self._stopped = True
        self._changed.set()
        self._path.unlink(missing_ok=True)

    def _loop(self) -> None:
        while True:
            self._changed.wait()
            if self._stopped:
                return
            self._changed.clear()
            try:
                published = self._write()
            except OSError as exc:  # metrics must never hurt serving
                logger.warning("grammar-guard stopped publishing metrics: %s", exc)
                return
            if not published:  # the folder was refused, and that was logged
                return
            time.sleep(PUBLISH_INTERVAL_S)

    def _write(self) -> bool:
        """Publish the current snapshot; False when the metrics folder is refused."""
        if not claim_private_folder(self._base, _PURPOSE):
            return False
        self._path.parent.mkdir(exist_ok=True)
        snapshot = json.dumps(self._metrics.snapshot().to_json()).encode()
        write_file_atomically(self._path, snapshot, durable=False)  # metrics need no fsync
        return True


class _Collector:
    def collect(self) -> Iterator[Metric]:
        snapshot = metrics_snapshot()
        for counter in Counter:
            if counter is Counter.COMPILES:  # exported by engine, below
                continue
            family = CounterMetricFamily(f"grammar_guard_{counter.value}", _HELP[counter])
            family.add_metric([], snapshot.counters[counter])
            yield family
        for gauge in Gauge:
            yield GaugeMetricFamily(
                f"grammar_guard_{gauge.value}", _HELP[gauge], value=snapshot.gauges[gauge]
            )
        for labelled in LabelledCounter:
            family = CounterMetricFamily(
                f"grammar_guard_{labelled.value}", _HELP[labelled], labels=[labelled.label_name]
            )
            for label, value in sorted(snapshot.labelled_values(labelled).items()):
                family.add_metric([label], value)
            yield family
        histogram = snapshot.compile_seconds
        yield HistogramMetricFamily(
            "grammar_guard_compile_seconds",
            "Time from a compile's start (not its queueing) to its end.",
            buckets=histogram.cumulative(),
            sum_value=histogram.total,
        )


def install_collector() -> None:
    """Add grammar-guard's metrics to this process's default Prometheus registry (once)."""
    global _collector_installed
    with _install_lock:
        if _collector_installed:
            return
        REGISTRY.register(_Collector())
        _collector_installed = True
