"""What serving the router's metrics costs: the router with metrics on and off, on the same records.

usage: python -m bench.metrics_cost [--messages N] [--per-batch N] [--pairs N] [--bootstrap HOST:PORT]

One namespace holds the records (`bench.common.prepare`, 10 routes, a share of the conversations
delayed so that the state processor's held figures change); each run is a `RouterJob.replay` of all
of them with a new checkpoint. "On" is what `router run --metrics-port` adds
(`streaming.spark.metrics.RouterMetrics` fed by every batch, the state processor's `HeldCounts`, the
HTTP server) with a scraper asking `/metrics` and `/healthz` every `SCRAPE_EVERY_S`, far more often
than Prometheus would. One unmeasured run of each first compiles their code (delayed messages take
code the plain runs do not); then `--pairs` pairs, the order within a pair alternating (off-on,
on-off, ...), since each run of a JVM is a little warmer than the last. The cost is the median of
the pairs' ratios (on over off, less one).

Runs of the same records differ by more than the few percent the metrics could cost, so their own
work is timed as well: the driver's calls that feed them each batch, and the scrapes as the scraper
waits for them (`MetricsCost.work_share`).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.common import new_prefix, prepare, progress, spark_bench
from bench.throughput import router_settings
from streaming.devtools.embedded_kafka import free_port
from streaming.observe.server import serve
from streaming.spark.job import RouterJob, input_topics
from streaming.spark.metrics import RouterMetrics

SCRAPE_EVERY_S = 0.5
"""How often the "on" runs are scraped: thirty times as often as Prometheus does by default."""
PROMETHEUS_EVERY_S = 15.0
"""Prometheus' default scrape interval."""
PAIRS = 6
"""Measured pairs of runs, off and on."""


@dataclass(frozen=True)
class MetricsCost:
    messages: int
    off_s: tuple[float, ...]
    on_s: tuple[float, ...]
    scrapes: int
    """Scrapes answered during the "on" runs."""
    work_s: float = 0.0
    """The metrics' own work in the "on" runs' driver: the calls that feed them each batch
    (`RouterMetrics.batch`, `input_lag`, `snapshot`, the held figures and their `take` from the JVM)."""
    scrape_s: float = 0.0
    """The scrapes' time as the scraper saw it (request to last byte): a bound on the server's work."""

    @property
    def ratios(self) -> list[float]:
        """Each pair's time with metrics over its time without, less one (0.01 = 1% slower)."""
        return [on / off - 1.0 for on, off in zip(self.on_s, self.off_s, strict=True)]

    @property
    def cost(self) -> float:
        """The median of the pairs' ratios."""
        return statistics.median(self.ratios)

    @property
    def work_share(self) -> float:
        """The metrics' own work, scrapes included, over the "on" runs' time."""
        return (self.work_s + self.scrape_s) / sum(self.on_s)

    def share_scraped_every(self, seconds: float) -> float:
        """`work_share` were the scrapes `seconds` apart instead of `SCRAPE_EVERY_S`."""
        return (self.work_s + self.scrape_s * SCRAPE_EVERY_S / seconds) / sum(self.on_s)

    def rate(self, on: bool) -> float:
        """Messages per second of the median run."""
        return self.messages / statistics.median(self.on_s if on else self.off_s)


class _Stopwatch:
    """Seconds spent in the calls it wraps."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


class _TimedHeld:
    """The state processor's `HeldCounts` (a JVM object), its `take` timed."""

    def __init__(self, held: Any, watch: _Stopwatch) -> None:
        self.take = watch.wrap(held.take)


class _TimedJob(RouterJob):
    """A job whose metrics' own work is timed (`MetricsCost.work_s`)."""

    watch: _Stopwatch

    def start(self, bounded: bool) -> Any:
        query = super().start(bounded)
        if self._held is not None and not isinstance(self._held, _TimedHeld):
            self._held = _TimedHeld(self._held, self.watch)
        return query


def _timed_metrics(metrics: RouterMetrics, watch: _Stopwatch) -> None:
    for name in ("batch", "input_lag", "snapshot"):
        setattr(metrics, name, watch.wrap(getattr(metrics, name)))
    metrics.held.add = watch.wrap(metrics.held.add)  # type: ignore[method-assign]


def _replay(
    spark: SparkSession, bootstrap: str, prefix: str, checkpoint: Path, per_batch: int, on: bool
) -> tuple[float, int, float, float]:
    """One replay: its seconds, and when `on` its scrapes, the metrics' work and the scrapes' time."""
    settings = router_settings(bootstrap, prefix, checkpoint, per_batch)
    if not on:
        job = RouterJob(spark, settings)
        started = time.monotonic()
        job.replay()
        seconds = time.monotonic() - started
        job.close()
        return seconds, 0, 0.0, 0.0
    metrics = RouterMetrics(settings.instances, input_topics(settings))
    watch, scraping = _Stopwatch(), _Stopwatch()
    _timed_metrics(metrics, watch)
    timed = _TimedJob(spark, settings, metrics=metrics)
    timed.watch = watch
    server = serve(metrics.registry, timed.health, free_port())
    assert server is not None
    done = threading.Event()
    scrapes = 0

    def get(path: str) -> None:
        try:
            with urllib.request.urlopen(f"http://{server.address}{path}", timeout=5) as answer:
                answer.read()
        except OSError:  # 503 while starting counts too: it was answered
            pass

    timed_get = scraping.wrap(get)

    def scrape() -> None:
        nonlocal scrapes
        while not done.wait(SCRAPE_EVERY_S):
            for path in ("/metrics", "/healthz"):
                timed_get(path)
            scrapes += 1

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    started = time.monotonic()
    try:
        timed.replay()
        seconds = time.monotonic() - started
    finally:
        done.set()
        scraper.join()
        server.stop()
        timed.close()
    return seconds, scrapes, watch.seconds, scraping.seconds


def measure_metrics_cost(
    spark: SparkSession, bootstrap: str, folder: Path, messages: int, per_batch: int, pairs: int = PAIRS
) -> MetricsCost:
    """Alternate replays without and with metrics on the same records (see the module docstring)."""
    prefix = new_prefix()
    prepare(bootstrap, prefix, 10, messages, late=0.05)
    for with_metrics in (False, True):  # unmeasured: compiles the code of both
        _replay(spark, bootstrap, prefix, folder / f"{prefix}-warm-{with_metrics}", per_batch, with_metrics)
    off: list[float] = []
    on: list[float] = []
    scrapes = 0
    work_s = scrape_s = 0.0
    for n in range(pairs):
        for with_metrics in (False, True) if n % 2 == 0 else (True, False):
            checkpoint = folder / f"{prefix}-{n}-{'on' if with_metrics else 'off'}"
            seconds, answered, work, scraped = _replay(
                spark, bootstrap, prefix, checkpoint, per_batch, with_metrics
            )
            (on if with_metrics else off).append(seconds)
            scrapes += answered
            work_s += work
            scrape_s += scraped
            progress(
                f"bench: metrics {'on' if with_metrics else 'off'}, pair {n + 1} of {pairs}: "
                f"{messages / seconds:,.0f} msg/s"
            )
    return MetricsCost(messages, tuple(off), tuple(on), scrapes, work_s, scrape_s)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--per-batch", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--bootstrap", default=None, help="an existing broker (default: an embedded one)")
    args = parser.parse_args()
    with spark_bench(args.bootstrap, "router-bench-metrics") as (spark, bootstrap, folder):
        result = measure_metrics_cost(spark, bootstrap, folder, args.messages, args.per_batch, args.pairs)
    print(
        f"metrics off: {result.rate(False):,.0f} msg/s (median of {len(result.off_s)}), "
        f"on: {result.rate(True):,.0f} msg/s, {result.scrapes} scrapes; pairs "
        f"{', '.join(f'{r:+.1%}' for r in result.ratios)}; cost (their median) {result.cost:+.1%}; "
        f"the metrics' own work {result.work_s * 1000:,.0f} ms and scrapes {result.scrape_s * 1000:,.0f} ms "
        f"over {sum(result.on_s):.1f} s: {result.work_share:.2%}"
    )


if __name__ == "__main__":
    main()
