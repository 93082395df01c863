"""B4 on the driver: the MissingRoute requests outstanding, one at a time per (scope, service).

Each instance the query routes has its own requests (and its own requests topic).

A handful of requests can be outstanding at once, so they live on the driver, with the rules of
`streaming.rules.memory.Requests`, and on the instance's compacted requests topic (key: instance,
scope and service; a JSON value saying whether a request is outstanding, and the id of its
MissingRoute dialog): the job reads the topic when it starts, learns the requests a batch makes
from that batch's observed metrics (the batch itself writes their records, in its one Kafka write),
and ends a request (B6, B7) in either of two ways:

* a route naming its service appears in its scope: the job writes an `asked: false` record;
* the dynamic routing service ends the request's dialog (`streaming.directory`), with a route
  created or with an error: it writes the `asked: false` record, naming the dialog it ends, and
  the job, which keeps reading the topic, takes it before its next micro-batch. An end naming an
  older dialog than the one outstanding is ignored.

A batch that asked and was then repeated after a crash may ask once more: the request records it
wrote are read at the next start, the MissingRoute message may be sent twice (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from streaming import topics
from streaming.config import Settings
from streaming.rules.memory import Requests
from streaming.rules.model import Route
from streaming.tables.reader import TableReader
from streaming.tables.records import InstanceRequest, RequestRecord, RequestRecords
from streaming.tables.topic_io import produce_records
from streaming.topology import Topology

log = logging.getLogger("streaming.requests")


class OutstandingRequests:
    """The outstanding MissingRoute requests of the instances a query routes (see the module docstring)."""

    def __init__(self, settings: Settings, topology: Topology) -> None:
        self.settings = settings
        self.topology = topology
        self.memory: dict[str, Requests] = {i.name: Requests() for i in topology.instances}
        self.dialogs: dict[InstanceRequest, str] = {}
        """The MissingRoute dialog of each outstanding request, where its record names it."""
        self._readers = [TableReader(settings.kafka, topic, RequestRecords()) for topic in topology.requests]
        for reader in self._readers:
            reader.read_to_end()
            for row in reader.values():
                if row.instance in self.memory:
                    held = self.memory[row.instance]
                    self.memory[row.instance] = held.record((row.scope, row.service), row.asked, 0)
                    if row.asked and row.request_id is not None:
                        self.dialogs[row.request] = row.request_id

    def close(self) -> None:
        """Stop reading the requests topics."""
        for reader in self._readers:
            reader.close()

    @property
    def pending(self) -> frozenset[InstanceRequest]:
        """(instance, scope, service) of every request outstanding."""
        return frozenset(
            (name, scope, service) for name, m in self.memory.items() for scope, service in m.pending
        )

    def asked(self, requests: Iterable[tuple[str, str, str, str]], at_ms: int) -> bool:
        """A batch made these requests and wrote their records; return whether any is new.

        Each is (instance, scope, service, the id of its MissingRoute dialog).
        """
        before = self.pending
        for instance, scope, service, dialog in requests:
            if instance in self.memory:
                self.memory[instance] = self.memory[instance].record((scope, service), True, at_ms)
                self.dialogs[(instance, scope, service)] = dialog
        return self.pending != before

    def end_dialogs(self, at_ms: int) -> list[InstanceRequest]:
        """B6, B7: end the requests whose dialog the dynamic routing service ended since the last call.

        Its `asked: false` records name the dialog they end; one naming an earlier dialog than the
        one outstanding is ignored. No call to the broker: the reader takes what it has fetched.
        """
        ended: list[InstanceRequest] = []
        for reader in self._readers:
            if not reader.poll():
                continue
            for row in reader.values():
                request = row.request
                if row.asked or row.request_id is None or row.instance not in self.memory:
                    continue  # the router's own records: applied when it wrote them
                if (row.scope, row.service) not in self.memory[row.instance].pending:
                    continue
                if self.dialogs.get(request, row.request_id) != row.request_id:
                    continue  # the end of an earlier dialog for the same service
                held = self.memory[row.instance]
                self.memory[row.instance] = held.record((row.scope, row.service), False, at_ms)
                self.dialogs.pop(request, None)
                ended.append(request)
                log.info("MissingRoute request %s ended by the routing service: %s", request, row.answer)
        return ended

    def end_answered(self, routes: Iterable[tuple[str, Route]], at_ms: int) -> list[InstanceRequest]:
        """B6, B7: end the requests a route of their instance's table now answers; write their records."""
        if not self.pending:
            return []  # only an outstanding request can be answered: no pass over every route
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
                upserts=True,
            )
            for request in found:
                memory = memory.record(request, False, at_ms)
                self.dialogs.pop((name, *request), None)
            self.memory[name] = memory
            answered += [(name, scope, service) for scope, service in found]
        if answered:
            log.info("MissingRoute request(s) answered by a route: %s", answered)
        return answered
