"""The routing model as plain frozen values: routes, the instance catalog, messages, decisions.

Everything the rules read or return is defined here, so that the reference engine, the Spark engine,
the scenario runner and the Kafka codecs share one vocabulary. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from streaming.contract import Outcome, Reason

LOCAL = "LOCAL"
TRANSPORT = "TRANSPORT"
REMOTE = "remote"
"""The `origin` of a message that arrived from another instance (S3)."""

BROKER_CONFIGURATION_SERVICE = "SQL/ServiceBroker/BrokerConfiguration"
"""The dynamic routing (BCN) service name (R9, B1)."""

MISSING_ROUTE_MESSAGE_TYPE = (
    "http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice/MissingRoute"
)
DEFAULT_HOPS = 16
"""A message's hop budget unless its sender gives one (F3: SQL Server does not document its own)."""
MAX_HOPS = 255
"""hops_remaining is a tinyint (F3)."""
CURRENT_DATABASE = "CURRENT DATABASE"


class MirrorRole(str, Enum):
    """What a mirror partner answers when probed (MI2, MI3)."""

    PRINCIPAL = "principal"
    MIRROR = "mirror"
    UNREACHABLE = "unreachable"


def canonical_guid(value: str) -> str:
    """Return a broker instance GUID in canonical lowercase 8-4-4-4-12 form (R3).

    Raises ValueError when `value` is not a GUID.
    """
    return str(uuid.UUID(value.strip().strip("{}")))


def normalize_address(address: str) -> str:
    """Return the comparable form of a network address: lowercase, no trailing `/` (R4)."""
    return address.strip().rstrip("/").lower()


RouteIdentity = tuple[str, str, str]
"""C0: (broker instance or "", service or "", address); what a conversation's choice remembers (K2)."""


@dataclass(frozen=True)
class Route:
    """One row of a routing table (R1). `None` service or broker instance means any (R2, R3)."""

    scope: str
    name: str
    address: str
    service: str | None = None
    broker_instance: str | None = None
    mirror_address: str | None = None
    expires_at: datetime | None = None

    @property
    def is_local(self) -> bool:
        """The address is LOCAL (R4)."""
        return self.address.upper() == LOCAL

    @property
    def is_transport(self) -> bool:
        """The address is TRANSPORT (R4, T1)."""
        return self.address.upper() == TRANSPORT

    @property
    def identity(self) -> RouteIdentity:
        """C0: routes equal in (broker instance, service, address) count as one route."""
        return (self.broker_instance or "", self.service or "", self.address)

    def is_active(self, now: datetime) -> bool:
        """R6: an expired route is ignored by every matching run, but not deleted."""
        return self.expires_at is None or self.expires_at > now


@dataclass(frozen=True)
class Database:
    """A database of the instance: its broker instance, whether delivery is on, its services."""

    name: str
    broker_instance: str
    broker_enabled: bool = True
    services: tuple[str, ...] = ()


@dataclass(frozen=True)
class Instance:
    """The instance that takes the decisions: its catalog and Service Broker endpoint settings."""

    name: str
    address: str
    databases: tuple[Database, ...]
    forwarding: bool = False
    forward_size_mb: int = 10
    retry_s: float = 5.0

    def database(self, name: str) -> Database | None:
        """The database of that name, or None."""
        return next((d for d in self.databases if d.name == name), None)


ChoiceKey = tuple[str, str, str]
"""K2: (conversation id, origin database, target service), one sending endpoint's direction."""

Endpoint = tuple[str, bool]
"""A conversation endpoint: (conversation id, from_target), the initiator's side or the target's.

A conversation has two endpoints and each keeps its own order (D1): the target's reply does not
wait behind the initiator's delayed message, nor the other way round, when both live in one
instance."""


@dataclass(frozen=True)
class Message:
    """A conversation message as the router sees it (K1: target service and optional broker)."""

    id: str
    conversation_id: str
    service: str
    origin: str
    broker_instance: str | None = None
    from_target: bool = False
    message_type: str = "DEFAULT"
    hops_remaining: int = DEFAULT_HOPS
    time_to_live_s: float | None = None
    size_bytes: int = 1024

    @property
    def is_remote(self) -> bool:
        """The message arrived from another instance (S3)."""
        return self.origin == REMOTE

    @property
    def remembers_choice(self) -> bool:
        """K2: the sending endpoint keeps the route chosen for its conversation's first message.

        That is a message sent by an initiator of this instance that has no broker instance (not
        pinned, A2): replies carry the initiator's broker instance, and a forwarder stores nothing.
        """
        return not self.is_remote and not self.from_target and self.broker_instance is None

    @property
    def endpoint(self) -> Endpoint:
        """The conversation endpoint that sent the message (D1 delays it, not the whole conversation)."""
        return (self.conversation_id, self.from_target)

    @property
    def choice_key(self) -> ChoiceKey:
        """Whose choice this message keeps: the endpoint (conversation, database) and the service."""
        return (self.conversation_id, self.origin, self.service)


@dataclass(frozen=True)
class Decision:
    """The fate of one message (the field names of docs/scenarios.md), with the rule steps that led to it."""

    id: str
    outcome: Outcome
    at: datetime | None = None
    database: str | None = None
    address: str | None = None
    route: str | None = None
    match_step: str | None = None
    choice_step: str | None = None
    reason: Reason | None = None
    requests: str | None = None
    hops_remaining: int | None = None
    scope: str | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)
    remembered: RouteIdentity | None = field(default=None, compare=False)
    """K2: the identity of the route chosen in the message's own table, for a conversation that
    keeps its choice (`remembers_choice`); None otherwise. Not printed: it is the endpoint's memory."""

    def to_json_dict(self) -> dict[str, object]:
        """Return the decision as `router resolve` prints it (absent fields left out)."""
        out: dict[str, object] = {"id": self.id}
        if self.at is not None:
            out["at"] = self.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        out["outcome"] = self.outcome.value
        for name in ("database", "address", "route", "match_step", "choice_step"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.route is None and self.choice_step is not None:
            out["route"] = None
        if self.reason is not None:
            out["reason"] = self.reason.value
        if self.requests is not None:
            out["requests"] = self.requests
        if self.hops_remaining is not None:
            out["hops_remaining"] = self.hops_remaining
        return out
