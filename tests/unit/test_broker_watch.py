"""Issue 43: one broker of several going away is one line, and its return another."""

from __future__ import annotations

import logging

import pytest

from streaming.kafka.broker_watch import BrokerWatch

THREE = {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}


def test_a_broker_away_is_said_once_and_its_return_once(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.brokers")
    caplog.set_level(logging.WARNING, logger="test.brokers")
    watch = BrokerWatch(THREE)
    watch.seen(THREE, log, now=0.0)
    assert caplog.records == []
    without_two = {n: a for n, a in THREE.items() if n != 2}
    for second in range(1, 20):  # asked every second while it is away: said once
        watch.seen(without_two, log, now=float(second))
    assert watch.away == [2]
    watch.seen(THREE, log, now=21.0)
    watch.seen(THREE, log, now=22.0)
    assert watch.away == []
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "Kafka broker 2 (127.0.0.1:9002) is away: 2 of 3 brokers answer; the partitions it led are led by "
        "their replicas on the others, where they have any",
        "Kafka broker 2 (127.0.0.1:9002) is back after 20 s: 3 of 3 brokers answer",
    ]


def test_a_broker_that_joins_later_is_watched_too(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.brokers")
    caplog.set_level(logging.WARNING, logger="test.brokers")
    watch = BrokerWatch({1: THREE[1]})
    watch.seen(THREE, log, now=0.0)
    assert caplog.records == []
    watch.seen({1: THREE[1], 2: THREE[2]}, log, now=1.0)
    assert [r.getMessage() for r in caplog.records] == [
        "Kafka broker 3 (127.0.0.1:9003) is away: 2 of 3 brokers answer; the partitions it led are led by "
        "their replicas on the others, where they have any"
    ]
