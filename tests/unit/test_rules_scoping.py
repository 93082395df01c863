"""S1-S5: which routing table is searched, the reply shortcut and the loop-back."""

from __future__ import annotations

from rules_factories import AW, DB2, ELSEWHERE, acl, database, decide_one, instance, message, route

from streaming.rules.model import REMOTE, Outcome
from streaming.rules.scoping import MSDB, as_incoming, loops_back, reply_shortcut_database, routing_scope


def test_s1_s2_local_messages_use_their_origin_database_table() -> None:
    assert routing_scope(message(origin="AW")) == "AW"
    assert routing_scope(message(origin="DB2", from_target=True)) == "DB2"


def test_s3_incoming_messages_use_msdb() -> None:
    assert routing_scope(message(origin=REMOTE)) == MSDB


def test_s1_decision_reports_the_table_searched() -> None:
    routes = [route("AW", "AwRoute", "tcp://a:4022", "X"), route("DB2", "Db2Route", "tcp://b:4022", "X")]
    from_aw = decide_one(routes, message(service="X", origin="AW"))
    from_db2 = decide_one(routes, message(service="X", origin="DB2"))
    assert (from_aw.scope, from_aw.address) == ("AW", "tcp://a:4022")
    assert (from_db2.scope, from_db2.address) == ("DB2", "tcp://b:4022")


def test_s4_reply_to_an_enabled_database_of_this_instance() -> None:
    reply = message(origin=REMOTE, from_target=True, broker_instance=AW.upper())
    found = reply_shortcut_database(reply, instance())
    assert found is not None and found.name == "AW"


def test_s4_needs_a_reply_from_outside_with_a_known_broker_instance() -> None:
    inst = instance()
    assert reply_shortcut_database(message(origin=REMOTE, broker_instance=AW), inst) is None
    assert reply_shortcut_database(message(origin="DB2", from_target=True, broker_instance=AW), inst) is None
    assert reply_shortcut_database(message(origin=REMOTE, from_target=True), inst) is None
    far = message(origin=REMOTE, from_target=True, broker_instance=ELSEWHERE)
    assert reply_shortcut_database(far, inst) is None


def test_s4_broker_disabled_database_does_not_count() -> None:
    inst = instance(database("AW", AW, "InitiatorService", enabled=False), database("DB2", DB2))
    reply = message(origin=REMOTE, from_target=True, broker_instance=AW)
    assert reply_shortcut_database(reply, inst) is None


def test_s4_decision_delivers_without_matching() -> None:
    decision = decide_one([], message(origin=REMOTE, from_target=True, broker_instance=AW))
    assert decision.outcome is Outcome.DELIVER
    assert (decision.database, decision.match_step, decision.route, decision.scope) == (
        "AW",
        "S4",
        None,
        None,
    )
    assert "route" not in decision.to_json_dict()


def test_s5_loops_back_compares_normalized_addresses() -> None:
    inst = instance()
    assert loops_back("tcp://I1:4022/", inst)
    assert loops_back("TCP://i1:4022", inst)
    assert not loops_back("tcp://i1:4023", inst)
    assert not loops_back("tcp://i2:4022", inst)


def test_s5_as_incoming_keeps_the_message_but_its_origin() -> None:
    original = message(broker_instance=DB2, hops_remaining=3)
    incoming = as_incoming(original)
    assert incoming.is_remote
    assert (incoming.id, incoming.broker_instance, incoming.hops_remaining) == ("m1", DB2, 3)


def test_s5_loop_back_is_rerouted_with_msdb_and_says_so() -> None:
    routes = [route("AW", "Loop", "tcp://i1:4022/", "TargetService"), acl("msdb")]
    decision = decide_one(routes, message(service="TargetService"))
    assert decision.outcome is Outcome.DELIVER
    assert (decision.database, decision.scope, decision.route) == ("DB2", "msdb", "AutoCreatedLocal")
    assert decision.extra["loop_back"] == "tcp://i1:4022/"


def test_s5_loop_back_without_usable_msdb_route_is_dropped_as_incoming() -> None:
    routes = [route("AW", "Loop", "TCP://i1:4022", "FarService")]
    decision = decide_one(routes, message(service="FarService"))
    assert (decision.outcome, decision.match_step, decision.scope) == (Outcome.DROPPED, "M7", "msdb")
