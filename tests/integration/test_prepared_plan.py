"""`router.plan.Prepared`: a query planned once and run over each micro-batch (`streaming.spark.batch`).

Each batch here is, like the streaming job's, a query with a shuffle of its own (the state
processor's); the kept query over it writes to a real Kafka topic, so what it wrote is read back.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.kafka.admin import ensure_topics
from streaming.spark.batch import _Prepared, empty_batch
from tests.topic_records import records_now

pytestmark = pytest.mark.integration


def batch(spark: SparkSession, ids: range) -> DataFrame:
    """A micro-batch-like frame: its rows come out of a shuffle, like the state processor's."""
    rows = spark.createDataFrame([(f"m{i}", i % 3) for i in ids], "id string, kind int")
    return rows.repartition(1, "kind")


def records(topic: str, frame: DataFrame) -> DataFrame:
    """Kafka records of `frame`'s rows, with the row count and the ids seen observed as metrics."""
    observed = frame.observe(
        "router_batch", F.count(F.lit(1)).alias("records"), F.collect_set("id").alias("ids")
    )
    return observed.select(
        F.col("id").cast("binary").alias("key"),
        F.concat(F.lit("kind "), F.col("kind").cast("string")).cast("binary").alias("value"),
        F.lit(topic).alias("topic"),
    )


def values(bootstrap: str, topic: str) -> list[str]:
    """Every record value of `topic` now, as text."""
    return [(record.value() or b"").decode() for record in records_now(bootstrap, topic)]


def test_each_batch_runs_the_kept_query_alone_with_its_own_metrics(
    spark: SparkSession, kafka_bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    topic = unique_topic("prepared")
    ensure_topics(kafka_bootstrap, [topic])
    first, second = batch(spark, range(0, 5)), batch(spark, range(5, 12))
    prepared = _Prepared.of(first, lambda b: records(topic, b))
    assert prepared is not None
    options = {"kafka.bootstrap.servers": kafka_bootstrap}

    one = prepared.write(first, options)
    two = prepared.write(second, options)
    three = prepared.write(batch(spark, range(0)), options)

    # Each run's metrics are its own batch's, not a running total.
    assert (one.getLong(0), sorted(one.getList(1))) == (5, [f"m{i}" for i in range(5)])
    assert (two.getLong(0), sorted(two.getList(1))) == (7, sorted(f"m{i}" for i in range(5, 12)))
    assert three.getLong(0) == 0
    assert sorted(values(kafka_bootstrap, topic)) == sorted(f"kind {i % 3}" for i in range(12))


def under_an_rdd(frame: DataFrame) -> DataFrame:
    """`frame` read through its RDD, as the decision pass puts itself under the output."""
    jdf = frame._jdf
    rows = jdf.queryExecution().toRdd()
    return DataFrame(
        frame.sparkSession._jsparkSession.internalCreateDataFrame(rows, jdf.schema(), False),
        frame.sparkSession,
    )


@pytest.mark.parametrize("where", ["in the plan", "under an RDD"])
def test_a_query_with_a_shuffle_of_its_own_is_not_kept(
    spark: SparkSession, unique_topic: Callable[[str], str], where: str
) -> None:
    # Its shuffle's map outputs would be read again, for the next batch, as if they were new.
    topic = unique_topic("prepared")

    def build(b: DataFrame) -> DataFrame:
        shuffled = b.repartition(2, "id")
        return records(topic, shuffled if where == "in the plan" else under_an_rdd(shuffled))

    assert _Prepared.of(batch(spark, range(3)), build) is None


def test_a_query_planned_over_an_empty_batch_runs_over_batches_with_no_shuffle_under_them(
    spark: SparkSession, kafka_bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    # The job plans its query before the first micro-batch over `empty_batch` (no rows, the exact
    # schema, the batches' partitions). Each batch here is read straight from a source, with no
    # shuffle: its partitions are only known on the driver, and reach the tasks through the plan.
    topic = unique_topic("prepared")
    ensure_topics(kafka_bootstrap, [topic])
    like = spark.createDataFrame([("m", 0)], "id string, kind int")
    empty = empty_batch(like, 2)
    assert empty.schema == like.schema
    assert empty._jdf.queryExecution().toRdd().getNumPartitions() == 2
    prepared = _Prepared.of(empty, lambda b: records(topic, b))
    assert prepared is not None
    options = {"kafka.bootstrap.servers": kafka_bootstrap}

    nothing = prepared.write(empty, options)
    assert nothing.getLong(0) == 0
    assert values(kafka_bootstrap, topic) == []  # the run over no rows wrote nothing

    source = spark.range(0, 6, 1, 2).select(
        F.concat(F.lit("m"), F.col("id").cast("string")).alias("id"),
        (F.col("id") % 3).cast("int").alias("kind"),
    )
    written = prepared.write(source, options)
    assert (written.getLong(0), sorted(written.getList(1))) == (6, [f"m{i}" for i in range(6)])
    assert sorted(values(kafka_bootstrap, topic)) == sorted(f"kind {i % 3}" for i in range(6))
