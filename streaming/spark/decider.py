"""The Spark engine behind the `Decider` protocol: a batch becomes DataFrames, decisions come back.

Used by `router resolve --engine spark` and by the tests that hold the two engines equal. The
streaming job calls `streaming.spark.engine.decide` on its micro-batches directly.
"""

from __future__ import annotations

from pyspark.sql import Row, SparkSession

from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    Decision,
    Instance,
    Outcome,
    Reason,
    Route,
    normalize_address,
)
from streaming.spark.engine import (
    MESSAGE_SCHEMA,
    batch_context,
    build_snapshot,
    decide,
    local_frame,
    route_frame,
)


class SparkDecider:
    """Decide batches with the Spark SQL engine on a (local) SparkSession."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @classmethod
    def create(cls) -> SparkDecider:
        """Start (or reuse) the project's SparkSession."""
        from streaming.spark.session import build_session

        return cls(build_session("router-resolve", shuffle_partitions=1))

    def decide(self, batch: RoutingBatch) -> BatchResult:
        """Decide every message of `batch` in one Spark job."""
        rows = [
            (
                pos,
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
            )
            for pos, m in enumerate(batch.messages)
        ]
        if not rows:
            return BatchResult(decisions=())
        messages = local_frame(self.spark, rows, MESSAGE_SCHEMA)
        snapshot = build_snapshot(
            self.spark,
            batch.instance,
            route_frame(self.spark, batch.routes),
            mirrors=dict(batch.mirrors),
            has_bcn=any(r.service == BROKER_CONFIGURATION_SERVICE for r in batch.routes),
            may_loop_back=any(_may_loop_back(r, batch.instance) for r in batch.routes),
        )
        context = batch_context(
            self.spark, batch.now, pending=batch.pending_requests, waiting=batch.waiting_conversations
        )
        result = decide(messages, snapshot, context).orderBy("pos").collect()
        decisions = tuple(_to_decision(r, batch) for r in result)
        requests = tuple((r["d_scope"], r["requests"]) for r in result if r["requests"] is not None)
        return BatchResult(decisions=decisions, requests=requests)


def _may_loop_back(route: Route, instance: Instance) -> bool:
    """S5 can apply: the route is TRANSPORT, or one of its addresses is the instance's own."""
    own = normalize_address(instance.address)
    return (
        route.address.strip().upper() == "TRANSPORT"
        or normalize_address(route.address) == own
        or (route.mirror_address is not None and normalize_address(route.mirror_address) == own)
    )


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
