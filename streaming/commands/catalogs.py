"""`router catalogs load FILE...` and `router catalogs list`: instance catalogs on the catalogs topic.

A catalog is one instance's databases (name, broker instance, whether delivery is on, services)
and its Service Broker endpoint settings (address, MESSAGE_FORWARDING, MESSAGE_FORWARD_SIZE, F1).
`list` reads the topic with the table reader: a record that is not a valid catalog is skipped with
a warning and counted, and `list --strict` makes it an error. `load` replaces each instance's
record without reading the topic first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    add_table_list_arguments,
    empty_table_hint,
    kafka_from,
    refuse_skipped,
    skipped_note,
)
from streaming.kafka.avro import catalog_to_record
from streaming.rules.model import Instance
from streaming.tables.loading import load_catalog_files
from streaming.tables.reader import read_catalog_table
from streaming.tables.topic_io import publish_catalogs
from streaming.text import format_table
from streaming.topics import catalogs_topic


def register(subparsers: Any) -> None:
    """Add `catalogs` with its `load` and `list` sub-commands."""
    parser = subparsers.add_parser("catalogs", help="load and list instance catalogs", description=__doc__)
    sub = parser.add_subparsers(dest="catalogs_command", metavar="ACTION", required=True)

    load = sub.add_parser("load", help="validate catalog files and publish them to the catalogs topic")
    load.add_argument("files", nargs="+", type=Path, metavar="FILE", help="instance catalog .yaml/.yml")
    load.add_argument(
        "--dry-run", action="store_true", help="validate the files and print them; publish nothing"
    )
    add_kafka_arguments(load)
    add_prefix_argument(load)
    load.set_defaults(func=run_load)

    listing = sub.add_parser("list", help="print the catalogs read back from the catalogs topic")
    add_table_list_arguments(listing, "instance")
    listing.set_defaults(func=run_list)


def run_load(args: argparse.Namespace) -> int:
    """Validate every file, then publish one record per instance."""
    instances = load_catalog_files(args.files)
    topic = catalogs_topic(args.topic_prefix)
    if not args.dry_run:
        publish_catalogs(kafka_from(args), instances, topic)
    for instance in instances:
        print(f"{instance.name}: {instance.address}, {len(instance.databases)} database(s)")
    verb = "checked" if args.dry_run else f"published to {topic}"
    print(f"{verb}: {len(instances)} instance catalog(s)")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Print each instance's endpoint settings and databases."""
    kafka = kafka_from(args)
    read = read_catalog_table(kafka, catalogs_topic(args.topic_prefix))
    if args.strict:
        refuse_skipped(read)
    instances = read.values()
    hint = (
        empty_table_hint(kafka, read.topic, args.topic_prefix) if not instances and not read.skipped else None
    )
    if args.json:
        for instance in instances:
            print(json.dumps(catalog_to_record(instance)))
        if read.skipped:
            print(skipped_note(read), file=sys.stderr)
        if hint:
            print(hint, file=sys.stderr)
        return 0
    for instance in instances:
        print(describe(instance))
        print()
    summary = f"{read.topic} version {read.version}: {len(instances)} instance(s)"
    print(summary + (f"; {skipped_note(read)}" if read.skipped else ""))
    if hint:
        print(hint, file=sys.stderr)
    return 0


def describe(instance: Instance) -> str:
    """Return an instance's catalog as text: its settings, then a table of its databases."""
    forwarding = "enabled" if instance.forwarding else "disabled"
    head = (
        f"instance {instance.name}  address {instance.address}  forwarding {forwarding}  "
        f"forward_size {instance.forward_size_mb} MB  retry {instance.retry_s:g} s"
    )
    rows = [
        (d.name, d.broker_instance, "yes" if d.broker_enabled else "no", ", ".join(d.services) or "-")
        for d in instance.databases
    ]
    table = format_table(("DATABASE", "BROKER INSTANCE", "ENABLED", "SERVICES"), rows)
    return head + "\n" + "\n".join("  " + line for line in table.splitlines())
