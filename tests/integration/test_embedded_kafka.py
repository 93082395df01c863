"""The embedded broker is a real Kafka: records round-trip, compaction and tombstones work, and its
life cycle (start, already running, stop, restart with its data) behaves as `router kafka` promises.

The first two tests use the session's shared broker (`kafka_bootstrap`); the life-cycle tests start
their own brokers in `tmp_path`, because they stop them.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from streaming.devtools.embedded_kafka import JVM_OPTIONS, EmbeddedKafka, port_is_free
from streaming.errors import KafkaUnavailable, RouterError, TopicMissing
from streaming.jvm_flags import KAFKA_JVM_OPTIONS_ENV
from streaming.kafka.admin import end_offsets, ensure_topics, topic_names
from tests.commands import run_command
from tests.conftest import TEST_KAFKA_JVM_OPTIONS
from tests.topic_records import partition_ends

pytestmark = pytest.mark.integration

READ_DEADLINE_S = 30.0


def produce(bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value, headers={"source": b"test"})
    assert producer.flush(READ_DEADLINE_S) == 0, "records still unsent after the deadline"


def read_to_end(bootstrap: str, topic: str, group: str) -> list[Message]:
    """Every record from the beginning up to the end offsets of now, in offset order per partition."""
    ends = end_offsets(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for partition in ends])
        positions = {partition: 0 for partition in ends}
        records: list[Message] = []
        deadline = time.monotonic() + READ_DEADLINE_S
        while any(positions[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"read {len(records)} records of {ends} before the deadline"
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            records.append(message)
            positions[partition] = offset + 1
        return records
    finally:
        consumer.close()


def latest_by_key(records: list[Message]) -> dict[bytes, bytes]:
    """What a reader of a compacted topic keeps: the last value per key, a tombstone deletes."""
    table: dict[bytes, bytes] = {}
    for record in records:
        key, value = record.key(), record.value()
        assert key is not None
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def test_a_topic_not_created_is_missing_to_end_offsets_and_holds_nothing_to_the_tests_reads(
    kafka_bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """`end_offsets` says a topic the metadata does not list is missing (`TopicMissing`, a
    `RouterError`); the tests' `partition_ends` counts it, like one not made yet, as holding nothing."""
    absent, made = unique_topic("absent"), unique_topic("made")
    with pytest.raises(TopicMissing, match="it does not exist") as raised:
        end_offsets(kafka_bootstrap, absent)
    assert isinstance(raised.value, RouterError)
    ensure_topics(kafka_bootstrap, [made], partitions=2)
    produce(kafka_bootstrap, made, [(b"k", b"v")])
    ends = partition_ends(kafka_bootstrap, [absent, made])
    assert set(ends) == {(made, 0), (made, 1)} and sum(ends.values()) == 1


def test_records_round_trip(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], unique_group: Callable[[str], str]
) -> None:
    topic = unique_topic("roundtrip")
    assert ensure_topics(kafka_bootstrap, [topic], partitions=2) == [topic]
    assert ensure_topics(kafka_bootstrap, [topic], partitions=2) == []  # idempotent
    sent = [(f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(50)]

    produce(kafka_bootstrap, topic, sent)

    assert sum(end_offsets(kafka_bootstrap, topic).values()) == 50
    received = read_to_end(kafka_bootstrap, topic, unique_group("roundtrip"))
    assert sorted((m.key(), m.value()) for m in received) == sorted(sent)
    assert all(m.headers() == [("source", b"test")] for m in received)
    for key in {k for k, _ in sent}:  # one key, one partition: its records keep their order
        assert [m.value() for m in received if m.key() == key] == [v for k, v in sent if k == key]


def test_compacted_topic_keeps_last_value_per_key_and_drops_tombstoned_keys(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], unique_group: Callable[[str], str]
) -> None:
    topic = unique_topic("compacted")
    # Small segments and no dirty-ratio threshold, so the cleaner compacts within seconds.
    fast_cleaning = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100"}
    ensure_topics(kafka_bootstrap, [topic], compacted=True, config=fast_cleaning)
    produce(
        kafka_bootstrap,
        topic,
        [(b"a", b"a1"), (b"b", b"b1"), (b"a", b"a2"), (b"c", b"c1"), (b"b", None), (b"a", b"a3")],
    )

    # As read back, whatever the cleaner has done so far.
    assert latest_by_key(read_to_end(kafka_bootstrap, topic, unique_group("c0"))) == {
        b"a": b"a3",
        b"c": b"c1",
    }

    # And as stored, once the cleaner ran: one record per key, the tombstoned key gone. A segment
    # rolls only when a record arrives after segment.ms, so keep appending a filler key until then.
    deadline = time.monotonic() + 60.0
    while True:
        produce(kafka_bootstrap, topic, [(b"filler", b"x")])
        stored = [(m.key(), m.value()) for m in read_to_end(kafka_bootstrap, topic, unique_group("c"))]
        content = [(k, v) for k, v in stored if k != b"filler"]
        if content == [(b"c", b"c1"), (b"a", b"a3")]:
            break
        assert time.monotonic() < deadline, f"not compacted within 60 s: {content}"
        time.sleep(0.5)  # the cleaner runs on its own schedule (log.cleaner.backoff.ms)


def test_kafka_command_start_twice_status_and_stop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["--state-dir", str(tmp_path)]
    try:
        assert run_command(["kafka", "status", *state]) == 1
        assert "not running" in capsys.readouterr().out

        assert run_command(["kafka", "start", *state, "--port", "0"]) == 0
        first = capsys.readouterr().out
        assert "Kafka started at 127.0.0.1:" in first
        bootstrap = first.split("bootstrap: ", 1)[1].split()[0]

        assert run_command(["kafka", "start", *state, "--port", "0"]) == 0
        assert f"Kafka is already running at {bootstrap}" in capsys.readouterr().out

        assert run_command(["kafka", "status", *state]) == 0
        assert f"running at {bootstrap}" in capsys.readouterr().out
    finally:
        assert run_command(["kafka", "stop", *state]) == 0
    assert "Kafka stopped in" in capsys.readouterr().out
    assert run_command(["kafka", "stop", *state]) == 0
    assert "not running" in capsys.readouterr().out
    assert run_command(["kafka", "status", *state]) == 1


def test_stop_is_clean_and_a_restart_keeps_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The broker's JVM also takes the flags ROUTER_KAFKA_JVM_OPTIONS gives, after its own.
    flags = [*TEST_KAFKA_JVM_OPTIONS.split(), "-Drouter.test.broker=flagged"]
    monkeypatch.setenv(KAFKA_JVM_OPTIONS_ENV, " ".join(flags))
    broker = EmbeddedKafka(tmp_path)
    started = broker.start()
    try:
        assert not started.already_running
        arguments = Path(f"/proc/{started.pid}/cmdline").read_bytes().decode().split("\0")
        assert arguments[1 : 1 + len(JVM_OPTIONS) + len(flags)] == [*JVM_OPTIONS, *flags], arguments
        again = EmbeddedKafka(tmp_path).start()  # another handle on the same state dir, as the CLI has
        assert (again.already_running, again.pid, again.bootstrap) == (True, started.pid, started.bootstrap)
        ensure_topics(started.bootstrap, ["kept"])
        produce(started.bootstrap, "kept", [(b"k", b"v")])
    finally:
        stopped = broker.stop()

    assert (stopped.was_running, stopped.killed) == (True, False)
    assert "shut down completed" in broker.log_file.read_text()
    assert not broker.pid_file.exists()
    assert not broker.status().running
    assert port_is_free(int(started.bootstrap.rsplit(":", 1)[1]))
    assert broker.stop().was_running is False

    with EmbeddedKafka(tmp_path) as restarted:
        assert "kept" in topic_names(restarted.bootstrap)
        assert end_offsets(restarted.bootstrap, "kept") == {0: 1}


def test_start_on_a_busy_port_fails_fast(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        began = time.monotonic()
        with pytest.raises(KafkaUnavailable, match=f"port {port}"):
            EmbeddedKafka(tmp_path, port=port).start()
        assert time.monotonic() - began < 2
