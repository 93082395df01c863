"""One database's `sys.routes` as CSV, in and out: what SQL Server's tools export, and the same back.

The CSV is what `SELECT name, remote_service_name, broker_instance, lifetime, address,
mirror_address FROM sys.routes` gives in SSMS ("Save Results As"), sqlcmd (`-s"," -W`) or bcp
with a header line. It names neither the instance nor the database: the caller does (`router
routes load --from-sys-routes FILE.csv --instance I --database D`).

Read (R1): a header row naming the six columns in any order (`route_id` and `principal_id`, the
other columns of `sys.routes`, may be there too and are ignored); comma or tab separated; a UTF-8
(with or without BOM) or UTF-16 file; sqlcmd's underline row (`----,----`) and its closing
`(N rows affected)` line are skipped; unquoted cells are trimmed of surrounding blanks (sqlcmd pads
them), quoted ones kept as written (R2). NULL is an empty cell or the word NULL. `lifetime` is the
UTC expiry instant as sys.routes holds it (`2026-12-01 10:00:00.000`, a `T` or up to 7 fraction
digits allowed, R6), or an integer of seconds counted from the load, as LIFETIME = n. Every row is
checked as a route file's entry is (R1-R5, T3, R9); errors name the file, the line and the column.
AutoCreatedLocal (R8) is an ordinary row whose address is LOCAL.

Written: the six columns, NULL as the word NULL, lifetime as the expiry instant in UTC to the
millisecond, a cell with a comma, a quote or surrounding blanks quoted, so that reading the CSV
back gives the same routes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

from streaming.errors import ConfigError
from streaming.rules.model import Route
from streaming.tables.operations import RouteOperation
from streaming.tables.validate import (
    INT32_MAX,
    Source,
    check_instance_name,
    check_scope,
    check_sysname,
    fail,
    route_field_checks,
    route_subject,
    validate_route,
)

COLUMNS = ("name", "remote_service_name", "broker_instance", "lifetime", "address", "mirror_address")
"""The columns of sys.routes that a route needs (R1), in the order they are written."""
IGNORED_COLUMNS = ("route_id", "principal_id")
"""The other columns of sys.routes: they play no part in routing (R1)."""
FIELD_OF = {
    "remote_service_name": "service",
    "broker_instance": "broker_instance",
    "address": "address",
    "mirror_address": "mirror_address",
}
"""sys.routes column -> Route field, for the columns checked as a route file's fields are."""

_ROWS_AFFECTED = re.compile(r"^\(\d+ rows? affected\)$", re.IGNORECASE)
_UNDERLINE = re.compile(r"^-+$")
_INSTANT = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<time>\d{2}:\d{2}(?::\d{2})?)"
    r"(?:\.(?P<fraction>\d{1,7}))?(?P<utc>Z)?$"
)
_EXPECTED_HEADER = f"a header row naming the columns {', '.join(COLUMNS)}"


def decode(data: bytes, file: str) -> str:
    """Return the text of a CSV file: UTF-16 when it starts with a UTF-16 BOM, else UTF-8 (BOM or not)."""
    try:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            return data.decode("utf-16")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{file}: expected UTF-8 or UTF-16 text, got bytes that are neither ({exc.reason} at byte "
            f"{exc.start}); save the results as UTF-8 CSV"
        ) from exc


def parse_sys_routes_csv(
    text: str, file: str, *, now: datetime, instance: str, database: str
) -> list[RouteOperation]:
    """Return a create operation for each row of a sys.routes CSV, in `instance`'s table `database`.

    Raises ConfigError naming the file, the line and the column of the first row that is not a
    valid route, or what is wrong with the header.
    """
    check_instance_name(instance, Source("--instance"), "--instance", "instance")
    scope = check_scope(database, Source("--database"), "--database", "database")
    rows = _rows(text)
    if not rows:
        raise ConfigError(f"{file}: expected {_EXPECTED_HEADER}, got an empty file")
    header_line, header = rows[0]
    columns = [cell.strip().strip("[]").lower() for cell in header]
    header_source = Source(file, header_line)
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        found = ", ".join(repr(c) for c in header)
        fail(
            header_source,
            "header",
            f"expected {_EXPECTED_HEADER}, got {found}; missing {', '.join(missing)}: export with "
            f"SELECT {', '.join(COLUMNS)} FROM sys.routes and keep the column names",
        )
    for column in columns:
        if column not in COLUMNS and column not in IGNORED_COLUMNS:
            fail(
                header_source,
                "header",
                f"unknown column {column!r}; expected the columns of sys.routes "
                f"({', '.join(COLUMNS + IGNORED_COLUMNS)})",
            )
        if columns.count(column) > 1:
            fail(header_source, "header", f"column {column!r} given twice")
    operations = []
    for line, cells in rows[1:]:
        source = Source(file, line)
        if len(cells) != len(columns):
            fail(
                source,
                "",
                f"expected {len(columns)} cells as the header has, got {len(cells)}: a value holding the "
                "separator must be quoted",
            )
        row = {column: _null(cell) for column, cell in zip(columns, cells, strict=True)}
        operations.append(_row_operation(row, source, now=now, instance=instance, scope=scope))
    return operations


def load_sys_routes_csv(path: Path, *, now: datetime, instance: str, database: str) -> list[RouteOperation]:
    """Read and parse a sys.routes CSV file (see `parse_sys_routes_csv`)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_sys_routes_csv(
        decode(data, str(path)), str(path), now=now, instance=instance, database=database
    )


def _rows(text: str) -> list[tuple[int, list[str]]]:
    """The CSV's rows with their 1-based lines; blank lines, the underline and the footer left out.

    An unquoted cell is trimmed (sqlcmd pads columns); a quoted one is kept as it is, since a service
    name is compared byte by byte (R2) and may end in a blank.
    """
    first = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = "\t" if "\t" in first and "," not in first else ","
    rows = []
    for line, cells in split_csv(text, delimiter):
        if not any(cells):
            continue
        if len(cells) == 1 and _ROWS_AFFECTED.match(cells[0]):
            continue
        if all(_UNDERLINE.match(cell) for cell in cells if cell):
            continue
        rows.append((line, cells))
    return rows


def split_csv(text: str, delimiter: str) -> list[tuple[int, list[str]]]:
    """Split CSV text into rows of cells (RFC 4180 quoting, `""` for a quote), each with its first line.

    Unquoted cells are trimmed of surrounding blanks; quoted cells keep them.
    """
    rows: list[tuple[int, list[str]]] = []
    cells: list[str] = []
    cell: list[str] = []
    quoted = in_quotes = False
    line = row_line = 1
    i, n = 0, len(text)

    def end_cell() -> None:
        nonlocal cell, quoted
        value = "".join(cell)
        cells.append(value if quoted else value.strip())
        cell, quoted = [], False

    while i < n:
        ch = text[i]
        if in_quotes:
            if ch == '"' and text.startswith('""', i):
                cell.append('"')
                i += 2
                continue
            if ch == '"':
                in_quotes = False
            else:
                cell.append(ch)
                line += ch == "\n"
        elif ch == '"' and not "".join(cell).strip():
            cell, quoted, in_quotes = [], True, True
        elif ch == delimiter:
            end_cell()
        elif ch in "\r\n":
            if ch == "\r" and text.startswith("\n", i + 1):
                i += 1
            end_cell()
            rows.append((row_line, cells))
            cells = []
            line += 1
            row_line = line
        elif not (quoted and ch.isspace()):  # blanks after a closing quote are padding
            cell.append(ch)
        i += 1
    if cell or cells or quoted:
        end_cell()
        rows.append((row_line, cells))
    return rows


def _null(cell: str) -> str | None:
    return None if cell == "" or cell.upper() == "NULL" else cell


def _row_operation(
    row: dict[str, str | None], source: Source, *, now: datetime, instance: str, scope: str
) -> RouteOperation:
    raw_name = row["name"]
    subject = route_subject(scope, raw_name)
    name = check_sysname(raw_name, source, subject, "name")
    checks = route_field_checks(subject)
    values: dict[str, str | None] = {}
    for column, field in FIELD_OF.items():
        value = row[column]
        values[field] = None if value is None else str(checks[field](value, source))
    if values["address"] is None:
        fail(source, subject, "expected LOCAL, TRANSPORT or TCP://host:port, got NULL", "address")
    route = Route(
        scope=scope,
        name=name,
        address=str(values["address"]),
        service=values["service"],
        broker_instance=values["broker_instance"],
        mirror_address=values["mirror_address"],
        expires_at=parse_lifetime(row["lifetime"], source, subject, now=now),
    )
    column_of = {field: column for column, field in FIELD_OF.items()}
    validate_route(route, source, locate=lambda field: (source, column_of.get(field, field)))
    return RouteOperation("create", scope, name, source, route=route, instance=instance)


def parse_lifetime(value: str | None, source: Source, subject: str, *, now: datetime) -> datetime | None:
    """Return a `lifetime` cell's expiry: NULL never, an instant as is (UTC), n seconds from `now` (R6)."""
    if value is None:
        return None
    if value.isdigit():
        seconds = int(value)
        if seconds > INT32_MAX:
            fail(source, subject, f"expected seconds from 0 to {INT32_MAX}, got {value}", "lifetime")
        return now + timedelta(seconds=seconds)
    found = _INSTANT.match(value)
    if found is not None:
        fraction = (found["fraction"] or "").ljust(6, "0")[:6]
        clock = found["time"] if found["time"].count(":") == 2 else found["time"] + ":00"
        try:
            instant = datetime.fromisoformat(f"{found['date']}T{clock}.{fraction}")
        except ValueError:
            instant = None
        if instant is not None:
            return instant.replace(tzinfo=timezone.utc)
    fail(
        source,
        subject,
        "expected the UTC expiry as sys.routes shows it (2026-12-01 10:00:00.000), a number of seconds "
        f"from now, or NULL; got {value!r}",
        "lifetime",
    )


def render_sys_routes_csv(routes: Iterable[Route]) -> str:
    """Return one database's routes as a sys.routes CSV (header, NULL as the word, expiry in UTC).

    A cell is quoted when it holds a comma, a quote, a line break or surrounding blanks, so that it
    reads back as written.
    """
    lines = [",".join(COLUMNS)]
    lines += [",".join(_csv_cell(cell) for cell in _cells(route)) for route in routes]
    return "\n".join(lines) + "\n"


def _csv_cell(value: str) -> str:
    if value != value.strip() or any(ch in value for ch in ',"\r\n\t'):
        return '"' + value.replace('"', '""') + '"'
    return value


def _cells(route: Route) -> Sequence[str]:
    def cell(value: str | None) -> str:
        return "NULL" if value is None else value

    lifetime = "NULL" if route.expires_at is None else format_sql_instant(route.expires_at)
    return (
        route.name,
        cell(route.service),
        cell(route.broker_instance),
        lifetime,
        route.address,
        cell(route.mirror_address),
    )


def format_sql_instant(instant: datetime) -> str:
    """An instant in UTC as SQL Server shows a datetime: `2026-12-01 10:00:00.000`."""
    utc = instant.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%d %H:%M:%S") + f".{utc.microsecond // 1000:03d}"
