"""`router routes load FILE...`, `routes list`, `routes migrate`: route tables on the routes topic.

Every instance has its own routing tables (the `sys.routes` of each of its databases, its own
`msdb.sys.routes`), all on one routes topic keyed `instance/scope/name`.

`load` reads YAML route tables and CREATE/ALTER/DROP ROUTE scripts, validates all of them against
each other and against the tables on the topic, and only then publishes (a drop is a tombstone). A
route's instance comes from its file (a YAML entry's or file's `instance:`, a script's
`-- instance: NAME` header) or from `--instance`. `list` reads the tables back (every instance's,
or `--instance`'s) and marks the routes that have expired (R6). `migrate` moves routes written
before each instance had its own tables (keys `scope/name`) into `--instance`'s tables.

`load` and `list` read the topic with the table reader (`streaming.tables.reader`): a record that is
not a valid route is skipped with a warning naming its partition, offset and key, and its key keeps
its last good route; `list` counts the skipped records, and `list --strict` makes them an error.
When the catalogs topic holds instance catalogs, a route's instance must be one of them and its
scope one of that instance's databases: `list` skips a route that is not, and `load` refuses to
create or alter one.
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
    add_table_list_arguments,
    empty_table_hint,
    format_instant,
    format_table,
    kafka_from,
    parse_instant_arg,
    refuse_skipped,
    skipped_note,
    utc_now,
)
from streaming.errors import ConfigError
from streaming.kafka.connection import Kafka
from streaming.rules.model import Route
from streaming.tables.loading import load_route_files
from streaming.tables.operations import split_route_key
from streaming.tables.reader import databases_by_instance, read_catalog_table, read_routes
from streaming.tables.topic_io import migrate_routes, plan_route_migration, publish_routes
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
        "--instance",
        metavar="I",
        help="instance whose tables hold the routes the files put in none (no instance: field or header)",
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
    listing.add_argument("--instance", metavar="I", help="only the tables of this instance")
    listing.add_argument("--scope", metavar="DB", help="only the routes of this database")
    add_table_list_arguments(listing, "route")
    listing.set_defaults(func=run_list)

    migrate = sub.add_parser(
        "migrate",
        help="move routes keyed scope/name (from before each instance had its own tables) into an instance's",
    )
    migrate.add_argument("--instance", metavar="I", required=True, help="the instance whose tables they are")
    migrate.add_argument("--dry-run", action="store_true", help="print what would move; write nothing")
    add_kafka_arguments(migrate)
    add_prefix_argument(migrate)
    migrate.set_defaults(func=run_migrate)


def run_load(args: argparse.Namespace) -> int:
    """Validate every file, then publish; print one line per published change."""
    operations = load_route_files(args.files, now=utc_now(), default_scope=args.scope, instance=args.instance)
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
        kafka,
        routes_topic(args.topic_prefix),
        instance=args.instance,
        databases=known_databases(kafka, args.topic_prefix),
    )
    if args.strict:
        refuse_skipped(read)
    in_order = [(split_route_key(key)[0], read.table[key]) for key in sorted(read.table)]
    listed = [(i, r) for i, r in in_order if args.scope is None or r.scope == args.scope]
    routes = tuple(r for _, r in listed)
    if args.json:
        for instance, route in listed:
            print(json.dumps(route_json(instance, route, at)))
        if read.skipped:
            print(skipped_note(read), file=sys.stderr)
        if not read.table and not read.skipped:
            print(empty_table_hint(kafka, read.topic, args.topic_prefix), file=sys.stderr)
        return 0
    rows = [route_row(instance, route, at) for instance, route in listed]
    headers = ("INSTANCE", "SCOPE", "NAME", "SERVICE", "BROKER INSTANCE", "ADDRESS", "MIRROR", "EXPIRES")
    if rows:
        print(format_table(headers, rows))
    expired = sum(1 for r in routes if not r.is_active(at))
    summary = f"{read.topic} version {read.version}: {len(routes)} route(s), {expired} expired"
    print(f"{summary} at {format_instant(at)}" + (f"; {skipped_note(read)}" if read.skipped else ""))
    if not read.table and not read.skipped:
        print(empty_table_hint(kafka, read.topic, args.topic_prefix), file=sys.stderr)
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    """Move every route keyed `scope/name` into `--instance`'s tables; print one line per route."""
    kafka = kafka_from(args)
    topic = routes_topic(args.topic_prefix)
    databases = known_databases(kafka, args.topic_prefix)
    if databases is not None and args.instance not in databases:
        raise ConfigError(
            f"--instance: expected an instance of the catalogs ({', '.join(sorted(databases))}), "
            f"got {args.instance!r}"
        )
    moves = plan_route_migration(kafka, topic, args.instance)
    for move in moves:
        print(f"{'would move' if args.dry_run else 'move'} {move.old_key} -> {move.new_key}")
    if args.dry_run:
        print(f"{len(moves)} route(s) of {topic} keyed scope/name; wrote nothing")
        return 0
    moved = migrate_routes(kafka, topic, moves)
    print(f"moved {moved} route(s) of {topic} into instance {args.instance}'s tables")
    return 0


def known_databases(kafka: Kafka, prefix: str) -> dict[str, frozenset[str]] | None:
    """Each instance's database names from the catalogs topic, or None when it holds no catalog."""
    instances = read_catalog_table(kafka, catalogs_topic(prefix)).values()
    return databases_by_instance(instances) if instances else None


def route_row(instance: str, route: Route, at: datetime) -> tuple[str, ...]:
    """Return a route as table cells: `*` for any service or broker (R2, R3), expiry marked (R6)."""
    expires = "never" if route.expires_at is None else str(format_instant(route.expires_at))
    if not route.is_active(at):
        expires += " EXPIRED"
    return (
        instance,
        route.scope,
        route.name,
        "*" if route.service is None else route.service,
        "*" if route.broker_instance is None else route.broker_instance,
        route.address,
        "-" if route.mirror_address is None else route.mirror_address,
        expires,
    )


def route_json(instance: str, route: Route, at: datetime) -> dict[str, object]:
    """Return a route as `routes list --json` prints it."""
    return {
        "instance": instance,
        "scope": route.scope,
        "name": route.name,
        "service": route.service,
        "broker_instance": route.broker_instance,
        "address": route.address,
        "mirror_address": route.mirror_address,
        "expires_at": format_instant(route.expires_at),
        "expired": not route.is_active(at),
    }
