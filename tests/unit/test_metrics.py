"""The router job's metrics and health (`streaming.spark.metrics`) and the server that serves them
(`streaming.observe.server`): no Spark, no Kafka; the server listens on loopback for the test only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.devtools.embedded_kafka import free_port
from streaming.errors import ConfigError
from streaming.observe.server import Health, MetricsServer, new_registry, serve
from streaming.spark.batch import BatchMetrics, Counted
from streaming.spark.metrics import METRICS, HeldFigures, Liveness, RouterMetrics, judge
from streaming.spark.output import COUNT_KEY_SEPARATOR
from streaming.spark.progress import partition_lag


def key(*parts: str) -> str:
    return COUNT_KEY_SEPARATOR.join(parts)


def observed(counts: dict[str, int], records: int) -> dict[str, object]:
    """The observed metrics' values of a batch as the write gives them (`batch_metrics`)."""
    return {"records": records, "counts": "".join(f"{k}\t{n}\n" for k, n in sorted(counts.items()))}


BATCH = observed(
    {
        key("i1", "deliver", "", "", ""): 5,
        key("i1", "delayed", "no_route", "", ""): 2,
        key("i1", "send", "", "released", ""): 3,
        key("i1", "dropped", "destination_unavailable", "", "p.i1.queue.AW.Gone"): 4,
        key("i1", "deadletter", "", "", ""): 1,
        key("f1", "discarded", "hops_exhausted", "", ""): 6,
        key("f1", "forward", "", "", ""): 7,
    },
    records=28,
)


def test_a_batch_s_counts_give_its_outcomes_releases_and_dead_letters() -> None:
    m = BatchMetrics.of(BATCH)
    assert m.records == 28
    assert m.outcomes == {"deliver": 5, "send": 3, "forward": 7, "delayed": 2, "dropped": 4, "discarded": 6}
    assert (m.released, m.dead_lettered, m.routed) == (3, 1, 27)
    assert m.counts[Counted("i1", "dropped", "destination_unavailable", False, "p.i1.queue.AW.Gone")] == 4
    assert m.counts[Counted("i1", "send", "", True, "")] == 3


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def metrics() -> RouterMetrics:
    return RouterMetrics(("i1", "f1"), {"p.i1.outbound": "i1", "p.f1.inbound": "f1"}, new_registry())


def test_the_counters_are_the_batch_s_counts_by_instance_outcome_and_reason(metrics: RouterMetrics) -> None:
    metrics.batch(BatchMetrics.of(BATCH), 1.5, 1_000.0)
    metrics.batch(BatchMetrics.of(BATCH), 0.5, 1_002.0)
    got = samples(metrics.registry)

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert value("router_messages_total", instance="i1", outcome="deliver", reason="") == 10
    assert value("router_messages_total", instance="i1", outcome="delayed", reason="no_route") == 4
    assert value("router_messages_total", instance="f1", outcome="discarded", reason="hops_exhausted") == 12
    assert (
        value("router_messages_total", instance="f1", outcome="send", reason="") == 0
    )  # there from the start
    assert value("router_released_total", instance="i1") == 6
    assert value("router_deadletter_total", instance="i1") == 2
    assert value("router_deadletter_total", instance="f1") == 0
    topic = "p.i1.queue.AW.Gone"
    assert value("router_destination_unavailable_total", instance="i1", topic=topic) == 8
    assert value("router_batches_total", instance="f1") == 2
    assert value("router_batch_records", instance="i1") == 15  # the last batch's
    assert value("router_batch_records", instance="f1") == 13
    assert value("router_last_batch_timestamp_seconds", instance="i1") == 1_002.0
    assert value("router_batch_duration_seconds_count", instance="i1") == 2
    assert value("router_batch_duration_seconds_sum", instance="i1") == 2.0
    assert value("router_batch_duration_seconds_bucket", instance="i1", le="1.0") == 1
    # Summed over the labels, the counters are what the run's totals line counts.
    total = sum(v for (name, _), v in got.items() if name == "router_messages_total")
    assert total == 2 * BatchMetrics.of(BATCH).routed
    assert not [name for name, _ in got if name.endswith("_created")]


def test_every_metric_the_router_exports_is_listed_and_only_those(metrics: RouterMetrics) -> None:
    metrics.batch(BatchMetrics.of(BATCH), 1.0, 1.0)
    metrics.input_lag({("p.i1.outbound", 0): 3})
    metrics.snapshot("routes@p0:4 mirrors@p0:0", {"i1": 4}, 5.0)
    metrics.held.ready()
    names = {
        family.name for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
    }
    exported = {n for n in names if n.startswith("router_")}
    # The parser names a counter's family without its _total.
    listed = {n.removesuffix("_total") for n in METRICS}
    assert exported == listed


def test_lag_snapshot_and_build_info(metrics: RouterMetrics) -> None:
    metrics.input_lag(
        {("p.i1.outbound", 0): 3, ("p.i1.outbound", 1): 0, ("p.f1.inbound", 0): 9, ("other", 0): 5}
    )
    metrics.snapshot("routes@p0:4 mirrors@p0:0", {"i1": 4}, 5.0)
    metrics.snapshot("routes@p0:4 mirrors@p0:0", {"i1": 99}, 6.0)  # the same version: nothing changes
    got = samples(metrics.registry)
    assert (
        got[
            ("router_input_lag_records", (("instance", "i1"), ("partition", "0"), ("topic", "p.i1.outbound")))
        ]
        == 3
    )
    assert (
        got[("router_input_lag_records", (("instance", "f1"), ("partition", "0"), ("topic", "p.f1.inbound")))]
        == 9
    )
    assert not [
        labels
        for (name, labels) in got
        if name == "router_input_lag_records" and ("topic", "other") in labels
    ]
    assert got[("router_snapshot_routes", (("instance", "i1"),))] == 4
    assert got[("router_snapshot_routes", (("instance", "f1"),))] == 0
    assert got[("router_snapshot_changed_timestamp_seconds", (("instance", "i1"),))] == 5.0
    info = [dict(labels) for (name, labels) in got if name == "router_snapshot_info"]
    assert {"instance": "i1", "version": "routes@p0:4 mirrors@p0:0"} in info
    build = [dict(labels) for (name, labels) in got if name == "router_build_info"]
    assert {b["instance"] for b in build} == {"i1", "f1"}
    assert all(
        b["spark"] and b["kafka_client"].startswith("confluent-kafka ") and b["version"] for b in build
    )


def test_held_figures_add_up_in_any_order_and_the_oldest_waits_from_its_second() -> None:
    """D1: the processor's changes and the state the job started from add up, whichever comes first."""
    changes = ["i1\x00m\x003", "i1\x00c\x002", "i1\x00s\x00100\x002", "i1\x00s\x00104\x001"]
    released = ["i1\x00m\x00-2", "i1\x00c\x00-1", "i1\x00s\x00100\x00-2"]
    start = ["i1\x00m\x001", "i1\x00c\x001", "i1\x00s\x0090\x001"]
    held = HeldFigures()
    held.add(changes)
    assert not held.is_ready
    held.add(start)
    held.ready()
    assert held.figures("i1", now=110.0) == (4, 3, 20.0)
    held.add(released)
    assert held.figures("i1", now=110.0) == (2, 2, 20.0)
    held.add(["i1\x00m\x00-1", "i1\x00c\x00-1", "i1\x00s\x0090\x00-1"])
    assert held.figures("i1", now=110.0) == (1, 1, 6.0)
    assert held.figures("f1", now=110.0) == (0, 0, 0.0)


def test_the_delayed_gauges_are_absent_until_the_starting_state_is_read(metrics: RouterMetrics) -> None:
    assert ("router_delayed_messages", (("instance", "i1"),)) not in samples(metrics.registry)
    metrics.held.add(["i1\x00m\x002", "i1\x00c\x001", "i1\x00s\x001\x002"])
    metrics.held.ready()
    got = samples(metrics.registry)
    assert got[("router_delayed_messages", (("instance", "i1"),))] == 2
    assert got[("router_delayed_conversations", (("instance", "i1"),))] == 1
    assert got[("router_delayed_oldest_seconds", (("instance", "i1"),))] > 1_000_000  # since 1970, second 1


def test_partition_lag_is_latest_minus_end_per_partition_of_the_inputs() -> None:
    progress = {
        "sources": [
            {
                "latestOffset": {"p.i1.outbound": {"0": 10, "1": 7}, "p.i1.choices": {"0": 99}},
                "endOffset": {"p.i1.outbound": {"0": 4, "1": 7}, "p.i1.choices": {"0": 1}},
            },
            {"latestOffset": None, "endOffset": None},
        ]
    }
    assert partition_lag(progress, ["p.i1.outbound"]) == {("p.i1.outbound", 0): 6, ("p.i1.outbound", 1): 0}


LIVE = Liveness(("i1", "f1"), started_at=100.0)


def test_healthy_while_the_last_micro_batch_is_within_the_bound() -> None:
    live = Liveness(("i1",), 100.0, "running", last_batch=7, last_batch_at=200.0, last_records=12, lag=3)
    health = judge(live, now=210.0, bound_s=30.0)
    assert health.status == 200
    assert health.body["status"] == "ok"
    assert health.body["last_batch"] == {"id": 7, "finished_at": 200.0, "age_s": 10.0, "records": 12}
    assert health.body["lag"] == 3 and health.body["instances"] == ["i1"]


@pytest.mark.parametrize(
    ("live", "reason"),
    [
        (LIVE, "starting: no micro-batch has finished yet (20 s since start)"),
        (
            Liveness(("i1",), 100.0, "running", last_batch=7, last_batch_at=80.0),
            "no micro-batch has finished for 40 s (bound 30 s); none has started since",
        ),
        (
            Liveness(("i1",), 100.0, "running", last_batch=7, last_batch_at=80.0, batch_since=85.0),
            "no micro-batch has finished for 40 s (bound 30 s); the micro-batch in flight began 35 s ago",
        ),
        (Liveness(("i1",), 100.0, "stopped", last_batch=7, last_batch_at=119.0), "the router is stopped"),
        (Liveness(("i1",), 100.0, "failed", error="boom"), "the query failed: boom"),
    ],
)
def test_unhealthy_says_why(live: Liveness, reason: str) -> None:
    health = judge(live, now=120.0, bound_s=30.0)
    assert health.status == 503
    assert str(health.body["reason"]).startswith(reason), health.body


def test_a_broker_that_does_not_answer_is_named_in_the_reason() -> None:
    live = Liveness(("i1",), 100.0, "running", last_batch=7, last_batch_at=80.0)
    health = judge(live, now=120.0, bound_s=30.0, kafka="Kafka does not answer at 127.0.0.1:1")
    assert health.status == 503
    assert str(health.body["reason"]).endswith("; Kafka does not answer at 127.0.0.1:1")


@pytest.fixture
def server(metrics: RouterMetrics) -> Iterator[MetricsServer]:
    state = {"healthy": True}
    metrics.batch(BatchMetrics.of(BATCH), 1.0, 1.0)

    def health() -> Health:
        if state.get("raise"):
            raise RuntimeError("broken")
        return Health(state["healthy"], {"status": "ok" if state["healthy"] else "unavailable"})

    with MetricsServer(metrics.registry, health, free_port()) as running:
        running.state = state  # type: ignore[attr-defined]
        yield running


def get(server: MetricsServer, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://{server.address}{path}", timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_the_server_serves_metrics_and_health_on_loopback(server: MetricsServer) -> None:
    assert server.address.startswith("127.0.0.1:")
    status, kind, text = get(server, "/metrics")
    assert status == 200 and kind.startswith("text/plain")
    assert 'router_messages_total{instance="i1",outcome="deliver",reason=""} 5.0' in text
    assert "process_cpu_seconds_total" in text
    assert get(server, "/healthz")[:2] == (200, "application/json")
    server.state["healthy"] = False  # type: ignore[attr-defined]
    status, _, body = get(server, "/healthz")
    assert (status, json.loads(body)) == (503, {"status": "unavailable"})
    server.state["raise"] = True  # type: ignore[attr-defined]
    status, _, body = get(server, "/healthz")
    assert status == 503 and "the health check failed: broken" in json.loads(body)["reason"]
    assert get(server, "/other")[0] == 404


def test_port_zero_is_no_server_and_a_taken_port_is_a_clear_error(metrics: RouterMetrics) -> None:
    assert serve(metrics.registry, lambda: Health(True), 0) is None
    with MetricsServer(metrics.registry, lambda: Health(True), free_port()) as first:
        port = int(first.address.rsplit(":", 1)[1])
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}: .*--metrics-port"):
            MetricsServer(metrics.registry, lambda: Health(True), port)
    with pytest.raises(ConfigError, match="expected 0 \\(none\\) or a TCP port"):
        serve(metrics.registry, lambda: Health(True), 70_000)
