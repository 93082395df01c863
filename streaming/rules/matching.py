"""Finding the matching routes: the seven matching steps M1-M7 (docs/rules.md §1.4), with R2 and R3.

Input: the active routes of one routing table (R6 is applied by `RouteSnapshot`), the target
service name and the optional target broker instance (K1). Steps are tried in order and the
first step that yields a route ends matching; its routes alone form the candidate set.
Mirror addresses (MI1), route names (R1) and the message type play no part: a BCN notice such as
MissingRemoteServiceBinding (B9) is matched like any message to its service.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streaming.rules.choice import Rotation, brokers_key
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, LOCAL, Route, RouteIdentity, canonical_guid

M1 = "M1"
M2 = "M2"
M3 = "M3"
M4 = "M4"
M5 = "M5"
M6 = "M6"
M7 = "M7"

VIRTUAL_LOCAL_ROUTE_NAME = "(virtual LOCAL route of M6)"
"""The name the M6 route carries inside the engine; decisions report it as `route: null`."""


@dataclass(frozen=True)
class Match:
    """The step that ended matching and the candidate set it selected (empty for M4 and M7)."""

    step: str
    candidates: tuple[Route, ...] = ()


def same_service(route: Route, service: str) -> bool:
    """R2: a route naming a service matches only that exact name (byte by byte, case-sensitive)."""
    return route.service is not None and route.service == service


def same_broker(route: Route, broker_instance: str) -> bool:
    """R3: a route naming a broker instance matches it as a GUID value (case-insensitive hex)."""
    return route.broker_instance is not None and canonical_guid(route.broker_instance) == canonical_guid(
        broker_instance
    )


def m1_service_and_broker(routes: Iterable[Route], service: str, broker_instance: str) -> tuple[Route, ...]:
    """M1: routes naming the service and the conversation's broker instance (only if it has one)."""
    return tuple(r for r in routes if same_service(r, service) and same_broker(r, broker_instance))


def m2_service_any_broker(routes: Iterable[Route], service: str) -> tuple[Route, ...]:
    """M2: routes naming the service with no broker instance, whether or not the message has one."""
    return tuple(r for r in routes if same_service(r, service) and r.broker_instance is None)


def m3_service_one_broker(
    routes: Iterable[Route], service: str, rotation: Rotation, remembered: RouteIdentity | None = None
) -> tuple[Route, ...]:
    """M3: routes naming the service and some broker instance, narrowed to one broker instance.

    Only reached when the message has no broker instance. When the routes carry several different
    broker instances, one is picked "arbitrarily": the broker instance of the conversation's
    `remembered` choice while it is among them (K2), else the distinct canonical broker instances
    are sorted ascending and the service's `rotation` picks the next (C5); only the
    routes with that broker instance are kept.
    """
    named = [r for r in routes if same_service(r, service) and r.broker_instance is not None]
    if not named:
        return ()
    brokers = sorted({canonical_guid(r.broker_instance) for r in named if r.broker_instance})
    if remembered is not None and remembered[0] and canonical_guid(remembered[0]) in brokers:
        chosen = canonical_guid(remembered[0])
    else:
        chosen = brokers[rotation.take(brokers_key(named[0].scope, service, brokers), len(brokers))]
    return tuple(r for r in named if r.broker_instance and canonical_guid(r.broker_instance) == chosen)


def m4_asks_for_route(routes: Iterable[Route], request_pending: bool) -> bool:
    """M4, B2: a route to the dynamic routing service exists and no request for the service is pending.

    When it holds, the message is delayed and a MissingRoute request is made (B3). When a request
    is already pending (B4), M4 does not apply and matching goes on at M5: the documentation's
    literal 7-step order ([AMB] faithful reading).
    """
    return not request_pending and any(r.service == BROKER_CONFIGURATION_SERVICE for r in routes)


def m5_wildcard_routes(routes: Iterable[Route]) -> tuple[Route, ...]:
    """M5: routes with neither service nor broker instance (AutoCreatedLocal, catch-alls).

    R8: AutoCreatedLocal is such a route, so any route naming the service (M1-M3) outranks it.
    A route with no service but a broker instance is selected by no step ([AMB] faithful reading).
    """
    return tuple(r for r in routes if r.service is None and r.broker_instance is None)


def m6_virtual_local_route(scope: str, service: str) -> Route:
    """M6: the route `(service, *, LOCAL)` the table behaves as if it held."""
    return Route(scope=scope, name=VIRTUAL_LOCAL_ROUTE_NAME, address=LOCAL, service=service)


def match_routes(
    routes: tuple[Route, ...],
    *,
    scope: str,
    service: str,
    broker_instance: str | None,
    rotation: Rotation,
    request_pending: bool,
    service_hosted: bool,
    remembered: RouteIdentity | None = None,
) -> Match:
    """Run the matching steps M1-M7 over one table's active routes and return the first hit.

    `request_pending`: a MissingRoute request for (scope, service) is outstanding (B4).
    `service_hosted`: a broker-enabled database of the instance hosts the service (M6, L4).
    `remembered`: the route identity the conversation chose before (K2), which M3 keeps.
    `rotation`: whose turn it is among M3's broker instances when none is kept (C5).
    M6 applies only with a broker instance and a hosted service; M7 is "nothing matched".
    """
    if broker_instance is not None:
        found = m1_service_and_broker(routes, service, broker_instance)
        if found:
            return Match(M1, found)
    found = m2_service_any_broker(routes, service)
    if found:
        return Match(M2, found)
    if broker_instance is None:
        found = m3_service_one_broker(routes, service, rotation, remembered)
        if found:
            return Match(M3, found)
    if m4_asks_for_route(routes, request_pending):
        return Match(M4)
    found = m5_wildcard_routes(routes)
    if found:
        return Match(M5, found)
    if broker_instance is not None and service_hosted:
        return Match(M6, (m6_virtual_local_route(scope, service),))
    return Match(M7)
