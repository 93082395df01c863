"""What a route load would change, computed without Kafka: the tables it leaves, and their diff.

`planned_tables(live, operations)` is the tables as the operations of some route files would leave
the live ones (keyed `instance/scope/name`, as the table reader returns them); `diff_tables(before,
after)` lists, route by route, what differs: a route created, one dropped, or one altered with each
field that changes, old -> new. `router routes load --dry-run` and `router routes diff` print that
diff; a load that would leave the tables as they are (the same file loaded twice) has none.

A create of a route that exists replaces it (`operations.plan_route_changes`), so it is an alter
here when a field differs and nothing when none does. `expires_at` counts: a `lifetime_s` or a
LIFETIME is counted from the load (R6), so loading it again moves the expiry; an expiry is compared
to the millisecond, as the routes topic keeps it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from streaming.instants import format_instant
from streaming.rules.model import Route
from streaming.tables.operations import (
    RouteChange,
    RouteOperation,
    apply_changes,
    plan_route_changes,
    split_route_key,
)
from streaming.tables.validate import Source, check_known_scope, fail, route_subject

DIFF_FIELDS = ("service", "broker_instance", "address", "mirror_address", "expires_at")
"""The fields of a route a diff compares (R1); scope and name are its key."""


@dataclass(frozen=True)
class FieldChange:
    """One field of an altered route: its value in the live table and after the load (None = NULL)."""

    field: str
    old: str | datetime | None
    new: str | datetime | None


@dataclass(frozen=True)
class RouteDiff:
    """One route that a load would create, drop or alter; `source` is the file line that does it."""

    action: Literal["create", "alter", "drop"]
    instance: str
    scope: str
    name: str
    fields: tuple[FieldChange, ...]
    """create: every field the new route sets; alter: those that change; drop: none."""
    source: Source | None = None

    @property
    def key(self) -> str:
        """The routes-topic key, `instance/scope/name`."""
        return f"{self.instance}/{self.scope}/{self.name}"

    def describe(self) -> str:
        """One line for people: `alter  i1/AW/R  address: TCP://a:1 -> TCP://b:1  (file.yaml:3)`."""
        if self.action == "alter":
            parts = [f"{c.field}: {show(c.old)} -> {show(c.new)}" for c in self.fields]
        else:
            parts = [f"{c.field}={show(c.new)}" for c in self.fields]
        where = f"  ({self.source})" if self.source is not None else ""
        return f"{self.action:<6} {self.key}  {', '.join(parts)}".rstrip() + where

    def to_json(self) -> dict[str, object]:
        """The diff as `router routes diff --json` prints it (instants as UTC ISO-8601, NULL as null)."""
        return {
            "action": self.action,
            "instance": self.instance,
            "scope": self.scope,
            "name": self.name,
            "fields": {c.field: {"old": _json(c.old), "new": _json(c.new)} for c in self.fields},
            "source": None if self.source is None else str(self.source),
        }


def show(value: str | datetime | None) -> str:
    """How a field's value reads in a diff line: NULL for none, instants in UTC."""
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return str(format_instant(value))
    return value


def _json(value: str | datetime | None) -> str | None:
    return format_instant(value) if isinstance(value, datetime) else value


def _stored(value: object) -> object:
    # The routes topic keeps an expiry to the millisecond: a finer one in a file is no change.
    if isinstance(value, datetime):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


def planned_tables(
    live: Mapping[str, Route],
    operations: Sequence[RouteOperation],
    databases: Mapping[str, Collection[str]] | None = None,
) -> dict[str, Route]:
    """Return the tables as `operations` would leave `live` (both keyed `instance/scope/name`).

    Raises ConfigError, naming the file and route, as a load would: an alter or drop of a route
    that does not exist, an alter that breaks a route rule, a route created twice, and, with
    `databases`, a route outside the catalogs (`check_in_catalogs`).
    """
    changes = plan_route_changes(live, operations)
    check_in_catalogs(changes, databases)
    return apply_changes(live, changes)


def check_in_catalogs(
    changes: Iterable[RouteChange], databases: Mapping[str, Collection[str]] | None
) -> None:
    """Refuse a created or altered route outside the catalogs (`databases`; None: no catalog loaded).

    Its instance must be one of the catalogs and its scope one of that instance's databases; a
    drop needs neither, so that the routes of a database that left the catalogs can go.
    """
    if databases is None:
        return
    for change in changes:
        if change.route is None:
            continue
        subject = route_subject(change.scope, change.name)
        if change.instance not in databases:
            fail(
                change.source,
                subject,
                f"expected an instance of the catalogs ({', '.join(sorted(databases))}), got "
                f"{change.instance!r}; load its catalog first (router catalogs load FILE)",
                "instance",
            )
        check_known_scope(change.route.scope, databases[change.instance], change.source, subject)


def diff_tables(
    before: Mapping[str, Route],
    after: Mapping[str, Route],
    sources: Mapping[str, Source] | None = None,
) -> list[RouteDiff]:
    """Return what differs between two tables, in key order; `sources` names the line behind a key."""
    diffs = []
    for key in sorted(before.keys() | after.keys()):
        instance, scope, name = split_route_key(key)
        old, new = before.get(key), after.get(key)
        source = None if sources is None else sources.get(key)
        if old is None and new is not None:
            fields = tuple(
                FieldChange(f, None, getattr(new, f)) for f in DIFF_FIELDS if getattr(new, f) is not None
            )
            diffs.append(RouteDiff("create", instance, scope, name, fields, source))
        elif new is None and old is not None:
            diffs.append(RouteDiff("drop", instance, scope, name, (), source))
        elif old is not None and new is not None:
            changed = tuple(
                FieldChange(f, getattr(old, f), getattr(new, f))
                for f in DIFF_FIELDS
                if _stored(getattr(old, f)) != _stored(getattr(new, f))
            )
            if changed:
                diffs.append(RouteDiff("alter", instance, scope, name, changed, source))
    return diffs


def diff_load(live: Mapping[str, Route], operations: Sequence[RouteOperation]) -> list[RouteDiff]:
    """What loading `operations` would change in `live`: `diff_tables(live, planned_tables(...))`."""
    sources = {operation.key: operation.source for operation in operations}
    return diff_tables(live, planned_tables(live, operations), sources)
