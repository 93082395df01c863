"""Every record a topic holds now: what a test reads back after a job or a tool has written."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Message, TopicPartition

from streaming.kafka.admin import end_offsets


def records_now(bootstrap: str, topic: str, timeout_s: float = 10.0) -> list[Message]:
    """The records of `topic` up to its end offsets of now, each partition from its first.

    A wait of `timeout_s` with nothing more arriving fails the test, naming how far it read.
    """
    ends = end_offsets(bootstrap, topic)
    total = sum(ends.values())
    out: list[Message] = []
    if total == 0:
        return out
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        while len(out) < total:
            batch = consumer.consume(min(10_000, total - len(out)), timeout=timeout_s)
            assert batch, f"{topic}: read {len(out)} of {total} records before timing out"
            out += [record for record in batch if record.error() is None]
    finally:
        consumer.close()
    return out
