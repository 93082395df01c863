"""MI2-MI4: which partner of a mirror route receives the traffic."""

from __future__ import annotations

from rules_factories import acl, decide_one, instance, message, route

from streaming.rules.mirror import principal_address
from streaming.rules.model import MirrorRole, Outcome, Reason

MIRRORED = route("AW", "Mirrored", "tcp://P1:4022/", "S", mirror="tcp://p2:4022")
P1, P2 = "tcp://p1:4022", "tcp://p2:4022"


def test_mi2_the_principal_partner_receives_it() -> None:
    assert principal_address(MIRRORED, {P1: MirrorRole.PRINCIPAL, P2: MirrorRole.MIRROR}) == "tcp://P1:4022/"
    assert (
        principal_address(MIRRORED, {P1: MirrorRole.UNREACHABLE, P2: MirrorRole.PRINCIPAL}) == "tcp://p2:4022"
    )


def test_mi3_nobody_claims_principal() -> None:
    assert principal_address(MIRRORED, {P1: MirrorRole.MIRROR, P2: MirrorRole.UNREACHABLE}) is None
    assert principal_address(MIRRORED, {}) is None


def test_both_claiming_principal_prefers_the_route_address() -> None:
    assert (
        principal_address(MIRRORED, {P1: MirrorRole.PRINCIPAL, P2: MirrorRole.PRINCIPAL}) == "tcp://P1:4022/"
    )


def test_mi3_decision_is_delayed_with_the_route_chosen() -> None:
    decision = decide_one([MIRRORED], message(service="S"), mirrors={P1: MirrorRole.MIRROR})
    assert decision.outcome is Outcome.DELAYED
    assert (decision.reason, decision.route, decision.choice_step) == (
        Reason.PRINCIPAL_UNKNOWN,
        "Mirrored",
        "C1",
    )


def test_mi3_incoming_is_dropped() -> None:
    msdb_mirror = route("msdb", "Mirrored", P1, "S", mirror=P2)
    decision = decide_one(
        [msdb_mirror], message(service="S", origin="remote"), inst=instance(forwarding=True)
    )
    assert (decision.outcome, decision.reason) == (Outcome.DROPPED, Reason.PRINCIPAL_UNKNOWN)


def test_mi4_a_route_without_mirror_address_never_fails_over() -> None:
    plain = route("AW", "Plain", P1, "S")
    mirrors = {P1: MirrorRole.UNREACHABLE, P2: MirrorRole.PRINCIPAL}
    decision = decide_one([plain, acl("AW")], message(service="S"), mirrors=mirrors)
    assert (decision.outcome, decision.address, decision.choice_step) == (Outcome.SEND, P1, "C3")
