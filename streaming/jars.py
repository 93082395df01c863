"""Where the JVM jars live: the Kafka connector for Spark, the router's state processor, the broker.

`scripts/setup.sh` (`make setup`) copies them from Maven Central into the git-ignored cache:

    <project root>/.cache/jars/spark/        jvm/spark/pom.xml: spark-sql-kafka-0-10 and its runtime jars
    <project root>/.cache/jars/kafka/        jvm/kafka/pom.xml: kafka_2.13 (KRaft broker) and log4j2
    <project root>/.cache/jars/kafka-tools/  jvm/kafka-tools/pom.xml: Kafka's perf tools, for bench/
    <project root>/.cache/jars/router/       router-state.jar: jvm/state/pom.xml, built against pyspark's jars
    <project root>/.cache/jars/hdfs-test/    jvm/hdfs-test/pom.xml: hadoop-client-minicluster (tests' HDFS)
    <project root>/.cache/jars/hdfs-test-main/  router-hdfs-test.jar: jvm/hdfs-test/src, the tests' HDFS

The project root is the nearest folder above this file that holds `pyproject.toml`; the environment
variable `ROUTER_CACHE_DIR` names another cache folder (for an installed, non-editable copy, as in the
Docker image). Nothing here is read at import time.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from streaming.errors import RouterError

CACHE_ENV = "ROUTER_CACHE_DIR"

# name-1.2.3.jar, name-1.5.7-7.jar, name_2.13-4.2.0.jar: the version is the last `-` followed by a
# dotted number; the name is everything before it (so `spark-sql-kafka-0-10_2.13` stays whole).
_VERSIONED_JAR = re.compile(r"^(?P<name>.+)-(?P<version>\d+(?:\.\d+)+(?:[-.][A-Za-z0-9]+)*)\.jar$")


def project_root() -> Path:
    """Return the folder holding `pyproject.toml`, walking up from this file."""
    here = Path(__file__).resolve()
    for folder in here.parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    raise RouterError(
        f"expected a pyproject.toml in a folder above {here} (a source checkout); "
        f"for an installed copy set {CACHE_ENV} to the folder that holds jars/"
    )


def cache_dir() -> Path:
    """Return the cache folder: `$ROUTER_CACHE_DIR`, else `<project root>/.cache`."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return project_root() / ".cache"


def artifact_name(jar: Path) -> str:
    """Return a jar's artifact name: its file name without version and `.jar`."""
    match = _VERSIONED_JAR.match(jar.name)
    return match.group("name") if match else jar.stem


def pyspark_jar_names() -> frozenset[str]:
    """Return the artifact names of the jars Spark already puts on its classpath.

    That is `$SPARK_HOME/jars` when set, and the `jars` folder of the installed pyspark package
    (found without importing pyspark).
    """
    folders: list[Path] = []
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        folders.append(Path(spark_home) / "jars")
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        folders.append(Path(spec.origin).parent / "jars")
    return frozenset(
        artifact_name(jar) for folder in folders if folder.is_dir() for jar in folder.glob("*.jar")
    )


def _cached_jars(kind: str, what: str) -> list[Path]:
    folder = cache_dir() / "jars" / kind
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not jars:
        raise RouterError(
            f"expected the {what} jars in {folder}, found none: run `make setup` "
            f"(or `bash scripts/setup.sh`), which copies them from Maven Central"
        )
    return jars


def spark_connector_jars() -> list[Path]:
    """Return the jars to add to `spark.jars` for the Kafka source and sink.

    A jar whose artifact name pyspark already ships (snappy, lz4, zstd, slf4j, scala-library...) is
    left out, so that no class is on the classpath twice in two versions.
    """
    shipped = pyspark_jar_names()
    return [
        jar for jar in _cached_jars("spark", "Spark Kafka connector") if artifact_name(jar) not in shipped
    ]


def router_state_jar() -> Path:
    """Return the jar of the router's own JVM classes (`router.rules`, `router.spark`, ...)."""
    return _cached_jars("router", "router state processor")[0]


def driver_class_archive() -> Path:
    """Where `make setup` keeps the driver JVM's class archive (`streaming.spark.session.archive_options`)."""
    return cache_dir() / "class-archive" / "driver.jsa"


def kafka_broker_classpath() -> list[Path]:
    """Return the classpath of the embedded Kafka broker (`java -cp ... kafka.Kafka`)."""
    return _cached_jars("kafka", "Kafka broker")


def kafka_tools_classpath() -> list[Path]:
    """Return the classpath of Kafka's own tools (`org.apache.kafka.tools.ProducerPerformance`...).

    A folder apart from the broker's: kafka-tools brings jars the broker has no use for.
    """
    return _cached_jars("kafka-tools", "Kafka tools")
