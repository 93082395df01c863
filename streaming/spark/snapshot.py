"""The route snapshot a micro-batch is decided against, and the topics it can route to.

The routes and mirror roles come from their compacted topics through the one table reader of the
project (`streaming.tables.reader`): a record that does not decode or holds an invalid value is
skipped with a warning, and the last good value of its key stands. The readers are read to the
end once when the job starts; before each micro-batch a poll takes what was written since, at
no cost when nothing was. The snapshot is built again (`streaming.spark.decision.build_snapshot`,
in the JVM, and broadcast) when the routes or roles changed, or when a route's lifetime ended (R6),
so a route change is seen by the first micro-batch after it arrives.

The topics a snapshot can route to are known from it: the queue of every service of the
instances' databases, the inbound topic of every instance in the catalogs, the topic of every
network address of a route, and the delayed and dropped topics. They are created when the
snapshot changes, not per batch; a topic the broker refuses is remembered with its error, and
the messages for it are dropped with the reason `destination_unavailable` (one warning per
topic). TRANSPORT next hops come from service names and are created by the batch that needs them
(`streaming.spark.batch`).
"""

from __future__ import annotations

import gc
import logging
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Protocol

from pyspark.sql import SparkSession

from streaming import topics
from streaming.config import Settings
from streaming.spark.decision import Snapshot, TopicNaming, build_snapshot
from streaming.tables.reader import MirrorTableReader, RouteTableReader, databases_by_instance
from streaming.topology import Topology, reachable_topics

log = logging.getLogger("streaming.snapshot")


class TopicCreator(Protocol):
    """Creates topics; returns the ones the broker refused, with its error."""

    def __call__(self, names: list[str]) -> dict[str, str]:
        """Create `names`; return the refused ones with the broker's error."""
        ...


def topic_naming(topology: Topology) -> TopicNaming:
    """The destination topics a snapshot of the query's instances names (`build_snapshot`'s `topics`)."""
    t = topology
    return TopicNaming(
        prefix=t.prefix,
        inbound=t.inbound_by_address,
        delayed={i.name: topics.delayed_topic(i.name, t.prefix) for i in t.instances},
        dropped={i.name: topics.dropped_topic(i.name, t.prefix) for i in t.instances},
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused for the block: while a snapshot is built.

    Building one allocates a few objects per route, short-lived and free of cycles (tuples, the
    JSON's lists), and each few hundred allocations start a collection; those of the oldest
    generation go over every object the process holds, the route table's included. With 100,000
    routes the collections took 0.26-0.41 s of the 0.84-0.99 s the snapshot step took, in the
    micro-batch that took the route change in. The objects are freed by their reference counts
    all the same.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class RouteSnapshots:
    """The current route snapshot and what it can route to (see the module docstring)."""

    def __init__(
        self, spark: SparkSession, settings: Settings, topology: Topology, create_topics: TopicCreator
    ) -> None:
        self.spark = spark
        self.topology = topology
        self.create_topics = create_topics
        self.routes = RouteTableReader(
            settings.kafka,
            topics.routes_topic(settings.topic_prefix),
            instance=[i.name for i in topology.instances],
            databases=databases_by_instance(topology.instances),
        )
        self.mirrors = MirrorTableReader(settings.kafka, topics.mirrors_topic(settings.topic_prefix))
        self.naming = topic_naming(topology)
        self.current: Snapshot | None = None
        self.taken_at = 0.0
        """When the current snapshot was built (Unix time)."""
        self.active: dict[str, int] = {}
        """The current snapshot's active routes, by instance."""
        self.unavailable: dict[str, str] = {}
        """Destination topics the broker refused, with its error."""
        self._created: set[str] = set()
        self._stale = True
        self.routes.read_to_end()
        self.mirrors.read_to_end()

    def close(self) -> None:
        """Close the table readers."""
        self.routes.close()
        self.mirrors.close()

    def at(self, now: datetime) -> Snapshot:
        """The snapshot of the routes as they are at `now` (built again only when they changed)."""
        changed = self.routes.poll()
        changed = self.mirrors.poll() or changed
        if self.current is not None and not changed and not self._stale and self.current.holds_at(now):
            return self.current
        with _collector_paused():
            pairs = [(name, r) for name, r in self.routes.instance_routes if r.is_active(now)]
            instances = {i.name: i for i in self.topology.instances}
            version = f"routes@{self.routes.version} mirrors@{self.mirrors.version}"
            snapshot = build_snapshot(
                self.spark,
                instances,
                pairs,
                now=now,
                mirrors=dict.fromkeys(instances, self.mirrors.roles),  # one mirrors topic serves them all
                topics=self.naming,
                version=version,
            )
            reachable = reachable_topics(self.topology, pairs)
        self.ensure_reachable(reachable)
        self.current, self._stale = snapshot, False
        self.taken_at = time.time()
        self.active = dict(Counter(name for name, _ in pairs))
        log.info("route snapshot %s: %d active routes", version, len(pairs))
        return snapshot

    def ensure_reachable(self, names: list[str]) -> dict[str, str]:
        """Create the topics not created yet; remember (and return) those the broker refuses."""
        new = [n for n in names if n not in self._created and n not in self.unavailable]
        if not new:
            return {}
        refused = self.create_topics(new)
        for topic, error in refused.items():
            log.warning(
                "destination topic %s cannot be created (%s): its messages go to %s with the reason "
                "destination_unavailable",
                topic,
                error,
                " or ".join(self.topology.dropped),
            )
        self.unavailable.update(refused)
        self._created.update(n for n in new if n not in refused)
        return refused
