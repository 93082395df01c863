"""The routing rules as Spark SQL: the same steps as `streaming.rules`, run inside the JVM.

The route snapshot is grouped on the driver side into small broadcast tables keyed by what a
message matches on: (scope, service) for routes naming a service, scope for wildcard routes,
service for the databases hosting it, broker instance for S4. Every key starts with the instance:
one snapshot can hold several instances' routes and catalogs, and a message's `instance` column
says whose it is routed by (the job holds one; the agreement tests decide hundreds of generated
instances in one plan). Each message then makes a few
broadcast hash lookups and every rule step is a SQL expression over the arrays it found
(`filter`, `transform`, `array_sort`): a narrow, shuffle-free plan with no Python on the hot path.
Only the in-batch order rules (D1 delayed-behind, B4 first request) aggregate, and only over the
rows they concern.

The arbitrary choices of the spec are the reference engine's deterministic ones: index
`crc32(conversation_id) % n` over the candidates sorted by their C0 identity (C5) and over the
distinct broker instances in M3; L3 tries the origin database first, then catalog order. An
unpinned initiator's message keeps its conversation's earlier choice while it is a candidate (K2):
each message carries what its conversation kept (`KEPT_COLUMNS`), and each decision reports what
to keep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
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
WAITING_COLUMN = "waiting"
"""Set by the streaming job's state: the message's conversation has delayed messages waiting (D1)."""
"""Message columns: the identity its conversation kept (K2) for its origin and service, or null.
The streaming job's state processor sets them (`streaming.spark.state`); `attach_choices` joins
them from a CHOICE_SCHEMA table. Without them, a message keeps nothing."""

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
# T1/T4: `tcp://host:port` at the start of the service name, ending at `/` or at the end.
_TRANSPORT_PREFIX = r"^((?i)tcp://[^/:\s]+:[0-9]+)(/|$)"


@dataclass(frozen=True)
class Snapshot:
    """The broadcast side, built once per route snapshot: routes grouped by matching key, the catalog.

    Every table is keyed by instance first: one snapshot can hold the routes and catalogs of several
    instances, and each message is decided against those of the instance its `instance` column
    names. The streaming job holds one instance; the engine-agreement tests decide many at once.
    Nothing here depends on the clock: each route keeps its expiry and R6 is applied per batch.
    """

    named: DataFrame
    """n_instance, n_scope, n_service, n_routes: array of route structs naming that service (M1–M3)."""
    scopes: DataFrame
    """s_instance, s_scope, s_wild (routes with neither service nor broker instance, M5), s_bcn (M4)."""
    hosted: DataFrame
    """h_instance, h_service, h_dbs (array of {name, bid} of broker-enabled hosts, catalog order), h_any."""
    databases: DataFrame
    """e_instance, e_bid, e_name: broker-enabled databases by broker instance (S4)."""
    instances: DataFrame
    """i_instance, i_address (normalized, S5), i_forwarding (F1), i_budget (forward buffer bytes, F5)."""
    has_bcn: bool
    may_loop_back: bool = True
    """Whether a route can lead to its instance's own address (S5); when none can, one pass decides."""
    version: str = ""

    def unpersist(self) -> None:
        """Release the cached tables of a snapshot that has been replaced."""
        for frame in (self.named, self.scopes, self.hosted, self.databases, self.instances):
            frame.unpersist()


@dataclass(frozen=True)
class BatchContext:
    """What changes from batch to batch: the clock and the small driver-held sets."""

    now: datetime
    pending: DataFrame
    """p_instance, p_scope, p_service: MissingRoute requests outstanding (B4)."""
    waiting: DataFrame
    """w_instance, w_conversation_id: conversations with a delayed message waiting (D1)."""
    has_pending: bool
    has_waiting: bool


def batch_context(
    spark: SparkSession,
    now: datetime,
    pending: frozenset[tuple[str, str, str]] = frozenset(),
    waiting: frozenset[tuple[str, str]] = frozenset(),
) -> BatchContext:
    """Return the per-batch inputs as small DataFrames.

    `pending` holds (instance, scope, service) and `waiting` (instance, conversation id).
    """
    return BatchContext(
        now=now,
        pending=local_frame(spark, sorted(pending), "p_instance string, p_scope string, p_service string"),
        waiting=local_frame(spark, sorted(waiting), "w_instance string, w_conversation_id string"),
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
            r.expires_at.replace(tzinfo=None) if r.expires_at else None,
        )
        for instance, r in routes
    ]
    return local_frame(spark, rows, ROUTE_SCHEMA)


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


def normalize_address_sql(col: Column) -> Column:
    """normalize_address in SQL: lowercase, no trailing `/` (R4)."""
    return F.lower(F.regexp_replace(F.trim(col), "/+$", ""))


def build_snapshot(
    spark: SparkSession,
    instances: Mapping[str, Instance],
    routes: DataFrame,
    mirrors: Mapping[str, Mapping[str, MirrorRole]] | None = None,
    version: str = "",
    cache: bool = False,
    has_bcn: bool | None = None,
    may_loop_back: bool | None = None,
) -> Snapshot:
    """Group the routes by matching key and attach each route's tier and target.

    `instances` maps the key a message's and a route's `instance` column holds to that instance's
    catalog; `mirrors` maps the same key to the instance's mirror status table (MI4).
    A mirror route's target is the partner that says it is principal, or null (MI2, MI3); a
    network route's target is its address; LOCAL and TRANSPORT targets are found per message.
    With `cache`, the grouped tables are computed once and kept for every batch of the snapshot.
    `has_bcn` (whether any route names the dynamic routing service) and `may_loop_back` (whether
    any route's address is its instance's own, or is TRANSPORT, which takes it from the service
    name) are looked up unless given.
    """
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
    routes = routes.join(F.broadcast(principals), routes["instance"] == principals["pi_instance"], "left")
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
    target = F.when(tier == TIER_MIRROR, mirror_target).when(tier == TIER_NETWORK, F.col("address"))
    route_struct = F.struct(
        F.col("name").alias("name"),
        F.col("broker_instance").alias("bid"),
        F.col("service").alias("service"),
        F.col("address").alias("address"),
        tier.alias("tier"),
        target.alias("target"),
        F.col("expires_at").alias("expires_at"),
    )
    shaped = routes.select("instance", "scope", "service", "broker_instance", route_struct.alias("r"))
    named = (
        shaped.where(F.col("service").isNotNull())
        .groupBy("instance", "scope", "service")
        .agg(_by_identity(F.collect_list("r")).alias("n_routes"))
        .select(
            F.col("instance").alias("n_instance"),
            F.col("scope").alias("n_scope"),
            F.col("service").alias("n_service"),
            "n_routes",
        )
    )
    is_bcn = F.col("service") == F.lit(BROKER_CONFIGURATION_SERVICE)
    wildcard = F.col("service").isNull() & F.col("broker_instance").isNull()
    scopes = (
        shaped.groupBy("instance", "scope")
        .agg(
            _by_identity(
                F.filter(F.collect_list(F.when(wildcard, F.col("r"))), lambda r: r.isNotNull())
            ).alias("s_wild"),
            F.filter(
                F.collect_list(F.when(is_bcn, F.struct(F.col("r")["expires_at"].alias("e")))),
                lambda r: r.isNotNull(),
            ).alias("s_bcn"),
        )
        .withColumnsRenamed({"instance": "s_instance", "scope": "s_scope"})
    )
    hosted_rows = [
        (key, s, d.name, d.broker_instance, d.broker_enabled, i)
        for key, instance in instances.items()
        for i, d in enumerate(instance.databases)
        for s in d.services
    ]
    hosted_raw = local_frame(
        spark,
        hosted_rows,
        "instance string, service string, name string, bid string, enabled boolean, ord int",
    )
    hosted = (
        hosted_raw.groupBy("instance", "service")
        .agg(
            F.transform(
                F.array_sort(
                    F.filter(
                        F.collect_list(F.struct("ord", "name", "bid", "enabled")), lambda h: h["enabled"]
                    )
                ),
                lambda h: F.struct(h["name"].alias("name"), h["bid"].alias("bid")),
            ).alias("h_dbs"),
            # M6 and L4: only a broker-enabled database makes the service "hosted by the instance".
            F.max(F.col("enabled")).alias("h_any"),
        )
        .withColumnsRenamed({"instance": "h_instance", "service": "h_service"})
    )
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
            f.persist() for f in (named, scopes, hosted, databases, settings)
        )
        for frame in (named, scopes, hosted, databases, settings):
            frame.count()
    if has_bcn is None or may_loop_back is None:
        own = F.col("i_address")
        flags = (
            routes.join(F.broadcast(settings), routes["instance"] == settings["i_instance"], "left")
            .agg(
                F.max(is_bcn).alias("bcn"),
                F.max(
                    (upper == "TRANSPORT")
                    | (normalize_address_sql(F.col("address")) == own)
                    | (normalize_address_sql(F.col("mirror_address")) == own)
                ).alias("loop"),
            )
            .first()
        )
        has_bcn = bool(flags and flags["bcn"]) if has_bcn is None else has_bcn
        may_loop_back = bool(flags and flags["loop"]) if may_loop_back is None else may_loop_back
    return Snapshot(
        named=named,
        scopes=scopes,
        hosted=hosted,
        databases=databases,
        instances=settings,
        has_bcn=has_bcn,
        may_loop_back=may_loop_back,
        version=version,
    )


def _pick(arr: Column) -> Column:
    """C5: the deterministic pick, element crc32(conversation_id) mod size (null when empty)."""
    n = F.size(arr)
    index = F.pmod(F.crc32(F.col("conversation_id").cast("binary")), F.greatest(n, F.lit(1)).cast("long"))
    return F.when(n > 0, F.get(arr, index.cast("int")))


def _identity_key(r: Column) -> Column:
    return F.struct(
        F.coalesce(r["bid"], F.lit("")),
        F.coalesce(r["service"], F.lit("")),
        r["address"],
        F.coalesce(r["name"], F.lit("")),
    )


def _by_identity(routes: Column) -> Column:
    """Routes in C0 identity order, sorted once per snapshot: the filters of each message keep it."""
    return F.array_sort(
        routes,
        lambda a, b: (
            F.when(_identity_key(a) < _identity_key(b), -1)
            .when(_identity_key(a) > _identity_key(b), 1)
            .otherwise(0)
        ),
    )


def _active(routes: Column, now: Column) -> Column:
    """R6: expired routes are ignored by every matching run (but stay in the table)."""
    return F.filter(routes, lambda r: r["expires_at"].isNull() | (r["expires_at"] > now))


def _lookup(m: DataFrame, t: Snapshot, ctx: BatchContext, scope: Column, prefix: str) -> DataFrame:
    """Fetch, by broadcast hash join, the active candidate arrays of `scope` for each message."""
    now = F.lit(ctx.now.replace(tzinfo=None)).cast("timestamp")
    named = t.named.select(
        F.col("n_instance").alias(f"{prefix}ni"),
        F.col("n_scope").alias(f"{prefix}ns"),
        F.col("n_service").alias(f"{prefix}nsv"),
        _active(F.col("n_routes"), now).alias(f"{prefix}named"),
    )
    scopes = t.scopes.select(
        F.col("s_instance").alias(f"{prefix}si"),
        F.col("s_scope").alias(f"{prefix}ss"),
        _active(F.col("s_wild"), now).alias(f"{prefix}wild"),
        F.exists(F.col("s_bcn"), lambda b: b["e"].isNull() | (b["e"] > now)).alias(f"{prefix}bcn"),
    )
    m = m.withColumn(f"{prefix}scope", scope)
    m = m.join(
        F.broadcast(named),
        (m["instance"] == named[f"{prefix}ni"])
        & (m[f"{prefix}scope"] == named[f"{prefix}ns"])
        & (m["service"] == named[f"{prefix}nsv"]),
        "left",
    ).join(
        F.broadcast(scopes),
        (m["instance"] == scopes[f"{prefix}si"]) & (m[f"{prefix}scope"] == scopes[f"{prefix}ss"]),
        "left",
    )
    if ctx.has_pending:
        pend = ctx.pending.select(
            F.col("p_instance").alias(f"{prefix}pi"),
            F.col("p_scope").alias(f"{prefix}ps"),
            F.col("p_service").alias(f"{prefix}psv"),
            F.lit(True).alias(f"{prefix}pending"),
        )
        m = m.join(
            F.broadcast(pend),
            (m["instance"] == pend[f"{prefix}pi"])
            & (m[f"{prefix}scope"] == pend[f"{prefix}ps"])
            & (m["service"] == pend[f"{prefix}psv"]),
            "left",
        ).drop(f"{prefix}pi", f"{prefix}ps", f"{prefix}psv")
    else:
        m = m.withColumn(f"{prefix}pending", F.lit(None).cast("boolean"))
    return m.drop(f"{prefix}ni", f"{prefix}ns", f"{prefix}nsv", f"{prefix}si", f"{prefix}ss")


Stages = list[tuple[str, Column]]


def _remembered(keep: Column, field: str) -> Column:
    """K2: a remembered identity field, for rows of a pass that keeps the conversation's choice."""
    return F.when(keep, F.col(f"_k_{field}"))


def _same_as_remembered(r: Column, keep: Column) -> Column:
    return (
        (F.coalesce(r["bid"], F.lit("")) == _remembered(keep, "bid"))
        & (F.coalesce(r["service"], F.lit("")) == _remembered(keep, "service"))
        & (r["address"] == _remembered(keep, "address"))
    )


def _match(p: str, keep: Column) -> Stages:
    """M1–M7 on one row: the first step with a route wins (§1.4).

    M1 routes name the service and the message's broker instance; M2 name the service and no broker
    instance; M3 (message without broker instance) name the service and some broker instance, of
    which one is picked (C5) and only its routes kept; M4 asks the dynamic routing service when it
    has a route and no request is pending (the first such message of a batch only, B4); M5 takes
    routes naming neither service nor broker instance; M6 a virtual LOCAL route when a broker
    instance is given and a database of the instance hosts the service; M7 nothing.
    Where `keep` holds, M3 keeps the broker instance of the conversation's remembered choice (K2).
    """
    named = F.coalesce(F.col(f"{p}named"), F.array())
    m3_bids = F.array_sort(F.array_distinct(F.transform(F.col(f"{p}m3"), lambda r: r["bid"])))
    remembered_bid = _remembered(keep, "bid")
    bid = F.col("bid")
    size = lambda name: F.size(F.col(f"{p}{name}"))  # noqa: E731
    m6 = F.when(
        bid.isNotNull() & F.coalesce(F.col("h_any"), F.lit(False)),
        F.array(
            F.struct(
                F.lit(None).cast("string").alias("name"),
                F.lit(None).cast("string").alias("bid"),
                F.col("service").alias("service"),
                F.lit("LOCAL").alias("address"),
                F.lit(TIER_LOCAL).alias("tier"),
                F.lit(None).cast("string").alias("target"),
                F.lit(None).cast("timestamp").alias("expires_at"),
            )
        ),
    )
    step = (
        F.when(size("m1") > 0, 1)
        .when(size("m2") > 0, 2)
        .when(size("m3") > 0, 3)
        .when(F.col(f"{p}m4"), 4)
        .when(size("wild") > 0, 5)
        .when(F.col(f"{p}m6").isNotNull(), 6)
        .otherwise(7)
    )
    step_col = F.col(f"{p}step")
    cands = (
        F.when(step_col == 1, F.col(f"{p}m1"))
        .when(step_col == 2, F.col(f"{p}m2"))
        .when(step_col == 3, F.col(f"{p}m3"))
        .when(step_col == 5, F.col(f"{p}wild"))
        .when(step_col == 6, F.col(f"{p}m6"))
    )
    return [
        (f"{p}m1", F.filter(named, lambda r: bid.isNotNull() & (r["bid"] == bid))),
        (f"{p}m2", F.filter(named, lambda r: r["bid"].isNull())),
        (f"{p}m3", F.filter(named, lambda r: bid.isNull() & r["bid"].isNotNull())),
        (
            f"{p}m3_bid",
            F.when(F.array_contains(m3_bids, remembered_bid), remembered_bid).otherwise(_pick(m3_bids)),
        ),
        (f"{p}m3", F.filter(F.col(f"{p}m3"), lambda r: r["bid"] == F.col(f"{p}m3_bid"))),
        (f"{p}m6", m6),
        (f"{p}step", step),
        (f"{p}cands", cands),
    ]


def _choose(p: str, keep: Column) -> Stages:
    """C0–C5 with L1–L5 and T1–T4 on one row: the chosen candidate and where it leads.

    C0 keeps one route per (broker instance, service, address); tiers C1 mirror, C2 LOCAL (only
    when L1–L5 locate the service), C3 network address, C4 TRANSPORT (only when T1 finds an address
    in the service name); C5 picks one in the best non-empty tier: where `keep` holds, the
    conversation's remembered route while it is in that tier (K2), else the deterministic pick.
    """
    ordered = F.col(f"{p}ordered")

    def same_identity(a: Column, b: Column) -> Column:
        return (
            a["bid"].eqNullSafe(b["bid"])
            & a["service"].eqNullSafe(b["service"])
            & (a["address"] == b["address"])
        )

    hosts = F.coalesce(F.col("h_dbs"), F.array())
    transport = F.nullif(F.regexp_extract(F.col("service"), _TRANSPORT_PREFIX, 1), F.lit(""))

    def located(r: Column) -> Column:
        effective = F.coalesce(F.col("bid"), r["bid"])
        fits = F.filter(hosts, lambda h: effective.isNull() | (h["bid"] == effective))
        own = F.filter(fits, lambda h: h["name"] == F.col("origin"))
        return F.coalesce(F.get(own, 0)["name"], F.get(fits, 0)["name"])

    usable = F.col(f"{p}usable")
    return [
        # The candidate arrays are in identity order already (`_by_identity`), so C0 compares neighbours.
        (f"{p}ordered", F.coalesce(F.col(f"{p}cands"), F.array())),
        (f"{p}deduped", F.filter(ordered, lambda r, i: (i == 0) | ~same_identity(F.get(ordered, i - 1), r))),
        (
            f"{p}usable",
            F.filter(
                F.transform(
                    F.col(f"{p}deduped"),
                    lambda r: F.struct(
                        r["name"].alias("name"),
                        r["tier"].alias("tier"),
                        r["address"].alias("address"),
                        r["bid"].alias("bid"),
                        r["service"].alias("service"),
                        F.when(r["tier"] == TIER_LOCAL, located(r)).alias("db"),
                        F.when(r["tier"] == TIER_TRANSPORT, transport).otherwise(r["target"]).alias("target"),
                    ),
                ),
                lambda r: (
                    r["tier"].isin(TIER_MIRROR, TIER_NETWORK)
                    | ((r["tier"] == TIER_LOCAL) & r["db"].isNotNull())
                    | ((r["tier"] == TIER_TRANSPORT) & r["target"].isNotNull())
                ),
            ),
        ),
        (f"{p}best", F.array_min(F.transform(usable, lambda r: r["tier"]))),
        # No usable candidate: `service_not_found` when a LOCAL route could not locate the service.
        (f"{p}has_local", F.exists(F.col(f"{p}deduped"), lambda r: r["tier"] == TIER_LOCAL)),
        (f"{p}best_tier", F.filter(usable, lambda r: r["tier"] == F.col(f"{p}best"))),
        (
            f"{p}chosen",
            F.coalesce(
                F.get(F.filter(F.col(f"{p}best_tier"), lambda r: _same_as_remembered(r, keep)), 0),
                _pick(F.col(f"{p}best_tier")),
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
    m4_first: Callable[[DataFrame], DataFrame],
    keep: Column,
) -> DataFrame:
    m = _lookup(m, t, ctx, scope, p)
    m = m4_first(m)
    m = _apply(m, _match(p, keep))
    m = _apply(m, _choose(p, keep))
    return _apply(m, _fate(p, remote))


def decide(messages: DataFrame, t: Snapshot, ctx: BatchContext) -> DataFrame:
    """Decide every message; the result has the input columns plus DECISION_COLUMNS.

    S1–S3 pick the table; S4 delivers replies for this instance's broker instances; S5 routes a
    locally originated message whose target is this instance's own address again as if it had
    arrived from outside. In batch order, a message behind a delayed message of its conversation is
    delayed too (D1), and only the first message of a batch asks for a missing route (B4).

    As if one at a time: a message that waits behind an earlier one never reaches M4, so it cannot
    be the one that asks. When a route to the dynamic routing service exists, the batch is decided
    once to find those messages, then again with them left out of the B4 ranking.
    """
    decided = _decide_rows(messages.withColumn("_behind_first", F.lit(False)), t, ctx)
    if t.has_bcn:
        first_pass = _delay_behind(decided.localCheckpoint(eager=True), keep_flag=True)
        behind = first_pass.where(F.col("_behind")).select(
            F.col("pos").alias("_bp"), F.lit(True).alias("_bf")
        )
        marked = messages.join(F.broadcast(behind), messages["pos"] == behind["_bp"], "left")
        marked = marked.withColumn("_behind_first", F.coalesce(F.col("_bf"), F.lit(False))).drop("_bp", "_bf")
        decided = _decide_rows(marked, t, ctx)
    # The decisions are materialized once, so that the in-batch order step below reads them
    # instead of re-deriving (and letting the optimizer inline) every rule expression.
    return _delay_behind(decided.localCheckpoint(eager=True)).drop("_behind_first")


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
            (m["instance"] == waiting["w_instance"]) & (m["conversation_id"] == waiting["w_conversation_id"]),
            "left",
        )
        # D5: only locally originated conversations are delayed; incoming messages never wait.
        m = m.withColumn("_waiting", F.coalesce(F.col("_waiting"), F.lit(False)) & ~remote).drop(
            "w_instance", "w_conversation_id"
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
            bid = F.col("bid")
            named_match = F.exists(
                F.coalesce(F.col(f"{p}named"), F.array()),
                lambda r: r["bid"].isNull() | bid.isNull() | (r["bid"] == bid),
            )
            applicable = (
                ~named_match
                & F.coalesce(F.col(f"{p}bcn"), F.lit(False))
                & ~F.coalesce(F.col(f"{p}pending"), F.lit(False))
                & ~F.col("_waiting")
                & F.col("e_name").isNull()
                & ~F.col("_behind_first")
                & among
            )
            frame = frame.withColumn(f"{p}m4_applicable", applicable)
            first = (
                frame.where(F.col(f"{p}m4_applicable"))
                .groupBy("instance", f"{p}scope", "service")
                .agg(F.min("pos").alias(f"{p}m4_pos"))
                .withColumnsRenamed({"instance": f"{p}fi", f"{p}scope": f"{p}fs", "service": f"{p}fsv"})
            )
            frame = frame.join(
                F.broadcast(first),
                (frame["instance"] == first[f"{p}fi"])
                & (frame[f"{p}scope"] == first[f"{p}fs"])
                & (frame["service"] == first[f"{p}fsv"]),
                "left",
            )
            return frame.withColumn(
                f"{p}m4", F.coalesce(F.col("pos") == F.col(f"{p}m4_pos"), F.lit(False))
            ).drop(f"{p}fi", f"{p}fs", f"{p}fsv", f"{p}m4_pos")

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
        if t.has_bcn:
            # The B4 ranking below filters on `_loop`: stored first, the optimizer cannot inline
            # the first pass's expressions into that filter (a plan that grows beyond memory).
            m = m.localCheckpoint(eager=True)
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
        m = m.withColumn("_loop_again", loops_again).localCheckpoint(eager=True)
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


def _delay_behind(decided: DataFrame, keep_flag: bool = False) -> DataFrame:
    """D1: once a message of a conversation is delayed, the later ones of the batch wait behind it."""
    first_delay = (
        decided.where((F.col("outcome") == "delayed") & (F.col("origin") != F.lit(REMOTE)))
        .groupBy("instance", "conversation_id")
        .agg(F.min("pos").alias("_first_delay"))
        .withColumnsRenamed({"instance": "_fd_instance", "conversation_id": "_fd_conv"})
    )
    # Broadcast: one row per conversation delayed in this batch, joined without shuffling the batch.
    out = decided.join(
        F.broadcast(first_delay),
        (decided["instance"] == first_delay["_fd_instance"])
        & (decided["conversation_id"] == first_delay["_fd_conv"]),
        "left",
    )
    local = F.col("origin") != F.lit(REMOTE)
    behind = local & F.coalesce(F.col("pos") > F.col("_first_delay"), F.lit(False))
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
    out = out.withColumn("_behind", behind)
    out = out.withColumns({c: F.when(F.col("_behind"), v).otherwise(F.col(c)) for c, v in replace.items()})
    out = out.drop("_fd_instance", "_fd_conv", "_first_delay")
    return out if keep_flag else out.drop("_behind")
