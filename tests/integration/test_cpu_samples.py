"""router.metrics.CpuSamples: the JVM's CPU samples over a stretch of Spark work, as folded stacks."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from bench.profile import step_of

pytestmark = pytest.mark.integration


def test_samples_of_a_spark_job_name_its_task_threads_and_frames(spark: SparkSession) -> None:
    jvm = spark._jvm
    assert jvm is not None
    sampler = jvm.router.metrics.CpuSamples.start(10)
    try:
        total = (
            spark.range(0, 30_000_000, numPartitions=2).selectExpr("sum(crc32(cast(id as string)))").first()
        )
    finally:
        folded = {str(k): int(v) for k, v in sampler.stop().items()}
    assert total is not None
    tasks = {k: v for k, v in folded.items() if k.startswith("Executor task launch worker")}
    assert sum(tasks.values()) > 0, sorted(folded)[:5]
    stack = max(tasks, key=lambda k: tasks[k]).partition("|")[2].split(";")
    # Outermost first: the task thread's run, in to the frame the sample was taken in.
    assert stack[0].startswith("java.lang.Thread.") and any("Executor$TaskRunner" in f for f in stack)
    # The partial sums run in the map stage of the aggregate's shuffle, reading no Kafka records.
    assert any(f.endswith("ShuffleMapTask.runTask") for f in stack)
    assert step_of("Executor task launch worker for task 0.0", stack) == "shuffle"
