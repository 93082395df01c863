"""Compare a scenario's decisions with its `expect`, `expect_spread` and `expect_same` keys.

The semantics are those of docs/scenarios.md, "What `expect` may say":

* `expect: {id: {...}}` must match the first decision for that id; `expect: {id: [{...}, ...]}`
  must match the decisions for that id in order, and there must be exactly that many;
* only the fields named are compared; a value may be `{any_of: [...]}`; addresses are compared
  case-insensitively and without a trailing `/`;
* `expect_spread`: over the ids' first decisions, every listed value of the field appears;
* `expect_same`: the ids' first decisions all have the same value of the field.

Decisions are compared as `router resolve` prints them (`Decision.to_json_dict`). Any `Decider`
can be checked: pass a factory, so one suite runs on the reference and the Spark engine alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from streaming.devtools.scenario.loader import load_scenario
from streaming.devtools.scenario.model import Scenario
from streaming.devtools.scenario.runner import ScenarioRunner
from streaming.rules.batch import Decider

DeciderFactory = Callable[[], Decider]
JsonDecision = Mapping[str, Any]


def comparable(field: str, value: Any) -> Any:
    """The form a field's value is compared in: addresses lowercase, no trailing `/`."""
    if field == "address" and isinstance(value, str):
        return value.strip().rstrip("/").lower()
    return value


def field_matches(field: str, want: Any, got: Any) -> bool:
    """True when a decision's value `got` satisfies the expected `want` (plain or `any_of`)."""
    if isinstance(want, dict) and "any_of" in want:
        return any(field_matches(field, option, got) for option in want["any_of"])
    return bool(comparable(field, want) == comparable(field, got))


def check_expectation(expectation: Mapping[str, Any], decision: JsonDecision) -> list[str]:
    """Return one problem per field of `expectation` that `decision` does not satisfy."""
    return [
        f"{field}: want {want!r}, got {decision.get(field)!r}"
        for field, want in expectation.items()
        if not field_matches(field, want, decision.get(field))
    ]


def evaluate(scenario: Scenario, decisions: Sequence[JsonDecision]) -> list[str]:
    """Return every way `decisions` fail the scenario's expectations (empty when they pass)."""
    by_id: dict[str, list[JsonDecision]] = {}
    for decision in decisions:
        by_id.setdefault(str(decision.get("id")), []).append(decision)
    problems: list[str] = []
    for mid, want in scenario.expect.items():
        got = by_id.get(mid, [])
        if isinstance(want, list):
            if len(got) != len(want):
                problems.append(f"{mid}: want {len(want)} decisions, got {len(got)}: {got}")
                continue
            for i, (one, decision) in enumerate(zip(want, got, strict=True)):
                problems += [f"{mid}[{i}] {p}" for p in check_expectation(one, decision)]
        elif not got:
            problems.append(f"{mid}: no decision printed")
        else:
            problems += [f"{mid} {p}" for p in check_expectation(want, got[0])]
    problems += _spread_problems(scenario.expect_spread, by_id)
    problems += _same_problems(scenario.expect_same, by_id)
    return problems


def _spread_problems(spread: Mapping[str, Any] | None, by_id: Mapping[str, list[JsonDecision]]) -> list[str]:
    if not spread:
        return []
    field = spread["field"]
    ids = [str(i) for i in spread["ids"]]
    seen = {json.dumps(comparable(field, by_id[i][0].get(field))) for i in ids if by_id.get(i)}
    return [
        f"spread: {field}={value!r} never chosen among {ids} (saw {sorted(seen)})"
        for value in spread["values"]
        if json.dumps(comparable(field, value)) not in seen
    ]


def _same_problems(same: Mapping[str, Any] | None, by_id: Mapping[str, list[JsonDecision]]) -> list[str]:
    if not same:
        return []
    field = same["field"]
    ids = [str(i) for i in same["ids"]]
    values = {json.dumps(by_id[i][0].get(field)) for i in ids if by_id.get(i)}
    return [f"same: {field} differs across {ids}: {sorted(values)}"] if len(values) > 1 else []


def run_scenario(scenario: Scenario, decider: Decider) -> list[dict[str, object]]:
    """Play the scenario with `decider` and return its decisions as `router resolve` prints them."""
    return [d.to_json_dict() for d in ScenarioRunner(decider).run(scenario)]


def check_scenario_file(path: str | Path, make_decider: DeciderFactory) -> list[str]:
    """Load, run and evaluate one scenario file with a fresh decider; empty when it passes."""
    scenario = load_scenario(path)
    return evaluate(scenario, run_scenario(scenario, make_decider()))
