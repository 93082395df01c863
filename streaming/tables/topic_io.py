"""Route tables and catalogs on their compacted Kafka topics: publishing, and reading back.

Routes topic: key `instance/scope/name` (UTF-8, `operations.route_key`), value an Avro `router.v1.Route`;
a dropped route is a tombstone (null value). Catalogs topic: key the instance name (UTF-8), value
an Avro `router.v1.Catalog`. Both topics are compacted, so the table is the last value of each key.

Reading goes through the one table reader (`streaming.tables.reader`): a record that does not
decode or that the loaders' checks refuse is skipped with a warning, and its key keeps its last good
value. A read takes the end offsets at call time and reads every partition up to them; its
`version` names those offsets (`p0:42`, or `p0:42,p1:7`). A topic that does not exist reads as an
empty table with version `none`.

Publishing validates everything first (an ALTER needs the current value: the table is read, the
operations are applied to it, and only then is anything produced).

The one-off writer the publishing uses (`RecordWriter`, `produce_records`) writes table records as
upserts (`streaming.kafka.durability.UPSERT_SETTINGS`), and serves other topics too, with
idempotence: `send_records` puts message records on an instance's input topic.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streaming.errors import ConfigError, KafkaUnavailable, MalformedRecord, RouterError
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import (
    Record,
    catalog_to_record,
    encode_catalog,
    encode_message,
    encode_route,
    route_to_record,
)
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import Kafka, bootstrap_of, producer_config, upsert_producer_config
from streaming.rules.model import Instance, MirrorRole, Route, normalize_address
from streaming.tables.operations import (
    RouteChange,
    RouteOperation,
    legacy_route_key,
    plan_route_changes,
    route_key,
)
from streaming.tables.plan import check_in_catalogs
from streaming.tables.reader import DEFAULT_TIMEOUT_S, TableReader, read_catalog_table, read_routes
from streaming.tables.records import RawRecords, RouteRecords
from streaming.tables.validate import Source, check_tcp_address

_LIBRDKAFKA_LOG = librdkafka_log()

Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True)
class StoredValue:
    """The last value of one key on a compacted topic, with where it was read."""

    key: str
    value: bytes
    partition: int
    offset: int


def read_latest(
    kafka: Kafka, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> tuple[dict[str, StoredValue], str]:
    """Return the last value of every key of any compacted `topic` up to its end offsets now, and the version.

    Values are not interpreted; tombstones remove their key, and a record without a UTF-8 key is
    skipped with a warning. The table topics have readers of their own (`streaming.tables.reader`).
    """
    with TableReader(kafka, topic, RawRecords(), timeout=timeout) as reader:
        reader.read_to_end()
        latest = {
            key: StoredValue(key, row.value, row.partition, row.offset) for key, row in reader.rows.items()
        }
        return latest, reader.version


class RecordWriter:
    """One producer for a process's many small writes, each waited for (`write`).

    A producer costs a connection, and an idempotent one a producer id from the broker: a service
    that answers request after request keeps one instead of making one per answer. With `upserts`
    it writes table records (compacted topics, each key's last value the table's), without
    idempotence and so without waiting 0.5-1.0 s for a producer id before its first write
    (`streaming.kafka.durability.UPSERT_SETTINGS`); messages are written with idempotence.
    """

    def __init__(self, kafka: Kafka, *, upserts: bool = False) -> None:
        self.kafka = kafka
        self._producer = (
            Producer(upsert_producer_config(kafka, **{"linger.ms": 5}), logger=_LIBRDKAFKA_LOG)
            if upserts
            else Producer(producer_config(kafka, **{"linger.ms": 5}), logger=_LIBRDKAFKA_LOG)
        )

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Send what is still buffered (briefly), then let the producer go."""
        self._producer.flush(5)

    def write(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> int:
        """Produce (key, value, headers) records to `topic` and wait until every one is acknowledged.

        Returns how many were produced. A value of None is a tombstone. Raises KafkaUnavailable
        when the broker does not acknowledge them all within `timeout`, RouterError when it refuses one.
        """
        producer, kafka = self._producer, self.kafka
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
            raise KafkaUnavailable(f"producing to {topic} at {bootstrap_of(kafka)}: {exc}") from exc
        if remaining:
            raise KafkaUnavailable(
                f"producing to {topic} at {bootstrap_of(kafka)}: expected {count} records acknowledged "
                f"within {timeout:g} s, {remaining} were not"
            )
        if failures:
            raise RouterError(
                f"producing to {topic} at {bootstrap_of(kafka)}: the broker refused {'; '.join(failures)}"
            )
        return count


def produce_records(
    kafka: Kafka,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    upserts: bool = False,
) -> int:
    """`RecordWriter.write` with a producer of its own, for a one-off write (`upserts`: of table records)."""
    with RecordWriter(kafka, upserts=upserts) as writer:
        return writer.write(topic, records, timeout=timeout)


def send_records(kafka: Kafka, topic: str, records: Iterable[Record]) -> int:
    """Produce message records to `topic` (created if missing), keyed by conversation id; return how many."""
    ensure_topics(kafka, [topic])
    return produce_records(
        kafka,
        topic,
        ((str(r["conversation_id"]).encode("utf-8"), encode_message(r), None) for r in records),
    )


def route_record(instance: str, route: Route) -> tuple[bytes, bytes, None]:
    """The routes topic's record of one route of `instance` (create or replace)."""
    return route_key(instance, route.scope, route.name).encode(), encode_route(route_to_record(route)), None


# --- routes ----------------------------------------------------------------------------------------


def publish_route_changes(
    kafka: Kafka, changes: Sequence[RouteChange], topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> int:
    """Produce planned changes to the routes topic (created compacted if missing); a drop is a tombstone."""
    ensure_topics(kafka, [topic], compacted=True)
    return produce_records(
        kafka,
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
        upserts=True,
    )


def publish_routes(
    kafka: Kafka,
    operations: Sequence[RouteOperation],
    topic: str,
    *,
    databases: Mapping[str, Collection[str]] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[RouteChange]:
    """Apply route operations to the tables on `topic` and publish the result; return what changed.

    The current tables are read first (records the reader skips are left out, with a warning) and
    every operation checked against its instance's table (an alter or drop of a route that does not
    exist, an alter that breaks a route rule) before anything is produced. With `databases` (each
    instance of the catalogs -> its database names, `reader.databases_by_instance`) a created or
    altered route must be in an instance of the catalogs and have one of its databases as its
    scope; a drop needs neither, so that the routes of a database that left the catalogs can go.
    """
    current = read_routes(kafka, topic, timeout=timeout)
    changes = plan_route_changes(current.table, operations)
    check_in_catalogs(changes, databases)
    publish_route_changes(kafka, changes, topic, timeout=timeout)
    return changes


def put_route(
    kafka: Kafka, instance: str, route: Route, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> None:
    """Publish one route of `instance` as it is (create or replace), e.g. one a BCN service creates (B6)."""
    ensure_topics(kafka, [topic], compacted=True)
    produce_records(kafka, topic, [route_record(instance, route)], timeout=timeout, upserts=True)


@dataclass(frozen=True)
class Migration:
    """A route under a key of the form before instances had their own tables, and its new key."""

    old_key: str
    new_key: str
    route: Route


def plan_route_migration(kafka: Kafka, topic: str, instance: str) -> list[Migration]:
    """The routes on `topic` keyed `scope/name`, each with its key in `instance`'s tables.

    That key form is from before each instance had its own tables; a record that is not a valid
    route is left alone.
    """
    latest, _ = read_latest(kafka, topic)
    records = RouteRecords()
    moves = []
    for key, stored in sorted(latest.items()):
        try:
            route = records.route_of(stored.value)
        except (ConfigError, MalformedRecord):
            continue
        if key == legacy_route_key(route.scope, route.name):
            moves.append(Migration(key, route_key(instance, route.scope, route.name), route))
    return moves


def migrate_routes(kafka: Kafka, topic: str, moves: Sequence[Migration]) -> int:
    """Write each route under its new key, then a tombstone for its old key; return the routes moved.

    The new records come first, so that a reader never sees a route gone from both keys.
    """
    produce_records(
        kafka,
        topic,
        [(m.new_key.encode(), encode_route(route_to_record(m.route)), None) for m in moves],
        upserts=True,
    )
    produce_records(kafka, topic, [(m.old_key.encode(), None, None) for m in moves], upserts=True)
    return len(moves)


# --- catalogs --------------------------------------------------------------------------------------


def publish_catalogs(
    kafka: Kafka, instances: Sequence[Instance], topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> int:
    """Publish each instance's catalog (key: the instance name), replacing what the topic held."""
    ensure_topics(kafka, [topic], compacted=True)
    return produce_records(
        kafka,
        topic,
        ((i.name.encode("utf-8"), encode_catalog(catalog_to_record(i)), None) for i in instances),
        timeout=timeout,
        upserts=True,
    )


def publish_mirror_roles(
    kafka: Kafka, roles: Mapping[str, MirrorRole], topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> int:
    """Publish mirror partners' roles (key: the partner's normalized TCP address; MI2, MI3).

    Raises ConfigError, before anything is written, for an address that is not a TCP address.
    """
    checked = {
        normalize_address(check_tcp_address(address, Source("ADDRESS"), "mirror partner", "address")): role
        for address, role in roles.items()
    }
    ensure_topics(kafka, [topic], compacted=True)
    return produce_records(
        kafka,
        topic,
        ((address.encode("utf-8"), role.value.encode("utf-8"), None) for address, role in checked.items()),
        timeout=timeout,
        upserts=True,
    )


def read_catalogs(
    kafka: Kafka, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> tuple[tuple[Instance, ...], str]:
    """Return every instance catalog on the catalogs topic, sorted by name, and the version.

    A record the reader skips is left out with a warning (`reader.read_catalog_table` lists them).
    """
    read = read_catalog_table(kafka, topic, timeout=timeout)
    return read.values(), read.version
