"""A routing service file, read and checked: errors name the file, the line and the field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streaming.ddr.answers import Mode
from streaming.errors import ConfigError
from streaming.tables.validate import (
    Source,
    check_known_fields,
    check_seconds,
    check_service,
    check_sysname,
    fail,
)
from streaming.tables.yaml_files import LineDict, entry_mapping, parse_yaml, read_text

SERVICE_FIELDS = ("service", "database", "mode", "classifier", "lifetime_s")


@dataclass(frozen=True)
class RoutingServiceConfig:
    """A routing service as its file declares it (see `streaming.ddr`)."""

    service: str
    database: str
    mode: Mode
    classifier: str
    lifetime_s: float | None = None
    file: str = ""


def parse_routing_service(text: str, file: str) -> RoutingServiceConfig:
    """Parse a routing service file (see `streaming.ddr`); errors name file, line and field."""
    document = parse_yaml(text, file)
    subject = "routing_service"
    if not isinstance(document, LineDict) or set(document) != {"routing_service"}:
        raise ConfigError(
            f"{file}: expected one top-level mapping, 'routing_service:' (see `router ddr --help`)"
        )
    where = Source(file, document.line_of("routing_service"))
    mapping = entry_mapping(document["routing_service"], where, subject)
    where = where.at(mapping.line)
    check_known_fields(mapping, SERVICE_FIELDS, where, subject)
    for required in ("service", "database", "mode", "classifier"):
        if required not in mapping:
            fail(where, subject, "required", required)
    service = check_service(mapping["service"], where.at(mapping.line_of("service")), subject)
    database = check_sysname(mapping["database"], where.at(mapping.line_of("database")), subject, "database")
    mode_text = mapping["mode"]
    if mode_text not in {m.value for m in Mode}:
        fail(
            where.at(mapping.line_of("mode")),
            subject,
            f"expected forward or redirect, got {mode_text!r}",
            "mode",
        )
    classifier = mapping["classifier"]
    if not isinstance(classifier, str) or not classifier.strip():
        fail(
            where.at(mapping.line_of("classifier")), subject, "expected a Spark SQL expression", "classifier"
        )
    lifetime = None
    if mapping.get("lifetime_s") is not None:
        at = where.at(mapping.line_of("lifetime_s"))
        lifetime = check_seconds(mapping["lifetime_s"], at, subject, "lifetime_s", positive=True)
    return RoutingServiceConfig(service, database, Mode(mode_text), classifier.strip(), lifetime, file)


def load_routing_service(path: Path) -> RoutingServiceConfig:
    """Read and parse a routing service file (see `parse_routing_service`)."""
    return parse_routing_service(read_text(path), str(path))
