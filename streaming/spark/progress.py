"""What a running router tells a person: a line per micro-batch, and a summary when it stops.

A batch's line gives its records, how long it took and the rate, the counts by outcome (and the
messages released from delay, the dead letters), the route snapshot it was decided against, and
the lag: the records the input topics held beyond the batch when it was planned. The figures come
from the batch's own observed metrics and from Spark's progress report of the query, so printing
them costs nothing. Batches with nothing to route get few lines (`ProgressLines`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.spark.batch import OUTCOMES, BatchMetrics


@dataclass(frozen=True)
class BatchReport:
    """One micro-batch as the router saw it."""

    batch_id: int
    metrics: BatchMetrics
    seconds: float
    snapshot: str
    lag: int | None = None
    jobs: int | None = None
    """Spark jobs the batch ran (`router.metrics.BatchJobs`), when counted."""
    stages: int | None = None
    started: float = 0.0
    """When the batch began (time.monotonic)."""
    decided_ms: int = 0
    """When the driver began the batch's work (epoch ms). Its messages' `decided_at` is the batch's
    own time, which Spark took as it started the batch, its reading and planning earlier."""

    def line(self) -> str:
        """The batch's progress line."""
        m = self.metrics
        rate = m.records / self.seconds if self.seconds > 0 else 0.0
        counts = " ".join(f"{o} {m.outcomes[o]:,}" for o in OUTCOMES if m.outcomes.get(o))
        extra = []
        if m.released:
            extra.append(f"released {m.released:,}")
        if m.dead_lettered:
            extra.append(f"dead-lettered {m.dead_lettered:,}")
        if m.unavailable:
            extra.append(f"unavailable destinations {len(m.unavailable)}")
        parts = [
            f"batch {self.batch_id}: {m.records:,} records in {self.seconds:.2f}s ({rate:,.0f}/s)",
            counts or "nothing routed",
            *extra,
            f"snapshot {self.snapshot}",
        ]
        if self.lag is not None:
            parts.append(f"lag {self.lag:,}")
        if self.jobs is not None:
            parts.append(f"{self.jobs} jobs/{self.stages} stages")
        return " | ".join(parts)


IDLE_LINE_EVERY_S = 60.0
"""While nothing arrives, how often a line says that the router still runs (`ProgressLines`)."""


class ProgressLines:
    """The batch lines a person is shown: every batch that routed anything, and few idle ones.

    With no traffic the tick still runs a micro-batch a second (delayed messages fall due in them),
    and a line for each would bury the lines that matter. A batch with no record is shown only when
    it is the run's first, when its route snapshot is not the last line's (a route change taken in
    shows at once), or when `every_s` have passed since the last line: that line counts the idle
    batches since. So a replay's last, empty batch is not shown, and an idle `router run` prints a
    line a minute.
    """

    def __init__(self, every_s: float = IDLE_LINE_EVERY_S) -> None:
        self.every_s = every_s
        self._last: BatchReport | None = None
        self._idle = 0
        """Batches with no record since the last line shown."""

    def to(self, say: Callable[[str], None]) -> Callable[[BatchReport], None]:
        """A job's `on_batch`: each batch's line, when it has one, is passed to `say`."""

        def show(report: BatchReport) -> None:
            text = self.line(report)
            if text is not None:
                say(text)

        return show

    def line(self, report: BatchReport) -> str | None:
        """The line to show for `report`, or None when it is an idle batch not worth a line."""
        last = self._last
        if report.metrics.records or last is None or report.snapshot != last.snapshot:
            self._last, self._idle = report, 0
            return report.line()
        self._idle += 1
        waited = report.started - last.started
        if waited < self.every_s:
            return None
        idle, self._last, self._idle = self._idle, report, 0
        parts = [
            f"batch {report.batch_id}: nothing to route in {idle:,} batch(es) over {waited:.0f}s",
            f"snapshot {report.snapshot}",
        ]
        if report.lag is not None:
            parts.append(f"lag {report.lag:,}")
        return " | ".join(parts)


@dataclass
class RunTotals:
    """What a run routed, summed over its batches."""

    batches: int = 0
    records: int = 0
    dead_lettered: int = 0
    released: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, metrics: BatchMetrics) -> None:
        """Count one batch."""
        self.batches += 1
        self.records += metrics.records
        self.dead_lettered += metrics.dead_lettered
        self.released += metrics.released
        self.outcomes.update(metrics.outcomes)

    @property
    def routed(self) -> int:
        """Messages decided, dead letters not counted (released ones are counted again)."""
        return sum(self.outcomes.values())

    def summary(self) -> str:
        """One line: batches, messages routed by outcome, released, dead-lettered."""
        counts = ", ".join(f"{self.outcomes[o]:,} {o}" for o in OUTCOMES if self.outcomes.get(o))
        return (
            f"{self.batches} batch(es): {self.routed:,} messages routed"
            + (f" ({counts})" if counts else "")
            + f", {self.released:,} of them released from delay, {self.dead_lettered:,} dead-lettered"
        )


def source_offsets(progress: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    """The end offset of every Kafka topic partition a progress report's sources read up to."""
    offsets: dict[tuple[str, int], int] = {}
    for source in progress.get("sources") or ():
        end = source.get("endOffset")
        if not isinstance(end, dict):
            continue
        for topic, partitions in end.items():
            if isinstance(partitions, dict):
                for partition, offset in partitions.items():
                    offsets[(topic, int(partition))] = int(offset)
    return offsets


def partition_lag(progress: Mapping[str, Any], topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """Records of each partition of `topics` available when the batch was planned and not in it.

    From Spark's progress report of the batch: its Kafka sources' `latestOffset` less `endOffset`.
    """
    wanted = set(topics)
    out: dict[tuple[str, int], int] = {}
    for source in progress.get("sources") or ():
        latest, end = source.get("latestOffset"), source.get("endOffset")
        if not isinstance(latest, dict) or not isinstance(end, dict):
            continue
        for topic, partitions in latest.items():
            if topic not in wanted or not isinstance(partitions, dict):
                continue
            done = end.get(topic) or {}
            for partition, offset in partitions.items():
                out[(topic, int(partition))] = max(0, int(offset) - int(done.get(partition, 0)))
    return out


def lag(progress: Mapping[str, Any], topics: Iterable[str]) -> int | None:
    """Records of `topics` available when the batch was planned and not in it; None when none was read."""
    by_partition = partition_lag(progress, topics)
    return sum(by_partition.values()) if by_partition else None
