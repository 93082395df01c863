"""The router's progress as a Kafka consumer group, so that Kafka's own tools see its lag.

Spark's Kafka source keeps what it has read in the query's checkpoint, not in Kafka, so nothing
outside the job knows how far behind it is. After each micro-batch the job writes the offsets it
has read up to, for each instance it routes, to that instance's group (`topics.router_group`,
`{prefix}.{instance}.router`), with the batch's id and time as each offset's metadata. The group
has no members and nothing consumes with it; `router status`, `kafka-consumer-groups.sh --describe
--group ...`, or a lag exporter read the lag from it. The checkpoint stays what the job resumes
from: the group is a report of it, written after Spark committed the batch.

A write that fails (the broker away) is not retried: the next batch writes newer offsets. The
first failure is logged once, and once more when writes succeed again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streaming import topics
from streaming.errors import KafkaUnavailable
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import ClientValue, Kafka, bootstrap_of, client_config

log = logging.getLogger("streaming.kafka.progress_group")


@dataclass(frozen=True)
class Committed:
    """What a router's group holds: the offsets it read up to, and the batch that read them."""

    group: str
    offsets: Mapping[tuple[str, int], int]
    """(topic, partition) -> the next offset the router will read."""
    batch: int | None = None
    """The id of the micro-batch that read up to them (None when the group holds no metadata)."""
    at_ms: int | None = None
    """When that batch was decided (epoch ms)."""


def metadata_of(batch: int, at_ms: int) -> str:
    """The metadata each committed offset carries: the batch's id and time, as JSON."""
    return json.dumps({"batch": batch, "at_ms": at_ms}, separators=(",", ":"))


def parse_metadata(text: str | None) -> tuple[int | None, int | None]:
    """(batch, at_ms) of an offset's metadata; (None, None) for anything else (another writer's)."""
    try:
        value = json.loads(text or "")
        return int(value["batch"]), int(value["at_ms"])
    except (ValueError, TypeError, KeyError):
        return None, None


class ProgressGroups:
    """Writes what each micro-batch read to the groups of the instances a job routes.

    Each group is written by a consumer of that group that never joins it: a commit of offsets it
    was given (librdkafka's own way of committing for a consumer that assigns its partitions),
    asynchronous, its answer served at the next write. A commit that fails (the broker away) is
    not retried: the next batch commits newer offsets. (The admin client's
    `alter_consumer_group_offsets` was tried first: it aborted the process when its request timed
    out while the broker was away and the broker came back, in librdkafka 2.16.0.)
    """

    def __init__(self, kafka: Kafka, prefix: str, inputs: Mapping[str, Iterable[str]]) -> None:
        """`inputs` maps each instance to the topics it reads (outbound, inbound, delayed, choices)."""
        self.kafka = kafka
        self._topics = {instance: frozenset(names) for instance, names in inputs.items()}
        self._groups = {instance: topics.router_group(instance, prefix) for instance in inputs}
        self._committers: dict[str, Consumer] = {}
        self._failing = False

    def group(self, instance: str) -> str:
        """The group of `instance`."""
        return self._groups[instance]

    def write(self, batch: int, at_ms: int, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit the offsets a batch read up to, each to its instance's group; do not wait for the broker."""
        metadata = metadata_of(batch, at_ms)
        for instance, names in self._topics.items():
            partitions = [
                TopicPartition(topic, partition, offset, metadata=metadata)
                for (topic, partition), offset in sorted(offsets.items())
                if topic in names and offset >= 0
            ]
            committer = self._committer(instance)
            committer.poll(0)  # serves the answers of the last commits (`_answered`)
            if not partitions:
                continue
            try:
                committer.commit(offsets=partitions, asynchronous=True)
            except KafkaException as exc:
                self._answered(exc.args[0] if exc.args else None, [])

    def _committer(self, instance: str) -> Consumer:
        committer = self._committers.get(instance)
        if committer is None:
            settings: dict[str, ClientValue] = {
                "group.id": self._groups[instance],
                "enable.auto.commit": False,
            }
            config: dict[str, Any] = {**client_config(self.kafka, **settings), "on_commit": self._answered}
            committer = Consumer(config, logger=librdkafka_log())
            self._committers[instance] = committer
        return committer

    def _answered(self, error: KafkaError | None, _partitions: list[TopicPartition]) -> None:
        if error is not None and not self._failing:
            self._failing = True
            log.warning(
                "could not write the router's progress to its consumer groups at %s (their lag shows "
                "late until a write succeeds): %s",
                bootstrap_of(self.kafka),
                error.str() if isinstance(error, KafkaError) else error,
            )
        elif error is None and self._failing:
            self._failing = False
            log.warning("the router's progress is written to its consumer groups again")

    def close(self) -> None:
        """Close the committers (a commit still in flight is given up: the next start writes newer)."""
        for committer in self._committers.values():
            committer.close()
        self._committers = {}


GROUP_TIMEOUT_S = 10.0
"""How long reading a router's group may take (the coordinator is looked up first)."""

_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


def read_committed(
    kafka: Kafka, group: str, partitions: Iterable[tuple[str, int]], timeout: float = GROUP_TIMEOUT_S
) -> Committed:
    """What `group` holds for `partitions`: the offsets (none where never written) and the last batch.

    Read by a consumer of the group that neither subscribes nor commits: it never joins the group
    and leaves its offsets as they are. Not by the admin client's ListConsumerGroupOffsets, which
    crashes the process when the broker answers NOT_COORDINATOR (a null consumer-group handle in
    librdkafka's OffsetFetch answer, librdkafka issue 5040), as a broker that has just started
    does. While the broker answers that the coordinator moves or loads, this asks again, for up to
    `timeout`; then, or when the broker does not answer, it raises KafkaUnavailable.
    """
    asked = [TopicPartition(topic, partition) for topic, partition in sorted(partitions)]
    if not asked:
        return Committed(group, {})
    settings: dict[str, ClientValue] = {"group.id": group, "enable.auto.commit": False}
    reader = Consumer(client_config(kafka, **settings), logger=librdkafka_log())
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                answer = reader.committed(asked, timeout=max(deadline - time.monotonic(), 0.1))
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if error is None or error.code() not in _COORDINATOR_MOVING or time.monotonic() >= deadline:
                    raise KafkaUnavailable(
                        f"reading the offsets of consumer group {group} at {bootstrap_of(kafka)}: {exc}"
                    ) from exc
                time.sleep(0.1)
    finally:
        reader.close()
    offsets: dict[tuple[str, int], int] = {}
    batch = at_ms = None
    for tp in answer:
        if tp.error is not None:
            raise KafkaUnavailable(f"reading the offsets of consumer group {group}: {tp.error.str()}")
        if tp.offset < 0:  # the group holds none for it
            continue
        offsets[(tp.topic, tp.partition)] = tp.offset
        b, at = parse_metadata(tp.metadata)
        if b is not None and (batch is None or b > batch):
            batch, at_ms = b, at
    return Committed(group, offsets, batch, at_ms)
