"""The Java state processor keeps the conversation memory exactly as `streaming.rules.memory` says.

Hypothesis generates sequences of micro-batches for one conversation (choice records read back,
delayed records read back, new messages, the clock moving on) and both the Python description
(`Conversation.step`) and its Java rendering (`router.state.ConversationMemory`, the core of the
streaming job's state processor) replay them; every step must give the same: the held messages
released and with which kept identity, what each new message is told (kept identity, waiting,
first of its entry), when to look again, and the memory left behind.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from streaming.rules.memory import Conversation, Given

pytestmark = pytest.mark.integration

ORIGINS = ("AW", "DB2", "msdb")
SERVICES = ("S1", "S2", "tcp://x:1/S")
IDENTITIES = st.tuples(
    st.sampled_from(["", "0a0a"]), st.sampled_from(["", "S1"]), st.sampled_from(["A", "B", "C"])
)


@st.composite
def sequences(draw: st.DrawFn) -> dict[str, Any]:
    """keep and retry (ms), then steps with a clock that only moves on, and unique orders."""
    keep = draw(st.sampled_from([0, 1, 500, 5_000, 3_600_000]))
    retry = draw(st.sampled_from([1, 300, 2_000, 60_000]))
    now = draw(st.integers(1_700_000_000_000, 1_700_000_100_000))
    order = recorded = 0
    delayed_ids: list[str] = []
    steps = []
    # The clock moves by amounts that land on the boundaries too: due exactly now, kept exactly keep.
    moves = sorted(
        {0, 1, 250, 1_000, 10_000, *(d + e for d in (keep, retry) for e in (-1, 0, 1) if d + e >= 0)}
    )
    for _ in range(draw(st.integers(1, 8))):
        now += draw(st.sampled_from(moves))
        choices = []
        for lag in draw(st.lists(st.sampled_from([0, 0, 1, 700, 4_000, 9_999]), max_size=3)):
            recorded += 1  # the choices topic's offsets: the order records were written in
            entry = [draw(st.sampled_from(ORIGINS)), draw(st.sampled_from(SERVICES))]
            choices.append([*entry, list(draw(IDENTITIES)), now - lag, recorded])
        draw(st.randoms()).shuffle(choices)  # read in any order
        delayed = []
        for lag in draw(st.lists(st.sampled_from([0, 10, 1_500, 2_500, 70_000]), max_size=3)):
            order += 1
            kept = draw(st.one_of(st.none(), IDENTITIES.map(list)))
            # D1: sometimes a copy of a message delayed before (written twice by a replayed batch).
            copy = bool(delayed_ids) and draw(st.booleans())
            delayed_id = draw(st.sampled_from(delayed_ids)) if copy else f"d{order}"
            delayed_ids.append(delayed_id)
            delayed.append(
                [
                    delayed_id,
                    order,
                    now - lag,
                    draw(st.sampled_from(ORIGINS)),
                    draw(st.sampled_from(SERVICES)),
                    kept,
                ]
            )
        draw(st.randoms()).shuffle(delayed)  # a copy may be read before the message it copies
        messages = []
        for _ in range(draw(st.integers(0, 4))):
            order += 1
            messages.append(
                [f"m{order}", order, draw(st.sampled_from(ORIGINS)), draw(st.sampled_from(SERVICES))]
            )
        draw(st.randoms()).shuffle(messages)  # arrival order is not batch order
        steps.append({"now": now, "choices": choices, "delayed": delayed, "messages": messages})
    return {"keep": keep, "retry": retry, "steps": steps}


def entry_key(origin: str, service: str) -> str:
    return f"{origin}\u0000{service}"


def given_json(g: Given[str]) -> list[Any]:
    return [g.message, list(g.kept) if g.kept is not None else None, g.waiting, g.first_of_entry]


def replay_in_python(sequence: dict[str, Any]) -> list[dict[str, Any]]:
    """The same replay as `ConversationMemory.replayJson`, through `Conversation.step`."""
    memory: Conversation[str] = Conversation()
    out = []
    for step in sequence["steps"]:
        result = memory.step(
            step["now"],
            sequence["keep"],
            sequence["retry"],
            choices=[((o, s), tuple(identity), at, order) for o, s, identity, at, order in step["choices"]],
            delayed=[
                (mid, mid, order, at, (o, s), tuple(kept) if kept is not None else None)
                for mid, order, at, o, s, kept in step["delayed"]
            ],
            messages=[(mid, order, (o, s)) for mid, order, o, s in step["messages"]],
        )
        memory = result.conversation
        out.append(
            {
                "released": [given_json(g) for g in result.released],
                "given": [given_json(g) for g in result.given],
                "next": result.next_at,
                "kept": {entry_key(*e): [list(k.identity), k.chosen_at] for e, k in memory.kept.items()},
                "held": [h.message for h in memory.held],
            }
        )
    return out


def normalized(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kept entries as a sorted list: the order entries are stored in is not part of the contract."""
    return [{**s, "kept": sorted(s["kept"].items())} for s in steps]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(sequence=sequences())
def test_the_java_memory_follows_the_python_description(
    sequence: dict[str, Any], spark: SparkSession
) -> None:
    assert spark._jvm is not None
    java = json.loads(spark._jvm.router.state.ConversationMemory.replayJson(json.dumps(sequence)))
    assert normalized(java) == normalized(replay_in_python(sequence))


def test_a_due_conversation_leaves_whole_and_ahead_of_its_new_messages(spark: SparkSession) -> None:
    """D1, D2, K2 by example, on both renderings: the generated test's reading, spelled out."""
    sequence = {
        "keep": 10_000,
        "retry": 2_000,
        "steps": [
            {
                "now": 1_000,
                "choices": [["AW", "S1", ["", "S1", "A"], 1_000, 0]],
                "delayed": [["d2", 2, 900, "AW", "S1", ["", "S1", "A"]], ["d1", 1, 800, "AW", "S1", None]],
                "messages": [["m4", 4, "AW", "S1"], ["m3", 3, "AW", "S2"]],
            },
            {"now": 2_800, "choices": [], "delayed": [], "messages": [["m5", 5, "AW", "S1"]]},
            {"now": 11_000, "choices": [], "delayed": [], "messages": [["m6", 6, "AW", "S1"]]},
        ],
    }
    python = replay_in_python(sequence)
    assert python[0]["released"] == []
    assert python[0]["given"] == [["m3", None, True, True], ["m4", ["", "S1", "A"], True, True]]
    assert python[0]["held"] == ["d1", "d2"] and python[0]["next"] == 2_800
    # Due 2,000 ms after the first was delayed: both leave, in order, ahead of m5, which no longer waits.
    assert python[1]["released"] == [["d1", None, False, True], ["d2", ["", "S1", "A"], False, False]]
    assert python[1]["given"] == [["m5", ["", "S1", "A"], False, False]]
    # The choice made at 1,000 is kept 10,000 ms: forgotten at 11,000.
    assert python[2]["given"] == [["m6", None, False, True]] and python[2]["kept"] == {}
    assert spark._jvm is not None
    java = json.loads(spark._jvm.router.state.ConversationMemory.replayJson(json.dumps(sequence)))
    assert normalized(java) == normalized(python)


def test_a_message_read_back_twice_is_held_and_released_once(spark: SparkSession) -> None:
    """D1: a batch run again after a crash writes its delayed messages a second time; the copies
    are one message. Held once (the first copy's order and time), released once."""
    sequence = {
        "keep": 0,
        "retry": 2_000,
        "steps": [
            {"now": 1_000, "choices": [], "delayed": [["d1", 1, 900, "AW", "S1", None]], "messages": []},
            # The copy written by the replayed batch, read back one batch later, and a second copy
            # read with a message delayed after it.
            {
                "now": 1_500,
                "choices": [],
                "delayed": [["d1", 3, 1_400, "AW", "S1", None], ["d2", 2, 1_100, "AW", "S1", None]],
                "messages": [],
            },
            {"now": 2_900, "choices": [], "delayed": [], "messages": [["m4", 4, "AW", "S1"]]},
        ],
    }
    python = replay_in_python(sequence)
    assert python[1]["held"] == ["d1", "d2"] and python[1]["next"] == 2_900
    assert python[2]["released"] == [["d1", None, False, True], ["d2", None, False, False]]
    assert python[2]["held"] == []
    assert spark._jvm is not None
    java = json.loads(spark._jvm.router.state.ConversationMemory.replayJson(json.dumps(sequence)))
    assert normalized(java) == normalized(python)
