"""One instance's route tables written out as files that load back into the same tables.

`router routes export --instance I --format yaml|sql|csv` prints them:

* yaml: a route table file (`instance:` beside `routes:`), every field, the expiry as a UTC
  instant (`expires_at`): loads back to the same routes, to the millisecond the topic keeps.
* sql: `-- instance: I`, then per database `USE [db];` + `GO` and one CREATE ROUTE statement per
  route in the syntax SQL Server documents. LIFETIME is relative (R6): it is the route's remaining
  lifetime at `now`, in whole seconds rounded up, so the route loaded back expires at the same
  second or up to a second later, counted from its load; an expired route gets LIFETIME = 0 (it
  loads back expired). CREATE ROUTE cannot state a mirror route without SERVICE_NAME and
  BROKER_INSTANCE (R5a; Example 3's table holds one): such a table is refused, use yaml or csv.
* csv: one database's sys.routes (`streaming.tables.sys_routes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

import yaml

from streaming.instants import format_instant
from streaming.rules.model import Route
from streaming.tables.sys_routes import render_sys_routes_csv
from streaming.tables.validate import INT32_MAX, Source, fail, route_subject

FORMATS = ("yaml", "sql", "csv")


def render_routes(fmt: str, instance: str, routes: Sequence[Route], *, now: datetime) -> str:
    """Return `instance`'s `routes` (ordered by scope, then name) as a file of format `fmt`."""
    ordered = sorted(routes, key=lambda r: (r.scope, r.name))
    if fmt == "yaml":
        return render_yaml(instance, ordered)
    if fmt == "sql":
        return render_sql(instance, ordered, now=now)
    if fmt == "csv":
        scopes = sorted({r.scope for r in ordered})
        if len(scopes) > 1:
            fail(
                Source("--format csv"),
                f"instance {instance}",
                f"a sys.routes CSV holds one database's routes, got {len(scopes)} ({', '.join(scopes)}); "
                "give --scope DB",
            )
        return render_sys_routes_csv(ordered)
    raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")


def render_yaml(instance: str, routes: Sequence[Route]) -> str:
    """A route table YAML file of one instance's routes; NULL fields are left out."""
    entries = []
    for route in routes:
        entry: dict[str, object] = {"scope": route.scope, "name": route.name}
        for field in ("service", "broker_instance", "address", "mirror_address"):
            value = getattr(route, field)
            if value is not None:
                entry[field] = value
        if route.expires_at is not None:
            entry["expires_at"] = format_instant(route.expires_at)
        entries.append(entry)
    document = {"instance": instance, "routes": entries}
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False)


def render_sql(instance: str, routes: Sequence[Route], *, now: datetime) -> str:
    """CREATE ROUTE statements of one instance's routes, one `USE [db];` + `GO` per database."""
    lines = [f"-- instance: {instance}"]
    scope = None
    for route in routes:
        if route.scope != scope:
            scope = route.scope
            lines += ["", f"USE {bracket(scope)};", "GO"]
        lines.append(create_route(route, now=now))
    return "\n".join(lines) + "\n"


def create_route(route: Route, *, now: datetime) -> str:
    """`CREATE ROUTE [name] WITH SERVICE_NAME = '...', ..., ADDRESS = '...';` for one route."""
    subject = route_subject(route.scope, route.name)
    if route.mirror_address is not None and (route.service is None or route.broker_instance is None):
        fail(
            Source("--format sql"),
            subject,
            "CREATE ROUTE cannot state a mirror route without SERVICE_NAME and BROKER_INSTANCE (R5); "
            "export with --format yaml or --format csv",
        )
    clauses = []
    if route.service is not None:
        clauses.append(f"SERVICE_NAME = {quote(route.service)}")
    if route.broker_instance is not None:
        clauses.append(f"BROKER_INSTANCE = {quote(route.broker_instance)}")
    if route.expires_at is not None:
        clauses.append(f"LIFETIME = {remaining_lifetime(route, now=now)}")
    clauses.append(f"ADDRESS = {quote(route.address)}")
    if route.mirror_address is not None:
        clauses.append(f"MIRROR_ADDRESS = {quote(route.mirror_address)}")
    return f"CREATE ROUTE {bracket(route.name)} WITH {', '.join(clauses)};"


def remaining_lifetime(route: Route, *, now: datetime) -> int:
    """Whole seconds from `now` to the route's expiry, rounded up; 0 once it has expired (R6)."""
    if route.expires_at is None:
        raise ValueError(f"route {route.scope}/{route.name} never expires")
    seconds = max(0, math.ceil((route.expires_at - now).total_seconds()))
    if seconds > INT32_MAX:
        fail(
            Source("--format sql"),
            route_subject(route.scope, route.name),
            f"expected a remaining lifetime of at most {INT32_MAX} s for LIFETIME, got {seconds} s; "
            "export with --format yaml or --format csv",
            "expires_at",
        )
    return seconds


def bracket(name: str) -> str:
    """A T-SQL delimited identifier: `[name]`, a `]` in it doubled."""
    return "[" + name.replace("]", "]]") + "]"


def quote(text: str) -> str:
    """A T-SQL string literal: `'text'`, a quote in it doubled."""
    return "'" + text.replace("'", "''") + "'"
