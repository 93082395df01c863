"""The JVM state processor of K2 (`router.state.ChoiceKeeper`, `streaming.spark.state`).

Each step below runs a streaming query (JSON file sources, Trigger.AvailableNow) on the same
checkpoint, so every step is also a restart: what a message is given comes from Spark's state
store as the previous query left it.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession

from streaming.spark.state import as_choices, as_messages, keep_choices

pytestmark = pytest.mark.integration

MESSAGE_SCHEMA = "instance string, conversation_id string, origin string, service string, pos long, id string"
RECORD_SCHEMA = "value string, timestamp timestamp"
NOW = datetime.now(timezone.utc)


class Keeper:
    """Feeds messages and choice records to the processor, one micro-batch per `step`."""

    def __init__(self, spark: SparkSession, folder: Path, keep_s: float = 3600.0) -> None:
        self.spark = spark
        self.messages = folder / "messages"
        self.choices = folder / "choices"
        self.checkpoint = folder / "checkpoint"
        self.keep_s = keep_s
        for d in (self.messages, self.choices):
            d.mkdir(parents=True)

    def step(
        self, messages: list[dict[str, object]], choices: list[dict[str, str]] | None = None
    ) -> list[Row]:
        """Add the rows as new files, run the query over them, return the messages it emitted."""
        for folder, rows in ((self.messages, messages), (self.choices, choices or [])):
            if rows:
                (folder / f"{uuid.uuid4().hex}.json").write_text(
                    "\n".join(json.dumps(r, default=str) for r in rows), encoding="utf-8"
                )
        stream = self.spark.readStream.schema(MESSAGE_SCHEMA).json(str(self.messages))
        records = self.spark.readStream.schema(RECORD_SCHEMA).json(str(self.choices))
        rows = as_messages(stream).unionByName(as_choices(records, stream))
        out: list[Row] = []

        def collect(batch: DataFrame, _batch_id: int) -> None:
            out.extend(batch.collect())

        query = (
            keep_choices(rows, self.keep_s)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        query.stop()
        assert query.exception() is None, query.exception()
        return out


def message(
    n: int, conversation: str = "c1", service: str = "S", instance: str = "i1", pos: int | None = None
) -> dict[str, object]:
    return {
        "instance": instance,
        "conversation_id": conversation,
        "origin": "AW",
        "service": service,
        "pos": n if pos is None else pos,
        "id": f"{conversation}:{n}",
    }


def choice(address: str, conversation: str = "c1", service: str = "S", at: datetime = NOW) -> dict[str, str]:
    value = {
        "instance": "i1",
        "conversation_id": conversation,
        "origin": "AW",
        "service": service,
        "bid": "",
        "route_service": service,
        "address": address,
    }
    return {"value": json.dumps(value), "timestamp": at.isoformat()}


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
    # Only messages leave the processor, with the input's columns and the kept identity.
    assert set(got[0].asDict()) == {
        "instance", "conversation_id", "origin", "service", "pos", "id",
        "kept_bid", "kept_route_service", "kept_address",
    }  # fmt: skip


def test_a_newer_choice_replaces_the_kept_one(keeper: Keeper) -> None:
    keeper.step([], [choice("tcp://a:4022", at=NOW - timedelta(seconds=5)), choice("tcp://b:4022")])
    assert kept(keeper.step([message(0)])) == {"c1:0": "tcp://b:4022"}
    keeper.step([], [choice("tcp://c:4022", at=NOW + timedelta(seconds=1))])
    assert kept(keeper.step([message(1)])) == {"c1:1": "tcp://c:4022"}
    # An older record (read late) does not undo a newer choice.
    keeper.step([], [choice("tcp://a:4022", at=NOW - timedelta(seconds=60))])
    assert kept(keeper.step([message(2)])) == {"c1:2": "tcp://c:4022"}


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
    state = spark.read.format("statestore").load(str(keeper.checkpoint))
    assert sorted(r["key"]["value"].split("\u0000")[1] for r in state.collect()) == ["new"]
