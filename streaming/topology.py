"""The instances a router query routes, and the name of every topic it reads or writes.

A pure description, shared by the job (`streaming.spark`), `router status` and `router whatif`:
nothing here starts or needs Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from streaming import topics
from streaming.errors import ConfigError
from streaming.rules.model import Instance, Route, normalize_address

TopicKind = Callable[[str, str], str]
"""A topic of an instance, by instance name and prefix (`streaming.topics.outbound_topic`, ...)."""


@dataclass(frozen=True)
class Topology:
    """The catalogs of the instances a query routes, and every topic name it reads or writes.

    One query can route several instances (`Settings.instances`): a row's `instance` column names
    whose it is, from the topic it was read from, and its own topics (delayed, dropped, ...) are
    that instance's (`topic_for`).
    """

    instances: tuple[Instance, ...]
    prefix: str
    inbound_by_address: dict[str, str]
    """The inbound topic of every instance in the catalogs, by its normalized address."""

    def __post_init__(self) -> None:
        if not self.instances:
            raise ConfigError("a router query routes at least one instance")
        retries = {i.retry_s for i in self.instances}
        if len(retries) > 1:
            given = ", ".join(f"{i.name}: {i.retry_s:g} s" for i in self.instances)
            raise ConfigError(
                f"the instances one query routes must have one retry_s in their catalogs, got {given}; "
                "give them the same, or route them in separate jobs"
            )

    @property
    def name(self) -> str:
        """The instances' names, joined by `+` (for logs and the query's name)."""
        return "+".join(i.name for i in self.instances)

    @property
    def retry_s(self) -> float:
        """D2: how long a delayed conversation waits before it is routed again (one per query)."""
        return self.instances[0].retry_s

    def topics(self, kind: TopicKind) -> list[str]:
        """That topic of every instance the query routes, in order."""
        return [kind(i.name, self.prefix) for i in self.instances]

    @property
    def outbound(self) -> list[str]:
        """The topics the instances' services write to."""
        return self.topics(topics.outbound_topic)

    @property
    def inbound(self) -> list[str]:
        """The topics other instances write to."""
        return self.topics(topics.inbound_topic)

    @property
    def delayed(self) -> list[str]:
        """Delayed messages (LogAppendTime: a record's timestamp is when it was delayed)."""
        return self.topics(topics.delayed_topic)

    @property
    def choices(self) -> list[str]:
        """The route choices the decisions made (compacted; read back by the query, K2)."""
        return self.topics(topics.choices_topic)

    @property
    def requests(self) -> list[str]:
        """MissingRoute requests sent and ended (compacted; read when the job starts, B4)."""
        return self.topics(topics.requests_topic)

    @property
    def dropped(self) -> list[str]:
        """Dropped and discarded messages."""
        return self.topics(topics.dropped_topic)

    @property
    def deadletter(self) -> list[str]:
        """Records that do not decode."""
        return self.topics(topics.deadletter_topic)


def reachable_topics(topology: Topology, routes: Iterable[tuple[str, Route]]) -> list[str]:
    """Every destination topic a snapshot of (instance, route) pairs can route the messages to."""
    t = topology
    names = {*t.delayed, *t.dropped, *t.inbound_by_address.values()}
    for instance in t.instances:
        for database in instance.databases:
            for service in database.services:
                names.add(topics.queue_topic(instance.name, database.name, service, t.prefix))
    # Each distinct next hop is looked at once: a large table has many routes to few, and naming a
    # topic escapes its address character by character (100,000 routes to 8 addresses: 1.7 s
    # when every route's was named, in the micro-batch that took the route change in; 0.035 s
    # when every route's address was normalized, 0.01 s now).
    hops = {(route.address, route.mirror_address): route for _, route in routes}
    addresses = {
        normalize_address(address)
        for route in hops.values()
        if not (route.is_local or route.is_transport)
        for address in (route.address, route.mirror_address)
        if address is not None
    }
    names.update(topics.network_topic(a, t.prefix) for a in addresses if a not in t.inbound_by_address)
    return sorted(names)
