"""Routing throughput against a Kafka-to-Kafka pass-through, measured in one run.

usage: python -m bench.throughput [--messages N] [--routes 10,1000,100000] [--per-batch N]
                                  [--bootstrap HOST:PORT] [--out bench/RESULTS.md]

For each route-table size it loads a fresh topic namespace with that many routes, produces N
messages (produced beforehand, not timed) to instance i1's outbound topic, and times two Spark
Structured Streaming queries over the same records with Trigger.AvailableNow on one SparkSession:

* pass-through: Kafka source -> from_avro -> to_avro -> Kafka sink, everything to one topic;
* router: the router job (`RouterJob`), which decodes, decides against the broadcast route
  snapshot and writes every message to its destination topic with decision headers.

A first, unmeasured run of both warms the JVM up. Rates are messages per second of query time
(start to termination). The ratios are what the run reports: router / pass-through per table size,
the router's time with the largest table over its time with the smallest, and the router's time
with conversations' route choices kept (K2, the default) over its time without, per table size.
Without --bootstrap it starts the embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from bench.common import kafka, new_prefix, prepare
from streaming.config import load_settings
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import schema_json
from streaming.spark.job import RouterJob
from streaming.spark.session import build_session

WARM_UP = 50_000  # messages of the unmeasured first run


@dataclass
class Measurement:
    routes: int
    passthrough_s: float
    router_s: float
    messages: int
    unkept_s: float
    """The router's time with conversations' choices not kept (keep_choice_s 0)."""

    @property
    def passthrough_rate(self) -> float:
        return self.messages / self.passthrough_s

    @property
    def router_rate(self) -> float:
        return self.messages / self.router_s


def run_passthrough(
    spark: SparkSession, bootstrap: str, source: str, sink: str, checkpoint: Path, per_batch: int
) -> float:
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
    out = stream.select(F.col("key"), to_avro(from_avro(F.col("value"), schema), schema).alias("value"))
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


def run_router(
    spark: SparkSession, bootstrap: str, prefix: str, checkpoint: Path, per_batch: int, keep_choices: bool
) -> tuple[float, int]:
    settings = load_settings(
        None,
        instance="i1",
        bootstrap=bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(checkpoint),
        max_offsets_per_trigger=per_batch,
        keep_choice_s=3600 if keep_choices else 0,
    )
    job = RouterJob(spark, settings)  # loads the route snapshot before the clock starts
    started = time.monotonic()
    job.replay()
    return time.monotonic() - started, job.routed


def machine() -> str:
    mem = ""
    try:
        kb = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    import pyspark

    return (
        f"{os.cpu_count()} cores{mem}; {platform.platform()}; Python {platform.python_version()}; "
        f"pyspark {pyspark.__version__} (local[2]); Kafka 4.1.1 (embedded, KRaft); {java}"
    )


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
    parser.add_argument("--bootstrap")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.routes.split(",")]

    state = Path(tempfile.mkdtemp(prefix="router-bench-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, state, ignore_errors=True)
        bootstrap = stack.enter_context(kafka(args.bootstrap))
        print(
            f"bench: broker {bootstrap}; {args.messages} messages per run; route tables {sizes}", flush=True
        )
        spark = build_session("router-bench")
        # Warm-up, not measured: the first queries of a JVM run up to twice as slow (class
        # loading, JIT), which would weigh on whichever query came first.
        prefix = new_prefix()
        outbound = prepare(bootstrap, prefix, 10, WARM_UP)
        print(f"bench: warming up with {WARM_UP:,} messages", flush=True)
        run_passthrough(
            spark, bootstrap, outbound, f"{prefix}.passthrough", state / f"{prefix}-pt", args.per_batch
        )
        run_router(spark, bootstrap, prefix, state / f"{prefix}-router", args.per_batch, keep_choices=True)
        results = []
        for count in sizes:
            prefix = new_prefix()
            outbound = prepare(bootstrap, prefix, count, args.messages)
            print(f"bench: {count} routes: produced; running the pass-through", flush=True)
            passthrough_s = run_passthrough(
                spark, bootstrap, outbound, f"{prefix}.passthrough", state / f"{prefix}-pt", args.per_batch
            )
            print(f"bench: {count} routes: pass-through {passthrough_s:.1f}s; running the router", flush=True)
            router_s, routed = run_router(
                spark, bootstrap, prefix, state / f"{prefix}-router", args.per_batch, keep_choices=True
            )
            if routed != args.messages:
                raise SystemExit(f"bench: the router routed {routed} of {args.messages} messages")
            print(f"bench: {count} routes: router {router_s:.1f}s; again without kept choices", flush=True)
            unkept_s, _ = run_router(
                spark, bootstrap, prefix, state / f"{prefix}-unkept", args.per_batch, keep_choices=False
            )
            m = Measurement(count, passthrough_s, router_s, args.messages, unkept_s)
            results.append(m)
            print(
                f"bench: {count} routes: pass-through {m.passthrough_rate:,.0f} msg/s, "
                f"router {m.router_rate:,.0f} msg/s, ratio {m.router_rate / m.passthrough_rate:.2f}",
                flush=True,
            )
        report = render(results, args.messages, args.per_batch)
        args.out.write_text(report, encoding="utf-8")
        print(report)


def render(results: list[Measurement], messages: int, per_batch: int) -> str:
    batches = -(-messages // per_batch)
    lines = [
        "# Routing throughput",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d} by `make bench` (`python -m bench.throughput`), "
        "in one run.",
        f"Machine: {machine()}.",
        "",
        f"Each row: {messages:,} messages (90% to services named by routes, 10% to local services),",
        "produced beforehand to two partitions, then routed with Trigger.AvailableNow on one SparkSession",
        f"in {batches} micro-batch(es) of at most {min(per_batch, messages):,} records (both queries).",
        "Pass-through: Kafka source, from_avro, to_avro, Kafka sink, all to one topic.",
        "Router: the router job (decode, decide against the broadcast snapshot, write to each",
        "destination topic with decision headers). Rate = messages / query time.",
        "",
        "| routes | pass-through msg/s | router msg/s | router / pass-through |",
        "|---:|---:|---:|---:|",
    ]
    for m in results:
        lines.append(
            f"| {m.routes:,} | {m.passthrough_rate:,.0f} | {m.router_rate:,.0f} | "
            f"{m.router_rate / m.passthrough_rate:.2f} |"
        )
    if len(results) > 1:
        small, large = results[0], results[-1]
        lines += [
            "",
            f"Router time with {large.routes:,} routes over {small.routes:,} routes: "
            f"{large.router_s / small.router_s:.2f} (aim: at most 1.3).",
            "Router over pass-through, aim: 0.7 or better.",
        ]
    lines += [
        "",
        "Keeping conversations' route choices (K2, the default; every message here is an unpinned",
        "initiator's, so every conversation is kept): the router's time, kept over not kept.",
        "",
        "| routes | router msg/s, not kept | kept / not kept |",
        "|---:|---:|---:|",
    ]
    for m in results:
        lines.append(f"| {m.routes:,} | {m.messages / m.unkept_s:,.0f} | {m.router_s / m.unkept_s:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
