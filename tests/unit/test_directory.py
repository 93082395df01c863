"""The dynamic routing service's directory file and its reading of MissingRoute requests (B3, B6)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from streaming.cli import main
from streaming.directory import parse_directory, requested_service, route_name
from streaming.errors import ConfigError, MalformedRecord
from streaming.tables.records import RequestRecord, RequestRecords

ROOT = Path(__file__).resolve().parents[2]

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
GUID = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"


def test_a_listed_service_gets_its_route_in_the_table_that_asked() -> None:
    directory = parse_directory(
        f"""services:
  - {{service: Billing, address: "TCP://billing.example:4022"}}
  - service: Audit
    broker_instance: {GUID}
    address: "TCP://audit.example:4022"
    lifetime_s: 60
""",
        "d.yaml",
    )
    billing = directory.route_for("Billing", "AW", NOW)
    assert billing is not None
    assert (billing.scope, billing.name, billing.service, billing.address, billing.expires_at) == (
        "AW",
        "directory:Billing",
        "Billing",
        "TCP://billing.example:4022",
        None,
    )
    audit = directory.route_for("Audit", "msdb", NOW)
    assert audit is not None
    assert (audit.scope, audit.broker_instance, audit.expires_at) == (
        "msdb",
        GUID,
        NOW + timedelta(seconds=60),
    )
    assert directory.route_for("billing", "AW", NOW) is None  # service names are compared exactly (R2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("services:\n  - {address: LOCAL}\n", "d.yaml:2: directory entry #1: field 'service': required"),
        ("services:\n  - {service: S}\n", "d.yaml:2: directory entry 'S': field 'address': required"),
        ("services:\n  - {service: S, address: LOCAL, scope: AW}\n", "scope"),
        ("services:\n  - {service: S, address: 'tcp://h'}\n", "d.yaml:2"),
        ("services:\n  - {service: S, address: LOCAL, lifetime_s: -1}\n", "lifetime_s"),
        ("services:\n  - {service: S, address: TRANSPORT}\n", "T3"),
        (
            "services:\n  - {service: S, address: LOCAL}\n  - {service: S, address: LOCAL}\n",
            "d.yaml:3: directory entry 'S': field 'service': listed twice",
        ),
        ("services: 7\n", "expected a list of services"),
    ],
)
def test_a_bad_entry_is_refused_with_its_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_directory(text, "d.yaml")
    assert expected in str(caught.value)


def test_a_route_name_fits_however_long_the_service() -> None:
    assert route_name("Billing") == "directory:Billing"
    long = route_name("x" * 256)
    assert long.startswith("directory:sha256-") and len(long) <= 128
    assert long != route_name("x" * 255)


def test_the_requested_service_is_read_from_the_missing_route_body() -> None:
    body = (
        b'<MissingRoute xmlns="http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice/'
        b'MissingRoute"><SERVICE_NAME>//Adventure-Works.com/A&amp;B</SERVICE_NAME></MissingRoute>'
    )
    assert requested_service(body) == "//Adventure-Works.com/A&B"
    for bad in (
        b"not xml",
        b"<MissingRoute/>",
        b"<MissingRoute><SERVICE_NAME></SERVICE_NAME></MissingRoute>",
    ):
        with pytest.raises(MalformedRecord):
            requested_service(bad)


def test_a_request_record_names_its_dialog_and_reads_back() -> None:
    ended = RequestRecord("i1", "AW", "Remote", False, "missing-route-c1:0-17", "route directory:Remote")
    assert ended.key() == b"i1\x00AW\x00Remote"
    assert RequestRecords().row_value("k", ended.value()) == ended
    asked = RequestRecords().row_value(
        "k", b'{"instance": "i1", "scope": "AW", "service": "S", "asked": true}'
    )
    assert (asked.asked, asked.request_id, asked.answer) == (True, None, None)
    with pytest.raises(ConfigError):
        RequestRecords().row_value("k", b"[1, 2]")


def test_directory_check_reads_every_file_and_names_the_one_that_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  - {service: Billing}\n", encoding="utf-8")
    sample = ROOT / "routes" / "directory" / "directory.yaml"
    assert main(["directory", "check", str(sample)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{sample}: 2 service(s)"

    assert main(["directory", "check", str(bad), str(sample)]) == 2
    out, err = capsys.readouterr()
    assert "Billing: TCP://billing.example:4022" in out and f"{sample}: 2 service(s)" in out
    assert f"router directory check: error: {bad}" in err
    assert "1 of 2 file(s) failed" in err
