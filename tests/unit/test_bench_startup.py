"""The start's figures as `make bench` records them (`bench.startup`, `bench.run`)."""

from __future__ import annotations

import math

from bench.run import _startup_lines
from bench.startup import StartupResult


def test_the_start_figures_are_medians_and_a_resumed_start_is_recorded_when_measured() -> None:
    fresh = StartupResult((8.0, 9.5, 7.9), (11.4, 12.0, 11.0))
    assert (fresh.median_s, fresh.plain_median_s) == (8.0, 11.4)
    assert math.isnan(fresh.resumed_median_s)
    text = "\n".join(_startup_lines(fresh))
    assert "routed 8.0 s after the process started (median; runs 8.0, 9.5, 7.9 s)" in text
    assert "median 11.4 s" in text
    assert "checkpoint" not in text

    resumed = StartupResult((8.0, 9.5, 7.9), (11.4, 12.0, 11.0), (10.2, 9.1, 9.6))
    assert resumed.resumed_median_s == 9.6
    lines = _startup_lines(resumed)
    assert lines[0] == "## Start" and lines[-1] == ""
    text = "\n".join(lines)
    assert "Started again on the checkpoint the run before left" in text
    assert "routed 9.6 s after the process started (median; runs 10.2, 9.1, 9.6 s)" in text
    assert _startup_lines(None) == []


def test_sparks_own_start_is_recorded_beside_the_routers_with_what_the_router_adds() -> None:
    both = StartupResult((12.0, 13.5, 12.4), (15.0, 16.0, 15.5), (), (7.9, 8.4, 8.0))
    assert both.spark_median_s == 8.0
    assert math.isclose(both.added_s, 4.4)
    text = "\n".join(_startup_lines(both))
    assert "copied its waiting message 8.0 s after its process started (median; runs 7.9, 8.4, 8.0 s" in text
    assert "The router's start is 4.4 s longer (1.55x Spark's own)" in text

    alone = StartupResult((12.0,), (15.0,))
    assert math.isnan(alone.spark_median_s) and math.isnan(alone.added_s)
    assert "Spark's own" not in "\n".join(_startup_lines(alone))
