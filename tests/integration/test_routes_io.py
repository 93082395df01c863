"""Route changes reviewed before they happen, and routes in and out as SQL Server tools write them.

`router routes load --dry-run` and `router routes diff` against a real broker's live tables (and
that they write nothing: the routes topic's end offsets stay where they were), `--from-sys-routes`
with a sys.routes CSV, and `router routes export` loaded back into a second topic prefix. Every test
uses its own topic prefix.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from streaming.errors import ConfigError
from streaming.kafka.admin import end_offsets
from streaming.rules.model import Route
from streaming.tables.reader import read_routes
from streaming.topics import routes_topic
from tests.commands import run_command

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def test_dry_run_and_diff_print_the_change_and_write_nothing(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    demo = str(REPO / "routes/demo/routes.yaml")
    assert run_command(["catalogs", "load", str(REPO / "routes/demo/catalogs.yaml"), *common]) == 0
    assert run_command(["routes", "load", demo, *common]) == 0
    topic = routes_topic(prefix)
    offsets = end_offsets(kafka_bootstrap, topic)
    capsys.readouterr()

    # The live tables loaded again: nothing would change.
    assert run_command(["routes", "diff", demo, *common]) == 0
    assert capsys.readouterr().out == f"{topic} version p0:8: no change\n"

    change = tmp_path / "change.sql"
    change.write_text(
        "-- instance: i1\nUSE AW;\nGO\n"
        "ALTER ROUTE OrderPartsRoute WITH ADDRESS = 'TCP://f2.example:4022';\n"
        "DROP ROUTE AutoCreatedLocal;\n"
        f"CREATE ROUTE Audit WITH SERVICE_NAME = 'AuditService', BROKER_INSTANCE = '{GUID}', "
        "ADDRESS = 'TCP://a.example:4022', MIRROR_ADDRESS = 'TCP://b.example:4022';\n"
    )
    assert run_command(["routes", "load", "--dry-run", str(change), *common]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"would create i1/AW/Audit  service=AuditService, broker_instance={GUID}, "
        f"address=TCP://a.example:4022, mirror_address=TCP://b.example:4022  ({change}:6)",
        f"would drop   i1/AW/AutoCreatedLocal  ({change}:5)",
        "would alter  i1/AW/OrderPartsRoute  address: TCP://f1.example:4022 -> TCP://f2.example:4022  "
        f"({change}:4)",
        f"dry run against {topic} version p0:8: 1 create, 1 alter, 1 drop from 3 route operation(s); "
        "wrote nothing",
    ]
    assert run_command(["routes", "diff", "--json", str(change), *common]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["action"], d["instance"], d["scope"], d["name"]) for d in lines] == [
        ("create", "i1", "AW", "Audit"),
        ("drop", "i1", "AW", "AutoCreatedLocal"),
        ("alter", "i1", "AW", "OrderPartsRoute"),
    ]
    assert lines[2]["fields"] == {"address": {"old": "TCP://f1.example:4022", "new": "TCP://f2.example:4022"}}
    assert end_offsets(kafka_bootstrap, topic) == offsets

    # Loaded for real, the demo's file would now put back what the change took away.
    assert run_command(["routes", "load", str(change), *common]) == 0
    capsys.readouterr()
    assert run_command(["routes", "diff", demo, *common]) == 1
    assert [line.split("  ")[:2] for line in capsys.readouterr().out.splitlines()] == [
        ["create i1/AW/AutoCreatedLocal", "address=LOCAL"],
        ["alter", "i1/AW/OrderPartsRoute"],
        [f"{topic} version p0:11: 1 create, 1 alter, 0 drop"],
    ]


def test_bad_input_is_one_error_and_writes_nothing(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    assert run_command(["catalogs", "load", str(REPO / "routes/demo/catalogs.yaml"), *common]) == 0
    assert run_command(["routes", "load", str(REPO / "routes/demo/routes.yaml"), *common]) == 0
    topic = routes_topic(prefix)
    offsets = end_offsets(kafka_bootstrap, topic)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("- {instance: i9, scope: AW, name: r, address: LOCAL}\n")
    gone = tmp_path / "gone.yaml"
    gone.write_text("- {instance: i1, op: drop, scope: AW, name: NoSuchRoute}\n")
    csv_file = tmp_path / "aw.csv"
    csv_file.write_text("name,remote_service_name,address\nr,NULL,LOCAL\n")
    cases = [
        (
            ["diff", str(unknown)],
            r"unknown\.yaml:1: route AW/r: field 'instance': expected an instance of the catalogs "
            r"\(f1, i1, i2\), got 'i9'; load its catalog first",
        ),
        (["load", "--dry-run", str(gone)], r"gone\.yaml:1: route AW/NoSuchRoute: cannot drop a route that"),
        (["load", str(gone)], r"gone\.yaml:1: route AW/NoSuchRoute: cannot drop a route that does not exist"),
        (
            ["load", "--from-sys-routes", str(csv_file), "--instance", "i1", "--database", "AW"],
            r"aw\.csv:1: header: expected a header row naming the columns .*missing broker_instance, "
            r"lifetime, mirror_address",
        ),
        (
            [
                "load",
                "--from-sys-routes",
                str(tmp_path / "missing.csv"),
                "--instance",
                "i1",
                "--database",
                "AW",
            ],
            r"missing\.csv: cannot read: No such file or directory",
        ),
        (
            ["export", "--instance", "i9"],
            r"--instance: expected an instance with routes on .* \(f1, i1, i2\), got 'i9'",
        ),
        (
            ["export", "--instance", "i1", "--scope", "Parts"],
            r"--scope: expected a database of instance i1 \(AW, msdb\)",
        ),
        (
            ["export", "--instance", "i1", "--format", "csv"],
            r"holds one database's routes, got 2 \(AW, msdb\)",
        ),
    ]
    for argv, error in cases:
        with pytest.raises(ConfigError, match=error):
            run_command(["routes", *argv, *common])
    assert end_offsets(kafka_bootstrap, topic) == offsets


def test_a_sys_routes_csv_loads_into_one_instances_database(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    csv_file = tmp_path / "aw.csv"
    csv_file.write_text(
        "name,remote_service_name,broker_instance,lifetime,address,mirror_address\n"
        "AutoCreatedLocal,NULL,NULL,NULL,LOCAL,NULL\n"
        f"OrderPartsRoute,OrderParts,{GUID},2030-01-01 00:00:00.000,TCP://p1.example:4022,TCP://p2.example:4022\n"
    )
    argv = ["--from-sys-routes", str(csv_file), "--instance", "i1", "--database", "AW", *common]
    assert run_command(["routes", "diff", *argv]) == 1
    assert run_command(["routes", "load", *argv]) == 0
    assert f"published 2 route change(s) to {routes_topic(prefix)}" in capsys.readouterr().out
    assert read_routes(kafka_bootstrap, routes_topic(prefix)).table == {
        "i1/AW/AutoCreatedLocal": Route("AW", "AutoCreatedLocal", "LOCAL"),
        "i1/AW/OrderPartsRoute": Route(
            "AW",
            "OrderPartsRoute",
            "TCP://p1.example:4022",
            service="OrderParts",
            broker_instance=GUID,
            mirror_address="TCP://p2.example:4022",
            expires_at=datetime(2030, 1, 1, tzinfo=timezone.utc),
        ),
    }
    assert run_command(["routes", "diff", *argv]) == 0


def test_export_loads_back_into_another_prefix_as_the_same_tables(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    assert run_command(["routes", "load", str(REPO / "routes/demo/routes.yaml"), *source]) == 0
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        "instance: i1\nroutes:\n"
        f"  - {{scope: AW, name: Mirrored, service: OrderParts, broker_instance: {GUID}, "
        "address: 'TCP://p1.example:4022', mirror_address: 'TCP://p2.example:4022', lifetime_s: 7200}\n"
        "  - {scope: msdb, name: Old, service: X, address: 'TCP://x.example:4022', "
        "expires_at: '2026-01-01T00:00:00Z'}\n"
        "  - {scope: AW, name: Any, address: TRANSPORT}\n"
    )
    assert run_command(["routes", "load", str(extra), *source]) == 0
    expected = read_routes(kafka_bootstrap, routes_topic(prefix)).table
    capsys.readouterr()

    exports = []
    for instance in ("f1", "i1", "i2"):
        assert run_command(["routes", "export", "--instance", instance, *source]) == 0
        exports.append(tmp_path / f"{instance}.yaml")
        exports[-1].write_text(capsys.readouterr().out)
    copy = ["--bootstrap", kafka_bootstrap, "--topic-prefix", f"{prefix}y"]
    assert run_command(["routes", "load", *map(str, exports), *copy]) == 0
    capsys.readouterr()
    assert read_routes(kafka_bootstrap, routes_topic(f"{prefix}y")).table == expected

    for scope in ("AW", "msdb"):
        assert (
            run_command(
                ["routes", "export", "--instance", "i1", "--format", "csv", "--scope", scope, *source]
            )
            == 0
        )
        (tmp_path / f"{scope}.csv").write_text(capsys.readouterr().out)
        csv_copy = ["--bootstrap", kafka_bootstrap, "--topic-prefix", f"{prefix}c"]
        argv = ["--from-sys-routes", str(tmp_path / f"{scope}.csv"), "--instance", "i1", "--database", scope]
        assert run_command(["routes", "load", *argv, *csv_copy]) == 0
        capsys.readouterr()
    i1_only = {k: r for k, r in expected.items() if k.startswith("i1/")}
    assert read_routes(kafka_bootstrap, routes_topic(f"{prefix}c")).table == i1_only

    exported_at = datetime.now(timezone.utc)
    assert run_command(["routes", "export", "--instance", "i1", "--format", "sql", *source]) == 0
    script = tmp_path / "i1.sql"
    script.write_text(capsys.readouterr().out)
    assert (
        "USE [AW];\nGO\n" in script.read_text()
        and "LIFETIME = 0, ADDRESS = 'TCP://x.example:4022'" in script.read_text()
    )
    sql_copy = ["--bootstrap", kafka_bootstrap, "--topic-prefix", f"{prefix}s"]
    assert run_command(["routes", "load", str(script), *sql_copy]) == 0
    loaded_at = datetime.now(timezone.utc)
    back = read_routes(kafka_bootstrap, routes_topic(f"{prefix}s")).table
    assert set(back) == set(i1_only)
    for key, route in i1_only.items():
        again = back[key]
        assert again.__class__(**{**again.__dict__, "expires_at": None}) == route.__class__(
            **{**route.__dict__, "expires_at": None}
        ), key
        if route.expires_at is None:
            assert again.expires_at is None, key
        elif route.expires_at <= exported_at:  # LIFETIME = 0: expired at its load
            assert again.expires_at is not None and exported_at <= again.expires_at <= loaded_at, key
        else:  # the remaining lifetime, rounded up to the second, counted from the load
            assert again.expires_at is not None, key
            assert (
                route.expires_at
                <= again.expires_at
                <= route.expires_at + (loaded_at - exported_at) + timedelta(seconds=1)
            ), key
