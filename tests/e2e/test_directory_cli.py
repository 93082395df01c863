"""`router directory serve` as a user runs it: MissingRoute requests in its queue, answers out (B6).

No Spark here: the requests are produced as the router writes them, straight into the
BrokerConfiguration service's queue topic, and the answers are read back from the routes and
requests topics. The router's side (asking, and taking the answers) is tested with the service in
tests/integration/test_streaming_job.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from processes import ROOT, records_with_headers, stop, wait_for

from streaming import topics
from streaming.kafka.avro import encode_message, new_message_record
from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, MISSING_ROUTE_MESSAGE_TYPE, Database, Instance
from streaming.tables.reader import read_routes
from streaming.tables.topic_io import publish_catalogs

pytestmark = pytest.mark.e2e

AW = Database(
    "AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService", BROKER_CONFIGURATION_SERVICE)
)
I1 = Instance("i1", "TCP://i1:4022", (AW,))
DIRECTORY = 'services:\n  - {service: Remote, address: "TCP://i2:4022", lifetime_s: 600}\n'


def missing_route(request_id: str, service: str) -> bytes:
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


def serve(directory: Path, bootstrap: str, prefix: str, log: Path) -> subprocess.Popen[bytes]:
    command = ["directory", "serve", str(directory), "--instance", "i1", "--bootstrap", bootstrap]
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli", *command, "--topic-prefix", prefix],
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_the_service_creates_listed_routes_and_ends_every_request(
    kafka_bootstrap: str, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    prefix = f"dir{uuid.uuid4().hex[:8]}"
    publish_catalogs(kafka_bootstrap, [I1], topics.catalogs_topic(prefix))
    directory = tmp_path / "directory.yaml"
    directory.write_text(DIRECTORY)
    log = tmp_path / "directory.log"
    process = serve(directory, kafka_bootstrap, prefix, log)
    started.append(process)

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    queue = topics.queue_topic("i1", "AW", BROKER_CONFIGURATION_SERVICE, prefix)
    for request_id, service in (("missing-route-a-1", "Remote"), ("missing-route-b-1", "Nowhere")):
        producer.produce(queue, key=request_id.encode(), value=missing_route(request_id, service))
    producer.produce(queue, key=b"junk", value=b"not a message")  # logged, left unanswered
    assert producer.flush(30) == 0

    requests = topics.requests_topic("i1", prefix)
    wait_for(
        lambda: len(records_with_headers(kafka_bootstrap, requests)) >= 2, 60, "two answers", process, log
    )
    output = stop(process, log)

    assert "AW asked for Remote: created route directory:Remote to TCP://i2:4022, until " in output
    assert "AW asked for Nowhere: ended with an error: Nowhere is not in the directory" in output
    assert "left unanswered: " in output and "2 request(s) answered" in output
    ends = [json.loads(v) for _, v in records_with_headers(kafka_bootstrap, requests)]
    assert [(e["service"], e["asked"], e["request_id"]) for e in ends] == [
        ("Remote", False, "missing-route-a-1"),
        ("Nowhere", False, "missing-route-b-1"),
    ]
    route = read_routes(kafka_bootstrap, topics.routes_topic(prefix)).table["i1/AW/directory:Remote"]
    assert (route.service, route.address, route.expires_at is not None) == ("Remote", "TCP://i2:4022", True)


def test_an_instance_without_a_catalog_is_refused_with_the_fix(kafka_bootstrap: str, tmp_path: Path) -> None:
    directory = tmp_path / "directory.yaml"
    directory.write_text(DIRECTORY)
    serve = ["directory", "serve", str(directory), "--instance", "nope", "--bootstrap", kafka_bootstrap]
    result = subprocess.run(
        [sys.executable, "-m", "streaming.cli", *serve, "--topic-prefix", f"none{uuid.uuid4().hex[:8]}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "instance(s) 'nope' not in the catalogs topic" in result.stderr
    assert "router catalogs load" in result.stderr
