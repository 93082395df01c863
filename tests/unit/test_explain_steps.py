"""The step-by-step account of one decision (`streaming.rules.explain`) and its agreement with the engine.

The account must never drift from `streaming.rules.engine.decide_message`: every scenario of the
suite (tests/scenarios) is played with a decider that, for each message the engine decides, builds
the inputs `decide_message` had at that point of the batch (pending requests, B4; kept choices,
K2; the rotation's counters, C5/M3) and checks that the account's decision is the engine's, and
that the steps say the same thing as the decision (the step that ended matching is its match step,
the tier that chose is its choice step). Generated cases do the same over random tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rules_factories import AW, DB2, FAR1, FAR2, NOW, acl, database, instance, message, route
from test_rules_properties import INSTANCES, messages, routes

from streaming.devtools.scenario.loader import load_scenario
from streaming.devtools.scenario.runner import ScenarioRunner
from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.choice import Rotation
from streaming.rules.engine import ReferenceEngine, decide_message
from streaming.rules.explain import (
    CHOICE_STEPS,
    MATCHING_STEPS,
    Account,
    decision_summary,
    describe_route,
    explain_decision,
)
from streaming.rules.model import (
    BROKER_CONFIGURATION_SERVICE,
    REMOTE,
    ChoiceKey,
    Decision,
    Instance,
    Message,
    MirrorRole,
    Outcome,
    Reason,
    Route,
    RouteIdentity,
)
from streaming.rules.snapshot import RouteSnapshot

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
FILES = sorted(SCENARIOS.rglob("*.yaml"))


def snapshot_of(
    table: list[Route], inst: Instance | None = None, mirrors: Mapping[str, MirrorRole] | None = None
) -> RouteSnapshot:
    return RouteSnapshot.of(
        RoutingBatch(
            instance=inst or instance(), routes=tuple(table), messages=(), now=NOW, mirrors=mirrors or {}
        )
    )


def assert_steps_tell_the_decision(account: Account) -> None:
    """The steps and the decision say the same thing: who ended matching, which tier chose."""
    decision = account.decision
    ended = [s.rule for s in account.steps if s.ended]
    assert ended, "some step decides"
    if decision.match_step == "S4":
        assert account.steps[-1].rule == "S4" and account.steps[-1].ended
        return
    if decision.match_step is None:
        return
    # The last matching step told is the one that ended matching (an S5 loop-back tells two walks).
    last_match = [s for s in account.steps if s.rule in MATCHING_STEPS][-1]
    assert last_match.rule == decision.match_step and last_match.ended
    if decision.choice_step is not None:
        tiers = [s for s in account.steps if s.rule in ("C1", "C2", "C3", "C4") and s.ended]
        assert tiers and tiers[-1].rule == decision.choice_step
        if decision.route is not None and decision.match_step != "M6":
            assert [c.route.name for c in tiers[-1].considered if c.taken] == [decision.route]


@dataclass
class CheckingDecider:
    """The reference engine, checked message by message against `explain_decision` with the same inputs."""

    checked: Counter[str] = field(default_factory=Counter)
    steps_seen: set[str] = field(default_factory=set)

    def decide(self, batch: RoutingBatch) -> BatchResult:
        result = ReferenceEngine().decide(batch)
        snapshot = RouteSnapshot.of(batch)
        expired = tuple(r for r in batch.routes if not r.is_active(batch.now))
        pending = set(batch.pending_requests)
        waiting = set(batch.waiting_endpoints)
        memory: dict[ChoiceKey, RouteIdentity] = dict(batch.choices)
        counters = dict(batch.rotation)
        for message_, decided in zip(batch.messages, result.decisions, strict=True):
            if not message_.is_remote and message_.endpoint in waiting:
                # D1: the engine does not match a message that waits behind its conversation endpoint.
                assert (decided.outcome, decided.match_step) == (Outcome.DELAYED, None)
                self.checked["waiting"] += 1
                continue
            kept = memory.get(message_.choice_key)
            reference = decide_message(message_, snapshot, frozenset(pending), kept, Rotation(counters))
            rotation = Rotation(counters)
            account = explain_decision(
                message_, snapshot, frozenset(pending), kept, rotation, expired=expired
            )
            assert account.decision == reference, (message_, account.steps)
            assert account.decision.remembered == reference.remembered
            assert account.decision.extra == reference.extra
            assert_steps_tell_the_decision(account)
            counters.update(rotation.advanced)
            # The engine's own decision: the one above, unless F5's batch buffer discarded a forward.
            if decided != reference:
                assert (reference.outcome, decided.outcome, decided.reason) == (
                    Outcome.FORWARD,
                    Outcome.DISCARDED,
                    Reason.FORWARD_BUFFER_FULL,
                )
            if decided.requests is not None and decided.scope is not None:
                pending.add((decided.scope, decided.requests))
            if decided.outcome is Outcome.DELAYED:
                waiting.add(message_.endpoint)
            if decided.remembered is not None:
                memory[message_.choice_key] = decided.remembered
            self.checked["decided"] += 1
            self.steps_seen.update(s.rule for s in account.steps)
        return result


@pytest.fixture(scope="module")
def checked_suite() -> CheckingDecider:
    decider = CheckingDecider()
    for path in FILES:
        ScenarioRunner(decider).run(load_scenario(path))
    return decider


def test_the_account_decides_as_the_engine_on_every_scenario(checked_suite: CheckingDecider) -> None:
    assert len(FILES) >= 100
    # Every scenario's decisions were checked (the suite holds several hundred), a few waiting (D1).
    assert checked_suite.checked["decided"] >= 300
    assert checked_suite.checked["waiting"] >= 3
    # ... and between them they walk every matching step and every choice step.
    assert set(MATCHING_STEPS) <= checked_suite.steps_seen
    assert set(CHOICE_STEPS) <= checked_suite.steps_seen
    assert {
        "S4",
        "S5",
        "R6",
        "K2",
        "C-drop",
        "F3",
        "F5",
        "MI2",
        "MI3",
        "T1",
        "L1",
    } <= checked_suite.steps_seen


@settings(max_examples=300, deadline=None)
@given(
    table=st.lists(routes(), max_size=6, unique_by=lambda r: (r.scope, r.name)),
    message_=messages(),
    forwarding=st.booleans(),
    principal=st.sampled_from([None, "tcp://a:4022", "tcp://m:4022"]),
    pending=st.sets(
        st.tuples(st.sampled_from(["AW", "msdb", "DB2"]), st.sampled_from(["S", "T"])), max_size=2
    ),
    turn=st.integers(0, 3),
    kept=st.sampled_from([None, ("", "S", "LOCAL"), ("", "", "tcp://a:4022"), (AW, "S", "tcp://b:4022/")]),
)
def test_the_account_decides_as_the_engine_on_generated_cases(
    table: list[Route],
    message_: Message,
    forwarding: bool,
    principal: str | None,
    pending: set[tuple[str, str]],
    turn: int,
    kept: RouteIdentity | None,
) -> None:
    snapshot = snapshot_of(
        table, INSTANCES[forwarding], {principal: MirrorRole.PRINCIPAL} if principal else {}
    )
    # The rotation's counters at some turn: every key the message could touch stands at `turn`.
    probe = Rotation()
    decide_message(message_, snapshot, frozenset(pending), kept, probe)
    counters = {key: turn for key in probe.advanced}
    reference_rotation, explained_rotation = Rotation(counters), Rotation(counters)
    reference = decide_message(message_, snapshot, frozenset(pending), kept, reference_rotation)
    account = explain_decision(message_, snapshot, frozenset(pending), kept, explained_rotation)
    assert account.decision == reference
    assert account.decision.extra == reference.extra
    assert explained_rotation.advanced == reference_rotation.advanced
    assert_steps_tell_the_decision(account)


def rules_of(account: Account) -> list[str]:
    return [s.rule for s in account.steps]


def test_a_route_for_the_service_ends_matching_at_m2_and_hides_the_wildcard() -> None:
    table = [
        acl("AW"),
        route("AW", "ToF1", "TCP://f1:4022", "OrderParts"),
        route("AW", "Audit", "LOCAL", "Audit"),
    ]
    account = explain_decision(message(service="OrderParts"), snapshot_of(table))
    assert decision_summary(account.decision) == "send to TCP://f1:4022 by route ToF1 (M2, C3)"
    assert rules_of(account) == ["S1", "K2", "M1", "M2", "C0", "C1", "C2", "C3"]
    table_step, _, m1, m2, *_ = account.steps
    assert [(c.route.name, c.why) for c in table_step.considered] == [
        ("Audit", "names another service, Audit (R2)")
    ]
    assert m1.verdict == "skipped: the message names no broker instance (K1)"
    assert m2.ended and [(c.route.name, c.taken) for c in m2.considered] == [("ToF1", True)]
    assert "AutoCreatedLocal" not in str(account.steps), "M5's wildcard is never reached"


def test_a_service_no_database_hosts_is_delayed_after_c2_cannot_locate_it() -> None:
    account = explain_decision(message(service="Nowhere"), snapshot_of([acl("AW")]))
    assert (account.decision.outcome, account.decision.reason) == (Outcome.DELAYED, Reason.SERVICE_NOT_FOUND)
    c2 = account.steps_of(["C2"])[0]
    assert [(c.route.name, c.taken, c.why) for c in c2.considered] == [
        ("AutoCreatedLocal", False, "no database of i1 hosts Nowhere (L3)")
    ]
    assert account.steps[-1].rule == "D1" and account.steps[-1].ended


def test_names_that_differ_only_in_case_are_called_out_r2() -> None:
    table = [route("msdb", "ToParts", "TCP://i2:4022", "orderparts")]
    account = explain_decision(message(service="OrderParts", origin=REMOTE), snapshot_of(table))
    assert (account.decision.outcome, account.decision.match_step) == (Outcome.DROPPED, "M7")
    s3 = account.steps_of(["S3"])[0]
    assert "compared byte by byte (R2)" in s3.considered[0].why
    assert account.steps_of(["M7"])[0].verdict.startswith("no route matched: dropped")


def test_m1_says_which_broker_instance_differs() -> None:
    table = [
        route("AW", "One", "tcp://s1:4022", "Bal", FAR1),
        route("AW", "Two", "tcp://s2:4022", "Bal", FAR2),
    ]
    account = explain_decision(message(service="Bal", broker_instance=FAR2), snapshot_of(table))
    m1 = account.steps_of(["M1"])[0]
    assert m1.ended and [(c.route.name, c.taken) for c in m1.considered] == [("One", False), ("Two", True)]
    assert m1.considered[0].why == f"broker instance {FAR1} differs from the message's {FAR2}"


def test_m3_picks_one_broker_instance_in_turn_and_k2_keeps_it() -> None:
    table = [
        route("AW", "One", "tcp://s1:4022", "Bal", FAR1),
        route("AW", "Two", "tcp://s2:4022", "Bal", FAR2),
    ]
    first = explain_decision(message(service="Bal"), snapshot_of(table))
    assert "2 broker instances taken in turn by new conversations (C5)" in first.steps_of(["M3"])[0].verdict
    kept = explain_decision(
        message(service="Bal"), snapshot_of(table), remembered=(FAR2, "Bal", "tcp://s2:4022")
    )
    assert kept.decision.route == "Two"
    assert "keeps broker instance" in kept.steps_of(["M3"])[0].verdict


def test_equal_routes_are_counted_once_c0_and_taken_in_turn_c5() -> None:
    table = [
        route("AW", "A", "tcp://a:4022", "S"),
        route("AW", "A2", "tcp://a:4022", "S"),
        route("AW", "B", "tcp://b:4022", "S"),
    ]
    rotation = Rotation()
    picks = [
        explain_decision(message(f"m{n}", f"c{n}", "S"), snapshot_of(table), rotation=rotation)
        for n in range(2)
    ]
    assert [p.decision.route for p in picks] == ["A", "B"]
    c0 = picks[0].steps_of(["C0"])[0]
    assert [(c.route.name, c.why) for c in c0.considered] == [("A2", "same as A: counted once")]
    assert "2 equal routes are taken in turn" in picks[0].steps_of(["C5"])[0].verdict


def test_an_expired_route_is_listed_under_r6_and_never_used() -> None:
    gone = route("AW", "Old", "tcp://old:4022", "S", expires_at=NOW - timedelta(hours=1))
    account = explain_decision(message(service="S"), snapshot_of([gone]), expired=[gone])
    r6 = account.steps_of(["R6"])[0]
    assert [(c.route.name, c.why) for c in r6.considered] == [("Old", "expired at 2025-12-31T23:00:00Z (R6)")]
    assert account.decision.outcome is Outcome.DELAYED and account.decision.match_step == "M7"


def test_a_forwarder_checks_hops_and_discards_a_spent_message_f3() -> None:
    table = [route("msdb", "ToParts", "TCP://i2:4022", "OrderParts")]
    inst = instance(forwarding=True)
    spent = explain_decision(
        message(service="OrderParts", origin=REMOTE, hops_remaining=0), snapshot_of(table, inst)
    )
    assert (spent.decision.outcome, spent.decision.reason) == (Outcome.DISCARDED, Reason.HOPS_EXHAUSTED)
    assert rules_of(spent)[-2:] == ["F1", "F3"] and spent.steps[-1].ended
    fine = explain_decision(
        message(service="OrderParts", origin=REMOTE, hops_remaining=3), snapshot_of(table, inst)
    )
    assert decision_summary(fine.decision) == "forward to TCP://i2:4022 by route ToParts (M2, C3)"
    assert fine.steps[-1].verdict.startswith("forwarded to TCP://i2:4022 with hops_remaining 2")


def test_forwarding_disabled_drops_an_incoming_message_for_elsewhere_c_drop() -> None:
    table = [route("msdb", "ToParts", "TCP://i2:4022", "OrderParts")]
    account = explain_decision(message(service="OrderParts", origin=REMOTE), snapshot_of(table))
    assert (account.decision.outcome, account.decision.reason) == (
        Outcome.DROPPED,
        Reason.FORWARDING_DISABLED,
    )
    assert account.steps[-1].rule == "C-drop" and "MESSAGE_FORWARDING = DISABLED" in account.steps[-1].verdict


def test_a_reply_from_outside_takes_the_shortcut_s4() -> None:
    account = explain_decision(
        message(service="InitiatorService", origin=REMOTE, from_target=True, broker_instance=AW),
        snapshot_of([]),
    )
    assert rules_of(account) == ["S4"]
    assert decision_summary(account.decision) == "deliver into AW by the reply shortcut (S4)"


def test_a_bcn_route_asks_for_the_missing_route_m4_unless_one_is_pending_b4() -> None:
    table = [route("AW", "Bcn", "LOCAL", BROKER_CONFIGURATION_SERVICE), acl("AW")]
    inst = instance(database("AW", AW, "S", BROKER_CONFIGURATION_SERVICE))
    asks = explain_decision(message(service="S"), snapshot_of(table, inst))
    assert (asks.decision.outcome, asks.decision.requests) == (Outcome.DELAYED, "S")
    assert asks.steps[-1].rule == "M4" and asks.steps[-1].ended
    waits = explain_decision(message(service="S"), snapshot_of(table, inst), pending_requests={("AW", "S")})
    m4 = waits.steps_of(["M4"])[0]
    assert not m4.ended and "already pending" in m4.verdict
    assert (waits.decision.outcome, waits.decision.match_step) == (Outcome.DELIVER, "M5")


def test_m6_delivers_with_the_virtual_local_route() -> None:
    account = explain_decision(
        message(service="TargetService", origin=REMOTE, broker_instance=DB2), snapshot_of([])
    )
    m6 = account.steps_of(["M6"])[0]
    assert (
        m6.ended
        and describe_route(m6.considered[0].route) == "the virtual route (TargetService, *, LOCAL) of M6"
    )
    assert decision_summary(account.decision) == "deliver into DB2 by the virtual LOCAL route (M6, C2)"


def test_a_mirror_route_without_a_principal_is_delayed_mi3() -> None:
    table = [route("AW", "Mirrored", "tcp://p1:4022", "S", mirror="tcp://p2:4022")]
    unknown = explain_decision(message(service="S"), snapshot_of(table))
    assert (unknown.decision.outcome, unknown.decision.reason) == (Outcome.DELAYED, Reason.PRINCIPAL_UNKNOWN)
    assert unknown.steps[-1].rule == "MI3"
    known = explain_decision(
        message(service="S"), snapshot_of(table, mirrors={"tcp://p2:4022": MirrorRole.PRINCIPAL})
    )
    assert known.decision.address == "tcp://p2:4022" and known.steps_of(["MI2"])


def test_a_loop_back_is_routed_again_with_msdb_s5() -> None:
    table = [route("AW", "Self", "TCP://i1:4022", "TargetService"), acl("msdb")]
    account = explain_decision(message(service="TargetService"), snapshot_of(table))
    assert "S5" in rules_of(account) and "S3" in rules_of(account)
    assert account.decision.extra == {"loop_back": "TCP://i1:4022"}
    assert replace(account.decision, extra={}) == decide_message(
        message(service="TargetService"), snapshot_of(table)
    )


def test_describe_route_uses_the_spec_notation() -> None:
    assert describe_route(route("AW", "R", "tcp://a:4022", "S", FAR1, mirror="tcp://m:4022")) == (
        f"R (S, {FAR1}, tcp://a:4022, tcp://m:4022)"
    )
    assert describe_route(acl("msdb")) == "AutoCreatedLocal (*, *, LOCAL)"


def test_decision_summary_names_the_reason() -> None:
    decision = Decision(id="m", outcome=Outcome.DELAYED, match_step="M7", reason=Reason.NO_ROUTE)
    assert decision_summary(decision) == "delayed (M7): no_route"
