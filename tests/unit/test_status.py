"""`router status` without Kafka: the summaries of what it reads (streaming/observe/status.py).

Records with their headers go in, as the router writes them (`streaming.spark.output`); the figures,
the screen and the JSON document come out. Reading them from a real broker is
tests/integration/test_status_command.py.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from streaming.cli import build_parser
from streaming.errors import ConfigError, RouterError
from streaming.instants import format_span, parse_instant, parse_span
from streaming.kafka.progress_group import Committed
from streaming.observe.status import (
    DELAY_MARGIN_S,
    CountedRecords,
    DelayedFigures,
    DroppedFigures,
    HeaderRecord,
    InstanceStatus,
    Progress,
    RouteFigures,
    TopicLag,
    Watermarks,
    choose_instances,
    delayed_window_start_ms,
    error_kind,
    format_age,
    missing_topics,
    ms_of,
    progress_of,
    render_text,
    route_instance,
    stamped_since,
    status_document,
    summarise_dead_letters,
    summarise_delayed,
    summarise_dropped,
    summarise_routes,
    topic_lag,
)
from streaming.rules.model import Database, Instance, Route
from streaming.tables.reader import SkippedRecord

NOW = datetime(2026, 11, 28, 10, 1, 5, tzinfo=timezone.utc)
I1 = Instance(
    "i1",
    "TCP://i1.example:4022",
    (
        Database("AW", "2b0c4f4e-6b1d-4a7e-9a35-1c7f0e6d5a01", services=("InitiatorService", "AuditService")),
        Database("msdb", "2b0c4f4e-6b1d-4a7e-9a35-1c7f0e6d5a02"),
    ),
)


def iso(instant: datetime) -> str:
    """An instant as the router's headers write it (`streaming.spark.sources.TIME_FORMAT`)."""
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record(offset: int, key: bytes | None = None, **headers: str) -> HeaderRecord:
    return HeaderRecord(0, offset, None, key, headers)


def delayed(offset: int, conversation: str, decided: datetime, due: datetime) -> HeaderRecord:
    return record(
        offset,
        conversation.encode(),
        outcome="delayed",
        reason="no_route",
        decided_at=iso(decided),
        due_at=iso(due),
    )


# --- spans and instants ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("45", 45), (" 1.5h ", 5400)],
)
def test_a_span_reads_in_seconds_minutes_hours_or_days(text: str, seconds: float) -> None:
    assert parse_span(text) == seconds


@pytest.mark.parametrize("text", ["", "0m", "-5m", "1w", "m", "1h30m", "soon"])
def test_a_span_that_is_not_one_says_what_was_expected(text: str) -> None:
    with pytest.raises(ConfigError, match=r"expected a span like 90s, 30m, 2h or 1d .*got"):
        parse_span(text)


def test_since_is_parsed_by_the_command_line_and_a_bad_one_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    assert parser.parse_args(["status"]).since == 3600
    assert parser.parse_args(["status", "--since", "30m"]).since == 1800
    assert parser.parse_args(["status", "--instance", "i1", "--instance", "f1"]).instance == ["i1", "f1"]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["status", "--since", "a while"])
    assert exit_.value.code == 2
    assert "--since: expected a span like 90s" in capsys.readouterr().err


def test_the_help_names_every_flag_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["status", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag, default in [
        ("--instance I", "default: every instance the catalogs topic holds"),
        ("--since SPAN", "default: 1h"),
        ("--json", "one JSON document"),
        ("--bootstrap HOST:PORT", "default"),
        ("--config FILE", "default: $ROUTER_CONFIG"),
        ("--topic-prefix P", "default: router"),
    ]:
        assert flag in text
        assert default in " ".join(text.split())


def test_spans_and_ages_are_written_in_their_largest_unit() -> None:
    assert [format_span(s) for s in (3600, 1800, 90, 86400, 5400, 7.5)] == [
        "1h",
        "30m",
        "90s",
        "1d",
        "90m",
        "7.5s",
    ]
    assert [format_age(s) for s in (-1, 3, 119, 120, 7199, 7260, 200000)] == [
        "0 s",
        "3 s",
        "119 s",
        "2 min",
        "119 min",
        "2 h 1 min",
        "2 d 7 h",
    ]


def test_header_instants_read_as_utc_and_anything_else_as_none() -> None:
    assert parse_instant("2026-11-28T10:01:05.123456Z") == datetime(
        2026, 11, 28, 10, 1, 5, 123456, timezone.utc
    )
    assert parse_instant("2026-11-28T11:01:05+01:00") == datetime(2026, 11, 28, 10, 1, 5, tzinfo=timezone.utc)
    assert parse_instant("2026-11-28T10:01:05") == datetime(2026, 11, 28, 10, 1, 5, tzinfo=timezone.utc)
    assert [parse_instant(t) for t in (None, "", "tomorrow")] == [None, None, None]


# --- progress and lag --------------------------------------------------------------------------------


def test_the_group_says_whether_the_router_ran_and_its_last_batch() -> None:
    at = ms_of(NOW)
    ran = progress_of(Committed("p.i1.router", {("p.i1.outbound", 0): 4}, batch=412, at_ms=at))
    assert ran == Progress("p.i1.router", True, 412, NOW)
    assert progress_of(Committed("p.i1.router", {})) == Progress("p.i1.router", False, None, None)


def test_lag_is_the_end_offset_less_the_committed_one_per_partition() -> None:
    committed = {("t.out", 0): 90, ("t.out", 1): 40, ("other", 2): 1}
    marks = {0: Watermarks(0, 100), 1: Watermarks(0, 40), 2: Watermarks(10, 25)}
    lag = topic_lag("t.out", marks, committed)
    assert lag.exists
    assert [(p.partition, p.end, p.committed, p.lag) for p in lag.partitions] == [
        (0, 100, 90, 10),
        (1, 40, 40, 0),
        # No offset in the group for this partition: everything still kept counts.
        (2, 25, None, 15),
    ]
    assert lag.total == 25


def test_a_committed_offset_retention_has_passed_counts_from_the_first_kept_record() -> None:
    lag = topic_lag("t.out", {0: Watermarks(500, 600)}, {("t.out", 0): 120})
    assert lag.total == 100


def test_a_topic_that_does_not_exist_has_no_lag_figures() -> None:
    lag = topic_lag("t.out", None, {})
    assert not lag.exists and lag.partitions == () and lag.total == 0


# --- delayed messages (D1, D2) -----------------------------------------------------------------------


def test_the_delayed_window_starts_retry_s_and_a_margin_before_the_last_batch() -> None:
    ran = Progress("g", True, 7, NOW)
    assert delayed_window_start_ms(ran, 5.0, 0.0) == ms_of(NOW) - 5_000
    assert delayed_window_start_ms(ran, 5.0) == ms_of(NOW) - int((5.0 + DELAY_MARGIN_S) * 1000)
    # Never ran, or no batch time: the whole topic.
    assert delayed_window_start_ms(Progress("g", False), 5.0) is None
    assert delayed_window_start_ms(Progress("g", True, None, None), 5.0) is None


def test_a_delayed_message_due_after_the_last_batch_is_not_released_yet() -> None:
    batch = NOW - timedelta(seconds=1)
    records = [
        # Due before the last batch: routed again by it (or delayed again, a record of its own).
        delayed(0, "c1", NOW - timedelta(seconds=9), NOW - timedelta(seconds=4)),
        delayed(1, "c2", NOW - timedelta(seconds=6), batch),
        # Due after it: still waiting. Two of c3's, one of c4's.
        delayed(2, "c3", NOW - timedelta(seconds=3), NOW + timedelta(seconds=2)),
        delayed(3, "c3", NOW - timedelta(seconds=2), NOW + timedelta(seconds=2)),
        delayed(4, "c4", NOW - timedelta(seconds=1), NOW + timedelta(seconds=4)),
        record(5, b"c5", outcome="delayed"),  # no due_at: not the router's
    ]
    figures = summarise_delayed(records, batch, NOW - timedelta(seconds=65))
    assert figures == DelayedFigures(
        pending=3,
        conversations=2,
        oldest_due_at=NOW + timedelta(seconds=2),
        oldest_decided_at=NOW - timedelta(seconds=3),
        records_read=6,
        window_from=NOW - timedelta(seconds=65),
        unreadable=1,
    )


def test_when_the_router_never_ran_every_delayed_message_waits() -> None:
    records = [delayed(n, f"c{n % 3}", NOW - timedelta(hours=2), NOW - timedelta(hours=1)) for n in range(7)]
    figures = summarise_delayed(records, None, None)
    assert (figures.pending, figures.conversations, figures.window_from) == (7, 3, None)


def test_a_window_keeps_the_records_stamped_at_or_after_its_start() -> None:
    records = [HeaderRecord(0, n, stamp, None, {}) for n, stamp in enumerate((100, 250, 99, None, 300))]
    # The read starts at the first offset stamped 100 or later; a later one stamped earlier is left out.
    assert [r.offset for r in stamped_since(records, 100)] == [0, 1, 3, 4]
    assert [r.offset for r in stamped_since(records, None)] == [0, 1, 2, 3, 4]


# --- dead letters and dropped messages ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        # The errors `streaming.spark.sources.decode` gives a record it dead-letters.
        (
            "value does not decode as Avro router.v1.Message",
            "value does not decode as Avro router.v1.Message",
        ),
        (
            "value holds 12 bytes after its Avro router.v1.Message (a record must be exactly one message)",
            "value holds N bytes after its Avro router.v1.Message",
        ),
        ("to_broker_instance is not a GUID: nope", "to_broker_instance is not a GUID"),
        (
            "origin_database is not a database of this instance: Sales",
            "origin_database is not a database of this instance",
        ),
        ("empty record (no value)", "empty record"),
        (None, "no error header"),
        ("x" * 80, "x" * 57 + "..."),
    ],
)
def test_a_dead_letters_error_is_grouped_by_its_short_form(error: str | None, kind: str) -> None:
    assert error_kind(error) == kind


def test_dead_letters_are_counted_by_error_most_first() -> None:
    records = [
        record(0, error="to_broker_instance is not a GUID: a"),
        record(1, error="value does not decode as Avro router.v1.Message"),
        record(2, error="to_broker_instance is not a GUID: b"),
        record(3),
    ]
    assert summarise_dead_letters(records) == CountedRecords(
        4,
        (
            ("to_broker_instance is not a GUID", 2),
            ("no error header", 1),
            ("value does not decode as Avro router.v1.Message", 1),
        ),
    )
    assert summarise_dead_letters([]) == CountedRecords(0, ())


def test_dropped_messages_are_counted_by_reason_and_outcome_with_the_refused_destinations() -> None:
    records = [
        record(0, outcome="discarded", reason="hops_exhausted"),  # F3
        record(1, outcome="discarded", reason="hops_exhausted"),
        record(2, outcome="dropped", reason="destination_unavailable", destination="p.-net.bad"),
        record(3, outcome="dropped", reason="destination_unavailable", destination="p.-net.bad"),
        record(4, outcome="dropped", reason="destination_unavailable", destination="p.-net.worse"),
        record(5, outcome="discarded", reason="lifetime_expired"),
    ]
    assert summarise_dropped(records) == DroppedFigures(
        6,
        by_reason=(("destination_unavailable", 3), ("hops_exhausted", 2), ("lifetime_expired", 1)),
        by_outcome=(("discarded", 3), ("dropped", 3)),
        unavailable=(("p.-net.bad", 2), ("p.-net.worse", 1)),
    )


# --- tables and topics -------------------------------------------------------------------------------


def test_routes_are_counted_by_scope_databases_first_then_msdb_and_the_expired_apart() -> None:
    routes = [
        Route("msdb", "AutoCreatedLocal", "LOCAL"),
        Route("AW", "AutoCreatedLocal", "LOCAL"),
        Route(
            "AW", "Old", "TCP://old.example:4022", service="S", expires_at=NOW - timedelta(seconds=1)
        ),  # R6
        Route(
            "AW", "ToParts", "TCP://f1.example:4022", service="OrderParts", expires_at=NOW + timedelta(days=1)
        ),
        Route("Archive", "A", "LOCAL"),
    ]
    figures = summarise_routes(routes, NOW, NOW - timedelta(minutes=3), skipped=1)
    assert figures == RouteFigures(
        5, (("AW", 3), ("Archive", 1), ("msdb", 1)), 1, NOW - timedelta(minutes=3), 1
    )
    assert summarise_routes([], NOW, None) == RouteFigures(0, (), 0, None, 0)


def test_the_missing_topics_are_those_reachable_that_the_cluster_does_not_hold() -> None:
    assert missing_topics(["b", "a", "c", "a"], {"c", "x"}) == ("a", "b")
    assert missing_topics(["a"], {"a"}) == ()


def test_a_skipped_route_record_belongs_to_the_instance_its_key_names() -> None:
    assert route_instance(SkippedRecord(0, 3, "i1/AW/Bad", "bad")) == "i1"
    assert route_instance(SkippedRecord(0, 4, "AW/Old", "old key form")) is None
    assert route_instance(SkippedRecord(0, 5, b"\xff", "not UTF-8")) is None
    assert route_instance(SkippedRecord(0, 6, None, "no key")) is None


def test_the_instances_are_the_ones_asked_for_once_each_or_every_one_of_the_catalogs() -> None:
    held = ["i2", "i1", "f1"]
    assert choose_instances(held, None, "p.catalogs") == ["f1", "i1", "i2"]
    assert choose_instances(held, [], "p.catalogs") == ["f1", "i1", "i2"]
    assert choose_instances(held, ["i2", "i1", "i2"], "p.catalogs") == ["i2", "i1"]


def test_an_instance_the_catalogs_do_not_hold_is_an_error_naming_those_they_hold() -> None:
    with pytest.raises(RouterError) as error:
        choose_instances(["i2", "i1"], ["i1", "i9"], "p.catalogs")
    message = str(error.value)
    assert "expected an instance of the catalogs topic p.catalogs (i1, i2), got 'i9'" in message
    assert "router catalogs load FILE" in message
    with pytest.raises(RouterError, match=r"\(none\), got 'i1'"):
        choose_instances([], ["i1"], "p.catalogs")


# --- the screen and the document ---------------------------------------------------------------------


def lag(topic: str, end: int, committed: int | None) -> TopicLag:
    return topic_lag(topic, {0: Watermarks(0, end)}, {} if committed is None else {(topic, 0): committed})


STATUS = InstanceStatus(
    catalog=I1,
    progress=Progress("p.i1.router", True, 412, NOW - timedelta(seconds=3)),
    outbound=lag("p.i1.outbound", 300, 300),
    inbound=lag("p.i1.inbound", 40, 28),
    delayed_lag=lag("p.i1.delayed", 60, 60),
    delayed=DelayedFigures(
        30, 30, NOW + timedelta(seconds=1), NOW - timedelta(seconds=4), 60, NOW - timedelta(seconds=68)
    ),
    dead_letters=CountedRecords(2, (("value does not decode as Avro router.v1.Message", 2),)),
    dropped=DroppedFigures(
        5,
        (("hops_exhausted", 4), ("destination_unavailable", 1)),
        (("discarded", 4), ("dropped", 1)),
        (("p.-net.bad", 1),),
    ),
    routes=RouteFigures(
        4, (("AW", 3), ("msdb", 1)), 1, datetime(2026, 11, 28, 9, 58, 10, tzinfo=timezone.utc)
    ),
    missing_topics=("p.-net.tcp-3a-2f-2fnew-3a4022",),
    warnings=("1 record(s) of i1's routes on p.routes skipped (`router routes list` shows why)",),
)


def test_the_screen_shows_each_figure_on_its_own_aligned_line() -> None:
    text = render_text([STATUS], NOW, 3600)
    assert text.splitlines() == [
        "instance i1     router: batch 412 at 2026-11-28T10:01:02Z (3 s ago)   routes 4 (AW 3, msdb 1), "
        "1 expired, changed 2026-11-28T09:58:10Z",
        "  input lag     outbound 0   inbound 12   delayed 0",
        "  delayed       30 messages in 30 conversations not yet released, oldest due 2026-11-28T10:01:06Z "
        "(delayed since 2026-11-28T10:01:01Z)",
        "  last 1h       dead letters 2 (value does not decode as Avro router.v1.Message 2)   "
        "dropped 5 (hops_exhausted 4, destination_unavailable 1)",
        "  no topic yet  p.-net.tcp-3a-2f-2fnew-3a4022, p.-net.bad (1 dropped as destination_unavailable)",
        "  catalog       TCP://i1.example:4022, retry 5 s; AW: InitiatorService, AuditService; msdb: -",
        "  warning       1 record(s) of i1's routes on p.routes skipped (`router routes list` shows why)",
    ]


def test_a_router_that_never_ran_is_said_so_with_its_group() -> None:
    never = InstanceStatus(
        catalog=I1,
        progress=Progress("p.i1.router", False),
        outbound=lag("p.i1.outbound", 7, None),
        inbound=topic_lag("p.i1.inbound", None, {}),
        delayed_lag=lag("p.i1.delayed", 0, None),
        delayed=DelayedFigures(0, 0, None, None, 0, None),
        dead_letters=CountedRecords(0),
        dropped=DroppedFigures(0),
        routes=RouteFigures(0, (), 0, None),
        missing_topics=(),
    )
    lines = render_text([never, STATUS], NOW, 1800, ["2 record(s) of p.catalogs skipped"]).splitlines()
    assert (
        lines[0]
        == "instance i1     the router has not run (no committed offsets in group p.i1.router)   routes 0"
    )
    assert lines[1:5] == [
        "  input lag     outbound 7   inbound (no topic)   delayed 0",
        "  delayed       none waiting",
        "  last 30m      dead letters 0   dropped 0",
        "  no topic yet  -",
    ]
    assert lines[-1] == "warning: 2 record(s) of p.catalogs skipped"
    assert lines.count("") == 2  # one blank line between the instances, one before the warnings


def test_the_json_document_holds_the_same_facts_under_stable_names() -> None:
    document = status_document([STATUS], NOW, 3600, "p", ["w"])
    assert json.loads(json.dumps(document)) == document
    assert set(document) == {"generated_at", "topic_prefix", "since_s", "instances", "warnings"}
    assert document["generated_at"] == "2026-11-28T10:01:05Z"
    (one,) = document["instances"]
    assert one["instance"] == "i1"
    assert one["router"] == {
        "group": "p.i1.router",
        "ran": True,
        "batch": 412,
        "batch_at": "2026-11-28T10:01:02Z",
        "batch_age_s": 3.0,
    }
    assert one["lag"]["inbound"] == {
        "topic": "p.i1.inbound",
        "exists": True,
        "lag": 12,
        "partitions": [{"partition": 0, "end": 40, "committed": 28, "lag": 12}],
    }
    assert one["delayed"] == {
        "pending": 30,
        "conversations": 30,
        "oldest_due_at": "2026-11-28T10:01:06Z",
        "oldest_decided_at": "2026-11-28T10:01:01Z",
        "records_read": 60,
        "read_from": "2026-11-28T09:59:57Z",
        "unreadable": 0,
    }
    assert one["dead_letters"] == {
        "count": 2,
        "by_error": {"value does not decode as Avro router.v1.Message": 2},
    }
    assert one["dropped"] == {
        "count": 5,
        "by_reason": {"hops_exhausted": 4, "destination_unavailable": 1},
        "by_outcome": {"discarded": 4, "dropped": 1},
        "unavailable_destinations": {"p.-net.bad": 1},
    }
    assert one["routes"] == {
        "count": 4,
        "by_scope": {"AW": 3, "msdb": 1},
        "expired": 1,
        "changed_at": "2026-11-28T09:58:10Z",
        "skipped": 0,
    }
    assert one["catalog"]["databases"] == [
        {"name": "AW", "services": ["InitiatorService", "AuditService"]},
        {"name": "msdb", "services": []},
    ]
    assert one["missing_topics"] == ["p.-net.tcp-3a-2f-2fnew-3a4022"]
    assert one["warnings"] == list(STATUS.warnings)
