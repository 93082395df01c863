"""Every record a topic holds now: what a test reads back after a job or a tool has written.

`read_between` is the one read loop of the tests (the e2e tier's `processes` reads with it too).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

from confluent_kafka import Consumer, Message, TopicPartition

from streaming.errors import TopicMissing
from streaming.kafka.admin import admin_client, cluster_metadata, end_offsets

Partition = tuple[str, int]
"""A topic's name and a partition's number."""


def records_now(
    bootstrap: str, topic: str, timeout_s: float = 10.0, *, missing_ok: bool = False
) -> list[Message]:
    """The records of `topic` up to its end offsets of now, each partition from its first.

    A wait of `timeout_s` with nothing more arriving fails the test, naming how many were left. A
    topic that does not exist fails it too, or, with `missing_ok`, holds no records (yet).
    """
    if missing_ok:
        ends = partition_ends(bootstrap, [topic])
    else:
        ends = {(topic, partition): end for partition, end in end_offsets(bootstrap, topic).items()}
    return list(read_between(bootstrap, {}, ends, timeout_s))


def partition_ends(bootstrap: str, names: Iterable[str]) -> dict[Partition, int]:
    """Each partition's end offset, of the topics of `names` that exist (a topic not created yet
    has none); raises KafkaUnavailable while the cluster does not answer.

    One client asks for all of it: a wait polls this twice a second, and a client for each question
    took 0.4 s and 0.08 s of CPU a call for four topics, one client 0.16 s and 0.06 s."""
    client = admin_client(bootstrap)
    found = cluster_metadata(bootstrap, client=client).topics
    ends: dict[Partition, int] = {}
    for name in names:
        if name not in found:
            continue
        try:
            offsets = end_offsets(bootstrap, name, client=client)
        except TopicMissing:
            # Made a moment ago: with several brokers, the one that answered `end_offsets`' own ask
            # may not know it yet, though the one that answered above did. Not created yet, then.
            continue
        ends.update({(name, partition): end for partition, end in offsets.items()})
    return ends


def read_between(
    bootstrap: str, starts: dict[Partition, int], ends: dict[Partition, int], timeout_s: float = 10.0
) -> Iterator[Message]:
    """The records of each partition of `ends` from its offset in `starts` (0 if absent) up to its
    end offset; records written after those ends are left for a later read. Fails when a wait of
    `timeout_s` brings nothing. Each `consume` asks for no more than are left: asked for more, it
    waits out its whole timeout."""
    position = {key: starts.get(key, 0) for key in ends}

    def left() -> int:
        return sum(max(0, end - position[key]) for key, end in ends.items())

    if left() == 0:
        return
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [TopicPartition(name, partition, position[(name, partition)]) for name, partition in ends]
        )
        names = sorted({name for name, _ in ends})
        while (count := left()) > 0:
            batch = consumer.consume(num_messages=min(10_000, count), timeout=timeout_s)
            assert batch, f"{names}: {count} records unread after a {timeout_s:g} s wait"
            for message in batch:
                name, partition, offset = message.topic(), message.partition(), message.offset()
                if message.error() is not None or name is None or partition is None or offset is None:
                    continue
                key = (name, partition)
                if offset < ends.get(key, 0):  # a later record waits for a later read
                    position[key] = offset + 1
                    yield message
    finally:
        consumer.close()
