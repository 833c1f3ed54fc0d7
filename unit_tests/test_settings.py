"""GRAMMAR_GUARD_* settings: defaults, parsing, and refusals that name the variable."""

from __future__ import annotations

import pytest
from vllm.config.structured_outputs import StructuredOutputsConfig

import grammar_guard
from grammar_guard.core.settings import MIB, CacheSettings, SettingsError

grammar_guard.register()


def test_defaults() -> None:
    settings = CacheSettings.from_env({})
    assert settings.compile_timeout_s == 30.0 and settings.max_retries == 2
    assert settings.ttl_s == 30.0  # the TTL follows the timeout unless set
    assert settings.max_bytes == 512 * MIB and settings.max_entries == 1024
    assert settings.compile_workers >= 2


def test_every_variable_is_read() -> None:
    settings = CacheSettings.from_env(
        {
            "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": "2.5",
            "GRAMMAR_GUARD_MAX_RETRIES": "0",
            "GRAMMAR_GUARD_TIMEOUT_TTL_S": "7",
            "GRAMMAR_GUARD_CACHE_MB": "1.5",
            "GRAMMAR_GUARD_CACHE_ENTRIES": "10",
            "GRAMMAR_GUARD_COMPILE_WORKERS": "3",
        }
    )
    assert settings == CacheSettings(
        compile_timeout_s=2.5,
        max_retries=0,
        timeout_ttl_s=7.0,
        max_bytes=int(1.5 * MIB),
        max_entries=10,
        compile_workers=3,
    )


def test_ttl_defaults_to_a_configured_timeout() -> None:
    assert CacheSettings.from_env({"GRAMMAR_GUARD_COMPILE_TIMEOUT_S": "4"}).ttl_s == 4.0


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
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        CacheSettings.from_env({variable: value})


def test_a_bad_value_stops_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_CACHE_ENTRIES", "none")
    with pytest.raises(ValueError, match="GRAMMAR_GUARD_CACHE_ENTRIES"):
        StructuredOutputsConfig(backend="grammar-guard")
    StructuredOutputsConfig(backend="xgrammar")  # other backends do not read them
