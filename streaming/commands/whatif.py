"""`router whatif FILE... --instance I`: what a route change would do to the traffic I received.

Takes the messages the instance received in a window (its outbound and inbound topics, from the
first record at or after `--since` ago, by the brokers' offsets for times, or the last `--max`
records, shared equally among the topics' partitions), decides each under the live tables and
under the tables FILE would leave (loaded and validated as `router routes load` does, published
nowhere), with the job's engine in one Spark batch query, and prints how many would change:

  * the change table: (from topic, outcome) -> (to topic, outcome), with counts and example ids;
  * the conversations whose kept choice (K2, on the instance's choices topic) names a route the
    change removes: they will choose again;
  * the services whose messages would start to be delayed.

It writes nothing to Kafka and creates no topic. How many records it read, and how long it took,
go to stderr.

What it approximates: each message is decided as if the window were one micro-batch, starting
with no conversation memory. Within the window a conversation keeps the choice its first message
made (K2), a message waits behind one of its conversation endpoint's delayed earlier in the window
(D1), and the first message to reach the dynamic routing service asks (B4), as a micro-batch does;
choices kept, messages held and requests outstanding from before the window are not taken in.
Equal options (C5, M3) take turns from the first, the same way under both tables. Each message
is decided at the time it was written (its lifetime, F3), with the routes active now (R6). The
kept choices reported are those on the choices topic (made while equal options or a route to the
dynamic routing service made the router decide a batch in one pass), made within
--keep-choice-s; the choices a router's state store alone holds are not seen.

    router whatif routes/change.yaml --instance i1 --since 1h
    router whatif change.sql --instance i1 --max 100000 --json --chart changes.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from streaming import topics
from streaming.commands.common import (
    add_kafka_arguments,
    add_prefix_argument,
    config_path,
    kafka_from,
    utc_now,
)
from streaming.config import Settings, load_settings
from streaming.errors import ConfigError, KafkaUnavailable, RouterError
from streaming.instants import format_instant, window_start
from streaming.kafka.connection import KafkaConnection, bootstrap_of
from streaming.rules.model import Instance, normalize_address
from streaming.tables.plan import planned_tables
from streaming.tables.reader import databases_by_instance, read_catalog_table, read_mirror_roles, read_routes
from streaming.text import format_table
from streaming.whatif import (
    Partition,
    WhatIf,
    check_window,
    instance_routes,
    last_records,
    records_in,
    removed_identities,
    route_operations,
    since_ranges,
)

DEFAULT_SINCE = "1h"


def register(subparsers: Any) -> None:
    """Add the `whatif` command."""
    parser = subparsers.add_parser(
        "whatif",
        help="what route FILEs would change: an instance's recent messages decided under both tables",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="route table .yaml/.yml or T-SQL .sql, as `routes load`",
    )
    parser.add_argument(
        "--instance", metavar="I", required=True, help="the instance whose messages are decided"
    )
    parser.add_argument(
        "--scope", metavar="DB", help="database of routes that name none (no USE / no scope field)"
    )
    parser.add_argument(
        "--since",
        metavar="SPAN",
        default=None,
        help=f"the window: records written this long ago or later (90s, 30m, 2h, 1d) or since an instant "
        f"(default: {DEFAULT_SINCE})",
    )
    parser.add_argument(
        "--max", type=int, default=None, metavar="N", help="the window: the last N records instead of --since"
    )
    parser.add_argument(
        "--keep-choice-s",
        type=float,
        default=None,
        metavar="S",
        help="how long the router keeps a choice (default: the settings file's keep_choice_s, else the "
        f"router's default, {Settings.keep_choice_s:g}): older choices on the choices topic are not counted",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    parser.add_argument(
        "--chart", type=Path, metavar="PNG", help="draw the messages decided and changed by service into PNG"
    )
    parser.add_argument("--verbose", action="store_true", help="Spark's and Kafka's warnings on stderr")
    add_kafka_arguments(parser)
    add_prefix_argument(parser)
    parser.set_defaults(func=run_whatif)


def run_whatif(args: argparse.Namespace) -> int:
    """Decide the window twice; print the report (stdout) and what was read in how long (stderr)."""
    started = time.monotonic()
    check_window(args.since, args.max)
    keep_s = keep_choice_s(args)
    if args.chart is not None and not args.chart.parent.is_dir():
        raise ConfigError(
            f"--chart: expected a file in an existing folder, got {str(args.chart)!r}; create the folder"
        )
    now = utc_now()
    start = None if args.max is not None else window_start(args.since or DEFAULT_SINCE, now)
    operations = route_operations(args.files, now=now, instance=args.instance, default_scope=args.scope)
    kafka = kafka_from(args)
    prefix = args.topic_prefix
    catalogs = {i.name: i for i in read_catalog_table(kafka, topics.catalogs_topic(prefix)).values()}
    instance = catalogs.get(args.instance)
    if instance is None:
        known = ", ".join(sorted(catalogs)) or "none"
        raise ConfigError(
            f"--instance: expected an instance of the catalogs on {topics.catalogs_topic(prefix)} ({known}), "
            f"got {args.instance!r}; load its catalog (router catalogs load FILE) or give its --topic-prefix"
        )
    databases = databases_by_instance(catalogs.values())
    current = read_routes(kafka, topics.routes_topic(prefix)).table
    planned = planned_tables(current, operations, databases)
    own = databases[instance.name]
    live_routes = [r for r in instance_routes(current, instance.name) if r.scope in own]
    planned_routes = [r for r in instance_routes(planned, instance.name) if r.scope in own]

    inputs = [topics.outbound_topic(instance.name, prefix), topics.inbound_topic(instance.name, prefix)]
    marks = _watermarks(kafka, inputs)
    if args.max is not None:
        ranges = last_records(marks, args.max)
        window = f"the last {args.max} record(s)"
    else:
        assert start is not None
        ranges = since_ranges(marks, _offsets(kafka, list(marks), OffsetSpec.for_timestamp(_ms(start))))
        window = f"from {format_instant(start)} to {format_instant(now)}"
    read = records_in(ranges)
    if read == 0:
        held = records_in(marks)
        raise RouterError(
            f"expected messages of {instance.name} {window} on {' and '.join(inputs)}, found none (the "
            f"topics hold {held} record(s) in all); widen the window (--since 1d, or --max N) or check "
            "--topic-prefix"
        )
    choices_topic = topics.choices_topic(instance.name, prefix)
    choice_marks = _watermarks(kafka, [choices_topic])

    report = _decide(
        kafka,
        instance,
        catalogs,
        prefix,
        ranges,
        choice_marks,
        live_routes,
        planned_routes,
        args,
        now,
        keep_s,
    )
    if args.json:
        print(json.dumps(report.to_json(), separators=(",", ":")), flush=True)
    else:
        print(format_report(report), flush=True)
    if args.chart is not None:
        draw_chart(report, args.chart)
    took = time.monotonic() - started
    rate = read / took if took > 0 else 0.0
    print(
        f"router whatif: read {read} record(s) of {instance.name} ({window}) and decided {report.decided} "
        f"message(s) twice in {took:.1f} s ({rate:,.0f} records/s); wrote nothing to Kafka",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _decide(
    kafka: KafkaConnection,
    instance: Instance,
    catalogs: dict[str, Instance],
    prefix: str,
    ranges: dict[Partition, tuple[int, int]],
    choice_marks: dict[Partition, tuple[int, int]],
    live_routes: list[Any],
    planned_routes: list[Any],
    args: argparse.Namespace,
    now: Any,
    keep_s: float,
) -> WhatIf:
    """The Spark part: the snapshots, the window decided twice, the kept choices left without a route.

    `keep_s`: how long the router keeps a choice (K2); older choices are not counted.
    """
    from streaming.spark.decision import DecisionInputs, build_snapshot
    from streaming.spark.session import build_session
    from streaming.spark.snapshot import topic_naming
    from streaming.spark.whatif import decided_twice, kafka_range, kept_choices_removed, report
    from streaming.topology import Topology

    roles = dict(read_mirror_roles(kafka, topics.mirrors_topic(prefix)).table)
    topology = Topology(
        instances=(instance,),
        prefix=prefix,
        inbound_by_address={
            normalize_address(i.address): topics.inbound_topic(i.name, prefix) for i in catalogs.values()
        },
    )
    spark = build_session(f"router-whatif-{instance.name}", verbose=args.verbose)
    naming = topic_naming(topology)
    name = instance.name
    snapshots = [
        build_snapshot(
            spark,
            {name: instance},
            [(name, r) for r in routes],
            now=now,
            mirrors={name: roles},
            topics=naming,
            version=version,
        )
        for routes, version in ((live_routes, "live"), (planned_routes, "planned"))
    ]
    try:
        live, planned = DecisionInputs(spark), DecisionInputs(spark)
        live.set(snapshots[0])
        planned.set(snapshots[1])
        one_pass = any(s.flags.in_one_pass for s in snapshots)
        decided = decided_twice(kafka_range(spark, kafka, ranges), topology, live, planned, one_pass)
        found = report(decided, name)
        kept = kept_choices_removed(
            spark,
            kafka,
            choice_marks,
            removed_identities(live_routes, planned_routes, now),
            _ms(now) - int(keep_s * 1000),
        )
    finally:
        for snapshot in snapshots:
            snapshot.release()
    return dataclasses.replace(found, kept=tuple(kept))


def keep_choice_s(args: argparse.Namespace) -> float:
    """How long the router keeps a choice (K2): `--keep-choice-s`, else the settings file's, else the default.

    The settings file is `--config`, else $ROUTER_CONFIG (`config_path`); the flag overrides it as the
    router's own flags do, and the value is checked as the router checks it (`load_settings`).
    """
    settings = load_settings(config_path(args), instance=args.instance, keep_choice_s=args.keep_choice_s)
    return settings.keep_choice_s


def _ms(instant: Any) -> int:
    return int(instant.timestamp() * 1000)


def _watermarks(kafka: KafkaConnection, names: list[str]) -> dict[Partition, tuple[int, int]]:
    """Each partition's (first kept, end) offsets of the topics that exist among `names`."""
    from streaming.kafka.admin import cluster_metadata

    metadata = cluster_metadata(kafka)
    partitions = [
        (name, p)
        for name in names
        if name in metadata.topics
        for p in sorted(metadata.topics[name].partitions)
    ]
    if not partitions:
        return {}
    lows = _offsets(kafka, partitions, OffsetSpec.earliest())
    highs = _offsets(kafka, partitions, OffsetSpec.latest())
    return {tp: (lows[tp], highs[tp]) for tp in partitions}


def _offsets(kafka: KafkaConnection, partitions: list[Partition], spec: OffsetSpec) -> dict[Partition, int]:
    """Each partition's offset for `spec` (for a time: -1 when no record is that late)."""
    from streaming.kafka.admin import admin_client

    if not partitions:
        return {}
    client = admin_client(kafka)
    try:
        futures = client.list_offsets({TopicPartition(t, p): spec for t, p in partitions}, request_timeout=30)
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
    except KafkaException as exc:
        raise KafkaUnavailable(f"asking {bootstrap_of(kafka)} for the offsets of the window: {exc}") from exc


def format_report(report: WhatIf) -> str:
    """The report for people: the change table, the kept choices left behind, the newly delayed."""
    lines = [
        f"{report.instance}: {report.changed} of {report.decided} message(s) would change"
        + (f" ({report.undecodable} record(s) that do not decode left out)" if report.undecodable else "")
    ]
    changes = report.changes()
    if changes:
        rows = [
            (
                c.live.topic,
                c.live.outcome_text,
                c.planned.topic,
                c.planned.outcome_text,
                str(c.messages),
                ", ".join(c.examples),
            )
            for c in changes
        ]
        lines += [
            "",
            format_table(("FROM TOPIC", "OUTCOME", "TO TOPIC", "OUTCOME", "MESSAGES", "EXAMPLES"), rows),
        ]
    lines.append("")
    if report.kept:
        lines.append("kept choices (K2) naming a route the change removes:")
        kept = [
            (k.scope, k.service or "*", k.bid or "*", k.address, str(k.conversations), ", ".join(k.examples))
            for k in report.kept
        ]
        headers = ("SCOPE", "SERVICE", "BROKER INSTANCE", "ADDRESS", "CONVERSATIONS", "EXAMPLES")
        lines.append(format_table(headers, kept))
    else:
        lines.append("kept choices (K2) naming a route the change removes: none")
    delayed = report.newly_delayed()
    if delayed:
        lines.append("services that would start to be delayed:")
        services = [
            (service, str(n), str(report.delayed_conversations.get(service, 0)))
            for service, n in delayed.items()
        ]
        lines.append(format_table(("SERVICE", "MESSAGES", "CONVERSATIONS"), services))
    else:
        lines.append("services that would start to be delayed: none")
    return "\n".join(lines)


def draw_chart(report: WhatIf, path: Path) -> None:
    """A bar per service: the messages decided the same and those that would change (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    services = report.by_service()
    names = list(services)
    same = [n - changed for n, changed in services.values()]
    changed = [c for _, c in services.values()]
    figure, axes = plt.subplots(figsize=(8, max(3.0, 0.45 * len(names) + 2.0)))
    try:
        axes.barh(names, same, color="#9aa5b1", label="decided the same")
        axes.barh(names, changed, left=same, color="#d9534f", label="would change")
        axes.invert_yaxis()
        axes.set_xlabel("messages in the window")
        axes.set_title(f"router whatif: {report.instance}, {report.changed} of {report.decided} would change")
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)
