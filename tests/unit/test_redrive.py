"""What `router redrive` makes of one record (streaming/redrive.py `judge`), without Kafka."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from streaming import topics
from streaming.errors import ConfigError
from streaming.kafka.avro import encode_message, new_message_record
from streaming.redrive import REDRIVE_COUNT, REDRIVEN_FROM, RedriveRequest, judge, redriven_headers

AT = datetime(2026, 1, 1, tzinfo=timezone.utc)
OUTBOUND = topics.outbound_topic("i1", "p")
INBOUND = topics.inbound_topic("i1", "p")


def value(message_id: str = "m1", service: str = "Far") -> bytes:
    return encode_message(
        new_message_record(
            message_id=message_id, conversation_id="c1", to_service=service, from_service="S", enqueued_at=AT
        )
    )


def dropped(
    source: str | None = OUTBOUND, reason: str = "no_route", **more: str
) -> list[tuple[str, bytes | None]]:
    pairs = {"outcome": "dropped", "reason": reason, **more}
    if source is not None:
        pairs["source_topic"] = source
    return [(k, v.encode()) for k, v in pairs.items()]


def request(**given: object) -> RedriveRequest:
    return RedriveRequest(instance="i1", source="dropped", prefix="p", **given)  # type: ignore[arg-type]


def test_a_dropped_message_goes_back_to_the_input_it_was_read_from() -> None:
    assert judge(request(), value(), dropped(OUTBOUND), 0, {}).target == OUTBOUND
    assert judge(request(), value(), dropped(INBOUND), 0, {}).target == INBOUND
    # Released from the delay, then dropped: the job decodes the delayed topic as outbound records.
    released = judge(request(), value(), dropped(topics.delayed_topic("i1", "p")), 0, {})
    assert released.target == OUTBOUND


def test_a_record_with_no_input_of_the_instance_is_skipped_and_says_why() -> None:
    old = judge(request(), value(), dropped(None), 0, {})
    assert (old.target, old.skip) == (None, "no_input") and "no source_topic header" in old.why
    other = judge(request(), value(), dropped(topics.outbound_topic("i2", "p")), 0, {})
    assert other.skip == "no_input" and "not an input of instance 'i1'" in other.why


def test_filters_by_reason_service_and_time() -> None:
    assert judge(request(reason="hops_exhausted"), value(), dropped(), 0, {}).skip == "filtered"
    assert judge(request(reason="no_route"), value(), dropped(), 0, {}).target == OUTBOUND
    assert judge(request(service="Near"), value(service="Far"), dropped(), 0, {}).skip == "filtered"
    assert judge(request(service="Far"), value(service="Far"), dropped(), 0, {}).target == OUTBOUND
    assert judge(request(since_ms=1000), value(), dropped(), 999, {}).skip == "filtered"
    assert judge(request(since_ms=1000), value(), dropped(), 1000, {}).target == OUTBOUND


def test_a_message_sent_back_max_redrives_times_is_skipped() -> None:
    assert judge(request(max_redrives=2), value("m1"), dropped(), 0, {"m1": 1}).target == OUTBOUND
    again = judge(request(max_redrives=2), value("m1"), dropped(), 0, {"m1": 2})
    assert (again.skip, again.count) == ("too_often", 2)
    # A count the record's own header carries counts too.
    headed = judge(request(max_redrives=2), value("m1"), dropped(**{REDRIVE_COUNT: "2"}), 0, {})
    assert headed.skip == "too_often"


def test_bytes_that_do_not_decode_are_known_by_their_hash() -> None:
    dead = RedriveRequest(instance="i1", source="deadletter", prefix="p")
    headers = [("error", b"value does not decode"), ("source_topic", INBOUND.encode())]
    verdict = judge(dead, b"\x00garbage", headers, 0, {})
    assert verdict.message_id.startswith("sha256:") and verdict.target == INBOUND
    assert verdict.reason == "value does not decode"


def test_headers_are_kept_and_the_redrive_ones_replaced() -> None:
    before = [("outcome", b"dropped"), (REDRIVE_COUNT, b"1"), (REDRIVEN_FROM, b"x[0]@1"), ("reason", b"r")]
    after = redriven_headers(before, 2, "t[1]@7")
    assert after == [
        ("outcome", b"dropped"),
        ("reason", b"r"),
        (REDRIVE_COUNT, b"2"),
        (REDRIVEN_FROM, b"t[1]@7"),
    ]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"source": "delayed"}, "delayed messages are not redriven"),
        ({"source": "dropped", "reason": "no_rout"}, "--reason: expected one of no_route"),
        ({"source": "deadletter", "reason": "no_route"}, "dead letters have no reason"),
        ({"source": "dropped", "most": 0}, "--max: expected 1 or more, got 0"),
        ({"source": "dropped", "rate": 0.0}, "--rate: expected records per second above 0"),
        ({"source": "dropped", "since_ms": 5, "until_ms": 5}, "--since must be before --until"),
    ],
)
def test_bad_requests_are_refused_with_the_fix(given: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        RedriveRequest(instance="i1", prefix="p", **given)  # type: ignore[arg-type]
    assert said in str(raised.value)
