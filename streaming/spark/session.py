"""The one place that builds the SparkSession, for the streaming job, the engine and the tests (STYLE 7)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pyspark.sql import SparkSession

from streaming.jars import router_state_jar, spark_connector_jars

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

JVM_OPTIONS = "-XX:-DontCompileHugeMethods"
"""The decision is one whole-stage-generated method per stage, larger than the 8,000 bytes of
bytecode the JIT compiles by default: without this flag it runs interpreted, several times slower."""


def build_session(
    app_name: str = "ssb-kafka-router",
    master: str | None = None,
    shuffle_partitions: int = 2,
    extra_conf: dict[str, str] | None = None,
    verbose: bool = False,
) -> SparkSession:
    """Return a SparkSession with the Kafka connector and router jars on `spark.jars`, small-machine defaults.

    `master` defaults to env `ROUTER_SPARK_MASTER` or `local[2]`. A Spark cluster is used by passing
    its master URL (`spark://host:7077`); the jars are shipped to the executors through `spark.jars`.
    Spark's and Kafka's logs go to stderr, at ERROR, or WARN when `verbose`; no progress bars.
    """
    master = master or os.environ.get("ROUTER_SPARK_MASTER", "local[2]")
    jars = ",".join(str(p) for p in [*spark_connector_jars(), router_state_jar()])
    level = "WARN" if verbose else "ERROR"
    java_options = f"{JVM_OPTIONS} -Dlog4j2.configurationFile={LOG_CONFIG} -Drouter.log.level={level}"
    if verbose:
        java_options += " -Drouter.detail.log.level=WARN"
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
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.ui.showConsoleProgress", "false")
        # The decision's rows carry the snapshot's tier arrays: more nested fields than Spark's
        # default limit for whole-stage code generation (100).
        .config("spark.sql.codegen.maxFields", "2000")
        # Lower- and upper-casing (addresses, GUIDs) with the JVM's Unicode tables, as the
        # reference engine's str.lower does, instead of ICU's, which costs ~10x more per row.
        .config("spark.sql.icu.caseMappings.enabled", "false")
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(level)
    if not verbose:
        # A failed micro-batch travels back through py4j, which logs it again; the router reports it.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    return spark
