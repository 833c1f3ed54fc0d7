"""``grammar-guard check``: does each file compile for this tokenizer, and how fast?"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import wait
from dataclasses import asdict, dataclass
from pathlib import Path

from grammar_guard.cli.inputs import InputError, kind_of, read_spec
from grammar_guard.cli.session import Session
from grammar_guard.core.errors import CompileTimeoutError, InvalidGrammarError
from grammar_guard.core.request.spec import CompileOptions, RequestKind


@dataclass(frozen=True)
class Verdict:
    file: str
    kind: str
    verdict: str  # "ok", "invalid", "timeout" or "error"
    reason: str
    seconds: float  # from admission to the answer; 0 when nothing was compiled

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def check_files(
    session: Session,
    files: Sequence[Path],
    *,
    kind: RequestKind | None,
    options: CompileOptions,
    clock: Callable[[], float] = time.monotonic,
) -> list[Verdict]:
    """Compile the files one after another, so each time is its own compile's."""
    return [_check(session, path, kind, options, clock) for path in files]


def _check(
    session: Session,
    path: Path,
    override: RequestKind | None,
    options: CompileOptions,
    clock: Callable[[], float],
) -> Verdict:
    kind_name = override.value if override is not None else "?"
    try:
        kind = kind_of(path, override)
        kind_name = kind.value
        spec = read_spec(path, kind, options)
    except InputError as exc:
        return Verdict(str(path), kind_name, "error", str(exc), 0.0)
    except InvalidGrammarError as exc:
        return Verdict(str(path), kind_name, "invalid", exc.reason, 0.0)
    started = clock()
    future = session.service.admit(spec).future
    wait([future])  # the cache's deadline bounds this wait
    verdict, reason = classify(future.exception())
    return Verdict(str(path), kind_name, verdict, reason, clock() - started)


def classify(error: BaseException | None) -> tuple[str, str]:
    """A compile's outcome as a verdict and the reason to print."""
    if error is None:
        return "ok", ""
    if isinstance(error, InvalidGrammarError):
        return "invalid", error.reason
    if isinstance(error, CompileTimeoutError):
        return "timeout", str(error)
    return "error", f"{type(error).__name__}: {error}"


def format_table(verdicts: Sequence[Verdict]) -> str:
    width = max((len(v.file) for v in verdicts), default=0)
    lines = [
        f"{v.verdict:<8} {v.file:<{width}}  {v.kind:<14} {v.seconds:8.3f} s  {v.reason}".rstrip()
        for v in verdicts
    ]
    failed = sum(not v.ok for v in verdicts)
    lines.append(f"{len(verdicts) - failed} of {len(verdicts)} files compile")
    return "\n".join(lines)
