"""Choosing one route from the candidate set: C0 dedupe, tiers C1-C4, and the pick C5 (docs/rules.md §1.5).

Tiers are tried in order and an empty tier is skipped:

* C1 (MI1) routes with a mirror address;
* C2 routes whose address is LOCAL, kept only when §1.6 can locate the service with them;
* C3 routes with a network address and no mirror;
* C4 TRANSPORT routes, kept only when the service name yields a next hop (T1, T4).

When every tier is empty the message has no usable route (same fate as M7).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from streaming.rules.model import Route, RouteIdentity
from streaming.rules.transport import transport_address

C1 = "C1"
C2 = "C2"
C3 = "C3"
C4 = "C4"


@dataclass(frozen=True)
class Choice:
    """The route chosen and the choice step (tier) that chose it."""

    route: Route
    step: str


OPTIONS = "\x1e"
"""Separates the options of a set in a rotation key."""
FIELDS = "\x1f"
"""Separates the fields of one route identity in a rotation key."""


class Rotation:
    """C5, M3: new conversations take equal options in turn, round-robin, in order of arrival.

    Service Broker's documentation says "arbitrarily" (C5 [AMB]); its team described the choice as
    round-robin, so this engine takes equal options in turn, advanced once per new conversation.
    Each set of equal options of a routing table (a tier's deduplicated routes, or M3's distinct
    broker instances of a service) has its own counter, keyed by `tier_key` or `brokers_key`: the
    index of the option the next pick takes. A conversation that kept a choice (K2) does not pick,
    so it does not turn the rotation. A set of one option has no counter. The counters outlive a
    batch: `RoutingBatch.rotation` gives them, `BatchResult.rotation` takes what a batch advanced.
    """

    def __init__(self, counters: Mapping[str, int] | None = None) -> None:
        self._next = dict(counters or {})
        self.advanced: dict[str, int] = {}
        """The counters this rotation moved, with their values now."""

    def take(self, key: str, count: int) -> int:
        """The index (of `count` options, in their stable order) the next pick of `key` takes."""
        if count == 1:
            return 0
        index = self._next.get(key, 0) % count
        self._next[key] = self.advanced[key] = (index + 1) % count
        return index


def tier_key(tier: Sequence[Route]) -> str:
    """C5: a tier's rotation key: its table, and its routes' C0 identities in the order it picks from."""
    return OPTIONS.join(["C5", tier[0].scope, *(FIELDS.join(r.identity) for r in tier)])


def brokers_key(scope: str, service: str, brokers: Sequence[str]) -> str:
    """M3: the rotation key of a service's distinct broker instances in a table, ascending."""
    return OPTIONS.join(["M3", scope, service, *brokers])


def dedupe_candidates(candidates: Iterable[Route]) -> tuple[Route, ...]:
    """Collapse routes equal in (broker instance, service, address) into one (C0, R10).

    Name, owner, mirror address and lifetime are not part of the identity (C0 [AMB] faithful
    reading), so duplicates do not bias the choice. Of routes sharing an identity, the one with the
    smallest name represents them. The result is sorted ascending by identity, the order C5 picks
    from; broker instances are in canonical form, as loading guarantees (R3).
    """
    by_identity: dict[tuple[str, str, str], Route] = {}
    for route in sorted(candidates, key=lambda r: r.name):
        by_identity.setdefault(route.identity, route)
    return tuple(sorted(by_identity.values(), key=lambda r: r.identity))


def pick_one(
    candidates: Sequence[Route], rotation: Rotation, remembered: RouteIdentity | None = None
) -> Route:
    """Choose one of a tier's deduplicated, identity-sorted candidates (C5, K2).

    K2: a conversation keeps the choice made for its first message, so the `remembered` route
    identity wins while it is one of the candidates. Otherwise the tier's `rotation` picks the
    next of the candidates sorted ascending by their C0 identity tuple
    `(broker_instance or "", service or "", address)`.
    """
    kept = next((r for r in candidates if remembered is not None and r.identity == remembered), None)
    if kept is not None:
        return kept
    return candidates[rotation.take(tier_key(candidates), len(candidates))]


def mirror_tier(candidates: Iterable[Route]) -> list[Route]:
    """C1, MI1: routes that have a mirror address.

    R5 [AMB] faithful reading: CREATE ROUTE's demand that a mirror route name service and broker
    instance is a DDL rule; a mirror route present in a table is routed whatever it names.
    """
    return [r for r in candidates if r.mirror_address is not None]


def local_tier(candidates: Iterable[Route], locatable: Callable[[Route], bool]) -> list[Route]:
    """C2: LOCAL routes with which the destination service can actually be located.

    C2 detail [AMB] faithful reading: the test is "can §1.6 locate a destination for this
    conversation with this route" (service present, in a broker-enabled database, in the database
    named by the broker instance if any); `locatable` answers it. If not, C3/C4 are tried.
    """
    return [r for r in candidates if r.mirror_address is None and r.is_local and locatable(r)]


def network_tier(candidates: Iterable[Route]) -> list[Route]:
    """C3: routes with a network (`TCP://`) address and no mirror address."""
    return [r for r in candidates if r.mirror_address is None and not r.is_local and not r.is_transport]


def transport_tier(candidates: Iterable[Route], service: str) -> list[Route]:
    """C4, T2: TRANSPORT routes, usable only when the service name begins with an address (T1, T4)."""
    if transport_address(service) is None:
        return []
    return [r for r in candidates if r.mirror_address is None and r.is_transport]


def choose_route(
    candidates: Iterable[Route],
    *,
    service: str,
    rotation: Rotation,
    locatable: Callable[[Route], bool],
    remembered: RouteIdentity | None = None,
) -> Choice | None:
    """Return the route chosen for a message, or None when no tier has a usable route (C0-C5).

    The candidates are deduplicated (C0), then the first non-empty tier of C1, C2, C3, C4 picks one
    route (C5, whichever is next in `rotation`). A `locatable` route is one §1.6 can deliver with
    (C2). `remembered` is the identity of the route the conversation chose before (K2), kept when
    it is in that tier.
    """
    unique = dedupe_candidates(candidates)
    tiers: tuple[tuple[str, list[Route]], ...] = (
        (C1, mirror_tier(unique)),
        (C2, local_tier(unique, locatable)),
        (C3, network_tier(unique)),
        (C4, transport_tier(unique, service)),
    )
    for step, tier in tiers:
        if tier:
            return Choice(pick_one(tier, rotation, remembered), step)
    return None
