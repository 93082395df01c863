"""The reference engine: Service Broker's routing decision as plain Python (docs/rules.md §1.7).

`decide_message` takes one message through the steps in the order of §1.7, each step a function of
its own module:

    S4 reply shortcut        scoping.reply_shortcut_database
    S1-S3 which table        scoping.routing_scope
    R6 active routes         snapshot.RouteSnapshot
    M1-M7 matching           matching.match_routes
    C0-C5 choice             choice.choose_route (C2 asks locate.locate_database, C4 transport)
    L1-L4 deliver            locate.locate_database
    C-drop, F3, F5           forwarding
    MI2, MI3, T1 next hop    mirror.principal_address, transport.transport_address
    S5 loop-back             scoping.loops_back, re-routed as incoming

`ReferenceEngine.decide` applies the batch semantics of `streaming.rules.batch` around it.
Nothing here reads a clock or does I/O: time comes in as `RoutingBatch.now`.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace

from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.choice import C1, C2, C4, Choice, Rotation, choose_route
from streaming.rules.forwarding import (
    buffer_full,
    forwarded_hops,
    forwarder_discard_reason,
    forwarding_refused,
)
from streaming.rules.locate import hosts_service, locate_database
from streaming.rules.matching import M4, M6, M7, Match, match_routes
from streaming.rules.mirror import principal_address
from streaming.rules.model import (
    ChoiceKey,
    Database,
    Decision,
    Message,
    Outcome,
    Reason,
    Route,
    RouteIdentity,
)
from streaming.rules.scoping import as_incoming, loops_back, reply_shortcut_database, routing_scope
from streaming.rules.snapshot import RouteSnapshot
from streaming.rules.transport import transport_address

S4 = "S4"


class ReferenceEngine:
    """The pure-Python `Decider`: decides a batch one message at a time, in order."""

    def decide(self, batch: RoutingBatch) -> BatchResult:
        """Decide every message of `batch` with the in-batch semantics of `streaming.rules.batch`.

        * D1, B7: a locally originated message whose conversation endpoint (its side of the
          conversation) already has a message waiting (from an earlier batch, or delayed earlier in
          this one) is delayed behind it, so the endpoint keeps its order; the other side of the
          conversation does not wait for it. Incoming messages are never held (D5), so they never
          wait.
        * B4: the first message that reaches M4 for (scope, service) creates the request; later
          messages of the batch see it pending and go on at M5.
        * K2: a message that `remembers_choice` keeps the route its conversation chose before
          (from an earlier batch, or earlier in this one) while that route is still a candidate.
        * F5: the messages the batch forwards are in flight together; one whose forwarding would
          push their total over MESSAGE_FORWARD_SIZE is discarded (`forward_buffer_full`).
        * C5, M3: a pick among equal options takes the next in turn (`Rotation`), in batch order.
        """
        snapshot = RouteSnapshot.of(batch)
        pending = set(batch.pending_requests)
        waiting = set(batch.waiting_endpoints)
        memory = dict(batch.choices)
        rotation = Rotation(batch.rotation)
        decisions: list[Decision] = []
        requests: list[tuple[str, str]] = []
        choices: dict[ChoiceKey, RouteIdentity] = {}
        in_flight = 0
        for message in batch.messages:
            if not message.is_remote and message.endpoint in waiting:
                decision = delayed_behind_conversation(message, snapshot)
            else:
                kept = memory.get(message.choice_key)
                decision = decide_message(message, snapshot, pending, kept, rotation)
            if decision.outcome is Outcome.FORWARD:
                if buffer_full(in_flight, message, batch.instance):
                    decision = discarded_for_buffer(decision)
                else:
                    in_flight += message.size_bytes
            if decision.requests is not None and decision.scope is not None:
                pending.add((decision.scope, decision.requests))
                requests.append((decision.scope, decision.requests))
            if decision.outcome is Outcome.DELAYED:
                waiting.add(message.endpoint)
            if decision.remembered is not None:
                memory[message.choice_key] = choices[message.choice_key] = decision.remembered
            decisions.append(decision)
        return BatchResult(
            decisions=tuple(decisions), requests=tuple(requests), choices=choices, rotation=rotation.advanced
        )


def discarded_for_buffer(forward: Decision) -> Decision:
    """F5: a forward that does not fit the forwarder's buffer, discarded with the route it had chosen."""
    return replace(
        forward,
        outcome=Outcome.DISCARDED,
        reason=Reason.FORWARD_BUFFER_FULL,
        address=None,
        hops_remaining=None,
    )


def delayed_behind_conversation(message: Message, snapshot: RouteSnapshot) -> Decision:
    """D1, B7: a message of a conversation that is already delayed waits behind it, unmatched.

    Reported as `delayed` with reason `no_route` and no match step (matching did not run).
    """
    return Decision(
        id=message.id,
        outcome=Outcome.DELAYED,
        at=snapshot.now,
        reason=Reason.NO_ROUTE,
        scope=routing_scope(message),
        extra={"waiting_behind": message.conversation_id},
    )


def decide_message(
    message: Message,
    snapshot: RouteSnapshot,
    pending_requests: Set[tuple[str, str]] = frozenset(),
    remembered: RouteIdentity | None = None,
    rotation: Rotation | None = None,
) -> Decision:
    """Decide one message against the snapshot (§1.7), ignoring other messages of its batch.

    `pending_requests` holds the (scope, service) pairs with a MissingRoute request outstanding
    (B4). A decision that makes a new request carries the service in `requests` and the table in
    `scope` (M4, B3). `remembered` is the route identity the message's conversation chose before
    (K2); it counts only for a message that `remembers_choice`, and such a message's decision
    carries the identity chosen now in `remembered`. `rotation` says whose turn it is among equal
    options (C5, M3), and is advanced by the pick; a new one starts every rotation at its first.
    """
    if rotation is None:
        rotation = Rotation()
    if not message.remembers_choice:
        remembered = None
    shortcut = reply_shortcut_database(message, snapshot.instance)
    if shortcut is not None:
        return Decision(
            id=message.id,
            outcome=Outcome.DELIVER,
            at=snapshot.now,
            database=shortcut.name,
            match_step=S4,
        )
    scope = routing_scope(message)
    match = match_routes(
        snapshot.table(scope),
        scope=scope,
        service=message.service,
        broker_instance=message.broker_instance,
        rotation=rotation,
        request_pending=(scope, message.service) in pending_requests,
        service_hosted=hosts_service(snapshot.instance, message.service),
        remembered=remembered,
    )
    if match.step == M4:
        return not_routed(message, snapshot, scope, match, Reason.ROUTE_REQUESTED, requests=message.service)
    if match.step == M7:
        return not_routed(message, snapshot, scope, match, Reason.NO_ROUTE)
    choice = choose_route(
        match.candidates,
        service=message.service,
        rotation=rotation,
        locatable=lambda route: destination_database(message, route, snapshot) is not None,
        remembered=remembered,
    )
    if choice is None:
        return not_routed(message, snapshot, scope, match, no_usable_route_reason(match))
    database = destination_database(message, choice.route, snapshot) if choice.step == C2 else None
    if database is not None:
        decision = replace(
            chosen(message, snapshot, scope, match, choice, Outcome.DELIVER), database=database.name
        )
    else:
        decision = leave_instance(message, snapshot, scope, match, choice, pending_requests, rotation)
    if message.remembers_choice:
        return replace(decision, remembered=choice.route.identity)
    return decision


def leave_instance(
    message: Message,
    snapshot: RouteSnapshot,
    scope: str,
    match: Match,
    choice: Choice,
    pending_requests: Set[tuple[str, str]],
    rotation: Rotation,
) -> Decision:
    """Send or forward a message whose chosen route is not LOCAL (C-drop, F2, F3, F5, MI2, MI3, S5).

    Order: the forwarding gate (C-drop), then the forwarder's own checks (F3 hops and lifetime,
    F5 buffer), then the next hop (the principal partner for a mirror route, MI2/MI3; the address
    in the service name for TRANSPORT, T1). A locally originated message whose next hop is this
    instance is re-routed as incoming with msdb (S5); its decision is that re-routing's.
    """
    instance = snapshot.instance
    if forwarding_refused(message, instance):
        return not_routed(message, snapshot, scope, match, Reason.FORWARDING_DISABLED, choice=choice)
    if message.is_remote:
        discard = forwarder_discard_reason(message, instance)
        if discard is not None:
            return replace(chosen(message, snapshot, scope, match, choice, Outcome.DISCARDED), reason=discard)
    address = next_hop(message, choice, snapshot)
    if address is None:
        return not_routed(message, snapshot, scope, match, Reason.PRINCIPAL_UNKNOWN, choice=choice)
    if not message.is_remote and loops_back(address, instance):
        rerouted = decide_message(as_incoming(message), snapshot, pending_requests, rotation=rotation)
        return replace(rerouted, extra={**rerouted.extra, "loop_back": address})
    if message.is_remote:
        return replace(
            chosen(message, snapshot, scope, match, choice, Outcome.FORWARD),
            address=address,
            hops_remaining=forwarded_hops(message),
        )
    return replace(chosen(message, snapshot, scope, match, choice, Outcome.SEND), address=address)


def destination_database(message: Message, route: Route, snapshot: RouteSnapshot) -> Database | None:
    """Locate the database a LOCAL route delivers to (L1-L4), or None when the service is not found.

    The broker instance is the conversation's, else the route's (L2); the database holding the
    conversation is the message's origin, none for a message from outside (L3).
    """
    return locate_database(
        snapshot.instance,
        message.service,
        message.broker_instance or route.broker_instance,
        None if message.is_remote else message.origin,
    )


def next_hop(message: Message, choice: Choice, snapshot: RouteSnapshot) -> str | None:
    """Return the network address a chosen non-LOCAL route sends to, or None when unknown.

    C1: the partner that is principal (MI2), None when neither claims it (MI3).
    C4: the address at the start of the service name (T1); the tier only holds usable routes.
    C3: the route's address as stored (MI4: no fail-over without a mirror address).
    """
    if choice.step == C1:
        return principal_address(choice.route, snapshot.mirrors)
    if choice.step == C4:
        return transport_address(message.service)
    return choice.route.address


def no_usable_route_reason(match: Match) -> Reason:
    """Why the choice step found nothing: `service_not_found` if a LOCAL route could not locate it."""
    if any(route.is_local for route in match.candidates):
        return Reason.SERVICE_NOT_FOUND
    return Reason.NO_ROUTE


def not_routed(
    message: Message,
    snapshot: RouteSnapshot,
    scope: str,
    match: Match,
    reason: Reason,
    *,
    choice: Choice | None = None,
    requests: str | None = None,
) -> Decision:
    """A message that cannot go anywhere now: delayed if locally originated, else dropped (D1, D5).

    D1: a locally originated conversation is kept and re-routed after a time-out (D2); it stays
    delayed until a usable route appears (D4: the dialog lifetime that ends the wait belongs to the
    endpoints, not to the router). Not finding a route is not an error: no Error message is made.
    D5: an incoming message is dropped, not stored; the remote sender's retry (A3) re-tries it.
    This holds for M4 too: an incoming message that triggers a MissingRoute request is dropped.
    """
    outcome = Outcome.DROPPED if message.is_remote else Outcome.DELAYED
    if choice is not None:
        return replace(chosen(message, snapshot, scope, match, choice, outcome), reason=reason)
    return Decision(
        id=message.id,
        outcome=outcome,
        at=snapshot.now,
        match_step=match.step,
        reason=reason,
        requests=requests,
        scope=scope,
    )


def chosen(
    message: Message, snapshot: RouteSnapshot, scope: str, match: Match, choice: Choice, outcome: Outcome
) -> Decision:
    """A decision taken with a chosen route; the virtual M6 route is reported as `route: null`."""
    return Decision(
        id=message.id,
        outcome=outcome,
        at=snapshot.now,
        route=None if match.step == M6 else choice.route.name,
        match_step=match.step,
        choice_step=choice.step,
        scope=scope,
    )
