"""The fault tier: `router run` as a user runs it, through crashes, stops, outages and poison.

Each test starts `router run` processes (tests/e2e/processes.py) on a namespace of its own and, at
the end, reads every topic a message can end in and accounts for every message id: delivered,
sent, delayed and then released, dropped with its reason, or dead-lettered. These tests take
minutes; they carry the `fault` marker (`pytest -m "not fault"` leaves them out) and CI runs them.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from processes import (
    TopicsRead,
    kill,
    new_namespace,
    read_outcome,
    records_with_headers,
    start_router,
    stop,
    wait_for,
    written,
)

from bench.common import encode_fast
from streaming import topics
from streaming.devtools.embedded_kafka import EmbeddedKafka, embedded_cluster, free_port
from streaming.errors import KafkaUnavailable
from streaming.kafka.admin import admin_client, cluster_metadata, ensure_topics
from streaming.kafka.avro import encode_message, encode_route, new_message_record, route_to_record
from streaming.rules.model import Database, Instance, Route, normalize_address
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = [pytest.mark.e2e, pytest.mark.fault]

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService", "Audit"))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
# retry_s: a delayed conversation is tried again every 5 s until its route is written.
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=5.0)
FAR = "TCP://far:4022"
LATE = "TCP://late:4022"
"""The next hop of the route written only at the end: messages to `Late` wait delayed until then."""


@dataclass
class Traffic:
    """The message ids a test sent, by where each must end."""

    audit: set[str] = field(default_factory=set)
    """To the local service Audit: delivered to its queue."""
    far: set[str] = field(default_factory=set)
    """To Far: sent to FAR's network topic."""
    late: set[str] = field(default_factory=set)
    """To Late: delayed (no route), released to LATE once its route is written."""
    inbound: set[str] = field(default_factory=set)
    """From another instance, to Far: i1's msdb table has no route for it, so they are dropped."""
    garbage: set[bytes] = field(default_factory=set)
    """Values that are no message: dead-lettered with their bytes."""

    @property
    def ids(self) -> set[str]:
        return self.audit | self.far | self.late | self.inbound


Layout = Callable[[str], object]
"""Lays a fresh namespace's topics out on the brokers (given its prefix) before anything writes to them."""


def namespace(bootstrap: str, layout: Layout | None = None) -> str:
    """A fresh prefix with i1's catalog and its routes (LOCAL in AW and msdb, Far to FAR)."""
    routes = (
        Route("AW", "AutoCreatedLocal", "LOCAL"),
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
        Route("AW", "Far", FAR, service="Far"),
    )

    def inputs(prefix: str) -> list[str]:
        if layout is not None:
            layout(prefix)
        return [topics.outbound_topic("i1", prefix), topics.inbound_topic("i1", prefix)]

    return new_namespace(bootstrap, "fault", I1, routes, inputs)


def lay_out(bootstrap: str, replicas: dict[str, list[list[int]]]) -> None:
    """Create each topic with its partitions' replicas on the given brokers, the first one leading;
    `min.insync.replicas` one fewer than the replicas (at least 1), as the router's default."""
    client = admin_client(bootstrap)
    requests = [
        NewTopic(
            name,
            num_partitions=len(assignment),  # this client wants both
            replica_assignment=assignment,
            config={"min.insync.replicas": str(max(1, len(assignment[0]) - 1))},
        )
        for name, assignment in replicas.items()
    ]
    for future in client.create_topics(requests, operation_timeout=30).values():
        future.result()
    ensure_topics(bootstrap, list(replicas))  # they exist: it waits for their leaders


def lone_message(ident: str, service: str, database: str, now: datetime) -> bytes:
    """A message from `database` to `service`, alone in its conversation `ident`, encoded."""
    record = new_message_record(
        message_id=ident,
        conversation_id=ident,
        to_service=service,
        from_service="InitiatorService",
        origin_database=database,
        enqueued_at=now,
    )
    return encode_message(record)


def destinations(prefix: str) -> dict[str, str]:
    """Every topic a message of these tests can end in, by what it holds."""
    return {
        "audit": topics.queue_topic("i1", "AW", "Audit", prefix),
        "far": topics.network_topic(normalize_address(FAR), prefix),
        "late": topics.network_topic(normalize_address(LATE), prefix),
        "delayed": topics.delayed_topic("i1", prefix),
        "dropped": topics.dropped_topic("i1", prefix),
        "deadletter": topics.deadletter_topic("i1", prefix),
    }


def send_traffic(bootstrap: str, prefix: str, messages: int, garbage: int = 0, *, tag: str = "m") -> Traffic:
    """`messages` messages, four per conversation, each conversation to one service; then `garbage`.

    The records are encoded unchecked (`encode_fast`, about 20 µs a record): made here, they fit
    the schema, and `encode_message`'s checks cost 80-110 µs a record, some 16 s for 200,000."""
    traffic = Traffic()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 500_000}
    )
    now = datetime.now(timezone.utc)
    outbound, inbound = topics.outbound_topic("i1", prefix), topics.inbound_topic("i1", prefix)
    for n in range(messages):
        c = n // 4
        ident, conversation = f"{tag}{n}", f"{tag}c{c}"
        if c % 100 == 0:
            kind = "late"
        elif c % 20 < 4:
            kind = ("inbound", "inbound", "audit", "audit")[c % 20]
        else:
            kind = "far"
        getattr(traffic, kind).add(ident)
        record = new_message_record(
            message_id=ident,
            conversation_id=conversation,
            sequence_number=n % 4,
            to_service={"late": "Late", "audit": "Audit"}.get(kind, "Far"),
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=now,
            body=b"<x/>",
        )
        topic = inbound if kind == "inbound" else outbound
        while True:
            try:
                producer.produce(topic, encode_fast(record), conversation.encode())
                break
            except BufferError:
                producer.poll(0.1)
    for n in range(garbage):
        value = f"garbage-{tag}-{n}".encode()
        traffic.garbage.add(value)
        producer.produce(outbound, value, f"g{n}".encode())
    assert producer.flush(120) == 0
    return traffic


def settings_file(folder: Path, bootstrap: str, prefix: str, per_trigger: int) -> Path:
    path = folder / "i1.yaml"
    path.write_text(
        f"instance: i1\nbootstrap: {bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {folder / 'checkpoint'}\ntrigger_seconds: 0.5\n"
        f"max_offsets_per_trigger: {per_trigger}\n",
        encoding="utf-8",
    )
    return path


class Stream(NamedTuple):
    """20,000 messages in a fresh namespace whose late service has its route, and `router run`'s
    settings for it (2,500 messages a trigger), its log file, and the topics the messages end in."""

    prefix: str
    traffic: Traffic
    settings: Path
    log: Path
    names: list[str]


def late_routed_stream(
    bootstrap: str, folder: Path, garbage: int = 0, layout: Layout | None = None
) -> Stream:
    """The `Stream` of the stop and outage tests; `garbage` records follow the messages."""
    prefix = namespace(bootstrap, layout)
    traffic = send_traffic(bootstrap, prefix, 20_000, garbage=garbage)
    put_route(bootstrap, "i1", Route("AW", "Late", LATE, service="Late"), topics.routes_topic(prefix))
    settings = settings_file(folder, bootstrap, prefix, per_trigger=2_500)
    names = list(destinations(prefix).values())
    return Stream(prefix, traffic, settings, folder / "router.log", names)


def accounted(bootstrap: str, prefix: str, traffic: Traffic) -> Callable[[], bool]:
    """A check for `wait_for`: every message has reached its final destination. Each call reads
    only the records written since the one before (`TopicsRead`)."""
    d = destinations(prefix)
    final = sorted({d["audit"], d["far"], d["late"] if traffic.late else d["far"], d["dropped"]})
    expected = traffic.ids
    reading = TopicsRead(bootstrap, final)

    def check() -> bool:
        reading.outcome()
        return expected <= reading.ids

    return check


def assert_every_message_accounted_for(
    bootstrap: str, prefix: str, traffic: Traffic, max_copies: int, *, late_delayed: bool
) -> Counter[str]:
    """Each id is where it must be and nowhere else; no copies beyond `max_copies`; returns the counts.

    `late_delayed`: the route for the late messages was written after the router had read some of
    them, so those were delayed before they were released.
    """
    d = destinations(prefix)
    outcome = read_outcome(bootstrap, list(d.values()))
    assert set(outcome.ids(d["audit"])) == traffic.audit
    assert set(outcome.ids(d["far"])) == traffic.far
    assert set(outcome.ids(d["late"])) == traffic.late, "every late message is released to its route"
    delayed = set(outcome.ids(d["delayed"]))
    assert delayed <= traffic.late, "only messages without a route are delayed"
    if late_delayed:
        # Those read before their route was written; a kill may leave others unread until after.
        assert delayed, "late messages read before their route existed were delayed"
    assert set(outcome.ids(d["dropped"])) == traffic.inbound
    assert set(outcome.undecodable[d["deadletter"]]) == traffic.garbage
    final = outcome.ids(d["audit"], d["far"], d["late"], d["dropped"])
    assert max(final.values()) <= max_copies, final.most_common(3)
    return final


def test_five_kills_at_random_moments_lose_nothing(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Issue 12: 200,000 messages; `router run` killed with SIGKILL five times while it routes,
    started again each time; at the end every message is accounted for, and the only copies are
    of micro-batches that were in flight at a kill (at most one batch per kill)."""
    messages, kills, per_trigger = 200_000, 5, 10_000
    prefix = namespace(kafka_bootstrap)
    traffic = send_traffic(kafka_bootstrap, prefix, messages, garbage=1_000)
    settings = settings_file(tmp_path, kafka_bootstrap, prefix, per_trigger)
    log = tmp_path / "router.log"
    names = list(destinations(prefix).values())
    moments = random.Random(20261124)
    for _ in range(kills):
        before = written(kafka_bootstrap, names)
        router = start_router(settings, log, started)

        def routing(since: int = before) -> bool:
            return written(kafka_bootstrap, names) > since

        wait_for(routing, 300, "routing", router, log)
        time.sleep(moments.uniform(0.0, 6.0))
        kill(router)
    assert written(kafka_bootstrap, names) < messages, "every kill was meant to interrupt the stream"
    put_route(kafka_bootstrap, "i1", Route("AW", "Late", LATE, service="Late"), topics.routes_topic(prefix))
    router = start_router(settings, log, started)
    wait_for(accounted(kafka_bootstrap, prefix, traffic), 600, "every message", router, log)
    stop(router, log)
    final = assert_every_message_accounted_for(
        kafka_bootstrap, prefix, traffic, max_copies=1 + kills, late_delayed=True
    )
    # The conversations' kept choices are in Spark's state store, saved with the query's checkpoint.
    assert (tmp_path / "checkpoint" / "query" / "state").is_dir()
    copies = sum(count - 1 for count in final.values())
    # A kill can repeat at most the micro-batch in flight: its messages, and the delayed ones it released.
    assert copies <= kills * (per_trigger + len(traffic.late)), copies


def test_sigint_and_sigterm_mid_stream_stop_cleanly_and_a_restart_loses_nothing(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Issue 15: Ctrl-C and SIGTERM while 20,000 messages flow: each stop exits 0 between
    micro-batches with no traceback; restarts resume, and every message arrives exactly once."""
    prefix, traffic, settings, log, names = late_routed_stream(kafka_bootstrap, tmp_path, garbage=100)
    for sig in (signal.SIGINT, signal.SIGTERM):
        before = written(kafka_bootstrap, names)
        router = start_router(settings, log, started)

        def routing(since: int = before) -> bool:
            return written(kafka_bootstrap, names) > since

        wait_for(routing, 300, "routing", router, log)
        output = stop(router, log, sig)
        assert f"{sig.name}: stopping after the micro-batch in flight" in output
        assert "stopped between micro-batches" in output
        # Then this run's totals: what it routed before the stop.
        after_stop = output.rsplit("stopped between micro-batches", 1)[1]
        assert re.search(r"batch\(es\): [\d,]+ messages routed", after_stop), output[-3000:]
        assert "Traceback" not in output and "StackOverflowError" not in output, output[-3000:]
        assert "Exception" not in output, output[-3000:]
    assert written(kafka_bootstrap, names) < 20_000 + 100, "the stops were meant to interrupt the stream"
    router = start_router(settings, log, started)
    wait_for(accounted(kafka_bootstrap, prefix, traffic), 300, "every message", router, log)
    stop(router, log)
    # A stop between micro-batches repeats nothing: every message once.
    assert_every_message_accounted_for(kafka_bootstrap, prefix, traffic, max_copies=1, late_delayed=False)


def test_a_second_ctrl_c_stops_at_once_without_a_traceback_and_a_restart_loses_nothing(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Ctrl-C twice in a row: the first asks for a stop between micro-batches, the second ends the
    process at once with exit code 130 and one line, no traceback; the restart resumes from the
    checkpoint and loses nothing."""
    prefix, traffic, settings, log, names = late_routed_stream(kafka_bootstrap, tmp_path)
    router = start_router(settings, log, started)
    wait_for(lambda: written(kafka_bootstrap, names) > 0, 300, "routing", router, log)
    os.killpg(router.pid, signal.SIGINT)
    # The second once the first was taken (two signals before Python's handler runs count as one);
    # the stop that follows takes seconds (the batch in flight, the query's stop, Spark's).
    first, deadline = "SIGINT: stopping after the micro-batch in flight", time.monotonic() + 60
    while first not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(router.pid, signal.SIGINT)
    code = router.wait(60)
    output = log.read_text(errors="replace")
    assert code == 130, output[-3000:]
    assert "SIGINT again: stopping at once" in output, output[-3000:]
    assert "Traceback" not in output and "Exception" not in output, output[-3000:]
    router = start_router(settings, log, started)
    wait_for(accounted(kafka_bootstrap, prefix, traffic), 300, "every message", router, log)
    stop(router, log)
    # The batch the second Ctrl-C cut short may be written again, once.
    assert_every_message_accounted_for(kafka_bootstrap, prefix, traffic, max_copies=2, late_delayed=False)


OUTAGE_S = 15.0
"""How long the outage tests keep a broker away."""


def ride_out(
    bootstrap: str,
    folder: Path,
    started: list[subprocess.Popen[bytes]],
    away: Callable[[], object],
    back: Callable[[], object],
    layout: Layout | None = None,
    says: str | None = None,
) -> tuple[str, str]:
    """`router run` routes 20,000 messages; once the first are written, `away()` takes a broker away
    for `OUTAGE_S` and `back()` returns it: the router stays up, loses nothing, and copies at most a
    batch in flight. Returns the namespace's prefix and the router's log. `layout` places the input
    topics (and any other) before the router starts; `says`, words the router's log must show
    before it is stopped (on a fast machine it may have routed every message before the outage
    began: the line then comes from its broker watch, within seconds of the broker's return)."""
    prefix, traffic, settings, log, names = late_routed_stream(bootstrap, folder, layout=layout)
    router = start_router(settings, log, started)
    wait_for(lambda: written(bootstrap, names) > 0, 300, "routing", router, log)
    away()
    time.sleep(OUTAGE_S)
    assert router.poll() is None, f"the router ended while a broker was away:\n{log.read_text()[-3000:]}"
    back()

    every_message = accounted(bootstrap, prefix, traffic)

    def all_there() -> bool:
        # Just after its restart the broker may still refuse the check's own requests
        # (UNKNOWN_LEADER_EPOCH while it takes its partitions back): not yet, then.
        try:
            return every_message()
        except KafkaUnavailable:
            return False

    wait_for(all_there, 300, "every message", router, log)
    if says is not None:
        wait_for(lambda: says in log.read_text(errors="replace"), 60, repr(says), router, log)
    stop(router, log)
    assert_every_message_accounted_for(bootstrap, prefix, traffic, max_copies=2, late_delayed=False)
    return prefix, log.read_text()


def test_a_broker_stopped_and_started_mid_stream_loses_nothing(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Issue 15: the broker goes away for 15 s while 20,000 messages are routed and comes back on
    the same port: the router rides it out, loses nothing, and says so in two lines, not hundreds."""
    with tempfile.TemporaryDirectory(prefix="router-fault-kafka-") as state:
        broker = EmbeddedKafka(state, port=free_port())
        broker.start(detach=False)
        try:
            _, output = ride_out(
                broker.bootstrap,
                tmp_path,
                started,
                broker.stop,
                lambda: broker.start(detach=False),
                says="Kafka reachable again",
            )
            assert "Kafka unreachable" in output and "Kafka reachable again" in output, output[-3000:]
            assert output.count("Connection refused") <= 2, output[-3000:]
        finally:
            broker.stop()


def test_one_of_two_brokers_stopped_and_started_mid_stream_loses_nothing(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """A cluster of two brokers; the second, which leads one of the two partitions of each input
    topic, goes away for 15 s while 20,000 messages are routed, and comes back: its partitions have
    no leader meanwhile (the input topics have one replica each; the router's own get two, its
    default on two brokers), the first broker still answers, and the router loses nothing."""
    with (
        tempfile.TemporaryDirectory(prefix="router-fault-kafka-") as state,
        EmbeddedKafka(Path(state) / "one") as first,
        # It comes back on the same port, as a broker of a cluster does.
        EmbeddedKafka(Path(state) / "two", port=free_port(), joins=first) as second,
    ):
        bootstrap = first.bootstrap

        def one_replica_on_each(prefix: str) -> None:
            each = [[first.node_id], [second.node_id]]
            lay_out(
                bootstrap,
                {topics.outbound_topic("i1", prefix): each, topics.inbound_topic("i1", prefix): each},
            )

        # Away from the first records written: the rest of the 20,000 are read and written while
        # its partitions have no leader, or after it is back.
        prefix, output = ride_out(
            bootstrap,
            tmp_path,
            started,
            second.stop,
            lambda: second.start(detach=False),
            layout=one_replica_on_each,
        )
        outbound = cluster_metadata(bootstrap).topics[topics.outbound_topic("i1", prefix)]
        replicas = sorted(p.replicas[0] for p in outbound.partitions.values())
        assert replicas == [first.node_id, second.node_id], "each broker holds one input partition"
        assert "Traceback" not in output, output[-3000:]
        # The clients closed at the stop hand over lines about the outage they held: not shown.
        after_the_totals = output.rsplit("messages routed", 1)[1]
        assert "streaming.kafka.librdkafka" not in after_the_totals, output[-3000:]


def test_the_broker_leading_the_input_and_the_destination_stopped_and_started_mid_stream_loses_nothing(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Issue 43: three brokers, and every topic with three replicas and min.insync.replicas 2 (the
    router's default on three brokers). Node 2 leads every partition of i1's input topics and of
    Far's topic, where most messages go; it goes away for 15 s while 20,000 messages are routed,
    and comes back. Its partitions are led by the others meanwhile and writes (acks=all) still find
    two replicas in sync: nothing is lost, nothing stays stuck, and the router's console has one
    line for the outage, not a stack. Node 1 is not the one stopped: it is the cluster's only KRaft
    controller, the quorum's one voter, and with it away no leader could move at all, which is a
    different failure."""
    with (
        tempfile.TemporaryDirectory(prefix="router-fault-kafka-") as state,
        embedded_cluster(state, brokers=3) as nodes,
    ):
        first, second, third = nodes
        bootstrap = ",".join(node.bootstrap for node in nodes)
        led: list[str] = []

        def led_by_the_second(prefix: str) -> None:
            ids = (first.node_id, second.node_id, third.node_id)
            spread = [[ids[1], ids[0], ids[2]], [ids[1], ids[2], ids[0]]]
            inputs = [topics.outbound_topic("i1", prefix), topics.inbound_topic("i1", prefix)]
            far = topics.network_topic(normalize_address(FAR), prefix)
            lay_out(bootstrap, {**dict.fromkeys(inputs, spread), far: spread[:1]})
            led.extend([*inputs, far])

        def away() -> None:
            metadata = cluster_metadata(bootstrap).topics
            leaders = {name: {p.leader for p in metadata[name].partitions.values()} for name in led}
            assert all(found == {second.node_id} for found in leaders.values()), leaders
            second.stop()

        prefix, output = ride_out(
            bootstrap, tmp_path, started, away, lambda: second.start(detach=False), layout=led_by_the_second
        )

        # The topics the router made have three replicas, as the cluster has three brokers.
        made = [name for kind, name in destinations(prefix).items() if kind not in ("far",)]
        metadata = cluster_metadata(bootstrap).topics
        assert {name: {len(p.replicas) for p in metadata[name].partitions.values()} for name in made} == {
            name: {3} for name in made
        }
        # Nothing stays stuck: the second broker is back in sync on every partition it led.
        deadline = time.monotonic() + 60
        while True:
            metadata = cluster_metadata(bootstrap).topics
            behind = [
                (name, p.id, p.isrs)
                for name in led
                for p in metadata[name].partitions.values()
                if len(p.isrs) < 3
            ]
            if not behind:
                break
            assert time.monotonic() < deadline, f"replicas still out of sync after 60 s: {behind}"
            time.sleep(0.5)
        # One line says the broker went away, and, if the router still ran when the watch saw it
        # back, one that it came back; no stack, and no client's repeats.
        assert "Traceback" not in output and "\tat " not in output, output[-3000:]
        broker = f"Kafka broker {second.node_id} ({second.bootstrap})"
        assert output.count(f"{broker} is away") == 1, output[-3000:]
        assert output.count(f"{broker} is back") <= 1, output[-3000:]
        assert output.count("Kafka unreachable") == 0, output[-3000:]


def poison(n: int, now: datetime) -> tuple[str, bytes | None]:
    """The `n`th of ten kinds of malformed records: (the dead-letter error it must get, its value)."""
    kind = n % 10

    def valid(**fields: object) -> bytes:
        record = new_message_record(
            message_id=f"p{n}",
            conversation_id=f"pc{n}",
            to_service="Audit",
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=now,
        )
        record.update(fields)
        return encode_message(record)

    whole = valid()
    cases: list[tuple[str, bytes | None]] = [
        ("value does not decode", random.Random(n).randbytes(40)),
        ("value does not decode", whole[: len(whole) // 2]),
        ("bytes after its Avro router.v1.Message", whole + b"\x00junk"),
        ("empty record", None),
        ("to_service is empty", valid(to_service="")),
        # A hundred of them 100 KB long, as a hostile client might send; the rest 300 characters.
        ("to_service is longer than 256", valid(to_service="S" * (100_000 if n < 1_000 else 300))),
        ("origin_database is not a database of this instance", valid(origin_database="Elsewhere")),
        ("to_broker_instance is not a GUID", valid(to_broker_instance="not-a-guid")),
        ("origin_database is longer than 128", valid(origin_database="D" * 129)),
        ("to_service is longer than 256", valid(to_service="s" * 257)),
    ]
    return cases[kind]


def test_poison_records_and_unwritable_destinations_cost_only_themselves(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Issue 15: 10,000 malformed records of ten kinds, messages to a queue whose name is far past
    Kafka's 249 characters before it is cut, and messages to a topic the broker refuses, all among
    valid traffic: the malformed ones are dead-lettered with their error, the long name is cut
    and delivered, the refused ones are dropped with `destination_unavailable`, and the stream
    goes on routing what comes after."""
    long_db = Database("D" * 100, "0c0c0c0c-0000-0000-0000-000000000001", True, ("Audit" + "x" * 90,))
    instance = Instance("i1", "TCP://i1:4022", (AW, MSDB, long_db), retry_s=5.0)
    prefix = "p" * 120  # legal: 1 to 150 of [A-Za-z0-9._-]
    publish_catalogs(kafka_bootstrap, [instance], topics.catalogs_topic(prefix))
    for route in (Route("AW", "AutoCreatedLocal", "LOCAL"), Route(long_db.name, "AutoCreatedLocal", "LOCAL")):
        put_route(kafka_bootstrap, "i1", route, topics.routes_topic(prefix))
    long_queue = topics.queue_topic("i1", long_db.name, long_db.services[0], prefix)
    audit = topics.queue_topic("i1", "AW", "Audit", prefix)
    refused = topics.queue_topic("i1", "AW", "InitiatorService", prefix)
    ensure_topics(kafka_bootstrap, [refused.replace(".", "_")])  # Kafka refuses a name colliding with it
    outbound = topics.outbound_topic("i1", prefix)
    ensure_topics(kafka_bootstrap, [outbound], partitions=2)
    now = datetime.now(timezone.utc)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    expected: Counter[str] = Counter()
    sent: dict[str, set[str]] = {"audit": set(), "long": set(), "refused": set()}
    for n in range(10_000):
        error, value = poison(n, now)
        expected[error] += 1
        producer.produce(outbound, value, f"pc{n}".encode())
        if n % 10 == 0:  # beside each ten poison records, one of each valid kind
            for kind, database, service in (
                ("audit", "AW", "Audit"),
                ("long", long_db.name, long_db.services[0]),
                ("refused", "AW", "InitiatorService"),
            ):
                ident = f"{kind}{n}"
                sent[kind].add(ident)
                producer.produce(outbound, lone_message(ident, service, database, now), ident.encode())
    assert producer.flush(60) == 0
    assert len(long_queue) == topics.MAX_TOPIC
    settings = settings_file(tmp_path, kafka_bootstrap, prefix, per_trigger=2_000)
    log = tmp_path / "router.log"
    router = start_router(settings, log, started)
    dropped, deadletter = topics.dropped_topic("i1", prefix), topics.deadletter_topic("i1", prefix)
    names = [audit, long_queue, dropped, deadletter]
    total = 10_000 + 3 * 1_000
    wait_for(lambda: written(kafka_bootstrap, names) >= total, 600, "every record's fate", router, log)
    # The stream goes on: a message sent now is routed too.
    producer.produce(outbound, lone_message("after", "Audit", "AW", now), b"after")
    assert producer.flush(30) == 0
    wait_for(
        lambda: "after" in read_outcome(kafka_bootstrap, [audit]).ids(audit),
        120,
        "a later message",
        router,
        log,
    )
    stop(router, log)

    outcome = read_outcome(kafka_bootstrap, names)
    assert set(outcome.ids(audit)) == sent["audit"] | {"after"}
    assert set(outcome.ids(long_queue)) == sent["long"]
    assert set(outcome.ids(dropped)) == sent["refused"]
    dead = read_headers(kafka_bootstrap, deadletter)
    assert len(dead) == 10_000
    found: Counter[str] = Counter()
    for headers in dead:
        found[next(e for e in expected if e in headers["error"])] += 1
    assert found == expected
    refused_headers = read_headers(kafka_bootstrap, dropped)
    assert {(h["reason"], h["destination"]) for h in refused_headers} == {
        ("destination_unavailable", refused)
    }
    output = log.read_text()
    assert output.count(f"messages for {refused} go to") <= 1, "one line per unwritable destination"
    assert "Traceback" not in output, output[-3000:]


def read_headers(bootstrap: str, topic: str) -> list[dict[str, str]]:
    """The headers of every record of `topic` now, as text."""
    return [headers for headers, _ in records_with_headers(bootstrap, topic)]


def test_garbage_on_the_routes_topic_is_skipped_with_a_warning_and_routing_goes_on(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Issue 15: random bytes and a route with an invalid address written straight to the routes
    topic while `router run` runs: each is skipped with one warning naming its offset, and a valid
    route written after them is used for the next messages; `routes list` still lists the table."""
    prefix = namespace(kafka_bootstrap)
    routes = topics.routes_topic(prefix)
    traffic = send_traffic(kafka_bootstrap, prefix, 400)
    settings = settings_file(tmp_path, kafka_bootstrap, prefix, per_trigger=1_000)
    log = tmp_path / "router.log"
    router = start_router(settings, log, started)
    d = destinations(prefix)
    wait_for(lambda: written(kafka_bootstrap, [d["far"]]) > 0, 300, "routing", router, log)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(routes, random.Random(7).randbytes(64), b"i1/AW/Junk")
    bad = route_to_record(Route("AW", "BadAddress", "TCP://x:1", service="Late"))
    bad["address"] = "not an address"
    producer.produce(routes, encode_route(bad), b"i1/AW/BadAddress")
    assert producer.flush(30) == 0
    put_route(kafka_bootstrap, "i1", Route("AW", "Late", LATE, service="Late"), routes)
    wait_for(accounted(kafka_bootstrap, prefix, traffic), 300, "every message", router, log)
    stop(router, log)
    assert_every_message_accounted_for(kafka_bootstrap, prefix, traffic, max_copies=1, late_delayed=False)
    output = log.read_text()
    assert output.count(f"skipped {routes}[0]@") == 2, output[-3000:]
    assert "got 'not an address'" in output
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming.cli",
            "routes",
            "list",
            "--bootstrap",
            kafka_bootstrap,
            "--topic-prefix",
            prefix,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "2 record(s) skipped" in listed.stdout + listed.stderr
    assert "Late" in listed.stdout and "BadAddress" not in listed.stdout
