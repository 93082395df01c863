"""B4 on the driver: the MissingRoute requests outstanding, one at a time per (scope, service).

Each instance the query routes has its own requests (and its own requests topic).

A handful of requests can be outstanding at once, so they live on the driver, with the rules of
`streaming.rules.memory.Requests`, and on the instance's compacted requests topic (key: instance,
scope and service; a JSON value saying whether a request is outstanding): the job reads the topic
when it starts, learns the requests a batch makes from that batch's observed metrics (the batch
itself writes their records, in its one Kafka write), and ends a request (B6, B7) when a route
naming its service appears in its scope, writing an `asked: false` record.

A batch that asked and was then repeated after a crash may ask once more: the request records it
wrote are read at the next start, the MissingRoute message may be sent twice (at least once).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from streaming import topics
from streaming.config import Settings
from streaming.rules.memory import Requests
from streaming.rules.model import Route
from streaming.spark.sources import Topology
from streaming.tables.reader import TableReader
from streaming.tables.topic_io import produce_records
from streaming.tables.validate import RECORD, fail

log = logging.getLogger("streaming.requests")


@dataclass(frozen=True)
class RequestRecord:
    """One record of the requests topic: a request of `instance`'s table `scope` for `service`."""

    instance: str
    scope: str
    service: str
    asked: bool

    def key(self) -> bytes:
        """instance, scope and service joined by NUL: one key per request (the topic is compacted)."""
        return "\u0000".join((self.instance, self.scope, self.service)).encode("utf-8")

    def value(self) -> bytes:
        """The JSON value (`streaming.spark.output` writes the same for a request a batch makes)."""
        fields = {"instance": self.instance, "scope": self.scope, "service": self.service}
        return json.dumps({**fields, "asked": self.asked}).encode("utf-8")


class _RequestRecords:
    """The requests topic's records, for `TableReader`."""

    what = "MissingRoute request"

    def row_key(self, key: str) -> str:
        return key

    def row_value(self, key: str, value: bytes) -> RequestRecord:
        try:
            f = json.loads(value)
            record = RequestRecord(f["instance"], f["scope"], f["service"], bool(f["asked"]))
        except (ValueError, KeyError, TypeError):
            expected = "expected JSON with instance, scope, service and asked"
            fail(RECORD, "request", f"{expected}, got {value[:80]!r}")
        return record


InstanceRequest = tuple[str, str, str]
"""A request of one instance's table: (instance, scope, service)."""


class OutstandingRequests:
    """The outstanding MissingRoute requests of the instances a query routes (see the module docstring)."""

    def __init__(self, settings: Settings, topology: Topology) -> None:
        self.settings = settings
        self.topology = topology
        self.memory: dict[str, Requests] = {i.name: Requests() for i in topology.instances}
        for topic in topology.requests:
            with TableReader(settings.kafka, topic, _RequestRecords()) as reader:
                reader.read_to_end()
                for row in reader.values():
                    if row.instance in self.memory:
                        held = self.memory[row.instance]
                        self.memory[row.instance] = held.record((row.scope, row.service), row.asked, 0)

    @property
    def pending(self) -> frozenset[InstanceRequest]:
        """(instance, scope, service) of every request outstanding."""
        return frozenset(
            (name, scope, service) for name, m in self.memory.items() for scope, service in m.pending
        )

    def asked(self, requests: Iterable[InstanceRequest], at_ms: int) -> bool:
        """A batch made these requests (its records are written); return whether any is new."""
        before = self.pending
        for instance, scope, service in requests:
            if instance in self.memory:
                self.memory[instance] = self.memory[instance].record((scope, service), True, at_ms)
        return self.pending != before

    def end_answered(self, routes: Iterable[tuple[str, Route]], at_ms: int) -> list[InstanceRequest]:
        """B6, B7: end the requests a route of their instance's table now answers; write their records."""
        by_instance: dict[str, dict[str, list[str | None]]] = {}
        for instance, route in routes:
            by_instance.setdefault(instance, {}).setdefault(route.scope, []).append(route.service)
        answered: list[InstanceRequest] = []
        for name, memory in self.memory.items():
            found = sorted(memory.answered(by_instance.get(name, {})))
            if not found:
                continue
            records = [RequestRecord(name, scope, service, False) for scope, service in found]
            produce_records(
                self.settings.kafka,
                topics.requests_topic(name, self.topology.prefix),
                [(r.key(), r.value(), None) for r in records],
            )
            for request in found:
                memory = memory.record(request, False, at_ms)
            self.memory[name] = memory
            answered += [(name, scope, service) for scope, service in found]
        if answered:
            log.info("MissingRoute request(s) answered by a route: %s", answered)
        return answered
