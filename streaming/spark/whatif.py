"""`router whatif` in Spark: a window of recorded messages decided under two sets of tables at once.

One Spark batch query (not the streaming query) reads the window from Kafka with explicit starting
and ending offsets, decodes each record as the job does (`streaming.spark.sources.decode`), and
decides it twice with the job's engine (`streaming.spark.decision.decide`, the JVM decision over a
broadcast snapshot): under the live tables, then under the planned ones, each with its own
`DecisionInputs`. The decisions are counted by service and by the two fates in the same job, with
a few example ids each, and only those counts reach the driver.

The decision is stateless across the window (the approximation `router whatif --help` states): the
window is decided as one micro-batch whose messages keep no earlier choice (K2), hold no delayed
message from before it (D1), and find no MissingRoute request outstanding (B4). Within the window
the pass carries all three, as a micro-batch's pass does: a conversation keeps the choice its first
message in the window made, a message waits behind one of its endpoint's delayed earlier in the
window, and the first message to reach M4 asks. Each message is decided at the time its record
was written (F3's lifetime is read then), with the routes active now (R6).

The kept choices the change leaves without their route are read from the instance's compacted
choices topic (`streaming.spark.state.CHOICE_VALUE`): its latest record per key, made within
`keep_choice_s`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.kafka.connection import KafkaConnection
from streaming.spark.decision import DecisionInputs, decide, in_batch_order
from streaming.spark.sources import Decoding, decode, reader_options, register_functions
from streaming.spark.state import CHOICE_VALUE
from streaming.topology import Topology
from streaming.whatif import (
    Fate,
    Group,
    Identity,
    KeptChoice,
    Partition,
    WhatIf,
    choice_scope,
)

SIDES = ("live", "planned")
"""The two decisions of each message: under the live tables, under the planned ones."""
FATE_COLUMNS = ("topic", "outcome", "reason")
"""What a decision leaves of a message in the report: `d_topic`, `outcome`, `reason`."""
_DECIDED_FROM = {"topic": "d_topic", "outcome": "outcome", "reason": "reason"}
_CARRIED = (
    "error",
    "pos",
    "instance",
    "id",
    "conversation_id",
    "service",
    "origin",
    "bid",
    "from_target",
    "message_type",
    "hops_remaining",
    "expires_ms",
    "ttl_ms",
    "size_bytes",
    "batch_ms",
)
"""The columns of a decoded message the second decision reads again (`decide`'s), and the report's."""


def kafka_range(
    spark: SparkSession, kafka: KafkaConnection, ranges: Mapping[Partition, tuple[int, int]]
) -> DataFrame:
    """The records of each partition from its start up to (not including) its end offset: a batch read.

    Partitions with nothing in their range are left out; `ranges` must hold at least one record.
    """
    wanted = {tp: r for tp, r in ranges.items() if r[0] < r[1]}
    by_topic: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for (topic, partition), offsets in sorted(wanted.items()):
        by_topic[topic][str(partition)] = offsets
    return (
        spark.read.format("kafka")
        .options(**reader_options(kafka))
        .option("assign", json.dumps({t: sorted(int(p) for p in ps) for t, ps in by_topic.items()}))
        .option(
            "startingOffsets", json.dumps({t: {p: r[0] for p, r in ps.items()} for t, ps in by_topic.items()})
        )
        .option(
            "endingOffsets", json.dumps({t: {p: r[1] for p, r in ps.items()} for t, ps in by_topic.items()})
        )
        .option("failOnDataLoss", "false")
        .load()
    )


def decided_twice(
    records: DataFrame, topology: Topology, live: DecisionInputs, planned: DecisionInputs, in_one_pass: bool
) -> DataFrame:
    """Each record of `records` decoded and decided under `live`, then `planned` (see the module docstring).

    The rows keep `_CARRIED` and get `live_topic`, `live_outcome`, `live_reason` and the same for
    `planned_`; a record that does not decode has an `error` and null fates. `in_one_pass`: either
    snapshot needs the batch decided in one partition, in batch order (B4, C5, M3), as the job does.
    """
    register_functions(records.sparkSession)  # decode's check for trailing bytes
    stamped = records.select(
        "topic", "partition", "offset", "value", F.unix_millis(F.col("timestamp")).alias("batch_ms")
    )
    rows = decode(stamped, Decoding.of(topology), passed=("batch_ms",)).select(*_CARRIED)
    if in_one_pass:
        rows = in_batch_order(rows)
    first = decide(rows, live).select(*_CARRIED, *_fate("live"))
    return decide(first, planned).select(*_CARRIED, *[f"live_{c}" for c in FATE_COLUMNS], *_fate("planned"))


def _fate(side: str) -> list[Column]:
    return [F.col(_DECIDED_FROM[c]).alias(f"{side}_{c}") for c in FATE_COLUMNS]


def report(decided: DataFrame, instance: str, examples: int = 3) -> WhatIf:
    """Count `decided_twice`'s rows by service and both fates, and the conversations newly delayed.

    One aggregation, in one Spark job: by service and both fates, the messages, a few example ids
    (the smallest, the largest, and the one whose id hashes lowest: a few values whatever the
    group's size), and for the groups the planned tables would newly delay, their conversations.
    """
    fates = [f"{side}_{c}" for side in SIDES for c in FATE_COLUMNS]
    starts_delayed = (F.col("planned_outcome") == "delayed") & (F.col("live_outcome") != "delayed")
    grouped = decided.groupBy(F.col("error").isNotNull().alias("undecodable"), "service", *fates).agg(
        F.count(F.lit(1)).alias("messages"),
        F.min("id").alias("first"),
        F.max("id").alias("last"),
        F.min_by("id", F.xxhash64("id")).alias("some"),
        # Null, and so left out, for a message that does not start to be delayed.
        F.collect_set(F.when(starts_delayed, F.col("conversation_id"))).alias("delayed_conversations"),
    )
    groups: list[Group] = []
    undecodable = 0
    delayed: dict[str, set[str]] = defaultdict(set)
    for row in grouped.collect():
        if row["undecodable"]:
            undecodable += int(row["messages"])
            continue
        delayed[row["service"]].update(row["delayed_conversations"])
        ids = tuple(sorted({row["first"], row["last"], row["some"]}))[:examples]
        groups.append(
            Group(
                service=row["service"],
                live=_fate_of(row, "live"),
                planned=_fate_of(row, "planned"),
                messages=int(row["messages"]),
                examples=ids,
            )
        )
    groups.sort(key=lambda g: (g.service, g.live.topic, g.planned.topic, g.live.outcome, g.planned.outcome))
    conversations = {service: len(ids) for service, ids in delayed.items() if ids}
    return WhatIf(instance, tuple(groups), undecodable=undecodable, delayed_conversations=conversations)


def _fate_of(row: Any, side: str) -> Fate:
    return Fate(row[f"{side}_topic"] or "", row[f"{side}_outcome"] or "", row[f"{side}_reason"] or "")


def _identity_text(parts: list[Column]) -> Column:
    """An identity's columns as one string, joined by NUL as `kept_choices_removed` joins an `Identity`."""
    return F.concat_ws("\u0000", *parts)


def kept_choices_removed(
    spark: SparkSession,
    kafka: KafkaConnection,
    ranges: Mapping[Partition, tuple[int, int]],
    removed: set[Identity],
    kept_since_ms: int,
    examples: int = 3,
) -> list[KeptChoice]:
    """The conversations whose kept choice names one of `removed`, from the choices topic's `ranges`.

    A key's latest record counts (a tombstone or a value that is not a choice forgets it), if it was
    made at or after `kept_since_ms` (K2 keeps a choice `keep_choice_s`).
    """
    if not removed or not any(start < end for start, end in ranges.values()):
        return []
    records = kafka_range(spark, kafka, ranges)
    latest = records.groupBy("partition", "key").agg(
        F.max_by(F.struct("value", "timestamp"), "offset").alias("last")
    )
    choice = latest.select(
        F.from_json(F.col("last.value").cast("string"), CHOICE_VALUE).alias("v"),
        F.unix_millis(F.col("last.timestamp")).alias("at"),
    ).where(F.col("v.address").isNotNull() & (F.col("at") >= kept_since_ms))
    scope = F.when(F.col("v.origin") == "remote", F.lit(choice_scope("remote"))).otherwise(F.col("v.origin"))
    address = F.lower(F.regexp_replace(F.trim(F.col("v.address")), "/+$", ""))
    identity = _identity_text(
        [
            scope,
            F.coalesce(F.col("v.bid"), F.lit("")),
            F.coalesce(F.col("v.route_service"), F.lit("")),
            address,
        ]
    )
    wanted = sorted("\u0000".join(i) for i in removed)
    hit = choice.select(
        scope.alias("scope"),
        F.coalesce(F.col("v.bid"), F.lit("")).alias("bid"),
        F.coalesce(F.col("v.route_service"), F.lit("")).alias("service"),
        address.alias("address"),
        F.col("v.conversation_id").alias("conversation_id"),
        identity.alias("identity"),
    ).where(F.col("identity").isin(wanted))
    out = []
    for row in (
        hit.groupBy("scope", "bid", "service", "address")
        .agg(
            F.count_distinct("conversation_id").alias("conversations"),
            F.min("conversation_id").alias("first"),
            F.max("conversation_id").alias("last"),
        )
        .collect()
    ):
        ids = tuple(sorted({row["first"], row["last"]}))[:examples]
        out.append(
            KeptChoice(
                row["scope"], row["address"], row["service"], row["bid"], int(row["conversations"]), ids
            )
        )
    return sorted(out, key=lambda k: (-k.conversations, k.scope, k.address))
