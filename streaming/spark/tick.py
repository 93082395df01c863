"""The pace of the query's tick: a second while delayed messages may be held, slower once none can.

The tick (`router.spark.TickSource`) is what makes a micro-batch run when no record arrives, so
that delayed messages fall due on time (D2). Each such batch costs Spark its fixed work (planning
the micro-batch, its tasks, the state store's commit): measured on 2 cores, an idle `router run`
used 42-44 s of JVM CPU a minute with a tick every second, and 2.5 s with no tick at all.

A router can hold a delayed message only after a batch that read records or decided messages: a
message is delayed in a batch that decides it, then read back from the delayed topic (a batch with
records) and held; each retry decides it again. So once `retry_s` and a margin have passed since
the last such batch, and no MissingRoute request is pending (B4), nothing it holds can fall due,
and the tick slows to `idle_s`: often enough that the state's expired choices are removed, the
metrics and `/healthz` stay fresh (a third of `health_stale_s` at most), and the idle line is
printed. A start counts as such a batch, for the state the checkpoint holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

ACTIVE_PACE_S = 1.0
"""The tick's pace while delayed messages may be held: the one-second pace it always had."""

IDLE_PACE_S = 10.0
"""The pace of an idle router's tick, unless `health_stale_s` asks for a shorter one."""


def source_pace_ms(pace_s: float, interval_s: float) -> int:
    """The wait to give a source, for a batch of its own every `pace_s` in a query looking every `interval_s`.

    A source counts its wait from the round of its last batch (the tick's from the last batch that
    ran, `TickSource.ran`; the messages source's `maxTriggerDelay`, `sources.busy_options`), and
    the query asks only once an interval: asked for a full pace, its batch would come at the round
    after it, an interval late. Half an interval less lands the batch at the pace.
    """
    return max(1, round((pace_s - interval_s / 2) * 1000))


def idle_pace_s(trigger_s: float, health_bound_s: float) -> float:
    """An idle router's pace: `IDLE_PACE_S`, at most a third of the health bound, at least a trigger."""
    return max(ACTIVE_PACE_S, trigger_s, min(IDLE_PACE_S, health_bound_s / 3))


@dataclass
class TickPace:
    """Which pace the tick keeps (see the module docstring); `set_pace` gives it to the source."""

    retry_s: float
    trigger_s: float
    idle_s: float
    set_pace: Callable[[float], None]
    active_until: float = float("-inf")
    pace_s: float | None = None

    @property
    def margin_s(self) -> float:
        """How long after `retry_s` a retry's own batches may come: a trigger's wait and a batch, twice."""
        return 2.0 * (self.trigger_s + ACTIVE_PACE_S)

    def started(self, now: float) -> None:
        """The query started with a new tick: what the checkpoint holds may fall due within `retry_s`.

        The pace is given again, whatever was given to the query before.
        """
        self.active_until = now + self.retry_s + self.margin_s
        self.pace_s = None
        self._keep(ACTIVE_PACE_S)

    def after_batch(self, now: float, busy: bool, pending: bool) -> None:
        """After a micro-batch: `busy` when it read records or decided messages; `pending` requests (B4)."""
        if busy:
            self.active_until = now + self.retry_s + self.margin_s
        active = busy or pending or now < self.active_until
        self._keep(ACTIVE_PACE_S if active else self.idle_s)

    def _keep(self, pace_s: float) -> None:
        if pace_s != self.pace_s:
            self.set_pace(pace_s)
            self.pace_s = pace_s
