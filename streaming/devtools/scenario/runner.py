"""Playing a scenario's timeline with any `Decider`, with the memory kept between batches."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from streaming.devtools.scenario.model import (
    AckEvent,
    AdvanceEvent,
    Event,
    MessageEvent,
    MirrorEvent,
    RouteEvent,
    RouteTable,
    Scenario,
    apply_route_operation,
)
from streaming.errors import RouterError
from streaming.rules.batch import Decider, RoutingBatch
from streaming.rules.memory import Conversation, Held, Requests
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    CURRENT_DATABASE,
    MISSING_ROUTE_MESSAGE_TYPE,
    Decision,
    Endpoint,
    Message,
    MirrorRole,
    Outcome,
)
from streaming.tables.operations import route_key

MISSING_ROUTE_ID_PREFIX = "missing-route-"
"""Ids of the MissingRoute request messages the runner makes: missing-route-1, missing-route-2, ..."""


class ScenarioRunner:
    """Play a scenario's timeline with any `Decider` and return its decisions in decision order."""

    def __init__(self, decider: Decider) -> None:
        self._decider = decider

    def run(self, scenario: Scenario) -> list[Decision]:
        """Return every decision of the scenario, each with `at` set to the clock it was taken at."""
        return _Timeline(scenario, self._decider).play()


class _Timeline:
    """The state of one scenario run (see `streaming.devtools.scenario`).

    The router's memory (K2 kept choices, D1-D2 held messages, B4 pending requests) is kept with
    `streaming.rules.memory`, the rules the streaming job's state processor follows too; the pins
    (A2) are the endpoints' state, applied to each message before it is decided.
    """

    def __init__(self, scenario: Scenario, decider: Decider) -> None:
        self.scenario = scenario
        self.decider = decider
        self.clock = scenario.clock
        self.table: RouteTable = {
            route_key(scenario.instance.name, r.scope, r.name): r for r in scenario.routes
        }
        self.mirrors: dict[str, MirrorRole] = dict(scenario.mirrors)
        self.pins: dict[str, str] = {}
        self.memory: dict[Endpoint, Conversation[Message]] = {}
        self.requests = Requests()
        self.first_delayed: dict[str, int] = {}
        self.used_ids = set(scenario.message_ids())
        self.request_count = 0
        self.rotation: dict[str, int] = {}
        """C5, M3: the rotation counters, carried from batch to batch as the job carries them."""
        self.decisions: list[Decision] = []

    @property
    def now_ms(self) -> int:
        return int(self.clock.timestamp() * 1000)

    @property
    def retry_ms(self) -> int:
        return int(self.scenario.instance.retry_s * 1000)

    def play(self) -> list[Decision]:
        """Consecutive message events form one batch at the current clock; other events apply in order."""
        arriving: list[Message] = []
        for event in self.scenario.events:
            if isinstance(event, MessageEvent):
                arriving.append(event.message)
                continue
            self.route_batch(arriving)
            arriving = []
            self.apply(event)
        self.route_batch(arriving)
        return self.decisions

    def apply(self, event: Event) -> None:
        """Apply one non-message event at the current clock."""
        if isinstance(event, AdvanceEvent):
            self.clock += timedelta(seconds=event.seconds)
            self.retry_due()
        elif isinstance(event, RouteEvent):
            self.table, route = apply_route_operation(self.table, event.operation)
            if route is not None and route.service is not None:
                self.end_request(route.scope, route.service)
        elif isinstance(event, AckEvent):
            self.pins[event.conversation_id] = event.broker_instance
        elif isinstance(event, MirrorEvent):
            self.mirrors[event.address] = event.role

    def end_request(self, scope: str, service: str) -> None:
        """B6, B7: the BCN answers a MissingRoute request by creating a route and ending its dialog.

        A scenario has no event for the BCN's END CONVERSATION, so a route created or altered in the
        request's scope that names the service ends the pending request. The waiting messages are
        re-routed at their next retry (D2, D3: the retry is not immediate); should they find no
        route then, M4 asks the BCN again (B7), as it does when the created route has expired (B8).
        A request that is never answered stays pending, and no other is made for the service (B5).
        """
        if (scope, service) in self.requests.pending:
            self.requests = self.requests.record((scope, service), False, self.now_ms)

    def retry_due(self) -> None:
        """D2: re-route, once and in first-delayed order, every waiting conversation now due.

        A conversation endpoint is delayed as a whole (D1): it is due when its first waiting message
        is, and then all its waiting messages are re-routed in their original order in one batch.
        """
        retried: list[Held[Message]] = []
        for endpoint, memory in list(self.memory.items()):
            self.memory[endpoint], released = memory.release_due(self.now_ms, self.retry_ms)
            retried.extend(released)
        self.route_batch([h.message for h in sorted(retried, key=lambda h: h.order)])

    def route_batch(self, messages: list[Message]) -> None:
        """Decide one batch, hold what is delayed, then route the MissingRoute requests it made."""
        if not messages:
            return
        batch = RoutingBatch(
            instance=self.scenario.instance,
            routes=tuple(self.table.values()),
            messages=tuple(self.with_endpoint_state(m) for m in messages),
            now=self.clock,
            mirrors=dict(self.mirrors),
            pending_requests=self.requests.pending,
            waiting_endpoints=frozenset(e for e, m in self.memory.items() if m.held),
            choices={
                (conversation, *entry): kept.identity
                for (conversation, _), memory in self.memory.items()
                for entry, kept in memory.kept.items()
            },
            rotation=dict(self.rotation),
        )
        result = self.decider.decide(batch)
        self.rotation.update(result.rotation)
        got = [d.id for d in result.decisions]
        if got != [m.id for m in messages]:
            raise RouterError(f"the decider answered {got} for the messages {[m.id for m in messages]}")
        for message, decision in zip(messages, result.decisions, strict=True):
            self.decisions.append(replace(decision, at=self.clock))
            if decision.outcome is Outcome.DELAYED:
                order = self.first_delayed.setdefault(message.id, len(self.first_delayed))
                memory = self.memory.get(message.endpoint, Conversation())
                entry = (message.origin, message.service)
                self.memory[message.endpoint] = memory.hold(message, message.id, order, self.now_ms, entry)
        for (conversation, origin, service), identity in result.choices.items():
            # K2: only an initiator's messages remember a choice (`Message.remembers_choice`).
            initiator: Endpoint = (conversation, False)
            memory = self.memory.get(initiator, Conversation())
            self.memory[initiator] = memory.remember((origin, service), identity, self.now_ms)
        for request in result.requests:
            self.requests = self.requests.record(request, True, self.now_ms)
        self.route_batch([self.missing_route_request(scope) for scope, _ in result.requests])

    def with_endpoint_state(self, message: Message) -> Message:
        """Apply the endpoint's conversation state to a locally originated message (K1, A2).

        A2: once acknowledged, the initiator routes every later message of the conversation with the
        broker instance the ack carried (a reply, `from_target`, is the other endpoint: not pinned).
        K3: the pin is per conversation; other conversations of its group are not pinned.
        K1: `CURRENT DATABASE` is the origin database's own broker instance.
        """
        if message.is_remote:
            return message
        broker = message.broker_instance
        if not message.from_target and message.conversation_id in self.pins:
            broker = self.pins[message.conversation_id]
        elif broker == CURRENT_DATABASE:
            origin = self.scenario.instance.database(message.origin)
            broker = origin.broker_instance if origin is not None else None
        return replace(message, broker_instance=broker)

    def missing_route_request(self, scope: str) -> Message:
        """B3: SSB begins a dialog to the BCN service in `scope` and sends one MissingRoute message.

        It is routed like any message sent by that database (its own decision line, id
        `missing-route-N`, never an id the scenario uses).
        """
        while True:
            self.request_count += 1
            request_id = f"{MISSING_ROUTE_ID_PREFIX}{self.request_count}"
            if request_id not in self.used_ids:
                break
        self.used_ids.add(request_id)
        return Message(
            id=request_id,
            conversation_id=request_id,
            service=BROKER_CONFIGURATION_SERVICE,
            origin=scope,
            message_type=MISSING_ROUTE_MESSAGE_TYPE,
        )
