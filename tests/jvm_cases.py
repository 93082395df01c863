"""Cases for the JVM half's JUnit tests (jvm/state/test), decided by the Python reference.

    python -m tests.jvm_cases DIR

writes three files into DIR, which `mvn -f jvm/state/pom.xml test -Drouter.cases=DIR` replays
without Spark (`make test-jvm`):

* rules.json, for `router.rules.Engine.decide`: single decisions of
  `streaming.rules.engine.decide_message`, each with what it was decided with: the route snapshot
  as the job hands it to the JVM (`streaming.spark.decision.snapshot_json`, active routes only),
  the message, the requests pending (B4), the choice its conversation kept (K2), the rotation
  counters (C5, M3); and the decision field by field, the identity it keeps and the counters it
  moved. They are the decisions every scenario of tests/scenarios takes through `decide_message`
  (each batch of a scenario's timeline replayed with the batch semantics of
  `streaming.rules.batch`, and checked equal to the reference engine's), and those of the
  agreement tests' generated batches (tests/integration/test_spark_engine.py's strategies, with a
  fixed seed). Together they must reach every outcome, reason and step: asserted here.
* memory.json, for `router.state.ConversationMemory`: generated event sequences
  (tests/integration/test_conversation_memory.py's) and what `Conversation.step` made of each step.
* topics.json, for `router.naming.TopicNames`: names (tests/integration/test_topic_names_jvm.py's
  hard cases and generated ones) and what `streaming.topics` names with them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import topics
from streaming.devtools.scenario.check import check_scenario_file
from streaming.rules.batch import BatchResult, RoutingBatch
from streaming.rules.choice import Rotation
from streaming.rules.engine import ReferenceEngine, decide_message
from streaming.rules.model import Decision, Message, Outcome, Reason
from streaming.rules.snapshot import RouteSnapshot
from streaming.spark.decision import snapshot_json
from tests.integration import test_conversation_memory as memory_tests
from tests.integration import test_spark_engine as engine_tests
from tests.integration import test_topic_names_jvm as topic_tests

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
INSTANCE = "i1"
"""The key each case's instance has in its snapshot."""
STEPS = ("S4", "M1", "M2", "M3", "M4", "M5", "M6", "M7", "C1", "C2", "C3", "C4")
RULE_EXAMPLES = 20
"""Hypothesis examples of the agreement test's general cases (CASES_PER_EXAMPLE batches each)."""
K2_EXAMPLES = 10
MEMORY_EXAMPLES = 400
TOPIC_EXAMPLES = 5


class RuleCases:
    """The single decisions of batches, with their inputs, and the snapshots they were taken against."""

    def __init__(self) -> None:
        self.snapshots: list[str] = []
        self.cases: list[dict[str, Any]] = []

    def add_batch(self, batch: RoutingBatch, source: str) -> BatchResult:
        """Record every `decide_message` of `batch`, as `ReferenceEngine.decide` takes them, and return
        the reference engine's result.

        The batch's bookkeeping between messages (D1's waiting endpoints, B4's requests, K2's
        choices, the rotation) follows `ReferenceEngine.decide`, and each decision recorded must be
        the one it took (F5 may turn a forward into a discard afterwards: the pass's budget, not
        `Engine.decide`'s).
        """
        result = ReferenceEngine().decide(batch)
        active = [(INSTANCE, r) for r in batch.routes if r.is_active(batch.now)]
        self.snapshots.append(snapshot_json({INSTANCE: batch.instance}, active, {INSTANCE: batch.mirrors}))
        snapshot = RouteSnapshot.of(batch)
        pending = set(batch.pending_requests)
        waiting = set(batch.waiting_endpoints)
        memory = dict(batch.choices)
        counters = dict(batch.rotation)
        for message, final in zip(batch.messages, result.decisions, strict=True):
            if not message.is_remote and message.endpoint in waiting:
                continue  # D1: delayed behind its endpoint, not decided (`delayed_behind_conversation`)
            kept = memory.get(message.choice_key)
            rotation = Rotation(counters)
            decision = decide_message(message, snapshot, frozenset(pending), kept, rotation)
            discarded = final.reason is Reason.FORWARD_BUFFER_FULL and decision.outcome is Outcome.FORWARD
            if final != decision and not discarded:
                raise AssertionError(f"{source}: replayed {decision}, the reference engine took {final}")
            self.cases.append(
                {
                    "source": source,
                    "snapshot": len(self.snapshots) - 1,
                    "message": message_json(message),
                    "pending": sorted([scope, service] for scope, service in pending),
                    "kept": list(kept) if kept is not None else None,
                    "rotation": counters,
                    "expected": decision_json(decision, rotation),
                }
            )
            counters = {**counters, **rotation.advanced}
            if decision.requests is not None and decision.scope is not None:
                pending.add((decision.scope, decision.requests))
            if decision.outcome is Outcome.DELAYED:
                waiting.add(message.endpoint)
            if decision.remembered is not None:
                memory[message.choice_key] = decision.remembered
        return result

    def recorder(self, source: str) -> Callable[[], RecordingEngine]:
        """A decider factory for a scenario run: the reference engine, recording as it decides."""
        return lambda: RecordingEngine(self, source)

    def seen(self) -> set[str]:
        """Every outcome, reason and step the expected decisions have."""
        out: set[str] = set()
        for case in self.cases:
            expected = case["expected"]
            out.update(v for k in ("outcome", "reason", "match_step", "choice_step") if (v := expected[k]))
        return out


class RecordingEngine:
    """The reference engine, recording the single decisions of each batch it decides (`RuleCases`)."""

    def __init__(self, cases: RuleCases, source: str) -> None:
        self.recorded = cases
        self.source = source

    def decide(self, batch: RoutingBatch) -> BatchResult:
        """Decide `batch` as the reference engine does, recording its decisions."""
        return self.recorded.add_batch(batch, self.source)


def message_json(m: Message) -> dict[str, Any]:
    """The fields of a message `Engine.decide` reads (`router.rules.Message`)."""
    return {
        "conversation_id": m.conversation_id,
        "service": m.service,
        "origin": m.origin,
        "broker_instance": m.broker_instance,
        "from_target": m.from_target,
        "hops_remaining": m.hops_remaining,
        "time_to_live_s": m.time_to_live_s,
        "size_bytes": m.size_bytes,
    }


def decision_json(d: Decision, rotation: Rotation) -> dict[str, Any]:
    """The decision's fields as `router.rules.Decision` has them, and the rotation counters it moved."""
    return {
        "outcome": d.outcome.value,
        "database": d.database,
        "address": d.address,
        "route": d.route,
        "match_step": d.match_step,
        "choice_step": d.choice_step,
        "reason": d.reason.value if d.reason is not None else None,
        "requests": d.requests,
        "hops_remaining": d.hops_remaining,
        "scope": d.scope,
        "remembered": list(d.remembered) if d.remembered is not None else None,
        "rotation": dict(rotation.advanced),
    }


def scenario_cases(cases: RuleCases) -> int:
    """Record the decisions of every scenario file; each must pass on the reference engine."""
    files = sorted(SCENARIOS.rglob("*.yaml"))
    for path in files:
        source = f"{path.parent.name}/{path.stem}"
        problems = check_scenario_file(path, cases.recorder(source))
        if problems:
            raise AssertionError(f"{source} fails on the reference engine: {problems}")
    return len(files)


def generated_rule_cases(cases: RuleCases) -> None:
    """Record the decisions of the agreement tests' generated batches (a fixed seed: derandomized)."""
    drawn = {"general": 0, "k2": 0}

    def record(kind: str, examples: Sequence[RoutingBatch]) -> None:
        for batch in examples:
            cases.add_batch(batch, f"generated {kind} {drawn[kind]}")
            drawn[kind] += 1

    per = engine_tests.CASES_PER_EXAMPLE

    @settings(engine_tests.AGREEMENT, max_examples=RULE_EXAMPLES)
    @given(examples=st.lists(engine_tests.cases(), min_size=per, max_size=per))
    def general(examples: list[RoutingBatch]) -> None:
        record("general", examples)

    @settings(engine_tests.AGREEMENT, max_examples=K2_EXAMPLES)
    @given(examples=st.lists(engine_tests.k2_cases(), min_size=per, max_size=per))
    def keeping(examples: list[RoutingBatch]) -> None:
        record("k2", examples)

    general()
    keeping()


def memory_cases() -> list[dict[str, Any]]:
    """Generated event sequences and `Conversation.step`'s replay of them (a fixed seed)."""
    out: list[dict[str, Any]] = []

    @settings(max_examples=MEMORY_EXAMPLES, deadline=None, derandomize=True, database=None)
    @given(sequence=memory_tests.sequences())
    def collect(sequence: dict[str, Any]) -> None:
        out.append({"sequence": sequence, "expected": memory_tests.replay_in_python(sequence)})

    collect()
    return out


def topic_cases() -> dict[str, Any]:
    """(name, database, service) triples and their names: `escape`, then `network` and `queue` per place."""
    triples: list[topic_tests.Triple] = topic_tests.hard_cases()
    rows = topic_tests.ROWS_PER_EXAMPLE

    @settings(
        max_examples=TOPIC_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(drawn=st.lists(topic_tests.names, min_size=rows, max_size=rows))
    def collect(drawn: list[str]) -> None:
        triples.extend(zip(drawn, drawn[1:] + drawn[:1], drawn[2:] + drawn[:2], strict=True))

    collect()
    cases = []
    for name, database, service in triples:
        expected = [None if name is None else topics.escape(name)]
        for prefix, instance in topic_tests.PLACES:
            expected += [
                None if name is None else topics.network_topic(name, prefix),
                None
                if database is None or service is None
                else topics.queue_topic(instance, database, service, prefix),
            ]
        cases.append({"name": name, "database": database, "service": service, "expected": expected})
    return {"places": [list(p) for p in topic_tests.PLACES], "cases": cases}


def write(folder: Path) -> dict[str, int]:
    """Write the three case files into `folder`; return how many cases each holds."""
    rules = RuleCases()
    files = scenario_cases(rules)
    from_scenarios = len(rules.cases)
    generated_rule_cases(rules)
    # destination_unavailable is the writer's reason, not a rule's: no decision of an engine gives it.
    reasons = (r.value for r in Reason if r is not Reason.DESTINATION_UNAVAILABLE)
    missing = [x for x in (*(o.value for o in Outcome), *reasons, *STEPS) if x not in rules.seen()]
    if missing:
        raise AssertionError(f"no case's decision has {missing}: generate more cases")
    memory = memory_cases()
    names = topic_cases()
    folder.mkdir(parents=True, exist_ok=True)
    documents = {
        "rules.json": {"instance": INSTANCE, "snapshots": rules.snapshots, "cases": rules.cases},
        "memory.json": {"cases": memory},
        "topics.json": names,
    }
    for name, document in documents.items():
        (folder / name).write_text(json.dumps(document, separators=(",", ":")))
    return {
        "scenario files": files,
        "rule cases from scenarios": from_scenarios,
        "rule cases generated": len(rules.cases) - from_scenarios,
        "memory sequences": len(memory),
        "topic name triples": len(names["cases"]),
    }


def main(argv: Sequence[str]) -> int:
    """`python -m tests.jvm_cases DIR`."""
    if len(argv) != 1:
        print("usage: python -m tests.jvm_cases DIR (writes rules, memory and topics .json)", file=sys.stderr)
        return 2
    counts = write(Path(argv[0]))
    print("jvm cases: " + ", ".join(f"{n} {what}" for what, n in counts.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
