"""How each instance's router stands, from Kafka alone: what `router status` shows.

Everything comes from the topics and the consumer group the router writes, never from its
checkpoint or a Spark session:

* **Progress and input lag.** After each micro-batch the router writes the offsets it has read up
  to into the instance's consumer group (`streaming.topics.router_group`), with the batch's id and
  time as metadata (`streaming.kafka.progress_group`). The lag of a partition is its end offset
  now minus the committed one; a partition the group holds no offset for counts whole (from its
  first offset still kept). The outbound and inbound topics are what the instance's services and
  the other instances wait on; the delayed topic's lag is shown apart (the router reads its own
  delayed messages back, D2).
* **Delayed messages not yet released** (D1, D2). A delayed record carries `due_at` and
  `decided_at` (`streaming.contract.MESSAGE_HEADERS`); one whose `due_at` is later than the
  router's last batch has not been routed again. Only a window of the delayed topic is read: a
  record due after the last batch was decided at most `retry_s` before it, and the topic's
  timestamps are when each record was appended (LogAppendTime), so the read starts at the last
  batch less `retry_s` and a margin for the clocks (`DELAY_MARGIN_S`). When the router never ran,
  every delayed record is pending, and the whole topic is read.
* **Dead letters and dropped messages** of the last `--since` (by default an hour), by reason: the
  dead-letter topic's `error` header in a short form (`error_kind`), the dropped topic's `reason`
  and `outcome` (dropped or discarded), and for `destination_unavailable` the `destination`.
  Each read starts at the offset of the window's first instant (Kafka's offsets for times).
* **The tables it would load.** The routes and catalogs topics, read with the one table reader
  (`streaming.tables.reader`): each instance's routes by scope (a database, or msdb), the expired
  ones (R6), and when its routes last changed: the timestamp of the newest record among its current
  routes (the reader keeps no tombstones, so a DROP ROUTE alone does not show there); the catalog's
  databases and services. Skipped records are counted as warnings.
* **Destinations with no topic yet.** The topics the instance's current routes can send to
  (`streaming.topology.reachable_topics`) that the cluster does not hold: the router
  creates them when its snapshot changes, so one missing means the router has not run since the
  route appeared, or the broker refused the topic (the messages for it are then dropped with
  `destination_unavailable`).

The summaries are pure functions of what was read (records with their headers in, a frozen
`InstanceStatus` out), unit-tested without Kafka; `collect_status` is the thin part that reads.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streaming import topics
from streaming.contract import Reason
from streaming.errors import KafkaUnavailable, RouterError
from streaming.instants import format_age, format_instant, format_span, parse_instant
from streaming.kafka.admin import cluster_metadata
from streaming.kafka.connection import Kafka, bootstrap_of
from streaming.kafka.consuming import take_arrived
from streaming.kafka.progress_group import Committed, read_committed
from streaming.rules.model import Instance, Route, normalize_address
from streaming.tables.operations import split_route_key
from streaming.tables.reader import (
    RouteTableReader,
    SkippedRecord,
    consumer,
    databases_by_instance,
    read_catalog_table,
)
from streaming.text import format_table
from streaming.topology import Topology, reachable_topics

DELAY_MARGIN_S = 60.0
"""How much earlier than (last batch - retry_s) the delayed topic is read: room for the clocks of the
router's host and the broker (a record's timestamp is the broker's, its `decided_at` the router's)."""
READ_TIMEOUT_S = 30.0
"""How long reading one window of one topic may take before the broker counts as not answering."""
DEFAULT_SINCE = "1h"
_KIND_CHARS = 60
"""The longest short form of a dead letter's error."""

# --- what was read -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeaderRecord:
    """A record as the summaries see it: where it is, its timestamp, key and headers (not its value)."""

    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    headers: Mapping[str, str]
    """Each header's last value, as text (invalid UTF-8 replaced)."""


@dataclass(frozen=True)
class Watermarks:
    """A partition's first offset still kept and its end offset (the next record's)."""

    low: int
    high: int


# --- the figures -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLag:
    """One partition: its end offset, the router's committed offset (None: none), and the lag."""

    partition: int
    end: int
    committed: int | None
    lag: int


@dataclass(frozen=True)
class TopicLag:
    """The lag of one input topic of the router (`exists` False: the topic is not there yet)."""

    topic: str
    exists: bool
    partitions: tuple[PartitionLag, ...] = ()

    @property
    def total(self) -> int:
        """The records of every partition the router has not read yet."""
        return sum(p.lag for p in self.partitions)


@dataclass(frozen=True)
class Progress:
    """What the router's consumer group says: whether it ran, and its last batch."""

    group: str
    ran: bool
    """Whether the group holds any committed offset."""
    batch: int | None = None
    batch_at: datetime | None = None


@dataclass(frozen=True)
class DelayedFigures:
    """Delayed messages whose `due_at` is after the router's last batch (D2): not yet routed again."""

    pending: int
    conversations: int
    oldest_due_at: datetime | None
    oldest_decided_at: datetime | None
    records_read: int
    """How many records of the delayed topic the window held."""
    window_from: datetime | None
    """Where the read started (None: the topic's beginning, the router never ran)."""
    unreadable: int = 0
    """Records of the window without a `due_at` that reads as an instant."""


@dataclass(frozen=True)
class CountedRecords:
    """Records of a window counted by a label (sorted: most first, then by label)."""

    total: int
    by: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class DroppedFigures:
    """The dropped topic's records in the window: by reason, by outcome, and the destinations refused."""

    total: int
    by_reason: tuple[tuple[str, int], ...] = ()
    by_outcome: tuple[tuple[str, int], ...] = ()
    unavailable: tuple[tuple[str, int], ...] = ()
    """Messages dropped with `destination_unavailable`, by the destination the broker refused."""


@dataclass(frozen=True)
class RouteFigures:
    """An instance's routing tables as the router would load them."""

    total: int
    by_scope: tuple[tuple[str, int], ...]
    expired: int
    """Routes whose lifetime has ended (R6): kept in the table, matched by nothing."""
    changed_at: datetime | None
    """The newest record timestamp among the current routes (None: no route)."""
    skipped: int = 0
    """Records of the instance's tables the reader left out (invalid, or not in its catalog)."""


@dataclass(frozen=True)
class InstanceStatus:
    """Everything `router status` reports about one instance."""

    catalog: Instance
    progress: Progress
    outbound: TopicLag
    inbound: TopicLag
    delayed_lag: TopicLag
    delayed: DelayedFigures
    dead_letters: CountedRecords
    dropped: DroppedFigures
    routes: RouteFigures
    missing_topics: tuple[str, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        """The instance's name."""
        return self.catalog.name


# --- pure summaries ----------------------------------------------------------------------------------


def instant_of_ms(ms: int | None) -> datetime | None:
    """The UTC instant of epoch milliseconds."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc)


def ms_of(instant: datetime) -> int:
    """Epoch milliseconds of an instant."""
    return round(instant.timestamp() * 1000)


def progress_of(committed: Committed) -> Progress:
    """The router's progress as its group holds it."""
    return Progress(committed.group, bool(committed.offsets), committed.batch, instant_of_ms(committed.at_ms))


def topic_lag(
    topic: str, marks: Mapping[int, Watermarks] | None, committed: Mapping[tuple[str, int], int]
) -> TopicLag:
    """The lag of each partition of `topic` (`marks` None: the topic does not exist).

    Lag = end offset - committed offset. A partition the group holds no offset for counts from its
    first record still kept, and so does one whose committed offset retention has passed.
    """
    if marks is None:
        return TopicLag(topic, False)
    parts = []
    for partition, mark in sorted(marks.items()):
        done = committed.get((topic, partition))
        start = mark.low if done is None else max(done, mark.low)
        parts.append(PartitionLag(partition, mark.high, done, max(mark.high - start, 0)))
    return TopicLag(topic, True, tuple(parts))


def delayed_window_start_ms(
    progress: Progress, retry_s: float, margin_s: float = DELAY_MARGIN_S
) -> int | None:
    """The first append time of the delayed topic that can hold a message not yet released (D2).

    A message due after the last batch was decided less than `retry_s` before that batch, and
    appended after it was decided; `margin_s` allows for the two clocks. None: read the whole topic
    (the router never ran, or its group holds no batch time).
    """
    if not progress.ran or progress.batch_at is None:
        return None
    return ms_of(progress.batch_at) - int((retry_s + margin_s) * 1000)


def stamped_since(records: Iterable[HeaderRecord], at_ms: int | None) -> list[HeaderRecord]:
    """The records stamped at or after `at_ms` (None: every one); a record without a timestamp is kept."""
    if at_ms is None:
        return list(records)
    return [r for r in records if r.timestamp_ms is None or r.timestamp_ms >= at_ms]


def _sorteddict(counter: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counter.items(), key=lambda item: (-item[1], item[0])))


def summarise_delayed(
    records: Iterable[HeaderRecord], last_batch: datetime | None, window_from: datetime | None
) -> DelayedFigures:
    """The delayed records not yet released: `due_at` later than `last_batch` (None: every one, D2).

    Conversations are told apart by the record key (the conversation id).
    """
    pending = read = unreadable = 0
    conversations: set[bytes | None] = set()
    oldest_due: datetime | None = None
    oldest_decided: datetime | None = None
    for record in records:
        read += 1
        due = parse_instant(record.headers.get("due_at"))
        if due is None:
            unreadable += 1
            continue
        if last_batch is not None and due <= last_batch:
            continue
        pending += 1
        conversations.add(record.key)
        oldest_due = due if oldest_due is None else min(oldest_due, due)
        decided = parse_instant(record.headers.get("decided_at"))
        if decided is not None:
            oldest_decided = decided if oldest_decided is None else min(oldest_decided, decided)
    return DelayedFigures(
        pending, len(conversations), oldest_due, oldest_decided, read, window_from, unreadable
    )


def error_kind(error: str | None) -> str:
    """A dead letter's error in a short form that groups alike ones.

    Its text before the first `:` or ` (`, numbers as `N`, at most `_KIND_CHARS` characters.
    """
    if not error:
        return "no error header"
    head = re.split(r":| \(", error, maxsplit=1)[0].strip()
    head = re.sub(r"\b\d+\b", "N", head) or "no error header"
    return head if len(head) <= _KIND_CHARS else head[: _KIND_CHARS - 3] + "..."


def summarise_dead_letters(records: Iterable[HeaderRecord]) -> CountedRecords:
    """The dead letters of a window by the short form of their error (`error_kind`)."""
    kinds = Counter(error_kind(record.headers.get("error")) for record in records)
    return CountedRecords(sum(kinds.values()), _sorteddict(kinds))


def summarise_dropped(records: Iterable[HeaderRecord]) -> DroppedFigures:
    """The dropped and discarded messages of a window by reason and by outcome; the refused destinations."""
    reasons: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    unavailable: Counter[str] = Counter()
    for record in records:
        reason = record.headers.get("reason") or "no reason header"
        reasons[reason] += 1
        outcomes[record.headers.get("outcome") or "no outcome header"] += 1
        if reason == Reason.DESTINATION_UNAVAILABLE.value:
            unavailable[record.headers.get("destination") or "no destination header"] += 1
    return DroppedFigures(
        sum(reasons.values()), _sorteddict(reasons), _sorteddict(outcomes), _sorteddict(unavailable)
    )


def summarise_routes(
    routes: Sequence[Route], now: datetime, changed_at: datetime | None, skipped: int = 0
) -> RouteFigures:
    """An instance's routes: how many by scope (its databases by name, then msdb), and the expired (R6)."""
    scopes = Counter(route.scope for route in routes)
    by_scope = tuple(sorted(scopes.items(), key=lambda item: (item[0].lower() == "msdb", item[0])))
    expired = sum(1 for route in routes if not route.is_active(now))
    return RouteFigures(len(routes), by_scope, expired, changed_at, skipped)


def missing_topics(reachable: Iterable[str], existing: Iterable[str]) -> tuple[str, ...]:
    """The destination topics the routes can send to that the cluster does not hold, sorted."""
    held = set(existing)
    return tuple(sorted(name for name in set(reachable) if name not in held))


def route_instance(skipped: SkippedRecord) -> str | None:
    """The instance whose table a skipped routes-topic record was meant for (None: its key names none)."""
    if not isinstance(skipped.key, str):
        return None
    try:
        return split_route_key(skipped.key)[0]
    except ValueError:
        return None


def choose_instances(held: Sequence[str], wanted: Sequence[str] | None, topic: str) -> list[str]:
    """The instances to report: `wanted` in its order (once each), or every one the catalogs hold.

    An instance the catalogs do not hold is a RouterError naming the ones they do.
    """
    if not wanted:
        return sorted(held)
    unknown = [name for name in dict.fromkeys(wanted) if name not in held]
    if unknown:
        found = ", ".join(sorted(held)) if held else "none"
        raise RouterError(
            f"--instance: expected an instance of the catalogs topic {topic} ({found}), got "
            f"{', '.join(map(repr, unknown))}; give one of those, or load its catalog with "
            "`router catalogs load FILE` (and --topic-prefix names where the router's topics are)"
        )
    return list(dict.fromkeys(wanted))


# --- output ------------------------------------------------------------------------------------------


def _lag_json(lag: TopicLag) -> dict[str, Any]:
    return {
        "topic": lag.topic,
        "exists": lag.exists,
        "lag": lag.total if lag.exists else None,
        "partitions": [
            {"partition": p.partition, "end": p.end, "committed": p.committed, "lag": p.lag}
            for p in lag.partitions
        ],
    }


def instance_json(status: InstanceStatus, now: datetime) -> dict[str, Any]:
    """One instance's facts as JSON (the field names are stable)."""
    p, d, r, c = status.progress, status.delayed, status.routes, status.catalog
    return {
        "instance": status.name,
        "router": {
            "group": p.group,
            "ran": p.ran,
            "batch": p.batch,
            "batch_at": format_instant(p.batch_at),
            "batch_age_s": None if p.batch_at is None else round((now - p.batch_at).total_seconds(), 3),
        },
        "lag": {
            "outbound": _lag_json(status.outbound),
            "inbound": _lag_json(status.inbound),
            "delayed": _lag_json(status.delayed_lag),
        },
        "delayed": {
            "pending": d.pending,
            "conversations": d.conversations,
            "oldest_due_at": format_instant(d.oldest_due_at),
            "oldest_decided_at": format_instant(d.oldest_decided_at),
            "records_read": d.records_read,
            "read_from": format_instant(d.window_from),
            "unreadable": d.unreadable,
        },
        "dead_letters": {"count": status.dead_letters.total, "by_error": dict(status.dead_letters.by)},
        "dropped": {
            "count": status.dropped.total,
            "by_reason": dict(status.dropped.by_reason),
            "by_outcome": dict(status.dropped.by_outcome),
            "unavailable_destinations": dict(status.dropped.unavailable),
        },
        "routes": {
            "count": r.total,
            "by_scope": dict(r.by_scope),
            "expired": r.expired,
            "changed_at": format_instant(r.changed_at),
            "skipped": r.skipped,
        },
        "catalog": {
            "address": c.address,
            "forwarding": c.forwarding,
            "retry_s": c.retry_s,
            "databases": [{"name": db.name, "services": list(db.services)} for db in c.databases],
        },
        "missing_topics": list(status.missing_topics),
        "warnings": list(status.warnings),
    }


def status_document(
    statuses: Sequence[InstanceStatus],
    now: datetime,
    since_s: float,
    prefix: str,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole report as one JSON object: `{"instances": [...], "generated_at": ...}`."""
    return {
        "generated_at": format_instant(now),
        "topic_prefix": prefix,
        "since_s": since_s,
        "instances": [instance_json(s, now) for s in statuses],
        "warnings": list(warnings),
    }


def _lag_text(name: str, lag: TopicLag) -> str:
    return f"{name} {lag.total}" if lag.exists else f"{name} (no topic)"


def _listed(pairs: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{label} {count}" for label, count in pairs)


def router_line(status: InstanceStatus, now: datetime) -> str:
    """The head of an instance's screen: its last batch and its routes."""
    p, r = status.progress, status.routes
    if not p.ran:
        router = f"the router has not run (no committed offsets in group {p.group})"
    elif p.batch_at is None:
        router = f"router: offsets in group {p.group} without a batch time (not written by the router)"
    else:
        age = format_age((now - p.batch_at).total_seconds())
        router = f"router: batch {p.batch} at {format_instant(p.batch_at)} ({age} ago)"
    routes = f"routes {r.total}" + (f" ({_listed(r.by_scope)})" if r.by_scope else "")
    if r.expired:
        routes += f", {r.expired} expired"
    if r.changed_at is not None:
        routes += f", changed {format_instant(r.changed_at)}"
    return f"{router}   {routes}"


def instance_rows(status: InstanceStatus, since_s: float) -> list[tuple[str, str]]:
    """The labelled lines under an instance's head."""
    d, dead, dropped = status.delayed, status.dead_letters, status.dropped
    rows = [
        (
            "input lag",
            "   ".join(
                (
                    _lag_text("outbound", status.outbound),
                    _lag_text("inbound", status.inbound),
                    _lag_text("delayed", status.delayed_lag),
                )
            ),
        )
    ]
    if d.pending:
        waiting = (
            f"{d.pending} message{'s' if d.pending != 1 else ''} in {d.conversations} "
            f"conversation{'s' if d.conversations != 1 else ''} not yet released, "
            f"oldest due {format_instant(d.oldest_due_at)}"
        )
        if d.oldest_decided_at is not None:
            waiting += f" (delayed since {format_instant(d.oldest_decided_at)})"
    else:
        waiting = "none waiting"
    rows.append(("delayed", waiting))
    last = f"dead letters {dead.total}" + (f" ({_listed(dead.by)})" if dead.by else "")
    last += f"   dropped {dropped.total}" + (f" ({_listed(dropped.by_reason)})" if dropped.by_reason else "")
    rows.append((f"last {format_span(since_s)}", last))
    # A destination the broker refused has no topic either; its messages were dropped meanwhile.
    refused = dict(dropped.unavailable)
    shown = [*status.missing_topics, *(t for t in refused if t not in status.missing_topics)]
    rows.append(
        (
            "no topic yet",
            ", ".join(
                f"{topic} ({refused[topic]} dropped as destination_unavailable)"
                if topic in refused
                else topic
                for topic in shown
            )
            or "-",
        )
    )
    c = status.catalog
    databases = "; ".join(f"{db.name}: {', '.join(db.services) or '-'}" for db in c.databases)
    forwarding = ", forwarding" if c.forwarding else ""
    rows.append(("catalog", f"{c.address}, retry {c.retry_s:g} s{forwarding}; {databases}"))
    rows.extend(("warning", warning) for warning in status.warnings)
    return rows


def render_text(
    statuses: Sequence[InstanceStatus], now: datetime, since_s: float, warnings: Sequence[str] = ()
) -> str:
    """The screen: per instance its head line, then aligned labelled lines (blank line between)."""
    blocks = []
    for status in statuses:
        rows = [(f"  {label}", text) for label, text in instance_rows(status, since_s)]
        blocks.append(format_table((f"instance {status.name}", router_line(status, now)), rows))
    blocks.extend(f"warning: {warning}" for warning in warnings)
    return "\n\n".join(blocks)


# --- reading (the thin part) -------------------------------------------------------------------------


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def header_record(message: Message) -> HeaderRecord:
    """The parts of a consumed record the summaries read."""
    _, ms = message.timestamp()
    key = message.key()
    raw = message.headers() or []
    pairs = raw.items() if isinstance(raw, Mapping) else raw
    return HeaderRecord(
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        timestamp_ms=ms if ms is not None and ms >= 0 else None,
        key=key.encode() if isinstance(key, str) else key,
        headers={name: _text(value) for name, value in pairs},
    )


class TopicWindows:
    """Reads windows of topics (records with their headers between two offsets) with one consumer."""

    def __init__(self, kafka: Kafka, timeout: float = READ_TIMEOUT_S) -> None:
        self.kafka = kafka
        self.timeout = timeout
        # A throw-away group that never commits: reading here moves no one's offsets.
        self._consumer: Consumer = consumer(kafka, **{"fetch.wait.max.ms": 50})
        # Every topic's metadata at once: a topic the client has not looked up yet costs its first
        # fetch about a second (librdkafka's one-second timer); looked up first, 0.05 s.
        try:
            self._consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            self._consumer.close()
            raise self._failed("reading the cluster's topics", exc) from exc

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()

    def _failed(self, what: str, exc: KafkaException) -> KafkaUnavailable:
        return KafkaUnavailable(f"{what} at {bootstrap_of(self.kafka)}: {exc}")

    def watermarks(self, topic: str, partitions: Iterable[int]) -> dict[int, Watermarks]:
        """Each partition's first kept offset and end offset."""
        marks = {}
        for partition in partitions:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self.timeout
                )
            except KafkaException as exc:
                raise self._failed(f"reading the offsets of {topic}[{partition}]", exc) from exc
            marks[partition] = Watermarks(low, high)
        return marks

    def offsets_at(self, topic: str, marks: Mapping[int, Watermarks], at_ms: int | None) -> dict[int, int]:
        """Each partition's first offset whose timestamp is at or after `at_ms` (None: its first offset)."""
        if at_ms is None:
            return {partition: mark.low for partition, mark in marks.items()}
        asked = [TopicPartition(topic, partition, max(at_ms, 0)) for partition in sorted(marks)]
        try:
            answer = self._consumer.offsets_for_times(asked, timeout=self.timeout)
        except KafkaException as exc:
            raise self._failed(f"reading the offsets of {topic} at {at_ms} ms", exc) from exc
        starts = {}
        for tp in answer:
            if tp.error is not None:
                raise KafkaUnavailable(f"reading the offsets of {topic}[{tp.partition}]: {tp.error.str()}")
            mark = marks[tp.partition]
            # -1: no record at or after that time.
            starts[tp.partition] = mark.high if tp.offset < 0 else max(tp.offset, mark.low)
        return starts

    def read(self, topic: str, starts: Mapping[int, int], ends: Mapping[int, int]) -> list[HeaderRecord]:
        """The records of `topic` from `starts` up to (not including) `ends`, per partition."""
        wanted = {p: (start, ends[p]) for p, start in starts.items() if start < ends[p]}
        if not wanted:
            return []
        self._consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in sorted(wanted.items())])
        pending = set(wanted)
        records: list[HeaderRecord] = []
        deadline = time.monotonic() + self.timeout
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaUnavailable(
                        f"reading {topic} at {bootstrap_of(self.kafka)}: expected partitions "
                        f"{sorted(pending)} up to offsets {ends} within {self.timeout:g} s"
                    )
                for message in take_arrived(self._consumer, 10_000, min(left, 0.5)):
                    partition = message.partition() or 0
                    offset = message.offset() or 0
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise KafkaUnavailable(
                                f"reading {topic} at {bootstrap_of(self.kafka)}: {error.str()}"
                            )
                        pending.discard(partition)  # at the partition's end: nothing more to read
                        continue
                    if partition not in pending or offset >= wanted[partition][1]:
                        pending.discard(partition)
                        continue
                    records.append(header_record(message))
                    if offset + 1 >= wanted[partition][1]:
                        pending.discard(partition)
        except KafkaException as exc:
            raise self._failed(f"reading {topic}", exc) from exc
        finally:
            self._consumer.unassign()
        return records

    def since(
        self, topic: str, partitions: Iterable[int], at_ms: int | None
    ) -> tuple[list[HeaderRecord], dict[int, Watermarks]]:
        """The records of `topic` stamped at or after `at_ms` (None: all that are kept), and its marks.

        The read starts at the first offset stamped at or after `at_ms`; a later record stamped
        earlier (a producer's own timestamps) is left out by `stamped_since`.
        """
        marks = self.watermarks(topic, partitions)
        if not marks:  # no topic: nothing to read (and the client refuses an empty request)
            return [], marks
        starts = self.offsets_at(topic, marks, at_ms)
        records = self.read(topic, starts, {p: m.high for p, m in marks.items()})
        return stamped_since(records, at_ms), marks


class _Routes:
    """The routes topic read once for every instance, with when each instance's routes last changed."""

    def __init__(
        self, kafka: Kafka, prefix: str, catalogs: Sequence[Instance], windows: TopicWindows
    ) -> None:
        topic = topics.routes_topic(prefix)
        # As a job would load them: only routes of an instance of the catalogs, scoped to one of its
        # databases (the others are skipped, and counted).
        reader = RouteTableReader(kafka, topic, databases=databases_by_instance(catalogs))
        try:
            reader.read_to_end()
            self.read = reader.snapshot()
            rows = reader.rows
            paired = reader.instance_routes
        finally:
            reader.close()
        self.by_instance: dict[str, list[Route]] = {}
        for name, route in paired:
            self.by_instance.setdefault(name, []).append(route)
        self.skipped: Counter[str | None] = Counter(route_instance(s) for s in self.read.skipped)
        # The newest record among each instance's current routes gives when they last changed.
        newest: dict[str, tuple[int, int]] = {}
        for key, row in rows.items():
            name = split_route_key(key)[0]
            newest[name] = max(newest.get(name, (-1, -1)), (row.partition, row.offset))
        self.changed_at: dict[str, datetime | None] = {}
        for name, (partition, offset) in newest.items():
            found = windows.read(topic, {partition: offset}, {partition: offset + 1})
            stamps = [r.timestamp_ms for r in found if r.timestamp_ms is not None]
            self.changed_at[name] = instant_of_ms(max(stamps)) if stamps else None


class StatusReader:
    """Reads what `router status` shows, one instance at a time, with one consumer for the windows."""

    def __init__(
        self,
        kafka: Kafka,
        prefix: str,
        *,
        now: datetime,
        since_s: float,
        delay_margin_s: float = DELAY_MARGIN_S,
    ) -> None:
        self.kafka = kafka
        self.prefix = prefix
        self.now = now
        self.since_s = since_s
        self.delay_margin_s = delay_margin_s
        self.catalogs = read_catalog_table(kafka, topics.catalogs_topic(prefix))
        self.by_name = {i.name: i for i in self.catalogs.values()}
        self._windows: TopicWindows | None = None
        self._routes: _Routes | None = None
        self._metadata: Mapping[str, Any] = {}

    def __enter__(self) -> StatusReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the consumer."""
        if self._windows is not None:
            self._windows.close()
            self._windows = None

    def general_warnings(self) -> list[str]:
        """Warnings that concern no one instance: skipped catalog records, route records naming none."""
        warnings = []
        if self.catalogs.skipped:
            warnings.append(
                f"{len(self.catalogs.skipped)} record(s) of {self.catalogs.topic} skipped "
                "(`router catalogs list` shows why)"
            )
        if self._routes is not None and self._routes.skipped.get(None):
            warnings.append(
                f"{self._routes.skipped[None]} record(s) of {self._routes.read.topic} skipped whose key "
                "names no instance (`router routes list` shows why)"
            )
        return warnings

    def _start(self) -> tuple[TopicWindows, _Routes]:
        if self._windows is None:
            self._windows = TopicWindows(self.kafka)
        if self._routes is None:
            self._metadata = cluster_metadata(self.kafka).topics
            self._routes = _Routes(self.kafka, self.prefix, self.catalogs.values(), self._windows)
        return self._windows, self._routes

    def _partitions(self, topic: str) -> list[int] | None:
        found = self._metadata.get(topic)
        if found is None or found.error is not None:
            return None
        return sorted(found.partitions)

    def _lag(self, topic: str, committed: Committed) -> TopicLag:
        windows, _ = self._start()
        partitions = self._partitions(topic)
        marks = None if partitions is None else windows.watermarks(topic, partitions)
        return topic_lag(topic, marks, committed.offsets)

    def _since(self, topic: str, at_ms: int | None) -> list[HeaderRecord]:
        windows, _ = self._start()
        records, _ = windows.since(topic, self._partitions(topic) or [], at_ms)
        return records

    def instance(self, name: str) -> InstanceStatus:
        """What is known of instance `name` (one of `by_name`)."""
        _, routes = self._start()
        catalog, prefix = self.by_name[name], self.prefix
        # The topics the router's group holds offsets for (`RouterJob.progress_groups`).
        inputs = [
            kind(name, prefix)
            for kind in (
                topics.outbound_topic,
                topics.inbound_topic,
                topics.delayed_topic,
                topics.choices_topic,
            )
        ]
        committed = read_committed(
            self.kafka,
            topics.router_group(name, prefix),
            [(topic, p) for topic in inputs for p in self._partitions(topic) or ()],
        )
        progress = progress_of(committed)
        warnings = []
        if progress.ran and progress.batch_at is None:
            warnings.append(
                f"group {progress.group} holds offsets without the router's batch metadata: every "
                "delayed message counts as not released"
            )
        delayed_topic = topics.delayed_topic(name, prefix)
        start_ms = delayed_window_start_ms(progress, catalog.retry_s, self.delay_margin_s)
        delayed = summarise_delayed(
            self._since(delayed_topic, start_ms), progress.batch_at, instant_of_ms(start_ms)
        )
        if delayed.unreadable:
            warnings.append(
                f"{delayed.unreadable} record(s) of {delayed_topic} without a due_at header that reads as "
                "an instant (not written by the router?)"
            )
        since_ms = ms_of(self.now - timedelta(seconds=self.since_s))
        skipped = routes.skipped.get(name, 0)
        if skipped:
            warnings.append(
                f"{skipped} record(s) of {name}'s routes on {routes.read.topic} skipped "
                "(`router routes list` shows why)"
            )
        own_routes = routes.by_instance.get(name, [])
        topology = Topology(
            instances=(catalog,),
            prefix=prefix,
            inbound_by_address={
                normalize_address(i.address): topics.inbound_topic(i.name, prefix)
                for i in self.by_name.values()
            },
        )
        active = [(name, route) for route in own_routes if route.is_active(self.now)]
        return InstanceStatus(
            catalog=catalog,
            progress=progress,
            outbound=self._lag(topics.outbound_topic(name, prefix), committed),
            inbound=self._lag(topics.inbound_topic(name, prefix), committed),
            delayed_lag=self._lag(delayed_topic, committed),
            delayed=delayed,
            dead_letters=summarise_dead_letters(self._since(topics.deadletter_topic(name, prefix), since_ms)),
            dropped=summarise_dropped(self._since(topics.dropped_topic(name, prefix), since_ms)),
            routes=summarise_routes(own_routes, self.now, routes.changed_at.get(name), skipped),
            missing_topics=missing_topics(reachable_topics(topology, active), self._metadata),
            warnings=tuple(warnings),
        )


def collect_status(
    kafka: Kafka,
    prefix: str,
    wanted: Sequence[str] | None,
    *,
    now: datetime,
    since_s: float,
    delay_margin_s: float = DELAY_MARGIN_S,
) -> tuple[list[InstanceStatus], list[str]]:
    """What `router status` shows of each instance, and the warnings that concern no one instance.

    `wanted` names the instances (None or empty: every one of the catalogs). Raises RouterError for
    an instance the catalogs do not hold, KafkaUnavailable when the broker does not answer.
    """
    with StatusReader(kafka, prefix, now=now, since_s=since_s, delay_margin_s=delay_margin_s) as reader:
        names = choose_instances(list(reader.by_name), wanted, reader.catalogs.topic)
        statuses = [reader.instance(name) for name in names]
        return statuses, reader.general_warnings()
