"""The Spark engine behind the `Decider` protocol: a batch becomes a DataFrame, decisions come back.

Used by `router resolve --engine spark` and by the tests that hold the two engines equal. It decides
with what the streaming job decides with (`streaming.spark.decision`): the route snapshot in the
JVM, and the pass over the batch's rows in batch order.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.model import Decision, Outcome, Reason
from streaming.spark.decision import DecisionInputs, build_snapshot, decide, in_batch_order
from streaming.spark.session import cast_to

LITERAL_ROWS = 16
"""local_frame writes up to this many rows into the plan as literals; more go over as Arrow."""

MESSAGE_SCHEMA = StructType(
    [
        StructField("pos", LongType(), False),
        StructField("instance", StringType(), False),
        StructField("id", StringType(), False),
        StructField("conversation_id", StringType(), False),
        StructField("service", StringType(), False),
        StructField("origin", StringType(), False),
        StructField("bid", StringType(), True),
        StructField("from_target", BooleanType(), False),
        StructField("message_type", StringType(), False),
        StructField("hops_remaining", IntegerType(), False),
        StructField("ttl_s", DoubleType(), True),
        StructField("size_bytes", LongType(), False),
        # K2: what the message's conversation chose before (`RoutingBatch.choices`).
        StructField("kept_bid", StringType(), True),
        StructField("kept_route_service", StringType(), True),
        StructField("kept_address", StringType(), True),
        # D1: the message's endpoint has a message waiting (`RoutingBatch.waiting_endpoints`).
        StructField("waiting", BooleanType(), False),
    ]
)


class SparkDecider:
    """Decide batches with the Spark engine on a (local) SparkSession."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @classmethod
    def create(cls) -> SparkDecider:
        """Start (or reuse) the project's SparkSession."""
        from streaming.spark.session import build_session

        return cls(build_session("router-resolve", shuffle_partitions=1))

    def decide(self, batch: RoutingBatch) -> BatchResult:
        """Decide every message of `batch` in one Spark job."""
        return self.decide_many([batch])[0]

    def decide_many(self, batches: Sequence[RoutingBatch]) -> list[BatchResult]:
        """Decide several independent batches, each with its own instance and routes, side by side.

        The batches are decided in one pass, one after the other: each batch is an instance of the
        snapshot (keyed by its index), so no route, catalog, request or conversation of one batch
        is seen by another. The result is in the order of `batches`.
        """
        if not batches:
            return []
        keys = [str(k) for k in range(len(batches))]
        rows: list[tuple[object, ...]] = []
        for key, batch in zip(keys, batches, strict=True):
            for m in batch.messages:
                kept = batch.choices.get(m.choice_key)
                rows.append(
                    (
                        len(rows),  # `pos` runs on across the batches: batch order is key order
                        key,
                        m.id,
                        m.conversation_id,
                        m.service,
                        m.origin,
                        m.broker_instance,
                        m.from_target,
                        m.message_type,
                        m.hops_remaining,
                        m.time_to_live_s,
                        m.size_bytes,
                        *(kept if kept is not None else (None, None, None)),
                        m.endpoint in batch.waiting_endpoints,
                    )
                )
        if not rows:
            return [BatchResult(decisions=()) for _ in batches]
        snapshots = [
            build_snapshot(
                self.spark,
                {key: batch.instance for key, batch in zip(keys, batches, strict=True)},
                [(key, route) for key, batch in zip(keys, batches, strict=True) for route in batch.routes],
                now=now,
                mirrors={key: dict(batch.mirrors) for key, batch in zip(keys, batches, strict=True)},
            )
            for now in sorted({batch.now for batch in batches})
        ]
        by_now = {s.at: s for s in snapshots}
        pending = frozenset(
            (key, scope, service)
            for key, batch in zip(keys, batches, strict=True)
            for scope, service in batch.pending_requests
        )
        messages = in_batch_order(local_frame(self.spark, rows, MESSAGE_SCHEMA))
        rotation = {key: batch.rotation for key, batch in zip(keys, batches, strict=True)}
        inputs = DecisionInputs(self.spark)
        by_key: dict[str, list[Row]] = {key: [] for key in keys}
        advanced: dict[str, dict[str, int]] = {}
        try:
            # Batches with different clocks (R6) are decided against their own snapshots.
            for now, snapshot in by_now.items():
                instants = [key for key, batch in zip(keys, batches, strict=True) if batch.now == now]
                inputs.set(snapshot, pending, rotation)
                for row in decide(messages.where(messages["instance"].isin(instants)), inputs).collect():
                    by_key[row["instance"]].append(row)
                advanced.update(inputs.advanced())
        finally:
            for snapshot in snapshots:
                snapshot.release()
        return [
            BatchResult(
                decisions=tuple(_to_decision(r, batch) for r in by_key[key]),
                requests=tuple(
                    (r["d_scope"], r["requests"]) for r in by_key[key] if r["requests"] is not None
                ),
                choices={
                    (r["conversation_id"], r["origin"], r["service"]): (
                        r["k_bid"],
                        r["k_route_service"],
                        r["k_address"],
                    )
                    for r in by_key[key]
                    if r["k_address"] is not None
                },
                rotation=advanced.get(key, {}),
            )
            for key, batch in zip(keys, batches, strict=True)
        ]


def _to_decision(row: Row, batch: RoutingBatch) -> Decision:
    return Decision(
        id=row["id"],
        outcome=Outcome(row["outcome"]),
        at=batch.now,
        database=row["d_database"],
        address=row["d_address"],
        route=row["d_route"],
        match_step=row["match_step"],
        choice_step=row["choice_step"],
        reason=Reason(row["reason"]) if row["reason"] else None,
        requests=row["requests"],
        hops_remaining=row["d_hops_remaining"],
        scope=row["d_scope"],
    )


def local_frame(spark: SparkSession, rows: Sequence[Sequence[object]], schema: StructType | str) -> DataFrame:
    """A driver-side table that the JVM evaluates alone.

    `spark.createDataFrame` on a Python list goes through Python workers on every use. Up to
    LITERAL_ROWS rows are written into the plan as literals; more are handed over once as an Arrow
    table, which the JVM holds and reads without a Python worker.
    """
    parsed = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    if not isinstance(parsed, StructType):
        raise TypeError(f"expected a struct schema, got {schema!r}")
    struct = parsed
    if not rows:
        return spark.range(0).select(*[cast_to(F.lit(None), f.dataType).alias(f.name) for f in struct.fields])
    if len(rows) > LITERAL_ROWS:
        arrow_schema = to_arrow_schema(struct)
        columns = [list(c) for c in zip(*rows, strict=True)]
        arrays = [pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema, strict=True)]
        return spark.createDataFrame(pa.Table.from_arrays(arrays, schema=arrow_schema))
    fields = struct.fields
    values = [
        F.struct(*[cast_to(F.lit(v), f.dataType).alias(f.name) for v, f in zip(row, fields, strict=True)])
        for row in rows
    ]
    return spark.range(1).select(F.inline(F.array(*values)))
