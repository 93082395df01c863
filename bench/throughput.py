"""Routing throughput against a Kafka-to-Kafka pass-through, on the same records.

usage: python -m bench.throughput [--messages N] [--routes 10,1000,100000] [--per-batch N] [--warm-ups N]
                                  [--sustained N] [--bootstrap HOST:PORT]

For each route-table size it loads a fresh topic namespace with that many routes, produces N
messages (produced beforehand, not timed) to instance i1's outbound topic, and times two Spark
Structured Streaming queries over the same records on one SparkSession, both in micro-batches of
at most `--per-batch` records:

* pass-through: Kafka source -> from_avro -> to_avro -> Kafka sink, everything to one topic
  (Trigger.AvailableNow);
* pass-through with the router's headers: the same, each record leaving with the nine headers a
  message the router sends carries (`SENT_HEADERS`, values of the same sizes): what the router's
  output costs the Kafka sink before any rule or memory;
* router: the router job (`RouterJob.replay`), which decodes, keeps the conversations' memory,
  decides against the broadcast route snapshot and writes every message to its destination topic
  with decision headers. A listener counts the Spark jobs and stages of each micro-batch.

`WARM_UPS` unmeasured runs of both, on as many records, warm the JVM up first. Rates are messages per
second of query time. Each measured run also records how long the JVM's JIT compilers worked during
it (`compile_seconds`), the warm-up it still paid; the CPU time the JVM used (`cpu_seconds`), its
CPU per message and the cores it kept busy; and the cores the whole machine kept busy
(`machine_busy_seconds`). `--sustained N` adds a long run of both on N records (10 routes) after
the others. `run_delayed` times the router on records of which a share of the conversations has no
route until routes are written, and `bench.run` gathers everything into
bench/RESULTS.md. Without --bootstrap it starts the embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from bench.common import (
    I1,
    compile_seconds,
    cpu_seconds,
    late_routes,
    machine_busy_seconds,
    new_prefix,
    prepare,
    progress,
    spark_bench,
)
from streaming import topics
from streaming.config import Settings, load_settings
from streaming.contract import Outcome
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import schema_json
from streaming.spark.job import RouterJob
from streaming.spark.progress import BatchReport
from streaming.spark.sources import TIME_FORMAT
from streaming.tables.topic_io import put_route

WARM_UPS = 2
"""Unmeasured runs of both queries before the measured ones (`measure_throughput`)."""

SENT_HEADERS = (
    "outcome",
    "route",
    "match_step",
    "choice_step",
    "address",
    "scope",
    "snapshot_version",
    "decided_at",
    "router_instance",
)
"""The headers a message the router sends to a route's address carries (`MESSAGE_HEADERS`, in order)."""

SUSTAINED = 1_500_000
"""Records of the long run (`bench.run`): both queries again, on five times the records, warmer."""


@dataclass(frozen=True)
class Measurement:
    routes: int
    passthrough_s: float
    messages: int
    router: RouterRun
    passthrough_compile_s: float = 0.0
    """Seconds the JVM's JIT compilers spent while the pass-through ran (`compile_seconds`)."""
    router_compile_s: float = 0.0
    """The same, while the router ran: the JIT still compiling is warm-up the run still pays."""
    passthrough_cpu_s: float = float("nan")
    """CPU seconds the JVM used while the pass-through ran (`cpu_seconds`; the broker not counted)."""
    router_cpu_s: float = float("nan")
    """The same, while the router ran."""
    passthrough_machine_s: float = float("nan")
    """CPU seconds the whole machine was busy while the pass-through ran (`machine_busy_seconds`):
    the JVM's, the broker's and the rest."""
    router_machine_s: float = float("nan")
    """The same, while the router ran."""
    with_headers_s: float = float("nan")
    """Seconds of the pass-through with the router's headers (`run_passthrough(headers=True)`), when run."""

    @property
    def passthrough_rate(self) -> float:
        return self.messages / self.passthrough_s

    @property
    def router_rate(self) -> float:
        return self.messages / self.router.seconds

    @property
    def ratio(self) -> float:
        """The router's rate over the pass-through's."""
        return self.router_rate / self.passthrough_rate

    @property
    def with_headers_rate(self) -> float:
        return self.messages / self.with_headers_s

    @property
    def headers_ratio(self) -> float:
        """The pass-through with the router's headers over the plain one: the headers' own ceiling."""
        return self.with_headers_rate / self.passthrough_rate

    @property
    def ratio_to_headers(self) -> float:
        """The router's rate over the pass-through with its headers: the rules' and the memory's cost."""
        return self.router_rate / self.with_headers_rate

    @property
    def passthrough_cpu_us(self) -> float:
        """The JVM's CPU per message while the pass-through ran, in microseconds, the JIT's left out."""
        return (self.passthrough_cpu_s - self.passthrough_compile_s) / self.messages * 1e6

    @property
    def router_cpu_us(self) -> float:
        """The JVM's CPU per message while the router ran, in microseconds, the JIT's left out.

        The JIT's compiling is warm-up a longer run pays less of; what is left is the work itself.
        """
        return (self.router_cpu_s - self.router_compile_s) / self.messages * 1e6

    @property
    def router_cores(self) -> float:
        """The cores the router's JVM kept busy on average: all its CPU (the JIT's too) over its time."""
        return self.router_cpu_s / self.router.seconds

    @property
    def router_machine_cores(self) -> float:
        """The cores the whole machine kept busy on average while the router ran (broker included)."""
        return self.router_machine_s / self.router.seconds

    @property
    def passthrough_machine_cores(self) -> float:
        """The same, while the pass-through ran."""
        return self.passthrough_machine_s / self.passthrough_s

    def cores_for(self, ratio: float) -> float:
        """The cores the router would keep busy at `ratio` times the pass-through's rate.

        At its CPU per message in this run, the JIT's left out (`router_cpu_us`): what reaching that
        ratio would take of the machine, once warm.
        """
        return ratio * self.passthrough_rate * self.router_cpu_us / 1e6

    def router_compile_share(self, cores: int) -> float:
        """The JIT's compile time over the CPU time the router's run had (`cores` times its seconds)."""
        return self.router_compile_s / (cores * self.router.seconds)


def sent_headers(record: Column) -> Column:
    """`SENT_HEADERS` for a decoded message, as the router writes them: per row, from its fields."""
    text = {
        "outcome": F.lit(Outcome.SEND.value),
        "route": record["to_service"],
        "match_step": F.lit("M2"),
        "choice_step": F.lit("C2"),
        "address": F.concat(F.lit("TCP://"), F.lower(record["to_service"]), F.lit(".example:4022")),
        "scope": record["origin_database"],
        "snapshot_version": F.lit("routes@p0:1000"),
        "decided_at": F.date_format(F.current_timestamp(), TIME_FORMAT),
        "router_instance": F.lit(I1.name),
    }
    pairs = [F.struct(F.lit(k).alias("key"), text[k].cast("binary").alias("value")) for k in SENT_HEADERS]
    return F.array(*pairs)


def run_passthrough(
    spark: SparkSession,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: Path,
    per_batch: int,
    headers: bool = False,
) -> float:
    """Seconds to copy `source` to `sink` through from_avro and to_avro (with `headers`: `sent_headers`)."""
    schema = schema_json("message")
    ensure_topics(bootstrap, [sink], partitions=2)
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_batch)
        .load()
    )
    record = from_avro(F.col("value"), schema)
    columns = [F.col("key"), to_avro(record, schema).alias("value")]
    if headers:
        columns.append(sent_headers(record).alias("headers"))
    out = stream.select(*columns)
    started = time.monotonic()
    query = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.monotonic() - started


def _pass_through(
    spark: SparkSession,
    bootstrap: str,
    folder: Path,
    prefix: str,
    source: str,
    per_batch: int,
    headers: bool = False,
) -> float:
    """`run_passthrough` of `source` in namespace `prefix`, to a sink and a checkpoint of its kind's own."""
    kind = "headers" if headers else "passthrough"
    return run_passthrough(
        spark, bootstrap, source, f"{prefix}.{kind}", folder / f"{prefix}-{kind}", per_batch, headers
    )


@dataclass(frozen=True)
class RouterRun:
    """One timed `RouterJob.replay`: its time, what it routed, and the Spark work of its batches."""

    seconds: float
    routed: int
    released: int
    batches: tuple[BatchReport, ...]

    @property
    def full_batches(self) -> list[BatchReport]:
        """The batches that read at least half of the largest batch's records (not the tail)."""
        most = max((b.metrics.records for b in self.batches), default=0)
        return [b for b in self.batches if most and b.metrics.records >= most / 2]

    def full_batch_rate(self) -> float:
        """Messages decided per second within the full batches: the run without its start and tail."""
        full = self.full_batches
        seconds = sum(b.seconds for b in full)
        return sum(b.metrics.routed for b in full) / seconds if seconds else float("nan")

    def jobs_per_batch(self) -> tuple[float, float]:
        """Median Spark jobs and stages of the full batches."""
        full = self.full_batches
        jobs = [b.jobs for b in full if b.jobs is not None]
        stages = [b.stages for b in full if b.stages is not None]
        return (
            statistics.median(jobs) if jobs else float("nan"),
            statistics.median(stages) if stages else float("nan"),
        )


def router_settings(
    bootstrap: str, prefix: str, checkpoint: Path, per_batch: int, **extra: object
) -> Settings:
    """The benchmark's router settings for instance i1 on `prefix`."""
    return load_settings(
        None,
        instance=I1.name,
        bootstrap=bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(checkpoint),
        max_offsets_per_trigger=per_batch,
        **extra,
    )


def run_router(spark: SparkSession, settings: Settings) -> RouterRun:
    """Replay what the namespace holds with a new `RouterJob`, timed once it has read the routes."""
    job = RouterJob(spark, settings, count_jobs=True)
    reports: list[BatchReport] = []
    started = time.monotonic()
    job.replay(on_batch=reports.append)
    seconds = time.monotonic() - started
    job.close()
    return RouterRun(seconds, job.routed, job.totals.released, tuple(reports))


@dataclass(frozen=True)
class DelayedRun:
    """The router on records of which a share of the conversations is delayed, then released."""

    messages: int
    delayed: int
    first: RouterRun
    """The replay that routes everything and delays the late conversations."""
    release: RouterRun
    """The replay, once they are due and routes for them exist, that releases them (D2)."""

    @property
    def seconds(self) -> float:
        """Router time of both replays (not the wait for the retry in between)."""
        return self.first.seconds + self.release.seconds


def run_delayed(
    spark: SparkSession,
    bootstrap: str,
    folder: Path,
    messages: int,
    per_batch: int,
    late: float,
    retry_s: float,
) -> DelayedRun:
    """Route `messages` of which `late` of the conversations have no route; add routes; release them."""
    prefix = new_prefix()
    instance = replace(I1, retry_s=retry_s)
    prepare(bootstrap, prefix, 10, messages, instance=instance, late=late)
    settings = router_settings(bootstrap, prefix, folder / f"{prefix}-delayed", per_batch)
    first = run_router(spark, settings)
    delayed = sum(b.metrics.outcomes.get("delayed", 0) for b in first.batches)
    progress(
        f"bench: {delayed:,} delayed outcomes (retries included) among {messages:,} messages; "
        f"writing their routes, waiting {retry_s:g} s"
    )
    routes_topic = topics.routes_topic(prefix)
    for route in late_routes():
        put_route(bootstrap, instance.name, route, routes_topic)
    time.sleep(retry_s)
    release = run_router(spark, settings)
    progress(f"bench: released {release.released:,} delayed messages")
    return DelayedRun(messages, delayed, first, release)


def measure_throughput(
    spark: SparkSession,
    bootstrap: str,
    folder: Path,
    sizes: list[int],
    messages: int,
    per_batch: int,
    warm_ups: int = WARM_UPS,
    with_headers: bool = True,
) -> list[Measurement]:
    """Pass-through and router on the same records, per route-table size, after warm-ups of both.

    With `with_headers`, the pass-through with the router's headers runs too (`measure_once`).
    """
    # Warm-ups, not measured, on as many records as a measured run: the first queries of a JVM run
    # up to twice as slow (class loading, JIT), which would weigh on whichever query came first.
    # Replays of 300,000 messages, each by a new RouterJob in one JVM, ran at 8,667, 19,123,
    # 22,942, 26,124 and 27,823 msg/s: after one warm-up, the JIT's compiler threads still took
    # about 45% of the JVM's CPU (their CPU time, read per thread from /proc); `router run` runs
    # for hours, past all that.
    for i in range(warm_ups):
        prefix = new_prefix()
        outbound = prepare(bootstrap, prefix, 10, messages)
        progress(f"bench: warm-up {i + 1} of {warm_ups} with {messages:,} messages")
        _pass_through(spark, bootstrap, folder, prefix, outbound, per_batch)
        if with_headers:
            _pass_through(spark, bootstrap, folder, prefix, outbound, per_batch, headers=True)
        run_router(spark, router_settings(bootstrap, prefix, folder / f"{prefix}-router", per_batch))
    return [
        measure_once(spark, bootstrap, folder, count, messages, per_batch, with_headers) for count in sizes
    ]


def measure_once(
    spark: SparkSession,
    bootstrap: str,
    folder: Path,
    routes: int,
    messages: int,
    per_batch: int,
    with_headers: bool = True,
) -> Measurement:
    """The pass-through, then the router, on the same `messages` records, with `routes` routes.

    With `with_headers`, the pass-through with the router's headers runs between them (timed, its
    CPU not counted in either's).
    """
    prefix = new_prefix()
    outbound = prepare(bootstrap, prefix, routes, messages)
    progress(f"bench: {routes:,} routes: produced {messages:,} messages; running the pass-through")
    before, cpu_before, busy_before = compile_seconds(spark), cpu_seconds(spark), machine_busy_seconds()
    passthrough_s = _pass_through(spark, bootstrap, folder, prefix, outbound, per_batch)
    passthrough_compile_s = compile_seconds(spark) - before
    passthrough_cpu_s, passthrough_busy_s = (
        cpu_seconds(spark) - cpu_before,
        machine_busy_seconds() - busy_before,
    )
    with_headers_s = float("nan")
    progress(f"bench: {routes:,} routes: pass-through {passthrough_s:.1f}s")
    if with_headers:
        progress(f"bench: {routes:,} routes: running the pass-through with the router's headers")
        with_headers_s = _pass_through(spark, bootstrap, folder, prefix, outbound, per_batch, headers=True)
    progress(f"bench: {routes:,} routes: running the router")
    between, cpu_between, busy_between = compile_seconds(spark), cpu_seconds(spark), machine_busy_seconds()
    router = run_router(spark, router_settings(bootstrap, prefix, folder / f"{prefix}-router", per_batch))
    router_compile_s = compile_seconds(spark) - between
    router_cpu_s, router_busy_s = cpu_seconds(spark) - cpu_between, machine_busy_seconds() - busy_between
    if router.routed != messages:
        raise SystemExit(f"bench: the router routed {router.routed:,} of {messages:,} messages")
    m = Measurement(
        routes,
        passthrough_s,
        messages,
        router,
        passthrough_compile_s,
        router_compile_s,
        passthrough_cpu_s,
        router_cpu_s,
        passthrough_busy_s,
        router_busy_s,
        with_headers_s,
    )
    headed = f", with the router's headers {m.with_headers_rate:,.0f} msg/s" if with_headers else ""
    progress(
        f"bench: {routes:,} routes: pass-through {m.passthrough_rate:,.0f} msg/s{headed}, "
        f"router {m.router_rate:,.0f} msg/s, ratio {m.ratio:.2f}; the JIT compiled for "
        f"{router_compile_s:.1f} s of the router's {router.seconds:.1f} s; JVM CPU per message "
        f"{m.passthrough_cpu_us:.1f} µs (pass-through), {m.router_cpu_us:.1f} µs (router); the machine "
        f"busy {m.passthrough_machine_cores:.2f} and {m.router_machine_cores:.2f} cores"
    )
    return m


def warm_up_lines(throughput: list[Measurement], sustained: Measurement | None, cores: int) -> list[str]:
    """RESULTS.md: how much the JIT still compiled during the measured runs, and the long run."""
    if not throughput:
        return []
    shares = ", ".join(
        f"{m.routes:,} routes {m.router_compile_s:.1f} s of {m.router.seconds:.1f} s "
        f"({m.router_compile_share(cores):.0%})"
        for m in throughput
    )
    lines = [
        "### Warm-up the measured runs still paid",
        "",
        "The JVM's JIT compilers were still at work during the measured runs (their threads' time, from "
        "the JVM's `CompilationMXBean`, against the machine's CPU over the run, "
        f"{cores} cores): during the router's runs {shares}; during the pass-through's "
        + ", ".join(f"{m.passthrough_compile_s:.1f} s of {m.passthrough_s:.1f} s" for m in throughput)
        + ". Spark's planning, the state store and the Kafka clients are large bodies of code that a "
        "micro-batch goes through once: the JIT takes many batches to compile them all. `router run` "
        "pays that in its first minutes.",
        "",
    ]
    if sustained is not None:
        lines += [
            f"The long run, later in the same JVM: both queries on {sustained.messages:,} records, "
            f"{sustained.routes:,} routes.",
            "",
            "| pass-through msg/s | pass-through with the router's headers msg/s | router msg/s "
            "| router / pass-through | router msg/s within its full micro-batches "
            "| JIT during the router's run |",
            "|---:|---:|---:|---:|---:|---:|",
            f"| {sustained.passthrough_rate:,.0f} | {sustained.with_headers_rate:,.0f} | "
            f"{sustained.router_rate:,.0f} | {sustained.ratio:.2f} | "
            f"{sustained.router.full_batch_rate():,.0f} | {sustained.router_compile_s:.1f} s of "
            f"{sustained.router.seconds:.1f} s ({sustained.router_compile_share(cores):.0%}) |",
            "",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--routes", default="10,1000,100000")
    parser.add_argument(
        "--per-batch",
        type=int,
        default=100_000,
        help="most records per micro-batch, for both queries (default 100000)",
    )
    parser.add_argument(
        "--warm-ups", type=int, default=WARM_UPS, help=f"unmeasured runs of both first (default {WARM_UPS})"
    )
    parser.add_argument(
        "--sustained",
        type=int,
        default=0,
        help=f"then a long run of both on N records, 10 routes (bench.run: {SUSTAINED:,}; default 0: none)",
    )
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    sizes = [int(s) for s in args.routes.split(",")]
    with spark_bench(args.bootstrap, "router-bench") as (spark, bootstrap, folder):
        results = measure_throughput(
            spark, bootstrap, folder, sizes, args.messages, args.per_batch, args.warm_ups
        )
        if args.sustained:
            results.append(measure_once(spark, bootstrap, folder, 10, args.sustained, args.per_batch))
    for m in results:
        jobs, stages = m.router.jobs_per_batch()
        print(
            f"{m.messages:>9,} messages, {m.routes:>7,} routes: pass-through {m.passthrough_rate:>8,.0f} "
            f"msg/s, with the router's headers {m.with_headers_rate:>8,.0f} msg/s ({m.headers_ratio:.2f}), "
            f"router {m.router_rate:>8,.0f} msg/s ({m.ratio:.2f}); {jobs:g} jobs, {stages:g} stages "
            f"per micro-batch; JIT {m.router_compile_s:.1f} s of the router's {m.router.seconds:.1f} s; "
            f"JVM CPU per message {m.passthrough_cpu_us:.1f} µs (pass-through), {m.router_cpu_us:.1f} µs "
            f"(router, {m.router_cores:.2f} cores busy)"
        )


if __name__ == "__main__":
    main()
