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
import random
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from streaming import topics
from streaming.config import load_settings
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import (
    encode_message,
    encode_route,
    new_message_record,
    route_to_record,
    schema_json,
)
from streaming.kafka.embedded import EmbeddedKafka
from streaming.rules.model import Database, Instance, Route
from streaming.spark.job import RouterJob
from streaming.spark.session import build_session
from streaming.tables.topic_io import publish_catalogs

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("Local0", "Local1"))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ())
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=3600.0)
ADDRESSES = 8  # distinct next hops, so the router writes to as many network topics
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


def routes_for(count: int) -> list[Route]:
    """`count` routes in AW's table, each naming one service, over a few next-hop addresses."""
    table = [Route("AW", "AutoCreatedLocal", "LOCAL"), Route("msdb", "AutoCreatedLocal", "LOCAL")]
    table += [
        Route("AW", f"R{i}", f"TCP://hop{i % ADDRESSES}.example:4022", service=f"Svc{i}")
        for i in range(max(0, count - 2))
    ]
    return table


def produce_routes(bootstrap: str, prefix: str, routes: list[Route]) -> None:
    topic = topics.routes_topic(prefix)
    ensure_topics(bootstrap, [topic], compacted=True)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"})
    for r in routes:
        producer.produce(topic, key=f"{r.scope}/{r.name}".encode(), value=encode_route(route_to_record(r)))
        producer.poll(0)
    producer.flush(120)


def produce_messages(bootstrap: str, topic: str, count: int, services: int, seed: int = 7) -> None:
    """Messages to the services that have routes (90%) and to local services (10%)."""
    ensure_topics(bootstrap, [topic], partitions=2)
    rng = random.Random(seed)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500000,
        }
    )
    now = datetime.now(timezone.utc)
    for n in range(count):
        conversation = f"c{n // 4}"
        service = f"Local{n % 2}" if rng.random() < 0.1 else f"Svc{rng.randrange(max(1, services))}"
        record = new_message_record(
            message_id=f"m{n}",
            conversation_id=conversation,
            sequence_number=n % 4,
            to_service=service,
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=now,
            body=b"x" * 200,
        )
        producer.produce(topic, key=conversation.encode(), value=encode_message(record))
        if n % 10000 == 0:
            producer.poll(0)
    producer.flush(300)


def prepare(bootstrap: str, prefix: str, routes: int, messages: int) -> str:
    """A fresh topic namespace with the catalog, routes and messages; return its outbound topic."""
    publish_catalogs(bootstrap, [I1], topics.catalogs_topic(prefix))
    produce_routes(bootstrap, prefix, routes_for(routes))
    outbound = topics.outbound_topic("i1", prefix)
    produce_messages(bootstrap, outbound, messages, services=max(1, routes - 2))
    return outbound


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
    broker = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            broker = EmbeddedKafka(state / "kafka")
            bootstrap = broker.start(detach=False).bootstrap
        print(
            f"bench: broker {bootstrap}; {args.messages} messages per run; route tables {sizes}", flush=True
        )
        spark = build_session("router-bench")
        # Warm-up, not measured: the first queries of a JVM run up to twice as slow (class
        # loading, JIT), which would weigh on whichever query came first.
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        outbound = prepare(bootstrap, prefix, 10, WARM_UP)
        print(f"bench: warming up with {WARM_UP:,} messages", flush=True)
        run_passthrough(
            spark, bootstrap, outbound, f"{prefix}.passthrough", state / f"{prefix}-pt", args.per_batch
        )
        run_router(spark, bootstrap, prefix, state / f"{prefix}-router", args.per_batch, keep_choices=True)
        results = []
        for count in sizes:
            prefix = f"bench{uuid.uuid4().hex[:8]}"
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
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(state, ignore_errors=True)


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
