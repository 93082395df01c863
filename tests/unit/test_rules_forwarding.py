"""C-drop, F1-F3, F5: what a forwarder checks before a message leaves again."""

from __future__ import annotations

from typing import Any

import pytest
from rules_factories import acl, decide_one, instance, message, route

from streaming.rules.forwarding import (
    BYTES_PER_MB,
    forwarded_hops,
    forwarder_discard_reason,
    forwarding_refused,
)
from streaming.rules.model import DEFAULT_HOPS, REMOTE, Outcome, Reason

ONWARD = [acl("msdb"), route("msdb", "Onward", "tcp://next:4022")]
FORWARDER = instance(forwarding=True)


def test_c_drop_only_for_incoming_messages_with_forwarding_off() -> None:
    assert forwarding_refused(message(origin=REMOTE), instance(forwarding=False))
    assert not forwarding_refused(message(origin=REMOTE), instance(forwarding=True))
    assert not forwarding_refused(message(origin="AW"), instance(forwarding=False))


def test_f1_forwarding_off_by_default_drops_incoming_network_routes() -> None:
    decision = decide_one(ONWARD, message(service="Far", origin=REMOTE))
    assert (decision.outcome, decision.reason, decision.route) == (
        Outcome.DROPPED,
        Reason.FORWARDING_DISABLED,
        "Onward",
    )


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"hops_remaining": 0}, Reason.HOPS_EXHAUSTED),
        ({"time_to_live_s": 0.0}, Reason.LIFETIME_EXPIRED),
        ({"time_to_live_s": -3.0}, Reason.LIFETIME_EXPIRED),
        ({"size_bytes": 10 * BYTES_PER_MB + 1}, Reason.FORWARD_BUFFER_FULL),
        ({"hops_remaining": 0, "time_to_live_s": 0.0}, Reason.HOPS_EXHAUSTED),
    ],
)
def test_f3_f5_discard_reasons(fields: dict[str, Any], reason: Reason) -> None:
    assert forwarder_discard_reason(message(origin=REMOTE, **fields), FORWARDER) is reason


@pytest.mark.parametrize(
    "fields",
    [{}, {"hops_remaining": 1}, {"time_to_live_s": 0.5}, {"size_bytes": 10 * BYTES_PER_MB}],
)
def test_f3_f5_messages_that_may_be_forwarded(fields: dict[str, Any]) -> None:
    assert forwarder_discard_reason(message(origin=REMOTE, **fields), FORWARDER) is None


def test_f5_limit_follows_forward_size_mb() -> None:
    small = instance(forwarding=True, forward_size_mb=1)
    assert forwarder_discard_reason(message(origin=REMOTE, size_bytes=BYTES_PER_MB), small) is None
    big = message(origin=REMOTE, size_bytes=BYTES_PER_MB + 1)
    assert forwarder_discard_reason(big, small) is Reason.FORWARD_BUFFER_FULL


def test_f3_forwarded_copy_has_one_hop_less() -> None:
    assert forwarded_hops(message(origin=REMOTE)) == DEFAULT_HOPS - 1
    decision = decide_one(ONWARD, message(service="Far", origin=REMOTE, hops_remaining=4), inst=FORWARDER)
    assert (decision.outcome, decision.address, decision.hops_remaining) == (
        Outcome.FORWARD,
        "tcp://next:4022",
        3,
    )
    assert decision.to_json_dict()["hops_remaining"] == 3


def test_f3_discard_decision_names_route_and_steps() -> None:
    decision = decide_one(ONWARD, message(service="Far", origin=REMOTE, hops_remaining=0), inst=FORWARDER)
    assert (decision.outcome, decision.reason) == (Outcome.DISCARDED, Reason.HOPS_EXHAUSTED)
    assert (decision.route, decision.match_step, decision.choice_step) == ("Onward", "M5", "C3")


def test_forwarder_checks_do_not_apply_to_local_delivery_or_sending() -> None:
    delivered = decide_one([acl("msdb")], message(origin=REMOTE, hops_remaining=0, time_to_live_s=0.0))
    assert delivered.outcome is Outcome.DELIVER
    sent = decide_one([route("AW", "Out", "tcp://out:4022", "Far")], message(service="Far", hops_remaining=0))
    assert (sent.outcome, sent.hops_remaining) == (Outcome.SEND, None)
