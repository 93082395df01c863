"""L2-L4: locating the destination database of a LOCAL route."""

from __future__ import annotations

from rules_factories import AW, DB2, DB3, ELSEWHERE, MSDB, database, instance

from streaming.rules.locate import enabled_databases, hosts_service, locate_database

INSTANCE = instance(
    database("AW", AW, "Shared"),
    database("msdb", MSDB),
    database("DB3", DB3, "Shared", "OnlyDisabled", enabled=False),
    database("DB2", DB2, "Shared", "OnlyDb2"),
)


def located(service: str, broker: str | None, origin: str | None) -> str | None:
    found = locate_database(INSTANCE, service, broker, origin)
    return None if found is None else found.name


def test_l2_broker_instance_names_the_database() -> None:
    assert located("Shared", DB2, "AW") == "DB2"
    assert located("Shared", AW.upper(), None) == "AW"


def test_l2_named_database_without_the_service_is_not_found() -> None:
    assert located("OnlyDb2", AW, "AW") is None
    assert located("Shared", ELSEWHERE, "AW") is None


def test_l3_origin_database_first() -> None:
    assert located("Shared", None, "DB2") == "DB2"
    assert located("Shared", None, "AW") == "AW"


def test_l3_then_catalog_order() -> None:
    assert located("OnlyDb2", None, "AW") == "DB2"


def test_l3_incoming_takes_the_first_hosting_database_in_catalog_order() -> None:
    assert located("Shared", None, None) == "AW"


def test_l4_disabled_databases_are_invisible() -> None:
    assert [db.name for db in enabled_databases(INSTANCE)] == ["AW", "msdb", "DB2"]
    assert located("OnlyDisabled", None, None) is None
    assert located("Shared", DB3, None) is None
    assert located("Shared", None, "DB3") == "AW"
    assert not hosts_service(INSTANCE, "OnlyDisabled")
    assert hosts_service(INSTANCE, "OnlyDb2")


def test_service_names_are_byte_exact_when_locating() -> None:
    assert located("shared", None, "AW") is None
