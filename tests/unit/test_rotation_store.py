"""The streaming job's rotation counters (C5, M3), versioned by batch in the query's checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.errors import RouterError
from streaming.spark.rotation import RotationStore


def commit(checkpoint: Path, *batch_ids: int) -> None:
    """Write Spark's commit-log entries for `batch_ids` (only their names are read)."""
    commits = checkpoint / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    for batch_id in batch_ids:
        (commits / str(batch_id)).write_text("v1\n", encoding="utf-8")


def test_a_new_checkpoint_starts_every_rotation_at_its_first() -> None:
    assert RotationStore.load(Path("/nonexistent/checkpoint")).counters == {}


def test_a_restart_reads_the_counters_of_the_last_committed_batch(tmp_path: Path) -> None:
    store = RotationStore.load(tmp_path)
    store.advance(0, {"i1": {"a": 1}})
    store.advance(1, {"i1": {"b": 2}, "i2": {"a": 1}})
    commit(tmp_path, 0, 1)
    assert RotationStore.load(tmp_path).counters == {"i1": {"a": 1, "b": 2}, "i2": {"a": 1}}


def test_a_batch_not_committed_is_run_again_from_the_counters_it_started_from(tmp_path: Path) -> None:
    store = RotationStore.load(tmp_path)
    store.advance(3, {"i1": {"a": 1}})
    commit(tmp_path, 3)
    store.advance(4, {"i1": {"a": 2}})  # written, then the job died before Spark committed batch 4
    again = RotationStore.load(tmp_path)
    assert again.counters == {"i1": {"a": 1}}
    assert not (tmp_path / "rotation" / "4.json").exists()


def test_a_batch_that_turns_nothing_writes_nothing_and_old_versions_go(tmp_path: Path) -> None:
    store = RotationStore.load(tmp_path)
    store.advance(0, {})
    assert not (tmp_path / "rotation").exists()
    for batch_id in range(5):
        store.advance(batch_id, {"i1": {"a": batch_id % 2}})
    assert sorted(p.name for p in (tmp_path / "rotation").iterdir()) == ["3.json", "4.json"]


def test_a_damaged_version_is_named_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "rotation").mkdir()
    (tmp_path / "rotation" / "0.json").write_text("{not json", encoding="utf-8")
    commit(tmp_path, 0)
    with pytest.raises(RouterError, match=r"0\.json cannot be read .* remove the file"):
        RotationStore.load(tmp_path)
