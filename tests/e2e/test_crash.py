"""`router run` killed without warning and started again: every message still ends somewhere.

The job is a subprocess killed with SIGKILL (the driver and its JVM) while it is routing; the same
command then resumes from the checkpoint. Delivery is at least once: a batch that was not committed
is routed again, so a message may arrive twice, but none is missing.
"""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from processes import kill, new_namespace, read_outcome, start_router, stop, wait_for, written

from streaming import topics
from streaming.kafka.avro import encode_message, new_message_record
from streaming.rules.model import Database, Instance, Route, normalize_address

pytestmark = pytest.mark.e2e

MESSAGES = 6000
AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService", "Audit"))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=1.0)
FAR = ("TCP://a:4022", "TCP://b:4022")


def destinations(prefix: str) -> list[str]:
    """Every topic a message of this test can end in."""
    return [
        topics.queue_topic("i1", "AW", "Audit", prefix),
        *(topics.network_topic(normalize_address(a), prefix) for a in FAR),
        topics.delayed_topic("i1", prefix),
        topics.dropped_topic("i1", prefix),
        topics.deadletter_topic("i1", prefix),
    ]


def routed_ids(bootstrap: str, names: list[str]) -> Counter[str]:
    """How many times each message id was written to the destination topics."""
    return read_outcome(bootstrap, names).ids(*names)


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    routes = (
        Route("AW", "AutoCreatedLocal", "LOCAL"),
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
        *(Route("AW", f"Far{n}", address, service="Far") for n, address in enumerate(FAR)),
    )
    return new_namespace(kafka_bootstrap, "crash", I1, routes, destinations)


@pytest.fixture
def settings_file(tmp_path: Path, kafka_bootstrap: str, prefix: str) -> Path:
    path = tmp_path / "i1.yaml"
    path.write_text(
        f"instance: i1\nbootstrap: {kafka_bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {tmp_path / 'checkpoint'}\ntrigger_seconds: 0.5\nmax_offsets_per_trigger: 400\n",
        encoding="utf-8",
    )
    return path


def test_a_router_killed_mid_stream_resumes_and_loses_nothing(
    kafka_bootstrap: str,
    prefix: str,
    settings_file: Path,
    started: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    sent = []
    for n in range(MESSAGES):
        conversation = f"c{n // 3}"
        service = "Audit" if n % 4 == 0 else "Far"
        record = new_message_record(
            message_id=f"m{n}",
            conversation_id=conversation,
            sequence_number=n % 3,
            to_service=service,
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=datetime.now(timezone.utc),
            body=b"<x/>",
        )
        producer.produce(
            topics.outbound_topic("i1", prefix), key=conversation.encode(), value=encode_message(record)
        )
        sent.append(f"m{n}")
    assert producer.flush(60) == 0
    names = destinations(prefix)
    log = tmp_path / "router.log"

    first = start_router(settings_file, log, started)
    wait_for(lambda: written(kafka_bootstrap, names) > 0, 180, "first routed records", first, log)
    routed_before = written(kafka_bootstrap, names)
    kill(first)
    assert routed_before < MESSAGES, "the router finished before it was killed: nothing was interrupted"

    second = start_router(settings_file, log, started)
    wait_for(
        lambda: (
            written(kafka_bootstrap, names) >= MESSAGES
            and set(routed_ids(kafka_bootstrap, names)) >= set(sent)
        ),
        300,
        "every message routed after the restart",
        second,
        log,
    )
    # Ctrl-C (SIGINT to the process group, as a terminal sends it): the batch in flight finishes,
    # no other starts, and the process says so and exits 0, with no Java error on the way.
    output = stop(second, log)
    assert "stopped between micro-batches" in output
    assert "StackOverflowError" not in output and "Traceback" not in output, output[-3000:]

    counts = routed_ids(kafka_bootstrap, names)
    assert set(counts) == set(sent), "every message ends somewhere, and nothing else appears"
    far = routed_ids(kafka_bootstrap, names[1:3])
    audit = routed_ids(kafka_bootstrap, names[:1])
    assert set(audit) == {f"m{n}" for n in range(0, MESSAGES, 4)}
    assert set(far) == set(sent) - set(audit)
    # The conversations' kept choices are in Spark's state store, saved with the query's checkpoint.
    assert (tmp_path / "checkpoint" / "query" / "state").is_dir()


def test_sigterm_stops_the_router_between_micro_batches(
    kafka_bootstrap: str,
    prefix: str,
    settings_file: Path,
    started: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    """SIGTERM to the router's process (as `docker stop` sends it) stops it as Ctrl-C does: exit 0."""
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(50):
        record = new_message_record(
            message_id=f"t{n}",
            conversation_id=f"t{n}",
            sequence_number=0,
            to_service="Audit",
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=datetime.now(timezone.utc),
            body=b"<x/>",
        )
        producer.produce(topics.outbound_topic("i1", prefix), value=encode_message(record))
    assert producer.flush(60) == 0
    log = tmp_path / "router.log"
    router = start_router(settings_file, log, started)
    names = destinations(prefix)
    wait_for(lambda: written(kafka_bootstrap, names) >= 50, 180, "the 50 messages routed", router, log)
    router.send_signal(signal.SIGTERM)
    assert router.wait(120) == 0, log.read_text()[-3000:]
    output = log.read_text()
    assert "SIGTERM: stopping after the micro-batch in flight" in output
    assert "stopped between micro-batches" in output and "50 messages routed" in output, output[-2000:]
    assert "Traceback" not in output and "Exception" not in output, output[-3000:]
