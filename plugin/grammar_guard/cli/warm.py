"""``grammar-guard warm``: compile grammars into a cache folder before a server needs them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grammar_guard.cli.check import classify
from grammar_guard.cli.inputs import InputError, is_warmup_file, kind_of, read_spec
from grammar_guard.cli.session import Session
from grammar_guard.core.compile.warmup import WarmUp, WarmupResult, read_warmup_file
from grammar_guard.core.errors import InvalidGrammarError, shorten
from grammar_guard.core.metrics import Counter
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

_LABEL_CHARS = 60


@dataclass
class WarmInputs:
    labels: dict[GrammarSpec, str] = field(default_factory=dict)  # in input order
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WarmReport:
    results: list[tuple[str, WarmupResult]]  # label, result
    problems: list[str]
    already_stored: int
    written: int
    disk_errors: int

    @property
    def ok(self) -> bool:
        failed = any(result.error is not None for _, result in self.results)
        return not failed and not self.problems and not self.disk_errors


def collect(files: Sequence[Path], kind: RequestKind | None, options: CompileOptions) -> WarmInputs:
    """The specs of grammar files and warm-up files (``.jsonl``), each once."""
    inputs = WarmInputs()
    for path in files:
        if is_warmup_file(path):
            plan = read_warmup_file(path, options)
            inputs.problems.extend(plan.problems)
            for spec in plan.specs:
                label = f"{path}: {spec.kind.value} {shorten(spec.text, _LABEL_CHARS)}"
                inputs.labels.setdefault(spec, label.rstrip())
            continue
        try:
            spec = read_spec(path, kind_of(path, kind), options)
        except (InputError, InvalidGrammarError) as exc:
            inputs.problems.append(f"{path}: {exc}")
            continue
        inputs.labels.setdefault(spec, str(path))
    return inputs


def warm(session: Session, inputs: WarmInputs) -> WarmReport:
    """Compile (or find on disk) every input, and wait until the files are written."""
    warmup = WarmUp(
        session.service.admit, list(inputs.labels), parallel=session.settings.compile_workers
    )
    warmup.start()
    warmup.wait()
    session.service.drain()
    counters = session.service.metrics.snapshot().counters
    order = {spec: index for index, spec in enumerate(inputs.labels)}
    results = sorted(warmup.results, key=lambda result: order[result.spec])
    return WarmReport(
        results=[(inputs.labels[result.spec], result) for result in results],
        problems=inputs.problems,
        already_stored=counters[Counter.DISK_HITS],
        written=counters[Counter.DISK_WRITES],
        disk_errors=counters[Counter.DISK_ERRORS],
    )


def format_report(report: WarmReport, folder: Path) -> str:
    lines = [f"skipped  {problem}" for problem in report.problems]
    for label, result in report.results:
        verdict, reason = classify(result.error)
        lines.append(f"{verdict:<8} {label}  {result.seconds:.3f} s  {reason}".rstrip())
    lines.append(
        f"{folder}: {report.already_stored} already stored, {report.written} written, "
        f"{report.disk_errors} disk errors"
    )
    return "\n".join(lines)


def report_json(report: WarmReport, folder: Path) -> dict[str, object]:
    entries = []
    for label, result in report.results:
        verdict, reason = classify(result.error)
        entries.append(
            {
                "input": label,
                "kind": result.spec.kind.value,
                "verdict": verdict,
                "reason": reason,
                "seconds": result.seconds,
            }
        )
    return {
        "cache_dir": str(folder),
        "entries": entries,
        "skipped": report.problems,
        "already_stored": report.already_stored,
        "written": report.written,
        "disk_errors": report.disk_errors,
    }
