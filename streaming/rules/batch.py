"""The contract both engines implement: decide a batch of messages taken at one moment.

A batch is the unit of work of the reference engine, of the Spark engine and of one micro-batch of
the streaming job. Messages in a batch are decided in order, as if one at a time:

* a message whose conversation endpoint (its side of the conversation) already has a message
  waiting (in `waiting_endpoints`, or delayed earlier in the same batch) is delayed behind it (D1,
  B7: a conversation, not a message, is delayed), so each endpoint keeps its order;
* the first message of the batch that reaches M4 for (scope, service) with no request pending
  creates the request; later ones in the batch see it pending (B4) and go on with M5;
* a message that `remembers_choice` keeps the route its conversation chose before (K2): the
  route identity in `choices`, or the one chosen earlier in the batch, while it is a candidate.
  All messages with one `choice_key` read the same routes, so within a batch they choose alike;
* the messages a batch forwards are in flight together: one whose forwarding would push their
  bytes over MESSAGE_FORWARD_SIZE is discarded with `forward_buffer_full` (F5);
* a message that picks among equal options (C5, M3) takes the next in turn of that set of options
  (`streaming.rules.choice.Rotation`): the counters run on from `rotation`, in batch order.

Conversation state that lives with the endpoints (the pin of A2, CURRENT DATABASE) is applied to
each message's `broker_instance` before it reaches an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from streaming.rules.model import (
    ChoiceKey,
    Decision,
    Endpoint,
    Instance,
    Message,
    MirrorRole,
    Route,
    RouteIdentity,
)


@dataclass(frozen=True)
class RoutingBatch:
    """Everything a decision may read: no clock, no I/O."""

    instance: Instance
    routes: tuple[Route, ...]
    """Every routing table of the instance, expired routes included (R6 filters them)."""
    messages: tuple[Message, ...]
    now: datetime
    mirrors: Mapping[str, MirrorRole] = field(default_factory=dict)
    """Mirror partner roles keyed by `normalize_address` (MI2, MI3)."""
    pending_requests: frozenset[tuple[str, str]] = frozenset()
    """(scope, service) pairs with a MissingRoute request outstanding (B4)."""
    waiting_endpoints: frozenset[Endpoint] = frozenset()
    """Conversation endpoints (`Message.endpoint`) that have a delayed message waiting (D1)."""
    choices: Mapping[ChoiceKey, RouteIdentity] = field(default_factory=dict)
    """The route identity each unpinned conversation chose before (K2), by `Message.choice_key`."""
    rotation: Mapping[str, int] = field(default_factory=dict)
    """C5, M3: the next option each set of equal options gives, by rotation key (`Rotation`)."""


@dataclass(frozen=True)
class BatchResult:
    """One decision per message, in the batch's order, and the MissingRoute requests it made."""

    decisions: tuple[Decision, ...]
    requests: tuple[tuple[str, str], ...] = ()
    """New (scope, service) MissingRoute requests (M4, B3), in the order they were made."""
    choices: Mapping[ChoiceKey, RouteIdentity] = field(default_factory=dict)
    """The choices made in this batch (K2), the last per key: what `RoutingBatch.choices` takes on."""
    rotation: Mapping[str, int] = field(default_factory=dict)
    """The rotation counters the batch advanced, as they are after it (`RoutingBatch.rotation`)."""


class Decider(Protocol):
    """An engine: the reference engine or the Spark engine."""

    def decide(self, batch: RoutingBatch) -> BatchResult:
        """Decide every message of `batch`."""
        ...
