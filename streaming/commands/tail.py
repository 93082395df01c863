"""`router tail TOPIC`: print a topic's records, decoded, with all their Kafka headers.

The topic's name says how to decode it (see `streaming.topics`): `*.routes` holds routes (a null
value is a dropped route), `*.catalogs` instance catalogs, `*.deadletter` records that could not be
decoded (printed as hex, with the error header), and every other topic holds messages. A record
that does not decode is printed as hex with the decoding error: nothing is skipped.

Headers are printed as they are, so a routing decision's headers (outcome, route, match_step,
choice_step, reason, snapshot_version, ...) show with each message.

    router tail router.i1.outbound --from-beginning --max 10 --timeout 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Literal

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, Message, TopicPartition

from streaming.commands.common import add_kafka_arguments, format_instant, json_safe, kafka_from
from streaming.errors import KafkaUnavailable, MalformedRecord, RouterError
from streaming.kafka.admin import cluster_metadata
from streaming.kafka.avro import decode_catalog, decode_message, decode_route
from streaming.tables.reader import consumer

TopicKind = Literal["message", "route", "catalog", "raw"]
DECODERS: dict[TopicKind, Callable[[bytes], dict[str, Any]]] = {
    "message": decode_message,
    "route": decode_route,
    "catalog": decode_catalog,
}


def register(subparsers: Any) -> None:
    """Add `tail`."""
    parser = subparsers.add_parser(
        "tail",
        help="print a topic's records, decoded, with their headers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument(
        "--from-beginning", action="store_true", help="start at the oldest record (default: new)"
    )
    parser.add_argument("--max", type=int, metavar="N", help="stop after N records")
    parser.add_argument("--timeout", type=float, metavar="S", help="stop after S seconds with no record")
    parser.add_argument("--json", action="store_true", help="one JSON object per record")
    parser.add_argument(
        "--kind",
        choices=("auto", "message", "route", "catalog", "raw"),
        default="auto",
        help="how to decode values (default: from the topic name)",
    )
    add_kafka_arguments(parser)
    parser.set_defaults(func=run)


def topic_kind(topic: str) -> TopicKind:
    """Return how the records of `topic` decode, from its name (`streaming.topics`)."""
    if topic.endswith(".routes"):
        return "route"
    if topic.endswith(".catalogs"):
        return "catalog"
    if topic.endswith(".deadletter"):
        return "raw"
    return "message"


def run(args: argparse.Namespace) -> int:
    """Follow the topic until --max records or --timeout seconds of silence (or Ctrl-C)."""
    if args.max is not None and args.max < 1:
        raise RouterError(f"--max: expected 1 or more, got {args.max}")
    kafka = kafka_from(args)
    kind: TopicKind = topic_kind(args.topic) if args.kind == "auto" else args.kind
    metadata = cluster_metadata(kafka).topics.get(args.topic)
    if metadata is None:
        raise RouterError(f"expected topic {args.topic!r} at {kafka.bootstrap}, it does not exist")
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    if not args.from_beginning:
        print(
            f"router tail: waiting for new records on {args.topic} (--from-beginning prints those it holds)",
            file=sys.stderr,
            flush=True,
        )
    reader = consumer(kafka, **{"enable.partition.eof": False})
    seen = 0
    try:
        reader.assign([TopicPartition(args.topic, p, start) for p in sorted(metadata.partitions)])
        last_activity = time.monotonic()
        while args.max is None or seen < args.max:
            record = reader.poll(0.2)
            if record is None:
                if args.timeout is not None and time.monotonic() - last_activity >= args.timeout:
                    break
                continue
            error = record.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaUnavailable(f"reading {args.topic} at {kafka.bootstrap}: {error.str()}")
            last_activity = time.monotonic()
            seen += 1
            described = describe_record(record, kind)
            print(json.dumps(described) if args.json else format_record(described), flush=True)
    except KafkaException as exc:
        raise KafkaUnavailable(f"reading {args.topic} at {kafka.bootstrap}: {exc}") from exc
    finally:
        reader.close()
    return 0


def describe_record(record: Message, kind: TopicKind) -> dict[str, Any]:
    """Return a record as a JSON-ready mapping: where it is, its key, headers and decoded value."""
    _, timestamp_ms = record.timestamp()
    key = record.key()
    value = record.value()
    out: dict[str, Any] = {
        "topic": record.topic(),
        "partition": record.partition(),
        "offset": record.offset(),
        "timestamp": format_instant(datetime.fromtimestamp(timestamp_ms / 1000, timezone.utc))
        if timestamp_ms and timestamp_ms > 0
        else None,
        "key": json_safe(key),
        "headers": headers_of(record),
    }
    if value is None:
        out["value"] = None
        if kind == "route":
            out["tombstone"] = True
        return out
    data = value if isinstance(value, bytes) else str(value).encode()
    decoder = DECODERS.get(kind)
    if decoder is None:
        out["value_hex"] = data.hex()
        return out
    try:
        out["value"] = json_safe(decoder(data))
    except MalformedRecord as exc:
        out["value_hex"] = data.hex()
        out["error"] = str(exc)
    return out


def headers_of(record: Message) -> dict[str, Any]:
    """Return every header: text values (hex when not UTF-8); a repeated name keeps all its values."""
    out: dict[str, Any] = {}
    raw_headers = record.headers() or []
    pairs = list(raw_headers.items()) if isinstance(raw_headers, dict) else list(raw_headers)
    for name, raw in pairs:
        if raw is None:
            value: Any = None
        else:
            data = raw if isinstance(raw, bytes) else str(raw).encode()
            try:
                value = data.decode("utf-8")
            except UnicodeDecodeError:
                value = "0x" + data.hex()
        if name in out:
            previous = out[name]
            out[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            out[name] = value
    return out


def format_record(described: dict[str, Any]) -> str:
    """Return a described record as text: one line for where and what, then the value."""
    head = f"{described['topic']}[{described['partition']}]@{described['offset']}"
    if described.get("timestamp"):
        head += f"  {described['timestamp']}"
    head += f"  key={described['key']}"
    lines = [head]
    if described["headers"]:
        lines.append("  headers: " + "  ".join(f"{k}={v}" for k, v in described["headers"].items()))
    if "error" in described:
        lines.append(f"  undecodable: {described['error']}")
    if "value_hex" in described:
        lines.append(f"  value (hex): {described['value_hex']}")
    elif described.get("tombstone"):
        lines.append("  value: null (tombstone: the route was dropped)")
    else:
        lines.append(f"  value: {json.dumps(described['value'])}")
    return "\n".join(lines)
