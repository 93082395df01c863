"""The router's state processor (`router.spark.ConversationState`, `streaming.spark.state`).

Each step below runs a streaming query (JSON file sources, Trigger.AvailableNow) on the same
checkpoint, so every step is also a restart: what a row is given comes from Spark's state store
as the previous query left it.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from streaming.rules.model import Database, Instance, Route
from streaming.spark.decision import DecisionInputs, build_snapshot
from streaming.spark.state import (
    DELAYED_AT,
    apply_state,
    as_choices,
    as_delayed,
    as_messages,
    read_state,
)

pytestmark = pytest.mark.integration

MESSAGE_SCHEMA = (
    "topic string, instance string, conversation_id string, from_target boolean, origin string, "
    "service string, pos long, id string, error string"
)
"""A message row as the processor takes it; `from_target` left out of a row reads as the initiator's side."""
DECIDABLE_SCHEMA = (
    f"{MESSAGE_SCHEMA}, bid string, hops_remaining int, expires_ms long, ttl_ms long, size_bytes long"
)
"""A message row with every column the rules read (`streaming.spark.sources.decode`'s)."""
DELAYED_COLUMNS = f"kept_bid string, kept_route_service string, kept_address string, {DELAYED_AT} long"
RECORD_SCHEMA = "value string, timestamp timestamp, offset long"
NOW = datetime.now(timezone.utc)
SOURCES = ("messages", "choices", "delayed")
_OFFSETS = itertools.count()
"""The choices topic's offsets: each choice record is later than the one before."""


class Keeper:
    """Feeds rows of every kind to the processor, one micro-batch per `step`."""

    def __init__(
        self,
        spark: SparkSession,
        folder: Path,
        keep_s: float = 3600.0,
        retry_s: float = 3600.0,
        inputs: DecisionInputs | None = None,
        schema: str = MESSAGE_SCHEMA,
    ) -> None:
        self.spark = spark
        self.folder = folder
        self.checkpoint = folder / "checkpoint"
        self.keep_s = keep_s
        self.retry_s = retry_s
        self.inputs = inputs
        self.schema = schema
        self.updated = 0
        """The state rows the last step wrote (Spark's `numRowsUpdated`)."""
        for name in SOURCES:
            (folder / name).mkdir(parents=True)

    def step(
        self,
        messages: list[dict[str, object]],
        choices: list[dict[str, object]] | None = None,
        delayed: list[dict[str, object]] | None = None,
    ) -> list[Row]:
        """Add the rows as new files, run the query over them, return the rows it emitted."""
        given: dict[str, list[dict[str, object]]] = dict(
            zip(SOURCES, (messages, choices or [], delayed or []), strict=True)
        )
        for name, records in given.items():
            if records:
                (self.folder / name / f"{uuid.uuid4().hex}.json").write_text(
                    "\n".join(json.dumps(r, default=str) for r in records), encoding="utf-8"
                )
        read = self.spark.readStream
        stream = read.schema(self.schema).json(str(self.folder / "messages"))
        rows = as_messages(stream)
        delayed_schema = f"{self.schema}, {DELAYED_COLUMNS}"
        rows = rows.unionByName(as_delayed(read.schema(delayed_schema).json(str(self.folder / "delayed"))))
        rows = rows.unionByName(
            as_choices(read.schema(RECORD_SCHEMA).json(str(self.folder / "choices")), stream)
        )
        out: list[Row] = []

        def collect(batch: DataFrame, _batch_id: int) -> None:
            out.extend(batch.collect())

        query = (
            apply_state(rows, self.keep_s, self.retry_s, self.inputs)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        query.stop()
        assert query.exception() is None, query.exception()
        self.updated = sum(
            op["numRowsUpdated"] for p in query.recentProgress for op in p.get("stateOperators") or ()
        )
        return out

    def state(self) -> DataFrame:
        """The state store as the last batch left it (Spark's state data source)."""
        return read_state(self.spark, self.checkpoint)


def message(
    n: int, conversation: str = "c1", service: str = "S", instance: str = "i1", pos: int | None = None
) -> dict[str, object]:
    return {
        "topic": "outbound",
        "instance": instance,
        "conversation_id": conversation,
        "origin": "AW",
        "service": service,
        "pos": n if pos is None else pos,
        "id": f"{conversation}:{n}",
        "error": None,
    }


def choice(
    address: str, conversation: str = "c1", service: str = "S", at: datetime = NOW
) -> dict[str, object]:
    value = {
        "instance": "i1",
        "conversation_id": conversation,
        "origin": "AW",
        "service": service,
        "bid": "",
        "route_service": service,
        "address": address,
    }
    return {"value": json.dumps(value), "timestamp": at.isoformat(), "offset": next(_OFFSETS)}


def kept(rows: list[Row]) -> dict[str, str | None]:
    return {r["id"]: r["kept_address"] for r in rows}


@pytest.fixture
def keeper(spark: SparkSession, tmp_path: Path) -> Keeper:
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    return Keeper(spark, tmp_path)


def test_a_choice_read_back_is_kept_across_batches_and_restarts(keeper: Keeper) -> None:
    assert kept(keeper.step([message(0)])) == {"c1:0": None}
    # The choice the router wrote for c1 comes back with c1's next message: applied first.
    got = keeper.step([message(1)], [choice("tcp://a:4022")])
    assert kept(got) == {"c1:1": "tcp://a:4022"}
    assert got[0]["kept_bid"] == "" and got[0]["kept_route_service"] == "S"
    # A later query on the same checkpoint: the state store still has it.
    got = keeper.step([message(2), message(3, service="T"), message(4, instance="i2")])
    assert kept(got) == {"c1:2": "tcp://a:4022", "c1:3": None, "c1:4": None}
    # Only messages leave the processor, with the input's columns and the state's.
    assert set(got[0].asDict()) == {
        "topic", "instance", "conversation_id", "from_target", "origin", "service", "pos", "id",
        "error", "kept_bid", "kept_route_service", "kept_address", "waiting", "first_of_entry",
        "batch_ms",
    }  # fmt: skip
    assert got[0]["waiting"] is False and got[0]["first_of_entry"] is True


def test_a_newer_choice_replaces_the_kept_one(keeper: Keeper) -> None:
    keeper.step([], [choice("tcp://a:4022", at=NOW - timedelta(seconds=5)), choice("tcp://b:4022")])
    assert kept(keeper.step([message(0)])) == {"c1:0": "tcp://b:4022"}
    keeper.step([], [choice("tcp://c:4022", at=NOW + timedelta(seconds=1))])
    assert kept(keeper.step([message(1)])) == {"c1:1": "tcp://c:4022"}
    # An older record (read late) does not undo a newer choice.
    keeper.step([], [choice("tcp://a:4022", at=NOW - timedelta(seconds=60))])
    assert kept(keeper.step([message(2)])) == {"c1:2": "tcp://c:4022"}


def test_the_state_is_written_when_the_memory_changes_not_at_every_batch(keeper: Keeper) -> None:
    """A later message of a conversation whose choice is kept reads the memory and leaves it as it
    was: the batch writes nothing to the state store for it."""
    keeper.step([], [choice("tcp://a:4022")])
    assert keeper.updated == 1
    assert kept(keeper.step([message(0)])) == {"c1:0": "tcp://a:4022"}
    assert keeper.updated == 0
    keeper.step([], [choice("tcp://b:4022", at=NOW + timedelta(seconds=1))])
    assert keeper.updated == 1
    assert kept(keeper.step([message(1), message(2)])) == {"c1:1": "tcp://b:4022", "c1:2": "tcp://b:4022"}
    assert keeper.updated == 0


def test_a_conversations_messages_leave_in_batch_order(keeper: Keeper) -> None:
    positions = [7, 3, 11, 1, 5]
    rows = [message(n, pos=p) for n, p in enumerate(positions)]
    rows += [message(n, conversation=f"other{n}") for n in range(20)]
    got = [r for r in keeper.step(rows) if r["conversation_id"] == "c1"]
    assert [r["pos"] for r in got] == sorted(positions)


def test_a_choice_is_kept_keep_s_after_it_was_made(spark: SparkSession, tmp_path: Path) -> None:
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    keeper = Keeper(spark, tmp_path, keep_s=600)
    now = datetime.now(timezone.utc)
    keeper.step(
        [],
        [
            choice("tcp://old:4022", conversation="old", at=now - timedelta(seconds=601)),
            choice("tcp://new:4022", conversation="new", at=now - timedelta(seconds=300)),
        ],
    )
    got = keeper.step([message(0, conversation="old"), message(0, conversation="new")])
    assert kept(got) == {"old:0": None, "new:0": "tcp://new:4022"}
    assert sorted(r["key"]["value"].split("\u0000")[1] for r in keeper.state().collect()) == ["new"]


def test_the_processor_keeps_a_choice_itself_unless_the_batch_is_decided_in_one_pass(
    spark: SparkSession, tmp_path: Path
) -> None:
    """K2 at once: given what the batch is decided with, the processor decides its messages as the
    decision's pass will and keeps the choice of the first of each entry, chosen at the batch's
    time; that message leaves as not the first of its entry, so no choice record is written for it.
    With a set of equal options the batch is decided in one pass: the choice goes round the topic."""
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    database = Database("AW", "6f9619ff-8b86-d011-b42d-00cf4fc964ff", True, ())
    instance = Instance("i1", "TCP://i1:4022", (database,))
    one = [("i1", Route("AW", "A", "TCP://a:4022", service="S"))]
    inputs = DecisionInputs(spark)
    inputs.set(build_snapshot(spark, {"i1": instance}, one, now=NOW))
    keeper = Keeper(spark, tmp_path, inputs=inputs, schema=DECIDABLE_SCHEMA)

    def decidable(n: int, conversation: str = "c1") -> dict[str, object]:
        return {**message(n, conversation), "bid": None, "hops_remaining": 16, "size_bytes": 10}

    got = keeper.step([decidable(0), decidable(1)])
    assert [(r["id"], r["kept_address"], r["first_of_entry"]) for r in got] == [
        ("c1:0", None, False),
        ("c1:1", None, False),
    ]
    ((entry,),) = [r["value"]["entries"] for r in keeper.state().collect()]
    chosen = (entry["service"], entry["address"], entry["chosen_ms"])
    assert chosen == ("S", "TCP://a:4022", got[0]["batch_ms"])
    assert kept(keeper.step([decidable(2)])) == {"c1:2": "TCP://a:4022"}

    two = [*one, ("i1", Route("AW", "B", "TCP://b:4022", service="S"))]
    inputs.set(build_snapshot(spark, {"i1": instance}, two, now=NOW))
    got = keeper.step([decidable(0, "c2")])
    assert [(r["id"], r["first_of_entry"]) for r in got] == [("c2:0", True)]
    assert len(keeper.state().collect()) == 1  # c1's alone


def delayed(
    n: int, conversation: str = "c1", at: datetime = NOW, address: str | None = None
) -> dict[str, object]:
    """A record of the delayed topic: the message, the identity its conversation kept, when delayed (ms)."""
    return {
        **message(n, conversation=conversation, pos=n),
        "topic": "delayed",
        "kept_bid": "" if address else None,
        "kept_route_service": "S" if address else None,
        "kept_address": address,
        DELAYED_AT: int(at.timestamp() * 1000),
    }


def test_a_delayed_conversation_waits_then_leaves_whole_and_in_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    """D1, D2: messages wait in the state; when the first is retry_s old all leave, ahead of new ones."""
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    keeper = Keeper(spark, tmp_path, retry_s=3600)
    # Delayed well before the steps run: due at once when `retry_s` drops to 1 s, however quickly
    # the steps follow one another.
    delayed_at = datetime.now(timezone.utc) - timedelta(seconds=30)
    got = keeper.step(
        [message(10, pos=1 << 60), message(0, conversation="other", pos=1 << 60)],
        delayed=[delayed(1, at=delayed_at, address="tcp://a:4022"), delayed(0, at=delayed_at)],
    )
    # The delayed records are taken in; c1's new message leaves marked waiting (D1), others do not.
    assert {r["id"]: r["waiting"] for r in got} == {"c1:10": True, "other:0": False}
    waiting = keeper.state().select(F.explode("value.waiting.delayed_ms").alias("at")).collect()
    assert [r["at"] for r in waiting] == [int(delayed_at.timestamp() * 1000)] * 2
    # Still waiting at the next batch (a restart), while they are not due.
    assert [(r["id"], r["waiting"]) for r in keeper.step([message(11, pos=1 << 60)])] == [("c1:11", True)]

    # Restarted with a shorter retry interval, they are due now: both leave in their order, with
    # the identity each kept, ahead of the new message.
    keeper.retry_s = 1.0
    got = keeper.step([message(12, pos=1 << 60)])
    assert [(r["id"], r["topic"], r["waiting"], r["kept_address"]) for r in got] == [
        ("c1:0", "delayed", False, None),
        ("c1:1", "delayed", False, "tcp://a:4022"),
        ("c1:12", "outbound", False, None),
    ]
    assert keeper.state().count() == 0


def test_a_due_conversation_leaves_at_a_batch_without_its_messages(
    spark: SparkSession, tmp_path: Path
) -> None:
    """D2: the timeout fires at the next batch after the conversation is due, whatever that batch holds."""
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    keeper = Keeper(spark, tmp_path, retry_s=0.001)
    # Stamped ahead of the clock, so that it is not due yet however long the first batch takes.
    due = datetime.now(timezone.utc) + timedelta(seconds=12)
    assert keeper.step([], delayed=[delayed(0, conversation="c2", at=due)]) == []
    while datetime.now(timezone.utc) <= due + timedelta(seconds=0.2):
        time.sleep(0.1)
    got = keeper.step([message(0, conversation="unrelated")])
    assert sorted(r["id"] for r in got) == ["c2:0", "unrelated:0"]


def test_a_delayed_message_read_back_twice_leaves_once(spark: SparkSession, tmp_path: Path) -> None:
    """D1: a batch run again after a crash writes its delayed messages twice; the state holds the
    copies as one message (the first copy, kept in the state store across batches), released once."""
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    keeper = Keeper(spark, tmp_path, retry_s=3600)
    # Delayed well before the steps run: once `retry_s` drops to 1 s it is due at once, however
    # quickly the steps follow one another.
    delayed_at = datetime.now(timezone.utc) - timedelta(seconds=30)
    assert keeper.step([], delayed=[delayed(0, at=delayed_at)]) == []
    # The copy comes back one batch later, at a later position, beside a message delayed after it.
    copy = {**delayed(0, at=delayed_at + timedelta(seconds=1)), "pos": 5}
    assert keeper.step([], delayed=[copy, delayed(1, at=delayed_at)]) == []
    held = keeper.state().select(F.explode("value.waiting.message.id").alias("id")).collect()
    assert sorted(r["id"] for r in held) == ["c1:0", "c1:1"]
    keeper.retry_s = 1.0
    got = keeper.step([message(12, pos=1 << 60)])
    assert [(r["id"], r["topic"]) for r in got] == [
        ("c1:0", "delayed"),
        ("c1:1", "delayed"),
        ("c1:12", "outbound"),
    ]
