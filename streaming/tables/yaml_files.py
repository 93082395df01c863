"""Route tables and instance catalogs written as YAML.

A route table file is a list of routes (or a mapping with `routes` holding the list, and
optionally `instance`, the instance of the entries that name none):

    - {instance: i1, scope: AW, name: AutoCreatedLocal, address: LOCAL}
    - {instance: i1, scope: AW, name: OrderPartsRoute, service: OrderParts, address: "TCP://i2.example:4022"}
    - {instance: i2, scope: msdb, name: Temp, service: X, address: "TCP://h:4022", lifetime_s: 3600}

Each instance has its own tables: `instance` names the one a route is in (an entry's own, else
the file's, else `--instance`; one file may hold several instances' routes). The other route
fields are as in the scenario format: `scope` (may default to `--scope`), `name`, `service` and
`broker_instance` (absent or null = any), `address`, `mirror_address`, and `lifetime_s` (seconds
from the load) or `expires_at` (a UTC instant). An optional `op` (`create`, the default, `alter` or
`drop`) makes an entry an ALTER (only the fields named change, R7) or a DROP (scope and name only).

A catalog file is a list of instances (or one instance mapping):

    - name: i1
      address: TCP://i1.example:4022
      forwarding: false        # MESSAGE_FORWARDING, default false (F1)
      forward_size_mb: 10      # MESSAGE_FORWARD_SIZE, default 10 (F1)
      retry_s: 5               # re-route interval of delayed conversations, default 5 (D2)
      databases:
        - {name: AW, broker_instance: 0a0a0a0a-0000-0000-0000-000000000001, services: [InitiatorService]}

Errors name the file and the line of the entry or of the offending field (`LineLoader`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from streaming.errors import ConfigError
from streaming.rules.model import Database, Instance, Route
from streaming.tables.operations import ALTERABLE, RouteOperation
from streaming.tables.validate import (
    INT32_MAX,
    LoadedInstance,
    Source,
    check_bool,
    check_guid,
    check_instance_name,
    check_int,
    check_known_fields,
    check_scope,
    check_seconds,
    check_service,
    check_sysname,
    check_tcp_address,
    fail,
    route_field_checks,
    route_subject,
    validate_route,
)

ROUTE_FIELDS = (
    "op",
    "instance",
    "scope",
    "name",
    "service",
    "broker_instance",
    "address",
    "mirror_address",
    "lifetime_s",
    "expires_at",
)
INSTANCE_FIELDS = ("name", "address", "forwarding", "forward_size_mb", "retry_s", "databases")
DATABASE_FIELDS = ("name", "broker_instance", "broker_enabled", "services")


class LineDict(dict[Hashable, Any]):
    """A YAML mapping that remembers its own line and the line of each key (1-based)."""

    line: int | None = None
    key_lines: dict[Hashable, int]

    def line_of(self, key: str) -> int | None:
        """Return the line of `key`, or of the mapping when the key is absent."""
        return getattr(self, "key_lines", {}).get(key, self.line)


class LineLoader(yaml.SafeLoader):
    """PyYAML's safe loader, building `LineDict`s and refusing a key repeated in one mapping."""


def _construct_mapping(loader: LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                None, None, f"expected a field name, got {key!r}", key_node.start_mark
            )
        if key in out:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"field {key!r} given twice (first at line {out.key_lines[key]})",
                key_node.start_mark,
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


class LineList(list[Any]):
    """A YAML sequence that remembers the line of each item (1-based)."""

    item_lines: list[int]

    def line_of_item(self, index: int) -> int | None:
        """Return the line of item `index` (0-based)."""
        lines = getattr(self, "item_lines", [])
        return lines[index] if index < len(lines) else None


def _construct_sequence(loader: LineLoader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(item, deep=True) for item in node.value)
    out.item_lines = [item.start_mark.line + 1 for item in node.value]
    return out


LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def parse_yaml(text: str, file: str) -> Any:
    """Parse YAML text with `LineLoader`; a syntax error is a ConfigError naming file and line."""
    try:
        return yaml.load(text, Loader=LineLoader)  # LineLoader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        problem = exc.problem or str(exc)
        raise ConfigError(f"{Source(file, line)}: not valid YAML: {problem}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from exc


def read_text(path: Path) -> str:
    """Return a file's text; an unreadable file is a ConfigError."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc


def top_level_entries(document: Any, file: str, key: str, what: str) -> list[tuple[Any, Source]]:
    """Return the items of a top-level list (or of the mapping `{key: list}`) with their sources."""
    if isinstance(document, dict) and set(document) == {key}:
        document = document[key]
    if document is None:
        return []
    if isinstance(document, list):
        lines = document if isinstance(document, LineList) else LineList(document)
        return [(item, Source(file, lines.line_of_item(i))) for i, item in enumerate(document)]
    raise ConfigError(
        f"{file}: expected a list of {what} (or a mapping with only '{key}'), got {_kind(document)}"
    )


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def entry_mapping(entry: object, source: Source, subject: str) -> LineDict:
    """Return a file entry that must be a mapping; anything else is a ConfigError naming `source`."""
    if not isinstance(entry, LineDict):
        fail(source, subject, f"expected a mapping, got {_kind(entry)}")
    return entry


# --- route tables --------------------------------------------------------------------------------


def parse_route_yaml(
    text: str,
    file: str,
    *,
    now: datetime,
    default_scope: str | None = None,
) -> list[RouteOperation]:
    """Parse a route table YAML document into operations; `lifetime_s` counts from `now` (R6)."""
    document = parse_yaml(text, file)
    file_instance = None  # the instance of the entries that name none: `instance:` beside `routes:`
    if isinstance(document, LineDict) and set(document) == {"instance", "routes"}:
        where = Source(file, document.line_of("instance"))
        file_instance = check_instance_name(document["instance"], where, "file", "instance")
        document = document["routes"]
    entries = top_level_entries(document, file, "routes", "routes")
    return [
        route_entry_operation(
            entry, source, index, now=now, default_scope=default_scope, default_instance=file_instance
        )
        for index, (entry, source) in enumerate(entries, start=1)
    ]


def load_route_yaml(path: Path, *, now: datetime, default_scope: str | None = None) -> list[RouteOperation]:
    """Read and parse a route table YAML file (see `parse_route_yaml`)."""
    return parse_route_yaml(read_text(path), str(path), now=now, default_scope=default_scope)


def route_entry_operation(
    entry: object,
    base: Source,
    index: int,
    *,
    now: datetime,
    default_scope: str | None,
    default_instance: str | None = None,
    subject: str | None = None,
) -> RouteOperation:
    """Return the operation of one route entry (a mapping of `ROUTE_FIELDS`).

    Its instance is the entry's `instance`, else `default_instance`, else None (left to the caller).
    Errors name the route (`route scope/name`), or `subject` when given.
    """
    line = entry.line if isinstance(entry, LineDict) else None
    mapping = entry_mapping(entry, base.at(line), f"route #{index}")
    source = base.at(mapping.line)
    raw_scope = mapping.get("scope", default_scope)
    raw_name = mapping.get("name")
    subject = subject or route_subject(
        raw_scope if isinstance(raw_scope, str) else None, raw_name if isinstance(raw_name, str) else None
    )
    check_known_fields(mapping, ROUTE_FIELDS, source, subject)

    def at(field: str) -> Source:
        return source.at(mapping.line_of(field))

    op = mapping.get("op", "create")
    if op not in ("create", "alter", "drop"):
        fail(at("op"), subject, f"expected create, alter or drop, got {op!r}", "op")
    if raw_scope is None:
        fail(source, subject, "required (or give a default scope with --scope)", "scope")
    scope = check_scope(raw_scope, at("scope"), subject)
    if "name" not in mapping:
        fail(source, subject, "required", "name")
    name = check_sysname(raw_name, at("name"), subject, "name")
    instance = (
        check_instance_name(mapping["instance"], at("instance"), subject)
        if mapping.get("instance") is not None
        else default_instance
    )

    named = [f for f in ROUTE_FIELDS if f in mapping and f not in ("op", "instance", "scope", "name")]
    if op == "drop":
        if named:
            fail(at(named[0]), subject, "a drop names only instance, scope and name", named[0])
        return RouteOperation("drop", scope, name, source, instance=instance)
    if "lifetime_s" in mapping and "expires_at" in mapping:
        fail(at("expires_at"), subject, "give lifetime_s or expires_at, not both", "expires_at")

    parsers: dict[str, Callable[[object, Source], object]] = {
        **route_field_checks(subject),
        "expires_at": lambda v, s: parse_instant(v, s, subject, "expires_at"),
        "lifetime_s": lambda v, s: (
            now + timedelta(seconds=check_seconds(v, s, subject, "lifetime_s", positive=False))
        ),
    }
    values: dict[str, object] = {}
    for field in named:
        value = mapping[field]
        target = "expires_at" if field == "lifetime_s" else field
        if value is None:
            if op == "alter":
                fail(
                    at(field),
                    subject,
                    "an alter cannot set a field to null; drop and create the route (R7)",
                    field,
                )
            if field in ("address", "lifetime_s"):
                fail(at(field), subject, "expected a value, got null", field)
            values[target] = None
            continue
        values[target] = parsers[field](value, at(field))

    if op == "alter":
        if not values:
            fail(source, subject, f"an alter names at least one of {', '.join(ALTERABLE)} or lifetime_s")
        return RouteOperation("alter", scope, name, source, changes=tuple(values.items()), instance=instance)
    if "address" not in values:
        fail(source, subject, "required", "address")
    route = Route(
        scope=scope,
        name=name,
        address=str(values["address"]),
        service=_optional_str(values.get("service")),
        broker_instance=_optional_str(values.get("broker_instance")),
        mirror_address=_optional_str(values.get("mirror_address")),
        expires_at=_optional_instant(values.get("expires_at")),
    )
    validate_route(route, source, locate=lambda field: (at(field), field), subject=subject)
    return RouteOperation("create", scope, name, source, route=route, instance=instance)


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def _optional_instant(value: object) -> datetime | None:
    return value if isinstance(value, datetime) else None


def parse_instant(value: object, source: Source, subject: str, field: str) -> datetime:
    """Return a UTC instant from a YAML timestamp or an ISO-8601 string (naive = UTC)."""
    instant: datetime | None = None
    if isinstance(value, datetime):
        instant = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            instant = datetime.fromisoformat(text)
        except ValueError:
            instant = None
    if instant is None:
        fail(source, subject, f"expected a UTC instant like 2026-01-01T00:00:00Z, got {value!r}", field)
    if instant.tzinfo is None:
        return instant.replace(tzinfo=timezone.utc)
    return instant.astimezone(timezone.utc)


# --- instance catalogs ---------------------------------------------------------------------------


def parse_catalog_yaml(text: str, file: str) -> list[LoadedInstance]:
    """Parse an instance catalog YAML document (one instance mapping or a list of them)."""
    document = parse_yaml(text, file)
    if isinstance(document, LineDict) and "instances" not in document:
        document = [document]
    entries = top_level_entries(document, file, "instances", "instances")
    return [instance_entry(entry, source, index) for index, (entry, source) in enumerate(entries, start=1)]


def load_catalog_yaml(path: Path) -> list[LoadedInstance]:
    """Read and parse an instance catalog YAML file (see `parse_catalog_yaml`)."""
    return parse_catalog_yaml(read_text(path), str(path))


def instance_entry(entry: object, base: Source, index: int) -> LoadedInstance:
    """Return the instance of one catalog entry (a mapping of `INSTANCE_FIELDS`)."""
    line = entry.line if isinstance(entry, LineDict) else None
    mapping = entry_mapping(entry, base.at(line), f"instance #{index}")
    source = base.at(mapping.line)
    raw_name = mapping.get("name")
    subject = f"instance {raw_name if isinstance(raw_name, str) else f'#{index}'}"
    check_known_fields(mapping, INSTANCE_FIELDS, source, subject)

    def at(field: str) -> Source:
        return source.at(mapping.line_of(field))

    for required in ("name", "address", "databases"):
        if required not in mapping:
            fail(source, subject, "required", required)
    name = check_sysname(raw_name, at("name"), subject, "name")
    address = check_tcp_address(mapping["address"], at("address"), subject, "address")
    forwarding = check_bool(mapping.get("forwarding", False), at("forwarding"), subject, "forwarding")
    forward_size_mb = check_int(
        mapping.get("forward_size_mb", 10), at("forward_size_mb"), subject, "forward_size_mb", 0, INT32_MAX
    )
    retry_s = check_seconds(mapping.get("retry_s", 5.0), at("retry_s"), subject, "retry_s", positive=True)
    raw_databases = mapping["databases"]
    if not isinstance(raw_databases, list):
        fail(
            at("databases"), subject, f"expected a list of databases, got {_kind(raw_databases)}", "databases"
        )
    databases = []
    sources = []
    item_lines = raw_databases if isinstance(raw_databases, LineList) else LineList(raw_databases)
    for db_index, raw in enumerate(raw_databases, start=1):
        item_source = at("databases").at(item_lines.line_of_item(db_index - 1))
        database, db_source = database_entry(raw, item_source, subject, db_index)
        databases.append(database)
        sources.append(db_source)
    instance = Instance(
        name=name,
        address=address,
        databases=tuple(databases),
        forwarding=forwarding,
        forward_size_mb=forward_size_mb,
        retry_s=retry_s,
    )
    return LoadedInstance(instance, source, tuple(sources))


def database_entry(raw: object, parent: Source, instance_subject: str, index: int) -> tuple[Database, Source]:
    """Return one database of a catalog entry, with the source of its mapping."""
    line = raw.line if isinstance(raw, LineDict) else None
    mapping = entry_mapping(raw, parent.at(line), f"{instance_subject}, database #{index}")
    source = parent.at(mapping.line)
    raw_name = mapping.get("name")
    subject = f"{instance_subject}, database {raw_name if isinstance(raw_name, str) else f'#{index}'}"
    check_known_fields(mapping, DATABASE_FIELDS, source, subject)

    def at(field: str) -> Source:
        return source.at(mapping.line_of(field))

    for required in ("name", "broker_instance"):
        if required not in mapping:
            fail(source, subject, "required", required)
    name = check_sysname(raw_name, at("name"), subject, "name")
    broker_instance = check_guid(mapping["broker_instance"], at("broker_instance"), subject)
    broker_enabled = check_bool(
        mapping.get("broker_enabled", True), at("broker_enabled"), subject, "broker_enabled"
    )
    raw_services = mapping.get("services", [])
    if raw_services is None:
        raw_services = []
    if not isinstance(raw_services, list):
        fail(
            at("services"),
            subject,
            f"expected a list of service names, got {_kind(raw_services)}",
            "services",
        )
    services = tuple(check_service(s, at("services"), subject, "services") for s in raw_services)
    return Database(name, broker_instance, broker_enabled, services), source
