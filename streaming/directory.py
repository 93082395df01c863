"""The dynamic routing service (docs/rules.md §1.10, B1-B9): MissingRoute requests answered from a directory.

When a database routes a message to a service it has no route for, and its table holds a route to
`SQL/ServiceBroker/BrokerConfiguration` (B1), the router delays the conversation and sends one
MissingRoute message per (table, service) to that service (M4, B2-B4). `DirectoryService` is the
service: it reads the BrokerConfiguration service's queue topics of one instance and answers each
request as B6 says:

* a service the directory file lists: it creates the route in the table that asked (its scope is
  the request's origin database; the route is named `directory:SERVICE`, with the address, broker
  instance and lifetime the directory gives), then ends the request's dialog;
* any other service: it ends the dialog with an error, and creates nothing.

Ending the dialog is the `asked: false` record of the request on the instance's requests topic,
naming the dialog (the request message's conversation id). The router ends the request then (B7):
the waiting conversations are routed again at their next retry (D2), and if there is still no route
they ask again. A directory file:

    # where the services this directory knows live (B6)
    services:
      - {service: Billing, address: "TCP://billing.example:4022"}
      - {service: Audit, broker_instance: 5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d,
         address: "TCP://audit.example:4022", lifetime_s: 3600}

An entry has the fields of a route without scope and name: `service` (required), `address`
(required), `broker_instance`, `mirror_address`, `lifetime_s` (counted from each answer; the route
expires then, B8). The file is checked as a route table is, with errors naming file and line.

The service commits its consumer group's offsets after each answer, so a restarted service goes on
where it stopped; a request answered twice creates the same route and ends the same dialog again.
The other BrokerConfigurationNotice messages (B9) are not sent by this router; one that arrives is
logged and left unanswered.

Given `metrics_port`, the service serves `/metrics` (`streaming.observe.directory_metrics`: the
requests answered by result, the records left unanswered by reason, when it last answered) and
`/healthz` (200 while its loop polls and Kafka answers, `streaming.observe.services`) until `close`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import TracebackType

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import Message as KafkaMessage

from streaming import topics
from streaming.errors import ConfigError, KafkaUnavailable, MalformedRecord
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import decode_message
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import ClientValue, Kafka, bootstrap_of, client_config
from streaming.kafka.consuming import TAKEOVER_SESSION_MS
from streaming.observe.directory_metrics import (
    ERROR,
    MALFORMED,
    NO_ORIGIN_DATABASE,
    NO_SERVICE_NAME,
    NOT_MISSING_ROUTE,
    ROUTE,
    DirectoryCollector,
    DirectoryFigures,
)
from streaming.observe.server import DEFAULT_HOST, Health, MetricsServer, new_registry, serve
from streaming.observe.services import HEALTH_BOUND_S, LoopWatch, ask_kafka
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, MISSING_ROUTE_MESSAGE_TYPE, Instance, Route
from streaming.tables.records import RequestRecord
from streaming.tables.topic_io import RecordWriter, produce_records, route_record
from streaming.tables.validate import ADDRESS_MAX as SERVICE_NAME_MAX
from streaming.tables.validate import (
    SYSNAME_MAX,
    check_known_fields,
    check_seconds,
    check_service,
    fail,
)
from streaming.tables.yaml_files import (
    LineDict,
    entry_mapping,
    parse_yaml,
    read_text,
    route_entry_operation,
    top_level_entries,
)

log = logging.getLogger("streaming.directory")

DIRECTORY_FIELDS = ("service", "address", "broker_instance", "mirror_address", "lifetime_s")
ROUTE_NAME_PREFIX = "directory:"
POLL_S = 0.5
DIRECTORY_SCOPE = "directory"
"""The scope a listing is checked with; each answer gives its route the scope that asked."""
NOW_UNUSED = datetime(2000, 1, 1, tzinfo=timezone.utc)
"""A listing has no expiry of its own: `lifetime_s` counts from each answer."""


@dataclass(frozen=True)
class Listing:
    """Where one service lives: the route the directory creates for it, without scope and name."""

    route: Route
    lifetime_s: float | None = None


@dataclass(frozen=True)
class Directory:
    """The services a dynamic routing service knows, by name (service names are case-sensitive)."""

    listings: Mapping[str, Listing]

    def route_for(self, service: str, scope: str, now: datetime) -> Route | None:
        """B6: the route to create in table `scope` for `service`, or None when it is not listed."""
        listing = self.listings.get(service)
        if listing is None:
            return None
        expires = None if listing.lifetime_s is None else now + timedelta(seconds=listing.lifetime_s)
        return replace(listing.route, scope=scope, name=route_name(service), expires_at=expires)


def route_name(service: str) -> str:
    """The name of the route the directory creates for `service`: `directory:SERVICE`.

    Where that would be longer than a route name may be, the service's SHA-256 prefix stands in.
    """
    name = ROUTE_NAME_PREFIX + service
    if len(name) <= SYSNAME_MAX:
        return name
    return ROUTE_NAME_PREFIX + "sha256-" + hashlib.sha256(service.encode("utf-8")).hexdigest()[:32]


def parse_directory(text: str, file: str) -> Directory:
    """Parse a directory YAML document (see the module docstring); errors name file and line."""
    listings: dict[str, Listing] = {}
    for index, (entry, source) in enumerate(
        top_level_entries(parse_yaml(text, file), file, "services", "services"), 1
    ):
        mapping = entry_mapping(entry, source, f"directory entry #{index}")
        where = source.at(mapping.line)
        raw = mapping.get("service")
        subject = f"directory entry {raw!r}" if isinstance(raw, str) else f"directory entry #{index}"
        check_known_fields(mapping, DIRECTORY_FIELDS, where, subject)
        if "service" not in mapping:
            fail(where, subject, "required", "service")
        service = check_service(raw, where.at(mapping.line_of("service")), subject)
        if service in listings:
            fail(where, subject, "listed twice; give each service one entry", "service")
        lifetime = None
        if mapping.get("lifetime_s") is not None:
            at = where.at(mapping.line_of("lifetime_s"))
            lifetime = check_seconds(mapping["lifetime_s"], at, subject, "lifetime_s", positive=True)
        fields = LineDict({k: v for k, v in mapping.items() if k != "lifetime_s"})
        fields.line, fields.key_lines = mapping.line, dict(getattr(mapping, "key_lines", {}))
        fields.update(scope=DIRECTORY_SCOPE, name=route_name(service))
        operation = route_entry_operation(
            fields, where, index, now=NOW_UNUSED, default_scope=None, subject=subject
        )
        assert operation.route is not None  # a create: route_entry_operation checked every field
        listings[service] = Listing(operation.route, lifetime)
    return Directory(listings)


def load_directory(path: Path) -> Directory:
    """Read and parse a directory file (see `parse_directory`)."""
    return parse_directory(read_text(path), str(path))


def requested_service(body: bytes) -> str:
    """B3: the service a MissingRoute message's XML body names; MalformedRecord when it names none."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise MalformedRecord(f"the MissingRoute body is not XML: {exc}") from exc
    # The body's namespace is the message type's URI (B3); a body without one is read too.
    service = (
        root.findtext(f"{{{MISSING_ROUTE_MESSAGE_TYPE}}}SERVICE_NAME") or root.findtext("SERVICE_NAME") or ""
    )
    if not service or len(service) > SERVICE_NAME_MAX:
        raise MalformedRecord(f"the MissingRoute body names no service (SERVICE_NAME): {body[:120]!r}")
    return service


@dataclass(frozen=True)
class Answer:
    """How the service answered one request: the route it created, or the error it ended with."""

    scope: str
    service: str
    request_id: str
    route: Route | None
    error: str | None = None

    def line(self) -> str:
        """One line for people."""
        asked = f"{self.scope} asked for {self.service}"
        if self.route is not None:
            lifetime = (
                "" if self.route.expires_at is None else f", until {self.route.expires_at:%Y-%m-%dT%H:%M:%SZ}"
            )
            return f"{asked}: created route {self.route.name} to {self.route.address}{lifetime}"
        return f"{asked}: ended with an error: {self.error}"


class DirectoryService:
    """The dynamic routing service of one instance (see the module docstring).

    `instance` is the instance's catalog: the service reads the BrokerConfiguration queue of each
    of its databases that hosts the service. `serve(stop)` answers until `stop` is set. Given
    `metrics_port`, its metrics and health are served from construction until `close` (or the end
    of a `with` block); `health_bound_s` is how long its loop may go without polling, or Kafka
    without answering it, and still be healthy.
    """

    def __init__(
        self,
        kafka: Kafka,
        instance: Instance,
        directory: Directory,
        *,
        prefix: str = topics.DEFAULT_PREFIX,
        group: str | None = None,
        on_answer: Callable[[Answer], None] | None = None,
        metrics_port: int = 0,
        metrics_host: str = DEFAULT_HOST,
        health_bound_s: float = HEALTH_BOUND_S,
    ) -> None:
        self.kafka = kafka
        self.instance = instance
        self.directory = directory
        self.prefix = prefix
        self.on_answer = on_answer
        hosting = [d.name for d in instance.databases if BROKER_CONFIGURATION_SERVICE in d.services]
        if not hosting:
            raise ConfigError(
                f"no database of instance {instance.name} hosts {BROKER_CONFIGURATION_SERVICE}: add it to "
                "a database's services in the catalog, and route to it (B1)"
            )
        self.queues = [
            topics.queue_topic(instance.name, d, BROKER_CONFIGURATION_SERVICE, prefix) for d in hosting
        ]
        self.routes_topic = topics.routes_topic(prefix)
        self.requests_topic = topics.requests_topic(instance.name, prefix)
        self.group = group or f"router-directory-{instance.name}"
        self._writer: RecordWriter | None = None
        """The producer of the answers while `serve` runs."""
        self.answered = 0
        self.figures = DirectoryFigures()
        labels = {"instance": instance.name, "service": BROKER_CONFIGURATION_SERVICE}
        self.watch = LoopWatch(labels, health_bound_s)
        """What its loop last did: its health (`health`)."""
        self.metrics_server: MetricsServer | None = None
        if metrics_port:
            registry = new_registry()
            databases = [d.name for d in instance.databases]
            registry.register(DirectoryCollector(instance.name, databases, self.figures, self.watch))
            self.metrics_server = serve(registry, self.health, metrics_port, metrics_host)

    def __enter__(self) -> DirectoryService:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving metrics and health (the loop itself stops on `serve`'s event)."""
        self.watch.stop("the service is closed")
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None

    def health(self) -> Health:
        """200 while the loop polls and Kafka answers it, each within `health_bound_s`; else 503, why."""
        return self.watch.health()

    def serve(self, stop: threading.Event) -> int:
        """Answer every request on the queues until `stop` is set; return how many were answered."""
        ensure_topics(self.kafka, self.queues)
        ensure_topics(self.kafka, [self.routes_topic, self.requests_topic], compacted=True)
        self._writer = RecordWriter(self.kafka, upserts=True)
        settings: dict[str, ClientValue] = {
            "group.id": self.group,
            "session.timeout.ms": TAKEOVER_SESSION_MS,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        consumer = Consumer(client_config(self.kafka, **settings), logger=librdkafka_log())
        self.watch.restart()
        try:
            consumer.subscribe(self.queues)
            while not stop.is_set():
                record = consumer.poll(POLL_S)
                self.watch.polled()
                if record is None:
                    # An idle poll returns on time while the broker is away: ask it, when watched.
                    if self.metrics_server is not None and self.watch.kafka_due():
                        ask_kafka(self.watch, consumer, self.queues[0])
                    continue
                error = record.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("reading %s: %s", record.topic(), error.str())
                    continue
                self.watch.kafka_answered()
                self.take(record)
                consumer.commit(message=record, asynchronous=False)
        except KafkaException as exc:
            failure = KafkaUnavailable(
                f"reading {', '.join(self.queues)} at {bootstrap_of(self.kafka)}: {exc}"
            )
            self.watch.stop(f"the service failed: {failure}")
            raise failure from exc
        except BaseException as exc:
            self.watch.stop(f"the service failed: {exc!r}")
            raise
        finally:
            self.watch.stop("the service has stopped")  # kept only when no failure said why
            consumer.close()
            self._writer.close()
            self._writer = None
        return self.answered

    def take(self, record: KafkaMessage) -> Answer | None:
        """Answer one record of a queue: a MissingRoute request (B6); anything else is logged."""
        where = f"{record.topic()}[{record.partition()}]@{record.offset()}"
        try:
            message = decode_message(record.value())
        except MalformedRecord as exc:
            self._unanswered(where, MALFORMED, str(exc))
            return None
        if message.get("message_type") != MISSING_ROUTE_MESSAGE_TYPE:
            kind = message.get("message_type")
            self._unanswered(where, NOT_MISSING_ROUTE, f"a {kind} message, not MissingRoute (B9)")
            return None
        scope = message.get("origin_database")
        request_id = str(message["conversation_id"])
        if not scope:
            self._unanswered(where, NO_ORIGIN_DATABASE, "the MissingRoute request names no origin database")
            return None
        try:
            service = requested_service(message["body"])
        except MalformedRecord as exc:
            self._unanswered(where, NO_SERVICE_NAME, str(exc))
            return None
        answer = self.answer(str(scope), service, request_id)
        self.answered += 1
        self.figures.answered(answer.scope, ROUTE if answer.route is not None else ERROR, time.time())
        self.watch.did(answer.line())
        log.info("%s", answer.line())
        if self.on_answer is not None:
            self.on_answer(answer)
        return answer

    def _unanswered(self, where: str, reason: str, why: str) -> None:
        """Log and count a record left unanswered (`streaming.observe.directory_metrics.UNANSWERED`)."""
        log.warning("%s: left unanswered: %s", where, why)
        self.figures.unanswered(reason)
        self.watch.did(f"left {where} unanswered: {reason}")

    def answer(self, scope: str, service: str, request_id: str) -> Answer:
        """B6: create the route when the directory lists the service, then end the request's dialog."""
        route = self.directory.route_for(service, scope, datetime.now(timezone.utc))
        if route is not None:
            self._write(self.routes_topic, [route_record(self.instance.name, route)])
            answer = Answer(scope, service, request_id, route)
            how = f"route {route.name}"
        else:
            answer = Answer(scope, service, request_id, None, f"{service} is not in the directory")
            how = f"error: {answer.error}"
        end = RequestRecord(self.instance.name, scope, service, False, request_id, how)
        self._write(self.requests_topic, [(end.key(), end.value(), None)])
        return answer

    def _write(self, topic: str, records: list[tuple[bytes, bytes, None]]) -> None:
        """Write and wait: with the serving loop's producer, or one of its own outside the loop."""
        if self._writer is not None:
            self._writer.write(topic, records)
        else:
            produce_records(self.kafka, topic, records, upserts=True)
