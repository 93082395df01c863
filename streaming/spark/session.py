"""The one place that builds the SparkSession, for the streaming job, the engine and the tests (STYLE 7)."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

from streaming.jars import router_state_jar, spark_connector_jars


def build_session(
    app_name: str = "ssb-kafka-router",
    master: str | None = None,
    shuffle_partitions: int = 2,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession with the Kafka connector and router jars on `spark.jars`, small-machine defaults.

    `master` defaults to env `ROUTER_SPARK_MASTER` or `local[2]`. A Spark cluster is used by passing
    its master URL (`spark://host:7077`); the jars are shipped to the executors through `spark.jars`.
    """
    master = master or os.environ.get("ROUTER_SPARK_MASTER", "local[2]")
    jars = ",".join(str(p) for p in [*spark_connector_jars(), router_state_jar()])
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", jars)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("ROUTER_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.autoBroadcastJoinThreshold", str(64 * 1024 * 1024))
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.sql.warehouse.dir", str(Path(os.environ.get("TMPDIR", "/tmp")) / "router-warehouse"))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
