"""The fault tier for `router redrive`: killed midway with SIGKILL and run again, it sends each record once.

`router redrive --rate` runs as a child process over a few thousand dropped records; it is killed
while its transactions are being written (or stopped with Ctrl-C), then run again to the end. A
read_committed consumer (what the router's job and librdkafka's consumers read) then counts every
message id in the instance's inputs: each exactly once. A read_uncommitted one shows that the kill
did leave records of an unfinished transaction behind, which is what the test is about.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from processes import ROOT, kill

from streaming import topics
from streaming.kafka.admin import admin_client, cluster_metadata, end_offsets, ensure_topics
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.rules.model import Database, Instance
from streaming.tables.topic_io import publish_catalogs

pytestmark = [pytest.mark.e2e, pytest.mark.fault]

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService",))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
I1 = Instance("i1", "TCP://i1.example:4022", (AW, MSDB))
RECORDS = 3000
RATE = 500
"""Records a second: the run would take 6 s; it is killed after about a third of them."""


def dropped_records(bootstrap: str, prefix: str) -> set[str]:
    """RECORDS dropped messages, half read from the outbound topic and half from the inbound one."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    ids = set()
    for n in range(RECORDS):
        message_id = f"m{n:05d}"
        kind = topics.outbound_topic if n % 2 else topics.inbound_topic
        value = encode_message(
            new_message_record(
                message_id=message_id,
                conversation_id=f"c{n % 97}",
                to_service="Far",
                from_service="InitiatorService",
                origin_database="AW",
                enqueued_at=datetime.now(timezone.utc),
            )
        )
        headers: list[tuple[str, str | bytes | None]] = [
            ("outcome", b"dropped"),
            ("reason", b"no_route"),
            ("source_topic", kind("i1", prefix).encode()),
        ]
        producer.produce(
            topics.dropped_topic("i1", prefix), key=f"c{n % 97}".encode(), value=value, headers=headers
        )
        producer.poll(0)
        ids.add(message_id)
    assert producer.flush(30) == 0
    return ids


def read_ids(bootstrap: str, names: list[str], isolation: str) -> Counter[str]:
    """Every message id the topics hold now, read to each partition's end with `isolation`."""
    found: Counter[str] = Counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    metadata = cluster_metadata(bootstrap).topics
    left = {(name, p) for name in names for p in metadata[name].partitions}
    try:
        consumer.assign([TopicPartition(name, p, 0) for name, p in left])
        while left:
            record = consumer.poll(15.0)
            assert record is not None, f"no end of {sorted(left)} within 15 s"
            error = record.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error.str()
                left.discard((record.topic() or "", record.partition() or 0))
                continue
            found[decode_message(record.value())["message_id"]] += 1
    finally:
        consumer.close()
    return found


def namespace(bootstrap: str) -> tuple[str, list[str], set[str]]:
    """A prefix with i1's catalog and RECORDS dropped messages; its inputs and the messages' ids."""
    prefix = f"rf{uuid.uuid4().hex[:10]}"
    publish_catalogs(bootstrap, [I1], topics.catalogs_topic(prefix))
    inputs = [topics.outbound_topic("i1", prefix), topics.inbound_topic("i1", prefix)]
    ensure_topics(bootstrap, [*inputs, topics.dropped_topic("i1", prefix)], partitions=2)
    return prefix, inputs, dropped_records(bootstrap, prefix)


def redrive_command(bootstrap: str, prefix: str) -> list[str]:
    return [
        sys.executable, "-m", "streaming.cli", "redrive", "--instance", "i1", "--from", "dropped",
        "--bootstrap", bootstrap, "--topic-prefix", prefix,
    ]  # fmt: skip


def start_paced(
    command: list[str], log: Path, inputs: list[str], bootstrap: str, started: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """Start the redrive at RATE; return once about a third is written (committed or not)."""
    process = subprocess.Popen(
        [*command, "--rate", str(RATE)],
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as `kill` expects
    )
    started.append(process)
    deadline = time.monotonic() + 120
    while sum(sum(end_offsets(bootstrap, name).values()) for name in inputs) < RECORDS // 3:
        assert process.poll() is None, f"the redrive ended too soon:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"the redrive wrote too little in 120 s:\n{log.read_text()}"
        time.sleep(0.1)
    # Then until a transaction is open with records in the log, so that the kill cuts one short
    # (the end offsets alone can reach the mark as a transaction commits, before the next writes).
    client = admin_client(bootstrap)  # one, asking every 20 ms
    while not open_transaction(bootstrap, inputs, client):
        assert process.poll() is None, f"the redrive ended with no transaction seen open:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no transaction seen open in 120 s:\n{log.read_text()}"
        time.sleep(0.02)
    return process


def open_transaction(bootstrap: str, names: list[str], client: AdminClient) -> bool:
    """Whether a partition of `names` holds records of a transaction not yet ended: its last stable
    offset (the end a read_committed reader gets) is short of its end offset."""
    for name in names:
        stable = end_offsets(bootstrap, name, client=client, committed=True)
        end = end_offsets(bootstrap, name, client=client)
        if any(stable[p] < end[p] for p in end):
            return True
    return False


def run_to_the_end(command: list[str], before: int) -> None:
    """Run the redrive again, to the end: it sends what the interrupted run had not committed."""
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == ""  # people's lines on stderr only
    summary = again.stderr.strip().splitlines()[-1]
    assert f"sent {RECORDS - before} " in summary, again.stderr[-3000:]


def assert_each_once(bootstrap: str, inputs: list[str], ids: set[str]) -> None:
    delivered = read_ids(bootstrap, inputs, "read_committed")
    assert set(delivered) == ids, f"missing {sorted(ids - set(delivered))[:10]}"
    twice = {i: n for i, n in delivered.items() if n > 1}
    assert not twice, f"sent more than once: {sorted(twice.items())[:10]}"


def test_a_redrive_killed_midway_and_run_again_sends_each_record_once(
    kafka_bootstrap: str, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    prefix, inputs, ids = namespace(kafka_bootstrap)
    command = redrive_command(kafka_bootstrap, prefix)
    log = tmp_path / "redrive.log"
    kill(start_paced(command, log, inputs, kafka_bootstrap, started))
    committed_at_kill = read_ids(kafka_bootstrap, inputs, "read_committed")
    assert 0 < sum(committed_at_kill.values()) < RECORDS, "the kill was meant to interrupt the redrive"
    assert max(committed_at_kill.values()) == 1

    run_to_the_end(command, sum(committed_at_kill.values()))
    assert_each_once(kafka_bootstrap, inputs, ids)
    # The kill left an unfinished transaction's records in the log: read_uncommitted sees them.
    uncommitted = read_ids(kafka_bootstrap, inputs, "read_uncommitted")
    assert sum(uncommitted.values()) > RECORDS, "the kill fell between two transactions: nothing was tested"


def test_a_redrive_stopped_with_ctrl_c_commits_its_chunk_and_the_next_run_goes_on(
    kafka_bootstrap: str, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    prefix, inputs, ids = namespace(kafka_bootstrap)
    command = redrive_command(kafka_bootstrap, prefix)
    log = tmp_path / "redrive.log"
    process = start_paced(command, log, inputs, kafka_bootstrap, started)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(60) == 0, log.read_text()
    said = log.read_text()
    assert "SIGINT: stopping after the chunk in flight" in said and "; stopped early" in said, said
    # It committed what it had written: nothing is left of an open or aborted transaction.
    committed = read_ids(kafka_bootstrap, inputs, "read_committed")
    assert 0 < sum(committed.values()) < RECORDS, said
    assert read_ids(kafka_bootstrap, inputs, "read_uncommitted") == committed

    run_to_the_end(command, sum(committed.values()))
    assert_each_once(kafka_bootstrap, inputs, ids)
