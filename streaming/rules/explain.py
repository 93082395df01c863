"""One routing decision told step by step, in Service Broker's words (docs/rules.md §1.2-§1.7, §1.11-§1.14).

`explain_decision` takes a message through the steps of `streaming.rules.engine.decide_message`, in
the same order and with the same step functions (`matching.m1_service_and_broker` ... `m6`,
`choice.mirror_tier` ... `transport_tier`, `choice.pick_one`, `locate`, `forwarding`, `mirror`,
`transport`, `scoping`), one at a time, so that it can say what each step saw: the routes it
considered, why each was or was not taken, and which step ended matching or made the choice. It is
not a second engine: the decision it returns is built by the engine's own helpers from what those
steps found, and tests/unit/test_explain_steps.py holds it equal to `decide_message` over every
scenario of the suite and over generated cases.

The account covers one message's decision. What a batch adds around it (D1: waiting behind a
delayed message of the same conversation endpoint; F5: the bytes other forwards of the batch hold)
and the state the job keeps (K2's kept choice, the C5/M3 rotation, B4's pending requests) are
inputs here, as they are to `decide_message`; whoever builds them says where they came from.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass, replace

from streaming.rules.choice import (
    C1,
    C2,
    C3,
    C4,
    Choice,
    Rotation,
    dedupe_candidates,
    local_tier,
    mirror_tier,
    network_tier,
    pick_one,
    transport_tier,
)
from streaming.rules.engine import (
    S4,
    chosen,
    destination_database,
    next_hop,
    no_usable_route_reason,
    not_routed,
)
from streaming.rules.forwarding import (
    BYTES_PER_MB,
    forwarded_hops,
    forwarder_discard_reason,
    forwarding_refused,
)
from streaming.rules.locate import hosts_service
from streaming.rules.matching import (
    M1,
    M2,
    M3,
    M4,
    M5,
    M6,
    M7,
    VIRTUAL_LOCAL_ROUTE_NAME,
    Match,
    m1_service_and_broker,
    m2_service_any_broker,
    m3_service_one_broker,
    m4_asks_for_route,
    m5_wildcard_routes,
    m6_virtual_local_route,
    same_broker,
    same_service,
)
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    Decision,
    Instance,
    Message,
    Outcome,
    Reason,
    Route,
    RouteIdentity,
    canonical_guid,
)
from streaming.rules.scoping import MSDB, as_incoming, loops_back, reply_shortcut_database, routing_scope
from streaming.rules.snapshot import RouteSnapshot

C0 = "C0"
C5 = "C5"
K2 = "K2"
R6 = "R6"
C_DROP = "C-drop"
MATCHING_STEPS = (M1, M2, M3, M4, M5, M6, M7)
CHOICE_STEPS = (C0, C1, C2, C3, C4, C5)
TIER_NAMES = {
    C1: "routes with a mirror address",
    C2: "LOCAL routes",
    C3: "routes with a network address",
    C4: "TRANSPORT routes",
}


@dataclass(frozen=True)
class Considered:
    """A route as one step saw it: taken by the step or not, and why."""

    route: Route
    taken: bool
    why: str


@dataclass(frozen=True)
class Step:
    """One rule applied to the message: its id, what it concluded, the routes it looked at."""

    rule: str
    verdict: str
    considered: tuple[Considered, ...] = ()
    ended: bool = False
    """This step ended matching (M1-M7), made the choice (C1-C4), or decided the message's fate."""


@dataclass(frozen=True)
class Account:
    """A decision and the steps that led to it, in the order the engine takes them."""

    message: Message
    steps: tuple[Step, ...]
    decision: Decision

    def steps_of(self, rules: Iterable[str]) -> tuple[Step, ...]:
        """The steps whose rule is one of `rules`, in order."""
        wanted = set(rules)
        return tuple(step for step in self.steps if step.rule in wanted)


def explain_decision(
    message: Message,
    snapshot: RouteSnapshot,
    pending_requests: Set[tuple[str, str]] = frozenset(),
    remembered: RouteIdentity | None = None,
    rotation: Rotation | None = None,
    *,
    expired: Sequence[Route] = (),
) -> Account:
    """Decide `message` as `decide_message` does, with the same inputs, and tell each step.

    `pending_requests`, `remembered` and `rotation` mean what they mean to `decide_message` (B4, K2,
    C5/M3), and `rotation` is advanced the same way. `expired` are the routes of the instance's
    tables that R6 left out of `snapshot` (expired by `snapshot.now`): listed, never used.
    """
    steps: list[Step] = []
    decision = _decide(
        message,
        snapshot,
        pending_requests,
        remembered,
        Rotation() if rotation is None else rotation,
        tuple(expired),
        steps,
    )
    return Account(message=message, steps=tuple(steps), decision=decision)


# --- the walk ------------------------------------------------------------------------------------


def _decide(
    message: Message,
    snapshot: RouteSnapshot,
    pending: Set[tuple[str, str]],
    remembered: RouteIdentity | None,
    rotation: Rotation,
    expired: tuple[Route, ...],
    steps: list[Step],
) -> Decision:
    """`decide_message`, step by step, appending each step to `steps`."""
    instance = snapshot.instance
    if not message.remembers_choice:
        remembered = None
    shortcut = reply_shortcut_database(message, instance)
    if message.is_remote:
        steps.append(_reply_shortcut_step(message, instance, shortcut is not None))
    if shortcut is not None:
        return Decision(
            id=message.id, outcome=Outcome.DELIVER, at=snapshot.now, database=shortcut.name, match_step=S4
        )
    scope = routing_scope(message)
    table = snapshot.table(scope)
    steps.append(_table_step(message, scope, table))
    gone = tuple(r for r in expired if r.scope == scope)
    if gone:
        steps.append(
            Step(
                R6,
                f"{len(gone)} route(s) of the {scope} table have expired: ignored by every matching run",
                tuple(Considered(r, False, f"expired at {_instant(r)} (R6)") for r in gone),
            )
        )
    if message.remembers_choice:
        steps.append(_kept_step(remembered))
    match = _match(message, scope, table, snapshot, pending, remembered, rotation, steps)
    if match.step == M4:
        return not_routed(message, snapshot, scope, match, Reason.ROUTE_REQUESTED, requests=message.service)
    if match.step == M7:
        return not_routed(message, snapshot, scope, match, Reason.NO_ROUTE)
    choice = _choose(message, match, snapshot, rotation, remembered, steps)
    if choice is None:
        reason = no_usable_route_reason(match)
        steps.append(
            Step(
                _fate_rule(message),
                f"no tier holds a usable route: {_fate(message, reason)}",
                ended=True,
            )
        )
        return not_routed(message, snapshot, scope, match, reason)
    database = destination_database(message, choice.route, snapshot) if choice.step == C2 else None
    if database is not None:
        steps.append(_located_step(message, choice.route, database.name))
        decision = replace(
            chosen(message, snapshot, scope, match, choice, Outcome.DELIVER), database=database.name
        )
    else:
        decision = _leave(message, snapshot, scope, match, choice, pending, rotation, expired, steps)
    if message.remembers_choice:
        return replace(decision, remembered=choice.route.identity)
    return decision


def _leave(
    message: Message,
    snapshot: RouteSnapshot,
    scope: str,
    match: Match,
    choice: Choice,
    pending: Set[tuple[str, str]],
    rotation: Rotation,
    expired: tuple[Route, ...],
    steps: list[Step],
) -> Decision:
    """`engine.leave_instance`, step by step: C-drop, F1, F3, F5, MI2/MI3, T1, S5."""
    instance = snapshot.instance
    name = _route_name(choice.route)
    if forwarding_refused(message, instance):
        steps.append(
            Step(
                C_DROP,
                f"the message came from another instance and {name} is not LOCAL, but message forwarding "
                f"is disabled on {instance.name} (MESSAGE_FORWARDING = DISABLED, F1): dropped, not "
                "acknowledged; its sender retries",
                ended=True,
            )
        )
        return not_routed(message, snapshot, scope, match, Reason.FORWARDING_DISABLED, choice=choice)
    if message.is_remote:
        steps.append(
            Step("F1", f"message forwarding is enabled on {instance.name}: it may relay the message (F2, F7)")
        )
        discard = forwarder_discard_reason(message, instance)
        steps.extend(_forwarder_checks(message, instance))
        if discard is not None:
            return replace(chosen(message, snapshot, scope, match, choice, Outcome.DISCARDED), reason=discard)
    address = next_hop(message, choice, snapshot)
    if choice.step == C1:
        steps.append(_mirror_step(choice.route, address))
    elif choice.step == C4:
        steps.append(
            Step("T1", f"TRANSPORT: the next hop is the address the service name begins with, {address}")
        )
    if address is None:
        return not_routed(message, snapshot, scope, match, Reason.PRINCIPAL_UNKNOWN, choice=choice)
    if not message.is_remote and loops_back(address, instance):
        steps.append(
            Step(
                "S5",
                f"{address} is {instance.name}'s own address: the conversation is routed again as if it had "
                "come from outside, with msdb's routes (LP2)",
            )
        )
        rerouted = _decide(as_incoming(message), snapshot, pending, None, rotation, expired, steps)
        return replace(rerouted, extra={**rerouted.extra, "loop_back": address})
    if message.is_remote:
        hops = forwarded_hops(message)
        steps.append(
            Step(
                "F3",
                f"forwarded to {address} with hops_remaining {hops} (one less); not acknowledged here (F4)",
                ended=True,
            )
        )
        return replace(
            chosen(message, snapshot, scope, match, choice, Outcome.FORWARD),
            address=address,
            hops_remaining=hops,
        )
    return replace(chosen(message, snapshot, scope, match, choice, Outcome.SEND), address=address)


def _match(
    message: Message,
    scope: str,
    table: tuple[Route, ...],
    snapshot: RouteSnapshot,
    pending: Set[tuple[str, str]],
    remembered: RouteIdentity | None,
    rotation: Rotation,
    steps: list[Step],
) -> Match:
    """`matching.match_routes`, step by step (M1-M7): the same step functions, in the same order."""
    service, broker = message.service, message.broker_instance
    named = tuple(r for r in table if same_service(r, service))
    if broker is not None:
        found = m1_service_and_broker(table, service, broker)
        steps.append(
            _matching_step(
                M1,
                found,
                named,
                lambda r: _m1_why(r, service, broker),
                f"naming {service} and broker instance {broker}",
            )
        )
        if found:
            return Match(M1, found)
    else:
        steps.append(Step(M1, "skipped: the message names no broker instance (K1)"))
    found = m2_service_any_broker(table, service)
    steps.append(_matching_step(M2, found, named, _m2_why, f"naming {service} without a broker instance"))
    if found:
        return Match(M2, found)
    if broker is None:
        found = m3_service_one_broker(table, service, rotation, remembered)
        steps.append(_m3_step(found, named, remembered))
        if found:
            return Match(M3, found)
    else:
        steps.append(
            Step(
                M3,
                f"skipped: the message names broker instance {broker}, so routes naming another broker "
                "instance are never candidates",
            )
        )
    request_pending = (scope, service) in pending
    if m4_asks_for_route(table, request_pending):
        steps.append(
            Step(
                M4,
                f"the {scope} table has a route to the dynamic routing service and no MissingRoute request "
                f"for {service} is pending: the conversation is delayed and a MissingRoute request is sent "
                "(B2, B3)",
                _bcn_considered(table, True),
                ended=True,
            )
        )
        return Match(M4)
    steps.append(_m4_not_step(scope, service, table, request_pending))
    found = m5_wildcard_routes(table)
    no_service = tuple(r for r in table if r.service is None)
    steps.append(
        _matching_step(M5, found, no_service, _m5_why, "with no service and no broker instance (wildcards)")
    )
    if found:
        return Match(M5, found)
    hosted = hosts_service(snapshot.instance, service)
    if broker is not None and hosted:
        virtual = m6_virtual_local_route(scope, service)
        steps.append(
            Step(
                M6,
                f"the message names broker instance {broker} and a database of {snapshot.instance.name} "
                f"hosts {service}: as if the table held the route ({service}, *, LOCAL)",
                (Considered(virtual, True, "the virtual LOCAL route of M6"),),
                ended=True,
            )
        )
        return Match(M6, (virtual,))
    if broker is None:
        why_not = "the message names no broker instance"
    else:
        why_not = f"no database of {snapshot.instance.name} with message delivery on hosts {service}"
    steps.append(Step(M6, f"does not apply: {why_not}"))
    steps.append(Step(M7, f"no route matched: {_fate(message, Reason.NO_ROUTE)}", ended=True))
    return Match(M7)


def _choose(
    message: Message,
    match: Match,
    snapshot: RouteSnapshot,
    rotation: Rotation,
    remembered: RouteIdentity | None,
    steps: list[Step],
) -> Choice | None:
    """`choice.choose_route`, step by step: C0, then the tiers C1-C4, the pick (C5, K2)."""
    unique = dedupe_candidates(match.candidates)
    collapsed = tuple(r for r in match.candidates if r not in unique)
    if collapsed:
        steps.append(
            Step(
                C0,
                f"{len(collapsed)} candidate(s) equal to another in (broker instance, service, address) "
                "count as one route",
                tuple(
                    Considered(r, False, f"same as {_same_identity(r, unique).name}: counted once")
                    for r in collapsed
                ),
            )
        )
    else:
        steps.append(
            Step(C0, f"{len(unique)} candidate(s), no two equal in (broker instance, service, address)")
        )

    def locatable(route: Route) -> bool:
        return destination_database(message, route, snapshot) is not None

    tiers: tuple[tuple[str, list[Route], Callable[[Route], bool]], ...] = (
        (C1, mirror_tier(unique), lambda r: r.mirror_address is not None),
        (C2, local_tier(unique, locatable), lambda r: r.mirror_address is None and r.is_local),
        (
            C3,
            network_tier(unique),
            lambda r: r.mirror_address is None and not r.is_local and not r.is_transport,
        ),
        (C4, transport_tier(unique, message.service), lambda r: r.mirror_address is None and r.is_transport),
    )
    for step, tier, belongs in tiers:
        members = tuple(r for r in unique if belongs(r))
        if not tier:
            steps.append(_empty_tier_step(step, members, message, snapshot))
            continue
        kept = next((r for r in tier if remembered is not None and r.identity == remembered), None)
        picked = pick_one(tier, rotation, remembered)
        steps.append(
            Step(
                step,
                f"{TIER_NAMES[step]}: {len(tier)} usable; chose {_route_name(picked)}",
                tuple(Considered(r, r is picked, _tier_why(r, r is picked, step)) for r in members),
                ended=True,
            )
        )
        if kept is not None:
            steps.append(
                Step(
                    K2,
                    f"the conversation keeps {_route_name(kept)}, chosen for its first message, while it is "
                    "a candidate",
                )
            )
        elif len(tier) > 1:
            steps.append(
                Step(
                    C5,
                    f"{len(tier)} equal routes are taken in turn by new conversations (round robin); "
                    f"this one's turn gave {_route_name(picked)}",
                )
            )
        return Choice(picked, step)
    return None


# --- the words -----------------------------------------------------------------------------------


def describe_route(route: Route) -> str:
    """A route written `name (service, broker instance, address[, mirror])`, `*` for NULL (docs/rules.md)."""
    if route.name == VIRTUAL_LOCAL_ROUTE_NAME:
        return f"the virtual route ({route.service}, *, LOCAL) of M6"
    fields = [route.service or "*", route.broker_instance or "*", route.address]
    if route.mirror_address is not None:
        fields.append(route.mirror_address)
    return f"{route.name} ({', '.join(fields)})"


def decision_summary(decision: Decision) -> str:
    """One line: the outcome, where to, by which route and steps, and why (the headers' vocabulary)."""
    out = decision.outcome.value
    if decision.outcome is Outcome.DELIVER and decision.database:
        out += f" into {decision.database}"
    if decision.address and decision.outcome in (Outcome.SEND, Outcome.FORWARD):
        out += f" to {decision.address}"
    if decision.match_step == S4:
        out += " by the reply shortcut (S4)"
    elif decision.choice_step is not None:
        route = f"route {decision.route}" if decision.route is not None else "the virtual LOCAL route"
        out += f" by {route} ({decision.match_step}, {decision.choice_step})"
    elif decision.match_step is not None:
        out += f" ({decision.match_step})"
    if decision.reason is not None:
        out += f": {decision.reason.value}"
    return out


def _route_name(route: Route) -> str:
    return "the virtual LOCAL route of M6" if route.name == VIRTUAL_LOCAL_ROUTE_NAME else route.name


def _instant(route: Route) -> str:
    return "?" if route.expires_at is None else route.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _fate_rule(message: Message) -> str:
    return "D5" if message.is_remote else "D1"


def _fate(message: Message, reason: Reason) -> str:
    """D1, D5: what finding no usable route means for this message."""
    if message.is_remote:
        return f"dropped ({reason.value}): a message from outside is not kept (D5); its sender retries"
    return f"delayed ({reason.value}), and routed again after a time-out (D1, D2)"


def _reply_shortcut_step(message: Message, instance: Instance, applies: bool) -> Step:
    if applies:
        return Step(
            S4,
            f"a reply from outside (sent by the target) to broker instance {message.broker_instance}, a "
            f"database of {instance.name}: delivered to it without matching",
            ended=True,
        )
    if not message.from_target:
        why = "it was sent by the initiator side"
    elif message.broker_instance is None:
        why = "it names no broker instance"
    else:
        why = (
            f"broker instance {message.broker_instance} is not a database of {instance.name} with delivery on"
        )
    return Step(S4, f"the reply shortcut does not apply: {why}")


def _table_step(message: Message, scope: str, table: tuple[Route, ...]) -> Step:
    if message.is_remote:
        rule, whose = "S3", f"it arrived from another instance: {MSDB}'s routes decide"
    elif message.from_target:
        rule, whose = "S2", f"a reply from the target endpoint in {scope}: {scope}'s routes decide"
    else:
        rule, whose = "S1", f"the conversation began in {scope}: only {scope}'s routes decide"
    others = tuple(
        Considered(r, False, _other_service_why(r.service, message.service))
        for r in table
        if r.service is not None and r.service != message.service
    )
    verdict = f"{whose} ({len(table)} active route(s)"
    verdict += f", {len(others)} of them for other services)" if others else ")"
    return Step(rule, verdict, others)


def _other_service_why(route_service: str | None, service: str) -> str:
    if route_service is not None and route_service.lower() == service.lower():
        return f"names {route_service!r}, not {service!r}: service names are compared byte by byte (R2)"
    return f"names another service, {route_service} (R2)"


def _kept_step(remembered: RouteIdentity | None) -> Step:
    if remembered is None:
        return Step(K2, "the conversation has kept no route: this is its first choice")
    bid, service, address = remembered
    return Step(
        K2,
        f"the conversation keeps the route it chose before, ({service or '*'}, {bid or '*'}, {address}), "
        "while that route is a candidate",
    )


def _matching_step(
    rule: str,
    found: tuple[Route, ...],
    looked_at: tuple[Route, ...],
    why: Callable[[Route], str],
    what: str,
) -> Step:
    considered = tuple(Considered(r, r in found, why(r)) for r in looked_at)
    if found:
        verdict = f"matched {len(found)} route(s) {what}: matching ends here"
    else:
        verdict = "no wildcard route" if rule == M5 else f"no route {what}"
    return Step(rule, verdict, considered, ended=bool(found))


def _m1_why(route: Route, service: str, broker: str) -> str:
    if route.broker_instance is None:
        return f"names {service} but no broker instance (an M2 route)"
    if same_broker(route, broker):
        return f"names {service} and broker instance {route.broker_instance}"
    return f"broker instance {route.broker_instance} differs from the message's {broker}"


def _m2_why(route: Route) -> str:
    if route.broker_instance is None:
        return f"names {route.service} and any broker instance"
    return f"names broker instance {route.broker_instance} (M1 or M3 decide on it)"


def _m3_step(found: tuple[Route, ...], named: tuple[Route, ...], remembered: RouteIdentity | None) -> Step:
    with_broker = tuple(r for r in named if r.broker_instance is not None)
    if not found:
        return Step(M3, "no route naming the service with a broker instance")
    picked = canonical_guid(found[0].broker_instance or "")
    brokers = sorted({canonical_guid(r.broker_instance) for r in with_broker if r.broker_instance})
    if len(brokers) == 1:
        how = f"one broker instance, {picked}"
    elif remembered is not None and remembered[0] and canonical_guid(remembered[0]) == picked:
        how = f"the conversation keeps broker instance {picked}, chosen for its first message (K2)"
    else:
        how = f"{len(brokers)} broker instances taken in turn by new conversations (C5), this one's: {picked}"
    considered = tuple(
        Considered(
            r,
            r in found,
            f"names broker instance {r.broker_instance}"
            + ("" if r in found else f", not the one picked ({picked})"),
        )
        for r in with_broker
    )
    return Step(M3, f"matched {len(found)} route(s) with {how}: matching ends here", considered, ended=True)


def _bcn_considered(table: tuple[Route, ...], taken: bool) -> tuple[Considered, ...]:
    return tuple(
        Considered(r, taken, "a route to the dynamic routing service (B1)")
        for r in table
        if r.service == BROKER_CONFIGURATION_SERVICE
    )


def _m4_not_step(scope: str, service: str, table: tuple[Route, ...], request_pending: bool) -> Step:
    bcn = _bcn_considered(table, False)
    if not bcn:
        return Step(M4, f"the {scope} table has no route to the dynamic routing service")
    return Step(
        M4,
        f"a MissingRoute request for {service} is already pending in the {scope} table (B4): matching goes "
        "on at M5",
        bcn,
    )


def _m5_why(route: Route) -> str:
    if route.broker_instance is None:
        return "names neither service nor broker instance: a wildcard route (R8)"
    return f"names broker instance {route.broker_instance} but no service: no matching step selects it"


def _same_identity(route: Route, unique: Sequence[Route]) -> Route:
    return next(r for r in unique if r.identity == route.identity)


def _tier_why(route: Route, picked: bool, step: str) -> str:
    if picked:
        return "chosen"
    if step == C1:
        return "an equal mirror route, not this conversation's turn"
    return "an equal route of the tier, not this conversation's turn"


def _empty_tier_step(
    step: str, members: tuple[Route, ...], message: Message, snapshot: RouteSnapshot
) -> Step:
    if not members:
        return Step(step, f"no {TIER_NAMES[step]} among the candidates: skipped")
    if step == C2:
        considered = tuple(Considered(r, False, _not_located_why(message, r, snapshot)) for r in members)
        return Step(step, f"LOCAL, but {message.service} cannot be located with it: skipped", considered)
    considered = tuple(
        Considered(r, False, f"the service name {message.service!r} does not begin with tcp://host:port (T4)")
        for r in members
    )
    return Step(step, "TRANSPORT, but no next hop can be read from the service name: skipped", considered)


def _not_located_why(message: Message, route: Route, snapshot: RouteSnapshot) -> str:
    """L2-L4: why a LOCAL route cannot deliver the message here."""
    broker = message.broker_instance or route.broker_instance
    instance = snapshot.instance
    if broker is not None:
        wanted = canonical_guid(broker)
        database = next((d for d in instance.databases if canonical_guid(d.broker_instance) == wanted), None)
        if database is None:
            return f"no database of {instance.name} has broker instance {broker} (L2)"
        if not database.broker_enabled:
            return f"database {database.name} (broker instance {broker}) has message delivery off (L4)"
        return f"database {database.name} (broker instance {broker}) does not host {message.service} (L2)"
    hosting = [d.name for d in instance.databases if message.service in d.services]
    if hosting:
        off = ", ".join(hosting)
        return f"{message.service} is hosted only by database(s) with message delivery off: {off} (L4)"
    return f"no database of {instance.name} hosts {message.service} (L3)"


def _located_step(message: Message, route: Route, database: str) -> Step:
    broker = message.broker_instance or route.broker_instance
    if broker is not None:
        how = f"the database with broker instance {broker} (L2)"
    elif not message.is_remote and database == message.origin:
        how = "the conversation's own database first (L3)"
    else:
        how = "the first database with message delivery on that hosts it (L3)"
    return Step("L1", f"delivered into the queue of {message.service} in {database}: {how}", ended=True)


def _forwarder_checks(message: Message, instance: Instance) -> list[Step]:
    """F3 and F5 as `forwarding.forwarder_discard_reason` checks them, in its order."""
    out: list[Step] = []
    if message.hops_remaining <= 0:
        out.append(Step("F3", "hops_remaining is 0: the hop budget is spent; discarded (LP1)", ended=True))
        return out
    out.append(Step("F3", f"hops_remaining is {message.hops_remaining}: it may be forwarded once more"))
    ttl = message.time_to_live_s
    if ttl is not None and ttl <= 0:
        out.append(Step("F3", "its lifetime has run out (time_to_live 0): discarded", ended=True))
        return out
    lived = "no lifetime given" if ttl is None else f"{ttl:g} s of lifetime left"
    out.append(Step("F3", f"{lived}: not expired"))
    limit = instance.forward_size_mb * BYTES_PER_MB
    if message.size_bytes > limit:
        out.append(
            Step(
                "F5",
                f"{message.size_bytes} bytes is more than MESSAGE_FORWARD_SIZE "
                f"({instance.forward_size_mb} MB): discarded",
                ended=True,
            )
        )
        return out
    out.append(
        Step("F5", f"{message.size_bytes} bytes fit in MESSAGE_FORWARD_SIZE ({instance.forward_size_mb} MB)")
    )
    return out


def _mirror_step(route: Route, address: str | None) -> Step:
    if address is None:
        return Step(
            "MI3",
            f"neither {route.address} nor {route.mirror_address} says it is the principal: sent to neither; "
            "retried until one claims the role",
            ended=True,
        )
    return Step(
        "MI2", f"of the partners {route.address} and {route.mirror_address}, {address} is the principal"
    )
