"""Cache metrics: snapshots, sums across engine processes, and the Prometheus exposition."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from unit_tests.core.test_private_folder import UNSAFE_FOLDERS, Loosen, finishes

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
    "grammar_guard_compile_crashes_total",
    "grammar_guard_quick_compile_overruns_total",
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


def _snapshot_text() -> str:
    return json.dumps(_busy_metrics().snapshot().to_json())


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
    (children / f"{live_child}.json").write_text(_snapshot_text())
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                           capture_output=True, text=True)  # fmt: skip
    (children / f"{ended.stdout.strip()}.json").write_text(_snapshot_text())
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


# --- a folder others can write, and hostile files in it --------------------------------

HITS = "grammar_guard_cache_hits_total"


def _plant_child(base: Path) -> Path:
    """Where this process reads a live engine process's snapshot under ``base`` (no file yet).

    Any live process stands in for the engine process: this one's parent.
    """
    children = base / str(os.getpid())
    children.mkdir(exist_ok=True)
    return children / f"{os.getppid()}.json"


@pytest.mark.parametrize(
    "loosen", [loosen for loosen, _ in UNSAFE_FOLDERS.values()], ids=UNSAFE_FOLDERS.keys()
)
def test_a_metrics_folder_others_can_write_is_refused_once_and_own_metrics_still_served(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    loosen: Loosen,
) -> None:
    baseline = grammar_guard.metrics_snapshot()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    _plant_child(shared).write_text(_snapshot_text())  # injected by whoever could write it
    folder = loosen(shared, monkeypatch)
    monkeypatch.setenv(metrics_export.METRICS_DIR_ENV, str(folder))
    local = _busy_metrics()
    metrics_export.add_local_source(local)
    try:
        with caplog.at_level(logging.WARNING):
            scrapes = [grammar_guard.metrics_snapshot() for _ in range(2)]
            published = metrics_export.SnapshotPublisher(_busy_metrics())._write()
    finally:
        metrics_export.remove_local_source(local)

    assert [scrape[HITS] for scrape in scrapes] == [baseline[HITS] + 3] * 2  # local only
    assert published is False
    assert not (shared / str(os.getppid())).exists()  # the publisher wrote nothing there
    refusals = [record for record in caplog.records if str(folder) in record.getMessage()]
    assert len(refusals) == 1 and "metrics" in refusals[0].getMessage()


def test_a_link_planted_as_a_child_s_metric_file_is_not_followed(metrics_dir: Path) -> None:
    baseline = grammar_guard.metrics_snapshot()
    elsewhere = metrics_dir / "elsewhere.json"
    elsewhere.write_text(_snapshot_text())
    _plant_child(metrics_dir).symlink_to(elsewhere)
    assert grammar_guard.metrics_snapshot()[HITS] == baseline[HITS]


def test_links_planted_where_a_publisher_writes_do_not_redirect_the_write(
    metrics_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    victim = tmp_path_factory.mktemp("home") / "notes.txt"
    victim.write_text("the user's own file")
    ours = metrics_dir / str(os.getppid())
    ours.mkdir()
    written = ours / f"{os.getpid()}.json"
    # The published file, and the temporary name it was once written under.
    for name in (written.name, f"{os.getpid()}.tmp"):
        (ours / name).symlink_to(victim)
    published = metrics_export.SnapshotPublisher(_busy_metrics())._write()
    assert victim.read_text() == "the user's own file"
    assert published and not written.is_symlink()
    assert MetricsSnapshot.from_json(json.loads(written.read_text())).counters[Counter.HITS] == 3


def test_a_fifo_planted_as_a_child_s_metric_file_does_not_block_a_scrape(
    metrics_dir: Path,
) -> None:
    baseline = grammar_guard.metrics_snapshot()
    os.mkfifo(_plant_child(metrics_dir))
    assert finishes(grammar_guard.metrics_snapshot)[HITS] == baseline[HITS]


def test_a_metric_file_over_the_size_cap_is_skipped(metrics_dir: Path) -> None:
    baseline = grammar_guard.metrics_snapshot()
    padding = " " * metrics_export.MAX_SNAPSHOT_BYTES  # still valid JSON, but no snapshot is so big
    _plant_child(metrics_dir).write_text(_snapshot_text() + padding)
    assert grammar_guard.metrics_snapshot()[HITS] == baseline[HITS]


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
