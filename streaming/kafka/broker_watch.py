"""Which brokers the cluster lists: one of several going away, and coming back, in a line each.

On a cluster whose topics have replicas, a broker that stops (or crashes, or is fenced) costs the
router nothing it can see: the partitions it led are led by their other replicas, and the clients
follow them without an error. `BrokerWatch` is told, now and then, which brokers the cluster's
metadata lists (the live ones), and says it when one it knew is no longer there, and when it is
back, so that a person reading the router's output learns of the outage, once. That the whole
cluster does not answer is the clients' own outage line (`streaming.kafka.client_log`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka.admin import ClusterMetadata


def brokers_of(metadata: ClusterMetadata) -> dict[int, str]:
    """The brokers a metadata answer lists: node id -> host:port."""
    return {node: f"{broker.host}:{broker.port}" for node, broker in metadata.brokers.items()}


class BrokerWatch:
    """The brokers seen so far, by node id, with their addresses, and since when those away are away."""

    def __init__(self, brokers: Mapping[int, str]) -> None:
        """`brokers`: node id -> host:port, as the cluster listed them when the watch began."""
        self._known = dict(brokers)
        self._away: dict[int, float] = {}
        self._lock = threading.Lock()

    def seen(self, brokers: Mapping[int, str], log: logging.Logger, now: float | None = None) -> None:
        """The cluster lists `brokers` now (`now`: time.monotonic): say who left and who came back."""
        at = time.monotonic() if now is None else now
        with self._lock:
            self._known.update(brokers)
            gone = sorted(n for n in self._known if n not in brokers and n not in self._away)
            back = sorted(n for n in self._away if n in brokers)
            lasted = {n: at - self._away.pop(n) for n in back}
            self._away.update(dict.fromkeys(gone, at))
            total = len(self._known)
        for node in gone:
            log.warning(
                "Kafka broker %d (%s) is away: %d of %d brokers answer; the partitions it led are led by "
                "their replicas on the others, where they have any",
                node,
                self._known[node],
                len(brokers),
                total,
            )
        for node in back:
            log.warning(
                "Kafka broker %d (%s) is back after %.0f s: %d of %d brokers answer",
                node,
                self._known[node],
                lasted[node],
                len(brokers),
                total,
            )

    @property
    def away(self) -> list[int]:
        """The node ids of the brokers away now."""
        with self._lock:
            return sorted(self._away)
