"""Two copies of each routing service, one killed mid-stream: the other takes its work, nothing lost.

The dynamic routing service (`router directory serve`) keeps no state of its own: two copies with
one consumer group share its queue, and a killed copy's partitions go to the other when its group
session ends (10 s). A data-dependent routing service (`router ddr serve`) holds its dialogs and
mappings in a store file: the second copy on the same store is a standby that takes the store, and
with it the conversations, when the first dies (a lock beside the store says who serves it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from processes import ROOT, records_with_headers, start_router, wait_for
from test_directory_cli import DIRECTORY, I1, missing_route

from streaming import topics
from streaming.endpoint import Endpoint
from streaming.kafka.admin import ensure_topics
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, Database, Instance, Route
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = [pytest.mark.e2e, pytest.mark.fault]


def cli(command: list[str], log: Path, started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """`router COMMAND` as a process group of its own (SIGKILL reaches its JVM too), logged to `log`."""
    process = subprocess.Popen(
        [sys.executable, "-m", "streaming.cli", *command],
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started.append(process)
    return process


def crash(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the copy's process group: no goodbye to its consumer group, no store closed."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def sharing(bootstrap: str, group: str) -> int:
    """How many members of `group` have partitions assigned now (0 while it is rebalancing)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer comes
    members = admin.describe_consumer_groups([group])[group].result(timeout=10).members
    return sum(1 for m in members if m.assignment is not None and m.assignment.topic_partitions)


def answered_requests(bootstrap: str, prefix: str) -> set[str]:
    """The request ids the requests topic holds an end (`asked: false`) for."""
    ends = [json.loads(v) for _, v in records_with_headers(bootstrap, topics.requests_topic("i1", prefix))]
    return {e["request_id"] for e in ends if e["asked"] is False}


def test_two_directory_copies_one_killed_the_other_answers_every_request(
    kafka_bootstrap: str, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    prefix = f"dirha{uuid.uuid4().hex[:8]}"
    publish_catalogs(kafka_bootstrap, [I1], topics.catalogs_topic(prefix))
    queue = topics.queue_topic("i1", "AW", BROKER_CONFIGURATION_SERVICE, prefix)
    ensure_topics(kafka_bootstrap, [queue], partitions=2)  # a partition for each copy
    directory = tmp_path / "directory.yaml"
    directory.write_text(DIRECTORY)
    group = f"directory-{prefix}"
    serve = ["directory", "serve", str(directory), "--instance", "i1", "--group", group]
    serve += ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    copies = [cli(serve, log, started) for log in logs]
    for copy, log in zip(copies, logs, strict=True):

        def serving(log: Path = log) -> bool:
            return "Ctrl-C stops" in log.read_text()

        wait_for(serving, 120, "the copy's start", copy, log)
    # Both in the group, a partition each, before the first request: else the first copy may answer
    # every request before the second has joined.
    wait_for(
        lambda: sharing(kafka_bootstrap, group) == 2, 120, "a partition for each copy", copies[1], logs[1]
    )

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})

    def requests(first: int, count: int) -> set[str]:
        ids = {f"req-{n}" for n in range(first, first + count)}
        for request_id in sorted(ids):
            producer.produce(queue, key=request_id.encode(), value=missing_route(request_id, "Remote"))
        assert producer.flush(30) == 0
        return ids

    before = requests(0, 200)
    wait_for(
        lambda: before <= answered_requests(kafka_bootstrap, prefix),
        120,
        "the first answers",
        copies[0],
        logs[0],
    )
    lines = [log.read_text().count("asked for Remote") for log in logs]
    assert all(lines), f"each copy answers the requests of its partition: {lines}"

    crash(copies[0])
    killed = time.monotonic()
    after = requests(200, 300)
    wait_for(
        lambda: after <= answered_requests(kafka_bootstrap, prefix), 120, "every answer", copies[1], logs[1]
    )
    took = time.monotonic() - killed
    survivor = logs[1].read_text()
    assert survivor.count("asked for Remote") >= lines[1] + 300, "the survivor answered every later request"
    assert "Traceback" not in survivor, survivor[-3000:]
    assert answered_requests(kafka_bootstrap, prefix) == before | after
    print(f"the survivor answered the 300 requests sent after the kill within {took:.1f} s")


AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService",))
SALES = Database("Sales", "0b0b0b0b-0000-0000-0000-000000000001", True, ("SalesRouter",))
EAST = Database("East", "0c0c0c0c-0000-0000-0000-000000000001", True, ("SalesEast",))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
DDR_I1 = Instance("i1", "TCP://i1:4022", (AW, SALES, EAST, MSDB), retry_s=2.0)
FORWARD = """
routing_service:
  service: SalesRouter
  database: Sales
  mode: forward
  classifier: "xpath_string(cast(body as string), '/message/toServiceName')"
"""
DIALOGS = 60


def test_a_ddr_standby_takes_over_the_killed_copy_s_conversations_and_loses_none(
    kafka_bootstrap: str, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    prefix = f"ddrha{uuid.uuid4().hex[:8]}"
    publish_catalogs(kafka_bootstrap, [DDR_I1], topics.catalogs_topic(prefix))
    for database in (AW, SALES, EAST):
        put_route(
            kafka_bootstrap,
            "i1",
            Route(database.name, "AutoCreatedLocal", "LOCAL"),
            topics.routes_topic(prefix),
        )
    settings = tmp_path / "i1.yaml"
    settings.write_text(
        f"instance: i1\nbootstrap: {kafka_bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {tmp_path / 'checkpoint'}\ntrigger_seconds: 0.5\n",
        encoding="utf-8",
    )
    router_log = tmp_path / "router.log"
    router = start_router(settings, router_log, started)
    config = tmp_path / "sales.yaml"
    config.write_text(FORWARD)
    serve = ["ddr", "serve", str(config), "--instance", "i1", "--store", str(tmp_path / "sales-router.db")]
    serve += ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    logs = [tmp_path / "ddr-a.log", tmp_path / "ddr-b.log"]
    first = cli(serve, logs[0], started)
    wait_for(lambda: "Ctrl-C stops" in logs[0].read_text(), 180, "the first copy's start", first, logs[0])
    second = cli(serve, logs[1], started)
    wait_for(lambda: "standby: process" in logs[1].read_text(), 180, "the standby's start", second, logs[1])

    stop = threading.Event()
    failures: list[BaseException] = []

    def region() -> None:
        """SalesEast answers each message with `SalesEast:` and its body."""
        try:
            with Endpoint(
                kafka_bootstrap,
                instance="i1",
                database="East",
                service="SalesEast",
                store=tmp_path / "east.db",
                prefix=prefix,
                retry_first_s=2.0,
            ) as endpoint:
                while not stop.is_set():
                    for m in endpoint.receive(timeout_s=0.5):
                        if not (m.is_end_dialog or m.is_error):
                            m.dialog.send(b"SalesEast:" + m.body, "Reply")
        except BaseException as error:  # reported below
            failures.append(error)

    east = threading.Thread(target=region, daemon=True)
    east.start()
    replies: dict[str, list[bytes]] = {}
    sent: dict[str, bytes] = {}
    try:
        with Endpoint(
            kafka_bootstrap,
            instance="i1",
            database="AW",
            service="InitiatorService",
            store=tmp_path / "initiator.db",
            prefix=prefix,
            retry_first_s=2.0,
        ) as initiator:

            def begin(n: int) -> None:
                body = f"<message><toServiceName>SalesEast</toServiceName><n>{n}</n></message>".encode()
                dialog = initiator.begin_dialog("SalesRouter")
                dialog.send(body)
                sent[dialog.conversation_id] = body

            def pump_until(done: int, timeout_s: float, what: str) -> None:
                deadline = time.monotonic() + timeout_s
                while sum(1 for c in sent if replies.get(c)) < done:
                    assert not failures, failures
                    assert time.monotonic() < deadline, (
                        f"{what}: {sum(1 for c in sent if replies.get(c))} of {done} replies in "
                        f"{timeout_s} s\n{logs[0].read_text()[-1500:]}\n{logs[1].read_text()[-1500:]}"
                    )
                    for m in initiator.receive(timeout_s=0.5):
                        if m.message_type == "Reply":
                            replies.setdefault(m.dialog.conversation_id, []).append(m.body)

            for n in range(DIALOGS // 2):
                begin(n)
            pump_until(DIALOGS // 6, 300, "before the kill")
            crash(first)  # mid-stream: some conversations answered, the rest in flight through it
            for n in range(DIALOGS // 2, DIALOGS):
                begin(n)
            pump_until(DIALOGS, 300, "after the kill")
    finally:
        stop.set()
        east.join(60)
    assert not failures, failures
    taking = logs[1].read_text()
    assert "taking over" in taking, taking[-3000:]
    assert "Traceback" not in taking, taking[-3000:]
    assert {c: replies[c] for c in sent} == {c: [b"SalesEast:" + body] for c, body in sent.items()}, (
        "each conversation got its one reply, through whichever copy served it"
    )
    assert router.poll() is None, router_log.read_text()[-3000:]
