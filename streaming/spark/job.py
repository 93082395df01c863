"""The Spark Structured Streaming job that routes one instance's traffic.

Sources (the Spark Kafka connector): the instance's outbound topic (messages its own services send;
origin = the sending database) and inbound topic (messages from other instances; origin = remote,
whatever the record claims); the delayed, choices and requests topics, which its own micro-batches
write and the query reads back into the router's state; and Spark's rate source as a
one-row-per-second tick, so that a micro-batch runs, and delayed messages fall due, even when no
traffic arrives.

Inside the query, before the micro-batch: every record is decoded with `from_avro`, and a stateful
JVM processor whose state is in Spark's state store (`streaming.spark.state`) gives each message
its conversation's kept choice (K2) and says whether the conversation has delayed messages
waiting (D1); it lets a delayed conversation's messages go, ahead of its new ones, when they are
due (D2), and tells the batch which MissingRoute requests are outstanding (B4).

Each micro-batch (`RouterJob.process_batch`):
1. refreshes the route snapshot when the routes topic's end offsets changed (`RouteSnapshots`),
   and ends the outstanding requests whose service now has a route (B6, B7);
2. a record that does not decode, or names an unknown origin database, goes to the dead-letter
   topic with its error;
3. decides with the Spark engine (`streaming.spark.engine.decide`);
4. writes every message with the Kafka sink's `topic` column to its destination, with the decision
   in its headers; delayed ones to the delayed topic, dropped and discarded ones to the dropped topic;
   the choices the decisions made go to the choices topic in the same write;
5. sends a MissingRoute request for each new M4 request (B3) and records it on the requests topic.

Delivery is at least once: a batch that fails before Spark commits it is run again, and a message
may then be written twice (receivers drop duplicates, A4). Nothing is lost.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro
from pyspark.sql.streaming import StreamingQuery

from streaming import topics
from streaming.config import Settings
from streaming.errors import ConfigError, RouterError
from streaming.kafka.admin import end_offsets, ensure_topics
from streaming.kafka.avro import encode_message, new_message_record, schema_json
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    MISSING_ROUTE_MESSAGE_TYPE,
    Instance,
    MirrorRole,
    normalize_address,
)
from streaming.spark.engine import (
    KEPT_COLUMNS,
    ROUTE_SCHEMA,
    Snapshot,
    batch_context,
    build_snapshot,
    decide,
    local_frame,
    normalize_address_sql,
)
from streaming.spark.state import (
    PENDING_COLUMN,
    apply_state,
    as_choices,
    as_delayed,
    as_messages,
    as_requests,
    choice_records,
    request_record,
)
from streaming.tables.topic_io import read_catalogs, read_latest

log = logging.getLogger("streaming.job")

_GUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
SOURCE_DELAYED, SOURCE_OUTBOUND, SOURCE_INBOUND = 0, 1, 2


def _offsets_json(topic: str, offsets: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in offsets.items()}})


def _version(offsets: dict[int, int]) -> str:
    return ",".join(f"p{p}:{o}" for p, o in sorted(offsets.items())) or "empty"


@dataclass
class Topology:
    """The instance's catalog and every topic name its job reads or writes."""

    instance: Instance
    prefix: str
    inbound_by_address: dict[str, str]

    @property
    def outbound(self) -> str:
        """The topic the instance's services write to."""
        return topics.outbound_topic(self.instance.name, self.prefix)

    @property
    def inbound(self) -> str:
        """The topic other instances write to."""
        return topics.inbound_topic(self.instance.name, self.prefix)

    @property
    def delayed(self) -> str:
        """Delayed messages."""
        return topics.delayed_topic(self.instance.name, self.prefix)

    @property
    def choices(self) -> str:
        """The route choices its decisions made (compacted; read back by the query, K2)."""
        return topics.choices_topic(self.instance.name, self.prefix)

    @property
    def requests(self) -> str:
        """MissingRoute requests sent and ended (compacted; read back by the query, B4)."""
        return topics.requests_topic(self.instance.name, self.prefix)

    @property
    def dropped(self) -> str:
        """Dropped and discarded messages."""
        return topics.dropped_topic(self.instance.name, self.prefix)

    @property
    def deadletter(self) -> str:
        """Records that do not decode."""
        return topics.deadletter_topic(self.instance.name, self.prefix)


def load_topology(settings: Settings) -> Topology:
    """Read the catalogs topic and find this instance; every other instance is an inbound address."""
    instances, _ = read_catalogs(settings.bootstrap, topics.catalogs_topic(settings.topic_prefix))
    by_name = {i.name: i for i in instances}
    if settings.instance not in by_name:
        raise ConfigError(
            f"instance {settings.instance!r} is not in the catalogs topic "
            f"{topics.catalogs_topic(settings.topic_prefix)!r} (found {sorted(by_name)}); "
            "load it with `router catalogs load FILE`"
        )
    return Topology(
        instance=by_name[settings.instance],
        prefix=settings.topic_prefix,
        inbound_by_address={
            normalize_address(i.address): topics.inbound_topic(i.name, settings.topic_prefix)
            for i in instances
        },
    )


class RouteSnapshots:
    """The current route snapshot, rebuilt from the compacted routes topic when its end offsets move."""

    def __init__(self, spark: SparkSession, settings: Settings, topology: Topology) -> None:
        self.spark = spark
        self.settings = settings
        self.topology = topology
        self.routes_topic = topics.routes_topic(settings.topic_prefix)
        self.current: Snapshot | None = None
        self._offsets: tuple[dict[int, int], dict[int, int]] | None = None

    def refresh(self) -> Snapshot:
        """Return the snapshot of the routes as they are now (reading the topic only if it changed)."""
        routes_end = end_offsets(self.settings.bootstrap, self.routes_topic)
        mirrors_end = end_offsets(self.settings.bootstrap, topics.mirrors_topic(self.settings.topic_prefix))
        if self.current is not None and self._offsets == (routes_end, mirrors_end):
            return self.current
        routes = self._read_routes(routes_end)
        mirrors = self._read_mirrors()
        version = f"routes@{_version(routes_end)}"
        name = self.topology.instance.name
        snapshot = build_snapshot(
            self.spark,
            {name: self.topology.instance},
            routes,
            mirrors={name: mirrors},
            version=version,
            cache=True,
        )
        if self.current is not None:
            self.current.unpersist()
        self.current, self._offsets = snapshot, (routes_end, mirrors_end)
        log.info("route snapshot %s loaded", version)
        return snapshot

    def _read_routes(self, ends: dict[int, int]) -> DataFrame:
        """The whole compacted topic up to `ends`: last value per key, tombstones applied."""
        if not any(ends.values()):
            return local_frame(self.spark, [], ROUTE_SCHEMA)
        raw = (
            self.spark.read.format("kafka")
            .options(**self._kafka_options())
            .option("subscribe", self.routes_topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", _offsets_json(self.routes_topic, ends))
            .load()
        )
        latest = raw.groupBy("key").agg(F.max_by("value", F.struct("partition", "offset")).alias("value"))
        decoded = latest.where(F.col("value").isNotNull()).select(
            from_avro("value", schema_json("route"), {"mode": "PERMISSIVE"}).alias("r")
        )
        return decoded.where(F.col("r").isNotNull()).select(
            F.lit(self.topology.instance.name).alias("instance"),
            "r.scope",
            "r.name",
            "r.service",
            "r.broker_instance",
            "r.address",
            "r.mirror_address",
            F.col("r.expires_at").cast("timestamp").alias("expires_at"),
        )

    def _read_mirrors(self) -> dict[str, MirrorRole]:
        latest, _ = read_latest(self.settings.bootstrap, topics.mirrors_topic(self.settings.topic_prefix))
        roles: dict[str, MirrorRole] = {}
        for key, stored in latest.items():
            try:
                roles[normalize_address(key)] = MirrorRole(stored.value.decode("utf-8").strip().lower())
            except ValueError:
                log.warning("mirrors topic: key %r has an unknown role %r; ignored", key, stored.value)
        return roles

    def _kafka_options(self) -> dict[str, str]:
        return kafka_options(self.settings)


def kafka_options(settings: Settings) -> dict[str, str]:
    """Options for the Spark Kafka source and sink."""
    return {"kafka.bootstrap.servers": settings.bootstrap, **settings.kafka_options}


class RouterJob:
    """One instance's router: the streaming query and the work of each micro-batch."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.topology = load_topology(settings)
        self.snapshots = RouteSnapshots(spark, settings, self.topology)
        # What this run wrote that its query has not read back yet (see `start`).
        self.available_now = False
        self.delayed_this_run: set[str] = set()
        self.requests_this_run: dict[tuple[str, str], bool] = {}
        self._answers_checked: str | None = None  # the snapshot version requests were last checked at
        self.known_topics: set[str] = set()
        self.batches = 0
        self.routed = 0
        self._message_schema = schema_json("message")
        ensure_topics(settings.bootstrap, [self.topology.outbound, self.topology.inbound])
        ensure_topics(settings.bootstrap, [self.topology.dropped, self.topology.deadletter])
        ensure_topics(
            settings.bootstrap, [self.topology.delayed], config={"message.timestamp.type": "LogAppendTime"}
        )
        ensure_topics(
            settings.bootstrap,
            [
                topics.routes_topic(settings.topic_prefix),
                topics.mirrors_topic(settings.topic_prefix),
                self.topology.choices,
                self.topology.requests,
            ],
            compacted=True,
        )
        # Route nothing before the whole routes topic has been read once.
        self.snapshots.refresh()

    # --- the streaming query ------------------------------------------------------------------

    @property
    def keeps_choices(self) -> bool:
        """Whether conversations keep their route choices (K2): `keep_choice_s` > 0."""
        return self.settings.keep_choice_s > 0

    def input_stream(self) -> DataFrame:
        """The query's rows as the state processor leaves them (see `streaming.spark.state`).

        Read from the outbound and inbound topics, the delayed, choices and requests topics (each a
        source of its own, so that `max_offsets_per_trigger` counts new messages only), and a
        one-row-per-second tick that only makes micro-batches run (its rows are left out here):
        delayed messages fall due and choices expire even when no traffic arrives.
        """
        t = self.topology
        tick = self._tick().where(F.lit(False))
        messages = self._decode(self._kafka([t.outbound, t.inbound], limit=True).unionByName(tick))
        rows = as_messages(messages)
        delayed = self._kafka([t.delayed], limit=False, headers=True)
        kept = {c: _header_value(c) for c in KEPT_COLUMNS}
        rows = rows.unionByName(
            as_delayed(self._decode(delayed.withColumns(kept), passed=(*KEPT_COLUMNS, "timestamp")))
        )
        if self.keeps_choices:
            rows = rows.unionByName(as_choices(self._kafka([t.choices], limit=False), messages))
        rows = rows.unionByName(as_requests(self._kafka([t.requests], limit=False), messages))
        return apply_state(rows, self.settings.keep_choice_s, self.topology.instance.retry_s)

    def _kafka(self, subscribe: list[str], limit: bool, headers: bool = False) -> DataFrame:
        reader = (
            self.spark.readStream.format("kafka")
            .options(**kafka_options(self.settings))
            .option("subscribe", ",".join(subscribe))
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "false")
        )
        if limit:
            reader = reader.option("maxOffsetsPerTrigger", str(self.settings.max_offsets_per_trigger))
        if headers:
            reader = reader.option("includeHeaders", "true")
        columns = ["topic", "partition", "offset", "value", "timestamp", *(["headers"] if headers else [])]
        return reader.load().select(*columns)

    def _tick(self) -> DataFrame:
        return (
            self.spark.readStream.format("rate")
            .option("rowsPerSecond", 1)
            .load()
            .select(
                F.lit(None).cast("string").alias("topic"),
                F.lit(-1).alias("partition"),
                F.col("value").alias("offset"),
                F.lit(None).cast("binary").alias("value"),
                F.col("timestamp"),
            )
        )

    def start(self, available_now: bool) -> StreamingQuery:
        """Start the query: continuous micro-batches (`run`) or what the topics hold now (`replay`).

        With Trigger.AvailableNow the query reads each topic up to its end when it starts, so it
        does not read back the delayed messages and requests its own batches write: the job
        remembers those until the run ends (`delayed_this_run`, `requests_this_run`), and the next
        run reads them into the state.
        """
        checkpoint = self.checkpoint
        dropped = drop_uncommitted_batch(checkpoint)
        if dropped is not None:
            log.warning(
                "batch %d was planned but not committed before the job stopped; it is planned again "
                "from the last committed offsets (nothing is skipped)",
                dropped,
            )
        # A batch runs only when a source has new records (the tick's, at least). Otherwise the
        # state processor's timeouts would make Spark add a batch without data after each one,
        # and an AvailableNow query would never end.
        self.spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        self.available_now = available_now
        self.delayed_this_run.clear()
        self.requests_this_run.clear()
        writer = (
            self.input_stream()
            .writeStream.foreachBatch(self.process_batch)
            .option("checkpointLocation", str(checkpoint))
            .queryName(f"router-{self.topology.instance.name}")
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.settings.trigger_seconds} seconds")
        return writer.start()

    @property
    def checkpoint(self) -> Path:
        """The streaming query's checkpoint folder (its offsets, commits and state store)."""
        return Path(self.settings.checkpoint_dir) / "query"

    def replay(self, timeout_s: int | None = None) -> None:
        """Route what the input topics hold now (Trigger.AvailableNow) and stop the query.

        Raises RouterError when the query failed or did not finish within `timeout_s`.
        """
        query = self.start(available_now=True)
        try:
            finished = (
                query.awaitTermination(timeout_s) if timeout_s is not None else query.awaitTermination()
            )
        finally:
            query.stop()
        if query.exception() is not None:
            raise RouterError(f"the {self.topology.instance.name} router failed: {query.exception()}")
        if finished is False:
            raise RouterError(f"the {self.topology.instance.name} replay did not finish within {timeout_s} s")

    def waiting(self) -> list[int]:
        """When each delayed message in the state store was delayed (epoch ms), as of the last batch."""
        if not logged_batches(self.checkpoint / "commits"):
            return []
        state = self.spark.read.format("statestore").load(str(self.checkpoint))
        rows = state.select(F.explode("value.groupState.waiting.delayed_ms").alias("at")).collect()
        return sorted(r["at"] for r in rows)

    # --- one micro-batch ----------------------------------------------------------------------

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Route one micro-batch (see the module docstring)."""
        started = time.monotonic()
        snapshot = self.snapshots.refresh()
        now = datetime.now(timezone.utc)
        # Computed once: the state processor runs once per batch, and the rules read the rows again.
        rows = batch.localCheckpoint(eager=True)
        pending = self._pending_requests(rows)
        if pending and snapshot.version != self._answers_checked:
            pending -= self._end_answered_requests(snapshot, pending)
            self._answers_checked = snapshot.version
        decoded = rows.where(F.col("topic").isNotNull()).drop(PENDING_COLUMN)
        count, released = self._route(decoded, snapshot, now, pending)
        self.batches += 1
        self.routed += count
        if count:
            log.info(
                "batch %d: %d records (%d due from delayed) in %.2fs, snapshot %s",
                batch_id,
                count,
                released,
                time.monotonic() - started,
                snapshot.version,
            )

    def _pending_requests(self, rows: DataFrame) -> set[tuple[str, str]]:
        """B4: the outstanding MissingRoute requests, from the state's status row and this run."""
        status = rows.where(F.col(PENDING_COLUMN).isNotNull()).select(PENDING_COLUMN).collect()
        pending = {(p["scope"], p["service"]) for r in status for p in r[PENDING_COLUMN]}
        for request, asked in self.requests_this_run.items():
            if asked:
                pending.add(request)
            else:
                pending.discard(request)
        return pending

    def _end_answered_requests(
        self, snapshot: Snapshot, pending: set[tuple[str, str]]
    ) -> set[tuple[str, str]]:
        """B6/B7: a pending MissingRoute request ends once a route naming its service exists in its scope.

        Its conversations are re-routed at their next retry (D3), against the new route. Returns
        the requests that ended; each is recorded on the requests topic.
        """
        if not pending:
            return set()
        answered = {
            (r["n_scope"], r["n_service"])
            for r in snapshot.named.where(F.col("n_service").isin(*{s for _, s in pending}))
            .select("n_scope", "n_service")
            .collect()
            if (r["n_scope"], r["n_service"]) in pending
        }
        self._record_requests(sorted(answered), asked=False)
        return answered

    def _record_requests(
        self, requests: list[tuple[str, str]], asked: bool, producer: Producer | None = None
    ) -> None:
        """Write request records (sent or ended) to the requests topic; the query reads them back."""
        if not requests:
            return
        own = producer is None
        producer = producer or Producer({"bootstrap.servers": self.settings.bootstrap})
        name = self.topology.instance.name
        for scope, service in requests:
            key, value = request_record(name, scope, service, asked)
            producer.produce(self.topology.requests, key=key, value=value)
            self.requests_this_run[(scope, service)] = asked
        if own:
            producer.flush(30)

    def _decode(self, records: DataFrame, passed: tuple[str, ...] = ()) -> DataFrame:
        """Decode each record; `error` says why one is malformed (it then goes to the dead-letter topic).

        The `passed` columns of `records` are kept as they are.
        """
        t = self.topology
        source = (
            F.when(F.col("topic") == t.delayed, SOURCE_DELAYED)
            .when(F.col("topic") == t.outbound, SOURCE_OUTBOUND)
            .otherwise(SOURCE_INBOUND)
        )
        rec = from_avro(F.col("value"), self._message_schema, {"mode": "PERMISSIVE"})
        databases = [d.name for d in t.instance.databases]
        frame = records.withColumn("_source", source).withColumn("rec", rec)
        raw_bid = F.lower(F.regexp_replace(F.trim(F.col("rec.to_broker_instance")), r"[{}]", ""))
        compact = F.regexp_replace(raw_bid, "-", "")
        bid = F.when(
            compact.rlike("^[0-9a-f]{32}$"),
            F.concat_ws(
                "-",
                F.substring(compact, 1, 8),
                F.substring(compact, 9, 4),
                F.substring(compact, 13, 4),
                F.substring(compact, 17, 4),
                F.substring(compact, 21, 12),
            ),
        )
        # An inbound record is remote whatever it claims (S3); an outbound one names its database.
        origin = F.when(F.col("_source") == SOURCE_INBOUND, F.lit("remote")).otherwise(
            F.col("rec.origin_database")
        )
        error = (
            F.when(F.col("value").isNull(), F.lit("empty record (no value)"))
            # PERMISSIVE from_avro gives null, or a record of nulls, for bytes that do not decode.
            .when(
                F.col("rec").isNull()
                | F.col("rec.message_id").isNull()
                | F.col("rec.conversation_id").isNull()
                | F.col("rec.to_service").isNull()
                | F.col("rec.enqueued_at").isNull(),
                F.lit("value does not decode as Avro router.v1.Message"),
            )
            .when(F.length(F.col("rec.to_service")) == 0, F.lit("to_service is empty"))
            .when(
                F.col("rec.to_broker_instance").isNotNull() & bid.isNull(),
                F.concat(F.lit("to_broker_instance is not a GUID: "), F.col("rec.to_broker_instance")),
            )
            .when(
                (F.col("_source") != SOURCE_INBOUND)
                & ~F.coalesce(F.col("rec.origin_database").isin(*databases), F.lit(False)),
                F.concat(
                    F.lit("origin_database is not a database of this instance: "),
                    F.coalesce(F.col("rec.origin_database"), F.lit("null")),
                ),
            )
        )
        # Batch order: due delayed records first, then outbound, then inbound; within a source by
        # partition and offset (a conversation's records share a partition: its id is the key).
        pos = (
            F.lit(1 << 58) * F.col("_source")
            + F.lit(1 << 44) * F.greatest(F.col("partition"), F.lit(0)).cast("long")
            + F.col("offset")
        )
        ttl_s = F.when(
            F.col("rec.expires_at").isNotNull(),
            (F.unix_millis(F.col("rec.expires_at").cast("timestamp")) - F.unix_millis(F.current_timestamp()))
            / 1000.0,
        ).otherwise(F.col("rec.time_to_live_ms") / 1000.0)
        return frame.select(
            "topic",
            "partition",
            "offset",
            "value",
            "rec",
            error.alias("error"),
            pos.cast("long").alias("pos"),
            F.lit(t.instance.name).alias("instance"),
            F.coalesce(F.col("rec.message_id"), F.lit("")).alias("id"),
            F.coalesce(F.col("rec.conversation_id"), F.lit("")).alias("conversation_id"),
            F.coalesce(F.col("rec.to_service"), F.lit("")).alias("service"),
            F.coalesce(origin, F.lit("")).alias("origin"),
            bid.alias("bid"),
            (~F.coalesce(F.col("rec.is_initiator"), F.lit(True))).alias("from_target"),
            F.coalesce(F.col("rec.message_type"), F.lit("DEFAULT")).alias("message_type"),
            F.coalesce(F.col("rec.hops_remaining"), F.lit(16)).alias("hops_remaining"),
            ttl_s.cast("double").alias("ttl_s"),
            F.coalesce(F.length(F.col("rec.body")), F.lit(0)).cast("long").alias("size_bytes"),
            *passed,
        )

    def _route(
        self, decoded: DataFrame, snapshot: Snapshot, now: datetime, pending: set[tuple[str, str]]
    ) -> tuple[int, int]:
        """Decide, write every record to its destination, send MissingRoute requests.

        Returns the count of records routed and of those that were delayed messages falling due.

        The destination topic is a function of few values (the database and service of a delivery,
        the address of a send), so the distinct destinations of the batch are gathered first, named
        on the driver with `streaming.topics`, and joined back to the rows by broadcast.
        """
        good = decoded.where(F.col("error").isNull())
        bad = decoded.where(F.col("error").isNotNull())
        name = self.topology.instance.name
        context = batch_context(
            self.spark,
            now,
            pending=frozenset((name, scope, service) for scope, service in pending),
            # The state says which conversations wait (`waiting`); a replay's own delays it cannot.
            waiting=frozenset((name, conversation) for conversation in self.delayed_this_run),
        )
        decided = decide(good, snapshot, context).withColumns(_destination_columns())
        released = (F.col("topic") == self.topology.delayed).alias("_released")
        groups = decided.groupBy(*_DEST_KEYS, released).agg(F.count("*").alias("count")).collect()
        bad_count = bad.count()
        destinations = sorted(
            {(r["_kind"], r["_db"], r["_svc"], r["_addr"], self._topic_for(r)) for r in groups}
        )
        names = {d[-1] for d in destinations} | ({self.topology.deadletter} if bad_count else set())
        new = sorted(names - self.known_topics)
        if new:
            ensure_topics(self.settings.bootstrap, new)
            self.known_topics.update(new)
        schema = "_kind string, _db string, _svc string, _addr string, _dest_topic string"
        table = local_frame(self.spark, destinations, schema)
        out = self._output_rows(decided, table, snapshot, now)
        if bad_count:
            out = out.unionByName(self._deadletter_rows(bad, now))
        if self.keeps_choices:
            change = _headers([("change", F.col("k_change"))])
            out = out.unionByName(choice_records(decided, self.topology.choices, change))
        out.write.format("kafka").options(**kafka_options(self.settings)).save()
        requests: list[tuple[str, str]] = []
        if snapshot.has_bcn:  # M4 needs a route to the dynamic routing service
            asked = decided.where(F.col("requests").isNotNull()).select("d_scope", "requests")
            requests = [(r["d_scope"], r["requests"]) for r in asked.collect()]
        self._send_requests(requests, pending)
        if self.available_now and any(r["_kind"] == "delayed" for r in groups):
            delayed = decided.where(F.col("outcome") == "delayed").select("conversation_id").distinct()
            self.delayed_this_run.update(r["conversation_id"] for r in delayed.collect())
        due = sum(r["count"] for r in groups if r["_released"])
        return sum(r["count"] for r in groups) + bad_count, due

    def _topic_for(self, destination: Row) -> str:
        """The topic of one distinct destination (see `_destination_columns`)."""
        t = self.topology
        kind = destination["_kind"]
        if kind == "queue":
            return topics.queue_topic(t.instance.name, destination["_db"], destination["_svc"], t.prefix)
        if kind == "address":
            address = destination["_addr"]
            return t.inbound_by_address.get(address) or topics.network_topic(address, t.prefix)
        return t.delayed if kind == "delayed" else t.dropped

    def _output_rows(
        self, decided: DataFrame, table: DataFrame, snapshot: Snapshot, now: datetime
    ) -> DataFrame:
        t = self.topology
        outcome = F.col("outcome")
        keyed = decided.join(
            F.broadcast(table.withColumnsRenamed({k: f"t{k}" for k in _DEST_KEYS})),
            [decided[k].eqNullSafe(F.col(f"t{k}")) for k in _DEST_KEYS],
            "left",
        )
        rec = F.col("rec")
        rec = rec.withField(
            "hops_remaining",
            F.when(outcome == "forward", F.col("d_hops_remaining")).otherwise(rec["hops_remaining"]),
        ).withField(
            "attempt",
            F.when(F.col("topic") == t.delayed, rec["attempt"] + 1).otherwise(rec["attempt"]),
        )
        decided_at = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        due_at = datetime.fromtimestamp(now.timestamp() + self.topology.instance.retry_s, timezone.utc)
        headers = _headers(
            [
                ("outcome", outcome),
                ("route", F.col("d_route")),
                ("match_step", F.col("match_step")),
                ("choice_step", F.col("choice_step")),
                ("reason", F.col("reason")),
                ("database", F.col("d_database")),
                ("address", F.col("d_address")),
                ("scope", F.col("d_scope")),
                ("requests", F.col("requests")),
                ("snapshot_version", F.lit(snapshot.version)),
                ("decided_at", F.lit(decided_at)),
                ("router_instance", F.lit(t.instance.name)),
                ("due_at", F.when(outcome == "delayed", F.lit(due_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")))),
                # K2: a delayed message takes its conversation's kept choice along (`_due_messages`).
                *[(c, F.when(outcome == "delayed", F.col(c))) for c in KEPT_COLUMNS],
            ]
        )
        # Every row has a destination: the table holds each (kind, db, svc, addr) the batch has.
        return keyed.select(
            F.col("conversation_id").cast("binary").alias("key"),
            to_avro(rec, self._message_schema).alias("value"),
            F.col("_dest_topic").alias("topic"),
            headers.alias("headers"),
        )

    def _deadletter_rows(self, bad: DataFrame, now: datetime) -> DataFrame:
        headers = _headers(
            [
                ("error", F.col("error")),
                ("source_topic", F.col("topic")),
                ("source_partition", F.col("partition").cast("string")),
                ("source_offset", F.col("offset").cast("string")),
                ("decided_at", F.lit(now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))),
            ]
        )
        return bad.select(
            F.lit(None).cast("binary").alias("key"),
            F.col("value"),
            F.lit(self.topology.deadletter).alias("topic"),
            headers.alias("headers"),
        )

    def _send_requests(self, requests: list[tuple[str, str]], pending: set[tuple[str, str]]) -> None:
        """B3/B4: one MissingRoute message to the BCN service per (scope, service) not yet pending.

        Each is recorded on the requests topic as outstanding, for the state to hold (B4).
        """
        new = [r for r in dict.fromkeys(requests) if r not in pending]
        if not new:
            return
        producer = Producer({"bootstrap.servers": self.settings.bootstrap})
        now = datetime.now(timezone.utc)
        for scope, service in new:
            body = (
                '<MissingRoute xmlns="http://schemas.microsoft.com/SQL/ServiceBroker/BrokerConfigurationNotice'
                f'/MissingRoute"><SERVICE_NAME>{_xml_escape(service)}</SERVICE_NAME></MissingRoute>'
            )
            conversation = f"missing-route-{uuid.uuid4()}"
            record = new_message_record(
                message_id=conversation,
                conversation_id=conversation,
                to_service=BROKER_CONFIGURATION_SERVICE,
                from_service=BROKER_CONFIGURATION_SERVICE,
                enqueued_at=now,
                body=body.encode("utf-8"),
                origin_database=scope,
                message_type=MISSING_ROUTE_MESSAGE_TYPE,
            )
            producer.produce(self.topology.outbound, key=conversation.encode(), value=encode_message(record))
        self._record_requests(new, asked=True, producer=producer)
        producer.flush(30)


_DEST_KEYS = ("_kind", "_db", "_svc", "_addr")


def _destination_columns() -> dict[str, Column]:
    """What a decided row's destination topic depends on.

    The kind, and its database and service (deliver) or its normalized address (send, forward).
    """
    outcome = F.col("outcome")
    deliver = outcome == "deliver"
    sends = outcome.isin("send", "forward")
    return {
        "_kind": F.when(deliver, F.lit("queue"))
        .when(sends, F.lit("address"))
        .when(outcome == "delayed", F.lit("delayed"))
        .otherwise(F.lit("dropped")),
        "_db": F.when(deliver, F.col("d_database")),
        "_svc": F.when(deliver, F.col("service")),
        "_addr": F.when(sends, normalize_address_sql(F.col("d_address"))),
    }


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _headers(pairs: list[tuple[str, Column]]) -> Column:
    """Kafka headers from (name, string column) pairs; a null value leaves its header out."""
    entries = F.array(
        *[F.struct(F.lit(k).alias("key"), v.cast("string").cast("binary").alias("value")) for k, v in pairs]
    )
    return F.filter(entries, lambda h: h["value"].isNotNull())


def _header_value(name: str) -> Column:
    """The value of a record's first Kafka header called `name`, as a string (null when none)."""
    named = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return F.get(named, 0)["value"].cast("string")


def logged_batches(log: Path) -> list[int]:
    """The batch ids a query's offset or commit log holds (its files named by number)."""
    return [int(p.name) for p in log.glob("[0-9]*")] if log.is_dir() else []


def drop_uncommitted_batch(checkpoint: Path) -> int | None:
    """Remove the offset-log entry of a batch that was planned but never committed; return its id.

    After a crash the query would run that batch again from the logged offsets, without asking the
    Kafka source for its latest offsets first, and Spark 4.1.1's Kafka source then fails the
    batch's progress report with a NullPointerException (SPARK-55271), after the batch's output
    is written: the job stops once more at every such restart. Without the entry the batch is
    planned again from the last committed offsets, as a new batch with the same id. Delivery stays
    at least once: records the lost attempt wrote may be written again, none is skipped.

    When no batch was ever committed, the query starts anew, and Spark wants an empty state folder
    for a first batch: what a lost first attempt wrote under `state/` is removed, also when it was
    killed before it logged its offsets (the state's schema files are written while planning).
    Temporary files of a log entry that was being written are removed too.
    """
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    for folder in (offsets, commits):
        # A log file being written when the job died stays behind as `.N.<uuid>.tmp` (and its
        # `.crc`); Spark refuses a first batch whose commit log holds any file.
        for leftover in folder.iterdir() if folder.is_dir() else ():
            if ".tmp" in leftover.name:
                leftover.unlink(missing_ok=True)
    planned, done = logged_batches(offsets), logged_batches(commits)
    if not done:
        shutil.rmtree(checkpoint / "state", ignore_errors=True)
    if not planned or max(planned) <= max(done, default=-1):
        return None
    last = max(planned)
    for path in (offsets / str(last), offsets / f".{last}.crc"):
        path.unlink(missing_ok=True)
    return last


def run_until_drained(job: RouterJob, max_wait_s: float, progress: Callable[[str], None] = print) -> int:
    """After a replay, replay again as delayed messages fall due, until none wait or time runs out.

    Each replay reads what the last one delayed into the state and routes the conversations that
    are due (D2). Returns how many delayed messages still wait.
    """
    retry_s = job.topology.instance.retry_s
    deadline = time.monotonic() + max_wait_s
    while True:
        if job.delayed_this_run:  # delayed by the last replay, not read back into the state yet
            job.replay()
        waiting = job.waiting()
        if not waiting or time.monotonic() >= deadline:
            return len(waiting)
        wait = waiting[0] / 1000 + retry_s - time.time()
        if wait > 0:
            progress(f"{len(waiting)} delayed message(s) waiting; next due in {wait:.1f}s")
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
        job.replay()
