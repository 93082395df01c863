"""What a running router job tells Prometheus, and whether it is healthy (`/healthz`).

The figures are those the job already has for its progress lines, so serving them costs no pass
of its own: each micro-batch's observed metrics (`streaming.spark.batch.BatchMetrics`, counted by
instance, outcome and reason in the write's one pass), Spark's progress report (the lag), the
route snapshot, and what the state processor holds delayed (`HeldFigures`: its changes come with
each batch, `router.metrics.HeldCounts`, and the state store is read once, after the job's first batch).

Every metric has an `instance` label: a query that routes several instances gives each its own
series; the figures of the query as a whole (a batch's duration, its time) are given to each of its
instances. `METRICS` names every metric exported; the Grafana dashboard (deploy/grafana) uses them.
"""

from __future__ import annotations

import importlib.metadata
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import confluent_kafka
import pyspark
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streaming.observe.server import Health, new_registry
from streaming.spark.batch import OUTCOMES, BatchMetrics
from streaming.spark.output import DEAD_LETTER

BATCH_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
"""The micro-batch duration histogram's buckets: a warm batch takes 0.1-5 s, a cold or stalled one more."""

METRICS = {
    "router_messages_total": "messages decided, by outcome and reason (every decision of every batch)",
    "router_deadletter_total": "records that did not decode (dead-lettered with the error)",
    "router_released_total": "delayed messages released from the delay and decided again (D2)",
    "router_destination_unavailable_total": "messages dropped because their destination topic could not be "
    "written, by topic",
    "router_delayed_messages": "delayed messages the state holds now (D1)",
    "router_delayed_conversations": "conversation endpoints with delayed messages held now (D1)",
    "router_delayed_oldest_seconds": "how long the oldest held message has waited since it was delayed (D2: "
    "it is released retry_s after)",
    "router_input_lag_records": "records of an input partition not yet read, after the last micro-batch",
    "router_batches_total": "micro-batches run",
    "router_batch_duration_seconds": "how long a micro-batch took (decide and write)",
    "router_batch_records": "records in the last micro-batch",
    "router_last_batch_timestamp_seconds": "when the last micro-batch finished (Unix time)",
    "router_snapshot_routes": "active routes in the route snapshot the router decides with",
    "router_snapshot_changed_timestamp_seconds": "when the router took its current route snapshot in",
    "router_snapshot_info": "the version of the route snapshot the router decides with (label version)",
    "router_build_info": "the router's version, and Spark's and the Kafka client's",
}
"""Every metric the job exports, as it appears in the exposition, with its help text."""


def _help(name: str) -> str:
    return METRICS[name]


class HeldFigures:
    """What the state processor holds delayed, per instance, kept up to date from its changes.

    The changes come as `instance NUL kind [NUL second] NUL count` entries (`router.metrics.HeldCounts`):
    kind `m` (messages), `c` (conversation endpoints), `s` (messages delayed in that second). The
    state the job started from is added once it has been read (`add` takes its figures in the same
    form, `ready` then). Which comes first does not matter: they add up.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: Tally[str] = Tally()
        self._conversations: Tally[str] = Tally()
        self._seconds: dict[str, Tally[int]] = {}
        self._ready = False

    def add(self, entries: Iterable[str]) -> None:
        """Add a batch's changes (or the state the job started from)."""
        with self._lock:
            for entry in entries:
                parts = str(entry).split("\u0000")
                instance, kind, count = parts[0], parts[1], int(parts[-1])
                if kind == "m":
                    self._messages[instance] += count
                elif kind == "c":
                    self._conversations[instance] += count
                elif kind == "s":
                    seconds = self._seconds.setdefault(instance, Tally())
                    second = int(parts[2])
                    seconds[second] += count
                    if not seconds[second]:
                        del seconds[second]

    def ready(self) -> None:
        """The state the job started from has been added: the figures are whole."""
        with self._lock:
            self._ready = True

    @property
    def is_ready(self) -> bool:
        """Whether the figures are whole (the starting state was added)."""
        with self._lock:
            return self._ready

    def figures(self, instance: str, now: float) -> tuple[int, int, float]:
        """(messages, conversation endpoints, seconds the oldest has waited, 0 when none) of `instance`."""
        with self._lock:
            seconds = [s for s, n in self._seconds.get(instance, Tally()).items() if n > 0]
            oldest = max(0.0, now - min(seconds)) if seconds else 0.0
            return self._messages[instance], self._conversations[instance], oldest


HELD = ("router_delayed_messages", "router_delayed_conversations", "router_delayed_oldest_seconds")
"""The delayed gauges, in the order of `HeldFigures.figures`."""


class _HeldCollector(Collector):
    """The delayed gauges, read from `HeldFigures` at each scrape: the oldest's wait grows between batches."""

    def __init__(self, held: HeldFigures, instances: Sequence[str]) -> None:
        self.held = held
        self.instances = tuple(instances)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = self._families()
        if self.held.is_ready:
            now = time.time()
            for instance in self.instances:
                for family, value in zip(families, self.held.figures(instance, now), strict=True):
                    family.add_metric([instance], value)
        yield from families

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, _help(name), labels=["instance"]) for name in HELD]


def build_labels() -> dict[str, str]:
    """The router's version, and Spark's and the Kafka client's (`router_build_info`)."""
    try:
        version = importlib.metadata.version("ssb-kafka-router")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    client = f"confluent-kafka {confluent_kafka.__version__}, librdkafka {confluent_kafka.libversion()[0]}"
    return {"version": version, "spark": pyspark.__version__, "kafka_client": client}


class RouterMetrics:
    """The Prometheus metrics of one router job (see the module docstring), in a registry of its own."""

    def __init__(
        self,
        instances: Sequence[str],
        topic_instances: Mapping[str, str],
        registry: CollectorRegistry | None = None,
    ) -> None:
        """`topic_instances` maps each input topic to the instance that reads it (for the lag's label)."""
        r = self.registry = registry if registry is not None else new_registry()
        self.instances = tuple(instances)
        self.topic_instances = dict(topic_instances)
        self.held = HeldFigures()
        by_instance = ["instance"]
        self.messages = Counter(
            "router_messages", _help("router_messages_total"), [*by_instance, "outcome", "reason"], registry=r
        )
        self.deadletter = Counter(
            "router_deadletter", _help("router_deadletter_total"), by_instance, registry=r
        )
        self.released = Counter("router_released", _help("router_released_total"), by_instance, registry=r)
        self.unavailable = Counter(
            "router_destination_unavailable",
            _help("router_destination_unavailable_total"),
            [*by_instance, "topic"],
            registry=r,
        )
        self.batches = Counter("router_batches", _help("router_batches_total"), by_instance, registry=r)
        self.batch_seconds = Histogram(
            "router_batch_duration_seconds",
            _help("router_batch_duration_seconds"),
            by_instance,
            buckets=BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.batch_records = Gauge(
            "router_batch_records", _help("router_batch_records"), by_instance, registry=r
        )
        self.last_batch = Gauge(
            "router_last_batch_timestamp_seconds",
            _help("router_last_batch_timestamp_seconds"),
            by_instance,
            registry=r,
        )
        self.lag = Gauge(
            "router_input_lag_records",
            _help("router_input_lag_records"),
            [*by_instance, "topic", "partition"],
            registry=r,
        )
        self.snapshot_routes = Gauge(
            "router_snapshot_routes", _help("router_snapshot_routes"), by_instance, registry=r
        )
        self.snapshot_changed = Gauge(
            "router_snapshot_changed_timestamp_seconds",
            _help("router_snapshot_changed_timestamp_seconds"),
            by_instance,
            registry=r,
        )
        self.snapshot_info = Info("router_snapshot", _help("router_snapshot_info"), by_instance, registry=r)
        build = Info("router_build", _help("router_build_info"), by_instance, registry=r)
        r.register(_HeldCollector(self.held, self.instances))
        labels = build_labels()
        for instance in self.instances:
            build.labels(instance).info(labels)
            # Series that exist from the start (at 0), so that rates and alerts have them.
            for outcome in ("deliver", "send", "forward"):
                self.messages.labels(instance, outcome, "")
            self.deadletter.labels(instance)
            self.released.labels(instance)
            self.batches.labels(instance)
        self._snapshot: str | None = None

    def batch(self, metrics: BatchMetrics, seconds: float, finished_at: float) -> None:
        """Count a written micro-batch: its decisions, dead letters, releases and unavailable destinations."""
        records: Tally[str] = Tally()
        for counted, n in metrics.counts.items():
            records[counted.instance] += n
            if counted.outcome == DEAD_LETTER:
                self.deadletter.labels(counted.instance).inc(n)
                continue
            if counted.outcome in OUTCOMES:
                self.messages.labels(counted.instance, counted.outcome, counted.reason).inc(n)
            if counted.released:
                self.released.labels(counted.instance).inc(n)
            if counted.unavailable:
                self.unavailable.labels(counted.instance, counted.unavailable).inc(n)
        for instance in self.instances:
            self.batches.labels(instance).inc()
            self.batch_seconds.labels(instance).observe(seconds)
            self.batch_records.labels(instance).set(records[instance])
            self.last_batch.labels(instance).set(finished_at)

    def input_lag(self, by_partition: Mapping[tuple[str, int], int]) -> None:
        """The records of each input partition not yet read, after a micro-batch (Spark's progress report)."""
        for (topic, partition), records in by_partition.items():
            instance = self.topic_instances.get(topic)
            if instance is not None:
                self.lag.labels(instance, topic, str(partition)).set(records)

    def snapshot(self, version: str, routes: Mapping[str, int], changed_at: float) -> None:
        """The snapshot a batch was decided with: its version, active routes per instance, when taken in."""
        if version == self._snapshot:
            return
        self._snapshot = version
        for instance in self.instances:
            self.snapshot_routes.labels(instance).set(routes.get(instance, 0))
            self.snapshot_changed.labels(instance).set(changed_at)
            self.snapshot_info.labels(instance).info({"version": version})


# --- health -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Liveness:
    """What the job's health is judged from (`judge`), as the job last set it."""

    instances: tuple[str, ...]
    started_at: float
    """When the job started (Unix time)."""
    state: str = "starting"
    """starting (no batch finished yet), running, stopping, stopped or failed."""
    error: str | None = None
    last_batch: int | None = None
    last_batch_at: float | None = None
    """When the last micro-batch finished (Unix time)."""
    last_records: int = 0
    lag: int | None = None
    batch_since: float | None = None
    """When the micro-batch in flight began (Unix time), or None between batches."""


def judge(live: Liveness, now: float, bound_s: float, kafka: str | None = None) -> Health:
    """200 while the query runs and finished a micro-batch within `bound_s`; 503 with the reason otherwise.

    `kafka`: what the job last found wrong with Kafka (it does not answer), if anything.
    """
    body: dict[str, object] = {
        "instances": list(live.instances),
        "state": live.state,
        "bound_s": bound_s,
        "lag": live.lag,
    }
    if live.last_batch is not None and live.last_batch_at is not None:
        body["last_batch"] = {
            "id": live.last_batch,
            "finished_at": round(live.last_batch_at, 3),
            "age_s": round(now - live.last_batch_at, 3),
            "records": live.last_records,
        }
    if kafka is not None:
        body["kafka"] = kafka

    def unhealthy(reason: str) -> Health:
        if kafka is not None:
            reason += f"; {kafka}"
        return Health(False, {**body, "status": "unavailable", "reason": reason})

    if live.state == "failed":
        return unhealthy(f"the query failed: {live.error or 'no error given'}")
    if live.state in ("stopping", "stopped"):
        return unhealthy(f"the router is {live.state}")
    if live.last_batch_at is None:
        return unhealthy(
            f"starting: no micro-batch has finished yet ({now - live.started_at:.0f} s since start)"
        )
    age = now - live.last_batch_at
    if age > bound_s:
        running = (
            f"; the micro-batch in flight began {now - live.batch_since:.0f} s ago"
            if live.batch_since is not None
            else "; none has started since (Spark waits for its sources' offsets)"
        )
        return unhealthy(f"no micro-batch has finished for {age:.0f} s (bound {bound_s:g} s){running}")
    return Health(True, {**body, "status": "ok"})
