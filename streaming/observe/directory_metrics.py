"""What `router directory serve` tells Prometheus: the MissingRoute requests it answered, and how (B6).

`DirectoryFigures` is counted by the service's loop (`streaming.directory.DirectoryService`) and read
by `DirectoryCollector` when scraped, from the metrics server's thread. Every series has the label
`instance`; the answers also name the `database` whose table asked (the request's scope). Every
counter is there from the start, at 0. `METRICS` names every metric exported.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streaming.observe.services import LoopWatch

ROUTE = "route"
"""The directory lists the service: its route was created in the table that asked, and the request ended."""
ERROR = "error"
"""The directory does not list the service: the request ended with an error."""
RESULTS = (ROUTE, ERROR)

MALFORMED = "malformed"
"""The record does not decode as a message."""
NOT_MISSING_ROUTE = "not_missing_route"
"""A message of another type (the other BrokerConfigurationNotice messages, B9)."""
NO_ORIGIN_DATABASE = "no_origin_database"
"""The request does not say which database's table asked."""
NO_SERVICE_NAME = "no_service_name"
"""The request's body is not XML, or names no service (B3)."""
UNANSWERED = (MALFORMED, NOT_MISSING_ROUTE, NO_ORIGIN_DATABASE, NO_SERVICE_NAME)
"""Why a record of the BrokerConfiguration queue was left unanswered."""

METRICS = {
    "router_directory_requests_total": "MissingRoute requests answered, by the database whose table "
    "asked and result: route (the directory lists the service: its route was created) or error (B6)",
    "router_directory_unanswered_total": "records of the BrokerConfiguration queue left unanswered, by "
    "reason: malformed, not_missing_route (B9), no_origin_database, no_service_name (B3)",
    "router_directory_last_answer_timestamp_seconds": "when the service last answered a request "
    "(Unix time; absent until it has)",
    "router_directory_last_poll_timestamp_seconds": "when the service's loop last polled its queues "
    "(Unix time)",
}
"""Every metric the dynamic routing service exports, as it appears in the exposition, with its help text."""


@dataclass(frozen=True)
class DirectoryTotals:
    """The directory service's counts at one moment (`DirectoryFigures.totals`)."""

    answered: dict[tuple[str, str], int]
    """(database, result) -> requests."""
    unanswered: dict[str, int]
    """reason -> records."""
    last_answer_at: float | None


class DirectoryFigures:
    """What the directory service did since it started: counted by its loop, read by a scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered: Tally[tuple[str, str]] = Tally()
        self._unanswered: Tally[str] = Tally()
        self._last_answer_at: float | None = None

    def answered(self, database: str, result: str, at: float) -> None:
        """A request of `database`'s table was answered with `result` (`RESULTS`) at `at` (Unix time)."""
        if result not in RESULTS:
            raise ValueError(f"expected a result of {RESULTS}, got {result!r}")
        with self._lock:
            self._answered[(database, result)] += 1
            self._last_answer_at = at

    def unanswered(self, reason: str) -> None:
        """A record was left unanswered for `reason` (`UNANSWERED`)."""
        if reason not in UNANSWERED:
            raise ValueError(f"expected a reason of {UNANSWERED}, got {reason!r}")
        with self._lock:
            self._unanswered[reason] += 1

    def totals(self) -> DirectoryTotals:
        """The counts now, copied."""
        with self._lock:
            return DirectoryTotals(dict(self._answered), dict(self._unanswered), self._last_answer_at)


class DirectoryCollector(Collector):
    """The directory service's metrics, read when scraped (see the module docstring).

    `databases` are the instance's: each gets its answer counters at 0 from the start.
    """

    def __init__(
        self, instance: str, databases: Sequence[str], figures: DirectoryFigures, watch: LoopWatch
    ) -> None:
        self.instance = instance
        self.databases = tuple(databases)
        self.figures = figures
        self.watch = watch

    def describe(self) -> Iterator[Metric]:
        """The families without samples."""
        yield from _families()

    def collect(self) -> Iterator[Metric]:
        """The counts and times as they are now."""
        requests, unanswered, last_answer, last_poll = _families()
        totals = self.figures.totals()
        answered = dict.fromkeys(((d, r) for d in self.databases for r in RESULTS), 0)
        answered.update(totals.answered)
        for (database, result), n in sorted(answered.items()):
            requests.add_metric([self.instance, database, result], n)
        for reason in UNANSWERED:
            unanswered.add_metric([self.instance, reason], totals.unanswered.get(reason, 0))
        if totals.last_answer_at is not None:
            last_answer.add_metric([self.instance], totals.last_answer_at)
        polled = self.watch.state().polled_at
        if polled is not None:
            last_poll.add_metric([self.instance], polled)
        yield from (requests, unanswered, last_answer, last_poll)


def _families() -> tuple[CounterMetricFamily, CounterMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
    def counter(name: str, labels: list[str]) -> CounterMetricFamily:
        return CounterMetricFamily(name.removesuffix("_total"), METRICS[name], labels=labels)

    def gauge(name: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, METRICS[name], labels=["instance"])

    return (
        counter("router_directory_requests_total", ["instance", "database", "result"]),
        counter("router_directory_unanswered_total", ["instance", "reason"]),
        gauge("router_directory_last_answer_timestamp_seconds"),
        gauge("router_directory_last_poll_timestamp_seconds"),
    )
