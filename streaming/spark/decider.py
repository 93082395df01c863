"""The Spark engine behind the `Decider` protocol: a batch becomes DataFrames, decisions come back.

Used by `router resolve --engine spark` and by the tests that hold the two engines equal. The
streaming job calls `streaming.spark.engine.decide` on its micro-batches directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Row, SparkSession

from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    Decision,
    Outcome,
    Reason,
)
from streaming.spark.engine import (
    BEHIND,
    CHOICE_SCHEMA,
    MESSAGE_SCHEMA,
    apply_behind,
    attach_choices,
    batch_context,
    build_snapshot,
    decide,
    decide_each,
    local_frame,
    route_frame,
    snapshot_flags,
)
from streaming.spark.state import mark_in_batch_order


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
        return self.decide_many([batch])[0]

    def decide_many(self, batches: Sequence[RoutingBatch]) -> list[BatchResult]:
        """Decide several independent batches, each with its own instance and routes, side by side.

        The batches become one Spark plan per distinct clock: each batch is an instance of the
        snapshot (keyed by its index), so no route, catalog, request or conversation of one batch
        is seen by another. The result is in the order of `batches`.
        """
        results: list[BatchResult | None] = [None] * len(batches)
        # One plan per clock, and apart the batches that route to the dynamic routing service: the
        # others are decided as the streaming job decides them, with D1 marked in one ordered pass.
        by_clock: dict[object, list[int]] = {}
        for index, batch in enumerate(batches):
            has_bcn = any(r.service == BROKER_CONFIGURATION_SERVICE for r in batch.routes)
            by_clock.setdefault((batch.now, has_bcn), []).append(index)
        for indexes in by_clock.values():
            together = self._decide_together([batches[i] for i in indexes])
            for index, result in zip(indexes, together, strict=True):
                results[index] = result
        return [r if r is not None else BatchResult(decisions=()) for r in results]

    def _decide_together(self, batches: Sequence[RoutingBatch]) -> list[BatchResult]:
        keys = [str(k) for k in range(len(batches))]
        rows: list[tuple[object, ...]] = []
        for key, batch in zip(keys, batches, strict=True):
            first = len(rows)  # positions run on across the batches: `pos` is unique in the plan
            rows.extend(
                (
                    first + pos,
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
                )
                for pos, m in enumerate(batch.messages)
            )
        if not rows:
            return [BatchResult(decisions=()) for _ in batches]
        messages = local_frame(self.spark, rows, MESSAGE_SCHEMA)
        routes = [(key, route) for key, batch in zip(keys, batches, strict=True) for route in batch.routes]
        instances = {key: batch.instance for key, batch in zip(keys, batches, strict=True)}
        now = batches[0].now
        snapshot = build_snapshot(
            self.spark,
            instances,
            route_frame(self.spark, routes),
            now=now,
            flags=snapshot_flags(routes, instances, now),
            mirrors={key: dict(batch.mirrors) for key, batch in zip(keys, batches, strict=True)},
        )
        context = batch_context(
            self.spark,
            pending=frozenset(
                (key, scope, service)
                for key, batch in zip(keys, batches, strict=True)
                for scope, service in batch.pending_requests
            ),
            waiting=frozenset(
                (key, conversation, from_target)
                for key, batch in zip(keys, batches, strict=True)
                for conversation, from_target in batch.waiting_endpoints
            ),
        )
        kept = [
            (key, *choice_key, *identity)
            for key, batch in zip(keys, batches, strict=True)
            for choice_key, identity in sorted(batch.choices.items())
        ]
        if kept:
            messages = attach_choices(messages, local_frame(self.spark, kept, CHOICE_SCHEMA))
        if snapshot.has_bcn:
            decided = decide(messages, snapshot, context)
        else:
            # Each conversation endpoint's rows together in batch order, as the state processor lets
            # them leave in the job (sorted after the decision: Spark drops a sort below a join).
            each = decide_each(messages, snapshot, context)
            endpoint = ("instance", "conversation_id", "from_target")
            ordered = each.repartition(1).sortWithinPartitions(*endpoint, "pos")
            decided = apply_behind(mark_in_batch_order(ordered)).drop(BEHIND)
        result = decided.orderBy("pos").collect()
        by_key: dict[str, list[Row]] = {key: [] for key in keys}
        for row in result:
            by_key[row["instance"]].append(row)
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
