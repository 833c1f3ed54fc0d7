"""One schema through one path: compile it, then feed it every instance of its file.

Each instance gets a grammar of its own, as each request does in a server: ``reset()`` would
carry state (guidance's ``terminated`` flag, llguidance's error state, a plugin fault) across.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from benchmarks.coverage.masks import time_fills
from benchmarks.coverage.paths import CompilePath, Refused, build_paths
from benchmarks.coverage.results import COMPILED, PathResult, WrongResult
from harness.schema_data.cases import Case, NumberLiteral, RawText
from harness.schema_data.writer import InstanceWriter, Layout, Written, token_encoder

# A wrong instance's text is kept in the report around where the grammar stopped.
_EXCERPT_BEFORE = 160
_EXCERPT_AFTER = 80


class SchemaChecker:
    def __init__(self, tokenizer: Any, *, whitespace: bool) -> None:
        # The tiny model's vocabulary is the tokenizer's, added tokens included.
        self.paths: dict[str, CompilePath] = build_paths(
            tokenizer, len(tokenizer), whitespace=whitespace
        )
        self._stop_token = int(tokenizer.eos_token_id)
        self._layout = Layout(whitespace=whitespace)
        self._encode = token_encoder(tokenizer)

    def check(self, path_name: str, case: Case, on_compiled: Callable[[], None]) -> PathResult:
        cpu = time.process_time()
        result = self._check(path_name, case, on_compiled)
        result.cpu_s = time.process_time() - cpu
        return result

    def _check(self, path_name: str, case: Case, on_compiled: Callable[[], None]) -> PathResult:
        path = self.paths[path_name]
        try:
            compiled = path.compile(case.schema)
        except Refused as refusal:
            return PathResult(path_name, refusal.reason, refusal.detail)
        on_compiled()
        result = PathResult(
            path_name,
            COMPILED,
            compile_s=compiled.compile_s,
            compile_cpu_s=compiled.compile_cpu_s,
            validate_s=compiled.validate_s,
            engine=compiled.engine,
        )
        timed = False
        for index, instance in enumerate(case.instances):
            grammar = compiled.grammar if index == 0 else compiled.renew()
            written = InstanceWriter(
                grammar,
                self._encode,
                self._stop_token,
                self._layout,
                case.schema,
                path.bitmask,
                integer_forms=instance.valid,
            ).write(instance.data)
            _check_faithful(written.text, instance.data)
            if written.accepted == instance.valid:
                if instance.valid:
                    result.valid_accepted += 1
                else:
                    result.invalid_rejected += 1
            else:
                result.wrong.append(_wrong(index, instance.description, instance.valid, written))
            if instance.valid and not timed:
                result.mask_ns = time_fills(compiled.renew(), path.bitmask, written.tokens)
                timed = True
        return result


def _check_faithful(text: str, data: Any) -> None:
    """The text fed to the grammar must be the instance, or every verdict means nothing."""
    if isinstance(data, RawText):
        if text != data.text:
            raise AssertionError(f"the writer changed the text instance: {text[:200]}")
        return
    if json.loads(text, parse_int=Decimal, parse_float=Decimal) != _decimals(data):
        raise AssertionError(f"the writer changed the instance: {text[:200]}")


def _decimals(value: Any) -> Any:
    if isinstance(value, NumberLiteral):
        return Decimal(value.text)
    if isinstance(value, dict):
        return {key: _decimals(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decimals(item) for item in value]
    return value


def _wrong(index: int, description: str, valid: bool, written: Written) -> WrongResult:
    text, at = written.text, written.refused_at
    centre = len(text) if at is None else at
    start = max(0, centre - _EXCERPT_BEFORE)
    end = min(len(text), centre + _EXCERPT_AFTER)
    excerpt = ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
    offset = None if at is None else at - start + (1 if start else 0)
    return WrongResult(index, description, valid, excerpt, offset)
