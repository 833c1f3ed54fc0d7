"""An upgraded key enforces the same language on xgrammar as it did on llguidance.

Routing offers a background upgrade (``routing.upgrade_target``) only for
keys both engines enforce alike; this checks that claim on the schema
collections. Each upgradable schema is compiled by both engines as the
backend builds them, over the real 129k-token tokenizer, and every labelled
instance of its file is written into a fresh grammar of each, token by token
(the coverage benchmark's writer): both must give the same verdict on every
instance.

About a hundred schemas of both collections qualify; each costs seconds of
xgrammar compile, so CI checks every ``SAMPLE_EVERY``-th of them (each
category among them). ``GRAMMAR_GUARD_CHECK_EVERY_UPGRADE=1`` checks them
all (about 10 minutes on 2 cores). Reads the repository's data/, whose
jsonschemabench sample holds every upgradable schema of the full collection
(scripts/sample_test_data.py), so the same schemas are checked as on it.
"""

from __future__ import annotations

import os

import pytest
from harness.schema_data.cases import sample_data_dir
from harness.schema_data.upgradable import routed_engine, upgradable_cases, write_instance

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.routed import RoutedEngine

DATA_DIR = sample_data_dir()
SAMPLE_EVERY = 8
CHECK_ALL = os.environ.get("GRAMMAR_GUARD_CHECK_EVERY_UPGRADE") == "1"


@pytest.fixture(scope="module")
def routed() -> RoutedEngine:
    engine: RoutedEngine = routed_engine()
    return engine


def test_both_engines_give_every_instance_of_an_upgradable_schema_the_same_verdict(
    routed: RoutedEngine,
) -> None:
    upgradable = upgradable_cases(DATA_DIR)
    assert len(upgradable) >= 50, f"only {len(upgradable)} upgradable schemas: is data/ whole?"
    checked = upgradable if CHECK_ALL else upgradable[::SAMPLE_EVERY]
    disagreements, wrong, instances = [], [], 0
    for item in checked:
        assert routed.plan(item.spec).upgrade == EngineName.XGRAMMAR.value
        compiled = {engine: routed.compile_on(item.spec, engine) for engine in EngineName}
        for index, instance in enumerate(item.case.instances):
            instances += 1
            verdicts = {
                engine: write_instance(
                    routed, compiled[engine], item.case, instance.data, valid=instance.valid
                ).accepted
                for engine in EngineName
            }
            label = f"{item.name} #{index} ({instance.description})"
            if len(set(verdicts.values())) > 1:
                disagreements.append(label)
            elif verdicts[EngineName.XGRAMMAR] != instance.valid:
                wrong.append(label)
    assert instances >= len(checked), "no instances were written"
    assert not disagreements, f"{len(disagreements)} verdicts differ: " + "; ".join(disagreements)
    # Both engines agreeing on a wrong verdict would be a coverage gap, not an
    # upgrade's: counted by the coverage benchmark, shown here for the record.
    print(f"{len(checked)} schemas, {instances} instances, {len(wrong)} wrong on both: {wrong}")
