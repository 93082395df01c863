"""Small builders for the rule unit tests: one instance catalog, routes, messages and batches."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from streaming.rules.batch import RoutingBatch
from streaming.rules.engine import ReferenceEngine
from streaming.rules.model import Database, Decision, Instance, Message, MirrorRole, Route

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
AW = "0a0a0a0a-0000-0000-0000-000000000001"
MSDB = "0d0d0d0d-0000-0000-0000-000000000001"
DB2 = "0b0b0b0b-0000-0000-0000-000000000002"
DB3 = "0c0c0c0c-0000-0000-0000-000000000003"
FAR1 = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
FAR2 = "81b1d3d0-288e-4d2c-b1d3-456cbb944b4f"
ELSEWHERE = "9e9e9e9e-0000-0000-0000-000000000009"
SELF_ADDRESS = "TCP://i1:4022"


def database(name: str, guid: str, *services: str, enabled: bool = True) -> Database:
    return Database(name=name, broker_instance=guid, broker_enabled=enabled, services=services)


DEFAULT_DATABASES = (
    database("AW", AW, "InitiatorService"),
    database("msdb", MSDB),
    database("DB2", DB2, "TargetService"),
)


def instance(*databases: Database, forwarding: bool = False, forward_size_mb: int = 10) -> Instance:
    return Instance(
        name="i1",
        address=SELF_ADDRESS,
        databases=databases or DEFAULT_DATABASES,
        forwarding=forwarding,
        forward_size_mb=forward_size_mb,
    )


def route(
    scope: str,
    name: str,
    address: str,
    service: str | None = None,
    broker: str | None = None,
    *,
    mirror: str | None = None,
    expires_at: datetime | None = None,
) -> Route:
    return Route(
        scope=scope,
        name=name,
        address=address,
        service=service,
        broker_instance=broker,
        mirror_address=mirror,
        expires_at=expires_at,
    )


def acl(scope: str) -> Route:
    return route(scope, "AutoCreatedLocal", "LOCAL")


def message(
    id: str = "m1",
    conversation: str = "c1",
    service: str = "TargetService",
    origin: str = "AW",
    **fields: Any,
) -> Message:
    return Message(id=id, conversation_id=conversation, service=service, origin=origin, **fields)


def batch(
    routes: list[Route],
    messages: list[Message],
    *,
    inst: Instance | None = None,
    now: datetime = NOW,
    mirrors: dict[str, MirrorRole] | None = None,
    pending: set[tuple[str, str]] | None = None,
    waiting: set[tuple[str, bool]] | None = None,
    choices: dict[tuple[str, str, str], tuple[str, str, str]] | None = None,
    rotation: dict[str, int] | None = None,
) -> RoutingBatch:
    return RoutingBatch(
        instance=inst or instance(),
        routes=tuple(routes),
        messages=tuple(messages),
        now=now,
        mirrors=mirrors or {},
        pending_requests=frozenset(pending or ()),
        waiting_endpoints=frozenset(waiting or ()),
        choices=choices or {},
        rotation=rotation or {},
    )


def decide_one(routes: list[Route], msg: Message, **batch_fields: Any) -> Decision:
    """Decide one message with the reference engine and return its decision."""
    result = ReferenceEngine().decide(batch(routes, [msg], **batch_fields))
    return result.decisions[0]
