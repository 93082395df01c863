"""Issue 43: one broker of several going away is one line, and its return another."""

from __future__ import annotations

import logging

import pytest

from streaming.kafka.broker_watch import BrokerWatch
from streaming.kafka.client_log import LIBRDKAFKA_LOGGER, OutageLog

THREE = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}
WITHOUT_TWO = {n: a for n, a in THREE.items() if n != 2}
AWAY = (
    "Kafka broker 2 (127.0.0.1:9002) is away: 2 of 3 brokers answer; the partitions it led are led by "
    "their replicas on the others, where they have any"
)
REFUSED_BY_TWO = (
    "FAIL [rdkafka#consumer-20] [thrd:127.0.0.1:9002/2]: 127.0.0.1:9002/2: Connect to ipv4#127.0.0.1:9002 "
    "failed: Connection refused (after 0ms in state CONNECT)"
)


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    caplog.set_level(logging.WARNING, logger="test.brokers")
    return logging.getLogger("test.brokers")


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_a_broker_away_is_said_once_and_its_return_once(
    log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    watch = BrokerWatch(THREE, log)
    watch.seen(THREE, now=0.0)
    assert caplog.records == []
    for second in range(1, 20):  # asked every second while it is away: said once
        watch.seen(WITHOUT_TWO, now=float(second))
    assert watch.away == [2]
    watch.seen(THREE, now=21.0)
    watch.seen(THREE, now=22.0)
    assert watch.away == []
    assert lines(caplog) == [
        AWAY,
        "Kafka broker 2 (127.0.0.1:9002) is back after 20 s: 3 of 3 brokers answer",
    ]


def test_a_broker_that_joins_later_is_watched_too(
    log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    watch = BrokerWatch({1: THREE[1]}, log)
    watch.seen(THREE, now=0.0)
    assert caplog.records == []
    watch.seen({1: THREE[1], 2: THREE[2]}, now=1.0)
    assert lines(caplog) == [AWAY.replace("broker 2 (127.0.0.1:9002)", "broker 3 (127.0.0.1:9003)")]


def test_a_client_refused_by_one_broker_of_several_is_the_same_one_line(
    log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    """Often before the metadata is asked again; and the broker is back only once no client is
    refused for a while, even if the metadata lists it (a crashed broker is listed until fenced)."""
    watch = BrokerWatch(THREE, log, quiet_s=5.0)
    assert watch.refused(2, now=0.0) and watch.refused(2, now=1.0)
    watch.seen(WITHOUT_TWO, now=2.0)
    watch.seen(THREE, now=4.0)  # listed, but refused a second ago
    assert watch.refused(2, now=6.0)
    watch.seen(THREE, now=10.0)
    assert watch.away == [2]
    watch.seen(THREE, now=11.0)
    assert lines(caplog) == [
        AWAY,
        "Kafka broker 2 (127.0.0.1:9002) is back after 11 s: 3 of 3 brokers answer",
    ]


def test_a_refusal_by_the_only_broker_or_an_unknown_one_is_left_to_the_outage_line(
    log: logging.Logger,
) -> None:
    assert not BrokerWatch({1: THREE[1]}, log).refused(1)
    assert not BrokerWatch(THREE, log).refused(7)
    assert not BrokerWatch({1: THREE[1]}, log).refused_line(REFUSED_BY_TWO.replace("9002", "9001"))


def test_the_clients_lines_about_one_broker_of_several_go_to_the_watch(
    log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    clients = logging.getLogger(f"{LIBRDKAFKA_LOGGER}.test-brokers")
    outage = OutageLog()
    outage.one_broker = BrokerWatch(THREE, log).refused_line
    clients.addFilter(outage)
    try:
        for _ in range(20):
            clients.warning(REFUSED_BY_TWO)
        assert outage.unreachable() is None  # the cluster answers: no outage of Kafka
        # The group coordinator's thread names the broker by its address only.
        clients.warning(
            "FAIL [rdkafka#consumer-13] [thrd:GroupCoordinator]: GroupCoordinator: 127.0.0.1:9002: Connect "
            "to ipv4#127.0.0.1:9002 failed: Connection refused (after 0ms in state CONNECT)"
        )
        assert outage.unreachable() is None
        # An address that is none of the cluster's brokers: the cluster's outage line, as before.
        clients.warning(REFUSED_BY_TWO.replace("9002", "90021"))
    finally:
        clients.removeFilter(outage)
    said = lines(caplog)
    assert said[0] == AWAY
    assert len(said) == 2 and said[1].startswith(
        "Kafka unreachable: FAIL [rdkafka#consumer-20] [thrd:127.0.0.1:90021/2]"
    )
