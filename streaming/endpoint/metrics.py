"""What an `Endpoint` tells Prometheus: its protocol's work (A1-A4, CL1, CL3) and what its store holds.

The counters are the endpoint's own `EndpointCounts` (defined here), read at each scrape: no second set
that could disagree with them. The gauges are read from the store file at each scrape, through a
read-only SQLite connection of the scrape's own (`streaming.endpoint.store.read_figures`): the
endpoint's connection belongs to its thread, and in WAL mode a reader sees the last commit without
blocking the writer. Every series has the labels `instance`, `database` and `service`.
`METRICS` names every metric exported (a dashboard's test checks its queries against it).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streaming.endpoint.store import ArrivalCounts, read_figures
from streaming.observe.services import LoopWatch


@dataclass
class EndpointCounts(ArrivalCounts):
    """What an endpoint did since it started (for logs, tests and its metrics), arrivals included."""

    sent: int = 0
    resent: int = 0
    acks_sent: int = 0
    acks_received: int = 0
    """Acknowledgements that arrived (A1)."""
    acked: int = 0
    """Sent messages those acknowledgements freed."""
    malformed: int = 0
    expired: int = 0


log = logging.getLogger("streaming.endpoint.metrics")

LABELS = ("instance", "database", "service")

METRICS = {
    "router_endpoint_sent_total": "sequenced messages the endpoint sent, EndDialog and Error included, each "
    "counted once (A6)",
    "router_endpoint_resent_total": "messages sent again because no acknowledgement came in time (A3)",
    "router_endpoint_acks_sent_total": "acknowledgements the endpoint sent for messages it took, duplicates "
    "and discarded ones included (A1, A4)",
    "router_endpoint_acks_received_total": "acknowledgements that arrived from the far endpoints (A1)",
    "router_endpoint_acknowledged_total": "sent messages the arriving acknowledgements freed from the "
    "store (A1)",
    "router_endpoint_received_total": "messages taken into the service's queue, each once and in order (A4)",
    "router_endpoint_duplicates_total": "messages that arrived again after they were taken: acked again, "
    "dropped (A4)",
    "router_endpoint_early_total": "messages that arrived ahead of a missing one: left unacked, they come "
    "again in order with the sender's resend (A4)",
    "router_endpoint_discarded_total": "messages that arrived on a dialog that had ended or failed here: "
    "acked, dropped (CL3)",
    "router_endpoint_malformed_total": "records of the queue topic that did not decode as a message, skipped",
    "router_endpoint_expired_total": "dialogs whose lifetime passed: each got a time-out Error (CL1, D4)",
    "router_endpoint_open_dialogs": "dialog sides the store holds: begun and not yet forgotten (CL3)",
    "router_endpoint_unacknowledged_messages": "sent messages awaiting an acknowledgement, resent until one "
    "comes (A3)",
    "router_endpoint_queued_messages": "messages taken and waiting for the service to receive them",
    "router_endpoint_last_pump_timestamp_seconds": "when the endpoint last polled its queue topic "
    "(pump; Unix time)",
}
"""Every metric an endpoint exports, as it appears in the exposition, with its help text."""

COUNTED = (
    ("router_endpoint_sent_total", "sent"),
    ("router_endpoint_resent_total", "resent"),
    ("router_endpoint_acks_sent_total", "acks_sent"),
    ("router_endpoint_acks_received_total", "acks_received"),
    ("router_endpoint_acknowledged_total", "acked"),
    ("router_endpoint_received_total", "taken"),
    ("router_endpoint_duplicates_total", "duplicates"),
    ("router_endpoint_early_total", "early"),
    ("router_endpoint_discarded_total", "discarded"),
    ("router_endpoint_malformed_total", "malformed"),
    ("router_endpoint_expired_total", "expired"),
)
"""Each counter and the `EndpointCounts` field it reads."""

STORE_GAUGES = (
    ("router_endpoint_open_dialogs", "dialogs"),
    ("router_endpoint_unacknowledged_messages", "unacknowledged"),
    ("router_endpoint_queued_messages", "queued"),
)
"""Each gauge read from the store and the `StoreFigures` field it reads."""


class EndpointCollector(Collector):
    """An endpoint's metrics, read when scraped (see the module docstring).

    `counts` are the endpoint's own, which it adds to; `store` is its store file; `watch` its pump's.
    """

    def __init__(
        self,
        labels: dict[str, str],
        counts: EndpointCounts,
        store: Path,
        watch: LoopWatch,
    ) -> None:
        self.values = [labels[name] for name in LABELS]
        self.counts = counts
        self.store = store
        self.watch = watch

    def describe(self) -> Iterator[Metric]:
        """The families without samples: registering the collector reads nothing."""
        counters, gauges, last_pump = self._families()
        yield from counters.values()
        yield from gauges.values()
        yield last_pump

    def collect(self) -> Iterator[Metric]:
        """The counts, the store's figures and the last pump, as they are now."""
        counts = self.counts
        counters, gauges, last_pump = self._families()
        for name, attribute in COUNTED:
            counters[name].add_metric(self.values, getattr(counts, attribute))
        try:
            figures = read_figures(self.store)
        except sqlite3.Error as exc:  # a scrape gets the rest; the gauges are left out, and said why
            log.warning("%s: cannot read the store's figures for a scrape: %s", self.store, exc)
        else:
            for name, attribute in STORE_GAUGES:
                gauges[name].add_metric(self.values, getattr(figures, attribute))
        polled = self.watch.state().polled_at
        if polled is not None:
            last_pump.add_metric(self.values, polled)
        yield from counters.values()
        yield from gauges.values()
        yield last_pump

    def _families(
        self,
    ) -> tuple[dict[str, CounterMetricFamily], dict[str, GaugeMetricFamily], GaugeMetricFamily]:
        counters = {
            name: CounterMetricFamily(name.removesuffix("_total"), METRICS[name], labels=LABELS)
            for name, _ in COUNTED
        }
        gauges = {name: GaugeMetricFamily(name, METRICS[name], labels=LABELS) for name, _ in STORE_GAUGES}
        pump = "router_endpoint_last_pump_timestamp_seconds"
        return counters, gauges, GaugeMetricFamily(pump, METRICS[pump], labels=LABELS)
