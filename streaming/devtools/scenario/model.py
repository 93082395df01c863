"""A loaded scenario: its instance, initial tables, events and expectations (docs/scenarios.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streaming.rules.model import (
    Instance,
    Message,
    MirrorRole,
    Route,
)
from streaming.tables.operations import RouteOperation, apply_changes, plan_route_changes


@dataclass(frozen=True)
class MessageEvent:
    """A message sent by a service of the instance or arriving from outside."""

    message: Message


@dataclass(frozen=True)
class AdvanceEvent:
    """The clock moves on; delayed conversations whose retry is due are re-routed (D2)."""

    seconds: float


@dataclass(frozen=True)
class RouteEvent:
    """CREATE, ALTER or DROP ROUTE at the event's clock (R6, R7).

    A `lifetime_s` in the event was turned into an expiry instant from the event's clock at load
    time: the clock only moves on `advance`, so every event's clock is known when the file is read.
    """

    operation: RouteOperation


@dataclass(frozen=True)
class AckEvent:
    """The first acknowledgement of a conversation arrives, carrying the target's broker instance (A2)."""

    conversation_id: str
    broker_instance: str


@dataclass(frozen=True)
class MirrorEvent:
    """A mirror partner now answers with another role (MI2, MI3); `address` is normalized."""

    address: str
    role: MirrorRole


Event = MessageEvent | AdvanceEvent | RouteEvent | AckEvent | MirrorEvent
RouteTable = dict[str, Route]
"""Every routing table of the instance keyed by `route_key` (instance/scope/name), in creation order."""


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario file: the instance, its initial tables, the timeline and the expectations."""

    name: str
    description: str
    source: str
    clock: datetime
    instance: Instance
    routes: tuple[Route, ...]
    mirrors: Mapping[str, MirrorRole]
    events: tuple[Event, ...]
    expect: Mapping[str, Any]
    expect_spread: Mapping[str, Any] | None = None
    expect_same: Mapping[str, Any] | None = None

    def message_ids(self) -> frozenset[str]:
        """Every message id the timeline uses."""
        return frozenset(e.message.id for e in self.events if isinstance(e, MessageEvent))


def apply_route_operation(table: RouteTable, operation: RouteOperation) -> tuple[RouteTable, Route | None]:
    """Apply one create/alter/drop to `table`; return the new table and the route it leaves.

    The semantics are those of route files (`streaming.tables.operations`): alter changes only the
    fields it names (R7), an expired route stays in the table (R6). Raises ConfigError for an alter
    or drop of a route that does not exist.
    """
    (change,) = plan_route_changes(table, [operation])
    return apply_changes(table, [change]), change.route
