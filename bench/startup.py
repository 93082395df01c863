"""How soon `router run` routes: seconds from the process's start to its first message routed.

usage: python -m bench.startup [--runs N] [--bootstrap HOST:PORT]

Each run gets a fresh topic namespace (the catalog, 10 routes) and one message already waiting on
the instance's outbound topic for a local service; a consumer is subscribed to that service's queue
topic before `router run` starts, and the time counts from just before the process is started to
the moment the consumer receives the message. That is how long a router that restarts (after a
failover, an upgrade) leaves its inputs unread: Python and the JVM starting, the SparkSession, the
topics checked, the routes read, the streaming query built and started, and its first micro-batch.

The runs alternate between the driver JVM with its class archive (`make setup` records it;
`streaming.spark.session.archive_options`) and without it (`ROUTER_CLASS_ARCHIVE=off`), on the same
machine, so the archive's share is measured with the figure. After each run with the archive, the
router is stopped, a second message is sent, and `router run` starts again on the same checkpoint:
a resumed start, which also loads the checkpoint's offsets and conversation memory. Each round
also starts Spark's own floor, a bare streaming pass-through in the router's session
(`bench.spark_start`), timed the same way: what the router adds to a start is its figure less that
one, measured on the same machine in the same minutes. A start begins only once the process before
it has ended, its JVM too (`bench.router_process.stop_group`). Without --bootstrap it starts the
embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import kafka, message_id, new_prefix, prepare, progress, watcher
from bench.router_process import RouterProcess
from bench.spark_start import first_copied_s
from streaming.spark.session import CLASS_ARCHIVE_ENV

RUNS = 3
"""Runs of each kind (with and without the class archive)."""

TIMEOUT_S = 180.0


@dataclass(frozen=True)
class StartupResult:
    """Seconds from process start to the first message routed, per run."""

    archived_s: tuple[float, ...]
    """With the driver's class archive: what `router run` does after `make setup`."""
    plain_s: tuple[float, ...]
    """With `ROUTER_CLASS_ARCHIVE=off`."""
    resumed_s: tuple[float, ...] = ()
    """With the archive, started again on the checkpoint the run before it left."""
    spark_s: tuple[float, ...] = ()
    """Spark's own start: a bare pass-through in the router's session (`bench.spark_start`)."""

    @property
    def median_s(self) -> float:
        """The figure: the median with the class archive."""
        return statistics.median(self.archived_s)

    @property
    def plain_median_s(self) -> float:
        return statistics.median(self.plain_s) if self.plain_s else float("nan")

    @property
    def resumed_median_s(self) -> float:
        return statistics.median(self.resumed_s) if self.resumed_s else float("nan")

    @property
    def spark_median_s(self) -> float:
        return statistics.median(self.spark_s) if self.spark_s else float("nan")

    @property
    def added_s(self) -> float:
        """What the router adds to Spark's own start: the medians' difference (NaN when not measured)."""
        return self.median_s - self.spark_median_s


def first_routed_s(
    bootstrap: str, folder: Path, archive: bool, resume: bool = False
) -> tuple[float, float | None]:
    """`router run` on a fresh namespace: seconds from its start to its first message routed.

    With `resume`, also the seconds from a second start on the checkpoint the first left (the
    router stopped, a new message sent) to that message routed; else None.
    """
    prefix = new_prefix()
    prepare(bootstrap, prefix, 10, messages=0)
    environment = {} if archive else {CLASS_ARCHIVE_ENV: "off"}
    router = RouterProcess(bootstrap, prefix, folder / prefix, environment=environment)
    probe, queue = router.send_probe("start")
    consumer = watcher(bootstrap, queue, f"bench-start-{prefix}")

    def routed_s(probe: str) -> float:
        started = time.monotonic()  # `start` is the fork and exec, nothing before it
        router.start()
        while time.monotonic() - started < TIMEOUT_S:
            record = consumer.poll(0.05)
            if record is not None and not record.error() and message_id(record.value()) == probe:
                return time.monotonic() - started
            router.ensure_running("it routed its first message")
        raise TimeoutError(f"router run routed nothing within {TIMEOUT_S:g} s:\n{router.log_tail()}")

    try:
        fresh = routed_s(probe)
        if not resume:
            return fresh, None
        stopped = router.stop()
        if stopped.killed:
            raise RuntimeError(f"{stopped.describe()}:\n{router.log_tail()}")
        again, _ = router.send_probe("resume")
        return fresh, routed_s(again)
    finally:
        if router.running():
            router.stop()
        consumer.close()


def measure_startup(bootstrap: str, runs: int = RUNS) -> StartupResult:
    """`runs` starts with the class archive, as many without, and as many of Spark's own, in turn."""
    folder = Path(tempfile.mkdtemp(prefix="router-bench-start-"))
    archived: list[float] = []
    plain: list[float] = []
    resumed: list[float] = []
    spark: list[float] = []
    try:
        for run in range(runs):
            for archive, into in ((True, archived), (False, plain)):
                seconds, again = first_routed_s(bootstrap, folder, archive, resume=archive)
                into.append(seconds)
                kind = "with" if archive else "without"
                progress(
                    f"bench: start {run + 1} of {runs} {kind} the class archive: "
                    f"first message routed {seconds:.1f} s after the process started"
                    + ("" if again is None else f"; resumed on its checkpoint, {again:.1f} s")
                )
                if again is not None:
                    resumed.append(again)
            spark.append(first_copied_s(bootstrap, folder))
            progress(
                f"bench: start {run + 1} of {runs} of Spark's own pass-through: "
                f"first message copied {spark[-1]:.1f} s after the process started"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return StartupResult(tuple(archived), tuple(plain), tuple(resumed), tuple(spark))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=RUNS, help=f"starts of each kind (default {RUNS})")
    parser.add_argument(
        "--bootstrap", default=None, help="a running broker (default: start the embedded one)"
    )
    args = parser.parse_args()
    with kafka(args.bootstrap) as bootstrap:
        result = measure_startup(bootstrap, args.runs)
    print(
        f"first message routed {result.median_s:.1f} s after the process started "
        f"(median of {len(result.archived_s)}; without the class archive {result.plain_median_s:.1f} s; "
        f"resumed on its checkpoint {result.resumed_median_s:.1f} s); Spark's own pass-through "
        f"{result.spark_median_s:.1f} s, so the router adds {result.added_s:.1f} s"
    )


if __name__ == "__main__":
    main()
