"""`router status` on the real broker: every figure read back from topics and a consumer group.

The records are produced as the router writes them (`streaming.spark.output`: the delayed topic's
`due_at` and `decided_at`, the dropped topic's `outcome`, `reason` and `destination`, the dead-letter
topic's `error`), the router's group is written with `ProgressGroups` as the job writes it, and the
command runs through `streaming.cli.main`. The last test runs the real job and reads its status.
Each test has its own topic prefix.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from streaming import topics
from streaming.cli import main
from streaming.config import load_settings
from streaming.kafka.admin import end_offsets, ensure_topics
from streaming.kafka.avro import encode_message, encode_route, new_message_record, route_to_record
from streaming.kafka.progress_group import Committed, ProgressGroups, read_committed
from streaming.observe.status import collect_status
from streaming.rules.model import Database, Instance, Route, normalize_address
from streaming.spark.job import RouterJob
from streaming.tables.topic_io import produce_records, publish_catalogs, put_route

pytestmark = pytest.mark.integration

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService", "Audit"))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
PARTS = Database("Parts", "0b0b0b0b-0000-0000-0000-000000000002", True, ("OrderParts",))
NEW_ADDRESS = "TCP://new.example:4022"
Header = tuple[str, bytes]


def instances(retry_s: float) -> tuple[Instance, Instance]:
    return (
        Instance("i1", "TCP://i1.example:4022", (AW, MSDB), retry_s=retry_s),
        Instance("i2", "TCP://i2.example:4022", (PARTS, MSDB), retry_s=retry_s),
    )


def iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_ms() -> int:
    return int(time.time() * 1000)


def produce(
    bootstrap: str, topic: str, records: Sequence[tuple[str | None, Sequence[Header], int | None]]
) -> None:
    """Produce (key, headers, timestamp ms or None for now) records with a small value each."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, headers, at_ms in records:
        while True:
            try:
                producer.produce(
                    topic,
                    key=None if key is None else key.encode(),
                    value=b"v",
                    headers=list(headers),
                    timestamp=at_ms or 0,
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(30) == 0


def group_holds(bootstrap: str, group: str, wanted: dict[tuple[str, int], int]) -> Committed | None:
    """The group, if it holds `wanted` (read as `router status` reads it, `read_committed`)."""
    committed = read_committed(bootstrap, group, wanted)
    return committed if all(committed.offsets.get(tp) == n for tp, n in wanted.items()) else None


def write_group(
    bootstrap: str, prefix: str, instance: str, batch: int, at_ms: int, wanted: dict[tuple[str, int], int]
) -> None:
    """Write the router's group as the job does after a batch, until the broker holds it.

    A write that fails (a broker that has just started has no group coordinator yet) is only
    logged; the job's next batch writes again, and so does this, every half second.
    """
    groups = ProgressGroups(bootstrap, prefix, {instance: sorted({topic for topic, _ in wanted})})
    group = topics.router_group(instance, prefix)
    deadline = time.monotonic() + 60
    try:
        while True:
            groups.write(batch, at_ms, wanted)
            pause = time.monotonic() + 0.5
            while time.monotonic() < pause:
                if group_holds(bootstrap, group, wanted) is not None:
                    return
                time.sleep(0.05)
            assert time.monotonic() < deadline, f"{group} does not hold {wanted}"
    finally:
        groups.close()


def create_router_topics(bootstrap: str, prefix: str, instance: str) -> None:
    """The topics a job creates for an instance when it starts (`RouterJob`)."""
    ensure_topics(
        bootstrap,
        [
            topics.outbound_topic(instance, prefix),
            topics.inbound_topic(instance, prefix),
            topics.dropped_topic(instance, prefix),
            topics.deadletter_topic(instance, prefix),
        ],
    )
    ensure_topics(
        bootstrap,
        [topics.delayed_topic(instance, prefix)],
        config={"message.timestamp.type": "LogAppendTime"},
    )


def make_prefix(bootstrap: str, retry_s: float) -> str:
    """A prefix with i1 and i2's catalogs, i1's routes (one expired, one bad record) and i1's topics."""
    prefix = f"st{uuid.uuid4().hex[:10]}"
    publish_catalogs(bootstrap, instances(retry_s), topics.catalogs_topic(prefix))
    routes = topics.routes_topic(prefix)
    for route in (
        Route("AW", "AutoCreatedLocal", "LOCAL"),
        Route("AW", "ToParts", "TCP://i2.example:4022", service="OrderParts"),
        Route("AW", "ToNew", NEW_ADDRESS, service="NewService"),
        Route(
            "AW",
            "Old",
            "TCP://old.example:4022",
            service="OldService",
            expires_at=datetime.now(timezone.utc) - timedelta(days=1),  # R6: expired, still in the table
        ),
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
    ):
        put_route(bootstrap, "i1", route, routes)
    put_route(bootstrap, "i2", Route("Parts", "AutoCreatedLocal", "LOCAL"), routes)
    # A route of i1 scoped to a database i1 does not have: the job would skip it.
    stray = Route("Sales", "Stray", "LOCAL")
    produce_records(bootstrap, routes, [(b"i1/Sales/Stray", encode_route(route_to_record(stray)), None)])
    create_router_topics(bootstrap, prefix, "i1")
    # Every topic i1's routes reach exists, but the new address's (the job has not run since it came).
    ensure_topics(
        bootstrap,
        [
            topics.inbound_topic("i2", prefix),
            topics.queue_topic("i1", "AW", "InitiatorService", prefix),
            topics.queue_topic("i1", "AW", "Audit", prefix),
        ],
    )
    return prefix


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    return make_prefix(kafka_bootstrap, retry_s=5.0)


def run_status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["status", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_status_reports_every_figure_of_each_instance(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    b = kafka_bootstrap
    outbound, inbound = topics.outbound_topic("i1", prefix), topics.inbound_topic("i1", prefix)
    delayed, dropped = topics.delayed_topic("i1", prefix), topics.dropped_topic("i1", prefix)
    deadletter = topics.deadletter_topic("i1", prefix)
    produce(b, outbound, [(f"c{n}", [], None) for n in range(50)])
    produce(b, inbound, [(f"r{n}", [], None) for n in range(20)])

    batch_at = datetime.now(timezone.utc).replace(microsecond=0)
    decided = batch_at - timedelta(seconds=3)

    def delayed_record(conversation: str, due: datetime) -> tuple[str, list[Header], None]:
        headers = [
            ("outcome", b"delayed"),
            ("reason", b"no_route"),
            ("decided_at", iso(decided).encode()),
            ("due_at", iso(due).encode()),
        ]
        return conversation, headers, None

    produce(
        b,
        delayed,
        # D2: four already due at the last batch (released), six due after it in three conversations.
        [delayed_record(f"gone{n}", batch_at - timedelta(seconds=1)) for n in range(4)]
        + [delayed_record(f"wait{n % 3}", batch_at + timedelta(seconds=2 + n)) for n in range(6)],
    )
    two_hours_ago = now_ms() - 2 * 3600 * 1000
    not_avro = [("error", b"value does not decode as Avro router.v1.Message")]
    produce(
        b,
        deadletter,
        [(None, not_avro, None)] * 2
        + [(None, [("error", b"to_broker_instance is not a GUID: nope")], None)]
        + [(None, not_avro, two_hours_ago)] * 3,  # outside the last hour
    )
    new_topic = topics.network_topic(normalize_address(NEW_ADDRESS), prefix)
    hops = [("outcome", b"discarded"), ("reason", b"hops_exhausted")]  # F3
    refused = [
        ("outcome", b"dropped"),
        ("reason", b"destination_unavailable"),
        ("destination", new_topic.encode()),
    ]
    produce(
        b,
        dropped,
        [("h", hops, None)] * 4 + [("u", refused, None)] * 2 + [("old", hops, two_hours_ago)],
    )
    # The i1 router's progress, as the job writes it after a batch: batch 7 read outbound to its
    # end, inbound up to 8 (12 behind), delayed up to 7 (3 behind).
    group = topics.router_group("i1", prefix)
    write_group(
        b,
        prefix,
        "i1",
        7,
        int(batch_at.timestamp() * 1000),
        {(outbound, 0): 50, (inbound, 0): 8, (delayed, 0): 7},
    )
    # i2 never ran: its outbound topic holds 5 records and it has no group.
    ensure_topics(b, [topics.outbound_topic("i2", prefix)])
    produce(b, topics.outbound_topic("i2", prefix), [(f"p{n}", [], None) for n in range(5)])

    code, out, err = run_status(capsys, "--bootstrap", b, "--topic-prefix", prefix, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert [one["instance"] for one in document["instances"]] == ["i1", "i2"]
    assert document["since_s"] == 3600 and document["topic_prefix"] == prefix
    i1, i2 = document["instances"]

    assert i1["router"]["group"] == group
    assert (i1["router"]["ran"], i1["router"]["batch"]) == (True, 7)
    assert i1["router"]["batch_at"] == batch_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert 0 <= i1["router"]["batch_age_s"] < 60
    assert {kind: i1["lag"][kind]["lag"] for kind in ("outbound", "inbound", "delayed")} == {
        "outbound": 0,
        "inbound": 12,
        "delayed": 3,
    }
    assert i1["lag"]["inbound"]["partitions"] == [{"partition": 0, "end": 20, "committed": 8, "lag": 12}]
    assert {
        k: i1["delayed"][k] for k in ("pending", "conversations", "oldest_due_at", "oldest_decided_at")
    } == {
        "pending": 6,
        "conversations": 3,
        "oldest_due_at": (batch_at + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "oldest_decided_at": decided.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    assert i1["delayed"]["records_read"] == 10
    assert i1["dead_letters"] == {
        "count": 3,
        "by_error": {
            "value does not decode as Avro router.v1.Message": 2,
            "to_broker_instance is not a GUID": 1,
        },
    }
    assert i1["dropped"] == {
        "count": 6,
        "by_reason": {"hops_exhausted": 4, "destination_unavailable": 2},
        "by_outcome": {"discarded": 4, "dropped": 2},
        "unavailable_destinations": {new_topic: 2},
    }
    assert {k: i1["routes"][k] for k in ("count", "by_scope", "expired", "skipped")} == {
        "count": 5,
        "by_scope": {"AW": 4, "msdb": 1},
        "expired": 1,
        "skipped": 1,
    }
    changed = datetime.fromisoformat(i1["routes"]["changed_at"].replace("Z", "+00:00"))
    assert abs((changed - datetime.now(timezone.utc)).total_seconds()) < 120
    assert i1["catalog"]["databases"] == [
        {"name": "AW", "services": ["InitiatorService", "Audit"]},
        {"name": "msdb", "services": []},
    ]
    # The expired route's address reaches nothing (R6); the new one's topic is not there yet.
    assert i1["missing_topics"] == [new_topic]
    routes_topic = topics.routes_topic(prefix)
    assert i1["warnings"] == [
        f"1 record(s) of i1's routes on {routes_topic} skipped (`router routes list` shows why)"
    ]

    assert i2["router"] == {
        "group": topics.router_group("i2", prefix),
        "ran": False,
        "batch": None,
        "batch_at": None,
        "batch_age_s": None,
    }
    assert i2["lag"]["outbound"]["lag"] == 5  # no group: the whole topic
    assert i2["lag"]["inbound"] == {
        "topic": topics.inbound_topic("i2", prefix),
        "exists": True,
        "lag": 0,
        "partitions": [{"partition": 0, "end": 0, "committed": None, "lag": 0}],
    }
    assert i2["lag"]["delayed"]["exists"] is False
    assert (i2["routes"]["count"], i2["routes"]["by_scope"]) == (1, {"Parts": 1})

    # The screen: the same figures, one instance at a time.
    code, out, err = run_status(capsys, "--bootstrap", b, "--topic-prefix", prefix, "--instance", "i1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("instance i1     router: batch 7 at ")
    assert "routes 5 (AW 4, msdb 1), 1 expired, changed " in lines[0]
    assert lines[1] == "  input lag     outbound 0   inbound 12   delayed 3"
    assert lines[2].startswith("  delayed       6 messages in 3 conversations not yet released, oldest due ")
    assert lines[3] == (
        "  last 1h       dead letters 3 (value does not decode as Avro router.v1.Message 2, "
        "to_broker_instance is not a GUID 1)   dropped 6 (hops_exhausted 4, destination_unavailable 2)"
    )
    assert lines[4] == f"  no topic yet  {new_topic} (2 dropped as destination_unavailable)"
    assert (
        lines[5] == "  catalog       TCP://i1.example:4022, retry 5 s; AW: InitiatorService, Audit; msdb: -"
    )
    assert lines[6].startswith("  warning       1 record(s) of i1's routes")
    assert len(lines) == 7

    code, out, _ = run_status(capsys, "--bootstrap", b, "--topic-prefix", prefix, "--instance", "i2")
    i2_group = topics.router_group("i2", prefix)
    assert out.splitlines()[0].startswith(
        f"instance i2     the router has not run (no committed offsets in group {i2_group})"
        "   routes 1 (Parts 1), changed 20"
    )

    # --since widens the window: the records of two hours ago count too.
    code, out, _ = run_status(
        capsys, "--bootstrap", b, "--topic-prefix", prefix, "--instance", "i1", "--since", "3h", "--json"
    )
    (wide,) = json.loads(out)["instances"]
    assert (wide["dead_letters"]["count"], wide["dropped"]["count"]) == (6, 7)
    assert wide["dead_letters"]["by_error"]["value does not decode as Avro router.v1.Message"] == 5


def test_an_unknown_instance_is_an_error_naming_the_instances_of_the_catalogs(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_status(
        capsys, "--bootstrap", kafka_bootstrap, "--topic-prefix", prefix, "--instance", "i9"
    )
    assert code == 2 and out == ""
    assert (
        f"expected an instance of the catalogs topic {topics.catalogs_topic(prefix)} (i1, i2), got 'i9'"
        in err
    )


def test_an_empty_catalogs_topic_prints_nothing_and_says_where_to_look(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = f"st{uuid.uuid4().hex[:10]}"
    code, out, err = run_status(capsys, "--bootstrap", kafka_bootstrap, "--topic-prefix", empty, "--json")
    assert code == 0
    assert json.loads(out)["instances"] == []
    assert f"{topics.catalogs_topic(empty)} holds nothing" in err


def test_only_the_window_after_the_last_batch_less_retry_s_of_the_delayed_topic_is_read(
    kafka_bootstrap: str,
) -> None:
    """D2: a message still due after the last batch was delayed at most retry_s before it."""
    b = kafka_bootstrap
    prefix = make_prefix(b, retry_s=1.0)
    delayed = topics.delayed_topic("i1", prefix)
    far = iso(datetime.now(timezone.utc) + timedelta(hours=1)).encode()
    # Appended before the window: whatever their due_at says, they are not read.
    produce(b, delayed, [(f"early{n}", [("due_at", far)], None) for n in range(5)])
    cut = now_ms() + 1
    while now_ms() <= cut + 20:  # the broker's append times (LogAppendTime) of what follows are later
        time.sleep(0.005)
    produce(b, delayed, [(f"late{n}", [("due_at", far)], None) for n in range(3)])
    batch_ms = cut + 1000  # the window starts retry_s (1 s) before the batch
    write_group(b, prefix, "i1", 3, batch_ms, {(delayed, 0): 8})
    while now_ms() <= batch_ms:
        time.sleep(0.01)
    now = datetime.now(timezone.utc)

    (bounded,), _ = collect_status(b, prefix, ["i1"], now=now, since_s=3600, delay_margin_s=0)
    assert (bounded.delayed.records_read, bounded.delayed.pending) == (3, 3)
    # With the default margin for the clocks, the earlier ones are in the window too.
    (wider,), _ = collect_status(b, prefix, ["i1"], now=now, since_s=3600)
    assert (wider.delayed.records_read, wider.delayed.pending) == (8, 8)


def test_status_answers_in_seconds_on_a_few_thousand_records(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    b = kafka_bootstrap
    due = iso(datetime.now(timezone.utc) + timedelta(minutes=10)).encode()
    produce(b, topics.outbound_topic("i1", prefix), [(f"c{n}", [], None) for n in range(3000)])
    produce(
        b, topics.delayed_topic("i1", prefix), [(f"c{n % 700}", [("due_at", due)], None) for n in range(3000)]
    )
    produce(
        b,
        topics.dropped_topic("i1", prefix),
        [("d", [("outcome", b"dropped"), ("reason", b"no_route")], None)] * 2000,
    )
    produce(
        b, topics.deadletter_topic("i1", prefix), [(None, [("error", b"to_service is empty")], None)] * 1000
    )
    outbound = topics.outbound_topic("i1", prefix)
    write_group(b, prefix, "i1", 1, now_ms(), {(outbound, 0): 2500})

    started = time.monotonic()
    code, out, err = run_status(capsys, "--bootstrap", b, "--topic-prefix", prefix, "--json")
    took = time.monotonic() - started
    assert code == 0, err
    i1 = json.loads(out)["instances"][0]
    assert i1["lag"]["outbound"]["lag"] == 500
    assert (i1["delayed"]["pending"], i1["delayed"]["conversations"]) == (3000, 700)
    assert (i1["dropped"]["count"], i1["dead_letters"]["count"]) == (2000, 1000)
    print(f"router status on 9,000 records: {took:.2f} s")
    assert took < 10, f"router status took {took:.1f} s"


def message(conversation: str, service: str) -> bytes:
    return encode_message(
        new_message_record(
            message_id=f"{conversation}:0",
            conversation_id=conversation,
            sequence_number=0,
            to_service=service,
            from_service="InitiatorService",
            is_initiator=True,
            origin_database="AW",
            enqueued_at=datetime.now(timezone.utc),
            body=b"<x/>",
        )
    )


@pytest.fixture
def job_prefix(kafka_bootstrap: str) -> Iterator[str]:
    """i1 alone, with a retry_s longer than the test, so nothing it delays falls due meanwhile."""
    prefix = f"st{uuid.uuid4().hex[:10]}"
    publish_catalogs(
        kafka_bootstrap,
        [Instance("i1", "TCP://i1.example:4022", (AW, MSDB), retry_s=600.0)],
        topics.catalogs_topic(prefix),
    )
    put_route(kafka_bootstrap, "i1", Route("AW", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(prefix))
    yield prefix


def test_status_of_a_router_that_ran_reads_the_group_the_job_wrote(
    spark: SparkSession,
    kafka_bootstrap: str,
    job_prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b, prefix = kafka_bootstrap, job_prefix
    settings = load_settings(
        None, instance="i1", bootstrap=b, topic_prefix=prefix, checkpoint_dir=str(tmp_path / "i1")
    )
    job = RouterJob(spark, settings)
    outbound = topics.outbound_topic("i1", prefix)
    produce_records(
        b,
        outbound,
        [(f"a{n}".encode(), message(f"a{n}", "Audit"), None) for n in range(10)]  # delivered (M5)
        + [(f"x{n}".encode(), message(f"x{n}", "Nobody"), None) for n in range(4)]  # no route: delayed (D1)
        + [(b"bad", b"\x00not avro", None)],  # dead-lettered
    )
    try:
        job.replay(timeout_s=300)
    finally:
        job.close()
    # The job writes its group without waiting for the broker: wait for what its last batch read.
    wanted = {(outbound, 0): end_offsets(b, outbound)[0]}
    deadline = time.monotonic() + 30
    while (committed := group_holds(b, topics.router_group("i1", prefix), wanted)) is None:
        assert time.monotonic() < deadline, f"the job's group does not hold {wanted}"
        time.sleep(0.1)
    assert committed.batch is not None and committed.at_ms is not None

    code, out, err = run_status(capsys, "--bootstrap", b, "--topic-prefix", prefix, "--json")
    assert code == 0, err
    (i1,) = json.loads(out)["instances"]
    assert i1["router"]["ran"] is True and i1["router"]["batch"] == committed.batch
    assert (i1["lag"]["outbound"]["lag"], i1["lag"]["inbound"]["lag"]) == (0, 0)
    assert (i1["delayed"]["pending"], i1["delayed"]["conversations"]) == (4, 4)
    assert i1["dead_letters"]["count"] == 1
    assert i1["dropped"]["count"] == 0
    assert i1["routes"]["count"] == 1
    # The job created every topic its routes reach when it took the snapshot.
    assert i1["missing_topics"] == []
