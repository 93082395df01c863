"""Route tables and catalogs on their compacted Kafka topics.

Routes topic: key `scope/name` (UTF-8, `operations.route_key`), value an Avro `router.v1.Route`;
a dropped route is a tombstone (null value). Catalogs topic: key the instance name (UTF-8), value
an Avro `router.v1.Catalog`. Both topics are compacted, so the table is the last value of each key.

A read takes the end offsets at call time and reads every partition from the beginning up to them:
the result is the table as of that instant, whatever is written meanwhile, and its `version` names
those offsets (`p0:42`, or `p0:42,p1:7`), so two reads with equal versions saw the same table. A
topic that does not exist reads as an empty table with version `none`.

Publishing validates everything first (an ALTER needs the current value: the table is read, the
operations are applied to it, and only then is anything produced).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from streaming.errors import KafkaUnavailable, MalformedRecord, RouterError
from streaming.kafka.admin import cluster_metadata, end_offsets, ensure_topics
from streaming.kafka.avro import (
    catalog_to_record,
    decode_catalog,
    decode_route,
    encode_catalog,
    encode_route,
    record_to_instance,
    record_to_route,
    route_to_record,
)
from streaming.rules.model import Instance, Route
from streaming.tables.operations import RouteChange, RouteOperation, plan_route_changes, route_key

_LIBRDKAFKA_LOG = logging.getLogger("streaming.kafka.librdkafka")
DEFAULT_TIMEOUT_S = 30.0
MISSING_VERSION = "none"

Headers = Sequence[tuple[str, bytes]]
OnMalformed = Callable[[MalformedRecord], None]
"""Called with a record that does not decode, which is then left out; None means raise."""


@dataclass(frozen=True)
class StoredValue:
    """The last value of one key on a compacted topic, with where it was read."""

    key: str
    value: bytes
    partition: int
    offset: int

    def malformed(self, topic: str, exc: MalformedRecord) -> MalformedRecord:
        """Return `exc` restated with the topic, partition, offset and key of this record."""
        return MalformedRecord(f"{topic}[{self.partition}]@{self.offset} key {self.key!r}: {exc}")


def version_of(offsets: Mapping[int, int]) -> str:
    """Return the version string of a table read up to `offsets` (partition -> end offset)."""
    return ",".join(f"p{partition}:{offset}" for partition, offset in sorted(offsets.items()))


def consumer(bootstrap: str, **settings: object) -> Consumer:
    """Return a consumer with its own throw-away group that never commits offsets."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"router-reader-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    config.update(settings)
    return Consumer(config, logger=_LIBRDKAFKA_LOG)


def read_latest(
    bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> tuple[dict[str, StoredValue], str]:
    """Return the last value of every key of `topic` up to its end offsets now, and the version.

    Tombstones remove their key. A record with no key cannot belong to a table: MalformedRecord.
    """
    if topic not in cluster_metadata(bootstrap, timeout).topics:
        return {}, MISSING_VERSION
    ends = end_offsets(bootstrap, topic, timeout)
    latest: dict[str, StoredValue] = {}
    pending = {partition for partition, end in ends.items() if end > 0}
    if not pending:
        return latest, version_of(ends)
    reader = consumer(bootstrap)
    try:
        reader.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in sorted(pending)])
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(
                    f"reading {topic} at {bootstrap}: expected partitions {sorted(pending)} to be read up to "
                    f"{version_of(ends)} within {timeout:g} s"
                )
            record = reader.poll(0.2)
            if record is None:
                continue
            partition = record.partition() or 0
            error = record.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(partition)
                    continue
                raise KafkaUnavailable(f"reading {topic} at {bootstrap}: {error.str()}")
            offset = record.offset() or 0
            if offset >= ends[partition]:
                pending.discard(partition)
                continue
            _keep_latest(latest, record, topic)
            if offset + 1 >= ends[partition]:
                pending.discard(partition)
    except KafkaException as exc:
        raise KafkaUnavailable(f"reading {topic} at {bootstrap}: {exc}") from exc
    finally:
        reader.close()
    return latest, version_of(ends)


def _keep_latest(latest: dict[str, StoredValue], record: Message, topic: str) -> None:
    raw_key = record.key()
    where = f"{topic}[{record.partition()}]@{record.offset()}"
    if raw_key is None:
        raise MalformedRecord(f"{where}: expected a key on a compacted table topic, got none")
    key_bytes = raw_key if isinstance(raw_key, bytes) else str(raw_key).encode()
    try:
        key = key_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRecord(f"{where}: expected a UTF-8 key, got {key_bytes!r}") from exc
    value = record.value()
    if value is None:
        latest.pop(key, None)
    else:
        value_bytes = value if isinstance(value, bytes) else str(value).encode()
        latest[key] = StoredValue(key, value_bytes, record.partition() or 0, record.offset() or 0)


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> int:
    """Produce (key, value, headers) records to `topic` and wait until every one is acknowledged.

    Returns how many were produced. A value of None is a tombstone. Raises KafkaUnavailable when the
    broker does not acknowledge them all within `timeout`, RouterError when it refuses one.
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5},
        logger=_LIBRDKAFKA_LOG,
    )
    failures: list[str] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(f"key {message.key()!r}: {error.str()}")

    count = 0
    try:
        for key, value, headers in records:
            while True:
                try:
                    producer.produce(
                        topic, value=value, key=key, headers=list(headers or ()), on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            count += 1
        remaining = producer.flush(timeout)
    except KafkaException as exc:
        raise KafkaUnavailable(f"producing to {topic} at {bootstrap}: {exc}") from exc
    if remaining:
        raise KafkaUnavailable(
            f"producing to {topic} at {bootstrap}: expected {count} records acknowledged "
            f"within {timeout:g} s, {remaining} were not"
        )
    if failures:
        raise RouterError(f"producing to {topic} at {bootstrap}: the broker refused {'; '.join(failures)}")
    return count


# --- routes ----------------------------------------------------------------------------------------


def read_route_map(
    bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S, on_malformed: OnMalformed | None = None
) -> tuple[dict[str, Route], str]:
    """Return the route table keyed by `scope/name`, and its version (see the module docstring)."""
    latest, version = read_latest(bootstrap, topic, timeout=timeout)
    table: dict[str, Route] = {}
    for key, stored in sorted(latest.items()):
        try:
            table[key] = record_to_route(decode_route(stored.value))
        except MalformedRecord as exc:
            located = stored.malformed(topic, exc)
            if on_malformed is None:
                raise located from exc
            on_malformed(located)
    return table, version


def read_route_table(
    bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S, on_malformed: OnMalformed | None = None
) -> tuple[tuple[Route, ...], str]:
    """Return every route on the routes topic (expired ones included, R6), sorted by key, and the version.

    A value that does not decode raises MalformedRecord naming topic, partition, offset and key,
    unless `on_malformed` is given: it is then called with that error and the route left out.
    """
    table, version = read_route_map(bootstrap, topic, timeout=timeout, on_malformed=on_malformed)
    return tuple(table.values()), version


def publish_route_changes(
    bootstrap: str, changes: Sequence[RouteChange], topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> int:
    """Produce planned changes to the routes topic (created compacted if missing); a drop is a tombstone."""
    ensure_topics(bootstrap, [topic], compacted=True)
    return produce_records(
        bootstrap,
        topic,
        (
            (
                change.key.encode("utf-8"),
                None if change.route is None else encode_route(route_to_record(change.route)),
                None,
            )
            for change in changes
        ),
        timeout=timeout,
    )


def publish_routes(
    bootstrap: str, operations: Sequence[RouteOperation], topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> list[RouteChange]:
    """Apply route operations to the table on `topic` and publish the result; return what changed.

    The current table is read first and every operation checked against it (an alter or drop of a
    route that does not exist, an alter that breaks a route rule) before anything is produced.
    """
    current, _ = read_route_map(bootstrap, topic, timeout=timeout)
    changes = plan_route_changes(current, operations)
    publish_route_changes(bootstrap, changes, topic, timeout=timeout)
    return changes


def put_route(bootstrap: str, route: Route, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Publish one route as it is (create or replace), e.g. a route a BCN service creates (B6)."""
    ensure_topics(bootstrap, [topic], compacted=True)
    produce_records(
        bootstrap,
        topic,
        [(route_key(route.scope, route.name).encode(), encode_route(route_to_record(route)), None)],
        timeout=timeout,
    )


# --- catalogs --------------------------------------------------------------------------------------


def publish_catalogs(
    bootstrap: str, instances: Sequence[Instance], topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> int:
    """Publish each instance's catalog (key: the instance name), replacing what the topic held."""
    ensure_topics(bootstrap, [topic], compacted=True)
    return produce_records(
        bootstrap,
        topic,
        ((i.name.encode("utf-8"), encode_catalog(catalog_to_record(i)), None) for i in instances),
        timeout=timeout,
    )


def read_catalogs(
    bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S, on_malformed: OnMalformed | None = None
) -> tuple[tuple[Instance, ...], str]:
    """Return every instance catalog on the catalogs topic, sorted by name, and the version."""
    latest, version = read_latest(bootstrap, topic, timeout=timeout)
    instances = []
    for _, stored in sorted(latest.items()):
        try:
            instances.append(record_to_instance(decode_catalog(stored.value)))
        except MalformedRecord as exc:
            located = stored.malformed(topic, exc)
            if on_malformed is None:
                raise located from exc
            on_malformed(located)
    return tuple(instances), version
