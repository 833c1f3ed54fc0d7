"""The run's results as ``report.json`` (every count and wrong verdict) and markdown tables
(``summary.md``: the tables, then every wrong verdict by name)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from benchmarks.coverage.masks import MASK_PERCENTILES, LogHistogram
from benchmarks.coverage.results import (
    ENGINES,
    PATHS,
    PLUGIN_PATH,
    TIMEOUT,
    PathResult,
    SchemaResult,
)
from harness.schema_data.cases import SUITES, headline_suites

REPORT_FILE = "report.json"
SUMMARY_FILE = "summary.md"
# Marks, in a wrong instance's text, where the grammar refused it.
REFUSAL_MARK = "⟪"
COMPILE_PERCENTILES = (50, 90, 99)
# A schema's outcome on a path, as report.json gives it (its mask fills apart).
_OUTCOME_FIELDS = [
    f.name for f in dataclasses.fields(PathResult) if f.name not in ("path", "wrong", "mask_ns")
]


@dataclass
class Tally:
    """One path's counts over a set of schemas.

    A refused schema (timeouts included) rejects all its instances: its invalid ones count as
    rejected, its valid ones as lost to the refusal; so every invalid instance accepted is one
    accepted by a compiled grammar.
    """

    schemas: int = 0
    compiled: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # by reason, timeouts excluded
    timeouts: int = 0
    valid_total: int = 0
    valid_accepted: int = 0
    valid_refused: int = 0  # valid instances of refused or timed-out schemas
    invalid_total: int = 0
    invalid_rejected: int = 0
    invalid_accepted: int = 0
    compile_s: list[float] = field(default_factory=list)
    compile_cpu_s: list[float] = field(default_factory=list)
    cpu_s: float = 0.0  # every path check's CPU time, refusals included
    engines: Counter[str] = field(default_factory=Counter)  # compiled schemas by engine
    mask_ns: LogHistogram = field(default_factory=LogHistogram)  # every timed fill

    @classmethod
    def of(cls, results: Iterable[SchemaResult], path: str) -> Tally:
        tally = cls()
        for result in results:
            if path in result.paths:
                tally.add(result.ref.valid_total, result.ref.invalid_total, result.paths[path])
        return tally

    def add(self, valid_total: int, invalid_total: int, result: PathResult) -> None:
        self.schemas += 1
        self.cpu_s += result.cpu_s or 0.0
        self.valid_total += valid_total
        self.invalid_total += invalid_total
        if not result.compiled:
            if result.outcome == TIMEOUT:
                self.timeouts += 1
            else:
                self.refused[result.outcome] += 1
            self.valid_refused += valid_total
            self.invalid_rejected += invalid_total
            return
        self.compiled += 1
        self.valid_accepted += result.valid_accepted
        self.invalid_rejected += result.invalid_rejected
        self.invalid_accepted += sum(not wrong.valid for wrong in result.wrong)
        if result.compile_s is not None:
            self.compile_s.append(result.compile_s)
        if result.compile_cpu_s is not None:
            self.compile_cpu_s.append(result.compile_cpu_s)
        if result.engine is not None:
            self.engines[result.engine] += 1
        self.mask_ns.merge(result.mask_ns)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schemas": self.schemas,
            "compiled": self.compiled,
            "refused": dict(sorted(self.refused.items())),
            "timeouts": self.timeouts,
            "valid_total": self.valid_total,
            "valid_accepted": self.valid_accepted,
            # By a compiled grammar: refusals not included.
            "valid_rejected": self.valid_total - self.valid_accepted - self.valid_refused,
            "valid_refused": self.valid_refused,
            "invalid_total": self.invalid_total,
            "invalid_rejected": self.invalid_rejected,
            "invalid_accepted_outside_refusals": self.invalid_accepted,
            "compile_s": _percentiles(self.compile_s),
            "compile_cpu_s": _percentiles(self.compile_cpu_s),
            "cpu_total_s": round(self.cpu_s, 3),
            "engines": dict(sorted(self.engines.items())),
            "mask_fills": self.mask_ns.count,
            "mask_us": self.mask_ns.percentiles_us(MASK_PERCENTILES),
        }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    """Nearest-rank percentiles and the maximum; None for an empty list."""
    times = sorted(values)
    summary: dict[str, float | None] = {
        f"p{p}": times[max(0, math.ceil(p / 100 * len(times)) - 1)] if times else None
        for p in COMPILE_PERCENTILES
    }
    summary["max"] = times[-1] if times else None
    return summary


def build_report(results: Sequence[SchemaResult], run: dict[str, Any]) -> dict[str, Any]:
    present = {result.ref.suite for result in results}
    suites = [suite for suite in SUITES if suite in present]
    headline = headline_suites(suites)
    return {
        "run": run,
        "paths": list(PATHS),
        # The headline: the shared collections, apart from the project's own cases.
        "overall_suites": list(headline),
        "overall": _tallies([r for r in results if r.ref.suite in headline]),
        "suites": {
            suite: _tallies([r for r in results if r.ref.suite == suite]) for suite in suites
        },
        "categories": [
            {"suite": SUITES[order], "category": category, "paths": _tallies(list(group))}
            for (order, category), group in groupby(
                sorted(results, key=_category_key), key=_category_key
            )
        ],
        "wrong": [
            {
                "path": path,
                "suite": result.ref.suite,
                "file": result.ref.file,
                "schema_index": result.ref.index,
                "category": result.ref.category,
                "schema_description": result.ref.description,
                **dataclasses.asdict(wrong),
            }
            for result in results
            for path, outcome in result.paths.items()
            for wrong in outcome.wrong
        ],
        "schemas": [_schema_entry(result) for result in results],
    }


def write_report(report: dict[str, Any], out_dir: Path) -> str:
    """Write both files; return the tables, for printing."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / REPORT_FILE).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    tables = render_tables(report)
    (out_dir / SUMMARY_FILE).write_text(tables + "\n" + render_wrong(report), encoding="utf-8")
    return tables


def render_tables(report: dict[str, Any]) -> str:
    overall, suites = report["overall"], report["suites"]
    lines = [
        "# Schema coverage: grammar-guard and vLLM's xgrammar and guidance backends",
        "",
        _run_line(report["run"]),
        "",
        f"## Overall ({', '.join(report['overall_suites'])})",
        "",
        *_overall(overall),
        "",
        "Worker CPU time (compiles and instances; worker starts not included): "
        + ", ".join(f"{path} {overall[path]['cpu_total_s']:.0f} s" for path in PATHS)
        + ".",
        "",
        "## By collection",
        "",
        *_table(
            "collection: path",
            [
                (f"{suite}: {path}", tallies[path])
                for suite, tallies in suites.items()
                for path in PATHS
            ],
        ),
        "",
        "## Refusals by reason (schemas; timeouts are in the tables' own column)",
        "",
        *_reasons_table(overall),
    ]
    for path in PATHS:
        rows = [(f"**{suite}**", tallies[path]) for suite, tallies in suites.items()]
        rows += [(f"{c['suite']}: {c['category']}", c["paths"][path]) for c in report["categories"]]
        lines += ["", f"## By category: {path}", "", *_table("category", rows)]
    return "\n".join(lines) + "\n"


def render_overview(report: dict[str, Any]) -> str:
    """docs/benchmarks.md's part: the run line, the overall table and the routed engine
    split, and the figures per collection."""
    lines = [
        _run_line(report["run"]),
        "",
        *_headline_line(report),
        *_overall(report["overall"]),
        "",
        "Per collection:",
        "",
        *_collections_table(report),
    ]
    return "\n".join(lines) + "\n"


def render_wrong(report: dict[str, Any]) -> str:
    lines = [
        "## Wrong verdicts",
        "",
        f"`{REFUSAL_MARK}` marks where the grammar refused a valid instance's text "
        "(texts are cut to the part around it).",
    ]
    titles = ((False, "invalid instances accepted"), (True, "valid instances rejected"))
    for path in PATHS:
        for valid, title in titles:
            entries = [w for w in report["wrong"] if w["path"] == path and w["valid"] is valid]
            lines += ["", f"### {path}: {title} ({len(entries)})", ""]
            lines += [_wrong_line(entry) for entry in entries] or ["None."]
    return "\n".join(lines) + "\n"


def _category_key(result: SchemaResult) -> tuple[int, str]:
    return (SUITES.index(result.ref.suite), result.ref.category)


def _tallies(results: Sequence[SchemaResult]) -> dict[str, dict[str, Any]]:
    return {path: Tally.of(results, path).as_dict() for path in PATHS}


def _schema_entry(result: SchemaResult) -> dict[str, Any]:
    return {
        **dataclasses.asdict(result.ref),
        "paths": {
            path: {name: getattr(outcome, name) for name in _OUTCOME_FIELDS}
            | {
                "mask_fills": outcome.mask_ns.count,
                "mask_us": outcome.mask_ns.percentiles_us(MASK_PERCENTILES),
            }
            for path, outcome in result.paths.items()
        },
    }


def _run_line(run: dict[str, Any]) -> str:
    layout = "with whitespace" if run["whitespace"] else "compact (disable_any_whitespace)"
    versions = ", ".join(f"{name} {version}" for name, version in run["versions"].items())
    analysis = "present" if run["unenforced_keyword_error"] else "absent"
    settings = " ".join(f"{name}={value}" for name, value in run["plugin_settings"].items())
    return (
        f"Suites: {', '.join(run['suites'])}; {run['schemas']} schemas. JSON {layout}. "
        f"Compile timeout {run['timeout_s']:g} s, workers: {run['workers']}, "
        f"{run['duration_s'] / 60:.1f} min. {versions}. "
        f"The plugin's UnenforcedKeywordError: {analysis}."
        + (f" Plugin settings: {settings}." if settings else "")
    )


_HEADER = (
    "| {first} | schemas | compiled | refused | timeouts | valid accepted | invalid rejected "
    "| invalid accepted outside refusals | compile ms p50 / p90 / p99 / max "
    "| served by " + " / ".join(ENGINES) + " "
    "| mask µs " + " / ".join(f"p{p:g}" for p in MASK_PERCENTILES) + " |"
)


def _table(first: str, rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [_HEADER.format(first=first), "|---" + "|---:" * 10 + "|"]
    for name, stats in rows:
        refused = sum(stats["refused"].values())
        lines.append(
            f"| {name} | {stats['schemas']} | {stats['compiled']} | {refused} "
            f"| {stats['timeouts']} | {_share(stats['valid_accepted'], stats['valid_total'])} "
            f"| {_share(stats['invalid_rejected'], stats['invalid_total'])} "
            f"| {stats['invalid_accepted_outside_refusals']} "
            f"| {_figures(stats['compile_s'], 1000)} | {_engines(stats['engines'])} "
            f"| {_figures(stats['mask_us'])} |"
        )
    return lines


def _overall(overall: dict[str, Any]) -> list[str]:
    """The table of every path over the headline suites, and the routed path's engines."""
    routed = overall[PLUGIN_PATH]
    served = ", ".join(f"{routed['engines'].get(name, 0)} by {name}" for name in ENGINES)
    return [
        *_table("path", [(path, overall[path]) for path in PATHS]),
        "",
        f"{PLUGIN_PATH} (routed) served its {routed['compiled']} compiled schemas: {served}.",
    ]


def _headline_line(report: dict[str, Any]) -> list[str]:
    """Which suites the overall table counts, when the run held others too."""
    counted = report["overall_suites"]
    apart = [suite for suite in report["suites"] if suite not in counted]
    if not apart:
        return []
    schemas = report["overall"][PLUGIN_PATH]["schemas"]
    return [
        f"The table counts the {schemas} schemas of {', '.join(counted)}; "
        f"those of {', '.join(apart)} are in the per-collection table below.",
        "",
    ]


def _collections_table(report: dict[str, Any]) -> list[str]:
    """Per path, valid instances accepted and invalid ones accepted, in each collection."""
    suites = list(report["suites"])
    header = "| path | " + " | ".join(
        f"{suite}: valid accepted | {suite}: invalid accepted" for suite in suites
    )
    lines = [header + " |", "|---" + "|---:" * (2 * len(suites)) + "|"]
    for path in PATHS:
        cells = [
            f"{_share(stats['valid_accepted'], stats['valid_total'])} "
            f"| {stats['invalid_accepted_outside_refusals']}"
            for stats in (report["suites"][suite][path] for suite in suites)
        ]
        lines.append(f"| {path} | " + " | ".join(cells) + " |")
    return lines


def _engines(counts: dict[str, int]) -> str:
    """Compiled schemas per engine; "-" for a path that does not say (vLLM's)."""
    return " / ".join(str(counts.get(name, 0)) for name in ENGINES) if counts else "-"


def _reasons_table(overall: dict[str, Any]) -> list[str]:
    reasons = sorted({reason for path in PATHS for reason in overall[path]["refused"]})
    lines = ["| reason | " + " | ".join(PATHS) + " |", "|---" + "|---:" * len(PATHS) + "|"]
    for reason in reasons:
        counts = [str(overall[path]["refused"].get(reason, 0)) for path in PATHS]
        lines.append(f"| {reason} | " + " | ".join(counts) + " |")
    return lines if reasons else ["No schema was refused."]


def _share(part: int, whole: int) -> str:
    return f"{part} / {whole} ({100 * part / whole:.1f}%)" if whole else "0 / 0"


def _figures(values: dict[str, float | None], scale: float = 1.0) -> str:
    """Percentiles, scaled, with one decimal; "-" when there were no samples."""
    if any(value is None for value in values.values()):
        return "-"
    return " / ".join(f"{scale * value:.1f}" for value in values.values() if value is not None)


def _wrong_line(entry: dict[str, Any]) -> str:
    text = entry["text"]
    if entry["refused_at"] is not None:
        text = text[: entry["refused_at"]] + REFUSAL_MARK + text[entry["refused_at"] :]
    text = text.replace("`", "'").replace("\n", "⏎")
    return (
        f"- `{entry['suite']}/{entry['file']}#{entry['schema_index']}` "
        f"({entry['schema_description']}) test {entry['test_index']} "
        f'"{entry["test_description"]}": `{text}`'
    )
