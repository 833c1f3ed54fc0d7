"""The collection schemas whose keys routing would upgrade; instances written into their grammars.

For ``integration_tests/test_upgrade_language.py`` and ``scripts/sample_test_data.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.model import model_tokenizer
from harness.schema_data.cases import Case, Selection, discover, load_case, sample_data_dir
from harness.schema_data.writer import InstanceWriter, Layout, token_encoder


@dataclass(frozen=True)
class Upgradable:
    name: str
    case: Case
    spec: Any  # GrammarSpec


def upgradable_cases(data_dir: Path | None = None) -> list[Upgradable]:
    """The collection schemas whose compact JSON keys routing would offer an upgrade.

    ``data_dir``: the folder holding both collections; by default the repository's sample.
    """
    from grammar_guard.core.engines.routing import route, upgrade_target
    from grammar_guard.core.errors import InvalidGrammarError
    from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

    data_dir = data_dir or sample_data_dir()
    found = []
    for ref in discover(data_dir, Selection()):
        case = load_case(data_dir, ref)
        try:
            options = CompileOptions(any_whitespace=False)
            spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, case.schema, options)
            chosen = route(spec)
        except InvalidGrammarError:
            continue
        if upgrade_target(spec, chosen) is not None:
            found.append(Upgradable(ref.name, case, spec))
    return found


def write_instance(routed: Any, compiled: Any, case: Case, data: Any, *, valid: bool) -> Any:
    """The coverage writer's ``Written`` for ``data`` in a fresh grammar of ``compiled``."""
    from grammar_guard.core.masks.layout import allocate_bitmask
    from grammar_guard.vllm_adapter.backend import GuardedGrammar

    tokenizer = model_tokenizer()
    matcher = routed.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    writer = InstanceWriter(
        GuardedGrammar(matcher, "benchmark"),
        token_encoder(tokenizer),
        int(tokenizer.eos_token_id),
        Layout(whitespace=False),
        case.schema,
        allocate_bitmask(1, routed.vocab_size),
        integer_forms=valid,
    )
    return writer.write(data)


def routed_engine() -> Any:
    """Both engines routed per key, as the backend builds them for the tiny model."""
    from grammar_guard.core.engines.factory import build_engine
    from grammar_guard.core.engines.routed import RoutedEngine
    from grammar_guard.core.settings import EngineSelection

    tokenizer = model_tokenizer()
    engine = build_engine(tokenizer, len(tokenizer), selection=EngineSelection.AUTO)
    assert isinstance(engine, RoutedEngine)
    return engine
