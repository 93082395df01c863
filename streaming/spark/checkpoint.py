"""The streaming query's checkpoint: what a job that stopped left behind, made fit to resume.

A query's checkpoint holds its offset log (the batches planned), its commit log (the batches
written and committed) and Spark's state store (the conversation memory). A job killed at any
moment leaves them consistent, with two exceptions Spark 4.1.1 does not resume from, which
`drop_uncommitted_batch` repairs before the query starts.

Each function takes the checkpoint as a `CheckpointPath`: a `pathlib.Path` on the driver's file
system, or a `HadoopPath` (`hdfs://...`) read through the driver's JVM
(`streaming.spark.checkpoint_files`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from streaming.errors import ConfigError, RouterError
from streaming.instants import format_instant
from streaming.spark.checkpoint_files import CheckpointPath, modified, remove_tree
from streaming.topics import instance_topic_parts


def logged_batches(log: CheckpointPath) -> list[int]:
    """The batch ids a query's offset or commit log holds (its files named by number)."""
    return [int(p.name) for p in log.glob("[0-9]*")] if log.is_dir() else []


def drop_uncommitted_batch(checkpoint: CheckpointPath) -> int | None:
    """Remove the offset-log entry of a batch that was planned but never committed; return its id.

    After a crash the query would run that batch again from the logged offsets, without asking the
    Kafka source for its latest offsets first, and Spark 4.1.1's Kafka source then fails the
    batch's progress report with a NullPointerException (SPARK-55271), after the batch's output
    is written: the job stops once more at every such restart. Without the entry the batch is
    planned again from the last committed offsets, as a new batch with the same id. Delivery stays
    at least once: records the lost attempt wrote may be written again, none is skipped.

    When no batch was ever committed, the query starts anew, and Spark wants an empty state folder
    for a first batch: what a lost first attempt wrote under `state/` is removed, also when it was
    killed before it logged its offsets (the state's schema files are written while planning).
    Temporary files of a log entry that was being written are removed too.
    """
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    for folder in (offsets, commits):
        # A log file being written when the job died stays behind as `.N.<uuid>.tmp` (and its
        # `.crc`); Spark refuses a first batch whose commit log holds any file.
        for leftover in folder.iterdir() if folder.is_dir() else ():
            if ".tmp" in leftover.name:
                leftover.unlink(missing_ok=True)
    planned, done = logged_batches(offsets), logged_batches(commits)
    if not done:
        remove_tree(checkpoint / "state")
    if not planned or max(planned) <= max(done, default=-1):
        return None
    last = max(planned)
    for path in (offsets / str(last), offsets / f".{last}.crc"):
        path.unlink(missing_ok=True)
    return last


OLD_STATE_OPERATOR = "flatMapGroupsWithState"
"""The operator that kept the conversation memory before `transformWithState` (its timers)."""


def holds_old_state(checkpoint: CheckpointPath) -> bool:
    """Whether the checkpoint's conversation memory was written by `OLD_STATE_OPERATOR`.

    Spark names the stateful operator in the state's metadata (`state/0/_metadata/metadata`); a
    query with another operator cannot resume that state.
    """
    try:
        metadata = (checkpoint / "state" / "0" / "_metadata" / "metadata").read_text(encoding="utf-8")
    except OSError:
        return False
    return f'"{OLD_STATE_OPERATOR}"' in metadata


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
"""Spark's setting whose value at a query's first batch fixes its state partitions."""
STATE_PARTITIONS = "spark.sql.streaming.internal.stateStore.partitions"
"""Where Spark 4.1's offset log keeps the state partitions apart from the shuffles' (SPARK-53942)."""

CHANGING_PARTITIONS = "docs/topics.md, 'Changing the number of state partitions'"
"""Where a user reads how to move a router to another number of state partitions."""


def query_folder(checkpoint_dir: CheckpointPath) -> CheckpointPath:
    """The streaming query's checkpoint in a router's `checkpoint_dir` (`RouterJob.checkpoint`)."""
    return checkpoint_dir / "query"


@dataclass(frozen=True)
class LoggedBatch:
    """One entry of a query's offset log (`offsets/<batch id>`), as Spark 4.1 writes it.

    Line 1 is the log's version (`v1`), line 2 the batch's metadata (its time, and the settings the
    query is fixed to), each next line one source's offsets as JSON, or `-` for none, in the order
    of the query's sources.
    """

    batch_id: int
    timestamp_ms: int
    conf: Mapping[str, str]
    sources: tuple[Any, ...]

    @property
    def partitions(self) -> int | None:
        """The state partitions the query is fixed to, if the entry names them.

        Spark 4.1 keeps them as `STATE_PARTITIONS` once a restart changed `SHUFFLE_PARTITIONS`
        (which then counts the stateless shuffles' partitions only); before that, as the latter.
        """
        value = self.conf.get(STATE_PARTITIONS, self.conf.get(SHUFFLE_PARTITIONS))
        return int(value) if value is not None else None


def read_logged_batch(checkpoint: CheckpointPath, batch_id: int) -> LoggedBatch:
    """The offset-log entry of `batch_id` in the query checkpoint `checkpoint`."""
    path = checkpoint / "offsets" / str(batch_id)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise RouterError(f"cannot read the offset log entry {path}: {error}") from error
    expected = "a `v1` line, the batch's metadata as JSON, then one line per source"
    if len(lines) < 2 or lines[0] != "v1":
        first = lines[0] if lines else "nothing"
        raise RouterError(f"{path}: expected {expected}; its first line is {first[:60]!r}")
    try:
        metadata = json.loads(lines[1])
        sources = tuple(None if line == "-" else json.loads(line) for line in lines[2:])
        conf = {str(k): str(v) for k, v in metadata.get("conf", {}).items()}
        return LoggedBatch(batch_id, int(metadata.get("batchTimestampMs", 0)), conf, sources)
    except (ValueError, TypeError, AttributeError) as error:
        raise RouterError(f"{path}: expected {expected}: {error}") from error


def state_partitions(checkpoint: CheckpointPath) -> int | None:
    """The number of state partitions the query at `checkpoint` is fixed to; None for a new query.

    Spark takes it from the last entry of the offset log when the query starts again, whatever the
    session says (`LoggedBatch.partitions`); an entry that does not name it leaves it to the
    state's own metadata. A query that committed no batch is started anew by the job
    (`drop_uncommitted_batch`), with any number.
    """
    planned = logged_batches(checkpoint / "offsets")
    if not planned or not logged_batches(checkpoint / "commits"):
        return None
    partitions = read_logged_batch(checkpoint, max(planned)).partitions
    return partitions if partitions is not None else state_metadata(checkpoint).get("numPartitions")


def state_metadata(checkpoint: CheckpointPath) -> dict[str, Any]:
    """The state operator's metadata as its last version says: `operatorName`, `numPartitions`.

    Spark 4.1 writes a version (`state/0/_metadata/v2/<batch id>`) when the operator starts or its
    schema changes; empty when the query holds no such metadata.
    """
    folder = checkpoint / "state" / "0" / "_metadata" / "v2"
    versions = logged_batches(folder)
    if not versions:
        return {}
    path = folder / str(max(versions))
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        data = json.loads(lines[1])
        stores = data.get("stateStoreInfo") or [{}]
        return {
            "operatorName": data["operatorInfo"]["operatorName"],
            "numPartitions": int(stores[0]["numPartitions"]),
        }
    except (OSError, IndexError, KeyError, TypeError, ValueError) as error:
        raise RouterError(f"{path}: cannot read the state operator's metadata: {error}") from error


def check_state_partitions(checkpoint: CheckpointPath, partitions: int, named: bool = True) -> None:
    """Refuse to start the query at `checkpoint` with another number of state partitions than its own.

    Spark would quietly go on with the checkpoint's number (`state_partitions`). `named`: whether
    the settings file names `shuffle_partitions`; if not, the value is the default, and the error
    says to name the checkpoint's.
    """
    kept = state_partitions(checkpoint)
    if kept is None or kept == partitions:
        return
    given = (
        f"shuffle_partitions: {partitions}"
        if named
        else f"the default shuffle_partitions, {partitions} (the settings name none)"
    )
    raise ConfigError(
        f"the checkpoint {checkpoint} keeps the router's state in {kept} partitions, and the settings "
        f"ask for {given}; a checkpoint's state partitions are fixed when it starts (Spark would go on "
        f"with {kept}). Put `shuffle_partitions: {kept}` in the settings file to resume this "
        "checkpoint, or, to spread the state over more partitions, drain it and start a new "
        f"checkpoint_dir ({CHANGING_PARTITIONS})"
    )


@dataclass(frozen=True)
class CheckpointSummary:
    """What a router's checkpoint holds, read from its files alone: `summarize`.

    No Spark for a checkpoint on the driver's file system; a `HadoopPath`'s files are read through
    the session's JVM, without running a Spark job.
    """

    folder: CheckpointPath
    """The streaming query's folder (`query_folder`)."""
    query_id: str
    prefix: str | None
    """The topic prefix of the instances' topics (None before the first batch)."""
    instances: tuple[str, ...]
    """The instances routed, from the topics the query reads."""
    last_committed: int | None
    committed_at: datetime | None
    """When the last committed batch was committed (its commit file's time)."""
    uncommitted: int | None
    """A batch planned after it but not committed (the next start plans it again)."""
    offsets: Mapping[str, Mapping[int, int]]
    """Per topic and partition, the offset the committed batches have read up to (the next to read)."""
    state_partitions: int | None
    state_operator: str | None
    rotation_batch: int | None
    """The batch whose rotation counters (C5, M3) a start resumes, if any were kept."""

    def document(self) -> dict[str, Any]:
        """The summary as JSON-ready values (the `--json` line of `router checkpoint show`)."""
        return {
            "checkpoint": str(self.folder),
            "query_id": self.query_id,
            "topic_prefix": self.prefix,
            "instances": list(self.instances),
            "last_committed_batch": self.last_committed,
            "committed_at": format_instant(self.committed_at),
            "uncommitted_batch": self.uncommitted,
            "offsets": {
                topic: {str(p): o for p, o in sorted(by_partition.items())}
                for topic, by_partition in sorted(self.offsets.items())
            },
            "state_partitions": self.state_partitions,
            "state_operator": self.state_operator,
            "rotation_batch": self.rotation_batch,
        }


def find_query(folder: CheckpointPath) -> CheckpointPath:
    """The query folder of a router checkpoint given as its `checkpoint_dir` (or as the query folder)."""
    if not folder.is_dir():
        raise RouterError(
            f"{folder}: no such folder; give a router's checkpoint_dir (its settings' `checkpoint_dir`, "
            "by default .state/checkpoints/INSTANCE)"
        )
    for candidate in (query_folder(folder), folder):
        if (candidate / "metadata").is_file() and (candidate / "offsets").is_dir():
            return candidate
    found = ", ".join(sorted(p.name for p in folder.iterdir())[:12]) or "nothing"
    raise RouterError(
        f"{folder} is not a router checkpoint: expected a checkpoint_dir holding query/metadata (the "
        f"query's id) and query/offsets/, as `router run` leaves them; it holds {found}"
    )


def summarize(folder: CheckpointPath) -> CheckpointSummary:
    """Read what the router checkpoint at `folder` (`find_query`) holds; see `CheckpointSummary`."""
    query = find_query(folder)
    try:
        query_id = str(json.loads((query / "metadata").read_text(encoding="utf-8"))["id"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        where = query / "metadata"
        raise RouterError(f"{where}: expected Spark's query metadata, JSON with an id: {error}") from error
    committed = max(logged_batches(query / "commits"), default=None)
    planned = max(logged_batches(query / "offsets"), default=None)
    offsets: dict[str, dict[int, int]] = {}
    for source in read_logged_batch(query, committed).sources if committed is not None else ():
        # A Kafka source's offsets are {topic: {partition: offset}}; the tick's is a number.
        if isinstance(source, Mapping):
            for topic, partitions in source.items():
                offsets[str(topic)] = {int(p): int(o) for p, o in partitions.items()}
    parts = [p for p in map(instance_topic_parts, offsets) if p is not None]
    if offsets and not any(kind == "outbound" for _, _, kind in parts):
        raise RouterError(
            f"{query} is a Spark checkpoint, but not a router's: its query reads {sorted(offsets)}, "
            "no instance's outbound topic ({prefix}.{instance}.outbound)"
        )
    instances = tuple(dict.fromkeys(instance for _, instance, kind in parts if kind == "outbound"))
    rotation = [int(p.stem) for p in (query / "rotation").glob("[0-9]*.json")]
    kept_rotation = [b for b in rotation if committed is not None and b <= committed]
    metadata = state_metadata(query)
    committed_at = None
    if committed is not None:
        committed_at = datetime.fromtimestamp(modified(query / "commits" / str(committed)), timezone.utc)
    return CheckpointSummary(
        folder=query,
        query_id=query_id,
        prefix=parts[0][0] if parts else None,
        instances=instances,
        last_committed=committed,
        committed_at=committed_at,
        uncommitted=planned if planned is not None and (committed is None or planned > committed) else None,
        offsets=offsets,
        state_partitions=state_partitions(query),
        state_operator=metadata.get("operatorName"),
        rotation_batch=max(kept_rotation, default=None),
    )


EARLIEST = -2
"""Spark's Kafka source's offset for "the partition's first record", in a `startingOffsets` JSON."""


def starting_offsets(
    drained: CheckpointSummary, partitions: Mapping[str, Sequence[int]]
) -> dict[str, dict[str, int]]:
    """Where a new checkpoint's sources of `partitions` (topic: its partitions) start after `drained`.

    Each partition starts where the drained checkpoint's committed batches read up to, a partition
    it did not read (an instance it did not route, a partition added since) at its first record
    (`EARLIEST`), as Spark's `startingOffsets` JSON takes them. The drained checkpoint must have
    committed a batch and read some of these topics.
    """
    where = drained.folder
    if drained.last_committed is None:
        raise ConfigError(f"the checkpoint {where} to start after has committed no batch: it routed nothing")
    if not any(topic in drained.offsets for topic in partitions):
        ours = ", ".join(sorted(partitions))
        raise ConfigError(
            f"the checkpoint {where} to start after routed {', '.join(drained.instances)} on the topics "
            f"of prefix {drained.prefix}, and read none of this job's topics ({ours}): give the "
            "checkpoint_dir of the router this one replaces"
        )
    return {
        topic: {str(p): drained.offsets.get(topic, {}).get(p, EARLIEST) for p in sorted(ps)}
        for topic, ps in partitions.items()
    }
