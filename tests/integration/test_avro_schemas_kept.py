"""Decoding in many tasks leaves no Avro schema behind per task.

Spark's from_avro, and the router's `router_trailing_bytes` function (`router.avro.TrailingBytes`),
run in every task of every micro-batch. Avro's fast reader would keep a reader, and the schema it
was built for, per schema object for as long as the JVM runs, and from_avro parses its schema anew
per task: the heap grew by some 400 MiB an hour under a steady load (`bench/soak.py`). The router's
JVMs run with the fast reader off (`streaming.spark.session.JVM_OPTIONS`), and the function's copies
share one schema object.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from itertools import pairwise

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from bench.soak import instances_of, jcmd
from streaming.kafka.avro import encode_message, new_message_record, schema_json
from streaming.spark.session import session_jvm
from streaming.spark.sources import TRAILING_BYTES, register_functions

FIELD = "org.apache.avro.Schema$Field"
FIELDS = len(json.loads(schema_json("message"))["fields"])
TASKS = 4
WARM, ROUNDS, JOBS = 3, 8, 5
KEPT_PER_ROUND = JOBS * TASKS * FIELDS
"""The schema fields a round of jobs would add for good if each task kept its schema."""


def live_instances(spark: SparkSession, class_name: str) -> int:
    """Live instances of `class_name` in the session's JVM, after a full collection."""
    pid = session_jvm(spark, "the heap's census needs").java.lang.ProcessHandle.current().pid()
    return instances_of(jcmd(pid, "GC.class_histogram"), class_name)


def test_decoding_in_many_tasks_keeps_no_schema_per_task(spark: SparkSession) -> None:
    register_functions(spark)
    now = datetime.now(timezone.utc)
    records = [
        new_message_record(
            message_id=f"m{n}", conversation_id=f"c{n}", to_service="S", from_service="F", enqueued_at=now
        )
        for n in range(40)
    ]
    values = [(encode_message(r),) for r in records]
    frame = spark.createDataFrame(values, "value binary").repartition(TASKS)
    decoded = frame.select(
        from_avro(F.col("value"), schema_json("message"))["message_id"].alias("id"),
        F.call_function(TRAILING_BYTES, F.col("value")).alias("rest"),
    )

    def decode() -> None:
        rows = decoded.collect()
        assert len(rows) == 40 and {r["rest"] for r in rows} == {0}

    for _ in range(WARM):
        decode()
    counts = [live_instances(spark, FIELD)]
    for _ in range(ROUNDS):
        for _ in range(JOBS):
            decode()
        counts.append(live_instances(spark, FIELD))
    rises = sorted(after - before for before, after in pairwise(counts))

    # A schema kept per task adds KEPT_PER_ROUND fields every round, for good: with the fast reader
    # on, exactly that, round after round. Without it the count still steps up in one round or two
    # (by up to some 90 schemas in all, measured: finished tasks' readers let go of lazily), then
    # holds; so the typical round, the median, must add less than half a round's kept schemas.
    median = rises[len(rises) // 2]
    assert median < KEPT_PER_ROUND / 2, f"live Avro schema fields round by round: {counts}"
