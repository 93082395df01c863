"""`router explain` without a broker: topics, the window, a message's path from its records, the replay.

The records are built as the router writes them (`streaming.contract.MESSAGE_HEADERS`): the
outbound record a service wrote has no decision headers, every later record carries its decision.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from streaming import topics
from streaming.commands.explain import path_json, render_path, render_replay, replay_json
from streaming.errors import ConfigError
from streaming.instants import window_start
from streaming.kafka.avro import new_message_record
from streaming.observe.explain import (
    FoundRecord,
    MessagePath,
    NoReplay,
    Replay,
    Search,
    Tables,
    UndecodableDeadLetter,
    assemble_path,
    classify_topic,
    not_found_json,
    not_found_text,
    replay_latest,
    unescape,
)
from streaming.rules.model import Database, Instance, Route

P = "demo"
UTC = timezone.utc
T0 = datetime(2026, 11, 28, 10, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5)
AW_GUID = "2b0c4f4e-6b1d-4a7e-9a35-1c7f0e6d5a01"
I2 = Instance(
    "i2",
    "TCP://i2.example:4022",
    (
        Database("Parts", "7e3d9c21-58f4-4b0a-8d6e-3f2a1b0c9d01", True, ("OrderParts",)),
        Database("msdb", "7e3d9c21-58f4-4b0a-8d6e-3f2a1b0c9d02", True, ()),
    ),
)
I1 = Instance(
    "i1",
    "TCP://i1.example:4022",
    (
        Database("AW", AW_GUID, True, ("InitiatorService", "AuditService")),
        Database("msdb", "2b0c4f4e-6b1d-4a7e-9a35-1c7f0e6d5a02", True, ()),
    ),
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def text(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


def value(message_id: str = "m-17", service: str = "OrderParts", **fields: Any) -> dict[str, Any]:
    record = new_message_record(
        message_id=message_id,
        conversation_id="c-9",
        to_service=service,
        from_service="InitiatorService",
        origin_database="AW",
        enqueued_at=T0,
        body=b"<order/>",
    )
    record.update(fields)
    return record


def decided(
    instance: str,
    seconds: float,
    outcome: str,
    scope: str,
    *,
    snapshot: str = "routes@p0:6 mirrors@none",
    **more: str,
) -> dict[str, str]:
    headers = {"outcome": outcome, "scope": scope, "snapshot_version": snapshot}
    headers.update(more)
    headers.update({"decided_at": text(at(seconds)), "router_instance": instance})
    return headers


def found(
    topic: str, offset: int, headers: dict[str, str] | None = None, seconds: float = 0, **fields: Any
) -> FoundRecord:
    kind = classify_topic(P, topic)
    assert kind is not None, topic
    return FoundRecord(kind, 0, offset, at(seconds), headers or {}, value(**fields))


def chain() -> list[FoundRecord]:
    """OrderParts from i1/AW through the forwarder f1 to i2, as the demo routes it."""
    return [
        found(topics.outbound_topic("i1", P), 0, seconds=0),
        found(
            topics.inbound_topic("f1", P),
            0,
            decided("i1", 1.2, "send", "AW", route="OrderPartsRoute", match_step="M2", choice_step="C3",
                    address="TCP://f1.example:4022"),
            seconds=1.2,
        ),
        found(
            topics.inbound_topic("i2", P),
            0,
            decided("f1", 2.0, "forward", "msdb", route="ToOrderParts", match_step="M2", choice_step="C3",
                    address="TCP://i2.example:4022"),
            seconds=2.0,
            hops_remaining=15,
        ),
        found(
            topics.queue_topic("i2", "Parts", "OrderParts", P),
            0,
            decided("i2", 3.1, "deliver", "msdb", route="AutoCreatedLocal", match_step="M5", choice_step="C2",
                    database="Parts"),
            seconds=3.1,
            hops_remaining=15,
        ),
    ]  # fmt: skip


def path_of(records: list[FoundRecord], message_id: str = "m-17") -> MessagePath:
    path = assemble_path(message_id, records, NOW)
    assert path is not None
    return path


# --- topics and the window ---------------------------------------------------------------------------


def test_topics_are_told_apart_by_kind_and_instance() -> None:
    odd = "Audit Service/ü"
    cases = {
        topics.outbound_topic("i1", P): ("outbound", "i1", None),
        topics.inbound_topic("f-1", P): ("inbound", "f-1", None),
        topics.queue_topic("i2", "Parts", odd, P): ("queue", "i2", f"Parts/{odd}"),
        topics.network_topic("tcp://far.example:4022", P): ("network", None, "tcp://far.example:4022"),
        topics.delayed_topic("i1", P): ("delayed", "i1", None),
        topics.dropped_topic("i1", P): ("dropped", "i1", None),
        topics.deadletter_topic("i1", P): ("deadletter", "i1", None),
    }
    for name, expected in cases.items():
        kind = classify_topic(P, name)
        assert kind is not None and (kind.kind, kind.instance, kind.detail) == expected, name
    # The tables hold no messages; another prefix's topics are not ours.
    for name in (
        topics.routes_topic(P),
        topics.catalogs_topic(P),
        topics.mirrors_topic(P),
        topics.choices_topic("i1", P),
        topics.requests_topic("i1", P),
        topics.outbound_topic("i1", "other"),
        topics.outbound_topic("i1", "demo2"),
    ):
        assert classify_topic(P, name) is None, name
    assert unescape(topics.escape("a.b_c-d ü")) == "a.b_c-d ü"
    cut = topics.escape("x" * 200)
    assert unescape(cut) == cut, "a cut part cannot be read back: it stays as it is"


def test_the_window_starts_a_span_before_now_or_at_an_instant() -> None:
    assert window_start("90s", NOW) == NOW - timedelta(seconds=90)
    assert window_start("30m", NOW) == NOW - timedelta(minutes=30)
    assert window_start("2h", NOW) == NOW - timedelta(hours=2)
    assert window_start("1d", NOW) == NOW - timedelta(days=1)
    assert window_start("2026-11-28T09:00:00Z", NOW) == datetime(2026, 11, 28, 9, tzinfo=UTC)
    assert window_start("2026-11-28T11:00:00+02:00", NOW) == datetime(2026, 11, 28, 9, tzinfo=UTC)
    for bad in ("yesterday", "0h", "-5m", "2026-11-28T11:00:00Z"):
        with pytest.raises(ConfigError, match="--since"):
            window_start(bad, NOW)


# --- the path ------------------------------------------------------------------------------------------


def test_a_forwarded_chain_is_told_hop_by_hop_whatever_order_the_records_come_in() -> None:
    path = path_of(list(reversed(chain())))
    assert [s.record.topic.name for s in path.sent] == ["demo.i1.outbound"]
    assert [(h.instance, h.outcome, h.record.topic.name, h.header("route")) for h in path.hops] == [
        ("i1", "send", "demo.f1.inbound", "OrderPartsRoute"),
        ("f1", "forward", "demo.i2.inbound", "ToOrderParts"),
        ("i2", "deliver", "demo.i2.queue.Parts.OrderParts", "AutoCreatedLocal"),
    ]
    assert (path.state.kind, path.state.text) == (
        "delivered",
        "delivered to Parts/OrderParts on i2 (demo.i2.queue.Parts.OrderParts)",
    )
    shown = render_path(path)
    assert shown.splitlines()[0] == (
        "message m-17 (conversation c-9, OrderParts from InitiatorService in AW), sent 2026-11-28T10:00:00Z "
        "to demo.i1.outbound"
    )
    second = shown.splitlines()[2].split()
    assert second[:8] == ["2", "f1", "10:00:02.000", "forward", "route", "ToOrderParts", "(M2,", "C3)"]
    assert "-> demo.i2.inbound" in shown.splitlines()[2]
    assert (
        shown.splitlines()[-1] == "now: delivered to Parts/OrderParts on i2 (demo.i2.queue.Parts.OrderParts)"
    )


def test_a_message_on_its_way_waits_in_the_next_instances_inbound() -> None:
    path = path_of(chain()[:2])
    assert (path.state.kind, path.state.text) == (
        "waiting",
        "in demo.f1.inbound: send by i1, not routed yet by f1",
    )
    only_sent = path_of(chain()[:1])
    assert only_sent.hops == () and only_sent.state.text.startswith(
        "in demo.i1.outbound, not routed yet by i1"
    )


def delayed(seconds: float, attempt: int, offset: int) -> FoundRecord:
    return found(
        topics.delayed_topic("i1", P),
        offset,
        decided("i1", seconds, "delayed", "AW", match_step="M7", reason="no_route",
                due_at=text(at(seconds + 5)), kept_address="TCP://f1.example:4022",
                kept_route_service="OrderParts"),
        seconds=seconds,
        attempt=attempt,
    )  # fmt: skip


def test_a_delayed_message_shows_each_attempt_and_when_it_was_released() -> None:
    delivered = found(
        topics.queue_topic("i1", "AW", "AuditService", P),
        0,
        decided("i1", 12.0, "deliver", "AW", route="AutoCreatedLocal", match_step="M5", choice_step="C2",
                database="AW"),
        seconds=12.0,
        attempt=2,
    )  # fmt: skip
    records = [chain()[0], delayed(1.0, 1, 0), delayed(6.5, 2, 1), delivered]
    path = path_of(records)
    assert [(h.outcome, h.record.value["attempt"], h.released_at) for h in path.hops] == [
        ("delayed", 1, at(6.5)),
        ("delayed", 2, at(12.0)),
        ("deliver", 2, None),
    ]
    assert path.state.kind == "delivered"
    lines = render_path(path).splitlines()
    assert "attempt 1, due 10:00:06.000  released 10:00:06.500" in lines[1]
    assert "no route (M7)" in lines[1] and "delayed (no_route)" in lines[1]


def test_a_message_still_delayed_says_where_it_waits_and_when_it_is_due() -> None:
    waiting = path_of([chain()[0], delayed(1.0, 1, 0)])
    assert waiting.state.kind == "delayed"
    assert waiting.state.text.startswith("waiting in demo.i1.delayed (no_route), due at 2026-11-28T10:00:06Z")
    assert "past due" in waiting.state.text  # NOW is five minutes later: the next micro-batch takes it
    soon = assemble_path("m-17", [chain()[0], delayed(1.0, 1, 0)], at(3))
    assert soon is not None and "past due" not in soon.state.text


def test_copies_of_one_hop_are_shown_once_with_a_count() -> None:
    first, again = delayed(1.0, 1, 0), delayed(1.0, 1, 7)  # the batch ran again after a crash
    resent = found(topics.outbound_topic("i1", P), 3, seconds=4)
    path = path_of([chain()[0], resent, first, again])
    assert [(h.outcome, h.copies) for h in path.hops] == [("delayed", 2)]
    assert [s.copies for s in path.sent] == [2]
    shown = render_path(path)
    assert "delayed (no_route) x2" in shown
    assert "(2 records of it: its endpoint resends an unacknowledged message with its id, A3)" in shown


def test_dropped_discarded_and_dead_lettered_messages_say_why() -> None:
    dropped = found(
        topics.dropped_topic("f1", P),
        0,
        decided("f1", 2.0, "dropped", "msdb", match_step="M7", reason="no_route"),
    )
    path = path_of([chain()[0], chain()[1], dropped])
    assert path.state.kind == "dropped"
    assert path.state.text == (
        "dropped by f1 (no_route) in demo.f1.dropped; "
        "it came from another instance, whose sender retries (D5)"
    )
    discarded = found(
        topics.dropped_topic("f1", P),
        0,
        decided("f1", 2.0, "discarded", "msdb", route="ToOrderParts", match_step="M2", choice_step="C3",
                reason="hops_exhausted"),
        hops_remaining=0,
    )  # fmt: skip
    assert path_of([discarded]).state.text.startswith("discarded by f1 (hops_exhausted) in demo.f1.dropped")
    dead = found(
        topics.deadletter_topic("i1", P),
        2,
        {
            "error": "origin_database is not a database of this instance: Nope",
            "source_topic": "demo.i1.outbound",
            "source_partition": "0",
            "source_offset": "4",
            "decided_at": text(at(1)),
        },
        origin_database="Nope",
    )
    path = path_of([found(topics.outbound_topic("i1", P), 4, origin_database="Nope"), dead])
    assert [(h.instance, h.outcome) for h in path.hops] == [("i1", "dead-lettered")]
    assert path.state.text == (
        "dead-lettered by i1 in demo.i1.deadletter: origin_database is not a database of this instance: Nope"
    )
    assert (
        "1: error: origin_database is not a database of this instance: Nope (read from demo.i1.outbound[0]@4)"
        in (render_path(path))
    )


def test_a_message_sent_to_an_address_no_instance_answers_leaves_the_known_instances() -> None:
    far = topics.network_topic("tcp://far.example:4022", P)
    sent = found(
        far,
        0,
        decided("i1", 1.0, "send", "AW", route="FarRoute", match_step="M2", choice_step="C3",
                address="TCP://Far.Example:4022/"),
    )  # fmt: skip
    path = path_of([chain()[0], sent])
    assert (path.state.kind, path.state.text) == (
        "sent-out",
        f"sent out of the known instances to TCP://Far.Example:4022/ ({far})",
    )


def test_a_destination_the_broker_refused_is_named() -> None:
    refused = found(
        topics.dropped_topic("i1", P),
        0,
        decided("i1", 1.0, "dropped", "AW", route="Far", match_step="M2", choice_step="C3",
                reason="destination_unavailable", destination="demo.-net.x",
                error="TOPIC_AUTHORIZATION_FAILED"),
    )  # fmt: skip
    path = path_of([chain()[0], refused])
    assert path.state.text.endswith(": could not write to demo.-net.x: TOPIC_AUTHORIZATION_FAILED")
    far = Route("AW", "Far", "TCP://far.example:4022", service="OrderParts")
    replay = replay_latest(path, tables(I1, far), NOW)
    assert isinstance(replay, Replay) and replay.differs == ("outcome", "reason")
    assert (
        "its destination demo.-net.x could not be written (TOPIC_AUTHORIZATION_FAILED)" in replay.comparison
    )


def test_other_messages_are_not_this_one() -> None:
    assert assemble_path("m-17", [], NOW) is None
    assert assemble_path("m-18", chain(), NOW) is None


def test_a_message_not_found_names_the_topics_and_the_window() -> None:
    names = (topics.outbound_topic("i1", P), topics.inbound_topic("f1", P), topics.deadletter_topic("i1", P))
    searched = tuple(t for t in (classify_topic(P, n) for n in names) if t is not None)
    search = Search(P, "m-404", NOW - timedelta(hours=24), NOW, searched, (), 12)
    said = not_found_text(search, "24h")
    assert said.splitlines()[0] == (
        "message m-404 not found in 3 topics under prefix 'demo' (1 outbound, 1 inbound, 1 deadletter), from "
        "2026-11-27T10:05:00Z to 2026-11-28T10:05:00Z (--since 24h): 12 record(s) read"
    )
    assert "cannot be found by its id" in said
    bad = UndecodableDeadLetter("demo.i1.deadletter", 0, 3, "demo.i1.outbound[0]@17")
    said = not_found_text(Search(P, "m-404", NOW - timedelta(hours=1), NOW, searched, (), 12, (bad,)), "1h")
    assert "1 dead letter(s) in the window do not decode at all" in said
    assert "demo.i1.deadletter[0]@3 from demo.i1.outbound[0]@17" in said
    assert "router tail demo.i1.deadletter --from-beginning" in said
    as_json = json.loads(json.dumps(not_found_json(search, "24h")))
    assert as_json["found"] is False and [t["kind"] for t in as_json["topics"]] == [
        "outbound",
        "inbound",
        "deadletter",
    ]
    nothing = not_found_text(Search(P, "m-404", NOW, NOW, (), (), 0), "24h")
    assert "no message topics under prefix 'demo'" in nothing


# --- the replay ------------------------------------------------------------------------------------------


def tables(instance: Instance, *routes: Route, version: str = "routes@p0:6 mirrors@none") -> Tables:
    return Tables(instance, routes, {}, version)


def test_the_last_decision_replayed_with_the_same_tables_decides_the_same() -> None:
    replay = replay_latest(path_of(chain()), tables(I2, Route("msdb", "AutoCreatedLocal", "LOCAL")), NOW)
    assert isinstance(replay, Replay) and replay.instance == "i2" and replay.differs == ()
    assert replay.comparison == (
        "today's tables decide the same: deliver into Parts by route AutoCreatedLocal (M5, C2)"
    )
    # The decision read i2's inbound record: a message from outside, with the hops f1 left it.
    assert replay.account.message.is_remote and replay.account.message.hops_remaining == 15
    assert [s.rule for s in replay.account.steps if s.ended] == ["M5", "C2", "L1"]
    shown = render_replay(replay)
    assert shown.splitlines()[0].startswith("steps: i2's decision of 2026-11-28T10:00:03.100Z, taken again")
    assert "  M5     * matched 1 route(s) with no service and no broker instance (wildcards)" in shown
    assert "+ AutoCreatedLocal (*, *, LOCAL): names neither service nor broker instance" in shown


def test_a_dropped_route_makes_todays_tables_decide_otherwise() -> None:
    replay = replay_latest(path_of(chain()), tables(I2, version="routes@p0:7 mirrors@none"), NOW)
    assert isinstance(replay, Replay)
    assert replay.differs == ("outcome", "route", "match_step", "choice_step", "reason")
    assert replay.comparison == (
        "today: dropped (M7): no_route; the headers record deliver into Parts by route AutoCreatedLocal "
        "(M5, C2): route AutoCreatedLocal is no longer in i2's msdb table (dropped since); the tables "
        "changed since: the decision used routes@p0:6 mirrors@none, today's are routes@p0:7 mirrors@none"
    )


def test_a_delayed_message_is_replayed_with_its_kept_choice_and_the_assumptions_named() -> None:
    path = path_of([chain()[0], delayed(1.0, 1, 0)])
    route = Route("AW", "OrderPartsRoute", "TCP://f1.example:4022", service="OrderParts")
    replay = replay_latest(path, tables(I1, route), NOW)
    assert isinstance(replay, Replay) and replay.instance == "i1"
    assert replay.account.message.origin == "AW" and not replay.account.message.is_remote
    assert "K2: the conversation's kept choice is read from the kept_* headers: " in replay.assumptions[0]
    assert replay.comparison.startswith(
        "today: send to TCP://f1.example:4022 by route OrderPartsRoute (M2, C3); "
        "the headers record delayed (M7): no_route: route OrderPartsRoute decides now"
    )
    assert any(note.startswith("D1: no earlier message") for note in replay.assumptions)


def test_a_message_not_decided_yet_is_decided_as_its_instance_would_now() -> None:
    replay = replay_latest(path_of(chain()[:1]), tables(I1, Route("AW", "AutoCreatedLocal", "LOCAL")), NOW)
    assert isinstance(replay, Replay) and replay.hop is None
    assert replay.comparison == "not decided yet: today i1 would delayed (M5): service_not_found"
    assert any(note.startswith("K2: no kept choice") for note in replay.assumptions)


def test_nothing_is_replayed_for_a_dead_letter_or_an_instance_without_a_catalog() -> None:
    dead = found(topics.deadletter_topic("i1", P), 0, {"error": "boom", "decided_at": text(at(1))})
    gone = replay_latest(path_of([dead]), None, NOW)
    assert isinstance(gone, NoReplay) and "dead-lettered by i1 before any rule ran (boom)" in gone.why
    assert render_replay(gone).startswith("steps: the record was dead-lettered")
    uncatalogued = replay_latest(path_of(chain()), Tables(None, (), {}, "routes@none mirrors@none"), NOW)
    assert isinstance(uncatalogued, NoReplay) and "instance i2 has no catalog" in uncatalogued.why


def test_the_json_output_parses_and_holds_every_hop_and_step() -> None:
    path = path_of(chain())
    replay = replay_latest(path, tables(I2, Route("msdb", "AutoCreatedLocal", "LOCAL")), NOW)
    out = json.loads(json.dumps({**path_json(path), "steps": replay_json(replay)}))
    assert [h["outcome"] for h in out["hops"]] == ["send", "forward", "deliver"]
    assert out["message"]["enqueued_at"] == "2026-11-28T10:00:00Z" and "body" not in out["message"]
    assert out["now"]["state"] == "delivered"
    assert out["steps"]["today"]["outcome"] == "deliver" and out["steps"]["differs"] == []
    assert {s["rule"] for s in out["steps"]["steps"]} >= {"S3", "M1", "M5", "C2"}
