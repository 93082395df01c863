"""What the routes-topic reader costs: the first read of a large table, and a poll that finds nothing.

usage: python -m bench.table_reader [--routes 100000] [--polls 10000] [--bootstrap HOST:PORT]

It publishes N distinct routes (not timed) to a fresh routes topic, then, with one
`RouteTableReader`: times `read_to_end()` from the beginning (wall clock and the process's CPU
time, which counts librdkafka's threads too), a second `read_to_end()` that finds nothing new (one
end-offset request), and `poll()` calls that find nothing new (median, 99th percentile, max), and
last the wall time until `poll()` sees one newly written route. Without --bootstrap it starts the
embedded broker on a free port. It prints the figures; nothing is written.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
import uuid
from pathlib import Path

from streaming.devtools.embedded_kafka import EmbeddedKafka
from streaming.rules.model import Route
from streaming.tables.operations import RouteChange
from streaming.tables.reader import RouteTableReader
from streaming.tables.topic_io import publish_route_changes
from streaming.tables.validate import Source


def routes(count: int) -> list[RouteChange]:
    source = Source("bench")
    return [
        RouteChange(
            "create",
            "i1",
            "AW",
            f"Route{i}",
            Route("AW", f"Route{i}", f"TCP://host{i % 64}:4022", service=f"Service{i}"),
            source,
        )
        for i in range(count)
    ]


def measure(bootstrap: str, count: int, polls: int) -> None:
    topic = f"bench.routes.{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    publish_route_changes(bootstrap, routes(count), topic, timeout=300)
    print(f"published {count:,} routes to {topic} in {time.perf_counter() - started:.1f} s (not measured)")
    with RouteTableReader(bootstrap, topic, timeout=300) as reader:
        wall, cpu = time.perf_counter(), time.process_time()
        reader.read_to_end()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if len(reader.routes) != count:
            raise SystemExit(f"expected {count} routes, read {len(reader.routes)}")
        print(f"first read_to_end: {count:,} routes in {wall:.2f} s wall, {cpu:.2f} s CPU")

        started = time.perf_counter()
        reader.read_to_end()
        print(f"read_to_end, nothing new: {(time.perf_counter() - started) * 1e3:.1f} ms")

        samples = []
        for _ in range(polls):
            started_ns = time.perf_counter_ns()
            changed = reader.poll()
            samples.append(time.perf_counter_ns() - started_ns)
            if changed:
                raise SystemExit("poll() reported a change on a topic nobody writes to")
        samples.sort()
        print(
            f"poll, nothing new ({polls:,} calls): median {samples[polls // 2] / 1e3:.1f} us, "
            f"p99 {samples[polls * 99 // 100] / 1e3:.1f} us, max {samples[-1] / 1e3:.1f} us"
        )

        publish_route_changes(bootstrap, routes(count + 1)[count:], topic)
        started = time.perf_counter()
        while not reader.poll():
            if time.perf_counter() - started > 30:
                raise SystemExit("poll() did not see the new route within 30 s")
        print(
            f"poll saw a new route {(time.perf_counter() - started) * 1e3:.1f} ms after it was acknowledged"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--routes", type=int, default=100_000)
    parser.add_argument("--polls", type=int, default=10_000)
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"machine: {os.cpu_count()} cores; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.bootstrap:
        measure(args.bootstrap, args.routes, args.polls)
        return
    with tempfile.TemporaryDirectory(prefix="router-bench-") as state, EmbeddedKafka(Path(state)) as broker:
        measure(broker.bootstrap, args.routes, args.polls)


if __name__ == "__main__":
    main()
