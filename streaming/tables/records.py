"""What a record on each compacted table topic must hold, and the table row it stands for.

A `TableRecords` turns one record's key and value into a row of its table, or refuses it with the
reason (`ConfigError` for a value that decodes but breaks a rule, `MalformedRecord` for one that
does not decode). It does no I/O: `streaming.tables.reader` reads the records and decides their fate
(see there: a refused record is skipped and the key keeps its last good value).

    routes topic    key `instance/scope/name` value Avro router.v1.Route; null = dropped
    catalogs topic  key the instance name     value Avro router.v1.Catalog
    mirrors topic   key a partner's address   value the role as text: principal|mirror|unreachable
    requests topic  key `instance NUL scope NUL service`  value JSON: a MissingRoute request (B4)

A value is checked with the loaders' own checks (`streaming.tables.validate`), so the topic holds
no route or catalog that a route or catalog file could not have published, whoever wrote it. The
key must agree with the value (a route's `scope/name`, a catalog's instance name): otherwise a
tombstone for the value's key would not remove it. A route reader for one instance takes only the
records of that instance's tables: `row_key` raises `OtherTable` for the others, which are no row of
this table and no error either.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol, TypeVar

from streaming.kafka.avro import decoder, record_to_instance, record_to_route
from streaming.rules.model import Instance, MirrorRole, Route, normalize_address
from streaming.tables.operations import legacy_route_key, route_key, split_route_key
from streaming.tables.validate import (
    RECORD,
    check_mirror_role,
    check_tcp_address,
    fail,
    route_subject,
    validate_stored_instance,
    validate_stored_route,
)

V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)

MIGRATE_HINT = (
    "a key 'scope/name' was written before each instance had its own routing tables; "
    "`router routes migrate --instance NAME` moves such routes into instance NAME's tables"
)


class OtherTable(Exception):
    """A record of another table on the same topic (another instance's routes): not a row, not an error."""


class TableRecords(Protocol[V_co]):
    """How the records of one table topic become rows: a row key, and a value checked on the way."""

    what: str
    """What one row is, for messages: "route", "instance catalog", "mirror role"."""

    def row_key(self, key: str) -> str:
        """Return the table key of a record's key (a tombstone's too); ConfigError if it names no row."""
        ...

    def row_value(self, key: str, value: bytes) -> V_co:
        """Return the row a record's value stands for; raise ConfigError or MalformedRecord to refuse it."""
        ...


class RouteRecords:
    """The routes topic: key `instance/scope/name`, value an Avro route checked like a route file's.

    With `instance` (one name, or several), only those instances' routes are rows (`OtherTable` for
    the rest).
    """

    what = "route"

    def __init__(self, instance: str | Collection[str] | None = None) -> None:
        self._decode = decoder("route")
        self.instances = (
            None if instance is None else frozenset([instance] if isinstance(instance, str) else instance)
        )

    def row_key(self, key: str) -> str:
        """Return the key as it is, if it has the `instance/scope/name` form (and is this table's)."""
        try:
            instance, _, _ = split_route_key(key)
        except ValueError:
            fail(
                RECORD,
                "",
                f"expected a routes-topic key 'instance/scope/name', got {key!r}: {MIGRATE_HINT}",
                "key",
            )
        if self.instances is not None and instance not in self.instances:
            raise OtherTable(key)
        return key

    def route_of(self, value: bytes) -> Route:
        """The route a value holds, as the loaders would have written it (`validate_stored_route`)."""
        return validate_stored_route(record_to_route(self._decode(value)), RECORD)

    def row_value(self, key: str, value: bytes) -> Route:
        """Return the route (`route_of`), if the key is its instance/scope/name."""
        route = self.route_of(value)
        if key == legacy_route_key(
            route.scope, route.name
        ):  # a name with '/' makes such a key look like a new one
            fail(RECORD, route_subject(route.scope, route.name), MIGRATE_HINT, "key")
        instance, _, _ = split_route_key(key)
        expected = route_key(instance, route.scope, route.name)
        if key != expected:
            fail(
                RECORD,
                route_subject(route.scope, route.name),
                f"expected the record's key to be {expected!r} (instance/scope/name), got {key!r}",
                "key",
            )
        return route


class CatalogRecords:
    """The catalogs topic: key the instance name, value an Avro catalog checked like a catalog file's."""

    what = "instance catalog"

    def __init__(self) -> None:
        self._decode = decoder("catalog")

    def row_key(self, key: str) -> str:
        """Return the instance name as it is."""
        return key

    def row_value(self, key: str, value: bytes) -> Instance:
        """Return the instance catalog (`validate_stored_instance`)."""
        instance = validate_stored_instance(record_to_instance(self._decode(value)), RECORD)
        if key != instance.name:
            fail(
                RECORD,
                f"instance {instance.name}",
                f"expected the record's key to be the instance name {instance.name!r}, got {key!r}",
                "key",
            )
        return instance


class MirrorRecords:
    """The mirrors topic: key a mirror partner's TCP address, value its role as UTF-8 text.

    Rows are keyed by the normalized address (R4), the form routing compares; two spellings of one
    address are one row, the later record wins. The role is read as the job always read it:
    surrounding blanks and letter case do not matter.
    """

    what = "mirror role"

    def row_key(self, key: str) -> str:
        """Return the normalized partner address of a key that is a TCP address."""
        return normalize_address(check_tcp_address(key, RECORD, "mirror partner", "key"))

    def row_value(self, key: str, value: bytes) -> MirrorRole:
        """Return the role the value names."""
        subject = f"mirror partner {key}"
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            fail(RECORD, subject, f"expected a role as UTF-8 text, got {value[:40]!r}", "role")
        return check_mirror_role(text.strip().lower(), RECORD, subject)


class RawRecords:
    """Any compacted topic: the key as it is, the value's bytes unchecked (`topic_io.read_latest`)."""

    what = "value"

    def row_key(self, key: str) -> str:
        """Return the key as it is."""
        return key

    def row_value(self, key: str, value: bytes) -> bytes:
        """Return the value's bytes as they are."""
        return value


InstanceRequest = tuple[str, str, str]
"""A request of one instance's table: (instance, scope, service)."""


@dataclass(frozen=True)
class RequestRecord:
    """One record of the requests topic: a request of `instance`'s table `scope` for `service`."""

    instance: str
    scope: str
    service: str
    asked: bool
    request_id: str | None = None
    """The MissingRoute dialog (its conversation id): set when asked, and by the directory's end."""
    answer: str | None = None
    """How the dynamic routing service ended the dialog: `route`, or its error (for people)."""

    @property
    def request(self) -> InstanceRequest:
        """(instance, scope, service)."""
        return (self.instance, self.scope, self.service)

    def key(self) -> bytes:
        """instance, scope and service joined by NUL: one key per request (the topic is compacted)."""
        return "\u0000".join(self.request).encode("utf-8")

    def value(self) -> bytes:
        """The JSON value (`streaming.spark.output` writes the same for a request a batch makes)."""
        fields: dict[str, object] = {"instance": self.instance, "scope": self.scope, "service": self.service}
        fields["asked"] = self.asked
        if self.request_id is not None:
            fields["request_id"] = self.request_id
        if self.answer is not None:
            fields["answer"] = self.answer
        return json.dumps(fields).encode("utf-8")


class RequestRecords:
    """The requests topic: a MissingRoute request's record, keyed by instance, scope and service."""

    what = "MissingRoute request"

    def row_key(self, key: str) -> str:
        """Return the key as it is."""
        return key

    def row_value(self, key: str, value: bytes) -> RequestRecord:
        """Return the request a JSON value describes."""
        try:
            f = json.loads(value)
            fields = (f["instance"], f["scope"], f["service"], bool(f["asked"]))
            record = RequestRecord(*fields, f.get("request_id"), f.get("answer"))
        except (ValueError, KeyError, TypeError, AttributeError):
            expected = "expected JSON with instance, scope, service and asked"
            fail(RECORD, "request", f"{expected}, got {value[:80]!r}")
        return record
