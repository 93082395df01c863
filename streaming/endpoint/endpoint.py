"""A service's endpoint: dialogs over the router, with Service Broker's delivery guarantees.

An `Endpoint` is one service of one database of one instance. It writes what the service sends to
the instance's outbound topic (the router takes it from there) and reads the service's queue topic
(where the router delivers what is for the service: messages, replies, acknowledgements). Its
dialogs live in a `DialogStore` file, so a killed endpoint starts again where it was.

    endpoint = Endpoint(kafka, instance="i1", database="AW", service="InitiatorService", store=path)
    dialog = endpoint.begin_dialog("OrderParts", lifetime_s=600)
    dialog.send(b"<order/>")
    for message in endpoint.receive(timeout_s=5):   # replies, EndDialog, Error, DialogTimer
        message.dialog.end()

What it does for the service (docs/rules.md §1.8, §1.15, §1.16):
- numbers every message of a dialog side (A6) and keeps it until the far endpoint acks it,
  resending it with backoff (A3: `retry_first_s`, doubled each time, at most `retry_cap_s`);
- acks every sequenced message it takes, once it is in the store's queue (A1), acks duplicates
  again without queueing them (A4), and hands messages over in sequence order (a DialogTimer,
  then an Error, ahead of the rest: §1.15's receive order);
- pins a dialog to the broker instance of the database whose endpoint first acked or answered
  (A2): every later message, resends included, names it;
- gives each message the dialog's lifetime (`expires_at`, F3), and when the lifetime passes queues
  a time-out Error on each side and refuses further sends (CL1, D4);
- gives each message it writes the same hop budget (`hops`, F3: `hops_remaining`, 16 unless
  given; SQL Server does not document its initial value), which each forwarder lowers by one;
- EndDialog goes after the dialog's earlier messages; an Error drops what is unacked (CL3);
  a DialogTimer is queued here and never sent (CL4);
- forgets a dialog once both sides ended it and nothing is unacked.

The endpoint works when the service calls it (`receive`, `pump`, `wait_acknowledged`): a service
that only sends calls `pump` now and then so that acks are taken and resends go out. One process
serves a store file at a time: a second one on the same store is refused with `StoreInUse` (two
would each resend what the other sent), and may wait for it as a standby (`wait_for_store`).

Given `metrics_port`, the endpoint serves `/metrics` and `/healthz` on it (on `metrics_host`,
127.0.0.1 by default) until it is closed (`streaming.observe.server`): its counts and its store's
figures (`streaming.endpoint.metrics`), and 200 while it pumps and Kafka answers, each
within `health_bound_s` (`streaming.observe.services`). A process that serves its own metrics
adds the endpoint's to its registry with `observe` instead.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaMessage
from prometheus_client import CollectorRegistry

from streaming import topics
from streaming.endpoint.metrics import EndpointCollector, EndpointCounts
from streaming.endpoint.protocol import (
    ACKNOWLEDGEMENT,
    DEFAULT_MESSAGE_TYPE,
    DIALOG_TIMER,
    END_DIALOG,
    ERROR,
    RETRY_CAP_S,
    RETRY_FIRST_S,
    UNSEQUENCED,
    ErrorBody,
    ack_body,
    check_application_error,
    error_body,
    parse_error_body,
    retry_wait_s,
)
from streaming.endpoint.store import AckDue, DialogRow, DialogStore, Incoming, Pending, Side
from streaming.errors import ConfigError, MalformedRecord
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import Kafka, client_config, producer_config
from streaming.kafka.consuming import TAKEOVER_SESSION_MS, take_arrived
from streaming.observe.server import DEFAULT_HOST, Health, MetricsServer, new_registry, serve
from streaming.observe.services import HEALTH_BOUND_S, LoopWatch, ask_kafka
from streaming.rules.model import CURRENT_DATABASE, DEFAULT_HOPS, MAX_HOPS, Database, canonical_guid
from streaming.tables.reader import read_instances

log = logging.getLogger("streaming.endpoint")
_LIBRDKAFKA_LOG = librdkafka_log()

_MESSAGE_IDS = uuid.UUID("5b2f1c1e-8d0a-4f7e-9c55-0e4a7d3b6f21")
"""The namespace of message ids: a resend carries the id of the message it repeats."""
_POLL_BATCH = 500
_FORGET_EVERY_S = 60.0
_RESERVED_TYPES = (END_DIALOG, ERROR, DIALOG_TIMER, ACKNOWLEDGEMENT)


@dataclass(frozen=True)
class Received:
    """A message handed to the service: its dialog, type and body (acks never are, A1)."""

    dialog: Dialog
    sequence: int
    message_type: str
    body: bytes
    far_service: str

    @property
    def is_end_dialog(self) -> bool:
        """The far side ended the dialog (CL3); answer with `dialog.end()`."""
        return self.message_type == END_DIALOG

    @property
    def is_error(self) -> bool:
        """The dialog failed: the far side's Error, or this side's time-out (CL1, CL3)."""
        return self.message_type == ERROR

    @property
    def is_timer(self) -> bool:
        """A conversation timer this side set has fired (CL4)."""
        return self.message_type == DIALOG_TIMER

    @property
    def error(self) -> ErrorBody | None:
        """An Error message's code and description; None for any other message."""
        if not self.is_error:
            return None
        try:
            return parse_error_body(self.body)
        except ValueError:
            return ErrorBody(0, self.body.decode("utf-8", errors="replace"))


@dataclass(frozen=True)
class Dialog:
    """One side of a dialog held by an endpoint; its state is in the endpoint's store."""

    endpoint: Endpoint = field(repr=False)
    conversation_id: str
    is_initiator: bool

    @property
    def side(self) -> Side:
        """The store's key of this side."""
        return (self.conversation_id, self.is_initiator)

    @property
    def far_broker_instance(self) -> str | None:
        """The far database's broker instance: named at BEGIN DIALOG or pinned by an ack (A2)."""
        row = self.endpoint.store.dialog(self.side)
        return None if row is None else row.far_broker_instance

    @property
    def pinned(self) -> bool:
        """An ack or reply from the far database fixed the dialog to it (A2)."""
        row = self.endpoint.store.dialog(self.side)
        return row is not None and row.pinned

    def send(self, body: bytes, message_type: str = DEFAULT_MESSAGE_TYPE) -> int:
        """SEND ON CONVERSATION; returns the message's sequence number. Raises DialogClosed."""
        if message_type in _RESERVED_TYPES:
            raise ValueError(
                f"message type {message_type!r} is the protocol's own: "
                "use end(), end_with_error() or begin_timer()"
            )
        return self.endpoint._send(self.side, message_type, body)

    def end(self) -> None:
        """END CONVERSATION: EndDialog after the dialog's earlier messages (CL3).

        A dialog that failed or timed out just ends here. Ending twice does nothing.
        """
        self.endpoint._end(self.side)

    def end_with_error(self, code: int, description: str) -> None:
        """END CONVERSATION WITH ERROR: unacked messages are dropped, the Error sent (CL3)."""
        check_application_error(code, description)
        self.endpoint._end_with_error(self.side, code, description)

    def begin_timer(self, seconds: float) -> None:
        """BEGIN CONVERSATION TIMER: a DialogTimer message is queued here after `seconds` (CL4)."""
        self.endpoint.store.set_timer(self.side, self.endpoint._now_ms() + int(seconds * 1000))


class Endpoint:
    """A service's endpoint (see the module docstring)."""

    def __init__(
        self,
        kafka: Kafka,
        *,
        instance: str,
        database: str,
        service: str,
        store: str | Path,
        prefix: str = topics.DEFAULT_PREFIX,
        retry_first_s: float = RETRY_FIRST_S,
        retry_cap_s: float = RETRY_CAP_S,
        clock: Callable[[], float] = time.time,
        metrics_port: int = 0,
        metrics_host: str = DEFAULT_HOST,
        health_bound_s: float = HEALTH_BOUND_S,
        hops: int = DEFAULT_HOPS,
    ) -> None:
        """Connect, read the endpoint's database from the catalogs, open the store (see the class).

        `hops`: the hop budget of every message it writes (F3, 0-255), acks and resends included.

        `metrics_port`: serve `/metrics` and `/healthz` there until `close` (0: no server);
        `health_bound_s`: how long the endpoint may go without a pump, or Kafka without answering
        one, and still be healthy.
        """
        if retry_first_s <= 0 or retry_cap_s < retry_first_s:
            raise ConfigError(
                f"expected 0 < retry_first_s <= retry_cap_s, got {retry_first_s} and {retry_cap_s}"
            )
        if not 0 <= hops <= MAX_HOPS:
            raise ConfigError(
                f"expected hops (a hop budget, F3) from 0 to {MAX_HOPS}, got {hops}: hops_remaining is a "
                "tinyint (0: no forwarder may forward the message)"
            )
        labels = {"instance": instance, "database": database, "service": service}
        self.watch = LoopWatch(labels, health_bound_s, clock)
        """What its pump last did: its health (`health`)."""
        self.kafka = kafka
        self.instance = instance
        self.service = service
        self.retry_first_s = retry_first_s
        self.retry_cap_s = retry_cap_s
        self.hops = hops
        self.counts = EndpointCounts()
        self._clock = clock
        self.database = _database(kafka, prefix, instance, database, service)
        self.outbound = topics.outbound_topic(instance, prefix)
        self.queue = topics.queue_topic(instance, database, service, prefix)
        ensure_topics(kafka, [self.outbound, self.queue])
        self.store = DialogStore(store)
        self._producer = Producer(producer_config(kafka, **{"linger.ms": 5}), logger=_LIBRDKAFKA_LOG)
        consumer_settings: dict[str, str | bool | int] = {
            # The queue topic names the prefix too: two deployments on one cluster never share a group.
            "group.id": f"router-endpoint.{self.queue}",
            "session.timeout.ms": TAKEOVER_SESSION_MS,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        self._consumer = Consumer(
            client_config(kafka, **consumer_settings),
            logger=_LIBRDKAFKA_LOG,
        )
        self._consumer.subscribe([self.queue])
        self._forgotten_at = 0.0
        self._asks_kafka = False
        self.metrics_server: MetricsServer | None = None
        if metrics_port:
            registry = new_registry()
            self.observe(registry)
            try:
                self.metrics_server = serve(registry, self.health, metrics_port, metrics_host)
            except BaseException:
                self.close()
                raise

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the metrics server, send what is produced and not yet delivered, close clients and store.

        The input's offsets are committed once more, and waited for: what the store took is not
        read again at the next start (it would only be a duplicate, A4, but costs a pass).
        """
        self.watch.stop("the endpoint is closed")
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
        self._producer.flush(10)
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed: nothing to commit
                log.warning("committing %s's offsets at close: %s", self.queue, exc)
        self._consumer.close()
        self.store.close()

    # --- what it tells ------------------------------------------------------------------------

    def observe(self, registry: CollectorRegistry) -> None:
        """Add the endpoint's metrics to `registry` (a process's, served by it) and watch Kafka answer.

        The metrics are read when scraped (`streaming.endpoint.metrics`). From now on a
        pump that brings nothing asks Kafka, every few seconds, whether it answers (`health`).
        """
        labels = {"instance": self.instance, "database": self.database.name, "service": self.service}
        registry.register(EndpointCollector(labels, self.counts, self.store.path, self.watch))
        self._asks_kafka = True

    def health(self) -> Health:
        """200 while the endpoint pumps and Kafka answers it, each within `health_bound_s`; else 503, why.

        Kafka is asked only once the endpoint is observed (`metrics_port`, `observe`); before, only
        records arriving show that it answers.
        """
        return self.watch.health()

    # --- dialogs ------------------------------------------------------------------------------

    def begin_dialog(
        self,
        service: str,
        broker_instance: str | None = None,
        *,
        lifetime_s: float | None = None,
        conversation_id: str | None = None,
    ) -> Dialog:
        """BEGIN DIALOG to `service`; returns the initiator's side.

        `broker_instance` names one database (a GUID, or `CURRENT DATABASE`: this endpoint's own,
        K1); `lifetime_s` is the dialog's lifetime (CL1: none means it never times out).
        `conversation_id` gives the dialog an id of the caller's (a new random one otherwise): a
        service that derives it from what it answers begins the same dialog again when it answers
        again after a crash, and the far side takes the repeated messages as duplicates (A4).
        """
        if not service:
            raise ValueError("expected a target service name, got an empty one")
        if lifetime_s is not None and lifetime_s <= 0:
            raise ValueError(f"expected a lifetime > 0 seconds, got {lifetime_s}")
        target = None
        if broker_instance is not None:
            if broker_instance.strip().upper() == CURRENT_DATABASE:
                target = self.database.broker_instance
            else:
                target = canonical_guid(broker_instance)
        expires = None if lifetime_s is None else self._now_ms() + int(lifetime_s * 1000)
        conversation_id = conversation_id or str(uuid.uuid4())
        self.store.begin(conversation_id, service, target, expires)
        return Dialog(self, conversation_id, True)

    def dialog(self, conversation_id: str, is_initiator: bool) -> Dialog | None:
        """The dialog side held here (after a restart, say), or None."""
        if self.store.dialog((conversation_id, is_initiator)) is None:
            return None
        return Dialog(self, conversation_id, is_initiator)

    def dialogs(self) -> list[Dialog]:
        """Every dialog side held here."""
        return [Dialog(self, row.conversation_id, row.initiator) for row in self.store.dialogs()]

    # --- receiving and the protocol's own work ------------------------------------------------

    def receive(self, timeout_s: float = 1.0, max_messages: int = 100) -> list[Received]:
        """RECEIVE: up to `max_messages` queued messages, waiting at most `timeout_s` for one."""
        deadline = time.monotonic() + timeout_s
        while True:
            taken = self.take(max_messages)
            if taken:
                return taken
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            self.pump(min(left, 0.5))

    def take(self, max_messages: int = 100) -> list[Received]:
        """RECEIVE what is queued now, without waiting or reading Kafka (see `transaction`)."""
        return [
            Received(
                Dialog(self, q.conversation_id, q.initiator),
                q.sequence,
                q.message_type,
                q.body,
                q.far_service,
            )
            for q in self.store.take(max_messages)
        ]

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """RECEIVE and what answers it in one transaction of the store (`DialogStore.transaction`).

        Inside it, `take` the messages and send, begin and end dialogs: if the process dies before
        it ends, the store is as before it, and the messages are taken again at the next start.
        What was produced meanwhile is produced again with the same ids, duplicates the far side
        drops (A4), so a dialog begun inside one should have an id derived from what it answers.
        Do not `receive` or `pump` inside one: what arrives must be committed before it is acked.
        """
        return self.store.transaction()

    def messages(self, idle_s: float | None = None) -> Iterator[Received]:
        """Every message as it comes; ends after `idle_s` without one (None: never)."""
        idle_since = time.monotonic()
        while idle_s is None or time.monotonic() - idle_since < idle_s:
            for message in self.receive(timeout_s=0.5):
                idle_since = time.monotonic()
                yield message

    def pump(self, timeout_s: float = 0.0) -> int:
        """Do the protocol's work once; return how many records arrived.

        Takes what arrived (waiting up to `timeout_s`) and acks it, resends what is due, times out
        expired dialogs and fires timers.
        """
        records = take_arrived(self._consumer, _POLL_BATCH, timeout_s)
        arrived: list[Incoming] = []
        acks: list[Incoming] = []
        for record in records:
            incoming = self._incoming(record)
            if incoming is not None:
                (acks if incoming.message_type == ACKNOWLEDGEMENT else arrived).append(incoming)
        now_ms = self._now_ms()
        if acks:
            freed = self.store.acknowledged(acks, now_ms)
            self.counts.acks_received += len(acks)
            self.counts.acked += freed
        if arrived:
            due, counts = self.store.arrive(arrived, now_ms)
            self.counts.add(counts)
            for ack in due:
                self._produce_ack(ack, now_ms)
        if records:
            # The store holds what they changed: from here a restart need not read them again.
            self._consumer.commit(asynchronous=True)
        resent = self._resend(now_ms)
        self.counts.expired += self.store.expire(now_ms)
        self.store.fire_timers(now_ms)
        if time.monotonic() - self._forgotten_at > _FORGET_EVERY_S:
            self.store.forget_ended(now_ms)
            self._forgotten_at = time.monotonic()
        self._producer.poll(0)
        self._watched(records, len(arrived), len(acks), resent)
        return len(records)

    def _watched(self, records: list[KafkaMessage], arrived: int, acks: int, resent: int) -> None:
        """Tell the watch what the pump did; a watched pump that brought nothing asks Kafka now and then."""
        self.watch.polled()
        if any(record.error() is None for record in records):
            self.watch.kafka_answered()
        elif self._asks_kafka and self.watch.kafka_due():
            ask_kafka(self.watch, self._consumer, self.queue)
        done = [f"read {arrived} message(s) and {acks} ack(s)"] if arrived or acks else []
        if resent:
            done.append(f"resent {resent} message(s)")
        if done:
            self.watch.did(", ".join(done))

    def wait_acknowledged(self, timeout_s: float) -> bool:
        """Pump until every sent message is acked, or `timeout_s` passed; return whether all were."""
        deadline = time.monotonic() + timeout_s
        while self.store.unacknowledged():
            if time.monotonic() > deadline:
                return False
            self.pump(0.5)
        self._producer.flush(10)
        return True

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait until what was produced is written to Kafka; return how many records are not yet."""
        return int(self._producer.flush(timeout_s))

    def unacknowledged(self) -> int:
        """How many sent messages await an ack."""
        return self.store.unacknowledged()

    # --- what the dialogs send ----------------------------------------------------------------

    def _send(self, side: Side, message_type: str, body: bytes) -> int:
        now_ms = self._now_ms()
        row, sequence = self.store.send(side, message_type, body, now_ms, now_ms + self._wait_ms(0))
        self._produce(row, Pending(side[0], side[1], sequence, message_type, body, now_ms, 0))
        self.counts.sent += 1
        return sequence

    def _end(self, side: Side) -> None:
        row = self.store.dialog(side)
        if row is None or (row.local_ended and row.error is None):
            return
        expired = row.expires_ms is not None and row.expires_ms <= self._now_ms()
        if row.error is not None or expired:
            self.store.end_locally(side, self._now_ms())
            return
        self._send(side, END_DIALOG, b"")

    def _end_with_error(self, side: Side, code: int, description: str) -> None:
        now_ms = self._now_ms()
        body = error_body(code, description)
        row, sequence = self.store.end_with_error(side, now_ms, now_ms + self._wait_ms(0), body)
        self._produce(row, Pending(side[0], side[1], sequence, ERROR, body, now_ms, 0))
        self.counts.sent += 1

    def _resend(self, now_ms: int) -> int:
        """A3: produce again what waited too long for its ack; return how many."""
        due = self.store.due(now_ms)
        if not due:
            return 0
        resent: list[tuple[Pending, int]] = []
        rows: dict[Side, DialogRow | None] = {}
        for pending in due:
            side = (pending.conversation_id, pending.initiator)
            if side not in rows:
                rows[side] = self.store.dialog(side)
            row = rows[side]
            if row is None:
                continue
            self._produce(row, pending)
            resent.append((pending, now_ms + self._wait_ms(pending.resends + 1)))
        self.store.resent(resent)
        self.counts.resent += len(resent)
        log.debug("resent %d unacknowledged message(s)", len(resent))
        return len(resent)

    def _produce(self, row: DialogRow, pending: Pending) -> None:
        """Produce a sequenced message of `row`; a resend names the dialog's pin as it is now (A2)."""
        side = f"{row.conversation_id}/{int(row.initiator)}/{pending.sequence}"
        self._write_message(
            message_id=str(uuid.uuid5(_MESSAGE_IDS, side)),
            conversation_id=row.conversation_id,
            sequence_number=pending.sequence,
            to_service=row.far_service,
            to_broker_instance=row.far_broker_instance,
            is_initiator=row.initiator,
            message_type=pending.message_type,
            body=pending.body,
            time_to_live_ms=None if row.expires_ms is None else max(0, row.expires_ms - pending.enqueued_ms),
            enqueued_ms=pending.enqueued_ms,
        )

    def _produce_ack(self, ack: AckDue, now_ms: int) -> None:
        """A1: an unsequenced ack to the message's sender, carrying this database's broker instance (A2)."""
        self._write_message(
            message_id=str(uuid.uuid4()),
            conversation_id=ack.conversation_id,
            sequence_number=UNSEQUENCED,
            to_service=ack.to_service,
            to_broker_instance=ack.to_broker_instance,
            is_initiator=ack.initiator,
            message_type=ACKNOWLEDGEMENT,
            body=ack_body(ack.through),
            time_to_live_ms=None,
            enqueued_ms=now_ms,
        )
        self.counts.acks_sent += 1

    def _write_message(self, *, enqueued_ms: int, **fields: Any) -> None:
        """Produce a message from this service and database to the outbound topic."""
        record = new_message_record(
            from_service=self.service,
            from_broker_instance=self.database.broker_instance,
            origin_database=self.database.name,
            enqueued_at=datetime.fromtimestamp(enqueued_ms / 1000, timezone.utc),
            hops_remaining=self.hops,
            **fields,
        )
        self._write(str(fields["conversation_id"]), encode_message(record))

    def _write(self, key: str, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(
                    self.outbound, value=value, key=key.encode("utf-8"), on_delivery=_delivered
                )
                return
            except BufferError:  # the producer's queue is full: let it send, then try again
                self._producer.poll(0.1)

    def _incoming(self, record: KafkaMessage) -> Incoming | None:
        error = record.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("reading %s: %s", self.queue, error.str())
            return None
        try:
            message = decode_message(record.value())
        except MalformedRecord as exc:
            self.counts.malformed += 1
            log.warning("%s offset %s: skipped: %s", self.queue, record.offset(), exc)
            return None
        expires = message.get("expires_at")
        return Incoming(
            conversation_id=str(message["conversation_id"]),
            sequence=int(message["sequence_number"]),
            from_initiator=bool(message["is_initiator"]),
            from_service=str(message["from_service"]),
            from_broker_instance=message.get("from_broker_instance"),
            message_type=str(message["message_type"]),
            body=bytes(message["body"]),
            expires_ms=None if expires is None else int(_as_datetime(expires).timestamp() * 1000),
        )

    def _wait_ms(self, resends: int) -> int:
        return int(retry_wait_s(resends, self.retry_first_s, self.retry_cap_s) * 1000)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return datetime.fromtimestamp(int(value) / 1000, timezone.utc)


def _delivered(error: KafkaError | None, message: KafkaMessage) -> None:
    if error is not None:  # the message stays unacked and is resent (A3)
        log.warning(
            "a message for %s was not written: %s; it is resent when due", message.topic(), error.str()
        )


def _database(kafka: Kafka, prefix: str, instance: str, database: str, service: str) -> Database:
    """The endpoint's database from the catalogs topic; ConfigError naming what is missing."""
    found = read_instances(kafka, topics.catalogs_topic(prefix), [instance])[instance]
    db = found.database(database)
    if db is None:
        raise ConfigError(
            f"database {database!r} is not in instance {instance}'s catalog "
            f"(found {[d.name for d in found.databases]})"
        )
    if service not in db.services:
        raise ConfigError(
            f"service {service!r} is not hosted by {instance}/{database} "
            f"(its services: {list(db.services)}); add it to the database's services in the catalog"
        )
    return db
