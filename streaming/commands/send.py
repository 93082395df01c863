"""`router send`: put conversation messages on an instance's outbound (or inbound) topic.

    router send --instance i1 --from-database AW --to-service OrderParts --count 3
    router send --instance i2 --inbound --to-service OrderParts        # as if from another instance
    router send --instance i1 --from-database AW --file messages.yaml

A message on the outbound topic was sent by a service of the instance and carries its sending
database (`origin_database`, S1/S2); one on the inbound topic arrived from another instance and
carries none (origin remote, S3). The Kafka key is the conversation id, so a conversation stays in
one partition, in order.

`--file` holds a list of messages (YAML or JSON) whose fields are the Avro message fields
(`schemas/message.avsc`; `body` as text); a field an entry leaves out takes the command line's
value. Messages without a conversation id share one new conversation, numbered from
`--sequence-start` in file order. `--to-broker-instance 'CURRENT DATABASE'` is the sending
database's own broker instance, read from the catalogs topic (K1).
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    json_safe,
    kafka_from,
    utc_now,
)
from streaming.errors import ConfigError, MalformedRecord
from streaming.kafka.avro import Record, encode_message, new_message_record
from streaming.kafka.connection import Kafka
from streaming.rules.model import CURRENT_DATABASE, DEFAULT_HOPS
from streaming.tables.topic_io import read_catalogs, send_records
from streaming.tables.validate import Source, check_guid, fail
from streaming.tables.yaml_files import LineDict, LineList, parse_yaml, read_text
from streaming.topics import catalogs_topic, inbound_topic, outbound_topic

DEFAULT_FROM_SERVICE = "InitiatorService"
DEFAULT_BODY = "message {n}"
FILE_FIELDS = (
    "message_id",
    "conversation_id",
    "sequence_number",
    "from_service",
    "from_broker_instance",
    "to_service",
    "to_broker_instance",
    "origin_database",
    "is_initiator",
    "message_type",
    "body",
    "hops_remaining",
    "time_to_live_ms",
    "attempt",
)


def register(subparsers: Any) -> None:
    """Add `send`."""
    parser = subparsers.add_parser(
        "send",
        help="produce messages to an instance's outbound or inbound topic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--instance", required=True, metavar="I", help="the instance whose topic receives them"
    )
    parser.add_argument("--from-database", metavar="DB", help="the sending database (required on outbound)")
    parser.add_argument(
        "--inbound", action="store_true", help="the instance's inbound topic: arrived from outside"
    )
    parser.add_argument("--to-service", metavar="S", help="target service name, byte-exact (R2)")
    parser.add_argument(
        "--to-broker-instance", metavar="G", help="target broker instance GUID or 'CURRENT DATABASE'"
    )
    parser.add_argument(
        "--from-service", metavar="S", default=DEFAULT_FROM_SERVICE, help="the sending service"
    )
    parser.add_argument("--from-broker-instance", metavar="G", help="the sending database's broker instance")
    parser.add_argument("--conversation", metavar="C", help="conversation id (default: a new one)")
    parser.add_argument("--count", type=int, default=1, metavar="N", help="how many messages (default 1)")
    parser.add_argument("--sequence-start", type=int, default=0, metavar="N", help="first sequence number")
    parser.add_argument("--body", default=DEFAULT_BODY, metavar="TEXT", help="body; {n} = sequence number")
    parser.add_argument("--message-type", default="DEFAULT", metavar="T")
    parser.add_argument("--reply", action="store_true", help="sent by the target side (is_initiator false)")
    parser.add_argument("--hops", type=int, default=DEFAULT_HOPS, metavar="N", help="hops_remaining (F3)")
    parser.add_argument("--ttl-ms", type=int, metavar="MS", help="time to live; sets expires_at (F3)")
    parser.add_argument("--file", type=Path, metavar="F", help="a .yaml/.yml/.json list of messages")
    parser.add_argument("--json", action="store_true", help="print each message sent as JSON")
    add_kafka_arguments(parser)
    add_prefix_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build every message, check them all, then produce them; print one line per message."""
    if args.inbound and args.from_database:
        raise ConfigError(
            "--from-database: a message on the inbound topic comes from another instance, not a database"
        )
    if args.file is None and not args.to_service:
        raise ConfigError("--to-service: required unless --file gives the messages")
    if args.count < 1:
        raise ConfigError(f"--count: expected 1 or more, got {args.count}")
    now = utc_now()
    defaults = defaults_from_args(args)
    if args.file is not None:
        records = records_from_file(args.file, defaults, now)
    else:
        records = [
            message_record(
                {**defaults, "body": args.body}, args.sequence_start + i, now, Source("command line")
            )
            for i in range(args.count)
        ]
    kafka = kafka_from(args)
    resolve_current_database(records, args.instance, kafka, args.topic_prefix)
    check_origins(records, args.inbound, args.file)
    topic = (inbound_topic if args.inbound else outbound_topic)(args.instance, args.topic_prefix)
    send_records(kafka, topic, records)
    for record in records:
        if args.json:
            print(json.dumps(json_safe({"topic": topic, **record})))
        else:
            print(
                f"{topic}  {record['message_id']}  conversation {record['conversation_id']} "
                f"seq {record['sequence_number']}  -> {record['to_service']}"
            )
    return 0


def defaults_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Return the message fields the command line gives (a file entry may override each)."""
    return {
        "conversation_id": args.conversation or str(uuid.uuid4()),
        "from_service": args.from_service,
        "from_broker_instance": args.from_broker_instance,
        "to_service": args.to_service,
        "to_broker_instance": args.to_broker_instance,
        "origin_database": None if args.inbound else args.from_database,
        "is_initiator": not args.reply,
        "message_type": args.message_type,
        "hops_remaining": args.hops,
        "time_to_live_ms": args.ttl_ms,
    }


def message_record(
    fields: Mapping[str, Any], sequence: int, now: datetime, source: Source, subject: str | None = None
) -> Record:
    """Return a complete, encodable message record from `fields`; a bad field is a ConfigError.

    `sequence` is the sequence number unless `fields` has one; `subject` names the message in errors.
    """
    subject = subject or f"message {fields.get('message_id') or 'seq ' + str(sequence)}"
    if not fields.get("to_service"):
        fail(source, subject, "required (or give --to-service)", "to_service")
    body = fields.get("body", "")
    if isinstance(body, str):
        body = body.replace("{n}", str(fields.get("sequence_number", sequence))).encode("utf-8")
    target = fields.get("to_broker_instance")
    if isinstance(target, str) and target.upper() != CURRENT_DATABASE:
        target = check_guid(target, source, subject, "to_broker_instance")
    sender = fields.get("from_broker_instance")
    if sender is not None:
        sender = check_guid(sender, source, subject, "from_broker_instance")
    try:
        record = new_message_record(
            message_id=str(fields.get("message_id") or uuid.uuid4()),
            conversation_id=fields["conversation_id"],
            sequence_number=fields.get("sequence_number", sequence),
            to_service=fields["to_service"],
            to_broker_instance=target,
            from_service=fields["from_service"],
            from_broker_instance=sender,
            origin_database=fields.get("origin_database"),
            is_initiator=fields.get("is_initiator", True),
            message_type=fields.get("message_type", "DEFAULT"),
            body=body,
            hops_remaining=fields.get("hops_remaining", DEFAULT_HOPS),
            time_to_live_ms=fields.get("time_to_live_ms"),
            attempt=fields.get("attempt", 0),
            enqueued_at=now,
        )
        encode_message(record)
    except MalformedRecord as exc:
        fail(source, subject, str(exc))
    return record


def records_from_file(path: Path, defaults: Mapping[str, Any], now: datetime) -> list[Record]:
    """Return the messages of a YAML or JSON file (a list of mappings of `FILE_FIELDS`)."""
    text = read_text(path)
    if path.suffix.lower() == ".json":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    elif path.suffix.lower() in (".yaml", ".yml"):
        document = parse_yaml(text, str(path))
    else:
        raise ConfigError(
            f"{path}: expected a .yaml, .yml or .json message file, got {path.suffix or 'no suffix'!r}"
        )
    if not isinstance(document, list) or not document:
        raise ConfigError(f"{path}: expected a non-empty list of messages")
    lines = document if isinstance(document, LineList) else LineList(document)
    records = []
    next_sequence: dict[str, int] = {}
    for index, entry in enumerate(document):
        source = Source(str(path), lines.line_of_item(index))
        subject = f"message #{index + 1}"
        if not isinstance(entry, dict):
            fail(source, subject, f"expected a mapping of message fields, got {entry!r}")
        if isinstance(entry, LineDict):
            source = source.at(entry.line)
        for key in entry:
            if key not in FILE_FIELDS:
                fail(source, subject, f"unknown field; expected one of {', '.join(FILE_FIELDS)}", str(key))
        fields = {**defaults, **entry}
        conversation = str(fields["conversation_id"])
        sequence = next_sequence.get(conversation, 0)
        record = message_record(fields, sequence, now, source, subject)
        next_sequence[conversation] = record["sequence_number"] + 1
        records.append(record)
    return records


def resolve_current_database(records: list[Record], instance: str, kafka: Kafka, prefix: str) -> None:
    """Replace `CURRENT DATABASE` targets by the sending database's broker instance (K1)."""
    wanted = [r for r in records if str(r.get("to_broker_instance") or "").upper() == CURRENT_DATABASE]
    if not wanted:
        return
    instances, _ = read_catalogs(kafka, catalogs_topic(prefix))
    catalog = next((i for i in instances if i.name == instance), None)
    if catalog is None:
        raise ConfigError(
            f"to_broker_instance CURRENT DATABASE: no catalog for instance {instance!r} on the topic"
        )
    for record in wanted:
        database = catalog.database(record.get("origin_database") or "")
        if database is None:
            raise ConfigError(
                f"to_broker_instance CURRENT DATABASE: expected the sending database of message "
                f"{record['message_id']} in instance {instance}'s catalog, "
                f"got {record.get('origin_database')!r}"
            )
        record["to_broker_instance"] = database.broker_instance


def check_origins(records: list[Record], inbound: bool, file: Path | None) -> None:
    """Outbound messages name their sending database; inbound ones name none (S1-S3)."""
    where = str(file) if file is not None else "--from-database"
    for record in records:
        if inbound and record.get("origin_database"):
            raise ConfigError(
                f"{where}: message {record['message_id']}: an inbound message has no origin_database"
            )
        if not inbound and not record.get("origin_database"):
            raise ConfigError(
                f"{where}: message {record['message_id']}: expected the sending database "
                "(--from-database or origin_database), got none"
            )
