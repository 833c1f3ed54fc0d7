"""GRAMMAR_GUARD_* settings: defaults, parsing, and refusals that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm.config.structured_outputs import StructuredOutputsConfig

import grammar_guard
from grammar_guard.core.settings import (
    MIB,
    CompileIsolation,
    Settings,
    SettingsError,
    UnenforcedPolicy,
    unenforced_policy_from_env,
)

grammar_guard.register()


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.compile_timeout_s == 30.0 and settings.max_retries == 2
    assert settings.ttl_s == 30.0  # the TTL follows the timeout unless set
    assert settings.max_bytes == 512 * MIB and settings.max_entries == 1024
    assert settings.compile_workers >= 4
    assert settings.compile_isolation is CompileIsolation.PROCESS
    assert settings.compile_niceness == 19  # compiles get the CPU the engine leaves
    assert settings.kill_after_s == 120.0  # four compile timeouts
    assert settings.upgrade_after == 2  # a key's first reuse starts its upgrade


def test_every_variable_is_read() -> None:
    settings = Settings.from_env(
        {
            "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": "2.5",
            "GRAMMAR_GUARD_MAX_RETRIES": "0",
            "GRAMMAR_GUARD_TIMEOUT_TTL_S": "7",
            "GRAMMAR_GUARD_CACHE_MB": "1.5",
            "GRAMMAR_GUARD_CACHE_ENTRIES": "10",
            "GRAMMAR_GUARD_COMPILE_WORKERS": "3",
            "GRAMMAR_GUARD_COMPILE_ISOLATION": " Thread ",
            "GRAMMAR_GUARD_COMPILE_KILL_AFTER_S": "5",
            "GRAMMAR_GUARD_COMPILE_NICENESS": "0",
            "GRAMMAR_GUARD_UPGRADE_AFTER": "0",
        }
    )
    assert settings == Settings(
        compile_timeout_s=2.5,
        max_retries=0,
        timeout_ttl_s=7.0,
        max_bytes=int(1.5 * MIB),
        max_entries=10,
        compile_workers=3,
        compile_isolation=CompileIsolation.THREAD,
        compile_kill_after_s=5.0,
        compile_niceness=0,
        upgrade_after=0,
    )


def test_ttl_and_hard_limit_follow_a_configured_timeout() -> None:
    settings = Settings.from_env({"GRAMMAR_GUARD_COMPILE_TIMEOUT_S": "4"})
    assert settings.ttl_s == 4.0
    assert settings.kill_after_s == 16.0


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GRAMMAR_GUARD_COMPILE_TIMEOUT_S", "soon"),
        ("GRAMMAR_GUARD_COMPILE_TIMEOUT_S", "0"),
        ("GRAMMAR_GUARD_COMPILE_TIMEOUT_S", "inf"),
        ("GRAMMAR_GUARD_MAX_RETRIES", "-1"),
        ("GRAMMAR_GUARD_MAX_RETRIES", "1.5"),
        ("GRAMMAR_GUARD_TIMEOUT_TTL_S", "-3"),
        ("GRAMMAR_GUARD_CACHE_MB", "lots"),
        ("GRAMMAR_GUARD_CACHE_ENTRIES", "0"),
        ("GRAMMAR_GUARD_COMPILE_WORKERS", "0"),
        ("GRAMMAR_GUARD_COMPILE_ISOLATION", "fork"),
        ("GRAMMAR_GUARD_COMPILE_KILL_AFTER_S", "0"),
        ("GRAMMAR_GUARD_COMPILE_KILL_AFTER_S", "never"),
        ("GRAMMAR_GUARD_COMPILE_NICENESS", "-5"),
        ("GRAMMAR_GUARD_COMPILE_NICENESS", "20"),
        ("GRAMMAR_GUARD_COMPILE_NICENESS", "low"),
        ("GRAMMAR_GUARD_UPGRADE_AFTER", "-1"),
        ("GRAMMAR_GUARD_UPGRADE_AFTER", "often"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})


def test_a_bad_value_stops_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_CACHE_ENTRIES", "none")
    with pytest.raises(ValueError, match="GRAMMAR_GUARD_CACHE_ENTRIES"):
        StructuredOutputsConfig(backend="grammar-guard")
    StructuredOutputsConfig(backend="xgrammar")  # other backends do not read them


# --- the persistent cache and warm-up -----------------------------------------------------


def test_the_cache_folder_is_off_unless_named() -> None:
    settings = Settings.from_env({})
    assert settings.cache_dir is None and settings.warmup_file is None
    assert settings.cache_dir_max_bytes == 1024 * MIB


def test_cache_folder_bound_and_warmup_file_are_read(tmp_path: Path) -> None:
    warmup = tmp_path / "warm.jsonl"
    warmup.write_text("")
    settings = Settings.from_env(
        {
            "GRAMMAR_GUARD_CACHE_DIR": str(tmp_path / "not-created-yet"),
            "GRAMMAR_GUARD_CACHE_DIR_MB": "2.5",
            "GRAMMAR_GUARD_WARMUP": str(warmup),
        }
    )
    assert settings.cache_dir == tmp_path / "not-created-yet"
    assert settings.cache_dir_max_bytes == int(2.5 * MIB)
    assert settings.warmup_file == warmup


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GRAMMAR_GUARD_CACHE_DIR", "{file}"),
        ("GRAMMAR_GUARD_CACHE_DIR_MB", "-1"),
        ("GRAMMAR_GUARD_CACHE_DIR_MB", "plenty"),
        ("GRAMMAR_GUARD_WARMUP", "{missing}"),
        ("GRAMMAR_GUARD_WARMUP", "{folder}"),
    ],
)
def test_a_bad_cache_folder_or_warmup_value_names_its_variable(
    tmp_path: Path, variable: str, value: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    value = value.format(file=a_file, missing=tmp_path / "missing.jsonl", folder=tmp_path)
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})


# --- keywords xgrammar would not enforce ----------------------------------------------------


def test_unenforced_keywords_are_refused_by_default() -> None:
    assert Settings.from_env({}).unenforced is UnenforcedPolicy.REFUSE
    assert unenforced_policy_from_env({}) is UnenforcedPolicy.REFUSE


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        ("warn", UnenforcedPolicy.WARN),
        (" WARN ", UnenforcedPolicy.WARN),
        ("refuse", UnenforcedPolicy.REFUSE),
    ],
)
def test_the_unenforced_policy_is_read(value: str, policy: UnenforcedPolicy) -> None:
    environ = {"GRAMMAR_GUARD_UNENFORCED": value}
    assert Settings.from_env(environ).unenforced is policy
    assert unenforced_policy_from_env(environ) is policy


@pytest.mark.parametrize("value", ["ignore", "0", "refuse,warn"])
def test_a_bad_unenforced_policy_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match=r"GRAMMAR_GUARD_UNENFORCED.*refuse, warn"):
        Settings.from_env({"GRAMMAR_GUARD_UNENFORCED": value})


def test_a_bad_unenforced_policy_stops_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_UNENFORCED", "sometimes")
    with pytest.raises(ValueError, match="GRAMMAR_GUARD_UNENFORCED"):
        StructuredOutputsConfig(backend="grammar-guard")
