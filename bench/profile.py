"""Where the router's CPU goes: its steps' shares of the JVM's CPU samples over warm replays.

usage: python -m bench.profile [--messages N] [--routes N] [--per-batch N] [--warm-ups N] [--replays N]
                               [--bootstrap HOST:PORT]

`profile_router` replays the benchmark's records (`bench.common.prepare`, `routes` routes) with a new
`RouterJob` `warm_ups` times unmeasured, so that the JIT has compiled the job's code, then
`replays` times under the JVM's sampling profiler (`router.metrics.CpuSamples`, Flight Recorder's
execution samples every 10 ms). Each sample is put in one step of the router (`STEPS`) by its
thread and stack (`step_of`), in the order the data goes through them: the Kafka read and the Avro
decoding, the shuffle into the state processor, the conversation memory, the decision, the output
records and the Kafka producer, and the driver's own work.

The Spark pass-through (bench.throughput) does only the read, the decoding and the producer's
work: the shares of the other steps are the router's work beyond it. Without --bootstrap it starts
the embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from bench.common import new_prefix, prepare, progress, spark_bench
from bench.throughput import router_settings, run_router
from streaming.spark.session import session_jvm

PERIOD_MS = 10

STEPS: tuple[tuple[str, str], ...] = (
    ("read", "Kafka fetch of the input records"),
    ("decode", "Avro decoding and the columns the rules read"),
    ("choices", "choice records read back (JSON)"),
    ("shuffle", "the rest of the map stage: the shuffle write to the state processor"),
    ("memory: processor", "the conversation memory's rules (router.state) in the state processor"),
    ("memory: state store", "the state store (RocksDB) and Spark's stateful operator"),
    ("memory: rows", "rows into and out of the processor: shuffle read, sort, encoders, projections"),
    ("memory: K2 pass", "the decision's pass the processor runs to keep choices at once (ProcessorPass)"),
    ("decision", "the decision's pass (router.rules and its Spark adapter) and its headers"),
    ("output", "the output records (SQL: message, dead letter, choice, request) and their metrics"),
    ("producer", "the Kafka producer (Spark's writer and the client), I/O thread included"),
    ("driver", "the driver: building the query, planning each micro-batch, offsets, checkpoint, commits"),
    ("other", "other JVM threads (listener bus, block manager, heartbeats)"),
)
"""The router's steps, in the order its data goes through them, with what each holds."""

PASS_THROUGH_STEPS = ("read", "decode", "producer")
"""The steps the Spark pass-through also runs (with to_avro as its output)."""

_TASK = "Executor task launch worker"
_DRIVER = "stream execution thread"


_PROCESSOR = ("router.state.", "router.spark.ConversationState")
"""The state processor's frames: the conversation memory's rules and the Spark processor around them."""


_K2_PASS = "router.spark.ProcessorPass"
"""The decision's pass as the state processor runs it (K2 kept at once): each message it lets out
is decided there, then again by the decision's own pass."""


def _deciding(frame: str) -> bool:
    """A frame of the decision: the pure rules, or a Spark adapter of theirs other than the processor."""
    return frame.startswith("router.rules.") or (
        frame.startswith("router.spark.") and not frame.startswith(_PROCESSOR)
    )


def _any(frames: Sequence[str], pattern: str) -> bool:
    rx = re.compile(pattern)
    return any(rx.search(f) for f in frames)


def _memory_step(inner: Sequence[str]) -> str:
    """The memory's step of a sample within the state processor's operator (`inner`: its frames)."""
    if _any(inner, r"RocksDB|rocksdb"):
        return "memory: state store"
    if any(f.startswith(_PROCESSOR) for f in inner):
        if _any(inner, r"SafeProjection|ExpressionEncoder|ObjectOperator|RowFactory|GenericRow"):
            return "memory: rows"
        return "memory: processor"
    if _any(inner, r"StateStore|StatefulProcessor|ValueState|Timer|Changelog"):
        return "memory: state store"
    return "memory: rows"


def step_of(thread: str, frames: Sequence[str]) -> str:
    """The step (a name of `STEPS`) of one sample: its thread's name and frames, outermost first."""
    if thread.startswith("kafka-producer-network-thread"):
        return "producer"
    if thread.startswith(_DRIVER) or _any(frames[:8], r"^py4j\."):
        return "driver"  # Spark's stream thread, or a call from the Python driver (building the query)
    if not thread.startswith(_TASK):
        return "other"
    if _any(frames, r"\.ShuffleMapTask\."):
        if _any(frames, r"KafkaDataConsumer|KafkaBatchPartitionReader|KafkaRecordToRowConverter"):
            return "read"
        if _any(frames, r"AvroDataToCatalyst|org\.apache\.avro\.|router\.avro\."):
            return "decode"
        if _any(frames, r"JsonToStructs|jackson"):
            return "choices"
        return "shuffle"
    if any(f.startswith(_K2_PASS) for f in frames):
        return "memory: K2 pass"  # the rules' frames under it: the decision made a first time
    rules = [i for i, f in enumerate(frames) if _deciding(f)]
    if rules:
        last = rules[-1]
        upstream = frames[last + 1 :]
        pulls = frames[last].endswith(("DecisionPass$Scan.hasNext", "DecisionPass$Scan.next"))
        if not (pulls and upstream and "IteratorWrapper" in upstream[0]):
            return "decision"
        # The decision's pass asking for its next row: the rows out of the state processor.
        return _memory_step(upstream)
    operator = [i for i, f in enumerate(frames) if "StateStoreRDD.compute" in f]
    if operator:
        # The state processor's operator before the decision's pass reads its first row: the
        # shuffle read and the sort by state key of its input, the state store's opening.
        return _memory_step(frames[operator[-1] + 1 :])
    if _any(frames, r"org\.apache\.kafka\.|KafkaRowWriter\.sendRow$"):
        return "producer"
    return "output"


@dataclass(frozen=True)
class Profile:
    """The CPU samples of the measured replays, by step."""

    samples: Mapping[str, int]
    rate: float
    """Messages per second of the measured replays."""
    routes: int = 10
    """The route-table size they ran with."""
    replays: int = 1
    """How many replays were sampled."""

    @property
    def total(self) -> int:
        return sum(self.samples.values())

    def share(self, step: str) -> float:
        return self.samples.get(step, 0) / self.total if self.total else float("nan")

    def pass_through_share(self) -> float:
        """The share of the steps the pass-through also runs."""
        return sum(self.share(s) for s in PASS_THROUGH_STEPS)


def by_step(folded: Mapping[str, int]) -> dict[str, int]:
    """Samples per step from folded stacks ("thread|outer;...;inner" -> count, `CpuSamples`)."""
    counts: Counter[str] = Counter()
    for stack, n in folded.items():
        thread, _, frames = stack.partition("|")
        counts[step_of(thread, frames.split(";") if frames else [])] += n
    return {name: counts.get(name, 0) for name, _ in STEPS}


def profile_router(
    spark: SparkSession,
    bootstrap: str,
    folder: Path,
    messages: int,
    per_batch: int,
    warm_ups: int,
    replays: int,
    routes: int = 10,
) -> Profile:
    """Replay `warm_ups` times unmeasured, then `replays` times under the profiler (module docstring)."""
    jvm = session_jvm(spark, "the profiler needs")
    for i in range(warm_ups):
        prefix = new_prefix()
        prepare(bootstrap, prefix, routes, messages)
        progress(f"bench: profile: warm-up replay {i + 1} of {warm_ups}")
        # The recorder's first start slows the next replay down (measured: by half): the last
        # warm-up runs under a recording of its own, not kept.
        warming = jvm.router.metrics.CpuSamples.start(PERIOD_MS) if i == warm_ups - 1 else None
        run_router(spark, router_settings(bootstrap, prefix, folder / f"{prefix}-router", per_batch))
        if warming is not None:
            warming.stop()
    prefixes = [new_prefix() for _ in range(replays)]
    for prefix in prefixes:
        prepare(bootstrap, prefix, routes, messages)
    progress(f"bench: profile: {replays} replays of {messages:,} messages under the profiler")
    sampler = jvm.router.metrics.CpuSamples.start(PERIOD_MS)
    seconds = 0.0
    try:
        for prefix in prefixes:
            run = run_router(
                spark, router_settings(bootstrap, prefix, folder / f"{prefix}-router", per_batch)
            )
            seconds += run.seconds
    finally:
        folded = {str(k): int(v) for k, v in sampler.stop().items()}
    return Profile(by_step(folded), messages * replays / seconds, routes, replays)


def render_profile(profile: Profile) -> list[str]:
    """A Markdown table of the shares, in the data's order."""
    lines = [
        "| step | what it holds | share of the CPU samples |",
        "|---|---|---:|",
    ]
    for name, what in STEPS:
        mark = " (pass-through too)" if name in PASS_THROUGH_STEPS else ""
        lines.append(f"| {name}{mark} | {what} | {profile.share(name):.1%} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000, help="records per replay (default 300000)")
    parser.add_argument("--routes", type=int, default=10, help="route-table size (default 10)")
    parser.add_argument("--per-batch", type=int, default=100_000, help="most records per micro-batch")
    parser.add_argument("--warm-ups", type=int, default=3, help="unmeasured replays first (default 3)")
    parser.add_argument("--replays", type=int, default=2, help="replays under the profiler (default 2)")
    parser.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    args = parser.parse_args()
    with spark_bench(args.bootstrap, "router-profile") as (spark, bootstrap, folder):
        result = profile_router(
            spark, bootstrap, folder, args.messages, args.per_batch, args.warm_ups, args.replays, args.routes
        )
    print(f"{result.total:,} samples over replays of {result.routes:,} routes at {result.rate:,.0f} msg/s")
    print("\n".join(render_profile(result)))
    print(f"steps the pass-through also runs: {result.pass_through_share():.1%} of the samples")


if __name__ == "__main__":
    main()
