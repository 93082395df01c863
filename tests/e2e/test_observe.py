"""Issue 42: `router run --metrics-port` as a user runs it: Prometheus metrics that count what the
run's lines and totals print, delayed gauges from the state processor, and `/healthz` following the
broker away and back."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from processes import ROOT, stop, wait_for, written
from prometheus_client.parser import text_string_to_metric_families

from streaming import topics
from streaming.devtools.embedded_kafka import EmbeddedKafka, free_port
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import encode_message, new_message_record
from streaming.kafka.progress_group import read_committed
from streaming.rules.model import Database, Instance, Route, normalize_address
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = pytest.mark.e2e

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService", "Audit"))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
F1_MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000002", True, ())
# retry_s well above a micro-batch's length (2.5-4.5 s on a busy machine): a delayed message read
# back from the delayed topic is held until it is due (D2). With batches longer than retry_s it is
# already due when read, leaves in the same batch, and the state holds nothing at any batch's end
# (the gauge is then rightly 0, and the test could not see D1).
RETRY_S = 10.0
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=RETRY_S)
F1 = Instance("f1", "TCP://f1:4022", (F1_MSDB,), forwarding=True, retry_s=RETRY_S)
FAR, ONWARD, LATE = "TCP://far:4022", "TCP://onward:4022", "TCP://late:4022"
Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def health(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, {}


def total(got: Scrape, name: str, **labels: str) -> float:
    """The sum of `name`'s series whose labels include `labels`."""
    return sum(v for (n, ls), v in got.items() if n == name and set(labels.items()) <= set(ls))


@dataclass(frozen=True)
class Printed:
    """What the router's lines printed: the sums of its batch lines, or its totals line."""

    outcomes: Counter[str]
    released: int
    dead_lettered: int


def batch_lines(log: str) -> Printed:
    """The sums of every batch line printed so far."""
    outcomes: Counter[str] = Counter()
    released = dead = 0
    for line in re.findall(r"router run: batch \d+: .*", log):
        for outcome, n in re.findall(r"\b(deliver|send|forward|delayed|dropped|discarded) ([\d,]+)", line):
            outcomes[outcome] += int(n.replace(",", ""))
        released += sum(int(n.replace(",", "")) for n in re.findall(r"released ([\d,]+)", line))
        dead += sum(int(n.replace(",", "")) for n in re.findall(r"dead-lettered ([\d,]+)", line))
    return Printed(outcomes, released, dead)


def totals_line(log: str) -> Printed:
    """The sums of the run's totals line (`N batch(es): M messages routed (...), R of them released ...`)."""
    line = re.findall(r"router run: \d+ batch\(es\): .*", log)[-1]
    outcomes: Counter[str] = Counter()
    for n, outcome in re.findall(r"([\d,]+) (deliver|send|forward|delayed|dropped|discarded)\b", line):
        outcomes[outcome] += int(n.replace(",", ""))
    released = re.search(r"([\d,]+) of them released", line)
    dead = re.search(r"([\d,]+) dead-lettered", line)
    assert released and dead, f"expected the released and dead-lettered counts in: {line}"
    return Printed(outcomes, int(released[1].replace(",", "")), int(dead[1].replace(",", "")))


def scraped(got: Scrape) -> Printed:
    outcomes: Counter[str] = Counter()
    for (name, labels), v in got.items():
        if name == "router_messages_total":
            outcomes[dict(labels)["outcome"]] += int(v)
    return Printed(
        outcomes, int(total(got, "router_released_total")), int(total(got, "router_deadletter_total"))
    )


def at_least(big: Printed, small: Printed) -> bool:
    return (
        all(big.outcomes[o] >= n for o, n in small.outcomes.items())
        and big.released >= small.released
        and big.dead_lettered >= small.dead_lettered
    )


def start(
    settings: Path, log: Path, port: int, started: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streaming.cli",
            "run",
            "--config",
            str(settings),
            "--metrics-port",
            str(port),
        ],
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started.append(process)
    return process


def message(ident: str, conversation: str, service: str, *, hops: int = 16, database: str = "AW") -> bytes:
    record = new_message_record(
        message_id=ident,
        conversation_id=conversation,
        to_service=service,
        from_service="InitiatorService",
        origin_database=database,
        enqueued_at=datetime.now(timezone.utc),
        hops_remaining=hops,
    )
    return encode_message(record)


def test_the_metrics_count_what_the_run_prints_while_it_runs_and_after(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Several thousand messages with every outcome and reason through two instances in one query
    (i1, and f1 which forwards): at every scrape while it runs the counters hold at least what the
    batch lines printed before it; once everything is routed they equal the run's totals line, by
    outcome, released and dead-lettered; the delayed gauges rise while messages wait (D1) and fall
    back to 0 once they are released (D2); the lag, snapshot and build series are there, and the
    consumer group holds the router's offsets."""
    bootstrap, prefix = kafka_bootstrap, f"observe{time.time_ns() % 10**9}"
    publish_catalogs(bootstrap, [I1, F1], topics.catalogs_topic(prefix))
    routes_topic = topics.routes_topic(prefix)
    for instance, route in (
        ("i1", Route("AW", "AutoCreatedLocal", "LOCAL")),
        ("i1", Route("AW", "Far", FAR, service="Far")),
        ("i1", Route("AW", "ViaF1", F1.address, service="Onward")),
        ("f1", Route("msdb", "Onward", ONWARD, service="Onward")),
    ):
        put_route(bootstrap, instance, route, routes_topic)
    # A destination Kafka refuses: a topic that collides with the InitiatorService queue's name.
    refused = topics.queue_topic("i1", "AW", "InitiatorService", prefix)
    ensure_topics(bootstrap, [refused.replace(".", "_")])
    i1_out, i1_in, f1_in = (
        topics.outbound_topic("i1", prefix),
        topics.inbound_topic("i1", prefix),
        topics.inbound_topic("f1", prefix),
    )
    ensure_topics(bootstrap, [i1_out, i1_in, f1_in], partitions=2)
    sent: Counter[str] = Counter()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n in range(600):
        for kind, topic, service, hops in (
            ("audit", i1_out, "Audit", 16),  # deliver
            ("far", i1_out, "Far", 16),  # send
            ("onward", i1_out, "Onward", 16),  # send to f1, then forward by f1
            ("refused", i1_out, "InitiatorService", 16),  # dropped: destination_unavailable
            ("inbound", i1_in, "Nowhere", 16),  # dropped: no_route (remote, S3)
            ("spent", f1_in, "Onward", 0),  # discarded: hops_exhausted (F3)
        ):
            producer.produce(
                topic, message(f"{kind}{n}", f"{kind}c{n}", service, hops=hops), f"{kind}c{n}".encode()
            )
            sent[kind] += 1
        if n % 6 == 0:
            producer.produce(
                i1_out, message(f"late{n}", f"latec{n}", "Late"), f"latec{n}".encode()
            )  # delayed
            sent["late"] += 1
        if n % 20 == 0:
            producer.produce(i1_out, f"garbage-{n}".encode(), f"g{n}".encode())  # dead letter
            sent["garbage"] += 1
    assert producer.flush(60) == 0
    port = free_port()
    settings = tmp_path / "router.yaml"
    settings.write_text(
        f"instances: [i1, f1]\nbootstrap: {bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {tmp_path / 'checkpoint'}\ntrigger_seconds: 0.5\nmax_offsets_per_trigger: 500\n",
        encoding="utf-8",
    )
    log = tmp_path / "router.log"
    router = start(settings, log, port, started)
    wait_for(lambda: health(port)[0] == 200, 300, "a healthy router", router, log)
    delayed = topics.delayed_topic("i1", prefix)
    held_seen = 0.0
    late = topics.network_topic(normalize_address(LATE), prefix)
    # While it runs: a scrape counts at least what the lines printed before it.
    deadline = time.monotonic() + 300
    while written(bootstrap, [delayed]) < sent["late"] and time.monotonic() < deadline:
        before = batch_lines(log.read_text())
        got = scrape(port)
        assert at_least(scraped(got), before), (scraped(got), before)
        held_seen = max(held_seen, total(got, "router_delayed_messages", instance="i1"))
        time.sleep(0.3)

    def held_now() -> float:
        nonlocal held_seen
        value = total(scrape(port), "router_delayed_messages", instance="i1")
        held_seen = max(held_seen, value)
        return value

    wait_for(lambda: held_now() > 0, 60, "delayed messages held (D1)", router, log)
    got = scrape(port)
    assert total(got, "router_delayed_conversations", instance="i1") > 0
    assert 0 <= total(got, "router_delayed_oldest_seconds", instance="i1") < 60
    # The late service's route appears: the held messages are released (D2) and sent.
    put_route(bootstrap, "i1", Route("AW", "Late", LATE, service="Late"), routes_topic)
    wait_for(
        lambda: written(bootstrap, [late]) >= sent["late"], 120, "the late messages released", router, log
    )
    wait_for(lambda: held_now() == 0, 60, "nothing held", router, log)
    ends = {
        topics.queue_topic("i1", "AW", "Audit", prefix): sent["audit"],
        topics.network_topic(normalize_address(FAR), prefix): sent["far"],
        topics.network_topic(normalize_address(ONWARD), prefix): sent["onward"],
        topics.dropped_topic("i1", prefix): sent["inbound"] + sent["refused"],
        topics.dropped_topic("f1", prefix): sent["spent"],
        topics.deadletter_topic("i1", prefix): sent["garbage"],
    }
    wait_for(
        lambda: all(written(bootstrap, [topic]) >= n for topic, n in ends.items()),
        120,
        "every message at its end",
        router,
        log,
    )
    # Everything is routed: wait for the batch lines to catch up with the counters, then stop.
    final: Scrape = {}

    def settled() -> bool:
        nonlocal final
        final = scrape(port)
        return scraped(final) == batch_lines(log.read_text())

    wait_for(settled, 60, "the lines to show every batch counted", router, log)
    output = stop(router, log)
    printed = totals_line(output)
    assert scraped(final) == printed, (scraped(final), printed)
    assert printed.dead_lettered == sent["garbage"]
    assert printed.released >= sent["late"]
    # By reason and instance, as the rules decide them.
    assert total(final, "router_messages_total", instance="i1", outcome="deliver") == sent["audit"]
    assert total(final, "router_messages_total", instance="i1", outcome="send") == (
        sent["far"] + sent["onward"] + sent["late"]
    )
    assert total(final, "router_messages_total", instance="f1", outcome="forward") == sent["onward"]
    assert (
        total(final, "router_messages_total", instance="f1", outcome="discarded", reason="hops_exhausted")
        == (sent["spent"])
    )
    assert (
        total(final, "router_messages_total", instance="i1", outcome="dropped", reason="no_route")
        == (sent["inbound"])
    )
    assert (
        total(
            final, "router_messages_total", instance="i1", outcome="dropped", reason="destination_unavailable"
        )
        == sent["refused"]
    )
    assert (
        total(final, "router_destination_unavailable_total", instance="i1", topic=refused) == sent["refused"]
    )
    # Late has no route of its own: AW's wildcard LOCAL route (M5) finds no such local service.
    delayed_late = total(
        final, "router_messages_total", instance="i1", outcome="delayed", reason="service_not_found"
    )
    assert delayed_late >= sent["late"]
    assert total(final, "router_messages_total", instance="i1", outcome="delayed") == delayed_late
    assert total(final, "router_deadletter_total", instance="i1") == sent["garbage"]
    assert total(final, "router_released_total", instance="i1") == printed.released
    assert total(final, "router_input_lag_records", instance="i1", topic=i1_out) == 0
    assert total(final, "router_snapshot_routes", instance="i1") == 4
    assert total(final, "router_snapshot_routes", instance="f1") == 1
    assert total(final, "router_build_info", instance="f1") == 1
    # The tick runs idle batches after the last scrape too: the run counts at least those scraped.
    batches = re.findall(r"router run: (\d+) batch\(es\)", output)[-1]
    assert 0 < total(final, "router_batches_total", instance="i1") <= int(batches)
    assert total(final, "router_batches_total", instance="f1") == total(
        final, "router_batches_total", instance="i1"
    )
    assert held_seen > 0
    # The router's progress, in Kafka's own terms: its group holds the offsets it read up to.
    committed = read_committed(bootstrap, topics.router_group("i1", prefix), [(i1_out, 0), (i1_out, 1)])
    assert sum(n for (topic, _), n in committed.offsets.items() if topic == i1_out) == written(
        bootstrap, [i1_out]
    )
    assert committed.batch is not None and committed.at_ms is not None
    # A restart in a new process reads what the state holds delayed from the checkpoint first
    # (the gauges appear once it has): nothing, everything having been released.
    router = start(settings, log, port, started)
    wait_for(
        lambda: health(port)[0] == 200 and ("router_delayed_messages", (("instance", "i1"),)) in scrape(port),
        300,
        "the delayed gauges after a restart",
        router,
        log,
    )
    assert total(scrape(port), "router_delayed_messages", instance="i1") == 0
    output = stop(router, log)
    assert "could not read the delayed messages" not in output, output[-3000:]


@pytest.mark.fault
def test_healthz_is_503_while_the_broker_is_away_and_200_once_it_is_back(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Issue 42 §2: with a bound of 6 s, `/healthz` answers 200 while micro-batches finish, 503 with
    the reason (the batches stopped, Kafka does not answer) while the broker is stopped, and 200 again
    once it is started; the router stays up throughout."""
    with tempfile.TemporaryDirectory(prefix="router-observe-kafka-") as state:
        broker = EmbeddedKafka(state, port=free_port())
        broker.start(detach=False)
        try:
            bootstrap, prefix = broker.bootstrap, "health"
            publish_catalogs(bootstrap, [I1], topics.catalogs_topic(prefix))
            put_route(bootstrap, "i1", Route("AW", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(prefix))
            port = free_port()
            settings = tmp_path / "router.yaml"
            settings.write_text(
                f"instance: i1\nbootstrap: {bootstrap}\ntopic_prefix: {prefix}\n"
                f"checkpoint_dir: {tmp_path / 'checkpoint'}\ntrigger_seconds: 0.5\nhealth_stale_s: 6\n",
                encoding="utf-8",
            )
            log = tmp_path / "router.log"
            router = start(settings, log, port, started)
            wait_for(lambda: health(port)[0] == 200, 300, "a healthy router", router, log)
            _, body = health(port)
            assert body["status"] == "ok" and body["instances"] == ["i1"] and body["bound_s"] == 6.0
            broker.stop()
            answers: list[dict[str, object]] = []

            def unhealthy_naming_kafka() -> bool:
                status, body = health(port)
                answers.append(body)
                return status == 503 and "Kafka does not answer" in str(body.get("reason"))

            wait_for(unhealthy_naming_kafka, 60, "503 naming Kafka", router, log)
            reason = str(answers[-1]["reason"])
            assert reason.startswith("no micro-batch has finished for "), reason
            assert f"Kafka does not answer at {bootstrap}" in reason, reason
            broker.start(detach=False)
            wait_for(lambda: health(port)[0] == 200, 120, "healthy again", router, log)
            stop(router, log)
        finally:
            broker.stop()
