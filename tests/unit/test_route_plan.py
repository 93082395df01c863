"""What a route load would change, without Kafka: `planned_tables` and `diff_tables` (R1, R6, R7)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from streaming.errors import ConfigError
from streaming.rules.model import Route
from streaming.tables.operations import RouteOperation, route_key
from streaming.tables.plan import FieldChange, diff_load, diff_tables, planned_tables
from streaming.tables.tsql import parse_route_script
from streaming.tables.yaml_files import parse_route_yaml

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"

LIVE = {
    route_key("i1", "AW", "AutoCreatedLocal"): Route("AW", "AutoCreatedLocal", "LOCAL"),
    route_key("i1", "AW", "OrderPartsRoute"): Route(
        "AW", "OrderPartsRoute", "TCP://f1.example:4022", service="OrderParts"
    ),
    route_key("i2", "msdb", "AutoCreatedLocal"): Route("msdb", "AutoCreatedLocal", "LOCAL"),
}


def yaml_ops(text: str) -> list[RouteOperation]:
    return parse_route_yaml(text, "routes.yaml", now=NOW)


def test_loading_the_live_tables_again_changes_nothing() -> None:
    ops = yaml_ops(
        "- {instance: i1, scope: AW, name: AutoCreatedLocal, address: LOCAL}\n"
        "- {instance: i1, scope: AW, name: OrderPartsRoute, service: OrderParts, "
        "address: 'TCP://f1.example:4022'}\n"
    )
    assert planned_tables(LIVE, ops) == LIVE
    assert diff_load(LIVE, ops) == []


def test_create_alter_and_drop_each_name_what_changes() -> None:
    ops = parse_route_script(
        "-- instance: i1\nUSE AW;\n"
        "CREATE ROUTE New WITH SERVICE_NAME = 'Audit', LIFETIME = 60, ADDRESS = 'TCP://a.example:4022';\n"
        "ALTER ROUTE OrderPartsRoute WITH ADDRESS = 'TCP://f2.example:4022';\n"
        "DROP ROUTE AutoCreatedLocal;\n",
        "change.sql",
        now=NOW,
    )
    diffs = diff_load(LIVE, ops)
    assert [(d.action, d.key) for d in diffs] == [
        ("drop", "i1/AW/AutoCreatedLocal"),
        ("create", "i1/AW/New"),
        ("alter", "i1/AW/OrderPartsRoute"),
    ]
    drop, create, alter = diffs
    assert drop.fields == () and str(drop.source) == "change.sql:5"
    assert create.fields == (
        FieldChange("service", None, "Audit"),
        FieldChange("address", None, "TCP://a.example:4022"),
        FieldChange("expires_at", None, NOW + timedelta(seconds=60)),
    )
    assert alter.fields == (FieldChange("address", "TCP://f1.example:4022", "TCP://f2.example:4022"),)
    assert alter.describe() == (
        "alter  i1/AW/OrderPartsRoute  "
        "address: TCP://f1.example:4022 -> TCP://f2.example:4022  (change.sql:4)"
    )
    assert create.to_json()["fields"] == {
        "service": {"old": None, "new": "Audit"},
        "address": {"old": None, "new": "TCP://a.example:4022"},
        "expires_at": {"old": None, "new": "2026-01-01T00:01:00Z"},
    }


def test_a_create_over_an_existing_route_is_an_alter_of_the_fields_that_differ() -> None:
    ops = yaml_ops(
        f"- {{instance: i1, scope: AW, name: OrderPartsRoute, service: OrderParts, broker_instance: {GUID}, "
        "address: 'TCP://f1.example:4022', mirror_address: 'TCP://m.example:4022', lifetime_s: 30}\n"
    )
    (diff,) = diff_load(LIVE, ops)
    assert diff.action == "alter"
    assert [(c.field, c.old, c.new) for c in diff.fields] == [
        ("broker_instance", None, GUID),
        ("mirror_address", None, "TCP://m.example:4022"),
        ("expires_at", None, NOW + timedelta(seconds=30)),
    ]
    assert "expires_at: NULL -> 2026-01-01T00:00:30Z" in diff.describe()


def test_an_expiry_finer_than_the_topic_keeps_is_no_change() -> None:
    stored = NOW + timedelta(seconds=5, milliseconds=250)
    before = {"i1/AW/r": Route("AW", "r", "LOCAL", expires_at=stored)}
    after = {"i1/AW/r": Route("AW", "r", "LOCAL", expires_at=stored + timedelta(microseconds=400))}
    assert diff_tables(before, after) == []


def test_planned_tables_refuses_what_a_load_refuses() -> None:
    with pytest.raises(
        ConfigError, match=r"gone\.yaml:1: route AW/Nope: cannot drop a route that does not exist"
    ):
        planned_tables(
            LIVE,
            parse_route_yaml("- {instance: i1, op: drop, scope: AW, name: Nope}\n", "gone.yaml", now=NOW),
        )
    assert planned_tables(LIVE, []) == LIVE


def test_other_instances_tables_are_left_as_they_are() -> None:
    ops = yaml_ops("- {instance: i2, op: drop, scope: msdb, name: AutoCreatedLocal}\n")
    after = planned_tables(LIVE, ops)
    assert set(after) == set(LIVE) - {"i2/msdb/AutoCreatedLocal"}
    assert [(d.action, d.instance, d.scope, d.name) for d in diff_load(LIVE, ops)] == [
        ("drop", "i2", "msdb", "AutoCreatedLocal")
    ]
