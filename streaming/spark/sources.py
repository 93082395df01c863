"""The streaming query's inputs, up to where a micro-batch is decided.

Sources (the Spark Kafka connector), for each instance the query routes: its outbound topic
(messages its own services send; origin = the sending database) and inbound topic (messages from
other instances; origin = remote, whatever the record claims), limited per micro-batch by
`max_offsets_per_trigger`; its delayed and choices topics, which the micro-batches write and the
query reads back into the conversation memory; and a tick (`router.spark.TickSource`: a row a
second, or at the pace the job sets, `streaming.spark.tick`), so that a micro-batch runs, and
delayed messages fall due, even when no traffic arrives.

Every record is decoded with `from_avro` into the few columns the rules read (`MESSAGE_COLUMNS`);
the record itself travels on as its original bytes (`value`), so the state processor and the
rules carry no decoded payload; its `instance` is the one whose topic it was read from. A record
that does not decode, or names no database of its instance as its origin, gets an `error` and a
group of its own (it is dead-lettered by the batch). The state processor (`streaming.spark.state`)
then gives each message its conversation's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from streaming import topics
from streaming.config import Settings
from streaming.contract import KEPT_COLUMNS
from streaming.kafka.avro import schema_json
from streaming.kafka.connection import KafkaConnection
from streaming.kafka.durability import spark_producer_options
from streaming.rules.model import Instance
from streaming.spark.decision import DecisionInputs
from streaming.spark.session import session_jvm
from streaming.spark.state import DELAYED_AT, apply_state, as_choices, as_delayed, as_messages
from streaming.spark.tick import source_pace_ms
from streaming.tables.validate import ADDRESS_MAX, SYSNAME_MAX
from streaming.topology import TopicKind, Topology

SOURCE_DELAYED, SOURCE_OUTBOUND, SOURCE_INBOUND = 0, 1, 2
"""Where a message row was read (`source`); also the first key of its batch order (`pos`)."""

MESSAGE_LIMIT = "max_offsets_per_trigger"

TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"
"""The form of the instants in the records' headers (`decided_at`, `due_at`): ISO-8601, UTC, in µs."""


def per_instance(
    topology: Topology, value: Callable[[Instance], Column], instance: Column | None = None
) -> Column:
    """`value` of the instance a row names (`instance`, by default the `instance` column).

    The value itself when the query routes one instance, else a lookup by the instance's name.
    """
    if len(topology.instances) == 1:
        return value(topology.instances[0])
    pairs = [c for i in topology.instances for c in (F.lit(i.name), value(i))]
    return F.element_at(F.create_map(*pairs), instance if instance is not None else F.col("instance"))


def topic_for(topology: Topology, kind: TopicKind, instance: Column | None = None) -> Column:
    """That topic of the instance a row names (`per_instance`)."""
    return per_instance(topology, lambda i: F.lit(kind(i.name, topology.prefix)), instance)


PRODUCER_DEFAULTS = {
    "kafka.linger.ms": "20",
    "kafka.batch.size": str(512 * 1024),
    "kafka.buffer.memory": str(128 * 1024 * 1024),
}
"""The batch write's producer: a micro-batch is written at once, so large batches that fill for
20 ms, and room for a whole micro-batch's records, instead of the sender waiting on the broker.
Measured on 100,000 messages: the write stage 22.8 s instead of 31.9 s. `kafka_options` override them."""


CONSUMER_DEFAULTS = {"kafka.fetch.max.wait.ms": "10"}
"""The query's consumers: a fetch the broker may hold for at most 10 ms when it has nothing new.

Spark keeps each partition's consumer between micro-batches. Measured at 1,000 msg/s, every
batch's read stage had a task that took 520 ms for 10 ms of work, on a partition with nothing new
since the last batch (the choices topic, written once per batch; any input once a load pauses):
about the 500 ms a broker may hold a fetch by default, as if the task waited out the fetch its
consumer had left at the broker. With 10 ms the batch took 0.6 s instead of 1.15 s.
`kafka_options` override it."""


def kafka_options(settings: Settings) -> dict[str, str]:
    """Options for the Spark Kafka source and sink: the connection every client uses, then the tuning.

    `Settings.kafka` gives the bootstrap servers and the security settings (the same ones the
    confluent-kafka clients get); `kafka_options` holds no connection setting (`load_settings`
    refuses them there).
    """
    return {**settings.kafka.spark_options(), **settings.kafka_options}


READ_COMMITTED = {"kafka.isolation.level": "read_committed"}
"""The query reads only committed records (Java's consumers read uncommitted ones by default).

`router redrive` writes into the input topics in transactions: the records of one it aborts, or
of one killed midway, stay in the log, and a read_uncommitted reader would route them, twice once
the redrive is run again. Spark's offset reader takes the same option, so the query's latest
offsets stop at the last stable offset (an unfinished transaction holds a partition there until it
ends, `transaction.timeout.ms` at most). `kafka_options` may not change it."""


def read_options(settings: Settings) -> dict[str, str]:
    """Options for the query's Kafka sources: `kafka_options` over `CONSUMER_DEFAULTS`, read_committed."""
    return reader_options(settings.kafka, settings.kafka_options)


def reader_options(connection: KafkaConnection, tuning: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options for any Spark Kafka read: the consumer defaults, the connection, the tuning, read_committed.

    read_committed comes last, so no tuning changes it (the job's sources and `router whatif`).
    """
    return {**CONSUMER_DEFAULTS, **connection.spark_options(), **(tuning or {}), **READ_COMMITTED}


def write_options(settings: Settings) -> dict[str, str]:
    """Options for the batch's Kafka write: `kafka_options` over `PRODUCER_DEFAULTS`, then durability.

    The producer writes with acks=all and idempotence (`streaming.kafka.durability`), which
    `kafka_options` may not change (`load_settings` refuses them there).
    """
    return {**PRODUCER_DEFAULTS, **kafka_options(settings), **spark_producer_options()}


def busy_options(settings: Settings) -> dict[str, str]:
    """The messages source's options for two intervals: a batch once `busy_messages` wait, else later.

    The query looks for records every `interval_seconds` (the busy interval); the source gives a
    batch only when `busy_messages` records wait (`minOffsetsPerTrigger`) or the trickle's interval
    has passed since its last batch (`maxTriggerDelay`, less half a busy interval, so that the
    batch that follows it starts at `trigger_seconds` and not one busy interval later). None when
    the settings give one interval.
    """
    if not settings.busy:
        return {}
    delay_ms = source_pace_ms(settings.trigger_seconds, settings.interval_seconds)
    return {"minOffsetsPerTrigger": str(settings.busy_messages), "maxTriggerDelay": f"{delay_ms}ms"}


def input_stream(
    spark: SparkSession,
    settings: Settings,
    topology: Topology,
    inputs: DecisionInputs | None = None,
    held: Any = None,
    starting: Mapping[str, str] | None = None,
    paced: bool = False,
) -> DataFrame:
    """The query's rows as the state processor leaves them (see the module docstring).

    `inputs` are what the batches are decided with: the processor keeps their choices at once;
    `held`, a `router.metrics.HeldCounts`, gets how its delayed messages change
    (`streaming.spark.state.apply_state`). `starting`: where a new checkpoint's `messages` and
    `delayed` sources start (Spark's `startingOffsets`), when not at their topics' first records.
    `paced`: the messages source waits for `busy_messages` or the trickle's interval (`busy_options`;
    `router run`, not a bounded replay). The delayed and choices sources are never paced: a batch
    reads back every choice and delayed message the last one wrote (K2, D1).
    """
    t = topology
    starting = starting or {}
    register_functions(spark)
    messages = _kafka(
        spark,
        settings,
        [*t.outbound, *t.inbound],
        limit=True,
        starting=starting.get("messages"),
        pace=busy_options(settings) if paced else None,
    )
    tick = _tick(spark, tick_name(t)).where(F.lit(False))  # it only makes micro-batches run
    decoding = Decoding.of(t)  # the same columns for the messages and the delayed records
    decoded = decode(messages.unionByName(tick), decoding)
    rows = as_messages(decoded)
    delayed = _kafka(spark, settings, t.delayed, limit=False, headers=True, starting=starting.get("delayed"))
    kept = {c: _header_value(c) for c in KEPT_COLUMNS}
    # D2: a delayed message waits from the decision that delayed it (its `decided_at`, from which
    # its `due_at` counts), not from when its record was appended, a batch's write later.
    decided = F.unix_millis(F.to_timestamp(_header_value("decided_at"), TIME_FORMAT))
    kept[DELAYED_AT] = F.coalesce(decided, F.unix_millis(F.col("timestamp")))
    delayed_rows = decode(delayed.withColumns(kept), decoding, passed=(*KEPT_COLUMNS, DELAYED_AT))
    rows = rows.unionByName(as_delayed(delayed_rows))
    if settings.keep_choice_s > 0:
        # Read in as many tasks as the processor's partitions, not one: a batch reads back about a
        # choice for every four messages, and one task alone took 0.2 s at the end of the read
        # stage while the other core waited (measured: that stage 0.55-0.57 s instead of 0.64-0.74).
        choices = _kafka(spark, settings, t.choices, limit=False, split=settings.shuffle_partitions)
        rows = rows.unionByName(as_choices(choices, decoded))
    return apply_state(rows, settings.keep_choice_s, t.retry_s, inputs, held)


TRAILING_BYTES = "router_trailing_bytes"
"""SQL function: the bytes a value holds after one Avro `router.v1.Message` (`router.avro.TrailingBytes`)."""


def register_functions(spark: SparkSession) -> None:
    """Register the router's JVM SQL functions with the session.

    `TRAILING_BYTES`, and `router_key_counts` (`router.metrics.KeyCounts`), by which a batch's
    observed metrics count its rows (`streaming.spark.output.batch_metrics`).
    """
    jvm = session_jvm(spark, "the router's SQL functions need")
    udf = jvm.router.avro.TrailingBytes(schema_json("message"))
    spark._jsparkSession.udf().register(TRAILING_BYTES, udf, spark._jsparkSession.parseDataType('"integer"'))
    jvm.router.metrics.KeyCounts.register(spark._jsparkSession)


def _instance_of_topic(t: Topology) -> Column:
    """The instance whose topic a record was read from (the rate tick's row: the first instance)."""
    first = F.lit(t.instances[0].name)
    if len(t.instances) == 1:
        return first
    kinds = (topics.outbound_topic, topics.inbound_topic, topics.delayed_topic, topics.choices_topic)
    pairs = [F.lit(x) for i in t.instances for kind in kinds for x in (kind(i.name, t.prefix), i.name)]
    return F.coalesce(F.try_element_at(F.create_map(*pairs), F.col("topic")), first)


def _databases_of(t: Topology, instance: Column) -> Column:
    """The names of the databases of the row's instance (an outbound message names one, S1)."""
    return per_instance(t, lambda i: F.array(*[F.lit(d.name) for d in i.databases]), instance)


def _kafka(
    spark: SparkSession,
    settings: Settings,
    subscribe: list[str],
    limit: bool,
    headers: bool = False,
    split: int = 0,
    starting: str | None = None,
    pace: Mapping[str, str] | None = None,
) -> DataFrame:
    """A Kafka source; `split` > 1 reads its records in at least that many tasks (`minPartitions`).

    A new checkpoint reads from `starting` (Spark's `startingOffsets`), by default the first records;
    `pace` holds `busy_options`.
    """
    reader = (
        spark.readStream.format("kafka")
        .options(**read_options(settings))
        .option("subscribe", ",".join(subscribe))
        .option("startingOffsets", starting or "earliest")
        .option("failOnDataLoss", "false")
    )
    if limit:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    if headers:
        reader = reader.option("includeHeaders", "true")
    if split > 1:
        reader = reader.option("minPartitions", str(split))
    if pace:
        reader = reader.options(**pace)
    columns = ["topic", "partition", "offset", "value", "timestamp", *(["headers"] if headers else [])]
    return reader.load().select(*columns)


TICK_SOURCE = "router.spark.TickSource"
"""The tick's source: a row a second, or at the pace set for its name (`router.spark.TickSource.pace`)."""


def tick_name(t: Topology) -> str:
    """The name by which the job sets the pace of its query's tick: the query's own name."""
    return f"router-{t.name}"


def _tick(spark: SparkSession, name: str) -> DataFrame:
    return (
        spark.readStream.format(TICK_SOURCE)
        .option("name", name)
        .load()
        .select(
            F.lit(None).cast("string").alias("topic"),
            F.lit(-1).alias("partition"),
            F.col("value").alias("offset"),
            F.lit(None).cast("binary").alias("value"),
            F.col("timestamp"),
        )
    )


def _header_value(name: str) -> Column:
    """The value of a record's first Kafka header called `name`, as a string (null when none)."""
    named = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return F.get(named, 0)["value"].cast("string")


def canonical_guid_sql(value: Column) -> Column:
    """R3: a broker instance GUID in canonical 8-4-4-4-12 lowercase form, or null when it is none."""
    compact = F.regexp_replace(F.lower(F.regexp_replace(F.trim(value), r"[{}]", "")), "-", "")
    return F.when(
        compact.rlike("^[0-9a-f]{32}$"),
        F.concat_ws(
            "-",
            F.substring(compact, 1, 8),
            F.substring(compact, 9, 4),
            F.substring(compact, 13, 4),
            F.substring(compact, 17, 4),
            F.substring(compact, 21, 12),
        ),
    )


def decode(records: DataFrame, decoding: Decoding, passed: tuple[str, ...] = ()) -> DataFrame:
    """Decode Kafka rows into message rows; `error` says why one is malformed (it is dead-lettered).

    The `passed` columns of `records` are kept as they are. A message's batch order `pos` is its
    source, then partition, then offset: delayed records first, then outbound, then inbound (a
    conversation's records share a partition: its id is the key). Its lifetime (F3) stays as it
    came, `expires_ms` or `ttl_ms`: the decision reads it at the batch's time
    (`router.spark.MessageColumns`). `decoding`: the columns for the records' topology, which
    several decodes may share (`Decoding.of`).
    """
    with_rec = records.withColumn("source", decoding.source).withColumn("rec", decoding.rec)
    return with_rec.select(*decoding.columns, *passed)


@dataclass(frozen=True)
class Decoding:
    """The columns `decode` makes of a topology's records, built once (`Decoding.of`).

    A column names the columns it reads, not a DataFrame: one set serves every decode of a query
    (its messages and its delayed records), and building it again would cost its py4j round trips
    again (about 500 of the 1,827 round trips that built the input stream with two sets).
    """

    source: Column
    rec: Column
    columns: tuple[Column, ...]

    @classmethod
    def of(cls, topology: Topology) -> Decoding:
        """The columns for records of `topology`'s topics."""
        return cls(_source(topology), _rec(), _decoded(topology))


def _source(t: Topology) -> Column:
    return (
        F.when(F.col("topic").isin(*t.delayed), SOURCE_DELAYED)
        .when(F.col("topic").isin(*t.outbound), SOURCE_OUTBOUND)
        .otherwise(SOURCE_INBOUND)
    )


def _rec() -> Column:
    return from_avro(F.col("value"), schema_json("message"), {"mode": "PERMISSIVE"})


def _decoded(t: Topology) -> tuple[Column, ...]:
    """The message row's columns, over a row with `source` and `rec` (the record as decoded)."""
    rec = F.col("rec")
    instance = _instance_of_topic(t)
    databases = _databases_of(t, instance)
    bid = canonical_guid_sql(rec["to_broker_instance"])
    # An inbound record is remote whatever it claims (S3); an outbound one names its database.
    origin = F.when(F.col("source") == SOURCE_INBOUND, F.lit("remote")).otherwise(rec["origin_database"])
    error = (
        F.when(F.col("value").isNull(), F.lit("empty record (no value)"))
        # PERMISSIVE from_avro gives null, or a record of nulls, for bytes that do not decode.
        .when(
            rec.isNull()
            | rec["message_id"].isNull()
            | rec["conversation_id"].isNull()
            | rec["to_service"].isNull()
            | rec["enqueued_at"].isNull(),
            F.lit("value does not decode as Avro router.v1.Message"),
        )
        .when(
            F.call_function(TRAILING_BYTES, F.col("value")) > 0,
            F.concat(
                F.lit("value holds "),
                F.call_function(TRAILING_BYTES, F.col("value")).cast("string"),
                F.lit(" bytes after its Avro router.v1.Message (a record must be exactly one message)"),
            ),
        )
        .when(F.length(rec["to_service"]) == 0, F.lit("to_service is empty"))
        .when(
            F.length(rec["to_service"]) > ADDRESS_MAX,
            F.lit(f"to_service is longer than {ADDRESS_MAX} characters (a service name is nvarchar(256))"),
        )
        .when(
            F.length(rec["origin_database"]) > SYSNAME_MAX,
            F.lit(f"origin_database is longer than {SYSNAME_MAX} characters (a database name is a sysname)"),
        )
        .when(
            rec["to_broker_instance"].isNotNull() & bid.isNull(),
            F.concat(F.lit("to_broker_instance is not a GUID: "), rec["to_broker_instance"]),
        )
        .when(
            (F.col("source") != SOURCE_INBOUND)
            & ~F.coalesce(F.array_contains(databases, rec["origin_database"]), F.lit(False)),
            F.concat(
                F.lit("origin_database is not a database of this instance: "),
                F.coalesce(rec["origin_database"], F.lit("null")),
            ),
        )
    )
    pos = (
        F.lit(1 << 58) * F.col("source")
        + F.lit(1 << 44) * F.greatest(F.col("partition"), F.lit(0)).cast("long")
        + F.col("offset")
    )
    return (
        F.col("source").cast("int").alias("source"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("value"),
        error.alias("error"),
        pos.cast("long").alias("pos"),
        instance.alias("instance"),
        F.coalesce(rec["message_id"], F.lit("")).alias("id"),
        F.coalesce(rec["conversation_id"], F.lit("")).alias("conversation_id"),
        F.coalesce(rec["to_service"], F.lit("")).alias("service"),
        F.coalesce(origin, F.lit("")).alias("origin"),
        bid.alias("bid"),
        (~F.coalesce(rec["is_initiator"], F.lit(True))).alias("from_target"),
        F.coalesce(rec["message_type"], F.lit("DEFAULT")).alias("message_type"),
        F.coalesce(rec["hops_remaining"], F.lit(16)).alias("hops_remaining"),
        F.unix_millis(rec["expires_at"].cast("timestamp")).alias("expires_ms"),
        rec["time_to_live_ms"].cast("long").alias("ttl_ms"),
        F.coalesce(F.length(rec["body"]), F.lit(0)).cast("long").alias("size_bytes"),
    )
