"""Reading a scenario file: YAML into model objects, every bad input a ConfigError naming its place."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from streaming.devtools.scenario.model import (
    AckEvent,
    AdvanceEvent,
    Event,
    MessageEvent,
    MirrorEvent,
    RouteEvent,
    RouteTable,
    Scenario,
    apply_route_operation,
)
from streaming.rules.model import (
    CURRENT_DATABASE,
    DEFAULT_HOPS,
    MAX_HOPS,
    REMOTE,
    Instance,
    Message,
    MirrorRole,
    normalize_address,
)
from streaming.tables.operations import RouteOperation, apply_changes, plan_route_changes
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
MAX_SIZE_BYTES = 2**31 - 1


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
