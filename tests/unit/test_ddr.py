"""Data-dependent routing: the routing service's file, and what it does with each message (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.ddr.answers import (
    CLASSIFY_FAILED,
    FORWARDED_ERROR,
    Act,
    Classification,
    Mapping,
    Mode,
    answer,
    outbound_id,
    parse_redirect,
    redirect_body,
)
from streaming.ddr.config import load_routing_service, parse_routing_service
from streaming.endpoint.protocol import END_DIALOG, ERROR
from streaming.errors import ConfigError, MalformedRecord

ROOT = Path(__file__).resolve().parents[2]
MAPPED = Mapping("in-1", "out-1", "SalesEast")


def acts(*args: object, **kwargs: object) -> list[Act]:
    return [s.act for s in answer("SalesRouter", *args, **kwargs).steps]  # type: ignore[arg-type]


def test_the_sample_file_parses() -> None:
    config = load_routing_service(ROOT / "routes" / "ddr" / "sales.yaml")
    assert (config.service, config.database, config.mode) == ("SalesRouter", "Sales", Mode.FORWARD)
    assert "xpath_string" in config.classifier


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("services: []", "one top-level mapping"),
        ("routing_service: {service: S, database: D, mode: forward}", r"yaml:1: .*classifier.*required"),
        (
            "routing_service:\n  service: S\n  database: D\n  mode: sideways\n  classifier: x",
            r"sales.yaml:4: .*forward or redirect",
        ),
        ("routing_service: {service: S, database: D, mode: forward, classifier: x, colour: red}", "colour"),
        (
            "routing_service: {service: S, database: D, mode: forward, classifier: x, lifetime_s: -1}",
            "lifetime_s",
        ),
        ("routing_service: {service: '', database: D, mode: forward, classifier: x}", "service"),
    ],
)
def test_a_bad_file_is_refused_naming_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_routing_service(text, "sales.yaml")


def test_a_first_message_is_classified_then_forwarded_on_a_new_dialog() -> None:
    got = acts(
        inbound=True,
        message_type="DEFAULT",
        error=None,
        mapping=None,
        mode=Mode.FORWARD,
        target=Classification("SalesEast"),
    )
    assert got == [Act.BEGIN, Act.SEND_OUT]


def test_later_messages_follow_the_mapping_and_replies_come_back() -> None:
    assert acts(inbound=True, message_type="DEFAULT", error=None, mapping=MAPPED, mode=Mode.FORWARD) == [
        Act.SEND_OUT
    ]
    assert acts(inbound=False, message_type="Reply", error=None, mapping=MAPPED, mode=Mode.FORWARD) == [
        Act.SEND_IN
    ]


def test_end_dialog_on_either_side_ends_the_other_and_the_mapping() -> None:
    ends_in = acts(inbound=True, message_type=END_DIALOG, error=None, mapping=MAPPED, mode=Mode.FORWARD)
    assert ends_in == [Act.END_OUT, Act.END_IN, Act.FORGET]
    ends_out = acts(inbound=False, message_type=END_DIALOG, error=None, mapping=MAPPED, mode=Mode.FORWARD)
    assert ends_out == [Act.END_IN, Act.END_OUT, Act.FORGET]


def test_an_error_on_either_side_ends_the_other_with_an_error_that_wraps_it() -> None:
    reply = answer(
        "SalesRouter",
        inbound=False,
        message_type=ERROR,
        error=(50, "region closed"),
        mapping=MAPPED,
        mode=Mode.FORWARD,
    )
    fail = reply.steps[0]
    assert [s.act for s in reply.steps] == [Act.FAIL_IN, Act.END_OUT, Act.FORGET]
    assert fail.code == 50 and "SalesEast" in fail.description and "50: region closed" in fail.description
    # The broker's own errors (a lifetime that passed: code -1) cannot be sent as such (docs/rules.md §1.15).
    reply = answer(
        "SalesRouter",
        inbound=True,
        message_type=ERROR,
        error=(-1, "lifetime expired"),
        mapping=MAPPED,
        mode=Mode.FORWARD,
    )
    assert [s.act for s in reply.steps] == [Act.FAIL_OUT, Act.END_IN, Act.FORGET]
    assert reply.steps[0].code == FORWARDED_ERROR and "-1: lifetime expired" in reply.steps[0].description


def test_a_message_the_classifier_cannot_place_ends_its_dialog_with_the_reason() -> None:
    reply = answer(
        "SalesRouter",
        inbound=True,
        message_type="DEFAULT",
        error=None,
        mapping=None,
        mode=Mode.FORWARD,
        target=Classification(error="the classifier gave no service"),
    )
    (fail,) = reply.steps
    assert (fail.act, fail.code) == (Act.FAIL_IN, CLASSIFY_FAILED)
    assert fail.description == "SalesRouter could not route the conversation: the classifier gave no service"


def test_redirect_mode_answers_with_the_target_and_ends() -> None:
    got = acts(
        inbound=True,
        message_type="DEFAULT",
        error=None,
        mapping=None,
        mode=Mode.REDIRECT,
        target=Classification("SalesWest"),
    )
    assert got == [Act.REDIRECT, Act.END_IN]
    guid = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
    assert parse_redirect(redirect_body("Sales & West", guid)) == ("Sales & West", guid)
    assert parse_redirect(redirect_body("SalesWest", None)) == ("SalesWest", None)
    with pytest.raises(MalformedRecord):
        parse_redirect(b"<redirect/>")


def test_what_arrives_on_a_dialog_no_longer_mapped_ends_or_is_left() -> None:
    assert acts(inbound=False, message_type=END_DIALOG, error=None, mapping=None, mode=Mode.FORWARD) == [
        Act.END_OUT
    ]
    assert acts(inbound=False, message_type="Reply", error=None, mapping=None, mode=Mode.FORWARD) == []
    assert acts(inbound=True, message_type=END_DIALOG, error=None, mapping=None, mode=Mode.FORWARD) == [
        Act.END_IN
    ]


def test_the_outbound_dialog_id_is_the_same_at_every_try() -> None:
    first = outbound_id("SalesRouter", "Sales", "in-1")
    assert first == outbound_id("SalesRouter", "Sales", "in-1")
    assert first != outbound_id("SalesRouter", "Sales", "in-2") != outbound_id("OtherRouter", "Sales", "in-1")
