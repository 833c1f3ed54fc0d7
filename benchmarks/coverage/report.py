"""The run's results as ``report.json`` (every count and wrong verdict) and markdown tables
(``summary.md``: the tables, then every wrong verdict by name)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from benchmarks.coverage.cases import SUITES, headline_suites
from benchmarks.coverage.masks import MASK_PERCENTILES
from benchmarks.coverage.results import ENGINES, PATHS, PLUGIN_PATH, SchemaResult, WrongResult
from benchmarks.coverage.tally import Tally

REPORT_FILE = "report.json"
SUMMARY_FILE = "summary.md"
# Marks, in a wrong instance's text, where the grammar refused it.
REFUSAL_MARK = "⟪"


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
            _wrong_entry(result, path, wrong)
            for result in results
            for path, path_result in result.paths.items()
            for wrong in path_result.wrong
        ],
        "schemas": [_schema_entry(result) for result in results],
    }


def write_report(report: dict[str, Any], out_dir: Path) -> str:
    """Write both files; return the tables, for printing."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / REPORT_FILE).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    tables = render_tables(report)
    summary = tables + "\n" + render_wrong(report)
    (out_dir / SUMMARY_FILE).write_text(summary, encoding="utf-8")
    return tables


def render_tables(report: dict[str, Any]) -> str:
    run = report["run"]
    lines = [
        "# Schema coverage: grammar-guard and vLLM's xgrammar and guidance backends",
        "",
        _run_line(run),
        "",
        f"## Overall ({', '.join(report['overall_suites'])})",
        "",
        *_table("path", [(path, report["overall"][path]) for path in PATHS]),
        "",
        _engine_line(report["overall"][PLUGIN_PATH]),
        "",
        "Worker CPU time (compiles and instances; worker starts not included): "
        + ", ".join(f"{path} {report['overall'][path]['cpu_total_s']:.0f} s" for path in PATHS)
        + ".",
        "",
        "## By collection",
        "",
        *_table(
            "collection: path",
            [
                (f"{suite}: {path}", tallies[path])
                for suite, tallies in report["suites"].items()
                for path in PATHS
            ],
        ),
        "",
        "## Refusals by reason (schemas; timeouts are in the tables' own column)",
        "",
        *_reasons_table(report),
    ]
    for path in PATHS:
        rows = [(f"**{suite}**", tallies[path]) for suite, tallies in report["suites"].items()]
        rows += [
            (f"{entry['suite']}: {entry['category']}", entry["paths"][path])
            for entry in report["categories"]
        ]
        lines += ["", f"## By category: {path}", "", *_table("category", rows)]
    return "\n".join(lines) + "\n"


def render_overview(report: dict[str, Any]) -> str:
    """docs/benchmarks.md's part: the run line, the overall table and the routed engine
    split, and the figures per collection."""
    overall = report["overall"]
    lines = [
        _run_line(report["run"]),
        "",
        *_headline_line(report),
        *_table("path", [(path, overall[path]) for path in PATHS]),
        "",
        _engine_line(overall[PLUGIN_PATH]),
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
    ref = result.ref
    return {
        "suite": ref.suite,
        "file": ref.file,
        "index": ref.index,
        "category": ref.category,
        "description": ref.description,
        "valid_total": ref.valid_total,
        "invalid_total": ref.invalid_total,
        "paths": {
            path: {
                "outcome": outcome.outcome,
                "detail": outcome.detail,
                "compile_s": outcome.compile_s,
                "compile_cpu_s": outcome.compile_cpu_s,
                "validate_s": outcome.validate_s,
                "cpu_s": outcome.cpu_s,
                "valid_accepted": outcome.valid_accepted,
                "invalid_rejected": outcome.invalid_rejected,
                "engine": outcome.engine,
                "mask_fills": outcome.mask_ns.count,
                "mask_us": outcome.mask_ns.percentiles_us(MASK_PERCENTILES),
            }
            for path, outcome in result.paths.items()
        },
    }


def _wrong_entry(result: SchemaResult, path: str, wrong: WrongResult) -> dict[str, Any]:
    ref = result.ref
    return {
        "path": path,
        "suite": ref.suite,
        "file": ref.file,
        "schema_index": ref.index,
        "category": ref.category,
        "schema_description": ref.description,
        "test_index": wrong.test_index,
        "test_description": wrong.test_description,
        "valid": wrong.valid,
        "text": wrong.text,
        "refused_at": wrong.refused_at,
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


def _engine_line(stats: dict[str, Any]) -> str:
    served = ", ".join(f"{stats['engines'].get(name, 0)} by {name}" for name in ENGINES)
    return f"{PLUGIN_PATH} (routed) served its {stats['compiled']} compiled schemas: {served}."


def _engines(counts: dict[str, int]) -> str:
    """Compiled schemas per engine; "-" for a path that does not say (vLLM's)."""
    return " / ".join(str(counts.get(name, 0)) for name in ENGINES) if counts else "-"


def _reasons_table(report: dict[str, Any]) -> list[str]:
    reasons = sorted({reason for path in PATHS for reason in report["overall"][path]["refused"]})
    lines = ["| reason | " + " | ".join(PATHS) + " |", "|---" + "|---:" * len(PATHS) + "|"]
    for reason in reasons:
        counts = [str(report["overall"][path]["refused"].get(reason, 0)) for path in PATHS]
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
