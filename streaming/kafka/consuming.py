"""Taking what has arrived from a consumer, waiting only while nothing has.

`Consumer.consume(n, timeout)` returns when n records (or events) have come or when the timeout has
passed: asked for more than are there, it waits out its whole timeout. A reader that wants an
answer as soon as there is one waits for the first record with `poll`, then takes what else is
already there without waiting.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message

TAKEOVER_SESSION_MS = 10_000
"""The group session of a service's consumer (the directory service, an endpoint): a copy killed
without leaving its group holds its partitions this long before another copy of the service is
given them. Kafka's default is 45 s; the broker accepts 6 s and more (`group.min.session.timeout.ms`),
and a live copy sends a heartbeat every 3 s (librdkafka's default), so a busy copy is not dropped."""


def take_arrived(consumer: Consumer, most: int, timeout_s: float) -> list[Message]:
    """Up to `most` records (or events), waiting at most `timeout_s` for the first of them."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]


def header_pairs(record: Message) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers as (name, value) pairs, in order.

    librdkafka gives a consumed record's headers as such a list; confluent-kafka's stub types
    `headers()` as what `produce` accepts (a dict too, str values too), so this narrows it.
    """
    raw = record.headers() or []
    pairs = list(raw.items()) if isinstance(raw, dict) else list(raw)
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in pairs]
