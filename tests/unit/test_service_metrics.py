"""The routing services' and the endpoint's metrics and health (`streaming.observe.services`,
`endpoint_metrics`, `directory_metrics`, `ddr_metrics`): no Kafka, no Spark. An endpoint's store is a
real SQLite file under tmp_path; scrapes run in a thread of their own, as the metrics server's do."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.commands.common import add_metrics_arguments
from streaming.ddr.answers import (
    ANSWERS,
    CLOSED,
    LEFT,
    Act,
    Classification,
    Mapping,
    Mode,
    answer,
    answered_with,
)
from streaming.endpoint import EndpointCounts
from streaming.endpoint import metrics as endpoint_metrics
from streaming.endpoint.metrics import EndpointCollector
from streaming.endpoint.protocol import END_DIALOG, ERROR
from streaming.endpoint.store import DialogStore, Incoming, StoreFigures, read_figures
from streaming.errors import ConfigError
from streaming.observe import ddr_metrics, directory_metrics
from streaming.observe.ddr_metrics import DdrCollector, DdrFigures
from streaming.observe.directory_metrics import DirectoryCollector, DirectoryFigures
from streaming.observe.server import new_registry
from streaming.observe.services import LoopState, LoopWatch, judge_loop

LABELS = {"instance": "i1", "service": "SalesRouter"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> str:
    """The exposition, made in a thread of its own (as the metrics server makes it)."""
    out: list[str] = []
    thread = threading.Thread(target=lambda: out.append(generate_latest(registry).decode()))
    thread.start()
    thread.join(30)
    assert out, "the scrape did not finish"
    return out[0]


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def families(text: str, prefix: str) -> set[str]:
    """The names of the exported families starting with `prefix` (a counter's without its _total)."""
    return {f.name for f in text_string_to_metric_families(text) if f.name.startswith(prefix)}


def listed(metrics: dict[str, str]) -> set[str]:
    return {name.removesuffix("_total") for name in metrics}


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the judgement ---------------------------------------------------------------------------------


def test_a_loop_that_polls_and_hears_kafka_within_the_bound_is_healthy_and_says_what_it_did() -> None:
    state = LoopState(LABELS, 100.0, polled_at=195.0, kafka_at=190.0, did="AW asked for Remote", did_at=150.0)
    health = judge_loop(state, now=200.0, bound_s=30.0)
    assert health.status == 200
    assert health.body == {
        "instance": "i1",
        "service": "SalesRouter",
        "status": "ok",
        "bound_s": 30.0,
        "started_at": 100.0,
        "last_poll": {"at": 195.0, "age_s": 5.0},
        "kafka": {"at": 190.0, "age_s": 10.0},
        "last_did": {"what": "AW asked for Remote", "at": 150.0, "age_s": 50.0},
    }


def test_a_loop_that_has_not_polled_yet_is_starting() -> None:
    health = judge_loop(LoopState(LABELS, 100.0), now=103.0)
    assert health.status == 503
    assert health.body["reason"] == "starting: the loop has not polled yet (3 s since start)"
    assert health.body["status"] == "unavailable" and health.body["instance"] == "i1"


def test_a_loop_that_stopped_polling_is_unhealthy_past_the_bound_only() -> None:
    state = LoopState(LABELS, 100.0, polled_at=160.0, kafka_at=160.0)
    assert judge_loop(state, now=190.0, bound_s=30.0).status == 200  # at the bound: still healthy
    late = judge_loop(state, now=200.0, bound_s=30.0)
    assert late.status == 503
    assert late.body["reason"].startswith("the loop has not polled for 40 s (bound 30 s)")
    assert judge_loop(state, now=200.0, bound_s=60.0).status == 200  # the bound is the caller's


def test_a_loop_that_polls_while_kafka_does_not_answer_is_unhealthy_with_the_client_s_words() -> None:
    away = "Failed to get metadata: Local: Broker transport failure"
    state = LoopState(LABELS, 100.0, polled_at=199.5, kafka_at=155.0, kafka_error=away)
    health = judge_loop(state, now=200.0, bound_s=30.0)
    assert health.status == 503
    assert health.body["reason"] == (
        f"Kafka has not answered the loop for 45 s (bound 30 s); the last request said: {away}"
    )
    assert health.body["kafka"] == {"at": 155.0, "age_s": 45.0, "error": away}
    never = judge_loop(LoopState(LABELS, 100.0, polled_at=101.0), now=102.0)
    assert never.status == 503
    assert never.body["reason"] == "Kafka has not answered the loop since it started (2 s ago)"


def test_a_stopped_loop_is_unhealthy_whatever_it_did_last() -> None:
    state = LoopState(LABELS, 100.0, stopped="the service has stopped", polled_at=199.0, kafka_at=199.0)
    health = judge_loop(state, now=200.0)
    assert (health.status, health.body["reason"]) == (503, "the service has stopped")


def test_the_watch_keeps_the_first_stop_reason_and_asks_kafka_only_when_due() -> None:
    clock = Clock(1_000.0)
    watch = LoopWatch(LABELS, 30.0, clock)
    assert watch.kafka_due()  # never answered, never asked
    assert not watch.kafka_due()  # asked just now
    clock.now += 5.0
    assert watch.kafka_due()  # every 5 s
    watch.kafka_answered()
    clock.now += 4.0
    assert not watch.kafka_due()  # an answer counts as an ask
    watch.polled()
    watch.did("took 3")
    assert watch.health().status == 200
    assert watch.state().did == "took 3" and watch.state().did_at == 1_009.0
    watch.kafka_failed("gone")
    assert watch.state().kafka_error == "gone" and watch.health().status == 200  # within the bound
    clock.now += 31.0
    watch.polled()
    assert watch.health().body["reason"].startswith("Kafka has not answered the loop for 35 s")
    watch.stop("the service failed: boom")
    watch.stop("the service has stopped")
    assert watch.health().body["reason"] == "the service failed: boom"
    watch.restart()
    watch.kafka_answered()
    assert watch.health().status == 200


def test_a_short_bound_makes_the_watch_ask_kafka_more_often() -> None:
    clock = Clock(0.0)
    watch = LoopWatch(LABELS, 1.5, clock)
    assert watch.kafka_due()
    clock.now += 0.4
    assert not watch.kafka_due()
    clock.now += 0.1
    assert watch.kafka_due()  # a third of the bound: it stays healthy while Kafka answers
    with pytest.raises(ConfigError, match="health_bound_s: expected a bound > 0 seconds, got 0"):
        LoopWatch(LABELS, 0.0)


def test_the_metrics_flags_default_to_no_server_on_loopback() -> None:
    parser = argparse.ArgumentParser()
    add_metrics_arguments(parser, "the service")
    assert vars(parser.parse_args([])) == {"metrics_port": 0, "metrics_host": "127.0.0.1"}
    assert vars(parser.parse_args(["--metrics-port", "9464", "--metrics-host", "0.0.0.0"])) == {
        "metrics_port": 9464,
        "metrics_host": "0.0.0.0",
    }


# --- the endpoint ----------------------------------------------------------------------------------

ENDPOINT = {"instance": "i1", "database": "AW", "service": "Client"}


def endpoint_registry(store: Path, counts: EndpointCounts, watch: LoopWatch) -> CollectorRegistry:
    registry = new_registry()
    registry.register(EndpointCollector(ENDPOINT, counts, store, watch))
    return registry


def test_an_endpoint_exports_its_counts_and_its_store_s_figures_read_from_another_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "client.db"
    store = DialogStore(path)
    for conversation in ("c1", "c2"):
        store.begin(conversation, "Server", None, None)
    for n in range(3):
        store.send(("c1", True), "DEFAULT", f"{n}".encode(), 1_000, 5_000)
    first = Incoming("c9", 0, True, "Far", None, "DEFAULT", b"<hello/>", None)
    store.arrive([first], 1_000)  # opens the target side c9 and queues its first message (CL2)
    counts = EndpointCounts(taken=1, duplicates=2, early=3, discarded=4, sent=3, resent=5, acks_sent=6)
    counts.acks_received, counts.acked, counts.malformed, counts.expired = 7, 8, 9, 10
    watch = LoopWatch(ENDPOINT, clock=Clock(1_234.5))
    watch.polled()

    got = samples(scrape(endpoint_registry(path, counts, watch)))

    labels = tuple(sorted(ENDPOINT.items()))
    expected = {
        "router_endpoint_sent_total": 3,
        "router_endpoint_resent_total": 5,
        "router_endpoint_acks_sent_total": 6,
        "router_endpoint_acks_received_total": 7,
        "router_endpoint_acknowledged_total": 8,
        "router_endpoint_received_total": 1,
        "router_endpoint_duplicates_total": 2,
        "router_endpoint_early_total": 3,
        "router_endpoint_discarded_total": 4,
        "router_endpoint_malformed_total": 9,
        "router_endpoint_expired_total": 10,
        "router_endpoint_open_dialogs": 3,
        "router_endpoint_unacknowledged_messages": 3,
        "router_endpoint_queued_messages": 1,
        "router_endpoint_last_pump_timestamp_seconds": 1_234.5,
    }
    assert {name: got[(name, labels)] for name in expected} == expected
    assert read_figures(path) == StoreFigures(dialogs=3, unacknowledged=3, queued=1)
    store.close()


def test_every_metric_an_endpoint_exports_is_listed_and_only_those(tmp_path: Path) -> None:
    DialogStore(tmp_path / "s.db").close()
    watch = LoopWatch(ENDPOINT)
    watch.polled()
    text = scrape(endpoint_registry(tmp_path / "s.db", EndpointCounts(), watch))
    assert families(text, "router_") == listed(endpoint_metrics.METRICS)
    counters = {
        n: v for (n, _), v in samples(text).items() if n.startswith("router_") and n.endswith("_total")
    }
    assert counters == dict.fromkeys(counters, 0) and len(counters) == 11


def test_a_store_that_cannot_be_read_leaves_out_its_gauges_not_the_scrape(tmp_path: Path) -> None:
    text = scrape(endpoint_registry(tmp_path / "gone.db", EndpointCounts(sent=2), LoopWatch(ENDPOINT)))
    got = samples(text)
    assert got[("router_endpoint_sent_total", tuple(sorted(ENDPOINT.items())))] == 2
    assert not [name for name, _ in got if name == "router_endpoint_open_dialogs"]
    assert not (tmp_path / "gone.db").exists()  # read-only: the scrape made no file


# --- the directory service -------------------------------------------------------------------------


def test_the_directory_counts_answers_by_database_and_result_and_unanswered_by_reason() -> None:
    figures = DirectoryFigures()
    watch = LoopWatch(
        {"instance": "i1", "service": "SQL/ServiceBroker/BrokerConfiguration"}, clock=Clock(50.0)
    )
    registry = new_registry()
    registry.register(DirectoryCollector("i1", ["AW", "Parts"], figures, watch))

    before = samples(scrape(registry))
    parts_errors = (("database", "Parts"), ("instance", "i1"), ("result", "error"))
    assert before[("router_directory_requests_total", parts_errors)] == 0
    assert before[("router_directory_unanswered_total", (("instance", "i1"), ("reason", "malformed")))] == 0
    assert not [n for n, _ in before if n == "router_directory_last_answer_timestamp_seconds"]

    figures.answered("AW", directory_metrics.ROUTE, 10.0)
    figures.answered("AW", directory_metrics.ERROR, 11.0)
    figures.answered("AW", directory_metrics.ERROR, 12.0)
    figures.unanswered(directory_metrics.MALFORMED)
    figures.unanswered(directory_metrics.NOT_MISSING_ROUTE)
    watch.polled()
    text = scrape(registry)
    got = samples(text)

    def requests(database: str, result: str) -> float:
        key = (("database", database), ("instance", "i1"), ("result", result))
        return got[("router_directory_requests_total", key)]

    assert (requests("AW", "route"), requests("AW", "error"), requests("Parts", "route")) == (1, 2, 0)
    unanswered = {
        dict(labels)["reason"]: value
        for (name, labels), value in got.items()
        if name == "router_directory_unanswered_total"
    }
    assert unanswered == {
        "malformed": 1,
        "not_missing_route": 1,
        "no_origin_database": 0,
        "no_service_name": 0,
    }
    assert got[("router_directory_last_answer_timestamp_seconds", (("instance", "i1"),))] == 12.0
    assert got[("router_directory_last_poll_timestamp_seconds", (("instance", "i1"),))] == 50.0
    assert families(text, "router_") == listed(directory_metrics.METRICS)
    with pytest.raises(ValueError, match="expected a reason"):
        figures.unanswered("other")


# --- the data-dependent routing service ------------------------------------------------------------

TO_EAST = Classification("SalesEast")
MAPPED = Mapping("in-1", "out-1", "SalesEast")


def reply(*, inbound: bool, message_type: str = "DEFAULT", **options: object) -> str:
    """What the routing service's answer to such a message did (`answered_with`)."""
    options.setdefault("mapping", None)
    options.setdefault("mode", Mode.FORWARD)
    return answered_with(
        answer("SalesRouter", inbound=inbound, message_type=message_type, error=None, **options)  # type: ignore[arg-type]
    )


def test_an_answer_is_named_by_its_first_step_in_the_act_vocabulary() -> None:
    assert reply(inbound=True, target=TO_EAST) == Act.BEGIN.value  # classified: forwarded
    assert reply(inbound=True, target=TO_EAST, mode=Mode.REDIRECT) == Act.REDIRECT.value
    assert reply(inbound=True, target=Classification(error="no service")) == Act.FAIL_IN.value
    assert reply(inbound=True, mapping=MAPPED) == Act.SEND_OUT.value
    assert reply(inbound=False, mapping=MAPPED) == Act.SEND_IN.value
    assert reply(inbound=True, mapping=MAPPED, message_type=END_DIALOG) == Act.END_OUT.value
    assert reply(inbound=False, mapping=MAPPED, message_type=ERROR) == Act.FAIL_IN.value
    assert reply(inbound=False) == LEFT  # a message on a dialog no longer mapped
    assert set(ANSWERS) == {a.value for a in Act} - {Act.FORGET.value} | {LEFT, CLOSED}


def test_a_routing_service_exports_its_answers_and_classifications_every_one_from_zero() -> None:
    figures = DdrFigures()
    labels = {"instance": "i1", "database": "Sales", "service": "SalesRouter"}
    registry = new_registry()
    registry.register(DdrCollector(labels, ANSWERS, figures))
    before = samples(scrape(registry))
    acts = {
        dict(key)["act"]: value
        for (name, key), value in before.items()
        if name == "router_ddr_messages_total"
    }
    assert acts == dict.fromkeys(ANSWERS, 0)

    figures.classified(ddr_metrics.ROUTED)
    figures.classified(ddr_metrics.UNROUTED)
    figures.answered(Act.BEGIN.value, 70.0)
    figures.answered(Act.FAIL_IN.value, 71.0)
    figures.answered(CLOSED, 72.0)
    text = scrape(registry)
    got = samples(text)
    key = tuple(sorted(labels.items()))

    def with_label(name: str, label: str, value: str) -> float:
        return got[(name, tuple(sorted((*key, (label, value)))))]

    assert with_label("router_ddr_messages_total", "act", "begin") == 1
    assert with_label("router_ddr_messages_total", "act", "fail_in") == 1
    assert with_label("router_ddr_messages_total", "act", "closed") == 1
    assert with_label("router_ddr_messages_total", "act", "send_in") == 0
    assert with_label("router_ddr_classified_total", "result", "routed") == 1
    assert with_label("router_ddr_classified_total", "result", "unrouted") == 1
    assert got[("router_ddr_last_answer_timestamp_seconds", key)] == 72.0
    assert families(text, "router_") == listed(ddr_metrics.METRICS)
