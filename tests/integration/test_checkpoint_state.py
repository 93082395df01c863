"""A router checkpoint's state partitions, what `router checkpoint show` reads from it, and the drain.

Each test makes real checkpoints with the router job on the shared broker and Spark session. The
session's `spark.sql.shuffle.partitions` is what a new query takes (the commands build the session
from the settings), so a test sets it for its own queries and puts the session's back after.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming import topics
from streaming.config import DEFAULT_SHUFFLE_PARTITIONS, load_settings
from streaming.errors import ConfigError
from streaming.kafka.admin import end_offsets
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, Database, Instance, Route
from streaming.spark.checkpoint import SHUFFLE_PARTITIONS, logged_batches, state_metadata, state_partitions
from streaming.spark.job import RouterJob
from streaming.spark.state import read_state
from streaming.tables.topic_io import publish_catalogs, put_route
from tests.topic_records import records_now

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AW = Database(
    "AW",
    "0a0a0a0a-0000-0000-0000-000000000001",
    True,
    ("InitiatorService", "Audit", BROKER_CONFIGURATION_SERVICE),
)
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
# Delayed messages stay held for the whole test: retry_s far beyond it.
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=3600.0)
I2 = Instance(
    "i2",
    "TCP://i2:4022",
    (Database("Parts", "0b0b0b0b-0000-0000-0000-000000000002", True, ("OrderParts",)),),
    retry_s=I1.retry_s,
)


def message(conversation: str, service: str, n: int = 0) -> bytes:
    return encode_message(
        new_message_record(
            message_id=f"{conversation}:{n}",
            conversation_id=conversation,
            sequence_number=n,
            to_service=service,
            from_service="InitiatorService",
            is_initiator=True,
            origin_database="AW",
            enqueued_at=datetime.now(timezone.utc),
            body=b"<x/>",
        )
    )


def produce(bootstrap: str, topic: str, values: list[tuple[str, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in values:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0


def message_ids(bootstrap: str, topic: str) -> Counter[str]:
    """How many times each message id was written to `topic`."""
    return Counter(decode_message(record.value())["message_id"] for record in records_now(bootstrap, topic))


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    name = f"t{uuid.uuid4().hex[:10]}"
    publish_catalogs(kafka_bootstrap, [I1, I2], topics.catalogs_topic(name))
    for route in (
        Route("AW", "AutoCreatedLocal", "LOCAL"),
        Route("AW", "OrderPartsRoute", "TCP://i2:4022", service="OrderParts"),
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
    ):
        put_route(kafka_bootstrap, "i1", route, topics.routes_topic(name))
    return name


@pytest.fixture
def partitions(spark: SparkSession) -> Iterator[Callable[[int], None]]:
    """Sets the session's state partitions for the test's queries (`partitions(n)`), restored after."""
    before = spark.conf.get(SHUFFLE_PARTITIONS)
    assert before is not None, "the tests' session sets its shuffle partitions"

    def use(n: int) -> None:
        spark.conf.set(SHUFFLE_PARTITIONS, str(n))

    yield use
    spark.conf.set(SHUFFLE_PARTITIONS, before)


def job(spark: SparkSession, bootstrap: str, prefix: str, folder: Path, **settings: object) -> RouterJob:
    return RouterJob(
        spark,
        load_settings(
            None,
            instance="i1",
            bootstrap=bootstrap,
            topic_prefix=prefix,
            checkpoint_dir=str(folder),
            **settings,
        ),
    )


def replayed(spark: SparkSession, bootstrap: str, prefix: str, folder: Path) -> RouterJob:
    """A replay, in 2 state partitions, of what `prefix`'s topics hold, with its checkpoint at `folder`."""
    routed = job(spark, bootstrap, prefix, folder, shuffle_partitions=2)
    routed.replay(timeout_s=300)
    routed.close()
    return routed


def test_a_checkpoint_refuses_other_state_partitions_and_resumes_with_its_own(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path, partitions: Callable[[int], None]
) -> None:
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [(f"c{n}", message(f"c{n}", "Audit")) for n in range(20)])
    partitions(2)
    replayed(spark, kafka_bootstrap, prefix, tmp_path / "ckpt")
    query = tmp_path / "ckpt" / "query"
    # What the checks rely on, in the checkpoint Spark wrote: the offset log's conf, the state's
    # metadata and one state folder per partition.
    assert state_partitions(query) == 2
    assert state_metadata(query) == {"operatorName": "transformWithStateExec", "numPartitions": 2}
    assert sorted(p.name for p in (query / "state" / "0").iterdir() if p.name.isdigit()) == ["0", "1"]
    planned = logged_batches(query / "offsets")

    partitions(8)
    refused = job(spark, kafka_bootstrap, prefix, tmp_path / "ckpt", shuffle_partitions=8)
    with pytest.raises(ConfigError) as error:
        refused.replay(timeout_s=300)
    refused.close()
    text = str(error.value)
    assert "keeps the router's state in 2 partitions" in text and "shuffle_partitions: 8" in text
    assert "Put `shuffle_partitions: 2` in the settings file" in text
    # A settings file that names no value gets the default, and is told to name the checkpoint's.
    # (A checkpoint made before the default became 4, resumed with settings that name no value.)
    unnamed = job(spark, kafka_bootstrap, prefix, tmp_path / "ckpt")
    assert unnamed.settings.shuffle_partitions == DEFAULT_SHUFFLE_PARTITIONS == 4
    partitions(DEFAULT_SHUFFLE_PARTITIONS)  # as `router run` builds its session from the settings
    with pytest.raises(ConfigError, match=r"the default shuffle_partitions, 4 \(the settings name none\)"):
        unnamed.replay(timeout_s=300)
    unnamed.close()
    assert logged_batches(query / "offsets") == planned  # refused before Spark planned anything

    partitions(2)
    produce(kafka_bootstrap, outbound, [("c99", message("c99", "Audit"))])
    assert replayed(spark, kafka_bootstrap, prefix, tmp_path / "ckpt").routed == 1
    delivered = message_ids(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert len(delivered) == 21 and set(delivered.values()) == {1}


def with_every_kind_of_state(spark: SparkSession, bootstrap: str, prefix: str, folder: Path) -> RouterJob:
    """A checkpoint whose state holds kept choices, delayed messages and, on Kafka, a request (B4).

    30 conversations to OrderParts (routed to i2: a kept choice each), 7 messages of 5 conversations
    to Remote, which no route names: delayed (M4 asks the dynamic routing service once).
    """
    routes = topics.routes_topic(prefix)
    put_route(
        bootstrap, "i1", Route("AW", "Directory", "LOCAL", service=BROKER_CONFIGURATION_SERVICE), routes
    )
    values = [(f"o{n}", message(f"o{n}", "OrderParts")) for n in range(30)]
    values += [(f"r{n % 5}", message(f"r{n % 5}", "Remote", n // 5)) for n in range(7)]
    produce(bootstrap, topics.outbound_topic("i1", prefix), values)
    return replayed(spark, bootstrap, prefix, folder)


def show(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streaming.cli", "checkpoint", "show", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_checkpoint_show_reads_what_a_router_checkpoint_holds(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path, partitions: Callable[[int], None]
) -> None:
    partitions(2)
    with_every_kind_of_state(spark, kafka_bootstrap, prefix, tmp_path / "ckpt")
    # What the state holds, counted here from the rows Spark's state data source gives.
    rows = (
        read_state(spark, tmp_path / "ckpt" / "query")
        .select(F.size("value.entries").alias("entries"), F.size("value.waiting").alias("waiting"))
        .collect()
    )
    expected = {
        "endpoints": len(rows),
        "kept_choices": sum(r["entries"] for r in rows),
        "delayed": sum(r["waiting"] for r in rows),
        "delayed_endpoints": sum(1 for r in rows if r["waiting"]),
    }
    assert expected["delayed"] == 7 and expected["delayed_endpoints"] == 5
    assert expected["kept_choices"] >= 30

    done = show(str(tmp_path / "ckpt"), "--json", "--requests", "--bootstrap", kafka_bootstrap)
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = done.stdout.splitlines()  # one JSON line on stdout, nothing else
    doc = json.loads(line)
    assert doc["instances"] == ["i1"] and doc["topic_prefix"] == prefix
    assert doc["state_partitions"] == 2
    assert doc["state"] == {"i1": expected}
    assert doc["requests"] == {"i1": 1}
    assert doc["last_committed_batch"] == max(logged_batches(tmp_path / "ckpt" / "query" / "commits"))
    outbound = topics.outbound_topic("i1", prefix)
    # The outbound topic holds the 37 messages and the MissingRoute request the batch sent.
    assert (
        sum(doc["offsets"][outbound].values()) == sum(end_offsets(kafka_bootstrap, outbound).values()) == 38
    )
    assert doc["state_read_s"] > 0 and doc["spark_start_s"] > 0

    quick = show(str(tmp_path / "ckpt"), "--no-state")
    assert quick.returncode == 0, quick.stderr[-3000:]
    assert "state       2 partitions (transformWithStateExec)" in quick.stdout
    assert f"{outbound}  0" in quick.stdout and "kept choices" not in quick.stdout

    wrong = show(str(tmp_path))
    assert wrong.returncode == 2
    assert (
        f"{tmp_path} is not a router checkpoint: expected a checkpoint_dir holding query/metadata"
        in wrong.stderr
    )


def test_a_drained_checkpoint_gives_way_to_one_with_more_partitions(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path, partitions: Callable[[int], None]
) -> None:
    """The drain: 300 messages routed with 2 state partitions; the router stops; 200 more arrive; a
    new checkpoint with 8 starts where the old one ended: each message is routed once."""
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [(f"a{n}", message(f"a{n}", "OrderParts")) for n in range(300)])
    partitions(2)
    old = job(spark, kafka_bootstrap, prefix, tmp_path / "old", shuffle_partitions=2)
    old.replay(timeout_s=300)
    old.close()
    produce(kafka_bootstrap, outbound, [(f"b{n}", message(f"b{n}", "OrderParts")) for n in range(200)])

    partitions(8)
    new = job(
        spark,
        kafka_bootstrap,
        prefix,
        tmp_path / "new",
        shuffle_partitions=8,
        start_after=str(tmp_path / "old"),
    )
    new.replay(timeout_s=300)
    new.close()
    assert (old.routed, new.routed) == (300, 200)
    sent = message_ids(kafka_bootstrap, topics.inbound_topic("i2", prefix))
    assert len(sent) == 500 and set(sent.values()) == {1}, Counter(sent.values())
    assert state_partitions(tmp_path / "new" / "query") == 8
    assert len([p for p in (tmp_path / "new" / "query" / "state" / "0").iterdir() if p.name.isdigit()]) == 8


def test_a_checkpoint_that_still_holds_delayed_messages_is_not_started_after(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path, partitions: Callable[[int], None]
) -> None:
    partitions(2)
    with_every_kind_of_state(spark, kafka_bootstrap, prefix, tmp_path / "old")
    partitions(8)
    new = job(
        spark,
        kafka_bootstrap,
        prefix,
        tmp_path / "new",
        shuffle_partitions=8,
        start_after=str(tmp_path / "old"),
    )
    with pytest.raises(ConfigError, match=r"still holds 7 delayed message\(s\) in its state"):
        new.replay(timeout_s=300)
    new.close()
    assert not logged_batches(tmp_path / "new" / "query" / "offsets")


def test_a_checkpoint_whose_tick_was_spark_s_rate_source_resumes(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path, partitions: Callable[[int], None]
) -> None:
    """The tick was Spark's rate source before `router.spark.TickSource`: its offsets were the
    seconds since it started, its start time kept in the checkpoint. Such a checkpoint resumes."""
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [(f"c{n}", message(f"c{n}", "Audit")) for n in range(3)])
    partitions(2)
    replayed(spark, kafka_bootstrap, prefix, tmp_path / "ckpt")
    query = tmp_path / "ckpt" / "query"
    for batch in logged_batches(query / "offsets"):
        path = query / "offsets" / str(batch)
        lines = path.read_text(encoding="utf-8").split("\n")
        ticks = [i for i, line in enumerate(lines) if i >= 2 and line.isdigit()]
        assert len(ticks) == 1, lines  # the tick's offset: a number, as the rate source's was
        lines[ticks[0]] = str(batch + 1)  # seconds since the rate source started
        path.write_text("\n".join(lines), encoding="utf-8")
        (query / "offsets" / f".{batch}.crc").unlink()
    started = query / "sources" / "1" / "0"
    started.parent.mkdir(parents=True, exist_ok=True)
    started.write_text("v1\n1796014346500", encoding="utf-8")  # the rate source's start, as it kept it

    produce(kafka_bootstrap, outbound, [("c9", message("c9", "Audit"))])
    assert replayed(spark, kafka_bootstrap, prefix, tmp_path / "ckpt").routed == 1
    delivered = message_ids(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert delivered == Counter({"c0:0": 1, "c1:0": 1, "c2:0": 1, "c9:0": 1})
