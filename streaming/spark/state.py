"""K2 in the streaming job: each conversation's kept route choice, in Spark's state store.

An initiator's message without a broker instance keeps the route its conversation chose before
(spec K2; `streaming.rules.batch`). Inside the streaming query, before `foreachBatch`, the JVM
processor `router.state.ChoiceKeeper` (jvm/state, compiled by `make setup`) runs as Spark's
`flatMapGroupsWithState` per (instance, conversation): its state, in Spark's state store (RocksDB)
and saved with the query's checkpoint, is the C0 identity each conversation chose per (origin
database, target service). Each message leaves it with that identity in `KEPT_COLUMNS`, and the
engine keeps it (K2) while it is still a candidate. No message passes through Python.

A decision that makes a choice ("first", or "again" when the kept route is gone) is written as a
choice record to the instance's compacted choices topic in the same Kafka write as the messages;
the query reads that topic too, so the processor applies the choice at the next micro-batch.
Restarting from the checkpoint resumes the state at the last committed batch and the choices topic
at its offsets, so a choice is neither lost nor applied twice. A new checkpoint rebuilds the state
from the compacted topic. A choice is kept `keep_choice_s` after it was made.

A delayed message carries its conversation's kept identity in headers (`kept_*`), since the
delayed topic is read back outside the query: while a conversation is delayed it chooses nothing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

from streaming.errors import RouterError
from streaming.spark.engine import CHOICE_IDENTITY_COLUMNS, KEPT_COLUMNS

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

_CHOICE_FIELDS = {"c_bid": "bid", "c_route_service": "route_service", "c_address": "address"}
_KEY_FIELDS = ("instance", "conversation_id", "origin", "service")
_IDENTITY_FIELDS = ("bid", "route_service", "address")


def _null(dtype: DataType) -> Column:
    return F.lit(None).cast(dtype)


def as_messages(messages: DataFrame) -> DataFrame:
    """Message rows as the processor takes them: the choice-only columns are null."""
    return messages.withColumns(
        {
            "c_is_choice": F.lit(False),
            **{c: _null(StringType()) for c in _CHOICE_FIELDS},
            "c_at_ms": _null(LongType()),
            "c_seen_at": F.current_timestamp(),
        }
    )


def as_choices(records: DataFrame, messages: DataFrame) -> DataFrame:
    """Choice records (Kafka rows of the choices topic) with the columns of `as_messages(messages)`."""
    value = F.from_json(F.col("value").cast("string"), CHOICE_VALUE)
    parsed = records.select(value.alias("v"), F.unix_millis(F.col("timestamp")).alias("c_at_ms"))
    parsed = parsed.where(F.col("v").isNotNull() & F.col("v.address").isNotNull())
    columns = [
        F.col(f"v.{f.name}").alias(f.name) if f.name in _KEY_FIELDS else _null(f.dataType).alias(f.name)
        for f in messages.schema.fields
    ]
    return parsed.select(
        *columns,
        F.lit(True).alias("c_is_choice"),
        *[F.col(f"v.{field}").alias(column) for column, field in _CHOICE_FIELDS.items()],
        "c_at_ms",
        F.current_timestamp().alias("c_seen_at"),
    )


def keep_choices(rows: DataFrame, keep_s: float) -> DataFrame:
    """Run the JVM processor over messages and choices; each message gets its `KEPT_COLUMNS`."""
    spark = rows.sparkSession
    jvm = spark._jvm
    if jvm is None:
        raise RouterError("the state processor needs a classic SparkSession (a JVM), not Spark Connect")
    kept = jvm.router.state.ChoiceKeeper.attach(rows._jdf, int(keep_s * 1000))
    return DataFrame(kept, spark)


def without_kept(messages: DataFrame) -> DataFrame:
    """Messages that keep nothing (K2 switched off): the kept identity is null."""
    return messages.withColumns({c: _null(StringType()) for c in KEPT_COLUMNS})


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
