"""The tick's pace (`streaming.spark.tick`): a second while delayed messages may be held (D2)."""

from __future__ import annotations

from streaming.spark.tick import ACTIVE_PACE_S, IDLE_PACE_S, TickPace, idle_pace_s, source_pace_ms


def paced(retry_s: float = 5.0, trigger_s: float = 1.0, idle_s: float = 10.0) -> tuple[TickPace, list[float]]:
    given: list[float] = []
    return TickPace(retry_s, trigger_s, idle_s, given.append), given


def test_a_start_ticks_every_second_until_what_the_checkpoint_holds_may_have_fallen_due() -> None:
    pace, given = paced(retry_s=5.0, trigger_s=1.0)
    pace.started(100.0)
    assert given == [ACTIVE_PACE_S]
    until = 100.0 + 5.0 + pace.margin_s
    pace.after_batch(until - 0.1, busy=False, pending=False)
    assert given == [ACTIVE_PACE_S]  # unchanged: not given again
    pace.after_batch(until, busy=False, pending=False)
    assert given == [ACTIVE_PACE_S, 10.0]
    pace.started(200.0)  # a new query: its tick's pace is given again
    assert given == [ACTIVE_PACE_S, 10.0, ACTIVE_PACE_S]
    pace.started(300.0)
    assert given == [ACTIVE_PACE_S, 10.0, ACTIVE_PACE_S, ACTIVE_PACE_S]


def test_a_busy_batch_keeps_the_second_for_a_retry_and_its_margin_from_that_batch() -> None:
    pace, given = paced(retry_s=2.0, trigger_s=0.5)
    pace.started(0.0)
    pace.after_batch(50.0, busy=False, pending=False)
    assert given[-1] == 10.0
    # A message arrives: it may be delayed, read back and held; its retry falls due within 2 s.
    pace.after_batch(60.0, busy=True, pending=False)
    assert given[-1] == ACTIVE_PACE_S
    pace.after_batch(60.0 + 2.0 + pace.margin_s - 0.01, busy=False, pending=False)
    assert given[-1] == ACTIVE_PACE_S
    pace.after_batch(60.0 + 2.0 + pace.margin_s, busy=False, pending=False)
    assert given == [ACTIVE_PACE_S, 10.0, ACTIVE_PACE_S, 10.0]


def test_a_pending_missing_route_request_keeps_the_second() -> None:
    pace, given = paced(retry_s=1.0)
    pace.started(0.0)
    pace.after_batch(1_000.0, busy=False, pending=True)  # B4: its answer may come any time
    assert given == [ACTIVE_PACE_S]
    pace.after_batch(1_001.0, busy=False, pending=False)
    assert given == [ACTIVE_PACE_S, 10.0]


def test_the_idle_pace_keeps_healthz_fresh_and_is_never_shorter_than_a_trigger() -> None:
    assert idle_pace_s(trigger_s=1.0, health_bound_s=30.0) == IDLE_PACE_S
    assert idle_pace_s(trigger_s=0.5, health_bound_s=6.0) == 2.0  # a third of the bound
    assert idle_pace_s(trigger_s=0.5, health_bound_s=1.5) == ACTIVE_PACE_S
    assert idle_pace_s(trigger_s=20.0, health_bound_s=200.0) == 20.0


def test_the_source_is_asked_for_half_an_interval_less_so_its_tick_lands_at_the_pace() -> None:
    # Looked at every 0.5 s: a tick 0.75 s after the last batch's round comes at the round 1 s after it.
    assert source_pace_ms(1.0, 0.5) == 750
    assert source_pace_ms(10.0, 0.5) == 9_750
    assert source_pace_ms(1.0, 1.0) == 500
    assert source_pace_ms(1.0, 4.0) == 1  # never zero: the source refuses a pace that is not positive
