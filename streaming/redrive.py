"""Redrive: send an instance's dropped messages or dead letters back into the input they came from.

What is sent back. A record of the instance's dropped topic (or dead-letter topic) goes to the
input topic its `source_topic` header names (`streaming.spark.output`): its outbound topic, or its
inbound topic. One released from the delay and then dropped was read from the delayed topic,
which the job decodes as its outbound topic's records (its origin is its database); it goes to
the outbound topic. Its key and value are sent unchanged, its headers are kept, and two are set
(an earlier value of either replaced): `redrive_count`, how many times the message has now been
sent back, and `redriven_from`, where this copy was read (`topic[partition]@offset`).

Delayed messages are not redriven (`DELAYED_REFUSAL`): a record of the delayed topic is not a
parked failure but the state of a conversation that waits; the job routes it again itself when
it falls due (D2), and a copy in the input would be routed twice.

Each record once. The command reads with a consumer group of its own (`topics.redrive_group`) and
commits the group's offsets in the same Kafka transaction as the records it writes, a chunk at a
time (`CHUNK_RECORDS`, `CHUNK_S`): a redrive killed midway leaves an open transaction, which the
next run (same `transactional.id`) aborts before it reads from the last committed offsets, so
nothing is sent twice. Readers of the input must read committed records only: the job does
(`streaming.spark.sources.READ_COMMITTED`), and so do librdkafka's consumers by default.

The group consumes the topic once: records a filter leaves out (`--reason`, `--service`,
`--since`) are read past and committed with the chunk, and a later run starts after them. A
bound that ends the run (`--until`, `--max`) stops before the records it does not take, which the
next run reads. `from_beginning` starts at each partition's first record instead of the group's
offsets. A run whose filters match no record commits nothing and says what the records held.

Not looping. How often each message has been sent back is kept in the instance's compacted
redrives topic (`topics.redrives_topic`, key the message id, or `sha256:` and the value's hash
for bytes that do not decode), written in the same transaction: the job writes its decision's
headers, not the input's, so a header alone would not survive a second drop. A message sent back
`max_redrives` times already is skipped with a warning.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from streaming import topics
from streaming.errors import ConfigError, KafkaUnavailable, MalformedRecord, RouterError
from streaming.kafka.admin import cluster_metadata, ensure_topics
from streaming.kafka.avro import decode_message
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import ClientValue, Kafka, bootstrap_of, client_config, producer_config
from streaming.rules.model import Reason
from streaming.spark.output import DESTINATION_UNAVAILABLE, SOURCE_TOPIC_HEADER

Source = Literal["dropped", "deadletter", "delayed"]
SOURCES: tuple[Source, ...] = ("dropped", "deadletter", "delayed")
REDRIVE_COUNT = "redrive_count"
REDRIVEN_FROM = "redriven_from"
DEFAULT_MAX_REDRIVES = 3
REASONS = (*(r.value for r in Reason), DESTINATION_UNAVAILABLE)
"""The reasons a dropped or discarded message may carry."""
CHUNK_RECORDS = 500
"""Records read per transaction, at most."""
CHUNK_S = 1.0
"""Seconds a transaction stays open, about, when records come slower (`--rate`)."""
TRANSACTION_TIMEOUT_MS = 20_000
"""A transaction left open (the command killed) is aborted by the broker after this, if no run
aborts it sooner; until then, read_committed readers of its partitions wait at it."""
PROGRESS_S = 5.0
"""How often a long run says how far it is."""
STALL_S = 30.0
"""A run that reads nothing new for this long, short of its end offsets, fails."""
EXAMPLES = 5
"""Message ids a summary shows."""
WARNINGS = 10
"""Skipped records a run names one by one."""

DELAYED_REFUSAL = (
    "--from delayed: delayed messages are not redriven. A record of the delayed topic is the state of "
    "a conversation that waits, not a failure: the router routes it again itself when it falls due "
    "(its due_at header, the catalog's retry_s after it was delayed), and a copy sent to the input "
    "would be routed twice. To release them, write the route they wait for (`router routes load`); "
    "`router status --instance I` shows how many wait and the oldest"
)

_LOG = librdkafka_log()


@dataclass(frozen=True)
class RedriveRequest:
    """What to send back, from where, and how fast (see the module docstring)."""

    instance: str
    source: Source
    prefix: str = topics.DEFAULT_PREFIX
    reason: str | None = None
    service: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    most: int | None = None
    rate: float | None = None
    dry_run: bool = False
    max_redrives: int = DEFAULT_MAX_REDRIVES
    from_beginning: bool = False

    def __post_init__(self) -> None:
        if self.source == "delayed":
            raise ConfigError(DELAYED_REFUSAL)
        if self.source not in SOURCES:
            raise ConfigError(f"--from: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.reason is not None:
            if self.source == "deadletter":
                raise ConfigError(
                    "--reason: dead letters have no reason (their `error` header says why they did not "
                    "decode); leave --reason out, or redrive --from dropped"
                )
            if self.reason not in REASONS:
                raise ConfigError(f"--reason: expected one of {', '.join(REASONS)}, got {self.reason!r}")
        for flag, value in (("--max", self.most), ("--max-redrives", self.max_redrives)):
            if value is not None and value < 1:
                raise ConfigError(f"{flag}: expected 1 or more, got {value}")
        if self.rate is not None and self.rate <= 0:
            raise ConfigError(f"--rate: expected records per second above 0, got {self.rate:g}")
        if self.since_ms is not None and self.until_ms is not None and self.since_ms >= self.until_ms:
            raise ConfigError("--since must be before --until")

    @property
    def topic(self) -> str:
        """The topic the records are read from."""
        kind = topics.dropped_topic if self.source == "dropped" else topics.deadletter_topic
        return kind(self.instance, self.prefix)

    @property
    def group(self) -> str:
        """The redrive's consumer group, and its producer's transactional id."""
        return topics.redrive_group(self.instance, self.prefix)

    def inputs(self) -> dict[str, str]:
        """The input each `source_topic` value is sent back to (see the module docstring)."""
        outbound = topics.outbound_topic(self.instance, self.prefix)
        return {
            outbound: outbound,
            topics.inbound_topic(self.instance, self.prefix): topics.inbound_topic(
                self.instance, self.prefix
            ),
            topics.delayed_topic(self.instance, self.prefix): outbound,
        }


Skip = Literal["filtered", "too_often", "no_input"]


@dataclass(frozen=True)
class Verdict:
    """What the redrive makes of one record: where it goes, or why it is skipped."""

    message_id: str
    """The message's id, or `sha256:` and its value's hash when the value does not decode."""
    reason: str
    """Its `reason` header (dropped), `error` (dead letter), or `-`."""
    service: str
    """The service it is for (`-` when the value does not decode)."""
    target: str | None = None
    skip: Skip | None = None
    why: str = ""
    count: int = 0
    """How many times it has been sent back before."""


Headers = Sequence[tuple[str, bytes | None]]


def header(headers: Headers, name: str) -> str | None:
    """The first header called `name`, as text (None when there is none)."""
    for key, value in headers:
        if key == name:
            return None if value is None else value.decode("utf-8", "replace")
    return None


def judge(
    request: RedriveRequest,
    value: bytes | None,
    headers: Headers,
    timestamp_ms: int,
    counts: Mapping[str, int],
) -> Verdict:
    """Decide one record of the source topic: send it (to `target`) or skip it, and why."""
    try:
        message = decode_message(value)
        message_id, service = str(message["message_id"]), str(message["to_service"])
    except MalformedRecord:
        message_id, service = "sha256:" + hashlib.sha256(value or b"").hexdigest(), "-"
    reason = header(headers, "reason" if request.source == "dropped" else "error") or "-"
    given = header(headers, REDRIVE_COUNT)
    count = max(counts.get(message_id, 0), int(given) if given and given.isdigit() else 0)

    def skipped(skip: Skip, why: str) -> Verdict:
        return Verdict(message_id, reason, service, skip=skip, why=why, count=count)

    if request.reason is not None and reason != request.reason:
        return skipped("filtered", "reason")
    if request.service is not None and service != request.service:
        return skipped("filtered", "service")
    if request.since_ms is not None and timestamp_ms < request.since_ms:
        return skipped("filtered", "since")
    source = header(headers, SOURCE_TOPIC_HEADER)
    target = request.inputs().get(source or "")
    if target is None:
        found = (
            "no source_topic header (written by a router from before it had one)"
            if source is None
            else (f"source_topic {source!r}, not an input of instance {request.instance!r}")
        )
        return skipped("no_input", found)
    if count >= request.max_redrives:
        return skipped(
            "too_often", f"sent back {count} time(s) already (--max-redrives {request.max_redrives})"
        )
    return Verdict(message_id, reason, service, target=target, count=count)


def redriven_headers(headers: Headers, count: int, origin: str) -> list[tuple[str, bytes | None]]:
    """The record's headers with `redrive_count` (now `count`) and `redriven_from` set."""
    kept = [(k, v) for k, v in headers if k not in (REDRIVE_COUNT, REDRIVEN_FROM)]
    return [*kept, (REDRIVE_COUNT, str(count).encode()), (REDRIVEN_FROM, origin.encode())]


@dataclass
class RedriveSummary:
    """What a run read, sent and skipped."""

    topic: str
    dry_run: bool
    read: int = 0
    sent: int = 0
    by_target: Counter[str] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    by_service: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    filtered: int = 0
    too_often: int = 0
    no_input: int = 0
    seen_reasons: Counter[str] = field(default_factory=Counter)
    seen_services: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    stopped: bool = False

    @property
    def taken(self) -> int:
        """Records that passed the filters: sent (or, dry, to be sent), or skipped as sent too often."""
        return self.sent + self.too_often + self.no_input

    def line(self) -> str:
        """The one-line summary."""
        verb = "would send" if self.dry_run else "sent"
        where = ", ".join(f"{n} to {t}" for t, n in sorted(self.by_target.items())) or "nothing"
        rate = (
            f", {self.sent / self.seconds:,.0f}/s"
            if self.seconds > 0 and self.sent and not self.dry_run
            else ""
        )
        return (
            f"read {self.read} record(s) of {self.topic} in {self.seconds:.1f} s; {verb} {self.sent} "
            f"({where}{rate}); skipped {self.filtered} by the filters, {self.too_often} sent back too "
            f"often, {self.no_input} with no input to go to" + ("; stopped early" if self.stopped else "")
        )

    def as_json(self) -> dict[str, Any]:
        """The summary as a JSON object."""
        return {
            "topic": self.topic,
            "dry_run": self.dry_run,
            "read": self.read,
            "sent": self.sent,
            "by_target": dict(self.by_target),
            "by_reason": dict(self.by_reason),
            "by_service": dict(self.by_service),
            "examples": self.examples,
            "skipped": {"filtered": self.filtered, "too_often": self.too_often, "no_input": self.no_input},
            "seconds": round(self.seconds, 3),
            "stopped": self.stopped,
        }

    def count(self, verdict: Verdict) -> None:
        """Count one record's verdict."""
        self.read += 1
        self.seen_reasons[verdict.reason] += 1
        self.seen_services[verdict.service] += 1
        if verdict.skip == "filtered":
            self.filtered += 1
        elif verdict.skip == "too_often":
            self.too_often += 1
        elif verdict.skip == "no_input":
            self.no_input += 1
        else:
            assert verdict.target is not None
            self.sent += 1
            self.by_target[verdict.target] += 1
            self.by_reason[verdict.reason] += 1
            self.by_service[verdict.service] += 1
            if len(self.examples) < EXAMPLES:
                self.examples.append(verdict.message_id)

    def nothing_matched(self, request: RedriveRequest) -> str:
        """Why a run took nothing: what was asked, and what the records held."""
        if not self.read:
            return (
                f"expected records to redrive on {self.topic}, found none after the offsets of group "
                f"{request.group} (every record is redriven once; --from-beginning reads them all again)"
            )
        what = ", ".join(
            f"{flag} {value}"
            for flag, value in (("--reason", request.reason), ("--service", request.service))
            if value is not None
        )
        held = f"reasons {_top(self.seen_reasons)}; services {_top(self.seen_services)}"
        return (
            f"expected records matching {what or 'the window'} on {self.topic}, none of the {self.read} read "
            f"match (they hold {held}); nothing was written or committed: change the filters"
        )


def _top(counter: Counter[str]) -> str:
    return ", ".join(f"{name} ({n})" for name, n in counter.most_common(EXAMPLES))


def read_counts(kafka: Kafka, topic: str, timeout_s: float = 30.0) -> dict[str, int]:
    """How often each message was sent back: the last value of each key of the redrives topic."""
    reader = _consumer(kafka, f"router-reader-redrives-{time.time_ns()}")
    counts: dict[str, int] = {}
    try:
        metadata = cluster_metadata(kafka).topics.get(topic)
        if metadata is None:
            return counts
        ends = {}
        for p in metadata.partitions:
            low, high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            if high > low:
                ends[p] = high
        reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        while ends:
            record = reader.poll(0.5)
            if time.monotonic() > deadline:
                raise KafkaUnavailable(
                    f"reading {topic} at {bootstrap_of(kafka)}: not read within {timeout_s} s"
                )
            if record is None:
                continue
            _raise_if_error(record, topic, kafka, ends)
            if record.error() is None:
                partition, offset = _where(record)
                key = _text(record.key())
                value = record.value()
                if value is None:
                    counts.pop(key, None)
                else:
                    counts[key] = int(_text(value))
                if offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
    finally:
        reader.close()
    return counts


def _consumer(kafka: Kafka, group: str) -> Consumer:
    """A consumer of `group` that commits nothing itself and reads committed records only."""
    settings: dict[str, ClientValue] = {
        "group.id": group,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    }
    return Consumer(client_config(kafka, **settings), logger=_LOG)


def _where(record: Message) -> tuple[int, int]:
    """A consumed record's partition and offset (never None for a record that is not an error)."""
    partition, offset = record.partition(), record.offset()
    if partition is None or offset is None:
        raise RouterError(f"expected a record with a partition and an offset, got {record!r}")
    return partition, offset


def _headers(record: Message) -> list[tuple[str, bytes | None]]:
    """A record's headers as (name, bytes) pairs, in order."""
    raw = record.headers() or []
    pairs = list(raw.items()) if isinstance(raw, dict) else list(raw)
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


def _text(data: str | bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace") if not isinstance(data, str) else data


def _raise_if_error(record: Message, topic: str, kafka: Kafka, ends: dict[int, int]) -> None:
    """Raise for a consumer error; a partition's end (EOF) ends its reading (`ends` loses it)."""
    error = record.error()
    if error is None:
        return
    if error.code() == KafkaError._PARTITION_EOF:
        ends.pop(record.partition() or 0, None)
        return
    raise KafkaUnavailable(f"reading {topic} at {bootstrap_of(kafka)}: {error.str()}")


class Redrive:
    """One run of a redrive (see the module docstring); `run()` reads, sends and commits."""

    def __init__(
        self,
        kafka: Kafka,
        request: RedriveRequest,
        say: Callable[[str], None],
        stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.kafka = kafka
        self.request = request
        self.say = say
        self.stop = stop
        self.summary = RedriveSummary(request.topic, request.dry_run)
        self._producer: Producer | None = None
        self._in_transaction = False
        self._positions: dict[int, int] = {}
        self._warnings = 0

    def run(self) -> RedriveSummary:
        """Send the chosen records back; raise RouterError when none match (nothing is then written)."""
        r = self.request
        metadata = cluster_metadata(self.kafka).topics.get(r.topic)
        if metadata is None:
            raise RouterError(
                f"expected topic {r.topic!r} at {bootstrap_of(self.kafka)}, it does not exist: has the "
                f"router of instance {r.instance!r} run under prefix {r.prefix!r}? "
                "(give yours with --topic-prefix)"
            )
        started = time.monotonic()
        counts = read_counts(self.kafka, topics.redrives_topic(r.instance, r.prefix))
        consumer = _consumer(self.kafka, r.group)
        try:
            ends = self._assign(consumer, sorted(metadata.partitions))
            if not r.dry_run and ends:
                ensure_topics(self.kafka, [topics.redrives_topic(r.instance, r.prefix)], compacted=True)
                transactional: dict[str, ClientValue] = {
                    "transactional.id": r.group,
                    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                }
                self._producer = Producer(producer_config(self.kafka, **transactional), logger=_LOG)
                # Fences an earlier run with the same id, aborting its open transaction.
                self._producer.init_transactions(30)
            self._read(consumer, ends, counts, started)
            self.summary.seconds = time.monotonic() - started
            if not self.summary.taken:
                self._abort()
                raise RouterError(self.summary.nothing_matched(r))
            self._commit(consumer)
        except BaseException:
            self._abort()
            raise
        finally:
            consumer.close()
        self.summary.seconds = time.monotonic() - started
        return self.summary

    def _assign(self, consumer: Consumer, partitions: list[int]) -> dict[int, int]:
        """Assign the partitions from the group's offsets (or their first records); their end offsets."""
        r = self.request
        wanted = [TopicPartition(r.topic, p) for p in partitions]
        committed = {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=30)}
        until = {}
        if r.until_ms is not None:
            asked = [TopicPartition(r.topic, p, r.until_ms) for p in partitions]
            until = {tp.partition: tp.offset for tp in consumer.offsets_for_times(asked, timeout=30)}
        ends: dict[int, int] = {}
        assigned = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, p), timeout=30, cached=False)
            start = low if r.from_beginning or committed[p] < 0 else max(committed[p], low)
            end = high if until.get(p, -1) < 0 else min(until[p], high)
            self._positions[p] = start
            if start < end:
                ends[p] = end
                assigned.append(TopicPartition(r.topic, p, start))
        consumer.assign(assigned)
        return ends

    def _read(self, consumer: Consumer, ends: dict[int, int], counts: dict[str, int], started: float) -> None:
        r, s = self.request, self.summary
        chunk_started, chunk_read = time.monotonic(), 0
        last_said = last_progress = time.monotonic()
        total = sum(end - self._positions[p] for p, end in ends.items())
        while ends and not self.stop():
            if r.most is not None and s.sent >= r.most:
                break
            records = consumer.consume(100, 0.5)  # a few at a time: --max and a stop act soon
            for record in records:
                if record.error() is not None:
                    _raise_if_error(record, r.topic, self.kafka, ends)
                    continue
                p, offset = _where(record)
                if p not in ends or offset >= ends[p] or (r.most is not None and s.sent >= r.most):
                    ends.pop(p, None)
                    continue
                verdict = judge(r, record.value(), _headers(record), record.timestamp()[1], counts)
                if verdict.skip in ("too_often", "no_input"):
                    self._warn(f"{r.topic}[{p}]@{offset} {verdict.message_id}: {verdict.why}; skipped")
                if verdict.target is not None:
                    self._pace(started)
                    self._send(record, verdict, counts)
                s.count(verdict)
                chunk_read += 1
                self._positions[p] = offset + 1
                if self._positions[p] >= ends.get(p, 0):
                    ends.pop(p, None)
            now = time.monotonic()
            if records:
                last_progress = now
            elif now - last_progress > STALL_S:
                raise KafkaUnavailable(
                    f"reading {r.topic} at {bootstrap_of(self.kafka)}: nothing read for {STALL_S:g} s "
                    f"short of the end offsets {ends}"
                )
            if chunk_read >= CHUNK_RECORDS or (chunk_read and now - chunk_started >= CHUNK_S):
                if s.taken:  # a run that takes nothing commits nothing (`nothing_matched`)
                    self._commit(consumer)
                chunk_started, chunk_read = now, 0
            if now - last_said >= PROGRESS_S:
                verb = "would send" if r.dry_run else "sent"
                self.say(
                    f"read {s.read} of {total}, {verb} {s.sent}, "
                    f"skipped {s.filtered + s.too_often + s.no_input}"
                )
                last_said = now
        s.stopped = self.stop()

    def _warn(self, text: str) -> None:
        """Say a skipped record's warning; past `WARNINGS`, only the summary counts them."""
        self._warnings += 1
        if self._warnings <= WARNINGS:
            self.say(f"warning: {text}")
        elif self._warnings == WARNINGS + 1:
            self.say(f"warning: more records skipped; the summary counts them (only {WARNINGS} shown)")

    def _pace(self, started: float) -> None:
        """Wait, under `--rate`, until the next record is due."""
        if self.request.rate is None:
            return
        due = started + self.summary.sent / self.request.rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _send(self, record: Message, verdict: Verdict, counts: dict[str, int]) -> None:
        """Write the record to its input, and its new count, in the open transaction (dry: nothing)."""
        if self._producer is None:
            return
        assert verdict.target is not None
        if not self._in_transaction:
            self._producer.begin_transaction()
            self._in_transaction = True
        count = verdict.count + 1
        partition, offset = _where(record)
        headers: list[tuple[str, str | bytes | None]] = [
            *redriven_headers(_headers(record), count, f"{record.topic()}[{partition}]@{offset}")
        ]
        self._producer.produce(verdict.target, key=record.key(), value=record.value(), headers=headers)
        redrives = topics.redrives_topic(self.request.instance, self.request.prefix)
        self._producer.produce(redrives, key=verdict.message_id.encode(), value=str(count).encode())
        self._producer.poll(0)
        counts[verdict.message_id] = count

    def _commit(self, consumer: Consumer) -> None:
        """Commit the open transaction with the group's offsets up to what was read (dry: nothing)."""
        if self._producer is None:
            return
        try:
            if not self._in_transaction:
                self._producer.begin_transaction()
                self._in_transaction = True
            offsets = [TopicPartition(self.request.topic, p, o) for p, o in sorted(self._positions.items())]
            self._producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            self._producer.commit_transaction(60)
            self._in_transaction = False
        except KafkaException as exc:
            raise KafkaUnavailable(
                f"committing a redrive transaction at {bootstrap_of(self.kafka)}: {exc.args[0]}; nothing of "
                "it was written: run the redrive again"
            ) from exc

    def _abort(self) -> None:
        if self._producer is not None and self._in_transaction:
            try:
                self._producer.abort_transaction(30)
            except KafkaException as exc:
                self.say(
                    f"warning: aborting the transaction failed ({exc.args[0]}); the broker aborts it "
                    f"within {TRANSACTION_TIMEOUT_MS // 1000} s, or the next run does"
                )
            self._in_transaction = False
