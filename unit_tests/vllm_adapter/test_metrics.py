"""Cache metrics: snapshots, sums across engine processes, and the Prometheus exposition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import grammar_guard
from grammar_guard.core.metrics import (
    CacheMetrics,
    Counter,
    Gauge,
    LabelledCounter,
    MetricsSnapshot,
)
from grammar_guard.vllm_adapter import metrics_export

grammar_guard.register()

EXPORTED = {
    "grammar_guard_cache_hits_total",
    "grammar_guard_cache_misses_total",
    'grammar_guard_compiles_total{engine="none"}',
    "grammar_guard_compile_errors_total",
    "grammar_guard_compile_timeouts_total",
    "grammar_guard_escalations_total",
    "grammar_guard_evictions_total",
    "grammar_guard_cache_bytes",
    "grammar_guard_cache_entries",
}


@pytest.fixture(autouse=True)
def metrics_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(metrics_export.METRICS_DIR_ENV, str(tmp_path))
    return tmp_path


def _busy_metrics() -> CacheMetrics:
    metrics = CacheMetrics()
    metrics.count(Counter.HITS, 3)
    metrics.count(Counter.COMPILES, 3)
    metrics.count_labelled(LabelledCounter.COMPILES_BY_ENGINE, "llguidance", 2)
    metrics.set_size(cache_bytes=4096, cache_entries=2)
    metrics.observe_compile(0.3)
    metrics.observe_compile(700.0)  # beyond the last bound: the +Inf bucket
    return metrics


def _scrape() -> dict[str, float]:
    """Every grammar-guard sample but histogram buckets, by name and labels as exported."""
    text = generate_latest(REGISTRY).decode()
    scraped = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("grammar_guard_") or "le" in sample.labels:
                continue
            labels = ",".join(f'{name}="{value}"' for name, value in sample.labels.items())
            scraped[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return scraped


def test_snapshot_survives_json_and_sums() -> None:
    snapshot = _busy_metrics().snapshot()
    copy = MetricsSnapshot.from_json(json.loads(json.dumps(snapshot.to_json())))
    total = MetricsSnapshot.total([snapshot, copy])
    assert total.counters[Counter.HITS] == 6 and total.gauges[Gauge.CACHE_BYTES] == 8192
    assert total.compile_seconds.count == 4
    assert total.compile_seconds.total == pytest.approx(1400.6)


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    pairs = _busy_metrics().snapshot().compile_seconds.cumulative()
    assert pairs[-1] == ("+Inf", 2)
    assert dict(pairs)["0.5"] == 1 and dict(pairs)["0.25"] == 0


def test_on_change_is_called_for_every_update() -> None:
    calls: list[None] = []
    metrics = CacheMetrics(on_change=lambda: calls.append(None))
    metrics.count(Counter.MISSES)
    metrics.set_size(1, 1)
    metrics.observe_compile(0.1)
    assert len(calls) == 3


def test_prometheus_exposition_has_every_metric_and_the_histogram() -> None:
    metrics = _busy_metrics()
    metrics_export.add_local_source(metrics)
    try:
        scraped = _scrape()
    finally:
        metrics_export.remove_local_source(metrics)
    assert scraped.keys() >= EXPORTED
    assert scraped["grammar_guard_compile_seconds_count"] >= 2
    assert scraped["grammar_guard_cache_hits_total"] >= 3


def test_compiles_are_exported_by_the_engine_that_ran_them() -> None:
    metrics = _busy_metrics()
    metrics.count_labelled(LabelledCounter.COMPILES_BY_ENGINE, "xgrammar")
    metrics.count(Counter.COMPILES)
    snapshot = metrics.snapshot()
    assert snapshot.labelled_values(LabelledCounter.COMPILES_BY_ENGINE) == {
        "llguidance": 2,
        "xgrammar": 1,
        "none": 1,  # a compile that ran on no engine (refused first, or loaded from disk)
    }
    before = _scrape()
    metrics_export.add_local_source(metrics)
    try:
        after = _scrape()
    finally:
        metrics_export.remove_local_source(metrics)
    for engine, count in (("llguidance", 2), ("xgrammar", 1), ("none", 1)):
        name = f'grammar_guard_compiles_total{{engine="{engine}"}}'
        assert after[name] - before.get(name, 0) == count
    assert "grammar_guard_compiles_total" not in after  # one family, labelled only


def test_child_engine_snapshots_are_added_and_dead_ones_ignored(metrics_dir: Path) -> None:
    baseline = grammar_guard.metrics_snapshot()
    children = metrics_dir / str(os.getpid())
    children.mkdir()
    live_child = os.getppid()  # any live process stands in for an engine process
    (children / f"{live_child}.json").write_text(json.dumps(_busy_metrics().snapshot().to_json()))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                           capture_output=True, text=True)  # fmt: skip
    (children / f"{ended.stdout.strip()}.json").write_text(
        json.dumps(_busy_metrics().snapshot().to_json())
    )
    (children / "garbage.json").write_text("{")
    total = grammar_guard.metrics_snapshot()
    assert total["grammar_guard_cache_hits_total"] == baseline["grammar_guard_cache_hits_total"] + 3
    assert total["grammar_guard_cache_bytes"] == baseline["grammar_guard_cache_bytes"] + 4096


def test_publisher_writes_for_its_parent_and_cleans_up(metrics_dir: Path) -> None:
    publisher = metrics_export.SnapshotPublisher(_busy_metrics())
    publisher._write()
    written = metrics_dir / str(os.getppid()) / f"{os.getpid()}.json"
    assert MetricsSnapshot.from_json(json.loads(written.read_text())).counters[Counter.HITS] == 3
    publisher.stop()
    assert not written.exists()


# --- labelled counters ---------------------------------------------------------------------

UNENFORCED = 'grammar_guard_unenforced_total{keyword="%s"}'


def _unenforced_metrics(**counts: int) -> CacheMetrics:
    metrics = CacheMetrics()
    for keyword, count in counts.items():
        metrics.count_labelled(LabelledCounter.UNENFORCED, keyword, count)
    return metrics


def test_labelled_counts_sum_across_processes_and_survive_json() -> None:
    first = _unenforced_metrics(format=2, unknown=1).snapshot()
    second = MetricsSnapshot.from_json(
        json.loads(json.dumps(_unenforced_metrics(format=1, uniqueItems=4).snapshot().to_json()))
    )
    total = MetricsSnapshot.total([first, second])
    assert total[UNENFORCED % "format"] == 3
    assert total[UNENFORCED % "uniqueItems"] == 4 and total[UNENFORCED % "unknown"] == 1
    assert first.labelled[LabelledCounter.UNENFORCED] == {"format": 2, "unknown": 1}


def test_a_snapshot_written_before_labelled_counters_still_reads() -> None:
    old = _busy_metrics().snapshot().to_json()
    del old["labelled"]
    snapshot = MetricsSnapshot.from_json(old)
    assert snapshot.labelled[LabelledCounter.UNENFORCED] == {}
    assert snapshot.counters[Counter.HITS] == 3


def test_prometheus_exposition_carries_the_keyword_label() -> None:
    metrics = _unenforced_metrics(**{"format": 2, "not": 1})
    metrics_export.add_local_source(metrics)
    try:
        text = generate_latest(REGISTRY).decode()
    finally:
        metrics_export.remove_local_source(metrics)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "grammar_guard_unenforced_total"
    }
    assert samples[("grammar_guard_unenforced_total", (("keyword", "format"),))] >= 2
    assert samples[("grammar_guard_unenforced_total", (("keyword", "not"),))] >= 1
    families = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert families["grammar_guard_unenforced"] == "counter"
