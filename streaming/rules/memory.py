"""The router's memory between batches (K2, D1, D2, B4), as pure functions over frozen values.

Kept choices (K2), delayed conversations (D1, D2) and pending requests (B4) outlive a batch.

Everything else the router decides is a function of one message, the route snapshot and the
catalog. Three rules look back further, and this module is their one description:

* K2: an unpinned conversation keeps the route chosen for its first message. What a decision
  chose is remembered per conversation and *entry* (origin database, target service); a later
  message of the entry is given that choice, which it keeps while it is still a candidate. A
  choice is remembered `keep` after it was made; a conversation still unpinned then chooses again.
* D1, D2: a conversation, not a message, is delayed: one endpoint of it, the side that sent (a
  conversation has two endpoints, and each keeps its own order). Its delayed messages are held, in
  the order they were delayed; while any is held, the endpoint's new messages are told so and wait
  behind them. When the first held message is `retry` old, all of them leave together, in order,
  ahead of the conversation's new messages, and are routed again against the routes of that moment.
  A message is held once: a second copy of a held message (the same message id, written to the
  delayed topic twice when a batch that delayed it was run again after a crash) is the same
  message, and of the copies the one delayed first (the lowest order) is kept.
* B4: one MissingRoute request at a time per (scope, service). A request is outstanding from the
  record that asks until a record that ends it (B6, B7); of two records, the later one counts.

Times are whole milliseconds since the epoch (Kafka's timestamps), durations milliseconds.

The scenario timeline (`streaming.devtools.scenario`) keeps its memory with these functions. The streaming
job's state processor (`jvm/state`, `router.state.ConversationMemory`) is a Java rendering of
`Conversation.step`, tested against it on generated event sequences
(`tests/integration/test_conversation_memory.py`); the job keeps the pending requests with
`Requests` on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from streaming.rules.model import RouteIdentity

M = TypeVar("M")

Entry = tuple[str, str]
"""(origin database, target service): one sending endpoint's direction in a conversation (K2)."""


@dataclass(frozen=True)
class Kept:
    """K2: the C0 identity a conversation chose for an entry, and when."""

    identity: RouteIdentity
    chosen_at: int


@dataclass(frozen=True)
class Held(Generic[M]):
    """D1: a delayed message held for its conversation, with the identity its entry kept then."""

    message: M
    message_id: str
    """D1: a message is held once; copies of it share this id."""
    order: int
    """Where it stands among the conversation's held messages: the order they were delayed in."""
    delayed_at: int
    entry: Entry
    kept: RouteIdentity | None = None
    """K2: the identity its entry kept when it was delayed; it is decided with it when released."""


@dataclass(frozen=True)
class Given(Generic[M]):
    """What the memory tells a new message of a step (see `Conversation.step`)."""

    message: M
    kept: RouteIdentity | None
    """K2: the identity its conversation kept for the message's entry, if any."""
    waiting: bool
    """D1: messages of its conversation are held: it waits behind them."""
    first_of_entry: bool
    """It is the first message of its entry to leave in the step (released or new): the one whose
    choice is worth recording."""


@dataclass(frozen=True)
class Step(Generic[M]):
    """The result of one step: the conversation's memory after it, and what left it."""

    conversation: Conversation[M]
    released: tuple[Given[M], ...]
    """D2: the held messages that fell due, in order, each with the identity held with it; they
    go ahead of the new ones."""
    given: tuple[Given[M], ...]
    """The new messages, in their order, each with what the memory tells it."""
    next_at: int | None
    """When the memory must be looked at again even if nothing arrives (a choice to forget, a
    conversation falling due), or None."""


@dataclass(frozen=True)
class Conversation(Generic[M]):
    """What the router remembers of one conversation endpoint (`Message.endpoint`; K2, D1)."""

    kept: Mapping[Entry, Kept] = field(default_factory=dict)
    held: tuple[Held[M], ...] = ()

    @property
    def is_empty(self) -> bool:
        """Nothing is remembered: the conversation's memory can be dropped."""
        return not self.kept and not self.held

    def remember(self, entry: Entry, identity: RouteIdentity, at: int) -> Conversation[M]:
        """K2: a decision chose `identity` for `entry` at `at`; an older record read late changes nothing.

        Of two choices made at the same instant, the one remembered last counts.
        """
        before = self.kept.get(entry)
        if before is not None and before.chosen_at > at:
            return self
        return replace(self, kept={**self.kept, entry: Kept(identity, at)})

    def hold(
        self,
        message: M,
        message_id: str,
        order: int,
        at: int,
        entry: Entry,
        kept: RouteIdentity | None = None,
    ) -> Conversation[M]:
        """D1: `message` of `entry` was delayed at `at`; it is held with the others, by `order`.

        A message is held once: of two copies with one `message_id`, the lower order stays.
        """
        copy = next((h for h in self.held if h.message_id == message_id), None)
        if copy is not None and copy.order <= order:
            return self
        others = (h for h in self.held if h is not copy)
        held = sorted((*others, Held(message, message_id, order, at, entry, kept)), key=lambda h: h.order)
        return replace(self, held=tuple(held))

    def due_at(self, retry: int) -> int | None:
        """D2: when the held messages leave: `retry` after the first of them was delayed."""
        if not self.held:
            return None
        return min(h.delayed_at for h in self.held) + retry

    def forget_expired(self, now: int, keep: int) -> Conversation[M]:
        """K2: a choice is remembered `keep` after it was made, then forgotten."""
        kept = {e: k for e, k in self.kept.items() if k.chosen_at + keep > now}
        return self if len(kept) == len(self.kept) else replace(self, kept=kept)

    def release_due(self, now: int, retry: int) -> tuple[Conversation[M], tuple[Held[M], ...]]:
        """D2: when the conversation is due, every held message leaves, in order."""
        due = self.due_at(retry)
        if due is None or due > now:
            return self, ()
        return replace(self, held=()), self.held

    def next_at(self, keep: int, retry: int) -> int | None:
        """The earliest instant something is forgotten or falls due, or None."""
        instants = [k.chosen_at + keep for k in self.kept.values()]
        due = self.due_at(retry)
        if due is not None:
            instants.append(due)
        return min(instants) if instants else None

    def step(
        self,
        now: int,
        keep: int,
        retry: int,
        *,
        choices: Iterable[tuple[Entry, RouteIdentity, int, int]] = (),
        delayed: Iterable[tuple[M, str, int, int, Entry, RouteIdentity | None]] = (),
        messages: Sequence[tuple[M, int, Entry]] = (),
    ) -> Step[M]:
        """One batch's worth for this conversation, in the order the rules need.

        `choices` (entry, identity, chosen at, order) and `delayed` (message, message id, order,
        delayed at, entry, kept identity) are what earlier batches decided, read back; `messages` (message,
        order, entry) are the conversation's new messages. First the choices are remembered, by
        time then order (the order they were recorded in), and the delayed messages held; then
        expired choices are forgotten (K2); then, if the conversation is due, its held messages
        leave (D2); then each new message, by order, is given its entry's kept choice and whether
        messages are still held (D1).
        """
        memory = self
        for entry, identity, at, _ in sorted(choices, key=lambda c: (c[2], c[3])):
            memory = memory.remember(entry, identity, at)
        for message, message_id, order, at, entry, held_with in delayed:
            memory = memory.hold(message, message_id, order, at, entry, held_with)
        memory = memory.forget_expired(now, keep)
        memory, due = memory.release_due(now, retry)
        seen: set[Entry] = set()

        def first(entry: Entry) -> bool:
            new = entry not in seen
            seen.add(entry)
            return new

        released = tuple(Given(h.message, h.kept, False, first(h.entry)) for h in due)
        given = []
        for message, _, entry in sorted(messages, key=lambda m: m[1]):
            kept = memory.kept.get(entry)
            given.append(Given(message, kept.identity if kept else None, bool(memory.held), first(entry)))
        return Step(memory, released, tuple(given), memory.next_at(keep, retry))


Request = tuple[str, str]
"""(scope, service): the table that asked and the service it asked for (B4)."""


@dataclass(frozen=True)
class Requests:
    """B4: the MissingRoute requests outstanding, each with the time of the record that counts."""

    records: Mapping[Request, tuple[bool, int]] = field(default_factory=dict)

    @property
    def pending(self) -> frozenset[Request]:
        """The requests that are outstanding."""
        return frozenset(r for r, (asked, _) in self.records.items() if asked)

    def record(self, request: Request, asked: bool, at: int) -> Requests:
        """A request was made (`asked`) or ended at `at`; a record older than the one held is ignored."""
        before = self.records.get(request)
        if before is not None and before[1] > at:
            return self
        return Requests({**self.records, request: (asked, at)})

    def answered(self, routes_by_scope: Mapping[str, Iterable[str | None]]) -> frozenset[Request]:
        """B6, B7: the outstanding requests a route now answers: one naming the service in the scope."""
        return frozenset(
            (scope, service)
            for scope, service in self.pending
            if service in set(routes_by_scope.get(scope, ()))
        )
