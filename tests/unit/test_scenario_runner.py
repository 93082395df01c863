"""Playing a scenario's timeline: batches, the clock, retries, pins and MissingRoute requests.

A recording fake decider shows what the runner hands to any engine; the reference engine shows the
resulting decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streaming.devtools.scenario.loader import load_scenario
from streaming.devtools.scenario.model import Scenario
from streaming.devtools.scenario.runner import ScenarioRunner
from streaming.errors import RouterError
from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.engine import ReferenceEngine
from streaming.rules.model import Decision, Outcome

HEADER = """\
instance:
  name: i1
  address: TCP://i1:4022
  databases:
    - {name: AW, broker_instance: 0a0a0a0a-0000-0000-0000-000000000001, services: [InitiatorService, BCN]}
    - {name: msdb, broker_instance: 0d0d0d0d-0000-0000-0000-000000000001}
    - {name: DB2, broker_instance: 0b0b0b0b-0000-0000-0000-000000000002, services: [TargetService]}
routes:
  - {scope: AW, name: AutoCreatedLocal, address: LOCAL}
  - {scope: msdb, name: AutoCreatedLocal, address: LOCAL}
"""


def scenario(tmp_path: Path, events: str, routes: str = "") -> Scenario:
    path = tmp_path / "case.yaml"
    path.write_text(HEADER + routes + "events:\n" + events)
    return load_scenario(path)


@dataclass
class Recorder:
    """A fake decider: delays whatever service is in `delay`, delivers everything else."""

    delay: set[str] = field(default_factory=set)
    request: set[str] = field(default_factory=set)
    batches: list[RoutingBatch] = field(default_factory=list)

    def decide(self, batch: RoutingBatch) -> BatchResult:
        self.batches.append(batch)
        decisions = []
        requests = []
        for m in batch.messages:
            if m.service in self.request:
                requests.append((m.origin, m.service))
            outcome = Outcome.DELAYED if m.service in self.delay | self.request else Outcome.DELIVER
            decisions.append(Decision(id=m.id, outcome=outcome))
        return BatchResult(decisions=tuple(decisions), requests=tuple(requests))


def ids(batch: RoutingBatch) -> list[str]:
    return [m.id for m in batch.messages]


def test_consecutive_messages_form_one_batch(tmp_path: Path) -> None:
    events = """\
  - message: {id: m1, conversation_id: c1, service: A, origin: AW}
  - message: {id: m2, conversation_id: c2, service: A, origin: AW}
  - advance: 3
  - message: {id: m3, conversation_id: c3, service: A, origin: remote}
"""
    recorder = Recorder()
    decisions = ScenarioRunner(recorder).run(scenario(tmp_path, events))
    assert [ids(b) for b in recorder.batches] == [["m1", "m2"], ["m3"]]
    assert [d.at.second for d in decisions if d.at] == [0, 0, 3]


def test_advance_retries_due_conversations_once_in_first_delayed_order(tmp_path: Path) -> None:
    events = """\
  - message: {id: b1, conversation_id: cb, service: Slow, origin: AW}
  - advance: 2
  - message: {id: a1, conversation_id: ca, service: Slow, origin: AW}
  - message: {id: b2, conversation_id: cb, service: Slow, origin: AW}
  - advance: 2
  - advance: 1
  - advance: 100
"""
    recorder = Recorder(delay={"Slow"})
    ScenarioRunner(recorder).run(scenario(tmp_path, events))
    batches = [
        (b.now.second + 60 * b.now.minute, ids(b), sorted(c for c, _ in b.waiting_endpoints))
        for b in recorder.batches
    ]
    assert batches == [
        (0, ["b1"], []),
        (2, ["a1", "b2"], ["cb"]),
        (5, ["b1", "b2"], ["ca"]),
        (105, ["b1", "a1", "b2"], []),
    ]


def test_delayed_again_is_due_retry_s_after_the_new_clock(tmp_path: Path) -> None:
    events = """\
  - message: {id: m1, conversation_id: c1, service: Slow, origin: AW}
  - advance: 7
  - advance: 4
  - advance: 1
"""
    recorder = Recorder(delay={"Slow"})
    decisions = ScenarioRunner(recorder).run(scenario(tmp_path, events))
    assert [d.at.second for d in decisions if d.at] == [0, 7, 12]


def test_routed_messages_leave_the_queue(tmp_path: Path) -> None:
    events = """\
  - message: {id: m1, conversation_id: c1, service: TargetService, origin: AW}
  - advance: 10
"""
    recorder = Recorder()
    ScenarioRunner(recorder).run(scenario(tmp_path, events))
    assert [ids(b) for b in recorder.batches] == [["m1"]]


def test_routes_and_mirrors_at_the_moment_of_each_batch(tmp_path: Path) -> None:
    events = """\
  - message: {id: m1, conversation_id: c1, service: A, origin: AW}
  - route: {op: create, scope: AW, name: New, service: A, address: "tcp://a:4022", lifetime_s: 60}
  - mirror: {address: "TCP://P1:4022/", role: principal}
  - message: {id: m2, conversation_id: c2, service: A, origin: AW}
  - route: {op: drop, scope: AW, name: New}
  - message: {id: m3, conversation_id: c3, service: A, origin: AW}
"""
    recorder = Recorder()
    ScenarioRunner(recorder).run(scenario(tmp_path, events))
    tables = [[r.name for r in b.routes] for b in recorder.batches]
    assert tables == [
        ["AutoCreatedLocal"] * 2,
        ["AutoCreatedLocal", "AutoCreatedLocal", "New"],
        ["AutoCreatedLocal"] * 2,
    ]
    assert [dict(b.mirrors) for b in recorder.batches][1] == {"tcp://p1:4022": "principal"}


def test_ack_pins_the_initiator_messages_and_current_database_resolves(tmp_path: Path) -> None:
    events = """\
  - message: {id: m1, conversation_id: c1, service: A, origin: AW, broker_instance: CURRENT DATABASE}
  - ack: {conversation_id: c1, broker_instance: 5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d}
  - message: {id: m2, conversation_id: c1, service: A, origin: AW, broker_instance: CURRENT DATABASE}
  - message: {id: r1, conversation_id: c1, service: B, origin: DB2, from_target: true,
              broker_instance: 0a0a0a0a-0000-0000-0000-000000000001}
  - message: {id: x1, conversation_id: c1, service: A, origin: remote}
  - message: {id: o1, conversation_id: c2, service: A, origin: AW}
"""
    recorder = Recorder()
    ScenarioRunner(recorder).run(scenario(tmp_path, events))
    brokers = {m.id: m.broker_instance for b in recorder.batches for m in b.messages}
    assert brokers == {
        "m1": "0a0a0a0a-0000-0000-0000-000000000001",
        "m2": "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d",
        "r1": "0a0a0a0a-0000-0000-0000-000000000001",
        "x1": None,
        "o1": None,
    }


def test_ack_applies_to_messages_already_waiting(tmp_path: Path) -> None:
    events = """\
  - message: {id: m1, conversation_id: c1, service: Slow, origin: AW}
  - ack: {conversation_id: c1, broker_instance: 5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d}
  - advance: 5
"""
    recorder = Recorder(delay={"Slow"})
    ScenarioRunner(recorder).run(scenario(tmp_path, events))
    assert recorder.batches[1].messages[0].broker_instance == "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"


def test_missing_route_requests_are_routed_as_messages_of_the_scope(tmp_path: Path) -> None:
    events = """\
  - message: {id: missing-route-1, conversation_id: c0, service: A, origin: AW}
  - message: {id: m1, conversation_id: c1, service: Unknown, origin: AW}
"""
    recorder = Recorder(request={"Unknown"})
    decisions = ScenarioRunner(recorder).run(scenario(tmp_path, events))
    request_batch = recorder.batches[1]
    (request,) = request_batch.messages
    assert request.id == "missing-route-2"
    assert (request.service, request.origin) == ("SQL/ServiceBroker/BrokerConfiguration", "AW")
    assert request.message_type.endswith("/BrokerConfigurationNotice/MissingRoute")
    assert request_batch.pending_requests == frozenset({("AW", "Unknown")})
    assert [d.id for d in decisions] == ["missing-route-1", "m1", "missing-route-2"]


def test_a_route_naming_the_service_ends_the_pending_request(tmp_path: Path) -> None:
    events = """\
  - message: {id: m1, conversation_id: c1, service: Unknown, origin: AW}
  - route: {op: create, scope: DB2, name: Elsewhere, service: Unknown, address: "tcp://u:4022"}
  - message: {id: m2, conversation_id: c2, service: A, origin: AW}
  - route: {op: create, scope: AW, name: Other, service: Other, address: "tcp://o:4022"}
  - message: {id: m3, conversation_id: c3, service: A, origin: AW}
  - route: {op: alter, scope: AW, name: Other, service: Unknown}
  - message: {id: m4, conversation_id: c4, service: A, origin: AW}
"""
    recorder = Recorder(request={"Unknown"})
    ScenarioRunner(recorder).run(scenario(tmp_path, events))
    pending = {ids(b)[0]: set(b.pending_requests) for b in recorder.batches}
    assert pending["m2"] == {("AW", "Unknown")}
    assert pending["m3"] == {("AW", "Unknown")}
    assert pending["m4"] == set()


def test_a_decider_answering_other_ids_is_an_error(tmp_path: Path) -> None:
    class Wrong:
        def decide(self, batch: RoutingBatch) -> BatchResult:
            return BatchResult(decisions=(Decision(id="other", outcome=Outcome.DELIVER),))

    events = "  - message: {id: m1, conversation_id: c1, service: A, origin: AW}\n"
    with pytest.raises(RouterError, match="other"):
        ScenarioRunner(Wrong()).run(scenario(tmp_path, events))


def test_reference_engine_through_the_runner(tmp_path: Path) -> None:
    routes = "  - {scope: AW, name: Bcn, service: BCN, address: LOCAL}\n"
    events = """\
  - message: {id: m1, conversation_id: c1, service: Far, origin: AW}
  - message: {id: m2, conversation_id: c1, service: Far, origin: AW}
  - route: {op: create, scope: AW, name: FarRoute, service: Far, address: "tcp://far:4022"}
  - advance: 5
"""
    decisions = ScenarioRunner(ReferenceEngine()).run(scenario(tmp_path, events, routes))
    assert [(d.id, d.outcome.value, d.at.second if d.at else None) for d in decisions] == [
        ("m1", "delayed", 0),
        ("m2", "delayed", 0),
        ("m1", "send", 5),
        ("m2", "send", 5),
    ]


def test_runner_is_reusable_and_runs_are_independent() -> None:
    path = (
        Path(__file__).parents[1]
        / "scenarios"
        / "rules"
        / "d1-later-messages-wait-behind-the-delayed-one.yaml"
    )
    runner = ScenarioRunner(ReferenceEngine())
    loaded = load_scenario(path)
    assert runner.run(loaded) == runner.run(loaded)
