"""`router whatif`'s pure parts: the window, the planned tables, the kept choices removed, the report."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from streaming.commands.whatif import format_report, keep_choice_s
from streaming.config import CONFIG_ENV, Settings
from streaming.errors import ConfigError
from streaming.rules.model import Route
from streaming.tables.operations import RouteOperation, route_key
from streaming.tables.plan import planned_tables
from streaming.whatif import (
    Fate,
    Group,
    WhatIf,
    check_window,
    choice_scope,
    identity_of,
    instance_routes,
    last_records,
    records_in,
    removed_identities,
    route_operations,
    since_ranges,
)
from tests.commands import parse

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


# --- the window -------------------------------------------------------------------------------------


def test_since_and_max_are_one_or_the_other() -> None:
    check_window("1h", None)
    check_window(None, 10)
    check_window(None, None)
    with pytest.raises(ConfigError, match="expected --since or --max, got both"):
        check_window("1h", 10)
    with pytest.raises(ConfigError, match="--max: expected a number of records of at least 1, got 0"):
        check_window(None, 0)


def test_a_since_window_starts_at_the_brokers_offset_for_the_time() -> None:
    marks = {("out", 0): (5, 100), ("out", 1): (0, 40), ("in", 0): (0, 7)}
    # Partition 1 has no record that late (-1); the broker's offset may precede the first kept one.
    firsts = {("out", 0): 60, ("out", 1): -1, ("in", 0): 0}
    ranges = since_ranges(marks, firsts)
    assert ranges == {("out", 0): (60, 100), ("out", 1): (40, 40), ("in", 0): (0, 7)}
    assert records_in(ranges) == 47
    assert since_ranges({("out", 0): (10, 20)}, {("out", 0): 3}) == {("out", 0): (10, 20)}


def test_the_last_records_are_shared_among_the_partitions() -> None:
    marks = {("out", 0): (0, 100), ("out", 1): (0, 100), ("in", 0): (0, 0)}
    assert last_records(marks, 10) == {("out", 0): (95, 100), ("out", 1): (95, 100), ("in", 0): (0, 0)}
    # An odd count: one partition gives one more.
    assert records_in(last_records(marks, 11)) == 11


def test_a_partition_short_of_its_share_gives_all_it_has() -> None:
    marks = {("out", 0): (0, 1000), ("out", 1): (90, 93), ("in", 0): (10, 12)}
    ranges = last_records(marks, 100)
    assert ranges == {("out", 0): (905, 1000), ("out", 1): (90, 93), ("in", 0): (10, 12)}
    assert records_in(ranges) == 100


def test_asking_for_more_than_there_is_gives_everything() -> None:
    marks = {("out", 0): (3, 10), ("out", 1): (0, 2)}
    assert last_records(marks, 1_000_000) == {("out", 0): (3, 10), ("out", 1): (0, 2)}
    assert records_in(last_records({}, 5)) == 0


# --- the planned tables -----------------------------------------------------------------------------

LIVE = {
    route_key("i1", "AW", "Local"): Route("AW", "Local", "LOCAL"),
    route_key("i1", "AW", "Stock"): Route("AW", "Stock", "TCP://f1.example:4022", service="Stock"),
    route_key("i1", "AW", "Orders"): Route("AW", "Orders", "TCP://f1.example:4022", service="OrderParts"),
    route_key("i2", "Parts", "Local"): Route("Parts", "Local", "LOCAL"),
}
DATABASES = {"i1": frozenset({"AW", "msdb"}), "i2": frozenset({"Parts", "msdb"})}


def operations(tmp_path: Path, name: str, text: str) -> list[RouteOperation]:
    path = tmp_path / name
    path.write_text(text)
    return route_operations([path], now=NOW, instance="i1")


def test_the_files_are_applied_to_the_live_tables_and_published_nowhere(tmp_path: Path) -> None:
    ops = operations(
        tmp_path,
        "change.sql",
        "USE AW;\nALTER ROUTE Stock WITH ADDRESS = 'TCP://i2.example:4022';\nDROP ROUTE Orders;\n",
    )
    assert [o.instance for o in ops] == ["i1", "i1"]  # the script names none: --instance's tables
    planned = planned_tables(LIVE, ops, DATABASES)
    assert sorted(planned) == [
        route_key("i1", "AW", "Local"),
        route_key("i1", "AW", "Stock"),
        route_key("i2", "Parts", "Local"),
    ]
    assert planned[route_key("i1", "AW", "Stock")].address == "TCP://i2.example:4022"
    assert [r.name for r in instance_routes(planned, "i1")] == ["Local", "Stock"]
    assert LIVE[route_key("i1", "AW", "Stock")].address == "TCP://f1.example:4022"  # not changed


def test_a_file_may_hold_another_instances_tables(tmp_path: Path) -> None:
    ops = operations(tmp_path, "both.yaml", "- {instance: i2, scope: Parts, name: Extra, address: LOCAL}\n")
    assert [o.instance for o in ops] == ["i2"]
    planned = planned_tables(LIVE, ops, DATABASES)
    assert instance_routes(planned, "i1") == instance_routes(LIVE, "i1")
    assert len(instance_routes(planned, "i2")) == 2


def test_a_change_routes_load_would_refuse_is_refused(tmp_path: Path) -> None:
    drop = operations(tmp_path, "drop.sql", "USE AW;\nDROP ROUTE NoSuchRoute;\n")
    with pytest.raises(ConfigError, match="cannot drop a route that does not exist"):
        planned_tables(LIVE, drop, DATABASES)
    elsewhere = operations(tmp_path, "scope.yaml", "- {scope: Sales, name: X, address: LOCAL}\n")
    with pytest.raises(ConfigError, match="expected a database of the route's instance"):
        planned_tables(LIVE, elsewhere, DATABASES)
    with pytest.raises(ConfigError, match=re.escape("bad.txt: expected a .yaml, .yml or .sql route file")):
        operations(tmp_path, "bad.txt", "")
    with pytest.raises(ConfigError, match="address"):
        operations(tmp_path, "broken.yaml", "- {scope: AW, name: B, address: 'not an address'}\n")


# --- the kept choices a change removes --------------------------------------------------------------


def test_a_kept_choice_is_removed_when_no_route_of_its_table_has_its_identity_any_more() -> None:
    live = instance_routes(LIVE, "i1")
    moved = Route("AW", "Stock", "TCP://i2.example:4022", service="Stock")
    renamed = Route("AW", "Orders2", "tcp://F1.example:4022/", service="OrderParts")  # same identity
    local = next(r for r in live if r.name == "Local")
    planned = [local, moved, renamed]
    assert removed_identities(live, planned, NOW) == {("AW", "", "Stock", "tcp://f1.example:4022")}


def test_an_expired_route_is_not_a_live_one() -> None:
    expired = Route("AW", "Old", "TCP://old:1", service="S", expires_at=NOW - timedelta(seconds=1))
    assert removed_identities([expired], [], NOW) == set()


def test_a_remote_choice_is_in_msdb() -> None:
    assert choice_scope("remote") == "msdb"
    assert choice_scope("AW") == "AW"
    assert identity_of("AW", None, None, " TCP://A:1/ ") == ("AW", "", "", "tcp://a:1")


# --- the report -------------------------------------------------------------------------------------

TO_F1 = Fate("p.f1.inbound", "send")
TO_I2 = Fate("p.i2.inbound", "send")
DELAYED = Fate("p.i1.delayed", "delayed", "service_not_found")
LOCAL = Fate("p.i1.queue.AW.Audit", "deliver")


def example() -> WhatIf:
    return WhatIf(
        "i1",
        (
            Group("Audit", LOCAL, LOCAL, 25, ("a1",)),
            Group("Orders", TO_F1, DELAYED, 20, ("o3", "o1", "o2")),
            Group("Stock", TO_F1, TO_I2, 30, ("s2", "s1")),
            Group("Stock2", TO_F1, TO_I2, 5, ("t1",)),
            Group("Late", DELAYED, DELAYED, 4, ("l1",)),
        ),
        undecodable=2,
        delayed_conversations={"Orders": 7},
    )


def test_the_change_table_counts_changed_messages_by_both_fates() -> None:
    report = example()
    assert (report.decided, report.changed) == (84, 55)
    changes = report.changes()
    assert [(c.live, c.planned, c.messages) for c in changes] == [(TO_F1, TO_I2, 35), (TO_F1, DELAYED, 20)]
    assert changes[0].examples == ("s1", "s2", "t1")
    assert changes[1].examples == ("o1", "o2", "o3")


def test_newly_delayed_services_leave_out_those_already_delayed() -> None:
    report = example()
    assert report.newly_delayed() == {"Orders": 20}
    assert report.by_service()["Stock"] == (30, 30)
    assert report.by_service()["Audit"] == (25, 0)
    document = report.to_json()
    assert document["newly_delayed"] == [{"service": "Orders", "messages": 20, "conversations": 7}]
    changes = document["changes"]
    assert isinstance(changes, list)
    assert changes[1]["to"] == {
        "topic": "p.i1.delayed",
        "outcome": "delayed",
        "reason": "service_not_found",
    }


def test_the_report_for_people() -> None:
    lines = format_report(example()).splitlines()
    assert lines[0] == "i1: 55 of 84 message(s) would change (2 record(s) that do not decode left out)"
    assert lines[3].split() == ["p.f1.inbound", "send", "p.i2.inbound", "send", "35", "s1,", "s2,", "t1"]
    assert lines[4].split()[:6] == [
        "p.f1.inbound",
        "send",
        "p.i1.delayed",
        "delayed",
        "(service_not_found)",
        "20",
    ]
    assert "kept choices (K2) naming a route the change removes: none" in lines
    assert lines[-3] == "services that would start to be delayed:"
    assert lines[-2].split() == ["SERVICE", "MESSAGES", "CONVERSATIONS"]
    assert lines[-1].split() == ["Orders", "20", "7"]


# --- how long a choice is kept ----------------------------------------------------------------------


def test_the_choices_counted_are_kept_as_long_as_the_flag_else_the_settings_file_else_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    args = ["whatif", "change.yaml", "--instance", "i1"]
    assert keep_choice_s(parse(args)) == Settings.keep_choice_s == 3600
    settings = tmp_path / "router.yaml"
    settings.write_text("instance: i1\nkeep_choice_s: 120\n", encoding="utf-8")
    assert keep_choice_s(parse([*args, "--config", str(settings)])) == 120
    monkeypatch.setenv(CONFIG_ENV, str(settings))
    assert keep_choice_s(parse(args)) == 120
    assert keep_choice_s(parse([*args, "--keep-choice-s", "5"])) == 5
    settings.write_text("instance: i1\nkeep_choice_s: -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="keep_choice_s must be 0"):
        keep_choice_s(parse(args))
