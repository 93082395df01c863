"""The table reader on a real broker: bad records skipped with a warning, the rest read, incrementally.

Records are written straight to the topics with `produce_records` (not through the loaders), as a
stray producer would. Every test has its own topics (`unique_topic`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

import pytest

from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import encode_route, route_to_record
from streaming.rules.model import MirrorRole, Route
from streaming.tables.reader import (
    MISSING_VERSION,
    MirrorTableReader,
    RouteTableReader,
    TableReader,
    read_routes,
)
from streaming.tables.topic_io import produce_records

pytestmark = pytest.mark.integration

LOCAL_ROUTE = Route("AW", "Local", "LOCAL")
PARTS_ROUTE = Route("AW", "ToParts", "TCP://i2.example:4022", service="OrderParts")
GARBAGE = random.Random(7).randbytes(64)  # fixed bytes: unit tests check they are no Avro route


def route_value(route: Route) -> bytes:
    return encode_route(route_to_record(route))


def write(bootstrap: str, topic: str, *records: tuple[bytes | None, bytes | None]) -> None:
    produce_records(bootstrap, topic, [(key, value, None) for key, value in records])


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "streaming.tables.reader"]


# --- route scopes -------------------------------------------------------------------------------


def test_use_databases_brings_back_the_routes_of_a_new_database(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("routes")
    ensure_topics(kafka_bootstrap, [topic], compacted=True)
    parts = Route("Parts", "Local", "LOCAL")
    write(
        kafka_bootstrap, topic, (b"AW/Local", route_value(LOCAL_ROUTE)), (b"Parts/Local", route_value(parts))
    )

    with RouteTableReader(kafka_bootstrap, topic, databases={"AW"}) as reader:
        with caplog.at_level(logging.WARNING):
            assert reader.read_to_end() is True
        assert reader.routes == (LOCAL_ROUTE,)
        assert [(s.offset, s.key) for s in reader.skipped] == [(1, "Parts/Local")]
        assert len(warnings_of(caplog)) == 1

        assert reader.use_databases({"AW", "Parts"}) is True
        assert reader.routes == (LOCAL_ROUTE, parts) and reader.skipped == ()
        assert reader.use_databases({"Parts", "AW"}) is False
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert reader.use_databases({"AW"}) is True
        assert reader.routes == (LOCAL_ROUTE,)
        assert [w.split(":")[0] for w in warnings_of(caplog)] == [f"skipped {topic}[0]@1 key 'Parts/Local'"]


# --- the incremental reader ----------------------------------------------------------------------


def poll_until_changed(reader: TableReader[object], timeout: float = 20.0) -> None:
    """Call poll() until it reports a change; the consumer fetches in the background meanwhile."""
    deadline = time.monotonic() + timeout
    while not reader.poll():
        if time.monotonic() > deadline:
            raise AssertionError(f"{reader.topic}: expected poll() to see the new record within {timeout} s")
        time.sleep(0.01)


def test_the_incremental_reader_applies_changes_keeps_the_last_good_value_and_reports_changed(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("routes")
    ensure_topics(kafka_bootstrap, [topic], compacted=True)
    write(kafka_bootstrap, topic, (b"AW/Local", route_value(LOCAL_ROUTE)))

    with RouteTableReader(kafka_bootstrap, topic) as reader:
        assert (reader.routes, reader.version) == ((), MISSING_VERSION)  # nothing read yet
        assert reader.read_to_end() is True
        assert (reader.routes, reader.version) == ((LOCAL_ROUTE,), "p0:1")
        assert reader.poll() is False
        assert reader.read_to_end() is False

        # A new good record: picked up by poll() alone.
        write(kafka_bootstrap, topic, (b"AW/ToParts", route_value(PARTS_ROUTE)))
        poll_until_changed(reader)
        assert reader.routes == (LOCAL_ROUTE, PARTS_ROUTE) and reader.version == "p0:2"

        # A bad value for a key that has a good one: skipped, the good one stands.
        with caplog.at_level(logging.WARNING):
            write(
                kafka_bootstrap, topic, (b"AW/ToParts", route_value(Route("AW", "ToParts", "not an address")))
            )
            assert reader.read_to_end() is False
        assert reader.routes == (LOCAL_ROUTE, PARTS_ROUTE) and reader.version == "p0:3"
        assert reader.table == {"AW/Local": LOCAL_ROUTE, "AW/ToParts": PARTS_ROUTE}
        assert [(s.offset, s.key) for s in reader.skipped] == [(2, "AW/ToParts")]
        assert [w.split(":")[0] for w in warnings_of(caplog)] == [f"skipped {topic}[0]@2 key 'AW/ToParts'"]
        once = read_routes(kafka_bootstrap, topic)  # a fresh reader comes to the same table
        assert (once.table, once.version, once.skipped) == (reader.table, reader.version, reader.skipped)

        # The same value again is no change; a new value for the key replaces the skipped record.
        write(kafka_bootstrap, topic, (b"AW/Local", route_value(LOCAL_ROUTE)))
        assert reader.read_to_end() is False
        moved = Route("AW", "ToParts", "TCP://i3.example:4022", service="OrderParts")
        write(kafka_bootstrap, topic, (b"AW/ToParts", route_value(moved)))
        assert reader.read_to_end() is True
        assert reader.routes == (LOCAL_ROUTE, moved) and reader.skipped == ()

        # A tombstone deletes; one after a bad record clears the record too.
        write(kafka_bootstrap, topic, (b"AW/Local", None))
        poll_until_changed(reader)
        assert reader.routes == (moved,) and reader.version == "p0:6"
        write(kafka_bootstrap, topic, (b"AW/Junk", GARBAGE))
        assert reader.read_to_end() is False and len(reader.skipped) == 1
        write(kafka_bootstrap, topic, (b"AW/Junk", None))
        assert reader.read_to_end() is False and reader.skipped == ()
        assert reader.poll() is False and reader.version == "p0:8"


def test_a_reader_of_a_topic_created_later_reads_it_once_it_exists(
    kafka_bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    topic = unique_topic("routes")
    with RouteTableReader(kafka_bootstrap, topic) as reader:
        assert reader.read_to_end() is False and reader.version == MISSING_VERSION
        ensure_topics(kafka_bootstrap, [topic], compacted=True)
        write(kafka_bootstrap, topic, (b"AW/Local", route_value(LOCAL_ROUTE)))
        assert reader.poll() is True  # the first poll after a read that found no topic looks again
        assert reader.routes == (LOCAL_ROUTE,) and reader.version == "p0:1"


# --- mirrors -------------------------------------------------------------------------------------


def test_mirror_roles_skip_a_bad_role_or_address_and_keep_the_last_good_role(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("mirrors")
    ensure_topics(kafka_bootstrap, [topic], compacted=True)
    write(
        kafka_bootstrap,
        topic,
        (b"TCP://P1.example:4022/", b"principal"),
        (b"tcp://p2.example:4022", b"bogus"),
        (b"not-an-address", b"mirror"),
    )
    with MirrorTableReader(kafka_bootstrap, topic) as reader:
        with caplog.at_level(logging.WARNING):
            assert reader.read_to_end() is True
        assert reader.roles == {"tcp://p1.example:4022": MirrorRole.PRINCIPAL}
        assert [(s.offset, s.key) for s in reader.skipped] == [
            (1, "tcp://p2.example:4022"),
            (2, "not-an-address"),
        ]
        warnings = warnings_of(caplog)
        assert "expected one of principal, mirror, unreachable, got 'bogus'" in warnings[0]
        assert "field 'key': expected TCP://host:port[/]" in warnings[1]

        write(
            kafka_bootstrap,
            topic,
            (b"tcp://p2.example:4022", b" Mirror\n"),
            (b"tcp://p1.example:4022", b"gone"),
        )
        assert reader.read_to_end() is True
        assert reader.roles == {
            "tcp://p1.example:4022": MirrorRole.PRINCIPAL,
            "tcp://p2.example:4022": MirrorRole.MIRROR,
        }
        assert [(s.offset, s.key) for s in reader.skipped] == [
            (2, "not-an-address"),
            (4, "tcp://p1.example:4022"),
        ]

        write(kafka_bootstrap, topic, (b"tcp://p1.example:4022/", b"unreachable"))
        poll_until_changed(reader)
        assert reader.roles["tcp://p1.example:4022"] is MirrorRole.UNREACHABLE
        assert reader.poll() is False
