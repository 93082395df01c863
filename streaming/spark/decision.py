"""The routing decision inside Spark: the route snapshot, broadcast once, and one pass per batch.

The rules are `streaming.rules` (the reference); Spark runs their JVM rendering, `router.rules`
(jvm/state, compiled by `make setup`), held equal to them by every scenario of the suite and by the
agreement property tests (tests/integration/test_spark_engine.py). It was Spark SQL before: the
decision as a wide expression over broadcast joins of the snapshot's tiers. Measured on 100,000
messages per micro-batch, that took 2.5-3 s of a 4.5-5 s batch (the rows copied the tiers' arrays
through every join), and 3-5 s more to build and plan whenever the routes changed; the JVM pass
takes a hash lookup or two per message and plans in milliseconds.

* `build_snapshot` (once per route snapshot): the catalogs, the active routes (R6 applied here)
  and the mirror roles of every instance a query routes go to the JVM as one JSON document, where
  `router.rules.Snapshot` groups them by matching key (M1-M3 by service and broker instance, M5's
  wildcards) with each candidate set deduplicated and split into tiers (C0-C4), and broadcasts it.
* `decide` (per batch): `router.spark.DecisionPass` passes over each partition's rows in order and adds
  the decision columns (`DECISION_COLUMNS`), with the batch semantics of `streaming.rules.batch`:
  D1 behind a delayed message of the endpoint, B4's first asker, K2 within the batch, and the
  rotation of C5 and M3 (`streaming.rules.choice.Rotation`), whose counters the driver keeps
  between batches (`DecisionInputs`).

Every key starts with the instance: one snapshot can hold several instances, and each message is
decided by those of the instance its `instance` column names (the job may route several; the
agreement tests decide hundreds of generated instances in one pass).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from streaming.rules.model import BROKER_CONFIGURATION_SERVICE, Instance, MirrorRole, Route, normalize_address
from streaming.spark.session import session_jvm

DECISION_NEEDS = "the routing decision needs"
"""What `session_jvm`'s error says needs the JVM, for the decision's classes."""

# The columns the decision reads and adds are the contract's (`streaming.contract`):
# CHOICE_IDENTITY_COLUMNS, the C0 identity (broker instance or "", service or "", address) a
# decision keeps (K2), or null; KEPT_COLUMNS, the identity the message's conversation kept, set by
# the streaming job's state processor (`streaming.spark.state`); WAITING_COLUMN, set by the state:
# the message's conversation endpoint has delayed messages waiting (D1); DECISION_COLUMNS, what
# `decide` adds (`router.spark.DecisionPass`). Of those, `k_change` is "first" when the conversation kept
# no choice, "again" when it kept another (its route is gone), else null; `d_topic` is the topic the
# message goes to when the snapshot was built with `TopicNaming`, else null; `d_snapshot` is the
# version of the snapshot it was decided with; `d_decided_at` is the row's `batch_ms` as ISO-8601
# UTC text (`streaming.spark.sources.TIME_FORMAT`), on every row, made once per batch time (null
# when the rows have no `batch_ms`); `d_headers` are the Kafka headers the message leaves with
# (`streaming.contract.MESSAGE_HEADERS`) when the snapshot was built with `TopicNaming`, else null.


@dataclass(frozen=True)
class SnapshotFlags:
    """What the snapshot's routes imply for the shape of a batch and for how long it holds."""

    has_bcn: bool
    """An active route names the dynamic routing service (M4 can apply): B4 ranks the whole batch
    in its order, so the batch is decided in one partition."""
    has_transport: bool
    """An active TRANSPORT route exists: a next hop can come from a service name (T1)."""
    valid_until: datetime | None
    """The next instant a route expires (R6): the snapshot must be built again from then on."""
    spreads: bool
    """Some set of equal options has more than one (C5, M3): new conversations take them in turn,
    in the whole batch's order, so the batch is decided in one partition."""
    in_one_pass: bool
    """The batch must be decided in one partition, in batch order (B4, or the rotation of C5 and
    M3): the JVM snapshot's `inOnePass`, which the state processor reads too (it then keeps no
    choice itself, `streaming.spark.state`)."""


def _snapshot_flags(routes: Iterable[tuple[str, Route]], now: datetime, parsed: Any) -> SnapshotFlags:
    """`SnapshotFlags` of (instance key, route) pairs at `now`, and of `parsed`, their JVM snapshot.

    Whether a set of equal options spreads and whether the batch is decided in one pass are the
    JVM snapshot's answers, which the state processor reads too: they are not worked out again here.
    """
    has_bcn = has_transport = False
    valid_until: datetime | None = None
    for _, route in routes:
        if not route.is_active(now):
            continue
        if route.expires_at is not None and (valid_until is None or route.expires_at < valid_until):
            valid_until = route.expires_at
        has_bcn = has_bcn or route.service == BROKER_CONFIGURATION_SERVICE
        has_transport = has_transport or route.is_transport
    return SnapshotFlags(
        has_bcn,
        has_transport,
        valid_until,
        spreads=bool(parsed.spreads()),
        in_one_pass=bool(parsed.inOnePass()),
    )


@dataclass(frozen=True)
class TopicNaming:
    """The destination topics a snapshot names (`streaming.topics`): the decision gives each message one."""

    prefix: str
    inbound: Mapping[str, str]
    """The inbound topic of every instance in the catalogs, by its normalized address."""
    delayed: Mapping[str, str]
    """Each instance's delayed topic, by instance key."""
    dropped: Mapping[str, str]
    """Each instance's dropped topic, by instance key."""


@dataclass(frozen=True)
class Snapshot:
    """A route snapshot in the JVM, broadcast to the tasks (see the module docstring)."""

    broadcast: Any
    """The JVM `Broadcast<router.rules.Snapshot>`."""
    flags: SnapshotFlags
    routes: int
    """Active routes, over every instance."""
    version: str = ""
    at: datetime | None = None
    """The instant whose active routes (R6) the snapshot holds."""

    @property
    def has_bcn(self) -> bool:
        """See `SnapshotFlags.has_bcn`."""
        return self.flags.has_bcn

    def holds_at(self, now: datetime) -> bool:
        """Whether the snapshot's active routes (R6) are still those of `now`."""
        until = self.flags.valid_until
        return until is None or now < until

    def release(self) -> None:
        """Free the broadcast once no batch will use the snapshot again."""
        self.broadcast.destroy()


ROUTE_FIELDS = ("scope", "name", "service", "broker_instance", "address", "mirror_address")
"""A route's values in the snapshot's JSON, in this order (`router.rules.Snapshot.ROUTE_FIELDS`)."""


def snapshot_json(
    instances: Mapping[str, Instance],
    routes: Iterable[tuple[str, Route]],
    mirrors: Mapping[str, Mapping[str, MirrorRole]] | None = None,
    topics: TopicNaming | None = None,
    version: str = "",
) -> str:
    """The JSON `router.rules.Snapshot.parse` reads: each instance's catalog, routes and mirror roles.

    `instances` maps the key a message's `instance` column holds to that instance's catalog;
    `routes` are (key, route) pairs, the active ones only (R6); `mirrors` maps a key to the roles
    of its mirror partners by normalized address (MI2, MI3); `topics` names the destinations.

    A route is an array of its `ROUTE_FIELDS`, not an object: 100,000 routes make 6.3 MB of JSON
    instead of 13.3, written in 0.07 s instead of 0.15-0.2. It reaches the JVM through py4j, which
    unescapes it character by character (0.12-0.14 s instead of 0.25-0.29), and is parsed there by
    code that runs once per route change, before the JIT has compiled it.
    """
    by_key: dict[str, list[tuple[str | None, ...]]] = {key: [] for key in instances}
    for key, r in routes:
        by_key[key].append((r.scope, r.name, r.service, r.broker_instance, r.address, r.mirror_address))
    documents = [
        {
            "key": key,
            "address": i.address,
            "forwarding": i.forwarding,
            "forward_size_mb": i.forward_size_mb,
            "retry_ms": int(i.retry_s * 1000),
            "databases": [
                {
                    "name": d.name,
                    "broker_instance": d.broker_instance,
                    "broker_enabled": d.broker_enabled,
                    "services": list(d.services),
                }
                for d in i.databases
            ],
            "mirrors": {normalize_address(a): role.value for a, role in (mirrors or {}).get(key, {}).items()},
            "routes": by_key[key],
            **_own_topics(topics, key),
        }
        for key, i in instances.items()
    ]
    naming = {"prefix": topics.prefix, "inbound": dict(topics.inbound)} if topics else {}
    return json.dumps({"instances": documents, "version": version, **naming}, separators=(",", ":"))


def _own_topics(topics: TopicNaming | None, key: str) -> dict[str, object]:
    """An instance's own destination topics in the snapshot's JSON, when it names topics."""
    return {"topics": {"delayed": topics.delayed[key], "dropped": topics.dropped[key]}} if topics else {}


def build_snapshot(
    spark: SparkSession,
    instances: Mapping[str, Instance],
    routes: Sequence[tuple[str, Route]],
    *,
    now: datetime,
    mirrors: Mapping[str, Mapping[str, MirrorRole]] | None = None,
    topics: TopicNaming | None = None,
    version: str = "",
) -> Snapshot:
    """The snapshot of (instance key, route) pairs at `now`, in the JVM and broadcast (R6 applied)."""
    active = [(key, r) for key, r in routes if r.is_active(now)]
    jvm = session_jvm(spark, DECISION_NEEDS)
    parsed = jvm.router.rules.Snapshot.parse(snapshot_json(instances, active, mirrors, topics, version))
    broadcast = jvm.router.spark.DecisionPass.broadcast(spark._jsparkSession, parsed)
    return Snapshot(broadcast, _snapshot_flags(active, now, parsed), len(active), version, now)


Counters = Mapping[str, Mapping[str, int]]
"""Rotation counters (C5, M3) by instance key, then by rotation key (`streaming.rules.choice`)."""


class DecisionInputs:
    """What `decide`'s pass decides with, and what it advanced of the rotation counters.

    It decides with a snapshot, B4's outstanding requests and the rotation counters of C5 and M3.
    A plan built once keeps deciding with whatever was `set` last before each run (Spark ships the
    pass's inputs with each job, `router.spark.DecisionInputs`): a route change does not plan again.
    """

    def __init__(self, spark: SparkSession) -> None:
        jvm = session_jvm(spark, DECISION_NEEDS)
        self._inputs = jvm.router.spark.DecisionPass.inputs(spark._jsparkSession)
        self.snapshot: Snapshot | None = None

    def set(
        self,
        snapshot: Snapshot,
        pending: frozenset[tuple[str, str, str]] = frozenset(),
        rotation: Counters | None = None,
    ) -> None:
        """Decide the next batches with `snapshot`; `pending` holds (instance, scope, service) (B4)."""
        counters = [
            f"{instance}\u0000{key}\u0000{at}"
            for instance, keys in (rotation or {}).items()
            for key, at in keys.items()
        ]
        self._inputs.set(snapshot.broadcast, sorted("\u0000".join(p) for p in pending), counters)
        self.snapshot = snapshot

    @property
    def jvm_inputs(self) -> Any:
        """The JVM `router.spark.DecisionInputs` (the state processor holds it too)."""
        return self._inputs

    def advanced(self) -> dict[str, dict[str, int]]:
        """The rotation counters the batches decided since `set` advanced, as they are now."""
        out: dict[str, dict[str, int]] = {}
        for entry in self._inputs.advanced():
            instance, rest = str(entry).split("\u0000", 1)
            key, at = rest.rsplit("\u0000", 1)
            out.setdefault(instance, {})[key] = int(at)
        return out


def decide(messages: DataFrame, inputs: DecisionInputs) -> DataFrame:
    """`messages` with `DECISION_COLUMNS` (see the module docstring), decided with `inputs`.

    The rows need `instance`, `conversation_id`, `service`, `origin`, `bid`, `from_target`,
    `hops_remaining` and `size_bytes`, and F3's lifetime: `ttl_s` (the seconds a message has left),
    or `expires_ms` and `ttl_ms` as it came with `batch_ms` to read them at; they may have `error`
    (a row with one is not decided), `KEPT_COLUMNS` and `waiting`. Each conversation endpoint's
    rows must be in batch order in their partition; with a route to the dynamic routing service
    (B4) or a set of equal options (C5, M3), `SnapshotFlags.in_one_pass`, the whole batch must be
    one partition in batch order (`in_batch_order`).
    """
    out = session_jvm(messages.sparkSession, DECISION_NEEDS).router.spark.DecisionPass.apply(
        messages._jdf, inputs._inputs
    )
    return DataFrame(out, messages.sparkSession)


def in_batch_order(rows: DataFrame) -> DataFrame:
    """The rows in one partition, in batch order (`pos`): what B4 needs (`decide`)."""
    return rows.coalesce(1).sortWithinPartitions("pos")
