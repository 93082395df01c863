"""`router mirrors set ADDRESS ROLE` and `router mirrors list`: the roles of mirror partners.

A database-mirroring route names two partners, its ADDRESS and its MIRROR_ADDRESS. Each partner
publishes its role on the compacted mirrors topic, keyed by its normalized address: `principal`,
`mirror` or `unreachable`. The router sends a mirror route's messages to the partner that says it
is the principal (MI2). When neither does, a message of this instance waits, delayed with the
reason `principal_unknown`, and one from outside is dropped (MI3). A role written while the router
runs counts from the next route snapshot on: new messages, and delayed ones when they fall due, go
to the new principal.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    add_table_list_arguments,
    kafka_from,
    refuse_skipped,
    skipped_note,
)
from streaming.rules.model import MirrorRole
from streaming.tables.reader import read_mirror_roles
from streaming.tables.topic_io import publish_mirror_roles
from streaming.tables.validate import Source, check_mirror_role, check_tcp_address
from streaming.text import format_table
from streaming.topics import mirrors_topic


def register(subparsers: Any) -> None:
    """Add `mirrors` with its `set` and `list` sub-commands."""
    parser = subparsers.add_parser("mirrors", help="set and list mirror partners' roles", description=__doc__)
    sub = parser.add_subparsers(dest="mirrors_command", metavar="ACTION", required=True)

    roles = ", ".join(r.value for r in MirrorRole)
    put = sub.add_parser("set", help="publish a mirror partner's role (MI2, MI3)")
    put.add_argument("address", metavar="ADDRESS", help="the partner's address, TCP://host:port")
    put.add_argument("role", metavar="ROLE", help=f"one of {roles}")
    add_kafka_arguments(put)
    add_prefix_argument(put)
    put.set_defaults(func=run_set)

    listing = sub.add_parser("list", help="print every partner's role read back from the mirrors topic")
    add_table_list_arguments(listing, "partner")
    listing.set_defaults(func=run_list)


def run_set(args: argparse.Namespace) -> int:
    """Validate the address and role, then publish the role."""
    role = check_mirror_role(args.role.strip().lower(), Source("ROLE"), f"mirror partner {args.address}")
    check_tcp_address(args.address, Source("ADDRESS"), "mirror partner", "address")  # before connecting
    topic = mirrors_topic(args.topic_prefix)
    publish_mirror_roles(kafka_from(args), {args.address: role}, topic)
    print(f"{args.address}: {role.value} (published to {topic})")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Print each partner's role."""
    read = read_mirror_roles(kafka_from(args), mirrors_topic(args.topic_prefix))
    if args.strict:
        refuse_skipped(read)
    rows = sorted(read.table.items())
    if args.json:
        for address, role in rows:
            print(json.dumps({"address": address, "role": role.value}))
        if read.skipped:
            print(skipped_note(read), file=sys.stderr)
        return 0
    if rows:
        print(format_table(("ADDRESS", "ROLE"), [(address, role.value) for address, role in rows]))
    summary = f"{read.topic} version {read.version}: {len(rows)} partner(s)"
    print(summary + (f"; {skipped_note(read)}" if read.skipped else ""))
    return 0
