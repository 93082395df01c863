"""The metrics and health the endpoints and the routing services serve, scraped over HTTP on the real broker.

Each server listens on a free loopback port of its own and stops when its service closes. Two
endpoints exchange dialogs through i1's router (a job in a thread, on the session's Spark, as in
test_endpoints.py); without a router, what reaches a queue topic is produced there by the test, as
the router would write it (a record twice, for a duplicate). The dynamic routing service runs as a
class and as `router directory serve`; one test stops a broker of its own under it (fault tier).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from streaming import topics
from streaming.config import load_settings
from streaming.ddr.answers import Classification, Mode
from streaming.ddr.config import RoutingServiceConfig
from streaming.ddr.service import RoutingService
from streaming.devtools.embedded_kafka import EmbeddedKafka, free_port
from streaming.directory import DirectoryService, parse_directory
from streaming.endpoint import Endpoint, Received
from streaming.endpoint.protocol import END_DIALOG
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    MISSING_ROUTE_MESSAGE_TYPE,
    Database,
    Instance,
    Route,
)
from streaming.spark.job import RouterJob
from streaming.tables.topic_io import publish_catalogs, put_route
from tests.running import Running
from tests.topic_records import records_now

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AW = Database(
    "AW",
    "0a0a0a0a-0000-0000-0000-00000000000a",
    True,
    ("Client", "Server", "InitiatorService", BROKER_CONFIGURATION_SERVICE),
)
SALES = Database("Sales", "0b0b0b0b-0000-0000-0000-00000000000b", True, ("SalesRouter",))
EAST = Database("East", "0c0c0c0c-0000-0000-0000-00000000000c", True, ("SalesEast",))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-00000000000d", True, ())
I1 = Instance("i1", "TCP://i1:4022", (AW, SALES, EAST, MSDB), retry_s=2.0)
DIRECTORY = 'services:\n  - {service: Remote, address: "TCP://i2:4022", lifetime_s: 600}\n'
WAIT_S = 120.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# --- HTTP -------------------------------------------------------------------------------------------


def get(url: str) -> tuple[int, bytes]:
    """The status and body of a GET (a 503 is an answer here, not an error)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # a loopback test server
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def scrape(address: str) -> Samples:
    """Every sample `/metrics` serves, by name and labels."""
    status, body = get(f"http://{address}/metrics")
    assert status == 200, body
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def health(address: str) -> tuple[int, dict[str, Any]]:
    status, body = get(f"http://{address}/healthz")
    return status, json.loads(body)


def status_of(address: str) -> int:
    """The health's status, or 0 while nothing listens at `address` yet."""
    try:
        return health(address)[0]
    except urllib.error.URLError:
        return 0


def value(got: Samples, name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


def wait_until(
    condition: Callable[[], object], what: str, timeout_s: float = WAIT_S, *, pump: Sequence[Endpoint] = ()
) -> None:
    """Poll `condition` (pumping `pump` meanwhile) until it holds; fail after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        for endpoint in pump:
            endpoint.pump(0.05)
        if not pump:
            time.sleep(0.1)


def closed(address: str) -> bool:
    """Nothing answers at `address` any more."""
    try:
        get(f"http://{address}/healthz")
    except urllib.error.URLError:
        return True
    return False


# --- Kafka ------------------------------------------------------------------------------------------


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    name = f"m{uuid.uuid4().hex[:10]}"
    publish_catalogs(kafka_bootstrap, [I1], topics.catalogs_topic(name))
    put_route(kafka_bootstrap, "i1", Route("AW", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(name))
    return name


def records(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every message record `topic` holds now, decoded."""
    return [decode_message(record.value()) for record in records_now(bootstrap, topic)]


def produce(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for payload in values:
        producer.produce(topic, value=payload, key=b"k")
    assert producer.flush(30) == 0


def endpoint(bootstrap: str, prefix: str, tmp_path: Path, service: str, **options: Any) -> Endpoint:
    """An endpoint of AW that serves its metrics on a free loopback port."""
    return Endpoint(
        bootstrap,
        instance="i1",
        database="AW",
        service=service,
        store=tmp_path / f"{service}.db",
        prefix=prefix,
        metrics_port=free_port(),
        **options,
    )


def address(ep: Endpoint | DirectoryService | RoutingService) -> str:
    assert ep.metrics_server is not None
    return ep.metrics_server.address


# --- an endpoint ------------------------------------------------------------------------------------


def test_an_endpoint_counts_resends_a_duplicate_and_a_malformed_record_and_goes_stale_unpumped(
    kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """A3: no router carries the acks, so the client resends; A4: the server drops a record it gets twice."""
    with (
        endpoint(kafka_bootstrap, prefix, tmp_path, "Client", retry_first_s=0.2, retry_cap_s=0.4) as client,
        endpoint(kafka_bootstrap, prefix, tmp_path, "Server", health_bound_s=2.0) as server,
    ):
        labels = {"instance": "i1", "database": "AW"}
        status, body = health(address(client))
        assert status == 503 and body["reason"].startswith("starting: the loop has not polled yet")
        got = scrape(address(client))
        assert value(got, "router_endpoint_sent_total", service="Client", **labels) == 0
        assert value(got, "router_endpoint_open_dialogs", service="Client", **labels) == 0

        dialog = client.begin_dialog("Server")
        dialog.send(b"<n>0</n>")
        dialog.send(b"<n>1</n>")
        got = scrape(address(client))
        assert value(got, "router_endpoint_sent_total", service="Client", **labels) == 2
        assert value(got, "router_endpoint_open_dialogs", service="Client", **labels) == 1
        assert value(got, "router_endpoint_unacknowledged_messages", service="Client", **labels) == 2

        def resent() -> float:
            return value(scrape(address(client)), "router_endpoint_resent_total", service="Client", **labels)

        wait_until(lambda: resent() >= 4, "resends", pump=[client])
        got = scrape(address(client))
        assert value(got, "router_endpoint_unacknowledged_messages", service="Client", **labels) == 2
        assert value(got, "router_endpoint_acknowledged_total", service="Client", **labels) == 0
        status, body = health(address(client))
        assert status == 200 and body["status"] == "ok" and body["service"] == "Client"
        assert body["last_did"]["what"].startswith("resent ")

        # What the router would deliver: the client's first message twice, its second once, and garbage.
        wait_until(lambda: len(records(kafka_bootstrap, client.outbound)) >= 2, "the client's records")
        written = {r["sequence_number"]: r for r in records(kafka_bootstrap, client.outbound)}
        first, second = (encode_message(written[n]) for n in (0, 1))
        produce(kafka_bootstrap, server.queue, [first, first, second, b"not a message"])
        server_labels = {**labels, "service": "Server"}
        wait_until(
            lambda: server.counts.taken + server.counts.duplicates + server.counts.malformed == 4,
            "the four records",
            pump=[server],
        )
        got = scrape(address(server))
        assert value(got, "router_endpoint_received_total", **server_labels) == 2
        assert value(got, "router_endpoint_duplicates_total", **server_labels) == 1
        assert value(got, "router_endpoint_malformed_total", **server_labels) == 1
        assert value(got, "router_endpoint_acks_sent_total", **server_labels) >= 1
        assert value(got, "router_endpoint_queued_messages", **server_labels) == 2
        assert value(got, "router_endpoint_open_dialogs", **server_labels) == 1
        assert [m.body for m in server.receive(timeout_s=5)] == [b"<n>0</n>", b"<n>1</n>"]
        assert value(scrape(address(server)), "router_endpoint_queued_messages", **server_labels) == 0

        assert health(address(server))[0] == 200
        wait_until(lambda: status_of(address(server)) == 503, "a stale health", timeout_s=30)
        status, body = health(address(server))
        assert "the loop has not polled for" in body["reason"] and "(bound 2 s)" in body["reason"]
        server.pump(0.1)
        assert health(address(server))[0] == 200
        at = address(server)
    assert closed(at)  # the server stopped with the endpoint


@pytest.fixture
def router(spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path) -> Iterator[RouterJob]:
    """i1's router, routing continuously until the test ends (AW's LOCAL route carries both ways)."""
    settings = load_settings(
        None,
        instance="i1",
        bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(tmp_path / "router"),
        trigger_seconds=0.5,
    )
    job = RouterJob(spark, settings)
    running = Running()
    running.start(job.run, name="router-i1")
    try:
        yield job
    finally:
        running.stop_all()
        job.close()
    running.check()


def test_an_endpoint_pair_s_figures_follow_their_dialogs_through_the_router(
    router: RouterJob, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """A1: what one sends the other takes and acks; the dialogs and the unacked go up, then down (CL3)."""
    # No resends within the test: the counts are those of one copy each.
    no_resends = {"retry_first_s": 300.0, "retry_cap_s": 300.0}
    with (
        endpoint(kafka_bootstrap, prefix, tmp_path, "Client", **no_resends) as client,
        endpoint(kafka_bootstrap, prefix, tmp_path, "Server", **no_resends) as server,
    ):

        def figures(ep: Endpoint) -> dict[str, float]:
            got = scrape(address(ep))
            labels = {"instance": "i1", "database": "AW", "service": ep.service}
            return {
                name.removeprefix("router_endpoint_"): value(got, name, **labels)
                for name, _ in got
                if name.startswith("router_endpoint_") and "timestamp" not in name
            }

        dialogs = [client.begin_dialog("Server", lifetime_s=600) for _ in range(2)]
        for n in range(3):
            for d in dialogs:
                d.send(f"<n>{n}</n>".encode())
        sent = figures(client)
        assert (sent["sent_total"], sent["open_dialogs"], sent["unacknowledged_messages"]) == (6, 2, 6)

        got: list[Received] = []

        def taken(out: list[Received], count: int) -> bool:
            out.extend(server.receive(timeout_s=0.3))
            return len(out) >= count

        wait_until(lambda: taken(got, 6), "six messages", pump=[client])
        assert client.wait_acknowledged(WAIT_S)
        took, acked = figures(server), figures(client)
        assert (took["received_total"], took["open_dialogs"], took["queued_messages"]) == (6, 2, 0)
        assert took["acks_sent_total"] >= 1 and took["duplicates_total"] == 0
        assert (acked["acknowledged_total"], acked["unacknowledged_messages"]) == (6, 0)
        assert acked["acks_received_total"] >= 1 and acked["resent_total"] == 0

        for d in dialogs:
            d.end()
        ends: list[Received] = []
        wait_until(lambda: taken(ends, 2), "two ends", pump=[client])
        assert {m.message_type for m in ends} == {END_DIALOG}
        for m in ends:
            m.dialog.end()

        def forgotten() -> bool:
            return not (
                client.dialogs() or server.dialogs() or client.unacknowledged() or server.unacknowledged()
            )

        wait_until(forgotten, "both sides to forget the dialogs", pump=[client, server])
        done_client, done_server = figures(client), figures(server)
        assert (done_client["open_dialogs"], done_client["unacknowledged_messages"]) == (0, 0)
        assert (done_server["open_dialogs"], done_server["unacknowledged_messages"]) == (0, 0)
        assert (done_client["sent_total"], done_server["sent_total"]) == (8, 2)  # the EndDialogs
        assert (done_client["acknowledged_total"], done_server["acknowledged_total"]) == (8, 2)
        for ep in (client, server):
            status, body = health(address(ep))
            assert status == 200 and body["kafka"]["age_s"] < 30, body


# --- the dynamic routing service --------------------------------------------------------------------


def missing_route(request_id: str, service: str) -> bytes:
    """A MissingRoute request as the router writes it into the BrokerConfiguration queue (B3, B4)."""
    body = (
        '<MissingRoute xmlns="http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice/'
        f'MissingRoute"><SERVICE_NAME>{service}</SERVICE_NAME></MissingRoute>'
    )
    return encode_message(
        new_message_record(
            message_id=request_id,
            conversation_id=request_id,
            to_service=BROKER_CONFIGURATION_SERVICE,
            from_service=BROKER_CONFIGURATION_SERVICE,
            origin_database="AW",
            message_type=MISSING_ROUTE_MESSAGE_TYPE,
            enqueued_at=datetime.now(timezone.utc),
            body=body.encode(),
        )
    )


def directory_queue(prefix: str) -> str:
    return topics.queue_topic("i1", "AW", BROKER_CONFIGURATION_SERVICE, prefix)


def requests_answered(at: str) -> dict[str, float]:
    """AW's answered requests by result, as `/metrics` serves them."""
    return {
        dict(labels)["result"]: n
        for (name, labels), n in scrape(at).items()
        if name == "router_directory_requests_total" and ("database", "AW") in labels
    }


def test_the_directory_service_counts_its_answers_and_is_healthy_until_it_stops(
    kafka_bootstrap: str, prefix: str
) -> None:
    """B6: one request answered with a route, one with an error, a record left unanswered."""
    stop = threading.Event()
    failure: list[BaseException] = []
    with DirectoryService(
        kafka_bootstrap,
        I1,
        parse_directory(DIRECTORY, "directory.yaml"),
        prefix=prefix,
        metrics_port=free_port(),
    ) as service:
        at = address(service)
        assert requests_answered(at) == {"route": 0, "error": 0}

        def serve() -> None:
            try:
                service.serve(stop)
            except BaseException as error:  # handed to the test below
                failure.append(error)

        thread = threading.Thread(target=serve, name="directory", daemon=True)
        thread.start()
        try:
            wait_until(lambda: status_of(at) == 200, "a healthy service", timeout_s=60)
            produce(
                kafka_bootstrap,
                directory_queue(prefix),
                [missing_route("request-a", "Remote"), missing_route("request-b", "Nowhere"), b"junk"],
            )
            wait_until(lambda: sum(requests_answered(at).values()) == 2, "two answers")
            got = scrape(at)
            assert requests_answered(at) == {"route": 1, "error": 1}
            reason = (("instance", "i1"), ("reason", "malformed"))
            wait_until(lambda: scrape(at)[("router_directory_unanswered_total", reason)] == 1, "the junk")
            answered_at = got[("router_directory_last_answer_timestamp_seconds", (("instance", "i1"),))]
            assert abs(answered_at - time.time()) < WAIT_S
            status, body = health(at)
            assert (status, body["instance"], body["service"]) == (200, "i1", BROKER_CONFIGURATION_SERVICE)
            assert body["last_did"]["what"].startswith("left ")  # the junk came last
        finally:
            stop.set()
            thread.join(60)
        assert not failure, failure
        status, body = health(at)
        assert (status, body["reason"]) == (503, "the service has stopped")
    assert closed(at)


def test_router_directory_serve_serves_its_metrics_on_the_port_it_is_given(
    kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """The command as a user runs it: `--metrics-port`, the line with the URLs, and a stop with Ctrl-C."""
    directory = tmp_path / "directory.yaml"
    directory.write_text(DIRECTORY)
    port = free_port()
    log = tmp_path / "directory.log"
    command = ["directory", "serve", str(directory), "--instance", "i1", "--bootstrap", kafka_bootstrap]
    command += ["--topic-prefix", prefix, "--metrics-port", str(port)]
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli", *command],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    at = f"127.0.0.1:{port}"
    try:
        line = f"metrics at http://{at}/metrics, health at http://{at}/healthz"
        wait_until(lambda: line in log.read_text() or process.poll() is not None, "the metrics line", 60)
        assert process.poll() is None, log.read_text()
        produce(kafka_bootstrap, directory_queue(prefix), [missing_route("request-c", "Remote")])
        wait_until(lambda: requests_answered(at)["route"] == 1, "the answer")
        assert health(at)[0] == 200
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        code = process.wait(60)
    printed = log.read_text()
    assert code == 0, printed
    assert (
        "AW asked for Remote: created route directory:Remote" in printed
        and "1 request(s) answered" in printed
    )
    assert closed(at)


@pytest.mark.fault
def test_the_directory_service_is_unhealthy_while_its_broker_is_away(tmp_path: Path) -> None:
    """The loop still polls on time while no broker answers: the health says Kafka does not answer."""
    with tempfile.TemporaryDirectory(prefix="router-metrics-kafka-") as state:
        broker = EmbeddedKafka(state, port=free_port())
        broker.start(detach=False)
        try:
            bootstrap = broker.bootstrap
            prefix = f"m{uuid.uuid4().hex[:10]}"
            publish_catalogs(bootstrap, [I1], topics.catalogs_topic(prefix))
            stop = threading.Event()
            with DirectoryService(
                bootstrap,
                I1,
                parse_directory(DIRECTORY, "directory.yaml"),
                prefix=prefix,
                metrics_port=free_port(),
                health_bound_s=5.0,
            ) as service:
                at = address(service)
                thread = threading.Thread(target=service.serve, args=(stop,), name="directory", daemon=True)
                thread.start()
                try:
                    wait_until(lambda: status_of(at) == 200, "a healthy service", timeout_s=60)
                    broker.stop()
                    wait_until(lambda: status_of(at) == 503, "an unhealthy service", timeout_s=60)
                    _, body = health(at)
                    assert "Kafka has not answered the loop for" in body["reason"], body
                    assert body["last_poll"]["age_s"] < 5.0  # the loop goes on polling meanwhile
                    broker.start(detach=False)
                    wait_until(lambda: status_of(at) == 200, "the service healthy again", timeout_s=90)
                finally:
                    stop.set()
                    thread.join(60)
        finally:
            broker.stop()


# --- a data-dependent routing service ---------------------------------------------------------------


def to_service_named(received: Sequence[Received]) -> list[Classification]:
    """A classifier in Python: the service `<to>` names, or an error (what the Spark one gives)."""
    out = []
    for message in received:
        text = message.body.decode()
        if "<to>" in text:
            out.append(Classification(text.split("<to>")[1].split("</to>")[0]))
        else:
            out.append(Classification(error="the message names no service"))
    return out


def initiator_message(conversation: str, sequence: int, body: bytes, message_type: str = "DEFAULT") -> bytes:
    """A message of AW's InitiatorService to SalesRouter, as the router delivers it to SalesRouter's queue."""
    return encode_message(
        new_message_record(
            message_id=f"{conversation}/{sequence}",
            conversation_id=conversation,
            sequence_number=sequence,
            to_service="SalesRouter",
            from_service="InitiatorService",
            from_broker_instance=AW.broker_instance,
            origin_database="AW",
            message_type=message_type,
            enqueued_at=datetime.now(timezone.utc),
            body=body,
        )
    )


def test_a_routing_service_counts_its_answers_by_act_beside_its_endpoint_s(
    kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """Forwarded, passed on, ended, not routed: each answer by its first step; the endpoint's figures too."""
    config = RoutingServiceConfig("SalesRouter", "Sales", Mode.FORWARD, "(a Python classifier)")
    at = f"127.0.0.1:{free_port()}"
    stop, stopped, release = threading.Event(), threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        """The service is made, served and closed by one thread (its store is that thread's)."""
        try:
            service = RoutingService(
                kafka_bootstrap,
                "i1",
                config,
                to_service_named,
                store=tmp_path / "router.db",
                prefix=prefix,
                retry_first_s=60.0,  # no resends within the test: its last deed is its last answer
                metrics_port=int(at.rsplit(":", 1)[1]),
            )
            try:
                service.serve(stop)
                stopped.set()
                release.wait(60)  # while the test asks the stopped service's health
            finally:
                service.close()
        except BaseException as error:  # handed to the test below
            failure.append(error)
            stopped.set()

    thread = threading.Thread(target=serve, name="ddr", daemon=True)
    thread.start()
    labels = {"instance": "i1", "database": "Sales", "service": "SalesRouter"}

    def acts() -> dict[str, float]:
        return {
            dict(key)["act"]: n
            for (name, key), n in scrape(at).items()
            if name == "router_ddr_messages_total" and dict(key)["service"] == "SalesRouter"
        }

    try:
        wait_until(lambda: status_of(at) == 200, "a healthy routing service", timeout_s=60)
        east, nowhere = f"east-{uuid.uuid4()}", f"nowhere-{uuid.uuid4()}"
        queue = topics.queue_topic("i1", "Sales", "SalesRouter", prefix)
        produce(
            kafka_bootstrap,
            queue,
            [initiator_message(east, 0, b"<to>SalesEast</to>"), initiator_message(nowhere, 0, b"<order/>")],
        )
        wait_until(lambda: sum(acts().values()) == 2, "two answers")
        produce(
            kafka_bootstrap,
            queue,
            [initiator_message(east, 1, b"<more/>"), initiator_message(east, 2, b"", END_DIALOG)],
        )
        wait_until(lambda: sum(acts().values()) == 4, "four answers")
        got = scrape(at)
        answered = {act: n for act, n in acts().items() if n}
        assert answered == {"begin": 1, "fail_in": 1, "send_out": 1, "end_out": 1}
        assert value(got, "router_ddr_classified_total", result="routed", **labels) == 1
        assert value(got, "router_ddr_classified_total", result="unrouted", **labels) == 1
        assert value(got, "router_endpoint_received_total", **labels) == 4
        # Two messages and an EndDialog to SalesEast, an EndDialog back to the initiator, an Error to
        # the one it could not route: none acked, for no router carries their acks back.
        assert value(got, "router_endpoint_sent_total", **labels) == 5
        assert value(got, "router_endpoint_unacknowledged_messages", **labels) == 5
        assert value(got, "router_endpoint_open_dialogs", **labels) == 3
        status, body = health(at)
        assert status == 200 and body["last_did"]["what"].startswith(f"{east}: the initiator ended"), body
    finally:
        stop.set()
        stopped.wait(60)
        try:
            after = None if failure else health(at)  # stopped, not yet closed
        finally:
            release.set()
            thread.join(60)
    assert not failure, failure
    assert after is not None and (after[0], after[1]["reason"]) == (503, "the routing service has stopped")
    assert closed(at)
