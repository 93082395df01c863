"""The router's state in the streaming job, in Spark's state store.

Three rules need state that outlives a micro-batch (spec K2, D1-D2, B4). Inside the streaming
query, before `foreachBatch`, the JVM processor `router.state.RouterState` (jvm/state, compiled by
`make setup`) runs as Spark's `flatMapGroupsWithState`; its state is in Spark's state store
(RocksDB), saved with the query's checkpoint, so a restart resumes it. No message passes through
Python. Per (instance, conversation) it keeps:

* K2, the C0 identity the conversation chose per (origin database, target service): each message
  leaves with it in `KEPT_COLUMNS`, and the engine keeps it while it is still a candidate;
* D1-D2, the conversation's delayed messages: they wait in the state until the first of them is
  `retry_s` old, then all leave together, in their order, ahead of the conversation's new
  messages; while any waits, the conversation's new messages leave with `waiting` true and the
  engine delays them behind it.

Per instance it keeps the outstanding MissingRoute requests (B4), and tells every micro-batch
which are outstanding with a status row (`pending_requests` set, no `topic`).

Each is fed back from a Kafka topic that the micro-batches write and the query reads: the choices
topic (compacted; a record per choice a decision made), the delayed topic (the delayed messages
themselves, LogAppendTime) and the requests topic (compacted; a record when a request is sent and
when it ends). Restarting from the checkpoint resumes the state at the last committed batch and
the topics at their offsets, so nothing is lost or applied twice; a new checkpoint rebuilds the
choices and requests from the compacted topics.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from streaming.errors import RouterError
from streaming.spark.engine import CHOICE_IDENTITY_COLUMNS, KEPT_COLUMNS

MESSAGE, CHOICE, DELAYED, REQUEST = 0, 1, 2, 3
"""The kinds of rows the processor takes (`c_kind`)."""

IDENTITY_COLUMNS = ("c_bid", "c_route_service", "c_address")
"""Where a choice or delayed row carries the C0 identity kept for its conversation."""

PENDING_COLUMN = "pending_requests"

CHOICE_VALUE = StructType(
    [
        StructField("instance", StringType()),
        StructField("conversation_id", StringType()),
        StructField("origin", StringType()),
        StructField("service", StringType()),
        StructField("bid", StringType()),
        StructField("route_service", StringType()),
        StructField("address", StringType()),
    ]
)
"""The JSON value of a choice record; its key is instance, conversation, origin and service."""

REQUEST_VALUE = StructType(
    [
        StructField("instance", StringType()),
        StructField("scope", StringType()),
        StructField("service", StringType()),
        StructField("asked", BooleanType()),
    ]
)
"""The JSON value of a request record; its key is instance, scope and service."""

_KEY_FIELDS = ("instance", "conversation_id", "origin", "service")
_IDENTITY_FIELDS = ("bid", "route_service", "address")


def _null(dtype: DataType) -> Column:
    return F.lit(None).cast(dtype)


def _state_columns(
    kind: int,
    identity: Sequence[Column] | None = None,
    at_ms: Column | None = None,
    asked: Column | None = None,
) -> dict[str, Column]:
    none = _null(StringType())
    return {
        "c_kind": F.lit(kind).cast(IntegerType()),
        **dict(zip(IDENTITY_COLUMNS, identity or (none, none, none), strict=True)),
        "c_at_ms": at_ms if at_ms is not None else _null(LongType()),
        "c_asked": asked if asked is not None else _null(BooleanType()),
    }


def _like_messages(messages: DataFrame, given: dict[str, Column]) -> list[Column]:
    """The columns of `messages`, taken from `given` where named there, null elsewhere."""
    return [given.get(f.name, _null(f.dataType)).alias(f.name) for f in messages.schema.fields]


def as_messages(messages: DataFrame) -> DataFrame:
    """Message rows as the processor takes them."""
    return messages.withColumns(_state_columns(MESSAGE))


def as_delayed(records: DataFrame) -> DataFrame:
    """Decoded records of the delayed topic, with `KEPT_COLUMNS` from their headers and `timestamp`.

    The record's Kafka timestamp (LogAppendTime) is when its message was delayed (D2).
    """
    identity = tuple(F.col(c) for c in KEPT_COLUMNS)
    at = F.unix_millis(F.col("timestamp"))
    return records.withColumns(_state_columns(DELAYED, identity, at)).drop(*KEPT_COLUMNS, "timestamp")


def as_choices(records: DataFrame, messages: DataFrame) -> DataFrame:
    """Choice records (Kafka rows of the choices topic) with the columns of `as_messages(messages)`."""
    parsed = records.select(
        F.from_json(F.col("value").cast("string"), CHOICE_VALUE).alias("v"),
        F.unix_millis(F.col("timestamp")).alias("at"),
    ).where(F.col("v").isNotNull() & F.col("v.address").isNotNull())
    given = {name: F.col(f"v.{name}") for name in _KEY_FIELDS}
    identity = tuple(F.col(f"v.{f}") for f in _IDENTITY_FIELDS)
    return parsed.select(
        *_like_messages(messages, given),
        *[c.alias(n) for n, c in _state_columns(CHOICE, identity, F.col("at")).items()],
    )


def as_requests(records: DataFrame, messages: DataFrame) -> DataFrame:
    """Request records (Kafka rows of the requests topic) with the columns of `as_messages(messages)`."""
    parsed = records.select(
        F.from_json(F.col("value").cast("string"), REQUEST_VALUE).alias("v"),
        F.unix_millis(F.col("timestamp")).alias("at"),
    ).where(F.col("v").isNotNull() & F.col("v.scope").isNotNull() & F.col("v.service").isNotNull())
    given = {"instance": F.col("v.instance"), "origin": F.col("v.scope"), "service": F.col("v.service")}
    return parsed.select(
        *_like_messages(messages, given),
        *[c.alias(n) for n, c in _state_columns(REQUEST, at_ms=F.col("at"), asked=F.col("v.asked")).items()],
    )


def apply_state(rows: DataFrame, keep_s: float, retry_s: float) -> DataFrame:
    """Run the JVM processor over the rows of `as_*`; see the module docstring for what leaves it."""
    spark = rows.sparkSession
    jvm = spark._jvm
    if jvm is None:
        raise RouterError("the state processor needs a classic SparkSession (a JVM), not Spark Connect")
    out = jvm.router.state.RouterState.apply(rows._jdf, int(keep_s * 1000), int(retry_s * 1000))
    return DataFrame(out, spark)


def choice_records(decided: DataFrame, topic: str, headers: Column) -> DataFrame:
    """Kafka rows for each decision that made a choice (`k_change` not null), with `headers`."""
    key = F.concat_ws("\u0000", *[F.col(c) for c in _KEY_FIELDS])
    value = F.to_json(
        F.struct(
            *[F.col(c) for c in _KEY_FIELDS],
            *[F.col(c).alias(f) for c, f in zip(CHOICE_IDENTITY_COLUMNS, _IDENTITY_FIELDS, strict=True)],
        )
    )
    return decided.where(F.col("k_change").isNotNull()).select(
        key.cast("binary").alias("key"),
        value.cast("binary").alias("value"),
        F.lit(topic).alias("topic"),
        headers.alias("headers"),
    )


def request_record(instance: str, scope: str, service: str, asked: bool) -> tuple[bytes, bytes]:
    """The key and JSON value of a request record: a MissingRoute request sent, or ended (B4, B7)."""
    key = "\u0000".join((instance, scope, service)).encode("utf-8")
    value = {"instance": instance, "scope": scope, "service": service, "asked": asked}
    return key, json.dumps(value).encode("utf-8")
