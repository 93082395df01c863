"""Taking what has arrived from a consumer, waiting only while nothing has.

`Consumer.consume(n, timeout)` returns when n records (or events) have come or when the timeout has
passed: asked for more than are there, it waits out its whole timeout. A reader that wants an
answer as soon as there is one waits for the first record with `poll`, then takes what else is
already there without waiting.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message


def take_arrived(consumer: Consumer, most: int, timeout_s: float) -> list[Message]:
    """Up to `most` records (or events), waiting at most `timeout_s` for the first of them."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]
