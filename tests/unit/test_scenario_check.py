"""The scenario evaluator: the semantics of `expect`, `expect_spread` and `expect_same`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from streaming.devtools.scenario.check import check_scenario_file, evaluate, field_matches
from streaming.devtools.scenario.loader import parse_scenario
from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.engine import ReferenceEngine
from streaming.rules.model import Decision, Outcome

INSTANCE = {
    "name": "i1",
    "address": "TCP://i1:4022",
    "databases": [{"name": "AW", "broker_instance": "0a0a0a0a-0000-0000-0000-000000000001"}],
}


def problems(decisions: list[dict[str, Any]], **keys: Any) -> list[str]:
    scenario = parse_scenario(yaml.safe_dump({"instance": INSTANCE, **keys}), source="inline")
    return evaluate(scenario, decisions)


def test_addresses_compare_case_insensitively_without_trailing_slash() -> None:
    assert field_matches("address", "tcp://Host:4022/", "TCP://host:4022")
    assert not field_matches("address", "tcp://host:4022", "tcp://host:4023")
    assert not field_matches("route", "Route", "route")


def test_any_of() -> None:
    assert field_matches("route", {"any_of": ["A", "B"]}, "B")
    assert not field_matches("route", {"any_of": ["A", "B"]}, "C")
    assert field_matches("route", {"any_of": [None]}, None)


def test_single_expectation_checks_the_first_decision_only() -> None:
    decisions = [{"id": "m1", "outcome": "delayed"}, {"id": "m1", "outcome": "send"}]
    assert problems(decisions, expect={"m1": {"outcome": "delayed"}}) == []
    assert problems(decisions, expect={"m1": {"outcome": "send"}}) == [
        "m1 outcome: want 'send', got 'delayed'"
    ]


def test_list_expectation_needs_exactly_that_many_in_order() -> None:
    decisions = [{"id": "m1", "outcome": "delayed"}, {"id": "m1", "outcome": "send"}]
    assert problems(decisions, expect={"m1": [{"outcome": "delayed"}, {"outcome": "send"}]}) == []
    assert problems(decisions, expect={"m1": [{"outcome": "send"}, {"outcome": "delayed"}]}) != []
    (too_few,) = problems(decisions, expect={"m1": [{"outcome": "delayed"}]})
    assert too_few.startswith("m1: want 1 decisions, got 2")
    assert problems([], expect={"m9": []}) == []


def test_missing_decision_and_missing_field() -> None:
    assert problems([], expect={"m1": {"outcome": "send"}}) == ["m1: no decision printed"]
    assert problems([{"id": "m1", "outcome": "send"}], expect={"m1": {"route": None}}) == []
    assert problems([{"id": "m1", "outcome": "send"}], expect={"m1": {"route": "R"}}) != []


def test_expect_spread() -> None:
    decisions = [{"id": "a", "address": "tcp://X:1/"}, {"id": "b", "address": "tcp://y:1"}]
    spread: dict[str, Any] = {"ids": ["a", "b"], "field": "address", "values": ["tcp://x:1", "tcp://y:1/"]}
    assert problems(decisions, expect_spread=spread) == []
    spread["values"].append("tcp://z:1")
    (problem,) = problems(decisions, expect_spread=spread)
    assert problem.startswith("spread: address='tcp://z:1' never chosen")


def test_expect_same() -> None:
    same = {"ids": ["a", "b"], "field": "route"}
    assert problems([{"id": "a", "route": "R"}, {"id": "b", "route": "R"}], expect_same=same) == []
    assert problems([{"id": "a", "route": "R"}, {"id": "b", "route": "S"}], expect_same=same) != []


def test_check_scenario_file_takes_any_decider_factory() -> None:
    path = Path(__file__).parents[1] / "scenarios" / "examples" / "ex2a-network-route-to-one-service.yaml"

    class AlwaysDelay:
        def decide(self, batch: RoutingBatch) -> BatchResult:
            return BatchResult(tuple(Decision(id=m.id, outcome=Outcome.DELAYED) for m in batch.messages))

    assert check_scenario_file(path, ReferenceEngine) == []
    assert check_scenario_file(path, AlwaysDelay) != []
