"""What a router checkpoint holds, read from its files without Spark: state partitions, offsets, batches.

The files are written here in Spark 4.1.1's own format, as a router's query leaves them (copied
from a checkpoint `router run` made: the offset log's `v1` line, the batch's metadata with the
settings the query is fixed to, then one line per source: the messages' Kafka source, the tick's
rate source, the delayed topic's and the choices topic's sources).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streaming.config import load_settings
from streaming.errors import ConfigError, RouterError
from streaming.spark.checkpoint import (
    CHANGING_PARTITIONS,
    EARLIEST,
    check_state_partitions,
    find_query,
    starting_offsets,
    state_partitions,
    summarize,
)
from streaming.spark.checkpoint_files import is_url, locate, write_atomically
from streaming.topics import choices_topic, delayed_topic, inbound_topic, outbound_topic

PREFIX = "demo20261128085901"
QUERY_ID = "a7236f2d-0af3-4d82-b8c5-44361b874fd8"


def conf(partitions: int, shuffles: int | None = None) -> dict[str, str]:
    """An offset log entry's conf; with `shuffles`, as Spark 4.1 writes it once a restart changed
    `spark.sql.shuffle.partitions` (the state's partitions then kept apart, SPARK-53942)."""
    if shuffles is not None:
        return {**conf(shuffles), "spark.sql.streaming.internal.stateStore.partitions": str(partitions)}
    return {
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
        "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
        "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.streaming.stateStore.compression.codec": "lz4",
    }


def write_batch(
    query: Path,
    batch: int,
    partitions: int,
    instances: tuple[str, ...] = ("i1",),
    read: int = 600,
    shuffles: int | None = None,
) -> None:
    """Offset log entry `batch` as Spark writes it, each topic read up to `read` on partition 0."""
    messages = {}
    for i in instances:
        messages[outbound_topic(i, PREFIX)] = {"0": read, "1": read + 1}
        messages[inbound_topic(i, PREFIX)] = {"0": 0}
    lines = [
        "v1",
        json.dumps(
            {"batchWatermarkMs": 0, "batchTimestampMs": 1795856364464, "conf": conf(partitions, shuffles)}
        ),
        json.dumps(messages),
        str(9 + batch),  # the tick's rate source
        json.dumps({delayed_topic(i, PREFIX): {"0": 60} for i in instances}),
        json.dumps({choices_topic(i, PREFIX): {"0": 0} for i in instances}),
    ]
    (query / "offsets").mkdir(parents=True, exist_ok=True)
    (query / "offsets" / str(batch)).write_text("\n".join(lines), encoding="utf-8")


def commit(query: Path, batch: int, at: float = 1795856365.5) -> None:
    (query / "commits").mkdir(parents=True, exist_ok=True)
    path = query / "commits" / str(batch)
    path.write_text('v1\n{"nextBatchWatermarkMs":0}', encoding="utf-8")
    os.utime(path, (at, at))


def checkpoint(tmp_path: Path, partitions: int = 2, batches: int = 2) -> Path:
    """A router's checkpoint_dir whose query committed `batches` batches with `partitions` partitions."""
    query = tmp_path / "ckpt" / "query"
    query.mkdir(parents=True)
    (query / "metadata").write_text(json.dumps({"id": QUERY_ID}), encoding="utf-8")
    for batch in range(batches):
        write_batch(query, batch, partitions)
        commit(query, batch)
    return tmp_path / "ckpt"


def test_a_checkpoint_keeps_the_partitions_its_offset_log_names(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, partitions=2)
    assert state_partitions(ckpt / "query") == 2
    write_batch(ckpt / "query", 2, 8)  # the last entry is what Spark resumes with
    assert state_partitions(ckpt / "query") == 8
    assert state_partitions(tmp_path / "new") is None
    # Restarted once with other shuffle partitions: the state's stay the first batch's.
    write_batch(ckpt / "query", 3, 2, shuffles=16)
    assert state_partitions(ckpt / "query") == 2


def test_the_same_partitions_resume_and_a_new_checkpoint_takes_any(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, partitions=2)
    check_state_partitions(ckpt / "query", 2)
    check_state_partitions(tmp_path / "new" / "query", 16)


def test_other_partitions_are_refused_with_both_values_and_the_fix(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, partitions=2)
    with pytest.raises(ConfigError) as error:
        check_state_partitions(ckpt / "query", 8, named=True)
    text = str(error.value)
    assert "keeps the router's state in 2 partitions" in text
    assert "shuffle_partitions: 8" in text
    assert "Put `shuffle_partitions: 2` in the settings file" in text
    assert CHANGING_PARTITIONS in text


def test_a_default_that_differs_says_to_name_the_checkpoints_value(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, partitions=2)
    with pytest.raises(ConfigError, match=r"the default shuffle_partitions, 8 \(the settings name none\)"):
        check_state_partitions(ckpt / "query", 8, named=False)


def test_settings_say_whether_they_name_the_partitions(tmp_path: Path) -> None:
    named, unnamed = tmp_path / "named.yaml", tmp_path / "unnamed.yaml"
    named.write_text("instance: i1\nshuffle_partitions: 8\n", encoding="utf-8")
    unnamed.write_text("instance: i1\n", encoding="utf-8")
    assert load_settings(named).shuffle_partitions_named
    assert load_settings(named).shuffle_partitions == 8
    assert not load_settings(unnamed).shuffle_partitions_named


def test_a_summary_of_what_the_checkpoint_holds(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, partitions=2, batches=3)
    write_batch(ckpt / "query", 3, 2, read=700)  # planned, never committed
    (ckpt / "query" / "rotation").mkdir()
    (ckpt / "query" / "rotation" / "1.json").write_text("{}", encoding="utf-8")
    summary = summarize(ckpt)
    doc = summary.document()
    assert doc["query_id"] == QUERY_ID
    assert doc["instances"] == ["i1"]
    assert doc["topic_prefix"] == PREFIX
    assert doc["last_committed_batch"] == 2
    assert doc["committed_at"] == "2026-11-28T08:59:25.500Z"
    assert doc["uncommitted_batch"] == 3
    # the offsets of the last committed batch, not of the one planned after it
    assert doc["offsets"][outbound_topic("i1", PREFIX)] == {"0": 600, "1": 601}
    assert doc["offsets"][delayed_topic("i1", PREFIX)] == {"0": 60}
    assert doc["state_partitions"] == 2
    assert doc["rotation_batch"] == 1
    assert summarize(ckpt / "query").query_id == QUERY_ID  # the query folder itself is taken too


def test_several_instances_and_escaped_names(tmp_path: Path) -> None:
    query = tmp_path / "query"
    query.mkdir()
    (query / "metadata").write_text(json.dumps({"id": QUERY_ID}), encoding="utf-8")
    write_batch(query, 0, 8, instances=("i1", "f.1", "Île"))
    commit(query, 0)
    summary = summarize(tmp_path)
    assert summary.instances == ("i1", "f.1", "Île")
    assert summary.state_partitions == 8


def test_a_checkpoint_before_its_first_batch(tmp_path: Path) -> None:
    query = tmp_path / "query"
    (query / "offsets").mkdir(parents=True)
    (query / "metadata").write_text(json.dumps({"id": QUERY_ID}), encoding="utf-8")
    summary = summarize(tmp_path)
    assert (summary.last_committed, summary.instances, summary.state_partitions) == (None, (), None)
    # A first batch planned and never committed: the job starts the query anew, with any number.
    write_batch(query, 0, 8)
    summary = summarize(tmp_path)
    assert (summary.uncommitted, summary.state_partitions) == (0, None)
    check_state_partitions(query, 2)


def test_a_folder_that_is_not_a_router_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(RouterError, match="no such folder"):
        find_query(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(RouterError, match=r"is not a router checkpoint: expected .* it holds notes.txt"):
        find_query(tmp_path)


def test_another_querys_checkpoint_is_named_as_such(tmp_path: Path) -> None:
    query = tmp_path / "query"
    (query / "offsets").mkdir(parents=True)
    (query / "metadata").write_text(json.dumps({"id": QUERY_ID}), encoding="utf-8")
    (query / "offsets" / "0").write_text('v1\n{"conf":{}}\n{"clicks":{"0":5}}', encoding="utf-8")
    commit(query, 0)
    with pytest.raises(RouterError, match=r"not a router's: its query reads \['clicks'\]"):
        summarize(tmp_path)


def test_a_damaged_offset_log_entry_says_what_was_expected(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path)
    (ckpt / "query" / "offsets" / "1").write_text("garbage", encoding="utf-8")
    with pytest.raises(RouterError, match=r"expected a `v1` line"):
        state_partitions(ckpt / "query")


def test_a_new_checkpoint_starts_where_the_drained_one_read_up_to(tmp_path: Path) -> None:
    drained = summarize(checkpoint(tmp_path))
    outbound, inbound = outbound_topic("i1", PREFIX), inbound_topic("i1", PREFIX)
    # A partition the drained checkpoint never read (added since) starts at its first record.
    assert starting_offsets(drained, {outbound: [0, 1, 2], inbound: [0]}) == {
        outbound: {"0": 600, "1": 601, "2": EARLIEST},
        inbound: {"0": 0},
    }
    # So does an instance it did not route.
    assert starting_offsets(drained, {outbound: [0], outbound_topic("i9", PREFIX): [0]})[
        outbound_topic("i9", PREFIX)
    ] == {"0": EARLIEST}


def test_starting_after_a_checkpoint_of_other_topics_or_of_nothing_is_refused(tmp_path: Path) -> None:
    drained = summarize(checkpoint(tmp_path))
    with pytest.raises(ConfigError, match=r"read none of this job's topics \(other.i1.outbound\)"):
        starting_offsets(drained, {outbound_topic("i1", "other"): [0]})
    query = tmp_path / "empty" / "query"
    (query / "offsets").mkdir(parents=True)
    (query / "metadata").write_text(json.dumps({"id": QUERY_ID}), encoding="utf-8")
    with pytest.raises(ConfigError, match="has committed no batch"):
        starting_offsets(summarize(tmp_path / "empty"), {outbound_topic("i1", PREFIX): [0]})


def test_router_run_refuses_other_partitions_before_it_connects_or_starts_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streaming.cli import main

    ckpt = checkpoint(tmp_path, partitions=2)
    settings = tmp_path / "router.yaml"
    # No broker answers at this address: the check comes before the broker is asked.
    settings.write_text(
        f"instance: i1\nbootstrap: 127.0.0.1:9\ncheckpoint_dir: {ckpt}\nshuffle_partitions: 16\n",
        encoding="utf-8",
    )
    assert main(["run", "--config", str(settings)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("router run: error: the checkpoint ")
    assert "keeps the router's state in 2 partitions" in err and "shuffle_partitions: 16" in err


def test_checkpoint_show_without_spark_prints_the_checkpoints_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streaming.cli import main

    ckpt = checkpoint(tmp_path, partitions=8, batches=3)
    assert main(["checkpoint", "show", str(ckpt), "--no-state", "--json"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    doc = json.loads(line)
    assert (doc["last_committed_batch"], doc["state_partitions"], doc["instances"]) == (2, 8, ["i1"])
    assert "state" not in doc
    assert main(["checkpoint", "show", str(ckpt), "--no-state"]) == 0
    text = capsys.readouterr().out
    assert f"query id    {QUERY_ID}" in text
    assert f"instances   i1 (topic prefix {PREFIX})" in text
    assert "last batch  2, committed 2026-11-28T08:59:25.500Z" in text
    assert f"{outbound_topic('i1', PREFIX)}  1          601" in text
    assert main(["checkpoint", "show", str(tmp_path / "nothing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_run_and_replay_take_the_drained_checkpoint_to_start_after() -> None:
    from streaming.cli import build_parser

    for command in ("run", "replay"):
        args = build_parser().parse_args([command, "--start-after", "old-checkpoint"])
        assert args.start_after == "old-checkpoint"
    assert load_settings(None, instance="i1", start_after="old").start_after == Path("old")
    assert load_settings(None, instance="i1").start_after is None


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("hdfs://namenode:8020/router/i1", True),
        ("s3a://bucket/router/i1", True),
        (".state/checkpoints/i1", False),
        ("/mnt/shared/router/i1", False),
        (Path("/mnt/shared/router/i1"), False),
    ],
)
def test_a_checkpoint_is_a_url_only_with_a_scheme_and_two_slashes(given: str | Path, url: bool) -> None:
    assert is_url(given) is url
    if not url:
        assert locate(given) == Path(given)  # a folder of this machine: no Spark needed


def test_a_checkpoint_url_without_a_session_is_refused_with_the_reason() -> None:
    with pytest.raises(RouterError, match="read through a SparkSession"):
        locate("hdfs://namenode:8020/router/i1")


def test_a_local_file_is_written_through_a_rename(tmp_path: Path) -> None:
    target = tmp_path / "3.json"
    write_atomically(target, "one")
    write_atomically(target, "two")
    assert target.read_text(encoding="utf-8") == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["3.json"]  # no temporary file left
