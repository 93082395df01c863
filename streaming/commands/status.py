"""`router status`: how each instance's router stands, read from Kafka alone (no Spark, no checkpoint).

Per instance, on one screen (`streaming.observe.status` says where each figure comes from):

  router        its last micro-batch and how long ago, from the consumer group it writes
                ({prefix}.{instance}.router), or that it has not run; the routes it would load, by
                scope, the expired ones (R6), and when they last changed
  input lag     records of its outbound and inbound topics it has not read yet, and of its delayed
                topic (read apart)
  delayed       messages delayed (D2) whose due_at is after its last batch: not released yet
  last 1h       dead letters by error, dropped and discarded messages by reason (--since)
  no topic yet  destination topics its routes can send to that do not exist yet: the router
                creates them when it takes a route change, so it has not run since, or the broker
                refused them (their messages are then dropped with destination_unavailable)
  catalog       its address, retry_s and databases with their services

    router status                          every instance of the catalogs topic
    router status --instance i1 --since 30m
    router status --json                   one JSON document: {"instances": [...], "generated_at": ...}
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    empty_table_hint,
    kafka_from,
    utc_now,
)
from streaming.errors import ConfigError
from streaming.instants import parse_span
from streaming.observe.status import DEFAULT_SINCE, collect_status, render_text, status_document
from streaming.topics import catalogs_topic


def span_type(text: str) -> float:
    """The argparse type of `--since`: seconds of a span like `30m` (`parse_span`)."""
    try:
        return parse_span(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def register(subparsers: Any) -> None:
    """Add `status`."""
    parser = subparsers.add_parser(
        "status",
        help="how each instance's router stands: lag, delayed, dropped, routes (from Kafka)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--instance",
        action="append",
        metavar="I",
        help="an instance of the catalogs topic to report; repeat it for several "
        "(default: every instance the catalogs topic holds)",
    )
    parser.add_argument(
        "--since",
        type=span_type,
        default=parse_span(DEFAULT_SINCE),
        metavar="SPAN",
        help=f"how far back dead letters and dropped messages are counted: 90s, 30m, 2h, 1d "
        f"(default: {DEFAULT_SINCE})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document instead of the screen (stable field names)",
    )
    add_kafka_arguments(parser)
    add_prefix_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read every figure, then print the screen (or the JSON document); notes go to stderr."""
    kafka = kafka_from(args)
    now = utc_now()
    statuses, warnings = collect_status(kafka, args.topic_prefix, args.instance, now=now, since_s=args.since)
    if args.json:
        print(json.dumps(status_document(statuses, now, args.since, args.topic_prefix, warnings), indent=2))
    elif statuses or warnings:
        print(render_text(statuses, now, args.since, warnings))
    if not statuses:
        print(empty_table_hint(kafka, catalogs_topic(args.topic_prefix), args.topic_prefix), file=sys.stderr)
    return 0
