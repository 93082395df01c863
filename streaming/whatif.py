"""`router whatif`'s pure parts: the window, the tables a route file would leave, the change report.

A what-if decides the messages an instance received in a window twice, under its live tables and
under the tables route files would leave, with the job's engine (`streaming.spark.whatif`), and
reports what would change. Here is what needs no Spark and no Kafka:

* the window: the last `--since` of each topic partition (by the brokers' offsets for times), or
  the last `--max` records shared among the partitions (`last_records`);
* the planned tables: the files loaded and validated as `router routes load` loads them
  (`route_operations`), applied to the live tables and checked as it checks them before it
  publishes, and published nowhere (`streaming.tables.plan.planned_tables`, as `routes diff`);
* the kept choices (K2) a change leaves without their route (`removed_identities`);
* the report: counts by (from destination, outcome) -> (to destination, outcome), the services
  that would start to be delayed, and the changes by service (`WhatIf`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from streaming.contract import Outcome
from streaming.errors import ConfigError
from streaming.rules.model import Route, normalize_address
from streaming.rules.scoping import MSDB
from streaming.tables.loading import load_route_files
from streaming.tables.operations import (
    RouteOperation,
    split_route_key,
)

# --- the window ---------------------------------------------------------------------------------

Partition = tuple[str, int]
"""A topic partition: (topic, partition)."""


def check_window(since: str | None, last: int | None) -> None:
    """Refuse `--since` with `--max`, and a `--max` below 1 (ConfigError naming the flag)."""
    if since is not None and last is not None:
        raise ConfigError("expected --since or --max, got both: give one (the window is a span or a count)")
    if last is not None and last < 1:
        raise ConfigError(f"--max: expected a number of records of at least 1, got {last}")


def since_ranges(
    marks: Mapping[Partition, tuple[int, int]], firsts: Mapping[Partition, int]
) -> dict[Partition, tuple[int, int]]:
    """Each partition's (start, end) offsets from its first record at or after the window's start.

    `marks` holds each partition's (first kept, end) offsets, `firsts` the brokers' answer for the
    window's first instant (-1 when no record is that late: the partition gives none).
    """
    ranges = {}
    for tp, (low, high) in marks.items():
        first = firsts.get(tp, -1)
        ranges[tp] = (high, high) if first < 0 else (max(first, low), high)
    return ranges


def last_records(marks: Mapping[Partition, tuple[int, int]], count: int) -> dict[Partition, tuple[int, int]]:
    """The last `count` records, shared equally among the partitions: each partition's (start, end).

    A partition that holds fewer than its share gives all it has, and the rest is shared among the
    others, so the ranges hold `count` records, or every record when there are fewer.
    """
    held = {tp: max(high - low, 0) for tp, (low, high) in marks.items()}
    taken = dict.fromkeys(marks, 0)
    left = count
    open_ = sorted(tp for tp, n in held.items() if n > 0)
    while left > 0 and open_:
        share = max(left // len(open_), 1)
        for tp in list(open_):
            given = min(share, held[tp] - taken[tp], left)
            taken[tp] += given
            left -= given
            if taken[tp] == held[tp]:
                open_.remove(tp)
            if left == 0:
                break
    return {tp: (high - taken[tp], high) for tp, (_, high) in marks.items()}


def records_in(ranges: Mapping[Partition, tuple[int, int]]) -> int:
    """How many records the ranges hold."""
    return sum(max(end - start, 0) for start, end in ranges.values())


# --- the tables the files would leave -------------------------------------------------------------


def route_operations(
    paths: Iterable[Path], *, now: datetime, instance: str, default_scope: str | None = None
) -> list[RouteOperation]:
    """The operations of every route file, validated as `router routes load` validates them.

    A route whose file names no instance is in `instance`'s tables, and a route a file puts in
    another instance's stays there: a file may hold several instances' tables (the what-if decides
    one instance's messages, with its own tables).
    """
    return load_route_files(paths, now=now, default_scope=default_scope, default_instance=instance)


def instance_routes(table: Mapping[str, Route], instance: str) -> list[Route]:
    """The routes of one instance's tables, from tables keyed `instance/scope/name`."""
    return [route for key, route in sorted(table.items()) if split_route_key(key)[0] == instance]


Identity = tuple[str, str, str, str]
"""A kept choice's route as the report compares it: (scope, broker instance or "", service or "",
normalized address); the last three are C0's identity (K2 keeps it)."""


def identity_of(scope: str, bid: str | None, service: str | None, address: str) -> Identity:
    """The comparable identity of a route, or of a kept choice in the table `scope`."""
    return (scope, bid or "", service or "", normalize_address(address))


def choice_scope(origin: str) -> str:
    """The table a kept choice was made in: its origin database's, or msdb's for a remote one (S3)."""
    return MSDB if origin == "remote" else origin


def removed_identities(live: Iterable[Route], planned: Iterable[Route], now: datetime) -> set[Identity]:
    """The route identities the live tables hold at `now` (R6) and the planned ones no longer do.

    A conversation that kept one of these (K2) chooses again at its next message.
    """

    def held(routes: Iterable[Route]) -> set[Identity]:
        return {
            identity_of(r.scope, r.broker_instance, r.service, r.address) for r in routes if r.is_active(now)
        }

    return held(live) - held(planned)


# --- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fate:
    """Where a message goes and with which outcome (and reason) under one set of tables."""

    topic: str
    outcome: str
    reason: str = ""

    @property
    def outcome_text(self) -> str:
        """The outcome as the router prints it: `delayed (no_route)`, or `deliver`."""
        return f"{self.outcome} ({self.reason})" if self.reason else self.outcome

    @property
    def delayed(self) -> bool:
        """Whether the message is delayed (D1, D2)."""
        return self.outcome == Outcome.DELAYED.value


@dataclass(frozen=True)
class Group:
    """The messages of one service with one fate under the live tables and one under the planned."""

    service: str
    live: Fate
    planned: Fate
    messages: int
    examples: tuple[str, ...] = ()
    """A few of their message ids."""

    @property
    def changed(self) -> bool:
        """Whether the planned tables send them elsewhere, or with another outcome or reason."""
        return self.live != self.planned


@dataclass(frozen=True)
class Change:
    """A row of the change table: (from destination, outcome) -> (to destination, outcome)."""

    live: Fate
    planned: Fate
    messages: int
    examples: tuple[str, ...]


@dataclass(frozen=True)
class KeptChoice:
    """Conversations whose kept choice (K2) names a route the planned tables no longer hold."""

    scope: str
    address: str
    service: str
    bid: str
    conversations: int
    examples: tuple[str, ...]
    """A few of their conversation ids."""


EXAMPLES = 3
"""Example ids shown per row."""


@dataclass(frozen=True)
class WhatIf:
    """What a what-if found: every group of messages read, the kept choices a change leaves behind."""

    instance: str
    groups: tuple[Group, ...]
    kept: tuple[KeptChoice, ...] = ()
    undecodable: int = 0
    """Records of the window that do not decode (the router dead-letters them, whatever its tables)."""
    delayed_conversations: Mapping[str, int] = field(default_factory=dict)
    """By service: the conversations with a message that would start to be delayed."""

    @property
    def decided(self) -> int:
        """Messages decided (twice)."""
        return sum(g.messages for g in self.groups)

    @property
    def changed(self) -> int:
        """Messages whose destination, outcome or reason would change."""
        return sum(g.messages for g in self.groups if g.changed)

    def changes(self) -> list[Change]:
        """The change table: changed messages by (live fate, planned fate), most first."""
        counts: dict[tuple[Fate, Fate], int] = defaultdict(int)
        examples: dict[tuple[Fate, Fate], list[str]] = defaultdict(list)
        for g in self.groups:
            if not g.changed:
                continue
            key = (g.live, g.planned)
            counts[key] += g.messages
            examples[key].extend(g.examples)
        rows = [
            Change(live, planned, n, tuple(sorted(examples[(live, planned)])[:EXAMPLES]))
            for (live, planned), n in counts.items()
        ]
        return sorted(rows, key=lambda c: (-c.messages, c.live.topic, c.planned.topic, c.live.outcome_text))

    def newly_delayed(self) -> dict[str, int]:
        """By service: the messages the planned tables would delay that the live ones do not."""
        out: dict[str, int] = defaultdict(int)
        for g in self.groups:
            if g.planned.delayed and not g.live.delayed:
                out[g.service] += g.messages
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def by_service(self) -> dict[str, tuple[int, int]]:
        """By service: (messages decided, messages that would change), for the chart."""
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for g in self.groups:
            out[g.service][0] += g.messages
            if g.changed:
                out[g.service][1] += g.messages
        return {s: (n, c) for s, (n, c) in sorted(out.items())}

    def to_json(self) -> dict[str, object]:
        """The report as one JSON document (`--json`)."""
        return {
            "instance": self.instance,
            "decided": self.decided,
            "changed": self.changed,
            "undecodable": self.undecodable,
            "changes": [
                {
                    "from": {
                        "topic": c.live.topic,
                        "outcome": c.live.outcome,
                        "reason": c.live.reason or None,
                    },
                    "to": {
                        "topic": c.planned.topic,
                        "outcome": c.planned.outcome,
                        "reason": c.planned.reason or None,
                    },
                    "messages": c.messages,
                    "examples": list(c.examples),
                }
                for c in self.changes()
            ],
            "kept_choices_removed": [
                {
                    "scope": k.scope,
                    "address": k.address,
                    "service": k.service or None,
                    "broker_instance": k.bid or None,
                    "conversations": k.conversations,
                    "examples": list(k.examples),
                }
                for k in self.kept
            ],
            "newly_delayed": [
                {
                    "service": service,
                    "messages": n,
                    "conversations": self.delayed_conversations.get(service, 0),
                }
                for service, n in self.newly_delayed().items()
            ],
        }
