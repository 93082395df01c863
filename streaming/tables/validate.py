"""Validation of routes and instance catalogs when they are loaded, never when they are used.

Every check raises `ConfigError` with a message that names where the data came from (file and
line), what it describes (the route `scope/name`, or the instance and database) and the field:

    routes.yaml:12: route AW/OrderPartsRoute: field 'address': expected LOCAL, TRANSPORT or
    TCP://host:port[/] with port 1..65535, got 'tcp://host2'

Rules checked (docs/rules.md §1.1, §1.6, §1.11): addresses (R4), mirror addresses (R5), broker instance GUIDs
(R3, canonicalized), TRANSPORT routes are catch-all (T3), a BCN route has no broker instance (R9),
(scope, name) is unique (R1), catalog database names and active broker instances are unique (L4),
endpoint settings (F1).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from streaming.errors import ConfigError
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    LOCAL,
    TRANSPORT,
    Database,
    Instance,
    MirrorRole,
    Route,
    canonical_guid,
)

SYSNAME_MAX = 128
"""SQL Server's sysname: nvarchar(128)."""
ADDRESS_MAX = 256
"""R1: address, mirror_address and service name are nvarchar(256)."""
INT32_MAX = 2**31 - 1

_TCP_ADDRESS = re.compile(
    r"(?i:tcp)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?):(?P<port>[0-9]{1,5})/?"
)
_ADDRESS_EXPECTED = "expected LOCAL, TRANSPORT or TCP://host:port[/] with port 1..65535"


@dataclass(frozen=True)
class Source:
    """Where a piece of data came from: a file and, when known, a 1-based line."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def at(self, line: int | None) -> Source:
        """Return the same file at another line (unchanged when `line` is None)."""
        return self if line is None else Source(self.file, line)


RECORD = Source("")
"""The source of a record read back from a table topic: its reader names where it was read."""


def fail(source: Source, subject: str, message: str, field: str | None = None) -> NoReturn:
    """Raise ConfigError naming the source, the subject (a route or instance) and the field.

    A source with an empty file (`RECORD`) is left out: a record read from a topic is located by
    its reader, which names the topic, partition, offset and key itself.
    """
    where = ": ".join(part for part in (str(source), subject) if part)
    if field is not None:
        where += f": field {field!r}" if where else f"field {field!r}"
    raise ConfigError(f"{where}: {message}" if where else message)


def route_subject(scope: str | None, name: str | None) -> str:
    """Return how messages name a route: `route scope/name`."""
    return f"route {scope or '?'}/{name or '?'}"


def check_sysname(value: object, source: Source, subject: str, field: str) -> str:
    """Return `value` if it is a valid sysname (non-empty text of at most 128 characters)."""
    if not isinstance(value, str) or not value:
        fail(source, subject, f"expected a non-empty name, got {value!r}", field)
    if len(value) > SYSNAME_MAX:
        fail(source, subject, f"expected at most {SYSNAME_MAX} characters, got {len(value)}", field)
    return value


def check_scope(value: object, source: Source, subject: str, field: str = "scope") -> str:
    """Return a valid scope (a database name); `/` is refused because it separates scope/name keys."""
    scope = check_sysname(value, source, subject, field)
    if "/" in scope:
        fail(source, subject, f"expected a database name without '/', got {scope!r}", field)
    return scope


def check_instance_name(value: object, source: Source, subject: str, field: str = "instance") -> str:
    """Return a valid instance name; `/` is refused because it separates instance/scope/name keys."""
    name = check_sysname(value, source, subject, field)
    if "/" in name:
        fail(source, subject, f"expected an instance name without '/', got {name!r}", field)
    return name


def check_service(value: object, source: Source, subject: str, field: str = "service") -> str:
    """Return a service name unchanged: it is compared byte by byte (R2), so nothing is trimmed."""
    if not isinstance(value, str) or not value:
        fail(source, subject, f"expected a non-empty service name, got {value!r}", field)
    if len(value) > ADDRESS_MAX:
        fail(source, subject, f"expected at most {ADDRESS_MAX} characters, got {len(value)}", field)
    return value


def check_guid(value: object, source: Source, subject: str, field: str = "broker_instance") -> str:
    """Return a broker instance GUID in canonical lowercase 8-4-4-4-12 form (R3)."""
    if not isinstance(value, str):
        fail(
            source,
            subject,
            f"expected a GUID like 5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d, got {value!r}",
            field,
        )
    try:
        return canonical_guid(value)
    except ValueError:
        fail(
            source,
            subject,
            f"expected a GUID like 5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d, got {value!r}",
            field,
        )


def is_tcp_address(value: str) -> bool:
    """Return whether `value` is `TCP://host:port[/]` (scheme case-insensitive, port 1..65535)."""
    found = _TCP_ADDRESS.fullmatch(value)
    return found is not None and 1 <= int(found.group("port")) <= 65535


def check_address(value: object, source: Source, subject: str, field: str = "address") -> str:
    """Return a route address (R4): LOCAL or TRANSPORT in upper case, a TCP address as written.

    A TCP address keeps its spelling because route identity compares stored strings exactly (C0).
    """
    if isinstance(value, str):
        if value.upper() in (LOCAL, TRANSPORT):
            return value.upper()
        if is_tcp_address(value) and len(value) <= ADDRESS_MAX:
            return value
    fail(source, subject, f"{_ADDRESS_EXPECTED}, got {value!r}", field)


def check_tcp_address(value: object, source: Source, subject: str, field: str) -> str:
    """Return `value` if it is a TCP address (a mirror address, an instance's endpoint)."""
    if isinstance(value, str) and is_tcp_address(value) and len(value) <= ADDRESS_MAX:
        return value
    fail(source, subject, f"expected TCP://host:port[/] with port 1..65535, got {value!r}", field)


def check_known_scope(scope: str, databases: Collection[str], source: Source, subject: str) -> str:
    """Return `scope` if it is a database of the route's instance (`databases`, from its catalog)."""
    if scope not in databases:
        fail(
            source,
            subject,
            f"expected a database of the route's instance in the catalogs ({', '.join(sorted(databases))}), "
            f"got {scope!r}; load the catalog that lists it first (router catalogs load FILE)",
            "scope",
        )
    return scope


def check_mirror_role(value: object, source: Source, subject: str, field: str = "role") -> MirrorRole:
    """Return the mirror partner role `value` names: principal, mirror or unreachable (MI2, MI3)."""
    try:
        return MirrorRole(value)
    except ValueError:
        roles = ", ".join(r.value for r in MirrorRole)
        fail(source, subject, f"expected one of {roles}, got {value!r}", field)


RouteFieldCheck = Callable[[object, Source], object]


def route_field_checks(subject: str) -> dict[str, RouteFieldCheck]:
    """Return the check of each optional or free-form Route field (R2-R5), for the route `subject`.

    The YAML loader applies them to the fields a file names, and `validate_stored_route` to a route
    read back from the routes topic, so both accept exactly the same values.
    """
    return {
        "service": lambda value, source: check_service(value, source, subject),
        "broker_instance": lambda value, source: check_guid(value, source, subject),
        "address": lambda value, source: check_address(value, source, subject),
        "mirror_address": lambda value, source: check_tcp_address(value, source, subject, "mirror_address"),
    }


FieldLocator = Callable[[str], tuple[Source, str]]
"""Maps a Route field to where it was written and the name its file uses for it."""


def validate_route(
    route: Route,
    source: Source,
    *,
    ddl: bool = False,
    locate: FieldLocator | None = None,
    subject: str | None = None,
) -> Route:
    """Check the rules that involve several fields of a complete route; return it unchanged.

    R5(b): no mirror address on a LOCAL or TRANSPORT route. T3: a TRANSPORT route names neither a
    service nor a broker instance. R9: a BCN route names no broker instance. R5(a), only when
    `ddl` (the route comes from CREATE/ALTER ROUTE): a mirror route names both a service and a
    broker instance; route tables given as data may hold Example 3's mirror route without one.
    `locate` lets the error point at the line and the spelling of the field (default: `source`);
    `subject` names the route in errors (default: `route scope/name`).
    """
    subject = subject or route_subject(route.scope, route.name)

    def refuse(field: str, message: str) -> NoReturn:
        where, name = locate(field) if locate is not None else (source, field)
        fail(where, subject, message, name)

    if route.mirror_address is not None:
        if route.is_local or route.is_transport:
            refuse(
                "mirror_address",
                f"a {route.address} route may not have a mirror address (R5), got {route.mirror_address!r}",
            )
        if ddl and (route.service is None or route.broker_instance is None):
            missing = "SERVICE_NAME" if route.service is None else "BROKER_INSTANCE"
            refuse(
                "mirror_address",
                "a route with MIRROR_ADDRESS must also specify SERVICE_NAME and BROKER_INSTANCE (R5); "
                f"{missing} is missing",
            )
    if route.is_transport and (route.service is not None or route.broker_instance is not None):
        field = "service" if route.service is not None else "broker_instance"
        refuse(
            field,
            "a TRANSPORT route matches every service: it may name neither a service "
            f"nor a broker instance (T3), got {getattr(route, field)!r}",
        )
    if route.service == BROKER_CONFIGURATION_SERVICE and route.broker_instance is not None:
        refuse(
            "broker_instance",
            f"a route to {BROKER_CONFIGURATION_SERVICE} may not specify a broker instance (R9), "
            f"got {route.broker_instance!r}",
        )
    return route


def validate_stored_route(route: Route, source: Source) -> Route:
    """Check a route decoded from the routes topic as the loaders check one from a file; return it.

    Every field gets the check a route file's field gets (scope and name are sysnames, the scope
    has no `/`, R2-R5 through `route_field_checks`), then `validate_route` (R5, T3, R9). The route
    returned is the one a loader would have published: LOCAL and TRANSPORT in upper case, the
    broker instance GUID canonical (R3). Raises ConfigError naming the route and the field.
    """
    subject = route_subject(route.scope, route.name)
    checks = route_field_checks(subject)

    check_scope(route.scope, source, subject)
    check_sysname(route.name, source, subject, "name")
    rewritten: dict[str, str] = {}
    for field in ("address", "service", "broker_instance", "mirror_address"):
        value = getattr(route, field)
        if value is not None:
            checked = str(checks[field](value, source))
            if checked != value:
                rewritten[field] = checked
    # A new Route only when a check rewrote a field: a whole topic of routes is checked at a time.
    if rewritten:
        route = dataclasses.replace(route, **rewritten)  # type: ignore[arg-type]
    return validate_route(route, source)


def validate_stored_instance(instance: Instance, source: Source) -> Instance:
    """Check an instance catalog decoded from the catalogs topic as the catalog loader checks a file's.

    The endpoint settings (F1), each database's name, GUID (R3, returned canonical) and services,
    then `validate_instances` (database names unique, L4). Raises ConfigError naming the instance,
    the database and the field.
    """
    subject = f"instance {instance.name}"
    databases = []
    for database in instance.databases:
        where = f"{subject}, database {database.name}"
        databases.append(
            Database(
                name=check_sysname(database.name, source, where, "name"),
                broker_instance=check_guid(database.broker_instance, source, where),
                broker_enabled=check_bool(database.broker_enabled, source, where, "broker_enabled"),
                services=tuple(check_service(s, source, where, "services") for s in database.services),
            )
        )
    checked = Instance(
        name=check_instance_name(instance.name, source, subject, "name"),
        address=check_tcp_address(instance.address, source, subject, "address"),
        databases=tuple(databases),
        forwarding=check_bool(instance.forwarding, source, subject, "forwarding"),
        forward_size_mb=check_int(instance.forward_size_mb, source, subject, "forward_size_mb", 0, INT32_MAX),
        retry_s=check_seconds(instance.retry_s, source, subject, "retry_s", positive=True),
    )
    validate_instances([LoadedInstance(checked, source)])
    return checked


def check_bool(value: object, source: Source, subject: str, field: str) -> bool:
    """Return `value` if it is a boolean (true/false, not 0/1 or text)."""
    if not isinstance(value, bool):
        fail(source, subject, f"expected true or false, got {value!r}", field)
    return value


def check_int(value: object, source: Source, subject: str, field: str, minimum: int, maximum: int) -> int:
    """Return `value` if it is an integer within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        fail(source, subject, f"expected an integer from {minimum} to {maximum}, got {value!r}", field)
    return value


def check_seconds(value: object, source: Source, subject: str, field: str, *, positive: bool) -> float:
    """Return `value` as seconds if it is a finite number, greater than 0 when `positive` else >= 0."""
    bound = "greater than 0" if positive else "0 or more"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(source, subject, f"expected a number of seconds {bound}, got {value!r}", field)
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        fail(source, subject, f"expected a number of seconds {bound}, got {value!r}", field)
    return seconds


def check_known_fields(
    entry: Mapping[Hashable, object], allowed: Iterable[str], source: Source, subject: str
) -> None:
    """Refuse a field that is not in `allowed`, naming it and the fields that are."""
    known = tuple(allowed)
    for key in entry:
        if key not in known:
            fail(source, subject, f"unknown field; expected one of {', '.join(known)}", str(key))


@dataclass(frozen=True)
class LoadedInstance:
    """An instance catalog with where it came from: its entry and each of its databases."""

    instance: Instance
    source: Source
    database_sources: tuple[Source, ...] = ()

    def database_source(self, index: int) -> Source:
        """Return the source of the database at `index`, or the instance's when unknown."""
        return self.database_sources[index] if index < len(self.database_sources) else self.source


def validate_instances(loaded: Iterable[LoadedInstance]) -> tuple[Instance, ...]:
    """Check catalogs together; return the instances in order.

    Instance names are unique; inside an instance, database names are unique and no broker instance
    is shared by two broker-enabled databases (L4: attaching a duplicate deactivates the newcomer,
    so a disabled database may repeat an active one's GUID).
    """
    seen_instances: dict[str, Source] = {}
    out = []
    for entry in loaded:
        instance = entry.instance
        subject = f"instance {instance.name}"
        if instance.name in seen_instances:
            fail(
                entry.source,
                subject,
                "duplicate instance name" + _first_at(seen_instances[instance.name]),
                "name",
            )
        seen_instances[instance.name] = entry.source
        names: dict[str, Source] = {}
        active_guids: dict[str, str] = {}
        for index, database in enumerate(instance.databases):
            source = entry.database_source(index)
            where = f"{subject}, database {database.name}"
            if database.name in names:
                fail(source, where, "duplicate database name" + _first_at(names[database.name]), "name")
            names[database.name] = source
            if database.broker_enabled:
                other = active_guids.get(database.broker_instance)
                if other is not None:
                    fail(
                        source,
                        where,
                        f"broker instance {database.broker_instance} is already used by broker-enabled "
                        f"database {other} (L4)",
                        "broker_instance",
                    )
                active_guids[database.broker_instance] = database.name
        out.append(instance)
    return tuple(out)


def _first_at(source: Source) -> str:
    # A record read from a topic has no file to point at (`RECORD`): its reader locates it.
    return f", first defined at {source}" if str(source) else ""
