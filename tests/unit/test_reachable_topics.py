"""The destination topics a route snapshot can route to (streaming/spark/snapshot.py), created when
the snapshot changes: every next hop a route names gets its network topic once, whatever the
spelling of its address (R4), and no topic is made for what no message can be sent to."""

from __future__ import annotations

from streaming import topics
from streaming.rules.model import Database, Instance, Route
from streaming.topology import Topology, reachable_topics

PREFIX = "t"
OWN = Instance("i1", "TCP://me.example:4022", (Database("AW", "guid-aw", services=("Orders", "Audit")),))
OTHER_INBOUND = topics.inbound_topic("i2", PREFIX)
TOPOLOGY = Topology((OWN,), PREFIX, {"tcp://other.example:4022": OTHER_INBOUND})


def route(name: str, address: str, mirror: str | None = None) -> tuple[str, Route]:
    return ("i1", Route("AW", name, address, service=f"S-{name}", mirror_address=mirror))


def test_each_next_hop_is_named_once_with_its_mirror_and_known_instances_keep_their_inbound_topic() -> None:
    routes = [
        # R4: one address however it is spelled, over many routes.
        *[route(f"r{n}", "TCP://Hop.example:4022/" if n % 2 else "tcp://hop.example:4022") for n in range(9)],
        route("m", "TCP://principal.example:4022", "TCP://Mirror.example:4022"),
        # A known instance's address: its inbound topic, named by the catalogs, not a network topic.
        route("known", "TCP://Other.example:4022"),
        # LOCAL and TRANSPORT name no topic of their own (a TRANSPORT hop is made by its batch, T1).
        route("local", "LOCAL", "TCP://ignored-mirror.example:4022"),
        route("transport", "TRANSPORT"),
    ]
    own = {
        topics.delayed_topic("i1", PREFIX),
        topics.dropped_topic("i1", PREFIX),
        OTHER_INBOUND,
        topics.queue_topic("i1", "AW", "Orders", PREFIX),
        topics.queue_topic("i1", "AW", "Audit", PREFIX),
    }
    network = {
        topics.network_topic(a, PREFIX)
        for a in ("tcp://hop.example:4022", "tcp://principal.example:4022", "tcp://mirror.example:4022")
    }
    named = reachable_topics(TOPOLOGY, routes)
    assert named == sorted(own | network)
    assert len(named) == len(set(named))


def test_a_table_without_routes_reaches_only_the_instances_own_topics() -> None:
    assert topics.network_topic("tcp://hop.example:4022", PREFIX) not in reachable_topics(TOPOLOGY, [])
    assert len(reachable_topics(TOPOLOGY, [])) == 5
