"""The one reader of the compacted table topics: routes, catalogs and mirror roles.

A `TableReader` keeps one consumer open on one topic. `read_to_end()` reads every record written
before the call (the first call reads the topic from its beginning); `poll()` applies only the
records the consumer has fetched since the last call, without asking the broker anything, so the
streaming job can call it before every micro-batch. Both say whether the table changed. The
one-shot functions (`read_routes`, `read_catalog_table`, `read_mirror_roles`) open a reader, read
to the end and close it: `router routes list`, `routes load`, `catalogs list` use them.

Every record has an explicit fate. A record applies to the table (a value sets its key's row, a
tombstone removes it), or it is skipped: no key, a key that is not UTF-8 or names no row, a value
that does not decode, or one that the loaders' checks refuse (`streaming.tables.records`). A skipped
record leaves the table as it was: its key keeps the last good value read before it (a tombstone
still deletes). The fallback holds while that good record is on the topic: compaction keeps only a
key's latest record, so once the topic is compacted a key whose latest record is bad reads as absent.

`skipped` lists the records the table leaves out and that no later record of their key has
replaced: per key at most its latest record, when that one was refused, plus every record without a
usable key. So it describes what the topic holds now, and a bad record followed by a good one no
longer counts. Each read logs ONE warning (logger `streaming.tables.reader`) per record it adds to
`skipped`, naming the topic, partition, offset and key, and the reason; a record replaced within
the same read is not worth a warning.

Every instance has its own routing tables on the one routes topic (key `instance/scope/name`). A
route reader given an instance reads that instance's routes only (the job's); without one it reads
every instance's (`router routes list`, `routes load`), each row keyed by its instance. It may be
given the database names the routes may have as their scope (the job: its instance's databases). A
route whose scope is none of them is then left out of the table and listed in `skipped`;
`use_databases` changes the names, and the routes left out come back when their database appears.

Versions: the offset up to which each partition was read, `p0:42` (or `p0:42,p1:7`); two reads
with equal versions saw the same records. A topic that does not exist reads as an empty table with
version `none`. Partitions added to the topic after the reader assigned its partitions are not
read: the table topics have one partition (`ensure_topics`); a new reader sees them all.

A reader is not thread-safe: one caller at a time.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from streaming.errors import ConfigError, KafkaUnavailable, MalformedRecord
from streaming.kafka.admin import LEADER_RETRY_PAUSE_S, leader_gone, time_for_another_ask
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import ClientValue, Kafka, bootstrap_of, client_config
from streaming.kafka.consuming import take_arrived
from streaming.rules.model import Instance, MirrorRole, Route
from streaming.tables.operations import split_route_key
from streaming.tables.records import CatalogRecords, MirrorRecords, OtherTable, RouteRecords, TableRecords
from streaming.tables.validate import RECORD, check_known_scope, route_subject

log = logging.getLogger("streaming.tables.reader")
_LIBRDKAFKA_LOG = librdkafka_log()

DEFAULT_TIMEOUT_S = 30.0
MISSING_VERSION = "none"
_BATCH = 10_000
"""Records taken from the consumer's queue per call into librdkafka."""
_MISSING_RECHECK_S = 5.0
"""How often `poll()` asks the broker whether a topic that did not exist has been created."""
V = TypeVar("V")
# What `with` gives: the reader itself, as its own class (typing.Self is 3.11+).
Reader = TypeVar("Reader", bound="TableReader[Any]")
_ABSENT = object()


def consumer(kafka: Kafka, **settings: ClientValue) -> Consumer:
    """Return a consumer with its own throw-away group that never commits offsets."""
    own: dict[str, ClientValue] = {
        "group.id": f"router-reader-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    own.update(settings)
    return Consumer(client_config(kafka, **own), logger=_LIBRDKAFKA_LOG)


def version_of(offsets: Mapping[int, int]) -> str:
    """Return the version string of a table read up to `offsets` (partition -> next offset)."""
    return ",".join(f"p{partition}:{offset}" for partition, offset in sorted(offsets.items()))


@dataclass(frozen=True)
class SkippedRecord:
    """A record the table leaves out, where it is on its topic, and why."""

    partition: int
    offset: int
    key: str | bytes | None
    """The record's key: text, the raw bytes when they are not UTF-8, None when it has none."""
    reason: str

    def describe(self, topic: str) -> str:
        """Return `topic[partition]@offset key 'k': reason`, as the warning and the CLI print it."""
        return f"{topic}[{self.partition}]@{self.offset} key {self.key!r}: {self.reason}"


@dataclass(frozen=True)
class Row(Generic[V]):
    """A table row's value and the record it was read from."""

    value: V
    partition: int
    offset: int


@dataclass(frozen=True)
class TableRead(Generic[V]):
    """A table as read: its rows by key, its version, and the records it leaves out."""

    topic: str
    table: Mapping[str, V]
    version: str
    skipped: tuple[SkippedRecord, ...]

    def values(self) -> tuple[V, ...]:
        """Return the rows' values sorted by key."""
        return tuple(self.table[key] for key in sorted(self.table))


class _Changes:
    """What one read did: whether the table changed, and the records it skipped (to warn about)."""

    def __init__(self) -> None:
        self.changed = False
        self.refused: list[SkippedRecord] = []
        self.excluded: list[str] = []


class TableReader(Generic[V]):
    """A long-lived reader of one compacted table topic (see the module docstring).

    `records` says what the topic's records must hold. Nothing is read until `read_to_end()` or
    `poll()`; `close()` (or leaving a `with` block) closes the consumer.
    """

    def __init__(
        self, kafka: Kafka, topic: str, records: TableRecords[V], *, timeout: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.bootstrap = bootstrap_of(kafka)
        self.topic = topic
        self.timeout = timeout
        self._records = records
        self._consumer = consumer(kafka)
        self._positions: dict[int, int] | None = None  # None until the topic is found and assigned
        self._next_topic_check = 0.0
        # The last good value of every key, with its partition and offset (a tuple: one per record).
        self._rows: dict[str, tuple[V, int, int]] = {}
        self._table: dict[str, V] = {}  # the rows the table shows (`_excluded` leaves some out)
        self._refused: dict[Hashable, SkippedRecord] = {}  # per key, its latest record when refused
        self._values: tuple[V, ...] | None = None  # `values()`, kept until the table changes

    # --- reading -------------------------------------------------------------------------------

    def read_to_end(self) -> bool:
        """Read every record written before this call; return whether the table changed.

        The first call reads the topic from its beginning (a topic that does not exist reads as
        empty, version `none`). Raises KafkaUnavailable when the broker does not answer, or the
        records are not all read within the reader's timeout.
        """
        changes = _Changes()
        positions = self._assign()
        if positions is None:
            return False
        ends = self._end_offsets(positions)
        pending = {partition for partition, end in ends.items() if positions.get(partition, 0) < end}
        deadline = time.monotonic() + self.timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaUnavailable(
                    f"reading {self.topic} at {self.bootstrap}: expected partitions {sorted(pending)} to be "
                    f"read up to {version_of(ends)} within {self.timeout:g} s, got {self.version}"
                )
            for record in self._consume(min(remaining, 0.5)):
                partition = record.partition() or 0
                self._take(record, changes, strict=True)
                if positions.get(partition, 0) >= ends.get(partition, 0):
                    pending.discard(partition)
        return self._finish(changes)

    def poll(self) -> bool:
        """Apply the records fetched since the last read; return whether the table changed.

        No request to the broker: the consumer fetches new records in the background, and this
        takes what has arrived (a record written a moment ago may come at the next call). While the
        topic does not exist, a call asks the broker about it at most every few seconds.
        """
        if self._positions is None:
            if time.monotonic() < self._next_topic_check:
                return False
            self._next_topic_check = time.monotonic() + _MISSING_RECHECK_S
            return self.read_to_end()
        changes = _Changes()
        while True:
            records = self._consume(0)
            for record in records:
                self._take(record, changes, strict=False)
            if len(records) < _BATCH:
                break
        return self._finish(changes)

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        self._consumer.close()

    def __enter__(self: Reader) -> Reader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- the table -----------------------------------------------------------------------------

    @property
    def table(self) -> Mapping[str, V]:
        """The rows by key (a copy: it does not change with later reads)."""
        return dict(self._table)

    @property
    def rows(self) -> Mapping[str, Row[V]]:
        """The rows by key with the record each was read from (a copy)."""
        return {key: Row(*self._rows[key]) for key in self._table}

    def values(self) -> tuple[V, ...]:
        """The rows' values sorted by key (computed again only after the table changed)."""
        if self._values is None:
            self._values = tuple(self._table[key] for key in sorted(self._table))
        return self._values

    @property
    def version(self) -> str:
        """Up to which offset each partition was read (`p0:42`), or `none` for a missing topic."""
        return MISSING_VERSION if self._positions is None else version_of(self._positions)

    @property
    def skipped(self) -> tuple[SkippedRecord, ...]:
        """The records the table leaves out that no later record of their key replaced (by position)."""
        left_out = list(self._refused.values())
        for key, (value, partition, offset) in self._rows.items():
            reason = self._excluded(key, value)
            if reason is not None:
                left_out.append(SkippedRecord(partition, offset, key, reason))
        return tuple(sorted(left_out, key=lambda s: (s.partition, s.offset)))

    def snapshot(self) -> TableRead[V]:
        """Return the table, its version and its skipped records as one value."""
        return TableRead(self.topic, self.table, self.version, self.skipped)

    # --- what subclasses may add ---------------------------------------------------------------

    def _excluded(self, key: str, value: V) -> str | None:
        """Return why a good row is left out of the table, or None to show it (default: never)."""
        return None

    def _reconsider(self) -> bool:
        """Apply `_excluded` to every row again after its inputs changed; return whether the table changed."""
        changes = _Changes()
        table: dict[str, V] = {}
        for key, (value, _, _) in self._rows.items():
            if self._excluded(key, value) is None:
                table[key] = value
            elif self._table.get(key, _ABSENT) is not _ABSENT:
                changes.excluded.append(key)
        changes.changed = table != self._table
        self._table = table
        return self._finish(changes)

    # --- internals -----------------------------------------------------------------------------

    def _assign(self) -> dict[int, int] | None:
        """Return the read positions, assigning every partition from the beginning at the first call.

        None when the topic does not exist.
        """
        if self._positions is not None:
            return self._positions
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=self.timeout).topics.get(self.topic)
        except KafkaException as exc:
            raise KafkaUnavailable(
                f"expected a Kafka broker answering at {self.bootstrap} within {self.timeout:g} s, got: {exc}"
            ) from exc
        if metadata is None or (
            metadata.error is not None and metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            return None
        if metadata.error is not None:
            raise KafkaUnavailable(f"reading {self.topic} at {self.bootstrap}: {metadata.error.str()}")
        partitions = sorted(metadata.partitions)
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        self._positions = {partition: 0 for partition in partitions}
        return self._positions

    def _end_offsets(self, positions: Mapping[int, int]) -> dict[int, int]:
        """Each assigned partition's end offset now (one request per partition).

        While a partition's leader is not ready (just after the topic was created, moving to
        another broker, or its broker stopped), it is asked again until the reader's timeout.
        """
        deadline = time.monotonic() + self.timeout
        ends = {}
        for partition in positions:
            while True:
                try:
                    _, high = self._consumer.get_watermark_offsets(
                        TopicPartition(self.topic, partition), timeout=max(deadline - time.monotonic(), 0.1)
                    )
                    break
                except KafkaException as exc:
                    if not leader_gone(exc) or not time_for_another_ask(deadline):
                        raise KafkaUnavailable(
                            f"reading the end offsets of {self.topic} at {self.bootstrap}: {exc}"
                        ) from exc
                    time.sleep(LEADER_RETRY_PAUSE_S)
            ends[partition] = high
        return ends

    def _consume(self, timeout: float) -> list[Message]:
        try:
            return take_arrived(self._consumer, _BATCH, timeout)
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.topic} at {self.bootstrap}: {exc}") from exc

    def _take(self, record: Message, changes: _Changes, *, strict: bool) -> None:
        """Apply one record, or an event of the consumer (end of partition, error)."""
        positions = self._positions if self._positions is not None else {}
        partition = record.partition() or 0
        offset = record.offset() or 0
        error = record.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                positions[partition] = max(positions.get(partition, 0), offset)
                return
            # `read_to_end` promised the table up to now, so it cannot go on; `poll` keeps the table
            # as it is and librdkafka retries on its own.
            if strict or error.fatal():
                raise KafkaUnavailable(f"reading {self.topic} at {self.bootstrap}: {error.str()}")
            log.warning("reading %s at %s: %s; the table is kept as it is", self.topic, self.bootstrap, error)
            return
        positions[partition] = offset + 1
        self._apply(record, partition, offset, changes)

    def _apply(self, record: Message, partition: int, offset: int, changes: _Changes) -> None:
        raw_key = record.key()
        if raw_key is None:
            self._refuse(
                ("no key", partition, offset),
                SkippedRecord(partition, offset, None, "expected a key on a compacted table topic, got none"),
                changes,
            )
            return
        key_bytes = raw_key if isinstance(raw_key, bytes) else str(raw_key).encode()
        try:
            key = key_bytes.decode("utf-8")
        except UnicodeDecodeError:
            self._refuse(
                ("raw key", key_bytes),
                SkippedRecord(partition, offset, key_bytes, f"expected a UTF-8 key, got {key_bytes[:40]!r}"),
                changes,
            )
            return
        try:
            row_key = self._records.row_key(key)
        except OtherTable:
            return
        except ConfigError as exc:
            if record.value() is None:
                # A tombstone for a key that names no row (one a migration moved away): what that key
                # held is gone, and the tombstone itself holds nothing to skip.
                self._refused.pop(("raw key", key_bytes), None)
                return
            self._refuse(("raw key", key_bytes), SkippedRecord(partition, offset, key, str(exc)), changes)
            return
        value = record.value()
        if value is None:
            self._refused.pop(row_key, None)
            self._rows.pop(row_key, None)
            if self._table.pop(row_key, _ABSENT) is not _ABSENT:
                changes.changed = True
            return
        try:
            decoded = self._records.row_value(key, value if isinstance(value, bytes) else str(value).encode())
        except (ConfigError, MalformedRecord) as exc:
            self._refuse(row_key, SkippedRecord(partition, offset, key, str(exc)), changes)
            return
        self._refused.pop(row_key, None)
        self._rows[row_key] = (decoded, partition, offset)
        if self._excluded(row_key, decoded) is not None:
            changes.excluded.append(row_key)
            if self._table.pop(row_key, _ABSENT) is not _ABSENT:
                changes.changed = True
        elif self._table.get(row_key, _ABSENT) != decoded:
            self._table[row_key] = decoded
            changes.changed = True

    def _refuse(self, key: Hashable, skipped: SkippedRecord, changes: _Changes) -> None:
        self._refused[key] = skipped
        changes.refused.append(skipped)

    def _finish(self, changes: _Changes) -> bool:
        """Warn once about each record this read skipped that is still left out; return `changed`."""
        standing = set(map(id, self._refused.values()))
        for skipped in changes.refused:
            if id(skipped) in standing:
                log.warning("skipped %s", skipped.describe(self.topic))
        for key in dict.fromkeys(changes.excluded):
            if key in self._rows:
                value, partition, offset = self._rows[key]
                reason = self._excluded(key, value)
                if reason is not None:
                    log.warning(
                        "skipped %s", SkippedRecord(partition, offset, key, reason).describe(self.topic)
                    )
        if changes.changed:
            self._values = None
        return changes.changed


class RouteTableReader(TableReader[Route]):
    """The routes topic's reader: `values()` / `routes` is the route table the job routes with.

    `instance`, when given, is the instance (or the instances) whose tables are read (the others'
    records are no rows); `instance_routes` gives each row's instance with it.
    `databases`, when given, holds each instance's database names (`databases_by_instance`, from the
    catalogs): a route of an instance that is not there, or whose scope is none of its databases, is
    left out and listed in `skipped`. None checks neither (the catalogs are not known).
    """

    def __init__(
        self,
        kafka: Kafka,
        topic: str,
        *,
        instance: str | Collection[str] | None = None,
        databases: Mapping[str, Collection[str]] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(kafka, topic, RouteRecords(instance), timeout=timeout)
        self._databases = _frozen(databases)
        self._paired: tuple[tuple[str, Route], ...] = ()
        self._paired_of: tuple[Route, ...] | None = None  # the `values()` `_paired` was made with

    @property
    def routes(self) -> tuple[Route, ...]:
        """Every route of the table (expired ones included, R6), sorted by `instance/scope/name`."""
        return self.values()

    @property
    def instance_routes(self) -> tuple[tuple[str, Route], ...]:
        """Every route with the instance whose table holds it, sorted by `instance/scope/name`.

        Made again only after the table changed, as `values` is: a micro-batch that takes in a route
        change reads it twice, and with 100,000 routes each making took about 0.1 s.
        """
        values = self.values()
        if self._paired_of is not values:
            self._paired = tuple((split_route_key(key)[0], self._table[key]) for key in sorted(self._table))
            self._paired_of = values
        return self._paired

    def use_databases(self, databases: Mapping[str, Collection[str]] | None) -> bool:
        """Check routes against these databases by instance from now on; return whether the table changed."""
        wanted = _frozen(databases)
        if wanted == self._databases:
            return False
        self._databases = wanted
        return self._reconsider()

    def _excluded(self, key: str, value: Route) -> str | None:
        if self._databases is None:
            return None
        instance, _, _ = split_route_key(key)
        known = self._databases.get(instance)
        if known is None:
            return (
                f"route {value.scope}/{value.name} of instance {instance!r}: expected an instance of the "
                f"catalogs ({', '.join(sorted(self._databases))}); load its catalog "
                "(router catalogs load FILE)"
            )
        if value.scope in known:
            return None
        try:
            check_known_scope(value.scope, known, RECORD, route_subject(value.scope, value.name))
        except ConfigError as exc:
            return str(exc)
        return None


def _frozen(databases: Mapping[str, Collection[str]] | None) -> dict[str, frozenset[str]] | None:
    return None if databases is None else {k: frozenset(v) for k, v in databases.items()}


class CatalogTableReader(TableReader[Instance]):
    """The catalogs topic's reader: one instance catalog per key (the instance name)."""

    def __init__(self, kafka: Kafka, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(kafka, topic, CatalogRecords(), timeout=timeout)

    @property
    def instances(self) -> tuple[Instance, ...]:
        """Every instance catalog, sorted by instance name."""
        return self.values()


class MirrorTableReader(TableReader[MirrorRole]):
    """The mirrors topic's reader: each mirror partner's role by its normalized address (MI2, MI3)."""

    def __init__(self, kafka: Kafka, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(kafka, topic, MirrorRecords(), timeout=timeout)

    @property
    def roles(self) -> dict[str, MirrorRole]:
        """The role of every partner, keyed by normalized address (`normalize_address`)."""
        return dict(self._table)


def databases_by_instance(instances: Iterable[Instance]) -> dict[str, frozenset[str]]:
    """Each instance's database names: the scopes the routes of its tables may have."""
    return {instance.name: frozenset(d.name for d in instance.databases) for instance in instances}


def read_once(reader: TableReader[V]) -> TableRead[V]:
    """Read `reader`'s topic up to its end now, close the reader, and return what it read."""
    with reader:
        reader.read_to_end()
        return reader.snapshot()


def read_routes(
    kafka: Kafka,
    topic: str,
    *,
    instance: str | None = None,
    databases: Mapping[str, Collection[str]] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> TableRead[Route]:
    """Read the routes topic once, up to its end now (see `RouteTableReader`)."""
    return read_once(RouteTableReader(kafka, topic, instance=instance, databases=databases, timeout=timeout))


def read_catalog_table(
    kafka: Kafka, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> TableRead[Instance]:
    """Read the catalogs topic once, up to its end now."""
    return read_once(CatalogTableReader(kafka, topic, timeout=timeout))


def read_instances(
    kafka: Kafka, topic: str, wanted: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT_S
) -> dict[str, Instance]:
    """Every catalog on the catalogs topic, by instance name.

    Raises ConfigError naming those of `wanted` it does not hold, with the command that loads them.
    """
    by_name = {i.name: i for i in read_catalog_table(kafka, topic, timeout=timeout).values()}
    missing = [name for name in wanted if name not in by_name]
    if missing:
        raise ConfigError(
            f"instance(s) {', '.join(map(repr, missing))} not in the catalogs topic {topic!r} "
            f"(found {sorted(by_name)}); load it with `router catalogs load FILE`"
        )
    return by_name


def read_mirror_roles(
    kafka: Kafka, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> TableRead[MirrorRole]:
    """Read the mirrors topic once, up to its end now."""
    return read_once(MirrorTableReader(kafka, topic, timeout=timeout))
