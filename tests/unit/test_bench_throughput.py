"""The throughput bench's figures from its runs: ratios, the JIT's share, the long run's lines."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bench.common import machine_busy_seconds
from bench.run import _cpu_lines, _headers_lines
from bench.throughput import SENT_HEADERS, Measurement, RouterRun, warm_up_lines
from streaming.spark.batch import BatchMetrics
from streaming.spark.progress import BatchReport


def _run(seconds: float, batches: list[tuple[int, float]]) -> RouterRun:
    reports = tuple(
        BatchReport(i, BatchMetrics(records=n, outcomes={"send": n}), s, "routes@p0:10")
        for i, (n, s) in enumerate(batches)
    )
    return RouterRun(seconds, sum(n for n, _ in batches), 0, reports)


def _measurement(routes: int, messages: int, passthrough_s: float, router_s: float) -> Measurement:
    per_batch = messages // 3
    router = _run(router_s, [(per_batch, router_s / 4)] * 3 + [(messages - 3 * per_batch, 0.1)])
    return Measurement(routes, passthrough_s, messages, router, 0.5, router_s / 2)


def test_the_ratio_and_the_jit_share_come_from_the_run() -> None:
    m = _measurement(10, 300_000, 3.0, 10.0)
    assert m.passthrough_rate == pytest.approx(100_000)
    assert m.router_rate == pytest.approx(30_000)
    assert m.ratio == pytest.approx(0.3)
    # 5 s of compiling over a 10 s run on 2 cores: a quarter of the CPU the run had.
    assert m.router_compile_share(2) == pytest.approx(0.25)
    # The full batches only: three of 100,000 in 2.5 s each.
    assert m.router.full_batch_rate() == pytest.approx(40_000)


def test_the_warm_up_lines_give_each_run_its_compile_time_and_the_long_run_its_row() -> None:
    runs = [_measurement(10, 300_000, 3.0, 10.0), _measurement(100_000, 300_000, 3.2, 12.0)]
    sustained = replace(_measurement(10, 1_500_000, 14.0, 30.0), with_headers_s=20.0)
    text = "\n".join(warm_up_lines(runs, sustained, 2))
    assert "10 routes 5.0 s of 10.0 s (25%)" in text
    assert "100,000 routes 6.0 s of 12.0 s (25%)" in text
    assert "0.5 s of 3.0 s" in text and "0.5 s of 3.2 s" in text
    assert "both queries on 1,500,000 records, 10 routes" in text
    row = next(line for line in text.splitlines() if line.startswith("| 107,143 |"))
    assert row == "| 107,143 | 75,000 | 50,000 | 0.47 | 66,667 | 15.0 s of 30.0 s (25%) |"


def test_without_a_long_run_there_is_no_long_run_row() -> None:
    text = "\n".join(warm_up_lines([_measurement(10, 300_000, 3.0, 10.0)], None, 2))
    assert "long run" not in text
    assert "10 routes 5.0 s of 10.0 s (25%)" in text
    assert warm_up_lines([], None, 2) == []


def test_the_cpu_per_message_and_the_cores_a_ratio_would_take_come_from_the_run() -> None:
    m = replace(
        _measurement(1_000, 300_000, 3.0, 10.0),
        passthrough_cpu_s=2.9,
        router_cpu_s=17.0,
        passthrough_machine_s=4.5,
        router_machine_s=18.0,
    )
    # Less the JIT's time: 0.5 s and 5 s (`_measurement`).
    assert m.passthrough_cpu_us == pytest.approx(8.0)
    assert m.router_cpu_us == pytest.approx(40.0)
    assert m.router_cores == pytest.approx(1.7)
    assert (m.passthrough_machine_cores, m.router_machine_cores) == pytest.approx((1.5, 1.8))
    # 0.7 x 100,000 msg/s at 40 µs a message: 2.8 cores.
    assert m.cores_for(0.7) == pytest.approx(2.8)
    text = "\n".join(_cpu_lines([_measurement(10, 300_000, 3.0, 10.0), m]))
    assert "with 1,000 routes, the router would keep 2.8 cores busy at 0.7x" in text
    assert "(70,000 msg/s)" in text
    assert _cpu_lines([]) == []


def test_the_machine_is_busy_for_some_of_the_time_that_passes() -> None:
    before = machine_busy_seconds()
    sum(i * i for i in range(2_000_000))  # some CPU of this process's own
    busy = machine_busy_seconds() - before
    assert busy > 0


def test_the_headers_ceiling_and_the_routers_ratio_to_it_come_from_the_three_runs() -> None:
    # 300,000 messages: the pass-through in 2 s, with the router's headers in 3 s, the router in 6 s.
    m = replace(_measurement(1_000, 300_000, 2.0, 6.0), with_headers_s=3.0)
    assert m.with_headers_rate == pytest.approx(100_000)
    assert m.headers_ratio == pytest.approx(2 / 3)
    assert m.ratio_to_headers == pytest.approx(0.5)
    assert m.ratio == pytest.approx(m.headers_ratio * m.ratio_to_headers)
    other = replace(_measurement(10, 300_000, 2.0, 5.0), with_headers_s=2.5)
    text = "\n".join(_headers_lines([other, m]))
    assert "It ran at 0.80 (10 routes), 0.67 (1,000 routes) of the plain pass-through" in text
    assert f"the {len(SENT_HEADERS)} headers" in text and ", ".join(SENT_HEADERS) in text
    assert _headers_lines([]) == []


def test_a_measurement_without_the_headers_run_has_no_figure_for_it() -> None:
    m = _measurement(10, 300_000, 3.0, 10.0)
    assert math.isnan(m.with_headers_rate) and math.isnan(m.headers_ratio)
