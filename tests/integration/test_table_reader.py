"""The table reader on a real broker: bad records skipped with a warning, the rest read, incrementally.

Records are written straight to the topics with `produce_records` (not through the loaders), as a
stray producer would. Every test has its own topics (`unique_topic`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from streaming.cli import main
from streaming.devtools.embedded_kafka import EmbeddedKafka
from streaming.kafka.admin import admin_client, end_offsets, ensure_topics, leader_gone, leader_moving
from streaming.kafka.avro import catalog_to_record, encode_catalog, encode_route, route_to_record
from streaming.rules.model import Database, Instance, MirrorRole, Route
from streaming.tables.reader import (
    MISSING_VERSION,
    MirrorTableReader,
    RouteTableReader,
    TableReader,
    read_routes,
)
from streaming.tables.topic_io import produce_records, publish_catalogs, read_catalogs
from streaming.topics import catalogs_topic, routes_topic

pytestmark = pytest.mark.integration

GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
LOCAL_ROUTE = Route("AW", "Local", "LOCAL")
PARTS_ROUTE = Route("AW", "ToParts", "TCP://i2.example:4022", service="OrderParts")
GARBAGE = random.Random(7).randbytes(64)  # fixed bytes: unit tests check they are no Avro route
I1 = Instance(
    "i1",
    "TCP://i1.example:4022",
    (Database("AW", GUID), Database("msdb", "0a0a0a0a-0000-0000-0000-00000000000d")),
)
I2 = Instance("i2", "TCP://i2.example:4022", (Database("Parts", "7e3d9c21-58f4-4b0a-8d6e-3f2a1b0c9d01"),))


def route_value(route: Route) -> bytes:
    return encode_route(route_to_record(route))


def write(bootstrap: str, topic: str, *records: tuple[bytes | None, bytes | None]) -> None:
    produce_records(bootstrap, topic, [(key, value, None) for key, value in records])


def write_dirty_routes(bootstrap: str, topic: str) -> None:
    """Two good routes (offsets 0, 1), then one bad record of each kind (offsets 2 to 6).

    The topic is created without compaction, as a topic made by hand may be: a compacted topic
    refuses a record without a key, so only such a topic can hold one.
    """
    ensure_topics(bootstrap, [topic])
    write(
        bootstrap,
        topic,
        (b"i1/AW/Local", route_value(LOCAL_ROUTE)),
        (b"i1/AW/ToParts", route_value(PARTS_ROUTE)),
        (b"i1/AW/Junk", GARBAGE),
        (None, route_value(Route("AW", "NoKey", "LOCAL"))),
        (b"i1/AW/BadAddress", route_value(Route("AW", "BadAddress", "not an address"))),
        (
            b"i1/AW/BadGuid",
            route_value(Route("AW", "BadGuid", "TCP://h:4022", service="S", broker_instance="not-a-guid")),
        ),
        (b"\xff\xfe", route_value(Route("AW", "BadKey", "LOCAL"))),
    )


def make_compacted(bootstrap: str, topic: str) -> None:
    """Turn compaction on for an existing topic (the records it holds stay)."""
    entry = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    client = admin_client(bootstrap)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "streaming.tables.reader"]


@pytest.fixture
def prefix(unique_topic: Callable[[str], str]) -> str:
    """A topic prefix of this test's own: the CLI names its topics from one."""
    return unique_topic("p")


# --- router routes list / load -------------------------------------------------------------------


def test_routes_list_shows_the_good_routes_and_counts_the_skipped_ones(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = routes_topic(prefix)
    write_dirty_routes(kafka_bootstrap, topic)
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]

    with caplog.at_level(logging.WARNING):
        assert main(["routes", "list", *common]) == 0
    out = capsys.readouterr().out
    names = [line.split()[2] for line in out.splitlines()[1:-1]]
    assert names == ["Local", "ToParts"]
    assert out.splitlines()[-1].startswith(f"{topic} version p0:7: 2 route(s), 0 expired at ")
    assert out.splitlines()[-1].endswith(
        "; 5 record(s) skipped (see the warnings; --strict makes them an error)"
    )
    warnings = warnings_of(caplog)
    assert [w.split(":")[0] for w in warnings] == [
        f"skipped {topic}[0]@{offset} key {key!r}"
        for offset, key in [
            (2, "i1/AW/Junk"),
            (3, None),
            (4, "i1/AW/BadAddress"),
            (5, "i1/AW/BadGuid"),
            (6, b"\xff\xfe"),
        ]
    ]
    assert "could not decode 64 bytes" in warnings[0] or "of which only" in warnings[0]
    assert "expected a key on a compacted table topic, got none" in warnings[1]
    assert "field 'address': expected LOCAL, TRANSPORT or TCP://host:port[/]" in warnings[2]
    assert "got 'not an address'" in warnings[2]
    assert "field 'broker_instance': expected a GUID" in warnings[3]
    assert "expected a UTF-8 key" in warnings[4]

    assert main(["routes", "list", "--json", *common]) == 0
    listed = capsys.readouterr()
    assert len(listed.out.splitlines()) == 2
    assert "5 record(s) skipped" in listed.err


def test_routes_list_strict_exits_2_with_the_skipped_records(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = routes_topic(prefix)
    write_dirty_routes(kafka_bootstrap, topic)

    assert main(["routes", "list", "--strict", "--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]) == 2
    result = capsys.readouterr()
    assert result.out == ""
    assert f"--strict: expected every record of {topic} to be valid, 5 skipped:" in result.err
    for offset in range(2, 7):
        assert f"\n  {topic}[0]@{offset} key " in result.err


def test_routes_load_publishes_on_a_topic_with_garbage(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = routes_topic(prefix)
    write_dirty_routes(kafka_bootstrap, topic)
    make_compacted(kafka_bootstrap, topic)  # `routes load` publishes to compacted topics only
    script = tmp_path / "more.sql"
    script.write_text(
        "USE AW\n"
        "CREATE ROUTE Added WITH ADDRESS = 'TCP://i3:4022'\n"
        "ALTER ROUTE ToParts WITH ADDRESS = 'TCP://i4:4022'\n"
        "CREATE ROUTE BadAddress WITH ADDRESS = 'LOCAL'\n"
    )

    assert (
        main(
            [
                "routes",
                "load",
                str(script),
                "--instance",
                "i1",
                "--bootstrap",
                kafka_bootstrap,
                "--topic-prefix",
                prefix,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "create  i1/AW/Added" in out and "alter   i1/AW/ToParts" in out and "create  i1/AW/BadAddress" in out
    )
    assert f"published 3 route change(s) to {topic}" in out

    read = read_routes(kafka_bootstrap, topic)
    assert sorted(read.table) == ["i1/AW/Added", "i1/AW/BadAddress", "i1/AW/Local", "i1/AW/ToParts"]
    assert read.table["i1/AW/ToParts"].address == "TCP://i4:4022"
    assert read.table["i1/AW/BadAddress"] == Route("AW", "BadAddress", "LOCAL")
    # A bad record stays skipped until its key is written again: BadAddress was, the others not.
    assert [(s.offset, s.key) for s in read.skipped] == [
        (2, "i1/AW/Junk"),
        (3, None),
        (5, "i1/AW/BadGuid"),
        (6, b"\xff\xfe"),
    ]


# --- route scopes and the catalogs ---------------------------------------------------------------


def test_a_route_outside_its_instances_catalog_is_skipped_and_refused_at_load(
    kafka_bootstrap: str,
    prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each instance has its own tables: a route's scope must be a database of its own instance."""
    topic = routes_topic(prefix)
    publish_catalogs(kafka_bootstrap, [I1, I2], catalogs_topic(prefix))
    ensure_topics(kafka_bootstrap, [topic], compacted=True)
    write(
        kafka_bootstrap,
        topic,
        (b"i2/Parts/Local", route_value(Route("Parts", "Local", "LOCAL"))),
        (b"i1/Parts/Local", route_value(Route("Parts", "Local", "LOCAL"))),  # Parts is i2's, not i1's
        (b"i3/AW/Local", route_value(Route("AW", "Local", "LOCAL"))),  # no catalog names i3
    )
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]

    with caplog.at_level(logging.WARNING):
        assert main(["routes", "list", *common]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:3] == ["i2", "Parts", "Local"]
    assert "1 route(s)" in out and "2 record(s) skipped" in out
    first, second = warnings_of(caplog)
    assert first.startswith(f"skipped {topic}[0]@1 key 'i1/Parts/Local': route Parts/Local: field 'scope'")
    assert "expected a database of the route's instance in the catalogs (AW, msdb), got 'Parts'" in first
    assert second.startswith(f"skipped {topic}[0]@2 key 'i3/AW/Local': route AW/Local of instance 'i3'")
    assert "expected an instance of the catalogs (i1, i2)" in second

    create = tmp_path / "create.sql"
    create.write_text("USE Parts\nCREATE ROUTE Other WITH ADDRESS = 'LOCAL'\n")
    assert main(["routes", "load", str(create), "--instance", "i1", *common]) == 2
    assert "create.sql:2: route Parts/Other: field 'scope': expected a database" in capsys.readouterr().err
    assert main(["routes", "load", str(create), "--instance", "i3", *common]) == 2
    assert (
        "field 'instance': expected an instance of the catalogs (i1, i2), got 'i3'" in capsys.readouterr().err
    )
    assert main(["routes", "load", str(create), "--instance", "i2", *common]) == 0
    # Its routes can still be dropped, so a database that left the catalogs leaves nothing behind.
    drop = tmp_path / "drop.sql"
    drop.write_text("-- instance: i1\nUSE Parts\nDROP ROUTE Local\n")
    assert main(["routes", "load", str(drop), *common]) == 0
    assert [
        s.key for s in read_routes(kafka_bootstrap, topic, databases={"i1": {"AW"}, "i2": {"Parts"}}).skipped
    ] == ["i3/AW/Local"]
    assert sorted(read_routes(kafka_bootstrap, topic, instance="i2").table) == [
        "i2/Parts/Local",
        "i2/Parts/Other",
    ]


def test_use_databases_brings_back_the_routes_of_a_new_database(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("routes")
    ensure_topics(kafka_bootstrap, [topic], compacted=True)
    parts = Route("Parts", "Local", "LOCAL")
    write(
        kafka_bootstrap,
        topic,
        (b"i1/AW/Local", route_value(LOCAL_ROUTE)),
        (b"i1/Parts/Local", route_value(parts)),
    )

    with RouteTableReader(kafka_bootstrap, topic, databases={"i1": {"AW"}}) as reader:
        with caplog.at_level(logging.WARNING):
            assert reader.read_to_end() is True
        assert reader.routes == (LOCAL_ROUTE,)
        assert [(s.offset, s.key) for s in reader.skipped] == [(1, "i1/Parts/Local")]
        assert len(warnings_of(caplog)) == 1

        assert reader.use_databases({"i1": {"AW", "Parts"}}) is True
        assert reader.routes == (LOCAL_ROUTE, parts) and reader.skipped == ()
        assert reader.use_databases({"i1": ["Parts", "AW"]}) is False
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert reader.use_databases({"i1": {"AW"}}) is True
        assert reader.routes == (LOCAL_ROUTE,)
        assert [w.split(":")[0] for w in warnings_of(caplog)] == [
            f"skipped {topic}[0]@1 key 'i1/Parts/Local'"
        ]


# --- the incremental reader ----------------------------------------------------------------------


def poll_until_changed(reader: TableReader[Any], timeout: float = 20.0) -> None:
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
    write(kafka_bootstrap, topic, (b"i1/AW/Local", route_value(LOCAL_ROUTE)))

    with RouteTableReader(kafka_bootstrap, topic) as reader:
        assert (reader.routes, reader.version) == ((), MISSING_VERSION)  # nothing read yet
        assert reader.read_to_end() is True
        assert (reader.routes, reader.version) == ((LOCAL_ROUTE,), "p0:1")
        assert reader.instance_routes == (("i1", LOCAL_ROUTE),)
        assert reader.poll() is False
        assert reader.read_to_end() is False

        # A new good record: picked up by poll() alone.
        write(kafka_bootstrap, topic, (b"i1/AW/ToParts", route_value(PARTS_ROUTE)))
        poll_until_changed(reader)
        assert reader.routes == (LOCAL_ROUTE, PARTS_ROUTE) and reader.version == "p0:2"
        # Made again once the table changed, and kept while it does not.
        assert reader.instance_routes == (("i1", LOCAL_ROUTE), ("i1", PARTS_ROUTE))
        assert reader.instance_routes is reader.instance_routes

        # A bad value for a key that has a good one: skipped, the good one stands.
        with caplog.at_level(logging.WARNING):
            write(
                kafka_bootstrap,
                topic,
                (b"i1/AW/ToParts", route_value(Route("AW", "ToParts", "not an address"))),
            )
            assert reader.read_to_end() is False
        assert reader.routes == (LOCAL_ROUTE, PARTS_ROUTE) and reader.version == "p0:3"
        assert reader.table == {"i1/AW/Local": LOCAL_ROUTE, "i1/AW/ToParts": PARTS_ROUTE}
        assert [(s.offset, s.key) for s in reader.skipped] == [(2, "i1/AW/ToParts")]
        assert [w.split(":")[0] for w in warnings_of(caplog)] == [f"skipped {topic}[0]@2 key 'i1/AW/ToParts'"]
        once = read_routes(kafka_bootstrap, topic)  # a fresh reader comes to the same table
        assert (once.table, once.version, once.skipped) == (reader.table, reader.version, reader.skipped)

        # The same value again is no change; a new value for the key replaces the skipped record.
        write(kafka_bootstrap, topic, (b"i1/AW/Local", route_value(LOCAL_ROUTE)))
        assert reader.read_to_end() is False
        moved = Route("AW", "ToParts", "TCP://i3.example:4022", service="OrderParts")
        write(kafka_bootstrap, topic, (b"i1/AW/ToParts", route_value(moved)))
        assert reader.read_to_end() is True
        assert reader.routes == (LOCAL_ROUTE, moved) and reader.skipped == ()
        assert reader.instance_routes == (("i1", LOCAL_ROUTE), ("i1", moved))

        # A tombstone deletes; one after a bad record clears the record too.
        write(kafka_bootstrap, topic, (b"i1/AW/Local", None))
        poll_until_changed(reader)
        assert reader.routes == (moved,) and reader.version == "p0:6"
        assert reader.instance_routes == (("i1", moved),)
        write(kafka_bootstrap, topic, (b"i1/AW/Junk", GARBAGE))
        assert reader.read_to_end() is False and len(reader.skipped) == 1
        write(kafka_bootstrap, topic, (b"i1/AW/Junk", None))
        assert reader.read_to_end() is False and reader.skipped == ()
        assert reader.poll() is False and reader.version == "p0:8"


def test_a_reader_of_a_topic_created_later_reads_it_once_it_exists(
    kafka_bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    topic = unique_topic("routes")
    with RouteTableReader(kafka_bootstrap, topic) as reader:
        assert reader.read_to_end() is False and reader.version == MISSING_VERSION
        ensure_topics(kafka_bootstrap, [topic], compacted=True)
        write(kafka_bootstrap, topic, (b"i1/AW/Local", route_value(LOCAL_ROUTE)))
        assert reader.poll() is True  # the first poll after a read that found no topic looks again
        assert reader.routes == (LOCAL_ROUTE,) and reader.version == "p0:1"


def test_a_topic_read_the_moment_it_was_created_waits_for_its_leader(
    kafka_bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """As `router run` reads the mirrors topic it has just created: the broker the metadata names as
    leader may not lead yet and answers NOT_LEADER_FOR_PARTITION (seen under load), which the
    reader asks again; on an idle broker the first answer is usually right already."""
    for n in range(8):
        topic = unique_topic(f"mirrors{n}")
        ensure_topics(kafka_bootstrap, [topic], compacted=True)
        with MirrorTableReader(kafka_bootstrap, topic) as reader:
            assert reader.read_to_end() is False
            assert reader.version == "p0:0"


LEADER_AWAY_S = 3.0
"""How long the fault test below keeps a partition without a leader."""


@pytest.mark.fault
def test_offsets_asks_wait_for_a_leader_that_is_away_and_then_answer(tmp_path: Path) -> None:
    """The leader race forced, where the test above only meets it when it happens: a cluster of two
    brokers, a routes topic whose one replica is on the second, and that broker stopped, so its
    partition has no leader while `end_offsets` (with the client its caller keeps) and a table
    reader ask for its end. Both wait until the broker is back 3 s later, then answer: the end
    offset, and the routes. Both clients say so at once ("No leaders found", "Unknown partition"),
    where a leader that is away should be waited for."""
    with EmbeddedKafka(tmp_path / "one") as first, EmbeddedKafka(tmp_path / "two", joins=first) as second:
        bootstrap = first.bootstrap
        client = admin_client(bootstrap)
        topic = "routes-led-by-the-second"
        client.create_topics([NewTopic(topic, 1, replica_assignment=[[second.node_id]])])[topic].result(30)
        write(
            bootstrap,
            topic,
            (b"i1/AW/Local", route_value(LOCAL_ROUTE)),
            (b"i1/AW/ToParts", route_value(PARTS_ROUTE)),
        )
        assert end_offsets(bootstrap, topic, client=client) == {0: 2}
        second.stop()

        answers: dict[str, object] = {}
        seconds: dict[str, float] = {}

        def read_routes() -> object:
            with RouteTableReader(bootstrap, topic, timeout=60.0) as reader:
                reader.read_to_end()
                return set(reader.routes)

        def ask(name: str, asking: Callable[[], object]) -> None:
            started = time.monotonic()
            try:
                answers[name] = asking()
            except Exception as exc:  # the test reports it below
                answers[name] = exc
            seconds[name] = time.monotonic() - started

        threads = [
            threading.Thread(target=ask, args=(name, asking), daemon=True)
            for name, asking in [
                ("end offsets", lambda: end_offsets(bootstrap, topic, timeout=60.0, client=client)),
                ("routes", read_routes),
            ]
        ]
        for thread in threads:
            thread.start()
        time.sleep(LEADER_AWAY_S)
        assert not answers, f"expected the asks to wait for the leader, they ended: {answers}"
        second.start(detach=False)
        for thread in threads:
            thread.join(60.0)
        assert answers["end offsets"] == {0: 2}, answers
        assert answers["routes"] == {LOCAL_ROUTE, PARTS_ROUTE}, answers
        assert min(seconds.values()) >= LEADER_AWAY_S, seconds


def test_only_a_leader_not_ready_yet_is_asked_again() -> None:
    def raised(code: int) -> KafkaException:
        return KafkaException(KafkaError(code, "Failed to get watermark offsets"))

    assert leader_moving(raised(KafkaError.NOT_LEADER_FOR_PARTITION))
    assert leader_moving(raised(KafkaError.LEADER_NOT_AVAILABLE))
    assert not leader_moving(raised(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not leader_moving(raised(KafkaError.UNKNOWN_TOPIC_OR_PART))
    # A topic's own error in the metadata is a KafkaError, not raised.
    assert leader_moving(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
    assert not leader_moving(None)
    # list_offsets' own error for a leader that went away after the metadata named it.
    gone = KafkaException(KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders"))
    assert leader_gone(gone) and not leader_moving(gone)
    assert leader_gone(raised(KafkaError._UNKNOWN_PARTITION))
    assert leader_gone(raised(KafkaError.NOT_LEADER_FOR_PARTITION))
    assert not leader_gone(raised(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    # A listed partition's leader that has not yet taken in a new topic; the topic itself unknown in
    # the metadata is not asked again (`leader_moving`, above).
    assert leader_gone(raised(KafkaError.UNKNOWN_TOPIC_OR_PART))


def test_the_end_offsets_of_a_topic_created_a_moment_ago_wait_for_its_leader(
    kafka_bootstrap: str, unique_topic: Callable[[str], str]
) -> None:
    """As a replay asks for the end offsets of the delayed topic its job has just created, or a
    test for those of a destination topic the router created a moment ago: a partition whose
    leader does not lead yet (NOT_LEADER_FOR_PARTITION, seen under load) is asked again."""
    client = admin_client(kafka_bootstrap)
    for n in range(8):
        topic = unique_topic(f"fresh{n}")
        for future in client.create_topics([NewTopic(topic, num_partitions=2)]).values():
            future.result(30)  # created: its leaders are not waited for
        assert end_offsets(kafka_bootstrap, topic) == {0: 0, 1: 0}


def test_end_offsets_asks_with_the_client_it_is_given(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay keeps one admin client for its asks (a new one costs about 60 ms): given one, no
    other is made, even while nothing is queued in it (such a client is false)."""
    topic = unique_topic("kept")
    ensure_topics(kafka_bootstrap, [topic], partitions=2)
    client = admin_client(kafka_bootstrap)
    assert not client  # what `client or a new one` got wrong

    def refused(_kafka: object) -> None:
        raise AssertionError("end_offsets made an admin client of its own")

    monkeypatch.setattr("streaming.kafka.admin.admin_client", refused)
    assert end_offsets(kafka_bootstrap, topic, client=client) == {0: 0, 1: 0}


# --- catalogs ------------------------------------------------------------------------------------


def test_catalogs_list_skips_bad_catalogs_and_strict_refuses_them(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = catalogs_topic(prefix)
    publish_catalogs(kafka_bootstrap, [I1, I2], topic)
    unreachable = Instance("i3", "not an address", (Database("X", GUID),))
    twice = Instance("i4", "TCP://i4:4022", (Database("X", GUID), Database("X", GUID)))
    write(
        kafka_bootstrap,
        topic,
        (b"i1", GARBAGE),  # after i1's good catalog: i1 keeps it
        (b"i3", encode_catalog(catalog_to_record(unreachable))),
        (b"i4", encode_catalog(catalog_to_record(twice))),
        (b"i5", encode_catalog(catalog_to_record(I2))),  # i2's catalog under another key
    )
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]

    with caplog.at_level(logging.WARNING):
        assert main(["catalogs", "list", *common]) == 0
    out = capsys.readouterr().out
    assert "instance i1  address TCP://i1.example:4022" in out and "instance i2  " in out
    assert f"{topic} version p0:6: 2 instance(s); 4 record(s) skipped" in out
    warnings = warnings_of(caplog)
    assert [w.split(":")[0] for w in warnings] == [
        f"skipped {topic}[0]@{offset} key {key!r}"
        for offset, key in [(2, "i1"), (3, "i3"), (4, "i4"), (5, "i5")]
    ]
    assert "instance i3: field 'address': expected TCP://host:port[/]" in warnings[1]
    assert "instance i4, database X: field 'name': duplicate database name" in warnings[2]
    assert "expected the record's key to be the instance name 'i2', got 'i5'" in warnings[3]
    assert read_catalogs(kafka_bootstrap, topic) == ((I1, I2), "p0:6")  # what the job reads

    assert main(["catalogs", "list", "--strict", *common]) == 2
    assert f"--strict: expected every record of {topic} to be valid, 4 skipped:" in capsys.readouterr().err


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
