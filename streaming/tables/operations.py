"""Route table changes as data: create, alter and drop operations, and the records they publish.

A route file (YAML or a CREATE ROUTE script) loads into an ordered list of `RouteOperation`s.
`plan_route_changes` applies them, in order, to the table currently on the routes topic and returns
the records to publish, so that everything is checked before anything is written:

* create: the route as given; an existing route of the same instance/scope/name is replaced, so loading
  the same file twice is harmless. Two creates of one route in one load, with no drop between,
  are a duplicate (R1: a name is unique per database).
* alter: only the fields the operation names change (R7); the route must exist.
* drop: a tombstone; the route must exist.

Every instance has its own routing tables (`sys.routes` of each database, `msdb.sys.routes` for what
arrives from outside): an operation names its instance, and the routes-topic key is
`instance/scope/name` in UTF-8. Neither an instance name nor a scope (a database name) may contain
`/`, so the first two `/` of a key always separate instance, scope and name, and a route name may
contain `/`. Topics written before routes were keyed by instance hold `scope/name` keys; the table
reader refuses those records with the command that rewrites them (`router routes migrate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from streaming.rules.model import Route
from streaming.tables.validate import Source, fail, route_subject, validate_route

OpKind = Literal["create", "alter", "drop"]
ALTERABLE = ("service", "broker_instance", "address", "mirror_address", "expires_at")
"""The Route fields an alter may name (R7)."""


def route_key(instance: str, scope: str, name: str) -> str:
    """Return the routes-topic key of an instance's route: `instance/scope/name`."""
    return f"{instance}/{scope}/{name}"


def legacy_route_key(scope: str, name: str) -> str:
    """The key a route had before each instance had its own tables: `scope/name` (`router routes migrate`)."""
    return f"{scope}/{name}"


def split_route_key(key: str) -> tuple[str, str, str]:
    """Return (instance, scope, name) of a routes-topic key: the first two `/` separate them."""
    instance, sep, rest = key.partition("/")
    scope, sep2, name = rest.partition("/")
    if not (sep and sep2 and instance and scope and name):
        raise ValueError(f"routes-topic key: expected 'instance/scope/name', got {key!r}")
    return instance, scope, name


@dataclass(frozen=True)
class RouteOperation:
    """One change to a routing table, from a route file (R1, R6, R7)."""

    op: OpKind
    scope: str
    name: str
    source: Source
    route: Route | None = None
    """create: the whole route."""
    changes: tuple[tuple[str, object], ...] = ()
    """alter: (field, new value) for each field the operation names, fields from `ALTERABLE`."""
    ddl: bool = False
    """True when it comes from CREATE/ALTER ROUTE: the DDL-only rule R5(a) applies."""
    instance: str | None = None
    """The instance whose table the route is in; None until the file or the command says."""

    @property
    def table_instance(self) -> str:
        """`instance`, once the file or the command said it (ValueError before)."""
        if self.instance is None:
            raise ValueError(f"route {self.scope}/{self.name} ({self.source}) names no instance")
        return self.instance

    @property
    def key(self) -> str:
        """The routes-topic key, `instance/scope/name`."""
        return route_key(self.table_instance, self.scope, self.name)


@dataclass(frozen=True)
class RouteChange:
    """One record to publish on the routes topic: a route, or a tombstone (`route` None)."""

    action: Literal["create", "replace", "alter", "drop"]
    instance: str
    scope: str
    name: str
    route: Route | None
    source: Source

    @property
    def key(self) -> str:
        """The routes-topic key, `instance/scope/name`."""
        return route_key(self.instance, self.scope, self.name)


def check_operations(operations: Iterable[RouteOperation]) -> None:
    """Refuse a route created twice in one load with no drop between (duplicate instance/scope/name)."""
    created: dict[str, Source] = {}
    for operation in operations:
        if operation.op == "create":
            first = created.get(operation.key)
            if first is not None:
                fail(
                    operation.source,
                    route_subject(operation.scope, operation.name),
                    f"duplicate route: already created at {first}",
                    "name",
                )
            created[operation.key] = operation.source
        elif operation.op == "drop":
            created.pop(operation.key, None)


def plan_route_changes(
    current: Mapping[str, Route], operations: Sequence[RouteOperation]
) -> list[RouteChange]:
    """Apply `operations` in order to `current` (keyed by `route_key`); return the records to publish.

    Raises ConfigError, naming the operation's source and route, for an alter or drop of a route
    that does not exist, and for an alter whose result breaks a route rule (`validate_route`).
    """
    check_operations(operations)
    table = dict(current)
    changes = []
    for operation in operations:
        key = operation.key
        instance = operation.table_instance
        subject = route_subject(operation.scope, operation.name)
        if operation.op == "create":
            if operation.route is None:
                fail(operation.source, subject, "a create needs the whole route")
            action: Literal["create", "replace"] = "replace" if key in table else "create"
            table[key] = operation.route
            changes.append(
                RouteChange(
                    action, instance, operation.scope, operation.name, operation.route, operation.source
                )
            )
        elif operation.op == "alter":
            existing = table.get(key)
            if existing is None:
                fail(operation.source, subject, "cannot alter a route that does not exist")
            altered = dataclasses.replace(existing, **dict(operation.changes))  # type: ignore[arg-type]
            validate_route(altered, operation.source, ddl=operation.ddl)
            table[key] = altered
            changes.append(
                RouteChange("alter", instance, operation.scope, operation.name, altered, operation.source)
            )
        else:
            if key not in table:
                fail(operation.source, subject, "cannot drop a route that does not exist")
            del table[key]
            changes.append(
                RouteChange("drop", instance, operation.scope, operation.name, None, operation.source)
            )
    return changes


def apply_changes(current: Mapping[str, Route], changes: Iterable[RouteChange]) -> dict[str, Route]:
    """Return the table `current` becomes once `changes` are published (tombstones remove)."""
    table = dict(current)
    for change in changes:
        if change.route is None:
            table.pop(change.key, None)
        else:
            table[change.key] = change.route
    return table
