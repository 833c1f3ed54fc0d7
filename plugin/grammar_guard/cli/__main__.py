"""The ``grammar-guard`` command line (``python -m grammar_guard.cli`` is the same)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from grammar_guard.cli import check, stats, warm
from grammar_guard.cli.inputs import FILE_KINDS, KIND_BY_EXTENSION
from grammar_guard.cli.model import ModelArgs, ModelLoadError, load_engine
from grammar_guard.cli.session import Session, settings_with
from grammar_guard.core.engines.base import GrammarEngine
from grammar_guard.core.request.spec import CompileOptions, RequestKind
from grammar_guard.core.settings import (
    ENV_PREFIX,
    Settings,
    SettingsError,
    objects_open,
)

# Warming is done ahead of serving, so a slow grammar gets time the server
# would not give it; once stored, the server loads it instead of compiling.
WARM_TIMEOUT_S = 600.0
# Exit statuses: 1 when a grammar fails, 2 when the command itself cannot run.
FAILED, UNUSABLE = 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grammar-guard",
        description="Check grammars against a model's tokenizer and manage the cache folder.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    extensions = ", ".join(f"{ext} {kind.value}" for ext, kind in KIND_BY_EXTENSION.items())
    check_cmd = commands.add_parser(
        "check",
        help="compile grammar files for a model's tokenizer; print verdict, reason and time",
        description=f"Kinds by extension: {extensions}.",
    )
    _add_compile_arguments(check_cmd, timeout_help="seconds (default: the server's setting)")
    check_cmd.set_defaults(run=_run_check)

    warm_cmd = commands.add_parser(
        "warm",
        help="compile grammar files or warm-up files (.jsonl) into a cache folder",
        description=f"Kinds by extension: {extensions}; .jsonl files are warm-up files.",
    )
    _add_compile_arguments(warm_cmd, timeout_help=f"seconds (default: {WARM_TIMEOUT_S:g})")
    _add_cache_dir(warm_cmd)
    warm_cmd.set_defaults(run=_run_warm)

    stats_cmd = commands.add_parser("stats", help="list a cache folder's grammars and sizes")
    _add_cache_dir(stats_cmd)
    stats_cmd.add_argument("--json", action="store_true", help="print JSON")
    stats_cmd.set_defaults(run=_run_stats)
    return parser


def _add_compile_arguments(command: argparse.ArgumentParser, *, timeout_help: str) -> None:
    command.add_argument("files", nargs="+", type=Path, metavar="FILE")
    command.add_argument("--model", required=True, help="model path or name, as given to vLLM")
    command.add_argument("--tokenizer", help="tokenizer path or name (default: the model's)")
    command.add_argument("--tokenizer-mode", default="auto", help="as vLLM's --tokenizer-mode")
    command.add_argument("--revision", help="model revision")
    command.add_argument("--trust-remote-code", action="store_true")
    command.add_argument(
        "--kind",
        choices=[kind.value for kind in FILE_KINDS],
        help="what every file holds (default: from its extension)",
    )
    command.add_argument(
        "--disable-any-whitespace",
        action="store_true",
        help="compact JSON, as the server's structured_outputs_config.disable_any_whitespace",
    )
    command.add_argument(
        "--disable-additional-properties",
        action="store_true",
        help="closed objects, as the server's "
        "structured_outputs_config.disable_additional_properties",
    )
    command.add_argument("--timeout", type=float, help=f"compile timeout in {timeout_help}")
    command.add_argument("--json", action="store_true", help="print JSON")


def _add_cache_dir(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--cache-dir", type=Path, help=f"cache folder (default: ${ENV_PREFIX}CACHE_DIR)"
    )


def _model_args(args: argparse.Namespace) -> ModelArgs:
    return ModelArgs(
        model=args.model,
        tokenizer=args.tokenizer,
        tokenizer_mode=args.tokenizer_mode,
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
    )


def _engine(args: argparse.Namespace, settings: Settings) -> GrammarEngine:
    return load_engine(_model_args(args), unenforced=settings.unenforced)


def _options(args: argparse.Namespace) -> CompileOptions:
    # As a server with the same environment builds its keys.
    return CompileOptions(
        any_whitespace=not args.disable_any_whitespace,
        open_objects=objects_open(args.disable_additional_properties),
    )


def _kind(args: argparse.Namespace) -> RequestKind | None:
    return RequestKind(args.kind) if args.kind else None


def _run_check(args: argparse.Namespace) -> int:
    overrides = {f"{ENV_PREFIX}CACHE_DIR": "", f"{ENV_PREFIX}WARMUP": ""}
    if args.timeout is not None:
        overrides[f"{ENV_PREFIX}COMPILE_TIMEOUT_S"] = str(args.timeout)
    settings = settings_with(overrides)
    with Session(_engine(args, settings), settings) as session:
        verdicts = check.check_files(session, args.files, kind=_kind(args), options=_options(args))
    if args.json:
        print(json.dumps([verdict.as_json() for verdict in verdicts], indent=2))
    else:
        print(check.format_table(verdicts))
    return 0 if all(verdict.ok for verdict in verdicts) else FAILED


def _run_warm(args: argparse.Namespace) -> int:
    folder = _cache_dir(args)
    timeout = WARM_TIMEOUT_S if args.timeout is None else args.timeout
    settings = settings_with(
        {
            f"{ENV_PREFIX}CACHE_DIR": str(folder),
            f"{ENV_PREFIX}WARMUP": "",
            f"{ENV_PREFIX}COMPILE_TIMEOUT_S": str(timeout),
        }
    )
    inputs = warm.collect(args.files, _kind(args), _options(args))
    with Session(_engine(args, settings), settings) as session:
        report = warm.warm(session, inputs)
    if args.json:
        print(json.dumps(warm.report_json(report, folder), indent=2))
    else:
        print(warm.format_report(report, folder))
    return 0 if report.ok else FAILED


def _run_stats(args: argparse.Namespace) -> int:
    folder = _cache_dir(args)
    budget = settings_with({}).cache_dir_max_bytes
    if args.json:
        print(json.dumps(stats.stats_json(folder, budget), indent=2))
    else:
        print(stats.format_stats(folder, budget))
    return 0


def _cache_dir(args: argparse.Namespace) -> Path:
    folder = args.cache_dir or settings_with({}).cache_dir
    if folder is None:
        raise SettingsError(f"no cache folder: pass --cache-dir or set {ENV_PREFIX}CACHE_DIR")
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (SettingsError, ModelLoadError) as exc:
        print(f"grammar-guard: {exc}", file=sys.stderr)
        return UNUSABLE


if __name__ == "__main__":
    sys.exit(main())
