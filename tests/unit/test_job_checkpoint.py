"""The job's start-up repair of its query checkpoint (no Spark session needed)."""

from __future__ import annotations

from pathlib import Path

from streaming.spark.checkpoint import holds_old_state
from streaming.spark.job import drop_uncommitted_batch


def log(folder: Path, *batches: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for batch in batches:
        (folder / str(batch)).write_text("v1\n{}\n")
        (folder / f".{batch}.crc").write_text("crc")


def test_a_planned_batch_without_a_commit_is_planned_again(tmp_path: Path) -> None:
    log(tmp_path / "offsets", 0, 1, 2)
    log(tmp_path / "commits", 0, 1)
    assert drop_uncommitted_batch(tmp_path) == 2
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir()) == [".0.crc", ".1.crc", "0", "1"]
    assert drop_uncommitted_batch(tmp_path) is None


def test_a_checkpoint_whose_batches_are_all_committed_is_left_alone(tmp_path: Path) -> None:
    log(tmp_path / "offsets", 0, 1)
    log(tmp_path / "commits", 0, 1)
    assert drop_uncommitted_batch(tmp_path) is None
    assert len(list((tmp_path / "offsets").iterdir())) == 4


def test_a_first_batch_that_never_committed_and_a_new_checkpoint(tmp_path: Path) -> None:
    assert drop_uncommitted_batch(tmp_path / "missing") is None
    log(tmp_path / "offsets", 0)
    (tmp_path / "state" / "0" / "0").mkdir(parents=True)
    (tmp_path / "state" / "0" / "0" / "1.zip").write_text("state of the lost attempt")
    assert drop_uncommitted_batch(tmp_path) == 0
    assert list((tmp_path / "offsets").iterdir()) == []
    # The query starts anew, and Spark wants an empty state folder for its first batch.
    assert not (tmp_path / "state").exists()


def test_the_state_of_committed_batches_is_kept(tmp_path: Path) -> None:
    log(tmp_path / "offsets", 0, 1)
    log(tmp_path / "commits", 0)
    (tmp_path / "state" / "0" / "0").mkdir(parents=True)
    assert drop_uncommitted_batch(tmp_path) == 1
    assert (tmp_path / "state" / "0" / "0").is_dir()


def test_state_written_before_a_first_batch_logged_its_offsets_is_removed(tmp_path: Path) -> None:
    """Killed while planning batch 0: the state's schema files exist, no offsets were logged."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "state" / "0" / "_stateSchema").mkdir(parents=True)
    assert drop_uncommitted_batch(tmp_path) is None
    assert not (tmp_path / "state").exists()


def test_a_commit_being_written_when_the_job_died_is_removed(tmp_path: Path) -> None:
    """Killed while committing its first batch: the commit's temporary file must not stay behind."""
    log(tmp_path / "offsets", 0)
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / ".0.8d9d34c5-7c22-4fe3-937a-7f43c8b919aa.tmp").write_text("v1\n")
    (tmp_path / "commits" / "..0.8d9d34c5-7c22-4fe3-937a-7f43c8b919aa.tmp.crc").write_text("crc")
    (tmp_path / "state" / "0").mkdir(parents=True)
    assert drop_uncommitted_batch(tmp_path) == 0
    assert list((tmp_path / "commits").iterdir()) == []
    assert list((tmp_path / "offsets").iterdir()) == []
    assert not (tmp_path / "state").exists()


# The operator metadata Spark 4.1.1 wrote for the router's state, before and since transformWithState.
FLAT_MAP_METADATA = (
    'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"flatMapGroupsWithState"},'
    '"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}'
)
TRANSFORM_METADATA = (
    'v2\n{"operatorInfo":{"operatorId":0,"operatorName":"transformWithStateExec"},'
    '"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}'
)


def test_a_checkpoint_of_the_earlier_state_operator_is_recognized(tmp_path: Path) -> None:
    metadata = tmp_path / "state" / "0" / "_metadata"
    metadata.mkdir(parents=True)
    (metadata / "metadata").write_text(FLAT_MAP_METADATA)
    assert holds_old_state(tmp_path)


def test_a_checkpoint_of_transform_with_state_or_without_state_is_not(tmp_path: Path) -> None:
    assert not holds_old_state(tmp_path)  # nothing written yet
    metadata = tmp_path / "state" / "0" / "_metadata" / "v2"
    metadata.mkdir(parents=True)
    (metadata / "0").write_text(TRANSFORM_METADATA)
    assert not holds_old_state(tmp_path)
