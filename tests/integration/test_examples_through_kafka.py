"""The worked examples 2, 4, 5, 6 and 7 through Kafka: topics in, the replay job, topics out.

Each scenario's catalog, routes and mirror roles are published to their topics under a fresh
prefix; its messages are produced to the instance's outbound topic (sent by a database of the
instance) or inbound topic (arrived from outside), as a sender would write them: after an ack, the
initiator's later messages carry the acknowledged broker instance (A2). One `router replay` routes
them all; the decisions are read back from the headers of every destination topic and checked
against the scenario's `expect` with the same evaluator as the engine tests.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from streaming import topics
from streaming.config import load_settings
from streaming.devtools.scenario.check import evaluate
from streaming.devtools.scenario.loader import load_scenario
from streaming.devtools.scenario.model import AckEvent, MessageEvent
from streaming.kafka.admin import ensure_topics, topic_names
from streaming.kafka.avro import decode_message, encode_message, new_message_record
from streaming.kafka.consuming import header_pairs
from streaming.rules.model import CURRENT_DATABASE
from streaming.spark.job import RouterJob
from streaming.tables.topic_io import publish_catalogs, put_route
from tests.topic_records import records_now

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "examples"
# One file for each case of examples 2, 4, 5, 6 and 7 (where a case has a local and a not-local
# variant, the one whose outcome differs from its neighbours'). Every variant of every example also
# runs on both engines in tests/unit/test_scenarios.py and tests/integration/test_spark_engine.py.
CASES = (
    "ex2a-network-route-to-one-service",
    "ex2b-network-route-to-one-service",
    "ex2c-network-route-to-one-service",
    "ex2d-network-route-to-one-service",
    "ex2e-network-route-to-one-service",
    "ex4a-network-route-for-all-services",
    "ex4b-network-route-for-all-services",
    "ex4c-network-route-for-all-services-not-local",
    "ex5a-load-balancing",
    "ex5b-load-balancing",
    "ex5c-load-balancing",
    "ex5d-load-balancing",
    "ex5e-load-balancing-not-local",
    "ex5f-load-balancing-local",
    "ex6a-forward-one-service-not-local",
    "ex6b-forward-one-service-local",
    "ex6c-forward-one-service-local",
    "ex6d-forward-one-service-not-local",
    "ex7a-forward-all-services-local",
    "ex7b-forward-all-services-fwd-off",
    "ex7c-forward-all-services",
    "ex7d-forward-all-services",
)
FILES = [EXAMPLES / f"{name}.yaml" for name in CASES]
REPLAY_RETRY_S = 600.0
HEADER_FIELDS = ("outcome", "database", "address", "route", "match_step", "choice_step", "reason")


def produce_scenario(bootstrap: str, prefix: str, path: Path) -> None:
    scenario = load_scenario(path)
    instance = scenario.instance
    # D2 releases a delayed message retry_s after its decision; on a slow machine the replay can
    # outlast the scenario's 5 s and decide it a second time. What is checked here is each
    # message's first decision, so the catalog waits longer than any replay (the release has
    # tests of its own).
    waiting = dataclasses.replace(instance, retry_s=REPLAY_RETRY_S)
    publish_catalogs(bootstrap, [waiting], topics.catalogs_topic(prefix))
    for route in scenario.routes:
        put_route(bootstrap, instance.name, route, topics.routes_topic(prefix))
    if scenario.mirrors:
        ensure_topics(bootstrap, [topics.mirrors_topic(prefix)], compacted=True)
        producer = Producer({"bootstrap.servers": bootstrap})
        for address, role in scenario.mirrors.items():
            producer.produce(topics.mirrors_topic(prefix), key=address.encode(), value=role.value.encode())
        assert producer.flush(30) == 0
    outbound, inbound = (
        topics.outbound_topic(instance.name, prefix),
        topics.inbound_topic(instance.name, prefix),
    )
    ensure_topics(bootstrap, [outbound, inbound])
    producer = Producer({"bootstrap.servers": bootstrap})
    pins: dict[str, str] = {}
    for n, event in enumerate(scenario.events):
        if isinstance(event, AckEvent):
            pins[event.conversation_id] = event.broker_instance
            continue
        assert isinstance(event, MessageEvent), f"{path.name}: only messages and acks go through Kafka here"
        m = event.message
        bid = m.broker_instance
        if bid == CURRENT_DATABASE:
            db = instance.database(m.origin)
            bid = db.broker_instance if db else None
        if not m.from_target and m.conversation_id in pins:
            bid = pins[m.conversation_id]
        record = new_message_record(
            message_id=m.id,
            conversation_id=m.conversation_id,
            sequence_number=n,
            to_service=m.service,
            to_broker_instance=bid,
            from_service="Sender",
            origin_database=None if m.is_remote else m.origin,
            is_initiator=not m.from_target,
            message_type=m.message_type,
            hops_remaining=m.hops_remaining,
            enqueued_at=datetime.now(timezone.utc),
            body=b"x" * min(m.size_bytes, 4096),
        )
        producer.produce(
            inbound if m.is_remote else outbound, key=m.conversation_id.encode(), value=encode_message(record)
        )
    assert producer.flush(30) == 0


def decisions_from_topics(bootstrap: str, prefix: str, instance: str) -> list[dict[str, object]]:
    inputs = {topics.outbound_topic(instance, prefix), topics.inbound_topic(instance, prefix)}
    wanted = [
        t
        for t in topic_names(bootstrap)
        if t.startswith(f"{prefix}.")
        and t not in inputs
        and not t.endswith((".routes", ".catalogs", ".mirrors", ".choices", ".requests", ".deadletter"))
    ]
    # One read per topic (`records_now`): a consumer assigned topic after topic waits out the last
    # topic's fetch (up to librdkafka's fetch.wait.max.ms, 500 ms) before the next one's.
    decisions: list[dict[str, object]] = []
    for topic in wanted:
        for msg in records_now(bootstrap, topic):
            headers = {k: (v or b"").decode() for k, v in header_pairs(msg)}
            decision: dict[str, object] = {"id": decode_message(msg.value())["message_id"]}
            decision.update({f: headers[f] for f in HEADER_FIELDS if f in headers})
            if "choice_step" in headers and "route" not in headers:
                decision["route"] = None  # the virtual M6 route
            decisions.append(decision)
    return decisions


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_worked_example_through_kafka(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path, path: Path
) -> None:
    prefix = f"x{uuid.uuid4().hex[:10]}"
    produce_scenario(kafka_bootstrap, prefix, path)
    scenario = load_scenario(path)
    settings = load_settings(
        None,
        instance=scenario.instance.name,
        bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(tmp_path / "ckpt"),
    )
    job = RouterJob(spark, settings)
    job.replay(timeout_s=300)
    assert job.routed == sum(isinstance(e, MessageEvent) for e in scenario.events)
    decisions = decisions_from_topics(kafka_bootstrap, prefix, scenario.instance.name)
    assert evaluate(scenario, decisions) == []
