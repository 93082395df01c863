"""Issue 43: on a cluster of three brokers, the router and its commands create every topic with three
replicas and min.insync.replicas 2 by default; a topic that exists with fewer replicas is reported
once, with the fix, and left as it is.

The test starts its own three brokers (`embedded_cluster`): the session's broker is a single node.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic
from pyspark.sql import SparkSession

from streaming import topics
from streaming.config import load_settings
from streaming.devtools.embedded_kafka import embedded_cluster
from streaming.kafka.admin import admin_client, cluster_metadata
from streaming.rules.model import Database, Instance, Route, normalize_address
from streaming.spark.job import RouterJob
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = pytest.mark.integration

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService", "Audit"))
I1 = Instance("i1", "TCP://i1:4022", (AW,), retry_s=5.0)
FAR = "TCP://far:4022"


@pytest.fixture(scope="module")
def three_brokers() -> Iterator[str]:
    """The bootstrap servers of a cluster of three embedded brokers."""
    with (
        tempfile.TemporaryDirectory(prefix="router-test-kafka3-") as state,
        embedded_cluster(state, brokers=3) as nodes,
    ):
        yield ",".join(node.bootstrap for node in nodes)


def min_insync(bootstrap: str, names: list[str]) -> dict[str, str]:
    """Each topic's `min.insync.replicas`, as the brokers hold it."""
    client = admin_client(bootstrap)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    return {
        resource.name: future.result()["min.insync.replicas"].value
        for resource, future in client.describe_configs(resources, request_timeout=30).items()
    }


def test_the_routers_topics_get_three_replicas_and_two_in_sync_and_a_thinner_one_is_reported_once(
    three_brokers: str,
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"r{uuid.uuid4().hex[:10]}"
    # The commands' topics: the catalogs and routes topics, created by `catalogs load` and `routes load`.
    publish_catalogs(three_brokers, [I1], topics.catalogs_topic(prefix))
    put_route(three_brokers, "i1", Route("AW", "Far", FAR, service="Far"), topics.routes_topic(prefix))
    # A topic made before, elsewhere, with one replica.
    thin = topics.dropped_topic("i1", prefix)
    client = admin_client(three_brokers)  # kept referenced: its futures resolve only while it lives
    for future in client.create_topics([NewTopic(thin, 1, 1)]).values():
        future.result()

    caplog.set_level(logging.WARNING, logger="streaming.kafka.admin")
    settings = load_settings(
        None, instance="i1", bootstrap=three_brokers, topic_prefix=prefix, checkpoint_dir=str(tmp_path / "cp")
    )
    for _ in range(2):  # a router started twice in one process reports the thin topic once
        job = RouterJob(spark, settings)
        try:
            job.snapshots.at(datetime.now(timezone.utc))  # the first snapshot creates its destinations
        finally:
            job.close()

    metadata = cluster_metadata(three_brokers).topics
    made = sorted(name for name in metadata if name.startswith(f"{prefix}.") and name != thin)
    # The job's own topics, its destinations (the queue, Far's network topic) and the commands' topics.
    expected = {
        topics.outbound_topic("i1", prefix),
        topics.delayed_topic("i1", prefix),
        topics.deadletter_topic("i1", prefix),
        topics.choices_topic("i1", prefix),
        topics.queue_topic("i1", "AW", "Audit", prefix),
        topics.network_topic(normalize_address(FAR), prefix),
        topics.routes_topic(prefix),
        topics.catalogs_topic(prefix),
    }
    assert expected <= set(made), sorted(expected - set(made))
    replicas = {name: {len(p.replicas) for p in metadata[name].partitions.values()} for name in made}
    assert replicas == {name: {3} for name in made}
    assert min_insync(three_brokers, made) == dict.fromkeys(made, "2")

    # The thin topic is left as it was, and said once, with what it has, what is asked and the fix.
    assert {len(p.replicas) for p in metadata[thin].partitions.values()} == {1}
    warned = [r.getMessage() for r in caplog.records if r.name == "streaming.kafka.admin"]
    assert len(warned) == 1, warned
    assert warned[0].startswith(
        f"topic {thin} at {three_brokers} has 1 replica(s) per partition where 3 are asked"
    )
    assert "kafka-reassign-partitions.sh" in warned[0]
