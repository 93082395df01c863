"""The wire contract: Avro codecs for messages, routes and catalogs (`schemas/*.avsc`).

Records are written with fastavro in schemaless binary form: the Kafka value is the Avro body alone,
no container header and no schema-registry prefix, so that Spark's `from_avro`/`to_avro` read and
write the same bytes with the same `.avsc` text (`schema_json`).

The schemas live in the repository's `schemas/` directory, found by walking up from this file to
`pyproject.toml`; the environment variable `ROUTER_SCHEMAS_DIR` overrides it. They are read on first
use, not at import time.

Timestamps (`expires_at`, `enqueued_at`) are timezone-aware UTC datetimes in decoded records and in
the model; a naive datetime given to an encoder is taken as UTC.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from functools import cache, partial
from pathlib import Path
from typing import Any

import fastavro
from fastavro.validation import ValidationError, validate

from streaming.errors import ConfigError, MalformedRecord
from streaming.rules.model import REMOTE, Database, Instance, Message, Route

SCHEMAS_ENV = "ROUTER_SCHEMAS_DIR"
SCHEMA_NAMES = ("message", "route", "catalog")

Record = dict[str, Any]


def schemas_dir() -> Path:
    """Return the directory that holds the `.avsc` files (`ROUTER_SCHEMAS_DIR` wins)."""
    override = os.environ.get(SCHEMAS_ENV)
    if override:
        return Path(override)
    return _repository_schemas_dir()


@cache
def _repository_schemas_dir() -> Path:
    # Found once: every record decoded asks for its schema, and the walk up costs file system calls.
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent / "schemas"
    raise ConfigError(
        f"Avro schemas: expected a pyproject.toml above {Path(__file__).resolve()} "
        f"to find schemas/, found none; set {SCHEMAS_ENV}"
    )


def schema_json(name: str) -> str:
    """Return the text of schema `name` ("message", "route" or "catalog") for Spark's `from_avro`."""
    return _schema_text(name, str(schemas_dir()))


@cache
def _schema_text(name: str, directory: str) -> str:
    if name not in SCHEMA_NAMES:
        raise ConfigError(f"Avro schemas: expected one of {', '.join(SCHEMA_NAMES)}, got {name!r}")
    path = Path(directory) / f"{name}.avsc"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Avro schema {name!r}: cannot read {path}: {exc}") from exc


@cache
def _parsed(name: str, directory: str) -> dict[str, Any]:
    text = _schema_text(name, directory)
    try:
        parsed = fastavro.parse_schema(json.loads(text))
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigError(f"Avro schema {name!r} in {directory}: not a valid Avro schema: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ConfigError(f"Avro schema {name!r} in {directory}: expected a record schema, got {parsed!r}")
    return parsed


def parsed_schema(name: str) -> dict[str, Any]:
    """Return schema `name` parsed by fastavro (cached per schemas directory)."""
    return _parsed(name, str(schemas_dir()))


def _full_name(name: str) -> str:
    return str(parsed_schema(name)["name"])


def encode(name: str, record: Mapping[str, Any]) -> bytes:
    """Encode `record` with schema `name`; a record that does not fit raises MalformedRecord."""
    schema = parsed_schema(name)
    known = {f["name"] for f in schema["fields"]}
    unknown = sorted(set(record) - known)
    if unknown:
        raise MalformedRecord(
            f"{name} record: expected only the fields of Avro {schema['name']}, "
            f"got unknown field(s) {', '.join(unknown)}"
        )
    try:
        validate(dict(record), schema, raise_errors=True)
    except ValidationError as exc:
        problems = "; ".join(str(e) for e in exc.errors) or str(exc)
        raise MalformedRecord(f"{name} record: does not match Avro {schema['name']}: {problems}") from exc
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, dict(record))
    return out.getvalue()


def decode(name: str, data: bytes | None) -> Record:
    """Decode `data` with schema `name`; anything but exactly one record raises MalformedRecord."""
    return _decode(name, parsed_schema(name), data)


def decoder(name: str) -> Callable[[bytes | None], Record]:
    """Return `decode` for schema `name`, with the schema looked up now rather than at every record.

    For a reader that decodes many records of one schema (a whole routes topic).
    """
    return partial(_decode, name, parsed_schema(name))


def _decode(name: str, schema: dict[str, Any], data: bytes | None) -> Record:
    expected = f"{name} record: expected Avro {schema['name']}"
    if data is None:
        raise MalformedRecord(f"{expected}, got no value (null)")
    buffer = io.BytesIO(data)
    try:
        record = fastavro.schemaless_reader(buffer, schema, None)
    except Exception as exc:  # fastavro raises EOFError, IndexError, UnicodeDecodeError, ValueError...
        raise MalformedRecord(
            f"{expected}, could not decode {len(data)} bytes: {type(exc).__name__}: {exc}"
        ) from exc
    if buffer.tell() != len(data):
        raise MalformedRecord(
            f"{expected}, got {len(data)} bytes of which only {buffer.tell()} form a record"
        )
    if not isinstance(record, dict):
        raise MalformedRecord(f"{expected}, decoded a {type(record).__name__}")
    return record


def encode_message(record: Mapping[str, Any]) -> bytes:
    """Encode a message record (`schemas/message.avsc`)."""
    return encode("message", _utc_fields(record, ("expires_at", "enqueued_at")))


def decode_message(data: bytes | None) -> Record:
    """Decode a message record; raises MalformedRecord."""
    return decode("message", data)


def encode_route(record: Mapping[str, Any]) -> bytes:
    """Encode a route record (`schemas/route.avsc`)."""
    return encode("route", _utc_fields(record, ("expires_at",)))


def decode_route(data: bytes | None) -> Record:
    """Decode a route record; raises MalformedRecord."""
    return decode("route", data)


def encode_catalog(record: Mapping[str, Any]) -> bytes:
    """Encode a catalog record (`schemas/catalog.avsc`)."""
    return encode("catalog", record)


def decode_catalog(data: bytes | None) -> Record:
    """Decode a catalog record; raises MalformedRecord."""
    return decode("catalog", data)


def as_utc(value: datetime) -> datetime:
    """Return `value` as an aware UTC datetime (a naive one is taken as UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _utc_fields(record: Mapping[str, Any], names: tuple[str, ...]) -> Mapping[str, Any]:
    if not any(isinstance(record.get(n), datetime) for n in names):
        return record
    fixed = dict(record)
    for n in names:
        value = fixed.get(n)
        if isinstance(value, datetime):
            fixed[n] = as_utc(value)
    return fixed


# --- model conversions -------------------------------------------------------------------------


def route_to_record(route: Route) -> Record:
    """Return the Avro record of a route."""
    return {
        "scope": route.scope,
        "name": route.name,
        "service": route.service,
        "broker_instance": route.broker_instance,
        "address": route.address,
        "mirror_address": route.mirror_address,
        "expires_at": None if route.expires_at is None else as_utc(route.expires_at),
    }


def record_to_route(record: Mapping[str, Any]) -> Route:
    """Return the route of a decoded Avro record."""
    expires_at = record.get("expires_at")
    return Route(
        scope=record["scope"],
        name=record["name"],
        address=record["address"],
        service=record.get("service"),
        broker_instance=record.get("broker_instance"),
        mirror_address=record.get("mirror_address"),
        expires_at=None if expires_at is None else as_utc(expires_at),
    )


def catalog_to_record(instance: Instance) -> Record:
    """Return the Avro catalog record of an instance."""
    return {
        "name": instance.name,
        "address": instance.address,
        "forwarding": instance.forwarding,
        "forward_size_mb": instance.forward_size_mb,
        "retry_s": float(instance.retry_s),
        "databases": [
            {
                "name": d.name,
                "broker_instance": d.broker_instance,
                "broker_enabled": d.broker_enabled,
                "services": list(d.services),
            }
            for d in instance.databases
        ],
    }


def record_to_instance(record: Mapping[str, Any]) -> Instance:
    """Return the instance of a decoded Avro catalog record."""
    return Instance(
        name=record["name"],
        address=record["address"],
        forwarding=record.get("forwarding", False),
        forward_size_mb=record.get("forward_size_mb", 10),
        retry_s=float(record.get("retry_s", 5.0)),
        databases=tuple(
            Database(
                name=d["name"],
                broker_instance=d["broker_instance"],
                broker_enabled=d.get("broker_enabled", True),
                services=tuple(d.get("services", ())),
            )
            for d in record.get("databases", ())
        ),
    )


def message_origin(record: Mapping[str, Any], inbound: bool) -> str:
    """Return a message's origin: `remote` on an inbound topic, else its origin database (S1-S3).

    A message on an outbound topic without an origin database raises MalformedRecord.
    """
    if inbound:
        return REMOTE
    origin = record.get("origin_database")
    if not origin:
        raise MalformedRecord(
            f"message {record.get('message_id')!r} on an outbound topic: expected origin_database "
            f"(the sending database), got {origin!r}"
        )
    return str(origin)


def message_record_to_model(record: Mapping[str, Any], origin: str) -> Message:
    """Return the routing view of a decoded message record.

    `origin` is the record's origin database for the outbound topic, or "remote" for the inbound
    topic (`message_origin`). The size is the body's length; the time to live is in seconds.
    """
    ttl_ms = record.get("time_to_live_ms")
    return Message(
        id=record["message_id"],
        conversation_id=record["conversation_id"],
        service=record["to_service"],
        origin=origin,
        broker_instance=record.get("to_broker_instance"),
        from_target=not record.get("is_initiator", True),
        message_type=record.get("message_type", "DEFAULT"),
        hops_remaining=record.get("hops_remaining", 16),
        time_to_live_s=None if ttl_ms is None else ttl_ms / 1000.0,
        size_bytes=len(record.get("body", b"")),
    )


def new_message_record(
    *,
    message_id: str,
    conversation_id: str,
    to_service: str,
    from_service: str,
    enqueued_at: datetime,
    body: bytes = b"",
    sequence_number: int = 0,
    to_broker_instance: str | None = None,
    from_broker_instance: str | None = None,
    origin_database: str | None = None,
    is_initiator: bool = True,
    message_type: str = "DEFAULT",
    hops_remaining: int = 16,
    time_to_live_ms: int | None = None,
    attempt: int = 0,
) -> Record:
    """Return a complete message record; `expires_at` is `enqueued_at` plus the time to live."""
    enqueued = as_utc(enqueued_at)
    return {
        "message_id": message_id,
        "conversation_id": conversation_id,
        "sequence_number": sequence_number,
        "from_service": from_service,
        "from_broker_instance": from_broker_instance,
        "to_service": to_service,
        "to_broker_instance": to_broker_instance,
        "origin_database": origin_database,
        "is_initiator": is_initiator,
        "message_type": message_type,
        "body": body,
        "hops_remaining": hops_remaining,
        "time_to_live_ms": time_to_live_ms,
        "expires_at": None if time_to_live_ms is None else enqueued + timedelta(milliseconds=time_to_live_ms),
        "enqueued_at": enqueued,
        "attempt": attempt,
    }
