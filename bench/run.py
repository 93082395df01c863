"""`make bench`: every figure of the benchmark, measured in one run on one embedded broker.

usage: python -m bench.run [--messages N] [--routes 10,1000,100000] [--per-batch N] [--warm-ups N]
                           [--sustained N] [--rates 1000,10000] [--duration 60] [--conversations N] [--keep S]
                           [--late 0.1] [--retry S] [--quick] [--out-dir bench]

In order, on the same broker and the same kind of records (`bench.common`):

1. the transport (`bench.transport`): a confluent-kafka consume -> produce copy, and Kafka's own
   ConsumerPerformance and ProducerPerformance;
2. throughput (`bench.throughput`): the Spark pass-through, the same writing the router's headers,
   and the router with each route-table size, with the Spark jobs and stages of each micro-batch,
   the JIT's compile time and the JVM's CPU time during each run; then all three again in a long
   run (`--sustained` records, 10 routes), warmer;
3. where the router's CPU goes (`bench.profile`): its steps' shares of the JVM's CPU samples;
4. the Python loop a user might write instead (`bench.python_loop`), on 10 routes;
5. the router with a share (`--late`) of the conversations delayed, then released once routes for
   them are written (`bench.throughput.run_delayed`);
6. memory (`bench.memory`): driver heap and state store after `--conversations` conversations,
   and once their kept choices have expired;
7. latency under a fixed offered load (`bench.latency`), `router run` with its default intervals;
8. route-change propagation and delayed-retry precision (`bench.timing`);
9. the start (`bench.startup`): seconds from `router run`'s start to its first message routed, with
   the driver's class archive and without, started again on the checkpoint a run left, and Spark's
   own start (a bare pass-through in the router's session, `bench.spark_start`) beside them;
10. scaling out (`bench.scaling`): the pass-through and the router on a Spark standalone cluster of
   one worker, then two (1 core each), on the same records.

It writes `results.json` (every figure), `RESULTS.md` (the figures, each aim met or not, the machine
and versions) and `chart.png` (throughput per system; latency per offered load) into `--out-dir`.
`--quick` shrinks every size for a smoke run of a few minutes (its figures are not the
benchmark's). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.chart import render_chart
from bench.common import bench_session, kafka, new_prefix, prepare, progress, routes_for
from bench.latency import LatencyResult, LatencyRun, measure_latency
from bench.memory import MemoryResult, measure_memory
from bench.metrics_cost import PROMETHEUS_EVERY_S, SCRAPE_EVERY_S, MetricsCost, measure_metrics_cost
from bench.profile import PASS_THROUGH_STEPS, Profile, profile_router, render_profile
from bench.python_loop import LoopResult, python_loop
from bench.scaling import MESSAGES as SCALING_MESSAGES
from bench.scaling import PER_BATCH as SCALING_PER_BATCH
from bench.scaling import Scaled, measure_scaling, scaling_lines
from bench.startup import StartupResult, measure_startup
from bench.throughput import (
    SENT_HEADERS,
    SUSTAINED,
    WARM_UPS,
    DelayedRun,
    Measurement,
    measure_once,
    measure_throughput,
    run_delayed,
    warm_up_lines,
)
from bench.timing import TimingRun, measure_timing
from bench.transport import confluent_copy, consumer_performance, mean_message_size, producer_performance
from streaming.config import DEFAULT_BUSY_MESSAGES, DEFAULT_BUSY_TRIGGER_SECONDS, DEFAULT_TRIGGER_SECONDS

CORES = os.cpu_count() or 1
"""The machine's cores: the CPU time a run had is its seconds times these."""
JOBS_BEFORE = "about 40 jobs per 100,000-record micro-batch (bench/RESULTS.md of 2026-11-22, before issue 12)"


def machine() -> str:
    """The machine and the versions the figures were measured with."""
    mem = ""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            kb = int(next(line for line in info if line.startswith("MemTotal")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    import confluent_kafka
    import pyspark

    return (
        f"{os.cpu_count()} cores{mem}; {platform.platform()}; Python {platform.python_version()}; "
        f"pyspark {pyspark.__version__} (local[2]); Kafka 4.1.1 (embedded, KRaft); "
        f"confluent-kafka {confluent_kafka.version()[0]}; {java}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000, help="records per throughput run")
    parser.add_argument("--routes", default="10,1000,100000", help="route-table sizes")
    parser.add_argument("--per-batch", type=int, default=100_000, help="records per micro-batch")
    parser.add_argument(
        "--warm-ups", type=int, default=WARM_UPS, help="unmeasured runs of both Spark queries first"
    )
    parser.add_argument(
        "--sustained",
        type=int,
        default=SUSTAINED,
        help=f"records of the long run of both Spark queries, 10 routes (default {SUSTAINED:,}; 0: none)",
    )
    parser.add_argument("--rates", default="1000,10000", help="offered loads for latency, msg/s")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per offered load")
    parser.add_argument("--conversations", type=int, default=1_000_000, help="for the memory figures")
    parser.add_argument(
        "--keep", type=float, default=300.0, help="keep_choice_s of the memory run (longer than its routing)"
    )
    parser.add_argument("--late", type=float, default=0.1, help="share of conversations delayed")
    parser.add_argument("--retry", type=float, default=5.0, help="retry_s of the delayed run")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not the figures")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.routes, args.per_batch = 20_000, "10,1000", 10_000
        args.rates, args.duration, args.conversations, args.keep = "500", 10.0, 20_000, 10.0
        args.sustained = 50_000
    sizes = [int(s) for s in args.routes.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    started = datetime.now(timezone.utc)
    folder = Path(tempfile.mkdtemp(prefix="router-bench-"))
    try:
        with kafka(None) as bootstrap:
            progress("bench: 1/10 the transport")
            prefix = new_prefix()
            source = prepare(bootstrap, prefix, 10, args.messages)
            copy = confluent_copy(bootstrap, source, f"{prefix}.copy", args.messages)
            consumed = consumer_performance(bootstrap, source, args.messages)
            produced = producer_performance(bootstrap, f"{prefix}.perf", args.messages, mean_message_size())
            spark = bench_session("router-bench")
            progress("bench: 2/10 throughput: pass-through and router")
            throughput = measure_throughput(
                spark, bootstrap, folder, sizes, args.messages, args.per_batch, args.warm_ups
            )
            sustained = None
            if args.sustained:
                progress(f"bench: the long run: {args.sustained:,} messages, 10 routes")
                sustained = measure_once(spark, bootstrap, folder, 10, args.sustained, args.per_batch)
            progress("bench: the router with metrics on and off, on the same records")
            metrics = measure_metrics_cost(spark, bootstrap, folder, args.messages, args.per_batch)
            progress("bench: 3/10 where the router's CPU goes")
            # Warm from the throughput runs: one warm-up, for the recorder's own start.
            profile = profile_router(spark, bootstrap, folder, args.messages, args.per_batch, 1, 2)
            progress("bench: 4/10 the Python loop")
            prefix = new_prefix()
            source = prepare(bootstrap, prefix, 10, args.messages)
            loop = python_loop(bootstrap, source, prefix, args.messages, routes_for(10))
            progress(f"bench: 5/10 the router with {args.late:.0%} of the conversations delayed")
            delayed_warm_ups = min(args.warm_ups, 1)
            if delayed_warm_ups:
                # Delayed and released messages take code the plain runs did not (the delayed
                # output, the processor's held messages, the release): one unmeasured run compiles
                # it, as the plain runs' warm-ups do theirs. Measured cold, the first pass ran at
                # 24,000 msg/s where a second ran at 37,000.
                progress("bench: warm-up of the delayed run")
                run_delayed(spark, bootstrap, folder, args.messages, args.per_batch, args.late, args.retry)
            delayed = run_delayed(
                spark, bootstrap, folder, args.messages, args.per_batch, args.late, args.retry
            )
            progress(f"bench: 6/10 memory with {args.conversations:,} conversations")
            memory = measure_memory(spark, bootstrap, args.conversations, args.keep, folder)
            spark.stop()  # the next two run `router run` in processes of their own
            progress("bench: 7/10 latency under a fixed offered load")
            latency = measure_latency(bootstrap, rates, args.duration)
            progress("bench: 8/10 route-change propagation and delayed-retry precision")
            timing = measure_timing(bootstrap)
            progress("bench: 9/10 how soon a new `router run` routes its first message")
            startup = measure_startup(bootstrap)
            progress("bench: 10/10 scaling out: a standalone cluster of one worker, then two")
            messages, per_batch = (20_000, 10_000) if args.quick else (SCALING_MESSAGES, SCALING_PER_BATCH)
            scaling = measure_scaling(bootstrap, folder / "scaling", messages, per_batch)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    figures: dict[str, Any] = {
        "measured": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": vars(args) | {"out_dir": _shown(args.out_dir)},
        "transport": {
            "confluent_copy_msg_s": copy.rate,
            "consumer_performance_msg_s": consumed.fetch_records_per_s,
            "producer_performance_msg_s": produced.records_per_s,
        },
        "throughput": [_measurement_figures(m) for m in throughput],
        "sustained": None if sustained is None else _measurement_figures(sustained),
        "profile": {"samples": dict(profile.samples), "msg_s": profile.rate},
        "metrics_cost": {
            "off_s": list(metrics.off_s),
            "on_s": list(metrics.on_s),
            "scrapes": metrics.scrapes,
            "ratios": metrics.ratios,
            "work_s": metrics.work_s,
            "scrape_s": metrics.scrape_s,
            "work_share": metrics.work_share,
            "work_share_scraped_every_15_s": metrics.share_scraped_every(PROMETHEUS_EVERY_S),
            "cost": metrics.cost,
            "off_msg_s": metrics.rate(False),
            "on_msg_s": metrics.rate(True),
        },
        "python_loop_msg_s": loop.rate,
        "delayed": {
            "messages": delayed.messages,
            "delayed": delayed.delayed,
            "released": delayed.release.released,
            "first_msg_s": delayed.messages / delayed.first.seconds,
            "release_s": delayed.release.seconds,
            "msg_s": delayed.messages / delayed.seconds,
            "warm_ups": delayed_warm_ups,
        },
        "memory": asdict(memory),
        "latency": [_summary(r) for r in latency.results],
        "latency_warm_up": _summary(latency.warm_up) if latency.warm_up else None,
        "startup": {
            "first_routed_s": list(startup.archived_s),
            "without_class_archive_s": list(startup.plain_s),
            "median_s": startup.median_s,
            "resumed_s": list(startup.resumed_s),
            "resumed_median_s": startup.resumed_median_s if startup.resumed_s else None,
            "spark_pass_through_s": list(startup.spark_s),
            "spark_median_s": startup.spark_median_s if startup.spark_s else None,
        },
        "route_change_ms": timing.route_change.propagation_ms,
        "first_route_change_ms": timing.first_change.propagation_ms if timing.first_change else None,
        "retry": asdict(timing.retry),
        "scaling": [
            {
                "workers": r.workers,
                "passthrough_msg_s": r.measurement.passthrough_rate,
                "router_msg_s": r.measurement.router_rate,
            }
            for r in scaling
        ],
    }
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    chart_rates = {
        "transport: confluent-kafka copy": copy.rate,
        "transport: ProducerPerformance": produced.records_per_s,
        **{f"Spark pass-through, {m.routes:,} routes": m.passthrough_rate for m in throughput},
        **{f"router, {m.routes:,} routes": m.router_rate for m in throughput},
        f"router, {args.late:.0%} delayed": delayed.messages / delayed.seconds,
        "Python loop": loop.rate,
    }
    chart_latency = {f"{r.target_rate:,.0f} msg/s": r.percentiles() for r in latency.results}
    render_chart(chart_rates, chart_latency, out / "chart.png", title=f"ssb-kafka-router, {started:%Y-%m-%d}")
    report = render(
        figures,
        throughput,
        profile,
        loop,
        delayed,
        memory,
        latency,
        timing,
        sustained,
        metrics,
        scaling,
        startup,
    )
    (out / "RESULTS.md").write_text(report, encoding="utf-8")
    print(report)


def _measurement_figures(m: Measurement) -> dict[str, Any]:
    """A throughput measurement's figures for results.json."""
    jobs, stages = m.router.jobs_per_batch()
    return {
        "routes": m.routes,
        "messages": m.messages,
        "passthrough_msg_s": m.passthrough_rate,
        "passthrough_with_headers_msg_s": m.with_headers_rate,
        "router_msg_s": m.router_rate,
        "router_s": m.router.seconds,
        "jobs_per_batch": jobs,
        "stages_per_batch": stages,
        "router_full_batch_msg_s": m.router.full_batch_rate(),
        "batches": len(m.router.batches),
        "passthrough_compile_s": m.passthrough_compile_s,
        "router_compile_s": m.router_compile_s,
        "passthrough_cpu_s": m.passthrough_cpu_s,
        "router_cpu_s": m.router_cpu_s,
        "passthrough_machine_s": m.passthrough_machine_s,
        "router_machine_s": m.router_machine_s,
    }


def _cpu_lines(throughput: list[Measurement]) -> list[str]:
    """RESULTS.md: the JVM's CPU per message, and the cores 0.7x the pass-through would take."""
    if not throughput:
        return []
    m = next((x for x in throughput if x.routes == 1_000), throughput[0])
    return [
        "JVM CPU per message: the CPU time of the Spark JVM over the run (every thread: tasks, driver, "
        "garbage collector; the broker is a process of its own and not counted), less the time its JIT "
        "compilers took (warm-up, above), per message. The cores kept busy count the JIT's time too; the "
        "machine's count every process's (the broker's, the benchmark's Python), from /proc/stat. At "
        f"the CPU per message it used with {m.routes:,} routes, the router would keep "
        f"{m.cores_for(0.7):.1f} cores busy at 0.7x the pass-through's rate ({0.7 * m.passthrough_rate:,.0f} "
        f"msg/s), on a machine of {CORES}, which the broker shares.",
        "",
    ]


def _headers_lines(throughput: list[Measurement]) -> list[str]:
    """RESULTS.md: what the router's headers alone cost the pass-through, against the 0.7x aim."""
    if not throughput:
        return []
    ceilings = ", ".join(f"{m.headers_ratio:.2f} ({m.routes:,} routes)" for m in throughput)
    return [
        f"The pass-through with the router's headers writes every record with the {len(SENT_HEADERS)} "
        f"headers a message the router sends to a route's address carries ({', '.join(SENT_HEADERS)}; "
        "`bench.throughput.SENT_HEADERS`), their values of the same sizes, and does nothing else the "
        "router does: no rule, no memory, one topic. "
        f"It ran at {ceilings} of the plain pass-through: with no other work at all, a query "
        "that writes the router's headers reaches about that share of it. The router's rate over "
        "that pass-through's (router / pass-through with its headers) is what the rules, the "
        "conversation memory and the destinations cost beyond those headers.",
        "",
    ]


def _summary(result: LatencyResult) -> dict[str, Any]:
    """A load's figures for results.json, without the latency of every message."""
    return {k: v for k, v in asdict(result).items() if k != "latencies_ms"}


def _profile_section(profile: Profile) -> list[str]:
    """Where the router's CPU goes, and what it would take to reach 0.7x the pass-through."""
    p = profile.pass_through_share()
    # If the pass-through cost what its steps cost in the router, the router would run at p of its
    # rate; at 0.7x, the other steps' share (1 - p) would have to fit in p / 0.7 - p.
    shrink = (1 - p) / (p / 0.7 - p) if 0 < p < 0.7 else float("nan")
    return [
        "## Where the router's CPU goes",
        "",
        f"The JVM's CPU samples (Flight Recorder, every 10 ms; {profile.total:,} samples) over "
        f"{profile.replays} warm replays of {profile.routes:,} routes at {profile.rate:,.0f} msg/s "
        "(`python -m bench.profile`), by step, in the order the data goes through them:",
        "",
        *render_profile(profile),
        "",
        f"The steps the pass-through also runs ({', '.join(PASS_THROUGH_STEPS)}) hold {p:.0%} of the "
        "samples. Were the pass-through to cost what those steps cost here, then for the router to run "
        f"at 0.7x the pass-through, the other steps would have to cost {shrink:.1f}x less than they do.",
        "",
        "Flight Recorder samples threads while they run Java code: time in native code (RocksDB's, the "
        "compression codecs') and in the JIT's compiler threads is not in these shares.",
        "",
    ]


METRICS_COST_AIM = 0.02
"""Issue 42: serving the metrics costs the router under 2% of its time."""


def _metrics_section(metrics: MetricsCost | None) -> list[str]:
    if metrics is None:
        return []
    runs = ", ".join(f"{metrics.messages / s:,.0f}" for s in metrics.off_s)
    runs_on = ", ".join(f"{metrics.messages / s:,.0f}" for s in metrics.on_s)
    ratios = ", ".join(f"{r:+.1%}" for r in metrics.ratios)
    usual = metrics.share_scraped_every(PROMETHEUS_EVERY_S)
    return [
        "## The metrics' cost",
        "",
        f"The router on the same {metrics.messages:,} records, replays alternating without and with what "
        "`--metrics-port` adds (the batches' figures, the state processor's held counts, the HTTP server, "
        f"scraped every {SCRAPE_EVERY_S:g} s: {metrics.scrapes} scrapes): without, msg/s {runs}; with, "
        f"{runs_on} (after one unmeasured run of each; the order within a pair alternates). Each pair's "
        f"time with over its time without: {ratios}; their median {metrics.cost:+.1%}. The pairs spread "
        f"wider than the aim (under {METRICS_COST_AIM:.0%}), so the metrics' own work was timed too: the "
        f"calls that feed them in the driver took {metrics.work_s * 1000:,.0f} ms and the scrapes "
        f"{metrics.scrape_s * 1000:,.0f} ms (as the scraper waited for them, a bound on the server's work), "
        f"over the runs' {sum(metrics.on_s):.1f} s: {metrics.work_share:.2%} with a scrape every "
        f"{SCRAPE_EVERY_S:g} s, {usual:.2%} with one every {PROMETHEUS_EVERY_S:g} s as Prometheus scrapes "
        f"by default ({_met(usual < METRICS_COST_AIM)}); the state processor's held counts, in the "
        "executors, are not in that figure.",
        "",
    ]


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def render(
    figures: dict[str, Any],
    throughput: list[Measurement],
    profile: Profile,
    loop: LoopResult,
    delayed: DelayedRun,
    memory: MemoryResult,
    latency_run: LatencyRun,
    timing: TimingRun,
    sustained: Measurement | None = None,
    metrics: MetricsCost | None = None,
    scaling: list[Scaled] | None = None,
    startup: StartupResult | None = None,
) -> str:
    """bench/RESULTS.md from one run's figures."""
    s = figures["settings"]
    t = figures["transport"]
    trigger_s = DEFAULT_TRIGGER_SECONDS
    trigger_ms = trigger_s * 1000
    lines = [
        "# Benchmark results",
        "",
        f"Measured {figures['measured']} by `make bench` (`python -m bench.run`), in one run on one embedded "
        "broker.",
        f"Machine: {figures['machine']}.",
        "",
        f"Records: {s['messages']:,} messages per run (Avro `router.v1.Message`, 200-byte body, key = "
        "conversation id, two partitions), four per conversation, each conversation to one service: 90% to "
        "services named by routes, 10% to i1's local services. Both Spark queries read micro-batches of at "
        f"most {s['per_batch']:,} records. Rates are messages per second of the query's time. Before the "
        f"measured runs, {s['warm_ups']} unmeasured runs of each Spark query on as many records warm the JVM "
        "up; its JIT still compiles during the measured runs (how much: below).",
        "",
        "## Throughput",
        "",
        "| system | msg/s |",
        "|---|---:|",
        "| transport: confluent-kafka consume -> produce copy, no decoding | "
        f"{t['confluent_copy_msg_s']:,.0f} |",
        f"| transport: Kafka ConsumerPerformance (fetch) | {t['consumer_performance_msg_s']:,.0f} |",
        f"| transport: Kafka ProducerPerformance | {t['producer_performance_msg_s']:,.0f} |",
    ]
    for m in throughput:
        lines.append(
            f"| Spark pass-through (from_avro, to_avro, one topic), {m.routes:,} routes' run | "
            f"{m.passthrough_rate:,.0f} |"
        )
    for m in throughput:
        lines.append(
            f"| Spark pass-through with the router's headers ({len(SENT_HEADERS)}, as a sent message's), "
            f"{m.routes:,} routes' run | {m.with_headers_rate:,.0f} |"
        )
    for m in throughput:
        lines.append(f"| router, {m.routes:,} routes | {m.router_rate:,.0f} |")
    lines += [
        f"| router, {s['late']:.0%} of the conversations delayed, then released | "
        f"{figures['delayed']['msg_s']:,.0f} |",
        "| Python loop: confluent-kafka, fastavro, the reference engine per 1,000 messages | "
        f"{loop.rate:,.0f} |",
        "",
        "| routes | router / pass-through | pass-through with the router's headers / pass-through "
        "| router / pass-through with its headers | router msg/s within its full micro-batches "
        "| Spark jobs per micro-batch | stages per micro-batch | JVM CPU per message: pass-through, router "
        "| cores the router's JVM kept busy | cores the machine kept busy: pass-through, router |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in throughput:
        jobs, stages = m.router.jobs_per_batch()
        lines.append(
            f"| {m.routes:,} | {m.ratio:.2f} | {m.headers_ratio:.2f} | {m.ratio_to_headers:.2f} | "
            f"{m.router.full_batch_rate():,.0f} | {jobs:g} | {stages:g} | "
            f"{m.passthrough_cpu_us:.1f} µs, {m.router_cpu_us:.1f} µs | {m.router_cores:.2f} | "
            f"{m.passthrough_machine_cores:.2f}, {m.router_machine_cores:.2f} |"
        )
    lines += [
        "",
        "Within its full micro-batches: the messages those batches decided over their time, without the "
        "query's start, the last, partial batches and the stop, which the rate above counts.",
        "",
        *_headers_lines(throughput),
        *_cpu_lines(throughput),
        f"Jobs per micro-batch before: {JOBS_BEFORE}.",
        "",
        *warm_up_lines(throughput, sustained, CORES),
        *_metrics_section(metrics),
        *_profile_section(profile),
    ]
    d = figures["delayed"]
    lines += [
        f"Delayed run{' (after an unmeasured one, which warms its code)' if d.get('warm_ups') else ''}: "
        f"{d['delayed']:,} delayed outcomes among {d['messages']:,} messages (no route; a "
        "message is delayed again at each retry while its route is missing, every "
        f"`retry_s` = {s['retry']:g} s, so a message can count more than once); "
        f"{d['released']:,} released once routes were written; "
        f"the first pass ran at {d['first_msg_s']:,.0f} msg/s and the release took {d['release_s']:.1f} s "
        "(the wait for the retry not counted).",
        "",
        "## Memory",
        "",
        f"{memory.conversations:,} conversations of one message each, every one keeping its choice (K2) for "
        f"`keep_choice_s` = {memory.keep_s:g} s; routed in {memory.route_s:.0f} s.",
        "",
        "| when | driver heap in use (MiB) | state-store keys | state on disk (MiB) |",
        "|---|---:|---:|---:|",
        f"| after routing | {memory.routed.heap_mb:,.0f} | {memory.routed.state_keys:,} | "
        f"{memory.routed.state_disk_mb:,.1f} |",
        f"| after the choices expired | {memory.expired.heap_mb:,.0f} | {memory.expired.state_keys:,} | "
        f"{memory.expired.state_disk_mb:,.1f} |",
        "",
        f"## Latency and timing (`router run`, default trigger {trigger_s:g} s, "
        f"{DEFAULT_BUSY_TRIGGER_SECONDS:g} s once {DEFAULT_BUSY_MESSAGES} messages wait)",
        "",
        "| offered msg/s (achieved) | seconds | received | p50 ms | p95 ms | p99 ms | max ms | cores busy |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    latency = latency_run.results
    warm_up = [latency_run.warm_up] if latency_run.warm_up else []
    for r in warm_up + latency:
        label = "warm-up, right after the start: " if r is latency_run.warm_up else ""
        lines.append(
            f"| {label}{r.target_rate:,.0f} ({r.achieved_rate:,.0f}) | {r.duration_s:g} | {r.received:,} of "
            f"{r.produced:,} | {r.p50_ms:,.0f} | {r.p95_ms:,.0f} | {r.p99_ms:,.0f} | {r.max_ms:,.0f} | "
            f"{r.busy_cores:.2f} |"
        )
    change = timing.route_change
    retry = timing.retry
    lines += [
        "",
        "The warm-up load is the first after `router run` started, while its JVM compiles the "
        "decision's code; it is not in the aims (`bench/latency.py`). Cores busy: the whole "
        f"machine's (the router, the broker and the load's producer) while the load was offered, of {CORES}.",
        "",
        f"Route change: the first message routed by a route written while the router runs left "
        f"{change.propagation_ms:,} ms after the route's record was written; the micro-batch that "
        f"decided it began {change.decided_ms:,} ms after the write (its `decided_at`)"
        + (
            f" (the first change after the router started: {timing.first_change.propagation_ms:,} ms)."
            if timing.first_change
            else "."
        ),
        f"Delayed retry (retry_s {retry.retry_s:g}, {retry.messages} messages without a route): "
        f"{retry.retried} retries; retry minus due time, by the micro-batch that routed the message "
        f"again (its `decided_at`): ms p50 {retry.decided_p50_ms:,.0f}, p95 {retry.decided_p95_ms:,.0f}, "
        f"max {retry.decided_max_ms:,.0f}; by the record it wrote (the delayed topic's append time, "
        f"the batch's write included): ms p50 {retry.retry_p50_ms:,.0f}, p95 {retry.retry_p95_ms:,.0f}, "
        f"max {retry.retry_max_ms:,.0f}.",
        f"Release once a route was written: {retry.released} of {retry.messages} released; release "
        f"minus due time ms p50 {retry.p50_ms:,.0f}, p95 {retry.p95_ms:,.0f}, max {retry.max_ms:,.0f} "
        "(the first retry after the route arrived; it waits for the route change when it falls due "
        "while the router takes that in).",
        "",
        *_startup_lines(startup),
        "## Aims",
        "",
        "| aim | figure | |",
        "|---|---|---|",
    ]
    worst = min(m.ratio for m in throughput)
    ceiling = max(m.headers_ratio for m in throughput)
    lines.append(
        f"| router at 0.7x the pass-through or better, every table size | worst {worst:.2f} (the "
        f"pass-through with the router's headers alone: at most {ceiling:.2f}) | {_met(worst >= 0.7)} |"
    )
    small = next((m for m in throughput if m.routes == min(x.routes for x in throughput)), None)
    if small is not None:
        ratio = small.router_rate / loop.rate
        lines.append(
            f"| router 3x the Python loop or better ({small.routes:,} routes) | {ratio:.2f}x | "
            f"{_met(ratio >= 3)} |"
        )
    if len(throughput) > 1:
        large = max(throughput, key=lambda m: m.routes)
        cost = large.router.seconds / small.router.seconds if small else float("nan")
        lines.append(
            f"| {large.routes:,} routes at most 1.3x the cost of {small.routes if small else 0:,} | "
            f"{cost:.2f}x | {_met(cost <= 1.3)} |"
        )
    at_10k = [r for r in latency if r.target_rate >= 10_000]
    if at_10k:
        p99 = at_10k[0].p99_ms
        lines.append(
            f"| p99 at most trigger + 1 s at 10,000 msg/s | {p99:,.0f} ms | "
            f"{_met(p99 <= trigger_ms + 1000 and at_10k[0].received == at_10k[0].produced)} |"
        )
    # "The next micro-batch": the batch that starts after the route arrived, at most one trigger
    # interval after the batch running when it arrived; with batches shorter than the trigger, two.
    lines.append(
        f"| a route change visible in the next micro-batch (within 2 triggers) | "
        f"{change.propagation_ms:,} ms | {_met(change.propagation_ms <= 2 * trigger_ms)} |"
    )
    # Retried: routed again by a micro-batch, whose `decided_at` the record carries; the write of
    # that batch's records follows (the record's append time, given beside it).
    lines.append(
        f"| a delayed message retried at most one trigger late | max {retry.decided_max_ms:,.0f} ms "
        f"by the decision, {retry.retry_max_ms:,.0f} ms once written (release after a route change: "
        f"max {retry.max_ms:,.0f} ms) | "
        f"{_met(retry.decided_max_ms <= trigger_ms and retry.released == retry.messages)} |"
    )
    if startup is not None:
        lines.append(
            f"| first message routed at most {STARTUP_AIM_S:g} s after `router run` starts | "
            f"{startup.median_s:.1f} s"
            + (f" (Spark's own start {startup.spark_median_s:.1f} s)" if startup.spark_s else "")
            + f" | {_met(startup.median_s <= STARTUP_AIM_S)} |"
        )
    lines += ["", *scaling_lines(scaling or []), "![throughput and latency](chart.png)", ""]
    return "\n".join(lines)


STARTUP_AIM_S = 15.0
"""How soon a started router should route: a failed-over or upgraded one leaves its inputs unread."""


def _startup_lines(startup: StartupResult | None) -> list[str]:
    """How soon `router run` routed its first message (`bench.startup`)."""
    if startup is None:
        return []

    def seconds(values: tuple[float, ...]) -> str:
        return ", ".join(f"{v:.1f}" for v in values)

    lines = [
        "## Start",
        "",
        f"`router run` with a message waiting: the first message routed {startup.median_s:.1f} s after "
        f"the process started (median; runs {seconds(startup.archived_s)} s). Without the driver's "
        f"class archive (`ROUTER_CLASS_ARCHIVE=off`), in runs alternating with those: median "
        f"{startup.plain_median_s:.1f} s (runs {seconds(startup.plain_s)} s) (`bench/startup.py`).",
    ]
    if startup.resumed_s:
        lines += [
            "",
            f"Started again on the checkpoint the run before left (its offsets and conversation memory "
            f"loaded), with a new message waiting: routed {startup.resumed_median_s:.1f} s after the "
            f"process started (median; runs {seconds(startup.resumed_s)} s).",
        ]
    if startup.spark_s:
        ratio = startup.median_s / startup.spark_median_s
        lines += [
            "",
            f"Spark's own start, in runs alternating with those: a bare streaming pass-through in the "
            f"router's session (its jars, JVM options and class archive; `from_avro` and `to_avro`, one "
            f"topic, no routes, no state) copied its waiting message {startup.spark_median_s:.1f} s after "
            f"its process started (median; runs {seconds(startup.spark_s)} s; `bench/spark_start.py`). "
            f"The router's start is {startup.added_s:.1f} s longer ({ratio:.2f}x Spark's own): that is "
            f"what the router adds; Spark's own start is the floor under it.",
        ]
    return [*lines, ""]


def _shown(path: Path) -> str:
    """A folder as the results record it: relative to the project when inside it (no machine path)."""
    root = Path(__file__).resolve().parents[1]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
