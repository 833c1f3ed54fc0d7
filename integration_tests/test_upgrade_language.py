"""An upgraded key enforces the same language on xgrammar as it did on llguidance.

Routing offers a background upgrade (``routing.upgrade_target``) only for
keys both engines enforce alike; this checks that claim on the shared
collections. Each upgradable schema is compiled by both engines as the
backend builds them, over the real 129k-token tokenizer, and every labelled
instance of its file is written into a fresh grammar of each, token by token
(the coverage benchmark's writer): both must give the same verdict on every
instance, and the right one.

About a hundred schemas of both collections qualify; each costs seconds of
xgrammar compile, so CI checks every ``SAMPLE_EVERY``-th of them (each
category among them). ``GRAMMAR_GUARD_CHECK_EVERY_UPGRADE=1`` checks them
all (about 10 minutes on 2 cores). Needs ../shared/data next to the
repository root.
"""

from __future__ import annotations

import os

import pytest
from benchmarks.coverage.cases import Case, Selection, default_data_dir, discover, load_case
from benchmarks.coverage.checker import load_tokenizer
from benchmarks.coverage.key_order import SchemaNavigator
from benchmarks.coverage.writer import InstanceWriter, Layout

from grammar_guard.core.bitmask import allocate_bitmask
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.routing import (
    EngineName,
    RoutedEngine,
    route,
    slow_for_xgrammar,
    upgrade_target,
)
from grammar_guard.core.settings import EngineSelection
from grammar_guard.core.spec import CompileOptions, GrammarSpec, RequestKind

DATA_DIR = default_data_dir()
SAMPLE_EVERY = 8
CHECK_ALL = os.environ.get("GRAMMAR_GUARD_CHECK_EVERY_UPGRADE") == "1"
COMPACT = CompileOptions(any_whitespace=False)

pytestmark = pytest.mark.skipif(
    not DATA_DIR.is_dir(), reason=f"the shared data folder {DATA_DIR} is absent"
)


def _upgradable() -> list[tuple[str, Case, GrammarSpec]]:
    found = []
    for ref in discover(DATA_DIR, Selection()):
        case = load_case(DATA_DIR, ref)
        try:
            spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, case.schema, COMPACT)
            chosen = route(spec)
        except InvalidGrammarError:
            continue
        if upgrade_target(spec, chosen, slow=slow_for_xgrammar(spec)) is not None:
            found.append((ref.name, case, spec))
    return found


@pytest.fixture(scope="module")
def routed() -> RoutedEngine:
    from grammar_guard.vllm_adapter.backend import build_engine

    tokenizer = load_tokenizer()
    engine = build_engine(tokenizer, len(tokenizer), selection=EngineSelection.AUTO)
    assert isinstance(engine, RoutedEngine)
    return engine


def _verdicts(
    routed: RoutedEngine, engine: EngineName, case: Case, spec: GrammarSpec
) -> list[bool]:
    """Whether each instance of ``case`` is accepted whole by ``engine``'s grammar of ``spec``."""
    from grammar_guard.vllm_adapter.backend import GuardedGrammar

    tokenizer = load_tokenizer()
    compiled = routed.compile_part(spec, engine.value)
    bitmask = allocate_bitmask(1, routed.vocab_size)
    navigator = SchemaNavigator(case.schema)

    def encode(text: str) -> tuple[int, ...]:
        # A key or string that spells a special token is still plain text.
        return tuple(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    verdicts = []
    for instance in case.instances:
        matcher = routed.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
        writer = InstanceWriter(
            GuardedGrammar(matcher, spec.describe()),
            encode,
            int(tokenizer.eos_token_id),
            Layout(whitespace=False),
            navigator,
            bitmask,
            integer_forms=instance.valid,
        )
        verdicts.append(writer.write(instance.data, case.schema).accepted)
    return verdicts


def test_both_engines_give_every_instance_of_an_upgradable_schema_the_same_verdict(
    routed: RoutedEngine,
) -> None:
    upgradable = _upgradable()
    assert len(upgradable) >= 50, f"only {len(upgradable)} upgradable schemas: is the data whole?"
    checked = upgradable if CHECK_ALL else upgradable[::SAMPLE_EVERY]
    disagreements, wrong, instances = [], [], 0
    for name, case, spec in checked:
        assert routed.plan(spec).upgrade == EngineName.XGRAMMAR.value
        first = _verdicts(routed, EngineName.LLGUIDANCE, case, spec)
        upgraded = _verdicts(routed, EngineName.XGRAMMAR, case, spec)
        for index, instance in enumerate(case.instances):
            instances += 1
            if first[index] != upgraded[index]:
                disagreements.append(f"{name} #{index} ({instance.description})")
            elif first[index] != instance.valid:
                wrong.append(f"{name} #{index} ({instance.description})")
    assert instances >= len(checked), "no instances were written"
    assert not disagreements, f"{len(disagreements)} verdicts differ: " + "; ".join(disagreements)
    # Both engines agreeing on a wrong verdict would be a coverage gap, not an
    # upgrade's: counted by the coverage benchmark, shown here for the record.
    print(f"{len(checked)} schemas, {instances} instances, {len(wrong)} wrong on both: {wrong}")
