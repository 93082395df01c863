"""What a micro-batch writes: every record it produces, from the decided rows, as SQL.

One decided row gives up to four records, made in one projection and written in one Kafka write:

* its message, to its destination topic with the decision in its headers
  (`streaming.contract.MESSAGE_HEADERS`, made by the decision's pass, `router.spark.Headers`); a
  record that does not decode goes to the dead-letter topic instead, with its error;
* the choice it made (K2), to the choices topic, when it is the first of its entry to choose in
  the batch and the state processor did not keep it itself (`streaming.spark.state`);
* when it asks for a route (M4, B3): the MissingRoute message to the dynamic routing service, on
  the instance's outbound topic (it is routed like any message of its database), and the request's
  record on the requests topic (B4).

The destination topic is the decision's (`d_topic`, `streaming.spark.decision`), named as
`streaming.topics` names them: a local service's queue, another instance's inbound topic, a
network address's topic, the delayed or the dropped topic. A destination the router could not
create (`Destinations.unavailable`) sends its messages to the dropped topic with the reason
`destination_unavailable` and the broker's error.
A dropped (or discarded) message also carries `source_topic`, the input topic it was read from
(outbound, inbound, or delayed for one released from the delay), as a dead letter does: the
decision's `scope` cannot tell (msdb is also the scope of an outbound message that loops back,
S5), and `router redrive` sends the message back to that input.
A message is written as it arrived, byte for byte, unless its decision changes it: a forwarded one
carries one hop less (F3), a delayed one one attempt more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from streaming import topics
from streaming.contract import FIRST_COLUMN, Outcome, Reason
from streaming.kafka.avro import schema_json
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, MISSING_ROUTE_MESSAGE_TYPE
from streaming.spark.sources import SOURCE_DELAYED, SOURCE_INBOUND, topic_for
from streaming.spark.state import choice_key, choice_value
from streaming.topology import Topology

DESTINATION_UNAVAILABLE = Reason.DESTINATION_UNAVAILABLE.value
"""The reason of a message whose destination topic could not be created or written."""

HOME_COLUMN = "home_instance"
"""The instance whose topic a row was read from, kept for a record that does not decode (whose
`instance` the batch clears, so that no lookup of the decision finds anything for it)."""

HEADER_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
HEADER_DDL = HEADER_TYPE.simpleString()
"""`HEADER_TYPE` by name: a cast to it by name is one py4j round trip, to the type object six."""
RECORD_FIELDS = ("key", "value", "topic", "headers")
SOURCE_TOPIC_HEADER = "source_topic"
"""The input topic a dropped message or a dead letter was read from, after the decision's headers."""


@dataclass(frozen=True)
class Destinations:
    """Where a batch's records go: the instances' topics, and the destinations it cannot write."""

    topology: Topology
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Destination topics the broker refused, with its error."""


def headers(pairs: list[tuple[str, Column]]) -> Column:
    """Kafka headers from (name, string column) pairs; a null value leaves its header out."""
    empty = F.array().cast(HEADER_DDL)
    if not pairs:
        return empty
    parts = [
        F.when(
            v.isNotNull(),
            F.array(F.struct(F.lit(k).alias("key"), v.cast("string").cast("binary").alias("value"))),
        ).otherwise(empty)
        for k, v in pairs
    ]
    return F.flatten(F.array(*parts))


def _record(key: Column, value: Column, topic: Column, headers_: Column) -> Column:
    return F.struct(
        key.cast("binary").alias("key"),
        value.cast("binary").alias("value"),
        topic.cast("string").alias("topic"),
        headers_.cast(HEADER_DDL).alias("headers"),
    )


def _message_value() -> Column:
    """The bytes a message leaves with: as it arrived, or re-encoded where the decision changed it."""
    schema = schema_json("message")
    outcome = F.col("outcome")
    # Decoded again here only for the few it changes; those decoded once already (FAILFAST keeps
    # the schema's required fields required, so the record encodes back without a nullable field).
    rec = from_avro(F.col("value"), schema, {"mode": "FAILFAST"})
    forward, delayed = Outcome.FORWARD.value, Outcome.DELAYED.value
    changed = rec.withField(
        "hops_remaining",
        F.when(outcome == forward, F.col("d_hops_remaining")).otherwise(rec["hops_remaining"]),
    ).withField("attempt", F.when(outcome == delayed, rec["attempt"] + 1).otherwise(rec["attempt"]))
    return F.when(outcome.isin(forward, delayed), to_avro(changed, schema)).otherwise(F.col("value"))


def with_destinations(decided: DataFrame, d: Destinations) -> DataFrame:
    """Add `_dest` (the destination topic) and `_unavailable` (the broker's error, when it refused it)."""
    frame = decided.withColumn("_dest", F.when(F.col("error").isNull(), F.col("d_topic")))
    if d.unavailable:
        refused = F.create_map(*[F.lit(x) for pair in sorted(d.unavailable.items()) for x in pair])
        unavailable = F.try_element_at(refused, F.col("_dest"))
    else:
        unavailable = F.lit(None).cast("string")
    frame = frame.withColumn("_unavailable", unavailable)
    # A destination that cannot be written costs only its own messages: they are dropped, with why.
    set_aside = F.col("_unavailable").isNotNull()
    return frame.withColumns(
        {
            "outcome": F.when(set_aside, F.lit("dropped")).otherwise(F.col("outcome")),
            "reason": F.when(set_aside, F.lit(DESTINATION_UNAVAILABLE)).otherwise(F.col("reason")),
        }
    )


def output_records(decided: DataFrame, d: Destinations) -> DataFrame:
    """Every record the batch writes (`RECORD_FIELDS`), from rows of `with_destinations`."""
    t = d.topology
    outcome = F.col("outcome")
    good = F.col("error").isNull()
    decided_at = F.col("d_decided_at")  # the batch's time, as text once per batch
    # The decision's headers (`streaming.contract.MESSAGE_HEADERS`), made by its pass.
    topic, message_headers = F.col("_dest"), F.col("d_headers")
    if d.unavailable:
        # A message whose destination cannot be written leaves as dropped, for that reason, with
        # the destination and the error. Only while such a destination exists: the filter is a
        # function Spark does not compile, and the whole projection would be interpreted with it.
        refused = F.col("_unavailable").isNotNull()
        refused_headers = F.concat(
            F.filter(F.col("d_headers"), lambda h: ~h["key"].isin("outcome", "reason")),
            headers(
                [
                    ("outcome", outcome),
                    ("reason", F.col("reason")),
                    ("destination", F.col("_dest")),
                    ("error", F.col("_unavailable")),
                ]
            ),
        )
        topic = F.when(refused, topic_for(t, topics.dropped_topic)).otherwise(topic)
        message_headers = F.when(refused, refused_headers).otherwise(message_headers)
    home = F.col(HOME_COLUMN)
    source_topic = (
        F.when(F.col("source") == SOURCE_DELAYED, topic_for(t, topics.delayed_topic, home))
        .when(F.col("source") == SOURCE_INBOUND, topic_for(t, topics.inbound_topic, home))
        .otherwise(topic_for(t, topics.outbound_topic, home))
    )
    # Only on what the dropped topic gets: a when, not a header made for every row.
    message_headers = F.when(
        outcome.isin("dropped", "discarded"),
        F.concat(message_headers, headers([(SOURCE_TOPIC_HEADER, source_topic)])),
    ).otherwise(message_headers)
    message = _record(F.col("conversation_id"), _message_value(), topic, message_headers)
    dead_letter = _record(
        F.lit(None),
        F.col("value"),
        topic_for(t, topics.deadletter_topic, home),
        headers(
            [
                ("error", F.col("error")),
                (SOURCE_TOPIC_HEADER, source_topic),
                ("source_partition", F.col("partition")),
                ("source_offset", F.col("offset")),
                ("decided_at", decided_at),
            ]
        ),
    )
    choice = F.when(
        good & F.col(FIRST_COLUMN) & F.col("k_change").isNotNull(),
        _record(
            choice_key(),
            choice_value(),
            topic_for(t, topics.choices_topic),
            headers([("change", F.col("k_change"))]),
        ),
    )
    asks = good & F.col("requests").isNotNull()
    request_id = F.col("_request_id")
    request_message = F.when(
        asks,
        _record(
            request_id, _missing_route_message(request_id), topic_for(t, topics.outbound_topic), headers([])
        ),
    )
    request_record = F.when(
        asks, _record(_request_key(), _request_value(), topic_for(t, topics.requests_topic), headers([]))
    )
    records = F.array(F.when(good, message).otherwise(dead_letter), choice, request_message, request_record)
    with_id = decided.withColumn("_request_id", F.when(asks, missing_route_id()))
    return with_id.select(F.inline(records)).where(F.col("topic").isNotNull())


def missing_route_id() -> Column:
    """B3: the id of a MissingRoute request's message and dialog.

    The asking message's id and the batch's time. The dynamic routing service ends the request by
    naming it (`streaming.directory`).
    """
    return F.concat_ws("-", F.lit("missing-route"), F.col("id"), F.col("batch_ms").cast("string"))


def _missing_route_message(request_id: Column) -> Column:
    """B3: one MissingRoute message to the dynamic routing service, sent by the table that asked."""
    service = F.col("requests")
    escaped = F.regexp_replace(
        F.regexp_replace(F.regexp_replace(service, "&", "&amp;"), "<", "&lt;"), ">", "&gt;"
    )
    body = F.concat(
        F.lit(f'<MissingRoute xmlns="{MISSING_ROUTE_MESSAGE_TYPE}"><SERVICE_NAME>'),
        escaped,
        F.lit("</SERVICE_NAME></MissingRoute>"),
    )
    null = F.lit(None)
    record = F.struct(
        F.coalesce(request_id, F.lit("")).alias("message_id"),
        F.coalesce(request_id, F.lit("")).alias("conversation_id"),
        F.lit(0).cast("long").alias("sequence_number"),
        F.lit(BROKER_CONFIGURATION_SERVICE).alias("from_service"),
        null.cast("string").alias("from_broker_instance"),
        F.lit(BROKER_CONFIGURATION_SERVICE).alias("to_service"),
        null.cast("string").alias("to_broker_instance"),
        F.col("d_scope").alias("origin_database"),
        F.lit(True).alias("is_initiator"),
        F.lit(MISSING_ROUTE_MESSAGE_TYPE).alias("message_type"),
        F.coalesce(body, F.lit("")).cast("binary").alias("body"),
        F.lit(16).alias("hops_remaining"),
        null.cast("long").alias("time_to_live_ms"),
        null.cast("timestamp").alias("expires_at"),
        F.timestamp_millis(F.col("batch_ms")).alias("enqueued_at"),
        F.lit(0).alias("attempt"),
    )
    return to_avro(record, schema_json("message"))


def _request_key() -> Column:
    """The key of a request record: instance, scope and service (`streaming.spark.requests`)."""
    return F.concat_ws("\u0000", F.col("instance"), F.col("d_scope"), F.col("requests"))


def _request_value() -> Column:
    return F.to_json(
        F.struct(
            F.col("instance").alias("instance"),
            F.col("d_scope").alias("scope"),
            F.col("requests").alias("service"),
            F.lit(True).alias("asked"),
            F.col("_request_id").alias("request_id"),
        )
    )


COUNT_KEY_SEPARATOR = "\u0001"
"""Between the parts of a counted row's key (`count_key`)."""
DEAD_LETTER = "deadletter"
"""The outcome part of a counted dead letter's key (`count_key`)."""
RELEASED = "released"
"""The released part of the key of a counted message that left the delay in the batch (D2)."""


def count_key() -> Column:
    """What a written row is counted by: instance, outcome, reason, released, unavailable destination.

    The parts, joined by `COUNT_KEY_SEPARATOR`: the instance whose topic the row came from; its
    outcome (`DEAD_LETTER` for a record that does not decode); its reason, or empty; `RELEASED`
    when it left the delay in this batch (D2), else empty; the destination topic that could not be
    written, when its reason is `destination_unavailable`, else empty. `router_key_counts`
    (`router.metrics.KeyCounts`) counts the batch's rows by it: `streaming.spark.batch.BatchMetrics`.
    """
    good = F.col("error").isNull()
    empty = F.lit("")
    return F.concat_ws(
        COUNT_KEY_SEPARATOR,
        F.coalesce(F.col(HOME_COLUMN), empty),
        F.when(good, F.coalesce(F.col("outcome"), empty)).otherwise(F.lit(DEAD_LETTER)),
        F.when(good, F.coalesce(F.col("reason"), empty)).otherwise(empty),
        F.when(good & (F.col("source") == SOURCE_DELAYED), F.lit(RELEASED)).otherwise(empty),
        F.coalesce(F.when(F.col("_unavailable").isNotNull(), F.col("_dest")), empty),
    )


KEY_COUNTS = "router_key_counts"
"""The SQL aggregate that counts rows by a key (`router.metrics.KeyCounts`), registered by
`streaming.spark.sources.register_functions`."""


def batch_metrics(decided: DataFrame) -> list[Column]:
    """What the driver learns from a batch as it is written (Spark's observed metrics, no pass of its own).

    The rows are counted by `count_key` in one aggregate (a hash lookup per row), which tells the
    counts by instance, outcome and reason, the dead letters and the released messages at once.
    """
    good = F.col("error").isNull()
    return [
        F.count(F.lit(1)).alias("records"),
        F.call_function(KEY_COUNTS, count_key()).alias("counts"),
        F.collect_set(
            F.when(
                good & F.col("requests").isNotNull(),
                F.struct("instance", "d_scope", "requests", missing_route_id()),
            )
        ).alias("requests"),
        F.collect_set(F.when(F.col("_unavailable").isNotNull(), F.struct("_dest", "_unavailable"))).alias(
            "unavailable"
        ),
    ]
