"""The router on a Spark standalone cluster of one worker, then of two: does a second worker help?

usage: python -m bench.scaling [--messages N] [--per-batch N] [--warm-ups N] [--bootstrap HOST:PORT]

For each size, a new cluster (`streaming.devtools.spark_cluster`: a master and 1 or 2 workers of 1 core
and 1 GiB, on this machine) and a new SparkSession on it: the Spark pass-through and the router
(10 routes) on the same records, after warm-ups of both (`bench.throughput.measure_throughput`:
each executor is a new JVM, whose JIT starts cold). The input has two partitions, the router's
state two (`shuffle_partitions`), so two executors of one core can each take one. On one
machine the workers share its cores with the driver and the broker: the ratio says how much of a
second core the job can use, not what a second machine would give.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import SESSION_JVM_OPTIONS, kafka, progress
from bench.throughput import Measurement, measure_throughput
from streaming.devtools.embedded_kafka import HOST
from streaming.devtools.spark_cluster import StandaloneCluster
from streaming.spark.session import build_session

WORKERS = (1, 2)
MESSAGES = 200_000
PER_BATCH = 50_000
"""Records per micro-batch: an executor has 1 GiB, not the local driver's 2 GiB."""
WARM_UPS = 1


@dataclass(frozen=True)
class Scaled:
    """The pass-through and the router on a cluster of `workers` workers of one core each."""

    workers: int
    measurement: Measurement


def measure_scaling(
    bootstrap: str,
    folder: Path,
    messages: int = MESSAGES,
    per_batch: int = PER_BATCH,
    warm_ups: int = WARM_UPS,
    workers: tuple[int, ...] = WORKERS,
) -> list[Scaled]:
    """Each cluster size in turn: a new cluster and session, warm-ups, then both queries measured."""
    results = []
    for count in workers:
        with StandaloneCluster(folder / f"cluster-{count}", workers=count) as cluster:
            progress(f"bench: scaling: {count} worker(s) at {cluster.url}")
            # The driver listens on 127.0.0.1 too; settings, not SPARK_LOCAL_IP, since the JVM of an
            # earlier session in this process may already run.
            spark = build_session(
                f"router-bench-{count}-workers",
                master=cluster.url,
                jvm_options=SESSION_JVM_OPTIONS,
                extra_conf={"spark.driver.host": HOST, "spark.driver.bindAddress": HOST},
            )
            try:
                # The headers' ceiling is measured in local mode (bench.throughput); not again here.
                (measured,) = measure_throughput(
                    spark,
                    bootstrap,
                    folder / f"runs-{count}",
                    [10],
                    messages,
                    per_batch,
                    warm_ups,
                    with_headers=False,
                )
            finally:
                spark.stop()
            results.append(Scaled(count, measured))
    return results


def scaling_lines(results: list[Scaled]) -> list[str]:
    """RESULTS.md's section: each cluster size's rates, and the ratio of the largest to one worker."""
    if not results:
        return []
    one = results[0].measurement
    lines = [
        "## Scaling out: a Spark standalone cluster",
        "",
        f"The router and the pass-through on a standalone cluster on this machine (`python -m "
        f"bench.scaling`), {one.messages:,} messages, {one.routes:,} routes; each worker has 1 core and "
        "1 GiB; a new cluster and session per size, after warm-ups. The workers share the machine's "
        "cores with the driver and the broker.",
        "",
        "| workers | pass-through msg/s | router msg/s | router / pass-through | router vs one worker "
        "| pass-through vs one worker |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        m = r.measurement
        lines.append(
            f"| {r.workers} | {m.passthrough_rate:,.0f} | {m.router_rate:,.0f} | {m.ratio:.2f} | "
            f"{m.router_rate / one.router_rate:.2f}x | {m.passthrough_rate / one.passthrough_rate:.2f}x |"
        )
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--per-batch", type=int, default=PER_BATCH)
    parser.add_argument("--warm-ups", type=int, default=WARM_UPS)
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="router-bench-scaling-") as folder,
        kafka(args.bootstrap) as bootstrap,
    ):
        results = measure_scaling(bootstrap, Path(folder), args.messages, args.per_batch, args.warm_ups)
    print("\n".join(scaling_lines(results)))


if __name__ == "__main__":
    main()
