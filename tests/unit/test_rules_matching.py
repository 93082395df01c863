"""R2, R3, R6 and the seven matching steps M1-M7."""

from __future__ import annotations

from datetime import timedelta

from rules_factories import AW, DB2, ELSEWHERE, FAR1, FAR2, NOW, acl, batch, decide_one, message, route

from streaming.rules.choice import Rotation
from streaming.rules.matching import (
    VIRTUAL_LOCAL_ROUTE_NAME,
    Match,
    m1_service_and_broker,
    m2_service_any_broker,
    m3_service_one_broker,
    m4_asks_for_route,
    m5_wildcard_routes,
    match_routes,
    same_broker,
    same_service,
)
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, Route
from streaming.rules.snapshot import RouteSnapshot, active_routes

BCN_ROUTE = route("AW", "Bcn", "LOCAL", BROKER_CONFIGURATION_SERVICE)


def names(routes: tuple[Route, ...]) -> list[str]:
    return [r.name for r in routes]


def match(
    routes: list[Route],
    service: str = "S",
    broker: str | None = None,
    *,
    request_pending: bool = False,
    service_hosted: bool = False,
) -> Match:
    return match_routes(
        tuple(routes),
        scope="AW",
        service=service,
        broker_instance=broker,
        rotation=Rotation(),
        request_pending=request_pending,
        service_hosted=service_hosted,
    )


def test_r2_service_names_are_byte_exact() -> None:
    r = route("AW", "R", "tcp://a:4022", "OrderParts")
    assert same_service(r, "OrderParts")
    assert not same_service(r, "orderparts")
    assert not same_service(r, "OrderParts ")
    assert not same_service(route("AW", "W", "LOCAL"), "OrderParts")


def test_r3_broker_instances_compare_as_guids() -> None:
    r = route("AW", "R", "tcp://a:4022", "S", FAR1.upper())
    assert same_broker(r, FAR1)
    assert same_broker(r, "{" + FAR1 + "}")
    assert not same_broker(r, FAR2)
    assert not same_broker(route("AW", "W", "tcp://a:4022", "S"), FAR1)


def test_r6_expired_routes_are_left_out_but_not_deleted() -> None:
    live = route("AW", "Live", "LOCAL", expires_at=NOW + timedelta(seconds=1))
    dead = route("AW", "Dead", "LOCAL", expires_at=NOW)
    forever = route("AW", "Forever", "LOCAL")
    assert names(active_routes((live, dead, forever), NOW)) == ["Live", "Forever"]
    snapshot = RouteSnapshot.of(batch([live, dead, forever], []))
    assert names(snapshot.table("AW")) == ["Live", "Forever"]
    assert snapshot.table("DB2") == ()


def test_m1_needs_service_and_broker() -> None:
    routes = [route("AW", "A", "tcp://a:4022", "S", FAR1), route("AW", "B", "tcp://b:4022", "S", FAR2)]
    assert names(m1_service_and_broker(routes, "S", FAR1)) == ["A"]
    assert m1_service_and_broker(routes, "T", FAR1) == ()


def test_m1_before_m2() -> None:
    routes = [route("AW", "Named", "tcp://a:4022", "S", FAR1), route("AW", "Any", "tcp://b:4022", "S")]
    found = match(routes, broker=FAR1)
    assert (found.step, names(found.candidates)) == ("M1", ["Named"])


def test_m2_matches_whether_or_not_a_broker_is_given() -> None:
    routes = [route("AW", "Any", "tcp://b:4022", "S"), route("AW", "Other", "tcp://c:4022", "S", FAR2)]
    assert names(m2_service_any_broker(routes, "S")) == ["Any"]
    assert match(routes, broker=FAR1).step == "M2"
    assert match(routes).step == "M2"


def test_m3_only_without_broker_instance() -> None:
    routes = [route("AW", "Named", "tcp://a:4022", "S", FAR1), acl("AW")]
    assert match(routes).step == "M3"
    assert match(routes, broker=FAR2).step == "M5"


def test_m3_keeps_the_routes_of_one_broker_taken_in_turn() -> None:
    routes = [
        route("AW", "Far2", "tcp://c:4022", "S", FAR2),
        route("AW", "Far1a", "tcp://a:4022", "S", FAR1),
        route("AW", "Far1b", "tcp://b:4022", "S", FAR1.upper()),
    ]
    rotation = Rotation()
    by_broker = {FAR1: ["Far1a", "Far1b"], FAR2: ["Far2"]}
    brokers = sorted([FAR1, FAR2])
    for turn in range(6):
        picked = m3_service_one_broker(routes, "S", rotation)
        # The distinct broker instances count once each, whatever routes name them.
        assert names(picked) == by_broker[brokers[turn % 2]]


def test_k2_m3_keeps_the_remembered_broker_instance() -> None:
    routes = [route("AW", "One", "tcp://a:4022", "S", FAR1), route("AW", "Two", "tcp://b:4022", "S", FAR2)]
    rotation = Rotation()
    for kept in routes:
        picked = m3_service_one_broker(routes, "S", rotation, remembered=kept.identity)
        assert names(picked) == [kept.name]
    assert rotation.advanced == {}
    gone = (ELSEWHERE, "S", "tcp://z:4022")
    assert names(m3_service_one_broker(routes, "S", rotation, remembered=gone)) == ["One"]
    assert names(m3_service_one_broker(routes, "S", rotation)) == ["Two"]


def test_m3_k_times_n_new_conversations_use_each_broker_k_times() -> None:
    routes = [route("AW", "One", "tcp://a:4022", "S", FAR1), route("AW", "Two", "tcp://b:4022", "S", FAR2)]
    rotation = Rotation()
    chosen = [names(m3_service_one_broker(routes, "S", rotation))[0] for _ in range(20)]
    assert chosen.count("One") == chosen.count("Two") == 10


def test_m4_needs_an_active_bcn_route_and_no_pending_request() -> None:
    assert m4_asks_for_route([BCN_ROUTE], request_pending=False)
    assert not m4_asks_for_route([BCN_ROUTE], request_pending=True)
    assert not m4_asks_for_route([acl("AW")], request_pending=False)


def test_m4_precedes_m5_and_ends_matching_without_candidates() -> None:
    found = match([BCN_ROUTE, acl("AW")], service_hosted=True)
    assert (found.step, found.candidates) == ("M4", ())


def test_m4_pending_continues_at_m5_literal_reading() -> None:
    found = match([BCN_ROUTE, acl("AW")], request_pending=True)
    assert (found.step, names(found.candidates)) == ("M5", ["AutoCreatedLocal"])


def test_m4_not_reached_when_a_route_names_the_service() -> None:
    assert match([BCN_ROUTE, route("AW", "Named", "tcp://a:4022", "S")]).step == "M2"


def test_m5_needs_both_service_and_broker_null() -> None:
    broker_only = route("AW", "BrokerOnly", "tcp://a:4022", None, FAR1)
    everything = route("AW", "Everything", "tcp://b:4022")
    assert names(m5_wildcard_routes([broker_only, everything, acl("AW")])) == [
        "Everything",
        "AutoCreatedLocal",
    ]
    assert match([broker_only], broker=FAR1).step == "M7"


def test_m6_virtual_local_route_with_broker_and_hosted_service() -> None:
    found = match([], service="TargetService", broker=DB2, service_hosted=True)
    assert found.step == "M6"
    (virtual,) = found.candidates
    assert (virtual.name, virtual.address, virtual.service, virtual.broker_instance) == (
        VIRTUAL_LOCAL_ROUTE_NAME,
        "LOCAL",
        "TargetService",
        None,
    )


def test_m6_not_without_broker_or_hosted_service() -> None:
    assert match([], broker=None, service_hosted=True).step == "M7"
    assert match([], broker=AW, service_hosted=False).step == "M7"


def test_m6_only_when_m5_found_nothing() -> None:
    assert match([acl("AW")], broker=DB2, service_hosted=True).step == "M5"


def test_m7_nothing_matched() -> None:
    found = match([route("AW", "Other", "tcp://a:4022", "T")])
    assert (found.step, found.candidates) == ("M7", ())


def test_any_route_naming_the_service_hides_the_wildcards() -> None:
    routes = [
        acl("AW"),
        route("AW", "Everything", "tcp://b:4022"),
        route("AW", "Named", "tcp://a:4022", "S", FAR1),
    ]
    found = match(routes, service_hosted=True)
    assert (found.step, names(found.candidates)) == ("M3", ["Named"])


def test_decision_reports_the_match_step() -> None:
    assert decide_one([acl("AW")], message()).match_step == "M5"
