"""The one place that builds the SparkSession, for the streaming job, the engine and the tests.

One builder, so that the jars, the shuffle partitions, the state store and the logging a test runs
with are those the job runs with.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark import java_gateway
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import Column, SparkSession
from pyspark.sql.types import AtomicType, CharType, DataType, VarcharType

from streaming.errors import RouterError, SparkMasterUnavailable
from streaming.jars import driver_class_archive, router_state_jar, spark_connector_jars
from streaming.jvm_flags import SPARK_JVM_OPTIONS_ENV, flags_from_env

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

AVRO_FIELD_MAX_BYTES = 64 * 1024 * 1024
"""The longest string or bytes field (a message body included) the job decodes: 64 MiB."""

JVM_OPTIONS = " ".join(
    [
        # The decision is one whole-stage-generated method per stage, far larger than the 8,000
        # bytes of bytecode the JIT compiles by default: without this it runs interpreted.
        "-XX:-DontCompileHugeMethods",
        # And larger than C2's default graph allows ("out of nodes"): C2 would give up on it, and
        # C1 cannot compile it either ("out of virtual registers"), so it would stay interpreted.
        "-XX:MaxNodeLimit=240000",
        "-XX:NodeLimitFudgeFactor=8000",
        # No speculation on branches not yet taken: a batch that takes one (a dead letter, a kept
        # choice) would otherwise send the compiled decision back to the interpreter for seconds,
        # until C2 has compiled the method again. Measured on 100,000 decided messages: 3-4 s
        # per batch after such a fall-back, 1.2-1.4 s without.
        "-XX:PerMethodTrapLimit=0",
        "-XX:PerBytecodeTrapLimit=0",
        # A method is compiled after four times as many calls and loops as by default. The code that
        # runs per row crosses that within the first batches all the same; much of Spark's driver
        # code, which plans each micro-batch and runs only so many times a batch, is compiled less
        # often, and the JIT's threads take less of the two cores. Measured over the 4th-7th
        # replays of 300,000 messages in one JVM: the JIT used 1.7-2.5 s of CPU a replay instead
        # of 2.8-4.6 s, and a replay took 7.5-8.0 s instead of 8.0-8.8 (with 10 times as many:
        # JIT 0.9-1.6 s, replays 7.8-8.4 s). A run of 1,500,000 messages after three replays was
        # as fast with it as without (46,100 and 45,700 msg/s).
        "-XX:CompileThresholdScaling=4",
        # The throughput collector instead of G1: a micro-batch makes short-lived garbage by the
        # gigabyte (rows, strings, records) and keeps little (the state is in RocksDB, off the
        # heap); G1 costs more CPU per byte collected (its barriers, its concurrent threads) for
        # shorter pauses the one-second trigger does not need. Measured over the 4th-7th warm
        # replays of 300,000 messages, a new JVM per collector, twice: 6.85-7.28 s a replay with it,
        # 7.01-8.54 s with G1.
        "-XX:+UseParallelGC",
        # Avro's fast reader, off. It keeps the reader it builds for each schema object in a map
        # whose entries hold their own keys, so none is ever freed, and Spark's from_avro parses
        # its schema anew in every task: each task left a schema and its reader on the heap for
        # good. Measured in one JVM over replays of 21 micro-batches: 1,790-1,840 more live Avro
        # schema fields after each replay with it, 238-926 (fewer each time) without; under
        # `bench/soak.py` at 2,000 msg/s, 43,214 live schema fields after 12 minutes with it, 830
        # without. Without it Avro decodes through its resolving decoder, kept per task thread,
        # and no slower: warm replays of 300,000 messages in new JVMs, alternating, ran at
        # 17,465-21,373 msg/s without it and 17,905-19,028 with it (six of each).
        "-Dorg.apache.avro.fastread=false",
        # Avro allocates a string or bytes field at the length the record declares before reading
        # it: a few garbage bytes can declare 2 GB and end the JVM (OutOfMemoryError). Past this
        # length a value is undecodable and dead-lettered instead.
        f"-Dorg.apache.avro.limits.string.maxLength={AVRO_FIELD_MAX_BYTES}",
        f"-Dorg.apache.avro.limits.bytes.maxLength={AVRO_FIELD_MAX_BYTES}",
        f"-Dorg.apache.avro.limits.collectionItems.maxLength={AVRO_FIELD_MAX_BYTES}",
    ]
)
"""JVM flags for the driver and executors, for the router's wide generated code."""

RETAINED_UI = 50
"""SQL executions, jobs and stages Spark's status listeners keep (Spark's default: 1,000 each)."""

JVM_OPTIONS_ENV = SPARK_JVM_OPTIONS_ENV
"""More flags for the driver's and the executors' JVMs, separated by spaces, after `JVM_OPTIONS`
(where both give a flag, this one's holds): a collector's log, say, or the C1-only compiler the test
suite runs with (`tests/conftest.py`). Unset: none."""

CLASS_ARCHIVE_ENV = "ROUTER_CLASS_ARCHIVE"
"""`off` starts the driver without its class archive (`archive_options`)."""


def archive_options(record: Path | None = None) -> list[str]:
    """The driver JVM's flags for its class archive: load classes from it, or record it (`record`).

    Starting, the driver loads and verifies about 20,000 classes out of some 300 jars, each class
    looked up jar after jar. `make setup` records the classes of a short run of the router (the
    demo's instance i1, `streaming.devtools.class_archive`) into a dynamic CDS archive, which
    later JVMs map at start instead. Measured on `router run` (one message waiting, quiet
    machine, `bench/startup.py`): the first message routed 8.3-9.2 s after the process started
    with the archive, 11.8-12.5 s without. The archive holds the classpath it was made with: a JVM
    with another classpath (a rebuilt jar) ignores it, silently, and loads its classes as before;
    `make setup` records it again when a jar on it or the JDK changes. The driver of a session on a
    cluster has the same classpath (`build_session`), and maps it too.
    """
    if record is not None:
        return [f"-XX:ArchiveClassesAtExit={record}", *QUIET_ARCHIVE]
    archive = driver_class_archive()
    if os.environ.get(CLASS_ARCHIVE_ENV) == "off" or not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", *QUIET_ARCHIVE]


QUIET_ARCHIVE = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
"""The JVM says on stdout which classes it leaves out of an archive, and when one does not fit."""


def env_jvm_options() -> list[str]:
    """The flags `ROUTER_JVM_OPTIONS` gives (`JVM_OPTIONS_ENV`); a word that is not a flag is refused."""
    return flags_from_env(JVM_OPTIONS_ENV)


LOCAL_FILE_SYSTEM = "router.fs.LocalFileSystem"
"""Hadoop's `file:` file system, setting permissions without a `chmod` process (jvm/state)."""

CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
"""Spark's checkpoint manager over Hadoop's FileSystem API (the default uses FileContext)."""


def driver_classpath(jars: list[Path]) -> str:
    """The jars as the driver's own classpath (`spark.driver.extraClassPath`), local or on a cluster."""
    return os.pathsep.join(str(p) for p in jars)


def local_conf(jars: list[Path]) -> dict[str, str]:
    """Spark settings for local mode (one JVM), with its checkpoint on the local disk.

    The jars go on the driver's own classpath (`spark.driver.extraClassPath`), not `spark.jars`:
    spark-submit opens the local file system before it would load `spark.jars`, and the router's
    file system class must be loadable then.

    A micro-batch writes a dozen small files to the checkpoint and the state store. Without
    Hadoop's native library, the local file system started a process for each: `chmod` for every
    file created, and `readlink` for every rename through Hadoop's FileContext (Spark's default
    checkpoint manager): 55 processes a batch, forked from the driver's batch thread.
    `router.fs.LocalFileSystem` sets permissions through java.nio, and the FileSystem-based manager
    renames without `readlink` (a local rename is atomic, as the manager needs). A cluster keeps
    Hadoop's defaults and adds `spark.jars`: its checkpoint is on a shared file system, and its
    executors start without the router's jar.

    In one JVM nothing outside the machine talks to the driver: its RPC and block manager listen on
    127.0.0.1, not on the address the host name resolves to.
    """
    return {
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.extraClassPath": driver_classpath(jars),
        "spark.hadoop.fs.file.impl": LOCAL_FILE_SYSTEM,
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
    }


JVM_NOTICES_DROPPED = (b"WARNING: Using incubator modules:",)
"""The starts of the lines the session's JVM writes to stderr that the router leaves out.

Spark's launcher adds `--add-modules=jdk.incubator.vector` to every JVM it starts, and the JVM
then says so on stderr as it starts: a line in front of every command's own, which tells a user
nothing they could act on.
"""


def relay_stderr(pipe: Any, drop: Sequence[bytes] = JVM_NOTICES_DROPPED) -> threading.Thread:
    """Copy the lines of `pipe` (the JVM's stderr) to this process's stderr, leaving out `drop`'s.

    The thread reads until the JVM closes its end, and ends its own then. A failed write does not
    end it: its pipe would close under the JVM, whose later lines (a failed query's among them)
    would all be lost, also once this process's stderr could take them again.
    """

    def copy() -> None:
        with pipe:
            for line in iter(pipe.readline, b""):
                if line.startswith(drop):
                    continue
                with contextlib.suppress(OSError):  # stderr gone: the JVM's lines still drain
                    while line:  # a write interrupted by a signal may take only part of a line
                        line = line[os.write(2, line) :]

    thread = threading.Thread(target=copy, name="jvm-stderr", daemon=True)
    thread.start()
    return thread


@contextmanager
def _jvm_launched() -> Iterator[None]:
    """While the SparkSession is built, the JVM it starts ignores SIGTERM; its stderr is relayed.

    PySpark starts its JVM with SIGINT ignored, so that Ctrl-C in a terminal (sent to the whole
    process group) reaches only the Python side, which stops the query between micro-batches. A
    SIGTERM to the group (systemd, `kill -TERM -PGID`) would instead end the JVM at once, under the
    query. A JVM that starts with a signal ignored leaves it ignored; the disposition is set only
    around the fork of the JVM (from the main thread: only it can change a disposition), and the JVM
    still ends with the Python process (its stdin closes).

    The JVM's stderr reaches this process's through `relay_stderr`. When the JVM does not start,
    its own lines (the reason) are relayed before the error goes on.
    """
    original = java_gateway.Popen
    on_main = threading.current_thread() is threading.main_thread()
    relays: list[tuple[subprocess.Popen[Any], threading.Thread]] = []

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        relayed = "stderr" not in kwargs
        if relayed:
            kwargs["stderr"] = subprocess.PIPE
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN) if on_main else signal.SIG_DFL
        try:
            process = original(*args, **kwargs)
        finally:
            if on_main:
                signal.signal(signal.SIGTERM, previous)
        if relayed:
            relays.append((process, relay_stderr(process.stderr)))
        return process

    java_gateway.Popen = popen  # type: ignore[misc,assignment]
    try:
        yield
    except BaseException:
        for process, relay in relays:
            if process.poll() is not None:  # a JVM still running (a refused master) says nothing more now
                relay.join(timeout=5.0)
        raise
    finally:
        java_gateway.Popen = original  # type: ignore[misc]


def session_jvm(spark: SparkSession, needing: str) -> Any:
    """The JVM of a classic session; `needing` names what needs it, for the error under Spark Connect.

    The router's own JVM classes (jvm/state) run in the session's JVM, which a Spark Connect
    session does not give its client.
    """
    jvm = spark._jvm
    if jvm is None:
        raise RouterError(f"{needing} a classic SparkSession (a JVM), not Spark Connect")
    return jvm


def cast_to(column: Column, dtype: DataType) -> Column:
    """`column` cast to `dtype`: by the type's name when it is atomic, one py4j round trip.

    A cast to a DataType object takes six: PySpark looks the session up and has the JVM parse the
    type from JSON. Building the query casts to a type some hundred times. CHAR and VARCHAR, whose
    casts by name the router does not use or test, keep the cast to the object.
    """
    by_name = isinstance(dtype, AtomicType) and not isinstance(dtype, (CharType, VarcharType))
    return column.cast(dtype.simpleString()) if by_name else column.cast(dtype)


MASTER_WAIT_S = 120.0
"""How long a driver with a `spark://` master waits for the master's port to take a connection."""

MASTER_PORT = 7077
"""The port of a `spark://` master URL that names none (Spark's own default)."""


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The host and port of each master a `spark://host:port[,host:port...]` URL names."""
    if not master.startswith("spark://"):
        raise SparkMasterUnavailable(f"expected a master URL spark://host:port, got {master!r}")
    addresses = []
    for part in master.removeprefix("spark://").split(","):
        host, _, port = part.strip().rpartition(":")
        if not host:
            host, port = port, str(MASTER_PORT)
        if not host or not port.isdigit():
            raise SparkMasterUnavailable(f"expected host:port in the master URL {master!r}, got {part!r}")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def wait_for_master(
    master: str,
    timeout_s: float = MASTER_WAIT_S,
    say: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Return once one of a `spark://` URL's masters takes a TCP connection on its port, or `stop` is set.

    Spark's driver gives up on a standalone master that does not answer within 60 s, whatever the
    reason, and stops its SparkContext. A router started together with its cluster (a recipe's
    `&`, units started at once) would lose that race while the master's JVM starts: so the router
    waits for the port first, saying so once, up to `timeout_s`.
    """
    addresses = master_addresses(master)
    deadline = time.monotonic() + timeout_s
    said = False
    while stop is None or not stop.is_set():
        for address in addresses:
            try:
                socket.create_connection(address, timeout=2.0).close()
                return
            except OSError:
                continue
        if time.monotonic() >= deadline:
            raise SparkMasterUnavailable(
                f"expected the Spark master at {master} to take connections, none did within "
                f"{timeout_s:.0f} s: is it running (router spark cluster, or the cluster's "
                "start-master.sh), on that host and port?"
            )
        if not said and say is not None:
            say(f"waiting for the Spark master at {master} (up to {timeout_s:.0f} s)")
            said = True
        time.sleep(0.5)


def _to_stderr(text: str) -> None:
    print(f"router: {text}", file=sys.stderr, flush=True)


def build_session(
    app_name: str = "ssb-kafka-router",
    master: str | None = None,
    shuffle_partitions: int = 2,
    extra_conf: dict[str, str] | None = None,
    verbose: bool = False,
    jvm_options: Sequence[str] = (),
    record_classes: Path | None = None,
    say: Callable[[str], None] = _to_stderr,
) -> SparkSession:
    """Return a SparkSession with the Kafka connector and router jars, small-machine defaults.

    `master` defaults to env `ROUTER_SPARK_MASTER` or `local[2]`, where the jars are on the
    driver's classpath (`local_conf`). A Spark cluster is used by passing its master URL
    (`spark://host:7077`); the jars are shipped to the executors through `spark.jars`. The session
    waits for such a master's port first (`wait_for_master`, telling `say`), and a master that then
    does not take the application is a `SparkMasterUnavailable`.
    Spark's and Kafka's logs go to stderr, at ERROR, or WARN when `verbose`; no progress bars.
    `jvm_options`, then `ROUTER_JVM_OPTIONS`'s, are added to `JVM_OPTIONS` for the driver and the
    executors. The driver starts from its class archive when `make setup` made one, or records one
    into `record_classes` (`archive_options`).
    """
    master = master or os.environ.get("ROUTER_SPARK_MASTER", "local[2]")
    jars = [*spark_connector_jars(), router_state_jar()]
    level = "WARN" if verbose else "ERROR"
    java_options = " ".join(
        [
            JVM_OPTIONS,
            *jvm_options,
            *env_jvm_options(),
            f"-Dlog4j2.configurationFile={LOG_CONFIG}",
            f"-Drouter.log.level={level}",
        ]
    )
    if verbose:
        java_options += " -Drouter.detail.log.level=WARN"
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        # With the UI off, Spark's status listeners still keep the last 1,000 SQL executions (each
        # with its plan's graph and every metric's value as text), jobs and stages on the driver's
        # heap, for a UI no one opens here; at a micro-batch a second `router run` fills them in
        # about 17 minutes. Measured with `bench/soak.py`: the live heap grew 12 MB over 150
        # micro-batches, mostly in those executions' classes and the values they keep; with 50
        # kept, it held at 160-182 MiB from the fifth minute to the thirteenth.
        .config("spark.sql.ui.retainedExecutions", str(RETAINED_UI))
        .config("spark.ui.retainedJobs", str(RETAINED_UI))
        .config("spark.ui.retainedStages", str(RETAINED_UI))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("ROUTER_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.autoBroadcastJoinThreshold", str(64 * 1024 * 1024))
        # The route snapshot's tables are local tables in every batch's plan; this rule would
        # evaluate the projections over them again at every planning, 100,000 routes at a time
        # (measured: 2 s of each micro-batch with 100,000 routes).
        .config(
            "spark.sql.optimizer.excludedRules",
            "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation",
        )
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.sql.warehouse.dir", str(Path(os.environ.get("TMPDIR", "/tmp")) / "router-warehouse"))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        # A commit writes the batch's changes to the checkpoint instead of a snapshot of the whole
        # store (snapshots are made in the background). Measured at 10,000 msg/s offered: commit
        # 120-220 ms a batch instead of 260-430 (2 tasks), batches of 1.0-1.2 s instead of 1.1-1.5.
        # A checkpoint made without it resumes with it, and the other way round.
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # Without it every write to the store first reads the key, only to keep a count of its
        # keys that no one here reads (the memory's size comes from the state data source,
        # `streaming.spark.state.read_state`). A new conversation's kept choice is three writes
        # (its memory and its timer's two entries): measured on 100,000-message batches, the
        # state processor's stage used about 9% less CPU (1.60-1.73 s a batch instead of
        # 1.74-1.91 s; means 1.64 and 1.81).
        .config("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false")
        .config("spark.driver.extraJavaOptions", " ".join([java_options, *archive_options(record_classes)]))
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.ui.showConsoleProgress", "false")
        # PySpark notes the Python line of every DataFrame function called, for the context of an
        # error in that DataFrame, at several py4j round trips each: about half of the 5,200 round
        # trips that build the query. The router's DataFrames are its own code, not a user's.
        # Measured (same JVM, alternating): building the query 0.30-0.46 s instead of 0.51-1.01,
        # a batch plan (first batch, and each change of its shape) 0.24-0.34 s instead of 0.50-0.76.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # The decision's rows carry the snapshot's tier arrays: more nested fields than Spark's
        # default limit for whole-stage code generation (100).
        .config("spark.sql.codegen.maxFields", "2000")
        # Lower- and upper-casing (addresses, GUIDs) with the JVM's Unicode tables, as the
        # reference engine's str.lower does, instead of ICU's, which costs ~10x more per row.
        .config("spark.sql.icu.caseMappings.enabled", "false")
    )
    if master.startswith("local"):
        for key, value in local_conf(jars).items():
            builder = builder.config(key, value)
    else:
        # `spark.jars` ships the jars to the executors; the driver has them on its own classpath as
        # in local mode, so that its classpath is the one the class archive was recorded with, and
        # the archive is mapped (measured with jcmd: with `spark.jars` alone it was not).
        builder = builder.config("spark.jars", ",".join(str(p) for p in jars))
        builder = builder.config("spark.driver.extraClassPath", driver_classpath(jars))
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    if master.startswith("spark://"):
        wait_for_master(master, say=say)
    try:
        with _jvm_launched():
            spark = builder.getOrCreate()
    except Py4JJavaError as exc:
        if "stopped SparkContext" not in str(exc) or not master.startswith("spark://"):
            raise
        raise SparkMasterUnavailable(
            f"the Spark master at {master} did not take the router's application (Spark's driver "
            "gives up after 60 s): the master's log says why; a driver the master cannot reach back "
            "needs SPARK_LOCAL_IP (or spark.driver.host) set to an address it can"
        ) from None
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise RouterError(
            "Spark's JVM ended as it started: its own lines above say why (most often an option in "
            f"{SPARK_JVM_OPTIONS_ENV} that it refuses, or no Java 17 or later on PATH or in JAVA_HOME)"
        ) from None
    spark.sparkContext.setLogLevel(level)
    if not verbose:
        # A failed micro-batch travels back through py4j, which logs it again; the router reports it.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    return spark
