"""Which brokers the cluster lists: one of several going away, and coming back, in a line each.

On a cluster whose topics have replicas, a broker that stops (or crashes, or is fenced) costs the
router nothing it can see: the partitions it led are led by their other replicas, and the clients
follow them without an error. `BrokerWatch` is told, now and then, which brokers the cluster's
metadata lists (the live ones), and says it when one it knew is no longer there, and when it is
back, so that a person reading the router's output learns of the outage, once. A client refused
by one of them says it too (`refused_line`, handed the clients' lines by
`streaming.kafka.client_log`), often before the metadata is asked again. That the whole cluster
does not answer is the clients' own outage line.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping

from confluent_kafka.admin import ClusterMetadata


def _names(text: str, address: str) -> bool:
    """Whether `text` names `address` (host:port), not a longer port or host that starts the same."""
    return re.search(rf"(?<![\w.\-]){re.escape(address)}(?!\d)", text) is not None


def brokers_of(metadata: ClusterMetadata) -> dict[int, str]:
    """The brokers a metadata answer lists: node id -> host:port."""
    return {node: f"{broker.host}:{broker.port}" for node, broker in metadata.brokers.items()}


class BrokerWatch:
    """The brokers seen so far, by node id, with their addresses, and since when those away are away."""

    def __init__(self, brokers: Mapping[int, str], log: logging.Logger, quiet_s: float = 5.0) -> None:
        """`brokers`: node id -> host:port, as the cluster listed them when the watch began.

        A broker away is back once the metadata lists it and no client was refused by it for `quiet_s`.
        """
        self._known = dict(brokers)
        self._log = log
        self._quiet_s = quiet_s
        self._away: dict[int, float] = {}
        self._refused_at: dict[int, float] = {}
        self._lock = threading.Lock()

    def seen(self, brokers: Mapping[int, str], now: float | None = None) -> None:
        """The cluster lists `brokers` now (`now`: time.monotonic): say who left and who came back."""
        at = time.monotonic() if now is None else now
        with self._lock:
            self._known.update(brokers)
            gone = sorted(n for n in self._known if n not in brokers and n not in self._away)
            back = sorted(
                n
                for n in self._away
                if n in brokers and at - self._refused_at.get(n, float("-inf")) >= self._quiet_s
            )
            lasted = {n: at - self._away.pop(n) for n in back}
            self._away.update(dict.fromkeys(gone, at))
            total = len(self._known)
        for node in gone:
            self._said_away(node, len(brokers), total)
        for node in back:
            self._log.warning(
                "Kafka broker %d (%s) is back after %.0f s: %d of %d brokers answer",
                node,
                self._known[node],
                lasted[node],
                len(brokers),
                total,
            )

    def refused(self, node: int, now: float | None = None) -> bool:
        """A client could not reach broker `node`: it is away (said once). False: not for the watch.

        The watch takes it only on a cluster of several brokers it knows `node` in; a refusal by the
        only broker is the whole cluster away (`streaming.kafka.client_log.OutageLog`).
        """
        at = time.monotonic() if now is None else now
        with self._lock:
            if node not in self._known or len(self._known) < 2:
                return False
            self._refused_at[node] = at
            if node in self._away:
                return True
            self._away[node] = at
            total = len(self._known)
        self._said_away(node, total - len(self.away), total)
        return True

    def refused_line(self, text: str) -> bool:
        """A client's line that it could not reach a broker: `refused` by the one broker it names.

        The line names it by its address (`Connect to ipv4#host:port failed`, and the client's
        thread: `[thrd:host:port/2]`, `[thrd:GroupCoordinator]: GroupCoordinator: host:port`).
        False when it names none of the brokers known, or several.
        """
        with self._lock:
            named = [node for node, address in self._known.items() if _names(text, address)]
        return len(named) == 1 and self.refused(named[0])

    def _said_away(self, node: int, answering: int, total: int) -> None:
        self._log.warning(
            "Kafka broker %d (%s) is away: %d of %d brokers answer; the partitions it led are led by "
            "their replicas on the others, where they have any",
            node,
            self._known[node],
            answering,
            total,
        )

    @property
    def away(self) -> list[int]:
        """The node ids of the brokers away now."""
        with self._lock:
            return sorted(self._away)
