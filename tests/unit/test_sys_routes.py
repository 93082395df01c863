"""sys.routes CSV in and route tables out (YAML, CREATE ROUTE, CSV): parse, render, round trip."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from streaming.devtools.scenario.loader import load_scenario
from streaming.errors import ConfigError
from streaming.rules.model import Route
from streaming.tables.export import render_routes
from streaming.tables.loading import load_route_files
from streaming.tables.operations import RouteOperation, check_operations
from streaming.tables.plan import planned_tables
from streaming.tables.sys_routes import decode, parse_sys_routes_csv
from streaming.tables.tsql import parse_route_script
from streaming.tables.yaml_files import parse_route_yaml

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
HEADER = "name,remote_service_name,broker_instance,lifetime,address,mirror_address\n"


def csv_routes(text: str, file: str = "routes.csv") -> list[Route]:
    ops = parse_sys_routes_csv(text, file, now=NOW, instance="i1", database="AW")
    assert {(op.op, op.instance, op.scope) for op in ops} <= {("create", "i1", "AW")}
    return [op.route for op in ops if op.route is not None]


def test_a_csv_as_ssms_saves_it_with_null_and_an_expiry() -> None:
    routes = csv_routes(
        HEADER + "AutoCreatedLocal,NULL,NULL,NULL,LOCAL,NULL\n"
        f"OrderPartsRoute,OrderParts,{GUID.upper()},2026-12-01 10:00:00.000,"
        "TCP://p1.example:4022,TCP://p2.example:4022\n"
        "Temp,Audit,,,tcp://a.example:4022/,\n"
    )
    assert routes == [
        Route("AW", "AutoCreatedLocal", "LOCAL"),
        Route(
            "AW",
            "OrderPartsRoute",
            "TCP://p1.example:4022",
            service="OrderParts",
            broker_instance=GUID,
            mirror_address="TCP://p2.example:4022",
            expires_at=datetime(2026, 12, 1, 10, tzinfo=timezone.utc),
        ),
        Route("AW", "Temp", "tcp://a.example:4022/", service="Audit"),
    ]


def test_sqlcmd_output_padded_underlined_and_counted() -> None:
    text = (
        "name            ,remote_service_name,broker_instance,lifetime                   ,address,"
        "mirror_address\n"
        "----------------,-------------------,---------------,---------------------------,-------,-------\n"
        "AutoCreatedLocal,NULL               ,NULL           ,NULL                       ,LOCAL  ,NULL\n"
        "Temp            ,Audit              ,NULL           ,2026-01-02T00:00:00.1234567,LOCAL  ,NULL\n"
        "\n(2 rows affected)\n"
    )
    routes = csv_routes(text)
    assert [r.name for r in routes] == ["AutoCreatedLocal", "Temp"]
    assert routes[1].expires_at == datetime(2026, 1, 2, 0, 0, 0, 123456, tzinfo=timezone.utc)


def test_tab_separated_utf16_with_extra_sys_routes_columns_and_seconds() -> None:
    columns = "route_id name principal_id remote_service_name broker_instance lifetime address mirror_address"
    text = columns.replace(" ", "\t") + "\r\n"
    text += "65536\tAutoCreatedLocal\t1\tNULL\tNULL\t3600\tLOCAL\tNULL\r\n"
    routes = csv_routes(decode(b"\xff\xfe" + text.encode("utf-16-le"), "routes.csv"))
    assert routes == [Route("AW", "AutoCreatedLocal", "LOCAL", expires_at=NOW + timedelta(hours=1))]
    assert csv_routes(decode(("\ufeff" + HEADER + "A,,,,LOCAL,\n").encode(), "x.csv"))[0].name == "A"


def test_a_quoted_cell_keeps_its_blanks_commas_and_quotes() -> None:
    text = HEADER + '"R, ""1""","OrderParts ",NULL,NULL,  "TCP://h.example:4022"  ,NULL\r\n'
    routes = csv_routes(text)
    assert routes == [Route("AW", 'R, "1"', "TCP://h.example:4022", service="OrderParts ")]
    assert csv_routes(render_routes("csv", "i1", routes, now=NOW)) == routes


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "name,remote_service_name,broker_instance,address,mirror_address\nA,,,LOCAL,\n",
            r"routes\.csv:1: header: expected a header row naming the columns name, remote_service_name, "
            r"broker_instance, lifetime, address, mirror_address, got .*; missing lifetime: "
            r"export with SELECT",
        ),
        (
            "AutoCreatedLocal,NULL,NULL,NULL,LOCAL,NULL\n",
            r"routes\.csv:1: header: expected a header row .*missing name, remote_service_name",
        ),
        (
            HEADER + "A,,,,LOCAL,\nB,,,,tcp://nohost,\n",
            r"routes\.csv:3: route AW/B: field 'address': expected LOCAL",
        ),
        (
            HEADER + "A,,,,LOCAL,TCP://m.example:4022\n",
            r"routes\.csv:2: route AW/A: field 'mirror_address': a LOCAL",
        ),
        (
            HEADER + "A,,not-a-guid,,LOCAL,\n",
            r"routes\.csv:2: route AW/A: field 'broker_instance': expected a GUID",
        ),
        (
            HEADER + "A,,,tomorrow,LOCAL,\n",
            r"routes\.csv:2: route AW/A: field 'lifetime': expected the UTC expiry",
        ),
        (
            HEADER + "A,,,,NULL,\n",
            r"routes\.csv:2: route AW/A: field 'address': expected LOCAL, TRANSPORT or",
        ),
        (HEADER + "A,,,,LOCAL\n", r"routes\.csv:2: expected 6 cells as the header has, got 5"),
        (HEADER + "NULL,,,,LOCAL,\n", r"routes\.csv:2: route AW/\?: field 'name': expected a non-empty name"),
        (HEADER + "A,,,,LOCAL,\nA,,,,LOCAL,\n", r"routes\.csv:3: route AW/A: field 'name': duplicate route"),
        (
            HEADER.replace("\n", ",owner\n") + "A,,,,LOCAL,,x\n",
            r"routes\.csv:1: header: unknown column 'owner'",
        ),
        ("", r"routes\.csv: expected a header row naming the columns .* got an empty file"),
    ],
)
def test_a_bad_csv_names_file_line_and_column(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        check_operations(parse_sys_routes_csv(text, "routes.csv", now=NOW, instance="i1", database="AW"))


def test_bytes_that_are_not_text_are_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"x\.csv: expected UTF-8 or UTF-16 text.*save the results as UTF-8 CSV"
    ):
        decode(b"name\xff\xfe\x00,a", "x.csv")


# --- export, and loading it back ----------------------------------------------------------------


def load_back(fmt: str, instance: str, scope: str, text: str, now: datetime) -> list[RouteOperation]:
    if fmt == "yaml":
        return parse_route_yaml(text, "export.yaml", now=now)
    if fmt == "sql":
        return parse_route_script(text, "export.sql", now=now)
    return parse_sys_routes_csv(text, "export.csv", now=now, instance=instance, database=scope)


def tables_of(instance: str, routes: list[Route]) -> dict[str, Route]:
    return {f"{instance}/{r.scope}/{r.name}": r for r in routes}


def round_trip(fmt: str, instance: str, routes: list[Route], now: datetime) -> dict[str, Route]:
    """Export `routes` in `fmt` (one file per database for csv) and load it into empty tables."""
    out: dict[str, Route] = {}
    for scope in sorted({r.scope for r in routes}) if fmt == "csv" else [None]:
        chosen = [r for r in routes if scope is None or r.scope == scope]
        text = render_routes(fmt, instance, chosen, now=now)
        out.update(planned_tables(out, load_back(fmt, instance, scope or "", text, now)))
    return out


def sample_tables() -> list[tuple[str, str, list[Route]]]:
    """(label, instance, routes): the demo's tables per instance, and every conformance example's."""
    samples = []
    for path in (REPO / "routes/demo/routes.yaml", REPO / "routes/demo/routes.sql"):
        ops = load_route_files([path], now=NOW)
        for instance in sorted({op.table_instance for op in ops}):
            routes = [op.route for op in ops if op.instance == instance and op.route is not None]
            samples.append((f"{path.name}:{instance}", instance, routes))
    for path in sorted((REPO / "tests/scenarios").rglob("*.yaml")):
        scenario = load_scenario(path)
        samples.append((path.stem, scenario.instance.name, list(scenario.routes)))
    return samples


def test_the_samples_cover_every_field() -> None:
    routes = [r for _, _, rs in sample_tables() for r in rs]
    assert len(routes) > 100
    for field in ("service", "broker_instance", "mirror_address", "expires_at"):
        assert any(getattr(r, field) is not None for r in routes), field
    assert {"LOCAL", "TRANSPORT"} <= {r.address for r in routes}


@pytest.mark.parametrize("fmt", ["yaml", "csv", "sql"])
def test_export_loads_back_to_the_same_tables(fmt: str) -> None:
    checked = refused = 0
    for label, instance, routes in sample_tables():
        expected = tables_of(instance, routes)
        if fmt == "sql":  # LIFETIME = 0 for a route expired at the export: it loads back expired now
            expected = {k: _expired_now(r, NOW) for k, r in expected.items()}
        needs_both = [r for r in routes if r.mirror_address and not (r.service and r.broker_instance)]
        if fmt == "sql" and needs_both:
            with pytest.raises(
                ConfigError, match=r"CREATE ROUTE cannot state a mirror route .*--format yaml"
            ):
                round_trip(fmt, instance, routes, NOW)
            refused += 1
            continue
        assert round_trip(fmt, instance, routes, NOW) == expected, label
        checked += 1
    assert checked > 100
    if fmt == "sql":  # Example 3's tables: a mirror route without a broker instance (R5)
        assert refused >= 1
    else:
        assert refused == 0


def _expired_now(route: Route, now: datetime) -> Route:
    if route.expires_at is not None and route.expires_at <= now:
        return dataclasses.replace(route, expires_at=now)
    return route


def test_sql_lifetime_is_the_remaining_lifetime_rounded_up() -> None:
    later = NOW + timedelta(seconds=10, milliseconds=300)
    routes = [
        Route("AW", "Soon", "LOCAL", expires_at=NOW + timedelta(seconds=100)),
        Route("AW", "Gone", "LOCAL", expires_at=NOW),
        Route("msdb", "It's]odd", "TCP://h.example:4022", service="S'1"),
    ]
    text = render_routes("sql", "i1", routes, now=later)
    assert text == (
        "-- instance: i1\n\nUSE [AW];\nGO\n"
        "CREATE ROUTE [Gone] WITH LIFETIME = 0, ADDRESS = 'LOCAL';\n"
        "CREATE ROUTE [Soon] WITH LIFETIME = 90, ADDRESS = 'LOCAL';\n"
        "\nUSE [msdb];\nGO\n"
        "CREATE ROUTE [It's]]odd] WITH SERVICE_NAME = 'S''1', ADDRESS = 'TCP://h.example:4022';\n"
    )
    back = {op.name: op.route for op in parse_route_script(text, "x.sql", now=later)}
    assert back["Soon"] is not None and back["Soon"].expires_at == later + timedelta(seconds=90)
    assert back["Gone"] is not None and not back["Gone"].is_active(later)
    assert back["It's]odd"] == routes[2]


def test_csv_export_of_several_databases_asks_for_one() -> None:
    routes = [Route("AW", "A", "LOCAL"), Route("msdb", "A", "LOCAL")]
    with pytest.raises(
        ConfigError, match=r"holds one database's routes, got 2 \(AW, msdb\); give --scope DB"
    ):
        render_routes("csv", "i1", routes, now=NOW)
