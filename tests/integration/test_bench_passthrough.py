"""The bench's pass-throughs: each copies every record, and the one with the router's headers
writes the headers a sent message carries, in the contract's order, with values per row; Spark's
own start (`bench.spark_start`) is timed to its first copy and its process stopped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.common import produce_messages
from bench.spark_start import TIMEOUT_S as START_TIMEOUT_S
from bench.spark_start import first_copied_s, topics_of
from bench.throughput import SENT_HEADERS, run_passthrough
from streaming.contract import MESSAGE_HEADERS, Outcome
from streaming.devtools.processes import command_text, holding_environment
from streaming.kafka.avro import decode_message
from streaming.kafka.consuming import header_pairs
from tests.topic_records import records_now

pytestmark = pytest.mark.integration

MESSAGES = 40

MARK = "ROUTER_TEST_SPARK_START"
"""The variable by which the test finds the processes of the pass-through it started."""


def test_the_sent_headers_are_the_contracts_in_its_order() -> None:
    assert list(SENT_HEADERS) == [h for h in MESSAGE_HEADERS if h in SENT_HEADERS]
    assert len(SENT_HEADERS) == 9


def test_the_pass_through_with_headers_writes_each_record_with_the_routers_headers(
    spark: SparkSession, kafka_bootstrap: str, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    source, plain, headed = unique_topic("pt-in"), unique_topic("pt-plain"), unique_topic("pt-headed")
    produce_messages(kafka_bootstrap, source, MESSAGES, services=5)

    run_passthrough(spark, kafka_bootstrap, source, plain, tmp_path / "plain", 100)
    run_passthrough(spark, kafka_bootstrap, source, headed, tmp_path / "headed", 100, headers=True)

    copied = records_now(kafka_bootstrap, plain)
    assert len(copied) == MESSAGES
    assert all(not header_pairs(r) for r in copied)
    written = records_now(kafka_bootstrap, headed)
    assert len(written) == MESSAGES
    for record in written:
        message = decode_message(record.value() or b"")
        pairs = header_pairs(record)
        assert [name for name, _ in pairs] == list(SENT_HEADERS)
        text = {name: (value or b"").decode() for name, value in pairs}
        assert text["outcome"] == Outcome.SEND.value
        assert text["route"] == message["to_service"]
        assert text["scope"] == message["origin_database"]
        assert text["address"] == f"TCP://{message['to_service'].lower()}.example:4022"
        assert text["decided_at"].endswith("Z") and len(text["decided_at"]) == len(
            "2026-01-01T00:00:00.000000Z"
        )
    # The same records, byte for byte, in both copies.
    assert sorted(r.value() or b"" for r in written) == sorted(r.value() or b"" for r in copied)


def test_sparks_own_start_is_timed_to_its_first_copy_and_its_process_is_stopped(
    kafka_bootstrap: str, unique_topic: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = unique_topic("spark-start")
    # Inherited by the pass-through's process and its JVM: whatever is left of them is found by it.
    mark = f"{prefix}-pass-through"
    monkeypatch.setenv(MARK, mark)
    seconds = first_copied_s(kafka_bootstrap, tmp_path, prefix)

    assert 0 < seconds < START_TIMEOUT_S
    source, sink = topics_of(prefix)
    sent, copied = records_now(kafka_bootstrap, source), records_now(kafka_bootstrap, sink)
    assert len(sent) == len(copied) == 1
    assert copied[0].value() == sent[0].value() and copied[0].key() == sent[0].key()
    # Stopped: neither the pass-through's Python process nor its JVM is left.
    left = holding_environment(f"{MARK}={mark}")
    assert left == [], [command_text(pid) for pid in left]
