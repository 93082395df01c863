"""`router routes load|diff|export|list|migrate`: route tables on the routes topic.

Every instance has its own routing tables (the `sys.routes` of each of its databases, its own
`msdb.sys.routes`), all on one routes topic keyed `instance/scope/name`.

`load` reads YAML route tables and CREATE/ALTER/DROP ROUTE scripts, validates all of them against
each other and against the tables on the topic, and only then publishes (a drop is a tombstone). A
route's instance comes from its file (a YAML entry's or file's `instance:`, a script's
`-- instance: NAME` header) or from `--instance`. `list` reads the tables back (every instance's,
or `--instance`'s) and marks the routes that have expired (R6). `migrate` moves routes written
before each instance had its own tables (keys `scope/name`) into `--instance`'s tables.

`load --dry-run` prints what the load would change in the live tables (create, alter with each
field old -> new, drop) and writes nothing; `diff` prints the same and exits 1 when something would
change, 0 when nothing would (`--json`: one JSON object per change). `load --from-sys-routes
FILE.csv --instance I --database D` reads one database's `sys.routes` as SQL Server's tools export
it (`streaming.tables.sys_routes`). `export --instance I` prints an instance's tables as YAML, as
CREATE ROUTE statements or as a sys.routes CSV, so that loading the export gives the same tables;
its SQL's LIFETIME is each route's remaining lifetime at the export (`streaming.tables.export`).

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
    kafka_from,
    parse_instant_arg,
    refuse_skipped,
    skipped_note,
    utc_now,
)
from streaming.errors import ConfigError
from streaming.kafka.connection import Kafka
from streaming.rules.model import Route
from streaming.tables.export import FORMATS, render_routes
from streaming.tables.loading import load_route_files
from streaming.tables.operations import RouteOperation, check_operations, plan_route_changes, split_route_key
from streaming.tables.plan import RouteDiff, check_in_catalogs, diff_load
from streaming.tables.reader import databases_by_instance, read_catalog_table, read_routes
from streaming.tables.sys_routes import load_sys_routes_csv
from streaming.tables.topic_io import migrate_routes, plan_route_migration, publish_routes
from streaming.text import format_table
from streaming.topics import catalogs_topic, routes_topic


def register(subparsers: Any) -> None:
    """Add `routes` with its `load`, `diff`, `export`, `list` and `migrate` sub-commands."""
    parser = subparsers.add_parser(
        "routes", help="load, diff, export and list route tables", description=__doc__
    )
    sub = parser.add_subparsers(dest="routes_command", metavar="ACTION", required=True)

    load = sub.add_parser("load", help="validate route files and publish them to the routes topic")
    add_source_arguments(load)
    load.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the load would change in the live tables (needs the broker); write nothing",
    )
    add_kafka_arguments(load)
    add_prefix_argument(load)
    load.set_defaults(func=run_load)

    diff = sub.add_parser(
        "diff",
        help="print what loading the files would change; exit 1 if anything, 0 if nothing",
        description="Print what `router routes load` with the same arguments would change in the live "
        "tables, and write nothing. Exit 0 when nothing would change, 1 when something would, 2 when "
        "the files do not load.",
    )
    add_source_arguments(diff)
    diff.add_argument("--json", action="store_true", help="one JSON object per change on stdout")
    add_kafka_arguments(diff)
    add_prefix_argument(diff)
    diff.set_defaults(func=run_diff)

    export = sub.add_parser(
        "export",
        help="print an instance's route tables as YAML, CREATE ROUTE statements or a sys.routes CSV",
        description="Print the live tables of one instance so that loading the output gives the same "
        "tables. yaml keeps each expiry as a UTC instant; csv (one database: --scope) as sys.routes "
        "shows it; sql writes LIFETIME as the route's remaining lifetime at the export, in whole "
        "seconds rounded up (LIFETIME counts from the load, R6), and refuses a mirror route without "
        "SERVICE_NAME and BROKER_INSTANCE, which CREATE ROUTE cannot state (R5).",
    )
    export.add_argument("--instance", metavar="I", required=True, help="the instance whose tables to print")
    export.add_argument("--format", choices=FORMATS, default="yaml", help="default: yaml")
    export.add_argument("--scope", "--database", metavar="DB", help="only this database's routes")
    add_kafka_arguments(export)
    add_prefix_argument(export)
    export.set_defaults(func=run_export)

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


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The route sources of `load` and `diff`: files, or a sys.routes CSV, and where their routes go."""
    parser.add_argument(
        "files", nargs="*", type=Path, metavar="FILE", help="route table .yaml/.yml or T-SQL .sql"
    )
    parser.add_argument(
        "--from-sys-routes",
        type=Path,
        metavar="FILE.csv",
        help="one database's sys.routes as SQL Server's tools export it (header row; needs --instance, "
        "--database)",
    )
    parser.add_argument(
        "--instance",
        metavar="I",
        help="instance whose tables hold the routes the files put in none (no instance: field or header)",
    )
    parser.add_argument(
        "--scope",
        "--database",
        metavar="DB",
        help="database of routes that name none (no USE / no scope field), and of --from-sys-routes",
    )


def load_operations(args: argparse.Namespace) -> list[RouteOperation]:
    """Every operation of the files and the sys.routes CSV the arguments name, checked together."""
    if not args.files and args.from_sys_routes is None:
        raise ConfigError("expected route files or --from-sys-routes FILE.csv, got neither")
    now = utc_now()
    operations = (
        load_route_files(args.files, now=now, default_scope=args.scope, instance=args.instance)
        if args.files
        else []
    )
    csv_file = args.from_sys_routes
    if csv_file is not None:
        for flag, value in (("--instance", args.instance), ("--database", args.scope)):
            if value is None:
                raise ConfigError(
                    f"{csv_file}: expected {flag}: a sys.routes CSV names neither its instance nor its "
                    f"database; give --from-sys-routes {csv_file} --instance I --database D"
                )
        operations += load_sys_routes_csv(csv_file, now=now, instance=args.instance, database=args.scope)
    check_operations(operations)
    return operations


def planned_diff(kafka: Kafka, prefix: str, operations: list[RouteOperation]) -> tuple[str, list[RouteDiff]]:
    """What `operations` would change in the live tables (checked as a load checks them), and the version."""
    live = read_routes(kafka, routes_topic(prefix))
    check_in_catalogs(plan_route_changes(live.table, operations), known_databases(kafka, prefix))
    return live.version, diff_load(live.table, operations)


def run_load(args: argparse.Namespace) -> int:
    """Validate every file, then publish; print one line per published change (or, dry, per diff)."""
    operations = load_operations(args)
    topic = routes_topic(args.topic_prefix)
    kafka = kafka_from(args)
    if args.dry_run:
        version, diffs = planned_diff(kafka, args.topic_prefix, operations)
        for diff in diffs:
            print(f"would {diff.describe()}")
        print(
            f"dry run against {topic} version {version}: {diff_summary(diffs)} "
            f"from {len(operations)} route operation(s); wrote nothing"
        )
        return 0
    databases = known_databases(kafka, args.topic_prefix)
    changes = publish_routes(kafka, operations, topic, databases=databases)
    for change in changes:
        print(f"{change.action:<7} {change.key}  ({change.source})")
    print(f"published {len(changes)} route change(s) to {topic}")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    """Print what the load would change; exit 1 when something would, 0 when nothing would."""
    operations = load_operations(args)
    version, diffs = planned_diff(kafka_from(args), args.topic_prefix, operations)
    summary = f"{routes_topic(args.topic_prefix)} version {version}: {diff_summary(diffs)}"
    if args.json:
        for diff in diffs:
            print(json.dumps(diff.to_json()))
        print(summary, file=sys.stderr)
    else:
        for diff in diffs:
            print(diff.describe())
        print(summary)
    return 1 if diffs else 0


def diff_summary(diffs: list[RouteDiff]) -> str:
    """`1 create, 2 alter, 0 drop`, or `no change`."""
    if not diffs:
        return "no change"
    counts = {action: sum(1 for d in diffs if d.action == action) for action in ("create", "alter", "drop")}
    return ", ".join(f"{n} {action}" for action, n in counts.items())


def run_export(args: argparse.Namespace) -> int:
    """Print one instance's live tables (or one database's) in the chosen format."""
    kafka = kafka_from(args)
    topic = routes_topic(args.topic_prefix)
    read = read_routes(kafka, topic)
    by_instance: dict[str, list[Route]] = {}
    for key, route in read.table.items():
        by_instance.setdefault(split_route_key(key)[0], []).append(route)
    databases = known_databases(kafka, args.topic_prefix)
    known = set(by_instance) | set(databases or {})
    if args.instance not in known:
        raise ConfigError(
            f"--instance: expected an instance with routes on {topic} or in the catalogs "
            f"({', '.join(sorted(known)) or 'none'}), got {args.instance!r}; check the name and "
            "--topic-prefix, or load its routes first (router routes load FILE)"
        )
    routes = by_instance.get(args.instance, [])
    if args.scope is not None:
        scopes = {r.scope for r in routes} | set((databases or {}).get(args.instance, ()))
        if args.scope not in scopes:
            raise ConfigError(
                f"--scope: expected a database of instance {args.instance} "
                f"({', '.join(sorted(scopes)) or 'none'}), got {args.scope!r}"
            )
        routes = [r for r in routes if r.scope == args.scope]
    sys.stdout.write(render_routes(args.format, args.instance, routes, now=utc_now()))
    if read.skipped:
        print(skipped_note(read), file=sys.stderr)
    print(
        f"exported {len(routes)} route(s) of instance {args.instance} from {topic} version {read.version}",
        file=sys.stderr,
    )
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
