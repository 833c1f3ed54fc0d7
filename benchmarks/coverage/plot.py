"""``coverage.png``: compile and mask-fill times per path, and coverage per category.

The top row holds the distributions of compile time and of bitmask fill time
(one line per path); the bottom row the share of valid instances accepted
and of invalid instances rejected, one bar per path and category.
jsonschemabench categories get a bar each; the test suite's many small files
are shown as two groups (core keywords, ``optional/``), grammar-guard's own
cases as one. Each path keeps its colour in every panel: blues for the
plugin's paths, reds for vLLM's, with one legend for the figure. Needs
matplotlib (the ``bench`` extra); without it the plot is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.coverage.cases import PROJECT_CASES, TEST_SUITE
from benchmarks.coverage.results import (
    PATHS,
    PLUGIN_LLGUIDANCE_PATH,
    PLUGIN_PATH,
    PLUGIN_XGRAMMAR_PATH,
    VLLM_GUIDANCE_PATH,
    VLLM_XGRAMMAR_PATH,
    SchemaResult,
)
from benchmarks.coverage.tally import Tally

PLOT_FILE = "coverage.png"
# The plugin's paths solid and in blues, vLLM's dashed and in reds: five
# lines and five bars per group stay apart, and the pairs (an engine through
# the plugin, the same engine through vLLM) read as such.
_STYLES: dict[str, dict[str, Any]] = {
    PLUGIN_PATH: {"color": "#08306b", "linestyle": "-"},
    PLUGIN_XGRAMMAR_PATH: {"color": "#4292c6", "linestyle": "-"},
    PLUGIN_LLGUIDANCE_PATH: {"color": "#9ecae1", "linestyle": "-"},
    VLLM_XGRAMMAR_PATH: {"color": "#cb181d", "linestyle": "--"},
    VLLM_GUIDANCE_PATH: {"color": "#fc9272", "linestyle": "--"},
}
# Inches of figure per category group: room for five bars each.
_GROUP_HEIGHT = 0.55


def write_plot(results: Sequence[SchemaResult], out_dir: Path) -> Path | None:
    """The plot's path, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups = _groups(results)
    figure, axes = plt.subplots(
        2,
        2,
        figsize=(18, 5.5 + max(4.0, _GROUP_HEIGHT * len(groups) + 1.0)),
        height_ratios=(5.5, max(4.0, _GROUP_HEIGHT * len(groups) + 1.0)),
        layout="constrained",
    )
    (times, masks), (valid, invalid) = axes
    tallies = {path: Tally.of(results, path) for path in PATHS}
    _plot_distribution(
        times,
        {path: _shares([1000 * t for t in tally.compile_s]) for path, tally in tallies.items()},
        "compile time (ms, log scale)",
        "Compile time, schemas that compiled",
    )
    _plot_distribution(
        masks,
        {path: tally.mask_ns.cumulative_us() for path, tally in tallies.items()},
        "bitmask fill time (µs, log scale)",
        "Mask fill time, first valid instance of each schema",
    )
    _plot_shares(
        valid, groups, "valid instances accepted (%)", _valid_share, lambda t: t.valid_total
    )
    _plot_shares(
        invalid,
        groups,
        "invalid instances rejected (%)",
        _invalid_share,
        lambda t: t.invalid_total,
    )
    handles, _ = valid.get_legend_handles_labels()
    labels = [f"{path} ({tally.compiled} compiled)" for path, tally in tallies.items()]
    figure.legend(handles, labels, loc="outside upper center", ncols=len(PATHS))
    path = out_dir / PLOT_FILE
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _group_of(result: SchemaResult) -> str:
    ref = result.ref
    if ref.suite == PROJECT_CASES:
        return ref.suite  # a few files: one group, apart from jsonschemabench's categories
    if ref.suite != TEST_SUITE:
        return ref.category
    return "test-suite optional/" if ref.category.startswith("optional/") else "test-suite core"


def _groups(results: Sequence[SchemaResult]) -> dict[str, list[SchemaResult]]:
    groups: dict[str, list[SchemaResult]] = {}
    for result in results:
        groups.setdefault(_group_of(result), []).append(result)
    return dict(sorted(groups.items(), reverse=True))  # barh draws bottom-up


def _plot_distribution(
    axes: Any, points: dict[str, list[tuple[float, float]]], xlabel: str, title: str
) -> None:
    """Per path, the share of samples (0 to 1) up to each value."""
    for path, path_points in points.items():
        if path_points:
            xs, shares = zip(*path_points, strict=True)
            axes.step(xs, [100 * share for share in shares], where="post", **_STYLES[path])
    axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("share within (%)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)


def _shares(values: list[float]) -> list[tuple[float, float]]:
    """Each value, in order, with the share of values up to it."""
    ordered = sorted(values)
    return [(value, (i + 1) / len(ordered)) for i, value in enumerate(ordered)]


def _valid_share(tally: Tally) -> float:
    return 100 * tally.valid_accepted / tally.valid_total if tally.valid_total else 0.0


def _invalid_share(tally: Tally) -> float:
    return 100 * tally.invalid_rejected / tally.invalid_total if tally.invalid_total else 0.0


def _plot_shares(
    axes: Any,
    groups: dict[str, list[SchemaResult]],
    title: str,
    share: Callable[[Tally], float],
    count: Callable[[Tally], int],
) -> None:
    """One bar per path and group; each group's label says of how many instances."""
    height = 0.84 / len(PATHS)
    for offset, path in enumerate(PATHS):
        values = [share(Tally.of(members, path)) for members in groups.values()]
        # The first path on top within each group, as in the legend.
        positions = [i + ((len(PATHS) - 1) / 2 - offset) * height for i in range(len(groups))]
        axes.barh(positions, values, height=height, label=path, color=_STYLES[path]["color"])
    # Instance counts are the same on every path.
    counts = [count(Tally.of(members, PATHS[0])) for members in groups.values()]
    labels = [f"{name} ({n or 'none'})" for name, n in zip(groups, counts, strict=True)]
    axes.set_yticks(range(len(groups)), labels)
    axes.set_xlim(0, 100)
    axes.set_title(title)
    axes.grid(True, axis="x", alpha=0.3)
