"""`router redrive` through the real broker: what it sends back, where, with which headers, and once.

The dropped topic's records are produced as the router writes them (`streaming.spark.output`: the
decision's headers, then `source_topic`), and the last test has the real job drop them; the command
runs through `streaming.cli.main`; what it wrote is read back with a read_committed consumer
(librdkafka's default). Each test has its own topic prefix.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from pyspark.sql import SparkSession

from streaming import topics
from streaming.cli import main
from streaming.config import load_settings
from streaming.kafka.admin import cluster_metadata, ensure_topics
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.kafka.consuming import header_pairs
from streaming.rules.model import Database, Instance, Route
from streaming.spark.job import RouterJob
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = pytest.mark.integration

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService",))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
I1 = Instance("i1", "TCP://i1.example:4022", (AW, MSDB))
AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def make_prefix(bootstrap: str) -> str:
    """A prefix holding i1's catalog and the topics its router creates (two partitions each)."""
    prefix = f"rd{uuid.uuid4().hex[:10]}"
    publish_catalogs(bootstrap, [I1], topics.catalogs_topic(prefix))
    names = [
        kind("i1", prefix) for kind in (topics.outbound_topic, topics.inbound_topic, topics.dropped_topic)
    ]
    ensure_topics(bootstrap, [*names, topics.deadletter_topic("i1", prefix)], partitions=2)
    return prefix


def message(message_id: str, service: str = "Far") -> bytes:
    return encode_message(
        new_message_record(
            message_id=message_id,
            conversation_id=f"c-{message_id}",
            to_service=service,
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=AT,
        )
    )


def drop(
    bootstrap: str,
    prefix: str,
    records: Sequence[tuple[str, str, str, str]],
    more: Sequence[tuple[str, bytes]] = (),
    written_ms: Sequence[int] = (),
) -> None:
    """Write (id, service, reason, input kind) records to i1's dropped topic, as the router does.

    `written_ms`: the records' timestamps (epoch ms), in their order; by default the producer's clock.
    """
    producer = Producer({"bootstrap.servers": bootstrap})
    stamps = list(written_ms) or [0] * len(records)  # 0: the producer stamps the record
    for (message_id, service, reason, kind), stamp in zip(records, stamps, strict=True):
        source = (
            topics.outbound_topic("i1", prefix) if kind == "outbound" else topics.inbound_topic("i1", prefix)
        )
        headers: list[tuple[str, str | bytes | None]] = [
            ("outcome", b"dropped"),
            ("reason", reason.encode()),
            ("scope", b"AW" if kind == "outbound" else b"msdb"),
            ("router_instance", b"i1"),
            ("source_topic", source.encode()),
            *more,
        ]
        producer.produce(
            topics.dropped_topic("i1", prefix),
            key=f"c-{message_id}".encode(),
            value=message(message_id, service),
            headers=headers,
            timestamp=stamp,
        )
    assert producer.flush(30) == 0


def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes | None, dict[str, str], bytes | None]]:
    """Every committed record of `topic` now: (key, headers as text, value), read to each partition's end."""
    partitions = sorted(cluster_metadata(bootstrap).topics[topic].partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    out: list[tuple[bytes | None, dict[str, str], bytes | None]] = []
    left = set(partitions)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        while left:
            record = consumer.poll(15.0)
            assert record is not None, f"{topic}: no end of partitions {left} within 15 s"
            error = record.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error.str()
                left.discard(record.partition() or 0)
                continue
            headers = {k: (v or b"").decode() for k, v in header_pairs(record)}
            out.append((record.key(), headers, record.value()))
    finally:
        consumer.close()
    return out


def ids(bootstrap: str, topic: str) -> Counter[str]:
    return Counter(decode_message(v)["message_id"] for _, _, v in read_committed(bootstrap, topic))


def redrive(bootstrap: str, prefix: str, *args: str) -> int:
    return main(["redrive", "--instance", "i1", "--bootstrap", bootstrap, "--topic-prefix", prefix, *args])


def test_records_go_back_to_their_input_with_their_headers_kept_and_counted(kafka_bootstrap: str) -> None:
    prefix = make_prefix(kafka_bootstrap)
    drop(kafka_bootstrap, prefix, [("a", "Far", "no_route", "outbound"), ("b", "Far", "no_route", "inbound")])

    assert redrive(kafka_bootstrap, prefix, "--from", "dropped") == 0

    outbound = read_committed(kafka_bootstrap, topics.outbound_topic("i1", prefix))
    inbound = read_committed(kafka_bootstrap, topics.inbound_topic("i1", prefix))
    assert [decode_message(v)["message_id"] for _, _, v in outbound] == ["a"]
    assert [decode_message(v)["message_id"] for _, _, v in inbound] == ["b"]
    key, headers, value = outbound[0]
    assert (key, value) == (b"c-a", message("a"))  # unchanged
    assert {k: headers[k] for k in ("outcome", "reason", "scope", "router_instance")} == {
        "outcome": "dropped",
        "reason": "no_route",
        "scope": "AW",
        "router_instance": "i1",
    }
    assert headers["redrive_count"] == "1"
    assert headers["redriven_from"].startswith(topics.dropped_topic("i1", prefix) + "[")
    # Run again: the group has read them all; nothing is sent twice, and the command says so.
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped") == 2
    assert ids(kafka_bootstrap, topics.outbound_topic("i1", prefix)) == Counter({"a": 1})
    assert ids(kafka_bootstrap, topics.inbound_topic("i1", prefix)) == Counter({"b": 1})


def test_filters_choose_and_consume_and_bounds_leave_the_rest(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = make_prefix(kafka_bootstrap)
    drop(
        kafka_bootstrap,
        prefix,
        [
            ("r1", "Far", "no_route", "outbound"),
            ("r2", "Near", "no_route", "outbound"),
            ("h1", "Far", "hops_exhausted", "outbound"),
            ("r3", "Far", "no_route", "outbound"),
        ],
    )
    outbound = topics.outbound_topic("i1", prefix)
    # A service no record has: nothing written, nothing committed, and what the records hold.
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped", "--service", "Nowhere") == 2
    said = capsys.readouterr().err
    assert "none of the 4 read match" in said and "Far (3)" in said and "Near (1)" in said
    assert ids(kafka_bootstrap, outbound) == Counter()

    assert (
        redrive(
            kafka_bootstrap,
            prefix,
            "--from",
            "dropped",
            "--reason",
            "no_route",
            "--service",
            "Far",
            "--max",
            "1",
        )
        == 0
    )
    first = ids(kafka_bootstrap, outbound)
    assert sum(first.values()) == 1 and set(first) <= {"r1", "r3"}
    assert (
        redrive(
            kafka_bootstrap, prefix, "--from", "dropped", "--reason", "no_route", "--service", "Far", "--json"
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert (summary["sent"], summary["by_reason"], summary["by_service"]) == (1, {"no_route": 1}, {"Far": 1})
    assert ids(kafka_bootstrap, outbound) == Counter({"r1": 1, "r3": 1})
    # The filtered ones (r2, h1) were read past: the group consumes the topic once.
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped") == 2
    assert "found none after the offsets of group" in capsys.readouterr().err
    # --from-beginning reads them all again; --max-redrives 1 skips those sent back once already.
    assert (
        redrive(kafka_bootstrap, prefix, "--from", "dropped", "--from-beginning", "--max-redrives", "1") == 0
    )
    said = capsys.readouterr().err
    assert said.count("sent back 1 time(s) already (--max-redrives 1); skipped") == 2
    assert ids(kafka_bootstrap, outbound) == Counter({"r1": 1, "r3": 1, "r2": 1, "h1": 1})


def test_since_and_until_bound_the_records_by_when_they_were_written(kafka_bootstrap: str) -> None:
    """--since leaves out records written before it, and the group reads past them; --until stops at
    the first record written at it or later, which a later run takes."""
    prefix = make_prefix(kafka_bootstrap)
    hour_ago = int(datetime.now(timezone.utc).timestamp() * 1000) - 3_600_000
    drop(
        kafka_bootstrap,
        prefix,
        [(m, "Far", "no_route", "outbound") for m in ("old", "mid", "new")],
        written_ms=[hour_ago, hour_ago + 60_000, hour_ago + 120_000],
    )

    def instant(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()

    since, until = instant(hour_ago + 30_000), instant(hour_ago + 90_000)
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped", "--since", since, "--until", until) == 0
    outbound = topics.outbound_topic("i1", prefix)
    assert ids(kafka_bootstrap, outbound) == Counter({"mid": 1})
    # "old" was read past and committed; "new", at or after --until, was left for this run.
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped") == 0
    assert ids(kafka_bootstrap, outbound) == Counter({"mid": 1, "new": 1})


def test_rate_paces_the_records_sent(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--rate N sends the k-th record no sooner than (k - 1) / N seconds after the run began."""
    prefix = make_prefix(kafka_bootstrap)
    drop(kafka_bootstrap, prefix, [(f"m{n}", "Far", "no_route", "outbound") for n in range(8)])
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped", "--rate", "2", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["sent"] == 8
    # The eighth record was due 7 / 2 s after the start (unpaced, the run takes about 1.4 s).
    assert summary["seconds"] >= 3.5
    assert sum(ids(kafka_bootstrap, topics.outbound_topic("i1", prefix)).values()) == 8


def test_dry_run_counts_and_writes_nothing(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = make_prefix(kafka_bootstrap)
    drop(
        kafka_bootstrap,
        prefix,
        [
            ("a", "Far", "no_route", "outbound"),
            ("b", "Far", "no_route", "inbound"),
            ("c", "Near", "hops_exhausted", "inbound"),
        ],
    )
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped", "--dry-run") == 0
    table = capsys.readouterr().out
    lines = {" ".join(line.split()) for line in table.splitlines()}
    assert {"reason no_route 2", "reason hops_exhausted 1", "service Far 2", "service Near 1"} <= lines
    [examples] = [line for line in table.splitlines() if line.startswith("examples: ")]
    assert sorted(examples.removeprefix("examples: ").split(", ")) == ["a", "b", "c"]
    for kind in (topics.outbound_topic, topics.inbound_topic):
        assert read_committed(kafka_bootstrap, kind("i1", prefix)) == []
    assert topics.redrives_topic("i1", prefix) not in cluster_metadata(kafka_bootstrap).topics
    # Nothing committed either: a real run then sends all three.
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped") == 0
    assert ids(kafka_bootstrap, topics.inbound_topic("i1", prefix)) == Counter({"b": 1, "c": 1})


def test_a_message_dropped_again_is_sent_back_at_most_max_redrives_times(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = make_prefix(kafka_bootstrap)
    outbound = topics.outbound_topic("i1", prefix)
    for _ in range(3):
        # The router drops it again, with its decision's headers only (no redrive_count).
        drop(kafka_bootstrap, prefix, [("p", "Far", "no_route", "outbound")])
        assert redrive(kafka_bootstrap, prefix, "--from", "dropped", "--max-redrives", "2") == 0
    assert ids(kafka_bootstrap, outbound) == Counter({"p": 2})
    counts = [h["redrive_count"] for _, h, _ in read_committed(kafka_bootstrap, outbound)]
    assert counts == ["1", "2"]
    assert "sent back 2 time(s) already (--max-redrives 2); skipped" in capsys.readouterr().err


def test_dead_letters_go_back_to_their_source(kafka_bootstrap: str) -> None:
    prefix = make_prefix(kafka_bootstrap)
    inbound = topics.inbound_topic("i1", prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(
        topics.deadletter_topic("i1", prefix),
        value=b"\x00not a message",
        headers=[
            ("error", b"value does not decode"),
            ("source_topic", inbound.encode()),
            ("source_offset", b"7"),
        ],
    )
    assert producer.flush(30) == 0
    assert redrive(kafka_bootstrap, prefix, "--from", "deadletter") == 0
    [(_, headers, value)] = read_committed(kafka_bootstrap, inbound)
    assert (
        value == b"\x00not a message" and headers["source_offset"] == "7" and headers["redrive_count"] == "1"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--from", "delayed"], "delayed messages are not redriven"),
        (["--from", "dropped", "--reason", "nope"], "--reason: expected one of no_route"),
        (["--instance", "i9", "--from", "dropped"], "instance(s) 'i9' not in the catalogs topic"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    prefix = make_prefix(kafka_bootstrap)
    drop(kafka_bootstrap, prefix, [("a", "Far", "no_route", "outbound")])
    assert redrive(kafka_bootstrap, prefix, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("router redrive: error: ") and said in err
    assert read_committed(kafka_bootstrap, topics.outbound_topic("i1", prefix)) == []


def test_what_the_router_dropped_is_routed_again_once_the_cause_is_fixed(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The real job drops messages for a service no database hosts; once one does, a redrive sends
    them back (to the inbound topic, by the job's own source_topic header) and the job delivers them."""
    prefix = make_prefix(kafka_bootstrap)
    put_route(kafka_bootstrap, "i1", Route("msdb", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(prefix))
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(3):
        producer.produce(
            topics.inbound_topic("i1", prefix), key=b"c-billing", value=message(f"b{n}", "Billing")
        )
    assert producer.flush(30) == 0
    settings = load_settings(
        None,
        instance="i1",
        bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(tmp_path / "i1"),
    )

    RouterJob(spark, settings).replay(timeout_s=300)
    dropped = read_committed(kafka_bootstrap, topics.dropped_topic("i1", prefix))
    assert [(h["reason"], h["source_topic"]) for _, h, _ in dropped] == [
        ("service_not_found", topics.inbound_topic("i1", prefix))
    ] * 3

    hosted = replace(I1, databases=(replace(AW, services=("InitiatorService", "Billing")), MSDB))
    publish_catalogs(kafka_bootstrap, [hosted], topics.catalogs_topic(prefix))
    assert redrive(kafka_bootstrap, prefix, "--from", "dropped", "--service", "Billing") == 0
    job = RouterJob(spark, settings)
    job.replay(timeout_s=300)
    assert job.totals.outcomes["deliver"] == 3
    queue = topics.queue_topic("i1", "AW", "Billing", prefix)
    assert ids(kafka_bootstrap, queue) == Counter({"b0": 1, "b1": 1, "b2": 1})
