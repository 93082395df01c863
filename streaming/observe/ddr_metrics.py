"""What `router ddr serve` tells Prometheus: the messages a routing service answered, and how.

`DdrFigures` is counted by the service's loop (`streaming.ddr.service.RoutingService`) and read by
`DdrCollector` when scraped, from the metrics server's thread. A message's answer is named by its
first step, in `streaming.ddr.answers.Act`'s words (`streaming.ddr.answers.answered_with`). The service is an
endpoint too: its registry also holds the endpoint's metrics (`streaming.endpoint.metrics`).
Every series has the labels `instance`, `database` and `service`; every counter is there from the
start, at 0. `METRICS` names every metric exported (the endpoint's are in that module's, its loop's
last poll among them: the service's loop is its endpoint's pump).
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LABELS = ("instance", "database", "service")

ROUTED = "routed"
"""The classifier named a target service."""
UNROUTED = "unrouted"
"""The classifier failed, or named no service: the dialog ends with an Error (CLASSIFY_FAILED)."""
CLASSIFIED = (ROUTED, UNROUTED)

METRICS = {
    "router_ddr_messages_total": "messages the routing service answered, by what its answer did first (act): "
    "begin (a first message classified: a dialog begun with the target, the message forwarded), send_out "
    "(forwarded on the mapped dialog), send_in (the target's answer passed back), redirect, end_out and "
    "end_in (an EndDialog passed on), fail_out and fail_in (an Error passed on, or the conversation not "
    "routed), none (no dialog mapped: left), closed (a dialog could not carry it: both ended with an Error)",
    "router_ddr_classified_total": "first messages classified, by result: routed (the classifier named a "
    "service) or unrouted (it failed or named none: the dialog ends with an Error)",
    "router_ddr_last_answer_timestamp_seconds": "when the routing service last answered a message (Unix "
    "time; absent until it has)",
}
"""Every metric a routing service exports besides its endpoint's, as in the exposition, with its help."""


@dataclass(frozen=True)
class DdrTotals:
    """A routing service's counts at one moment (`DdrFigures.totals`)."""

    answered: dict[str, int]
    """act -> messages."""
    classified: dict[str, int]
    """result -> first messages."""
    last_answer_at: float | None


class DdrFigures:
    """What a routing service did since it started: counted by its loop, read by a scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered: Tally[str] = Tally()
        self._classified: Tally[str] = Tally()
        self._last_answer_at: float | None = None

    def answered(self, act: str, at: float) -> None:
        """A message was answered, its answer's first step `act`, at `at` (Unix time)."""
        with self._lock:
            self._answered[act] += 1
            self._last_answer_at = at

    def classified(self, result: str) -> None:
        """A first message was classified with `result` (`CLASSIFIED`)."""
        if result not in CLASSIFIED:
            raise ValueError(f"expected a result of {CLASSIFIED}, got {result!r}")
        with self._lock:
            self._classified[result] += 1

    def totals(self) -> DdrTotals:
        """The counts now, copied."""
        with self._lock:
            return DdrTotals(dict(self._answered), dict(self._classified), self._last_answer_at)


class DdrCollector(Collector):
    """A routing service's metrics, read when scraped (see the module docstring).

    `acts` are the answers counted from the start at 0 (`streaming.ddr.answers.ANSWERS`).
    """

    def __init__(self, labels: Mapping[str, str], acts: Sequence[str], figures: DdrFigures) -> None:
        self.values = [labels[name] for name in LABELS]
        self.acts = tuple(acts)
        self.figures = figures

    def describe(self) -> Iterator[Metric]:
        """The families without samples."""
        yield from _families()

    def collect(self) -> Iterator[Metric]:
        """The counts and times as they are now."""
        messages, classified, last_answer = _families()
        totals = self.figures.totals()
        answered = {**dict.fromkeys(self.acts, 0), **totals.answered}
        for act, n in answered.items():
            messages.add_metric([*self.values, act], n)
        for result in CLASSIFIED:
            classified.add_metric([*self.values, result], totals.classified.get(result, 0))
        if totals.last_answer_at is not None:
            last_answer.add_metric(self.values, totals.last_answer_at)
        yield from (messages, classified, last_answer)


def _families() -> tuple[CounterMetricFamily, CounterMetricFamily, GaugeMetricFamily]:
    def counter(name: str, by: str) -> CounterMetricFamily:
        return CounterMetricFamily(name.removesuffix("_total"), METRICS[name], labels=[*LABELS, by])

    def gauge(name: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, METRICS[name], labels=LABELS)

    return (
        counter("router_ddr_messages_total", "act"),
        counter("router_ddr_classified_total", "result"),
        gauge("router_ddr_last_answer_timestamp_seconds"),
    )
