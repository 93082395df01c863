"""The lines a running router prints for its micro-batches (`streaming.spark.progress`)."""

from __future__ import annotations

from streaming.spark.batch import BatchMetrics
from streaming.spark.progress import BatchReport, ProgressLines


def report(batch_id: int, at: float, records: int = 0, snapshot: str = "routes@p0:4") -> BatchReport:
    metrics = BatchMetrics(records=records, outcomes={"send": records})
    return BatchReport(batch_id, metrics, 0.2, snapshot, lag=0, started=at)


def shown(lines: ProgressLines, reports: list[BatchReport]) -> list[str]:
    out: list[str] = []
    for r in reports:
        lines.to(out.append)(r)
    return out


def test_every_batch_that_routed_something_has_its_line() -> None:
    reports = [report(n, float(n), records=10) for n in range(5)]
    assert shown(ProgressLines(), reports) == [r.line() for r in reports]


def test_idle_batches_after_traffic_show_nothing_until_a_minute_has_passed() -> None:
    """A replay's last, empty batch has no line; an idle router says it runs once a minute."""
    lines = ProgressLines(every_s=60)
    busy = report(0, 0.0, records=100)
    idle = [report(n, float(n)) for n in range(1, 61)]  # one a second, as the tick runs them
    out = shown(lines, [busy, *idle])
    assert out == [
        busy.line(),
        "batch 60: nothing to route in 60 batch(es) over 60s | snapshot routes@p0:4 | lag 0",
    ]
    later = [report(n, float(n)) for n in range(61, 121)]
    assert shown(lines, later) == [
        "batch 120: nothing to route in 60 batch(es) over 60s | snapshot routes@p0:4 | lag 0"
    ]


def test_the_first_batch_and_a_new_route_snapshot_are_shown_even_when_idle() -> None:
    """At the start a person sees the router run; a route change shows when the router takes it in."""
    first = report(0, 0.0)
    same = report(1, 1.0)
    changed = report(2, 2.0, snapshot="routes@p0:5")
    out = shown(ProgressLines(), [first, same, changed, report(3, 3.0, snapshot="routes@p0:5")])
    assert out == [first.line(), changed.line()]
    assert "nothing routed" in first.line() and "snapshot routes@p0:5" in changed.line()


def test_traffic_after_idle_batches_is_shown_at_once() -> None:
    lines = ProgressLines(every_s=60)
    out = shown(lines, [report(0, 0.0, records=5), report(1, 1.0), report(2, 2.0), report(3, 3.0, records=7)])
    assert [line.split(":")[0] for line in out] == ["batch 0", "batch 3"]
