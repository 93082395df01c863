"""One micro-batch: its rows decided and every record they give written, in one pass and one write.

The query that does this is planned once and kept, as a `router.plan.Prepared` (jvm/state): each
micro-batch is given to it as the input of its first step, at the level of Spark's RDDs, so a batch
runs the same physical plan and generated code as the last one, with no analysis, planning or code
generation of its own. The route snapshot and the outstanding requests are not part of the plan:
they are set before each batch (`DecisionInputs`), so a route change plans nothing. The plan is
made again only when its shape changes: with or without a route to the dynamic routing service, a
set of equal options or a TRANSPORT route, or a destination found unavailable. Spark runs it as one job: one
stage more for the state processor's shuffle. What the driver must know of the batch (counts by
outcome, the MissingRoute requests made, the destinations that could not be written) are Spark's
observed metrics of that same run.

The decision is one pass over each partition's rows (`streaming.spark.decision`), which the state
processor gives with each conversation endpoint's rows in batch order. With a route to the dynamic
routing service, B4's first request is the first in the whole batch's order, and with a set of
equal options (C5, M3) new conversations take them in turn in that order: the batch is then
decided in one partition, in batch order. While a TRANSPORT route exists (T1: the next hop comes
from the service name, so the snapshot cannot name every destination), the batch is planned anew:
its decided rows are kept once, and the topics their C4 decisions lead to are created before the
records are written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.serializers import CPickleSerializer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.contract import Outcome
from streaming.errors import RouterError
from streaming.spark.decision import (
    Counters,
    DecisionInputs,
    Snapshot,
    SnapshotFlags,
    decide,
    in_batch_order,
)
from streaming.spark.output import (
    COUNT_KEY_SEPARATOR,
    DEAD_LETTER,
    HOME_COLUMN,
    RELEASED,
    Destinations,
    batch_metrics,
    output_records,
    with_destinations,
)
from streaming.spark.session import session_jvm
from streaming.spark.sources import register_functions

METRICS = "router_batch"

log = logging.getLogger("streaming.batch")


OUTCOMES = tuple(o.value for o in Outcome)
"""Every outcome of a decision, in the order the router prints them (the contract's)."""


@dataclass(frozen=True)
class Counted:
    """What a batch's rows are counted by (`streaming.spark.output.count_key`)."""

    instance: str
    outcome: str
    """One of `OUTCOMES`, or `DEAD_LETTER` for a record that does not decode."""
    reason: str = ""
    released: bool = False
    """The message left the delay in this batch (D2)."""
    unavailable: str = ""
    """The destination topic that could not be written (reason `destination_unavailable`), or empty."""

    @classmethod
    def parse(cls, key: str) -> Counted:
        """From a key `count_key` made."""
        instance, outcome, reason, released, unavailable = key.split(COUNT_KEY_SEPARATOR)
        return cls(instance, outcome, reason, released == RELEASED, unavailable)


@dataclass(frozen=True)
class BatchMetrics:
    """What a written batch reports (`streaming.spark.output.batch_metrics`).

    `counts` holds every row by instance, outcome, reason, whether it was released and where it
    could not be written; the other figures are sums of it, or given alone by a caller that counts
    no further (`of` makes them agree).
    """

    records: int = 0
    dead_lettered: int = 0
    released: int = 0
    outcomes: Mapping[str, int] = field(default_factory=dict)
    requests: frozenset[tuple[str, str, str, str]] = frozenset()
    """(instance, scope, service, request id) of each MissingRoute request the batch made (B3)."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    counts: Mapping[Counted, int] = field(default_factory=dict)

    @property
    def routed(self) -> int:
        """Messages decided (every outcome), dead letters not counted."""
        return sum(self.outcomes.values())

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> BatchMetrics:
        """From the observed metrics' values: `records`, `counts` (key TAB count lines), the sets."""
        counts: dict[Counted, int] = {}
        for line in str(values.get("counts") or "").splitlines():
            key, _, count = line.rpartition("\t")
            counts[Counted.parse(key)] = int(count)
        outcomes = dict.fromkeys(OUTCOMES, 0)
        dead = released = 0
        for counted, n in counts.items():
            if counted.outcome == DEAD_LETTER:
                dead += n
                continue
            outcomes[counted.outcome] = outcomes.get(counted.outcome, 0) + n
            released += n if counted.released else 0
        return cls(
            records=int(values.get("records") or 0),
            dead_lettered=dead,
            released=released,
            outcomes=outcomes,
            requests=frozenset((r[0], r[1], r[2], r[3]) for r in values.get("requests") or ()),
            unavailable={r[0]: r[1] for r in values.get("unavailable") or ()},
            counts=counts,
        )


class BatchPlan:
    """The decision and output of every micro-batch of one shape (see the module docstring)."""

    def __init__(
        self,
        like: DataFrame,
        inputs: DecisionInputs,
        shape: SnapshotFlags,
        destinations: Destinations,
        kafka_options: Mapping[str, str],
        ensure_topics: Callable[[list[str]], Mapping[str, str]] | None = None,
    ) -> None:
        self.spark = like.sparkSession
        register_functions(self.spark)  # the observed metrics' aggregate (`batch_metrics`)
        self.inputs = inputs
        self.destinations = destinations
        self.kafka_options = dict(kafka_options)
        self.ensure_topics = ensure_topics if shape.has_transport else None

        def decided(batch: DataFrame) -> DataFrame:
            rows = batch.withColumns(
                {
                    # Whose topics a record came from: its dead letter goes to that instance's.
                    HOME_COLUMN: F.col("instance"),
                    # A record that does not decode belongs to no instance: no lookup finds anything.
                    "instance": F.when(F.col("error").isNull(), F.col("instance")),
                }
            )
            return decide(in_batch_order(rows) if shape.in_one_pass else rows, inputs)

        self._decided = decided
        self._prepared: _Prepared | None = None
        if self.ensure_topics is None:
            # The usual case: the whole query is planned now, once, and kept (`_Prepared`).
            self._prepared = _Prepared.of(like, lambda b: _records(decided(b), destinations))

    def run(
        self,
        batch: DataFrame,
        snapshot: Snapshot,
        pending: frozenset[tuple[str, str, str]] = frozenset(),
        rotation: Counters | None = None,
    ) -> BatchMetrics:
        """Decide `batch` with `snapshot` and write everything it gives in one Kafka write; its metrics.

        `pending` holds (instance, scope, service) of the MissingRoute requests outstanding (B4);
        `rotation` the counters of C5 and M3 (what the batch advanced is `inputs.advanced()` after).
        """
        self.inputs.set(snapshot, pending, rotation)
        if self._prepared is not None:
            return _metrics(self.spark, self._prepared.write(batch, self.kafka_options))
        jvm = self.spark._jvm
        assert jvm is not None  # a classic session: the snapshot was built in its JVM
        started = time.monotonic()
        decided, destinations = self._decided(batch), self.destinations
        if self.ensure_topics is not None:
            decided, destinations = self._with_transport_topics(decided)
        records = _records(decided, destinations)
        planned = time.monotonic()
        observed = jvm.router.plan.KafkaWrite.write(records._jdf, self.kafka_options, METRICS)
        log.debug("batch planned in %.3fs, run in %.3fs", planned - started, time.monotonic() - planned)
        return _metrics(self.spark, observed)

    def _with_transport_topics(self, decided: DataFrame) -> tuple[DataFrame, Destinations]:
        """T1: create the topics C4 decisions lead to; the decided rows are kept once for it."""
        assert self.ensure_topics is not None
        kept = decided.localCheckpoint(eager=True)
        t = self.destinations.topology
        transport = kept.where(F.col("error").isNull() & (F.col("choice_step") == "C4"))
        names = sorted({r[0] for r in transport.select("d_topic").distinct().collect() if r[0]})
        refused = dict(self.ensure_topics(names)) if names else {}
        if not refused:
            return kept, self.destinations
        return kept, Destinations(t, {**self.destinations.unavailable, **refused})


def empty_batch(like: DataFrame, partitions: int) -> DataFrame:
    """A batch of no rows of `like`'s exact schema in `partitions` partitions (`Prepared.emptyBatch`).

    A `BatchPlan` is planned, and its code generated and compiled, over it before the streaming
    query gives its first micro-batch (`streaming.spark.job.RouterJob.start`).
    """
    spark = like.sparkSession
    jvm = session_jvm(spark, "an empty batch needs")
    return DataFrame(
        jvm.router.plan.Prepared.emptyBatch(spark._jsparkSession, like._jdf.schema(), partitions), spark
    )


def _records(decided: DataFrame, destinations: Destinations) -> DataFrame:
    """Every record of the decided rows, with the batch's metrics observed on the way."""
    routed = with_destinations(decided, destinations)
    observed = routed.observe(METRICS, *batch_metrics(routed))
    return output_records(observed, destinations)


class _Prepared:
    """A Python handle on `router.plan.Prepared`: a query over micro-batches, planned once."""

    def __init__(self, prepared: Any) -> None:
        self._prepared = prepared

    @classmethod
    def of(cls, like: DataFrame, build: Callable[[DataFrame], DataFrame]) -> _Prepared | None:
        """`build` over micro-batches like `like`, or None when the query cannot be kept (a shuffle)."""
        spark = like.sparkSession
        prepared = session_jvm(spark, "the batch plan needs").router.plan.Prepared(like._jdf)
        records = build(DataFrame(prepared.input(), spark))
        return cls(prepared) if prepared.keep(records._jdf) else None

    def write(self, batch: DataFrame, kafka_options: Mapping[str, str]) -> Any:
        """Run the query over `batch`, write its records; the observed metrics (a JVM Row)."""
        return self._prepared.write(batch._jdf, dict(kafka_options), METRICS)


def _metrics(spark: SparkSession, observed: Any) -> BatchMetrics:
    """The `BatchMetrics` of the observed metrics (a JVM Row) of the batch's one write."""
    if observed is None:
        raise RouterError("the batch was written but its metrics were not observed")
    jvm = spark._jvm
    assert jvm is not None  # a classic session: checked when the plan was built
    row = CPickleSerializer().loads(jvm.org.apache.spark.sql.api.python.PythonSQLUtils.toPyRow(observed))
    return BatchMetrics.of(row.asDict(recursive=False))
