"""The conversation memory in the streaming job, in Spark's state store.

K2 (kept choices) and D1-D2 (delayed conversations) need to know what earlier micro-batches
decided. Inside the streaming query, before `foreachBatch`, the JVM processor
`router.spark.ConversationState` (jvm/state, compiled by `make setup`) runs as Spark's
`transformWithState` keyed by (instance, conversation endpoint: the conversation and the side
that sends, initiator or target, so that each side keeps its own order, D1); its state is in Spark's
state store
(RocksDB), saved with the query's checkpoint, so a restart resumes it. The rules it follows are
those of `streaming.rules.memory` (tested against them). No message passes through Python, and the
processor sees a message's few decision columns and its bytes, not a decoded payload.

The bytes go through the processor's shuffle because the batch's write needs them after it: kept
out, they would have to be joined back to the processor's rows, one more shuffle. Even for free
they would save little: measured with the bytes emptied before the processor and a record of the
same size (268 bytes) written after it, warm replays of 300,000 messages (10 routes, batches of
100,000, one JVM, alternating) took 6.07-6.70 s against 6.13-6.99 s with the bytes (means 6.47
and 6.60), within the runs' spread.

A batch's choices (K2) mostly reach the memory at once: the rows leave the processor straight into
the decision's pass, in the same task and order, so the processor runs the same pass over them
(`router.spark.ProcessorPass`), learns which choice each conversation makes, and keeps it in its state
with the batch's time as when it was chosen. Only a batch decided in one pass (a route to the
dynamic routing service, B4, or a set of equal options, C5 and M3: their order is the whole
batch's, not a partition's) sends its choices round through Kafka: the choices topic (compacted;
one record per choice an entry made in the batch), read back by the query. Measured on replays of
300,000 messages in batches of 100,000 (10 routes, one JVM, alternating): 6.9-7.1 s a warm replay
kept at once, against 7.8-8.0 s round the topic, which carried a choice record for one message in
four through the write, the read, the shuffle and the state store, and ended each replay with a
batch of only those (0.5-0.6 s).

The delayed messages reach it through the delayed topic (each waiting from its `decided_at`
header, the instant its `due_at` header counts from), read back by the query too. Restarting from
the checkpoint resumes the state at the last committed batch and the topics at their offsets, so
nothing is lost or applied twice; a new checkpoint holds again what the delayed topic holds, and
rebuilds the choices that went round the choices topic (the others are in the old checkpoint's
state store alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, IntegerType, LongType, StringType, StructField, StructType

from streaming.contract import (
    CHOICE_IDENTITY_COLUMNS,
    KEPT_COLUMNS,
    POSITION_COLUMN,
    STATE_AT_COLUMN,
    STATE_IDENTITY_COLUMNS,
    STATE_KEY_COLUMN,
    STATE_KIND_COLUMN,
    STATE_KINDS,
    STATE_VARIABLE,
)
from streaming.spark.checkpoint_files import CheckpointPath
from streaming.spark.decision import DecisionInputs
from streaming.spark.session import cast_to, session_jvm

MESSAGE, CHOICE, DELAYED = STATE_KINDS["message"], STATE_KINDS["choice"], STATE_KINDS["delayed"]
"""The kinds of rows the processor takes (`c_kind`)."""

KEY_COLUMN = STATE_KEY_COLUMN
IDENTITY_COLUMNS = STATE_IDENTITY_COLUMNS
"""Where a choice or delayed row carries the C0 identity kept for its conversation. `FIRST_COLUMN`,
set by the processor: the first message of its entry to leave in the batch, whose choice, if its
decision makes one, the batch records on the choices topic; false when the processor kept it itself."""

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

_KEY_FIELDS = ("instance", "conversation_id", "origin", "service")
_IDENTITY_FIELDS = ("bid", "route_service", "address")


def _null(dtype: DataType) -> Column:
    """A null of `dtype`; cast by the type's name where it has one (`streaming.spark.session.cast_to`)."""
    return cast_to(F.lit(None), dtype)


def _endpoint_key(instance: Column, conversation: Column, from_target: Column) -> Column:
    """Instance, conversation and side (`i` initiator, `t` target): one conversation endpoint."""
    side = F.when(from_target, F.lit("t")).otherwise(F.lit("i"))
    return F.concat_ws("\u0000", instance, conversation, side)


def _key_instance() -> Column:
    """The instance a state row's key names (`_endpoint_key`'s first part), from Spark's state data source."""
    return F.split(F.col("key.value"), "\u0000").getItem(0)


def _group_key(valid: Column) -> Column:
    """The state key: instance and conversation endpoint; a malformed record: a key of its own, no state."""
    endpoint = _endpoint_key(F.col("instance"), F.col("conversation_id"), F.col("from_target"))
    return F.when(valid, endpoint).otherwise(F.concat(F.lit("\u0002"), F.col(POSITION_COLUMN).cast("string")))


def _state_columns(
    kind: int, identity: Sequence[Column] | None = None, at_ms: Column | None = None
) -> dict[str, Column]:
    none = _null(StringType())
    return {
        STATE_KIND_COLUMN: cast_to(F.lit(kind), IntegerType()),
        **dict(zip(IDENTITY_COLUMNS, identity or (none, none, none), strict=True)),
        STATE_AT_COLUMN: at_ms if at_ms is not None else _null(LongType()),
    }


def as_messages(messages: DataFrame) -> DataFrame:
    """Message rows (with `error`, `instance`, `conversation_id`, `pos`) as the processor takes them."""
    return messages.withColumns({KEY_COLUMN: _group_key(F.col("error").isNull()), **_state_columns(MESSAGE)})


DELAYED_AT = "delayed_ms"
"""A delayed record's column: when its message was delayed (epoch ms), from which it waits (D2)."""


def as_delayed(records: DataFrame) -> DataFrame:
    """Decoded records of the delayed topic, with `KEPT_COLUMNS` from their headers and `DELAYED_AT`."""
    identity = tuple(F.col(c) for c in KEPT_COLUMNS)
    state = _state_columns(DELAYED, identity, F.col(DELAYED_AT))
    return records.withColumns({KEY_COLUMN: _group_key(F.col("error").isNull()), **state}).drop(
        *KEPT_COLUMNS, DELAYED_AT
    )


def as_choices(records: DataFrame, messages: DataFrame) -> DataFrame:
    """Choice records (Kafka rows of the choices topic) with the columns of `as_messages(messages)`.

    A record's offset is its `pos`: of two choices made at the same instant, the later counts. A
    value that is not a choice (no `address`) reaches the processor with a null `c_address`, which
    it ignores. There is no filter here: Spark would push it under the projection and parse each
    value's JSON again for it (measured: the choices' read task took 0.55-0.75 s of CPU per 25,000
    records with the filter, 0.29-0.39 s without).
    """
    parsed = records.select(
        F.from_json(F.col("value").cast("string"), CHOICE_VALUE).alias("v"),
        F.unix_millis(F.col("timestamp")).alias("at"),
        F.col("offset").cast("long").alias("offset"),
    )
    given = {name: F.col(f"v.{name}") for name in _KEY_FIELDS}
    given[POSITION_COLUMN] = F.col("offset")
    identity = tuple(F.col(f"v.{f}") for f in _IDENTITY_FIELDS)
    like_messages = [given.get(f.name, _null(f.dataType)).alias(f.name) for f in messages.schema.fields]
    # K2: only an initiator's messages keep a choice (`Message.remembers_choice`): its side's state.
    initiator = _endpoint_key(F.col("v.instance"), F.col("v.conversation_id"), F.lit(False))
    state = {KEY_COLUMN: initiator, **_state_columns(CHOICE, identity, F.col("at"))}
    return parsed.select(*like_messages, *[c.alias(n) for n, c in state.items()])


def apply_state(
    rows: DataFrame,
    keep_s: float,
    retry_s: float,
    inputs: DecisionInputs | None = None,
    held: Any = None,
) -> DataFrame:
    """Run the JVM processor over the rows of `as_*`; see the module docstring for what leaves it.

    With `inputs` (what the job's batches are decided with), the processor keeps the choices its
    messages make at once, when the batch is not decided in one pass. With `held`, a
    `router.metrics.HeldCounts` (`held_counts`), it adds how the delayed messages it holds change.
    """
    spark = rows.sparkSession
    jvm = session_jvm(spark, "the state processor needs")
    keep_ms, retry_ms = int(keep_s * 1000), int(retry_s * 1000)
    jinputs = inputs.jvm_inputs if inputs is not None else None
    out = jvm.router.spark.ConversationState.apply(rows._jdf, keep_ms, retry_ms, jinputs, held)
    return DataFrame(out, spark)


def held_counts(spark: SparkSession) -> Any:
    """A new `router.metrics.HeldCounts`: what the processor adds its held messages' changes to."""
    return session_jvm(spark, "the router's metrics need").router.metrics.HeldCounts.register(spark._jsc.sc())


def held_state(spark: SparkSession, checkpoint: CheckpointPath, batch_id: int) -> DataFrame:
    """The conversation endpoints holding delayed messages, as batch `batch_id` left them (D1, D2).

    One row each: `instance` (the state key's first part), `at` (when each message it holds was
    delayed, epoch ms) and `timer_ms` (when its timer falls due). What `held_figures` and
    `held_timers` read; a caller needing both caches it, for one read of the state store.
    """
    return (
        read_state(spark, checkpoint, batch_id)
        .where(F.size("value.waiting") > 0)
        .select(
            _key_instance().alias("instance"),
            F.col("value.waiting.delayed_ms").alias("at"),
            F.col("value.timer_ms").alias("timer_ms"),
        )
    )


def held_figures(held: DataFrame) -> list[str]:
    """What the state held delayed (`held_state`), in `router.metrics.HeldCounts`' form.

    Per instance: the messages held (`m`), the conversation endpoints holding any (`c`), and the
    messages by the second they were delayed in (`s`).
    """
    out: list[str] = []
    for row in (
        held.groupBy("instance").agg(F.sum(F.size("at")).alias("m"), F.count(F.lit(1)).alias("c")).collect()
    ):
        out += [f"{row['instance']}\u0000m\u0000{row['m']}", f"{row['instance']}\u0000c\u0000{row['c']}"]
    seconds = held.select("instance", F.explode("at").alias("at")).groupBy(
        "instance", F.floor(F.col("at") / 1000).alias("second")
    )
    for row in seconds.count().collect():
        out.append(f"{row['instance']}\u0000s\u0000{row['second']}\u0000{row['count']}")
    return out


RESUMED_TIMERS = 10_000
"""At most how many of the resumed state's timers `held_timers` gives the tick: the earliest."""


def held_timers(held: DataFrame, limit: int = RESUMED_TIMERS) -> list[int]:
    """When the timers of the endpoints holding delayed messages (`held_state`) fall due.

    Epoch milliseconds, distinct, the earliest `limit` of them: what a restarted job tells its
    tick (`router.spark.TickSource.fallDue`), so that what it held falls due on time (D2). A
    message retried after the restart and delayed again is told of by its batch.
    """
    timers = held.select(F.col("timer_ms").alias("at")).distinct().orderBy("at").limit(limit)
    return [int(row["at"]) for row in timers.collect()]


def read_state(spark: SparkSession, checkpoint: CheckpointPath, batch_id: int | None = None) -> DataFrame:
    """The conversation memory a query's checkpoint holds, as batch `batch_id` (default: the last) left it.

    One row per conversation endpoint held (`key`, `value`: its kept choices `entries`, its held
    messages `waiting`, and its timer `timer_ms`), read with Spark's state data source from the
    processor's state variable (`streaming.contract.STATE_VARIABLE`).
    """
    reader = spark.read.format("statestore").option("stateVarName", STATE_VARIABLE)
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    return reader.load(str(checkpoint))


def choice_key() -> Column:
    """The key of a choice record: instance, conversation, origin and service (K2's entry)."""
    return F.concat_ws("\u0000", *[F.col(c) for c in _KEY_FIELDS])


def choice_value() -> Column:
    """The JSON value of a choice record, from a decided row (`CHOICE_VALUE`)."""
    return F.to_json(
        F.struct(
            *[F.col(c) for c in _KEY_FIELDS],
            *[F.col(c).alias(f) for c, f in zip(CHOICE_IDENTITY_COLUMNS, _IDENTITY_FIELDS, strict=True)],
        )
    )


def state_counts(spark: SparkSession, checkpoint: CheckpointPath, batch_id: int) -> dict[str, dict[str, int]]:
    """What the state held after batch `batch_id`, per instance (the state key's first part).

    `endpoints`: conversation endpoints held; `kept_choices`: their kept choices (K2);
    `delayed`: the delayed messages they hold (D1, D2), and `delayed_endpoints`: the endpoints
    holding any. Read with Spark's state data source (`read_state`).
    """
    _ = spark.streams  # the state data source needs the session's streaming query manager
    state = read_state(spark, checkpoint, batch_id)
    rows = (
        state.select(
            _key_instance().alias("instance"),
            F.size("value.entries").alias("entries"),
            F.size("value.waiting").alias("waiting"),
        )
        .groupBy("instance")
        .agg(
            F.count(F.lit(1)).alias("endpoints"),
            F.sum("entries").alias("kept_choices"),
            F.sum("waiting").alias("delayed"),
            F.count_if(F.col("waiting") > 0).alias("delayed_endpoints"),
        )
        .collect()
    )
    names = ("endpoints", "kept_choices", "delayed", "delayed_endpoints")
    return {row["instance"]: {n: int(row[n] or 0) for n in names} for row in rows}
