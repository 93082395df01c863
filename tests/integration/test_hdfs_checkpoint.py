"""A router checkpoint on HDFS: the job routes, stops mid-stream and resumes from it, and `router
checkpoint show hdfs://...` reads it.

The HDFS is real: a MiniDFSCluster in its own JVM (`mini_hdfs`), one per module. The job runs in
the shared Spark session against the shared broker; the driver reads and repairs the checkpoint
through Hadoop's FileSystem API (`streaming.spark.checkpoint_files`), and Spark's checkpoint file
manager and state store write it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from mini_hdfs import MiniHdfs
from pyspark.sql import SparkSession

from streaming import topics
from streaming.commands.checkpoint import render
from streaming.config import load_settings
from streaming.kafka.admin import end_offsets, ensure_topics
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.kafka.connection import ClientValue, client_config, producer_config
from streaming.kafka.consuming import header_pairs
from streaming.rules.model import Database, Instance, Route, normalize_address
from streaming.spark.checkpoint import (
    SHUFFLE_PARTITIONS,
    drop_uncommitted_batch,
    logged_batches,
    state_partitions,
    summarize,
)
from streaming.spark.checkpoint_files import HadoopPath, locate, write_atomically
from streaming.spark.job import RouterJob
from streaming.spark.progress import BatchReport
from streaming.spark.state import state_counts
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService",))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=3600.0)
EQUAL = ("SpreadA", "SpreadB")
"""Two equal routes to the service `Spread`: new conversations take them in turn (C5), and the
driver keeps the turn with the checkpoint (`streaming.spark.rotation`), on HDFS here."""
BATCH = 100
"""max_offsets_per_trigger: the most messages a batch in flight can route twice."""


def message(conversation: str) -> bytes:
    return encode_message(
        new_message_record(
            message_id=f"{conversation}:0",
            conversation_id=conversation,
            sequence_number=0,
            to_service="Spread",
            from_service="InitiatorService",
            is_initiator=True,
            origin_database="AW",
            enqueued_at=datetime.now(timezone.utc),
            body=b"<x/>",
        )
    )


def produce(bootstrap: str, topic: str, conversations: list[str]) -> None:
    producer = Producer(producer_config(bootstrap))
    for conversation in conversations:
        producer.produce(topic, key=conversation.encode(), value=message(conversation))
    assert producer.flush(30) == 0


def routes_taken(bootstrap: str, network: list[str]) -> tuple[Counter[str], dict[str, str]]:
    """How many times each message id was sent to the `network` topics, and the route it went by."""
    sent, went = Counter[str](), {}
    settings: dict[str, ClientValue] = {"group.id": f"t-{uuid.uuid4()}", "enable.auto.commit": False}
    consumer = Consumer(client_config(bootstrap, **settings))
    try:
        for topic in network:
            ends = end_offsets(bootstrap, topic)
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            read = 0
            while read < sum(ends.values()):
                record = consumer.poll(10.0)
                assert record is not None, f"{topic}: read {read} of {sum(ends.values())} before timing out"
                if record.error() is not None:
                    continue
                read += 1
                message_id = decode_message(record.value())["message_id"]
                sent[message_id] += 1
                went[message_id] = {k: (v or b"").decode() for k, v in header_pairs(record)}["route"]
    finally:
        consumer.close()
    return sent, went


@pytest.fixture(scope="module")
def hdfs_url() -> Iterator[str]:
    """The `hdfs://127.0.0.1:PORT` URL of a MiniDFSCluster started for this module, stopped after it."""
    with tempfile.TemporaryDirectory(prefix="router-test-hdfs-") as storage, MiniHdfs(Path(storage)) as hdfs:
        yield hdfs.url


@pytest.fixture
def prefix(kafka_bootstrap: str) -> tuple[str, list[str]]:
    """A topic prefix of the test's own, its catalogs and routes; and the equal routes' network topics."""
    name = f"t{uuid.uuid4().hex[:10]}"
    publish_catalogs(kafka_bootstrap, [I1], topics.catalogs_topic(name))
    network = []
    for route in EQUAL:
        address = f"TCP://{route[-1].lower()}:4022"
        put_route(
            kafka_bootstrap, "i1", Route("AW", route, address, service="Spread"), topics.routes_topic(name)
        )
        network.append(topics.network_topic(normalize_address(address), name))
    ensure_topics(kafka_bootstrap, network)
    return name, network


@pytest.fixture
def two_partitions(spark: SparkSession) -> Iterator[None]:
    """The test's queries start with 2 state partitions (as `router run` sets them); restored after."""
    before = spark.conf.get(SHUFFLE_PARTITIONS)
    assert before is not None, "the tests' session sets its shuffle partitions"
    spark.conf.set(SHUFFLE_PARTITIONS, "2")
    yield
    spark.conf.set(SHUFFLE_PARTITIONS, before)


def job(spark: SparkSession, bootstrap: str, prefix: str, checkpoint_dir: str) -> RouterJob:
    settings = load_settings(
        None,
        instance="i1",
        bootstrap=bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=checkpoint_dir,
        max_offsets_per_trigger=BATCH,
        shuffle_partitions=2,
    )
    return RouterJob(spark, settings)


def test_checkpoint_files_are_read_written_and_repaired_on_hdfs_by_hadoop_s_own_client(
    spark: SparkSession, hdfs_url: str
) -> None:
    conf = spark._jsc.hadoopConfiguration()
    jvm = spark._jvm
    assert jvm is not None

    def file_system(url: str) -> str:
        return str(jvm.org.apache.hadoop.fs.Path(url).getFileSystem(conf).getClass().getName())

    assert file_system(f"{hdfs_url}/x") == "org.apache.hadoop.hdfs.DistributedFileSystem"
    assert file_system("file:///tmp/x") == "router.fs.LocalFileSystem"

    # The driver's reads and writes of checkpoint files, on HDFS (the local override maps file: only).
    folder = locate(f"{hdfs_url}/seam-{uuid.uuid4().hex[:8]}", spark)
    assert isinstance(folder, HadoopPath) and not folder.is_dir()
    write_atomically(folder / "rotation" / "3.json", '{"i1": {"a": 1}}')
    write_atomically(folder / "rotation" / "3.json", '{"i1": {"a": 2}}')  # replaces it
    (folder / "rotation" / "notes").write_text("v1\n")
    assert (folder / "rotation").is_dir() and (folder / "rotation" / "3.json").is_file()
    assert sorted(p.name for p in (folder / "rotation").iterdir()) == ["3.json", "notes"]  # no .tmp left
    assert [p.stem for p in (folder / "rotation").glob("[0-9]*.json")] == ["3"]
    assert (folder / "rotation" / "3.json").read_text() == '{"i1": {"a": 2}}'
    (folder / "commits" / "12").write_text("v1\n")
    (folder / "commits" / "7").write_text("v1\n")
    assert sorted(logged_batches(folder / "commits")) == [7, 12]
    (folder / "commits" / "12").unlink()
    (folder / "commits" / "12").unlink(missing_ok=True)
    assert logged_batches(folder / "commits") == [7]
    with pytest.raises(OSError, match="cannot read"):
        (folder / "commits" / "12").read_text()

    # The repair a start makes after a crash, on HDFS: batch 8 planned, not committed; a log file
    # half written.
    for name in ("7", "8", ".8.crc", ".9.0f1e.tmp"):
        (folder / "offsets" / name).write_text("v1\n")
    (folder / "commits" / ".8.77aa.tmp").write_text("v1\n")
    assert drop_uncommitted_batch(folder) == 8
    assert sorted(p.name for p in (folder / "offsets").iterdir()) == ["7"]
    assert sorted(p.name for p in (folder / "commits").iterdir()) == ["7"]
    # With no batch committed, what a first attempt left of the state goes: Spark wants it empty.
    (folder / "commits" / "7").unlink()
    (folder / "state" / "0" / "0" / "1.delta").write_text("x")
    assert drop_uncommitted_batch(folder) == 7 and not (folder / "state").is_dir()


def test_a_router_resumes_from_its_checkpoint_on_hdfs_and_checkpoint_show_reads_it(
    spark: SparkSession,
    kafka_bootstrap: str,
    prefix: tuple[str, list[str]],
    hdfs_url: str,
    two_partitions: None,
) -> None:
    """400 new conversations; the router stops mid-stream after two batches of 100; 200 more
    arrive; a second router resumes from the HDFS checkpoint. Every message is sent once (at most a
    batch in flight twice), and the turn of the equal routes runs on across the restart (its
    counters are on HDFS): each route takes half the conversations. `router checkpoint show URL
    --json` reads the checkpoint in a process of its own."""
    name, network = prefix
    outbound = topics.outbound_topic("i1", name)
    checkpoint_dir = f"{hdfs_url}/router/{uuid.uuid4().hex[:8]}/i1"
    first_wave = [f"a{n}" for n in range(400)]
    produce(kafka_bootstrap, outbound, first_wave)

    stop = threading.Event()
    reports: list[BatchReport] = []

    def on_batch(report: BatchReport) -> None:
        reports.append(report)
        if len(reports) >= 2:
            stop.set()

    first = job(spark, kafka_bootstrap, name, checkpoint_dir)
    assert isinstance(first.checkpoint, HadoopPath) and str(first.checkpoint) == f"{checkpoint_dir}/query"
    first.replay(timeout_s=300, on_batch=on_batch, stop=stop)
    first.close()
    assert stop.is_set() and len(reports) >= 2 and first.routed < len(first_wave), (
        len(reports),
        first.routed,
    )
    query = first.checkpoint
    committed = logged_batches(query / "commits")
    assert committed and logged_batches(query / "offsets") == committed  # the stop left no batch half done
    assert state_partitions(query) == 2
    assert (query / "rotation").glob("[0-9]*.json")  # the turn's counters, written to HDFS

    second_wave = [f"b{n}" for n in range(200)]
    produce(kafka_bootstrap, outbound, second_wave)
    second = job(spark, kafka_bootstrap, name, checkpoint_dir)
    second.replay(timeout_s=300)
    second.close()

    sent, went = routes_taken(kafka_bootstrap, network)
    everyone = {f"{c}:0" for c in first_wave + second_wave}
    assert set(sent) == everyone  # nothing lost
    twice = sum(n - 1 for n in sent.values())
    assert twice <= BATCH and first.routed + second.routed == len(everyone) + twice, (
        first.routed,
        second.routed,
        twice,
    )
    assert Counter(went.values()) == {"SpreadA": 300, "SpreadB": 300}

    # The files alone (the state's rows are counted below, in this process's warm session).
    shown = show(checkpoint_dir, "--json", "--no-state")
    [line] = shown.stdout.splitlines()  # one JSON line on stdout, nothing else
    doc = json.loads(line)
    last = max(logged_batches(query / "commits"))
    assert doc["checkpoint"] == f"{checkpoint_dir}/query"
    assert (doc["instances"], doc["topic_prefix"], doc["state_partitions"]) == (["i1"], name, 2)
    assert (doc["last_committed_batch"], doc["uncommitted_batch"]) == (last, None)
    assert doc["state_operator"] == "transformWithStateExec"
    assert doc["offsets"][outbound] == {str(p): o for p, o in end_offsets(kafka_bootstrap, outbound).items()}
    assert sum(doc["offsets"][outbound].values()) == 600
    assert doc["rotation_batch"] is not None and doc["rotation_batch"] <= last
    # The state store Spark wrote to HDFS: a kept choice per conversation (K2), nothing delayed.
    held = state_counts(spark, query, last)["i1"]
    assert held == {"endpoints": 600, "kept_choices": 600, "delayed": 0, "delayed_endpoints": 0}, held

    # The tables, as `router checkpoint show` renders them, from the same files read in this process.
    summary = summarize(locate(checkpoint_dir, spark))
    assert summary.document() == {k: v for k, v in doc.items() if k in summary.document()}
    table = render(summary, summary.document())
    assert f"checkpoint  {checkpoint_dir}/query" in table
    assert f"last batch  {last}, committed " in table
    assert "state       2 partitions (transformWithStateExec)" in table
    assert f"{outbound}  0" in table and "kept choices" not in table


def show(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "checkpoint", "show", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done
