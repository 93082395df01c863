"""Settings of one router job: one typed, frozen object, read once at start-up.

Every part of the job reads the same values, and none reads the environment later. A settings file
is YAML; every key is optional but `instance`:

    instance: i1                      # the instance whose traffic this job routes (catalog name)
    instances: [a, b]                 # or several instances, routed by one query (instead of `instance`)
    bootstrap: 127.0.0.1:19092        # Kafka bootstrap servers (env ROUTER_BOOTSTRAP overrides)
    topic_prefix: router              # topic namespace, 1 to 150 of [A-Za-z0-9._-] (streaming.topics)
    checkpoint_dir: .state/checkpoints/i1    # or a Hadoop file system's URL: hdfs://namenode:8020/router/i1
    trigger_seconds: 1.0              # micro-batch interval of `router run` at a trickle
    busy_trigger_seconds: 0.5         # the interval once busy_messages wait (0.5 s; = trigger: one interval)
    busy_messages: 250                # messages waiting that make a batch start at the busy interval
    max_offsets_per_trigger: 200000   # upper bound of records per micro-batch
    spark_master: local[2]            # or spark://host:7077 (env ROUTER_SPARK_MASTER overrides)
    shuffle_partitions: 4             # state partitions, a checkpoint's for life (DEFAULT_SHUFFLE_PARTITIONS)
    keep_choice_s: 3600               # how long an unpinned conversation keeps its chosen route (K2); 0 = off
    kafka: {}                         # security: streaming/kafka/connection.py (every client uses it)
    kafka_options: {}                 # extra `kafka.*` tuning options for the Spark source and sink only
    # replication_factor: 3           # replicas of each topic the router and its commands create
                                      # (default: the cluster's brokers, up to 3, asked once at start)
    # min_insync_replicas: 2          # replicas that must hold a write (default: replication_factor - 1,
                                      # at least 1); existing topics are left as they are
    metrics_port: 0                   # serve /metrics and /healthz on this port (0: no server)
    metrics_host: 127.0.0.1           # where that server listens
    health_stale_s: 30                # /healthz is 503 when no micro-batch finished for this long
                                      # (default: 30 s, or ten triggers when that is longer)

With `instances`, one streaming query (one JVM) routes several instances: each message is decided
by its own instance's tables and catalog, and the instances' topics stay apart, so a chain of
instances does not need a JVM per instance on a small machine. Their catalogs must give one retry_s
(the state processor's timer is one per query). The job's name (and the default checkpoint folder)
is the first instance's.

`bootstrap` and `kafka` make the one `KafkaConnection` that Spark, the AdminClient, the table
readers and writers and every command connect with. `kafka_options` may not hold connection
settings (security, bootstrap): those would reach Spark alone. Secrets are never printed:
`describe()` masks them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from streaming.errors import ConfigError
from streaming.kafka.connection import KafkaConnection, check_no_connection_options, connection_from
from streaming.kafka.durability import AskedReplication, durability_keys
from streaming.spark.checkpoint_files import is_url
from streaming.topics import DEFAULT_PREFIX, check_prefix

DEFAULT_BOOTSTRAP = "127.0.0.1:19092"
"""Where `router kafka start` (and docker-compose.yml) puts the broker."""
BOOTSTRAP_ENV = "ROUTER_BOOTSTRAP"
"""Overrides a settings file's `bootstrap` (a command's `--bootstrap` overrides it)."""
CONFIG_ENV = "ROUTER_CONFIG"
"""The settings file of a command not given `--config` (`streaming.commands.common.config_path`)."""
DEFAULT_SHUFFLE_PARTITIONS = 4
"""The state partitions of a new checkpoint when the settings name none; a checkpoint keeps its own.

The number bounds how many tasks run the state processor at once, for the checkpoint's life, so
the default leaves a cluster room to grow: twice the two cores of `local[2]`. Measured against 2
on this project's 2-core machine (shared, so runs of one count spread 3x; same records, three
alternating rounds after a warm-up): replays of 200,000-300,000 messages showed no cost (run
medians 12,500-14,200 msg/s with 2, 15,000 with 4, 11,800-17,400 with 8, 10,400 with 16), but a
micro-batch of 100 messages, the trickle a 1 s trigger sees, took 0.78-1.06x as long with 4 as
with 2 in the same round, and 0.9-5.1x (median 2.0x, up to 1.1 s more) with 8: every partition's
state store is opened and committed in every batch. More partitions for a bigger cluster are set
at a checkpoint's first start (docs/topics.md, 'Changing the number of state partitions').
"""
DEFAULT_TRIGGER_SECONDS = 1.0
"""`router run`'s micro-batch interval when the settings name none (docs/operations.md: what a
shorter one costs and buys, `python -m bench.latency --trigger` measures it)."""
DEFAULT_BUSY_TRIGGER_SECONDS = 0.5
"""The interval once `busy_messages` wait: a busy router starts a batch this often, a trickle's
waits for `trigger_seconds` (docs/operations.md, 'The trigger: latency against CPU')."""
DEFAULT_BUSY_MESSAGES = 250
"""How many messages must wait for a batch to start at the busy interval: a quarter of a second's
traffic at 1,000 msg/s, so a trickle below it costs no more CPU than one 1 s interval."""
_KNOWN = {
    "instance",
    "instances",
    "bootstrap",
    "topic_prefix",
    "checkpoint_dir",
    "trigger_seconds",
    "busy_trigger_seconds",
    "busy_messages",
    "max_offsets_per_trigger",
    "spark_master",
    "shuffle_partitions",
    "keep_choice_s",
    "kafka",
    "kafka_options",
    "metrics_port",
    "metrics_host",
    "health_stale_s",
    "replication_factor",
    "min_insync_replicas",
}
_SECRET_WORDS = ("password", "secret", "jaas", "token", "key")


@dataclass(frozen=True)
class Settings:
    """Everything a router job needs to know, fixed for its lifetime."""

    instance: str
    """The first (or only) instance the job routes: its name, and its default checkpoint folder."""
    kafka: KafkaConnection = KafkaConnection(DEFAULT_BOOTSTRAP)
    topic_prefix: str = DEFAULT_PREFIX
    checkpoint_dir: Path | str = Path(".state/checkpoints")
    """A path of the driver's file system, or a Hadoop file system's URL (text: a `Path` folds `//`)."""
    trigger_seconds: float = DEFAULT_TRIGGER_SECONDS
    """The interval at a trickle: a batch starts this long after the last, whatever waits."""
    busy_trigger_seconds: float = DEFAULT_BUSY_TRIGGER_SECONDS
    """The interval once `busy_messages` wait (when shorter than `trigger_seconds`)."""
    busy_messages: int = DEFAULT_BUSY_MESSAGES
    max_offsets_per_trigger: int = 200_000
    spark_master: str = "local[2]"
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS
    shuffle_partitions_named: bool = True
    """Whether the settings name `shuffle_partitions` (else it is the default), for the checkpoint's check."""
    keep_choice_s: float = 3600.0
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    also_routes: tuple[str, ...] = ()
    """The other instances the one query routes (`instances` after the first)."""
    metrics_port: int = 0
    """Where `/metrics` and `/healthz` are served (`streaming.observe.server`); 0: not served."""
    metrics_host: str = "127.0.0.1"
    health_stale_s: float | None = None
    """How long `/healthz` stays 200 without a finished micro-batch; None: `health_bound_s`'s default."""
    start_after: Path | str | None = None
    """A drained router's checkpoint_dir, where a new checkpoint's sources start (`--start-after`)."""

    @property
    def health_bound_s(self) -> float:
        """`health_stale_s`, or 30 s (ten triggers when that is longer).

        An idle router's tick runs a micro-batch at least every third of it (`streaming.spark.tick`),
        and a full batch of 200,000 records takes a few seconds: 30 s is far from both, and short
        enough that a broker away or a query stuck shows within half a minute.
        """
        if self.health_stale_s is not None:
            return self.health_stale_s
        return max(30.0, 10.0 * self.trigger_seconds)

    @property
    def interval_seconds(self) -> float:
        """How often the query looks for records: the shorter of the two intervals."""
        return min(self.busy_trigger_seconds, self.trigger_seconds)

    @property
    def busy(self) -> bool:
        """Whether a batch starts sooner once `busy_messages` wait (two intervals, not one)."""
        return self.busy_trigger_seconds < self.trigger_seconds

    @property
    def replication(self) -> AskedReplication:
        """`replication_factor` and `min_insync_replicas` (None: the default), held by the connection."""
        return self.kafka.replication

    @property
    def instances(self) -> tuple[str, ...]:
        """Every instance the query routes, the first one first."""
        return (self.instance, *self.also_routes)

    def describe(self) -> str:
        """One line for logs, with secret-looking Kafka options masked."""
        options = {
            k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) else v)
            for k, v in self.kafka_options.items()
        }
        trigger = f"trigger={self.trigger_seconds}s"
        if self.busy:
            trigger += f" busy_trigger={self.busy_trigger_seconds}s busy_messages={self.busy_messages}"
        return (
            f"instance={','.join(self.instances)} kafka={self.kafka.describe()} prefix={self.topic_prefix} "
            f"checkpoint={self.checkpoint_dir} {trigger} master={self.spark_master} "
            f"kafka_options={options}"
        )


def _read(path: str | Path | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The settings file's mapping (none: empty), then the environment, then explicit overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{p}: cannot read settings: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping of settings, got {type(loaded).__name__}")
        if "instance" in loaded and "instances" in loaded:
            raise ConfigError(f"{p}: give `instance` or `instances`, not both")
        unknown = sorted(set(loaded) - _KNOWN)
        if unknown:
            raise ConfigError(f"{p}: unknown setting(s) {unknown}; known: {sorted(_KNOWN)}")
        raw.update(loaded)
    if os.environ.get(BOOTSTRAP_ENV):
        raw["bootstrap"] = os.environ[BOOTSTRAP_ENV]
    if os.environ.get("ROUTER_SPARK_MASTER"):
        raw["spark_master"] = os.environ["ROUTER_SPARK_MASTER"]
    raw.update({k: v for k, v in overrides.items() if v is not None})
    return raw


def _connection(raw: Mapping[str, Any], where: str) -> KafkaConnection:
    given = raw.get("kafka")
    if isinstance(given, KafkaConnection):  # handed over whole by the code that runs the job
        return given
    if given is not None and not isinstance(given, Mapping):
        raise ConfigError(f"{where}: kafka: expected a mapping of connection settings, got {given!r}")
    try:
        replication = AskedReplication(raw.get("replication_factor"), raw.get("min_insync_replicas"))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    bootstrap = str(raw.get("bootstrap", DEFAULT_BOOTSTRAP))
    return connection_from(bootstrap, given, where, replication=replication)


def load_connection(path: str | Path | None = None, bootstrap: str | None = None) -> KafkaConnection:
    """The Kafka connection of a settings file (or none): its `bootstrap` and `kafka` section.

    For the commands that talk to Kafka without routing (`routes`, `catalogs`, `send`, `tail`):
    `bootstrap` (their flag) overrides the file and $ROUTER_BOOTSTRAP; `instance` is not needed.
    """
    raw = _read(path, {"bootstrap": bootstrap})
    return _connection(raw, str(path) if path is not None else "settings")


def _instances(raw: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """`instance`, or the list `instances` (a `--instance` given on the command line wins)."""
    single, several = raw.get("instance"), raw.get("instances")
    if single is not None:
        if not isinstance(single, str) or not single:
            raise ConfigError(f"{where}: instance: expected an instance's catalog name, got {single!r}")
        return (single,)
    if several is None:
        raise ConfigError(
            f"{where}: `instance` (or `instances`, a list) is required: the catalog name of the instance to "
            "route for"
        )
    if not isinstance(several, list) or not several or not all(isinstance(n, str) and n for n in several):
        raise ConfigError(f"{where}: instances: expected a list of instance names, got {several!r}")
    if len(set(several)) != len(several):
        raise ConfigError(f"{where}: instances: an instance is named twice in {several}")
    return tuple(several)


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read a settings file (or none), apply environment and explicit overrides, validate."""
    raw = _read(path, overrides)
    where = str(path) if path is not None else "settings"
    names = _instances(raw, where)
    for key in ("checkpoint_dir", "start_after"):
        _check_checkpoint_path(key, str(raw.get(key) or ""), where)
    instance = names[0]
    try:
        settings = Settings(
            instance=instance,
            also_routes=names[1:],
            kafka=_connection(raw, where),
            topic_prefix=str(raw.get("topic_prefix", DEFAULT_PREFIX)),
            checkpoint_dir=_checkpoint_location(
                raw.get("checkpoint_dir", Path(".state/checkpoints") / instance)
            ),
            trigger_seconds=float(raw.get("trigger_seconds", DEFAULT_TRIGGER_SECONDS)),
            busy_trigger_seconds=float(raw.get("busy_trigger_seconds", DEFAULT_BUSY_TRIGGER_SECONDS)),
            busy_messages=int(raw.get("busy_messages", DEFAULT_BUSY_MESSAGES)),
            max_offsets_per_trigger=int(raw.get("max_offsets_per_trigger", 200_000)),
            spark_master=str(raw.get("spark_master", "local[2]")),
            shuffle_partitions=int(raw.get("shuffle_partitions", DEFAULT_SHUFFLE_PARTITIONS)),
            shuffle_partitions_named="shuffle_partitions" in raw,
            keep_choice_s=float(raw.get("keep_choice_s", 3600.0)),
            kafka_options={str(k): str(v) for k, v in (raw.get("kafka_options") or {}).items()},
            metrics_port=int(raw.get("metrics_port") or 0),
            metrics_host=str(raw.get("metrics_host") or "127.0.0.1"),
            health_stale_s=float(raw["health_stale_s"]) if raw.get("health_stale_s") is not None else None,
            start_after=(
                _checkpoint_location(raw["start_after"]) if raw.get("start_after") is not None else None
            ),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: a setting has the wrong type: {exc}") from exc
    check_no_connection_options(settings.kafka_options, where)
    overriding = durability_keys(settings.kafka_options)
    if overriding:
        raise ConfigError(
            f"{where}: kafka_options {overriding}: every producer of the router writes with acks=all and "
            "idempotence, so that a broker's stop loses and repeats nothing; remove them"
        )
    if settings.shuffle_partitions < 1:
        raise ConfigError(f"{where}: shuffle_partitions must be a positive number of state partitions")
    if settings.trigger_seconds <= 0 or settings.max_offsets_per_trigger <= 0:
        raise ConfigError(f"{where}: trigger_seconds and max_offsets_per_trigger must be positive")
    if settings.busy_trigger_seconds <= 0 or settings.busy_messages <= 0:
        raise ConfigError(
            f"{where}: busy_trigger_seconds and busy_messages must be positive (busy_trigger_seconds equal "
            "to trigger_seconds gives one interval)"
        )
    if not 0 <= settings.metrics_port < 65536:
        raise ConfigError(
            f"{where}: metrics_port must be 0 (no server) or a TCP port, got {settings.metrics_port}"
        )
    if settings.health_stale_s is not None and settings.health_stale_s <= 0:
        raise ConfigError(f"{where}: health_stale_s must be a positive number of seconds")
    if settings.keep_choice_s < 0:
        raise ConfigError(f"{where}: keep_choice_s must be 0 (off) or a number of seconds")
    try:
        check_prefix(settings.topic_prefix)
    except ConfigError as exc:
        raise ConfigError(f"{where}: topic_prefix: {exc}") from exc
    return settings


def _check_checkpoint_path(key: str, given: str, where: str) -> None:
    """Refuse a checkpoint location that cannot work: a scheme without `//`, a URL without a folder.

    A web address is refused too: Hadoop reads it, but cannot write to it.

    A plain path is a folder of the driver's file system (on a cluster, one every node mounts at the
    same path); a URL (`hdfs://namenode:8020/router/i1`) is a Hadoop file system's, which the driver
    reads and repairs through its JVM (`streaming.spark.checkpoint_files`) and the executors write
    the state store to. Whether Spark has the URL's file system (an `s3a://` connector jar, say) is
    known once the session starts, and said then.
    """
    if is_url(given):
        scheme, rest = given.split("://", 1)
        if scheme.lower() in ("http", "https"):
            raise ConfigError(
                f"{where}: {key}: {given!r} is a web address, which Hadoop reads but cannot write; give a "
                "path, or the URL of a file system every node reaches (hdfs://namenode:8020/router/i1)"
            )
        if "/" not in rest.strip("/"):
            raise ConfigError(
                f"{where}: {key}: expected a folder in the URL, as in {scheme}://namenode:8020/router/i1, "
                f"got {given!r}"
            )
    elif re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", given):
        raise ConfigError(
            f"{where}: {key}: expected a path, or a URL with `//` (hdfs://namenode:8020/router/i1), got "
            f"{given!r}, which would be taken as a relative folder named after its scheme"
        )


def _checkpoint_location(given: str | Path) -> Path | str:
    """A checkpoint location as the settings keep it: a URL as text, anything else as a `Path`."""
    return given if isinstance(given, str) and is_url(given) else Path(given)
