"""What a record on a table topic must hold (`streaming.tables.records`): no broker needed."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from streaming.errors import ConfigError, MalformedRecord
from streaming.kafka.avro import catalog_to_record, encode_catalog, encode_route, route_to_record
from streaming.rules.model import Database, Instance, MirrorRole, Route
from streaming.tables.records import CatalogRecords, MirrorRecords, OtherTable, RouteRecords
from streaming.tables.validate import RECORD, validate_stored_route
from streaming.tables.yaml_files import parse_route_yaml

GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
GARBAGE = random.Random(7).randbytes(64)  # the integration tests write these bytes as a route


def route_value(route: Route) -> bytes:
    return encode_route(route_to_record(route))


def catalog_value(instance: Instance) -> bytes:
    return encode_catalog(catalog_to_record(instance))


def refusal(call: Callable[..., object], *args: object) -> str:
    with pytest.raises((ConfigError, MalformedRecord)) as info:
        call(*args)
    return str(info.value)


# --- routes --------------------------------------------------------------------------------------


def test_a_good_route_reads_back_as_the_loaders_would_write_it() -> None:
    stored = Route("AW", "r", "local", service="S", broker_instance=GUID.upper())
    assert RouteRecords().row_value("i1/AW/r", route_value(stored)) == Route(
        "AW", "r", "LOCAL", service="S", broker_instance=GUID
    )


def test_bytes_that_are_no_route_are_malformed() -> None:
    assert "route record: expected Avro router.v1.Route" in refusal(
        RouteRecords().row_value, "i1/AW/x", GARBAGE
    )


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        (
            Route("AW", "r", "not an address"),
            "route AW/r: field 'address': expected LOCAL, TRANSPORT or TCP://",
        ),
        (
            Route("AW", "r", "TCP://h:4022", broker_instance="nope"),
            "field 'broker_instance': expected a GUID",
        ),
        (
            Route("AW", "r", "TCP://h:4022", mirror_address="TCP://m:0"),
            "field 'mirror_address': expected TCP://",
        ),
        (Route("AW", "r", "LOCAL", mirror_address="TCP://m:4022"), "may not have a mirror address (R5)"),
        (Route("AW", "r", "TRANSPORT", service="S"), "(T3)"),
        (Route("AW", "r", "TCP://h:4022", service=""), "field 'service': expected a non-empty service name"),
        (Route("AW", "n" * 129, "LOCAL"), "field 'name': expected at most 128 characters"),
        (Route("", "r", "LOCAL"), "field 'scope': expected a non-empty name"),
    ],
)
def test_a_route_the_loaders_refuse_is_refused(route: Route, expected: str) -> None:
    key = f"i1/{route.scope}/{route.name}"
    message = refusal(RouteRecords().row_value, key, route_value(route))
    assert expected in message
    assert message.startswith("route ")  # no file to name: the reader adds topic, partition and offset


def test_a_route_key_must_be_its_instance_scope_and_name() -> None:
    assert "field 'key': expected a routes-topic key 'instance/scope/name', got 'AWr'" in refusal(
        RouteRecords().row_key, "AWr"
    )
    message = refusal(RouteRecords().row_value, "i1/AW/other", route_value(Route("AW", "r", "LOCAL")))
    assert "expected the record's key to be 'i1/AW/r' (instance/scope/name), got 'i1/AW/other'" in message
    # A scope with '/' cannot be told apart from the name in a key.
    assert "without '/'" in refusal(
        RouteRecords().row_value, "i1/A/B/r", route_value(Route("A/B", "r", "LOCAL"))
    )


def test_a_key_from_before_instances_had_their_own_tables_is_refused_with_the_command_that_moves_it() -> None:
    message = refusal(RouteRecords().row_key, "AW/r")
    assert "written before each instance had its own routing tables" in message
    assert "router routes migrate --instance NAME" in message
    # A name with '/' makes an old key look like a new one: the value's scope/name tells them apart.
    old = route_value(Route("AW", "r/x", "LOCAL"))
    assert "router routes migrate --instance NAME" in refusal(RouteRecords().row_value, "AW/r/x", old)


def test_an_instances_reader_takes_only_its_own_routes() -> None:
    mine = RouteRecords("i1")
    assert mine.row_key("i1/msdb/r") == "i1/msdb/r"
    with pytest.raises(OtherTable):
        mine.row_key("i2/msdb/r")
    assert RouteRecords().row_key("i2/msdb/r") == "i2/msdb/r"


ADDRESSES = [
    "LOCAL",
    "local",
    "TRANSPORT",
    "TCP://h:4022",
    "tcp://H.example:4022/",
    "TCP://h:0",
    "not an address",
]
SERVICES = [None, "S", "SQL/ServiceBroker/BrokerConfiguration", "", "s" * 257]
GUIDS = [None, GUID, GUID.upper(), "{" + GUID + "}", "nope"]
MIRRORS = [None, "TCP://m:4022", "LOCAL", "bad"]
SCOPES = ["AW", "A/B", "", "d" * 129]
NAMES = ["r", "", "n" * 129, "with/slash"]


@given(
    scope=st.sampled_from(SCOPES),
    name=st.sampled_from(NAMES),
    address=st.sampled_from(ADDRESSES),
    service=st.sampled_from(SERVICES),
    broker_instance=st.sampled_from(GUIDS),
    mirror_address=st.sampled_from(MIRRORS),
)
def test_a_stored_route_passes_exactly_when_a_route_file_with_it_loads(
    scope: str,
    name: str,
    address: str,
    service: str | None,
    broker_instance: str | None,
    mirror_address: str | None,
) -> None:
    fields = {
        "scope": scope,
        "name": name,
        "address": address,
        "service": service,
        "broker_instance": broker_instance,
        "mirror_address": mirror_address,
    }
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    try:
        (operation,) = parse_route_yaml(yaml.safe_dump([fields]), "t.yaml", now=now)
        loaded: Route | None = operation.route
    except ConfigError:
        loaded = None
    try:
        stored: Route | None = validate_stored_route(Route(**fields), RECORD)  # type: ignore[arg-type]
    except ConfigError:
        stored = None
    assert stored == loaded


# --- catalogs ------------------------------------------------------------------------------------

I1 = Instance(
    "i1", "TCP://i1:4022", (Database("AW", GUID, services=("S",)),), forward_size_mb=10, retry_s=5.0
)


def test_a_good_catalog_reads_back_with_a_canonical_guid() -> None:
    stored = Instance("i1", "TCP://i1:4022", (Database("AW", GUID.upper(), services=("S",)),))
    assert CatalogRecords().row_value("i1", catalog_value(stored)) == I1


@pytest.mark.parametrize(
    ("instance", "expected"),
    [
        (Instance("i1", "not an address", ()), "instance i1: field 'address': expected TCP://host:port"),
        (Instance("i1", "TCP://i1:4022", (), retry_s=0.0), "field 'retry_s': expected a number of seconds"),
        (
            Instance("i1", "TCP://i1:4022", (), forward_size_mb=-1),
            "field 'forward_size_mb': expected an integer",
        ),
        (Instance("i1", "TCP://i1:4022", (Database("AW", "nope"),)), "database AW: field 'broker_instance'"),
        (
            Instance("i1", "TCP://i1:4022", (Database("AW", GUID), Database("AW", GUID))),
            "instance i1, database AW: field 'name': duplicate database name",
        ),
        (
            Instance("i1", "TCP://i1:4022", (Database("A", GUID), Database("B", GUID))),
            f"broker instance {GUID} is already used by broker-enabled database A (L4)",
        ),
        (Instance("i1", "TCP://i1:4022", (Database("AW", GUID, services=("",)),)), "field 'services'"),
    ],
)
def test_a_catalog_the_loader_refuses_is_refused(instance: Instance, expected: str) -> None:
    message = refusal(CatalogRecords().row_value, "i1", catalog_value(instance))
    assert expected in message
    assert not message.endswith("first defined at ")


def test_a_catalog_key_must_be_its_instance_name() -> None:
    message = refusal(CatalogRecords().row_value, "i9", catalog_value(I1))
    assert "expected the record's key to be the instance name 'i1', got 'i9'" in message
    assert "could not decode" in refusal(CatalogRecords().row_value, "i1", GARBAGE)


# --- mirror roles --------------------------------------------------------------------------------


def test_mirror_rows_are_keyed_by_normalized_address_and_roles_read_leniently() -> None:
    records = MirrorRecords()
    assert records.row_key("TCP://P1.Example:4022/") == "tcp://p1.example:4022"
    assert records.row_value("tcp://p1:4022", b" Principal\n") is MirrorRole.PRINCIPAL
    assert "field 'key': expected TCP://host:port[/]" in refusal(records.row_key, "p1:4022")
    assert "expected one of principal, mirror, unreachable, got 'bogus'" in refusal(
        records.row_value, "tcp://p1:4022", b"bogus"
    )
    assert "expected a role as UTF-8 text" in refusal(records.row_value, "tcp://p1:4022", b"\xff")
