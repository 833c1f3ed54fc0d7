"""GRAMMAR_GUARD_* settings: defaults, parsing, and refusals that name the variable."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm.config.structured_outputs import StructuredOutputsConfig

import grammar_guard
from grammar_guard.core import settings as settings_module
from grammar_guard.core.errors import EXCERPT_CHARS
from grammar_guard.core.settings import (
    KNOWN_VARIABLES,
    MAX_SECONDS,
    MIB,
    CompileIsolation,
    ObjectsPolicy,
    Settings,
    SettingsError,
    UnenforcedPolicy,
    objects_policy_from_env,
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


# Every numeric variable, with a value in range.
NUMBERS = {
    "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": "2.5",
    "GRAMMAR_GUARD_MAX_RETRIES": "0",
    "GRAMMAR_GUARD_TIMEOUT_TTL_S": "7",
    "GRAMMAR_GUARD_CACHE_MB": "1.5",
    "GRAMMAR_GUARD_CACHE_ENTRIES": "10",
    "GRAMMAR_GUARD_COMPILE_WORKERS": "3",
    "GRAMMAR_GUARD_COMPILE_KILL_AFTER_S": "5",
    "GRAMMAR_GUARD_COMPILE_NICENESS": "0",
    "GRAMMAR_GUARD_COMPILE_WORKER_MEMORY_MB": "3072",
    "GRAMMAR_GUARD_CACHE_DIR_MB": "2",
    "GRAMMAR_GUARD_UPGRADE_AFTER": "0",
    "GRAMMAR_GUARD_VALIDATION_BUDGET_S": "0.5",
}


def test_every_variable_is_read() -> None:
    settings = Settings.from_env({**NUMBERS, "GRAMMAR_GUARD_COMPILE_ISOLATION": " Thread "})
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
        compile_worker_memory_bytes=3072 * MIB,
        cache_dir_max_bytes=2 * MIB,
        upgrade_after=0,
        validation_budget_s=0.5,
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


# One of each kind of value no numeric setting takes.
MALFORMED_NUMBERS = {
    "overflowing float": "1e308",  # finite, but not once turned into bytes
    "float past the largest": "1e999",  # parsed as infinity
    "nan": "nan",
    "inf": "inf",
    "negative inf": "-inf",
    "negative": "-1",
    "not a number": "lots",
    "huge integer": "9" * 40,
    "integer of more digits than Python reads": "9" * 5000,
}


@pytest.mark.parametrize("variable", NUMBERS)
@pytest.mark.parametrize("malformed", MALFORMED_NUMBERS)
def test_a_malformed_number_is_a_settings_error_naming_variable_value_and_range(
    variable: str, malformed: str
) -> None:
    value = MALFORMED_NUMBERS[malformed]
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({variable: value})
    message = str(refused.value)
    assert message.startswith(f"{variable}={value[:EXCERPT_CHARS]!r}")
    assert " number from " in message and len(message) < 3 * EXCERPT_CHARS


@pytest.mark.parametrize("variable", NUMBERS)
@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_value_means_the_default(variable: str, blank: str) -> None:
    assert Settings.from_env({variable: blank}) == Settings.from_env({})


def test_every_in_range_number_is_read() -> None:
    settings = Settings.from_env(NUMBERS)
    assert settings.cache_dir_max_bytes == 2 * MIB and settings.compile_timeout_s == 2.5


def test_the_largest_numbers_are_taken_and_usable() -> None:
    settings = Settings.from_env(
        {
            "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(MAX_SECONDS),
            "GRAMMAR_GUARD_CACHE_MB": str(settings_module.MAX_MIB),
            "GRAMMAR_GUARD_CACHE_ENTRIES": str(settings_module.MAX_COUNT),
        }
    )
    assert settings.max_bytes == 1 << 60 and settings.max_entries == (1 << 31) - 1
    # The default kill limit is four timeouts: still a timeout threading takes
    # (a free lock is acquired at once; too long a timeout would raise first).
    assert settings.kill_after_s == 4 * MAX_SECONDS
    assert threading.Lock().acquire(timeout=settings.kill_after_s)


def test_a_value_is_quoted_escaped_and_cut_in_the_message() -> None:
    value = "1\nERROR forged" + "0" * 10_000
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"GRAMMAR_GUARD_CACHE_ENTRIES": value})
    message = str(refused.value)
    assert message.isprintable() and "'1\\nERROR forged000" in message
    assert f"({len(value)} characters)" in message


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GRAMMAR_GUARD_CACHE_DIR", "/tmp/" + "a" * 5000),  # a name too long to look up
        ("GRAMMAR_GUARD_WARMUP", "/tmp/" + "a" * 5000),
        ("GRAMMAR_GUARD_CACHE_DIR", "~no-such-user-of-grammar-guard/cache"),
    ],
)
def test_an_unusable_path_is_a_settings_error(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=f"{variable}=.* is not a usable path"):
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


# --- which properties and items objects and tuples take ---------------------------------------


@pytest.mark.parametrize(
    ("environ", "policy"),
    [
        ({}, ObjectsPolicy.OPEN),
        ({"GRAMMAR_GUARD_OBJECTS": " Closed "}, ObjectsPolicy.CLOSED),
        ({"GRAMMAR_GUARD_OBJECTS": "open"}, ObjectsPolicy.OPEN),
    ],
)
def test_the_objects_policy_is_read_open_by_default(
    environ: dict[str, str], policy: ObjectsPolicy
) -> None:
    assert Settings.from_env(environ).objects is policy
    assert objects_policy_from_env(environ) is policy


def test_a_bad_objects_policy_stops_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_OBJECTS", "strict")
    with pytest.raises(ValueError, match=r"GRAMMAR_GUARD_OBJECTS.*closed, open"):
        StructuredOutputsConfig(backend="grammar-guard")


def test_grammar_guard_takes_the_closing_vllm_allows_guidance_alone() -> None:
    config = StructuredOutputsConfig(
        backend="grammar-guard", disable_any_whitespace=True, disable_additional_properties=True
    )
    assert config.disable_additional_properties
    # vLLM's own rule still holds for its other backends.
    with pytest.raises(ValueError, match="only supported for the guidance backend"):
        StructuredOutputsConfig(backend="xgrammar", disable_additional_properties=True)


# --- variables nothing reads ----------------------------------------------------------------


@pytest.fixture
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As in a new process: the unknown-variable warning not given yet."""
    monkeypatch.setattr(
        settings_module, "_unknown_variables", settings_module._UnknownVariableWarning()
    )
    yield


def _unknown_variable_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == settings_module.__name__ and record.levelno == logging.WARNING
    ]


def test_an_unknown_variable_is_warned_of_once_with_the_closest_name(
    fresh_warning: None, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {
        "GRAMMAR_GUARD_CACHE_M": "64",
        "GRAMMAR_GUARD_COMPILE_TIMEOUTS": "5",
        "GRAMMAR_GUARD_QQQQQQQQ": "1",
        "GRAMMAR_GUARD_CACHE_ENTRIES": "10",
        "OTHER_CACHE_MB": "1",
    }
    with caplog.at_level(logging.WARNING, logger=settings_module.__name__):
        for _ in range(3):  # read again, as the API process does for each engine config
            assert Settings.from_env(environ).max_entries == 10
    [warning] = _unknown_variable_warnings(caplog)
    assert "'GRAMMAR_GUARD_CACHE_M' (did you mean GRAMMAR_GUARD_CACHE_MB?)" in warning
    assert (
        "'GRAMMAR_GUARD_COMPILE_TIMEOUTS' (did you mean GRAMMAR_GUARD_COMPILE_TIMEOUT_S?)"
        in warning
    )
    assert "'GRAMMAR_GUARD_QQQQQQQQ'," not in warning and "'GRAMMAR_GUARD_QQQQQQQQ'" in warning
    assert "GRAMMAR_GUARD_CACHE_ENTRIES" not in warning and "OTHER" not in warning


def test_known_variables_are_not_warned_of(
    fresh_warning: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=settings_module.__name__):
        Settings.from_env(dict.fromkeys(KNOWN_VARIABLES, ""))
    assert _unknown_variable_warnings(caplog) == []


def test_an_unknown_name_is_logged_escaped(
    fresh_warning: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=settings_module.__name__):
        Settings.from_env({"GRAMMAR_GUARD_X\nERROR forged": "1"})
    [warning] = _unknown_variable_warnings(caplog)
    assert "\n" not in warning and "'GRAMMAR_GUARD_X\\nERROR forged'" in warning


class _ReadsRecorded(dict[str, str]):
    """An environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)


def test_every_variable_settings_read_is_known() -> None:
    environ = _ReadsRecorded()
    Settings.from_env(environ)
    assert environ.read and environ.read <= KNOWN_VARIABLES
