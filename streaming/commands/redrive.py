"""`router redrive`: send an instance's dropped messages or dead letters back into its input, once each."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    kafka_from,
    utc_now,
)
from streaming.instants import window_start
from streaming.text import format_table

if TYPE_CHECKING:
    from streaming.redrive import RedriveSummary

DESCRIPTION = """\
Send the instance's dropped messages (--from dropped) or dead letters (--from deadletter) back into
the input topic each was read from (its `source_topic` header: the outbound or the inbound topic),
key and value unchanged, headers kept, with `redrive_count` and `redriven_from` set.

Each record is sent back once: the command reads with a consumer group of its own,
{prefix}.{instance}.redrive, and commits its offsets in the same Kafka transaction as what it
writes. Killed midway and run again, it goes on where the last committed chunk ended.

The group consumes the topic once. Records that --reason, --service or --since leave out are read
past and committed, and a later run starts after them; --until and --max stop before the records
they do not take, for the next run. --from-beginning reads every record again (what was sent back
is then sent again: --max-redrives still bounds each message). A run whose filters match nothing
writes and commits nothing, and says what the records held.

--from delayed is refused: delayed messages are routed again by the router itself when they fall
due; a copy in the input would be routed twice.

  router redrive --instance i1 --from dropped --reason no_route --dry-run
  router redrive --instance i1 --from dropped --reason no_route --service Far --rate 500
"""


def register(subparsers: Any) -> None:
    """Add `redrive`."""
    parser = subparsers.add_parser(
        "redrive",
        help="send dropped messages or dead letters back into the instance's input, each once",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--instance", required=True, metavar="I", help="the instance whose records to send back"
    )
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        choices=("dropped", "deadletter", "delayed"),
        help="the topic to read: dropped (and discarded) messages, or dead letters",
    )
    parser.add_argument(
        "--reason", metavar="R", help="only dropped messages with this reason (no_route, ...)"
    )
    parser.add_argument("--service", metavar="S", help="only messages to this service")
    parser.add_argument(
        "--since", metavar="T", help="only records written since T: a span (30m, 2h) or an instant"
    )
    parser.add_argument(
        "--until",
        metavar="T",
        help="stop at the first record written at T or later (a span ago, or an instant)",
    )
    parser.add_argument("--max", type=int, metavar="N", help="send at most N records")
    parser.add_argument("--rate", type=float, metavar="N", help="send at most N records a second")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be sent, by reason and service; write nothing",
    )
    parser.add_argument(
        "--max-redrives",
        type=int,
        default=3,
        metavar="N",
        help="skip, with a warning, a message already sent back N times (default 3)",
    )
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="read from each partition's first record, not from where the group's last run ended",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    add_kafka_arguments(parser)
    add_prefix_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Redrive; progress and the summary on stderr, the dry run's counts (or --json) on stdout."""
    from streaming import topics
    from streaming.redrive import Redrive, RedriveRequest
    from streaming.tables.reader import read_instances

    def say(text: str) -> None:
        print(f"router redrive: {text}", file=sys.stderr, flush=True)

    now = utc_now()
    since = None if args.since is None else window_start(args.since, now, "--since")
    until = None if args.until is None else window_start(args.until, now, "--until")
    request = RedriveRequest(
        instance=args.instance,
        source=args.source,
        prefix=args.topic_prefix,
        reason=args.reason,
        service=args.service,
        since_ms=None if since is None else int(since.timestamp() * 1000),
        until_ms=None if until is None else int(until.timestamp() * 1000),
        most=args.max,
        rate=args.rate,
        dry_run=args.dry_run,
        max_redrives=args.max_redrives,
        from_beginning=args.from_beginning,
    )
    kafka = kafka_from(args)
    read_instances(kafka, topics.catalogs_topic(args.topic_prefix), [args.instance])  # an unknown one: error
    stop = _stop_on_signals(say)
    summary = Redrive(kafka, request, say, stop.is_set).run()
    if args.json:
        print(json.dumps(summary.as_json()), flush=True)
    elif args.dry_run:
        print(_dry_run_table(summary), flush=True)
    say(summary.line())
    return 0


def _dry_run_table(summary: RedriveSummary) -> str:
    rows = [["reason", name, str(n)] for name, n in summary.by_reason.most_common()]
    rows += [["service", name, str(n)] for name, n in summary.by_service.most_common()]
    rows += [["input", name, str(n)] for name, n in summary.by_target.most_common()]
    table = format_table(("by", "value", "records"), rows)
    return f"{table}\nexamples: {', '.join(summary.examples) or '-'}"


def _stop_on_signals(say: Callable[[str], None]) -> threading.Event:
    """An event that SIGINT or SIGTERM sets: the run commits the chunk it has read, and ends."""
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        say(f"{signal.Signals(signum).name}: stopping after the chunk in flight (again: at once)")

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop
