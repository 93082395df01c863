"""The Spark Structured Streaming job that routes one instance's traffic (or several instances').

The data's path, each step in its module:

1. `streaming.spark.sources`: the query reads the outbound and inbound topics (and the delayed and
   choices topics its batches write), decodes each record into the columns the rules read, and
   the state processor (`streaming.spark.state`) gives each message its conversation's memory:
   the choice it kept (K2), whether delayed messages of it wait (D1), and its delayed messages
   once they are due (D2).
2. `streaming.spark.snapshot`: before each micro-batch, the route snapshot as the routes and
   mirror roles are now (read incrementally from their compacted topics), and the topics it can
   route to, created when it changes; `streaming.spark.rotation`: the turn of equal routes (C5,
   M3), kept from batch to batch with the checkpoint.
3. `streaming.spark.batch`: the micro-batch is decided (`streaming.spark.decision`) and every record
   it gives (`streaming.spark.output`) written in one Kafka write; its observed metrics tell the
   driver what it needs (`streaming.spark.requests` keeps the MissingRoute requests, B4).
4. `streaming.spark.progress`: one line per batch for a person.

`RouterJob.run` routes until told to stop, and stops between micro-batches; `RouterJob.replay`
routes what the input topics hold when it starts, and what its own batches wrote back (delayed
messages, choices), then stops. Delivery is at least once: a batch that fails or is cut short
before Spark commits it is run again from the checkpoint, and its messages may then be written
twice (receivers drop duplicates, A4). Nothing is lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from streaming import topics
from streaming.config import Settings
from streaming.contract import Outcome
from streaming.errors import ConfigError, KafkaUnavailable, RouterError, short_error
from streaming.kafka.admin import (
    admin_client,
    brokers_listed,
    cluster_metadata,
    create_destination_topics,
    end_offsets,
    ensure_topics,
    replication_of,
)
from streaming.kafka.broker_watch import BrokerWatch, brokers_of
from streaming.kafka.client_log import collapse_outages
from streaming.kafka.progress_group import ProgressGroups
from streaming.observe.server import Health
from streaming.rules.model import normalize_address
from streaming.spark.batch import BatchMetrics, BatchPlan, empty_batch
from streaming.spark.checkpoint import (
    CHANGING_PARTITIONS,
    SHUFFLE_PARTITIONS,
    check_state_partitions,
    drop_uncommitted_batch,
    holds_old_state,
    logged_batches,
    query_folder,
    read_logged_batch,
    starting_offsets,
    summarize,
)
from streaming.spark.checkpoint_files import CheckpointPath, locate
from streaming.spark.decision import DecisionInputs, Snapshot
from streaming.spark.executors import ExecutorWatch
from streaming.spark.metrics import Liveness, RouterMetrics, judge
from streaming.spark.output import Destinations
from streaming.spark.progress import BatchReport, RunTotals, lag, partition_lag, source_offsets
from streaming.spark.requests import OutstandingRequests
from streaming.spark.rotation import RotationStore
from streaming.spark.session import session_jvm
from streaming.spark.snapshot import RouteSnapshots
from streaming.spark.sources import input_stream, tick_name, write_options
from streaming.spark.state import held_counts, held_figures, held_state, held_timers, read_state, state_counts
from streaming.spark.tick import TickPace, idle_pace_s, source_pace_ms
from streaming.tables.reader import read_instances
from streaming.topology import Topology

log = logging.getLogger("streaming.job")

STOP_GRACE_S = 60.0
"""How long a stop waits for the micro-batch in flight to finish before it abandons it."""

KAFKA_PROBE_EVERY_S = 5.0
"""While micro-batches are late, how often `/healthz` has Kafka asked whether it answers."""

BROKERS_CHECK_EVERY_S = 5.0
"""How often `run` asks which brokers the cluster lists, to say when one goes away and comes back."""

STOPPED = "router stop requested: the batch was left for the next start"
"""The message of the error a batch raises, before doing anything, once a stop was asked for."""


class BatchFailed(RouterError):
    """A micro-batch failed; its message is short, and the full error is in the log."""


def load_topology(settings: Settings) -> Topology:
    """Read the catalogs topic and find the job's instances; every instance is an inbound address."""
    topic = topics.catalogs_topic(settings.topic_prefix)
    by_name = read_instances(settings.kafka, topic, settings.instances)
    return Topology(
        instances=tuple(by_name[name] for name in settings.instances),
        prefix=settings.topic_prefix,
        inbound_by_address={
            normalize_address(i.address): topics.inbound_topic(i.name, settings.topic_prefix)
            for i in by_name.values()
        },
    )


def input_topics(settings: Settings) -> dict[str, str]:
    """Each topic the job reads messages from (outbound, inbound, delayed), with its instance."""
    prefix = settings.topic_prefix
    kinds = (topics.outbound_topic, topics.inbound_topic, topics.delayed_topic)
    return {kind(instance, prefix): instance for instance in settings.instances for kind in kinds}


PREPARE_WAIT_S = 30.0
"""How long `close` waits for the batch plan's preparation (`RouterJob._prepare_plan`) to end."""

RESUMED_READ_WAIT_S = 30.0
"""How long a stop waits for the background read of the resumed state (`RouterJob._read_resumed`)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


class RouterJob:
    """The router of one instance, or of several in one query: the query and each micro-batch's work."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        *,
        count_jobs: bool = False,
        metrics: RouterMetrics | None = None,
    ) -> None:
        """`metrics`: where the job's figures go for Prometheus (`streaming.spark.metrics`), if anywhere."""
        self.spark = spark
        self.settings = settings
        self._checkpoint = query_folder(locate(settings.checkpoint_dir, spark))
        self.topology = t = load_topology(settings)
        kafka = settings.kafka
        # Asked once: the topics of the whole run get these replicas, even one created while a broker
        # is away (its creation then fails as Kafka unavailable, rather than make it with fewer).
        metadata = cluster_metadata(kafka)
        self.replication = replicas = replication_of(kafka, metadata)
        self._brokers = BrokerWatch(brokers_of(metadata), log, quiet_s=BROKERS_CHECK_EVERY_S)
        self._brokers_asked_at = float("-inf")
        ensure_topics(kafka, [*t.outbound, *t.inbound, *t.dropped, *t.deadletter], replication=replicas)
        ensure_topics(
            kafka, t.delayed, config={"message.timestamp.type": "LogAppendTime"}, replication=replicas
        )
        ensure_topics(
            kafka,
            [topics.routes_topic(t.prefix), topics.mirrors_topic(t.prefix), *t.choices, *t.requests],
            compacted=True,
            replication=replicas,
        )
        # Route nothing before the whole routes topic has been read once.
        self.snapshots = RouteSnapshots(
            spark, settings, t, lambda names: create_destination_topics(kafka, names, replication=replicas)
        )
        self.requests = OutstandingRequests(settings, t)
        self._tick = tick_name(t)
        self._ticks = session_jvm(spark, "the query's tick needs").router.spark.TickSource
        self._pace = TickPace(
            t.retry_s,
            settings.trigger_seconds,
            idle_pace_s(settings.trigger_seconds, settings.health_bound_s),
            lambda pace_s: self._ticks.pace(self._tick, source_pace_ms(pace_s, settings.interval_seconds)),
        )
        self._paced = False
        self.totals = RunTotals()
        self._reports: dict[int, BatchReport] = {}
        self._plan: BatchPlan | None = None
        self._plan_key: tuple[object, ...] | None = None
        self._batch_lock = threading.Lock()
        """Held by a micro-batch's work, and by the plan's preparation before the first one."""
        self._inputs = DecisionInputs(spark)
        self.rotation = RotationStore(self.checkpoint / "rotation")
        self._answered_at: Snapshot | None = None
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._refused: int | None = None
        self._counter: Any = None
        self._admin: AdminClient | None = None
        """The job's admin client (`_kept_admin`), kept until `close`."""
        self._outage = collapse_outages()
        self._outage.one_broker = self._brokers.refused_line
        self.metrics = metrics
        self._held: Any = None
        """The state processor's `router.metrics.HeldCounts`, while the job keeps metrics."""
        self._resumed_read: threading.Thread | None = None
        """The read of the resumed checkpoint's state (`_read_resumed`), started by the first batch."""
        self.liveness = Liveness(settings.instances, time.time())
        """What `/healthz` judges the job by (`health`)."""
        self._kafka_note: str | None = None
        self._probed_at = float("-inf")
        self.progress_groups = ProgressGroups(
            kafka,
            t.prefix,
            {
                i.name: [
                    topics.outbound_topic(i.name, t.prefix),
                    topics.inbound_topic(i.name, t.prefix),
                    topics.delayed_topic(i.name, t.prefix),
                    topics.choices_topic(i.name, t.prefix),
                ]
                for i in t.instances
            },
        )
        if count_jobs and spark._jvm is not None:
            self._counter = spark._jvm.router.metrics.BatchJobs.install(spark._jsc.sc())
        self.executors = ExecutorWatch(spark, log)
        """Says each executor lost or joined on a cluster, in a line (`streaming.spark.executors`)."""

    # --- what a run routed --------------------------------------------------------------------

    @property
    def batches(self) -> int:
        """Micro-batches this job has routed."""
        return self.totals.batches

    @property
    def routed(self) -> int:
        """Messages this job has decided (every outcome; dead letters not counted)."""
        return self.totals.routed

    @property
    def checkpoint(self) -> CheckpointPath:
        """The streaming query's checkpoint folder (its offsets, commits and state store).

        On the driver's file system, or on a Hadoop one (`hdfs://...`), whose files the driver
        reads through its JVM (`streaming.spark.checkpoint_files`).
        """
        return self._checkpoint

    # --- the streaming query ------------------------------------------------------------------

    def start(self, bounded: bool) -> StreamingQuery:
        """Start the query: micro-batches at the settings' two intervals, or back to back for a bounded run.

        A run looks for records every `interval_seconds`; its messages source gives a batch once
        `busy_messages` wait, or once `trigger_seconds` have passed (`sources.busy_options`).
        """
        self._stopping.clear()
        self._refused = None
        dropped = drop_uncommitted_batch(self.checkpoint)
        if dropped is not None:
            log.warning(
                "batch %d was planned but not committed before the job stopped; it is planned again "
                "from the last committed offsets (nothing is skipped)",
                dropped,
            )
        if holds_old_state(self.checkpoint):
            raise ConfigError(
                f"the checkpoint {self.checkpoint} holds conversation memory written by an earlier "
                "router (Spark's flatMapGroupsWithState), which this version cannot resume; give the "
                "job a new checkpoint_dir: a new checkpoint takes in the delayed topic again and rebuilds "
                "the kept choices the choices topic holds"
            )
        # The session's number is the one a new query takes (the commands build the session with
        # the settings'); a checkpoint keeps its own, and Spark would go on with that one quietly.
        partitions = int(self.spark.conf.get(SHUFFLE_PARTITIONS) or self.settings.shuffle_partitions)
        named = self.settings.shuffle_partitions_named or partitions != self.settings.shuffle_partitions
        check_state_partitions(self.checkpoint, partitions, named)
        starting = self._starting_offsets()
        self.rotation = RotationStore.load(self.checkpoint)
        self._live(state="starting", error=None, batch_since=None)
        self._resumed_read = None
        count_held = self.metrics is not None and self._held is None
        if count_held:
            self._held = held_counts(self.spark)
        # A batch runs only when a source has new records (the tick's, at least). Otherwise the
        # state processor's timers would make Spark add a batch without data after each one.
        self.spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        interval = "0 seconds" if bounded else f"{self.settings.interval_seconds} seconds"
        # A bounded run's tick keeps one second; a run's slows once nothing can fall due (TickPace).
        # The pace a query of this name was given before is forgotten.
        self._paced = not bounded
        self._ticks.forget(self._tick)
        if self._paced:
            self._pace.started(time.monotonic())
        self._read_resumed(logged_batches(self.checkpoint / "commits"), count_held)
        # The query is not kept on the job. Its callback, this job's `process_batch`, is held by
        # py4j for as long as the JVM holds the query, and the JVM holds it for as long as Python
        # does: a job that kept its query would keep itself, its route snapshots and the JVM
        # objects they hold after `close()` (measured: 70 MiB of heap more per job that one
        # process ran, with 100,000 routes).
        hand_over = self._prepare_plan(partitions)
        try:
            stream = input_stream(
                self.spark,
                self.settings,
                self.topology,
                self._inputs,
                self._held,
                starting,
                paced=self._paced,
            )
        except BaseException:
            hand_over(None)
            raise
        hand_over(stream)
        return (
            stream.writeStream.foreachBatch(self.process_batch)
            .option("checkpointLocation", str(self.checkpoint))
            .queryName(self._tick)
            .trigger(processingTime=interval)
            .start()
        )

    def _prepare_plan(self, partitions: int) -> Callable[[DataFrame | None], None]:
        """Plan the batches' query, and run it over no rows, while the query is built and started.

        Spark's stream thread takes seconds to start the query and plan its first micro-batch, on
        one core; meanwhile a thread of the job's reads the route snapshot (while this one builds
        the input stream), then builds the `BatchPlan` and runs it once over an empty batch of the
        stream's schema, which generates and compiles its code and writes nothing. The first
        micro-batch then finds its plan ready (`_plan_for`), as later ones do. Returns the call by
        which `start` hands the thread the input stream once it is built (None: it was not).

        The batch lock, taken here and handed to the thread, keeps the first micro-batch waiting
        until the plan is ready. A failure here is left to the first batch, which plans again and
        reports what fails. `partitions` are the batches' own: `start` refuses a checkpoint whose
        state partitions differ (`check_state_partitions`), and a kept plan refuses a batch of
        another number (`router.plan.BatchInput`).
        """
        self._batch_lock.acquire()
        built: queue.Queue[DataFrame | None] = queue.Queue(maxsize=1)

        def prepare() -> None:
            started = time.monotonic()
            try:
                snapshot = self.snapshots.at(_now())
                stream = built.get()
                if stream is None:
                    return
                empty = empty_batch(stream, partitions)
                self._plan_for(snapshot, empty).run(empty, snapshot)
                log.debug("the batch plan was prepared in %.3fs", time.monotonic() - started)
            except Exception as error:
                self._plan = self._plan_key = None
                log.debug("the batch plan was not prepared ahead: %s", short_error(error))
            finally:
                self._batch_lock.release()

        threading.Thread(target=prepare, name="router-plan", daemon=True).start()
        return built.put

    def _starting_offsets(self) -> dict[str, str]:
        """Where a new checkpoint's sources start after a drained one (`Settings.start_after`).

        The message and delayed sources start where the drained checkpoint's committed batches
        read up to, so that nothing it routed is routed again; the choices topic is read from its
        beginning (the kept choices it holds are rebuilt). A checkpoint that still holds delayed
        messages is refused: they are in its state alone, and would be lost. A checkpoint that has
        begun resumes its own offsets (Spark reads `startingOffsets` for a new query only).
        """
        after = self.settings.start_after
        if after is None or logged_batches(self.checkpoint / "offsets"):
            return {}
        drained = summarize(locate(after, self.spark))
        t = self.topology
        sources = {"messages": [*t.outbound, *t.inbound], "delayed": t.delayed}
        starting = {
            name: starting_offsets(drained, {topic: sorted(self._end_offsets(topic)) for topic in names})
            for name, names in sources.items()
        }
        assert drained.last_committed is not None  # starting_offsets refuses a checkpoint without
        held = state_counts(self.spark, drained.folder, drained.last_committed)
        delayed = sum(figures["delayed"] for figures in held.values())
        if delayed:
            raise ConfigError(
                f"the checkpoint {drained.folder} to start after still holds {delayed} delayed message(s) "
                "in its state, which a new checkpoint would not have: drain it first (stop the intake, run "
                "its router until `router checkpoint show` counts no delayed message, stop it), then start "
                f"this one ({CHANGING_PARTITIONS})"
            )
        log.warning(
            "the new checkpoint starts where batch %d of %s left the topics",
            drained.last_committed,
            drained.folder,
        )
        return {name: json.dumps(offsets, sort_keys=True) for name, offsets in starting.items()}

    def run(
        self,
        stop: threading.Event,
        on_batch: Callable[[BatchReport], None] | None = None,
        grace_s: float = STOP_GRACE_S,
    ) -> bool:
        """Route until `stop` is set, then stop between micro-batches; return whether one was cut short.

        A batch still running `grace_s` after the stop was asked for is abandoned: it is not
        committed, and the next start runs it again. Raises RouterError when the query fails.
        """
        query = self.start(bounded=False)
        try:
            while query.isActive and not stop.is_set():
                stop.wait(0.2)
                self.executors.report()
                self._report(query, on_batch)
                self._watch_brokers()
                self._serve_client_lines()
                if self.metrics is not None:
                    self._late(time.time())
        finally:
            self._live(state="stopping")
            abandoned = self._stop(query, grace_s)
            self._report(query, on_batch)
            self._live(state="stopped")
        self._raise_if_failed(query)
        return abandoned

    def replay(
        self,
        timeout_s: float | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """Route what the input topics hold now, and what the run writes back to itself, then stop.

        The run ends once the query has read the outbound and inbound topics up to where they
        ended when it started, and the delayed and choices topics up to where its own batches left
        them (so the state holds what it delayed and chose), or when `stop` is set. Raises
        RouterError when the query fails or has not finished within `timeout_s`.
        """
        t = self.topology
        targets = {
            (topic, partition): offset
            for topic in (*t.outbound, *t.inbound)
            for partition, offset in self._end_offsets(topic).items()
        }
        query = self.start(bounded=True)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        finished = False
        try:
            while query.isActive:
                self.executors.report()
                self._serve_client_lines()
                last = query.lastProgress  # one read for both: a py4j call and a parse
                self._report(query, on_batch, last)
                if stop is not None and stop.is_set():
                    finished = True
                    break
                if last is not None and self._caught_up(json.loads(last.json), targets):
                    finished = True
                    break
                if deadline is not None and time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            self._live(state="stopping")
            self._stop(query, STOP_GRACE_S)
            self._report(query, on_batch)
            self._live(state="stopped")
        self._raise_if_failed(query)
        if not finished:
            raise RouterError(f"the {t.name} replay did not finish within {timeout_s} s")

    def _caught_up(self, progress: dict[str, Any], targets: dict[tuple[str, int], int]) -> bool:
        """The inputs are read up to `targets`; then what the run wrote back by then is read too.

        What the run writes back once its inputs are read (delayed messages released and delayed
        again, say) is left for the next run, so that a run ends even while such messages cycle.
        """
        read = source_offsets(progress)
        if any(read.get(tp, 0) < offset for tp, offset in targets.items()):
            return False
        t = self.topology
        written_back = [*t.delayed, *(t.choices if self.settings.keep_choice_s > 0 else [])]
        asked = {topic for topic, _ in targets}
        for topic in written_back:
            if topic in asked:
                continue  # asked once, when the inputs had been read
            for partition, offset in self._end_offsets(topic).items():
                targets.setdefault((topic, partition), offset)
        return all(read.get(tp, 0) >= offset for tp, offset in targets.items())

    def _end_offsets(self, topic: str) -> dict[int, int]:
        """`topic`'s end offsets, asked by the job's own admin client: a few ms an ask, not about 60.

        The ends a replay waits for once its inputs are read are asked while the query may start
        its next batch: the shorter the ask, the rarer a batch run only because the tick advanced.
        """
        return end_offsets(self.settings.kafka, topic, client=self._kept_admin())

    def _kept_admin(self) -> AdminClient:
        """One admin client for the job's asks (end offsets, the brokers it lists), made at the first.

        An ask costs a few ms on it instead of a new client's connection; and the broker watch's asks,
        on a new client each, would knock at a broker that is away.
        """
        with self._lock:
            if self._admin is None:
                self._admin = admin_client(self.settings.kafka, lazy=True)
            return self._admin

    def _stop(self, query: StreamingQuery, grace_s: float) -> bool:
        """Stop the query between micro-batches; return whether a batch in flight was abandoned.

        From now on a batch refuses to start (it raises `STOPPED` before it reads anything, so
        Spark does not commit it and the next start plans it again); the batch in flight, if any,
        runs to its end. The query is stopped once it ended that way or sits between triggers;
        a batch still running after `grace_s` is interrupted, and is not committed either.
        """
        self._stopping.set()
        deadline = time.monotonic() + grace_s
        abandoned = False
        while query.isActive:
            if not query.status.get("isTriggerActive"):
                break
            if time.monotonic() > deadline:
                abandoned = True
                break
            time.sleep(0.02)
        query.stop()
        self._await_resumed_read()
        if not abandoned and self._refused is not None:
            self._forget_refused(self._refused)
        return abandoned

    def _await_resumed_read(self) -> None:
        """Let the read of the resumed state end before the session may stop (`_read_resumed`).

        A Spark job cut short by the session's stop logs errors of its own; the read takes a few
        seconds, once, after the first batch. No batch runs once the query stopped, so none starts it.
        """
        reading, self._resumed_read = self._resumed_read, None
        if reading is not None and reading.is_alive():
            reading.join(RESUMED_READ_WAIT_S)

    def _forget_refused(self, batch_id: int) -> None:
        """Remove the planned offsets of the batch the stop refused, so the next start has no repair.

        Spark logs a batch's offsets before it runs it, so a batch that began while the job stopped
        and was refused (it read and wrote nothing) stays planned but uncommitted. `start` would
        drop it all the same, with the warning meant for a batch a crash cut short; it is dropped
        here instead, quietly, and planned again from the last committed offsets at the next start.
        """
        if drop_uncommitted_batch(self.checkpoint) == batch_id:
            log.debug("batch %d, refused at the stop, is planned again at the next start", batch_id)

    def _raise_if_failed(self, query: StreamingQuery) -> None:
        error = query.exception()
        if error is not None and STOPPED not in str(error):
            self._live(state="failed", error=short_error(error))
            raise RouterError(f"the {self.topology.name} router failed: {short_error(error)}")

    # --- what the job says of itself: health, metrics, progress ---------------------------------

    def _live(self, **changes: Any) -> None:
        with self._lock:
            self.liveness = replace(self.liveness, **changes)

    def health(self) -> Health:
        """What `/healthz` answers now (`streaming.spark.metrics.judge`).

        While the micro-batches are late (half the bound without one), Kafka is asked whether it
        answers, in the background, at most every `KAFKA_PROBE_EVERY_S`, so that the reason names
        the broker when it is away; the answer never waits for the ask.
        """
        now = time.time()
        late = self._late(now)
        with self._lock:
            live = self.liveness
        return judge(live, now, self.settings.health_bound_s, self._kafka_note if late else None)

    def _late(self, now: float) -> bool:
        """Whether micro-batches are late (half the bound without one); then Kafka is asked if it answers.

        `run`'s loop asks this every turn, so that the note on Kafka is ready before a probe comes.
        """
        with self._lock:
            last = self.liveness.last_batch_at
        late = last is not None and now - last > self.settings.health_bound_s / 2
        if late:
            self._probe_kafka()
        elif self._kafka_note is not None:
            self._kafka_note = None
        return late

    def _serve_client_lines(self) -> None:
        """Hand the kept admin client's log lines over as they come: it gives them only when polled.

        A refusal served seconds late, by the next ask, could start an outage's line again after a
        batch written meanwhile had said Kafka was back.
        """
        with self._lock:
            client = self._admin
        if client is not None:
            client.poll(0)

    def _watch_brokers(self) -> None:
        """Ask, in a thread, at most every `BROKERS_CHECK_EVERY_S`, which brokers the cluster lists.

        A broker of several that goes away, and its return, are a line each (`BrokerWatch`). When
        none answers, the ask's own client lines start the outage's line (`brokers_listed`), and
        the next ask answered ends it, whether or not a micro-batch runs meanwhile.
        """
        with self._lock:
            if time.monotonic() - self._brokers_asked_at < BROKERS_CHECK_EVERY_S:
                return
            self._brokers_asked_at = time.monotonic()
        client = self._kept_admin()

        def ask() -> None:
            asked = time.monotonic()
            # One topic's metadata: it lists every live broker, without every topic of the cluster.
            metadata = brokers_listed(client, self.topology.outbound[0], BROKERS_CHECK_EVERY_S / 2)
            if metadata is None:
                return  # no broker answered: the client's own lines, handed over, say so
            self._brokers.seen(brokers_of(metadata))
            # Kafka answered: an outage ends here, though no batch runs (the input all routed).
            self._outage.answered(log, asked)

        threading.Thread(target=ask, name="router-broker-watch", daemon=True).start()

    def _probe_kafka(self) -> None:
        """Ask, in a thread, whether the cluster answers; its answer is `_kafka_note` (None: it does)."""
        with self._lock:
            if time.monotonic() - self._probed_at < KAFKA_PROBE_EVERY_S:
                return
            self._probed_at = time.monotonic()

        def probe() -> None:
            try:
                kafka, timeout = self.settings.kafka, KAFKA_PROBE_EVERY_S / 2
                cluster_metadata(kafka, timeout=timeout, client=admin_client(kafka, lazy=True))
                self._kafka_note = None
            except KafkaUnavailable:
                self._kafka_note = f"Kafka does not answer at {self.settings.kafka.bootstrap}"

        threading.Thread(target=probe, name="router-kafka-probe", daemon=True).start()

    def _read_resumed(self, committed: list[int], count_held: bool) -> None:
        """Read what the resumed checkpoint's state holds delayed, in the background, for whom needs it.

        `count_held`: the metrics' figures start from it; a paced query's tick is told when its
        timers fall due (`held_timers`, D2). The state the last committed batch left is read once
        the query's first batch has run (what fell due by then, that batch released); the batches
        after it add their changes meanwhile, and the sum is the same in any order. A new
        checkpoint holds nothing.
        """
        held = self.metrics.held if count_held and self.metrics is not None else None
        if not committed:
            if held is not None:
                held.ready()
            return
        if held is None and not self._paced:
            return
        last = max(committed)
        # Spark's state data source finds the state store's coordinator only once the session's
        # streaming query manager exists: in a new process, before the query starts, it does not.
        _ = self.spark.streams
        tick, ticks = self._tick, self._ticks
        timers = self._paced

        def failed(what: str, error: Exception) -> None:
            # A job that stops meanwhile shuts the read down with its session: nothing to tell.
            stopping = self._stopping.is_set()
            log.log(
                logging.DEBUG if stopping else logging.WARNING,
                "could not read %s: %s",
                what,
                short_error(error),
            )

        def read() -> None:
            both = timers and held is not None
            try:
                state = held_state(self.spark, self.checkpoint, last)
                state = state.cache() if both else state  # then one read of the state store for both
            except Exception as error:  # the tick keeps its pace, the metrics stay absent
                failed("the state the query resumed", error)
                return
            if timers:
                try:
                    ticks.fallDue(tick, held_timers(state))
                except Exception as error:  # the tick keeps its pace; the routing goes on
                    failed("when the delayed messages the state holds fall due", error)
            if held is not None:
                try:
                    held.add(held_figures(state))
                    held.ready()
                except Exception as error:  # the metrics stay absent; the routing goes on
                    failed("the delayed messages the state holds", error)
            if both:
                with contextlib.suppress(Exception):  # a session stopped meanwhile keeps nothing
                    state.unpersist()

        # Started by the first batch (`_route_batch`), so that it does not put off the first message routed.
        self._resumed_read = threading.Thread(target=read, name="router-resumed-state", daemon=True)

    def _report(
        self,
        query: StreamingQuery,
        on_batch: Callable[[BatchReport], None] | None,
        last: StreamingQueryProgress | None = None,
    ) -> None:
        """Hand on each batch's report once Spark's progress report of it (the lag) is there.

        Spark's last progress report is read first, only while a batch waits for its report (or given
        as `last` by a caller that read it anyway): it is the pending batch's, or not there yet, but
        for a batch missed between two calls. Only then are the recent ones read (up to 100, each
        handed over as JSON: about 16 ms for 99 small ones against 0.2 ms for the last).
        """
        with self._lock:
            if not self._reports:
                return
            oldest = min(self._reports)
        if last is None:
            last = query.lastProgress
        if last is None:
            return
        entries = [last] if last.batchId <= oldest else query.recentProgress
        for entry in entries:
            progress = json.loads(entry.json)  # as Spark wrote it: offsets as JSON objects
            batch_id = int(progress.get("batchId", -1))
            with self._lock:
                report = self._reports.pop(batch_id, None)
            if report is None:
                continue
            jobs = stages = None
            if self._counter is not None:
                jobs, stages, _, _ = self._counter.take(str(query.id), batch_id)
            t = self.topology
            report = replace(report, lag=lag(progress, {*t.outbound, *t.inbound}), jobs=jobs, stages=stages)
            # The batch was written: Kafka answered what it asked since it began.
            self._outage.answered(log, report.started)
            self._live(lag=report.lag)
            self.progress_groups.write(batch_id, report.decided_ms, source_offsets(progress))
            if self.metrics is not None:
                self.metrics.input_lag(partition_lag(progress, [*t.outbound, *t.inbound, *t.delayed]))
            if on_batch is not None:
                on_batch(report)
            log.info("%s", report.line())

    def close(self) -> None:
        """Close the job's Kafka readers (the query is stopped by `run` and `replay`)."""
        # A plan still being prepared reads the route snapshots: wait for it, within reason.
        if self._batch_lock.acquire(timeout=PREPARE_WAIT_S):
            self._batch_lock.release()
        with self._outage.closing():
            self.snapshots.close()
            self.requests.close()
        self.progress_groups.close()
        self._admin = None
        if self._outage.one_broker == self._brokers.refused_line:
            self._outage.one_broker = None

    def waiting(self) -> list[int]:
        """When each delayed message in the state store was delayed (epoch ms), as of the last batch."""
        if not logged_batches(self.checkpoint / "commits"):
            return []
        state = read_state(self.spark, self.checkpoint)
        rows = state.select(F.explode("value.waiting.delayed_ms").alias("at")).collect()
        return sorted(r["at"] for r in rows)

    # --- one micro-batch ----------------------------------------------------------------------

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Route one micro-batch (see the module docstring); a failure is raised as `BatchFailed`."""
        if self._stopping.is_set():
            self._refused = batch_id
            raise BatchFailed(STOPPED)
        try:
            with self._batch_lock:
                self._route_batch(batch, batch_id)
        except Exception as error:
            if self._stopping.is_set():
                raise BatchFailed(STOPPED) from None
            short = short_error(error)
            log.error("batch %d failed: %s", batch_id, short, exc_info=log.isEnabledFor(logging.DEBUG))
            raise BatchFailed(f"batch {batch_id} failed: {short}") from None

    def _route_batch(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        now = _now()
        self._live(batch_since=now.timestamp())
        snapshot = self.snapshots.at(now)
        now_ms = int(now.timestamp() * 1000)
        if snapshot is not self._answered_at:
            # B6, B7: a request ends once a route naming its service appears in its scope.
            self.requests.end_answered(self.snapshots.routes.instance_routes, now_ms)
            self._answered_at = snapshot
        if snapshot.has_bcn:
            self.requests.end_dialogs(now_ms)  # B6, B7: ended by the dynamic routing service
        planned = time.monotonic()
        plan = self._plan_for(snapshot, batch)
        built = time.monotonic()
        previous = self._inputs.snapshot
        pending = self.requests.pending if snapshot.has_bcn else frozenset()
        spreads = snapshot.flags.spreads  # C5, M3: only then can a pick turn a counter
        metrics = plan.run(batch, snapshot, pending, self.rotation.counters if spreads else None)
        if spreads:
            self.rotation.advance(batch_id, self._inputs.advanced())  # before Spark commits the batch
        if previous is not None and previous is not snapshot:
            previous.release()  # the batch that used it last has run
        log.debug(
            "batch %d: snapshot %.3fs, plan %.3fs, run %.3fs",
            batch_id,
            planned - started,
            built - planned,
            time.monotonic() - built,
        )
        self.requests.asked(metrics.requests, now_ms)
        self._warn_unavailable(metrics)
        if self._paced:
            busy = metrics.records > 0 or metrics.routed > 0 or metrics.released > 0
            self._pace.after_batch(time.monotonic(), busy, bool(self.requests.pending))
            # The tick's pace counts from this batch, and it comes when what the batch delayed falls
            # due (D2), whatever batches run in between (TickSource.ran, ranDelaying).
            if metrics.outcomes.get(Outcome.DELAYED.value, 0):
                due_ms = self._batch_time_ms(batch_id, now_ms) + round(self.topology.retry_s * 1000)
                self._ticks.ranDelaying(self._tick, due_ms)
            else:
                self._ticks.ran(self._tick)
        seconds, finished = time.monotonic() - started, time.time()
        self.totals.add(metrics)
        if self.metrics is not None:
            self.metrics.batch(metrics, seconds, finished)
            self.metrics.snapshot(snapshot.version, self.snapshots.active, self.snapshots.taken_at)
            if self._held is not None:
                self.metrics.held.add(str(self._held.take()).splitlines())
        reading = self._resumed_read
        if reading is not None and reading.ident is None:  # not started yet: this is the first batch
            reading.start()
        report = BatchReport(batch_id, metrics, seconds, snapshot.version, started=started, decided_ms=now_ms)
        with self._lock:
            self._reports[batch_id] = report
            self.liveness = replace(
                self.liveness,
                state="running" if self.liveness.state == "starting" else self.liveness.state,
                last_batch=batch_id,
                last_batch_at=finished,
                last_records=metrics.records,
                batch_since=None,
            )

    def _batch_time_ms(self, batch_id: int, now_ms: int) -> int:
        """The batch's time, its offset log's, from which what it delays falls due (D2).

        It is the `decided_at` of the batch's messages and the state processor's "now". Spark takes
        it as the batch starts; its work reaches the driver here only after reading and planning, up
        to seconds later for a query's first batch. Unread, the driver's `now_ms` stands in: the
        tick then comes that much after the messages fall due, never before.
        """
        try:
            return read_logged_batch(self.checkpoint, batch_id).timestamp_ms or now_ms
        except RouterError as error:
            log.debug("batch %d: its time unread (%s); the driver's clock stands in", batch_id, error)
            return now_ms

    def _plan_for(self, snapshot: Snapshot, batch: DataFrame) -> BatchPlan:
        """The batch plan, built again only when its shape or the unavailable destinations changed."""
        unavailable = dict(self.snapshots.unavailable)
        shape = replace(snapshot.flags, valid_until=None)
        key = (shape, tuple(sorted(unavailable.items())))
        if self._plan is None or key != self._plan_key:
            self._plan = BatchPlan(
                batch,
                self._inputs,
                shape,
                Destinations(self.topology, unavailable),
                write_options(self.settings),
                ensure_topics=self.snapshots.ensure_reachable,
            )
            self._plan_key = key
        return self._plan

    def _warn_unavailable(self, metrics: BatchMetrics) -> None:
        for topic, error in metrics.unavailable.items():
            if topic not in self._warned:
                self._warned.add(topic)
                dropped = " or ".join(self.topology.dropped)
                log.warning("messages for %s go to %s (destination_unavailable): %s", topic, dropped, error)


def run_until_drained(
    job: RouterJob,
    max_wait_s: float,
    progress: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> int:
    """Replay, then replay again as delayed messages fall due, until none wait or time runs out.

    Each replay reads what the last one delayed into the state and routes the conversations that
    are due (D2). Returns how many delayed messages still wait.
    """
    retry_s = job.topology.retry_s
    deadline = time.monotonic() + max_wait_s
    stop = stop or threading.Event()
    while True:
        job.replay(stop=stop)
        waiting = job.waiting()
        if not waiting or time.monotonic() >= deadline or stop.is_set():
            return len(waiting)
        wait = waiting[0] / 1000 + retry_s - time.time()
        if wait > 0:
            progress(f"{len(waiting)} delayed message(s) waiting; next due in {wait:.1f}s")
            stop.wait(min(wait, max(0.0, deadline - time.monotonic())))
