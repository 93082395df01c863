"""The streaming job on the real broker: Spark's Kafka source and sink, decisions in headers.

Each test has its own topic prefix, so its routes, catalogs and message topics are its own.
"""

from __future__ import annotations

import gc
import itertools
import json
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession

from streaming import topics
from streaming.config import load_settings
from streaming.contract import MESSAGE_HEADERS
from streaming.directory import Answer, DirectoryService, parse_directory
from streaming.instants import parse_instant
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.kafka.consuming import header_pairs
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, Database, Instance, Route, normalize_address
from streaming.spark.checkpoint import logged_batches, read_logged_batch
from streaming.spark.job import RouterJob
from streaming.spark.progress import BatchReport
from streaming.spark.state import held_state, held_timers
from streaming.tables.reader import read_routes
from streaming.tables.topic_io import publish_catalogs, put_route
from tests.running import Running
from tests.topic_records import records_now

pytestmark = pytest.mark.integration

ODD = "//Audit/ünï code.v2_x"  # a service name that every part of the topic scheme escapes
AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService", "Audit", ODD))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
# retry_s: longer than a replay, so that a replay ends before what it delayed is due (D2 counts
# from the decision, and on a slow machine a replay's first micro-batches take several seconds).
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=15.0)
I2 = Instance(
    "i2",
    "TCP://i2:4022",
    (
        Database("Parts", "0b0b0b0b-0000-0000-0000-000000000002", True, ("OrderParts",)),
        Database("msdb", "0e0e0e0e-0000-0000-0000-000000000001", True, ()),
    ),
    retry_s=I1.retry_s,  # one query may route both (one retry_s per query)
)


def read_all(bootstrap: str, topic: str) -> list[tuple[dict[str, str], bytes | None]]:
    """Every record of `topic` now: (headers as text, value)."""
    return [
        ({k: (v or b"").decode() for k, v in header_pairs(record)}, record.value())
        for record in records_now(bootstrap, topic)
    ]


def message(
    conversation: str, service: str, n: int = 0, origin: str | None = "AW", *, initiator: bool = True
) -> bytes:
    return encode_message(
        new_message_record(
            message_id=f"{conversation}:{n}",
            conversation_id=conversation,
            sequence_number=n,
            to_service=service,
            from_service="InitiatorService",
            is_initiator=initiator,
            origin_database=origin,
            enqueued_at=datetime.now(timezone.utc),
            body=b"<x/>",
        )
    )


def produce(bootstrap: str, topic: str, values: list[tuple[str, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in values:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    name = f"t{uuid.uuid4().hex[:10]}"
    publish_catalogs(kafka_bootstrap, [I1, I2], topics.catalogs_topic(name))
    for route in (
        Route("AW", "AutoCreatedLocal", "LOCAL"),
        Route("AW", "OrderPartsRoute", "TCP://i2:4022", service="OrderParts"),
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
        Route("AW", "FarRoute", "TCP://Far.Example:4022/", service="FarService"),
    ):
        put_route(kafka_bootstrap, "i1", route, topics.routes_topic(name))
    return name


def router_job(
    spark: SparkSession,
    kafka_bootstrap: str,
    prefix: str,
    tmp_path: Path,
    instance: str = "i1",
    **overrides: object,
) -> RouterJob:
    """A job routing `instance` in `prefix`, its checkpoint under `tmp_path` by the instance's name;
    `overrides` are further settings (`load_settings`)."""
    settings = load_settings(
        None,
        instance=instance,
        bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(tmp_path / instance),
        **overrides,
    )
    return RouterJob(spark, settings)


def epoch_ms(text: str) -> int:
    """A decision header's instant (`decided_at`, `due_at`) in epoch ms."""
    instant = parse_instant(text)
    assert instant is not None, text
    return round(instant.timestamp() * 1000)


def batch_times(query: Path, after_batch: int = -1) -> list[tuple[int, float]]:
    """When each batch the query committed after `after_batch` began and ended, in epoch ms, in order.

    A batch began at its offset log's time, which the state processor compares its timers with,
    and ended at its commit's.
    """
    commits = query / "commits"
    return sorted(
        (read_logged_batch(query, b).timestamp_ms, (commits / str(b)).stat().st_mtime * 1000)
        for b in logged_batches(commits)
        if b > after_batch
    )


def retry_wait(batches: list[tuple[int, float]], due_at: str, retried_at: str) -> int:
    """How long after it could the batch that retried a message due at `due_at` began, in ms (D2).

    `batches`: the query's (`batch_times`). The retry must come in its first batch from its timer,
    the due time less the processor's 100 ms margin. That batch could begin at the timer, or when
    the batch running then ended; the query looks at the next round of its interval, or at once
    after a batch that ran past one. A tick that missed the timer adds its pace's wait.
    """
    due, retried = epoch_ms(due_at), epoch_ms(retried_at)
    timer = due - 100
    began = [b for b, _ in batches]
    retry = max(t for t in began if t <= retried)
    assert retry == min(t for t in began if t >= timer), (due, retried, began)
    ended = max((e for b, e in batches if b < timer), default=0)
    return round(retry - max(timer, ended))


def replay(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path, instance: str = "i1"
) -> RouterJob:
    job = router_job(spark, kafka_bootstrap, prefix, tmp_path, instance)
    job.replay(timeout_s=300)
    return job


def test_routes_each_message_to_its_destination_with_decision_headers(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    # One delay, never released: retry_s far beyond the replay, however slow the machine is.
    publish_catalogs(kafka_bootstrap, [replace(I1, retry_s=600.0)], topics.catalogs_topic(prefix))
    produce(
        kafka_bootstrap,
        topics.outbound_topic("i1", prefix),
        [
            ("c1", message("c1", "OrderParts")),
            ("c2", message("c2", "Audit")),
            ("c3", message("c3", "Nowhere")),
            ("c5", message("c5", ODD)),
            ("c6", message("c6", "FarService")),
        ],
    )
    produce(
        kafka_bootstrap, topics.inbound_topic("i1", prefix), [("c4", message("c4", "Nowhere", origin="AW"))]
    )
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert job.routed == 6

    sent = read_all(kafka_bootstrap, topics.inbound_topic("i2", prefix))
    assert [h["outcome"] for h, _ in sent] == ["send"]
    assert sent[0][0]["route"] == "OrderPartsRoute" and sent[0][0]["match_step"] == "M2"
    assert sent[0][0]["choice_step"] == "C3" and sent[0][0]["snapshot_version"].startswith("routes@")
    assert decode_message(sent[0][1])["conversation_id"] == "c1"

    delivered = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert [(h["outcome"], h["database"], h["route"]) for h, _ in delivered] == [
        ("deliver", "AW", "AutoCreatedLocal")
    ]
    # The headers, in MESSAGE_HEADERS' order; those without a value (no reason) are left out.
    assert list(delivered[0][0]) == [
        "outcome", "route", "match_step", "choice_step", "database", "scope",
        "snapshot_version", "decided_at", "router_instance",
    ]  # fmt: skip
    assert [k for k in MESSAGE_HEADERS if k in delivered[0][0]] == list(delivered[0][0])

    # Topic names come from streaming.topics: escaped service names, normalized addresses.
    odd = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", ODD, prefix))
    assert [decode_message(v)["to_service"] for _, v in odd] == [ODD]
    far = read_all(kafka_bootstrap, topics.network_topic("tcp://far.example:4022", prefix))
    assert [(h["outcome"], h["address"]) for h, _ in far] == [("send", "TCP://Far.Example:4022/")]

    delayed = read_all(kafka_bootstrap, topics.delayed_topic("i1", prefix))
    assert [(h["outcome"], h["reason"]) for h, _ in delayed] == [("delayed", "service_not_found")]
    assert [k for k in MESSAGE_HEADERS if k in delayed[0][0]] == list(delayed[0][0])
    assert "due_at" in delayed[0][0] and delayed[0][0]["router_instance"] == "i1"
    decided_at = datetime.fromisoformat(delayed[0][0]["decided_at"].replace("Z", "+00:00"))
    due_at = datetime.fromisoformat(delayed[0][0]["due_at"].replace("Z", "+00:00"))
    assert (due_at - decided_at).total_seconds() == 600.0  # the catalog's retry_s

    # S3: an inbound record is remote whatever origin it claims; msdb's ACL cannot locate it (D5).
    dropped = read_all(kafka_bootstrap, topics.dropped_topic("i1", prefix))
    assert [(h["outcome"], h["reason"], h["scope"]) for h, _ in dropped] == [
        ("dropped", "service_not_found", "msdb")
    ]
    # After the decision's headers, the input it was read from (`router redrive` sends it back there).
    assert list(dropped[0][0])[-1] == "source_topic"
    assert dropped[0][0]["source_topic"] == topics.inbound_topic("i1", prefix)


def test_an_aborted_transaction_in_the_input_is_not_routed(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """The query reads committed records only (`READ_COMMITTED`): what `router redrive` aborts, or
    leaves unfinished when it is killed, is never routed."""
    outbound = topics.outbound_topic("i1", prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"t-{uuid.uuid4()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(outbound, key=b"aborted", value=message("aborted", "Audit"))
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(outbound, key=b"committed", value=message("committed", "Audit"))
    producer.commit_transaction(30)
    produce(kafka_bootstrap, outbound, [("plain", message("plain", "Audit"))])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    delivered = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert sorted(decode_message(v)["conversation_id"] for _, v in delivered) == ["committed", "plain"]
    assert job.routed == 2


def test_malformed_records_are_dead_lettered_and_the_query_goes_on(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    produce(
        kafka_bootstrap,
        topics.outbound_topic("i1", prefix),
        [
            ("bad1", b"\x00\x01not avro at all"),
            ("c1", message("c1", "Audit")),
            ("bad2", message("bad2", "Audit", origin="NoSuchDatabase")),
            ("c2", message("c2", "Audit", n=0)),
            ("long", message("long", "S" * 257)),  # longer than a service name can be
            ("junk", message("junk", "Audit") + b"junk"),  # one whole message, then more bytes
            # A message_id declared 2,000,000,000 bytes long (zigzag varint): refused by the
            # decoder's length limit, not allocated (which would end the JVM).
            ("huge", bytes([0x80, 0xD0, 0xAC, 0xF3, 0x0E]) + b"x"),
        ],
    )
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert (job.routed, job.totals.dead_lettered) == (2, 5)
    dead = read_all(kafka_bootstrap, topics.deadletter_topic("i1", prefix))
    errors = sorted(h["error"] for h, _ in dead)
    assert errors[0].startswith("origin_database is not a database of this instance: NoSuchDatabase")
    assert errors[1].startswith("to_service is longer than 256 characters")
    assert errors[2:4] == ["value does not decode as Avro router.v1.Message"] * 2
    assert errors[4].startswith("value holds 4 bytes after its Avro router.v1.Message"), errors[4]
    assert all(h["source_topic"] == topics.outbound_topic("i1", prefix) for h, _ in dead)
    assert dead[0][1] is not None  # the original bytes are kept for redrive
    delivered = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert sorted(decode_message(v)["conversation_id"] for _, v in delivered) == ["c1", "c2"]


def test_a_restart_from_the_checkpoint_routes_only_new_records(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [("c1", message("c1", "Audit"))])
    assert replay(spark, kafka_bootstrap, prefix, tmp_path).routed == 1
    produce(kafka_bootstrap, outbound, [("c2", message("c2", "Audit")), ("c3", message("c3", "Audit"))])
    assert replay(spark, kafka_bootstrap, prefix, tmp_path).routed == 2
    delivered = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert sorted(decode_message(v)["conversation_id"] for _, v in delivered) == ["c1", "c2", "c3"]


def test_a_batch_refused_at_the_stop_is_planned_again_without_a_repair_warning(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch that begins once a stop was asked for refuses to run; Spark has logged its offsets
    by then. The stop removes them, so the next start has no uncommitted batch to repair (and no
    warning meant for a crash to print), and it routes the refused batch's records."""
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [("c1", message("c1", "Audit"))])
    job = router_job(spark, kafka_bootstrap, prefix, tmp_path)
    query = job.start(bounded=True)
    deadline = time.monotonic() + 240
    while job.routed < 1 and query.isActive and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.routed == 1
    job._stopping.set()  # what a stop does first: from now on a batch refuses to run
    produce(kafka_bootstrap, outbound, [("c2", message("c2", "Audit"))])
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not query.isActive  # the next batch was refused, which ended the query
    assert job._stop(query, grace_s=10) is False
    planned = sorted(int(f.name) for f in (job.checkpoint / "offsets").glob("[0-9]*"))
    committed = sorted(int(f.name) for f in (job.checkpoint / "commits").glob("[0-9]*"))
    assert planned == committed, (planned, committed)
    job.close()

    with caplog.at_level("WARNING", logger="streaming.job"):
        again = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert again.routed == 1
    assert not [r.message for r in caplog.records if "not committed" in r.getMessage()]
    delivered = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert sorted(decode_message(v)["conversation_id"] for _, v in delivered) == ["c1", "c2"]


def test_the_batch_plan_is_ready_before_the_first_batch_and_a_failed_start_leaves_no_wait(
    spark: SparkSession,
    kafka_bootstrap: str,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`start` reads the route snapshot while it builds the input stream, then plans the batches
    over an empty one: the first batch finds the plan ready. When the input stream cannot be
    built, the start fails with that error and the preparation ends with it (the batch lock is
    free at once, so `close` does not wait)."""
    import streaming.spark.job as job_module

    produce(kafka_bootstrap, topics.outbound_topic("i1", prefix), [("c1", message("c1", "Audit"))])
    job = router_job(spark, kafka_bootstrap, prefix, tmp_path)
    planned: list[object] = []
    route_batch = job._route_batch

    def first_batch(batch: DataFrame, batch_id: int) -> None:
        planned.append(job._plan)  # as the batch lock lets the first batch in
        route_batch(batch, batch_id)

    monkeypatch.setattr(job, "_route_batch", first_batch)
    job.replay(timeout_s=300)
    assert job.routed == 1
    assert planned and planned[0] is not None  # prepared ahead, not by the batch itself
    assert planned[0] is job._plan  # and that plan routed every batch
    job.close()

    def no_stream(*args: object, **kwargs: object) -> DataFrame:
        raise RuntimeError("the input stream cannot be built")

    monkeypatch.setattr(job_module, "input_stream", no_stream)
    failed = router_job(spark, kafka_bootstrap, prefix, tmp_path / "failed")
    with pytest.raises(RuntimeError, match="cannot be built"):
        failed.start(bounded=True)
    assert failed._batch_lock.acquire(timeout=30)  # the preparation let go of it
    failed._batch_lock.release()
    failed.close()


def test_every_batch_is_reported_once_in_order_with_its_lag(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """A run's batches are handed on one report each, in batch order, with the lag Spark's progress
    report gives (`RouterJob._report` reads the last progress report, and the recent ones only
    for a batch it missed)."""
    produce(
        kafka_bootstrap,
        topics.outbound_topic("i1", prefix),
        [(f"c{i}", message(f"c{i}", "Audit")) for i in range(40)],
    )
    job = router_job(spark, kafka_bootstrap, prefix, tmp_path, max_offsets_per_trigger=4)
    reports: list[BatchReport] = []
    job.replay(timeout_s=300, on_batch=reports.append)
    job.close()
    assert job.routed == 40
    ids = [r.batch_id for r in reports]
    committed = sorted(int(f.name) for f in (job.checkpoint / "commits").glob("[0-9]*"))
    assert len(committed) >= 10  # at most 4 records a batch
    assert ids == committed
    assert all(r.lag is not None for r in reports)
    assert sum(r.metrics.records for r in reports) == 40


def test_a_finished_job_is_freed_once_its_caller_lets_go_of_it(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    # py4j holds the query's callback (the job's `process_batch`) until the JVM lets go of the
    # query: a job that held its query would never be freed, with its snapshots and JVM objects.
    produce(kafka_bootstrap, topics.outbound_topic("i1", prefix), [("c1", message("c1", "Audit"))])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert job.routed == 1
    job.close()
    gone = weakref.ref(job)
    del job
    assert spark._jvm is not None
    deadline = time.monotonic() + 30
    while gone() is not None and time.monotonic() < deadline:
        gc.collect()
        spark._jvm.java.lang.System.gc()  # the JVM's proxy of the callback is released by its collector
        time.sleep(0.2)
    assert gone() is None


def test_a_route_created_while_messages_wait_releases_them_in_order(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """D1-D3: the conversation waits on the delayed topic; after a route appears it leaves in order."""
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [("c9", message("c9", "Remote", n)) for n in range(3)])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    delayed = read_all(kafka_bootstrap, topics.delayed_topic("i1", prefix))
    assert [h["outcome"] for h, _ in delayed] == ["delayed"] * 3
    # The first could not be located (M5, AutoCreatedLocal); the others wait behind it (D1).
    assert [h.get("reason") for h, _ in delayed] == ["service_not_found", "no_route", "no_route"]
    # The replay reads back what it delayed: the conversation waits in the state store (D2).
    waiting = job.waiting()
    assert len(waiting) == 3

    # A route appears; once the conversation is due (retry_s) it is re-routed against the
    # routes of that moment, ahead of its newer message, and everything leaves in order.
    put_route(
        kafka_bootstrap,
        "i1",
        Route("AW", "RemoteRoute", "TCP://i2:4022", service="Remote"),
        topics.routes_topic(prefix),
    )
    # Wait for the due time the state store holds, not a guess: retry_s after each delayed record
    # was written (its `due_at` header counts from the decision, up to a batch earlier).
    due_at = max(waiting) / 1000 + I1.retry_s
    assert (
        due_at
        >= max(datetime.fromisoformat(h["due_at"].replace("Z", "+00:00")) for h, _ in delayed).timestamp()
    )
    while time.time() <= due_at:
        time.sleep(0.1)
    produce(kafka_bootstrap, outbound, [("c9", message("c9", "Remote", 3))])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert job.waiting() == []
    sent = read_all(kafka_bootstrap, topics.inbound_topic("i2", prefix))
    assert [decode_message(v)["message_id"] for _, v in sent] == [f"c9:{n}" for n in range(4)]
    assert {h["route"] for h, _ in sent} == {"RemoteRoute"}
    assert [decode_message(v)["attempt"] for _, v in sent] == [1, 1, 1, 0]


def test_replay_drains_delayed_messages_as_they_fall_due(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """D2: the replay's drain re-routes a delayed conversation when due, against the routes then."""
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [("c7", message("c7", "Later", n)) for n in range(2)])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert len(job.waiting()) == 2
    put_route(
        kafka_bootstrap,
        "i1",
        Route("AW", "LaterRoute", "TCP://i2:4022", service="Later"),
        topics.routes_topic(prefix),
    )

    from streaming.spark.job import run_until_drained

    assert run_until_drained(job, max_wait_s=60, progress=lambda _: None) == 0
    assert job.waiting() == []
    sent = read_all(kafka_bootstrap, topics.inbound_topic("i2", prefix))
    assert [decode_message(v)["message_id"] for _, v in sent] == ["c7:0", "c7:1"]


def test_a_conversation_keeps_its_route_across_batches_and_a_restart(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """K2: an unpinned conversation keeps the route of its first message when a route is added.

    c1 and c4 take the two routes in turn (C5); a third appears; the job is started again from its
    checkpoint, so the kept choices come back from Spark's state store (and the choices the first
    run wrote from the choices topic). c6 comes first and takes the new set's first turn: picked
    anew, c1 and c4 would take the next two, and both would move.
    """
    outbound = topics.outbound_topic("i1", prefix)
    network = equal_routes(kafka_bootstrap, prefix, "Balanced", "AB")
    produce(kafka_bootstrap, outbound, [(c, message(c, "Balanced", 0)) for c in ("c1", "c4")])
    assert replay(spark, kafka_bootstrap, prefix, tmp_path).routed == 2
    chosen = read_all(kafka_bootstrap, topics.choices_topic("i1", prefix))
    assert sorted(json.loads(v)["conversation_id"] for _, v in chosen if v is not None) == ["c1", "c4"]
    assert {h["change"] for h, _ in chosen} == {"first"}

    network += equal_routes(kafka_bootstrap, prefix, "Balanced", "C")
    produce(kafka_bootstrap, outbound, [("c6", message("c6", "Balanced", 0))])
    produce(kafka_bootstrap, outbound, [(c, message(c, "Balanced", 1)) for c in ("c1", "c4")])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert job.routed == 3
    # c6 chose; c1 and c4 kept theirs, so they wrote nothing new.
    chosen = read_all(kafka_bootstrap, topics.choices_topic("i1", prefix))
    assert sorted(json.loads(v)["conversation_id"] for _, v in chosen if v is not None) == ["c1", "c4", "c6"]
    assert (tmp_path / "i1" / "query" / "state").is_dir()

    went = routes_taken(kafka_bootstrap, network)
    assert (went["c1:0"], went["c4:0"], went["c6:0"]) == ("BalancedA", "BalancedB", "BalancedA")
    assert went["c1:1"] == went["c1:0"]
    assert went["c4:1"] == went["c4:0"]


def test_a_choice_made_with_one_option_is_kept_by_the_state_processor_itself(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """K2: with no set of equal options (the batch is not decided in one pass), the state processor
    keeps a conversation's choice in its state as the batch is decided: nothing goes round the
    choices topic, and the choice holds across a restart once a second option appears.

    c1 and c4 find one route; then an equal one appears and the job starts again from its
    checkpoint. c6 comes first and takes the new set's first turn (C5); picked anew, c1 would take
    the second, so c1 keeps the route only if its choice was kept.
    """
    outbound = topics.outbound_topic("i1", prefix)
    network = equal_routes(kafka_bootstrap, prefix, "Lone", "A")
    produce(kafka_bootstrap, outbound, [(c, message(c, "Lone", 0)) for c in ("c1", "c4")])
    assert replay(spark, kafka_bootstrap, prefix, tmp_path).routed == 2
    assert read_all(kafka_bootstrap, topics.choices_topic("i1", prefix)) == []

    network += equal_routes(kafka_bootstrap, prefix, "Lone", "B")
    produce(kafka_bootstrap, outbound, [("c6", message("c6", "Lone", 0))])
    produce(kafka_bootstrap, outbound, [(c, message(c, "Lone", 1)) for c in ("c1", "c4")])
    assert replay(spark, kafka_bootstrap, prefix, tmp_path).routed == 3
    # Equal options now: the batch was decided in one pass, and c6's choice went round the topic.
    chosen = read_all(kafka_bootstrap, topics.choices_topic("i1", prefix))
    assert [json.loads(v)["conversation_id"] for _, v in chosen if v is not None] == ["c6"]

    went = routes_taken(kafka_bootstrap, network)
    assert (went["c1:0"], went["c4:0"], went["c6:0"]) == ("LoneA", "LoneA", "LoneA")
    assert (went["c1:1"], went["c4:1"]) == ("LoneA", "LoneA")


def test_records_on_the_choices_topic_that_are_not_choices_are_ignored(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """K2: only a choice record with an address keeps a route; any other value on the topic is read
    past, and the conversations it names choose as if it were not there (C5: in turn)."""
    choices = topics.choices_topic("i1", prefix)
    ensure_topics(kafka_bootstrap, [choices], compacted=True)
    kept = {"instance": "i1", "origin": "AW", "service": "Balanced", "bid": "", "route_service": ""}
    produce(
        kafka_bootstrap,
        choices,
        [
            ("a", b"not json"),
            ("b", b"{"),
            ("c", json.dumps({**kept, "conversation_id": "c1"}).encode()),  # no address
            ("d", json.dumps({**kept, "conversation_id": "c4", "address": None}).encode()),
            ("e", json.dumps({**kept, "conversation_id": 7, "address": ["TCP://b:4022"]}).encode()),
        ],
    )
    outbound = topics.outbound_topic("i1", prefix)
    network = equal_routes(kafka_bootstrap, prefix, "Balanced", "AB")
    produce(kafka_bootstrap, outbound, [(c, message(c, "Balanced", 0)) for c in ("c1", "c4")])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert job.routed == 2
    assert job.totals.dead_lettered == 0
    went = routes_taken(kafka_bootstrap, network)
    assert (went["c1:0"], went["c4:0"]) == ("BalancedA", "BalancedB")


def equal_routes(bootstrap: str, prefix: str, service: str, letters: str) -> list[str]:
    """Write a route to `service` for each letter X, named service + X, to TCP://x:4022, in the
    letters' order; return their network topics (created)."""
    network = []
    for letter in letters:
        address = f"TCP://{letter.lower()}:4022"
        put_route(
            bootstrap,
            "i1",
            Route("AW", service + letter, address, service=service),
            topics.routes_topic(prefix),
        )
        network.append(topics.network_topic(normalize_address(address), prefix))
    ensure_topics(bootstrap, network)
    return network


def routes_taken(bootstrap: str, network: list[str]) -> dict[str, str]:
    """The route each message sent to the `network` topics went by, by message id."""
    went: dict[str, str] = {}
    for topic in network:
        for headers, value in read_all(bootstrap, topic):
            went[decode_message(value)["message_id"]] = headers["route"]
    return went


def test_new_conversations_take_equal_routes_in_turn_and_a_restart_continues_the_turn(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """C5: k x n new conversations use each of n equal routes k times, across a restart.

    Three equal routes; two conversations in a first run, four more in a second run started from
    the checkpoint: the second run continues the rotation where the first left it (its counters are
    kept with the checkpoint), so each route is used exactly twice. The routes are written in
    another order than their identities': the turn follows the identities.
    """
    outbound = topics.outbound_topic("i1", prefix)
    network = equal_routes(kafka_bootstrap, prefix, "Spread", "CAB")
    produce(kafka_bootstrap, outbound, [(c, message(c, "Spread", 0)) for c in ("n1", "n2")])
    assert replay(spark, kafka_bootstrap, prefix, tmp_path).routed == 2
    assert list((tmp_path / "i1" / "query" / "rotation").glob("*.json"))
    produce(kafka_bootstrap, outbound, [(c, message(c, "Spread", 0)) for c in ("n3", "n4", "n5", "n6")])
    assert replay(spark, kafka_bootstrap, prefix, tmp_path).routed == 4

    went = routes_taken(kafka_bootstrap, network)
    # Batch order is partition by partition: which of n1 and n2 came first is the topic's to say.
    first_run = {went["n1:0"], went["n2:0"]}
    assert first_run == {"SpreadA", "SpreadB"}
    # Started again at its first route, the second run would use SpreadA three times.
    assert Counter(went[f"n{i}:0"] for i in range(1, 7)) == {"SpreadA": 2, "SpreadB": 2, "SpreadC": 2}


def test_a_missing_route_is_asked_for_once_until_a_route_for_it_appears(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """M4, B2-B7 through Kafka: one MissingRoute request per service, outstanding across restarts.

    The request is a message to the dynamic routing service, routed like any other (here to its
    queue in AW). Every replay is a restart, so what is outstanding comes from the state store.
    """
    aw = Database("AW", AW.broker_instance, True, (*AW.services, BROKER_CONFIGURATION_SERVICE))
    i1 = Instance("i1", I1.address, (aw, MSDB), retry_s=I1.retry_s)
    publish_catalogs(kafka_bootstrap, [i1, I2], topics.catalogs_topic(prefix))
    routes = topics.routes_topic(prefix)
    put_route(
        kafka_bootstrap, "i1", Route("AW", "Directory", "LOCAL", service=BROKER_CONFIGURATION_SERVICE), routes
    )
    outbound = topics.outbound_topic("i1", prefix)
    produce(kafka_bootstrap, outbound, [(c, message(c, "Remote")) for c in ("c1", "c2")])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    delayed = read_all(kafka_bootstrap, topics.delayed_topic("i1", prefix))
    # The first asks (M4); the second sees the request pending in the same batch (B4). A replay
    # slower than retry_s retries them, and a retry asks nothing either.
    asks = [h.get("requests") for h, _ in delayed]
    assert (delayed[0][0]["match_step"], asks[0]) == ("M4", "Remote")
    assert len(asks) >= 2 and all(a is None for a in asks[1:]), asks
    asked = read_all(kafka_bootstrap, topics.requests_topic("i1", prefix))
    [request] = [json.loads(v or b"") for _, v in asked]
    dialog = request.pop("request_id")  # the MissingRoute dialog, which the directory names to end it
    assert request == {"instance": "i1", "scope": "AW", "service": "Remote", "asked": True}
    assert len(read_all(kafka_bootstrap, outbound)) == 3  # c1, c2 and the MissingRoute request

    # A restart: the request is still outstanding (the requests topic), so c3 asks nothing (B4).
    produce(kafka_bootstrap, outbound, [("c3", message("c3", "Remote"))])
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert len(read_all(kafka_bootstrap, outbound)) == 4
    assert all(
        h.get("requests") is None
        for h, _ in read_all(kafka_bootstrap, topics.delayed_topic("i1", prefix))[1:]
    )
    notices = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", BROKER_CONFIGURATION_SERVICE, prefix))
    assert len(notices) == 1
    assert b"<SERVICE_NAME>Remote</SERVICE_NAME>" in decode_message(notices[0][1])["body"]
    assert decode_message(notices[0][1])["conversation_id"] == dialog

    # The directory answers with a route (B6): the request ends, the conversations leave (B7, D3).
    put_route(kafka_bootstrap, "i1", Route("AW", "RemoteRoute", "TCP://i2:4022", service="Remote"), routes)
    from streaming.spark.job import run_until_drained

    assert run_until_drained(job, max_wait_s=60, progress=lambda _: None) == 0
    sent = read_all(kafka_bootstrap, topics.inbound_topic("i2", prefix))
    assert sorted(decode_message(v)["conversation_id"] for _, v in sent) == ["c1", "c2", "c3"]
    ended = read_all(kafka_bootstrap, topics.requests_topic("i1", prefix))
    assert [json.loads(v or b"")["asked"] for _, v in ended] == [True, False]
    assert len(read_all(kafka_bootstrap, outbound)) == 4


def test_the_directory_answers_missing_routes_while_the_router_runs(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """B1-B9 with the dynamic routing service (`streaming.directory`) and the router both running.

    Remote is in the directory: the service creates its route and ends the request, and c1's three
    messages, delayed meanwhile (M4, D1), reach i2 in their order at their retry (B7, D2). Nowhere
    is not: the request ends with an error, c2 stays delayed, and its retries ask again (B7).
    """
    aw = Database("AW", AW.broker_instance, True, (*AW.services, BROKER_CONFIGURATION_SERVICE))
    i1 = Instance("i1", I1.address, (aw, MSDB), retry_s=2.0)
    publish_catalogs(kafka_bootstrap, [i1, I2], topics.catalogs_topic(prefix))
    routes = topics.routes_topic(prefix)
    put_route(
        kafka_bootstrap, "i1", Route("AW", "Directory", "LOCAL", service=BROKER_CONFIGURATION_SERVICE), routes
    )
    directory = parse_directory(
        'services:\n  - {service: Remote, address: "TCP://i2:4022"}\n', "directory.yaml"
    )
    answers: list[Answer] = []
    service = DirectoryService(kafka_bootstrap, i1, directory, prefix=prefix, on_answer=answers.append)
    job = router_job(spark, kafka_bootstrap, prefix, tmp_path)
    running = Running()
    running.start(service.serve)
    running.start(job.run)
    produce(
        kafka_bootstrap,
        topics.outbound_topic("i1", prefix),
        [("c1", message("c1", "Remote", n)) for n in range(3)] + [("c2", message("c2", "Nowhere"))],
    )
    inbound = topics.inbound_topic("i2", prefix)
    ensure_topics(kafka_bootstrap, [inbound])
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and not running.failures:
            refused = [a for a in answers if a.service == "Nowhere"]
            if len(read_all(kafka_bootstrap, inbound)) >= 3 and len(refused) >= 2:
                break
            time.sleep(1.0)
    finally:
        running.stop_all()
        job.close()
    running.check()
    sent = [decode_message(v)["message_id"] for _, v in read_all(kafka_bootstrap, inbound)]
    assert sent == ["c1:0", "c1:1", "c1:2"]
    created = [a for a in answers if a.service == "Remote"]
    assert created and all(a.route is not None and a.route.name == "directory:Remote" for a in created)
    assert "i1/AW/directory:Remote" in read_routes(kafka_bootstrap, routes).table
    refused = [a for a in answers if a.service == "Nowhere"]
    assert len(refused) >= 2 and all(a.route is None for a in refused)
    assert len({a.request_id for a in refused}) == len(refused)  # each retry asked anew (B7)
    delayed = [
        decode_message(v)["message_id"]
        for _, v in read_all(kafka_bootstrap, topics.delayed_topic("i1", prefix))
    ]
    assert delayed.count("c2:0") >= 2  # delayed, retried, delayed again
    assert {"c1:0", "c1:1", "c1:2"} <= set(delayed)


def test_a_destination_the_broker_refuses_costs_only_its_own_messages(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """A queue topic the broker will not create (its name collides with an existing topic's, `.`
    against `_`): its messages are dropped with `destination_unavailable` and the broker's error;
    the rest of the batch is routed, and the stream goes on."""
    refused = topics.queue_topic("i1", "AW", "Audit", prefix)
    ensure_topics(kafka_bootstrap, [refused.replace(".", "_")])
    produce(
        kafka_bootstrap,
        topics.outbound_topic("i1", prefix),
        [("c1", message("c1", "Audit")), ("c2", message("c2", "OrderParts")), ("c3", message("c3", "Audit"))],
    )
    job = replay(spark, kafka_bootstrap, prefix, tmp_path)
    assert (job.routed, job.totals.outcomes["send"], job.totals.outcomes["dropped"]) == (3, 1, 2)
    dropped = read_all(kafka_bootstrap, topics.dropped_topic("i1", prefix))
    assert sorted(decode_message(v)["conversation_id"] for _, v in dropped) == ["c1", "c3"]
    assert {(h["reason"], h["destination"]) for h, _ in dropped} == {("destination_unavailable", refused)}
    assert {h["source_topic"] for h, _ in dropped} == {topics.outbound_topic("i1", prefix)}
    assert all("collides" in h["error"] for h, _ in dropped), [h["error"] for h, _ in dropped]
    sent = read_all(kafka_bootstrap, topics.inbound_topic("i2", prefix))
    assert [decode_message(v)["conversation_id"] for _, v in sent] == ["c2"]


def test_each_instance_routes_what_arrives_by_its_own_msdb_table(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """Routing tables are per instance: i1's msdb LOCAL route (the fixture's) is not i2's (S3, M7)."""
    inbound = topics.inbound_topic("i2", prefix)
    produce(kafka_bootstrap, inbound, [("p1", message("p1", "OrderParts", origin=None))])
    replay(spark, kafka_bootstrap, prefix, tmp_path, instance="i2")
    # i2's msdb table is empty: what arrives from outside matches no route and is dropped (M7).
    dropped = read_all(kafka_bootstrap, topics.dropped_topic("i2", prefix))
    assert [(h["outcome"], h["match_step"], h["reason"], h["scope"]) for h, _ in dropped] == [
        ("dropped", "M7", "no_route", "msdb")
    ]
    queue = topics.queue_topic("i2", "Parts", "OrderParts", prefix)
    assert read_all(kafka_bootstrap, queue) == []

    put_route(kafka_bootstrap, "i2", Route("msdb", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(prefix))
    produce(kafka_bootstrap, inbound, [("p2", message("p2", "OrderParts", origin=None))])
    replay(spark, kafka_bootstrap, prefix, tmp_path, instance="i2")
    delivered = read_all(kafka_bootstrap, queue)
    assert [(h["outcome"], h["database"], decode_message(v)["conversation_id"]) for h, v in delivered] == [
        ("deliver", "Parts", "p2")
    ]
    # i1's tables did not change: a route is in one instance's tables only.
    routes = read_routes(kafka_bootstrap, topics.routes_topic(prefix))
    assert sorted(k for k in routes.table if "/msdb/" in k) == [
        "i1/msdb/AutoCreatedLocal",
        "i2/msdb/AutoCreatedLocal",
    ]


def test_each_side_of_a_conversation_keeps_its_own_order(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """D1 delays a conversation endpoint: both ends of c9 are in i1, and the target's reply does not
    wait behind the initiator's delayed message, in the batch or in the state store."""
    publish_catalogs(kafka_bootstrap, [replace(I1, retry_s=600.0)], topics.catalogs_topic(prefix))
    outbound = topics.outbound_topic("i1", prefix)
    produce(
        kafka_bootstrap,
        outbound,
        [
            ("c9", message("c9", "Nowhere", 0)),  # the initiator's: no database hosts Nowhere
            ("c9", message("c9", "Audit", 1)),  # the initiator's next: waits behind it (D1)
            ("c9", message("c9", "Audit", 2, initiator=False)),  # the target's reply: its own side
        ],
    )
    replay(spark, kafka_bootstrap, prefix, tmp_path)
    # A later batch: the state store holds the initiator's side as waiting, not the target's.
    produce(
        kafka_bootstrap,
        outbound,
        [("c9", message("c9", "Audit", 3)), ("c9", message("c9", "Audit", 4, initiator=False))],
    )
    replay(spark, kafka_bootstrap, prefix, tmp_path)

    delayed = read_all(kafka_bootstrap, topics.delayed_topic("i1", prefix))
    assert [decode_message(v)["message_id"] for _, v in delayed] == ["c9:0", "c9:1", "c9:3"]
    delivered = read_all(kafka_bootstrap, topics.queue_topic("i1", "AW", "Audit", prefix))
    assert [(h["outcome"], decode_message(v)["message_id"]) for h, v in delivered] == [
        ("deliver", "c9:2"),
        ("deliver", "c9:4"),
    ]


def test_one_query_routes_several_instances_each_by_its_own_tables(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """`instances: [i1, i2]`: one query carries i1's message to i2 and delivers it there, each decided
    by its own instance's tables (i1's AW routes, then i2's msdb), each with its own topics."""
    put_route(kafka_bootstrap, "i2", Route("msdb", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(prefix))
    outbound = topics.outbound_topic("i1", prefix)
    produce(
        kafka_bootstrap,
        outbound,
        [("m1", message("m1", "OrderParts")), ("m2", message("m2", "Nowhere", origin="AW"))],
    )
    produce(
        kafka_bootstrap,
        topics.outbound_topic("i2", prefix),
        [("m3", message("m3", "x", origin="NotPartsDb"))],
    )
    settings = load_settings(
        None,
        instances=["i1", "i2"],
        bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(tmp_path / "both"),
    )
    assert settings.instances == ("i1", "i2")
    job = RouterJob(spark, settings)
    job.replay(timeout_s=300)  # reads i2's inbound topic up to its end at the start: m1 is not there yet
    job.replay(timeout_s=300)  # now it is
    job.close()

    sent = read_all(kafka_bootstrap, topics.inbound_topic("i2", prefix))
    assert [(h["outcome"], h["router_instance"], h["scope"]) for h, _ in sent] == [("send", "i1", "AW")]
    delivered = read_all(kafka_bootstrap, topics.queue_topic("i2", "Parts", "OrderParts", prefix))
    assert [(h["outcome"], h["router_instance"], h["scope"], h["database"]) for h, _ in delivered] == [
        ("deliver", "i2", "msdb", "Parts")
    ]
    # i1's message for a service nowhere is i1's delayed message (delayed again if it fell due
    # between the two runs, D2); i2's malformed one is i2's dead letter.
    delayed = read_all(kafka_bootstrap, topics.delayed_topic("i1", prefix))
    assert {decode_message(v)["message_id"] for _, v in delayed} == {"m2:0"}
    assert read_all(kafka_bootstrap, topics.delayed_topic("i2", prefix)) == []
    dead = read_all(kafka_bootstrap, topics.deadletter_topic("i2", prefix))
    assert [h["error"] for h, _ in dead] == ["origin_database is not a database of this instance: NotPartsDb"]
    assert read_all(kafka_bootstrap, topics.deadletter_topic("i1", prefix)) == []


def test_a_forwarder_holds_at_most_its_forward_size_in_flight(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """F5: what one micro-batch forwards is in flight together and stays within forward_size_mb (1 MB
    here): of four 300,000-byte messages, those that would push it over are discarded with
    forward_buffer_full; the next batch has the whole budget again."""
    forwarder = Instance(
        "f1",
        "TCP://f1:4022",
        (Database("msdb", "0f0f0f0f-0000-0000-0000-000000000001", True, ()),),
        forwarding=True,
        forward_size_mb=1,
    )
    publish_catalogs(kafka_bootstrap, [I1, I2, forwarder], topics.catalogs_topic(prefix))
    onward = Route("msdb", "Onward", "TCP://next:4022", service="FarService")
    put_route(kafka_bootstrap, "f1", onward, topics.routes_topic(prefix))
    inbound = topics.inbound_topic("f1", prefix)

    def big(conversation: str, n: int) -> bytes:
        record = new_message_record(
            message_id=f"{conversation}:{n}",
            conversation_id=conversation,
            sequence_number=n,
            to_service="FarService",
            from_service="InitiatorService",
            origin_database=None,
            enqueued_at=datetime.now(timezone.utc),
            body=b"x" * 300_000,
        )
        return encode_message(record)

    produce(kafka_bootstrap, inbound, [(f"b{n}", big(f"b{n}", n)) for n in range(4)])
    replay(spark, kafka_bootstrap, prefix, tmp_path, instance="f1")
    network = topics.network_topic(normalize_address("TCP://next:4022"), prefix)
    forwarded = read_all(kafka_bootstrap, network)
    dropped = read_all(kafka_bootstrap, topics.dropped_topic("f1", prefix))
    assert {h["outcome"] for h, _ in forwarded} == {"forward"}
    assert 1 <= len(forwarded) <= 3 and len(forwarded) + len(dropped) == 4
    assert sum(len(decode_message(v)["body"]) for _, v in forwarded) <= 1_048_576
    assert [(h["outcome"], h["reason"], h["route"]) for h, _ in dropped] == [
        ("discarded", "forward_buffer_full", "Onward")
    ] * len(dropped)

    produce(kafka_bootstrap, inbound, [("b9", big("b9", 9))])
    replay(spark, kafka_bootstrap, prefix, tmp_path, instance="f1")
    again = read_all(kafka_bootstrap, network)
    assert [decode_message(v)["message_id"] for _, v in again[len(forwarded) :]] == ["b9:9"]


def test_a_forwarder_discards_a_message_whose_lifetime_has_run_out(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """F3 through the stream: a message's lifetime is read at the batch's time, from when it expires
    or, without that, from its time to live; one whose lifetime has run out is discarded with
    lifetime_expired, one with time left or no lifetime is forwarded with one hop less."""
    forwarder = Instance(
        "f1",
        "TCP://f1:4022",
        (Database("msdb", "0f0f0f0f-0000-0000-0000-000000000001", True, ()),),
        forwarding=True,
    )
    publish_catalogs(kafka_bootstrap, [I1, I2, forwarder], topics.catalogs_topic(prefix))
    put_route(kafka_bootstrap, "f1", Route("msdb", "Onward", "TCP://next:4022"), topics.routes_topic(prefix))
    now = datetime.now(timezone.utc)

    def far(conversation: str, enqueued: datetime, ttl_ms: int | None, expires: bool = True) -> bytes:
        record = new_message_record(
            message_id=conversation,
            conversation_id=conversation,
            to_service="FarService",
            from_service="InitiatorService",
            enqueued_at=enqueued,
            time_to_live_ms=ttl_ms,
        )
        if not expires:
            record["expires_at"] = None  # only its time to live is known
        return encode_message(record)

    produce(
        kafka_bootstrap,
        topics.inbound_topic("f1", prefix),
        [
            ("expired", far("expired", now - timedelta(minutes=2), 60_000)),
            ("live", far("live", now, 3_600_000)),
            ("no-time-left", far("no-time-left", now, 0, expires=False)),
            ("time-left", far("time-left", now, 30_000, expires=False)),
            ("no-lifetime", far("no-lifetime", now, None)),
        ],
    )
    replay(spark, kafka_bootstrap, prefix, tmp_path, instance="f1")
    network = topics.network_topic(normalize_address("TCP://next:4022"), prefix)
    forwarded = {
        decode_message(v)["message_id"]: (h["outcome"], decode_message(v)["hops_remaining"])
        for h, v in read_all(kafka_bootstrap, network)
    }
    assert forwarded == {
        "live": ("forward", 15),
        "time-left": ("forward", 15),
        "no-lifetime": ("forward", 15),
    }
    dropped = {
        decode_message(v)["message_id"]: (h["outcome"], h["reason"])
        for h, v in read_all(kafka_bootstrap, topics.dropped_topic("f1", prefix))
    }
    assert dropped == {
        "expired": ("discarded", "lifetime_expired"),
        "no-time-left": ("discarded", "lifetime_expired"),
    }


@pytest.mark.timing
def test_a_running_router_ticks_every_second_while_a_message_waits_and_slows_once_none_can(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """D2 with the tick's pace (`streaming.spark.tick`): while a conversation waits, its retries
    come every retry_s; once it has left and retry_s and a margin have passed, the idle router
    runs a micro-batch only every idle pace (here a third of health_stale_s, 3 s), not every second.
    """
    i1 = replace(I1, retry_s=2.0)
    publish_catalogs(kafka_bootstrap, [i1, I2], topics.catalogs_topic(prefix))
    job = router_job(spark, kafka_bootstrap, prefix, tmp_path, trigger_seconds=0.5, health_stale_s=9.0)
    reports: list[tuple[float, BatchReport]] = []
    running = Running()
    running.start(lambda stop: job.run(stop, on_batch=lambda r: reports.append((time.monotonic(), r))))
    delayed_topic, inbound = topics.delayed_topic("i1", prefix), topics.inbound_topic("i2", prefix)
    ensure_topics(kafka_bootstrap, [inbound])

    def wait_for(what: str, done: Callable[[], bool], within_s: float) -> float:
        deadline = time.monotonic() + within_s
        while not done():
            assert not running.failures and time.monotonic() < deadline, f"{what}: not within {within_s} s"
            time.sleep(0.2)
        return time.monotonic()

    def ids(topic: str) -> list[str]:
        return [decode_message(v)["message_id"] for _, v in read_all(kafka_bootstrap, topic)]

    try:
        produce(kafka_bootstrap, topics.outbound_topic("i1", prefix), [("c1", message("c1", "Later"))])
        # No route: delayed, and retried (delayed again) every 2 s while it waits.
        wait_for("c1:0 delayed three times", lambda: ids(delayed_topic).count("c1:0") >= 3, 120)
        put_route(
            kafka_bootstrap,
            "i1",
            Route("AW", "LaterRoute", "TCP://i2:4022", service="Later"),
            topics.routes_topic(prefix),
        )
        sent = wait_for("c1:0 sent once a route exists", lambda: ids(inbound) == ["c1:0"], 60)
        # From retry_s and the margin (2 x (trigger + 1 s)) after its last busy batch, the idle pace.
        quiet = sent + 2.0 + 3.0 + 1.0
        wait_for("the idle window", lambda: time.monotonic() > quiet + 9.0, 30)
    finally:
        running.stop_all()
        job.close()
    running.check()
    idle = [at for at, report in reports if quiet <= at < quiet + 9.0]
    assert all(report.metrics.records == 0 for at, report in reports if at >= quiet)
    # A tick a second ran about nine batches in those 9 s; at the 3 s pace, at most four.
    assert 1 <= len(idle) <= 4, [round(at - quiet, 2) for at in idle]


@pytest.mark.timing
def test_a_trickle_is_read_once_a_trigger_and_the_tick_adds_no_batch_of_its_own(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """Two intervals (`streaming.spark.sources.busy_options`): the query looks every busy interval
    (here 0.25 s), but a trickle below `busy_messages` is read once a trigger (1 s), and a burst
    above it at once; the tick counts its pace from the last batch (`TickSource.ran`), so while
    messages arrive every batch reads some, none runs for the tick alone."""
    job = router_job(
        spark,
        kafka_bootstrap,
        prefix,
        tmp_path,
        trigger_seconds=1.0,
        busy_trigger_seconds=0.25,
        busy_messages=1000,
    )
    reports: list[tuple[float, BatchReport]] = []
    running = Running()
    running.start(lambda stop: job.run(stop, on_batch=lambda r: reports.append((time.monotonic(), r))))
    outbound = topics.outbound_topic("i1", prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})

    def routed() -> int:
        return sum(report.metrics.routed for _, report in reports)

    def wait_for(what: str, done: Callable[[], bool], within_s: float) -> None:
        deadline = time.monotonic() + within_s
        while not done():
            assert not running.failures and time.monotonic() < deadline, f"{what}: not within {within_s} s"
            time.sleep(0.1)

    try:
        producer.produce(outbound, key=b"first", value=message("first", "Audit"))
        producer.flush(30)
        wait_for("the first message routed", lambda: routed() == 1, 180)
        trickle, burst_at = 100, 50  # 10 msg/s for 10 s, and 1,000 at once halfway
        began = time.monotonic()
        for n in range(trickle):
            producer.produce(outbound, key=f"t{n}".encode(), value=message(f"t{n}", "Audit"))
            producer.poll(0)
            if n == burst_at:
                for b in range(1000):
                    producer.produce(outbound, key=f"b{b}".encode(), value=message(f"b{b}", "Audit"))
            time.sleep(max(0.0, began + (n + 1) * 0.1 - time.monotonic()))
        ended = time.monotonic()
        assert producer.flush(30) == 0
        wait_for("every message routed", lambda: routed() == 1 + trickle + 1000, 120)
    finally:
        running.stop_all()
        job.close()
    running.check()
    # Batches that started and ended within the trickle (a second's margin at each end).
    window = [report for at, report in reports if began + 1.0 <= at - report.seconds and at <= ended - 1.0]
    seconds = ended - began - 2.0
    # One batch a trigger, and the burst's: at a busy interval of 0.25 s, four a second.
    assert 4 <= len(window) <= seconds + 3, (len(window), round(seconds, 1))
    assert all(report.metrics.records > 0 for report in window), [r.metrics.records for r in window]


@pytest.mark.timing
def test_a_retry_comes_when_it_falls_due_though_other_batches_ran_since_its_delay(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """D2 with the default two intervals: the batch that reads a delayed record back runs half a
    second after the one that delayed it, and the tick's pace counts from it; the tick still comes
    when the message falls due (`TickSource.ranDelaying`), not a round later."""
    i1 = replace(I1, retry_s=2.0)
    publish_catalogs(kafka_bootstrap, [i1, I2], topics.catalogs_topic(prefix))
    job = router_job(spark, kafka_bootstrap, prefix, tmp_path)
    assert job.settings.busy  # the defaults: a batch every 0.5 s once busy, else a second
    running = Running()
    running.start(lambda stop: job.run(stop))
    delayed_topic = topics.delayed_topic("i1", prefix)

    def delays() -> list[dict[str, str]]:
        return [headers for headers, v in read_all(kafka_bootstrap, delayed_topic) if v is not None]

    try:
        produce(kafka_bootstrap, topics.outbound_topic("i1", prefix), [("c1", message("c1", "Later"))])
        deadline = time.monotonic() + 180
        while len(delays()) < 5:  # no route: delayed, and delayed again each time it falls due
            assert not running.failures and time.monotonic() < deadline, "five delays not within 180 s"
            time.sleep(0.5)
    finally:
        running.stop_all()
        job.close()
    running.check()

    batches = batch_times(tmp_path / "i1" / "query")
    waits = [retry_wait(batches, a["due_at"], b["decided_at"]) for a, b in itertools.pairwise(delays())]
    # Each retry's batch comes at the query's first look from its timer on, within a round of half
    # a second (measured: 36-104 ms). With the tick at its pace, counted from the batch that read
    # the delayed record back half a second after the one that delayed it, all but the first came
    # 596-709 ms after they could.
    assert all(w < 750 for w in waits) and sorted(waits)[len(waits) // 2] < 250, waits


@pytest.mark.timing
def test_what_a_restarted_job_holds_falls_due_on_time_not_a_pace_later(
    spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """D2 across a restart: the job reads when the timers of the state it resumed fall due
    (`held_timers`) and its tick comes then (`TickSource.fallDue`), not at its pace, a second
    from the last batch, which would retry most of what it held up to a second late."""
    i1 = replace(I1, retry_s=40.0)
    publish_catalogs(kafka_bootstrap, [i1, I2], topics.catalogs_topic(prefix))
    outbound, delayed_topic = topics.outbound_topic("i1", prefix), topics.delayed_topic("i1", prefix)

    def delays() -> dict[str, list[dict[str, str]]]:
        out: dict[str, list[dict[str, str]]] = {}
        for headers, value in read_all(kafka_bootstrap, delayed_topic):
            if value is not None:
                out.setdefault(str(decode_message(value)["conversation_id"]), []).append(headers)
        return out

    def quarters() -> set[int]:
        """The quarters of a second the delayed messages fall due in."""
        return {(epoch_ms(h[0]["due_at"]) // 250) % 4 for h in delays().values()}

    def run_until(
        job: RouterJob, done: Callable[[], bool], what: str, then: Callable[[], None] = lambda: None
    ) -> None:
        running = Running()
        running.start(lambda stop: job.run(stop))
        try:
            then()
            deadline = time.monotonic() + 180
            while not done():
                assert not running.failures and time.monotonic() < deadline, f"{what} not within 180 s"
                time.sleep(0.25)
            time.sleep(2.0)  # the delayed records are read back, and held
        finally:
            running.stop_all()
            job.close()
        running.check()

    # One interval of a quarter of a second: once the query runs (its first delay), conversations
    # with no route, one every 0.3 s, four at a time, until at least twelve more are delayed and
    # their due times fall in three quarters of a second or more (slow batches bunch them).
    sent = ["c0"]

    def send() -> None:
        produce(kafka_bootstrap, outbound, [("c0", message("c0", "Later"))])
        deadline = time.monotonic() + 180
        while len(sent) < 13 or (len(quarters()) < 3 and len(sent) < 33):
            while len(delays()) < len(sent):
                assert time.monotonic() < deadline, f"{len(sent)} delays not within 180 s"
                time.sleep(0.1)
            for _ in range(4):
                sent.append(f"c{len(sent)}")
                produce(kafka_bootstrap, outbound, [(sent[-1], message(sent[-1], "Later"))])
                time.sleep(0.3)

    first_run = router_job(spark, kafka_bootstrap, prefix, tmp_path, trigger_seconds=0.25)
    run_until(first_run, lambda: len(delays()) == len(sent), "the delays", send)
    due = {c: epoch_ms(h[0]["due_at"]) for c, h in delays().items()}
    assert len(quarters()) >= 3, due
    # The processor's timers of what it holds: a due time each, less its margin (D2).
    query = tmp_path / "i1" / "query"
    last = max(logged_batches(query / "commits"))
    assert held_timers(held_state(spark, query, last)) == sorted({d - 100 for d in due.values()})
    assert min(due.values()) > time.time() * 1000 + 10_000, "the restart comes before they fall due"

    again = router_job(spark, kafka_bootstrap, prefix, tmp_path, trigger_seconds=0.25)
    run_until(again, lambda: all(len(h) >= 2 for h in delays().values()), "the retries")
    batches = batch_times(query, last)
    waits = [retry_wait(batches, h[0]["due_at"], h[1]["decided_at"]) for h in delays().values()]
    # Each retry's batch comes at the restarted query's first look from its timer on, within a round
    # of a quarter of a second (measured: 0-241 ms). With the tick at its own pace, a batch a second
    # from the last, they came up to 706 and 720 ms after they could.
    assert all(w < 400 for w in waits), waits
