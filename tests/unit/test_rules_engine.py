"""The reference engine end to end on one message, and the batch semantics of `RoutingBatch`."""

from __future__ import annotations

from dataclasses import replace

from rules_factories import AW, DB2, FAR1, acl, batch, decide_one, instance, message, route

from streaming.rules.batch import Decider
from streaming.rules.choice import tier_key
from streaming.rules.engine import ReferenceEngine, decide_message
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, REMOTE, Outcome, Reason, Route
from streaming.rules.snapshot import RouteSnapshot

BCN_ROUTE = route("AW", "Bcn", "LOCAL", BROKER_CONFIGURATION_SERVICE)


def test_reference_engine_is_a_decider() -> None:
    engine: Decider = ReferenceEngine()
    assert engine.decide(batch([], [])).decisions == ()


def test_every_decision_is_taken_at_the_batch_clock_with_its_table() -> None:
    result = ReferenceEngine().decide(batch([acl("AW")], [message("m1"), message("m2", "c2", "Nowhere")]))
    assert [(d.id, d.outcome, d.scope) for d in result.decisions] == [
        ("m1", Outcome.DELIVER, "AW"),
        ("m2", Outcome.DELAYED, "AW"),
    ]
    assert {d.at for d in result.decisions} == {batch([], []).now}


def test_m6_virtual_route_is_reported_as_null_route() -> None:
    decision = decide_one([], message(origin=REMOTE, broker_instance=DB2))
    assert (decision.outcome, decision.database, decision.match_step, decision.choice_step) == (
        Outcome.DELIVER,
        "DB2",
        "M6",
        "C2",
    )
    printed = decision.to_json_dict()
    assert "route" in printed and printed["route"] is None


def test_d5_no_route_delays_local_and_drops_incoming() -> None:
    local = decide_one([], message(service="Nowhere"))
    incoming = decide_one([], message(service="Nowhere", origin=REMOTE))
    assert (local.outcome, local.reason, local.match_step) == (Outcome.DELAYED, Reason.NO_ROUTE, "M7")
    assert (incoming.outcome, incoming.reason, incoming.match_step) == (
        Outcome.DROPPED,
        Reason.NO_ROUTE,
        "M7",
    )


def test_local_route_that_cannot_locate_reports_service_not_found() -> None:
    decision = decide_one([acl("AW")], message(service="Nowhere"))
    assert (decision.outcome, decision.reason, decision.match_step) == (
        Outcome.DELAYED,
        Reason.SERVICE_NOT_FOUND,
        "M5",
    )


def test_l2_conversation_broker_beats_origin_database() -> None:
    inst = instance(*[d for d in instance().databases])
    decision = decide_one([acl("AW")], message(service="TargetService", broker_instance=DB2), inst=inst)
    assert decision.database == "DB2"
    assert (
        decide_one([acl("AW")], message(service="TargetService", broker_instance=AW)).outcome
        is Outcome.DELAYED
    )


def test_m4_decision_carries_the_request_and_its_table() -> None:
    decision = decide_one([BCN_ROUTE, acl("AW")], message(service="NewService"))
    assert (decision.outcome, decision.reason, decision.requests, decision.scope, decision.match_step) == (
        Outcome.DELAYED,
        Reason.ROUTE_REQUESTED,
        "NewService",
        "AW",
        "M4",
    )


def test_m4_incoming_is_dropped_but_still_requests() -> None:
    msdb_bcn = route("msdb", "Bcn", "LOCAL", BROKER_CONFIGURATION_SERVICE)
    decision = decide_one([msdb_bcn], message(service="NewService", origin=REMOTE))
    assert (decision.outcome, decision.requests, decision.scope) == (Outcome.DROPPED, "NewService", "msdb")


def test_b4_first_m4_in_a_batch_creates_the_request_later_ones_see_it_pending() -> None:
    messages = [message("m1", "c1", "New"), message("m2", "c2", "New"), message("m3", "c3", "Other")]
    result = ReferenceEngine().decide(batch([BCN_ROUTE, acl("AW")], messages))
    assert [d.match_step for d in result.decisions] == ["M4", "M5", "M4"]
    assert result.requests == (("AW", "New"), ("AW", "Other"))


def test_b4_request_pending_from_an_earlier_batch() -> None:
    result = ReferenceEngine().decide(
        batch([BCN_ROUTE, acl("AW")], [message(service="New")], pending={("AW", "New")})
    )
    assert result.decisions[0].match_step == "M5"
    assert result.requests == ()


def test_b4_pending_is_per_table() -> None:
    result = ReferenceEngine().decide(batch([BCN_ROUTE], [message(service="New")], pending={("DB2", "New")}))
    assert result.requests == (("AW", "New"),)


def test_d1_message_of_a_waiting_conversation_is_delayed_behind_it() -> None:
    decision = ReferenceEngine().decide(batch([acl("AW")], [message()], waiting={("c1", False)})).decisions[0]
    assert (decision.outcome, decision.match_step, decision.reason) == (
        Outcome.DELAYED,
        None,
        Reason.NO_ROUTE,
    )
    assert decision.extra == {"waiting_behind": "c1"}


def test_d1_a_conversation_delayed_in_the_batch_holds_its_later_messages() -> None:
    routes = [acl("AW")]
    messages = [message("m1", "c1", "Nowhere"), message("m2", "c1", "TargetService"), message("m3", "c2")]
    decisions = ReferenceEngine().decide(batch(routes, messages)).decisions
    assert [(d.id, d.outcome, d.match_step) for d in decisions] == [
        ("m1", Outcome.DELAYED, "M5"),
        ("m2", Outcome.DELAYED, None),
        ("m3", Outcome.DELIVER, "M5"),
    ]


def test_d1_each_side_of_a_conversation_keeps_its_own_order() -> None:
    """Both ends in one instance: the target's reply does not wait behind the initiator's delay."""
    routes = [acl("AW")]
    messages = [
        message("m1", "c1", "Nowhere"),  # the initiator's message: no database hosts Nowhere, delayed
        replace(message("m2", "c1", "TargetService"), from_target=True),  # the target's reply
        message("m3", "c1", "TargetService"),  # the initiator's next message waits behind m1
    ]
    decisions = ReferenceEngine().decide(batch(routes, messages)).decisions
    assert [(d.id, d.outcome, d.match_step) for d in decisions] == [
        ("m1", Outcome.DELAYED, "M5"),
        ("m2", Outcome.DELIVER, "M5"),
        ("m3", Outcome.DELAYED, None),
    ]
    target_waits = batch(routes, [replace(message("m4", "c1"), from_target=True)], waiting={("c1", True)})
    initiator_waits = batch(routes, [replace(message("m4", "c1"), from_target=True)], waiting={("c1", False)})
    assert ReferenceEngine().decide(target_waits).decisions[0].outcome is Outcome.DELAYED
    assert ReferenceEngine().decide(initiator_waits).decisions[0].outcome is Outcome.DELIVER


def test_d5_incoming_messages_never_wait_behind_a_conversation() -> None:
    decision = (
        ReferenceEngine()
        .decide(batch([acl("msdb")], [message(origin=REMOTE)], waiting={("c1", False)}))
        .decisions[0]
    )
    assert (decision.outcome, decision.database) == (Outcome.DELIVER, "DB2")


def test_decide_message_ignores_the_batch_state() -> None:
    snapshot = RouteSnapshot.of(batch([acl("AW")], []))
    assert decide_message(message(), snapshot).outcome is Outcome.DELIVER


def two_routes_and_a_conversation_that_picks_the_second() -> tuple[list[Route], str]:
    """Two equal routes, and a new conversation whose turn it is to take the second (`TURN`)."""
    routes = [route("AW", "A", "tcp://a:4022", "S"), route("AW", "B", "tcp://b:4022", "S")]
    return routes, "c7"


TURN = {tier_key([route("AW", "A", "tcp://a:4022", "S"), route("AW", "B", "tcp://b:4022", "S")]): 1}
"""C5: the rotation of the two routes above, at its second."""


def test_k2_an_unpinned_conversation_keeps_its_remembered_route() -> None:
    routes, conversation = two_routes_and_a_conversation_that_picks_the_second()
    remembered = {(conversation, "AW", "S"): routes[0].identity}
    result = ReferenceEngine().decide(
        batch(routes, [message(conversation=conversation, service="S")], choices=remembered, rotation=TURN)
    )
    assert result.decisions[0].route == "A"
    assert result.choices == {(conversation, "AW", "S"): routes[0].identity}


def test_k2_the_first_choice_is_returned_for_the_next_batch() -> None:
    routes, conversation = two_routes_and_a_conversation_that_picks_the_second()
    messages = [message("m1", conversation, "S"), message("m2", conversation, "S")]
    result = ReferenceEngine().decide(batch(routes, messages, rotation=TURN))
    assert [d.route for d in result.decisions] == ["B", "B"]
    assert result.choices == {(conversation, "AW", "S"): routes[1].identity}


def test_k2_pinned_replies_and_incoming_messages_keep_nothing() -> None:
    routes, conversation = two_routes_and_a_conversation_that_picks_the_second()
    incoming = [route("msdb", "A", "tcp://a:4022", "S"), route("msdb", "B", "tcp://b:4022", "S")]
    turn = {**TURN, tier_key(incoming): 1}
    remembered = {(conversation, origin, "S"): routes[0].identity for origin in ("AW", REMOTE)}
    messages = [
        message("pinned", conversation, "S", broker_instance=FAR1),
        message("reply", conversation, "S", from_target=True),
        message("incoming", conversation, "S", origin=REMOTE),
    ]
    for m in messages:
        # Each takes its turn (the second route), not the route remembered for the conversation.
        result = ReferenceEngine().decide(batch(routes + incoming, [m], choices=remembered, rotation=turn))
        assert [d.route for d in result.decisions] == ["B"]
        assert result.choices == {}


def test_k2_a_remembered_route_that_is_gone_is_chosen_again() -> None:
    routes, conversation = two_routes_and_a_conversation_that_picks_the_second()
    gone = ("", "S", "tcp://gone:4022")
    result = ReferenceEngine().decide(
        batch(
            routes,
            [message(conversation=conversation, service="S")],
            choices={(conversation, "AW", "S"): gone},
            rotation=TURN,
        )
    )
    assert result.decisions[0].route == "B"
    assert result.choices == {(conversation, "AW", "S"): routes[1].identity}
