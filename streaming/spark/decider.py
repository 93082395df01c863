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
    Instance,
    Outcome,
    Reason,
    Route,
    normalize_address,
)
from streaming.spark.engine import (
    CHOICE_SCHEMA,
    MESSAGE_SCHEMA,
    attach_choices,
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
        return self.decide_many([batch])[0]

    def decide_many(self, batches: Sequence[RoutingBatch]) -> list[BatchResult]:
        """Decide several independent batches, each with its own instance and routes, side by side.

        The batches become one Spark plan per distinct clock: each batch is an instance of the
        snapshot (keyed by its index), so no route, catalog, request or conversation of one batch
        is seen by another. The result is in the order of `batches`.
        """
        results: list[BatchResult | None] = [None] * len(batches)
        by_clock: dict[object, list[int]] = {}
        for index, batch in enumerate(batches):
            by_clock.setdefault(batch.now, []).append(index)
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
        snapshot = build_snapshot(
            self.spark,
            {key: batch.instance for key, batch in zip(keys, batches, strict=True)},
            route_frame(self.spark, routes),
            mirrors={key: dict(batch.mirrors) for key, batch in zip(keys, batches, strict=True)},
            has_bcn=any(r.service == BROKER_CONFIGURATION_SERVICE for _, r in routes),
            may_loop_back=any(_may_loop_back(r, batches[int(key)].instance) for key, r in routes),
        )
        context = batch_context(
            self.spark,
            batches[0].now,
            pending=frozenset(
                (key, scope, service)
                for key, batch in zip(keys, batches, strict=True)
                for scope, service in batch.pending_requests
            ),
            waiting=frozenset(
                (key, conversation)
                for key, batch in zip(keys, batches, strict=True)
                for conversation in batch.waiting_conversations
            ),
        )
        kept = [
            (key, *choice_key, *identity)
            for key, batch in zip(keys, batches, strict=True)
            for choice_key, identity in sorted(batch.choices.items())
        ]
        if kept:
            messages = attach_choices(messages, local_frame(self.spark, kept, CHOICE_SCHEMA))
        result = decide(messages, snapshot, context).orderBy("pos").collect()
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
