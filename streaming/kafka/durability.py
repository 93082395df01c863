"""How the router's writes outlive a broker: replicated topics, and producers that wait for the replicas.

Topics. Every topic the router and its tools create (`streaming.kafka.admin.ensure_topics` and
`create_destination_topics`) gets `replication_factor` replicas per partition and the topic setting
`min.insync.replicas`. Both are settings (streaming/config.py); by default the factor is the number
of brokers the cluster has, up to 3 (asked once, when a command or the job starts), and
`min.insync.replicas` one fewer, at least 1: on three brokers, a topic has three replicas and a
write is acknowledged once two hold it, so one broker may stop without a write refused or lost.
An existing topic is never changed; one with fewer replicas than asked is reported once.

Producers. Every producer writes with `acks=all`: the leader acknowledges a record once every
in-sync replica has it. Those that write messages also write with idempotence (`PRODUCER_SETTINGS`),
so that a retry after a leader change does not write a message twice.
`streaming.kafka.connection.producer_config` gives them to a confluent-kafka Producer,
`spark_producer_options` to Spark's Kafka sink (Spark 4.1's connector hands its `kafka.`-prefixed
options to the producer as they are, refusing only the key and value serializers).

The writers of table records (routes, catalogs, mirror roles, MissingRoute requests: compacted
topics whose readers keep each key's last value) write with `UPSERT_SETTINGS` instead
(`streaming.kafka.connection.upsert_producer_config`): `acks=all` and one request in flight, so
that a retry keeps their order, without idempotence. A librdkafka idempotent producer asks for its
producer id on a 500 ms timer, first started when it is created and before any broker is
connected, so its first write waits 0.5-1.0 s (measured on the embedded broker, 2026-11-30: 0.51-1.03
s for one record, against 0.01-0.05 s without); these writers are made for a write or a few (a
route put, a catalog published, a request ended during a micro-batch). What a retry could repeat
there is the same key with the same value, which leaves every table as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from streaming.errors import ConfigError

DEFAULT_MAX_FACTOR = 3
"""The default replication factor is the cluster's broker count, up to this."""

PRODUCER_SETTINGS: Mapping[str, str] = MappingProxyType({"acks": "all", "enable.idempotence": "true"})
"""What every producer of the router's messages writes with, in the names both Kafka clients take."""

UPSERT_SETTINGS: Mapping[str, str] = MappingProxyType(
    {"acks": "all", "enable.idempotence": "false", "max.in.flight.requests.per.connection": "1"}
)
"""What the writers of table records write with (module doc): every replica in sync, in order."""


@dataclass(frozen=True)
class Replication:
    """How a new topic is replicated: `factor` replicas per partition, `min_insync` of them per write."""

    factor: int
    min_insync: int

    def __post_init__(self) -> None:
        if self.factor < 1 or self.min_insync < 1 or self.min_insync > self.factor:
            raise ConfigError(
                f"expected 1 <= min_insync_replicas <= replication_factor, got min_insync_replicas "
                f"{self.min_insync} and replication_factor {self.factor}: lower min_insync_replicas, or "
                "raise replication_factor"
            )

    @property
    def topic_config(self) -> dict[str, str]:
        """The topic settings a new topic gets for it."""
        return {"min.insync.replicas": str(self.min_insync)}


@dataclass(frozen=True)
class AskedReplication:
    """The settings' `replication_factor` and `min_insync_replicas`; None: the default (module doc)."""

    factor: int | None = None
    min_insync: int | None = None

    def __post_init__(self) -> None:
        for name, value in (("replication_factor", self.factor), ("min_insync_replicas", self.min_insync)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}: expected a whole number of at least 1, got {value!r}")
        if self.factor is not None:
            self.for_brokers(self.factor)  # min_insync_replicas above replication_factor: refused now

    def for_brokers(self, brokers: int) -> Replication:
        """The replication of new topics on a cluster of `brokers` brokers."""
        factor = self.factor if self.factor is not None else max(1, min(brokers, DEFAULT_MAX_FACTOR))
        min_insync = self.min_insync if self.min_insync is not None else max(1, factor - 1)
        if min_insync > factor:
            why = (
                f" (the default: the cluster's {brokers} broker(s), up to {DEFAULT_MAX_FACTOR}); lower "
                "min_insync_replicas, or add brokers"
                if self.factor is None
                else "; lower min_insync_replicas, or raise replication_factor"
            )
            raise ConfigError(
                f"min_insync_replicas {min_insync} asks for more replicas than topics get: "
                f"replication_factor is {factor}{why}"
            )
        return Replication(factor, min_insync)


def producer_settings(**extra: str | int | float | bool) -> dict[str, str | int | float | bool]:
    """`PRODUCER_SETTINGS` with a producer's own tuning (`linger.ms`, ...); they may not be overridden."""
    return _fixed_with(PRODUCER_SETTINGS, extra)


def upsert_settings(**extra: str | int | float | bool) -> dict[str, str | int | float | bool]:
    """`UPSERT_SETTINGS`, for a writer of table records, with its own tuning; they may not be overridden."""
    return _fixed_with(UPSERT_SETTINGS, extra)


def _fixed_with(
    fixed: Mapping[str, str], extra: Mapping[str, str | int | float | bool]
) -> dict[str, str | int | float | bool]:
    overridden = sorted(k for k in extra if k in fixed)  # UPSERT_SETTINGS names PRODUCER_SETTINGS' keys too
    if overridden:
        raise ValueError(f"producer settings {overridden} are the router's: every producer writes with them")
    return {**fixed, **extra}


def spark_producer_options() -> dict[str, str]:
    """`PRODUCER_SETTINGS` as options of Spark's Kafka sink (`kafka.` prefixed)."""
    return {f"kafka.{k}": v for k, v in PRODUCER_SETTINGS.items()}


def durability_keys(options: Mapping[str, str]) -> list[str]:
    """The Spark options among `options` that would override `PRODUCER_SETTINGS`, sorted."""
    return sorted(k for k in options if k.removeprefix("kafka.") in PRODUCER_SETTINGS)
