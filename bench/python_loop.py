"""What a user might write instead of the router: one Python process that consumes, decides, produces.

usage: python -m bench.python_loop [--messages N] [--routes N] [--batch N] [--schema-once]
                                   [--bootstrap HOST:PORT]

`python_loop` reads the benchmark's records (`bench.common.prepare`) with a confluent-kafka consumer,
decodes each with fastavro (`streaming.kafka.avro.decode_message`; with --schema-once,
`bench.common.decode_fast`, which skips that function's per-call schema look-up), decides each
group of `batch` messages as one `RoutingBatch` with the reference engine (`ReferenceEngine`), and
writes every message with a confluent-kafka producer to the topic the router would write it to
(`streaming.topics`), with `outcome` (and `route`, `reason` when set) headers. Between groups it
keeps what the engine hands on: the kept choices (K2), the conversations waiting behind a delayed
message (D1) and the outstanding MissingRoute requests (B4).

What it leaves out, as a short script would: the retry of delayed messages (none are delayed with
these records), the MissingRoute messages themselves, route changes while it runs (the table is
read once), and delivery guarantees beyond the consumer's auto-commit.
Without --bootstrap the module starts an embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaRecord

from bench.common import (
    I1,
    decode_fast,
    flush_all,
    kafka,
    new_prefix,
    prepare,
    produce,
    progress,
    routes_for,
    tuned_producer,
)
from streaming import topics
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import decode_message, encode_message, message_origin, message_record_to_model
from streaming.rules.batch import RoutingBatch
from streaming.rules.engine import ReferenceEngine
from streaming.rules.model import (
    ChoiceKey,
    Decision,
    Endpoint,
    Instance,
    Message,
    Outcome,
    Route,
    RouteIdentity,
    normalize_address,
)

BATCH = 1_000
Decoder = Callable[[bytes | None], dict[str, Any]]


@dataclass(frozen=True)
class LoopResult:
    """`messages` routed in `seconds`, from the first record read to the last delivery report."""

    messages: int
    seconds: float
    outcomes: Mapping[str, int] = field(default_factory=dict)
    """How many messages had each outcome."""

    @property
    def rate(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds


class Destinations:
    """The router's topic for each decision (`streaming.topics`), named once per destination."""

    def __init__(self, bootstrap: str, instance: Instance, prefix: str, instances: Sequence[Instance]):
        self.bootstrap = bootstrap
        self.instance = instance
        self.prefix = prefix
        # A send to the address of an instance in the catalogs goes to its inbound topic.
        self.inbound = {normalize_address(i.address): topics.inbound_topic(i.name, prefix) for i in instances}
        self.named: dict[tuple[str, str | None, str | None], str] = {}

    def topic(self, decision: Decision, message: Message) -> str:
        """The topic `decision` sends `message` to; a new one is created before its first record."""
        outcome = decision.outcome
        where = decision.database if outcome is Outcome.DELIVER else decision.address
        what = message.service if outcome is Outcome.DELIVER else None
        key = (outcome.value, where, what)
        name = self.named.get(key)
        if name is None:
            name = self._name(outcome, where, what)
            ensure_topics(self.bootstrap, [name])
            self.named[key] = name
        return name

    def _name(self, outcome: Outcome, where: str | None, service: str | None) -> str:
        i, prefix = self.instance.name, self.prefix
        if outcome is Outcome.DELIVER and where is not None and service is not None:
            return topics.queue_topic(i, where, service, prefix)
        if outcome in (Outcome.SEND, Outcome.FORWARD) and where is not None:
            address = normalize_address(where)
            return self.inbound.get(address) or topics.network_topic(address, prefix)
        if outcome is Outcome.DELAYED:
            return topics.delayed_topic(i, prefix)
        return topics.dropped_topic(i, prefix)


class Router:
    """The loop's state between groups, and the decision of one group."""

    def __init__(
        self, instance: Instance, routes: Sequence[Route], destinations: Destinations, decode: Decoder
    ):
        self.engine = ReferenceEngine()
        self.decode = decode
        self.instance = instance
        self.routes = tuple(routes)
        self.destinations = destinations
        self.choices: dict[ChoiceKey, RouteIdentity] = {}
        self.rotation: dict[str, int] = {}
        self.waiting: set[Endpoint] = set()
        self.requests: set[tuple[str, str]] = set()
        self.outcomes: Counter[str] = Counter()

    def route(self, group: Sequence[KafkaRecord], producer: Producer) -> None:
        """Decode, decide and write one group of records, in order."""
        records = [self.decode(r.value()) for r in group]
        messages = tuple(message_record_to_model(rec, message_origin(rec, inbound=False)) for rec in records)
        result = self.engine.decide(
            RoutingBatch(
                instance=self.instance,
                routes=self.routes,
                messages=messages,
                now=datetime.now(timezone.utc),
                pending_requests=frozenset(self.requests),
                waiting_endpoints=frozenset(self.waiting),
                choices=self.choices,
                rotation=self.rotation,
            )
        )
        self.choices.update(result.choices)
        self.rotation.update(result.rotation)
        self.requests.update(result.requests)
        for kafka_record, record, message, decision in zip(
            group, records, messages, result.decisions, strict=True
        ):
            value = kafka_record.value()
            if decision.outcome is Outcome.DELAYED:
                self.waiting.add(message.endpoint)
                value = encode_message({**record, "attempt": record["attempt"] + 1})
            elif decision.outcome is Outcome.FORWARD and decision.hops_remaining is not None:
                value = encode_message({**record, "hops_remaining": decision.hops_remaining})
            topic = self.destinations.topic(decision, message)
            produce(producer, topic, kafka_record.key(), value, decision_headers(decision))
            self.outcomes[decision.outcome.value] += 1


def decision_headers(decision: Decision) -> list[tuple[str, bytes]]:
    """The outcome, and the route and the reason when the decision has them."""
    headers = [("outcome", decision.outcome.value.encode())]
    if decision.route is not None:
        headers.append(("route", decision.route.encode()))
    if decision.reason is not None:
        headers.append(("reason", decision.reason.value.encode()))
    return headers


def python_loop(
    bootstrap: str,
    source: str,
    prefix: str,
    messages: int,
    routes: Sequence[Route],
    *,
    instance: Instance = I1,
    batch: int = BATCH,
    decode: Decoder = decode_message,
) -> LoopResult:
    """Route the first `messages` records of `source` (the instance's outbound topic) and time it.

    `decode` turns a record's value into a message record (default: the project's codec).
    """
    destinations = Destinations(bootstrap, instance, prefix, [instance])
    router = Router(instance, routes, destinations, decode)
    failures: list[KafkaError] = []
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-loop-{prefix}", "auto.offset.reset": "earliest"}
    )
    writer = tuned_producer(bootstrap, failures)
    reader.subscribe([source])
    group: list[KafkaRecord] = []
    done = 0
    started: float | None = None
    try:
        while done < messages:
            wanted = min(batch, messages - done) - len(group)
            for record in reader.consume(num_messages=wanted, timeout=1.0):
                if record.error() is not None:
                    raise KafkaException(record.error())
                group.append(record)
            if started is None and group:
                started = time.monotonic()
            if len(group) == min(batch, messages - done):
                router.route(group, writer)
                done += len(group)
                group = []
                writer.poll(0)
        flush_all(writer, failures, "python loop")
        ended = time.monotonic()
    finally:
        reader.close()
    return LoopResult(messages, ended - (started or ended), dict(router.outcomes))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--routes", type=int, default=10, help="route-table size (default 10)")
    parser.add_argument("--batch", type=int, default=BATCH, help="messages per RoutingBatch (default 1000)")
    parser.add_argument(
        "--schema-once",
        action="store_true",
        help="decode with the schema parsed once (bench.common.decode_fast), not with decode_message",
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    args = parser.parse_args()
    decode = decode_fast if args.schema_once else decode_message
    with kafka(args.bootstrap) as bootstrap:
        prefix = new_prefix()
        progress(f"python loop: producing {args.messages:,} messages, {args.routes} routes, under {prefix}")
        source = prepare(bootstrap, prefix, args.routes, args.messages)
        progress("python loop: routing")
        routes = routes_for(args.routes)
        result = python_loop(
            bootstrap, source, prefix, args.messages, routes, batch=args.batch, decode=decode
        )
    outcomes = ", ".join(f"{k} {v:,}" for k, v in sorted(result.outcomes.items()))
    print(
        f"python loop: {result.rate:,.0f} msg/s ({result.messages:,} in {result.seconds:.2f} s; "
        f"{args.routes} routes, {args.batch} per batch, "
        f"{'schema parsed once' if args.schema_once else 'decode_message'}; {outcomes})"
    )


if __name__ == "__main__":
    main()
