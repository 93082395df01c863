"""Where one message went and why, from Kafka alone: what `router explain` shows.

Service Broker's `sys.transmission_queue.transmission_status` says why a message has not left;
the router's decisions are written into every record it produces (`streaming.spark.output`'s
`MESSAGE_HEADERS`), so one message's whole path can be read back:

* **Finding it** (`search_message`, the thin part that reads). Every topic of the prefix that
  carries messages is searched (each instance's outbound, inbound, service queues, delayed,
  dropped and dead-letter topics, and the network topics `{prefix}.-net.*`; never the compacted
  table topics). Each read is bounded: from the offset of the window's first instant (the
  brokers' offsets for times) to the end offsets taken when the search starts, never the whole
  history. A record is the message when its value decodes with that `message_id`; a dead letter
  keeps the original bytes, so it is found the same way, unless its bytes do not decode at all.
* **The path** (`assemble_path`, pure). The first record is what the service wrote (on its
  instance's outbound topic, no decision headers); every later record is a hop, a decision of
  one instance (`router_instance`, `decided_at`, `outcome`, `route`, `match_step`, ...), or a dead
  letter. Hops are ordered by `decided_at`, then by topic kind. The same hop written twice (a batch
  run again after a crash writes the same records, with the same batch time) is one hop with a
  count. The last hop says where the message is now (`State`).
* **The last decision, replayed** (`replay_latest`, pure; `read_tables` reads the tables). The
  latest hop's decision is taken again by the reference engine, step by step
  (`streaming.rules.explain`), against that instance's tables as they are now, and compared with
  what its headers record. What the engine needs but Kafka does not hold (the rotation's counters,
  pending requests, whether the conversation waited behind another message) is named as an
  assumption.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from streaming import topics
from streaming.errors import KafkaUnavailable, MalformedRecord
from streaming.instants import format_instant, parse_instant
from streaming.kafka.admin import admin_client, cluster_metadata
from streaming.kafka.avro import decode_message, message_record_to_model
from streaming.kafka.connection import Kafka, bootstrap_of
from streaming.rules.batch import RoutingBatch
from streaming.rules.explain import Account, decision_summary, explain_decision
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    REMOTE,
    Decision,
    Instance,
    Message,
    MirrorRole,
    Outcome,
    Reason,
    Route,
    RouteIdentity,
    canonical_guid,
)
from streaming.rules.scoping import MSDB, routing_scope
from streaming.rules.snapshot import RouteSnapshot
from streaming.tables.reader import consumer, read_catalog_table, read_mirror_roles, read_routes

DEFAULT_SINCE = "24h"
READ_TIMEOUT_S = 30.0
"""How long the search waits for the records of its window before it says the cluster does not answer."""

KINDS = ("outbound", "inbound", "delayed", "queue", "network", "dropped", "deadletter")
"""The topics a message can be on, in the order hops of one instant are shown."""
_INSTANCE_KINDS = frozenset({"outbound", "inbound", "delayed", "dropped", "deadletter"})
_ESCAPED_BYTE = re.compile(r"-([0-9a-f]{2})")
DEAD_LETTERED = "dead-lettered"
"""The outcome a dead letter is shown with (it has no decision: no rule ran)."""


# --- topics ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicOf:
    """A topic of the prefix that carries messages: its kind, and whose it is (`streaming.topics`)."""

    name: str
    kind: str
    instance: str | None
    """The instance whose topic it is; None for a network topic."""
    detail: str | None = None
    """A queue's `database/service`, a network topic's address."""


def unescape(part: str) -> str:
    """The name `streaming.topics.escape` made `part` from; a cut part (`-h` and a hash) stays as it is."""
    if topics.PART_CUT_MARK in part:
        return part
    if part == "-":
        return ""
    try:
        return _ESCAPED_BYTE.sub(lambda m: chr(int(m.group(1), 16)), part).encode("latin-1").decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return part


def classify_topic(prefix: str, name: str) -> TopicOf | None:
    """The kind of a topic named under `prefix`, or None when it carries no messages (or is not the prefix's).

    Table topics (routes, catalogs, mirrors, an instance's choices and requests) are None: they hold
    no messages. Escaped parts never hold `.`, so a name splits into its parts exactly.
    """
    if not name.startswith(prefix + "."):
        return None
    parts = name[len(prefix) + 1 :].split(".")
    if len(parts) == 2 and parts[0] == "-net":
        return TopicOf(name, "network", None, unescape(parts[1]))
    if len(parts) == 2 and parts[1] in _INSTANCE_KINDS:
        return TopicOf(name, parts[1], unescape(parts[0]))
    if len(parts) >= 3 and parts[1] == "queue":
        detail = "/".join(unescape(p) for p in parts[2:])
        return TopicOf(name, "queue", unescape(parts[0]), detail)
    return None


def kinds_count(searched: Iterable[TopicOf]) -> str:
    """`3 outbound, 3 inbound, 2 queue` in KINDS order."""
    counts: dict[str, int] = {}
    for topic in searched:
        counts[topic.kind] = counts.get(topic.kind, 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in KINDS if k in counts) or "none"


# --- the window --------------------------------------------------------------------------------------


# --- records and the path ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FoundRecord:
    """One record of the message: where it is, its headers (text) and its decoded value."""

    topic: TopicOf
    partition: int
    offset: int
    timestamp: datetime | None
    headers: Mapping[str, str]
    value: Mapping[str, Any]

    @property
    def decided(self) -> bool:
        """It carries a decision (every record the router writes for a message does)."""
        return "outcome" in self.headers or self.topic.kind == "deadletter"


@dataclass(frozen=True)
class Sent:
    """Where the message entered: what a service wrote (outbound), or a record from outside (inbound)."""

    record: FoundRecord
    copies: int = 1


@dataclass(frozen=True)
class Hop:
    """One decision on the message's way (or its dead letter), with how many copies of it were written."""

    record: FoundRecord
    copies: int = 1
    released_at: datetime | None = None
    """For a delayed hop: when a later decision of the same instance took it out again (D2)."""

    @property
    def instance(self) -> str:
        """The instance that decided: `router_instance`, else the topic's (a dead letter's)."""
        return self.header("router_instance") or self.record.topic.instance or "?"

    @property
    def outcome(self) -> str:
        """The outcome header, or `dead-lettered`."""
        if self.record.topic.kind == "deadletter":
            return DEAD_LETTERED
        return self.header("outcome") or "?"

    @property
    def decided_at(self) -> datetime | None:
        """When the decision was taken (its micro-batch's time)."""
        return parse_instant(self.header("decided_at")) or self.record.timestamp

    def header(self, name: str) -> str | None:
        """The header's text, or None when the record does not carry it."""
        return self.record.headers.get(name)


@dataclass(frozen=True)
class State:
    """Where the message is now, after its last hop."""

    kind: str
    """delivered, waiting (on an input topic, not routed yet), delayed, sent-out, dropped, discarded,
    dead-lettered."""
    text: str


@dataclass(frozen=True)
class MessagePath:
    """One message's way through the instances, as its records tell it."""

    message_id: str
    value: Mapping[str, Any]
    """The message as first found (its service, conversation, sender)."""
    sent: tuple[Sent, ...]
    hops: tuple[Hop, ...]
    state: State


def assemble_path(message_id: str, records: Sequence[FoundRecord], now: datetime) -> MessagePath | None:
    """The path of `message_id` from its records (any order), or None when there are none.

    Records without decision headers on an outbound or inbound topic are where the message entered;
    every other record is a hop. Copies of one hop (same topic, same headers, same value) count once.
    A delayed hop followed by a later decision of the same instance was released then (D2).
    """
    mine = [r for r in records if r.value.get("message_id") == message_id]
    if not mine:
        return None
    starts = _copies([r for r in mine if not r.decided], lambda r: (r.topic.name, _value_key(r)))
    decided = _copies(
        [r for r in mine if r.decided],
        lambda r: (r.topic.name, tuple(sorted(r.headers.items())), _value_key(r)),
    )
    sent = tuple(
        Sent(record, count)
        for record, count in sorted(starts, key=lambda rc: (_ms(rc[0].timestamp), rc[0].offset))
    )
    hops = [Hop(record, count) for record, count in decided]
    hops.sort(
        key=lambda h: (
            _ms(h.decided_at),
            KINDS.index(h.record.topic.kind),
            h.record.partition,
            h.record.offset,
        )
    )
    for n, hop in enumerate(hops):
        if hop.outcome == Outcome.DELAYED.value:
            later = next((h for h in hops[n + 1 :] if h.instance == hop.instance), None)
            if later is not None:
                hops[n] = replace(hop, released_at=later.decided_at)
    first = sent[0].record if sent else hops[0].record
    return MessagePath(
        message_id=message_id,
        value=first.value,
        sent=sent,
        hops=tuple(hops),
        state=last_state(sent, tuple(hops), now),
    )


def _copies(records: list[FoundRecord], key: Any) -> list[tuple[FoundRecord, int]]:
    groups: dict[Any, list[FoundRecord]] = {}
    for record in sorted(records, key=lambda r: (r.topic.name, r.partition, r.offset)):
        groups.setdefault(key(record), []).append(record)
    return [(group[0], len(group)) for group in groups.values()]


def _value_key(record: FoundRecord) -> tuple[Any, ...]:
    value = record.value
    return (value.get("attempt"), value.get("hops_remaining"), value.get("to_broker_instance"))


def _ms(instant: datetime | None) -> float:
    return instant.timestamp() if instant is not None else float("-inf")


def last_state(sent: Sequence[Sent], hops: Sequence[Hop], now: datetime) -> State:
    """Where the message is now: after its last hop, or on the topic it entered by."""
    if not hops:
        where = sent[-1].record.topic
        return State(
            "waiting",
            f"in {where.name}, not routed yet by {where.instance} (is its router running? `router run` or "
            "`router replay`)",
        )
    hop = hops[-1]
    topic = hop.record.topic
    outcome = hop.outcome
    if outcome == DEAD_LETTERED:
        return State(DEAD_LETTERED, f"dead-lettered by {hop.instance} in {topic.name}: {hop.header('error')}")
    if outcome == Outcome.DELIVER.value:
        service = hop.record.value.get("to_service")
        return State(
            "delivered",
            f"delivered to {hop.header('database')}/{service} on {topic.instance} ({topic.name})",
        )
    if outcome in (Outcome.SEND.value, Outcome.FORWARD.value):
        if topic.kind == "network":
            return State(
                "sent-out", f"sent out of the known instances to {hop.header('address')} ({topic.name})"
            )
        return State(
            "waiting",
            f"in {topic.name}: {outcome} by {hop.instance}, not routed yet by {topic.instance}",
        )
    if outcome == Outcome.DELAYED.value:
        due = parse_instant(hop.header("due_at"))
        text = f"waiting in {topic.name} ({hop.header('reason')}), due at {format_instant(due)}"
        if due is not None and due <= now:
            text += f" (past due: {hop.instance}'s router routes it again at its next micro-batch, D2)"
        return State("delayed", text)
    reason = hop.header("reason")
    text = f"{outcome} by {hop.instance} ({reason}) in {topic.name}"
    if hop.header("destination") is not None:
        text += f": could not write to {hop.header('destination')}: {hop.header('error')}"
    if outcome == Outcome.DROPPED.value and topic.instance is not None and hop.header("scope") == MSDB:
        text += "; it came from another instance, whose sender retries (D5)"
    return State(outcome, text)


# --- searching Kafka ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UndecodableDeadLetter:
    """A dead letter in the window whose bytes do not decode: it cannot be matched by id."""

    topic: str
    partition: int
    offset: int
    source: str
    """`source_topic[source_partition]@source_offset` from its headers."""


@dataclass(frozen=True)
class Search:
    """What one search read: the topics, the window, the records of the message."""

    prefix: str
    message_id: str
    start: datetime
    end: datetime
    topics: tuple[TopicOf, ...]
    records: tuple[FoundRecord, ...]
    read: int
    """Records read in the window, over every topic."""
    undecodable: tuple[UndecodableDeadLetter, ...] = ()


def search_message(
    kafka: Kafka,
    prefix: str,
    message_id: str,
    start: datetime,
    end: datetime,
    *,
    timeout: float = READ_TIMEOUT_S,
) -> Search:
    """Read every message topic of `prefix` from `start` to its end offsets now; keep the message's records.

    Raises KafkaUnavailable when the cluster does not answer, or stops giving the window's records
    for `timeout` seconds.
    """
    metadata = cluster_metadata(kafka)
    searched = tuple(
        sorted(
            (t for t in (classify_topic(prefix, name) for name in metadata.topics) if t is not None),
            key=lambda t: (KINDS.index(t.kind), t.name),
        )
    )
    by_name = {t.name: t for t in searched}
    partitions = [
        TopicPartition(t.name, p) for t in searched for p in sorted(metadata.topics[t.name].partitions)
    ]
    if not partitions:
        return Search(prefix, message_id, start, end, searched, (), 0)
    firsts = _offsets(kafka, partitions, OffsetSpec.for_timestamp(int(start.timestamp() * 1000)), timeout)
    lasts = _offsets(kafka, partitions, OffsetSpec.latest(), timeout)
    ranges = {
        key: (lasts[key] if firsts[key] < 0 else firsts[key], lasts[key])
        for key in lasts
        if (firsts[key] if firsts[key] >= 0 else lasts[key]) < lasts[key]
    }
    needle = message_id.encode("utf-8")
    found: list[FoundRecord] = []
    undecodable: list[UndecodableDeadLetter] = []
    read = 0
    for record in _read_ranges(kafka, ranges, timeout):
        read += 1
        topic = by_name[record.topic() or ""]
        raw = record.value()
        if topic.kind == "deadletter":
            try:
                value = decode_message(raw)
            except MalformedRecord:
                undecodable.append(_undecodable(record))
                continue
        elif raw is None or needle not in raw:
            continue  # the id is stored as its UTF-8 bytes: a record without them is not the message
        else:
            try:
                value = decode_message(raw)
            except MalformedRecord:
                continue
        if value.get("message_id") == message_id:
            found.append(_found(topic, record, value))
    return Search(prefix, message_id, start, end, searched, tuple(found), read, tuple(undecodable))


def _offsets(
    kafka: Kafka, partitions: list[TopicPartition], spec: OffsetSpec, timeout: float
) -> dict[tuple[str, int], int]:
    """Each partition's offset for `spec` (a time: -1 when no record is that late)."""
    client = admin_client(kafka)
    try:
        futures = client.list_offsets({tp: spec for tp in partitions}, request_timeout=timeout)
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
    except KafkaException as exc:
        raise KafkaUnavailable(f"asking {bootstrap_of(kafka)} for the offsets of the window: {exc}") from exc


def _read_ranges(
    kafka: Kafka, ranges: Mapping[tuple[str, int], tuple[int, int]], timeout: float
) -> Iterable[confluent_kafka.Message]:
    """Every record of each partition from its first offset up to (not including) its end offset."""
    if not ranges:
        return
    reader = consumer(kafka)
    remaining = {key: end for key, (first, end) in ranges.items()}
    try:
        reader.assign([TopicPartition(t, p, first) for (t, p), (first, _) in ranges.items()])
        last_progress = time.monotonic()
        while remaining:
            records = reader.consume(1000, 0.5)
            if not records and time.monotonic() - last_progress > timeout:
                left = ", ".join(f"{t}[{p}]" for t, p in sorted(remaining))
                raise KafkaUnavailable(
                    f"reading the window from {bootstrap_of(kafka)}: no record for {timeout:g} s, still "
                    f"expected records of {left}"
                )
            for record in records:
                key = (record.topic() or "", record.partition() or 0)
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        _done(reader, remaining, key)
                        continue
                    raise KafkaUnavailable(f"reading {key[0]} at {bootstrap_of(kafka)}: {error.str()}")
                last_progress = time.monotonic()
                end = remaining.get(key)
                offset = record.offset() or 0
                if end is None or offset >= end:
                    continue
                if offset + 1 >= end:
                    _done(reader, remaining, key)
                yield record
    except KafkaException as exc:
        raise KafkaUnavailable(f"reading the window from {bootstrap_of(kafka)}: {exc}") from exc
    finally:
        reader.close()


def _done(reader: Any, remaining: dict[tuple[str, int], int], key: tuple[str, int]) -> None:
    if remaining.pop(key, None) is not None:
        reader.incremental_unassign([TopicPartition(key[0], key[1])])


def _text_headers(record: confluent_kafka.Message) -> dict[str, str]:
    out: dict[str, str] = {}
    raw_headers = record.headers() or []
    pairs = list(raw_headers.items()) if isinstance(raw_headers, dict) else list(raw_headers)
    for name, raw in pairs:
        if raw is not None and name not in out:
            out[name] = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    return out


def _timestamp(record: confluent_kafka.Message) -> datetime | None:
    _, ms = record.timestamp()
    return datetime.fromtimestamp(ms / 1000, timezone.utc) if ms and ms > 0 else None


def _found(topic: TopicOf, record: confluent_kafka.Message, value: Mapping[str, Any]) -> FoundRecord:
    return FoundRecord(
        topic=topic,
        partition=record.partition() or 0,
        offset=record.offset() or 0,
        timestamp=_timestamp(record),
        headers=_text_headers(record),
        value=value,
    )


def _undecodable(record: confluent_kafka.Message) -> UndecodableDeadLetter:
    headers = _text_headers(record)
    source = (
        f"{headers.get('source_topic', '?')}[{headers.get('source_partition', '?')}]@"
        f"{headers.get('source_offset', '?')}"
    )
    return UndecodableDeadLetter(record.topic() or "", record.partition() or 0, record.offset() or 0, source)


def not_found_text(search: Search, since: str) -> str:
    """What a search that found nothing says: the topics and the window, and where else to look."""
    window = f"from {format_instant(search.start)} to {format_instant(search.end)} (--since {since})"
    if not search.topics:
        return (
            f"message {search.message_id} not found: no message topics under prefix {search.prefix!r} "
            f"(searched {window}); give the prefix the router uses with --topic-prefix"
        )
    lines = [
        f"message {search.message_id} not found in {len(search.topics)} topics under prefix "
        f"{search.prefix!r} ({kinds_count(search.topics)}), {window}: {search.read} record(s) read",
        "  an earlier message: widen the window (--since 7d, or an instant); another namespace: "
        "--topic-prefix",
    ]
    if search.undecodable:
        shown = "; ".join(
            f"{u.topic}[{u.partition}]@{u.offset} from {u.source}" for u in search.undecodable[:5]
        )
        more = f" and {len(search.undecodable) - 5} more" if len(search.undecodable) > 5 else ""
        lines.append(
            f"  {len(search.undecodable)} dead letter(s) in the window do not decode at all, so no id can be "
            f"read from them: {shown}{more}"
        )
        lines.append(
            "  find yours by where it was written (its source_topic and source_offset headers): "
            f"router tail {search.undecodable[0].topic} --from-beginning --timeout 5"
        )
    else:
        lines.append(
            "  a record whose bytes do not decode cannot be found by its id: its dead letter names it by "
            "source_topic and source_offset (router tail PREFIX.INSTANCE.deadletter --from-beginning)"
        )
    return "\n".join(lines)


def not_found_json(search: Search, since: str) -> dict[str, Any]:
    """`not_found_text` as a JSON object."""
    return {
        "message_id": search.message_id,
        "found": False,
        "prefix": search.prefix,
        "since": since,
        "window": {"start": format_instant(search.start), "end": format_instant(search.end)},
        "topics": [{"name": t.name, "kind": t.kind, "instance": t.instance} for t in search.topics],
        "records_read": search.read,
        "undecodable_dead_letters": [
            {"topic": u.topic, "partition": u.partition, "offset": u.offset, "source": u.source}
            for u in search.undecodable
        ],
    }


# --- the last decision, replayed -----------------------------------------------------------------------


@dataclass(frozen=True)
class Tables:
    """One instance's tables as they are now (`read_tables`)."""

    instance: Instance | None
    routes: tuple[Route, ...]
    """The instance's routes, every table, expired ones included (R6 leaves them out)."""
    mirrors: Mapping[str, MirrorRole]
    version: str
    """`routes@... mirrors@...`, as the snapshot_version header writes it."""


@dataclass(frozen=True)
class Replay:
    """The latest decision taken again with today's tables, and how it compares with its headers."""

    instance: str
    hop: Hop | None
    """The decision replayed; None when the message waits for its first decision at `instance`."""
    account: Account
    recorded: Mapping[str, str | None]
    """outcome, route, match_step, choice_step, reason as the headers record them."""
    differs: tuple[str, ...]
    comparison: str
    assumptions: tuple[str, ...]
    tables_version: str


@dataclass(frozen=True)
class NoReplay:
    """Why there is no decision to replay."""

    why: str


COMPARED = ("outcome", "route", "match_step", "choice_step", "reason")


def replay_instance(path: MessagePath) -> str | None:
    """The instance whose decision `replay_latest` replays (whose tables it needs), or None."""
    if path.hops:
        hop = path.hops[-1]
        return None if hop.outcome == DEAD_LETTERED else hop.instance
    return path.sent[-1].record.topic.instance if path.sent else None


def replay_latest(path: MessagePath, tables: Tables | None, now: datetime) -> Replay | NoReplay:
    """Take the latest hop's decision again against `tables` (one instance's, as they are now).

    The message is read from the record that decision read (the instance's outbound, inbound or
    delayed record before it); its lifetime is read at the decision's time (F3), so that only the
    tables differ. A message not decided yet is decided as its instance would decide it now.
    """
    instance_name = replay_instance(path)
    if instance_name is None:
        dead = path.hops[-1]
        return NoReplay(
            f"the record was dead-lettered by {dead.instance} before any rule ran ({dead.header('error')}): "
            "there is no decision to replay"
        )
    if tables is None or tables.instance is None:
        return NoReplay(
            f"instance {instance_name} has no catalog on the catalogs topic now: its decision cannot be "
            "replayed (load it with `router catalogs load FILE`)"
        )
    hop = path.hops[-1] if path.hops else None
    notes: list[str] = []
    read_record, origin = _input_of(path, hop, notes)
    at = (hop.decided_at if hop is not None else None) or now
    message = _routed_message(read_record.value, origin, at)
    kept = _kept(hop, read_record) if message.remembers_choice else None
    snapshot = RouteSnapshot.of(
        RoutingBatch(
            instance=tables.instance, routes=tables.routes, messages=(), now=now, mirrors=tables.mirrors
        )
    )
    expired = tuple(r for r in tables.routes if not r.is_active(now))
    account = explain_decision(message, snapshot, frozenset(), kept, expired=expired)
    recorded = {name: hop.header(name) for name in COMPARED} if hop is not None else {}
    today = decision_fields(account.decision)
    differs = tuple(name for name in COMPARED if hop is not None and today[name] != recorded.get(name))
    return Replay(
        instance=instance_name,
        hop=hop,
        account=account,
        recorded=recorded,
        differs=differs,
        comparison=_comparison(hop, account, tables, differs, instance_name, message, now),
        assumptions=tuple(notes + _assumptions(hop, account, message, kept, snapshot)),
        tables_version=tables.version,
    )


def _input_of(path: MessagePath, hop: Hop | None, notes: list[str]) -> tuple[FoundRecord, str]:
    """The record the decision read, and the message's origin then (S1-S3: inbound is remote)."""
    if hop is None:
        record = path.sent[-1].record
        return record, _origin(record)
    before = [h.record for h in reversed(path.hops[: path.hops.index(hop)])]
    earlier = before + [s.record for s in reversed(path.sent)]
    for record in earlier:
        if record.topic.instance == hop.instance and record.topic.kind in ("outbound", "inbound", "delayed"):
            return record, _origin(record)
    notes.append(
        "the record the decision read is outside the window searched: the message is read from the "
        "decision's own record, its origin from the headers' scope"
    )
    value = dict(hop.record.value)
    if hop.outcome == Outcome.FORWARD.value and isinstance(value.get("hops_remaining"), int):
        value["hops_remaining"] += 1  # F3: the forward wrote one hop less than it read
    record = replace(hop.record, value=value)
    remote = hop.outcome in (Outcome.FORWARD.value, Outcome.DROPPED.value, Outcome.DISCARDED.value) or (
        hop.header("scope") == MSDB and value.get("origin_database") != MSDB
    )
    return record, REMOTE if remote else str(value.get("origin_database") or "")


def _origin(record: FoundRecord) -> str:
    if record.topic.kind == "inbound":
        return REMOTE
    return str(record.value.get("origin_database") or "")


def _routed_message(value: Mapping[str, Any], origin: str, at: datetime) -> Message:
    """The routing view of the record, as the streaming job builds it (`streaming.spark.sources`)."""
    message = message_record_to_model(value, origin)
    broker = message.broker_instance
    if broker is not None:
        with contextlib.suppress(ValueError):  # not a GUID: kept as it came
            broker = canonical_guid(broker)
    expires = value.get("expires_at")
    ttl = message.time_to_live_s
    if isinstance(expires, datetime):
        ttl = (expires - at).total_seconds()  # F3: the lifetime left when the decision was taken
    return replace(message, broker_instance=broker, time_to_live_s=ttl)


def _kept(hop: Hop | None, read: FoundRecord) -> RouteIdentity | None:
    """K2: the kept choice the decision had, from the kept_* headers (delayed records carry them)."""
    for headers in ((hop.record.headers if hop is not None else {}), read.headers):
        address = headers.get("kept_address")
        if address:
            return (headers.get("kept_bid") or "", headers.get("kept_route_service") or "", address)
    return None


def decision_fields(decision: Decision) -> dict[str, str | None]:
    """The fields of a decision its headers are compared on (`COMPARED`), as header text."""
    return {
        "outcome": decision.outcome.value,
        "route": decision.route,
        "match_step": decision.match_step,
        "choice_step": decision.choice_step,
        "reason": None if decision.reason is None else decision.reason.value,
    }


def recorded_summary(hop: Hop) -> str:
    """The hop's decision in `decision_summary`'s words, from its headers."""
    outcome = hop.outcome
    if outcome == DEAD_LETTERED:
        return f"dead-lettered: {hop.header('error')}"
    reason_text = hop.header("reason")
    reason = next((r for r in Reason if r.value == reason_text), None)
    try:
        decision = Decision(
            id="",
            outcome=Outcome(outcome),
            database=hop.header("database"),
            address=hop.header("address"),
            route=hop.header("route"),
            match_step=hop.header("match_step"),
            choice_step=hop.header("choice_step"),
            reason=reason,
        )
    except ValueError:
        return f"{outcome} ({reason_text})"
    text = decision_summary(decision)
    if reason is None and reason_text:
        text += f": {reason_text}"
    return text


def _comparison(
    hop: Hop | None,
    account: Account,
    tables: Tables,
    differs: tuple[str, ...],
    instance: str,
    message: Message,
    now: datetime,
) -> str:
    today = decision_summary(account.decision)
    if hop is None:
        return f"not decided yet: today {instance} would {today}"
    if not differs:
        return f"today's tables decide the same: {today}"
    causes: list[str] = []
    if hop.header("destination") is not None:
        causes.append(
            f"its destination {hop.header('destination')} could not be written ({hop.header('error')}), "
            "so the router dropped it with destination_unavailable after deciding"
        )
    route = hop.header("route")
    scope = hop.header("scope") or routing_scope(message)
    if route is not None and route != account.decision.route:
        held = next((r for r in tables.routes if r.scope == scope and r.name == route), None)
        if held is None:
            causes.append(f"route {route} is no longer in {instance}'s {scope} table (dropped since)")
        elif not held.is_active(now):
            causes.append(f"route {route} has expired since (R6, at {format_instant(held.expires_at)})")
    if account.decision.route is not None and account.decision.route != route:
        causes.append(f"route {account.decision.route} decides now")
    then = hop.header("snapshot_version")
    if then is not None and then != tables.version:
        causes.append(f"the tables changed since: the decision used {then}, today's are {tables.version}")
    elif then is not None:
        causes.append(
            "the routes and mirrors are as they were then (same version): what differs is state the "
            "replay cannot see (see the assumptions) or the catalog"
        )
    text = f"today: {today}; the headers record {recorded_summary(hop)}"
    return text + (": " + "; ".join(causes) if causes else "")


def _assumptions(
    hop: Hop | None,
    account: Account,
    message: Message,
    kept: RouteIdentity | None,
    snapshot: RouteSnapshot,
) -> list[str]:
    notes: list[str] = []
    if message.remembers_choice:
        if kept is not None:
            bid, service, address = kept
            notes.append(
                "K2: the conversation's kept choice is read from the kept_* headers: "
                f"({service or '*'}, {bid or '*'}, {address})"
            )
        else:
            notes.append(
                "K2: no kept choice in the headers (only delayed records carry one): replayed as the "
                "conversation's first choice; one that chose earlier keeps its route while it is a candidate"
            )
    if any("in turn" in step.verdict for step in account.steps):
        notes.append(
            "C5/M3: the round-robin counters live in the job's checkpoint; the replay starts each rotation "
            "at its first option, so its pick among equal options may differ from the router's"
        )
    scope = routing_scope(message)
    if any(r.service == BROKER_CONFIGURATION_SERVICE for r in snapshot.table(scope)):
        notes.append(
            f"B4: no MissingRoute request for ({scope}, {message.service}) is taken as pending; the job "
            "keeps the outstanding ones in its state"
        )
    if not message.is_remote:
        if hop is not None and hop.outcome == Outcome.DELAYED.value and hop.header("match_step") is None:
            notes.append(
                "D1: the headers record that it waited behind an earlier delayed message of its "
                "conversation (no rule ran); the replay decides it as if none waited"
            )
        else:
            notes.append(
                "D1: no earlier message of its conversation is taken as waiting in the delayed state"
            )
    if account.decision.outcome is Outcome.FORWARD or (
        hop is not None and hop.header("reason") == Reason.FORWARD_BUFFER_FULL.value
    ):
        notes.append("F5: what else its micro-batch forwarded is not known: the buffer is taken as empty")
    if message.time_to_live_s is not None:
        notes.append(
            f"F3: the lifetime is read at the decision's time: {message.time_to_live_s:g} s left then"
        )
    return notes


def read_tables(kafka: Kafka, prefix: str, instance: str) -> Tables:
    """One instance's catalog, routes and the mirror roles as they are now (the table reader)."""
    catalogs = read_catalog_table(kafka, topics.catalogs_topic(prefix))
    routes = read_routes(kafka, topics.routes_topic(prefix), instance=instance)
    mirrors = read_mirror_roles(kafka, topics.mirrors_topic(prefix))
    return Tables(
        instance=catalogs.table.get(instance),
        routes=routes.values(),
        mirrors=dict(mirrors.table),
        version=f"routes@{routes.version} mirrors@{mirrors.version}",
    )
