"""The routing rules as Spark SQL: the same steps as `streaming.rules`, run inside the JVM.

The work is split where it is cheapest to do:

* **The snapshot side** (`build_snapshot`, once per route snapshot): everything that depends only
  on the routes, the catalog and the mirror roles. R6 keeps the routes active at the snapshot's
  instant (the snapshot says until when that holds: `SnapshotFlags.valid_until`). The routes of
  each matching key are deduplicated (C0), sorted by identity (the order C5 picks from) and split
  into the four choice tiers (C1 mirror with its principal partner, MI2/MI3; C2 LOCAL; C3 network;
  C4 TRANSPORT): per (instance, scope, service) for the routes naming no broker instance (M2) and
  for each broker instance the routes name (M1, M3), per (instance, scope) for the wildcard routes
  (M5). These are small broadcast tables.
* **The message side** (`decide`, per micro-batch): a few broadcast hash lookups per message and
  scalar expressions over what they found: which matching step holds, which tier is usable for this
  message (a LOCAL tier when §1.6 locates the service, a TRANSPORT tier when the service name holds
  an address), the pick, and the fate. Every candidate of a tier is usable or none is (for one
  message, every LOCAL route locates the same database: the broker instance is the message's, the
  route's for M1/M3, none for M2/M5; T1 reads the service name), so no per-candidate work is left.
  The message side uses no higher-order (lambda) function, so Spark generates code for all of it.

The in-batch order rules (D1 delayed-behind; B4's first request, with a route to the dynamic
routing service only) are window functions over the batch: one linear plan, no self-join, no
intermediate materialization.

Every key starts with the instance: one snapshot can hold several instances' routes and catalogs,
and a message's `instance` column says whose it is routed by (the job holds one; the agreement
tests decide hundreds of generated instances in one plan).

The arbitrary choices of the spec are the reference engine's deterministic ones: index
`crc32(conversation_id) % n` over the candidates sorted by their C0 identity (C5) and over the
distinct broker instances in M3; L3 tries the origin database first, then catalog order. An
unpinned initiator's message keeps its conversation's earlier choice while it is a candidate (K2):
each message carries what its conversation kept (`KEPT_COLUMNS`), and each decision reports what
to keep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    REMOTE,
    Instance,
    MirrorRole,
    Route,
    normalize_address,
)

MSDB = "msdb"

MESSAGE_SCHEMA = StructType(
    [
        StructField("pos", LongType(), False),
        StructField("instance", StringType(), False),
        StructField("id", StringType(), False),
        StructField("conversation_id", StringType(), False),
        StructField("service", StringType(), False),
        StructField("origin", StringType(), False),
        StructField("bid", StringType(), True),
        StructField("from_target", BooleanType(), False),
        StructField("message_type", StringType(), False),
        StructField("hops_remaining", IntegerType(), False),
        StructField("ttl_s", DoubleType(), True),
        StructField("size_bytes", LongType(), False),
    ]
)
MESSAGE_COLUMNS = tuple(f.name for f in MESSAGE_SCHEMA.fields)

ROUTE_SCHEMA = StructType(
    [
        StructField("instance", StringType(), False),
        StructField("scope", StringType(), False),
        StructField("name", StringType(), False),
        StructField("service", StringType(), True),
        StructField("broker_instance", StringType(), True),
        StructField("address", StringType(), False),
        StructField("mirror_address", StringType(), True),
        StructField("expires_at", TimestampType(), True),
    ]
)

CHOICE_SCHEMA = StructType(
    [
        StructField("k_instance", StringType(), False),
        StructField("k_conversation_id", StringType(), False),
        StructField("k_origin", StringType(), False),
        StructField("k_service", StringType(), False),
        StructField("k_bid", StringType(), False),
        StructField("k_route_service", StringType(), False),
        StructField("k_address", StringType(), False),
    ]
)
"""K2: per (instance, conversation, origin database, target service), the C0 identity of the route
chosen (broker instance or "", service or "", address). The decisions carry the same three
identity columns (null when nothing is kept) for the caller to keep, and `k_change`: "first"
when the conversation had no choice, "again" when it had another (its route is gone), else null."""

CHOICE_KEY_COLUMNS = ("k_instance", "k_conversation_id", "k_origin", "k_service")
CHOICE_IDENTITY_COLUMNS = ("k_bid", "k_route_service", "k_address")
KEPT_COLUMNS = ("kept_bid", "kept_route_service", "kept_address")
"""Message columns: the identity its conversation kept (K2) for its origin and service, or null.
The streaming job's state processor sets them (`streaming.spark.state`); `attach_choices` joins
them from a CHOICE_SCHEMA table. Without them, a message keeps nothing."""
WAITING_COLUMN = "waiting"
"""Set by the streaming job's state: the message's conversation has delayed messages waiting (D1)."""

DECISION_COLUMNS = (
    "outcome",
    "d_database",
    "d_address",
    "d_route",
    "match_step",
    "choice_step",
    "reason",
    "requests",
    "d_hops_remaining",
    "d_scope",
    *CHOICE_IDENTITY_COLUMNS,
    "k_change",
)

LITERAL_ROWS = 16
"""local_frame writes up to this many rows into the plan as literals; more go over as Arrow."""

TIER_MIRROR, TIER_LOCAL, TIER_NETWORK, TIER_TRANSPORT = 1, 2, 3, 4
TIERS = (TIER_MIRROR, TIER_LOCAL, TIER_NETWORK, TIER_TRANSPORT)
# T1/T4: `tcp://host:port` at the start of the service name, ending at `/` or at the end.
_TRANSPORT_PREFIX = r"^((?i)tcp://[^/:\s]+:[0-9]+)(/|$)"

CANDIDATE_TYPE = StructType(
    [
        StructField("name", StringType()),
        StructField("bid", StringType()),
        StructField("service", StringType()),
        StructField("address", StringType()),
        StructField("target", StringType()),
    ]
)
"""One route of a tier: what a decision reports, and its next hop when the snapshot knows it (the
address of a network route, the principal partner of a mirror route, MI2; null when no partner
claims the role, MI3). LOCAL and TRANSPORT next hops are found per message."""

IDENTITY_TYPE = StructType(
    [
        StructField("bid", StringType()),
        StructField("service", StringType()),
        StructField("address", StringType()),
    ]
)
"""C0: (broker instance or "", service or "", address), in the form a kept choice (K2) is stored."""

TIERS_TYPE = StructType(
    [StructField(f"c{t}", ArrayType(CANDIDATE_TYPE)) for t in TIERS]
    + [StructField(f"i{t}", ArrayType(IDENTITY_TYPE)) for t in TIERS]
)
"""A candidate set after C0, split into the tiers C1-C4 (`c1`..`c4`), each in identity order, with
the identities of each tier's routes alongside (`i1`..`i4`)."""


@dataclass(frozen=True)
class SnapshotFlags:
    """What the snapshot's routes imply for the shape of the plan and for how long it holds."""

    has_bcn: bool
    """An active route names the dynamic routing service (M4 can apply; B4 ranks in the batch)."""
    may_loop_back: bool
    """A route can lead to its instance's own address (S5): a second pass decides those messages."""
    has_transport: bool
    """An active TRANSPORT route exists: a next hop can come from a service name (T1)."""
    valid_until: datetime | None
    """The next instant a route expires (R6): the snapshot must be built again from then on."""


def snapshot_flags(
    routes: Iterable[tuple[str, Route]], instances: Mapping[str, Instance], now: datetime
) -> SnapshotFlags:
    """Compute `SnapshotFlags` for (instance key, route) pairs at `now`."""
    has_bcn = may_loop_back = has_transport = False
    valid_until: datetime | None = None
    for key, route in routes:
        if not route.is_active(now):
            continue
        if route.expires_at is not None and (valid_until is None or route.expires_at < valid_until):
            valid_until = route.expires_at
        has_bcn = has_bcn or route.service == BROKER_CONFIGURATION_SERVICE
        has_transport = has_transport or route.is_transport
        own = normalize_address(instances[key].address)
        may_loop_back = may_loop_back or (
            route.is_transport
            or normalize_address(route.address) == own
            or (route.mirror_address is not None and normalize_address(route.mirror_address) == own)
        )
    return SnapshotFlags(has_bcn, may_loop_back, has_transport, valid_until)


@dataclass(frozen=True)
class Snapshot:
    """The broadcast side, built once per route snapshot (see the module docstring).

    Every table is keyed by instance first: one snapshot can hold the routes and catalogs of several
    instances, and each message is decided against those of the instance its `instance` column names.
    """

    named: DataFrame
    """n_instance, n_scope, n_service; n_m2 (TIERS_TYPE of the routes naming the service and no
    broker instance, null when none); n_by_bid (broker instance -> TIERS_TYPE of the routes naming
    the service and that broker instance: M1, and M3 once one is picked); n_bids (those broker
    instances, sorted)."""
    scopes: DataFrame
    """s_instance, s_scope; s_wild (TIERS_TYPE of the routes naming neither service nor broker
    instance, M5; null when none); s_bcn (an active route to the dynamic routing service, M4)."""
    hosted: DataFrame
    """h_instance, h_service; h_names (broker-enabled databases hosting it, catalog order);
    h_by_bid (their broker instance -> name)."""
    databases: DataFrame
    """e_instance, e_bid, e_name: broker-enabled databases by broker instance (S4)."""
    instances: DataFrame
    """i_instance, i_address (normalized, S5), i_forwarding (F1), i_budget (forward buffer bytes, F5)."""
    flags: SnapshotFlags
    version: str = ""
    at: datetime | None = None
    """The instant whose active routes (R6) the snapshot holds."""

    @property
    def has_bcn(self) -> bool:
        """See `SnapshotFlags.has_bcn`."""
        return self.flags.has_bcn

    @property
    def may_loop_back(self) -> bool:
        """See `SnapshotFlags.may_loop_back`."""
        return self.flags.may_loop_back

    def holds_at(self, now: datetime) -> bool:
        """Whether the snapshot's active routes (R6) are still those of `now`."""
        until = self.flags.valid_until
        return until is None or now < until


@dataclass(frozen=True)
class BatchContext:
    """What changes from batch to batch: the small driver-held sets."""

    pending: DataFrame
    """p_instance, p_scope, p_service: MissingRoute requests outstanding (B4)."""
    waiting: DataFrame
    """w_instance, w_conversation_id, w_from_target: conversation endpoints with a delayed message
    waiting (D1)."""
    has_pending: bool
    has_waiting: bool


def batch_context(
    spark: SparkSession,
    pending: frozenset[tuple[str, str, str]] = frozenset(),
    waiting: frozenset[tuple[str, str, bool]] = frozenset(),
) -> BatchContext:
    """Return the per-batch inputs as small DataFrames.

    `pending` holds (instance, scope, service) and `waiting` (instance, conversation id, from_target).
    """
    return BatchContext(
        pending=local_frame(spark, sorted(pending), "p_instance string, p_scope string, p_service string"),
        waiting=local_frame(
            spark, sorted(waiting), "w_instance string, w_conversation_id string, w_from_target boolean"
        ),
        has_pending=bool(pending),
        has_waiting=bool(waiting),
    )


def attach_choices(messages: DataFrame, choices: DataFrame) -> DataFrame:
    """Add `KEPT_COLUMNS` to messages from a CHOICE_SCHEMA table, joined by key (K2)."""
    joined = messages.join(
        F.broadcast(choices),
        (messages["instance"] == choices["k_instance"])
        & (messages["conversation_id"] == choices["k_conversation_id"])
        & (messages["origin"] == choices["k_origin"])
        & (messages["service"] == choices["k_service"]),
        "left",
    )
    return joined.withColumnsRenamed(dict(zip(CHOICE_IDENTITY_COLUMNS, KEPT_COLUMNS, strict=True))).drop(
        *CHOICE_KEY_COLUMNS
    )


def route_frame(spark: SparkSession, routes: Sequence[tuple[str, Route]]) -> DataFrame:
    """Return (instance key, route model object) pairs as a ROUTE_SCHEMA DataFrame."""
    rows = [
        (
            instance,
            r.scope,
            r.name,
            r.service,
            r.broker_instance,
            r.address,
            r.mirror_address,
            _naive_utc(r.expires_at) if r.expires_at else None,
        )
        for instance, r in routes
    ]
    return local_frame(spark, rows, ROUTE_SCHEMA)


def _naive_utc(instant: datetime) -> datetime:
    """The UTC wall time of an instant, as Spark's session (time zone UTC) reads a naive value."""
    return instant.astimezone(timezone.utc).replace(tzinfo=None) if instant.tzinfo else instant


def local_frame(spark: SparkSession, rows: Sequence[Sequence[object]], schema: StructType | str) -> DataFrame:
    """A driver-side table that the JVM evaluates alone.

    `spark.createDataFrame` on a Python list goes through Python workers on every use. Up to
    LITERAL_ROWS rows (the catalog, the driver-held sets, a scenario's batch) are written into
    the plan as literals; more would make every step of the plan slow to analyze, so they are
    handed over once as an Arrow table.
    """
    parsed = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    if not isinstance(parsed, StructType):
        raise TypeError(f"expected a struct schema, got {schema!r}")
    struct = parsed
    if not rows:
        return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in struct.fields])
    if len(rows) > LITERAL_ROWS:
        # Many rows: an Arrow table, which the JVM holds and reads without a Python worker.
        arrow_schema = to_arrow_schema(struct)
        columns = [list(c) for c in zip(*rows, strict=True)]
        arrays = [pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema, strict=True)]
        table = pa.Table.from_arrays(arrays, schema=arrow_schema)
        return spark.createDataFrame(table)
    values = [
        F.struct(*[F.lit(v).cast(f.dataType).alias(f.name) for v, f in zip(row, struct.fields, strict=True)])
        for row in rows
    ]
    return spark.range(1).select(F.inline(F.array(*values)))


def _collected(frame: DataFrame) -> DataFrame:
    """`frame` computed once and held in the plan as a local table, all inside the JVM.

    A broadcast of a local table is made on the driver, where a broadcast of a cached one runs a
    Spark job: this way a micro-batch runs no job for the snapshot's tables.
    """
    jdf = frame._jdf
    local = frame.sparkSession._jsparkSession.createDataFrame(jdf.collectAsList(), jdf.schema())
    return DataFrame(local, frame.sparkSession)


def normalize_address_sql(col: Column) -> Column:
    """normalize_address in SQL: lowercase, no trailing `/` (R4)."""
    return F.lower(F.regexp_replace(F.trim(col), "/+$", ""))


# --- the snapshot side ---------------------------------------------------------------------------


def build_snapshot(
    spark: SparkSession,
    instances: Mapping[str, Instance],
    routes: DataFrame,
    *,
    now: datetime,
    flags: SnapshotFlags,
    mirrors: Mapping[str, Mapping[str, MirrorRole]] | None = None,
    version: str = "",
    cache: bool = False,
) -> Snapshot:
    """Group the active routes by matching key into their tiers (see the module docstring).

    `instances` maps the key a message's and a route's `instance` column holds to that instance's
    catalog; `mirrors` maps the same key to the instance's mirror status table (MI4). `now` is the
    instant whose active routes (R6) the snapshot holds; `flags` are the routes' (`snapshot_flags`).
    With `cache`, the tables are computed once and kept for every batch of the snapshot.
    """
    at = F.lit(_naive_utc(now)).cast("timestamp")
    active = routes.where(F.col("expires_at").isNull() | (F.col("expires_at") > at))
    principal_rows = [
        (key, address)
        for key, roles in (mirrors or {}).items()
        for address, role in roles.items()
        if role == MirrorRole.PRINCIPAL
    ]
    principals = (
        local_frame(spark, principal_rows, "pi_instance string, address string")
        .groupBy("pi_instance")
        .agg(F.collect_set("address").alias("pi_set"))
    )
    active = active.join(F.broadcast(principals), active["instance"] == principals["pi_instance"], "left")
    principal_set = F.coalesce(F.col("pi_set"), F.array().cast("array<string>"))
    upper = F.upper(F.trim(F.col("address")))
    tier = (
        F.when(upper == "LOCAL", TIER_LOCAL)
        .when(upper == "TRANSPORT", TIER_TRANSPORT)
        .when(F.col("mirror_address").isNotNull(), TIER_MIRROR)
        .otherwise(TIER_NETWORK)
    )
    mirror_target = F.when(
        F.array_contains(principal_set, normalize_address_sql(F.col("address"))), F.col("address")
    ).when(
        F.array_contains(principal_set, normalize_address_sql(F.col("mirror_address"))),
        F.col("mirror_address"),
    )
    # Sorted by identity then name, so that C0 keeps the smallest name of each identity.
    element = F.struct(
        F.struct(
            F.coalesce(F.col("broker_instance"), F.lit("")).alias("bid"),
            F.coalesce(F.col("service"), F.lit("")).alias("service"),
            F.col("address").alias("address"),
        ).alias("identity"),
        F.col("name").alias("name"),
        tier.alias("tier"),
        F.col("broker_instance").alias("bid"),
        F.col("service").alias("service"),
        F.col("address").alias("address"),
        F.when(tier == TIER_MIRROR, mirror_target)
        .when(tier == TIER_NETWORK, F.col("address"))
        .alias("target"),
    )
    shaped = active.select("instance", "scope", "service", "broker_instance", element.alias("r"))
    per_bid = _with_tiers(
        shaped.where(F.col("service").isNotNull())
        .groupBy("instance", "scope", "service", "broker_instance")
        .agg(F.collect_list("r").alias("_routes"))
    )
    bid = F.col("broker_instance")
    named = per_bid.groupBy("instance", "scope", "service").agg(
        F.first(F.when(bid.isNull(), F.col("_tiers")), ignorenulls=True).alias("n_m2"),
        F.map_from_entries(F.collect_list(F.when(bid.isNotNull(), F.struct(bid, F.col("_tiers"))))).alias(
            "n_by_bid"
        ),
        F.array_sort(F.collect_list(bid)).alias("n_bids"),
    )
    named = named.withColumnsRenamed({"instance": "n_instance", "scope": "n_scope", "service": "n_service"})
    wildcard = F.col("service").isNull() & F.col("broker_instance").isNull()
    scopes = _with_tiers(
        shaped.groupBy("instance", "scope").agg(
            F.collect_list(F.when(wildcard, F.col("r"))).alias("_routes"),
            F.max(F.coalesce(F.col("service") == F.lit(BROKER_CONFIGURATION_SERVICE), F.lit(False))).alias(
                "s_bcn"
            ),
        )
    ).select(
        F.col("instance").alias("s_instance"),
        F.col("scope").alias("s_scope"),
        F.when(F.size("_routes") > 0, F.col("_tiers")).alias("s_wild"),
        "s_bcn",
    )
    hosted = _hosted(spark, instances)
    databases = local_frame(
        spark,
        [
            (key, d.broker_instance, d.name)
            for key, instance in instances.items()
            for d in instance.databases
            if d.broker_enabled
        ],
        "e_instance string, e_bid string, e_name string",
    )
    settings = local_frame(
        spark,
        [
            (key, normalize_address(i.address), i.forwarding, i.forward_size_mb * 1024 * 1024)
            for key, i in instances.items()
        ],
        "i_instance string, i_address string, i_forwarding boolean, i_budget long",
    )
    if cache:
        named, scopes, hosted, databases, settings = (
            _collected(f) for f in (named, scopes, hosted, databases, settings)
        )
    return Snapshot(
        named=named,
        scopes=scopes,
        hosted=hosted,
        databases=databases,
        instances=settings,
        flags=flags,
        version=version,
        at=now,
    )


def _with_tiers(grouped: DataFrame) -> DataFrame:
    """Add `_tiers` (TIERS_TYPE) for the route elements in `_routes`: C0 dedupe, identity order, tiers."""
    ordered = F.col("_ordered")
    frame = grouped.withColumn("_ordered", F.array_sort("_routes"))
    frame = frame.withColumn(
        "_unique",
        F.filter(ordered, lambda r, i: (i == 0) | (F.get(ordered, i - 1)["identity"] != r["identity"])),
    )
    unique = F.col("_unique")

    def tier(t: int) -> Column:
        return F.filter(unique, lambda r: r["tier"] == t)

    candidates = [
        F.transform(
            tier(t), lambda r: F.struct(*[r[f.name].alias(f.name) for f in CANDIDATE_TYPE.fields])
        ).alias(f"c{t}")
        for t in TIERS
    ]
    identities = [F.transform(tier(t), lambda r: r["identity"]).alias(f"i{t}") for t in TIERS]
    return frame.withColumn("_tiers", F.struct(*candidates, *identities)).drop("_ordered", "_unique")


def _hosted(spark: SparkSession, instances: Mapping[str, Instance]) -> DataFrame:
    """Per (instance, service): the broker-enabled databases hosting it, in catalog order (L3, L4).

    A broker instance names at most one of them (the first in catalog order: the loaders refuse a
    second, L4), so that L2 finds one database or none.
    """
    rows = []
    for key, instance in instances.items():
        seen: set[tuple[str, str]] = set()
        for order, database in enumerate(d for d in instance.databases if d.broker_enabled):
            for service in dict.fromkeys(database.services):
                first_with_bid = (service, database.broker_instance) not in seen
                seen.add((service, database.broker_instance))
                rows.append((key, service, order, database.name, database.broker_instance, first_with_bid))
    raw = local_frame(
        spark, rows, "instance string, service string, ord int, name string, bid string, first boolean"
    )
    return (
        raw.groupBy("instance", "service")
        .agg(
            F.transform(F.array_sort(F.collect_list(F.struct("ord", "name"))), lambda h: h["name"]).alias(
                "h_names"
            ),
            F.map_from_entries(F.collect_list(F.when(F.col("first"), F.struct("bid", "name")))).alias(
                "h_by_bid"
            ),
        )
        .withColumnsRenamed({"instance": "h_instance", "service": "h_service"})
    )


# --- the message side ----------------------------------------------------------------------------


def _lookup(m: DataFrame, t: Snapshot, ctx: BatchContext, scope: Column, p: str) -> DataFrame:
    """Fetch, by broadcast hash join, what the snapshot holds for the message's key in `scope`."""
    named = t.named.select(
        F.col("n_instance").alias(f"{p}ni"),
        F.col("n_scope").alias(f"{p}ns"),
        F.col("n_service").alias(f"{p}nsv"),
        F.col("n_m2").alias(f"{p}m2"),
        F.col("n_by_bid").alias(f"{p}by_bid"),
        F.col("n_bids").alias(f"{p}bids"),
    )
    scopes = t.scopes.select(
        F.col("s_instance").alias(f"{p}si"),
        F.col("s_scope").alias(f"{p}ss"),
        F.col("s_wild").alias(f"{p}wild"),
        F.col("s_bcn").alias(f"{p}bcn"),
    )
    m = m.withColumn(f"{p}scope", scope)
    m = m.join(
        F.broadcast(named),
        (m["instance"] == named[f"{p}ni"])
        & (m[f"{p}scope"] == named[f"{p}ns"])
        & (m["service"] == named[f"{p}nsv"]),
        "left",
    ).join(
        F.broadcast(scopes),
        (m["instance"] == scopes[f"{p}si"]) & (m[f"{p}scope"] == scopes[f"{p}ss"]),
        "left",
    )
    if ctx.has_pending:
        pend = ctx.pending.select(
            F.col("p_instance").alias(f"{p}pi"),
            F.col("p_scope").alias(f"{p}ps"),
            F.col("p_service").alias(f"{p}psv"),
            F.lit(True).alias(f"{p}pending"),
        )
        m = m.join(
            F.broadcast(pend),
            (m["instance"] == pend[f"{p}pi"])
            & (m[f"{p}scope"] == pend[f"{p}ps"])
            & (m["service"] == pend[f"{p}psv"]),
            "left",
        ).drop(f"{p}pi", f"{p}ps", f"{p}psv")
    else:
        m = m.withColumn(f"{p}pending", F.lit(None).cast("boolean"))
    return m.drop(f"{p}ni", f"{p}ns", f"{p}nsv", f"{p}si", f"{p}ss")


Stages = list[tuple[str, Column]]


def _pick(size: Column) -> Column:
    """C5: the deterministic pick, 0-based index crc32(conversation_id) mod size (0 when size is 0)."""
    n = F.greatest(size, F.lit(1)).cast("long")
    return F.pmod(F.crc32(F.col("conversation_id").cast("binary")), n).cast("int")


def _count(array: Column) -> Column:
    return F.coalesce(F.size(array), F.lit(0))


def _named_match(p: str) -> Stages:
    """Which of M1-M3 the message's key holds: routes naming the service (and its broker instance)."""
    bid = F.col("bid")
    return [
        (f"{p}m1", F.when(bid.isNotNull(), F.try_element_at(F.col(f"{p}by_bid"), bid))),
        (f"{p}has_m3", bid.isNull() & (_count(F.col(f"{p}bids")) > 0)),
        (
            f"{p}named_match",
            F.col(f"{p}m1").isNotNull() | F.col(f"{p}m2").isNotNull() | F.col(f"{p}has_m3"),
        ),
    ]


def _match(p: str, keep: Column) -> Stages:
    """M1-M7 on one row: the first step with a route wins (§1.4); its candidates' tiers.

    M1 routes name the service and the message's broker instance; M2 name the service and no broker
    instance; M3 (message without broker instance) name the service and some broker instance, of
    which one is picked (C5: the conversation's kept one, K2, while it is among them) and only its
    routes kept; M4 asks the dynamic routing service (`{p}m4`, see `decide`); M5 takes routes naming
    neither service nor broker instance; M6 a virtual LOCAL route when a broker instance is given
    and a database of the instance hosts the service; M7 nothing.
    """
    bid = F.col("bid")
    bids = F.col(f"{p}bids")
    kept_bid = F.when(keep, F.col("_k_bid"))
    m6 = F.struct(
        *[F.array().cast(ArrayType(CANDIDATE_TYPE)).alias(f"c{t}") for t in (TIER_MIRROR,)],
        F.array(
            F.struct(
                F.lit(None).cast("string").alias("name"),
                F.lit(None).cast("string").alias("bid"),
                F.col("service").alias("service"),
                F.lit("LOCAL").alias("address"),
                F.lit(None).cast("string").alias("target"),
            )
        ).alias(f"c{TIER_LOCAL}"),
        *[F.array().cast(ArrayType(CANDIDATE_TYPE)).alias(f"c{t}") for t in (TIER_NETWORK, TIER_TRANSPORT)],
        F.array().cast(ArrayType(IDENTITY_TYPE)).alias(f"i{TIER_MIRROR}"),
        F.array(
            F.struct(
                F.lit("").alias("bid"), F.col("service").alias("service"), F.lit("LOCAL").alias("address")
            )
        ).alias(f"i{TIER_LOCAL}"),
        *[F.array().cast(ArrayType(IDENTITY_TYPE)).alias(f"i{t}") for t in (TIER_NETWORK, TIER_TRANSPORT)],
    )
    step = (
        F.when(F.col(f"{p}m1").isNotNull(), 1)
        .when(F.col(f"{p}m2").isNotNull(), 2)
        .when(F.col(f"{p}has_m3"), 3)
        .when(F.col(f"{p}m4"), 4)
        .when(F.col(f"{p}wild").isNotNull(), 5)
        .when(bid.isNotNull() & (_count(F.col("h_names")) > 0), 6)
        .otherwise(7)
    )
    step_col = F.col(f"{p}step")
    m3_bid = F.col(f"{p}m3_bid")
    return [
        (f"{p}step", step),
        (
            f"{p}m3_bid",
            F.when(
                step_col == 3,
                F.when(F.array_contains(bids, kept_bid), kept_bid).otherwise(
                    F.get(bids, _pick(F.size(bids)))
                ),
            ),
        ),
        (
            f"{p}tiers",
            F.when(step_col == 1, F.col(f"{p}m1"))
            .when(step_col == 2, F.col(f"{p}m2"))
            .when(step_col == 3, F.try_element_at(F.col(f"{p}by_bid"), m3_bid))
            .when(step_col == 5, F.col(f"{p}wild"))
            .when(step_col == 6, m6),
        ),
        # L2: the broker instance §1.6 locates with: the message's, else M3's (every route of M1 and
        # M3 names it; M2, M5 and M6 routes name none).
        (f"{p}locate_bid", F.when(step_col == 3, m3_bid).otherwise(bid)),
    ]


def _choose(p: str, keep: Column, remote: Column) -> Stages:
    """C1-C5 with L1-L5 and T1-T4 on one row: the tier that chooses, and the route it picks.

    The tiers are tried in order, an empty one skipped: C1 mirror routes; C2 LOCAL routes, when
    §1.6 locates the service (the broker instance of L2, else L3's origin database first, then
    catalog order; a message from outside has no origin database); C3 network routes; C4 TRANSPORT
    routes, when the service name begins with an address (T1). C5 picks one route of that tier:
    where `keep` holds, the conversation's kept route while it is in the tier (K2), else the
    deterministic pick.
    """
    tiers = F.col(f"{p}tiers")
    locate_bid = F.col(f"{p}locate_bid")
    origin = F.when(remote, F.lit(None).cast("string")).otherwise(F.col("origin"))
    hosts = F.col("h_names")
    located = F.when(
        locate_bid.isNull(), F.when(F.array_contains(hosts, origin), origin).otherwise(F.get(hosts, 0))
    ).otherwise(F.try_element_at(F.col("h_by_bid"), locate_bid))
    size = {t: _count(tiers[f"c{t}"]) for t in TIERS}
    # Only where a TRANSPORT route is a candidate: the regular expression is the costliest step.
    transport = F.when(
        size[TIER_TRANSPORT] > 0,
        F.nullif(F.regexp_extract(F.col("service"), _TRANSPORT_PREFIX, 1), F.lit("")),
    )
    best = F.col(f"{p}best")
    candidates = F.col(f"{p}candidates")

    def of_best(field: str) -> Column:
        chosen: Column = F.when(best == TIER_MIRROR, tiers[f"{field}{TIER_MIRROR}"])
        for t in TIERS[1:]:
            chosen = chosen.when(best == t, tiers[f"{field}{t}"])
        return chosen

    kept = F.struct(
        F.col("_k_bid").alias("bid"),
        F.col("_k_service").alias("service"),
        F.col("_k_address").alias("address"),
    )
    kept_at = F.when(
        keep & F.col("_k_address").isNotNull(), F.array_position(F.col(f"{p}identities"), kept)
    ).otherwise(F.lit(0))
    index = F.when(kept_at > 0, (kept_at - 1).cast("int")).otherwise(_pick(F.size(candidates)))
    route = F.get(candidates, index)
    return [
        (f"{p}located", located),
        (f"{p}transport", transport),
        (
            f"{p}best",
            F.when(size[TIER_MIRROR] > 0, TIER_MIRROR)
            .when((size[TIER_LOCAL] > 0) & F.col(f"{p}located").isNotNull(), TIER_LOCAL)
            .when(size[TIER_NETWORK] > 0, TIER_NETWORK)
            .when((size[TIER_TRANSPORT] > 0) & F.col(f"{p}transport").isNotNull(), TIER_TRANSPORT),
        ),
        # No usable tier: `service_not_found` when a LOCAL route could not locate the service.
        (f"{p}has_local", size[TIER_LOCAL] > 0),
        (f"{p}candidates", of_best("c")),
        (f"{p}identities", of_best("i")),
        (
            f"{p}chosen",
            F.when(
                best.isNotNull(),
                F.struct(
                    route["name"].alias("name"),
                    route["bid"].alias("bid"),
                    route["service"].alias("service"),
                    route["address"].alias("address"),
                    best.alias("tier"),
                    F.when(best == TIER_TRANSPORT, F.col(f"{p}transport"))
                    .otherwise(route["target"])
                    .alias("target"),
                    F.when(best == TIER_LOCAL, F.col(f"{p}located")).alias("db"),
                ),
            ),
        ),
    ]


def _fate(p: str, remote: Column) -> Stages:
    """The outcome of one routing pass: C-drop, F3 hop and lifetime, F5 buffer, D5 drop vs delay.

    Order as in the reference engine: the forwarding gate, then the forwarder's own checks, then
    the next hop (a mirror route with no principal partner cannot be sent, MI3).
    """
    chosen = F.col(f"{p}chosen")
    step = F.col(f"{p}step")
    tier = chosen["tier"]
    target = chosen["target"]
    hops = F.col("hops_remaining")
    not_routed = F.when(remote, F.lit("dropped")).otherwise(F.lit("delayed"))
    expired = F.col("ttl_s").isNotNull() & (F.col("ttl_s") <= 0)
    too_big = F.col("size_bytes") > F.col("i_budget")
    cases: list[tuple[Column, str, str | None]] = [
        (step == 4, "", "route_requested"),
        (step == 7, "", "no_route"),
        (chosen.isNull() & F.col(f"{p}has_local"), "", "service_not_found"),
        (chosen.isNull(), "", "no_route"),
        (tier == TIER_LOCAL, "deliver", None),
        (remote & ~F.col("i_forwarding"), "dropped", "forwarding_disabled"),
        (remote & (hops <= 0), "discarded", "hops_exhausted"),
        (remote & expired, "discarded", "lifetime_expired"),
        (remote & too_big, "discarded", "forward_buffer_full"),
        (target.isNull(), "", "principal_unknown"),
    ]
    # One CASE over the cases, in order: the first that holds decides the fate.
    forward_code, send_code = len(cases), len(cases) + 1
    fate: Column = F.when(remote, F.lit(forward_code)).otherwise(F.lit(send_code))
    for i, (cond, _, _) in reversed(list(enumerate(cases))):
        fate = F.when(cond, F.lit(i)).otherwise(fate)
    fate_col = F.col(f"{p}fate")
    outcome: Column = F.when(fate_col == forward_code, F.lit("forward")).otherwise(F.lit("send"))
    reason: Column = F.lit(None).cast("string")
    for i, (_, name, why) in enumerate(cases):
        outcome = F.when(fate_col == i, not_routed if name == "" else F.lit(name)).otherwise(outcome)
        reason = F.when(fate_col == i, F.lit(why)).otherwise(reason)
    routed = chosen.isNotNull() & ~step.isin(4, 7)
    return [
        (f"{p}fate", fate),
        (f"{p}outcome", outcome),
        (f"{p}reason", reason),
        (f"{p}match_step", F.concat(F.lit("M"), step.cast("string"))),
        (f"{p}choice_step", F.when(routed, F.concat(F.lit("C"), tier.cast("string")))),
        (f"{p}route", F.when(routed, chosen["name"])),
        (f"{p}database", F.when(routed & (tier == TIER_LOCAL), chosen["db"])),
        (f"{p}address", F.when(F.col(f"{p}outcome").isin("send", "forward"), target)),
        (f"{p}requests", F.when(step == 4, F.col("service"))),
    ]


def _apply(m: DataFrame, stages: Stages) -> DataFrame:
    """Add each stage as a column, in order, so later stages refer to it by name.

    Consecutive stages that do not refer to each other share one projection: every DataFrame
    step is analyzed when it is made, so fewer, wider steps plan faster. A stage's references
    are read from its expression's text, where a false match only costs an extra step.
    """
    group: dict[str, Column] = {}
    for name, expr in stages:
        text = str(expr)
        if name in group or any(earlier in text for earlier in group):
            m = m.withColumns(group)
            group = {}
        group[name] = expr
    return m.withColumns(group) if group else m


def _routing_pass(
    m: DataFrame,
    t: Snapshot,
    ctx: BatchContext,
    p: str,
    scope: Column,
    remote: Column,
    m4: Callable[[DataFrame], DataFrame],
    keep: Column,
) -> DataFrame:
    m = _lookup(m, t, ctx, scope, p)
    m = _apply(m, _named_match(p))
    m = m4(m)
    m = _apply(m, _match(p, keep))
    m = _apply(m, _choose(p, keep, remote))
    return _apply(m, _fate(p, remote))


def decide(messages: DataFrame, t: Snapshot, ctx: BatchContext) -> DataFrame:
    """Decide every message; the result has the input columns plus DECISION_COLUMNS.

    S1–S3 pick the table; S4 delivers replies for this instance's broker instances; S5 routes a
    locally originated message whose target is this instance's own address again as if it had
    arrived from outside. In batch order, a message behind a delayed message of its conversation is
    delayed too (D1), and only the first message of a batch asks for a missing route (B4).

    As if one at a time: a message that waits behind an earlier one never reaches M4, so it cannot
    be the one that asks. When a route to the dynamic routing service exists, the batch is decided
    once to find those messages, then again with them left out of the B4 ranking: both in the same
    plan, the first decision's D1 window feeding the second.

    The in-batch rules are window functions here, which shuffle the batch. Without a route to the
    dynamic routing service only D1 needs the batch order, and a caller whose rows of each
    conversation come together in batch order can use `decide_each` and mark D1 in one pass
    instead (`router.state.InBatchOrder`, then `apply_behind`).
    """
    columns = list(messages.columns)
    decided = _decide_rows(messages.withColumn("_behind_first", F.lit(False)), t, ctx)
    if t.has_bcn:
        first_pass = apply_behind(_mark_behind(decided))
        decided = _decide_rows(first_pass.select(*columns, F.col(BEHIND).alias("_behind_first")), t, ctx)
    return apply_behind(_mark_behind(decided)).drop("_behind_first", BEHIND)


def decide_each(messages: DataFrame, t: Snapshot, ctx: BatchContext) -> DataFrame:
    """Decide every message on its own: `decide` without the in-batch order rule D1.

    Only for a snapshot without a route to the dynamic routing service (B4's in-batch ranking
    needs `decide`). The caller marks the rows behind a delayed one in `BEHIND` and applies
    `apply_behind`.
    """
    if t.has_bcn:
        raise ValueError(
            "decide_each: a route to the dynamic routing service needs decide() (B4 in batch order)"
        )
    return _decide_rows(messages.withColumn("_behind_first", F.lit(False)), t, ctx).drop("_behind_first")


BEHIND = "_behind"
"""D1: the message is behind a delayed message of its conversation in the batch."""


def _decide_rows(messages: DataFrame, t: Snapshot, ctx: BatchContext) -> DataFrame:
    """One decision per message, before the in-batch order rule D1 is applied."""
    input_cols = list(messages.columns)
    remote = F.col("origin") == F.lit(REMOTE)
    settings = F.broadcast(t.instances)
    m = messages.join(settings, messages["instance"] == settings["i_instance"], "left")
    hosted = F.broadcast(t.hosted)
    m = m.join(
        hosted, (m["instance"] == hosted["h_instance"]) & (m["service"] == hosted["h_service"]), "left"
    ).drop("i_instance", "h_instance", "h_service")
    if ctx.has_waiting:
        waiting = ctx.waiting.withColumn("_waiting", F.lit(True))
        m = m.join(
            F.broadcast(waiting),
            (m["instance"] == waiting["w_instance"])
            & (m["conversation_id"] == waiting["w_conversation_id"])
            & (m["from_target"] == waiting["w_from_target"]),
            "left",
        )
        # D5: only locally originated conversations are delayed; incoming messages never wait.
        m = m.withColumn("_waiting", F.coalesce(F.col("_waiting"), F.lit(False)) & ~remote).drop(
            "w_instance", "w_conversation_id", "w_from_target"
        )
    else:
        m = m.withColumn("_waiting", F.lit(False))
    if WAITING_COLUMN in messages.columns:  # the streaming job's state says the conversation waits
        waits = F.coalesce(F.col(WAITING_COLUMN), F.lit(False)) & ~remote  # D5: never incoming ones
        m = m.withColumn("_waiting", F.col("_waiting") | waits)
    # K2: an initiator's message without a broker instance keeps its conversation's earlier choice.
    keeps_choice = ~remote & F.col("bid").isNull() & ~F.col("from_target")
    carried = all(c in messages.columns for c in KEPT_COLUMNS)
    m = m.withColumns(
        {
            f"_k_{f}": F.when(keeps_choice, F.col(c) if carried else F.lit(None).cast("string"))
            for f, c in zip(("bid", "service", "address"), KEPT_COLUMNS, strict=True)
        }
    )
    s4 = F.broadcast(t.databases)
    same_instance = m["instance"] == s4["e_instance"]
    m = m.join(s4, same_instance & (m["bid"] == s4["e_bid"]) & remote & m["from_target"], "left").drop(
        "e_instance", "e_bid"
    )

    def m4_first(p: str, among: Column) -> Callable[[DataFrame], DataFrame]:
        """B4: of the messages of this batch that reach M4 for (scope, service), the first asks.

        Only rows for which `among` holds take part: those whose decision this pass makes.
        """

        def apply(frame: DataFrame) -> DataFrame:
            if not t.has_bcn:
                return frame.withColumn(f"{p}m4", F.lit(False))
            applicable = (
                ~F.col(f"{p}named_match")
                & F.coalesce(F.col(f"{p}bcn"), F.lit(False))
                & ~F.coalesce(F.col(f"{p}pending"), F.lit(False))
                & ~F.col("_waiting")
                & F.col("e_name").isNull()
                & ~F.col("_behind_first")
                & among
            )
            frame = frame.withColumn(f"{p}m4_applicable", applicable)
            ranking = Window.partitionBy("instance", f"{p}scope", "service")
            first = F.min(F.when(F.col(f"{p}m4_applicable"), F.col("pos"))).over(ranking)
            return frame.withColumn(f"{p}m4", F.col(f"{p}m4_applicable") & (F.col("pos") == first))

        return apply

    local_scope = F.when(remote, F.lit(MSDB)).otherwise(F.col("origin"))
    m = _routing_pass(m, t, ctx, "a_", local_scope, remote, m4_first("a_", F.lit(True)), F.lit(True))

    def sends_here(p: str) -> Column:
        """S5: pass `p` sends the message to this instance's own address."""
        return (F.col(f"{p}outcome") == "send") & (
            normalize_address_sql(F.col(f"{p}address")) == F.col("i_address")
        )

    # S5 second pass, msdb's table as if incoming: it decides the looped-back rows, and decides
    # the incoming rows again, so that every row decided in msdb's table shares one B4 ranking per
    # (msdb, service) in batch order: a looped-back message that asks for a route makes it pending
    # for the incoming ones after it. With a route to the dynamic routing service, messages sent
    # by msdb's own services join that ranking too (their table is msdb's from the start).
    incoming = F.col("_loop") | remote
    from_msdb = ~remote & (F.col("origin") == F.lit(MSDB))
    in_msdb_table = (incoming | from_msdb) if t.has_bcn else incoming
    if t.may_loop_back:
        m = m.withColumn("_loop", ~remote & sends_here("a_"))
        m = _routing_pass(
            m, t, ctx, "b_", F.lit(MSDB), incoming, m4_first("b_", in_msdb_table), ~F.col("_loop")
        )
    else:
        m = m.withColumn("_loop", F.lit(False))
    # A message of msdb's own services that asked for a route in the first pass, but is not the
    # first to ask once the looped-back messages are ranked with it, goes on to M5-M7 in the
    # second pass; if that leads back to this instance (S5), a third pass decides it as incoming.
    third = t.may_loop_back and t.has_bcn
    if third:
        loops_again = from_msdb & ~F.col("_loop") & sends_here("b_")
        m = m.withColumn("_loop_again", loops_again)
        m = _routing_pass(
            m, t, ctx, "c_", F.lit(MSDB), F.lit(True), m4_first("c_", in_msdb_table), F.lit(False)
        )

    def pick(name: str) -> Column:
        if not t.may_loop_back:
            return F.col(f"a_{name}")
        chosen = F.when(in_msdb_table, F.col(f"b_{name}")).otherwise(F.col(f"a_{name}"))
        return F.when(F.col("_loop_again"), F.col(f"c_{name}")).otherwise(chosen) if third else chosen

    s4_hit = F.col("e_name").isNotNull()
    is_waiting = F.col("_waiting")
    # K2: what the conversation keeps is the choice made in its own table: pass b's for a message
    # of msdb's services ranked there, else the first pass's (also when it led back here, S5).
    own = F.col("a_chosen")
    if t.may_loop_back:
        own = F.when(in_msdb_table & ~F.col("_loop"), F.col("b_chosen")).otherwise(own)
    kept = keeps_choice & ~is_waiting & own.isNotNull()
    decided = m.select(
        *input_cols,
        F.when(is_waiting, F.lit("delayed"))
        .when(s4_hit, F.lit("deliver"))
        .otherwise(pick("outcome"))
        .alias("outcome"),
        F.when(is_waiting, None)
        .when(s4_hit, F.col("e_name"))
        .otherwise(pick("database"))
        .alias("d_database"),
        F.when(is_waiting | s4_hit, None).otherwise(pick("address")).alias("d_address"),
        F.when(is_waiting | s4_hit, None).otherwise(pick("route")).alias("d_route"),
        F.when(is_waiting, None).when(s4_hit, F.lit("S4")).otherwise(pick("match_step")).alias("match_step"),
        F.when(is_waiting | s4_hit, None).otherwise(pick("choice_step")).alias("choice_step"),
        F.when(is_waiting, F.lit("no_route")).when(s4_hit, None).otherwise(pick("reason")).alias("reason"),
        F.when(is_waiting | s4_hit, None).otherwise(pick("requests")).alias("requests"),
        F.when(is_waiting | s4_hit, None)
        .when(pick("outcome") == "forward", F.col("hops_remaining") - 1)
        .alias("d_hops_remaining"),
        F.when(F.col("_loop") | remote, F.lit(MSDB)).otherwise(F.col("origin")).alias("d_scope"),
        F.when(kept, F.coalesce(own["bid"], F.lit(""))).alias("k_bid"),
        F.when(kept, F.coalesce(own["service"], F.lit(""))).alias("k_route_service"),
        F.when(kept, own["address"]).alias("k_address"),
        F.when(kept & F.col("_k_address").isNull(), F.lit("first"))
        .when(
            kept
            & ~(
                (F.coalesce(own["bid"], F.lit("")) == F.col("_k_bid"))
                & (F.coalesce(own["service"], F.lit("")) == F.col("_k_service"))
                & (own["address"] == F.col("_k_address"))
            ),
            F.lit("again"),
        )
        .alias("k_change"),
    )
    return decided


def _mark_behind(decided: DataFrame) -> DataFrame:
    """D1 by window: `BEHIND` where an earlier local message of the conversation endpoint is delayed."""
    local = F.col("origin") != F.lit(REMOTE)
    earlier = (
        Window.partitionBy("instance", "conversation_id", "from_target")
        .orderBy("pos")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    delayed_before = F.max(local & (F.col("outcome") == "delayed")).over(earlier)
    return decided.withColumn(BEHIND, local & F.coalesce(delayed_before, F.lit(False)))


def apply_behind(decided: DataFrame) -> DataFrame:
    """D1, B7: a message marked `BEHIND` is delayed behind its conversation, unmatched (reason no_route)."""
    replace = {
        "outcome": F.lit("delayed"),
        "reason": F.lit("no_route"),
        "match_step": F.lit(None).cast("string"),
        "choice_step": F.lit(None).cast("string"),
        "d_route": F.lit(None).cast("string"),
        "d_database": F.lit(None).cast("string"),
        "d_address": F.lit(None).cast("string"),
        "d_hops_remaining": F.lit(None).cast("int"),
        "requests": F.lit(None).cast("string"),
        **{c: F.lit(None).cast("string") for c in CHOICE_IDENTITY_COLUMNS},
        "k_change": F.lit(None).cast("string"),
    }
    behind = F.col(BEHIND)
    return decided.withColumns({c: F.when(behind, v).otherwise(F.col(c)) for c, v in replace.items()})
