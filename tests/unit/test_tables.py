"""Route tables and catalogs as data: YAML and T-SQL loading, validation, and change planning."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.errors import ConfigError
from streaming.rules.model import Route
from streaming.tables.loading import load_catalog_files, load_route_files
from streaming.tables.operations import (
    RouteOperation,
    apply_changes,
    plan_route_changes,
    route_key,
    split_route_key,
)
from streaming.tables.tsql import parse_route_script, tokenize
from streaming.tables.validate import Source, is_tcp_address
from streaming.tables.yaml_files import parse_catalog_yaml, parse_route_yaml

UTC = timezone.utc
NOW = datetime(2026, 1, 1, tzinfo=UTC)
GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
GUID2 = "81b1d3d0-288e-4d2c-b1d3-456cbb944b4f"
REPO = Path(__file__).resolve().parents[2]


def routes_yaml(text: str, default_scope: str | None = None) -> list[Route]:
    ops = parse_route_yaml(text, "t.yaml", now=NOW, default_scope=default_scope)
    return [op.route for op in ops if op.route is not None]


def sql(text: str, default_scope: str | None = None) -> list[RouteOperation]:
    return parse_route_script(text, "t.sql", now=NOW, default_scope=default_scope, default_instance="i1")


def error_of(call: Callable[..., object], *args: object, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    return str(info.value)


# --- YAML route tables: good ----------------------------------------------------------------------


def test_yaml_routes_with_every_field() -> None:
    routes = routes_yaml(
        """
- {scope: AW, name: AutoCreatedLocal, address: LOCAL}
- scope: AW
  name: OrderPartsRoute
  service: OrderParts
  broker_instance: 5FB8D92B-ED69-4C80-AFBB-2AA6A7D3CB2D
  address: tcp://host2.Adventure-Works.com:4022/
  mirror_address: TCP://partner2:4022
  lifetime_s: 60
- {scope: msdb, name: T, address: transport, expires_at: "2026-03-01T10:00:00Z"}
"""
    )
    assert routes[0] == Route(scope="AW", name="AutoCreatedLocal", address="LOCAL")
    assert routes[1] == Route(
        scope="AW",
        name="OrderPartsRoute",
        service="OrderParts",
        broker_instance=GUID,
        address="tcp://host2.Adventure-Works.com:4022/",
        mirror_address="TCP://partner2:4022",
        expires_at=NOW + timedelta(seconds=60),
    )
    assert routes[2].address == "TRANSPORT"
    assert routes[2].expires_at == datetime(2026, 3, 1, 10, tzinfo=UTC)


def test_yaml_service_names_are_kept_byte_exact() -> None:
    (route,) = routes_yaml("- {scope: AW, name: r, service: 'OrderParts ', address: LOCAL}")
    assert route.service == "OrderParts "


def test_yaml_null_service_and_broker_mean_any() -> None:
    (route,) = routes_yaml("- {scope: AW, name: r, service: null, broker_instance: null, address: LOCAL}")
    assert route.service is None and route.broker_instance is None


def test_yaml_mapping_with_routes_key_and_empty_files() -> None:
    assert len(routes_yaml("routes:\n  - {scope: AW, name: r, address: LOCAL}\n")) == 1
    assert routes_yaml("") == []
    assert routes_yaml("routes:\n") == []


def test_yaml_default_scope() -> None:
    (route,) = routes_yaml("- {name: r, address: LOCAL}", default_scope="AW")
    assert route.scope == "AW"


def test_yaml_expires_at_forms() -> None:
    routes = routes_yaml(
        """
- {scope: AW, name: a, address: LOCAL, expires_at: 2026-02-01T00:00:00Z}
- {scope: AW, name: b, address: LOCAL, expires_at: "2026-02-01T01:00:00+01:00"}
- {scope: AW, name: c, address: LOCAL, expires_at: "2026-02-01T00:00:00"}
"""
    )
    assert {r.expires_at for r in routes} == {datetime(2026, 2, 1, tzinfo=UTC)}


def test_yaml_alter_and_drop_operations() -> None:
    ops = parse_route_yaml(
        """
- {op: alter, scope: AW, name: r, address: "TCP://h:1", lifetime_s: 10}
- {op: drop, scope: AW, name: r}
""",
        "t.yaml",
        now=NOW,
    )
    assert ops[0].op == "alter"
    assert dict(ops[0].changes) == {"address": "TCP://h:1", "expires_at": NOW + timedelta(seconds=10)}
    assert ops[1].op == "drop" and ops[1].route is None
    assert ops[1].source == Source("t.yaml", 3)


# --- YAML route tables: bad -----------------------------------------------------------------------

BAD_ROUTE_YAML = [
    # (document, line, route, field, message pattern)
    ("- {scope: AW, name: r, address: LOCAL, colour: red}", 1, "AW/r", "colour", "unknown field"),
    ("- {scope: AW, name: r}", 1, "AW/r", "address", "required"),
    ("- {name: r, address: LOCAL}", 1, "?/r", "scope", "required"),
    ("- {scope: AW, address: LOCAL}", 1, "AW/?", "name", "required"),
    ("- {scope: AW, name: '', address: LOCAL}", 1, "AW/?", "name", "non-empty"),
    ("- {scope: AW, name: r, address: 'tcp://h'}", 1, "AW/r", "address", "TCP://host:port"),
    ("- {scope: AW, name: r, address: 'tcp://h:0'}", 1, "AW/r", "address", "1..65535"),
    ("- {scope: AW, name: r, address: 'tcp://h:65536'}", 1, "AW/r", "address", "1..65535"),
    ("- {scope: AW, name: r, address: 'http://h:80'}", 1, "AW/r", "address", "LOCAL, TRANSPORT"),
    ("- {scope: AW, name: r, address: ' LOCAL'}", 1, "AW/r", "address", "LOCAL, TRANSPORT"),
    ("- {scope: AW, name: r, address: 'tcp://h:80/path'}", 1, "AW/r", "address", "TCP://host:port"),
    ("- {scope: AW, name: r, address: 4022}", 1, "AW/r", "address", "got 4022"),
    (
        "- scope: AW\n  name: r\n  address: LOCAL\n  mirror_address: TCP://m:1\n",
        4,
        "AW/r",
        "mirror_address",
        "R5",
    ),
    (
        "- {scope: AW, name: r, address: TRANSPORT, mirror_address: 'TCP://m:1'}",
        1,
        "AW/r",
        "mirror_address",
        "R5",
    ),
    (
        "- {scope: AW, name: r, address: 'TCP://a:1', mirror_address: LOCAL}",
        1,
        "AW/r",
        "mirror_address",
        "TCP://",
    ),
    ("- {scope: AW, name: r, address: LOCAL, broker_instance: nope}", 1, "AW/r", "broker_instance", "GUID"),
    ("- {scope: AW, name: r, address: LOCAL, broker_instance: 12}", 1, "AW/r", "broker_instance", "GUID"),
    (
        "- scope: AW\n  name: bcn\n  service: SQL/ServiceBroker/BrokerConfiguration\n"
        f"  broker_instance: {GUID}\n  address: LOCAL\n",
        4,
        "AW/bcn",
        "broker_instance",
        "R9",
    ),
    ("- {scope: AW, name: r, service: S, address: TRANSPORT}", 1, "AW/r", "service", "T3"),
    (
        f"- {{scope: AW, name: r, broker_instance: '{GUID}', address: TRANSPORT}}",
        1,
        "AW/r",
        "broker_instance",
        "T3",
    ),
    ("- {scope: AW, name: r, service: '', address: LOCAL}", 1, "AW/r", "service", "non-empty"),
    ("- {scope: A/W, name: r, address: LOCAL}", 1, "A/W/r", "scope", "without '/'"),
    ("- {scope: AW, name: r, address: LOCAL, lifetime_s: -1}", 1, "AW/r", "lifetime_s", "0 or more"),
    ("- {scope: AW, name: r, address: LOCAL, lifetime_s: soon}", 1, "AW/r", "lifetime_s", "seconds"),
    (
        "- {scope: AW, name: r, address: LOCAL, lifetime_s: 1, expires_at: 2026-01-01T00:00:00Z}",
        1,
        "AW/r",
        "expires_at",
        "not both",
    ),
    ("- {scope: AW, name: r, address: LOCAL, expires_at: tomorrow}", 1, "AW/r", "expires_at", "UTC instant"),
    ("- {op: upsert, scope: AW, name: r, address: LOCAL}", 1, "AW/r", "op", "create, alter or drop"),
    (
        "- {op: drop, scope: AW, name: r, address: LOCAL}",
        1,
        "AW/r",
        "address",
        "only instance, scope and name",
    ),
    ("- {op: alter, scope: AW, name: r, service: null}", 1, "AW/r", "service", "R7"),
    ("- {scope: AW, name: r, address: null}", 1, "AW/r", "address", "null"),
    (f"- {{scope: AW, name: '{'n' * 129}', address: LOCAL}}", 1, f"AW/{'n' * 129}", "name", "at most 128"),
]


@pytest.mark.parametrize(("document", "line", "route", "field", "pattern"), BAD_ROUTE_YAML)
def test_bad_yaml_routes_name_file_line_route_and_field(
    document: str, line: int, route: str, field: str, pattern: str
) -> None:
    message = error_of(parse_route_yaml, document, "bad.yaml", now=NOW)
    assert message.startswith(f"bad.yaml:{line}: route {route}: field {field!r}: "), message
    assert re.search(pattern, message), message


def test_yaml_alter_without_fields_is_refused() -> None:
    message = error_of(parse_route_yaml, "\n- {op: alter, scope: AW, name: r}", "bad.yaml", now=NOW)
    assert message.startswith("bad.yaml:2: route AW/r: an alter names at least one of")


@pytest.mark.parametrize(
    ("document", "pattern"),
    [
        ("routes: [", r"^bad\.yaml:\d+: not valid YAML"),
        (
            "- {scope: AW, name: r, address: LOCAL, address: LOCAL}",
            r"^bad\.yaml:1: not valid YAML: field 'address' given twice",
        ),
        ("scope: AW", r"^bad\.yaml: expected a list of routes"),
        ("- 42\n- [1]", r"^bad\.yaml:1: route #1: expected a mapping, got 42"),
        (
            "- {scope: AW, name: r, address: LOCAL}\n- [1]",
            r"^bad\.yaml:2: route #2: expected a mapping, got a list",
        ),
    ],
)
def test_bad_yaml_documents(document: str, pattern: str) -> None:
    message = error_of(parse_route_yaml, document, "bad.yaml", now=NOW)
    assert re.search(pattern, message), message


def test_yaml_error_points_at_the_field_line() -> None:
    document = """
- scope: AW
  name: good
  address: LOCAL
- scope: AW
  name: OrderPartsRoute
  service: OrderParts
  address: tcp://host2
"""
    message = error_of(parse_route_yaml, document, "routes.yaml", now=NOW)
    assert message.startswith("routes.yaml:8: route AW/OrderPartsRoute: field 'address': expected LOCAL")


def test_yaml_mirror_route_without_service_is_allowed_as_data() -> None:
    # Example 3 holds a mirror route with no broker instance (R5 [AMB]): data may say so.
    (route,) = routes_yaml(
        "- {scope: AW, name: m, service: OrderParts, address: 'tcp://p1:4022/', mirror_address: 'tcp://p2:4022/'}"
    )
    assert route.mirror_address == "tcp://p2:4022/"


# --- T-SQL ----------------------------------------------------------------------------------------


def test_tsql_create_with_every_clause_and_syntax_form() -> None:
    ops = sql(
        """
-- a comment with 'quotes' and CREATE ROUTE in it
/* a block /* nested */ comment
   spanning lines */
use [AdventureWorks2008R2];
go
create route [Balanced Route]]One] authorization [dbo]
    with service_name = N'Balanced''Service',
         Broker_Instance = '5FB8D92B-ED69-4C80-AFBB-2AA6A7D3CB2D',
         LIFETIME = 259200,
         ADDRESS = 'tcp://server1.Adventure-Works.com:4022/',
         MIRROR_ADDRESS = N'TCP://server1b:4022' ;
GO 2
"""
    )
    (op,) = ops
    assert op.op == "create" and op.ddl
    assert op.source == Source("t.sql", 7)
    assert op.route == Route(
        scope="AdventureWorks2008R2",
        name="Balanced Route]One",
        service="Balanced'Service",
        broker_instance=GUID,
        address="tcp://server1.Adventure-Works.com:4022/",
        mirror_address="TCP://server1b:4022",
        expires_at=NOW + timedelta(hours=72),
    )


def test_tsql_use_sets_scope_and_carries_over_go() -> None:
    ops = sql(
        """
CREATE ROUTE A WITH ADDRESS = 'LOCAL'
USE msdb
GO
CREATE ROUTE B WITH ADDRESS = 'LOCAL'
GO
CREATE ROUTE C WITH ADDRESS = 'LOCAL'
USE "AW"
CREATE ROUTE D WITH ADDRESS = 'local'
""",
        default_scope="Default",
    )
    assert [(op.scope, op.name) for op in ops] == [
        ("Default", "A"),
        ("msdb", "B"),
        ("msdb", "C"),
        ("AW", "D"),
    ]
    assert ops[-1].route is not None and ops[-1].route.address == "LOCAL"


def test_tsql_alter_changes_only_named_clauses() -> None:
    (op,) = sql("USE AW\nALTER ROUTE r WITH LIFETIME = 10, ADDRESS = 'TCP://h:1'")
    assert op.op == "alter"
    assert dict(op.changes) == {"expires_at": NOW + timedelta(seconds=10), "address": "TCP://h:1"}


def test_tsql_drop() -> None:
    (op,) = sql("USE AW; DROP ROUTE [r];")
    assert (op.op, op.scope, op.name, op.route) == ("drop", "AW", "r", None)


def test_tsql_strings_may_span_lines_and_lines_stay_counted() -> None:
    ops = sql(
        "USE AW\nCREATE ROUTE a WITH SERVICE_NAME = 'x\ny', ADDRESS = 'LOCAL'\n"
        "CREATE ROUTE b WITH ADDRESS='LOCAL'"
    )
    assert ops[0].route is not None and ops[0].route.service == "x\ny"
    assert ops[1].source.line == 4


def test_tokenize_keeps_line_numbers() -> None:
    tokens = tokenize("a\n/* x\n y */ b -- c\n'd''e' N'f' [g]]h] \"i\"\"j\" 12 =", "t.sql")
    assert [(t.kind, t.text, t.line) for t in tokens] == [
        ("word", "a", 1),
        ("word", "b", 3),
        ("string", "d'e", 4),
        ("string", "f", 4),
        ("ident", "g]h", 4),
        ("ident", 'i"j', 4),
        ("number", "12", 4),
        ("punct", "=", 4),
        ("eof", "", 4),
    ]


BAD_SQL = [
    # (script, line, route or None, field or None, message pattern)
    ("CREATE ROUTE r WITH ADDRESS = 'LOCAL'", 1, "?/r", "scope", "USE <database>"),
    ("USE AW\nCREATE ROUTE r WITH SERVICE_NAME = 'S'", 2, "AW/r", "address", "needs an ADDRESS"),
    ("USE AW\nCREATE ROUTE r WITH\n ADDRESS = 'tcp://h'", 3, "AW/r", "ADDRESS", "TCP://host:port"),
    ("USE AW\nCREATE ROUTE r WITH ADDRESS = 'LOCAL',\n ADDRESS = 'LOCAL'", 3, "AW/r", "ADDRESS", "twice"),
    (
        "USE AW\nCREATE ROUTE r WITH ADDRESS = 'LOCAL',\n MIRROR_ADDRESS = 'TCP://m:1'",
        3,
        "AW/r",
        "MIRROR_ADDRESS",
        "R5",
    ),
    (
        f"USE AW\nCREATE ROUTE r WITH SERVICE_NAME = 'S', BROKER_INSTANCE = '{GUID}',\n"
        " ADDRESS = 'TCP://a:1', MIRROR_ADDRESS = 'LOCAL'",
        3,
        "AW/r",
        "MIRROR_ADDRESS",
        "TCP://host:port",
    ),
    (
        "USE AW\nCREATE ROUTE r WITH SERVICE_NAME = 'S',\nADDRESS = 'TCP://a:1', MIRROR_ADDRESS = 'TCP://b:1'",
        3,
        "AW/r",
        "MIRROR_ADDRESS",
        "BROKER_INSTANCE is missing",
    ),
    (
        "USE AW\nCREATE ROUTE r WITH BROKER_INSTANCE = '{xyz}', ADDRESS = 'LOCAL'",
        2,
        "AW/r",
        "BROKER_INSTANCE",
        "GUID",
    ),
    (
        "USE AW\nCREATE ROUTE r WITH SERVICE_NAME = 'SQL/ServiceBroker/BrokerConfiguration',\n"
        f"  BROKER_INSTANCE = '{GUID}', ADDRESS = 'LOCAL'",
        3,
        "AW/r",
        "BROKER_INSTANCE",
        "R9",
    ),
    (
        "USE AW\nCREATE ROUTE r WITH SERVICE_NAME = 'S', ADDRESS = 'TRANSPORT'",
        2,
        "AW/r",
        "SERVICE_NAME",
        "T3",
    ),
    ("USE AW\nCREATE ROUTE r WITH LIFETIME = 'x', ADDRESS = 'LOCAL'", 2, "AW/r", "LIFETIME", "seconds"),
    (
        "USE AW\nCREATE ROUTE r WITH LIFETIME = 99999999999, ADDRESS = 'LOCAL'",
        2,
        "AW/r",
        "LIFETIME",
        "2147483647",
    ),
    ("USE AW\nCREATE ROUTE r WITH ADDRESS = LOCAL", 2, "AW/r", "ADDRESS", "string literal"),
    ("USE [A/W]\nCREATE ROUTE r WITH ADDRESS = 'LOCAL'", 1, None, "database", "without '/'"),
]


@pytest.mark.parametrize(("script", "line", "route", "field", "pattern"), BAD_SQL)
def test_bad_tsql_names_file_line_route_and_field(
    script: str, line: int, route: str | None, field: str | None, pattern: str
) -> None:
    message = error_of(parse_route_script, script, "bad.sql", now=NOW)
    prefix = f"bad.sql:{line}: "
    if route is not None:
        prefix += f"route {route}: "
    assert message.startswith(prefix), message
    if field is not None:
        assert f"field {field!r}: " in message, message
    assert re.search(pattern, message), message


@pytest.mark.parametrize(
    ("script", "pattern"),
    [
        ("USE AW\nCREATE QUEUE q", r"^bad\.sql:2: unsupported statement starting with 'CREATE'"),
        ("USE AW\nSELECT 1", r"^bad\.sql:2: unsupported statement starting with 'SELECT'"),
        (
            "USE AW\nCREATE ROUTE r WITH ADDRESS = 'LOCAL' oops",
            r"^bad\.sql:2: unsupported statement .*'oops'",
        ),
        ("USE AW\nCREATE ROUTE r ADDRESS = 'LOCAL'", r"^bad\.sql:2: route AW/r: expected WITH"),
        (
            "USE AW\nCREATE ROUTE r WITH ADDRESS 'LOCAL'",
            r"^bad\.sql:2: route AW/r: expected '=' after ADDRESS",
        ),
        (
            "USE AW\nCREATE ROUTE r WITH COLOUR = 'red'",
            r"^bad\.sql:2: route AW/r: expected one of SERVICE_NAME",
        ),
        ("USE AW\nCREATE ROUTE dbo.r WITH ADDRESS = 'LOCAL'", r"^bad\.sql:2: CREATE ROUTE: .*in one part"),
        (
            "USE AW\nCREATE ROUTE WITH",
            r"^bad\.sql:2: route AW/WITH: expected WITH .* got the end of the script",
        ),
        ("USE AW\nCREATE ROUTE r WITH ADDRESS = 'LOCAL", r"^bad\.sql:2: unterminated string"),
        ("USE AW\n/* /* */", r"^bad\.sql:2: unterminated /\* comment"),
        ("USE [AW", r"^bad\.sql:1: unterminated \[name\]"),
        (
            "USE AW\nDROP ROUTE",
            r"^bad\.sql:2: DROP ROUTE: expected a route name after DROP ROUTE, got the end",
        ),
        (
            "USE AW\nALTER ROUTE r WITH",
            r"^bad\.sql:2: route AW/r: expected one of .* got the end of the script",
        ),
    ],
)
def test_bad_tsql_syntax(script: str, pattern: str) -> None:
    message = error_of(parse_route_script, script, "bad.sql", now=NOW)
    assert re.search(pattern, message), message


def test_tsql_and_yaml_agree_on_the_demo_table() -> None:
    from_sql = load_route_files([REPO / "routes/demo/routes.sql"], now=NOW)
    from_yaml = load_route_files([REPO / "routes/demo/routes.yaml"], now=NOW)
    sql_routes = {op.key: op.route for op in from_sql}
    yaml_routes = {op.key: op.route for op in from_yaml}
    assert sql_routes == {key: yaml_routes[key] for key in sql_routes}
    assert set(sql_routes) == {"i1/AW/AutoCreatedLocal", "i1/AW/OrderPartsRoute", "i1/msdb/AutoCreatedLocal"}
    assert {op.key for op in from_yaml} - set(sql_routes) == {
        "i2/Parts/AutoCreatedLocal",
        "i2/Parts/InitiatorRoute",
        "i2/msdb/AutoCreatedLocal",
        "f1/msdb/ToOrderParts",
        "f1/msdb/ToInitiator",
    }


@pytest.mark.parametrize(
    "path", sorted((REPO / "routes").rglob("*.sql")) + sorted((REPO / "routes").rglob("routes*.yaml"))
)
def test_shipped_route_files_load(path: Path) -> None:
    """The routing examples' scripts name no instance: they load into the one --instance names."""
    assert load_route_files([path], now=NOW, instance=None if "demo" in path.parts else "i1")


def test_examples_hold_the_spec_tables() -> None:
    ex2 = load_route_files(
        [REPO / "routes/examples/example2-network-route-to-one-service.sql"], now=NOW, instance="i1"
    )
    assert [(op.scope, op.name) for op in ex2] == [
        ("AW", "AutoCreatedLocal"),
        ("AW", "OrderPartsRoute"),
        ("msdb", "AutoCreatedLocal"),
    ]
    ex5 = {
        op.name: op.route
        for op in load_route_files(
            [REPO / "routes/examples/example5-load-balancing.sql"], now=NOW, instance="i1"
        )
    }
    assert ex5["BalancedRouteTwo"] == Route(
        scope="AW",
        name="BalancedRouteTwo",
        service="BalancedService",
        broker_instance=GUID2,
        address="tcp://server2.Adventure-Works.com:4022/",
    )


# --- loading several files ------------------------------------------------------------------------


def test_duplicate_route_across_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("- {scope: AW, name: r, address: LOCAL}\n")
    (tmp_path / "b.sql").write_text("USE AW\n\nCREATE ROUTE r WITH ADDRESS = 'LOCAL'\n")
    message = error_of(load_route_files, [tmp_path / "a.yaml", tmp_path / "b.sql"], now=NOW, instance="i1")
    assert (
        message == f"{tmp_path / 'b.sql'}:3: route AW/r: field 'name': "
        f"duplicate route: already created at {tmp_path / 'a.yaml'}:1"
    )


def test_create_drop_create_in_one_load_is_fine() -> None:
    ops = sql(
        "USE AW\nCREATE ROUTE r WITH ADDRESS='LOCAL'\nDROP ROUTE r\nCREATE ROUTE r WITH ADDRESS='TRANSPORT'"
    )
    assert len(plan_route_changes({}, ops)) == 3


def test_unknown_route_file_kind(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("")
    assert "expected a .yaml, .yml or .sql route file" in error_of(
        load_route_files, [tmp_path / "r.txt"], now=NOW
    )
    assert "cannot read" in error_of(load_route_files, [tmp_path / "missing.yaml"], now=NOW)


# --- planning changes against the current table --------------------------------------------------


def _table(*routes: Route) -> dict[str, Route]:
    return {route_key("i1", r.scope, r.name): r for r in routes}


def test_plan_alter_changes_only_named_fields() -> None:
    current = _table(
        Route(
            scope="AW",
            name="r",
            service="S",
            broker_instance=GUID,
            address="TCP://a:1",
            mirror_address="TCP://b:1",
        )
    )
    (change,) = plan_route_changes(current, sql("USE AW ALTER ROUTE r WITH ADDRESS = 'TCP://c:1'"))
    assert change.action == "alter"
    assert change.route == Route(
        scope="AW",
        name="r",
        service="S",
        broker_instance=GUID,
        address="TCP://c:1",
        mirror_address="TCP://b:1",
    )


def test_plan_alter_lifetime_makes_an_expired_route_active_again() -> None:
    expired = Route(scope="AW", name="r", address="LOCAL", expires_at=NOW - timedelta(days=1))
    (change,) = plan_route_changes(_table(expired), sql("USE AW ALTER ROUTE r WITH LIFETIME = 60"))
    assert change.route is not None and change.route.is_active(NOW)


def test_plan_create_replaces_and_drop_tombstones() -> None:
    current = _table(Route(scope="AW", name="r", address="LOCAL"))
    changes = plan_route_changes(
        current,
        sql(
            "USE AW CREATE ROUTE r WITH ADDRESS = 'TRANSPORT' "
            "CREATE ROUTE s WITH ADDRESS = 'LOCAL' DROP ROUTE r"
        ),
    )
    assert [(c.action, c.key) for c in changes] == [
        ("replace", "i1/AW/r"),
        ("create", "i1/AW/s"),
        ("drop", "i1/AW/r"),
    ]
    assert changes[-1].route is None
    assert apply_changes(current, changes) == _table(Route(scope="AW", name="s", address="LOCAL"))


@pytest.mark.parametrize(
    ("script", "pattern"),
    [
        (
            "USE AW\nALTER ROUTE missing WITH LIFETIME = 1",
            r"^t\.sql:2: route AW/missing: cannot alter a route that does not exist",
        ),
        (
            "USE AW\nDROP ROUTE missing",
            r"^t\.sql:2: route AW/missing: cannot drop a route that does not exist",
        ),
        (
            "USE AW\nALTER ROUTE r WITH MIRROR_ADDRESS = 'TCP://m:1'",
            r"^t\.sql:2: route AW/r: field 'mirror_address': .*R5",
        ),
        ("USE AW\nALTER ROUTE r WITH SERVICE_NAME = 'S'", r"^t\.sql:2: route AW/r: field 'service': .*T3"),
    ],
)
def test_plan_refuses_impossible_changes(script: str, pattern: str) -> None:
    current = _table(Route(scope="AW", name="r", address="TRANSPORT"))
    message = error_of(plan_route_changes, current, sql(script))
    assert re.search(pattern, message), message


def test_plan_ddl_alter_adding_a_mirror_needs_service_and_broker() -> None:
    current = _table(Route(scope="AW", name="r", service="S", address="TCP://a:1"))
    message = error_of(
        plan_route_changes, current, sql("USE AW\nALTER ROUTE r WITH MIRROR_ADDRESS = 'TCP://m:1'")
    )
    assert "BROKER_INSTANCE is missing" in message


def test_route_keys() -> None:
    assert route_key("i1", "AW", "a/b") == "i1/AW/a/b"
    assert split_route_key("i1/AW/a/b") == ("i1", "AW", "a/b")
    for old_or_bad in ("nokey", "AW/r", "i1//r", "/AW/r"):
        with pytest.raises(ValueError, match="instance/scope/name"):
            split_route_key(old_or_bad)


def test_each_route_is_in_the_instance_its_file_or_the_flag_names(tmp_path: Path) -> None:
    """Each instance has its own tables: a YAML entry's, a YAML file's or a script header's instance."""
    (tmp_path / "two.yaml").write_text(
        "- {instance: i1, scope: msdb, name: r, address: LOCAL}\n"
        "- {instance: i2, scope: msdb, name: r, address: TRANSPORT}\n"
    )
    (tmp_path / "file.yaml").write_text("instance: i3\nroutes:\n  - {scope: msdb, name: r, address: LOCAL}\n")
    (tmp_path / "header.sql").write_text(
        "-- i4's msdb\n-- instance: i4\nUSE msdb\nCREATE ROUTE r WITH ADDRESS = 'LOCAL'\n"
    )
    ops = load_route_files([tmp_path / "two.yaml", tmp_path / "file.yaml", tmp_path / "header.sql"], now=NOW)
    assert [op.key for op in ops] == ["i1/msdb/r", "i2/msdb/r", "i3/msdb/r", "i4/msdb/r"]
    assert [c.route.address for c in plan_route_changes({}, ops) if c.route] == [
        "LOCAL",
        "TRANSPORT",
        "LOCAL",
        "LOCAL",
    ]

    (tmp_path / "none.sql").write_text("USE msdb\nCREATE ROUTE r WITH ADDRESS = 'LOCAL'\n")
    assert [op.key for op in load_route_files([tmp_path / "none.sql"], now=NOW, instance="i9")] == [
        "i9/msdb/r"
    ]
    message = error_of(load_route_files, [tmp_path / "none.sql"], now=NOW)
    assert "names no instance" in message and "--instance" in message
    message = error_of(load_route_files, [tmp_path / "header.sql"], now=NOW, instance="i1")
    assert "the file puts it in instance 'i4', --instance says 'i1'" in message
    (tmp_path / "slash.yaml").write_text("- {instance: a/b, scope: msdb, name: r, address: LOCAL}\n")
    assert "without '/'" in error_of(load_route_files, [tmp_path / "slash.yaml"], now=NOW)


@pytest.mark.parametrize(
    ("address", "ok"),
    [
        ("TCP://h:4022", True),
        ("tcp://h:4022/", True),
        ("Tcp://10.0.0.1:1", True),
        ("TCP://[::1]:65535", True),
        ("TCP://host-2.example.com:4022", True),
        ("TCP://h:65536", False),
        ("TCP://h:0", False),
        ("TCP://h", False),
        ("TCP://:4022", False),
        ("TCP://h:4022//", False),
        ("TCP://h h:4022", False),
        ("UDP://h:4022", False),
    ],
)
def test_tcp_address_forms(address: str, ok: bool) -> None:
    assert is_tcp_address(address) is ok


# --- catalogs -------------------------------------------------------------------------------------

CATALOG = f"""
- name: i1
  address: TCP://i1:4022
  forwarding: true
  forward_size_mb: 2
  retry_s: 0.5
  databases:
    - name: AW
      broker_instance: {GUID.upper()}
      services: [InitiatorService, 'Svc ']
    - {{name: msdb, broker_instance: '{{{GUID2}}}', broker_enabled: false}}
"""


def test_catalog_yaml() -> None:
    (loaded,) = parse_catalog_yaml(CATALOG, "c.yaml")
    instance = loaded.instance
    assert (
        instance.name,
        instance.address,
        instance.forwarding,
        instance.forward_size_mb,
        instance.retry_s,
    ) == (
        "i1",
        "TCP://i1:4022",
        True,
        2,
        0.5,
    )
    aw, msdb = instance.databases
    assert aw.broker_instance == GUID and aw.services == ("InitiatorService", "Svc ") and aw.broker_enabled
    assert msdb.broker_instance == GUID2 and msdb.services == () and not msdb.broker_enabled
    assert loaded.source == Source("c.yaml", 2)
    assert loaded.database_sources == (Source("c.yaml", 8), Source("c.yaml", 11))


def test_catalog_defaults_and_single_mapping() -> None:
    (loaded,) = parse_catalog_yaml(
        f"name: i1\naddress: TCP://i1:4022\ndatabases: [{{name: AW, broker_instance: '{GUID}'}}]", "c.yaml"
    )
    instance = loaded.instance
    assert (instance.forwarding, instance.forward_size_mb, instance.retry_s) == (False, 10, 5.0)
    assert instance.databases[0].broker_enabled is True


I1_HEAD = "- name: i1\n  address: TCP://i1:1\n  databases:\n"
BAD_CATALOG = [
    # (document, line, subject, field, message pattern)
    (
        "- {name: i1, address: TCP://i1:1, databases: [], colour: red}",
        1,
        "instance i1",
        "colour",
        "unknown field",
    ),
    ("- {name: i1, databases: []}", 1, "instance i1", "address", "required"),
    ("- {address: TCP://i1:1, databases: []}", 1, "instance #1", "name", "required"),
    ("- {name: i1, address: TCP://i1:1}", 1, "instance i1", "databases", "required"),
    ("- {name: i1, address: LOCAL, databases: []}", 1, "instance i1", "address", "TCP://host:port"),
    (
        "- {name: i1, address: TCP://i1:1, forwarding: yes please, databases: []}",
        1,
        "instance i1",
        "forwarding",
        "true or false",
    ),
    (
        "- {name: i1, address: TCP://i1:1, forwarding: 1, databases: []}",
        1,
        "instance i1",
        "forwarding",
        "true or false",
    ),
    (
        "- {name: i1, address: TCP://i1:1, forward_size_mb: -1, databases: []}",
        1,
        "instance i1",
        "forward_size_mb",
        "integer",
    ),
    (
        "- {name: i1, address: TCP://i1:1, forward_size_mb: 1.5, databases: []}",
        1,
        "instance i1",
        "forward_size_mb",
        "integer",
    ),
    (
        "- {name: i1, address: TCP://i1:1, retry_s: 0, databases: []}",
        1,
        "instance i1",
        "retry_s",
        "greater than 0",
    ),
    (
        "- {name: i1, address: TCP://i1:1, databases: {AW: 1}}",
        1,
        "instance i1",
        "databases",
        "list of databases",
    ),
    (
        "- name: i1\n  address: TCP://i1:1\n  databases:\n    - {name: AW, broker_instance: nope}",
        4,
        "instance i1, database AW",
        "broker_instance",
        "GUID",
    ),
    (
        "- name: i1\n  address: TCP://i1:1\n  databases:\n    - {name: AW}",
        4,
        "instance i1, database AW",
        "broker_instance",
        "required",
    ),
    (
        f"{I1_HEAD}    - {{name: AW, broker_instance: '{GUID}', services: S}}",
        4,
        "instance i1, database AW",
        "services",
        "list of service names",
    ),
    (
        f"{I1_HEAD}    - {{name: AW, broker_instance: '{GUID}', services: [1]}}",
        4,
        "instance i1, database AW",
        "services",
        "service name",
    ),
    (
        f"{I1_HEAD}    - {{name: AW, broker_instance: '{GUID}', size: 1}}",
        4,
        "instance i1, database AW",
        "size",
        "unknown field",
    ),
]


@pytest.mark.parametrize(("document", "line", "subject", "field", "pattern"), BAD_CATALOG)
def test_bad_catalogs_name_file_line_subject_and_field(
    document: str, line: int, subject: str, field: str, pattern: str
) -> None:
    message = error_of(parse_catalog_yaml, document, "bad.yaml")
    assert message.startswith(f"bad.yaml:{line}: {subject}: field {field!r}: "), message
    assert re.search(pattern, message), message


def _write_catalog(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_catalog_duplicate_database_names(tmp_path: Path) -> None:
    path = _write_catalog(
        tmp_path,
        f"- name: i1\n  address: TCP://i1:1\n  databases:\n    - {{name: AW, broker_instance: '{GUID}'}}\n"
        f"    - {{name: AW, broker_instance: '{GUID2}'}}\n",
    )
    message = error_of(load_catalog_files, [path])
    assert (
        message == f"{path}:5: instance i1, database AW: field 'name': "
        f"duplicate database name, first defined at {path}:4"
    )


def test_catalog_duplicate_active_broker_instances(tmp_path: Path) -> None:
    path = _write_catalog(
        tmp_path,
        f"- name: i1\n  address: TCP://i1:1\n  databases:\n    - {{name: A, broker_instance: '{GUID}'}}\n"
        f"    - {{name: B, broker_instance: '{GUID.upper()}'}}\n",
    )
    message = error_of(load_catalog_files, [path])
    assert message.startswith(
        f"{path}:5: instance i1, database B: field 'broker_instance': broker instance {GUID}"
    )
    assert "already used by broker-enabled database A (L4)" in message


def test_catalog_duplicate_broker_instance_of_a_disabled_database_is_allowed(tmp_path: Path) -> None:
    # L4: attaching a database whose GUID is in use deactivates the newcomer; both may be listed.
    path = _write_catalog(
        tmp_path,
        f"- name: i1\n  address: TCP://i1:1\n  databases:\n    - {{name: A, broker_instance: '{GUID}'}}\n"
        f"    - {{name: B, broker_instance: '{GUID}', broker_enabled: false}}\n",
    )
    (instance,) = load_catalog_files([path])
    assert [d.name for d in instance.databases] == ["A", "B"]


def test_catalog_duplicate_instance_names(tmp_path: Path) -> None:
    path = _write_catalog(
        tmp_path,
        "- {name: i1, address: TCP://i1:1, databases: []}\n"
        "- {name: i1, address: TCP://i2:1, databases: []}\n",
    )
    message = error_of(load_catalog_files, [path])
    assert (
        message == f"{path}:2: instance i1: field 'name': duplicate instance name, first defined at {path}:1"
    )


def test_demo_catalogs_load() -> None:
    instances = load_catalog_files([REPO / "routes/demo/catalogs.yaml"])
    assert [i.name for i in instances] == ["i1", "i2", "f1"]
    assert instances[1].database("Parts") is not None
    assert instances[2].forwarding and [d.name for d in instances[2].databases] == ["msdb"]


# --- T-SQL quoting round trip -----------------------------------------------------------------------

sysnames = st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s)
route_names = st.text(min_size=1, max_size=30)
services = st.text(min_size=1, max_size=40)


def _bracket(name: str) -> str:
    return "[" + name.replace("]", "]]") + "]"


def _string(value: str) -> str:
    return "N'" + value.replace("'", "''") + "'"


@given(
    scope=sysnames,
    name=route_names,
    service=st.none() | services,
    broker=st.none() | st.uuids().map(str),
    address=st.sampled_from(["LOCAL", "TCP://h:4022", "tcp://host-2.example.com:1/"]),
    lifetime=st.none() | st.integers(min_value=0, max_value=2**31 - 1),
)
def test_tsql_quoting_round_trips(
    scope: str, name: str, service: str | None, broker: str | None, address: str, lifetime: int | None
) -> None:
    clauses = []
    if service is not None:
        clauses.append(f"SERVICE_NAME = {_string(service)}")
    if broker is not None:
        clauses.append(f"BROKER_INSTANCE = '{broker.upper()}'")
    if lifetime is not None:
        clauses.append(f"LIFETIME = {lifetime}")
    clauses.append(f"ADDRESS = '{address}'")
    script = f"USE {_bracket(scope)}\nGO\nCREATE ROUTE {_bracket(name)} WITH {', '.join(clauses)};\n"
    (op,) = sql(script)
    assert op.route == Route(
        scope=scope,
        name=name,
        service=service,
        broker_instance=broker,
        address=address,
        expires_at=None if lifetime is None else NOW + timedelta(seconds=lifetime),
    )
