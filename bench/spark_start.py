"""Spark's own start, the floor under `router run`'s: a bare streaming pass-through, started as a process.

usage: python -m bench.spark_start --bootstrap HOST:PORT --source TOPIC --sink TOPIC --checkpoint DIR

Run as a program, it builds the router's SparkSession (`streaming.spark.session.build_session`: the
same jars, JVM options and class archive) and starts one Structured Streaming query that copies
`--source` to `--sink` through `from_avro` and `to_avro`, with the router's consumer and producer
defaults (`streaming.spark.sources`), a micro-batch a second, until it is stopped (SIGINT). It reads
no routes, builds no state, decides nothing.

`first_copied_s` times it as `bench.startup` times `router run`: one message waiting on a fresh
source topic, a consumer subscribed to the sink before the process starts, and the seconds from
just before the process starts to the moment the consumer receives the copy. The router's start
less this one is what the router itself adds to a start: its Python, its topics checked, the
routes read, its larger query planned and compiled, its state store opened. Both follow the
machine's speed; their difference and ratio say how much of a start is the router's.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.common import AW, lone_message, message_id, new_prefix, progress, watcher
from bench.router_process import stop_group
from streaming.kafka.admin import ensure_topics

TIMEOUT_S = 180.0
STOP_GRACE_S = 30.0
PROJECT = Path(__file__).resolve().parents[1]


def topics_of(prefix: str) -> tuple[str, str]:
    """The source and sink topics of `first_copied_s` in namespace `prefix`."""
    return f"{prefix}.spark-start.in", f"{prefix}.spark-start.out"


def first_copied_s(bootstrap: str, folder: Path, prefix: str | None = None) -> float:
    """Seconds from the pass-through's process start to its first message copied.

    On the new topics of namespace `prefix` (`topics_of`; by default a fresh one), with its log and
    checkpoint in `folder`; the process is stopped before this returns or raises.
    """
    prefix = prefix or new_prefix()
    source, sink = topics_of(prefix)
    ensure_topics(bootstrap, [source, sink])
    ident = f"spark-start-{prefix}"
    key, value = lone_message(ident, AW.services[0])
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(source, value, key)
    producer.flush(30)
    consumer = watcher(bootstrap, sink, f"bench-spark-start-{prefix}")
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{prefix}-spark-start.log"
    command = [
        sys.executable, "-m", "bench.spark_start", "--bootstrap", bootstrap, "--source", source,
        "--sink", sink, "--checkpoint", str(folder / f"{prefix}-spark-start-checkpoint"),
    ]  # fmt: skip
    process: subprocess.Popen[bytes] | None = None
    try:
        with log.open("ab") as out:
            started = time.monotonic()  # the fork and exec, nothing before it
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=PROJECT,  # where `-m bench.spark_start` is found
            )
        while time.monotonic() - started < TIMEOUT_S:
            record = consumer.poll(0.05)
            if record is not None and not record.error() and message_id(record.value()) == ident:
                return time.monotonic() - started
            if process.poll() is not None:
                break
        tail = log.read_text(errors="replace")[-3000:]
        if process.poll() is not None:
            raise RuntimeError(f"the Spark pass-through ended ({process.returncode}), none copied:\n{tail}")
        raise RuntimeError(f"the Spark pass-through copied nothing within {TIMEOUT_S:g} s:\n{tail}")
    finally:
        if process is not None:
            stop_group(process, STOP_GRACE_S)
        consumer.close()


def run_pass_through(bootstrap: str, source: str, sink: str, checkpoint: str) -> None:
    """The pass-through, until stopped: the router's session, its Kafka defaults, one query."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from streaming.kafka.avro import schema_json
    from streaming.spark.session import build_session
    from streaming.spark.sources import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS

    spark = build_session("bench-spark-start")
    schema = schema_json("message")
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    stream = (
        reader.options(**CONSUMER_DEFAULTS).option("subscribe", source).option("startingOffsets", "earliest")
    )
    record = from_avro(F.col("value"), schema)
    out = stream.load().select(F.col("key"), to_avro(record, schema).alias("value"))
    writer = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**PRODUCER_DEFAULTS)
    )
    query = (
        writer.option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", required=True, help="the broker, HOST:PORT")
    parser.add_argument(
        "--source", help="the topic to copy; with --sink and --checkpoint, run the pass-through"
    )
    parser.add_argument("--sink", help="the topic to copy it to")
    parser.add_argument("--checkpoint", help="the query's checkpoint folder")
    args = parser.parse_args()
    if args.source and args.sink and args.checkpoint:
        run_pass_through(args.bootstrap, args.source, args.sink, args.checkpoint)
        return
    if args.source or args.sink or args.checkpoint:
        parser.error("--source, --sink and --checkpoint go together")
    folder = Path(tempfile.mkdtemp(prefix="bench-spark-start-"))
    try:
        seconds = first_copied_s(args.bootstrap, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    progress(f"bench: the Spark pass-through copied its first message {seconds:.1f} s after it started")
    print(f"{seconds:.2f}")


if __name__ == "__main__":
    main()
