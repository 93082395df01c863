"""The routes, catalogs, send and tail commands without a broker: parsing, building, printing."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka import Message

from streaming.commands import catalogs, common, routes, send, tail
from streaming.config import load_settings
from streaming.errors import ConfigError
from streaming.kafka import avro
from streaming.rules.model import Route
from streaming.tables.validate import Source
from tests.commands import parse

UTC = timezone.utc
NOW = datetime(2026, 1, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]
GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"


def test_bootstrap_flag_then_environment_then_settings_file_then_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(common.BOOTSTRAP_ENV, raising=False)
    monkeypatch.delenv(common.CONFIG_ENV, raising=False)
    assert (
        common.kafka_settings(parse(["routes", "list"])).bootstrap
        == common.DEFAULT_BOOTSTRAP
        == "127.0.0.1:19092"
    )
    settings = tmp_path / "router.yaml"
    settings.write_text("bootstrap: file:3\n")
    assert common.kafka_settings(parse(["routes", "list", "--config", str(settings)])).bootstrap == "file:3"
    monkeypatch.setenv(common.CONFIG_ENV, str(settings))
    assert common.kafka_settings(parse(["routes", "list"])).bootstrap == "file:3"
    monkeypatch.setenv(common.BOOTSTRAP_ENV, "env:1")
    assert common.kafka_settings(parse(["routes", "list"])).bootstrap == "env:1"
    assert common.kafka_settings(parse(["routes", "list", "--bootstrap", "flag:2"])).bootstrap == "flag:2"


def test_every_kafka_command_reads_the_security_settings_of_the_settings_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Section 2 of the connection: one setting for every client, read from the one file."""
    monkeypatch.delenv(common.BOOTSTRAP_ENV, raising=False)
    monkeypatch.setenv("T_KAFKA_PASSWORD", "s3cret")
    settings = tmp_path / "router.yaml"
    settings.write_text(
        "instance: i1\nbootstrap: b:9093\nkafka:\n  security_protocol: sasl_plaintext\n"
        "  sasl_username: router\n  sasl_password_env: T_KAFKA_PASSWORD\n"
    )
    commands = (
        ["routes", "list"],
        ["catalogs", "list"],
        ["send", "--instance", "i1", "--to-service", "S"],
        ["tail", "router.i1.outbound"],
    )
    for argv in commands:
        connection = common.kafka_settings(parse([*argv, "--config", str(settings)]))
        assert connection.client_config()["sasl.password"] == "s3cret", argv
        assert connection.client_config()["security.protocol"] == "SASL_PLAINTEXT", argv
    assert load_settings(settings).kafka == common.kafka_settings(
        parse(["routes", "list", "--config", str(settings)])
    )


@pytest.mark.parametrize("action", [["load", "--dry-run"], ["diff"], ["load"]])
def test_routes_files_are_checked_before_the_broker_is_asked(action: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.sql"
    bad.write_text("USE AW;\nCREATE ROUTE r WITH ADDRESS = 'LOCAL', MIRROR_ADDRESS = 'TCP://m:4022';\n")
    args = parse(["routes", *action, str(bad), "--instance", "i1", "--bootstrap", "127.0.0.1:1"])
    with pytest.raises(ConfigError, match=r"bad\.sql:2: route AW/r: field 'MIRROR_ADDRESS': a LOCAL route"):
        args.func(args)


def test_routes_load_needs_files_or_a_sys_routes_csv_with_its_instance_and_database(tmp_path: Path) -> None:
    args = parse(["routes", "load", "--bootstrap", "127.0.0.1:1"])
    with pytest.raises(
        ConfigError, match=re.escape("expected route files or --from-sys-routes FILE.csv, got neither")
    ):
        args.func(args)
    csv_file = tmp_path / "routes.csv"
    csv_file.write_text("name,remote_service_name,broker_instance,lifetime,address,mirror_address\n")
    args = parse(["routes", "diff", "--from-sys-routes", str(csv_file), "--instance", "i1"])
    with pytest.raises(
        ConfigError, match=r"routes\.csv: expected --database: a sys.routes CSV names neither"
    ):
        args.func(args)


def test_routes_load_refuses_a_bad_file_before_publishing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {scope: AW, name: r, address: LOCAL}\n- {scope: AW, name: s, address: 'tcp://nope'}\n")
    args = parse(["routes", "load", str(bad), "--bootstrap", "127.0.0.1:1"])
    with pytest.raises(ConfigError, match=r"bad\.yaml:2: route AW/s: field 'address'"):
        args.func(args)


def test_catalogs_load_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["catalogs", "load", "--dry-run", str(REPO / "routes/demo/catalogs.yaml")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "i1: TCP://i1.example:4022, 2 database(s)" in out
    assert "f1: TCP://f1.example:4022, 1 database(s)" in out
    assert "checked: 3 instance catalog(s)" in out


def test_route_rows_mark_expired_routes() -> None:
    live = Route(scope="AW", name="r", address="LOCAL")
    old = Route(scope="AW", name="o", service="S", address="TCP://h:1", expires_at=NOW - timedelta(seconds=1))
    assert routes.route_row("i1", live, NOW) == ("i1", "AW", "r", "*", "*", "LOCAL", "-", "never")
    assert routes.route_row("i1", old, NOW)[-1] == "2025-12-31T23:59:59Z EXPIRED"
    assert routes.route_json("i1", old, NOW)["expired"] is True
    assert routes.route_json("i2", old, NOW - timedelta(days=1)) | {"expired": None} == {
        "instance": "i2",
        "scope": "AW",
        "name": "o",
        "service": "S",
        "broker_instance": None,
        "address": "TCP://h:1",
        "mirror_address": None,
        "expires_at": "2025-12-31T23:59:59Z",
        "expired": None,
    }
    assert routes.route_json("i1", old, NOW - timedelta(days=1))["expired"] is False


def test_catalog_description_lists_databases() -> None:
    (instance,) = [
        i
        for i in __import__("streaming.tables.loading", fromlist=["x"]).load_catalog_files(
            [REPO / "routes/demo/catalogs.yaml"]
        )
        if i.name == "i2"
    ]
    text = catalogs.describe(instance)
    assert text.splitlines()[0].startswith("instance i2  address TCP://i2.example:4022  forwarding disabled")
    assert "Parts" in text and "OrderParts" in text


# --- send -------------------------------------------------------------------------------------------


def _defaults(**overrides: object) -> dict[str, object]:
    args = parse(["send", "--instance", "i1", "--from-database", "AW", "--to-service", "OrderParts"])
    return {**send.defaults_from_args(args), "conversation_id": "c1", **overrides}


def test_send_builds_encodable_records_numbered_in_one_conversation() -> None:
    records = [send.message_record({**_defaults(), "body": "m {n}"}, n, NOW, Source("cli")) for n in range(3)]
    assert [r["sequence_number"] for r in records] == [0, 1, 2]
    assert [r["body"] for r in records] == [b"m 0", b"m 1", b"m 2"]
    decoded = avro.decode_message(avro.encode_message(records[0]))
    assert decoded["origin_database"] == "AW"
    assert decoded["is_initiator"] is True
    assert decoded["to_service"] == "OrderParts"
    assert decoded["enqueued_at"] == NOW


def test_send_reply_and_ttl_flags() -> None:
    args = parse(
        [
            "send",
            "--instance",
            "i1",
            "--from-database",
            "AW",
            "--to-service",
            "S",
            "--reply",
            "--ttl-ms",
            "1000",
            "--to-broker-instance",
            GUID.upper(),
        ]
    )
    record = send.message_record({**send.defaults_from_args(args), "body": ""}, 0, NOW, Source("cli"))
    assert record["is_initiator"] is False
    assert record["to_broker_instance"] == GUID
    assert record["expires_at"] == NOW + timedelta(seconds=1)


def test_send_file_yaml_overrides_defaults_and_numbers_per_conversation(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "- {body: first}\n"
        "- {conversation_id: other, to_service: AuditService}\n"
        "- {message_id: m3, hops_remaining: 2}\n"
    )
    records = send.records_from_file(path, _defaults(), NOW)
    assert [(r["conversation_id"], r["sequence_number"]) for r in records] == [
        ("c1", 0),
        ("other", 0),
        ("c1", 1),
    ]
    assert records[0]["body"] == b"first"
    assert records[1]["to_service"] == "AuditService"
    assert records[2]["message_id"] == "m3" and records[2]["hops_remaining"] == 2


def test_send_file_json(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"to_service": "X", "is_initiator": False}]))
    (record,) = send.records_from_file(path, _defaults(), NOW)
    assert record["to_service"] == "X" and record["is_initiator"] is False


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("- {colour: red}\n", r"m\.yaml:1: message #1: field 'colour': unknown field"),
        ("- {body: ok}\n- {hops_remaining: many}\n", r"m\.yaml:2: message #2: .*hops_remaining"),
        (
            "- {to_broker_instance: nope}\n",
            r"m\.yaml:1: message #1: field 'to_broker_instance': expected a GUID",
        ),
        ("- 42\n", r"m\.yaml:1: message #1: expected a mapping"),
        ("[]\n", r"m\.yaml: expected a non-empty list of messages"),
    ],
)
def test_send_file_errors_name_file_line_and_field(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=pattern):
        send.records_from_file(path, _defaults(), NOW)


def test_send_origin_rules() -> None:
    outbound = send.message_record({**_defaults(), "body": ""}, 0, NOW, Source("cli"))
    send.check_origins([outbound], inbound=False, file=None)
    with pytest.raises(ConfigError, match="an inbound message has no origin_database"):
        send.check_origins([outbound], inbound=True, file=None)
    inbound = {**outbound, "origin_database": None}
    send.check_origins([inbound], inbound=True, file=None)
    with pytest.raises(ConfigError, match="expected the sending database"):
        send.check_origins([inbound], inbound=False, file=None)


def test_send_command_line_errors() -> None:
    args = parse(["send", "--instance", "i1", "--inbound", "--from-database", "AW", "--to-service", "S"])
    with pytest.raises(ConfigError, match="--from-database"):
        send.run(args)
    with pytest.raises(ConfigError, match="--to-service"):
        send.run(parse(["send", "--instance", "i1", "--from-database", "AW"]))


# --- tail -------------------------------------------------------------------------------------------


def test_topic_kinds() -> None:
    assert tail.topic_kind("router.routes") == "route"
    assert tail.topic_kind("router.catalogs") == "catalog"
    assert tail.topic_kind("router.i1.deadletter") == "raw"
    assert tail.topic_kind("router.i1.queue.AW.S") == "message"


def _message_bytes() -> bytes:
    return avro.encode_message(
        avro.new_message_record(
            message_id="m1",
            conversation_id="c1",
            to_service="S",
            from_service="F",
            origin_database="AW",
            body=b"hello",
            enqueued_at=NOW,
        )
    )


def test_tail_decodes_a_message_with_all_headers() -> None:
    record = Message(
        topic="router.i1.queue.AW.S",
        partition=0,
        offset=7,
        key=b"c1",
        value=_message_bytes(),
        headers=[
            ("outcome", b"deliver"),
            ("route", b"AutoCreatedLocal"),
            ("match_step", b"M5"),
            ("note", b"a"),
            ("note", b"b"),
            ("raw", b"\xff"),
        ],
        timestamp=(1, 1767225600000),
    )
    described = tail.describe_record(record, "message")
    assert described["headers"] == {
        "outcome": "deliver",
        "route": "AutoCreatedLocal",
        "match_step": "M5",
        "note": ["a", "b"],
        "raw": "0xff",
    }
    assert described["value"]["body"] == "hello"
    assert described["value"]["enqueued_at"] == "2026-01-01T00:00:00Z"
    assert described["timestamp"] == "2026-01-01T00:00:00Z"
    json.dumps(described)
    text = tail.format_record(described)
    assert text.startswith("router.i1.queue.AW.S[0]@7  2026-01-01T00:00:00Z  key=c1")
    assert "outcome=deliver" in text


def test_tail_prints_undecodable_and_deadletter_records_as_hex() -> None:
    bad = Message(
        topic="router.i1.outbound",
        partition=0,
        offset=1,
        key=b"k",
        value=b"\x01\x02",
        headers=[("error", b"boom")],
    )
    described = tail.describe_record(bad, "message")
    assert described["value_hex"] == "0102"
    assert "expected Avro router.v1.Message" in described["error"]
    assert "undecodable:" in tail.format_record(described)
    dead = tail.describe_record(
        Message(
            topic="router.i1.deadletter", partition=0, offset=2, value=b"\xab", headers=[("error", b"bad")]
        ),
        "raw",
    )
    assert dead["value_hex"] == "ab" and dead["headers"] == {"error": "bad"} and "error" not in dead


def test_tail_route_tombstone() -> None:
    described = tail.describe_record(
        Message(topic="router.routes", partition=0, offset=3, key=b"AW/r"), "route"
    )
    assert described["tombstone"] is True
    assert "tombstone" in tail.format_record(described)


def test_settings_keep_choices_an_hour_unless_told(tmp_path: Path) -> None:
    from streaming.config import load_settings

    assert load_settings(None, instance="i1").keep_choice_s == 3600
    path = tmp_path / "s.yaml"
    path.write_text("instance: i1\nkeep_choice_s: 0\n", encoding="utf-8")
    assert load_settings(path).keep_choice_s == 0
    path.write_text("instance: i1\nkeep_choice_s: -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="keep_choice_s must be 0"):
        load_settings(path)


def test_settings_give_two_intervals_unless_the_busy_one_is_no_shorter(tmp_path: Path) -> None:
    from streaming.spark.sources import busy_options

    default = load_settings(None, instance="i1")
    assert (default.trigger_seconds, default.busy_trigger_seconds, default.busy_messages) == (1.0, 0.5, 250)
    assert default.busy and default.interval_seconds == 0.5
    # The query looks every 0.5 s; the messages source gives a batch once 250 wait, or 0.75 s
    # after its last (the round after that: a second).
    assert busy_options(default) == {"minOffsetsPerTrigger": "250", "maxTriggerDelay": "750ms"}
    path = tmp_path / "s.yaml"
    path.write_text("instance: i1\ntrigger_seconds: 2\nbusy_trigger_seconds: 0.2\nbusy_messages: 1000\n")
    given = load_settings(path)
    assert given.interval_seconds == 0.2
    assert busy_options(given) == {"minOffsetsPerTrigger": "1000", "maxTriggerDelay": "1900ms"}
    # A busy interval no shorter than the trigger: one interval, the trigger's, and no pacing.
    for busy in (1.0, 3.0):
        one = load_settings(None, instance="i1", busy_trigger_seconds=busy)
        assert not one.busy and one.interval_seconds == 1.0 and busy_options(one) == {}
        assert " trigger=1.0s master=" in one.describe()
    # The settings line a run logs names both intervals when there are two.
    assert " trigger=2.0s busy_trigger=0.2s busy_messages=1000 master=" in given.describe()
    for key in ("busy_trigger_seconds", "busy_messages"):
        path.write_text(f"instance: i1\n{key}: 0\n")
        with pytest.raises(ConfigError, match="busy_trigger_seconds and busy_messages must be positive"):
            load_settings(path)


def test_settings_refuse_a_topic_prefix_kafka_cannot_take(tmp_path: Path) -> None:
    from streaming.config import load_settings

    assert load_settings(None, instance="i1").topic_prefix == "router"
    path = tmp_path / "s.yaml"
    path.write_text("instance: i1\ntopic_prefix: acme.router_1\n", encoding="utf-8")
    assert load_settings(path).topic_prefix == "acme.router_1"
    path.write_text("instance: i1\ntopic_prefix: acme router\n", encoding="utf-8")
    expected = r"expected a topic prefix of 1 to 150 characters of \[A-Za-z0-9._-\]"
    with pytest.raises(ConfigError, match=rf"s\.yaml: topic_prefix: {expected} .*got 'acme router'"):
        load_settings(path)
    with pytest.raises(ConfigError, match=rf"settings: topic_prefix: {expected} .*151 characters long"):
        load_settings(None, instance="i1", topic_prefix="x" * 151)


def test_settings_name_one_instance_or_several_for_one_query(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("instances: [A, B]\n", encoding="utf-8")
    both = load_settings(path)
    assert (both.instance, both.instances) == ("A", ("A", "B"))
    assert both.checkpoint_dir == Path(".state/checkpoints/A")
    assert "instance=A,B" in both.describe()
    assert load_settings(path, instance="B").instances == ("B",)  # --instance wins over the file
    for text, expected in (
        ("instance: A\ninstances: [A, B]\n", "give `instance` or `instances`, not both"),
        ("instances: [A, A]\n", "an instance is named twice"),
        ("instances: []\n", "expected a list of instance names"),
        ("instances: A\n", "expected a list of instance names"),
        ("topic_prefix: x\n", "`instance` \\(or `instances`, a list\\) is required"),
    ):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match=expected):
            load_settings(path)


def test_the_instances_of_one_query_share_one_retry_time() -> None:
    """The state processor's timer (D2) is one per query."""
    from streaming.rules.model import Database, Instance
    from streaming.topology import Topology

    def instance(name: str, retry_s: float) -> Instance:
        return Instance(
            name,
            f"TCP://{name}:4022",
            (Database("msdb", "0d0d0d0d-0000-0000-0000-00000000000d"),),
            retry_s=retry_s,
        )

    same = Topology((instance("A", 5), instance("F", 5)), "router", {})
    assert (same.name, same.retry_s, same.delayed) == ("A+F", 5, ["router.A.delayed", "router.F.delayed"])
    with pytest.raises(ConfigError, match="one retry_s in their catalogs, got A: 5 s, F: 2 s"):
        Topology((instance("A", 5), instance("F", 2)), "router", {})


@pytest.mark.parametrize("command", [["routes", "list"], ["catalogs", "load"], ["send"], ["run"], ["replay"]])
def test_the_topic_prefix_flag_refuses_a_prefix_kafka_cannot_take(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from streaming.cli import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--topic-prefix", "acme/router"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --topic-prefix: expected a topic prefix of 1 to 150 characters" in err
    assert "got 'acme/router', which holds '/'" in err


def test_run_takes_the_prefix_from_its_settings_file_unless_the_flag_says() -> None:
    from streaming.cli import build_parser

    assert build_parser().parse_args(["run"]).topic_prefix is None
    assert build_parser().parse_args(["run", "--topic-prefix", "acme.r"]).topic_prefix == "acme.r"
    assert parse(["routes", "list"]).topic_prefix == "router"


@pytest.mark.parametrize(
    ("address", "role", "expected"),
    [
        ("TCP://p1:4022", "leader", "expected one of principal, mirror, unreachable, got 'leader'"),
        ("p1:4022", "principal", "expected TCP://host:port"),
    ],
)
def test_mirrors_set_refuses_a_bad_role_or_address_before_it_connects(
    address: str, role: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from streaming.cli import main

    # No broker listens on port 9: the command must fail on the arguments, not on the connection.
    assert main(["mirrors", "set", address, role, "--bootstrap", "127.0.0.1:9"]) == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["routes", "list"],
        ["tail", "router.i1.outbound"],
        ["send", "--instance", "i1", "--to-service", "S"],
        ["run", "--instance", "i1"],
    ],
)
def test_no_broker_at_the_address_is_said_within_seconds_with_the_fix(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42 §5: a command that talks to Kafka says at once that nothing answers, where, and what to do."""
    import time

    from streaming.cli import main
    from streaming.devtools.embedded_kafka import free_port

    monkeypatch.delenv(common.CONFIG_ENV, raising=False)
    monkeypatch.delenv(common.BOOTSTRAP_ENV, raising=False)
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    began = time.monotonic()
    assert main([*argv, "--bootstrap", address]) == 2
    took = time.monotonic() - began
    err = capsys.readouterr().err
    assert f"no Kafka broker answers at {address} (waited 5 s)" in err, err
    assert "router kafka start" in err and "--bootstrap" in err and "ROUTER_BOOTSTRAP" in err, err
    assert took < 15, took
