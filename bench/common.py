"""What the benchmark's measurements share: the records they read, the broker they run on, helpers.

Every system the benchmark compares reads the same records, made here: instance i1 (`I1`) with a
route table of `routes_for(n)` routes, and messages (Avro `router.v1.Message`, key = conversation id,
two partitions) of which 90% go to services named by routes and 10% to i1's local services.

`kafka(bootstrap)` yields a bootstrap address: the one given, else an embedded broker's, started on
a free port in a temporary folder and stopped (and the folder deleted) on exit. Progress lines go to
stderr (`progress`), so that a module's results alone are on stdout.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from pyspark.sql import SparkSession

from streaming import topics
from streaming.devtools.embedded_kafka import EmbeddedKafka
from streaming.kafka.admin import cluster_metadata, end_offsets, ensure_topics
from streaming.kafka.avro import encode_route, new_message_record, parsed_schema, route_to_record
from streaming.kafka.consuming import header_pairs
from streaming.rules.model import Database, Instance, Route, normalize_address
from streaming.spark.session import build_session, session_jvm
from streaming.tables.operations import route_key
from streaming.tables.reader import consumer
from streaming.tables.topic_io import publish_catalogs

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("Local0", "Local1"))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=3600.0)
ADDRESSES = 8  # distinct next hops, so the router writes to as many network topics
LATE_SERVICES = 4  # services no route names until `late_routes` are written
PARTITIONS = 2
BODY = b"x" * 200
PRODUCER_TUNING = {
    # What every producer of the compared systems uses; the keys mean the same in librdkafka and
    # in the Java client (Kafka's perf tools).
    "acks": "all",
    "linger.ms": "5",
    "batch.size": "262144",
    "compression.type": "none",
}


def progress(text: str) -> None:
    """One progress line on stderr (results go to stdout)."""
    print(text, file=sys.stderr, flush=True)


def new_prefix() -> str:
    """A fresh topic namespace, so that no measurement reads another's records."""
    return f"bench{uuid.uuid4().hex[:8]}"


@contextmanager
def kafka(bootstrap: str | None) -> Iterator[str]:
    """Yield `bootstrap`, or start an embedded broker in a temporary folder and yield its address."""
    if bootstrap:
        yield bootstrap
        return
    state = tempfile.mkdtemp(prefix="router-bench-kafka-")
    broker = EmbeddedKafka(state)
    try:
        address = broker.start(detach=False).bootstrap
        progress(f"bench: embedded broker at {address}")
        yield address
    finally:
        broker.stop()
        shutil.rmtree(state, ignore_errors=True)


SESSION_JVM_OPTIONS = (
    # A flight recording (`bench.profile`) keeps a task's whole stack, from the task's own frames
    # in: a micro-batch's task runs deeper than the recorder's default of 64 frames (a quarter of
    # the samples were cut). Only the bench's JVM: the option sets part of the recorder up at the
    # JVM's start (measured: 30 ms and 5 MiB more).
    "-XX:FlightRecorderOptions=stackdepth=256",
)
"""JVM flags of the benchmark's SparkSessions, beside the router's own."""


def bench_session(name: str) -> SparkSession:
    """The benchmark's SparkSession: the router's (`build_session`), with `SESSION_JVM_OPTIONS`."""
    return build_session(name, jvm_options=SESSION_JVM_OPTIONS)


def compile_seconds(spark: SparkSession) -> float:
    """Seconds the session's JVM has spent in its JIT compilers so far (their threads' time, summed)."""
    management = session_jvm(spark, "the JIT's compile time needs").java.lang.management
    return management.ManagementFactory.getCompilationMXBean().getTotalCompilationTime() / 1000.0


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy so far, every process's; NaN where there is no /proc/stat.

    Busy: all the time its first line counts but idle and I/O wait (guest time is in user time).
    """
    try:
        first = Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()
        ticks = [int(x) for x in first[1:9]]
    except (OSError, IndexError, ValueError):
        return float("nan")
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(spark: SparkSession) -> float:
    """CPU seconds the session's JVM process has used so far: every thread's (tasks, driver, JIT, GC).

    The embedded broker is a process of its own, and not counted. NaN where the JDK cannot tell.
    """
    info = session_jvm(spark, "the JVM's CPU time needs").java.lang.ProcessHandle.current().info()
    total = info.totalCpuDuration()
    return total.get().toNanos() / 1e9 if total.isPresent() else float("nan")


@contextmanager
def spark_bench(bootstrap: str | None, name: str) -> Iterator[tuple[SparkSession, str, Path]]:
    """A broker (`kafka`), a SparkSession called `name` and a scratch folder, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    try:
        with kafka(bootstrap) as address:
            yield bench_session(name), address, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- the records ---------------------------------------------------------------------------------


def routes_for(count: int) -> list[Route]:
    """`count` routes in AW's table, each naming one service, over a few next-hop addresses."""
    table = [Route("AW", "AutoCreatedLocal", "LOCAL"), Route("msdb", "AutoCreatedLocal", "LOCAL")]
    table += [
        Route("AW", f"R{i}", f"TCP://hop{i % ADDRESSES}.example:4022", service=f"Svc{i}")
        for i in range(max(0, count - 2))
    ]
    return table


def produce_routes(bootstrap: str, prefix: str, instance: str, routes: list[Route]) -> None:
    """Publish `routes`, in `instance`'s tables, on the namespace's compacted routes topic."""
    topic = topics.routes_topic(prefix)
    ensure_topics(bootstrap, [topic], compacted=True)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"})
    for r in routes:
        key = route_key(instance, r.scope, r.name).encode()
        producer.produce(topic, key=key, value=encode_route(route_to_record(r)))
        producer.poll(0)
    producer.flush(120)


@cache
def _message_schema() -> dict[str, Any]:
    return parsed_schema("message")


def encode_fast(record: dict[str, Any]) -> bytes:
    """The bytes `encode_message` writes for a record already known to fit (UTC datetimes).

    No validation and no schema look-up per call: fast enough to make hundreds of thousands.
    """
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _message_schema(), record)
    return out.getvalue()


def decode_fast(value: bytes | None) -> dict[str, Any]:
    """A message record, read with the schema parsed once; for values known to be whole messages.

    `streaming.kafka.avro.decode_message` checks more (trailing bytes, a null value) and looks the
    schemas folder up on every call, which costs several times the decoding itself.
    """
    if value is None:
        raise ValueError("expected an encoded router.v1.Message, got a null value")
    record = fastavro.schemaless_reader(io.BytesIO(value), _message_schema(), None)
    if not isinstance(record, dict):
        raise ValueError(f"expected a router.v1.Message record, got {type(record).__name__}")
    return record


def message_id(value: bytes | None) -> str:
    """The `message_id` of an encoded message."""
    return str(decode_fast(value)["message_id"])


def message_values(
    count: int, services: int, *, seed: int = 7, tag: str = "", first: int = 0, late: float = 0.0
) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of `count` messages: to the services that have routes (90%) and local ones (10%).

    Message `n` (from `first`) has id `{tag}m{n}` in conversation `{tag}c{n // 4}`; `tag` keeps
    the ids of two loads on one namespace apart. A conversation is a dialog with one target
    service, as in Service Broker: its four messages go to the same service, drawn for it. A
    share `late` of the conversations go to services no route names (`LATE_SERVICES`): they are
    delayed until routes for those services are written (`late_routes`).
    """
    now = datetime.now(timezone.utc)
    for n in range(first, first + count):
        c = n // 4
        conversation = f"{tag}c{c}"
        rng = random.Random(seed * 1_000_003 + c)
        draw = rng.random()
        if draw < late:
            service = f"Late{c % LATE_SERVICES}"
        elif draw < late + 0.1:
            service = f"Local{c % 2}"
        else:
            service = f"Svc{rng.randrange(max(1, services))}"
        record = new_message_record(
            message_id=f"{tag}m{n}",
            conversation_id=conversation,
            sequence_number=n % 4,
            to_service=service,
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=now,
            body=BODY,
        )
        yield conversation.encode(), encode_fast(record)


def lone_message(ident: str, service: str, database: str = AW.name) -> tuple[bytes, bytes]:
    """(key, value) of a message from `database` to `service`, alone in its conversation `ident`."""
    record = new_message_record(
        message_id=ident,
        conversation_id=ident,
        to_service=service,
        from_service="InitiatorService",
        origin_database=database,
        enqueued_at=datetime.now(timezone.utc),
        body=BODY,
    )
    return ident.encode(), encode_fast(record)


def produce_messages(
    bootstrap: str, topic: str, count: int, services: int, seed: int = 7, late: float = 0.0
) -> None:
    """Messages to the services that have routes, to local services (10%), and late ones (`late`)."""
    ensure_topics(bootstrap, [topic], partitions=PARTITIONS)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500000,
        }
    )
    for n, (key, value) in enumerate(message_values(count, services, seed=seed, late=late)):
        producer.produce(topic, key=key, value=value)
        if n % 10000 == 0:
            producer.poll(0)
    producer.flush(300)


def prepare(
    bootstrap: str, prefix: str, routes: int, messages: int, instance: Instance = I1, late: float = 0.0
) -> str:
    """A fresh topic namespace with the catalog, routes and messages; return its outbound topic."""
    publish_catalogs(bootstrap, [instance], topics.catalogs_topic(prefix))
    produce_routes(bootstrap, prefix, instance.name, routes_for(routes))
    outbound = topics.outbound_topic(instance.name, prefix)
    produce_messages(bootstrap, outbound, messages, services=max(1, routes - 2), late=late)
    return outbound


def late_routes() -> list[Route]:
    """Routes for the late services of `message_values`: written to release what was delayed."""
    return [
        Route("AW", f"LateRoute{i}", f"TCP://late{i}.example:4022", service=f"Late{i}")
        for i in range(LATE_SERVICES)
    ]


# --- producing -----------------------------------------------------------------------------------


def tuned_producer(bootstrap: str, failures: list[KafkaError]) -> Producer:
    """A producer with `PRODUCER_TUNING` that appends each failed delivery's error to `failures`.

    Successful deliveries make no report (no Python call per record): `flush_all` waits for them.
    """

    def failed(error: KafkaError | None, _record: object) -> None:
        if error is not None:
            failures.append(error)

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_TUNING,
            "queue.buffering.max.messages": 1_000_000,
            "delivery.report.only.error": True,
            "on_delivery": failed,
        }
    )


def flush_all(producer: Producer, failures: list[KafkaError], what: str, timeout: float = 120.0) -> None:
    """Wait until every record is delivered; raise when one failed or some are still queued."""
    left = producer.flush(timeout)
    if left or failures:
        raise RuntimeError(f"{what}: {left} records undelivered, {len(failures)} failed: {failures[:3]}")


def produce(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> None:
    """Produce one record; when the local queue is full, serve delivery reports and try again."""
    while True:
        try:
            producer.produce(topic, value, key, headers=list(headers))
            return
        except BufferError:
            producer.poll(0.05)


# --- reading back --------------------------------------------------------------------------------


def destination_topics(prefix: str, instance: Instance, routes: Iterable[Route]) -> list[str]:
    """The topics the router delivers or sends these records to (`streaming.topics` names them).

    A network topic for each address of a route that is not LOCAL, and a queue topic for each
    service of the instance's databases. Topics of instances in the catalogs are not among them.
    """
    addresses = {normalize_address(r.address) for r in routes if not r.is_local and not r.is_transport}
    network = [topics.network_topic(a, prefix) for a in sorted(addresses)]
    queues = [
        topics.queue_topic(instance.name, d.name, s, prefix) for d in instance.databases for s in d.services
    ]
    return network + queues


def existing(bootstrap: str, names: Iterable[str]) -> list[str]:
    """Those of `names` that exist now with a leader for every partition.

    The router creates a destination when it first writes to it; until the topic has its leaders,
    its end offsets cannot be read.
    """
    found = cluster_metadata(bootstrap).topics
    return [
        n
        for n in names
        if n in found
        and found[n].error is None
        and all(p.leader >= 0 and p.error is None for p in found[n].partitions.values())
    ]


def records_in(bootstrap: str, names: Iterable[str]) -> int:
    """How many records the topics hold (end offsets; a topic not created yet holds none)."""
    return sum(sum(end_offsets(bootstrap, n).values()) for n in existing(bootstrap, names))


def watcher(bootstrap: str, topic: str, group: str) -> Consumer:
    """A consumer of `topic` from its first record, subscribed now, before the topic need exist.

    It looks for the topic's metadata every 200 ms, so a topic made after it subscribed is read
    within a fraction of a second (the start's figures count to the first record it receives).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 200,
        }
    )
    consumer.subscribe([topic])
    return consumer


def read_topics(bootstrap: str, names: Iterable[str], timeout: float = 120.0) -> Iterator[Message]:
    """Every record of `names` from the beginning up to their end offsets at call time."""
    ends = {
        (topic, partition): end
        for topic in names
        for partition, end in end_offsets(bootstrap, topic).items()
        if end > 0
    }
    if not ends:
        return
    reader = consumer(bootstrap, **{"enable.partition.eof": False})
    reader.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
    deadline = time.monotonic() + timeout
    try:
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {sorted(ends)} back took over {timeout:g} s")
            for record in reader.consume(num_messages=10_000, timeout=0.5):
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"reading {record.topic()}: {error.str()}")
                where = (str(record.topic()), record.partition() or 0)
                end = ends.get(where)
                if end is None or (record.offset() or 0) >= end:
                    continue
                yield record
                if (record.offset() or 0) + 1 >= end:
                    del ends[where]
    finally:
        reader.close()


def header(record: Message, name: str) -> str | None:
    """The first header `name` of a record, as text (None when it has none)."""
    for key, value in header_pairs(record):
        if key == name:
            return None if value is None else value.decode("utf-8")
    return None


# --- figures -------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-th percentile (0 < q <= 100) of `values`, sorted or not; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]
