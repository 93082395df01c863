"""The job's metrics through the real broker and Spark: what the state processor holds delayed (D1)
is counted from its changes, and a job started on a checkpoint reads what it held from the state
store once, so its figures are whole after a restart too."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from test_streaming_job import I1, I2, message, produce

from streaming import topics
from streaming.config import load_settings
from streaming.rules.model import Route
from streaming.spark.checkpoint import logged_batches
from streaming.spark.job import RouterJob, input_topics
from streaming.spark.metrics import RouterMetrics
from streaming.spark.state import held_figures, held_state
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = pytest.mark.integration


def job_with_metrics(
    spark: SparkSession, bootstrap: str, prefix: str, checkpoint: Path
) -> tuple[RouterJob, RouterMetrics]:
    settings = load_settings(
        None, instance="i1", bootstrap=bootstrap, topic_prefix=prefix, checkpoint_dir=str(checkpoint)
    )
    metrics = RouterMetrics(settings.instances, input_topics(settings))
    return RouterJob(spark, settings, metrics=metrics), metrics


def held(metrics: RouterMetrics) -> tuple[int, int]:
    messages, conversations, _ = metrics.held.figures("i1", time.time())
    return messages, conversations


def test_the_delayed_gauges_follow_the_state_and_survive_a_restart(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"m{uuid.uuid4().hex[:10]}"
    # Nothing falls due during the test: what is delayed stays held (D1, D2).
    publish_catalogs(kafka_bootstrap, [replace(I1, retry_s=600.0), I2], topics.catalogs_topic(prefix))
    put_route(kafka_bootstrap, "i1", Route("AW", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(prefix))
    outbound = topics.outbound_topic("i1", prefix)
    produce(
        kafka_bootstrap,
        outbound,
        [
            ("c1", message("c1", "Nowhere", 0)),
            ("c1", message("c1", "Nowhere", 1)),  # waits behind the first (D1)
            ("c2", message("c2", "Nowhere", 0)),
            ("c3", message("c3", "Audit", 0)),
        ],
    )
    checkpoint = tmp_path / "i1"
    job, metrics = job_with_metrics(spark, kafka_bootstrap, prefix, checkpoint)
    job.replay(timeout_s=300)  # reads back what it delayed: the state holds it
    job.close()
    assert metrics.held.is_ready, "a new checkpoint holds nothing to read first"
    assert held(metrics) == (3, 2)
    assert len(job.waiting()) == 3
    *_, oldest = metrics.held.figures("i1", time.time())
    assert 0 <= oldest < 300
    # What the state store holds after the last committed batch, read as a restarted job reads it.
    last = max(logged_batches(checkpoint / "query" / "commits"))
    figures = held_figures(held_state(spark, checkpoint / "query", last))
    assert sorted(f for f in figures if "\x00s\x00" not in f) == ["i1\x00c\x002", "i1\x00m\x003"]
    assert sum(int(f.rsplit("\x00", 1)[1]) for f in figures if "\x00s\x00" in f) == 3

    # A restart: the new job's figures start from the state store, and a new delay adds to them.
    produce(kafka_bootstrap, outbound, [("c4", message("c4", "Nowhere", 0))])
    again, restarted = job_with_metrics(spark, kafka_bootstrap, prefix, checkpoint)
    again.replay(timeout_s=300)
    again.close()
    deadline = time.monotonic() + 120
    while not restarted.held.is_ready and time.monotonic() < deadline:
        time.sleep(0.2)
    assert restarted.held.is_ready, "the state the job started from was read"
    assert held(restarted) == (4, 3)
    assert len(again.waiting()) == 4
