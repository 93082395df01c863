"""`router routes load FILE...` and `router routes list`: route tables on the routes topic.

`load` reads YAML route tables and CREATE/ALTER/DROP ROUTE scripts, validates all of them against
each other and against the table on the topic, and only then publishes (a drop is a tombstone).
`list` reads the table back from the topic and marks the routes that have expired (R6).

Both read the topic with the table reader (`streaming.tables.reader`): a record that is not a valid
route is skipped with a warning naming its partition, offset and key, and its key keeps its last
good route; `list` counts the skipped records, and `list --strict` makes them an error. When the
catalogs topic holds instance catalogs, a route's scope must be a database of one of them: `list`
skips a route whose scope is not, and `load` refuses to create or alter one.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    format_instant,
    format_table,
    kafka_from,
    parse_instant_arg,
    refuse_skipped,
    skipped_note,
    utc_now,
)
from streaming.kafka.connection import Kafka
from streaming.rules.model import Route
from streaming.tables.loading import load_route_files
from streaming.tables.reader import catalog_databases, read_catalog_table, read_routes
from streaming.tables.topic_io import publish_routes
from streaming.topics import catalogs_topic, routes_topic


def register(subparsers: Any) -> None:
    """Add `routes` with its `load` and `list` sub-commands."""
    parser = subparsers.add_parser("routes", help="load and list route tables", description=__doc__)
    sub = parser.add_subparsers(dest="routes_command", metavar="ACTION", required=True)

    load = sub.add_parser("load", help="validate route files and publish them to the routes topic")
    load.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="route table .yaml/.yml or T-SQL .sql"
    )
    load.add_argument(
        "--scope", metavar="DB", help="database of routes that name none (no USE / no scope field)"
    )
    load.add_argument(
        "--dry-run", action="store_true", help="validate the files and print them; publish nothing"
    )
    add_kafka_arguments(load)
    add_prefix_argument(load)
    load.set_defaults(func=run_load)

    listing = sub.add_parser("list", help="print the route table read back from the routes topic")
    listing.add_argument("--at", metavar="TIME", help="judge expiry at this UTC instant (default: now)")
    listing.add_argument("--scope", metavar="DB", help="only the routes of this database")
    listing.add_argument("--json", action="store_true", help="one JSON object per route")
    listing.add_argument(
        "--strict", action="store_true", help="exit 2, listing them, if any record of the topic is skipped"
    )
    add_kafka_arguments(listing)
    add_prefix_argument(listing)
    listing.set_defaults(func=run_list)


def run_load(args: argparse.Namespace) -> int:
    """Validate every file, then publish; print one line per published change."""
    operations = load_route_files(args.files, now=utc_now(), default_scope=args.scope)
    topic = routes_topic(args.topic_prefix)
    if args.dry_run:
        for operation in operations:
            print(f"{operation.op:<7} {operation.key}  ({operation.source})")
        print(f"checked {len(operations)} route operation(s) in {len(args.files)} file(s); published nothing")
        return 0
    kafka = kafka_from(args)
    databases = known_databases(kafka, args.topic_prefix)
    changes = publish_routes(kafka, operations, topic, databases=databases)
    for change in changes:
        print(f"{change.action:<7} {change.key}  ({change.source})")
    print(f"published {len(changes)} route change(s) to {topic}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Print the table on the routes topic, expired routes marked."""
    at = parse_instant_arg(args.at, "--at") if args.at else utc_now()
    kafka = kafka_from(args)
    read = read_routes(
        kafka, routes_topic(args.topic_prefix), databases=known_databases(kafka, args.topic_prefix)
    )
    if args.strict:
        refuse_skipped(read)
    routes = read.values()
    if args.scope is not None:
        routes = tuple(r for r in routes if r.scope == args.scope)
    if args.json:
        for route in routes:
            print(json.dumps(route_json(route, at)))
        if read.skipped:
            print(skipped_note(read), file=sys.stderr)
        return 0
    rows = [route_row(route, at) for route in routes]
    headers = ("SCOPE", "NAME", "SERVICE", "BROKER INSTANCE", "ADDRESS", "MIRROR", "EXPIRES")
    if rows:
        print(format_table(headers, rows))
    expired = sum(1 for r in routes if not r.is_active(at))
    summary = f"{read.topic} version {read.version}: {len(routes)} route(s), {expired} expired"
    print(f"{summary} at {format_instant(at)}" + (f"; {skipped_note(read)}" if read.skipped else ""))
    return 0


def known_databases(kafka: Kafka, prefix: str) -> frozenset[str] | None:
    """Return the database names of the catalogs on the catalogs topic, or None when it holds none."""
    instances = read_catalog_table(kafka, catalogs_topic(prefix)).values()
    return catalog_databases(instances) if instances else None


def route_row(route: Route, at: datetime) -> tuple[str, ...]:
    """Return a route as table cells: `*` for any service or broker (R2, R3), expiry marked (R6)."""
    expires = "never" if route.expires_at is None else str(format_instant(route.expires_at))
    if not route.is_active(at):
        expires += " EXPIRED"
    return (
        route.scope,
        route.name,
        "*" if route.service is None else route.service,
        "*" if route.broker_instance is None else route.broker_instance,
        route.address,
        "-" if route.mirror_address is None else route.mirror_address,
        expires,
    )


def route_json(route: Route, at: datetime) -> dict[str, object]:
    """Return a route as `routes list --json` prints it."""
    return {
        "scope": route.scope,
        "name": route.name,
        "service": route.service,
        "broker_instance": route.broker_instance,
        "address": route.address,
        "mirror_address": route.mirror_address,
        "expires_at": format_instant(route.expires_at),
        "expired": not route.is_active(at),
    }
