"""Routing scenario files (docs/scenarios.md): load them, validate them, play their timeline.

`load_scenario` turns a YAML file into model objects and rejects bad input at load time with a
`ConfigError` that names the file, the entry and the field. `ScenarioRunner` plays the timeline with
any `Decider` (the reference engine, the Spark engine) and returns every decision in order.

The runner keeps the state that lives with the endpoints and the instance, not with a decision:

* the router's memory, with the rules of `streaming.rules.memory` (which the streaming job's state
  processor follows too): each conversation's delayed messages, held in first-delayed order (D1,
  D2), the route each unpinned conversation chose, which its later messages keep (K2), and the
  MissingRoute requests outstanding per (scope, service) (M4, B4);
* the broker instance an acknowledgement pinned a conversation to (A2, K1).

Each `RoutingBatch` carries that state to the decider. The timeline, as docs/scenarios.md describes it:

* consecutive `message` events form one batch at the current clock;
* `advance: N` moves the clock, then re-routes every conversation whose first waiting message is
  due, all its waiting messages in one batch, in first-delayed order; one delayed again is due
  `retry_s` after the new clock;
* `route`, `ack` and `mirror` events take effect at the current clock; an ack pins the
  initiator's later messages (and its waiting ones) to its broker instance;
* a batch that makes MissingRoute requests (M4, B3) is followed by one batch of request messages
  to the BCN service, ids `missing-route-N`, each sent by the database whose table asked;
* a route created or altered in that table that names the service ends the request (B6, B7).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from streaming.errors import RouterError
from streaming.rules.batch import Decider, RoutingBatch
from streaming.rules.memory import Conversation, Held, Requests
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    CURRENT_DATABASE,
    DEFAULT_HOPS,
    MISSING_ROUTE_MESSAGE_TYPE,
    REMOTE,
    Decision,
    Endpoint,
    Instance,
    Message,
    MirrorRole,
    Outcome,
    Route,
    normalize_address,
)
from streaming.tables.operations import RouteOperation, apply_changes, plan_route_changes, route_key
from streaming.tables.validate import (
    Source,
    check_bool,
    check_guid,
    check_int,
    check_known_fields,
    check_mirror_role,
    check_seconds,
    check_service,
    check_sysname,
    check_tcp_address,
    fail,
    validate_instances,
)
from streaming.tables.yaml_files import (
    LineDict,
    LineList,
    instance_entry,
    parse_instant,
    parse_yaml,
    read_text,
    route_entry_operation,
)

DEFAULT_CLOCK = datetime(2026, 1, 1, tzinfo=timezone.utc)
MISSING_ROUTE_ID_PREFIX = "missing-route-"
"""Ids of the MissingRoute request messages the runner makes: missing-route-1, missing-route-2, ..."""

EXPECTATION_FIELDS = (
    "id", "at", "outcome", "database", "address", "route", "match_step", "choice_step", "reason",
    "requests", "hops_remaining",
)  # fmt: skip
TOP_FIELDS = (
    "name", "description", "clock", "instance", "routes", "mirrors", "events", "expect",
    "expect_spread", "expect_same",
)  # fmt: skip
MESSAGE_FIELDS = (
    "id", "conversation_id", "service", "broker_instance", "origin", "from_target", "message_type",
    "hops_remaining", "time_to_live_s", "size_bytes",
)  # fmt: skip
EVENT_KINDS = ("message", "advance", "route", "ack", "mirror")
MAX_HOPS = 255
"""hops_remaining is a tinyint (F3)."""
MAX_SIZE_BYTES = 2**31 - 1


# --------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class MessageEvent:
    """A message sent by a service of the instance or arriving from outside."""

    message: Message


@dataclass(frozen=True)
class AdvanceEvent:
    """The clock moves on; delayed conversations whose retry is due are re-routed (D2)."""

    seconds: float


@dataclass(frozen=True)
class RouteEvent:
    """CREATE, ALTER or DROP ROUTE at the event's clock (R6, R7).

    A `lifetime_s` in the event was turned into an expiry instant from the event's clock at load
    time: the clock only moves on `advance`, so every event's clock is known when the file is read.
    """

    operation: RouteOperation


@dataclass(frozen=True)
class AckEvent:
    """The first acknowledgement of a conversation arrives, carrying the target's broker instance (A2)."""

    conversation_id: str
    broker_instance: str


@dataclass(frozen=True)
class MirrorEvent:
    """A mirror partner now answers with another role (MI2, MI3); `address` is normalized."""

    address: str
    role: MirrorRole


Event = MessageEvent | AdvanceEvent | RouteEvent | AckEvent | MirrorEvent
RouteTable = dict[str, Route]
"""Every routing table of the instance keyed by `route_key` (instance/scope/name), in creation order."""


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario file: the instance, its initial tables, the timeline and the expectations."""

    name: str
    description: str
    source: str
    clock: datetime
    instance: Instance
    routes: tuple[Route, ...]
    mirrors: Mapping[str, MirrorRole]
    events: tuple[Event, ...]
    expect: Mapping[str, Any]
    expect_spread: Mapping[str, Any] | None = None
    expect_same: Mapping[str, Any] | None = None

    def message_ids(self) -> frozenset[str]:
        """Every message id the timeline uses."""
        return frozenset(e.message.id for e in self.events if isinstance(e, MessageEvent))


def apply_route_operation(table: RouteTable, operation: RouteOperation) -> tuple[RouteTable, Route | None]:
    """Apply one create/alter/drop to `table`; return the new table and the route it leaves.

    The semantics are those of route files (`streaming.tables.operations`): alter changes only the
    fields it names (R7), an expired route stays in the table (R6). Raises ConfigError for an alter
    or drop of a route that does not exist.
    """
    (change,) = plan_route_changes(table, [operation])
    return apply_changes(table, [change]), change.route


# ------------------------------------------------------------------------------------------ loading
#
# The instance and the route entries have the shape of the catalog and route table files, and are
# read by the same code (`streaming.tables`): same checks, same error messages with file and line.


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file; a ConfigError names the file, line, entry and field."""
    return parse_scenario(read_text(Path(path)), source=str(path), default_name=Path(path).stem)


def parse_scenario(text: str, *, source: str, default_name: str = "scenario") -> Scenario:
    """Parse and validate the YAML text of a scenario; `source` names it in errors."""
    top = _mapping(parse_yaml(text, source), Source(source), "scenario")
    here = Source(source, top.line)
    check_known_fields(top, TOP_FIELDS, here, "scenario")

    def at(field: str) -> Source:
        return here.at(top.line_of(field))

    clock = parse_instant(top.get("clock", DEFAULT_CLOCK), at("clock"), "scenario", "clock")
    if "instance" not in top:
        fail(here, "scenario", "required", "instance")
    loaded = instance_entry(top["instance"], at("instance"), 1)
    (instance,) = validate_instances([loaded])
    databases = frozenset(db.name for db in instance.databases)
    initial = [
        _initial_route(entry, item_source, index, clock, instance.name, databases)
        for index, (entry, item_source) in enumerate(_items(top, "routes", here), start=1)
    ]
    table = apply_changes({}, plan_route_changes({}, initial))
    return Scenario(
        name=check_sysname(top["name"], at("name"), "scenario", "name") if "name" in top else default_name,
        description=str(top.get("description") or ""),
        source=source,
        clock=clock,
        instance=instance,
        routes=tuple(table.values()),
        mirrors=_mirrors(top.get("mirrors"), at("mirrors")),
        events=_Events(instance, databases, table, clock).read(_items(top, "events", here)),
        expect=_expect(top.get("expect"), at("expect")),
        expect_spread=_set_expectation(top, "expect_spread", ("ids", "field", "values"), at("expect_spread")),
        expect_same=_set_expectation(top, "expect_same", ("ids", "field"), at("expect_same")),
    )


def _initial_route(
    entry: object, source: Source, index: int, clock: datetime, instance: str, databases: frozenset[str]
) -> RouteOperation:
    """One row of the initial tables: a route entry without `op`; lifetime_s counts from `clock`."""
    if isinstance(entry, dict) and "op" in entry:
        fail(
            source,
            f"route #{index}",
            "the initial tables list routes; use a route event to alter or drop",
            "op",
        )
    operation = route_entry_operation(
        entry, source, index, now=clock, default_scope=None, default_instance=instance
    )
    _check_scope(operation, instance, databases)
    return operation


def _check_scope(operation: RouteOperation, instance: str, databases: frozenset[str]) -> None:
    """A route is in the scenario's instance; its scope is the database that owns the row, one of its own."""
    if operation.instance != instance:
        fail(
            operation.source,
            f"route {operation.scope}/{operation.name}",
            f"expected the scenario's instance {instance!r}, got {operation.instance!r}",
            "instance",
        )
    if operation.scope not in databases:
        fail(
            operation.source,
            f"route {operation.scope}/{operation.name}",
            f"expected a database of the instance ({', '.join(sorted(databases))}), got {operation.scope!r}",
            "scope",
        )


class _Events:
    """Reads the timeline, keeping the clock and a copy of the tables to check each event in place."""

    def __init__(self, instance: Instance, databases: frozenset[str], table: RouteTable, clock: datetime):
        self.instance = instance
        self.databases = databases
        self.table = table
        self.clock = clock
        self.message_sources: dict[str, Source] = {}

    def read(self, entries: list[tuple[object, Source]]) -> tuple[Event, ...]:
        return tuple(
            self.event(entry, source, index) for index, (entry, source) in enumerate(entries, start=1)
        )

    def event(self, entry: object, source: Source, index: int) -> Event:
        subject = f"event #{index}"
        if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in EVENT_KINDS:
            fail(source, subject, f"expected a mapping with one key, one of {', '.join(EVENT_KINDS)}")
        ((kind, body),) = entry.items()
        subject = f"{subject} ({kind})"
        if kind == "message":
            return MessageEvent(self.message(body, source))
        if kind == "advance":
            seconds = check_seconds(body, source, subject, "advance", positive=False)
            self.clock += timedelta(seconds=seconds)
            return AdvanceEvent(seconds)
        if kind == "route":
            return RouteEvent(self.route(body, source, index))
        fields = _mapping(body, source, subject)
        body_source = source.at(fields.line)
        if kind == "ack":
            _require(fields, ("conversation_id", "broker_instance"), body_source, subject)
            return AckEvent(
                _ident(fields["conversation_id"], body_source, subject, "conversation_id"),
                check_guid(fields["broker_instance"], body_source, subject),
            )
        _require(fields, ("address", "role"), body_source, subject)
        address = check_tcp_address(fields["address"], body_source, subject, "address")
        role = check_mirror_role(fields["role"], body_source, subject)
        return MirrorEvent(normalize_address(address), role)

    def route(self, body: object, source: Source, index: int) -> RouteOperation:
        """A create/alter/drop, checked against the tables as they are at this point of the timeline."""
        if isinstance(body, dict) and "op" not in body:
            fail(source, f"event #{index} (route)", "required: create, alter or drop", "op")
        operation = route_entry_operation(
            body, source, index, now=self.clock, default_scope=None, default_instance=self.instance.name
        )
        _check_scope(operation, self.instance.name, self.databases)
        if operation.op == "create" and operation.key in self.table:
            subject = f"route {operation.scope}/{operation.name}"
            fail(operation.source, subject, "exists already: names are unique per database (R1)", "name")
        self.table, _ = apply_route_operation(self.table, operation)
        return operation

    def message(self, body: object, source: Source) -> Message:
        fields = _mapping(body, source, "message")
        source = source.at(fields.line)
        raw_id = fields.get("id")
        subject = f"message {raw_id}"
        check_known_fields(fields, MESSAGE_FIELDS, source, subject)
        _require(fields, ("id", "conversation_id", "service", "origin"), source, subject)
        message_id = _ident(raw_id, source, subject, "id")
        if message_id in self.message_sources:
            fail(
                source, subject, f"id already used by the message at {self.message_sources[message_id]}", "id"
            )
        self.message_sources[message_id] = source
        origin = check_sysname(fields["origin"], source, subject, "origin")
        if origin != REMOTE and self.instance.database(origin) is None:
            fail(
                source, subject, f"expected 'remote' or a database of the instance, got {origin!r}", "origin"
            )
        broker = fields.get("broker_instance")
        if broker == CURRENT_DATABASE and origin == REMOTE:
            fail(source, subject, f"{CURRENT_DATABASE} needs a database as origin (K1)", "broker_instance")
        if broker is not None and broker != CURRENT_DATABASE:
            broker = check_guid(broker, source, subject)
        ttl = fields.get("time_to_live_s")
        return Message(
            id=message_id,
            conversation_id=_ident(fields["conversation_id"], source, subject, "conversation_id"),
            service=check_service(fields["service"], source, subject),
            origin=origin,
            broker_instance=broker,
            from_target=check_bool(fields.get("from_target", False), source, subject, "from_target"),
            message_type=check_service(
                fields.get("message_type", "DEFAULT"), source, subject, "message_type"
            ),
            hops_remaining=check_int(
                fields.get("hops_remaining", DEFAULT_HOPS), source, subject, "hops_remaining", 0, MAX_HOPS
            ),
            time_to_live_s=None
            if ttl is None
            else check_seconds(ttl, source, subject, "time_to_live_s", positive=False),
            size_bytes=check_int(
                fields.get("size_bytes", 1024), source, subject, "size_bytes", 0, MAX_SIZE_BYTES
            ),
        )


def _mirrors(data: object, source: Source) -> dict[str, MirrorRole]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        fail(source, "mirrors", "expected a mapping of partner address to role")
    return {
        normalize_address(check_tcp_address(address, source, "mirrors", "address")): check_mirror_role(
            role, source, "mirrors"
        )
        for address, role in data.items()
    }


def _expect(data: object, source: Source) -> dict[str, Any]:
    """`expect`: message id -> an expectation or a list of them, naming only decision fields."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        fail(source, "expect", "expected a mapping of message id to expectation")
    expect: dict[str, Any] = {}
    for mid, want in data.items():
        for one in want if isinstance(want, list) else [want]:
            entry = _mapping(one, source, f"expect {mid}")
            check_known_fields(entry, EXPECTATION_FIELDS, source.at(entry.line), f"expect {mid}")
        expect[str(mid)] = want
    return expect


def _set_expectation(
    top: Mapping[Hashable, Any], key: str, fields: tuple[str, ...], source: Source
) -> dict[str, Any] | None:
    """`expect_spread` / `expect_same`: a mapping of exactly `fields`, `ids` (and `values`) lists."""
    if top.get(key) is None:
        return None
    entry = _mapping(top[key], source, key)
    check_known_fields(entry, fields, source, key)
    _require(entry, fields, source, key)
    for list_field in ("ids", "values"):
        if list_field in fields and not isinstance(entry[list_field], list):
            fail(source, key, "expected a list", list_field)
    return {str(key): value for key, value in entry.items()}


def _items(top: LineDict, key: str, here: Source) -> list[tuple[object, Source]]:
    """The items of a top-level list with the source (file, line) of each."""
    data = top.get(key)
    if data is None:
        return []
    if not isinstance(data, LineList):
        fail(here.at(top.line_of(key)), "scenario", "expected a list", key)
    return [(item, here.at(data.line_of_item(i))) for i, item in enumerate(data)]


def _mapping(data: object, source: Source, subject: str) -> LineDict:
    """`parse_yaml` reads every mapping as a LineDict, which knows its lines."""
    if not isinstance(data, LineDict):
        fail(source, subject, f"expected a mapping, got {data!r}")
    return data


def _require(fields: Mapping[Hashable, Any], names: tuple[str, ...], source: Source, subject: str) -> None:
    for name in names:
        if fields.get(name) is None:
            fail(source, subject, "required", name)


def _ident(value: object, source: Source, subject: str, field: str) -> str:
    """An id: a non-empty string, or a whole number YAML read as one (`id: 1`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value:
        fail(source, subject, f"expected a non-empty id, got {value!r}", field)
    return value


# ------------------------------------------------------------------------------------------ running


class ScenarioRunner:
    """Play a scenario's timeline with any `Decider` and return its decisions in decision order."""

    def __init__(self, decider: Decider) -> None:
        self._decider = decider

    def run(self, scenario: Scenario) -> list[Decision]:
        """Return every decision of the scenario, each with `at` set to the clock it was taken at."""
        return _Timeline(scenario, self._decider).play()


class _Timeline:
    """The state of one scenario run (see the module docstring).

    The router's memory (K2 kept choices, D1-D2 held messages, B4 pending requests) is kept with
    `streaming.rules.memory`, the rules the streaming job's state processor follows too; the pins
    (A2) are the endpoints' state, applied to each message before it is decided.
    """

    def __init__(self, scenario: Scenario, decider: Decider) -> None:
        self.scenario = scenario
        self.decider = decider
        self.clock = scenario.clock
        self.table: RouteTable = {
            route_key(scenario.instance.name, r.scope, r.name): r for r in scenario.routes
        }
        self.mirrors: dict[str, MirrorRole] = dict(scenario.mirrors)
        self.pins: dict[str, str] = {}
        self.memory: dict[Endpoint, Conversation[Message]] = {}
        self.requests = Requests()
        self.first_delayed: dict[str, int] = {}
        self.used_ids = set(scenario.message_ids())
        self.request_count = 0
        self.rotation: dict[str, int] = {}
        """C5, M3: the rotation counters, carried from batch to batch as the job carries them."""
        self.decisions: list[Decision] = []

    @property
    def now_ms(self) -> int:
        return int(self.clock.timestamp() * 1000)

    @property
    def retry_ms(self) -> int:
        return int(self.scenario.instance.retry_s * 1000)

    def play(self) -> list[Decision]:
        """Consecutive message events form one batch at the current clock; other events apply in order."""
        arriving: list[Message] = []
        for event in self.scenario.events:
            if isinstance(event, MessageEvent):
                arriving.append(event.message)
                continue
            self.route_batch(arriving)
            arriving = []
            self.apply(event)
        self.route_batch(arriving)
        return self.decisions

    def apply(self, event: Event) -> None:
        """Apply one non-message event at the current clock."""
        if isinstance(event, AdvanceEvent):
            self.clock += timedelta(seconds=event.seconds)
            self.retry_due()
        elif isinstance(event, RouteEvent):
            self.table, route = apply_route_operation(self.table, event.operation)
            if route is not None and route.service is not None:
                self.end_request(route.scope, route.service)
        elif isinstance(event, AckEvent):
            self.pins[event.conversation_id] = event.broker_instance
        elif isinstance(event, MirrorEvent):
            self.mirrors[event.address] = event.role

    def end_request(self, scope: str, service: str) -> None:
        """B6, B7: the BCN answers a MissingRoute request by creating a route and ending its dialog.

        A scenario has no event for the BCN's END CONVERSATION, so a route created or altered in the
        request's scope that names the service ends the pending request. The waiting messages are
        re-routed at their next retry (D2, D3: the retry is not immediate); should they find no
        route then, M4 asks the BCN again (B7), as it does when the created route has expired (B8).
        A request that is never answered stays pending, and no other is made for the service (B5).
        """
        if (scope, service) in self.requests.pending:
            self.requests = self.requests.record((scope, service), False, self.now_ms)

    def retry_due(self) -> None:
        """D2: re-route, once and in first-delayed order, every waiting conversation now due.

        A conversation endpoint is delayed as a whole (D1): it is due when its first waiting message
        is, and then all its waiting messages are re-routed in their original order in one batch.
        """
        retried: list[Held[Message]] = []
        for endpoint, memory in list(self.memory.items()):
            self.memory[endpoint], released = memory.release_due(self.now_ms, self.retry_ms)
            retried.extend(released)
        self.route_batch([h.message for h in sorted(retried, key=lambda h: h.order)])

    def route_batch(self, messages: list[Message]) -> None:
        """Decide one batch, hold what is delayed, then route the MissingRoute requests it made."""
        if not messages:
            return
        batch = RoutingBatch(
            instance=self.scenario.instance,
            routes=tuple(self.table.values()),
            messages=tuple(self.with_endpoint_state(m) for m in messages),
            now=self.clock,
            mirrors=dict(self.mirrors),
            pending_requests=self.requests.pending,
            waiting_endpoints=frozenset(e for e, m in self.memory.items() if m.held),
            choices={
                (conversation, *entry): kept.identity
                for (conversation, _), memory in self.memory.items()
                for entry, kept in memory.kept.items()
            },
            rotation=dict(self.rotation),
        )
        result = self.decider.decide(batch)
        self.rotation.update(result.rotation)
        got = [d.id for d in result.decisions]
        if got != [m.id for m in messages]:
            raise RouterError(f"the decider answered {got} for the messages {[m.id for m in messages]}")
        for message, decision in zip(messages, result.decisions, strict=True):
            self.decisions.append(replace(decision, at=self.clock))
            if decision.outcome is Outcome.DELAYED:
                order = self.first_delayed.setdefault(message.id, len(self.first_delayed))
                memory = self.memory.get(message.endpoint, Conversation())
                entry = (message.origin, message.service)
                self.memory[message.endpoint] = memory.hold(message, message.id, order, self.now_ms, entry)
        for (conversation, origin, service), identity in result.choices.items():
            # K2: only an initiator's messages remember a choice (`Message.remembers_choice`).
            initiator: Endpoint = (conversation, False)
            memory = self.memory.get(initiator, Conversation())
            self.memory[initiator] = memory.remember((origin, service), identity, self.now_ms)
        for request in result.requests:
            self.requests = self.requests.record(request, True, self.now_ms)
        self.route_batch([self.missing_route_request(scope) for scope, _ in result.requests])

    def with_endpoint_state(self, message: Message) -> Message:
        """Apply the endpoint's conversation state to a locally originated message (K1, A2).

        A2: once acknowledged, the initiator routes every later message of the conversation with the
        broker instance the ack carried (a reply, `from_target`, is the other endpoint: not pinned).
        K3: the pin is per conversation; other conversations of its group are not pinned.
        K1: `CURRENT DATABASE` is the origin database's own broker instance.
        """
        if message.is_remote:
            return message
        broker = message.broker_instance
        if not message.from_target and message.conversation_id in self.pins:
            broker = self.pins[message.conversation_id]
        elif broker == CURRENT_DATABASE:
            origin = self.scenario.instance.database(message.origin)
            broker = origin.broker_instance if origin is not None else None
        return replace(message, broker_instance=broker)

    def missing_route_request(self, scope: str) -> Message:
        """B3: SSB begins a dialog to the BCN service in `scope` and sends one MissingRoute message.

        It is routed like any message sent by that database (its own decision line, id
        `missing-route-N`, never an id the scenario uses).
        """
        while True:
            self.request_count += 1
            request_id = f"{MISSING_ROUTE_ID_PREFIX}{self.request_count}"
            if request_id not in self.used_ids:
                break
        self.used_ids.add(request_id)
        return Message(
            id=request_id,
            conversation_id=request_id,
            service=BROKER_CONFIGURATION_SERVICE,
            origin=scope,
            message_type=MISSING_ROUTE_MESSAGE_TYPE,
        )
