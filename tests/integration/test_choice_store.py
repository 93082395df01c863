"""The job's kept route choices (K2): one row per key, saved, read back, aged out, compacted."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from streaming.spark.choices import COMPACT_EVERY, ChoiceStore

pytestmark = pytest.mark.integration

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
DECIDED = (
    "instance string, conversation_id string, origin string, service string,"
    " k_bid string, k_route_service string, k_address string, k_change string"
)


def decided(spark, *rows: tuple[str, str | None, str | None]):  # type: ignore[no-untyped-def]
    """Decisions of conversations of AW to Orders: (conversation, kept address, k_change)."""
    return spark.createDataFrame(
        [("i1", c, "AW", "Orders", "" if a else None, "Orders" if a else None, a, ch) for c, a, ch in rows],
        DECIDED,
    )


def record(store: ChoiceStore, frame, batch: int, now: datetime = NOW) -> None:  # type: ignore[no-untyped-def]
    changes = [r["k_change"] for r in frame.collect()]
    store.record(frame, batch, now, changes.count("first"), changes.count("again"))


def kept(store: ChoiceStore) -> dict[str, str]:
    frame = store.lookup()
    rows = [] if frame is None else frame.collect()
    assert len(rows) == len({r["k_conversation_id"] for r in rows}), "a key is kept once"
    return {r["k_conversation_id"]: r["k_address"] for r in rows}


def read_back(spark, path: Path, now: datetime = NOW, keep_s: float = 3600) -> ChoiceStore:  # type: ignore[no-untyped-def]
    store = ChoiceStore(spark, path, keep_s=keep_s, partitions=2)
    store.load(now)
    return store


def test_changed_choices_are_kept_and_read_back(spark, tmp_path: Path) -> None:
    store = ChoiceStore(spark, tmp_path, keep_s=3600, partitions=2)
    assert store.lookup() is None
    record(
        store,
        decided(spark, ("c1", "tcp://a:4022", "first"), ("c2", "tcp://b:4022", "first"), ("c3", None, None)),
        0,
    )
    record(store, decided(spark, ("c1", "tcp://a:4022", None), ("c4", "tcp://a:4022", "first")), 1)
    assert kept(store) == {"c1": "tcp://a:4022", "c2": "tcp://b:4022", "c4": "tcp://a:4022"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seg-000000000000", "seg-000000000001"]
    assert kept(read_back(spark, tmp_path)) == kept(store)


def test_a_choice_made_again_replaces_the_old_one_at_once(spark, tmp_path: Path) -> None:
    store = ChoiceStore(spark, tmp_path, keep_s=3600, partitions=2)
    record(store, decided(spark, ("c1", "tcp://a:4022", "first"), ("c2", "tcp://a:4022", "first")), 0)
    record(store, decided(spark, ("c1", "tcp://b:4022", "again")), 1)
    assert kept(store) == {"c1": "tcp://b:4022", "c2": "tcp://a:4022"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base-000000000002"]
    assert kept(read_back(spark, tmp_path)) == kept(store)


def test_a_batch_run_again_rewrites_its_own_segment(spark, tmp_path: Path) -> None:
    store = ChoiceStore(spark, tmp_path, keep_s=3600, partitions=2)
    record(store, decided(spark, ("c1", "tcp://a:4022", "first")), 0)
    record(store, decided(spark, ("c2", "tcp://a:4022", "first")), 1)
    restarted = read_back(spark, tmp_path)
    record(restarted, decided(spark, ("c2", "tcp://b:4022", "again"), ("c3", "tcp://b:4022", "first")), 1)
    assert kept(read_back(spark, tmp_path)) == {
        "c1": "tcp://a:4022",
        "c2": "tcp://b:4022",
        "c3": "tcp://b:4022",
    }


def test_a_choice_older_than_keep_is_dropped_at_the_next_merge(spark, tmp_path: Path) -> None:
    store = ChoiceStore(spark, tmp_path, keep_s=60, partitions=2)
    record(store, decided(spark, ("c1", "tcp://a:4022", "first")), 0)
    record(store, decided(spark, ("c2", "tcp://b:4022", "first")), 1, NOW + timedelta(seconds=30))
    assert kept(read_back(spark, tmp_path, NOW + timedelta(seconds=61), keep_s=60)) == {"c2": "tcp://b:4022"}


def test_segments_are_merged_into_one_base_every_few_batches(spark, tmp_path: Path) -> None:
    store = ChoiceStore(spark, tmp_path, keep_s=3600, partitions=2)
    for batch in range(COMPACT_EVERY):
        change = "first" if batch < 3 else None  # batches without a change write nothing
        record(store, decided(spark, (f"c{batch}", "tcp://a:4022", change)), batch)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"base-{COMPACT_EVERY:012d}"]
    record(store, decided(spark, ("c9", "tcp://b:4022", "first")), COMPACT_EVERY)
    expected = {"c0": "tcp://a:4022", "c1": "tcp://a:4022", "c2": "tcp://a:4022", "c9": "tcp://b:4022"}
    assert kept(store) == expected
    assert kept(read_back(spark, tmp_path)) == expected
