"""The transport ceiling: how fast records only move through Kafka on this machine, not routed.

usage: python -m bench.transport [--messages N] [--bootstrap HOST:PORT]

Three measurements over the benchmark's records (`bench.common.prepare`: Avro messages, key =
conversation id, two partitions), none of which decodes anything:

* `confluent_copy`: a confluent-kafka consume -> produce loop that copies each record (key, value)
  to another topic, timed from the first record read to the last delivery report;
* `consumer_performance`: Kafka's own `org.apache.kafka.tools.ConsumerPerformance` reading them;
* `producer_performance`: Kafka's own `org.apache.kafka.tools.ProducerPerformance` writing as many
  records of the same mean size (its payloads are its own: random bytes, no key).

Both producers get the same settings (`bench.common.PRODUCER_TUNING`). The perf tools run from the jars
`make setup` copies into `.cache/jars/kafka-tools/` (jvm/kafka-tools/pom.xml, the broker's version).
Without --bootstrap the module starts an embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException

from bench.common import (
    PARTITIONS,
    PRODUCER_TUNING,
    flush_all,
    kafka,
    message_values,
    new_prefix,
    prepare,
    produce,
    progress,
    tuned_producer,
)
from streaming.devtools.embedded_kafka import java_executable
from streaming.jars import kafka_tools_classpath
from streaming.kafka.admin import ensure_topics

CONSUME_BATCH = 10_000
PRODUCER_PERF_CLASS = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF_CLASS = "org.apache.kafka.tools.ConsumerPerformance"
TOOL_JVM_OPTIONS = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true")
TOOL_TIMEOUT_S = 600


@dataclass(frozen=True)
class CopyResult:
    """`messages` copied in `seconds`, from the first record read to the last delivery report."""

    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds


@dataclass(frozen=True)
class ProducerPerf:
    """The final line of ProducerPerformance: throughput, and latency from send to acknowledgement."""

    records: int
    record_size: int
    records_per_s: float
    mb_per_s: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float


@dataclass(frozen=True)
class ConsumerPerf:
    """ConsumerPerformance's figures; `fetch_*` leave out the time the consumer group took to form."""

    messages: int
    mb: float
    mb_per_s: float
    records_per_s: float
    rebalance_ms: float
    fetch_ms: float
    fetch_mb_per_s: float
    fetch_records_per_s: float


# --- confluent-kafka --------------------------------------------------------------------------------


def confluent_copy(bootstrap: str, source: str, sink: str, messages: int) -> CopyResult:
    """Copy the first `messages` records of `source` to `sink` (key and value) and time it."""
    ensure_topics(bootstrap, [sink], partitions=PARTITIONS)
    failures: list[KafkaError] = []
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-copy-{sink}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    writer = tuned_producer(bootstrap, failures)
    reader.subscribe([source])
    copied = 0
    started: float | None = None
    try:
        while copied < messages:
            batch = reader.consume(num_messages=min(CONSUME_BATCH, messages - copied), timeout=1.0)
            if started is None and batch:
                started = time.monotonic()
            for record in batch:
                error = record.error()
                if error is not None:
                    raise KafkaException(error)
                produce(writer, sink, record.key(), record.value())
            copied += len(batch)
            writer.poll(0)
        flush_all(writer, failures, f"copy to {sink}")
        ended = time.monotonic()
    finally:
        reader.close()
    return CopyResult(messages, ended - (started or ended))


# --- Kafka's perf tools -----------------------------------------------------------------------------


def run_tool(main_class: str, *args: str) -> str:
    """Run one of Kafka's tools to its end and return its stdout; a failure raises with its output."""
    classpath = os.pathsep.join(str(jar) for jar in kafka_tools_classpath())
    command = [java_executable(), *TOOL_JVM_OPTIONS, "-cp", classpath, main_class, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{main_class} exited {result.returncode}:\n{(result.stdout + result.stderr)[-3000:]}"
        )
    return result.stdout


_PRODUCER_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<records_per_s>[\d.]+) records/sec \((?P<mb_per_s>[\d.]+) MB/sec\), "
    r"(?P<avg_latency_ms>[\d.]+) ms avg latency, (?P<max_latency_ms>[\d.]+) ms max latency, "
    r"(?P<p50_ms>[\d.]+) ms 50th, (?P<p95_ms>[\d.]+) ms 95th, (?P<p99_ms>[\d.]+) ms 99th, "
    r"(?P<p999_ms>[\d.]+) ms 99.9th"
)
# ConsumerPerformance's column for each ConsumerPerf field.
_CONSUMER_COLUMNS = {
    "mb": "data.consumed.in.MB",
    "mb_per_s": "MB.sec",
    "records_per_s": "nMsg.sec",
    "rebalance_ms": "rebalance.time.ms",
    "fetch_ms": "fetch.time.ms",
    "fetch_mb_per_s": "fetch.MB.sec",
    "fetch_records_per_s": "fetch.nMsg.sec",
}


def parse_producer_performance(output: str, record_size: int) -> ProducerPerf:
    """The figures of ProducerPerformance's last summary line (the run's total)."""
    found = list(_PRODUCER_SUMMARY.finditer(output))
    if not found:
        raise ValueError(f"expected ProducerPerformance's summary line, got:\n{output[-2000:]}")
    figures = found[-1].groupdict()
    records = int(figures.pop("records"))
    return ProducerPerf(records, record_size, **{k: float(v) for k, v in figures.items()})


def producer_performance(bootstrap: str, topic: str, records: int, record_size: int) -> ProducerPerf:
    """Write `records` records of `record_size` bytes to `topic` as fast as the producer can."""
    ensure_topics(bootstrap, [topic], partitions=PARTITIONS)
    props = [f"{k}={v}" for k, v in {"bootstrap.servers": bootstrap, **PRODUCER_TUNING}.items()]
    output = run_tool(
        PRODUCER_PERF_CLASS,
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", str(record_size),
        "--throughput", "-1",
        "--producer-props", *props,
    )  # fmt: skip
    return parse_producer_performance(output, record_size)


def parse_consumer_performance(output: str) -> ConsumerPerf:
    """The figures of ConsumerPerformance's table: a header line and one line of values."""
    lines = [line for line in output.splitlines() if line.count(",") >= 9]
    header = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if header is None or header + 1 >= len(lines):
        raise ValueError(f"expected ConsumerPerformance's header and figures, got:\n{output[-2000:]}")
    names, values = csv.reader([lines[header], lines[header + 1]], skipinitialspace=True)
    row = dict(zip(names, values, strict=True))
    figures = {field: float(row[column]) for field, column in _CONSUMER_COLUMNS.items()}
    return ConsumerPerf(messages=int(row["data.consumed.in.nMsg"]), **figures)


def consumer_performance(bootstrap: str, topic: str, messages: int) -> ConsumerPerf:
    """Read `messages` records of `topic` from its beginning with a new consumer group."""
    output = run_tool(
        CONSUMER_PERF_CLASS,
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--messages", str(messages),
        "--group", f"bench-perf-{topic}",
        "--timeout", "60000",
    )  # fmt: skip
    return parse_consumer_performance(output)


def mean_message_size(sample: int = 1000) -> int:
    """The mean size in bytes of the benchmark's encoded messages (their Kafka values)."""
    sizes = [len(value) for _, value in message_values(sample, services=8)]
    return round(sum(sizes) / len(sizes))


# --- alone ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    args = parser.parse_args()
    with kafka(args.bootstrap) as bootstrap:
        prefix = new_prefix()
        progress(f"transport: producing {args.messages:,} messages under {prefix}")
        source = prepare(bootstrap, prefix, routes=10, messages=args.messages)
        progress("transport: confluent-kafka copy")
        copy = confluent_copy(bootstrap, source, f"{prefix}.copy", args.messages)
        progress("transport: ConsumerPerformance")
        consumed = consumer_performance(bootstrap, source, args.messages)
        size = mean_message_size()
        progress(f"transport: ProducerPerformance, {size}-byte records")
        produced = producer_performance(bootstrap, f"{prefix}.perf", args.messages, size)
    print(f"confluent-kafka copy:   {copy.rate:>10,.0f} msg/s  ({copy.messages:,} in {copy.seconds:.2f} s)")
    print(
        f"ConsumerPerformance:    {consumed.fetch_records_per_s:>10,.0f} msg/s  "
        f"({consumed.fetch_mb_per_s:.1f} MB/s; {consumed.records_per_s:,.0f} msg/s with the group join)"
    )
    print(
        f"ProducerPerformance:    {produced.records_per_s:>10,.0f} msg/s  ({produced.mb_per_s:.1f} MB/s, "
        f"{produced.record_size} B; latency ms p50 {produced.p50_ms:g}, p95 {produced.p95_ms:g}, "
        f"p99 {produced.p99_ms:g}, max {produced.max_latency_ms:g})"
    )


if __name__ == "__main__":
    main()
