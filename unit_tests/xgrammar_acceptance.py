"""Whether xgrammar's own JSON-schema grammar accepts a value: the oracle side of the schema tests.

Shared by the core analysis tests and the comparison with vLLM's xgrammar path.
"""

from __future__ import annotations

import functools
import itertools
import json
from typing import Any

import xgrammar as xgr


@functools.cache
def compiler() -> xgr.GrammarCompiler:
    return xgr.GrammarCompiler(xgr.TokenizerInfo([]), max_threads=1, cache_enabled=False)


def compile_schema(schema: Any) -> xgr.CompiledGrammar:
    grammar = xgr.Grammar.from_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":")
    )
    return compiler().compile_grammar(grammar)


def accepts_text(compiled: xgr.CompiledGrammar, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return bool(matcher.accept_string(text)) and bool(matcher.is_terminated())


MAX_SERIALISATIONS = 256


def serialisations(value: Any) -> list[str]:
    """Ways to write ``value`` as xgrammar's compact grammars may expect it.

    Compact JSON, with: object keys in every order (a few orders past four
    keys), ", " as well as "," between items (xgrammar's any-value rules use
    ", " even in compact mode), non-ASCII as is or escaped, and whole floats
    also as integers. An invalid instance counts as accepted if any is.
    """
    if value is None or isinstance(value, bool):
        return [json.dumps(value)]
    if isinstance(value, int | float):
        forms = [json.dumps(value)]
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
            forms.append(str(int(value)))
        return forms
    if isinstance(value, str):
        return list(dict.fromkeys([json.dumps(value, ensure_ascii=False), json.dumps(value)]))
    out: list[str] = []
    if isinstance(value, list):
        if not value:
            return ["[]"]
        items = [serialisations(item)[:8] for item in value]
        for separator in [","] if len(value) == 1 else [",", ", "]:
            for combo in itertools.product(*items):
                out.append("[" + separator.join(combo) + "]")
                if len(out) >= MAX_SERIALISATIONS:
                    return out
        return out
    if not value:
        return ["{}"]
    keys = list(value)
    orders = (
        list(itertools.permutations(keys)) if len(keys) <= 4 else [keys, sorted(keys), keys[::-1]]
    )
    members = {
        key: list(itertools.product(serialisations(key), serialisations(value[key])[:8]))
        for key in keys
    }
    for order in orders:
        for separator in [","] if len(keys) == 1 else [",", ", "]:
            for combo in itertools.product(*(members[key] for key in order)):
                out.append("{" + separator.join(k + ":" + v for k, v in combo) + "}")
                if len(out) >= MAX_SERIALISATIONS:
                    return out
    return out


def accepted(compiled: xgr.CompiledGrammar, value: Any) -> bool:
    return any(accepts_text(compiled, text) for text in serialisations(value))
