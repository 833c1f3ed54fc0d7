"""The ``grammar-guard`` command line: check, warm and stats, as an operator runs them.

The model's tokenizer is replaced by the small one (``load_engine`` is the
only seam), except in the test that proves ``load_engine`` builds the
engine the server builds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr
from unit_tests.conftest import EOS, VOCAB

from grammar_guard.cli import __main__ as cli
from grammar_guard.cli.model import ModelArgs, ModelLoadError, load_engine
from grammar_guard.core.compile import disk_store
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.request.spec import GrammarSpec
from grammar_guard.core.settings import UnenforcedPolicy

HANG_GUARD_S = 60.0
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture(autouse=True)
def small_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def small_engine(_args: ModelArgs, *, unenforced: UnenforcedPolicy) -> XGrammarEngine:
        info = xgr.TokenizerInfo(encoded_vocab=list(VOCAB), stop_token_ids=[VOCAB.index(EOS)])
        return XGrammarEngine(info, compile_threads=1, unenforced=unenforced)

    monkeypatch.setattr(cli, "load_engine", small_engine)
    # Threads: worker processes would take seconds to start for these tiny compiles.
    monkeypatch.setenv("GRAMMAR_GUARD_COMPILE_ISOLATION", "thread")
    for name in ("GRAMMAR_GUARD_CACHE_DIR", "GRAMMAR_GUARD_WARMUP"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    contents = {
        "schema.json": json.dumps(SCHEMA),
        "bad.json": '{"type": "objectx"}',
        "word.regex": "[a-z]+\n",
        "rules.ebnf": 'root ::= "yes" | "no"\n',
        "pattern.txt": "[0-9]{2}",
    }
    for name, text in contents.items():
        (tmp_path / name).write_text(text)
    return {name: tmp_path / name for name in contents}


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    status = cli.main([str(arg) for arg in argv])
    return status, capsys.readouterr().out


def _json(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, Any]:
    status, out = _run(capsys, *argv, "--json")
    return status, json.loads(out)


# --- check ------------------------------------------------------------------------------


def test_check_passes_files_that_compile_with_kinds_from_their_extensions(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, report = _json(
        capsys, "check", "--model", "m", files["schema.json"], files["word.regex"],
        files["rules.ebnf"],
    )  # fmt: skip
    assert status == 0
    assert [(r["kind"], r["verdict"]) for r in report] == [
        ("json_schema", "ok"),
        ("regex", "ok"),
        ("grammar", "ok"),
    ]


def test_check_fails_with_the_reason_of_an_invalid_grammar(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = _run(capsys, "check", "--model", "m", files["schema.json"], files["bad.json"])
    assert status == 1
    bad_line = next(line for line in out.splitlines() if "bad.json" in line)
    assert bad_line.startswith("invalid") and 'Unsupported type "objectx"' in bad_line
    assert "1 of 2 files compile" in out


def test_an_unknown_extension_asks_for_kind_and_kind_overrides_it(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, report = _json(capsys, "check", "--model", "m", files["pattern.txt"])
    assert status == 1 and report[0]["verdict"] == "error" and "--kind" in report[0]["reason"]
    status, report = _json(capsys, "check", "--model", "m", "--kind", "regex", files["pattern.txt"])
    assert status == 0 and report[0]["kind"] == "regex"


def test_the_server_s_json_flags_are_checked_as_the_server_would_compile_them(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[GrammarSpec] = []
    original = XGrammarEngine.compile

    def recording(engine: XGrammarEngine, spec: GrammarSpec) -> Any:
        compiled.append(spec)
        return original(engine, spec)

    monkeypatch.setattr(XGrammarEngine, "compile", recording)
    _run(capsys, "check", "--model", "m", "--disable-any-whitespace", files["schema.json"])
    closing = ("--disable-any-whitespace", "--disable-additional-properties")
    _run(capsys, "check", "--model", "m", *closing, files["schema.json"])
    # Objects open unless closed, as in a server (GRAMMAR_GUARD_OBJECTS unset).
    options = [(spec.options.any_whitespace, spec.options.open_objects) for spec in compiled]
    assert options == [(False, True), (False, False)]


@pytest.mark.parametrize(("policy", "verdict"), [("refuse", "invalid"), ("warn", "ok")])
def test_unenforced_keywords_get_the_verdict_the_server_s_setting_gives(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
    verdict: str,
) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_UNENFORCED", policy)
    schema = tmp_path / "tags.json"
    schema.write_text(
        json.dumps({"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    )
    _, report = _json(capsys, "check", "--model", "m", schema)
    assert report[0]["verdict"] == verdict
    assert ("uniqueItems" in report[0]["reason"]) == (verdict == "invalid")


@pytest.fixture
def held_compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    release = threading.Event()
    original = XGrammarEngine.compile

    def held(engine: XGrammarEngine, spec: GrammarSpec) -> Any:
        assert release.wait(HANG_GUARD_S), "the test never released the compile"
        return original(engine, spec)

    monkeypatch.setattr(XGrammarEngine, "compile", held)
    yield release
    release.set()


def test_a_compile_past_the_timeout_is_reported_as_a_timeout(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    held_compiles: threading.Event,
) -> None:
    status, report = _json(
        capsys, "check", "--model", "m", "--timeout", "0.01", files["schema.json"]
    )
    assert status == 1
    assert report[0]["verdict"] == "timeout" and "timed out" in report[0]["reason"]


def test_a_bad_setting_stops_the_command_naming_the_variable(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_COMPILE_WORKERS", "none")
    assert cli.main(["check", "--model", "m", str(files["schema.json"])]) == cli.UNUSABLE
    assert "GRAMMAR_GUARD_COMPILE_WORKERS" in capsys.readouterr().err


# --- warm and stats ---------------------------------------------------------------------


def test_warm_fills_the_folder_and_a_second_run_finds_everything_stored(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Milliseconds of compile, which no load pays for: keep every file, as for a slow compile.
    monkeypatch.setattr(disk_store, "pays", lambda _load_s, _compile_s: True)
    folder = tmp_path / "cache"
    warmup = tmp_path / "warm.jsonl"
    warmup.write_text('{"kind": "regex", "grammar": "[0-9]{3}"}\n# a comment\n{"kind": "nope"}\n')
    argv = ("warm", "--model", "m", "--cache-dir", folder, files["schema.json"], warmup)

    status, first = _json(capsys, *argv)
    assert status == 1  # the bad warm-up line is reported
    assert first["written"] == 2 and first["already_stored"] == 0
    assert [entry["verdict"] for entry in first["entries"]] == ["ok", "ok"]
    assert len(first["skipped"]) == 1 and "warm.jsonl:3" in first["skipped"][0]

    warmup.write_text('{"kind": "regex", "grammar": "[0-9]{3}"}\n')
    status, second = _json(capsys, *argv)
    assert status == 0 and second["already_stored"] == 2 and second["written"] == 0

    status, stats = _json(capsys, "stats", "--cache-dir", folder)
    assert status == 0 and len(stats["files"]) == 2
    assert sorted(f["kind"] for f in stats["files"]) == ["json_schema", "regex"]
    assert stats["total_bytes"] == sum(f["stored_bytes"] for f in stats["files"])


def test_warm_uses_the_cache_folder_setting_when_no_flag_is_given(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_CACHE_DIR", str(tmp_path / "from-env"))
    # Milliseconds of compile, which no load pays for: keep every file, as for a slow compile.
    monkeypatch.setattr(disk_store, "pays", lambda _load_s, _compile_s: True)
    status, _ = _run(capsys, "warm", "--model", "m", files["word.regex"])
    assert status == 0
    status, out = _run(capsys, "stats")
    assert "1 files" in out and "regex" in out


def test_stats_without_a_folder_says_how_to_name_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stats"]) == cli.UNUSABLE
    assert "--cache-dir" in capsys.readouterr().err


# --- the model's engine -----------------------------------------------------------------


def test_the_engine_is_the_one_the_server_builds_for_the_model(tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    from grammar_guard.core.engines.factory import build_engine
    from grammar_guard.demo.tiny_model import build_tiny_model

    model = build_tiny_model()
    config = json.loads((model / "config.json").read_text())
    engine = load_engine(ModelArgs(model=str(model)), unenforced=UnenforcedPolicy.REFUSE)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(model / "tokenizer.json"))
    served = build_engine(tokenizer, config["vocab_size"])
    assert engine.vocab_size == served.vocab_size == config["vocab_size"]
    assert engine.fingerprint == served.fingerprint  # loads each other's cache files


def test_a_model_that_cannot_be_loaded_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="cannot load the tokenizer"):
        missing = ModelArgs(model=str(tmp_path / "no-such-model"))
        load_engine(missing, unenforced=UnenforcedPolicy.WARN)


def test_the_command_line_builds_its_engine_without_the_vllm_adapter() -> None:
    # Only load_engine itself imports vLLM, to load the tokenizer as the server does.
    code = (
        "import sys, grammar_guard.cli.__main__, grammar_guard.cli.model, "
        "grammar_guard.core.engines.factory\n"
        "print([m for m in sys.modules if m.partition('.')[0] == 'vllm' "
        "or m.startswith('grammar_guard.vllm_adapter')])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
