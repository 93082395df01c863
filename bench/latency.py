"""The router's latency under a fixed offered load: `router run` fed at a steady rate.

usage: python -m bench.latency [--rates 1000,10000] [--duration 60] [--warm-up 20] [--routes 10]
                               [--drain 120] [--state-partitions N] [--trigger SECONDS]
                               [--bootstrap HOST:PORT]

`measure_latency` loads a fresh namespace with instance i1's catalog and routes (`bench.common`),
starts `router run` (`bench.router_process`), waits until it has routed a probe message, offers a
warm-up load (the highest rate for `warm_up_s` seconds), then for each rate produces the benchmark's
messages to i1's outbound topic at that rate for `duration_s` seconds, paced (each message at its
own instant, not in bursts), and waits up to `drain_s` seconds for the router to deliver them. Per
message the latency is the Kafka timestamp of its record in its destination topic minus that of the
record produced (both CreateTime: the producer here sets the one, the router's Kafka sink the other).
It reports the percentiles, the offered rate achieved, how many messages arrived and how many
cores the machine kept busy while the load was offered (every process's: the router's, the
broker's and the load's own producer), then stops the router with SIGINT.

The warm-up is measured like the others and reported apart (`LatencyRun.warm_up`): in the first
seconds after it starts, the router's JVM compiles the decision's generated code, and its first
batches of a load take seconds (measured: 3.5-4 s for the first 45,000-record batches at
10,000 msg/s, 0.9 s for the same batches 15 s later). The loads after it show the router as it
runs for hours; the warm-up shows what a freshly started router adds.

The messages are encoded before each load starts, so that producing them is all the pacing loop
does. Without --bootstrap the module starts an embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer

from bench.common import (
    I1,
    destination_topics,
    existing,
    kafka,
    machine_busy_seconds,
    message_id,
    message_values,
    percentile,
    progress,
    read_topics,
    records_in,
    routes_for,
)
from bench.router_process import RouterProcess, RouterStop, fresh_router
from streaming import topics
from streaming.config import (
    DEFAULT_BUSY_MESSAGES,
    DEFAULT_BUSY_TRIGGER_SECONDS,
    DEFAULT_SHUFFLE_PARTITIONS,
    DEFAULT_TRIGGER_SECONDS,
)
from streaming.rules.model import Instance, Route

# Latency is measured from the producer's timestamp: a record waits at most this long to be sent.
LOAD_PRODUCER = {"linger.ms": "1", "acks": "all", "queue.buffering.max.messages": 2_000_000}
SLEEP_AHEAD_S = 0.0005  # a message more than this ahead of its instant waits for it
DRAIN_S = 120.0
WARM_UP_S = 20.0


@dataclass(frozen=True)
class Sent:
    """A load as produced: each message id's record timestamp (ms), when producing ran, and the
    CPU seconds the whole machine was busy meanwhile (`bench.common.machine_busy_seconds`)."""

    timestamps: dict[str, int]
    first: float
    last: float
    busy_s: float = float("nan")

    @property
    def rate(self) -> float:
        """The offered rate achieved: messages per second between the first and the last."""
        span = self.last - self.first
        return (len(self.timestamps) - 1) / span if span > 0 else float("nan")

    @property
    def busy_cores(self) -> float:
        """The cores the machine kept busy between the first message and the last."""
        span = self.last - self.first
        return self.busy_s / span if span > 0 else float("nan")


@dataclass(frozen=True)
class LatencyResult:
    """One offered load: what was offered and achieved, what arrived, and the latencies in ms."""

    target_rate: float
    achieved_rate: float
    duration_s: float
    produced: int
    received: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    latencies_ms: tuple[float, ...] = field(repr=False, default=())
    """Each received message's latency, sorted (for a CDF)."""
    busy_cores: float = float("nan")
    """Cores the whole machine kept busy while the load was offered (`bench.common.machine_busy_seconds`)."""

    def percentiles(self) -> dict[str, float]:
        """{"p50": ms, "p95": ms, "p99": ms}, as `bench.chart.render_chart` takes them."""
        return {"p50": self.p50_ms, "p95": self.p95_ms, "p99": self.p99_ms}


@dataclass(frozen=True)
class LatencyRun:
    """The loads measured on one `router run`, and how that router stopped."""

    results: list[LatencyResult]
    stop: RouterStop
    warm_up: LatencyResult | None = None
    """The load offered first, right after the router started (not one of `results`)."""


def offered_load(bootstrap: str, topic: str, values: Sequence[tuple[bytes, bytes]], rate: float) -> Sent:
    """Produce `values` (key, value) to `topic`, message `n` at `n / rate` seconds after the start.

    Each record's timestamp is set when it is handed to the producer; a message behind its
    instant is sent at once (the loop catches up), one ahead of it by more than SLEEP_AHEAD_S waits.
    """
    producer = Producer({"bootstrap.servers": bootstrap, **LOAD_PRODUCER})
    ids = [message_id(value) for _, value in values]
    stamps: dict[str, int] = {}
    busy = machine_busy_seconds()
    first = time.monotonic()
    for n, (key, value) in enumerate(values):
        ahead = first + n / rate - time.monotonic()
        if ahead > SLEEP_AHEAD_S:
            time.sleep(ahead)
        stamp = time.time_ns() // 1_000_000
        producer.produce(topic, value, key, timestamp=stamp)
        producer.poll(0)
        stamps[ids[n]] = stamp
    last = time.monotonic()
    busy = machine_busy_seconds() - busy
    if producer.flush(60):
        raise RuntimeError(f"offered load: records to {topic} still undelivered after 60 s")
    return Sent(stamps, first, last, busy)


def wait_for_records(bootstrap: str, names: Sequence[str], count: int, timeout: float) -> bool:
    """Wait until the topics hold `count` records; False when `timeout` passed first."""
    deadline = time.monotonic() + timeout
    while records_in(bootstrap, names) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(1.0)
    return True


def latencies(bootstrap: str, names: Sequence[str], sent: Sent) -> dict[str, int]:
    """Each sent message's latency in ms: its first destination record's timestamp minus its own."""
    found: dict[str, int] = {}
    for record in read_topics(bootstrap, existing(bootstrap, names)):
        ident = message_id(record.value())
        produced = sent.timestamps.get(ident)
        if produced is None:
            continue  # the probe, or another load's message
        kind, stamp = record.timestamp()
        if kind != TIMESTAMP_CREATE_TIME:
            raise ValueError(f"{record.topic()}: expected CreateTime timestamps, got type {kind}")
        found[ident] = min(found.get(ident, stamp - produced), stamp - produced)
    return found


def measure_load(
    router: RouterProcess,
    routes: Sequence[Route],
    rate: float,
    duration_s: float,
    *,
    tag: str,
    drain_s: float = DRAIN_S,
) -> LatencyResult:
    """Offer `rate` msg/s for `duration_s` seconds to a running router and measure the latencies.

    `tag` keeps this load's message ids apart from other loads' on the same namespace.
    """
    bootstrap, prefix, instance = router.bootstrap, router.prefix, router.instance
    names = destination_topics(prefix, instance, routes)
    count = max(1, round(rate * duration_s))
    services = max(1, len(routes) - 2)
    values = list(message_values(count, services, tag=tag))
    before = records_in(bootstrap, names)
    progress(f"latency: offering {rate:,.0f} msg/s for {duration_s:g} s ({count:,} messages)")
    sent = offered_load(bootstrap, topics.outbound_topic(instance.name, prefix), values, rate)
    progress(f"latency: offered {sent.rate:,.0f} msg/s; waiting up to {drain_s:g} s for the router")
    router.ensure_running("the load was routed")
    if not wait_for_records(bootstrap, names, before + count, drain_s):
        progress(f"latency: not every message arrived within {drain_s:g} s")
    found = sorted(latencies(bootstrap, names, sent).values())
    return LatencyResult(
        target_rate=rate,
        achieved_rate=sent.rate,
        duration_s=duration_s,
        produced=count,
        received=len(found),
        p50_ms=percentile(found, 50),
        p95_ms=percentile(found, 95),
        p99_ms=percentile(found, 99),
        max_ms=float(found[-1]) if found else float("nan"),
        latencies_ms=tuple(float(v) for v in found),
        busy_cores=sent.busy_cores,
    )


def measure_latency(
    bootstrap: str,
    rates: Sequence[float],
    duration_s: float,
    *,
    warm_up_s: float = WARM_UP_S,
    routes: int = 10,
    drain_s: float = DRAIN_S,
    instance: Instance = I1,
    state_partitions: int | None = None,
    trigger_s: float | None = None,
    busy_trigger_s: float | None = None,
    busy_messages: int | None = None,
) -> LatencyRun:
    """One fresh namespace, one `router run`, a warm-up load, then one load per rate; then SIGINT.

    `state_partitions`: the router's `shuffle_partitions` (default: the settings' default,
    `DEFAULT_SHUFFLE_PARTITIONS`); `trigger_s`: its `trigger_seconds` (default: the settings'
    default, `DEFAULT_TRIGGER_SECONDS`); `busy_trigger_s` and `busy_messages`: its
    `busy_trigger_seconds` and `busy_messages` (`busy_trigger_s` equal to `trigger_s`: one
    interval); all checked by the router as any settings file's.
    """
    more: dict[str, object] = {}
    if state_partitions is not None:
        more["shuffle_partitions"] = state_partitions
    if trigger_s is not None:
        more["trigger_seconds"] = trigger_s
    if busy_trigger_s is not None:
        more["busy_trigger_seconds"] = busy_trigger_s
    if busy_messages is not None:
        more["busy_messages"] = busy_messages
    settings = more or None
    with fresh_router(bootstrap, instance, routes, settings) as router:
        table = routes_for(routes)
        warm_up = None
        if warm_up_s > 0:
            progress(f"latency: warm-up at {max(rates):,.0f} msg/s for {warm_up_s:g} s, reported apart")
            warm_up = measure_load(router, table, max(rates), warm_up_s, tag="warm", drain_s=drain_s)
        results = [
            measure_load(router, table, rate, duration_s, tag=f"r{n}", drain_s=drain_s)
            for n, rate in enumerate(rates)
        ]
        progress("latency: stopping the router (SIGINT)")
        return LatencyRun(results, router.stop(), warm_up)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="1000,10000", help="offered loads, msg/s (default 1000,10000)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per load (default 60)")
    parser.add_argument(
        "--warm-up", type=float, default=WARM_UP_S, help="seconds of the first, separate load (default 20)"
    )
    parser.add_argument("--routes", type=int, default=10, help="route-table size (default 10)")
    parser.add_argument("--drain", type=float, default=DRAIN_S, help="seconds to wait for the router")
    parser.add_argument(
        "--state-partitions",
        type=int,
        metavar="N",
        help=f"the router's state partitions, its shuffle_partitions (default {DEFAULT_SHUFFLE_PARTITIONS})",
    )
    parser.add_argument(
        "--trigger",
        type=float,
        metavar="SECONDS",
        help=f"the router's micro-batch interval at a trickle, its trigger_seconds "
        f"(default {DEFAULT_TRIGGER_SECONDS:g})",
    )
    parser.add_argument(
        "--busy-trigger",
        type=float,
        metavar="SECONDS",
        help="the router's interval once --busy-messages wait, its busy_trigger_seconds "
        f"(default {DEFAULT_BUSY_TRIGGER_SECONDS:g}; the --trigger's value gives one interval)",
    )
    parser.add_argument(
        "--busy-messages",
        type=int,
        metavar="N",
        help=f"messages waiting that start a batch at the busy interval (default {DEFAULT_BUSY_MESSAGES})",
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    with kafka(args.bootstrap) as bootstrap:
        run = measure_latency(
            bootstrap,
            rates,
            args.duration,
            warm_up_s=args.warm_up,
            routes=args.routes,
            drain_s=args.drain,
            state_partitions=args.state_partitions,
            trigger_s=args.trigger,
            busy_trigger_s=args.busy_trigger,
            busy_messages=args.busy_messages,
        )
    for r in ([run.warm_up] if run.warm_up else []) + run.results:
        label = "warm-up: " if r is run.warm_up else ""
        print(
            f"{label}offered {r.target_rate:,.0f} msg/s (achieved {r.achieved_rate:,.0f}) "
            f"for {r.duration_s:g} s: "
            f"received {r.received:,} of {r.produced:,}; latency ms p50 {r.p50_ms:,.0f}, "
            f"p95 {r.p95_ms:,.0f}, p99 {r.p99_ms:,.0f}, max {r.max_ms:,.0f}; "
            f"the machine's cores busy {r.busy_cores:.2f}"
        )
    print(run.stop.describe())


if __name__ == "__main__":
    main()
