"""What more state partitions (`shuffle_partitions`) cost the router on a small machine.

usage: python -m bench.partitions [--messages N] [--partitions 2,8,16] [--rounds N] [--bootstrap HOST:PORT]

A checkpoint keeps the number of state partitions it was started with for life, so the default
decides how far a router started small can spread later. This measures, in one JVM on the same
records (`bench.common.prepare`, a fresh namespace per run, 10 routes), the router's replay of
`--messages` messages in micro-batches of 100,000 with each partition count, after one unmeasured
warm-up run per count; the counts alternate round by round, so no count is always the warmer.
Per run: msg/s, the first micro-batch's seconds (a new checkpoint: its state stores are created
then), and the median seconds of small micro-batches (1,000 messages in batches of 100: what a
batch costs at a trickle, where a fixed cost per state partition shows). One JSON line per run
on stdout, and the medians per count at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from pyspark.sql import SparkSession

from bench.common import new_prefix, prepare, progress, spark_bench
from bench.throughput import router_settings, run_router

SMALL_MESSAGES, SMALL_BATCH = 1_000, 100


def one_run(
    spark: SparkSession, bootstrap: str, folder: Path, partitions: int, messages: int
) -> dict[str, float | int]:
    """The big replay and the small one with `partitions` state partitions, each on a new checkpoint."""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    out: dict[str, float | int] = {"partitions": partitions, "messages": messages}
    for name, count, per_batch in (("big", messages, 100_000), ("small", SMALL_MESSAGES, SMALL_BATCH)):
        prefix = new_prefix()
        prepare(bootstrap, prefix, 10, count)
        settings = router_settings(
            bootstrap, prefix, folder / f"{prefix}-p{partitions}", per_batch, shuffle_partitions=partitions
        )
        run = run_router(spark, settings)
        if run.routed != count:
            raise SystemExit(f"bench: the router routed {run.routed:,} of {count:,} messages")
        batches = sorted(run.batches, key=lambda b: b.batch_id)
        if name == "big":
            out["seconds"] = round(run.seconds, 2)
            out["msg_per_s"] = round(count / run.seconds)
            out["first_batch_s"] = round(batches[0].seconds, 2)
        else:
            out["small_batch_s"] = round(statistics.median(b.seconds for b in batches[1:]), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--partitions", default="2,8,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]
    results: dict[int, list[dict[str, float | int]]] = {p: [] for p in counts}
    with spark_bench(args.bootstrap, "router-bench-partitions") as (spark, bootstrap, folder):
        for p in counts:
            progress(f"bench: warm-up with {p} state partitions")
            one_run(spark, bootstrap, folder, p, args.messages)
        for r in range(args.rounds):
            for p in counts if r % 2 == 0 else reversed(counts):
                result = one_run(spark, bootstrap, folder, p, args.messages)
                results[p].append(result)
                print(json.dumps({"round": r, **result}), flush=True)
        spark.stop()
    for p, runs in results.items():
        summary = {
            key: statistics.median(float(run[key]) for run in runs)
            for key in ("msg_per_s", "first_batch_s", "small_batch_s")
        }
        print(json.dumps({"partitions": p, "median": summary}), flush=True)


if __name__ == "__main__":
    main()
