"""Properties every reference-engine decision has, over generated tables and messages (docs/rules.md §1.7)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rules_factories import AW, DB2, DB3, FAR1, NOW, batch, database, instance

from streaming.rules.engine import ReferenceEngine
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, REMOTE, Message, MirrorRole, Outcome, Route

SERVICES = ["S", "T", "tcp://h:4022/S", BROKER_CONFIGURATION_SERVICE]
BROKERS = [None, AW, DB2, DB3, FAR1]
ADDRESSES = ["LOCAL", "TRANSPORT", "tcp://a:4022", "tcp://b:4022/", "TCP://i1:4022"]
INSTANCES = [
    instance(
        database("AW", AW, "S"),
        database("msdb", "0d0d0d0d-0000-0000-0000-000000000001"),
        database("DB2", DB2, "T", BROKER_CONFIGURATION_SERVICE),
        database("DB3", DB3, "S", "T", enabled=False),
        forwarding=forwarding,
    )
    for forwarding in (False, True)
]


@st.composite
def routes(draw: st.DrawFn) -> Route:
    address = draw(st.sampled_from(ADDRESSES))
    mirror = draw(st.sampled_from([None, "tcp://m:4022"])) if address.startswith(("tcp", "TCP")) else None
    service = draw(st.sampled_from([None, *SERVICES]))
    broker = None if service == BROKER_CONFIGURATION_SERVICE else draw(st.sampled_from(BROKERS))
    return Route(
        scope=draw(st.sampled_from(["AW", "msdb", "DB2"])),
        name=draw(st.sampled_from(["R1", "R2", "R3", "AutoCreatedLocal"])),
        address=address,
        service=service,
        broker_instance=broker,
        mirror_address=mirror,
    )


@st.composite
def messages(draw: st.DrawFn) -> Message:
    return Message(
        id="m",
        conversation_id=draw(st.sampled_from(["c1", "c2", "c3"])),
        service=draw(st.sampled_from(SERVICES)),
        origin=draw(st.sampled_from(["AW", "DB2", REMOTE])),
        broker_instance=draw(st.sampled_from(BROKERS)),
        from_target=draw(st.booleans()),
        hops_remaining=draw(st.integers(0, 3)),
    )


@settings(max_examples=400, deadline=None)
@given(
    # R1: a route's name is unique in its database, as the loaders enforce.
    table=st.lists(routes(), max_size=6, unique_by=lambda r: (r.scope, r.name)),
    message=messages(),
    forwarding=st.booleans(),
    principal=st.sampled_from([None, "tcp://a:4022", "tcp://m:4022"]),
)
def test_decisions_are_consistent(
    table: list[Route], message: Message, forwarding: bool, principal: str | None
) -> None:
    inst = INSTANCES[forwarding]
    mirrors = {principal: MirrorRole.PRINCIPAL} if principal else {}
    decide = ReferenceEngine().decide
    decision = decide(batch(table, [message], inst=inst, mirrors=mirrors)).decisions[0]
    again = decide(batch(list(reversed(table)), [message], inst=inst, mirrors=mirrors)).decisions[0]
    assert decision == again, "the decision does not depend on the order of the routing table"
    assert decision.at == NOW and decision.id == "m"
    assert decision.match_step in {"S4", "M1", "M2", "M3", "M4", "M5", "M6", "M7"}
    if decision.outcome is Outcome.DELIVER:
        delivered = inst.database(decision.database or "")
        assert delivered is not None and delivered.broker_enabled
        assert decision.match_step == "S4" or message.service in delivered.services
    if decision.outcome in (Outcome.SEND, Outcome.FORWARD):
        assert decision.address is not None and decision.choice_step in {"C1", "C3", "C4"}
    if decision.outcome is Outcome.FORWARD:
        assert inst.forwarding and decision.hops_remaining == message.hops_remaining - 1
    if decision.outcome in (Outcome.SEND, Outcome.DELAYED):
        assert not message.is_remote and decision.extra.get("loop_back") is None
    if decision.outcome in (Outcome.DROPPED, Outcome.DISCARDED, Outcome.FORWARD):
        assert message.is_remote or "loop_back" in decision.extra
    if decision.outcome in (Outcome.DELAYED, Outcome.DROPPED, Outcome.DISCARDED):
        assert decision.reason is not None
    else:
        assert decision.reason is None
    assert (decision.requests is not None) == (decision.match_step == "M4")
