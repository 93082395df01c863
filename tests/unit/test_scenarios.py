"""Every scenario of the project's suite (tests/scenarios) passes on the reference engine.

`tests/scenarios/examples/` are the routing documentation's worked examples; `tests/scenarios/rules/`
pin down one or a few rule ids each (file names start with the rule id). The same files and the same
evaluator (`streaming.devtools.scenario.check`) serve any other engine: pass another decider factory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.devtools.scenario.check import check_scenario_file
from streaming.rules.engine import ReferenceEngine

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
FILES = sorted(SCENARIOS.rglob("*.yaml"))


def test_the_suite_is_there() -> None:
    assert len(list((SCENARIOS / "examples").glob("*.yaml"))) == 41
    assert len(list((SCENARIOS / "rules").glob("*.yaml"))) >= 60


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_scenario_on_the_reference_engine(path: Path) -> None:
    assert check_scenario_file(path, ReferenceEngine) == []


RULE_FAMILIES = ("s", "r", "m", "c", "l", "d", "b", "f", "mi", "t")


@pytest.mark.parametrize("family", RULE_FAMILIES)
def test_every_rule_family_has_scenarios(family: str) -> None:
    prefixes = {p.stem.split("-")[0].rstrip("0123456789") for p in (SCENARIOS / "rules").glob("*.yaml")}
    assert family in prefixes
