"""Route tables, catalogs and messages on a real broker: publish, read back, send and tail.

Every test uses its own topic prefix (a uuid), so tests share the session's broker and nothing else.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from streaming.errors import ConfigError
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import encode_route, route_to_record
from streaming.rules.model import Route
from streaming.tables.loading import load_catalog_files, load_route_files
from streaming.tables.operations import RouteOperation
from streaming.tables.reader import MISSING_VERSION, read_routes
from streaming.tables.topic_io import (
    produce_records,
    publish_catalogs,
    publish_routes,
    read_catalogs,
    read_latest,
)
from streaming.tables.tsql import parse_route_script
from streaming.topics import catalogs_topic, outbound_topic, routes_topic
from tests.commands import run_command

pytestmark = pytest.mark.integration

UTC = timezone.utc
REPO = Path(__file__).resolve().parents[2]
GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
AW_GUID = "2b0c4f4e-6b1d-4a7e-9a35-1c7f0e6d5a01"


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def now() -> datetime:
    return datetime.now(UTC)


def sql(text: str, instance: str = "i1") -> list[RouteOperation]:
    return parse_route_script(text, "test.sql", now=now(), default_instance=instance)


def read_route_table(bootstrap: str, topic: str) -> tuple[tuple[Route, ...], str]:
    read = read_routes(bootstrap, topic)
    return read.values(), read.version


def test_missing_topic_reads_as_an_empty_table(kafka_bootstrap: str, prefix: str) -> None:
    read = read_routes(kafka_bootstrap, routes_topic(prefix))
    assert (read.table, read.version, read.skipped) == ({}, MISSING_VERSION, ())


def test_yaml_then_tsql_reads_back_last_value_per_key(kafka_bootstrap: str, prefix: str) -> None:
    topic = routes_topic(prefix)
    yaml_ops = load_route_files([REPO / "routes/demo/routes.yaml"], now=now())
    changes = publish_routes(kafka_bootstrap, yaml_ops, topic)
    assert [c.action for c in changes] == ["create"] * 8

    # The T-SQL script states i1's part again: its routes replace the same keys (load is idempotent).
    sql_ops = load_route_files([REPO / "routes/demo/routes.sql"], now=now())
    changes = publish_routes(kafka_bootstrap, sql_ops, topic)
    assert [c.action for c in changes] == ["replace"] * 3
    publish_routes(
        kafka_bootstrap,
        sql(
            "USE AW\nCREATE ROUTE OrderPartsRoute WITH SERVICE_NAME = 'OrderParts', ADDRESS = 'TCP://i3:4022'"
        ),
        topic,
    )

    read = read_routes(kafka_bootstrap, topic)
    table, version = read.table, read.version
    assert version == "p0:12"
    assert sorted(table) == [
        "f1/msdb/ToInitiator",
        "f1/msdb/ToOrderParts",
        "i1/AW/AutoCreatedLocal",
        "i1/AW/OrderPartsRoute",
        "i1/msdb/AutoCreatedLocal",
        "i2/Parts/AutoCreatedLocal",
        "i2/Parts/InitiatorRoute",
        "i2/msdb/AutoCreatedLocal",
    ]
    assert table["i1/AW/OrderPartsRoute"] == Route(
        scope="AW", name="OrderPartsRoute", service="OrderParts", address="TCP://i3:4022"
    )
    assert table["i2/Parts/InitiatorRoute"].broker_instance == AW_GUID
    routes_only, same_version = read_route_table(kafka_bootstrap, topic)
    assert same_version == version and routes_only == tuple(table[k] for k in sorted(table))


def test_drop_publishes_a_tombstone_that_removes_the_route(kafka_bootstrap: str, prefix: str) -> None:
    topic = routes_topic(prefix)
    publish_routes(
        kafka_bootstrap,
        sql("USE AW CREATE ROUTE a WITH ADDRESS='LOCAL' CREATE ROUTE b WITH ADDRESS='LOCAL'"),
        topic,
    )
    changes = publish_routes(kafka_bootstrap, sql("USE AW DROP ROUTE a"), topic)
    assert [(c.action, c.key, c.route) for c in changes] == [("drop", "i1/AW/a", None)]
    read = read_routes(kafka_bootstrap, topic)
    assert sorted(read.table) == ["i1/AW/b"] and read.version == "p0:3"
    with pytest.raises(ConfigError, match="cannot drop a route that does not exist"):
        publish_routes(kafka_bootstrap, sql("USE AW DROP ROUTE a"), topic)


def test_alter_changes_only_the_named_clauses(kafka_bootstrap: str, prefix: str) -> None:
    topic = routes_topic(prefix)
    publish_routes(
        kafka_bootstrap,
        sql(
            f"USE AW CREATE ROUTE m WITH SERVICE_NAME = 'S', BROKER_INSTANCE = '{GUID}', LIFETIME = 3600, "
            "ADDRESS = 'TCP://p1:4022', MIRROR_ADDRESS = 'TCP://p2:4022'"
        ),
        topic,
    )
    (before,), _ = read_route_table(kafka_bootstrap, topic)
    publish_routes(kafka_bootstrap, sql("USE AW ALTER ROUTE m WITH ADDRESS = 'TCP://p3:4022'"), topic)
    (after,), version = read_route_table(kafka_bootstrap, topic)
    assert after.address == "TCP://p3:4022"
    assert (after.service, after.broker_instance, after.mirror_address) == ("S", GUID, "TCP://p2:4022")
    assert after.expires_at == before.expires_at and after.expires_at is not None
    # An alter that would break a rule is refused before anything is written.
    with pytest.raises(ConfigError, match="R5"):
        publish_routes(kafka_bootstrap, sql("USE AW ALTER ROUTE m WITH ADDRESS = 'LOCAL'"), topic)
    assert read_route_table(kafka_bootstrap, topic)[1] == version


def test_routes_commands_load_and_list_mark_expired(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "routes.yaml"
    table.write_text(
        "- {scope: AW, name: Live, address: LOCAL}\n"
        "- {scope: AW, name: Old, service: S, address: 'TCP://h:4022', expires_at: 2020-01-01T00:00:00Z}\n"
        "- {name: Soon, service: T, address: 'TCP://h:4022', lifetime_s: 60}\n"
    )
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    assert run_command(["routes", "load", str(table), "--scope", "msdb", "--instance", "i1", *common]) == 0
    loaded = capsys.readouterr().out
    assert f"published 3 route change(s) to {routes_topic(prefix)}" in loaded
    assert "create  i1/msdb/Soon" in loaded

    assert run_command(["routes", "list", *common]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "INSTANCE",
        "SCOPE",
        "NAME",
        "SERVICE",
        "BROKER",
        "INSTANCE",
        "ADDRESS",
        "MIRROR",
        "EXPIRES",
    ]
    old = next(line for line in out if " Old " in line)
    assert old.rstrip().endswith("2020-01-01T00:00:00Z EXPIRED")
    assert next(line for line in out if " Live " in line).rstrip().endswith("never")
    assert "3 route(s), 1 expired" in out[-1]

    later = (now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert run_command(["routes", "list", "--json", "--at", later, *common]) == 0
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert (rows["Live"]["expired"], rows["Old"]["expired"], rows["Soon"]["expired"]) == (False, True, True)


def test_a_bad_file_publishes_nothing(kafka_bootstrap: str, prefix: str, tmp_path: Path) -> None:
    good = tmp_path / "good.sql"
    good.write_text("USE AW\nCREATE ROUTE r WITH ADDRESS = 'LOCAL'\n")
    bad = tmp_path / "bad.sql"
    bad.write_text("USE AW\nALTER ROUTE missing WITH LIFETIME = 5\n")
    with pytest.raises(ConfigError, match=r"bad\.sql:2: route AW/missing: cannot alter"):
        run_command(
            [
                *("routes", "load", str(good), str(bad), "--instance", "i1"),
                *("--bootstrap", kafka_bootstrap, "--topic-prefix", prefix),
            ]
        )
    assert read_route_table(kafka_bootstrap, routes_topic(prefix))[0] == ()


def test_malformed_route_value_is_skipped_with_its_offset(
    kafka_bootstrap: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = routes_topic(prefix)
    publish_routes(kafka_bootstrap, sql("USE AW CREATE ROUTE good WITH ADDRESS = 'LOCAL'"), topic)
    produce_records(kafka_bootstrap, topic, [(b"i1/AW/bad", b"\x00\x01", None)])
    with caplog.at_level(logging.WARNING, logger="streaming.tables.reader"):
        read = read_routes(kafka_bootstrap, topic)
    ((route,), version) = read.values(), read.version
    assert route.name == "good" and version == "p0:2"
    ((partition, offset, key),) = [(s.partition, s.offset, s.key) for s in read.skipped]
    assert (partition, offset, key) == (0, 1, "i1/AW/bad")
    assert [r.getMessage() for r in caplog.records] == [
        f"skipped {topic}[0]@1 key 'i1/AW/bad': {read.skipped[0].reason}"
    ]
    assert read.skipped[0].reason.startswith("route record: expected Avro router.v1.Route")


def test_routes_keyed_before_instances_had_their_own_tables_are_refused_then_migrated(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = routes_topic(prefix)
    ensure_topics(kafka_bootstrap, [topic], compacted=True)
    old = [Route("AW", "r", "LOCAL"), Route("msdb", "x/y", "TRANSPORT")]  # a name may hold '/'
    records = [(f"{r.scope}/{r.name}".encode(), encode_route(route_to_record(r)), None) for r in old]
    keep = Route("AW", "keep", "LOCAL")
    produce_records(
        kafka_bootstrap, topic, [*records, (b"i2/AW/keep", encode_route(route_to_record(keep)), None)]
    )
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]

    with caplog.at_level(logging.WARNING, logger="streaming.tables.reader"):
        read = read_routes(kafka_bootstrap, topic)
    assert sorted(read.table) == ["i2/AW/keep"]
    assert [s.key for s in read.skipped] == ["AW/r", "msdb/x/y"]
    assert all("router routes migrate --instance NAME" in s.reason for s in read.skipped)

    assert run_command(["routes", "migrate", "--instance", "i1", "--dry-run", *common]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "would move AW/r -> i1/AW/r",
        "would move msdb/x/y -> i1/msdb/x/y",
        f"2 route(s) of {topic} keyed scope/name; wrote nothing",
    ]
    assert read_routes(kafka_bootstrap, topic).version == read.version

    assert run_command(["routes", "migrate", "--instance", "i1", *common]) == 0
    assert f"moved 2 route(s) of {topic} into instance i1's tables" in capsys.readouterr().out
    after = read_routes(kafka_bootstrap, topic)
    assert after.table == {"i1/AW/r": old[0], "i1/msdb/x/y": old[1], "i2/AW/keep": keep}
    assert after.skipped == ()
    assert run_command(["routes", "migrate", "--instance", "i1", *common]) == 0
    assert "moved 0 route(s)" in capsys.readouterr().out


def test_catalogs_round_trip_last_value_per_instance(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = catalogs_topic(prefix)
    instances = load_catalog_files([REPO / "routes/demo/catalogs.yaml"])
    publish_catalogs(kafka_bootstrap, instances, topic)
    changed = instances[0].__class__(**{**instances[0].__dict__, "forwarding": True})
    publish_catalogs(kafka_bootstrap, [changed], topic)
    read, version = read_catalogs(kafka_bootstrap, topic)
    assert read == (instances[2], changed, instances[1])  # by name: f1, i1, i2
    assert version == "p0:4"
    latest, _ = read_latest(kafka_bootstrap, topic)
    assert sorted(latest) == ["f1", "i1", "i2"]

    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    assert run_command(["catalogs", "list", *common]) == 0
    out = capsys.readouterr().out
    assert "instance i1  address TCP://i1.example:4022  forwarding enabled" in out
    assert f"{topic} version p0:4: 3 instance(s)" in out


def test_send_then_tail_decodes_messages_and_headers(
    kafka_bootstrap: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    assert run_command(["catalogs", "load", str(REPO / "routes/demo/catalogs.yaml"), *common]) == 0
    capsys.readouterr()
    assert (
        run_command(
            [
                "send",
                "--instance",
                "i1",
                "--from-database",
                "AW",
                "--to-service",
                "OrderParts",
                "--conversation",
                "c1",
                "--count",
                "3",
                "--body",
                "part {n}",
                "--to-broker-instance",
                "CURRENT DATABASE",
                *common,
            ]
        )
        == 0
    )
    sent = capsys.readouterr().out.splitlines()
    topic = outbound_topic("i1", prefix)
    assert len(sent) == 3 and all(line.startswith(topic) for line in sent)
    produce_records(kafka_bootstrap, topic, [(b"junk", b"\x07", [("error", b"not a message")])])

    assert (
        run_command(
            [
                "tail",
                topic,
                "--from-beginning",
                "--max",
                "4",
                "--timeout",
                "20",
                "--json",
                "--bootstrap",
                kafka_bootstrap,
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["key"] for r in records] == ["c1", "c1", "c1", "junk"]
    values = [r["value"] for r in records[:3]]
    assert [v["sequence_number"] for v in values] == [0, 1, 2]
    assert [v["body"] for v in values] == ["part 0", "part 1", "part 2"]
    assert {v["origin_database"] for v in values} == {"AW"}
    assert {v["to_broker_instance"] for v in values} == {AW_GUID}
    assert records[3]["value_hex"] == "07" and records[3]["headers"] == {"error": "not a message"}
    assert "could not decode 1 bytes" in records[3]["error"]


def test_send_inbound_from_a_file(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = tmp_path / "m.yaml"
    messages.write_text(
        "- {conversation_id: a, to_service: OrderParts}\n"
        "- {conversation_id: b, to_service: InitiatorService, is_initiator: false,\n"
        f"   to_broker_instance: '{AW_GUID}'}}\n"
    )
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    assert run_command(["send", "--instance", "i2", "--inbound", "--file", str(messages), *common]) == 0
    capsys.readouterr()
    topic = f"{prefix}.i2.inbound"
    assert (
        run_command(
            [
                "tail",
                topic,
                "--from-beginning",
                "--max",
                "2",
                "--timeout",
                "20",
                "--json",
                "--bootstrap",
                kafka_bootstrap,
            ]
        )
        == 0
    )
    values = [json.loads(line)["value"] for line in capsys.readouterr().out.splitlines()]
    assert sorted((v["conversation_id"], v["origin_database"], v["is_initiator"]) for v in values) == [
        ("a", None, True),
        ("b", None, False),
    ]
