"""Loading scenario files: the model they build and the errors bad input gets, at load time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from streaming.devtools.scenario.loader import load_scenario
from streaming.devtools.scenario.model import AckEvent, AdvanceEvent, MessageEvent, MirrorEvent, RouteEvent
from streaming.errors import ConfigError
from streaming.rules.model import CURRENT_DATABASE, MirrorRole

GOOD = """\
name: sample
clock: 2026-02-01T10:00:00Z
instance:
  name: i1
  address: TCP://i1:4022
  forwarding: true
  databases:
    - {name: AW, broker_instance: 0A0A0A0A-0000-0000-0000-000000000001, services: [InitiatorService]}
    - {name: msdb, broker_instance: 0d0d0d0d-0000-0000-0000-000000000001}
routes:
  - {scope: AW, name: AutoCreatedLocal, address: LOCAL}
  - {scope: AW, name: Short, service: S, address: "tcp://h:4022/", lifetime_s: 30}
mirrors:
  "TCP://P1:4022/": principal
events:
  - message: {id: m1, conversation_id: c1, service: S, origin: AW, broker_instance: CURRENT DATABASE}
  - advance: 10
  - route: {op: create, scope: AW, name: Later, service: T, address: "tcp://t:4022", lifetime_s: 5}
  - route: {op: alter, scope: AW, name: Short, lifetime_s: 100}
  - route: {op: drop, scope: AW, name: Later}
  - ack: {conversation_id: c1, broker_instance: 5FB8D92B-ED69-4C80-AFBB-2AA6A7D3CB2D}
  - mirror: {address: "tcp://p2:4022", role: mirror}
  - message: {id: 7, conversation_id: 8, service: S, origin: remote, hops_remaining: 3, time_to_live_s: 1.5}
expect:
  m1: {outcome: send}
  "7": [{outcome: forward, hops_remaining: 2}]
expect_same: {ids: [m1], field: address}
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert str(path) in message
    return message


def test_a_good_scenario_loads_into_model_objects(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, GOOD))
    clock = datetime(2026, 2, 1, 10, tzinfo=timezone.utc)
    assert (scenario.name, scenario.clock) == ("sample", clock)
    assert scenario.instance.forwarding and scenario.instance.retry_s == 5
    assert scenario.instance.databases[0].broker_instance == "0a0a0a0a-0000-0000-0000-000000000001"
    short = scenario.routes[1]
    assert (short.name, short.expires_at, short.address) == (
        "Short",
        clock + timedelta(seconds=30),
        "tcp://h:4022/",
    )
    assert scenario.mirrors == {"tcp://p1:4022": MirrorRole.PRINCIPAL}
    kinds = [type(e) for e in scenario.events]
    assert kinds == [
        MessageEvent,
        AdvanceEvent,
        RouteEvent,
        RouteEvent,
        RouteEvent,
        AckEvent,
        MirrorEvent,
        MessageEvent,
    ]
    first, last = scenario.events[0], scenario.events[-1]
    assert isinstance(first, MessageEvent) and first.message.broker_instance == CURRENT_DATABASE
    assert isinstance(last, MessageEvent)
    assert (last.message.id, last.message.conversation_id, last.message.hops_remaining) == ("7", "8", 3)
    ack = scenario.events[5]
    assert isinstance(ack, AckEvent) and ack.broker_instance == "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
    alter = scenario.events[3]
    assert isinstance(alter, RouteEvent)
    assert alter.operation.changes == (("expires_at", clock + timedelta(seconds=110)),)
    assert scenario.expect["7"] == [{"outcome": "forward", "hops_remaining": 2}]
    assert scenario.expect_same == {"ids": ["m1"], "field": "address"}


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, GOOD.replace("name: sample\n", ""), "my-case.yaml"))
    assert scenario.name == "my-case"


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("name: sample", "name: sample\nextra: 1", ["'extra'", "unknown field"]),
        ("forwarding: true", "forwarding: yes please", ["'forwarding'"]),
        ("0A0A0A0A-0000-0000-0000-000000000001", "not-a-guid", ["'broker_instance'", "GUID"]),
        ('address: "tcp://h:4022/"', 'address: "http://h"', ["'address'", "route AW/Short"]),
        ("name: Short, service: S,", "name: Short, servce: S,", ["'servce'"]),
        (
            "{scope: AW, name: AutoCreatedLocal, address: LOCAL}",
            "{scope: AW, name: AutoCreatedLocal, address: LOCAL, mirror_address: 'tcp://m:4022'}",
            ["'mirror_address'", "R5"],
        ),
        (
            "{scope: AW, name: AutoCreatedLocal, address: LOCAL}",
            "{scope: Nowhere, name: AutoCreatedLocal, address: LOCAL}",
            ["'scope'", "Nowhere"],
        ),
        (
            "{scope: AW, name: AutoCreatedLocal, address: LOCAL}",
            "{scope: AW, name: Transport, service: S, address: TRANSPORT}",
            ["'service'", "T3"],
        ),
        (
            "{scope: AW, name: AutoCreatedLocal, address: LOCAL}",
            "{scope: AW, name: Short, address: LOCAL}",
            ["duplicate route"],
        ),
        (
            "{scope: AW, name: AutoCreatedLocal, address: LOCAL}",
            "{scope: AW, name: Bcn, service: SQL/ServiceBroker/BrokerConfiguration, "
            "broker_instance: 0a0a0a0a-0000-0000-0000-000000000001, address: LOCAL}",
            ["R9"],
        ),
        ('"TCP://P1:4022/": principal', '"TCP://P1:4022/": boss', ["principal", "'role'"]),
        ("origin: AW, broker", "origin: Nowhere, broker", ["'origin'"]),
        ("id: 7, conversation_id: 8", "id: m1, conversation_id: 8", ["'id'", "already used"]),
        ("hops_remaining: 3", "hops_remaining: 256", ["'hops_remaining'"]),
        ("hops_remaining: 3", "hops_remaining: 3, color: red", ["'color'"]),
        ("origin: remote, hops", "origin: remote, broker_instance: CURRENT DATABASE, hops", ["K1"]),
        ("{op: drop, scope: AW, name: Later}", "{op: drop, scope: AW, name: Missing}", ["does not exist"]),
        (
            "{op: alter, scope: AW, name: Short, lifetime_s: 100}",
            "{op: alter, scope: AW, name: Short, service: null}",
            ["R7"],
        ),
        (
            "{op: alter, scope: AW, name: Short, lifetime_s: 100}",
            "{op: alter, scope: AW, name: AutoCreatedLocal, mirror_address: 'tcp://m:4022'}",
            ["R5"],
        ),
        (
            "{op: create, scope: AW, name: Later,",
            "{op: create, scope: AW, name: Short,",
            ["R1", "exists already"],
        ),
        ("{op: create, scope: AW, name: Later,", "{scope: AW, name: Later,", ["'op'"]),
        ("  - advance: 10", "  - advance: -1", ["'advance'"]),
        ("  - advance: 10", "  - wait: 10", ["one of message"]),
        ("  m1: {outcome: send}", "  m1: {outcom: send}", ["'outcom'"]),
        ("expect_same: {ids: [m1], field: address}", "expect_same: {ids: m1, field: address}", ["'ids'"]),
        ("clock: 2026-02-01T10:00:00Z", "clock: yesterday", ["'clock'"]),
    ],
)
def test_bad_input_is_refused_naming_file_and_field(
    tmp_path: Path, old: str, new: str, words: list[str]
) -> None:
    assert old in GOOD
    message = load_error(tmp_path, GOOD.replace(old, new, 1))
    for word in words:
        assert word in message


def test_errors_name_the_line(tmp_path: Path) -> None:
    line = next(n for n, text in enumerate(GOOD.splitlines(), start=1) if "id: 7" in text)
    message = load_error(tmp_path, GOOD.replace("hops_remaining: 3", "hops_remaining: -1"))
    assert f"s.yaml:{line}: message 7: field 'hops_remaining'" in message


def test_missing_instance_and_broken_yaml(tmp_path: Path) -> None:
    assert "'instance'" in load_error(tmp_path, "name: x\nevents: []\n")
    assert "not valid YAML" in load_error(tmp_path, "name: [unclosed\n")
    assert "expected a mapping" in load_error(tmp_path, "- just\n- a list\n")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_every_project_scenario_loads() -> None:
    files = sorted((Path(__file__).parents[1] / "scenarios").rglob("*.yaml"))
    assert len(files) >= 100
    for path in files:
        assert load_scenario(path).expect, f"{path.name} expects nothing"
