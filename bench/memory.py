"""What the router holds for many conversations: driver heap and state store, before and after expiry.

usage: python -m bench.memory [--conversations 1000000] [--keep 60] [--bootstrap HOST:PORT]

`measure_memory` produces one message for each of `conversations` conversations (each to a service
a route names, so each conversation keeps its choice, K2) and routes them with `RouterJob.replay`
and `keep_choice_s` = `keep_s`. It then reads:

* the driver's heap in use after a full collection (`Runtime.totalMemory - freeMemory`, after
  `System.gc()`), which in local mode is the executors' heap too;
* the state store: how many keys Spark's state data source reads from the query's checkpoint, and
  the bytes of the checkpoint's `state/` folder on disk (RocksDB's files and their snapshots).

It waits until `keep_s` has passed since the last choice was made, replays again (nothing new to
read; the tick runs a micro-batch, in which the processor's timeouts end the expired entries) and
reads both again. Without --bootstrap it starts the embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import KafkaError
from pyspark.sql import SparkSession

from bench.common import (
    AW,
    I1,
    encode_fast,
    flush_all,
    new_prefix,
    prepare,
    produce,
    progress,
    spark_bench,
    tuned_producer,
)
from streaming.config import load_settings
from streaming.kafka.avro import new_message_record
from streaming.spark.job import RouterJob
from streaming.spark.state import read_state

SERVICES = 8
"""Conversations go to the first SERVICES services of the benchmark's routes (`routes_for`)."""


@dataclass(frozen=True)
class Held:
    """What the router held at one moment."""

    heap_mb: float
    state_keys: int
    state_disk_mb: float


@dataclass(frozen=True)
class MemoryResult:
    conversations: int
    keep_s: float
    route_s: float
    """How long routing the conversations took (one replay)."""
    routed: Held
    expired: Held


def produce_conversations(bootstrap: str, topic: str, count: int) -> None:
    """One message in each of `count` conversations, from AW to services the routes name."""
    failures: list[KafkaError] = []
    producer = tuned_producer(bootstrap, failures)
    enqueued = datetime.now(timezone.utc)
    for n in range(count):
        record = new_message_record(
            message_id=f"mem{n}",
            conversation_id=f"memc{n}",
            to_service=f"Svc{n % SERVICES}",
            from_service="InitiatorService",
            origin_database=AW.name,
            enqueued_at=enqueued,
        )
        produce(producer, topic, f"memc{n}".encode(), encode_fast(record))
        if n % 50_000 == 0:
            producer.poll(0)
    flush_all(producer, failures, "memory: conversations", timeout=300)


def heap_mb(spark: SparkSession) -> float:
    """The JVM's heap in use after a full collection, in MiB."""
    jvm = spark._jvm
    assert jvm is not None
    runtime = jvm.java.lang.Runtime.getRuntime()
    jvm.java.lang.System.gc()
    return (runtime.totalMemory() - runtime.freeMemory()) / 2**20


def folder_mb(folder: Path) -> float:
    """Bytes of the files under `folder`, in MiB."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def held(spark: SparkSession, job: RouterJob) -> Held:
    """What `job` holds now (see the module docstring)."""
    keys = read_state(spark, job.checkpoint).count()
    state = job.checkpoint / "state"
    if not isinstance(state, Path):  # measure_memory puts the checkpoint in a local folder
        raise ValueError(f"expected the job's checkpoint on the local disk, got {state}")
    return Held(heap_mb(spark), keys, folder_mb(state))


def measure_memory(
    spark: SparkSession, bootstrap: str, conversations: int, keep_s: float, folder: Path
) -> MemoryResult:
    """Route `conversations` one-message conversations, read what is held, let it expire, read again."""
    prefix = new_prefix()
    outbound = prepare(bootstrap, prefix, routes=SERVICES + 2, messages=0)
    progress(f"memory: producing {conversations:,} conversations under {prefix}")
    produce_conversations(bootstrap, outbound, conversations)
    settings = load_settings(
        None,
        instance=I1.name,
        bootstrap=bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(folder / prefix),
        max_offsets_per_trigger=200_000,
        keep_choice_s=keep_s,
    )
    job = RouterJob(spark, settings)
    progress(f"memory: routing {conversations:,} conversations")
    started = time.monotonic()
    job.replay()
    route_s = time.monotonic() - started
    chosen_by = time.monotonic()
    if job.routed != conversations:
        raise RuntimeError(f"memory: routed {job.routed:,} of {conversations:,} messages")
    routed = held(spark, job)
    progress(
        f"memory: after routing: heap {routed.heap_mb:,.0f} MiB, {routed.state_keys:,} state keys, "
        f"{routed.state_disk_mb:,.0f} MiB of state on disk; waiting {keep_s:g} s for the choices to expire"
    )
    time.sleep(max(0.0, keep_s + 2 - (time.monotonic() - chosen_by)))
    job.replay()
    expired = held(spark, job)
    job.close()
    return MemoryResult(conversations, keep_s, route_s, routed, expired)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=1_000_000)
    parser.add_argument("--keep", type=float, default=300.0, help="keep_choice_s (default 300)")
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    args = parser.parse_args()
    with spark_bench(args.bootstrap, "router-bench-memory") as (spark, bootstrap, folder):
        result = measure_memory(spark, bootstrap, args.conversations, args.keep, folder)
    for name, h in (("after routing", result.routed), ("after expiry", result.expired)):
        print(
            f"{name}: heap {h.heap_mb:,.0f} MiB, {h.state_keys:,} state keys, "
            f"{h.state_disk_mb:,.1f} MiB of state on disk"
        )
    print(f"routing {result.conversations:,} conversations took {result.route_s:.1f} s")


if __name__ == "__main__":
    main()
