"""How soon a running router acts: on a route written while it runs, and on a delayed message falling due.

usage: python -m bench.timing [--retry 2] [--delayed 50] [--timeout 300] [--bootstrap HOST:PORT]

Both run against one `router run` (`bench.router_process`) for instance i1 with a short `retry_s`
(`--retry`, default 2 s) on a fresh namespace with the benchmark's routes (`bench.common`):

* `route_propagation`: messages to a service no route names (each in a conversation of its own)
  are produced every `interval_s` seconds; after `lead_s` seconds a route for that service is
  written with `streaming.tables.topic_io.put_route`. The figure is the time from the route's
  record (its Kafka timestamp) to the first destination record routed by it (header `route` =
  its name), by that record's Kafka timestamp. It runs twice, for two services: the first route
  change after the router started (its JVM has not built a snapshot since its start) is reported
  apart from the second, the figure of the aim.
* `retry_precision`: `messages` messages to another service without a route are sent. Each is
  delayed (a record on the delayed topic with a `due_at` header, ISO-8601 UTC) and, while no route
  names its service, retried at `due_at` and delayed again. The retry figure is, per retry, the
  `decided_at` of the next delayed record (the micro-batch that routed it again) minus the `due_at`
  of the one before: how late the retry timer fires, the aim's figure; and the same with the next
  record's Kafka timestamp, which adds that batch's write. Once every message was retried `retries`
  times a route for the service is written, and the release figure is, per message, its record in
  the destination topic minus the `due_at` of the last delay before it. A release comes at the first
  retry after the route arrived; when that retry falls due while the router is still taking the
  route change in (shortly after the route was written), the release also waits for that.

Without --bootstrap the module starts an embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from itertools import pairwise

from confluent_kafka import Message, Producer

from bench.common import (
    AW,
    I1,
    existing,
    header,
    kafka,
    lone_message,
    message_id,
    percentile,
    progress,
    read_topics,
)
from bench.router_process import RouterProcess, RouterStop, fresh_router
from streaming import topics
from streaming.rules.model import Route, normalize_address
from streaming.tables.operations import route_key
from streaming.tables.topic_io import put_route

POLL_S = 0.5
DUE_AT_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # the router's `due_at` and `decided_at` headers


@dataclass(frozen=True)
class RouteChange:
    """From a route's write to the first record the router routed by it (Kafka timestamps, ms)."""

    route: str
    written_at_ms: int
    first_routed_at_ms: int
    sent: int
    """Messages to the route's service produced in all (before and after the write)."""
    first_decided_at_ms: int = 0
    """The earliest `decided_at` of the records routed by it: the micro-batch that first used it."""

    @property
    def propagation_ms(self) -> int:
        """The first routed record's timestamp minus the route record's."""
        return self.first_routed_at_ms - self.written_at_ms

    @property
    def decided_ms(self) -> int:
        """The first decision by the route (its micro-batch's time) minus the route record's timestamp."""
        return self.first_decided_at_ms - self.written_at_ms


@dataclass(frozen=True)
class RetryPrecision:
    """How late delayed messages left after they fell due: release minus `due_at`, in ms."""

    retry_s: float
    messages: int
    released: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    min_ms: float
    retried: int = 0
    """Retries seen (a delayed message delayed again at its due time, no route yet)."""
    retry_p50_ms: float = float("nan")
    retry_p95_ms: float = float("nan")
    retry_max_ms: float = float("nan")
    decided_p50_ms: float = float("nan")
    """The same retries timed by the decision: the next record's `decided_at` (the micro-batch that
    routed the message again) minus the `due_at` before it; the figures above are its write's."""
    decided_p95_ms: float = float("nan")
    decided_max_ms: float = float("nan")


@dataclass(frozen=True)
class TimingRun:
    """Both measurements of one `router run`, and how it stopped."""

    route_change: RouteChange
    retry: RetryPrecision
    stop: RouterStop
    first_change: RouteChange | None = None
    """The first route change after the router started (`route_change` is the next one)."""


def probe_route(name: str, service: str, host: str) -> Route:
    """A route in AW's table that sends `service` to a next hop of its own."""
    return Route(AW.name, name, f"TCP://{host}.example:4022", service=service)


@contextmanager
def steady_messages(bootstrap: str, topic: str, service: str, interval_s: float) -> Iterator[list[int]]:
    """Produce a message to `service` every `interval_s` seconds in a thread, until the block ends.

    Yields a one-item list with the count produced so far.
    """
    sent = [0]
    stop = threading.Event()

    def send() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        started = time.monotonic()
        while not stop.is_set():
            key, value = lone_message(f"{service}-{sent[0]}", service)
            producer.produce(topic, value, key)
            producer.poll(0)
            sent[0] += 1
            stop.wait(max(0.0, started + sent[0] * interval_s - time.monotonic()))
        producer.flush(30)

    thread = threading.Thread(target=send, name="steady-messages", daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(60)


def routed_by(bootstrap: str, topic: str, route: str) -> list[Message]:
    """The records of `topic` (if it exists yet) whose `route` header names `route`."""
    return [r for r in read_topics(bootstrap, existing(bootstrap, [topic])) if header(r, "route") == route]


def route_written_at(bootstrap: str, prefix: str, instance: str, route: Route) -> int:
    """The Kafka timestamp (ms) of the route's latest record on the routes topic."""
    key = route_key(instance, route.scope, route.name).encode()
    stamps = [
        r.timestamp()[1] for r in read_topics(bootstrap, [topics.routes_topic(prefix)]) if r.key() == key
    ]
    if not stamps:
        raise RuntimeError(f"route {route.name!r} is not on {topics.routes_topic(prefix)}")
    return stamps[-1]


def wait_until(condition: Callable[[], object], router: RouterProcess, what: str, timeout: float) -> None:
    """Poll `condition()` every POLL_S seconds until true; raise when the router ends or time is up."""
    deadline = time.monotonic() + timeout
    while not condition():
        router.ensure_running(what)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(POLL_S)


def route_propagation(
    router: RouterProcess,
    *,
    name: str = "BenchNewRoute",
    service: str = "LateRouted",
    interval_s: float = 0.01,
    lead_s: float = 5.0,
    timeout: float = 300.0,
) -> RouteChange:
    """Write a route for `service` while messages to it flow; time its first routed record."""
    bootstrap, prefix = router.bootstrap, router.prefix
    route = probe_route(name, service, f"{name.lower()}-hop")
    destination = topics.network_topic(normalize_address(route.address), prefix)
    outbound = topics.outbound_topic(router.instance.name, prefix)
    with steady_messages(bootstrap, outbound, service, interval_s) as sent:
        time.sleep(lead_s)
        progress(f"timing: {sent[0]} messages to {service} so far; writing route {route.name}")
        put_route(bootstrap, router.instance.name, route, topics.routes_topic(prefix))
        written = route_written_at(bootstrap, prefix, router.instance.name, route)
        wait_until(
            lambda: routed_by(bootstrap, destination, route.name), router, "record routed by it", timeout
        )
    routed = list(routed_by(bootstrap, destination, route.name))
    first = min(r.timestamp()[1] for r in routed)
    decided = min(due_ms(r, "decided_at") for r in routed)
    return RouteChange(route.name, written, first, sent[0], decided)


def delayed_records(bootstrap: str, prefix: str, instance: str, ids: set[str]) -> dict[str, list[Message]]:
    """The delayed topic's records of the messages `ids`, per message id, in the topic's order."""
    found: dict[str, list[Message]] = {}
    for record in read_topics(bootstrap, existing(bootstrap, [topics.delayed_topic(instance, prefix)])):
        ident = message_id(record.value())
        if ident in ids:
            found.setdefault(ident, []).append(record)
    return found


def due_ms(record: Message, name: str = "due_at") -> int:
    """A delayed record's `due_at` header (or another instant header, `name`) as epoch milliseconds."""
    text = header(record, name)
    if text is None:
        raise ValueError(f"a record of {record.topic()} has no {name} header")
    due = datetime.strptime(text, DUE_AT_FORMAT).replace(tzinfo=timezone.utc)
    return round(due.timestamp() * 1000)


def lateness(delays: Iterable[Message], released_ms: int) -> int:
    """Release minus the `due_at` of the last delay written before the release."""
    before = [d for d in delays if d.timestamp()[1] <= released_ms]
    if not before:
        raise ValueError("a message was released before any delay of it was written")
    return released_ms - due_ms(before[-1])


def retry_lateness(delays: dict[str, list[Message]], decided: bool = False) -> list[int]:
    """Per retry: the next delayed record's timestamp (or `decided_at`) minus the `due_at` before it."""
    late = []
    for records in delays.values():
        ordered = sorted(records, key=lambda r: r.timestamp()[1])
        if decided:
            late += [due_ms(b, "decided_at") - due_ms(a) for a, b in pairwise(ordered)]
        else:
            late += [b.timestamp()[1] - due_ms(a) for a, b in pairwise(ordered)]
    return sorted(late)


def retry_precision(
    router: RouterProcess,
    *,
    messages: int = 50,
    retries: int = 2,
    service: str = "LateDelayed",
    timeout: float = 300.0,
) -> RetryPrecision:
    """Delay `messages` messages (no route), let them be retried, then add a route; time both."""
    bootstrap, prefix, instance = router.bootstrap, router.prefix, router.instance.name
    route = probe_route("BenchRetryRoute", service, "retryhop")
    destination = topics.network_topic(normalize_address(route.address), prefix)
    ids = {f"{service}-{n}" for n in range(messages)}
    producer = Producer({"bootstrap.servers": bootstrap})
    for ident in sorted(ids):
        key, value = lone_message(ident, service)
        producer.produce(topics.outbound_topic(instance, prefix), value, key)
    producer.flush(30)
    progress(f"timing: sent {messages} messages to {service}; waiting until each is retried {retries} times")

    def retried_enough() -> bool:
        delays = delayed_records(bootstrap, prefix, instance, ids)
        return len(delays) == len(ids) and all(len(d) > retries for d in delays.values())

    wait_until(retried_enough, router, f"{retries} retries of every message", timeout)
    delays = delayed_records(bootstrap, prefix, instance, ids)
    retry_late, decided_late = retry_lateness(delays), retry_lateness(delays, decided=True)
    progress(f"timing: all retried; writing route {route.name}")
    put_route(bootstrap, instance, route, topics.routes_topic(prefix))

    def released() -> dict[str, int]:
        first: dict[str, int] = {}
        for record in routed_by(bootstrap, destination, route.name):
            ident = message_id(record.value())
            first[ident] = min(first.get(ident, record.timestamp()[1]), record.timestamp()[1])
        return first

    try:
        wait_until(lambda: len(released()) == len(ids), router, "release of every message", timeout)
    except TimeoutError as exc:
        progress(f"timing: {exc}; measuring those released")
    out = released()
    delays = delayed_records(bootstrap, prefix, instance, ids)
    late = sorted(lateness(delays[i], out[i]) for i in out)
    return RetryPrecision(
        retry_s=router.instance.retry_s,
        messages=messages,
        released=len(out),
        p50_ms=percentile(late, 50),
        p95_ms=percentile(late, 95),
        max_ms=float(late[-1]) if late else float("nan"),
        min_ms=float(late[0]) if late else float("nan"),
        retried=len(retry_late),
        retry_p50_ms=percentile(retry_late, 50),
        retry_p95_ms=percentile(retry_late, 95),
        retry_max_ms=float(retry_late[-1]) if retry_late else float("nan"),
        decided_p50_ms=percentile(decided_late, 50),
        decided_p95_ms=percentile(decided_late, 95),
        decided_max_ms=float(decided_late[-1]) if decided_late else float("nan"),
    )


def measure_timing(
    bootstrap: str, *, retry_s: float = 2.0, delayed: int = 50, timeout: float = 300.0
) -> TimingRun:
    """One fresh namespace and `router run` (i1 with `retry_s`): route propagation, then retries."""
    with fresh_router(bootstrap, replace(I1, retry_s=retry_s)) as router:
        first = route_propagation(router, name="BenchFirstRoute", service="FirstRouted", timeout=timeout)
        change = route_propagation(router, timeout=timeout)
        retry = retry_precision(router, messages=delayed, timeout=timeout)
        progress("timing: stopping the router (SIGINT)")
        return TimingRun(change, retry, router.stop(), first)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--retry", type=float, default=2.0, help="the instance's retry_s (default 2)")
    parser.add_argument("--delayed", type=int, default=50, help="delayed messages to time (default 50)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each step")
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    args = parser.parse_args()
    with kafka(args.bootstrap) as bootstrap:
        run = measure_timing(bootstrap, retry_s=args.retry, delayed=args.delayed, timeout=args.timeout)
    change, retry = run.route_change, run.retry
    if run.first_change is not None:
        print(f"first route change after the start: {run.first_change.propagation_ms:,} ms")
    print(
        f"route change: first record routed by {change.route} {change.propagation_ms:,} ms after "
        f"the route was written, decided {change.decided_ms:,} ms after it ({change.sent:,} messages "
        "sent to its service)"
    )
    print(
        f"delayed retry (retry_s {retry.retry_s:g}): {retry.retried} retries; retry minus due_at ms, "
        f"by decided_at: p50 {retry.decided_p50_ms:,.0f}, p95 {retry.decided_p95_ms:,.0f}, "
        f"max {retry.decided_max_ms:,.0f}; by the written record: p50 {retry.retry_p50_ms:,.0f}, "
        f"p95 {retry.retry_p95_ms:,.0f}, max {retry.retry_max_ms:,.0f}"
    )
    print(
        f"release after a route was written: {retry.released} of {retry.messages} released; "
        f"release minus due_at ms p50 {retry.p50_ms:,.0f}, p95 {retry.p95_ms:,.0f}, "
        f"max {retry.max_ms:,.0f}, min {retry.min_ms:,.0f}"
    )
    print(run.stop.describe())


if __name__ == "__main__":
    main()
