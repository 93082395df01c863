"""Issue 15: a broker outage shows in the router's output even when no micro-batch runs meanwhile.

`router run` keeps one admin client, which asks every few seconds which brokers the cluster lists
(`RouterJob._watch_brokers`, through `brokers_listed`). That client's own lines about a broker
refusing it are what starts the outage's one line (`streaming.kafka.client_log`). An admin client
hands its lines over only when polled; nothing polled the kept one, so the line came only when some
other client of the router happened to try the broker during the outage, and a run that had read
its whole input before the broker went away said nothing of it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from streaming.devtools.embedded_kafka import EmbeddedKafka, free_port
from streaming.kafka.admin import admin_client, brokers_listed, ensure_topics
from streaming.kafka.client_log import LIBRDKAFKA_LOGGER, collapse_outages, librdkafka_log

pytestmark = pytest.mark.integration


def test_the_kept_admin_client_tells_of_an_outage_when_no_other_client_asks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LIBRDKAFKA_LOGGER)
    outage = collapse_outages()  # the router's one filter on the clients' lines, as `router run` installs it
    broker = EmbeddedKafka(tmp_path, port=free_port())
    bootstrap = broker.start().bootstrap  # it comes back on the same port
    try:
        ensure_topics(bootstrap, ["watched"])
        client = admin_client(bootstrap, lazy=True)  # as the job keeps it
        listed = brokers_listed(client, "watched", 10.0)
        assert listed is not None and len(listed.brokers) == 1
        outage.answered(librdkafka_log(), time.monotonic())  # an outage an earlier test left is over
        assert outage.unreachable() is None

        broker.stop()
        assert brokers_listed(client, "watched", 2.5) is None
        lines = [record.getMessage() for record in caplog.records]
        started = [line for line in lines if line.startswith("Kafka unreachable: ")]
        assert len(started) == 1 and bootstrap in started[0], lines
        assert outage.unreachable() is not None
        # Its repeats are held back: a second ask while the broker is away adds no line.
        assert brokers_listed(client, "watched", 1.0) is None
        assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("Kafka ")] == started

        broker.start()
        asked = time.monotonic()
        assert brokers_listed(client, "watched", 30.0) is not None
        outage.answered(librdkafka_log(), asked)  # as the job does once its ask, or a batch, is answered
        assert caplog.records[-1].getMessage().startswith("Kafka reachable again after "), lines
        assert outage.unreachable() is None
    finally:
        broker.stop()
