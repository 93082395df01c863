"""Issue 15: a broker outage shows as one line when it starts and one when Kafka answers again."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from streaming.kafka.client_log import LIBRDKAFKA_LOGGER, OutageLog, librdkafka_log

REFUSED = "127.0.0.1:19092/bootstrap: Connect to ipv4#127.0.0.1:19092 failed: Connection refused"


@pytest.fixture
def outage(caplog: pytest.LogCaptureFixture) -> Iterator[OutageLog]:
    """An OutageLog on a logger of its own, for one test (each test's filter is removed after it)."""
    log = logging.getLogger(f"{LIBRDKAFKA_LOGGER}.test")
    outage = OutageLog()
    log.addFilter(outage)
    caplog.set_level(logging.INFO)
    yield outage
    log.removeFilter(outage)


def test_an_outage_is_one_line_and_its_repeats_are_held_back(
    outage: OutageLog, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger(f"{LIBRDKAFKA_LOGGER}.test")
    asked_before = time.monotonic()
    for _ in range(50):
        log.warning(REFUSED)
    log.warning("some other client line")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        f"Kafka unreachable: {REFUSED} (its clients' repeats are held back until it answers)",
        "some other client line",
    ]
    # A batch that began before the outage says nothing about whether Kafka is back.
    outage.answered(log, asked_before)
    assert len(caplog.records) == 2
    outage.answered(log, time.monotonic())
    assert caplog.records[-1].getMessage().startswith("Kafka reachable again after ")
    assert caplog.records[-1].getMessage().endswith("(49 repeated client line(s) held back)")
    # Over: the next refusal starts a new outage and is shown.
    log.warning(REFUSED)
    assert caplog.records[-1].getMessage().startswith("Kafka unreachable: ")


def test_without_an_outage_answered_says_nothing(outage: OutageLog, caplog: pytest.LogCaptureFixture) -> None:
    outage.answered(logging.getLogger(LIBRDKAFKA_LOGGER), time.monotonic())
    assert caplog.records == []


def test_a_state_the_client_waits_out_by_itself_is_not_shown(caplog: pytest.LogCaptureFixture) -> None:
    """An idempotent producer's first request to a broker started a moment ago is retried by the
    client itself; its line would be the only Kafka line of a clean `make demo`."""
    caplog.set_level(logging.INFO)
    log = librdkafka_log()
    log.warning(
        "GETPID [rdkafka#producer-5] [thrd:main]: Failed to acquire idempotence PID from broker "
        "127.0.0.1:19092/1: Broker: Coordinator load in progress: retrying"
    )
    log.warning("some other client line")
    assert [record.getMessage() for record in caplog.records] == ["some other client line"]
    assert log.name == LIBRDKAFKA_LOGGER


def test_lines_a_client_hands_over_at_its_close_are_held_back(
    outage: OutageLog, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger(f"{LIBRDKAFKA_LOGGER}.test")
    with outage.closing():
        log.warning(REFUSED)
        log.warning("127.0.0.1:19092/1: Disconnected: connection closed by peer")
    assert caplog.records == []
    log.warning(REFUSED)  # a broker away after the close still shows
    assert caplog.records[-1].getMessage().startswith("Kafka unreachable: ")
